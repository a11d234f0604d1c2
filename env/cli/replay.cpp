// Trajectory replay: reward re-scoring from logged measurements and re-measurement with drift.
#include "env/cli/replay.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "core/protocol.hpp"
#include "core/step_status.hpp"
#include "env/trajectory_log.hpp"
#include "judge/timing_stats.hpp"

namespace crucible::env {
namespace {

using core::Value;

// A step record whose fields have been checked (see replay.hpp for the rules).
struct LoggedStep {
  std::string task;
  std::string status_name;
  core::StepStatus status = core::StepStatus::kInfraError;
  std::optional<double> speedup;
  std::optional<double> speedup_low, speedup_high;  // result.timing.speedup_ci95, when logged
  // Weighted geometric means over the timed cases (result.timing.cases) of the candidate's and
  // the reference's median call time and of the roofline floor, in ns; what the sol preset
  // needs. Only for an ok step, as the pipeline fills them.
  std::optional<double> candidate_ns, reference_ns, floor_ns;
  double reward = 0.0;
  std::uint64_t seed = 0;
  std::optional<std::string> source;
  Value plan = nullptr;
  Value reward_spec = nullptr;
  Value episode = nullptr;  // null when the record has none
  Value step = nullptr;
};

std::string with_article(std::string_view noun) {
  return (noun.find_first_of("aeiou") == 0 ? "an " : "a ") + std::string(noun);
}

std::string wrong_type(const std::string& field, const std::string& want, const Value& got) {
  return "field '" + field + "' must be " + want + ", got " +
         std::string(core::value_type_name(got));
}

std::string number_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

// The times a step's reward was computed from: the timing report's, else (a log written
// before the report carried them, with the sol preset) the logged reward's own terms.
void read_logged_times(const Value& result, LoggedStep& step) {
  if (step.status != core::StepStatus::kOk) return;
  const auto timing = result.find("timing");
  if (timing != result.end() && timing->is_object()) {
    step.candidate_ns = judge::weighted_case_time_ns(*timing, "candidate");
    step.reference_ns = judge::weighted_case_time_ns(*timing, "reference");
    step.floor_ns = judge::weighted_case_time_ns(*timing, "floor_ns");
  }
  const auto reward = result.find("reward");
  if (reward == result.end() || !reward->is_object()) return;
  const Value terms = reward->value("terms", Value());
  if (!terms.is_object()) return;
  const auto fill = [&](std::optional<double>& slot, const char* name) {
    const Value value = terms.value(name, Value());
    if (!slot && value.is_number()) slot = value.get<double>();
  };
  fill(step.candidate_ns, "candidate_ns");
  fill(step.reference_ns, "reference_ns");
  fill(step.floor_ns, "floor_ns");
}

// The record as a step, or why it is not one ("field 'task' must be a string, got integer").
core::Result<LoggedStep> parse_logged_step(const Value& record) {
  const auto bad = [](std::string why) {
    return core::Error{core::ErrorCode::kInvalidArgument, std::move(why)};
  };
  if (!record.is_object()) {
    return bad("not a map but " + with_article(core::value_type_name(record)));
  }
  const auto find = [](const Value& map, const char* key) -> const Value* {
    const auto it = map.find(key);
    return it == map.end() ? nullptr : &*it;
  };
  LoggedStep step;
  const Value* task = find(record, "task");
  if (task == nullptr) return bad("missing field 'task'");
  if (!task->is_string()) return bad(wrong_type("task", "a string", *task));
  step.task = task->get<std::string>();

  const Value* result = find(record, "result");
  if (result == nullptr) return bad("missing field 'result'");
  if (!result->is_object()) return bad(wrong_type("result", "a map", *result));
  const Value* status = find(*result, "status");
  if (status == nullptr) return bad("missing field 'result.status'");
  if (!status->is_string()) return bad(wrong_type("result.status", "a string", *status));
  step.status_name = status->get<std::string>();
  const auto known = core::step_status_from_name(step.status_name);
  if (!known) {
    return bad("field 'result.status' is '" + step.status_name.substr(0, 64) +
               "', not a step status");
  }
  step.status = *known;
  if (const Value* speedup = find(*result, "speedup"); speedup != nullptr && !speedup->is_null()) {
    if (!speedup->is_number()) return bad(wrong_type("result.speedup", "a number", *speedup));
    const double x = speedup->get<double>();
    if (!std::isfinite(x) || x <= 0.0) {
      return bad("field 'result.speedup' must be a positive finite number, got " + number_text(x));
    }
    step.speedup = x;
  }
  // The interval is optional (records before it was measured have none); a malformed one is
  // ignored rather than refusing the step.
  if (const Value* timing = find(*result, "timing"); timing != nullptr && timing->is_object()) {
    if (const Value* ci = find(*timing, "speedup_ci95"); ci != nullptr && ci->is_object()) {
      const Value* low = find(*ci, "low");
      const Value* high = find(*ci, "high");
      if (low != nullptr && high != nullptr && low->is_number() && high->is_number()) {
        step.speedup_low = low->get<double>();
        step.speedup_high = high->get<double>();
      }
    }
  }

  read_logged_times(*result, step);

  const Value* reward = find(record, "reward");
  if (reward == nullptr) return bad("missing field 'reward'");
  if (!reward->is_number()) return bad(wrong_type("reward", "a number", *reward));
  step.reward = reward->get<double>();
  if (!std::isfinite(step.reward)) {
    return bad("field 'reward' must be a finite number, got " + number_text(step.reward));
  }

  if (const Value* seed = find(record, "seed"); seed != nullptr) {
    if (seed->is_number_unsigned()) {
      step.seed = seed->get<std::uint64_t>();
    } else if (seed->is_number_integer()) {
      return bad("field 'seed' must be a non-negative integer, got " +
                 std::to_string(seed->get<std::int64_t>()));
    } else {
      return bad(wrong_type("seed", "a non-negative integer", *seed));
    }
  }
  if (const Value* source = find(record, "source"); source != nullptr) {
    if (!source->is_string()) return bad(wrong_type("source", "a string", *source));
    step.source = source->get<std::string>();
  }
  if (const Value* plan = find(record, "plan"); plan != nullptr) {
    if (!plan->is_null() && !plan->is_array() && !plan->is_object()) {
      return bad(wrong_type("plan", "an array of launches or a map", *plan));
    }
    step.plan = *plan;
  }
  if (const Value* spec = find(record, "reward_spec"); spec != nullptr) {
    if (!spec->is_null() && !spec->is_object()) {
      return bad(wrong_type("reward_spec", "a map", *spec));
    }
    step.reward_spec = *spec;
  }
  if (const Value* episode = find(record, "episode"); episode != nullptr) {
    if (!episode->is_string() && !episode->is_number_integer()) {
      return bad(wrong_type("episode", "a string or an integer", *episode));
    }
    step.episode = *episode;
  }
  if (const Value* number = find(record, "step"); number != nullptr) {
    if (!number->is_number_integer()) return bad(wrong_type("step", "an integer", *number));
    step.step = *number;
  }
  return step;
}

Value step_base(const LoggedStep& logged, std::size_t index) {
  Value step{{"index", index}, {"task", logged.task}};
  if (!logged.episode.is_null()) step["episode"] = logged.episode;
  if (!logged.step.is_null()) step["step"] = logged.step;
  return step;
}

Value malformed_step(std::size_t index, const core::Error& error) {
  return Value{{"index", index}, {"malformed", error.message}};
}

double quantile(std::vector<double> sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto low = static_cast<std::size_t>(std::floor(position));
  const auto high = std::min(low + 1, sorted.size() - 1);
  const double t = position - static_cast<double>(low);
  return sorted[low] * (1 - t) + sorted[high] * t;
}

std::string fixed(double x, int decimals = 3) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, x);
  return text;
}

