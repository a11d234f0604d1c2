#!/usr/bin/env python3
"""Writes a JSONL of reference variants for `crucible eval`, to measure a design choice of a
reference side by side with the reference itself (each variant is scored as a candidate against
the task's reference, so its per-case time sits next to the reference's in one run).

    python3 bench/gpu/variants.py > variants.jsonl
    crucible eval variants.jsonl -o variants-eval -j 1

The variants are the ones whose figures the reference sources quote (bench/results/
h200_reference_variants.json): the partition size of paged_decode_attention, the quotient of
dynamic_per_token_scaled_fp8_quant, fused_moe's block order and prefill tile height, the block
sizes of moe_sum, silu_and_mul_fp8_quant, per_token_group_quant_fp8 and
fused_add_rms_norm_static_fp8_quant, conv2d_3x3's stages
gathered by cp.async instead of the tensor memory accelerator, diffusion/attention with three
stages and with 176-row key tiles, flash_attn_varlen_prefill's whole key tiles loaded page by
page by TMA and its short segments one tile a query head (not packed per kv head), and the
sampler with one block a row instead of a thread-block cluster at small batches and, on that
form, its passes with a load ahead, its thresholds read off the sorted candidate keys and its
lists in one pool, alone and with the cluster. Each is a textual substitution in today's
source; a substitution that no longer applies is an error, not a silent no-op. `--tasks ID
...` keeps the variants of those tasks only.
"""
import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def span(path, begin, end):
    """The text of a reference (`path`, from the repository root) from `begin` up to the next
    `end`: helpers a variant of another reference takes instead of a copy of them."""
    source = (ROOT / path).read_text()
    start = source.index(begin)
    return source[start:source.index(end, start)]

ATTENTION = "kernels/llm/paged_decode_attention.cu"
SINGLE = ("cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, "
          "25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64")
FP8 = "kernels/llm/dynamic_per_token_scaled_fp8_quant.cu"
QUOTIENT = "  return fmaf(fmaf(-q, scale, x), inverse, q);"

MOE = "kernels/llm/fused_moe.cu"
MOE_ORDER = "constexpr int kMFirstMaxExperts = 16;"
MOE_SKIP = "constexpr bool kSkipPaddingWarpgroups = true;"
MOE_PREFILL = "96 * num_experts"
MOE_DOWN = "moe_gemm<false, 2, 256, 4><<<cdiv(hidden_size, 256) *"

# The block size of three small memory-bound ops whose single-token cases trail torch.compile's
# Triton kernels by 0.1-0.4 us (h200_parity_breadth.json): fewer, larger blocks or more, smaller
# ones, loads through the coherent path instead of the read-only one, and (moe_sum) the number
# of slot loads kept in flight.
SUM = "kernels/llm/moe_sum.cu"
SUM_TILE = "cdiv(hidden_size, 1024)),\n//   128>>>"  # the scalar kernel's launch
SUM_VECTOR_TILE = "cdiv(hidden_size, 1024)), 128>>>"  # the vector and top-2 kernels' launches
SILU_FP8 = "kernels/llm/silu_and_mul_fp8_quant.cu"
SILU_TILE = "<<<dim3(num_tokens, cdiv(d, 1024)), 128>>>"
GROUP_FP8 = "kernels/llm/per_token_group_quant_fp8.cu"
GROUP_TILE = "cdiv(num_tokens * num_groups, 16), 128>>>"
THREADS = "constexpr int kThreads = 128;"

# Single-id bags (pooling 1) of embedding_bag: the order the groups take the bags in (out's or
# the ids'), and the general kernel (its id shuffled from the lane that loaded it).
BAG = "kernels/recsys/embedding_bag.cu"
BAG_SINGLE = ("embedding_bag_single_kernel<16, 8><<<cdiv(num_tables * batch, 16), 256>>>(out, "
              "weights, indices, batch, num_tables, num_rows, dim)")
BAG_OUT_ORDER = ("  const int sample = static_cast<int>(slot / num_tables);\n"
                 "  const int table = static_cast<int>(slot - static_cast<long long>(sample) * "
                 "num_tables);")

# The hash grid's work split: levels per thread (the grid's y dimension walks level groups, so
# the points of one group run together and only its tables are in use) and the block size.
HASH = "kernels/science/hash_grid_encode.cu"
HASH_FOUR = ("hash_grid_encode_kernel<4><<<dim3(cdiv(num_points, 128), num_levels / 4), "
             "128>>>")


# diffusion/conv2d_3x3 with the stages of every layer gathered by the cp.async producers of
# conv2d_3x3_specialized, as before the TMA kernel (the same launches, the plain tensors).
CONV = "kernels/diffusion/conv2d_3x3.cu"
CONV_CP_ASYNC = [
    ("// @tensormap input_rows input dims(in_channels, width, height, batch) box(64, width, "
     "256 / width, 1) swizzle(128)\n", ""),
    ("// @tensormap weight_taps weight dims(in_channels, 9, out_channels) box(64, 1, 160) "
     "swizzle(128)\n", ""),
    ("//     conv2d_3x3_tma<256, 4, ", "//     conv2d_3x3_specialized<256, 4, "),
    ("(out, input_rows, weight_taps, bias, ", "(out, input, weight, bias, "),
    ("// @cluster conv2d_3x3_tma<256, 4, 2> (2, 1, 1)\n", ""),
]


def block_size(threads, *tiles):
    """kThreads and every launch's tile: (text, new text) pairs."""
    return [(THREADS, f"constexpr int kThreads = {threads};"), *tiles]


# llm/top_k_top_p_sampling_from_logits's histogram and collection passes with the next chunk's
# load issued before the current chunk's work (for_each_chunk below). As compiled today (nvdisasm
# of the reference), each iteration of those loops issues its chunk's loads at its top and uses
# them at once, with no later chunk's load in flight during the shared-memory atomics and stores:
# a round trip to L2 a chunk. Both passes take ~25 us of a batch-1 row against ~6 us for the max
# pass over the same logits, whose loop the compiler unrolls with several loads in flight
# (h200_sampling_steps.json). Not yet measured: the device was not lent when it was written.
SAMPLING = "kernels/llm/top_k_top_p_sampling_from_logits.cu"
# Where the sampler's helpers end and its kernel begins: helpers a variant adds go before it.
SAMPLING_NAMESPACE_END = "}  // namespace\n\n// logits: [batch_size, vocab_size];"
SAMPLING_CHUNKS = """// Runs body(base, v) over a warp's segment [begin, end), 128 logits (4 a lane, loaded by
// load(base, v, valid)) at a time, in order, the next chunk's load issued before the body runs.
template <class Load, class Body>
__device__ __forceinline__ void for_each_chunk(int begin, int end, const Load& load, Body&& body) {
  if (begin >= end) return;
  float v[4];
  int valid;
  load(begin, v, valid);
  for (int base = begin; base < end; base += 128) {
    float next[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (base + 128 < end) load(base + 128, next, valid);
    body(base, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = next[j];
  }
}

}  // namespace

// logits: [batch_size, vocab_size];"""


def sampling_loop(indent):
    """The head of a pass over the warp's segment, at `indent`."""
    return (f"{indent}for (int base = seg_begin; base < seg_end; base += 128) {{\n"
            f"{indent}  float v[4];\n{indent}  int valid;\n{indent}  load_chunk(base, v, valid);\n")


SAMPLING_LOAD_AHEAD = [
    (SAMPLING_NAMESPACE_END, SAMPLING_CHUNKS),
    ("  float z_row[1] = {0.0f};\n" + sampling_loop("  "),
     "  float z_row[1] = {0.0f};\n"
     "  for_each_chunk(seg_begin, seg_end, load_chunk, [&](int, const float(&v)[4]) {\n"),
    ("    }\n  }\n  block_sums(z_row, s);", "    }\n  });\n  block_sums(z_row, s);"),
    ("    int stored = 0;\n" + sampling_loop("    "),
     "    int stored = 0;\n"
     "    for_each_chunk(seg_begin, seg_end, load_chunk, [&](int base, const float(&v)[4]) {\n"),
    ("      stored += chunk_total;\n    }\n", "      stored += chunk_total;\n    });\n"),
]


# The sampler with a row split over a thread-block cluster at small batches: 8 blocks a row up to
# 16 rows, 4 up to 33, 2 up to 66 (about one wave of 132 SMs), one block beyond. Warp w's segment
# of the row is cut into one piece per block, in rank order; every block runs the max and
# histogram passes over its pieces and sums its peers' results through distributed shared memory
# (in rank order, so every block reaches the same cutoff bit for bit); each collects its pieces'
# candidates, and the first block appends its peers' lists to its own (vocabulary order) and runs
# the thresholds and the draw alone. Rows without filters, or whose candidates do not fit, are
# the first block's alone after the max (the global-memory path, as in the reference).
SAMPLING_LAUNCH = ("// @launch top_k_top_p_sampling_kernel<<<batch_size, 512>>>(logits, "
                   "uniform_samples, top_k, top_p, samples, vocab_size)")
