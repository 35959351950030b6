/*
 * modules/weight.c — the weight, its FP8 workspace and its three GEMMs
 * (layouts in weight.h). Every GEMM reads each operand's own scale_inv: the
 * workspace's private one, or the one its cast wrote next to the data.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/numerics.h"
#include "modules/weight.h"
#include "core/ops.h"

/* W ~ N(0, 0.02²) from the seed: f8_tensor_fill_normal's draws, uploaded. */
static f8_status init_normal(f8_ctx *ctx, void *dst, f8_dtype dtype, int64_t n, uint64_t seed)
{
    f8_tensor t = f8_tensor_make(dst, dtype, 1, n);
    return f8_tensor_fill_normal(ctx, &t, 0.02, seed);
}

/* dst[0..n) = value in dtype (host round trip: creation time only). */
static f8_status fill_value(f8_ctx *ctx, void *dst, f8_dtype dtype, int64_t n, float value)
{
    const size_t es = f8_dtype_size(dtype);
    unsigned char *host = (unsigned char *)malloc((size_t)n * es + 1);
    if (!host) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "weight init: out of host memory");
    for (int64_t i = 0; i < n; i++) {
        if (es == 2) ((uint16_t *)host)[i] = f8i_bf16_from_float(value);
        else ((float *)host)[i] = value;
    }
    f8_status st = ctx->be->upload(ctx, dst, host, (size_t)n * es);
    free(host);
    return st;
}

/* FP8 primary weight: quantize the usual init, drawn into a temporary. */
static f8_status init_primary(f8_ctx *ctx, f8i_weight *w, uint64_t seed)
{
    const int64_t n = w->rows * w->cols;
    void *tmp = NULL;
    F8I_TRY(f8i_alloc(ctx, F8_MEM_OTHER, NULL, (size_t)(n ? n : 1) * f8_dtype_size(w->dtype), &tmp));
    f8_status st = init_normal(ctx, tmp, w->dtype, n, seed);
    f8i_cast_args c = {0};
    c.src = tmp;
    c.src_dtype = w->dtype;
    c.rows = w->rows;
    c.cols = w->cols;
    c.out_dtype = w->w8->dtype;
    c.out = w->w8->data;
    c.scale = f8i_slot_scale(ctx, w->slot);
    c.scale_inv = w->w8->scale_inv; /* no amax: TE's init passes a dummy one */
    if (st == F8_OK) st = f8i_slot_prepare(ctx, w->slot, c.out_dtype, tmp, w->dtype, n, NULL, 0, &c.amax);
    if (st == F8_OK) st = f8i_op_cast(ctx, &c);
    if (st == F8_OK) st = ctx->be->synchronize(ctx);
    f8i_free(ctx, tmp);
    return st;
}

f8_status f8i_weight_create(f8_ctx *ctx, f8i_weight *w, const f8i_weight_spec *sp)
{
    memset(w, 0, sizeof *w);
    w->dtype = sp->dtype;
    w->rows = sp->rows;
    w->cols = sp->cols;
    w->fp8 = sp->fp8;
    w->fp8_primary = sp->fp8 && sp->fp8_primary;
    w->fuse_wgrad = sp->fuse_wgrad;
    w->slot = sp->slot;
    w->transpose_per_call = sp->fp8 && sp->transpose_per_call;
    if (w->transpose_per_call && !f8i_scaling_colwise_is_transpose(sp->mode))
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "weight_transpose_per_call is for per-tensor scaling (delayed or "
                                                  "current): block and row-wise weights quantize both orientations");
    const size_t es = f8_dtype_size(sp->dtype);
    const int64_t T = sp->max_tokens > 0 ? sp->max_tokens : 1;
    const size_t wb = f8i_align256((size_t)(sp->rows * sp->cols) * es);
    const size_t bb = sp->bias ? f8i_align256((size_t)sp->rows * es) : 0;
    const size_t ob = (!sp->fp8 && sp->bias) ? f8i_align256((size_t)T * es) : 0;
    const size_t pw = w->fp8_primary ? 0 : wb; /* a primary weight lives in w8 only */
    const size_t gw = w->fuse_wgrad ? 0 : wb;  /* fused: wgrad goes to the caller's main_grad, never to dw */
    f8_status st = F8_OK;
    if (pw + bb + ob) st = f8i_alloc(ctx, F8_MEM_PARAMETERS, sp->acct, pw + bb + ob, &w->pblock);
    if (st == F8_OK && gw + bb) st = f8i_alloc(ctx, F8_MEM_GRADIENTS, sp->acct, gw + bb, &w->gblock);
    if (st != F8_OK) {
        f8i_weight_destroy(ctx, w); /* the caller only destroys weights that were made */
        return st;
    }
    unsigned char *p = (unsigned char *)w->pblock, *g = (unsigned char *)w->gblock;
    w->w = pw ? p : NULL;
    w->b = bb ? p + pw : NULL;
    w->ones = ob ? p + pw + bb : NULL;
    w->dw = gw ? g : NULL;
    w->db = bb ? g + gw : NULL;
    if (gw + bb) st = f8i_op_memset_zero(ctx, w->gblock, gw + bb);
    if (st == F8_OK && w->b) st = f8i_op_memset_zero(ctx, w->b, bb);
    if (st == F8_OK && w->ones) st = fill_value(ctx, w->ones, sp->dtype, T, 1.0f);
    if (st == F8_OK && w->w) st = init_normal(ctx, w->w, sp->dtype, sp->rows * sp->cols, sp->seed);
    if (st == F8_OK && sp->fp8) {
        f8_mem_category cat = w->fp8_primary ? F8_MEM_PARAMETERS : F8_MEM_WORKSPACE_DATA;
        st = f8i_qtensor_create(ctx, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), sp->rows, sp->cols, sp->acct, cat,
                                F8_MEM_WORKSPACE_TRANSPOSE, &w->w8);
    }
    if (st == F8_OK && sp->fp8) st = f8i_qtensor_reserve_scales(w->w8, sp->mode);
    if (st == F8_OK && w->fp8_primary) {
        st = init_primary(ctx, w, sp->seed);
        w->w8_filled = 1;
    }
    if (st != F8_OK) f8i_weight_destroy(ctx, w); /* the caller only destroys weights that were made */
    return st;
}

