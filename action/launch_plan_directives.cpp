// The directive form of a launch plan: finds `// @...` comments in CUDA source and parses them.
#include <algorithm>
#include <optional>
#include <string>

#include "action/launch_plan.hpp"
#include "action/launch_plan_internal.hpp"
#include "core/text.hpp"

namespace crucible::action {

namespace plan_detail {

namespace {

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

int count_lines(std::string_view text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// Raw string literals: R"delim( ... )delim", with an optional encoding prefix.
bool opens_raw_string(std::string_view source, std::size_t quote) {
  std::size_t start = quote;
  while (start > 0 && is_ident_char(source[start - 1])) --start;
  const std::string_view word = source.substr(start, quote - start);
  return word == "R" || word == "u8R" || word == "uR" || word == "UR" || word == "LR";
}

// End (one past the closing quote, or the end of the line) of a quoted literal starting at
// `open`; escapes are skipped. Adds escaped newlines to `line`.
std::size_t skip_quoted(std::string_view source, std::size_t open, char quote, int& line) {
  std::size_t i = open + 1;
  while (i < source.size() && source[i] != quote && source[i] != '\n') {
    if (source[i] == '\\' && i + 1 < source.size()) {
      if (source[i + 1] == '\n') ++line;
      i += 2;
    } else {
      ++i;
    }
  }
  return i < source.size() && source[i] == quote ? i + 1 : i;
}

// Whether a directive's text is unfinished: a '(', '[' or '<<<' left open, or a @launch that
// has not reached its argument list yet (`if (...)` alone, or a kernel name before its `<<<`).
bool is_open(std::string_view text) {
  long parens = 0, brackets = 0, chevrons = 0;
  std::size_t arguments_open = std::string_view::npos;  // the '(' after the last '>>>'
  bool after_chevrons = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i, 3) == "<<<") {
      ++chevrons;
      i += 2;
      continue;
    }
    if (text.substr(i, 3) == ">>>") {
      --chevrons;
      after_chevrons = true;
      i += 2;
      continue;
    }
    if (text[i] == '(') {
      ++parens;
      if (after_chevrons && arguments_open == std::string_view::npos) arguments_open = i;
    }
    if (text[i] == ')') --parens;
    if (text[i] == '[') ++brackets;
    if (text[i] == ']') --brackets;
  }
  const bool launch = text.substr(0, 7) == "@launch";
  return parens > 0 || brackets > 0 || chevrons > 0 ||
         (launch && arguments_open == std::string_view::npos);
}

// The body of the `//` comment that is the whole of the line starting at `start` (leading
// blanks allowed), or nullopt when that line is anything else.
std::optional<std::string_view> comment_line(std::string_view source, std::size_t start) {
  std::size_t i = start;
  while (i < source.size() && (source[i] == ' ' || source[i] == '\t')) ++i;
  if (source.substr(i, 2) != "//") return std::nullopt;
  std::size_t eol = source.find('\n', i);
  if (eol == std::string_view::npos) eol = source.size();
  return source.substr(i + 2, eol - i - 2);
}

constexpr int kMaxContinuationLines = 16;

}  // namespace

