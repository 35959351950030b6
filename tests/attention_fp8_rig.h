/*
 * attention_fp8_rig.h — what the FP8 attention tests share (test_attention_fp8.c
 * on the CPU, test_cuda_attention_fp8.c against it): an FP64 reference of
 * attention.h's FP8 chain, written from the formulas, independent of the
 * library's loops; and a rig that runs one FP8 forward (and backward) on a
 * ctx with chosen slot scales and brings everything back as host values.
 *
 * The reference takes the codes as the cast's contract defines them (the
 * FP32 product v·scale rounded by f8_fp8_from_float; dq = 1.0f / scale) and
 * does everything else in double: scores, the softmax normalized before its
 * scale (P·scale_s rounded to E4M3 from its FP32 value), O = Σ P8·v8 ·
 * descale_s · dv, O's amax before scale_o, O8 = e4m3(O·scale_o) and y =
 * bf16(O8·descale_o), descale_o = 1.0f / scale_o. Under current scaling
 * the caller passes scale_o = the QKV scale (attention.h: |O| <= max|v|).
 */
#ifndef F8_TESTS_ATTENTION_FP8_RIG_H
#define F8_TESTS_ATTENTION_FP8_RIG_H

#include <math.h>

#include "device_buffers.h"

typedef struct fp8_shape {
    int64_t B, S, nh, hd;
} fp8_shape;

/* The scales a run is given (written into the slots before the forward),
 * and the ones the reference applies (o > 0: O8's). */
typedef struct fp8_scales {
    float qkv, s, o;
} fp8_scales;

/* What one run (or the reference) produced, host values. */
typedef struct fp8_run {
    float *y;        /* [T, C] */
    float *dqkv;     /* [T, 3C] (runs with dy) */
    float amax[3];   /* the QKV, S and O slots' accumulators after the forward (reference: its amaxes) */
    float scale[3];  /* the slots' scales after f8_ctx_update_scales(FORWARD) (runs only) */
    float used[3], used_inv[3]; /* the slots' scale and scale_inv right after the forward (runs only) */
    float bamax[3], bused[3]; /* fp8_backward runs: the dO, dP, dQKV slots' accumulators and scales after the backward */
} fp8_run;

/* FP8 backward runs (fp8_bwd_on): fp8_att_new creates attentions with
 * fp8_backward = 1 and fp8_run_once writes these scales (dO, dP, dQKV; 0:
 * left as the slot has it) into the backward slots before the backward. */
typedef struct fp8_bscales {
    float dO, dP, dqkv;
} fp8_bscales;
static int fp8_bwd_on;
static fp8_bscales fp8_bwd_scales;

static inline int64_t fp8_T(fp8_shape s) { return s.B * s.S; }
static inline int64_t fp8_C(fp8_shape s) { return s.nh * s.hd; }

static inline float e4m3_of(float v) { return f8_fp8_to_float(f8_fp8_from_float(v, F8_DTYPE_E4M3), F8_DTYPE_E4M3); }

/* The spacing of E4M3 values at |v| (2^-9 below the smallest normal 2^-6). */
static inline double e4m3_step(double v)
{
    const double a = fabs(v);
    return a < 0x1p-6 ? 0x1p-9 : ldexp(1.0, (int)floor(log2(a)) - 3);
}

