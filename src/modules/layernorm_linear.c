/*
 * modules/layernorm_linear.c — f8_layernorm_linear, TE's LayerNormLinear:
 * y = norm(x) · Wᵀ + b (spec §5.2), on the module base (module.h).
 *
 * Design note. With FP8 on, the norm kernel writes the GEMM input directly
 * in FP8 (slot INPUT, amax of its output, its own scale_inv next to the
 * data): no high-precision round trip. With return_layernorm_output the norm
 * output goes to the caller in high precision and is cast separately. As in
 * TE, no transpose of the norm output is made in forward; backward transposes
 * the saved FP8 copy for wgrad. The backward chain is
 *   dy ─cast+transpose+dbias→ G8, G8ᵀ;  dln = G8 · W8 (+ dln_out);
 *   dW += G8ᵀ · ln8ᵀ;  norm backward (dx, dgamma, dbeta) from dln.
 * dln, the dgrad GEMM's output, is in the parameter dtype, FP8 on or off,
 * as in LayerNormMLP (whose note says why: TE and PyTorch autocast write it
 * in the activation dtype; with BF16 parameters half the bytes the GEMM
 * writes and the norm backward reads, one rounding of relative 2^-9), and
 * FP32 with FP32 parameters. Sequence parallel reduce-scatters it in FP32 (a
 * BF16 dln converted into dln32 first). With return_layernorm_output dln is
 * FP32 whatever the parameters: dln_out (FP32 or BF16, converted to FP32
 * into dln32) is added to it in FP32 and the sum rounded once, not a BF16
 * dln rounded again by a BF16 add.
 */
#include <stddef.h>
#include <string.h>

#include "modules/module.h"

enum { SLOT_INPUT = 0 };
enum { SLOT_GRAD_OUTPUT = 0 };

typedef struct lnl_own {
    int return_ln; /* config.return_layernorm_output */
} lnl_own;

typedef struct lnl {
    f8_module base;
    lnl_own own;
} lnl;

/* The saved state is the norm's alone (modules/norm.h). */
typedef f8i_norm_saved lnl_saved;

static size_t place(const f8_module *m, f8i_layout *l, int64_t T, int keep_ln, lnl_saved *s)
{
    f8i_norm_saved_place(m, l, T, keep_ln, s);
    return l->bytes;
}

static size_t place_saved(const f8_module *m, f8i_layout *l, int64_t T, void *impl)
{
    return place(m, l, T, !m->recompute_norm, (lnl_saved *)impl);
}

/* Per call. Forward: (inference) what saved would hold; training with
 * recompute_norm, its ln and ln_sinv. Backward: the reduction workspace,
 * dln (dln_dtype), G8 + G8ᵀ, ln8ᵀ, dln32; with recompute_norm, in dln32's
 * place, the recomputed ln (rln) and its staging (hp, current scaling). */
typedef struct lnl_ws {
    lnl_saved fwd;
    f8i_qbuf rln;     /* recompute_norm backward: ln again (FP8 or param dtype in data) */
    void *hp;         /* current or block scaling: the norm output (T, K) in param dtype */
    void *reduce;
    void *dln;        /* (T, K) dln_dtype */
    float *dln32;     /* (T, K) FP32: dln_out converted (return_layernorm_output), or a BF16 dln staged for
                         the reduce-scatter (sequence parallel, which has neither that nor recompute_norm) */
    f8i_qbuf g8;
    uint8_t *lnt;
    void *gemm;       /* the GEMMs' padding workspace (nothing for aligned shapes) */
    float *amax;      /* sequence parallel: the group amax (current scaling) */
    float *dln_local; /* sequence parallel: this rank's rows of dln summed over the group (T/P, K) */
    void *conv;       /* wgrad_hp: dy in the param dtype when it is not */
} lnl_ws;

/* dln's dtype: the param dtype, but FP32 where dln_out joins it (above). */
static f8_dtype dln_dtype(const f8_module *m)
{
    return ((const lnl *)m)->own.return_ln ? F8_DTYPE_FP32 : m->param_dtype;
}

static size_t fwd_layout(const f8_module *m, int64_t T, f8i_layout *l, lnl_ws *w)
{
    place(m, l, T > 0 ? T : 1, 1, &w->fwd);
    w->hp = NULL;
    if (m->fp8 && m->q.unfused)
        w->hp = f8i_take(l, (size_t)(T * m->in_features) * f8_dtype_size(m->param_dtype));
    w->gemm = f8i_take(l, f8i_weight_gemm_workspace(&m->w[0], T, 0));
    w->amax = m->sp ? (float *)f8i_take(l, F8I_SP_AMAX_FLOATS * sizeof(float)) : NULL;
    return l->bytes;
}

