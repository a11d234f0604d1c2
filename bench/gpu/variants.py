#!/usr/bin/env python3
"""Writes a JSONL of reference variants for `crucible eval`, to measure a design choice of a
reference side by side with the reference itself (each variant is scored as a candidate against
the task's reference, so its per-case time sits next to the reference's in one run).

    python3 bench/gpu/variants.py > variants.jsonl
    crucible eval variants.jsonl -o variants-eval -j 1

The variants are the ones whose figures the reference sources quote (bench/results/
h200_reference_variants.json): the partition size of paged_decode_attention, the quotient of
dynamic_per_token_scaled_fp8_quant, fused_moe's block order and prefill tile height, and the
block sizes of moe_sum, silu_and_mul_fp8_quant and per_token_group_quant_fp8, and the kernels
of conv2d_3x3 (among them its stages filled by the tensor memory accelerator through
@tensormap descriptors, bench/gpu/conv2d_3x3_tma.cu) and diffusion/attention's tiles loaded the
same way, and the sampler's histogram window. Each is
a textual substitution in today's source; a substitution that no longer applies is an error, not
a silent no-op. `--tasks ID ...` keeps the variants of those tasks only.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

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


# diffusion/conv2d_3x3's kernels: the 256-row tiles on the in-step kernel (every thread copies
# and multiplies, one block barrier a K tile) instead of the warp-specialised one, and the 32 x 32
# layers on the in-step kernel's 128-row tiles instead of 256-row tiles with K split over a
# 2-block cluster.
CONV = "kernels/diffusion/conv2d_3x3.cu"
CONV_SPECIALIZED = ("conv2d_3x3_specialized<256, 4, 1><<<cdiv(batch * height * width, 256) * "
                    "cdiv(out_channels, 160), 512, 214144>>>")
CONV_SPLIT = ("conv2d_3x3_specialized<256, 4, 2><<<cdiv(batch * height * width, 256) * "
              "cdiv(out_channels, 160) * 2, 512, 214144>>>")


# The same layers with the specialised kernel's stages filled by the tensor memory accelerator
# (bench/gpu/conv2d_3x3_tma.cu, appended to the source) where its boxes fit: 64-channel slices and
# tiles of whole rows of one image. The other layers keep the reference's kernels.
CONV_TILES = "cdiv(batch * height * width, 256) * cdiv(out_channels, 160)"
CONV_TMA_FITS = "in_channels % 64 == 0 && 256 % width == 0 && height * width % 256 == 0"
CONV_TMA_ARGS = ("(out, input_rows, weight_taps, bias, batch, height, width, in_channels, "
                 "out_channels)")
CONV_TMA_LAUNCHES = (
    "// @tensormap input_rows input dims(in_channels, width, height, batch) "
    "box(64, width, 256 / width, 1) swizzle(128)\n"
    "// @tensormap weight_taps weight dims(in_channels, 9, out_channels) box(64, 1, 160) "
    "swizzle(128)\n"
    f"// @launch if ({CONV_TMA_FITS} && {CONV_TILES} >= 128)\n"
    f"//     conv2d_3x3_tma<256, 4, 1><<<{CONV_TILES}, 512, 214144>>>{CONV_TMA_ARGS}\n"
    f"// @launch if ({CONV_TMA_FITS} && {CONV_TILES} < 128 && {CONV_TILES} >= 64)\n"
    f"//     conv2d_3x3_tma<256, 4, 2><<<{CONV_TILES} * 2, 512, 214144>>>{CONV_TMA_ARGS}\n"
    "// @cluster conv2d_3x3_tma<256, 4, 2> (2, 1, 1)\n")
CONV_LAST = "                                            out_channels, kProducerThreads, produce);\n}\n"


def tma_fragment(name):
    """bench/gpu/tma_copies.cu, then bench/gpu/NAME: the code a TMA variant appends."""
    return "".join((ROOT / "bench/gpu" / part).read_text() + "\n" for part in ("tma_copies.cu", name))


def conv_tma():
    """The substitutions of the conv2d_3x3 TMA variant."""
    kernel = tma_fragment("conv2d_3x3_tma.cu")
    return [
        (f"// @launch if (in_channels % 8 == 0 && {CONV_TILES} >= 128)\n",
         CONV_TMA_LAUNCHES + f"// @launch if (!({CONV_TMA_FITS}) && in_channels % 8 == 0 && "
                             f"{CONV_TILES} >= 128)\n"),
        (f"// @launch if (in_channels % 8 == 0 && {CONV_TILES} < 128 && ",
         f"// @launch if (!({CONV_TMA_FITS}) && in_channels % 8 == 0 && {CONV_TILES} < 128 && "),
        (CONV_LAST, CONV_LAST + "\n" + kernel),
    ]


# diffusion/attention with its query, key and value tiles loaded by the TMA: one producer thread
# issues two boxes (the 64-column halves of 128 rows of one head, rows past seq_len read as
# zeros) a tile instead of 128 threads' cp.async copies, in the same 128-byte swizzled layout.
DIT = "kernels/diffusion/attention.cu"
DIT_MAPS = "".join(
    f"// @tensormap {name}_rows {name} dims(128, num_heads, seq_len, batch) box(64, 1, 128, 1) "
    "swizzle(128)\n" for name in ("query", "key", "value"))
DIT_LAUNCH = "(out, query, key, value, scale, seq_len, num_heads)\n"
DIT_PARAMS = ("const __nv_bfloat16* __restrict__ query,\n"
              "                      const __nv_bfloat16* __restrict__ key,\n"
              "                      const __nv_bfloat16* __restrict__ value, float scale")
DIT_PRODUCER_START = "    const int thread = static_cast<int>(threadIdx.x);\n    load_tile(q_tile,"
DIT_PRODUCER_END = "    asm volatile(\"cp.async.wait_all;\\n\" ::: \"memory\");\n    return;\n  }\n"
DIT_TMA_PRODUCER = """    if (threadIdx.x != 0) return;
    const int head = static_cast<int>(blockIdx.y);
    const int sample = static_cast<int>(blockIdx.z);
    const auto load = [&](unsigned tile, const CUtensorMap& rows, int first_row, unsigned bar) {
      arrive_expecting(bar, kTileBytes);
      load_box(tile, rows, 0, head, first_row, sample, bar);
      load_box(tile + kHalfBytes, rows, 64, head, first_row, sample, bar);
    };
    load(q_tile, query_rows, q0, full_q);
    for (int tile = 0; tile < kv_tiles; ++tile) {
      const int s = tile % kStages;
      const unsigned reuse = ((tile / kStages) + 1) & 1;  // parity of the consumers' release
      if (tile >= kStages) barrier_wait(empty_k(s), reuse);
      load(k_tile(s), key_rows, tile * kBlockKV, full_k(s));
      if (tile >= kStages) barrier_wait(empty_v(s), reuse);
      load(v_tile(s), value_rows, tile * kBlockKV, full_v(s));
    }
    return;
  }
