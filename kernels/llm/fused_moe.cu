// Reference for llm/fused_moe: the expert half of a mixture-of-experts MLP, vLLM fused_experts
// with SiLU (moe_align_block_size, the grouped GEMM over w1, silu_and_mul, the grouped GEMM over
// w2 scaled by the routing weights, moe_sum).
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). For every token t, with I = intermediate_size:
//
//   out[t] = sum_j topk_weights[t, j] * w2[e] @ (silu(w1[e, 0:I] @ x_t) * (w1[e, I:2I] @ x_t)),
//   e = topk_ids[t, j], x_t = hidden_states[t]
//
// Four launches, as vLLM's own path:
//   1. moe_route<BM>: one block groups the flat slots i = t * topk + j by expert: sorted_rows
//      holds each expert's slots padded with -1 to a multiple of BM rows, block_expert the
//      expert of each BM-row block, block_count how many blocks are used.
//   2. moe_gemm<true, ...>: the gate/up GEMM of every block of BM sorted rows against its
//      expert's w1, the rows gathered from hidden_states by token; the tile holds matching gate
//      and up columns, so the epilogue writes act = silu(gate) * up (bf16) straight from the
//      accumulators: the [rows, 2I] intermediate never reaches memory.
//   3. moe_gemm<false, ...>: act's rows against their expert's w2; each slot's output, times its
//      routing weight, is rounded to bf16 into `slots` at the slot's flat index.
//   4. moe_sum_slots: out[t] = the fp32 sum of token t's topk slot rows, rounded once.
//
// The GEMMs are wgmma kernels fed by a cp.async pipeline (the structure of
// kernels/diffusion/conv2d_3x3.cu): a block of W warpgroups computes a (64 W) x N tile, each
// warpgroup one m64nNk16 accumulator; K advances 64 at a time through STAGES stages of shared
// memory in the 128-byte swizzle. Three shapes, by the mean rows per expert r = num_tokens *
// topk / num_experts:
//
//   r <= 4 (decode, few rows per expert)      W 1, BM 64,  N 64,  6 stages,  99 KiB: 2 blocks/SM
//   4 < r <= 96 (busy decode, short prefill)  W 1, BM 64,  N 256, 5 stages, 201 KiB
//   r > 96 (prefill)                          W 2, BM 128, N 256, 4 stages, 193 KiB
//
// In the gate/up GEMM the N rows of a B tile are N / 2 gate rows then the N / 2 matching up rows,
// so output column c's gate and up sums sit in the same thread (accumulator columns c and
// c + N / 2: registers 4 j + q and 4 (j + N / 16) + q).
//
// clang-format off
// @workspace sorted_rows int[num_tokens * topk + min(num_experts, num_tokens * topk) * 127]
// @workspace block_expert int[cdiv(num_tokens * topk + min(num_experts, num_tokens * topk) * 127, 64)]
// @workspace block_count int[1]
// @workspace act bf16[(num_tokens * topk + min(num_experts, num_tokens * topk) * 127) * intermediate_size]
// @workspace slots bf16[num_tokens * topk * hidden_size]
// @launch if (num_tokens * topk <= 96 * num_experts) moe_route<64><<<1, 1024>>>(topk_ids, sorted_rows, block_expert, block_count, num_tokens, topk, num_experts)
// @launch if (num_tokens * topk > 96 * num_experts) moe_route<128><<<1, 1024>>>(topk_ids, sorted_rows, block_expert, block_count, num_tokens, topk, num_experts)
// @launch if (num_tokens * topk <= 4 * num_experts)
//     moe_gemm<true, 1, 64, 6><<<cdiv(intermediate_size, 32) * cdiv(num_tokens * topk + min(num_experts, num_tokens * topk) * 63, 64), 128, 99328>>>(act, hidden_states, w1, topk_weights, sorted_rows, block_expert, block_count, topk, hidden_size, intermediate_size, num_experts)
// @launch if (num_tokens * topk > 4 * num_experts && num_tokens * topk <= 96 * num_experts)
//     moe_gemm<true, 1, 256, 5><<<cdiv(intermediate_size, 128) * cdiv(num_tokens * topk + min(num_experts, num_tokens * topk) * 63, 64), 128, 205824>>>(act, hidden_states, w1, topk_weights, sorted_rows, block_expert, block_count, topk, hidden_size, intermediate_size, num_experts)
// @launch if (num_tokens * topk > 96 * num_experts)
//     moe_gemm<true, 2, 256, 4><<<cdiv(intermediate_size, 128) * cdiv(num_tokens * topk + min(num_experts, num_tokens * topk) * 127, 128), 256, 197632>>>(act, hidden_states, w1, topk_weights, sorted_rows, block_expert, block_count, topk, hidden_size, intermediate_size, num_experts)
// @launch if (num_tokens * topk <= 4 * num_experts)
//     moe_gemm<false, 1, 64, 6><<<cdiv(hidden_size, 64) * cdiv(num_tokens * topk + min(num_experts, num_tokens * topk) * 63, 64), 128, 99328>>>(slots, act, w2, topk_weights, sorted_rows, block_expert, block_count, topk, hidden_size, intermediate_size, num_experts)
// @launch if (num_tokens * topk > 4 * num_experts && num_tokens * topk <= 96 * num_experts)
//     moe_gemm<false, 1, 256, 5><<<cdiv(hidden_size, 256) * cdiv(num_tokens * topk + min(num_experts, num_tokens * topk) * 63, 64), 128, 205824>>>(slots, act, w2, topk_weights, sorted_rows, block_expert, block_count, topk, hidden_size, intermediate_size, num_experts)
// @launch if (num_tokens * topk > 96 * num_experts)
//     moe_gemm<false, 2, 256, 4><<<cdiv(hidden_size, 256) * cdiv(num_tokens * topk + min(num_experts, num_tokens * topk) * 127, 128), 256, 197632>>>(slots, act, w2, topk_weights, sorted_rows, block_expert, block_count, topk, hidden_size, intermediate_size, num_experts)
// @launch moe_sum_slots<<<dim3(cdiv(hidden_size, 1024), num_tokens), 128>>>(out, slots, topk, hidden_size)
// clang-format on
//
// (Dynamic shared memory: STAGES * (BM + N) * 128 bytes plus 1 KiB to align the stages to 1024
// bytes, which the 128-byte swizzle needs. The grids cover the most blocks the routing can
// need, numel + min(experts, numel) * (BM - 1) rows; blocks past block_count return at once.)
//
// Design notes (why, for whoever optimises this next):
// - Decode is memory bound: every chosen expert's weights are read once (Mixtral at TP 2, one
//   token: 2 experts x 176 MB). What matters is enough bytes in flight: rows of A past the
//   expert's slots are cp.async copies of size 0 (no memory traffic, zeros in shared memory),
//   so a 64-row tile holding one real row costs the weight stream only; N 64 tiles give enough
//   blocks to fill the SMs when only a few experts are busy (Qwen3 at one token: 8 experts x 24
//   gate/up tiles), and 99 KiB lets two blocks share an SM.
// - Prefill is compute bound. A 128 x 256 tile moves 48 KiB per K step of 4.2 MFLOP (87
//   FLOP/byte from L2); BM 128 rather than 256 keeps the padding of each expert's last block
//   (on average BM / 2 rows per busy expert) near 12 % for Qwen3's 128 experts.
// - Block order: with many experts (Qwen3, DeepSeek-V3) column tiles are fastest, so the
//   blocks resident together share gathered rows of hidden_states (or act) in L2 and each
//   expert's weights are small; with at most 16 experts (Mixtral: 117 MB of w1 per expert) M
//   blocks are fastest, so an expert's weight tile is read from memory once for all its M
//   blocks. Measured on the H200 (bench/results/h200_reference_variants_fused_moe.json):
//   column tiles first everywhere costs Mixtral 5-6 % (prefill 2048, decode 256); M blocks first
//   everywhere costs the fine-grained layers 2-5 %.
// - In the two-warpgroup prefill shape a warpgroup whose 64 rows are all padding (the second
//   half of an expert's last block) skips its wgmmas: 1.4 % on Mixtral's prefill, 2.2 % on
//   Qwen3's. Tried and slower: prefill on the 64-row, one-warpgroup shape (0.76-0.80x: less
//   padding, but half the reuse of each weight tile), and the down GEMM on 128-column tiles
//   for more blocks per wave (0.91x).
// - Against PyTorch's grouped GEMM (torch._grouped_mm, CUTLASS, with its sort and gather;
//   bench/results/h200_parity.json) the reference takes 0.44-0.81 of its time on every case
//   but Mixtral's 2048-token prefill, where it takes 1.08: 507 TFLOP/s against 549, of which
//   the padding of each expert's last 128-row block is about 6 % (half a block per expert,
//   512 of 4096 rows, halved by the skip above).
// - The gate/up epilogue applies SiLU in fp32 and rounds the product once to bf16: act is the
//   second GEMM's operand. The down epilogue multiplies by the routing weight in fp32 and rounds
//   once to bf16 (vLLM's moe_sum input is bf16 as well); the slot sum is fp32, rounded once.
// - No atomics anywhere, so the output is the same bit for bit on every run (the rank of a slot
//   inside its expert's segment depends on shared-memory atomics, but a row's sums do not
//   depend on where it sits).
// - Not done here, and where the rest of the prefill gap is: a persistent grouped scheduler
//   (one launch walking all experts' tiles, the epilogue overlapping the next tile's loads, no
//   wave tail: the down GEMM's 576 blocks are 4.4 waves), a producer warp issuing TMA copies
//   instead of every thread issuing cp.async, multicast of the weight tile across a cluster of
//   M blocks of the same expert, and the route fused into the first GEMM's prologue for decode
//   (saves a launch, about 2 us).