SAMPLING_ARGS = "(logits, uniform_samples, top_k, top_p, samples, vocab_size)"


def sampling_cluster_launches():
    lines = []
    for size, low, high in ((8, 0, 16), (4, 16, 33), (2, 33, 66), (1, 66, None)):
        bound = f"batch_size > {low}" + (f" && batch_size <= {high}" if high else "")
        lines.append(f"// @launch if ({bound}) top_k_top_p_sampling_kernel<{size}><<<batch_size"
                     f"{f' * {size}' if size > 1 else ''}, 512>>>{SAMPLING_ARGS}")
        if size > 1:
            lines.append(f"// @cluster top_k_top_p_sampling_kernel<{size}> ({size}, 1, 1)")
    return "\n".join(lines)


# What the cluster form adds before the kernel (what its blocks exchange, conv2d_3x3's cluster
# barrier and peer address, the peer loads): the reference's own text, which the one-block form
# (SAMPLING_ONE_BLOCK) takes out and the cluster variants below put back.
SAMPLING_CLUSTER_HELPERS = span(SAMPLING, "// What the blocks of a cluster exchange.",
                                SAMPLING_NAMESPACE_END) + SAMPLING_NAMESPACE_END

SAMPLING_CLUSTER = [
    (SAMPLING_LAUNCH, sampling_cluster_launches()),
    (SAMPLING_NAMESPACE_END, SAMPLING_CLUSTER_HELPERS),
    ('extern "C" __global__ void __launch_bounds__(kThreads)\n    top_k_top_p_sampling_kernel(',
     "template <int kCluster>\n__global__ void __launch_bounds__(kThreads)\n"
     "    top_k_top_p_sampling_kernel("),
    ("  __shared__ Shared s;\n",
     "  __shared__ Shared s;\n  __shared__ ClusterShared cs;\n"
     "  const int rank = kCluster > 1 ? static_cast<int>(cluster_rank()) : 0;\n"
     "  const int row_index = static_cast<int>(blockIdx.x) / kCluster;\n"),
    ("static_cast<size_t>(blockIdx.x) * static_cast<size_t>(vocab_size)",
     "static_cast<size_t>(row_index) * static_cast<size_t>(vocab_size)"),
    ("top_k[blockIdx.x]", "top_k[row_index]"),
    ("top_p[blockIdx.x]", "top_p[row_index]"),
    ("uniform_samples[blockIdx.x]", "uniform_samples[row_index]"),
    ("samples[blockIdx.x] = token", "samples[row_index] = token"),
    ("  const int seg_begin = min(vocab_size, warp * segment);\n"
     "  const int seg_end = min(vocab_size, seg_begin + segment);\n",
     "  // This block's piece of it (pieces of whole chunks, in rank order).\n"
     "  const int piece = (segment / 128 + kCluster - 1) / kCluster * 128;\n"
     "  const int warp_end = min(vocab_size, warp * segment + segment);\n"
     "  const int seg_begin = min(warp_end, warp * segment + rank * piece);\n"
     "  const int seg_end = min(warp_end, seg_begin + piece);\n"),
    ("  m = block_max(m, s);\n\n  Lists lists{row, vocab_size, segment, nullptr};\n"
     "  if (!k_active && !p_active) {\n",
     "  m = block_max(m, s);\n"
     "  if constexpr (kCluster > 1) {\n"
     "    if (threadIdx.x == 0) cs.value = m;\n"
     "    cluster_sync();\n"
     "    for (int r = 0; r < kCluster; ++r) m = fmaxf(m, load_peer(&cs.value, r));\n"
     "  }\n\n"
     "  Lists lists{row, vocab_size, segment, nullptr};\n"
     "  if (!k_active && !p_active) {\n"
     "    if constexpr (kCluster > 1) {\n"
     "      cluster_sync();  // every peer's max read: the others may leave\n"
     "      if (rank != 0) return;\n"
     "    }\n"),
    ("  const float z = z_row[0];\n",
     "  float z = z_row[0];\n"
     "  if constexpr (kCluster > 1) {\n"
     "    // The row's histogram and mass, summed over the cluster in rank order by every block.\n"
     "    if (threadIdx.x == 0) cs.z = z;\n"
     "    cluster_sync();\n"
     "    const int w = threadIdx.x / kBuckets, b = threadIdx.x % kBuckets;\n"
     "    int total = 0;\n"
     "    float mass = 0.0f;\n"
     "    z = 0.0f;\n"
     "    for (int r = 0; r < kCluster; ++r) {\n"
     "      total += load_peer(&s.histogram_count[w][b], r);\n"
     "      mass += load_peer(&s.histogram_mass[w][b], r);\n"
     "      z += load_peer(&cs.z, r);\n"
     "    }\n"
     "    cs.total_count[w][b] = total;\n"
     "    cs.total_mass[w][b] = mass;\n"
     "    __syncthreads();\n"
     "  }\n"
     "  const auto& histogram_count = kCluster > 1 ? cs.total_count : s.histogram_count;\n"
     "  const auto& histogram_mass = kCluster > 1 ? cs.total_mass : s.histogram_mass;\n"),
    ("        warp_counts[w] += s.histogram_count[w][b];\n"
     "        count += static_cast<float>(s.histogram_count[w][b]);\n"
     "        mass += s.histogram_mass[w][b];\n",
     "        warp_counts[w] += histogram_count[w][b];\n"
     "        count += static_cast<float>(histogram_count[w][b]);\n"
     "        mass += histogram_mass[w][b];\n"),
    ("  unsigned int threshold = 0u;\n  if (cutoff >= 0) {\n",
     "  unsigned int threshold = 0u;\n"
     "  if constexpr (kCluster > 1) {\n"
     "    if (cutoff < 0) {  // the whole row from global memory: the first block's work\n"
     "      cluster_sync();  // every peer's histogram read\n"
     "      if (rank != 0) return;\n"
     "    }\n"
     "  }\n"
     "  if (cutoff >= 0) {\n"),
    ("    if (lane == 0) s.count[warp] = stored;\n    __syncthreads();\n    lists.shared = &s;\n",
     "    if (lane == 0) s.count[warp] = stored;\n"
     "    __syncthreads();\n"
     "    if constexpr (kCluster > 1) {\n"
     "      // The first block appends its peers' lists to its own, in rank order. The cutoff\n"
     "      // held every warp's summed count within kWarpCapacity.\n"
     "      cluster_sync();\n"
     "      if (rank == 0) {\n"
     "        int total = s.count[warp];\n"
     "        for (int r = 1; r < kCluster; ++r) {\n"
     "          const int n = load_peer(&s.count[warp], r);\n"
     "          for (int i = lane; i < n; i += 32) {\n"
     "            s.logit[warp][total + i] = load_peer(&s.logit[warp][i], r);\n"
     "            s.token[warp][total + i] = load_peer(&s.token[warp][i], r);\n"
     "          }\n"
     "          total += n;\n"
     "        }\n"
     "        __syncwarp();\n"
     "        if (lane == 0) s.count[warp] = total;\n"
     "      }\n"
     "      cluster_sync();  // the peers' lists read: they may leave\n"
     "      if (rank != 0) return;\n"
     "    }\n"
     "    lists.shared = &s;\n"),
]


# The sampler's rows split over a cluster (the above) is the reference; its inverse, every
# substitution undone in reverse order, is the one-block-a-row kernel the other sampler variants
# were written against.
SAMPLING_ONE_BLOCK = [(new, old) for old, new in reversed(SAMPLING_CLUSTER)]