static size_t bwd_layout(const f8_module *m, int64_t T, f8i_layout *l, lnl_ws *w)
{
    const int64_t K = m->in_features, N = m->out_features;
    w->reduce = f8i_take(l, f8i_reduce_workspace_bytes(T, N > K ? N : K));
    w->dln = f8i_take(l, (size_t)(T * K) * f8_dtype_size(dln_dtype(m)));
    w->conv = NULL;
    if (m->fp8) {
        w->g8 = f8i_take_qbuf((f8_module *)m, l, F8_DIR_BACKWARD, T, N, !m->q.wgrad_hp);
        w->lnt = (uint8_t *)f8i_take(l, (size_t)(T * K));
        if (m->q.wgrad_hp) w->conv = f8i_take(l, (size_t)(T * N) * 4);
    }
    w->hp = NULL;
    w->dln32 = NULL;
    memset(&w->rln, 0, sizeof w->rln);
    if (!m->recompute_norm) { /* only where dln_out joins dln, or a BF16 dln goes to the reduce-scatter */
        if (((const lnl *)m)->own.return_ln || (m->sp && dln_dtype(m) != F8_DTYPE_FP32))
            w->dln32 = (float *)f8i_take(l, (size_t)(T * K) * 4);
    } else { /* in dln32's place (neither return_layernorm_output nor sequence parallel with it) */
        const size_t es = f8_dtype_size(m->param_dtype);
        w->rln.data = (uint8_t *)f8i_take(l, (size_t)(T * K) * (m->fp8 ? 1 : es));
        w->rln.scale_inv = w->rln.scale_inv_t = (float *)f8i_take(l, sizeof(float)); /* TENSOR: one scalar */
        w->rln.dtype = f8_ctx_slot_dtype(m->ctx, F8_DIR_FORWARD);
        if (m->fp8 && m->q.unfused) w->hp = f8i_take(l, (size_t)(T * K) * es);
    }
    w->gemm = f8i_take(l, f8i_weight_gemm_workspace(&m->w[0], T, 1));
    w->dln_local = m->sp ? (float *)f8i_take(l, (size_t)(T / f8i_sp_size(m) * K) * 4) : NULL;
    return l->bytes;
}

static size_t workspace(const f8_module *m, int64_t T, int backward)
{
    lnl_ws w;
    f8i_layout l = f8i_layout_at(NULL);
    return backward ? bwd_layout(m, T, &l, &w) : fwd_layout(m, T, &l, &w);
}

static f8_status forward(f8_module *m, const f8_tensor *x, f8_tensor *y, f8_tensor *ln_out, f8_microbatch mb,
                         f8_saved *saved, const f8_tensor *residual)
{
    f8_ctx *ctx = m->ctx;
    const int64_t T = f8i_sp_tokens(m, x->rows), K = m->in_features;
    const int fp8 = m->fp8, return_ln = ((lnl *)m)->own.return_ln;
    if (return_ln && m->sp)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "f8_layernorm_linear_forward: return_layernorm_output with "
                                                  "sequence parallel is not supported");
    if (return_ln && !ln_out)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_forward: ln_out is NULL but the module "
                                                       "returns its norm output (return_layernorm_output; call "
                                                       "f8_layernorm_linear_forward)");
    if (!return_ln && ln_out)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_forward: ln_out given but the module was "
                                                       "created without return_layernorm_output");
    F8I_TRY(ln_out ? f8i_check_act(ctx, ln_out, "f8_layernorm_linear_forward: ln_out", T, K, -1) : F8_OK);

    lnl_ws ws;
    f8i_layout l = f8i_module_workspace(m);
    fwd_layout(m, T, &l, &ws); /* inference keeps the norm output and statistics here */
    const lnl_saved *s = saved ? (const lnl_saved *)saved->impl : &ws.fwd;
    /* recompute_norm training: the GEMM input lives in the workspace (the
     * statistics and the scale are saved; backward makes it again) */
    const lnl_saved *o = saved && m->recompute_norm ? &ws.fwd : s;
    /* block scaling training: also ln8ᵀ with its own tiles, for wgrad */
    f8i_qbuf q = {(uint8_t *)o->ln, saved ? s->lnt : NULL, o->ln_sinv, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD),
                  f8i_quantizer_sinv(&m->q, o->ln_sinv, s->lnt_sinv), m->q.act};
    f8_status st;
    /* wgrad_hp training: the high-precision norm output is the saved wgrad operand */
    void *ln_hp = saved && s->ln_hp ? s->ln_hp : NULL;
    if (!return_ln) { /* FP8 (the cast fused with the norm, or after it) or the param dtype; gathered */
        st = f8i_module_norm_input(m, x, SLOT_INPUT, &q, ln_hp ? ln_hp : ws.hp, s->mu, s->rsigma, ws.amax);
    } else if (fp8) {
        st = f8i_norm_forward(ctx, &m->norm, x, ln_out->data, ln_out->dtype, NULL, NULL, s->mu, s->rsigma);
        if (st == F8_OK)
            st = f8i_module_quantize(m, ln_out->data, ln_out->dtype, T, K, F8_DIR_FORWARD, SLOT_INPUT, &q, NULL, NULL);
        if (st == F8_OK && ln_hp && T > 0)
            st = f8i_op_convert(ctx, ln_out->data, ln_out->dtype, NULL, ln_hp, m->param_dtype, T * K);
    } else {
        st = f8i_norm_forward(ctx, &m->norm, x, s->ln, m->param_dtype, NULL, NULL, s->mu, s->rsigma);
        if (st == F8_OK && T > 0)
            st = f8i_op_convert(ctx, s->ln, m->param_dtype, NULL, ln_out->data, ln_out->dtype, T * K);
    }
    if (st == F8_OK && s->scale) st = f8i_module_norm_keep_scale(m, SLOT_INPUT, s->scale);
    if (st == F8_OK && fp8) st = f8i_weight_cast(ctx, &m->w[0], mb, saved != NULL);
    if (st != F8_OK) return st;
    const f8i_operand lo = fp8 ? f8i_qbuf_operand(&q, T, K) : f8i_operand_hp(o->ln, m->param_dtype, T, K);
    return f8i_weight_fprop(ctx, &m->w[0], &lo, y->data, y->dtype, residual ? residual->data : NULL, ws.gemm);
}

