/*
 * test_cuda_train_ops.c — the CUDA embedding, cross-entropy and AdamW against
 * the CPU backend on the same inputs, and their determinism (two runs, the
 * same bits). Skips (exit 77) without a GPU.
 *   - embedding forward: bit for bit (one FP32 add), aligned, odd and
 *     misaligned shapes;
 *   - embedding backward: GPT-2-like shape with a Zipf-like token mix (hot
 *     tokens, so the kernel's shared list overflows and is flushed several
 *     times), out-of-range tokens, T not a multiple of S; FP32/BF16; against
 *     the CPU within the summation bound; rows no token names untouched;
 *     bitwise repeatable;
 *   - cross-entropy: 50304 padded columns (vocab 50257), FP32 and BF16,
 *     ignored rows, an odd pitch, in place; repeatable; rows that fit one
 *     block's registers, rows split over a cluster (128256 BF16 columns,
 *     a padded tail, 128256 FP32), and a row longer than a cluster holds;
 *   - AdamW: odd sizes, a large tensor, BF16 params and grads, a misaligned
 *     view; clipping off: the same bits as the CPU (the update is the same
 *     FP32 sequence, f8i_adamw_update); clipping on: within 1e-5; repeatable;
 *     a checkpoint written on the GPU resumes on the CPU bit for bit;
 *   - graph capture of a step = eager; launch and allocation counters.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static f8_ctx *CPU, *GPU;

static void *dev_new(f8_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, bytes ? bytes : 1, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    return p;
}

static void put(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes && f8_ctx_upload(ctx, dst, src, bytes) != F8_OK) die("f8_ctx_upload", ctx);
}

static void get(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes && f8_ctx_download(ctx, dst, src, bytes) != F8_OK) die("f8_ctx_download", ctx);
}

static size_t tbytes(const f8_tensor *t) { return (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype); }

/* Host image of n random values N(0, sd) in dtype. */
static void *host_random(test_rng *r, f8_dtype dt, size_t n, double sd)
{
    void *h = xmalloc(n * f8_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float v = (float)(sd * rng_normal(r));
        if (dt == F8_DTYPE_BF16) ((uint16_t *)h)[i] = f8_bf16_from_float(v);
        else ((float *)h)[i] = v;
    }
    return h;
}

static double hval(const void *h, f8_dtype dt, size_t i)
{
    return dt == F8_DTYPE_BF16 ? f8_bf16_to_float(((const uint16_t *)h)[i]) : ((const float *)h)[i];
}

/* The same tensor on both ctxs, `offset` elements into its allocation (a
 * misaligned view when offset is odd). host may be NULL (zeros). */
typedef struct pair {
    f8_tensor t[2];
    void *base[2];
} pair;

static pair pair_make(const void *host, f8_dtype dt, int64_t rows, int64_t cols, int offset)
{
    pair p;
    const size_t es = f8_dtype_size(dt), bytes = (size_t)(rows * cols) * es;
    void *z = host ? NULL : calloc(1, bytes + 1);
    f8_ctx *c[2] = {CPU, GPU};
    for (int k = 0; k < 2; k++) {
        p.base[k] = dev_new(c[k], bytes + (size_t)offset * es);
        p.t[k] = f8_tensor_make((char *)p.base[k] + (size_t)offset * es, dt, rows, cols);
        put(c[k], p.t[k].data, host ? host : z, bytes);
    }
    free(z);
    return p;
}

static void pair_free(pair *p)
{
    f8_ctx_free(CPU, p->base[0]);
    f8_ctx_free(GPU, p->base[1]);
}

static void *read_back(f8_ctx *ctx, const f8_tensor *t)
{
    void *h = xmalloc(tbytes(t));
    get(ctx, h, t->data, tbytes(t));
    return h;
}

static int32_t *ids_pair(const int32_t *host, int64_t n, int32_t *dev[2])
{
    dev[0] = (int32_t *)dev_new(CPU, (size_t)n * 4);
    dev[1] = (int32_t *)dev_new(GPU, (size_t)n * 4);
    put(CPU, dev[0], host, (size_t)n * 4);
    put(GPU, dev[1], host, (size_t)n * 4);
    return dev[1];
}

static uint64_t launches(f8_ctx *ctx)
{
    f8_ctx_counters c;
    f8_ctx_counters_read(ctx, &c);
    return c.launches;
}

