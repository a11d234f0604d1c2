// Launch plans: the pieces the directive parser, the structured-plan parser and validation
// share (messages, names, expression fields, workspace element types, name expressions).
#include "action/launch_plan.hpp"

#include <algorithm>

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

}  // namespace plan_detail

std::vector<std::string> LaunchPlan::name_expressions() const {
  std::vector<std::string> out;
  for (const Launch& launch : launches) {
    if (std::find(out.begin(), out.end(), launch.name_expression) == out.end()) {
      out.push_back(launch.name_expression);
    }
  }
  return out;
}

}  // namespace crucible::action
