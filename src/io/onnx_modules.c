/*
 * io/onnx_modules.c — f8 objects as ONNX nodes: a module from the steps its
 * class describes (modules/module.h), attention, the embedding, residual
 * adds and slices (f8.h, "ONNX export" has the operator table).
 *
 * Design note. The exporter reproduces f8's forward arithmetic, not a
 * textbook one: FP8 weights are cast on the host with f8's own encoder
 * (numerics.h, fp8(w · scale) with the FP32 product, this file built with
 * -ffp-contract=off like the CPU backend), so the codes are bit for bit what
 * a forward with F8_MICROBATCH_NONE casts on either backend; the scales are
 * read from the slots now; every value f8 keeps in BF16 is rounded where f8
 * rounds it. What remains are FP32 summation orders and libm's last bits
 * (and, unless exact_cast, QuantizeLinear's division: f8.h). The one
 * deliberate departure is config.fp8_embedding: the embedding table as
 * per-row FP8, which f8 never computes with (fp8_rows_param). Each helper
 * returns its output's name, or NULL with *st set, and the public call rolls
 * the graph back.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/numerics.h"
#include "io/onnx.h"
#include "modules/module.h"
#include "nn/attention.h"

/* Record the first failure: a ctx error already set (st_in), else OOM. */
static const char *fail(f8_onnx *g, f8_status *st, f8_status st_in)
{
    if (*st == F8_OK) *st = st_in != F8_OK ? st_in : f8i_onnx_oom(g);
    return NULL;
}

/* A node of one output (named after its type); NULL on failure. node, when
 * not NULL, receives it for attributes. */
static const char *opn(f8_onnx *g, f8_status *st, const char *type, f8i_onnx_node **node, int n_in,
                       const char *const *in)
{
    const char *out = f8i_onnx_tmp(g, type);
    f8i_onnx_node *n = f8i_onnx_node_add(g, type, n_in, in, 1, &out);
    if (node) *node = n;
    return n ? out : fail(g, st, F8_OK);
}
#define OPN(type, node, ...)                                                                                           \
    opn(g, st, type, node, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)),                      \
        (const char *const[]){__VA_ARGS__})
#define OP1(type, a) OPN(type, NULL, a)
#define OP2(type, a, b) OPN(type, NULL, a, b)

/* ---- parameters ---------------------------------------------------------------- */

/* count elements of backend memory (FP32, BF16 or FP8 with *sinv) as host floats. */
static float *to_host(f8_onnx *g, f8_status *st, const void *src, f8_dtype dt, const float *sinv, size_t count)
{
    const size_t es = f8_dtype_size(dt);
    float *out = (float *)malloc(count * sizeof(float) + 1);
    unsigned char *raw = (unsigned char *)malloc(count * es + 1);
    float s = 1.0f;
    f8_status r = out && raw ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    if (r == F8_OK) r = f8_ctx_download(f8i_onnx_ctx(g), raw, src, count * es);
    if (r == F8_OK && sinv) r = f8_ctx_download(f8i_onnx_ctx(g), &s, sinv, sizeof s);
    for (size_t i = 0; r == F8_OK && i < count; i++) {
        if (dt == F8_DTYPE_BF16) out[i] = f8i_bf16_to_float((uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8));
        else if (dt == F8_DTYPE_FP32) memcpy(&out[i], raw + 4 * i, 4);
        else out[i] = f8i_fp8_decode(raw[i], dt == F8_DTYPE_E5M2) * s;
    }
    free(raw);
    if (r != F8_OK) {
        free(out);
        fail(g, st, r == F8_ERR_OUT_OF_MEMORY ? F8_OK : r);
        return NULL;
    }
    return out;
}

/* A float initializer of a [n] parameter (gain: 1 + x when zero_centered). */
static const char *vector(f8_onnx *g, f8_status *st, const void *src, f8_dtype dt, int64_t n, int plus_one)
{
    float *h = to_host(g, st, src, dt, NULL, (size_t)n);
    if (!h) return NULL;
    for (int64_t i = 0; plus_one && i < n; i++) h[i] = 1.0f + h[i];
    const char *v = f8i_onnx_init(g, "param", F8I_ONNX_FLOAT, &n, 1, h, (size_t)n * 4);
    return v ? v : fail(g, st, F8_OK);
}

/* The float value [rows, cols] of a high-precision parameter (FP32 as is,
 * BF16 stored as BF16 with a Cast), or of FP8 codes with their scale_inv
 * (DequantizeLinear); stored once per backend pointer. */
static const char *hp_param(f8_onnx *g, f8_status *st, const void *src, f8_dtype dt, const float *sinv,
                            int64_t rows, int64_t cols)
{
    const char *v = f8i_onnx_cache_find(g, src, F8I_FORM_HP);
    if (v) return v;
    const size_t n = (size_t)(rows * cols), es = f8_dtype_size(dt);
    void *raw = malloc(n * es + 1);
    f8_status r = raw ? f8_ctx_download(f8i_onnx_ctx(g), raw, src, n * es) : F8_ERR_OUT_OF_MEMORY;
    if (r != F8_OK) {
        free(raw);
        return fail(g, st, r == F8_ERR_OUT_OF_MEMORY ? F8_OK : r);
    }
    const int64_t dims[2] = {rows, cols};
    const int type = dt == F8_DTYPE_FP32   ? F8I_ONNX_FLOAT
                     : dt == F8_DTYPE_BF16 ? F8I_ONNX_BF16
                     : dt == F8_DTYPE_E5M2 ? F8I_ONNX_E5M2
                                           : F8I_ONNX_E4M3;
    const char *init = f8i_onnx_init(g, "weight", type, dims, 2, raw, n * es);
    if (!init) return fail(g, st, F8_OK);
    if (dt == F8_DTYPE_FP32) {
        v = init;
    } else if (dt == F8_DTYPE_BF16) {
        f8i_onnx_node *c = NULL;
        v = OPN("Cast", &c, init);
        if (v) f8i_onnx_attr_int(c, "to", F8I_ONNX_FLOAT);
    } else {
        float s = 1.0f;
        r = f8_ctx_download(f8i_onnx_ctx(g), &s, sinv, sizeof s);
        if (r != F8_OK) return fail(g, st, r);
        v = OPN("DequantizeLinear", NULL, init, f8i_onnx_const_float(g, s), f8i_onnx_zero_point(g, dt));
    }
    if (v && (r = f8i_onnx_cache_add(g, src, F8I_FORM_HP, v)) != F8_OK) return fail(g, st, r);
    return v;
}

