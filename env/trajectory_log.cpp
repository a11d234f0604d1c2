// Trajectory log writer and reader.
#include "env/trajectory_log.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/checksum.hpp"
#include "core/msgpack_codec.hpp"

namespace crucible::env {
namespace {

constexpr char kMagic[8] = {'C', 'R', 'U', 'C', 'L', 'O', 'G', '\0'};
constexpr std::uint32_t kSync = 0x52435243u;
constexpr std::size_t kHeaderBytes = 16;
constexpr std::size_t kRecordHeaderBytes = 12;

void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

std::uint32_t get_u32(const char* data) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(data[i]);
  return value;
}

std::string file_header() {
  std::string header(kMagic, sizeof kMagic);
  put_u32(header, kLogFormatVersion);
  put_u32(header, core::crc32c(header));
  return header;
}

std::string errno_text(const std::string& what, const std::filesystem::path& path) {
  return what + " " + path.string() + ": " + std::strerror(errno);
}

// Writes all of `bytes` at `offset` (pwrite: the file position plays no part).
bool write_all(int fd, const std::string& bytes, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EIO;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Validates the 16-byte file header. Returns the format version.
core::Result<std::uint32_t> check_header(const std::string& header, const std::string& path) {
  if (header.size() < kHeaderBytes || std::memcmp(header.data(), kMagic, sizeof kMagic) != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       path + " is not a crucible trajectory log (bad magic)"};
  }
  if (get_u32(header.data() + 12) != core::crc32c(std::string_view(header.data(), 12))) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       path + ": trajectory log header is corrupt"};
  }
  const std::uint32_t version = get_u32(header.data() + 8);
  if (version > kLogFormatVersion) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       path + " uses log format " + std::to_string(version) +
                           "; this crucible reads formats up to " +
                           std::to_string(kLogFormatVersion) + ": use a newer crucible"};
  }
  return version;
}

// Why the bytes at `at` are not a good record, or "" when a good record starts there (its
// total length then goes to *record_bytes and its decoded payload to *value).
std::string check_record(std::string_view bytes, std::size_t at, const core::DecodeLimits& limits,
                         std::size_t* record_bytes, core::Value* value) {
  const std::size_t left = bytes.size() - at;
  if (left < kRecordHeaderBytes) return "short record header";
  const char* head = bytes.data() + at;
  if (get_u32(head) != kSync) return "bad sync marker";
  const std::uint32_t length = get_u32(head + 4);
  if (length > kLogMaxRecordBytes) return "record length over the limit";
  if (left - kRecordHeaderBytes < length) return "short record payload";
  const std::string_view payload = bytes.substr(at + kRecordHeaderBytes, length);
  if (core::crc32c(payload) != get_u32(head + 8)) return "checksum mismatch";
  auto decoded = core::decode_msgpack(payload, limits);
  if (!decoded) return "undecodable record: " + decoded.error().message;
  *record_bytes = kRecordHeaderBytes + length;
  *value = std::move(decoded).value();
  return {};
}

// Offset of the next "CRCR" marker after `from` (exclusive), or npos.
std::size_t next_marker(std::string_view bytes, std::size_t from) {
  static const std::string kMarker = [] {
    std::string marker;
    put_u32(marker, kSync);
    return marker;
  }();
  return bytes.find(kMarker, from + 1);
}

}  // namespace

std::uint64_t LogReadReport::skipped_bytes() const {
  std::uint64_t total = 0;
  for (const auto& range : skipped) total += range.bytes;
  return total;
}

std::string describe_skipped(const LogReadReport& report) {
  std::string out;
  for (const auto& range : report.skipped) {
    const bool tail = report.torn_tail && &range == &report.skipped.back();
    out += "bytes " + std::to_string(range.offset) + "-" +
           std::to_string(range.offset + range.bytes - 1) + " (" + std::to_string(range.bytes) +
           " bytes" + (tail ? ", torn tail" : "") + "): " + range.reason + "\n";
  }
  return out;
}

core::Result<LogReadReport> read_trajectory_bytes(
    std::string_view bytes, const std::function<bool(core::Value&&)>& on_record,
    const std::string& name) {
  LogReadReport report;
  report.file_bytes = bytes.size();
  auto version = check_header(std::string(bytes.substr(0, kHeaderBytes)), name);
  if (!version) return version.error();
  report.format_version = *version;
  report.good_bytes = kHeaderBytes;

  const core::DecodeLimits limits = core::trusted_decode_limits(kLogMaxRecordBytes);
  std::size_t at = kHeaderBytes;
  while (at < bytes.size()) {
    std::size_t record_bytes = 0;
    core::Value value;
    std::string reason = check_record(bytes, at, limits, &record_bytes, &value);
    if (reason.empty()) {
      at += record_bytes;
      report.good_bytes = at;
      ++report.records;
      if (!on_record(std::move(value))) return report;
      continue;
    }
    // Damage: resynchronise on the next offset where a whole good record starts. Every marker
    // is tried, since a damaged length field says nothing about where the next record begins.
    std::size_t resume = at;
    while (true) {
      resume = next_marker(bytes, resume);
      if (resume == std::string_view::npos) break;
      std::size_t ignored_bytes = 0;
      core::Value ignored;
      if (check_record(bytes, resume, limits, &ignored_bytes, &ignored).empty()) break;
    }
    const std::size_t end = resume == std::string_view::npos ? bytes.size() : resume;
    report.skipped.push_back(SkippedRange{at, end - at, std::move(reason)});
    at = end;
  }
  if (!report.skipped.empty() &&
      report.skipped.back().offset + report.skipped.back().bytes == bytes.size() &&
      report.skipped.back().offset >= report.good_bytes) {
    report.torn_tail = true;
    report.tail_reason = report.skipped.back().reason;
  }
  return report;
}

