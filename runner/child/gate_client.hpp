// The runner's side of the GPU gate (runner/gpu_gate.hpp): before it times, a runner asks the
// server for the GPU to itself ({gpu: "exclusive"} on its report pipe, answered {gpu: "granted"}
// on its job pipe); before more GPU work after timing (the model check's set-up) it asks to
// share again. Without --gpu-gate (a runner started by hand, the device tests) it is alone on
// its GPU as far as it knows and every request is granted at once.
#pragma once

namespace crucible::runner::child {

class GateClient {
 public:
  GateClient() = default;  // not connected: every request granted at once
  GateClient(int requests_fd, int grants_fd) : requests_fd_(requests_fd), grants_fd_(grants_fd) {}

  // Blocks until the GPU is held as asked; returns the milliseconds waited (0 when it was
  // already held so). A server that is gone or answers nonsense ends the process (exit 2): no
  // job can be measured honestly without it.
  double exclusive() { return request(true); }
  double shared() { return request(false); }
  bool holds_exclusive() const { return exclusive_; }
  // A new job starts shared (the server took the gate for it before sending it).
  void job_started() { exclusive_ = false; }

 private:
  double request(bool exclusive);

  int requests_fd_ = -1;
  int grants_fd_ = -1;
  bool exclusive_ = false;
};

}  // namespace crucible::runner::child
