// The `crucible` command line: serve, tasks, export, eval, replay.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>

#include "core/log.hpp"
#include "core/msgpack_codec.hpp"
#include "core/text_file.hpp"
#include "env/eval.hpp"
#include "env/replay.hpp"
#include "env/report.hpp"
#include "env/server.hpp"
#include "env/stages.hpp"
#include "env/trajectory_log.hpp"
#include "sandbox/gpu_probe.hpp"
#include "tasks/format.hpp"
#include "tasks/registry.hpp"

#ifndef CRUCIBLE_HOME_DEFAULT
#define CRUCIBLE_HOME_DEFAULT "."
#endif

namespace {

using namespace crucible;

env::Server* g_server = nullptr;

void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

std::filesystem::path resolve_home(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("CRUCIBLE_HOME"); env != nullptr && *env != '\0') return env;
  return CRUCIBLE_HOME_DEFAULT;
}

std::filesystem::path default_log_path() {
  return std::filesystem::path("runs") / core::utc_time_text("%Y%m%d-%H%M%S") / "trajectories.log";
}

core::Result<tasks::Registry> load_registry(const std::filesystem::path& home) {
  auto registry = tasks::Registry::load(home);
  if (!registry) {
    std::cerr << "crucible: cannot load the tasks under " << (home / "tasks").string() << ":\n"
              << registry.error().message << "\n";
  }
  return registry;
}

std::filesystem::path default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "crucible" / "compile";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "crucible" / "compile";
  }
  return std::filesystem::path(".cache") / "crucible" / "compile";
}

int serve(const std::string& home_flag, env::ServerOptions options,
          env::PipelineOptions pipeline_options) {
  const auto home = resolve_home(home_flag);
  auto registry = load_registry(home);
  if (!registry) return 2;
  pipeline_options.home = std::filesystem::absolute(home);
  pipeline_options.gpus = sandbox::probe_gpus();
  if (pipeline_options.gpus.gpus.empty()) {
    core::log_warn(pipeline_options.gpus.reason + ": steps will be answered infra_error");
  }
  options.gpus = pipeline_options.gpus.to_value();
  if (pipeline_options.compile_options.cache_dir.empty()) {
    pipeline_options.compile_options.cache_dir = default_cache_dir();
  }
  options.arch = pipeline_options.compile_options.default_arch;
  std::string notes;
  auto pipeline = env::build_pipeline(pipeline_options, &notes);
  if (!notes.empty()) core::log_warn(notes);
  auto server = env::Server::create(options, *registry, std::move(pipeline));
  if (!server) {
    std::cerr << "crucible: " << server.error().message << "\n";
    return 2;
  }
  g_server = server->get();
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  core::log_info("trajectory log: " + options.log_path.string());
  (*server)->run();
  g_server = nullptr;
  return 0;
}

int export_log(const std::string& log_path, const std::string& out_path) {
  std::ofstream file;
  std::ostream* out = &std::cout;
  if (!out_path.empty() && out_path != "-") {
    file.open(out_path);
    if (!file) {
      std::cerr << "crucible: cannot write " << out_path << "\n";
      return 2;
    }
    out = &file;
  }
  auto report = env::read_trajectory_log(log_path, [&](core::Value&& record) {
    *out << core::to_json_text(record) << "\n";
    return true;
  });
  if (!report) {
    std::cerr << "crucible: " << report.error().message << "\n";
    return 2;
  }
  std::cerr << "exported " << report->records << " records (log format " << report->format_version
            << ")";
  if (report->torn_tail) {
    std::cerr << "; torn tail of " << (report->file_bytes - report->good_bytes)
              << " bytes skipped (" << report->tail_reason << ")";
  }
  std::cerr << "\n";
  return 0;
}

std::atomic<bool> g_stop_eval{false};

void on_eval_signal(int) {
  // A first Ctrl-C lets in-flight samples finish and keeps them; a second one ends at once.
  if (g_stop_eval.exchange(true)) std::_Exit(130);
}

