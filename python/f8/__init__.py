"""f8 from Python: ctypes over libf8 (the C library `make` builds).

    import numpy as np, f8
    ctx = f8.Context()                                  # CPU backend; f8.Context("cuda") for a GPU
    lin = f8.Linear(ctx, 64, 32, max_tokens=16)         # FP8 on, FP32 master weights
    x = np.random.randn(16, 64).astype(np.float32)
    saved = lin.saved()
    y = lin.forward(x, saved=saved)                     # f8_module_forward, y a new NumPy array
    dx = lin.backward(saved, np.ones_like(y))           # gradients accumulate in lin
    ctx.update_scales("forward"); ctx.update_scales("backward")
    lin.numpy("weight", grad=True)                      # a view of f8's memory, no copy

Tensors handed to f8 are views, never copies: NumPy arrays on a CPU ctx (its
backend memory is host memory), torch tensors (CPU or CUDA, by data_ptr) on
the ctx of their device. Errors raise f8.Error with f8_ctx_last_error's text.
The PyTorch modules are in f8.torch (torch is imported only there).
"""
import ctypes as C

import numpy as np

from . import _lib
from ._lib import Error, lib

__all__ = ["Error", "Recipe", "Context", "Tensor", "Saved", "Module", "Linear", "LayerNormLinear",
           "LayerNormMLP", "Checkpoint", "library_path"]

library_path = _lib.path

_DTYPES = {"fp32": _lib.FP32, "bf16": _lib.BF16, "e4m3": _lib.E4M3, "e5m2": _lib.E5M2}
_NP_OF = {_lib.FP32: np.float32, _lib.BF16: np.uint16, _lib.E4M3: np.uint8, _lib.E5M2: np.uint8}
_TYPESTR = {_lib.FP32: "<f4", _lib.BF16: "<u2", _lib.E4M3: "|u1", _lib.E5M2: "|u1"}


def _dtype_code(d):
    if isinstance(d, int):
        return d
    if d not in _DTYPES:
        raise ValueError("dtype %r: one of fp32, bf16, e4m3, e5m2" % (d,))
    return _DTYPES[d]


def _direction(d):
    if d in (0, "forward", "fwd"):
        return _lib.DIR_FORWARD
    if d in (1, "backward", "bwd"):
        return _lib.DIR_BACKWARD
    raise ValueError("direction %r: 'forward' or 'backward'" % (d,))


def microbatch_code(is_first_microbatch):
    """TE's is_first_microbatch: None -> NONE (cast every forward), True ->
    FIRST (cast into the cached workspace), False -> NOT_FIRST (reuse it)."""
    if is_first_microbatch is None:
        return _lib.MICROBATCH_NONE
    return _lib.MICROBATCH_FIRST if is_first_microbatch else _lib.MICROBATCH_NOT_FIRST


_SCALINGS = ("delayed", "current", "block", "rowwise", "rowwise_with_gw_hp")  # f8_recipe_kind's order


class Recipe:
    """The scaling recipe (f8_recipe: TE's DelayedScaling, or its
    Float8CurrentScaling with scaling="current"); fixed per ctx at creation.
    format: "HYBRID" or "E4M3"; amax_compute_algo: "max" or "most_recent";
    scaling: "delayed" (default), "current", "block" (1x128 / 128x128 tiles) or
    "rowwise" (one scale per row: torchao's "rowwise" with fp8_format="E4M3"
    and power_2_scales=True, as f8.torch.Float8RowwiseScaling() sets them) or
    "rowwise_with_gw_hp" (the same, the weight gradient's GEMM in high precision);
    power_2_scales: every scaling but delayed."""

    def __init__(self, margin=0, fp8_format="HYBRID", amax_history_len=1024, amax_compute_algo="max",
                 reduce_amax=True, scaling="delayed", power_2_scales=False):
        self.margin = int(margin)
        self.fp8_format = str(fp8_format).upper()
        self.amax_history_len = int(amax_history_len)
        self.amax_compute_algo = str(amax_compute_algo).lower()
        self.reduce_amax = bool(reduce_amax)
        self.scaling = str(scaling).lower()
        self.power_2_scales = bool(power_2_scales)
        if self.scaling not in _SCALINGS:
            raise ValueError("scaling %r: one of %s" % (scaling, ", ".join(_SCALINGS)))
        if self.fp8_format not in ("HYBRID", "E4M3"):
            raise ValueError("fp8_format %r: HYBRID or E4M3" % (fp8_format,))
        if self.amax_compute_algo not in ("max", "most_recent"):
            raise ValueError("amax_compute_algo %r: max or most_recent" % (amax_compute_algo,))

    def to_c(self):
        r = lib.f8_recipe_default()
        r.format = _lib.FORMAT_HYBRID if self.fp8_format == "HYBRID" else _lib.FORMAT_E4M3
        r.margin = self.margin
        r.amax_history_len = self.amax_history_len
        r.amax_compute_algo = _lib.AMAX_MAX if self.amax_compute_algo == "max" else _lib.AMAX_MOST_RECENT
        r.reduce_amax = int(self.reduce_amax)
        r.kind = _SCALINGS.index(self.scaling)
        r.power_2_scales = int(self.power_2_scales)
        return r

    def key(self):
        return (self.fp8_format, self.margin, self.amax_history_len, self.amax_compute_algo, self.reduce_amax,
                self.scaling, self.power_2_scales)

    def __eq__(self, other):
        return isinstance(other, Recipe) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return ("Recipe(margin=%d, fp8_format=%r, amax_history_len=%d, amax_compute_algo=%r, reduce_amax=%r, "
                "scaling=%r, power_2_scales=%r)" % (self.margin, self.fp8_format, self.amax_history_len,
                                                    self.amax_compute_algo, self.reduce_amax, self.scaling,
                                                    self.power_2_scales))