std::string cell(const Value& v) {
  if (v.is_number()) return fixed(v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return "-";
}

}  // namespace

core::Result<LoadedLog> load_log(const std::filesystem::path& path) {
  LoadedLog loaded;
  auto report = read_trajectory_log(path, [&](Value&& record) {
    loaded.records.push_back(std::move(record));
    return true;
  });
  if (!report) {
    return core::Error{report.error().code,
                       "cannot replay " + path.string() + ": " + report.error().message};
  }
  Value skipped = Value::array();
  for (const auto& range : report->skipped) {
    skipped.push_back(
        Value{{"offset", range.offset}, {"bytes", range.bytes}, {"reason", range.reason}});
  }
  loaded.read_report = Value{{"format_version", report->format_version},
                             {"records", report->records},
                             {"file_bytes", report->file_bytes},
                             {"torn_tail", report->torn_tail},
                             {"skipped", skipped},
                             {"skipped_bytes", report->skipped_bytes()},
                             {"damaged_ranges", report->damaged_ranges()}};
  if (report->torn_tail && !report->skipped.empty()) {
    loaded.read_report["tail_reason"] = report->tail_reason;
    loaded.read_report["torn_bytes"] = report->skipped.back().bytes;
  }
  loaded.report = std::move(report).value();
  return loaded;
}

