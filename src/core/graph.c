/*
 * graph.c — f8 graphs: capture a sequence of f8 calls once, replay it.
 *
 * Design note. f8_graph_begin points ctx->be at a capture table built from
 * the real one (which the capture state keeps). Modules and objects never
 * know: they call ctx->be as always.
 *  - Work ops (everything that puts work on the stream: casts, GEMMs, scale
 *    updates, norms, activations, copy, memset, fill, the training ops) are
 *    recorded on a CPU ctx: a copy of the op's arguments is appended to a
 *    list. Every argument is a pointer to backend memory or a scalar, so
 *    replaying the list through the real table does exactly what the eager
 *    calls would have done, reading the device-side values (scales, noop
 *    flag) of the moment. On a CUDA ctx they go straight to the real op while the stream
 *    is in capture mode (cuda/graph.cu): the stream records the launches; an
 *    op that fails spoils the capture.
 *  - Host ops (upload, download, synchronize, set_stream) are refused with
 *    F8_ERR_STATE and spoil the capture; f8i_alloc (ctx.c) refuses
 *    allocations itself and spoils it the same way.
 *  - free is deferred to the end of the capture (work captured before it may
 *    use the memory, and cudaFree must not run while the stream captures),
 *    and spoils the capture: a graph whose memory was freed would read freed
 *    memory on replay.
 * f8_graph_end always puts the real table back, so no error leaves a ctx in
 * capture mode; a spoiled capture is abandoned (on CUDA, the capture is
 * ended and discarded) and end returns the first spoiling error. So does
 * destroying the ctx in the middle of a capture (state_destroy ends it).
 *
 * Launch counters: captured work is not issued, so end puts
 * counters.launches back to its value at begin; a replay counts what it
 * issues (CUDA: one graph launch; CPU: each recorded op, as eagerly).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"

/* One recorded backend op (CPU capture): its kind and a copy of its args. */
typedef enum op_kind {
    OP_COPY,
    OP_MEMSET_ZERO,
    OP_FILL_F32,
    OP_CAST,
    OP_CONVERT,
    OP_TRANSPOSE_U8,
    OP_RECIPROCAL,
    OP_ADD,
    OP_GEMM,
    OP_SCALE_UPDATE,
    OP_NORM_FWD,
    OP_NORM_BWD,
    OP_ACT_FWD,
    OP_ACT_BWD,
    OP_TRAIN
} op_kind;

typedef struct rec_op {
    op_kind kind;
    union {
        struct {
            void *dst;
            const void *src;
            size_t bytes;
        } copy; /* copy; memset_zero uses dst and bytes */
        struct {
            float *dst;
            float value;
            int64_t count;
        } fill;
        struct {
            const void *src;
            f8_dtype src_dtype;
            const float *scale_inv;
            void *dst;
            f8_dtype dst_dtype;
            int64_t count;
        } convert;
        struct {
            const uint8_t *src;
            uint8_t *dst;
            int64_t rows, cols;
            const float *noop;
        } transpose;
        struct {
            const float *src;
            float *dst;
            const float *noop;
        } reciprocal;
        struct {
            void *dst;
            const void *src;
            f8_dtype dtype;
            int64_t count;
        } add;
        f8i_cast_args cast;
        f8i_gemm_args gemm;
        f8i_scale_update_args scale_update;
        f8i_norm_fwd_args norm_fwd;
        f8i_norm_bwd_args norm_bwd;
        f8i_act_fwd_args act_fwd;
        f8i_act_bwd_args act_bwd;
        struct {
            int kind;
            void *args; /* (size) a heap copy of the op's args struct */
            size_t size;
        } train;
    } u;
} rec_op;

/* Free the recorded ops (their train-op args copies too). */
static void ops_free(rec_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ops[i].kind == OP_TRAIN) free(ops[i].u.train.args);
    free(ops);
}

/* ctx->graph_state between begin and end. */
typedef struct capture {
    f8i_backend table;       /* ctx->be while capturing */
    const f8i_backend *real; /* ctx->be before and after */
    int record;              /* 1: CPU, record ops; 0: CUDA, the stream captures */
    rec_op *ops;             /* (n_ops) recorded ops, in issue order */
    size_t n_ops, cap_ops;
    void **frees;            /* (n_frees) pointers freed during the capture */
    size_t n_frees, cap_frees;
    uint64_t launches;       /* counters.launches at begin */
    char why[512];           /* the message of the first spoiling error */
} capture;