static f8_status backward(f8_module *m, f8_saved *sv, const f8_tensor *dy, const f8_tensor *dln_out, f8_tensor *dx,
                          int dx_add)
{
    static const char fn[] = "f8_layernorm_linear_backward";
    f8_ctx *ctx = m->ctx;
    const int64_t T = sv->tokens, N = m->out_features, K = m->in_features;
    if (dln_out && !((lnl *)m)->own.return_ln)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: dln_out given but the module does not return its norm "
                                                       "output", fn);
    F8I_TRY(dln_out ? f8i_check_act(ctx, dln_out, "f8_layernorm_linear_backward: dln_out", T, K, -1) : F8_OK);

    const lnl_saved *s = (const lnl_saved *)sv->impl;
    f8i_weight *w = &m->w[0];
    lnl_ws ws;
    f8i_layout l = f8i_module_workspace(m);
    bwd_layout(m, T, &l, &ws);
    const f8_dtype ddt = dln_dtype(m);
    /* the norm output: saved, or made again as the forward made it */
    const void *ln = s->ln;
    const float *ln_sinv = s->ln_sinv;
    if (m->recompute_norm) {
        F8I_TRY(f8i_module_norm_recompute(m, sv, s->scale, &ws.rln, ws.hp));
        ln = ws.rln.data;
        ln_sinv = ws.rln.scale_inv;
    }
    f8_status st;
    if (m->fp8) {
        const f8i_qbuf *g = &ws.g8;
        st = f8i_module_quantize(m, dy->data, dy->dtype, T, N, F8_DIR_BACKWARD, SLOT_GRAD_OUTPUT, g, w, ws.reduce);
        const f8i_operand go = f8i_qbuf_operand(g, T, N);
        if (st == F8_OK) st = f8i_weight_dgrad(ctx, w, &go, ws.dln, ddt, 0, ws.gemm);
        if (m->q.wgrad_hp) {
            if (st == F8_OK)
                st = f8i_weight_wgrad_hp(ctx, w, dy->data, dy->dtype, s->ln_hp, m->param_dtype, T, sv->microbatch,
                                         ws.conv);
        } else {
            const uint8_t *lnt = s->lnt ? s->lnt : ws.lnt; /* block scaling saved it; else transpose the codes */
            if (st == F8_OK && !s->lnt) st = f8i_op_transpose_u8(ctx, (const uint8_t *)ln, ws.lnt, T, K, NULL);
            const f8i_operand lo = {ln, lnt, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), m->q.act, ln_sinv,
                                    s->lnt ? s->lnt_sinv : ln_sinv, T, K};
            if (st == F8_OK) st = f8i_weight_wgrad(ctx, w, &go, &lo, sv->microbatch, ws.gemm);
        }
    } else {
        const f8i_operand go = f8i_operand_hp(dy->data, dy->dtype, T, N);
        const f8i_operand lo = f8i_operand_hp(ln, m->param_dtype, T, K);
        st = f8i_weight_dgrad(ctx, w, &go, ws.dln, ddt, 0, NULL);
        if (st == F8_OK) st = f8i_weight_wgrad(ctx, w, &go, &lo, sv->microbatch, NULL);
        if (st == F8_OK) st = f8i_weight_bgrad(ctx, w, dy->data, T);
    }
    if (st == F8_OK && dln_out && T > 0) {
        /* The returned norm output's gradient joins dgrad before the norm backward (dln is FP32 here). */
        const void *add = dln_out->data;
        if (dln_out->dtype != F8_DTYPE_FP32) {
            st = f8i_op_convert(ctx, dln_out->data, dln_out->dtype, NULL, ws.dln32, F8_DTYPE_FP32, T * K);
            add = ws.dln32;
        }
        if (st == F8_OK) st = f8i_op_add(ctx, ws.dln, add, F8_DTYPE_FP32, T * K);
    }
    if (st == F8_OK) /* the norm backward's store adds the residual's dx (dx_add) */
        st = f8i_module_norm_backward(m, sv, ws.dln, ddt, s->mu, s->rsigma, dx, dx_add, ws.reduce, ws.dln32,
                                      ws.dln_local);
    return st;
}