/* The float value Wᵀ [cols, rows] of a weight in high precision. */
static const char *hp_weight_t(f8_onnx *g, f8_status *st, const f8i_weight *w)
{
    const f8_tensor view = f8i_weight_view(w, 0);
    const char *v = f8i_onnx_cache_find(g, view.data, F8I_FORM_HP_T);
    if (v) return v;
    const char *p = hp_param(g, st, view.data, view.dtype, view.scale_inv, w->rows, w->cols);
    f8i_onnx_node *t = NULL;
    v = p ? OPN("Transpose", &t, p) : NULL;
    const int64_t perm[2] = {1, 0};
    if (v) f8i_onnx_attr_ints(t, "perm", perm, 2);
    f8_status r = v ? f8i_onnx_cache_add(g, view.data, F8I_FORM_HP_T, v) : F8_OK;
    return r == F8_OK ? v : fail(g, st, r);
}

/* A row-wise or block-scaled weight Wᵀ [cols, rows] from W's values h
 * (freed here), its scales taken from W now as the weight's cast takes them
 * (f8i_current_scale of each tile's amax, fallback 1): tr = 1, one scale per
 * row of W (output channel), DequantizeLinear along axis 1 of Wᵀ with the
 * [rows] vector (per-axis); tr = 128, one per 128x128 block, opset 21's
 * blocked DequantizeLinear along axis 1 (block_size 128) with the scales
 * [cols, ceil(rows/128)] (each block's repeated over its 128 columns of
 * Wᵀ: 1/32 of the codes' bytes). Codes fp8(w · s), stored transposed. */
static const char *fp8_weight_tiles_t(f8_onnx *g, f8_status *st, const f8i_weight *w, const void *key, float *h,
                                      f8_dtype qdt, int64_t tr)
{
    f8_ctx *ctx = f8i_onnx_ctx(g);
    const int64_t R = w->rows, C = w->cols, tc = tr == 1 ? C : tr, nrb = (R + tr - 1) / tr, ncb = (C + tc - 1) / tc;
    const int64_t ns = tr == 1 ? R : C * nrb;
    const int e5 = qdt == F8_DTYPE_E5M2;
    const float scaled_max = f8i_scaled_max(ctx, qdt);
    uint8_t *codes = (uint8_t *)malloc((size_t)(R * C) + 1);
    float *sinv = (float *)malloc((size_t)ns * sizeof(float) + 1);
    if (!codes || !sinv) {
        free(h), free(codes), free(sinv);
        return fail(g, st, F8_OK);
    }
    for (int64_t rb = 0; rb < nrb; rb++)
        for (int64_t cb = 0; cb < ncb; cb++) {
            const int64_t r1 = rb * tr + tr < R ? rb * tr + tr : R, c1 = cb * tc + tc < C ? cb * tc + tc : C;
            float amax = 0.0f;
            for (int64_t i = rb * tr; i < r1; i++)
                for (int64_t j = cb * tc; j < c1; j++) amax = fmaxf(amax, fabsf(h[i * C + j]));
            const float s = f8i_current_scale(amax, 1.0f, scaled_max, ctx->recipe.power_2_scales);
            for (int64_t i = rb * tr; i < r1; i++)
                for (int64_t j = cb * tc; j < c1; j++) codes[j * R + i] = f8i_fp8_encode(h[i * C + j] * s, e5);
            if (tr == 1) sinv[rb] = 1.0f / s;
            else
                for (int64_t j = cb * tc; j < c1; j++) sinv[j * nrb + rb] = 1.0f / s;
        }
    free(h);
    const int64_t dims[2] = {C, R}, sdims[2] = {C, nrb};
    const char *init = f8i_onnx_init(g, "weight_fp8", e5 ? F8I_ONNX_E5M2 : F8I_ONNX_E4M3, dims, 2, codes,
                                     (size_t)(R * C));
    const char *s = init ? f8i_onnx_init(g, "weight_scale_inv", F8I_ONNX_FLOAT, tr == 1 ? &R : sdims, tr == 1 ? 1 : 2,
                                         sinv, (size_t)ns * 4)
                         : NULL;
    if (!init) free(sinv);
    f8i_onnx_node *n = NULL;
    /* no zero point: per-axis and blocked take none or one of the scales' shape; absent is 0 */
    const char *v = s ? OPN("DequantizeLinear", &n, init, s) : fail(g, st, F8_OK);
    if (v) f8i_onnx_attr_int(n, "axis", 1);
    if (v && tr > 1) f8i_onnx_attr_int(n, "block_size", tr);
    const f8_status r = v ? f8i_onnx_cache_add(g, key, F8I_FORM_FP8_T, v) : F8_OK;
    return r == F8_OK ? v : fail(g, st, r);
}

/* The dequantized FP8 weight Wᵀ [cols, rows]: codes fp8(W · scale) as a
 * forward with F8_MICROBATCH_NONE casts them (an FP8 primary weight: its
 * codes), stored transposed with their scale_inv. */
static const char *fp8_weight_t(f8_onnx *g, f8_status *st, const f8i_weight *w)
{
    const f8_tensor view = f8i_weight_view(w, 0);
    const char *v = f8i_onnx_cache_find(g, view.data, F8I_FORM_FP8_T);
    if (v) return v;
    f8_ctx *ctx = f8i_onnx_ctx(g);
    const f8_dtype qdt = w->fp8_primary ? view.dtype : f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD);
    const int64_t R = w->rows, C = w->cols;
    float scale = 1.0f, sinv = 1.0f;
    f8_status r = F8_OK;
    if (w->fp8_primary) r = f8_ctx_download(ctx, &sinv, view.scale_inv, sizeof sinv);
    else r = f8_slot_read(ctx, w->slot, &scale, NULL, NULL), sinv = 1.0f / scale;
    if (r != F8_OK) return fail(g, st, r);
    /* the primary's codes decode to code·1 here: scale_inv applies in the graph */
    const float one = 1.0f;
    float *h = to_host(g, st, view.data, view.dtype, w->fp8_primary ? &one : NULL, (size_t)(R * C));
    if (h && w->w8->mode != F8I_SCALING_TENSOR)
        return fp8_weight_tiles_t(g, st, w, view.data, h, qdt, w->w8->mode == F8I_SCALING_ROW ? 1 : F8I_BLOCK);
    if (h && !w->fp8_primary && f8i_recipe_current(ctx)) {
        /* current scaling: the scale from the weight now, as its cast takes it */
        float amax = 0.0f;
        for (int64_t i = 0; i < R * C; i++) amax = fmaxf(amax, fabsf(h[i]));
        scale = f8i_current_scale(amax, scale, f8i_scaled_max(ctx, qdt), ctx->recipe.power_2_scales);
        sinv = 1.0f / scale;
    }
    uint8_t *codes = h ? (uint8_t *)malloc((size_t)(R * C) + 1) : NULL;
    if (!codes) {
        free(h);
        return h ? fail(g, st, F8_OK) : NULL;
    }
    const int e5 = qdt == F8_DTYPE_E5M2;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            const float x = h[i * C + j];
            codes[j * R + i] = w->fp8_primary ? f8i_fp8_encode(x, e5) : f8i_fp8_encode(x * scale, e5);
        }
    free(h);
    const int64_t dims[2] = {C, R};
    const char *init = f8i_onnx_init(g, "weight_fp8", e5 ? F8I_ONNX_E5M2 : F8I_ONNX_E4M3, dims, 2, codes,
                                     (size_t)(R * C));
    v = init ? OPN("DequantizeLinear", NULL, init, f8i_onnx_const_float(g, sinv), f8i_onnx_zero_point(g, qdt))
             : fail(g, st, F8_OK);
    r = v ? f8i_onnx_cache_add(g, view.data, F8I_FORM_FP8_T, v) : F8_OK;
    return r == F8_OK ? v : fail(g, st, r);
}

