// crucible-compile-worker: a long-lived NVRTC child. Loads NVRTC, enters its jail, builds a
// precompiled header of the prelude, then answers compile jobs framed on stdin/stdout.
// Links NVRTC only, never the CUDA driver, so it runs on machines without a GPU.
#include <nvrtc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "sandbox/compile_job.hpp"
#include "sandbox/compile_log.hpp"
#include "sandbox/frame_pipe.hpp"
#include "sandbox/isolation.hpp"

namespace crucible::sandbox {
namespace {

using core::StepStatus;
using core::Value;

constexpr const char* kSourceName = "kernel.cu";
constexpr const char* kPreludeName = "crucible_prelude.cuh";

struct WorkerConfig {
  std::string default_arch = "sm_90a";
  std::vector<std::string> include_dirs;
  bool isolate = true;
  bool use_pch = true;
  bool test_faults = false;
  std::size_t max_log_bytes = kDefaultMaxLogBytes;
  long job_cpu_seconds = 60;
};

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

std::string program_log(nvrtcProgram program) {
  std::size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return {};
  // NVRTC's log is NUL-terminated, and an empty log can be a lone NUL: no NUL reaches agents.
  log.erase(std::remove(log.begin(), log.end(), '\0'), log.end());
  return log;
}

class ProgramHandle {
 public:
  ProgramHandle() = default;
  ~ProgramHandle() {
    if (program_ != nullptr) nvrtcDestroyProgram(&program_);
  }
  ProgramHandle(const ProgramHandle&) = delete;
  ProgramHandle& operator=(const ProgramHandle&) = delete;
  nvrtcProgram* out() { return &program_; }
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

class CompileWorker {
 public:
  explicit CompileWorker(WorkerConfig config) : config_(std::move(config)) {
    for (const auto& dir : config_.include_dirs) {
      std::error_code error;
      auto canonical = std::filesystem::canonical(dir, error);
      const std::string path = error ? dir : canonical.string();
      includes_.push_back(path);
      const auto name = std::filesystem::path(path).filename();
      const std::string shown = name == "cccl" ? "<cccl>" : name == "crt" ? "<cuda>/crt" : "<cuda>";
      replacements_.emplace_back(path + "/", shown + "/");
      if (dir != path) replacements_.emplace_back(dir + "/", shown + "/");
    }
    // Inside the jail /tmp is private to this worker; outside it, give each worker its own.
    pch_dir_ =
        config_.isolate ? "/tmp/crucible-pch" : "/tmp/crucible-pch-" + std::to_string(::getpid());
    replacements_.emplace_back(pch_dir_ + "/", "");
  }

  const std::vector<std::string>& includes() const { return includes_; }

  // Compiles a trivial kernel without the prelude: makes NVRTC load libnvrtc-builtins and
  // anything else it opens lazily, while the host file system is still visible.
  core::Status warm_up() {
    ProgramHandle program;
    const char* source = "extern \"C\" __global__ void crucible_warm_up() {}\n";
    if (nvrtcCreateProgram(program.out(), source, kSourceName, 0, nullptr, nullptr) !=
        NVRTC_SUCCESS) {
      return core::Status(core::ErrorCode::kInternal, "nvrtcCreateProgram failed");
    }
    const std::string arch = "-arch=" + config_.default_arch;
    const char* options[] = {arch.c_str()};
    nvrtcResult result = nvrtcCompileProgram(program.get(), 1, options);
    if (result != NVRTC_SUCCESS) {
      return core::Status(core::ErrorCode::kInternal, std::string("warm-up compile failed: ") +
                                                          nvrtcGetErrorString(result) + "\n" +
                                                          program_log(program.get()));
    }
    return {};
  }

