// Integer expressions: precedence, C arithmetic, overflow, and the exact error messages.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "core/expr.hpp"

using namespace crucible::core;

namespace {

const std::map<std::string, std::int64_t, std::less<>> kSymbols = {
    {"n", 10},
    {"m", 3},
    {"zero", 0},
    {"neg", -7},
    {"big", std::numeric_limits<std::int64_t>::max()},
    {"small", std::numeric_limits<std::int64_t>::min()},
    {"num_tokens", 4096},
    {"hidden_size", 8192},
};

Result<std::int64_t> evaluate(const std::string& text) {
  auto expr = parse_expr(text);
  if (!expr) return expr.error();
  return expr->eval(kSymbols);
}

}  // namespace

TEST_CASE("expr: evaluates with C precedence, associativity and truncation") {
  struct Case {
    const char* text;
    std::int64_t value;
  };
  const Case cases[] = {
      {"42", 42},
      {"0", 0},
      {"0x1F", 31},
      {"0XfF", 255},
      {"1 + 2 * 3", 7},
      {"(1 + 2) * 3", 9},
      {"10 - 3 - 2", 5},    // left-associative
      {"100 / 10 / 5", 2},  // left-associative
      {"2 * 3 % 4", 2},     // same level, left to right: (2 * 3) % 4
      {"-7 / 2", -3},       // truncates toward zero
      {"7 / -2", -3},
      {"-7 % 3", -1},  // sign of the dividend
      {"7 % -3", 1},
      {"- -5", 5},
      {"-n + 1", -9},
      {"!0", 1},
      {"!n", 0},
      {"!!n", 1},
      {"1 + 2 < 4", 1},   // arithmetic binds tighter than comparison
      {"3 < 2 == 0", 1},  // relational binds tighter than equality
      {"n >= 10 && m <= 3", 1},
      {"n > 10 || m < 3", 0},
      {"1 || 0 && 0", 1},  // && binds tighter than ||
      {"n != m", 1},
      {"n == 10", 1},
      {"cdiv(num_tokens, 128)", 32},
      {"cdiv(4097, 128)", 33},
      {"cdiv(0, 4)", 0},
      {"cdiv(-7, 2)", -3},  // ceil(-3.5)
      {"cdiv(1, 1)", 1},
      {"min(n, m)", 3},
      {"max(n, m, 42, -1)", 42},
      {"min(max(1, 2), 3) * 2", 4},
      {"num_tokens * hidden_size * 2", 67108864},
      {"big", std::numeric_limits<std::int64_t>::max()},
      {"big + -1 + 1", std::numeric_limits<std::int64_t>::max()},
      {"-9223372036854775807 - 1", std::numeric_limits<std::int64_t>::min()},
      {"small % -1", 0},
      {"small / 1", std::numeric_limits<std::int64_t>::min()},
      {"zero && 1 / zero", 0},  // short-circuit: the division is never evaluated
      {"n || 1 / zero", 1},
      {"  \t( n )\n", 10},
      {"cdiv(big, 2)", 4611686018427387904},
  };
  for (const auto& c : cases) {
    const std::string text = c.text;
    CAPTURE(text);
    const auto value = evaluate(text);
    REQUIRE_MESSAGE(value.ok(), value.error().message);
    CHECK(*value == c.value);
  }
}