core::Result<std::vector<DirectiveLine>> scan_directives(std::string_view source,
                                                         const PlanLimits& limits) {
  if (source.size() > limits.max_source_bytes) {
    return invalid("the source is " + std::to_string(source.size()) + " bytes; the limit is " +
                   std::to_string(limits.max_source_bytes) + " bytes");
  }
  std::vector<DirectiveLine> out;
  int line = 1;
  std::size_t i = 0;
  const std::size_t n = source.size();
  while (i < n) {
    const char c = source[i];
    const char next = i + 1 < n ? source[i + 1] : '\0';
    if (c == '\n') {
      ++line;
      ++i;
    } else if (c == '/' && next == '/') {
      std::size_t eol = source.find('\n', i);
      if (eol == std::string_view::npos) eol = n;
      const std::string_view body = source.substr(i + 2, eol - i - 2);
      const std::size_t at = body.find_first_not_of(" \t");
      if (at != std::string_view::npos && body[at] == '@') {
        std::string text(trim(body.substr(at)));
        const std::string where = "line " + std::to_string(line);
        const int first_line = line;
        // Continuation: the next lines, while they are plain `//` comments (not directives)
        // and the directive is still open.
        for (int extra = 0; extra < kMaxContinuationLines && is_open(text) && eol < n; ++extra) {
          const auto next_body = comment_line(source, eol + 1);
          if (!next_body) break;
          const std::string_view more = trim(*next_body);
          if (!more.empty() && more[0] == '@') break;
          text += ' ';
          text += more;
          ++line;
          std::size_t next_eol = source.find('\n', eol + 1);
          eol = next_eol == std::string_view::npos ? n : next_eol;
          if (text.size() > limits.max_directive_bytes) break;
        }
        if (out.size() >= limits.max_directives) {
          return invalid(where + ": more than " + std::to_string(limits.max_directives) +
                         " directives; a plan has at most " + std::to_string(limits.max_launches) +
                         " launches, " + std::to_string(limits.max_workspaces) + " workspaces, " +
                         std::to_string(limits.max_tensor_maps) +
                         " tensor maps and one cluster shape per kernel");
        }
        if (text.size() > limits.max_directive_bytes) {
          return invalid(where + ": the directive is " + std::to_string(text.size()) +
                         " bytes long; the limit is " + std::to_string(limits.max_directive_bytes));
        }
        out.push_back(DirectiveLine{first_line, std::move(text)});
      }
      i = eol;
    } else if (c == '/' && next == '*') {
      const std::size_t close = source.find("*/", i + 2);
      const std::size_t end = close == std::string_view::npos ? n : close + 2;
      line += count_lines(source.substr(i, end - i));
      i = end;
    } else if (c == '"' && opens_raw_string(source, i)) {
      const std::size_t paren = source.find('(', i + 1);
      constexpr std::size_t kMaxDelimiter = 16;
      if (paren == std::string_view::npos || paren - i - 1 > kMaxDelimiter) {
        i = skip_quoted(source, i, '"', line);  // not a valid raw string; the compiler will say
        continue;
      }
      const std::string closing = ")" + std::string(source.substr(i + 1, paren - i - 1)) + "\"";
      const std::size_t close = source.find(closing, paren + 1);
      const std::size_t end = close == std::string_view::npos ? n : close + closing.size();
      line += count_lines(source.substr(i, end - i));
      i = end;
    } else if (c == '"') {
      i = skip_quoted(source, i, '"', line);
    } else if (c == '\'') {
      // After an identifier character it is a digit separator (1'000'000), not a literal.
      if (i > 0 && is_ident_char(source[i - 1])) {
        ++i;
      } else {
        i = skip_quoted(source, i, '\'', line);
      }
    } else {
      ++i;
    }
  }
  return out;
}

}  // namespace plan_detail

namespace {

using plan_detail::invalid;
using plan_detail::is_ident_char;
using plan_detail::trim;

std::string_view trim_front(std::string_view text) {
  const std::size_t at = text.find_first_not_of(" \t");
  return at == std::string_view::npos ? std::string_view{} : text.substr(at);
}

std::string shorten(std::string_view text) { return core::excerpt(text, 40); }

// Index of the ')' matching the '(' at `open`, or npos.
std::size_t match_paren(std::string_view text, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth == 0) return i;
  }
  return std::string_view::npos;
}

// Splits at commas outside parentheses.
std::vector<std::string_view> split_top(std::string_view text) {
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')') --depth;
    if (text[i] == ',' && depth == 0) {
      items.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  items.push_back(text.substr(start));
  return items;
}

// Length of the identifier characters at the start of `text`.
std::size_t word_length(std::string_view text) {
  std::size_t k = 0;
  while (k < text.size() && is_ident_char(text[k])) ++k;
  return k;
}

// Length of a (possibly qualified) name at the start of `text`.
std::size_t name_length(std::string_view text) {
  std::size_t k = 0;
  while (k < text.size() && (is_ident_char(text[k]) || text[k] == ':')) ++k;
  return k;
}

// `text` starts with '<'; returns the index of the matching '>' (angle brackets inside
// parentheses do not count, so `(a > b)` is fine).
core::Result<std::size_t> template_close(const std::string& where, std::string_view kernel,
                                         std::string_view text) {
  int angle = 0;
  int paren = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '(') ++paren;
    if (c == ')') --paren;
    if (paren < 0) break;
    if (paren > 0) continue;
    if (c == '<') ++angle;
    if (c == '>' && --angle == 0) return i;
  }
  return invalid(where + ": the template arguments of '" + std::string(kernel) +
                 "' have no closing '>'");
}

