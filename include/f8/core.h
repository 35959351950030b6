/*
 * f8/core.h — the context, dtypes and FP8 numerics, recipes, tensor views,
 * scaling slots, telemetry, quantized tensors, memory and graphs.
 * Part of the public API; include f8.h, which includes every topic header.
 */
#ifndef F8_CORE_H
#define F8_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define F8_VERSION_MAJOR 0
#define F8_VERSION_MINOR 1
#define F8_VERSION_PATCH 0

/* F8_API marks the library's calls: libf8.so is built with hidden
 * visibility and exports exactly these (all named f8_...). */
#if defined(__GNUC__) || defined(__clang__)
#define F8_API __attribute__((visibility("default")))
#else
#define F8_API
#endif

/* Handles the topic headers share (each defined in its own header). */
typedef struct f8_module f8_module;       /* layers.h */
typedef struct f8_checkpoint f8_checkpoint; /* io.h */

/* ------------------------------------------------------------------------ */
/* Status                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum f8_status {
    F8_OK = 0,
    F8_ERR_INVALID_ARGUMENT = 1, /* NULL where a value is needed, a bad enum or count */
    F8_ERR_SHAPE = 2,            /* shapes of the arguments do not agree */
    F8_ERR_DTYPE = 3,            /* a dtype the call does not accept */
    F8_ERR_STATE = 4,            /* used in the wrong state (e.g. NOT_FIRST with an empty workspace) */
    F8_ERR_OUT_OF_MEMORY = 5,    /* host or device allocation failed */
    F8_ERR_NO_DEVICE = 6,        /* no CUDA backend built, no driver, or no such GPU */
    F8_ERR_CUDA = 7,             /* a CUDA runtime call failed (message has the CUDA error) */
    F8_ERR_CUBLAS = 8,           /* a cuBLASLt call failed (message has the status) */
    F8_ERR_UNSUPPORTED = 9,      /* legal request this build or device cannot run */
    F8_ERR_IO = 10,              /* reading or writing a file failed */
    F8_ERR_COMM = 11             /* a collective failed: a peer rank left, the ranks' calls disagree, or
                                    NCCL reported an error (message has which) */
} f8_status;

/* Name of a status ("F8_OK", "F8_ERR_SHAPE", ...). Never NULL; unknown codes
 * give "F8_ERR_UNKNOWN". The string is static. */
F8_API const char *f8_status_string(f8_status status);

/* ------------------------------------------------------------------------ */
/* Data types and FP8 numerics                                               */
/* ------------------------------------------------------------------------ */

typedef enum f8_dtype {
    F8_DTYPE_FP32 = 0,
    F8_DTYPE_BF16 = 1,
    F8_DTYPE_E4M3 = 2, /* 1/4/3 bits, bias 7, max 448, no inf, NaN = S.1111.111 */
    F8_DTYPE_E5M2 = 3  /* 1/5/2 bits, bias 15, max 57344, IEEE-like inf and NaN */
} f8_dtype;

/* Bytes per element: 4, 2, 1, 1; 0 for an unknown dtype. */
F8_API size_t f8_dtype_size(f8_dtype dtype);

/* "fp32", "bf16", "e4m3", "e5m2"; "unknown" otherwise. Static string. */
F8_API const char *f8_dtype_name(f8_dtype dtype);

/* Largest finite value of an FP8 dtype: 448 (E4M3), 57344 (E5M2); 0 otherwise. */
F8_API float f8_fp8_max(f8_dtype dtype);

/* Encode x as FP8 with the semantics of PTX cvt.rn.satfinite:
 *   - round to nearest, ties to even; subnormals kept;
 *   - |x| <= min_subnormal/2 gives a signed zero;
 *   - finite values past max + ulp/2, and +-inf, saturate to +-max (also E5M2);
 *   - NaN gives 0x7F for both formats.
 * dtype must be F8_DTYPE_E4M3 or F8_DTYPE_E5M2; any other dtype returns 0x7F
 * (a NaN code of both formats). Pure; no ctx. */
F8_API uint8_t f8_fp8_from_float(float x, f8_dtype dtype);

/* Exact value of an FP8 code (every FP8 value is an FP32 value). E4M3 0x7F/0xFF
 * decode to NaN; E5M2 0x7C/0xFC to +-inf and 0x7D..0x7F/0xFD..0xFF to NaN.
 * Any other dtype returns NaN. */
F8_API float f8_fp8_to_float(uint8_t bits, f8_dtype dtype);

