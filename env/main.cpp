// The `crucible` command line: serve, tasks, export.
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <CLI/CLI.hpp>

#include "core/log.hpp"
#include "core/msgpack_codec.hpp"
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
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
  return std::filesystem::path("runs") / stamp / "trajectories.log";
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
  std::cerr << "exported " << report->records << " records (log format "
            << report->format_version << ")";
  if (report->torn_tail) {
    std::cerr << "; torn tail of " << (report->file_bytes - report->good_bytes)
              << " bytes skipped (" << report->tail_reason << ")";
  }
  std::cerr << "\n";
  return 0;
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
  serve_cmd->add_option("--arch", pipeline_options.compile_options.default_arch,
                        "NVRTC target (default: the GPU's, else sm_90a)")
      ->capture_default_str();
  serve_cmd->add_option("--compile-workers", pipeline_options.compile_options.workers,
                        "compile worker processes (0: one per core)")
      ->capture_default_str();
  serve_cmd->add_option("--compile-cache", cache_dir,
                        "compile cache folder (default ~/.cache/crucible/compile)");
  serve_cmd->add_flag("--no-compile", no_compile, "start no compile workers (steps: infra_error)");
  serve_cmd->add_option("--kernel-timeout-ms", pipeline_options.gpu_options.kernel_timeout_ms,
                        "how long one kernel call may run before it counts as a hang")
      ->capture_default_str();
  serve_cmd->add_option("--time-cap-ms", pipeline_options.gpu_options.timing.time_cap_ms,
                        "timing budget per case")
      ->capture_default_str();

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
  return 0;
}
