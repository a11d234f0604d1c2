// expect: ok
// RMSNorm whose rows arrive through the tensor memory accelerator: a @tensormap over the input
// (rows of hidden_size, box 256 x 1), one bulk tensor copy per 256-element chunk into shared
// memory, completion counted on an mbarrier. Rows shorter than a box (hidden_size 64) exercise
// the zero fill past the view's edge.
// @tensormap rows input dims(hidden_size, num_tokens) box(256, 1)
// @launch rms<<<num_tokens, 256, cdiv(hidden_size, 256) * 512 + 256>>>(out, rows, weight,
//                                                                      epsilon, hidden_size)
#include <cuda_bf16.h>

extern "C" __global__ void rms(__nv_bfloat16* out, const __grid_constant__ CUtensorMap rows,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  // The barrier, then the row at the next 128-byte boundary (a bulk copy's destination is
  // 128-byte aligned): dynamic shared memory is aligned here, not assumed.
  extern __shared__ __align__(16) unsigned char smem[];
  const unsigned start = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const unsigned barrier = (start + 127u) & ~127u;
  const __nv_bfloat16* row =
      reinterpret_cast<const __nv_bfloat16*>(smem + (barrier - start) + 128);
  const int chunks = (hidden_size + 255) / 256;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(barrier));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier),
                 "r"(chunks * 512)
                 : "memory");
    for (int c = 0; c < chunks; ++c) {
      const unsigned destination = barrier + 128 + c * 512;
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
          " [%0], [%1, {%2, %3}], [%4];" ::"r"(destination),
          "l"(reinterpret_cast<unsigned long long>(&rows)), "r"(c * 256), "r"(int(blockIdx.x)),
          "r"(barrier)
          : "memory");
    }
  }
  __syncthreads();  // the barrier is initialised before anyone waits on it
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, "
        "p; }"
        : "=r"(done)
        : "r"(barrier)
        : "memory");
  }
  __shared__ float partial[256];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < chunks * 256; i += 256) {
    const float v = __bfloat162float(row[i]);  // zeros past hidden_size
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / hidden_size + epsilon);
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(row[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
