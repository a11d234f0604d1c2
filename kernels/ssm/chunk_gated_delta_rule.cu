// Reference for ssm/chunk_gated_delta_rule: the gated DeltaNet prefill (FLA's
// chunk_gated_delta_rule as vLLM's Qwen3-Next layer calls it: cu_seqlens, q/k L2-normalised in
// the kernel, initial and final states), chunks of 64 tokens, head sizes 128.
//
// @workspace ws_w f16[(cdiv(num_tokens, 64) + num_seqs) * num_v_heads * 8192]
// @workspace ws_u float[(cdiv(num_tokens, 64) + num_seqs) * num_v_heads * 8192]
// @workspace ws_a f16[(cdiv(num_tokens, 64) + num_seqs) * num_v_heads * 4096]
// @workspace ws_qk f16[(cdiv(num_tokens, 64) + num_seqs) * num_k_heads * 16384]
// @workspace ws_rows float[(cdiv(num_tokens, 64) + num_seqs) * num_v_heads * 192]
// @launch gdr_chunk_prepare<<<dim3(cdiv(num_tokens, 64) + num_seqs, num_v_heads), 256, 72960>>>(
//     q, k, v, g, beta, cu_seqlens, ws_w, ws_u, ws_a, ws_qk, ws_rows, scale, num_seqs,
//     num_k_heads, num_v_heads)
// @launch if (num_seqs * num_v_heads > 16 || num_tokens <= 2048)
//     gdr_chunk_scan<0, false><<<dim3(2, num_v_heads, num_seqs), 128, 162816>>>(initial_state,
//     cu_seqlens, ws_w, ws_u, ws_a, ws_qk, ws_rows, ws_seg, ws_trans, o, final_state, num_seqs,
//     num_k_heads, num_v_heads)
// @workspace ws_seg float[(num_seqs * num_v_heads <= 16 && num_tokens > 2048) *
//     (cdiv(num_tokens, 1024) + num_seqs) * num_v_heads * 16384]
// @workspace ws_trans float[(num_seqs * num_v_heads <= 16 && num_tokens > 2048) *
//     (cdiv(num_tokens, 1024) + num_seqs) * num_v_heads * 16384]
// @launch if (num_seqs * num_v_heads <= 16 && num_tokens > 2048)
//     gdr_chunk_scan<16, true><<<dim3(4, num_v_heads, cdiv(num_tokens, 1024) + num_seqs), 128,
//     101376>>>(initial_state, cu_seqlens, ws_w, ws_u, ws_a, ws_qk, ws_rows, ws_seg, ws_trans,
//     o, final_state, num_seqs, num_k_heads, num_v_heads)
// @launch if (num_seqs * num_v_heads <= 16 && num_tokens > 2048)
//     gdr_segment_combine<16><<<dim3(16, num_v_heads, num_seqs), 256, 135168>>>(cu_seqlens,
//     ws_seg, ws_trans, num_seqs, num_v_heads)
// @launch if (num_seqs * num_v_heads <= 16 && num_tokens > 2048)
//     gdr_chunk_scan<16, false><<<dim3(2, num_v_heads, cdiv(num_tokens, 1024) + num_seqs), 128,
//     162816>>>(initial_state, cu_seqlens, ws_w, ws_u, ws_a, ws_qk, ws_rows, ws_seg, ws_trans,
//     o, final_state, num_seqs, num_k_heads, num_v_heads)
//
// The chunked form (Yang, Kautz and Hatamizadeh, "Gated Delta Networks", 2024; FLA). In a chunk
// of L <= 64 tokens with normalised keys k_i, normalised queries q_i, betas b_i and cumulative
// gates c_i = g_1 + ... + g_i (from the chunk's start), the state S entering the chunk and the
// corrections u_i of the recurrence satisfy (I + M) u = diag(b) V - diag(b e^c) K S with
// M_ij = b_i (k_i . k_j) e^(c_i - c_j) for j < i. With T = (I + M)^-1:
//   W = T diag(b e^c) K,  U = T diag(b) V,  u = U - W S,
//   o_i = scale e^(c_i) q_i S + sum_(j <= i) A_ij u_j,  A_ij = scale (q_i . k_j) e^(c_i - c_j),
//   S' = e^(c_L) S + sum_j e^(c_L - c_j) k_j u_j^T.
// Only differences of cumulative gates inside one chunk are exponentiated (never a sum over the
// whole sequence), and the upper triangle is masked before its exponential is taken.
//
// Kernels:
// - gdr_chunk_prepare, one block per (chunk, value head), all chunks in parallel, three blocks
//   a multiprocessor (73 KB of shared memory, 80 registers): the raw k and q rows in one batch
//   of asynchronous copies, the lower tiles of K K^T and Q K^T on bf16 tensor cores (mma.sync
//   m16n8k16 through ldmatrix: exact products, fp32 sums; the norms, betas and gate differences
//   applied to the accumulators as row and column factors, giving M and A without a pass over
//   shared memory), T = (I + M)^-1 in fp32 by 16 x 16 blocks (forward substitution inside the
//   diagonal blocks, one thread a column, then each block row from the rows above it: three
//   levels of small products) while v's rows land in q's buffer, then W and U on bf16 tensor
//   cores with T's scaled entries split in registers into two bf16 parts (hi + lo, 16 bits of
//   mantissa) against the exact raw k and v, only T's lower blocks taken. Writes W (fp16), U
//   transposed (fp32, staged for 16-byte stores), A (fp16, zero above the diagonal), the
//   normalised q and k rows (fp16, once per key head), W, A, q and k each in the order the
//   scan's shared memory holds them (swizzled), and the row factors scale e^(c_i), e^(c_L - c_i)
//   and e^(c_L). The previous design (one pass over shared memory per step, 108 KB, two blocks a
//   multiprocessor) took 1.6-1.75x as long (bench/gpu/kernel_stages.py).
// - gdr_chunk_scan, one block (one warpgroup) per (sequence, value head, 64 value columns),
//   walking the sequence's chunks in order. It keeps its slice of the state transposed
//   (64 x 128, fp32) in wgmma accumulator registers for the whole sequence (warp w: 16 value
//   columns), the state's fragments as the A operand from registers: u^T = U^T - S^T W^T and
//   P^T = S^T Q^T (m64n64k16, W and q rows K-major), then S^T = e^(c_L) S^T + (f u)^T K
//   (m64n128k16, k rows MN-major) and o^T = (scale e^c P)^T + u^T A^T (m64n64k16), the
//   accumulators of one product feeding the next as A operands. The shared operands are read
//   once per warpgroup: with mma.sync each warp read all of W, q and k through ldmatrix, four
//   times the shared-memory traffic, and the scan took 1.27-1.33x as long (bench/gpu/
//   kernel_stages.py). Products run on fp16 tensor cores (fp32 sums): fp16 carries TF32's 10
//   mantissa bits, the precision the task's tolerances were derived for, at twice TF32's rate;
//   every operand is normalised or bounded (|q|, |k| = 1; A, e^c <= 1; the state and u of the
//   recurrence's scale), far inside fp16's range, and values under its normal range lose only
//   absolute error below 1e-7. The next chunk's W, A, U, q and k slices and row factors arrive
//   as six bulk copies (cp.async.bulk, issued by one thread, completing on an mbarrier) into the
//   second of two stage buffers while the current chunk computes: the prepare wrote them in
//   shared memory's order. Issuing the same 74 KB as 16-byte cp.async copies from every thread
//   sat on the warpgroup's own path and made the scan 1.2-1.35x slower (kernel_stages.py).
//   One block barrier a chunk. Each warp writes its outputs through a small shared tile as
//   16-byte rows.
// - Few long sequences (at most 16 sequence-heads, as one prompt under tensor parallelism 4):
//   walking whole sequences would keep 32 blocks busy on 132 multiprocessors, each chunk's latency
//   in a row. The sequences are cut into segments of 16 chunks (1024 tokens) and the scan runs in
//   three launches. The state leaving a segment is affine in the state entering it,
//   S_out = X S_in + Y (the recurrence is linear in S). (1) gdr_chunk_scan<16, true> runs every
//   segment but the last at once: its value columns from zero, giving Y (the first from the initial
//   state, giving the second's entering state outright), and, in two more blocks of 64 columns, the
//   same recurrence without U on the identity's 128 columns, giving X. Only W, k, U^T and the row
//   factors are read (100 KB of shared memory, two blocks a multiprocessor).
//   (2) gdr_segment_combine chains the maps in fp32, one 128 x 128 x 8 product per segment.
//   (3) gdr_chunk_scan<16, false> runs every segment from its entering state, writing o. For one
//   8192-token prompt and 8 value heads that is 208 + 128 blocks of at most 16 chunks instead of 16
//   blocks of 128: 32 + 23 + 33 us on the H200 where the single scan took 217 us
//   (bench/results/h200_chunk_gdr_stages.json; the combine's chain of 7 products is the slowest
//   part per unit of work). X is carried through the same fp16 products as the state (|X| <= 1: the
//   decays and the delta rule's I - b k k^T are contractions), and the 16411-token hidden case
//   holds the result to the oracle.
// Chunks are numbered across the batch, sequence after sequence (cdiv(length, 64) each); the
// grid of the first kernel covers the bound cdiv(num_tokens, 64) + num_seqs and its extra
// blocks exit.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

