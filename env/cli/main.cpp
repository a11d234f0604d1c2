// The `crucible` command line: serve, tasks, export, eval, replay.
#include <sys/resource.h>
#include <unistd.h>
#include <zmq.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "core/curve_keys.hpp"
#include "core/log.hpp"
#include "core/msgpack_codec.hpp"
#include "core/text.hpp"
#include "core/text_file.hpp"
#include "env/cli/compare.hpp"
#include "env/cli/eval.hpp"
#include "env/cli/export_op.hpp"
#include "env/cli/model_tools.hpp"
#include "env/cli/replay.hpp"
#include "env/cli/report.hpp"
#include "env/cli/task_tools.hpp"
#include "env/http_front.hpp"
#include "env/server.hpp"
#include "env/stages.hpp"
#include "env/trajectory_log.hpp"
#include "runner/gpu_probe.hpp"
#include "runner/runner_pool.hpp"
#include "tasks/format.hpp"
#include "tasks/registry.hpp"

#ifndef CRUCIBLE_HOME_DEFAULT
#define CRUCIBLE_HOME_DEFAULT "."
#endif

namespace {

using namespace crucible;

env::Server* g_server = nullptr;

// Exit statuses (docs/eval.md): 2 for a bad command line, input that cannot be used, or output
// that cannot be written; 3 when export or replay went through every good record of a log but
// had to skip some of it (damaged bytes, a torn tail, records of the wrong shape).
constexpr int kExitUsage = 2;
constexpr int kExitSkipped = 3;
constexpr int kExitNothingMeasured = 4;  // eval: no sample was judged (every one infra_error)

// Limits of the options (docs/eval.md). The idle timeout is capped far below where
// std::chrono overflows (~9.2e9 s), which would expire every episode at once.
constexpr std::uint64_t kMaxIdleTimeoutS = 365ull * 24 * 3600;
constexpr std::uint64_t kMinFrameBytes = 1024;
constexpr std::uint64_t kMaxFrameBytes = 1ull << 30;
// What a step request carries besides its source: op, ids, task, seed, map headers.
constexpr std::uint64_t kRequestOverheadBytes = 512;
constexpr double kMaxKernelTimeoutMs = 600000;
constexpr double kMaxTimeCapMs = 600000;

std::string number_text(double x) {
  std::ostringstream text;
  text << x;
  return text.str();
}

// A whole number from `min` to `max`, in decimal digits only. CLI11 alone reads "-1" into an
// unsigned option as 2^64 - 1 and saturates values past the type's range; both are refused here
// with the range in the message.
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max, const std::string& note = "") {
  const std::string range =
      "a whole number from " + std::to_string(min) + " to " + std::to_string(max) + note;
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        if (digits) {
          errno = 0;
          const auto value = std::strtoull(text.c_str(), nullptr, 10);
          if (errno != ERANGE && value >= min && value <= max) return {};
        }
        return "'" + text + "' is not " + range;
      },
      "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

// A finite number in [min, max], or (min, max] with `above_min`. CLI::Range lets NaN through and
// says nothing of infinities.
CLI::Validator real_number(double min, double max, bool above_min, const std::string& note = "") {
  const std::string range =
      above_min ? "a number above " + number_text(min) + " and at most " + number_text(max) + note
                : "a number from " + number_text(min) + " to " + number_text(max) + note;
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end == text.c_str() + text.size();
        if (parsed && std::isfinite(value) && (above_min ? value > min : value >= min) &&
            value <= max) {
          return {};
        }
        return "'" + text + "' is not " + range;
      },
      "NUMBER in " + std::string(above_min ? "(" : "[") + number_text(min) + ", " +
          number_text(max) + "]");
}

// Logs and trajectory inputs are regular files: a FIFO would block until a writer comes and a
// device may never end, so they are refused before anything is opened.
bool require_regular_file(const std::string& command, const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_regular_file(path, error)) return true;
  std::cerr << command << ": " << path
            << " is not a regular file (a FIFO, a device or a socket?): a trajectory log is a "
               "regular file\n";
  return false;
}

void print_write_error(const std::string& command, const std::string& what, int error) {
  std::cerr << command << ": cannot write " << what << ": "
            << (error != 0 ? std::strerror(error) : "the write did not complete") << "\n";
}

// Flushes `out` and says whether every byte written to it got out; on failure prints
// "COMMAND: cannot write WHAT: <errno text>". `write_error`: the errno of an earlier failed
// write to `out`, when the caller caught one (a stream that is already bad does not flush, so
// its errno would be lost).
bool flushed(std::ostream& out, const std::string& command, const std::string& what,
             int write_error = 0) {
  if (out) {
    errno = 0;
    out.flush();
    if (out) return true;
    write_error = errno;
  }
  print_write_error(command, what, write_error);
  return false;
}

// Writes `text` to the file at `path` and closes it; false (with the reason on stderr) when any
// of it did not reach the file.
bool write_output_file(const std::string& command, const std::string& path,
                       const std::string& text) {
  errno = 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  int error = errno;
  if (file) {
    file << text;
    error = errno;
    if (file) {
      file.close();  // the bytes may still be buffered: only a good close says they got out
      error = errno;
    }
  }
  if (!file.fail()) return true;
  print_write_error(command, path, error);
  return false;
}

std::string limit_text(rlim_t value) {
  return value == RLIM_INFINITY ? "unlimited" : std::to_string(value);
}

// Each client connection holds a file descriptor. The soft limit is often 1024 while the hard
// one is far higher, so the server takes what the system allows before it binds.
void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    core::log_warn(std::string("open files: cannot read the limit: ") + std::strerror(errno));
    return;
  }
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur == limit.rlim_max) {
    core::log_info("open files: soft limit " + limit_text(before) + " (the hard limit)");
    return;
  }
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0 && limit.rlim_max == RLIM_INFINITY) {
    // Linux refuses an unlimited soft limit for open files; fs.nr_open is the real ceiling.
    std::ifstream nr_open("/proc/sys/fs/nr_open");
    rlim_t ceiling = 0;
    if (nr_open >> ceiling && ceiling > before) {
      raised.rlim_cur = ceiling;
      if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) raised.rlim_cur = before;
    } else {
      raised.rlim_cur = before;
    }
  }
  rlimit now{};
  if (::getrlimit(RLIMIT_NOFILE, &now) != 0 || now.rlim_cur == before) {
    core::log_warn("open files: soft limit " + limit_text(before) + " could not be raised to " +
                   limit_text(limit.rlim_max) + ": " + std::strerror(errno) +
                   "; each client takes one");
    return;
  }
  core::log_info("open files: soft limit raised from " + limit_text(before) + " to " +
                 limit_text(now.rlim_cur) + " (the hard limit is " + limit_text(limit.rlim_max) +
                 ")");
}

void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

// --home, else $CRUCIBLE_HOME, else an installed tree's data (<prefix>/share/crucible beside
// <prefix>/bin/crucible, wherever the tree was unpacked), else the source tree it was built
// from.
std::filesystem::path resolve_home(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("CRUCIBLE_HOME"); env != nullptr && *env != '\0') return env;
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto installed = self.parent_path().parent_path() / "share" / "crucible";
    if (std::filesystem::is_directory(installed / "tasks", error)) return installed;
  }
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

