// The eval reports: Markdown numbers, an HTML page that parses, and the page rendered by Chromium.
#include <doctest/doctest.h>

#include <set>

#include "env/cli/report.hpp"
#include "tests/eval/eval_test_support.hpp"

using namespace crucible;

namespace {

core::Value hand_made_summary() {
  return env::summarize(testing::hand_made_results(), {{"input", "hand<made>.jsonl"},
                                                       {"scored_by", "in-process"},
                                                       {"samples_selected", 6},
                                                       {"samples_recorded", 6}});
}

// The text of the element with `id`, read back by xmllint from the page parsed as XML (a
// stricter test than HTML parsing: every tag must be closed and every entity valid).
std::string xpath_text(const std::filesystem::path& page, const std::string& xpath) {
  std::string output;
  const int rc = testing::run_command(
      "xmllint --nonet --xpath '" + xpath + "' '" + page.string() + "'", &output);
  REQUIRE_MESSAGE(rc == 0, output);
  while (!output.empty() && (output.back() == '\n' || output.back() == '\r')) output.pop_back();
  return output;
}

}  // namespace

TEST_CASE("eval report: the Markdown report holds the metrics and lists infra_error apart") {
  const auto md = env::render_markdown(hand_made_summary());
  CHECK(md.find("| all | 5 | 3 | 60.0% | 1.587 | 1.320 | 40.0% | 20.0% | - | 0.0% | 1 |") !=
        std::string::npos);
  CHECK(md.find("| alpha | 3 | 2 | 66.7% | 1.000 | 1.000 | 33.3% | 0.0% | - | 0.0% | 0 |") !=
        std::string::npos);
  CHECK(md.find("| beta | 2 | 1 | 50.0% | 4.000 | 2.000 | 50.0% | 50.0% | - | 0.0% | 1 |") !=
        std::string::npos);
  CHECK(md.find("| 1.0 | 40.0% |") != std::string::npos);
  CHECK(md.find("- `d`: no CUDA device") != std::string::npos);
}

TEST_CASE("eval report: report.html is well-formed, self-contained and holds the right numbers") {
  // scripts/setup installs xmllint (libxml2-utils): without it this check cannot run, which
  // is a failure, not a pass.
  REQUIRE_MESSAGE(testing::have_program("xmllint"),
                  "xmllint is not installed (scripts/setup installs libxml2-utils)");
  const auto dir = testing::fresh_dir("html");
  const auto page = dir / "report.html";
  const std::string html = env::render_html(hand_made_summary());
  testing::write_file(page, html);
  std::string output;
  REQUIRE_MESSAGE(
      testing::run_command("xmllint --nonet --noout '" + page.string() + "'", &output) == 0,
      output);
  CHECK(xpath_text(page, "string(//*[@id=\"correct-rate\"])") == "60.0%");
  CHECK(xpath_text(page, "string(//*[@id=\"geomean-correct\"])") == "1.587");
  CHECK(xpath_text(page, "string(//*[@id=\"geomean-all\"])") == "1.320");
  CHECK(xpath_text(page, "string(//*[@id=\"fast-1\"])") == "40.0%");
  CHECK(xpath_text(page, "string(//*[@id=\"infra\"])") == "1");
  // Four charts (tasks, statuses, categories, fast_p), the per-task speedups printed in the
  // chart itself.
  CHECK(xpath_text(page, "count(//*[local-name()=\"svg\"])") == "4");
  CHECK(html.find(">4.000x</text>") != std::string::npos);                 // beta/e
  CHECK(html.find(">0.500x</text>") != std::string::npos);                 // alpha/b
  CHECK(html.find("2.000x (correct only: 4.000x)") != std::string::npos);  // beta category
  // The input name is escaped; nothing is fetched from elsewhere.
  CHECK(html.find("hand&lt;made&gt;.jsonl") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));
  CHECK(html.find("https://") == std::string::npos);
}

TEST_CASE("eval report: headless Chromium renders report.html with the numbers in the DOM") {
  std::string browser;
  for (const char* name : {"chromium", "chromium-browser"}) {
    if (testing::have_program(name)) {
      browser = name;
      break;
    }
  }
  // scripts/setup installs chromium: without it the render check cannot run, which is a
  // failure, not a pass.
  REQUIRE_MESSAGE(!browser.empty(), "no chromium on this machine (scripts/setup installs it)");
  const auto dir = testing::fresh_dir("chromium");
  const auto page = dir / "report.html";
  testing::write_file(page, env::render_html(hand_made_summary()));
  std::string dom;
  const int rc = testing::run_command(
      "timeout 120 " + browser +
          " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
          "--user-data-dir='" +
          (dir / "profile").string() + "' --dump-dom 'file://" + page.string() + "' 2>/dev/null",
      &dom);
  REQUIRE_MESSAGE(rc == 0, dom);
  CHECK(dom.find("<td id=\"correct-rate\">60.0%</td>") != std::string::npos);
  CHECK(dom.find("<td id=\"geomean-correct\">1.587</td>") != std::string::npos);
  CHECK(dom.find("<td id=\"geomean-all\">1.320</td>") != std::string::npos);
  CHECK(dom.find(">4.000x</text>") != std::string::npos);
  CHECK(dom.find("<polyline") != std::string::npos);

  // A screenshot proves the page lays out and paints (a PNG of the requested size appears).
  const auto shot = dir / "report.png";
  const int shot_rc = testing::run_command(
      "timeout 120 " + browser +
          " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
          "--user-data-dir='" +
          (dir / "profile").string() +
          "' --window-size=1000,1600 "
          "--screenshot='" +
          shot.string() + "' 'file://" + page.string() + "'",
      nullptr);
  CHECK(shot_rc == 0);
  CHECK(std::filesystem::exists(shot));
  if (std::filesystem::exists(shot)) CHECK(std::filesystem::file_size(shot) > 10000);
}

