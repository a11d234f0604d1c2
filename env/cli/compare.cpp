// Two evaluations compared: correct rates, geometric-mean speedups and their timing noise.
#include "env/cli/compare.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "core/msgpack_codec.hpp"
#include "env/cli/eval.hpp"
#include "env/cli/report.hpp"
#include "judge/timing_stats.hpp"

namespace crucible::env {
namespace {

using core::ErrorCode;
using core::Value;

constexpr double kZ95 = 1.959963984540054;

// sigma of ln(speedup) from a 95 % interval {low, high}, as judge::speedup_estimate reads one.
std::optional<double> sigma_of_interval(const Value& interval) {
  if (!interval.is_object()) return std::nullopt;
  const Value low = interval.value("low", Value(nullptr));
  const Value high = interval.value("high", Value(nullptr));
  if (!low.is_number() || !high.is_number()) return std::nullopt;
  const double l = low.get<double>(), h = high.get<double>();
  if (!std::isfinite(l) || !std::isfinite(h) || l <= 0.0 || h < l) return std::nullopt;
  return (std::log(h) - std::log(l)) / (2.0 * kZ95);
}

const Value* find_path(const Value& value, std::initializer_list<const char*> keys) {
  const Value* at = &value;
  for (const char* key : keys) {
    if (!at->is_object()) return nullptr;
    const auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

bool is_timed_ok(const Value& record) {
  if (record.value("status", "") != "ok") return false;
  const Value speedup = record.value("speedup", Value(nullptr));
  return speedup.is_number() && std::isfinite(speedup.get<double>()) && speedup.get<double>() > 0;
}

// One side of a row: the metrics of its records and the noise of their geometric means.
struct Side {
  Metrics metrics;
  std::size_t with_interval = 0;
  std::size_t without_interval = 0;
  double sum_variance = 0.0;  // sum of sigma_i^2 over timed ok samples (imputed where missing)

  // Variance of ln(geomean) over `n` samples, or nullopt when no sample's noise is known.
  std::optional<double> log_variance(std::size_t n) const {
    if (n == 0) return std::nullopt;
    if (metrics.timed == 0) return 0.0;  // every sample counted as exactly 1.0
    if (with_interval == 0) return std::nullopt;
    return sum_variance / (static_cast<double>(n) * static_cast<double>(n));
  }
};

Side side_of(const std::vector<Value>& records) {
  Side side;
  side.metrics = compute_metrics(records);
  double known = 0.0;
  for (const auto& record : records) {
    if (!is_timed_ok(record)) continue;
    if (const auto sigma = speedup_log_sigma(record)) {
      ++side.with_interval;
      known += *sigma * *sigma;
    } else {
      ++side.without_interval;
    }
  }
  // A timed sample that recorded no interval gets the mean variance of those that did.
  side.sum_variance = known;
  if (side.with_interval > 0) {
    side.sum_variance += known / static_cast<double>(side.with_interval) *
                         static_cast<double>(side.without_interval);
  }
  return side;
}

Value optional_number(const std::optional<double>& x) { return x ? Value(*x) : Value(nullptr); }

Value side_value(const Side& side) {
  const Metrics& m = side.metrics;
  return Value{{"samples", m.samples},
               {"scored", m.scored},
               {"correct", m.correct},
               {"correct_rate", m.scored > 0 ? Value(m.correct_rate) : Value(nullptr)},
               {"timed", m.timed},
               {"geomean_speedup_correct", optional_number(m.geomean_speedup_correct)},
               {"geomean_speedup_all", optional_number(m.geomean_speedup_all)},
               {"without_interval", side.without_interval}};
}

Value speedup_diff(const std::optional<double>& a, const std::optional<double>& b,
                   const std::optional<double>& a_variance,
                   const std::optional<double>& b_variance) {
  Value diff{{"a", optional_number(a)}, {"b", optional_number(b)}, {"difference", nullptr},
             {"ratio", nullptr},        {"ratio_ci95", nullptr},   {"noise_pct", nullptr}};
  if (!a || !b) {
    diff["verdict"] = "no data";
    return diff;
  }
  const double ratio = *b / *a;
  diff["difference"] = *b - *a;
  diff["ratio"] = ratio;
  if (!a_variance || !b_variance) {
    diff["verdict"] = "noise unknown";
    return diff;
  }
  const double sigma = std::sqrt(*a_variance + *b_variance);
  const double low = ratio * std::exp(-kZ95 * sigma);
  const double high = ratio * std::exp(kZ95 * sigma);
  diff["ratio_ci95"] = Value{{"low", low}, {"high", high}};
  diff["noise_pct"] = 100.0 * (std::exp(kZ95 * sigma) - 1.0);
  diff["verdict"] = low > 1.0 ? "B faster" : high < 1.0 ? "B slower" : "within noise";
  return diff;
}

Value compare_row(const std::vector<Value>& a, const std::vector<Value>& b) {
  const Side sa = side_of(a), sb = side_of(b);
  Value row{{"a", side_value(sa)}, {"b", side_value(sb)}};
  row["correct_rate_delta"] = sa.metrics.scored > 0 && sb.metrics.scored > 0
                                  ? Value(sb.metrics.correct_rate - sa.metrics.correct_rate)
                                  : Value(nullptr);
  row["speedup_correct"] =
      speedup_diff(sa.metrics.geomean_speedup_correct, sb.metrics.geomean_speedup_correct,
                   sa.log_variance(sa.metrics.timed), sb.log_variance(sb.metrics.timed));
  row["speedup_all"] =
      speedup_diff(sa.metrics.geomean_speedup_all, sb.metrics.geomean_speedup_all,
                   sa.log_variance(sa.metrics.scored), sb.log_variance(sb.metrics.scored));
  // Samples of the same id on both sides (two runs of one input): which ones changed.
  std::map<std::string, bool> ok_in_a;
  for (const auto& record : a) {
    const std::string status = record.value("status", "infra_error");
    if (status != "infra_error") ok_in_a[record.value("sample_id", "")] = status == "ok";
  }
  std::size_t matched = 0, only_a = 0, only_b = 0;
  for (const auto& record : b) {
    const std::string status = record.value("status", "infra_error");
    const auto it = ok_in_a.find(record.value("sample_id", ""));
    if (status == "infra_error" || it == ok_in_a.end()) continue;
    ++matched;
    const bool ok_b = status == "ok";
    if (it->second && !ok_b) ++only_a;
    if (!it->second && ok_b) ++only_b;
  }
  row["pairs"] = Value{{"matched", matched}, {"ok_only_in_a", only_a}, {"ok_only_in_b", only_b}};
  return row;
}

std::map<std::string, std::vector<Value>> by_task(const std::vector<Value>& records) {
  std::map<std::string, std::vector<Value>> tasks;
  for (const auto& record : records) tasks[record.value("task", "?")].push_back(record);
  return tasks;
}

// Text of table cells; an absent value is a dash, never a word inside a number column.
std::string fixed(const Value& value, const char* format = "%.3f", double scale = 1.0) {
  if (!value.is_number()) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, scale * value.get<double>());
  return text;
}

std::string percent(const Value& fraction) { return fixed(fraction, "%.1f%%", 100.0); }

std::string ratio_change(const Value& ratio) {
  if (!ratio.is_number()) return "-";
  return fixed(Value(ratio.get<double>() - 1.0), "%+.1f%%", 100.0);
}

std::string noise_text(const Value& diff) {
  return diff["noise_pct"].is_number() ? "±" + fixed(diff["noise_pct"], "%.1f%%") : "-";
}

std::string diff_cells(const Value& diff) {
  return ratio_change(diff["ratio"]) + " | " + noise_text(diff) + " | " +
         diff["verdict"].get<std::string>();
}

}  // namespace

std::optional<double> speedup_log_sigma(const core::Value& record) {
  if (const Value* top = find_path(record, {"speedup_ci95"})) {
    if (auto sigma = sigma_of_interval(*top)) return sigma;
  }
  if (const Value* timing = find_path(record, {"result", "timing", "speedup_ci95"})) {
    if (auto sigma = sigma_of_interval(*timing)) return sigma;
  }
  const Value* cases = find_path(record, {"result", "timing", "cases"});
  if (cases == nullptr || !cases->is_array() || cases->empty()) return std::nullopt;
  std::vector<std::pair<judge::SpeedupEstimate, double>> estimates;
  for (const auto& c : *cases) {
    const Value* speedup = find_path(c, {"speedup"});
    const auto sigma = sigma_of_interval(c.value("speedup_ci95", Value(nullptr)));
    if (speedup == nullptr || !speedup->is_number() || !sigma) return std::nullopt;
    judge::SpeedupEstimate estimate;
    estimate.speedup = speedup->get<double>();
    estimate.log_sigma = *sigma;
    estimates.emplace_back(estimate, c.value("weight", 1.0));
  }
  const auto combined = judge::combined_speedup(estimates);
  if (!combined) return std::nullopt;
  return combined->log_sigma;
}

core::Result<std::vector<core::Value>> load_compare_side(const std::filesystem::path& path,
                                                         std::size_t* torn_lines) {
  std::error_code error;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, error)) {
    file = path / "results.jsonl";
    if (!std::filesystem::exists(file, error)) {
      return core::Error{ErrorCode::kIo, path.string() +
                                             " holds no results.jsonl: give an eval output "
                                             "folder or a results.jsonl file"};
    }
  } else if (!std::filesystem::exists(path, error)) {
    return core::Error{ErrorCode::kIo, path.string() + " does not exist"};
  }
  return read_results(file, torn_lines);
}

