// JSON-like views of a task: the summary, what an agent sees, and the full operator view.
#include <string>

#include "tasks/registry.hpp"
#include "tasks/roofline.hpp"

namespace crucible::tasks {
namespace {

// How the agent declares launches; mirrors DESIGN.md section 2 (sandbox/ parses it).
constexpr const char* kLaunchNote =
    "Write device code only (no host code). NVRTC compiles the whole source for sm_90a, C++17, "
    "with only the CUDA and CCCL headers on the include path. Declare every launch in a comment "
    "line: '// @launch kernel<<<grid, block[, smem_bytes]>>>(arg, ...)'. Arguments name this "
    "task's tensors (device pointers, in the C types listed under 'arguments'), scalars and "
    "shape symbols. Grid, block and shared-memory sizes are integer expressions over the shape "
    "symbols (+ - * / %, cdiv, min, max; dim3(x, y, z) for several dimensions). "
    "'// @launch if (cond) ...' launches only when cond holds; '// @workspace name "
    "type[count]' declares scratch device memory passed by name; '// @cluster kernel (x, y, z)' "
    "sets a thread-block cluster; '// @tensormap name tensor dims(inner, ..., outer) box(...) "
    "[strides(...)] [swizzle(128)]' passes a TMA descriptor over a tensor (declare it const "
    "__grid_constant__ CUtensorMap name; elements outside dims read as zero). Launches run in "
    "order on one stream. Name kernels "
    "extern \"C\" or give template arguments in the directive (name<float, 256>). "
    "Every element of every output must be written; inputs must not be modified.";

core::Value tolerance_value(const Tolerance& tolerance) {
  return core::Value{{"atol", tolerance.atol}, {"rtol", tolerance.rtol}};
}

// The C type each kernel argument has: what the agent's kernel signature must use.
core::Value arguments_value(const Task& task) {
  core::Value args = core::Value::array();
  for (const auto& tensor : task.tensors) {
    std::string type(core::dtype_cuda_type(tensor.dtype));
    if (tensor.role == Role::kIn) type = "const " + type;
    args.push_back({{"name", tensor.name}, {"kind", "tensor"}, {"c_type", type + "*"}});
  }
  for (const auto& scalar : task.scalars) {
    args.push_back({{"name", scalar.name},
                    {"kind", "scalar"},
                    {"c_type", std::string(core::dtype_cuda_type(scalar.dtype))}});
  }
  for (const auto& symbol : task.symbol_specs) {
    args.push_back({{"name", symbol.name},
                    {"kind", "symbol"},
                    {"c_type", std::string(core::dtype_cuda_type(symbol.dtype))}});
  }
  return args;
}

core::Value generator_value(const GeneratorSpec& spec) {
  core::Value out{{"generator", std::string(generator_name(spec.kind))},
                  {"provenance", describe(spec)}};
  switch (spec.kind) {
    case GeneratorKind::kRandn:
      out["mean"] = spec.mean;
      out["std"] = spec.std;
      break;
    case GeneratorKind::kUniform:
      out["lo"] = spec.lo;
      out["hi"] = spec.hi;
      break;
    case GeneratorKind::kConstant:
      out["value"] = spec.value;
      break;
    case GeneratorKind::kPositions:
      out["max"] = spec.max;
      break;
    case GeneratorKind::kCaptured:
      out["tensor"] = spec.tensor;  // the file path is a server detail
      break;
    case GeneratorKind::kPermutation:
      out["max"] = spec.max;
      out["pad"] = spec.pad;
      break;
    case GeneratorKind::kRopeCache:
      out["dim"] = spec.dim;
      out["theta"] = spec.theta;
      break;
    case GeneratorKind::kList: {
      core::Value values = core::Value::array();
      for (const double v : spec.list) values.push_back(v);
      out["values"] = std::move(values);
      break;
    }
    case GeneratorKind::kRouting:
      out["experts"] = spec.max;
      out["topk"] = spec.topk;
      out["skew"] = spec.skew;
      break;
    case GeneratorKind::kDetections:
      out["field"] = detection_field_name(spec.detections.field);
      out["per_image"] = spec.detections.per_image;
      out["objects"] = spec.detections.objects;
      out["classes"] = spec.detections.classes;
      out["size"] = spec.detections.size;
      break;
    case GeneratorKind::kSurfacePoints:
      out["objects"] = spec.max;
      break;
    case GeneratorKind::kMropePositions:
      out["tokens"] = spec.mrope.tokens;
      out["max"] = spec.max;
      out["sequence"] = spec.mrope.sequence;
      out["text"] = spec.mrope.text;
      out["frames"] = spec.mrope.frames;
      out["grid_h"] = spec.mrope.grid_h;
      out["grid_w"] = spec.mrope.grid_w;
      out["temporal_step"] = spec.mrope.temporal_step;
      break;
    case GeneratorKind::kPowerLawOffsets:
      out["rows"] = spec.rows;
      out["total"] = spec.max;
      out["skew"] = spec.skew;
      break;
    case GeneratorKind::kZipf:
      out["max"] = spec.max;
      out["skew"] = spec.skew;
      break;
    case GeneratorKind::kOnes:
    case GeneratorKind::kZeros:
      break;
  }
  if (!spec.note.empty()) out["note"] = spec.note;
  return out;
}

core::Value case_value(const Task& task, const Case& c, bool with_secrets) {
  core::Value out{{"name", c.name}, {"weight", c.weight}};
  if (!c.note.empty()) out["note"] = c.note;
  out["symbols"] = core::Value::object();
  for (const auto& [name, value] : c.symbols) out["symbols"][name] = value;
  out["scalars"] = core::Value::object();
  for (const auto& [name, value] : c.scalars) out["scalars"][name] = value;
  out["values"] = core::Value::object();
  for (const auto& [name, spec] : c.values) {
    out["values"][name] = generator_value(spec);
    if (with_secrets && spec.kind == GeneratorKind::kCaptured) {
      out["values"][name]["file"] = spec.file;
    }
  }
  if (const auto cost = roofline_cost(task, c)) {
    out["roofline"] = {{"bytes", cost->bytes},
                       {"flops", cost->flops},
                       {"h200_floor_ns", roofline_floor_ns(*cost, kH200Peak)}};
  }
  if (with_secrets) {
    out["hidden"] = c.hidden;
    out["seed"] = c.seed ? core::Value(*c.seed) : core::Value("episode");
  }
  return out;
}

core::Value common_view(const Task& task) {
  core::Value out = task_summary(task);
  out["description"] = task.description;
  out["symbols"] = core::Value::array();
  for (const auto& symbol : task.symbol_specs) {
    out["symbols"].push_back({{"name", symbol.name},
                              {"description", symbol.description},
                              {"dtype", std::string(core::dtype_name(symbol.dtype))}});
  }
  out["tensors"] = core::Value::array();
  for (const auto& tensor : task.tensors) {
    core::Value entry{{"name", tensor.name},
                      {"dtype", std::string(core::dtype_name(tensor.dtype))},
                      {"shape", tensor.shape},
                      {"role", std::string(role_name(tensor.role))}};
    if (!tensor.description.empty()) entry["description"] = tensor.description;
    if (tensor.tolerance) entry["tolerance"] = tolerance_value(*tensor.tolerance);
    out["tensors"].push_back(std::move(entry));
  }
  out["scalars"] = core::Value::array();
  for (const auto& scalar : task.scalars) {
    core::Value entry{{"name", scalar.name},
                      {"dtype", std::string(core::dtype_name(scalar.dtype))}};
    if (!scalar.description.empty()) entry["description"] = scalar.description;
    if (scalar.default_value) entry["default"] = *scalar.default_value;
    out["scalars"].push_back(std::move(entry));
  }
  out["arguments"] = arguments_value(task);
  out["tolerance_defaults"] = core::Value::object();
  for (const auto& [dtype, tolerance] : task.tolerance_defaults) {
    out["tolerance_defaults"][dtype] = tolerance_value(tolerance);
  }
  out["roofline"] = {{"bytes", task.roofline.bytes}, {"flops", task.roofline.flops}};
  out["reference"] = {{"path", task.reference_path}, {"source", task.reference_source}};
  if (!task.reference_library.empty()) {
    // The timed reference is the library; the source is the starting point, held to the same
    // oracle.
    out["reference"]["library"] = task.reference_library;
  }
  out["launch"] = kLaunchNote;
  // How outputs are judged: elementwise against the reference, or by a named checker that
  // accepts every right answer (top-k under ties).
  out["checker"] = task.checker.empty() ? std::string("elementwise") : task.checker;
  return out;
}

}  // namespace

core::Value task_summary(const Task& task) {
  return core::Value{
      {"id", task.id}, {"category", task.category}, {"module", task.module}, {"title", task.title}};
}

core::Value agent_view(const Task& task) {
  core::Value out = common_view(task);
  out["cases"] = core::Value::array();
  for (const Case* c : task.visible_cases()) out["cases"].push_back(case_value(task, *c, false));
  return out;
}

core::Value full_view(const Task& task) {
  core::Value out = common_view(task);
  out["manifest"] = task.manifest_path.string();
  out["cases"] = core::Value::array();
  for (const auto& c : task.cases) out["cases"].push_back(case_value(task, c, true));
  return out;
}

}  // namespace crucible::tasks
