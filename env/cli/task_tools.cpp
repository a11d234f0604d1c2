// Task folder creation and the checks of `crucible tasks check`.
#include "env/cli/task_tools.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "core/text.hpp"
#include "core/text_file.hpp"
#include "judge/task_checker.hpp"
#include "tasks/oracle.hpp"

namespace crucible::env {
namespace fs = std::filesystem;
using Outcome = CheckLine::Outcome;

namespace {

// The opt-in shared-memory limit of an H200 (sm_90): plans are checked as the runner would.
constexpr std::int64_t kCheckSmemBytes = 232448;

bool is_slug(std::string_view text) {
  if (text.empty() || !(text[0] >= 'a' && text[0] <= 'z')) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) {
    text.replace(at, from.size(), to);
  }
  return text;
}

std::string category_of(std::string_view id) { return std::string(id.substr(0, id.find('/'))); }

core::Status write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return core::Error{core::ErrorCode::kIo, "cannot write " + path.string()};
  return {};
}

CheckLine ok(std::string what) { return {Outcome::kOk, std::move(what), {}}; }
CheckLine failed(std::string what, std::string why) {
  return {Outcome::kFailed, std::move(what), std::move(why)};
}
CheckLine skipped(std::string what, std::string why) {
  return {Outcome::kSkipped, std::move(what), std::move(why)};
}

std::uint64_t case_elements(const tasks::Task& task, const tasks::Case& c) {
  std::uint64_t total = 0;
  for (const auto& tensor : task.tensors) {
    const auto count = tasks::element_count(tensor, c);
    total += count ? static_cast<std::uint64_t>(*count) : std::numeric_limits<std::uint32_t>::max();
  }
  return total;
}

// Parses `source`'s plan and evaluates it on every case; the plan on success.
std::optional<action::LaunchPlan> check_plan(const tasks::Task& task, const std::string& source,
                                             const std::string& label,
                                             std::vector<CheckLine>& lines) {
  const auto context = action::make_plan_context(task, kCheckSmemBytes);
  auto plan = action::parse_launch_plan(source, context);
  const std::string what = label + " plan on " + std::to_string(task.cases.size()) + " cases";
  if (!plan) {
    lines.push_back(failed(what, plan.error().message));
    return std::nullopt;
  }
  for (const auto& c : task.cases) {
    auto concrete = action::evaluate_plan(*plan, c.symbols, context);
    if (!concrete) {
      lines.push_back(failed(what, "case " + c.name + ": " + concrete.error().message));
      return std::nullopt;
    }
  }
  lines.push_back(ok(what));
  return std::move(plan).value();
}

void check_compile(const std::string& source, const action::LaunchPlan& plan,
                   const std::string& label, const CheckTools& tools,
                   std::vector<CheckLine>& lines) {
  const std::string what = label + " compiles with NVRTC";
  if (tools.compile == nullptr) {
    lines.push_back(skipped(what, "no compile workers"));
    return;
  }
  sandbox::CompileJob job;
  job.source = source;
  job.name_expressions = plan.name_expressions();
  const auto output = tools.compile->submit(std::move(job)).get();
  if (output.status != core::StepStatus::kOk) {
    lines.push_back(failed(what, std::string(core::step_status_name(output.status)) + ": " +
                                     core::one_line(output.log, 600)));
    return;
  }
  lines.push_back(ok(what + " (" + std::to_string(output.kernels.size()) + " kernel" +
                     (output.kernels.size() == 1 ? "" : "s") + ")"));
}

