// Every task's reference and example solution declares a launch plan that parses against the
// task and evaluates on every case: a plan the runner cannot read would turn every step of the
// task into an infra_error.
#include <doctest/doctest.h>

#include <filesystem>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "core/text_file.hpp"
#include "tasks/registry.hpp"

using namespace crucible;

TEST_CASE("task plans: every reference and example solution plan parses and evaluates") {
  const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  const std::filesystem::path root(CRUCIBLE_SOURCE_DIR);
  for (const auto& task : registry->all()) {
    CAPTURE(task.id);
    const auto context = action::make_plan_context(task, 232448);  // an H200's opt-in limit
    std::vector<std::filesystem::path> sources{root / task.reference_path};
    const auto example = task.solution_path();
    REQUIRE_MESSAGE(std::filesystem::exists(example), "every task folder holds a solution.cu");
    sources.push_back(example);
    for (const auto& path : sources) {
      CAPTURE(path.string());
      const auto source = core::read_text_file(path);
      REQUIRE(source.ok());
      const auto plan = action::parse_launch_plan(*source, context);
      REQUIRE_MESSAGE(plan.ok(), plan.error().message);
      for (const auto& c : task.cases) {
        CAPTURE(c.name);
        const auto concrete = action::evaluate_plan(*plan, c.symbols, context);
        CHECK_MESSAGE(concrete.ok(), (concrete.ok() ? "" : concrete.error().message));
        if (concrete.ok()) CHECK_FALSE(concrete->launches.empty());
      }
    }
  }
}
