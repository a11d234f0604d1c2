// The declarations of a task.toml: shape symbols, tensors (with their default values and
// tolerances), per-dtype tolerance defaults and scalars.
#include <cmath>

#include "tasks/manifest_internal.hpp"

namespace crucible::tasks::manifest_detail {
namespace {

// One unit in the last place relative to a value just above a power of two (the largest
// relative ulp) of a floating dtype; 0 for integers.
double relative_ulp(core::DType dtype) {
  switch (dtype) {
    case core::DType::kBF16:
      return 0x1p-7;
    case core::DType::kF16:
      return 0x1p-10;
    case core::DType::kF32:
      return 0x1p-23;
    case core::DType::kF64:
      return 0x1p-52;
    case core::DType::kFP8E4M3:
      return 0x1p-3;
    case core::DType::kFP8E5M2:
      return 0x1p-2;
    default:
      return 0.0;
  }
}

std::optional<Tolerance> parse_tolerance(Context& ctx, const toml::node& node,
                                         const std::string& path, core::DType dtype) {
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
  // Two correct kernels that round the same value on either side of a rounding boundary differ
  // by one ulp: a relative tolerance under that fails one of them, somewhere in a large output.
  if (good && *rtol > 0.0 && *rtol < relative_ulp(dtype)) {
    ctx.problems.add(child(path, "rtol"),
                     "is under one ulp of " + std::string(core::dtype_name(dtype)) + " (" +
                         number_text(relative_ulp(dtype)) +
                         "): correct kernels that round on either side of a boundary differ by "
                         "that much; use 0 (exact) or at least one ulp");
    good = false;
  }
  if (!good) return std::nullopt;
  return Tolerance{*atol, *rtol};
}

}  // namespace

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
          tensor.tolerance =
              parse_tolerance(ctx, *tolerance, child(path, "tolerance"), tensor.dtype);
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
    const auto dtype = core::dtype_from_name(key.str());
    if (!dtype) {
      ctx.problems.add(path,
                       "unknown dtype " + in_quotes(key.str()) + " (known: " + dtype_list() + ")");
      continue;
    }
    if (auto tolerance = parse_tolerance(ctx, node, path, *dtype)) {
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

}  // namespace crucible::tasks::manifest_detail
