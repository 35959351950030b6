"""The Python package against the C API on the CPU backend (no pytest needed).

Run by tests/test_python.c: `run_cpu.py DIR`, where DIR holds what the C
program computed through the C API (manifest.txt, inputs, outputs, gradients,
checkpoints). Every case is repeated through the package with the same
inputs and must give the same bits; checkpoints must round-trip and equal the
C program's byte for byte (f8 writes canonical files); errors must raise
f8.Error with the library's message. Prints "test_python: N checks, M failed".
"""
import os
import ctypes
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import f8  # noqa: E402
from f8 import _lib  # noqa: E402

checks = 0
failures = 0


def check(cond, what):
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        if failures <= 30:
            print("FAILED: %s" % what, file=sys.stderr)


def same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def check_abi():
    abi = os.environ.get("F8_ABI")
    if not abi:
        return
    for item in abi.split(","):
        name, size = item.split("=")
        check(ctypes.sizeof(_lib.STRUCTS[name]) == int(size),
              "ctypes %s is %d bytes, C says %s: update f8/_lib.py" % (
                  name, ctypes.sizeof(_lib.STRUCTS[name]), size))


def make(ctx, kind, a, b, fp8, dtype, T, seed):
    kw = dict(fp8=fp8, params_dtype=dtype, max_tokens=T, seed=seed)
    if kind == "linear":
        return f8.Linear(ctx, a, b, **kw)
    if kind == "layernorm_linear":
        return f8.LayerNormLinear(ctx, a, b, **kw)
    return f8.LayerNormMLP(ctx, a, b, **kw)


def run_case(d, line):
    name, kind, a, b, fp8, dtype, T, seed, scaling, pow2 = line.split()
    a, b, fp8, T, seed = int(a), int(b), int(fp8), int(T), int(seed)
    npdt = np.uint16 if dtype == "bf16" else np.float32
    ny = a if kind == "layernorm_mlp" else b
    load = lambda ext, shape: np.fromfile(os.path.join(d, "%s.%s" % (name, ext)), dtype=npdt).reshape(shape)
    ctx = f8.Context(recipe=f8.Recipe(scaling=scaling, power_2_scales=bool(int(pow2))))
    m = make(ctx, kind, a, b, fp8, dtype, T, seed)
    x, dy = load("x", (T, a)), load("dy", (T, ny))
    # the 3-D shape of a torch-style batch: leading dims are flattened
    x3 = x.reshape(1, T, a)
    saved = m.saved()
    y = np.empty((1, T, ny), npdt)
    dx = np.empty((1, T, a), npdt)
    for step in (1, 2):
        f8x = f8.Tensor(x3, dtype)
        m.forward(f8x, f8.Tensor(y, dtype), is_first_microbatch=(step == 1), saved=saved)
        ctx.update_scales("forward")
        m.backward(saved, f8.Tensor(dy, dtype), f8.Tensor(dx, dtype))
        ctx.update_scales("backward")
        check(same_bits(y.reshape(T, ny), load("y%d" % step, (T, ny))), "%s: y of step %d" % (name, step))
        check(same_bits(dx.reshape(T, a), load("dx%d" % step, (T, a))), "%s: dx of step %d" % (name, step))
    if dtype == "fp32":  # the NumPy conveniences: new arrays, FP32 only
        m2 = make(ctx, kind, a, b, fp8, dtype, T, seed)
        s2 = m2.saved()
        y2 = m2.forward(x, is_first_microbatch=True, saved=s2)
        dx2 = m2.backward(s2, dy)
        check(y2.shape == (T, ny) and dx2.shape == (T, a), "%s: shapes of new arrays" % name)
    for p in m.param_names():
        g = m.numpy(p, grad=True)
        want = np.fromfile(os.path.join(d, "%s.grad.%s" % (name, p)), dtype=g.dtype)
        check(same_bits(g.ravel(), want), "%s: gradient %s" % (name, p))
    # checkpoint: the package's file equals the C program's byte for byte
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.safetensors")
        ck = f8.Checkpoint(ctx)
        ck.add_module("m", m)
        ck.save(path)
        ck.close()
        with open(path, "rb") as f1, open(os.path.join(d, name + ".safetensors"), "rb") as f2:
            check(f1.read() == f2.read(), "%s: checkpoint bytes differ from the C API's" % name)
        # round trip into a module with other weights
        other = make(ctx, kind, a, b, fp8, dtype, T, seed + 77)
        f8.Checkpoint.load(ctx, path).restore_module("m", other)
        for p in m.param_names():
            check(same_bits(other.numpy(p), m.numpy(p)), "%s: restored %s" % (name, p))
        s1, s2 = m.fp8_state(), other.fp8_state()
        for k in ("fwd", "bwd"):
            for f in ("amax_history", "scale", "scale_inv"):
                check(same_bits(s1[k][f], s2[k][f]), "%s: restored fp8 %s.%s" % (name, k, f))
        # fp8_state / load_fp8_state round trip
        third = make(ctx, kind, a, b, fp8, dtype, T, seed + 78)
        third.load_fp8_state(s1)
        s3 = third.fp8_state()
        check(all(same_bits(s1[k][f], s3[k][f]) for k in ("fwd", "bwd") for f in s1[k]), "%s: load_fp8_state" % name)
        # the restored module computes the same forward as the original
        if fp8:
            ya = m.forward(f8.Tensor(x3, dtype), np.empty((1, T, ny), npdt), is_first_microbatch=None)
            yb = other.forward(f8.Tensor(x3, dtype), np.empty((1, T, ny), npdt), is_first_microbatch=None)
            check(same_bits(ya, yb), "%s: forward after restore" % name)


