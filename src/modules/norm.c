/*
 * modules/norm.c — gamma/beta storage and the calls into the backend's norm
 * ops (formulas in backend.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "modules/module.h"
#include "modules/norm.h"
#include "core/numerics.h"

f8_status f8i_norm_config_check(f8_ctx *ctx, const char *fn, f8_norm kind, float eps)
{
    if (kind != F8_NORM_LAYERNORM && kind != F8_NORM_RMSNORM)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: normalization %d is not LAYERNORM (0) or RMSNORM (1)", fn,
                         (int)kind);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: eps %g must be finite and >= 0", fn, (double)eps);
    return F8_OK;
}

f8_status f8i_norm_create(f8_ctx *ctx, f8i_norm *n, int64_t cols, f8_norm kind, float eps, int zero_centered,
                          f8_dtype dtype, f8_memory_report *acct)
{
    memset(n, 0, sizeof *n);
    n->dtype = dtype;
    n->cols = cols;
    n->rms = kind == F8_NORM_RMSNORM;
    n->zero_centered = zero_centered != 0;
    n->eps = eps;
    const size_t es = f8_dtype_size(dtype), vb = f8i_align256((size_t)cols * es);
    const size_t nb = n->rms ? vb : 2 * vb;
    F8I_TRY(f8i_alloc(ctx, F8_MEM_PARAMETERS, acct, nb, &n->pblock));
    F8I_TRY(f8i_alloc(ctx, F8_MEM_GRADIENTS, acct, nb, &n->gblock));
    unsigned char *p = (unsigned char *)n->pblock, *g = (unsigned char *)n->gblock;
    n->gamma = p;
    n->beta = n->rms ? NULL : p + vb;
    n->dgamma = g;
    n->dbeta = n->rms ? NULL : g + vb;
    F8I_TRY(f8i_op_memset_zero(ctx, n->pblock, nb));
    F8I_TRY(f8i_op_memset_zero(ctx, n->gblock, nb));
    if (n->zero_centered) return F8_OK;
    unsigned char *host = (unsigned char *)malloc((size_t)cols * es + 1);
    if (!host) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "norm init: out of host memory");
    for (int64_t i = 0; i < cols; i++) {
        if (es == 2) ((uint16_t *)host)[i] = f8i_bf16_from_float(1.0f);
        else ((float *)host)[i] = 1.0f;
    }
    const f8_status st = ctx->be->upload(ctx, n->gamma, host, (size_t)cols * es);
    free(host);
    return st;
}

void f8i_norm_destroy(f8_ctx *ctx, f8i_norm *n)
{
    f8i_free(ctx, n->pblock);
    f8i_free(ctx, n->gblock);
    memset(n, 0, sizeof *n);
}

f8_status f8i_norm_zero_grad(f8_ctx *ctx, f8i_norm *n)
{
    const size_t vb = f8i_align256((size_t)n->cols * f8_dtype_size(n->dtype));
    return f8i_op_memset_zero(ctx, n->gblock, n->rms ? vb : 2 * vb);
}

f8_tensor f8i_norm_view(const f8i_norm *n, int beta, int grad)
{
    void *p = beta ? (grad ? n->dbeta : n->beta) : (grad ? n->dgamma : n->gamma);
    return f8_tensor_make(p, n->dtype, 1, n->cols);
}

static f8i_norm_fwd_args fwd_args(const f8i_norm *n, const f8_tensor *x, void *y, f8_dtype y_dtype, float *mu,
                                  float *rsigma)
{
    f8i_norm_fwd_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.x_dtype = x->dtype;
    a.rows = x->rows;
    a.cols = n->cols;
    a.gamma = n->gamma;
    a.beta = n->beta;
    a.param_dtype = n->dtype;
    a.rms = n->rms;
    a.zero_centered = n->zero_centered;
    a.eps = n->eps;
    a.y = y;
    a.y_dtype = y_dtype;
    a.mu = n->rms ? NULL : mu;
    a.rsigma = rsigma;
    return a;
}

f8_status f8i_norm_forward(f8_ctx *ctx, const f8i_norm *n, const f8_tensor *x, void *y, f8_dtype y_dtype,
                           const f8_slot *slot, float *scale_inv, float *mu, float *rsigma)
{
    f8i_norm_fwd_args a = fwd_args(n, x, y, y_dtype, mu, rsigma);
    if (slot) {
        a.scale = f8i_slot_scale(ctx, *slot);
        a.amax = f8i_slot_amax(ctx, *slot);
        a.stats = f8i_slot_stats(ctx, *slot);
        a.scale_inv = scale_inv;
    }
    return f8i_op_norm_fwd(ctx, &a);
}

f8_status f8i_norm_forward_rows(f8_ctx *ctx, const f8i_norm *n, const f8_tensor *x, void *y, f8_dtype y_dtype,
                                f8_slot slot, float *scale_inv, void *hp, float *col_amax, float *mu, float *rsigma)
{
    f8i_norm_fwd_args a = fwd_args(n, x, y, y_dtype, mu, rsigma);
    f8i_quantizer_row_fields(ctx, y_dtype, &a.mode, &a.scaled_max, &a.pow2);
    a.amax = f8i_slot_amax(ctx, slot);
    a.stats = f8i_slot_stats(ctx, slot);
    a.scale_inv = scale_inv;
    a.y_hp = hp;
    a.hp_dtype = n->dtype;
    a.col_amax = col_amax;
    return f8i_op_norm_fwd(ctx, &a);
}

f8_status f8i_norm_forward_scaled(f8_ctx *ctx, const f8i_norm *n, const f8_tensor *x, void *y, f8_dtype y_dtype,
                                  const float *scale, float *scale_inv)
{
    f8i_norm_fwd_args a = fwd_args(n, x, y, y_dtype, NULL, NULL);
    a.scale = scale; /* no amax, no stats: the forward counted this tensor */
    a.scale_inv = scale_inv;
    return f8i_op_norm_fwd(ctx, &a);
}