struct f8_graph {
    f8_ctx *ctx;
    void *exec;      /* CUDA: the instantiated graph; NULL if it holds no work */
    rec_op *ops;     /* CPU: (n_ops) the recorded ops */
    size_t n_ops;
};

static capture *cap(const f8_ctx *ctx) { return (capture *)ctx->graph_state; }

/* ------------------------------------------------------------------------ */
/* Spoiling                                                                  */
/* ------------------------------------------------------------------------ */

/* Keep the first error of a capture (status and message) for f8_graph_end. */
static f8_status spoil(f8_ctx *ctx, f8_status st)
{
    if (ctx->capture_error == F8_OK) {
        ctx->capture_error = st;
        snprintf(cap(ctx)->why, sizeof cap(ctx)->why, "%s", ctx->error);
    }
    return st;
}

static f8_status refuse(f8_ctx *ctx, const char *what)
{
    return spoil(ctx, f8i_error(ctx, F8_ERR_STATE,
                                "%s during graph capture: it would talk to the host; refused, and the capture is "
                                "spoiled (f8_graph_end fails)",
                                what));
}

/* ------------------------------------------------------------------------ */
/* The capture table: host ops                                               */
/* ------------------------------------------------------------------------ */

static f8_status cap_alloc(f8_ctx *ctx, size_t bytes, void **ptr)
{
    (void)bytes;
    *ptr = NULL;
    return refuse(ctx, "an allocation");
}

static void cap_free(f8_ctx *ctx, void *ptr)
{
    capture *c = cap(ctx);
    spoil(ctx, f8i_error(ctx, F8_ERR_STATE,
                         "a free (f8_ctx_free or an object's destroy) during graph capture: the captured work may use "
                         "the memory; it is freed at f8_graph_end and the capture is spoiled"));
    if (c->n_frees == c->cap_frees) {
        size_t n = c->cap_frees ? 2 * c->cap_frees : 16;
        void **t = (void **)realloc(c->frees, n * sizeof *t);
        if (!t) { /* no host memory to defer it: best effort, free it now */
            c->real->free(ctx, ptr);
            return;
        }
        c->frees = t;
        c->cap_frees = n;
    }
    c->frees[c->n_frees++] = ptr;
}

static f8_status cap_upload(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return refuse(ctx, "an upload (f8_ctx_upload, f8_slot_write, a weight or checkpoint load)");
}

static f8_status cap_download(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return refuse(ctx, "a download (f8_ctx_download, f8_slot_read, a checkpoint save)");
}

static f8_status cap_synchronize(f8_ctx *ctx) { return refuse(ctx, "a synchronize"); }

static f8_status cap_set_stream(f8_ctx *ctx, void *stream)
{
    (void)stream;
    return refuse(ctx, "f8_ctx_set_stream");
}

static f8_status leave(f8_ctx *ctx, int keep, void **exec, rec_op **ops, size_t *n_ops);

/* Destroying the ctx while capturing: end the capture first. */
static void cap_state_destroy(f8_ctx *ctx)
{
    const f8i_backend *real = cap(ctx)->real;
    leave(ctx, 0, NULL, NULL, NULL);
    real->state_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* The capture table: work ops                                               */
/* ------------------------------------------------------------------------ */

/* The next record of a CPU capture; NULL (capture spoiled) without host memory. */
static rec_op *record(f8_ctx *ctx, op_kind kind)
{
    capture *c = cap(ctx);
    if (c->n_ops == c->cap_ops) {
        size_t n = c->cap_ops ? 2 * c->cap_ops : 64;
        rec_op *t = (rec_op *)realloc(c->ops, n * sizeof *t);
        if (!t) {
            spoil(ctx, f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "graph capture: out of host memory recording op %zu",
                                 c->n_ops));
            return NULL;
        }
        c->ops = t;
        c->cap_ops = n;
    }
    rec_op *op = &c->ops[c->n_ops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    return op;
}

/* After a CUDA op issued into the capture: a failure spoils it. */
static f8_status passed(f8_ctx *ctx, f8_status st) { return st == F8_OK ? st : spoil(ctx, st); }

/* Each work op: CUDA passes through; CPU records. */
#define RECORD_OR_PASS(kind, call)                                              \
    capture *c = cap(ctx);                                                      \
    if (!c->record) return passed(ctx, c->real->call);                          \
    rec_op *op = record(ctx, kind);                                             \
    if (!op) return ctx->capture_error;

static f8_status cap_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    RECORD_OR_PASS(OP_COPY, copy(ctx, dst, src, bytes))
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.bytes = bytes;
    return F8_OK;
}

