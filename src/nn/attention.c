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
 *
 * FP8 (config.fp8; attention.h's note has the chain). Create registers three
 * forward slots in the ctx registry, QKV, S and O, so the delayed update, the
 * amax all-reduce and telemetry take them as any module's (a create that
 * fails hands them back). The forward is two ops: the cast of qkv into the
 * saved codes (with their own scale_inv, written by the cast: the one rule),
 * then the FP8 forward op, which reads the S and O slots' scale and
 * scale_inv by pointer (they change on the device every step; under
 * current scaling O8 takes the QKV slot's scale instead, fp8_args). The
 * backward is two ops too: the codes dequantized into the workspace, then
 * the BF16 backward op on them. The caller's qkv is not read after the
 * forward.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/numerics.h"
#include "core/ops.h"
#include "nn/attention.h"

enum { SLOT_QKV = 0, SLOT_S = 1, SLOT_O = 2, N_SLOTS = 3 };
enum { BSLOT_DO = 0, BSLOT_DP = 1, BSLOT_DQKV = 2 }; /* the backward's, with fp8_backward */

struct f8_attention {
    f8_ctx *ctx;
    f8_attention_config cfg;
    float scale;      /* c = 1/sqrtf(head_dim) */
    float scale_log2; /* c2 = c·log2(e) */
    f8_slot slots[N_SLOTS]; /* FP8 only: forward QKV, S, O */
    f8_slot bslots[N_SLOTS]; /* fp8_backward only: backward dO, dP, dQKV */
};

struct f8_attention_saved {
    f8_attention *owner;
    f8_ctx *ctx;         /* destroy needs no owner: it may go first */
    void *mem;           /* one allocation: f8i_attn_saved_layout */
    float *lse;          /* (max_batch·nh·max_seq) FP32; used as (B·nh, S) */
    void *o;             /* (max_batch·max_seq, C) dtype; used as (B·S, C); NULL with output_kept */
    float *qkv_sinv;     /* FP8: (1) the codes' scale_inv, written by their cast */
    uint8_t *qkv8;       /* FP8: (max_batch·max_seq, 3C) E4M3; used as (B·S, 3C) */
    float *o8_sinv;      /* FP8 backward, delayed scaling: (1) O8's descale */
    uint8_t *o8;         /* FP8 backward, delayed scaling: (max_batch·max_seq, C) E4M3 O8 */
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
    c.fp8 = 0;
    c.n_kv_head = n_head;
    c.fp8_backward = 0;
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
    if (c->fp8 != 0 && c->fp8 != 1)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: fp8 %d must be 0 or 1", fn, c->fp8);
    if ((c->fp8_backward != 0 && c->fp8_backward != 1) || (c->fp8_backward && !c->fp8))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: fp8_backward %d must be 0 or 1, and 1 needs fp8 = 1 (fp8 is %d)",
                         fn, c->fp8_backward, c->fp8);
    if (c->n_kv_head < 0 || (c->n_kv_head > 0 && c->n_head % c->n_kv_head != 0))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: n_kv_head %lld must divide n_head %lld (0: n_head)", fn,
                         (long long)c->n_kv_head, (long long)c->n_head);
    if (c->fp8 && c->dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: fp8 attention takes bf16 qkv and y, not %s", fn, f8_dtype_name(c->dtype));
    /* The fused graph takes one scale per tensor (TE's fp8_dpa: DelayedScaling
     * or Float8CurrentScaling); block and row-wise scales need MXFP8
     * attention, which Hopper's cuDNN has not. */
    if (c->fp8 && ctx->recipe.kind != F8_RECIPE_DELAYED && ctx->recipe.kind != F8_RECIPE_CURRENT)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED,
                         "%s: fp8 attention takes per-tensor scaling (the ctx recipe's delayed or current), not %s "
                         "(one scale per block or row has no fused FP8 attention here)",
                         fn, f8_recipe_kind_name(ctx->recipe.kind));
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
    F8I_TRY(config_check(ctx, config));

    f8_attention *a = (f8_attention *)calloc(1, sizeof *a);
    if (!a) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_attention_create: out of host memory");
    a->ctx = ctx;
    a->cfg = *config;
    if (a->cfg.n_kv_head == 0) a->cfg.n_kv_head = config->n_head; /* 0: multi-head */
    a->scale = 1.0f / sqrtf((float)config->head_dim);
    a->scale_log2 = a->scale * 1.44269504088896341f; /* one FP32 rounding: attention.h's c2 */
    const f8i_slot_mark mark = f8i_slots_mark(ctx);
    f8_status st = F8_OK;
    if (config->fp8) st = f8_ctx_slots_create(ctx, F8_DIR_FORWARD, N_SLOTS, a->slots);
    if (st == F8_OK && config->fp8_backward) st = f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, N_SLOTS, a->bslots);
    if (st == F8_OK)
        st = f8i_scratch_reserve(ctx, f8i_attn_workspace(NULL, config->max_batch * config->max_seq, config->max_seq,
                                                           config->n_head, config->head_dim, config->fp8,
                                                           config->fp8_backward, NULL));
    if (st != F8_OK) {
        f8i_slots_rollback(ctx, mark);
        free(a);
        return st;
    }
    *out = a;
    return F8_OK;
}

