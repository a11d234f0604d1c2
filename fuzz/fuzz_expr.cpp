// Fuzz target: core::parse_expr and Expr::eval, the shape expressions of manifests and plans.
// Input: expression text. Symbols take values from a fixed table (0, 1, -1, the int32 and int64
// extremes, ...) chosen by their name, and some names are unknown. Findings: any crash, leak or
// UB, an error message that is not valid UTF-8, and an accepted expression whose text, symbols,
// constant value or value is inconsistent (eval twice, or as "(e) + 0", must agree).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/expr.hpp"
#include "fuzz/fuzz_checks.hpp"

namespace {

namespace core = crucible::core;
namespace fuzz = crucible::fuzz;

constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kSqrtMax = 3037000499;  // floor(sqrt(2^63 - 1)): squares just fit
constexpr std::int64_t kValues[] = {0,         1,    -1,       2,    3,        7,  64,       4096,
                                    kInt32Max, kMax, kSqrtMax, kMin, kMin + 1, -2, 1LL << 32};

// A symbol's value: chosen by a hash of its name; nullopt (unknown) for one name in 16.
std::optional<std::int64_t> lookup(std::string_view name) {
  std::uint64_t hash = 1469598103934665603ull;
  for (const char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  const std::size_t slot = hash % 16;
  if (slot >= std::size(kValues)) return std::nullopt;
  return kValues[slot];
}

void require_message(const core::Error& error, std::string_view where) {
  if (error.code != core::ErrorCode::kInvalidArgument) {
    fuzz::fail(std::string(where) + ": an error that is not kInvalidArgument", error.message);
  }
  fuzz::require_utf8(error.message, where);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto expr = core::parse_expr(text);
  if (!expr) {
    require_message(expr.error(), "parse_expr");
    return 0;
  }
  if (expr->text() != text) fuzz::fail("Expr::text() is not the parsed text", text);
  const auto symbols = expr->symbols();
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].empty() || text.find(symbols[i]) == std::string_view::npos ||
        (i > 0 && !(symbols[i - 1] < symbols[i]))) {
      fuzz::fail("Expr::symbols() is not the sorted, unique symbols of the text", text);
    }
  }

  const auto value = expr->eval(lookup);
  const auto again = expr->eval(lookup);
  if (value.ok() != again.ok() || (value.ok() && *value != *again)) {
    fuzz::fail("eval is not deterministic", text);
  }
  if (!value) require_message(value.error(), "eval");
  if (symbols.empty()) {
    const auto constant = expr->constant_value();
    if (value.ok() != constant.has_value() || (constant && *constant != *value)) {
      fuzz::fail("constant_value() disagrees with eval", text);
    }
  } else if (expr->constant_value()) {
    fuzz::fail("an expression with symbols has a constant value", text);
  }

  std::map<std::string, std::int64_t, std::less<>> ones;
  for (const auto& name : symbols) ones[name] = 1;
  const auto with_ones = expr->eval(ones);
  if (!with_ones) require_message(with_ones.error(), "eval over a map");

  // (e) + 0 is e, whenever the wrapped text still fits the length and depth limits.
  const auto wrapped = core::parse_expr("(" + std::string(text) + ") + 0");
  if (wrapped) {
    const auto wrapped_value = wrapped->eval(lookup);
    if (wrapped_value.ok() != value.ok() || (value.ok() && *wrapped_value != *value)) {
      fuzz::fail("'(e) + 0' evaluates differently from 'e'", text);
    }
  }
  return 0;
}
