// Evaluation metrics and the reports built from them (Markdown, self-contained HTML with SVG).
#include "env/cli/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "judge/timing_stats.hpp"

namespace crucible::env {
namespace {

using core::Value;

Value optional_value(const std::optional<double>& x) { return x ? Value(*x) : Value(nullptr); }

// The unweighted geometric mean: judge::weighted_geomean with equal weights.
std::optional<double> geomean(const std::vector<double>& values) {
  std::vector<std::pair<double, double>> value_weight;
  value_weight.reserve(values.size());
  for (const double value : values) value_weight.emplace_back(value, 1.0);
  return judge::weighted_geomean(value_weight);
}

std::vector<double> fast_p_points() {
  std::vector<double> points;
  const int steps = static_cast<int>(std::lround(kFastPMax / kFastPStep));
  for (int i = 0; i <= steps; ++i) points.push_back(i * kFastPStep);
  return points;
}

}  // namespace

double Metrics::fast_p(double p) const {
  if (scored == 0) return 0.0;
  if (p <= 0.0) return static_cast<double>(correct) / static_cast<double>(scored);
  const auto faster =
      std::count_if(speedups.begin(), speedups.end(), [p](double s) { return s > p; });
  return static_cast<double>(faster) / static_cast<double>(scored);
}

core::Value Metrics::to_value() const {
  Value fast{{"0", fast_p(0.0)}, {"1", fast_p(1.0)}, {"1.5", fast_p(1.5)}, {"2", fast_p(2.0)}};
  return Value{{"samples", samples},
               {"infra_errors", infra_errors},
               {"scored", scored},
               {"correct", correct},
               {"timed", timed},
               {"correct_rate", correct_rate},
               {"geomean_speedup_correct", optional_value(geomean_speedup_correct)},
               {"geomean_speedup_all", optional_value(geomean_speedup_all)},
               {"best_speedup", optional_value(best_speedup)},
               {"hacks", hacks},
               {"hack_rate", hack_rate},
               {"speedups_resolved", speedups_resolved},
               {"model_checked", model_checked},
               {"geomean_step_speedup", optional_value(geomean_step_speedup)},
               {"fast_p", fast},
               {"statuses", statuses}};
}

Metrics compute_metrics(const std::vector<core::Value>& records) {
  Metrics m;
  std::vector<double> all;
  std::vector<double> steps;
  for (const auto& record : records) {
    const std::string status = record.value("status", "infra_error");
    ++m.samples;
    m.statuses[status] = m.statuses.value(status, 0) + 1;
    if (status == "infra_error") {
      ++m.infra_errors;
      continue;
    }
    ++m.scored;
    if (status == "hack_detected" || record.value("caught_in_timed_call", false)) ++m.hacks;
    if (status != "ok") {
      all.push_back(kIncorrectSpeedup);
      continue;
    }
    ++m.correct;
    const Value model = record.value("model", Value(nullptr));
    if (model.is_object() && model.contains("step_speedup") && model["step_speedup"].is_number() &&
        std::isfinite(model["step_speedup"].get<double>()) &&
        model["step_speedup"].get<double>() > 0.0) {
      ++m.model_checked;
      steps.push_back(model["step_speedup"].get<double>());
    }
    const Value speedup = record.value("speedup", Value(nullptr));
    if (speedup.is_number() && std::isfinite(speedup.get<double>()) &&
        speedup.get<double>() > 0.0) {
      const double s = speedup.get<double>();
      ++m.timed;
      m.speedups.push_back(s);
      all.push_back(s);
      m.best_speedup = std::max(m.best_speedup.value_or(0.0), s);
      const Value interval = record.value("speedup_ci95", Value(nullptr));
      if (interval.is_object() && interval.value("low", 0.0) > 0.0 &&
          (interval.value("low", 0.0) > 1.0 || interval.value("high", 0.0) < 1.0)) {
        ++m.speedups_resolved;
      }
    } else {
      all.push_back(kIncorrectSpeedup);
    }
  }
  m.correct_rate = m.scored == 0 ? 0.0 : static_cast<double>(m.correct) / m.scored;
  m.hack_rate = m.scored == 0 ? 0.0 : static_cast<double>(m.hacks) / m.scored;
  m.geomean_speedup_correct = geomean(m.speedups);
  m.geomean_speedup_all = geomean(all);
  m.geomean_step_speedup = geomean(steps);
  return m;
}

namespace {

// The model a record names in meta.model, or "" when it names none.
std::string model_of(const core::Value& record) {
  const Value meta = record.value("meta", Value(nullptr));
  if (!meta.is_object() || !meta.contains("model") || meta["model"].is_null()) return {};
  const Value& model = meta["model"];
  return model.is_string() ? model.get<std::string>() : model.dump();
}

}  // namespace

core::Value summarize(const std::vector<core::Value>& records, const core::Value& run_info) {
  std::map<std::string, std::vector<Value>> by_category;
  std::map<std::string, std::vector<Value>> by_task;
  std::map<std::string, std::vector<Value>> by_model;
  std::map<std::string, std::map<std::string, std::vector<Value>>> by_model_task;
  bool any_model = false;
  for (const auto& record : records) any_model = any_model || !model_of(record).empty();
  Value infra = Value::array();
  for (const auto& record : records) {
    const std::string task = record.value("task", "?");
    by_category[record.value("category", "?")].push_back(record);
    by_task[task].push_back(record);
    if (any_model) {
      // Once any sample names its model, every sample is in some model's group: those that
      // name none are counted together rather than left out of the table.
      std::string model = model_of(record);
      if (model.empty()) model = kNoModel;
      by_model[model].push_back(record);
      by_model_task[model][task].push_back(record);
    }
    if (record.value("status", "infra_error") == "infra_error") {
      infra.push_back(Value{{"sample_id", record.value("sample_id", "")},
                            {"task", task},
                            {"message", record.value("message", "")}});
    }
  }
  const Metrics overall = compute_metrics(records);
  std::map<std::string, Metrics> category_metrics;
  Value categories = Value::object();
  for (const auto& [name, list] : by_category) {
    category_metrics[name] = compute_metrics(list);
    categories[name] = category_metrics[name].to_value();
  }
  Value task_values = Value::object();
  for (const auto& [name, list] : by_task) {
    task_values[name] = compute_metrics(list).to_value();
    task_values[name]["category"] = list.front().value("category", "?");
  }
  Value models = Value::object();
  for (const auto& [name, list] : by_model) models[name] = compute_metrics(list).to_value();
  Value model_tasks = Value::object();
  for (const auto& [model, tasks] : by_model_task) {
    model_tasks[model] = Value::object();
    for (const auto& [task, list] : tasks) {
      model_tasks[model][task] = compute_metrics(list).to_value();
    }
  }
  Value curve = Value::array();
  for (double p : fast_p_points()) {
    Value point{{"p", p}, {"overall", overall.fast_p(p)}};
    for (const auto& [name, m] : category_metrics) point[name] = m.fast_p(p);
    curve.push_back(point);
  }
  return Value{
      {"run", run_info},
      {"overall", overall.to_value()},
      {"categories", categories},
      {"tasks", task_values},
      {"models", models},
      {"model_tasks", model_tasks},
      {"fast_p", curve},
      {"infra_errors", infra},
      {"conventions",
       "infra_error samples are the server's fault: listed apart, excluded from every metric. "
       "correct_rate = ok / scored. geomean_speedup_correct: over ok samples that were timed. "
       "geomean_speedup_all: over all scored samples, a failed (non-ok) or untimed sample "
       "counting as speedup 1.0 (the reference is kept). fast_p = share of scored samples "
       "that are ok with speedup > p; fast_0 = correct_rate. hack_rate = share of scored "
       "samples that were hack_detected or wrong in a checked timed call after passing every "
       "correctness run. speedups_resolved: timed ok samples whose speedup's 95 % interval "
       "excludes 1.0. geomean_step_speedup: over the model_checked correct samples, the "
       "whole model step's speedup with the candidate in place (eval --model). models: samples "
       "grouped by meta.model (those without one under "
       "\"(no meta.model)\"), model_tasks: each model's samples per task. A dash stands for a "
       "value that does not exist (no correct sample was timed)."}};
}

std::string format_number(const core::Value& value) {
  if (!value.is_number()) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value.get<double>());
  return text;
}

