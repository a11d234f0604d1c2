// Integer expression lexer, recursive-descent parser with a depth bound, and checked evaluator.
#include "core/expr.hpp"

#include <algorithm>
#include <limits>

#include "core/text.hpp"

namespace crucible::core {

namespace {

enum class NodeKind : std::uint8_t { kLiteral, kSymbol, kUnary, kBinary, kCall };

enum class Op : std::uint8_t {
  kNone,
  kNeg,
  kNot,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMod,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kAnd,
  kOr,
  kCdiv,
  kMin,
  kMax,
};

std::string_view op_spelling(Op op) {
  switch (op) {
    case Op::kNeg:
      return "-";
    case Op::kNot:
      return "!";
    case Op::kAdd:
      return "+";
    case Op::kSub:
      return "-";
    case Op::kMul:
      return "*";
    case Op::kDiv:
      return "/";
    case Op::kMod:
      return "%";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    case Op::kEq:
      return "==";
    case Op::kNe:
      return "!=";
    case Op::kAnd:
      return "&&";
    case Op::kOr:
      return "||";
    case Op::kCdiv:
      return "cdiv";
    case Op::kMin:
      return "min";
    case Op::kMax:
      return "max";
    case Op::kNone:
      break;
  }
  return "?";
}

struct Node {
  NodeKind kind = NodeKind::kLiteral;
  Op op = Op::kNone;
  std::int64_t value = 0;         // kLiteral
  std::string name;               // kSymbol
  std::vector<std::size_t> kids;  // operands (indices into Tree::nodes)
  std::size_t begin = 0;          // byte span in the text, for naming sub-expressions
  std::size_t end = 0;
  std::size_t op_pos = 0;  // where the operator, symbol or function name is (0-based)
};

std::string column_prefix(std::size_t pos) { return "column " + std::to_string(pos + 1) + ": "; }

Error invalid(std::string message) {
  return Error{ErrorCode::kInvalidArgument, std::move(message)};
}

}  // namespace

struct Expr::Tree {
  std::string text;
  std::vector<Node> nodes;
  std::size_t root = 0;
  std::vector<std::string> symbols;
  std::optional<std::int64_t> constant;
};

namespace {

// ---------------------------------------------------------------------------------------------
// Lexer

enum class TokenKind : std::uint8_t { kInt, kIdent, kPunct, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string_view text;
  std::size_t pos = 0;
  std::int64_t value = 0;
};

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::int64_t> lex_integer(std::string_view literal, std::size_t pos) {
  const auto too_big = [&] {
    return invalid(column_prefix(pos) + "integer literal '" + std::string(literal) +
                   "' does not fit in a signed 64-bit integer");
  };
  const auto bad = [&] {
    return invalid(column_prefix(pos) + "invalid integer literal '" + std::string(literal) + "'");
  };
  std::uint64_t value = 0;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (literal.size() > 2 && literal[0] == '0' && (literal[1] == 'x' || literal[1] == 'X')) {
    for (const char c : literal.substr(2)) {
      const int digit = hex_digit(c);
      if (digit < 0) return bad();
      if (value > (kMax >> 4)) return too_big();
      value = (value << 4) | static_cast<std::uint64_t>(digit);
    }
  } else {
    for (const char c : literal) {
      if (!is_digit(c)) return bad();
    }
    if (literal.size() > 1 && literal[0] == '0') {
      return invalid(column_prefix(pos) + "integer literal '" + std::string(literal) +
                     "' has a leading zero; write decimal without leading zeros, or hex as 0x...");
    }
    for (const char c : literal) {
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (value > (kMax - digit) / 10) return too_big();
      value = value * 10 + digit;
    }
  }
  if (value > kMax) return too_big();
  return static_cast<std::int64_t>(value);
}

Result<std::vector<Token>> lex(std::string_view text) {
  std::vector<Token> tokens;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (is_space(c)) {
      ++i;
      continue;
    }
    Token token;
    token.pos = i;
    if (is_digit(c)) {
      std::size_t j = i;
      while (j < text.size() && is_ident_char(text[j])) ++j;
      token.kind = TokenKind::kInt;
      token.text = text.substr(i, j - i);
      auto value = lex_integer(token.text, i);
      if (!value) return value.error();
      token.value = *value;
      i = j;
    } else if (is_ident_start(c)) {
      std::size_t j = i;
      while (j < text.size() && is_ident_char(text[j])) ++j;
      token.kind = TokenKind::kIdent;
      token.text = text.substr(i, j - i);
      i = j;
    } else {
      const char next = i + 1 < text.size() ? text[i + 1] : '\0';
      std::size_t length = 0;
      switch (c) {
        case '+':
        case '-':
        case '*':
        case '/':
        case '%':
        case '(':
        case ')':
        case ',':
          length = 1;
          break;
        case '<':
        case '>':
          length = next == '=' ? 2 : 1;
          break;
        case '!':
          length = next == '=' ? 2 : 1;
          break;
        case '=':
          if (next != '=') {
            return invalid(column_prefix(i) + "unexpected character '='; did you mean '=='?");
          }
          length = 2;
          break;
        case '&':
          if (next != '&') {
            return invalid(column_prefix(i) + "unexpected character '&'; did you mean '&&'?");
          }
          length = 2;
          break;
        case '|':
          if (next != '|') {
            return invalid(column_prefix(i) + "unexpected character '|'; did you mean '||'?");
          }
          length = 2;
          break;
        default:
          return invalid(column_prefix(i) + "unexpected " + describe_byte(c));
      }
      token.kind = TokenKind::kPunct;
      token.text = text.substr(i, length);
      i += length;
    }
    tokens.push_back(token);
  }
  Token end;
  end.kind = TokenKind::kEnd;
  end.pos = text.size();
  tokens.push_back(end);
  return tokens;
}

std::string describe(const Token& token) {
  if (token.kind == TokenKind::kEnd) return "end of expression";
  return "'" + std::string(token.text) + "'";
}

// ---------------------------------------------------------------------------------------------
// Parser

class Parser {
 public:
  Parser(std::vector<Token> tokens, Expr::Tree& tree) : tokens_(std::move(tokens)), tree_(tree) {}

