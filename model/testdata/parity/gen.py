#!/usr/bin/python3
"""Generates agl's logit parity fixtures: tiny random Hugging Face checkpoints
(config.json + safetensors) with golden logits from an independent PyTorch
implementation of transformers' Qwen3 / Qwen2 / Llama / Mistral forward pass,
written from transformers' modeling_qwen3.py, modeling_qwen2.py,
modeling_llama.py, modeling_mistral.py and modeling_rope_utils.py. It is a
test tool, not run in CI (CI reads the committed outputs):

    apt-get install -y python3-torch python3-numpy
    /usr/bin/python3 model/testdata/parity/gen.py

Each fixture directory gets config.json, the weights (model.safetensors, or
shards with model.safetensors.index.json), and golden.json: the token ids,
the reference's log p(ids[t] | ids[:t]) and the file of its logits
(logits.f32: [T, vocab] little-endian float32, row t predicting ids[t+1]).
The reference computes in float64 from the stored (possibly bf16) weights.
"""
import json
import math
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
T = 20  # tokens per fixture


# ---- RoPE: modeling_rope_utils.py ----------------------------------------

def rope_params(cfg):
    """(rope_type, rope_theta, scaling dict) for either config style."""
    rp = cfg.get("rope_parameters")
    rs = cfg.get("rope_scaling")
    d = rp if rp is not None else (rs or {})
    theta = d.get("rope_theta", cfg.get("rope_theta", 10000.0))
    kind = d.get("rope_type", d.get("type", "default"))
    return kind, theta, d


def head_dim(cfg):
    if cfg["model_type"] == "qwen3":
        return cfg.get("head_dim", 128)
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def inv_freq_and_scale(cfg):
    kind, base, d = rope_params(cfg)
    dim = head_dim(cfg)
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    if kind in ("default", "dynamic"):
        # dynamic NTK only changes the base for sequences longer than
        # max_position_embeddings (dynamic_rope_update); fixtures are shorter.
        return inv, 1.0
    factor = d["factor"]
    if kind == "linear":
        return inv / factor, 1.0
    if kind == "llama3":
        low, high = d["low_freq_factor"], d["high_freq_factor"]
        old = d["original_max_position_embeddings"]
        low_wave, high_wave = old / low, old / high
        wave = 2 * math.pi / inv
        out = torch.where(wave > low_wave, inv / factor, inv)
        smooth = (old / wave - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wave < high_wave) & ~(wave > low_wave)
        return torch.where(medium, smoothed, out), 1.0
    if kind == "yarn":
        orig = d.get("original_max_position_embeddings") or cfg["max_position_embeddings"]

        def get_mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        att = d.get("attention_factor")
        if att is None:
            if d.get("mscale") and d.get("mscale_all_dim"):
                att = get_mscale(factor, d["mscale"]) / get_mscale(factor, d["mscale_all_dim"])
            else:
                att = get_mscale(factor)
        beta_fast = d.get("beta_fast") or 32
        beta_slow = d.get("beta_slow") or 1

        def corr_dim(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

        lo, hi = corr_dim(beta_fast), corr_dim(beta_slow)
        if d.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float64) - lo) / (hi - lo), 0, 1)
        extra = 1 - ramp
        pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        inv = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
        return inv, att
    raise ValueError(kind)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


# ---- the decoder ------------------------------------------------------------