#include <cuda_bf16.h>

namespace {

constexpr int kBlockK = 64;       // K per stage
constexpr int kRowBytes = 128;    // a stage row: kBlockK bf16, one swizzle row
constexpr int kChunksPerRow = 8;  // 16-byte chunks per row
constexpr int kChunkElems = 8;    // bf16 per chunk
constexpr int kAtomBytes = 1024;  // 8 rows: one 128-byte swizzle atom
constexpr int kRouteThreads = 1024;
// Layers with at most this many experts order the GEMMs' blocks M blocks first (see moe_gemm).
constexpr int kMFirstMaxExperts = 16;
// A warpgroup whose 64 rows are all padding (the last block of an expert) issues no wgmma.
constexpr bool kSkipPaddingWarpgroups = true;

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows laid out in the
// 128-byte swizzle (the tile starts on a 1024-byte boundary).
__device__ __forceinline__ unsigned swizzled_offset(int row, int chunk) {
  return static_cast<unsigned>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// 16-byte global -> shared copy through L2 only. With `valid` false nothing is read (source size
// 0) and the 16 bytes are zero-filled; `source` must still be a mapped address.
__device__ __forceinline__ void copy_async_16(unsigned destination, const void* source,
                                              bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(source_bytes)
               : "memory");
}

__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed copy groups are in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Makes this thread's cp.async writes (generic proxy) visible to wgmma's reads (async proxy); a
// barrier after it publishes them to the other threads.
__device__ __forceinline__ void fence_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// wgmma shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle starting at
// `address`: start >> 4 in bits 0-13, leading byte offset 1 (unused by a swizzled K-major
// layout), stride byte offset 1024 >> 4 in bits 32-45 (one 8-row atom to the next), swizzle
// mode 1 (128-byte) in bits 62-63.
__device__ __forceinline__ unsigned long long matrix_descriptor(unsigned address) {
  unsigned long long descriptor = (address & 0x3FFFFu) >> 4;
  descriptor |= 1ull << 16;
  descriptor |= static_cast<unsigned long long>(kAtomBytes >> 4) << 32;
  descriptor |= 1ull << 62;
  return descriptor;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending of this warpgroup's committed wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses to the accumulators across an asynchronous wgmma's
// issue or wait.
template <int kCount>
__device__ __forceinline__ void fence_accumulators(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Thread t of the warpgroup holds, in d[4 j + q], row 16 (t / 32) + (t % 32) / 4 + 8 (q / 2)
// and column 8 j + 2 (t % 4) + q % 2 of the 64 x N accumulator.
// d (64 x 64, fp32) += A (64 x 16, K-major) * B (64 x 16, K-major)^T, both bf16 in shared
// memory: the warpgroup's m64n64k16.
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], unsigned long long a_descriptor,
                                                unsigned long long b_descriptor) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, accumulate, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a_descriptor), "l"(b_descriptor), "r"(1));
}