  // Builds the prelude's precompiled header for `arch` (once); false if NVRTC refused.
  bool prepare_pch(const std::string& arch) {
    if (!config_.use_pch) return false;
    auto known = pch_ready_.find(arch);
    if (known != pch_ready_.end()) return known->second;
    bool ready = false;
    std::error_code error;
    std::filesystem::create_directories(pch_dir_, error);
    for (int attempt = 0; attempt < 2 && !ready && !error; ++attempt) {
      ProgramHandle program;
      const char* source = "\n";
      const char* header_sources[] = {compile_prelude().c_str()};
      const char* header_names[] = {kPreludeName};
      if (nvrtcCreateProgram(program.out(), source, kSourceName, 1, header_sources, header_names) !=
          NVRTC_SUCCESS) {
        break;
      }
      auto options = base_options(arch);
      options.push_back("--create-pch=" + pch_path(arch));
      auto pointers = pointers_of(options);
      nvrtcResult result =
          nvrtcCompileProgram(program.get(), static_cast<int>(pointers.size()), pointers.data());
      nvrtcResult created = nvrtcGetPCHCreateStatus(program.get());
      if (result == NVRTC_SUCCESS && created == NVRTC_SUCCESS) {
        ready = true;
      } else if (created == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED) {
        std::size_t required = 0;
        if (nvrtcGetPCHHeapSizeRequired(program.get(), &required) != NVRTC_SUCCESS ||
            nvrtcSetPCHHeapSize(required) != NVRTC_SUCCESS) {
          break;
        }
      } else {
        break;
      }
    }
    pch_ready_[arch] = ready;
    return ready;
  }

  CompileOutput compile(const CompileJob& job) {
    CompileOutput out;
    if (config_.test_faults && job.test_fault == "abort") std::abort();
    if (config_.test_faults && job.test_fault == "hang") {
      volatile unsigned long spin = 0;
      while (true) spin = spin + 1;
    }
    const std::string arch = job.arch.empty() ? config_.default_arch : job.arch;
    static const std::regex kArchPattern("(sm|compute)_[0-9]{2,3}[af]?");
    if (!std::regex_match(arch, kArchPattern)) {
      out.status = StepStatus::kInvalidAction;
      out.log = "unknown GPU architecture '" + arch + "'";
      return out;
    }
    if (auto offender = disallowed_extra_option(job.extra_options)) {
      out.status = StepStatus::kInfraError;
      out.log = "compile option not allowed: " + *offender;
      return out;
    }
    const bool pch = job.extra_options.empty() && prepare_pch(arch);
    out = run_nvrtc(job, arch, pch);
    if (pch && out.status == StepStatus::kInfraError) {
      // A PCH NVRTC will not take must not cost the agent anything: drop it and retry.
      pch_ready_[arch] = false;
      out = run_nvrtc(job, arch, false);
    }
    return out;
  }

 private:
  std::string pch_path(const std::string& arch) const {
    return pch_dir_ + "/prelude-" + compile_prelude_version() + "-" + arch + ".pch";
  }

  std::vector<std::string> base_options(const std::string& arch) const {
    std::vector<std::string> options = {
        "-arch=" + arch,       "-std=c++17",         std::string("--pre-include=") + kPreludeName,
        "--no-source-include", "--ptxas-options=-v", "--pch-messages=false"};
    for (const auto& dir : includes_) options.push_back("-I" + dir);
    return options;
  }

  static std::vector<const char*> pointers_of(const std::vector<std::string>& options) {
    std::vector<const char*> pointers;
    for (const auto& option : options) pointers.push_back(option.c_str());
    return pointers;
  }

