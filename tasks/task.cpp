// Task vocabulary: role/generator names, lookups, shapes and seed derivation.
#include "tasks/task.hpp"

#include <array>
#include <charconv>
#include <limits>

#include "tasks/random.hpp"

namespace crucible::tasks {
namespace {

constexpr std::array<std::string_view, 3> kRoleNames{"in", "out", "inout"};
constexpr std::array<std::string_view, 2> kParityKindNames{"composite", "kernel"};
constexpr std::array<std::string_view, 16> kGeneratorNames{
    "randn",          "uniform",         "constant",    "ones",       "zeros", "positions",
    "routing",        "captured",        "permutation", "rope_cache", "list",  "power_law_offsets",
    "surface_points", "mrope_positions", "detections",  "zipf"};

// Shortest text that reads back as the same double ("1", "0.1", "1e-05").
std::string number_text(double value) {
  std::array<char, 32> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  if (ec != std::errc()) return "?";
  return std::string(buffer.data(), end);
}

}  // namespace

std::string_view role_name(Role role) { return kRoleNames.at(static_cast<std::size_t>(role)); }

std::optional<Role> role_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kRoleNames.size(); ++i) {
    if (kRoleNames[i] == name) return static_cast<Role>(i);
  }
  return std::nullopt;
}

std::string_view parity_kind_name(ParityKind kind) {
  return kParityKindNames.at(static_cast<std::size_t>(kind));
}

std::optional<ParityKind> parity_kind_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kParityKindNames.size(); ++i) {
    if (kParityKindNames[i] == name) return static_cast<ParityKind>(i);
  }
  return std::nullopt;
}

const std::vector<std::string>& known_categories() {
  static const std::vector<std::string> kCategories{"llm",  "ssm",     "diffusion", "multimodal",
                                                    "edge", "science", "recsys",    "world"};
  return kCategories;
}

const std::vector<std::string>& known_checkers() {
  static const std::vector<std::string> kCheckers{
      "topk", "moe_align", "sampling", "llada_remask", "knn", "nms", "gaussian_projection"};
  return kCheckers;
}

const std::vector<std::string>& known_reference_libraries() {
  static const std::vector<std::string> kLibraries{"cublaslt", "cublaslt_fp8_rowwise"};
  return kLibraries;
}

std::string_view generator_name(GeneratorKind kind) {
  return kGeneratorNames.at(static_cast<std::size_t>(kind));
}

std::optional<GeneratorKind> generator_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kGeneratorNames.size(); ++i) {
    if (kGeneratorNames[i] == name) return static_cast<GeneratorKind>(i);
  }
  return std::nullopt;
}

const char* detection_field_name(DetectionField field) {
  switch (field) {
    case DetectionField::kBoxes:
      return "boxes";
    case DetectionField::kScores:
      return "scores";
    case DetectionField::kClasses:
      return "classes";
  }
  return "?";
}

std::string describe(const GeneratorSpec& spec) {
  std::string text(generator_name(spec.kind));
  switch (spec.kind) {
    case GeneratorKind::kRandn:
      text += "(mean=" + number_text(spec.mean) + ", std=" + number_text(spec.std) + ")";
      break;
    case GeneratorKind::kUniform:
      text += "(lo=" + number_text(spec.lo) + ", hi=" + number_text(spec.hi) + ")";
      break;
    case GeneratorKind::kConstant:
      text += "(value=" + number_text(spec.value) + ")";
      break;
    case GeneratorKind::kPositions:
      text += "(max=" + std::to_string(spec.max) + ")";
      break;
    case GeneratorKind::kPermutation:
      text += "(max=" + std::to_string(spec.max) + ", pad=" + number_text(spec.pad) + ")";
      break;
    case GeneratorKind::kRopeCache:
      text += "(dim=" + std::to_string(spec.dim) + ", theta=" + number_text(spec.theta) + ")";
      break;
    case GeneratorKind::kCaptured:
      text += "(" + spec.file + "#" + spec.tensor + ")";
      break;
    case GeneratorKind::kList: {
      text += "(";
      for (std::size_t i = 0; i < spec.list.size(); ++i) {
        text += (i == 0 ? "" : ", ") + number_text(spec.list[i]);
      }
      text += ")";
      break;
    }
    case GeneratorKind::kRouting:
      text += "(experts=" + std::to_string(spec.max) + ", topk=" + std::to_string(spec.topk) +
              ", skew=" + number_text(spec.skew) + ")";
      break;
    case GeneratorKind::kPowerLawOffsets:
      text += "(rows=" + std::to_string(spec.rows) + ", total=" + std::to_string(spec.max) +
              ", skew=" + number_text(spec.skew) + ")";
      break;
    case GeneratorKind::kZipf:
      text += "(max=" + std::to_string(spec.max) + ", skew=" + number_text(spec.skew) + ")";
      break;
    case GeneratorKind::kSurfacePoints:
      text += "(objects=" + std::to_string(spec.max) + ")";
      break;
    case GeneratorKind::kMropePositions: {
      const MropeLayout& m = spec.mrope;
      text += "(tokens=" + std::to_string(m.tokens) + ", max=" + std::to_string(spec.max) +
              ", sequence=" + std::to_string(m.sequence) + ", text=" + std::to_string(m.text) +
              ", frames=" + std::to_string(m.frames) + ", grid_h=" + std::to_string(m.grid_h) +
              ", grid_w=" + std::to_string(m.grid_w) +
              ", temporal_step=" + std::to_string(m.temporal_step) + ")";
      break;
    }
    case GeneratorKind::kDetections: {
      const DetectionScene& d = spec.detections;
      text += std::string("(field=") + detection_field_name(d.field) +
              ", per_image=" + std::to_string(d.per_image) +
              ", objects=" + std::to_string(d.objects) + ", classes=" + std::to_string(d.classes) +
              ", size=" + number_text(d.size) + ")";
      break;
    }
    case GeneratorKind::kOnes:
    case GeneratorKind::kZeros:
      break;
  }
  if (!spec.note.empty()) text += ": " + spec.note;
  return text;
}

