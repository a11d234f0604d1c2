// The GPU gate: several runners share one GPU, and only timing needs it to itself. A runner
// holds the gate shared while it checks correctness (module loads, input generation, the
// reference and candidate runs, host comparisons: mostly host work that overlaps well), and
// exclusive while it times, so no other context's kernel, copy or context start ever runs
// inside a timing window. Exclusive requests go first: once one waits, no new shared holder is
// let in, so a timing window waits at most for the correctness runs already under way.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/value.hpp"

namespace crucible::runner {

class GpuGate {
 public:
  enum class Hold { kNone, kShared, kExclusive };

  // Moves a holder from `from` to `to`, blocking until `to` may be held; returns how long it
  // waited. Giving up a hold never waits. Thread-safe.
  std::chrono::steady_clock::duration change(Hold from, Hold to);

  // {shared, exclusive, exclusive_waiting, exclusive_s, exclusive_holds, acquired, wait_s,
  //  max_wait_s}: the holders now; the seconds the GPU was held exclusive (timing) and how
  //  often; the holds taken and the time spent waiting for them (in all, the longest).
  core::Value stats() const;

  // Holds the gate shared for its lifetime (a runner's start or end).
  class SharedHold {
   public:
    explicit SharedHold(GpuGate& gate) : gate_(gate) { gate_.change(Hold::kNone, Hold::kShared); }
    ~SharedHold() { gate_.change(Hold::kShared, Hold::kNone); }
    SharedHold(const SharedHold&) = delete;
    SharedHold& operator=(const SharedHold&) = delete;

   private:
    GpuGate& gate_;
  };

 private:
  using Clock = std::chrono::steady_clock;
  void release(Hold hold, Clock::time_point now);  // with mutex_ held

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int shared_ = 0;
  bool exclusive_ = false;
  int exclusive_waiting_ = 0;
  Clock::time_point exclusive_since_;
  double exclusive_seconds_ = 0.0;
  std::uint64_t exclusive_holds_ = 0;
  std::uint64_t acquired_ = 0;
  double wait_seconds_ = 0.0;
  double max_wait_seconds_ = 0.0;
};

}  // namespace crucible::runner