void f8i_weight_destroy(f8_ctx *ctx, f8i_weight *w)
{
    f8_qtensor_destroy(w->w8);
    f8i_free(ctx, w->pblock);
    f8i_free(ctx, w->gblock);
    memset(w, 0, sizeof *w);
}

f8_status f8i_weight_cast(f8_ctx *ctx, f8i_weight *w, f8_microbatch mb, int with_transpose)
{
    if (w->transpose_per_call) with_transpose = 0; /* each dgrad makes its own */
    if (w->fp8_primary) {
        /* TE: transpose_2d(fill_cache=True, noop_flag=skip) when training with
         * is_first_microbatch or a skip flag; otherwise dgrad makes it lazily. */
        if (with_transpose && ctx->weight_noop) return f8_qtensor_transpose(w->w8, ctx->noop);
        if (with_transpose && mb == F8_MICROBATCH_FIRST) return f8_qtensor_transpose(w->w8, NULL);
        return F8_OK;
    }
    const float *noop = NULL;
    if (w->w8_filled && ctx->weight_noop) noop = ctx->noop; /* graph mode: the device flag decides */
    else if (mb == F8_MICROBATCH_NOT_FIRST && w->w8_filled) return F8_OK;
    f8_tensor src = f8i_weight_view(w, 0);
    f8_status st = f8i_qtensor_cast(w->w8, &src, w->slot, with_transpose, noop);
    if (st == F8_OK) w->w8_filled = 1;
    return st;
}

f8_status f8i_weight_write(f8_ctx *ctx, f8i_weight *w, const f8_tensor *src, const char *fn)
{
    char name[96];
    snprintf(name, sizeof name, "%s: src", fn);
    F8I_TRY(f8i_check_act(ctx, src, name, w->rows, w->cols, -1));
    if (w->fp8_primary) return f8_qtensor_quantize(w->w8, src, w->slot, 0, NULL);
    F8I_TRY(f8i_op_convert(ctx, src->data, src->dtype, NULL, w->w, w->dtype, w->rows * w->cols));
    w->w8_filled = 0; /* the next forward casts, whatever its microbatch */
    return F8_OK;
}

f8_status f8i_weight_quantize_part(f8_ctx *ctx, f8i_weight *w, const void *src, f8_dtype src_dtype, int64_t n,
                                   void *codes)
{
    if (n == 0) return F8_OK;
    f8i_cast_args c = {0};
    c.src = src;
    c.src_dtype = src_dtype;
    c.rows = 1;
    c.cols = n;
    c.out_dtype = w->w8->dtype;
    c.out = (uint8_t *)codes;
    c.scale = f8i_slot_scale(ctx, w->slot);
    c.stats = f8i_slot_stats(ctx, w->slot);
    f8_status st = f8i_slot_prepare(ctx, w->slot, c.out_dtype, src, src_dtype, n, NULL, 1, &c.amax);
    return st == F8_OK ? f8i_op_cast(ctx, &c) : st;
}