static uint64_t allocations(f8_ctx *ctx)
{
    f8_ctx_counters c;
    f8_ctx_counters_read(ctx, &c);
    return c.allocations;
}

/* A Zipf-like token stream: hot ids 11 (20%) and 13 (5%), a warm band, the
 * rest uniform over [0, V), and ~1% out of range. */
static void make_tokens(test_rng *r, int32_t *tok, int64_t T, int64_t V)
{
    for (int64_t t = 0; t < T; t++) {
        double u = rng_uniform(r);
        tok[t] = u < 0.20 ? 11 : u < 0.25 ? 13 : u < 0.40 ? (int32_t)(rng_u64(r) % 300) : u < 0.41 ? (u < 0.405 ? -1 : (int32_t)V)
                                                                                                  : (int32_t)(rng_u64(r) % (uint64_t)V);
    }
}

/* ---- embedding ----------------------------------------------------------- */

static void test_embedding_forward(int64_t V, int64_t C, int64_t T, int64_t S, f8_dtype wdt, f8_dtype ydt, int offset)
{
    test_rng r = {(uint64_t)(V + C + T + offset)};
    int32_t *tok = (int32_t *)xmalloc((size_t)T * 4), *dtok[2];
    make_tokens(&r, tok, T, V);
    void *wh = host_random(&r, wdt, (size_t)(V * C), 1.0), *ph = host_random(&r, F8_DTYPE_FP32, (size_t)(S * C), 1.0);
    pair wte = pair_make(wh, wdt, V, C, offset), wpe = pair_make(ph, F8_DTYPE_FP32, S, C, 0);
    pair y = pair_make(NULL, ydt, T, C, offset);
    ids_pair(tok, T, dtok);
    f8_ctx *c[2] = {CPU, GPU};
    uint64_t l0 = launches(GPU);
    for (int k = 0; k < 2; k++) CHECK_OK(c[k], f8_embedding_forward(c[k], dtok[k], S, &wte.t[k], &wpe.t[k], &y.t[k]));
    CHECK(launches(GPU) - l0 == 1, "embedding forward: %llu launches", (unsigned long long)(launches(GPU) - l0));
    void *a = read_back(CPU, &y.t[0]), *b = read_back(GPU, &y.t[1]);
    CHECK(memcmp(a, b, tbytes(&y.t[0])) == 0, "embedding forward V %lld C %lld T %lld %s->%s offset %d: CUDA != CPU",
          (long long)V, (long long)C, (long long)T, f8_dtype_name(wdt), f8_dtype_name(ydt), offset);
    free(tok), free(wh), free(ph), free(a), free(b);
    pair_free(&wte), pair_free(&wpe), pair_free(&y);
    f8_ctx_free(CPU, dtok[0]), f8_ctx_free(GPU, dtok[1]);
}