static f8_status cap_memset_zero(f8_ctx *ctx, void *dst, size_t bytes)
{
    RECORD_OR_PASS(OP_MEMSET_ZERO, memset_zero(ctx, dst, bytes))
    op->u.copy.dst = dst;
    op->u.copy.bytes = bytes;
    return F8_OK;
}

static f8_status cap_fill_f32(f8_ctx *ctx, float *dst, float value, int64_t count)
{
    RECORD_OR_PASS(OP_FILL_F32, fill_f32(ctx, dst, value, count))
    op->u.fill.dst = dst;
    op->u.fill.value = value;
    op->u.fill.count = count;
    return F8_OK;
}

static f8_status cap_cast(f8_ctx *ctx, const f8i_cast_args *a)
{
    RECORD_OR_PASS(OP_CAST, cast(ctx, a))
    op->u.cast = *a;
    return F8_OK;
}

static f8_status cap_convert(f8_ctx *ctx, const void *src, f8_dtype src_dtype, const float *scale_inv, void *dst,
                             f8_dtype dst_dtype, int64_t count)
{
    RECORD_OR_PASS(OP_CONVERT, convert(ctx, src, src_dtype, scale_inv, dst, dst_dtype, count))
    op->u.convert.src = src;
    op->u.convert.src_dtype = src_dtype;
    op->u.convert.scale_inv = scale_inv;
    op->u.convert.dst = dst;
    op->u.convert.dst_dtype = dst_dtype;
    op->u.convert.count = count;
    return F8_OK;
}

static f8_status cap_transpose_u8(f8_ctx *ctx, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols,
                                  const float *noop)
{
    RECORD_OR_PASS(OP_TRANSPOSE_U8, transpose_u8(ctx, src, dst, rows, cols, noop))
    op->u.transpose.src = src;
    op->u.transpose.dst = dst;
    op->u.transpose.rows = rows;
    op->u.transpose.cols = cols;
    op->u.transpose.noop = noop;
    return F8_OK;
}

static f8_status cap_reciprocal(f8_ctx *ctx, const float *src, float *dst, const float *noop)
{
    RECORD_OR_PASS(OP_RECIPROCAL, reciprocal(ctx, src, dst, noop))
    op->u.reciprocal.src = src;
    op->u.reciprocal.dst = dst;
    op->u.reciprocal.noop = noop;
    return F8_OK;
}

static f8_status cap_add(f8_ctx *ctx, void *dst, const void *src, f8_dtype dtype, int64_t count)
{
    RECORD_OR_PASS(OP_ADD, add(ctx, dst, src, dtype, count))
    op->u.add.dst = dst;
    op->u.add.src = src;
    op->u.add.dtype = dtype;
    op->u.add.count = count;
    return F8_OK;
}

static f8_status cap_gemm(f8_ctx *ctx, const f8i_gemm_args *a)
{
    RECORD_OR_PASS(OP_GEMM, gemm(ctx, a))
    op->u.gemm = *a;
    return F8_OK;
}

static f8_status cap_scale_update(f8_ctx *ctx, const f8i_scale_update_args *a)
{
    RECORD_OR_PASS(OP_SCALE_UPDATE, scale_update(ctx, a))
    op->u.scale_update = *a;
    return F8_OK;
}

static f8_status cap_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *a)
{
    RECORD_OR_PASS(OP_NORM_FWD, norm_fwd(ctx, a))
    op->u.norm_fwd = *a;
    return F8_OK;
}

static f8_status cap_norm_bwd(f8_ctx *ctx, const f8i_norm_bwd_args *a)
{
    RECORD_OR_PASS(OP_NORM_BWD, norm_bwd(ctx, a))
    op->u.norm_bwd = *a;
    return F8_OK;
}

static f8_status cap_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *a)
{
    RECORD_OR_PASS(OP_ACT_FWD, act_fwd(ctx, a))
    op->u.act_fwd = *a;
    return F8_OK;
}

static f8_status cap_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *a)
{
    RECORD_OR_PASS(OP_ACT_BWD, act_bwd(ctx, a))
    op->u.act_bwd = *a;
    return F8_OK;
}

