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
               {"fast_p", fast},
               {"statuses", statuses}};
}

Metrics compute_metrics(const std::vector<core::Value>& records) {
  Metrics m;
  std::vector<double> all;
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
  return m;
}

core::Value summarize(const std::vector<core::Value>& records, const core::Value& run_info) {
  std::map<std::string, std::vector<Value>> by_category;
  std::map<std::string, std::vector<Value>> by_task;
  std::map<std::string, std::vector<Value>> by_model;
  Value infra = Value::array();
  for (const auto& record : records) {
    by_category[record.value("category", "?")].push_back(record);
    by_task[record.value("task", "?")].push_back(record);
    const Value meta = record.value("meta", Value(nullptr));
    if (meta.is_object() && meta.contains("model") && meta["model"].is_string()) {
      by_model[meta["model"].get<std::string>()].push_back(record);
    }
    if (record.value("status", "infra_error") == "infra_error") {
      infra.push_back(Value{{"sample_id", record.value("sample_id", "")},
                            {"task", record.value("task", "")},
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
       "excludes 1.0. models: samples grouped by meta.model."}};
}

std::string format_number(const core::Value& value) {
  if (!value.is_number()) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value.get<double>());
  return text;
}

std::string format_percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * fraction);
  return text;
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

std::string metrics_row(const std::string& name, const Value& m) {
  std::ostringstream row;
  row << "| " << name << " | " << m.value("scored", 0) << " | " << m.value("correct", 0) << " | "
      << format_percent(m.value("correct_rate", 0.0)) << " | "
      << format_number(m["geomean_speedup_correct"]) << " | "
      << format_number(m["geomean_speedup_all"]) << " | "
      << format_percent(m["fast_p"].value("1", 0.0)) << " | "
      << format_percent(m["fast_p"].value("2", 0.0)) << " | "
      << format_percent(m.value("hack_rate", 0.0)) << " | " << m.value("infra_errors", 0) << " |\n";
  return row.str();
}

constexpr const char* kTableHead =
    "| | scored | correct | correct rate | geomean speedup (correct) | geomean speedup (all) "
    "| fast_1 | fast_2 | hack rate | infra_error (excluded) |\n"
    "|---|---|---|---|---|---|---|---|---|---|\n";

