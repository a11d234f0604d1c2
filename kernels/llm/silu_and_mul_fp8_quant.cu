// Reference for llm/silu_and_mul_fp8_quant: vLLM's silu_and_mul_quant(result, input, scale):
// SwiGLU on bf16 with static per-tensor FP8 e4m3 quantization of the output, fp32 math.
//
// For every row t and column i < d, with the gate half then the up half of each input row:
//
//   result[t, i] = e4m3_satfinite_rn(clamp(silu(g) * u * (1 / scale[0]), -448, 448))
//   g = input[t, i], u = input[t, d + i], silu(g) = g / (1 + exp(-g))
//
// silu and the product stay in fp32 (vLLM rounds both to bf16 first); the product is scaled by
// the reciprocal of the scale, as vLLM does. Both are within the task's one-step tolerance.
//
// Launch plan: a 2-D grid, rows on x and 1024-column tiles of a row on y; 128 threads per
// block, one 16-byte vector of gate and one of up (8 outputs) per thread. Llama-3-8B's
// d = 14336 is 14 tiles, so a single decode token spreads over 14 SMs, and an 8192-token
// prefill launches 114688 small blocks that the 132 SMs drain evenly.
//
// clang-format off
// @launch if (d % 8 == 0) silu_and_mul_fp8_quant_kernel<true><<<dim3(num_tokens, cdiv(d, 1024)), 128>>>(result, input, scale, d)
// @launch if (d % 8 != 0) silu_and_mul_fp8_quant_kernel<false><<<dim3(num_tokens, cdiv(d, 1024)), 128>>>(result, input, scale, d)
// clang-format on
//
// Design notes:
// - Memory bound: 5 bytes moved per output. A thread issues its two 16-byte loads (gate and up)
//   and the load of the scale back to back, then one 8-byte store (8 e4m3, converted two at a
//   time with cvt.rn.satfinite.e4m3x2.f32); no shared memory, no barriers. The scale is one
//   word that every block reads: it stays in L1/L2.
// - The arithmetic must stay under the memory time: silu uses the hardware exp2 and reciprocal
//   (__expf, __fdividef: a few fp32 ulps, far below an e4m3 step). For g < -88.7, exp(-g)
//   overflows to inf and __fdividef(g, inf) = -0, the right limit; between 2^126 and 2^128 it
//   returns 0, within the tolerance of an output of at most 1e-36 / scale.
// - Rows are aligned only when d % 8 == 0 (row t of result starts at byte t * d, the up half of
//   input at byte 2 * (2t + 1) * d). Otherwise the same threads cover the tile one element at a
//   time, consecutive threads on consecutive columns (coalesced). The launch plan picks the
//   path, so each kernel holds only its own code: a single decode token's time is mostly
//   latency, and on the H200 the branch taken at run time inside one kernel cost 2-7 % at 1 to
//   32 tokens (bench/results/h200_reference_variants_small_ops.json). At one token the kernel
//   is 1.04x torch.compile's Triton kernel timed in the parity harness, 1.07-1.11x by
//   crucible's own timing (h200_parity.json).

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

// bf16 elements per 16-byte vector.
constexpr int kVectorElems = 8;
// Threads per block; must equal the block size in the directive.
constexpr int kThreads = 128;
// Columns one block covers (the y tile of the grid).
constexpr int kTileColumns = kThreads * kVectorElems;
// Largest finite e4m3 (e4m3fn).
constexpr float kFp8Max = 448.0f;

__device__ __forceinline__ float quantized_input(float g, float u, float inverse_scale) {
  const float y = __fdividef(g, 1.0f + __expf(-g)) * u * inverse_scale;
  return fminf(fmaxf(y, -kFp8Max), kFp8Max);
}

}  // namespace

// result: [num_tokens, d] e4m3; input: [num_tokens, 2, d] ([gate | up] per row) bf16, both
// row-major; scale: [1] f32.
// kAligned: the 16-byte path (d % 8 == 0), else the element path.
template <bool kAligned>
__global__ void __launch_bounds__(kThreads)
    silu_and_mul_fp8_quant_kernel(__nv_fp8_e4m3* __restrict__ result,
                                  const __nv_bfloat16* __restrict__ input,
                                  const float* __restrict__ scale, int d) {
  const size_t row = blockIdx.x;
  const __nv_bfloat16* gate = input + row * 2 * static_cast<size_t>(d);
  const __nv_bfloat16* up = gate + d;
  __nv_fp8_storage_t* y =
      reinterpret_cast<__nv_fp8_storage_t*>(result) + row * static_cast<size_t>(d);
  const int tile = static_cast<int>(blockIdx.y) * kTileColumns;

  if (!kAligned) {
    const float inverse_scale = __frcp_rn(*scale);
#pragma unroll
    for (int j = 0; j < kVectorElems; ++j) {
      const int col = tile + j * kThreads + static_cast<int>(threadIdx.x);
      if (col < d) {
        y[col] = __nv_cvt_float_to_fp8(
            quantized_input(__bfloat162float(gate[col]), __bfloat162float(up[col]), inverse_scale),
            __NV_SATFINITE, __NV_E4M3);
      }
    }
    return;
  }

  const int col = tile + static_cast<int>(threadIdx.x) * kVectorElems;
  if (col >= d) return;
  const uint4 g = *reinterpret_cast<const uint4*>(gate + col);
  const uint4 u = *reinterpret_cast<const uint4*>(up + col);
  const float inverse_scale = __frcp_rn(*scale);
  const __nv_bfloat162* g_pairs = reinterpret_cast<const __nv_bfloat162*>(&g);
  const __nv_bfloat162* u_pairs = reinterpret_cast<const __nv_bfloat162*>(&u);
  unsigned int packed[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float2 g0 = __bfloat1622float2(g_pairs[2 * half]);
    const float2 u0 = __bfloat1622float2(u_pairs[2 * half]);
    const float2 g1 = __bfloat1622float2(g_pairs[2 * half + 1]);
    const float2 u1 = __bfloat1622float2(u_pairs[2 * half + 1]);
    // __nv_cvt_float2_to_fp8x2 puts .x in the low byte: element order is memory order.
    const unsigned int low =
        __nv_cvt_float2_to_fp8x2(make_float2(quantized_input(g0.x, u0.x, inverse_scale),
                                             quantized_input(g0.y, u0.y, inverse_scale)),
                                 __NV_SATFINITE, __NV_E4M3);
    const unsigned int high =
        __nv_cvt_float2_to_fp8x2(make_float2(quantized_input(g1.x, u1.x, inverse_scale),
                                             quantized_input(g1.y, u1.y, inverse_scale)),
                                 __NV_SATFINITE, __NV_E4M3);
    packed[half] = low | (high << 16);
  }
  *reinterpret_cast<uint2*>(y + col) = make_uint2(packed[0], packed[1]);
}