/* FP32 -> BF16 (upper 16 bits), round to nearest even; NaN gives a quiet NaN
 * with the input's sign (0x7FC0 | sign); +-inf stays +-inf. */
F8_API uint16_t f8_bf16_from_float(float x);

/* BF16 -> FP32, exact. */
F8_API float f8_bf16_to_float(uint16_t bits);

/* ------------------------------------------------------------------------ */
/* Delayed-scaling recipe                                                    */
/* ------------------------------------------------------------------------ */

typedef enum f8_format {
    F8_FORMAT_E4M3 = 0,  /* every FP8 tensor is E4M3 */
    F8_FORMAT_HYBRID = 1 /* forward tensors E4M3, backward (gradient) tensors E5M2 */
} f8_format;

typedef enum f8_amax_algo {
    F8_AMAX_MAX = 0,        /* amax = max over the rolled history window */
    F8_AMAX_MOST_RECENT = 1 /* amax = the step's own amax */
} f8_amax_algo;

/* How the scale of each FP8 cast is chosen (a recipe family of TE):
 *   DELAYED  TE's DelayedScaling: the scale comes from the slot's amax history
 *            of earlier steps (f8_ctx_update_scales); the default.
 *   CURRENT  TE's Float8CurrentScaling: every cast first takes the amax of the
 *            tensor being cast and scales with it (f8_scale_from_amax with the
 *            slot's scale as the fallback for an amax of 0, inf or NaN); the
 *            casts then have no history to wait for. Two passes over the data
 *            per cast (amax, then the cast), all on the device.
 *   BLOCK    TE's Float8BlockScaling (DeepSeek-V3: 1x128 tiles for
 *            activations and gradients, 128x128 blocks for weights, one FP32
 *            scale each, from the tile's own amax): on both backends (the
 *            CPU one is the oracle; on CUDA the block GEMMs run cuBLASLt's
 *            block-scaled matmul where it takes the shape, an own kernel
 *            elsewhere); modules with fp8_weights refuse it
 *            (F8_ERR_UNSUPPORTED).
 *   ROWWISE  torchao's and torchtitan's "rowwise" (Float8LinearConfig.
 *            from_recipe_name("rowwise")): one FP32 scale per row of each
 *            GEMM operand along the contracted dimension (per token for
 *            activations and gradients, per output channel for weights,
 *            per input channel for the weight's column-wise copy), from the
 *            row's own amax; power_2_scales is torchao's
 *            round_scales_to_power_of_2 (its default for this recipe is on:
 *            f8_train sets it). With format E4M3 the gradients are E4M3 as
 *            in torchao; HYBRID gives them E5M2. fp8_weights refused.
 *   ROWWISE_GW_HP  torchao's "rowwise_with_gw_hp": ROWWISE for the forward
 *            and dgrad GEMMs, the weight gradient's GEMM in high precision
 *            from the high-precision input and output gradient (no
 *            column-wise FP8 copies; the modules save the high-precision
 *            norm and activation outputs instead of FP8 ones, and a
 *            Linear reads its caller's x again in backward, as with FP8
 *            off). torchao scales the weight per tensor in dgrad; f8 keeps
 *            its per-input-channel copy there, as ROWWISE does.
 * Later values are kept for the block formats of later GPUs (MXFP8,
 * NVFP4). A checkpoint records its recipe kind; restoring it into a ctx of
 * another kind is refused. */
typedef enum f8_recipe_kind {
    F8_RECIPE_DELAYED = 0,
    F8_RECIPE_CURRENT = 1,
    F8_RECIPE_BLOCK = 2,
    F8_RECIPE_ROWWISE = 3,
    F8_RECIPE_ROWWISE_GW_HP = 4
} f8_recipe_kind;

/* "delayed", "current", "block", "rowwise", "rowwise_with_gw_hp" (torchao's
 * names for the last two); "unknown" otherwise. Static string. */
F8_API const char *f8_recipe_kind_name(f8_recipe_kind kind);

/* The scaling recipe of a ctx (TE's DelayedScaling and its siblings). A ctx
 * holds one recipe, fixed at creation. */
