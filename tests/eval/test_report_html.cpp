// The eval reports: Markdown numbers, an HTML page that parses, and the page rendered by Chromium.
#include <doctest/doctest.h>

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
  CHECK(md.find("| all | 5 | 3 | 60.0% | 1.587 | 1.320 | 40.0% | 20.0% | 0.0% | 1 |") !=
        std::string::npos);
  CHECK(md.find("| alpha | 3 | 2 | 66.7% | 1.000 | 1.000 | 33.3% | 0.0% | 0.0% | 0 |") !=
        std::string::npos);
  CHECK(md.find("| beta | 2 | 1 | 50.0% | 4.000 | 2.000 | 50.0% | 50.0% | 0.0% | 1 |") !=
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
  // Four charts, the per-task speedups printed in the chart itself.
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
