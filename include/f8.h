/*
 * f8.h — the whole public API of f8, a C11 library for training transformers in
 * FP8 on NVIDIA GPUs (with a complete CPU reference backend).
 *
 * This header is the manual. It is pure C11: no CUDA or C++ headers.
 *
 * Conventions used throughout:
 *  - Every fallible function returns f8_status; F8_OK is 0. On any error the
 *    call changes nothing, and f8_ctx_last_error() holds a sentence naming the
 *    argument and shape at fault. The library never exits, aborts or prints.
 *  - "Backend memory" is host memory for a CPU ctx and device memory for a CUDA
 *    ctx. Every data pointer handed to f8 (tensor data, scale_inv, noop flags,
 *    main_grad) is backend memory of the ctx it is used with. f8_ctx_alloc and
 *    friends move bytes in and out of it.
 *  - Matrices are row-major 2-D: a [rows, cols] tensor stores element (r, c) at
 *    r * cols + c. Callers flatten leading dimensions into rows.
 *  - Work on a CUDA ctx is asynchronous on the ctx's stream unless a function
 *    says it synchronizes. Host reads of results go through f8_ctx_download
 *    (which synchronizes).
 *  - destroy(NULL) is a no-op. A ctx must outlive every object made from it.
 *  - A ctx and the objects made from it are not thread-safe: use one ctx per
 *    host thread (or lock around it).
 *
 * The one rule: scale belongs to the recipe, scale_inv belongs to the data. An
 * FP8 tensor carries its own scale_inv, written by the same kernel that writes
 * its bytes; every dequantize and GEMM reads the operand's own scale_inv.
 */
#ifndef F8_H
#define F8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define F8_VERSION_MAJOR 0
#define F8_VERSION_MINOR 1
#define F8_VERSION_PATCH 0

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
const char *f8_status_string(f8_status status);

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
size_t f8_dtype_size(f8_dtype dtype);

/* "fp32", "bf16", "e4m3", "e5m2"; "unknown" otherwise. Static string. */
const char *f8_dtype_name(f8_dtype dtype);

/* Largest finite value of an FP8 dtype: 448 (E4M3), 57344 (E5M2); 0 otherwise. */
float f8_fp8_max(f8_dtype dtype);

/* Encode x as FP8 with the semantics of PTX cvt.rn.satfinite:
 *   - round to nearest, ties to even; subnormals kept;
 *   - |x| <= min_subnormal/2 gives a signed zero;
 *   - finite values past max + ulp/2, and +-inf, saturate to +-max (also E5M2);
 *   - NaN gives 0x7F for both formats.
 * dtype must be F8_DTYPE_E4M3 or F8_DTYPE_E5M2; any other dtype returns 0x7F
 * (a NaN code of both formats). Pure; no ctx. */
uint8_t f8_fp8_from_float(float x, f8_dtype dtype);

/* Exact value of an FP8 code (every FP8 value is an FP32 value). E4M3 0x7F/0xFF
 * decode to NaN; E5M2 0x7C/0xFC to +-inf and 0x7D..0x7F/0xFD..0xFF to NaN.
 * Any other dtype returns NaN. */
float f8_fp8_to_float(uint8_t bits, f8_dtype dtype);

/* FP32 -> BF16 (upper 16 bits), round to nearest even; NaN gives a quiet NaN
 * with the input's sign (0x7FC0 | sign); +-inf stays +-inf. */
uint16_t f8_bf16_from_float(float x);

/* BF16 -> FP32, exact. */
float f8_bf16_to_float(uint16_t bits);

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
 * The values after these are kept for the block formats of later GPUs
 * (MXFP8, NVFP4). A checkpoint records its recipe kind; restoring it into a
 * ctx of another kind is refused. */
typedef enum f8_recipe_kind {
    F8_RECIPE_DELAYED = 0,
    F8_RECIPE_CURRENT = 1,
    F8_RECIPE_BLOCK = 2
} f8_recipe_kind;

/* "delayed", "current", "block"; "unknown" otherwise. Static string. */
const char *f8_recipe_kind_name(f8_recipe_kind kind);

/* The scaling recipe of a ctx (TE's DelayedScaling and its siblings). A ctx
 * holds one recipe, fixed at creation. */
typedef struct f8_recipe {
    f8_format format;           /* default F8_FORMAT_HYBRID */
    int margin;                 /* scale = fp8_max * 2^-margin / amax; default 0 */
    int amax_history_len;       /* rows of amax history per slot, >= 1; default 1024 */
    f8_amax_algo amax_compute_algo; /* default F8_AMAX_MAX */
    int reduce_amax;            /* all-reduce(MAX) amaxes across ranks; default 1
                                   (no effect with one process) */
    f8_recipe_kind kind;        /* default F8_RECIPE_DELAYED */
    int power_2_scales;         /* CURRENT only: each scale rounded down to a power
                                   of two (its mantissa bits cleared, TE's
                                   NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES), so
                                   scale and scale_inv are exact; default 0 */
} f8_recipe;

/* TE's defaults: HYBRID, margin 0, history 1024, MAX, reduce_amax 1, kind
 * DELAYED, power_2_scales 0. Under CURRENT the history only records the
 * step's amaxes (and gives the fallback scale), so a short one (1) is fine. */
f8_recipe f8_recipe_default(void);

/* The delayed-scaling formula for one tensor (pure, host):
 *   scaled_max = fp8_max * 2^-margin                       (exact: ldexpf)
 *   scale      = scaled_max / amax    if amax is finite and amax > 0
 *              = old_scale            otherwise (amax 0, inf or NaN: keep)
 *   scale      = FLT_MAX              if the scale so far is inf (a tiny amax)
 * scale_inv is then 1/scale (FP32 division). Every backend's fused update
 * computes exactly this, bit for bit. */
float f8_scale_from_amax(float amax, float old_scale, float fp8_max, int margin);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct f8_ctx f8_ctx;

typedef enum f8_backend {
    F8_BACKEND_CPU = 0, /* reference backend; backend memory is host memory */
    F8_BACKEND_CUDA = 1 /* an NVIDIA GPU (sm_90 build by default); device memory */
} f8_backend;

typedef struct f8_ctx_config {
    f8_backend backend; /* default F8_BACKEND_CPU */
    int device;         /* CUDA device ordinal; default 0; ignored for CPU */
    f8_recipe recipe;   /* default f8_recipe_default() */
} f8_ctx_config;

f8_ctx_config f8_ctx_config_default(void);

/* Create a ctx. [out] *ctx receives it (owned by the caller; f8_ctx_destroy).
 * A CUDA ctx creates its stream (non-blocking), cuBLASLt handle and a 32 MiB
 * cuBLASLt workspace here. Errors: F8_ERR_NO_DEVICE where the library was
 * built without CUDA, there is no driver or no such device (a CPU ctx still
 * works); F8_ERR_INVALID_ARGUMENT for a bad config. On error *ctx is NULL and,
 * when `error` is not NULL, a message of at most error_size-1 characters is
 * written there (there is no ctx yet to hold it). */
f8_status f8_ctx_create(const f8_ctx_config *config, f8_ctx **ctx, char *error, size_t error_size);

/* Waits for the ctx's work, then frees everything the ctx owns. */
void f8_ctx_destroy(f8_ctx *ctx);

/* Detailed message of the last error on this ctx ("" if none). Owned by ctx,
 * valid until the next failing call on it. */
const char *f8_ctx_last_error(const f8_ctx *ctx);

f8_backend f8_ctx_backend(const f8_ctx *ctx);
/* The CUDA device ordinal the ctx was created on (0 for a CPU ctx): another
 * ctx made with it runs the same kernels on the same device. */
int f8_ctx_device(const f8_ctx *ctx);
const f8_recipe *f8_ctx_recipe(const f8_ctx *ctx);

/* Make the ctx issue its work on `stream` (a cudaStream_t passed as void*;
 * NULL restores the ctx's own stream, a non-blocking one: work on it is not
 * ordered against the legacy default stream; pass cudaStreamLegacy, (void *)1,
 * for that one). Stores the handle only: no synchronization. CPU ctx:
 * F8_ERR_UNSUPPORTED. */
f8_status f8_ctx_set_stream(f8_ctx *ctx, void *stream);
/* The cudaStream_t in use (NULL for a CPU ctx). */
void *f8_ctx_stream(const f8_ctx *ctx);

/* Block until all work issued on the ctx has finished. */
f8_status f8_ctx_synchronize(f8_ctx *ctx);

/* Backend memory. alloc: [out] *ptr, 256-byte aligned, uninitialised; free it
 * with f8_ctx_free. upload/download copy `bytes` between host and backend
 * memory and synchronize; copy is backend-to-backend, asynchronous. */
f8_status f8_ctx_alloc(f8_ctx *ctx, size_t bytes, void **ptr);
void f8_ctx_free(f8_ctx *ctx, void *ptr);
f8_status f8_ctx_upload(f8_ctx *ctx, void *dst, const void *host_src, size_t bytes);
f8_status f8_ctx_download(f8_ctx *ctx, void *host_dst, const void *src, size_t bytes);
f8_status f8_ctx_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes);

/* The ctx's noop flag: one FP32 in backend memory, 0.0f after creation.
 * Any write given a noop flag does nothing at all (no data, amax or scale_inv)
 * when *flag == 1.0f. Set it with f8_ctx_set_noop_flag (asynchronous, ordered
 * on the stream), e.g. 0 before the first microbatch's graph replay, 1 after. */
float *f8_ctx_noop_flag(f8_ctx *ctx);
f8_status f8_ctx_set_noop_flag(f8_ctx *ctx, float value);

/* Graph mode of the weight workspaces (TE's fp8_weight_caching under CUDA
 * graphs). enabled != 0: once a module's workspace has been filled, every
 * forward launches its weight cast (+transpose) with the ctx noop flag, so a
 * captured graph holds the cast and the flag decides on each replay: set it
 * to 0 before the first microbatch's replay (cast) and 1 after (reuse). The
 * microbatch argument then only decides main_grad accumulation. Off by
 * default. Host-side switch; takes effect at the next forward. */
f8_status f8_ctx_set_weight_noop(f8_ctx *ctx, int enabled);

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
f8_status f8_tensor_convert(f8_ctx *ctx, const f8_tensor *src, f8_tensor *dst);

/* dst += src elementwise (FP32 or BF16, same dtype and shape; BF16 sums in
 * FP32 and rounds to nearest even). For residual connections. */
f8_status f8_tensor_add(f8_ctx *ctx, f8_tensor *dst, const f8_tensor *src);

/* Set every element of t (FP32 or BF16) to zero. */
f8_status f8_tensor_zero(f8_ctx *ctx, f8_tensor *t);

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
f8_status f8_tensor_fill_normal(f8_ctx *ctx, f8_tensor *t, double std, uint64_t seed);

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
f8_status f8_ctx_slots_create(f8_ctx *ctx, f8_direction direction, int count, f8_slot *slots);

/* Host copies of a slot's state (synchronizes). Any output may be NULL;
 * amax_history receives recipe.amax_history_len floats, row 0 first. */
