// Fuzz target: env::read_trajectory_bytes, the crash-safe trajectory-log reader.
// Input: the bytes of a log file. Findings: any crash, leak, UB or uncaught exception; a report
// whose skipped ranges are out of order, overlap, leave the file or disagree with torn_tail;
// a reader that does not stop when asked; and a damaged log that hides a good record appended
// after it (the header's promise: one damaged record never hides the records after it).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/checksum.hpp"
#include "core/msgpack_codec.hpp"
#include "env/trajectory_log.hpp"
#include "fuzz/fuzz_checks.hpp"

namespace {

namespace core = crucible::core;
namespace env = crucible::env;
namespace fuzz = crucible::fuzz;

constexpr std::size_t kHeaderBytes = 16;

void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

// One good record as the writer frames it (env/trajectory_log.hpp): marker, length, crc32c.
const std::string& good_record() {
  static const std::string record = [] {
    const std::string payload =
        core::encode_msgpack(core::Value{{"kind", "fuzz"}, {"step", 1}, {"ok", true}});
    std::string out;
    put_u32(out, 0x52435243u);
    put_u32(out, static_cast<std::uint32_t>(payload.size()));
    put_u32(out, core::crc32c(payload));
    return out + payload;
  }();
  return record;
}

void check_report(const env::LogReadReport& report, std::uint64_t delivered,
                  std::string_view bytes) {
  if (report.records != delivered) fuzz::fail("records differs from the records delivered");
  if (report.file_bytes != bytes.size() || report.good_bytes > bytes.size()) {
    fuzz::fail("file_bytes or good_bytes outside the file");
  }
  std::uint64_t next = kHeaderBytes;
  for (const auto& range : report.skipped) {
    if (range.bytes == 0 || range.offset < next || range.offset + range.bytes > bytes.size()) {
      fuzz::fail("skipped ranges empty, out of order, overlapping or outside the file");
    }
    fuzz::require_utf8(range.reason, "skipped range reason");
    next = range.offset + range.bytes;
  }
  const bool tail = !report.skipped.empty() &&
                    report.skipped.back().offset + report.skipped.back().bytes == bytes.size() &&
                    report.skipped.back().offset >= report.good_bytes;
  if (report.torn_tail != tail) fuzz::fail("torn_tail disagrees with the skipped ranges");
  fuzz::require_utf8(env::describe_skipped(report), "describe_skipped");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::uint64_t delivered = 0;
  const auto report = env::read_trajectory_bytes(
      bytes,
      [&](core::Value&&) {
        ++delivered;
        return true;
      },
      "fuzz.log");
  if (!report) {
    fuzz::require_utf8(report.error().message, "read_trajectory_bytes");
    return 0;
  }
  check_report(*report, delivered, bytes);

  std::uint64_t calls = 0;
  const auto first = env::read_trajectory_bytes(bytes, [&](core::Value&&) {
    ++calls;
    return false;
  });
  if (!first || calls != (delivered > 0 ? 1 : 0) || first->records != calls) {
    fuzz::fail("the reader did not stop after on_record returned false");
  }

  if (size < kHeaderBytes) return 0;
  const std::string appended = std::string(bytes) + good_record();
  core::Value last;
  std::uint64_t appended_records = 0;
  const auto after = env::read_trajectory_bytes(appended, [&](core::Value&& value) {
    ++appended_records;
    last = std::move(value);
    return true;
  });
  if (!after) fuzz::fail("appending a good record made the log unreadable");
  if (appended_records < delivered + 1 || after->good_bytes != appended.size() ||
      after->torn_tail) {
    fuzz::fail("a good record appended after these bytes was not read");
  }
  return 0;
}
