// Trajectory log: round trip, torn tails, format versions, and a writer killed mid-write.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/checksum.hpp"
#include "env/trajectory_log.hpp"

using namespace crucible;
namespace fs = std::filesystem;

namespace {
fs::path temp_file(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("crucible-log-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto path = dir / name;
  fs::remove(path);
  return path;
}

std::vector<core::Value> read_all(const fs::path& path, env::LogReadReport* report) {
  std::vector<core::Value> records;
  auto result = env::read_trajectory_log(path, [&](core::Value&& record) {
    records.push_back(std::move(record));
    return true;
  });
  REQUIRE(result.ok());
  *report = *result;
  return records;
}

void append_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << bytes;
}
}  // namespace

TEST_CASE("trajectory log: records come back in order and intact") {
  const auto path = temp_file("round_trip.log");
  {
    auto log = env::TrajectoryLog::open(path, /*sync=*/false);
    REQUIRE(log.ok());
    for (int i = 0; i < 100; ++i) {
      REQUIRE((*log)->append(core::Value{{"step", i}, {"source", std::string(i * 10, 'x')}}).ok());
    }
    CHECK((*log)->records_written() == 100);
  }
  env::LogReadReport report;
  const auto records = read_all(path, &report);
  REQUIRE(records.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(records[i]["step"] == i);
  CHECK_FALSE(report.torn_tail);
  CHECK(report.good_bytes == report.file_bytes);
  CHECK(report.format_version == env::kLogFormatVersion);
}

TEST_CASE("trajectory log: a torn final record is skipped, reported, and cut on reopen") {
  const auto path = temp_file("torn.log");
  {
    auto log = env::TrajectoryLog::open(path, false);
    REQUIRE(log.ok());
    REQUIRE((*log)->append(core::Value{{"n", 1}}).ok());
    REQUIRE((*log)->append(core::Value{{"n", 2}}).ok());
  }
  const auto clean_size = fs::file_size(path);
  // Half a record header, as a crash mid-write leaves it.
  append_bytes(path, std::string("\x43\x52\x43\x52\x10\x00", 6));
  env::LogReadReport report;
  auto records = read_all(path, &report);
  CHECK(records.size() == 2);
  CHECK(report.torn_tail);
  CHECK(report.tail_reason == "short record header");
  CHECK(report.good_bytes == clean_size);

  {
    auto log = env::TrajectoryLog::open(path, false);
    REQUIRE(log.ok());
    CHECK((*log)->recovered_tail_bytes() == 6);
    REQUIRE((*log)->append(core::Value{{"n", 3}}).ok());
  }
  records = read_all(path, &report);
  REQUIRE(records.size() == 3);
  CHECK(records[2]["n"] == 3);
  CHECK_FALSE(report.torn_tail);
}

TEST_CASE("trajectory log: a flipped payload byte fails the checksum") {
  const auto path = temp_file("corrupt.log");
  {
    auto log = env::TrajectoryLog::open(path, false);
    REQUIRE(log.ok());
    REQUIRE((*log)->append(core::Value{{"n", 1}}).ok());
    REQUIRE((*log)->append(core::Value{{"payload", "abcdefgh"}}).ok());
  }
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  file.seekp(-3, std::ios::end);
  file.put('Z');
  file.close();
  env::LogReadReport report;
  const auto records = read_all(path, &report);
  CHECK(records.size() == 1);
  CHECK(report.torn_tail);
  CHECK(report.tail_reason == "checksum mismatch");
}

TEST_CASE("trajectory log: a newer format or a foreign file is refused with a clear message") {
  const auto path = temp_file("future.log");
  {
    auto log = env::TrajectoryLog::open(path, false);
    REQUIRE(log.ok());
  }
  // Rewrite the version to 99 and fix the header checksum so only the version is wrong.
  std::string header(16, '\0');
  {
    std::ifstream in(path, std::ios::binary);
    in.read(header.data(), 16);
  }
  header[8] = 99;
  const std::uint32_t crc = core::crc32c(std::string_view(header.data(), 12));
  for (int i = 0; i < 4; ++i) header[12 + i] = static_cast<char>((crc >> (8 * i)) & 0xFF);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << header;
  }
  auto result = env::read_trajectory_log(path, [](core::Value&&) { return true; });
  REQUIRE_FALSE(result.ok());
  CHECK(result.error().message.find("uses log format 99; this crucible reads formats up to 1") !=
        std::string::npos);
  CHECK_FALSE(env::TrajectoryLog::open(path, false).ok());

  const auto foreign = temp_file("foreign.log");
  append_bytes(foreign, "this is not a log at all");
  auto refused = env::read_trajectory_log(foreign, [](core::Value&&) { return true; });
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("is not a crucible trajectory log") != std::string::npos);
}

