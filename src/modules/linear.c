/*
 * modules/linear.c — f8_linear, TE's Linear: y = x·Wᵀ + b in FP8 or in the
 * parameter dtype, on the module base (module.h).
 *
 * Design note. Data flow with FP8 on (spec §5.1), in row-major GEMM terms
 * D[m, n] = Σ_k A(m, k)·B(n, k), both operands K-contiguous ("TN"):
 *   forward   x ─cast(+transpose)→ X8 [T,K] (workspace), X8ᵀ [K,T] (saved)
 *             W ─cast+transpose→ workspace W8 [N,K], W8ᵀ [K,N] (per microbatch rule)
 *             y [T,N] = X8 · W8ᵀ          A = X8,   B = W8,   fast accumulation
 *   backward  dy ─cast+transpose+dbias→ G8 [T,N], G8ᵀ [N,T] (workspace), db += Σ dy
 *             dx [T,K] = G8 · W8          A = G8,   B = W8ᵀ,  split accumulation
 *             dW [N,K] = G8ᵀ · X8         A = G8ᵀ,  B = X8ᵀ,  split accumulation
 * Every GEMM takes each operand's own scale_inv: W8's private one (written with
 * its bytes), X8ᵀ's copy saved at forward time, G8's written by its cast.
 * With FP8 off the same products run in the parameter dtype with trans flags
 * (NN dgrad, NT wgrad) and the bias gradient is a GEMM against a ones vector.
 * recompute_input_cast: the saved state keeps no X8ᵀ, only the scale its cast
 * used; the backward casts the caller's x (kept, as with FP8 off) again
 * with it into the workspace, X8 and X8ᵀ, just before the wgrad.
 */
#include <stddef.h>
#include <string.h>

#include "modules/module.h"

enum { SLOT_INPUT = 0 };
enum { SLOT_GRAD_OUTPUT = 0 };

typedef struct linear_own {
    int recompute_cast; /* config.recompute_input_cast */
} linear_own;

typedef struct linear {
    f8_module base;
    linear_own own;
} linear;

static int recompute_cast(const f8_module *m) { return m->fp8 && ((const linear *)m)->own.recompute_cast; }

typedef struct linear_saved {
    float *x_scale_inv; /* (1) the scale_inv X8ᵀ was cast with; block scaling: its grid (K, ceil(T/128)) */
    uint8_t *xt;        /* (K, max_tokens); NULL with recompute_input_cast */
    float *x_scale;     /* recompute_input_cast: the scale the input's cast used (scalar), else NULL */
} linear_saved;

/* FP8 only: X8ᵀ's scale_inv, then X8ᵀ or (recompute_input_cast) the cast's
 * scale (none under wgrad_hp: the backward reads the caller's x again, as
 * with FP8 off). */
static size_t place_saved(const f8_module *m, f8i_layout *l, int64_t T, void *impl)
{
    linear_saved *s = (linear_saved *)impl;
    s->x_scale_inv = NULL;
    s->xt = NULL;
    s->x_scale = NULL;
    if (!m->fp8 || m->q.wgrad_hp) return l->bytes;
    s->x_scale_inv = f8i_take_sinv(m, l, T, m->in_features, sizeof(float));
    if (recompute_cast(m)) s->x_scale = (float *)f8i_take(l, sizeof(float));
    else s->xt = (uint8_t *)f8i_take(l, (size_t)(m->in_features * T));
    return l->bytes;
}

/* Per call: forward X8 (+ scale_inv); backward the reduction workspace, G8,
 * G8ᵀ, and with recompute_input_cast X8 and X8ᵀ again (rx8); each the
 * GEMMs' padding workspace (nothing for aligned shapes). */
typedef struct linear_ws {
    f8i_qbuf x8, g8, rx8;
    void *reduce;
    void *gemm;
    void *conv; /* wgrad_hp: dy in x's dtype when they differ */
} linear_ws;

static size_t fwd_layout(const f8_module *m, int64_t T, f8i_layout *l, linear_ws *w)
{
    w->x8 = f8i_take_qbuf((f8_module *)m, l, F8_DIR_FORWARD, T, m->in_features, 0);
    w->gemm = f8i_take(l, f8i_weight_gemm_workspace(&m->w[0], T, 0));
    return l->bytes;
}

