#!/usr/bin/env python3
"""PyTorch's causal SDPA backends at bench_attention's shapes, and f8's ratio to each.

Usage: tools/peer_attention.py [BENCH_ATTENTION_OUTPUT]
Times torch.nn.functional.scaled_dot_product_attention(is_causal=True) in BF16 with the cuDNN
and the FlashAttention-2 backend (torch.nn.attention.sdpa_kernel) at the four shapes of
bench/bench_attention.c, forward and backward, FLOPs counted as bench_attention counts them
(causal forward 2*B*nh*S^2*hd, backward 2.5x that). Times are medians of CUDA-event intervals
over calls back to back; the backward is timed alone (torch.autograd.grad of a kept forward).
Given bench_attention's output (its JSON lines), it prints f8's TFLOP/s over cuDNN SDPA's per
shape and direction: the issue's target is >= 0.95 at each. Run it in the same GPU call as
bench_attention so the clocks are the same machine's.

f8's default backward is deterministic; torch's cuDNN backward is timed twice: as torch runs it by
default, and under torch.use_deterministic_algorithms(True) ("cuDNN det"), so f8's deterministic
path has a like-for-like peer where torch offers one (if torch refuses, the row says so).
"""
import json
import sys

SHAPES = [(16, 12, 1024, 64), (8, 16, 1024, 128), (4, 16, 4096, 128), (2, 16, 8192, 128)]


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def time_us(fn, reps):
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return median(ts)


def peer_rows():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = {}
    for B, nh, S, hd in SHAPES:
        q, k, v = (torch.randn(B, nh, S, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dy = torch.randn(B, nh, S, hd, device="cuda", dtype=torch.bfloat16)
        fwd_flop = 2.0 * B * nh * S * S * hd
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("cudnn-det", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION)):
            torch.use_deterministic_algorithms(name == "cudnn-det")
            try:
                with sdpa_kernel([backend]):
                    reps = max(5, int(2e5 / (fwd_flop / 3e8)))
                    f = time_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    b = time_us(lambda: torch.autograd.grad(y, (q, k, v), dy, retain_graph=True), reps)
                rows[(B, nh, S, hd, name)] = (fwd_flop / f / 1e6, 2.5 * fwd_flop / b / 1e6, f, b)
            except Exception as e:  # a backend that refuses the shape: say so, go on
                rows[(B, nh, S, hd, name)] = None
                print("  %s refused B%d nh%d S%d hd%d: %s" % (name, B, nh, S, hd, str(e).splitlines()[0][:120]))
        torch.use_deterministic_algorithms(False)
        del q, k, v, dy
        torch.cuda.empty_cache()
    return rows


def main():
    rows = peer_rows()
    f8 = {}
    if len(sys.argv) > 1:
        with open(sys.argv[1]) as fh:
            for line in fh:
                if line.startswith('{"bench":"attention"'):
                    r = json.loads(line)
                    f8[(r["B"], r["nh"], r["S"], r["hd"], r["path"])] = (r["fwd_tflops"], r["bwd_tflops"])
    print("%-24s %-14s %11s %11s %9s %9s" % ("shape", "impl", "fwd TFLOP/s", "bwd TFLOP/s", "fwd/cuDNN", "bwd/cuDNN"))
    for B, nh, S, hd in SHAPES:
        tag = "B%d nh%d S%d hd%d" % (B, nh, S, hd)
        ref = rows.get((B, nh, S, hd, "cudnn"))
        for name in ("cudnn", "cudnn-det", "flash"):
            r = rows.get((B, nh, S, hd, name))
            label = "torch " + {"cudnn": "cuDNN SDPA", "cudnn-det": "cuDNN det", "flash": "flash (FA2)"}[name]
            if r:
                print("%-24s %-14s %11.1f %11.1f %9s %9s" % (tag, label, r[0], r[1],
                      "%.2fx" % (r[0] / ref[0]) if ref else "-", "%.2fx" % (r[1] / ref[1]) if ref else "-"))
        for path in ("f8-own", "cuDNN", "cuDNN-nondet"):
            r = f8.get((B, nh, S, hd, path))
            if r:
                det = rows.get((B, nh, S, hd, "cudnn-det"))
                print("%-24s %-14s %11.1f %11.1f %9s %9s%s" % (tag, "f8 " + path, r[0], r[1],
                      "%.2fx" % (r[0] / ref[0]) if ref else "-", "%.2fx" % (r[1] / ref[1]) if ref else "-",
                      "   bwd/cuDNN det %.2fx" % (r[1] / det[1]) if det else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