  Result<std::size_t> parse_all() {
    auto root = parse_or();
    if (!root) return root;
    const Token& token = peek();
    if (token.kind != TokenKind::kEnd) {
      if (token.text == ")") return invalid(column_prefix(token.pos) + "unmatched ')'");
      return invalid(column_prefix(token.pos) + "expected an operator or end of expression, got " +
                     describe(token));
    }
    return root;
  }

 private:
  const Token& peek() const { return tokens_[next_]; }
  bool at(std::string_view punct) const {
    return peek().kind == TokenKind::kPunct && peek().text == punct;
  }

  std::size_t add(Node node) {
    tree_.nodes.push_back(std::move(node));
    return tree_.nodes.size() - 1;
  }

  std::size_t add_binary(Op op, std::size_t op_pos, std::size_t lhs, std::size_t rhs) {
    Node node;
    node.kind = NodeKind::kBinary;
    node.op = op;
    node.begin = tree_.nodes[lhs].begin;
    node.end = tree_.nodes[rhs].end;
    node.op_pos = op_pos;
    node.kids = {lhs, rhs};
    return add(std::move(node));
  }

  // Every construct that nests (parentheses, call arguments, unary operators) enters here, so
  // the recursion depth of the whole parser is bounded by kMaxExprDepth times a constant.
  Status enter(std::size_t pos) {
    if (++depth_ > kMaxExprDepth) {
      return invalid(column_prefix(pos) + "expression nests deeper than " +
                     std::to_string(kMaxExprDepth) + " levels");
    }
    return {};
  }

  // One left-associative binary level; `next` parses the operands.
  template <class Next>
  Result<std::size_t> parse_binary(
      const std::initializer_list<std::pair<std::string_view, Op>>& ops, Next next) {
    auto lhs = (this->*next)();
    if (!lhs) return lhs;
    std::size_t left = *lhs;
    while (true) {
      Op found = Op::kNone;
      if (peek().kind == TokenKind::kPunct) {
        for (const auto& [spelling, op] : ops) {
          if (peek().text == spelling) found = op;
        }
      }
      if (found == Op::kNone) return left;
      const std::size_t op_pos = peek().pos;
      ++next_;
      auto rhs = (this->*next)();
      if (!rhs) return rhs;
      left = add_binary(found, op_pos, left, *rhs);
    }
  }