/* An embedding table [V, C] as per-row FP8 (config.fp8_embedding): E4M3
 * codes fp8(x · s_r) with s_r = 448 / max |row r| (1 for a row of zeros; at
 * most 2^126, so 1/s_r stays a normal float), f8's encoder with the FP32
 * product, and DequantizeLinear(codes, 1/s_r, axis 0). Cached as
 * F8I_FORM_FP8_ROWS and as F8I_FORM_HP: a module whose weight is the same
 * memory (the tied LM head) reads this value. */
static const char *fp8_rows_param(f8_onnx *g, f8_status *st, const f8_tensor *t)
{
    const char *v = f8i_onnx_cache_find(g, t->data, F8I_FORM_FP8_ROWS);
    if (v) return v;
    const int64_t R = t->rows, C = t->cols;
    float *h = to_host(g, st, t->data, t->dtype, NULL, (size_t)(R * C));
    if (!h) return NULL;
    uint8_t *codes = (uint8_t *)malloc((size_t)(R * C) + 1);
    float *sinv = (float *)malloc((size_t)R * sizeof(float) + 1);
    if (!codes || !sinv) {
        free(h), free(codes), free(sinv);
        return fail(g, st, F8_OK);
    }
    for (int64_t i = 0; i < R; i++) {
        const float *row = h + i * C;
        float amax = 0.0f;
        int64_t bad = -1; /* fmaxf skips a NaN: each element is checked itself */
        for (int64_t j = 0; j < C; j++) {
            if (!isfinite(row[j]) && bad < 0) bad = j;
            amax = fmaxf(amax, fabsf(row[j]));
        }
        if (bad >= 0) {
            const float x = row[bad];
            free(h), free(codes), free(sinv);
            return fail(g, st, f8i_error(f8i_onnx_ctx(g), F8_ERR_INVALID_ARGUMENT,
                                         "ONNX export: fp8_embedding: row %lld, column %lld of the table is %s",
                                         (long long)i, (long long)bad, isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf"));
        }
        const float scale = amax > 0.0f ? fminf(448.0f / amax, 0x1p126f) : 1.0f;
        for (int64_t j = 0; j < C; j++) codes[i * C + j] = f8i_fp8_encode(row[j] * scale, 0);
        sinv[i] = 1.0f / scale;
    }
    free(h);
    const int64_t dims[2] = {R, C};
    const char *init = f8i_onnx_init(g, "embedding_fp8", F8I_ONNX_E4M3, dims, 2, codes, (size_t)(R * C));
    const char *s = init ? f8i_onnx_init(g, "embedding_scale_inv", F8I_ONNX_FLOAT, &R, 1, sinv, (size_t)R * 4) : NULL;
    if (!init) free(sinv);
    f8i_onnx_node *n = NULL;
    v = s ? OPN("DequantizeLinear", &n, init, s) : fail(g, st, F8_OK); /* zero point: 0 when absent */
    if (v) f8i_onnx_attr_int(n, "axis", 0);
    f8_status r = v ? f8i_onnx_cache_add(g, t->data, F8I_FORM_FP8_ROWS, v) : F8_OK;
    if (r == F8_OK && v) r = f8i_onnx_cache_add(g, t->data, F8I_FORM_HP, v);
    return r == F8_OK ? v : fail(g, st, r);
}

/* ---- module steps ------------------------------------------------------------------ */

static const char *step_norm(f8_onnx *g, f8_status *st, const f8i_norm *n, const char *x)
{
    const char *gain = vector(g, st, n->gamma, n->dtype, n->cols, n->zero_centered);
    if (!gain) return NULL;
    if (!n->rms) {
        const char *beta = vector(g, st, n->beta, n->dtype, n->cols, 0);
        f8i_onnx_node *node = NULL;
        const char *y = beta ? OPN("LayerNormalization", &node, x, gain, beta) : NULL;
        if (y) f8i_onnx_attr_int(node, "axis", -1), f8i_onnx_attr_float(node, "epsilon", n->eps);
        return y;
    }
    if (f8i_onnx_config(g)->opset >= 23) {
        f8i_onnx_node *node = NULL;
        const char *y = OPN("RMSNormalization", &node, x, gain);
        if (y) f8i_onnx_attr_int(node, "axis", -1), f8i_onnx_attr_float(node, "epsilon", n->eps);
        return y;
    }
    /* rsigma = 1/sqrt(mean(x²) + eps); y = (x · rsigma) · gain, as f8 orders it */
    const int64_t last = -1;
    const char *x2 = OP2("Mul", x, x);
    const char *ms = x2 ? OP2("ReduceMean", x2, f8i_onnx_const_ints(g, &last, 1)) : NULL;
    const char *a = ms ? OP2("Add", ms, f8i_onnx_const_float(g, n->eps)) : NULL;
    const char *r = a ? OP1("Sqrt", a) : NULL;
    const char *rs = r ? OP1("Reciprocal", r) : NULL;
    const char *xr = rs ? OP2("Mul", x, rs) : NULL;
    return xr ? OP2("Mul", xr, gain) : NULL;
}

/* 2^floor(log2 s) for a normal positive s: f8i_current_scale's power-of-two
 * rounding (the mantissa bits cleared), exactly: a first guess from the
 * logarithm, then one halving or doubling where it rounded across. */
static const char *pow2_below(f8_onnx *g, f8_status *st, const char *s)
{
    const char *l = OP1("Log", s);
    const char *e = l ? OP2("Div", l, f8i_onnx_const_float(g, 0.693147180559945309f)) : NULL;
    const char *f = e ? OP1("Floor", e) : NULL;
    const char *p = f ? OP2("Pow", f8i_onnx_const_float(g, 2.0f), f) : NULL;
    const char *half = p ? OP2("Mul", p, f8i_onnx_const_float(g, 0.5f)) : NULL;
    const char *over = half ? OP2("Greater", p, s) : NULL;
    const char *p1 = over ? OPN("Where", NULL, over, half, p) : NULL;
    const char *twice = p1 ? OP2("Mul", p1, f8i_onnx_const_float(g, 2.0f)) : NULL;
    const char *under = twice ? OP2("LessOrEqual", twice, s) : NULL;
    return under ? OPN("Where", NULL, under, twice, p1) : NULL;
}

/* Current scaling's scale of x, computed in the graph as the amax pass
 * computes it (backend.h, f8i_amax_scale_args): a = max |x| over the whole
 * tensor, s = scaled_max / a where a is finite and > 0 (else the slot's
 * scale now, kept), FLT_MAX for an infinite quotient, power-of-two rounding
 * with the recipe's option. A scalar value. */
static const char *current_scale(f8_onnx *g, f8_status *st, f8_ctx *ctx, float kept, const char *x, int rows)
{
    const char *ax = OP1("Abs", x);
    f8i_onnx_node *rn = NULL;
    const int64_t last = -1; /* rows: one amax per row (token), kept as [..., 1] to broadcast */
    const char *a = ax ? (rows ? OPN("ReduceMax", &rn, ax, f8i_onnx_const_ints(g, &last, 1)) : OPN("ReduceMax", &rn, ax))
                       : NULL;
    if (a) f8i_onnx_attr_int(rn, "keepdims", rows);
    const float scaled_max = f8i_scaled_max(ctx, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD));
    const char *q = a ? OP2("Div", f8i_onnx_const_float(g, scaled_max), a) : NULL;
    const char *s = q ? OP2("Min", q, f8i_onnx_const_float(g, 3.40282346638528859812e+38f)) : NULL;
    if (s && ctx->recipe.power_2_scales) s = pow2_below(g, st, s);
    const char *pos = s ? OP2("Greater", a, f8i_onnx_const_float(g, 0.0f)) : NULL;
    const char *inf = pos ? OP1("IsInf", a) : NULL;
    const char *fin = inf ? OP1("Not", inf) : NULL;
    const char *ok = fin ? OP2("And", pos, fin) : NULL;
    return ok ? OPN("Where", NULL, ok, s, f8i_onnx_const_float(g, kept)) : NULL;
}

/* fp8(x · s) then the codes times 1/s, s from x's own amax (fallback 1)
 * over the last axis: Mul, QuantizeLinear and DequantizeLinear of scale 1,
 * Mul (a per-token or per-tile scale is no per-axis input of QuantizeLinear,
 * and this forms the FP32 product as f8's casts do). */
static const char *own_scale_qdq(f8_onnx *g, f8_status *st, f8_ctx *ctx, const char *x, const char *zp)
{
    const char *sc = current_scale(g, st, ctx, 1.0f, x, 1);
    const char *sinv = sc ? OP1("Reciprocal", sc) : NULL;
    const char *in = sinv ? OP2("Mul", x, sc) : NULL;
    f8i_onnx_node *node = NULL;
    const char *q = in ? OPN("QuantizeLinear", &node, in, f8i_onnx_const_float(g, 1.0f), zp) : NULL;
    if (q) f8i_onnx_attr_int(node, "saturate", 1);
    const char *d = q ? OPN("DequantizeLinear", NULL, q, f8i_onnx_const_float(g, 1.0f), zp) : NULL;
    return d ? OP2("Mul", d, sinv) : fail(g, st, F8_OK);
}

/* Block scaling's 1x128 tiles of x [..., K]: flattened to [N, K], padded
 * with zeros to whole tiles (a zero leaves a tile's amax alone), viewed as
 * [N, tiles, 128] for own_scale_qdq, then back to x's shape. */
static const char *tiles_qdq(f8_onnx *g, f8_status *st, f8_ctx *ctx, const char *x, int64_t K, const char *zp)
{
    const int64_t kp = (K + F8I_BLOCK - 1) / F8I_BLOCK * F8I_BLOCK, flat[2] = {-1, K}, padded[2] = {-1, kp};
    const int64_t tiles[3] = {-1, kp / F8I_BLOCK, F8I_BLOCK}, pads[4] = {0, 0, 0, kp - K};
    const int64_t zero = 0, one = 1;
    const char *shape = OP1("Shape", x);
    const char *x2 = shape ? OP2("Reshape", x, f8i_onnx_const_ints(g, flat, 2)) : NULL;
    if (x2 && kp != K) x2 = OP2("Pad", x2, f8i_onnx_const_ints(g, pads, 4));
    const char *x3 = x2 ? OP2("Reshape", x2, f8i_onnx_const_ints(g, tiles, 3)) : NULL;
    const char *y3 = x3 ? own_scale_qdq(g, st, ctx, x3, zp) : NULL;
    const char *y2 = y3 ? OP2("Reshape", y3, f8i_onnx_const_ints(g, padded, 2)) : NULL;
    if (y2 && kp != K)
        y2 = OPN("Slice", NULL, y2, f8i_onnx_const_ints(g, &zero, 1), f8i_onnx_const_ints(g, &K, 1),
                 f8i_onnx_const_ints(g, &one, 1));
    return y2 ? OP2("Reshape", y2, shape) : fail(g, st, F8_OK);
}

/* The FP8 cast of a GEMM input x [..., K] by the module's quantizer. */
static const char *step_quantize(f8_onnx *g, f8_status *st, const f8_module *m, int slot, const char *x, int64_t K)
{
    f8_ctx *ctx = f8i_onnx_ctx(g);
    float scale = 1.0f;
    f8_status r = f8_slot_read(ctx, m->fwd[slot], &scale, NULL, NULL);
    if (r != F8_OK) return fail(g, st, r);
    const char *zp = f8i_onnx_zero_point(g, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD));
    if (m->q.act == F8I_SCALING_BLOCK_1X128) return tiles_qdq(g, st, ctx, x, K, zp);
    if (m->q.act == F8I_SCALING_ROW) return own_scale_qdq(g, st, ctx, x, zp); /* one scale per row (token) */
    if (m->q.current) {
        /* the scale comes from x itself, as f8's cast takes it */
        const char *sc = current_scale(g, st, ctx, scale, x, 0);
        const char *sinv = sc ? OP1("Reciprocal", sc) : NULL; /* 1/s, the codes' scale_inv */
        const char *in = x, *qs = sinv;
        if (sinv && f8i_onnx_config(g)->exact_cast) {
            in = OP2("Mul", x, sc);
            qs = f8i_onnx_const_float(g, 1.0f);
        }
        f8i_onnx_node *node = NULL;
        const char *q = in && qs ? OPN("QuantizeLinear", &node, in, qs, zp) : NULL;
        if (q) f8i_onnx_attr_int(node, "saturate", 1);
        return q ? OPN("DequantizeLinear", NULL, q, sinv, zp) : fail(g, st, F8_OK);
    }
    const float sinv = 1.0f / scale; /* what the cast writes as the codes' scale_inv */
    const char *s = f8i_onnx_const_float(g, sinv), *in = x, *qs = s;
    if (f8i_onnx_config(g)->exact_cast) { /* fp8(x · scale), the product f8 forms */
        in = OP2("Mul", x, f8i_onnx_const_float(g, scale));
        qs = f8i_onnx_const_float(g, 1.0f);
    }
    f8i_onnx_node *node = NULL;
    const char *q = in ? OPN("QuantizeLinear", &node, in, qs, zp) : NULL;
    if (q) f8i_onnx_attr_int(node, "saturate", 1);
    return q ? OPN("DequantizeLinear", NULL, q, s, zp) : NULL;
}

