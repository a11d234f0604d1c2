// The llm/fused_add_rms_norm oracle on hand-computed rows, on its own task's values, and against
// the stories260K calls recorded by tasks/capture.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/oracles/oracle.hpp"
#include "tasks/captured.hpp"
#include "tasks/generators.hpp"
#include "tasks/registry.hpp"
#include "tests/kernels/oracle_test_support.hpp"

using namespace crucible;

namespace {

using Tensors = std::map<std::string, kernels::OracleTensor>;

// Runs the oracle on one row of `hidden` channels with the given values and epsilon.
Tensors run_row(std::vector<double> input, std::vector<double> residual, std::vector<double> weight,
                double epsilon) {
  auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  const tasks::Task* task = registry->find("llm/fused_add_rms_norm");
  REQUIRE(task != nullptr);
  const auto hidden = static_cast<std::int64_t>(weight.size());
  tasks::Case c = task->cases.front();
  c.symbols = {{"num_tokens", 1}, {"hidden_size", hidden}};
  c.scalars["epsilon"] = epsilon;
  Tensors tensors{
      {"input", {core::DType::kBF16, {1, hidden}, std::move(input)}},
      {"residual", {core::DType::kBF16, {1, hidden}, std::move(residual)}},
      {"weight", {core::DType::kBF16, {hidden}, std::move(weight)}},
  };
  const auto* oracle = kernels::find_oracle("llm/fused_add_rms_norm");
  REQUIRE(oracle != nullptr);
  REQUIRE((*oracle)(kernels::OracleCall{*task, c, tensors}).ok());
  return tensors;
}

const tasks::Task& fused_task() { return oracle_test::repository_task("llm/fused_add_rms_norm"); }

// A recorded call: the case group it is in and its name there ("layer4.ffn_norm").
struct RecordedCall {
  tasks::CapturedGroup group;
  std::string name;
  const tasks::CapturedCase& record() const {
    for (const auto& rec : group.cases) {
      if (rec.name == name) return rec;
    }
    FAIL("no recorded call " << name << " in " << group.path);
    return group.cases.front();
  }
};

// The task's cases whose values come from a capture.
std::vector<const tasks::Case*> captured_cases(const tasks::Task& task) {
  std::vector<const tasks::Case*> cases;
  for (const auto& c : task.cases) {
    for (const auto& [name, values] : c.values) {
      if (values.kind == tasks::GeneratorKind::kCaptured) {
        cases.push_back(&c);
        break;
      }
    }
  }
  return cases;
}

// The call a captured case reads: every input must come from the same call of the same file,
// under the task tensor's own argument name (an inout argument's value before the call).
RecordedCall recorded_call(const tasks::Task& task, const tasks::Case& c) {
  std::optional<RecordedCall> call;
  std::filesystem::path file;
  for (const auto& spec : task.tensors) {
    if (!tasks::is_input(spec.role)) continue;
    CAPTURE(spec.name);
    const tasks::GeneratorSpec& values = c.values.at(spec.name);
    REQUIRE(values.kind == tasks::GeneratorKind::kCaptured);
    const auto slash = values.tensor.rfind('/');
    REQUIRE(slash != std::string::npos);
    CHECK(values.tensor.substr(slash + 1) == spec.name);
    const std::string name = values.tensor.substr(0, slash);
    if (!call) {
      auto group = tasks::load_captured(values.file_path);
      REQUIRE_MESSAGE(group.ok(), group.error().message);
      call = RecordedCall{std::move(group).value(), name};
      file = values.file_path;
    } else {
      CHECK(values.file_path == file);
      CHECK(name == call->name);
    }
  }
  REQUIRE(call.has_value());
  return std::move(*call);
}

// A case of `task` that reads every input of `call` from its recording, symbols from its shapes.
tasks::Case case_reading(const tasks::Task& task, const RecordedCall& call) {
  tasks::Case c = task.cases.front();
  c.name = call.name;
  const tasks::CapturedTensor* input = call.group.tensor(call.name, "input");
  REQUIRE(input != nullptr);
  REQUIRE(input->shape.size() == 2);
  c.symbols = {{"num_tokens", input->shape[0]}, {"hidden_size", input->shape[1]}};
  c.scalars["epsilon"] = call.record().scalars.at("epsilon").get<double>();
  for (const auto& spec : task.tensors) {
    if (!tasks::is_input(spec.role)) continue;
    tasks::GeneratorSpec values;
    values.kind = tasks::GeneratorKind::kCaptured;
    values.file_path = call.group.path;
    values.tensor = call.name + "/" + spec.name;
    c.values[spec.name] = values;
  }
  return c;
}

bool within(double got, double want, const tasks::Tolerance& tolerance) {
  return std::abs(got - want) <= tolerance.atol + tolerance.rtol * std::abs(want);
}

// Runs the oracle on `c` and compares both updated tensors with their recorded values after the
// call, within the task's tolerance for each; the stored sums must also be the recorded bf16
// values exactly (both round the exact sum to nearest even). Returns the elements compared.
std::size_t compare_with_recording(const tasks::Task& task, const tasks::Case& c,
                                   const RecordedCall& call) {
  auto tensors = kernels::run_oracle(task, c, tasks::case_seed(c, 1));
  REQUIRE_MESSAGE(tensors.ok(), tensors.error().message);
  std::size_t compared = 0;
  for (const auto& spec : task.tensors) {
    if (spec.role == tasks::Role::kIn) continue;
    CAPTURE(spec.name);
    const tasks::CapturedTensor* recorded = call.group.tensor(call.name, spec.name, true);
    REQUIRE(recorded != nullptr);
    const auto want = kernels::decode_values(recorded->dtype, recorded->bytes.data(),
                                             static_cast<std::size_t>(recorded->numel()));
    const auto& got = tensors->at(spec.name).values;
    REQUIRE(got.size() == want.size());
    REQUIRE(spec.tolerance.has_value());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      bad += within(want[i], got[i], *spec.tolerance) ? 0 : 1;
    }
    CHECK(bad == 0);
    if (spec.name == "residual") CHECK(got == want);
    compared += want.size();
  }
  return compared;
}

}  // namespace

