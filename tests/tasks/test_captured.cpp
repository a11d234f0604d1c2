// Captured cases: the committed stories260K captures load and agree with their provenance; the
// safetensors reader turns every malformed file into an error that names the file and tensor.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/checksum.hpp"
#include "tasks/captured.hpp"
#include "tasks/generators.hpp"

using namespace crucible;
using namespace crucible::tasks;

namespace {

const std::filesystem::path kCaptures =
    std::filesystem::path(CRUCIBLE_SOURCE_DIR) / "tasks" / "capture" / "cases";
const std::filesystem::path kCases = kCaptures / "stories260K";
const std::filesystem::path kOcrCases = kCaptures / "pp_ocrv4";

// A safetensors file from a header text and a data section.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[std::size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

float bf16_at(const CapturedTensor& t, std::int64_t i) {
  std::uint16_t bits = 0;
  std::memcpy(&bits, t.bytes.data() + 2 * i, 2);
  return bf16_to_float(bits);
}

std::string error_of(const std::string& header, const std::string& data) {
  auto parsed = parse_safetensors(safetensors_bytes(header, data), "bad.safetensors");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().code == core::ErrorCode::kInvalidArgument);
  CHECK(parsed.error().message.find("bad.safetensors") != std::string::npos);
  return parsed.error().message;
}

std::vector<std::filesystem::path> committed_groups(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() == ".safetensors") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// Every tensor of a loaded group is in its file with the recorded shape, dtype and sha256;
// returns how many there were.
std::size_t check_tensors(const CapturedGroup& group) {
  std::size_t tensors = 0;
  REQUIRE_FALSE(group.cases.empty());
  for (const CapturedCase& c : group.cases) {
    for (const CapturedTensorRecord& r : c.tensors) {
      const CapturedTensor* t = group.file.find(r.name);
      REQUIRE(t != nullptr);
      // Independent of load_captured's own check: the bytes hash to the recorded sha256.
      CHECK(core::sha256_hex(std::string_view(reinterpret_cast<const char*>(t->bytes.data()),
                                              t->bytes.size())) == r.sha256);
      CHECK(t->shape == r.shape);
      CHECK(t->dtype == r.dtype);
      CHECK(std::int64_t(t->bytes.size()) == t->numel() * std::int64_t(dtype_size(t->dtype)));
      ++tensors;
    }
  }
  return tensors;
}

}  // namespace

TEST_CASE("captured: every committed stories260K group loads and agrees with its provenance") {
  const auto paths = committed_groups(kCases);
  REQUIRE(paths.size() == 26);
  std::size_t tensors = 0;
  for (const auto& path : paths) {
    CAPTURE(path.string());
    auto group = load_captured(path);
    REQUIRE_MESSAGE(group.ok(), (group.ok() ? "" : group.error().message));
    CHECK(group->model == "stories260K");
    CHECK((group->phase == "prefill") != group->step.has_value());
    tensors += check_tensors(*group);
  }
  CHECK(tensors > 100);
}

TEST_CASE("captured: the committed PP-OCRv4 groups load and agree with their provenance") {
  const auto paths = committed_groups(kOcrCases);
  REQUIRE(paths.size() == 2);
  for (const auto& path : paths) {
    CAPTURE(path.string());
    auto group = load_captured(path);
    REQUIRE_MESSAGE(group.ok(), (group.ok() ? "" : group.error().message));
    CHECK(group->model.rfind("PP-OCRv4 ", 0) == 0);
    CHECK(group->phase == "forward");
    CHECK_FALSE(group->step.has_value());
    CHECK(group->cases.size() == 5);
    // input, weight, bias and out of each of the five calls, all bf16.
    CHECK(check_tensors(*group) == 20);
    for (const CapturedCase& c : group->cases) {
      for (const CapturedTensorRecord& r : c.tensors) CHECK(r.dtype == core::DType::kBF16);
    }
  }
}