constexpr int kChunk = 64;
constexpr int kDim = 128;         // head_k_dim = head_v_dim
constexpr int kLdB = kDim + 8;    // bf16 rows of q, k, v in the prepare's shared memory
constexpr int kLdG = kChunk + 8;  // fp32 64 x 64 matrices (and the bf16 parts aliasing them)
constexpr int kRowsStride = 192;  // row factors a (chunk, head): fq[64], fk[64], e^(c_L)

// The scan's shared memory, from the first 1024-byte boundary: two stage buffers, each W, q, k
// (fp16, 64 rows of 128 as two 64-column halves of 64 rows of 128 bytes, in the 128-byte
// swizzle wgmma reads), A (fp16, one such half), the block's U^T columns (fp32 [64][64]) and the
// row factors (132 floats), each buffer padded to 1024 bytes and filled by one bulk copy per
// piece; then each warp's output tile (bf16 [64][kLdO]). The segment transfer (Transfer) needs
// only W, k, U^T and the row factors, and no output tiles.
constexpr int kScanCols = 64;  // value columns of a scan block: one warpgroup's m64
constexpr int kHalfTile = kChunk * 128;
constexpr int kLdO = 24;
constexpr int kRowsCopyBytes = (2 * kChunk + 4) * 4;
constexpr int kUCopyBytes = kScanCols * kChunk * 4;
template <bool Transfer>
struct ScanLayout {
  static constexpr int kW = 0;
  static constexpr int kQ = 2 * kHalfTile;  // not held by the transfer
  static constexpr int kK = Transfer ? 2 * kHalfTile : 4 * kHalfTile;
  static constexpr int kA = 6 * kHalfTile;  // not held by the transfer
  static constexpr int kU = Transfer ? 4 * kHalfTile : 7 * kHalfTile;
  static constexpr int kRows = kU + kUCopyBytes;
  static constexpr int kCopyBytes = kRows + kRowsCopyBytes;  // every byte of a stage is copied
  static constexpr int kStageBytes = (kCopyBytes + 1023) / 1024 * 1024;
  static constexpr int kOut = 2 * kStageBytes;
  static constexpr int kSmemBytes = kOut + (Transfer ? 0 : 4 * kChunk * kLdO * 2) + 1024;
  static_assert(kRows % 16 == 0 && kU % 16 == 0, "16-byte copies");
};
static_assert(ScanLayout<false>::kSmemBytes == 162816, "the scan's @launch passes 162816 bytes");
static_assert(ScanLayout<true>::kSmemBytes == 101376, "the transfer's @launch passes 101376 bytes");
static_assert(kDim % kScanCols == 0, "the scan grid's x is kDim / kScanCols = 2");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ unsigned bf16_pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<unsigned>(__bfloat16_as_ushort(lo)) |
         (static_cast<unsigned>(__bfloat16_as_ushort(hi)) << 16);
}

// Two floats rounded to fp16, lo in the low half (the lower k or n index of a fragment pair).
__device__ __forceinline__ unsigned f16_pack(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}

__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4],
                                                  unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 b16 matrices from shared memory (PTX ldmatrix): lanes 8 m .. 8 m + 7 give the row
