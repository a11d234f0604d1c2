// Trajectory log: round trip, torn tails, format versions, and a writer killed mid-write.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
    env::LogReadReport report;
    const auto records = read_all(path, &report);
    if (any) CHECK(records.size() >= acknowledged + 1);
    for (std::size_t i = 0; i < records.size(); ++i) CHECK(records[i]["n"] == i);
  }
}