static void test_embedding_backward(int64_t V, int64_t C, int64_t T, int64_t S, f8_dtype ddt, f8_dtype gdt, int offset)
{
    test_rng r = {(uint64_t)(7 * V + C + T + ddt + 3 * gdt)};
    int32_t *tok = (int32_t *)xmalloc((size_t)T * 4), *dtok[2];
    make_tokens(&r, tok, T, V);
    void *dyh = host_random(&r, ddt, (size_t)(T * C), 1.0), *wh = host_random(&r, gdt, (size_t)(V * C), 0.1);
    void *ph = host_random(&r, gdt, (size_t)(S * C), 0.1);
    pair dy = pair_make(dyh, ddt, T, C, offset), dw = pair_make(wh, gdt, V, C, offset), dp = pair_make(ph, gdt, S, C, offset);
    ids_pair(tok, T, dtok);
    f8_ctx *c[2] = {CPU, GPU};
    uint64_t l0 = launches(GPU);
    for (int k = 0; k < 2; k++) CHECK_OK(c[k], f8_embedding_backward(c[k], dtok[k], S, &dy.t[k], &dw.t[k], &dp.t[k]));
    CHECK(launches(GPU) - l0 == 2, "embedding backward: %llu launches, want 2", (unsigned long long)(launches(GPU) - l0));
    void *wa = read_back(CPU, &dw.t[0]), *wb = read_back(GPU, &dw.t[1]);
    void *pa = read_back(CPU, &dp.t[0]), *pb = read_back(GPU, &dp.t[1]);

    /* bound: 2^-22 · (|start| + Σ|dy|) per element (two FP32 summation orders), plus
     * a BF16 unit of the result when the gradient is BF16 */
    double *mag = (double *)calloc((size_t)(V * C), sizeof(double));
    for (int64_t t = 0; t < T; t++)
        if (tok[t] >= 0 && tok[t] < V)
            for (int64_t j = 0; j < C; j++) mag[tok[t] * C + j] += fabs(hval(dyh, ddt, (size_t)(t * C + j)));
    const double ulp = gdt == F8_DTYPE_BF16 ? 1.0 / 128 : 0;
    int bad = 0, touched = 0;
    const size_t es = f8_dtype_size(gdt);
    for (int64_t i = 0; i < V * C; i++) {
        const double x = hval(wa, gdt, (size_t)i), y = hval(wb, gdt, (size_t)i), w0 = hval(wh, gdt, (size_t)i);
        if (mag[i] == 0) {
            touched += memcmp((char *)wb + i * es, (char *)wh + i * es, es) != 0;
            continue;
        }
        if (fabs(x - y) > 2.4e-7 * (fabs(w0) + mag[i]) + ulp * fabs(x) && bad++ < 3)
            fprintf(stderr, "dwte[%lld] CUDA %.9g CPU %.9g\n", (long long)i, y, x);
    }
    CHECK(bad == 0, "embedding backward dwte (V %lld C %lld T %lld, %s/%s, offset %d): %d elements off the CPU",
          (long long)V, (long long)C, (long long)T, f8_dtype_name(ddt), f8_dtype_name(gdt), offset, bad);
    CHECK(touched == 0, "embedding backward: CUDA changed %d elements of rows no token names", touched);
    int bad_p = 0;
    for (int64_t i = 0; i < S * C; i++) {
        const double x = hval(pa, gdt, (size_t)i), y = hval(pb, gdt, (size_t)i);
        bad_p += fabs(x - y) > 2.4e-7 * (fabs(x) + (double)(T / S + 1) * 5) + ulp * fabs(x);
    }
    CHECK(bad_p == 0, "embedding backward dwpe: %d elements off the CPU", bad_p);

    /* determinism: again from the same start, the same bits */
    put(GPU, dw.t[1].data, wh, tbytes(&dw.t[1]));
    put(GPU, dp.t[1].data, ph, tbytes(&dp.t[1]));
    CHECK_OK(GPU, f8_embedding_backward(GPU, dtok[1], S, &dy.t[1], &dw.t[1], &dp.t[1]));
    void *wb2 = read_back(GPU, &dw.t[1]), *pb2 = read_back(GPU, &dp.t[1]);
    CHECK(memcmp(wb, wb2, tbytes(&dw.t[1])) == 0 && memcmp(pb, pb2, tbytes(&dp.t[1])) == 0,
          "embedding backward is not bitwise repeatable on the GPU");
    /* without dwpe: one launch, the same dwte */
    put(GPU, dw.t[1].data, wh, tbytes(&dw.t[1]));
    l0 = launches(GPU);
    CHECK_OK(GPU, f8_embedding_backward(GPU, dtok[1], S, &dy.t[1], &dw.t[1], NULL));
    CHECK(launches(GPU) - l0 == 1, "embedding backward without dwpe: %llu launches", (unsigned long long)(launches(GPU) - l0));
    free(wb2);
    wb2 = read_back(GPU, &dw.t[1]);
    CHECK(memcmp(wb, wb2, tbytes(&dw.t[1])) == 0, "embedding backward: dwte depends on dwpe being given");
    free(tok), free(dyh), free(wh), free(ph), free(wa), free(wb), free(pa), free(pb), free(wb2), free(pb2), free(mag);
    pair_free(&dy), pair_free(&dw), pair_free(&dp);
    f8_ctx_free(CPU, dtok[0]), f8_ctx_free(GPU, dtok[1]);
}

/* ---- cross-entropy ----------------------------------------------------------- */