// d (64 x 128, fp32) += A (64 x 16, K-major) * B (128 x 16, K-major)^T, both bf16 in shared
// memory: the warpgroup's m64n128k16.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], unsigned long long a_descriptor,
                                                 unsigned long long b_descriptor) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, accumulate, 1, 1, 0, 0;\n"
      "}\n"
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
      : "l"(a_descriptor), "l"(b_descriptor), "r"(1));
}

// d (64 x 256, fp32) += A (64 x 16, K-major) * B (256 x 16, K-major)^T, both bf16 in shared
// memory: the warpgroup's m64n256k16.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], unsigned long long a_descriptor,
                                                 unsigned long long b_descriptor) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
      "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
      "%123, %124, %125, %126, %127}, "
      "%128, %129, accumulate, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a_descriptor), "l"(b_descriptor), "r"(1));
}

template <int kBlockN>
__device__ __forceinline__ void wgmma_tile(float (&d)[kBlockN / 2], unsigned long long a_descriptor,
                                           unsigned long long b_descriptor) {
  if constexpr (kBlockN == 64) {
    wgmma_m64n64k16(d, a_descriptor, b_descriptor);
  } else if constexpr (kBlockN == 128) {
    wgmma_m64n128k16(d, a_descriptor, b_descriptor);
  } else {
    wgmma_m64n256k16(d, a_descriptor, b_descriptor);
  }
}

}  // namespace

