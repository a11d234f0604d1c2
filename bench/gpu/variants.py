#!/usr/bin/env python3
"""Writes a JSONL of reference variants for `crucible eval`, to measure a design choice of a
reference side by side with the reference itself (each variant is scored as a candidate against
the task's reference, so its per-case time sits next to the reference's in one run).

    python3 bench/gpu/variants.py > variants.jsonl
    crucible eval variants.jsonl -o variants-eval -j 1

The variants are the ones whose figures the reference sources quote (bench/results/
h200_reference_variants.json): the partition size of paged_decode_attention and the quotient of
dynamic_per_token_scaled_fp8_quant. Each is a textual substitution in today's source; a
substitution that no longer applies is an error, not a silent no-op.
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
]


def main():
    for task, path, name, substitutions in VARIANTS:
        source = (ROOT / path).read_text()
        for old, new in substitutions:
            if old not in source:
                sys.exit(f"{path}: the text of variant {name} is no longer in the source")
            source = source.replace(old, new)
        print(json.dumps({"task": task, "sample_id": f"{task}#{name}", "source": source}))


if __name__ == "__main__":
    main()