static const char *step_gemm(f8_onnx *g, f8_status *st, const f8i_weight *w, int fp8, const char *x)
{
    const char *wt = fp8 ? fp8_weight_t(g, st, w) : hp_weight_t(g, st, w);
    const char *y = wt ? OP2("MatMul", x, wt) : NULL;
    if (!y || !w->b) return y;
    const char *b = vector(g, st, w->b, w->dtype, w->rows, 0);
    return b ? OP2("Add", y, b) : NULL;
}

/* act(x), or act(a)·b of x = [a | b] (each ffn wide) for the gated ones. */
static const char *step_act(f8_onnx *g, f8_status *st, f8_activation act, int64_t ffn, const char *x)
{
    const char *a = x, *b = NULL;
    if (f8_activation_gated(act)) {
        const int64_t split[2] = {ffn, ffn};
        const char *in[2] = {x, f8i_onnx_const_ints(g, split, 2)};
        const char *out[2] = {f8i_onnx_tmp(g, "a"), f8i_onnx_tmp(g, "b")};
        f8i_onnx_node *n = f8i_onnx_node_add(g, "Split", 2, in, 2, out);
        if (!n) return fail(g, st, F8_OK);
        f8i_onnx_attr_int(n, "axis", -1);
        a = out[0], b = out[1];
    }
    const char *y = NULL;
    f8i_onnx_node *n = NULL;
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU:
        y = OPN("Gelu", &n, a);
        if (y) f8i_onnx_attr_string(n, "approximate", "tanh");
        break;
    case F8_ACT_RELU:
    case F8_ACT_REGLU: /* Max, not Relu: ONNX Runtime drops a Relu in front of a
                          QuantizeLinear (right for uint8 with zero point 0, wrong
                          for float8: measured with 1.23) */
        y = OP2("Max", a, f8i_onnx_const_float(g, 0.0f));
        break;
    case F8_ACT_SWIGLU: {
        const char *s = OP1("Sigmoid", a);
        y = s ? OP2("Mul", a, s) : NULL;
        break;
    }
    case F8_ACT_QGELU: {
        const char *k = OP2("Mul", a, f8i_onnx_const_float(g, 1.702f));
        const char *s = k ? OP1("Sigmoid", k) : NULL;
        y = s ? OP2("Mul", a, s) : NULL;
        break;
    }
    case F8_ACT_SRELU: {
        const char *p = OP2("Max", a, f8i_onnx_const_float(g, 0.0f));
        y = p ? OP2("Mul", p, p) : NULL;
        break;
    }
    }
    return y && b ? OP2("Mul", y, b) : y;
}