// Groups the flat slots i = t * topk + j by expert. Expert e's c_e slots take rows
// [o_e, o_e + c_e) of sorted_rows (any order) and -1 fills the rest of its p_e = cdiv(c_e, BM)
// * BM rows; o_e = p_0 + ... + p_{e-1}. block_expert[b] = e for its p_e / BM blocks,
// block_count = o_{num_experts} / BM. One block of 1024 threads (num_experts <= 1024): a
// shared-memory histogram, a block scan of the padded counts, then a scatter whose ranks come
// from shared-memory atomics.
template <int kBlockM>
__global__ void __launch_bounds__(kRouteThreads)
    moe_route(const int* __restrict__ topk_ids, int* __restrict__ sorted_rows,
              int* __restrict__ block_expert, int* __restrict__ block_count, int num_tokens,
              int topk, int num_experts) {
  __shared__ int counts[kRouteThreads];
  __shared__ int cursor[kRouteThreads];
  __shared__ int warp_sums[kRouteThreads / 32];
  const int thread = static_cast<int>(threadIdx.x);
  const int lane = thread % 32;
  const int warp = thread / 32;
  const int numel = num_tokens * topk;
  counts[thread] = 0;
  __syncthreads();
  for (int i = thread; i < numel; i += kRouteThreads) atomicAdd(&counts[topk_ids[i]], 1);
  __syncthreads();

  const int count = thread < num_experts ? counts[thread] : 0;
  const int padded = (count + kBlockM - 1) / kBlockM * kBlockM;
  int inclusive = padded;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int below = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += below;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int total = warp_sums[lane];
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int below = __shfl_up_sync(0xffffffffu, total, offset);
      if (lane >= offset) total += below;
    }
    warp_sums[lane] = total;
  }
  __syncthreads();
  if (warp > 0) inclusive += warp_sums[warp - 1];
  const int start = inclusive - padded;
  cursor[thread] = start;
  if (thread == kRouteThreads - 1) *block_count = inclusive / kBlockM;
  if (thread < num_experts) {
    for (int r = count; r < padded; ++r) sorted_rows[start + r] = -1;
    for (int b = start / kBlockM; b < inclusive / kBlockM; ++b) block_expert[b] = thread;
  }
  __syncthreads();
  for (int i = thread; i < numel; i += kRouteThreads) {
    sorted_rows[atomicAdd(&cursor[topk_ids[i]], 1)] = i;
  }
}