static void test_cross_entropy(int64_t T, int64_t V, int64_t Vp, f8_dtype xdt, f8_dtype ddt)
{
    test_rng r = {(uint64_t)(T + V + Vp + xdt + 5 * ddt)};
    void *xh = host_random(&r, xdt, (size_t)(T * Vp), 3.0);
    int32_t *tg = (int32_t *)xmalloc((size_t)T * 4), *dtg[2];
    for (int64_t t = 0; t < T; t++)
        tg[t] = t % 7 == 3 ? -1 : t % 11 == 5 ? (int32_t)V : (int32_t)(rng_u64(&r) % (uint64_t)V);
    ids_pair(tg, T, dtg);
    pair x = pair_make(xh, xdt, T, Vp, 0), d = pair_make(NULL, ddt, T, Vp, 0);
    pair loss = pair_make(NULL, F8_DTYPE_FP32, 1, T, 0);
    const float scale = 1.0f / (float)T;
    f8_ctx *c[2] = {CPU, GPU};
    uint64_t l0 = launches(GPU);
    for (int k = 0; k < 2; k++)
        CHECK_OK(c[k], f8_cross_entropy(c[k], &x.t[k], V, dtg[k], scale, (float *)loss.t[k].data, &d.t[k]));
    CHECK(launches(GPU) - l0 == 1, "cross-entropy: %llu launches", (unsigned long long)(launches(GPU) - l0));
    float *la = (float *)read_back(CPU, &loss.t[0]), *lb = (float *)read_back(GPU, &loss.t[1]);
    void *da = read_back(CPU, &d.t[0]), *db = read_back(GPU, &d.t[1]);
    int bad_l = 0, bad_d = 0;
    for (int64_t t = 0; t < T; t++) {
        if (fabs(la[t] - lb[t]) > 1e-5 * (1 + fabs(la[t])) && bad_l++ < 3)
            fprintf(stderr, "loss[%lld] CUDA %.9g CPU %.9g\n", (long long)t, lb[t], la[t]);
        for (int64_t j = 0; j < Vp; j++) {
            const double a = hval(da, ddt, (size_t)(t * Vp + j)), b = hval(db, ddt, (size_t)(t * Vp + j));
            const double tol = 1e-5 * fabs(a) + 1e-7 * scale + (ddt == F8_DTYPE_BF16 ? fabs(a) / 128 : 0);
            if ((j >= V ? b != 0 : fabs(a - b) > tol) && bad_d++ < 3)
                fprintf(stderr, "dlogits[%lld, %lld] CUDA %.9g CPU %.9g\n", (long long)t, (long long)j, b, a);
        }
    }
    CHECK(bad_l == 0, "cross-entropy T %lld V %lld/%lld %s: %d losses off the CPU", (long long)T, (long long)V,
          (long long)Vp, f8_dtype_name(xdt), bad_l);
    CHECK(bad_d == 0, "cross-entropy T %lld V %lld/%lld %s->%s: %d gradients off the CPU", (long long)T, (long long)V,
          (long long)Vp, f8_dtype_name(xdt), f8_dtype_name(ddt), bad_d);
    /* repeatable, and in place gives the same bits */
    CHECK_OK(GPU, f8_cross_entropy(GPU, &x.t[1], V, dtg[1], scale, (float *)loss.t[1].data, &d.t[1]));
    void *db2 = read_back(GPU, &d.t[1]);
    float *lb2 = (float *)read_back(GPU, &loss.t[1]);
    CHECK(memcmp(db, db2, tbytes(&d.t[1])) == 0 && memcmp(lb, lb2, (size_t)T * 4) == 0,
          "cross-entropy is not bitwise repeatable on the GPU");
    if (xdt == ddt) {
        CHECK_OK(GPU, f8_cross_entropy(GPU, &x.t[1], V, dtg[1], scale, (float *)loss.t[1].data, &x.t[1]));
        void *ip = read_back(GPU, &x.t[1]);
        CHECK(memcmp(ip, db, tbytes(&d.t[1])) == 0, "cross-entropy in place differs on the GPU (%s)", f8_dtype_name(xdt));
        free(ip);
    }
    free(xh), free(tg), free(la), free(lb), free(da), free(db), free(db2), free(lb2);
    pair_free(&x), pair_free(&d), pair_free(&loss);
    f8_ctx_free(CPU, dtg[0]), f8_ctx_free(GPU, dtg[1]);
}

/* ---- AdamW ---------------------------------------------------------------------- */

typedef struct pspec {
    int64_t rows, cols;
    f8_dtype pdt, gdt;
    int decay, offset;
} pspec;

