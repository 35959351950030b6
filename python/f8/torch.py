"""PyTorch modules backed by f8: Linear, LayerNormLinear, LayerNormMLP.

    import torch, f8.torch as te
    layer = te.LayerNormMLP(4096, 16384, params_dtype=torch.bfloat16)   # on the current CUDA device
    with te.fp8_autocast(enabled=True):
        y = layer(x, is_first_microbatch=True)
    y.sum().backward()                                                  # f8 writes layer's .grad tensors

Memory. f8 owns the parameters and their gradients (allocated when the module
is created, as every f8 module does); each torch Parameter is a view of that
memory (no copy, built from the pointer: __cuda_array_interface__ on CUDA, a
NumPy view on the CPU), and its .grad is the view of f8's gradient buffer.
One copy of each, so torch optimizers update exactly what f8 computes with,
and f8's backward accumulates straight into .grad. After
optimizer.zero_grad(set_to_none=True) the next backward zeroes f8's buffer
and re-attaches the view; a .grad replaced by other code is copied in first.

Streams. Every call puts the module's f8 ctx on torch's current CUDA stream
(f8_ctx_set_stream when it changed: it only stores the handle, no sync).
The forward and backward issue only device work and allocate nothing
(outputs come from torch's allocator), so they can be captured in
torch.cuda.graph after one eager warm-up step.

FP8. Modules created with fp8=True (the default) compute in FP8 inside
fp8_autocast(enabled=True) and in high precision (plain torch over the same
parameters) outside it, as TransformerEngine's modules do. The recipe is
fixed when the module is created (it belongs to the f8 ctx, one per device and
recipe); fp8_autocast(recipe=...) must name the same one. Leaving the
outermost enabled fp8_autocast runs the forward scale update; the backward of
the first module run inside it runs the backward update (TE's order).
The FP8 scaling state (amax history, scale, scale_inv of every slot) is the
modules' extra state in state_dict.
"""
import contextlib
import ctypes as C

import numpy as np
import torch

import f8 as _f8
from f8 import _lib
from f8._lib import lib

__all__ = ["Linear", "LayerNormLinear", "LayerNormMLP", "fp8_autocast", "DelayedScaling", "Float8CurrentScaling",
           "Float8BlockScaling", "Float8RowwiseScaling", "from_recipe_name", "context"]

# The recipes under the names TransformerEngine's users know them by.
DelayedScaling = _f8.Recipe


def Float8CurrentScaling(**kw):
    """Per-tensor current scaling: each cast's scale from the tensor it casts."""
    return _f8.Recipe(scaling="current", **kw)


def Float8BlockScaling(**kw):
    """Block scaling: 1x128 tiles for activations and gradients, 128x128 blocks for weights."""
    return _f8.Recipe(scaling="block", **kw)


# torchao's recipes (torchao.float8.Float8LinearConfig.from_recipe_name), for
# its and torchtitan's users: "tensorwise" is TE's current scaling (E4M3
# forward, E5M2 gradients); "rowwise" is one scale per row of each GEMM
# operand (per token, per output channel; per input channel for the weight's
# dgrad copy), E4M3 everywhere, power-of-two scales.

def Float8RowwiseScaling(fp8_format="E4M3", power_2_scales=True, **kw):
    """Row-wise scaling, torchao's and torchtitan's "rowwise" recipe (its defaults: E4M3 gradients too,
    scales rounded down to powers of two)."""
    return _f8.Recipe(scaling="rowwise", fp8_format=fp8_format, power_2_scales=power_2_scales, **kw)


def from_recipe_name(name):
    """The f8 recipe of a torchao Float8LinearConfig.from_recipe_name name: "tensorwise", "rowwise" or
    "rowwise_with_gw_hp" (the weight gradient's GEMM in high precision; f8 keeps the weight's row-wise
    column copy in dgrad where torchao scales it per tensor)."""
    name = str(getattr(name, "value", name)).lower()
    if name == "tensorwise":
        return Float8CurrentScaling()
    if name == "rowwise":
        return Float8RowwiseScaling()
    if name == "rowwise_with_gw_hp":
        return _f8.Recipe(scaling="rowwise_with_gw_hp", fp8_format="E4M3", power_2_scales=True)
    raise ValueError("recipe name %r: tensorwise, rowwise or rowwise_with_gw_hp" % (name,))

_CTXS = {}


