// The host's copies of generated input values, cached across the jobs of one runner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "tasks/task.hpp"

namespace crucible::runner::child {

// Input values are a pure function of (generator, dtype, seed, index), so they are generated in
// parallel slices and kept: the steps of one episode share a seed and reuse them. The cache is
// bounded by bytes and forgets the least recently used entry first.
class HostValueCache {
 public:
  using Bytes = std::shared_ptr<const std::vector<std::byte>>;
  static HostValueCache& instance() {
    static HostValueCache cache;
    return cache;
  }
  // The values of `count` elements drawn with `seed`, generated in parallel slices on a miss.
  // Throws StepFailure (infra_error) when the generator refuses.
  Bytes get(const tasks::GeneratorSpec& spec, core::DType dtype, std::size_t count,
            std::uint64_t seed, const std::string& key);

 private:
  static constexpr std::size_t kCapacityBytes = std::size_t{4} << 30;
  struct Entry {
    Bytes bytes;
    std::uint64_t last_use = 0;
  };
  std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::size_t bytes_ = 0;
  std::uint64_t clock_ = 0;
};

}  // namespace crucible::runner::child
