// Child-process supervision on plain POSIX: fork/execve, pipes, setrlimit, process groups,
// pidfd-based waiting with a deadline.
#include "sandbox/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

namespace crucible::sandbox {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = ::syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
#else
  (void)pid;
  return -1;
#endif
}

// Everything below runs in the forked child of a possibly multi-threaded parent: only
// async-signal-safe calls until execve.
[[noreturn]] void child_fail(int error_fd, int error) {
  ssize_t ignored = ::write(error_fd, &error, sizeof error);
  (void)ignored;
  ::_exit(127);
}

void child_set_limit(int error_fd, int resource, const std::optional<std::uint64_t>& value,
                     bool keep_hard) {
  if (!value) return;
  struct rlimit current {};
  if (::getrlimit(resource, &current) != 0) child_fail(error_fd, errno);
  struct rlimit wanted {};
  wanted.rlim_cur = static_cast<rlim_t>(*value);
  wanted.rlim_max = keep_hard ? current.rlim_max : static_cast<rlim_t>(*value);
  // Never ask for more than the hard limit we already have: that needs CAP_SYS_RESOURCE.
  if (current.rlim_max != RLIM_INFINITY) {
    if (wanted.rlim_cur > current.rlim_max) wanted.rlim_cur = current.rlim_max;
    if (wanted.rlim_max > current.rlim_max) wanted.rlim_max = current.rlim_max;
  }
  if (::setrlimit(resource, &wanted) != 0) child_fail(error_fd, errno);
}

[[noreturn]] void run_child(const SpawnOptions& options, char* const* argv, char* const* envp,
                            const int child_fds[3], int error_fd, pid_t parent) {
  if (::setpgid(0, 0) != 0) child_fail(error_fd, errno);
  if (options.die_with_parent) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(error_fd, errno);
    if (::getppid() != parent) ::_exit(127);  // the parent is already gone
  }
  // Signal mask and ignored dispositions survive execve; give the child a clean slate.
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::sigaction(sig, &default_action, nullptr);
  }
  for (int target = 0; target < 3; ++target) {
    int fd = child_fds[target];
    if (fd < 0) continue;  // inherit
    if (fd == target) {
      ::fcntl(fd, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
    } else if (::dup2(fd, target) < 0) {
      child_fail(error_fd, errno);
    }
  }
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer reserves terabytes of shadow address space when a program starts, so a
  // sanitizer build runs its children without the address-space cap (the deadline, the CPU
  // limit and the others still apply).
  constexpr bool kCapAddressSpace = false;
#else
  constexpr bool kCapAddressSpace = true;
#endif
  if (kCapAddressSpace) {
    child_set_limit(error_fd, RLIMIT_AS, options.limits.address_space_bytes, false);
  }
  child_set_limit(error_fd, RLIMIT_CPU, options.limits.cpu_seconds, true);
  child_set_limit(error_fd, RLIMIT_NOFILE, options.limits.open_files, false);
  child_set_limit(error_fd, RLIMIT_FSIZE, options.limits.file_size_bytes, false);
  child_set_limit(error_fd, RLIMIT_CORE, options.limits.core_bytes, false);
  child_set_limit(error_fd, RLIMIT_NPROC, options.limits.processes, false);
  // Close every descriptor the parent had open (other libraries may not use O_CLOEXEC),
  // except the error pipe, which closes itself on a successful exec.
#ifdef SYS_close_range
  if (error_fd > 3) ::syscall(SYS_close_range, 3u, static_cast<unsigned>(error_fd - 1), 0u);
  ::syscall(SYS_close_range, static_cast<unsigned>(error_fd + 1), ~0u, 0u);
#endif
  ::execve(argv[0], argv, envp);
  child_fail(error_fd, errno);
}

}  // namespace

std::string ExitStatus::describe() const {
  if (exit_code) return "exit code " + std::to_string(*exit_code);
  if (signal) {
    const char* name = ::strsignal(*signal);
    return "signal " + std::to_string(*signal) + " (" + (name ? name : "unknown") + ")";
  }
  return "unknown status";
}