// One (64 W) x N tile of a grouped GEMM over the expert-sorted rows.
//   kGateUp: dst = act [rows, I], src = hidden_states [num_tokens, H], weight = w1
//            [E, 2I, H]; row p reads hidden_states[sorted_rows[p] / topk]; K = H; the tile's
//            N weight rows are gate rows [n0, n0 + N/2) then up rows I + [n0, n0 + N/2);
//            act[p, n0 + c] = bf16(silu(gate) * up).
//   else:    dst = slots [num_tokens * topk, H], src = act, weight = w2 [E, H, I]; K = I; the
//            tile's weight rows are [n0, n0 + N); slots[i, n0 + c] = bf16(topk_weights[i] *
//            sum), i = sorted_rows[p].
// Rows whose sorted_rows entry is -1 (padding) are neither read nor written.
// Launch: 128 W threads; gridDim.x = column tiles * M blocks, column tiles fastest; dynamic
// shared memory kStages * (64 W + N) * 128 + 1024.
template <bool kGateUp, int kWarpgroups, int kBlockN, int kStages>
__global__ void __launch_bounds__(128 * kWarpgroups, 1)
    moe_gemm(__nv_bfloat16* __restrict__ dst, const __nv_bfloat16* __restrict__ src,
             const __nv_bfloat16* __restrict__ weight, const float* __restrict__ topk_weights,
             const int* __restrict__ sorted_rows, const int* __restrict__ block_expert,
             const int* __restrict__ block_count, int topk, int hidden_size, int intermediate_size,
             int num_experts) {
  constexpr int kThreads = 128 * kWarpgroups;
  constexpr int kBlockM = 64 * kWarpgroups;
  constexpr int kAccumulators = kBlockN / 2;
  constexpr int kStageBytes = (kBlockM + kBlockN) * kRowBytes;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  constexpr int kASlots = kBlockM / kRowsPerPass;
  constexpr int kBSlots = kBlockN / kRowsPerPass;
  // Tile columns of the output: N for the down GEMM, N / 2 (gate and up share the tile) for
  // gate/up.
  constexpr int kOutColumns = kGateUp ? kBlockN / 2 : kBlockN;
  static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 256, "the wgmma shapes above");
  static_assert(kStageBytes % kAtomBytes == 0, "every stage starts on a swizzle atom");
  static_assert((kBlockN / 2) % kRowsPerPass == 0, "a copy slot is all gate or all up rows");
  static_assert(kStages >= 3, "one stage in the copies, one in the math, one in flight");

  extern __shared__ __align__(16) unsigned char shared_storage[];
  const unsigned smem_base =
      (shared_address(shared_storage) + (kAtomBytes - 1)) & ~static_cast<unsigned>(kAtomBytes - 1);

  const int k_size = kGateUp ? hidden_size : intermediate_size;
  const int out_size = kGateUp ? intermediate_size : hidden_size;  // output columns
  const int tiles_n = (out_size + kOutColumns - 1) / kOutColumns;
  // Few experts (large weight matrices): M blocks fastest, so the blocks that share an expert's
  // weight tile run together while it is in L2. Many experts: column tiles fastest, so the
  // blocks that share gathered rows do.
  const bool m_first = num_experts <= kMFirstMaxExperts;
  const int m_blocks = static_cast<int>(gridDim.x) / tiles_n;
  const int m_block =
      m_first ? static_cast<int>(blockIdx.x) % m_blocks : static_cast<int>(blockIdx.x) / tiles_n;
  const int n_tile =
      m_first ? static_cast<int>(blockIdx.x) / m_blocks : static_cast<int>(blockIdx.x) % tiles_n;
  if (m_block >= *block_count) return;
  const int n0 = n_tile * kOutColumns;
  const int m0 = m_block * kBlockM;
  const int expert = block_expert[m_block];
  const long long weight_rows = kGateUp ? 2ll * intermediate_size : hidden_size;
  const __nv_bfloat16* expert_weight = weight + expert * weight_rows * k_size;

  const int thread = static_cast<int>(threadIdx.x);
  const int chunk = thread % kChunksPerRow;
  const int first_row = thread / kChunksPerRow;

  // A rows: the source row of each of this thread's kASlots rows (null for padding).
  const __nv_bfloat16* a_row[kASlots];