typedef struct f8_recipe {
    f8_format format;           /* default F8_FORMAT_HYBRID */
    int margin;                 /* scale = fp8_max * 2^-margin / amax; default 0 */
    int amax_history_len;       /* rows of amax history per slot, >= 1; default 1024 */
    f8_amax_algo amax_compute_algo; /* default F8_AMAX_MAX */
    int reduce_amax;            /* 0 or 1: all-reduce(MAX) amaxes across ranks; default 1
                                   (no effect with one process) */
    f8_recipe_kind kind;        /* default F8_RECIPE_DELAYED */
    int power_2_scales;         /* 0 or 1, any kind but DELAYED (which refuses it):
                                   each scale (BLOCK: each tile's and block's)
                                   rounded down to a power of two (its mantissa
                                   bits cleared, TE's
                                   NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES; TE's
                                   block scaling uses such scales), so scale and
                                   scale_inv are exact; default 0 */
} f8_recipe;

/* TE's defaults: HYBRID, margin 0, history 1024, MAX, reduce_amax 1, kind
 * DELAYED, power_2_scales 0. Under CURRENT the history only records the
 * step's amaxes (and gives the fallback scale), so a short one (1) is fine. */
F8_API f8_recipe f8_recipe_default(void);

/* The delayed-scaling formula for one tensor (pure, host):
 *   scaled_max = fp8_max * 2^-margin                       (exact: ldexpf)
 *   scale      = scaled_max / amax    if amax is finite and amax > 0
 *              = old_scale            otherwise (amax 0, inf or NaN: keep)
 *   scale      = FLT_MAX              if the scale so far is inf (a tiny amax)
 * scale_inv is then 1/scale (FP32 division). Every backend's fused update
 * computes exactly this, bit for bit. */
F8_API float f8_scale_from_amax(float amax, float old_scale, float fp8_max, int margin);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct f8_ctx f8_ctx;

typedef enum f8_backend {
    F8_BACKEND_CPU = 0, /* reference backend; backend memory is host memory */
    F8_BACKEND_CUDA = 1 /* an NVIDIA GPU (sm_90 build by default); device memory */
} f8_backend;

/* Which implementation runs a CUDA ctx's attention (f8_attention_*). As a
 * config choice: AUTO (the default) runs cuDNN's fused flash attention where
 * cuDNN is installed and takes the call (libcudnn.so.9 found at run time;
 * BF16, head_dim a multiple of 8 up to 128, 16-byte aligned tensors) and
 * f8's own kernels everywhere else (an FP8 forward, f8_attention_config.fp8:
 * cuDNN's FP8 attention only from cuDNN 9.19); OWN runs f8's kernels only. As an
 * answer (f8_attention_query_path): OWN or CUDNN, the path a call takes. */
typedef enum f8_attention_path {
    F8_ATTENTION_PATH_AUTO = 0,
    F8_ATTENTION_PATH_OWN = 1,  /* f8's kernels (every call of a CPU ctx) */
    F8_ATTENTION_PATH_CUDNN = 2 /* cuDNN's fused flash attention (an answer only) */
} f8_attention_path;

typedef struct f8_ctx_config {
    f8_backend backend; /* default F8_BACKEND_CPU */
    int device;         /* CUDA device ordinal; default 0; ignored for CPU */
    f8_recipe recipe;   /* default f8_recipe_default() */
    f8_attention_path attention_path; /* AUTO (default) or OWN; ignored for CPU */
    int attention_nondeterministic;   /* 1: cuDNN's attention backward accumulates dQ with atomics
                                         (faster, not bitwise reproducible); default 0: its
                                         deterministic form (a B·nh·S² BF16 workspace); ignored
                                         where cuDNN does not run */
} f8_ctx_config;

F8_API f8_ctx_config f8_ctx_config_default(void);

/* Create a ctx. [out] *ctx receives it (owned by the caller; f8_ctx_destroy).
 * A CUDA ctx creates its stream (non-blocking), cuBLASLt handle and a 32 MiB
 * cuBLASLt workspace here. Errors: F8_ERR_NO_DEVICE where the library was
 * built without CUDA, there is no driver or no such device (a CPU ctx still
 * works); F8_ERR_INVALID_ARGUMENT for a bad config. On error *ctx is NULL and,
 * when `error` is not NULL, a message of at most error_size-1 characters is
 * written there (there is no ctx yet to hold it). */
F8_API f8_status f8_ctx_create(const f8_ctx_config *config, f8_ctx **ctx, char *error, size_t error_size);

/* Waits for the ctx's work, then frees everything the ctx owns. */
F8_API void f8_ctx_destroy(f8_ctx *ctx);

/* Detailed message of the last error on this ctx ("" if none). Owned by ctx,
 * valid until the next failing call on it. */
F8_API const char *f8_ctx_last_error(const f8_ctx *ctx);

F8_API f8_backend f8_ctx_backend(const f8_ctx *ctx);
/* The CUDA device ordinal the ctx was created on (0 for a CPU ctx): another
 * ctx made with it runs the same kernels on the same device. */
