/*
 * test_train_ops.c — the CPU backend's embedding, cross-entropy and AdamW
 * against host references: the embedding forward bit for bit, its backward
 * against FP64 sums (repeated and out-of-range tokens, T not a multiple of S,
 * BF16); cross-entropy against FP64 (loss and gradient), finite differences,
 * padding columns, ignored rows, in place; AdamW against an FP64 host
 * implementation of f8.h's formulas over several steps (warmup, cosine,
 * clipping on and off, decay on and off, BF16 parameters), the schedule, a
 * checkpoint round trip that continues bit for bit; graph replay; launch and
 * allocation counters; bad arguments.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"

static const double PI = 3.14159265358979323846;

/* ---- helpers ------------------------------------------------------------- */

static void *dev_new(f8_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, bytes ? bytes : 1, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    return p;
}

static void put(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (f8_ctx_upload(ctx, dst, src, bytes) != F8_OK) die("f8_ctx_upload", ctx);
}

static void get(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (f8_ctx_download(ctx, dst, src, bytes) != F8_OK) die("f8_ctx_download", ctx);
}

/* Host image of n random values in dtype (N(0, sd)); vals receives the exact
 * values the image holds. */
static void *host_random(test_rng *r, f8_dtype dt, size_t n, double sd, double *vals)
{
    void *h = xmalloc(n * f8_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float v = (float)(sd * rng_normal(r));
        if (dt == F8_DTYPE_BF16) {
            uint16_t b = f8_bf16_from_float(v);
            ((uint16_t *)h)[i] = b;
            v = f8_bf16_to_float(b);
        } else {
            ((float *)h)[i] = v;
        }
        if (vals) vals[i] = v;
    }
    return h;
}

static double host_get(const void *h, f8_dtype dt, size_t i)
{
    return dt == F8_DTYPE_BF16 ? f8_bf16_to_float(((const uint16_t *)h)[i]) : ((const float *)h)[i];
}

/* A backend tensor holding a host image (zeros if host is NULL). */
static f8_tensor dev_tensor(f8_ctx *ctx, const void *host, f8_dtype dt, int64_t rows, int64_t cols)
{
    size_t bytes = (size_t)(rows * cols) * f8_dtype_size(dt);
    void *d = dev_new(ctx, bytes);
    if (bytes) {
        void *z = host ? NULL : calloc(1, bytes);
        put(ctx, d, host ? host : z, bytes);
        free(z);
    }
    return f8_tensor_make(d, dt, rows, cols);
}

/* Host copy of a tensor's bytes (malloc'd). */
static void *dev_read(f8_ctx *ctx, const f8_tensor *t)
{
    size_t bytes = (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype);
    void *h = xmalloc(bytes);
    if (bytes) get(ctx, h, t->data, bytes);
    return h;
}

/* 1 when two checkpoints hold the same entries, byte for byte. */
static int same_entries(const f8_checkpoint *a, const f8_checkpoint *b)
{
    if (f8i_checkpoint_count(a) != f8i_checkpoint_count(b)) return 0;
    for (size_t i = 0; i < f8i_checkpoint_count(a); i++) {
        const f8i_ck_entry *x = f8i_checkpoint_entry(a, i), *y = f8i_checkpoint_entry(b, i);
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->bytes != y->bytes || memcmp(x->data, y->data, x->bytes))
            return 0;
    }
    return 1;
}

/* ---- embedding ------------------------------------------------------------ */

static void test_embedding_forward(f8_ctx *ctx, f8_dtype wdt, f8_dtype pdt, f8_dtype ydt)
{
    test_rng r = {11 + wdt * 3 + pdt * 5 + ydt};
    const int64_t V = 37, C = 13, S = 8, T = 2 * S + 5;
    int32_t tokens[2 * 8 + 5] = {3, 3, 0, 36, -1, 37, 1000, INT32_MIN, 3, 5, 7, 3, 36, 0, 2, 9, 3, 3, 11, -5, 4};
    void *wte_h = host_random(&r, wdt, (size_t)(V * C), 1.0, NULL);
    void *wpe_h = host_random(&r, pdt, (size_t)((S + 2) * C), 1.0, NULL);
    f8_tensor wte = dev_tensor(ctx, wte_h, wdt, V, C), wpe = dev_tensor(ctx, wpe_h, pdt, S + 2, C);
    f8_tensor y = dev_tensor(ctx, NULL, ydt, T, C);
    int32_t *tok = (int32_t *)dev_new(ctx, sizeof tokens);
    put(ctx, tok, tokens, sizeof tokens);
    CHECK_OK(ctx, f8_embedding_forward(ctx, tok, S, &wte, &wpe, &y));
    void *yh = dev_read(ctx, &y);
    int bad = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            float w = tokens[t] >= 0 && tokens[t] < V ? (float)host_get(wte_h, wdt, (size_t)(tokens[t] * C + c)) : 0.0f;
            float v = w + (float)host_get(wpe_h, pdt, (size_t)((t % S) * C + c));
            uint32_t want, got;
            if (ydt == F8_DTYPE_BF16) {
                want = f8_bf16_from_float(v);
                got = ((uint16_t *)yh)[t * C + c];
            } else {
                memcpy(&want, &v, 4);
                memcpy(&got, (float *)yh + t * C + c, 4);
            }
            bad += want != got;
        }
    CHECK(bad == 0, "embedding forward %s/%s->%s: %d elements differ from wte[tok] + wpe[t mod S]", f8_dtype_name(wdt),
          f8_dtype_name(pdt), f8_dtype_name(ydt), bad);
    free(wte_h), free(wpe_h), free(yh);
    f8_ctx_free(ctx, wte.data), f8_ctx_free(ctx, wpe.data), f8_ctx_free(ctx, y.data), f8_ctx_free(ctx, tok);
}