static size_t bwd_layout(const f8_module *m, int64_t T, f8i_layout *l, linear_ws *w)
{
    w->reduce = f8i_take(l, f8i_reduce_workspace_bytes(T, m->out_features));
    w->g8 = f8i_take_qbuf((f8_module *)m, l, F8_DIR_BACKWARD, T, m->out_features, !m->q.wgrad_hp);
    w->gemm = f8i_take(l, f8i_weight_gemm_workspace(&m->w[0], T, 1));
    w->conv = m->q.wgrad_hp ? f8i_take(l, (size_t)(T * m->out_features) * 4) : NULL;
    memset(&w->rx8, 0, sizeof w->rx8);
    if (recompute_cast(m)) w->rx8 = f8i_take_qbuf((f8_module *)m, l, F8_DIR_FORWARD, T, m->in_features, 1);
    return l->bytes;
}

static size_t workspace(const f8_module *m, int64_t T, int backward)
{
    if (!m->fp8) return 0;
    linear_ws w;
    f8i_layout l = f8i_layout_at(NULL);
    return backward ? bwd_layout(m, T, &l, &w) : fwd_layout(m, T, &l, &w);
}

static f8_status forward(f8_module *m, const f8_tensor *x, f8_tensor *y, f8_tensor *aux, f8_microbatch mb,
                         f8_saved *saved, const f8_tensor *residual)
{
    (void)aux;
    f8_ctx *ctx = m->ctx;
    f8i_weight *w = &m->w[0];
    const void *r = residual ? residual->data : NULL;
    if (!m->fp8) {
        const f8i_operand xo = f8i_operand_hp(x->data, x->dtype, x->rows, m->in_features);
        return f8i_weight_fprop(ctx, w, &xo, y->data, y->dtype, r, NULL);
    }
    linear_ws ws;
    f8i_layout l = f8i_module_workspace(m);
    fwd_layout(m, x->rows, &l, &ws);
    const linear_saved *s = saved ? (const linear_saved *)saved->impl : NULL;
    if (saved && !m->q.wgrad_hp) { /* X8ᵀ (unless recomputed) and its scale_inv outlive the call */
        ws.x8.data_t = s->xt;
        ws.x8.scale_inv_t = s->x_scale_inv;
        ws.x8.scale_inv = f8i_quantizer_sinv(&m->q, s->x_scale_inv, ws.x8.scale_inv); /* one scalar: X8's too */
    }
    f8_status st = f8i_weight_cast(ctx, w, mb, saved != NULL);
    if (st == F8_OK)
        st = f8i_module_quantize(m, x->data, x->dtype, x->rows, m->in_features, F8_DIR_FORWARD, SLOT_INPUT, &ws.x8, NULL,
                                 NULL);
    if (st == F8_OK && s && s->x_scale) st = f8i_module_norm_keep_scale(m, SLOT_INPUT, s->x_scale); /* any slot's */
    if (st != F8_OK) return st;
    const f8i_operand xo = f8i_qbuf_operand(&ws.x8, x->rows, m->in_features);
    return f8i_weight_fprop(ctx, w, &xo, y->data, y->dtype, r, ws.gemm);
}