ExitStatus exit_status_from_wait(int wait_status) {
  ExitStatus status;
  if (WIFEXITED(wait_status)) {
    status.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    status.signal = WTERMSIG(wait_status);
  } else {
    status.exit_code = -1;
  }
  return status;
}

core::Result<ChildProcess> ChildProcess::spawn(const SpawnOptions& options) {
  using core::ErrorCode;
  // argv and envp are built before fork: the child must not allocate.
  std::vector<std::string> arg_storage;
  arg_storage.push_back(options.executable.string());
  for (const auto& arg : options.args) arg_storage.push_back(arg);
  std::vector<char*> argv;
  for (auto& arg : arg_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = options.env;
  std::vector<char*> envp;
  for (auto& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);

  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  int exec_pipe[2] = {-1, -1};
  int null_fd = -1;
  auto close_all = [&] {
    for (int* fd : {&in_pipe[0], &in_pipe[1], &out_pipe[0], &out_pipe[1], &err_pipe[0],
                    &err_pipe[1], &exec_pipe[0], &exec_pipe[1], &null_fd}) {
      close_fd(*fd);
    }
  };
  auto fail = [&](const char* what) {
    int error = errno;
    close_all();
    return core::Result<ChildProcess>(ErrorCode::kIo,
                                      std::string(what) + ": " + std::strerror(error));
  };
  if (options.pipe_stdin && ::pipe2(in_pipe, O_CLOEXEC) != 0) return fail("pipe");
  if (options.pipe_stdout && ::pipe2(out_pipe, O_CLOEXEC) != 0) return fail("pipe");
  if (options.pipe_stderr && ::pipe2(err_pipe, O_CLOEXEC) != 0) return fail("pipe");
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) return fail("pipe");
  if (!options.pipe_stdin || !options.pipe_stdout) {
    null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0) return fail("open /dev/null");
  }
  const int child_fds[3] = {options.pipe_stdin ? in_pipe[0] : null_fd,
                            options.pipe_stdout ? out_pipe[1] : null_fd,
                            options.pipe_stderr ? err_pipe[1] : -1};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return fail("fork");
  if (pid == 0) run_child(options, argv.data(), envp.data(), child_fds, exec_pipe[1], parent);

  // Parent. Also set the group from this side so kill_group() works even before the child
  // has run setpgid (EACCES after exec is fine: the child did it itself).
  ::setpgid(pid, pid);
  close_fd(exec_pipe[1]);
  int exec_error = 0;
  ssize_t got;
  do {
    got = ::read(exec_pipe[0], &exec_error, sizeof exec_error);
  } while (got < 0 && errno == EINTR);
  close_fd(in_pipe[0]);
  close_fd(out_pipe[1]);
  close_fd(err_pipe[1]);
  close_fd(null_fd);
  close_fd(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    int ignored_status = 0;
    ::waitpid(pid, &ignored_status, 0);
    close_all();
    return core::Result<ChildProcess>(
        ErrorCode::kIo,
        "cannot start " + options.executable.string() + ": " + std::strerror(exec_error));
  }

  ChildProcess child;
  child.pid_ = pid;
  child.pidfd_ = open_pidfd(pid);
  child.stdin_fd_ = in_pipe[1];
  child.stdout_fd_ = out_pipe[0];
  child.stderr_fd_ = err_pipe[0];
  if (child.stderr_fd_ >= 0) {
    ::fcntl(child.stderr_fd_, F_SETFL, ::fcntl(child.stderr_fd_, F_GETFL) | O_NONBLOCK);
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    release();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    stdin_fd_ = std::exchange(other.stdin_fd_, -1);
    stdout_fd_ = std::exchange(other.stdout_fd_, -1);
    stderr_fd_ = std::exchange(other.stderr_fd_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

ChildProcess::~ChildProcess() { release(); }

void ChildProcess::release() {
  if (pid_ > 0 && !status_) kill_and_wait();
  close_fd(stdin_fd_);
  close_fd(stdout_fd_);
  close_fd(stderr_fd_);
  close_fd(pidfd_);
  pid_ = -1;
}

void ChildProcess::close_stdin() { close_fd(stdin_fd_); }

void ChildProcess::kill_group() {
  // While the leader is unreaped its pid cannot be reused, so the group id is still ours.
  if (pid_ > 0 && !status_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);  // in case the child never got to setpgid
  }
}

std::optional<ExitStatus> ChildProcess::try_wait() {
  if (status_) return status_;
  if (pid_ <= 0) return std::nullopt;
  int wait_status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &wait_status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got == pid_) {
    // Take any grandchildren down with it before the group id can be reused.
    ::kill(-pid_, SIGKILL);
    status_ = exit_status_from_wait(wait_status);
  } else if (got < 0) {
    status_ = ExitStatus{};  // not our child any more (ECHILD): nothing left to wait for
    status_->exit_code = -1;
  }
  return status_;
}

