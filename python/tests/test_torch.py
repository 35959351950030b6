"""f8.torch against the C API, on CPU torch and (when there is one) a CUDA GPU.

    python3 python/tests/test_torch.py          # from the repository root, after `make`

1. a small model of f8 modules trains with torch.optim.AdamW (loss falls);
2. each module's outputs and gradients equal the package's (the C API through
   ctypes) on the same weights and inputs: bit for bit on the same backend
   (CPU; and CUDA against CUDA), and within FP8 tolerance CUDA against CPU;
   likewise with a residual added inside the module (forward(x, residual=r),
   the C API's f8_module_forward_add), whose gradient must be the output's;
3. state_dict (parameters and FP8 extra state) round-trips through torch.save;
4. CUDA: forward + backward captured in torch.cuda.graph and replayed equal
   the eager step bit for bit;
(The per-call cost of f8.torch against the C API is a benchmark, not a test:
bench/bench_torch.py.)
Prints "test_torch: N checks, M failed" and exits non-zero on a failure.
"""
import io
import os
import sys
import ctypes as C

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import f8  # noqa: E402
import f8.torch as te  # noqa: E402
from f8._lib import lib  # noqa: E402

checks = failures = 0


def check(cond, what):
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        print("FAILED: %s" % what)


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / max(b.norm(), 1e-30))


