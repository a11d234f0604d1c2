"""The Hugging Face loader: a checkpoint folder (config.json + safetensors, sharded or not) that
the test writes itself. stories260K converted to Hugging Face's layout (q/k rows permuted for
the neox rotary) must give the llama2.c path's logits; random Llama, Qwen2 and Mixtral
checkpoints must agree with an independent float64 forward."""

import json

import pytest

from conftest import TORCH_REASON, prefill_logits

torch = pytest.importorskip("torch", reason=TORCH_REASON)

from reference import hf_logits  # noqa: E402
from tasks.capture.capture import CaptureSettings, run_capture, write_run  # noqa: E402
from tasks.capture.loaders import file_sha256, load_hf  # noqa: E402
from tasks.capture.safetensors_io import write_safetensors  # noqa: E402
from oracle import check_group, group_paths  # noqa: E402


def to_hf_layout(w, n_heads, rows):
    # Hugging Face's llama conversion: interleaved rotary pairs (2i, 2i+1) of every head become
    # halves (i, i + head_size/2).
    return w.view(n_heads, rows // n_heads // 2, 2, -1).transpose(1, 2).reshape(rows, -1)


def test_stories260k_in_hf_layout_gives_the_same_logits(stories, tmp_path):
    c = stories.config
    weights = {}
    for name, value in stories.weights.items():
        if name.endswith("q_proj.weight"):
            value = to_hf_layout(value, c.n_heads, c.n_heads * c.head_size)
        elif name.endswith("k_proj.weight"):
            value = to_hf_layout(value, c.n_kv_heads, c.n_kv_heads * c.head_size)
        weights[name] = value.contiguous()
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": c.dim,
              "intermediate_size": c.hidden_dim, "num_hidden_layers": c.n_layers,
              "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads,
              "vocab_size": c.vocab_size, "max_position_embeddings": c.max_position,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
              "bos_token_id": 1, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(str(tmp_path / "model.safetensors"), weights, {"format": "pt"})
    hf = load_hf(str(tmp_path))
    assert hf.config.is_neox and hf.config.tie_embeddings
    assert hf.sources[0]["sha256"] == file_sha256(str(tmp_path / "model.safetensors"))
    tokens = [1, 306, 463, 283, 316, 285, 377, 130, 160, 465, 441]
    got, ref = prefill_logits(hf, tokens), prefill_logits(stories, tokens)
    assert float((got - ref).abs().max()) < 0.05


def random_checkpoint(folder, arch, shards=1, seed=0):
    gen = torch.Generator().manual_seed(seed)
    dim, heads, kv, hs, hidden, layers, vocab = 32, 4, 2, 8, 48, 2, 64
    cfg = {"architectures": [arch], "hidden_size": dim, "intermediate_size": hidden,
           "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
           "vocab_size": vocab, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
           "rope_theta": 1e6 if arch == "Qwen2ForCausalLM" else 10000.0,
           "tie_word_embeddings": arch == "Qwen2ForCausalLM", "bos_token_id": 1}
    if arch == "MixtralForCausalLM":
        cfg.update(num_local_experts=4, num_experts_per_tok=2)

    def rnd(*shape, scale=None):
        t = torch.randn(*shape, generator=gen) * (scale if scale else shape[-1] ** -0.5)
        return t.to(torch.bfloat16)

    w = {"model.embed_tokens.weight": rnd(vocab, dim, scale=1.0),
         "model.norm.weight": (1 + 0.1 * torch.randn(dim, generator=gen)).to(torch.bfloat16)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rnd(vocab, dim)
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm"):
            w[p + n + ".weight"] = (1 + 0.1 * torch.randn(dim, generator=gen)).to(torch.bfloat16)
        w[p + "self_attn.q_proj.weight"] = rnd(heads * hs, dim)
        w[p + "self_attn.k_proj.weight"] = rnd(kv * hs, dim)
        w[p + "self_attn.v_proj.weight"] = rnd(kv * hs, dim)
        w[p + "self_attn.o_proj.weight"] = rnd(dim, heads * hs)
        if arch == "Qwen2ForCausalLM":
            for n, rows in (("q", heads * hs), ("k", kv * hs), ("v", kv * hs)):
                w[p + f"self_attn.{n}_proj.bias"] = rnd(rows, scale=0.5)
        if arch == "MixtralForCausalLM":
            w[p + "block_sparse_moe.gate.weight"] = rnd(4, dim, scale=1.0)
            for e in range(4):
                m = f"{p}block_sparse_moe.experts.{e}."
                w[m + "w1.weight"], w[m + "w3.weight"] = rnd(hidden, dim), rnd(hidden, dim)
                w[m + "w2.weight"] = rnd(dim, hidden)
        else:
            w[p + "mlp.gate_proj.weight"] = rnd(hidden, dim)
            w[p + "mlp.up_proj.weight"] = rnd(hidden, dim)
            w[p + "mlp.down_proj.weight"] = rnd(dim, hidden)
    (folder / "config.json").write_text(json.dumps(cfg))
    names = list(w)
    if shards == 1:
        write_safetensors(str(folder / "model.safetensors"), w, {"format": "pt"})
    else:
        weight_map = {}
        for s in range(shards):
            part = names[s::shards]
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(str(folder / fname), {n: w[n] for n in part}, {"format": "pt"})
            weight_map.update({n: fname for n in part})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return cfg, w


@pytest.mark.parametrize("arch,shards", [("LlamaForCausalLM", 1), ("Qwen2ForCausalLM", 2),
                                         ("MixtralForCausalLM", 3)])
def test_hf_forward_agrees_with_an_independent_float64_forward(tmp_path, arch, shards):
    cfg, w = random_checkpoint(tmp_path, arch, shards)
    model = load_hf(str(tmp_path))
    assert model.config.architecture == arch and len(model.sources) == shards
    tokens = [1, 5, 17, 42, 9, 33, 60, 2, 11]
    got = prefill_logits(model, tokens)
    ref = hf_logits(cfg, w, tokens)
    scale = float(ref.abs().max())
    assert float((got - ref).abs().max()) < 0.03 * scale, f"{arch} disagrees"
    # float32 activations on the same (bf16) weights: the architecture matches closely.
    f32 = type(model)(model.config, {k: v.float() for k, v in model.weights.items()}, [])
    assert float((prefill_logits(f32, tokens) - ref).abs().max()) < 1e-4 * scale


def test_capture_from_an_hf_mixtral_checkpoint_is_self_consistent(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    random_checkpoint(folder, "MixtralForCausalLM", seed=3)
    model = load_hf(str(folder), "tiny-mixtral")
    settings = CaptureSettings(seed=2, prompt_lens=(3, 4), decode_steps=2, capture_steps=(1,),
                               block_size=4)
    out = tmp_path / "cases"
    write_run(model, settings, run_capture(model, settings), str(out))
    paths = group_paths(str(out))
    assert len(paths) == 17  # the prefill: every op but paged decode (8); decode step 1: all 9
    for path in paths:
        prov = check_group(path)
        assert prov["model"]["name"] == "tiny-mixtral"
        if prov["op"] == "silu_and_mul":
            assert [c["point"] for c in prov["cases"]] == ["moe", "moe"]
        if prov["op"] == "rotary_embedding":
            assert all(c["scalars"]["is_neox"] for c in prov["cases"])
