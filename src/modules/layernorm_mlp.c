/*
 * modules/layernorm_mlp.c — f8_layernorm_mlp, TE's LayerNormMLP:
 * y = fc2(act(fc1(norm(x)))) (spec §5.3), on the module base (module.h).
 *
 * Design note. FP8 forward: the norm writes fc1's FP8 input (GEMM1_INPUT), fc1
 * writes its pre-activation h1 in the parameter dtype (saved for backward),
 * the activation writes fc2's FP8 input (GEMM2_INPUT) with its amax, and fc2
 * produces y. Training, the activation also writes its codes transposed,
 * a8ᵀ (saved: fc2's wgrad operand), and the row-major a8 that only fc2's
 * fprop reads lives in the call's workspace, so the saved state is no larger
 * and the backward transposes nothing of fc2's. Backward:
 *   dy ─cast+transpose+dbias2→ G8, G8ᵀ (GRAD_OUTPUT1)
 *   da = G8 · W2_8;  dW2 += G8ᵀ · a8ᵀ
 *   d = act'(h1)·da ─fused cast+transpose+dbias1→ D8, D8ᵀ (GRAD_OUTPUT2), one op
 *   dln = D8 · W1_8;  dW1 += D8ᵀ · ln8ᵀ;  norm backward from dln.
 * FP8 off: da = dy · W2, d = act'(h1)·da, dln = d · W1 in the param dtype.
 * da and dln, the dgrad GEMMs' outputs, are in the parameter dtype, FP8 on
 * or off, as TE and PyTorch autocast write them in the activation dtype:
 * with BF16 parameters that halves the bytes the GEMMs write and the
 * activation and norm backwards read (the largest of the layer's non-GEMM
 * costs at its benchmark shape), and rounds them once to BF16 (relative
 * 2^-9: far inside the E5M2 step of d's codes with FP8; without, the same
 * rounding d, fc1's dgrad input, gets anyway; the norm backward's sums stay
 * FP32); FP32 parameters keep FP32. Sequence parallel reduce-scatters dln in FP32 (a
 * BF16 dln converted into dln_stage first). recompute_activation: the saved
 * state keeps no activation output (only, with FP8, the scale its cast
 * used); the backward makes it again from h1 just before fc2's wgrad, into
 * the buffers the activation backward writes next (D8 and D8ᵀ with FP8,
 * each T·F1 >= T·F bytes, or d without), so the workspace does not grow.
 * Both weights have their own workspace with the same microbatch rule.
 * Unused slots (GEMM1_OUTPUT, GEMM2_OUTPUT, GRAD_INPUT1, GRAD_INPUT2) are
 * registered, as TE does, and never written, so they never roll. Scalings that cast after the kernels (the quantizer's
 * unfused) stage the activation's output and d in the param dtype; with
 * fused_rows (row-wise) the kernels also write their row-wise codes, and the
 * cast after makes only the column-wise copy (and fc1's dbias); where no
 * dbias is summed the kernels take the copy's column amaxes too, so that
 * cast reads its source once (codes) instead of twice (amaxes, codes).
 */
#include <stddef.h>
#include <string.h>

#include "modules/module.h"

enum { GEMM1_INPUT = 0, GEMM1_WEIGHT = 1, GEMM2_INPUT = 3, GEMM2_WEIGHT = 4 };
enum { GRAD_OUTPUT1 = 0, GRAD_OUTPUT2 = 2 };

typedef struct mlp_own {
    f8_activation act;
    int64_t ffn;      /* fc2's input features (fc1 has ffn, or 2·ffn when gated) */
    int recompute_act; /* config.recompute_activation */
} mlp_own;

typedef struct mlp {
    f8_module base;
    mlp_own own;
} mlp;

/* The norm's saved state (modules/norm.h), then the MLP's own. */
typedef struct mlp_saved {
    f8i_norm_saved n;
    void *h1;         /* (T, F1) param dtype: fc1 output before the activation */
    void *act;        /* FP8: the codes transposed (F, T); else (T, F) param dtype; NULL with
                         recompute_activation */
    float *act_sinv;  /* act's scale_inv (the wgrad's); block scaling: the grid of act (its own 1x128
                         tiles of the transposed codes) */
    float *act_scale; /* recompute_activation with FP8: the scale act's cast used (scalar), else NULL */
    void *act_hp;     /* wgrad_hp: the activation output (T, F) in param dtype, fc2's wgrad operand */
} mlp_saved;

