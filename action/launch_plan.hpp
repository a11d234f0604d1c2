// Launch plans: the @launch/@workspace/@cluster/@tensormap directives (or the structured `plan`
// field),
// validated against a task and a device, and evaluated per case into concrete launch shapes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/expr.hpp"
#include "core/result.hpp"
#include "core/value.hpp"

namespace crucible::action {

// Device limits and input caps. Defaults are those of H100/H200 (sm_90) and the server's caps.
struct PlanLimits {
  std::int64_t max_threads_per_block = 1024;
  std::array<std::int64_t, 3> max_block_dims{1024, 1024, 64};
  std::array<std::int64_t, 3> max_grid_dims{2147483647, 65535, 65535};
  // Dynamic shared memory per block after the runner opts in with
  // cudaFuncAttributeMaxDynamicSharedMemorySize (227 KiB on sm_90). The kernel's static shared
  // memory also counts against the device limit; the runner checks the sum after compiling.
  std::int64_t max_smem_bytes = 227 * 1024;
  // Blocks per thread-block cluster: 8 is portable; 16 when the runner opts in to non-portable
  // cluster sizes.
  std::int64_t max_cluster_size = 8;
  std::size_t max_launches = 16;
  std::size_t max_workspaces = 8;
  std::int64_t max_workspace_bytes = std::int64_t{1} << 30;  // all workspaces of one call together
  std::size_t max_args = 64;                                 // arguments of one launch
  std::size_t max_tensor_maps = 8;
  // Input caps: text is rejected before any parsing beyond them.
  std::size_t max_source_bytes = 256u << 10;
  std::size_t max_directives = 64;
  std::size_t max_directive_bytes = 1024;  // one directive line (or one structured string)
};

// What a plan may refer to. Built by the server from the task manifest and the device.
struct PlanContext {
  std::vector<std::pair<std::string, core::DType>> tensors;  // passed as device pointers
  std::vector<std::pair<std::string, core::DType>> scalars;  // passed by value in their dtype
  std::vector<std::string>
      symbols;  // shape symbols, passed as int or int64_t (see check_kernel_params)
  // Per tensor (same order), its shape as the manifest writes it: symbol names or decimal
  // literals, outermost first. A tensor map's view is checked against it on every case.
  std::vector<std::vector<std::string>> tensor_shapes;
  PlanLimits limits;
};

enum class ArgKind : std::uint8_t { kTensor, kScalar, kSymbol, kWorkspace, kTensorMap };

// One kernel argument, resolved. `index` points into PlanContext::tensors, ::scalars, ::symbols,
// LaunchPlan::workspaces or LaunchPlan::tensor_maps, by `kind`.
struct LaunchArg {
  std::string name;
  ArgKind kind = ArgKind::kTensor;
  std::size_t index = 0;
};

// A grid, block or cluster shape. `is_dim3` records whether it was written as dim3(...) or an
// array (messages then say "grid x"), or as one expression (messages say "grid"); y and z are
// the constant 1 unless given.
struct Dim3Expr {
  core::Expr x, y, z;
  bool is_dim3 = false;
};

struct Launch {
  std::string kernel;           // as written: "rms_norm_kernel", "ns::gemm"
  std::string template_args;    // text between the outer <...>, trimmed; empty when none
  std::string name_expression;  // what NVRTC is given: "gemm<float, 256>" or "rms_norm_kernel"
  Dim3Expr grid;
  Dim3Expr block;
  core::Expr smem_bytes;                // dynamic shared memory; the constant 0 when absent
  std::optional<core::Expr> condition;  // `if (...)`: the launch runs when it is non-zero
  std::vector<LaunchArg> args;          // in kernel parameter order
  std::optional<std::size_t> cluster;   // index into LaunchPlan::clusters
  int line = 0;                         // 1-based source line; 0 for the structured form
  std::string where;                    // "line 3" or "launches[2]": the prefix of messages
};

// Scratch memory the runner allocates for the call: `count` elements of `element_bytes`,
// 256-byte aligned, contents unspecified at the start of every call (a kernel that needs zeros
// writes them). Passed to kernels as a device pointer.
struct Workspace {
  std::string name;
  std::string type;  // as written, whitespace normalized: "float", "unsigned int", "bf16"
  std::size_t element_bytes = 0;
  core::Expr count;
  int line = 0;
  std::string where;
};

// A thread-block cluster shape for every launch of one kernel (launched with the cluster
// dimension attribute). `kernel` matches a launch's kernel or its full name expression.
struct Cluster {
  std::string kernel;
  Dim3Expr dims;
  int line = 0;
  std::string where;
};

inline constexpr std::size_t kTensorMapBytes = 128;  // sizeof(CUtensorMap)

// A TMA descriptor (CUtensorMap) over a view of one task tensor, encoded by the runner with
// cuTensorMapEncodeTiled for every call and passed by value (128 bytes, declared
// `const __grid_constant__ CUtensorMap`). The view starts at the tensor's first element; `dims`
// are its extents innermost first, `strides` the element strides of dimensions 1.. (packed over
// `dims` when empty), `box` the extents one copy moves. Elements outside the view read as zero.
struct TensorMap {
  static constexpr std::size_t kMaxRank = 5;
  static constexpr std::int64_t kMaxBox = 256;
  std::string name;
  std::size_t tensor = 0;  // index into PlanContext::tensors
  std::vector<core::Expr> dims;
  std::vector<core::Expr> box;      // one per dimension
  std::vector<core::Expr> strides;  // empty, or one per dimension after the first
  std::uint32_t swizzle = 0;        // bytes of the swizzle pattern: 0 (none), 32, 64 or 128
  std::string tensor_name;          // as written, resolved into `tensor` by validation
  int line = 0;
  std::string where;
};

struct LaunchPlan {
  std::vector<Launch> launches;  // in run order
  std::vector<Workspace> workspaces;
  std::vector<Cluster> clusters;
  std::vector<TensorMap> tensor_maps;