f8_status f8_slot_read(f8_ctx *ctx, f8_slot slot, float *scale, float *scale_inv, float *amax_history);

/* Overwrite a slot's state from the host (synchronizes). scale and scale_inv
 * are written as given (pass 1/scale for a consistent pair); amax_history
 * (amax_history_len floats) may be NULL to leave the history as it is. */
f8_status f8_slot_write(f8_ctx *ctx, f8_slot slot, float scale, float scale_inv, const float *amax_history);

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
f8_status f8_ctx_update_scales(f8_ctx *ctx, f8_direction direction);

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
f8_status f8_ctx_enable_telemetry(f8_ctx *ctx);

/* Slots registered in a direction (0 for a NULL ctx or a bad direction). */
int f8_ctx_slot_count(const f8_ctx *ctx, f8_direction direction);

/* 1 if telemetry is on. */
int f8_ctx_telemetry_enabled(const f8_ctx *ctx);

/* Host copy of the last snapshot of `count` slots of a direction, from index
 * first: stats[count]. One small download (synchronizes: call it after the
 * step's own download of its losses, where the stream is idle anyway).
 * F8_ERR_STATE if telemetry is off; F8_ERR_INVALID_ARGUMENT for a range
 * outside the registered slots or past F8_TELEMETRY_MAX_SLOTS. Before the
 * first update of a direction the snapshot is all zero. */
f8_status f8_ctx_telemetry_read(f8_ctx *ctx, f8_direction direction, int first, int count, f8_fp8_stats *stats);

/* FP8 dtype of a slot's tensors under the ctx recipe. */
f8_dtype f8_ctx_slot_dtype(const f8_ctx *ctx, f8_direction direction);

/* ------------------------------------------------------------------------ */
/* Quantized tensor (TE's Float8Tensor)                                      */
/* ------------------------------------------------------------------------ */

typedef struct f8_qtensor f8_qtensor;

/* Create an FP8 tensor [rows, cols] of dtype E4M3 or E5M2, owning its data and
 * a private scale_inv (1.0 at creation; data zero). The transpose [cols, rows]
 * is allocated lazily, on the first call that needs it. rows, cols >= 0. */
f8_status f8_qtensor_create(f8_ctx *ctx, f8_dtype dtype, int64_t rows, int64_t cols, f8_qtensor **q);
void f8_qtensor_destroy(f8_qtensor *q);

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
f8_status f8_qtensor_quantize(f8_qtensor *q, const f8_tensor *src, f8_slot slot,
                              int with_transpose, const float *noop_flag);

/* Make the cached transpose valid: if it is valid and no noop flag is given,
 * nothing runs; otherwise the transpose [cols, rows] is computed from the data
 * (allocating it on first use, in which case the flag is ignored). */
f8_status f8_qtensor_transpose(f8_qtensor *q, const float *noop_flag);

/* Write the transpose of the data into dst (FP8 of the same dtype,
 * [cols, rows], dst->scale_inv may be NULL) without touching the cache. */
f8_status f8_qtensor_transpose_into(const f8_qtensor *q, f8_tensor *dst);

/* dst = data * scale_inv (its own), FP32 or BF16, same shape. */
f8_status f8_qtensor_dequantize(const f8_qtensor *q, f8_tensor *dst);

/* Views of the data ([rows, cols]) and of the cached transpose ([cols, rows]),
 * both with scale_inv pointing at the tensor's private scale_inv. The
 * transpose view is F8_ERR_STATE while the cache is invalid. */
f8_status f8_qtensor_data(const f8_qtensor *q, f8_tensor *view);
f8_status f8_qtensor_transpose_data(const f8_qtensor *q, f8_tensor *view);

/* 1 if the cached transpose holds the transpose of the current data. The
 * host cannot read a device noop flag, so a write skipped by the flag still
 * leaves the cache marked as the call would have (TE does the same): the flag
 * is meant to skip only work an earlier run of the same calls already did,
 * as on graph replays after the first microbatch. */
int f8_qtensor_transpose_valid(const f8_qtensor *q);

/* Overwrite data and scale_inv from the host (FP8 codes, rows*cols bytes);
 * invalidates the transpose. For checkpoints and tests. Synchronizes. */
f8_status f8_qtensor_upload(f8_qtensor *q, const uint8_t *host_codes, float scale_inv);

/* ------------------------------------------------------------------------ */
/* Modules: one interface for every layer                                    */
/* ------------------------------------------------------------------------ */

/* Every layer (Linear, LayerNormLinear, LayerNormMLP) is an f8_module: its
 * own config and create below, then the same calls for all of them (as a
 * torch.nn.Module has one interface whatever the layer). A module owns its
 * parameters (FP32 or BF16 master weights, or FP8 primary weights), their
 * gradients (or writes the weight gradient into a caller's main_grad), one
 * FP8 workspace per weight and its scaling slots. */
typedef struct f8_module f8_module;

/* What one forward keeps for its backward: one per microbatch in flight,
 * made from (and usable only with) one module. */
typedef struct f8_saved f8_saved;

/* How the forward treats the FP8 weight workspace (TE's is_first_microbatch):
 *   NONE      cast the weight every forward (the workspace is refreshed);
 *   FIRST     cast into the cached workspace (data, transpose, scale_inv);
 *   NOT_FIRST reuse the workspace as it is: its data and private scale_inv are
 *             untouched and the weight slot's amax is not written; a workspace
 *             never filled is filled anyway. */
typedef enum f8_microbatch {
    F8_MICROBATCH_NONE = 0,
    F8_MICROBATCH_FIRST = 1,
    F8_MICROBATCH_NOT_FIRST = 2
} f8_microbatch;

/* The parameters a module may have, named as TE's state dicts name them
 * (f8_param_name). Linear and LayerNormLinear: WEIGHT [N, K], BIAS [1, N];
 * LayerNormLinear and LayerNormMLP: LN_WEIGHT (gamma) [1, K], LN_BIAS (beta,
 * LayerNorm only) [1, K]; LayerNormMLP: FC1_WEIGHT [F1, H] (F1 = ffn, 2·ffn
 * gated), FC1_BIAS [1, F1], FC2_WEIGHT [H, ffn], FC2_BIAS [1, H]. */
typedef enum f8_param {
    F8_PARAM_WEIGHT = 0,
    F8_PARAM_BIAS = 1,
    F8_PARAM_LN_WEIGHT = 2,
    F8_PARAM_LN_BIAS = 3,
    F8_PARAM_FC1_WEIGHT = 4,
    F8_PARAM_FC1_BIAS = 5,
    F8_PARAM_FC2_WEIGHT = 6,
    F8_PARAM_FC2_BIAS = 7
} f8_param;

/* "weight", "bias", "layer_norm_weight", "layer_norm_bias", "fc1_weight",
 * ...; "unknown" otherwise. Static string. */
const char *f8_param_name(f8_param which);

/* Free a module and all its memory. NULL is a no-op. Saved-state objects
 * made from it must be destroyed first. */
void f8_module_destroy(f8_module *module);

/* View of a parameter (grad = 0) or of its gradient (grad = 1), backend
 * memory owned by the module; write a parameter through it (f8_ctx_upload)
 * to load weights. F8_ERR_INVALID_ARGUMENT for a parameter this kind of
 * module does not have; F8_ERR_STATE for one this module was created without
 * (bias = 0, or beta of an RMSNorm). The view of an FP8 primary weight is
 * its FP8 data with its private scale_inv (read it; write it only through
 * f8_module_write_weight). */
f8_status f8_module_param(f8_module *module, f8_param which, int grad, f8_tensor *view);

/* Slot i of a direction. Linear, LayerNormLinear: forward 0 INPUT, 1 WEIGHT,
 * 2 OUTPUT; backward 0 GRAD_OUTPUT, 1 GRAD_INPUT. LayerNormMLP: forward
 * GEMM1_INPUT, GEMM1_WEIGHT, GEMM1_OUTPUT, GEMM2_INPUT, GEMM2_WEIGHT,
 * GEMM2_OUTPUT; backward GRAD_OUTPUT1, GRAD_INPUT1, GRAD_OUTPUT2,
 * GRAD_INPUT2 (TE's order). */
f8_status f8_module_slot(const f8_module *module, f8_direction direction, int i, f8_slot *slot);

/* The FP8 workspace of a weight (WEIGHT, FC1_WEIGHT or FC2_WEIGHT), owned by
 * the module; NULL for anything else. */
const f8_qtensor *f8_module_weight_workspace(const f8_module *module, f8_param weight);

/* With fuse_wgrad_accumulation: the FP32 buffer, the weight's shape (backend
 * memory, owned by the caller, alive while used), that backward writes that
 * weight's gradient into: overwritten (beta 0) when the forward ran with
 * F8_MICROBATCH_FIRST, accumulated (beta 1) otherwise. Every weight of the
 * module needs one before a backward. Without fuse_wgrad_accumulation:
 * F8_ERR_STATE. */
f8_status f8_module_set_main_grad(f8_module *module, f8_param weight, float *main_grad);

/* Zero every parameter gradient of the module. */
f8_status f8_module_zero_grad(f8_module *module);

/* A saved-state object for this module (FP8: what backward needs of the
 * forward in FP8, with the scale_invs it was cast with; FP8 off: those
 * tensors in param_dtype). Sized by config.max_tokens: all memory is
 * allocated here. */
f8_status f8_module_saved_create(f8_module *module, f8_saved **saved);
void f8_saved_destroy(f8_saved *saved); /* NULL is a no-op */

/* Forward: y[T, out] = module(x[T, in]).
 * [in] x: FP32 or BF16 (FP8 off: must equal param_dtype), T <= max_tokens;
 *   kept unchanged by the caller until backward (FP8 off, and the norms,
 *   read it there).
 * [out] y: FP32 or BF16 [T, out].
 * [in,out] saved: NULL for inference (no backward); otherwise filled for
 *   f8_module_backward.
 * FP8 on: each GEMM input is cast through its INPUT slot (amax recorded, its
 * own scale_inv written by the same kernel), each weight workspace is handled
 * per `microbatch`, and the GEMMs are FP8 TN GEMMs with fast accumulation
 * whose operand scales are the operands' own scale_invs. T = 0 is legal and
 * writes nothing but the weight casts. A LayerNormLinear created with
 * return_layernorm_output needs f8_layernorm_linear_forward. */
f8_status f8_module_forward(f8_module *module, const f8_tensor *x, f8_tensor *y, f8_microbatch microbatch,
                            f8_saved *saved);

/* Backward of the forward that filled `saved`.
 * [in] dy: FP32 or BF16 [T, out] (FP8 off: must equal param_dtype).
 * [out] dx: FP32 or BF16 [T, in], or NULL to skip the input gradient.
 * Every parameter gradient is accumulated (+=), the weight gradients into
 * main_grad per f8_module_set_main_grad. FP8 on: dy is cast with its
 * transpose (and the bias gradient) through GRAD_OUTPUT, dgrad uses the
 * weight workspace's transpose and its own scale_inv, wgrad the saved FP8
 * input transpose with the scale_inv it was cast with; both with split
 * accumulation. The saved state may be reused for another forward after. */