/* FP64 reference of the chain: y [T, C] (BF16-rounded) and amax[3]. */
static inline void fp8_reference(fp8_shape sh, const float *qkv, fp8_scales sc, float *y, float amax[3])
{
    const int64_t T = fp8_T(sh), C = fp8_C(sh), S = sh.S, hd = sh.hd;
    const float dq = 1.0f / sc.qkv, ds = 1.0f / sc.s, dso = 1.0f / sc.o;
    const double c = 1.0 / sqrt((double)hd);
    double *v8 = (double *)xmalloc((size_t)(T * 3 * C) * sizeof(double));
    double *p = (double *)xmalloc((size_t)S * sizeof(double));
    amax[0] = amax[1] = amax[2] = 0.0f;
    for (int64_t i = 0; i < T * 3 * C; i++) {
        v8[i] = f8_fp8_to_float(f8_fp8_from_float(qkv[i] * sc.qkv, F8_DTYPE_E4M3), F8_DTYPE_E4M3);
        amax[0] = fmaxf(amax[0], fabsf(qkv[i]));
    }
    double amax_o = 0.0;
    for (int64_t b = 0; b < sh.B; b++)
        for (int64_t h = 0; h < sh.nh; h++)
            for (int64_t i = 0; i < S; i++) {
                const double *q = v8 + (b * S + i) * 3 * C + h * hd;
                double m = -INFINITY, l = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *k = v8 + (b * S + j) * 3 * C + C + h * hd;
                    double s = 0.0;
                    for (int64_t d = 0; d < hd; d++) s += q[d] * k[d];
                    p[j] = s * dq * dq * c;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j <= i; j++) l += (p[j] = exp(p[j] - m));
                for (int64_t j = 0; j <= i; j++) {
                    amax[1] = fmaxf(amax[1], (float)(p[j] / l));
                    p[j] = e4m3_of((float)(p[j] / l) * sc.s);
                }
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0.0;
                    for (int64_t j = 0; j <= i; j++) o += p[j] * v8[(b * S + j) * 3 * C + 2 * C + h * hd + d];
                    o *= (double)ds * dq;
                    amax_o = fmax(amax_o, fabs(o));
                    y[(b * S + i) * C + h * hd + d] = f8_bf16_to_float(f8_bf16_from_float(e4m3_of((float)o * sc.o) * dso));
                }
            }
    amax[2] = (float)amax_o;
    free(v8);
    free(p);
}

/* FP64 reference of the FP8 backward chain (src/nn/attention.h), forward
 * included, from the inputs alone: the codes as the casts define them (qkv
 * at sc.qkv; dy at bs.dO in the gradient format gd), the forward's O8 at
 * sc.o and its log-sum-exp, everything else in double with P8 =
 * e4m3(P·sc.s) and dS8 = gd(dS·bs.dP) rounded from their FP32 values; dqkv
 * [T, 3C] is bf16(gd(x·bs.dqkv)/bs.dqkv). bs.dqkv = 0 is current scaling:
 * dqkv = bf16(x), and D reads O as the forward saved it in BF16,
 * bf16(O8·(1.0f / sc.o)) (TE's O in F16; sc.o is then the QKV scale), not
 * the O8 codes. amax[0..2]: max|dy|, max|dS|, max over dq, dk, dv before
 * their cast. Multi-head only. */
