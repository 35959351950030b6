"""The installed package, with pytest and NumPy only (what `pip install
./python` gives): the library it loads is its own (or F8_LIBRARY's), and the
CPU backend computes what NumPy computes in float64 — exactly up to FP32
rounding with FP8 off, within E4M3's precision with FP8 on — forward and
backward; errors raise f8.Error with the library's message.

    python -m venv v && v/bin/pip install ./python pytest && v/bin/python -m pytest python/tests
"""
import os

import numpy as np
import pytest

import f8


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def test_library_comes_from_the_package():
    env = os.environ.get("F8_LIBRARY")
    want = env if env else os.path.join(os.path.dirname(os.path.abspath(f8.__file__)), "libf8.so")
    assert os.path.samefile(f8.library_path, want), f8.library_path


@pytest.mark.parametrize("fp8, tol", [(False, 1e-6), (True, 0.08)])
def test_linear_against_numpy(fp8, tol):
    rng = np.random.default_rng(7)
    T, K, N = 24, 48, 40
    ctx = f8.Context()  # the CPU backend
    lin = f8.Linear(ctx, K, N, max_tokens=T, fp8=fp8, seed=3)
    w = lin.numpy("weight").astype(np.float64)
    b = lin.numpy("bias").astype(np.float64).reshape(-1)
    x = rng.standard_normal((T, K)).astype(np.float32)
    dy = (0.1 * rng.standard_normal((T, N))).astype(np.float32)
    saved = lin.saved()
    y = lin.forward(x, saved=saved, is_first_microbatch=True)
    assert y.shape == (T, N) and y.dtype == np.float32
    assert rel(y, x.astype(np.float64) @ w.T + b) < tol
    dx = lin.backward(saved, dy)
    assert rel(dx, dy.astype(np.float64) @ w) < tol
    assert rel(lin.numpy("weight", grad=True), dy.astype(np.float64).T @ x.astype(np.float64)) < tol
    assert rel(lin.numpy("bias", grad=True).reshape(-1), dy.astype(np.float64).sum(axis=0)) < 1e-6
    ctx.update_scales("forward")
    ctx.update_scales("backward")


def test_errors_carry_the_library_message():
    ctx = f8.Context()
    lin = f8.Linear(ctx, 16, 8, max_tokens=4, fp8=False)
    with pytest.raises(f8.Error) as e:
        lin.forward(np.zeros((4, 15), np.float32))
    assert "f8_module_forward" in str(e.value)
    with pytest.raises(f8.Error) as e:
        lin.forward(np.zeros((5, 16), np.float32))  # more tokens than max_tokens
    assert "max_tokens" in str(e.value)