f8_status f8_module_backward(f8_module *module, f8_saved *saved, const f8_tensor *dy, f8_tensor *dx);

/* Residual connections fused into the module (a transformer block's
 * x + attn(x) and x + mlp(x), and their gradients), with no separate add
 * kernel and one rounding of each sum.
 *
 * f8_module_forward_add: y = module(x) + residual. The residual is added in
 * FP32 in the epilogue of the module's last GEMM (Linear's and
 * LayerNormLinear's GEMM, LayerNormMLP's fc2): y = alpha·Σ x·W + residual
 * + b, rounded once to y's dtype (f8_module_forward followed by
 * f8_tensor_add rounds a BF16 y twice). Everything else, and the saved
 * state, is as f8_module_forward.
 * [in] residual: [T, out] in y's dtype (FP32 or BF16). It may be y itself
 *   (the same view: then y += module(x)) or memory apart from y; it may be
 *   x. Block scaling (F8_RECIPE_BLOCK) copies a residual apart from y into
 *   y first, then accumulates (its GEMM has no separate addend).
 * Errors, with nothing written: F8_ERR_INVALID_ARGUMENT for a NULL residual
 * or one that overlaps y in part; F8_ERR_DTYPE for a dtype other than y's;
 * F8_ERR_SHAPE for a shape other than y's; and every f8_module_forward
 * error. A LayerNormLinear created with return_layernorm_output is refused,
 * as by f8_module_forward. With sequence parallelism y holds all T tokens,
 * so does the residual. */
f8_status f8_module_forward_add(f8_module *module, const f8_tensor *x, f8_tensor *y, const f8_tensor *residual,
                                f8_microbatch microbatch, f8_saved *saved);

/* f8_module_backward_add: f8_module_backward with dx += the input gradient
 * (dx is read and written): FP32 math, one rounding of the sum. Linear: its
 * dgrad GEMM accumulates into dx; LayerNormLinear and LayerNormMLP: the norm
 * backward adds dx as it stores it. The parameter gradients are as
 * f8_module_backward's.
 * [in,out] dx: FP32 or BF16 [T, in] (sequence parallel: this rank's rows),
 *   required. LayerNormLinear and LayerNormMLP read dy before they write dx,
 *   so dx may be dy itself (the same bytes, in == out); a Linear reads dy
 *   while it writes dx, so there dx must not overlap dy.
 * Errors, with nothing written: F8_ERR_INVALID_ARGUMENT for a NULL dx, or a
 * dx overlapping dy other than as allowed above; every f8_module_backward
 * error. */
f8_status f8_module_backward_add(f8_module *module, f8_saved *saved, const f8_tensor *dy, f8_tensor *dx);

/* ------------------------------------------------------------------------ */
/* Linear: y = x · Wᵀ + b                                                    */
/* ------------------------------------------------------------------------ */

typedef struct f8_linear_config {
    int64_t in_features;    /* K, in [1, 2^24] */
    int64_t out_features;   /* N, in [1, 2^24] */
    int bias;               /* 1: learnable bias [N]; default 1 */
    f8_dtype param_dtype;   /* master weights: FP32 or BF16; default FP32 */
    int fp8;                /* 1: FP8 GEMMs (E4M3 forward, recipe format backward); default 1 */
    int fuse_wgrad_accumulation; /* 1: wgrad goes into the caller's FP32 main_grad; default 0 */
    int fp8_weights;        /* 1: FP8 primary weight (TE's fp8_model_init): W is kept only in
                               FP8, no copy in param_dtype; needs fp8; default 0. See
                               "FP8 primary weights" below */
    int64_t max_tokens;     /* largest T of any call (sizes workspaces and saved state); default 4096 */
    uint64_t seed;          /* weight init: N(0, 0.02^2) from this seed; bias 0; default 1 */
} f8_linear_config;
/* Flags (bias, fp8, ...) must be 0 or 1. */

f8_linear_config f8_linear_config_default(int64_t in_features, int64_t out_features);

/* Create a Linear: parameters W [N, K] and b [N] in param_dtype, their
 * gradients (zero), one FP8 weight workspace [N, K] with its transpose, and
 * 3 forward + 2 backward scaling slots. All memory is allocated here;
 * forward and backward allocate nothing. A create that fails leaves the ctx
 * as it was (no slots registered, no memory held). */
f8_status f8_linear_create(f8_ctx *ctx, const f8_linear_config *config, f8_module **module);

/* ------------------------------------------------------------------------ */
/* Norms and activations shared by the fused modules                         */
/* ------------------------------------------------------------------------ */

typedef enum f8_norm {
    F8_NORM_LAYERNORM = 0, /* y = (x - mean) · rsigma · g + beta, rsigma = 1/sqrt(var_biased + eps) */
    F8_NORM_RMSNORM = 1    /* y = x · rsigma · g, rsigma = 1/sqrt(mean(x²) + eps) */
} f8_norm;
/* g = gamma, or 1 + gamma with zero_centered_gamma. Statistics in FP32. */

typedef enum f8_activation {
    F8_ACT_GELU = 0,   /* 0.5x(1 + tanh(0.79788456(x + 0.044715x³))) */
    F8_ACT_RELU = 1,   /* max(x, 0) */
    F8_ACT_GEGLU = 2,  /* gelu(a)·b   (gated: fc1 output [a | b], each ffn wide) */
    F8_ACT_REGLU = 3,  /* relu(a)·b   (gated) */
    F8_ACT_SWIGLU = 4, /* silu(a)·b = a·sigmoid(a)·b (gated) */
    F8_ACT_QGELU = 5,  /* x·sigmoid(1.702x) */
    F8_ACT_SRELU = 6   /* max(x, 0)² */
} f8_activation;

/* 1 for the gated activations (GEGLU, REGLU, SWIGLU), whose fc1 has 2·ffn
 * output features; 0 otherwise (and for unknown values). */
int f8_activation_gated(f8_activation act);

/* ------------------------------------------------------------------------ */
/* LayerNormLinear: y = norm(x) · Wᵀ + b                                     */
/* ------------------------------------------------------------------------ */

typedef struct f8_layernorm_linear_config {
    int64_t in_features;      /* K, in [1, 2^24] */
    int64_t out_features;     /* N, in [1, 2^24] */
    int bias;                 /* default 1 */
    f8_norm normalization;    /* default F8_NORM_LAYERNORM */
    float eps;                /* default 1e-5 */
    int zero_centered_gamma;  /* default 0 (gamma initialised to 1; with it, to 0) */
    int return_layernorm_output; /* 1: forward also returns norm(x) in high precision; default 0 */
    f8_dtype param_dtype;     /* FP32 or BF16; default FP32 */
    int fp8;                  /* default 1 */
    int fuse_wgrad_accumulation; /* default 0 */
    int fp8_weights;          /* FP8 primary weight W (as f8_linear_config); default 0 */
    int64_t max_tokens;       /* default 4096 */
    uint64_t seed;            /* W ~ N(0, 0.02²); default 1 */
    int recompute_norm_output; /* 1: backward re-runs the norm instead of saving its output
                                  (see "Recomputing the norm output" below); default 0 */
} f8_layernorm_linear_config;

f8_layernorm_linear_config f8_layernorm_linear_config_default(int64_t in_features, int64_t out_features);

/* Create: parameters (W, b, gamma, beta), their gradients (zero), one FP8
 * weight workspace, 3 forward + 2 backward slots (as Linear). With FP8 the
 * norm kernel writes the GEMM input in FP8 directly (slot INPUT, amax of its
 * output) unless return_layernorm_output, where the norm output is high
 * precision and cast separately. All memory is allocated here. */
f8_status f8_layernorm_linear_create(f8_ctx *ctx, const f8_layernorm_linear_config *config, f8_module **module);

/* f8_module_forward with the norm output: [out] ln_out [T, K] FP32 or BF16,
 * norm(x), required with return_layernorm_output and NULL otherwise (then
 * this is f8_module_forward). F8_ERR_INVALID_ARGUMENT on another kind of
 * module. */
f8_status f8_layernorm_linear_forward(f8_module *module, const f8_tensor *x, f8_tensor *y, f8_tensor *ln_out,
                                      f8_microbatch microbatch, f8_saved *saved);

/* f8_module_backward with [in] dln_out [T, K], the gradient reaching the
 * returned norm output (return_layernorm_output only; NULL = zero). */
f8_status f8_layernorm_linear_backward(f8_module *module, f8_saved *saved, const f8_tensor *dy,
                                       const f8_tensor *dln_out, f8_tensor *dx);

/* ------------------------------------------------------------------------ */
/* LayerNormMLP: y = fc2(act(fc1(norm(x))))                                 */
/* ------------------------------------------------------------------------ */

typedef struct f8_layernorm_mlp_config {
    int64_t hidden_size;      /* H, in [1, 2^24] */
    int64_t ffn_hidden_size;  /* F, in [1, 2^23] */
    int bias;                 /* fc1 and fc2 biases; default 1 */
    f8_norm normalization;    /* default F8_NORM_LAYERNORM */
    float eps;                /* default 1e-5 */
    int zero_centered_gamma;  /* default 0 */
    f8_activation activation; /* default F8_ACT_GELU */
    f8_dtype param_dtype;     /* FP32 or BF16; default FP32 */
    int fp8;                  /* default 1 */
    int fuse_wgrad_accumulation; /* default 0 */
    int fp8_weights;          /* FP8 primary fc1 and fc2 weights (as f8_linear_config); default 0 */
    int64_t max_tokens;       /* default 4096 */
    uint64_t seed;            /* default 1 */
    int recompute_norm_output; /* as f8_layernorm_linear_config's; default 0 */
} f8_layernorm_mlp_config;

f8_layernorm_mlp_config f8_layernorm_mlp_config_default(int64_t hidden_size, int64_t ffn_hidden_size);

/* Create: gamma, beta, fc1 [F1, H] (+bias), fc2 [H, F] (+bias), gradients,
 * two FP8 weight workspaces (fc1, fc2), 6 forward + 4 backward slots. With
 * FP8 the norm writes fc1's FP8 input (GEMM1_INPUT) and the activation writes
 * fc2's FP8 input (GEMM2_INPUT), amax fused. microbatch applies to both
 * weights. In backward with FP8 the two dgrad GEMMs' outputs (the gradients
 * reaching the activation and the norm) are in param_dtype, as TE keeps them
 * in the activation dtype: BF16 parameters round them to BF16 once. */
f8_status f8_layernorm_mlp_create(f8_ctx *ctx, const f8_layernorm_mlp_config *config, f8_module **module);