def context(device, recipe=None):
    """The f8 ctx of a torch device and recipe (made on first use, shared)."""
    recipe = recipe if recipe is not None else _f8.Recipe()
    device = torch.device(device)
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        key = ("cuda", idx, recipe)
    else:
        idx, key = 0, ("cpu", 0, recipe)
    if key not in _CTXS:
        ctx = _f8.Context("cuda" if device.type == "cuda" else "cpu", idx, recipe)
        ctx._torch_stream = None
        _CTXS[key] = ctx
    return _CTXS[key]


class _Autocast:
    def __init__(self, enabled, recipe):
        self.enabled, self.recipe = enabled, recipe
        self.ctxs = []
        self.first = True


_STACK = []


@contextlib.contextmanager
def fp8_autocast(enabled=True, recipe=None):
    """FP8 on (or off) for f8.torch modules created with fp8=True. Leaving
    the outermost enabled autocast runs f8_ctx_update_scales(FORWARD) on every
    ctx used inside."""
    state = _Autocast(bool(enabled), recipe)
    _STACK.append(state)
    try:
        yield
    finally:
        _STACK.pop()
        if state.enabled and not any(s.enabled for s in _STACK):
            for ctx in state.ctxs:
                _on_stream(ctx)
                ctx.update_scales("forward")


# cudaStreamLegacy: torch reports its legacy default stream as handle 0, which
# f8_ctx_set_stream would take as "the ctx's own stream" (a non-blocking one
# that does not order against torch's work); the legacy stream's own handle
# keeps f8's work in torch's order.
_CUDA_STREAM_LEGACY = 1


def _on_stream(ctx):
    if ctx.backend == "cuda":
        s = torch.cuda.current_stream(ctx.device).cuda_stream or _CUDA_STREAM_LEGACY
        if s != ctx._torch_stream:
            ctx.set_stream(s)
            ctx._torch_stream = s


class _CudaView:
    def __init__(self, ptr, shape, typestr, owner):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "version": 3, "strides": None}
        self.owner = owner


def _view(mod, t, shape, device):
    """A torch tensor over f8 memory (an f8_tensor view), keeping mod alive."""
    bf16 = t.dtype == _lib.BF16
    if device.type == "cuda":
        obj = _CudaView(t.data, shape, "<i2" if bf16 else "<f4", mod)
        out = torch.as_tensor(obj, device=device)
    else:
        out = torch.from_numpy(_f8._as_numpy(t.data, t.dtype, shape, mod))
    return out.view(torch.bfloat16) if bf16 else out


_TORCH_CODES = {torch.float32: _lib.FP32, torch.bfloat16: _lib.BF16}


def _t(x, rows, cols):
    code = _TORCH_CODES.get(x.dtype)
    if code is None:
        raise TypeError("f8.torch: tensors must be float32 or bfloat16, not %s" % x.dtype)
    return _lib.Tensor_t(x.data_ptr() or None, code, rows, cols, None)


class _Saved:
    """An f8_saved lent to one forward, back to its module's pool when the
    autograd graph holding it goes (backward done, or graph freed)."""

    def __init__(self, mod):
        self.mod = mod
        self.saved = mod._pool.pop() if mod._pool else mod._f8.saved()
        self.update_bwd = None

    def release(self):
        if self.saved is not None:
            self.mod._pool.append(self.saved)
            self.saved = None

    def __del__(self):
        self.release()


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(actx, mod, x, microbatch, holder, residual, *params):
        ctx = mod._ctx
        _on_stream(ctx)
        x = x.contiguous()
        rows = x.numel() // mod.in_features
        y = torch.empty(x.shape[:-1] + (mod.out_features,), dtype=x.dtype, device=x.device)
        tx, ty = _t(x, rows, mod.in_features), _t(y, rows, mod.out_features)
        saved = holder.saved._p if holder is not None else None
        if residual is None:
            ctx.check(lib.f8_module_forward(mod._f8.ptr, C.byref(tx), C.byref(ty), microbatch, saved))
        else:  # y = module(x) + residual in the last GEMM's epilogue: one rounding, no add kernel
            tr = _t(residual.contiguous(), rows, mod.out_features)
            ctx.check(lib.f8_module_forward_add(mod._f8.ptr, C.byref(tx), C.byref(ty), C.byref(tr), microbatch,
                                                saved))
        actx.mod, actx.holder = mod, holder
        actx.save_for_backward(x)  # f8 reads x again in backward: kept, and torch checks it is unchanged
        return y

    @staticmethod
    def backward(actx, dy):
        mod, holder = actx.mod, actx.holder
        (x,) = actx.saved_tensors
        ctx = mod._ctx
        _on_stream(ctx)
        mod._attach_grads()
        dy = dy.contiguous()
        rows = x.numel() // mod.in_features
        dx = torch.empty_like(x) if actx.needs_input_grad[1] else None
        tdy = _t(dy, rows, mod.out_features)
        tdx = _t(dx, rows, mod.in_features) if dx is not None else None
        ctx.check(lib.f8_module_backward(mod._f8.ptr, holder.saved._p, C.byref(tdy),
                                         C.byref(tdx) if tdx is not None else None))
        if holder.update_bwd is not None:
            holder.update_bwd.update_scales("backward")
        holder.release()
        # y = module(x) + residual: the residual's gradient is dy itself
        dres = dy if actx.needs_input_grad[4] else None
        return (None, dx, None, None, dres) + (None,) * len(mod._names)