f8_status f8i_weight_write_codes(f8_ctx *ctx, f8i_weight *w, const void *codes)
{
    f8_status st = f8i_op_copy(ctx, w->w8->data, codes, (size_t)(w->rows * w->cols));
    /* scale_inv = 1/scale as the cast that made the codes writes it: an empty
     * cast writes only its scale_inv (backend.h), so the bits are the cast's */
    f8i_cast_args c = {0};
    c.src_dtype = F8_DTYPE_FP32;
    c.cols = w->cols;
    c.out_dtype = w->w8->dtype;
    c.scale = f8i_slot_scale(ctx, w->slot);
    c.scale_inv = w->w8->scale_inv;
    if (st == F8_OK) st = f8i_op_cast(ctx, &c);
    if (st == F8_OK) w->w8->t_valid = 0; /* as after f8i_weight_write: the next FIRST forward or dgrad remakes it */
    return st;
}

f8_status f8i_weight_zero_grad(f8_ctx *ctx, f8i_weight *w)
{
    const size_t es = f8_dtype_size(w->dtype);
    f8_status st = F8_OK; /* a fused weight's main_grad is the caller's: FIRST overwrites it */
    if (w->dw) st = f8i_op_memset_zero(ctx, w->dw, (size_t)(w->rows * w->cols) * es);
    if (st == F8_OK && w->db) st = f8i_op_memset_zero(ctx, w->db, (size_t)w->rows * es);
    return st;
}

f8_tensor f8i_weight_view(const f8i_weight *w, int grad)
{
    if (!grad && w->fp8_primary) {
        f8_tensor v = f8_tensor_make(w->w8->data, w->w8->dtype, w->rows, w->cols);
        v.scale_inv = w->w8->scale_inv;
        return v;
    }
    if (grad && w->fuse_wgrad) return f8_tensor_make(w->main_grad, F8_DTYPE_FP32, w->rows, w->cols); /* NULL: unset */
    return f8_tensor_make(grad ? w->dw : w->w, w->dtype, w->rows, w->cols);
}

f8_tensor f8i_bias_view(const f8i_weight *w, int grad) { return f8_tensor_make(grad ? w->db : w->b, w->dtype, 1, w->rows); }

static f8i_gemm_args gemm(int64_t m, int64_t n, int64_t k)
{
    f8i_gemm_args g;
    memset(&g, 0, sizeof g);
    g.m = m;
    g.n = n;
    g.k = k;
    return g;
}

/* The workspace of one FP8 GEMM shape, the larger over an FP32 and a BF16 D
 * (they break the n rule at different n). */
static size_t gemm_ws(int64_t m, int64_t n, int64_t k, int accumulate, const f8i_weight *bias_of)
{
    f8i_gemm_args g = gemm(m, n, k);
    g.a_dtype = F8_DTYPE_E4M3;
    g.accumulate = accumulate;
    g.bias = bias_of ? bias_of->b : NULL; /* only its presence and dtype count */
    g.bias_dtype = bias_of ? bias_of->dtype : F8_DTYPE_FP32;
    g.d_dtype = F8_DTYPE_FP32;
    const size_t f = f8i_gemm_workspace_bytes(&g);
    g.d_dtype = F8_DTYPE_BF16;
    const size_t h = f8i_gemm_workspace_bytes(&g);
    return f > h ? f : h;
}

/* The backward GEMMs' workspace (dgrad's and wgrad's workspace_bytes). */
static size_t bwd_gemm_ws(const f8i_weight *w, int64_t T)
{
    size_t most = gemm_ws(T, w->cols, w->rows, 0, NULL); /* dgrad */
    const size_t dgrad_add = gemm_ws(T, w->cols, w->rows, 1, NULL);
    if (dgrad_add > most) most = dgrad_add;
    const size_t wgrad = gemm_ws(w->rows, w->cols, T, 1, NULL);
    const size_t below = T % 16 == 0 && T > 1 ? gemm_ws(w->rows, w->cols, T - 1, 1, NULL) : 0;
    if (wgrad > most) most = wgrad;
    return below > most ? below : most;
}

/* Monotonic in T, as the base needs (it reserves the size at max_tokens for
 * every call): fprop and dgrad have T as m, which only scales sizes, but
 * wgrad has T as k, so an aligned T needs nothing where T - 1 needs its
 * operands padded to T; the size at T is the largest over T' <= T. */