/* dwte/dwpe (start: random) += the sums of dy; FP64 reference. */
static void test_embedding_backward(f8_ctx *ctx, f8_dtype ddt, f8_dtype gdt, int64_t T, int with_dwpe)
{
    test_rng r = {101 + (uint64_t)T + ddt * 7 + gdt * 13};
    const int64_t V = 37, C = 13, S = 8;
    int32_t *tokens = (int32_t *)xmalloc((size_t)T * sizeof *tokens);
    for (int64_t t = 0; t < T; t++) {
        double u = rng_uniform(&r);
        tokens[t] = u < 0.4 ? 3 : u < 0.5 ? 36 : u < 0.55 ? -1 : u < 0.6 ? (int32_t)V : (int32_t)(rng_u64(&r) % 30);
    }
    double *dy_v = (double *)xmalloc((size_t)(T * C) * sizeof(double));
    double *w0 = (double *)xmalloc((size_t)(V * C) * sizeof(double));
    double *p0 = (double *)xmalloc((size_t)(S * C) * sizeof(double));
    void *dy_h = host_random(&r, ddt, (size_t)(T * C), 1.0, dy_v);
    void *w_h = host_random(&r, gdt, (size_t)(V * C), 1.0, w0);
    void *p_h = host_random(&r, gdt, (size_t)(S * C), 1.0, p0);
    f8_tensor dy = dev_tensor(ctx, dy_h, ddt, T, C), dw = dev_tensor(ctx, w_h, gdt, V, C), dp = dev_tensor(ctx, p_h, gdt, S, C);
    int32_t *tok = (int32_t *)dev_new(ctx, (size_t)T * sizeof *tokens);
    put(ctx, tok, tokens, (size_t)T * sizeof *tokens);
    CHECK_OK(ctx, f8_embedding_backward(ctx, tok, S, &dy, &dw, with_dwpe ? &dp : NULL));
    void *w1 = dev_read(ctx, &dw), *p1 = dev_read(ctx, &dp);

    /* reference: sums and sums of |.| (the bound's scale) */
    double *ref = (double *)calloc((size_t)(V * C), sizeof(double)), *mag = (double *)calloc((size_t)(V * C), sizeof(double));
    int *named = (int *)calloc((size_t)V, sizeof(int));
    for (int64_t t = 0; t < T; t++) {
        if (tokens[t] < 0 || tokens[t] >= V) continue;
        named[tokens[t]] = 1;
        for (int64_t c = 0; c < C; c++) {
            ref[tokens[t] * C + c] += dy_v[t * C + c];
            mag[tokens[t] * C + c] += fabs(dy_v[t * C + c]);
        }
    }
    const double eps = gdt == F8_DTYPE_BF16 ? 1.0 / 256 : 0.0;
    int bad = 0, touched = 0;
    for (int64_t v = 0; v < V; v++)
        for (int64_t c = 0; c < C; c++) {
            const size_t i = (size_t)(v * C + c);
            double got = host_get(w1, gdt, i), want = w0[i] + ref[i];
            if (!named[v]) {
                touched += memcmp((char *)w1 + i * f8_dtype_size(gdt), (char *)w_h + i * f8_dtype_size(gdt),
                                  f8_dtype_size(gdt)) != 0;
                continue;
            }
            double tol = 4e-7 * (fabs(w0[i]) + mag[i]) + eps * fabs(want) + 1e-30;
            if (fabs(got - want) > tol && bad++ < 3)
                fprintf(stderr, "dwte[%lld, %lld] = %.9g, want %.9g\n", (long long)v, (long long)c, got, want);
        }
    CHECK(bad == 0, "embedding backward dwte (dy %s, grad %s, T %lld): %d elements off", f8_dtype_name(ddt),
          f8_dtype_name(gdt), (long long)T, bad);
    CHECK(touched == 0, "embedding backward: %d elements of rows no token names changed", touched);
    bad = 0;
    for (int64_t s = 0; s < S; s++)
        for (int64_t c = 0; c < C; c++) {
            const size_t i = (size_t)(s * C + c);
            double sum = 0, m = 0;
            for (int64_t t = s; t < T; t += S) sum += dy_v[t * C + c], m += fabs(dy_v[t * C + c]);
            double got = host_get(p1, gdt, i), want = with_dwpe ? p0[i] + sum : p0[i];
            if (!with_dwpe || s >= T) bad += got != p0[i];
            else bad += fabs(got - want) > 4e-7 * (fabs(p0[i]) + m) + eps * fabs(want);
        }
    CHECK(bad == 0, "embedding backward dwpe (%s, T %lld, dwpe %s): %d elements off", f8_dtype_name(gdt), (long long)T,
          with_dwpe ? "on" : "NULL", bad);
    free(tokens), free(dy_v), free(w0), free(p0), free(dy_h), free(w_h), free(p_h), free(w1), free(p1);
    free(ref), free(mag), free(named);
    f8_ctx_free(ctx, dy.data), f8_ctx_free(ctx, dw.data), f8_ctx_free(ctx, dp.data), f8_ctx_free(ctx, tok);
}

/* ---- cross-entropy ---------------------------------------------------------- */

/* FP64 loss and gradient of one row of values x[0..vocab). */
static double ref_row(const double *x, int64_t vocab, int32_t y, double *grad, double scale)
{
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < vocab; c++) m = fmax(m, x[c]);
    for (int64_t c = 0; c < vocab; c++) s += exp(x[c] - m);
    for (int64_t c = 0; c < vocab && grad; c++) grad[c] = (exp(x[c] - m) / s - (c == y)) * scale;
    return m + log(s) - x[y];
}

