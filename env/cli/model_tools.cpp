// `crucible model` (model_tools.hpp).
#include "env/cli/model_tools.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "model/model.hpp"
#include "model/oracle_decoder.hpp"
#include "tasks/format.hpp"
#include "tasks/roofline.hpp"

namespace crucible::cli {
namespace {

std::string dims(const std::array<std::uint32_t, 3>& d) {
  return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) +
         ")";
}

}  // namespace

core::Result<std::map<std::string, std::int64_t>> parse_settings(
    const std::vector<std::string>& settings) {
  std::map<std::string, std::int64_t> out;
  for (const auto& setting : settings) {
    const auto eq = setting.find('=');
    std::int64_t value = 0;
    const char* begin = setting.data() + (eq == std::string::npos ? 0 : eq + 1);
    const char* end = setting.data() + setting.size();
    const auto parsed = std::from_chars(begin, end, value);
    if (eq == std::string::npos || eq == 0 || parsed.ec != std::errc() || parsed.ptr != end ||
        value <= 0) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "--set '" + setting + "' is not NAME=VALUE with a positive integer"};
    }
    out[setting.substr(0, eq)] = value;
  }
  return out;
}

int model_show(const std::filesystem::path& model_file, const tasks::Registry& registry,
               const std::map<std::string, std::int64_t>& variables, std::ostream& out,
               std::ostream& err) {
  auto loaded = model::load_model(model_file, registry);
  auto step = loaded ? model::expand_step(*loaded, variables) : loaded.error();
  if (!step) {
    err << "crucible model show: " << step.error().message << "\n";
    return 2;
  }
  const auto& sites = step->second;
  std::vector<double> floor_ns;
  double total_ns = 0;
  for (const auto& site : sites) {
    auto cost = tasks::roofline_cost(*site.call->task, site.shapes);
    const double ns = cost ? tasks::roofline_floor_ns(*cost, tasks::kH200Peak) : 0.0;
    floor_ns.push_back(ns * static_cast<double>(site.count));
    total_ns += floor_ns.back();
  }
  out << loaded->title << "\n";
  std::string settings;
  for (const auto& [name, value] : variables) {
    settings += (settings.empty() ? "" : ", ") + name + " " + std::to_string(value);
  }
  std::int64_t calls = 0;
  for (const auto& site : sites) calls += site.count;
  out << "one step at " << settings << ": " << calls << " calls at " << sites.size()
      << " call sites\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-14s %-28s %6s %12s %7s  %s\n", "site", "task", "calls",
                "floor us", "share", "symbols");
  out << line;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto& site = sites[i];
    std::snprintf(line, sizeof line, "%-14s %-28s %6lld %12.2f %6.1f%%  ", site.call->site.c_str(),
                  site.call->task->id.c_str(), static_cast<long long>(site.count),
                  floor_ns[i] / 1e3, total_ns > 0 ? 100.0 * floor_ns[i] / total_ns : 0.0);
    out << line << tasks::symbols_text(site.shapes.symbols) << "\n";
  }
  std::snprintf(line, sizeof line, "\nroofline floor of the step on an H200: %.1f us\n",
                total_ns / 1e3);
  out << line
      << "(floors and shares are the tasks' roofline formulas at the H200's peak rates, an "
         "estimate: the step's measured time is the GPU runner's)\n";
  return 0;
}

int model_plan(const std::filesystem::path& model_file, const tasks::Registry& registry,
               const std::string& task_id, const std::string& source,
               const std::map<std::string, std::int64_t>& variables, std::ostream& out,
               std::ostream& err) {
  auto loaded = model::load_model(model_file, registry);
  auto step = loaded ? model::expand_step(*loaded, variables) : loaded.error();
  if (!step) {
    err << "crucible model plan: " << step.error().message << "\n";
    return 2;
  }
  const tasks::Task* task = registry.find(task_id);
  if (task == nullptr) {
    err << "crucible model plan: no task '" << task_id << "'\n";
    return 2;
  }
  const bool called =
      std::any_of(step->second.begin(), step->second.end(),
                  [&](const model::CallSite& site) { return site.call->task == task; });
  if (!called) {
    err << "crucible model plan: model " << loaded->name << " never calls " << task_id << "\n";
    return 2;
  }
  const auto context = action::make_plan_context(*task);
  auto plan = action::parse_launch_plan(source, context);
  if (!plan) {
    err << "crucible model plan: the launch plan: " << plan.error().message << "\n";
    return 2;
  }
  int sites = 0;
  int failed = 0;
  for (const auto& site : step->second) {
    if (site.call->task != task) continue;
    ++sites;
    auto concrete = action::evaluate_plan(*plan, site.shapes.symbols, context);
    out << site.call->site << " (" << site.count << " calls a step; "
        << tasks::symbols_text(site.shapes.symbols) << ")\n";
    if (!concrete) {
      ++failed;
      out << "  cannot run here: " << concrete.error().message << "\n";
      continue;
    }
    for (const auto& launch : concrete->launches) {
      out << "  " << plan->launches[launch.launch].name_expression << " grid " << dims(launch.grid)
          << " block " << dims(launch.block) << " smem " << launch.smem_bytes << "\n";
    }
  }
  out << "\n"
      << (failed == 0 ? "the plan holds at every call site of " + task_id
                      : "the plan fails at " + std::to_string(failed) + " of " +
                            std::to_string(sites) + " call sites of " + task_id)
      << "\n";
  return failed == 0 ? 0 : 1;
}

int model_generate(const std::filesystem::path& home, const std::filesystem::path& model_file,
                   const tasks::Registry& registry, const std::vector<std::int64_t>& first,
                   int count, std::ostream& out, std::ostream& err) {
  auto loaded = model::load_model(model_file, registry);
  if (!loaded) {
    err << "crucible model generate: " << loaded.error().message << "\n";
    return 2;
  }
  if (loaded->weights == "synthetic") {
    err << "crucible model generate: model " << loaded->name
        << " has synthetic weights; generating needs a trained checkpoint\n";
    return 2;
  }
  auto weights = model::read_llama2c(home / loaded->weights, *loaded);
  if (!weights) {
    err << "crucible model generate: " << weights.error().message << "\n";
    return 2;
  }
  auto decoder = model::OracleDecoder::create(*loaded, std::move(weights).value(),
                                              static_cast<std::int64_t>(first.size()), count);
  if (!decoder) {
    err << "crucible model generate: " << decoder.error().message << "\n";
    return 2;
  }
  auto tokens = decoder->greedy(first, count);
  if (!tokens) {
    err << "crucible model generate: " << tokens.error().message << "\n";
    return 2;
  }
  for (std::size_t s = 0; s < first.size(); ++s) {
    out << first[s] << ":";
    for (const auto token : (*tokens)[s]) out << " " << token;
    out << "\n";
  }
  return 0;
}

}  // namespace crucible::cli