#pragma unroll
  for (int i = 0; i < kASlots; ++i) {
    const int p = m0 + first_row + i * kRowsPerPass;
    const int slot = sorted_rows[p];
    const long long source_row = kGateUp ? slot / topk : p;
    a_row[i] = slot >= 0 ? src + source_row * k_size : nullptr;
  }
  // B rows: slot j's tile row is first_row + j * kRowsPerPass; its weight row and whether it
  // exists (columns past out_size read as zeros).
  auto b_weight_row = [&](int j) {
    const int r = first_row + j * kRowsPerPass;
    if constexpr (kGateUp) {
      const bool up = j * kRowsPerPass >= kBlockN / 2;
      const int column = n0 + r - (up ? kBlockN / 2 : 0);
      return column < out_size ? (up ? intermediate_size : 0) + column : -1;
    } else {
      const int column = n0 + r;
      return column < out_size ? column : -1;
    }
  };
  int b_row[kBSlots];
#pragma unroll
  for (int j = 0; j < kBSlots; ++j) b_row[j] = b_weight_row(j);

  const int k_tiles = (k_size + kBlockK - 1) / kBlockK;
  auto load_tile = [&](int k_tile) {
    const int k = k_tile * kBlockK + chunk * kChunkElems;
    const bool k_in = k < k_size;
    const unsigned stage = smem_base + static_cast<unsigned>(k_tile % kStages) * kStageBytes;
#pragma unroll
    for (int i = 0; i < kASlots; ++i) {
      const bool valid = k_in && a_row[i] != nullptr;
      copy_async_16(stage + swizzled_offset(first_row + i * kRowsPerPass, chunk),
                    valid ? a_row[i] + k : src, valid);
    }
#pragma unroll
    for (int j = 0; j < kBSlots; ++j) {
      const bool valid = k_in && b_row[j] >= 0;
      copy_async_16(
          stage + kBlockM * kRowBytes + swizzled_offset(first_row + j * kRowsPerPass, chunk),
          valid ? expert_weight + static_cast<long long>(b_row[j]) * k_size + k : weight, valid);
    }
  };

  const int warpgroup = thread / 128;
  // An expert's real rows come first in its segment, so a warpgroup whose first row is padding
  // has no real row: it still copies (the block shares the stages) but multiplies nothing. With
  // one warpgroup the block's first row is always real, and the check's load is left out.
  const bool multiplies =
      !kSkipPaddingWarpgroups || kWarpgroups == 1 || sorted_rows[m0 + warpgroup * 64] >= 0;
  float acc[kAccumulators];
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) load_tile(s);
    commit_copies();
  }
  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    wait_copies<kStages - 3>();
    fence_async_proxy();
    __syncthreads();
    const unsigned stage = smem_base + static_cast<unsigned>(k_tile % kStages) * kStageBytes;
    const unsigned a_tile = stage + warpgroup * 64 * kRowBytes;
    const unsigned b_tile = stage + kBlockM * kRowBytes;
    if (multiplies) {
      fence_accumulators(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        wgmma_tile<kBlockN>(acc, matrix_descriptor(a_tile + kk * 32),
                            matrix_descriptor(b_tile + kk * 32));
      }
      wgmma_commit();
      fence_accumulators(acc);
    }
    if (k_tile + kStages - 2 < k_tiles) load_tile(k_tile + kStages - 2);
    commit_copies();
    wgmma_wait<1>();
    fence_accumulators(acc);
  }
  wgmma_wait<0>();
  fence_accumulators(acc);
  wait_copies<0>();

  const int lane = thread % 32;
  const int warp_in_group = (thread % 128) / 32;
  const int row0 = warpgroup * 64 + warp_in_group * 16 + lane / 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int p = m0 + row0 + 8 * half;
    const int slot = sorted_rows[p];
    if (slot < 0) continue;
    if constexpr (kGateUp) {
      __nv_bfloat16* row = dst + static_cast<long long>(p) * intermediate_size;
#pragma unroll
      for (int j = 0; j < kBlockN / 16; ++j) {
        const int column = n0 + j * 8 + (lane % 4) * 2;
        if (column >= out_size) continue;  // out_size is even, so column + 1 is inside too
        float value[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float gate = acc[4 * j + 2 * half + e];
          const float up = acc[4 * (j + kBlockN / 16) + 2 * half + e];
          value[e] = gate / (1.0f + __expf(-gate)) * up;
        }
        *reinterpret_cast<__nv_bfloat162*>(row + column) =
            __floats2bfloat162_rn(value[0], value[1]);
      }
    } else {
      const float routing = topk_weights[slot];
      __nv_bfloat16* row = dst + static_cast<long long>(slot) * hidden_size;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int column = n0 + j * 8 + (lane % 4) * 2;
        if (column >= out_size) continue;
        *reinterpret_cast<__nv_bfloat162*>(row + column) = __floats2bfloat162_rn(
            routing * acc[4 * j + 2 * half], routing * acc[4 * j + 2 * half + 1]);
      }
    }
  }
}

// out[t, c .. c + 8) = the fp32 sum of slots[t * topk + j, c .. c + 8) over j, rounded once.
// Launch: dim3(cdiv(hidden_size, 1024), num_tokens) blocks of 128 threads, 8 columns each.
__global__ void __launch_bounds__(128)
    moe_sum_slots(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ slots,
                  int topk, int hidden_size) {
  const int column = (static_cast<int>(blockIdx.x) * 128 + static_cast<int>(threadIdx.x)) * 8;
  if (column >= hidden_size) return;
  const long long token = blockIdx.y;
  float sum[8] = {};
  for (int j = 0; j < topk; ++j) {
    const uint4 packed =
        *reinterpret_cast<const uint4*>(slots + (token * topk + j) * hidden_size + column);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 v = __bfloat1622float2(pairs[q]);
      sum[2 * q] += v.x;
      sum[2 * q + 1] += v.y;
    }
  }
  uint4 result;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int q = 0; q < 4; ++q) pairs[q] = __floats2bfloat162_rn(sum[2 * q], sum[2 * q + 1]);
  *reinterpret_cast<uint4*>(out + token * hidden_size + column) = result;
}