static const pspec PARAMS[6] = {
    {768, 1365, F8_DTYPE_FP32, F8_DTYPE_FP32, 1, 0}, /* ~1M elements: several grid-stride sweeps */
    {1, 13, F8_DTYPE_FP32, F8_DTYPE_FP32, 0, 0},     {5, 9, F8_DTYPE_BF16, F8_DTYPE_FP32, 1, 0},
    {3, 3, F8_DTYPE_FP32, F8_DTYPE_BF16, 1, 1},      /* misaligned views: the scalar path */
    {64, 64, F8_DTYPE_BF16, F8_DTYPE_BF16, 1, 0},    {1, 1, F8_DTYPE_FP32, F8_DTYPE_FP32, 0, 0},
};
#define NP 6

typedef struct model {
    pair p[NP], g[NP];
    f8_adamw *o[2];
} model;

static void model_make(model *m, const f8_adamw_config *cfg, uint64_t seed)
{
    test_rng r = {seed};
    f8_ctx *c[2] = {CPU, GPU};
    for (int k = 0; k < 2; k++)
        if (f8_adamw_create(c[k], cfg, &m->o[k]) != F8_OK) die("f8_adamw_create", c[k]);
    for (int i = 0; i < NP; i++) {
        const pspec *s = &PARAMS[i];
        void *h = host_random(&r, s->pdt, (size_t)(s->rows * s->cols), 1.0);
        m->p[i] = pair_make(h, s->pdt, s->rows, s->cols, s->offset);
        m->g[i] = pair_make(NULL, s->gdt, s->rows, s->cols, s->offset);
        free(h);
        for (int k = 0; k < 2; k++)
            if (f8_adamw_add(m->o[k], &m->p[i].t[k], &m->g[i].t[k], s->decay) != F8_OK) die("f8_adamw_add", c[k]);
    }
}

static void model_free(model *m)
{
    f8_adamw_destroy(m->o[0]), f8_adamw_destroy(m->o[1]);
    for (int i = 0; i < NP; i++) pair_free(&m->p[i]), pair_free(&m->g[i]);
}

/* Gradients of step k on side `side` (0 CPU, 1 GPU, 2 both). */
static void model_grads(model *m, int k, int side)
{
    test_rng r = {5000 + (uint64_t)k};
    for (int i = 0; i < NP; i++) {
        void *h = host_random(&r, PARAMS[i].gdt, (size_t)(PARAMS[i].rows * PARAMS[i].cols), 0.02);
        if (side != 1) put(CPU, m->g[i].t[0].data, h, tbytes(&m->g[i].t[0]));
        if (side != 0) put(GPU, m->g[i].t[1].data, h, tbytes(&m->g[i].t[1]));
        free(h);
    }
}

/* Compare the parameters of both sides: count of elements beyond rel_tol
 * (0: bitwise). */
static int model_diff(model *m, double rel_tol)
{
    int bad = 0;
    for (int i = 0; i < NP; i++) {
        void *a = read_back(CPU, &m->p[i].t[0]), *b = read_back(GPU, &m->p[i].t[1]);
        const f8_dtype dt = PARAMS[i].pdt;
        if (rel_tol == 0) {
            bad += memcmp(a, b, tbytes(&m->p[i].t[0])) != 0;
        } else {
            for (int64_t j = 0; j < PARAMS[i].rows * PARAMS[i].cols; j++) {
                const double x = hval(a, dt, (size_t)j), y = hval(b, dt, (size_t)j);
                /* With clipping the two backends' gradient norms differ in
                 * the last bits (FP32 partial sums in another order), so the
                 * clip factor does too; for elements whose |g| is near eps
                 * Adam's step is proportional to it. 2e-6 is 1e-4 of the
                 * 5 steps x lr 1e-2 a wrong update would be off by. */
                bad += fabs(x - y) > rel_tol * fabs(x) + (dt == F8_DTYPE_BF16 ? fabs(x) / 128 : 2e-6);
            }
        }
        free(a), free(b);
    }
    return bad;
}