class _Module(torch.nn.Module):
    """What the three layers share. Subclasses set _KIND and _native()."""

    def _build(self, cls, a, b, in_features, out_features, params_dtype, device, fp8, recipe, kw):
        super().__init__()
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if params_dtype not in (torch.float32, torch.bfloat16):
            raise TypeError("params_dtype: torch.float32 or torch.bfloat16")
        if recipe is None:
            recipe = next((s.recipe for s in reversed(_STACK) if s.recipe is not None), None)
        self._ctx = context(device, recipe)
        self.recipe = self._ctx.recipe
        self.in_features, self.out_features, self.fp8 = int(in_features), int(out_features), bool(fp8)
        self.device_ = device
        self._f8 = cls(self._ctx, a, b, fp8=fp8, params_dtype="bf16" if params_dtype == torch.bfloat16 else "fp32",
                       **kw)
        self._ctx.synchronize()  # the init is in f8 memory before torch reads it
        self._pool = []
        self._names = self._f8.param_names()
        self._grads = {}
        for name in self._names:
            p, g = self._f8.param(name), self._f8.param(name, grad=True)
            shape = (p.c.rows, p.c.cols) if name.endswith("weight") and "norm" not in name else (p.c.rows * p.c.cols,)
            param = torch.nn.Parameter(_view(self, p.c, shape, device))
            self._grads[name] = (_view(self, g.c, shape, device), g.c)
            param.grad = self._grads[name][0]
            self.register_parameter(name, param)

    def _attach_grads(self):
        for name in self._names:
            p = getattr(self, name)
            view, c = self._grads[name]
            if p.grad is None:
                self._ctx.check(lib.f8_tensor_zero(self._ctx.ptr, C.byref(c)))
                p.grad = view
            elif p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad)
                p.grad = view

    def _fp8_now(self):
        enabled = next((s for s in reversed(_STACK)), None)
        if not self.fp8 or enabled is None or not enabled.enabled:
            return None
        if enabled.recipe is not None and enabled.recipe != self.recipe:
            raise ValueError("fp8_autocast(recipe=%r): this module was created with %r; f8 fixes the recipe "
                             "when its ctx is made (create the module inside the autocast, or pass recipe=)" %
                             (enabled.recipe, self.recipe))
        return enabled

    def forward(self, x, is_first_microbatch=None, residual=None):
        """y = layer(x), or layer(x) + residual (a tensor of y's shape and
        dtype: added in the layer's last GEMM with one rounding, no separate
        add; its gradient is the output's)."""
        auto = self._fp8_now()
        if residual is not None:
            want = tuple(x.shape[:-1]) + (self.out_features,)
            if tuple(residual.shape) != want or residual.dtype != x.dtype or residual.device != x.device:
                raise ValueError("residual: %s %s on %s, the output is %s %s on %s" %
                                 (tuple(residual.shape), residual.dtype, residual.device, want, x.dtype, x.device))
        if self.fp8 and auto is None:
            y = self._native(x)
            return y if residual is None else y + residual
        if x.shape[-1] != self.in_features:
            raise ValueError("input has %d features, the module takes %d" % (x.shape[-1], self.in_features))
        params = [getattr(self, n) for n in self._names]
        grad = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params) or
                                            (residual is not None and residual.requires_grad))
        holder = _Saved(self) if grad else None
        if auto is not None:
            if self._ctx not in auto.ctxs:
                auto.ctxs.append(self._ctx)
            if auto.first and holder is not None:  # the last backward of the step updates the scales
                holder.update_bwd = self._ctx
                auto.first = False
        mb = _f8.microbatch_code(is_first_microbatch)
        if not grad:
            with torch.no_grad():
                return _Function.forward(_NoCtx(), self, x, mb, None, residual)
        return _Function.apply(self, x, mb, holder, residual, *params)

    # ---- FP8 state in the state dict ----------------------------------------
    def get_extra_state(self):
        s = self._f8.fp8_state()
        return {k: {f: torch.from_numpy(v.copy()) for f, v in d.items()} for k, d in s.items()}

    def set_extra_state(self, state):
        if state:
            self._f8.load_fp8_state({k: {f: np.asarray(v) for f, v in d.items()} for k, d in state.items()})