/* keep_act 0 (recompute_activation training): no act, the scale in its place. */
static size_t place(const f8_module *m, f8i_layout *l, int64_t T, int keep_ln, int keep_act, mlp_saved *s)
{
    const int64_t F = ((const mlp *)m)->own.ffn, F1 = m->w[0].rows;
    const size_t es = f8_dtype_size(m->param_dtype), qs = m->fp8 ? 1 : es;
    f8i_norm_saved_place(m, l, T, keep_ln, &s->n);
    s->h1 = f8i_take(l, (size_t)(T * F1) * es);
    s->act = keep_act ? f8i_take(l, (size_t)(T * F) * qs) : NULL;
    s->act_sinv = f8i_take_sinv(m, l, T, F, sizeof(float));
    s->act_scale = !keep_act && m->fp8 ? (float *)f8i_take(l, sizeof(float)) : NULL;
    s->act_hp = m->fp8 && m->q.wgrad_hp ? f8i_take(l, (size_t)(T * F) * es) : NULL;
    return l->bytes;
}

static size_t place_saved(const f8_module *m, f8i_layout *l, int64_t T, void *impl)
{
    return place(m, l, T, !m->recompute_norm, !((const mlp *)m)->own.recompute_act, (mlp_saved *)impl);
}

/* Per call. Forward: what saved would hold (inference), or a8 alone
 * (training; with recompute_norm also the norm output, fc1's input; with
 * recompute_activation and FP8 off a8 is the param dtype activation output).
 * Backward: the reduction workspace, dln and da (param dtype), G8 + G8ᵀ,
 * D8 + D8ᵀ and ln8ᵀ with FP8; d (param dtype) without; with recompute_norm
 * the norm output made again (rln) and its staging (rhp, current scaling). */
typedef struct mlp_ws {
    mlp_saved fwd;
    f8i_qbuf rln;   /* recompute_norm: the norm output (training forward, backward) */
    void *rhp;
    void *a8;
    float *a8_sinv; /* block scaling training: a8's row-wise grid (act_sinv is the saved column-wise one) */
    void *hp; /* current or block scaling: a norm or activation output, or d, in param dtype */
    void *reduce, *dln, *da, *d;
    f8i_qbuf g8, d8;
    uint8_t *lnt;
    void *gemm;     /* the GEMMs' padding workspace, the larger of fc1's and fc2's */
    float *amax;    /* sequence parallel: the group amax (current scaling) */
    float *dln_stage, *dln_local; /* sequence parallel: dln in FP32 (T, H) when it is BF16, and this
                                     rank's rows summed over the group (T/P, H) */
    void *conv;     /* wgrad_hp: dy in the param dtype when it is not */
} mlp_ws;

static size_t gemm_ws(const f8_module *m, int64_t T, int backward)
{
    const size_t a = f8i_weight_gemm_workspace(&m->w[0], T, backward), b = f8i_weight_gemm_workspace(&m->w[1], T, backward);
    return a > b ? a : b;
}

/* recompute_norm's norm output [T, H]: FP8 with its scale_inv, or the
 * param dtype. */
static void rln_layout(const f8_module *m, int64_t T, f8i_layout *l, mlp_ws *w)
{
    const int64_t H = m->in_features;
    const size_t es = f8_dtype_size(m->param_dtype);
    w->rln.data = (uint8_t *)f8i_take(l, (size_t)(T * H) * (m->fp8 ? 1 : es));
    w->rln.scale_inv = w->rln.scale_inv_t = (float *)f8i_take(l, sizeof(float)); /* TENSOR: one scalar */
    w->rln.dtype = f8_ctx_slot_dtype(m->ctx, F8_DIR_FORWARD);
}

