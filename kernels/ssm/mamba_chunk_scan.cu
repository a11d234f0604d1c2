// Reference for ssm/mamba_chunk_scan: the output step of Mamba-2's chunked SSD scan (mamba_ssm's
// _chunk_scan_fwd, no z, no seq_idx; the last stage of mamba_chunk_scan_combined), headdim 64,
// dstate 128, chunks of up to 256 tokens.
//
// For batch b, chunk c, head h (group grp = h / (nheads / ngroups)), position t of the chunk
// (token l = c * chunk_size + t < seqlen) and head channel p:
//   out[b, l, h, p] = exp(dA[t]) * sum_n C[b, l, grp, n] * states[b, c, h, p, n]
//                   + sum_(s <= t) cb[b, c, grp, t, s] * exp(dA[t] - dA[s]) * dt_[s] * x_[s]
//                   + D[h] * x[b, l, h, p]
// with dA = dA_cumsum[b, h, c, :], dt_ = dt[b, h, c, :], x_[s] = x[b, c * chunk_size + s, h, p].
//
// @launch if (batch * nchunks * ngroups * cdiv(nheads / ngroups, 2) >= 1056)
//     mamba_chunk_scan_kernel<2><<<dim3(ngroups * cdiv(nheads / ngroups, 2), nchunks, batch),
//     256, 102400>>>(cb, x, dt, dA_cumsum, C, states, D, out, seqlen, chunk_size, nheads,
//     ngroups)
// @launch if (batch * nchunks * ngroups * cdiv(nheads / ngroups, 2) < 1056)
//     mamba_chunk_scan_kernel<1><<<dim3(nheads, nchunks, batch), 256, 51200>>>(cb, x, dt,
//     dA_cumsum, C, states, D, out, seqlen, chunk_size, nheads, ngroups)
//
// Design:
// - One block per (batch, chunk, two heads of one group): the two heads share the chunk's cb
//   tile (fp32, read from L2) and C rows, so each cb and C element is fetched once per head
//   pair, not once per head. The blocks of one chunk are adjacent in the grid (x fastest), so a
//   chunk's cb and C stay in L2 while its head pairs run. Grids of fewer than four waves of
//   head pairs (1056 blocks: two blocks on each of 132 SMs, four times) take one head a block
//   instead (twice the blocks, so the last wave idles less of the machine).
// - 8 warps; the chunk's 16 row blocks of 16 positions are paired (w, 15 - w), so every warp
//   does 17 causal 16 x 16 tiles (the triangle balanced). A warp keeps its row block's output
//   (16 x 64 fp32 per head, 64 registers for two heads) in mma.sync m16n8k16 accumulators.
// - State term: C rows are A operands loaded straight from global memory, 16 bytes a lane. The
//   contraction over n may visit n in any order as long as both operands agree, so lane (g, t)
//   takes n = 32 j + 8 t .. 8 t + 7 of its rows as four k pairs of two k16 steps, and reads the
//   same n of states (bf16, in shared memory) as its B pairs: one 16-byte load per operand and
//   step pair. The sum is scaled by exp(dA[t]) per row, as mamba_ssm does.
// - Causal term: the decay-weighted cb tile w[t, s] = cb[t, s] exp(dA[t] - dA[s]) dt[s] is built
//   in the A fragment's registers from the fp32 cb (8 values a lane, prefetched one tile ahead)
//   and rounded once to bf16 (as mamba_ssm rounds it), zero above the diagonal; x (bf16, in
//   shared memory) is the B operand through ldmatrix.trans. Only differences dA[t] - dA[s] with
//   s <= t are exponentiated (never exp(-dA[s]) alone, which overflows past 88 in strong-decay
//   heads); exp2 of log2(e)-scaled cumulative sums (ex2.approx, 2^-22 relative).
// - Shared memory: x of both heads (256 x 64 bf16, 16-byte chunks XOR-swizzled by row: ldmatrix
//   and the D x reads are conflict-free), states of both heads (64 x 128 bf16, swizzled so a
//   quarter-warp's 16-byte reads hit distinct banks), dA * log2(e) and dt of both heads: 100 KiB
//   (50 KiB with one head), two blocks an SM (128 registers a thread). states, dA and dt arrive
//   first (cp.async group 0), x second: the first row block's state term runs while x is in flight.
// - out is written from the accumulators (bf16 pairs, rows past seqlen skipped); the last chunk
//   of a sequence reads no token past seqlen (x rows zero-filled, C rows zero).

#include <cuda_bf16.h>

