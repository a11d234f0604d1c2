#include "runner/gpu_gate.hpp"

#include <algorithm>

namespace crucible::runner {

void GpuGate::release(Hold hold, Clock::time_point now) {
  if (hold == Hold::kShared) {
    --shared_;
  } else if (hold == Hold::kExclusive) {
    exclusive_ = false;
    exclusive_seconds_ += std::chrono::duration<double>(now - exclusive_since_).count();
  }
}

std::chrono::steady_clock::duration GpuGate::change(Hold from, Hold to) {
  const auto started = Clock::now();
  std::unique_lock lock(mutex_);
  if (from == to) return Clock::duration::zero();
  release(from, started);
  changed_.notify_all();
  if (to == Hold::kShared) {
    changed_.wait(lock, [&] { return !exclusive_ && exclusive_waiting_ == 0; });
    ++shared_;
  } else if (to == Hold::kExclusive) {
    ++exclusive_waiting_;
    changed_.wait(lock, [&] { return !exclusive_ && shared_ == 0; });
    --exclusive_waiting_;
    exclusive_ = true;
    exclusive_since_ = Clock::now();
    ++exclusive_holds_;
  }
  const auto waited = Clock::now() - started;
  if (to != Hold::kNone) {
    const double seconds = std::chrono::duration<double>(waited).count();
    ++acquired_;
    wait_seconds_ += seconds;
    max_wait_seconds_ = std::max(max_wait_seconds_, seconds);
  }
  return waited;
}

core::Value GpuGate::stats() const {
  std::lock_guard lock(mutex_);
  double exclusive = exclusive_seconds_;
  if (exclusive_) {
    exclusive += std::chrono::duration<double>(Clock::now() - exclusive_since_).count();
  }
  return core::Value{{"shared", shared_},
                     {"exclusive", exclusive_},
                     {"exclusive_waiting", exclusive_waiting_},
                     {"exclusive_s", exclusive},
                     {"exclusive_holds", exclusive_holds_},
                     {"acquired", acquired_},
                     {"wait_s", wait_seconds_},
                     {"max_wait_s", max_wait_seconds_}};
}

}  // namespace crucible::runner