# The sampler's thresholds over the candidates' keys sorted (a bitonic sort of up to 4096 keys in
# 16 KiB of dynamic shared memory, descending) instead of two 11-step searches over the key space:
# the top-k threshold is the k-th key, the top-p threshold the key of the last entry whose
# exclusive prefix of kept mass (a block scan in sorted order) is below p * Z_K. The same
# thresholds as the searches (up to the order of the fp32 sums); rows on the global-memory path
# keep the searches.
# Applied after the cluster variant's substitutions when combined (its launch lines are edited).
SAMPLING_SORT_HELPERS = """// The candidates' keys, sorted (the sorted-thresholds variant): at most every list full.
constexpr int kSortCapacity = kWarps * kWarpCapacity;

// The logit whose key_of is `key` (+0 for the key of zero).
__device__ __forceinline__ float logit_of(unsigned int key) {
  return __uint_as_float((key & 0x80000000u) != 0u ? (key & 0x7fffffffu) : ~key);
}

// Writes the keys of every candidate (the shared lists) to keys[0, n) sorted in descending order
// and returns n; keys[n, size) hold 0, below the key of any finite logit, size the smallest power
// of two >= max(n, 64).
__device__ int sort_candidate_keys(const Shared& s, unsigned int* keys) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int offset = 0, n = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) offset = n;
    n += s.count[w];
  }
  for (int i = lane; i < s.count[warp]; i += 32) keys[offset + i] = key_of(s.logit[warp][i]);
  int size = 64;
  while (size < n) size <<= 1;
  for (int i = n + static_cast<int>(threadIdx.x); i < size; i += kThreads) keys[i] = 0u;
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int partner = i ^ j;
        if (partner > i) {
          const unsigned int a = keys[i], b = keys[partner];
          // Runs of k keys alternate in direction; the last run (k = size) is descending.
          if ((i & k) == 0 ? a < b : a > b) {
            keys[i] = b;
            keys[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  return n;
}

// What smallest_key_below(lists, base, target, true, m, s) finds, over the sorted keys[0, n):
// the key of the last entry whose exclusive prefix of exp(l - m) over the keys >= base is below
// target (a tie group's first entry has the smallest prefix and the same key); 0 when the whole
// kept mass is below target, 0xffffffff when target <= 0.
__device__ unsigned int top_p_key(const unsigned int* keys, int n, unsigned int base, float target,
                                  float m, Shared& s) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int per = (n + kThreads - 1) / kThreads;
  const int begin = min(n, static_cast<int>(threadIdx.x) * per);
  const int end = min(n, begin + per);
  float mine = 0.0f;
  for (int i = begin; i < end; ++i) {
    if (keys[i] >= base) mine += __expf(logit_of(keys[i]) - m);
  }
  // Exclusive prefix of the threads' sums, in thread order.
  float inclusive = mine;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const float other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) s.reduce[warp][0] = inclusive;
  __syncthreads();
  float before = inclusive - mine, total = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += s.reduce[w][0];
    total += s.reduce[w][0];
  }
  int last = -1;
  for (int i = begin; i < end && keys[i] >= base; ++i) {
    if (before < target) last = i;  // within a tie group the key is the same
    before += __expf(logit_of(keys[i]) - m);
  }
  __syncthreads();  // every read of s.reduce done
  last = __reduce_max_sync(0xffffffffu, last);
  if (lane == 0) s.reduce[warp][0] = __int_as_float(last);
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) last = max(last, __float_as_int(s.reduce[w][0]));
  __syncthreads();
  if (!(target > 0.0f)) return 0xffffffffu;
  if (total < target) return 0u;
  return keys[last];
}

}  // namespace

// logits: [batch_size, vocab_size];"""

SAMPLING_SORTED = [
    ("512>>>(logits, uniform_samples", "512, 16384>>>(logits, uniform_samples"),
    (SAMPLING_NAMESPACE_END, SAMPLING_SORT_HELPERS),
    ("  __shared__ Shared s;\n",
     "  __shared__ Shared s;\n  extern __shared__ unsigned int sorted_keys[];  // kSortCapacity\n"),
    ("  float z_k = z;\n  if (k_active) {\n"
     "    threshold = smallest_key_below(lists, 0u, static_cast<float>(k_raw), false, m, s);\n"
     "    z_k = kept_mass(lists, threshold, m, s);\n  }\n"
     "  if (p_active) threshold = smallest_key_below(lists, threshold, p * z_k, true, m, s);\n",
     "  float z_k = z;\n"
     "  if (lists.shared != nullptr) {\n"
     "    const int n = sort_candidate_keys(s, sorted_keys);\n"
     "    if (k_active) {\n"
     "      threshold = sorted_keys[min(k_raw, n) - 1];\n"
     "      z_k = kept_mass(lists, threshold, m, s);\n"
     "    }\n"
     "    if (p_active) threshold = top_p_key(sorted_keys, n, threshold, p * z_k, m, s);\n"
     "  } else {\n"
     "    if (k_active) {\n"
     "      threshold = smallest_key_below(lists, 0u, static_cast<float>(k_raw), false, m, s);\n"
     "      z_k = kept_mass(lists, threshold, m, s);\n"
     "    }\n"
     "    if (p_active) threshold = smallest_key_below(lists, threshold, p * z_k, true, m, s);\n"
     "  }\n"),
]

# The sampler with every warp's candidate list in one pool of 6144 entries (48 KiB of dynamic
# shared memory) instead of 256 entries a warp: a row takes the global-memory path only when its
# candidates in all exceed the pool, not when one warp's sixteenth of the row exceeds 256. On the
# visible cases' distributions a top-p 0.95 row of 152k logits overflows a warp's 256 about 3 % of
# the time (bench/gpu/sampling_capacity.py), and a call is as slow as its slowest row: the
# reference's batch_256 time depends on the draw (238 us by crucible, 682 us in the parity
# harness on other draws of the same distributions, h200_parity.json). Two blocks of 512
# threads an SM, as before (64 registers a thread), take 2 x 53 KiB.
SAMPLING_POOLED = [
    ("512>>>(logits, uniform_samples", "512, 49152>>>(logits, uniform_samples"),
    ("// Candidate logits each warp may keep in shared memory (16 x 256 x 8 bytes = 32 KiB).\n"
     "constexpr int kWarpCapacity = 256;\n",
     "// Candidates the block may keep, every warp's list in one pool of dynamic shared memory\n"
     "// (6144 x 8 bytes = 48 KiB, the launch's third argument): kCapacity logits, then kCapacity\n"
     "// token ids.\n"
     "constexpr int kCapacity = 6144;\n"
     "extern __shared__ float candidate_pool[];\n"
     "__device__ __forceinline__ float& pool_logit(int i) { return candidate_pool[i]; }\n"
     "__device__ __forceinline__ int& pool_token(int i) {\n"
     "  return reinterpret_cast<int*>(candidate_pool + kCapacity)[i];\n"
     "}\n"),
    ("  float logit[kWarps][kWarpCapacity];\n  int token[kWarps][kWarpCapacity];\n",
     "  int begin[kWarps];                  // where each warp's list starts in the pool\n"),
    ("shared != nullptr ? shared->logit[w][i] : row[w * segment + i]",
     "shared != nullptr ? pool_logit(shared->begin[w] + i) : row[w * segment + i]"),
    ("shared != nullptr ? shared->token[w][i] : w * segment + i",
     "shared != nullptr ? pool_token(shared->begin[w] + i) : w * segment + i"),
    ("  int cutoff = -1;\n  {\n",
     "  int cutoff = -1;\n"
     "  int list_begin = 0, list_room = 0;  // this warp's region of the pool\n  {\n"),
    ("      bool fits = true;\n", ""),
    ("        fits = fits && warp_counts[w] <= kWarpCapacity;\n      }\n      if (!fits) break;\n",
     "      }\n      if (count > static_cast<float>(kCapacity)) break;\n"),
    ("      if (holds) cutoff = b;\n    }\n  }\n",
     "      if (holds) cutoff = b;\n    }\n"
     "    // The lists in warp order: this warp's starts after the candidates of the warps before\n"
     "    // it (the histogram counted exactly what the collection takes).\n"
     "#pragma unroll\n"
     "    for (int w = 0; w < kWarps; ++w) {\n"
     "      list_begin += w < warp ? warp_counts[w] : 0;\n"
     "      list_room += w == warp ? warp_counts[w] : 0;\n"
     "    }\n"
     "  }\n"),
    ("        if (take[j]) {\n          s.logit[warp][slot] = v[j];\n"
     "          s.token[warp][slot] = base + lane * 4 + j;\n",
     "        if (take[j] && slot < list_room) {\n"
     "          pool_logit(list_begin + slot) = v[j];\n"
     "          pool_token(list_begin + slot) = base + lane * 4 + j;\n"),
    ("    if (lane == 0) s.count[warp] = stored;\n",
     "    if (lane == 0) {\n      s.count[warp] = stored;\n      s.begin[warp] = list_begin;\n"
     "      s.room[warp] = list_room;\n    }\n"),
    ("  int begin[kWarps];                  // where each warp's list starts in the pool\n",
     "  int begin[kWarps];                  // where each warp's list starts in the pool\n"
     "  int room[kWarps];                   // and the entries its region holds\n"),
    ("    lists.shared = &s;\n",
     "    // A list longer than its region (the collection took more than the histogram counted)\n"
     "    // was cut short: the row takes the global-memory path instead of a partial list.\n"
     "    bool overflow = false;\n"
     "    for (int w = 0; w < kWarps; ++w) overflow = overflow || s.count[w] > s.room[w];\n"
     "    if (!overflow) lists.shared = &s;\n"),
]

