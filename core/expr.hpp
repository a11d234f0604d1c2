// Integer expressions over named symbols: parsed once, evaluated per case with overflow checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace crucible::core {

// Limits that keep hostile text cheap to reject. Parsing is linear in the text length and its
// recursion depth is bounded by kMaxExprDepth, so no input can exhaust the stack.
inline constexpr std::size_t kMaxExprBytes = 1024;
inline constexpr int kMaxExprDepth = 64;

// Grammar (lowest precedence first; binary operators associate to the left):
//   expr    := or
//   or      := and ( '||' and )*
//   and     := eq ( '&&' eq )*
//   eq      := rel ( ('==' | '!=') rel )*
//   rel     := add ( ('<' | '<=' | '>' | '>=') add )*
//   add     := mul ( ('+' | '-') mul )*
//   mul     := unary ( ('*' | '/' | '%') unary )*
//   unary   := ('-' | '!') unary | primary
//   primary := INT | IDENT | IDENT '(' expr (',' expr)* ')' | '(' expr ')'
// INT is decimal without leading zeros, or hex (0x1F). IDENT is [A-Za-z_][A-Za-z0-9_]*.
// Functions: cdiv(a, b) = ceil(a / b) with b > 0; min(a, b, ...) and max(a, b, ...) take two or
// more arguments. Arithmetic follows C on int64: '/' truncates toward zero, '%' has the sign of
// the dividend, comparisons and '!' give 0 or 1, '&&' and '||' short-circuit and give 0 or 1.
//
// Expr is immutable and cheap to copy (it shares its parsed tree); safe to use from any thread.
class Expr {
 public:
  struct Tree;  // parsed nodes; defined in expr.cpp

  // The constant 0, spelled "0". Exists so plan structs can be default-constructed.
  Expr();
  // A constant; text() is its decimal spelling.
  static Expr constant(std::int64_t value);

  // The text as given to parse_expr (verbatim, including spaces).
  const std::string& text() const;
  // Identifiers referenced as symbols (not function names), sorted, unique.
  std::vector<std::string> symbols() const;
  // The value when the expression references no symbol.
  std::optional<std::int64_t> constant_value() const;

  // `lookup` returns a symbol's value, or nullopt if it does not know the symbol.
  // Errors (kInvalidArgument), each naming the column and the sub-expression, e.g.
  //   "column 5: unknown symbol 'n'"
  //   "column 1: division by zero in 'a / (b - b)'"
  //   "column 1: signed 64-bit overflow in 'x * 2' (9223372036854775807 * 2)"
  //   "column 1: cdiv divisor must be positive in 'cdiv(a, b)', got 0"
  Result<std::int64_t> eval(
      const std::function<std::optional<std::int64_t>(std::string_view)>& lookup) const;
  // Convenience: symbols from a map.
  Result<std::int64_t> eval(const std::map<std::string, std::int64_t, std::less<>>& symbols) const;

 private:
  explicit Expr(std::shared_ptr<const Tree> tree);
  friend Result<Expr> parse_expr(std::string_view text);
  std::shared_ptr<const Tree> tree_;
};

// Parses `text`. Errors are kInvalidArgument with a 1-based column and what was expected, e.g.
//   "column 7: expected ')' to close '(' opened at column 3".
// Text longer than kMaxExprBytes or nesting deeper than kMaxExprDepth is rejected.
Result<Expr> parse_expr(std::string_view text);

}  // namespace crucible::core