TEST_CASE(
    "trajectory log: a writer killed with SIGKILL at random points loses no finished record") {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 12; ++trial) {
    const auto path = temp_file("killed-" + std::to_string(trial) + ".log");
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(pipe_fds[0]);
      auto log = env::TrajectoryLog::open(path, false);
      if (!log) ::_exit(3);
      for (std::uint32_t i = 0;; ++i) {
        // Large records make a kill inside write(2) likely.
        if (!(*log)->append(core::Value{{"n", i}, {"pad", std::string(20000 + i % 7000, 'p')}})) {
          ::_exit(4);
        }
        // Tell the parent this record is committed (as the server would send its reply).
        if (::write(pipe_fds[1], &i, sizeof i) != sizeof i) ::_exit(5);
      }
    }
    ::close(pipe_fds[1]);
    ::usleep(2000 + rng() % 30000);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    std::uint32_t acknowledged = 0;
    std::uint32_t n = 0;
    bool any = false;
    while (::read(pipe_fds[0], &n, sizeof n) == sizeof n) {
      acknowledged = n;
      any = true;
    }
    ::close(pipe_fds[0]);
    // Killed before its header was written (a loaded machine): nothing was acknowledged, and
    // the next open starts the file afresh.
    if (!any && (!fs::exists(path) || fs::file_size(path) < 16)) continue;
    env::LogReadReport report;
    const auto records = read_all(path, &report);
    if (any) CHECK(records.size() >= acknowledged + 1);
    for (std::size_t i = 0; i < records.size(); ++i) CHECK(records[i]["n"] == i);
  }
}

namespace {
// Holds RLIMIT_FSIZE at `bytes` (a file cannot grow past it: writes beyond fail with EFBIG, as
// on a full disk) and restores the old limit when it goes out of scope.
class FileSizeCap {
 public:
  explicit FileSizeCap(std::uint64_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit capped = saved_;
    capped.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &capped) == 0);
  }
  ~FileSizeCap() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t old_handler_ = nullptr;
};

core::Value record_of(int n, std::size_t pad) {
  return core::Value{{"n", n}, {"pad", std::string(pad, 'p')}};
}
}  // namespace

TEST_CASE("trajectory log: an append that fails part-way leaves the file as it was") {
  const auto path = temp_file("full-disk.log");
  auto log = env::TrajectoryLog::open(path, /*sync=*/false);
  REQUIRE(log.ok());
  for (int i = 0; i < 3; ++i) REQUIRE((*log)->append(record_of(i, 100)).ok());
  const auto size_before = fs::file_size(path);
  {
    // Room for part of the next record only: the write stops in its middle.
    FileSizeCap cap(size_before + 50);
    const auto failed = (*log)->append(record_of(99, 4000));
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.error().code == core::ErrorCode::kIo);
    CHECK(fs::file_size(path) == size_before);  // the partial record was cut off again
  }
  // Space again: later records follow the last good one and every one of them can be read.
  for (int i = 3; i < 6; ++i) REQUIRE((*log)->append(record_of(i, 100)).ok());
  CHECK((*log)->records_written() == 6);
  CHECK((*log)->failed_appends() == 1);
  env::LogReadReport report;
  const auto records = read_all(path, &report);
  REQUIRE(records.size() == 6);
  for (int i = 0; i < 6; ++i) CHECK(records[i]["n"] == i);
  CHECK(report.skipped.empty());
}