# The pool combined with the cluster variant and the sorted thresholds. Every block of a cluster
# sums the same histogram, so every block lays its lists out at the same places in its pool (each
# warp's region holds the cluster's candidates of that warp's segment); the first block appends
# its peers' lists behind its own in each region. The sorted keys follow the pool in dynamic
# shared memory (8192 keys, a power of two above the pool's 6144: 80 KiB in all).
SAMPLING_CLUSTER_POOLED = SAMPLING_CLUSTER[:-1] + [
    (SAMPLING_CLUSTER[-1][0],
     SAMPLING_CLUSTER[-1][1]
     .replace("The cutoff\n      // held every warp's summed count within kWarpCapacity.",
              "The cutoff\n      // held the row's candidates within kCapacity.")
     .replace("            s.logit[warp][total + i] = load_peer(&s.logit[warp][i], r);\n"
              "            s.token[warp][total + i] = load_peer(&s.token[warp][i], r);\n",
              "            if (total + i >= list_room) break;\n"
              "            pool_logit(list_begin + total + i) = "
              "load_peer(&pool_logit(list_begin + i), r);\n"
              "            pool_token(list_begin + total + i) = "
              "load_peer(&pool_token(list_begin + i), r);\n"))]
assert SAMPLING_CLUSTER_POOLED[-1][1] != SAMPLING_CLUSTER[-1][1]

SAMPLING_SORT_HELPERS_POOLED = (
    SAMPLING_SORT_HELPERS
    .replace("// The candidates' keys, sorted (the sorted-thresholds variant): at most every list "
             "full.\nconstexpr int kSortCapacity = kWarps * kWarpCapacity;\n",
             "// The candidates' keys, sorted (the sorted-thresholds variant): a power of two >= "
             "the\n// pool.\n"
             "constexpr int kSortCapacity = 8192;\n"
             "static_assert(kSortCapacity >= kCapacity, \"every candidate's key\");\n")
    .replace("  for (int i = lane; i < s.count[warp]; i += 32) keys[offset + i] = "
             "key_of(s.logit[warp][i]);\n",
             "  for (int i = lane; i < s.count[warp]; i += 32) {\n"
             "    keys[offset + i] = key_of(pool_logit(s.begin[warp] + i));\n"
             "  }\n"))
assert SAMPLING_SORT_HELPERS_POOLED.count("pool_logit") == 1
assert "kSortCapacity = 8192" in SAMPLING_SORT_HELPERS_POOLED

SAMPLING_SORTED_POOLED = [
    ("512, 49152>>>(logits, uniform_samples", "512, 81920>>>(logits, uniform_samples"),
    (SAMPLING_SORTED[1][0], SAMPLING_SORT_HELPERS_POOLED),
    ("  __shared__ Shared s;\n",
     "  __shared__ Shared s;\n"
     "  // The sorted keys (kSortCapacity), after the pool in dynamic shared memory.\n"
     "  unsigned int* const sorted_keys =\n"
     "      reinterpret_cast<unsigned int*>(candidate_pool + 2 * kCapacity);\n"),
    SAMPLING_SORTED[3],
]

# diffusion/attention with three stages of key and value tiles instead of two (7 tiles of 32 KiB:
# 230528 bytes of shared memory, within the 232448 a block may have). With cp.async producers a
# third stage changed nothing (h200_reference_variants_attention.json); the TMA producer is one
# thread, so the stages are now filled as fast as the memory system allows.
DIT = "kernels/diffusion/attention.cu"
DIT_THREE_STAGES = [("constexpr int kStages = 2;", "constexpr int kStages = 3;"),
                    ("164992", "230528")]


# diffusion/attention with key and value tiles of 176 rows instead of 128 (FlashAttention-3's
# tile at head size 128): S = Q K^T is wgmma.m64n176k16 (88 accumulator registers a thread), P V
# 11 k16 steps a tile, 27 % fewer tiles and so fewer turns, barriers and rescales per key. The
# query tile keeps its 128 rows (32 KiB); two stages of 44 KiB key and value tiles: 214144 bytes.
# The registers: producer 40, consumers 232 (the consumers' increase, 256 x 64, is what the
# producer gives back, 128 x 128).
def wgmma_operands(registers):
    """The `{%0, ..., %N-1}` list of an accumulator of `registers` and its "+f" operands."""
    names = ", ".join(f"%{i}" for i in range(registers))
    outputs = ", ".join(f'"+f"(d[{i}])' for i in range(registers))
    return "{" + names + "}", outputs


def dit_wide_scores(columns):
    registers = columns // 2
    names, outputs = wgmma_operands(registers)
    return (f"__device__ __forceinline__ void wgmma_scores(float (&d)[{registers}], "
            "unsigned long long a_desc,\n"
            "                                             unsigned long long b_desc, "
            "int accumulate) {\n"
            "  asm volatile(\n"
            f'      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{registers + 2}, 0;\\n"\n'
            f'      "wgmma.mma_async.sync.aligned.m64n{columns}k16.f32.bf16.bf16 {names}, '
            f'%{registers}, %{registers + 1}, p, 1, 1, 0, 0;\\n}}\\n"\n'
            f"      : {outputs}\n"
            '      : "l"(a_desc), "l"(b_desc), "r"(accumulate));\n'
            "}\n")


def dit_scores_function():
    return span(DIT, "__device__ __forceinline__ void wgmma_scores(",
                "\n// d (64 x 128 per warpgroup, fp32) += a (64 x 16, registers)")


def deeper(pair):
    """A substitution written for code two columns shallower (the one-block-a-tile kernel, whose
    body is now inside the persistent loop): every line of both texts indented two more columns,
    preprocessor lines excepted."""
    return tuple("\n".join("  " + line if line and not line.startswith("#") else line
                           for line in text.split("\n")) for text in pair)