namespace {

constexpr int kHeadDim = 64;
constexpr int kDState = 128;
constexpr int kMaxChunk = 256;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory layout (bytes) of a block of kHeads heads.
constexpr int kXBytes = kMaxChunk * kHeadDim * 2;    // one head's x: 32 KiB, rows of 128 B
constexpr int kStateBytes = kHeadDim * kDState * 2;  // one head's states: 16 KiB, rows of 256 B
template <int kHeads>
struct Smem {
  static constexpr int kX = 0;
  static constexpr int kStates = kX + kHeads * kXBytes;
  static constexpr int kDa = kStates + kHeads * kStateBytes;
  static constexpr int kDt = kDa + kHeads * kMaxChunk * 4;
  static constexpr int kBytes = kDt + kHeads * kMaxChunk * 4;
};
static_assert(Smem<2>::kBytes == 102400, "the two-head @launch passes 102400 bytes");
static_assert(Smem<1>::kBytes == 51200, "the one-head @launch passes 51200 bytes");

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ float fast_exp2(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(v));
  return r;
}

// Two floats rounded to bf16, lo in the low half (the lower k index of a fragment pair).
__device__ __forceinline__ unsigned bf16_pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ uint4 ld_shared_v4(unsigned addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

// Byte offset of 16-byte chunk `chunk` (0..7) of x row `row` (rows of 128 B).
__device__ __forceinline__ int x_offset(int row, int chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}
// Byte offset of 16-byte chunk `chunk` (0..15) of states row `p` (rows of 256 B).
__device__ __forceinline__ int state_offset(int p, int chunk) {
  return p * 256 + ((chunk ^ ((p & 1) << 2)) << 4);
}

}  // namespace

template <int kHeads>
__global__ void __launch_bounds__(kThreads, 2)
    mamba_chunk_scan_kernel(const float* __restrict__ cb, const __nv_bfloat16* __restrict__ x,
                            const float* __restrict__ dt, const float* __restrict__ dA_cumsum,
                            const __nv_bfloat16* __restrict__ C,
                            const __nv_bfloat16* __restrict__ states, const float* __restrict__ D,
                            __nv_bfloat16* __restrict__ out, int seqlen, int chunk_size, int nheads,
                            int ngroups) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int heads_per_group = nheads / ngroups;
  const int pairs_per_group = (heads_per_group + kHeads - 1) / kHeads;
  const int grp = blockIdx.x / pairs_per_group;
  const int pair = blockIdx.x - grp * pairs_per_group;
  const int h0 = grp * heads_per_group + kHeads * pair;
  const int heads_here = min(kHeads, heads_per_group - kHeads * pair);
  const int c = blockIdx.y;
  const int b = blockIdx.z;
  const int nchunks = gridDim.y;
  const int Q = chunk_size;
  const long long chunk_start = static_cast<long long>(c) * Q;
  const int limit = static_cast<int>(min(static_cast<long long>(Q), seqlen - chunk_start));
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;
  const int t4 = lane & 3;

  const unsigned s_x = smem_addr(smem + Smem<kHeads>::kX);
  const unsigned s_states = smem_addr(smem + Smem<kHeads>::kStates);
  float* s_da = reinterpret_cast<float*>(smem + Smem<kHeads>::kDa);
  float* s_dt = reinterpret_cast<float*>(smem + Smem<kHeads>::kDt);

  // Group 0: states of both heads (16 KiB contiguous each); group 1: x rows of both heads (rows
  // past the sequence's end are zero). dA and dt are plain loads, visible after the first barrier.
  for (int hh = 0; hh < heads_here; ++hh) {
    const __nv_bfloat16* src =
        states +
        ((static_cast<long long>(b) * nchunks + c) * nheads + h0 + hh) * kHeadDim * kDState;
    for (int i = tid; i < kHeadDim * kDState / 8; i += kThreads) {
      cp_async16(s_states + hh * kStateBytes + state_offset(i >> 4, i & 15), src + i * 8);
    }
  }
  cp_async_commit();
  for (int hh = 0; hh < heads_here; ++hh) {
    for (int i = tid; i < Q * 8; i += kThreads) {
      const int row = i >> 3, chunk = i & 7;
      const unsigned dst = s_x + hh * kXBytes + x_offset(row, chunk);
      if (row < limit) {
        const long long token = static_cast<long long>(b) * seqlen + chunk_start + row;
        cp_async16(dst, x + (token * nheads + h0 + hh) * kHeadDim + chunk * 8);
      } else {
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(0) : "memory");
      }
    }
  }
  cp_async_commit();
  for (int hh = 0; hh < heads_here; ++hh) {
    const long long base = ((static_cast<long long>(b) * nheads + h0 + hh) * nchunks + c) * Q;
    for (int i = tid; i < Q; i += kThreads) {
      s_da[hh * kMaxChunk + i] = dA_cumsum[base + i] * kLog2e;
      s_dt[hh * kMaxChunk + i] = dt[base + i];
    }
  }

  const float* cb_chunk = cb + ((static_cast<long long>(b) * nchunks + c) * ngroups + grp) *
                                   static_cast<long long>(Q) * Q;
  const __nv_bfloat16* c_chunk =
      C + ((static_cast<long long>(b) * seqlen + chunk_start) * ngroups + grp) * kDState;
  const int row_blocks = (limit + 15) >> 4;

  for (int pass = 0; pass < 2; ++pass) {
    const int rb = pass == 0 ? warp : 2 * kWarps - 1 - warp;
    const bool active = rb < row_blocks;  // warp-uniform
    const int r0 = rb * 16 + g;
    const int r1 = r0 + 8;

    // ---- State term: acc = C[rows] . states^T, scaled by exp(dA[row]). ----
    uint4 ca[4][2];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint4 zero = make_uint4(0, 0, 0, 0);
      const long long col = 32 * j + 8 * t4;
      ca[j][0] = active && r0 < limit
                     ? *reinterpret_cast<const uint4*>(
                           c_chunk + r0 * static_cast<long long>(ngroups) * kDState + col)
                     : zero;
      ca[j][1] = active && r1 < limit
                     ? *reinterpret_cast<const uint4*>(
                           c_chunk + r1 * static_cast<long long>(ngroups) * kDState + col)
                     : zero;
    }
    if (pass == 0) {
      cp_async_wait<1>();  // states landed; dA and dt stored
      __syncthreads();
    }
    float acc[kHeads][8][4];
    float dl_r0[kHeads], dl_r1[kHeads];