// `crucible keys new BASE`: a fresh CurveZMQ key pair from libzmq (libsodium's generator).
int new_key_pair(const std::string& base) {
  char public_key[41] = {};
  char secret_key[41] = {};
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    std::cerr << "crucible keys new: this libzmq cannot make Curve keys ("
              << zmq_strerror(zmq_errno()) << ")\n";
    return kExitUsage;
  }
  if (auto written = core::write_key_files(base, core::CurveKeyPair{public_key, secret_key});
      !written) {
    std::cerr << "crucible keys new: " << written.error().message << "\n";
    return kExitUsage;
  }
  std::cout << "wrote " << base << ".key (secret: keep it on this machine) and " << base
            << ".pub (public: " << public_key << ")\n";
  return 0;
}

// The HTTP front serve's flags ask for (nullopt: no --http). A non-loopback address needs a
// bearer token and TLS, or --insecure (then with a warning for what is missing).
core::Result<std::optional<env::HttpFrontOptions>> http_front_options(const std::string& address,
                                                                      const std::string& token_file,
                                                                      const std::string& cert,
                                                                      const std::string& key,
                                                                      bool insecure) {
  const auto usage = [](const std::string& message) {
    return core::Error{core::ErrorCode::kInvalidArgument, message};
  };
  const bool tls = !cert.empty() || !key.empty();
  if (address.empty()) {
    if (!token_file.empty() || tls) {
      return usage(
          "--http-token-file, --http-cert and --http-key configure the HTTP front; "
          "give --http HOST:PORT too");
    }
    return std::optional<env::HttpFrontOptions>();
  }
  if (cert.empty() != key.empty()) return usage("--http-cert and --http-key go together");
  if (tls && !env::http_front_has_tls()) {
    return usage(
        "--http-cert: this build's HTTP library has no TLS (cpp-httplib without "
        "OpenSSL)");
  }
  env::HttpFrontOptions front;
  if (!token_file.empty()) {
    auto token = core::read_token_file(token_file);
    if (!token) return usage("--http-token-file " + token.error().message);
    front.token = std::move(token).value();
  }
  const bool secured = !front.token.empty() && tls;
  auto parsed = env::parse_http_address(address, insecure || secured);
  if (!parsed) return usage("--http " + parsed.error().message);
  front.address = *parsed;
  front.tls_cert = cert;
  front.tls_key = key;
  if (!secured && !env::is_local_endpoint("tcp://" + address)) {
    core::log_warn("serving HTTP on " + address + " (--insecure) " +
                   (front.token.empty() && !tls ? "without a token or TLS: anyone who reaches "
                                                  "the port can use this server"
                    : front.token.empty()       ? "without a token: anyone who reaches the "
                                                  "port can use this server"
                                                : "without TLS: the token crosses the network "
                                                  "in clear text"));
  }
  return std::optional<env::HttpFrontOptions>(std::move(front));
}

int new_token_file(const std::string& path) {
  auto token = core::new_http_token();
  if (token) {
    if (auto written = core::write_token_file(path, *token); !written) token = written.error();
  }
  if (!token) {
    std::cerr << "crucible keys token: " << token.error().message << "\n";
    return kExitUsage;
  }
  std::cout << "wrote " << path
            << " (secret: give it to the server's --http-token-file and to its HTTP clients)\n";
  return 0;
}

// The GPUs a pipeline on this machine drives: every one the probe finds, or those `--gpus`
// lists (an error names the GPUs that exist).
core::Result<runner::GpuProbe> local_gpus(std::string_view gpu_list) {
  auto probe = runner::probe_gpus();
  if (gpu_list.empty()) return probe;
  return runner::select_gpus(probe, gpu_list);
}

int serve(const std::string& home_flag, env::ServerOptions options,
          env::PipelineOptions pipeline_options, std::optional<env::HttpFrontOptions> http) {
  raise_open_file_limit();
  const auto home = resolve_home(home_flag);
  auto registry = load_registry(home);
  if (!registry) return kExitUsage;
  pipeline_options.home = std::filesystem::absolute(home);
  auto selected = local_gpus(pipeline_options.gpu_list);
  if (!selected) {
    std::cerr << "crucible serve: --gpus " << selected.error().message << "\n";
    return kExitUsage;
  }
  pipeline_options.gpus = std::move(selected).value();
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
    return kExitUsage;
  }
  // Declared after the server, so it is gone before the server (its sockets use the server's).
  std::unique_ptr<env::HttpFront> front;
  if (http) {
    env::HttpFrontOptions& front_options = *http;
    front_options.limits = options.limits;
    front_options.episode_idle_timeout = options.episode_idle_timeout;
    front_options.max_episodes = options.max_episodes;
    auto started = env::HttpFront::start(front_options, **server);
    if (!started) {
      std::cerr << "crucible: " << started.error().message << "\n";
      return kExitUsage;
    }
    front = std::move(started).value();
    core::log_info("HTTP front on " + front->url() +
                   (front_options.token.empty() ? "" : " (bearer token required)"));
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
  if (front) front->stop();
  return 0;
}

// Prints each range the reader skipped, one line each, prefixed with the command and the log.
void print_skipped(const std::string& command, const std::string& log_path,
                   const env::LogReadReport& report) {
  std::istringstream lines(env::describe_skipped(report));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) std::cerr << command << ": " << log_path << ": skipped " << line << "\n";
  }
}

// "; 2 damaged ranges (310 bytes) skipped; torn tail of 40 bytes skipped (short record
// payload)", or "" for an undamaged log.
std::string skipped_summary(const env::LogReadReport& report) {
  std::string text;
  const std::size_t damaged = report.damaged_ranges();
  if (damaged > 0) {
    const std::uint64_t tail_bytes = report.torn_tail ? report.skipped.back().bytes : 0;
    text += "; " + std::to_string(damaged) + " damaged range" + (damaged == 1 ? "" : "s") + " (" +
            std::to_string(report.skipped_bytes() - tail_bytes) + " bytes) skipped";
  }
  if (report.torn_tail) {
    text += "; torn tail of " + std::to_string(report.skipped.back().bytes) + " bytes skipped (" +
            report.tail_reason + ")";
  }
  return text;
}