static f8_status cap_train_op(f8_ctx *ctx, int kind, const void *args, size_t args_size)
{
    RECORD_OR_PASS(OP_TRAIN, train_op(ctx, kind, args, args_size))
    op->u.train.kind = kind;
    op->u.train.size = args_size;
    op->u.train.args = malloc(args_size ? args_size : 1);
    if (!op->u.train.args) {
        op->kind = OP_FILL_F32; /* an empty record: nothing to free, replays as nothing */
        return spoil(ctx, f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "graph capture: out of host memory recording a "
                                                               "training op"));
    }
    if (args_size) memcpy(op->u.train.args, args, args_size);
    return F8_OK;
}

/* The real table with every entry that issues work or talks to the host
 * replaced; state_create and get_stream stay the real ones. */
static f8i_backend capture_table(const f8i_backend *real)
{
    f8i_backend t = *real;
    t.alloc = cap_alloc;
    t.free = cap_free;
    t.upload = cap_upload;
    t.download = cap_download;
    t.copy = cap_copy;
    t.memset_zero = cap_memset_zero;
    t.fill_f32 = cap_fill_f32;
    t.synchronize = cap_synchronize;
    t.cast = cap_cast;
    t.convert = cap_convert;
    t.transpose_u8 = cap_transpose_u8;
    t.reciprocal = cap_reciprocal;
    t.add = cap_add;
    t.gemm = cap_gemm;
    t.scale_update = cap_scale_update;
    t.norm_fwd = cap_norm_fwd;
    t.norm_bwd = cap_norm_bwd;
    t.act_fwd = cap_act_fwd;
    t.act_bwd = cap_act_bwd;
    t.train_op = cap_train_op;
    t.state_destroy = cap_state_destroy;
    t.set_stream = cap_set_stream;
    return t;
}

/* ------------------------------------------------------------------------ */
/* Begin, end, replay                                                        */
/* ------------------------------------------------------------------------ */

/* Leave capture mode, whatever happened: the real table and the launch
 * counter back, the CUDA capture ended (instantiated into *exec if keep),
 * the recorded ops handed to *ops (if keep; else freed), deferred frees
 * done, the state freed. Returns the CUDA end's status. */
static f8_status leave(f8_ctx *ctx, int keep, void **exec, rec_op **ops, size_t *n_ops)
{
    capture *c = cap(ctx);
    ctx->be = c->real;
    ctx->capturing = 0;
    ctx->counters.launches = c->launches;
    f8_status st = F8_OK;
    void *x = NULL;
    if (!c->record) st = f8i_cuda_graph_end(ctx, keep, &x);
    if (keep && exec) *exec = x;
    if (keep && ops) {
        *ops = c->ops;
        *n_ops = c->n_ops;
    } else {
        ops_free(c->ops, c->n_ops);
    }
    for (size_t i = 0; i < c->n_frees; i++) c->real->free(ctx, c->frees[i]);
    free(c->frees);
    free(c);
    ctx->graph_state = NULL;
    return st;
}

f8_status f8_graph_begin(f8_ctx *ctx)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (ctx->capturing)
        return f8i_error(ctx, F8_ERR_STATE, "f8_graph_begin: the ctx is already capturing (f8_graph_end that one first)");
    capture *c = (capture *)calloc(1, sizeof *c);
    if (!c) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_graph_begin: out of host memory");
    c->real = ctx->be;
    c->record = ctx->kind != F8_BACKEND_CUDA;
    c->table = capture_table(c->real);
    if (!c->record) {
        f8_status st = f8i_cuda_graph_begin(ctx);
        if (st != F8_OK) {
            free(c);
            return st;
        }
    }
    c->launches = ctx->counters.launches;
    ctx->graph_state = c;
    ctx->be = &c->table;
    ctx->capturing = 1;
    ctx->capture_error = F8_OK;
    return F8_OK;
}

