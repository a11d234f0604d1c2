// Pipeline execution and the stages that need nothing but the server.
#include "env/pipeline.hpp"

#include <chrono>
#include <exception>

#include "action/plan_context.hpp"
#include "core/protocol.hpp"
#include "core/text.hpp"

namespace crucible::env {

core::Value StepResult::to_value() const {
  core::Value out{{"status", core::step_status_name(status)},
                  {"message", core::one_line(message, core::kMaxMessageBytes)},
                  {"reward", reward.to_value()},
                  {"stages", stages},
                  {"compile", compile},
                  {"correctness", correctness},
                  {"timing", timing}};
  if (speedup) out["speedup"] = *speedup;
  if (!model.is_null()) out["model"] = model;
  return out;
}

void Pipeline::add(std::unique_ptr<Stage> stage) { stages_.push_back(std::move(stage)); }

StepResult Pipeline::run(const StepJob& job) const {
  StepResult result;
  StepArtifacts artifacts;
  result.status = core::StepStatus::kOk;
  for (const auto& stage : stages_) {
    const auto start = std::chrono::steady_clock::now();
    bool keep_going = false;
    try {
      keep_going = stage->run(job, artifacts, result);
    } catch (const std::exception& e) {
      result.status = core::StepStatus::kInfraError;
      result.message = std::string(stage->name()) + " stage failed inside the server: " + e.what();
    }
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    result.stages[std::string(stage->name())] = elapsed.count();
    if (!keep_going) {
      if (result.status == core::StepStatus::kOk) {
        // A stage that stops the step must say why; treat silence as the server's fault.
        result.status = core::StepStatus::kInfraError;
        result.message = std::string(stage->name()) + " stage stopped without a status";
      }
      break;
    }
  }
  rewards::Measurement measurement(result.status, result.speedup);
  measurement.candidate_ns = result.candidate_ns;
  measurement.reference_ns = result.reference_ns;
  measurement.floor_ns = result.floor_ns;
  measurement.speedup_low = result.speedup_low;
  measurement.speedup_high = result.speedup_high;
  if (result.model.is_object() && result.model.contains("step_speedup") &&
      result.model.contains("op_share") && result.model["step_speedup"].is_number() &&
      result.model["op_share"].is_number()) {
    measurement.step_speedup = result.model["step_speedup"].get<double>();
    measurement.op_share = result.model["op_share"].get<double>();
  }
  result.reward = rewards::compute_reward(job.reward_spec, measurement);
  return result;
}

core::Value Pipeline::describe() const {
  core::Value out = core::Value::object();
  for (const auto& stage : stages_) out[std::string(stage->name())] = stage->available();
  return out;
}

core::Value Pipeline::stats() const {
  core::Value out = core::Value::object();
  for (const auto& stage : stages_) {
    if (core::Value counters = stage->stats(); !counters.is_null()) {
      out[std::string(stage->name())] = std::move(counters);
    }
  }
  return out;
}

bool ValidateStage::run(const StepJob& job, StepArtifacts& artifacts, StepResult& result) {
  if (job.source.find('\0') != std::string::npos) {
    result.status = core::StepStatus::kInvalidAction;
    result.message = "the source contains a NUL byte; send plain CUDA C++ text";
    return false;
  }
  if (job.source.find("__global__") == std::string::npos) {
    result.status = core::StepStatus::kInvalidAction;
    result.message =
        "the source declares no kernel: define at least one __global__ function and launch it "
        "with a // @launch directive";
    return false;
  }
  const auto context = action::make_plan_context(*job.task);
  auto plan = action::parse_action_plan(job.source, job.plan, context);
  if (!plan) {
    result.status = core::StepStatus::kInvalidAction;
    result.message = plan.error().message;
    return false;
  }
  if (job.model) artifacts.parsed_plan = *plan;
  std::size_t failed_case = 0;
  auto evaluated =
      action::evaluate_on_cases(std::move(plan).value(), *job.task, context, &failed_case);
  if (!evaluated) {
    result.status = core::StepStatus::kInvalidAction;
    // A hidden case's shape is not for the agent to see.
    result.message = job.task->cases[failed_case].hidden
                         ? "the launch plan is invalid for one of the hidden cases (other shapes "
                           "than the visible ones); make grid, block, shared memory and "
                           "workspace sizes valid for every shape"
                         : evaluated.error().message;
    return false;
  }
  artifacts.plan = std::move(evaluated).value();
  return true;
}

bool UnavailableStage::run(const StepJob& /*job*/, StepArtifacts& /*artifacts*/,
                           StepResult& result) {
  result.status = core::StepStatus::kInfraError;
  result.message = reason_;
  return false;
}

}  // namespace crucible::env