struct KernelName {
  std::string kernel;
  std::string template_args;
  std::string_view rest;  // text after the name and its template arguments
};

core::Result<KernelName> parse_kernel_name(const std::string& where, std::string_view text,
                                           std::string_view usage) {
  KernelName out;
  const std::size_t length = name_length(text);
  const std::string_view name = text.substr(0, length);
  if (!plan_detail::is_qualified_name(name)) {
    const std::string got = text.empty() ? "nothing" : "'" + shorten(text) + "'";
    return invalid(where + ": expected a kernel name, got " + got + "; write " +
                   std::string(usage));
  }
  out.kernel = std::string(name);
  std::string_view rest = trim_front(text.substr(length));
  if (!rest.empty() && rest[0] == '<' && rest.substr(0, 3) != "<<<") {
    auto close = template_close(where, name, rest);
    if (!close) return close.error();
    out.template_args = std::string(trim(rest.substr(1, *close - 1)));
    if (out.template_args.empty()) {
      return invalid(where + ": empty template argument list '<>' for '" + out.kernel +
                     "'; drop the brackets or give the arguments");
    }
    rest = trim_front(rest.substr(*close + 1));
  }
  out.rest = rest;
  return out;
}

core::Result<Dim3Expr> parse_dims(const std::string& where, std::string_view base,
                                  std::string_view text) {
  text = trim(text);
  Dim3Expr dims;
  dims.y = core::Expr::constant(1);
  dims.z = core::Expr::constant(1);
  if (text.substr(0, 4) == "dim3") {
    const std::string_view rest = trim_front(text.substr(4));
    if (!rest.empty() && rest[0] == '(' && match_paren(rest, 0) == rest.size() - 1) {
      const auto items = split_top(rest.substr(1, rest.size() - 2));
      if (items.size() > 3 || trim(items[0]).empty()) {
        const std::size_t got = trim(items[0]).empty() && items.size() == 1 ? 0 : items.size();
        return invalid(where + ": dim3 takes 1 to 3 values for the " + std::string(base) +
                       ", got " + std::to_string(got));
      }
      dims.is_dim3 = true;
      core::Expr* axes[] = {&dims.x, &dims.y, &dims.z};
      for (std::size_t axis = 0; axis < items.size(); ++axis) {
        auto expr =
            plan_detail::parse_field(where, std::string(base) + " " + "xyz"[axis], items[axis]);
        if (!expr) return expr.error();
        *axes[axis] = std::move(expr).value();
      }
      return dims;
    }
  }
  auto expr = plan_detail::parse_field(where, base, text);
  if (!expr) return expr.error();
  dims.x = std::move(expr).value();
  return dims;
}

constexpr std::string_view kLaunchUsage = "// @launch kernel<<<grid, block>>>(args)";

