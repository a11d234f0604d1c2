// Reference for multimodal/gelu_tanh_and_mul: vLLM's gelu_tanh_and_mul(out, input) on bf16 (the
// GeGLU of Gemma-family language models, the text side of Gemma-3 and PaliGemma-2), fp32 math.
//
// For every row t and column i < d, with the gate half then the up half of each input row:
//
//   out[t, i] = gelu_tanh(g) * u,   g = input[t, i], u = input[t, d + i]
//   gelu_tanh(g) = 0.5 * g * (1 + tanh(sqrt(2 / pi) * (g + 0.044715 * g^3)))
//
// formed in fp32 and rounded once to bf16.
//
// Launch plan: a 2-D grid, rows on x and 1024-column tiles of a row on y; 128 threads per
// block, one 16-byte vector (8 outputs) per thread. Gemma-3-27B's d = 21504 is 21 tiles, so a
// single decode token spreads over 21 SMs.
//
// @launch gelu_tanh_and_mul_kernel<<<dim3(num_tokens, cdiv(d, 1024)), 128>>>(out, input, d)
//
// Design notes:
// - Memory bound: 6 bytes moved per output; two 16-byte loads back to back, one 16-byte store,
//   no shared memory, no barriers.
// - 0.5 * g * (1 + tanh(z)) = g * sigmoid(2z) = g / (1 + exp(-2z)): one hardware exp2 and one
//   reciprocal (__expf, __fdividef) per output, a few fp32 ulps, far below a bf16 ulp. For very
//   negative g, exp(-2z) overflows to inf and the quotient is -0, the right limit (tanh written
//   as (e^2z - 1) / (e^2z + 1) would give inf / inf = NaN there).
// - Rows are 16-byte aligned only when d % 8 == 0; otherwise the same threads cover the tile
//   one element at a time, consecutive threads on consecutive columns. The branch is uniform.

#include <cuda_bf16.h>

namespace {

constexpr int kVectorElems = 8;                      // bf16 elements per 16-byte vector
constexpr int kThreads = 128;                        // must equal the block size of the directive
constexpr int kTileColumns = kThreads * kVectorElems;  // columns one block covers

__device__ __forceinline__ float gelu_tanh_times(float g, float u) {
  // -2 * sqrt(2 / pi) * (g + 0.044715 g^3)
  const float minus_two_z = -1.5957691216057308f * g * (1.0f + 0.044715f * g * g);
  return __fdividef(g, 1.0f + __expf(minus_two_z)) * u;
}

}  // namespace

// out: [num_tokens, d]; input: [num_tokens, 2, d] ([gate | up] per row), both row-major.
extern "C" __global__ void __launch_bounds__(kThreads)
    gelu_tanh_and_mul_kernel(__nv_bfloat16* __restrict__ out,
                             const __nv_bfloat16* __restrict__ input, int d) {
  const size_t row = blockIdx.x;
  const __nv_bfloat16* gate = input + row * 2 * static_cast<size_t>(d);
  const __nv_bfloat16* up = gate + d;
  __nv_bfloat16* y = out + row * static_cast<size_t>(d);
  const int tile = static_cast<int>(blockIdx.y) * kTileColumns;

  if (d % kVectorElems != 0) {
#pragma unroll
    for (int j = 0; j < kVectorElems; ++j) {
      const int col = tile + j * kThreads + static_cast<int>(threadIdx.x);
      if (col < d) {
        y[col] = __float2bfloat16_rn(
            gelu_tanh_times(__bfloat162float(gate[col]), __bfloat162float(up[col])));
      }
    }
    return;
  }

  const int col = tile + static_cast<int>(threadIdx.x) * kVectorElems;
  if (col >= d) return;
  const uint4 g = *reinterpret_cast<const uint4*>(gate + col);
  const uint4 u = *reinterpret_cast<const uint4*>(up + col);
  const __nv_bfloat162* g_pairs = reinterpret_cast<const __nv_bfloat162*>(&g);
  const __nv_bfloat162* u_pairs = reinterpret_cast<const __nv_bfloat162*>(&u);
  uint4 result;
  __nv_bfloat162* out_pairs = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 gv = __bfloat1622float2(g_pairs[i]);
    const float2 uv = __bfloat1622float2(u_pairs[i]);
    out_pairs[i] =
        __floats2bfloat162_rn(gelu_tanh_times(gv.x, uv.x), gelu_tanh_times(gv.y, uv.y));
  }
  *reinterpret_cast<uint4*>(y + col) = result;
}
