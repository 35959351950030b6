/*
 * attention.c — f8_attention, causal multi-head self-attention: the public
 * entry points, written once above the backend table.
 *
 * Design note. This file validates, sizes memory and carves it; the math is
 * the backends' (attention.h has the formulas, cpu/attention.c the reference,
 * cuda/attention*.cu the flash kernels). What outlives a call is the saved
 * state: L (FP32 [B·nh, S]) and O, a copy of y, sized for max_batch and
 * max_seq (F8_MEM_SAVED_ACTIVATIONS), plus host fields naming the forward
 * (B, S, the caller's qkv pointer) that the backward reads. q, k and v are
 * not copied: the caller keeps qkv until backward (f8.h says so). O is: the
 * forward writes it beside y (T·C more bytes written, a few microseconds a
 * layer), so the backward does not depend on the caller keeping y too. What
 * lives within a call is the op's workspace (f8i_attn_workspace: measured
 * at create for max_batch, max_seq and reserved in ctx->scratch, placed per
 * call for the actual B, S and handed to the op as pointers in its args):
 * the backward's row sums D and the CPU reference's two row buffers. Nothing is
 * O(S²) any more, and no backend keeps per-object state.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "train/attention.h"

struct f8_attention {
    f8_ctx *ctx;
    f8_attention_config cfg;
    float scale;      /* c = 1/sqrtf(head_dim) */
    float scale_log2; /* c2 = c·log2(e) */
};

struct f8_attention_saved {
    f8_attention *owner;
    f8_ctx *ctx;         /* destroy needs no owner: it may go first */
    void *mem;           /* one allocation: lse, then o (attention.h) */
    float *lse;          /* (max_batch·nh·max_seq) FP32; used as (B·nh, S) */
    void *o;             /* (max_batch·max_seq, C) dtype; used as (B·S, C); NULL with output_kept */
    const void *y;       /* the last forward's y (read by the backward with output_kept) */
    const void *qkv;     /* the forward's qkv (the caller's) */
    int64_t batch, seq;
    int filled;          /* a forward has written it */
};

f8_attention_config f8_attention_config_default(int64_t n_head, int64_t head_dim, int64_t max_batch, int64_t max_seq)
{
    f8_attention_config c;
    c.n_head = n_head;
    c.head_dim = head_dim;
    c.max_batch = max_batch;
    c.max_seq = max_seq;
    c.dtype = F8_DTYPE_BF16;
    c.output_kept = 0;
    return c;
}


static f8_status config_check(f8_ctx *ctx, const f8_attention_config *c)
{
    const char *fn = "f8_attention_create";
    if (c->n_head < 1 || c->head_dim < 1 || c->n_head > (1 << 16) || c->head_dim > (1 << 16) ||
        c->n_head * c->head_dim > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: n_head %lld and head_dim %lld must be >= 1 with n_head·head_dim <= 2^24",
                         fn, (long long)c->n_head, (long long)c->head_dim);
    if (c->max_batch < 1 || c->max_seq < 1 || c->max_batch > (1 << 24) || c->max_seq > (1 << 20))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: max_batch %lld must be in [1, 2^24] and max_seq %lld in [1, 2^20]", fn,
                         (long long)c->max_batch, (long long)c->max_seq);
    if (c->output_kept != 0 && c->output_kept != 1)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: output_kept %d must be 0 or 1", fn, c->output_kept);
    /* The saved state grows as T·(nh·4 + C·es): refuse what no address space
     * holds; B·nh is a CUDA grid dimension (< 2^31). */
    const double tokens = (double)c->max_batch * (double)c->max_seq;
    const double saved = tokens * ((double)c->n_head * 4.0 + (double)(c->n_head * c->head_dim) * 4.0);
    if (saved > 0x1p40 || (double)c->max_batch * (double)c->n_head > 0x1p31 - 1)
        return f8i_error(ctx, F8_ERR_SHAPE,
                         "%s: max_batch %lld · max_seq %lld tokens with n_head %lld is too large (saved state of %.3g bytes, "
                         "or max_batch · n_head >= 2^31)",
                         fn, (long long)c->max_batch, (long long)c->max_seq, (long long)c->n_head, saved);
    if (!f8i_dtype_is_hp(c->dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: dtype must be fp32 or bf16, not %s", fn, f8_dtype_name(c->dtype));
    return F8_OK;
}

/* Object creation while capturing: refused, and the capture spoiled (as f8i_alloc does). */
static f8_status refuse_capturing(f8_ctx *ctx, const char *fn)
{
    if (ctx->capture_error == F8_OK) ctx->capture_error = F8_ERR_STATE;
    return f8i_error(ctx, F8_ERR_STATE, "%s: not allowed while capturing a graph (create objects before f8_graph_begin)", fn);
}

f8_status f8_attention_create(f8_ctx *ctx, const f8_attention_config *config, f8_attention **out)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_create: attention (the output) is NULL");
    *out = NULL;
    if (!config) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_create: config is NULL");
    if (ctx->capturing) return refuse_capturing(ctx, "f8_attention_create");
    f8_status st = config_check(ctx, config);
    if (st != F8_OK) return st;

    f8_attention *a = (f8_attention *)calloc(1, sizeof *a);
    if (!a) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_attention_create: out of host memory");
    a->ctx = ctx;
    a->cfg = *config;
    a->scale = 1.0f / sqrtf((float)config->head_dim);
    a->scale_log2 = a->scale * 1.44269504088896341f; /* one FP32 rounding: attention.h's c2 */
    st = f8i_scratch_reserve(ctx, f8i_attn_workspace(NULL, config->max_batch * config->max_seq, config->max_seq,
                                                       config->n_head, NULL, NULL));
    if (st != F8_OK) {
        free(a);
        return st;
    }
    *out = a;
    return F8_OK;
}

