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
// A record is committed once its last byte is in the file. A reader that meets bytes that do
// not form a good record (a torn write, a flipped bit) skips them: it resynchronises on the
// next offset where a whole good record starts, and reports every skipped byte range, so one
// damaged record never hides the records after it.
inline constexpr std::uint32_t kLogFormatVersion = 1;
inline constexpr std::uint32_t kLogMaxRecordBytes = 64u << 20;

// Bytes of a log that do not form a good record.
struct SkippedRange {
  std::uint64_t offset = 0;  // from the start of the file
  std::uint64_t bytes = 0;
  std::string reason;  // why the first bytes of the range are not a record ("checksum mismatch")
};

struct LogReadReport {
  std::uint32_t format_version = 0;
  std::uint64_t records = 0;     // good records delivered
  std::uint64_t good_bytes = 0;  // offset just past the last good record
  std::uint64_t file_bytes = 0;
  // Every range skipped, in file order. The last one is a torn tail when it runs to the end
  // of the file (no good record after it: what a crash in the middle of a write leaves).
  std::vector<SkippedRange> skipped;
  bool torn_tail = false;
  std::string tail_reason;  // the torn tail's reason, when there is one

  std::uint64_t skipped_bytes() const;
  // Skipped ranges before the last good record: damage inside the log, not a torn tail.
  std::size_t damaged_ranges() const { return skipped.size() - (torn_tail ? 1 : 0); }
};

class TrajectoryLog {
 public:
  // Opens `path` for appending, creating it and its parent folders. An existing file must carry
  // a header of a format this build reads. A torn write at the end (a record cut short by a
  // crash or a full disk) is cut off so new records follow the last good one; any other damage
  // is left in place (readers skip it), reported by damaged_ranges(), and new records follow
  // it: opening a log never removes a byte that could belong to a good record.
  // `sync`: fdatasync after every record, so an answered step survives a machine crash too (a
  // process crash loses nothing either way).
  static core::Result<std::unique_ptr<TrajectoryLog>> open(const std::filesystem::path& path,
                                                           bool sync);
  ~TrajectoryLog();
  TrajectoryLog(const TrajectoryLog&) = delete;
  TrajectoryLog& operator=(const TrajectoryLog&) = delete;

  // Appends one record. Thread-safe. Returns only after the bytes are in the kernel (and on
  // disk when `sync`). A failed append (a full disk, an I/O error) leaves the file as it was
  // before the call: the partial record is cut off again, so records appended later follow
  // the last good one. Should that cut fail too, every later append first retries it and
  // fails while it cannot: nothing is acknowledged after bytes that are not a record.
  // Errors: kIo.
  core::Status append(const core::Value& record);

  const std::filesystem::path& path() const { return path_; }
  std::uint64_t records_written() const;
  std::uint64_t failed_appends() const;
  // Bytes cut from an existing file's torn tail when it was opened (0 when clean).
  std::uint64_t recovered_tail_bytes() const { return recovered_tail_bytes_; }
  // Damaged ranges found when the file was opened (left in place), in file order.
  const std::vector<SkippedRange>& damaged_ranges() const { return damaged_; }

 private:
  TrajectoryLog(std::filesystem::path path, int fd, bool sync, std::uint64_t end, std::uint64_t cut,
                std::vector<SkippedRange> damaged);
  std::filesystem::path path_;
  int fd_;
  bool sync_;
  std::uint64_t recovered_tail_bytes_;
  std::vector<SkippedRange> damaged_;
  mutable std::mutex mutex_;
  std::uint64_t end_;        // offset just past the last good record
  bool dirty_tail_ = false;  // bytes past end_ that a failed cut could not remove
  std::uint64_t records_ = 0;
  std::uint64_t failed_ = 0;
};

// Reads every good record of a log in order, calling `on_record` for each, and skips (and
// reports) bytes that do not form one. Errors: kIo (cannot open or read, or not a regular
// file), kInvalidArgument (not a crucible log, or a newer format than this build reads: the
// message says which version and that a newer crucible is needed). A `false` from on_record
// stops the read early.
core::Result<LogReadReport> read_trajectory_log(
    const std::filesystem::path& path, const std::function<bool(core::Value&&)>& on_record);

// The same over a log's bytes in memory (for tests and fuzzing); `name` is used in messages.
core::Result<LogReadReport> read_trajectory_bytes(
    std::string_view bytes, const std::function<bool(core::Value&&)>& on_record,
    const std::string& name = "log");

// One line per skipped range: "bytes 1234-1301 (68 bytes): checksum mismatch".
std::string describe_skipped(const LogReadReport& report);

}  // namespace crucible::env