static void test_cross_entropy(f8_ctx *ctx, f8_dtype xdt, f8_dtype ddt)
{
    test_rng r = {31 + xdt * 2 + ddt};
    const int64_t T = 9, V = 50, Vp = 56;
    const int32_t targets[9] = {4, -1, 49, 50, 0, 55, 17, INT32_MIN, 23};
    double *xv = (double *)xmalloc((size_t)(T * Vp) * sizeof(double));
    void *xh = host_random(&r, xdt, (size_t)(T * Vp), 2.0, xv);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < Vp; c++) {
            float v = c >= V ? 1e30f : t == 6 ? (float)(1000.0 + xv[t * Vp + c]) : (float)xv[t * Vp + c];
            if (xdt == F8_DTYPE_BF16) {
                ((uint16_t *)xh)[t * Vp + c] = f8_bf16_from_float(v);
                v = f8_bf16_to_float(((uint16_t *)xh)[t * Vp + c]);
            } else {
                ((float *)xh)[t * Vp + c] = v;
            }
            xv[t * Vp + c] = v;
        }
    int valid = 0;
    for (int t = 0; t < T; t++) valid += targets[t] >= 0 && targets[t] < V;
    const float scale = 1.0f / (float)valid;
    f8_tensor x = dev_tensor(ctx, xh, xdt, T, Vp), d = dev_tensor(ctx, NULL, ddt, T, Vp);
    int32_t *tg = (int32_t *)dev_new(ctx, sizeof targets);
    put(ctx, tg, targets, sizeof targets);
    float *loss = (float *)dev_new(ctx, T * sizeof(float)), *loss2 = (float *)dev_new(ctx, T * sizeof(float));
    CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, scale, loss, &d));
    CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, scale, loss2, NULL));
    float lh[9], lh2[9];
    get(ctx, lh, loss, sizeof lh);
    get(ctx, lh2, loss2, sizeof lh2);
    CHECK(memcmp(lh, lh2, sizeof lh) == 0, "cross-entropy: the losses depend on whether dlogits is given");
    void *dh = dev_read(ctx, &d);
    double grad[56];
    int bad_l = 0, bad_g = 0, bad_z = 0;
    for (int64_t t = 0; t < T; t++) {
        const int32_t y = targets[t];
        if (y < 0 || y >= V) {
            bad_l += lh[t] != 0.0f;
            for (int64_t c = 0; c < Vp; c++) bad_z += host_get(dh, ddt, (size_t)(t * Vp + c)) != 0.0;
            continue;
        }
        double want = ref_row(xv + t * Vp, V, y, grad, scale);
        if (fabs(lh[t] - want) > 2e-6 * (1 + fabs(want)) && bad_l++ < 3)
            fprintf(stderr, "loss[%lld] = %.9g, want %.9g\n", (long long)t, lh[t], want);
        for (int64_t c = 0; c < Vp; c++) {
            double g = host_get(dh, ddt, (size_t)(t * Vp + c));
            if (c >= V) {
                bad_z += g != 0.0;
                continue;
            }
            double tol = (ddt == F8_DTYPE_BF16 ? fabs(grad[c]) / 256 : 0) + 2e-6 * fabs(grad[c]) + 1e-7 * scale;
            if (fabs(g - grad[c]) > tol && bad_g++ < 3)
                fprintf(stderr, "dlogits[%lld, %lld] = %.9g, want %.9g\n", (long long)t, (long long)c, g, grad[c]);
        }
    }
    CHECK(bad_l == 0, "cross-entropy %s: %d losses off the FP64 reference", f8_dtype_name(xdt), bad_l);
    CHECK(bad_g == 0, "cross-entropy %s -> %s: %d gradients off the FP64 reference", f8_dtype_name(xdt),
          f8_dtype_name(ddt), bad_g);
    CHECK(bad_z == 0, "cross-entropy: %d padding-column or ignored-row gradients are not 0", bad_z);

    /* in place: the same bits as out of place */
    if (xdt == ddt) {
        CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, scale, loss2, &x));
        void *ih = dev_read(ctx, &x);
        get(ctx, lh2, loss2, sizeof lh2);
        CHECK(memcmp(ih, dh, (size_t)(T * Vp) * f8_dtype_size(xdt)) == 0, "cross-entropy in place differs (%s)",
              f8_dtype_name(xdt));
        CHECK(memcmp(lh, lh2, sizeof lh) == 0, "cross-entropy in place: losses differ");
        free(ih);
    }
    free(xv), free(xh), free(dh);
    f8_ctx_free(ctx, x.data), f8_ctx_free(ctx, d.data), f8_ctx_free(ctx, tg), f8_ctx_free(ctx, loss);
    f8_ctx_free(ctx, loss2);
}

/* Central differences of the FP32 loss against dlogits (grad_scale 1). */
static void test_cross_entropy_fd(f8_ctx *ctx)
{
    test_rng r = {77};
    const int64_t T = 3, V = 20, Vp = 24;
    const int32_t targets[3] = {5, 0, 19};
    float xh[3 * 24];
    for (int i = 0; i < T * Vp; i++) xh[i] = (float)(1.5 * rng_normal(&r));
    f8_tensor x = dev_tensor(ctx, xh, F8_DTYPE_FP32, T, Vp), d = dev_tensor(ctx, NULL, F8_DTYPE_FP32, T, Vp);
    int32_t *tg = (int32_t *)dev_new(ctx, sizeof targets);
    put(ctx, tg, targets, sizeof targets);
    float *loss = (float *)dev_new(ctx, sizeof(float) * T);
    CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, 1.0f, loss, &d));
    float dh[3 * 24];
    get(ctx, dh, d.data, sizeof dh);
    double worst = 0;
    const float h = 1e-2f;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < V; c += 3) {
            float lp[3], lm[3], save = xh[t * Vp + c];
            xh[t * Vp + c] = save + h;
            put(ctx, x.data, xh, sizeof xh);
            CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, 1.0f, loss, NULL));
            get(ctx, lp, loss, sizeof lp);
            xh[t * Vp + c] = save - h;
            put(ctx, x.data, xh, sizeof xh);
            CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, 1.0f, loss, NULL));
            get(ctx, lm, loss, sizeof lm);
            xh[t * Vp + c] = save;
            double fd = ((double)lp[t] - lm[t]) / (2.0 * h);
            worst = fmax(worst, fabs(fd - dh[t * Vp + c]));
        }
    CHECK(worst < 1e-3, "cross-entropy finite differences: worst |fd - dlogits| = %g", worst);
    f8_ctx_free(ctx, x.data), f8_ctx_free(ctx, d.data), f8_ctx_free(ctx, tg), f8_ctx_free(ctx, loss);
}

/* ---- AdamW -------------------------------------------------------------------- */