  // Distinct name expressions in first-launch order: the compile step registers each with
  // nvrtcAddNameExpression and returns the lowered names; an unknown kernel fails there.
  std::vector<std::string> name_expressions() const;
};

// Parses the directives in the `//` comments of `source` (block comments, string and character
// literals are skipped) and validates them against `context`. A `// @word` comment that is not a
// directive is an error. Every error is kInvalidArgument with a message that starts with the
// line ("line 3: ...") and says what to change.
core::Result<LaunchPlan> parse_launch_plan(std::string_view source, const PlanContext& context);

// The same plan as a structured value (docs/launch_plan.md): either an array of launch maps, or a
// map {launches: [...], workspaces?: [...], clusters?: [...], tensor_maps?: [...]}. Launch map
// keys: kernel, template_args?, grid, block, smem?, args, if?; grid/block/smem/if are expression
// strings or integers, grid and block also arrays of 1 to 3 of those. Messages start with the path
// ("launches[1].grid: ...").
core::Result<LaunchPlan> parse_structured_plan(const core::Value& plan, const PlanContext& context);

// The plan of one action: `plan` when it is not null (then `source` must hold no @launch
// directive: one plan per action), the directives of `source` otherwise.
core::Result<LaunchPlan> parse_action_plan(std::string_view source, const core::Value& plan,
                                           const PlanContext& context);

struct ConcreteLaunch {
  std::size_t launch = 0;  // index into LaunchPlan::launches
  std::array<std::uint32_t, 3> grid{1, 1, 1};
  std::array<std::uint32_t, 3> block{1, 1, 1};
  std::array<std::uint32_t, 3> cluster{1, 1, 1};  // {1, 1, 1} and has_cluster false when none
  bool has_cluster = false;
  std::uint32_t smem_bytes = 0;
};

// A tensor map for one case: what cuTensorMapEncodeTiled takes besides the tensor's address.
// Rank 0: no launch that runs for the case passes the map, so it is neither checked nor encoded.
struct ConcreteTensorMap {
  std::size_t tensor = 0;  // index into PlanContext::tensors
  core::DType dtype = core::DType::kF32;
  std::uint32_t rank = 1;
  std::array<std::uint64_t, TensorMap::kMaxRank> dims{};              // elements, innermost first
  std::array<std::uint64_t, TensorMap::kMaxRank - 1> stride_bytes{};  // of dimensions 1..rank-1
  std::array<std::uint32_t, TensorMap::kMaxRank> box{};
  std::uint32_t swizzle = 0;
};

struct ConcretePlan {
  std::vector<ConcreteLaunch> launches;        // in run order, launches whose `if` is 0 left out
  std::vector<std::uint64_t> workspace_bytes;  // per LaunchPlan::workspaces
  std::vector<std::int64_t> symbol_values;     // per PlanContext::symbols
  std::vector<ConcreteTensorMap> tensor_maps;  // per LaunchPlan::tensor_maps (rank 0: unused)
};

// Evaluates the plan for one case. `symbols` must hold a value for every PlanContext symbol
// (a missing one is the server's bug: InternalError). Checks every dimension >= 1 and within the
// device limits, threads per block, shared memory, cluster size and that the grid is a multiple
// of the cluster, workspace sizes against the cap, that at least one launch runs, and every
// tensor map a running launch passes against the TMA's rules and its tensor's extent. Errors are
// kInvalidArgument, naming the line and the case's symbol values. Call it for every case before
// compiling so a bad plan costs nothing.
core::Result<ConcretePlan> evaluate_plan(const LaunchPlan& plan,
                                         const std::map<std::string, std::int64_t>& symbols,
                                         const PlanContext& context);

// How arguments are passed (what the kernel must declare):
//   tensor     device pointer to the dtype's CUDA type, 8 bytes: `const __nv_bfloat16* input`
//   workspace  device pointer, 8 bytes: `float* partials`
//   scalar     by value in its dtype (dtype_cuda_type): `float epsilon` for f32
//   symbol     by value as the width the kernel declares: a 4-byte parameter (`int`) gets int32
//              (an error if the case's value does not fit), an 8-byte one (`int64_t`, `long
//              long`) gets int64.
//   tensor map by value, 128 bytes: `const __grid_constant__ CUtensorMap input_map`.
// After compiling, the runner reads the kernel's parameter sizes (cuFuncGetParamInfo) and calls
// check_kernel_params, then encode_symbol_arg for each symbol argument.
core::Status check_kernel_params(const Launch& launch, const std::vector<std::size_t>& param_bytes,
                                 const PlanContext& context);

// The bytes of symbol argument `arg` (an index into launch.args, which must be a symbol) holding
// `value`, for a kernel parameter of `param_bytes` (4 or 8), in host byte order.
core::Result<std::vector<std::byte>> encode_symbol_arg(const Launch& launch, std::size_t arg,
                                                       std::int64_t value, std::size_t param_bytes);

}  // namespace crucible::action