TEST_CASE(
    "trajectory log: a flipped bit mid-file hides no later record, and reopening keeps them") {
  const auto path = temp_file("flipped.log");
  std::vector<std::uint64_t> ends;
  {
    auto log = env::TrajectoryLog::open(path, false);
    REQUIRE(log.ok());
    for (int i = 0; i < 50; ++i) {
      REQUIRE((*log)->append(record_of(i, 200 + i)).ok());
      ends.push_back(fs::file_size(path));
    }
  }
  // Flip one bit in the payload of record 10 (it starts at ends[9]).
  {
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    const auto at = static_cast<std::streamoff>(ends[9] + 40);
    file.seekg(at);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    file.seekp(at);
    file.write(&byte, 1);
  }
  env::LogReadReport report;
  auto records = read_all(path, &report);
  REQUIRE(records.size() == 49);
  CHECK(records[9]["n"] == 9);
  CHECK(records[10]["n"] == 11);
  REQUIRE(report.skipped.size() == 1);
  CHECK(report.skipped[0].offset == ends[9]);
  CHECK(report.skipped[0].bytes == ends[10] - ends[9]);
  CHECK(report.skipped[0].reason == "checksum mismatch");
  CHECK_FALSE(report.torn_tail);
  CHECK(report.damaged_ranges() == 1);
  CHECK(env::describe_skipped(report).find("checksum mismatch") != std::string::npos);

  // A server restart on this log keeps every good record and appends after them.
  const auto size = fs::file_size(path);
  {
    auto log = env::TrajectoryLog::open(path, false);
    REQUIRE(log.ok());
    CHECK(fs::file_size(path) == size);
    CHECK((*log)->recovered_tail_bytes() == 0);
    REQUIRE((*log)->damaged_ranges().size() == 1);
    CHECK((*log)->damaged_ranges()[0].offset == ends[9]);
    REQUIRE((*log)->append(record_of(50, 10)).ok());
  }
  records = read_all(path, &report);
  REQUIRE(records.size() == 50);
  CHECK(records.back()["n"] == 50);
}

TEST_CASE("trajectory log: damage in a record's length field is skipped by resynchronising") {
  const auto path = temp_file("bad-length.log");
  std::vector<std::uint64_t> ends;
  {
    auto log = env::TrajectoryLog::open(path, false);
    REQUIRE(log.ok());
    for (int i = 0; i < 8; ++i) {
      REQUIRE((*log)->append(record_of(i, 300)).ok());
      ends.push_back(fs::file_size(path));
    }
  }
  {
    // Record 3's length now claims nearly the whole limit: the bytes after it still count.
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(static_cast<std::streamoff>(ends[2] + 4 + 3));
    file.put(static_cast<char>(0x03));
  }
  env::LogReadReport report;
  const auto records = read_all(path, &report);
  REQUIRE(records.size() == 7);
  CHECK(records[3]["n"] == 4);
  REQUIRE(report.skipped.size() == 1);
  CHECK(report.skipped[0].offset == ends[2]);
  CHECK(report.skipped[0].bytes == ends[3] - ends[2]);
}

TEST_CASE("trajectory log: random damage never loses a record it did not touch") {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 30; ++trial) {
    const auto path = temp_file("random-damage.log");
    std::vector<std::uint64_t> ends{16};
    {
      auto log = env::TrajectoryLog::open(path, false);
      REQUIRE(log.ok());
      for (int i = 0; i < 40; ++i) {
        REQUIRE((*log)->append(record_of(i, rng() % 600)).ok());
        ends.push_back(fs::file_size(path));
      }
    }
    // Overwrite a random run of bytes after the header.
    const std::uint64_t from = 16 + rng() % (ends.back() - 16);
    const std::uint64_t length = 1 + rng() % 64;
    {
      std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
      file.seekp(static_cast<std::streamoff>(from));
      for (std::uint64_t i = 0; i < length && from + i < ends.back(); ++i) {
        file.put(static_cast<char>(rng()));
      }
    }
    env::LogReadReport report;
    const auto records = read_all(path, &report);
    std::vector<int> seen;
    for (const auto& record : records) seen.push_back(record["n"].get<int>());
    for (int i = 0; i < 40; ++i) {
      const bool touched = ends[i + 1] > from && ends[i] < from + length;
      if (!touched) {
        CHECK_MESSAGE(std::find(seen.begin(), seen.end(), i) != seen.end(),
                      "record " << i << " lost, damage at " << from << "+" << length);
      }
    }
  }
}

TEST_CASE("trajectory log: a FIFO or a folder is refused, never read") {
  const auto fifo = temp_file("pipe.log");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto refused = env::read_trajectory_log(fifo, [](core::Value&&) { return true; });
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("not a regular file") != std::string::npos);
  auto folder = env::read_trajectory_log(fifo.parent_path(), [](core::Value&&) { return true; });
  REQUIRE_FALSE(folder.ok());
  fs::remove(fifo);
}
