// Every task's reference and example solution declares a launch plan that parses against the
// task and evaluates on every case: a plan the runner cannot read would turn every step of the
// task into an infra_error.
#include <doctest/doctest.h>

#include <filesystem>

#include "core/text_file.hpp"
#include "sandbox/launch_plan.hpp"
#include "sandbox/plan_context.hpp"
#include "tasks/registry.hpp"

using namespace crucible;

TEST_CASE("task plans: every reference and example solution plan parses and evaluates") {
  const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  const std::filesystem::path root(CRUCIBLE_SOURCE_DIR);
  for (const auto& task : registry->all()) {
    CAPTURE(task.id);
    const auto context = sandbox::make_plan_context(task, 232448);  // an H200's opt-in limit
    std::vector<std::filesystem::path> sources{root / task.reference_path};
    const auto example = root / "examples/solutions" / (task.id + ".cu");
    if (std::filesystem::exists(example)) sources.push_back(example);
    for (const auto& path : sources) {
      CAPTURE(path.string());
      const auto source = core::read_text_file(path);
      REQUIRE(source.ok());
      const auto plan = sandbox::parse_launch_plan(*source, context);
      REQUIRE_MESSAGE(plan.ok(), plan.error().message);
      for (const auto& c : task.cases) {
        CAPTURE(c.name);
        const auto concrete = sandbox::evaluate_plan(*plan, c.symbols, context);
        CHECK_MESSAGE(concrete.ok(), (concrete.ok() ? "" : concrete.error().message));
        if (concrete.ok()) CHECK_FALSE(concrete->launches.empty());
      }
    }
  }
}
