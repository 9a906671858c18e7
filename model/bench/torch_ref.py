"""PyTorch CPU reference of agl's embedded model, for benchmark anchoring.

Same architecture as model/ (Qwen3 style: RMSNorm, q/k RMSNorm, RoPE,
SwiGLU, grouped-query attention, tied embeddings) and the same presets and
workloads as model/bench_test.go:

  train:    batches of 8 x 128 tokens, forward + backward + AdamW
  generate: prompt 64 tokens, 64 new tokens sampled at temperature 1 with a
            KV cache, batch 1 and 16

Never a test dependency: run model/bench/run.sh (it installs python3-torch).
"""
import math
import sys
import time

import torch
import torch.nn.functional as F

PRESETS = {  # hidden, intermediate, layers, heads, kv heads, head dim
    "1m": (128, 384, 4, 4, 2, 32),
    "10m": (384, 1152, 6, 6, 2, 64),
}
VOCAB = 265


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rope(x, pos, theta=10000.0):  # x [B, H, L, hd], pos [B, L]
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    f = pos[..., None].float() * inv  # [B, L, hd/2]
    emb = torch.cat([f, f], -1)[:, None]  # [B, 1, L, hd]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()


class Layer(torch.nn.Module):
    def __init__(self, d, i, h, kv, hd):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, hd
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.q = torch.nn.Linear(d, h * hd, bias=False)
        self.k = torch.nn.Linear(d, kv * hd, bias=False)
        self.v = torch.nn.Linear(d, kv * hd, bias=False)
        self.o = torch.nn.Linear(h * hd, d, bias=False)
        self.qn, self.kn = RMSNorm(hd), RMSNorm(hd)
        self.gate = torch.nn.Linear(d, i, bias=False)
        self.up = torch.nn.Linear(d, i, bias=False)
        self.down = torch.nn.Linear(i, d, bias=False)

    def forward(self, x, pos, cache=None):
        b, l, _ = x.shape
        h = self.ln1(x)
        q = self.qn(self.q(h).view(b, l, self.h, self.hd)).transpose(1, 2)
        k = self.kn(self.k(h).view(b, l, self.kv, self.hd)).transpose(1, 2)
        v = self.v(h).view(b, l, self.kv, self.hd).transpose(1, 2)
        q, k = rope(q, pos), rope(k, pos)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], 2)
                v = torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        s = k.shape[2]
        g = self.h // self.kv
        k = k.repeat_interleave(g, 1)
        v = v.repeat_interleave(g, 1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        mask = torch.ones(l, s, dtype=torch.bool).tril(s - l)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        a = (att @ v).transpose(1, 2).reshape(b, l, self.h * self.hd)
        x = x + self.o(a)
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, preset):
        super().__init__()
        d, i, n, h, kv, hd = PRESETS[preset]
        self.emb = torch.nn.Embedding(VOCAB, d)
        self.layers = torch.nn.ModuleList([Layer(d, i, h, kv, hd) for _ in range(n)])
        self.norm = RMSNorm(d)

    def forward(self, ids, start=0, caches=None):
        b, l = ids.shape
        pos = torch.arange(start, start + l)[None].expand(b, l)
        x = self.emb(ids)
        for j, layer in enumerate(self.layers):
            x = layer(x, pos, None if caches is None else caches[j])
        return self.norm(x) @ self.emb.weight.t()


def bench_train(preset, steps):
    m = Model(preset)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    ids = torch.tensor([[(i * 31 + j * 7) % VOCAB for j in range(128)] for i in range(8)])

    def step():
        logits = m(ids)[:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()

    step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return 8 * 128 * steps / (time.perf_counter() - t)


@torch.no_grad()
def bench_generate(preset, batch, runs):
    m = Model(preset)
    prompt = torch.tensor([[i % 200 for i in range(64)]] * batch)

    def run():
        caches = [dict() for _ in m.layers]
        logits = m(prompt, 0, caches)[:, -1]
        n = 0
        for t in range(64):
            tok = torch.multinomial(logits.softmax(-1), 1)
            logits.log_softmax(-1).gather(1, tok)  # the log-probs agl returns
            n += batch
            if t == 63:
                break
            logits = m(tok, 64 + t, caches)[:, -1]
        return n

    run()
    t = time.perf_counter()
    n = sum(run() for _ in range(runs))
    return n / (time.perf_counter() - t)


if __name__ == "__main__":
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {threads} threads")
    for preset in ("1m", "10m"):
        params = sum(p.numel() for p in Model(preset).parameters())
        print(f"torch {preset} ({params} params) train {bench_train(preset, 3):.1f} tok/s")
        for b in (1, 16):
            print(f"torch {preset} generate batch{b} {bench_generate(preset, b, 2):.1f} tok/s")