namespace {

// The attribute `name` of the rect marked with `attribute`="value", read back by xmllint.
double rect_number(const std::filesystem::path& page, const std::string& attribute,
                   const std::string& value, const std::string& name) {
  return std::stod(xpath_text(page, "string(//*[local-name()=\"rect\"][@" + attribute + "=\"" +
                                        value + "\"]/@" + name + ")"));
}

}  // namespace

TEST_CASE("eval report: speedup charts use a log axis with ticks, bars grow from parity") {
  REQUIRE_MESSAGE(testing::have_program("xmllint"),
                  "xmllint is not installed (scripts/setup installs libxml2-utils)");
  const auto page = testing::fresh_dir("log-axis") / "report.html";
  const std::string html = env::render_html(hand_made_summary());
  testing::write_file(page, html);
  // alpha/a is 2.0x, alpha/b 0.5x, beta/e 4.0x: on a log axis 0.5x and 2x are equally long
  // (one each side of parity) and 4x twice as long as 2x.
  const double two = rect_number(page, "data-label", "alpha/a", "width");
  const double half = rect_number(page, "data-label", "alpha/b", "width");
  const double four = rect_number(page, "data-label", "beta/e", "width");
  CHECK(two > 10.0);
  CHECK(half == doctest::Approx(two));
  CHECK(four == doctest::Approx(2 * two));
  // The faster bar starts at parity, where the slower one ends.
  const double parity = rect_number(page, "data-label", "alpha/a", "x");
  CHECK(rect_number(page, "data-label", "alpha/b", "x") + half == doctest::Approx(parity));
  CHECK(rect_number(page, "data-label", "beta/e", "x") == doctest::Approx(parity));
  // Ticks at powers of two from 0.5x to 4x, labelled.
  for (const char* tick : {">0.5x</text>", ">1x</text>", ">2x</text>", ">4x</text>"}) {
    CAPTURE(tick);
    CHECK(html.find(tick) != std::string::npos);
  }
  CHECK(html.find("log scale") != std::string::npos);
}

TEST_CASE("eval report: each status has its own colour in the chart and the table") {
  REQUIRE_MESSAGE(testing::have_program("xmllint"),
                  "xmllint is not installed (scripts/setup installs libxml2-utils)");
  const auto page = testing::fresh_dir("colours") / "report.html";
  testing::write_file(page, env::render_html(hand_made_summary()));
  std::set<std::string> colours;
  for (const char* status : {"ok", "incorrect", "compile_error", "infra_error"}) {
    CAPTURE(status);
    const std::string fill =
        xpath_text(page, std::string("string(//*[local-name()=\"rect\"][@data-status=\"") + status +
                             "\"]/@fill)");
    CHECK(fill.starts_with("#"));
    colours.insert(fill);
  }
  CHECK(colours.size() == 4);
  CHECK(xpath_text(page, "string(//*[local-name()=\"rect\"][@data-status=\"ok\"]/@fill)") ==
        "#2da44e");
  // The statuses table carries the same colour beside each name.
  CHECK(xpath_text(page, "string(//table[@id=\"statuses\"]//tr[td=\"ok\"]/td/span/@style)") ==
        "background:#2da44e");
}

TEST_CASE("eval report: long task names are shown whole and absent numbers are dashes") {
  REQUIRE_MESSAGE(testing::have_program("xmllint"),
                  "xmllint is not installed (scripts/setup installs libxml2-utils)");
  const std::string long_name =
      "a_task_name_long_enough_to_overflow_any_fixed_label_column_of_a_chart";
  auto records = testing::hand_made_results();
  records.push_back(testing::sample_record(long_name, "gamma", "incorrect"));
  records.back()["meta"] = core::Value{{"model", "m"}};
  const auto summary = env::summarize(records, {{"input", "x"}});
  const auto page = testing::fresh_dir("names") / "report.html";
  const std::string html = env::render_html(summary);
  testing::write_file(page, html);
  const std::string id = "gamma/" + long_name;
  // The label is the full id, and the chart's label column is wide enough for it: the label's
  // right edge is where the bars start, and its left edge stays inside the picture.
  const std::string label_x =
      xpath_text(page, "string(//*[local-name()=\"text\"][.=\"" + id + "\"][1]/@x)");
  REQUIRE_FALSE(label_x.empty());
  CHECK(std::stod(label_x) >= 7.0 * static_cast<double>(id.size()));
  CHECK(xpath_text(page, "string(//table[@id=\"tasks\"]//td[.=\"" + id + "\"])") == id);
  CHECK(xpath_text(page, "string(//table[@id=\"model-tasks\"]//td[.=\"" + id + "\"])") == id);
  // The task has no correct sample: its geomean cells are dashes, never "n/a".
  CHECK(xpath_text(page, "string(//table[@id=\"tasks\"]//tr[td=\"" + id + "\"]/td[6])") == "-");
  CHECK(html.find("n/a") == std::string::npos);
  CHECK(html.find("no correct sample timed") != std::string::npos);
  const std::string md = env::render_markdown(summary);
  CHECK(md.find("| " + id + " | 1 | 0 | 0.0% | - | 1.000 |") != std::string::npos);
  CHECK(md.find("n/a") == std::string::npos);
  // A group with nothing scored shows no rate at all rather than 0 %.
  const auto infra_only =
      env::summarize({testing::sample_record("d", "beta", "infra_error")}, core::Value::object());
  CHECK(env::render_markdown(infra_only).find("| all | 0 | 0 | - | - | - | - | - | - | - | 1 |") !=
        std::string::npos);
}
