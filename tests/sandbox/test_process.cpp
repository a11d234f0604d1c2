// Process supervision and frame pipes: deadlines, signals, rlimits, process-group kills.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "sandbox/frame_pipe.hpp"
#include "sandbox/process.hpp"

using namespace crucible::sandbox;
using crucible::core::ErrorCode;
using Clock = std::chrono::steady_clock;

namespace {

SpawnOptions shell(const std::string& script) {
  SpawnOptions options;
  options.executable = "/bin/sh";
  options.args = {"-c", script};
  options.env = {"PATH=/usr/bin:/bin"};
  return options;
}

// Whether `pid` is a process that still runs: a killed process stays a zombie until its parent
// reaps it, and an orphan's parent is whatever runs as pid 1, which on some hosts (a container's
// own process manager) reaps late. The state letter after the command name in /proc/PID/stat is
// 'Z' for a zombie.
bool running(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() || text[close + 2] != 'Z';
}

}  // namespace

TEST_CASE("process: a child that hangs is still running at its deadline and is killed") {
  auto child = ChildProcess::spawn(shell("sleep 60"));
  REQUIRE(child.ok());
  const auto started = Clock::now();
  CHECK_FALSE(child->wait_for(std::chrono::milliseconds(300)).has_value());
  CHECK(Clock::now() - started >= std::chrono::milliseconds(290));
  auto status = child->kill_and_wait();
  REQUIRE(status.signal.has_value());
  CHECK(*status.signal == SIGKILL);
  CHECK(Clock::now() - started < std::chrono::seconds(5));
}

TEST_CASE("process: usage reports CPU time and a stopped child, nothing once it is gone") {
  auto child = ChildProcess::spawn(shell("while :; do :; done"));
  REQUIRE(child.ok());
  // A spinning child gets CPU time, on a loaded machine sooner or later: ask until it has 100 ms.
  auto busy = child->usage();
  for (int i = 0; i < 1000 && busy && busy->cpu_time < std::chrono::milliseconds(100); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    busy = child->usage();
  }
  REQUIRE(busy.has_value());
  CHECK(busy->cpu_time >= std::chrono::milliseconds(100));
  CHECK_FALSE(busy->stopped);
  REQUIRE(::kill(child->pid(), SIGSTOP) == 0);
  bool stopped = false;
  for (int i = 0; i < 100 && !stopped; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto now = child->usage();
    stopped = now.has_value() && now->stopped;
  }
  CHECK(stopped);
  const auto frozen = child->usage();
  REQUIRE(frozen.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto later = child->usage();
  REQUIRE(later.has_value());
  CHECK(later->cpu_time == frozen->cpu_time);  // a stopped child uses no CPU
  REQUIRE(::kill(child->pid(), SIGCONT) == 0);
  child->kill_and_wait();
  CHECK_FALSE(child->usage().has_value());
}

TEST_CASE("process: killing the group also kills grandchildren") {
  // The grandchild writes its pid, then both sleep; after the kill the grandchild is gone too.
  auto child = ChildProcess::spawn(shell("sleep 60 & echo $!; wait"));
  REQUIRE(child.ok());
  auto deadline = Clock::now() + std::chrono::seconds(5);
  std::string line;
  char c;
  while (Clock::now() < deadline && ::read(child->stdout_fd(), &c, 1) == 1 && c != '\n') line += c;
  const pid_t grandchild = static_cast<pid_t>(std::stoi(line));
  CHECK(running(grandchild));
  child->kill_and_wait();
  // The grandchild is reparented to pid 1; give the kill a moment (dead as a zombie counts).
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !running(grandchild);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(gone);
}

TEST_CASE("process: a child that crashes is reported as a signal") {
  auto child = ChildProcess::spawn(shell("kill -SEGV $$"));
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(10));
  REQUIRE(status.has_value());
  REQUIRE(status->signal.has_value());
  CHECK(*status->signal == SIGSEGV);
  CHECK_FALSE(status->success());
  CHECK(status->describe().find("signal 11") == 0);
}