class Context:
    """An f8_ctx: backend "cpu" or "cuda" (device ordinal `device`) and its
    recipe. Every other object is made from one and keeps it alive."""

    def __init__(self, backend="cpu", device=0, recipe=None):
        cfg = lib.f8_ctx_config_default()
        if backend not in ("cpu", "cuda"):
            raise ValueError("backend %r: 'cpu' or 'cuda'" % (backend,))
        cfg.backend = _lib.BACKEND_CUDA if backend == "cuda" else _lib.BACKEND_CPU
        cfg.device = int(device)
        self.recipe = recipe if recipe is not None else Recipe()
        cfg.recipe = self.recipe.to_c()
        ptr = C.c_void_p()
        why = C.create_string_buffer(512)
        status = lib.f8_ctx_create(C.byref(cfg), C.byref(ptr), why, 512)
        if status != _lib.OK:
            raise Error(status, why.value.decode("utf-8", "replace"))
        self._p = ptr
        self.backend = backend
        self.device = int(device)

    @property
    def ptr(self):
        return self._p

    def check(self, status, what=""):
        _lib.check(status, self._p, what)

    def last_error(self):
        return lib.f8_ctx_last_error(self._p).decode("utf-8", "replace")

    def set_stream(self, stream):
        """Issue the ctx's work on a cudaStream_t (an int handle, e.g.
        torch.cuda.current_stream().cuda_stream); None or 0: the ctx's own."""
        self.check(lib.f8_ctx_set_stream(self._p, C.c_void_p(stream or None)))

    def stream(self):
        return lib.f8_ctx_stream(self._p) or 0

    def synchronize(self):
        self.check(lib.f8_ctx_synchronize(self._p))

    def update_scales(self, direction):
        """The fused delayed-scaling update of every slot of a direction."""
        self.check(lib.f8_ctx_update_scales(self._p, _direction(direction)))

    def close(self):
        if getattr(self, "_p", None):
            lib.f8_ctx_destroy(self._p)
            self._p = None

    def __del__(self):
        self.close()


class _ArrayInterface:
    """Makes NumPy view backend memory at ptr while holding `owner` alive."""

    def __init__(self, ptr, typestr, shape, owner):
        self.__array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                    "version": 3}
        self.owner = owner


def _as_numpy(ptr, dtype, shape, owner):
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype=_NP_OF[dtype])
    return np.asarray(_ArrayInterface(ptr, _TYPESTR[dtype], shape, owner))


