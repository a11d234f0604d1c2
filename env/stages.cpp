// Compile and GPU stages, and pipeline assembly.
#include "env/stages.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "action/plan_context.hpp"
#include "core/log.hpp"
#include "judge/timing_stats.hpp"
#include "tasks/format.hpp"

namespace crucible::env {

using core::StepStatus;

namespace {
// What an agent reads first of a failed compile, as one line: the first error of the log and
// how many more there are (the whole log is in the observation's `compile.log`); for other
// failures the log's first line.
std::string log_summary(const std::string& log) {
  std::vector<std::string_view> errors;
  std::string_view first;
  std::string_view rest = log;
  while (!rest.empty()) {
    const auto end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (first.empty()) first = line;
    if (line.find("error") != std::string_view::npos) errors.push_back(line);
  }
  std::string out(errors.empty() ? first : errors.front());
  if (errors.size() > 1) {
    out += " (and " + std::to_string(errors.size() - 1) + " more error" +
           (errors.size() > 2 ? "s" : "") + "; the whole log is in compile.log)";
  }
  return out;
}

// An ok step's one line states its speedup, with the interval when there is one: "correct on
// every case; 1.234x the reference's speed (95 % interval 1.201x to 1.268x)".
std::string ok_message(const StepResult& result) {
  const auto times = [](double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3fx", value);
    return std::string(text);
  };
  std::string message =
      "correct on every case; " + times(*result.speedup) + " the reference's speed";
  if (result.speedup_low && result.speedup_high) {
    message += " (95 % interval " + times(*result.speedup_low) + " to " +
               times(*result.speedup_high) + ")";
  }
  return message;
}

}  // namespace

bool CompileStage::run(const StepJob& job, StepArtifacts& artifacts, StepResult& result) {
  sandbox::CompileJob compile;
  compile.source = job.source;
  if (artifacts.plan) compile.name_expressions = artifacts.plan->plan.name_expressions();
  auto output = pool_->submit(std::move(compile)).get();
  result.compile = output.to_value();
  if (output.status != StepStatus::kOk) {
    result.status = output.status;
    result.message = output.status == StepStatus::kCompileError
                         ? "compilation failed: " + log_summary(output.log)
                         : log_summary(output.log);
    return false;
  }
  artifacts.compiled = std::move(output);
  return true;
}

std::shared_ptr<const GpuStage::Reference> GpuStage::reference(const tasks::Task& task) {
  std::shared_future<std::shared_ptr<const Reference>> future;
  {
    std::lock_guard lock(mutex_);
    auto it = references_.find(task.id);
    if (it == references_.end()) {
      const auto context = action::make_plan_context(task);
      auto plan = action::parse_launch_plan(task.reference_source, context);
      sandbox::CompileJob compile;
      compile.source = task.reference_source;
      if (plan) compile.name_expressions = plan->name_expressions();
      auto compiled = compiler_->submit(std::move(compile)).share();
      // The plan is evaluated while the reference compiles, on the first step's thread.
      auto made = std::async(
          std::launch::deferred, [&task, context, compiled, plan = std::move(plan)]() mutable {
            auto out = std::make_shared<Reference>();
            out->compiled = compiled.get();
            if (!plan) {
              out->plan = plan.error();
            } else {
              out->parsed = *plan;
              std::size_t failed_case = 0;
              out->plan =
                  action::evaluate_on_cases(std::move(plan).value(), task, context, &failed_case);
            }
            return std::shared_ptr<const Reference>(std::move(out));
          });
      it = references_.emplace(task.id, made.share()).first;
    }
    future = it->second;
  }
  auto output = future.get();
  if (output->compiled.status != StepStatus::kOk || !output->plan) {
    // Do not keep a failed reference: the next step tries again.
    std::lock_guard lock(mutex_);
    if (auto it = references_.find(task.id);
        it != references_.end() && it->second.valid() && it->second.get() == output) {
      references_.erase(it);
    }
  }
  return output;
}

// The model check the runner does after an ok step. The runner never evaluates plan
// expressions, so every plan is evaluated here at each call site of each step the check runs:
// the timed step, then, for a model with prompts, one decoding step per token (all sequences
// advance together, so step t has context t).
core::Result<runner::ModelCheck> GpuStage::model_check(const StepJob& job,
                                                       const StepArtifacts& artifacts) {
  const model::Model& m = *job.model->model;
  runner::ModelCheck check;
  check.model = job.model->file;
  check.steps.push_back(job.model->variables);
  check.hidden_states = job.model->hidden_states;
  if (!m.prompts.empty()) {
    const auto prompt = static_cast<std::int64_t>(m.prompts.front().size());
    for (std::int64_t t = 1; t <= prompt + m.generate - 1; ++t) {
      check.steps.push_back(
          {{"num_seqs", static_cast<std::int64_t>(m.prompts.size())}, {"context", t}});
    }
  }
  if (!artifacts.parsed_plan || !artifacts.plan) {
    return core::Error{core::ErrorCode::kInternal, "the candidate's plan was not kept"};
  }
  check.candidate.plan = artifacts.plan->plan;
  struct Code {
    std::shared_ptr<const Reference> reference;
    action::PlanContext context;
    std::size_t index = 0;  // into check.references
  };
  std::map<const tasks::Task*, Code> codes;
  for (const auto& call : m.calls) {
    const tasks::Task& task = *call.task;
    if (codes.contains(&task)) continue;
    auto output = reference(task);
    if (output->compiled.status != StepStatus::kOk || !output->plan || !output->parsed) {
      return core::Error{core::ErrorCode::kInternal,
                         "the reference of " + task.id + " is not usable on this server"};
    }
    runner::ModelReference entry;
    entry.task = task.id;
    entry.task_hash = task.content_hash;
    entry.compiled = {output->compiled.cubin, output->compiled.lowered_names};
    entry.plan.plan = output->plan->plan;
    codes[&task] = Code{output, action::make_plan_context(task), check.references.size()};
    check.references.push_back(std::move(entry));
  }
  for (const auto& variables : check.steps) {
    auto expanded = model::expand_step(m, variables);
    if (!expanded) return core::Error{core::ErrorCode::kInvalidArgument, expanded.error().message};
    for (const auto& site : expanded->second) {
      const tasks::Task& task = *site.call->task;
      Code& code = codes.at(&task);
      auto concrete =
          action::evaluate_plan(*code.reference->parsed, site.shapes.symbols, code.context);
      if (!concrete && task.reference_library.empty()) {
        return core::Error{core::ErrorCode::kInternal,
                           "the reference plan of " + task.id + " does not hold at call site " +
                               site.call->site + ": " + concrete.error().message};
      }
      // A library reference ignores its source's plan: an entry keeps the sites in step.
      check.references[code.index].plan.cases.push_back(concrete ? std::move(concrete).value()
                                                                 : action::ConcretePlan{});
      if (&task != job.task) continue;
      if (const auto broken = tasks::broken_promise(task.promises, site.shapes.symbols)) {
        return core::Error{core::ErrorCode::kInvalidArgument,
                           "call site " + site.call->site + " of model " + m.name + " (" +
                               tasks::symbols_text(site.shapes.symbols, ", ") +
                               ") is outside what " + task.id + " promises (" + *broken +
                               "): a candidate cannot be placed there"};
      }
      auto candidate =
          action::evaluate_plan(*artifacts.parsed_plan, site.shapes.symbols, code.context);
      if (!candidate) {
        return core::Error{core::ErrorCode::kInvalidArgument,
                           "the launch plan does not hold at call site " + site.call->site +
                               " of model " + m.name + " (" + site.shapes.name +
                               "): " + candidate.error().message};
      }
      check.candidate.cases.push_back(std::move(candidate).value());
    }
  }
  return check;
}

bool GpuStage::run(const StepJob& job, StepArtifacts& artifacts, StepResult& result) {
  if (!artifacts.compiled || !artifacts.plan) {
    result.status = StepStatus::kInfraError;
    result.message = "the GPU stage ran without a compiled candidate and its evaluated plan";
    return false;
  }
  const auto reference_output = reference(*job.task);
  if (reference_output->compiled.status != StepStatus::kOk) {
    result.status = StepStatus::kInfraError;
    result.message = "the reference of " + job.task->id +
                     " failed to compile: " + log_summary(reference_output->compiled.log);
    return false;
  }
  if (!reference_output->plan) {
    result.status = StepStatus::kInfraError;
    result.message = "the reference plan of " + job.task->id +
                     " is invalid: " + reference_output->plan.error().message;
    return false;
  }
  runner::RunJob run;
  {
    std::lock_guard lock(mutex_);
    run.id = next_job_++;
  }
  run.task = job.task->id;
  run.task_hash = job.task->content_hash;
  run.seed = job.seed;
  run.secret = std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32);
  run.reference = {reference_output->compiled.cubin, reference_output->compiled.lowered_names};
  run.candidate = {artifacts.compiled->cubin, artifacts.compiled->lowered_names};
  run.reference_plan = *reference_output->plan;
  run.candidate_plan = *artifacts.plan;
  run.timing = options_.timing;
  run.kernel_timeout_ms = options_.kernel_timeout_ms;
  if (job.model) {
    if (auto check = model_check(job, artifacts); check) {
      run.model = std::move(check).value();
    } else {
      result.model = core::Value{{"error", check.error().message}};
    }
  }
  std::size_t visible = 0;
  for (const auto& c : job.task->cases) visible += c.hidden ? 0 : 1;
  // A backstop: the runner's own watchdog reports a hang within kernel_timeout_ms.
  const auto deadline = options_.deadline_floor +
                        std::chrono::milliseconds(static_cast<long>(
                            job.task->cases.size() * 2 * options_.kernel_timeout_ms +
                            static_cast<double>(visible) *
                                (options_.timing.time_cap_ms + 2 * options_.kernel_timeout_ms))) +
                        (run.model ? kModelCheckAllowance : std::chrono::milliseconds(0));
  auto report = runners_->run(run, deadline);
  result.status = report.status;
  result.message = report.message;
  result.correctness = report.correctness;
  result.timing = report.timing;
  if (!result.timing.is_null()) result.timing["device"] = report.device;
  result.speedup = report.speedup;
  if (!report.model.is_null()) result.model = report.model;
  if (report.status == StepStatus::kOk && report.timing.is_object()) {
    result.candidate_ns = judge::weighted_case_time_ns(report.timing, "candidate");
    result.reference_ns = judge::weighted_case_time_ns(report.timing, "reference");
    result.floor_ns = judge::weighted_case_time_ns(report.timing, "floor_ns");
    const core::Value& interval = report.timing["speedup_ci95"];
    if (interval.is_object() && interval["low"].is_number() && interval["high"].is_number()) {
      result.speedup_low = interval["low"].get<double>();
      result.speedup_high = interval["high"].get<double>();
    }
    if (result.speedup) result.message = ok_message(result);
  }
  return report.status == StepStatus::kOk;
}

