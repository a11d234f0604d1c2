// Compile result cache: LRU in memory, atomic-rename files on disk.
#include "sandbox/compile_cache.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"
#include "core/msgpack_codec.hpp"
#include "sandbox/frame_pipe.hpp"

namespace crucible::sandbox {

CompileCache::CompileCache(std::size_t memory_entries, std::filesystem::path dir)
    : capacity_(memory_entries), dir_(std::move(dir)) {}

std::optional<CompileOutput> CompileCache::find_in_memory(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->second;
}

std::optional<CompileOutput> CompileCache::find_on_disk(const std::string& key) {
  if (dir_.empty()) return std::nullopt;
  const auto path = path_for(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  core::DecodeLimits limits;
  limits.max_bytes = 256u << 20;
  limits.max_bin_bytes = 256u << 20;
  limits.max_str_bytes = 16u << 20;
  auto frame = read_frame(fd, limits);
  ::close(fd);
  if (!frame || !frame->is_object()) return std::nullopt;
  auto stored_key = frame->find("key");
  auto output = frame->find("output");
  if (stored_key == frame->end() || output == frame->end() || *stored_key != key) {
    return std::nullopt;
  }
  auto parsed = output_from_wire(*output);
  if (!parsed) return std::nullopt;
  std::lock_guard lock(mutex_);
  remember(key, *parsed);
  return *parsed;
}

void CompileCache::store(const std::string& key, const CompileOutput& output) {
  {
    std::lock_guard lock(mutex_);
    remember(key, output);
  }
  if (dir_.empty()) return;
  static std::atomic<unsigned long> counter{0};
  const auto path = path_for(key);
  std::error_code error;
  std::filesystem::create_directories(path.parent_path(), error);
  const auto temporary = path.string() + ".tmp." + std::to_string(::getpid()) + "." +
                         std::to_string(counter.fetch_add(1));
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    core::log_warn("compile cache: cannot write " + temporary + ": " + std::strerror(errno));
    return;
  }
  auto written = write_frame(fd, core::Value{{"key", key}, {"output", output_to_wire(output)}});
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(temporary.c_str(), path.c_str()) != 0) {
    core::log_warn("compile cache: cannot store " + path.string());
    ::unlink(temporary.c_str());
  }
}

std::size_t CompileCache::memory_entries() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

void CompileCache::remember(const std::string& key, const CompileOutput& output) {
  if (capacity_ == 0) return;
  if (auto it = index_.find(key); it != index_.end()) {
    it->second->second = output;
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  order_.emplace_front(key, output);
  index_[key] = order_.begin();
  while (order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

std::filesystem::path CompileCache::path_for(const std::string& key) const {
  return dir_ / key.substr(0, 2) / (key + ".bin");
}

}  // namespace crucible::sandbox