static double ref_lr(const f8_adamw_config *c, int64_t step)
{
    if (step < c->warmup_steps) return (double)c->lr_max * (double)(step + 1) / (double)c->warmup_steps;
    if (c->total_steps <= c->warmup_steps) return c->lr_max;
    double p = (double)(step - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
    if (p > 1) p = 1;
    return (double)c->lr_min + ((double)c->lr_max - (double)c->lr_min) * (1 + cos(PI * p)) * 0.5;
}

typedef struct pspec {
    int64_t rows, cols;
    f8_dtype pdt, gdt;
    int decay;
} pspec;

static const pspec PARAMS[5] = {
    {7, 13, F8_DTYPE_FP32, F8_DTYPE_FP32, 1}, {1, 13, F8_DTYPE_FP32, F8_DTYPE_FP32, 0},
    {5, 9, F8_DTYPE_BF16, F8_DTYPE_FP32, 1},  {3, 3, F8_DTYPE_FP32, F8_DTYPE_BF16, 1},
    {1, 1, F8_DTYPE_BF16, F8_DTYPE_BF16, 0},
};
#define NP 5

/* A model: the parameters and gradients of PARAMS, on a ctx. */
typedef struct model {
    f8_tensor p[NP], g[NP];
} model;

static void model_make(f8_ctx *ctx, model *m, uint64_t seed)
{
    test_rng r = {seed};
    for (int i = 0; i < NP; i++) {
        const pspec *s = &PARAMS[i];
        void *h = host_random(&r, s->pdt, (size_t)(s->rows * s->cols), 1.0, NULL);
        m->p[i] = dev_tensor(ctx, h, s->pdt, s->rows, s->cols);
        m->g[i] = dev_tensor(ctx, NULL, s->gdt, s->rows, s->cols);
        free(h);
    }
}

static void model_free(f8_ctx *ctx, model *m)
{
    for (int i = 0; i < NP; i++) f8_ctx_free(ctx, m->p[i].data), f8_ctx_free(ctx, m->g[i].data);
}

/* Upload the gradients of step k (deterministic in k); vals[i] receives them. */
static void model_grads(f8_ctx *ctx, model *m, int k, double **vals)
{
    test_rng r = {1000 + (uint64_t)k};
    for (int i = 0; i < NP; i++) {
        const pspec *s = &PARAMS[i];
        const size_t n = (size_t)(s->rows * s->cols);
        void *h = host_random(&r, s->gdt, n, 0.5, vals ? vals[i] : NULL);
        if (i == 0) { /* an exact zero gradient: m = v = 0, the update is wd only */
            if (s->gdt == F8_DTYPE_FP32) ((float *)h)[0] = 0.0f;
            if (vals) vals[i][0] = 0.0;
        }
        put(ctx, m->g[i].data, h, n * f8_dtype_size(s->gdt));
        free(h);
    }
}

static f8_adamw *adamw_make(f8_ctx *ctx, const f8_adamw_config *cfg, model *m)
{
    f8_adamw *o = NULL;
    if (f8_adamw_create(ctx, cfg, &o) != F8_OK) die("f8_adamw_create", ctx);
    for (int i = 0; i < NP; i++)
        if (f8_adamw_add(o, &m->p[i], &m->g[i], PARAMS[i].decay) != F8_OK) die("f8_adamw_add", ctx);
    return o;
}

static void test_adamw_reference(f8_ctx *ctx, const char *what, f8_adamw_config cfg, int steps)
{
    model m;
    model_make(ctx, &m, 5);
    f8_adamw *o = adamw_make(ctx, &cfg, &m);
    double *p[NP], *mm[NP], *vv[NP], *g[NP], *am[NP]; /* am: m's recursion over |g| (cancellation scale) */
    for (int i = 0; i < NP; i++) {
        const size_t n = (size_t)(PARAMS[i].rows * PARAMS[i].cols);
        void *h = dev_read(ctx, &m.p[i]);
        p[i] = (double *)xmalloc(n * sizeof(double));
        mm[i] = (double *)calloc(n, sizeof(double));
        vv[i] = (double *)calloc(n, sizeof(double));
        am[i] = (double *)calloc(n, sizeof(double));
        g[i] = (double *)xmalloc(n * sizeof(double));
        for (size_t j = 0; j < n; j++) p[i][j] = host_get(h, PARAMS[i].pdt, j);
        free(h);
    }
    int bad_p = 0, bad_m = 0, bad_s = 0;
    for (int k = 0; k < steps; k++) {
        model_grads(ctx, &m, k, g);
        CHECK_OK(ctx, f8_adamw_step(o));
        double sq = 0;
        for (int i = 0; i < NP; i++)
            for (int64_t j = 0; j < PARAMS[i].rows * PARAMS[i].cols; j++) sq += g[i][j] * g[i][j];
        const double norm = sqrt(sq), lr = (float)ref_lr(&cfg, k);
        const double c = cfg.grad_clip > 0 && norm > cfg.grad_clip ? cfg.grad_clip / norm : 1.0;
        const double bc1 = 1 - pow(cfg.beta1, k + 1), bc2 = 1 - pow(cfg.beta2, k + 1);
        int64_t step_read = -1;
        float lr_read = -1, norm_read = -1;
        CHECK_OK(ctx, f8_adamw_read(o, &step_read, &lr_read, &norm_read));
        bad_s += step_read != k + 1 || lr_read != (float)lr || fabs(norm_read - norm) > 1e-6 * norm;
        for (int i = 0; i < NP; i++) {
            const pspec *s = &PARAMS[i];
            const int64_t n = s->rows * s->cols;
            void *h = dev_read(ctx, &m.p[i]);
            for (int64_t j = 0; j < n; j++) {
                const double gg = c * g[i][j];
                mm[i][j] = cfg.beta1 * mm[i][j] + (1 - (double)cfg.beta1) * gg;
                am[i][j] = cfg.beta1 * am[i][j] + (1 - (double)cfg.beta1) * fabs(gg);
                vv[i][j] = cfg.beta2 * vv[i][j] + (1 - (double)cfg.beta2) * gg * gg;
                const double wd = s->decay ? cfg.weight_decay : 0;
                const double upd = (mm[i][j] / bc1) / (sqrt(vv[i][j] / bc2) + cfg.eps) + wd * p[i][j];
                const double want = p[i][j] - lr * upd;
                const double got = host_get(h, s->pdt, (size_t)j);
                /* BF16: one unit in the last place of the stored value; then follow the library's value */
                const double tol = s->pdt == F8_DTYPE_BF16 ? fabs(want) / 128 + 1e-30 : 2e-6 * (fabs(want) + lr);
                if (fabs(got - want) > tol && bad_p++ < 3)
                    fprintf(stderr, "%s step %d param %d[%lld] = %.9g, want %.9g\n", what, k, i, (long long)j, got, want);
                p[i][j] = s->pdt == F8_DTYPE_BF16 ? got : want;
            }
            free(h);
        }
    }
    /* the moments after the last step, through a checkpoint */
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    CHECK_OK(ctx, f8_checkpoint_add_adamw(ck, "opt", o));
    for (int i = 0; i < NP && ck; i++) {
        const int64_t n = PARAMS[i].rows * PARAMS[i].cols;
        char name[64];
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "opt.%s.%d", k ? "v" : "m", i);
            const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
            CHECK(e && e->dtype == F8I_CK_F32 && e->ndim == 2 && e->shape[0] == PARAMS[i].rows &&
                      e->shape[1] == PARAMS[i].cols, "checkpoint entry %s", name);
            if (!e) continue;
            for (int64_t j = 0; j < n; j++) {
                float got;
                memcpy(&got, e->data + 4 * j, 4);
                const double want = k ? vv[i][j] : mm[i][j];
                if (fabs(got - want) > 1e-5 * fabs(want) + 1e-6 * (k ? 0 : am[i][j]) + 1e-12 && bad_m++ < 3)
                    fprintf(stderr, "%s %s[%lld] = %.9g, want %.9g\n", what, name, (long long)j, got, want);
            }
        }
    }
    const f8i_ck_entry *es = ck ? f8i_checkpoint_find(ck, "opt.step") : NULL;
    CHECK(es && es->dtype == F8I_CK_I64 && es->bytes == 8, "checkpoint entry opt.step");
    f8_checkpoint_destroy(ck);
    CHECK(bad_p == 0, "AdamW %s: %d parameter values off the FP64 reference", what, bad_p);
    CHECK(bad_m == 0, "AdamW %s: %d moments off the FP64 reference", what, bad_m);
    CHECK(bad_s == 0, "AdamW %s: f8_adamw_read disagrees with the reference in %d steps", what, bad_s);
    for (int i = 0; i < NP; i++) free(p[i]), free(mm[i]), free(vv[i]), free(g[i]), free(am[i]);
    f8_adamw_destroy(o);
    model_free(ctx, &m);
}