core::Value compare_results(const std::vector<core::Value>& a, const std::vector<core::Value>& b,
                            const core::Value& a_info, const core::Value& b_info) {
  const auto tasks_a = by_task(a), tasks_b = by_task(b);
  Value tasks = Value::object();
  Value only_a = Value::array(), only_b = Value::array();
  std::vector<Value> common_a, common_b;
  for (const auto& [task, records] : tasks_a) {
    const auto other = tasks_b.find(task);
    if (other == tasks_b.end()) {
      only_a.push_back(task);
      continue;
    }
    tasks[task] = compare_row(records, other->second);
    common_a.insert(common_a.end(), records.begin(), records.end());
    common_b.insert(common_b.end(), other->second.begin(), other->second.end());
  }
  for (const auto& [task, records] : tasks_b) {
    if (tasks_a.count(task) == 0) only_b.push_back(task);
  }
  Value info_a = a_info.is_object() ? a_info : Value::object();
  Value info_b = b_info.is_object() ? b_info : Value::object();
  info_a["samples"] = a.size();
  info_b["samples"] = b.size();
  return Value{
      {"a", info_a},
      {"b", info_b},
      {"overall", compare_row(common_a, common_b)},
      {"tasks", tasks},
      {"only_in_a", only_a},
      {"only_in_b", only_b},
      {"conventions",
       "overall is over the tasks both sides evaluated. infra_error samples take no part. "
       "correct_rate_delta = B - A. speedup_correct compares the geometric-mean speedups of "
       "correct timed samples, speedup_all those over every scored sample with failures as "
       "1.0. ratio = B / A; ratio_ci95 is the 95 % interval of the ratio from timing noise "
       "alone: each sample's sigma of ln(speedup) comes from its recorded speedup interval "
       "(a timed sample without one gets the mean of those with one), a geometric mean over n "
       "samples has sigma sqrt(sum sigma_i^2) / n, and the two sides add in quadrature. "
       "verdict: 'within noise' when that interval holds 1.0, else 'B faster' or 'B slower'; "
       "it says whether timer noise could explain the difference, not whether other samples "
       "of the same model would repeat it. pairs: samples with the same sample_id on both "
       "sides, and those correct on one side only."}};
}