static inline void fp8_reference_bwd(fp8_shape sh, const float *qkv, const float *dy, fp8_scales sc, fp8_bscales bs,
                                     f8_dtype gd, float *dqkv, float amax[3])
{
    const int64_t T = fp8_T(sh), C = fp8_C(sh), S = sh.S, hd = sh.hd, W = 3 * C;
    const float dq = 1.0f / sc.qkv, ds = 1.0f / sc.s, ddo = 1.0f / bs.dO, dsdp = 1.0f / bs.dP;
    const double c = 1.0 / sqrt((double)hd);
    double *v8 = (double *)xmalloc((size_t)(T * W) * sizeof(double)), *g8 = (double *)xmalloc((size_t)(T * C) * sizeof(double));
    double *ov = (double *)xmalloc((size_t)(T * C) * sizeof(double));
    double *lse = (double *)xmalloc((size_t)(T * sh.nh) * sizeof(double));
    double *acc = (double *)calloc((size_t)(T * W), sizeof(double)), *p = (double *)xmalloc((size_t)S * sizeof(double));
    const int cs = bs.dqkv <= 0.0f;
    const double dso = cs ? 1.0 : (double)(1.0f / sc.o);
    double amax_ds = 0.0, amax_g = 0.0;
    amax[0] = 0.0f;
    for (int64_t i = 0; i < T * W; i++) v8[i] = e4m3_of(qkv[i] * sc.qkv);
    for (int64_t i = 0; i < T * C; i++) {
        g8[i] = f8_fp8_to_float(f8_fp8_from_float(dy[i] * bs.dO, gd), gd);
        amax[0] = fmaxf(amax[0], fabsf(dy[i]));
    }
    for (int64_t b = 0; b < sh.B; b++) /* the forward: O as the backward reads it, and lse */
        for (int64_t h = 0; h < sh.nh; h++)
            for (int64_t i = 0; i < S; i++) {
                const double *q = v8 + (b * S + i) * W + h * hd;
                double m = -INFINITY, l = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int64_t d = 0; d < hd; d++) s += q[d] * v8[(b * S + j) * W + C + h * hd + d];
                    p[j] = s * dq * dq * c;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j <= i; j++) l += (p[j] = exp(p[j] - m));
                for (int64_t j = 0; j <= i; j++) p[j] = e4m3_of((float)(p[j] / l) * sc.s);
                lse[(b * sh.nh + h) * S + i] = m + log(l);
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0.0;
                    for (int64_t j = 0; j <= i; j++) o += p[j] * v8[(b * S + j) * W + 2 * C + h * hd + d];
                    o *= (double)ds * dq;
                    const float o8 = e4m3_of((float)o * sc.o);
                    ov[(b * S + i) * C + h * hd + d] = cs ? f8_bf16_to_float(f8_bf16_from_float(o8 * (1.0f / sc.o))) : o8;
                }
            }
    for (int64_t b = 0; b < sh.B; b++)
        for (int64_t h = 0; h < sh.nh; h++)
            for (int64_t i = 0; i < S; i++) {
                const int64_t r = (b * S + i), qo = r * W + h * hd, yo = r * C + h * hd;
                double D = 0.0;
                for (int64_t d = 0; d < hd; d++) D += g8[yo + d] * ov[yo + d];
                D *= (double)ddo * dso;
                for (int64_t j = 0; j <= i; j++) {
                    const int64_t ko = (b * S + j) * W + C + h * hd, vo = ko + C;
                    double s = 0.0, dp = 0.0;
                    for (int64_t d = 0; d < hd; d++) s += v8[qo + d] * v8[ko + d], dp += g8[yo + d] * v8[vo + d];
                    const double P = exp(s * dq * dq * c - lse[(b * sh.nh + h) * S + i]);
                    const double dS = P * (dp * ddo * dq - D) * c;
                    amax_ds = fmax(amax_ds, fabs(dS));
                    const double ds8 = f8_fp8_to_float(f8_fp8_from_float((float)(dS * bs.dP), gd), gd);
                    const double p8 = e4m3_of((float)(P * sc.s));
                    for (int64_t d = 0; d < hd; d++) {
                        acc[qo + d] += ds8 * v8[ko + d];
                        acc[ko + d] += ds8 * v8[qo + d];
                        acc[vo + d] += p8 * g8[yo + d];
                    }
                }
            }
    for (int64_t i = 0; i < T * W; i++) {
        const int64_t part = (i % W) / C; /* 0 q, 1 k, 2 v */
        const double x = acc[i] * (part == 2 ? (double)ds * ddo : (double)dsdp * dq);
        amax_g = fmax(amax_g, fabs(x));
        const float out =
            bs.dqkv > 0.0f ? f8_fp8_to_float(f8_fp8_from_float((float)x * bs.dqkv, gd), gd) * (1.0f / bs.dqkv) : (float)x;
        dqkv[i] = f8_bf16_to_float(f8_bf16_from_float(out));
    }
    amax[1] = (float)amax_ds, amax[2] = (float)amax_g;
    free(v8), free(g8), free(ov), free(lse), free(acc), free(p);
}

/* Compare y with the reference: every element within `steps` E4M3 steps of
 * O8 (in y's units, plus one BF16 rounding); returns the worst distance in
 * steps and sets *exact to the fraction of bitwise-equal elements. */
static inline double fp8_compare(const float *y, const float *ref, int64_t n, fp8_scales sc, double *exact)
{
    double worst = 0.0;
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) {
        same += y[i] == ref[i];
        const double step = e4m3_step((double)ref[i] * sc.o) / sc.o;
        const double dist = (fabs((double)y[i] - ref[i]) - 0x1p-8 * fabs(ref[i])) / step;
        if (dist > worst || y[i] != y[i]) worst = y[i] != y[i] ? INFINITY : dist;
    }
    *exact = n ? (double)same / (double)n : 1.0;
    return worst;
}