// The pipeline `serve` would build: local GPUs probed, compile pool started.
env::Pipeline local_pipeline(const std::filesystem::path& home,
                             env::PipelineOptions pipeline_options) {
  pipeline_options.home = std::filesystem::absolute(home);
  pipeline_options.gpus = sandbox::probe_gpus();
  if (pipeline_options.gpus.gpus.empty()) {
    core::log_warn(pipeline_options.gpus.reason + ": steps will be answered infra_error");
  }
  if (pipeline_options.compile_options.cache_dir.empty()) {
    pipeline_options.compile_options.cache_dir = default_cache_dir();
  }
  std::string notes;
  auto pipeline = env::build_pipeline(pipeline_options, &notes);
  if (!notes.empty()) core::log_warn(notes);
  return pipeline;
}

// A reward spec from a JSON text or from a file holding one; null for "".
core::Result<core::Value> read_reward_json(const std::string& text) {
  if (text.empty()) return core::Value(nullptr);
  std::string json = text;
  std::error_code error;
  if (text.front() != '{' && std::filesystem::is_regular_file(text, error)) {
    if (auto contents = core::read_text_file(text)) json = std::move(contents).value();
  }
  core::Value value = core::Value::parse(json, nullptr, false);
  if (value.is_discarded()) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "--reward: neither a JSON object nor a file holding one: " + text};
  }
  return value;
}

struct EvalArgs {
  std::string input;
  std::string out_dir = "eval-out";
  std::vector<std::string> tasks;
  std::string server;
  std::string reward;
  std::uint64_t seed = 1;
  std::size_t jobs = 4;
  bool resume = false;
  long timeout_s = 600;
};

int run_eval_command(const std::string& home_flag, const EvalArgs& args,
                     const env::PipelineOptions& pipeline_options) {
  const auto home = resolve_home(home_flag);
  auto registry = load_registry(home);
  if (!registry) return 2;
  std::vector<std::string> skipped;
  auto samples = env::load_samples(args.input, *registry, &skipped);
  if (!samples) {
    std::cerr << "crucible eval: " << samples.error().message << "\n";
    return 2;
  }
  for (const auto& path : skipped) core::log_warn("no task named by " + path + ": skipped");
  auto selected = env::select_samples(std::move(samples).value(), args.tasks, *registry);
  if (!selected) {
    std::cerr << "crucible eval: " << selected.error().message << "\n";
    return 2;
  }
  auto reward_json = read_reward_json(args.reward);
  if (!reward_json) {
    std::cerr << "crucible eval: " << reward_json.error().message << "\n";
    return 2;
  }
  auto spec = rewards::parse_reward_spec(*reward_json);
  if (!spec) {
    std::cerr << "crucible eval: --reward: " << spec.error().message << "\n";
    return 2;
  }
  std::optional<env::Pipeline> pipeline;
  std::unique_ptr<env::Scorer> scorer;
  if (args.server.empty()) {
    pipeline.emplace(local_pipeline(home, pipeline_options));
    scorer = env::make_pipeline_scorer(*pipeline, *spec, args.seed);
  } else {
    auto remote = env::make_server_scorer(args.server, args.jobs, *reward_json, args.seed,
                                          std::chrono::seconds(args.timeout_s));
    if (!remote) {
      std::cerr << "crucible eval: " << remote.error().message << "\n";
      return 2;
    }
    scorer = std::move(remote).value();
  }
  struct sigaction action {};
  action.sa_handler = on_eval_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  env::EvalOptions options;
  options.out_dir = args.out_dir;
  options.workers = args.jobs;
  options.resume = args.resume;
  options.stop = &g_stop_eval;
  options.progress_terminal = ::isatty(STDERR_FILENO) != 0;
  core::Value run_info{{"input", args.input},
                       {"tasks", args.tasks.empty() ? std::vector<std::string>{"all"} : args.tasks},
                       {"seed", args.seed},
                       {"reward_spec", rewards::reward_spec_to_value(*spec)},
                       {"arch", pipeline_options.compile_options.default_arch},
                       {"gpus", args.server.empty() ? sandbox::probe_gpus().to_value()
                                                    : core::Value("see the server")}};
  auto outcome = env::run_eval(*selected, *registry, *scorer, options, run_info);
  if (!outcome) {
    std::cerr << "crucible eval: " << outcome.error().message << "\n";
    return 2;
  }
  const auto& overall = outcome->summary["overall"];
  std::cerr << "scored " << outcome->scored << " samples"
            << (outcome->already_done > 0
                    ? " (" + std::to_string(outcome->already_done) + " kept from the earlier run)"
                    : std::string())
            << "; correct " << env::format_percent(overall["correct_rate"].get<double>())
            << ", geomean speedup (correct) "
            << env::format_number(overall["geomean_speedup_correct"]) << ", infra_error "
            << overall["infra_errors"] << " (excluded)\n"
            << "report: " << (std::filesystem::path(args.out_dir) / "report.html").string() << "\n";
  if (outcome->interrupted) {
    std::cerr << "interrupted: " << outcome->remaining
              << " samples left; run the same command with --resume to finish\n";
    return 130;
  }
  return 0;
}