/* Recomputing the norm output (recompute_norm_output = 1, LayerNormLinear
 * and LayerNormMLP). A training forward normally keeps the norm output, the
 * first GEMM's input (T·H bytes in FP8, T·H·size(param_dtype) with FP8
 * off), in the saved state for that GEMM's wgrad. With the flag the saved
 * state keeps x by reference (as always: the norm backward reads it), the
 * statistics mu and rsigma and, with FP8, the one float the cast scaled by;
 * the backward runs the norm forward again from x and gamma/beta into the
 * per-call workspace, with that scale, and continues as without the flag.
 * f8_module_memory's saved activations shrink by the norm output's bytes
 * per saved-state object (124M GPT, T = 65536, H = 768, FP8: 48 MiB per
 * module, two modules a layer); the ctx workspace, shared by all modules,
 * grows by at most one FP8 norm output (LayerNormMLP's backward; with
 * current scaling and ffn < hidden also its param_dtype staging); each
 * backward costs one more norm forward (and with current scaling one more
 * cast).
 * Results are bit for bit those without the flag: the same kernel on the
 * same inputs, the same scale (saved at the forward, so scale updates, or
 * another microbatch's current-scaling amax, between a forward and its
 * backward change nothing) and so the same codes and scale_inv. The
 * recompute records nothing: no amax, no FP8 telemetry counts. Delayed and
 * current scaling, and FP8 off, are supported. Refused at create with
 * F8_ERR_UNSUPPORTED: block scaling (F8_RECIPE_BLOCK; it saves a column-
 * wise copy quantized from the high-precision output) and
 * return_layernorm_output; f8_module_set_sequence_parallel refuses such a
 * module with F8_ERR_UNSUPPORTED (the norm output is gathered over the
 * group). Flag values other than 0 or 1: F8_ERR_INVALID_ARGUMENT. */

/* ------------------------------------------------------------------------ */
/* FP8 primary weights (TE's fp8_model_init)                                 */
/* ------------------------------------------------------------------------ */

/* A module created with config.fp8_weights = 1 keeps each weight only as an
 * FP8 tensor (its workspace is the parameter): 1 byte per element plus the
 * transpose, no master copy. It is initialised by quantizing the usual
 * N(0, 0.02²) init with the weight slot's scale (1 at creation). Its gradient
 * is still kept in param_dtype (or main_grad), for an optimizer that holds
 * the FP32 master weights itself and writes them back after each step:
 *
 *   optimizer step on your master copy;
 *   f8_module_write_weight(m, F8_PARAM_WEIGHT, &master)  (every FP8 weight);
 *   f8_ctx_update_weight_scales(ctx);
 *
 * The param view of such a weight is the FP8 data with its private
 * scale_inv (read it; write only through f8_module_write_weight). The microbatch
 * argument then only decides main_grad accumulation and whether the forward
 * fills the transpose (FIRST) or backward makes it lazily; in graph mode
 * (f8_ctx_set_weight_noop) every forward re-makes the transpose under the
 * ctx noop flag, so a captured graph stays right after weight writes. */

/* Write new weight values. src: FP32 or BF16, the weight's shape.
 *   FP8 primary weight: data = fp8(src · weight-slot scale), the slot's amax
 *     is recorded, the private scale_inv = 1/scale (same kernel), and the
 *     cached transpose becomes invalid.
 *   Master weight in param_dtype: src is converted into it; the workspace is
 *     re-cast by the next forward whatever its microbatch (it is marked
 *     unfilled), so no forward uses values older than the write.
 * Asynchronous on the ctx stream. weight: WEIGHT, FC1_WEIGHT or FC2_WEIGHT. */
f8_status f8_module_write_weight(f8_module *module, f8_param weight, const f8_tensor *src);

/* The post-optimizer scale update of TE (§2.4 of the spec): the fused
 * delayed-scaling update of f8_ctx_update_scales, over the forward slots of
 * the modules created with fp8_weights only (all their forward slots, as TE
 * does; slots whose accumulator is 0 keep their scale and do not roll).
 * With a comm (f8_ctx_set_comm) the forward amaxes are first MAX-reduced
 * over its ranks, as TE does, so ranks that each wrote a part of a weight
 * get the same scale: a collective then, every rank calls it. Nothing runs
 * when the ctx has no such module. Asynchronous. */
f8_status f8_ctx_update_weight_scales(f8_ctx *ctx);

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
const char *f8_mem_category_name(f8_mem_category category);

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
f8_status f8_ctx_memory(const f8_ctx *ctx, f8_memory_report *report);
f8_status f8_module_memory(const f8_module *module, f8_memory_report *report);

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

f8_status f8_ctx_counters_read(const f8_ctx *ctx, f8_ctx_counters *counters);

/* ------------------------------------------------------------------------ */
/* Communicators: collectives across ranks (data and tensor parallelism)     */
/* ------------------------------------------------------------------------ */

/* An f8_comm joins `size` ranks, each with its own ctx, for collectives over
 * backend memory of that ctx, issued on its stream like any other work (so
 * they are recorded by f8_graph_begin on either backend: a CUDA graph
 * captures the NCCL calls). Every rank must issue the same collectives in the
 * same order with the same count, dtype, op and root.
 *
 * Two transports, one set of semantics:
 *  - CPU: `size` in-process ranks, one host thread per rank, each with its
 *    own CPU ctx, joined by an f8_comm_group. Reductions add in a FIXED order,
 *    rank 0 + rank 1 + ... + rank size-1 (left to right, FP32), so results are
 *    bitwise reproducible and equal to the sum one rank computes in that order.
 *    This is the oracle the parallel code paths are tested against.
 *  - NCCL (CUDA ctx; a build with CUDA): one rank per GPU, any number of
 *    processes or nodes, joined by an f8_comm_id that rank 0 makes and the
 *    caller hands to the others (pipe, file, TCP). NCCL's reduction order
 *    depends on its algorithm and topology: deterministic run to run on the
 *    same machine and rank count, not the CPU order.
 * A collective that cannot complete because a CPU peer has left (destroyed
 * its comm, e.g. after an error) or whose ranks disagree fails with
 * F8_ERR_COMM on every waiting rank instead of hanging. */
typedef struct f8_comm f8_comm;
typedef struct f8_comm_group f8_comm_group;

typedef enum f8_reduce_op {
    F8_REDUCE_SUM = 0,
    F8_REDUCE_MAX = 1
} f8_reduce_op;

/* The rendezvous of `size` (1..1024) CPU ranks. Thread-safe: it is shared by
 * the ranks' threads; destroy it after every comm made from it. On error
 * *group is NULL and a message goes to `error` (when not NULL). */
f8_status f8_comm_group_create(int size, f8_comm_group **group, char *error, size_t error_size);
void f8_comm_group_destroy(f8_comm_group *group);
/* Break the group without a comm: every rank waiting in or entering a
 * collective fails with F8_ERR_COMM (a launcher calls it for a rank that
 * failed before it could join, so the others do not wait for it). */
void f8_comm_group_abort(f8_comm_group *group);

/* Rank `rank` of group, on a CPU ctx (F8_ERR_UNSUPPORTED for a CUDA ctx).
 * Each rank is taken once (F8_ERR_STATE for a rank already joined).
 * [out] *comm: owned by the caller; destroy it before its ctx. */
f8_status f8_comm_create_cpu(f8_ctx *ctx, f8_comm_group *group, int rank, f8_comm **comm);

/* The bootstrap token of an NCCL communicator (ncclUniqueId): made once by
 * rank 0 with f8_comm_id_create, copied as plain bytes to every other rank.
 * One id makes one communicator: make a new one for each. */
#define F8_COMM_ID_BYTES 128
typedef struct f8_comm_id {
    unsigned char bytes[F8_COMM_ID_BYTES];
} f8_comm_id;

/* F8_ERR_NO_DEVICE in a build without CUDA; F8_ERR_COMM if NCCL fails. */
f8_status f8_comm_id_create(f8_comm_id *id, char *error, size_t error_size);

/* Rank `rank` of `size` over NCCL on a CUDA ctx (ncclCommInitRank on the
 * ctx's device; blocks until all `size` ranks have joined with the same id).
 * F8_ERR_UNSUPPORTED for a CPU ctx, F8_ERR_NO_DEVICE without CUDA. */
f8_status f8_comm_create_nccl(f8_ctx *ctx, const f8_comm_id *id, int rank, int size, f8_comm **comm);

/* Leaves the group: CPU peers still waiting in (or later entering) a
 * collective fail with F8_ERR_COMM. Waits for the ctx's work first. */
void f8_comm_destroy(f8_comm *comm);
int f8_comm_rank(const f8_comm *comm);
int f8_comm_size(const f8_comm *comm);
f8_ctx *f8_comm_ctx(const f8_comm *comm);

/* The collectives. Pointers are backend memory of the comm's ctx; counts are
 * elements per rank, >= 0. Reductions take FP32 (SUM and MAX; MAX ignores
 * NaN as amax does: fmaxf); all_gather and broadcast move any dtype's bytes
 * (FP8 moves one byte per element). Asynchronous, ordered on the stream.
 *  all_reduce:     dst[i] = src_0[i] op src_1[i] op ... (count each; dst may be src)
 *  reduce_scatter: dst[i] = Σ_r src_r[rank·count + i]    (src: size·count, dst: count)
 *  all_gather:     dst[r·count + i] = src_r[i]            (src: count, dst: size·count;
 *                  in place when src == dst + rank·count)
 *  broadcast:      dst[i] = src_root[i]                   (src is read on root only;
 *                  dst may be src)
 * Errors (nothing issued): F8_ERR_INVALID_ARGUMENT for NULL pointers with
 * count > 0, a negative count or a bad root or op; F8_ERR_DTYPE for a
 * reduction of a dtype other than FP32; F8_ERR_COMM when the ranks' calls
 * disagree or a peer has left (CPU: detected when the collective runs). */
f8_status f8_comm_all_reduce(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype, f8_reduce_op op);
f8_status f8_comm_reduce_scatter(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype);
f8_status f8_comm_all_gather(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype);
f8_status f8_comm_broadcast(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype, int root);

/* Overlap (gradient buckets reduced while the backward goes on): with async
 * on, the collectives this comm issues next run, on NCCL, on the comm's own
 * stream: each starts after the ctx's work issued before it and runs
 * concurrently with the ctx's later work, which must leave its buffers
 * alone; f8_comm_wait orders the ctx's later work after every async
 * collective issued before it (call it before reading their results, and
 * before a graph capture ends). The flag is read when a collective is
 * issued (a recorded graph keeps it). CPU ranks complete each collective in
 * order, so async changes nothing there and wait is a no-op. Local calls:
 * no rank waits for another in f8_comm_wait. */
f8_status f8_comm_set_async(f8_comm *comm, int enabled);
f8_status f8_comm_wait(f8_comm *comm);

/* The ctx's amax-reduction group (TE's amax_reduction_group): with a comm
 * set, f8_ctx_update_scales first all-reduces (MAX) the direction's current
 * amaxes (history row 0 of every slot, one collective per direction), so
 * every rank computes the same scales. comm must be made on this ctx; NULL
 * unsets. Every rank must have the same slots in the same order. */
f8_status f8_ctx_set_comm(f8_ctx *ctx, f8_comm *comm);

