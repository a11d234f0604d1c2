"""The capture is self-consistent: every recorded output equals a float64 recomputation of its
op from the recorded inputs; the provenance describes the bytes; KV-cache state carries over."""

import json
import os

import pytest

from conftest import COMMITTED, STORIES, TORCH_REASON

torch = pytest.importorskip("torch", reason=TORCH_REASON)

from oracle import check_group, group_paths  # noqa: E402
from tasks.capture import __main__ as cli  # noqa: E402
from tasks.capture.capture import OPS, CaptureSettings, run_capture, write_run  # noqa: E402
from tasks.capture.loaders import file_sha256  # noqa: E402
from tasks.capture.safetensors_io import read_safetensors  # noqa: E402

PROVENANCE_KEYS = {"format", "tool", "model", "generation", "phase", "step", "step_tokens", "op",
                   "file", "cases"}


@pytest.fixture(scope="module")
def captured(stories, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("cases"))
    settings = CaptureSettings(seed=7, prompt_lens=(2, 6, 4), decode_steps=3,
                               capture_steps=(0, 2), block_size=4, decode_pad_to=4)
    run = run_capture(stories, settings)
    return out, write_run(stories, settings, run, out, "test"), run


def test_every_op_is_captured_in_prefill_and_decode(captured):
    out, paths, _ = captured
    names = {os.path.basename(p) for p in paths}
    for op in OPS:
        if op != "paged_decode_attention":
            assert f"prefill.{op}.safetensors" in names
        assert f"decode_step0.{op}.safetensors" in names
        assert f"decode_step2.{op}.safetensors" in names
    assert not any(n.startswith("decode_step1.") for n in names)


def test_captured_outputs_match_a_float64_recomputation(captured):
    for path in captured[1]:
        check_group(path)


def test_committed_captures_match_a_float64_recomputation():
    paths = group_paths(COMMITTED)
    assert len(paths) == 26, "the committed stories260K set has 26 case groups"
    total = 0
    for path in paths:
        prov = check_group(path)
        assert prov["model"]["weights"][0]["sha256"] == file_sha256(STORIES)
        total += os.path.getsize(path) + os.path.getsize(path[: -len(".safetensors")] + ".json")
    assert total < 2 << 20, f"committed captures take {total} bytes"


def test_provenance_fields(captured, stories):
    for path in captured[1]:
        with open(path[: -len(".safetensors")] + ".json") as f:
            prov = json.load(f)
        assert PROVENANCE_KEYS <= set(prov)
        assert prov["model"]["name"] == "stories260K"
        assert prov["model"]["weights"] == stories.sources
        assert len(prov["model"]["weights"][0]["sha256"]) == 64
        gen = prov["generation"]
        assert gen["seed"] == 7 and gen["sampling"]["temperature"] == 1.0
        assert gen["prompt_lens"] == [2, 6, 4]
        assert [len(p) for p in gen["prompts"]] == [2, 6, 4]
        assert all(p[0] == 1 for p in gen["prompts"]), "prompts start at BOS"
        assert prov["tool"]["version"] and prov["tool"]["torch"] == torch.__version__
        assert prov["phase"] in ("prefill", "decode")
        assert (prov["step"] is None) == (prov["phase"] == "prefill")
        expected_rows = 12 if prov["phase"] == "prefill" else 3
        assert len(prov["step_tokens"]) == expected_rows
        for case in prov["cases"]:
            assert case["name"] and case["point"]
            for doc in case["tensors"]:
                assert {"name", "arg", "role", "dtype", "shape", "sha256", "bytes"} <= set(doc)
                assert doc["role"] in ("in", "out", "inout", "after")


def test_norms_cover_every_layer_and_the_final_norm(captured, stories):
    out = captured[0]
    with open(os.path.join(out, "prefill.rms_norm.json")) as f:
        cases = [c["name"] for c in json.load(f)["cases"]]
    layers = stories.config.n_layers
    expected = [f"layer{i}.{p}" for i in range(layers) for p in ("attn_norm", "ffn_norm")]
    assert cases == expected + ["final_norm"]
    with open(os.path.join(out, "prefill.fused_add_rms_norm.json")) as f:
        fused = [c["name"] for c in json.load(f)["cases"]]
    assert fused == expected[1:] + ["final_norm"], "layer 0's first norm has no residual add"