#pragma unroll
    for (int hh = 0; hh < kHeads; ++hh) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        acc[hh][nt][0] = acc[hh][nt][1] = acc[hh][nt][2] = acc[hh][nt][3] = 0.f;
      }
      dl_r0[hh] = s_da[hh * kMaxChunk + (r0 & (kMaxChunk - 1))];
      dl_r1[hh] = s_da[hh * kMaxChunk + (r1 & (kMaxChunk - 1))];
    }
    if (active) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int hh = 0; hh < kHeads; ++hh) {
          if (hh < heads_here) {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
              const uint4 sb =
                  ld_shared_v4(s_states + hh * kStateBytes + state_offset(8 * nt + g, 4 * j + t4));
              mma_bf16(acc[hh][nt], ca[j][0].x, ca[j][1].x, ca[j][0].y, ca[j][1].y, sb.x, sb.y);
              mma_bf16(acc[hh][nt], ca[j][0].z, ca[j][1].z, ca[j][0].w, ca[j][1].w, sb.z, sb.w);
            }
          }
        }
      }
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) {
        const float e0 = fast_exp2(dl_r0[hh]), e1 = fast_exp2(dl_r1[hh]);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          acc[hh][nt][0] *= e0;
          acc[hh][nt][1] *= e0;
          acc[hh][nt][2] *= e1;
          acc[hh][nt][3] *= e1;
        }
      }
    }
    if (pass == 0) {
      cp_async_wait<0>();  // x landed
      __syncthreads();
    }
    if (!active) continue;

    // ---- Causal term: acc += w . x over the 16-token column blocks kb <= rb. ----
    const float* cb_r0 = cb_chunk + static_cast<long long>(r0) * Q + 2 * t4;
    const float* cb_r1 = cb_r0 + 8 * Q;
    float2 f[4], f_next[4];
    f[0] = *reinterpret_cast<const float2*>(cb_r0);
    f[1] = *reinterpret_cast<const float2*>(cb_r0 + 8);
    f[2] = *reinterpret_cast<const float2*>(cb_r1);
    f[3] = *reinterpret_cast<const float2*>(cb_r1 + 8);
    for (int kb = 0; kb <= rb; ++kb) {
      if (kb < rb) {
        const int next = 16 * (kb + 1);
        f_next[0] = *reinterpret_cast<const float2*>(cb_r0 + next);
        f_next[1] = *reinterpret_cast<const float2*>(cb_r0 + next + 8);
        f_next[2] = *reinterpret_cast<const float2*>(cb_r1 + next);
        f_next[3] = *reinterpret_cast<const float2*>(cb_r1 + next + 8);
      }
      const int s0 = 16 * kb + 2 * t4;  // this lane's columns: s0, s0 + 1, s0 + 8, s0 + 9
      const bool diagonal = kb == rb;
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) {
        if (hh < heads_here) {
          const float2 dl_lo = *reinterpret_cast<const float2*>(s_da + hh * kMaxChunk + s0);
          const float2 dl_hi = *reinterpret_cast<const float2*>(s_da + hh * kMaxChunk + s0 + 8);
          const float2 dt_lo = *reinterpret_cast<const float2*>(s_dt + hh * kMaxChunk + s0);
          const float2 dt_hi = *reinterpret_cast<const float2*>(s_dt + hh * kMaxChunk + s0 + 8);
          // w(row, col) for this lane's 8 elements; zero above the diagonal (selected, so an
          // infinite exp2 of a masked element never reaches the product).
          float w[8];
          w[0] = f[0].x * fast_exp2(dl_r0[hh] - dl_lo.x) * dt_lo.x;
          w[1] = f[0].y * fast_exp2(dl_r0[hh] - dl_lo.y) * dt_lo.y;
          w[2] = f[2].x * fast_exp2(dl_r1[hh] - dl_lo.x) * dt_lo.x;
          w[3] = f[2].y * fast_exp2(dl_r1[hh] - dl_lo.y) * dt_lo.y;
          w[4] = f[1].x * fast_exp2(dl_r0[hh] - dl_hi.x) * dt_hi.x;
          w[5] = f[1].y * fast_exp2(dl_r0[hh] - dl_hi.y) * dt_hi.y;
          w[6] = f[3].x * fast_exp2(dl_r1[hh] - dl_hi.x) * dt_hi.x;
          w[7] = f[3].y * fast_exp2(dl_r1[hh] - dl_hi.y) * dt_hi.y;
          if (diagonal) {
            // Local row g (w[0], w[1], w[4], w[5]) and g + 8 (the others); local columns 2 t4,
            // 2 t4 + 1, 2 t4 + 8, 2 t4 + 9.
            const int c0 = 2 * t4;
            w[0] = c0 <= g ? w[0] : 0.f;
            w[1] = c0 + 1 <= g ? w[1] : 0.f;
            w[4] = c0 + 8 <= g ? w[4] : 0.f;
            w[5] = c0 + 9 <= g ? w[5] : 0.f;
            w[2] = c0 <= g + 8 ? w[2] : 0.f;
            w[3] = c0 + 1 <= g + 8 ? w[3] : 0.f;
            w[6] = c0 + 8 <= g + 8 ? w[6] : 0.f;
            w[7] = c0 + 9 <= g + 8 ? w[7] : 0.f;
          }
          const unsigned a0 = bf16_pack(w[0], w[1]);
          const unsigned a1 = bf16_pack(w[2], w[3]);
          const unsigned a2 = bf16_pack(w[4], w[5]);
          const unsigned a3 = bf16_pack(w[6], w[7]);
          // ldmatrix.x4.trans: lanes 8 m .. 8 m + 7 address matrix m = tokens 16 kb + 8 (m & 1)
          // + r, channels 16 q + 8 (m >> 1) .. + 7.
          const int m = lane >> 3;
          const int token = 16 * kb + ((m & 1) << 3) + (lane & 7);
          const unsigned x_row = s_x + hh * kXBytes;
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            unsigned bx[4];
            ldmatrix_x4_trans(bx, x_row + x_offset(token, 2 * q + (m >> 1)));
            mma_bf16(acc[hh][2 * q], a0, a1, a2, a3, bx[0], bx[1]);
            mma_bf16(acc[hh][2 * q + 1], a0, a1, a2, a3, bx[2], bx[3]);
          }
        }
      }
      if (kb < rb) {
#pragma unroll
        for (int i = 0; i < 4; ++i) f[i] = f_next[i];
      }
    }

    // ---- D x and the store. ----