static void test_schedule(f8_ctx *ctx)
{
    const int64_t warm[4] = {3, 0, 4, 1}, total[4] = {10, 0, 0, 7};
    for (int k = 0; k < 4; k++) {
        f8_adamw_config cfg = f8_adamw_config_default();
        cfg.lr_max = 1.0f;
        cfg.lr_min = 0.1f;
        cfg.warmup_steps = warm[k];
        cfg.total_steps = total[k];
        f8_adamw *o = NULL;
        CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &o));
        if (!o) continue;
        int64_t step = -1;
        float lr = -1, norm = -1;
        CHECK_OK(ctx, f8_adamw_read(o, &step, &lr, &norm));
        CHECK(step == 0 && lr == 0 && norm == 0, "a new optimizer reads step %lld lr %g norm %g", (long long)step, lr, norm);
        int bad = 0;
        for (int64_t s = 0; s < 14; s++) {
            CHECK_OK(ctx, f8_adamw_step(o));
            CHECK_OK(ctx, f8_adamw_read(o, &step, &lr, &norm));
            const float want = (float)ref_lr(&cfg, s);
            if ((lr != want || step != s + 1) && bad++ < 3)
                fprintf(stderr, "schedule %d: step %lld lr %.9g, want %.9g\n", k, (long long)s, lr, want);
        }
        CHECK(bad == 0, "lr schedule (warmup %lld, total %lld): %d steps off", (long long)warm[k], (long long)total[k], bad);
        f8_adamw_destroy(o);
    }
    /* spot values */
    f8_adamw_config c = f8_adamw_config_default();
    c.lr_max = 1, c.lr_min = 0.1f, c.warmup_steps = 3, c.total_steps = 10;
    CHECK(fabs(ref_lr(&c, 0) - 1.0 / 3) < 1e-12 && fabs(ref_lr(&c, 3) - 1.0) < 1e-7 && fabs(ref_lr(&c, 10) - 0.1) < 1e-7 &&
              fabs(ref_lr(&c, 6) - (0.1 + 0.9 * (1 + cos(PI * 3 / 7)) / 2)) < 1e-7,
          "the reference schedule itself");
}

/* Run `steps` steps of AdamW from step `from` on model m with optimizer o. */
static void run_steps(f8_ctx *ctx, model *m, f8_adamw *o, int from, int steps)
{
    for (int k = from; k < from + steps; k++) {
        model_grads(ctx, m, k, NULL);
        CHECK_OK(ctx, f8_adamw_step(o));
    }
}

static int models_equal(f8_ctx *ctx, model *a, model *b)
{
    int eq = 1;
    for (int i = 0; i < NP; i++) {
        void *x = dev_read(ctx, &a->p[i]), *y = dev_read(ctx, &b->p[i]);
        eq &= memcmp(x, y, (size_t)(a->p[i].rows * a->p[i].cols) * f8_dtype_size(a->p[i].dtype)) == 0;
        free(x), free(y);
    }
    return eq;
}

