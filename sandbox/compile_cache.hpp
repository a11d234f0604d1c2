// Cache of compile results: an in-memory LRU in front of an optional on-disk folder.
#pragma once

#include <cstddef>
#include <filesystem>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "sandbox/compile_job.hpp"

namespace crucible::sandbox {

// Keys are compile_cache_key() hex strings. Disk entries live at <dir>/<key[0:2]>/<key>.bin,
// one frame each (a msgpack map holding the key and the output with its cubin), written to a
// temporary name and renamed into place, so readers never see a torn entry and concurrent
// writers (several servers sharing the folder) are safe. A corrupt or mismatched file counts
// as a miss. The folder is never pruned here. Thread-safe.
class CompileCache {
 public:
  // memory_entries 0 disables the memory level; an empty dir disables the disk level.
  CompileCache(std::size_t memory_entries, std::filesystem::path dir);

  std::optional<CompileOutput> find_in_memory(const std::string& key);
  // Looks on disk and, when found, promotes the entry to memory.
  std::optional<CompileOutput> find_on_disk(const std::string& key);
  // Stores in both levels. Disk write failures are logged, not reported.
  void store(const std::string& key, const CompileOutput& output);

  std::size_t memory_entries() const;
  bool has_disk() const { return !dir_.empty(); }

 private:
  void remember(const std::string& key, const CompileOutput& output);  // mutex held
  std::filesystem::path path_for(const std::string& key) const;

  const std::size_t capacity_;
  const std::filesystem::path dir_;
  mutable std::mutex mutex_;
  std::list<std::pair<std::string, CompileOutput>> order_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, CompileOutput>>::iterator>
      index_;
};

}  // namespace crucible::sandbox
