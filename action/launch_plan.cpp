// Launch-plan validation against a task and device, per-case evaluation, and kernel arguments.
#include "action/launch_plan.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "action/launch_plan_internal.hpp"
#include "core/text.hpp"

namespace crucible::action {

namespace plan_detail {

core::Error invalid(std::string message) {
  // Messages quote the agent's text (field values, names from a structured plan): made valid
  // UTF-8 here, the one place every plan error passes, so no quoting site can leak raw bytes.
  return core::Error{core::ErrorCode::kInvalidArgument, core::to_valid_utf8(message)};
}

std::string_view trim(std::string_view text) {
  const auto is_blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

bool is_identifier(std::string_view text) {
  if (text.empty()) return false;
  const auto start = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  if (!start(text.front())) return false;
  return std::all_of(text.begin(), text.end(),
                     [&](char c) { return start(c) || (c >= '0' && c <= '9'); });
}

bool is_qualified_name(std::string_view text) {
  if (text.substr(0, 2) == "::") text.remove_prefix(2);
  while (true) {
    const auto sep = text.find("::");
    if (!is_identifier(text.substr(0, sep))) return false;
    if (sep == std::string_view::npos) return true;
    text.remove_prefix(sep + 2);
  }
}

std::string normalize_spaces(std::string_view text) {
  text = trim(text);
  std::string out;
  bool blank = false;
  for (const char c : text) {
    if (c == ' ' || c == '\t') {
      blank = true;
      continue;
    }
    if (blank) out += ' ';
    blank = false;
    out += c;
  }
  return out;
}

std::string without_spaces(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c != ' ' && c != '\t') out += c;
  }
  return out;
}

std::string join(const std::vector<std::string>& items) {
  if (items.empty()) return "none";
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

namespace {
std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance: insertions, deletions, substitutions, transpositions.
  const std::size_t rows = a.size() + 1;
  const std::size_t cols = b.size() + 1;
  std::vector<std::size_t> d(rows * cols);
  for (std::size_t i = 0; i < rows; ++i) d[i * cols] = i;
  for (std::size_t j = 0; j < cols; ++j) d[j] = j;
  for (std::size_t i = 1; i < rows; ++i) {
    for (std::size_t j = 1; j < cols; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      std::size_t best = std::min(
          {d[(i - 1) * cols + j] + 1, d[i * cols + j - 1] + 1, d[(i - 1) * cols + j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        best = std::min(best, d[(i - 2) * cols + j - 2] + 1);
      }
      d[i * cols + j] = best;
    }
  }
  return d[rows * cols - 1];
}
}  // namespace

std::optional<std::string> closest(std::string_view word,
                                   const std::vector<std::string>& candidates) {
  constexpr std::size_t kMaxWordBytes = 64;  // keeps the quadratic distance cheap
  if (word.size() > kMaxWordBytes) return std::nullopt;
  const std::size_t allowed = word.size() <= 3 ? 1 : 2;
  std::optional<std::string> best;
  std::size_t best_distance = allowed + 1;
  for (const auto& candidate : candidates) {
    if (candidate.size() > kMaxWordBytes) continue;
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

core::Result<core::Expr> parse_field(const std::string& where, std::string_view label,
                                     std::string_view text) {
  auto expr = core::parse_expr(trim(text));
  if (!expr) {
    return invalid(where + ": " + std::string(label) + " '" + std::string(trim(text)) +
                   "': " + expr.error().message);
  }
  return expr;
}

namespace {
struct ElementType {
  std::string_view spelling;
  std::size_t bytes;
};
// Dtype names, their CUDA spellings, and the other element types kernels commonly keep in
// scratch memory (vector types, unsigned counters).
constexpr ElementType kElementTypes[] = {
    {"bf16", 2},
    {"f16", 2},
    {"f32", 4},
    {"f64", 8},
    {"fp8_e4m3", 1},
    {"fp8_e5m2", 1},
    {"i8", 1},
    {"u8", 1},
    {"i16", 2},
    {"u16", 2},
    {"i32", 4},
    {"u32", 4},
    {"i64", 8},
    {"u64", 8},
    {"bool", 1},
    {"__nv_bfloat16", 2},
    {"nv_bfloat16", 2},
    {"__half", 2},
    {"half", 2},
    {"__nv_bfloat162", 4},
    {"nv_bfloat162", 4},
    {"__half2", 4},
    {"half2", 4},
    {"float", 4},
    {"double", 8},
    {"__nv_fp8_e4m3", 1},
    {"__nv_fp8_e5m2", 1},
    {"char", 1},
    {"signed char", 1},
    {"unsigned char", 1},
    {"short", 2},
    {"unsigned short", 2},
    {"int", 4},
    {"unsigned", 4},
    {"unsigned int", 4},
    {"long long", 8},
    {"unsigned long long", 8},
    {"int8_t", 1},
    {"uint8_t", 1},
    {"int16_t", 2},
    {"uint16_t", 2},
    {"int32_t", 4},
    {"uint32_t", 4},
    {"int64_t", 8},
    {"uint64_t", 8},
    {"size_t", 8},
    {"float2", 8},
    {"float4", 16},
    {"int2", 8},
    {"int4", 16},
    {"uint2", 8},
    {"uint4", 16},
    {"double2", 16},
};
}  // namespace

std::optional<std::size_t> element_bytes(std::string_view type) {
  for (const auto& entry : kElementTypes) {
    if (entry.spelling == type) return entry.bytes;
  }
  return std::nullopt;
}

core::Error unknown_element_type(const std::string& where, std::string_view type) {
  std::vector<std::string> spellings;
  for (const auto& entry : kElementTypes) spellings.emplace_back(entry.spelling);
  std::string message = where + ": unknown workspace element type '" + std::string(type) + "'";
  if (const auto suggestion = closest(type, spellings)) {
    return invalid(message + "; did you mean '" + *suggestion + "'?");
  }
  return invalid(message +
                 "; use a dtype (bf16, f16, f32, f64, i8, u8, i16, i32, i64, bool) or a CUDA "
                 "type (float, __nv_bfloat16, __half, int, unsigned int, int64_t, float4, ...)");
}

core::Result<std::string> name_expression(const std::string& where, std::string_view kernel,
                                          std::string_view template_args) {
  if (template_args.empty()) return std::string(kernel);
  for (const char c : template_args) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') ||
                         std::string_view(" _,<>():*&+-/%.").find(c) != std::string_view::npos;
    if (!allowed) {
      return invalid(where + ": the template arguments of '" + std::string(kernel) +
                     "' contain a " + core::describe_byte(c) +
                     "; only types, numbers and constant expressions are allowed");
    }
  }
  return std::string(kernel) + "<" + std::string(template_args) + ">";
}

namespace {

std::string dim_label(const Dim3Expr& dims, std::string_view base, std::size_t axis) {
  if (!dims.is_dim3) return std::string(base);
  return std::string(base) + " " + "xyz"[axis];
}

std::optional<std::array<std::int64_t, 3>> constant_dims(const Dim3Expr& dims) {
  const auto x = dims.x.constant_value();
  const auto y = dims.y.constant_value();
  const auto z = dims.z.constant_value();
  if (!x || !y || !z) return std::nullopt;
  return std::array<std::int64_t, 3>{*x, *y, *z};
}

const core::Expr& axis_expr(const Dim3Expr& dims, std::size_t axis) {
  return axis == 0 ? dims.x : axis == 1 ? dims.y : dims.z;
}

core::Status check_positive(const std::string& where, const Dim3Expr& dims, std::string_view base,
                            const std::array<std::int64_t, 3>& values, const std::string& suffix) {
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (values[axis] < 1) {
      return invalid(where + ": " + dim_label(dims, base, axis) + " is " +
                     std::to_string(values[axis]) +
                     "; every grid, block and cluster dimension must be at least 1" + suffix);
    }
  }
  return {};
}

std::string spelled_dims(const std::array<std::int64_t, 3>& values) {
  return std::to_string(values[0]) + " x " + std::to_string(values[1]) + " x " +
         std::to_string(values[2]);
}

// Product of three positive values, saturated at int64 max.
std::int64_t product(const std::array<std::int64_t, 3>& values) {
  std::int64_t out = 1;
  for (const auto value : values) {
    if (__builtin_mul_overflow(out, value, &out)) return std::numeric_limits<std::int64_t>::max();
  }
  return out;
}

core::Status check_grid(const std::string& where, const Dim3Expr& dims,
                        const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                        const std::string& suffix) {
  if (auto ok = check_positive(where, dims, "grid", values, suffix); !ok) return ok;
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (values[axis] > limits.max_grid_dims[axis]) {
      return invalid(where + ": " + dim_label(dims, "grid", axis) + " " +
                     std::to_string(values[axis]) + " exceeds the device limit of " +
                     std::to_string(limits.max_grid_dims[axis]) +
                     (axis == 0 ? "" : "; put the largest dimension in x") + suffix);
    }
  }
  return {};
}

core::Status check_block(const std::string& where, const Dim3Expr& dims,
                         const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                         const std::string& suffix) {
  if (auto ok = check_positive(where, dims, "block", values, suffix); !ok) return ok;
  const std::int64_t threads = product(values);
  if (threads > limits.max_threads_per_block) {
    const std::string size = dims.is_dim3 && threads != std::numeric_limits<std::int64_t>::max()
                                 ? spelled_dims(values) + " = " + std::to_string(threads)
                             : dims.is_dim3 ? spelled_dims(values)
                                            : std::to_string(threads);
    return invalid(where + ": block size " + size + " exceeds the " +
                   std::to_string(limits.max_threads_per_block) + " threads a block may have" +
                   suffix);
  }
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (values[axis] > limits.max_block_dims[axis]) {
      return invalid(where + ": " + dim_label(dims, "block", axis) + " " +
                     std::to_string(values[axis]) + " exceeds the device limit of " +
                     std::to_string(limits.max_block_dims[axis]) + suffix);
    }
  }
  return {};
}

core::Status check_smem(const std::string& where, std::int64_t bytes, const PlanLimits& limits,
                        const std::string& suffix) {
  if (bytes < 0) {
    return invalid(where + ": shared memory size " + std::to_string(bytes) + " is negative" +
                   suffix);
  }
  if (bytes > limits.max_smem_bytes) {
    return invalid(where + ": shared memory size " + std::to_string(bytes) + " bytes exceeds the " +
                   std::to_string(limits.max_smem_bytes) +
                   " bytes of dynamic shared memory a block may use" + suffix);
  }
  return {};
}

core::Status check_cluster(const std::string& where, const Dim3Expr& dims,
                           const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                           const std::string& suffix) {
  if (auto ok = check_positive(where, dims, "cluster", values, suffix); !ok) return ok;
  const std::int64_t blocks = product(values);
  if (blocks > limits.max_cluster_size) {
    return invalid(where + ": cluster " + spelled_dims(values) + " = " + std::to_string(blocks) +
                   " blocks exceeds the " + std::to_string(limits.max_cluster_size) +
                   " blocks a cluster may have" + suffix);
  }
  return {};
}

core::Result<std::int64_t> check_workspace(const Workspace& workspace, std::int64_t count,
                                           const PlanLimits& limits, const std::string& suffix) {
  const std::string head = workspace.where + ": workspace '" + workspace.name + "'";
  if (count < 0) {
    return invalid(head + " count " + std::to_string(count) + " is negative" + suffix);
  }
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<std::int64_t>(workspace.element_bytes), &bytes) ||
      bytes > limits.max_workspace_bytes) {
    return invalid(head + " needs " + std::to_string(count) + " x " +
                   std::to_string(workspace.element_bytes) + " bytes, more than the " +
                   std::to_string(limits.max_workspace_bytes) +
                   " bytes all workspaces together may use" + suffix);
  }
  return bytes;
}