F8_API int f8_ctx_device(const f8_ctx *ctx);
/* The name of the ctx's device into name (size bytes, NUL-terminated, cut to
 * fit): the CUDA device's product name as the driver reports it
 * ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200"), or "CPU"
 * for a CPU ctx. For reports such as MFU against the device's peak: a host
 * query, no synchronization; call it outside the step. F8_ERR_INVALID_ARGUMENT
 * for a NULL ctx or name or size 0; F8_ERR_NO_DEVICE if the driver cannot
 * say (name is then ""). */
F8_API f8_status f8_ctx_device_name(const f8_ctx *ctx, char *name, size_t size);
/* The memory of the ctx's device in bytes: *free_bytes what it has free now,
 * *total_bytes all it has (CUDA: the driver's cudaMemGetInfo for the device;
 * CPU: the host's available and physical memory). For planning before a
 * large allocation (a program refusing a model that will not fit): a host
 * query, no synchronization; either output may be NULL.
 * F8_ERR_INVALID_ARGUMENT for a NULL ctx; F8_ERR_NO_DEVICE if the driver or
 * the system cannot say (the outputs are then 0). */
F8_API f8_status f8_ctx_device_memory(const f8_ctx *ctx, size_t *free_bytes, size_t *total_bytes);
F8_API const f8_recipe *f8_ctx_recipe(const f8_ctx *ctx);

/* Make the ctx issue its work on `stream` (a cudaStream_t passed as void*;
 * NULL restores the ctx's own stream, a non-blocking one: work on it is not
 * ordered against the legacy default stream; pass cudaStreamLegacy, (void *)1,
 * for that one). Stores the handle only: no synchronization. CPU ctx:
 * F8_ERR_UNSUPPORTED. */
F8_API f8_status f8_ctx_set_stream(f8_ctx *ctx, void *stream);
/* The cudaStream_t in use (NULL for a CPU ctx). */
F8_API void *f8_ctx_stream(const f8_ctx *ctx);

/* Block until all work issued on the ctx has finished. */
F8_API f8_status f8_ctx_synchronize(f8_ctx *ctx);

/* Backend memory. alloc: [out] *ptr, 256-byte aligned, uninitialised; free it
 * with f8_ctx_free. upload/download copy `bytes` between host and backend
 * memory and synchronize; copy is backend-to-backend, asynchronous. */
F8_API f8_status f8_ctx_alloc(f8_ctx *ctx, size_t bytes, void **ptr);
F8_API void f8_ctx_free(f8_ctx *ctx, void *ptr);
F8_API f8_status f8_ctx_upload(f8_ctx *ctx, void *dst, const void *host_src, size_t bytes);
F8_API f8_status f8_ctx_download(f8_ctx *ctx, void *host_dst, const void *src, size_t bytes);
F8_API f8_status f8_ctx_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes);

/* The ctx's noop flag: one FP32 in backend memory, 0.0f after creation.
 * Any write given a noop flag does nothing at all (no data, amax or scale_inv)
 * when *flag == 1.0f. Set it with f8_ctx_set_noop_flag (asynchronous, ordered
 * on the stream), e.g. 0 before the first microbatch's graph replay, 1 after. */
F8_API float *f8_ctx_noop_flag(f8_ctx *ctx);
F8_API f8_status f8_ctx_set_noop_flag(f8_ctx *ctx, float value);

/* Graph mode of the weight workspaces (TE's fp8_weight_caching under CUDA
 * graphs). enabled != 0: once a module's workspace has been filled, every
 * forward launches its weight cast (+transpose) with the ctx noop flag, so a
 * captured graph holds the cast and the flag decides on each replay: set it
 * to 0 before the first microbatch's replay (cast) and 1 after (reuse). The
 * microbatch argument then only decides main_grad accumulation. Off by
 * default. Host-side switch; takes effect at the next forward. */
F8_API f8_status f8_ctx_set_weight_noop(f8_ctx *ctx, int enabled);