class Tensor:
    """An f8_tensor view: data pointer, dtype, [rows, cols] (leading dims
    flattened), scale_inv for FP8. Built from a C-contiguous NumPy array
    (float32; bf16 as uint16 with dtype="bf16"; FP8 codes as uint8) or a
    contiguous torch tensor (float32 or bfloat16); it keeps the source alive
    and copies nothing."""

    def __init__(self, source=None, dtype=None, _c=None, _owner=None):
        if _c is not None:
            self.c, self.owner = _c, _owner
            return
        self.owner = source
        if isinstance(source, np.ndarray):
            if not source.flags.c_contiguous:
                raise ValueError("f8.Tensor: the NumPy array must be C-contiguous")
            if dtype is None:
                if source.dtype != np.float32:
                    raise ValueError("f8.Tensor: %s array: float32, or give dtype= (bf16 as uint16)" % source.dtype)
                code = _lib.FP32
            else:
                code = _dtype_code(dtype)
                if source.dtype != np.dtype(_NP_OF[code]):
                    raise ValueError("f8.Tensor: dtype %s needs a %s array, not %s" %
                                     (dtype, np.dtype(_NP_OF[code]), source.dtype))
            shape, ptr = source.shape, source.ctypes.data
        elif type(source).__module__.startswith("torch"):
            import torch
            if not source.is_contiguous():
                raise ValueError("f8.Tensor: the torch tensor must be contiguous")
            codes = {torch.float32: _lib.FP32, torch.bfloat16: _lib.BF16}
            if source.dtype not in codes:
                raise ValueError("f8.Tensor: torch dtype %s: float32 or bfloat16" % source.dtype)
            code, shape, ptr = codes[source.dtype], tuple(source.shape), source.data_ptr()
        else:
            raise TypeError("f8.Tensor: a NumPy array or a torch tensor, not %s" % type(source).__name__)
        if len(shape) == 0:
            rows, cols = 1, 1
        else:
            cols = int(shape[-1])
            rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        self.c = _lib.Tensor_t(ptr or None, code, rows, cols, None)

    @property
    def dtype(self):
        return self.c.dtype

    @property
    def shape(self):
        return (self.c.rows, self.c.cols)

    def numpy(self):
        """A NumPy view (host memory only: a CPU ctx's tensors)."""
        return _as_numpy(self.c.data or 0, self.c.dtype, (self.c.rows, self.c.cols), self)

    def ref(self):
        return C.byref(self.c)


def _tensor(x, dtype=None):
    return x if isinstance(x, Tensor) else Tensor(x, dtype)


def _alive(obj):
    """Not yet closed (a Context, Module: its C object still exists)."""
    return getattr(obj, "_p", None) is not None


class Saved:
    """An f8_saved: what one forward keeps for its backward."""

    def __init__(self, module):
        self.module = module
        p = C.c_void_p()
        module.ctx.check(lib.f8_module_saved_create(module._p, C.byref(p)))
        self._p = p

    def close(self):
        # Garbage in a reference cycle (a traceback's frames, at exit) is
        # finalized in any order: what a dead module or ctx owned is gone
        # with it, and touching it would crash.
        if getattr(self, "_p", None):
            if _alive(self.module) and _alive(self.module.ctx):
                lib.f8_saved_destroy(self._p)
            self._p = None

    def __del__(self):
        self.close()