enum class NameKind { kTensor, kScalar, kSymbol, kWorkspace };

std::string_view kind_word(NameKind kind) {
  switch (kind) {
    case NameKind::kTensor:
      return "tensor";
    case NameKind::kScalar:
      return "scalar";
    case NameKind::kSymbol:
      return "shape symbol";
    case NameKind::kWorkspace:
      return "workspace";
  }
  return "name";
}

class Names {
 public:
  Names(const PlanContext& context, const LaunchPlan& plan) : context_(context) {
    for (std::size_t i = 0; i < context.tensors.size(); ++i) {
      add(context.tensors[i].first, NameKind::kTensor, i);
    }
    for (std::size_t i = 0; i < context.scalars.size(); ++i) {
      add(context.scalars[i].first, NameKind::kScalar, i);
    }
    for (std::size_t i = 0; i < context.symbols.size(); ++i) {
      add(context.symbols[i], NameKind::kSymbol, i);
    }
    for (std::size_t i = 0; i < plan.workspaces.size(); ++i) {
      add(plan.workspaces[i].name, NameKind::kWorkspace, i);
      workspaces_.push_back(plan.workspaces[i].name);
    }
  }

  struct Entry {
    NameKind kind;
    std::size_t index;
  };
  std::optional<Entry> find(const std::string& name) const {
    const auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  std::string listing() const {
    std::vector<std::string> tensors;
    std::vector<std::string> scalars;
    for (const auto& [name, dtype] : context_.tensors) tensors.push_back(name);
    for (const auto& [name, dtype] : context_.scalars) scalars.push_back(name);
    std::string out = "the task's tensors are " + join(tensors) + "; scalars: " + join(scalars) +
                      "; symbols: " + join(context_.symbols);
    if (!workspaces_.empty()) out += "; workspaces: " + join(workspaces_);
    return out;
  }

  // Every symbol of `expr` must be a shape symbol of the task.
  core::Status check_expr(const std::string& where, std::string_view label,
                          const core::Expr& expr) const {
    for (const auto& symbol : expr.symbols()) {
      const auto entry = find(symbol);
      if (entry && entry->kind == NameKind::kSymbol) continue;
      if (entry) {
        return invalid(where + ": " + std::string(label) + " uses '" + symbol + "', which is a " +
                       std::string(kind_word(entry->kind)) +
                       "; sizes and conditions may use only the shape symbols " +
                       join(context_.symbols));
      }
      std::string message = where + ": unknown symbol '" + symbol + "' in " + std::string(label) +
                            "; the task's shape symbols are " + join(context_.symbols);
      if (const auto suggestion = closest(symbol, context_.symbols)) {
        message += "; did you mean '" + *suggestion + "'?";
      }
      return invalid(message);
    }
    return {};
  }

 private:
  void add(const std::string& name, NameKind kind, std::size_t index) {
    entries_.emplace(name, Entry{kind, index});  // the first meaning of a name wins
  }

  const PlanContext& context_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> workspaces_;
};

core::Status check_dims_symbols(const Names& names, const std::string& where, std::string_view base,
                                const Dim3Expr& dims) {
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (auto ok = names.check_expr(where, dim_label(dims, base, axis), axis_expr(dims, axis));
        !ok) {
      return ok;
    }
  }
  return {};
}

