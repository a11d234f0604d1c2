// The llm/rms_norm oracle against the stories260K calls recorded by tasks/capture: the task's
// captured hidden cases and every recorded call.
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

const tasks::Task& rms_norm_task() { return oracle_test::repository_task("llm/rms_norm"); }

// A recorded call: the case group it is in and its name there ("layer0.attn_norm").
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
// under the task tensor's own argument name.
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

// Runs the oracle on `c` and compares every output with the recorded one, within the task's
// tolerance for that output. Returns the number of elements compared.
std::size_t compare_with_recording(const tasks::Task& task, const tasks::Case& c,
                                   const RecordedCall& call) {
  auto tensors = kernels::run_oracle(task, c, tasks::case_seed(c, 1));
  REQUIRE_MESSAGE(tensors.ok(), tensors.error().message);
  std::size_t compared = 0;
  for (const auto& spec : task.tensors) {
    if (spec.role == tasks::Role::kIn) continue;
    CAPTURE(spec.name);
    const bool after = spec.role == tasks::Role::kInOut;
    const tasks::CapturedTensor* recorded = call.group.tensor(call.name, spec.name, after);
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
    compared += want.size();
  }
  return compared;
}

}  // namespace

TEST_CASE("rms_norm: each captured case reads one recorded stories260K call, prefill and decode") {
  // The hidden captured cases name the recording in the manifest (generator "captured"): their
  // symbols must give the recorded shapes, their epsilon the recorded one, and the values the
  // runner builds must be the recorded bytes themselves, in both correctness runs.
  const tasks::Task& task = rms_norm_task();
  const auto cases = captured_cases(task);
  CHECK(cases.size() >= 2);
  std::set<std::string> phases;
  for (const tasks::Case* c : cases) {
    CAPTURE(c->name);
    CHECK(c->hidden);
    CHECK(c->seed.has_value());
    const RecordedCall call = recorded_call(task, *c);
    CHECK(call.group.model == "stories260K");
    CHECK(call.group.op == "rms_norm");
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
      if (!tasks::is_input(spec.role)) continue;
      for (const std::uint64_t draw : {0, 1}) {
        const auto bytes = tasks::generate_tensor(*c, spec, tasks::case_seed(*c, 1), draw);
        REQUIRE_MESSAGE(bytes.ok(), bytes.error().message);
        CHECK(*bytes == recorded->bytes);
      }
    }
  }
  CHECK(phases == std::set<std::string>{"decode", "prefill"});
}

TEST_CASE("rms_norm oracle: on every captured case, matches the recorded out within tolerance") {
  const tasks::Task& task = rms_norm_task();
  std::size_t compared = 0;
  for (const tasks::Case* c : captured_cases(task)) {
    CAPTURE(c->name);
    compared += compare_with_recording(task, *c, recorded_call(task, *c));
  }
  CHECK(compared >= (27 + 4) * 64);
}

TEST_CASE("rms_norm oracle: reproduces every recorded stories260K call within tolerance") {
  // Layer 0's attention norm sees the embeddings; every other norm point the residual stream,
  // which grows with depth: 11 calls per step, scales from 0.25 to 2.
  const tasks::Task& task = rms_norm_task();
  std::size_t calls = 0;
  std::size_t compared = 0;
  for (const char* file : {"prefill.rms_norm.safetensors", "decode_step0.rms_norm.safetensors",
                           "decode_step3.rms_norm.safetensors"}) {
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
  CHECK(calls == 33);
  CHECK(compared == (27 + 4 + 4) * 11 * 64);
}