// One horizontal bar chart: a label, a bar and the value printed beside it.
std::string bar_chart(const std::string& title,
                      const std::vector<std::pair<std::string, double>>& bars,
                      const std::vector<std::string>& value_text, const std::string& color,
                      double reference_line) {
  constexpr int kLabelWidth = 180, kBarWidth = 360, kRow = 24, kTop = 28;
  double max_value = reference_line;
  for (const auto& [label, value] : bars) max_value = std::max(max_value, value);
  if (max_value <= 0) max_value = 1;
  const int height = kTop + kRow * static_cast<int>(bars.size()) + 10;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\""
      << kLabelWidth + kBarWidth + 90 << "\" height=\"" << height << "\" aria-label=\""
      << escape_html(title) << "\">\n"
      << "<text x=\"0\" y=\"16\" class=\"title\">" << escape_html(title) << "</text>\n";
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const int y = kTop + kRow * static_cast<int>(i);
    const double width = kBarWidth * std::max(0.0, bars[i].second) / max_value;
    svg << "<text x=\"" << kLabelWidth - 6 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">"
        << escape_html(bars[i].first) << "</text>\n"
        << "<rect x=\"" << kLabelWidth << "\" y=\"" << y + 3 << "\" width=\"" << width
        << "\" height=\"" << kRow - 8 << "\" fill=\"" << color << "\"/>\n"
        << "<text x=\"" << kLabelWidth + width + 6 << "\" y=\"" << y + 15 << "\" class=\"value\">"
        << escape_html(value_text[i]) << "</text>\n";
  }
  if (reference_line > 0) {
    const double x = kLabelWidth + kBarWidth * reference_line / max_value;
    svg << "<line x1=\"" << x << "\" y1=\"" << kTop - 4 << "\" x2=\"" << x << "\" y2=\""
        << height - 6 << "\" stroke=\"#444\" stroke-dasharray=\"4 3\"/>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string fast_p_chart(const Value& curve) {
  constexpr int kLeft = 50, kTop = 30, kWidth = 480, kHeight = 220;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"" << kLeft + kWidth + 30
      << "\" height=\"" << kTop + kHeight + 40 << "\" aria-label=\"fast_p curve\">\n"
      << "<text x=\"0\" y=\"16\" class=\"title\">fast_p: share of samples correct and more than "
         "p times faster than the reference</text>\n"
      << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kWidth << "\" height=\""
      << kHeight << "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double x = kLeft + kWidth * i / 4.0;
    const double y = kTop + kHeight - kHeight * i / 4.0;
    svg << "<text x=\"" << x << "\" y=\"" << kTop + kHeight + 16 << "\" text-anchor=\"middle\">"
        << i << "</text>\n"
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

}  // namespace

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
  md << "## Overall\n\n" << kTableHead << metrics_row("all", summary["overall"]) << "\n";
  md << "## Categories\n\n" << kTableHead;
  for (const auto& [name, m] : summary["categories"].items()) md << metrics_row(name, m);
  md << "\n## Tasks\n\n" << kTableHead;
  for (const auto& [name, m] : summary["tasks"].items()) md << metrics_row(name, m);
  if (summary.contains("models") && !summary["models"].empty()) {
    md << "\n## Models\n\n" << kTableHead;
    for (const auto& [name, m] : summary["models"].items()) md << metrics_row(name, m);
  }
  md << "\n## Statuses\n\n| status | samples |\n|---|---|\n";
  for (const auto& [name, count] : summary["overall"]["statuses"].items()) {
    md << "| " << name << " | " << count.get<long>() << " |\n";
  }
  md << "\n## fast_p\n\n| p | fast_p |\n|---|---|\n";
  for (const auto& point : summary["fast_p"]) {
    const double p = point["p"].get<double>();
    if (std::fabs(p * 2 - std::round(p * 2)) > 1e-9) continue;  // every 0.5 in the table
    char text[16];
    std::snprintf(text, sizeof text, "%.1f", p);
    md << "| " << text << " | " << format_percent(point["overall"].get<double>()) << " |\n";
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
       << "body{font-family:sans-serif;margin:2em;max-width:60em;color:#222}\n"
       << "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
          "padding:.2em .6em;text-align:right}th:first-child,td:first-child{text-align:left}\n"
       << "svg text{font-size:12px;font-family:sans-serif}svg .title{font-weight:bold}\n"
       << "</style>\n</head>\n<body>\n<h1>crucible eval report</h1>\n";
  html << "<p>Input <code>" << escape_html(run.value("input", "?")) << "</code>, scored by "
       << escape_html(run.value("scored_by", "?")) << "; " << run.value("samples_recorded", 0)
       << " samples recorded of " << run.value("samples_selected", 0) << " selected"
       << (run.value("interrupted", false) ? " (interrupted)" : "") << ".</p>\n";

  html << "<h2>Overall</h2>\n<table id=\"overall\">\n"
       << "<tr><th>metric</th><th>value</th></tr>\n"
       << "<tr><td>scored samples</td><td id=\"scored\">" << overall.value("scored", 0)
       << "</td></tr>\n<tr><td>correct rate</td><td id=\"correct-rate\">"
       << format_percent(overall.value("correct_rate", 0.0))
       << "</td></tr>\n<tr><td>geomean speedup (correct)</td><td id=\"geomean-correct\">"
       << format_number(overall["geomean_speedup_correct"])
       << "</td></tr>\n<tr><td>geomean speedup (all, failures as 1.0)</td><td "
          "id=\"geomean-all\">"
       << format_number(overall["geomean_speedup_all"])
       << "</td></tr>\n<tr><td>fast_1</td><td id=\"fast-1\">"
       << format_percent(overall["fast_p"].value("1", 0.0))
       << "</td></tr>\n<tr><td>infra_error (excluded)</td><td id=\"infra\">"
       << overall.value("infra_errors", 0) << "</td></tr>\n</table>\n";

  std::vector<std::pair<std::string, double>> bars;
  std::vector<std::string> texts;
  for (const auto& [name, m] : summary["tasks"].items()) {
    const Value& g = m["geomean_speedup_correct"];
    bars.emplace_back(name, g.is_number() ? g.get<double>() : 0.0);
    texts.push_back(g.is_number() ? format_number(g) + "x" : "no correct sample");
  }
  html << "<h2>Speedup per task</h2>\n"
       << bar_chart("geometric-mean speedup of correct samples (dashed: parity)", bars, texts,
                    "#2da44e", 1.0);

  bars.clear();
  texts.clear();
  for (const auto& [name, count] : overall["statuses"].items()) {
    bars.emplace_back(name, count.get<double>());
    texts.push_back(std::to_string(count.get<long>()));
  }
  html << "<h2>Statuses</h2>\n"
       << bar_chart("samples per status (infra_error is excluded from the metrics)", bars, texts,
                    "#8250df", 0.0);

  bars.clear();
  texts.clear();
  for (const auto& [name, m] : summary["categories"].items()) {
    const Value& g = m["geomean_speedup_all"];
    bars.emplace_back(name, g.is_number() ? g.get<double>() : 0.0);
    texts.push_back(format_number(g) +
                    "x (correct only: " + format_number(m["geomean_speedup_correct"]) + "x)");
  }
  html << "<h2>Categories</h2>\n"
       << bar_chart("geometric-mean speedup per category (failures as 1.0)", bars, texts, "#bf8700",
                    1.0);
  html << "<table id=\"categories\">\n<tr><th>category</th><th>scored</th><th>correct "
          "rate</th><th>geomean (correct)</th><th>geomean (all)</th><th>fast_1</th></tr>\n";
  for (const auto& [name, m] : summary["categories"].items()) {
    html << "<tr><td>" << escape_html(name) << "</td><td>" << m.value("scored", 0) << "</td><td>"
         << format_percent(m.value("correct_rate", 0.0)) << "</td><td>"
         << format_number(m["geomean_speedup_correct"]) << "</td><td>"
         << format_number(m["geomean_speedup_all"]) << "</td><td>"
         << format_percent(m["fast_p"].value("1", 0.0)) << "</td></tr>\n";
  }
  html << "</table>\n";

  html << "<h2>fast_p</h2>\n"
       << fast_p_chart(summary["fast_p"])
       << "<table id=\"fast-p\">\n<tr><th>p</th><th>fast_p</th></tr>\n";
  for (const auto& point : summary["fast_p"]) {
    const double p = point["p"].get<double>();
    if (std::fabs(p * 2 - std::round(p * 2)) > 1e-9) continue;
    char text[16];
    std::snprintf(text, sizeof text, "%.1f", p);
    html << "<tr><td>" << text << "</td><td>" << format_percent(point["overall"].get<double>())
         << "</td></tr>\n";
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
      if (++shown > 20) break;
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