size_t f8i_weight_gemm_workspace(const f8i_weight *w, int64_t T, int backward)
{
    if (!w->fp8) return 0;
    /* fprop and dgrad with or without their *_add addend (which may pad D
     * in FP32 where the plain call pads it in BF16) */
    if (!backward) {
        const size_t plain = gemm_ws(T, w->rows, w->cols, 0, w), add = gemm_ws(T, w->rows, w->cols, 1, w);
        return plain > add ? plain : add;
    }
    const size_t gemms = bwd_gemm_ws(w, T);
    return w->transpose_per_call ? f8i_align256(gemms) + (size_t)(w->rows * w->cols) : gemms;
}

/* Hand a GEMM its workspace (the pass's, sized by f8i_weight_gemm_workspace). */
static void set_ws(f8i_gemm_args *g, void *gws, size_t bytes)
{
    g->workspace = gws;
    g->workspace_bytes = gws ? bytes : 0;
}

/* The weight as the GEMMs' B: W8 (FP8; the block grid of W8 or W8ᵀ under
 * block scaling) or W in the param dtype. */
static void weight_b(const f8i_weight *w, int transposed, f8i_gemm_args *g)
{
    if (!w->fp8) {
        g->b = w->w;
        g->b_dtype = w->dtype;
        return;
    }
    const f8i_operand o = f8i_qtensor_operand(w->w8);
    g->b = transposed ? o.data_t : o.data;
    g->b_dtype = o.dtype;
    g->b_scale_inv = transposed ? o.scale_inv_t : o.scale_inv;
    g->b_mode = o.mode;
}

/* An activation operand as the GEMMs' A, in the orientation asked for. */
static void operand_a(const f8i_operand *o, int transposed, f8i_gemm_args *g)
{
    g->a = transposed ? o->data_t : o->data;
    g->a_dtype = o->dtype;
    g->a_scale_inv = transposed ? o->scale_inv_t : o->scale_inv;
    g->a_mode = o->mode;
}

f8_status f8i_weight_fprop(f8_ctx *ctx, const f8i_weight *w, const f8i_operand *x, void *y, f8_dtype y_dtype,
                           const void *residual, void *gws)
{
    const int64_t T = x->rows;
    f8i_gemm_args g = gemm(T, w->rows, w->cols);
    operand_a(x, 0, &g);
    weight_b(w, 0, &g);
    g.d = y;
    g.d_dtype = y_dtype;
    g.c = residual;
    g.bias = w->b;
    g.bias_dtype = w->dtype;
    if (w->fp8) set_ws(&g, gws, f8i_weight_gemm_workspace(w, T, 0));
    return f8i_op_gemm(ctx, &g);
}

f8_status f8i_weight_dgrad(f8_ctx *ctx, f8i_weight *w, const f8i_operand *dy, void *dx, f8_dtype dx_dtype,
                           int accumulate, void *gws)
{
    const int64_t T = dy->rows;
    f8i_gemm_args g = gemm(T, w->cols, w->rows);
    operand_a(dy, 0, &g);
    g.d = dx;
    g.d_dtype = dx_dtype;
    g.accumulate = accumulate;
    if (w->fp8 && w->transpose_per_call) {
        /* W8ᵀ made now, after the pass's GEMM workspace, with W8's scale_inv (the same bits as the cache's) */
        if (!gws) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "dgrad: a per-call weight transpose needs gws");
        const size_t gb = bwd_gemm_ws(w, T);
        uint8_t *wt = (uint8_t *)gws + f8i_align256(gb);
        f8_tensor t = f8_tensor_make(wt, w->w8->dtype, w->cols, w->rows);
        F8I_TRY(f8_qtensor_transpose_into(w->w8, &t));
        weight_b(w, 1, &g);
        g.b = wt;
        g.split_accum = 1;
        set_ws(&g, gws, gb);
    } else if (w->fp8) {
        F8I_TRY(f8i_qtensor_colwise(w->w8)); /* a no-op when the forward cast made it */
        weight_b(w, 1, &g); /* W8ᵀ [cols, rows] */
        g.split_accum = 1;
        set_ws(&g, gws, bwd_gemm_ws(w, T));
    } else {
        weight_b(w, 0, &g); /* B(k, n) = W stored [rows, cols] */
        g.b_trans = 1;
    }
    return f8i_op_gemm(ctx, &g);
}

