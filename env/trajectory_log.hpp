// Append-only trajectory log: length-prefixed, checksummed msgpack records; crash-safe reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"

namespace crucible::env {

// File layout (all integers little-endian):
//   header: 8 bytes "CRUCLOG\0", u32 format version, u32 crc32c of the preceding 12 bytes
//   record: u32 sync marker 0x52435243 ("CRCR"), u32 payload length, u32 crc32c(payload),
//           payload (one msgpack map)
// A record is committed once its last byte is in the file; a reader stops at the first record
// that is short or fails its checksum and reports it as the torn tail.
inline constexpr std::uint32_t kLogFormatVersion = 1;
inline constexpr std::uint32_t kLogMaxRecordBytes = 64u << 20;

class TrajectoryLog {
 public:
  // Opens `path` for appending, creating it and its parent folders. An existing file must carry
  // a header of a format this build reads; a torn tail from an earlier crash is cut off (the
  // cut is reported through `recovered_tail`) so new records follow the last good one.
  // `sync`: fdatasync after every record, so an answered step survives a machine crash too (a
  // process crash loses nothing either way).
  static core::Result<std::unique_ptr<TrajectoryLog>> open(const std::filesystem::path& path,
                                                           bool sync);
  ~TrajectoryLog();
  TrajectoryLog(const TrajectoryLog&) = delete;
  TrajectoryLog& operator=(const TrajectoryLog&) = delete;

  // Appends one record with a single write(2). Thread-safe. Returns only after the bytes are in
  // the kernel (and on disk when `sync`). Errors: kIo.
  core::Status append(const core::Value& record);

  const std::filesystem::path& path() const { return path_; }
  std::uint64_t records_written() const;
  // Bytes cut from an existing file's torn tail when it was opened (0 when clean).
  std::uint64_t recovered_tail_bytes() const { return recovered_tail_bytes_; }

 private:
  TrajectoryLog(std::filesystem::path path, int fd, bool sync, std::uint64_t cut);
  std::filesystem::path path_;
  int fd_;
  bool sync_;
  std::uint64_t recovered_tail_bytes_;
  mutable std::mutex mutex_;
  std::uint64_t records_ = 0;
};

struct LogReadReport {
  std::uint32_t format_version = 0;
  std::uint64_t records = 0;     // good records delivered
  std::uint64_t good_bytes = 0;  // offset just past the last good record
  std::uint64_t file_bytes = 0;
  bool torn_tail = false;   // bytes after the last good record that do not form a record
  std::string tail_reason;  // why the tail is torn ("short header", "checksum mismatch", ...)
};

// Reads every good record of a log in order, calling `on_record` for each; stops at a torn tail
// and reports it. Errors: kIo (cannot open), kInvalidArgument (not a crucible log, or a newer
// format than this build reads: the message says which version and that a newer crucible is
// needed). A `false` from on_record stops the read early.
core::Result<LogReadReport> read_trajectory_log(
    const std::filesystem::path& path, const std::function<bool(core::Value&&)>& on_record);

}  // namespace crucible::env