static f8_status backward(f8_module *m, f8_saved *s, const f8_tensor *dy, const f8_tensor *aux, f8_tensor *dx,
                          int dx_add)
{
    (void)aux;
    f8_ctx *ctx = m->ctx;
    f8i_weight *w = &m->w[0];
    const int64_t T = s->tokens;
    f8_status st = F8_OK;
    if (!m->fp8) {
        const f8i_operand g = f8i_operand_hp(dy->data, dy->dtype, T, m->out_features);
        const f8i_operand x = f8i_operand_hp(s->x.data, s->x.dtype, T, m->in_features);
        if (dx) st = f8i_weight_dgrad(ctx, w, &g, dx->data, dx->dtype, dx_add, NULL);
        if (st == F8_OK) st = f8i_weight_wgrad(ctx, w, &g, &x, s->microbatch, NULL);
        if (st == F8_OK) st = f8i_weight_bgrad(ctx, w, dy->data, T);
        return st;
    }
    const linear_saved *ls = (const linear_saved *)s->impl;
    linear_ws ws;
    f8i_layout l = f8i_module_workspace(m);
    bwd_layout(m, T, &l, &ws);
    const f8i_qbuf *g = &ws.g8;
    st = f8i_module_quantize(m, dy->data, dy->dtype, T, m->out_features, F8_DIR_BACKWARD, SLOT_GRAD_OUTPUT, g, w,
                             ws.reduce);
    const f8i_operand go = f8i_qbuf_operand(g, T, m->out_features);
    f8i_operand xo = {NULL, ls->xt, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), m->q.act, NULL, ls->x_scale_inv, T,
                      m->in_features}; /* X8ᵀ and its scale_inv, saved by the forward */
    if (st == F8_OK && dx) st = f8i_weight_dgrad(ctx, w, &go, dx->data, dx->dtype, dx_add, ws.gemm);
    if (st == F8_OK && ls->x_scale) { /* recompute_input_cast: the forward's cast of the caller's x, its scale */
        f8i_cast_args c = f8i_module_cast_args(ctx, m->fwd[SLOT_INPUT], s->x.data, s->x.dtype, T, m->in_features,
                                               &ws.rx8);
        c.out_t = ws.rx8.data_t;
        c.scale = ls->x_scale;
        c.stats = NULL; /* the forward counted these codes */
        st = f8i_op_cast(ctx, &c);
        xo.data_t = ws.rx8.data_t;
    }
    if (st == F8_OK && m->q.wgrad_hp)
        return f8i_weight_wgrad_hp(ctx, w, dy->data, dy->dtype, s->x.data, s->x.dtype, T, s->microbatch, ws.conv);
    if (st == F8_OK) st = f8i_weight_wgrad(ctx, w, &go, &xo, s->microbatch, ws.gemm);
    return st;
}

/* x ─cast→ X8 ─GEMM→ y (FP8), or the GEMM alone. */
static int describe(const f8_module *m, int fp8, f8i_step *s)
{
    (void)m;
    int n = 0;
    if (fp8) s[n++] = (f8i_step){F8I_STEP_QUANTIZE, SLOT_INPUT};
    s[n++] = (f8i_step){F8I_STEP_GEMM, 0};
    return n;
}

static const f8i_module_class linear_class = {"Linear", "f8_linear", 0, sizeof(linear_saved), place_saved, forward,
                                              backward, describe};

f8_linear_config f8_linear_config_default(int64_t in_features, int64_t out_features)
{
    f8_linear_config c = {.in_features = in_features, .out_features = out_features};
    F8I_CONFIG_DEFAULTS(c);
    c.recompute_input_cast = 0;
    return c;
}

f8_status f8_linear_create(f8_ctx *ctx, const f8_linear_config *c, f8_module **out)
{
    const char *fn = __func__;
    F8I_TRY(f8i_create_check(ctx, fn, c, out));
    f8i_module_spec s = {0};
    if (c->recompute_input_cast != 0 && c->recompute_input_cast != 1)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: config.recompute_input_cast is %d; it must be 0 or 1", fn,
                         c->recompute_input_cast);
    /* block and row-wise scaling quantize X8ᵀ on its own (tiles or rows of its own): not recomputed */
    const f8i_quantizer q = f8i_quantizer_for(ctx);
    if (c->recompute_input_cast && c->fp8) F8I_TRY(f8i_quantizer_check_colwise_rebuild(ctx, &q, fn, "recompute_input_cast"));
    f8i_spec_single_weight(&s, &linear_class, c->in_features, c->out_features, c->seed);
    F8I_SPEC_FROM_CONFIG(s, c);
    s.workspace = workspace;
    const linear_own own = {c->recompute_input_cast};
    s.module_bytes = sizeof(linear);
    s.own_offset = offsetof(linear, own);
    s.own = &own;
    s.own_bytes = sizeof own;
    return f8i_module_create(ctx, &s, fn, out);
}