static size_t fwd_layout(const f8_module *m, int64_t T, int training, f8i_layout *l, mlp_ws *w)
{
    const int64_t H = m->in_features, F = ((const mlp *)m)->own.ffn;
    memset(&w->rln, 0, sizeof w->rln);
    const size_t as = m->fp8 ? 1 : ((const mlp *)m)->own.recompute_act ? f8_dtype_size(m->param_dtype) : 0;
    if (!training) place(m, l, T > 0 ? T : 1, 1, 1, &w->fwd);
    else w->a8 = f8i_take(l, (size_t)(T * F) * as);
    if (training && m->recompute_norm) rln_layout(m, T, l, w);
    /* a8's scale_inv when it is not the saved column-wise copy's */
    w->a8_sinv = training && m->fp8 ? f8i_quantizer_take_own_sinv(&m->q, l, T, F) : NULL;
    w->hp = NULL; /* the norm's output, then the activation's */
    if (m->fp8 && m->q.unfused)
        w->hp = f8i_take(l, (size_t)(T * (H > F ? H : F)) * f8_dtype_size(m->param_dtype));
    w->gemm = f8i_take(l, gemm_ws(m, T, 0));
    w->amax = m->sp ? (float *)f8i_take(l, F8I_SP_AMAX_FLOATS * sizeof(float)) : NULL;
    return l->bytes;
}

static size_t bwd_layout(const f8_module *m, int64_t T, f8i_layout *l, mlp_ws *w)
{
    const int64_t H = m->in_features, F = ((const mlp *)m)->own.ffn, F1 = m->w[0].rows;
    const size_t es = f8_dtype_size(m->param_dtype); /* also da's and dln's element size */
    w->reduce = f8i_take(l, f8i_reduce_workspace_bytes(T, F1 > H ? F1 : H));
    w->dln = f8i_take(l, (size_t)(T * H) * es);
    w->da = f8i_take(l, (size_t)(T * F) * es);
    w->conv = m->fp8 && m->q.wgrad_hp ? f8i_take(l, (size_t)(T * H) * 4) : NULL;
    if (m->fp8) {
        w->g8 = f8i_take_qbuf((f8_module *)m, l, F8_DIR_BACKWARD, T, H, !m->q.wgrad_hp);
        w->d8 = f8i_take_qbuf((f8_module *)m, l, F8_DIR_BACKWARD, T, F1, !m->q.wgrad_hp);
        w->lnt = (uint8_t *)f8i_take(l, (size_t)(T * H));
        w->hp = m->q.unfused ? f8i_take(l, (size_t)(T * F1) * es) : NULL;
    } else {
        w->d = f8i_take(l, (size_t)(T * F1) * es);
    }
    w->gemm = f8i_take(l, gemm_ws(m, T, 1));
    w->dln_stage = m->sp && es != 4 ? (float *)f8i_take(l, (size_t)(T * H) * 4) : NULL;
    w->dln_local = m->sp ? (float *)f8i_take(l, (size_t)(T / f8i_sp_size(m) * H) * 4) : NULL;
    memset(&w->rln, 0, sizeof w->rln);
    w->rhp = NULL;
    if (m->recompute_norm) {
        rln_layout(m, T, l, w);
        /* current scaling stages the norm output; d's staging hp is free by
         * then (the recompute follows the activation backward) when as large */
        if (m->fp8 && m->q.unfused) w->rhp = F1 >= H ? w->hp : f8i_take(l, (size_t)(T * H) * es);
    }
    return l->bytes;
}

static size_t workspace(const f8_module *m, int64_t T, int backward)
{
    mlp_ws w;
    f8i_layout l = f8i_layout_at(NULL), lt = f8i_layout_at(NULL);
    if (backward) return bwd_layout(m, T, &l, &w);
    const size_t inference = fwd_layout(m, T, 0, &l, &w), training = fwd_layout(m, T, 1, &lt, &w);
    return inference > training ? inference : training;
}