  Result<std::size_t> parse_or() { return parse_binary({{"||", Op::kOr}}, &Parser::parse_and); }
  Result<std::size_t> parse_and() { return parse_binary({{"&&", Op::kAnd}}, &Parser::parse_eq); }
  Result<std::size_t> parse_eq() {
    return parse_binary({{"==", Op::kEq}, {"!=", Op::kNe}}, &Parser::parse_rel);
  }
  Result<std::size_t> parse_rel() {
    return parse_binary({{"<", Op::kLt}, {"<=", Op::kLe}, {">", Op::kGt}, {">=", Op::kGe}},
                        &Parser::parse_add);
  }
  Result<std::size_t> parse_add() {
    return parse_binary({{"+", Op::kAdd}, {"-", Op::kSub}}, &Parser::parse_mul);
  }
  Result<std::size_t> parse_mul() {
    return parse_binary({{"*", Op::kMul}, {"/", Op::kDiv}, {"%", Op::kMod}}, &Parser::parse_unary);
  }

  Result<std::size_t> parse_unary() {
    if (at("-") || at("!")) {
      const Token token = peek();
      if (auto entered = enter(token.pos); !entered) return entered.error();
      ++next_;
      auto operand = parse_unary();
      if (!operand) return operand;
      --depth_;
      Node node;
      node.kind = NodeKind::kUnary;
      node.op = token.text == "-" ? Op::kNeg : Op::kNot;
      node.begin = token.pos;
      node.end = tree_.nodes[*operand].end;
      node.op_pos = token.pos;
      node.kids = {*operand};
      return add(std::move(node));
    }
    return parse_primary();
  }

  Result<std::size_t> parse_primary() {
    const Token token = peek();
    if (token.kind == TokenKind::kInt) {
      ++next_;
      Node node;
      node.kind = NodeKind::kLiteral;
      node.value = token.value;
      node.begin = node.op_pos = token.pos;
      node.end = token.pos + token.text.size();
      return add(std::move(node));
    }
    if (token.kind == TokenKind::kIdent) {
      ++next_;
      if (at("(")) return parse_call(token);
      Node node;
      node.kind = NodeKind::kSymbol;
      node.name = std::string(token.text);
      node.begin = node.op_pos = token.pos;
      node.end = token.pos + token.text.size();
      return add(std::move(node));
    }
    if (at("(")) {
      if (auto entered = enter(token.pos); !entered) return entered.error();
      ++next_;
      auto inner = parse_or();
      if (!inner) return inner;
      if (!at(")")) {
        return invalid(column_prefix(peek().pos) + "expected ')' to close '(' opened at column " +
                       std::to_string(token.pos + 1));
      }
      // The group's span includes its parentheses so error messages quote balanced text.
      tree_.nodes[*inner].begin = token.pos;
      tree_.nodes[*inner].end = peek().pos + 1;
      ++next_;
      --depth_;
      return inner;
    }
    return invalid(column_prefix(token.pos) +
                   "expected a number, a symbol, a function call or '(', got " + describe(token));
  }

  Result<std::size_t> parse_call(const Token& name) {
    Op op = Op::kNone;
    if (name.text == "cdiv") op = Op::kCdiv;
    if (name.text == "min") op = Op::kMin;
    if (name.text == "max") op = Op::kMax;
    if (op == Op::kNone) {
      return invalid(column_prefix(name.pos) + "unknown function '" + std::string(name.text) +
                     "'; the functions are cdiv, min, max");
    }
    if (auto entered = enter(peek().pos); !entered) return entered.error();
    ++next_;  // '('
    std::vector<std::size_t> args;
    while (true) {
      auto arg = parse_or();
      if (!arg) return arg;
      args.push_back(*arg);
      if (at(",")) {
        ++next_;
        continue;
      }
      if (at(")")) break;
      return invalid(column_prefix(peek().pos) + "expected ',' or ')' to close '" +
                     std::string(name.text) + "(' opened at column " +
                     std::to_string(name.pos + 1));
    }
    const std::size_t close = peek().pos;
    ++next_;
    --depth_;
    const std::string fn(name.text);
    if (op == Op::kCdiv && args.size() != 2) {
      return invalid(column_prefix(name.pos) + "cdiv takes 2 arguments, got " +
                     std::to_string(args.size()));
    }
    if (op != Op::kCdiv && args.size() < 2) {
      return invalid(column_prefix(name.pos) + fn + " takes at least 2 arguments, got " +
                     std::to_string(args.size()));
    }
    Node node;
    node.kind = NodeKind::kCall;
    node.op = op;
    node.begin = node.op_pos = name.pos;
    node.end = close + 1;
    node.kids = std::move(args);
    return add(std::move(node));
  }