/* GEMM tuning (for cuBLASLt what torch.backends.cudnn.benchmark is for
 * cuDNN). enabled != 0: the first call of each GEMM plan (one per shape,
 * dtypes, flags and alignment) made outside graph capture times up to 8 of
 * cuBLASLt's heuristic candidates on the call's own operands and keeps the
 * fastest for every later call, captured ones included; the call's result
 * is then the chosen algorithm's. Timing runs write only the call's own D
 * where the call overwrites it (no accumulate, no addend), else a
 * temporary D of its size (a D over 64 MiB that the call accumulates into
 * keeps the heuristic's choice); nothing else the call reads changes. The
 * choice follows measured times, so two runs can pick different algorithms
 * and differ in the last bits of their sums: off by default (the
 * heuristic's first choice, bitwise repeatable). Per-tensor, row-wise and
 * block-scaled GEMMs of a CUDA ctx; a CPU ctx accepts it and has nothing to
 * tune. Host-side switch; plans already tuned keep their choice. */
F8_API f8_status f8_ctx_set_gemm_tune(f8_ctx *ctx, int enabled);

/* ------------------------------------------------------------------------ */
/* Tensor views                                                              */
/* ------------------------------------------------------------------------ */

/* A view: owns nothing. data is backend memory of [rows, cols] elements of
 * dtype, row-major, 16-byte aligned for full speed. For FP8 dtypes scale_inv
 * points to the FP32 scalar (backend memory) that dequantizes the data:
 * value = fp8 * (*scale_inv). */
typedef struct f8_tensor {
    void *data;
    f8_dtype dtype;
    int64_t rows;
    int64_t cols;
    float *scale_inv; /* FP8 only; NULL otherwise */
} f8_tensor;

/* Convenience constructor of a non-FP8 view. */
static inline f8_tensor f8_tensor_make(void *data, f8_dtype dtype, int64_t rows, int64_t cols)
{
    f8_tensor t;
    t.data = data;
    t.dtype = dtype;
    t.rows = rows;
    t.cols = cols;
    t.scale_inv = (float *)0;
    return t;
}

/* dst = src converted between FP32 and BF16 (BF16 rounds to nearest even);
 * same shape. Equal dtypes copy. */
F8_API f8_status f8_tensor_convert(f8_ctx *ctx, const f8_tensor *src, f8_tensor *dst);

/* dst += src elementwise (FP32 or BF16, same dtype and shape; BF16 sums in
 * FP32 and rounds to nearest even). For residual connections. */
F8_API f8_status f8_tensor_add(f8_ctx *ctx, f8_tensor *dst, const f8_tensor *src);

/* Set every element of t (FP32 or BF16) to zero. */
F8_API f8_status f8_tensor_zero(f8_ctx *ctx, f8_tensor *t);

/* Fill t (FP32 or BF16, row-major from its first element) with draws of
 * N(0, std²): element i takes the i-th Box-Muller draw of a splitmix64
 * stream started at seed, computed in double, rounded to float and then to
 * the dtype (nearest even). These are the draws the modules initialise
 * their weights with (std 0.02, the config's seed), so the same (seed, std)
 * gives the same bits on every backend. Made on the host (over up to 16
 * threads for a big tensor, the same bits) and uploaded (synchronous): for
 * set-up, not for a step. F8_ERR_INVALID_ARGUMENT for a
 * std that is negative or not finite; F8_ERR_STATE while capturing a graph
 * (nothing is issued). */
F8_API f8_status f8_tensor_fill_normal(f8_ctx *ctx, f8_tensor *t, double std, uint64_t seed);

/* ------------------------------------------------------------------------ */
/* Scaling slots                                                             */
/* ------------------------------------------------------------------------ */

/* Direction of a scaling slot: forward slots (inputs, weights, outputs) use the
 * recipe's forward format (E4M3); backward slots (gradients) use E5M2 under
 * HYBRID. */
typedef enum f8_direction {
    F8_DIR_FORWARD = 0,
    F8_DIR_BACKWARD = 1
} f8_direction;

/* A scaling slot: amax_history[L] (row 0 = the current step's accumulator),
 * scale and scale_inv (the recipe's, not any tensor's). All slots of a ctx live
 * in one buffer of backend memory. A value type; valid as long as its ctx. */
typedef struct f8_slot {
    int32_t direction; /* f8_direction */
    int32_t index;     /* column within that direction */
} f8_slot;

/* Register `count` new slots of a direction, scale 1, scale_inv 1, history 0;
 * [out] slots[count]. Registering may move the scaling buffer: capture CUDA
 * graphs only after every module and slot exists. */
F8_API f8_status f8_ctx_slots_create(f8_ctx *ctx, f8_direction direction, int count, f8_slot *slots);

/* Host copies of a slot's state (synchronizes). Any output may be NULL;
 * amax_history receives recipe.amax_history_len floats, row 0 first. */
F8_API f8_status f8_slot_read(f8_ctx *ctx, f8_slot slot, float *scale, float *scale_inv, float *amax_history);