struct ReplayArgs {
  std::string log;
  bool rescore = false;
  std::string reward;
  std::string output = "replay.json";
  std::size_t jobs = 4;
  std::size_t rows = 50;
};

int run_replay_command(const std::string& home_flag, const ReplayArgs& args,
                       const env::PipelineOptions& pipeline_options) {
  auto loaded = env::load_log(args.log);
  if (!loaded) {
    std::cerr << "crucible replay: " << loaded.error().message << "\n";
    return 2;
  }
  if (loaded->read_report.value("torn_tail", false)) {
    core::log_warn("the log ends in a torn record (" +
                   loaded->read_report.value("tail_reason", std::string()) +
                   "): it was skipped; every answered step before it is replayed");
  }
  core::Value replay;
  if (args.rescore) {
    auto reward_json = read_reward_json(args.reward);
    if (!reward_json) {
      std::cerr << "crucible replay: " << reward_json.error().message << "\n";
      return 2;
    }
    auto spec = rewards::parse_reward_spec(*reward_json);
    if (!spec) {
      std::cerr << "crucible replay: --reward: " << spec.error().message << "\n";
      return 2;
    }
    replay = env::rescore_log(loaded->records, *spec);
  } else {
    if (!args.reward.empty()) {
      std::cerr << "crucible replay: --reward needs --rescore (a re-measurement uses each "
                   "step's logged spec)\n";
      return 2;
    }
    const auto home = resolve_home(home_flag);
    auto registry = load_registry(home);
    if (!registry) return 2;
    auto pipeline = local_pipeline(home, pipeline_options);
    replay = env::remeasure_log(loaded->records, *registry, pipeline, args.jobs);
  }
  replay["log"] = core::Value{{"path", args.log}, {"read", loaded->read_report}};
  std::cout << env::format_replay(replay, args.rows);
  if (!args.output.empty() && args.output != "-") {
    std::ofstream file(args.output);
    file << core::to_json_text(replay, 2) << "\n";
    if (!file) {
      std::cerr << "crucible replay: cannot write " << args.output << "\n";
      return 2;
    }
    std::cerr << "replay written to " << args.output << "\n";
  }
  return 0;
}

