/*
 * f8i.h — internal definitions shared by the library's files: the ctx, the
 * scaling buffer layout and the error helpers. Included from C and CUDA.
 */
#ifndef F8I_H
#define F8I_H

#include <stdarg.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/dtype.h"
#include "f8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scaling state of one direction, inside the ctx's single scaling buffer:
 * history [L, cap] (row 0 = current-step accumulators, contiguous across
 * slots so one all-reduce covers a direction), scale [cap], scale_inv [cap]. */
typedef struct f8i_scaling_dir {
    float *history; /* (L, cap) */
    float *scale;   /* (cap) */
    float *scale_inv; /* (cap) */
    int count;      /* slots registered */
    int cap;        /* columns allocated */
} f8i_scaling_dir;

/* One live backend allocation, for the memory report and the counters. */
typedef struct f8i_alloc_rec {
    void *ptr;
    size_t bytes;
    int category;             /* f8_mem_category */
    f8_memory_report *acct;   /* the owning module's report, or NULL */
} f8i_alloc_rec;

struct f8_ctx {
    const f8i_backend *be;
    void *be_state;     /* the backend's own (CUDA: stream, cuBLASLt handle, plans) */
    f8_backend kind;
    int device;
    f8_recipe recipe;
    f8_attention_path attn_path; /* f8_ctx_config.attention_path: AUTO or OWN */
    int attn_nondet;    /* f8_ctx_config.attention_nondeterministic */
    float *noop;        /* (1) backend memory: the ctx noop flag */
    int weight_noop;    /* weight casts take the noop flag (graph mode) */
    int gemm_tune;      /* f8_ctx_set_gemm_tune: time cuBLASLt's candidates at a plan's first call */
    uint64_t gemm_tuned; /* plans whose algorithm that timing chose (tests read it) */
    float *scaling_buf; /* backend memory holding both directions */
    f8i_scaling_dir dir[2];
    void *scratch;      /* backend memory shared by modules within one call */
    size_t scratch_bytes;
    f8_ctx_counters counters;
    f8_memory_report mem;   /* live backend memory by category */
    f8i_alloc_rec *allocs;  /* (n_allocs) host table of live allocations */
    size_t n_allocs, cap_allocs;
    int capturing;          /* between f8_graph_begin and f8_graph_end */
    f8_status capture_error; /* first error seen while capturing (spoils the capture) */
    void *graph_state;      /* the backend's capture state (graph.c / cuda/graph.cu) */
    int n_fp8_weight_slots; /* forward slots of FP8-primary-weight modules, for */
    int32_t *fp8_weight_cols; /* (n) host list of their columns (f8_ctx_update_weight_scales) */
    int32_t *fp8_weight_cols_dev; /* (n) backend copy */
    int telemetry;          /* f8_ctx_enable_telemetry was called */
    void *tel_block;        /* backend memory: live counters, snapshots (f8i_tel_* below) */
    f8_comm *comm;          /* amax-reduction group (f8_ctx_set_comm) or NULL */
    int rows_unfused;       /* test hook (f8i_quantizer_test_unfuse_rows): quantizers made after it
                               keep row-wise casts out of the norm and activation kernels */
    char error[512];
};

/* Count work put on the stream (f8_ctx_counters.launches): every kernel
 * launch, cuBLASLt matmul and async memset/copy of the CUDA backend, every
 * op of the CPU backend. */
#define F8I_COUNT_LAUNCHES(ctx, n) ((ctx)->counters.launches += (uint64_t)(n))