const f8_attention_config *f8i_attention_config(const f8_attention *a) { return &a->cfg; }
f8_ctx *f8i_attention_ctx(const f8_attention *a) { return a->ctx; }

void f8_attention_destroy(f8_attention *a)
{
    if (!a) return;
    if (a->ctx->capturing) { /* as a free during a capture (graph.c): the capture is spoiled */
        if (a->ctx->capture_error == F8_OK) a->ctx->capture_error = F8_ERR_STATE;
        (void)f8i_error(a->ctx, F8_ERR_STATE, "f8_attention_destroy while capturing a graph: the capture is spoiled");
    }
    free(a);
}

f8_status f8_attention_saved_create(f8_attention *a, f8_attention_saved **out)
{
    if (!a) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = a->ctx;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_saved_create: saved (the output) is NULL");
    *out = NULL;
    if (ctx->capturing) return refuse_capturing(ctx, "f8_attention_saved_create");
    f8_attention_saved *s = (f8_attention_saved *)calloc(1, sizeof *s);
    if (!s) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_attention_saved_create: out of host memory");
    const f8_attention_config *c = &a->cfg;
    const int64_t T = c->max_batch * c->max_seq;
    /* with output_kept the backward reads the caller's y: L alone */
    const size_t bytes = c->output_kept ? f8i_attn_lse_bytes(T, c->n_head)
                                        : f8i_attn_saved_bytes(T, c->n_head, c->head_dim, c->dtype);
    f8_status st = f8i_alloc(ctx, F8_MEM_SAVED_ACTIVATIONS, NULL, bytes, &s->mem);
    if (st != F8_OK) {
        free(s);
        return st;
    }
    s->lse = (float *)s->mem;
    s->o = c->output_kept ? NULL : (unsigned char *)s->mem + f8i_attn_lse_bytes(T, c->n_head);
    s->owner = a;
    s->ctx = ctx;
    *out = s;
    return F8_OK;
}

void f8_attention_saved_destroy(f8_attention_saved *s)
{
    if (!s) return;
    f8i_free(s->ctx, s->mem);
    free(s);
}

/* t exists, has the config dtype and shape [rows, cols]. */
static f8_status check_act(f8_attention *a, const f8_tensor *t, const char *name, int64_t rows, int64_t cols)
{
    f8_ctx *ctx = a->ctx;
    f8_status st = f8i_check_tensor(ctx, t, name);
    if (st != F8_OK) return st;
    if (t->dtype != a->cfg.dtype)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s is %s; this attention was created for %s", name, f8_dtype_name(t->dtype),
                         f8_dtype_name(a->cfg.dtype));
    if (t->rows != rows || t->cols != cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s is [%lld, %lld], expected [%lld, %lld]", name, (long long)t->rows,
                         (long long)t->cols, (long long)rows, (long long)cols);
    return F8_OK;
}

/* Do the byte ranges [p, p + n) and [q, q + m) overlap? */
static int overlap(const void *p, size_t n, const void *q, size_t m)
{
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return n && m && a < b + m && b < a + n;
}

/* Place one call's workspace (attention.h) in the ctx scratch reserved at
 * create: D, then the two rows. */