  CompileOutput run_nvrtc(const CompileJob& job, const std::string& arch, bool pch) {
    CompileOutput out;
    out.status = StepStatus::kInfraError;
    const auto started = std::chrono::steady_clock::now();
    ProgramHandle program;
    const char* header_sources[] = {compile_prelude().c_str()};
    const char* header_names[] = {kPreludeName};
    nvrtcResult result = nvrtcCreateProgram(program.out(), job.source.c_str(), kSourceName, 1,
                                            header_sources, header_names);
    if (result != NVRTC_SUCCESS) {
      out.log = std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(result);
      return out;
    }
    for (const auto& expression : job.name_expressions) {
      result = nvrtcAddNameExpression(program.get(), expression.c_str());
      if (result != NVRTC_SUCCESS) {
        out.status = StepStatus::kCompileError;
        out.log = "invalid name expression '" + expression + "'";
        return out;
      }
    }
    auto options = base_options(arch);
    if (pch) options.push_back("--use-pch=" + pch_path(arch));
    for (const auto& option : job.extra_options) options.push_back(option);
    auto pointers = pointers_of(options);
    result = nvrtcCompileProgram(program.get(), static_cast<int>(pointers.size()), pointers.data());
    out.compile_ms = elapsed_ms(started);
    const std::string raw_log = program_log(program.get());
    out.log = sanitize_compile_log(raw_log, replacements_, config_.max_log_bytes);
    if (result == NVRTC_ERROR_COMPILATION) {
      out.status = StepStatus::kCompileError;
      if (out.log.empty()) out.log = "compilation failed without a diagnostic";
      return out;
    }
    if (result == NVRTC_ERROR_OUT_OF_MEMORY) {
      out.status = StepStatus::kCompileError;
      out.log += kCompileOutOfMemory;
      return out;
    }
    if (result != NVRTC_SUCCESS) {
      out.log += std::string("nvrtcCompileProgram: ") + nvrtcGetErrorString(result) + "\n";
      return out;  // kInfraError: an option or NVRTC itself failed, not the source
    }
    std::size_t cubin_size = 0;
    if (nvrtcGetCUBINSize(program.get(), &cubin_size) != NVRTC_SUCCESS || cubin_size == 0) {
      out.log += "NVRTC produced no cubin\n";
      return out;
    }
    out.cubin.assign(cubin_size, '\0');
    if (nvrtcGetCUBIN(program.get(), out.cubin.data()) != NVRTC_SUCCESS) {
      out.cubin.clear();
      out.log += "nvrtcGetCUBIN failed\n";
      return out;
    }
    for (const auto& expression : job.name_expressions) {
      const char* lowered = nullptr;
      if (nvrtcGetLoweredName(program.get(), expression.c_str(), &lowered) != NVRTC_SUCCESS ||
          lowered == nullptr) {
        out.status = StepStatus::kCompileError;
        out.cubin.clear();
        out.log += "name expression '" + expression + "' does not name a __global__ function\n";
        return out;
      }
      out.lowered_names[expression] = lowered;
    }
    out.kernels = parse_ptxas_info(raw_log);
    apply_cubin_attributes(out.cubin, &out.kernels);
    out.status = StepStatus::kOk;
    return out;
  }

