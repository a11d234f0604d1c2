// task.toml parsing and validation; reports every problem with its file and key.
#include "tasks/manifest.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "core/expr.hpp"
#include "core/text_file.hpp"

namespace crucible::tasks {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kMaxTensorBytes = std::int64_t{16} << 30;  // one tensor, one case

// Collects "<file>: <key>: <message>" lines for one manifest.
class Problems {
 public:
  Problems(std::string file, std::vector<std::string>& errors)
      : file_(std::move(file)), errors_(errors) {}
  void add(std::string_view key, std::string_view message) {
    errors_.push_back(file_ + ": " + std::string(key) + ": " + std::string(message));
    ++count_;
  }
  int count() const { return count_; }

 private:
  std::string file_;
  std::vector<std::string>& errors_;
  int count_ = 0;
};

std::string join(const std::vector<std::string>& items, std::string_view separator = ", ") {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::string child(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return std::string(parent) + "." + std::string(key);
}

std::string element(std::string_view array, std::size_t index) {
  return std::string(array) + "[" + std::to_string(index) + "]";
}

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

bool is_identifier(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  const auto head = static_cast<unsigned char>(name[0]);
  if (!(std::isalpha(head) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Lower-case path components of ids and case names: [a-z0-9_]+.
bool is_slug(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string dtype_list() {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(core::DType::kBool); ++i) {
    names.emplace_back(core::dtype_name(static_cast<core::DType>(i)));
  }
  return join(names);
}

// Reading typed values out of a table, reporting wrong types and missing keys.
class Reader {
 public:
  explicit Reader(Problems& problems) : problems_(problems) {}

  void check_keys(const toml::table& table, std::string_view path,
                  std::initializer_list<std::string_view> known) {
    for (auto&& [key, node] : table) {
      (void)node;
      if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
      std::vector<std::string> names(known.begin(), known.end());
      problems_.add(child(path, key.str()), "unknown key (known: " + join(names) + ")");
    }
  }

  std::optional<std::string> string(const toml::table& table, std::string_view key,
                                    std::string_view path, bool required) {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (required) problems_.add(child(path, key), "missing (a string is required)");
      return std::nullopt;
    }
    if (const auto* value = node->as_string()) return value->get();
    problems_.add(child(path, key), "must be a string, got " + type_name(*node));
    return std::nullopt;
  }

  std::optional<double> number(const toml::table& table, std::string_view key,
                               std::string_view path, bool required) {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (required) problems_.add(child(path, key), "missing (a number is required)");
      return std::nullopt;
    }
    if (const auto* value = node->as_floating_point()) return value->get();
    if (const auto* value = node->as_integer()) return static_cast<double>(value->get());
    problems_.add(child(path, key), "must be a number, got " + type_name(*node));
    return std::nullopt;
  }

  std::optional<std::int64_t> integer(const toml::table& table, std::string_view key,
                                      std::string_view path, bool required) {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (required) problems_.add(child(path, key), "missing (an integer is required)");
      return std::nullopt;
    }
    if (const auto* value = node->as_integer()) return value->get();
    problems_.add(child(path, key), "must be an integer, got " + type_name(*node));
    return std::nullopt;
  }

  const toml::table* table(const toml::table& parent, std::string_view key, std::string_view path,
                           bool required) {
    const toml::node* node = parent.get(key);
    if (node == nullptr) {
      if (required) problems_.add(child(path, key), "missing (a table is required)");
      return nullptr;
    }
    if (const auto* value = node->as_table()) return value;
    problems_.add(child(path, key), "must be a table, got " + type_name(*node));
    return nullptr;
  }

  const toml::array* array(const toml::table& parent, std::string_view key, std::string_view path,
                           bool required) {
    const toml::node* node = parent.get(key);
    if (node == nullptr) {
      if (required) problems_.add(child(path, key), "missing (an array is required)");
      return nullptr;
    }
    if (const auto* value = node->as_array()) return value;
    problems_.add(child(path, key), "must be an array, got " + type_name(*node));
    return nullptr;
  }

  // Elements of an array of tables ([[name]]); a non-table element is reported and skipped.
  std::vector<std::pair<std::size_t, const toml::table*>> tables(const toml::table& parent,
                                                                 std::string_view key,
                                                                 bool required) {
    std::vector<std::pair<std::size_t, const toml::table*>> out;
    const toml::array* items = array(parent, key, "", required);
    if (items == nullptr) return out;
    for (std::size_t i = 0; i < items->size(); ++i) {
      const toml::node& node = *items->get(i);
      if (const auto* entry = node.as_table()) {
        out.emplace_back(i, entry);
      } else {
        problems_.add(element(key, i), "must be a table, got " + type_name(node));
      }
    }
    return out;
  }

  std::optional<core::DType> dtype(const toml::table& table, std::string_view path) {
    const auto name = string(table, "dtype", path, true);
    if (!name) return std::nullopt;
    const auto dtype = core::dtype_from_name(*name);
    if (!dtype) {
      problems_.add(child(path, "dtype"),
                    "unknown dtype " + in_quotes(*name) + " (known: " + dtype_list() + ")");
    }
    return dtype;
  }

 private:
  Problems& problems_;
};

bool is_integer_dtype(core::DType dtype) {
  return dtype == core::DType::kI8 || dtype == core::DType::kU8 || dtype == core::DType::kI16 ||
         dtype == core::DType::kI32 || dtype == core::DType::kI64 || dtype == core::DType::kBool;
}

bool is_fp8(core::DType dtype) {
  return dtype == core::DType::kFP8E4M3 || dtype == core::DType::kFP8E5M2;
}

// Everything the parsing functions share.
struct Context {
  Problems& problems;
  Reader& read;
  fs::path home;
  fs::path task_dir;
};

std::string known_generator_list() {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(GeneratorKind::kList); ++i) {
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
  if (*kind != GeneratorKind::kCaptured && is_fp8(dtype)) {
    ctx.problems.add(child(path, "generator"),
                     "no host generator for " + dtype_text + " values yet; use \"captured\"");
  }
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

void parse_symbols(Context& ctx, const toml::table& root, Task& task) {
  std::set<std::string> seen;
  for (const auto& [i, entry] : ctx.read.tables(root, "symbols", true)) {
    const std::string path = element("symbols", i);
    ctx.read.check_keys(*entry, path, {"name", "description", "dtype"});
    SymbolSpec symbol;
    symbol.name = ctx.read.string(*entry, "name", path, true).value_or("");
    symbol.description = ctx.read.string(*entry, "description", path, true).value_or("");
    if (entry->contains("dtype")) {
      const auto dtype = ctx.read.dtype(*entry, path);
      if (dtype && *dtype != core::DType::kI32 && *dtype != core::DType::kI64) {
        ctx.problems.add(child(path, "dtype"), "a shape symbol is passed as i32 or i64, not " +
                                                   std::string(core::dtype_name(*dtype)));
      }
      if (dtype) symbol.dtype = *dtype;
    }
    if (symbol.name.empty()) continue;
    if (!is_identifier(symbol.name)) {
      ctx.problems.add(child(path, "name"),
                       in_quotes(symbol.name) + " is not an identifier ([A-Za-z_][A-Za-z0-9_]*)");
      continue;
    }
    if (!seen.insert(symbol.name).second) {
      ctx.problems.add(child(path, "name"), "duplicate symbol " + in_quotes(symbol.name));
      continue;
    }
    task.symbols.push_back(symbol.name);
    task.symbol_specs.push_back(std::move(symbol));
  }
}

std::optional<Tolerance> parse_tolerance(Context& ctx, const toml::node& node,
                                         const std::string& path) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    ctx.problems.add(path, "must be a table { atol = ..., rtol = ... }, got " + type_name(node));
    return std::nullopt;
  }
  ctx.read.check_keys(*table, path, {"atol", "rtol"});
  const auto atol = ctx.read.number(*table, "atol", path, true);
  const auto rtol = ctx.read.number(*table, "rtol", path, true);
  if (!atol || !rtol) return std::nullopt;
  bool good = true;
  for (const auto& [key, value] : {std::pair{"atol", *atol}, std::pair{"rtol", *rtol}}) {
    if (!(value >= 0.0) || !std::isfinite(value)) {
      ctx.problems.add(child(path, key), "must be finite and >= 0, got " + number_text(value));
      good = false;
    }
  }
  if (!good) return std::nullopt;
  return Tolerance{*atol, *rtol};
}

void parse_tensors(Context& ctx, const toml::table& root, Task& task,
                   const std::set<std::string>& names_in_use) {
  std::set<std::string> seen;
  const std::set<std::string> symbols(task.symbols.begin(), task.symbols.end());
  for (const auto& [i, entry] : ctx.read.tables(root, "tensors", true)) {
    const std::string path = element("tensors", i);
    const int before = ctx.problems.count();
    ctx.read.check_keys(*entry, path,
                        {"name", "dtype", "shape", "role", "description", "values", "tolerance"});
    TensorSpec tensor;
    tensor.name = ctx.read.string(*entry, "name", path, true).value_or("");
    tensor.description = ctx.read.string(*entry, "description", path, false).value_or("");
    const auto dtype = ctx.read.dtype(*entry, path);
    const auto role_text = ctx.read.string(*entry, "role", path, true);
    std::optional<Role> role;
    if (role_text) {
      role = role_from_name(*role_text);
      if (!role) {
        ctx.problems.add(child(path, "role"),
                         "unknown role " + in_quotes(*role_text) + " (known: in, out, inout)");
      }
    }
    if (!tensor.name.empty()) {
      if (!is_identifier(tensor.name)) {
        ctx.problems.add(child(path, "name"),
                         in_quotes(tensor.name) + " is not an identifier ([A-Za-z_][A-Za-z0-9_]*)");
      } else if (!seen.insert(tensor.name).second) {
        ctx.problems.add(child(path, "name"), "duplicate tensor " + in_quotes(tensor.name));
      } else if (names_in_use.count(tensor.name) != 0) {
        ctx.problems.add(child(path, "name"),
                         in_quotes(tensor.name) + " is already the name of a shape symbol");
      }
    }
    if (const auto* shape = ctx.read.array(*entry, "shape", path, true)) {
      if (shape->empty())
        ctx.problems.add(child(path, "shape"), "must have at least one dimension");
      for (std::size_t d = 0; d < shape->size(); ++d) {
        const toml::node& dim = *shape->get(d);
        const std::string dim_path = element(child(path, "shape"), d);
        if (const auto* literal = dim.as_integer()) {
          if (literal->get() <= 0) {
            ctx.problems.add(dim_path,
                             "dimension must be positive, got " + std::to_string(literal->get()));
          }
          tensor.shape.push_back(std::to_string(literal->get()));
        } else if (const auto* symbol = dim.as_string()) {
          if (symbols.count(symbol->get()) == 0) {
            ctx.problems.add(dim_path, "undeclared symbol " + in_quotes(symbol->get()) +
                                           " (declared: " + join(task.symbols) + ")");
          }
          tensor.shape.push_back(symbol->get());
        } else {
          ctx.problems.add(dim_path,
                           "must be a symbol name or a positive integer, got " + type_name(dim));
        }
      }
    }
    if (dtype && role) {
      tensor.dtype = *dtype;
      tensor.role = *role;
      const toml::node* values = entry->get("values");
      if (is_input(*role)) {
        if (values == nullptr) {
          ctx.problems.add(child(path, "values"),
                           "missing: an input tensor needs a value generator, e.g. "
                           "{ generator = \"randn\", mean = 0.0, std = 1.0 }");
        } else {
          tensor.values = parse_generator(ctx, *values, child(path, "values"), *dtype);
        }
      } else if (values != nullptr) {
        ctx.problems.add(child(path, "values"),
                         "an output tensor has no input values (the runner poisons it)");
      }
      if (const toml::node* tolerance = entry->get("tolerance")) {
        if (!is_output(*role)) {
          ctx.problems.add(child(path, "tolerance"), "only outputs (out, inout) are compared");
        } else {
          tensor.tolerance = parse_tolerance(ctx, *tolerance, child(path, "tolerance"));
        }
      }
    }
    if (ctx.problems.count() == before) task.tensors.push_back(std::move(tensor));
  }
}

void parse_tolerance_defaults(Context& ctx, const toml::table& root, Task& task) {
  const toml::table* table = ctx.read.table(root, "tolerance", "", false);
  if (table == nullptr) return;
  for (auto&& [key, node] : *table) {
    const std::string path = child("tolerance", key.str());
    if (!core::dtype_from_name(key.str())) {
      ctx.problems.add(path,
                       "unknown dtype " + in_quotes(key.str()) + " (known: " + dtype_list() + ")");
      continue;
    }
    if (auto tolerance = parse_tolerance(ctx, node, path)) {
      task.tolerance_defaults[std::string(key.str())] = *tolerance;
    }
  }
}

// Every output tensor gets its own tolerance or the default for its dtype.
void resolve_tolerances(Context& ctx, const toml::table& root, Task& task) {
  const auto* tensors = root.get_as<toml::array>("tensors");
  for (auto& tensor : task.tensors) {
    if (!is_output(tensor.role) || tensor.tolerance) continue;
    const std::string dtype(core::dtype_name(tensor.dtype));
    const auto it = task.tolerance_defaults.find(dtype);
    if (it != task.tolerance_defaults.end()) {
      tensor.tolerance = it->second;
      continue;
    }
    std::size_t index = 0;
    if (tensors != nullptr) {
      for (std::size_t i = 0; i < tensors->size(); ++i) {
        const auto* entry = tensors->get(i)->as_table();
        const auto* name = entry == nullptr ? nullptr : entry->get_as<std::string>("name");
        if (name != nullptr && name->get() == tensor.name) index = i;
      }
    }
    ctx.problems.add(child(element("tensors", index), "tolerance"),
                     "output " + in_quotes(tensor.name) +
                         " has no tolerance and [tolerance] has no " + dtype + " default");
  }
}

void parse_scalars(Context& ctx, const toml::table& root, Task& task,
                   const std::set<std::string>& names_in_use) {
  std::set<std::string> seen;
  for (const auto& [i, entry] : ctx.read.tables(root, "scalars", false)) {
    const std::string path = element("scalars", i);
    const int before = ctx.problems.count();
    ctx.read.check_keys(*entry, path, {"name", "dtype", "description", "default"});
    ScalarSpec scalar;
    scalar.name = ctx.read.string(*entry, "name", path, true).value_or("");
    scalar.description = ctx.read.string(*entry, "description", path, false).value_or("");
    const auto dtype = ctx.read.dtype(*entry, path);
    scalar.default_value = ctx.read.number(*entry, "default", path, false);
    if (!scalar.name.empty()) {
      if (!is_identifier(scalar.name)) {
        ctx.problems.add(child(path, "name"),
                         in_quotes(scalar.name) + " is not an identifier ([A-Za-z_][A-Za-z0-9_]*)");
      } else if (!seen.insert(scalar.name).second) {
        ctx.problems.add(child(path, "name"), "duplicate scalar " + in_quotes(scalar.name));
      } else if (names_in_use.count(scalar.name) != 0) {
        ctx.problems.add(child(path, "name"),
                         in_quotes(scalar.name) + " is already the name of a symbol or tensor");
      }
    }
    if (dtype) {
      scalar.dtype = *dtype;
      if (*dtype != core::DType::kF32 && *dtype != core::DType::kF64 &&
          *dtype != core::DType::kI32 && *dtype != core::DType::kI64) {
        ctx.problems.add(child(path, "dtype"), "a scalar is f32, f64, i32 or i64, not " +
                                                   std::string(core::dtype_name(*dtype)));
      } else if (scalar.default_value && is_integer_dtype(*dtype) &&
                 std::trunc(*scalar.default_value) != *scalar.default_value) {
        ctx.problems.add(child(path, "default"),
                         "must be an integer for " + std::string(core::dtype_name(*dtype)));
      }
    }
    if (ctx.problems.count() == before) task.scalars.push_back(std::move(scalar));
  }
}

std::optional<std::uint64_t> parse_seed(Context& ctx, const toml::table& entry,
                                        const std::string& path) {
  const toml::node* node = entry.get("seed");
  if (node == nullptr) return std::nullopt;
  if (const auto* text = node->as_string(); text != nullptr && text->get() == "episode") {
    return std::nullopt;
  }
  if (const auto* value = node->as_integer(); value != nullptr && value->get() >= 0) {
    return static_cast<std::uint64_t>(value->get());
  }
  ctx.problems.add(child(path, "seed"),
                   "must be a non-negative integer or \"episode\", got " + type_name(*node));
  return std::nullopt;
}

void parse_cases(Context& ctx, const toml::table& root, Task& task, std::string_view array,
                 bool hidden, std::map<std::string, std::string>& case_keys) {
  for (const auto& [i, entry] : ctx.read.tables(root, array, false)) {
    const std::string path = element(array, i);
    const int before = ctx.problems.count();
    ctx.read.check_keys(*entry, path,
                        {"name", "note", "symbols", "weight", "seed", "scalars", "values"});
    Case c;
    c.hidden = hidden;
    c.name = ctx.read.string(*entry, "name", path, true).value_or("");
    c.note = ctx.read.string(*entry, "note", path, false).value_or("");
    if (!c.name.empty()) {
      if (!is_slug(c.name)) {
        ctx.problems.add(child(path, "name"), in_quotes(c.name) + " must match [a-z0-9_]+");
      } else if (const auto [it, fresh] = case_keys.emplace(c.name, path); !fresh) {
        ctx.problems.add(child(path, "name"),
                         "duplicate case name " + in_quotes(c.name) + " (also " + it->second + ")");
      }
    }
    // Weight: visible cases must say how often production makes this call.
    if (const auto weight = ctx.read.number(*entry, "weight", path, !hidden)) {
      c.weight = *weight;
      if (!(c.weight > 0.0) || !std::isfinite(c.weight)) {
        ctx.problems.add(child(path, "weight"), "must be positive, got " + number_text(c.weight));
      }
    }
    c.seed = parse_seed(ctx, *entry, path);

    const std::string symbols_path = child(path, "symbols");
    if (const auto* symbols = ctx.read.table(*entry, "symbols", path, true)) {
      for (auto&& [key, node] : *symbols) {
        const std::string key_path = child(symbols_path, key.str());
        if (std::find(task.symbols.begin(), task.symbols.end(), key.str()) == task.symbols.end()) {
          ctx.problems.add(key_path, "unknown symbol (declared: " + join(task.symbols) + ")");
          continue;
        }
        const auto* value = node.as_integer();
        if (value == nullptr) {
          ctx.problems.add(key_path, "must be an integer, got " + type_name(node));
        } else if (value->get() <= 0) {
          ctx.problems.add(key_path,
                           "dimension must be positive, got " + std::to_string(value->get()));
        } else {
          c.symbols[std::string(key.str())] = value->get();
        }
      }
      for (const auto& symbol : task.symbols) {
        if (!symbols->contains(symbol)) {
          ctx.problems.add(symbols_path, "missing value for symbol " + in_quotes(symbol));
        }
      }
    }

    const toml::table* scalars = ctx.read.table(*entry, "scalars", path, false);
    if (scalars != nullptr) {
      for (auto&& [key, node] : *scalars) {
        const std::string key_path = child(child(path, "scalars"), key.str());
        const ScalarSpec* spec = task.find_scalar(key.str());
        if (spec == nullptr) {
          ctx.problems.add(key_path, "unknown scalar");
          continue;
        }
        double value = 0.0;
        if (const auto* f = node.as_floating_point()) {
          value = f->get();
        } else if (const auto* n = node.as_integer()) {
          value = static_cast<double>(n->get());
        } else {
          ctx.problems.add(key_path, "must be a number, got " + type_name(node));
          continue;
        }
        if (is_integer_dtype(spec->dtype) && std::trunc(value) != value) {
          ctx.problems.add(key_path,
                           "must be an integer for " + std::string(core::dtype_name(spec->dtype)));
          continue;
        }
        c.scalars[spec->name] = value;
      }
    }
    for (const auto& scalar : task.scalars) {
      if (c.scalars.count(scalar.name) != 0) continue;
      if (scalar.default_value) {
        c.scalars[scalar.name] = *scalar.default_value;
      } else {
        ctx.problems.add(
            child(path, "scalars"),
            "missing value for scalar " + in_quotes(scalar.name) + " (it has no default)");
      }
    }

    for (const auto& tensor : task.tensors) {
      if (tensor.values) c.values[tensor.name] = *tensor.values;
    }
    if (const toml::table* values = ctx.read.table(*entry, "values", path, false)) {
      for (auto&& [key, node] : *values) {
        const std::string key_path = child(child(path, "values"), key.str());
        const TensorSpec* tensor = task.find_tensor(key.str());
        if (tensor == nullptr) {
          ctx.problems.add(key_path, "unknown tensor");
        } else if (!is_input(tensor->role)) {
          ctx.problems.add(key_path,
                           "output tensor " + in_quotes(tensor->name) + " takes no values");
        } else if (auto spec = parse_generator(ctx, node, key_path, tensor->dtype)) {
          c.values[tensor->name] = std::move(*spec);
        }
      }
    }

    // Sizes: every tensor must have a sane byte size for this case.
    if (ctx.problems.count() == before) {
      for (const auto& tensor : task.tensors) {
        const auto count = element_count(tensor, c);
        if (!count ||
            *count > kMaxTensorBytes / static_cast<std::int64_t>(core::dtype_size(tensor.dtype))) {
          ctx.problems.add(symbols_path, "tensor " + in_quotes(tensor.name) +
                                             " is larger than 16 GiB in this case");
        }
      }
    }
    if (ctx.problems.count() == before) task.cases.push_back(std::move(c));
  }
}

std::optional<core::Expr> parse_formula(Context& ctx, const toml::table& roofline,
                                        std::string_view key, const Task& task) {
  const std::string path = child("roofline", key);
  const auto text = ctx.read.string(roofline, key, "roofline", true);
  if (!text) return std::nullopt;
  auto expr = core::parse_expr(*text);
  if (!expr) {
    ctx.problems.add(path, "cannot parse " + in_quotes(*text) + ": " + expr.error().message);
    return std::nullopt;
  }
  bool good = true;
  for (const auto& symbol : expr->symbols()) {
    if (std::find(task.symbols.begin(), task.symbols.end(), symbol) == task.symbols.end()) {
      ctx.problems.add(
          path, "unknown symbol " + in_quotes(symbol) + " (declared: " + join(task.symbols) + ")");
      good = false;
    }
  }
  if (!good) return std::nullopt;
  return *expr;
}

void parse_roofline(Context& ctx, const toml::table& root, Task& task) {
  const toml::table* roofline = ctx.read.table(root, "roofline", "", true);
  if (roofline == nullptr) return;
  ctx.read.check_keys(*roofline, "roofline", {"bytes", "flops"});
  task.roofline.bytes = ctx.read.string(*roofline, "bytes", "roofline", false).value_or("");
  task.roofline.flops = ctx.read.string(*roofline, "flops", "roofline", false).value_or("");
  const auto bytes = parse_formula(ctx, *roofline, "bytes", task);
  const auto flops = parse_formula(ctx, *roofline, "flops", task);
  if (bytes) task.roofline.bytes_expr = *bytes;
  if (flops) task.roofline.flops_expr = *flops;
  // Each formula must give a sensible value for every case.
  for (const auto& c : task.cases) {
    const std::map<std::string, std::int64_t, std::less<>> symbols(c.symbols.begin(),
                                                                   c.symbols.end());
    for (const auto& [key, expr, minimum] :
         {std::tuple{"bytes", bytes, 1}, std::tuple{"flops", flops, 0}}) {
      if (!expr) continue;
      const auto value = expr->eval(symbols);
      if (!value) {
        ctx.problems.add(child("roofline", key),
                         "case " + in_quotes(c.name) + ": " + value.error().message);
      } else if (*value < minimum) {
        ctx.problems.add(child("roofline", key), "case " + in_quotes(c.name) + ": evaluates to " +
                                                     std::to_string(*value) +
                                                     ", expected >= " + std::to_string(minimum));
      }
    }
  }
}

// A `list` generator feeding a timed (visible) case must repeat whole: the runner's timing pools
// read windows of the stream at rotating offsets, and only a tensor whose length is a multiple
// of the list's holds the same multiset of values (the same work) in every window.
void check_list_lengths(Context& ctx, const Task& task) {
  for (const auto& c : task.cases) {
    if (c.hidden) continue;
    for (const auto& tensor : task.tensors) {
      const auto it = c.values.find(tensor.name);
      if (it == c.values.end() || it->second.kind != GeneratorKind::kList) continue;
      const auto count = element_count(tensor, c);
      const auto length = static_cast<std::int64_t>(it->second.list.size());
      if (count && length > 0 && *count % length != 0) {
        ctx.problems.add("visible_cases", "case " + in_quotes(c.name) + ": '" + tensor.name +
                                              "' has " + std::to_string(*count) +
                                              " elements, not a multiple of its list's " +
                                              std::to_string(length) +
                                              " values: timed calls would see different values");
      }
    }
  }
}

// A library reference takes the task's tensors as its own arguments: their roles, ranks, dtypes
// and shared dimensions must be what the library computes.
void check_library_contract(Context& ctx, const Task& task) {
  if (task.reference_library != "cublaslt") return;
  const auto& t = task.tensors;
  const bool roles =
      t.size() == 3 && t[0].role == Role::kOut && t[1].role == Role::kIn && t[2].role == Role::kIn;
  const bool ranks =
      roles && t[0].shape.size() == 2 && t[1].shape.size() == 2 && t[2].shape.size() == 2;
  const bool dtypes = ranks && t[0].dtype == t[1].dtype && t[1].dtype == t[2].dtype &&
                      t[0].dtype == core::DType::kBF16;
  const bool dims = dtypes && t[0].shape[0] == t[1].shape[0] && t[0].shape[1] == t[2].shape[0] &&
                    t[1].shape[1] == t[2].shape[1];
  if (!dims) {
    ctx.problems.add("reference.library",
                     "\"cublaslt\" computes out[M, N] = input[M, K] @ weight[N, K]^T: the task "
                     "needs exactly the tensors (out, input, weight) in that order, roles out, in, "
                     "in, all bf16, with shapes [M, N], [M, K], [N, K]");
  }
}

void parse_reference(Context& ctx, const toml::table& root, Task& task) {
  const toml::table* reference = ctx.read.table(root, "reference", "", true);
  if (reference == nullptr) return;
  ctx.read.check_keys(*reference, "reference", {"source", "library"});
  const auto source = ctx.read.string(*reference, "source", "reference", false);
  const auto library = ctx.read.string(*reference, "library", "reference", false);
  if (library) {
    const auto& known = known_reference_libraries();
    if (std::find(known.begin(), known.end(), *library) == known.end()) {
      ctx.problems.add("reference.library",
                       "unknown library " + in_quotes(*library) + " (known: " + join(known) + ")");
    } else {
      task.reference_library = *library;
    }
  }
  if (!source) {
    ctx.problems.add("reference.source",
                     "missing (a path relative to the repository root, e.g. "
                     "\"kernels/llm/rms_norm.cu\")");
    return;
  }
  const fs::path relative(*source);
  const fs::path normal = relative.lexically_normal();
  if (relative.is_absolute() || normal.empty() || *normal.begin() != "kernels") {
    ctx.problems.add("reference.source",
                     "must be a relative path under kernels/ (e.g. \"kernels/llm/rms_norm.cu\"), "
                     "got " +
                         in_quotes(*source));
    return;
  }
  const fs::path path = ctx.home / normal;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    ctx.problems.add("reference.source",
                     "reference file " + in_quotes(*source) + " does not exist");
    return;
  }
  auto text = core::read_text_file(path);
  if (!text) {
    ctx.problems.add("reference.source", "cannot read " + in_quotes(*source));
    return;
  }
  task.reference_path = normal.generic_string();
  task.reference_source = std::move(text).value();
  if (task.reference_source.find("@launch") == std::string::npos) {
    ctx.problems.add("reference.source",
                     in_quotes(*source) + " has no '// @launch' directive (DESIGN.md section 2)");
  }
}