#pragma unroll
    for (int hh = 0; hh < kHeads; ++hh) {
      if (hh < heads_here) {
        const int h = h0 + hh;
        const float d = D[h];
        const unsigned char* xs = smem + Smem<kHeads>::kX + hh * kXBytes;
        __nv_bfloat16* out_r0 =
            out + ((static_cast<long long>(b) * seqlen + chunk_start + r0) * nheads + h) * kHeadDim;
        __nv_bfloat16* out_r1 = out_r0 + 8LL * nheads * kHeadDim;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const float2 x0 = __bfloat1622float2(
              *reinterpret_cast<const __nv_bfloat162*>(xs + x_offset(r0, nt) + 4 * t4));
          const float2 x1 = __bfloat1622float2(
              *reinterpret_cast<const __nv_bfloat162*>(xs + x_offset(r1, nt) + 4 * t4));
          if (r0 < limit) {
            *reinterpret_cast<__nv_bfloat162*>(out_r0 + 8 * nt + 2 * t4) =
                __floats2bfloat162_rn(acc[hh][nt][0] + d * x0.x, acc[hh][nt][1] + d * x0.y);
          }
          if (r1 < limit) {
            *reinterpret_cast<__nv_bfloat162*>(out_r1 + 8 * nt + 2 * t4) =
                __floats2bfloat162_rn(acc[hh][nt][2] + d * x1.x, acc[hh][nt][3] + d * x1.y);
          }
        }
      }
    }
  }
}