core::Result<Launch> parse_launch(const std::string& where, int line, std::string_view body) {
  Launch launch;
  launch.where = where;
  launch.line = line;
  std::string_view text = trim(body);
  if (text.substr(0, 2) == "if" && (text.size() == 2 || !is_ident_char(text[2]))) {
    text = trim_front(text.substr(2));
    if (text.empty() || text[0] != '(') {
      return invalid(where +
                     ": expected '(' after 'if'; write // @launch if (CONDITION) "
                     "kernel<<<grid, block>>>(args)");
    }
    const std::size_t close = match_paren(text, 0);
    if (close == std::string_view::npos) {
      return invalid(where + ": the if condition has no closing ')'");
    }
    auto condition = plan_detail::parse_field(where, "if condition", text.substr(1, close - 1));
    if (!condition) return condition.error();
    launch.condition = std::move(condition).value();
    text = trim_front(text.substr(close + 1));
  }

  auto name = parse_kernel_name(where, text, kLaunchUsage);
  if (!name) return name.error();
  launch.kernel = name->kernel;
  launch.template_args = name->template_args;
  auto expression = plan_detail::name_expression(where, launch.kernel, launch.template_args);
  if (!expression) return expression.error();
  launch.name_expression = *expression;
  text = name->rest;

  if (text.substr(0, 3) != "<<<") {
    return invalid(where + ": expected '<<<' after kernel name '" + launch.name_expression +
                   "'; write // @launch " + launch.name_expression + "<<<grid, block>>>(args)");
  }
  text.remove_prefix(3);
  std::size_t config_end = std::string_view::npos;
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')') --depth;
    if (depth == 0 && text.substr(i, 3) == ">>>") {
      config_end = i;
      break;
    }
  }
  if (config_end == std::string_view::npos) {
    return invalid(where + ": expected '>>>' to close the launch configuration opened by '<<<'");
  }
  const auto config = split_top(text.substr(0, config_end));
  if (config.size() < 2) {
    return invalid(where +
                   ": the launch configuration needs a grid and a block size: "
                   "<<<grid, block[, shared_memory_bytes]>>>");
  }
  if (config.size() > 3) {
    return invalid(where +
                   ": the launch configuration takes at most 3 values, "
                   "<<<grid, block, shared_memory_bytes>>>; there is no stream argument: "
                   "launches run in order on the runner's stream");
  }
  auto grid = parse_dims(where, "grid", config[0]);
  if (!grid) return grid.error();
  launch.grid = std::move(grid).value();
  auto block = parse_dims(where, "block", config[1]);
  if (!block) return block.error();
  launch.block = std::move(block).value();
  if (config.size() == 3) {
    auto smem = plan_detail::parse_field(where, "shared memory size", config[2]);
    if (!smem) return smem.error();
    launch.smem_bytes = std::move(smem).value();
  }

  text = trim_front(text.substr(config_end + 3));
  if (text.empty() || text[0] != '(') {
    return invalid(where + ": expected '(' with the kernel arguments after '>>>', e.g. " +
                   launch.name_expression + "<<<grid, block>>>(out, input)");
  }
  const std::size_t args_end = match_paren(text, 0);
  if (args_end == std::string_view::npos) {
    return invalid(where +
                   ": the argument list has no closing ')' (a directive may wrap onto the // "
                   "comment lines right below it)");
  }
  const std::string_view tail = trim(text.substr(args_end + 1));
  if (!tail.empty() && tail != ";") {
    return invalid(where + ": unexpected text after the argument list: '" + shorten(tail) + "'");
  }
  const std::string_view args = text.substr(1, args_end - 1);
  if (!trim(args).empty()) {
    const auto items = split_top(args);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string_view arg = trim(items[i]);
      if (arg.empty()) return invalid(where + ": argument " + std::to_string(i + 1) + " is empty");
      if (!plan_detail::is_identifier(arg)) {
        return invalid(where + ": argument " + std::to_string(i + 1) + " '" + shorten(arg) +
                       "' is not a name; pass a tensor, scalar, shape symbol or workspace by name "
                       "and compute derived values inside the kernel");
      }
      launch.args.push_back(LaunchArg{std::string(arg), ArgKind::kTensor, 0});
    }
  }
  return launch;
}

core::Result<Workspace> parse_workspace(const std::string& where, int line, std::string_view body) {
  Workspace workspace;
  workspace.where = where;
  workspace.line = line;
  std::string_view text = trim(body);
  const std::size_t length = word_length(text);
  if (length == 0 || !plan_detail::is_identifier(text.substr(0, length))) {
    return invalid(where +
                   ": expected a workspace name; write // @workspace NAME TYPE[COUNT], "
                   "e.g. // @workspace partials float[num_tokens * 64]");
  }
  workspace.name = std::string(text.substr(0, length));
  text = trim(text.substr(length));
  const std::size_t open = text.find('[');
  const std::string type = open == std::string_view::npos
                               ? std::string()
                               : plan_detail::normalize_spaces(text.substr(0, open));
  if (type.empty()) {
    return invalid(where + ": workspace '" + workspace.name +
                   "' needs an element type and a count: // @workspace " + workspace.name +
                   " float[COUNT]");
  }
  if (text.back() != ']') {
    return invalid(where + ": expected ']' at the end of the count of workspace '" +
                   workspace.name + "'");
  }
  const auto bytes = plan_detail::element_bytes(type);
  if (!bytes) return plan_detail::unknown_element_type(where, type);
  workspace.type = type;
  workspace.element_bytes = *bytes;
  auto count = plan_detail::parse_field(where, "workspace '" + workspace.name + "' count",
                                        text.substr(open + 1, text.size() - open - 2));
  if (!count) return count.error();
  workspace.count = std::move(count).value();
  return workspace;
}

constexpr std::string_view kClusterUsage = "// @cluster kernel (x, y, z)";