// addresses of matrix m, and matrix m lands in r[m]. Plain: lane 4 g + t receives row g,
// elements 2 t and 2 t + 1; transposed: elements (2 t, g) and (2 t + 1, g).
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// By one warp (every lane gets the answer), counting each sequence's chunks in units of `per`
// (cdiv(chunks, per) units a sequence, sequence after sequence): the sequence holding global unit
// `target` (target >= 0) or sequence `want_seq` (target < 0), in *seq (-1 if none), and the units
// of the sequences before it, in *first.
__device__ void locate_units(const int* cu_seqlens, int num_seqs, int per, int target, int want_seq,
                             int* seq, int* first) {
  const int lane = threadIdx.x & 31;
  int base = 0;
  int found_seq = -1, found_first = 0;
  for (int n0 = 0; n0 < num_seqs; n0 += 32) {
    const int n = n0 + lane;
    int count = 0;
    if (n < num_seqs) {
      const int chunks = (cu_seqlens[n + 1] - cu_seqlens[n] + kChunk - 1) / kChunk;
      count = (chunks + per - 1) / per;
    }
    int inclusive = count;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += y;
    }
    const int exclusive = base + inclusive - count;
    const bool hit =
        n < num_seqs &&
        (target >= 0 ? (target >= exclusive && target < exclusive + count) : n == want_seq);
    const unsigned hits = __ballot_sync(0xffffffffu, hit);
    if (hits != 0u) {
      const int src = __ffs(hits) - 1;
      found_seq = __shfl_sync(0xffffffffu, n, src);
      found_first = __shfl_sync(0xffffffffu, exclusive, src);
    }
    base += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  *seq = found_seq;
  *first = found_first;
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// One bulk copy of `bytes` (a multiple of 16, both ends 16-byte aligned) global -> shared,
// completing its bytes on the mbarrier at `bar`.
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, int bytes, unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Waits for the mbarrier at `bar` to complete the phase of the given parity.
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// 16-byte asynchronous copy that fills the destination with zeros when `valid` is false (no
// bytes are read then).
__device__ __forceinline__ void cp_async16_zfill(void* smem_dst, const void* gmem_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Where element (row, col) of a 64-row fp16 tile of 64 or 128 columns goes in the workspace: the
// order the scan's wgmma reads it from shared memory (64-column halves of 64 rows of 128 bytes,
// 16-byte chunk c of row r at chunk c ^ r % 8), so one bulk copy moves a tile as it is.
__device__ __forceinline__ int swizzled(int row, int col) {
  return (col >> 6) * (kChunk * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

// Two fp32 values split into bf16 hi and lo parts (hi + lo carries 16 mantissa bits), each pair
// packed with x0 in the low half.
__device__ __forceinline__ void split_pair(float x0, float x1, unsigned& hi, unsigned& lo) {
  const __nv_bfloat16 h0 = __float2bfloat16(x0), h1 = __float2bfloat16(x1);
  hi = bf16_pack(h0, h1);
  lo = bf16_pack(__float2bfloat16(x0 - __bfloat162float(h0)),
                 __float2bfloat16(x1 - __bfloat162float(h1)));
}

}  // namespace

// The prepare's shared memory (bytes): raw k rows (bf16 [64][kLdB]); raw q rows, then raw v rows
// (same buffer: q is done with before v lands); M (fp32 [64][kLdG]; its upper blocks hold the
// block products X of T's levels); T (fp32 [64][kLdG]); the row vectors. M and T together then
// stage U^T (fp32 [128][kLdUS]) for coalesced stores.
constexpr int kLdUS = kChunk + 4;
constexpr int kPrepK = 0;
constexpr int kPrepQV = kPrepK + kChunk * kLdB * 2;
constexpr int kPrepM = kPrepQV + kChunk * kLdB * 2;
constexpr int kPrepT = kPrepM + kChunk * kLdG * 4;
constexpr int kPrepVec = kPrepT + kChunk * kLdG * 4;
constexpr int kPrepSmemBytes = kPrepVec + 5 * kChunk * 4;
static_assert(kPrepSmemBytes == 72960, "the prepare's @launch passes 72960 bytes");
static_assert(kDim * kLdUS * 4 <= 2 * kChunk * kLdG * 4, "U^T's staging fits in M and T");

__global__ void __launch_bounds__(256, 3)
    gdr_chunk_prepare(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                      const __nv_bfloat16* __restrict__ v, const float* __restrict__ g,
                      const __nv_bfloat16* __restrict__ beta, const int* __restrict__ cu_seqlens,
                      __half* __restrict__ ws_w, float* __restrict__ ws_u,
                      __half* __restrict__ ws_a, __half* __restrict__ ws_qk,
                      float* __restrict__ ws_rows, float scale, int num_seqs, int num_k_heads,
                      int num_v_heads) {
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* kb = reinterpret_cast<__nv_bfloat16*>(smem + kPrepK);
  __nv_bfloat16* qv = reinterpret_cast<__nv_bfloat16*>(smem + kPrepQV);
  float* mm = reinterpret_cast<float*>(smem + kPrepM);
  float* tm = reinterpret_cast<float*>(smem + kPrepT);
  float* gc = reinterpret_cast<float*>(smem + kPrepVec);  // cumulative gates
  float* bt = gc + kChunk;                                // beta (0 past the chunk)
  float* rk = bt + kChunk;                                // 1 / |k| (0 past the chunk)
  float* rq = rk + kChunk;                                // 1 / |q|
  float* fw = rq + kChunk;                                // beta e^c / |k|: W's column factors
  float* ut = mm;                                         // U^T staging, once M and T are done
  __shared__ int s_chunk[2];

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int lg = lane >> 2, lt = lane & 3;
  const int chunk = blockIdx.x;
  const int hv = blockIdx.y;
  const int group = num_v_heads / num_k_heads;
  const int h = hv / group;

  if (warp == 0) {
    int seq, first;
    locate_units(cu_seqlens, num_seqs, 1, chunk, -1, &seq, &first);
    if (lane == 0) {
      if (seq < 0) {
        s_chunk[0] = -1;
        s_chunk[1] = 0;
      } else {
        const int start = cu_seqlens[seq] + (chunk - first) * kChunk;
        s_chunk[0] = start;
        s_chunk[1] = min(kChunk, cu_seqlens[seq + 1] - start);
      }
    }
  }
  __syncthreads();
  const int t0 = s_chunk[0];
  const int len = s_chunk[1];
  if (t0 < 0) return;

  // Raw k and q rows in one batch of copies; rows past the chunk are zero.
  for (int idx = tid; idx < kChunk * (kDim / 8); idx += blockDim.x) {
    const int r = idx >> 4;
    const int c8 = (idx & 15) * 8;
    const size_t tok = static_cast<size_t>(t0 + min(r, len - 1));
    cp_async16_zfill(kb + r * kLdB + c8, k + (tok * num_k_heads + h) * kDim + c8, r < len);
    cp_async16_zfill(qv + r * kLdB + c8, q + (tok * num_k_heads + h) * kDim + c8, r < len);
  }
  if (warp == 7) {
    // Cumulative gates: an inclusive scan over the two halves of the chunk (g = 0 past it, so
    // c stays at the last token's value); betas, 0 past the chunk.
    float g0 = 0.f, g1 = 0.f, b0 = 0.f, b1 = 0.f;
    if (lane < len) {
      g0 = g[static_cast<size_t>(t0 + lane) * num_v_heads + hv];
      b0 = __bfloat162float(beta[static_cast<size_t>(t0 + lane) * num_v_heads + hv]);
    }
    if (lane + 32 < len) {
      g1 = g[static_cast<size_t>(t0 + lane + 32) * num_v_heads + hv];
      b1 = __bfloat162float(beta[static_cast<size_t>(t0 + lane + 32) * num_v_heads + hv]);
    }
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const float y0 = __shfl_up_sync(0xffffffffu, g0, offset);
      const float y1 = __shfl_up_sync(0xffffffffu, g1, offset);
      if (lane >= offset) {
        g0 += y0;
        g1 += y1;
      }
    }
    const float half = __shfl_sync(0xffffffffu, g0, 31);
    gc[lane] = g0;
    gc[lane + 32] = g1 + half;
    bt[lane] = b0;
    bt[lane + 32] = b1;
  }
  cp_async_wait_all();
  __syncthreads();

  // Norms (FLA: x / sqrt(sum x^2 + 1e-6)), a warp per 8 rows, 4 elements a lane; W's column
  // factors and the row factors of the scan.
  for (int rr = 0; rr < kChunk / 8; ++rr) {
    const int r = warp * (kChunk / 8) + rr;
    const uint2 kr = *reinterpret_cast<const uint2*>(kb + r * kLdB + 4 * lane);
    const uint2 qr = *reinterpret_cast<const uint2*>(qv + r * kLdB + 4 * lane);
    const float2 k0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&kr.x));
    const float2 k1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&kr.y));
    const float2 q0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qr.x));
    const float2 q1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qr.y));
    float sk = k0.x * k0.x + k0.y * k0.y + k1.x * k1.x + k1.y * k1.y;
    float sq = q0.x * q0.x + q0.y * q0.y + q1.x * q1.x + q1.y * q1.y;
    sk = warp_sum(sk);
    sq = warp_sum(sq);
    if (lane == 0) {
      const bool in = r < len;
      const float inv_k = in ? 1.f / sqrtf(sk + 1e-6f) : 0.f;
      rk[r] = inv_k;
      rq[r] = in ? 1.f / sqrtf(sq + 1e-6f) : 0.f;
      fw[r] = bt[r] * expf(gc[r]) * inv_k;
    }
  }
  const size_t cg = static_cast<size_t>(chunk) * num_v_heads + hv;
  if (tid < kChunk) {
    float* rows_out = ws_rows + cg * kRowsStride;
    const float c_last = gc[kChunk - 1];
    const bool in = tid < len;
    rows_out[tid] = in ? expf(gc[tid]) * scale : 0.f;
    rows_out[kChunk + tid] = in ? expf(c_last - gc[tid]) : 0.f;
    if (tid == 0) rows_out[2 * kChunk] = expf(c_last);
  }
  __syncthreads();

  // The lower 16 x 16 tiles of K K^T and Q K^T of the raw rows (10 each, 20 over 8 warps) on
  // bf16 tensor cores, turned into M (strictly lower, fp32, to shared memory) and A (lower with
  // the diagonal, fp16, to the workspace) in registers. The upper triangle is never
  // exponentiated (e^(c_i - c_j) overflows there under strong decay); A's tiles above the
  // diagonal are written as zeros (the scan's products take A's rows whole).
  const int mi = lane >> 3, r8 = lane & 7;
  const int a_row = lane & 15, a_col = 8 * (lane >> 4);        // A operand, row-major
  const int n_row = 8 * (mi >> 1) + r8, n_col = 8 * (mi & 1);  // B stored n-major
  const int k_row = 8 * (mi & 1) + r8, k_col = 8 * (mi >> 1);  // B stored k-major
  __half* a_out = ws_a + cg * (kChunk * kChunk);
  for (int job = warp; job < 20; job += 8) {
    const bool is_q = job >= 10;
    const int tri = is_q ? job - 10 : job;  // tiles (rt, ct), ct <= rt
    const int rt = tri >= 6 ? 3 : tri >= 3 ? 2 : tri >= 1 ? 1 : 0;
    const int ct = tri - rt * (rt + 1) / 2;
    const __nv_bfloat16* a_src = is_q ? qv : kb;
    float acc[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kDim; kk += 16) {
      unsigned fa[4], fb[4];
      ldsm_x4(fa, a_src + (16 * rt + a_row) * kLdB + kk + a_col);
      ldsm_x4(fb, kb + (16 * ct + n_row) * kLdB + kk + n_col);
      mma_m16n8k16_bf16(acc[0], fa, fb[0], fb[1]);
      mma_m16n8k16_bf16(acc[1], fa, fb[2], fb[3]);
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 16 * rt + lg + 8 * half;
        const int j = 16 * ct + 8 * hh + 2 * lt;
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int jj = j + e;
          const float raw = acc[hh][2 * half + e];
          x[e] = 0.f;
          if (is_q ? jj <= i : jj < i) {
            const float d = expf(gc[i] - gc[jj]);
            x[e] = is_q ? scale * rq[i] * rk[jj] * raw * d : bt[i] * rk[i] * rk[jj] * raw * d;
          }
        }
        if (is_q) {
          *reinterpret_cast<__half2*>(a_out + swizzled(i, j)) = __floats2half2_rn(x[0], x[1]);
        } else {
          *reinterpret_cast<float2*>(mm + i * kLdG + j) = make_float2(x[0], x[1]);
        }
      }
    }
  }
  for (int idx = tid; idx < kChunk * kChunk / 8; idx += blockDim.x) {
    const int i = idx >> 3;
    const int j8 = (idx & 7) * 8;
    if ((j8 >> 4) > (i >> 4)) {
      *reinterpret_cast<uint4*>(a_out + swizzled(i, j8)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  __syncthreads();

  // q is done with: v's rows land in its buffer while T is computed.
  for (int idx = tid; idx < kChunk * (kDim / 8); idx += blockDim.x) {
    const int r = idx >> 4;
    const int c8 = (idx & 15) * 8;
    const size_t tok = static_cast<size_t>(t0 + min(r, len - 1));
    cp_async16_zfill(qv + r * kLdB + c8, v + (tok * num_v_heads + hv) * kDim + c8, r < len);
  }

  // T = (I + M)^-1 by 16 x 16 blocks (M strictly lower, so T is lower with a unit diagonal).
  // The diagonal blocks by forward substitution, one thread a column held in registers:
  // T[i][c] = delta_ic - sum_(j < i) M[i][j] T[j][c]. Meanwhile the other warps write the
  // normalised q and k rows, once per key head (by its first value head's block); q comes from
  // the workspace copy's source rows, since v now fills q's buffer.
  if (tid < kChunk) {
    const int b0 = (tid >> 4) * 16;
    const int cc = tid & 15;
    float col[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < i; ++j) s = fmaf(mm[(b0 + i) * kLdG + b0 + j], col[j], s);
      col[i] = i == cc ? 1.f : (i < cc ? 0.f : -s);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) tm[(b0 + i) * kLdG + b0 + cc] = col[i];
  } else if (hv % group == 0) {
    __half2* qk_out = reinterpret_cast<__half2*>(
        ws_qk + (static_cast<size_t>(chunk) * num_k_heads + h) * (2 * kChunk * kDim));
    for (int idx = tid - kChunk; idx < kChunk * kDim / 8; idx += blockDim.x - kChunk) {
      const int r = idx >> 4;
      const int c8 = (idx & 15) * 8;
      uint4 kr = *reinterpret_cast<const uint4*>(kb + r * kLdB + c8);
      uint4 qr = make_uint4(0u, 0u, 0u, 0u);
      if (r < len) {
        qr = *reinterpret_cast<const uint4*>(
            q + (static_cast<size_t>(t0 + r) * num_k_heads + h) * kDim + c8);
      }
      const __nv_bfloat162* kp = reinterpret_cast<const __nv_bfloat162*>(&kr);
      const __nv_bfloat162* qp = reinterpret_cast<const __nv_bfloat162*>(&qr);
      uint4 ko, qo;
      __half2* kh = reinterpret_cast<__half2*>(&ko);
      __half2* qh = reinterpret_cast<__half2*>(&qo);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 kf = __bfloat1622float2(kp[e]);
        const float2 qf = __bfloat1622float2(qp[e]);
        kh[e] = __floats2half2_rn(kf.x * rk[r], kf.y * rk[r]);
        qh[e] = __floats2half2_rn(qf.x * rq[r], qf.y * rq[r]);
      }
      *reinterpret_cast<uint4*>(qk_out + swizzled(r, c8) / 2) = qo;
      *reinterpret_cast<uint4*>(qk_out + (kChunk * kDim + swizzled(r, c8)) / 2) = ko;
    }
  }
  __syncthreads();
  // Block row r from the rows above it: (I + M)_rr T_rb + sum_(b <= k < r) M_rk T_kb = 0, so
  // T_rb = -T_rr X_rb with X_rb = sum_(b <= k < r) M_rk T_kb, X_rb kept in M's (unused) block
  // (b, r) above the diagonal.
#pragma unroll
  for (int r = 1; r < 4; ++r) {
    for (int e = tid; e < r * 256; e += blockDim.x) {
      const int b = e >> 8;
      const int i = (e >> 4) & 15;
      const int c = e & 15;
      const float* m_row = mm + (16 * r + i) * kLdG;
      float s = 0.f;
      for (int kb = b; kb < r; ++kb) {
#pragma unroll
        for (int kx = 16 * kb; kx < 16 * kb + 16; ++kx) {
          s = fmaf(m_row[kx], tm[kx * kLdG + 16 * b + c], s);
        }
      }
      mm[(16 * b + i) * kLdG + 16 * r + c] = s;
    }
    __syncthreads();
    for (int e = tid; e < r * 256; e += blockDim.x) {
      const int b = e >> 8;
      const int i = (e >> 4) & 15;
      const int c = e & 15;
      const float* t_row = tm + (16 * r + i) * kLdG + 16 * r;  // zero past the diagonal
      float s = 0.f;
#pragma unroll
      for (int kx = 0; kx < 16; ++kx) s = fmaf(t_row[kx], mm[(16 * b + kx) * kLdG + 16 * r + c], s);
      tm[(16 * r + i) * kLdG + 16 * b + c] = -s;
    }
    if (r == 3) cp_async_wait_all();
    __syncthreads();
  }

  // W = T diag(b e^c / |k|) K_raw and U = T diag(b) V_raw on bf16 tensor cores, T's scaled
  // entries split into bf16 hi + lo parts in registers against the exact raw rows. Warp w: W's
  // row strip w % 4 and U's strip 3 - w % 4 (T is lower triangular, so strip r takes r + 1
  // k steps: 5 for every warp), columns 64 (w / 4) onwards.
  const int col0 = 64 * (warp >> 2);
  // acc += T' src over k steps 0..r of row strip r, T'[i][j] = T[i][j] coef[j].
  auto strip_product = [&](float(&acc)[8][4], int r, const float* coef, const __nv_bfloat16* src) {
    for (int s = 0; s <= r; ++s) {
      unsigned ahi[4], alo[4];
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int i = 16 * r + lg + 8 * (q4 & 1);
        const int j = 16 * s + 2 * lt + 8 * (q4 >> 1);
        const float2 tv = *reinterpret_cast<const float2*>(tm + i * kLdG + j);
        split_pair(tv.x * coef[j], tv.y * coef[j + 1], ahi[q4], alo[q4]);
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        unsigned fb[4];
        ldsm_x4_trans(fb, src + (16 * s + k_row) * kLdB + col0 + 16 * np + k_col);
        mma_m16n8k16_bf16(acc[2 * np], alo, fb[0], fb[1]);
        mma_m16n8k16_bf16(acc[2 * np + 1], alo, fb[2], fb[3]);
        mma_m16n8k16_bf16(acc[2 * np], ahi, fb[0], fb[1]);
        mma_m16n8k16_bf16(acc[2 * np + 1], ahi, fb[2], fb[3]);
      }
    }
  };
  {
    // W, row-major in fp16 straight from the accumulators.
    const int rw = warp & 3;
    float acc[8][4] = {};
    strip_product(acc, rw, fw, kb);
    __half* w_out = ws_w + cg * (kChunk * kDim);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int col = col0 + 8 * n + 2 * lt;
      const int row = 16 * rw + lg;
      *reinterpret_cast<__half2*>(w_out + swizzled(row, col)) =
          __floats2half2_rn(acc[n][0], acc[n][1]);
      *reinterpret_cast<__half2*>(w_out + swizzled(row + 8, col)) =
          __floats2half2_rn(acc[n][2], acc[n][3]);
    }
  }
  {
    // U^T through shared memory (M and T are done with once every warp is) as 16-byte rows of
    // fp32.
    const int ru = 3 - (warp & 3);
    float acc[8][4] = {};
    strip_product(acc, ru, bt, qv);
    __syncthreads();
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int col = col0 + 8 * n + 2 * lt;
      const int row = 16 * ru + lg;
      ut[col * kLdUS + row] = acc[n][0];
      ut[(col + 1) * kLdUS + row] = acc[n][1];
      ut[col * kLdUS + row + 8] = acc[n][2];
      ut[(col + 1) * kLdUS + row + 8] = acc[n][3];
    }
  }
  __syncthreads();
  float* u_out = ws_u + cg * (kChunk * kDim);
  for (int idx = tid; idx < kDim * (kChunk / 4); idx += blockDim.x) {
    const int c = idx >> 4;
    const int r4 = (idx & 15) * 4;
    *reinterpret_cast<float4*>(u_out + c * kChunk + r4) =
        *reinterpret_cast<const float4*>(ut + c * kLdUS + r4);
  }
}