core::Value rescore_log(const std::vector<core::Value>& records, const rewards::RewardSpec& spec) {
  Value steps = Value::array();
  double sum_old = 0, sum_new = 0;
  std::size_t changed = 0, malformed = 0, with_times = 0, without_times = 0;
  std::map<std::string, std::array<double, 3>> by_status;  // steps, sum old, sum new
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto logged = parse_logged_step(records[i]);
    if (!logged) {
      steps.push_back(malformed_step(i, logged.error()));
      ++malformed;
      continue;
    }
    rewards::Measurement measurement;
    measurement.status = logged->status;
    measurement.speedup = logged->speedup;
    measurement.speedup_low = logged->speedup_low;
    measurement.speedup_high = logged->speedup_high;
    measurement.candidate_ns = logged->candidate_ns;
    measurement.reference_ns = logged->reference_ns;
    measurement.floor_ns = logged->floor_ns;
    if (logged->status == core::StepStatus::kOk) {
      ++(logged->reference_ns && logged->floor_ns ? with_times : without_times);
    }
    const auto breakdown = rewards::compute_reward(spec, measurement);
    const double old_reward = logged->reward;
    Value step = step_base(*logged, i);
    step["status"] = logged->status_name;
    if (measurement.speedup) step["speedup"] = *measurement.speedup;
    step["old_reward"] = old_reward;
    step["new_reward"] = breakdown.total;
    step["delta"] = breakdown.total - old_reward;
    step["terms"] = breakdown.terms;
    steps.push_back(step);
    sum_old += old_reward;
    sum_new += breakdown.total;
    if (std::fabs(breakdown.total - old_reward) > 1e-12) ++changed;
    auto& bucket = by_status[logged->status_name];
    bucket[0] += 1;
    bucket[1] += old_reward;
    bucket[2] += breakdown.total;
  }
  const double n = std::max<double>(1.0, static_cast<double>(records.size() - malformed));
  Value statuses = Value::object();
  for (const auto& [name, bucket] : by_status) {
    statuses[name] = Value{{"steps", static_cast<std::size_t>(bucket[0])},
                           {"mean_old", bucket[1] / bucket[0]},
                           {"mean_new", bucket[2] / bucket[0]}};
  }
  return Value{{"mode", "rescore"},
               {"reward_spec", rewards::reward_spec_to_value(spec)},
               {"steps", steps},
               {"summary",
                {{"steps", records.size()},
                 {"malformed", malformed},
                 {"mean_old", sum_old / n},
                 {"mean_new", sum_new / n},
                 {"mean_delta", (sum_new - sum_old) / n},
                 {"changed", changed},
                 {"ok_with_times", with_times},
                 {"ok_without_times", without_times},
                 {"by_status", statuses}}}};
}