int export_log(const std::string& log_path, const std::string& out_path) {
  const std::string command = "crucible export";
  if (!require_regular_file(command, log_path)) return kExitUsage;
  std::ofstream file;
  std::ostream* out = &std::cout;
  std::string out_name = "standard output";
  if (!out_path.empty() && out_path != "-") {
    errno = 0;
    file.open(out_path, std::ios::binary | std::ios::trunc);
    if (!file) {
      print_write_error(command, out_path, errno);
      return kExitUsage;
    }
    out = &file;
    out_name = out_path;
  }
  int write_error = 0;
  auto report = env::read_trajectory_log(log_path, [&](core::Value&& record) {
    errno = 0;
    *out << core::to_json_text(record) << "\n";
    if (*out) return true;
    write_error = errno;
    return false;  // a failed write ends the export: the rest would fail too
  });
  if (!report) {
    std::cerr << command << ": " << report.error().message << "\n";
    return kExitUsage;
  }
  if (!flushed(*out, command, out_name, write_error)) return kExitUsage;
  if (file.is_open()) {
    errno = 0;
    file.close();
    if (file.fail()) {
      print_write_error(command, out_path, errno);
      return kExitUsage;
    }
  }
  print_skipped(command, log_path, *report);
  std::cerr << "exported " << report->records << " records (log format " << report->format_version
            << ")" << skipped_summary(*report);
  if (!report->skipped.empty()) {
    std::cerr << ": the records those bytes held are not in the output\n";
    return kExitSkipped;
  }
  std::cerr << "\n";
  return 0;
}

std::atomic<bool> g_stop_eval{false};

void on_eval_signal(int) {
  // A first Ctrl-C lets in-flight samples finish and keeps them; a second one ends at once.
  if (g_stop_eval.exchange(true)) std::_Exit(130);
}

// The pipeline `serve` would build on `gpus` (local_gpus), compile pool started.
env::Pipeline local_pipeline(const std::filesystem::path& home,
                             env::PipelineOptions pipeline_options, runner::GpuProbe gpus) {
  pipeline_options.home = std::filesystem::absolute(home);
  pipeline_options.gpus = std::move(gpus);
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

// `crucible tasks new`: the folder and reference of a new task, copied from another.
int run_tasks_new(const std::string& home_flag, const std::string& id, const std::string& from) {
  const auto home = resolve_home(home_flag);
  auto registry = load_registry(home);
  if (!registry) return kExitUsage;
  auto written = env::create_task(home, *registry, id, from);
  if (!written) {
    std::cerr << "crucible tasks new: " << written.error().message << "\n";
    return kExitUsage;
  }
  std::cout << "created " << id << " as a copy of " << from << ":\n";
  for (const auto& path : *written) std::cout << "  " << path.string() << "\n";
  std::cout << "next: re-run cmake (the oracle and its test are found by glob), follow the "
               "checklist of docs/tasks.md, and run `crucible tasks check "
            << id << "` after each step\n";
  return 0;
}

// Levenshtein distance between two short strings (task ids).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "unknown task 'X'" with the closest ids (or the tasks whose name matches X's last part).
std::string unknown_task_message(const tasks::Registry& registry, const std::string& id) {
  std::vector<std::pair<std::size_t, std::string>> near;
  const std::string name = id.substr(id.rfind('/') == std::string::npos ? 0 : id.rfind('/') + 1);
  for (const auto& task : registry.all()) {
    const std::size_t distance = edit_distance(id, task.id);
    const bool same_name = task.id.size() >= name.size() + 1 &&
                           task.id.compare(task.id.size() - name.size(), name.size(), name) == 0 &&
                           task.id[task.id.size() - name.size() - 1] == '/';
    if (same_name || distance <= std::max<std::size_t>(2, id.size() / 4)) {
      near.emplace_back(same_name ? 0 : distance, task.id);
    }
  }
  std::sort(near.begin(), near.end());
  std::string message = "unknown task '" + core::excerpt(id, 100) + "'";
  if (!near.empty()) {
    message += "; did you mean";
    for (std::size_t i = 0; i < near.size() && i < 3; ++i) {
      message += (i == 0 ? " " : " or ") + near[i].second;
    }
    message += "?";
  }
  return message + " (`crucible tasks list` shows them all)";
}

// `crucible tasks check`: every task named (or all) held to what can be checked here.
int run_tasks_check(const std::string& home_flag, const std::vector<std::string>& ids, bool all,
                    const env::PipelineOptions& pipeline_options) {
  const auto home = resolve_home(home_flag);
  auto registry = load_registry(home);
  if (!registry) return kExitUsage;
  std::vector<const tasks::Task*> selected;
  if (all) {
    for (const auto& task : registry->all()) selected.push_back(&task);
  }
  for (const auto& id : ids) {
    const auto* task = registry->find(id);
    if (task == nullptr) {
      std::cerr << "crucible tasks check: " << unknown_task_message(*registry, id) << "\n";
      return kExitUsage;
    }
    selected.push_back(task);
  }
  if (selected.empty()) {
    std::cerr << "crucible tasks check: name task ids or give --all\n";
    return kExitUsage;
  }
  sandbox::CompilePoolOptions compile_options = pipeline_options.compile_options;
  compile_options.worker_exe = sandbox::default_worker_path();
  if (compile_options.workers == 0) compile_options.workers = 2;
  auto pool = sandbox::CompilePool::start(compile_options);
  env::CheckTools tools;
  tools.home = home;
  if (pool) {
    tools.compile = pool->get();
  } else {
    std::cerr << "crucible tasks check: the compile workers did not start: " << pool.error().message
              << "\n";
    return kExitUsage;
  }
  const auto gpus = runner::probe_gpus();
  std::optional<env::Pipeline> pipeline;
  if (gpus.gpus.empty()) {
    tools.no_gpu_reason = gpus.reason + " (run on a GPU machine to score them)";
  } else {
    pipeline.emplace(local_pipeline(home, pipeline_options, gpus));
    tools.score_on_gpu = [&](const tasks::Task& task, const std::string& source) {
      env::StepJob job{&task, source, nullptr, 1, {}, nullptr, std::nullopt};
      return pipeline->run(job);
    };
  }
  std::size_t failed = 0;
  for (const auto* task : selected) {
    const auto lines = env::check_task(*task, tools);
    std::cout << env::format_check(*task, lines) << std::flush;
    if (!env::check_passed(lines)) ++failed;
  }
  std::cout << selected.size() - failed << " of " << selected.size() << " tasks passed"
            << (gpus.gpus.empty() ? " (the GPU checks were skipped: no GPU here)" : "") << "\n";
  return failed == 0 ? 0 : 1;
}

// A reward spec from a JSON text or from a file holding one; null for "".
core::Result<core::Value> read_reward_json(const std::string& text) {
  if (text.empty()) return core::Value(nullptr);
  std::string json = text;
  std::string source = "'" + text.substr(0, 80) + (text.size() > 80 ? "...'" : "'");
  std::error_code error;
  if (text.front() != '{' && std::filesystem::is_regular_file(text, error)) {
    if (auto contents = core::read_text_file(text)) {
      json = std::move(contents).value();
      source = text;
    }
  }
  auto value = env::parse_json(json);
  if (!value) {
    if (value.error().code == core::ErrorCode::kTooLarge) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "--reward: " + source + ": " + value.error().message};
    }
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
  bool first_block = false;  // a completion's first source block instead of its last
  std::string model;         // --model: NAME or NAME:variable=value,...
};

