// The oracle registry, value decoding and the case set-up shared by every oracle.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "tasks/generators.hpp"

namespace crucible::tasks {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, OracleFn, std::less<>> oracles;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

template <class T>
double saturate(double value) {
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (std::isnan(value)) return 0.0;
  return std::clamp(std::round(value), lo, hi);
}

}  // namespace

bool register_oracle(std::string task_id, OracleFn fn) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.oracles[std::move(task_id)] = std::move(fn);
  return true;
}

const OracleFn* find_oracle(std::string_view task_id) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.oracles.find(task_id);
  return it == r.oracles.end() ? nullptr : &it->second;
}

std::vector<std::string> oracle_task_ids() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> ids;
  for (const auto& [id, fn] : r.oracles) ids.push_back(id);
  return ids;
}

std::vector<double> decode_values(core::DType dtype, const void* data, std::size_t count) {
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = core::element_as_double(dtype, data, i);
  return values;
}

core::Result<std::vector<std::size_t>> paged_token_rows(const OracleTensor& block_tables,
                                                        std::int64_t seq, std::int64_t length,
                                                        const PagedCacheLayout& layout) {
  std::vector<std::size_t> rows(static_cast<std::size_t>(length));
  for (std::int64_t j = 0; j < length; ++j) {
    const auto block = static_cast<std::int64_t>(
        block_tables
            .values[static_cast<std::size_t>(seq * layout.table_width + j / layout.block_size)]);
    if (block < 0 || block >= layout.num_blocks) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "block table entry " + std::to_string(block) + " of sequence " +
                             std::to_string(seq) + " out of range"};
    }
    rows[static_cast<std::size_t>(j)] = static_cast<std::size_t>(
        (block * layout.block_size + j % layout.block_size) * layout.token_elements);
  }
  return rows;
}

void matmul_nt(const double* x, const double* w, double* out, std::int64_t rows, std::int64_t k,
               std::int64_t cols) {
  // Units of one row and up to 64 columns, so a decode step's few rows still use every core;
  // each output is the same in-order sum whatever the split.
  constexpr std::int64_t kColumns = 64;
  const std::int64_t column_blocks = (cols + kColumns - 1) / kColumns;
  share_units(rows * column_blocks, rows * cols * k >= (std::int64_t{1} << 24), [&] {
    return [&](std::int64_t unit) {
      const std::int64_t t = unit / column_blocks;
      const std::int64_t first = (unit % column_blocks) * kColumns;
      const std::int64_t last = std::min(cols, first + kColumns);
      for (std::int64_t n = first; n < last; ++n) {
        double sum = 0.0;
        for (std::int64_t i = 0; i < k; ++i) sum += x[t * k + i] * w[n * k + i];
        out[t * cols + n] = sum;
      }
    };
  });
}

double round_to_dtype(core::DType dtype, double value) {
  const auto f = static_cast<float>(value);
  switch (dtype) {
    case core::DType::kBF16:
      return core::bf16_to_float(core::float_to_bf16(f));
    case core::DType::kF16:
      return core::f16_to_float(core::float_to_f16(f));
    case core::DType::kF32:
      return f;
    case core::DType::kF64:
      return value;
    case core::DType::kFP8E4M3:
      return core::fp8_e4m3_to_float(core::float_to_fp8_e4m3(f));
    case core::DType::kFP8E5M2:
      return core::fp8_e5m2_to_float(core::float_to_fp8_e5m2(f));
    case core::DType::kI8:
      return saturate<std::int8_t>(value);
    case core::DType::kU8:
      return saturate<std::uint8_t>(value);
    case core::DType::kI16:
      return saturate<std::int16_t>(value);
    case core::DType::kI32:
      return saturate<std::int32_t>(value);
    case core::DType::kI64:
      return saturate<std::int64_t>(value);
    case core::DType::kBool:
      return value != 0.0 ? 1.0 : 0.0;
  }
  return value;
}