std::optional<ExitStatus> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto status = try_wait()) return status;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    if (pidfd_ >= 0) {
      struct pollfd entry {};
      entry.fd = pidfd_;
      entry.events = POLLIN;
      ::poll(&entry, 1, static_cast<int>(left));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<long long>(left, 5)));
    }
  }
}

ExitStatus ChildProcess::kill_and_wait() {
  if (status_) return *status_;
  kill_group();
  while (true) {
    if (auto status = wait_for(std::chrono::milliseconds(1000))) return *status;
    kill_group();
  }
}

std::optional<ProcessUsage> ChildProcess::usage() const {
  if (pid_ <= 0 || status_) return std::nullopt;
  const std::string path = "/proc/" + std::to_string(pid_) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buffer[1024];
  ssize_t got;
  do {
    got = ::read(fd, buffer, sizeof buffer - 1);
  } while (got < 0 && errno == EINTR);
  ::close(fd);
  if (got <= 0) return std::nullopt;
  // "pid (comm) state ppid ... utime stime ...": comm may hold spaces and parentheses, so the
  // fields are counted from the last ')'. utime and stime are fields 14 and 15.
  const std::string_view text(buffer, static_cast<std::size_t>(got));
  const auto comm_end = text.rfind(')');
  if (comm_end == std::string_view::npos) return std::nullopt;
  std::vector<std::string_view> fields;
  std::size_t at = comm_end + 1;
  while (at < text.size() && fields.size() < 13) {
    while (at < text.size() && text[at] == ' ') ++at;
    const std::size_t end = std::min(text.find(' ', at), text.size());
    if (end > at) fields.push_back(text.substr(at, end - at));
    at = end;
  }
  if (fields.size() < 13 || fields[0].empty()) return std::nullopt;
  auto ticks_of = [](std::string_view field) -> std::optional<unsigned long long> {
    unsigned long long value = 0;
    const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (error != std::errc() || end != field.data() + field.size()) return std::nullopt;
    return value;
  };
  const auto user_ticks = ticks_of(fields[11]);
  const auto system_ticks = ticks_of(fields[12]);
  const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  if (!user_ticks || !system_ticks || ticks_per_second <= 0) return std::nullopt;
  ProcessUsage usage;
  usage.cpu_time = std::chrono::nanoseconds(static_cast<std::int64_t>(
      (*user_ticks + *system_ticks) * (1000000000ull / ticks_per_second)));
  usage.stopped = fields[0][0] == 'T' || fields[0][0] == 't';
  return usage;
}

std::string ChildProcess::drain_stderr(std::size_t max_bytes) {
  std::string out;
  if (stderr_fd_ < 0) return out;
  char buffer[4096];
  while (out.size() < max_bytes) {
    ssize_t got = ::read(stderr_fd_, buffer, std::min(sizeof buffer, max_bytes - out.size()));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    out.append(buffer, static_cast<std::size_t>(got));
  }
  return out;
}

}  // namespace crucible::sandbox
