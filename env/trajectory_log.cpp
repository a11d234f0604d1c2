// Trajectory log writer and reader.
#include "env/trajectory_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

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

bool write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Validates the 16-byte file header. Returns the format version.
core::Result<std::uint32_t> check_header(const std::string& header,
                                         const std::filesystem::path& path) {
  if (header.size() < kHeaderBytes || std::memcmp(header.data(), kMagic, sizeof kMagic) != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       path.string() + " is not a crucible trajectory log (bad magic)"};
  }
  if (get_u32(header.data() + 12) != core::crc32c(std::string_view(header.data(), 12))) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       path.string() + ": trajectory log header is corrupt"};
  }
  const std::uint32_t version = get_u32(header.data() + 8);
  if (version > kLogFormatVersion) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       path.string() + " uses log format " + std::to_string(version) +
                           "; this crucible reads formats up to " +
                           std::to_string(kLogFormatVersion) + ": use a newer crucible"};
  }
  return version;
}

}  // namespace

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
  // A file shorter than a header is what a crash during creation leaves: start it afresh.
  if (std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) >= kHeaderBytes) {
    auto report = read_trajectory_log(path, [](core::Value&&) { return true; });
    if (!report) return report.error();
    keep = report->good_bytes;
    cut = report->file_bytes - report->good_bytes;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return core::Error{core::ErrorCode::kIo, errno_text("cannot open", path)};
  if (keep == 0) {
    if (::ftruncate(fd, 0) != 0 || !write_all(fd, file_header())) {
      const auto message = errno_text("cannot write header of", path);
      ::close(fd);
      return core::Error{core::ErrorCode::kIo, message};
    }
  } else if (cut > 0 && ::ftruncate(fd, static_cast<off_t>(keep)) != 0) {
    const auto message = errno_text("cannot cut the torn tail of", path);
    ::close(fd);
    return core::Error{core::ErrorCode::kIo, message};
  }
  if (::lseek(fd, 0, SEEK_END) < 0) {
    const auto message = errno_text("cannot seek", path);
    ::close(fd);
    return core::Error{core::ErrorCode::kIo, message};
  }
  if (sync) ::fdatasync(fd);
  return std::unique_ptr<TrajectoryLog>(new TrajectoryLog(path, fd, sync, cut));
}

TrajectoryLog::TrajectoryLog(std::filesystem::path path, int fd, bool sync, std::uint64_t cut)
    : path_(std::move(path)), fd_(fd), sync_(sync), recovered_tail_bytes_(cut) {}

TrajectoryLog::~TrajectoryLog() {
  if (fd_ >= 0) {
    ::fdatasync(fd_);
    ::close(fd_);
  }
}

core::Status TrajectoryLog::append(const core::Value& record) {
  const std::string payload = core::encode_msgpack(record);
  if (payload.size() > kLogMaxRecordBytes) {
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
  if (!write_all(fd_, frame)) return core::Error{core::ErrorCode::kIo, errno_text("write", path_)};
  if (sync_ && ::fdatasync(fd_) != 0) {
    return core::Error{core::ErrorCode::kIo, errno_text("fdatasync", path_)};
  }
  ++records_;
  return {};
}

std::uint64_t TrajectoryLog::records_written() const {
  std::lock_guard lock(mutex_);
  return records_;
}

core::Result<LogReadReport> read_trajectory_log(
    const std::filesystem::path& path, const std::function<bool(core::Value&&)>& on_record) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return core::Error{core::ErrorCode::kIo, errno_text("cannot open", path)};
  LogReadReport report;
  std::error_code ec;
  report.file_bytes = std::filesystem::file_size(path, ec);
  std::string header(kHeaderBytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(kHeaderBytes));
  header.resize(static_cast<std::size_t>(in.gcount()));
  auto version = check_header(header, path);
  if (!version) return version.error();
  report.format_version = *version;
  report.good_bytes = kHeaderBytes;

  const core::DecodeLimits limits = core::trusted_decode_limits(kLogMaxRecordBytes);
  std::string record_header(kRecordHeaderBytes, '\0');
  std::string payload;
  while (true) {
    in.read(record_header.data(), static_cast<std::streamsize>(kRecordHeaderBytes));
    const auto got = static_cast<std::size_t>(in.gcount());
    if (got == 0) break;
    if (got < kRecordHeaderBytes) {
      report.torn_tail = true;
      report.tail_reason = "short record header";
      break;
    }
    if (get_u32(record_header.data()) != kSync) {
      report.torn_tail = true;
      report.tail_reason = "bad sync marker";
      break;
    }
    const std::uint32_t length = get_u32(record_header.data() + 4);
    if (length > kLogMaxRecordBytes) {
      report.torn_tail = true;
      report.tail_reason = "record length over the limit";
      break;
    }
    payload.resize(length);
    in.read(payload.data(), length);
    if (static_cast<std::size_t>(in.gcount()) < length) {
      report.torn_tail = true;
      report.tail_reason = "short record payload";
      break;
    }
    if (core::crc32c(payload) != get_u32(record_header.data() + 8)) {
      report.torn_tail = true;
      report.tail_reason = "checksum mismatch";
      break;
    }
    auto value = core::decode_msgpack(payload, limits);
    if (!value) {
      report.torn_tail = true;
      report.tail_reason = "undecodable record: " + value.error().message;
      break;
    }
    report.good_bytes += kRecordHeaderBytes + length;
    ++report.records;
    if (!on_record(std::move(value).value())) break;
  }
  return report;
}

}  // namespace crucible::env