static void test_adamw(const char *what, f8_adamw_config cfg, int bitwise)
{
    model m;
    model_make(&m, &cfg, 42);
    const uint64_t a0 = allocations(GPU);
    for (int k = 0; k < 5; k++) {
        model_grads(&m, k, 2);
        uint64_t l0 = launches(GPU);
        CHECK_OK(CPU, f8_adamw_step(m.o[0]));
        CHECK_OK(GPU, f8_adamw_step(m.o[1]));
        CHECK(launches(GPU) - l0 == 3, "AdamW step: %llu launches, want 3", (unsigned long long)(launches(GPU) - l0));
        int64_t sa, sb;
        float lra, lrb, na, nb;
        CHECK_OK(CPU, f8_adamw_read(m.o[0], &sa, &lra, &na));
        CHECK_OK(GPU, f8_adamw_read(m.o[1], &sb, &lrb, &nb));
        CHECK(sa == k + 1 && sb == k + 1 && lra == lrb && fabsf(na - nb) <= 1e-5f * na,
              "%s step %d: step %lld/%lld lr %.9g/%.9g norm %.9g/%.9g (CPU/CUDA)", what, k, (long long)sa, (long long)sb,
              lra, lrb, na, nb);
    }
    CHECK(allocations(GPU) == a0, "AdamW steps allocated on the GPU");
    const int bad = model_diff(&m, bitwise ? 0 : 1e-5);
    CHECK(bad == 0, "AdamW %s: CUDA parameters differ from the CPU's (%s): %d", what,
          bitwise ? "bitwise: clipping off, the same FP32 update" : "1e-5", bad);

    /* determinism: a second GPU model, the same steps, the same bits */
    model m2;
    model_make(&m2, &cfg, 42);
    for (int k = 0; k < 5; k++) {
        model_grads(&m2, k, 1);
        CHECK_OK(GPU, f8_adamw_step(m2.o[1]));
    }
    int same = 1;
    for (int i = 0; i < NP; i++) {
        void *a = read_back(GPU, &m.p[i].t[1]), *b = read_back(GPU, &m2.p[i].t[1]);
        same &= memcmp(a, b, tbytes(&m.p[i].t[1])) == 0;
        free(a), free(b);
    }
    float n1, n2;
    CHECK_OK(GPU, f8_adamw_read(m.o[1], NULL, NULL, &n1));
    CHECK_OK(GPU, f8_adamw_read(m2.o[1], NULL, NULL, &n2));
    CHECK(same && n1 == n2, "AdamW %s is not bitwise repeatable on the GPU", what);
    model_free(&m2);
    model_free(&m);
}

/* A checkpoint taken on the GPU resumes on the CPU: clipping off, the same bits. */
static void test_adamw_checkpoint(void)
{
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.warmup_steps = 2, cfg.total_steps = 9, cfg.grad_clip = 0.0f;
    model m;
    model_make(&m, &cfg, 77);
    for (int k = 0; k < 3; k++) {
        model_grads(&m, k, 1);
        CHECK_OK(GPU, f8_adamw_step(m.o[1]));
    }
    f8_checkpoint *ck = NULL, *ld = NULL;
    CHECK_OK(GPU, f8_checkpoint_create(GPU, &ck));
    for (int i = 0; i < NP && ck; i++) {
        char name[32];
        snprintf(name, sizeof name, "p.%d", i);
        CHECK_OK(GPU, f8_checkpoint_add_tensor(ck, name, &m.p[i].t[1]));
    }
    CHECK_OK(GPU, f8_checkpoint_add_adamw(ck, "opt", m.o[1]));
    char path[128];
    snprintf(path, sizeof path, "/tmp/f8_test_cuda_train_ops.%ld.safetensors", (long)getpid());
    CHECK_OK(GPU, f8_checkpoint_save(ck, path));
    CHECK_OK(CPU, f8_checkpoint_load(CPU, path, &ld));
    remove(path);
    for (int i = 0; i < NP && ld; i++) {
        char name[32];
        snprintf(name, sizeof name, "p.%d", i);
        CHECK_OK(CPU, f8_checkpoint_read_tensor(ld, name, &m.p[i].t[0]));
    }
    CHECK_OK(CPU, f8_checkpoint_restore_adamw(ld, "opt", m.o[0]));
    for (int k = 3; k < 6; k++) {
        model_grads(&m, k, 2);
        CHECK_OK(CPU, f8_adamw_step(m.o[0]));
        CHECK_OK(GPU, f8_adamw_step(m.o[1]));
    }
    CHECK(model_diff(&m, 0) == 0, "a GPU checkpoint resumed on the CPU differs from the GPU run");
    f8_checkpoint_destroy(ck), f8_checkpoint_destroy(ld);
    model_free(&m);
}

/* ---- a graphed step on the GPU = the eager one ----------------------------------------- */

