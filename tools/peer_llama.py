#!/usr/bin/env python3
"""The peer of f8_train's Llama: the same model in PyTorch (torchtitan's Llama 3 shape), timed as
tools/peer_gpt.py times the GPT, through peer_gpt.py's driver (child processes, PEER_RESULT lines,
--compare, --check-params).

Usage: tools/peer_llama.py [--model llama-1B] [--modes bf16,fp8,fp8_rowwise] [--warmup 3] [--steps 10]
       tools/peer_llama.py --device cpu --tiny --model llama-tiny --compile none   (a smoke run)
       tools/peer_llama.py --check-params --model llama-tiny,llama-1B,llama-3B

Configurations, at f8_train's llama-* preset shapes (batch x microbatches x seq, the vocabulary of
llm.c's Llama 3 shards, 128256):
  bf16         BF16 weights and activations, torch.compile (each block and the head)
  fp8          + torchao FP8 training, tensorwise scaling (Float8LinearConfig "tensorwise"), compiled
  fp8_rowwise  + torchao FP8 training, rowwise scaling ("rowwise"), compiled
Every Linear of the blocks is FP8; the LM head stays BF16, as f8's does by default.

The model, torchtitan's Llama 3 (f8's train/llama.h, asserted by the parameter count):
  x = tok_embeddings[tokens]                                    [Vp, C], Vp = vocab rounded up to 128
  per block: x += wo(SDPA(rope(wq(n)), rope(wk(n)), wv(n), causal)),  n = RMSNorm(x), no biases;
             k and v of G heads repeated to H (torchtitan's repeat_kv)
             x += w2(silu(w1(m)) * w3(m)),  m = RMSNorm(x)
  logits = output(RMSNorm(x)), output tied to tok_embeddings (llama-1B, 3B) or not (8B)
  RMSNorm eps 1e-5; RoPE rotate-half, theta 500000 with Llama 3's llama3 scaling (factor 32,
  low 1, high 4, original 8192) as f8_rope computes its frequencies
  parameters = L*(C*(H+2G)*hd + C^2 + 3*C*F + 2C) + Vp*C*(1 or 2) + C   (llama_param_estimate)
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_gpt as base  # noqa: E402

LLAMA3_VOCAB = 128256
# name: layers, heads, channels, seq, batch (per microbatch), microbatches, lr (train/options.c's LLAMA_PRESETS)
PRESETS = {
    "llama-tiny": (4, 4, 128, 64, 4, 2, 3e-3),
    "llama-1B": (16, 32, 2048, 2048, 8, 4, 3e-4),
    "llama-3B": (28, 24, 3072, 2048, 4, 8, 3e-4),
    "llama-8B": (32, 32, 4096, 2048, 2, 16, 3e-4),
}
# name: kv heads, ffn, untied, theta, llama3 factor (0: none)
FAMILY = {
    "llama-tiny": (2, 384, False, 10000.0, 0.0),
    "llama-1B": (8, 8192, False, 500000.0, 32.0),
    "llama-3B": (8, 8192, False, 500000.0, 32.0),
    "llama-8B": (8, 14336, True, 500000.0, 8.0),
}
_gpt_shape_of = base.shape_of


def shape_of(args, name):
    s = _gpt_shape_of(args, name)
    kv, ffn, untied, theta, factor = FAMILY[name]
    if args.tiny:  # the smoke shapes: 2 layers, width 64, 2 heads -> 1 KV head, FFN 96
        kv, ffn = 1, 96
    return dict(s, kv=kv, ffn=ffn, untied=untied, theta=theta, factor=factor)


def param_count_of(s):
    C, H, G, F, L = s["channels"], s["heads"], s["kv"], s["ffn"], s["layers"]
    hd = C // H
    block = C * (H + 2 * G) * hd + C * C + 3 * C * F + 2 * C
    return L * block + base.padded(s["vocab"]) * C * (2 if s["untied"] else 1) + C


def inv_freq(torch, hd, theta, factor):
    """f8_rope_inv_freq: omega_d = theta^(-2d/hd), with the llama3 scaling (low 1, high 4, original 8192)."""
    w = [theta ** (-2.0 * d / hd) for d in range(hd // 2)]
    if factor:
        lo, hi, orig = 1.0, 4.0, 8192.0
        out = []
        for om in w:
            lam = 2 * math.pi / om
            if lam < orig / hi:
                out.append(om)
            elif lam > orig / lo:
                out.append(om / factor)
            else:
                sm = (orig / lam - lo) / (hi - lo)
                out.append((1 - sm) * om / factor + sm * om)
        w = out
    return torch.tensor(w, dtype=torch.float32)


def build_model(torch, s, dtype, device):
    import torch.nn as nn
    import torch.nn.functional as F

    L, H, G, C, S, V, Fw = s["layers"], s["heads"], s["kv"], s["channels"], s["seq"], s["vocab"], s["ffn"]
    Vp, hd = base.padded(V), C // H
    ang = torch.outer(torch.arange(S, dtype=torch.float32), inv_freq(torch, hd, s["theta"], s["factor"]))
    cos, sin = ang.cos().to(device), ang.sin().to(device)  # [S, hd/2]

    def rope(x):  # x [B, T, heads, hd]: rotate halves (d with d + hd/2), as f8_rope and transformers
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        c, sn = cos[: x.shape[1], None, :].to(x.dtype), sin[: x.shape[1], None, :].to(x.dtype)
        return torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm = nn.RMSNorm(C, eps=1e-5)
            self.wq = nn.Linear(C, H * hd, bias=False)
            self.wk = nn.Linear(C, G * hd, bias=False)
            self.wv = nn.Linear(C, G * hd, bias=False)
            self.wo = nn.Linear(C, C, bias=False)
            self.ffn_norm = nn.RMSNorm(C, eps=1e-5)
            self.w1 = nn.Linear(C, Fw, bias=False)
            self.w3 = nn.Linear(C, Fw, bias=False)
            self.w2 = nn.Linear(Fw, C, bias=False)

        def forward(self, x):
            B, T, _ = x.shape
            n = self.attention_norm(x)
            q = rope(self.wq(n).view(B, T, H, hd))
            k = rope(self.wk(n).view(B, T, G, hd))
            v = self.wv(n).view(B, T, G, hd)
            if G < H:  # torchtitan's repeat_kv
                k = k[:, :, :, None, :].expand(B, T, G, H // G, hd).reshape(B, T, H, hd)
                v = v[:, :, :, None, :].expand(B, T, G, H // G, hd).reshape(B, T, H, hd)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            x = x + self.wo(a.transpose(1, 2).reshape(B, T, C))
            m = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(m)) * self.w3(m))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(Vp, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))  # "blocks.": peer_gpt's FP8 filter
            self.norm = nn.RMSNorm(C, eps=1e-5)
            self.output = nn.Linear(C, Vp, bias=False)
            if not s["untied"]:
                self.output.weight = self.tok_embeddings.weight

        def head_loss(self, x, targets):
            logits = self.output(self.norm(x))
            return F.cross_entropy(logits[..., :V].float().flatten(0, 1), targets.flatten())

        def forward(self, tokens, targets):
            x = self.tok_embeddings(tokens)
            for b in self.blocks:
                x = b(x)
            return self.head_loss(x, targets)

    with torch.device(device):
        m = Llama()
    with torch.no_grad():  # f8's: N(0, 0.02) weights and embedding, norms 1
        for name, p in m.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    return m.to(dtype)


def main():
    base.PRESETS = PRESETS
    base.shape_of = shape_of
    base.param_count_of = param_count_of
    base.build_model = build_model
    base.SCRIPT = os.path.abspath(__file__)
    base.DEFAULT_MODEL = "llama-1B"
    base.GPT2_VOCAB = LLAMA3_VOCAB  # the --vocab default
    base.__doc__ = __doc__
    return base.main()


if __name__ == "__main__":
    sys.exit(main())