TEST_CASE("process: exit codes, environment and stderr are passed through") {
  auto child = ChildProcess::spawn(shell("echo \"$PATH\" >&2; exit 7"));
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(10));
  REQUIRE(status.has_value());
  CHECK(status->exit_code == 7);
  CHECK(child->drain_stderr() == "/usr/bin:/bin\n");
}

TEST_CASE("process: rlimits apply in the child") {
  SpawnOptions options = shell("ulimit -v; ulimit -n; ulimit -c");
  options.limits.address_space_bytes = 512ull << 20;
  options.limits.open_files = 32;
  auto child = ChildProcess::spawn(options);
  REQUIRE(child.ok());
  std::string text;
  char buffer[256];
  ssize_t got;
  while ((got = ::read(child->stdout_fd(), buffer, sizeof buffer)) > 0) text.append(buffer, got);
#if defined(__SANITIZE_ADDRESS__)
  // Sanitizer builds leave the address space uncapped (AddressSanitizer's shadow memory).
  CHECK(text == "unlimited\n32\n0\n");
#else
  CHECK(text == "524288\n32\n0\n");
#endif
  CHECK(child->wait_for(std::chrono::seconds(10))->success());
}

TEST_CASE("process: a missing executable is an error, not a child") {
  SpawnOptions options;
  options.executable = "/nonexistent/program";
  auto child = ChildProcess::spawn(options);
  REQUIRE_FALSE(child.ok());
  CHECK(child.error().code == ErrorCode::kIo);
  CHECK(child.error().message.find("No such file") != std::string::npos);
}

TEST_CASE("frame pipe: frames round-trip; a silent peer times out; a dead peer is an error") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  crucible::core::Value value{{"op", "ping"}, {"n", 42}};
  REQUIRE(write_frame(fds[1], value).ok());
  crucible::core::DecodeLimits limits;
  auto back = read_frame(fds[0], limits, Clock::now() + std::chrono::seconds(1));
  REQUIRE(back.ok());
  CHECK(*back == value);

  const auto started = Clock::now();
  auto silent = read_frame(fds[0], limits, Clock::now() + std::chrono::milliseconds(100));
  REQUIRE_FALSE(silent.ok());
  CHECK(silent.error().code == ErrorCode::kTimeout);
  CHECK(Clock::now() - started >= std::chrono::milliseconds(95));

  ::close(fds[1]);
  auto eof = read_frame(fds[0], limits);
  REQUIRE_FALSE(eof.ok());
  CHECK(eof.error().code == ErrorCode::kIo);

  // Writing to a pipe nobody reads is an error value, not a SIGPIPE that kills the test.
  int pipe2_fds[2];
  REQUIRE(::pipe(pipe2_fds) == 0);
  ::close(pipe2_fds[0]);
  auto put = write_frame(pipe2_fds[1], value);
  CHECK_FALSE(put.ok());
  ::close(pipe2_fds[1]);
  ::close(fds[0]);
}

TEST_CASE("frame pipe: an oversized length prefix is refused before reading the payload") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const unsigned char header[4] = {0xff, 0xff, 0xff, 0x7f};
  REQUIRE(::write(fds[1], header, 4) == 4);
  crucible::core::DecodeLimits limits;
  auto frame = read_frame(fds[0], limits, Clock::now() + std::chrono::seconds(1));
  REQUIRE_FALSE(frame.ok());
  CHECK(frame.error().code == ErrorCode::kTooLarge);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("frame pipe: a cancel descriptor stops a wait early") {
  int data[2], cancel[2];
  REQUIRE(::pipe(data) == 0);
  REQUIRE(::pipe(cancel) == 0);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(::write(cancel[1], "x", 1) == 1);
  });
  const auto started = Clock::now();
  auto frame = read_frame(data[0], {}, Clock::now() + std::chrono::seconds(10), cancel[0]);
  canceller.join();
  REQUIRE_FALSE(frame.ok());
  CHECK(frame.error().message == "cancelled");
  CHECK(Clock::now() - started < std::chrono::seconds(5));
  for (int fd : {data[0], data[1], cancel[0], cancel[1]}) ::close(fd);
}