std::string no_launch_message(const PlanContext& context, bool from_directives) {
  std::vector<std::string> tensors;
  for (const auto& [name, dtype] : context.tensors) tensors.push_back(name);
  const std::string grid = context.symbols.empty() ? "1" : context.symbols.front();
  const std::string args = tensors.empty() ? "" : join(tensors);
  if (from_directives) {
    return "no @launch directive found: declare at least one launch, e.g. // @launch my_kernel<<<" +
           grid + ", 256>>>(" + args + ")";
  }
  return "the plan has no launches: give at least one, e.g. {\"kernel\": \"my_kernel\", "
         "\"grid\": \"" +
         grid + "\", \"block\": 256, \"args\": [" +
         [&] {
           std::string quoted;
           for (const auto& name : tensors)
             quoted += (quoted.empty() ? "\"" : ", \"") + name + "\"";
           return quoted;
         }() +
         "]}";
}

}  // namespace

core::Result<LaunchPlan> finish_plan(LaunchPlan plan, const PlanContext& context,
                                     bool from_directives) {
  const PlanLimits& limits = context.limits;
  if (plan.launches.empty()) return invalid(no_launch_message(context, from_directives));
  if (plan.launches.size() > limits.max_launches) {
    const auto& extra = plan.launches[limits.max_launches];
    return invalid(extra.where + ": launch " + std::to_string(limits.max_launches + 1) +
                   " is one too many; a plan may have at most " +
                   std::to_string(limits.max_launches) +
                   " launches (do more work per kernel, or loop inside one)");
  }
  if (plan.workspaces.size() > limits.max_workspaces) {
    const auto& extra = plan.workspaces[limits.max_workspaces];
    return invalid(extra.where + ": workspace " + std::to_string(limits.max_workspaces + 1) +
                   " is one too many; a plan may have at most " +
                   std::to_string(limits.max_workspaces) + " workspaces");
  }

  // Workspace names: fresh identifiers, each declared once.
  {
    const Names context_names(context, LaunchPlan{});
    for (std::size_t i = 0; i < plan.workspaces.size(); ++i) {
      const Workspace& workspace = plan.workspaces[i];
      if (!is_identifier(workspace.name)) {
        return invalid(workspace.where + ": workspace name '" + workspace.name +
                       "' is not an identifier");
      }
      if (const auto entry = context_names.find(workspace.name)) {
        return invalid(workspace.where + ": workspace '" + workspace.name +
                       "' has the same name as the task's " + std::string(kind_word(entry->kind)) +
                       "; pick another name");
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (plan.workspaces[j].name == workspace.name) {
          return invalid(workspace.where + ": workspace '" + workspace.name +
                         "' is declared twice (first at " + plan.workspaces[j].where + ")");
        }
      }
    }
  }

  const Names names(context, plan);
  for (Launch& launch : plan.launches) {
    if (launch.condition) {
      if (auto ok = names.check_expr(launch.where, "if condition", *launch.condition); !ok) {
        return ok.error();
      }
    }
    if (auto ok = check_dims_symbols(names, launch.where, "grid", launch.grid); !ok) {
      return ok.error();
    }
    if (auto ok = check_dims_symbols(names, launch.where, "block", launch.block); !ok) {
      return ok.error();
    }
    if (auto ok = names.check_expr(launch.where, "shared memory size", launch.smem_bytes); !ok) {
      return ok.error();
    }
    if (launch.args.size() > limits.max_args) {
      return invalid(launch.where + ": " + std::to_string(launch.args.size()) +
                     " arguments; a launch may pass at most " + std::to_string(limits.max_args));
    }
    for (LaunchArg& arg : launch.args) {
      const auto entry = names.find(arg.name);
      if (!entry) {
        return invalid(launch.where + ": unknown argument '" + arg.name + "'; " + names.listing());
      }
      arg.index = entry->index;
      switch (entry->kind) {
        case NameKind::kTensor:
          arg.kind = ArgKind::kTensor;
          break;
        case NameKind::kScalar:
          arg.kind = ArgKind::kScalar;
          break;
        case NameKind::kSymbol:
          arg.kind = ArgKind::kSymbol;
          break;
        case NameKind::kWorkspace:
          arg.kind = ArgKind::kWorkspace;
          break;
      }
    }
    // Sizes that are already constants fail now, before anything compiles.
    if (const auto grid = constant_dims(launch.grid)) {
      if (auto ok = check_grid(launch.where, launch.grid, *grid, limits, ""); !ok) {
        return ok.error();
      }
    }
    if (const auto block = constant_dims(launch.block)) {
      if (auto ok = check_block(launch.where, launch.block, *block, limits, ""); !ok) {
        return ok.error();
      }
    }
    if (const auto smem = launch.smem_bytes.constant_value()) {
      if (auto ok = check_smem(launch.where, *smem, limits, ""); !ok) return ok.error();
    }
  }

  for (const Workspace& workspace : plan.workspaces) {
    if (auto ok = names.check_expr(workspace.where, "workspace '" + workspace.name + "' count",
                                   workspace.count);
        !ok) {
      return ok.error();
    }
    if (const auto count = workspace.count.constant_value()) {
      if (auto bytes = check_workspace(workspace, *count, limits, ""); !bytes) {
        return bytes.error();
      }
    }
  }

  for (std::size_t c = 0; c < plan.clusters.size(); ++c) {
    const Cluster& cluster = plan.clusters[c];
    if (auto ok = check_dims_symbols(names, cluster.where, "cluster", cluster.dims); !ok) {
      return ok.error();
    }
    if (const auto dims = constant_dims(cluster.dims)) {
      if (auto ok = check_cluster(cluster.where, cluster.dims, *dims, limits, ""); !ok) {
        return ok.error();
      }
    }
    const std::string wanted = without_spaces(cluster.kernel);
    bool matched = false;
    for (Launch& launch : plan.launches) {
      if (launch.kernel != wanted && without_spaces(launch.name_expression) != wanted) continue;
      matched = true;
      if (launch.cluster && *launch.cluster != c) {
        return invalid(cluster.where + ": kernel '" + cluster.kernel +
                       "' already has a cluster shape (" + plan.clusters[*launch.cluster].where +
                       ")");
      }
      launch.cluster = c;
    }
    if (!matched) {
      std::vector<std::string> kernels;
      for (const Launch& launch : plan.launches) {
        if (std::find(kernels.begin(), kernels.end(), launch.name_expression) == kernels.end()) {
          kernels.push_back(launch.name_expression);
        }
      }
      return invalid(cluster.where + ": the cluster shape names kernel '" + cluster.kernel +
                     "', which no launch runs; the launched kernels are " + join(kernels));
    }
  }
  return plan;
}

}  // namespace plan_detail