static void test_graph(void)
{
    const int64_t V = 1000, C = 64, T = 512, S = 128;
    test_rng r = {9};
    int32_t *tok = (int32_t *)xmalloc((size_t)T * 4), *tgt = (int32_t *)xmalloc((size_t)T * 4);
    make_tokens(&r, tok, T, V);
    for (int64_t t = 0; t < T; t++) tgt[t] = (int32_t)(rng_u64(&r) % (uint64_t)C);
    void *wh = host_random(&r, F8_DTYPE_FP32, (size_t)(V * C), 0.5), *ph = host_random(&r, F8_DTYPE_FP32, (size_t)(S * C), 0.5);
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.warmup_steps = 2, cfg.total_steps = 10;
    f8_tensor wte[2], wpe[2], dwte[2], dwpe[2], x[2];
    f8_adamw *o[2];
    int32_t *dt[2], *dg[2];
    float *loss[2];
    for (int k = 0; k < 2; k++) { /* two GPU setups: eager (0) and graphed (1) */
        void *zw = calloc(1, (size_t)(V * C) * 4), *zp = calloc(1, (size_t)(S * C) * 4);
        wte[k] = f8_tensor_make(dev_new(GPU, (size_t)(V * C) * 4), F8_DTYPE_FP32, V, C);
        wpe[k] = f8_tensor_make(dev_new(GPU, (size_t)(S * C) * 4), F8_DTYPE_FP32, S, C);
        dwte[k] = f8_tensor_make(dev_new(GPU, (size_t)(V * C) * 4), F8_DTYPE_FP32, V, C);
        dwpe[k] = f8_tensor_make(dev_new(GPU, (size_t)(S * C) * 4), F8_DTYPE_FP32, S, C);
        x[k] = f8_tensor_make(dev_new(GPU, (size_t)(T * C) * 4), F8_DTYPE_FP32, T, C);
        put(GPU, wte[k].data, wh, (size_t)(V * C) * 4), put(GPU, wpe[k].data, ph, (size_t)(S * C) * 4);
        put(GPU, dwte[k].data, zw, (size_t)(V * C) * 4), put(GPU, dwpe[k].data, zp, (size_t)(S * C) * 4);
        free(zw), free(zp);
        dt[k] = (int32_t *)dev_new(GPU, (size_t)T * 4), dg[k] = (int32_t *)dev_new(GPU, (size_t)T * 4);
        put(GPU, dt[k], tok, (size_t)T * 4), put(GPU, dg[k], tgt, (size_t)T * 4);
        loss[k] = (float *)dev_new(GPU, (size_t)T * 4);
        if (f8_adamw_create(GPU, &cfg, &o[k]) != F8_OK || f8_adamw_add(o[k], &wte[k], &dwte[k], 1) != F8_OK ||
            f8_adamw_add(o[k], &wpe[k], &dwpe[k], 0) != F8_OK)
            die("adamw setup", GPU);
    }
    f8_graph *g = NULL;
    const uint64_t a0 = allocations(GPU);
    for (int k = 0; k < 2; k++) {
        if (k == 1) CHECK_OK(GPU, f8_graph_begin(GPU));
        CHECK_OK(GPU, f8_embedding_forward(GPU, dt[k], S, &wte[k], &wpe[k], &x[k]));
        CHECK_OK(GPU, f8_cross_entropy(GPU, &x[k], C - 3, dg[k], 1.0f / T, loss[k], &x[k]));
        CHECK_OK(GPU, f8_embedding_backward(GPU, dt[k], S, &x[k], &dwte[k], &dwpe[k]));
        CHECK_OK(GPU, f8_adamw_step(o[k]));
        if (k == 1) CHECK_OK(GPU, f8_graph_end(GPU, &g));
    }
    CHECK(allocations(GPU) == a0, "capturing a training step allocated");
    for (int rep = 0; rep < 3 && g; rep++) {
        if (rep > 0) {
            CHECK_OK(GPU, f8_embedding_forward(GPU, dt[0], S, &wte[0], &wpe[0], &x[0]));
            CHECK_OK(GPU, f8_cross_entropy(GPU, &x[0], C - 3, dg[0], 1.0f / T, loss[0], &x[0]));
            CHECK_OK(GPU, f8_embedding_backward(GPU, dt[0], S, &x[0], &dwte[0], &dwpe[0]));
            CHECK_OK(GPU, f8_adamw_step(o[0]));
        }
        const uint64_t l0 = launches(GPU);
        CHECK_OK(GPU, f8_graph_replay(g));
        CHECK(launches(GPU) - l0 == 1, "a replay counts %llu launches", (unsigned long long)(launches(GPU) - l0));
    }
    int64_t s0, s1;
    CHECK_OK(GPU, f8_adamw_read(o[0], &s0, NULL, NULL));
    CHECK_OK(GPU, f8_adamw_read(o[1], &s1, NULL, NULL));
    void *a = read_back(GPU, &wte[0]), *b = read_back(GPU, &wte[1]);
    CHECK(s0 == 3 && s1 == 3 && memcmp(a, b, (size_t)(V * C) * 4) == 0,
          "graph replays differ from eager steps (steps %lld/%lld)", (long long)s0, (long long)s1);
    free(a), free(b);
    f8_graph_destroy(g);
    for (int k = 0; k < 2; k++) {
        f8_adamw_destroy(o[k]);
        f8_ctx_free(GPU, wte[k].data), f8_ctx_free(GPU, wpe[k].data), f8_ctx_free(GPU, dwte[k].data);
        f8_ctx_free(GPU, dwpe[k].data), f8_ctx_free(GPU, x[k].data), f8_ctx_free(GPU, dt[k]), f8_ctx_free(GPU, dg[k]);
        f8_ctx_free(GPU, loss[k]);
    }
    free(tok), free(tgt), free(wh), free(ph);
}

