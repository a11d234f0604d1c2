// Captured task inputs: a safetensors reader that distrusts its file, and the provenance record
// tasks/capture writes beside each file (docs/capture.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/result.hpp"

namespace crucible::tasks {

// One tensor: dtype, row-major shape and its little-endian bytes (bf16 as raw 16-bit words).
// bytes.size() == product(shape) * dtype_size(dtype), always.
struct CapturedTensor {
  std::string name;
  core::DType dtype = core::DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;

  std::int64_t numel() const;
};

// A parsed safetensors file: tensors in the order of their data offsets, and the header's
// optional "__metadata__" string map.
struct SafetensorsFile {
  std::vector<CapturedTensor> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;

  // nullptr when no tensor has that name.
  const CapturedTensor* find(std::string_view name) const;
};

struct SafetensorsLimits {
  std::uint64_t max_header_bytes = 100ull << 20;  // the format's own limit
  std::uint64_t max_file_bytes = 1ull << 32;      // refuse larger files before reading them
  std::size_t max_tensors = 100000;
  std::size_t max_rank = 8;
};

// Parses safetensors bytes (u64 LE header length, JSON header, data). `label` names the source in
// every error (a path). Checks: the header length fits the limit and the input; the header is a
// JSON object of {"dtype", "shape", "data_offsets"} entries; dtypes are ones core::DType has
// ("BF16", "F16", "F32", "F64", "F8_E4M3", "F8_E5M2", "I8", "U8", "I16", "I32", "I64", "BOOL");
// dims are non-negative and their product does not overflow; offsets satisfy begin <= end <=
// data size and end - begin equals the byte count of dtype and shape; tensors neither overlap
// nor leave holes, and cover the data exactly; names are unique. Every error is kInvalidArgument
// with a message naming `label` and, where one is involved, the tensor. Thread-safe.
core::Result<SafetensorsFile> parse_safetensors(std::string_view bytes, std::string_view label,
                                                const SafetensorsLimits& limits = {});

// Reads and parses `path`. Errors: kIo when it cannot be read, else as parse_safetensors.
core::Result<SafetensorsFile> read_safetensors(const std::filesystem::path& path,
                                               const SafetensorsLimits& limits = {});

// read_safetensors with the default limits, parsed once per process and shared: the runner's
// generators and the registry's checks read the same small files many times. Errors are not
// kept (a later call reads again). Thread-safe.
core::Result<std::shared_ptr<const SafetensorsFile>> cached_safetensors(
    const std::filesystem::path& path);

// What the provenance says of one tensor of a case.
struct CapturedTensorRecord {
  std::string name;  // key in the safetensors file: "<case>/<arg>" or "<case>/<arg>.after"
  std::string arg;   // the production call's argument name ("input", "key_cache", ...)
  std::string role;  // "in", "out", "inout" (value before the call) or "after" (inout, after)
  core::DType dtype = core::DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;
  std::string sha256;  // 64 lowercase hex digits of the tensor's bytes
};

// One recorded op call.
struct CapturedCase {
  std::string name;                   // "layer3.ffn_norm", "final_norm", ...
  std::optional<std::int64_t> layer;  // absent for the final norm
  std::string point;                  // attn_norm, ffn_norm, final_norm, rope, kv_cache, ...
  nlohmann::json scalars;             // {"epsilon": 1e-05}, {"head_size": 8, "is_neox": false}, ...
  std::vector<CapturedTensorRecord> tensors;
};

// A case group: one safetensors file and its provenance record (<stem>.json beside it).
struct CapturedGroup {
  std::filesystem::path path;
  SafetensorsFile file;
  nlohmann::json provenance;         // the whole record, for fields not lifted out below
  std::string op;                    // "rms_norm", "paged_decode_attention", ...
  std::string phase;                 // "prefill" or "decode"
  std::optional<std::int64_t> step;  // decode step; absent in prefill
  std::string model;                 // provenance model.name
  std::vector<CapturedCase> cases;

  // The tensor of `case_name` for `arg` (role "after" for an inout argument's result).
  const CapturedTensor* tensor(std::string_view case_name, std::string_view arg,
                               bool after = false) const;
};

// Loads `safetensors_path` and the provenance beside it (same stem, ".json") and checks that they
// agree: every tensor the provenance lists exists with its dtype, shape, byte count and sha256,
// and the file holds no tensor the provenance does not list. Errors: kIo when a file cannot be
// read; kInvalidArgument for a malformed file or record, or a disagreement (naming the file and
// the tensor). Thread-safe.
core::Result<CapturedGroup> load_captured(const std::filesystem::path& safetensors_path,
                                          const SafetensorsLimits& limits = {});

// The safetensors dtype name of `dtype` ("BF16", ...), and the reverse.
std::string_view safetensors_dtype_name(core::DType dtype);
std::optional<core::DType> dtype_from_safetensors_name(std::string_view name);

}  // namespace crucible::tasks