class _NoCtx:
    def save_for_backward(self, *a):
        pass


_ACTS = {
    "gelu": lambda a: torch.nn.functional.gelu(a, approximate="tanh"),
    "relu": torch.relu,
    "qgelu": lambda a: a * torch.sigmoid(1.702 * a),
    "srelu": lambda a: torch.relu(a) ** 2,
}
_GATED = {"geglu": _ACTS["gelu"], "reglu": torch.relu, "swiglu": torch.nn.functional.silu}


def _norm(self, x):
    g = self.layer_norm_weight + 1 if self._zc else self.layer_norm_weight
    if self._normalization == "RMSNorm":
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self._eps)).to(x.dtype) * g
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), g, getattr(self, "layer_norm_bias", None), self._eps)


class Linear(_Module):
    """y = x Wᵀ + b, as torch.nn.Linear (weight [out, in], bias [out])."""

    def __init__(self, in_features, out_features, bias=True, params_dtype=torch.float32, device=None, fp8=True,
                 recipe=None, max_tokens=4096, seed=1, **kw):
        self._build(_f8.Linear, in_features, out_features, in_features, out_features, params_dtype, device, fp8,
                    recipe, dict(bias=bias, max_tokens=max_tokens, seed=seed, **kw))

    def _native(self, x):
        return torch.nn.functional.linear(x, self.weight, getattr(self, "bias", None))


class LayerNormLinear(_Module):
    """y = norm(x) Wᵀ + b (normalization "LayerNorm" or "RMSNorm")."""

    def __init__(self, in_features, out_features, bias=True, normalization="LayerNorm", eps=1e-5,
                 zero_centered_gamma=False, params_dtype=torch.float32, device=None, fp8=True, recipe=None,
                 max_tokens=4096, seed=1, **kw):
        self._build(_f8.LayerNormLinear, in_features, out_features, in_features, out_features, params_dtype, device,
                    fp8, recipe, dict(bias=bias, normalization=normalization, eps=eps,
                                      zero_centered_gamma=zero_centered_gamma, max_tokens=max_tokens, seed=seed, **kw))
        self._normalization, self._eps, self._zc = normalization, eps, zero_centered_gamma

    def _native(self, x):
        return torch.nn.functional.linear(_norm(self, x), self.weight, getattr(self, "bias", None))


class LayerNormMLP(_Module):
    """y = fc2(act(fc1(norm(x)))), activation "gelu" (tanh), "relu", "geglu",
    "reglu", "swiglu", "qgelu" or "srelu"."""

    def __init__(self, hidden_size, ffn_hidden_size, bias=True, normalization="LayerNorm", eps=1e-5,
                 activation="gelu", zero_centered_gamma=False, params_dtype=torch.float32, device=None, fp8=True,
                 recipe=None, max_tokens=4096, seed=1, **kw):
        self._build(_f8.LayerNormMLP, hidden_size, ffn_hidden_size, hidden_size, hidden_size, params_dtype, device,
                    fp8, recipe, dict(bias=bias, normalization=normalization, eps=eps, activation=activation,
                                      zero_centered_gamma=zero_centered_gamma, max_tokens=max_tokens, seed=seed, **kw))
        self._normalization, self._eps, self._zc, self._act = normalization, eps, zero_centered_gamma, activation

    def _native(self, x):
        F = torch.nn.functional
        h = F.linear(_norm(self, x), self.fc1_weight, getattr(self, "fc1_bias", None))
        if self._act in _GATED:
            a, b = h.chunk(2, dim=-1)
            h = _GATED[self._act](a) * b
        else:
            h = _ACTS[self._act](h)
        return F.linear(h, self.fc2_weight, getattr(self, "fc2_bias", None))