int main(void)
{
    f8_ctx *ctxs[2];
    int rc = test_ctx_pair("test_cuda_train_ops", NULL, ctxs);
    if (rc) return rc;
    CPU = ctxs[0], GPU = ctxs[1];

    test_embedding_forward(1000, 100, 3 * 64 + 5, 64, F8_DTYPE_FP32, F8_DTYPE_FP32, 0);
    test_embedding_forward(50304, 768, 1024, 256, F8_DTYPE_BF16, F8_DTYPE_BF16, 0);
    test_embedding_forward(97, 13, 77, 10, F8_DTYPE_FP32, F8_DTYPE_BF16, 1); /* odd, misaligned */
    test_embedding_backward(50304, 260, 16384, 1024, F8_DTYPE_FP32, F8_DTYPE_FP32, 0);
    test_embedding_backward(50304, 768, 4096, 1024, F8_DTYPE_BF16, F8_DTYPE_FP32, 0);
    test_embedding_backward(5000, 64, 3000, 128, F8_DTYPE_BF16, F8_DTYPE_BF16, 0);
    test_embedding_backward(997, 13, 2500, 7, F8_DTYPE_FP32, F8_DTYPE_FP32, 1); /* odd, misaligned, T % S != 0 */
    test_cross_entropy(64, 50257, 50304, F8_DTYPE_BF16, F8_DTYPE_BF16);
    test_cross_entropy(64, 50257, 50304, F8_DTYPE_FP32, F8_DTYPE_FP32);
    test_cross_entropy(33, 1000, 1001, F8_DTYPE_FP32, F8_DTYPE_BF16); /* odd pitch: the scalar path */
    test_cross_entropy(17, 999, 1003, F8_DTYPE_BF16, F8_DTYPE_FP32);
    /* rows that fit in registers (the fast kernel), FP32 and a short BF16 row */
    test_cross_entropy(40, 3000, 3008, F8_DTYPE_FP32, F8_DTYPE_FP32);
    test_cross_entropy(19, 257, 264, F8_DTYPE_BF16, F8_DTYPE_BF16);
    /* rows split over a cluster: Llama 3's vocabulary (4 CTAs), a padded tail
     * (4), FP32 (8); then one row too long for a cluster (the generic kernel) */
    test_cross_entropy(24, 128256, 128256, F8_DTYPE_BF16, F8_DTYPE_BF16);
    test_cross_entropy(13, 70001, 70008, F8_DTYPE_BF16, F8_DTYPE_BF16);
    test_cross_entropy(12, 128000, 128256, F8_DTYPE_FP32, F8_DTYPE_FP32);
    test_cross_entropy(6, 262200, 262208, F8_DTYPE_BF16, F8_DTYPE_BF16);

    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.lr_min = 1e-3f, cfg.warmup_steps = 2, cfg.total_steps = 4, cfg.grad_clip = 0.0f;
    test_adamw("warmup+cosine, no clip", cfg, 1);
    cfg.grad_clip = 1.0f, cfg.weight_decay = 0.0f;
    test_adamw("clipped, no decay", cfg, 0);
    test_adamw_checkpoint();
    test_graph();

    f8_ctx_destroy(GPU);
    f8_ctx_destroy(CPU);
    return test_finish("test_cuda_train_ops");
}