core::Result<Cluster> parse_cluster(const std::string& where, int line, std::string_view body) {
  Cluster cluster;
  cluster.where = where;
  cluster.line = line;
  auto name = parse_kernel_name(where, trim(body), kClusterUsage);
  if (!name) return name.error();
  cluster.kernel = name->kernel;
  if (!name->template_args.empty()) {
    auto expression = plan_detail::name_expression(where, name->kernel, name->template_args);
    if (!expression) return expression.error();
    cluster.kernel = *expression;
  }
  const std::string_view text = trim(name->rest);
  if (text.empty() || text[0] != '(' || match_paren(text, 0) != text.size() - 1) {
    return invalid(where + ": expected the cluster shape in parentheses after '" + cluster.kernel +
                   "'; write // @cluster " + cluster.kernel + " (2, 1, 1)");
  }
  const auto items = split_top(text.substr(1, text.size() - 2));
  if (items.size() > 3 || trim(items[0]).empty()) {
    const std::size_t got = trim(items[0]).empty() && items.size() == 1 ? 0 : items.size();
    return invalid(where + ": a cluster shape takes 1 to 3 values (x, y, z), got " +
                   std::to_string(got));
  }
  cluster.dims.is_dim3 = true;
  cluster.dims.y = core::Expr::constant(1);
  cluster.dims.z = core::Expr::constant(1);
  core::Expr* axes[] = {&cluster.dims.x, &cluster.dims.y, &cluster.dims.z};
  for (std::size_t axis = 0; axis < items.size(); ++axis) {
    auto expr = plan_detail::parse_field(where, std::string("cluster ") + "xyz"[axis], items[axis]);
    if (!expr) return expr.error();
    *axes[axis] = std::move(expr).value();
  }
  return cluster;
}

constexpr std::string_view kTensorMapUsage =
    "// @tensormap NAME TENSOR dims(d0, d1, ...) box(b0, b1, ...) [strides(s1, ...)] "
    "[swizzle(128)]";

// The expressions of one `word(e, e, ...)` clause of a @tensormap directive.
core::Result<std::vector<core::Expr>> parse_list(const std::string& where, const std::string& label,
                                                 std::string_view items_text) {
  std::vector<core::Expr> out;
  const auto items = split_top(items_text);
  if (items.size() > TensorMap::kMaxRank) {
    return invalid(where + ": " + label + " has " + std::to_string(items.size()) +
                   " values; a tensor map has at most " + std::to_string(TensorMap::kMaxRank) +
                   " dimensions");
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (trim(items[i]).empty()) {
      return invalid(where + ": " + label + " value " + std::to_string(i + 1) + " is empty");
    }
    auto expr = plan_detail::parse_field(where, label + "[" + std::to_string(i) + "]", items[i]);
    if (!expr) return expr.error();
    out.push_back(std::move(expr).value());
  }
  return out;
}

core::Result<TensorMap> parse_tensormap(const std::string& where, int line, std::string_view body) {
  TensorMap map;
  map.where = where;
  map.line = line;
  std::string_view text = trim(body);
  const auto take_name = [&](std::string_view what) -> core::Result<std::string> {
    const std::size_t length = word_length(text);
    const std::string_view word = text.substr(0, length);
    if (!plan_detail::is_identifier(word)) {
      return invalid(where + ": expected " + std::string(what) + "; write " +
                     std::string(kTensorMapUsage));
    }
    text = trim_front(text.substr(length));
    return std::string(word);
  };
  auto name = take_name("the tensor map's name");
  if (!name) return name.error();
  map.name = *name;
  auto tensor = take_name("the name of the task tensor it views after '" + map.name + "'");
  if (!tensor) return tensor.error();
  map.tensor_name = *tensor;
  bool has_dims = false, has_box = false, has_strides = false, has_swizzle = false;
  while (!text.empty()) {
    const std::size_t length = word_length(text);
    const std::string word(text.substr(0, length));
    const std::string_view rest = trim_front(text.substr(length));
    const bool known = word == "dims" || word == "box" || word == "strides" || word == "swizzle";
    if (!known || rest.empty() || rest[0] != '(') {
      std::string message = where + ": unexpected '" + shorten(text) + "' in tensor map '" +
                            map.name +
                            "'; after the tensor come dims(...), box(...) and "
                            "optionally strides(...) and swizzle(...)";
      if (!known && !word.empty()) {
        if (const auto hint = plan_detail::closest(word, {"dims", "box", "strides", "swizzle"})) {
          message += "; did you mean '" + *hint + "'?";
        }
      }
      return invalid(message);
    }
    const std::size_t close = match_paren(rest, 0);
    if (close == std::string_view::npos) {
      return invalid(where + ": " + word + "( of tensor map '" + map.name + "' has no closing ')'");
    }
    bool& seen = word == "dims"      ? has_dims
                 : word == "box"     ? has_box
                 : word == "strides" ? has_strides
                                     : has_swizzle;
    if (seen) return invalid(where + ": tensor map '" + map.name + "' gives " + word + " twice");
    seen = true;
    const std::string_view inside = rest.substr(1, close - 1);
    if (word == "swizzle") {
      const std::string value(trim(inside));
      if (value != "0" && value != "32" && value != "64" && value != "128") {
        return invalid(where + ": swizzle of tensor map '" + map.name + "' is '" + shorten(value) +
                       "'; it is 0 (none), 32, 64 or 128 (bytes)");
      }
      map.swizzle = static_cast<std::uint32_t>(std::stoul(value));
    } else {
      auto list = parse_list(where, "tensor map '" + map.name + "' " + word, inside);
      if (!list) return list.error();
      (word == "dims" ? map.dims : word == "box" ? map.box : map.strides) = std::move(list).value();
    }
    text = trim_front(rest.substr(close + 1));
  }
  if (!has_dims || !has_box) {
    return invalid(where + ": tensor map '" + map.name + "' needs dims(...) and box(...); write " +
                   std::string(kTensorMapUsage));
  }
  return map;
}