class Module:
    """The f8_module calls every layer has. Subclasses create the module."""

    PARAMS = ()
    N_SLOTS = (3, 2)

    def _create(self, ctx, fn, cfg):
        self.ctx = ctx
        self.config = cfg
        p = C.c_void_p()
        ctx.check(fn(ctx.ptr, C.byref(cfg), C.byref(p)))
        self._p = p

    @property
    def ptr(self):
        return self._p

    def close(self):
        if getattr(self, "_p", None):
            if _alive(self.ctx):  # see Saved.close
                lib.f8_module_destroy(self._p)
            self._p = None

    def __del__(self):
        self.close()

    @property
    def out_features(self):
        raise NotImplementedError

    def param_names(self):
        """The parameters this module has (bias only with bias, ...)."""
        names = []
        for n in self.PARAMS:
            v = _lib.Tensor_t()
            if lib.f8_module_param(self._p, _lib.PARAMS[n], 0, C.byref(v)) == _lib.OK:
                names.append(n)
        return names

    def param(self, name, grad=False):
        """Tensor view of a parameter (or its gradient): backend memory owned
        by the module, which the view keeps alive."""
        if name not in _lib.PARAMS:
            raise ValueError("unknown parameter %r" % (name,))
        v = _lib.Tensor_t()
        self.ctx.check(lib.f8_module_param(self._p, _lib.PARAMS[name], int(bool(grad)), C.byref(v)))
        return Tensor(_c=v, _owner=self)

    def numpy(self, name, grad=False):
        """NumPy view of a parameter or gradient (CPU ctx), shape as f8 has it."""
        if self.ctx.backend != "cpu":
            raise ValueError("numpy views need a CPU ctx; use param() or f8.torch on CUDA")
        return self.param(name, grad).numpy()

    def zero_grad(self):
        self.ctx.check(lib.f8_module_zero_grad(self._p))

    def saved(self):
        return Saved(self)

    def forward(self, x, y=None, is_first_microbatch=None, saved=None, residual=None):
        """y = module(x). x: [..., in] NumPy float32 (or a Tensor); y: an
        output array, or None for a new one of x's dtype. saved: a Saved
        from this module, or None (inference). residual: an array (or
        Tensor) [..., out] of y's dtype, or None: y = module(x) + residual,
        added in the last GEMM's epilogue with one rounding
        (f8_module_forward_add); it may be y itself."""
        xt = _tensor(x)
        if y is None:
            if not isinstance(x, np.ndarray):
                raise ValueError("forward: give y for a non-NumPy x")
            y = np.empty(x.shape[:-1] + (self.out_features,), dtype=x.dtype)
        bf16 = "bf16" if xt.dtype == _lib.BF16 else None
        yt = _tensor(y, bf16)
        mb, sp = microbatch_code(is_first_microbatch), saved._p if saved is not None else None
        if residual is None:
            self.ctx.check(lib.f8_module_forward(self._p, xt.ref(), yt.ref(), mb, sp))
        else:
            rt = yt if residual is y else _tensor(residual, bf16)
            self.ctx.check(lib.f8_module_forward_add(self._p, xt.ref(), yt.ref(), rt.ref(), mb, sp))
        return y

    def backward(self, saved, dy, dx=True, add=False):
        """Gradients of the forward that filled saved. dx: True for a new
        array like the forward's x ([..., in]), an array, or None to skip.
        add=True: dx (an array, required) is an existing gradient and the
        input gradient is added into it in place, with one rounding
        (f8_module_backward_add)."""
        dyt = _tensor(dy)
        if add and (dx is None or dx is True):
            raise ValueError("backward(add=True): give dx, the gradient to add into")
        if dx is True:
            if not isinstance(dy, np.ndarray):
                raise ValueError("backward: give dx for a non-NumPy dy")
            dx = np.empty(dy.shape[:-1] + (self.in_features,), dtype=dy.dtype)
        dxt = _tensor(dx, "bf16" if dyt.dtype == _lib.BF16 else None) if dx is not None else None
        if add:
            self.ctx.check(lib.f8_module_backward_add(self._p, saved._p, dyt.ref(), dxt.ref()))
        else:
            self.ctx.check(lib.f8_module_backward(self._p, saved._p, dyt.ref(), dxt.ref() if dxt else None))
        return dx

    # ---- FP8 scaling state -------------------------------------------------
    def slot(self, direction, i):
        s = _lib.Slot_t()
        self.ctx.check(lib.f8_module_slot(self._p, _direction(direction), int(i), C.byref(s)))
        return s

    def fp8_state(self):
        """{"fwd"/"bwd": {"amax_history": [L, n], "scale": [n], "scale_inv": [n]}}
        (host copies; synchronizes), as the checkpoint stores them."""
        L = self.ctx.recipe.amax_history_len
        out = {}
        for key, d, n in (("fwd", 0, self.N_SLOTS[0]), ("bwd", 1, self.N_SLOTS[1])):
            hist = np.zeros((n, L), np.float32)
            scale = np.zeros(n, np.float32)
            sinv = np.zeros(n, np.float32)
            for i in range(n):
                a, b = C.c_float(), C.c_float()
                self.ctx.check(lib.f8_slot_read(self.ctx.ptr, self.slot(d, i), C.byref(a), C.byref(b),
                                                hist[i].ctypes.data))
                scale[i], sinv[i] = a.value, b.value
            out[key] = {"amax_history": np.ascontiguousarray(hist.T), "scale": scale, "scale_inv": sinv}
        return out

    def load_fp8_state(self, state):
        """Write what fp8_state returned (synchronizes)."""
        L = self.ctx.recipe.amax_history_len
        for key, d, n in (("fwd", 0, self.N_SLOTS[0]), ("bwd", 1, self.N_SLOTS[1])):
            s = state[key]
            hist = np.asarray(s["amax_history"], np.float32)
            if hist.shape != (L, n):
                raise ValueError("%s amax_history: shape %s, expected %s" % (key, hist.shape, (L, n)))
            hist = np.ascontiguousarray(hist.T)
            for i in range(n):
                self.ctx.check(lib.f8_slot_write(self.ctx.ptr, self.slot(d, i), float(s["scale"][i]),
                                                 float(s["scale_inv"][i]), hist[i].ctypes.data))


def _fill(cfg, kw):
    for k, v in kw.items():
        if v is None:
            continue
        if k == "params_dtype":
            cfg.param_dtype = _dtype_code(v)
        elif k == "normalization":
            cfg.normalization = _lib.NORMS[v]
        elif k == "activation":
            cfg.activation = _lib.ACTIVATIONS[v]
        elif hasattr(cfg, k):
            setattr(cfg, k, int(v) if isinstance(v, bool) else v)
        else:
            raise TypeError("unknown option %r" % (k,))
    return cfg