Pipeline build_pipeline(const PipelineOptions& options, std::string* notes) {
  auto note = [&](const std::string& line) {
    if (notes != nullptr) notes->append(line).append("\n");
  };
  Pipeline pipeline;
  pipeline.add(std::make_unique<ValidateStage>());
  std::shared_ptr<sandbox::CompilePool> compiler;
  if (options.compile) {
    auto pool = sandbox::CompilePool::start(options.compile_options);
    if (pool) {
      compiler = std::move(pool).value();
    } else {
      note("compile stage unavailable: " + pool.error().message);
    }
  }
  if (compiler) {
    pipeline.add(std::make_unique<CompileStage>(compiler));
  } else {
    pipeline.add(std::make_unique<UnavailableStage>(
        "compile", options.compile ? "the compile stage could not start on this server"
                                   : "the compile stage is disabled on this server"));
  }
  if (options.gpus.gpus.empty()) {
    pipeline.add(std::make_unique<UnavailableStage>("gpu", options.gpus.reason));
    return pipeline;
  }
  if (!compiler) {
    pipeline.add(std::make_unique<UnavailableStage>(
        "gpu", "the GPU stage needs the compile stage, which is unavailable"));
    return pipeline;
  }
  runner::RunnerPoolOptions runner_options = options.runner_options;
  runner_options.home = options.home;
  if (runner_options.devices.empty()) {
    for (const auto& gpu : options.gpus.gpus) runner_options.devices.push_back(gpu.index);
  }
  auto runners = runner::RunnerPool::start(runner_options);
  if (!runners) {
    note("GPU stage unavailable: " + runners.error().message);
    pipeline.add(std::make_unique<UnavailableStage>(
        "gpu", "the GPU runner could not start: " + runners.error().message));
    return pipeline;
  }
  pipeline.add(std::make_unique<GpuStage>(
      compiler, std::shared_ptr<runner::RunnerPool>(std::move(runners).value()),
      options.gpu_options));
  return pipeline;
}

}  // namespace crucible::env
