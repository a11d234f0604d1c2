// Length-prefixed msgpack frames over pipes, with deadlines and SIGPIPE-safe writes.
#include "sandbox/frame_pipe.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace crucible::sandbox {
namespace {

using core::ErrorCode;

core::Status write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t put = ::write(fd, data, size);
    if (put < 0) {
      if (errno == EINTR) continue;
      return core::Status(ErrorCode::kIo, std::string("write: ") + std::strerror(errno));
    }
    data += put;
    size -= static_cast<std::size_t>(put);
  }
  return {};
}

// Blocks SIGPIPE for this thread while alive; on exit swallows a SIGPIPE the write raised
// so it is not delivered later.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    already_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &block, &old_);
  }
  ~SigpipeGuard() {
    if (!already_pending_) {
      sigset_t pipe_only;
      sigemptyset(&pipe_only);
      sigaddset(&pipe_only, SIGPIPE);
      const struct timespec zero {};
      while (sigtimedwait(&pipe_only, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t old_{};
  bool already_pending_ = false;
};

// Waits until fd is readable. Returns an error on deadline or cancellation.
core::Status wait_readable(int fd, std::optional<std::chrono::steady_clock::time_point> deadline,
                           int cancel_fd) {
  while (true) {
    int timeout_ms = -1;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      *deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) return core::Status(ErrorCode::kTimeout, "deadline passed");
      timeout_ms = static_cast<int>(std::min<long long>(left + 1, 1 << 30));
    }
    struct pollfd entries[2] = {};
    entries[0].fd = fd;
    entries[0].events = POLLIN;
    entries[1].fd = cancel_fd;
    entries[1].events = POLLIN;
    int count = ::poll(entries, cancel_fd >= 0 ? 2 : 1, timeout_ms);
    if (count < 0) {
      if (errno == EINTR) continue;
      return core::Status(ErrorCode::kIo, std::string("poll: ") + std::strerror(errno));
    }
    if (cancel_fd >= 0 && (entries[1].revents & (POLLIN | POLLHUP)) != 0) {
      return core::Status(ErrorCode::kTimeout, "cancelled");
    }
    if (entries[0].revents != 0) return {};  // data, or hang-up: read() tells which
  }
}

core::Status read_exact(int fd, char* data, std::size_t size,
                        std::optional<std::chrono::steady_clock::time_point> deadline,
                        int cancel_fd) {
  while (size > 0) {
    if (auto ready = wait_readable(fd, deadline, cancel_fd); !ready) return ready;
    ssize_t got = ::read(fd, data, size);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return core::Status(ErrorCode::kIo, std::string("read: ") + std::strerror(errno));
    }
    if (got == 0) return core::Status(ErrorCode::kIo, "eof");
    data += got;
    size -= static_cast<std::size_t>(got);
  }
  return {};
}

}  // namespace

core::Status write_frame(int fd, const core::Value& value) {
  const std::string payload = core::encode_msgpack(value);
  if (payload.size() > kMaxFrameBytes) {
    return core::Status(ErrorCode::kTooLarge,
                        "frame of " + std::to_string(payload.size()) + " bytes");
  }
  const auto size = static_cast<std::uint32_t>(payload.size());
  char header[4];
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((size >> (8 * i)) & 0xffu);
  SigpipeGuard guard;
  if (auto put = write_all(fd, header, sizeof header); !put) return put;
  return write_all(fd, payload.data(), payload.size());
}

core::Result<core::Value> read_frame(int fd, const core::DecodeLimits& limits,
                                     std::optional<std::chrono::steady_clock::time_point> deadline,
                                     int cancel_fd) {
  unsigned char header[4];
  if (auto got =
          read_exact(fd, reinterpret_cast<char*>(header), sizeof header, deadline, cancel_fd);
      !got) {
    return got.error();
  }
  const std::uint32_t size =
      static_cast<std::uint32_t>(header[0]) | (static_cast<std::uint32_t>(header[1]) << 8) |
      (static_cast<std::uint32_t>(header[2]) << 16) | (static_cast<std::uint32_t>(header[3]) << 24);
  if (size > limits.max_bytes || size > kMaxFrameBytes) {
    return core::Error{ErrorCode::kTooLarge, "frame of " + std::to_string(size) + " bytes"};
  }
  std::string payload(size, '\0');
  if (auto got = read_exact(fd, payload.data(), payload.size(), deadline, cancel_fd); !got) {
    return got.error();
  }
  return core::decode_msgpack(payload, limits);
}

}  // namespace crucible::sandbox
