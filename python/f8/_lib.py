"""ctypes prototypes of include/f8.h, and f8_status -> Python exception.

The library is found, in order: the F8_LIBRARY environment variable (a path
to libf8.so); libf8.so inside this package (what `pip install ./python`
builds and installs); build/libf8.so of the repository this package sits in
(python/f8/../../build, running from a checkout); the system loader
("libf8.so", e.g. after `make install`). The structs below mirror f8.h field by field: when f8.h
changes a struct, change it here too (tests/test_python.c passes the C sizes
to the tests, which compare them with these).
"""
import ctypes as C
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def _find():
    env = os.environ.get("F8_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise OSError("F8_LIBRARY=%s: no such file" % env)
        return env
    for path in (os.path.join(_HERE, "libf8.so"),
                 os.path.normpath(os.path.join(_HERE, "..", "..", "build", "libf8.so"))):
        if os.path.exists(path):
            return path
    return "libf8.so"


def _load():
    path = _find()
    try:
        return C.CDLL(path), path
    except OSError as e:
        raise OSError(
            "f8: cannot load the f8 library (%s): %s. Install the package with `pip install ./python` "
            "from the f8 repository (it builds the library), or set F8_LIBRARY=/path/to/libf8.so" % (path, e)) from None


lib, path = _load()

# ---- enums (f8.h) -----------------------------------------------------------
OK = 0
STATUS_NAMES = {0: "F8_OK", 1: "F8_ERR_INVALID_ARGUMENT", 2: "F8_ERR_SHAPE", 3: "F8_ERR_DTYPE",
                4: "F8_ERR_STATE", 5: "F8_ERR_OUT_OF_MEMORY", 6: "F8_ERR_NO_DEVICE", 7: "F8_ERR_CUDA",
                8: "F8_ERR_CUBLAS", 9: "F8_ERR_UNSUPPORTED", 10: "F8_ERR_IO", 11: "F8_ERR_COMM"}
FP32, BF16, E4M3, E5M2 = 0, 1, 2, 3
BACKEND_CPU, BACKEND_CUDA = 0, 1
FORMAT_E4M3, FORMAT_HYBRID = 0, 1
AMAX_MAX, AMAX_MOST_RECENT = 0, 1
DIR_FORWARD, DIR_BACKWARD = 0, 1
MICROBATCH_NONE, MICROBATCH_FIRST, MICROBATCH_NOT_FIRST = 0, 1, 2
PARAMS = {"weight": 0, "bias": 1, "layer_norm_weight": 2, "layer_norm_bias": 3,
          "fc1_weight": 4, "fc1_bias": 5, "fc2_weight": 6, "fc2_bias": 7}
NORMS = {"LayerNorm": 0, "RMSNorm": 1}
ACTIVATIONS = {"gelu": 0, "relu": 1, "geglu": 2, "reglu": 3, "swiglu": 4, "qgelu": 5, "srelu": 6}


# ---- structs -----------------------------------------------------------------
class Tensor_t(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("rows", C.c_int64), ("cols", C.c_int64),
                ("scale_inv", C.c_void_p)]


class Recipe_t(C.Structure):
    _fields_ = [("format", C.c_int), ("margin", C.c_int), ("amax_history_len", C.c_int),
                ("amax_compute_algo", C.c_int), ("reduce_amax", C.c_int), ("kind", C.c_int),
                ("power_2_scales", C.c_int)]


class CtxConfig_t(C.Structure):
    _fields_ = [("backend", C.c_int), ("device", C.c_int), ("recipe", Recipe_t), ("attention_path", C.c_int),
                ("attention_nondeterministic", C.c_int)]


class Slot_t(C.Structure):
    _fields_ = [("direction", C.c_int32), ("index", C.c_int32)]


class LinearConfig_t(C.Structure):
    _fields_ = [("in_features", C.c_int64), ("out_features", C.c_int64), ("bias", C.c_int),
                ("param_dtype", C.c_int), ("fp8", C.c_int), ("fuse_wgrad_accumulation", C.c_int),
                ("fp8_weights", C.c_int), ("max_tokens", C.c_int64), ("seed", C.c_uint64),
                ("weight_transpose_per_call", C.c_int), ("recompute_input_cast", C.c_int)]


class LayerNormLinearConfig_t(C.Structure):
    _fields_ = [("in_features", C.c_int64), ("out_features", C.c_int64), ("bias", C.c_int),
                ("normalization", C.c_int), ("eps", C.c_float), ("zero_centered_gamma", C.c_int),
                ("return_layernorm_output", C.c_int), ("param_dtype", C.c_int), ("fp8", C.c_int),
                ("fuse_wgrad_accumulation", C.c_int), ("fp8_weights", C.c_int), ("max_tokens", C.c_int64),
                ("seed", C.c_uint64), ("recompute_norm_output", C.c_int), ("weight_transpose_per_call", C.c_int)]


class LayerNormMLPConfig_t(C.Structure):
    _fields_ = [("hidden_size", C.c_int64), ("ffn_hidden_size", C.c_int64), ("bias", C.c_int),
                ("normalization", C.c_int), ("eps", C.c_float), ("zero_centered_gamma", C.c_int),
                ("activation", C.c_int), ("param_dtype", C.c_int), ("fp8", C.c_int),
                ("fuse_wgrad_accumulation", C.c_int), ("fp8_weights", C.c_int), ("max_tokens", C.c_int64),
                ("seed", C.c_uint64), ("recompute_norm_output", C.c_int), ("recompute_activation", C.c_int),
                ("weight_transpose_per_call", C.c_int)]


STRUCTS = {"f8_tensor": Tensor_t, "f8_recipe": Recipe_t, "f8_ctx_config": CtxConfig_t, "f8_slot": Slot_t,
           "f8_linear_config": LinearConfig_t, "f8_layernorm_linear_config": LayerNormLinearConfig_t,
           "f8_layernorm_mlp_config": LayerNormMLPConfig_t}

# ---- prototypes --------------------------------------------------------------
P = C.c_void_p
pT = C.POINTER(Tensor_t)
st = C.c_int
_PROTOS = {
    "f8_status_string": (C.c_char_p, [st]),
    "f8_dtype_size": (C.c_size_t, [C.c_int]),
    "f8_fp8_from_float": (C.c_uint8, [C.c_float, C.c_int]),
    "f8_fp8_to_float": (C.c_float, [C.c_uint8, C.c_int]),
    "f8_recipe_default": (Recipe_t, []),
    "f8_ctx_config_default": (CtxConfig_t, []),
    "f8_ctx_create": (st, [C.POINTER(CtxConfig_t), C.POINTER(P), C.c_char_p, C.c_size_t]),
    "f8_ctx_destroy": (None, [P]),
    "f8_ctx_last_error": (C.c_char_p, [P]),
    "f8_ctx_backend": (C.c_int, [P]),
    "f8_ctx_recipe": (C.POINTER(Recipe_t), [P]),
    "f8_ctx_set_stream": (st, [P, P]),
    "f8_ctx_stream": (P, [P]),
    "f8_ctx_synchronize": (st, [P]),
    "f8_ctx_alloc": (st, [P, C.c_size_t, C.POINTER(P)]),
    "f8_ctx_free": (None, [P, P]),
    "f8_ctx_upload": (st, [P, P, P, C.c_size_t]),
    "f8_ctx_download": (st, [P, P, P, C.c_size_t]),
    "f8_ctx_update_scales": (st, [P, C.c_int]),
    "f8_ctx_set_noop_flag": (st, [P, C.c_float]),
    "f8_ctx_set_weight_noop": (st, [P, C.c_int]),
    "f8_ctx_set_gemm_tune": (st, [P, C.c_int]),
    "f8_tensor_zero": (st, [P, pT]),
    "f8_slot_read": (st, [P, Slot_t, C.POINTER(C.c_float), C.POINTER(C.c_float), P]),
    "f8_slot_write": (st, [P, Slot_t, C.c_float, C.c_float, P]),
    "f8_module_destroy": (None, [P]),
    "f8_module_param": (st, [P, C.c_int, C.c_int, pT]),
    "f8_module_slot": (st, [P, C.c_int, C.c_int, C.POINTER(Slot_t)]),
    "f8_module_zero_grad": (st, [P]),
    "f8_module_saved_create": (st, [P, C.POINTER(P)]),
    "f8_saved_destroy": (None, [P]),
    "f8_module_forward": (st, [P, pT, pT, C.c_int, P]),
    "f8_module_backward": (st, [P, P, pT, pT]),
    "f8_module_forward_add": (st, [P, pT, pT, pT, C.c_int, P]),
    "f8_module_backward_add": (st, [P, P, pT, pT]),
    "f8_linear_config_default": (LinearConfig_t, [C.c_int64, C.c_int64]),
    "f8_linear_create": (st, [P, C.POINTER(LinearConfig_t), C.POINTER(P)]),
    "f8_layernorm_linear_config_default": (LayerNormLinearConfig_t, [C.c_int64, C.c_int64]),
    "f8_layernorm_linear_create": (st, [P, C.POINTER(LayerNormLinearConfig_t), C.POINTER(P)]),
    "f8_layernorm_mlp_config_default": (LayerNormMLPConfig_t, [C.c_int64, C.c_int64]),
    "f8_layernorm_mlp_create": (st, [P, C.POINTER(LayerNormMLPConfig_t), C.POINTER(P)]),
    "f8_checkpoint_create": (st, [P, C.POINTER(P)]),
    "f8_checkpoint_destroy": (None, [P]),
    "f8_checkpoint_load": (st, [P, C.c_char_p, C.POINTER(P)]),
    "f8_checkpoint_save": (st, [P, C.c_char_p]),
    "f8_checkpoint_add_tensor": (st, [P, C.c_char_p, pT]),
    "f8_checkpoint_read_tensor": (st, [P, C.c_char_p, pT]),
    "f8_checkpoint_has": (C.c_int, [P, C.c_char_p]),
    "f8_checkpoint_set_metadata": (st, [P, C.c_char_p, C.c_char_p]),
    "f8_checkpoint_metadata": (C.c_char_p, [P, C.c_char_p]),
    "f8_checkpoint_add_module": (st, [P, C.c_char_p, P]),
    "f8_checkpoint_restore_module": (st, [P, C.c_char_p, P]),
}
for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


class Error(RuntimeError):
    """An f8 call failed: .status is the f8_status code, .status_name its name,
    and the message is f8_ctx_last_error (what, which argument, which shape)."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, "F8_ERR_UNKNOWN")
        super().__init__("%s: %s" % (self.status_name, message))


def check(status, ctx, what=""):
    """Raise Error for a failed status, with the ctx's last error message."""
    if status != OK:
        msg = lib.f8_ctx_last_error(ctx).decode("utf-8", "replace") if ctx else ""
        raise Error(status, msg or what)