static void test_checkpoint(f8_ctx *ctx)
{
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.lr_min = 1e-3f, cfg.warmup_steps = 2, cfg.total_steps = 8, cfg.grad_clip = 1.0f;
    model a, b;
    model_make(ctx, &a, 9);
    model_make(ctx, &b, 10); /* different start: the restore must overwrite everything that matters */
    f8_adamw *oa = adamw_make(ctx, &cfg, &a), *ob = adamw_make(ctx, &cfg, &b);
    run_steps(ctx, &a, oa, 0, 3);

    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    if (!ck) return;
    for (int i = 0; i < NP; i++) {
        char name[32];
        snprintf(name, sizeof name, "p.%d", i);
        CHECK_OK(ctx, f8_checkpoint_add_tensor(ck, name, &a.p[i]));
    }
    CHECK_OK(ctx, f8_checkpoint_add_adamw(ck, "opt", oa));
    CHECK_STATUS(ctx, f8_checkpoint_add_adamw(ck, "opt", oa), F8_ERR_INVALID_ARGUMENT); /* names taken */
    char path[128];
    snprintf(path, sizeof path, "/tmp/f8_test_train_ops.%ld.safetensors", (long)getpid());
    CHECK_OK(ctx, f8_checkpoint_save(ck, path));
    f8_checkpoint *ld = NULL;
    CHECK_OK(ctx, f8_checkpoint_load(ctx, path, &ld));
    remove(path);
    if (!ld) return;
    for (int i = 0; i < NP; i++) {
        char name[32];
        snprintf(name, sizeof name, "p.%d", i);
        CHECK_OK(ctx, f8_checkpoint_read_tensor(ld, name, &b.p[i]));
    }
    CHECK_OK(ctx, f8_checkpoint_restore_adamw(ld, "opt", ob));
    int64_t sa, sb;
    float lra, lrb, na, nb;
    CHECK_OK(ctx, f8_adamw_read(oa, &sa, &lra, &na));
    CHECK_OK(ctx, f8_adamw_read(ob, &sb, &lrb, &nb));
    CHECK(sa == 3 && sb == 3 && lra == lrb && na == nb, "restored state: step %lld/%lld lr %g/%g norm %g/%g",
          (long long)sa, (long long)sb, lra, lrb, na, nb);
    run_steps(ctx, &a, oa, 3, 4);
    run_steps(ctx, &b, ob, 3, 4);
    CHECK(models_equal(ctx, &a, &b), "a run resumed from a checkpoint differs from the uninterrupted one");
    CHECK_OK(ctx, f8_adamw_read(ob, &sb, &lrb, &nb));
    CHECK(sb == 7, "resumed step counter %lld, want 7", (long long)sb);

    /* mismatches: nothing changes (the optimizer's own checkpoint before and after) */
    f8_adamw *few = NULL;
    CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &few));
    CHECK_OK(ctx, f8_adamw_add(few, &b.p[0], &b.g[0], 1));
    CHECK_STATUS(ctx, f8_checkpoint_restore_adamw(ld, "opt", few), F8_ERR_SHAPE); /* more stored than registered */
    f8_adamw_destroy(few);
    model c; /* PARAMS registered in reverse order: the first moment already has the wrong shape */
    model_make(ctx, &c, 11);
    f8_adamw *oc = NULL;
    CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &oc));
    for (int i = NP - 1; i >= 0 && oc; i--) CHECK_OK(ctx, f8_adamw_add(oc, &c.p[i], &c.g[i], 1));
    /* and in order but with a parameter of another shape last */
    f8_tensor odd = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 2, 2), odd_g = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 2, 2);
    f8_adamw *od = NULL;
    CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &od));
    for (int i = 0; i < NP - 1 && od; i++) CHECK_OK(ctx, f8_adamw_add(od, &c.p[i], &c.g[i], 1));
    CHECK_OK(ctx, f8_adamw_add(od, &odd, &odd_g, 1));
    run_steps(ctx, &c, oc, 0, 1);
    f8_adamw *victims[3] = {oc, od, ob};
    const char *bad_prefix[3] = {"opt", "opt", "nothere"};
    const f8_status want[3] = {F8_ERR_SHAPE, F8_ERR_SHAPE, F8_ERR_INVALID_ARGUMENT};
    for (int k = 0; k < 3; k++) {
        f8_checkpoint *before = NULL, *after = NULL;
        CHECK_OK(ctx, f8_checkpoint_create(ctx, &before));
        CHECK_OK(ctx, f8_checkpoint_create(ctx, &after));
        CHECK_OK(ctx, f8_checkpoint_add_adamw(before, "x", victims[k]));
        CHECK_STATUS(ctx, f8_checkpoint_restore_adamw(ld, bad_prefix[k], victims[k]), want[k]);
        CHECK_OK(ctx, f8_checkpoint_add_adamw(after, "x", victims[k]));
        CHECK(same_entries(before, after), "a failed restore (%d) changed the optimizer", k);
        f8_checkpoint_destroy(before), f8_checkpoint_destroy(after);
    }
    CHECK_STATUS(ctx, f8_checkpoint_restore_adamw(NULL, "opt", ob), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_checkpoint_restore_adamw(ld, NULL, ob), F8_ERR_INVALID_ARGUMENT);
    f8_checkpoint *other = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &other));
    CHECK_OK(ctx, f8_checkpoint_add_adamw(other, "", ob)); /* an empty prefix: "m.0", "step", ... */
    CHECK(other && f8_checkpoint_has(other, "m.0") && f8_checkpoint_has(other, "v.4"), "names under an empty prefix");
    f8_checkpoint_destroy(other);
    f8_adamw_destroy(od);
    f8_ctx_free(ctx, odd.data), f8_ctx_free(ctx, odd_g.data);
    f8_checkpoint_destroy(ck), f8_checkpoint_destroy(ld);
    f8_adamw_destroy(oa), f8_adamw_destroy(ob), f8_adamw_destroy(oc);
    model_free(ctx, &a), model_free(ctx, &b), model_free(ctx, &c);
}

/* ---- a whole small step, eager and graphed; counters ---------------------------- */

typedef struct mini {
    f8_tensor wte, wpe, dwte, dwpe, x, logits;
    int32_t *tok, *tgt;
    float *loss;
    f8_adamw *opt;
} mini;

static void mini_make(f8_ctx *ctx, mini *s)
{
    test_rng r = {555};
    const int64_t V = 16, C = 8, T = 12;
    void *h = host_random(&r, F8_DTYPE_FP32, (size_t)(V * C), 0.5, NULL);
    s->wte = dev_tensor(ctx, h, F8_DTYPE_FP32, V, C);
    free(h);
    h = host_random(&r, F8_DTYPE_FP32, (size_t)(4 * C), 0.5, NULL);
    s->wpe = dev_tensor(ctx, h, F8_DTYPE_FP32, 4, C);
    free(h);
    s->dwte = dev_tensor(ctx, NULL, F8_DTYPE_FP32, V, C);
    s->dwpe = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 4, C);
    s->x = dev_tensor(ctx, NULL, F8_DTYPE_FP32, T, C);
    s->logits = s->x; /* the "logits" are the embeddings themselves (C columns, vocab 7) */
    int32_t tok[12] = {1, 2, 3, 1, 1, 15, 0, 7, 7, 2, -1, 16}, tgt[12] = {2, 3, 1, 1, 6, 0, 7, 2, 5, 4, 1, 0};
    s->tok = (int32_t *)dev_new(ctx, sizeof tok);
    s->tgt = (int32_t *)dev_new(ctx, sizeof tgt);
    s->loss = (float *)dev_new(ctx, T * sizeof(float));
    put(ctx, s->tok, tok, sizeof tok);
    put(ctx, s->tgt, tgt, sizeof tgt);
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 0.05f, cfg.warmup_steps = 1, cfg.total_steps = 5;
    if (f8_adamw_create(ctx, &cfg, &s->opt) != F8_OK) die("f8_adamw_create", ctx);
    if (f8_adamw_add(s->opt, &s->wte, &s->dwte, 1) != F8_OK || f8_adamw_add(s->opt, &s->wpe, &s->dwpe, 0) != F8_OK)
        die("f8_adamw_add", ctx);
}

