#include <fmt/format.h>

#include "base/error.h"
#include "chorus/store.h"

namespace chorus {

namespace {
// Keys are joined as "<prefix>/<key>" (torch.distributed's layout), so nested prefixes read like paths
// ("chorus/c0/rank3"). A prefix that already ends in '/' is used as it is rather than doubling the slash.
std::string join(const std::string& prefix, const std::string& key) {
  if (prefix.empty() || prefix.back() == '/') return prefix + key;
  return prefix + "/" + key;
}
}  // namespace

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  if (!base_) {
    base::throw_error(ErrorCode::InvalidArgument, fmt::format("PrefixStore '{}': base store is null", prefix_));
  }
  timeout_ = base_->timeout();
}

PrefixStore::~PrefixStore() = default;

void PrefixStore::set(const std::string& key, const std::string& value) { base_->set(join(prefix_, key), value); }

std::string PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->get(join(prefix_, key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(join(prefix_, key), delta); }

bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(join(prefix_, k));
  return base_->check(full);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(join(prefix_, k));
  base_->wait(full, timeout);
}

bool PrefixStore::erase(const std::string& key) { return base_->erase(join(prefix_, key)); }

}  // namespace chorus