f8_status f8_attention_fp8_slots(const f8_attention *a, f8_slot slots[3])
{
    if (!a) return F8_ERR_INVALID_ARGUMENT;
    if (!slots) return f8i_error(a->ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_fp8_slots: slots is NULL");
    if (!a->cfg.fp8)
        return f8i_error(a->ctx, F8_ERR_STATE, "f8_attention_fp8_slots: this attention was created with fp8 = 0");
    memcpy(slots, a->slots, sizeof a->slots);
    return F8_OK;
}

f8_status f8_attention_fp8_backward_slots(const f8_attention *a, f8_slot slots[3])
{
    if (!a) return F8_ERR_INVALID_ARGUMENT;
    if (!slots) return f8i_error(a->ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_fp8_backward_slots: slots is NULL");
    if (!a->cfg.fp8_backward)
        return f8i_error(a->ctx, F8_ERR_STATE,
                         "f8_attention_fp8_backward_slots: this attention was created with fp8_backward = 0");
    memcpy(slots, a->bslots, sizeof a->bslots);
    return F8_OK;
}

f8_status f8_attention_query_path(f8_attention *a, int64_t batch, int64_t seq, int backward, f8_attention_path *path)
{
    if (!a) return F8_ERR_INVALID_ARGUMENT;
    if (!path) return f8i_error(a->ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_query_path: path is NULL");
    if (batch < 1 || batch > a->cfg.max_batch || seq < 1 || seq > a->cfg.max_seq)
        return f8i_error(a->ctx, F8_ERR_SHAPE, "f8_attention_query_path: batch %lld, seq %lld outside [1, %lld], [1, %lld]",
                         (long long)batch, (long long)seq, (long long)a->cfg.max_batch, (long long)a->cfg.max_seq);
    if (backward != 0 && backward != 1)
        return f8i_error(a->ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_query_path: backward is %d, not 0 or 1", backward);
    /* An FP8 forward asks for cuDNN's FP8 graph (dtype E4M3: attention_cudnn_fp8.cu takes it where
     * the loaded cuDNN computes it right); its backward is the BF16 one unless fp8_backward. */
    int takes = 0;
    const f8_dtype dt = a->cfg.fp8 && (!backward || a->cfg.fp8_backward) ? F8_DTYPE_E4M3 : a->cfg.dtype;
    F8I_TRY(f8i_cuda_attn_takes(a->ctx, dt, batch, seq, a->cfg.n_head, a->cfg.n_kv_head, a->cfg.head_dim, backward,
                                &takes));
    *path = takes ? F8_ATTENTION_PATH_CUDNN : F8_ATTENTION_PATH_OWN;
    return F8_OK;
}

void f8i_attention_saved_parts(const f8_attention_saved *s, struct f8i_attn_saved_at *at)
{
    at->lse = s->lse, at->o = s->o, at->qkv_scale_inv = s->qkv_sinv, at->qkv8 = s->qkv8;
    at->o8_scale_inv = s->o8_sinv, at->o8 = s->o8;
}

/* The forward keeps O8 for the backward: an FP8 backward under delayed
 * scaling (under current scaling its D takes the BF16 o, the dequantized
 * O8, as TE's default NVTE_DPA_FP8CS_O_in_F16 does). */
static int keeps_o8(const f8_attention *a) { return a->cfg.fp8_backward && !f8i_recipe_current(a->ctx); }

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
    /* with output_kept the backward reads the caller's y: no copy of it */
    const size_t bytes =
        f8i_attn_saved_layout(NULL, T, c->n_head, c->head_dim, c->dtype, c->output_kept, c->fp8, keeps_o8(a), NULL);
    f8_status st = f8i_alloc(ctx, F8_MEM_SAVED_ACTIVATIONS, NULL, bytes, &s->mem);
    if (st != F8_OK) {
        free(s);
        return st;
    }
    f8i_attn_saved_at at = {NULL, NULL, NULL, NULL, NULL, NULL};
    (void)f8i_attn_saved_layout(s->mem, T, c->n_head, c->head_dim, c->dtype, c->output_kept, c->fp8, keeps_o8(a), &at);
    s->lse = at.lse, s->o = at.o, s->qkv_sinv = at.qkv_scale_inv, s->qkv8 = at.qkv8;
    s->o8_sinv = at.o8_scale_inv, s->o8 = at.o8;
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
    F8I_TRY(f8i_check_tensor(ctx, t, name));
    if (t->dtype != a->cfg.dtype)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s is %s; this attention was created for %s", name, f8_dtype_name(t->dtype),
                         f8_dtype_name(a->cfg.dtype));
    if (t->rows != rows || t->cols != cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s is [%lld, %lld], expected [%lld, %lld]", name, (long long)t->rows,
                         (long long)t->cols, (long long)rows, (long long)cols);
    return F8_OK;
}

/* The width of a qkv row: q of n_head heads, k and v of n_kv_head each. */
static int64_t qkv_width(const f8_attention_config *c) { return (c->n_head + 2 * c->n_kv_head) * c->head_dim; }

/* Do the byte ranges [p, p + n) and [q, q + m) overlap? */
static int overlap(const void *p, size_t n, const void *q, size_t m)
{
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return n && m && a < b + m && b < a + n;
}

/* Place one call's workspace (attention.h) in the ctx scratch reserved at create. */
static f8i_attn_ws place(f8_attention *a, int64_t batch, int64_t seq)
{
    f8i_attn_ws w;
    (void)f8i_attn_workspace(a->ctx->scratch, batch * seq, seq, a->cfg.n_head, a->cfg.head_dim, a->cfg.fp8,
                             a->cfg.fp8_backward, &w);
    return w;
}

/* The FP8 forward's first op: qkv [T, 3C] to E4M3 codes with the QKV slot's
 * scale, its amax into the slot's accumulator, the codes' scale_inv beside
 * them (and the telemetry counts, if on). */
static f8_status cast_qkv(f8_attention *a, const void *qkv, int64_t T, uint8_t *codes, float *scale_inv)
{
    f8_ctx *ctx = a->ctx;
    f8i_cast_args c;
    memset(&c, 0, sizeof c); /* recorded byte for byte while capturing */
    c.src = qkv;
    c.src_dtype = a->cfg.dtype;
    c.rows = T;
    c.cols = qkv_width(&a->cfg); /* GQA: (nh + 2G)·hd */
    c.out_dtype = F8_DTYPE_E4M3;
    c.out = codes;
    c.scale = f8i_slot_scale(ctx, a->slots[SLOT_QKV]);
    /* current scaling: the amax pass sets the slot's scale from this qkv first (and records its amax) */
    F8I_TRY(f8i_slot_prepare(ctx, a->slots[SLOT_QKV], F8_DTYPE_E4M3, qkv, a->cfg.dtype, T * c.cols, NULL, 1, &c.amax));
    c.scale_inv = scale_inv;
    c.stats = f8i_slot_stats(ctx, a->slots[SLOT_QKV]);
    return f8i_op_cast(ctx, &c);
}

/* The FP8 fields of a forward's args: the slots' pointers, resolved per
 * call (registering slots may move the buffer). */
static void fp8_args(f8_attention *a, f8i_attn_fwd_args *args, const float *qkv_sinv)
{
    f8_ctx *ctx = a->ctx;
    const f8_slot s = a->slots[SLOT_S], o = a->slots[SLOT_O];
    args->fp8 = 1;
    args->qkv_scale_inv = qkv_sinv;
    args->s_scale = f8i_slot_scale(ctx, s);
    args->s_scale_inv = ctx->dir[F8_DIR_FORWARD].scale_inv + s.index;
    args->s_amax = f8i_slot_amax(ctx, s);
    args->o_amax = f8i_slot_amax(ctx, o);
    if (f8i_recipe_current(ctx)) {
        /* Both scales are known before the call, from this call's values.
         * S: P of query 0 is exactly 1 in every causal call and P <= 1
         * everywhere, so S's amax is 1. O: P's rows are convex weights, so
         * |O| <= max|v| <= amax(qkv), and cast_qkv's amax pass has just set
         * the QKV slot's scale from that amax: O8 takes it, and the codes'
         * scale_inv (the cast's 1/it) dequantizes O8. P8's roundings can
         * lift a row's weights a few percent over 1; the E4M3 conversion
         * saturates there (satfinite), never overflows. (TE's form, O in
         * BF16, has no Hopper engine in cuDNN: docs/FP8_ATTENTION.md.) The
         * O slot's scale is not read; it records O's amax only. */
        args->s_scale_now = f8i_current_scale(1.0f, 1.0f, f8i_scaled_max(ctx, F8_DTYPE_E4M3),
                                              ctx->recipe.power_2_scales);
        args->o_scale = f8i_slot_scale(ctx, a->slots[SLOT_QKV]);
        args->o_scale_inv = qkv_sinv;
        return;
    }
    args->o_scale = f8i_slot_scale(ctx, o);
    args->o_scale_inv = ctx->dir[F8_DIR_FORWARD].scale_inv + o.index;
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
    const int64_t T = batch * seq, W = qkv_width(c);
    F8I_TRY(check_act(a, qkv, "f8_attention_forward: qkv", T, W));
    F8I_TRY(check_act(a, y, "f8_attention_forward: y", T, C));
    if (saved && saved->owner != a)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_forward: saved belongs to another attention");
    const size_t es = f8_dtype_size(c->dtype);
    if (overlap(qkv->data, (size_t)(T * W) * es, y->data, (size_t)(T * C) * es))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_forward: y overlaps qkv");

    if (T > 0) {
        f8i_attn_fwd_args args;
        memset(&args, 0, sizeof args); /* recorded byte for byte while capturing */
        args.batch = batch;
        args.seq = seq;
        args.n_head = c->n_head;
        args.head_dim = c->head_dim;
        args.n_kv_head = c->n_kv_head;
        args.dtype = c->dtype;
        args.scale = a->scale;
        args.scale_log2 = a->scale_log2;
        args.qkv = qkv->data;
        args.y = y->data;
        args.o = saved ? saved->o : NULL;
        args.lse = saved ? saved->lse : NULL;
        const f8i_attn_ws w = place(a, batch, seq);
        args.rows = w.rows;
        if (c->fp8) { /* the codes go to the saved state, or (inference) to the workspace */
            uint8_t *codes = saved ? saved->qkv8 : (uint8_t *)w.qkv_hp;
            float *sinv = saved ? saved->qkv_sinv : w.dq_infer;
            F8I_TRY(cast_qkv(a, qkv->data, T, codes, sinv));
            args.qkv = codes;
            fp8_args(a, &args, sinv);
            if (saved && saved->o8) args.o8 = saved->o8, args.o8_scale_inv = saved->o8_sinv;
        }
        F8I_TRY(f8i_op_attn_fwd(ctx, &args));
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

/* The FP8 backward's two ops (attention.h's FP8 backward chain): dy cast to
 * dO8 in the backward format with the dO slot's scale (current scaling:
 * its amax pass first), then the op, reading every scale by pointer. */
static f8_status fp8_backward(f8_attention *a, const f8_attention_saved *saved, const f8_tensor *dy, f8i_attn_bwd_args *args,
                              const f8i_attn_ws *w)
{
    f8_ctx *ctx = a->ctx;
    const int64_t T = saved->batch * saved->seq, C = a->cfg.n_head * a->cfg.head_dim;
    const f8_slot sdo = a->bslots[BSLOT_DO], sdp = a->bslots[BSLOT_DP], sg = a->bslots[BSLOT_DQKV];
    const f8_dtype gd = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);
    f8i_cast_args c;
    memset(&c, 0, sizeof c); /* recorded byte for byte while capturing */
    c.src = dy->data;
    c.src_dtype = a->cfg.dtype;
    c.rows = T;
    c.cols = C;
    c.out_dtype = gd;
    c.out = w->do8;
    c.scale = f8i_slot_scale(ctx, sdo);
    F8I_TRY(f8i_slot_prepare(ctx, sdo, gd, dy->data, a->cfg.dtype, T * C, NULL, 1, &c.amax));
    c.scale_inv = w->do_scale_inv;
    c.stats = f8i_slot_stats(ctx, sdo);
    F8I_TRY(f8i_op_cast(ctx, &c));
    float *finv = ctx->dir[F8_DIR_FORWARD].scale_inv, *binv = ctx->dir[F8_DIR_BACKWARD].scale_inv;
    args->fp8 = 1;
    args->grad_dtype = gd;
    args->qkv = saved->qkv8;
    args->qkv_scale_inv = saved->qkv_sinv;
    args->o8 = saved->o8;
    args->o8_scale_inv = saved->o8_sinv;
    args->do8 = w->do8;
    args->do_scale_inv = w->do_scale_inv;
    args->s_scale = f8i_slot_scale(ctx, a->slots[SLOT_S]);
    args->s_scale_inv = finv + a->slots[SLOT_S].index;
    args->dp_scale = f8i_slot_scale(ctx, sdp);
    args->dp_scale_inv = binv + sdp.index;
    if (!f8i_recipe_current(ctx)) { /* current scaling: dqkv leaves unquantized (TE: dQKV in F16) */
        args->dqkv_scale = f8i_slot_scale(ctx, sg);
        args->dqkv_scale_inv = binv + sg.index;
    }
    args->dp_amax = f8i_slot_amax(ctx, sdp);
    args->dqkv_amax = f8i_slot_amax(ctx, sg);
    args->qkv_hp = w->qkv_hp;
    return f8i_op_attn_bwd(ctx, args);
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
    const int64_t C = c->n_head * c->head_dim, T = saved->batch * saved->seq, W = qkv_width(c);
    F8I_TRY(check_act(a, dy, "f8_attention_backward: dy", T, C));
    F8I_TRY(check_act(a, dqkv, "f8_attention_backward: dqkv", T, W));
    const size_t es = f8_dtype_size(c->dtype);
    /* FP8 reads the saved codes, not the caller's qkv: dqkv may then be anywhere */
    if (!c->fp8 && overlap(dqkv->data, (size_t)(T * W) * es, saved->qkv, (size_t)(T * W) * es))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward: dqkv overlaps the forward's qkv");
    if (overlap(dqkv->data, (size_t)(T * W) * es, dy->data, (size_t)(T * C) * es))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward: dqkv overlaps dy");
    if (c->output_kept && overlap(dqkv->data, (size_t)(T * W) * es, saved->y, (size_t)(T * C) * es))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward: dqkv overlaps the forward's y (output_kept)");
    if (T == 0) return F8_OK;

    f8i_attn_bwd_args args;
    memset(&args, 0, sizeof args);
    args.batch = saved->batch;
    args.seq = saved->seq;
    args.n_head = c->n_head;
    args.head_dim = c->head_dim;
    args.n_kv_head = c->n_kv_head;
    args.dtype = c->dtype;
    args.scale = a->scale;
    args.scale_log2 = a->scale_log2;
    args.qkv = saved->qkv;
    args.o = c->output_kept ? saved->y : saved->o; /* the caller's y, or the copy of it */
    args.lse = saved->lse;
    args.dy = dy->data;
    args.dqkv = dqkv->data;
    const f8i_attn_ws w = place(a, saved->batch, saved->seq);
    args.d = w.d;
    args.rows = w.rows;
    if (c->fp8_backward) return fp8_backward(a, saved, dy, &args, &w);
    if (c->fp8) { /* TE's F16 backward of FP8 DPA: BF16 on the inputs the forward used */
        f8_status st2 = f8i_op_convert(ctx, saved->qkv8, F8_DTYPE_E4M3, saved->qkv_sinv, w.qkv_hp, F8_DTYPE_BF16, T * W);
        if (st2 != F8_OK) return st2;
        args.qkv = w.qkv_hp;
    }
    return f8i_op_attn_bwd(ctx, &args);
}