static f8_status mini_step(f8_ctx *ctx, mini *s)
{
    f8_status st = f8_embedding_forward(ctx, s->tok, 4, &s->wte, &s->wpe, &s->x);
    if (st == F8_OK) st = f8_cross_entropy(ctx, &s->logits, 7, s->tgt, 1.0f / 12, s->loss, &s->x);
    if (st == F8_OK) st = f8_embedding_backward(ctx, s->tok, 4, &s->x, &s->dwte, &s->dwpe);
    if (st == F8_OK) st = f8_adamw_step(s->opt);
    return st;
}

static void mini_free(f8_ctx *ctx, mini *s)
{
    f8_adamw_destroy(s->opt);
    f8_ctx_free(ctx, s->wte.data), f8_ctx_free(ctx, s->wpe.data), f8_ctx_free(ctx, s->dwte.data);
    f8_ctx_free(ctx, s->dwpe.data), f8_ctx_free(ctx, s->x.data), f8_ctx_free(ctx, s->tok), f8_ctx_free(ctx, s->tgt);
    f8_ctx_free(ctx, s->loss);
}

static void test_graph_and_counters(f8_ctx *ctx)
{
    mini e, g;
    mini_make(ctx, &e);
    mini_make(ctx, &g);
    f8_ctx_counters c0, c1;
    CHECK_OK(ctx, f8_ctx_counters_read(ctx, &c0));
    for (int k = 0; k < 3; k++) CHECK_OK(ctx, mini_step(ctx, &e));
    CHECK_OK(ctx, f8_ctx_counters_read(ctx, &c1));
    CHECK(c1.allocations == c0.allocations, "steps allocated %llu times",
          (unsigned long long)(c1.allocations - c0.allocations));
    CHECK(c1.launches - c0.launches == 3 * 4, "3 steps counted %llu launches, want 12 (4 ops a step)",
          (unsigned long long)(c1.launches - c0.launches));

    /* the same steps captured before any eager step (the optimizer allocated everything at add) */
    f8_graph *graph = NULL;
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, mini_step(ctx, &g));
    CHECK_OK(ctx, f8_graph_end(ctx, &graph));
    CHECK_STATUS(ctx, f8_adamw_add(g.opt, &g.x, &g.x, 0), F8_ERR_STATE); /* frozen once a step is captured */
    for (int k = 0; k < 3 && graph; k++) CHECK_OK(ctx, f8_graph_replay(graph));
    f8_graph_destroy(graph);
    int64_t step = 0;
    CHECK_OK(ctx, f8_adamw_read(g.opt, &step, NULL, NULL));
    CHECK(step == 3, "graphed optimizer step counter %lld, want 3", (long long)step);
    void *a = dev_read(ctx, &e.wte), *b = dev_read(ctx, &g.wte);
    CHECK(memcmp(a, b, (size_t)(e.wte.rows * e.wte.cols) * 4) == 0, "three graph replays differ from three eager steps");
    free(a), free(b);
    mini_free(ctx, &e);
    mini_free(ctx, &g);
}

/* ---- bad arguments: clear status, nothing changed -------------------------------- */

