// Fuzz target: tasks::parse_safetensors, the reader of captured task inputs.
// Input: the bytes of one .safetensors file. Findings: any crash, leak, UB or uncaught exception;
// an error that is not kInvalidArgument or whose message is not valid UTF-8; an accepted file
// that breaks the documented invariants (each tensor's bytes are product(shape) * dtype size,
// names unique and found by find(), rank and count within the limits).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "core/dtype.hpp"
#include "fuzz/fuzz_checks.hpp"
#include "tasks/captured.hpp"

namespace {

namespace core = crucible::core;
namespace fuzz = crucible::fuzz;
namespace tasks = crucible::tasks;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const tasks::SafetensorsLimits limits;
  const auto file = tasks::parse_safetensors(bytes, "fuzz.safetensors", limits);
  if (!file) {
    if (file.error().code != core::ErrorCode::kInvalidArgument) {
      fuzz::fail("parse_safetensors: an error that is not kInvalidArgument", file.error().message);
    }
    fuzz::require_utf8(file.error().message, "parse_safetensors");
    return 0;
  }
  if (file->tensors.size() > limits.max_tensors) fuzz::fail("more tensors than the limit");
  std::set<std::string> names;
  std::size_t data_bytes = 0;
  for (const auto& tensor : file->tensors) {
    if (!names.insert(tensor.name).second) fuzz::fail("a duplicate tensor name", tensor.name);
    if (file->find(tensor.name) != &tensor) fuzz::fail("find() misses a tensor", tensor.name);
    if (tensor.shape.size() > limits.max_rank) fuzz::fail("a rank over the limit", tensor.name);
    std::uint64_t elements = 1;
    for (const auto dim : tensor.shape) {
      if (dim < 0) fuzz::fail("a negative dimension", tensor.name);
      if (dim != 0 && elements > UINT64_MAX / static_cast<std::uint64_t>(dim)) {
        fuzz::fail("a shape whose element count overflows", tensor.name);
      }
      elements *= static_cast<std::uint64_t>(dim);
    }
    if (tensor.numel() < 0 || static_cast<std::uint64_t>(tensor.numel()) != elements ||
        tensor.bytes.size() != elements * core::dtype_size(tensor.dtype)) {
      fuzz::fail("a tensor whose bytes are not its shape times its dtype size", tensor.name);
    }
    data_bytes += tensor.bytes.size();
  }
  if (data_bytes > bytes.size()) fuzz::fail("tensors hold more bytes than the file");
  for (const auto& [key, value] : file->metadata) {
    fuzz::require_utf8(key, "metadata key");
    fuzz::require_utf8(value, "metadata value");
  }
  return 0;
}