using plan_detail::invalid;

std::vector<std::string> LaunchPlan::name_expressions() const {
  std::vector<std::string> out;
  for (const Launch& launch : launches) {
    if (std::find(out.begin(), out.end(), launch.name_expression) == out.end()) {
      out.push_back(launch.name_expression);
    }
  }
  return out;
}

namespace {

using SymbolValues = std::map<std::string, std::int64_t, std::less<>>;

core::Result<std::int64_t> eval_field(const std::string& where, std::string_view label,
                                      const core::Expr& expr, const SymbolValues& values,
                                      const std::string& suffix) {
  auto value = expr.eval(values);
  if (!value) {
    return invalid(where + ": " + std::string(label) + " '" + expr.text() +
                   "': " + value.error().message + suffix);
  }
  return value;
}

core::Result<std::array<std::int64_t, 3>> eval_dims(const std::string& where, std::string_view base,
                                                    const Dim3Expr& dims,
                                                    const SymbolValues& values,
                                                    const std::string& suffix) {
  std::array<std::int64_t, 3> out{};
  const core::Expr* exprs[] = {&dims.x, &dims.y, &dims.z};
  for (std::size_t axis = 0; axis < 3; ++axis) {
    const std::string label =
        dims.is_dim3 ? std::string(base) + " " + "xyz"[axis] : std::string(base);
    auto value = eval_field(where, label, *exprs[axis], values, suffix);
    if (!value) return value.error();
    out[axis] = *value;
  }
  return out;
}

std::array<std::uint32_t, 3> narrow(const std::array<std::int64_t, 3>& values) {
  return {static_cast<std::uint32_t>(values[0]), static_cast<std::uint32_t>(values[1]),
          static_cast<std::uint32_t>(values[2])};
}

}  // namespace

