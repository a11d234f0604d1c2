// Length-prefixed msgpack frames over pipes: how the server talks to its child processes.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "core/msgpack_codec.hpp"
#include "core/result.hpp"
#include "core/value.hpp"

namespace crucible::sandbox {

// Wire format: a 4-byte little-endian payload length, then one msgpack object of that length.
inline constexpr std::uint32_t kMaxFrameBytes = 256u << 20;

// Writes one frame, retrying on EINTR and short writes; blocks until written. SIGPIPE is
// blocked for the calling thread during the write, so a reader that died yields kIo, never a
// process-killing signal. Errors: kIo (peer gone, write failure), kTooLarge.
core::Status write_frame(int fd, const core::Value& value);

// Reads one frame. Waits at most until `deadline` (none: forever); when `cancel_fd` >= 0 and
// becomes readable the wait stops early. Errors: kTimeout (deadline passed, or cancelled:
// the message says which), kIo (end of stream: message "eof"; or a read error), kTooLarge
// (length prefix above limits.max_bytes), kBadRequest (malformed msgpack).
// A partial frame at the deadline is an error: the stream is then out of sync and the caller
// must drop the peer.
core::Result<core::Value> read_frame(
    int fd, const core::DecodeLimits& limits,
    std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
    int cancel_fd = -1);

}  // namespace crucible::sandbox