TEST_CASE("fused_add_rms_norm oracle: adds, stores the sum and normalises it") {
  // input (1, 2) + residual (2, 2) = (3, 4); rms = sqrt((9 + 16) / 2) = sqrt(12.5).
  auto t = run_row({1.0, 2.0}, {2.0, 2.0}, {1.0, 2.0}, 0.0);
  CHECK(t["residual"].values[0] == 3.0);
  CHECK(t["residual"].values[1] == 4.0);
  CHECK(t["input"].values[0] == doctest::Approx(3.0 / std::sqrt(12.5)).epsilon(1e-15));
  CHECK(t["input"].values[1] == doctest::Approx(8.0 / std::sqrt(12.5)).epsilon(1e-15));
}

TEST_CASE("fused_add_rms_norm oracle: the sum is rounded to bf16, ties to even") {
  // Near 1 a bf16 ulp is 2^-7. 1 + 2^-8 is a tie between 1 (even) and 1 + 2^-7: rounds to 1.
  // 1 + 3 * 2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6: rounds to 1 + 2^-6.
  // 2 + 2^-8 is below half an ulp at 2 (2^-7): rounds to 2.
  auto t = run_row({1.0, 1.0, 2.0}, {0x1p-8, 3 * 0x1p-8, 0x1p-8}, {1.0, 1.0, 1.0}, 0.0);
  CHECK(t["residual"].values[0] == 1.0);
  CHECK(t["residual"].values[1] == 1.0 + 0x1p-6);
  CHECK(t["residual"].values[2] == 2.0);
}