f8_status f8i_norm_backward(f8_ctx *ctx, f8i_norm *n, const void *dy, f8_dtype dy_dtype, const f8_tensor *x,
                            const float *mu, const float *rsigma, void *dx, f8_dtype dx_dtype, int dx_add,
                            void *reduce)
{
    f8i_norm_bwd_args a;
    memset(&a, 0, sizeof a);
    a.dy = dy;
    a.dy_dtype = dy_dtype;
    a.x = x->data;
    a.x_dtype = x->dtype;
    a.rows = x->rows;
    a.cols = n->cols;
    a.mu = n->rms ? NULL : mu;
    a.rsigma = rsigma;
    a.gamma = n->gamma;
    a.param_dtype = n->dtype;
    a.rms = n->rms;
    a.zero_centered = n->zero_centered;
    a.dx = dx;
    a.dx_dtype = dx_dtype;
    a.dgamma = n->dgamma;
    a.dbeta = n->dbeta;
    a.accumulate = 1;
    a.dx_accumulate = dx_add;
    a.workspace = reduce;
    a.workspace_bytes = f8i_reduce_workspace_bytes(x->rows, n->cols);
    return f8i_op_norm_bwd(ctx, &a);
}

void f8i_norm_saved_place(const f8_module *m, f8i_layout *l, int64_t T, int keep_ln, f8i_norm_saved *s)
{
    const int64_t K = m->in_features;
    const size_t es = m->fp8 ? 1 : f8_dtype_size(m->param_dtype);
    s->ln = keep_ln ? f8i_take(l, (size_t)(T * K) * es) : NULL;
    s->ln_sinv = keep_ln ? f8i_take_sinv(m, l, T, K, sizeof(float)) : NULL;
    s->scale = keep_ln ? NULL : (float *)f8i_take(l, sizeof(float));
    s->mu = (float *)f8i_take(l, (size_t)T * sizeof(float));
    s->rsigma = (float *)f8i_take(l, (size_t)T * sizeof(float));
    s->lnt = NULL;
    s->lnt_sinv = NULL;
    s->ln_hp = NULL;
    if (m->fp8 && m->q.wgrad_hp) { /* wgrad reads the norm output in high precision */
        s->ln_hp = f8i_take(l, (size_t)(T * K) * f8_dtype_size(m->param_dtype));
    } else if (m->fp8 && f8i_quantizer_colwise_from_hp(&m->q)) { /* the column-wise copy is quantized, not transposed */
        s->lnt = (uint8_t *)f8i_take(l, (size_t)(T * K));
        s->lnt_sinv = f8i_take_sinv(m, l, T, K, sizeof(float));
    }
}