def check_errors():
    ctx = f8.Context()
    lin = f8.Linear(ctx, 16, 8, max_tokens=4)
    try:
        lin.forward(np.zeros((5, 16), np.float32))
        check(False, "forward past max_tokens did not raise")
    except f8.Error as e:
        check(e.status_name == "F8_ERR_SHAPE" and "max_tokens" in str(e), "error text: %s" % e)
    try:
        lin.forward(np.zeros((4, 15), np.float32))
        check(False, "forward with the wrong width did not raise")
    except f8.Error as e:
        check(e.status == 2 and "x" in str(e), "error text: %s" % e)
    try:
        f8.Linear(ctx, 0, 8)
        check(False, "in_features 0 did not raise")
    except f8.Error as e:
        check(e.status_name == "F8_ERR_INVALID_ARGUMENT" or e.status_name == "F8_ERR_SHAPE", "error: %s" % e)
    try:
        f8.Checkpoint.load(ctx, "/nonexistent/f8.safetensors")
        check(False, "loading a missing file did not raise")
    except f8.Error as e:
        check(e.status_name == "F8_ERR_IO" and "nonexistent" in str(e), "error text: %s" % e)
    try:
        ctx.set_stream(1234)
        check(False, "set_stream on a CPU ctx did not raise")
    except f8.Error as e:
        check(e.status_name == "F8_ERR_UNSUPPORTED", "error: %s" % e)
    try:
        f8.Context("cuda", device=99)
        check(False, "a CUDA ctx on device 99 did not raise")
    except f8.Error as e:
        check(e.status_name == "F8_ERR_NO_DEVICE" and len(str(e)) > 20, "error text: %s" % e)
    try:
        f8.Tensor(np.zeros((2, 2), np.float64))
        check(False, "a float64 array did not raise")
    except ValueError:
        check(True, "")
    # a view keeps its module alive
    v = f8.Linear(ctx, 8, 4).numpy("weight")
    check(v.shape == (4, 8) and np.isfinite(v).all() and float(np.abs(v).max()) > 0, "a view outlives its module")


def check_residual():
    """forward(..., residual=) and backward(..., add=True) (f8_module_forward_add
    / _backward_add) against an FP64 NumPy oracle: the plain call's result
    plus the residual (or the old dx), within FP32 rounding; in place equals
    apart bit for bit; a residual of the wrong shape raises."""
    rng = np.random.default_rng(7)
    T = 16
    for kind, a, b in (("linear", 64, 32), ("layernorm_linear", 64, 48), ("layernorm_mlp", 64, 128)):
        for fp8 in (1, 0):
            ctx = f8.Context()
            ny = a if kind == "layernorm_mlp" else b
            m1, m2, m3 = (make(ctx, kind, a, b, fp8, "fp32", T, 11) for _ in range(3))
            x = rng.standard_normal((T, a)).astype(np.float32)
            r = rng.standard_normal((T, ny)).astype(np.float32)
            dy = rng.standard_normal((T, ny)).astype(np.float32)
            dx0 = rng.standard_normal((T, a)).astype(np.float32)
            s1, s2, s3 = m1.saved(), m2.saved(), m3.saved()
            y = m1.forward(x, is_first_microbatch=None, saved=s1)
            ya = m2.forward(x, is_first_microbatch=None, saved=s2, residual=r)
            want = y.astype(np.float64) + r
            tag = "%s fp8 %d" % (kind, fp8)
            check(np.abs(ya - want).max() <= 1e-5 * (1 + np.abs(want).max()),
                  "%s: forward with residual is off y + residual by %g" % (tag, np.abs(ya - want).max()))
            yi = r.copy()
            m3.forward(x, yi, is_first_microbatch=None, saved=s3, residual=yi)
            check(same_bits(yi, ya), "%s: forward with the residual in place differs from apart" % tag)
            dx = m1.backward(s1, dy)
            dxa = dx0.copy()
            m2.backward(s2, dy, dxa, add=True)
            want = dx.astype(np.float64) + dx0
            check(np.abs(dxa - want).max() <= 1e-5 * (1 + np.abs(want).max()),
                  "%s: backward add is off dx + old dx by %g" % (tag, np.abs(dxa - want).max()))
            check(same_bits(m1.numpy("weight" if kind != "layernorm_mlp" else "fc2_weight", grad=True),
                            m2.numpy("weight" if kind != "layernorm_mlp" else "fc2_weight", grad=True)),
                  "%s: the weight gradient depends on the add" % tag)
            before = ya.copy()
            try:
                m2.forward(x, ya, residual=np.zeros((T, ny + 1), np.float32))
                check(False, "%s: a residual of the wrong shape did not raise" % tag)
            except f8.Error as e:
                check(e.status_name == "F8_ERR_SHAPE", "%s: wrong residual shape: %s" % (tag, e))
            check(same_bits(ya, before), "%s: a refused forward wrote y" % tag)
            try:
                m2.backward(s2, dy, add=True)
                check(False, "%s: backward(add=True) without dx did not raise" % tag)
            except ValueError:
                check(True, "")


def main():
    d = sys.argv[1]
    check_abi()
    with open(os.path.join(d, "manifest.txt")) as f:
        for line in f:
            if line.strip():
                run_case(d, line)
    check_errors()
    check_residual()
    print("run_cpu.py: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