/* An FP8 attention (BF16, fp8 = 1) on ctx for sh; dies if refused. */
static inline f8_attention *fp8_att_new(f8_ctx *ctx, fp8_shape sh, int kept)
{
    f8_attention_config cfg = f8_attention_config_default(sh.nh, sh.hd, sh.B, sh.S);
    cfg.fp8 = 1;
    cfg.fp8_backward = fp8_bwd_on;
    cfg.output_kept = kept;
    f8_attention *a = NULL;
    if (f8_attention_create(ctx, &cfg, &a) != F8_OK) die("f8_attention_create (fp8)", ctx);
    return a;
}

/* BF16 backend buffer of n host floats. */
static inline void *fp8_put_bf16(f8_ctx *ctx, const float *v, size_t n)
{
    uint16_t *h = (uint16_t *)xmalloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) h[i] = f8_bf16_from_float(v[i]);
    void *p = balloc(ctx, n * 2);
    upload(ctx, p, h, n * 2);
    free(h);
    return p;
}

/* Called (when set) just before fp8_run_once's forward: a test's chance to
 * dirty what the forward must not read, such as the ctx scratch. */
static void (*fp8_before_forward)(f8_ctx *ctx);
/* Called (when set) just after that forward, before the backward. */
static void (*fp8_after_forward)(f8_ctx *ctx);
/* When set: fp8_run_once first runs a forward of these inputs (same shape)
 * on the same attention, saved state and y, so that its forward meets
 * outputs that already hold another call's values, as a training step's do. */
static const float *fp8_earlier_qkv;

/* One forward (and, with dy, backward) on a fresh FP8 attention with the
 * slots' scales set to sc: y, dqkv, the slots' accumulators after the
 * forward and their scales after the forward update. */
