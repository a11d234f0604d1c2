// Child-process supervision: spawn with pipes and rlimits in its own process group, wait with a
// deadline, SIGKILL the whole group. Shared by the compile worker pool and the GPU runner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/result.hpp"

namespace crucible::sandbox {

// Limits applied in the child between fork and exec (setrlimit). An empty optional leaves the
// inherited limit alone. Soft and hard limits are set to the same value, except cpu_seconds,
// whose hard limit stays where it was so the child may move its own soft limit per job.
struct ResourceLimits {
  std::optional<std::uint64_t> address_space_bytes;  // RLIMIT_AS
  std::optional<std::uint64_t> cpu_seconds;          // RLIMIT_CPU (soft; SIGXCPU when hit)
  std::optional<std::uint64_t> open_files;           // RLIMIT_NOFILE
  std::optional<std::uint64_t> file_size_bytes;      // RLIMIT_FSIZE (SIGXFSZ when hit)
  std::optional<std::uint64_t> core_bytes = 0;       // RLIMIT_CORE: no core dumps by default
  std::optional<std::uint64_t> processes;            // RLIMIT_NPROC
};

struct SpawnOptions {
  std::filesystem::path executable;  // absolute path; not searched in PATH
  std::vector<std::string> args;     // argv[1..]; argv[0] is the executable's file name
  std::vector<std::string> env;      // the child's whole environment ("K=V"); empty = none
  bool pipe_stdin = true;            // false: /dev/null
  bool pipe_stdout = true;           // false: /dev/null
  bool pipe_stderr = true;           // false: inherit the parent's stderr
  ResourceLimits limits;
  // The child gets SIGKILL when the thread that spawned it exits (Linux PR_SET_PDEATHSIG
  // follows the spawning thread): spawn from a thread that outlives the child.
  bool die_with_parent = true;
};

// How a child ended. Exactly one of exit_code / signal is set.
struct ExitStatus {
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool success() const { return exit_code && *exit_code == 0; }
  std::string describe() const;  // "exit code 3", "signal 9 (Killed)"
};

// A running child's CPU use and scheduling state, as /proc/<pid>/stat reports them.
struct ProcessUsage {
  std::chrono::nanoseconds cpu_time{0};  // user + system, all threads, since the child started
  bool stopped = false;                  // stopped by a signal (SIGSTOP, SIGTSTP...) or traced
};

// One child process, leader of its own process group (pgid == pid). Move-only. The destructor
// SIGKILLs the group and reaps the child, so a ChildProcess never leaks a zombie or a runaway
// grandchild. Not thread-safe except kill_group(), which may race with everything.
class ChildProcess {
 public:
  // Errors: kIo when pipe/fork fails or the executable cannot be executed (the exec errno is
  // reported back through a close-on-exec pipe, so a missing file is an error here, not a
  // mysterious exit code 127).
  static core::Result<ChildProcess> spawn(const SpawnOptions& options);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  int stdin_fd() const { return stdin_fd_; }    // parent's write end, -1 if not piped
  int stdout_fd() const { return stdout_fd_; }  // parent's read end, -1 if not piped
  int stderr_fd() const { return stderr_fd_; }  // parent's read end (non-blocking), -1 if none
  void close_stdin();

  // SIGKILL to the whole process group; safe to call repeatedly and after the child exited.
  void kill_group();

  // Non-blocking: the exit status if the child has ended (and reaps it), else nullopt.
  std::optional<ExitStatus> try_wait();
  // Blocks until the child ends or `timeout` passes; nullopt on timeout (child still running).
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);
  // kill_group() then wait: always returns the final status.
  ExitStatus kill_and_wait();

  bool running() const { return pid_ > 0 && !status_; }
  // The child's CPU time and state now (clock-tick resolution, usually 10 ms); nullopt when
  // /proc cannot tell (not mounted, hidden) or the child has been reaped. Reading it does not
  // reap. Works on a jailed child: it stays in the parent's pid namespace.
  std::optional<ProcessUsage> usage() const;
  // Reads what is available on stderr without blocking, at most max_bytes; "" if none.
  std::string drain_stderr(std::size_t max_bytes = 64 * 1024);

 private:
  ChildProcess() = default;
  void release();

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::optional<ExitStatus> status_;
};

// Turns a raw waitpid status into an ExitStatus.
ExitStatus exit_status_from_wait(int wait_status);

}  // namespace crucible::sandbox
