// CPU float64 oracles: for every task, the op computed in double precision from decoded inputs.
// Tests hold each reference kernel to its oracle on small shapes (tests/kernels), so a reference
// is known right before its outputs become the answer agents are judged against.
//
// An oracle is registered once per task id, from its own source file under kernels/oracles/:
//
//   CRUCIBLE_ORACLE("llm/rms_norm", rms_norm_oracle);
//
// The library is an OBJECT library (crucible::oracles), so every registration is linked in.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
#include "core/result.hpp"
#include "tasks/task.hpp"

namespace crucible::tasks {

// One tensor of a case, every element decoded to double (row-major, `shape` outermost first).
struct OracleTensor {
  core::DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<double> values;

  std::int64_t dim(std::size_t axis) const { return shape.at(axis); }
  std::size_t size() const { return values.size(); }
};

// What an oracle sees: the task, the case (symbols and scalars), and every tensor by name.
// Inputs (in, inout) hold their values; outputs (out) hold zeros of the right size. The oracle
// writes the expected value of every out and inout tensor in place, exactly (float64), or
// rounded the way the op itself rounds where that is part of its definition (an fp8 quantizer
// rounds to e4m3; an index output is an integer). Returns an error only for a case it cannot
// compute (a bad shape), never for a value.
struct OracleCall {
  const tasks::Task& task;
  const tasks::Case& c;
  std::map<std::string, OracleTensor>& tensors;

  OracleTensor& tensor(const std::string& name) const { return tensors.at(name); }
  std::int64_t symbol(const std::string& name) const { return c.symbols.at(name); }
  double scalar(const std::string& name) const { return c.scalars.at(name); }
};

using OracleFn = std::function<core::Status(const OracleCall&)>;

// Registers `fn` as the oracle of `task_id`; returns true (for the registration macro).
bool register_oracle(std::string task_id, OracleFn fn);
// The oracle of a task, or nullptr.
const OracleFn* find_oracle(std::string_view task_id);
// Every registered task id, sorted.
std::vector<std::string> oracle_task_ids();

// Decodes host bytes of `dtype` to doubles (exact for every dtype but i64 beyond 2^53).
std::vector<double> decode_values(core::DType dtype, const void* data, std::size_t count);
// Encodes doubles as host bytes of `dtype` (rounded as round_to_dtype does).
std::vector<std::byte> encode_values(core::DType dtype, const std::vector<double>& values);
// Rounds a double to what storing it as `dtype` keeps (float types: round to nearest even via
// float for 16-bit and fp8 types; integers: round half away from zero, saturating).
double round_to_dtype(core::DType dtype, double value);

// Runs units 0 .. units - 1 of an oracle's work: each thread calls make_worker() once (the
// worker owns its scratch) and hands the worker units taken from a shared counter, so long and
// short units balance. Up to one thread per core (at most 64); with `parallel` false (small
// cases, the CPU suite's) everything runs on the calling thread.
template <typename MakeWorker>
void share_units(std::int64_t units, bool parallel, MakeWorker make_worker) {
  std::atomic<std::int64_t> next{0};
  auto run = [&] {
    auto worker = make_worker();
    for (std::int64_t unit = next++; unit < units; unit = next++) worker(unit);
  };
  const std::int64_t threads = std::clamp<std::int64_t>(
      std::min<std::int64_t>(std::thread::hardware_concurrency(), units), 1, 64);
  if (!parallel || threads == 1) {
    run();
    return;
  }
  std::vector<std::thread> pool;
  for (std::int64_t t = 0; t < threads; ++t) pool.emplace_back(run);
  for (auto& thread : pool) thread.join();
}

// The element offset, in a paged flash-layout cache [num_blocks, block_size, kv_heads,
// head_size], of the row (every kv head) of each of the first `length` tokens of sequence `seq`,
// found through block_tables [seqs, table_width]. An error naming the entry and the sequence
// when a block id the tokens reach is outside [0, num_blocks); the caller checks `length`
// against table_width * block_size.
struct PagedCacheLayout {
  std::int64_t num_blocks, block_size, table_width, token_elements;  // kv_heads * head_size
};
core::Result<std::vector<std::size_t>> paged_token_rows(const OracleTensor& block_tables,
                                                        std::int64_t seq, std::int64_t length,
                                                        const PagedCacheLayout& layout);

// out[t, n] = sum_k x[t, k] * w[n, k] in double (x: [rows, k], w: [cols, k], out: [rows, cols],
// row-major): the GEMM of the linear layers' oracles. Rows and blocks of columns are shared out
// among threads when the product is large (the GPU suite checks prefill-sized cases with
// billions of multiply-adds; a model step's oracle multiplies a few rows by 8B weights).
void matmul_nt(const double* x, const double* w, double* out, std::int64_t rows, std::int64_t k,
               std::int64_t cols);

// The input bytes of every in and inout tensor of one case and draw, as the runner builds them
// (generated or captured values), by tensor name.
using InputBytes = std::map<std::string, std::vector<std::byte>>;
core::Result<InputBytes> case_inputs(const tasks::Task& task, const tasks::Case& c,
                                     std::uint64_t case_seed, std::uint64_t draw = 0);

// Runs the task's oracle on `inputs` (one entry per in and inout tensor) with zeroed outputs.
// kUnknownTask when the task has no oracle.
core::Result<std::map<std::string, OracleTensor>> run_oracle(const tasks::Task& task,
                                                             const tasks::Case& c,
                                                             const InputBytes& inputs);
// The same on the inputs of one case and draw (case_inputs).
core::Result<std::map<std::string, OracleTensor>> run_oracle(const tasks::Task& task,
                                                             const tasks::Case& c,
                                                             std::uint64_t case_seed,
                                                             std::uint64_t draw = 0);

}  // namespace crucible::tasks

#define CRUCIBLE_ORACLE_CONCAT2(a, b) a##b
#define CRUCIBLE_ORACLE_CONCAT(a, b) CRUCIBLE_ORACLE_CONCAT2(a, b)
#define CRUCIBLE_ORACLE(task_id, fn)                                                        \
  [[maybe_unused]] static const bool CRUCIBLE_ORACLE_CONCAT(oracle_registered_, __LINE__) = \
      ::crucible::tasks::register_oracle(task_id, fn)