/* Sequence parallelism (Megatron's, TE's sequence_parallel=True) for a
 * column-parallel LayerNormLinear or LayerNormMLP over the tensor-parallel
 * group `group` of P ranks (NULL: off, the default). With it, a forward's
 * x and a backward's dx are this rank's share of the T tokens, rows
 * rank·T/P .. (rank+1)·T/P - 1, while y and dy stay [T, out]:
 *   forward   ln_r = norm(x_r);  ln = all-gather(ln_0 .. ln_{P-1})  [T, in];
 *             y = ln · Wᵀ (+ b, then the MLP's activation and fc2)
 *   backward  dln = dy-side dgrad [T, in] (this rank's partial sum);
 *             dln_r = reduce-scatter(dln) (FP32, rank 0 + 1 + ... on CPU ranks);
 *             dx, dgamma, dbeta from dln_r and x_r (gamma and beta see only
 *             x_r: the caller sums their gradients over the group)
 * The gather moves FP8 codes when the module runs FP8 (delayed scaling: the
 * shared last-step scale; current scaling: the amax is reduced (MAX) over
 * the group before the cast, so one scale serves all ranks), and the param
 * dtype under block scaling, whose column-wise tiles span the shards (each
 * rank then casts the whole tensor). The amaxes a rank records are its own
 * tensors': set the ctx's amax-reduction group (f8_ctx_set_comm) to a
 * group that contains `group`, so every rank keeps the same scales.
 * Every rank of `group` must make the same calls with the same T. The
 * row-parallel side (reduce-scatter of a Linear's or fc2's partial output,
 * all-gather of its dy) is the caller's. config.max_tokens bounds T (all
 * ranks' tokens). Call it before a forward, not between a forward and its
 * backward. The per-call workspace grows (reduce-scatter buffers).
 * Errors: F8_ERR_INVALID_ARGUMENT for a Linear (no norm) or a group made on
 * another ctx; F8_ERR_UNSUPPORTED (nothing changed) for a module created
 * with recompute_norm_output and a non-NULL group; a LayerNormLinear with
 * return_layernorm_output then fails its forward with F8_ERR_UNSUPPORTED. */
f8_status f8_module_set_sequence_parallel(f8_module *module, f8_comm *group);

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