/* ---- the public calls ------------------------------------------------------------ */

/* The end of a call: cur (rounded to the graph's dtype first when round is
 * set) becomes the value `name` of rank and last dimension; on failure the
 * graph goes back to mark. */
static f8_status finish(f8_onnx *g, f8_status st, f8i_onnx_mark mark, const char *cur, int round, const char *name,
                        int rank, int64_t last)
{
    if (st == F8_OK && cur && round) cur = f8i_onnx_round(g, cur, f8i_onnx_config(g)->dtype);
    if (st == F8_OK) st = cur ? f8i_onnx_define(g, cur, name, rank, last) : f8i_onnx_oom(g);
    if (st != F8_OK) f8i_onnx_rollback(g, mark);
    return st;
}

/* Checks shared by the calls: graph, an input value of type, a new output name. */
static f8_status begin(f8_onnx *g, const char *fn, const char *x, int type, const char *y, const f8i_onnx_value **v)
{
    if (!g) return F8_ERR_INVALID_ARGUMENT;
    f8_status st = f8i_onnx_need(g, fn, x, type, v);
    return st == F8_OK ? f8i_onnx_check_new(g, fn, y) : st;
}

f8_status f8_onnx_add_module(f8_onnx *g, f8_module *m, const char *x, const char *y)
{
    static const char fn[] = "f8_onnx_add_module";
    const f8i_onnx_value *xv = NULL;
    F8I_TRY(begin(g, fn, x, F8I_ONNX_FLOAT, y, &xv));
    if (!m || m->ctx != f8i_onnx_ctx(g))
        return f8i_error(f8i_onnx_ctx(g), F8_ERR_INVALID_ARGUMENT, "%s: the module is NULL or of another ctx", fn);
    if (xv->last > 0 && xv->last != m->in_features)
        return f8i_error(f8i_onnx_ctx(g), F8_ERR_SHAPE, "%s: '%s' has last dimension %lld; the %s takes %lld", fn, x,
                         (long long)xv->last, m->cls->name, (long long)m->in_features);
    x = xv->name; /* the graph's copy: nodes keep pointers to it */
    const int rank = xv->rank, fp8 = m->fp8 && f8i_onnx_config(g)->fp8;
    const f8i_onnx_mark mark = f8i_onnx_mark_now(g);
    f8i_step steps[F8I_MAX_STEPS];
    const int n = m->cls->describe(m, fp8, steps);
    f8_status st = F8_OK;
    const char *cur = x;
    for (int i = 0; i < n && cur; i++) {
        const f8i_step *s = &steps[i];
        switch (s->kind) {
        case F8I_STEP_NORM: cur = step_norm(g, &st, &m->norm, cur); break;
        case F8I_STEP_QUANTIZE: /* x's last dimension: the columns of the GEMM's weight that follows */
            cur = step_quantize(g, &st, m, s->arg, cur,
                                i + 1 < n && steps[i + 1].kind == F8I_STEP_GEMM ? m->w[steps[i + 1].arg].cols
                                                                               : m->in_features);
            break;
        case F8I_STEP_ROUND: cur = f8i_onnx_round(g, cur, m->param_dtype); break;
        case F8I_STEP_GEMM: cur = step_gemm(g, &st, &m->w[s->arg], i > 0 && steps[i - 1].kind == F8I_STEP_QUANTIZE, cur); break;
        case F8I_STEP_ACT: cur = step_act(g, &st, (f8_activation)s->arg, m->w[1].cols, cur); break;
        }
    }
    return finish(g, st, mark, cur, 1, y, rank, m->out_features);
}

