// task.toml parsing and validation; reports every problem with its file and key. This file
// reads the top-level keys, the reference, the parity anchors and the roofline, and calls the
// section parsers of manifest_declarations.cpp, manifest_generators.cpp and manifest_cases.cpp.
#include "tasks/manifest.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <tuple>

#include "core/expr.hpp"
#include "core/text_file.hpp"
#include "tasks/manifest_internal.hpp"

namespace crucible::tasks {
namespace {

namespace fs = std::filesystem;

using manifest_detail::check_list_lengths;
using manifest_detail::child;
using manifest_detail::Context;
using manifest_detail::element;
using manifest_detail::in_quotes;
using manifest_detail::is_identifier;
using manifest_detail::is_slug;
using manifest_detail::join;
using manifest_detail::parse_cases;
using manifest_detail::parse_scalars;
using manifest_detail::parse_symbols;
using manifest_detail::parse_tensors;
using manifest_detail::parse_tolerance_defaults;
using manifest_detail::Problems;
using manifest_detail::Reader;
using manifest_detail::resolve_tolerances;
using manifest_detail::type_name;

std::optional<core::Expr> parse_formula(Context& ctx, const toml::table& table,
                                        std::string_view key, const Task& task,
                                        const std::string& where = "roofline") {
  const std::string path = child(where, key);
  const auto text = ctx.read.string(table, key, where, true);
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

// [[promises]]: what every case guarantees, so a kernel may rely on it (`holds`: an expression
// over the symbols, kept when non-zero; `text`: the promise in words). Every case must keep
// every promise; the model check does not place a candidate at a call site that breaks one.
void parse_promises(Context& ctx, const toml::table& root, Task& task) {
  const toml::node* node = root.get("promises");
  if (node == nullptr) return;
  const toml::array* list = node->as_array();
  if (list == nullptr) {
    ctx.problems.add("promises", "must be an array of tables {holds, text}");
    return;
  }
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string where = "promises[" + std::to_string(i) + "]";
    const toml::table* table = list->get(i)->as_table();
    if (table == nullptr) {
      ctx.problems.add(where, "must be a table {holds, text}");
      continue;
    }
    ctx.read.check_keys(*table, where, {"holds", "text"});
    Promise promise;
    promise.holds = ctx.read.string(*table, "holds", where, false).value_or("");
    promise.text = ctx.read.string(*table, "text", where, true).value_or("");
    const auto expr = parse_formula(ctx, *table, "holds", task, where);
    if (!expr) continue;
    promise.expr = *expr;
    for (const auto& c : task.cases) {
      if (broken_promise({promise}, c.symbols)) {
        ctx.problems.add(child(where, "holds"), "case " + in_quotes(c.name) + " breaks it");
      }
    }
    task.promises.push_back(std::move(promise));
  }
}

// A library reference takes the task's tensors as its own arguments: their roles, ranks, dtypes
// and shared dimensions must be what the library computes.
void check_library_contract(Context& ctx, const Task& task) {
  const auto& t = task.tensors;
  if (task.reference_library == "cublaslt_fp8_rowwise") {
    const auto is = [&](std::size_t i, Role role, core::DType dtype) {
      return t[i].role == role && t[i].dtype == dtype && t[i].shape.size() == 2;
    };
    const bool kinds = t.size() == 5 && is(0, Role::kOut, core::DType::kBF16) &&
                       is(1, Role::kIn, core::DType::kFP8E4M3) &&
                       is(2, Role::kIn, core::DType::kFP8E4M3) &&
                       is(3, Role::kIn, core::DType::kF32) && is(4, Role::kIn, core::DType::kF32);
    const bool dims = kinds && t[0].shape[0] == t[1].shape[0] && t[0].shape[1] == t[2].shape[0] &&
                      t[1].shape[1] == t[2].shape[1] && t[3].shape[0] == t[0].shape[0] &&
                      t[3].shape[1] == "1" && t[4].shape[0] == t[0].shape[1] &&
                      t[4].shape[1] == "1";
    if (!dims) {
      ctx.problems.add("reference.library",
                       "\"cublaslt_fp8_rowwise\" computes out[M, N] = a_scales[M] * b_scales[N] * "
                       "(a[M, K] @ b[N, K]^T): the task needs exactly the tensors (out, a, b, "
                       "a_scales, b_scales) in that order, roles out, in, in, in, in, dtypes bf16, "
                       "fp8_e4m3, fp8_e4m3, f32, f32, with shapes [M, N], [M, K], [N, K], [M, 1], "
                       "[N, 1]");
    }
    return;
  }
  if (task.reference_library != "cublaslt") return;
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
  ctx.read.check_keys(*table, "parity", {"module", "prepare", "check", "canonical", "anchors"});
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
  parity.canonical = function(*table, "canonical", "parity", false);

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
  if (!parity.canonical.empty() && count(ParityKind::kKernel) == 0) {
    ctx.problems.add("parity.canonical",
                     "only a \"kernel\" anchor's output is put in the check's order: this table "
                     "has none");
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

  read.check_keys(root, "",
                  {"id", "category", "module", "title", "description", "reference", "symbols",
                   "tensors", "scalars", "tolerance", "roofline", "promises", "visible_cases",
                   "hidden_cases", "checker", "parity"});

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
  parse_promises(ctx, root, task);
  check_library_contract(ctx, task);

  if (problems.count() != 0) return std::nullopt;
  return task;
}

}  // namespace crucible::tasks