// How the GPU stage measures: the same flags for serve, eval and replay, so a replay can
// re-measure under the settings the logged run used.
void add_measure_options(CLI::App* command, env::PipelineOptions& pipeline) {
  command
      ->add_option("--kernel-timeout-ms", pipeline.gpu_options.kernel_timeout_ms,
                   "how long one kernel call may run before it counts as a hang")
      ->capture_default_str();
  command
      ->add_option("--time-cap-ms", pipeline.gpu_options.timing.time_cap_ms,
                   "timing budget per case")
      ->capture_default_str();
  command
      ->add_option("--target-ci", pipeline.gpu_options.timing.target_rel_ci,
                   "stop timing a case once the median's 95% confidence interval is within "
                   "this fraction")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"crucible: an RL environment server for GPU-kernel-generation agents"};
  app.require_subcommand(1);
  std::string home_flag;
  std::string log_level = "info";
  app.add_option("--home", home_flag,
                 "folder holding tasks/ and kernels/ (default: $CRUCIBLE_HOME or the source tree)");
  app.add_option("--log-level", log_level, "debug, info, warn, error or off");

  env::ServerOptions options;
  std::string log_path;
  bool no_log_sync = false;
  long idle_timeout_s = options.episode_idle_timeout.count();
  auto* serve_cmd = app.add_subcommand("serve", "run the environment server");
  serve_cmd->add_option("--bind", options.bind, "ZeroMQ endpoint")->capture_default_str();
  serve_cmd->add_flag("--allow-remote", options.allow_remote,
                      "allow a non-loopback bind (the protocol has no authentication)");
  serve_cmd->add_option("--log", log_path,
                        "trajectory log file (default runs/<utc-time>/trajectories.log)");
  serve_cmd->add_flag("--no-log-sync", no_log_sync,
                      "skip fdatasync per record (a process crash still loses nothing)");
  serve_cmd->add_option("--workers", options.workers, "pipeline threads (0: one per core)")
      ->capture_default_str();
  serve_cmd->add_option("--max-steps", options.default_max_steps, "default episode length")
      ->capture_default_str()
      ->check(CLI::Range(1u, 10000u));
  serve_cmd->add_option("--idle-timeout", idle_timeout_s, "seconds before an idle episode expires")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  serve_cmd->add_option("--max-frame-bytes", options.limits.max_frame_bytes)->capture_default_str();
  serve_cmd->add_option("--max-source-bytes", options.limits.max_source_bytes)
      ->capture_default_str();
  env::PipelineOptions pipeline_options;
  std::string cache_dir;
  bool no_compile = false;
  serve_cmd
      ->add_option("--arch", pipeline_options.compile_options.default_arch,
                   "NVRTC target (default: the GPU's, else sm_90a)")
      ->capture_default_str();
  serve_cmd
      ->add_option("--compile-workers", pipeline_options.compile_options.workers,
                   "compile worker processes (0: one per core)")
      ->capture_default_str();
  serve_cmd->add_option("--compile-cache", cache_dir,
                        "compile cache folder (default ~/.cache/crucible/compile)");
  serve_cmd->add_flag("--no-compile", no_compile, "start no compile workers (steps: infra_error)");
  add_measure_options(serve_cmd, pipeline_options);

  auto* tasks_cmd = app.add_subcommand("tasks", "list tasks or show one as an agent sees it");
  tasks_cmd->require_subcommand(1);
  auto* list_cmd = tasks_cmd->add_subcommand("list", "one line per task");
  std::string show_id;
  auto* show_cmd = tasks_cmd->add_subcommand("show", "what an agent is shown for a task");
  show_cmd->add_option("id", show_id, "task id, e.g. llm/rms_norm")->required();
  bool show_json = false;
  show_cmd->add_flag("--json", show_json, "print the agent view as JSON");

  std::string export_in;
  std::string export_out;
  auto* export_cmd = app.add_subcommand("export", "write a trajectory log as JSON lines");
  export_cmd->add_option("log", export_in, "trajectory log")->required()->check(CLI::ExistingFile);
  export_cmd->add_option("-o,--output", export_out, "output file (default stdout)");

  EvalArgs eval_args;
  env::PipelineOptions eval_pipeline;
  std::string eval_cache_dir;
  bool eval_no_compile = false;
  auto* eval_cmd = app.add_subcommand("eval", "score a folder or a JSONL file of solutions");
  eval_cmd
      ->add_option("input", eval_args.input,
                   "folder of <task-id>.cu files, or JSONL of {task, source, ...}")
      ->required()
      ->check(CLI::ExistingPath);
  eval_cmd->add_option("-o,--out", eval_args.out_dir, "output folder")->capture_default_str();
  eval_cmd->add_option("-t,--tasks", eval_args.tasks, "task ids or categories (default: all)")
      ->delimiter(',');
  eval_cmd->add_option("--server", eval_args.server,
                       "score through a running server at this endpoint instead of in-process");
  eval_cmd->add_option("--reward", eval_args.reward, "reward spec: JSON text or a JSON file");
  eval_cmd->add_option("--seed", eval_args.seed, "case seed for every sample")
      ->capture_default_str();
  eval_cmd->add_option("-j,--jobs", eval_args.jobs, "samples scored at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  eval_cmd->add_flag("--resume", eval_args.resume,
                     "continue an interrupted run: skip samples already in results.jsonl");
  eval_cmd->add_option("--timeout", eval_args.timeout_s, "seconds per sample with --server")
      ->capture_default_str();
  eval_cmd->add_option("--arch", eval_pipeline.compile_options.default_arch, "NVRTC target")
      ->capture_default_str();
  eval_cmd
      ->add_option("--compile-workers", eval_pipeline.compile_options.workers,
                   "compile worker processes (0: one per core)")
      ->capture_default_str();
  eval_cmd->add_option("--compile-cache", eval_cache_dir, "compile cache folder");
  eval_cmd->add_flag("--no-compile", eval_no_compile,
                     "start no compile workers (every sample: infra_error)");
  add_measure_options(eval_cmd, eval_pipeline);

  ReplayArgs replay_args;
  env::PipelineOptions replay_pipeline;
  auto* replay_cmd = app.add_subcommand(
      "replay", "re-score a trajectory log (--rescore) or re-measure it and report drift");
  replay_cmd->add_option("log", replay_args.log, "trajectory log")
      ->required()
      ->check(CLI::ExistingFile);
  replay_cmd->add_flag("--rescore", replay_args.rescore,
                       "recompute rewards from the logged measurements (no GPU)");
  replay_cmd->add_option("--reward", replay_args.reward,
                         "reward spec for --rescore: JSON text or a JSON file");
  replay_cmd->add_option("-o,--output", replay_args.output, "JSON output ('-': none)")
      ->capture_default_str();
  replay_cmd->add_option("-j,--jobs", replay_args.jobs, "steps re-measured at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  replay_cmd->add_option("--rows", replay_args.rows, "steps shown in the table")
      ->capture_default_str();
  replay_cmd
      ->add_option("--compile-workers", replay_pipeline.compile_options.workers,
                   "compile worker processes (0: one per core)")
      ->capture_default_str();
  add_measure_options(replay_cmd, replay_pipeline);

  CLI11_PARSE(app, argc, argv);

  core::LogLevel level;
  if (!core::parse_log_level(log_level, &level)) {
    std::cerr << "crucible: unknown log level '" << log_level << "'\n";
    return 2;
  }
  core::set_log_level(level);

  if (*serve_cmd) {
    options.log_path = log_path.empty() ? default_log_path() : std::filesystem::path(log_path);
    options.log_sync = !no_log_sync;
    options.episode_idle_timeout = std::chrono::seconds(idle_timeout_s);
    pipeline_options.compile = !no_compile;
    if (!cache_dir.empty()) pipeline_options.compile_options.cache_dir = cache_dir;
    return serve(home_flag, options, pipeline_options);
  }
  if (*tasks_cmd) {
    auto registry = load_registry(resolve_home(home_flag));
    if (!registry) return 2;
    if (*list_cmd) {
      std::cout << tasks::format_task_table(*registry);
      return 0;
    }
    const auto* task = registry->find(show_id);
    if (task == nullptr) {
      std::cerr << "crucible: unknown task '" << show_id << "'; `crucible tasks list` shows them\n";
      return 2;
    }
    if (show_json) {
      std::cout << core::to_json_text(tasks::agent_view(*task), 2) << "\n";
    } else {
      std::cout << tasks::format_task_details(*task);
    }
    return 0;
  }
  if (*export_cmd) return export_log(export_in, export_out);
  if (*eval_cmd) {
    eval_pipeline.compile = !eval_no_compile;
    if (!eval_cache_dir.empty()) eval_pipeline.compile_options.cache_dir = eval_cache_dir;
    return run_eval_command(home_flag, eval_args, eval_pipeline);
  }
  if (*replay_cmd) return run_replay_command(home_flag, replay_args, replay_pipeline);
  return 0;
}