// `--model llama3_8b` or `--model llama3_8b:num_seqs=8,context=1024` as the score op's `model`
// field (a name, or a map of the name and the variables given).
core::Result<core::Value> model_field(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return core::Value(text);
  core::Value field{{"name", text.substr(0, colon)}};
  std::string rest = text.substr(colon + 1);
  std::size_t start = 0;
  while (start <= rest.size()) {
    const auto comma = rest.find(',', start);
    const std::string item =
        rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto equals = item.find('=');
    long long value = 0;
    std::size_t used = 0;
    try {
      if (equals != std::string::npos) value = std::stoll(item.substr(equals + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (equals == std::string::npos || equals == 0 || used == 0 ||
        used != item.size() - equals - 1 || value <= 0) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "--model: '" + item + "' is not VARIABLE=POSITIVE_INTEGER"};
    }
    field[item.substr(0, equals)] = value;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return field;
}

int run_eval_command(const std::string& home_flag, const EvalArgs& args,
                     const env::PipelineOptions& pipeline_options) {
  if (!args.server.empty()) {
    // ZeroMQ takes some malformed endpoints (a port past 65535) and then only times out.
    if (auto endpoint = env::check_endpoint(args.server); !endpoint) {
      std::cerr << "crucible eval: --server " << endpoint.error().message << "\n";
      return kExitUsage;
    }
  }
  if (!pipeline_options.gpu_list.empty() && !args.server.empty()) {
    std::cerr << "crucible eval: --gpus picks this machine's GPUs; with --server, start the "
                 "server with --gpus\n";
    return kExitUsage;
  }
  // The GPUs a local run drives (what run_info records); a remote server reports its own.
  runner::GpuProbe gpus;
  if (args.server.empty()) {
    auto selected = local_gpus(pipeline_options.gpu_list);
    if (!selected) {
      std::cerr << "crucible eval: --gpus " << selected.error().message << "\n";
      return kExitUsage;
    }
    gpus = std::move(selected).value();
  }
  const auto home = resolve_home(home_flag);
  auto registry = load_registry(home);
  if (!registry) return kExitUsage;
  std::vector<std::string> skipped;
  auto samples =
      env::load_samples(args.input, *registry, &skipped,
                        args.first_block ? env::SourceBlock::kFirst : env::SourceBlock::kLast);
  if (!samples) {
    std::cerr << "crucible eval: " << samples.error().message << "\n";
    return kExitUsage;
  }
  for (const auto& path : skipped) core::log_warn("no task named by " + path + ": skipped");
  if (samples->empty()) {
    std::cerr << "crucible eval: nothing was scored: " << args.input << " holds no sample"
              << (skipped.empty() ? std::string()
                                  : " of a known task (" + std::to_string(skipped.size()) +
                                        " .cu files name no task)")
              << "\n";
    return kExitUsage;
  }
  auto selected = env::select_samples(std::move(samples).value(), args.tasks, *registry);
  if (!selected) {
    std::cerr << "crucible eval: " << selected.error().message << "\n";
    return kExitUsage;
  }
  if (selected->empty()) {
    std::string selection;
    for (const auto& task : args.tasks) selection += (selection.empty() ? "" : ",") + task;
    std::cerr << "crucible eval: nothing was scored: no sample of " << args.input
              << " is of the tasks chosen by --tasks " << selection << "\n";
    return kExitUsage;
  }
  auto reward_json = read_reward_json(args.reward);
  if (!reward_json) {
    std::cerr << "crucible eval: " << reward_json.error().message << "\n";
    return kExitUsage;
  }
  auto spec = rewards::parse_reward_spec(*reward_json);
  if (!spec) {
    std::cerr << "crucible eval: --reward: " << spec.error().message << "\n";
    return kExitUsage;
  }
  env::EvalModel model;
  if (!args.model.empty()) {
    auto field = model_field(args.model);
    if (!field) {
      std::cerr << "crucible eval: " << field.error().message << "\n";
      return kExitUsage;
    }
    model.catalog = std::make_shared<env::ModelCatalog>(*registry);
    model.field = std::move(field).value();
    // Checked once against a task the model calls, so a bad name or variable stops the run.
    std::size_t checked = 0;
    for (const auto& sample : *selected) {
      const tasks::Task* task = registry->find(sample.task);
      if (task == nullptr) continue;
      auto resolved = model.catalog->resolve(model.field, *task);
      if (resolved) {
        ++checked;
        break;
      }
      if (resolved.error().message.find("never calls") == std::string::npos) {
        std::cerr << "crucible eval: --model: " << resolved.error().message << "\n";
        return kExitUsage;
      }
    }
    if (checked == 0) {
      std::cerr << "crucible eval: --model: the model calls none of the samples' tasks\n";
      return kExitUsage;
    }
  }
  std::optional<env::Pipeline> pipeline;
  std::unique_ptr<env::Scorer> scorer;
  if (args.server.empty()) {
    pipeline.emplace(local_pipeline(home, pipeline_options, gpus));
    scorer = env::make_pipeline_scorer(*pipeline, *spec, args.seed, model);
  } else {
    auto remote = env::make_server_scorer(args.server, args.jobs, *reward_json, args.seed,
                                          std::chrono::seconds(args.timeout_s), model);
    if (!remote) {
      std::cerr << "crucible eval: " << remote.error().message << "\n";
      return kExitUsage;
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
  options.reward_spec = *spec;
  options.seed = args.seed;
  options.stop = &g_stop_eval;
  options.progress_terminal = ::isatty(STDERR_FILENO) != 0;
  core::Value run_info{
      {"input", args.input},
      {"tasks", args.tasks.empty() ? std::vector<std::string>{"all"} : args.tasks},
      {"seed", args.seed},
      {"reward_spec", rewards::reward_spec_to_value(*spec)},
      {"arch", pipeline_options.compile_options.default_arch},
      {"completion_block", args.first_block ? "first" : "last"},
      {"gpus", args.server.empty() ? gpus.to_value() : core::Value("see the server")}};
  auto outcome = env::run_eval(*selected, *registry, *scorer, options, run_info);
  if (!outcome) {
    std::cerr << "crucible eval: " << outcome.error().message << "\n";
    return kExitUsage;
  }
  const auto& overall = outcome->summary["overall"];
  std::cerr << "scored " << outcome->scored << " samples"
            << (outcome->already_done > 0
                    ? " (" + std::to_string(outcome->already_done) + " kept from the earlier run)"
                    : std::string())
            << "; correct " << env::format_percent(overall["correct_rate"].get<double>())
            << ", geomean speedup (correct) "
            << (overall["geomean_speedup_correct"].is_number()
                    ? env::format_number(overall["geomean_speedup_correct"])
                    : std::string("none (no correct sample was timed)"))
            << ", infra_error " << overall["infra_errors"] << " (excluded)\n"
            << "report: " << (std::filesystem::path(args.out_dir) / "report.html").string() << "\n";
  if (outcome->interrupted) {
    std::cerr << "interrupted: " << outcome->remaining
              << " samples left; run the same command with --resume to finish\n";
    return 130;
  }
  if (overall.value("scored", 0) == 0) {
    std::cerr << "crucible eval: nothing was measured: "
              << env::nothing_measured_reason(outcome->summary) << "\n";
    return kExitNothingMeasured;
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
  const std::string command = "crucible replay";
  if (!require_regular_file(command, args.log)) return kExitUsage;
  auto loaded = env::load_log(args.log);
  if (!loaded) {
    std::cerr << command << ": " << loaded.error().message << "\n";
    return kExitUsage;
  }
  // Damage is reported before a re-measurement that may take long; every good record is
  // replayed all the same.
  print_skipped(command, args.log, loaded->report);
  core::Value replay;
  if (args.rescore) {
    auto reward_json = read_reward_json(args.reward);
    if (!reward_json) {
      std::cerr << command << ": " << reward_json.error().message << "\n";
      return kExitUsage;
    }
    auto spec = rewards::parse_reward_spec(*reward_json);
    if (!spec) {
      std::cerr << command << ": --reward: " << spec.error().message << "\n";
      return kExitUsage;
    }
    replay = env::rescore_log(loaded->records, *spec);
  } else {
    if (!args.reward.empty()) {
      std::cerr << command
                << ": --reward needs --rescore (a re-measurement uses each "
                   "step's logged spec)\n";
      return kExitUsage;
    }
    const auto home = resolve_home(home_flag);
    auto registry = load_registry(home);
    if (!registry) return kExitUsage;
    auto pipeline = local_pipeline(home, pipeline_options, runner::probe_gpus());
    replay = env::remeasure_log(loaded->records, *registry, pipeline, args.jobs);
  }
  replay["log"] = core::Value{{"path", args.log}, {"read", loaded->read_report}};
  errno = 0;
  std::cout << env::format_replay(replay, args.rows);
  if (!flushed(std::cout, command, "standard output", errno)) return kExitUsage;
  if (!args.output.empty() && args.output != "-") {
    if (!write_output_file(command, args.output, core::to_json_text(replay, 2) + "\n")) {
      return kExitUsage;
    }
    std::cerr << "replay written to " << args.output << "\n";
  }
  std::size_t malformed = 0;
  for (const auto& step : replay["steps"]) {
    if (!step.contains("malformed")) continue;
    ++malformed;
    std::cerr << command << ": " << args.log << ": record " << step["index"].get<std::size_t>()
              << ": " << step["malformed"].get<std::string>() << "\n";
  }
  if (loaded->report.skipped.empty() && malformed == 0) return 0;
  std::cerr << command << ": " << args.log << ": not all of the log was replayed"
            << skipped_summary(loaded->report);
  if (malformed > 0) {
    std::cerr << "; " << malformed << " record" << (malformed == 1 ? "" : "s")
              << " of the wrong shape skipped (numbered from 0, as `index` in the JSON)";
  }
  std::cerr << "\n";
  return kExitSkipped;
}

// How the GPU stage measures: the same flags for serve, eval and replay, so a replay can
// re-measure under the settings the logged run used.
void add_measure_options(CLI::App* command, env::PipelineOptions& pipeline) {
  command
      ->add_option("--kernel-timeout-ms", pipeline.gpu_options.kernel_timeout_ms,
                   "how long one kernel call may run before it counts as a hang (1 to 600000)")
      ->capture_default_str()
      ->check(real_number(1, kMaxKernelTimeoutMs, false, " (milliseconds)"));
  command
      ->add_option("--time-cap-ms", pipeline.gpu_options.timing.time_cap_ms,
                   "timing budget per case (1 to 600000)")
      ->capture_default_str()
      ->check(real_number(1, kMaxTimeCapMs, false, " (milliseconds)"));
  command
      ->add_option("--step-budget-ms", pipeline.gpu_options.timing.step_budget_ms,
                   "timing budget of a step's visible cases together: once a case's share is "
                   "spent it stops at the minimum sample count (1 to 600000)")
      ->capture_default_str()
      ->check(real_number(1, kMaxTimeCapMs, false, " (milliseconds)"));
  command
      ->add_option("--target-ci", pipeline.gpu_options.timing.target_rel_ci,
                   "stop timing a case once the median's 95% confidence interval is within "
                   "this fraction (above 0, at most 1)")
      ->capture_default_str()
      ->check(real_number(0, 1, true, " (a fraction of the median)"));
}

void add_runners_option(CLI::App* command, env::PipelineOptions& pipeline) {
  pipeline.runner_options.runners_per_device = runner::default_runners_per_device();
  command
      ->add_option("--runners-per-gpu", pipeline.runner_options.runners_per_device,
                   "GPU runner processes per GPU: they check correctness side by side and take "
                   "turns to time, each timing window alone on the GPU (1 to 16; default a "
                   "quarter of the cores, 1 to 4)")
      ->capture_default_str()
      ->check(whole_number(1, 16));
}

void add_compile_workers_option(CLI::App* command, env::PipelineOptions& pipeline) {
  command
      ->add_option("--compile-workers", pipeline.compile_options.workers,
                   "compile worker processes (0: one per core; at most 256)")
      ->capture_default_str()
      ->check(whole_number(0, 256));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"crucible: an RL environment server for GPU-kernel-generation agents"};
  app.set_version_flag("--version", std::string("crucible ") + CRUCIBLE_VERSION);
  app.footer(
      "Exit status: 0 done; 2 bad command line, unusable input or output that could not be "
      "written; 3 (export, replay) every good record was handled but part of the log was "
      "skipped (damaged bytes, a torn tail, records of the wrong shape), as listed on stderr; "
      "4 (eval) nothing was measured: no sample was recorded, or every one was an infra_error; "
      "130 (eval) interrupted. Without a command, this help.");
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
  serve_cmd
      ->add_option("--bind", options.bind,
                   "ZeroMQ endpoint: tcp://HOST:PORT, ipc://PATH or inproc://NAME")
      ->capture_default_str();
  std::string server_key_file;
  std::string client_keys_path;
  serve_cmd->add_option("--server-key", server_key_file,
                        "CurveZMQ: this server's .key file (`crucible keys new`); with "
                        "--client-keys, connections are encrypted and only known clients served");
  serve_cmd->add_option("--client-keys", client_keys_path,
                        "CurveZMQ: the clients let in: a file of public keys or a folder of .pub "
                        "files");
  serve_cmd->add_flag("--insecure,--allow-remote", options.allow_remote,
                      "allow a non-loopback bind without keys (anyone who reaches the port is "
                      "served: closed networks only), and a non-loopback --http without a token "
                      "and TLS");
  serve_cmd->add_option("--log", log_path,
                        "trajectory log file (default runs/<utc-time>/trajectories.log)");
  serve_cmd->add_flag("--no-log-sync", no_log_sync,
                      "skip fdatasync per record (a process crash still loses nothing)");
  serve_cmd
      ->add_option("--workers", options.workers, "pipeline threads (0: one per core; at most 1024)")
      ->capture_default_str()
      ->check(whole_number(0, 1024));
  serve_cmd->add_option("--max-steps", options.default_max_steps, "default episode length")
      ->capture_default_str()
      ->check(whole_number(1, 10000));
  serve_cmd
      ->add_option("--idle-timeout", idle_timeout_s,
                   "seconds before an idle episode expires (at most 31536000, one year)")
      ->capture_default_str()
      ->check(whole_number(1, kMaxIdleTimeoutS, " (seconds; at most 1 year)"));
  serve_cmd
      ->add_option("--max-frame-bytes", options.limits.max_frame_bytes,
                   "largest request frame (1 KiB to 1 GiB)")
      ->capture_default_str()
      ->check(whole_number(kMinFrameBytes, kMaxFrameBytes, " (bytes: 1 KiB to 1 GiB)"));
  serve_cmd
      ->add_option("--max-source-bytes", options.limits.max_source_bytes,
                   "largest kernel source; must fit in a frame with 512 bytes to spare")
      ->capture_default_str()
      ->check(whole_number(1, kMaxFrameBytes, " (bytes)"));
  env::PipelineOptions pipeline_options;
  std::string cache_dir;
  bool no_compile = false;
  serve_cmd
      ->add_option("--arch", pipeline_options.compile_options.default_arch,
                   "NVRTC target (default: the GPU's, else sm_90a)")
      ->capture_default_str();
  add_compile_workers_option(serve_cmd, pipeline_options);
  add_runners_option(serve_cmd, pipeline_options);
  serve_cmd->add_option("--compile-cache", cache_dir,
                        "compile cache folder (default ~/.cache/crucible/compile)");
  serve_cmd->add_flag("--no-compile", no_compile, "start no compile workers (steps: infra_error)");
  serve_cmd->add_option("--gpus", pipeline_options.gpu_list,
                        "CUDA ordinals to run on, a comma list such as 0,2 (default: every GPU)");
  add_measure_options(serve_cmd, pipeline_options);
  std::string http_address;
  serve_cmd->add_option("--http", http_address,
                        "also serve HTTP/JSON on HOST:PORT, e.g. 127.0.0.1:8080 (a non-loopback "
                        "host needs --http-token-file and --http-cert/--http-key, or --insecure; "
                        "docs/protocol.md, \"HTTP front\")");
  std::string http_token_file;
  std::string http_cert;
  std::string http_key;
  serve_cmd->add_option("--http-token-file", http_token_file,
                        "HTTP front: every request but /healthz needs `Authorization: Bearer "
                        "<token>`, the token in this file (mode 0600; `crucible keys token`)");
  serve_cmd->add_option("--http-cert", http_cert,
                        "HTTP front: serve HTTPS with this PEM certificate (chain)");
  serve_cmd->add_option("--http-key", http_key, "HTTP front: the PEM private key of --http-cert");

  auto* tasks_cmd = app.add_subcommand("tasks", "list, show, create (new) and check tasks");
  tasks_cmd->require_subcommand(0, 1);
  auto* list_cmd = tasks_cmd->add_subcommand("list", "one line per task");
  bool list_json = false;
  list_cmd->add_flag("--json", list_json,
                     "a JSON array: id, category, title, module, visible and hidden case counts");
  std::string show_id;
  auto* show_cmd = tasks_cmd->add_subcommand("show", "what an agent is shown for a task");
  show_cmd->add_option("id", show_id, "task id, e.g. llm/rms_norm")->required();
  bool show_json = false;
  show_cmd->add_flag("--json", show_json, "print the agent view as JSON");
  bool show_all = false;
  show_cmd->add_flag("--all", show_all, "also list the hidden cases (for maintainers)");
  std::string new_id;
  std::string new_from = "llm/rms_norm";
  auto* new_cmd = tasks_cmd->add_subcommand(
      "new", "create a task folder and its reference kernel as a copy of another task");
  new_cmd->add_option("id", new_id, "the new task's id, <category>/<name>")->required();
  new_cmd->add_option("--from", new_from, "the task to copy")->capture_default_str();
  std::vector<std::string> check_ids;
  bool check_all = false;
  env::PipelineOptions check_pipeline;
  auto* check_cmd = tasks_cmd->add_subcommand(
      "check",
      "hold tasks to every check this machine can run (manifest, plans, NVRTC, oracle, parity "
      "anchors; on a GPU machine the reference and solution scored); exit 1 if any fails");
  check_cmd->add_option("ids", check_ids, "task ids");
  check_cmd->add_flag("--all", check_all, "check every task");

  std::string export_in;
  std::string export_out;
  auto* keys_cmd =
      app.add_subcommand("keys", "CurveZMQ key pairs, and bearer tokens for the HTTP front");
  keys_cmd->require_subcommand(1);
  std::string keys_base;
  auto* keys_new_cmd =
      keys_cmd->add_subcommand("new", "write a key pair: BASE.key (secret, mode 0600), BASE.pub");
  keys_new_cmd->add_option("base", keys_base, "path without extension, e.g. keys/server")
      ->required();
  std::string token_path;
  auto* keys_token_cmd = keys_cmd->add_subcommand(
      "token", "write a new bearer token for serve --http-token-file (mode 0600)");
  keys_token_cmd->add_option("file", token_path, "the token file to create")->required();

  auto* model_cmd = app.add_subcommand(
      "model",
      "model steps made of task calls: their call sites, a candidate's plan at each, "
      "greedy tokens from the step's float64 oracle (docs/models.md)");
  model_cmd->require_subcommand(1);
  std::string model_file;
  std::vector<std::string> model_sets;
  std::string model_candidate;
  std::string model_task;
  int model_tokens = 32;
  std::vector<std::int64_t> model_first{1};
  const auto model_argument = [&](CLI::App* command) {
    command->add_option("model", model_file, "a model description, e.g. models/llama3_8b.toml")
        ->required();
  };
  auto* model_show_cmd = model_cmd->add_subcommand(
      "show", "the step's call sites: task, calls, symbols, roofline share (an estimate)");
  model_argument(model_show_cmd);
  model_show_cmd->add_option("--set", model_sets,
                             "a step variable, NAME=VALUE (e.g. --set num_seqs=64 --set "
                             "context=2048)");
  auto* model_plan_cmd = model_cmd->add_subcommand(
      "plan", "a candidate's launch plan evaluated at every call site of its task");
  model_argument(model_plan_cmd);
  model_plan_cmd->add_option("candidate", model_candidate, "the candidate's .cu file")
      ->required()
      ->check(CLI::ExistingFile);
  model_plan_cmd->add_option("--task", model_task, "the task the candidate is for")->required();
  model_plan_cmd->add_option("--set", model_sets, "a step variable, NAME=VALUE");
  auto* model_generate_cmd = model_cmd->add_subcommand(
      "generate", "greedy tokens through the step's float64 oracle (trained weights only)");
  model_argument(model_generate_cmd);
  model_generate_cmd->add_option("--tokens", model_tokens, "tokens to generate per sequence")
      ->capture_default_str()
      ->check(whole_number(1, 4096));
  model_generate_cmd
      ->add_option("--first", model_first, "the first token of each sequence (one sequence each)")
      ->capture_default_str();

  std::string export_op_task;
  std::string export_op_source;
  std::string export_op_out;
  std::string export_op_name;
  auto* export_op_cmd = app.add_subcommand(
      "export-op",
      "write a kernel for a task as a PyTorch custom op (torch.ops.crucible.NAME, the task's "
      "argument order; NVRTC and the CUDA driver at first call): a winning kernel in place of "
      "the production op");
  export_op_cmd->add_option("task", export_op_task, "the task id")->required();
  export_op_cmd->add_option("source", export_op_source, "the kernel's .cu file")
      ->required()
      ->check(CLI::ExistingFile);
  export_op_cmd->add_option("-o,--output", export_op_out, "the Python file (default NAME.py)");
  export_op_cmd->add_option("--name", export_op_name, "the op's name (default: the task's)");

  auto* export_cmd = app.add_subcommand(
      "export",
      "write a trajectory log as JSON lines; damaged bytes are skipped and listed on stderr, and "
      "then the exit status is 3");
  export_cmd->add_option("log", export_in, "trajectory log")->required()->check(CLI::ExistingFile);
  export_cmd->add_option("-o,--output", export_out, "output file (default stdout)");

  EvalArgs eval_args;
  env::PipelineOptions eval_pipeline;
  std::string eval_cache_dir;
  bool eval_no_compile = false;
  auto* eval_cmd = app.add_subcommand(
      "eval",
      "score a folder or a JSONL file of solutions or LLM completions; a bad input line stops "
      "it before anything is scored (exit status 2); `eval compare A B` sets two runs side by "
      "side");
  eval_cmd
      ->add_option("input", eval_args.input,
                   "folder of <task-id>.cu files, or JSONL of {task, source | completion, ...}")
      ->check(CLI::ExistingPath);
  eval_cmd->add_flag("--first-block", eval_args.first_block,
                     "take a completion's first CUDA/C++ code block instead of its last");
  std::string compare_a, compare_b;
  bool compare_json = false;
  auto* compare_cmd = eval_cmd->add_subcommand(
      "compare",
      "compare two evaluations (output folders or results.jsonl) per task and overall: correct "
      "rates, geometric-mean speedups, their difference and its timing noise");
  compare_cmd->add_option("a", compare_a, "eval output folder or results.jsonl (A)")->required();
  compare_cmd->add_option("b", compare_b, "eval output folder or results.jsonl (B)")->required();
  compare_cmd->add_flag("--json", compare_json, "print the comparison as JSON, not Markdown");
  eval_cmd->add_option("-o,--out", eval_args.out_dir, "output folder")->capture_default_str();
  eval_cmd->add_option("-t,--tasks", eval_args.tasks, "task ids or categories (default: all)")
      ->delimiter(',');
  eval_cmd->add_option("--server", eval_args.server,
                       "score through a running server at this endpoint instead of in-process");
  eval_cmd->add_option("--reward", eval_args.reward, "reward spec: JSON text or a JSON file");
  eval_cmd->add_option("--model", eval_args.model,
                       "the model check for samples whose task the model calls: NAME or "
                       "NAME:variable=value,... (e.g. llama3_8b:num_seqs=64,context=2048)");
  eval_cmd->add_option("--seed", eval_args.seed, "case seed for every sample (0 to 2^64 - 1)")
      ->capture_default_str()
      ->check(whole_number(0, std::numeric_limits<std::uint64_t>::max()));
  eval_cmd->add_option("-j,--jobs", eval_args.jobs, "samples scored at once (1 to 256)")
      ->capture_default_str()
      ->check(whole_number(1, 256));
  eval_cmd->add_flag("--resume", eval_args.resume,
                     "continue an interrupted run: skip samples already in results.jsonl");
  eval_cmd
      ->add_option("--timeout", eval_args.timeout_s,
                   "seconds per sample with --server (1 to 86400)")
      ->capture_default_str()
      ->check(whole_number(1, 86400, " (seconds)"));
  eval_cmd->add_option("--arch", eval_pipeline.compile_options.default_arch, "NVRTC target")
      ->capture_default_str();
  add_compile_workers_option(eval_cmd, eval_pipeline);
  add_runners_option(eval_cmd, eval_pipeline);
  eval_cmd->add_option("--compile-cache", eval_cache_dir, "compile cache folder");
  eval_cmd->add_flag("--no-compile", eval_no_compile,
                     "start no compile workers (every sample: infra_error)");
  eval_cmd->add_option("--gpus", eval_pipeline.gpu_list,
                       "CUDA ordinals to score on, a comma list such as 0,2 (default: every GPU)");
  add_measure_options(eval_cmd, eval_pipeline);

  ReplayArgs replay_args;
  env::PipelineOptions replay_pipeline;
  auto* replay_cmd = app.add_subcommand(
      "replay",
      "re-score a trajectory log (--rescore) or re-measure it and report drift; damaged bytes "
      "and records of the wrong shape are skipped and listed on stderr, and then the exit "
      "status is 3");
  replay_cmd->add_option("log", replay_args.log, "trajectory log")
      ->required()
      ->check(CLI::ExistingFile);
  replay_cmd->add_flag("--rescore", replay_args.rescore,
                       "recompute rewards from the logged measurements (no GPU)");
  replay_cmd->add_option("--reward", replay_args.reward,
                         "reward spec for --rescore: JSON text or a JSON file");
  replay_cmd->add_option("-o,--output", replay_args.output, "JSON output ('-': none)")
      ->capture_default_str();
  replay_cmd->add_option("-j,--jobs", replay_args.jobs, "steps re-measured at once (1 to 64)")
      ->capture_default_str()
      ->check(whole_number(1, 64));
  replay_cmd->add_option("--rows", replay_args.rows, "steps shown in the table (0 to 1000000)")
      ->capture_default_str()
      ->check(whole_number(0, 1000000));
  add_compile_workers_option(replay_cmd, replay_pipeline);
  add_runners_option(replay_cmd, replay_pipeline);
  add_measure_options(replay_cmd, replay_pipeline);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // CLI11's own codes (105 for a failed check, ...) mean nothing to a caller: a bad command
    // line is 2, like every other usage error; --help stays 0.
    const int code = app.exit(error);
    return code == 0 ? 0 : kExitUsage;
  }
  // A command with nothing to do prints its help, as `git` and `cargo` do: the list of what it
  // can do is what someone typing it alone is after.
  if (app.get_subcommands().empty()) {
    std::cout << app.help();
    return 0;
  }
  if (*tasks_cmd && tasks_cmd->get_subcommands().empty()) {
    std::cout << tasks_cmd->help();
    return 0;
  }

  core::LogLevel level;
  if (!core::parse_log_level(log_level, &level)) {
    std::cerr << "crucible: unknown log level '" << log_level << "'\n";
    return kExitUsage;
  }
  core::set_log_level(level);

  if (*serve_cmd) {
    // Checked here, before the GPUs are probed and workers start, so that a typo is told as one.
    if (auto endpoint = env::check_endpoint(options.bind); !endpoint) {
      std::cerr << "crucible serve: --bind " << endpoint.error().message << "\n";
      return kExitUsage;
    }
    if (server_key_file.empty() != client_keys_path.empty()) {
      std::cerr << "crucible serve: --server-key and --client-keys go together\n";
      return kExitUsage;
    }
    if (!server_key_file.empty()) {
      auto keys = core::read_secret_key_file(server_key_file);
      if (!keys) {
        std::cerr << "crucible serve: --server-key " << keys.error().message << "\n";
        return kExitUsage;
      }
      auto allowed = core::read_allowed_keys(client_keys_path);
      if (!allowed) {
        std::cerr << "crucible serve: --client-keys " << allowed.error().message << "\n";
        return kExitUsage;
      }
      options.curve_keys = *keys;
      options.allowed_client_keys = *allowed;
    } else if (options.allow_remote && !env::is_local_endpoint(options.bind)) {
      core::log_warn("serving " + options.bind +
                     " without authentication or encryption (--insecure): anyone who reaches "
                     "the port can use this server");
    }
    auto http = http_front_options(http_address, http_token_file, http_cert, http_key,
                                   options.allow_remote);
    if (!http) {
      std::cerr << "crucible serve: " << http.error().message << "\n";
      return kExitUsage;
    }
    if (options.limits.max_source_bytes + kRequestOverheadBytes > options.limits.max_frame_bytes) {
      std::cerr << "crucible serve: --max-source-bytes " << options.limits.max_source_bytes
                << " does not fit in a frame of --max-frame-bytes "
                << options.limits.max_frame_bytes
                << ": a step request carries the source and up to " << kRequestOverheadBytes
                << " bytes more; raise --max-frame-bytes or lower --max-source-bytes\n";
      return kExitUsage;
    }
    options.log_path = log_path.empty() ? default_log_path() : std::filesystem::path(log_path);
    options.log_sync = !no_log_sync;
    options.episode_idle_timeout = std::chrono::seconds(idle_timeout_s);
    pipeline_options.compile = !no_compile;
    if (!cache_dir.empty()) pipeline_options.compile_options.cache_dir = cache_dir;
    return serve(home_flag, options, pipeline_options, std::move(http).value());
  }
  if (*new_cmd) return run_tasks_new(home_flag, new_id, new_from);
  if (*check_cmd) return run_tasks_check(home_flag, check_ids, check_all, check_pipeline);
  if (*tasks_cmd) {
    auto registry = load_registry(resolve_home(home_flag));
    if (!registry) return kExitUsage;
    if (*list_cmd) {
      if (list_json) {
        core::Value list = core::Value::array();
        for (const auto& task : registry->all()) {
          list.push_back(core::Value{{"id", task.id},
                                     {"category", task.category},
                                     {"title", task.title},
                                     {"module", task.module},
                                     {"visible_cases", task.visible_cases().size()},
                                     {"hidden_cases", task.hidden_cases().size()}});
        }
        std::cout << core::to_json_text(list, 2) << "\n";
        return 0;
      }
      std::cout << tasks::format_task_table(*registry);
      return 0;
    }
    const auto* task = registry->find(show_id);
    if (task == nullptr) {
      std::cerr << "crucible: " << unknown_task_message(*registry, show_id) << "\n";
      return kExitUsage;
    }
    if (show_json) {
      std::cout << core::to_json_text(show_all ? tasks::full_view(*task) : tasks::agent_view(*task),
                                      2)
                << "\n";
    } else {
      std::cout << tasks::format_task_details(*task, show_all);
    }
    return 0;
  }
  if (*keys_new_cmd) return new_key_pair(keys_base);
  if (*export_op_cmd) {
    auto registry = load_registry(resolve_home(home_flag));
    if (!registry) return kExitUsage;
    const tasks::Task* task = registry->find(export_op_task);
    if (task == nullptr) {
      std::cerr << "crucible export-op: no task '" << export_op_task << "'\n";
      return kExitUsage;
    }
    std::ifstream in(export_op_source);
    const std::string source((std::istreambuf_iterator<char>(in)), {});
    const std::string name = export_op_name.empty() ? cli::default_op_name(*task) : export_op_name;
    auto text = cli::export_op_module(*task, source, name,
                                      std::filesystem::path(export_op_source).filename().string());
    if (!text) {
      std::cerr << "crucible export-op: " << text.error().message << "\n";
      return kExitUsage;
    }
    const std::string out = export_op_out.empty() ? name + ".py" : export_op_out;
    std::ofstream file(out);
    file << *text;
    file.close();
    if (!file) {
      std::cerr << "crucible export-op: cannot write " << out << "\n";
      return kExitUsage;
    }
    std::cout << "wrote " << out << ": torch.ops.crucible." << name << " for " << task->id << "\n";
    return 0;
  }
  if (*model_cmd) {
    const auto home = resolve_home(home_flag);
    auto registry = load_registry(home);
    if (!registry) return kExitUsage;
    // A name alone is a model of the home's models/ folder.
    std::filesystem::path file = model_file;
    if (!std::filesystem::exists(file) &&
        std::filesystem::exists(home / "models" / (model_file + ".toml"))) {
      file = home / "models" / (model_file + ".toml");
    }
    auto sets = cli::parse_settings(model_sets);
    if (!sets) {
      std::cerr << "crucible model: " << sets.error().message << "\n";
      return kExitUsage;
    }
    if (*model_show_cmd) return cli::model_show(file, *registry, *sets, std::cout, std::cerr);
    if (*model_plan_cmd) {
      std::ifstream in(model_candidate);
      const std::string source((std::istreambuf_iterator<char>(in)), {});
      return cli::model_plan(file, *registry, model_task, source, *sets, std::cout, std::cerr);
    }
    return cli::model_generate(home, file, *registry, model_first, model_tokens, std::cout,
                               std::cerr);
  }
  if (*keys_token_cmd) return new_token_file(token_path);
  if (*export_cmd) return export_log(export_in, export_out);
  if (*compare_cmd) {
    std::string notes;
    auto text = env::compare_eval_outputs(compare_a, compare_b, compare_json, &notes);
    std::cerr << notes;
    if (!text) {
      std::cerr << "crucible eval compare: " << text.error().message << "\n";
      return kExitUsage;
    }
    errno = 0;
    std::cout << *text;
    return flushed(std::cout, "crucible eval compare", "standard output", errno) ? 0 : kExitUsage;
  }
  if (*eval_cmd) {
    if (eval_args.input.empty()) {
      std::cerr << "crucible eval: give INPUT (a folder of .cu files or a JSONL file), or "
                   "`crucible eval compare A B`; `crucible eval --help` says more\n";
      return kExitUsage;
    }
    eval_pipeline.compile = !eval_no_compile;
    if (!eval_cache_dir.empty()) eval_pipeline.compile_options.cache_dir = eval_cache_dir;
    return run_eval_command(home_flag, eval_args, eval_pipeline);
  }
  if (*replay_cmd) return run_replay_command(home_flag, replay_args, replay_pipeline);
  return 0;
}
