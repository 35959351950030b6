/*
 * graph.c — f8 graphs: capture a sequence of f8 calls once, replay it.
 *
 * Design note. f8_graph_begin points ctx->be at a capture table built from
 * the real one (which the capture state keeps). Modules and objects never
 * know: they call the f8i_op_* entries (core/ops.h) as always.
 *  - Work ops (everything that puts work on the stream: the (kind, args)
 *    pairs of backend.h's F8I_OP_LIST, all through the one `run` entry) are
 *    recorded on a CPU ctx: the kind and a copy of the args struct are
 *    appended to a list, with no per-op code. Every argument is a pointer to
 *    backend memory or a scalar, so replaying the list through the real
 *    table does exactly what the eager calls would have done, reading the
 *    device-side values (scales, noop flag) of the moment. On a CUDA ctx
 *    they go straight to the real `run` while the stream is in capture mode
 *    (cuda/graph.cu): the stream records the launches; an op that fails
 *    spoils the capture.
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
#include "core/ops.h"

/* One recorded work op (CPU capture): its kind and a heap copy of its args
 * struct (f8i_op_args_size(kind) bytes). */
typedef struct rec_op {
    f8i_op_kind kind;
    void *args;
} rec_op;

/* Free the recorded ops and their args copies. */
static void ops_free(rec_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) free(ops[i].args);
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

f8_status f8i_capture_spoil(f8_ctx *ctx, f8_status st) { return ctx->capturing ? spoil(ctx, st) : st; }

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

/* Every work op: on CUDA it goes to the real backend while the stream
 * captures (a failure spoils the capture); on the CPU its kind and a copy of
 * its args are appended to the list. */
static f8_status cap_run(f8_ctx *ctx, f8i_op_kind kind, const void *args)
{
    capture *c = cap(ctx);
    if (!c->record) {
        const f8_status st = c->real->run(ctx, kind, args);
        return st == F8_OK ? st : spoil(ctx, st);
    }
    const size_t size = f8i_op_args_size(kind);
    if (size == 0)
        return spoil(ctx, f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "graph capture: unknown op kind %d", (int)kind));
    if (c->n_ops == c->cap_ops) {
        size_t n = c->cap_ops ? 2 * c->cap_ops : 64;
        rec_op *t = (rec_op *)realloc(c->ops, n * sizeof *t);
        if (!t) goto oom;
        c->ops = t;
        c->cap_ops = n;
    }
    void *copy = malloc(size);
    if (!copy) goto oom;
    memcpy(copy, args, size);
    c->ops[c->n_ops].kind = kind;
    c->ops[c->n_ops].args = copy;
    c->n_ops++;
    return F8_OK;
oom:
    return spoil(ctx, f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "graph capture: out of host memory recording op %zu",
                                c->n_ops));
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
    t.synchronize = cap_synchronize;
    t.run = cap_run;
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
        F8I_TRY(ctx->be->run(ctx, graph->ops[i].kind, graph->ops[i].args));
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