// A wgmma shared-memory descriptor with the 128-byte swizzle: start address, leading and stride
// byte offsets (each stored >> 4), swizzle mode 1 in bits 62-63, base offset 0 (every pattern
// starts 1024-byte aligned).
__device__ __forceinline__ unsigned long long descriptor(unsigned address, unsigned leading_bytes,
                                                         unsigned stride_bytes) {
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>(leading_bytes >> 4) << 16) |
         (static_cast<unsigned long long>(stride_bytes >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit_and_wait() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// d (64 x 64 per warpgroup, fp32) += ScaleA a (64 x 16, registers) b (16 x 64, shared,
// K-major: the 64 n rows of 16 k each), fp16 inputs.
template <int ScaleA>
__device__ __forceinline__ void wgmma_n64(float (&d)[32], const unsigned (&a)[4],
                                          unsigned long long b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, "
      "%10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
      "%28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, %38, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1), "n"(ScaleA));
}

// d (64 x 128 per warpgroup, fp32) += a (64 x 16, registers) b (16 x 128, shared, MN-major:
// 16 k rows with the n columns contiguous), fp16 inputs.
__device__ __forceinline__ void wgmma_n128_mn(float (&d)[64], const unsigned (&a)[4],
                                              unsigned long long b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

// The scan's accumulators (m64nN, per warp 16 rows: warp w holds value columns v0 + 16 w + m,
// m < 16; lane = 4 g + t): element 4 j + e is row g + 8 (e / 2), column 8 j + 2 t + e % 2. Its
// columns 16 s .. 16 s + 15, packed to fp16 pairs, are exactly the warp's A fragment of k step
// s: {x[8 s + 0, 1]}, {x[8 s + 2, 3]}, {x[8 s + 4, 5]}, {x[8 s + 6, 7]}.
__device__ __forceinline__ void a_fragment(unsigned (&a)[4], const float* x) {
  a[0] = f16_pack(x[0], x[1]);
  a[1] = f16_pack(x[2], x[3]);
  a[2] = f16_pack(x[4], x[5]);
  a[3] = f16_pack(x[6], x[7]);
}

// The scan, in three forms (the @launch lines pick them):
// - SegChunks 0: one block per (64 value columns, value head, sequence), walking the sequence
//   from its initial state, writing o and the final state.
// - SegChunks > 0, !Transfer: the same over segments of SegChunks chunks (grid z counts segments
//   over the batch, sequence after sequence): a segment after a sequence's first starts from the
//   state gdr_segment_combine left in its slot of ws_seg; the last writes the final state.
// - Transfer: each segment but a sequence's last, as the affine map it applies to the state
//   entering it, S_out = X S_in + Y. Blocks x = 0, 1 run its value columns from the initial
//   state (the first segment: its Y is then the second segment's entering state) or from zero,
//   giving Y (into ws_seg); blocks x = 2, 3 run the recurrence without U (u = -W S) on the
//   columns of the identity, giving X (into ws_trans; not needed for a first segment). No
//   outputs.
// Shared memory: ScanLayout<Transfer>.
template <int SegChunks, bool Transfer>
__global__ void __launch_bounds__(128, Transfer ? 2 : 1)
    gdr_chunk_scan(const float* __restrict__ initial_state, const int* __restrict__ cu_seqlens,
                   const __half* __restrict__ ws_w, const float* __restrict__ ws_u,
                   const __half* __restrict__ ws_a, const __half* __restrict__ ws_qk,
                   const float* __restrict__ ws_rows, float* __restrict__ ws_seg,
                   float* __restrict__ ws_trans, __nv_bfloat16* __restrict__ o,
                   float* __restrict__ final_state, int num_seqs, int num_k_heads,
                   int num_v_heads) {
  using L = ScanLayout<Transfer>;
  static_assert(!Transfer || SegChunks > 0, "the transfer runs over segments");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int s_where[3];                             // sequence, its first chunk, segment
  __shared__ __align__(8) unsigned long long s_bars[2];  // chunk copies landed, per buffer
  // Swizzle patterns repeat every 1024 bytes: the tiles start on such a boundary.
  const unsigned raw_address = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + (((raw_address + 1023u) & ~1023u) - raw_address);
  const unsigned smem_address = static_cast<unsigned>(__cvta_generic_to_shared(smem));

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const bool identity = Transfer && blockIdx.x >= 2;  // the columns of X
  const int v0 = (blockIdx.x & 1) * kScanCols;
  const int hv = blockIdx.y;
  const int h = hv / (num_v_heads / num_k_heads);
  const int vw = v0 + 16 * warp;  // the warp's first value (or identity) column

  if (warp == 0) {
    int seq = blockIdx.z, segment = 0, first;
    if (SegChunks > 0) {
      int first_segment;
      locate_units(cu_seqlens, num_seqs, SegChunks, blockIdx.z, -1, &seq, &first_segment);
      segment = blockIdx.z - first_segment;
    }
    locate_units(cu_seqlens, num_seqs, 1, -1, seq, &seq, &first);
    if (lane == 0) {
      s_where[0] = seq;
      s_where[1] = first;
      s_where[2] = segment;
    }
  }
  __syncthreads();
  const int n = s_where[0];
  if (n < 0) return;  // past the batch's segments
  const int first = s_where[1];
  const int segment = s_where[2];
  const int bos = cu_seqlens[n];
  const int eos = cu_seqlens[n + 1];
  const int seq_chunks = (eos - bos + kChunk - 1) / kChunk;
  const int c_begin = segment * SegChunks;
  const int c_end = SegChunks > 0 ? min(c_begin + SegChunks, seq_chunks) : seq_chunks;
  const bool last_segment = c_end == seq_chunks;
  if (Transfer && (last_segment || (identity && segment == 0))) return;  // map not needed

  // The state slice, transposed: st[4 j + e] holds S^T[m][8 j + 2 t + e % 2] = S[key][vw + m]
  // for m = g + 8 (e / 2) (16 tiles of 8 keys). States in memory are [key][column] per head.
  const size_t head_state = static_cast<size_t>(hv) * kDim * kDim + vw + g;
  const size_t seq_state = static_cast<size_t>(n) * num_v_heads * kDim * kDim + head_state;
  const size_t slot_state =
      static_cast<size_t>(blockIdx.z) * num_v_heads * kDim * kDim + head_state;
  float st[64];
  const float* start = nullptr;  // zero (or the identity) where none
  if (segment == 0) {
    if (!identity) start = initial_state + seq_state;
  } else if (!Transfer) {
    start = ws_seg + slot_state;
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = 8 * j + 2 * t + (e & 1);
      const int m = g + 8 * (e >> 1);
      if (start != nullptr)
        st[4 * j + e] = start[static_cast<size_t>(key) * kDim + 8 * (e >> 1)];
      else
        st[4 * j + e] = identity && key == vw + m ? 1.f : 0.f;
    }
  }

  // By one thread, the chunk's pieces as bulk copies into stage buffer `buf`, completing on its
  // mbarrier: W, q, k (64 rows of 128) and A (64 rows of 64), each already in the 128-byte
  // swizzle (swizzled()), the block's 64 columns of U^T, and fq, fk, e^(c_L) (the first 132 of
  // the 192 row factors). The transfer takes no q or A, and no U^T for the identity's columns.
  auto issue_chunk_copies = [&](int c, int buf) {
    const unsigned stage = smem_address + buf * L::kStageBytes;
    const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&s_bars[buf]));
    const size_t cv = static_cast<size_t>(first + c) * num_v_heads + hv;
    const size_t ck = static_cast<size_t>(first + c) * num_k_heads + h;
    const __half* q_in = ws_qk + ck * (2 * kChunk * kDim);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(L::kCopyBytes - (identity ? kUCopyBytes : 0))
                 : "memory");
    bulk_copy(stage + L::kW, ws_w + cv * (kChunk * kDim), 2 * kChunk * kDim, bar);
    bulk_copy(stage + L::kK, q_in + kChunk * kDim, 2 * kChunk * kDim, bar);
    if (!Transfer) {
      bulk_copy(stage + L::kQ, q_in, 2 * kChunk * kDim, bar);
      bulk_copy(stage + L::kA, ws_a + cv * (kChunk * kChunk), 2 * kChunk * kChunk, bar);
    }
    if (!identity) {
      bulk_copy(stage + L::kU, ws_u + cv * (kChunk * kDim) + static_cast<size_t>(v0) * kChunk,
                kUCopyBytes, bar);
    }
    bulk_copy(stage + L::kRows, ws_rows + cv * kRowsStride, kRowsCopyBytes, bar);
  };
  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&s_bars[b]));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (tid == 0) issue_chunk_copies(c_begin, 0);

  __nv_bfloat16* o_tile = reinterpret_cast<__nv_bfloat16*>(smem + L::kOut) + warp * (kChunk * kLdO);

  for (int c = c_begin; c < c_end; ++c) {
    // Chunk c's copies have landed and chunk c - 1's wgmmas are done with the other buffer: fill
    // it with chunk c + 1's while chunk c computes.
    const int step = c - c_begin;
    __syncthreads();
    if (tid == 0 && c + 1 < c_end) issue_chunk_copies(c + 1, (step + 1) & 1);
    mbarrier_wait(static_cast<unsigned>(__cvta_generic_to_shared(&s_bars[step & 1])),
                  (step >> 1) & 1);
    const unsigned char* stage = smem + (step & 1) * L::kStageBytes;
    const unsigned stage_address = smem_address + (step & 1) * L::kStageBytes;
    const float* ut_s = reinterpret_cast<const float*>(stage + L::kU) + (16 * warp + g) * kChunk;
    const float* rows = reinterpret_cast<const float*>(stage + L::kRows);

    // u^T = U^T - S^T W^T and P^T = S^T Q^T (64 x 64 each, 8 k steps over the keys): the state's
    // fragments as the A operand, W and q rows (K-major) as B; k step s reads keys 16 s ..
    // 16 s + 15, in half s / 4 at byte 32 (s % 4) of each 128-byte row.
    float un[32], p[32];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (identity) {
        un[4 * j] = un[4 * j + 1] = un[4 * j + 2] = un[4 * j + 3] = 0.f;
      } else {
        const float2 top = *reinterpret_cast<const float2*>(ut_s + 8 * j + 2 * t);
        const float2 bottom = *reinterpret_cast<const float2*>(ut_s + 8 * kChunk + 8 * j + 2 * t);
        un[4 * j] = top.x;
        un[4 * j + 1] = top.y;
        un[4 * j + 2] = bottom.x;
        un[4 * j + 3] = bottom.y;
      }
      p[4 * j] = p[4 * j + 1] = p[4 * j + 2] = p[4 * j + 3] = 0.f;
    }
    unsigned sa[8][4];