def test_kv_cache_state_carries_across_ops_and_padding_writes_nothing(captured):
    out = captured[0]
    kv, _ = read_safetensors(os.path.join(out, "decode_step0.reshape_and_cache_flash.safetensors"))
    attn, _ = read_safetensors(os.path.join(out, "decode_step0.paged_decode_attention.safetensors"))
    slots = kv["layer1.kv_cache/slot_mapping"]
    assert slots.dtype == torch.int64 and slots.shape == (4,)
    assert int(slots[-1]) == -1, "3 decode rows padded to 4 with slot -1"
    assert torch.equal(kv["layer1.kv_cache/key_cache.after"], attn["layer1.attention/key_cache"])
    assert torch.equal(kv["layer1.kv_cache/value_cache.after"],
                       attn["layer1.attention/value_cache"])
    before, after = kv["layer1.kv_cache/key_cache"], kv["layer1.kv_cache/key_cache.after"]
    changed = (before != after).flatten(2).any(-1).nonzero().tolist()
    bs = before.shape[1]
    assert sorted(b * bs + o for b, o in changed) == sorted(int(s) for s in slots if s >= 0)
    # Prefill state reaches decode: step 0's cache holds every prompt token.
    prefill, _ = read_safetensors(os.path.join(out, "prefill.reshape_and_cache_flash.safetensors"))
    assert torch.equal(prefill["layer1.kv_cache/key_cache.after"], before)
    seq_lens = attn["layer1.attention/seq_lens"]
    assert seq_lens.tolist() == [3, 7, 5]
    assert attn["layer1.attention/block_tables"].dtype == torch.int32


def test_cli_writes_the_requested_groups(tmp_path):
    rc = cli.main(["--model", STORIES, "--out", str(tmp_path), "--prompt-lens", "3,2",
                   "--decode-steps", "2", "--capture-steps", "1", "--ops", "rms_norm,silu_and_mul",
                   "--layers", "0", "--temperature", "0"])
    assert rc == 0
    names = sorted(os.listdir(tmp_path))
    assert names == sorted(f"{g}.{op}.{ext}" for g in ("prefill", "decode_step1")
                           for op in ("rms_norm", "silu_and_mul")
                           for ext in ("json", "safetensors"))
    with open(tmp_path / "prefill.rms_norm.json") as f:
        prov = json.load(f)
    assert [c["name"] for c in prov["cases"]] == ["layer0.attn_norm", "layer0.ffn_norm",
                                                  "final_norm"]
    assert prov["generation"]["sampling"]["mode"] == "greedy"
    for path in tmp_path.glob("*.safetensors"):
        check_group(str(path))


def test_the_oracle_rejects_a_wrong_output(captured):
    from oracle import check_case

    tensors, _ = read_safetensors(os.path.join(captured[0], "prefill.silu_and_mul.safetensors"))
    t = {"input": tensors["layer2.mlp/input"], "out": tensors["layer2.mlp/out"].clone()}
    check_case("silu_and_mul", "ok", t, {})
    t["out"][3, 5] = t["out"][3, 5] * 1.05 + 0.01
    with pytest.raises(AssertionError):
        check_case("silu_and_mul", "tampered", t, {})


def test_the_sampler_records_the_serving_mix_and_the_oracle_rejects_another_token(captured):
    from oracle import check_case

    from tasks.capture.capture import SAMPLER_TOP_K, SAMPLER_TOP_P

    out, _, run = captured
    tensors, _ = read_safetensors(
        os.path.join(out, "decode_step0.top_k_top_p_sampling_from_logits.safetensors"))
    t = {arg: tensors[f"sampler/{arg}"].clone()
         for arg in ("logits", "uniform_samples", "top_k", "top_p", "samples")}
    rows = len(run.prompts)
    assert t["logits"].shape == (rows, 512)
    # Decode step 0 is the run's second sampling point: its rows take the mix from entry rows.
    assert t["top_k"].tolist() == [SAMPLER_TOP_K[(rows + b) % 8] for b in range(rows)]
    assert t["top_p"].tolist() == pytest.approx([SAMPLER_TOP_P[(rows + b) % 8]
                                                 for b in range(rows)])
    check_case("top_k_top_p_sampling_from_logits", "ok", t, {})
    t["samples"][0] = (int(t["samples"][0]) + 1) % 512
    with pytest.raises(AssertionError):
        check_case("top_k_top_p_sampling_from_logits", "tampered", t, {})