f8_status f8_graph_begin(f8_ctx *ctx);
/* [out] *graph: owned by the caller (f8_graph_destroy); NULL on error. */
f8_status f8_graph_end(f8_ctx *ctx, f8_graph **graph);
/* Issue the recorded work again on the ctx stream (asynchronous on CUDA). */
f8_status f8_graph_replay(f8_graph *graph);
void f8_graph_destroy(f8_graph *graph);
/* 1 between f8_graph_begin and f8_graph_end. */
int f8_ctx_capturing(const f8_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Checkpoints (safetensors)                                                 */
/* ------------------------------------------------------------------------ */

/* An f8_checkpoint is a set of named tensors and string metadata held in
 * host memory, saved to and loaded from one safetensors file: an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype
 * ("F32", "BF16", "F8_E4M3", "F8_E5M2", "I32", "I64", "U8"), shape (0 to 8
 * dimensions) and byte range, then the data. __metadata__ holds "format" =
 * "f8" and "f8.format_version" = "1", an integrity checksum of every
 * tensor's bytes ("f8.xxh64.<tensor name>" = XXH64, seed 0, as 16 lowercase
 * hex digits), plus the caller's pairs.
 *
 * Files written by f8 are canonical (the same checkpoint gives the same
 * bytes): the JSON lists tensors by name (byte order) and is padded with
 * spaces so the data starts at a multiple of 8; the data has no gaps and is
 * ordered by element size, largest first, then by name, so each tensor
 * starts at a multiple of its element size. Plain safetensors files of other
 * tools (no f8 metadata) load too, for f8_checkpoint_read_tensor, as long as
 * their dtypes are among the seven above.
 *
 * A module is stored under a name prefix ("blocks.3.mlp") as
 *   <prefix>.weight / .bias / .layer_norm_weight / .layer_norm_bias /
 *   .fc1_weight / .fc1_bias / .fc2_weight / .fc2_bias   (those it has)
 *   <prefix>.<weight>_scale_inv   the private scale_inv of an FP8 primary weight
 *   <prefix>.fp8.fwd.amax_history [L, n], .fp8.fwd.scale [n], .fp8.fwd.scale_inv [n]
 *   <prefix>.fp8.bwd.*            the same for its backward slots
 * with the recipe in the metadata ("<prefix>.fp8.recipe": format, margin,
 * history length, algorithm and, for a kind other than DELAYED,
 * "scaling=<f8_recipe_kind_name>"); restoring FP8 state written under another
 * recipe format or kind is refused (F8_ERR_INVALID_ARGUMENT). FP8 primary
 * weights are stored as F8_E4M3/F8_E5M2. Gradients and workspaces are not
 * stored: restoring marks the workspaces unfilled, so the next forward casts.
 * Restoring a module whose file has no fp8.* entries is legal: its slots
 * start fresh (history 0, scale 1). A history of another length is cut or
 * zero-padded at the end (TE's rule). An FP8 attention's slots are stored
 * the same way by f8_checkpoint_add_attention (with f8_attention). */
typedef struct f8_checkpoint f8_checkpoint;

/* An empty checkpoint bound to ctx (whose memory the tensors come from and
 * go to). */
f8_status f8_checkpoint_create(f8_ctx *ctx, f8_checkpoint **checkpoint);
void f8_checkpoint_destroy(f8_checkpoint *checkpoint);

/* Parse a file (or bytes in memory) into a new checkpoint. The whole header
 * is checked before any tensor byte is read, as strictly as the reference
 * implementation: a file shorter than 8 bytes; a header length past the file
 * or over 100 MB; a header that is not one JSON object of tensor objects and
 * an optional "__metadata__" object of strings (only objects, arrays,
 * strings in valid UTF-8 without \u0000, and non-negative integers below
 * 2^63); a tensor without exactly "dtype", "shape" and "data_offsets"; an
 * unknown dtype; more than 8 dimensions or an element count that overflows;
 * data_offsets [begin, end] whose length is not count x element size; byte
 * ranges that overlap, leave a gap or leave bytes at the end of the file;
 * duplicate names or metadata keys; and, in an f8 file ("format" = "f8" or
 * an f8.format_version key), a version that is missing, not a positive
 * integer, or newer than 1; a tensor whose bytes do not match its
 * "f8.xxh64.<name>" checksum (the message names the tensor), a checksum that
 * is not 16 hex digits, or one for a tensor the file does not hold. Files
 * without checksums (f8 files written before they were added, safetensors
 * of other tools) load unchecked. Checksums are not kept as metadata of the
 * loaded checkpoint (f8_checkpoint_metadata does not return them). Those give F8_ERR_INVALID_ARGUMENT; a file that
 * cannot be opened or read (or is not a regular file) gives F8_ERR_IO; the
 * reason is in f8_ctx_last_error and *checkpoint is NULL. */
f8_status f8_checkpoint_load(f8_ctx *ctx, const char *path, f8_checkpoint **checkpoint);
f8_status f8_checkpoint_load_memory(f8_ctx *ctx, const void *bytes, size_t size, f8_checkpoint **checkpoint);

/* Write the checkpoint to path: to "<path>.tmp.<pid>" first, flushed to
 * disk, then renamed over path, so a failed save leaves any old file intact
 * (and removes the temporary). A save that was killed leaves its temporary
 * behind; the next save to the same path removes every "<path>.tmp.<pid>"
 * whose pid is not a running process on this machine (a process of another
 * pid namespace writing into the same directory is not seen: give such
 * writers distinct paths). Every tensor's checksum is computed here. F8_ERR_IO with the system's reason when the
 * temporary cannot be created or written or the rename fails. The file
 * always says "format" = "f8", "f8.format_version" = "1", whatever the
 * checkpoint was loaded from. */
f8_status f8_checkpoint_save(const f8_checkpoint *checkpoint, const char *path);

/* Add a copy of a tensor in backend memory (synchronizes), stored with
 * shape [rows, cols]. FP8 tensors are stored as their codes; their scale_inv
 * is not (store it as its own tensor). name: valid UTF-8, not
 * "__metadata__", used once: F8_ERR_INVALID_ARGUMENT otherwise. While a graph
 * is being captured: F8_ERR_STATE (it reads back). */
f8_status f8_checkpoint_add_tensor(f8_checkpoint *checkpoint, const char *name, const f8_tensor *tensor);
/* Copy a stored tensor into dst (backend memory; synchronizes). The dtype
 * must be dst's (I32/I64/U8 entries fit no f8_tensor), and the stored shape
 * must fit dst [rows, cols]: [rows, cols] itself; [n] fits [1, n]; a scalar
 * (no dimensions) fits [1, 1]; 3 or more dimensions fit [product of all but
 * the last, last]. Missing name, other dtype or shape:
 * F8_ERR_INVALID_ARGUMENT / F8_ERR_DTYPE / F8_ERR_SHAPE, dst unchanged.
 * dst->scale_inv is neither read nor written. */
f8_status f8_checkpoint_read_tensor(const f8_checkpoint *checkpoint, const char *name, f8_tensor *dst);
/* 1 if a tensor of that name is stored. */
int f8_checkpoint_has(const f8_checkpoint *checkpoint, const char *name);

/* Metadata: key/value strings, valid UTF-8. "format" and keys starting with
 * "f8." are the library's: set refuses them (F8_ERR_INVALID_ARGUMENT), as
 * it does NULL or invalid strings. Setting a key again replaces its value.
 * get returns NULL when absent; the string is owned by the checkpoint and
 * valid until the key is set again or the checkpoint is destroyed. A new
 * checkpoint already has "format" = "f8" and "f8.format_version" = "1". */
f8_status f8_checkpoint_set_metadata(f8_checkpoint *checkpoint, const char *key, const char *value);
const char *f8_checkpoint_metadata(const f8_checkpoint *checkpoint, const char *key);

/* Store a module's parameters and scaling state under prefix (synchronizes).
 * All or nothing: a name already in the checkpoint is refused before any
 * entry is added. */
f8_status f8_checkpoint_add_module(f8_checkpoint *checkpoint, const char *prefix, f8_module *module);

/* Restore a module from the entries under prefix. Every entry is checked
 * (present, dtype, shape, recipe format) before anything is written: on any
 * error the module is unchanged. A module built with fp8_weights takes its
 * weight from an F8 entry with its scale_inv, or quantizes an FP32/BF16 one
 * (as f8_module_write_weight); a high-precision module takes FP32/BF16 entries
 * converted to its param_dtype, or dequantizes an F8 one. */
f8_status f8_checkpoint_restore_module(const f8_checkpoint *checkpoint, const char *prefix, f8_module *module);

/* ------------------------------------------------------------------------ */
/* Training building blocks: embedding, attention, cross-entropy, AdamW      */
/* ------------------------------------------------------------------------ */

/* The pieces a GPT trainer needs around the modules, on both backends, all
 * asynchronous, allocation-free per call and graph-capturable. Token ids are
 * int32 in backend memory. A batch of B sequences of S tokens is flattened
 * to T = B·S rows, sequence-major (row b·S + s). */

/* Token + position embedding (GPT-2): y[t, :] = wte[tokens[t], :] + wpe[t mod S, :].
 * wte [V, C], wpe [>= S, C], y [T, C]: FP32 or BF16 (y may differ; sums in
 * FP32). A token outside [0, V) cannot be reported by the device: its row of
 * y is the position embedding alone, and backward ignores it. */
f8_status f8_embedding_forward(f8_ctx *ctx, const int32_t *tokens, int64_t seq_len, const f8_tensor *wte,
                               const f8_tensor *wpe, f8_tensor *y);
/* dwte[tokens[t], :] += dy[t, :], dwpe[t mod S, :] += dy[t, :]; deterministic:
 * every sum is taken in the same order on every run. dwpe may be NULL.
 * dy [T, C], dwte [V, C], dwpe [>= S, C]: FP32 or BF16, not overlapping.
 * Each row's contributions are summed in FP32 and added to the gradient
 * once (BF16: one rounding), except on a CUDA ctx when more than ~2k of the
 * T tokens fall into one band of 256 vocabulary rows: that band's rows are
 * then added in a few pieces (positions in ascending chunks), each rounded.
 * Rows no token names are not written. T may be any count (a last, partial
 * sequence is fine). Allocates nothing. */
f8_status f8_embedding_backward(f8_ctx *ctx, const int32_t *tokens, int64_t seq_len, const f8_tensor *dy,
                                f8_tensor *dwte, f8_tensor *dwpe);

/* Causal multi-head self-attention, as in GPT-2. qkv [T, 3C] holds per row
 * [q | k | v], each C = n_head · head_dim wide, head h in columns
 * h·head_dim .. (h+1)·head_dim - 1 of each third. For each sequence and head:
 *   y = softmax(q kᵀ / sqrt(head_dim) + causal mask) v      y [T, C]
 * dtype FP32 or BF16; on the GPU BF16 with head_dim 64 or 128 (16-byte
 * aligned tensors) runs fused flash-attention kernels on the tensor cores,
 * every other case a plain, correct and slow kernel. The caller keeps qkv
 * unchanged until backward; y is copied into the saved state, so y may change.
 *
 * Numerics (per row i, keys j <= i; c = 1/sqrtf(head_dim), c2 = c·log2 e):
 *   forward   s = q_i·k_j (FP32 sum), m = max_j s, p_j = exp2((s_j - m)·c2),
 *             l = Σ p_j, y_i = (Σ_j dt(p_j)·v_j)·(1/l), L_i = m + log2(l)/c2
 *   backward  P_ij = exp2((s_ij - L_i)·c2), dP_ij = dy_i·v_j, D_i = dy_i·y_i,
 *             dS_ij = dt(P_ij·(dP_ij - D_i)·c), dv_j = Σ_i dt(P_ij)·dy_i,
 *             dk_j = Σ_i dS_ij·q_i, dq_i = Σ_j dS_ij·k_j
 * where dt() rounds to the dtype; statistics and sums are FP32, each output
 * rounded to the dtype once. The GPU's fused kernels take m as a running
 * maximum over blocks of 64 keys (online softmax), so their p is rounded
 * relative to that maximum and rescaled in FP32; results agree with the CPU
 * backend to about one BF16 rounding. S = 1 is exact: y = v, dq = dk = 0
 * (CPU), dv = dy. Deterministic: the same inputs give bitwise the same
 * outputs on a ctx (no atomics on either backend).
 *
 * Memory: a saved state holds L (FP32, max_batch · n_head · max_seq) and a
 * copy of y (max_batch · max_seq · C elements of the dtype), as
 * F8_MEM_SAVED_ACTIVATIONS: O(T·C), never O(S²). Create reserves the ctx
 * scratch for one call at max_batch, max_seq: n_head · T + 2 · max_seq
 * floats (T = max_batch · max_seq). Calls allocate nothing and need no
 * warm-up before a graph capture; the forward is 1 kernel launch, the
 * backward 2.
 * Errors: create: F8_ERR_SHAPE for n_head or head_dim outside [1, 2^16],
 * C > 2^24, max_batch outside [1, 2^24], max_seq outside [1, 2^20],
 * max_batch · n_head >= 2^31 or a saved state over 2^40 bytes; F8_ERR_DTYPE
 * for a dtype not FP32/BF16;
 * F8_ERR_STATE while capturing a graph (saved_create too).
 *
 * FP8 (config.fp8 = 1: TE's fp8_dpa with its F16 backward, NVTE_FP8_DPA_BWD=0).
 * Create registers three forward scaling slots in the ctx (f8_attention_fp8_slots:
 * QKV, shared by q, k and v; S, the softmax output; O, the output), updated,
 * all-reduced and read like a module's, and checkpointed by
 * f8_checkpoint_add_attention / f8_checkpoint_restore_attention (below: a
 * module checkpoint does not hold them). The forward:
 *   q8 = e4m3(qkv · scale_qkv), its amax into QKV's accumulator, dq = 1/scale_qkv
 *   s  = FP32(Σ q8·k8)·dq·dk;  m, p, l, L as above;  P = p / l  (normalized)
 *   P8 = e4m3(P · scale_s),  O = FP32(Σ P8·v8)·descale_s·dv
 *   y  = dt(e4m3(O · scale_o) · descale_o)
 * with amax_s = max P (1 for any causal call) and amax_o = max |O| maxed into
 * S's and O's accumulators; scale and descale are the slots' (descale = their
 * scale_inv). The backward is the BF16 one above run on dt(q8·dq) (the
 * inputs the forward used), the saved y and L: gradients are BF16 and the
 * caller's qkv is not read after the forward. On the GPU the forward runs
 * f8's FP8 kernel, the formulas above (2 launches with the cast; correct,
 * and far slower than the BF16 attention: for study, not speed). cuDNN's
 * FP8 flash attention (cuDNN 9.1+, head_dim a multiple of 16 up to 128,
 * aligned tensors: 4 launches) is taken only under the environment
 * variable F8_ATTN_FP8=cudnn, for investigation only: on the H200 (cuDNN
 * 9.14) it is as close to the BF16 attention as the formulas are at small
 * shapes (B·nh up to 6, S up to 1024), but at B16 S512 nh10 hd64 (f8_train's
 * 50M) its y is wrong and differs from run to run, and training with it
 * diverges. The backward is a dequantize plus the BF16 backward. Memory: the saved state
 * adds the codes (T·3C bytes) and the reservation the backward's BF16 qkv
 * (T·3C·2 bytes) and cuDNN's O8 (T·C bytes). Errors: create with fp8 = 1:
 * F8_ERR_DTYPE unless dtype is BF16, F8_ERR_UNSUPPORTED unless the ctx's
 * recipe is F8_RECIPE_DELAYED (S and O have no tensor to measure before the
 * fused cast), F8_ERR_INVALID_ARGUMENT for fp8 not 0 or 1; a refused create
 * registers nothing. */
typedef struct f8_attention f8_attention;
typedef struct f8_attention_saved f8_attention_saved;

typedef struct f8_attention_config {
    int64_t n_head;     /* >= 1 */
    int64_t head_dim;   /* >= 1 */
    int64_t max_batch;  /* largest B of any call; sizes the saved state */
    int64_t max_seq;    /* largest S */
    f8_dtype dtype;     /* qkv, y and their gradients: FP32 or BF16; default BF16 */
    int output_kept;    /* 1: the caller keeps each forward's y, unchanged, until its backward (as it
                           keeps qkv): the saved state then holds no copy of y (T·C elements less) and the
                           forward writes none; default 0 (the saved state copies y) */
    int fp8;            /* 1: FP8 attention (TE's fp8_dpa, with its F16 backward): see "FP8" above;
                           needs dtype BF16 and a ctx with F8_RECIPE_DELAYED; default 0 */
} f8_attention_config;

/* The given sizes and dtype BF16. */
f8_attention_config f8_attention_config_default(int64_t n_head, int64_t head_dim, int64_t max_batch, int64_t max_seq);
f8_status f8_attention_create(f8_ctx *ctx, const f8_attention_config *config, f8_attention **attention);
void f8_attention_destroy(f8_attention *attention);
/* What one forward keeps for its backward (L and, unless output_kept, a copy
 * of y, allocated here). Any number may be in flight; each holds the last forward written
 * into it. */
f8_status f8_attention_saved_create(f8_attention *attention, f8_attention_saved **saved);
void f8_attention_saved_destroy(f8_attention_saved *saved);
/* qkv [B·S, 3C] and y [B·S, C] in the config dtype, 0 <= batch <= max_batch,
 * 0 <= seq <= max_seq (zero tokens: nothing is issued); y must not overlap
 * qkv. saved may be NULL (inference: y is bitwise the same); otherwise it
 * records this call (L, the copy of y, and the qkv pointer) for the
 * backward. F8_ERR_SHAPE / F8_ERR_DTYPE for a tensor that does not match,
 * F8_ERR_INVALID_ARGUMENT for NULLs, overlap or a saved state of another
 * attention. */
f8_status f8_attention_forward(f8_attention *attention, const f8_tensor *qkv, int64_t batch, int64_t seq,
                               f8_tensor *y, f8_attention_saved *saved);
/* The backward of the forward recorded in saved (same B, S; reads that
 * forward's qkv, which must be unchanged): dy [B·S, C], dqkv [B·S, 3C] in the
 * config dtype; dqkv is overwritten (dq, dk, dv in qkv's layout) and must
 * overlap neither qkv nor dy. saved is not consumed: it may be used again.
 * F8_ERR_STATE if no forward was recorded in saved. */
f8_status f8_attention_backward(f8_attention *attention, f8_attention_saved *saved, const f8_tensor *dy,
                                f8_tensor *dqkv);
/* The forward scaling slots of an attention created with fp8 = 1: [out]
 * slots[0] QKV (q, k and v share it), slots[1] S (the softmax output),
 * slots[2] O (the output), in the ctx registry with the modules' (read,
 * write and update them as any slot). F8_ERR_STATE for fp8 = 0. */
f8_status f8_attention_fp8_slots(const f8_attention *attention, f8_slot slots[3]);
/* Checkpoint an attention's FP8 scaling state under prefix ("model.h.3.attn")
 * / restore it (synchronizes; F8_ERR_STATE while capturing, as
 * f8_checkpoint_add_tensor). An attention has no parameters: what it stores
 * is its three slots, laid out as a module's forward slots ("Checkpoints"):
 *   <prefix>.fp8.fwd.amax_history (F32 [L, 3]), .fp8.fwd.scale and
 *   .fp8.fwd.scale_inv (F32 [3]), in f8_attention_fp8_slots' order (QKV, S, O),
 * with the recipe in the metadata ("<prefix>.fp8.recipe"). With fp8 = 0
 * there is nothing to store: add adds nothing and returns F8_OK, so a
 * model may call it for every attention. Add refuses a name already in
 * the checkpoint before adding anything (F8_ERR_INVALID_ARGUMENT).
 * Restore checks every entry (present; F32 of 3 slots, else F8_ERR_SHAPE;
 * amaxes finite and >= 0, scales and scale_invs finite and > 0; the recipe
 * format the ctx's) before it writes, and changes nothing on an error.
 * F8_ERR_INVALID_ARGUMENT also when the checkpoint and the attention
 * disagree on fp8: state stored under prefix and an attention with fp8 = 0
 * (it would be dropped), or fp8 = 1 and none stored (a checkpoint of a BF16
 * attention, or one written before attentions were stored: create the
 * attention as the checkpoint's was). fp8 = 0 and none stored: F8_OK,
 * nothing to do. A history of another length is cut or zero-padded at the
 * end, as a module's (TE's rule: its attention keeps its FP8 state as its
 * modules do). */
f8_status f8_checkpoint_add_attention(f8_checkpoint *checkpoint, const char *prefix, const f8_attention *attention);
f8_status f8_checkpoint_restore_attention(const f8_checkpoint *checkpoint, const char *prefix, f8_attention *attention);

/* Softmax cross-entropy of logits [T, Vp] (FP32 or BF16) against targets [T]
 * (int32 backend), over the first `vocab` columns (the rest are padding:
 * no probability, zero gradient). A target outside [0, vocab) marks an
 * ignored row (loss 0, zero gradient). Writes losses [T] (FP32 backend
 * memory, -log p(target)) and, if dlogits is not NULL, dlogits [T, Vp] =
 * (softmax - onehot(target)) · grad_scale (dlogits may be logits itself).
 * Per row, in FP32: m = max x, s = Σ exp(x - m), loss = log s - (x_target - m),
 * dlogits = (exp(x - m) / s - onehot) · grad_scale (a CUDA ctx may use the
 * fast exponential and multiply by 1/s: within 1e-5 relative of these, the
 * same bits every run). dlogits is FP32 or BF16;
 * in place it must be the same pointer and dtype (any other overlap:
 * F8_ERR_INVALID_ARGUMENT). 1 <= vocab <= Vp (F8_ERR_SHAPE). */
f8_status f8_cross_entropy(f8_ctx *ctx, const f8_tensor *logits, int64_t vocab, const int32_t *targets,
                           float grad_scale, float *losses, f8_tensor *dlogits);

/* AdamW (decoupled weight decay) over a set of parameters, with global
 * gradient-norm clipping and a warmup + cosine learning-rate schedule, all
 * computed on the device from a device step counter, so a whole step can be
 * one graph replay:
 *   lr(step)  = lr_max · (step + 1) / warmup_steps                  step < warmup_steps
 *             = lr_min + (lr_max - lr_min) · (1 + cos(π · p)) / 2   p = (step - warmup)/(total - warmup), clamped to 1
 *   norm      = sqrt(Σ over every grad of g²)  (FP32, fixed order: deterministic)
 *   c         = grad_clip > 0 && norm > grad_clip ? grad_clip / norm : 1
 *   g' = c·g; m = β1 m + (1-β1) g'; v = β2 v + (1-β2) g'²
 *   p -= lr · (m / (1-β1^t) / (sqrt(v / (1-β2^t)) + eps) + wd · p)   (wd only for params added with decay)
 * with t = step + 1; then step += 1. Params FP32 or BF16 (BF16 rounded to
 * nearest even). The moments are kept in the precision the config's
 * `moments` field selects (f8_adamw_moments below): each step loads them,
 * runs the lines above in FP32 (in that order, no fused multiply-add), updates
 * the parameter with the step's FP32 m and v, and only then rounds m and v
 * into their storage. Both backends give the same bits, for every choice. */
typedef struct f8_adamw f8_adamw;

/* How the Adam moments are stored between steps (bytes per parameter: m + v
 * + per-block scales; the FP32 master parameter is not counted):
 *   F8_ADAMW_MOMENTS_FP32  m, v FP32: exact.                         8 B
 *   F8_ADAMW_MOMENTS_BF16  m, v BF16, round to nearest even.          4 B
 *   F8_ADAMW_MOMENTS_FP8   per block of F8_ADAMW_FP8_BLOCK consecutive 2 + 8/128 = 2.0625 B
 *                          elements of a tensor (the last block may be short):
 *       m: E4M3 codes of m·sm, sm = 2^floor(log2(448 / amax|m|));
 *       v: E4M3 codes of sqrt(v)·sv, sv = 2^floor(log2(448 / amax sqrt(v)));
 *       each block keeps scale_inv = 1/s (FP32, exact) for m and for sqrt(v).
 *       amax over the block's new FP32 values (NaN ignored); a block of zeros
 *       keeps s = 1; s = 448/amax rounded down to a power of two (FLT_MAX's
 *       when that overflows), so x·s and code·scale_inv are exact. Encoding is
 *       cvt.rn.satfinite (f8_fp8_from_float). Loading: m = code·scale_inv,
 *       v = (code·scale_inv)² (FP32). 0 codes and scale_invs before any step.
 * Why sqrt(v) in E4M3: v spans the square of the gradients' range, and a v
 * rounded to 0 under a nonzero m makes an update of m/eps. Storing sqrt(v)
 * halves the range in binades, so a block of 128 holds about 2^35 of v's
 * range (E4M3 with subnormals) against E5M2's 2^32 and E4M3-of-v's 2^18, at E5M2's
 * precision for v (3 mantissa bits on sqrt(v)). dev/adamw_moments_study.c
 * and docs/ARCHITECTURE.md have the comparison.
 * Round to nearest keeps a moment where it is when one step would move it by
 * less than half its storage spacing (BF16: 2^-9 to 2^-8 relative; FP8:
 * 2^-5 to 2^-4 of m or sqrt(v) in a block's top binade): e.g. with β2 = 0.999
 * a v of either form stops decaying. tests/test_adamw_moments.c states the
 * losses reached against FP32 moments on small problems (BF16 within 1%, FP8
 * within 8%); whether a model trains as well is a measurement, not a promise. */
typedef enum f8_adamw_moments {
    F8_ADAMW_MOMENTS_FP32 = 0,
    F8_ADAMW_MOMENTS_BF16 = 1,
    F8_ADAMW_MOMENTS_FP8 = 2
} f8_adamw_moments;

#define F8_ADAMW_FP8_BLOCK 128

/* "fp32", "bf16", "fp8" (the checkpoint metadata's values); NULL for another value. */
const char *f8_adamw_moments_name(f8_adamw_moments moments);

typedef struct f8_adamw_config {
    float lr_max;        /* default 6e-4 */
    float lr_min;        /* default 6e-5 */
    int64_t warmup_steps; /* default 0 (no warmup) */
    int64_t total_steps; /* cosine ends here; default 0 = constant lr_max after warmup */
    float beta1, beta2, eps; /* 0.9, 0.95, 1e-8 */
    float weight_decay;  /* default 0.1 */
    float grad_clip;     /* default 1.0; 0 = no clipping */
    f8_adamw_moments moments; /* default F8_ADAMW_MOMENTS_FP32 */
} f8_adamw_config;

f8_adamw_config f8_adamw_config_default(void);
/* Errors: F8_ERR_INVALID_ARGUMENT for a negative or non-finite lr, eps,
 * weight_decay or grad_clip, a beta outside [0, 1), negative step counts, or
 * total_steps neither 0 nor greater than warmup_steps, or an unknown
 * moments value. The device state
 * (F8_MEM_OTHER) is allocated here. */
f8_status f8_adamw_create(f8_ctx *ctx, const f8_adamw_config *config, f8_adamw **adamw);
void f8_adamw_destroy(f8_adamw *adamw);
/* Register a parameter and its gradient (same shape; views must stay valid
 * while the optimizer is used). decay != 0 applies weight decay to it.
 * Param and grad are FP32 or BF16, independently. Allocates its moments
 * (the bytes per parameter above, F8_MEM_OTHER) and rebuilds the device list of parameters,
 * so every step, the first included, may be captured in a graph. Refused with
 * F8_ERR_STATE once a step has been issued (eagerly or into a graph); a
 * parameter registered twice is F8_ERR_INVALID_ARGUMENT. */
f8_status f8_adamw_add(f8_adamw *adamw, const f8_tensor *param, const f8_tensor *grad, int decay);
/* One update of every registered parameter (asynchronous; CUDA: three
 * launches however many parameters). */
f8_status f8_adamw_step(f8_adamw *adamw);
/* Host copies of the device state after the last step (synchronizes); any
 * output may be NULL: steps done, the lr used by the last step, the
 * gradient norm before clipping of the last step (0, 0, 0 before any step). */
f8_status f8_adamw_read(f8_adamw *adamw, int64_t *step, float *lr, float *grad_norm);
/* Sharded optimizer (ZeRO-1): the registered tensors are this rank's shard of
 * the model, and the norm that clipping uses is global: with a comm set, a
 * step computes Σ g² over its own tensors, all-reduces it (SUM) over comm,
 * and then takes norm = sqrt of that (FP32) and updates as above. Three ops
 * instead of one, all on the stream (graph-capturable). comm must be made on
 * the optimizer's ctx and outlive the optimizer's steps (and any graph that
 * recorded them); NULL unsets. Refused (F8_ERR_STATE) while capturing. Every
 * rank must step together (the all-reduce is a collective). */
f8_status f8_adamw_set_comm(f8_adamw *adamw, f8_comm *comm);
/* Checkpoint the optimizer (moments and step) under prefix / restore it
 * (same parameter shapes registered in the same order). Entries, with i the
 * registration order: <prefix>.m.<i> and <prefix>.v.<i> (the parameter's
 * shape; F32 or BF16 as the moments are kept; with FP8 moments instead
 * <prefix>.m.<i> and <prefix>.v_sqrt.<i>, F8_E4M3 codes of m and sqrt(v),
 * plus <prefix>.m_scale_inv.<i> and <prefix>.v_sqrt_scale_inv.<i>, F32
 * [blocks]), <prefix>.step (I64 [1]), <prefix>.lr and <prefix>.grad_norm (F32
 * [1], what f8_adamw_read returns), and the metadata "<prefix>.moments" =
 * f8_adamw_moments_name (a checkpoint without it holds FP32 moments).
 * Parameters are not stored: add them as tensors. Restoring checks every
 * entry first (a missing one, another dtype or shape, more parameters stored
 * than registered, a NaN or infinite moment, lr or grad_norm, or a negative
 * second moment, scale_inv, lr or grad_norm (F8_ERR_INVALID_ARGUMENT naming
 * the tensor and element); moments kept in another form than the optimizer's
 * config.moments: F8_ERR_DTYPE naming both, not converted) change nothing)
 * and then continues the run bit for bit. Adding refuses a name already in
 * the checkpoint before adding anything. */
f8_status f8_checkpoint_add_adamw(f8_checkpoint *checkpoint, const char *prefix, f8_adamw *adamw);
f8_status f8_checkpoint_restore_adamw(const f8_checkpoint *checkpoint, const char *prefix, f8_adamw *adamw);

/* ------------------------------------------------------------------------ */
/* ONNX export                                                               */
/* ------------------------------------------------------------------------ */

/* An f8_onnx is an inference graph being built from f8 objects, written as
 * an ONNX model (protobuf, standard operators of the default domain only) for
 * ONNX Runtime, TensorRT and other tools. At export time the FP8 scales stop
 * being state the step updates and become constants of the graph, so the file
 * computes what f8_module_forward(..., F8_MICROBATCH_NONE, NULL) and the other
 * forwards compute at that moment:
 *
 *   FP8 cast of a GEMM input   QuantizeLinear(x, s_inv, 0 as float8e4m3fn,
 *                              saturate=1) -> DequantizeLinear(q, s_inv, 0),
 *                              s_inv = 1/scale of the module's INPUT slot now;
 *                              under F8_RECIPE_CURRENT computed in the graph
 *                              from x as the cast does (scale = scaled_max /
 *                              ReduceMax(|x|), kept when that is 0 or not
 *                              finite, FLT_MAX clamp, power-of-two option);
 *                              F8_RECIPE_BLOCK: F8_ERR_UNSUPPORTED with fp8 (its
 *                              scales are per tile; config.fp8 = 0 works)
 *   FP8 weight                 an FP8 initializer of 1 byte per weight, stored
 *                              transposed ([in, out]: MatMul reads it as it is),
 *                              DequantizeLinear with its own scale_inv: the codes
 *                              fp8(W · scale) a forward with F8_MICROBATCH_NONE
 *                              casts from the master weight with the weight
 *                              slot's scale now (current scaling: the scale
 *                              from the weight's amax now; an FP8 primary weight: its
 *                              codes and scale_inv as they are)
 *   GEMM                       MatMul (+ Add bias), FP32
 *   high-precision weight      FP32 or BF16 initializer (as the parameter is
 *                              held; BF16 through a Cast), [out, in], Transpose
 *   LayerNorm                  LayerNormalization(axis -1, eps), gain = gamma or
 *                              1 + gamma (zero_centered_gamma), folded at export
 *   RMSNorm                    x · 1/sqrt(ReduceMean(x²) + eps) · gain (decomposed;
 *                              RMSNormalization from opset 23)
 *   GELU                       Gelu(approximate="tanh"), f8's tanh form
 *   ReLU                       Max(x, 0)
 *   gated activations          fc1's output split in [a | b], act(a) · b
 *   values f8 stores in BF16   Cast to bfloat16 and back (round to nearest even)
 *
 * Numerics. f8 casts fp8(x · scale) with an FP32 product; QuantizeLinear
 * computes x / s_inv. With scale a power of two both are exact and the codes
 * are identical; otherwise the quotient may differ from the product in the
 * last FP32 bit, which changes the FP8 code only when x · scale lies within
 * that bit of a rounding boundary (measured by the tests: about 1 code in
 * 10^5 to 10^6). config.exact_cast = 1 writes Mul(x, scale) ->
 * QuantizeLinear(·, 1) -> DequantizeLinear(·, s_inv) instead: the same codes
 * as f8 always, at the price of a Q/DQ pair whose scales differ (some tools'
 * FP8 pattern matching expects them equal). GEMM sums, norm statistics and
 * transcendental functions differ from f8's in FP32 summation order and last
 * bits only.
 *
 * Values. Every graph value has a name: the graph's inputs, and the output
 * names given to the add_* calls below, each used once (a value is defined
 * once; a call whose output name exists is refused). Names are 1 to 128
 * characters of [A-Za-z0-9_./:-] and do not start with "_f8." (the names of
 * the values the exporter makes itself). Tensors are float32 in the graph
 * unless said otherwise; config.dtype says whether the f8 tensors they stand
 * for are FP32 or BF16 (BF16: each module, attention, embedding and add
 * output is rounded to BF16, as f8 stores it). A module applies to the last
 * axis of its input: [..., in_features] -> [..., out_features].
 *
 * Every call checks its arguments and changes nothing on error (a call that
 * fails half-way removes what it added); the message is in
 * f8_ctx_last_error of the graph's ctx. Building downloads what it needs
 * from backend memory (synchronizes) and keeps host copies: the objects may
 * change or go after the call. A weight met again (the same backend memory,
 * e.g. an embedding table tied to the LM head) is stored once.
 *
 * FP8 embedding table (config.fp8_embedding = 1; off by default). f8 keeps
 * the token embedding, and the LM head tied to it, in high precision
 * (BF16 or FP32), and so does the export by default: in a GPT-2 124M that
 * table is 31% of the parameters and, in BF16, 47% of an FP8 export's
 * bytes. With the option, f8_onnx_add_embedding stores wte as
 * E4M3 codes, 1 byte per element, with one FP32 scale per row (vocabulary
 * entry): s_r = 448 / max |wte[r, :]| (1 for a row of zeros), codes
 * fp8(wte[r, c] · s_r) by f8's encoder (round to nearest even, saturating),
 * DequantizeLinear(codes, 1/s, axis 0). The Gather of the embedding and the
 * MatMul of a module whose weight is the same memory (the tied LM head,
 * added after the embedding) both read that one dequantized table. This
 * is NOT f8's forward: f8 trains and runs with the table in high precision,
 * so the embedding output and the logits differ from f8's by what rounding
 * every table element to 3 mantissa bits gives (each element by up to 2^-4
 * of itself, the largest of its row by none). Measured on tests/test_onnx.c's
 * small GPT: the logits differ from f8's by 2.5% to 3.5% of their range
 * (max |difference| / max |f8's logits|; the test's bound is 6%), and match
 * f8's forward run with the rounded table as closely as the FP8 graph
 * matches f8 without the option; on barely trained 124M GPTs (fresh, or 2
 * steps) 3% to 10% of their small logits' range, depending on the input.
 * In a GPT-2 124M export the option takes the FP8 file from 0.66 to 0.51 of
 * the BF16 export's bytes. The embedding added after a module that already
 * stored wte in high precision is refused (F8_ERR_INVALID_ARGUMENT). */
typedef struct f8_onnx f8_onnx;

typedef struct f8_onnx_config {
    int opset;            /* ONNX opset of the default domain, 20 to 23; default 21 */
    int fp8;              /* 1: modules created with fp8 export FP8 GEMMs (Q/DQ); 0: every
                             GEMM in high precision from the master weights (a module
                             with FP8 primary weights: its dequantized codes); default 1 */
    int exact_cast;       /* 1: FP8 casts as Mul(x, scale) -> QuantizeLinear(·, 1): the
                             codes of f8 bit for bit (see above); default 0 */
    int fp8_embedding;    /* 1: the embedding table (wte) as FP8 per row, shared by a tied
                             LM head: the graph no longer computes f8's forward
                             (see "FP8 embedding table" above); default 0 */
    f8_dtype dtype;       /* FP32 (default) or BF16: what the f8 tensors between the
                             graph's operations hold */
    const char *name;     /* the graph's name; default "f8" */
} f8_onnx_config;

f8_onnx_config f8_onnx_config_default(void);

/* Element types of graph inputs and outputs (ONNX TensorProto numbers). */
typedef enum f8_onnx_type {
    F8_ONNX_FLOAT = 1,  /* float32 */
    F8_ONNX_INT64 = 7   /* token ids */
} f8_onnx_type;

/* Create an empty graph bound to ctx (whose backend memory the added objects
 * live in). Errors: F8_ERR_INVALID_ARGUMENT for an opset outside [20, 23],
 * flags other than 0/1, a dtype not FP32/BF16 or a bad name. */
f8_status f8_onnx_create(f8_ctx *ctx, const f8_onnx_config *config, f8_onnx **graph);
void f8_onnx_destroy(f8_onnx *graph);

/* A graph input. shape: comma-separated dimensions, each a positive integer
 * or a symbolic name ([A-Za-z_][A-Za-z0-9_]*, at most 64 characters) for a
 * dimension chosen at run time, 1 to 8 of them: "tokens,64", "batch,seq".
 * F8_ERR_INVALID_ARGUMENT for a bad or used name, type or shape. */
f8_status f8_onnx_add_input(f8_onnx *graph, const char *name, f8_onnx_type type, const char *shape);

/* Declare the value `name` (an input or an output of an add_* call) a graph
 * output, with shape as for inputs, or NULL for the rank the graph knows
 * (its last dimension stated, the others unnamed). F8_ERR_INVALID_ARGUMENT
 * for an unknown value, one already an output, a bad shape, or NULL where
 * the rank is not known; F8_ERR_SHAPE for a rank or last dimension known to
 * differ. */
f8_status f8_onnx_add_output(f8_onnx *graph, const char *name, const char *shape);

/* y = module(x) for any f8_module (Linear, LayerNormLinear, LayerNormMLP),
 * from the module's data flow, parameters and scaling state now. x: a float
 * value whose last dimension is in_features (F8_ERR_SHAPE when known to
 * differ); y: a new name. FP8 GEMMs when the module has fp8 and config.fp8
 * is 1. F8_ERR_INVALID_ARGUMENT for a module of another ctx. */
f8_status f8_onnx_add_module(f8_onnx *graph, f8_module *module, const char *x, const char *y);

/* y = causal self-attention(qkv) as f8_attention_forward computes it (its
 * n_head, head_dim and dtype): qkv is a float value [batch, seq, 3C] (rank 3,
 * last dimension 3·n_head·head_dim), y [batch, seq, C]. Per head,
 * s = q·kᵀ, masked above the diagonal, p = exp((s - max s) · c) with
 * c = 1/sqrt(head_dim), y = (p · v) · (1 / Σ p); BF16 attention rounds p and
 * y to BF16 as f8 does. */
f8_status f8_onnx_add_attention(f8_onnx *graph, const f8_attention *attention, const char *qkv, const char *y);

/* y = wte[tokens] + wpe[position] (f8_embedding_forward), position = the
 * index along tokens' last axis. tokens: an int64 value [..., seq], with
 * seq <= wpe rows at run time; y [..., seq, C]. wte [V, C], wpe [S, C]:
 * FP32 or BF16 views of backend memory of the graph's ctx. A token outside
 * [0, V) is an error of the runtime (f8 gives the position row alone). With
 * config.fp8_embedding, wte is stored as per-row FP8 (above; not f8's
 * values); F8_ERR_INVALID_ARGUMENT for a non-finite wte element then, or a
 * wte already stored in high precision by an earlier call. */
f8_status f8_onnx_add_embedding(f8_onnx *graph, const f8_tensor *wte, const f8_tensor *wpe, const char *tokens,
                                const char *y);

/* y = a + b (f8_tensor_add: a residual connection); same last dimension. */
f8_status f8_onnx_add_add(f8_onnx *graph, const char *a, const char *b, const char *y);

/* y = x[..., begin:end] along the last axis, 0 <= begin < end (e.g. the
 * real vocabulary of padded logits). F8_ERR_SHAPE when end is past a known
 * last dimension. */
f8_status f8_onnx_add_slice(f8_onnx *graph, const char *x, int64_t begin, int64_t end, const char *y);

/* The model as protobuf bytes. buf NULL: *size receives the size needed.
 * Otherwise the model is written when capacity >= that size (else
 * F8_ERR_INVALID_ARGUMENT and *size the size needed). Needs at least one
 * input and one output. */
f8_status f8_onnx_serialize(const f8_onnx *graph, void *buf, size_t capacity, size_t *size);

/* Write the model to path: to "<path>.tmp.<pid>" first, then renamed over
 * path (F8_ERR_IO with the system's reason), as f8_checkpoint_save. */
f8_status f8_onnx_save(const f8_onnx *graph, const char *path);

#ifdef __cplusplus
}

#endif

#endif /* F8_H */