core::Value remeasure_log(const std::vector<core::Value>& records, const tasks::Registry& registry,
                          const Pipeline& pipeline, std::size_t workers) {
  std::vector<Value> steps(records.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    while (true) {
      const std::size_t i = next.fetch_add(1);
      if (i >= records.size()) return;
      auto logged = parse_logged_step(records[i]);
      if (!logged) {
        steps[i] = malformed_step(i, logged.error());
        continue;
      }
      Value step = step_base(*logged, i);
      step["old_status"] = logged->status_name;
      const auto old_speedup = logged->speedup;
      if (old_speedup) step["old_speedup"] = *old_speedup;
      step["old_reward"] = logged->reward;
      const tasks::Task* task = registry.find(logged->task);
      auto spec = rewards::parse_reward_spec(logged->reward_spec);
      if (task == nullptr || !spec || !logged->source) {
        step["skipped"] = task == nullptr ? "task not in this build's registry"
                          : !spec ? "logged reward spec does not parse: " + spec.error().message
                                  : "record holds no source";
        steps[i] = step;
        continue;
      }
      StepJob job{task,    *logged->source, logged->plan, logged->seed, std::move(spec).value(),
                  nullptr, std::nullopt};
      const StepResult result = pipeline.run(job);
      const std::string new_status(core::step_status_name(result.status));
      step["new_status"] = new_status;
      step["flipped"] = new_status != step["old_status"].get<std::string>();
      if (result.speedup) step["new_speedup"] = *result.speedup;
      if (result.speedup && old_speedup && *old_speedup > 0) {
        step["speedup_ratio"] = *result.speedup / *old_speedup;
      }
      step["new_reward"] = result.reward.total;
      step["reward_delta"] = result.reward.total - step["old_reward"].get<double>();
      step["message"] = result.message;
      steps[i] = step;
    }
  };
  std::vector<std::thread> threads;
  const std::size_t count = std::clamp<std::size_t>(workers, 1, 64);
  for (std::size_t t = 0; t < std::min(count, std::max<std::size_t>(records.size(), 1)); ++t) {
    threads.emplace_back(work);
  }
  for (auto& thread : threads) thread.join();

  std::size_t flips = 0, correct_flips = 0, new_infra = 0, skipped = 0, compared = 0;
  std::size_t malformed = 0;
  Value flip_counts = Value::object();
  std::vector<double> ratios, deltas;
  for (const auto& step : steps) {
    if (step.contains("malformed")) {
      ++malformed;
      continue;
    }
    if (step.contains("skipped")) {
      ++skipped;
      continue;
    }
    ++compared;
    const std::string old_status = step["old_status"];
    const std::string new_status = step["new_status"];
    if (new_status == "infra_error" && old_status != "infra_error") ++new_infra;
    if (step["flipped"].get<bool>()) {
      ++flips;
      const std::string key = old_status + "->" + new_status;
      flip_counts[key] = flip_counts.value(key, 0) + 1;
      if (old_status == "ok") ++correct_flips;
    }
    if (step.contains("speedup_ratio")) ratios.push_back(step["speedup_ratio"].get<double>());
    deltas.push_back(step["reward_delta"].get<double>());
  }
  std::sort(ratios.begin(), ratios.end());
  Value ratio_summary{{"count", ratios.size()}};
  if (!ratios.empty()) {
    const auto within = std::count_if(ratios.begin(), ratios.end(),
                                      [](double r) { return std::fabs(r - 1.0) <= 0.02; });
    ratio_summary["min"] = ratios.front();
    ratio_summary["p05"] = quantile(ratios, 0.05);
    ratio_summary["p50"] = quantile(ratios, 0.5);
    ratio_summary["p95"] = quantile(ratios, 0.95);
    ratio_summary["max"] = ratios.back();
    ratio_summary["within_2pct"] = static_cast<double>(within) / ratios.size();
  }
  double sum = 0, sum_abs = 0, max_abs = 0;
  for (double d : deltas) {
    sum += d;
    sum_abs += std::fabs(d);
    max_abs = std::max(max_abs, std::fabs(d));
  }
  const double n = std::max<double>(1.0, static_cast<double>(deltas.size()));
  return Value{
      {"mode", "remeasure"},
      {"steps", steps},
      {"summary",
       {{"steps", records.size()},
        {"compared", compared},
        {"skipped", skipped},
        {"malformed", malformed},
        {"status_flips", flips},
        {"flips", flip_counts},
        {"correct_flips", correct_flips},
        {"new_infra_errors", new_infra},
        {"speedup_ratio", ratio_summary},
        {"reward_delta", {{"mean", sum / n}, {"mean_abs", sum_abs / n}, {"max_abs", max_abs}}}}}};
}