core::Result<LogReadReport> read_trajectory_log(
    const std::filesystem::path& path, const std::function<bool(core::Value&&)>& on_record) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return core::Error{core::ErrorCode::kIo, "cannot open " + path.string() + ": " +
                                                 (ec ? ec.message() : "no such file")};
  }
  if (!std::filesystem::is_regular_file(status)) {
    // A FIFO or a device would block or never end; a log is always a regular file.
    return core::Error{core::ErrorCode::kIo,
                       path.string() + " is not a regular file, so not a trajectory log"};
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return core::Error{core::ErrorCode::kIo, errno_text("cannot open", path)};
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const auto message = errno_text("cannot stat", path);
    ::close(fd);
    return core::Error{core::ErrorCode::kIo, message};
  }
  const auto size = static_cast<std::size_t>(info.st_size);
  if (size == 0) {
    ::close(fd);
    return read_trajectory_bytes({}, on_record, path.string());
  }
  // Mapped, not read: a log can hold gigabytes, and the resync needs random access.
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED)
    return core::Error{core::ErrorCode::kIo, errno_text("cannot map", path)};
  ::madvise(mapped, size, MADV_SEQUENTIAL);
  auto report = read_trajectory_bytes(std::string_view(static_cast<const char*>(mapped), size),
                                      on_record, path.string());
  ::munmap(mapped, size);
  return report;
}

core::Result<std::unique_ptr<TrajectoryLog>> TrajectoryLog::open(const std::filesystem::path& path,
                                                                 bool sync) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return core::Error{core::ErrorCode::kIo,
                       "cannot create folder " + path.parent_path().string() + ": " + ec.message()};
  }
  std::uint64_t cut = 0;
  std::uint64_t keep = 0;
  std::vector<SkippedRange> damaged;
  // A file shorter than a header is what a crash during creation leaves: start it afresh.
  if (std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) >= kHeaderBytes) {
    auto report = read_trajectory_log(path, [](core::Value&&) { return true; });
    if (!report) return report.error();
    // Only a torn write at the end (a record cut short: what a crash or a full disk leaves) is
    // cut. Every other damaged range stays where it is, readers skip it, and new records
    // follow it: opening a log never removes a byte that could hold a good record.
    damaged = report->skipped;
    keep = report->file_bytes;
    if (report->torn_tail && report->tail_reason.starts_with("short record")) {
      keep = report->good_bytes;
      cut = report->file_bytes - report->good_bytes;
      damaged.pop_back();
    }
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return core::Error{core::ErrorCode::kIo, errno_text("cannot open", path)};
  if (keep == 0) {
    if (::ftruncate(fd, 0) != 0 || !write_all(fd, file_header(), 0)) {
      const auto message = errno_text("cannot write header of", path);
      ::close(fd);
      return core::Error{core::ErrorCode::kIo, message};
    }
    keep = kHeaderBytes;
  } else if (cut > 0 && ::ftruncate(fd, static_cast<off_t>(keep)) != 0) {
    const auto message = errno_text("cannot cut the torn tail of", path);
    ::close(fd);
    return core::Error{core::ErrorCode::kIo, message};
  }
  if (sync) ::fdatasync(fd);
  return std::unique_ptr<TrajectoryLog>(
      new TrajectoryLog(path, fd, sync, keep, cut, std::move(damaged)));
}

TrajectoryLog::TrajectoryLog(std::filesystem::path path, int fd, bool sync, std::uint64_t end,
                             std::uint64_t cut, std::vector<SkippedRange> damaged)
    : path_(std::move(path)),
      fd_(fd),
      sync_(sync),
      recovered_tail_bytes_(cut),
      damaged_(std::move(damaged)),
      end_(end) {}

TrajectoryLog::~TrajectoryLog() {
  if (fd_ >= 0) {
    if (dirty_tail_) (void)::ftruncate(fd_, static_cast<off_t>(end_));
    ::fdatasync(fd_);
    ::close(fd_);
  }
}

core::Status TrajectoryLog::append(const core::Value& record) {
  const std::string payload = core::encode_msgpack(record);
  if (payload.size() > kLogMaxRecordBytes) {
    std::lock_guard lock(mutex_);
    ++failed_;
    return core::Error{core::ErrorCode::kIo, "trajectory record of " +
                                                 std::to_string(payload.size()) +
                                                 " bytes exceeds the record limit"};
  }
  std::string frame;
  frame.reserve(kRecordHeaderBytes + payload.size());
  put_u32(frame, kSync);
  put_u32(frame, static_cast<std::uint32_t>(payload.size()));
  put_u32(frame, core::crc32c(payload));
  frame.append(payload);
  std::lock_guard lock(mutex_);
  if (dirty_tail_) {
    // An earlier failed append could not remove its partial record: nothing more is
    // acknowledged until it is gone.
    if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0) {
      ++failed_;
      return core::Error{core::ErrorCode::kIo,
                         errno_text("cannot remove a partial record from", path_)};
    }
    dirty_tail_ = false;
  }
  // Records are written at end_, the offset past the last good record, never where the file
  // happens to end, so a partial write can always be cut off again.
  const bool written = write_all(fd_, frame, end_);
  const bool synced = written && (!sync_ || ::fdatasync(fd_) == 0);
  if (!synced) {
    const std::string message = errno_text(written ? "fdatasync" : "write", path_);
    ++failed_;
    if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0) dirty_tail_ = true;
    return core::Error{core::ErrorCode::kIo, message};
  }
  end_ += frame.size();
  ++records_;
  return {};
}

std::uint64_t TrajectoryLog::records_written() const {
  std::lock_guard lock(mutex_);
  return records_;
}

std::uint64_t TrajectoryLog::failed_appends() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

}  // namespace crucible::env