const std::vector<std::string> kDirectiveNames = {"launch", "workspace", "cluster", "tensormap"};

// The directive's name (after '@') and the text after it.
std::pair<std::string_view, std::string_view> split_directive(std::string_view text) {
  const std::size_t length = 1 + word_length(text.substr(1));
  return {text.substr(1, length - 1), text.substr(length)};
}

}  // namespace

core::Result<LaunchPlan> parse_launch_plan(std::string_view source, const PlanContext& context) {
  auto directives = plan_detail::scan_directives(source, context.limits);
  if (!directives) return directives.error();
  LaunchPlan plan;
  for (const auto& directive : *directives) {
    const std::string where = "line " + std::to_string(directive.line);
    const auto [name, body] = split_directive(directive.text);
    if (name.empty()) {
      return invalid(where +
                     ": '@' at the start of a // comment begins a directive; expected "
                     "@launch, @workspace, @cluster or @tensormap");
    }
    if (name == "launch") {
      auto launch = parse_launch(where, directive.line, body);
      if (!launch) return launch.error();
      plan.launches.push_back(std::move(launch).value());
    } else if (name == "workspace") {
      auto workspace = parse_workspace(where, directive.line, body);
      if (!workspace) return workspace.error();
      plan.workspaces.push_back(std::move(workspace).value());
    } else if (name == "cluster") {
      auto cluster = parse_cluster(where, directive.line, body);
      if (!cluster) return cluster.error();
      plan.clusters.push_back(std::move(cluster).value());
    } else if (name == "tensormap") {
      auto map = parse_tensormap(where, directive.line, body);
      if (!map) return map.error();
      plan.tensor_maps.push_back(std::move(map).value());
    } else {
      const std::string message = where + ": unknown directive '@" + std::string(name) + "'";
      if (const auto suggestion = plan_detail::closest(name, kDirectiveNames)) {
        return invalid(message + "; did you mean '@" + *suggestion + "'?");
      }
      return invalid(message +
                     "; the directives are @launch, @workspace, @cluster and @tensormap (start "
                     "other comments with something other than '@')");
    }
  }
  return plan_detail::finish_plan(std::move(plan), context, true);
}

core::Result<LaunchPlan> parse_action_plan(std::string_view source, const core::Value& plan,
                                           const PlanContext& context) {
  if (plan.is_null()) return parse_launch_plan(source, context);
  auto directives = plan_detail::scan_directives(source, context.limits);
  if (!directives) return directives.error();
  for (const auto& directive : *directives) {
    const auto name = split_directive(directive.text).first;
    if (std::find(kDirectiveNames.begin(), kDirectiveNames.end(), name) != kDirectiveNames.end()) {
      return invalid("line " + std::to_string(directive.line) +
                     ": the action has both a "
                     "structured plan and a @" +
                     std::string(name) +
                     " directive; send the plan in one place: remove the directives or the "
                     "'plan' field");
    }
  }
  return parse_structured_plan(plan, context);
}

}  // namespace crucible::action