#pragma unroll
    for (int s = 0; s < 8; ++s) a_fragment(sa[s], st + 8 * s);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const unsigned column = (s >> 2) * kHalfTile + (s & 3) * 32;
      wgmma_n64<-1>(un, sa[s], descriptor(stage_address + L::kW + column, 16, 1024));
      if (!Transfer) wgmma_n64<1>(p, sa[s], descriptor(stage_address + L::kQ + column, 16, 1024));
    }
    wgmma_commit_and_wait();

    // u^T as the A operand, scaled by fk = e^(c_L - c_j) for the state and plain for A u.
    unsigned uf[4][4], ua[4][4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const float2 f0 = *reinterpret_cast<const float2*>(rows + kChunk + 16 * s + 2 * t);
      const float2 f1 = *reinterpret_cast<const float2*>(rows + kChunk + 16 * s + 8 + 2 * t);
      const float* x = un + 8 * s;
      const float scaled[8] = {x[0] * f0.x, x[1] * f0.y, x[2] * f0.x, x[3] * f0.y,
                               x[4] * f1.x, x[5] * f1.y, x[6] * f1.x, x[7] * f1.y};
      a_fragment(uf[s], scaled);
      a_fragment(ua[s], x);
    }

    // S^T = e^(c_L) S^T + (fk u)^T K (k rows MN-major: 16 tokens a k step, two 64-key halves
    // kHalfTile apart) and o^T = (fq P)^T + u^T A^T (A's rows K-major; its upper tiles are zero).
    const float e_last = rows[2 * kChunk];