static f8_status forward(f8_module *m, const f8_tensor *x, f8_tensor *y, f8_tensor *aux, f8_microbatch mb,
                         f8_saved *saved, const f8_tensor *residual)
{
    (void)aux;
    f8_ctx *ctx = m->ctx;
    const int64_t T = f8i_sp_tokens(m, x->rows); /* sequence parallel: x holds T / P */
    const int fp8 = m->fp8;
    const f8_dtype pdt = m->param_dtype, qdt = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), adt = fp8 ? qdt : pdt;
    mlp_ws ws;
    f8i_layout l = f8i_module_workspace(m);
    fwd_layout(m, T, saved != NULL, &l, &ws);
    const mlp_saved *s = saved ? (const mlp_saved *)saved->impl : &ws.fwd;
    /* fc2's input: FP8 training saves its transpose and keeps the codes,
     * read by fc2's fprop only, in the workspace; recompute_activation
     * training saves neither (the backward makes the transpose again) */
    const int rec_act = saved && ((mlp *)m)->own.recompute_act;
    void *a8 = (fp8 && saved) || rec_act ? ws.a8 : s->act;
    uint8_t *a8t = saved && !rec_act ? (uint8_t *)s->act : NULL;
    float *a8_sinv = ws.a8_sinv ? ws.a8_sinv : s->act_sinv;
    /* the norm's output: FP8 (fused, or cast after it under current and
     * block scaling) or the param dtype; recompute_norm training keeps it
     * in the workspace (saving the statistics and the scale instead) */
    const int rec = saved && m->recompute_norm;
    void *ln = rec ? ws.rln.data : s->n.ln;
    float *ln_sinv = rec ? ws.rln.scale_inv : s->n.ln_sinv;
    const f8i_qbuf q = {(uint8_t *)ln, saved ? s->n.lnt : NULL, ln_sinv, qdt,
                        f8i_quantizer_sinv(&m->q, ln_sinv, s->n.lnt_sinv), m->q.act};
    /* wgrad_hp training: the high-precision norm and activation outputs are saved (the wgrad operands) */
    const int keep_hp = saved && s->act_hp;
    f8_status st = f8i_module_norm_input(m, x, GEMM1_INPUT, &q, keep_hp ? s->n.ln_hp : ws.hp, s->n.mu, s->n.rsigma,
                                         ws.amax);
    if (st == F8_OK && rec) st = f8i_module_norm_keep_scale(m, GEMM1_INPUT, s->n.scale);
    if (st == F8_OK && fp8) st = f8i_weight_cast(ctx, &m->w[0], mb, saved != NULL);
    if (st == F8_OK && fp8) st = f8i_weight_cast(ctx, &m->w[1], mb, saved != NULL);
    const int64_t H = m->in_features, F = m->w[1].cols;
    const f8i_operand lo = fp8 ? (f8i_operand){ln, NULL, qdt, m->q.act, ln_sinv, ln_sinv, T, H} : f8i_operand_hp(ln, pdt, T, H);
    if (st == F8_OK) st = f8i_weight_fprop(ctx, &m->w[0], &lo, s->h1, pdt, NULL, ws.gemm);
    if (st == F8_OK) {
        f8i_act_fwd_args a;
        memset(&a, 0, sizeof a);
        a.act = ((mlp *)m)->own.act;
        a.x = s->h1;
        a.x_dtype = pdt;
        a.rows = T;
        a.cols = ((mlp *)m)->own.ffn;
        a.y = a8;
        a.y_dtype = adt;
        if (fp8 && ws.hp) { /* current or block scaling: the activation in param dtype, then the cast */
            const f8i_qbuf q = {(uint8_t *)a8, keep_hp ? NULL : a8t, a8_sinv, qdt, s->act_sinv, m->q.act};
            void *hp = keep_hp ? s->act_hp : ws.hp;
            if (m->q.fused_rows) { /* row-wise: the kernel writes the codes too; the cast the column-wise copy */
                f8i_quantizer_row_fields(ctx, qdt, &a.mode, &a.scaled_max, &a.pow2);
                a.amax = f8i_slot_amax(ctx, m->fwd[GEMM2_INPUT]);
                a.stats = f8i_slot_stats(ctx, m->fwd[GEMM2_INPUT]);
                a.scale_inv = a8_sinv;
                a.y_hp = hp;
                a.hp_dtype = pdt;
                a.col_amax = f8i_module_col_amax(&q); /* and the column amaxes, for the copy's cast */
            } else {
                a.y = hp;
                a.y_dtype = pdt;
            }
            st = f8i_op_act_fwd(ctx, &a);
            if (st == F8_OK && m->q.fused_rows)
                st = f8i_module_quantize_cols(m, hp, pdt, T, a.cols, F8_DIR_FORWARD, GEMM2_INPUT, &q, NULL, NULL,
                                              a.col_amax != NULL);
            else if (st == F8_OK)
                st = f8i_module_quantize(m, hp, pdt, T, a.cols, F8_DIR_FORWARD, GEMM2_INPUT, &q, NULL, NULL);
        } else {
            if (fp8) {
                a.y_t = a8t;
                a.scale = f8i_slot_scale(ctx, m->fwd[GEMM2_INPUT]);
                a.amax = f8i_slot_amax(ctx, m->fwd[GEMM2_INPUT]);
                a.stats = f8i_slot_stats(ctx, m->fwd[GEMM2_INPUT]);
                a.scale_inv = s->act_sinv;
            }
            st = f8i_op_act_fwd(ctx, &a);
        }
    }
    if (st == F8_OK && rec_act) st = f8i_module_norm_keep_scale(m, GEMM2_INPUT, s->act_scale); /* any slot's */
    if (st != F8_OK) return st;
    const f8i_operand ao = fp8 ? (f8i_operand){a8, NULL, qdt, m->q.act, a8_sinv, a8_sinv, T, F} : f8i_operand_hp(a8, pdt, T, F);
    /* the residual (forward_add) joins in fc2's epilogue */
    return f8i_weight_fprop(ctx, &m->w[1], &ao, y->data, y->dtype, residual ? residual->data : NULL, ws.gemm);
}