TEST_CASE("captured: index tensors are int64 and int32 and activations bf16, as the tasks use") {
  auto rope = load_captured(kCases / "prefill.rotary_embedding.safetensors");
  REQUIRE(rope.ok());
  const CapturedTensor* positions = rope->tensor("layer0.rope", "positions");
  REQUIRE(positions != nullptr);
  CHECK(positions->dtype == core::DType::kI64);
  CHECK(rope->tensor("layer0.rope", "query")->dtype == core::DType::kBF16);
  CHECK(rope->tensor("layer0.rope", "query", true)->shape ==
        rope->tensor("layer0.rope", "query")->shape);
  CHECK(rope->cases[0].scalars.at("is_neox") == false);
  CHECK(rope->cases[0].scalars.at("head_size") == 8);

  auto attn = load_captured(kCases / "decode_step0.paged_decode_attention.safetensors");
  REQUIRE(attn.ok());
  CHECK(attn->step == 0);
  const CapturedTensor* tables = attn->tensor("layer0.attention", "block_tables");
  const CapturedTensor* lens = attn->tensor("layer0.attention", "seq_lens");
  REQUIRE(tables != nullptr);
  REQUIRE(lens != nullptr);
  CHECK(tables->dtype == core::DType::kI32);
  CHECK(lens->dtype == core::DType::kI32);
  CHECK(attn->tensor("layer0.attention", "key_cache")->shape ==
        std::vector<std::int64_t>{7, 16, 4, 8});
}

TEST_CASE("captured: a committed rms_norm case recomputes within the task's bf16 tolerance") {
  auto group = load_captured(kCases / "prefill.rms_norm.safetensors");
  REQUIRE(group.ok());
  for (const CapturedCase& c : group->cases) {
    CAPTURE(c.name);
    const CapturedTensor* input = group->tensor(c.name, "input");
    const CapturedTensor* weight = group->tensor(c.name, "weight");
    const CapturedTensor* out = group->tensor(c.name, "out");
    REQUIRE((input && weight && out));
    const double eps = c.scalars.at("epsilon").get<double>();
    const std::int64_t hidden = input->shape[1];
    for (std::int64_t t = 0; t < input->shape[0]; ++t) {
      double sum = 0;
      for (std::int64_t i = 0; i < hidden; ++i) {
        const double x = bf16_at(*input, t * hidden + i);
        sum += x * x;
      }
      const double inv = 1.0 / std::sqrt(sum / double(hidden) + eps);
      for (std::int64_t i = 0; i < hidden; ++i) {
        const double ref = bf16_at(*input, t * hidden + i) * inv * bf16_at(*weight, i);
        CHECK(std::abs(bf16_at(*out, t * hidden + i) - ref) <= 1e-2 + 1.6e-2 * std::abs(ref));
      }
    }
  }
}

TEST_CASE("captured: a well-formed file parses, metadata and zero-size tensors included") {
  const std::string header = R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                             R"("e":{"dtype":"BF16","shape":[0,3],"data_offsets":[8,8]},)"
                             R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},)"
                             R"("__metadata__":{"format":"pt"}})";
  auto parsed = parse_safetensors(safetensors_bytes(header, std::string(12, '\x01')), "ok");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->tensors.size() == 3);
  CHECK(parsed->find("b")->shape == std::vector<std::int64_t>{1, 2});
  CHECK(parsed->find("e")->bytes.empty());
  CHECK(parsed->find("a")->dtype == core::DType::kI32);
  REQUIRE(parsed->metadata.size() == 1);
  CHECK(parsed->metadata[0].second == "pt");
}