std::string render_compare_markdown(const core::Value& comparison) {
  std::ostringstream md;
  const auto side_line = [](const char* name, const Value& info) {
    return std::string("- ") + name + ": `" + info.value("path", "?") + "` (" +
           std::to_string(info.value("samples", 0)) + " samples)\n";
  };
  md << "# crucible eval compare\n\n"
     << side_line("A", comparison["a"]) << side_line("B", comparison["b"]) << "\n";
  const Value& overall = comparison["overall"];
  const std::size_t common = comparison["tasks"].size();
  md << "## Overall (the " << common << " task" << (common == 1 ? "" : "s")
     << " both evaluated)\n\n"
     << "| | A | B | B - A | B / A | noise (95 %) | verdict |\n"
     << "|---|---|---|---|---|---|---|\n"
     << "| scored samples | " << overall["a"]["scored"] << " | " << overall["b"]["scored"]
     << " | | | | |\n"
     << "| correct rate | " << percent(overall["a"]["correct_rate"]) << " | "
     << percent(overall["b"]["correct_rate"]) << " | "
     << fixed(overall["correct_rate_delta"], "%+.1f pts", 100.0) << " | | | |\n";
  for (const auto& [key, label] :
       {std::pair<const char*, const char*>{"speedup_correct", "geomean speedup (correct)"},
        {"speedup_all", "geomean speedup (all, failures as 1.0)"}}) {
    const Value& diff = overall[key];
    md << "| " << label << " | " << fixed(diff["a"]) << " | " << fixed(diff["b"]) << " | "
       << fixed(diff["difference"], "%+.3f") << " | " << diff_cells(diff) << " |\n";
  }
  const Value& pairs = overall["pairs"];
  if (pairs.value("matched", 0) > 0) {
    md << "\nSamples with the same sample_id on both sides: " << pairs["matched"]
       << "; correct only in A: " << pairs["ok_only_in_a"]
       << "; correct only in B: " << pairs["ok_only_in_b"] << ".\n";
  }
  for (const char* side : {"a", "b"}) {
    const std::size_t missing = overall[side].value("without_interval", 0);
    if (missing > 0) {
      md << "\n"
         << (side[0] == 'a' ? "A" : "B") << ": " << missing
         << " timed samples recorded no speedup interval; their noise is taken as the mean of "
            "the others'.\n";
    }
  }
  md << "\n## Tasks\n\n"
     << "| task | scored A | scored B | correct A | correct B | B - A | geomean A | geomean B "
        "| B / A | noise (95 %) | verdict |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& [task, row] : comparison["tasks"].items()) {
    const Value& diff = row["speedup_correct"];
    md << "| " << markdown_cell(task) << " | " << row["a"]["scored"] << " | " << row["b"]["scored"]
       << " | " << percent(row["a"]["correct_rate"]) << " | " << percent(row["b"]["correct_rate"])
       << " | " << fixed(row["correct_rate_delta"], "%+.1f pts", 100.0) << " | " << fixed(diff["a"])
       << " | " << fixed(diff["b"]) << " | " << diff_cells(diff) << " |\n";
  }
  for (const auto& [key, name] :
       {std::pair<const char*, const char*>{"only_in_a", "A"}, {"only_in_b", "B"}}) {
    const Value& only = comparison[key];
    if (only.empty()) continue;
    md << "\nOnly in " << name << " (left out of the overall figures):";
    for (const auto& task : only) md << " " << task.get<std::string>();
    md << "\n";
  }
  md << "\nGeometric means are over correct timed samples unless said otherwise. "
     << comparison.value("conventions", "") << "\n";
  return md.str();
}

core::Result<std::string> compare_eval_outputs(const std::filesystem::path& a,
                                               const std::filesystem::path& b, bool json,
                                               std::string* notes) {
  std::vector<std::vector<Value>> sides;
  for (const auto& path : {a, b}) {
    std::size_t torn = 0;
    auto records = load_compare_side(path, &torn);
    if (!records) return records.error();
    if (torn > 0 && notes != nullptr) {
      *notes += path.string() +
                ": the last line was cut short (an interrupted run) and is left "
                "out\n";
    }
    sides.push_back(std::move(records).value());
  }
  const Value comparison =
      compare_results(sides[0], sides[1], Value{{"path", a.string()}}, Value{{"path", b.string()}});
  if (json) return core::to_json_text(comparison, 2) + "\n";
  return render_compare_markdown(comparison);
}

}  // namespace crucible::env
