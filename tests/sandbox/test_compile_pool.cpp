// Compile pool and worker: real NVRTC compiles in jailed workers, hostile sources from
// tests/corpus/, deadlines, crashes, caching and de-duplication.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/compile_pool.hpp"

namespace {

using crucible::core::StepStatus;
using crucible::sandbox::CompileJob;
using crucible::sandbox::CompileOutput;
using crucible::sandbox::CompilePool;
using crucible::sandbox::CompilePoolOptions;

std::string corpus(const std::string& name) {
  std::ifstream file(std::string(CRUCIBLE_SOURCE_DIR) + "/tests/corpus/" + name);
  REQUIRE_MESSAGE(file.good(), "missing corpus file " << name);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

CompilePoolOptions test_options() {
  CompilePoolOptions options;
  options.worker_exe = CRUCIBLE_COMPILE_WORKER;
  options.workers = 2;
  options.allow_test_faults = true;
  return options;
}

// One pool for the well-behaved tests (generous deadline: CI machines are slow and shared).
CompilePool& main_pool() {
  static std::unique_ptr<CompilePool> pool = [] {
    auto options = test_options();
    options.deadline = std::chrono::milliseconds(30000);
    auto started = CompilePool::start(options);
    REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
    return std::move(started).value();
  }();
  return *pool;
}

// A pool with a 3 s deadline and a 2 GiB memory cap for the bombs.
CompilePool& strict_pool() {
  static std::unique_ptr<CompilePool> pool = [] {
    auto options = test_options();
    options.deadline = std::chrono::milliseconds(3000);
    options.memory_limit_bytes = 2ull << 30;
    auto started = CompilePool::start(options);
    REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
    return std::move(started).value();
  }();
  return *pool;
}

CompileOutput compile(CompilePool& pool, CompileJob job) {
  return pool.submit(std::move(job)).get();
}

CompileJob job_of(std::string source, std::vector<std::string> names = {}) {
  CompileJob job;
  job.source = std::move(source);
  job.name_expressions = std::move(names);
  return job;
}

std::int64_t stat(CompilePool& pool, const char* name) {
  return pool.stats()[name].get<std::int64_t>();
}

// A valid source NVRTC takes a while over: `steps` __noinline__ instantiations, compile time
// about quadratic in them (30: ~0.6 s, 60: ~2 s on the 2-core dev box). `tag` keeps sources of
// different tests apart in the cache.
std::string slow_source(int steps, int tag) {
  return "// slow source " + std::to_string(tag) +
         "\n"
         "template <int N>\n"
         "__device__ __noinline__ float step(float x) {\n"
         "  return sinf(x) * N + cosf(x * N) + step<N - 1>(x * 1.5f);\n"
         "}\n"
         "template <>\n"
         "__device__ float step<0>(float x) { return x; }\n"
         "__global__ void slow_kernel(float* out) {\n"
         "  out[threadIdx.x] = step<" +
         std::to_string(steps) + ">(out[threadIdx.x]);\n}\n";
}

// Waits until a worker other than `other_than` holds a job; its pid, or 0 after 60 s.
int busy_worker(CompilePool& pool, int other_than = 0) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    for (int pid : pool.busy_worker_pids()) {
      if (pid != other_than) return pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

// Waits until `pid` no longer holds a job (the pool gave up on it); false after 60 s.
bool no_longer_busy(CompilePool& pool, int pid) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    const auto pids = pool.busy_worker_pids();
    if (std::find(pids.begin(), pids.end(), pid) == pids.end()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// One worker and a 4 s deadline, for workers stopped from outside past their deadline.
CompilePool& stop_pool() {
  static std::unique_ptr<CompilePool> pool = [] {
    auto options = test_options();
    options.workers = 1;
    options.deadline = std::chrono::milliseconds(4000);
    auto started = CompilePool::start(options);
    REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
    return std::move(started).value();
  }();
  return *pool;
}

std::string unique_kernel(int tag) {
  return "__global__ void k" + std::to_string(tag) +
         "(float* out, const __nv_bfloat16* in) {\n"
         "  out[threadIdx.x] = __bfloat162float(in[threadIdx.x]) * " +
         std::to_string(tag) + ".0f;\n}\n";
}

}  // namespace

TEST_CASE("compile pool: a bf16 rms_norm kernel compiles with its resources and lowered name") {
  auto out = compile(main_pool(), job_of(corpus("ok_rms_norm_bf16.cu"), {"rms_norm_kernel<256>"}));
  INFO(out.log);
  REQUIRE(out.status == StepStatus::kOk);
  CHECK(out.cubin.substr(0, 4) ==
        "\x7f"
        "ELF");
  REQUIRE(out.lowered_names.count("rms_norm_kernel<256>") == 1);
  const std::string mangled = out.lowered_names.at("rms_norm_kernel<256>");
  CHECK(mangled.rfind("_Z", 0) == 0);
  REQUIRE(out.kernels.count(mangled) == 1);
  const auto& resources = out.kernels.at(mangled);
  CHECK(resources.registers > 0);
  CHECK(resources.registers <= 255);
  CHECK(resources.static_smem_bytes >= 8 * 4 + 4);  // partial[8] and scale
  CHECK(resources.spill_store_bytes == 0);
  CHECK(resources.max_threads == 1024);
  CHECK(resources.barriers >= 1);
  CHECK(out.compile_ms > 0);
  CHECK_FALSE(out.cache_hit);
  // The observation view drops the cubin but reports its size.
  auto value = out.to_value();
  CHECK(value["status"] == "ok");
  CHECK(value["cubin_bytes"].get<std::size_t>() == out.cubin.size());
  CHECK_FALSE(value.contains("cubin"));
}

TEST_CASE("compile pool: <mma.h> compiles (its crt/mma.hpp is found without source includes)") {
  auto out =
      compile(main_pool(), job_of("#include <mma.h>\n"
                                  "__global__ void k(float* out, const __half* a) {\n"
                                  "  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16,"
                                  " __half, nvcuda::wmma::row_major> f;\n"
                                  "  nvcuda::wmma::load_matrix_sync(f, a, 16);\n"
                                  "  out[threadIdx.x] = __half2float(f.x[0]);\n}\n"));
  INFO(out.log);
  CHECK(out.status == StepStatus::kOk);
  CHECK(out.log.find("/usr/") == std::string::npos);
}

TEST_CASE("compile pool: __launch_bounds__ and register pressure bound max_threads") {
  auto out = compile(main_pool(), job_of("extern \"C\" __global__ void __launch_bounds__(128)\n"
                                         "bounded(float* out) { out[threadIdx.x] = 1.f; }\n"));
  INFO(out.log);
  REQUIRE(out.status == StepStatus::kOk);
  REQUIRE(out.kernels.count("bounded") == 1);
  CHECK(out.kernels.at("bounded").max_threads == 128);
}

TEST_CASE("compile pool: a syntax error is reported at the agent's own line number") {
  const std::string source =
      "// line 1\n"
      "// line 2\n"
      "__global__ void k(float* out) {\n"
      "  out[0] = 1.0f\n"  // line 4: missing semicolon, reported on line 5
      "  out[1] = 2.0f;\n"
      "}\n";
  auto out = compile(main_pool(), job_of(source));
  INFO(out.log);
  REQUIRE(out.status == StepStatus::kCompileError);
  CHECK(out.log.find("kernel.cu(5): error") != std::string::npos);
  CHECK(out.log.find("/usr/") == std::string::npos);  // no host paths
  CHECK(out.log.find("precompiled header") == std::string::npos);
  CHECK(out.cubin.empty());
}

TEST_CASE("compile pool: an error inside a CUDA header shows no host path") {
  auto out = compile(main_pool(), job_of("__global__ void k() { __nv_bfloat16 x = nullptr; }\n"));
  INFO(out.log);
  REQUIRE(out.status == StepStatus::kCompileError);
  CHECK(out.log.find("kernel.cu(1)") != std::string::npos);
  CHECK(out.log.find("/usr/local") == std::string::npos);
}

TEST_CASE("compile pool: including host files fails without leaking a byte of them") {
  // Known lines of the host's files, read by the test (outside any jail).
  std::string passwd_line = "root:x:0:0";
  {
    std::ifstream passwd("/etc/passwd");
    std::string first;
    if (std::getline(passwd, first) && !first.empty()) passwd_line = first.substr(0, 10);
  }
  for (const char* name :
       {"include_etc_passwd.cu", "include_proc_environ.cu", "include_relative_escape.cu"}) {
    CAPTURE(name);
    auto out = compile(main_pool(), job_of(corpus(name)));
    INFO(out.log);
    CHECK(out.status == StepStatus::kCompileError);
    CHECK(out.log.find("cannot open source file") != std::string::npos);
    CHECK(out.log.find(passwd_line) == std::string::npos);
    CHECK(out.log.find("root:x:0:0") == std::string::npos);
    CHECK(out.log.find("PATH=") == std::string::npos);
    CHECK(out.log.find("LD_LIBRARY_PATH") == std::string::npos);
  }
  auto stats = main_pool().stats();
  CHECK(stats["isolation"]["enabled"] == true);
  CHECK(stats["isolation"]["seccomp"] == true);
}

TEST_CASE("compile pool: a macro bomb hits the deadline or memory cap and the worker is replaced") {
  CompilePool& pool = strict_pool();
  const auto restarts = stat(pool, "worker_restarts");
  const auto started = std::chrono::steady_clock::now();
  auto out = compile(pool, job_of(corpus("macro_bomb.cu")));
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(out.log);
  CHECK(out.status == StepStatus::kCompileError);
  CHECK(seconds < 15.0);  // deadline 3 s (twice on a crash retry), plus a respawn
  auto next = compile(pool, job_of(unique_kernel(1)));
  INFO(next.log);
  CHECK(next.status == StepStatus::kOk);
  // Killed at the deadline, or died at the memory cap: either way a fresh worker took over.
  const bool memory_error = out.log.find("memory") != std::string::npos;
  CHECK((memory_error || stat(pool, "worker_restarts") > restarts));
}

TEST_CASE("compile pool: a template bomb is stopped at the deadline, and the next job succeeds") {
  CompilePool& pool = strict_pool();
  const auto timeouts = stat(pool, "timeouts");
  const auto restarts = stat(pool, "worker_restarts");
  auto out = compile(pool, job_of(corpus("template_bomb.cu")));
  INFO(out.log);
  CHECK(out.status == StepStatus::kCompileError);
  CHECK((stat(pool, "timeouts") > timeouts || out.log.find("memory") != std::string::npos));
  CHECK(stat(pool, "worker_restarts") > restarts);
  // A deadline miss is not cached: it depends on load; nor is running out of the memory cap,
  // which of the two comes first depends on the machine.
  auto again = compile(pool, job_of(corpus("template_bomb.cu")));
  CHECK_FALSE(again.cache_hit);
  auto next = compile(pool, job_of(unique_kernel(2)));
  INFO(next.log);
  CHECK(next.status == StepStatus::kOk);
}

TEST_CASE("compile pool: a non-terminating constant expression is a compile error") {
  auto out = compile(strict_pool(), job_of(corpus("constexpr_infinite_loop.cu")));
  INFO(out.log);
  CHECK(out.status == StepStatus::kCompileError);
  const bool step_limit = out.log.find("kernel.cu(9)") != std::string::npos &&
                          out.log.find("constant value") != std::string::npos;
  const bool deadline = out.log.find("deadline") != std::string::npos;
  CHECK((step_limit || deadline));
}

TEST_CASE("compile pool: a source over the size cap is an invalid action, never compiled") {
  std::string huge = "// huge source\n";
  while (huge.size() < (1u << 20) + 1024)
    huge += "__device__ int filler_" + std::to_string(huge.size()) + " = 1;\n";
  const auto compiled = stat(main_pool(), "compiled");
  auto out = compile(main_pool(), job_of(huge));
  CHECK(out.status == StepStatus::kInvalidAction);
  CHECK(out.log.find("limit") != std::string::npos);
  CHECK(stat(main_pool(), "compiled") == compiled);
}

TEST_CASE(
    "compile pool: a worker that crashes is replaced; a source that crashes it twice is a compile "
    "error") {
  CompilePool& pool = main_pool();
  const auto crashes = stat(pool, "crashes");
  CompileJob job = job_of(unique_kernel(3));
  job.test_fault = "abort";
  auto out = compile(pool, job);
  INFO(out.log);
  CHECK(out.status == StepStatus::kCompileError);
  CHECK(out.log.find("crashed") != std::string::npos);
  CHECK(stat(pool, "crashes") == crashes + 2);  // first try and its retry
  auto next = compile(pool, job_of(unique_kernel(3)));
  INFO(next.log);
  CHECK(next.status == StepStatus::kOk);
}

TEST_CASE(
    "compile pool: a worker killed from outside costs the job nothing (retried on a fresh "
    "worker)") {
  CompilePool& pool = main_pool();
  // Workers lost by earlier tests are replaced in the background: wait for both.
  auto pids = pool.stats()["worker_pids"];
  for (int i = 0; i < 600 && pids.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pids = pool.stats()["worker_pids"];
  }
  REQUIRE(pids.size() == 2);
  const auto host_faults = stat(pool, "host_faults");
  for (const auto& pid : pids) ::kill(pid.get<int>(), SIGKILL);
  auto out = compile(pool, job_of(unique_kernel(4)));
  INFO(out.log);
  CHECK(out.status == StepStatus::kOk);
  // Found dead before the job, or lost with the job and the job retried: the host's doing.
  CHECK(stat(pool, "host_faults") >= host_faults + 1);
  // The slot that ran the job has a new worker (the other one is replaced when it next works).
  bool replaced = false;
  const auto after = pool.stats();
  for (const auto& pid : after["worker_pids"]) {
    bool seen = false;
    for (const auto& old : pids) seen = seen || pid == old;
    replaced = replaced || !seen;
  }
  CHECK(replaced);
}

TEST_CASE(
    "compile pool: a worker killed from outside mid-compile is retried and the job gets its real "
    "result") {
  CompilePool& pool = main_pool();
  const auto retries = stat(pool, "retries");
  const auto host_faults = stat(pool, "host_faults");
  auto future = pool.submit(job_of(slow_source(60, 1)));
  const int pid = busy_worker(pool);
  REQUIRE(pid > 0);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  auto out = future.get();
  INFO(out.log);
  CHECK(out.status == StepStatus::kOk);
  CHECK(out.kernels.size() == 1);  // the entry; ptxas reports no resources for device functions
  // At least the kill; a worker an earlier test killed while idle may be found dead too.
  CHECK(stat(pool, "host_faults") >= host_faults + 1);
  CHECK(stat(pool, "retries") == retries + 1);
}

TEST_CASE(
    "compile pool: a worker killed from outside mid-compile twice is an infra error, not the "
    "agent's compile error") {
  CompilePool& pool = main_pool();
  const auto retries = stat(pool, "retries");
  auto future = pool.submit(job_of(slow_source(60, 2)));
  const int first = busy_worker(pool);
  REQUIRE(first > 0);
  REQUIRE(::kill(first, SIGKILL) == 0);
  const int second = busy_worker(pool, first);  // the retry, on a fresh worker
  REQUIRE(second > 0);
  REQUIRE(::kill(second, SIGKILL) == 0);
  auto out = future.get();
  INFO(out.log);
  CHECK(out.status == StepStatus::kInfraError);
  CHECK(out.log.find("killed by signal 9") != std::string::npos);
  CHECK(out.log.find("outside the server") != std::string::npos);
  CHECK(out.log.find("twice") != std::string::npos);
  CHECK(stat(pool, "retries") == retries + 1);
  // Not cached: the same source compiles when the host leaves it alone.
  auto again = compile(pool, job_of(slow_source(60, 2)));
  INFO(again.log);
  CHECK(again.status == StepStatus::kOk);
  CHECK_FALSE(again.cache_hit);
}

TEST_CASE(
    "compile pool: a worker stopped from outside past the deadline is retried and the job gets its "
    "real result") {
  CompilePool& pool = stop_pool();
  const auto retries = stat(pool, "retries");
  const auto started = std::chrono::steady_clock::now();
  auto future = pool.submit(job_of(slow_source(30, 3)));
  const int pid = busy_worker(pool);
  REQUIRE(pid > 0);
  REQUIRE(::kill(pid, SIGSTOP) == 0);
  CHECK(no_longer_busy(pool, pid));  // the deadline passed while it was stopped
  ::kill(pid, SIGCONT);
  auto out = future.get();
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(out.log);
  CHECK(out.status == StepStatus::kOk);
  CHECK(seconds >= 3.9);  // it did wait for the deadline
  CHECK(stat(pool, "retries") == retries + 1);
}

TEST_CASE(
    "compile pool: a worker stopped from outside past the deadline twice is an infra error, not "
    "the agent's compile error") {
  CompilePool& pool = stop_pool();
  auto future = pool.submit(job_of(slow_source(30, 4)));
  const int first = busy_worker(pool);
  REQUIRE(first > 0);
  REQUIRE(::kill(first, SIGSTOP) == 0);
  const int second = busy_worker(pool, first);
  REQUIRE(second > 0);
  REQUIRE(::kill(second, SIGSTOP) == 0);
  CHECK(no_longer_busy(pool, second));
  ::kill(first, SIGCONT);
  ::kill(second, SIGCONT);
  auto out = future.get();
  INFO(out.log);
  CHECK(out.status == StepStatus::kInfraError);
  CHECK(out.log.find("stopped") != std::string::npos);
  CHECK(out.log.find("twice") != std::string::npos);
}

TEST_CASE("compile pool: a worker stuck in a job is killed at the deadline") {
  CompilePool& pool = strict_pool();
  const auto timeouts = stat(pool, "timeouts");
  const auto retries = stat(pool, "retries");
  CompileJob job = job_of(unique_kernel(5));
  job.test_fault = "hang";
  const auto started = std::chrono::steady_clock::now();
  auto out = compile(pool, job);
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK(out.status == StepStatus::kCompileError);
  CHECK(out.log.find("deadline") != std::string::npos);
  CHECK(seconds >= 2.9);
  CHECK(seconds < 10.0);
  CHECK(stat(pool, "timeouts") == timeouts + 1);
  CHECK(stat(pool, "retries") == retries);  // it used its CPU the whole time: the source's fault
}

TEST_CASE("compile pool: results are cached in memory and on disk") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("crucible-compile-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto options = test_options();
  options.workers = 1;
  options.cache_dir = dir;
  options.memory_cache_entries = 1;
  auto started = CompilePool::start(options);
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
  CompilePool& pool = **started;

  auto first = compile(pool, job_of(unique_kernel(6)));
  REQUIRE(first.status == StepStatus::kOk);
  CHECK_FALSE(first.cache_hit);
  auto memory_hit = compile(pool, job_of(unique_kernel(6)));
  CHECK(memory_hit.cache_hit);
  CHECK(memory_hit.cubin == first.cubin);
  CHECK(stat(pool, "cache_hits_memory") == 1);

  // A different job evicts the first from the one-entry memory cache; the disk still has it.
  auto other = compile(pool, job_of(unique_kernel(7)));
  REQUIRE(other.status == StepStatus::kOk);
  auto disk_hit = compile(pool, job_of(unique_kernel(6)));
  CHECK(disk_hit.cache_hit);
  CHECK(disk_hit.cubin == first.cubin);
  CHECK(disk_hit.lowered_names == first.lowered_names);
  CHECK(stat(pool, "cache_hits_disk") == 1);
  CHECK(stat(pool, "compiled") == 2);

  // Compile errors are cached too; a different arch is a different entry.
  auto bad = compile(pool, job_of("__global__ void k() { undefined_name(); }\n"));
  CHECK(bad.status == StepStatus::kCompileError);
  CHECK(compile(pool, job_of("__global__ void k() { undefined_name(); }\n")).cache_hit);
  CompileJob other_arch = job_of(unique_kernel(6));
  other_arch.arch = "sm_80";
  auto sm80 = compile(pool, other_arch);
  INFO(sm80.log);
  CHECK(sm80.status == StepStatus::kOk);
  CHECK_FALSE(sm80.cache_hit);
  std::filesystem::remove_all(dir);
}

TEST_CASE("compile pool: eight concurrent jobs are all answered") {
  CompilePool& pool = main_pool();
  std::vector<std::future<CompileOutput>> futures;
  for (int i = 0; i < 8; ++i) futures.push_back(pool.submit(job_of(unique_kernel(100 + i))));
  for (auto& future : futures) {
    REQUIRE(future.wait_for(std::chrono::seconds(120)) == std::future_status::ready);
    auto out = future.get();
    INFO(out.log);
    CHECK(out.status == StepStatus::kOk);
    CHECK(out.kernels.size() == 1);
  }
}

TEST_CASE("compile pool: identical sources submitted together are compiled once") {
  CompilePool& pool = main_pool();
  const auto compiled = stat(pool, "compiled");
  const auto joins = stat(pool, "dedup_joins");
  std::vector<std::future<CompileOutput>> futures;
  for (int i = 0; i < 4; ++i) futures.push_back(pool.submit(job_of(unique_kernel(200))));
  std::string cubin;
  int hits = 0;
  for (auto& future : futures) {
    auto out = future.get();
    CHECK(out.status == StepStatus::kOk);
    if (cubin.empty()) cubin = out.cubin;
    CHECK(out.cubin == cubin);
    hits += out.cache_hit ? 1 : 0;
  }
  CHECK(hits == 3);
  CHECK(stat(pool, "compiled") == compiled + 1);
  CHECK(stat(pool, "dedup_joins") == joins + 3);
}

TEST_CASE("compile pool: bad options and unknown archs are refused before compiling") {
  CompileJob job = job_of(unique_kernel(8));
  job.extra_options = {"-I/etc"};
  CHECK(compile(main_pool(), job).status == StepStatus::kInfraError);
  job.extra_options = {"--pre-include=/etc/passwd"};
  CHECK(compile(main_pool(), job).status == StepStatus::kInfraError);
  job.extra_options = {"-DTILE=4"};
  CHECK(compile(main_pool(), job).status == StepStatus::kOk);
  job.extra_options.clear();
  job.arch = "sm_90a; rm -rf /";
  CHECK(compile(main_pool(), job).status == StepStatus::kInvalidAction);
}

TEST_CASE("compile pool: start fails cleanly when the worker cannot run") {
  auto options = test_options();
  options.worker_exe = "/nonexistent/crucible-compile-worker";
  auto started = CompilePool::start(options);
  REQUIRE_FALSE(started.ok());
  CHECK(started.error().message.find("not executable") != std::string::npos);
}