DIT_WIDE_KV = 176
DIT_WIDE_TILES = [
    ("constexpr int kBlockKV = 128;  ", f"constexpr int kBlockKV = {DIT_WIDE_KV};  "),
    ("constexpr int kHalfBytes = kTileBytes / 2;",
     "constexpr int kQTileBytes = kBlockQ * kHeadDim * 2;  // the query tile: 32 KiB\n"
     "constexpr int kQHalfBytes = kQTileBytes / 2;\n"
     "constexpr int kHalfBytes = kTileBytes / 2;"),
    ("static_assert((1 + 2 * kStages) * kTileBytes + kSwizzleAtomBytes + kBarrierBytes == 164992,",
     "static_assert(kQTileBytes + 2 * kStages * kTileBytes + kSwizzleAtomBytes + kBarrierBytes "
     "== 214144,"),
    ("// @tensormap key_rows key dims(128, num_heads, seq_len, batch) box(64, 1, 128, 1)",
     f"// @tensormap key_rows key dims(128, num_heads, seq_len, batch) box(64, 1, {DIT_WIDE_KV}, 1)"),
    ("// @tensormap value_rows value dims(128, num_heads, seq_len, batch) box(64, 1, 128, 1)",
     f"// @tensormap value_rows value dims(128, num_heads, seq_len, batch) "
     f"box(64, 1, {DIT_WIDE_KV}, 1)"),
    (", 384, 164992>>>", ", 384, 214144>>>"),
    (dit_scores_function(), dit_wide_scores(DIT_WIDE_KV)),
    ("  const unsigned barriers = base + (1 + 2 * kStages) * kTileBytes;",
     "  const unsigned barriers = base + kQTileBytes + 2 * kStages * kTileBytes;"),
    ("  auto k_tile = [&](int s) { return base + (1 + 2 * s) * kTileBytes; };\n"
     "  auto v_tile = [&](int s) { return base + (2 + 2 * s) * kTileBytes; };",
     "  auto k_tile = [&](int s) { return base + kQTileBytes + 2 * s * kTileBytes; };\n"
     "  auto v_tile = [&](int s) { return base + kQTileBytes + (2 * s + 1) * kTileBytes; };"),
    ("setmaxnreg.dec.sync.aligned.u32 56;", "setmaxnreg.dec.sync.aligned.u32 40;"),
    ("setmaxnreg.inc.sync.aligned.u32 224;", "setmaxnreg.inc.sync.aligned.u32 232;"),
    deeper(("    const auto load = [&](unsigned tile, const CUtensorMap& rows, int first_row, "
            "unsigned bar) {\n"
            "      arrive_expecting(bar, kTileBytes);\n"
            "      load_box(tile, rows, 0, head, first_row, sample, bar);\n"
            "      load_box(tile + kHalfBytes, rows, 64, head, first_row, sample, bar);\n"
            "    };\n",
            "    const auto load = [&](unsigned tile, const CUtensorMap& rows, int first_row, "
            "unsigned bar,\n"
            "                          int bytes) {\n"
            "      arrive_expecting(bar, bytes);\n"
            "      load_box(tile, rows, 0, head, first_row, sample, bar);\n"
            "      load_box(tile + bytes / 2, rows, 64, head, first_row, sample, bar);\n"
            "    };\n")),
    deeper(("    load(q_tile, query_rows, q0, full_q);\n",
            "    load(q_tile, query_rows, q0, full_q, kQTileBytes);\n")),
    deeper(("      load(k_tile(s), key_rows, tile * kBlockKV, full_k(s));",
     "      load(k_tile(s), key_rows, tile * kBlockKV, full_k(s), kTileBytes);")),
    deeper(("      load(v_tile(s), value_rows, tile * kBlockKV, full_v(s));",
     "      load(v_tile(s), value_rows, tile * kBlockKV, full_v(s), kTileBytes);")),
    ("  float s[64];\n", "  float s[kBlockKV / 2];\n"),
    deeper(("  for (int e = 0; e < 64; ++e) {\n    o[e] = 0.0f;\n    s[e] = 0.0f;\n  }\n",
     "  for (int e = 0; e < 64; ++e) o[e] = 0.0f;\n#pragma unroll\n"
     "  for (int e = 0; e < kBlockKV / 2; ++e) s[e] = 0.0f;\n")),
    deeper(("      const unsigned column = (kk / 4) * kHalfBytes + (kk % 4) * 32;\n"
     "      wgmma_scores(s, descriptor(q_rows + column, 16, kSwizzleAtomBytes),\n",
     "      const unsigned column = (kk / 4) * kHalfBytes + (kk % 4) * 32;\n"
     "      const unsigned q_column = (kk / 4) * kQHalfBytes + (kk % 4) * 32;\n"
     "      wgmma_scores(s, descriptor(q_rows + q_column, 16, kSwizzleAtomBytes),\n")),
    deeper(("      for (int e = 0; e < 64; ++e) {\n        if (kv0",
     "      for (int e = 0; e < kBlockKV / 2; ++e) {\n        if (kv0")),
    deeper(("for (int i = 0; i < 16; ++i) m = fmaxf(m, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));",
     "for (int i = 0; i < kBlockKV / 8; ++i) {\n"
     "        m = fmaxf(m, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));\n      }")),
    deeper(("      float sum = row_sum[r] * rescale[r];\n#pragma unroll\n      for (int i = 0; i < 16; ++i) {",
     "      float sum = row_sum[r] * rescale[r];\n#pragma unroll\n"
     "      for (int i = 0; i < kBlockKV / 8; ++i) {")),
]

# llm/flash_attn_varlen_prefill with the key and value tiles that lie wholly inside what the
# block's queries see loaded by TMA, one box per page and 64-column half (the tensor maps view
# each cache as pages of block_size rows: dims (128, num_kv_heads, block_size, num_blocks)), where
# pages tile the 128-key tile on 1024-byte boundaries (block_size a multiple of 8 dividing 128:
# every case but those of other block sizes); the last tile, cut by kv_end, keeps the cp.async
# gather with its zero fill. For those tiles the lookup writes each row's block id instead of its
# offset, and producer thread 0 issues the boxes (announcing 32 KiB on the stage's barrier) while
# the other 127 arrive plainly: the "full" barriers keep their 128 arrivals. The design notes
# name the per-row gather as the producer's bottleneck, and TMA was worth 1.05-1.06x to
# diffusion/attention, the same schedule.
PREFILL = "kernels/llm/flash_attn_varlen_prefill.cu"


def tma_helpers():
    """diffusion/attention's bulk-copy helpers (arrive_expecting, load_box), for a variant of
    another reference that loads by TMA."""
    return span("kernels/diffusion/attention.cu", "// One arrival on `bar` that also expects",
                "__device__ __forceinline__ void barrier_init")


PREFILL_MAPS = (
    "// @tensormap key_pages key_cache dims(128, num_kv_heads, block_size, num_blocks) "
    "box(64, 1, min(block_size, 128), 1) swizzle(128)\n"
    "// @tensormap value_pages value_cache dims(128, num_kv_heads, block_size, num_blocks) "
    "box(64, 1, min(block_size, 128), 1) swizzle(128)\n")
PREFILL_TMA = [
    ("// @launch prefill_attention<<<", PREFILL_MAPS + "// @launch prefill_attention<<<"),
    ("(out, query, key_cache, value_cache, block_tables, cu_seqlens_q, seq_lens, scale, num_seqs, "
     "num_heads, num_kv_heads, block_size, max_blocks_per_seq)\n",
     "(out, query, key_cache, value_cache, key_pages, value_pages, block_tables, cu_seqlens_q, "
     "seq_lens, scale, num_seqs, num_heads, num_kv_heads, block_size, max_blocks_per_seq)\n"),
    ("                      const __nv_bfloat16* __restrict__ value_cache,\n",
     "                      const __nv_bfloat16* __restrict__ value_cache,\n"
     "                      const __grid_constant__ CUtensorMap key_pages,\n"
     "                      const __grid_constant__ CUtensorMap value_pages,\n"),
    # attend_tile (the block's work, both instances) takes the maps from the kernel's parameters.
    ("const __nv_bfloat16* __restrict__ value_cache,\n    const int* __restrict__ block_tables,",
     "const __nv_bfloat16* __restrict__ value_cache,\n"
     "    const CUtensorMap& key_pages, const CUtensorMap& value_pages,\n"
     "    const int* __restrict__ block_tables,"),
    *[(f"attend_tile<{packed}>(out, query, key_cache, value_cache, block_tables,",
       f"attend_tile<{packed}>(out, query, key_cache, value_cache, key_pages, value_pages, "
       "block_tables,") for packed in ("true", "false")],
    ("// Named barriers 1 and 2 of the two consumers' turns",
     tma_helpers() + "// Named barriers 1 and 2 of the two consumers' turns"),
    ("      const int j = tile * kBlockKV + thread;\n"
     "      offsets[s * kBlockKV + thread] =\n"
     "          j < kv_end\n",
     "      const int j = tile * kBlockKV + thread;\n"
     "      // A tile wholly inside kv_end comes by TMA: its rows' block ids instead of offsets.\n"
     "      const bool boxes = paged_boxes && (tile + 1) * kBlockKV <= kv_end;\n"
     "      offsets[s * kBlockKV + thread] =\n"
     "          boxes ? static_cast<long long>(table[j / block_size])\n"
     "          : j < kv_end\n"),
    ("      if (tile >= kStages) barrier_wait(empty_k(s), reuse);\n"
     "      load_tile(k_tile(s), key_cache, thread, [&](int k) {\n"
     "        const long long offset = tile_offsets[8 * k];\n"
     "        return offset >= 0 ? key_cache + offset : nullptr;\n"
     "      });\n"
     "      arrive_when_copied(full_k(s));\n"
     "      if (tile >= kStages) barrier_wait(empty_v(s), reuse);\n"
     "      load_tile(v_tile(s), value_cache, thread, [&](int k) {\n"
     "        const long long offset = tile_offsets[8 * k];\n"
     "        return offset >= 0 ? value_cache + offset : nullptr;\n"
     "      });\n"
     "      arrive_when_copied(full_v(s));\n",
     "      // Thread 0 announces the tile's bytes and issues a box per page and half; the others\n"
     "      // arrive plainly, so the barrier still counts 128 arrivals.\n"
     "      const auto load_pages = [&](unsigned destination, const CUtensorMap& pages,\n"
     "                                  unsigned bar) {\n"
     "        if (thread != 0) {\n"
     "          barrier_arrive(bar);\n"
     "          return;\n"
     "        }\n"
     "        arrive_expecting(bar, kTileBytes);\n"
     "        for (int page = 0; page < kBlockKV / block_size; ++page) {\n"
     "          const int block = static_cast<int>(offsets[s * kBlockKV + page * block_size]);\n"
     "          const unsigned at = destination + page * block_size * 128;\n"
     "          load_box(at, pages, 0, kv_head, 0, block, bar);\n"
     "          load_box(at + kHalfBytes, pages, 64, kv_head, 0, block, bar);\n"
     "        }\n"
     "      };\n"
     "      if (tile >= kStages) barrier_wait(empty_k(s), reuse);\n"
     "      if (boxes) {\n"
     "        load_pages(k_tile(s), key_pages, full_k(s));\n"
     "      } else {\n"
     "        load_tile(k_tile(s), key_cache, thread, [&](int k) {\n"
     "          const long long offset = tile_offsets[8 * k];\n"
     "          return offset >= 0 ? key_cache + offset : nullptr;\n"
     "        });\n"
     "        arrive_when_copied(full_k(s));\n"
     "      }\n"
     "      if (tile >= kStages) barrier_wait(empty_v(s), reuse);\n"
     "      if (boxes) {\n"
     "        load_pages(v_tile(s), value_pages, full_v(s));\n"
     "      } else {\n"
     "        load_tile(v_tile(s), value_cache, thread, [&](int k) {\n"
     "          const long long offset = tile_offsets[8 * k];\n"
     "          return offset >= 0 ? value_cache + offset : nullptr;\n"
     "        });\n"
     "        arrive_when_copied(full_v(s));\n"
     "      }\n"),
    ("    const int row = thread / 16;  // this thread copies rows row + 8 k of every tile\n",
     "    const int row = thread / 16;  // this thread copies rows row + 8 k of every tile\n"
     "    // Pages that tile a key tile on 1024-byte boundaries, as the 128-byte swizzle needs.\n"
     "    const bool paged_boxes = block_size % 8 == 0 && kBlockKV % block_size == 0;\n"),
]