/* Grouped-query attention's q [B, H, S, hd] and k, v repeated to H heads
 * (head h reads key/value head h / (H/G), as f8_attention does) from qkv
 * [B, S, (H + 2G)·hd]: Slice, Reshape, Transpose, then Unsqueeze, Expand
 * over the group and Reshape. */
static void gqa_parts(f8_onnx *g, f8_status *st, const char *qkv, int64_t H, int64_t G, int64_t hd, const char **part)
{
    const int64_t begin[3] = {0, H * hd, (H + G) * hd}, end[3] = {H * hd, (H + G) * hd, (H + 2 * G) * hd};
    const int64_t axis = 2, perm[4] = {0, 2, 1, 3}, two = 2, rep[5] = {1, 1, H / G, 1, 1};
    for (int i = 0; i < 3; i++) {
        const int64_t heads = i ? G : H, shape[4] = {0, 0, heads, hd}, merged[4] = {0, H, -1, hd};
        f8i_onnx_node *n = NULL;
        const char *sl = OPN("Slice", NULL, qkv, f8i_onnx_const_ints(g, &begin[i], 1), f8i_onnx_const_ints(g, &end[i], 1),
                             f8i_onnx_const_ints(g, &axis, 1));
        const char *r = sl ? OP2("Reshape", sl, f8i_onnx_const_ints(g, shape, 4)) : NULL;
        const char *t = r ? OPN("Transpose", &n, r) : NULL;
        if (t) f8i_onnx_attr_ints(n, "perm", perm, 4);
        if (!t) return;
        if (i == 0) {
            part[0] = t;
            continue;
        }
        const char *u = OP2("Unsqueeze", t, f8i_onnx_const_ints(g, &two, 1));
        const char *e = u ? OP2("Expand", u, f8i_onnx_const_ints(g, rep, 5)) : NULL;
        part[i] = e ? OP2("Reshape", e, f8i_onnx_const_ints(g, merged, 4)) : NULL;
        if (!part[i]) return;
    }
}

f8_status f8_onnx_add_attention(f8_onnx *g, const f8_attention *att, const char *qkv, const char *y)
{
    static const char fn[] = "f8_onnx_add_attention";
    const f8i_onnx_value *v = NULL;
    F8I_TRY(begin(g, fn, qkv, F8I_ONNX_FLOAT, y, &v));
    f8_ctx *ctx = f8i_onnx_ctx(g);
    if (!att || f8i_attention_ctx(att) != ctx)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: the attention is NULL or of another ctx", fn);
    const f8_attention_config *c = f8i_attention_config(att);
    qkv = v->name;
    const int64_t H = c->n_head, G = c->n_kv_head > 0 ? c->n_kv_head : H, hd = c->head_dim, C = H * hd;
    const int64_t W = (H + 2 * G) * hd;
    if ((v->rank >= 0 && v->rank != 3) || (v->last > 0 && v->last != W))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: '%s' must be [batch, seq, %lld] (rank %d, last dimension %lld)", fn,
                         qkv, (long long)W, v->rank, (long long)v->last);
    const f8i_onnx_mark mark = f8i_onnx_mark_now(g);
    f8_status status = F8_OK, *st = &status;
    const int64_t perm_k[4] = {0, 1, 3, 2};
    const int64_t perm_y[4] = {0, 2, 1, 3}, y_shape[3] = {0, 0, C}, last = -1, zero = 0, one = 1;
    f8i_onnx_node *n = NULL;
    const char *part[3] = {NULL, NULL, NULL};
    if (G == H) { /* [B, S, 3C] -> [3, B, H, S, hd] -> q, k, v [B, H, S, hd] */
        const int64_t split_shape[5] = {0, 0, 3, H, hd}, perm5[5] = {2, 0, 3, 1, 4};
        const char *r = OP2("Reshape", qkv, f8i_onnx_const_ints(g, split_shape, 5));
        const char *t = r ? OPN("Transpose", &n, r) : NULL;
        if (t) f8i_onnx_attr_ints(n, "perm", perm5, 5);
        for (int64_t i = 0; i < 3 && t; i++) part[i] = OP2("Gather", t, f8i_onnx_const_ints(g, &i, -1));
    } else {
        gqa_parts(g, st, qkv, H, G, hd, part);
    }
    const char *kt = part[2] ? OPN("Transpose", &n, part[1]) : NULL;
    if (kt) f8i_onnx_attr_ints(n, "perm", perm_k, 4);
    const char *s = kt ? OP2("MatMul", part[0], kt) : NULL;
    /* the causal mask: key j <= query i, from the run's S */
    const char *shape = s ? OPN("Shape", &n, qkv) : NULL;
    if (shape) f8i_onnx_attr_int(n, "start", 1), f8i_onnx_attr_int(n, "end", 2);
    const char *S = shape ? OP2("Squeeze", shape, f8i_onnx_const_ints(g, &zero, 1)) : NULL;
    const char *range = S ? OPN("Range", NULL, f8i_onnx_const_ints(g, &zero, -1), S, f8i_onnx_const_ints(g, &one, -1))
                          : NULL;
    const char *rows = range ? OP2("Unsqueeze", range, f8i_onnx_const_ints(g, &one, 1)) : NULL;
    const char *cols = rows ? OP2("Unsqueeze", range, f8i_onnx_const_ints(g, &zero, 1)) : NULL;
    const char *keep = cols ? OP2("LessOrEqual", cols, rows) : NULL;
    const char *sm = keep ? OPN("Where", NULL, keep, s, f8i_onnx_const_float(g, -INFINITY)) : NULL;
    /* p = exp((s - max s) · c), y = (dt(p) · v) · (1 / Σ p) */
    const char *mx = sm ? OP2("ReduceMax", sm, f8i_onnx_const_ints(g, &last, 1)) : NULL;
    const char *d = mx ? OP2("Sub", sm, mx) : NULL;
    const char *e = d ? OP2("Mul", d, f8i_onnx_const_float(g, 1.0f / sqrtf((float)hd))) : NULL;
    const char *p = e ? OP1("Exp", e) : NULL;
    const char *l = p ? OP2("ReduceSum", p, f8i_onnx_const_ints(g, &last, 1)) : NULL;
    const char *pr = l ? f8i_onnx_round(g, p, c->dtype) : NULL;
    const char *o = pr ? OP2("MatMul", pr, part[2]) : NULL;
    const char *inv = o ? OP1("Reciprocal", l) : NULL;
    const char *yh = inv ? OP2("Mul", o, inv) : NULL;
    const char *yt = yh ? OPN("Transpose", &n, yh) : NULL;
    if (yt) f8i_onnx_attr_ints(n, "perm", perm_y, 4);
    const char *yr = yt ? OP2("Reshape", yt, f8i_onnx_const_ints(g, y_shape, 3)) : NULL;
    const char *out = yr ? f8i_onnx_round(g, yr, c->dtype) : NULL;
    return finish(g, status, mark, out, 0, y, 3, C);
}

