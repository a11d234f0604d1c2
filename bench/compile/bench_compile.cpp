// bench_compile: prints compile latency percentiles and pool throughput for a bf16 rms_norm
// kernel, and writes them as JSON.
//   crucible-bench-compile [--workers N] [--iterations N] [--json FILE] [--worker PATH]
//   [--no-isolate]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "core/msgpack_codec.hpp"
#include "core/text_file.hpp"
#include "core/value.hpp"
#include "sandbox/compile_pool.hpp"

namespace {

using crucible::core::Value;
using crucible::sandbox::CompileJob;
using crucible::sandbox::CompilePool;
using crucible::sandbox::CompilePoolOptions;
using Clock = std::chrono::steady_clock;

// The task's production reference, as the server compiles it for every step's timing.
const std::string& reference_source() {
  static const std::string source = [] {
    auto text = crucible::core::read_text_file(CRUCIBLE_SOURCE_DIR "/kernels/llm/rms_norm.cu");
    if (!text) {
      std::fprintf(stderr, "%s\n", text.error().message.c_str());
      std::exit(1);
    }
    return std::move(text).value();
  }();
  return source;
}

int variant_counter = 0;

// Same work every time, different cache key: a comment line differs.
CompileJob fresh_job() {
  CompileJob job;
  job.source = "// variant " + std::to_string(variant_counter++) + "\n" + reference_source();
  job.name_expressions = {"rms_norm_kernel"};
  return job;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

Value summary(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    if (samples.empty()) return 0.0;
    std::size_t index = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
    return samples[std::min(index, samples.size() - 1)];
  };
  return Value{{"count", samples.size()},
               {"p50_ms", at(0.5)},
               {"p95_ms", at(0.95)},
               {"min_ms", samples.empty() ? 0.0 : samples.front()},
               {"max_ms", samples.empty() ? 0.0 : samples.back()}};
}

std::unique_ptr<CompilePool> start_pool(CompilePoolOptions options) {
  auto pool = CompilePool::start(std::move(options));
  if (!pool) {
    std::fprintf(stderr, "bench_compile: %s\n", pool.error().message.c_str());
    std::exit(1);
  }
  return std::move(pool).value();
}

// Sequential compiles on one warm worker: wall latency (submit to result) per job.
Value warm_latency(CompilePoolOptions options, int iterations) {
  options.workers = 1;
  auto pool = start_pool(options);
  std::vector<double> wall, worker;
  pool->submit(fresh_job()).get();  // first job after start: not counted
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    auto out = pool->submit(fresh_job()).get();
    wall.push_back(ms_since(start));
    worker.push_back(out.compile_ms);
    if (out.status != crucible::core::StepStatus::kOk) {
      std::fprintf(stderr, "bench_compile: compile failed:\n%s\n", out.log.c_str());
      std::exit(1);
    }
  }
  Value result = summary(wall);
  result["nvrtc"] = summary(worker);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CompilePoolOptions base;
  base.worker_exe = CRUCIBLE_COMPILE_WORKER;
  int workers = 2;
  int iterations = 20;
  std::string json_path = "bench_compile.json";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (flag == "--workers")
      workers = std::atoi(next().c_str());
    else if (flag == "--iterations")
      iterations = std::atoi(next().c_str());
    else if (flag == "--json")
      json_path = next();
    else if (flag == "--worker")
      base.worker_exe = next();
    else if (flag == "--no-isolate")
      base.isolate = false;
    else {
      std::fprintf(stderr,
                   "usage: crucible-bench-compile [--workers N] [--iterations N] [--json FILE] "
                   "[--worker PATH] [--no-isolate]\n");
      return 2;
    }
  }
  Value report = Value::object();

  // Cold: a brand-new worker (load NVRTC, jail, build the PCH), then its first compile.
  {
    std::vector<double> start_ms, first_ms;
    for (int i = 0; i < 3; ++i) {
      auto options = base;
      options.workers = 1;
      const auto start = Clock::now();
      auto pool = start_pool(options);
      start_ms.push_back(ms_since(start));
      const auto compile_start = Clock::now();
      pool->submit(fresh_job()).get();
      first_ms.push_back(ms_since(compile_start));
    }
    report["cold_worker_start"] = summary(start_ms);
    report["cold_first_compile"] = summary(first_ms);
    std::printf("cold: worker start p50 %.0f ms, first compile p50 %.1f ms\n",
                report["cold_worker_start"]["p50_ms"].get<double>(),
                report["cold_first_compile"]["p50_ms"].get<double>());
  }

  report["warm_pch"] = warm_latency(base, iterations);
  std::printf("warm (reused worker, PCH): p50 %.1f ms, p95 %.1f ms  (NVRTC alone p50 %.1f ms)\n",
              report["warm_pch"]["p50_ms"].get<double>(),
              report["warm_pch"]["p95_ms"].get<double>(),
              report["warm_pch"]["nvrtc"]["p50_ms"].get<double>());
  {
    auto options = base;
    options.use_pch = false;
    report["warm_no_pch"] = warm_latency(options, std::max(3, iterations / 3));
    std::printf("warm (reused worker, no PCH): p50 %.1f ms, p95 %.1f ms\n",
                report["warm_no_pch"]["p50_ms"].get<double>(),
                report["warm_no_pch"]["p95_ms"].get<double>());
  }

  // Cache hits (memory) and throughput with every worker busy.
  {
    auto options = base;
    options.workers = workers;
    auto pool = start_pool(options);
    CompileJob job = fresh_job();
    pool->submit(job).get();
    std::vector<double> hits;
    for (int i = 0; i < 200; ++i) {
      const auto start = Clock::now();
      auto out = pool->submit(job).get();
      hits.push_back(ms_since(start));
      if (!out.cache_hit) std::fprintf(stderr, "bench_compile: expected a cache hit\n");
    }
    report["cache_hit"] = summary(hits);
    std::printf("cache hit: p50 %.3f ms, p95 %.3f ms\n",
                report["cache_hit"]["p50_ms"].get<double>(),
                report["cache_hit"]["p95_ms"].get<double>());

    const int jobs = std::max(workers * 8, iterations);
    std::vector<std::future<crucible::sandbox::CompileOutput>> futures;
    const auto start = Clock::now();
    for (int i = 0; i < jobs; ++i) futures.push_back(pool->submit(fresh_job()));
    for (auto& future : futures) future.get();
    const double seconds = ms_since(start) / 1000.0;
    report["throughput"] = Value{{"workers", workers},
                                 {"jobs", jobs},
                                 {"seconds", seconds},
                                 {"compiles_per_second", jobs / seconds}};
    std::printf("throughput: %d jobs on %d workers in %.2f s = %.1f compiles/s\n", jobs, workers,
                seconds, jobs / seconds);
    report["pool_stats"] = pool->stats();
  }
  std::ofstream(json_path) << crucible::core::to_json_text(report, 2) << "\n";
  std::printf("wrote %s\n", json_path.c_str());
  return 0;
}