# tma_pages with the boxes issued by the first lane of each of the producer's four warps (pages
# w, w + 4, ... of warp w) instead of thread 0 alone: a TMA instruction is one thread's, so
# thread 0 issued a tile's 16 boxes one after another, with a table read before each; here four
# threads do, each a quarter. Thread 0 still announces the tile's bytes; a box that lands before
# the announcement leaves the barrier's transaction count below zero until it comes, which the
# phase tolerates (it completes only when its arrivals are in and the count is back at zero).
# Not yet measured: the device was not lent when it was written.
PREFILL_TMA_SPREAD = PREFILL_TMA + [
    ("      // Thread 0 announces the tile's bytes and issues a box per page and half; the others\n"
     "      // arrive plainly, so the barrier still counts 128 arrivals.\n",
     "      // Thread 0 announces the tile's bytes; the first lane of each producer warp issues\n"
     "      // the boxes of every fourth page; every thread arrives once (128 arrivals).\n"),
    ("        if (thread != 0) {\n"
     "          barrier_arrive(bar);\n"
     "          return;\n"
     "        }\n"
     "        arrive_expecting(bar, kTileBytes);\n"
     "        for (int page = 0; page < kBlockKV / block_size; ++page) {\n",
     "        if (thread == 0) arrive_expecting(bar, kTileBytes);\n"
     "        if (thread % 32 != 0) {\n"
     "          barrier_arrive(bar);\n"
     "          return;\n"
     "        }\n"
     "        for (int page = thread / 32; page < kBlockKV / block_size; page += 4) {\n"),
    ("          load_box(at + kHalfBytes, pages, 64, kv_head, 0, block, bar);\n"
     "        }\n",
     "          load_box(at + kHalfBytes, pages, 64, kv_head, 0, block, bar);\n"
     "        }\n"
     "        if (thread != 0) barrier_arrive(bar);\n"),
]


# flash_attn_varlen_prefill without its packed tiles for short segments: every segment one tile
# a query head, as before the reference packed a kv head's query heads (the packed path is dead
# code then, and compiled away).
PREFILL_ONE_HEAD_A_TILE = [("  if (q_len * group <= kBlockQ) {\n", "  if (false) {\n")]


# fused_add_rms_norm_static_fp8_quant with more threads a row: the reference gives a row
# cdiv(hidden_size, 1024) warps (at least 4), four 8-element vectors a thread at 4096; at decode
# batches (a handful of rows, one block each) the row's loads and its sum are a chain of few
# threads, where FlashInfer's fused_add_rmsnorm_quant is 1.06-1.08x faster.
ADD_NORM_FP8 = "kernels/llm/fused_add_rms_norm_static_fp8_quant.cu"
ADD_NORM_FP8_THREADS = "cdiv(hidden_size, 1024) * 32"

# llm/grouped_topk's router (one warp a token) at decode sizes, where it is latency bound:
# 1.20-1.28x FlashInfer's fused_topk_deepseek there (h200_parity.json, 2026-12-05). As compiled
# (nvcc 13.0, sm_90a), each of a lane's eight sigmoids is an accurate expf and an IEEE division
# whose slow-path test is a branch, so the eight run one after another (as do the owners' eight
# weight divisions at the end); each of the k rounds scans the lane's eight choice scores
# (seven dependent compares) before its two warp reductions. fast_sigmoid takes exp2 of the
# fp32 product and an approximate reciprocal (__expf, __fdividef: within 3e-6 relative for the
# routers' logits, far inside the task's rtol of 1e-5, and 0 where the sigmoid is below 1e-38)
# and unrolls the group ranking's shuffles. sorted_lanes also sorts each lane's eight (choice,
# expert, score) triples once, descending (a 19-comparator network), so its two largest are the
# group's candidates at once and a round's candidate is the lane's head: the winner's owner
# shifts its lists by one, and lane j keeps round j's winner and writes it (one division a
# lane). In SASS (nvcc 13.0) a sorted round is two REDUX with about ten instructions between
# them, and neither variant branches in its sigmoids. Both route as float64 does under host
# emulation (test_variants.py). Not yet measured on a GPU: the device was not lent when they
# were written.
GROUPED = "kernels/llm/grouped_topk.cu"
GROUPED_FAST_SIGMOID = [
    ("__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }",
     "__device__ __forceinline__ float sigmoid(float x) {\n"
     "  return __fdividef(1.0f, 1.0f + __expf(-x));\n}"),
    ("  int rank = 0;\n  for (int q = 0; q < num_expert_group; ++q) {\n",
     "  int rank = 0;\n#pragma unroll 8\n  for (int q = 0; q < num_expert_group; ++q) {\n"),
]
GROUPED_SORT_HELPERS = """// The choice score whose order_key is `key`.
__device__ __forceinline__ float value_of_key(unsigned key) {
  return __uint_as_float((key & 0x80000000u) != 0u ? (key & 0x7fffffffu) : ~key);
}

// Puts entries i and j of (key, slot, score) in order: the larger key first, ties the lower
// slot first.
__device__ __forceinline__ void order_pair(unsigned (&key)[8], int (&slot)[8], float (&score)[8],
                                           int i, int j) {
  const bool swap = key[j] > key[i] || (key[j] == key[i] && slot[j] < slot[i]);
  const unsigned ki = key[i];
  const int si = slot[i];
  const float ci = score[i];
  key[i] = swap ? key[j] : ki;
  slot[i] = swap ? slot[j] : si;
  score[i] = swap ? score[j] : ci;
  key[j] = swap ? ki : key[j];
  slot[j] = swap ? si : slot[j];
  score[j] = swap ? ci : score[j];
}

// Sorts eight (key, slot, score) triples, the larger key first, ties the lower slot first: a
// network of 19 comparators in 6 layers.
__device__ __forceinline__ void sort8(unsigned (&key)[8], int (&slot)[8], float (&score)[8]) {
  order_pair(key, slot, score, 0, 2);
  order_pair(key, slot, score, 1, 3);
  order_pair(key, slot, score, 4, 6);
  order_pair(key, slot, score, 5, 7);
  order_pair(key, slot, score, 0, 4);
  order_pair(key, slot, score, 1, 5);
  order_pair(key, slot, score, 2, 6);
  order_pair(key, slot, score, 3, 7);
  order_pair(key, slot, score, 0, 1);
  order_pair(key, slot, score, 2, 3);
  order_pair(key, slot, score, 4, 5);
  order_pair(key, slot, score, 6, 7);
  order_pair(key, slot, score, 2, 4);
  order_pair(key, slot, score, 3, 5);
  order_pair(key, slot, score, 1, 4);
  order_pair(key, slot, score, 3, 6);
  order_pair(key, slot, score, 1, 2);
  order_pair(key, slot, score, 3, 4);
  order_pair(key, slot, score, 5, 6);
}

}  // namespace
"""
GROUPED_SORTED_SETUP = """  // The lane's (choice, expert, score) triples, the choice as its order key and the expert as
  // its index in the lane, sorted by choice, descending: key 0, below the key of any choice
  // score, marks a retired or excluded entry.
  unsigned key[kPerLane];
  int slot[kPerLane];
  float score[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    score[i] = sigmoid(logits[i]);
    key[i] = order_key(score[i] + biases[i]);
    slot[i] = i;
  }
  sort8(key, slot, score);
  float first = value_of_key(key[0]);
  float second = value_of_key(key[1]);
"""
GROUPED_SORTED_ROUNDS = """  // Round j: the warp's largest head key and, among the lanes holding it, the lowest expert
  // index, by two warp reductions; the owner retires its head (its lists move up by one) and
  // lane j keeps the winner and its score (a shuffle off the rounds' critical path).
  float my_score = 0.0f;
  int my_expert = 0;
  for (int j = 0; j < topk; ++j) {
    const unsigned top = __reduce_max_sync(0xffffffffu, key[0]);
    const unsigned expert = __reduce_min_sync(
        0xffffffffu, key[0] == top ? static_cast<unsigned>(kPerLane * lane + slot[0]) : 0xffffffffu);
    const int owner_lane = static_cast<int>(expert / kPerLane);
    const float won = __shfl_sync(0xffffffffu, score[0], owner_lane);
    if (lane == j) {
      my_score = won;
      my_expert = static_cast<int>(expert);
    }
    const bool owner = lane == owner_lane;
#pragma unroll
    for (int i = 0; i + 1 < kPerLane; ++i) {
      key[i] = owner ? key[i + 1] : key[i];
      slot[i] = owner ? slot[i + 1] : slot[i];
      score[i] = owner ? score[i + 1] : score[i];
    }
    key[kPerLane - 1] = owner ? 0u : key[kPerLane - 1];
  }
  write_row(topk_weights, topk_ids, row, topk, my_score, my_expert, renormalize,
            routed_scaling_factor);
}
"""


