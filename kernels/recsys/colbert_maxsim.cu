// Reference for recsys/colbert_maxsim: ColBERTv2's MaxSim score of one query against each
// candidate passage, bf16 tensor-core dot products with fp32 accumulation.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions):
//
//   scores[n] = sum_i max_{j < doc_lens[n]} query[i, :] . docs[n, j, :]
//
// Launch plan. ColBERT's shapes (query_len <= 32, dim <= 128 and a multiple of 16) take the
// tensor-core kernel: one block of 4 warps per passage, warp w taking the passage's 16-token
// tiles w, w + 4, ...; each tile is a 16 x 32 block of dot products from dim / 16
// mma.m16n8k16 steps per 8 query tokens, maxed into per-query-token running maxima. The warps'
// maxima meet in shared memory and the block sums them. Other shapes take a plain kernel
// (one thread per query token of a passage, fp32 FMAs).
//
// clang-format off
// @launch if (query_len <= 32 && dim <= 128 && dim % 16 == 0) colbert_maxsim_mma_kernel<<<num_docs, 128>>>(scores, query, docs, doc_lens, query_len, num_docs, doc_maxlen, dim)
// @launch if (query_len > 32 || dim > 128 || dim % 16 != 0) colbert_maxsim_plain_kernel<<<num_docs, 128>>>(scores, query, docs, doc_lens, query_len, num_docs, doc_maxlen, dim)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - The op streams each passage once: 180 tokens x 256 bytes. The query (32 x 128 bf16, 8 KiB)
//   lives in registers as mma B fragments for the whole block, loaded once.
// - Tiles wholly past the passage's length are skipped, so a 64-token passage reads 64 rows
//   (80 with the last tile), not 180: less than the library's padded GEMM reads.
// - A tile's A fragments (all dim / 16 steps) are loaded before its first mma, so 16 rows x
//   dim of the passage are in flight per warp.
// - Fragment layouts of mma.m16n8k16 (bf16): lane = 4 g + c; A holds rows g and g + 8, columns
//   2c, 2c + 1 and 2c + 8, 2c + 9 of the 16 x 16 step; B holds k 2c, 2c + 1 and 2c + 8, 2c + 9
//   of query token g; C holds rows g, g + 8 and columns 2c, 2c + 1.

#include <cuda_bf16.h>

namespace {

constexpr int kWarps = 4;
constexpr int kMaxSteps = 8;                 // dim / 16
constexpr int kNTiles = 4;                   // 32 query tokens / 8
constexpr float kNegInf = -3.402823466e38f;  // below every real dot product

__device__ __forceinline__ unsigned int load_pair(const __nv_bfloat16* p) {
  return *reinterpret_cast<const unsigned int*>(p);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned int (&a)[4], unsigned int b0,
                                         unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace

extern "C" __global__ void __launch_bounds__(128)
    colbert_maxsim_mma_kernel(float* __restrict__ scores, const __nv_bfloat16* __restrict__ query,
                              const __nv_bfloat16* __restrict__ docs,
                              const int* __restrict__ doc_lens, int query_len, int num_docs,
                              int doc_maxlen, int dim) {
  __shared__ float warp_max[kWarps][32];
  const int doc = blockIdx.x;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int c = lane % 4;
  const int steps = dim / 16;
  const int len = doc_lens[doc];
  const __nv_bfloat16* passage = docs + static_cast<long long>(doc) * doc_maxlen * dim;

  // B fragments of the whole query: query token n = 8 nt + g, k = 16 s + 2c (+8).
  unsigned int b[kNTiles][kMaxSteps][2];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int n = nt * 8 + g;
#pragma unroll
    for (int s = 0; s < kMaxSteps; ++s) {
      b[nt][s][0] = 0u;
      b[nt][s][1] = 0u;
      if (n < query_len && s < steps) {
        b[nt][s][0] = load_pair(query + n * dim + s * 16 + 2 * c);
        b[nt][s][1] = load_pair(query + n * dim + s * 16 + 2 * c + 8);
      }
    }
  }

  float col_max[kNTiles][2];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) col_max[nt][0] = col_max[nt][1] = kNegInf;

  for (int row0 = warp * 16; row0 < len; row0 += kWarps * 16) {
    const int r_lo = row0 + g;
    const int r_hi = row0 + g + 8;
    const bool lo_ok = r_lo < len;
    const bool hi_ok = r_hi < len;
    unsigned int a[kMaxSteps][4];
#pragma unroll
    for (int s = 0; s < kMaxSteps; ++s) {
      a[s][0] = a[s][1] = a[s][2] = a[s][3] = 0u;
      if (s < steps) {
        if (lo_ok) {
          a[s][0] = load_pair(passage + r_lo * dim + s * 16 + 2 * c);
          a[s][2] = load_pair(passage + r_lo * dim + s * 16 + 2 * c + 8);
        }
        if (hi_ok) {
          a[s][1] = load_pair(passage + r_hi * dim + s * 16 + 2 * c);
          a[s][3] = load_pair(passage + r_hi * dim + s * 16 + 2 * c + 8);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int s = 0; s < kMaxSteps; ++s) {
        if (s < steps) mma_bf16(acc, a[s], b[nt][s][0], b[nt][s][1]);
      }
      if (lo_ok) {
        col_max[nt][0] = fmaxf(col_max[nt][0], acc[0]);
        col_max[nt][1] = fmaxf(col_max[nt][1], acc[1]);
      }
      if (hi_ok) {
        col_max[nt][0] = fmaxf(col_max[nt][0], acc[2]);
        col_max[nt][1] = fmaxf(col_max[nt][1], acc[3]);
      }
    }
  }

  // Max over the 8 row groups g (lanes with the same c), then one lane per column publishes.
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float v = col_max[nt][k];
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 8));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 16));
      if (g == 0) warp_max[warp][nt * 8 + 2 * c + k] = v;
    }
  }
  __syncthreads();
  if (warp == 0) {
    float best = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) best = fmaxf(best, warp_max[w][lane]);
    float total = lane < query_len ? best : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      total += __shfl_xor_sync(0xffffffffu, total, offset);
    }
    if (lane == 0) scores[doc] = total;
  }
}

extern "C" __global__ void __launch_bounds__(128)
    colbert_maxsim_plain_kernel(float* __restrict__ scores, const __nv_bfloat16* __restrict__ query,
                                const __nv_bfloat16* __restrict__ docs,
                                const int* __restrict__ doc_lens, int query_len, int num_docs,
                                int doc_maxlen, int dim) {
  __shared__ float partial[128];
  const int doc = blockIdx.x;
  const int len = doc_lens[doc];
  const __nv_bfloat16* passage = docs + static_cast<long long>(doc) * doc_maxlen * dim;
  float total = 0.0f;
  for (int i = threadIdx.x; i < query_len; i += blockDim.x) {
    const __nv_bfloat16* q = query + static_cast<long long>(i) * dim;
    float best = kNegInf;
    for (int j = 0; j < len; ++j) {
      const __nv_bfloat16* d = passage + static_cast<long long>(j) * dim;
      float dot = 0.0f;
      for (int k = 0; k < dim; ++k) dot = fmaf(__bfloat162float(q[k]), __bfloat162float(d[k]), dot);
      best = fmaxf(best, dot);
    }
    total += best;
  }
  partial[threadIdx.x] = total;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) scores[doc] = partial[0];
}