TEST_CASE("captured: malformed safetensors files are errors naming the file and the tensor") {
  struct Row {
    const char* what;
    std::string header;
    std::string data;
    const char* expect;  // a part of the message
  };
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<Row> rows = {
      {"not JSON", "{\"t\":", std::string(8, '\0'), "not valid JSON"},
      {"not an object", "[1,2]", "", "not a JSON object"},
      {"unknown dtype", R"({"t":{"dtype":"U64","shape":[1],"data_offsets":[0,8]}})",
       std::string(8, '\0'), "tensor 't': unsupported dtype 'U64'"},
      {"missing dtype", R"({"t":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'),
       "tensor 't': missing string field 'dtype'"},
      {"negative dim", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       std::string(4, '\0'), "tensor 't': shape holds"},
      {"float dim", R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
       std::string(4, '\0'), "tensor 't': shape holds"},
      {"shape and bytes disagree", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       std::string(8, '\0'), "tensor 't': shape [3] of F32 needs 12 bytes, offsets give 8"},
      {"offsets past the data", R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       std::string(8, '\0'), "tensor 't': data_offsets [0, 16) outside the 8-byte data"},
      {"begin after end", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})",
       std::string(8, '\0'), "tensor 't': data_offsets"},
      {"offsets not a pair", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
       std::string(4, '\0'), "tensor 't': 'data_offsets' is not"},
      {"overflowing shape",
       R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
       std::string(4, '\0'), "tensor 't': shape [4294967296, 4294967296] overflows"},
      {"overlapping tensors",
       "{" + ok_entry + R"(,"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, '\0'), "tensor 'u': bytes [4, 12) overlap another tensor"},
      {"hole between tensors",
       "{" + ok_entry + R"(,"u":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
       std::string(16, '\0'), "tensor 'u': a hole of 4 bytes"},
      {"trailing bytes", "{" + ok_entry + "}", std::string(12, '\0'), "4 bytes after the last"},
      {"duplicate name", "{" + ok_entry + "," + ok_entry + "}", std::string(8, '\0'),
       "tensor 't': name appears twice"},
      {"unknown field", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})",
       std::string(4, '\0'), "tensor 't': unknown field 'x'"},
      {"metadata not strings", "{" + ok_entry + R"(,"__metadata__":{"k":1}})", std::string(8, '\0'),
       "__metadata__ value of 'k'"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    const std::string message = error_of(row.header, row.data);
    CHECK_MESSAGE(message.find(row.expect) != std::string::npos, message);
  }
}

TEST_CASE("captured: truncated files and oversized headers are refused before any allocation") {
  auto short_file = parse_safetensors("abc", "short.safetensors");
  REQUIRE_FALSE(short_file.ok());
  CHECK(short_file.error().message.find("shorter than the 8-byte header length") !=
        std::string::npos);

  // Header length claims more than the file holds.
  std::string truncated = safetensors_bytes(
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  truncated.resize(20);
  auto cut = parse_safetensors(truncated, "cut.safetensors");
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().message.find("runs past the end") != std::string::npos);

  // A header length of 2^63: over the limit whatever the file size.
  std::string huge(16, '\0');
  huge[7] = '\x80';
  auto over = parse_safetensors(huge, "huge.safetensors");
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().message.find("over the limit") != std::string::npos);

  SafetensorsLimits limits;
  limits.max_header_bytes = 16;
  auto small = parse_safetensors(safetensors_bytes(std::string(20, ' '), ""), "l", limits);
  REQUIRE_FALSE(small.ok());
  CHECK(small.error().message.find("header length 20 over the limit 16") != std::string::npos);

  auto missing = read_safetensors("/nonexistent/x.safetensors");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == core::ErrorCode::kIo);
}

TEST_CASE("captured: a file that disagrees with its provenance is refused, naming the tensor") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("crucible_captured_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto src = kCases / "decode_step0.silu_and_mul.safetensors";
  const auto dst = dir / "decode_step0.silu_and_mul.safetensors";
  std::filesystem::copy_file(kCases / "decode_step0.silu_and_mul.json",
                             dir / "decode_step0.silu_and_mul.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 100);
  bytes[bytes.size() - 1] = char(bytes[bytes.size() - 1] ^ 0x01);  // last byte of the last tensor
  {
    std::ofstream out(dst, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  auto group = load_captured(dst);
  REQUIRE_FALSE(group.ok());
  CHECK(group.error().message.find("sha256 of its bytes differs") != std::string::npos);
  CHECK(group.error().message.find("tensor 'layer4.mlp/") != std::string::npos);
  CHECK(group.error().message.find(dst.string()) != std::string::npos);

  std::filesystem::remove(dir / "decode_step0.silu_and_mul.json");
  auto no_provenance = load_captured(dst);
  REQUIRE_FALSE(no_provenance.ok());
  CHECK(no_provenance.error().code == core::ErrorCode::kIo);
  std::filesystem::remove_all(dir);
}