// The [parity] table: what production library the reference is held to, and the module
// functions that call it (each must be defined in the module).
CheckLine check_parity(const tasks::Task& task) {
  if (!task.parity) {
    return failed("parity anchors",
                  "task.toml has no [parity] table: declare the production "
                  "library the reference is held to (docs/tasks.md)");
  }
  const auto module = core::read_text_file(task.parity->module_path);
  if (!module) return failed("parity anchors", module.error().message);
  std::vector<std::string> functions;
  for (const auto& anchor : task.parity->anchors) functions.push_back(anchor.function);
  if (!task.parity->prepare.empty()) functions.push_back(task.parity->prepare);
  if (!task.parity->check.empty()) functions.push_back(task.parity->check);
  if (!task.parity->canonical.empty()) functions.push_back(task.parity->canonical);
  for (const auto& function : functions) {
    if (module->find("def " + function + "(") == std::string::npos) {
      return failed("parity anchors",
                    task.parity->module + " defines no function '" + function + "'");
    }
  }
  std::string names;
  for (const auto& anchor : task.parity->anchors) {
    names += (names.empty() ? "" : ", ") + anchor.name;
  }
  return ok("parity anchors: " + names);
}

}  // namespace

core::Result<std::vector<fs::path>> create_task(const fs::path& home,
                                                const tasks::Registry& registry,
                                                std::string_view id, std::string_view from) {
  const auto slash = id.find('/');
  const auto invalid = [&](const std::string& why) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "cannot create task '" + core::excerpt(id, 100) + "': " + why};
  };
  if (slash == std::string_view::npos || id.find('/', slash + 1) != std::string_view::npos ||
      !is_slug(id.substr(0, slash)) || !is_slug(id.substr(slash + 1))) {
    return invalid("an id is <category>/<name>, lower case letters, digits and '_'");
  }
  const std::string category = category_of(id);
  const auto& categories = tasks::known_categories();
  if (std::find(categories.begin(), categories.end(), category) == categories.end()) {
    std::string known;
    for (const auto& name : categories) known += (known.empty() ? "" : ", ") + name;
    return invalid("unknown category '" + category + "'; the categories are " + known);
  }
  if (registry.find(id) != nullptr || fs::exists(home / "tasks" / id)) {
    return invalid("it exists already");
  }
  const tasks::Task* source = registry.find(from);
  if (source == nullptr) {
    return invalid("no task '" + core::excerpt(from, 100) + "' to copy (`crucible tasks list`)");
  }
  const fs::path reference_to = fs::path("kernels") / (std::string(id) + ".cu");
  if (fs::exists(home / reference_to)) {
    return invalid(reference_to.string() + " exists already");
  }
  const std::string old_category = source->category;
  const auto rename = [&](std::string text) {
    text = replace_all(std::move(text), source->id, id);
    return replace_all(std::move(text), "category = \"" + old_category + "\"",
                       "category = \"" + category + "\"");
  };

  std::vector<std::pair<fs::path, std::string>> files;  // relative path, text
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(source->folder(), ec)) {
    if (!entry.is_regular_file()) continue;  // captured data lives in tasks/capture/
    auto text = core::read_text_file(entry.path());
    if (!text) return text.error();
    files.emplace_back(fs::path("tasks") / id / entry.path().filename(), rename(*text));
  }
  if (ec) return core::Error{core::ErrorCode::kIo, "cannot list " + source->folder().string()};
  auto reference = core::read_text_file(home / source->reference_path);
  if (!reference) return reference.error();
  files.emplace_back(reference_to, rename(*reference));
  std::sort(files.begin(), files.end());

  fs::create_directories(home / "tasks" / id, ec);
  fs::create_directories((home / reference_to).parent_path(), ec);
  if (ec) return core::Error{core::ErrorCode::kIo, "cannot create the folders: " + ec.message()};
  std::vector<fs::path> written;
  for (const auto& [path, text] : files) {
    if (auto status = write_file(home / path, text); !status) return status.error();
    written.push_back(path);
  }
  return written;
}