  std::vector<Token> tokens_;
  std::size_t next_ = 0;
  int depth_ = 0;
  Expr::Tree& tree_;
};

// ---------------------------------------------------------------------------------------------
// Evaluator

constexpr std::size_t kMaxQuotedBytes = 120;

std::string quote(const Expr::Tree& tree, const Node& node) {
  std::string_view span = std::string_view(tree.text).substr(node.begin, node.end - node.begin);
  return "'" + excerpt(span, kMaxQuotedBytes) + "'";
}

using Lookup = std::function<std::optional<std::int64_t>(std::string_view)>;

class Evaluator {
 public:
  Evaluator(const Expr::Tree& tree, const Lookup& lookup) : tree_(tree), lookup_(lookup) {}

  Result<std::int64_t> eval(std::size_t index) {
    const Node& node = tree_.nodes[index];
    switch (node.kind) {
      case NodeKind::kLiteral:
        return node.value;
      case NodeKind::kSymbol: {
        std::optional<std::int64_t> value;
        if (lookup_) value = lookup_(node.name);
        if (!value)
          return invalid(column_prefix(node.op_pos) + "unknown symbol '" + node.name + "'");
        return *value;
      }
      case NodeKind::kUnary: {
        auto operand = eval(node.kids[0]);
        if (!operand) return operand;
        if (node.op == Op::kNot) return std::int64_t{*operand == 0 ? 1 : 0};
        if (*operand == std::numeric_limits<std::int64_t>::min()) {
          return overflow(node, "-(" + std::to_string(*operand) + ")");
        }
        return -*operand;
      }
      case NodeKind::kBinary:
        return eval_binary(node);
      case NodeKind::kCall:
        return eval_call(node);
    }
    throw InternalError("expr: unknown node kind");
  }

 private:
  Error overflow(const Node& node, const std::string& operation) {
    return invalid(column_prefix(node.op_pos) + "signed 64-bit overflow in " + quote(tree_, node) +
                   " (" + operation + ")");
  }

  Result<std::int64_t> eval_binary(const Node& node) {
    auto lhs = eval(node.kids[0]);
    if (!lhs) return lhs;
    const std::int64_t a = *lhs;
    if (node.op == Op::kAnd && a == 0) return std::int64_t{0};
    if (node.op == Op::kOr && a != 0) return std::int64_t{1};
    auto rhs = eval(node.kids[1]);
    if (!rhs) return rhs;
    const std::int64_t b = *rhs;
    std::int64_t out = 0;
    const auto spelled = [&] {
      return std::to_string(a) + " " + std::string(op_spelling(node.op)) + " " + std::to_string(b);
    };
    switch (node.op) {
      case Op::kAdd:
        if (__builtin_add_overflow(a, b, &out)) return overflow(node, spelled());
        return out;
      case Op::kSub:
        if (__builtin_sub_overflow(a, b, &out)) return overflow(node, spelled());
        return out;
      case Op::kMul:
        if (__builtin_mul_overflow(a, b, &out)) return overflow(node, spelled());
        return out;
      case Op::kDiv:
        if (b == 0) {
          return invalid(column_prefix(node.op_pos) + "division by zero in " + quote(tree_, node));
        }
        if (a == std::numeric_limits<std::int64_t>::min() && b == -1) {
          return overflow(node, spelled());
        }
        return a / b;
      case Op::kMod:
        if (b == 0) {
          return invalid(column_prefix(node.op_pos) + "modulo by zero in " + quote(tree_, node));
        }
        if (b == -1) return std::int64_t{0};  // INT64_MIN % -1 is 0, but the C expression traps
        return a % b;
      case Op::kLt:
        return std::int64_t{a < b};
      case Op::kLe:
        return std::int64_t{a <= b};
      case Op::kGt:
        return std::int64_t{a > b};
      case Op::kGe:
        return std::int64_t{a >= b};
      case Op::kEq:
        return std::int64_t{a == b};
      case Op::kNe:
        return std::int64_t{a != b};
      case Op::kAnd:
      case Op::kOr:
        return std::int64_t{b != 0};
      default:
        break;
    }
    throw InternalError("expr: bad binary operator");
  }