// [parity]: the library calls the parity benchmark times the reference against, in a Python
// module of the task folder. The functions themselves are checked by tests/tasks/test_parity.py
// (C++ cannot import Python); here: the shape of the table, and that the module exists.
void parse_parity(Context& ctx, const toml::table& root, Task& task) {
  const toml::table* table = ctx.read.table(root, "parity", "", false);
  if (table == nullptr) return;
  const int before = ctx.problems.count();
  ctx.read.check_keys(*table, "parity", {"module", "prepare", "check", "anchors"});
  Parity parity;
  parity.module = ctx.read.string(*table, "module", "parity", true).value_or("");
  if (!parity.module.empty()) {
    const fs::path relative(parity.module);
    const fs::path normal = relative.lexically_normal();
    if (relative.is_absolute() || normal.empty() || *normal.begin() == ".." ||
        normal.extension() != ".py") {
      ctx.problems.add("parity.module",
                       "must be a .py file in the task folder (e.g. \"parity.py\"), got " +
                           in_quotes(parity.module));
    } else {
      parity.module_path = ctx.task_dir / normal;
      std::error_code ec;
      if (!fs::is_regular_file(parity.module_path, ec)) {
        ctx.problems.add(
            "parity.module",
            "parity module " + in_quotes(parity.module) + " does not exist (looked at " +
                parity.module_path.lexically_relative(ctx.home).generic_string() + ")");
      }
    }
  }
  // Function names: Python identifiers (the ASCII ones are the C identifiers).
  const auto function = [&](const toml::table& entry, std::string_view key, std::string_view path,
                            bool required) {
    const auto name = ctx.read.string(entry, key, path, required);
    if (name && !is_identifier(*name)) {
      ctx.problems.add(child(path, key),
                       in_quotes(*name) + " is not a function name ([A-Za-z_][A-Za-z0-9_]*)");
    }
    return name.value_or("");
  };
  parity.prepare = function(*table, "prepare", "parity", false);
  parity.check = function(*table, "check", "parity", false);

  const toml::array* anchors = ctx.read.array(*table, "anchors", "parity", true);
  if (anchors != nullptr && anchors->empty()) {
    ctx.problems.add("parity.anchors", "at least one anchor is required");
  }
  std::map<std::string, std::string> names;  // name -> key of its first anchor
  for (std::size_t i = 0; anchors != nullptr && i < anchors->size(); ++i) {
    const std::string path = element("parity.anchors", i);
    const auto* entry = anchors->get(i)->as_table();
    if (entry == nullptr) {
      ctx.problems.add(path, "must be a table, got " + type_name(*anchors->get(i)));
      continue;
    }
    ctx.read.check_keys(*entry, path, {"name", "description", "kind", "function"});
    ParityAnchor anchor;
    anchor.name = ctx.read.string(*entry, "name", path, true).value_or("");
    anchor.description = ctx.read.string(*entry, "description", path, true).value_or("");
    for (const auto& [key, text] :
         {std::pair{"name", &anchor.name}, std::pair{"description", &anchor.description}}) {
      if (entry->contains(key) && text->empty()) {
        ctx.problems.add(child(path, key), "must not be empty");
      }
    }
    anchor.function = function(*entry, "function", path, true);
    if (const auto kind = ctx.read.string(*entry, "kind", path, true)) {
      if (const auto parsed = parity_kind_from_name(*kind)) {
        anchor.kind = *parsed;
      } else {
        ctx.problems.add(child(path, "kind"),
                         "unknown kind " + in_quotes(*kind) + " (known: composite, kernel)");
      }
    }
    if (!anchor.name.empty() && !names.emplace(anchor.name, path).second) {
      ctx.problems.add(child(path, "name"), "duplicate anchor name " + in_quotes(anchor.name) +
                                                " (also " + names[anchor.name] + ")");
    }
    parity.anchors.push_back(std::move(anchor));
  }
  // The benchmark reports one composite per case (its eager and torch.compile times), and holds
  // every kernel's output to the check before timing it: a mis-specified call must not yield a
  // time.
  const auto count = [&](ParityKind kind) {
    return std::count_if(parity.anchors.begin(), parity.anchors.end(),
                         [kind](const ParityAnchor& a) { return a.kind == kind; });
  };
  if (count(ParityKind::kComposite) > 1) {
    ctx.problems.add("parity.anchors", "at most one anchor of kind \"composite\" (got " +
                                           std::to_string(count(ParityKind::kComposite)) + ")");
  }
  if (count(ParityKind::kKernel) > 0 && parity.check.empty()) {
    ctx.problems.add("parity.check",
                     "missing: a \"kernel\" anchor's output is held to the check's before it is "
                     "timed (a function name)");
  }
  if (ctx.problems.count() == before) task.parity = std::move(parity);
}

}  // namespace