/* Overwrite a slot's state from the host (synchronizes). scale and scale_inv
 * are written as given (pass 1/scale for a consistent pair); amax_history
 * (amax_history_len floats) may be NULL to leave the history as it is. */
F8_API f8_status f8_slot_write(f8_ctx *ctx, f8_slot slot, float scale, float scale_inv, const float *amax_history);

/* The delayed-scaling update of every slot of one direction, in one fused
 * launch. For each slot, with last = history[0]:
 *   last != 0: window = {history[1..L-1], last}; history rolls left by one
 *              (history[i] = history[i+1] for i = 1..L-2, history[L-1] = last,
 *              history[0] = 0); amax = max(window) (NaN ignored) for
 *              F8_AMAX_MAX or last for F8_AMAX_MOST_RECENT.
 *   last == 0: no roll, amax = 0, so the scale is kept.
 *   scale = f8_scale_from_amax(amax, scale, fp8_max(slot dtype), margin),
 *   scale_inv = 1 / scale.
 * Call it for F8_DIR_FORWARD after the forward passes of a step and for
 * F8_DIR_BACKWARD after its backward passes (TE: autocast exit and the end of
 * the first module's backward). Asynchronous; no host sync.
 * Under F8_RECIPE_CURRENT the update runs the same way: the history then
 * records the steps' amaxes and the scale it writes is only the fallback a
 * cast keeps when its tensor's amax is 0, inf or NaN (every other cast
 * computes its own). */
F8_API f8_status f8_ctx_update_scales(f8_ctx *ctx, f8_direction direction);

/* ------------------------------------------------------------------------ */
/* FP8 telemetry                                                             */
/* ------------------------------------------------------------------------ */

/* What the casts through one slot did in one step, counted on the device
 * inside the casts (no extra pass over the data): */
typedef struct f8_fp8_stats {
    float amax;         /* the step's amax (history row 0 when the step ended) */
    float scale;        /* the slot's scale the step cast with (current scaling:
                           the last cast's) */
    uint64_t count;     /* elements cast through the slot in the step */
    uint64_t saturated; /* of them, |x·scale| > the FP8 max before the clamp
                           (NaN excluded; ±inf included) */
    uint64_t flushed;   /* of them, x != 0 whose code is ±0 (underflow) */
} f8_fp8_stats;

/* Slots per direction the telemetry counts (index < this). */
#define F8_TELEMETRY_MAX_SLOTS 4096

/* Turn FP8 telemetry on for the ctx; off by default. Must be called before
 * any slot exists (F8_ERR_STATE otherwise: module workspaces depend on it).
 * Allocates its counter block (F8_MEM_SCALING_STATE, about 0.5 MB). With
 * telemetry on, every cast through a slot (module inputs, weights and
 * gradients) counts its elements, saturated and flushed values with two
 * atomics per thread block, inside the kernel that writes the FP8 codes
 * (the cast, and the norm and activation kernels with fused FP8 outputs):
 * no extra pass over any tensor; the price is the counting arithmetic.
 * f8_ctx_update_scales(dir) closes the step of its direction:
 * one launch copies the counters, history row 0 and the scales into a
 * snapshot and clears the counters (graph-capturable, no host sync). */
F8_API f8_status f8_ctx_enable_telemetry(f8_ctx *ctx);

/* Slots registered in a direction (0 for a NULL ctx or a bad direction). */
F8_API int f8_ctx_slot_count(const f8_ctx *ctx, f8_direction direction);

/* 1 if telemetry is on. */
F8_API int f8_ctx_telemetry_enabled(const f8_ctx *ctx);

/* Host copy of the last snapshot of `count` slots of a direction, from index
 * first: stats[count]. One small download (synchronizes: call it after the
 * step's own download of its losses, where the stream is idle anyway).
 * F8_ERR_STATE if telemetry is off; F8_ERR_INVALID_ARGUMENT for a range
 * outside the registered slots or past F8_TELEMETRY_MAX_SLOTS. Before the
 * first update of a direction the snapshot is all zero. */
F8_API f8_status f8_ctx_telemetry_read(f8_ctx *ctx, f8_direction direction, int first, int count, f8_fp8_stats *stats);

/* FP8 dtype of a slot's tensors under the ctx recipe. */
F8_API f8_dtype f8_ctx_slot_dtype(const f8_ctx *ctx, f8_direction direction);

/* ------------------------------------------------------------------------ */
/* Quantized tensor (TE's Float8Tensor)                                      */
/* ------------------------------------------------------------------------ */