namespace {
template <class T>
void put(std::vector<std::byte>& out, std::size_t index, T value) {
  std::memcpy(out.data() + index * sizeof(T), &value, sizeof(T));
}
}  // namespace

std::vector<std::byte> encode_values(core::DType dtype, const std::vector<double>& values) {
  std::vector<std::byte> out(values.size() * core::dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = round_to_dtype(dtype, values[i]);
    const auto f = static_cast<float>(v);
    switch (dtype) {
      case core::DType::kBF16:
        put(out, i, core::float_to_bf16(f));
        break;
      case core::DType::kF16:
        put(out, i, core::float_to_f16(f));
        break;
      case core::DType::kF32:
        put(out, i, f);
        break;
      case core::DType::kF64:
        put(out, i, v);
        break;
      case core::DType::kFP8E4M3:
        put(out, i, core::float_to_fp8_e4m3(f));
        break;
      case core::DType::kFP8E5M2:
        put(out, i, core::float_to_fp8_e5m2(f));
        break;
      case core::DType::kI8:
        put(out, i, static_cast<std::int8_t>(v));
        break;
      case core::DType::kU8:
      case core::DType::kBool:
        put(out, i, static_cast<std::uint8_t>(v));
        break;
      case core::DType::kI16:
        put(out, i, static_cast<std::int16_t>(v));
        break;
      case core::DType::kI32:
        put(out, i, static_cast<std::int32_t>(v));
        break;
      case core::DType::kI64:
        put(out, i, static_cast<std::int64_t>(v));
        break;
    }
  }
  return out;
}

core::Result<InputBytes> case_inputs(const tasks::Task& task, const tasks::Case& c,
                                     std::uint64_t case_seed, std::uint64_t draw) {
  InputBytes inputs;
  for (const auto& spec : task.tensors) {
    if (!tasks::is_input(spec.role)) continue;
    auto bytes = tasks::generate_tensor(c, spec, case_seed, draw);
    if (!bytes) return bytes.error();
    inputs.emplace(spec.name, std::move(bytes).value());
  }
  return inputs;
}

core::Result<std::map<std::string, OracleTensor>> run_oracle(const tasks::Task& task,
                                                             const tasks::Case& c,
                                                             const InputBytes& inputs) {
  const OracleFn* oracle = find_oracle(task.id);
  if (oracle == nullptr) {
    return core::Error{core::ErrorCode::kUnknownTask, "no oracle for task '" + task.id + "'"};
  }
  std::map<std::string, OracleTensor> tensors;
  for (const auto& spec : task.tensors) {
    auto shape = tasks::resolve_shape(spec, c);
    if (!shape) return shape.error();
    const auto elements = tasks::element_count(spec, c);
    if (!elements) return elements.error();
    const auto count = static_cast<std::size_t>(*elements);
    OracleTensor tensor{spec.dtype, *shape, {}};
    if (tasks::is_input(spec.role)) {
      const auto it = inputs.find(spec.name);
      if (it == inputs.end() || it->second.size() != count * core::dtype_size(spec.dtype)) {
        return core::Error{core::ErrorCode::kInvalidArgument,
                           "no input of the case's size for tensor '" + spec.name + "'"};
      }
      tensor.values = decode_values(spec.dtype, it->second.data(), count);
    } else {
      tensor.values.assign(count, 0.0);
    }
    tensors.emplace(spec.name, std::move(tensor));
  }
  if (auto status = (*oracle)(OracleCall{task, c, tensors}); !status) return status.error();
  return tensors;
}

core::Result<std::map<std::string, OracleTensor>> run_oracle(const tasks::Task& task,
                                                             const tasks::Case& c,
                                                             std::uint64_t case_seed,
                                                             std::uint64_t draw) {
  if (find_oracle(task.id) == nullptr) {
    return core::Error{core::ErrorCode::kUnknownTask, "no oracle for task '" + task.id + "'"};
  }
  auto inputs = case_inputs(task, c, case_seed, draw);
  if (!inputs) return inputs.error();
  return run_oracle(task, c, *inputs);
}

}  // namespace crucible::tasks