def grouped_sorted_lanes():
    """fast_sigmoid, the sort helpers, the sorted triples in place of the scores and top-2
    inserts, key 0 for excluded groups, and the rounds over the lanes' heads."""
    source = (ROOT / GROUPED).read_text()
    setup = source.index("  float score[kPerLane];\n  float choice[kPerLane];\n")
    top2 = "  for (int offset = 1; offset < lanes_per_group; offset *= 2) merge_top2("
    rounds = source.index("  // Round j: every lane's best remaining expert")
    return GROUPED_FAST_SIGMOID + [
        ("}  // namespace\n\n// 256 experts (DeepSeek-V3)",
         GROUPED_SORT_HELPERS + "\n// 256 experts (DeepSeek-V3)"),
        (source[setup:source.index(top2, setup)], GROUPED_SORTED_SETUP),
        ("    for (int i = 0; i < kPerLane; ++i) choice[i] = negative_infinity();\n",
         "    for (int i = 0; i < kPerLane; ++i) key[i] = 0u;\n"),
        (source[rounds:source.index("\n// Any other expert count", rounds)], GROUPED_SORTED_ROUNDS)]


# The sampler's reference with 512 candidates a warp instead of 256, the lists in 64 KiB of
# dynamic shared memory (static shared memory stops at 48 KiB): the layout, the capacity rule
# and every step as in the reference, so nothing leans on the histogram counting exactly what
# the collection takes (pooled_lists does). The visible cases' fullest warp held at most 310
# candidates over 400 drawn rows a setting (sampling_capacity_model.json): batch_256_qwen's
# top-p 0.95 rows overflow 256 in about 3 % of draws, sending a call to the global-memory path
# in 62 %, and 512 in none (the model's call overflow for this rule: 0 on every case but
# batch_64_deepseek's 2 %, top-k 1000 rows whose cutoff lies past 16 nats under any rule). Two
# blocks an SM still fit (2 x 73 KiB).
SAMPLING_WIDE_LISTS = [
    *[(f"{blocks}, 512>>>{SAMPLING_ARGS}", f"{blocks}, 512, 65536>>>{SAMPLING_ARGS}")
      for blocks in ("batch_size * 8", "batch_size * 4", "batch_size * 2", "batch_size")],
    ("// Candidate logits each warp may keep in shared memory (16 x 256 x 8 bytes = 32 KiB).\n"
     "constexpr int kWarpCapacity = 256;\n",
     "// Candidate logits each warp may keep in dynamic shared memory (16 x 512 x 8 bytes =\n"
     "// 64 KiB, the launch's third argument): every warp's logits, then every warp's token ids.\n"
     "constexpr int kWarpCapacity = 512;\n"
     "extern __shared__ float candidate_lists[];\n"
     "__device__ __forceinline__ float& list_logit(int w, int i) {\n"
     "  return candidate_lists[w * kWarpCapacity + i];\n"
     "}\n"
     "__device__ __forceinline__ int& list_token(int w, int i) {\n"
     "  int* const tokens = reinterpret_cast<int*>(candidate_lists + kWarps * kWarpCapacity);\n"
     "  return tokens[w * kWarpCapacity + i];\n"
     "}\n"),
    ("  float logit[kWarps][kWarpCapacity];\n  int token[kWarps][kWarpCapacity];\n", ""),
    ("shared->logit[w][i]", "list_logit(w, i)"),
    ("shared->token[w][i]", "list_token(w, i)"),
    ("          s.logit[warp][slot] = v[j];\n"
     "          s.token[warp][slot] = base + lane * 4 + j;\n",
     "          list_logit(warp, slot) = v[j];\n"
     "          list_token(warp, slot) = base + lane * 4 + j;\n"),
    ("            s.logit[warp][total + i] = load_peer(&s.logit[warp][i], r);\n"
     "            s.token[warp][total + i] = load_peer(&s.token[warp][i], r);\n",
     "            list_logit(warp, total + i) = load_peer(&list_logit(warp, i), r);\n"
     "            list_token(warp, total + i) = load_peer(&list_token(warp, i), r);\n"),
]