/* Record a message on ctx (printf format) and return status. ctx may be NULL. */
f8_status f8i_error(f8_ctx *ctx, f8_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Evaluate expr (an f8_status) and return it from the enclosing function
 * unless it is F8_OK: the library's one way to pass an error up. Cleanup
 * paths that must free on failure stay explicit. */
#define F8I_TRY(expr)                                   \
    do {                                                \
        const f8_status f8i_try_status_ = (expr);       \
        if (f8i_try_status_ != F8_OK) return f8i_try_status_; \
    } while (0)

/* Pointers of a slot's accumulator (history row 0), scale and scale_inv. */
float *f8i_slot_amax(f8_ctx *ctx, f8_slot slot);
float *f8i_slot_scale(f8_ctx *ctx, f8_slot slot);
int f8i_slot_valid(const f8_ctx *ctx, f8_slot slot);

/* The magnitude a scale maps amax to for codes of out_dtype: its largest
 * finite value times 2^-recipe.margin. One definition, so every cast, scale
 * update and oracle aims at the same target. */
float f8i_scaled_max(const f8_ctx *ctx, f8_dtype out_dtype);

/* 1 when every cast of the ctx takes its scale from its own tensor
 * (F8_RECIPE_CURRENT). */
static inline int f8i_recipe_current(const f8_ctx *ctx) { return ctx->recipe.kind == F8_RECIPE_CURRENT; }

/* 1 under F8_RECIPE_BLOCK: every module cast is a block-scaled cast
 * (1x128 tiles, 128x128 weight blocks) and every FP8 GEMM a block GEMM. */
static inline int f8i_recipe_block(const f8_ctx *ctx) { return ctx->recipe.kind == F8_RECIPE_BLOCK; }

/* 1 under F8_RECIPE_ROWWISE and ROWWISE_GW_HP: every module cast is a
 * row-wise cast (one scale per row) and every FP8 GEMM a row-wise GEMM. */
static inline int f8i_recipe_rowwise(const f8_ctx *ctx)
{
    return ctx->recipe.kind == F8_RECIPE_ROWWISE || ctx->recipe.kind == F8_RECIPE_ROWWISE_GW_HP;
}

/* 1 when the modules write norm and activation outputs (and d of the
 * activation backward) in high precision and cast them after, instead of the
 * fused FP8 outputs: current scaling needs their amax first, block scaling
 * their tiles' amaxes, row-wise scaling each row's. (Telemetry does not: the fused norm and activation
 * kernels count as the cast does.) Fixed before any module exists. */
static inline int f8i_casts_unfused(const f8_ctx *ctx)
{
    return f8i_recipe_current(ctx) || f8i_recipe_block(ctx) || f8i_recipe_rowwise(ctx);
}

/* FP8 telemetry's block (backend memory, F8_TELEMETRY_MAX_SLOTS per
 * direction): live counters [2][MAX][3] u64 (the casts add to them), then
 * the last step's snapshot: counters [2][MAX][3] u64, amax and scale
 * [2][MAX][2] f32. */
static inline uint64_t *f8i_tel_live(const f8_ctx *ctx, int dir)
{
    return (uint64_t *)ctx->tel_block + (size_t)dir * F8_TELEMETRY_MAX_SLOTS * 3;
}
static inline uint64_t *f8i_tel_snap_c(const f8_ctx *ctx, int dir)
{
    return (uint64_t *)ctx->tel_block + (size_t)(2 + dir) * F8_TELEMETRY_MAX_SLOTS * 3;
}
static inline float *f8i_tel_snap_f(const f8_ctx *ctx, int dir)
{
    return (float *)((uint64_t *)ctx->tel_block + (size_t)4 * F8_TELEMETRY_MAX_SLOTS * 3) +
           (size_t)dir * F8_TELEMETRY_MAX_SLOTS * 2;
}
#define F8I_TEL_BYTES ((size_t)F8_TELEMETRY_MAX_SLOTS * 2 * (3 * 8 * 2 + 2 * 4))

/* The live counters a cast through slot adds to, or NULL (telemetry off, or
 * a slot past F8_TELEMETRY_MAX_SLOTS). */
static inline uint64_t *f8i_slot_stats(const f8_ctx *ctx, f8_slot slot)
{
    if (!ctx->telemetry || slot.index >= F8_TELEMETRY_MAX_SLOTS) return NULL;
    return f8i_tel_live(ctx, slot.direction) + (size_t)slot.index * 3;
}

/* What a cast through `slot` into out_dtype runs before it: under
 * F8_RECIPE_CURRENT the amax pass over src [count] that sets the slot's scale
 * (for out_dtype's fp8_max and the recipe's margin) and scale_inv from this
 * tensor (and, if record, maxes its amax into the slot's history row 0);
 * under DELAYED nothing. *cast_amax receives the amax pointer the cast
 * itself should take: the slot's accumulator under DELAYED when record,
 * NULL otherwise (the amax pass already recorded it). */
f8_status f8i_slot_prepare(f8_ctx *ctx, f8_slot slot, f8_dtype out_dtype, const void *src, f8_dtype src_dtype,
                           int64_t count, const float *noop, int record, float **cast_amax);

/* The largest backend allocation f8 makes or accepts, and the largest
 * tensor view (rows · cols · element size): 2^62 bytes, more than any
 * machine has, small enough that rounding a size up to 256 and summing live
 * sizes in the memory report cannot wrap a size_t, and that every element
 * count of a checked view fits an int64. */
#define F8I_MAX_BYTES ((size_t)1 << 62)

/* Checked size arithmetic, the one place sizes are multiplied and rounded
 * where a caller chose them: each returns 1 and writes *out when the result
 * is at most F8I_MAX_BYTES, else returns 0 and leaves *out alone. */
static inline int f8i_size_mul(size_t a, size_t b, size_t *out)
{
    if (b != 0 && a > F8I_MAX_BYTES / b) return 0;
    *out = a * b;
    return 1;
}
static inline int f8i_size_add(size_t a, size_t b, size_t *out)
{
    if (a > F8I_MAX_BYTES || b > F8I_MAX_BYTES - a) return 0;
    *out = a + b;
    return 1;
}
/* Bytes of a [rows, cols] array of elem_size-byte elements: 1 and *bytes
 * for rows, cols >= 0 with a product (times elem_size) of at most
 * F8I_MAX_BYTES; 0 otherwise (a negative or overflowing shape). */
static inline int f8i_shape_bytes(int64_t rows, int64_t cols, size_t elem_size, size_t *bytes)
{
    size_t n;
    if (rows < 0 || cols < 0) return 0;
    return f8i_size_mul((size_t)rows, (size_t)cols, &n) && f8i_size_mul(n, elem_size, bytes);
}

/* The size check of every backend allocation: F8_OK with *rounded = bytes
 * rounded up to 256 (a 0-byte request counts as 1) when bytes <=
 * F8I_MAX_BYTES; otherwise F8_ERR_OUT_OF_MEMORY with a message naming
 * `who`. f8i_alloc runs it on every request and each backend's alloc runs it
 * again before it rounds, so no size wraps on its way to an allocator. */
f8_status f8i_alloc_size(f8_ctx *ctx, size_t bytes, const char *who, size_t *rounded);

/* Backend allocation through the ctx's accounting: counted, recorded under
 * `category` in the ctx report and (if acct) in a module's report. Refused
 * with F8_ERR_STATE while capturing a graph, and with F8_ERR_OUT_OF_MEMORY
 * past F8I_MAX_BYTES (f8i_alloc_size). f8i_free(ctx, NULL) is a no-op. */
f8_status f8i_alloc(f8_ctx *ctx, f8_mem_category category, f8_memory_report *acct, size_t bytes, void **ptr);
void f8i_free(f8_ctx *ctx, void *ptr);

/* Host read (write = 0) or write of n slots of ONE direction at once:
 * hist [L, n] (row r, slot j at r * n + j), scale [n], scale_inv [n]. One
 * download (and upload) of the direction; synchronizes. */
f8_status f8i_slots_io(f8_ctx *ctx, const f8_slot *slots, int n, float *hist, float *scale, float *scale_inv, int write);

/* The slot registry's state before a module create, so that a create that
 * fails hands back every slot it registered (and the buffer growth). */
typedef struct f8i_slot_mark {
    int count[2], cap[2];
} f8i_slot_mark;
f8i_slot_mark f8i_slots_mark(const f8_ctx *ctx);
void f8i_slots_rollback(f8_ctx *ctx, f8i_slot_mark mark);

/* Add forward slots to the set f8_ctx_update_weight_scales updates (module
 * creation with fp8_weights). */
f8_status f8i_register_fp8_weight_slots(f8_ctx *ctx, const f8_slot *slots, int n);

/* A call refused while capturing a graph (graph.c): records st, with the
 * ctx's message as the reason, as the error that spoils the capture, so
 * f8_graph_end fails as the graph contract says; returns st. Outside a
 * capture it only returns st. */
f8_status f8i_capture_spoil(f8_ctx *ctx, f8_status st);

/* Grow the ctx scratch to at least `bytes` (object creation time only). */
f8_status f8i_scratch_reserve(f8_ctx *ctx, size_t bytes);

/* Checks shared by the public entry points; each sets the ctx error.
 * f8i_check_tensor: t not NULL, a known dtype, rows and cols >= 0 with
 * rows · cols · element size <= F8I_MAX_BYTES (F8_ERR_SHAPE otherwise, so
 * no count or byte size of the view overflows), data set when it holds any
 * element, scale_inv set for FP8. Every public call that takes an f8_tensor
 * runs it first; after it, f8i_tensor_elems and f8i_tensor_bytes are exact. */
f8_status f8i_check_tensor(f8_ctx *ctx, const f8_tensor *t, const char *name);
static inline int64_t f8i_tensor_elems(const f8_tensor *t) { return t->rows * t->cols; }
static inline size_t f8i_tensor_bytes(const f8_tensor *t)
{
    return (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype);
}

/* f8_tensor_fill_normal's n values (N(0, std²), FP32 or BF16 by elem_size)
 * from seed into host memory, over several threads (normal_fill.c). */
void f8i_normal_fill(void *host, size_t elem_size, int64_t n, double std, uint64_t seed);

/* Grow a host table (realloc, doubling from 16) so that element n fits;
 * 0 when out of memory (the table is then unchanged). */
static inline int f8i_grow(void **table, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return 1;
    size_t c = *cap ? 2 * *cap : 16;
    void *t = realloc(*table, c * elem);
    if (!t) return 0;
    *table = t;
    *cap = c;
    return 1;
}

/* Round a byte count up to 256 (carving buffers from one allocation). */
static inline size_t f8i_align256(size_t bytes) { return (bytes + 255u) & ~(size_t)255u; }

/* Buffers laid out in one block, each rounded up to 256 bytes. One function
 * per layout both measures (base NULL: f8i_take returns NULL and only
 * `bytes` grows) and places (base set: the buffers' addresses). */
typedef struct f8i_layout {
    unsigned char *base;
    size_t bytes;
} f8i_layout;

static inline f8i_layout f8i_layout_at(void *base)
{
    f8i_layout l = {(unsigned char *)base, 0};
    return l;
}

static inline void *f8i_take(f8i_layout *l, size_t bytes)
{
    void *p = l->base ? l->base + l->bytes : NULL;
    l->bytes += f8i_align256(bytes ? bytes : 1);
    return p;
}

/* F8_OK if an op's row-reduction workspace (ws, ws_bytes: the args'
 * workspace fields) holds f8i_reduce_workspace_bytes(rows, cols); else
 * F8_ERR_STATE naming `op`. Backends check before any work, so a failing
 * call writes nothing. */
static inline f8_status f8i_check_reduce_workspace(f8_ctx *ctx, const void *ws, size_t ws_bytes, int64_t rows,
                                                   int64_t cols, const char *op)
{
    const size_t need = f8i_reduce_workspace_bytes(rows, cols);
    if (ws != NULL && ws_bytes >= need) return F8_OK;
    return f8i_error(ctx, F8_ERR_STATE,
                     "%s of [%lld, %lld] reduces over rows: its args' workspace needs "
                     "f8i_reduce_workspace_bytes(rows, cols) = %zu bytes, it has %zu%s",
                     op, (long long)rows, (long long)cols, need, ws ? ws_bytes : (size_t)0, ws ? "" : " (NULL)");
}

#ifdef __cplusplus
}
#endif

#endif /* F8I_H */