def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def forward(cfg, W, ids):
    mt = cfg["model_type"]
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    L = len(ids)
    qkv_bias = mt == "qwen2" or (mt in ("qwen3", "llama") and cfg.get("attention_bias", False))
    o_bias = mt in ("qwen3", "llama") and cfg.get("attention_bias", False)
    mlp_bias = mt == "llama" and cfg.get("mlp_bias", False)

    def lin(x, name, bias):
        y = x @ W[name + ".weight"].T
        if bias:
            y = y + W[name + ".bias"]
        return y

    inv, att = inv_freq_and_scale(cfg)
    pos = torch.arange(L, dtype=torch.float64)
    freqs = pos[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * att, emb.sin() * att  # [L, hd]
    mask = torch.full((L, L), float("-inf"), dtype=torch.float64).triu(1)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj", qkv_bias).view(L, H, hd)
        k = lin(h, p + "self_attn.k_proj", qkv_bias).view(L, KV, hd)
        v = lin(h, p + "self_attn.v_proj", qkv_bias).view(L, KV, hd)
        if mt == "qwen3":
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, L, hd]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=0)  # repeat_kv
        v = v.repeat_interleave(H // KV, dim=0)
        scores = (q @ k.transpose(1, 2)) * hd ** -0.5 + mask
        a = torch.softmax(scores, dim=-1) @ v  # [H, L, hd]
        a = a.transpose(0, 1).reshape(L, H * hd)
        x = x + lin(a, p + "self_attn.o_proj", o_bias)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = lin(h, p + "mlp.gate_proj", mlp_bias)
        u = lin(h, p + "mlp.up_proj", mlp_bias)
        x = x + lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj", mlp_bias)
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    return x @ head.T  # [L, V]


# ---- random checkpoints -----------------------------------------------------

def tensors_for(cfg, gen):
    mt = cfg["model_type"]
    D, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = head_dim(cfg)
    qkv_bias = mt == "qwen2" or (mt in ("qwen3", "llama") and cfg.get("attention_bias", False))
    o_bias = mt in ("qwen3", "llama") and cfg.get("attention_bias", False)
    mlp_bias = mt == "llama" and cfg.get("mlp_bias", False)

    def mat(o, i, scale=1.5):
        return torch.randn(o, i, generator=gen, dtype=torch.float64) * (scale / math.sqrt(i))

    def vec(n, mean=0.0, std=0.3):
        return mean + torch.randn(n, generator=gen, dtype=torch.float64) * std

    W = {"model.embed_tokens.weight": torch.randn(V, D, generator=gen, dtype=torch.float64) * 0.7}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        W[p + "input_layernorm.weight"] = vec(D, 1.0, 0.2)
        W[p + "post_attention_layernorm.weight"] = vec(D, 1.0, 0.2)
        for n, o, inp in (("q", H * hd, D), ("k", KV * hd, D), ("v", KV * hd, D), ("o", D, H * hd)):
            W[p + f"self_attn.{n}_proj.weight"] = mat(o, inp)
            if (n != "o" and qkv_bias) or (n == "o" and o_bias):
                W[p + f"self_attn.{n}_proj.bias"] = vec(o)
        if mt == "qwen3":
            W[p + "self_attn.q_norm.weight"] = vec(hd, 1.0, 0.2)
            W[p + "self_attn.k_norm.weight"] = vec(hd, 1.0, 0.2)
        for n, o, inp in (("gate", I, D), ("up", I, D), ("down", D, I)):
            W[p + f"mlp.{n}_proj.weight"] = mat(o, inp)
            if mlp_bias:
                W[p + f"mlp.{n}_proj.bias"] = vec(o)
    W["model.norm.weight"] = vec(D, 1.0, 0.2)
    if not cfg.get("tie_word_embeddings", False):
        W["lm_head.weight"] = mat(V, D, 3.0)
    return W


def round_to(W, dtype):
    """The weights as stored (float32 or bfloat16), back in float64."""
    t = torch.float32 if dtype == "F32" else torch.bfloat16
    return {k: v.to(t).to(torch.float64) for k, v in W.items()}


def write_safetensors(path, W, dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(W):
        v = W[name]
        if dtype == "F32":
            b = v.to(torch.float32).numpy().astype("<f4").tobytes()
        else:
            b = v.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def fixture(name, cfg, seed, dtype="F32", shards=1):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    W = round_to(tensors_for(cfg, gen), dtype)
    for f in os.listdir(d):
        if f.endswith(".safetensors") or f.endswith(".json") or f.endswith(".f32"):
            os.remove(os.path.join(d, f))
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), W, dtype)
    else:
        names = sorted(W)
        wm = {}
        for s in range(shards):
            fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: W[n] for n in names[s::shards]}
            write_safetensors(os.path.join(d, fn), part, dtype)
            wm.update({n: fn for n in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=1, sort_keys=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    ids = torch.randint(0, cfg["vocab_size"], (T,), generator=gen).tolist()
    logits = forward(cfg, W, ids)
    logp = torch.log_softmax(logits, dim=-1)
    lp = [0.0] + [logp[t - 1, ids[t]].item() for t in range(1, T)]
    with open(os.path.join(d, "logits.f32"), "wb") as f:
        f.write(logits.to(torch.float32).numpy().astype("<f4").tobytes())
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump({"ids": ids, "logprobs": lp, "logits": "logits.f32",
                   "generator": "gen.py (PyTorch %s, float64)" % torch.__version__}, f, indent=1)
    spread = (logits.max(-1).values - logits.min(-1).values).mean().item()
    print(f"{name}: {len(W)} tensors, {dtype}, mean logit spread {spread:.1f}, mean logp {np.mean(lp[1:]):.2f}")


def base(mt, **kw):
    cfg = {"architectures": [{"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM",
                              "mistral": "MistralForCausalLM"}[mt]],
           "model_type": mt, "vocab_size": 64, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
           "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-6, "max_position_embeddings": 128,
           "hidden_act": "silu", "tie_word_embeddings": True, "torch_dtype": "float32", "bos_token_id": 1,
           "eos_token_id": 2, "initializer_range": 0.02, "use_cache": True, "attention_dropout": 0.0,
           "transformers_version": "4.51.0"}
    cfg.update(kw)
    return cfg


def main():
    qwen = dict(head_dim=16, use_sliding_window=False, sliding_window=32768, max_window_layers=28)
    fixture("qwen3", base("qwen3", rope_theta=1000000.0, attention_bias=False, rope_scaling=None, **qwen), 1)
    fixture("qwen3_rope_parameters", base("qwen3", rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                                          attention_bias=False, transformers_version="5.0.0", **qwen), 2, "BF16")
    fixture("qwen3_attention_bias", base("qwen3", rope_theta=10000.0, attention_bias=True, **qwen), 3, "BF16")
    fixture("qwen2", base("qwen2", rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False,
                          sliding_window=131072, max_window_layers=21), 4, "BF16")
    llama31 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
               "rope_type": "llama3"}
    fixture("llama31_rope_llama3", base("llama", rope_theta=500000.0, rope_scaling=llama31, head_dim=16,
                                        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                                        pretraining_tp=1), 5, "BF16")
    fixture("llama_mlp_bias", base("llama", rope_theta=10000.0, mlp_bias=True, attention_bias=False,
                                   tie_word_embeddings=False), 6, "BF16")
    fixture("llama_attention_bias", base("llama", rope_theta=10000.0, mlp_bias=False, attention_bias=True), 7, "BF16")
    fixture("qwen3_bf16_sharded", base("qwen3", rope_theta=1000000.0, torch_dtype="bfloat16", **qwen), 8, "BF16", 2)
    fixture("qwen3_yarn", base("qwen3", rope_theta=10000.0,
                               rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
                               **qwen), 9, "BF16")
    fixture("llama_linear", base("llama", rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 2.0}), 10, "BF16")
    fixture("llama_dynamic", base("llama", rope_theta=10000.0, rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
            11, "BF16")
    fixture("mistral", base("mistral", rope_theta=1000000.0, sliding_window=None), 12, "BF16")


if __name__ == "__main__":
    main()
