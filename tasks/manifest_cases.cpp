// The visible and hidden cases of a task.toml: symbol and scalar values, per-case value
// generators and seeds, each checked against the task's declarations.
#include <algorithm>
#include <cmath>

#include "tasks/manifest_internal.hpp"

namespace crucible::tasks::manifest_detail {
namespace {

constexpr std::int64_t kMaxTensorBytes = std::int64_t{16} << 30;  // one tensor, one case

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

}  // namespace

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

}  // namespace crucible::tasks::manifest_detail
