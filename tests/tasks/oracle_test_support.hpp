// Shared by the oracle test files: the repository's tasks and cases by name, the oracle run on
// explicit tensors or on a case, and the committed stories260K captures compared with it.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/result.hpp"
#include "tasks/captured.hpp"
#include "tasks/generators.hpp"
#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"

namespace crucible::oracle_test {

using Tensors = std::map<std::string, tasks::OracleTensor>;

inline const std::filesystem::path& captures_dir() {
  static const std::filesystem::path path =
      std::filesystem::path(CRUCIBLE_SOURCE_DIR) / "tasks" / "capture" / "cases" / "stories260K";
  return path;
}

// The repository's tasks, loaded once per test binary.
inline const tasks::Registry& repository() {
  static const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  return *registry;
}

// The task `id` of the repository.
inline const tasks::Task& repository_task(const std::string& id) {
  const tasks::Task* task = repository().find(id);
  REQUIRE_MESSAGE(task != nullptr, "no task " << id);
  return *task;
}

inline const tasks::Case& case_named(const tasks::Task& task, const std::string& name) {
  const tasks::Case* c = task.find_case(name);
  REQUIRE_MESSAGE(c != nullptr, "no case " << name << " in " << task.id);
  return *c;
}

// Runs the oracle of `task_id` on explicit tensors, with `symbols` and `scalars` over those of
// the task's first case, filling in the outputs; returns what the oracle returned (an oracle
// refuses a case it cannot compute).
inline core::Status oracle_status(const std::string& task_id,
                                  const std::map<std::string, std::int64_t>& symbols,
                                  Tensors& tensors,
                                  const std::map<std::string, double>& scalars = {}) {
  const tasks::Task& task = repository_task(task_id);
  tasks::Case c = task.cases.front();
  c.symbols = symbols;
  for (const auto& [name, value] : scalars) c.scalars[name] = value;
  const auto* oracle = tasks::find_oracle(task_id);
  REQUIRE(oracle != nullptr);
  return (*oracle)(tasks::OracleCall{task, c, tensors});
}

// oracle_status, which must succeed; returns the tensors with the outputs filled in.
inline Tensors call_oracle(const std::string& task_id,
                           const std::map<std::string, std::int64_t>& symbols, Tensors tensors,
                           const std::map<std::string, double>& scalars = {}) {
  const core::Status status = oracle_status(task_id, symbols, tensors, scalars);
  REQUIRE_MESSAGE(status.ok(), status.error().message);
  return tensors;
}

// Runs the oracle on case `c` as the runner builds it (case seed 1, draw 0), which must succeed;
// returns every tensor, the outputs filled in.
inline Tensors run_case(const tasks::Task& task, const tasks::Case& c) {
  auto tensors = tasks::run_oracle(task, c, tasks::case_seed(c, 1));
  REQUIRE_MESSAGE(tensors.ok(), tensors.error().message);
  return std::move(tensors).value();
}

inline bool within(double got, double want, const tasks::Tolerance& tolerance) {
  return std::abs(got - want) <= tolerance.atol + tolerance.rtol * std::abs(want);
}

// ---- captured cases -----------------------------------------------------------------------

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
inline std::vector<const tasks::Case*> captured_cases(const tasks::Task& task) {
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
inline RecordedCall recorded_call(const tasks::Task& task, const tasks::Case& c) {
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

// A case of `task` with `symbols` and `scalars` (over the first case's) that reads every input
// of `call` from its recording.
inline tasks::Case case_reading(const tasks::Task& task, const RecordedCall& call,
                                const std::map<std::string, std::int64_t>& symbols,
                                const std::map<std::string, double>& scalars = {}) {
  tasks::Case c = task.cases.front();
  c.name = call.name;
  c.symbols = symbols;
  for (const auto& [name, value] : scalars) c.scalars[name] = value;
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

// The case of a norm task (input [num_tokens, hidden_size], scalar epsilon) that reads `call`.
inline tasks::Case norm_case_reading(const tasks::Task& task, const RecordedCall& call) {
  const tasks::CapturedTensor* input = call.group.tensor(call.name, "input");
  REQUIRE(input != nullptr);
  REQUIRE(input->shape.size() == 2);
  return case_reading(task, call,
                      {{"num_tokens", input->shape[0]}, {"hidden_size", input->shape[1]}},
                      {{"epsilon", call.record().scalars.at("epsilon").get<double>()}});
}

// A recorded tensor, decoded.
inline tasks::OracleTensor decoded(const tasks::CapturedTensor& t) {
  return {t.dtype, t.shape,
          tasks::decode_values(t.dtype, t.bytes.data(), static_cast<std::size_t>(t.numel()))};
}

// Runs the oracle on `c` and compares every out/inout tensor with its recorded value (an inout
// tensor's value after the call), within the task's tolerance for it; the tensors named in
// `exact` must equal the recording exactly. Returns the number of elements compared.
inline std::size_t compare_with_recording(const tasks::Task& task, const tasks::Case& c,
                                          const RecordedCall& call,
                                          const std::set<std::string>& exact = {}) {
  const Tensors tensors = run_case(task, c);
  std::size_t compared = 0;
  for (const auto& spec : task.tensors) {
    if (spec.role == tasks::Role::kIn) continue;
    CAPTURE(spec.name);
    const bool after = spec.role == tasks::Role::kInOut;
    const tasks::CapturedTensor* recorded = call.group.tensor(call.name, spec.name, after);
    REQUIRE(recorded != nullptr);
    const auto want = decoded(*recorded).values;
    const auto& got = tensors.at(spec.name).values;
    REQUIRE(got.size() == want.size());
    REQUIRE(spec.tolerance.has_value());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      bad += within(want[i], got[i], *spec.tolerance) ? 0 : 1;
    }
    CHECK(bad == 0);
    if (exact.count(spec.name) > 0) CHECK(got == want);
    compared += want.size();
  }
  return compared;
}

// compare_with_recording on every captured case of `task`, each against the call it reads;
// returns the number of elements compared.
inline std::size_t compare_captured_cases(const tasks::Task& task,
                                          const std::set<std::string>& exact = {}) {
  std::size_t compared = 0;
  for (const tasks::Case* c : captured_cases(task)) {
    CAPTURE(c->name);
    compared += compare_with_recording(task, *c, recorded_call(task, *c), exact);
  }
  return compared;
}

// Every captured case of `task` is hidden with a fixed seed and reads one recorded stories260K
// call of `op`: each tensor has the recorded dtype and element count (and shape, unless the task
// declares it differently, `same_shapes` false), each scalar named in `scalars` the recorded
// value, and the values the runner builds are the recorded bytes in both correctness runs. The
// captured cases cover `expected_phases` (an op that runs only in decode has no prefill call).
inline void check_captured_cases(const tasks::Task& task, const std::string& op,
                                 const std::vector<std::string>& scalars, bool same_shapes,
                                 const std::set<std::string>& expected_phases = {"decode",
                                                                                 "prefill"}) {
  const auto cases = captured_cases(task);
  CHECK(cases.size() >= 2);
  std::set<std::string> phases;
  for (const tasks::Case* c : cases) {
    CAPTURE(c->name);
    CHECK(c->hidden);
    CHECK(c->seed.has_value());
    const RecordedCall call = recorded_call(task, *c);
    CHECK(call.group.model == "stories260K");
    CHECK(call.group.op == op);
    phases.insert(call.group.phase);
    for (const auto& name : scalars) {
      CHECK(c->scalars.at(name) == call.record().scalars.at(name).get<double>());
    }
    for (const auto& spec : task.tensors) {
      CAPTURE(spec.name);
      const tasks::CapturedTensor* recorded = call.group.tensor(call.name, spec.name);
      REQUIRE(recorded != nullptr);
      CHECK(recorded->dtype == spec.dtype);
      const auto count = tasks::element_count(spec, *c);
      REQUIRE(count.ok());
      CHECK(*count == recorded->numel());
      if (same_shapes) {
        const auto shape = tasks::resolve_shape(spec, *c);
        REQUIRE(shape.ok());
        CHECK(*shape == recorded->shape);
      }
      if (!tasks::is_input(spec.role)) continue;
      for (const std::uint64_t draw : {0, 1}) {
        const auto bytes = tasks::generate_tensor(*c, spec, tasks::case_seed(*c, 1), draw);
        REQUIRE_MESSAGE(bytes.ok(), bytes.error().message);
        CHECK(*bytes == recorded->bytes);
      }
    }
  }
  CHECK(phases == expected_phases);
}

// Calls `compare(call)` for every call recorded in the stories260K groups of `op` in `phases`
// (by default prefill and decode steps 0 and 3; an op that runs only in decode has no prefill
// group); returns how many calls there were.
template <class Compare>
std::size_t for_each_recorded_call(const std::string& op, Compare compare,
                                   const std::vector<std::string>& phases = {
                                       "prefill", "decode_step0", "decode_step3"}) {
  std::size_t calls = 0;
  for (const std::string& phase : phases) {
    const std::string file = phase + "." + op + ".safetensors";
    CAPTURE(file);
    auto group = tasks::load_captured(captures_dir() / file);
    REQUIRE_MESSAGE(group.ok(), group.error().message);
    for (const auto& rec : group->cases) {
      CAPTURE(rec.name);
      compare(RecordedCall{*group, rec.name});
      ++calls;
    }
  }
  return calls;
}

}  // namespace crucible::oracle_test
