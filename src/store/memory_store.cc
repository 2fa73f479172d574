#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "base/time.h"
#include "chorus/store.h"
#include "store/store_common.h"

namespace chorus {

struct MemoryStore::Impl {
  std::mutex mu;
  std::condition_variable changed;                    // notified on every set/add
  std::unordered_map<std::string, std::string> data;  // guarded by mu

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys) {
      if (!data.count(k)) out.push_back(k);
    }
    return out;
  }

  // Waits on `changed` until pred() holds or the deadline passes; returns pred().
  template <class Pred>
  bool wait_for(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout, Pred pred) {
    auto deadline = base::Deadline::after(std::max(timeout, std::chrono::milliseconds(0)));
    while (!pred()) {
      if (deadline.expired()) return false;
      // Sliced so that a "forever" deadline never reaches the condition variable's clock arithmetic.
      changed.wait_until(lock, std::min(deadline.at(), base::Clock::now() + std::chrono::hours(1)));
    }
    return true;
  }
};

MemoryStore::MemoryStore() : impl_(std::make_unique<Impl>()) {}
MemoryStore::~MemoryStore() = default;

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->data[key] = value;
  }
  impl_->changed.notify_all();
}

std::string MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->wait_for(lock, timeout, [&] { return impl_->data.count(key) > 0; })) {
    store::throw_timeout("MemoryStore get", {key}, timeout);
  }
  return impl_->data.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->data.find(key);
    result = store::add_to_value(it == impl_->data.end() ? nullptr : &it->second, delta, "MemoryStore", key);
    impl_->data[key] = std::to_string(result);
  }
  impl_->changed.notify_all();
  return result;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->missing(keys).empty();
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->wait_for(lock, timeout, [&] { return impl_->missing(keys).empty(); })) {
    store::throw_timeout("MemoryStore wait", impl_->missing(keys), timeout);
  }
}

bool MemoryStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->data.erase(key) > 0;
}

}  // namespace chorus