  WorkerConfig config_;
  std::vector<std::string> includes_;
  std::vector<std::pair<std::string, std::string>> replacements_;
  std::map<std::string, bool> pch_ready_;
  std::string pch_dir_;
};

// Lets the kernel stop a job that burns CPU even if the parent's deadline failed: the soft
// RLIMIT_CPU is moved to "used so far + budget" before every job (SIGXCPU past it).
void set_job_cpu_budget(long seconds) {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return;
  struct rlimit limit {};
  if (getrlimit(RLIMIT_CPU, &limit) != 0) return;
  const long used = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1;
  rlim_t wanted = static_cast<rlim_t>(used + seconds);
  if (limit.rlim_max != RLIM_INFINITY && wanted > limit.rlim_max) wanted = limit.rlim_max;
  limit.rlim_cur = wanted;
  setrlimit(RLIMIT_CPU, &limit);
}

[[noreturn]] void fatal(const std::string& message) {
  std::fprintf(stderr, "crucible-compile-worker: %s\n", message.c_str());
  (void)write_frame(STDOUT_FILENO, Value{{"op", "fatal"}, {"message", message}});
  std::_Exit(3);
}

int run(int argc, char** argv) {
  WorkerConfig config;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fatal("missing value after " + flag);
      return argv[++i];
    };
    if (flag == "--arch") {
      config.default_arch = next();
    } else if (flag == "--include") {
      config.include_dirs.push_back(next());
    } else if (flag == "--no-isolate") {
      config.isolate = false;
    } else if (flag == "--no-pch") {
      config.use_pch = false;
    } else if (flag == "--allow-test-faults") {
      config.test_faults = true;
    } else if (flag == "--max-log-bytes") {
      config.max_log_bytes = std::strtoull(next().c_str(), nullptr, 10);
    } else if (flag == "--job-cpu-seconds") {
      config.job_cpu_seconds = std::strtol(next().c_str(), nullptr, 10);
    } else {
      fatal("unknown flag " + flag);
    }
  }
  const pid_t parent = getppid();
  const auto started = std::chrono::steady_clock::now();
  CompileWorker worker(config);
  JailOptions jail;
  for (const auto& dir : worker.includes()) jail.readonly_dirs.emplace_back(dir);
  Value isolation = Value::object();
  isolation["enabled"] = config.isolate;
  JailReport report;
  if (config.isolate) {
    // Namespaces first: the kernel refuses a new user namespace to a multi-threaded process,
    // and the warm-up below may leave NVRTC (or a library it loads) with threads.
    auto entered = enter_namespaces(jail);
    if (!entered) fatal("cannot enter the namespaces: " + entered.error().message);
    report = *entered;
  }
  if (auto warmed = worker.warm_up(); !warmed) fatal(warmed.error().message);
  const double warm_up_ms = elapsed_ms(started);
  if (config.isolate) {
    if (auto rooted = enter_jail_root(jail, &report); !rooted) {
      fatal("cannot enter the jail: " + rooted.error().message);
    }
    // Changing credentials cleared the parent-death signal; set it again.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) std::_Exit(3);
    if (auto filtered = install_syscall_filter(); !filtered) {
      fatal("cannot install the seccomp filter: " + filtered.error().message);
    }
    isolation["outside_uid"] = report.outside_uid;
    isolation["mounts"] = report.mounts;
    isolation["namespaces"] = Value::array({"user", "mount", "net", "ipc", "uts"});
    isolation["seccomp"] = true;
  }
  const auto pch_started = std::chrono::steady_clock::now();
  const bool pch = worker.prepare_pch(config.default_arch);
  const double pch_ms = elapsed_ms(pch_started);

  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  Value ready{{"op", "ready"},
              {"pid", static_cast<int>(getpid())},
              {"toolchain", "nvrtc-" + std::to_string(major) + "." + std::to_string(minor)},
              {"isolation", isolation},
              {"pch", pch},
              {"warm_up_ms", warm_up_ms},
              {"pch_ms", pch_ms}};
  if (!write_frame(STDOUT_FILENO, ready)) return 3;

  core::DecodeLimits limits;
  limits.max_bytes = 64u << 20;
  limits.max_str_bytes = 64u << 20;
  while (true) {
    auto frame = read_frame(STDIN_FILENO, limits);
    if (!frame) {
      if (frame.error().code == core::ErrorCode::kIo) return 0;  // the pool closed the pipe
      fatal("bad frame: " + frame.error().message);
    }
    auto job = job_from_wire(*frame);
    CompileOutput out;
    if (!job) {
      out.status = StepStatus::kInfraError;
      out.log = job.error().message;
    } else {
      set_job_cpu_budget(config.job_cpu_seconds);
      out = worker.compile(*job);
    }
    if (!write_frame(STDOUT_FILENO, output_to_wire(out))) return 3;
  }
}

}  // namespace
}  // namespace crucible::sandbox

int main(int argc, char** argv) { return crucible::sandbox::run(argc, argv); }