static inline void fp8_run_once(f8_ctx *ctx, fp8_shape sh, const float *qkv, const float *dy, fp8_scales sc, fp8_run *r)
{
    const int64_t T = fp8_T(sh), C = fp8_C(sh);
    f8_attention *a = fp8_att_new(ctx, sh, 0);
    f8_attention_saved *sv = NULL;
    CHECK_OK(ctx, f8_attention_saved_create(a, &sv));
    f8_slot sl[3];
    CHECK_OK(ctx, f8_attention_fp8_slots(a, sl));
    const float scales[3] = {sc.qkv, sc.s, sc.o};
    for (int k = 0; k < 3; k++)
        if (scales[k] > 0.0f) CHECK_OK(ctx, f8_slot_write(ctx, sl[k], scales[k], 1.0f / scales[k], NULL));
    f8_tensor tq = f8_tensor_make(fp8_put_bf16(ctx, qkv, (size_t)(T * 3 * C)), F8_DTYPE_BF16, T, 3 * C);
    f8_tensor ty = f8_tensor_make(balloc(ctx, (size_t)(T * C) * 2), F8_DTYPE_BF16, T, C);
    if (fp8_earlier_qkv) {
        f8_tensor te = f8_tensor_make(fp8_put_bf16(ctx, fp8_earlier_qkv, (size_t)(T * 3 * C)), F8_DTYPE_BF16, T, 3 * C);
        CHECK_OK(ctx, f8_attention_forward(a, &te, sh.B, sh.S, &ty, sv));
        f8_ctx_free(ctx, te.data);
        float *zero = (float *)calloc((size_t)f8_ctx_recipe(ctx)->amax_history_len, sizeof(float));
        for (int k = 0; k < 3; k++)
            if (scales[k] > 0.0f) CHECK_OK(ctx, f8_slot_write(ctx, sl[k], scales[k], 1.0f / scales[k], zero));
        free(zero);
    }
    if (fp8_before_forward) fp8_before_forward(ctx);
    CHECK_OK(ctx, f8_attention_forward(a, &tq, sh.B, sh.S, &ty, sv));
    if (fp8_after_forward) fp8_after_forward(ctx);
    r->y = to_host(ctx, &ty);
    r->dqkv = NULL;
    f8_slot bl[3];
    const float bsc[3] = {fp8_bwd_scales.dO, fp8_bwd_scales.dP, fp8_bwd_scales.dqkv};
    if (dy && fp8_bwd_on) {
        CHECK_OK(ctx, f8_attention_fp8_backward_slots(a, bl));
        for (int k = 0; k < 3; k++)
            if (bsc[k] > 0.0f) CHECK_OK(ctx, f8_slot_write(ctx, bl[k], bsc[k], 1.0f / bsc[k], NULL));
    }
    if (dy) {
        f8_tensor td = f8_tensor_make(fp8_put_bf16(ctx, dy, (size_t)(T * C)), F8_DTYPE_BF16, T, C);
        f8_tensor tg = f8_tensor_make(balloc(ctx, (size_t)(T * 3 * C) * 2), F8_DTYPE_BF16, T, 3 * C);
        CHECK_OK(ctx, f8_attention_backward(a, sv, &td, &tg));
        r->dqkv = to_host(ctx, &tg);
        if (fp8_bwd_on) {
            float *bh = (float *)xmalloc((size_t)f8_ctx_recipe(ctx)->amax_history_len * sizeof(float));
            for (int k = 0; k < 3; k++) {
                CHECK_OK(ctx, f8_slot_read(ctx, bl[k], &r->bused[k], NULL, bh));
                r->bamax[k] = bh[0];
            }
            free(bh);
        }
        f8_ctx_free(ctx, td.data);
        f8_ctx_free(ctx, tg.data);
    }
    const int L = f8_ctx_recipe(ctx)->amax_history_len;
    float *hist = (float *)xmalloc((size_t)L * sizeof(float));
    for (int k = 0; k < 3; k++) {
        CHECK_OK(ctx, f8_slot_read(ctx, sl[k], &r->used[k], &r->used_inv[k], hist));
        r->amax[k] = hist[0];
    }
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    for (int k = 0; k < 3; k++) CHECK_OK(ctx, f8_slot_read(ctx, sl[k], &r->scale[k], NULL, NULL));
    free(hist);
    f8_ctx_free(ctx, tq.data);
    f8_ctx_free(ctx, ty.data);
    f8_attention_saved_destroy(sv);
    f8_attention_destroy(a);
}

/* The BF16 attention (fp8 = 0) on ctx, forward and backward: what FP8
 * attention approximates. *dqkv gets its gradient for dy. */
static inline float *fp8_bf16_run(f8_ctx *ctx, fp8_shape sh, const float *qkv, const float *dy, float **dqkv)
{
    const int64_t T = fp8_T(sh), C = fp8_C(sh);
    f8_attention_config cfg = f8_attention_config_default(sh.nh, sh.hd, sh.B, sh.S);
    f8_attention *a = NULL;
    f8_attention_saved *sv = NULL;
    if (f8_attention_create(ctx, &cfg, &a) != F8_OK) die("f8_attention_create (bf16)", ctx);
    CHECK_OK(ctx, f8_attention_saved_create(a, &sv));
    f8_tensor tq = f8_tensor_make(fp8_put_bf16(ctx, qkv, (size_t)(T * 3 * C)), F8_DTYPE_BF16, T, 3 * C);
    f8_tensor ty = f8_tensor_make(balloc(ctx, (size_t)(T * C) * 2), F8_DTYPE_BF16, T, C);
    f8_tensor td = f8_tensor_make(fp8_put_bf16(ctx, dy, (size_t)(T * C)), F8_DTYPE_BF16, T, C);
    f8_tensor tg = f8_tensor_make(balloc(ctx, (size_t)(T * 3 * C) * 2), F8_DTYPE_BF16, T, 3 * C);
    CHECK_OK(ctx, f8_attention_forward(a, &tq, sh.B, sh.S, &ty, sv));
    CHECK_OK(ctx, f8_attention_backward(a, sv, &td, &tg));
    float *y = to_host(ctx, &ty);
    *dqkv = to_host(ctx, &tg);
    f8_ctx_free(ctx, tq.data), f8_ctx_free(ctx, ty.data), f8_ctx_free(ctx, td.data), f8_ctx_free(ctx, tg.data);
    f8_attention_saved_destroy(sv);
    f8_attention_destroy(a);
    return y;
}