/* The norm writes the GEMM input: FP8 through INPUT, else in the param dtype. */
static int describe(const f8_module *m, int fp8, f8i_step *s)
{
    int n = 0;
    s[n++] = (f8i_step){F8I_STEP_NORM, 0};
    /* current or block scaling store the norm output in the parameter dtype
     * before its cast (the quantizer's unfused): rounded first */
    if (fp8 && m->q.unfused) s[n++] = (f8i_step){F8I_STEP_ROUND, 0};
    s[n++] = fp8 ? (f8i_step){F8I_STEP_QUANTIZE, SLOT_INPUT} : (f8i_step){F8I_STEP_ROUND, 0};
    s[n++] = (f8i_step){F8I_STEP_GEMM, 0};
    return n;
}

static const f8i_module_class lnl_class = {"LayerNormLinear", "f8_layernorm_linear", 0, sizeof(lnl_saved),
                                           place_saved, forward, backward, describe};

f8_status f8_layernorm_linear_forward(f8_module *m, const f8_tensor *x, f8_tensor *y, f8_tensor *ln_out,
                                      f8_microbatch microbatch, f8_saved *saved)
{
    return f8i_module_forward_aux(m, &lnl_class, x, y, ln_out, microbatch, saved, "f8_layernorm_linear_forward");
}

f8_status f8_layernorm_linear_backward(f8_module *m, f8_saved *saved, const f8_tensor *dy, const f8_tensor *dln_out,
                                       f8_tensor *dx)
{
    return f8i_module_backward_aux(m, &lnl_class, saved, dy, dln_out, dx, "f8_layernorm_linear_backward");
}

f8_layernorm_linear_config f8_layernorm_linear_config_default(int64_t in_features, int64_t out_features)
{
    f8_layernorm_linear_config c = {.in_features = in_features, .out_features = out_features};
    F8I_NORM_CONFIG_DEFAULTS(c); /* return_layernorm_output 0 */
    return c;
}

f8_status f8_layernorm_linear_create(f8_ctx *ctx, const f8_layernorm_linear_config *c, f8_module **out)
{
    const char *fn = __func__;
    F8I_TRY(f8i_create_check(ctx, fn, c, out));
    if (c->return_layernorm_output != 0 && c->return_layernorm_output != 1)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: config.return_layernorm_output is %d; it must be 0 or 1",
                         fn, c->return_layernorm_output);
    if (c->return_layernorm_output == 1 && c->recompute_norm_output == 1)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: config.recompute_norm_output with return_layernorm_output is "
                                                  "not supported", fn);
    f8i_module_spec s = {0};
    f8i_spec_single_weight(&s, &lnl_class, c->in_features, c->out_features, c->seed);
    F8I_SPEC_FROM_CONFIG(s, c);
    F8I_SPEC_NORM_FROM_CONFIG(s, c);
    s.workspace = workspace;
    const lnl_own own = {c->return_layernorm_output};
    s.module_bytes = sizeof(lnl);
    s.own_offset = offsetof(lnl, own);
    s.own = &own;
    s.own_bytes = sizeof own;
    return f8i_module_create(ctx, &s, fn, out);
}