TEST_CASE("fused_add_rms_norm oracle: the norm is taken over the rounded sums") {
  // input (1, 3) + residual (2^-8, 1) stores (1, 4), so rms = sqrt((1 + 16) / 2) = sqrt(8.5)
  // with epsilon 0.5 added: sqrt(9). Unrounded, the first sum would give a different rms.
  auto t = run_row({1.0, 3.0}, {0x1p-8, 1.0}, {2.0, 0.5}, 0.5);
  CHECK(t["residual"].values[0] == 1.0);
  CHECK(t["residual"].values[1] == 4.0);
  CHECK(t["input"].values[0] == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(t["input"].values[1] == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
}

TEST_CASE(
    "fused_add_rms_norm oracle: on a generated case every stored sum is a bf16 value and "
    "every row of input / weight has unit mean square") {
  auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE(registry.ok());
  const tasks::Task* task = registry->find("llm/fused_add_rms_norm");
  REQUIRE(task != nullptr);
  const tasks::Case* chosen = nullptr;
  for (const auto& c : task->cases) {
    if (c.name == "h_tokens_7") chosen = &c;
  }
  REQUIRE(chosen != nullptr);
  auto tensors = kernels::run_oracle(*task, *chosen, tasks::case_seed(*chosen, 1));
  REQUIRE_MESSAGE(tensors.ok(), tensors.error().message);
  const auto& residual = tensors->at("residual");
  const auto& input = tensors->at("input");
  const auto& weight = tensors->at("weight");
  const std::int64_t hidden = chosen->symbols.at("hidden_size");
  const double epsilon = chosen->scalars.at("epsilon");
  std::size_t unrounded = 0;
  for (const double v : residual.values) {
    unrounded += kernels::round_to_dtype(core::DType::kBF16, v) == v ? 0 : 1;
  }
  CHECK(unrounded == 0);
  for (std::int64_t t = 0; t < chosen->symbols.at("num_tokens"); ++t) {
    double mean_square = 0.0;
    double residual_mean_square = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) {
      const double normalised = input.values[t * hidden + i] / weight.values[i];
      mean_square += normalised * normalised / static_cast<double>(hidden);
      const double r = residual.values[t * hidden + i];
      residual_mean_square += r * r / static_cast<double>(hidden);
    }
    CAPTURE(t);
    // mean((r / rms)^2) = ms / (ms + epsilon), with ms the mean square of the stored row.
    CHECK(mean_square ==
          doctest::Approx(residual_mean_square / (residual_mean_square + epsilon)).epsilon(1e-12));
    // Residual std 4 plus input std 1: the stored row has a mean square near 17.
    CHECK(residual_mean_square > 12.0);
    CHECK(residual_mean_square < 23.0);
  }
}

TEST_CASE(
    "fused_add_rms_norm: each captured case reads one recorded stories260K call, prefill and "
    "decode") {
  // The hidden captured cases name the recording in the manifest (generator "captured"): their
  // symbols must give the recorded shapes, their epsilon the recorded one, and the values the
  // runner builds must be the recorded bytes (input and residual before the call), in both
  // correctness runs.
  const tasks::Task& task = fused_task();
  const auto cases = captured_cases(task);
  CHECK(cases.size() >= 2);
  std::set<std::string> phases;
  for (const tasks::Case* c : cases) {
    CAPTURE(c->name);
    CHECK(c->hidden);
    CHECK(c->seed.has_value());
    const RecordedCall call = recorded_call(task, *c);
    CHECK(call.group.model == "stories260K");
    CHECK(call.group.op == "fused_add_rms_norm");
    phases.insert(call.group.phase);
    CHECK(c->scalars.at("epsilon") == call.record().scalars.at("epsilon").get<double>());
    for (const auto& spec : task.tensors) {
      CAPTURE(spec.name);
      const tasks::CapturedTensor* recorded = call.group.tensor(call.name, spec.name);
      REQUIRE(recorded != nullptr);
      CHECK(recorded->dtype == spec.dtype);
      const auto shape = tasks::resolve_shape(spec, *c);
      REQUIRE(shape.ok());
      CHECK(*shape == recorded->shape);
      for (const std::uint64_t draw : {0, 1}) {
        const auto bytes = tasks::generate_tensor(*c, spec, tasks::case_seed(*c, 1), draw);
        REQUIRE_MESSAGE(bytes.ok(), bytes.error().message);
        CHECK(*bytes == recorded->bytes);
      }
    }
  }
  CHECK(phases == std::set<std::string>{"decode", "prefill"});
}

TEST_CASE(
    "fused_add_rms_norm oracle: on every captured case, matches the recorded input and residual "
    "within tolerance") {
  const tasks::Task& task = fused_task();
  std::size_t compared = 0;
  for (const tasks::Case* c : captured_cases(task)) {
    CAPTURE(c->name);
    compared += compare_with_recording(task, *c, recorded_call(task, *c));
  }
  CHECK(compared >= 2 * (27 + 4) * 64);
}

TEST_CASE(
    "fused_add_rms_norm oracle: reproduces every recorded stories260K call within tolerance") {
  // Every norm point but layer 0's attention norm: 10 calls per step, the residual stream
  // growing from 0.25 to 2 with depth, and sums that cancel to exactly zero.
  const tasks::Task& task = fused_task();
  std::size_t calls = 0;
  std::size_t compared = 0;
  for (const char* file :
       {"prefill.fused_add_rms_norm.safetensors", "decode_step0.fused_add_rms_norm.safetensors",
        "decode_step3.fused_add_rms_norm.safetensors"}) {
    CAPTURE(file);
    auto group = tasks::load_captured(oracle_test::captures_dir() / file);
    REQUIRE_MESSAGE(group.ok(), group.error().message);
    for (const auto& rec : group->cases) {
      CAPTURE(rec.name);
      const RecordedCall call{*group, rec.name};
      compared += compare_with_recording(task, case_reading(task, call), call);
      ++calls;
    }
  }
  CHECK(calls == 30);
  CHECK(compared == 2 * (27 + 4 + 4) * 10 * 64);
}