f8_status f8i_weight_wgrad(f8_ctx *ctx, f8i_weight *w, const f8i_operand *dy, const f8i_operand *x,
                           f8_microbatch mb, void *gws)
{
    const int64_t T = dy->rows;
    const int q8 = w->fp8 && f8i_operand_fp8(dy); /* FP8 operands, or a high-precision wgrad (wgrad_hp) */
    f8i_gemm_args g = gemm(w->rows, w->cols, T);
    operand_a(dy, q8, &g);
    g.b = q8 ? x->data_t : x->data;
    g.b_dtype = x->dtype;
    g.b_scale_inv = q8 ? x->scale_inv_t : x->scale_inv;
    g.b_mode = x->mode;
    if (q8) {
        g.split_accum = 1; /* dyᵀ [rows, T] and xᵀ [cols, T] are K-contiguous */
        set_ws(&g, gws, bwd_gemm_ws(w, T));
    } else {
        g.a_trans = 1; /* A(n, t) = dy stored [T, rows] */
        g.b_trans = 1; /* B(k, t) = x stored [T, cols] */
    }
    if (w->fuse_wgrad) {
        g.d = w->main_grad;
        g.d_dtype = F8_DTYPE_FP32;
        g.accumulate = mb != F8_MICROBATCH_FIRST; /* spec §4.3 */
    } else {
        g.d = w->dw;
        g.d_dtype = w->dtype;
        g.accumulate = 1;
    }
    return f8i_op_gemm(ctx, &g);
}

f8_status f8i_weight_wgrad_hp(f8_ctx *ctx, f8i_weight *w, const void *dy, f8_dtype dy_dtype, const void *x,
                              f8_dtype x_dtype, int64_t T, f8_microbatch mb, void *conv)
{
    if (dy_dtype != x_dtype) { /* the GEMM's operands share a dtype: dy in x's */
        F8I_TRY(f8i_op_convert(ctx, dy, dy_dtype, NULL, conv, x_dtype, T * w->rows));
        dy = conv;
    }
    const f8i_operand g = f8i_operand_hp(dy, x_dtype, T, w->rows), xo = f8i_operand_hp(x, x_dtype, T, w->cols);
    return f8i_weight_wgrad(ctx, w, &g, &xo, mb, NULL);
}

f8_status f8i_weight_bgrad(f8_ctx *ctx, f8i_weight *w, const void *g_in, int64_t T)
{
    if (!w->db) return F8_OK;
    f8i_gemm_args g = gemm(1, w->rows, T); /* db[1, rows] += ones[1, T] · g: B(n, t) = g stored [T, rows] */
    g.a = w->ones;
    g.a_dtype = w->dtype;
    g.b = g_in;
    g.b_dtype = w->dtype;
    g.b_trans = 1;
    g.d = w->db;
    g.d_dtype = w->dtype;
    g.accumulate = 1;
    return f8i_op_gemm(ctx, &g);
}

f8_status f8i_check_act(f8_ctx *ctx, const f8_tensor *t, const char *name, int64_t rows, int64_t cols, int must)
{
    F8I_TRY(f8i_check_tensor(ctx, t, name));
    if (t->dtype != F8_DTYPE_FP32 && t->dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s must be fp32 or bf16, not %s", name, f8_dtype_name(t->dtype));
    if (must >= 0 && t->dtype != (f8_dtype)must)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s is %s but FP8 is off and the parameters are %s", name,
                         f8_dtype_name(t->dtype), f8_dtype_name((f8_dtype)must));
    if (rows < 0 && t->cols != cols) /* any number of tokens */
        return f8i_error(ctx, F8_ERR_SHAPE, "%s is [%lld, %lld], expected [T, %lld]", name, (long long)t->rows,
                         (long long)t->cols, (long long)cols);
    if (rows >= 0 && (t->rows != rows || t->cols != cols))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s is [%lld, %lld], expected [%lld, %lld]", name, (long long)t->rows,
                         (long long)t->cols, (long long)rows, (long long)cols);
    return F8_OK;
}

f8_status f8i_check_fp8_weights(f8_ctx *ctx, const char *fn, int fp8, int fp8_weights)
{
    const f8i_quantizer q = f8i_quantizer_for(ctx);
    if (fp8_weights) F8I_TRY(f8i_quantizer_check_fp8_weights(ctx, &q, fn));
    if (fp8_weights && !fp8)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: fp8_weights = 1 needs fp8 = 1 (an FP8 primary weight is "
                                                       "only used by FP8 GEMMs)", fn);
    return F8_OK;
}

void f8i_module_memory(const f8_ctx *ctx, const f8_memory_report *mem, int n_slots, f8_memory_report *out)
{
    *out = *mem;
    size_t scaling = (size_t)n_slots * ((size_t)ctx->recipe.amax_history_len + 2) * sizeof(float);
    out->bytes[F8_MEM_SCALING_STATE] += scaling;
    out->total += scaling;
}
