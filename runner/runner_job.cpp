// RunJob / RunReport <-> Value.
#include "runner/runner_job.hpp"

namespace crucible::runner {
namespace {

using core::Value;

Value module_to_value(const CompiledModule& module) {
  return Value{{"cubin", Value::binary(Value::binary_t::container_type(module.cubin.begin(),
                                                                       module.cubin.end()))},
               {"lowered_names", module.lowered_names}};
}

core::Result<CompiledModule> module_from_value(const Value& value, const char* what) {
  const auto bad = [what](const std::string& message) {
    return core::Error{core::ErrorCode::kBadRequest, std::string(what) + ": " + message};
  };
  if (!value.is_object()) return bad("not a map");
  CompiledModule module;
  const auto cubin = value.find("cubin");
  if (cubin == value.end() || !cubin->is_binary()) return bad("cubin must be binary");
  const auto& bytes = cubin->get_binary();
  module.cubin.assign(bytes.begin(), bytes.end());
  const auto names = value.find("lowered_names");
  if (names == value.end() || !names->is_object()) return bad("lowered_names must be a map");
  for (auto it = names->begin(); it != names->end(); ++it) {
    if (!it->is_string()) return bad("lowered name must be a string");
    module.lowered_names[it.key()] = it->get<std::string>();
  }
  return module;
}

template <class T>
T get_or(const Value& value, const char* key, T fallback) {
  const auto it = value.find(key);
  if (it == value.end() || it->is_null()) return fallback;
  return it->get<T>();
}

}  // namespace

Value ModelCheck::to_value() const {
  Value out{{"model", model},
            {"steps", steps},
            {"references", Value::array()},
            {"candidate", action::to_value(candidate)},
            {"min_samples", min_samples},
            {"max_samples", max_samples},
            {"target_rel_ci", target_rel_ci},
            {"time_cap_ms", time_cap_ms},
            {"hidden_states", hidden_states}};
  for (const auto& reference : references) {
    out["references"].push_back(Value{{"task", reference.task},
                                      {"task_hash", reference.task_hash},
                                      {"compiled", module_to_value(reference.compiled)},
                                      {"plan", action::to_value(reference.plan)}});
  }
  return out;
}

core::Result<ModelCheck> ModelCheck::from_value(const Value& value) {
  try {
    ModelCheck check;
    check.model = value.at("model").get<std::string>();
    for (const auto& step : value.at("steps")) {
      std::map<std::string, std::int64_t> variables;
      for (const auto& [name, v] : step.items()) variables[name] = v.get<std::int64_t>();
      check.steps.push_back(std::move(variables));
    }
    if (check.steps.empty())
      return core::Error{core::ErrorCode::kBadRequest, "model check: no steps"};
    for (const auto& entry : value.at("references")) {
      ModelReference reference;
      reference.task = entry.at("task").get<std::string>();
      reference.task_hash = entry.at("task_hash").get<std::string>();
      auto compiled = module_from_value(entry.at("compiled"), "model reference");
      if (!compiled) return compiled.error();
      reference.compiled = std::move(compiled).value();
      auto plan = action::evaluated_plan_from_value(entry.at("plan"));
      if (!plan) return plan.error();
      reference.plan = std::move(plan).value();
      check.references.push_back(std::move(reference));
    }
    auto candidate = action::evaluated_plan_from_value(value.at("candidate"));
    if (!candidate) return candidate.error();
    check.candidate = std::move(candidate).value();
    check.min_samples = get_or(value, "min_samples", check.min_samples);
    check.max_samples = get_or(value, "max_samples", check.max_samples);
    check.target_rel_ci = get_or(value, "target_rel_ci", check.target_rel_ci);
    check.time_cap_ms = get_or(value, "time_cap_ms", check.time_cap_ms);
    check.hidden_states = get_or(value, "hidden_states", check.hidden_states);
    return check;
  } catch (const std::exception& e) {
    return core::Error{core::ErrorCode::kBadRequest,
                       std::string("malformed model check: ") + e.what()};
  }
}

Value RunJob::to_value() const {
  Value out{{"id", id},
            {"task", task},
            {"task_hash", task_hash},
            {"seed", seed},
            {"secret", secret},
            {"reference", module_to_value(reference)},
            {"candidate", module_to_value(candidate)},
            {"reference_plan", action::to_value(reference_plan)},
            {"candidate_plan", action::to_value(candidate_plan)},
            {"time", time},
            {"kernel_timeout_ms", kernel_timeout_ms},
            {"timing",
             {{"target_rel_ci", timing.target_rel_ci},
              {"min_samples", timing.min_samples},
              {"max_samples", timing.max_samples},
              {"warmup_calls", timing.warmup_calls},
              {"time_cap_ms", timing.time_cap_ms},
              {"step_budget_ms", timing.step_budget_ms},
              {"check_fraction", timing.check_fraction}}}};
  if (model) out["model"] = model->to_value();
  return out;
}

core::Result<RunJob> RunJob::from_value(const Value& value) {
  try {
    RunJob job;
    job.id = value.at("id").get<std::uint64_t>();
    job.task = value.at("task").get<std::string>();
    job.seed = value.at("seed").get<std::uint64_t>();
    job.secret = value.at("secret").get<std::uint64_t>();
    auto reference = module_from_value(value.at("reference"), "reference");
    if (!reference) return reference.error();
    job.reference = std::move(reference).value();
    auto candidate = module_from_value(value.at("candidate"), "candidate");
    if (!candidate) return candidate.error();
    job.candidate = std::move(candidate).value();
    job.task_hash = value.at("task_hash").get<std::string>();
    auto reference_plan = action::evaluated_plan_from_value(value.at("reference_plan"));
    if (!reference_plan) return reference_plan.error();
    job.reference_plan = std::move(reference_plan).value();
    auto candidate_plan = action::evaluated_plan_from_value(value.at("candidate_plan"));
    if (!candidate_plan) return candidate_plan.error();
    job.candidate_plan = std::move(candidate_plan).value();
    job.time = value.at("time").get<bool>();
    job.kernel_timeout_ms = get_or(value, "kernel_timeout_ms", job.kernel_timeout_ms);
    const Value& timing = value.at("timing");
    job.timing.target_rel_ci = get_or(timing, "target_rel_ci", job.timing.target_rel_ci);
    job.timing.min_samples = get_or(timing, "min_samples", job.timing.min_samples);
    job.timing.max_samples = get_or(timing, "max_samples", job.timing.max_samples);
    job.timing.warmup_calls = get_or(timing, "warmup_calls", job.timing.warmup_calls);
    job.timing.time_cap_ms = get_or(timing, "time_cap_ms", job.timing.time_cap_ms);
    job.timing.step_budget_ms = get_or(timing, "step_budget_ms", job.timing.step_budget_ms);
    job.timing.check_fraction = get_or(timing, "check_fraction", job.timing.check_fraction);
    if (const auto it = value.find("model"); it != value.end() && !it->is_null()) {
      auto model = ModelCheck::from_value(*it);
      if (!model) return model.error();
      job.model = std::move(model).value();
    }
    return job;
  } catch (const std::exception& e) {
    return core::Error{core::ErrorCode::kBadRequest, std::string("malformed run job: ") + e.what()};
  }
}

Value RunReport::to_value() const {
  Value out{{"id", id},
            {"status", core::step_status_name(status)},
            {"message", message},
            {"correctness", correctness},
            {"timing", timing},
            {"device", device},
            {"context_lost", context_lost}};
  if (speedup) out["speedup"] = *speedup;
  if (!model.is_null()) out["model"] = model;
  return out;
}

core::Result<RunReport> RunReport::from_value(const Value& value) {
  try {
    RunReport report;
    report.id = value.at("id").get<std::uint64_t>();
    const auto status = core::step_status_from_name(value.at("status").get<std::string>());
    if (!status) return core::Error{core::ErrorCode::kBadRequest, "run report: unknown status"};
    report.status = *status;
    report.message = value.at("message").get<std::string>();
    report.correctness = value.at("correctness");
    report.timing = value.at("timing");
    report.device = value.at("device");
    report.context_lost = value.at("context_lost").get<bool>();
    if (const auto it = value.find("model"); it != value.end()) report.model = *it;
    if (const auto it = value.find("speedup"); it != value.end() && it->is_number()) {
      report.speedup = it->get<double>();
    }
    return report;
  } catch (const std::exception& e) {
    return core::Error{core::ErrorCode::kBadRequest,
                       std::string("malformed run report: ") + e.what()};
  }
}

}  // namespace crucible::runner