typedef struct f8_qtensor f8_qtensor;

/* Create an FP8 tensor [rows, cols] of dtype E4M3 or E5M2, owning its data and
 * a private scale_inv (1.0 at creation; data zero). The transpose [cols, rows]
 * is allocated lazily, on the first call that needs it. rows, cols >= 0. */
F8_API f8_status f8_qtensor_create(f8_ctx *ctx, f8_dtype dtype, int64_t rows, int64_t cols, f8_qtensor **q);
F8_API void f8_qtensor_destroy(f8_qtensor *q);

/* Quantize src (FP32 or BF16, same shape) through a scaling slot. Under
 * F8_RECIPE_CURRENT the slot's scale is first set from this src (the amax
 * pass: scale = f8_scale_from_amax(max|src|, slot.scale, fp8_max, margin),
 * a power of two with power_2_scales; slot.scale_inv = 1/scale); then, under
 * every recipe:
 *   data      = fp8(src * slot.scale)          (f8_fp8_from_float per element)
 *   slot.amax_history[0] = max(itself, max|src|)   (NaN ignored, before scaling)
 *   scale_inv = 1 / slot.scale                 (the tensor's own, same kernel)
 * with_transpose != 0 also writes the transpose in the same pass and marks it
 * valid; otherwise the cached transpose becomes invalid. noop_flag (backend
 * memory, may be NULL): when *noop_flag == 1.0f nothing is written; the flag is
 * ignored when the transpose buffer is allocated by this call (a fresh buffer
 * is always filled). The slot's dtype need not match the tensor's. */
F8_API f8_status f8_qtensor_quantize(f8_qtensor *q, const f8_tensor *src, f8_slot slot,
                                     int with_transpose, const float *noop_flag);

/* Make the cached transpose valid: if it is valid and no noop flag is given,
 * nothing runs; otherwise the transpose [cols, rows] is computed from the data
 * (allocating it on first use, in which case the flag is ignored). */
F8_API f8_status f8_qtensor_transpose(f8_qtensor *q, const float *noop_flag);

/* Write the transpose of the data into dst (FP8 of the same dtype,
 * [cols, rows], dst->scale_inv may be NULL) without touching the cache. */
F8_API f8_status f8_qtensor_transpose_into(const f8_qtensor *q, f8_tensor *dst);

/* dst = data * scale_inv (its own), FP32 or BF16, same shape. */
F8_API f8_status f8_qtensor_dequantize(const f8_qtensor *q, f8_tensor *dst);

/* Views of the data ([rows, cols]) and of the cached transpose ([cols, rows]),
 * both with scale_inv pointing at the tensor's private scale_inv. The
 * transpose view is F8_ERR_STATE while the cache is invalid. */
F8_API f8_status f8_qtensor_data(const f8_qtensor *q, f8_tensor *view);
F8_API f8_status f8_qtensor_transpose_data(const f8_qtensor *q, f8_tensor *view);

/* 1 if the cached transpose holds the transpose of the current data. The
 * host cannot read a device noop flag, so a write skipped by the flag still
 * leaves the cache marked as the call would have (TE does the same): the flag
 * is meant to skip only work an earlier run of the same calls already did,
 * as on graph replays after the first microbatch. */
F8_API int f8_qtensor_transpose_valid(const f8_qtensor *q);

/* Overwrite data and scale_inv from the host (FP8 codes, rows*cols bytes);
 * invalidates the transpose. For checkpoints and tests. Synchronizes. */
F8_API f8_status f8_qtensor_upload(f8_qtensor *q, const uint8_t *host_codes, float scale_inv);

/* ------------------------------------------------------------------------ */
/* Memory report and counters                                                */
/* ------------------------------------------------------------------------ */

typedef enum f8_mem_category {
    F8_MEM_PARAMETERS = 0,          /* master weights, biases, norm parameters, FP8 primary weights */
    F8_MEM_GRADIENTS = 1,           /* parameter gradients (not the caller's main_grad) */
    F8_MEM_WORKSPACE_DATA = 2,      /* FP8 weight workspaces: data and private scale_inv */
    F8_MEM_WORKSPACE_TRANSPOSE = 3, /* their cached transposes (allocated only when a backward needs one) */
    F8_MEM_SAVED_ACTIVATIONS = 4,   /* saved-state objects (what forward keeps for backward) */
    F8_MEM_SCALING_STATE = 5,       /* amax histories, scales, scale_invs */
    F8_MEM_SCRATCH = 6,             /* the ctx scratch shared by modules within one call */
    F8_MEM_OTHER = 7,               /* everything else: f8_ctx_alloc, qtensors, the noop flag, ... */
    F8_MEM_COUNT = 8
} f8_mem_category;