VARIANTS = [
    ("llm/paged_decode_attention", ATTENTION, "reference", []),
    ("llm/paged_decode_attention", ATTENTION, "two_waves_for_one_sequence",
     [(SINGLE, "cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 50688) * 64")]),
    ("llm/paged_decode_attention", ATTENTION, "one_wave_for_every_batch",
     [(SINGLE, "cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344) * 64")]),
    ("llm/dynamic_per_token_scaled_fp8_quant", FP8, "reference", []),
    ("llm/dynamic_per_token_scaled_fp8_quant", FP8, "ieee_division",
     [(QUOTIENT, "  (void)inverse;\n  return x / scale;")]),
    ("llm/dynamic_per_token_scaled_fp8_quant", FP8, "plain_reciprocal_product",
     [(QUOTIENT, "  (void)scale;\n  return q;")]),
    ("llm/fused_moe", MOE, "reference", []),
    ("llm/fused_moe", MOE, "column_tiles_first_for_every_layer",
     [(MOE_ORDER, "constexpr int kMFirstMaxExperts = 0;")]),
    ("llm/fused_moe", MOE, "m_blocks_first_for_every_layer",
     [(MOE_ORDER, "constexpr int kMFirstMaxExperts = 1024;")]),
    ("llm/fused_moe", MOE, "padding_warpgroups_multiply",
     [(MOE_SKIP, "constexpr bool kSkipPaddingWarpgroups = false;")]),
    ("llm/fused_moe", MOE, "prefill_on_64_row_tiles",
     [(MOE_PREFILL, "1048576 * num_experts")]),
    ("llm/fused_moe", MOE, "prefill_down_on_128_column_tiles",
     [(MOE_DOWN, "moe_gemm<false, 2, 128, 6><<<cdiv(hidden_size, 128) *")]),
    ("llm/moe_sum", SUM, "reference", []),
    ("llm/moe_sum", SUM, "blocks_of_64",
     block_size(64, (SUM_TILE, "cdiv(hidden_size, 512)),\n//   64>>>"),
                (SUM_VECTOR_TILE, "cdiv(hidden_size, 512)), 64>>>"))),
    ("llm/moe_sum", SUM, "blocks_of_256",
     block_size(256, (SUM_TILE, "cdiv(hidden_size, 2048)),\n//   256>>>"),
                (SUM_VECTOR_TILE, "cdiv(hidden_size, 2048)), 256>>>"))),
    ("llm/moe_sum", SUM, "top_2_in_the_two_slot_loop",
     [("moe_sum_fixed<2><<<dim3(num_tokens,\n//   cdiv(hidden_size, 1024)), 128>>>(input, output, "
       "hidden_size)", "moe_sum_vector<2><<<dim3(num_tokens,\n//   cdiv(hidden_size, 1024)), "
       "128>>>(input, output, topk, hidden_size)")]),
    ("llm/moe_sum", SUM, "coherent_loads",
     [("v[j] = __ldg(\n", "v[j] = *(\n"),
      ("moe_sum_vector(const __nv_bfloat16* __restrict__ input,",
       "moe_sum_vector(const __nv_bfloat16* input,")]),
    ("llm/silu_and_mul_fp8_quant", SILU_FP8, "reference", []),
    ("llm/silu_and_mul_fp8_quant", SILU_FP8, "blocks_of_64",
     block_size(64, (SILU_TILE, "<<<dim3(num_tokens, cdiv(d, 512)), 64>>>"))),
    ("llm/silu_and_mul_fp8_quant", SILU_FP8, "blocks_of_256",
     block_size(256, (SILU_TILE, "<<<dim3(num_tokens, cdiv(d, 2048)), 256>>>"))),
    ("llm/silu_and_mul_fp8_quant", SILU_FP8, "alignment_branch_at_run_time",
     [("silu_and_mul_fp8_quant_kernel<false><<<", "silu_and_mul_fp8_quant_kernel<true><<<"),
      ("  if (!kAligned) {", "  if (d % kVectorElems != 0) {")]),
    ("llm/silu_and_mul_fp8_quant", SILU_FP8, "coherent_loads",
     [("const __nv_bfloat16* __restrict__ input,", "const __nv_bfloat16* input,")]),
    ("science/hash_grid_encode", HASH, "reference", []),
    ("science/hash_grid_encode", HASH, "every_level_per_thread",
     [(HASH_FOUR, "hash_grid_encode_kernel<16><<<dim3(cdiv(num_points, 128), "
                  "cdiv(num_levels, 16)), 128>>>")]),
    ("science/hash_grid_encode", HASH, "eight_levels_per_thread",
     [(HASH_FOUR, "hash_grid_encode_kernel<8><<<dim3(cdiv(num_points, 128), "
                  "cdiv(num_levels, 8)), 128>>>")]),
    ("science/hash_grid_encode", HASH, "two_levels_per_thread",
     [(HASH_FOUR, "hash_grid_encode_kernel<2><<<dim3(cdiv(num_points, 128), "
                  "cdiv(num_levels, 2)), 128>>>")]),
    ("science/hash_grid_encode", HASH, "one_level_per_thread",
     [(HASH_FOUR, "hash_grid_encode_kernel<1><<<dim3(cdiv(num_points, 128), num_levels), 128>>>")]),
    ("science/hash_grid_encode", HASH, "blocks_of_256",
     [(HASH_FOUR, "hash_grid_encode_kernel<4><<<dim3(cdiv(num_points, 256), num_levels / 4), "
                  "256>>>"),
      ("__launch_bounds__(128)\n    hash_grid_encode_kernel", "__launch_bounds__(256)\n    "
                                                               "hash_grid_encode_kernel")]),
    ("recsys/embedding_bag", BAG, "reference", []),
    ("recsys/embedding_bag", BAG, "single_hot_in_the_general_kernel",
     [(BAG_SINGLE, "embedding_bag_kernel<16, 8><<<cdiv(num_tables * batch, 16), 256>>>(out, "
                   "weights, indices, batch, num_tables, num_rows, dim, pooling)")]),
    ("recsys/embedding_bag", BAG, "single_hot_bags_in_the_ids_order",
     [(BAG_OUT_ORDER, "  const int table = static_cast<int>(slot / batch);\n"
                      "  const int sample = static_cast<int>(slot - static_cast<long long>(table) "
                      "* batch);")]),
    ("diffusion/conv2d_3x3", CONV, "reference", []),
    ("diffusion/conv2d_3x3", CONV, "cp_async_stages", CONV_CP_ASYNC),
    ("diffusion/attention", DIT, "reference", []),
    ("diffusion/attention", DIT, "three_stages", DIT_THREE_STAGES),
    ("diffusion/attention", DIT, "wide_key_tiles", DIT_WIDE_TILES),
    ("llm/flash_attn_varlen_prefill", PREFILL, "reference", []),
    ("llm/flash_attn_varlen_prefill", PREFILL, "tma_pages", PREFILL_TMA),
    ("llm/flash_attn_varlen_prefill", PREFILL, "tma_pages_spread", PREFILL_TMA_SPREAD),
    ("llm/flash_attn_varlen_prefill", PREFILL, "one_head_a_tile", PREFILL_ONE_HEAD_A_TILE),
    ("llm/grouped_topk", GROUPED, "reference", []),
    ("llm/grouped_topk", GROUPED, "fast_sigmoid", GROUPED_FAST_SIGMOID),
    ("llm/grouped_topk", GROUPED, "sorted_lanes", grouped_sorted_lanes()),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "reference", []),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "one_block_a_row", SAMPLING_ONE_BLOCK),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "load_ahead",
     SAMPLING_ONE_BLOCK + SAMPLING_LOAD_AHEAD),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "cluster_rows_load_ahead",
     SAMPLING_ONE_BLOCK + SAMPLING_LOAD_AHEAD + SAMPLING_CLUSTER),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "sorted_thresholds",
     SAMPLING_ONE_BLOCK + SAMPLING_SORTED),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "cluster_rows_sorted_thresholds",
     SAMPLING_ONE_BLOCK + SAMPLING_LOAD_AHEAD + SAMPLING_CLUSTER + SAMPLING_SORTED),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "pooled_lists",
     SAMPLING_ONE_BLOCK + SAMPLING_POOLED),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "cluster_rows_pooled",
     SAMPLING_ONE_BLOCK + SAMPLING_LOAD_AHEAD + SAMPLING_CLUSTER_POOLED + SAMPLING_POOLED),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "wide_lists", SAMPLING_WIDE_LISTS),
    # The reference (rows over clusters, no load-ahead) with the pool; the kCluster = 1 instance
    # is batch_256_qwen's kernel.
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "reference_pooled",
     SAMPLING_ONE_BLOCK + SAMPLING_CLUSTER_POOLED + SAMPLING_POOLED),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "cluster_rows_sorted_thresholds_pooled",
     SAMPLING_ONE_BLOCK + SAMPLING_LOAD_AHEAD + SAMPLING_CLUSTER_POOLED + SAMPLING_POOLED +
     SAMPLING_SORTED_POOLED),
    ("llm/fused_add_rms_norm_static_fp8_quant", ADD_NORM_FP8, "reference", []),
    ("llm/fused_add_rms_norm_static_fp8_quant", ADD_NORM_FP8, "one_vector_a_thread",
     [(ADD_NORM_FP8_THREADS, "cdiv(hidden_size, 256) * 32")]),
    ("llm/fused_add_rms_norm_static_fp8_quant", ADD_NORM_FP8, "two_vectors_a_thread",
     [(ADD_NORM_FP8_THREADS, "cdiv(hidden_size, 512) * 32")]),
    ("llm/per_token_group_quant_fp8", GROUP_FP8, "reference", []),
    ("llm/per_token_group_quant_fp8", GROUP_FP8, "blocks_of_32",
     block_size(32, (GROUP_TILE, "cdiv(num_tokens * num_groups, 4), 32>>>"))),
    ("llm/per_token_group_quant_fp8", GROUP_FP8, "blocks_of_64",
     block_size(64, (GROUP_TILE, "cdiv(num_tokens * num_groups, 8), 64>>>"))),
    ("llm/per_token_group_quant_fp8", GROUP_FP8, "blocks_of_256",
     block_size(256, (GROUP_TILE, "cdiv(num_tokens * num_groups, 32), 256>>>"))),
    ("llm/per_token_group_quant_fp8", GROUP_FP8, "coherent_loads",
     [("per_token_group_quant_fp8_kernel(const __nv_bfloat16* __restrict__ input,",
       "per_token_group_quant_fp8_kernel(const __nv_bfloat16* input,")]),
]


def applied(path, substitutions, name):
    """The source at `path` (from the repository root) with `substitutions` made in order; a
    text no longer in the source is an error naming variant `name`, not a silent no-op."""
    source = (ROOT / path).read_text()
    for old, new in substitutions:
        if old not in source:
            sys.exit(f"{path}: the text of variant {name} is no longer in the source")
        source = source.replace(old, new)
    return source


def main():
    args = argparse.ArgumentParser(description="Print the reference design variants as eval "
                                   "samples (JSONL).")
    args.add_argument("--tasks", nargs="+", help="only these tasks' variants")
    args.add_argument("--names", nargs="+", help="only the variants of these names")
    args = args.parse_args()
    for task, path, name, substitutions in VARIANTS:
        if args.tasks and task not in args.tasks or args.names and name not in args.names:
            continue
        source = applied(path, substitutions, name)
        print(json.dumps({"task": task, "sample_id": f"{task}#{name}", "source": source}))


if __name__ == "__main__":
    main()
