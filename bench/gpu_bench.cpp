// GPU benchmark (run on the GPU machine): (a) end-to-end step latency, (b) run-to-run noise of
// the speedup of one kernel, (d) time to the next served step after a crash and after a hang.
// Starts its own server with the full pipeline; prints a table and writes JSON.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>

#include "clients/cpp/client.hpp"
#include "core/log.hpp"
#include "core/msgpack_codec.hpp"
#include "core/text_file.hpp"
#include "env/server.hpp"
#include "env/stages.hpp"
#include "runner/gpu_probe.hpp"
#include "tasks/registry.hpp"

namespace {

using namespace crucible;
using core::Value;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  auto text = core::read_text_file(path);
  if (!text) {
    std::fprintf(stderr, "%s\n", text.error().message.c_str());
    std::exit(1);
  }
  return std::move(text).value();
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(rank);
  const auto high = std::min(low + 1, values.size() - 1);
  return values[low] + (rank - static_cast<double>(low)) * (values[high] - values[low]);
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

struct Timed {
  Value result;
  double seconds;
};

// Where the steps' time went: the runner's phases (summed over cases: correctness, timing
// set-up, timing), the runner's whole job, and the rest of the step (compile, server, transport).
class PhaseTable {
 public:
  void add(const Timed& step) {
    const Value& device = step.result["timing"]["device"];
    std::map<std::string, double> sums;
    for (const auto& [name, ms] : device["phases_ms"].items()) {
      // "<phase> <case>" or "<phase>": case names hold no spaces.
      const auto space = name.rfind(' ');
      sums[space == std::string::npos ? name : name.substr(0, space)] += ms.get<double>();
    }
    const double runner_ms = 1000 * device["runner_seconds"].get<double>();
    sums["runner (whole job)"] = runner_ms;
    sums["outside the runner"] = 1000 * step.seconds - runner_ms;
    for (const auto& [name, ms] : sums) samples_[name].push_back(ms);
  }
  Value medians() const {
    Value out = Value::object();
    for (const auto& [name, values] : samples_) out[name] = percentile(values, 50);
    return out;
  }
  std::string line() const {
    std::string text;
    for (const auto& [name, values] : samples_) {
      char item[96];
      std::snprintf(item, sizeof item, "%s%s %.0f", text.empty() ? "" : ", ", name.c_str(),
                    percentile(values, 50));
      text += item;
    }
    return text;
  }