def test_the_sampler_op_agrees_with_the_oracle_on_ties_and_edge_settings():
    import random

    from oracle import sampled_token

    from tasks.capture.ops import top_k_top_p_sampling_from_logits

    rng = random.Random(5)
    for _ in range(60):
        vocab = rng.randint(1, 40)
        digits = rng.choice([0, 1, 3])  # rounding makes ties
        logits = torch.tensor([[round(rng.gauss(0, 3), digits) for _ in range(vocab)]])
        k = rng.choice([0, 1, 2, vocab - 1, vocab, vocab + 5, rng.randint(1, vocab)])
        p = rng.choice([1e-6, 0.3, 0.9, 0.999, 1.0])  # the task takes p in (0, 1]
        u = rng.choice([0.0, rng.random(), 1.0])
        got = top_k_top_p_sampling_from_logits(
            logits, torch.tensor([u], dtype=torch.float32), torch.tensor([k], dtype=torch.int32),
            torch.tensor([p], dtype=torch.float32))
        want = sampled_token(logits[0].tolist(), float(torch.tensor(u, dtype=torch.float32)), k,
                             float(torch.tensor(p, dtype=torch.float32)))
        assert int(got[0]) == want, (logits.tolist(), k, p, u)


def test_fp8_records_quantize_the_models_own_weights_and_activations(captured, stories):
    from oracle import check_case, e4m3

    out, _, _ = captured
    linear, _ = read_safetensors(os.path.join(out, "prefill.fp8_scaled_linear.safetensors"))
    quant, _ = read_safetensors(
        os.path.join(out, "prefill.dynamic_per_token_scaled_fp8_quant.safetensors"))
    norm, _ = read_safetensors(os.path.join(out, "prefill.rms_norm.safetensors"))
    # The qkv projection's weight is q, k and v stacked, each row quantized by its own amax.
    p = "model.layers.1.self_attn."
    weight = torch.cat([stories.w(p + n + ".weight") for n in ("q_proj", "k_proj", "v_proj")])
    b, b_scales = linear["layer1.qkv_proj/b"], linear["layer1.qkv_proj/b_scales"]
    assert b.shape == weight.shape
    for n in (0, 37, weight.shape[0] - 1):
        row = weight[n].double()
        scale = float(torch.tensor(float(row.abs().max()), dtype=torch.float32) / 448.0)
        assert float(b_scales[n, 0]) == scale
        assert b[n].double().tolist() == [
            e4m3(float(torch.tensor(float(x), dtype=torch.float32) / torch.tensor(
                scale, dtype=torch.float32))) for x in row]
    # Its activation is the attention norm's output, quantized per token, and the GEMM reads
    # exactly what the quantizer wrote.
    assert torch.equal(quant["layer1.qkv_proj/input"], norm["layer1.attn_norm/out"])
    assert torch.equal(quant["layer1.qkv_proj/out"].view(torch.uint8),
                       linear["layer1.qkv_proj/a"].view(torch.uint8))
    assert torch.equal(quant["layer1.qkv_proj/scale"], linear["layer1.qkv_proj/a_scales"])
    # A changed byte or output is refused.
    t = {arg: quant[f"layer1.o_proj/{arg}"].clone() for arg in ("input", "out", "scale")}
    check_case("dynamic_per_token_scaled_fp8_quant", "ok", t, {})
    t["out"].view(torch.uint8)[2, 3] ^= 1
    with pytest.raises(AssertionError):
        check_case("dynamic_per_token_scaled_fp8_quant", "tampered", t, {})
    t = {arg: linear[f"layer1.o_proj/{arg}"].clone()
         for arg in ("a", "b", "a_scales", "b_scales", "out")}
    check_case("fp8_scaled_linear", "ok", t, {})
    t["out"][1, 2] = t["out"][1, 2] * 1.1 + 0.05
    with pytest.raises(AssertionError):
        check_case("fp8_scaled_linear", "tampered", t, {})
