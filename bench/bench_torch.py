"""f8.torch's cost per call against the same layer through the C API.

    python3 bench/bench_torch.py [ROUNDS]        # on a CUDA GPU, after `make`

One LayerNormMLP (8192 tokens, hidden 4096, ffn 16384, BF16 parameters,
FP8, GELU) trained a step at a time: forward, forward scale update, backward,
backward scale update. "C API" makes those four calls through ctypes on
prepared f8_tensor structs; "f8.torch" is the torch module under
fp8_autocast with y.backward(dy) (autograd, torch's allocator, the stream
check). Both issue the same kernels (a profile shows the same list and the
same GPU time), so what differs is host work and any GPU idle it causes.

Method: the GPU's clock moves with its temperature and power over a run, so
two figures taken one after the other differ by more than the effect looked
for. The two paths are timed in alternating rounds (ABBA order, each round
N steps between CUDA events after a warm-up), and the figure is the median
over rounds of the per-round ratio torch/C. Host time per step is the
enqueue time of a round. Target (issue 17): at most 5% slower.
"""
import ctypes as C
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import f8  # noqa: E402
import f8.torch as te  # noqa: E402
from f8._lib import lib  # noqa: E402


def main():
    if not torch.cuda.is_available():
        print("bench_torch: no CUDA device (skipped)")
        return 0
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    torch.manual_seed(4)
    T, H, F = 8192, 4096, 16384
    m = te.LayerNormMLP(H, F, params_dtype=torch.bfloat16, device="cuda", max_tokens=T)
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(T, H, device="cuda", dtype=torch.bfloat16) * 0.01
    ref = f8.LayerNormMLP(m._ctx, H, F, params_dtype="bf16", max_tokens=T)
    saved = ref.saved()
    xr, yr, dxr = x.detach().clone(), torch.empty(T, H, device="cuda", dtype=torch.bfloat16), torch.empty_like(x)
    tx, ty, tdy, tdx = (te._t(t, T, H) for t in (xr, yr, dy, dxr))
    te._on_stream(m._ctx)
    ctx = m._ctx

    def c_step():  # a training step of the layer as C code writes it
        ctx.check(lib.f8_module_forward(ref.ptr, C.byref(tx), C.byref(ty), 1, saved._p))
        ctx.check(lib.f8_ctx_update_scales(ctx.ptr, 0))
        ctx.check(lib.f8_module_backward(ref.ptr, saved._p, C.byref(tdy), C.byref(tdx)))
        ctx.check(lib.f8_ctx_update_scales(ctx.ptr, 1))

    def torch_step():
        x.grad = None  # dx handed over, not added
        with te.fp8_autocast():
            y = m(x, is_first_microbatch=True)
        y.backward(dy)

    def timed(fn, n):
        fn()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        a.record()
        for _ in range(n):
            fn()
        b.record()
        host = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()
        return a.elapsed_time(b) / n, host * 1e6

    n = 10
    for _ in range(3):  # warm-up: plans, allocator, clocks
        timed(c_step, n), timed(torch_step, n)
    c_ms, t_ms, c_host, t_host, ratio = [], [], [], [], []
    for r in range(rounds):
        order = (c_step, torch_step) if r % 2 == 0 else (torch_step, c_step)
        got = {fn: timed(fn, n) for fn in order}
        c_ms.append(got[c_step][0]), t_ms.append(got[torch_step][0])
        c_host.append(got[c_step][1]), t_host.append(got[torch_step][1])
        ratio.append(got[torch_step][0] / got[c_step][0])
    med = statistics.median
    print("bench_torch (%s): LayerNormMLP %d tokens, hidden %d, ffn %d, BF16, FP8, forward+backward, "
          "%d rounds of %d steps:" % (torch.cuda.get_device_name(), T, H, F, rounds, n))
    print("  per round torch/C: " + " ".join("%.3f" % v for v in ratio))
    print("  C API %.3f ms/step, f8.torch %.3f ms/step (medians); median ratio %+.1f%% (target <= +5%%: %s); "
          "host time per step: C API %.0f us, f8.torch %.0f us" % (
              med(c_ms), med(t_ms), 100 * (med(ratio) - 1), "met" if med(ratio) <= 1.05 else "missed",
              med(c_host), med(t_host)))
    del saved, ref, m
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