static void test_bad_args(f8_ctx *ctx)
{
    float wh[6 * 4], ph[3 * 4], yh[5 * 4], sentinel[5 * 4];
    for (int i = 0; i < 24; i++) wh[i] = (float)i;
    for (int i = 0; i < 12; i++) ph[i] = (float)-i;
    for (int i = 0; i < 20; i++) yh[i] = sentinel[i] = 123.0f;
    f8_tensor wte = dev_tensor(ctx, wh, F8_DTYPE_FP32, 6, 4), wpe = dev_tensor(ctx, ph, F8_DTYPE_FP32, 3, 4);
    f8_tensor y = dev_tensor(ctx, yh, F8_DTYPE_FP32, 5, 4);
    int32_t tk[5] = {0, 1, 2, 3, 4};
    int32_t *tok = (int32_t *)dev_new(ctx, sizeof tk);
    put(ctx, tok, tk, sizeof tk);
    f8_tensor bad = wte;
    bad.dtype = F8_DTYPE_E4M3;
    float one = 1.0f, *sinv = (float *)dev_new(ctx, 4);
    put(ctx, sinv, &one, 4);
    bad.scale_inv = sinv;
    CHECK_STATUS(NULL, f8_embedding_forward(NULL, tok, 3, &wte, &wpe, &y), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, NULL, 3, &wte, &wpe, &y), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 3, NULL, &wpe, &y), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 3, &bad, &wpe, &y), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 0, &wte, &wpe, &y), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 4, &wte, &wpe, &y), F8_ERR_SHAPE); /* wpe has 3 rows */
    CHECK(strstr(f8_ctx_last_error(ctx), "wpe") != NULL, "message names wpe: %s", f8_ctx_last_error(ctx));
    f8_tensor narrow = y;
    narrow.cols = 3, narrow.rows = 6;
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 3, &wte, &wpe, &narrow), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 3, &wte, &wpe, &wte), F8_ERR_INVALID_ARGUMENT); /* y aliases wte */
    float back[20];
    get(ctx, back, y.data, sizeof back);
    CHECK(memcmp(back, sentinel, sizeof back) == 0, "a failed embedding call wrote y");

    /* backward */
    f8_tensor dy = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 5, 4);
    CHECK_STATUS(ctx, f8_embedding_backward(ctx, tok, 3, &dy, &dy, NULL), F8_ERR_INVALID_ARGUMENT); /* overlap */
    CHECK_STATUS(ctx, f8_embedding_backward(ctx, tok, 3, &dy, &bad, NULL), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_embedding_backward(ctx, tok, 5, &dy, &wte, &wpe), F8_ERR_SHAPE); /* dwpe 3 rows < 5 */
    CHECK_STATUS(ctx, f8_embedding_backward(ctx, NULL, 3, &dy, &wte, NULL), F8_ERR_INVALID_ARGUMENT);
    float wback[24];
    get(ctx, wback, wte.data, sizeof wback);
    CHECK(memcmp(wback, wh, sizeof wh) == 0, "a failed embedding backward wrote dwte");

    /* cross-entropy */
    float *loss = (float *)dev_new(ctx, 6 * sizeof(float));
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 0, tok, 1, loss, NULL), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 5, tok, 1, loss, NULL), F8_ERR_SHAPE); /* vocab > cols */
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 4, NULL, 1, loss, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 4, tok, 1, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &bad, 4, tok, 1, loss, NULL), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 4, tok, 1, loss, &y), F8_ERR_SHAPE); /* rows differ */
    f8_tensor shifted = f8_tensor_make((float *)wte.data + 4, F8_DTYPE_FP32, 5, 4);
    f8_tensor first5 = f8_tensor_make(wte.data, F8_DTYPE_FP32, 5, 4);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &first5, 4, tok, 1, loss, &shifted), F8_ERR_INVALID_ARGUMENT);
    f8_tensor as_bf16 = f8_tensor_make(wte.data, F8_DTYPE_BF16, 6, 4);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 4, tok, 1, loss, &as_bf16), F8_ERR_INVALID_ARGUMENT);
    get(ctx, wback, wte.data, sizeof wback);
    CHECK(memcmp(wback, wh, sizeof wh) == 0, "a failed cross-entropy wrote its logits");

    /* AdamW */
    f8_adamw *o = NULL;
    f8_adamw_config cfg = f8_adamw_config_default();
    CHECK_STATUS(ctx, f8_adamw_create(ctx, NULL, &o), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &cfg, NULL), F8_ERR_INVALID_ARGUMENT);
    f8_adamw_config c2 = cfg;
    c2.beta1 = 1.0f;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &c2, &o), F8_ERR_INVALID_ARGUMENT);
    CHECK(o == NULL, "a failed create left an object");
    c2 = cfg, c2.warmup_steps = 5, c2.total_steps = 5;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &c2, &o), F8_ERR_INVALID_ARGUMENT);
    c2 = cfg, c2.lr_max = NAN;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &c2, &o), F8_ERR_INVALID_ARGUMENT);
    c2 = cfg, c2.grad_clip = -1;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &c2, &o), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &o));
    f8_ctx_counters k0, k1;
    f8_ctx_counters_read(ctx, &k0);
    CHECK_STATUS(ctx, f8_adamw_add(o, &wte, &y, 1), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_adamw_add(o, &bad, &bad, 1), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_adamw_add(o, NULL, &wte, 1), F8_ERR_INVALID_ARGUMENT);
    f8_ctx_counters_read(ctx, &k1);
    CHECK(k1.allocations == k0.allocations, "failed adds allocated");
    CHECK_OK(ctx, f8_adamw_add(o, &wte, &wte, 1)); /* (grad = param is legal if odd) */
    CHECK_STATUS(ctx, f8_adamw_add(o, &wte, &wpe, 1), F8_ERR_SHAPE);
    f8_tensor wte2 = wte;
    CHECK_STATUS(ctx, f8_adamw_add(o, &wte2, &wte, 1), F8_ERR_INVALID_ARGUMENT); /* registered twice */
    CHECK_OK(ctx, f8_adamw_step(o));
    CHECK_STATUS(ctx, f8_adamw_add(o, &wpe, &wpe, 1), F8_ERR_STATE);
    CHECK(strstr(f8_ctx_last_error(ctx), "stepped") != NULL, "message: %s", f8_ctx_last_error(ctx));
    CHECK_STATUS(NULL, f8_adamw_step(NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_adamw_read(NULL, NULL, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    f8_adamw_destroy(o);
    f8_adamw_destroy(NULL);

    f8_ctx_free(ctx, wte.data), f8_ctx_free(ctx, wpe.data), f8_ctx_free(ctx, y.data), f8_ctx_free(ctx, dy.data);
    f8_ctx_free(ctx, tok), f8_ctx_free(ctx, sinv), f8_ctx_free(ctx, loss);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "cannot create a CPU ctx: %s\n", why);
        return 1;
    }
    const f8_dtype d2[2] = {F8_DTYPE_FP32, F8_DTYPE_BF16};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++) test_embedding_forward(ctx, d2[a], d2[b], d2[c]);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            test_embedding_backward(ctx, d2[a], d2[b], 21, 1);  /* T = 2S + 5 */
            test_embedding_backward(ctx, d2[a], d2[b], 5, 1);   /* T < S */
            test_embedding_backward(ctx, d2[a], d2[b], 300, 0); /* no dwpe, a hot token */
        }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) test_cross_entropy(ctx, d2[a], d2[b]);
    test_cross_entropy_fd(ctx);

    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.lr_min = 1e-3f, cfg.warmup_steps = 2, cfg.total_steps = 5, cfg.grad_clip = 1.0f;
    test_adamw_reference(ctx, "warmup+cosine, clipped", cfg, 7);
    cfg.grad_clip = 0.0f, cfg.warmup_steps = 0, cfg.total_steps = 0, cfg.weight_decay = 0.0f;
    test_adamw_reference(ctx, "constant lr, no clip, no decay", cfg, 4);
    cfg.grad_clip = 100.0f, cfg.weight_decay = 0.5f, cfg.warmup_steps = 3, cfg.total_steps = 0;
    test_adamw_reference(ctx, "warmup only, clip inactive", cfg, 5);
    test_schedule(ctx);
    test_checkpoint(ctx);
    test_graph_and_counters(ctx);
    test_bad_args(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_train_ops");
}