#pragma unroll
    for (int i = 0; i < 64; ++i) st[i] *= e_last;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 f = *reinterpret_cast<const float2*>(rows + 8 * j + 2 * t);
      p[4 * j] *= f.x;
      p[4 * j + 1] *= f.y;
      p[4 * j + 2] *= f.x;
      p[4 * j + 3] *= f.y;
    }
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      wgmma_n128_mn(st, uf[s], descriptor(stage_address + L::kK + s * 2048, kHalfTile, 1024));
      if (!Transfer) wgmma_n64<1>(p, ua[s], descriptor(stage_address + L::kA + s * 32, 16, 1024));
    }
    wgmma_commit_and_wait();
    if constexpr (!Transfer) {
      // The warp's 64 x 16 output tile, through shared memory as 16-byte rows of 8 columns.
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        __nv_bfloat16* row = o_tile + (8 * j + 2 * t) * kLdO + g;
        row[0] = __float2bfloat16(p[4 * j]);
        row[kLdO] = __float2bfloat16(p[4 * j + 1]);
        row[8] = __float2bfloat16(p[4 * j + 2]);
        row[kLdO + 8] = __float2bfloat16(p[4 * j + 3]);
      }
      __syncwarp();
      const int t0 = bos + c * kChunk;
      const int len = min(kChunk, eos - t0);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int item = lane + 32 * i;
        const int token = item >> 1;
        const int part = item & 1;
        if (token < len) {
          *reinterpret_cast<uint4*>(
              o + (static_cast<size_t>(t0 + token) * num_v_heads + hv) * kDim + vw + 8 * part) =
              *reinterpret_cast<const uint4*>(o_tile + token * kLdO + 8 * part);
        }
      }
      __syncwarp();
    }
  }

  float* out;
  if (Transfer)
    out = (identity ? ws_trans : ws_seg) + slot_state;
  else if (last_segment)
    out = final_state + seq_state;
  else
    return;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    float* row = out + static_cast<size_t>(8 * j + 2 * t) * kDim;
    row[0] = st[4 * j];
    row[kDim] = st[4 * j + 1];
    row[8] = st[4 * j + 2];
    row[kDim + 8] = st[4 * j + 3];
  }
}