"""


def attention_tma():
    """The substitutions of the diffusion/attention TMA variant."""
    source = (ROOT / DIT).read_text()
    start = source.index(DIT_PRODUCER_START)
    producer = source[start:source.index(DIT_PRODUCER_END, start) + len(DIT_PRODUCER_END)]
    return [
        ("// @launch attention_forward<<<", DIT_MAPS + "// @launch attention_forward<<<"),
        (DIT_LAUNCH, "(out, query_rows, key_rows, value_rows, scale, seq_len, num_heads)\n"),
        (DIT_PARAMS, "const __grid_constant__ CUtensorMap query_rows,\n"
                     "                      const __grid_constant__ CUtensorMap key_rows,\n"
                     "                      const __grid_constant__ CUtensorMap value_rows, "
                     "float scale"),
        ("    barrier_init(full_q, 128);", "    barrier_init(full_q, 1);"),
        ("      barrier_init(full_k(s), 128);\n      barrier_init(full_v(s), 128);",
         "      barrier_init(full_k(s), 1);\n      barrier_init(full_v(s), 1);"),
        (producer, DIT_TMA_PRODUCER),
        ("// out, query, key, value: [batch, seq_len, num_heads, 128] bf16",
         (ROOT / "bench/gpu/tma_copies.cu").read_text() +
         "\n// out, query, key, value: [batch, seq_len, num_heads, 128] bf16"),
    ]


# llm/top_k_top_p_sampling_from_logits's histogram over 8 nats below the max instead of 16: at
# std-4 logits about a third of a 128k row lies within 16 nats of its max and pays a
# shared-memory atomic in the histogram pass, about 1100 logits within 8 (enough for k <= 1000
# but not for a p = 0.95 nucleus, whose rows then take the global-memory path: correct, slower).
SAMPLING = "kernels/llm/top_k_top_p_sampling_from_logits.cu"
SAMPLING_BUCKETS = "constexpr int kBuckets = 32;"


def block_size(threads, *tiles):
    """kThreads and every launch's tile: (text, new text) pairs."""
    return [(THREADS, f"constexpr int kThreads = {threads};"), *tiles]


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
    ("diffusion/conv2d_3x3", CONV, "256_row_tiles_in_step",
     [(CONV_SPECIALIZED, "conv2d_3x3_kernel<256, 4, true><<<cdiv(batch * height * width, 256) * "
                         "cdiv(out_channels, 160), 256, 214016>>>")]),
    ("diffusion/conv2d_3x3", CONV, "small_images_on_128_row_tiles_in_step",
     [(CONV_SPLIT, "conv2d_3x3_kernel<128, 5, true><<<cdiv(batch * height * width, 128) * "
                   "cdiv(out_channels, 160), 256, 185344>>>"),
      ("// @cluster conv2d_3x3_specialized<256, 4, 2> (2, 1, 1)\n", "")]),
    ("diffusion/conv2d_3x3", CONV, "tma_stages", conv_tma()),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "reference", []),
    ("llm/top_k_top_p_sampling_from_logits", SAMPLING, "histogram_over_8_nats",
     [(SAMPLING_BUCKETS, "constexpr int kBuckets = 16;")]),
    ("diffusion/attention", DIT, "reference", []),
    ("diffusion/attention", DIT, "tma_tiles", attention_tma()),
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


def main():
    only = sys.argv[sys.argv.index("--tasks") + 1:] if "--tasks" in sys.argv else None
    for task, path, name, substitutions in VARIANTS:
        if only is not None and task not in only:
            continue
        source = (ROOT / path).read_text()
        for old, new in substitutions:
            if old not in source:
                sys.exit(f"{path}: the text of variant {name} is no longer in the source")
            source = source.replace(old, new)
        print(json.dumps({"task": task, "sample_id": f"{task}#{name}", "source": source}))


if __name__ == "__main__":
    main()
