// The driver of bench/gpu/sampling_steps.py: runs the instrumented sampling kernel (KERNEL, with
// STEPS stamps) on rows like llm/top_k_top_p_sampling_from_logits's visible cases and prints, as
// JSON, each case's kernel time (CUDA events, median over calls) and the median of each step's
// cycles over rows and calls, with microseconds from the rows' own cycles-per-nanosecond ratio
// (clock64 against %globaltimer over the whole row).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int kMaxRows = 256;
__device__ long long probe_cycles[kMaxRows * STEPS];
__device__ unsigned long long probe_nanoseconds[kMaxRows * 2];  // at the first and last stamp

__device__ __forceinline__ unsigned long long global_nanoseconds() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

#define CRUCIBLE_STAMP(n)                                                          \
  do {                                                                             \
    if (threadIdx.x == 0) {                                                        \
      probe_cycles[blockIdx.x * STEPS + (n)] = clock64();                          \
      if ((n) == 0) probe_nanoseconds[blockIdx.x * 2] = global_nanoseconds();      \
      probe_nanoseconds[blockIdx.x * 2 + 1] = global_nanoseconds();                \
    }                                                                              \
  } while (0)

#include KERNEL

#include "cuda_check.hpp"

namespace {

struct Case {
  const char* name;
  int rows;
  int vocab;
  float std;
  bool single;  // batch_1_llama's k = 50, p = 0.9; else the task's eight-entry mix
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 200;
  const Case cases[] = {{"batch_1_llama", 1, 128256, 4.0f, true},
                        {"batch_8_qwen", 8, 151936, 4.0f, false},
                        {"batch_32_llama", 32, 128256, 4.0f, false},
                        {"batch_256_qwen", 256, 151936, 4.0f, false}};
  const int mix_k[8] = {1000000, 50, 1000000, 20, 100, 1000000, 1000, 50};
  const float mix_p[8] = {1.0f, 1.0f, 0.95f, 0.9f, 0.95f, 0.8f, 1.0f, 0.9f};
  std::printf("{\"calls\": %d, \"cases\": [", calls);
  unsigned long long state = 88172645463325252ull;
  auto uniform = [&] {  // xorshift64, in (0, 1)
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (static_cast<double>(state >> 11) + 0.5) / 9007199254740992.0;
  };
  for (int c = 0; c < 4; ++c) {
    const Case& k = cases[c];
    const size_t count = static_cast<size_t>(k.rows) * k.vocab;
    std::vector<float> logits(count), u(k.rows), top_p(k.rows);
    std::vector<int> top_k(k.rows);
    for (size_t i = 0; i < count; ++i) {  // Box-Muller
      logits[i] = static_cast<float>(k.std * std::sqrt(-2.0 * std::log(uniform())) *
                                     std::cos(6.283185307179586 * uniform()));
    }
    for (int r = 0; r < k.rows; ++r) {
      u[r] = static_cast<float>(uniform());
      top_k[r] = k.single ? 50 : mix_k[r % 8];
      top_p[r] = k.single ? 0.9f : mix_p[r % 8];
    }
    float *d_logits, *d_u, *d_p;
    int *d_k, *d_samples;
    CHECK(cudaMalloc(&d_logits, count * sizeof(float)));
    CHECK(cudaMalloc(&d_u, k.rows * sizeof(float)));
    CHECK(cudaMalloc(&d_p, k.rows * sizeof(float)));
    CHECK(cudaMalloc(&d_k, k.rows * sizeof(int)));
    CHECK(cudaMalloc(&d_samples, k.rows * sizeof(int)));
    CHECK(cudaMemcpy(d_logits, logits.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_u, u.data(), k.rows * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_p, top_p.data(), k.rows * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_k, top_k.data(), k.rows * sizeof(int), cudaMemcpyHostToDevice));
    cudaEvent_t begin, end;
    CHECK(cudaEventCreate(&begin));
    CHECK(cudaEventCreate(&end));
    std::vector<std::vector<double>> steps(STEPS);
    std::vector<double> kernel_us, per_ns;
    std::vector<long long> cycles(kMaxRows * STEPS);
    std::vector<unsigned long long> ns(kMaxRows * 2);
    const std::vector<long long> zeros(kMaxRows * STEPS, 0);
    for (int call = 0; call < calls; ++call) {
      CHECK(cudaMemcpyToSymbol(probe_cycles, zeros.data(), zeros.size() * sizeof(long long)));
      CHECK(cudaEventRecord(begin));
      top_k_top_p_sampling_kernel<<<k.rows, 512>>>(d_logits, d_u, d_k, d_p, d_samples, k.vocab);
      CHECK(cudaEventRecord(end));
      CHECK(cudaEventSynchronize(end));
      CHECK(cudaGetLastError());
      float ms = 0.0f;
      CHECK(cudaEventElapsedTime(&ms, begin, end));
      if (call == 0) continue;  // warm-up
      kernel_us.push_back(ms * 1000.0);
      CHECK(cudaMemcpyFromSymbol(cycles.data(), probe_cycles, cycles.size() * sizeof(long long)));
      CHECK(cudaMemcpyFromSymbol(ns.data(), probe_nanoseconds, ns.size() * sizeof(long long)));
      for (int r = 0; r < k.rows; ++r) {
        const long long* row = &cycles[r * STEPS];
        long long previous = row[0], last = row[0];
        for (int i = 1; i < STEPS; ++i) {
          if (row[i] == 0) continue;  // a step this row does not run
          steps[i].push_back(static_cast<double>(row[i] - previous));
          previous = last = row[i];
        }
        const double span_ns = static_cast<double>(ns[r * 2 + 1] - ns[r * 2]);
        if (span_ns > 0) per_ns.push_back(static_cast<double>(last - row[0]) / span_ns);
      }
    }
    const double cycles_per_ns = median(per_ns);
    std::printf("%s{\"name\": \"%s\", \"rows\": %d, \"vocab\": %d, \"kernel_us\": %.3f, "
                "\"cycles_per_ns\": %.4f, \"steps\": [",
                c ? ", " : "", k.name, k.rows, k.vocab, median(kernel_us), cycles_per_ns);
    for (int i = 1; i < STEPS; ++i) {
      const double m = median(steps[i]);
      std::printf("%s{\"cycles\": %.0f, \"us\": %.3f, \"rows_timed\": %zu}", i > 1 ? ", " : "", m,
                  cycles_per_ns > 0 ? m / cycles_per_ns / 1000.0 : 0.0, steps[i].size());
    }
    std::printf("]}");
    CHECK(cudaFree(d_logits));
    CHECK(cudaFree(d_u));
    CHECK(cudaFree(d_p));
    CHECK(cudaFree(d_k));
    CHECK(cudaFree(d_samples));
  }
  std::printf("]}\n");
  return 0;
}