core::Result<ConcretePlan> evaluate_plan(const LaunchPlan& plan,
                                         const std::map<std::string, std::int64_t>& symbols,
                                         const PlanContext& context) {
  const PlanLimits& limits = context.limits;
  ConcretePlan out;
  SymbolValues values;
  std::string suffix;
  for (const auto& symbol : context.symbols) {
    const auto found = symbols.find(symbol);
    if (found == symbols.end()) {
      throw core::InternalError("evaluate_plan: no value for shape symbol '" + symbol + "'");
    }
    values.emplace(symbol, found->second);
    out.symbol_values.push_back(found->second);
    suffix += (suffix.empty() ? "" : ", ") + symbol + "=" + std::to_string(found->second);
  }
  const std::string case_values = suffix;
  if (!suffix.empty()) suffix = " (for " + suffix + ")";

  for (std::size_t i = 0; i < plan.launches.size(); ++i) {
    const Launch& launch = plan.launches[i];
    if (launch.condition) {
      auto run = eval_field(launch.where, "if condition", *launch.condition, values, suffix);
      if (!run) return run.error();
      if (*run == 0) continue;
    }
    auto grid = eval_dims(launch.where, "grid", launch.grid, values, suffix);
    if (!grid) return grid.error();
    if (auto ok = plan_detail::check_grid(launch.where, launch.grid, *grid, limits, suffix); !ok) {
      return ok.error();
    }
    auto block = eval_dims(launch.where, "block", launch.block, values, suffix);
    if (!block) return block.error();
    if (auto ok = plan_detail::check_block(launch.where, launch.block, *block, limits, suffix);
        !ok) {
      return ok.error();
    }
    auto smem = eval_field(launch.where, "shared memory size", launch.smem_bytes, values, suffix);
    if (!smem) return smem.error();
    if (auto ok = plan_detail::check_smem(launch.where, *smem, limits, suffix); !ok) {
      return ok.error();
    }
    ConcreteLaunch concrete;
    concrete.launch = i;
    concrete.grid = narrow(*grid);
    concrete.block = narrow(*block);
    concrete.smem_bytes = static_cast<std::uint32_t>(*smem);
    if (launch.cluster) {
      const Cluster& cluster = plan.clusters.at(*launch.cluster);
      auto dims = eval_dims(cluster.where, "cluster", cluster.dims, values, suffix);
      if (!dims) return dims.error();
      if (auto ok = plan_detail::check_cluster(cluster.where, cluster.dims, *dims, limits, suffix);
          !ok) {
        return ok.error();
      }
      for (std::size_t axis = 0; axis < 3; ++axis) {
        if ((*grid)[axis] % (*dims)[axis] != 0) {
          const char name = "xyz"[axis];
          return invalid(launch.where + ": grid " + name + " " + std::to_string((*grid)[axis]) +
                         " is not a multiple of cluster " + name + " " +
                         std::to_string((*dims)[axis]) + " (" + cluster.where + ")" + suffix);
        }
      }
      concrete.cluster = narrow(*dims);
      concrete.has_cluster = true;
    }
    out.launches.push_back(concrete);
  }
  if (out.launches.empty()) {
    return invalid("no launch runs for " + (case_values.empty() ? "this case" : case_values) +
                   ": every launch has an if condition that is false; add a launch without a "
                   "condition or widen one");
  }

  std::int64_t total = 0;
  for (const Workspace& workspace : plan.workspaces) {
    auto count = eval_field(workspace.where, "workspace '" + workspace.name + "' count",
                            workspace.count, values, suffix);
    if (!count) return count.error();
    auto bytes = plan_detail::check_workspace(workspace, *count, limits, suffix);
    if (!bytes) return bytes.error();
    total += *bytes;  // each is at most the cap, so the sum of a few cannot overflow
    if (total > limits.max_workspace_bytes) {
      return invalid(workspace.where + ": workspaces need " + std::to_string(total) +
                     " bytes together with '" + workspace.name + "', more than the " +
                     std::to_string(limits.max_workspace_bytes) + "-byte limit" + suffix);
    }
    out.workspace_bytes.push_back(static_cast<std::uint64_t>(*bytes));
  }
  return out;
}

