// Model descriptions: reading, checking against the tasks, expanding a step (model.hpp).
#include "model/model.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <set>
#include <utility>

namespace crucible::model {
namespace {

using core::Error;
using core::ErrorCode;

Error bad(const std::filesystem::path& file, const std::string& where, const std::string& why) {
  return Error{ErrorCode::kInvalidArgument,
               file.string() + (where.empty() ? "" : ": " + where) + ": " + why};
}

core::Result<toml::table> read_toml(const std::filesystem::path& file) {
  try {
    return toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    return Error{ErrorCode::kInvalidArgument,
                 file.string() + ": not valid TOML: " + std::string(e.description())};
  }
}

std::string string_or(const toml::table& table, std::string_view key, std::string fallback = "") {
  if (const auto* value = table.get_as<std::string>(key)) return value->get();
  return fallback;
}

core::Result<core::Expr> expression(const toml::node& node, const std::filesystem::path& file,
                                    const std::string& where) {
  if (const auto* number = node.as_integer())
    return core::parse_expr(std::to_string(number->get()));
  if (const auto* text = node.as_string()) {
    auto parsed = core::parse_expr(text->get());
    if (!parsed) return bad(file, where, parsed.error().message);
    return parsed;
  }
  return bad(file, where, "must be an integer or an integer expression in a string");
}

// Names an expression may use: constants, variables, derived values defined so far.
core::Status names_known(const core::Expr& expr, const std::set<std::string, std::less<>>& known,
                         const std::filesystem::path& file, const std::string& where) {
  for (const auto& name : expr.symbols()) {
    if (!known.contains(name)) {
      return bad(file, where,
                 "'" + expr.text() + "' uses '" + name +
                     "', which is not a constant, variable or derived value");
    }
  }
  return {};
}

core::Status read_program(const toml::table& program, const std::filesystem::path& file,
                          const tasks::Registry& registry, Model& model) {
  std::set<std::string, std::less<>> known;
  for (const auto& [name, value] : model.constants) known.insert(name);
  if (const auto* variables = program.get_as<toml::array>("variables")) {
    for (const auto& node : *variables) {
      const auto* table = node.as_table();
      if (table == nullptr || string_or(*table, "name").empty()) {
        return bad(file, "variables", "each entry is a table with a `name`");
      }
      Variable variable{string_or(*table, "name"), string_or(*table, "description")};
      if (!known.insert(variable.name).second) {
        return bad(file, "variables", "'" + variable.name + "' is defined twice");
      }
      model.variables.push_back(std::move(variable));
    }
  }
  if (const auto* derived = program.get_as<toml::array>("derived")) {
    for (const auto& node : *derived) {
      const auto* table = node.as_table();
      const std::string name = table != nullptr ? string_or(*table, "name") : "";
      const toml::node* value = table != nullptr ? table->get("value") : nullptr;
      if (name.empty() || value == nullptr) {
        return bad(file, "derived", "each entry is a table with `name` and `value`");
      }
      auto expr = expression(*value, file, "derived '" + name + "'");
      if (!expr) return expr.error();
      if (auto ok = names_known(*expr, known, file, "derived '" + name + "'"); !ok) return ok;
      if (!known.insert(name).second)
        return bad(file, "derived", "'" + name + "' is defined twice");
      model.derived.emplace_back(name, std::move(expr).value());
    }
  }
  const auto* buffers = program.get_as<toml::array>("buffers");
  if (buffers == nullptr || buffers->empty()) return bad(file, "buffers", "none declared");
  static const std::set<std::string, std::less<>> kKinds = {"weight", "activation", "cache",
                                                            "metadata"};
  for (const auto& node : *buffers) {
    const auto* table = node.as_table();
    if (table == nullptr) return bad(file, "buffers", "each entry is a table");
    Buffer buffer;
    buffer.name = string_or(*table, "name");
    const std::string where = "buffer '" + buffer.name + "'";
    if (buffer.name.empty()) return bad(file, "buffers", "an entry has no `name`");
    if (model.find_buffer(buffer.name) != nullptr) return bad(file, where, "declared twice");
    const auto dtype = core::dtype_from_name(string_or(*table, "dtype"));
    if (!dtype) return bad(file, where, "`dtype` is not a known dtype");
    buffer.dtype = *dtype;
    buffer.kind = string_or(*table, "kind");
    if (!kKinds.contains(buffer.kind)) {
      return bad(file, where, "`kind` must be weight, activation, cache or metadata");
    }
    buffer.per_layer =
        table->get_as<bool>("per_layer") != nullptr && table->get_as<bool>("per_layer")->get();
    buffer.description = string_or(*table, "description");
    const auto* shape = table->get_as<toml::array>("shape");
    if (shape == nullptr || shape->empty()) return bad(file, where, "`shape` must list its dims");
    for (const auto& dim : *shape) {
      auto expr = expression(dim, file, where);
      if (!expr) return expr.error();
      if (auto ok = names_known(*expr, known, file, where); !ok) return ok;
      buffer.shape.push_back(std::move(expr).value());
    }
    model.buffers.push_back(std::move(buffer));
  }
  const auto* calls = program.get_as<toml::array>("calls");
  if (calls == nullptr || calls->empty()) return bad(file, "calls", "none declared");
  std::set<std::string> sites;
  for (const auto& node : *calls) {
    const auto* table = node.as_table();
    if (table == nullptr) return bad(file, "calls", "each entry is a table");
    Call call;
    call.site = string_or(*table, "site");
    const std::string where = "call '" + call.site + "'";
    if (call.site.empty()) return bad(file, "calls", "an entry has no `site`");
    if (!sites.insert(call.site).second) return bad(file, where, "the site name is used twice");
    const std::string task_id = string_or(*table, "task");
    call.task = registry.find(task_id);
    if (call.task == nullptr) return bad(file, where, "no task '" + task_id + "'");
    const std::string repeat = string_or(*table, "repeat", "step");
    if (repeat != "step" && repeat != "layer") {
      return bad(file, where, "`repeat` must be \"step\" or \"layer\"");
    }
    call.per_layer = repeat == "layer";
    const auto* tensors = table->get_as<toml::table>("tensors");
    const auto* symbols = table->get_as<toml::table>("symbols");
    const auto* scalars = table->get_as<toml::table>("scalars");
    for (const auto& tensor : call.task->tensors) {
      const auto* bound = tensors != nullptr ? tensors->get_as<std::string>(tensor.name) : nullptr;
      if (bound == nullptr) return bad(file, where, "tensor '" + tensor.name + "' is not bound");
      const Buffer* buffer = model.find_buffer(bound->get());
      if (buffer == nullptr) {
        return bad(file, where,
                   "tensor '" + tensor.name + "' is bound to '" + bound->get() +
                       "', which is not a buffer");
      }
      if (buffer->dtype != tensor.dtype) {
        return bad(file, where,
                   "tensor '" + tensor.name + "' is " +
                       std::string(core::dtype_name(tensor.dtype)) + " but buffer '" +
                       buffer->name + "' is " + std::string(core::dtype_name(buffer->dtype)));
      }
      if (buffer->per_layer && !call.per_layer) {
        return bad(file, where,
                   "buffer '" + buffer->name +
                       "' has a copy per layer, but the call runs once a "
                       "step");
      }
      call.tensors[tensor.name] = bound->get();
    }
    if (tensors != nullptr) {
      for (const auto& [key, value] : *tensors) {
        if (call.task->find_tensor(key.str()) == nullptr) {
          return bad(file, where,
                     "task " + task_id + " has no tensor '" + std::string(key.str()) + "'");
        }
      }
    }
    for (const auto& symbol : call.task->symbols) {
      const toml::node* value = symbols != nullptr ? symbols->get(symbol) : nullptr;
      if (value == nullptr) return bad(file, where, "symbol '" + symbol + "' is not given");
      auto expr = expression(*value, file, where + ", symbol '" + symbol + "'");
      if (!expr) return expr.error();
      if (auto ok = names_known(*expr, known, file, where); !ok) return ok;
      call.symbols.emplace(symbol, std::move(expr).value());
    }
    if (symbols != nullptr && symbols->size() != call.symbols.size()) {
      return bad(file, where, "gives a symbol task " + task_id + " does not have");
    }
    for (const auto& scalar : call.task->scalars) {
      const toml::node* value = scalars != nullptr ? scalars->get(scalar.name) : nullptr;
      if (value != nullptr && value->is_string()) {
        const std::string name = value->as_string()->get();
        const auto it = model.scalars.find(name);
        if (it == model.scalars.end()) {
          return bad(file, where,
                     "scalar '" + scalar.name + "' names '" + name +
                         "', which is not in the model's [scalars]");
        }
        call.scalars[scalar.name] = it->second;
      } else if (value != nullptr) {
        const auto number = value->value<double>();
        if (!number) return bad(file, where, "scalar '" + scalar.name + "' must be a number");
        call.scalars[scalar.name] = *number;
      } else if (scalar.default_value) {
        call.scalars[scalar.name] = *scalar.default_value;
      } else {
        return bad(file, where, "scalar '" + scalar.name + "' is not given");
      }
    }
    if (scalars != nullptr && scalars->size() > call.task->scalars.size()) {
      return bad(file, where, "gives a scalar task " + task_id + " does not have");
    }
    if (const auto* gather = table->get_as<toml::table>("gather")) {
      if (call.per_layer) return bad(file, where, "a gather runs before a once-a-step call only");
      Gather rows;
      rows.from = string_or(*gather, "from");
      rows.into = string_or(*gather, "into");
      for (const auto& name : {rows.from, rows.into}) {
        const Buffer* buffer = model.find_buffer(name);
        if (buffer == nullptr) {
          return bad(file, where + ", gather", "'" + name + "' is not a buffer");
        }
        if (buffer->per_layer) {
          return bad(file, where + ", gather", "buffer '" + name + "' has a copy per layer");
        }
      }
      if (model.find_buffer(rows.from)->dtype != model.find_buffer(rows.into)->dtype) {
        return bad(file, where + ", gather", "`from` and `into` differ in dtype");
      }
      for (auto [key, target] : {std::pair{"count", &rows.count}, std::pair{"first", &rows.first},
                                 std::pair{"stride", &rows.stride}}) {
        const toml::node* value = gather->get(key);
        if (value == nullptr) return bad(file, where + ", gather", std::string("no `") + key + "`");
        auto expr = expression(*value, file, where + ", gather " + key);
        if (!expr) return expr.error();
        if (auto ok = names_known(*expr, known, file, where + ", gather"); !ok) return ok;
        *target = std::move(expr).value();
      }
      call.gather = std::move(rows);
    }
    model.calls.push_back(std::move(call));
  }
  return {};
}

// [values], [defaults], [check] and [tokens] of a model file (after its program is read).
core::Status read_step_settings(const toml::table& table, const std::filesystem::path& file,
                                Model& model) {
  static const std::set<tasks::GeneratorKind> kFillers = {
      tasks::GeneratorKind::kRandn,    tasks::GeneratorKind::kUniform,
      tasks::GeneratorKind::kConstant, tasks::GeneratorKind::kOnes,
      tasks::GeneratorKind::kZeros,    tasks::GeneratorKind::kRopeCache};
  if (const auto* values = table.get_as<toml::table>("values")) {
    for (const auto& [key, node] : *values) {
      const std::string name(key.str());
      const std::string where = "values." + name;
      const Buffer* buffer = model.find_buffer(name);
      if (buffer == nullptr) return bad(file, where, "no buffer of that name");
      const auto* spec_table = node.as_table();
      if (spec_table == nullptr) return bad(file, where, "must be a table with a `generator`");
      tasks::GeneratorSpec spec;
      const auto kind = tasks::generator_from_name(string_or(*spec_table, "generator"));
      if (!kind || !kFillers.contains(*kind)) {
        return bad(file, where,
                   "`generator` must be randn, uniform, constant, ones, zeros or rope_cache");
      }
      spec.kind = *kind;
      const auto number = [&](std::string_view field, double fallback) {
        const auto* v = spec_table->get(field);
        return v != nullptr && v->value<double>() ? *v->value<double>() : fallback;
      };
      spec.mean = number("mean", 0.0);
      spec.std = number("std", 1.0);
      spec.lo = number("lo", 0.0);
      spec.hi = number("hi", 1.0);
      spec.value = number("value", 0.0);
      spec.theta = number("theta", 10000.0);
      if (spec.kind == tasks::GeneratorKind::kRopeCache) {
        // Rows of the table are its last dimension: cosines then sines of head_size / 2 angles.
        const auto dim = model.constants.find("head_size");
        if (dim == model.constants.end() || dim->second % 2 != 0) {
          return bad(file, where, "rope_cache needs an even constant head_size");
        }
        spec.dim = dim->second;
      }
      if (spec.kind == tasks::GeneratorKind::kRandn && !(spec.std > 0.0)) {
        return bad(file, where, "`std` must be positive");
      }
      model.values[name] = spec;
    }
  }
  for (const auto& buffer : model.buffers) {
    const bool needed =
        buffer.kind == "cache" || (buffer.kind == "weight" && model.weights == "synthetic");
    if (needed && !model.values.contains(buffer.name)) {
      return bad(file, "values",
                 "buffer '" + buffer.name + "' (" + buffer.kind + ") needs a generator here");
    }
  }
  if (const auto* defaults = table.get_as<toml::table>("defaults")) {
    for (const auto& [key, node] : *defaults) {
      const std::string name(key.str());
      const bool declared = std::any_of(model.variables.begin(), model.variables.end(),
                                        [&](const Variable& v) { return v.name == name; });
      const auto value = node.value<std::int64_t>();
      if (!declared) return bad(file, "defaults", "no variable '" + name + "'");
      if (!value || *value <= 0) return bad(file, "defaults", "'" + name + "' must be positive");
      model.defaults[name] = *value;
    }
  }
  if (const auto* check = table.get_as<toml::table>("check")) {
    const auto* bound = check->get("hidden_rel_l2");
    const auto value = bound != nullptr ? bound->value<double>() : std::nullopt;
    if (!value || !(*value > 0.0)) {
      return bad(file, "check", "`hidden_rel_l2` must be a positive number");
    }
    model.hidden_rel_l2 = *value;
  }
  if (const auto* tokens = table.get_as<toml::table>("tokens")) {
    if (model.weights == "synthetic") {
      return bad(file, "tokens", "greedy tokens need trained weights");
    }
    const auto* prompts = tokens->get_as<toml::array>("prompts");
    const auto vocab = model.constants.contains("vocab") ? model.constants.at("vocab") : 0;
    if (prompts == nullptr || prompts->empty()) return bad(file, "tokens", "no `prompts`");
    for (const auto& node : *prompts) {
      const auto* ids = node.as_array();
      if (ids == nullptr || ids->empty()) return bad(file, "tokens", "each prompt lists token ids");
      std::vector<std::int64_t> prompt;
      for (const auto& id : *ids) {
        const auto value = id.value<std::int64_t>();
        if (!value || *value < 0 || *value >= vocab) {
          return bad(file, "tokens", "a token id outside the vocabulary");
        }
        prompt.push_back(*value);
      }
      if (!model.prompts.empty() && prompt.size() != model.prompts.front().size()) {
        // Every sequence advances one token a step, so prompts are fed in lockstep.
        return bad(file, "tokens", "every prompt must have the same length");
      }
      model.prompts.push_back(std::move(prompt));
    }
    const auto* generate = tokens->get("generate");
    const auto count = generate != nullptr ? generate->value<std::int64_t>() : std::nullopt;
    if (!count || *count <= 0) return bad(file, "tokens", "`generate` must be positive");
    model.generate = *count;
  }
  return {};
}

}  // namespace

const Buffer* Model::find_buffer(std::string_view buffer_name) const {
  for (const auto& buffer : buffers) {
    if (buffer.name == buffer_name) return &buffer;
  }
  return nullptr;
}

namespace {

// Reads `file`; when it names `base = "other.toml"` (beside it), reads that too and returns
// lay_over(file's table, base's table). One level: a base has no base.
template <typename LayOver>
core::Result<toml::table> read_with_base(const std::filesystem::path& file, LayOver lay_over) {
  auto table = read_toml(file);
  if (!table) return table.error();
  const std::string base_name = string_or(*table, "base");
  if (base_name.empty()) return table;
  auto base = read_toml(file.parent_path() / base_name);
  if (!base) return base.error();
  if (base->contains("base")) return bad(file, "base", base_name + " has a base itself");
  return lay_over(std::move(table).value(), std::move(base).value());
}

// A model file's base gives its constants, scalars, weights and [values], the file's own keys
// winning; name, title, description, program, [defaults], [check] and [tokens] are its own.
core::Result<toml::table> read_model_table(const std::filesystem::path& file) {
  return read_with_base(
      file, [&](toml::table merged, const toml::table& base) -> core::Result<toml::table> {
        if (!merged.contains("weights") && base.contains("weights")) {
          merged.insert("weights", *base.get("weights"));
        }
        for (const char* section : {"constants", "scalars", "values"}) {
          const auto* inherited = base.get_as<toml::table>(section);
          if (inherited == nullptr) continue;
          if (!merged.contains(section)) merged.insert(section, toml::table{});
          auto* own = merged.get_as<toml::table>(section);
          if (own == nullptr) return bad(file, section, "must be a table");
          for (const auto& [key, value] : *inherited) {
            if (!own->contains(key.str())) own->insert(key, value);
          }
        }
        return merged;
      });
}

// A program's base is laid under it: a variable, derived value or buffer of the same `name`, or
// a call of the same `site`, replaces the base's in place; the others are appended.
core::Result<toml::table> read_program_table(const std::filesystem::path& file) {
  return read_with_base(
      file, [&](const toml::table& table, toml::table base) -> core::Result<toml::table> {
        for (const auto& [section, key] :
             {std::pair{"variables", "name"}, std::pair{"derived", "name"},
              std::pair{"buffers", "name"}, std::pair{"calls", "site"}}) {
          const auto* own = table.get_as<toml::array>(section);
          if (own == nullptr) continue;
          if (!base.contains(section)) base.insert(section, toml::array{});
          auto* merged = base.get_as<toml::array>(section);
          if (merged == nullptr) return bad(file, section, "must be an array of tables");
          for (const auto& entry : *own) {
            const auto* entry_table = entry.as_table();
            if (entry_table == nullptr) return bad(file, section, "each entry is a table");
            const std::string id = string_or(*entry_table, key);
            auto same = std::find_if(merged->begin(), merged->end(), [&](const toml::node& node) {
              return node.as_table() != nullptr && !id.empty() &&
                     string_or(*node.as_table(), key) == id;
            });
            if (same != merged->end()) {
              merged->replace(same, *entry_table);
            } else {
              merged->push_back(*entry_table);
            }
          }
        }
        return base;
      });
}

}  // namespace

core::Result<Model> load_model(const std::filesystem::path& file, const tasks::Registry& registry) {
  auto table = read_model_table(file);
  if (!table) return table.error();
  Model model;
  model.file = file;
  model.name = string_or(*table, "name");
  model.title = string_or(*table, "title");
  model.description = string_or(*table, "description");
  model.weights = string_or(*table, "weights", "synthetic");
  if (model.name.empty()) return bad(file, "", "no `name`");
  const auto* constants = table->get_as<toml::table>("constants");
  if (constants == nullptr) return bad(file, "constants", "missing");
  for (const auto& [key, value] : *constants) {
    const auto number = value.value<std::int64_t>();
    if (!number || *number <= 0 || !value.is_integer()) {
      return bad(file, "constants", "'" + std::string(key.str()) + "' must be a positive integer");
    }
    model.constants[std::string(key.str())] = *number;
  }
  if (!model.constants.contains("layers")) return bad(file, "constants", "no `layers`");
  if (const auto* scalars = table->get_as<toml::table>("scalars")) {
    for (const auto& [key, value] : *scalars) {
      const auto number = value.value<double>();
      if (!number) return bad(file, "scalars", "'" + std::string(key.str()) + "' must be a number");
      model.scalars[std::string(key.str())] = *number;
    }
  }
  toml::table program = *table;
  model.program = file;
  if (const auto name = string_or(*table, "program"); !name.empty()) {
    model.program = file.parent_path() / name;
    auto included = read_program_table(model.program);
    if (!included) return included.error();
    program = std::move(included).value();
  }
  if (auto read = read_program(program, model.program, registry, model); !read) {
    return read.error();
  }
  if (auto read = read_step_settings(*table, file, model); !read) return read.error();
  return model;
}

core::Result<std::pair<Values, std::vector<CallSite>>> expand_step(
    const Model& model, const std::map<std::string, std::int64_t>& variables) {
  const auto refuse = [&](const std::string& why) {
    return Error{ErrorCode::kInvalidArgument, "model " + model.name + ": " + why};
  };
  Values values(model.constants.begin(), model.constants.end());
  for (const auto& [name, value] : variables) {
    const bool declared = std::any_of(model.variables.begin(), model.variables.end(),
                                      [&](const Variable& v) { return v.name == name; });
    if (!declared) return refuse("no variable '" + name + "'");
    if (value <= 0) return refuse("variable '" + name + "' must be positive");
    values[name] = value;
  }
  for (const auto& variable : model.variables) {
    if (!values.contains(variable.name)) {
      return refuse("variable '" + variable.name + "' (" + variable.description + ") is not set");
    }
  }
  for (const auto& [name, expr] : model.derived) {
    auto value = expr.eval(values);
    if (!value) return refuse("derived '" + name + "': " + value.error().message);
    values[name] = *value;
  }
  std::map<std::string, std::int64_t> buffer_elements, buffer_rows;
  for (const auto& buffer : model.buffers) {
    std::int64_t elements = 1;
    for (const auto& dim : buffer.shape) {
      auto value = dim.eval(values);
      if (!value) return refuse("buffer '" + buffer.name + "': " + value.error().message);
      if (*value <= 0) {
        return refuse("buffer '" + buffer.name + "': dimension '" + dim.text() + "' is " +
                      std::to_string(*value));
      }
      if (__builtin_mul_overflow(elements, *value, &elements)) {
        return refuse("buffer '" + buffer.name + "' has more elements than 64 bits count");
      }
      if (&dim == &buffer.shape.front()) buffer_rows[buffer.name] = *value;
    }
    buffer_elements[buffer.name] = elements;
  }
  std::vector<CallSite> sites;
  for (const auto& call : model.calls) {
    CallSite site;
    site.call = &call;
    site.count = call.per_layer ? model.constants.at("layers") : 1;
    site.shapes.name = model.name + "/" + call.site;
    site.shapes.scalars = call.scalars;
    for (const auto& [symbol, expr] : call.symbols) {
      auto value = expr.eval(values);
      if (!value)
        return refuse("call '" + call.site + "', symbol '" + symbol +
                      "': " + value.error().message);
      if (*value <= 0) {
        return refuse("call '" + call.site + "': symbol '" + symbol + "' = '" + expr.text() +
                      "' is " + std::to_string(*value));
      }
      site.shapes.symbols[symbol] = *value;
    }
    for (const auto& tensor : call.task->tensors) {
      auto needed = tasks::element_count(tensor, site.shapes);
      if (!needed) return refuse("call '" + call.site + "': " + needed.error().message);
      const std::string& buffer = call.tensors.at(tensor.name);
      if (*needed != buffer_elements.at(buffer)) {
        return refuse("call '" + call.site + "': tensor '" + tensor.name + "' needs " +
                      std::to_string(*needed) + " elements, buffer '" + buffer + "' holds " +
                      std::to_string(buffer_elements.at(buffer)));
      }
    }
    if (call.gather) {
      const Gather& g = *call.gather;
      GatherRows rows;
      for (auto [expr, target] :
           {std::pair{&g.count, &rows.count}, std::pair{&g.first, &rows.first},
            std::pair{&g.stride, &rows.stride}}) {
        auto value = expr->eval(values);
        if (!value) {
          return refuse("call '" + call.site + "', gather: " + value.error().message);
        }
        *target = *value;
      }
      const std::int64_t from_rows = buffer_rows.at(g.from), into_rows = buffer_rows.at(g.into);
      rows.width = buffer_elements.at(g.into) / into_rows;
      if (buffer_elements.at(g.from) / from_rows != rows.width) {
        return refuse("call '" + call.site + "', gather: rows of '" + g.from + "' and '" + g.into +
                      "' differ in width");
      }
      if (rows.count <= 0 || rows.count > into_rows || rows.first < 0 || rows.stride < 1 ||
          rows.first + (rows.count - 1) * rows.stride >= from_rows) {
        return refuse("call '" + call.site + "', gather: rows " + std::to_string(rows.first) +
                      " + k * " + std::to_string(rows.stride) + " for k < " +
                      std::to_string(rows.count) + " do not fit '" + g.from + "' (" +
                      std::to_string(from_rows) + " rows) and '" + g.into + "' (" +
                      std::to_string(into_rows) + ")");
      }
      site.gather = rows;
    }
    sites.push_back(std::move(site));
  }
  return std::make_pair(std::move(values), std::move(sites));
}

StepMetadata step_metadata(const Values& values, const std::vector<std::int64_t>& lengths,
                           std::int64_t fresh) {
  const std::int64_t seqs = values.at("num_seqs"), block = values.at("block_size"),
                     blocks = values.at("max_blocks_per_seq");
  StepMetadata meta;
  meta.positions.resize(static_cast<std::size_t>(seqs * fresh));
  meta.slot_mapping.resize(meta.positions.size());
  meta.block_tables.resize(static_cast<std::size_t>(seqs * blocks));
  meta.seq_lens.resize(static_cast<std::size_t>(seqs));
  meta.query_start_loc.assign(static_cast<std::size_t>(seqs + 1), 0);
  for (std::int64_t s = 0; s < seqs; ++s) {
    for (std::int64_t j = 0; j < blocks; ++j) {
      meta.block_tables[s * blocks + j] = static_cast<std::int32_t>(j * seqs + s);
    }
    for (std::int64_t i = 0; i < fresh; ++i) {
      const std::int64_t position = lengths[s] + i;
      meta.positions[s * fresh + i] = position;
      meta.slot_mapping[s * fresh + i] = ((position / block) * seqs + s) * block + position % block;
    }
    meta.seq_lens[s] = static_cast<std::int32_t>(lengths[s] + fresh);
    meta.query_start_loc[s + 1] = static_cast<std::int32_t>((s + 1) * fresh);
  }
  return meta;
}

}  // namespace crucible::model