std::string format_percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * fraction);
  return text;
}

std::string markdown_cell(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_html(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// What the metric columns of every report table hold, after the name columns.
// A share of the scored samples, or a dash when none was scored (0 % of nothing is no rate).
std::string rate(const Value& m, const Value& fraction) {
  if (m.value("scored", 0) == 0 || !fraction.is_number()) return "-";
  return format_percent(fraction.get<double>());
}

std::string metrics_cells(const Value& m) {
  std::ostringstream row;
  row << m.value("scored", 0) << " | " << m.value("correct", 0) << " | "
      << rate(m, m["correct_rate"]) << " | " << format_number(m["geomean_speedup_correct"]) << " | "
      << format_number(m["geomean_speedup_all"]) << " | " << rate(m, m["fast_p"]["1"]) << " | "
      << rate(m, m["fast_p"]["2"]) << " | " << format_number(m["geomean_step_speedup"]) << " | "
      << rate(m, m["hack_rate"]) << " | " << m.value("infra_errors", 0) << " |\n";
  return row.str();
}

std::string metrics_row(const std::string& name, const Value& m) {
  return "| " + markdown_cell(name) + " | " + metrics_cells(m);
}

constexpr const char* kMetricsHead =
    "scored | correct | correct rate | geomean speedup (correct) | geomean speedup (all) "
    "| fast_1 | fast_2 | step speedup (model) | hack rate | infra_error (excluded) |\n";

std::string table_head(const std::vector<std::string>& names) {
  std::string head = "|";
  for (const auto& name : names) head += " " + name + " |";
  head += " " + std::string(kMetricsHead);
  for (std::size_t i = 0; i < names.size() + 10; ++i) head += "|---";
  return head + "|\n";
}

// Status colours, the same in every chart and table of the page: green for a correct kernel,
// reds for wrong ones, grey for the server's own failures.
std::string status_colour(const std::string& status) {
  static const std::map<std::string, std::string> kColours = {{"ok", "#2da44e"},
                                                              {"incorrect", "#cf222e"},
                                                              {"hack_detected", "#8250df"},
                                                              {"compile_error", "#d4a72c"},
                                                              {"invalid_action", "#bc4c00"},
                                                              {"launch_error", "#fb8f44"},
                                                              {"runtime_error", "#a40e26"},
                                                              {"timeout", "#0969da"},
                                                              {"infra_error", "#8c959f"}};
  const auto it = kColours.find(status);
  return it == kColours.end() ? "#57606a" : it->second;
}

// Approximate width in pixels of `text` at the page's 12px sans-serif: labels are laid out
// from it so that no name is cut off.
int text_width(const std::string& text) {
  std::size_t chars = 0;
  for (const unsigned char c : text) chars += (c & 0xC0) != 0x80 ? 1 : 0;  // UTF-8 code points
  return static_cast<int>(chars) * 7 + 4;
}

std::string svg_open(int width, int height, const std::string& title) {
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"" << width
      << "\" height=\"" << height << "\" aria-label=\"" << escape_html(title) << "\">\n"
      << "<text x=\"0\" y=\"16\" class=\"title\">" << escape_html(title) << "</text>\n";
  return svg.str();
}

std::string number_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

// One count bar per status, each in its status colour.
std::string status_chart(const Value& statuses) {
  constexpr int kBarWidth = 360, kRow = 24, kTop = 28;
  int label_width = 80;
  double max_count = 1;
  for (const auto& [name, count] : statuses.items()) {
    label_width = std::max(label_width, text_width(name) + 8);
    max_count = std::max(max_count, count.get<double>());
  }
  const int height = kTop + kRow * static_cast<int>(statuses.size()) + 10;
  const std::string title = "samples per status (infra_error is excluded from the metrics)";
  std::ostringstream svg;
  svg << svg_open(std::max(label_width + kBarWidth + 80, text_width(title)), height, title);
  int row = 0;
  for (const auto& [name, count] : statuses.items()) {
    const int y = kTop + kRow * row++;
    const double width = kBarWidth * count.get<double>() / max_count;
    svg << "<text x=\"" << label_width - 6 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">"
        << escape_html(name) << "</text>\n"
        << "<rect x=\"" << label_width << "\" y=\"" << y + 3 << "\" width=\"" << width
        << "\" height=\"" << kRow - 8 << "\" fill=\"" << status_colour(name) << "\" data-status=\""
        << escape_html(name) << "\"/>\n"
        << "<text x=\"" << label_width + width + 6 << "\" y=\"" << y + 15 << "\" class=\"value\">"
        << count.get<long>() << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

struct SpeedupBar {
  std::string label;
  std::optional<double> speedup;  // none: nothing to draw (no correct sample was timed)
  std::string text;               // printed beside the bar
};

// Horizontal speedup bars on a log2 axis: each bar runs from parity (1x) to its value, right
// when faster than the reference and left when slower, so 2x and 0.5x are the same length.
// Ticks at powers of two span every value and at least 0.5x to 2x.
std::string speedup_chart(const std::string& title, const std::vector<SpeedupBar>& bars) {
  constexpr int kPlotWidth = 360, kRow = 24, kTop = 28, kAxis = 40;
  int label_width = 80, text_space = 60;
  double low = 0.5, high = 2.0;
  for (const auto& bar : bars) {
    label_width = std::max(label_width, text_width(bar.label) + 8);
    text_space = std::max(text_space, text_width(bar.text) + 8);
    if (bar.speedup) {
      low = std::min(low, *bar.speedup);
      high = std::max(high, *bar.speedup);
    }
  }
  const int low_exp = static_cast<int>(std::floor(std::log2(low)));
  const int high_exp = static_cast<int>(std::ceil(std::log2(high)));
  const int step = std::max(1, (high_exp - low_exp + 7) / 8);  // at most 9 ticks
  const auto x_of = [&](double speedup) {
    return label_width + kPlotWidth * (std::log2(speedup) - low_exp) / (high_exp - low_exp);
  };
  const int plot_bottom = kTop + kRow * static_cast<int>(bars.size());
  const int width = std::max(label_width + kPlotWidth + text_space, text_width(title));
  std::ostringstream svg;
  svg << svg_open(width, plot_bottom + kAxis, title);
  for (int e = low_exp; e <= high_exp; ++e) {
    if (((e % step) + step) % step != 0) continue;
    const double tick = std::ldexp(1.0, e);
    const double x = x_of(tick);
    svg << "<line x1=\"" << x << "\" y1=\"" << kTop - 4 << "\" x2=\"" << x << "\" y2=\""
        << plot_bottom + 4 << "\" stroke=\"" << (e == 0 ? "#444" : "#ddd") << "\""
        << (e == 0 ? " stroke-dasharray=\"4 3\"" : "") << "/>\n"
        << "<text x=\"" << x << "\" y=\"" << plot_bottom + 18
        << "\" text-anchor=\"middle\" class=\"tick\">" << number_text(tick) << "x</text>\n";
  }
  svg << "<text x=\"" << label_width + kPlotWidth / 2 << "\" y=\"" << plot_bottom + 34
      << "\" text-anchor=\"middle\">speedup over the reference, log scale (dashed: parity)"
         "</text>\n";
  const double parity = x_of(1.0);
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const int y = kTop + kRow * static_cast<int>(i);
    const auto& bar = bars[i];
    svg << "<text x=\"" << label_width - 6 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">"
        << escape_html(bar.label) << "</text>\n";
    double text_x = parity + 6;
    if (bar.speedup) {
      const double x = x_of(*bar.speedup);
      const double left = std::min(x, parity);
      // A bar at parity is drawn one pixel wide so that it is seen to exist.
      const double bar_width = std::max(1.0, std::fabs(x - parity));
      svg << "<rect x=\"" << left << "\" y=\"" << y + 3 << "\" width=\"" << bar_width
          << "\" height=\"" << kRow - 8 << "\" fill=\""
          << (*bar.speedup >= 1.0 ? "#2da44e" : "#e16f24") << "\" data-label=\""
          << escape_html(bar.label) << "\"/>\n";
      text_x = std::max(x, parity) + 6;
    }
    svg << "<text x=\"" << text_x << "\" y=\"" << y + 15 << "\" class=\"value\">"
        << escape_html(bar.text) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

std::optional<double> number_of(const Value& value) {
  if (value.is_number()) return value.get<double>();
  return std::nullopt;
}

std::string fast_p_chart(const Value& curve) {
  constexpr int kLeft = 50, kTop = 30, kWidth = 480, kHeight = 220;
  std::ostringstream svg;
  svg << svg_open(kLeft + kWidth + 30, kTop + kHeight + 40,
                  "fast_p: share of samples correct and more than p times faster than the "
                  "reference")
      << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kWidth << "\" height=\""
      << kHeight << "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double x = kLeft + kWidth * i / 4.0;
    const double y = kTop + kHeight - kHeight * i / 4.0;
    svg << "<text x=\"" << x << "\" y=\"" << kTop + kHeight + 16
        << "\" text-anchor=\"middle\" class=\"tick\">" << i << "</text>\n"
        << "<text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << 25 * i
        << "%</text>\n";
  }
  svg << "<text x=\"" << kLeft + kWidth / 2 << "\" y=\"" << kTop + kHeight + 34
      << "\" text-anchor=\"middle\">p (speedup threshold)</text>\n<polyline fill=\"none\" "
         "stroke=\"#1f6feb\" stroke-width=\"2\" points=\"";
  for (const auto& point : curve) {
    const double x = kLeft + kWidth * point["p"].get<double>() / kFastPMax;
    const double y = kTop + kHeight - kHeight * point["overall"].get<double>();
    svg << x << "," << y << " ";
  }
  svg << "\"/>\n</svg>\n";
  return svg.str();
}

std::string html_metrics_head(const std::vector<std::string>& names) {
  std::string head = "<tr>";
  for (const auto& name : names) head += "<th class=\"name\">" + name + "</th>";
  return head +
         "<th>scored</th><th>correct</th><th>correct rate</th><th>geomean (correct)</th>"
         "<th>geomean (all)</th><th>best</th><th>fast_1</th><th>fast_2</th>"
         "<th>step speedup (model)</th><th>hack rate</th>"
         "<th>infra_error (excluded)</th></tr>\n";
}

std::string html_metrics_cells(const Value& m) {
  std::ostringstream row;
  row << "<td>" << m.value("scored", 0) << "</td><td>" << m.value("correct", 0) << "</td><td>"
      << rate(m, m["correct_rate"]) << "</td><td>" << format_number(m["geomean_speedup_correct"])
      << "</td><td>" << format_number(m["geomean_speedup_all"]) << "</td><td>"
      << format_number(m.value("best_speedup", Value(nullptr))) << "</td><td>"
      << rate(m, m["fast_p"]["1"]) << "</td><td>" << rate(m, m["fast_p"]["2"]) << "</td><td>"
      << format_number(m["geomean_step_speedup"]) << "</td><td>" << rate(m, m["hack_rate"])
      << "</td><td>" << m.value("infra_errors", 0) << "</td>";
  return row.str();
}

std::string speedup_text(const Value& m) {
  return m["geomean_speedup_correct"].is_number()
             ? format_number(m["geomean_speedup_correct"]) + "x"
             : "no correct sample timed";
}

std::string half_point(double p) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f", p);
  return text;
}

bool on_half_point(double p) { return std::fabs(p * 2 - std::round(p * 2)) <= 1e-9; }

}  // namespace

std::string nothing_measured_reason(const core::Value& summary) {
  const std::size_t samples = summary["overall"].value("samples", 0);
  if (samples == 0) return "no sample was recorded";
  std::map<std::string, std::size_t> reasons;
  for (const auto& item : summary["infra_errors"]) ++reasons[item.value("message", "")];
  std::vector<std::pair<std::size_t, std::string>> ranked;
  for (const auto& [message, count] : reasons) ranked.emplace_back(count, message);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text = "every sample (" + std::to_string(samples) +
                     ") was an infra_error, the server's fault, not the samples'";
  for (std::size_t i = 0; i < ranked.size() && i < 3; ++i) {
    text += (i == 0 ? ": " : "; ") + (ranked[i].second.empty() ? "no message" : ranked[i].second) +
            " (" + std::to_string(ranked[i].first) + ")";
  }
  if (ranked.size() > 3) text += "; summary.json lists the rest";
  return text;
}

std::string render_markdown(const core::Value& summary) {
  std::ostringstream md;
  const Value& run = summary["run"];
  md << "# crucible eval report\n\n";
  md << "- input: `" << run.value("input", "?") << "`\n"
     << "- scored by: " << run.value("scored_by", "?") << "\n"
     << "- samples: " << run.value("samples_recorded", 0) << " recorded of "
     << run.value("samples_selected", 0) << " selected"
     << (run.value("interrupted", false) ? " (interrupted: run again with --resume)" : "")
     << "\n- finished: " << run.value("finished", "?") << "\n\n";
  md << "## Overall\n\n" << table_head({""}) << metrics_row("all", summary["overall"]) << "\n";
  md << "## Categories\n\n" << table_head({"category"});
  for (const auto& [name, m] : summary["categories"].items()) md << metrics_row(name, m);
  md << "\n## Tasks\n\n" << table_head({"task"});
  for (const auto& [name, m] : summary["tasks"].items()) md << metrics_row(name, m);
  if (summary.contains("models") && !summary["models"].empty()) {
    md << "\n## Models\n\n" << table_head({"model"});
    for (const auto& [name, m] : summary["models"].items()) md << metrics_row(name, m);
    md << "\n## Models by task\n\n" << table_head({"model", "task"});
    const Value model_tasks = summary.value("model_tasks", Value::object());
    for (const auto& [model, tasks] : model_tasks.items()) {
      for (const auto& [task, m] : tasks.items()) {
        md << "| " << markdown_cell(model) << " | " << markdown_cell(task) << " | "
           << metrics_cells(m);
      }
    }
  }
  md << "\n## Statuses\n\n| status | samples |\n|---|---|\n";
  for (const auto& [name, count] : summary["overall"]["statuses"].items()) {
    md << "| " << name << " | " << count.get<long>() << " |\n";
  }
  md << "\n## fast_p\n\n| p | fast_p |\n|---|---|\n";
  for (const auto& point : summary["fast_p"]) {
    const double p = point["p"].get<double>();
    if (!on_half_point(p)) continue;  // every 0.5 in the table
    md << "| " << half_point(p) << " | " << format_percent(point["overall"].get<double>())
       << " |\n";
  }
  const auto& infra = summary["infra_errors"];
  md << "\n## infra_error (excluded from the metrics)\n\n";
  if (infra.empty()) {
    md << "None.\n";
  } else {
    md << infra.size() << " samples were not judged because of the server, not the solution:\n\n";
    std::size_t shown = 0;
    for (const auto& item : infra) {
      if (++shown > 20) {
        md << "- ... and " << infra.size() - 20 << " more (summary.json lists them all)\n";
        break;
      }
      md << "- `" << item.value("sample_id", "") << "`: " << item.value("message", "") << "\n";
    }
  }
  md << "\n## Conventions\n\n" << summary.value("conventions", "") << "\n";
  return md.str();
}

std::string render_html(const core::Value& summary) {
  std::ostringstream html;
  const Value& overall = summary["overall"];
  const Value& run = summary["run"];
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
       << "<title>crucible eval report</title>\n<style>\n"
       << "body{font-family:sans-serif;margin:2em;max-width:72em;color:#222}\n"
       << "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
          "padding:.2em .6em;text-align:right}th:first-child,td:first-child,.name{text-align:"
          "left;white-space:nowrap}\n"
       << "div.wide{overflow-x:auto}\n"
       << "svg{display:block;margin:1em 0}svg text{font-size:12px;font-family:sans-serif}"
          "svg .title{font-weight:bold}svg .tick{fill:#555}\n"
       << ".swatch{display:inline-block;width:.8em;height:.8em;margin-right:.4em;"
          "vertical-align:middle}\n"
       << "</style>\n</head>\n<body>\n<h1>crucible eval report</h1>\n";
  html << "<p>Input <code>" << escape_html(run.value("input", "?")) << "</code>, scored by "
       << escape_html(run.value("scored_by", "?")) << "; " << run.value("samples_recorded", 0)
       << " samples recorded of " << run.value("samples_selected", 0) << " selected"
       << (run.value("interrupted", false) ? " (interrupted)" : "") << ".</p>\n";

  html << "<h2>Overall</h2>\n<table id=\"overall\">\n"
       << "<tr><th>metric</th><th>value</th></tr>\n"
       << "<tr><td>scored samples</td><td id=\"scored\">" << overall.value("scored", 0)
       << "</td></tr>\n<tr><td>correct rate</td><td id=\"correct-rate\">"
       << rate(overall, overall["correct_rate"])
       << "</td></tr>\n<tr><td>geomean speedup (correct)</td><td id=\"geomean-correct\">"
       << format_number(overall["geomean_speedup_correct"])
       << "</td></tr>\n<tr><td>geomean speedup (all, failures as 1.0)</td><td "
          "id=\"geomean-all\">"
       << format_number(overall["geomean_speedup_all"])
       << "</td></tr>\n<tr><td>fast_1</td><td id=\"fast-1\">"
       << rate(overall, overall["fast_p"]["1"])
       << "</td></tr>\n<tr><td>infra_error (excluded)</td><td id=\"infra\">"
       << overall.value("infra_errors", 0) << "</td></tr>\n</table>\n";

  std::vector<SpeedupBar> bars;
  for (const auto& [name, m] : summary["tasks"].items()) {
    bars.push_back({name, number_of(m["geomean_speedup_correct"]), speedup_text(m)});
  }
  html << "<h2>Tasks</h2>\n"
       << speedup_chart("geometric-mean speedup of correct samples per task", bars)
       << "<div class=\"wide\"><table id=\"tasks\">\n"
       << html_metrics_head({"task", "category"});
  for (const auto& [name, m] : summary["tasks"].items()) {
    html << "<tr><td class=\"name\">" << escape_html(name) << "</td><td class=\"name\">"
         << escape_html(m.value("category", "")) << "</td>" << html_metrics_cells(m) << "</tr>\n";
  }
  html << "</table></div>\n";

  const Value models = summary.value("models", Value::object());
  if (!models.empty()) {
    bars.clear();
    for (const auto& [name, m] : models.items()) {
      bars.push_back({name, number_of(m["geomean_speedup_correct"]), speedup_text(m)});
    }
    html << "<h2>Models</h2>\n"
         << speedup_chart("geometric-mean speedup of correct samples per model", bars)
         << "<div class=\"wide\"><table id=\"models\">\n"
         << html_metrics_head({"model"});
    for (const auto& [name, m] : models.items()) {
      html << "<tr><td class=\"name\">" << escape_html(name) << "</td>" << html_metrics_cells(m)
           << "</tr>\n";
    }
    html << "</table></div>\n<h3>Models by task</h3>\n<div class=\"wide\"><table "
            "id=\"model-tasks\">\n"
         << html_metrics_head({"model", "task"});
    const Value model_tasks = summary.value("model_tasks", Value::object());
    for (const auto& [model, tasks] : model_tasks.items()) {
      for (const auto& [task, m] : tasks.items()) {
        html << "<tr><td class=\"name\">" << escape_html(model) << "</td><td class=\"name\">"
             << escape_html(task) << "</td>" << html_metrics_cells(m) << "</tr>\n";
      }
    }
    html << "</table></div>\n";
  }

  html << "<h2>Statuses</h2>\n"
       << status_chart(overall["statuses"])
       << "<table id=\"statuses\">\n<tr><th>status</th><th>samples</th></tr>\n";
  for (const auto& [name, count] : overall["statuses"].items()) {
    html << "<tr><td><span class=\"swatch\" style=\"background:" << status_colour(name)
         << "\"></span>" << escape_html(name) << "</td><td>" << count.get<long>() << "</td></tr>\n";
  }
  html << "</table>\n";

  bars.clear();
  for (const auto& [name, m] : summary["categories"].items()) {
    const Value& correct = m["geomean_speedup_correct"];
    bars.push_back(
        {name, number_of(m["geomean_speedup_all"]),
         m["geomean_speedup_all"].is_number()
             ? format_number(m["geomean_speedup_all"]) + "x" +
                   (correct.is_number() ? " (correct only: " + format_number(correct) + "x)"
                                        : std::string(" (no correct sample timed)"))
             : std::string("nothing scored")});
  }
  html << "<h2>Categories</h2>\n"
       << speedup_chart("geometric-mean speedup per category (failures as 1.0)", bars);
  html << "<div class=\"wide\"><table id=\"categories\">\n" << html_metrics_head({"category"});
  for (const auto& [name, m] : summary["categories"].items()) {
    html << "<tr><td class=\"name\">" << escape_html(name) << "</td>" << html_metrics_cells(m)
         << "</tr>\n";
  }
  html << "</table></div>\n";

  html << "<h2>fast_p</h2>\n"
       << fast_p_chart(summary["fast_p"])
       << "<table id=\"fast-p\">\n<tr><th>p</th><th>fast_p</th></tr>\n";
  for (const auto& point : summary["fast_p"]) {
    const double p = point["p"].get<double>();
    if (!on_half_point(p)) continue;
    html << "<tr><td>" << half_point(p) << "</td><td>"
         << format_percent(point["overall"].get<double>()) << "</td></tr>\n";
  }
  html << "</table>\n<h2>infra_error (excluded from the metrics)</h2>\n";
  const auto& infra = summary["infra_errors"];
  if (infra.empty()) {
    html << "<p>None.</p>\n";
  } else {
    html << "<p>" << infra.size()
         << " samples were not judged because of the server, not the solution.</p>\n<ul>\n";
    std::size_t shown = 0;
    for (const auto& item : infra) {
      if (++shown > 20) {
        html << "<li>... and " << infra.size() - 20 << " more (summary.json lists them all)</li>\n";
        break;
      }
      html << "<li><code>" << escape_html(item.value("sample_id", ""))
           << "</code>: " << escape_html(item.value("message", "")) << "</li>\n";
    }
    html << "</ul>\n";
  }
  html << "<h2>Conventions</h2>\n<p>" << escape_html(summary.value("conventions", ""))
       << "</p>\n</body>\n</html>\n";
  return html.str();
}

}  // namespace crucible::env