// The states entering a sequence's segments after its first (segment i = 1 .. count - 1 of the
// sequence, in slot first + i of ws_seg), from the maps the transfer left: entering(1) = Y(0)
// (run from the initial state), entering(i + 1) = X(i) entering(i) + Y(i), in fp32. Y(i) sits
// in the slot that entering(i) replaces: each thread reads its four values before writing
// them. One block per (8 state columns, value head, sequence); thread (row tid / 2, columns
// 4 (tid % 2) .. + 3). X(i + 1) streams into shared memory (cp.async, two buffers of
// [kDim][kLdX] fp32) while X(i) is applied: fetched by each thread from L2 as the chain went,
// the loads' latency took 5 us a segment.
constexpr int kLdX = kDim + 4;
constexpr int kCombineSmemBytes = 2 * kDim * kLdX * 4;
static_assert(kCombineSmemBytes == 135168, "the combine's @launch passes 135168 bytes");

template <int SegChunks>
__global__ void __launch_bounds__(256, 1)
    gdr_segment_combine(const int* __restrict__ cu_seqlens, float* __restrict__ ws_seg,
                        const float* __restrict__ ws_trans, int num_seqs, int num_v_heads) {
  extern __shared__ __align__(16) float x_s[];
  __shared__ __align__(16) float s_state[kDim][8];
  __shared__ int s_first;
  const int tid = threadIdx.x;
  const int n = blockIdx.z;
  const int hv = blockIdx.y;
  const int row = tid >> 1;
  const int half = (tid & 1) * 4;
  if (tid < 32) {
    int seq, first;
    locate_units(cu_seqlens, num_seqs, SegChunks, -1, n, &seq, &first);
    if (tid == 0) s_first = first;
  }
  __syncthreads();
  const int chunks = (cu_seqlens[n + 1] - cu_seqlens[n] + kChunk - 1) / kChunk;
  const int count = (chunks + SegChunks - 1) / SegChunks;
  const size_t slot_stride = static_cast<size_t>(num_v_heads) * kDim * kDim;
  const size_t head = static_cast<size_t>(hv) * kDim * kDim;
  // X(i) into buffer b, 16 bytes a copy, as one cp.async group.
  auto fetch = [&](int i, int b) {
    const float* src = ws_trans + (static_cast<size_t>(s_first) + i) * slot_stride + head;
    float* dst = x_s + b * (kDim * kLdX);
#pragma unroll
    for (int j = 0; j < kDim * kDim / 4 / 256; ++j) {
      const int item = tid + 256 * j;
      const int r = item >> 5, c = (item & 31) * 4;
      cp_async16_zfill(dst + r * kLdX + c, src + r * kDim + c, true);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  if (count > 2) fetch(1, 0);

  float* slot = ws_seg + static_cast<size_t>(s_first) * slot_stride + head + row * kDim +
                blockIdx.x * 8 + half;
  float4 entering = *reinterpret_cast<const float4*>(slot);
  for (int i = 1; i < count; ++i) {
    slot += slot_stride;
    const bool more = i + 1 < count;
    float4 next = make_float4(0.f, 0.f, 0.f, 0.f);
    if (more) next = *reinterpret_cast<const float4*>(slot);  // Y(i)
    *reinterpret_cast<float4*>(slot) = entering;
    if (!more) break;
    const bool prefetch = i + 2 < count;  // X(i + 1) is needed
    if (prefetch) fetch(i + 1, i & 1);
    *reinterpret_cast<float4*>(&s_state[row][half]) = entering;
    if (prefetch)
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    const float* x_row = x_s + ((i - 1) & 1) * (kDim * kLdX) + row * kLdX;
#pragma unroll 8
    for (int k4 = 0; k4 < kDim / 4; ++k4) {
      const float4 x = *reinterpret_cast<const float4*>(x_row + 4 * k4);
      const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float4 s = *reinterpret_cast<const float4*>(&s_state[4 * k4 + e][half]);
        next.x = fmaf(xs[e], s.x, next.x);
        next.y = fmaf(xs[e], s.y, next.y);
        next.z = fmaf(xs[e], s.z, next.z);
        next.w = fmaf(xs[e], s.w, next.w);
      }
    }
    __syncthreads();
    entering = next;
  }
}
