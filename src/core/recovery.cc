// Recovery after a failure: shrink() to the survivors, and replace_lost() / join_replacement() to bring the
// communicator back to its size with new processes. See docs/design.md, "Reliability".
#include <algorithm>
#include <charconv>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/logging.h"
#include "core/communicator_impl.h"

namespace chorus {

namespace {

constexpr const char* kRequestsKey = "chorus/recovery/requests";
constexpr const char* kClaimsKey = "chorus/recovery/claims";

std::string request_key(int64_t index) { return fmt::format("chorus/recovery/request/{}", index); }

std::string format_ranks(const std::vector<int>& ranks) { return fmt::format("{}", fmt::join(ranks, ",")); }

// Parses "1,3,4" (empty: none). Malformed entries are a Mismatch: another program wrote the key.
std::vector<int> parse_ranks(std::string_view text, std::string_view key) {
  std::vector<int> out;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    int v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size()) {
      base::throw_error(ErrorCode::Mismatch, fmt::format("recovery: unreadable rank list '{}' at store key {}", text, key));
    }
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

// The ranks a failure record or error proves dead: the culprit of a PeerLost.
void add_culprit(std::set<int>& dead, ErrorCode code, int culprit, int size) {
  if (code == ErrorCode::PeerLost && culprit >= 0 && culprit < size) dead.insert(culprit);
}

// What this rank knows: the culprit of its own failure, those of every failure record in the store, and the
// ranks the caller excludes.
std::set<int> known_dead(Communicator::Impl& impl, const std::vector<int>& exclude) {
  std::set<int> dead;
  for (int r : exclude) {
    if (r < 0 || r >= impl.size) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("shrink: excluded rank {} is out of range for a communicator of {} ranks", r,
                                    impl.size));
    }
    dead.insert(r);
  }
  if (impl.failed.load(std::memory_order_acquire)) {
    std::lock_guard<core::ExecMutex> lock(impl.exec_mu);
    if (impl.failure) add_culprit(dead, impl.failure->code(), impl.failure->peer(), impl.size);
  }
  for (int r = 0; r < impl.size; ++r) {
    std::string key = fmt::format("{}failed/{}", impl.key_prefix, r);
    if (!impl.store->check({key})) continue;
    std::string rec = impl.store->get(key, std::chrono::seconds(5));
    size_t a = rec.find('\n'), b = rec.find('\n', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    int code = 0, culprit = -1;
    std::from_chars(rec.data(), rec.data() + a, code);
    std::from_chars(rec.data() + a + 1, rec.data() + b, culprit);
    add_culprit(dead, static_cast<ErrorCode>(code), culprit, impl.size);
  }
  dead.erase(impl.rank);
  return dead;
}

struct Agreement {
  std::string base;          // store keys of this recovery: "<prefix>shrink/<epoch>/"
  std::vector<int> members;  // survivors, ascending (old ranks)
  std::vector<int> lost;     // the others, ascending
};

// The survivors agree on who is alive (docs/design.md, "Shrink"). `kind` ("shrink" or "replace") must be
// the same on every survivor.
Agreement agree(Communicator::Impl& impl, const char* kind, const std::vector<int>& exclude) {
  const auto timeout = impl.config.timeout;
  const auto start = std::chrono::steady_clock::now();
  const auto grace_end = start + std::min(impl.config.shrink_grace, timeout);
  const auto deadline = start + timeout;
  Store& st = *impl.store;

  Agreement ag;
  ag.base = fmt::format("{}shrink/{}/", impl.key_prefix, impl.shrinks++);
  std::set<int> dead = known_dead(impl, exclude);
  st.set(fmt::format("{}alive/{}", ag.base, impl.rank), format_ranks({dead.begin(), dead.end()}));
  base::log_info("{}: looking for the survivors; known dead: [{}]", kind, format_ranks({dead.begin(), dead.end()}));

  const std::string members_key = ag.base + "members";
  std::string decision;
  auto pause = std::chrono::milliseconds(1);
  std::set<int> alive{impl.rank};
  while (true) {
    if (st.check({members_key})) {
      decision = st.get(members_key, std::chrono::seconds(5));
      break;
    }
    bool undecided = false;
    for (int r = 0; r < impl.size; ++r) {
      if (alive.count(r)) continue;
      std::string key = fmt::format("{}alive/{}", ag.base, r);
      if (st.check({key})) {
        for (int d : parse_ranks(st.get(key, std::chrono::seconds(5)), key)) {
          if (d >= 0 && d < impl.size && d != r) dead.insert(d);
        }
        alive.insert(r);
      } else if (!dead.count(r)) {
        undecided = true;
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (!undecided || now >= grace_end) {
      if (st.add(ag.base + "decider", 1) == 1) {
        std::vector<int> members;
        for (int r : alive) {
          if (!dead.count(r)) members.push_back(r);
        }
        decision = fmt::format("{}|{}", kind, format_ranks(members));
        st.set(members_key, decision);
      } else {
        decision = st.get(members_key, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      }
      break;
    }
    if (now >= deadline) {
      base::throw_error(ErrorCode::Timeout, fmt::format("{}: the survivors did not agree within {} ms", kind,
                                                        timeout.count()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }

  size_t bar = decision.find('|');
  if (bar == std::string::npos || decision.substr(0, bar) != kind) {
    base::throw_error(ErrorCode::Mismatch,
                      fmt::format("{}: the other survivors called {} (every survivor must call the same one)", kind,
                                  decision.substr(0, bar)));
  }
  ag.members = parse_ranks(std::string_view(decision).substr(bar + 1), members_key);
  if (std::find(ag.members.begin(), ag.members.end(), impl.rank) == ag.members.end()) {
    base::throw_error(ErrorCode::Aborted,
                      fmt::format("{}: rank {} was left out: the survivors [{}] decided without it (it was excluded, "
                                  "or called {} after the grace period of {} ms, CHORUS_SHRINK_GRACE_MS)",
                                  kind, impl.rank, format_ranks(ag.members), kind, impl.config.shrink_grace.count()));
  }
  for (int r = 0; r < impl.size; ++r) {
    if (std::find(ag.members.begin(), ag.members.end(), r) == ag.members.end()) ag.lost.push_back(r);
  }
  base::log_info("{}: survivors [{}], lost [{}]", kind, format_ranks(ag.members), format_ranks(ag.lost));
  return ag;
}

// The one-thread-at-a-time check of a recovery call (it works on a failed communicator, so it does not use the
// collectives' ApiScope), after which queued operations finish (or fail fast).
std::unique_lock<core::ApiMutex> enter_recovery(Communicator::Impl& impl, const char* op) {
  auto api = core::enter_api(impl, op);
  if (impl.engine) impl.engine->drain();
  return api;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::shrink(const std::vector<int>& exclude) {
  Impl& impl = *impl_;
  base::LogTag log_tag(&impl.label);
  auto api = enter_recovery(impl, "shrink");
  Agreement ag = agree(impl, "shrink", exclude);
  int new_rank = static_cast<int>(std::find(ag.members.begin(), ag.members.end(), impl.rank) - ag.members.begin());
  CommOptions opts = impl.options;
  opts.name = impl.options.name + ".shrink";
  auto child = create(std::make_shared<PrefixStore>(ag.base + "comm/", impl.store), new_rank,
                      static_cast<int>(ag.members.size()), opts);
  child->impl_->keepalive = impl.keepalive;
  return child;
}

std::unique_ptr<Communicator> Communicator::replace_lost(const std::vector<int>& exclude) {
  Impl& impl = *impl_;
  base::LogTag log_tag(&impl.label);
  auto api = enter_recovery(impl, "replace_lost");
  Agreement ag = agree(impl, "replace", exclude);
  const std::string prefix = ag.base + "replace/";
  // The survivor that published the decision also publishes the request the newcomers claim from. Every
  // survivor tries; the "published" counter lets exactly one through.
  if (!ag.lost.empty() && impl.store->add(ag.base + "published", 1) == 1) {
    int64_t index = impl.store->add(kRequestsKey, 1);
    impl.store->set(request_key(index), fmt::format("{}\n{}\n{}", prefix, impl.size, format_ranks(ag.lost)));
    base::log_info("replace_lost: waiting for {} new process(es) to take rank(s) [{}] (request {})", ag.lost.size(),
                   format_ranks(ag.lost), index);
  }
  CommOptions opts = impl.options;
  auto child = create(std::make_shared<PrefixStore>(prefix, impl.store), impl.rank, impl.size, opts);
  child->impl_->keepalive = impl.keepalive;
  return child;
}

std::unique_ptr<Communicator> Communicator::join_replacement(std::shared_ptr<Store> store,
                                                             const CommOptions& options) {
  if (!store) base::throw_error(ErrorCode::InvalidArgument, "join_replacement: store is null");
  core::Config config = core::resolve_config(options);
  auto deadline = base::Deadline::after(config.timeout);
  const int64_t claim = store->add(kClaimsKey, 1);  // 1-based, over every request ever published
  int64_t seen = 0;
  for (int64_t index = 1;; ++index) {
    std::string key = request_key(index);
    std::string req;
    try {
      req = store->get(key, deadline.remaining());
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      base::throw_error(ErrorCode::Timeout,
                        fmt::format("join_replacement: no lost rank to take within {} ms (claim #{}): the survivors "
                                    "have not called replace_lost()",
                                    config.timeout.count(), claim));
    }
    size_t a = req.find('\n'), b = req.find('\n', a + 1);
    if (a == std::string::npos || b == std::string::npos) {
      base::throw_error(ErrorCode::Mismatch, fmt::format("join_replacement: unreadable request at store key {}", key));
    }
    int size = 0;
    std::from_chars(req.data() + a + 1, req.data() + b, size);
    std::vector<int> lost = parse_ranks(std::string_view(req).substr(b + 1), key);
    if (claim <= seen + static_cast<int64_t>(lost.size())) {
      int rank = lost[static_cast<size_t>(claim - seen - 1)];
      base::log_info("join_replacement: taking rank {} of {} (request {})", rank, size, index);
      return create(std::make_shared<PrefixStore>(req.substr(0, a), std::move(store)), rank, size, options);
    }
    seen += static_cast<int64_t>(lost.size());
  }
}

}  // namespace chorus
