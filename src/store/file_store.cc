#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "base/error.h"
#include "base/net.h"
#include "base/time.h"
#include "chorus/store.h"
#include "store/store_common.h"

namespace chorus {

namespace {

// Directory layout. A key's bytes are percent-encoded (only [A-Za-z0-9_-] stay as they are), so any byte
// string, including "", "." and "a/b", becomes a safe name. Encoded names longer than kChunk are split into
// nested directories, keeping every path component under NAME_MAX. Files start with 'k', directories with
// 'd', and our own files (".lock", ".tmp-*") with '.', which an encoded key never contains, so they can't
// collide.
constexpr size_t kChunk = 200;
constexpr auto kMaxPoll = std::chrono::milliseconds(10);

std::string encode(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Reads the whole file, or nullopt if it does not exist.
std::optional<std::string> read_file(const std::string& path) {
  base::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    base::throw_errno(fmt::format("FileStore: open {}", path), errno);
  }
  std::string data;
  char buf[64 * 1024];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n == 0) return data;
    if (n < 0) {
      if (errno == EINTR) continue;
      base::throw_errno(fmt::format("FileStore: read {}", path), errno);
    }
    data.append(buf, static_cast<size_t>(n));
  }
}

bool exists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  base::throw_errno(fmt::format("FileStore: stat {}", path), errno);
}

// Sleeps for the current backoff (doubling up to kMaxPoll), never past the deadline.
void backoff_sleep(std::chrono::microseconds& backoff, const base::Deadline& deadline) {
  std::this_thread::sleep_until(std::min(deadline.at(), base::Clock::now() + backoff));
  backoff = std::min<std::chrono::microseconds>(backoff * 2, kMaxPoll);
}

}  // namespace

struct FileStore::Impl {
  std::string dir;
  // Temp names must be unique across threads, processes and hosts sharing the directory.
  uint64_t nonce = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  std::atomic<uint64_t> counter{0};

  std::string path_of(const std::string& key, bool create_dirs) const {
    std::string enc = encode(key);
    std::string path = dir;
    size_t pos = 0;
    while (enc.size() - pos > kChunk) {
      path += "/d" + enc.substr(pos, kChunk);
      pos += kChunk;
      if (create_dirs && ::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        base::throw_errno(fmt::format("FileStore: mkdir {}", path), errno);
      }
    }
    return path + "/k" + enc.substr(pos);
  }

  // flock serialises writers across processes; each call opens its own descriptor, so threads of one process
  // are serialised too (flock locks belong to the open file description).
  base::Fd lock() const {
    std::string path = dir + "/.lock";
    base::Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd.valid()) base::throw_errno(fmt::format("FileStore: open {}", path), errno);
    while (::flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) base::throw_errno(fmt::format("FileStore: flock {}", path), errno);
    }
    return fd;
  }

  // Readers never take the lock, so a value must appear all at once: write a temp file, then rename.
  void write_atomic(const std::string& path, const std::string& value) {
    std::string tmp = fmt::format("{}/.tmp-{}-{:x}-{}", dir, ::getpid(), nonce, counter++);
    base::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd.valid()) base::throw_errno(fmt::format("FileStore: create {}", tmp), errno);
    size_t done = 0;
    while (done < value.size()) {
      ssize_t n = ::write(fd.get(), value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        base::throw_errno(fmt::format("FileStore: write {}", tmp), err);
      }
      done += static_cast<size_t>(n);
    }
    fd.reset();
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      base::throw_errno(fmt::format("FileStore: rename {} to {}", tmp, path), err);
    }
  }

  std::string name(const char* op) const { return fmt::format("FileStore {} {}", dir, op); }
};

FileStore::FileStore(const std::string& directory) : impl_(std::make_unique<Impl>()) {
  if (directory.empty()) base::throw_error(ErrorCode::InvalidArgument, "FileStore: the directory is empty");
  impl_->dir = directory;
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    base::throw_error(ErrorCode::SystemError,
                      fmt::format("FileStore: cannot create directory {}: {}", directory, ec.message()));
  }
}

FileStore::~FileStore() = default;

void FileStore::set(const std::string& key, const std::string& value) {
  base::Fd lock = impl_->lock();  // so that a set is never lost inside a concurrent add
  impl_->write_atomic(impl_->path_of(key, true), value);
}

std::string FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto deadline = base::Deadline::after(std::max(timeout, std::chrono::milliseconds(0)));
  std::string path = impl_->path_of(key, false);
  std::chrono::microseconds backoff(100);
  while (true) {
    if (auto value = read_file(path)) return *value;
    if (deadline.expired()) store::throw_timeout(impl_->name("get"), {key}, timeout);
    backoff_sleep(backoff, deadline);
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  base::Fd lock = impl_->lock();
  std::string path = impl_->path_of(key, true);
  auto current = read_file(path);
  int64_t result = store::add_to_value(current ? &*current : nullptr, delta, "FileStore " + impl_->dir, key);
  impl_->write_atomic(path, std::to_string(result));
  return result;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    if (!exists(impl_->path_of(k, false))) return false;
  }
  return true;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = base::Deadline::after(std::max(timeout, std::chrono::milliseconds(0)));
  std::vector<std::string> missing = keys;
  std::chrono::microseconds backoff(100);
  while (true) {
    std::erase_if(missing, [&](const std::string& k) { return exists(impl_->path_of(k, false)); });
    if (missing.empty()) return;
    if (deadline.expired()) store::throw_timeout(impl_->name("wait"), missing, timeout);
    backoff_sleep(backoff, deadline);
  }
}

bool FileStore::erase(const std::string& key) {
  base::Fd lock = impl_->lock();
  std::string path = impl_->path_of(key, false);
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  base::throw_errno(fmt::format("FileStore: unlink {}", path), errno);
}

}  // namespace chorus