/* d = act'(h1)·da: FP8 fused with the cast (+transpose, + fc1's dbias) into
 * d8; FP8 off into d in the param dtype. */
static f8_status act_backward(f8_module *m, const mlp_saved *s, int64_t T, const mlp_ws *ws)
{
    f8_ctx *ctx = m->ctx;
    f8i_act_bwd_args a;
    memset(&a, 0, sizeof a);
    a.act = ((mlp *)m)->own.act;
    a.x = s->h1;
    a.x_dtype = m->param_dtype;
    a.dy = ws->da;
    a.dy_dtype = m->param_dtype;
    a.rows = T;
    a.cols = ((mlp *)m)->own.ffn;
    if (m->fp8 && ws->hp) { /* current or block scaling: d in param dtype, then the cast (+dbias) */
        a.dx = ws->hp;
        a.dx_dtype = m->param_dtype;
        if (m->q.fused_rows) { /* row-wise: the kernel writes d's codes too; the cast the column-wise copy, dbias */
            const f8_slot sl = m->bwd[GRAD_OUTPUT2];
            f8i_quantizer_row_fields(ctx, ws->d8.dtype, &a.mode, &a.scaled_max, &a.pow2);
            a.out = ws->d8.data;
            a.out_dtype = ws->d8.dtype;
            a.amax = f8i_slot_amax(ctx, sl);
            a.stats = f8i_slot_stats(ctx, sl);
            a.scale_inv = ws->d8.scale_inv;
            a.col_amax = f8i_module_col_amax(&ws->d8); /* with fc1's dbias too: the cast sums d in its order */
            F8I_TRY(f8i_op_act_bwd(ctx, &a));
            return f8i_module_quantize_cols(m, ws->hp, m->param_dtype, T, m->w[0].rows, F8_DIR_BACKWARD, GRAD_OUTPUT2,
                                            &ws->d8, &m->w[0], ws->reduce, a.col_amax != NULL);
        }
        F8I_TRY(f8i_op_act_bwd(ctx, &a));
        return f8i_module_quantize(m, ws->hp, m->param_dtype, T, m->w[0].rows, F8_DIR_BACKWARD, GRAD_OUTPUT2, &ws->d8,
                                   &m->w[0], ws->reduce);
    }
    if (m->fp8) {
        a.out = ws->d8.data;
        a.out_t = ws->d8.data_t;
        a.out_dtype = ws->d8.dtype;
        a.scale = f8i_slot_scale(ctx, m->bwd[GRAD_OUTPUT2]);
        a.amax = f8i_slot_amax(ctx, m->bwd[GRAD_OUTPUT2]);
        a.stats = f8i_slot_stats(ctx, m->bwd[GRAD_OUTPUT2]);
        a.scale_inv = ws->d8.scale_inv;
        a.dbias = m->w[0].db;
        a.dbias_dtype = m->param_dtype;
        a.dbias_accumulate = 1;
        a.workspace = a.dbias ? ws->reduce : NULL;
        a.workspace_bytes = a.dbias ? f8i_reduce_workspace_bytes(T, m->w[0].rows) : 0;
    } else {
        a.dx = ws->d;
        a.dx_dtype = m->param_dtype;
    }
    return f8i_op_act_bwd(ctx, &a);
}