  Result<std::int64_t> eval_call(const Node& node) {
    std::vector<std::int64_t> values;
    values.reserve(node.kids.size());
    for (const std::size_t kid : node.kids) {
      auto value = eval(kid);
      if (!value) return value;
      values.push_back(*value);
    }
    if (node.op == Op::kCdiv) {
      const std::int64_t a = values[0];
      const std::int64_t b = values[1];
      if (b <= 0) {
        return invalid(column_prefix(node.op_pos) + "cdiv divisor must be positive in " +
                       quote(tree_, node) + ", got " + std::to_string(b));
      }
      // Truncation already rounds up for negative a; only a positive remainder needs the +1,
      // and then a / b < a, so the increment cannot overflow.
      return a / b + (a % b > 0 ? 1 : 0);
    }
    if (node.op == Op::kMin) return *std::min_element(values.begin(), values.end());
    return *std::max_element(values.begin(), values.end());
  }

  const Expr::Tree& tree_;
  const Lookup& lookup_;
};

}  // namespace

Expr::Expr() : Expr(constant(0)) {}

Expr::Expr(std::shared_ptr<const Tree> tree) : tree_(std::move(tree)) {}

Expr Expr::constant(std::int64_t value) {
  auto tree = std::make_shared<Tree>();
  tree->text = std::to_string(value);
  Node node;
  node.kind = NodeKind::kLiteral;
  node.value = value;
  node.end = tree->text.size();
  tree->nodes.push_back(std::move(node));
  tree->constant = value;
  return Expr(std::move(tree));
}

const std::string& Expr::text() const { return tree_->text; }
std::vector<std::string> Expr::symbols() const { return tree_->symbols; }
std::optional<std::int64_t> Expr::constant_value() const { return tree_->constant; }

Result<std::int64_t> Expr::eval(const Lookup& lookup) const {
  return Evaluator(*tree_, lookup).eval(tree_->root);
}

Result<std::int64_t> Expr::eval(
    const std::map<std::string, std::int64_t, std::less<>>& symbols) const {
  return eval([&](std::string_view name) -> std::optional<std::int64_t> {
    const auto found = symbols.find(name);
    if (found == symbols.end()) return std::nullopt;
    return found->second;
  });
}

Result<Expr> parse_expr(std::string_view text) {
  if (text.size() > kMaxExprBytes) {
    return invalid("expression is " + std::to_string(text.size()) + " bytes long; the limit is " +
                   std::to_string(kMaxExprBytes));
  }
  auto tokens = lex(text);
  if (!tokens) return tokens.error();
  if (tokens->size() == 1) return invalid("empty expression");
  auto tree = std::make_shared<Expr::Tree>();
  tree->text = std::string(text);
  tree->nodes.reserve(tokens->size());
  Parser parser(std::move(tokens).value(), *tree);
  auto root = parser.parse_all();
  if (!root) return root.error();
  tree->root = *root;
  for (const Node& node : tree->nodes) {
    if (node.kind == NodeKind::kSymbol) tree->symbols.push_back(node.name);
  }
  std::sort(tree->symbols.begin(), tree->symbols.end());
  tree->symbols.erase(std::unique(tree->symbols.begin(), tree->symbols.end()), tree->symbols.end());
  if (tree->symbols.empty()) {
    auto value = Evaluator(*tree, Lookup{}).eval(tree->root);
    if (value) tree->constant = *value;
  }
  return Expr(std::move(tree));
}

}  // namespace crucible::core