/* sqrt(Σ (g - c)² / Σ c²) over the elements where |c| <= lim (lim 0: all):
 * the whole tensor's relative error, which single small elements do not
 * dominate (FP8's steps are relative to the tensor's scale, not to each value). */
static inline double fp8_rel_global(const float *g, const float *c, size_t n, float lim)
{
    double e = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (lim > 0.0f && fabsf(c[i]) > lim) continue;
        e += ((double)g[i] - c[i]) * ((double)g[i] - c[i]);
        r += (double)c[i] * c[i];
        if (g[i] != g[i]) return INFINITY;
    }
    return r > 0.0 ? sqrt(e / r) : sqrt(e);
}

/* GQA (G key/value heads for nh query heads) against the multi-head FP8
 * attention of the same values with each group's k and v copied to its
 * query heads: per query head the chain reads the same q, k and v, so y and
 * dq must be bitwise equal, the amaxes equal, and each group's dk, dv the
 * sum of its heads' (each of the group's BF16 values and the GQA one is
 * rounded once: within 2^-8 of Σ|head| + |gqa|, plus 1e-6 of the rms). The caller picks
 * the ctx's path (f8's kernels on a GPU: cuDNN's FP8 forward takes no GQA).
 * Returns the worst dk/dv difference over that bound's scale. */