const TensorSpec* Task::find_tensor(std::string_view name) const {
  for (const auto& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

const ScalarSpec* Task::find_scalar(std::string_view name) const {
  for (const auto& scalar : scalars) {
    if (scalar.name == name) return &scalar;
  }
  return nullptr;
}

const Case* Task::find_case(std::string_view name) const {
  for (const auto& c : cases) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::vector<const Case*> Task::visible_cases() const {
  std::vector<const Case*> out;
  for (const auto& c : cases) {
    if (!c.hidden) out.push_back(&c);
  }
  return out;
}

std::vector<const Case*> Task::hidden_cases() const {
  std::vector<const Case*> out;
  for (const auto& c : cases) {
    if (c.hidden) out.push_back(&c);
  }
  return out;
}

std::optional<std::string> broken_promise(const std::vector<Promise>& promises,
                                          const std::map<std::string, std::int64_t>& symbols) {
  const std::map<std::string, std::int64_t, std::less<>> values(symbols.begin(), symbols.end());
  for (const auto& promise : promises) {
    const auto kept = promise.expr.eval(values);
    if (!kept || *kept == 0) return promise.text;
  }
  return std::nullopt;
}

core::Result<std::vector<std::int64_t>> resolve_shape(const TensorSpec& tensor, const Case& c) {
  std::vector<std::int64_t> dims;
  dims.reserve(tensor.shape.size());
  for (const auto& dim : tensor.shape) {
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), value);
    if (ec == std::errc() && end == dim.data() + dim.size()) {
      dims.push_back(value);
      continue;
    }
    const auto it = c.symbols.find(dim);
    if (it == c.symbols.end()) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "tensor '" + tensor.name + "': case '" + c.name +
                             "' has no value for symbol '" + dim + "'"};
    }
    dims.push_back(it->second);
  }
  return dims;
}

core::Result<std::int64_t> element_count(const TensorSpec& tensor, const Case& c) {
  auto dims = resolve_shape(tensor, c);
  if (!dims) return dims.error();
  std::int64_t count = 1;
  for (const auto dim : *dims) {
    if (dim < 0 || (dim > 0 && count > std::numeric_limits<std::int64_t>::max() / dim)) {
      return core::Error{
          core::ErrorCode::kInvalidArgument,
          "tensor '" + tensor.name + "': element count overflows in case '" + c.name + "'"};
    }
    count *= dim;
  }
  return count;
}

std::uint64_t case_seed(const Case& c, std::uint64_t episode_seed) {
  if (c.seed) return *c.seed;
  return mix_seeds(episode_seed, fnv1a64(c.name));
}

std::uint64_t tensor_seed(std::uint64_t case_seed_value, std::string_view tensor_name,
                          std::uint64_t draw) {
  return mix_seeds(mix_seeds(case_seed_value, fnv1a64(tensor_name)), draw);
}

}  // namespace crucible::tasks