def train(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(te.LayerNormLinear(64, 64, device=device, max_tokens=256),
                                te.LayerNormMLP(64, 256, device=device, max_tokens=256),
                                te.Linear(64, 16, device=device, max_tokens=256))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    w = torch.randn(64, 16, device=device)
    losses = []
    for step in range(40):
        x = torch.randn(256, 64, device=device)
        target = torch.tanh(x @ w)
        opt.zero_grad()
        with te.fp8_autocast(enabled=True):
            y = model(x)
        loss = torch.nn.functional.mse_loss(y, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    print("  %s: training loss %.4f -> %.4f" % (device, first, last))
    check(last < 0.5 * first, "%s: loss fell (%.4f -> %.4f)" % (device, first, last))


def pair(kind, device, dtype, seed, recipe=None):
    kw = dict(max_tokens=64, seed=seed)
    tkw = dict(kw, recipe=recipe)
    if kind == "linear":
        return te.Linear(48, 32, params_dtype=dtype, device=device, **tkw), lambda ctx: f8.Linear(
            ctx, 48, 32, params_dtype="bf16" if dtype == torch.bfloat16 else "fp32", **kw)
    if kind == "lnl":
        return te.LayerNormLinear(64, 48, params_dtype=dtype, device=device, **tkw), lambda ctx: f8.LayerNormLinear(
            ctx, 64, 48, params_dtype="bf16" if dtype == torch.bfloat16 else "fp32", **kw)
    return te.LayerNormMLP(64, 128, params_dtype=dtype, device=device, **tkw), lambda ctx: f8.LayerNormMLP(
        ctx, 64, 128, params_dtype="bf16" if dtype == torch.bfloat16 else "fp32", **kw)


def match(kind, device, dtype, recipe=None, residual=False):
    """The torch module and the package's module (same config and seed: the same init) on one ctx kind;
    recipe: te.Float8CurrentScaling() and the like (None: delayed); residual: both add a residual in
    the module (forward(..., residual=r)), and torch's gradient of r must be dy."""
    torch.manual_seed(1)
    m, make = pair(kind, device, dtype, 11, recipe)
    with torch.no_grad():  # move the weights off their init, the same in both
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    x = torch.randn(2, 16, m.in_features, device=device).to(dtype).requires_grad_(True)
    dy = (torch.randn(2, 16, m.out_features, device=device) * 0.1).to(dtype)
    r = torch.randn(2, 16, m.out_features, device=device).to(dtype).requires_grad_(True) if residual else None
    with te.fp8_autocast():
        y = m(x, is_first_microbatch=True, residual=r)
    y.backward(dy)
    for ref_device in sorted({device, "cpu"}):
        ctx = te.context(ref_device, m.recipe) if ref_device == "cpu" else m._ctx
        ref = make(ctx)
        for name, p in m.named_parameters():  # the same weights
            rv = ref.param(name)
            if ref_device == "cpu":
                dst = torch.from_numpy(rv.numpy())
                dst = dst.view(torch.bfloat16) if dtype == torch.bfloat16 else dst
                dst.view(-1).copy_(p.detach().cpu().view(-1))
            else:
                te._view(ref, rv.c, (rv.c.rows * rv.c.cols,), p.device).copy_(p.detach().view(-1))
        xs, dys = x.detach().to(ref_device), dy.to(ref_device)
        yr = torch.empty_like(y, device=ref_device)
        dxr = torch.empty_like(xs)
        saved = ref.saved()
        ctx.synchronize() if ref_device != "cpu" else None
        rs = f8.Tensor(r.detach().to(ref_device)) if residual else None
        ref.forward(f8.Tensor(xs), f8.Tensor(yr), is_first_microbatch=True, saved=saved, residual=rs)
        ref.backward(saved, f8.Tensor(dys), f8.Tensor(dxr))
        if ref_device != "cpu":
            ctx.synchronize()
        exact = ref_device == device
        tol = 0 if exact else (3e-2 if dtype == torch.bfloat16 else 2e-2)
        pairs = [("y", y.detach(), yr), ("dx", x.grad, dxr)] + ([("d residual", r.grad, dys)] if residual else [])
        for name, p in m.named_parameters():
            g = ref.param(name, grad=True)
            if ref_device == "cpu":
                gt = torch.from_numpy(g.numpy().copy())
                gt = gt.view(torch.bfloat16) if dtype == torch.bfloat16 else gt
            else:
                gt = te._view(ref, g.c, (g.c.rows * g.c.cols,), p.device).clone()
            pairs.append(("grad " + name, p.grad.view(-1), gt.view(-1)))
        worst = 0.0
        for what, a, b in pairs:
            if exact:
                check(torch.equal(a.cpu(), b.cpu().view(a.shape)), "%s %s %s vs the C API: %s differs" % (
                    kind, device, dtype, what))
            else:
                err = rel(a.float(), b.float().view(a.shape))  # not r: that is the residual, used again
                worst = max(worst, err)
                check(err <= tol, "%s %s vs CPU: %s relative %.2e > %.0e" % (kind, device, what, err, tol))
        print("  %s %s %s %s%s vs the C API on %s: %s" % (kind, device, str(dtype)[6:], m.recipe.scaling,
                                                          " + residual" if residual else "", ref_device,
                                                          "bit for bit" if exact else "worst relative %.1e" % worst))


def state_dict_round_trip(device):
    torch.manual_seed(2)
    m = te.LayerNormMLP(64, 128, device=device, max_tokens=32)
    x = torch.randn(32, 64, device=device)
    for _ in range(3):  # some FP8 history
        with te.fp8_autocast():
            y = m(x)
        y.sum().backward()
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    other = te.LayerNormMLP(64, 128, device=device, max_tokens=32, seed=99)
    other.load_state_dict(torch.load(buf, weights_only=False))
    ok = all(torch.equal(a, b) for a, b in zip(m.parameters(), other.parameters()))
    s1, s2 = m.get_extra_state(), other.get_extra_state()
    ok_fp8 = all(torch.equal(s1[k][f], s2[k][f]) for k in s1 for f in s1[k])
    with torch.no_grad(), te.fp8_autocast():
        same = torch.equal(m(x), other(x))
    check(ok and ok_fp8 and same and float(s1["fwd"]["amax_history"].abs().sum()) > 0,
          "%s: state_dict round trip (params %s, fp8 %s, forward %s)" % (device, ok, ok_fp8, same))
    print("  %s: state_dict round trip (parameters, FP8 state, forward): %s" % (device, ok and ok_fp8 and same))


def graph_capture():
    torch.manual_seed(3)
    dev = "cuda"
    m = torch.nn.Sequential(te.LayerNormLinear(256, 256, device=dev, max_tokens=512),
                            te.LayerNormMLP(256, 1024, device=dev, max_tokens=512)).to(dev)
    x = torch.randn(512, 256, device=dev, requires_grad=True)
    dy = torch.randn(512, 256, device=dev)

    def step():
        with te.fp8_autocast():
            y = m(x)
        y.backward(dy)
        return y

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: plans and lazy buffers
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    snap = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in m.state_dict().items()}
    g = torch.cuda.CUDAGraph()
    for p in m.parameters():
        p.grad.zero_()
    x.grad = None
    with torch.cuda.graph(g):
        y_static = step()
    # replay from the snapshot, then the eager step from the same snapshot
    m.load_state_dict(snap)
    for p in m.parameters():
        p.grad.zero_()
    x.grad.zero_()
    g.replay()
    torch.cuda.synchronize()
    yg, dxg, gg = y_static.clone(), x.grad.clone(), [p.grad.clone() for p in m.parameters()]
    m.load_state_dict(snap)
    for p in m.parameters():
        p.grad.zero_()
    x.grad.zero_()
    ye = step()
    torch.cuda.synchronize()
    ok = torch.equal(yg, ye) and torch.equal(dxg, x.grad) and all(
        torch.equal(a, p.grad) for a, p in zip(gg, m.parameters()))
    check(ok, "CUDA graph replay equals the eager step")
    print("  cuda: torch.cuda.graph capture + replay of forward and backward equals eager: %s" % ok)


def main():
    print("test_torch: torch %s, f8 library %s" % (torch.__version__, f8.library_path))
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        train(device)
        for kind in ("linear", "lnl", "mlp"):
            for dtype in (torch.float32, torch.bfloat16):
                match(kind, device, dtype)
            match(kind, device, torch.bfloat16, residual=True)
        match("linear", device, torch.float32, residual=True)
        for recipe in (te.Float8CurrentScaling(), te.Float8BlockScaling(power_2_scales=True),
                       te.from_recipe_name("rowwise"), te.from_recipe_name("rowwise_with_gw_hp")):
            match("mlp", device, torch.float32, recipe)
            match("lnl", device, torch.bfloat16, recipe)
        state_dict_round_trip(device)
    if torch.cuda.is_available():
        graph_capture()
    else:
        print("  no CUDA: graph capture needs a GPU (skipped)")
    print("test_torch: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