core::Status check_kernel_params(const Launch& launch, const std::vector<std::size_t>& param_bytes,
                                 const PlanContext& context) {
  std::vector<std::string> arg_names;
  for (const auto& arg : launch.args) arg_names.push_back(arg.name);
  if (param_bytes.size() != launch.args.size()) {
    return invalid(launch.where + ": kernel '" + launch.name_expression + "' takes " +
                   std::to_string(param_bytes.size()) + " parameters but the launch passes " +
                   std::to_string(launch.args.size()) + " arguments (" +
                   (arg_names.empty() ? std::string("none") : plan_detail::join(arg_names)) + ")");
  }
  for (std::size_t i = 0; i < launch.args.size(); ++i) {
    const LaunchArg& arg = launch.args[i];
    const std::size_t got = param_bytes[i];
    const std::string head =
        launch.where + ": argument " + std::to_string(i + 1) + " '" + arg.name + "' is ";
    const std::string tail = " but parameter " + std::to_string(i + 1) + " of '" +
                             launch.name_expression + "' is " + std::to_string(got) + " bytes";
    switch (arg.kind) {
      case ArgKind::kTensor:
      case ArgKind::kWorkspace:
        if (got != sizeof(void*)) {
          const std::string fix =
              arg.kind == ArgKind::kTensor
                  ? std::string(core::dtype_cuda_type(context.tensors.at(arg.index).second)) + "*"
                  : std::string("a pointer to its element type");
          return invalid(head + "a device pointer (8 bytes)" + tail + "; declare it as " + fix);
        }
        break;
      case ArgKind::kScalar: {
        const core::DType dtype = context.scalars.at(arg.index).second;
        if (got != core::dtype_size(dtype)) {
          const std::string type(core::dtype_cuda_type(dtype));
          return invalid(head + "a " + std::string(core::dtype_name(dtype)) + " scalar passed as " +
                         type + " (" + std::to_string(core::dtype_size(dtype)) + " bytes)" + tail +
                         "; declare it as " + type);
        }
        break;
      }
      case ArgKind::kSymbol:
        if (got != 4 && got != 8) {
          return invalid(head + "a shape symbol passed as int (4 bytes) or int64_t (8 bytes)" +
                         tail + "; declare it as int or int64_t");
        }
        break;
    }
  }
  return {};
}

core::Result<std::vector<std::byte>> encode_symbol_arg(const Launch& launch, std::size_t arg,
                                                       std::int64_t value,
                                                       std::size_t param_bytes) {
  if (arg >= launch.args.size() || launch.args[arg].kind != ArgKind::kSymbol) {
    throw core::InternalError("encode_symbol_arg: argument is not a shape symbol");
  }
  std::vector<std::byte> out(param_bytes);
  if (param_bytes == 8) {
    std::memcpy(out.data(), &value, sizeof(value));
    return out;
  }
  if (param_bytes != 4) {
    throw core::InternalError("encode_symbol_arg: parameter size not checked");
  }
  if (value < std::numeric_limits<std::int32_t>::min() ||
      value > std::numeric_limits<std::int32_t>::max()) {
    return invalid(launch.where + ": shape symbol '" + launch.args[arg].name + "' = " +
                   std::to_string(value) + " does not fit parameter " + std::to_string(arg + 1) +
                   " of '" + launch.name_expression + "', a 4-byte int; declare it as int64_t");
  }
  const auto narrow_value = static_cast<std::int32_t>(value);
  std::memcpy(out.data(), &narrow_value, sizeof(narrow_value));
  return out;
}

}  // namespace crucible::action