static void place(f8_attention *a, int64_t batch, int64_t seq, float **d, float **rows)
{
    (void)f8i_attn_workspace(a->ctx->scratch, batch * seq, seq, a->cfg.n_head, d, rows);
}

f8_status f8_attention_forward(f8_attention *a, const f8_tensor *qkv, int64_t batch, int64_t seq, f8_tensor *y,
                               f8_attention_saved *saved)
{
    if (!a) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = a->ctx;
    const f8_attention_config *c = &a->cfg;
    const int64_t C = c->n_head * c->head_dim;
    if (batch < 0 || batch > c->max_batch || seq < 0 || seq > c->max_seq)
        return f8i_error(ctx, F8_ERR_SHAPE,
                         "f8_attention_forward: batch %lld must be in [0, max_batch %lld] and seq %lld in [0, max_seq %lld]",
                         (long long)batch, (long long)c->max_batch, (long long)seq, (long long)c->max_seq);
    const int64_t T = batch * seq;
    f8_status st = check_act(a, qkv, "f8_attention_forward: qkv", T, 3 * C);
    if (st == F8_OK) st = check_act(a, y, "f8_attention_forward: y", T, C);
    if (st != F8_OK) return st;
    if (saved && saved->owner != a)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_forward: saved belongs to another attention");
    const size_t es = f8_dtype_size(c->dtype);
    if (overlap(qkv->data, (size_t)(T * 3 * C) * es, y->data, (size_t)(T * C) * es))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_forward: y overlaps qkv");

    if (T > 0) {
        f8i_attn_fwd_args args;
        memset(&args, 0, sizeof args); /* recorded byte for byte while capturing */
        args.batch = batch;
        args.seq = seq;
        args.n_head = c->n_head;
        args.head_dim = c->head_dim;
        args.dtype = c->dtype;
        args.scale = a->scale;
        args.scale_log2 = a->scale_log2;
        args.qkv = qkv->data;
        args.y = y->data;
        args.o = saved ? saved->o : NULL;
        args.lse = saved ? saved->lse : NULL;
        place(a, batch, seq, NULL, &args.rows);
        st = f8i_op_attn_fwd(ctx, &args);
        if (st != F8_OK) return st;
    }
    if (saved) {
        saved->qkv = qkv->data;
        saved->y = y->data;
        saved->batch = batch;
        saved->seq = seq;
        saved->filled = 1;
    }
    return F8_OK;
}

f8_status f8_attention_backward(f8_attention *a, f8_attention_saved *saved, const f8_tensor *dy, f8_tensor *dqkv)
{
    if (!a) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = a->ctx;
    const f8_attention_config *c = &a->cfg;
    if (!saved) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward: saved is NULL");
    if (saved->owner != a)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward: saved belongs to another attention");
    if (!saved->filled)
        return f8i_error(ctx, F8_ERR_STATE, "f8_attention_backward: saved holds no forward (pass it to f8_attention_forward first)");
    const int64_t C = c->n_head * c->head_dim, T = saved->batch * saved->seq;
    f8_status st = check_act(a, dy, "f8_attention_backward: dy", T, C);
    if (st == F8_OK) st = check_act(a, dqkv, "f8_attention_backward: dqkv", T, 3 * C);
    if (st != F8_OK) return st;
    const size_t es = f8_dtype_size(c->dtype);
    if (overlap(dqkv->data, (size_t)(T * 3 * C) * es, saved->qkv, (size_t)(T * 3 * C) * es))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward: dqkv overlaps the forward's qkv");
    if (overlap(dqkv->data, (size_t)(T * 3 * C) * es, dy->data, (size_t)(T * C) * es))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward: dqkv overlaps dy");
    if (c->output_kept && overlap(dqkv->data, (size_t)(T * 3 * C) * es, saved->y, (size_t)(T * C) * es))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward: dqkv overlaps the forward's y (output_kept)");
    if (T == 0) return F8_OK;

    f8i_attn_bwd_args args;
    memset(&args, 0, sizeof args);
    args.batch = saved->batch;
    args.seq = saved->seq;
    args.n_head = c->n_head;
    args.head_dim = c->head_dim;
    args.dtype = c->dtype;
    args.scale = a->scale;
    args.scale_log2 = a->scale_log2;
    args.qkv = saved->qkv;
    args.o = c->output_kept ? saved->y : saved->o; /* the caller's y, or the copy of it */
    args.lse = saved->lse;
    args.dy = dy->data;
    args.dqkv = dqkv->data;
    place(a, saved->batch, saved->seq, &args.d, &args.rows);
    return f8i_op_attn_bwd(ctx, &args);
}