/* fc2's wgrad operand: the saved activation output, or (recompute_activation)
 * the forward's made again from h1 into the buffers act_backward writes after
 * the wgrad: FP8, the codes transposed into D8 (the row-major codes, which
 * the tile kernel writes too, into D8ᵀ) with the saved scale, through the
 * forward's kernel (delayed: the fused one; current: the activation into
 * hp, then the cast); FP8 off, into d. Records no amax and no telemetry. */
static f8_status saved_act(f8_module *m, const mlp_saved *s, int64_t T, const mlp_ws *ws, const void **act)
{
    *act = s->act;
    if (!((const mlp *)m)->own.recompute_act) return F8_OK;
    f8_ctx *ctx = m->ctx;
    f8i_act_fwd_args a;
    memset(&a, 0, sizeof a);
    a.act = ((const mlp *)m)->own.act;
    a.x = s->h1;
    a.x_dtype = m->param_dtype;
    a.rows = T;
    a.cols = ((const mlp *)m)->own.ffn;
    if (!m->fp8) {
        a.y = ws->d;
        *act = ws->d;
        a.y_dtype = m->param_dtype;
        return f8i_op_act_fwd(ctx, &a);
    }
    *act = ws->d8.data;
    /* D8's buffers, the forward's format (D8's own is the backward's) */
    const f8_dtype qdt = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD);
    const f8i_qbuf q = {ws->d8.data_t, ws->d8.data, ws->d8.scale_inv, qdt, ws->d8.scale_inv, m->q.act};
    if (ws->hp) { /* current scaling: the activation in the param dtype, then the forward's cast */
        a.y = ws->hp;
        a.y_dtype = m->param_dtype;
        F8I_TRY(f8i_op_act_fwd(ctx, &a));
        f8i_cast_args c = f8i_module_cast_args(ctx, m->fwd[GEMM2_INPUT], ws->hp, m->param_dtype, T, a.cols, &q);
        c.out_t = q.data_t;
        c.scale = s->act_scale;
        c.stats = NULL;
        return f8i_op_cast(ctx, &c);
    }
    a.y = q.data;
    a.y_t = q.data_t;
    a.y_dtype = qdt;
    a.scale = s->act_scale;
    a.scale_inv = q.scale_inv;
    return f8i_op_act_fwd(ctx, &a);
}

/* fc1's wgrad operand: the saved norm output, or (recompute_norm) the
 * forward's made again in the workspace, late in the backward so that it
 * may share d's staging. */
static f8_status saved_ln(f8_module *m, const f8_saved *sv, const mlp_ws *ws, const void **ln, const float **ln_sinv)
{
    const mlp_saved *s = (const mlp_saved *)sv->impl;
    *ln = s->n.ln;
    *ln_sinv = s->n.ln_sinv;
    if (!m->recompute_norm) return F8_OK;
    *ln = ws->rln.data;
    *ln_sinv = ws->rln.scale_inv;
    return f8i_module_norm_recompute(m, sv, s->n.scale, &ws->rln, ws->rhp);
}