/* "parameters", "gradients", ...; "unknown" otherwise. Static string. */
F8_API const char *f8_mem_category_name(f8_mem_category category);

/* Backend memory in bytes, by category (the sizes requested from the
 * allocator; backend-internal memory such as the cuBLASLt workspace is not
 * counted). total = the sum of bytes[]. */
typedef struct f8_memory_report {
    size_t bytes[F8_MEM_COUNT];
    size_t total;
} f8_memory_report;

/* Everything the ctx and the objects made from it hold now. For a module:
 * its own parameters, gradients, workspaces and the saved-state objects made
 * from it that are alive, and its share of the scaling buffer (its slots'
 * (history_len + 2) floats each); scratch is counted only by the ctx. */
F8_API f8_status f8_ctx_memory(const f8_ctx *ctx, f8_memory_report *report);
F8_API f8_status f8_module_memory(const f8_module *module, f8_memory_report *report);

/* Counters since the ctx was created (host-side, cheap to read).
 *   allocations: backend allocations made (any object or f8_ctx_alloc);
 *     a training step that allocates nothing leaves it unchanged.
 *   frees: backend frees made.
 *   launches: work items issued. CUDA: kernel launches, cuBLASLt matmuls and
 *     asynchronous memsets/copies put on the stream (a graph replay counts 1).
 *     CPU: backend operations run (each one is at least one CUDA launch).
 *     Work skipped on the host (a cached workspace) is not counted; work
 *     skipped on the device by the noop flag is.
 *   peak_bytes: the largest f8_ctx_memory total since creation (what f8
 *     asked the allocator for, at its high point; backend-internal memory,
 *     such as the cuBLASLt workspace, a CUDA graph's own memory and the CUDA
 *     context, is not counted). Allocation happens at creation and in a
 *     first step, so after one step it is the memory a training run needs. */
typedef struct f8_ctx_counters {
    uint64_t allocations;
    uint64_t frees;
    uint64_t launches;
    uint64_t peak_bytes; /* the highest f8_ctx_memory total so far: a high-water mark of backend memory */
} f8_ctx_counters;

F8_API f8_status f8_ctx_counters_read(const f8_ctx *ctx, f8_ctx_counters *counters);

/* ------------------------------------------------------------------------ */
/* Graphs: capture a sequence of f8 calls once, replay it cheaply            */
/* ------------------------------------------------------------------------ */

/* CUDA ctx: a CUDA graph captured from the ctx stream (cudaStreamBeginCapture
 * in relaxed mode, instantiated at end). CPU ctx: the backend operations are
 * recorded and replayed in order, with the same semantics, so graphed code
 * can be tested anywhere.
 *
 * Between begin and end, f8 calls issue no work: they are recorded. Calls
 * that would synchronize, read back or allocate (upload, download,
 * synchronize, slot read/write, creating objects, a first use that allocates
 * a lazy buffer) fail with F8_ERR_STATE, and the capture is then spoiled:
 * end returns that error. Run one step eagerly before capturing (plans and
 * lazy buffers are made then), and capture only after every module and slot
 * exists (registering slots may move the scaling buffer).
 *
 * Everything a step reads per replay is in backend memory and captured by
 * address: scales, amaxes, the noop flag, your inputs and outputs. Copy new
 * inputs into the captured buffers before a replay. With weight caching use
 * f8_ctx_set_weight_noop(ctx, 1) before capture and set the noop flag before
 * each replay (0 on the first microbatch, 1 after): the weight casts are in
 * the graph and the flag decides. f8_ctx_update_scales may be called inside a
 * capture (the update is replayed) or outside, between replays. */
typedef struct f8_graph f8_graph;

F8_API f8_status f8_graph_begin(f8_ctx *ctx);
/* [out] *graph: owned by the caller (f8_graph_destroy); NULL on error. */
F8_API f8_status f8_graph_end(f8_ctx *ctx, f8_graph **graph);
/* Issue the recorded work again on the ctx stream (asynchronous on CUDA). */
F8_API f8_status f8_graph_replay(f8_graph *graph);
F8_API void f8_graph_destroy(f8_graph *graph);
/* 1 between f8_graph_begin and f8_graph_end. */
F8_API int f8_ctx_capturing(const f8_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* F8_CORE_H */