f8_status f8_onnx_add_embedding(f8_onnx *g, const f8_tensor *wte, const f8_tensor *wpe, const char *tokens,
                                const char *y)
{
    static const char fn[] = "f8_onnx_add_embedding";
    const f8i_onnx_value *v = NULL;
    F8I_TRY(begin(g, fn, tokens, F8I_ONNX_INT64, y, &v));
    f8_ctx *ctx = f8i_onnx_ctx(g);
    if (!wte || !wpe || !wte->data || !wpe->data)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: wte or wpe (or its data) is NULL", fn);
    if ((wte->dtype != F8_DTYPE_FP32 && wte->dtype != F8_DTYPE_BF16) ||
        (wpe->dtype != F8_DTYPE_FP32 && wpe->dtype != F8_DTYPE_BF16))
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: wte and wpe must be fp32 or bf16", fn);
    if (wte->rows < 1 || wpe->rows < 1 || wte->cols < 1 || wte->cols != wpe->cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: wte [%lld, %lld] and wpe [%lld, %lld] need rows and the same columns",
                         fn, (long long)wte->rows, (long long)wte->cols, (long long)wpe->rows, (long long)wpe->cols);
    const int rank = v->rank < 0 ? -1 : v->rank + 1;
    tokens = v->name;
    const f8i_onnx_mark mark = f8i_onnx_mark_now(g);
    f8_status status = F8_OK, *st = &status;
    const int64_t zero = 0;
    f8i_onnx_node *n = NULL;
    const int fp8_table = f8i_onnx_config(g)->fp8_embedding;
    if (fp8_table && !f8i_onnx_cache_find(g, wte->data, F8I_FORM_FP8_ROWS) &&
        (f8i_onnx_cache_find(g, wte->data, F8I_FORM_HP) || f8i_onnx_cache_find(g, wte->data, F8I_FORM_HP_T)))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: fp8_embedding: wte is in the graph in high precision "
                         "already (a module using it was added first): add the embedding before the tied LM head", fn);
    const char *te = fp8_table ? fp8_rows_param(g, st, wte)
                               : hp_param(g, st, wte->data, wte->dtype, NULL, wte->rows, wte->cols);
    const char *pe = te ? hp_param(g, st, wpe->data, wpe->dtype, NULL, wpe->rows, wpe->cols) : NULL;
    const char *rows = pe ? OP2("Gather", te, tokens) : NULL;
    const char *S = rows ? OPN("Shape", &n, tokens) : NULL;
    if (S) f8i_onnx_attr_int(n, "start", -1);
    const char *pos = S ? OPN("Slice", NULL, pe, f8i_onnx_const_ints(g, &zero, 1), S) : NULL;
    const char *sum = pos ? OP2("Add", rows, pos) : NULL;
    return finish(g, status, mark, sum, 1, y, rank, wte->cols);
}

f8_status f8_onnx_add_add(f8_onnx *g, const char *a, const char *b, const char *y)
{
    static const char fn[] = "f8_onnx_add_add";
    const f8i_onnx_value *va = NULL, *vb = NULL;
    F8I_TRY(begin(g, fn, a, F8I_ONNX_FLOAT, y, &va));
    F8I_TRY(f8i_onnx_need(g, fn, b, F8I_ONNX_FLOAT, &vb));
    if (va->last > 0 && vb->last > 0 && va->last != vb->last)
        return f8i_error(f8i_onnx_ctx(g), F8_ERR_SHAPE, "%s: '%s' and '%s' have last dimensions %lld and %lld", fn, a, b,
                         (long long)va->last, (long long)vb->last);
    const int rank = va->rank;
    const int64_t last = va->last > 0 ? va->last : vb->last;
    a = va->name, b = vb->name;
    const f8i_onnx_mark mark = f8i_onnx_mark_now(g);
    f8_status st = F8_OK, *stp = &st;
    const char *sum = opn(g, stp, "Add", NULL, 2, (const char *const[]){a, b});
    return finish(g, st, mark, sum, 1, y, rank, last);
}