TEST_CASE("expr: parse errors give the column and what was expected") {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"", "empty expression"},
      {"   ", "empty expression"},
      {"(a + b", "column 7: expected ')' to close '(' opened at column 1"},
      {"a * (b + c", "column 11: expected ')' to close '(' opened at column 5"},
      {"(a b)", "column 4: expected ')' to close '(' opened at column 1"},
      {"a b", "column 3: expected an operator or end of expression, got 'b'"},
      {"a)", "column 2: unmatched ')'"},
      {"a +",
       "column 4: expected a number, a symbol, a function call or '(', got end of expression"},
      {"* a", "column 1: expected a number, a symbol, a function call or '(', got '*'"},
      {"()", "column 2: expected a number, a symbol, a function call or '(', got ')'"},
      {"a @ b", "column 3: unexpected character '@'"},
      {"a\x01", "column 2: unexpected byte 0x01"},
      {"n\xc3\xa9", "column 2: unexpected byte 0xc3"},
      {"a = b", "column 3: unexpected character '='; did you mean '=='?"},
      {"a & b", "column 3: unexpected character '&'; did you mean '&&'?"},
      {"a | b", "column 3: unexpected character '|'; did you mean '||'?"},
      {"a ? b : c", "column 3: unexpected character '?'"},
      {"12abc", "column 1: invalid integer literal '12abc'"},
      {"0x", "column 1: invalid integer literal '0x'"},
      {"0x1g", "column 1: invalid integer literal '0x1g'"},
      {"010",
       "column 1: integer literal '010' has a leading zero; write decimal without leading "
       "zeros, or hex as 0x..."},
      {"9223372036854775808",
       "column 1: integer literal '9223372036854775808' does not fit in a "
       "signed 64-bit integer"},
      {"1 + 0x8000000000000000",
       "column 5: integer literal '0x8000000000000000' does not fit in a "
       "signed 64-bit integer"},
      {"foo(1, 2)", "column 1: unknown function 'foo'; the functions are cdiv, min, max"},
      {"cdiv(1)", "column 1: cdiv takes 2 arguments, got 1"},
      {"cdiv(1, 2, 3)", "column 1: cdiv takes 2 arguments, got 3"},
      {"min(1)", "column 1: min takes at least 2 arguments, got 1"},
      {"max(1, 2", "column 9: expected ',' or ')' to close 'max(' opened at column 1"},
      {"min()", "column 5: expected a number, a symbol, a function call or '(', got ')'"},
      {"1 +* 2", "column 4: expected a number, a symbol, a function call or '(', got '*'"},
  };
  for (const auto& c : cases) {
    const std::string text = c.text;
    CAPTURE(text);
    const auto expr = parse_expr(text);
    REQUIRE_FALSE(expr.ok());
    CHECK(expr.error().code == ErrorCode::kInvalidArgument);
    CHECK(expr.error().message == c.message);
  }
}

TEST_CASE("expr: evaluation errors name the sub-expression") {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"n + x", "column 5: unknown symbol 'x'"},
      {"n / zero", "column 3: division by zero in 'n / zero'"},
      {"1 + n / (m - 3)", "column 7: division by zero in 'n / (m - 3)'"},
      {"n % 0", "column 3: modulo by zero in 'n % 0'"},
      {"big + 1", "column 5: signed 64-bit overflow in 'big + 1' (9223372036854775807 + 1)"},
      {"small - 1", "column 7: signed 64-bit overflow in 'small - 1' (-9223372036854775808 - 1)"},
      {"big * 2", "column 5: signed 64-bit overflow in 'big * 2' (9223372036854775807 * 2)"},
      {"small * -1",
       "column 7: signed 64-bit overflow in 'small * -1' (-9223372036854775808 * -1)"},
      {"small / -1",
       "column 7: signed 64-bit overflow in 'small / -1' (-9223372036854775808 / -1)"},
      {"-small", "column 1: signed 64-bit overflow in '-small' (-(-9223372036854775808))"},
      {"2 * (big - 1) + 1",
       "column 3: signed 64-bit overflow in '2 * (big - 1)' (2 * 9223372036854775806)"},
      {"cdiv(n, zero)", "column 1: cdiv divisor must be positive in 'cdiv(n, zero)', got 0"},
      {"cdiv(n, neg)", "column 1: cdiv divisor must be positive in 'cdiv(n, neg)', got -7"},
      {"min(n, unknown_thing)", "column 8: unknown symbol 'unknown_thing'"},
  };
  for (const auto& c : cases) {
    const std::string text = c.text;
    CAPTURE(text);
    const auto value = evaluate(text);
    REQUIRE_FALSE(value.ok());
    CHECK(value.error().code == ErrorCode::kInvalidArgument);
    CHECK(value.error().message == c.message);
  }
}