std::optional<Task> load_manifest(const fs::path& manifest, const fs::path& home,
                                  std::vector<std::string>& errors, std::string* declared_id) {
  const fs::path absolute_home = fs::absolute(home).lexically_normal();
  const fs::path absolute_manifest = fs::absolute(manifest).lexically_normal();
  const std::string shown = absolute_manifest.lexically_relative(absolute_home).generic_string();
  Problems problems(shown, errors);
  Reader read(problems);
  Context ctx{problems, read, absolute_home, absolute_manifest.parent_path()};

  toml::table root;
  try {
    root = toml::parse_file(absolute_manifest.string());
  } catch (const toml::parse_error& error) {
    const auto& where = error.source().begin;
    errors.push_back(shown + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                     ": TOML syntax error: " + std::string(error.description()));
    return std::nullopt;
  }

  read.check_keys(
      root, "",
      {"id", "category", "module", "title", "description", "reference", "symbols", "tensors",
       "scalars", "tolerance", "roofline", "visible_cases", "hidden_cases", "checker", "parity"});

  Task task;
  task.manifest_path = absolute_manifest;
  task.id = read.string(root, "id", "", true).value_or("");
  if (declared_id != nullptr) *declared_id = task.id;
  task.category = read.string(root, "category", "", true).value_or("");
  task.module = read.string(root, "module", "", true).value_or("");
  task.title = read.string(root, "title", "", true).value_or("");
  task.description = read.string(root, "description", "", true).value_or("");
  task.checker = read.string(root, "checker", "", false).value_or("");
  if (!task.checker.empty()) {
    const auto& known = known_checkers();
    if (std::find(known.begin(), known.end(), task.checker) == known.end()) {
      problems.add("checker",
                   "unknown checker " + in_quotes(task.checker) + " (known: " + join(known) + ")");
    }
  }

  // The id is the folder path under tasks/, so a task is found where its id says.
  const std::string folder =
      absolute_manifest.parent_path().lexically_relative(absolute_home / "tasks").generic_string();
  if (!task.id.empty()) {
    const auto slash = task.id.find('/');
    const bool well_formed = slash != std::string::npos &&
                             is_slug(std::string_view(task.id).substr(0, slash)) &&
                             is_slug(std::string_view(task.id).substr(slash + 1));
    if (!well_formed) {
      problems.add("id", in_quotes(task.id) + " must be <category>/<name>, each [a-z0-9_]+");
    } else if (task.id != folder) {
      problems.add("id", in_quotes(task.id) + " does not match the folder (expected " +
                             in_quotes(folder) + ")");
    }
  }
  if (!task.category.empty()) {
    const auto& known = known_categories();
    if (std::find(known.begin(), known.end(), task.category) == known.end()) {
      problems.add("category", "unknown category " + in_quotes(task.category) +
                                   " (known: " + join(known) + ")");
    } else if (task.id.rfind(task.category + "/", 0) != 0) {
      problems.add("category", in_quotes(task.category) + " is not the first part of the id " +
                                   in_quotes(task.id));
    }
  }

  parse_reference(ctx, root, task);
  parse_parity(ctx, root, task);
  parse_symbols(ctx, root, task);
  std::set<std::string> names(task.symbols.begin(), task.symbols.end());
  parse_tensors(ctx, root, task, names);
  for (const auto& tensor : task.tensors) names.insert(tensor.name);
  parse_scalars(ctx, root, task, names);
  parse_tolerance_defaults(ctx, root, task);
  resolve_tolerances(ctx, root, task);

  std::map<std::string, std::string> case_keys;
  parse_cases(ctx, root, task, "visible_cases", false, case_keys);
  parse_cases(ctx, root, task, "hidden_cases", true, case_keys);
  check_list_lengths(ctx, task);
  if (task.visible_cases().empty()) {
    const auto* visible = root.get("visible_cases");
    if (visible == nullptr || (visible->is_array() && visible->as_array()->empty())) {
      problems.add("visible_cases", "at least one visible case is required");
    }
  }
  parse_roofline(ctx, root, task);
  check_library_contract(ctx, task);

  if (problems.count() != 0) return std::nullopt;
  return task;
}

}  // namespace crucible::tasks