std::vector<CheckLine> check_task(const tasks::Task& task, const CheckTools& tools) {
  std::vector<CheckLine> lines;
  std::size_t visible = 0;
  for (const auto& c : task.cases) visible += c.hidden ? 0 : 1;
  lines.push_back(ok("manifest: " + std::to_string(visible) + " visible and " +
                     std::to_string(task.cases.size() - visible) + " hidden cases, " +
                     std::to_string(task.tensors.size()) + " tensors"));

  // The folder holds what a task is made of.
  for (const char* file : {"oracle.cpp", "test_oracle.cpp", "solution.cu"}) {
    if (!fs::is_regular_file(task.folder() / file)) {
      lines.push_back(failed(std::string(file) + " in the task folder",
                             (task.folder() / file).string() + " is missing"));
    }
  }

  const std::string reference_source = task.reference_source;
  const auto reference_plan = check_plan(task, reference_source, "reference", lines);
  std::optional<std::string> solution;
  if (auto text = core::read_text_file(task.solution_path())) solution = std::move(text).value();
  std::optional<action::LaunchPlan> solution_plan;
  if (solution) solution_plan = check_plan(task, *solution, "solution", lines);
  if (reference_plan) check_compile(reference_source, *reference_plan, "reference", tools, lines);
  if (solution && solution_plan) check_compile(*solution, *solution_plan, "solution", tools, lines);

  // The oracle on the smallest case (its input values as the runner builds them).
  if (tasks::find_oracle(task.id) == nullptr) {
    lines.push_back(failed("float64 oracle", "no oracle registered for " + task.id +
                                                 " (oracle.cpp: CRUCIBLE_ORACLE; re-run cmake "
                                                 "after adding the folder)"));
  } else if (!task.cases.empty()) {
    const auto smallest = std::min_element(task.cases.begin(), task.cases.end(),
                                           [&](const tasks::Case& a, const tasks::Case& b) {
                                             return case_elements(task, a) < case_elements(task, b);
                                           });
    auto outputs = tasks::run_oracle(task, *smallest, tasks::case_seed(*smallest, 1));
    const std::string what = "float64 oracle on case " + smallest->name;
    if (!outputs) {
      lines.push_back(failed(what, outputs.error().message));
    } else {
      bool finite = true;
      for (const auto& [name, tensor] : *outputs) {
        for (const double value : tensor.values) finite &= std::isfinite(value);
      }
      lines.push_back(finite ? ok(what) : failed(what, "the oracle produced NaN or Inf"));
    }
  }

  if (!task.checker.empty()) {
    lines.push_back(judge::find_task_checker(task.checker) != nullptr
                        ? ok("checker " + task.checker)
                        : failed("checker " + task.checker, "no checker of that name"));
  }

  lines.push_back(check_parity(task));

  if (!tools.score_on_gpu) {
    lines.push_back(skipped("reference and solution on the GPU", tools.no_gpu_reason));
  } else {
    for (const auto& [label, source] :
         {std::pair<std::string, std::optional<std::string>>{"reference", reference_source},
          {"solution", solution}}) {
      if (!source) continue;
      const auto result = tools.score_on_gpu(task, *source);
      const std::string what = label + " correct on every case on the GPU";
      if (result.status == core::StepStatus::kOk) {
        lines.push_back(ok(what));
      } else {
        lines.push_back(failed(
            what, std::string(core::step_status_name(result.status)) + ": " + result.message));
      }
    }
  }
  return lines;
}

std::string format_check(const tasks::Task& task, const std::vector<CheckLine>& lines) {
  std::ostringstream out;
  out << task.id << "\n";
  for (const auto& line : lines) {
    const char* mark = line.outcome == Outcome::kOk       ? "ok  "
                       : line.outcome == Outcome::kFailed ? "FAIL"
                                                          : "skip";
    out << "  " << mark << "  " << line.what;
    if (!line.detail.empty()) out << ": " << line.detail;
    out << "\n";
  }
  return out.str();
}

bool check_passed(const std::vector<CheckLine>& lines) {
  return std::none_of(lines.begin(), lines.end(),
                      [](const CheckLine& line) { return line.outcome == Outcome::kFailed; });
}

}  // namespace crucible::env
