// GPU check of llm/top_k_top_p_sampling_from_logits's reference on hidden case h_uniform_logits
// (4 rows of 5000 zero logits, top_k 10^6 / 10 / 4999 / 1, top_p 1 / 1 / 0.95 / 0.9, the case's
// draw-0 uniforms), with other values right after the rows, as the runner's canaries are:
// a kernel that reads past a row's end answers differently here than on a clean buffer. Each
// call runs the kernel twice: as its launch plan runs 4 rows (clusters of 8 blocks a row) and
// as its one-block instance.
//
//   nvcc -gencode arch=compute_90a,code=sm_90a -std=c++17 -O3 -lineinfo \
//        -DKERNEL='"../../kernels/llm/top_k_top_p_sampling_from_logits.cu"' \
//        -o /tmp/row_tail bench/gpu/sampling_row_tail.cu
//   /tmp/row_tail 400                      # 400 calls, each with other values after the rows
//   TIGHT=1 compute-sanitizer --tool memcheck /tmp/row_tail 2   # the rows end the allocation
//
// Prints each row whose token is not floor(u * 5000) +- 1 (every token is equally likely, so
// that is the inverse CDF's answer within fp32 rounding) and a summary; exits 1 on any.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include KERNEL

#include "cuda_check.hpp"

int main(int argc, char **argv) {
  constexpr int kRows = 4, kVocab = 5000, kAfter = 4096;  // floats after the rows
  const int calls = argc > 1 ? std::atoi(argv[1]) : 100;
  const bool tight = std::getenv("TIGHT") != nullptr;
  const float u[kRows] = {0x1.23981ep-2f, 0x1.e9e9a0p-5f, 0x1.01cde6p-2f, 0x1.309b9ep-1f};
  const int top_k[kRows] = {1000000, 10, 4999, 1};
  const float top_p[kRows] = {1.0f, 1.0f, 0.95f, 0.9f};
  const int total = kRows * kVocab + (tight ? 0 : kAfter);
  float *logits, *uniform, *p;
  int *k, *samples;
  CHECK(cudaMalloc(&logits, total * sizeof(float)));
  CHECK(cudaMalloc(&uniform, sizeof u));
  CHECK(cudaMalloc(&p, sizeof top_p));
  CHECK(cudaMalloc(&k, sizeof top_k));
  CHECK(cudaMalloc(&samples, kRows * sizeof(int)));
  CHECK(cudaMemcpy(uniform, u, sizeof u, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(p, top_p, sizeof top_p, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(k, top_k, sizeof top_k, cudaMemcpyHostToDevice));
  std::vector<float> host(total, 0.0f);
  unsigned state = 12345u;
  int bad = 0;
  for (int call = 0; call < calls; ++call) {
    for (int i = kRows * kVocab; i < total; ++i) {  // large positive values, new every call
      state = state * 1664525u + 1013904223u;
      host[i] = 1e30f * (1.0f + static_cast<float>(state >> 8) / 16777216.0f);
    }
    CHECK(cudaMemcpy(logits, host.data(), total * sizeof(float), cudaMemcpyHostToDevice));
    // The kernel as its launch plan runs 4 rows (8 blocks a row in clusters of 8), and its
    // one-block instance (a row a block, as batches over 66 take it).
    for (const int cluster : {8, 1}) {
      CHECK(cudaMemset(samples, 0xff, kRows * sizeof(int)));
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(kRows * cluster);
      config.blockDim = dim3(512);
      cudaLaunchAttribute attribute = {};
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = cluster;
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      void (*const kernel)(const float*, const float*, const int*, const float*, int*, int) =
          cluster == 8 ? top_k_top_p_sampling_kernel<8> : top_k_top_p_sampling_kernel<1>;
      CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<const float*>(logits),
                               static_cast<const float*>(uniform), static_cast<const int*>(k),
                               static_cast<const float*>(p), samples, kVocab));
      CHECK(cudaDeviceSynchronize());
      int out[kRows];
      CHECK(cudaMemcpy(out, samples, sizeof out, cudaMemcpyDeviceToHost));
      for (int row = 0; row < kRows; ++row) {
        const int expected = static_cast<int>(u[row] * kVocab);
        if (out[row] < expected - 1 || out[row] > expected + 1) {
          ++bad;
          std::printf("call %d, clusters of %d, row %d: token %d, expected %d\n", call, cluster,
                      row, out[row], expected);
        }
      }
    }
  }
  std::printf("%d calls, %d of %d rows wrong\n", calls, bad, calls * kRows * 2);
  return bad == 0 ? 0 : 1;
}