static f8_status backward(f8_module *m, f8_saved *sv, const f8_tensor *dy, const f8_tensor *aux, f8_tensor *dx,
                          int dx_add)
{
    (void)aux;
    f8_ctx *ctx = m->ctx;
    const mlp_saved *s = (const mlp_saved *)sv->impl;
    const int64_t T = sv->tokens, H = m->in_features, F = m->w[1].cols;
    const f8_dtype pdt = m->param_dtype, qdt = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD);
    f8i_weight *fc1 = &m->w[0], *fc2 = &m->w[1];
    mlp_ws ws;
    f8i_layout l = f8i_module_workspace(m);
    bwd_layout(m, T, &l, &ws);
    const void *ln = NULL, *act = NULL;
    const float *ln_sinv = NULL;
    f8_status st;
    if (m->fp8) {
        const f8i_qbuf *g = &ws.g8, *d = &ws.d8;
        const f8i_operand go = f8i_qbuf_operand(g, T, H), dop = f8i_qbuf_operand(d, T, F);
        st = f8i_module_quantize(m, dy->data, dy->dtype, T, H, F8_DIR_BACKWARD, GRAD_OUTPUT1, g, fc2, ws.reduce);
        if (st == F8_OK) st = f8i_weight_dgrad(ctx, fc2, &go, ws.da, pdt, 0, ws.gemm);
        if (st == F8_OK && !s->act_hp) st = saved_act(m, s, T, &ws, &act);
        /* act: the codes transposed (the forward wrote them, or saved_act made them again) */
        const f8i_operand ao = {NULL, act, qdt, m->q.act, NULL, s->act_sinv, T, F};
        if (st == F8_OK && s->act_hp)
            st = f8i_weight_wgrad_hp(ctx, fc2, dy->data, dy->dtype, s->act_hp, pdt, T, sv->microbatch, ws.conv);
        else if (st == F8_OK)
            st = f8i_weight_wgrad(ctx, fc2, &go, &ao, sv->microbatch, ws.gemm);
        if (st == F8_OK) st = act_backward(m, s, T, &ws); /* unfused: d stays in ws.hp in param dtype */
        if (st == F8_OK) st = f8i_weight_dgrad(ctx, fc1, &dop, ws.dln, pdt, 0, ws.gemm);
        if (s->act_hp) { /* wgrad_hp: fc1's from d and the saved norm output, in high precision */
            if (st == F8_OK) st = f8i_weight_wgrad_hp(ctx, fc1, ws.hp, pdt, s->n.ln_hp, pdt, T, sv->microbatch, NULL);
        } else {
            if (st == F8_OK) st = saved_ln(m, sv, &ws, &ln, &ln_sinv);
            const uint8_t *lnt = s->n.lnt ? s->n.lnt : ws.lnt; /* block scaling saved it; else transpose the codes */
            if (st == F8_OK && !s->n.lnt) st = f8i_op_transpose_u8(ctx, (const uint8_t *)ln, ws.lnt, T, H, NULL);
            const f8i_operand lo = {ln, lnt, qdt, m->q.act, ln_sinv, s->n.lnt ? s->n.lnt_sinv : ln_sinv, T, H};
            if (st == F8_OK) st = f8i_weight_wgrad(ctx, fc1, &dop, &lo, sv->microbatch, ws.gemm);
        }
    } else {
        const f8i_operand go = f8i_operand_hp(dy->data, pdt, T, H), dop = f8i_operand_hp(ws.d, pdt, T, F);
        st = f8i_weight_dgrad(ctx, fc2, &go, ws.da, pdt, 0, NULL);
        if (st == F8_OK) st = saved_act(m, s, T, &ws, &act);
        const f8i_operand ao = f8i_operand_hp(act, pdt, T, F);
        if (st == F8_OK) st = f8i_weight_wgrad(ctx, fc2, &go, &ao, sv->microbatch, NULL);
        if (st == F8_OK) st = f8i_weight_bgrad(ctx, fc2, dy->data, T);
        if (st == F8_OK) st = act_backward(m, s, T, &ws);
        if (st == F8_OK) st = f8i_weight_dgrad(ctx, fc1, &dop, ws.dln, pdt, 0, NULL);
        if (st == F8_OK) st = saved_ln(m, sv, &ws, &ln, &ln_sinv);
        const f8i_operand lo = f8i_operand_hp(ln, pdt, T, H);
        if (st == F8_OK) st = f8i_weight_wgrad(ctx, fc1, &dop, &lo, sv->microbatch, NULL);
        if (st == F8_OK) st = f8i_weight_bgrad(ctx, fc1, ws.d, T);
    }
    if (st == F8_OK) /* dy is read by now: dx may be dy itself (backward_add); dln is in the param dtype */
        st = f8i_module_norm_backward(m, sv, ws.dln, pdt, s->n.mu, s->n.rsigma, dx, dx_add, ws.reduce, ws.dln_stage,
                                      ws.dln_local);
    return st;
}

/* norm → fc1 (h1 kept in the param dtype) → activation → fc2; each GEMM
 * input FP8 through its slot, or in the param dtype with FP8 off. */