std::string format_replay(const core::Value& replay, std::size_t max_rows) {
  std::ostringstream out;
  const Value& steps = replay["steps"];
  const Value& summary = replay["summary"];
  const bool rescore = replay.value("mode", "") == "rescore";
  // The task column is as wide as the longest task id shown: ids are never cut.
  int task_width = 20;
  std::size_t counted = 0;
  for (const auto& step : steps) {
    if (counted++ >= max_rows) break;
    task_width = std::max(task_width, static_cast<int>(step.value("task", "?").size()));
  }
  char line[256];
  const auto pad = [](const std::string& text, int width) {
    return text +
           std::string(static_cast<std::size_t>(std::max(0, width - static_cast<int>(text.size()))),
                       ' ');
  };
  if (rescore) {
    std::snprintf(line, sizeof line, " %-14s %9s %10s %10s %9s\n", "status", "speedup", "old",
                  "new", "delta");
  } else {
    std::snprintf(line, sizeof line, " %-14s %-14s %9s %9s %9s %9s\n", "old status", "new status",
                  "old x", "new x", "ratio", "dreward");
  }
  out << "    #  " << pad("task", task_width) << line;
  std::size_t shown = 0;
  for (const auto& step : steps) {
    if (shown++ >= max_rows) {
      out << "  ... " << steps.size() - max_rows << " more steps in the JSON output\n";
      break;
    }
    std::snprintf(line, sizeof line, "%5zu  ", step["index"].get<std::size_t>());
    out << line;
    if (step.contains("malformed")) {
      // Not through the fixed-width buffer: the reason is shown whole.
      out << "malformed: " << step["malformed"].get<std::string>() << "\n";
      continue;
    }
    out << pad(step.value("task", "?"), task_width);
    if (rescore) {
      std::snprintf(line, sizeof line, " %-14s %9s %10s %10s %9s\n",
                    step.value("status", "").c_str(), cell(step.value("speedup", Value())).c_str(),
                    cell(step["old_reward"]).c_str(), cell(step["new_reward"]).c_str(),
                    cell(step["delta"]).c_str());
      out << line;
    } else if (step.contains("skipped")) {
      out << " skipped: " << step["skipped"].get<std::string>() << "\n";
    } else {
      std::snprintf(
          line, sizeof line, " %-14s %-14s %9s %9s %9s %9s\n", step.value("old_status", "").c_str(),
          step.value("new_status", "").c_str(), cell(step.value("old_speedup", Value())).c_str(),
          cell(step.value("new_speedup", Value())).c_str(),
          cell(step.value("speedup_ratio", Value())).c_str(), cell(step["reward_delta"]).c_str());
      out << line;
    }
  }
  out << "\n";
  if (rescore) {
    out << "steps " << summary["steps"];
    if (summary.value("malformed", 0) > 0) {
      out << " (malformed, not re-scored: " << summary["malformed"] << ")";
    }
    out << ", rewards changed " << summary["changed"] << ", mean reward "
        << fixed(summary["mean_old"].get<double>()) << " -> "
        << fixed(summary["mean_new"].get<double>()) << " (delta "
        << fixed(summary["mean_delta"].get<double>()) << ")\n";
    const std::size_t without = summary.value("ok_without_times", 0);
    if (replay["reward_spec"].value("preset", "") == "sol" && without > 0) {
      out << without << " correct step" << (without == 1 ? "" : "s")
          << " logged no reference and floor times (result.timing.cases): the sol preset "
             "scores them 0 (terms.missing)\n";
    }
    return out.str();
  }
  out << "steps " << summary["steps"] << ", compared " << summary["compared"] << ", skipped "
      << summary["skipped"] << ", malformed " << summary.value("malformed", 0) << "\nstatus flips "
      << summary["status_flips"] << " (correct kernels that flipped: " << summary["correct_flips"]
      << ", steps now infra_error: " << summary["new_infra_errors"] << ")";
  for (const auto& [key, count] : summary["flips"].items()) out << "\n  " << key << ": " << count;
  const Value& ratio = summary["speedup_ratio"];
  out << "\nspeedup ratio new/old over " << ratio["count"] << " steps timed both times";
  if (ratio.value("count", 0) > 0) {
    out << ": min " << fixed(ratio["min"].get<double>()) << ", p05 "
        << fixed(ratio["p05"].get<double>()) << ", median " << fixed(ratio["p50"].get<double>())
        << ", p95 " << fixed(ratio["p95"].get<double>()) << ", max "
        << fixed(ratio["max"].get<double>())
        << ", within +-2%: " << fixed(100 * ratio["within_2pct"].get<double>(), 1) << "%";
  }
  const Value& delta = summary["reward_delta"];
  out << "\nreward delta: mean " << fixed(delta["mean"].get<double>()) << ", mean |d| "
      << fixed(delta["mean_abs"].get<double>()) << ", max |d| "
      << fixed(delta["max_abs"].get<double>()) << "\n";
  return out.str();
}

}  // namespace crucible::env