 private:
  std::map<std::string, std::vector<double>> samples_;
};

Timed score(clients::Client& client, const std::string& source, std::uint64_t seed) {
  const auto start = Clock::now();
  auto reply = client.score("llm/rms_norm", source, nullptr, seed);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!reply) {
    std::fprintf(stderr, "score failed: %s\n", reply.error().message.c_str());
    std::exit(1);
  }
  return {(*reply)["result"], seconds};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"crucible GPU benchmark: step latency, speedup noise, recovery"};
  std::string home = CRUCIBLE_SOURCE_DIR;
  std::string json_path;
  int steps = 20;
  int noise_steps = 10;
  app.add_option("--home", home, "repository root (tasks/, kernels/)");
  app.add_option("--json", json_path, "write the figures here");
  app.add_option("--steps", steps, "steps for the latency figures")->capture_default_str();
  app.add_option("--noise-steps", noise_steps, "steps for the speedup noise")
      ->capture_default_str();
  double time_cap_ms = 0;
  app.add_option("--time-cap-ms", time_cap_ms, "timing budget per case (0: the server default)");
  double target_ci = 0;
  app.add_option("--target-ci", target_ci,
                 "relative CI half-width at which a case stops (0: the server default)");
  CLI11_PARSE(app, argc, argv);
  core::set_log_level(core::LogLevel::kWarn);

  auto registry = tasks::Registry::load(home);
  if (!registry) {
    std::fprintf(stderr, "%s\n", registry.error().message.c_str());
    return 1;
  }
  env::PipelineOptions pipeline_options;
  pipeline_options.home = home;
  pipeline_options.gpus = runner::probe_gpus();
  if (pipeline_options.gpus.gpus.empty()) {
    std::fprintf(stderr, "no GPU: %s\n", pipeline_options.gpus.reason.c_str());
    return 77;
  }
  pipeline_options.compile_options.cache_dir.clear();  // every new source really compiles
  if (time_cap_ms > 0) pipeline_options.gpu_options.timing.time_cap_ms = time_cap_ms;
  if (target_ci > 0) pipeline_options.gpu_options.timing.target_rel_ci = target_ci;
  std::string notes;
  auto pipeline = env::build_pipeline(pipeline_options, &notes);
  if (!notes.empty()) std::fprintf(stderr, "%s", notes.c_str());
  env::ServerOptions options;
  options.gpus = pipeline_options.gpus.to_value();
  options.bind = "tcp://127.0.0.1:*";
  options.log_path =
      std::filesystem::temp_directory_path() / "crucible-gpu-bench" / "trajectories.log";
  std::filesystem::remove_all(options.log_path.parent_path());
  auto server = env::Server::create(options, *registry, std::move(pipeline));
  if (!server) {
    std::fprintf(stderr, "%s\n", server.error().message.c_str());
    return 1;
  }
  std::thread loop([&] { (*server)->run(); });
  clients::ClientOptions client_options;
  client_options.endpoint = (*server)->endpoint();
  client_options.timeout = std::chrono::milliseconds(600000);
  auto client = clients::Client::connect(client_options).value();
  const auto hello = client.hello().value();

  const std::string correct = read_file(home + "/tasks/llm/rms_norm/solution.cu");
  const std::string crash = read_file(home + "/tests/gpu/kernels/illegal_address.cu");
  const std::string hang = read_file(home + "/tests/gpu/kernels/infinite_loop.cu");

  // (a) Step latency. The first step also compiles the reference; each later source differs by
  // a comment, so every step compiles (as in RL, where samples differ), then a repeat of one
  // source shows the compile-cache path.
  const auto cold = score(client, correct + "\n// cold\n", 1);
  std::vector<double> fresh_s, cached_s, episode_s;
  PhaseTable phases;
  for (int i = 0; i < steps; ++i) {
    const auto timed = score(client, correct + "\n// sample " + std::to_string(i) + "\n", 100 + i);
    if (timed.result["status"] != "ok") {
      std::fprintf(stderr, "unexpected status: %s\n", timed.result.dump().c_str());
      return 1;
    }
    fresh_s.push_back(timed.seconds);
    phases.add(timed);
  }
  for (int i = 0; i < steps; ++i) cached_s.push_back(score(client, correct, 500 + i).seconds);
  // The steps of one episode share its seed, so their input values are generated once.
  score(client, correct + "\n// episode warm-up\n", 77);
  for (int i = 0; i < steps; ++i) {
    episode_s.push_back(
        score(client, correct + "\n// episode step " + std::to_string(i) + "\n", 77).seconds);
  }

  // (b) The same kernel in separate steps: spread of its speedup.
  std::vector<double> speedups;
  for (int i = 0; i < noise_steps; ++i) {
    const auto timed = score(client, correct, 900 + i);
    speedups.push_back(timed.result["speedup"].get<double>());
  }
  const double mean = std::accumulate(speedups.begin(), speedups.end(), 0.0) / speedups.size();
  double var = 0.0;
  for (const double s : speedups) var += (s - mean) * (s - mean);
  const double cv = std::sqrt(var / (speedups.size() - 1)) / mean;

  // (d) Recovery: the failing step, then the time until the next step is served.
  Value recovery = Value::array();
  for (const auto& [name, source] :
       {std::pair{"illegal_address", crash}, std::pair{"infinite_loop", hang}}) {
    for (int round = 0; round < 3; ++round) {
      const auto failing = score(client, source, 7000 + round);
      const auto next = score(client, correct, 8000 + round);
      recovery.push_back(
          Value{{"kernel", name},
                {"status", failing.result["status"]},
                {"failing_step_s", failing.seconds},
                {"next_step_status", next.result["status"]},
                {"next_step_s", next.seconds},
                {"next_step_over_typical_s", next.seconds - percentile(cached_s, 50)}});
    }
  }

  const double fresh_p50 = percentile(fresh_s, 50), fresh_p95 = percentile(fresh_s, 95);
  const double cached_p50 = percentile(cached_s, 50), cached_p95 = percentile(cached_s, 95);
  std::printf("GPU: %s\n", hello["gpus"].dump().c_str());
  std::printf(
      "(a) step latency, llm/rms_norm, correct kernel (12 cases x 2 runs + timing of 5):\n");
  std::printf("    first step (reference + candidate compile): %.3f s\n", cold.seconds);
  std::printf("    new source each step:  p50 %.3f s  p95 %.3f s  (n=%d)\n", fresh_p50, fresh_p95,
              steps);
  std::printf("    repeated source:       p50 %.3f s  p95 %.3f s  (n=%d)\n", cached_p50, cached_p95,
              steps);
  const double episode_p50 = percentile(episode_s, 50), episode_p95 = percentile(episode_s, 95);
  std::printf("    new source, one seed:  p50 %.3f s  p95 %.3f s  (n=%d; an episode's steps)\n",
              episode_p50, episode_p95, steps);
  std::printf("    where a new-source step goes (median ms): %s\n", phases.line().c_str());
  std::printf("(b) speedup over %d steps: mean %.4f, CV %.3f %%\n", noise_steps, mean, 100 * cv);
  std::printf("(d) recovery:\n");
  for (const auto& r : recovery) {
    std::printf(
        "    %-16s %-14s failing step %.3f s, next step %s in %.3f s (%+.3f s vs typical)\n",
        r["kernel"].get<std::string>().c_str(), r["status"].get<std::string>().c_str(),
        r["failing_step_s"].get<double>(), r["next_step_status"].get<std::string>().c_str(),
        r["next_step_s"].get<double>(), r["next_step_over_typical_s"].get<double>());
  }
  if (!json_path.empty()) {
    Value report{
        {"benchmark", "gpu"},
        {"date", core::utc_time_text()},
        {"gpus", hello["gpus"]},
        {"command",
         "crucible-bench-gpu --steps " + std::to_string(steps) + " --time-cap-ms " +
             std::to_string(static_cast<int>(pipeline_options.gpu_options.timing.time_cap_ms)) +
             " --target-ci " + number_text(pipeline_options.gpu_options.timing.target_rel_ci) +
             " --json " + json_path},
        {"task", "llm/rms_norm"},
        {"time_cap_ms", pipeline_options.gpu_options.timing.time_cap_ms},
        {"target_rel_ci", pipeline_options.gpu_options.timing.target_rel_ci},
        {"kernel", "tasks/llm/rms_norm/solution.cu"},
        {"step_latency_s",
         {{"first", cold.seconds},
          {"new_source",
           {{"p50", fresh_p50}, {"p95", fresh_p95}, {"n", steps}, {"samples", fresh_s}}},
          {"repeated_source",
           {{"p50", cached_p50}, {"p95", cached_p95}, {"n", steps}, {"samples", cached_s}}},
          {"episode_seed",
           {{"p50", episode_p50}, {"p95", episode_p95}, {"n", steps}, {"samples", episode_s}}},
          {"new_source_phases_ms_median", phases.medians()}}},
        {"speedup_noise",
         {{"steps", noise_steps}, {"speedups", speedups}, {"mean", mean}, {"cv", cv}}},
        {"recovery", recovery},
        {"last_timing", score(client, correct, 42).result["timing"]}};
    std::ofstream(json_path) << core::to_json_text(report, 2) << "\n";
  }
  (*server)->stop();
  loop.join();
  return 0;
}