f8_status f8_onnx_add_slice(f8_onnx *g, const char *x, int64_t begin_, int64_t end, const char *y)
{
    static const char fn[] = "f8_onnx_add_slice";
    const f8i_onnx_value *v = NULL;
    F8I_TRY(begin(g, fn, x, F8I_ONNX_FLOAT, y, &v));
    if (begin_ < 0 || end <= begin_ || (v->last > 0 && end > v->last))
        return f8i_error(f8i_onnx_ctx(g), F8_ERR_SHAPE, "%s: [%lld, %lld) of '%s' (last dimension %lld) is not a "
                         "non-empty range inside it", fn, (long long)begin_, (long long)end, x, (long long)v->last);
    const int rank = v->rank;
    const int64_t last = -1;
    x = v->name;
    const f8i_onnx_mark mark = f8i_onnx_mark_now(g);
    f8_status st = F8_OK, *stp = &st;
    const char *in[4] = {x, f8i_onnx_const_ints(g, &begin_, 1), f8i_onnx_const_ints(g, &end, 1),
                         f8i_onnx_const_ints(g, &last, 1)};
    const char *s = opn(g, stp, "Slice", NULL, 4, in);
    return finish(g, st, mark, s, 0, y, rank, end - begin_);
}

/* The rope's cos or sin table [max_seq, hd/2] as an initializer (once per graph: the cache). */
static const char *rope_table(f8_onnx *g, f8_status *st, const f8_rope *rope, int sine)
{
    const f8_rope_config *c = f8i_rope_config(rope);
    const int64_t half = c->head_dim / 2, dims[2] = {c->max_seq, half};
    const float *key = f8i_rope_table(rope) + (sine ? c->max_seq * half : 0);
    const char *have = f8i_onnx_cache_find(g, key, F8I_FORM_HP);
    if (have) return have;
    float *h = to_host(g, st, key, F8_DTYPE_FP32, NULL, (size_t)(c->max_seq * half));
    const char *name = h ? f8i_onnx_init(g, sine ? "rope_sin" : "rope_cos", F8I_ONNX_FLOAT, dims, 2, h,
                                         (size_t)(c->max_seq * half) * 4)
                         : NULL;
    if (!name) return h ? fail(g, st, F8_OK) : NULL;
    if (f8i_onnx_cache_add(g, key, F8I_FORM_HP, name) != F8_OK) return fail(g, st, F8_OK);
    return name;
}

f8_status f8_onnx_add_rope(f8_onnx *g, const f8_rope *rope, const char *qkv, const char *y)
{
    static const char fn[] = "f8_onnx_add_rope";
    const f8i_onnx_value *v = NULL;
    F8I_TRY(begin(g, fn, qkv, F8I_ONNX_FLOAT, y, &v));
    f8_ctx *ctx = f8i_onnx_ctx(g);
    if (!rope || f8i_rope_ctx(rope) != ctx)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: the rope is NULL or of another ctx", fn);
    const f8_rope_config *c = f8i_rope_config(rope);
    const int64_t H = c->n_head, G = c->n_kv_head, hd = c->head_dim, half = hd / 2, QK = (H + G) * hd, W = QK + G * hd;
    qkv = v->name;
    if ((v->rank >= 0 && v->rank != 3) || (v->last > 0 && v->last != W))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: '%s' must be [batch, seq, %lld] (rank %d, last dimension %lld)", fn, qkv,
                         (long long)W, v->rank, (long long)v->last);
    const f8i_onnx_mark mark = f8i_onnx_mark_now(g);
    f8_status status = F8_OK, *st = &status;
    f8i_onnx_node *n = NULL;
    const int64_t zero = 0, one = 1, two = 2, three = 3, qk = QK, w = W, hh = half, hdv = hd;
    const int64_t heads[4] = {0, 0, H + G, hd}, flat[3] = {0, 0, QK};
    /* the first S rows of the tables, [S, 1, hd/2]: position = the index along seq */
    const char *shape = OPN("Shape", &n, qkv);
    if (shape) f8i_onnx_attr_int(n, "start", 1), f8i_onnx_attr_int(n, "end", 2);
    const char *tab[2] = {NULL, NULL};
    for (int i = 0; i < 2 && shape; i++) {
        const char *t = rope_table(g, st, rope, i);
        const char *sl = t ? OPN("Slice", NULL, t, f8i_onnx_const_ints(g, &zero, 1), shape, f8i_onnx_const_ints(g, &zero, 1))
                           : NULL;
        tab[i] = sl ? OP2("Unsqueeze", sl, f8i_onnx_const_ints(g, &one, 1)) : NULL;
    }
    /* q and k heads [B, S, H + G, hd], halves x1 | x2; v as it is */
    const char *qkp = tab[1] ? OPN("Slice", NULL, qkv, f8i_onnx_const_ints(g, &zero, 1), f8i_onnx_const_ints(g, &qk, 1),
                                   f8i_onnx_const_ints(g, &two, 1)) : NULL;
    const char *vp = qkp ? OPN("Slice", NULL, qkv, f8i_onnx_const_ints(g, &qk, 1), f8i_onnx_const_ints(g, &w, 1),
                               f8i_onnx_const_ints(g, &two, 1)) : NULL;
    const char *x = vp ? OP2("Reshape", qkp, f8i_onnx_const_ints(g, heads, 4)) : NULL;
    const char *x1 = x ? OPN("Slice", NULL, x, f8i_onnx_const_ints(g, &zero, 1), f8i_onnx_const_ints(g, &hh, 1),
                             f8i_onnx_const_ints(g, &three, 1)) : NULL;
    const char *x2 = x1 ? OPN("Slice", NULL, x, f8i_onnx_const_ints(g, &hh, 1), f8i_onnx_const_ints(g, &hdv, 1),
                              f8i_onnx_const_ints(g, &three, 1)) : NULL;
    /* x1' = x1·c - x2·s, x2' = x2·c + x1·s: FP32 products, then the sum, as f8_rope */
    const char *a = x2 ? OP2("Mul", x1, tab[0]) : NULL, *b = a ? OP2("Mul", x2, tab[1]) : NULL;
    const char *y1 = b ? OP2("Sub", a, b) : NULL;
    const char *c2 = y1 ? OP2("Mul", x2, tab[0]) : NULL, *d = c2 ? OP2("Mul", x1, tab[1]) : NULL;
    const char *y2 = d ? OP2("Add", c2, d) : NULL;
    const char *cat = y2 ? OPN("Concat", &n, y1, y2) : NULL;
    if (cat) f8i_onnx_attr_int(n, "axis", 3);
    const char *r = cat ? OP2("Reshape", cat, f8i_onnx_const_ints(g, flat, 3)) : NULL;
    const char *rr = r ? f8i_onnx_round(g, r, f8i_onnx_config(g)->dtype) : NULL;
    const char *out = rr ? OPN("Concat", &n, rr, vp) : NULL;
    if (out) f8i_onnx_attr_int(n, "axis", 2);
    return finish(g, status, mark, out, 0, y, 3, W);
}