TEST_CASE("expr: symbols are sorted, unique and exclude function names") {
  const auto expr = parse_expr("cdiv(num_tokens, b) + max(a, num_tokens, b) * min(1, 2)");
  REQUIRE(expr.ok());
  CHECK(expr->symbols() == std::vector<std::string>{"a", "b", "num_tokens"});
  CHECK(expr->text() == "cdiv(num_tokens, b) + max(a, num_tokens, b) * min(1, 2)");
  CHECK_FALSE(expr->constant_value().has_value());
  // A bare 'min' is a symbol, not a call.
  const auto bare = parse_expr("min + 1");
  REQUIRE(bare.ok());
  CHECK(bare->symbols() == std::vector<std::string>{"min"});
}

TEST_CASE("expr: constants fold at parse time, and errors in them surface at eval") {
  const auto folded = parse_expr("cdiv(4096, 128) * 2");
  REQUIRE(folded.ok());
  REQUIRE(folded->constant_value().has_value());
  CHECK(*folded->constant_value() == 64);
  const auto broken = parse_expr("1 / 0");
  REQUIRE(broken.ok());
  CHECK_FALSE(broken->constant_value().has_value());
  const auto value = broken->eval([](std::string_view) { return std::nullopt; });
  REQUIRE_FALSE(value.ok());
  CHECK(value.error().message == "column 3: division by zero in '1 / 0'");
  CHECK(Expr().text() == "0");
  CHECK(*Expr().constant_value() == 0);
  CHECK(Expr::constant(-5).text() == "-5");
  CHECK(*Expr::constant(-5).eval(kSymbols) == -5);
}

TEST_CASE("expr: a copy shares the parse and evaluates the same") {
  const auto expr = parse_expr("n * m");
  REQUIRE(expr.ok());
  const Expr copy = *expr;
  CHECK(copy.text() == "n * m");
  CHECK(*copy.eval(kSymbols) == 30);
  CHECK(*copy.eval([](std::string_view name) -> std::optional<std::int64_t> {
    return name == "n" ? 2 : 5;
  }) == 10);
}

TEST_CASE("expr: hostile input is rejected cheaply") {
  // Nesting: 64 levels parse, 65 do not.
  const std::string ok_parens = std::string(64, '(') + "1" + std::string(64, ')');
  CHECK(parse_expr(ok_parens).ok());
  const std::string deep_parens = std::string(65, '(') + "1" + std::string(65, ')');
  const auto deep = parse_expr(deep_parens);
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.error().message == "column 65: expression nests deeper than 64 levels");
  const auto unary = parse_expr(std::string(100, '-') + "1");
  REQUIRE_FALSE(unary.ok());
  CHECK(unary.error().message == "column 65: expression nests deeper than 64 levels");
  std::string calls;
  for (int i = 0; i < 70; ++i) calls += "min(1, ";
  const auto nested_calls = parse_expr(calls + "1");
  REQUIRE_FALSE(nested_calls.ok());
  CHECK(nested_calls.error().message == "column 452: expression nests deeper than 64 levels");
  // Unbalanced opening parentheses up to the length limit: an error, not a crash.
  const auto open = parse_expr(std::string(1024, '('));
  REQUIRE_FALSE(open.ok());
  CHECK(open.error().message == "column 65: expression nests deeper than 64 levels");
  // Length.
  const auto long_text = parse_expr(std::string(1025, '1'));
  REQUIRE_FALSE(long_text.ok());
  CHECK(long_text.error().message == "expression is 1025 bytes long; the limit is 1024");
  // A long flat chain is fine: it does not nest.
  std::string chain = "1";
  while (chain.size() + 4 <= 1024) chain += " + 1";
  const auto flat = parse_expr(chain);
  REQUIRE(flat.ok());
  CHECK(*flat->constant_value() == static_cast<std::int64_t>((chain.size() - 1) / 4 + 1));
}