f8_status f8_graph_end(f8_ctx *ctx, f8_graph **graph)
{
    if (graph) *graph = NULL;
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!ctx->capturing) return f8i_error(ctx, F8_ERR_STATE, "f8_graph_end: the ctx is not capturing (no f8_graph_begin)");
    const f8_status spoiled = ctx->capture_error;
    char why[sizeof cap(ctx)->why];
    snprintf(why, sizeof why, "%s", cap(ctx)->why);
    f8_graph *g = spoiled == F8_OK && graph ? (f8_graph *)calloc(1, sizeof *g) : NULL;
    const int keep = g != NULL;
    void *exec = NULL;
    rec_op *ops = NULL;
    size_t n_ops = 0;
    f8_status st = leave(ctx, keep, &exec, &ops, &n_ops);
    ctx->capture_error = F8_OK;

    if (spoiled != F8_OK)
        return f8i_error(ctx, spoiled, "f8_graph_end: the capture was spoiled and is abandoned: %s",
                         why[0] ? why : "an allocation was refused (create objects and run one step eagerly "
                                        "before f8_graph_begin)");
    if (!graph) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_graph_end: graph (the output) is NULL; capture abandoned");
    if (!g) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_graph_end: out of host memory; capture abandoned");
    if (st != F8_OK) { /* the CUDA end failed: message set, nothing to keep */
        ops_free(ops, n_ops);
        free(g);
        return st;
    }
    g->ctx = ctx;
    g->exec = exec;
    g->ops = ops;
    g->n_ops = n_ops;
    *graph = g;
    return F8_OK;
}

/* Run one recorded op through the real table (CPU replay). */
static f8_status run_op(f8_ctx *ctx, const rec_op *op)
{
    const f8i_backend *be = ctx->be;
    switch (op->kind) {
    case OP_COPY: return be->copy(ctx, op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
    case OP_MEMSET_ZERO: return be->memset_zero(ctx, op->u.copy.dst, op->u.copy.bytes);
    case OP_FILL_F32: return be->fill_f32(ctx, op->u.fill.dst, op->u.fill.value, op->u.fill.count);
    case OP_CAST: return be->cast(ctx, &op->u.cast);
    case OP_CONVERT:
        return be->convert(ctx, op->u.convert.src, op->u.convert.src_dtype, op->u.convert.scale_inv,
                           op->u.convert.dst, op->u.convert.dst_dtype, op->u.convert.count);
    case OP_TRANSPOSE_U8:
        return be->transpose_u8(ctx, op->u.transpose.src, op->u.transpose.dst, op->u.transpose.rows,
                                op->u.transpose.cols, op->u.transpose.noop);
    case OP_RECIPROCAL:
        return be->reciprocal(ctx, op->u.reciprocal.src, op->u.reciprocal.dst, op->u.reciprocal.noop);
    case OP_ADD: return be->add(ctx, op->u.add.dst, op->u.add.src, op->u.add.dtype, op->u.add.count);
    case OP_GEMM: return be->gemm(ctx, &op->u.gemm);
    case OP_SCALE_UPDATE: return be->scale_update(ctx, &op->u.scale_update);
    case OP_NORM_FWD: return be->norm_fwd(ctx, &op->u.norm_fwd);
    case OP_NORM_BWD: return be->norm_bwd(ctx, &op->u.norm_bwd);
    case OP_ACT_FWD: return be->act_fwd(ctx, &op->u.act_fwd);
    case OP_ACT_BWD: return be->act_bwd(ctx, &op->u.act_bwd);
    case OP_TRAIN: return be->train_op(ctx, op->u.train.kind, op->u.train.args, op->u.train.size);
    }
    return f8i_error(ctx, F8_ERR_STATE, "f8_graph_replay: recorded op of unknown kind %d", (int)op->kind);
}

f8_status f8_graph_replay(f8_graph *graph)
{
    if (!graph) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = graph->ctx;
    if (ctx->capturing)
        return spoil(ctx, f8i_error(ctx, F8_ERR_STATE,
                                    "f8_graph_replay: its ctx is capturing another graph; refused, and that capture "
                                    "is spoiled (f8_graph_end fails)"));
    if (ctx->kind == F8_BACKEND_CUDA) return graph->exec ? f8i_cuda_graph_launch(ctx, graph->exec) : F8_OK;
    for (size_t i = 0; i < graph->n_ops; i++) {
        f8_status st = run_op(ctx, &graph->ops[i]);
        if (st != F8_OK) return st;
    }
    return F8_OK;
}

void f8_graph_destroy(f8_graph *graph)
{
    if (!graph) return;
    f8i_cuda_graph_destroy(graph->exec);
    ops_free(graph->ops, graph->n_ops);
    free(graph);
}

int f8_ctx_capturing(const f8_ctx *ctx) { return ctx ? ctx->capturing : 0; }
