// Value-generator tables: one parser per generator kind, each checking its parameters and the
// dtype of the tensor it fills.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "tasks/generators.hpp"
#include "tasks/manifest_internal.hpp"

namespace crucible::tasks::manifest_detail {
namespace {

namespace fs = std::filesystem;

std::string known_generator_list() {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(GeneratorKind::kZipf); ++i) {
    names.emplace_back(generator_name(static_cast<GeneratorKind>(i)));
  }
  return join(names);
}

// Whether the integer `value` is representable in the integer dtype (bool: 0 or 1).
bool fits_integer_dtype(double value, core::DType dtype) {
  auto within = [value](double lo, double hi) { return value >= lo && value <= hi; };
  switch (dtype) {
    case core::DType::kI8:
      return within(-128.0, 127.0);
    case core::DType::kU8:
      return within(0.0, 255.0);
    case core::DType::kI16:
      return within(-32768.0, 32767.0);
    case core::DType::kI32:
      return within(-2147483648.0, 2147483647.0);
    case core::DType::kI64:
      return within(-9223372036854775808.0, 9223372036854774784.0);
    case core::DType::kBool:
      return within(0.0, 1.0);
    default:
      return true;
  }
}

}  // namespace

// One value-generator table, e.g. { generator = "randn", mean = 0.0, std = 1.0 }.
std::optional<GeneratorSpec> parse_generator(Context& ctx, const toml::node& node,
                                             const std::string& path, core::DType dtype) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    ctx.problems.add(path,
                     "must be a table such as { generator = \"randn\" }, got " + type_name(node));
    return std::nullopt;
  }
  const int before = ctx.problems.count();
  const auto name = ctx.read.string(*table, "generator", path, true);
  if (!name) return std::nullopt;
  const auto kind = generator_from_name(*name);
  if (!kind) {
    ctx.problems.add(child(path, "generator"), "unknown generator " + in_quotes(*name) +
                                                   " (known: " + known_generator_list() + ")");
    return std::nullopt;
  }
  GeneratorSpec spec;
  spec.kind = *kind;
  spec.note = ctx.read.string(*table, "note", path, false).value_or("");
  const std::string dtype_text(core::dtype_name(dtype));
  switch (*kind) {
    case GeneratorKind::kRandn:
      ctx.read.check_keys(*table, path, {"generator", "note", "mean", "std"});
      spec.mean = ctx.read.number(*table, "mean", path, false).value_or(0.0);
      spec.std = ctx.read.number(*table, "std", path, false).value_or(1.0);
      if (!(spec.std > 0.0) || !std::isfinite(spec.std) || !std::isfinite(spec.mean)) {
        ctx.problems.add(child(path, "std"),
                         "must be positive and finite, got " + number_text(spec.std));
      }
      break;
    case GeneratorKind::kUniform:
      ctx.read.check_keys(*table, path, {"generator", "note", "lo", "hi"});
      spec.lo = ctx.read.number(*table, "lo", path, false).value_or(0.0);
      spec.hi = ctx.read.number(*table, "hi", path, false).value_or(1.0);
      if (!(spec.lo < spec.hi) || !std::isfinite(spec.lo) || !std::isfinite(spec.hi)) {
        ctx.problems.add(child(path, "hi"),
                         "must be finite and greater than lo (lo = " + number_text(spec.lo) +
                             ", hi = " + number_text(spec.hi) + ")");
      }
      break;
    case GeneratorKind::kConstant:
      ctx.read.check_keys(*table, path, {"generator", "note", "value"});
      spec.value = ctx.read.number(*table, "value", path, true).value_or(0.0);
      break;
    case GeneratorKind::kOnes:
    case GeneratorKind::kZeros:
      ctx.read.check_keys(*table, path, {"generator", "note"});
      break;
    case GeneratorKind::kPositions:
      ctx.read.check_keys(*table, path, {"generator", "note", "max"});
      spec.max = ctx.read.integer(*table, "max", path, true).value_or(1);
      if (spec.max <= 0) {
        ctx.problems.add(child(path, "max"), "must be positive, got " + std::to_string(spec.max));
      }
      if (dtype != core::DType::kI32 && dtype != core::DType::kI64) {
        ctx.problems.add(child(path, "generator"),
                         "'positions' needs an i32 or i64 tensor, this one is " + dtype_text);
      }
      break;
    case GeneratorKind::kPermutation:
      ctx.read.check_keys(*table, path, {"generator", "note", "max", "pad"});
      spec.max = ctx.read.integer(*table, "max", path, true).value_or(1);
      spec.pad = ctx.read.number(*table, "pad", path, false).value_or(0.0);
      if (spec.max <= 0) {
        ctx.problems.add(child(path, "max"), "must be positive, got " + std::to_string(spec.max));
      }
      if (!(spec.pad >= 0.0 && spec.pad < 1.0)) {
        ctx.problems.add(child(path, "pad"), "must be in [0, 1), got " + number_text(spec.pad));
      }
      if (dtype != core::DType::kI32 && dtype != core::DType::kI64) {
        ctx.problems.add(child(path, "generator"),
                         "'permutation' needs an i32 or i64 tensor, this one is " + dtype_text);
      }
      break;
    case GeneratorKind::kRopeCache:
      ctx.read.check_keys(*table, path, {"generator", "note", "dim", "theta"});
      spec.dim = ctx.read.integer(*table, "dim", path, true).value_or(2);
      spec.theta = ctx.read.number(*table, "theta", path, false).value_or(10000.0);
      if (spec.dim <= 0 || spec.dim % 2 != 0) {
        ctx.problems.add(child(path, "dim"),
                         "must be positive and even, got " + std::to_string(spec.dim));
      }
      if (!(spec.theta > 1.0) || !std::isfinite(spec.theta)) {
        ctx.problems.add(child(path, "theta"),
                         "must be finite and greater than 1, got " + number_text(spec.theta));
      }
      if (!core::dtype_is_floating(dtype)) {
        ctx.problems.add(child(path, "generator"),
                         "'rope_cache' needs a floating-point tensor, this one is " + dtype_text);
      }
      break;
    case GeneratorKind::kList: {
      ctx.read.check_keys(*table, path, {"generator", "note", "values"});
      const toml::array* values = ctx.read.array(*table, "values", path, true);
      if (values == nullptr) break;
      if (values->empty()) ctx.problems.add(child(path, "values"), "must not be empty");
      const bool integral = !core::dtype_is_floating(dtype);
      for (std::size_t i = 0; i < values->size(); ++i) {
        const toml::node& item = *values->get(i);
        std::optional<double> number;
        if (const auto* v = item.as_integer()) number = static_cast<double>(v->get());
        if (const auto* v = item.as_floating_point()) number = v->get();
        if (!number || !std::isfinite(*number) || (integral && std::trunc(*number) != *number)) {
          ctx.problems.add(
              child(path, "values") + "[" + std::to_string(i) + "]",
              std::string("must be a finite ") +
                  (integral ? "integer (the tensor is " + dtype_text + ")" : "number"));
          continue;
        }
        if (integral && !fits_integer_dtype(*number, dtype)) {
          ctx.problems.add(child(path, "values") + "[" + std::to_string(i) + "]",
                           number_text(*number) + " does not fit the tensor's " + dtype_text);
          continue;
        }
        spec.list.push_back(*number);
      }
      break;
    }
    case GeneratorKind::kRouting:
      ctx.read.check_keys(*table, path, {"generator", "note", "experts", "topk", "skew"});
      spec.max = ctx.read.integer(*table, "experts", path, true).value_or(1);
      spec.topk = ctx.read.integer(*table, "topk", path, true).value_or(1);
      spec.skew = ctx.read.number(*table, "skew", path, false).value_or(0.0);
      if (spec.max <= 0) {
        ctx.problems.add(child(path, "experts"),
                         "must be positive, got " + std::to_string(spec.max));
      }
      if (spec.topk <= 0 || spec.topk > spec.max) {
        ctx.problems.add(child(path, "topk"),
                         "must be in [1, experts], got " + std::to_string(spec.topk));
      }
      if (!(spec.skew >= 0.0) || !std::isfinite(spec.skew)) {
        ctx.problems.add(child(path, "skew"),
                         "must be finite and >= 0, got " + number_text(spec.skew));
      }
      if (dtype != core::DType::kI32 && dtype != core::DType::kI64) {
        ctx.problems.add(child(path, "generator"),
                         "'routing' needs an i32 or i64 tensor, this one is " + dtype_text);
      }
      break;
    case GeneratorKind::kSurfacePoints:
      ctx.read.check_keys(*table, path, {"generator", "note", "objects"});
      spec.max = ctx.read.integer(*table, "objects", path, true).value_or(1);
      if (spec.max <= 0 || spec.max > 4096) {
        ctx.problems.add(child(path, "objects"),
                         "must be in [1, 4096], got " + std::to_string(spec.max));
      }
      if (!core::dtype_is_floating(dtype)) {
        ctx.problems.add(
            child(path, "generator"),
            "'surface_points' needs a floating-point tensor, this one is " + dtype_text);
      }
      break;
    case GeneratorKind::kPowerLawOffsets:
      ctx.read.check_keys(*table, path, {"generator", "note", "rows", "total", "skew"});
      spec.rows = ctx.read.integer(*table, "rows", path, true).value_or(1);
      spec.max = ctx.read.integer(*table, "total", path, true).value_or(0);
      spec.skew = ctx.read.number(*table, "skew", path, false).value_or(0.0);
      if (spec.rows <= 0) {
        ctx.problems.add(child(path, "rows"), "must be positive, got " + std::to_string(spec.rows));
      }
      if (spec.max < 0) {
        ctx.problems.add(child(path, "total"), "must be >= 0, got " + std::to_string(spec.max));
      }
      if (!(spec.skew >= 0.0 && spec.skew <= 4.0)) {
        ctx.problems.add(child(path, "skew"), "must be in [0, 4], got " + number_text(spec.skew));
      }
      if (dtype != core::DType::kI32 && dtype != core::DType::kI64) {
        ctx.problems.add(
            child(path, "generator"),
            "'power_law_offsets' needs an i32 or i64 tensor, this one is " + dtype_text);
      }
      break;
    case GeneratorKind::kZipf: {
      ctx.read.check_keys(*table, path, {"generator", "note", "max", "skew"});
      spec.max = ctx.read.integer(*table, "max", path, true).value_or(1);
      spec.skew = ctx.read.number(*table, "skew", path, false).value_or(1.0);
      // Ids pass through doubles (generated_value), exact up to 2^53; i32 ids end at 2^31 - 1.
      const bool i32 = dtype == core::DType::kI32;
      const std::int64_t largest = i32 ? std::int64_t{1} << 31 : std::int64_t{1} << 53;
      if (spec.max <= 0 || spec.max > largest) {
        ctx.problems.add(child(path, "max"), std::string("must be in [1, 2^") +
                                                 (i32 ? "31" : "53") + "], got " +
                                                 std::to_string(spec.max));
      }
      if (!(spec.skew >= 0.0 && spec.skew <= 4.0)) {
        ctx.problems.add(child(path, "skew"), "must be in [0, 4], got " + number_text(spec.skew));
      }
      if (!i32 && dtype != core::DType::kI64) {
        ctx.problems.add(child(path, "generator"),
                         "'zipf' needs an i32 or i64 tensor, this one is " + dtype_text);
      }
      break;
    }
    case GeneratorKind::kMropePositions: {
      ctx.read.check_keys(*table, path,
                          {"generator", "note", "tokens", "max", "sequence", "text", "frames",
                           "grid_h", "grid_w", "temporal_step"});
      MropeLayout& m = spec.mrope;
      m.tokens = ctx.read.integer(*table, "tokens", path, true).value_or(1);
      spec.max = ctx.read.integer(*table, "max", path, true).value_or(1);
      m.sequence = ctx.read.integer(*table, "sequence", path, false).value_or(m.tokens);
      m.text = ctx.read.integer(*table, "text", path, false).value_or(0);
      m.frames = ctx.read.integer(*table, "frames", path, false).value_or(0);
      m.grid_h = ctx.read.integer(*table, "grid_h", path, false).value_or(1);
      m.grid_w = ctx.read.integer(*table, "grid_w", path, false).value_or(1);
      m.temporal_step = ctx.read.integer(*table, "temporal_step", path, false).value_or(1);
      // Bounds keep every product of the layout far inside 64 bits.
      const auto in_range = [&](const char* key, std::int64_t value, std::int64_t lo,
                                std::int64_t hi) {
        if (value < lo || value > hi) {
          ctx.problems.add(child(path, key), "must be in [" + std::to_string(lo) + ", " +
                                                 std::to_string(hi) + "], got " +
                                                 std::to_string(value));
          return false;
        }
        return true;
      };
      constexpr std::int64_t kMaxTokens = std::int64_t{1} << 32;
      bool valid = in_range("tokens", m.tokens, 1, kMaxTokens);
      valid = in_range("max", spec.max, 1, std::int64_t{1} << 40) && valid;
      valid = in_range("sequence", m.sequence, 1, std::max<std::int64_t>(m.tokens, 1)) && valid;
      valid = in_range("text", m.text, 0, kMaxTokens) && valid;
      valid = in_range("frames", m.frames, 0, 4096) && valid;
      valid = in_range("grid_h", m.grid_h, 1, 4096) && valid;
      valid = in_range("grid_w", m.grid_w, 1, 4096) && valid;
      valid = in_range("temporal_step", m.temporal_step, 0, 4096) && valid;
      if (valid && m.text == 0 && m.frames == 0) {
        ctx.problems.add(child(path, "text"), "must be positive when frames is 0 (no tokens)");
      } else if (valid && mrope_sequence_span(m) > spec.max) {
        ctx.problems.add(child(path, "max"),
                         "a sequence of this layout spans " +
                             std::to_string(mrope_sequence_span(m)) +
                             " positions, more than max = " + std::to_string(spec.max));
      }
      if (dtype != core::DType::kI32 && dtype != core::DType::kI64) {
        ctx.problems.add(child(path, "generator"),
                         "'mrope_positions' needs an i32 or i64 tensor, this one is " + dtype_text);
      }
      break;
    }
    case GeneratorKind::kDetections: {
      ctx.read.check_keys(
          *table, path, {"generator", "note", "field", "per_image", "objects", "classes", "size"});
      DetectionScene& d = spec.detections;
      const std::string field = ctx.read.string(*table, "field", path, true).value_or("boxes");
      d.per_image = ctx.read.integer(*table, "per_image", path, true).value_or(1);
      d.objects = ctx.read.integer(*table, "objects", path, true).value_or(1);
      d.classes = ctx.read.integer(*table, "classes", path, false).value_or(80);
      d.size = ctx.read.number(*table, "size", path, false).value_or(640.0);
      bool floating = true;
      if (field == "boxes" || field == "scores") {
        d.field = field == "boxes" ? DetectionField::kBoxes : DetectionField::kScores;
      } else if (field == "classes") {
        d.field = DetectionField::kClasses;
        floating = false;
      } else {
        ctx.problems.add(child(path, "field"),
                         "must be \"boxes\", \"scores\" or \"classes\", got " + in_quotes(field));
      }
      if (d.per_image < 1 || d.per_image > (std::int64_t{1} << 31)) {
        ctx.problems.add(child(path, "per_image"),
                         "must be in [1, 2^31], got " + std::to_string(d.per_image));
      }
      if (d.objects < 1 || d.objects > 1024) {
        ctx.problems.add(child(path, "objects"),
                         "must be in [1, 1024], got " + std::to_string(d.objects));
      }
      if (d.classes < 1 || d.classes > 100000) {
        ctx.problems.add(child(path, "classes"),
                         "must be in [1, 100000], got " + std::to_string(d.classes));
      }
      if (!(d.size >= 64.0 && d.size <= 16384.0)) {
        ctx.problems.add(child(path, "size"), "must be in [64, 16384], got " + number_text(d.size));
      }
      if (floating != core::dtype_is_floating(dtype)) {
        ctx.problems.add(child(path, "generator"),
                         std::string("'detections' ") +
                             (floating ? "boxes and scores need a floating-point tensor"
                                       : "classes need an integer tensor") +
                             ", this one is " + dtype_text);
      }
      break;
    }
    case GeneratorKind::kCaptured: {
      ctx.read.check_keys(*table, path, {"generator", "note", "file", "tensor"});
      spec.file = ctx.read.string(*table, "file", path, true).value_or("");
      spec.tensor = ctx.read.string(*table, "tensor", path, true).value_or("");
      if (spec.file.empty()) break;
      const fs::path relative(spec.file);
      if (relative.is_absolute()) {
        ctx.problems.add(child(path, "file"),
                         "must be relative to the task folder, got " + in_quotes(spec.file));
        break;
      }
      spec.file_path = (ctx.task_dir / relative).lexically_normal();
      std::error_code ec;
      if (!fs::is_regular_file(spec.file_path, ec)) {
        ctx.problems.add(child(path, "file"),
                         "captured values file " + in_quotes(spec.file) +
                             " does not exist (looked at " +
                             spec.file_path.lexically_relative(ctx.home).generic_string() + ")");
      }
      break;
    }
  }
  if (ctx.problems.count() != before) return std::nullopt;
  return spec;
}

}  // namespace crucible::tasks::manifest_detail