class Linear(Module):
    """f8_linear_create: y = x Wᵀ + b. Options as f8_linear_config (bias, fp8,
    params_dtype "fp32"/"bf16", max_tokens, seed, fuse_wgrad_accumulation, fp8_weights)."""

    PARAMS = ("weight", "bias")
    N_SLOTS = (3, 2)

    def __init__(self, ctx, in_features, out_features, **kw):
        cfg = _fill(lib.f8_linear_config_default(in_features, out_features), kw)
        self.in_features, self._out = int(in_features), int(out_features)
        self._create(ctx, lib.f8_linear_create, cfg)

    @property
    def out_features(self):
        return self._out


class LayerNormLinear(Module):
    """f8_layernorm_linear_create: y = norm(x) Wᵀ + b (normalization
    "LayerNorm" or "RMSNorm", eps, zero_centered_gamma, ...)."""

    PARAMS = ("weight", "bias", "layer_norm_weight", "layer_norm_bias")
    N_SLOTS = (3, 2)

    def __init__(self, ctx, in_features, out_features, **kw):
        cfg = _fill(lib.f8_layernorm_linear_config_default(in_features, out_features), kw)
        if cfg.return_layernorm_output:
            raise ValueError("return_layernorm_output is not supported from Python yet")
        self.in_features, self._out = int(in_features), int(out_features)
        self._create(ctx, lib.f8_layernorm_linear_create, cfg)

    @property
    def out_features(self):
        return self._out


class LayerNormMLP(Module):
    """f8_layernorm_mlp_create: y = fc2(act(fc1(norm(x)))) (activation
    "gelu", "relu", "geglu", "reglu", "swiglu", "qgelu", "srelu")."""

    PARAMS = ("layer_norm_weight", "layer_norm_bias", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias")
    N_SLOTS = (6, 4)

    def __init__(self, ctx, hidden_size, ffn_hidden_size, **kw):
        cfg = _fill(lib.f8_layernorm_mlp_config_default(hidden_size, ffn_hidden_size), kw)
        self.in_features = self._out = int(hidden_size)
        self.ffn_hidden_size = int(ffn_hidden_size)
        self._create(ctx, lib.f8_layernorm_mlp_create, cfg)

    @property
    def out_features(self):
        return self._out


class Checkpoint:
    """An f8_checkpoint (safetensors): Checkpoint(ctx) empty, or
    Checkpoint.load(ctx, path)."""

    def __init__(self, ctx, _p=None):
        self.ctx = ctx
        if _p is None:
            _p = C.c_void_p()
            ctx.check(lib.f8_checkpoint_create(ctx.ptr, C.byref(_p)))
        self._p = _p

    @classmethod
    def load(cls, ctx, path):
        p = C.c_void_p()
        ctx.check(lib.f8_checkpoint_load(ctx.ptr, str(path).encode(), C.byref(p)))
        return cls(ctx, p)

    def save(self, path):
        self.ctx.check(lib.f8_checkpoint_save(self._p, str(path).encode()))

    def add_module(self, prefix, module):
        self.ctx.check(lib.f8_checkpoint_add_module(self._p, prefix.encode(), module.ptr))

    def restore_module(self, prefix, module):
        self.ctx.check(lib.f8_checkpoint_restore_module(self._p, prefix.encode(), module.ptr))

    def add_tensor(self, name, x, dtype=None):
        t = _tensor(x, dtype)
        self.ctx.check(lib.f8_checkpoint_add_tensor(self._p, name.encode(), t.ref()))

    def read_tensor(self, name, out, dtype=None):
        t = _tensor(out, dtype)
        self.ctx.check(lib.f8_checkpoint_read_tensor(self._p, name.encode(), t.ref()))
        return out

    def has(self, name):
        return bool(lib.f8_checkpoint_has(self._p, name.encode()))

    def set_metadata(self, key, value):
        self.ctx.check(lib.f8_checkpoint_set_metadata(self._p, key.encode(), value.encode()))

    def metadata(self, key):
        v = lib.f8_checkpoint_metadata(self._p, key.encode())
        return v.decode() if v is not None else None

    def close(self):
        if getattr(self, "_p", None):
            if _alive(self.ctx):  # see Saved.close
                lib.f8_checkpoint_destroy(self._p)
            self._p = None

    def __del__(self):
        self.close()