static int describe(const f8_module *m, int fp8, f8i_step *s)
{
    const f8i_step in1 = {F8I_STEP_QUANTIZE, GEMM1_INPUT}, in2 = {F8I_STEP_QUANTIZE, GEMM2_INPUT};
    const f8i_step hp = {F8I_STEP_ROUND, 0};
    /* current or block scaling store the norm and activation outputs in the
     * parameter dtype before their casts (the quantizer's unfused): rounded first */
    const int unfused = fp8 && m->q.unfused;
    int n = 0;
    s[n++] = (f8i_step){F8I_STEP_NORM, 0};
    if (unfused) s[n++] = hp;
    s[n++] = fp8 ? in1 : hp;
    s[n++] = (f8i_step){F8I_STEP_GEMM, 0};
    s[n++] = hp;
    s[n++] = (f8i_step){F8I_STEP_ACT, (int)((const mlp *)m)->own.act};
    if (unfused) s[n++] = hp;
    s[n++] = fp8 ? in2 : hp;
    s[n++] = (f8i_step){F8I_STEP_GEMM, 1};
    return n;
}

static const f8i_module_class mlp_class = {"LayerNormMLP", "f8_layernorm_mlp", 1, sizeof(mlp_saved), place_saved,
                                           forward, backward, describe};

f8_layernorm_mlp_config f8_layernorm_mlp_config_default(int64_t hidden_size, int64_t ffn_hidden_size)
{
    f8_layernorm_mlp_config c = {.hidden_size = hidden_size, .ffn_hidden_size = ffn_hidden_size};
    F8I_NORM_CONFIG_DEFAULTS(c);
    c.activation = F8_ACT_GELU;
    return c;
}

f8_status f8_layernorm_mlp_create(f8_ctx *ctx, const f8_layernorm_mlp_config *c, f8_module **out)
{
    const char *fn = __func__;
    F8I_TRY(f8i_create_check(ctx, fn, c, out));
    if ((int)c->activation < F8_ACT_GELU || (int)c->activation > F8_ACT_SRELU)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: activation %d is not one of f8_activation", fn,
                         (int)c->activation);
    const int64_t H = c->hidden_size, F = c->ffn_hidden_size;
    f8i_module_spec s = {0};
    s.cls = &mlp_class;
    s.shape_names = "hidden_size and ffn_hidden_size";
    s.shape[0] = H;
    s.shape[1] = F;
    s.shape_max[0] = 1 << 24;
    s.shape_max[1] = 1 << 23;
    s.in_features = H;
    s.out_features = H;
    F8I_SPEC_FROM_CONFIG(s, c);
    F8I_SPEC_NORM_FROM_CONFIG(s, c);
    s.n_fwd = 6;
    s.n_bwd = 4;
    s.n_weights = 2;
    s.weight_shape[0][0] = f8_activation_gated(c->activation) ? 2 * F : F;
    s.weight_shape[0][1] = H;
    s.weight_shape[1][0] = H;
    s.weight_shape[1][1] = F;
    s.weight_slot[0] = GEMM1_WEIGHT;
    s.weight_slot[1] = GEMM2_WEIGHT;
    s.weight_seed[0] = c->seed;
    s.weight_seed[1] = c->seed + 0x5bd1e995u;
    s.weight_names[0] = "fc1_weight";
    s.weight_names[1] = "fc2_weight";
    s.bias_names[0] = "fc1_bias";
    s.bias_names[1] = "fc2_bias";
    s.workspace = workspace;
    if (c->recompute_activation != 0 && c->recompute_activation != 1)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: config.recompute_activation is %d; it must be 0 or 1", fn,
                         c->recompute_activation);
    /* block and row-wise scaling quantize act's column-wise copy from the high-precision output:
     * re-creating it is not implemented */
    const f8i_quantizer q = f8i_quantizer_for(ctx);
    if (c->recompute_activation && c->fp8)
        F8I_TRY(f8i_quantizer_check_colwise_rebuild(ctx, &q, fn, "recompute_activation"));
    const mlp_own own = {c->activation, F, c->recompute_activation};
    s.module_bytes = sizeof(mlp);
    s.own_offset = offsetof(mlp, own);
    s.own = &own;
    s.own_bytes = sizeof own;
    return f8i_module_create(ctx, &s, fn, out);
}