static inline double fp8_check_gqa(f8_ctx *ctx, int64_t B, int64_t S, int64_t nh, int64_t G, int64_t hd, uint64_t seed)
{
    const int64_t T = B * S, C = nh * hd, Wg = (nh + 2 * G) * hd, grp = nh / G;
    test_rng r = {seed};
    float *qg = (float *)xmalloc((size_t)(T * Wg) * sizeof(float)), *qm = (float *)xmalloc((size_t)(T * 3 * C) * sizeof(float));
    float *dy = (float *)xmalloc((size_t)(T * C) * sizeof(float)), amax = 0.0f;
    for (int64_t i = 0; i < T * Wg; i++) {
        qg[i] = f8_bf16_to_float(f8_bf16_from_float((float)rng_normal(&r)));
        amax = fmaxf(amax, fabsf(qg[i]));
    }
    for (int64_t i = 0; i < T * C; i++) dy[i] = f8_bf16_to_float(f8_bf16_from_float((float)rng_normal(&r)));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t d = 0; d < hd; d++) {
                qm[t * 3 * C + h * hd + d] = qg[t * Wg + h * hd + d];
                qm[t * 3 * C + C + h * hd + d] = qg[t * Wg + C + (h / grp) * hd + d];
                qm[t * 3 * C + 2 * C + h * hd + d] = qg[t * Wg + C + G * hd + (h / grp) * hd + d];
            }
    const float scales[3] = {448.0f / amax, 448.0f, 448.0f / 1.5f};
    float *y[2], *g[2], am[2][3];
    for (int k = 0; k < 2; k++) { /* 0: GQA, 1: multi-head */
        const int64_t W = k ? 3 * C : Wg;
        f8_attention_config cfg = f8_attention_config_default(nh, hd, B, S);
        cfg.fp8 = 1;
        cfg.fp8_backward = fp8_bwd_on;
        cfg.n_kv_head = k ? 0 : G;
        f8_attention *a = NULL;
        f8_attention_saved *sv = NULL;
        if (f8_attention_create(ctx, &cfg, &a) != F8_OK) die("f8_attention_create (fp8, GQA)", ctx);
        CHECK_OK(ctx, f8_attention_saved_create(a, &sv));
        f8_slot sl[3];
        CHECK_OK(ctx, f8_attention_fp8_slots(a, sl));
        for (int j = 0; j < 3; j++) CHECK_OK(ctx, f8_slot_write(ctx, sl[j], scales[j], 1.0f / scales[j], NULL));
        f8_tensor tq = f8_tensor_make(fp8_put_bf16(ctx, k ? qm : qg, (size_t)(T * W)), F8_DTYPE_BF16, T, W);
        f8_tensor ty = f8_tensor_make(balloc(ctx, (size_t)(T * C) * 2), F8_DTYPE_BF16, T, C);
        f8_tensor td = f8_tensor_make(fp8_put_bf16(ctx, dy, (size_t)(T * C)), F8_DTYPE_BF16, T, C);
        f8_tensor tg = f8_tensor_make(balloc(ctx, (size_t)(T * W) * 2), F8_DTYPE_BF16, T, W);
        CHECK_OK(ctx, f8_attention_forward(a, &tq, B, S, &ty, sv));
        CHECK_OK(ctx, f8_attention_backward(a, sv, &td, &tg));
        y[k] = to_host(ctx, &ty), g[k] = to_host(ctx, &tg);
        float *hist = (float *)xmalloc((size_t)f8_ctx_recipe(ctx)->amax_history_len * sizeof(float));
        for (int j = 0; j < 3; j++) {
            CHECK_OK(ctx, f8_slot_read(ctx, sl[j], NULL, NULL, hist));
            am[k][j] = hist[0];
        }
        free(hist);
        f8_ctx_free(ctx, tq.data), f8_ctx_free(ctx, ty.data), f8_ctx_free(ctx, td.data), f8_ctx_free(ctx, tg.data);
        f8_attention_saved_destroy(sv);
        f8_attention_destroy(a);
    }
    CHECK(memcmp(y[0], y[1], (size_t)(T * C) * sizeof(float)) == 0, "FP8 GQA B%lld S%lld nh%lld G%lld: y differs from the "
          "multi-head run with copied k, v", (long long)B, (long long)S, (long long)nh, (long long)G);
    CHECK(memcmp(am[0], am[1], sizeof am[0]) == 0, "FP8 GQA: amaxes %g %g %g, multi-head %g %g %g", (double)am[0][0],
          (double)am[0][1], (double)am[0][2], (double)am[1][0], (double)am[1][1], (double)am[1][2]);
    size_t dq_bad = 0;
    double ss = 0.0, worst = 0.0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) dq_bad += g[0][t * Wg + c] != g[1][t * 3 * C + c];
    for (int64_t i = 0; i < T * 2 * G * hd; i++) {
        const float v = g[0][(i / (2 * G * hd)) * Wg + C + i % (2 * G * hd)];
        ss += (double)v * v;
    }
    const double rms = sqrt(ss / (double)(T * 2 * G * hd)) + 1e-30;
    for (int64_t t = 0; t < T; t++)
        for (int64_t kv = 0; kv < 2; kv++)
            for (int64_t gh = 0; gh < G; gh++)
                for (int64_t d = 0; d < hd; d++) {
                    double sum = 0.0, mag = 0.0;
                    for (int64_t h = gh * grp; h < (gh + 1) * grp; h++) {
                        const double v = g[1][t * 3 * C + (1 + kv) * C + h * hd + d];
                        sum += v, mag += fabs(v);
                    }
                    const double x = g[0][t * Wg + C + kv * G * hd + gh * hd + d];
                    const double e = fabs(x - sum) / (mag + fabs(x) + 1e-6 * rms);
                    if (e > worst || e != e) worst = e != e ? INFINITY : e;
                }
    CHECK(dq_bad == 0, "FP8 GQA: %zu dq elements differ from the multi-head run's", dq_bad);
    CHECK(worst <= 0x1p-8, "FP8 GQA: dk/dv %.3g (of sum |head| + |gqa|) from the sum of the multi-head run's", worst);
    printf("  FP8 GQA B%lld S%lld nh%lld G%lld hd%lld: y, amaxes, dq bitwise the multi-head run's; dk/dv within %.2g\n",
           (long long)B, (long long)S, (long long)nh, (long long)G, (long long)hd, worst);
    free(qg), free(qm), free(dy), free(y[0]), free(y[1]), free(g[0]), free(g[1]);
    return worst;
}

static inline void fp8_run_free(fp8_run *r)
{
    free(r->y);
    free(r->dqkv);
}

#endif /* F8_TESTS_ATTENTION_FP8_RIG_H */
