#include "runner/child/host_values.hpp"

#include <algorithm>
#include <span>
#include <thread>

#include "runner/child/step_failure.hpp"
#include "tasks/generators.hpp"

namespace crucible::runner::child {

HostValueCache::Bytes HostValueCache::get(const tasks::GeneratorSpec& spec, core::DType dtype,
                                          std::size_t count, std::uint64_t seed,
                                          const std::string& key) {
  {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(key);
    if (it != entries_.end()) {
      it->second.last_use = ++clock_;
      return it->second.bytes;
    }
  }
  auto bytes = std::make_shared<std::vector<std::byte>>(count * core::dtype_size(dtype));
  const std::size_t threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
  // Slices start at even indices: randn draws elements in pairs.
  const std::size_t slice = ((count / threads + 1) + 1) & ~std::size_t{1};
  std::vector<std::thread> workers;
  std::vector<core::Status> results(threads);
  const std::size_t esize = core::dtype_size(dtype);
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t first = t * slice;
    if (first >= count) break;
    const std::size_t n = std::min(slice, count - first);
    workers.emplace_back([&, t, first, n] {
      results[t] = tasks::generate_into(
          spec, dtype, seed, std::span<std::byte>(bytes->data() + first * esize, n * esize), first);
    });
  }
  for (auto& worker : workers) worker.join();
  for (const auto& result : results) {
    if (!result) fail(core::StepStatus::kInfraError, "input values: " + result.error().message);
  }
  std::lock_guard lock(mutex_);
  bytes_ += bytes->size();
  entries_[key] = Entry{bytes, ++clock_};
  while (bytes_ > kCapacityBytes && entries_.size() > 1) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    bytes_ -= oldest->second.bytes->size();
    entries_.erase(oldest);
  }
  return bytes;
}

}  // namespace crucible::runner::child
