/*
 * test_adamw_moments.c — AdamW with BF16 and FP8 moments on the CPU backend,
 * the oracle the CUDA kernel is held to (tests/test_cuda_adamw_moments.c):
 *   - every step against an FP64 AdamW whose moments are rounded as f8.h
 *     specifies by this file's own rounding (RNE to BF16; per block of 128
 *     a power-of-two scale from the amax, E4M3 codes of m and of sqrt(v)
 *     rounded stochastically: up when the value is past lo + u·(hi - lo),
 *     u from the contract's bits, f8i_adamw_sr_bits of the element's index
 *     and the step): the stored codes equal the reference's except
 *     where the FP32 arithmetic's error straddles the tie (RNE) or the
 *     threshold (stochastic); parameters within the FP32 update's error;
 *     warmup, cosine, clipping on and off, short blocks, gradients over 6
 *     decades (subnormal codes);
 *   - stochastic rounding: a moment whose gradient falls silent decays in
 *     its FP8 form as in FP32 (to nearest it would stay where it was);
 *   - numerics: a noisy ill-conditioned quadratic and a logistic regression
 *     reach, with BF16 and FP8 moments, a loss within the bounds stated
 *     below of the FP32 moments' loss; a 6-decade quadratic does not diverge;
 *   - the sharded step (two CPU ranks, f8_adamw_set_comm, clipping active)
 *     = one optimizer over the same shards, bit for bit;
 *   - checkpoints: the moments in their dtype plus the scale_invs, and the
 *     choice in the metadata; K steps + save + load + restore + N-K steps =
 *     N steps, bit for bit; another moments form, NaN codes or a negative
 *     scale_inv are refused and change nothing;
 *   - the config check, the names, the memory per parameter.
 */
#include <pthread.h>

#include "train_ops_tests.h"
#include "optim/adamw_moments.h" /* f8i_adamw_sr_bits: the rounding bits f8.h defines */
#include "adamw_moments_ref.h"

static const f8_adamw_moments KINDS[2] = {F8_ADAMW_MOMENTS_BF16, F8_ADAMW_MOMENTS_FP8};
#define BLOCK F8_ADAMW_FP8_BLOCK

/* ---- a model: parameters, gradients, the optimizer ------------------------------ */

typedef struct pspec {
    int64_t rows, cols;
    f8_dtype pdt, gdt;
    int decay;
    double spread; /* gradient magnitudes spread over this many decades */
} pspec;

static const pspec PARAMS[5] = {
    {3, 100, F8_DTYPE_FP32, F8_DTYPE_FP32, 1, 0}, /* two full blocks and a short one */
    {1, 128, F8_DTYPE_FP32, F8_DTYPE_FP32, 0, 4}, /* one block */
    {5, 9, F8_DTYPE_BF16, F8_DTYPE_FP32, 1, 1},
    {2, 200, F8_DTYPE_FP32, F8_DTYPE_BF16, 1, 6}, /* subnormal codes */
    {1, 1, F8_DTYPE_BF16, F8_DTYPE_BF16, 0, 0},
};
#define NP 5

typedef struct model {
    f8_tensor p[NP], g[NP];
    f8_adamw *o;
} model;

static int64_t count(int i) { return PARAMS[i].rows * PARAMS[i].cols; }

static void model_make(f8_ctx *ctx, model *m, const f8_adamw_config *cfg, uint64_t seed)
{
    test_rng r = {seed};
    if (f8_adamw_create(ctx, cfg, &m->o) != F8_OK) die("f8_adamw_create", ctx);
    for (int i = 0; i < NP; i++) {
        void *h = host_random(&r, PARAMS[i].pdt, (size_t)count(i), 1.0, NULL);
        m->p[i] = dev_tensor(ctx, h, PARAMS[i].pdt, PARAMS[i].rows, PARAMS[i].cols);
        m->g[i] = dev_tensor(ctx, NULL, PARAMS[i].gdt, PARAMS[i].rows, PARAMS[i].cols);
        free(h);
        if (f8_adamw_add(m->o, &m->p[i], &m->g[i], PARAMS[i].decay) != F8_OK) die("f8_adamw_add", ctx);
    }
}

static void model_free(f8_ctx *ctx, model *m)
{
    f8_adamw_destroy(m->o);
    for (int i = 0; i < NP; i++) f8_ctx_free(ctx, m->p[i].data), f8_ctx_free(ctx, m->g[i].data);
}

/* Upload the gradients of step k; vals[i] (if vals) receives the values held. */
static void model_grads(f8_ctx *ctx, model *m, int k, double **vals)
{
    test_rng r = {1000 + (uint64_t)k};
    for (int i = 0; i < NP; i++) {
        const pspec *s = &PARAMS[i];
        void *h = xmalloc((size_t)count(i) * f8_dtype_size(s->gdt));
        for (int64_t j = 0; j < count(i); j++) {
            float x = (float)(0.5 * rng_normal(&r) * pow(10.0, -s->spread * rng_uniform(&r)));
            if (i == 0 && j == 0) x = 0.0f; /* m = v = 0 in its block */
            if (s->gdt == F8_DTYPE_BF16) {
                ((uint16_t *)h)[j] = f8_bf16_from_float(x);
                x = f8_bf16_to_float(((uint16_t *)h)[j]);
            } else {
                ((float *)h)[j] = x;
            }
            if (vals) vals[i][j] = x;
        }
        put(ctx, m->g[i].data, h, (size_t)count(i) * f8_dtype_size(s->gdt));
        free(h);
    }
}

static void run_steps(f8_ctx *ctx, model *m, int from, int steps)
{
    for (int k = from; k < from + steps; k++) {
        model_grads(ctx, m, k, NULL);
        CHECK_OK(ctx, f8_adamw_step(m->o));
    }
}

/* The optimizer's checkpoint entries (a fresh checkpoint; destroy it). */
static f8_checkpoint *snapshot(f8_ctx *ctx, f8_adamw *o, const char *prefix)
{
    f8_checkpoint *ck = NULL;
    if (f8_checkpoint_create(ctx, &ck) != F8_OK || f8_checkpoint_add_adamw(ck, prefix, o) != F8_OK) die("snapshot", ctx);
    return ck;
}

static const f8i_ck_entry *entry(const f8_checkpoint *ck, const char *field, int i)
{
    char name[64];
    snprintf(name, sizeof name, "o.%s.%d", field, i);
    return f8i_checkpoint_find(ck, name);
}

static float f32_at(const f8i_ck_entry *e, int64_t j)
{
    float f;
    memcpy(&f, e->data + 4 * j, 4);
    return f;
}

/* ---- every step against the FP64 reference ------------------------------------------ */

static double ref_lr(const f8_adamw_config *c, int64_t step)
{
    if (step < c->warmup_steps) return (double)c->lr_max * (double)(step + 1) / (double)c->warmup_steps;
    if (c->total_steps <= c->warmup_steps) return c->lr_max;
    double p = (double)(step - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
    if (p > 1) p = 1;
    return (double)c->lr_min + ((double)c->lr_max - (double)c->lr_min) * (1 + cos(3.14159265358979323846 * p)) * 0.5;
}

/* The reference state of one parameter: p, and m, v as stored (decoded). */
typedef struct ref_param {
    double *p, *m, *v, *g, *mx, *vx, *mbound; /* mx, vx: the step's unrounded moments; mbound: their FP32 error */
} ref_param;

/* Compare one parameter's stored moments with the reference rounding of the
 * step's unrounded ones; then take the stored ones as the reference state.
 * Returns the elements off (beyond a tie). */
static int compare_moments(const f8_checkpoint *ck, f8_adamw_moments kind, int i, ref_param *r, int64_t t, int *ties,
                           int *bad_scale)
{
    const int64_t n = count(i);
    int bad = 0;
    if (kind == F8_ADAMW_MOMENTS_BF16) {
        const f8i_ck_entry *em = entry(ck, "m", i), *ev = entry(ck, "v", i);
        if (!em || !ev || em->dtype != F8I_CK_BF16 || ev->dtype != F8I_CK_BF16) return (int)n;
        for (int64_t j = 0; j < n; j++) {
            uint16_t bm, bv;
            memcpy(&bm, em->data + 2 * j, 2), memcpy(&bv, ev->data + 2 * j, 2);
            const double gm = bf16_value(bm), gv = bf16_value(bv);
            const double am = bf16_round(r->mx[j]), av = bf16_round(r->vx[j]);
            bad += !tie_ok(r->mx[j], am, gm, r->mbound[j]) || !tie_ok(r->vx[j], av, gv, 1e-6 * r->vx[j]);
            *ties += (am != gm) + (av != gv);
            r->m[j] = gm, r->v[j] = gv;
        }
        return bad;
    }
    const f8i_ck_entry *em = entry(ck, "m", i), *ev = entry(ck, "v_sqrt", i);
    const f8i_ck_entry *sm = entry(ck, "m_scale_inv", i), *sv = entry(ck, "v_sqrt_scale_inv", i);
    const int64_t blocks = (n + BLOCK - 1) / BLOCK;
    if (!em || !ev || !sm || !sv || em->dtype != F8I_CK_F8_E4M3 || ev->dtype != F8I_CK_F8_E4M3 || sm->dtype != F8I_CK_F32 ||
        sm->ndim != 1 || sm->shape[0] != blocks || sv->shape[0] != blocks)
        return (int)n;
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t j0 = b * BLOCK, nb = n - j0 < BLOCK ? n - j0 : BLOCK;
        double am = 0, as = 0;
        for (int64_t j = j0; j < j0 + nb; j++) am = fmax(am, fabs(r->mx[j])), as = fmax(as, sqrt(r->vx[j]));
        const double gsm = 1 / (double)f32_at(sm, b), gsv = 1 / (double)f32_at(sv, b); /* the library's scales */
        /* the scales: the reference's, unless amax sits on a power-of-two boundary */
        const double rm = pow2_scale(am), rv = pow2_scale(as);
        if ((rm != gsm && fabs(am * gsm / 448 - 1) > 1e-5 && fabs(am * gsm / 224 - 1) > 1e-5) ||
            (rv != gsv && fabs(as * gsv / 448 - 1) > 1e-5 && fabs(as * gsv / 224 - 1) > 1e-5))
            ++*bad_scale;
        for (int64_t j = j0; j < j0 + nb; j++) {
            const int cm = em->data[j], cv = ev->data[j];
            const double xm = r->mx[j] * gsm, xs = sqrt(r->vx[j]) * gsv;
            int om = 0, os = 0; /* os is not set when the first check fails */
            bad += !sr_ok(xm, e4m3_value(cm), f8i_adamw_sr_bits(j, f8i_adamw_sr_step(t), 0), r->mbound[j] * gsm, &om) ||
                   !sr_ok(xs, e4m3_value(cv), f8i_adamw_sr_bits(j, f8i_adamw_sr_step(t), 1), 1e-6 * xs, &os);
            *ties += om + os;
            r->m[j] = e4m3_value(cm) / gsm;
            const double s = e4m3_value(cv) / gsv;
            r->v[j] = s * s;
        }
    }
    return bad;
}

static void test_reference(f8_ctx *ctx, f8_adamw_moments kind, const char *what, f8_adamw_config cfg, int steps)
{
    cfg.moments = kind;
    model md;
    model_make(ctx, &md, &cfg, 5);
    ref_param r[NP];
    for (int i = 0; i < NP; i++) {
        const size_t n = (size_t)count(i);
        double **f[7] = {&r[i].p, &r[i].m, &r[i].v, &r[i].g, &r[i].mx, &r[i].vx, &r[i].mbound};
        for (int k = 0; k < 7; k++) *f[k] = (double *)calloc(n, sizeof(double));
        void *h = dev_read(ctx, &md.p[i]);
        for (size_t j = 0; j < n; j++) r[i].p[j] = host_get(h, PARAMS[i].pdt, j);
        free(h);
    }
    int bad_p = 0, bad_m = 0, bad_s = 0, ties = 0, bad_scale = 0, elems = 0;
    const double b1 = cfg.beta1, b2 = cfg.beta2;
    for (int k = 0; k < steps; k++) {
        double *g[NP];
        for (int i = 0; i < NP; i++) g[i] = r[i].g;
        model_grads(ctx, &md, k, g);
        CHECK_OK(ctx, f8_adamw_step(md.o));
        double sq = 0;
        for (int i = 0; i < NP; i++)
            for (int64_t j = 0; j < count(i); j++) sq += g[i][j] * g[i][j];
        const double norm = sqrt(sq), lr = (float)ref_lr(&cfg, k);
        const double c = cfg.grad_clip > 0 && norm > cfg.grad_clip ? cfg.grad_clip / norm : 1.0;
        const double bc1 = 1 - pow(b1, k + 1), bc2 = 1 - pow(b2, k + 1);
        int64_t step_read = -1;
        float lr_read = -1, norm_read = -1;
        CHECK_OK(ctx, f8_adamw_read(md.o, &step_read, &lr_read, &norm_read));
        bad_s += step_read != k + 1 || lr_read != (float)lr || fabs(norm_read - norm) > 1e-6 * norm;
        f8_checkpoint *ck = snapshot(ctx, md.o, "o");
        for (int i = 0; i < NP; i++) {
            const pspec *s = &PARAMS[i];
            ref_param *ri = &r[i];
            void *h = dev_read(ctx, &md.p[i]);
            for (int64_t j = 0; j < count(i); j++) {
                const double gg = c * g[i][j];
                ri->mx[j] = b1 * ri->m[j] + (1 - b1) * gg;
                ri->vx[j] = b2 * ri->v[j] + (1 - b2) * gg * gg;
                /* FP32's error on m (a sum that may cancel): a few units of its terms */
                ri->mbound[j] = 16 * ldexp(b1 * fabs(ri->m[j]) + (1 - b1) * fabs(gg), -24);
                const double wd = s->decay ? cfg.weight_decay : 0;
                const double upd = (ri->mx[j] / bc1) / (sqrt(ri->vx[j] / bc2) + cfg.eps) + wd * ri->p[j];
                const double want = ri->p[j] - lr * upd;
                const double got = host_get(h, s->pdt, (size_t)j);
                const double tol = s->pdt == F8_DTYPE_BF16 ? fabs(want) / 128 + 1e-30 : 2e-6 * (fabs(want) + lr);
                if (fabs(got - want) > tol && bad_p++ < 3)
                    fprintf(stderr, "%s step %d param %d[%lld] = %.9g, want %.9g\n", what, k, i, (long long)j, got, want);
                ri->p[j] = got; /* follow the library: each step is checked on its own */
            }
            free(h);
            bad_m += compare_moments(ck, kind, i, ri, k + 1, &ties, &bad_scale);
            elems += 2 * (int)count(i);
        }
        f8_checkpoint_destroy(ck);
    }
    CHECK(bad_p == 0, "%s moments, %s: %d parameter values off the FP64 reference", f8_adamw_moments_name(kind), what, bad_p);
    CHECK(bad_m == 0, "%s moments, %s: %d stored moments off the reference rounding", f8_adamw_moments_name(kind), what,
          bad_m);
    CHECK(bad_scale == 0, "%s moments, %s: %d blocks' scales differ from the reference's", f8_adamw_moments_name(kind),
          what, bad_scale);
    CHECK(ties * 100 <= elems, "%s moments, %s: %d of %d moments rounded the other way at a tie: too many",
          f8_adamw_moments_name(kind), what, ties, elems);
    CHECK(bad_s == 0, "%s moments, %s: f8_adamw_read disagrees with the reference in %d steps",
          f8_adamw_moments_name(kind), what, bad_s);
    for (int i = 0; i < NP; i++)
        free(r[i].p), free(r[i].m), free(r[i].v), free(r[i].g), free(r[i].mx), free(r[i].vx), free(r[i].mbound);
    model_free(ctx, &md);
}

/* ---- numerics: the loss reached against FP32 moments ------------------------------------- */

/* Problems whose gradients span decades inside one block of 128.
 *   QUADRATIC: L = mean_i h_i x_i² / 2, h_i log-uniform over `decades`,
 *     noisy gradients h_i x_i + 0.1·sqrt(h_i)·ξ; L of the last 100 steps' mean.
 *   LOGISTIC: 512 samples of 64 features with scales log-uniform over 2
 *     decades, minibatches of 32; the full-batch loss at the end. */
enum { QUADRATIC, LOGISTIC };
#define LG_S 512
#define LG_D 64

static double problem_loss(f8_ctx *ctx, int problem, double decades, f8_adamw_moments kind, float beta2, int steps)
{
    const int64_t n = problem == QUADRATIC ? 2048 : LG_D;
    test_rng r = {77};
    double *h = (double *)xmalloc((size_t)n * sizeof(double)), *X = NULL;
    float *x = (float *)xmalloc((size_t)n * sizeof(float)), *g = (float *)xmalloc((size_t)n * sizeof(float));
    int *y = NULL;
    for (int64_t i = 0; i < n; i++) h[i] = pow(10.0, -decades * rng_uniform(&r)), x[i] = 0.0f;
    if (problem == QUADRATIC) {
        for (int64_t i = 0; i < n; i++) x[i] = (float)rng_normal(&r);
    } else {
        X = (double *)xmalloc(LG_S * LG_D * sizeof(double));
        y = (int *)xmalloc(LG_S * sizeof(int));
        double w[LG_D];
        for (int j = 0; j < LG_D; j++) w[j] = rng_normal(&r) / h[j] / 4;
        for (int k = 0; k < LG_S; k++) {
            double z = 0;
            for (int j = 0; j < LG_D; j++) X[k * LG_D + j] = rng_normal(&r) * h[j], z += X[k * LG_D + j] * w[j];
            y[k] = rng_uniform(&r) < 1 / (1 + exp(-z));
        }
    }
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = problem == QUADRATIC ? 1e-2f : 3e-3f, cfg.weight_decay = 0, cfg.grad_clip = 0, cfg.beta2 = beta2;
    cfg.moments = kind;
    f8_adamw *o = NULL;
    f8_tensor tp = dev_tensor(ctx, x, F8_DTYPE_FP32, 1, n), tg = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 1, n);
    if (f8_adamw_create(ctx, &cfg, &o) != F8_OK || f8_adamw_add(o, &tp, &tg, 0) != F8_OK) die("adamw", ctx);
    double tail = 0;
    for (int t = 0; t < steps; t++) {
        get(ctx, x, tp.data, (size_t)n * sizeof(float));
        double loss = 0;
        if (problem == QUADRATIC) {
            for (int64_t i = 0; i < n; i++) {
                g[i] = (float)(h[i] * x[i] + 0.1 * sqrt(h[i]) * rng_normal(&r));
                loss += h[i] * x[i] * x[i] / 2 / (double)n;
            }
            if (t >= steps - 100) tail += loss / 100;
        } else {
            memset(g, 0, (size_t)n * sizeof(float));
            for (int b = 0; b < 32; b++) {
                const int k = (int)(rng_uniform(&r) * LG_S);
                double z = 0;
                for (int j = 0; j < LG_D; j++) z += X[k * LG_D + j] * x[j];
                const double e = (1 / (1 + exp(-z)) - y[k]) / 32;
                for (int j = 0; j < LG_D; j++) g[j] += (float)(e * X[k * LG_D + j]);
            }
        }
        put(ctx, tg.data, g, (size_t)n * sizeof(float));
        CHECK_OK(ctx, f8_adamw_step(o));
    }
    if (problem == LOGISTIC) {
        get(ctx, x, tp.data, (size_t)n * sizeof(float));
        for (int k = 0; k < LG_S; k++) {
            double z = 0;
            for (int j = 0; j < LG_D; j++) z += X[k * LG_D + j] * x[j];
            tail += (y[k] ? log1p(exp(-z)) : log1p(exp(z))) / LG_S;
        }
    }
    f8_adamw_destroy(o);
    f8_ctx_free(ctx, tp.data), f8_ctx_free(ctx, tg.data);
    free(h), free(x), free(g), free(X), free(y);
    return tail;
}

/* Low-precision moments against FP32 moments: the relative difference of the
 * loss reached, within the bounds below (the measured values are printed).
 * On the noisy quadratics the loss is the noise floor: FP8 moments rounded to
 * nearest reached a lower one (about -60%: v stuck high, a smaller effective
 * step), rounded stochastically about +1%, so the bounds are two-sided. */
static void test_numerics(f8_ctx *ctx)
{
    static const struct {
        int problem;
        double decades;
        float beta2;
        double tol[2]; /* BF16, FP8 */
        int one_sided;  /* only a higher loss counts against */
        const char *what;
    } cases[] = {
        {QUADRATIC, 2, 0.95f, {0.01, 0.03}, 0, "quadratic, curvature over 2 decades, beta2 0.95"},
        {QUADRATIC, 4, 0.95f, {0.01, 0.03}, 0, "quadratic, curvature over 4 decades, beta2 0.95"},
        {LOGISTIC, 2, 0.95f, {0.01, 0.02}, 0, "logistic regression, beta2 0.95"},
        {LOGISTIC, 2, 0.99f, {0.01, 0.02}, 0, "logistic regression, beta2 0.99"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int steps = 1500;
        const double base = problem_loss(ctx, cases[c].problem, cases[c].decades, F8_ADAMW_MOMENTS_FP32, cases[c].beta2, steps);
        for (int k = 0; k < 2; k++) {
            const double l = problem_loss(ctx, cases[c].problem, cases[c].decades, KINDS[k], cases[c].beta2, steps);
            const double rel = (l - base) / base;
            printf("    numerics: %s: %s moments loss %.6g, FP32 %.6g (%+.2f%%, bound %s%.0f%%)\n", cases[c].what,
                   f8_adamw_moments_name(KINDS[k]), l, base, 100 * rel, cases[c].one_sided ? "+" : "+-",
                   100 * cases[c].tol[k]);
            CHECK(isfinite(l) && rel <= cases[c].tol[k] && (cases[c].one_sided || rel >= -cases[c].tol[k]), "%s: %s moments reach %.6g against FP32's %.6g",
                  cases[c].what, f8_adamw_moments_name(KINDS[k]), l, base);
        }
    }
    /* Gradients over 6 decades in a block: E4M3 or E5M2 v would underflow to
     * 0 under a live m (dev/adamw_moments_study.c); sqrt(v) must not diverge. */
    const double start = problem_loss(ctx, QUADRATIC, 6, F8_ADAMW_MOMENTS_FP32, 0.95f, 100);
    const double base = problem_loss(ctx, QUADRATIC, 6, F8_ADAMW_MOMENTS_FP32, 0.95f, 1500);
    const double l = problem_loss(ctx, QUADRATIC, 6, F8_ADAMW_MOMENTS_FP8, 0.95f, 1500);
    printf("    numerics: quadratic over 6 decades: fp8 moments %.6g, FP32 %.6g, after 100 steps %.6g\n", l, base, start);
    CHECK(isfinite(l) && fabs(l / base - 1) <= 0.1, "6 decades: FP8 moments reach %.6g against FP32's %.6g", l, base);
}

/* A moment whose gradient falls silent decays in FP8 as in FP32: one step
 * with gradients g, then DECAY_STEPS with none, so FP32's m and sqrt(v) are
 * β1^K·(1 - β1)·g and sqrt(β2)^K·sqrt(1 - β2)·|g| (K = DECAY_STEPS). sqrt(v)
 * falls 2.5% a step at β2 0.95, under half its 6-12% code spacing: rounded
 * to nearest it would stay at step 1's value (2.8x FP32's after 40 steps);
 * rounded stochastically each step's expectation is FP32's, so the sum over
 * 8 blocks lands near FP32's (the noise of 40 roundings of 1024 elements: a
 * few percent). */
#define DECAY_STEPS 40
#define DECAY_N (8 * BLOCK)
static void test_stochastic_decay(f8_ctx *ctx)
{
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.moments = F8_ADAMW_MOMENTS_FP8, cfg.lr_max = cfg.lr_min = 1e-3f, cfg.grad_clip = 0.0f, cfg.weight_decay = 0.0f;
    test_rng r = {77};
    f8_adamw *o = NULL;
    if (f8_adamw_create(ctx, &cfg, &o) != F8_OK) die("f8_adamw_create", ctx);
    void *hp = host_random(&r, F8_DTYPE_FP32, DECAY_N, 1.0, NULL);
    f8_tensor tp = dev_tensor(ctx, hp, F8_DTYPE_FP32, 1, DECAY_N), tg = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 1, DECAY_N);
    CHECK_OK(ctx, f8_adamw_add(o, &tp, &tg, 0));
    static float g[DECAY_N], zero[DECAY_N];
    for (int j = 0; j < DECAY_N; j++) g[j] = (float)(0.5 * rng_normal(&r));
    put(ctx, tg.data, g, sizeof g);
    CHECK_OK(ctx, f8_adamw_step(o));
    put(ctx, tg.data, zero, sizeof zero);
    for (int k = 0; k < DECAY_STEPS; k++) CHECK_OK(ctx, f8_adamw_step(o));
    f8_checkpoint *ck = snapshot(ctx, o, "o");
    const f8i_ck_entry *em = entry(ck, "m", 0), *ev = entry(ck, "v_sqrt", 0);
    const f8i_ck_entry *sm = entry(ck, "m_scale_inv", 0), *sv = entry(ck, "v_sqrt_scale_inv", 0);
    CHECK(em && ev && sm && sv, "FP8 moments: the decay test's checkpoint lacks its entries");
    if (em && ev && sm && sv) {
        const double fm = pow(cfg.beta1, DECAY_STEPS) * (1 - cfg.beta1), fs = pow(sqrt(cfg.beta2), DECAY_STEPS) * sqrt(1 - cfg.beta2);
        double got_m = 0, want_m = 0, got_s = 0, want_s = 0;
        for (int j = 0; j < DECAY_N; j++) {
            got_m += e4m3_value(em->data[j]) * f32_at(sm, j / BLOCK) * (g[j] < 0 ? -1 : 1), want_m += fm * fabs(g[j]);
            got_s += e4m3_value(ev->data[j]) * f32_at(sv, j / BLOCK), want_s += fs * fabs(g[j]);
        }
        printf("    stochastic rounding: after %d silent steps, FP8 m %.4g, sqrt(v) %.4g of FP32's\n", DECAY_STEPS,
               got_m / want_m, got_s / want_s);
        CHECK(fabs(got_m / want_m - 1) <= 0.1 && fabs(got_s / want_s - 1) <= 0.1,
              "FP8 moments after %d silent steps: m %.4g, sqrt(v) %.4g of FP32's (want within 10%%)", DECAY_STEPS,
              got_m / want_m, got_s / want_s);
    }
    f8_checkpoint_destroy(ck);
    f8_adamw_destroy(o);
    f8_ctx_free(ctx, tp.data), f8_ctx_free(ctx, tg.data);
    free(hp);
}

/* ---- the sharded step --------------------------------------------------------------- */

#define SH_N 150 /* per rank: a full block and a short one */
#define SH_STEPS 5

/* Every stored part of parameter i of the snapshot (prefix "o"), concatenated
 * into buf (malloc'd); returns the bytes. */
static size_t moment_bytes(const f8_checkpoint *ck, int i, unsigned char **buf)
{
    static const char *const fields[] = {"m", "v", "v_sqrt", "m_scale_inv", "v_sqrt_scale_inv"};
    size_t n = 0;
    *buf = NULL;
    for (int f = 0; f < 5; f++) {
        const f8i_ck_entry *e = entry(ck, fields[f], i);
        if (!e) continue;
        unsigned char *t = (unsigned char *)realloc(*buf, n + e->bytes);
        if (!t) die("realloc", NULL);
        memcpy(t + n, e->data, e->bytes);
        *buf = t, n += e->bytes;
    }
    return n;
}

/* Gradient element j of step k on the whole vector: a multiple of 1/64 in
 * [-1, 1], so every sum of squares (one double sum, or FP32 per-rank sums
 * added in FP32) is exact and the clip factor is the same bits. */
static float shard_grad(int k, int64_t j)
{
    test_rng r = {(uint64_t)(k * 100003 + j + 1)};
    return (float)((int)(rng_u64(&r) % 129) - 64) / 64.0f;
}

static f8_adamw_config shard_config(f8_adamw_moments kind)
{
    f8_adamw_config c = f8_adamw_config_default();
    c.lr_max = 1e-2f, c.grad_clip = 1.0f, c.moments = kind; /* the norm is ~10: clipping acts */
    return c;
}

typedef struct shard_job {
    int rank;
    f8_comm_group *group;
    f8_adamw_moments kind;
    f8_status st;
    float p[SH_N];
    unsigned char *moments;
    size_t bytes;
} shard_job;

/* Steps of one optimizer over tensors t[0..nt) holding the whole vector's
 * parts first..first+nt-1 (SH_N each), with comm or without. */
static f8_status shard_steps(f8_ctx *ctx, f8_comm *comm, f8_adamw_moments kind, int first, int nt, f8_tensor *tp, f8_adamw **out)
{
    f8_adamw_config c = shard_config(kind);
    f8_status st = f8_adamw_create(ctx, &c, out);
    float h[SH_N];
    f8_tensor tg[2];
    for (int t = 0; t < nt; t++) {
        for (int j = 0; j < SH_N; j++) h[j] = (float)sin(1.0 + (first + t) * SH_N + j);
        tp[t] = dev_tensor(ctx, h, F8_DTYPE_FP32, 1, SH_N);
        tg[t] = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 1, SH_N);
        if (st == F8_OK) st = f8_adamw_add(*out, &tp[t], &tg[t], 1);
    }
    if (st == F8_OK && comm) st = f8_adamw_set_comm(*out, comm);
    for (int k = 0; k < SH_STEPS && st == F8_OK; k++) {
        for (int t = 0; t < nt && st == F8_OK; t++) {
            for (int j = 0; j < SH_N; j++) h[j] = shard_grad(k, (int64_t)(first + t) * SH_N + j);
            st = f8_ctx_upload(ctx, tg[t].data, h, sizeof h);
        }
        if (st == F8_OK) st = f8_adamw_step(*out);
    }
    for (int t = 0; t < nt; t++) f8_ctx_free(ctx, tg[t].data);
    return st;
}

static void *shard_rank(void *arg)
{
    shard_job *j = (shard_job *)arg;
    char why[256];
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    f8_comm *comm = NULL;
    f8_adamw *o = NULL;
    f8_tensor tp;
    j->st = ctx ? f8_comm_create_cpu(ctx, j->group, j->rank, &comm) : F8_ERR_STATE;
    if (j->st == F8_OK) j->st = shard_steps(ctx, comm, j->kind, j->rank, 1, &tp, &o);
    if (j->st == F8_OK) j->st = f8_ctx_download(ctx, j->p, tp.data, sizeof j->p);
    f8_checkpoint *ck = NULL;
    if (j->st == F8_OK) j->st = f8_checkpoint_create(ctx, &ck);
    if (j->st == F8_OK) j->st = f8_checkpoint_add_adamw(ck, "o", o);
    if (j->st == F8_OK) j->bytes = moment_bytes(ck, 0, &j->moments);
    f8_checkpoint_destroy(ck);
    f8_adamw_destroy(o);
    if (j->st == F8_OK) f8_ctx_free(ctx, tp.data);
    f8_comm_destroy(comm);
    f8_ctx_destroy(ctx);
    return NULL;
}

static void test_sharded(f8_ctx *ctx, f8_adamw_moments kind)
{
    const char *name = f8_adamw_moments_name(kind);
    f8_adamw *whole = NULL;
    f8_tensor tp[2];
    CHECK_OK(ctx, shard_steps(ctx, NULL, kind, 0, 2, tp, &whole));
    f8_checkpoint *ck = snapshot(ctx, whole, "o");
    f8_comm_group *g = NULL;
    char err[256];
    if (f8_comm_group_create(2, &g, err, sizeof err) != F8_OK) die(err, NULL);
    shard_job jobs[2];
    pthread_t th[2];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < 2; r++) {
        jobs[r].rank = r, jobs[r].group = g, jobs[r].kind = kind;
        if (pthread_create(&th[r], NULL, shard_rank, &jobs[r]) != 0) die("pthread_create", NULL);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    f8_comm_group_destroy(g);
    float norm = 0;
    CHECK_OK(ctx, f8_adamw_read(whole, NULL, NULL, &norm));
    CHECK(norm > 2.0f, "sharded %s: the norm %g does not make clipping act", name, (double)norm);
    for (int r = 0; r < 2; r++) {
        CHECK(jobs[r].st == F8_OK, "sharded %s: rank %d failed: %s", name, r, f8_status_string(jobs[r].st));
        float want[SH_N];
        get(ctx, want, tp[r].data, sizeof want);
        unsigned char *mw = NULL;
        const size_t nw = moment_bytes(ck, r, &mw);
        CHECK(memcmp(want, jobs[r].p, sizeof want) == 0, "sharded %s: rank %d's parameters differ from one optimizer's",
              name, r);
        CHECK(nw > 0 && nw == jobs[r].bytes && memcmp(mw, jobs[r].moments, nw) == 0,
              "sharded %s: rank %d's stored moments differ from one optimizer's", name, r);
        free(mw), free(jobs[r].moments);
        f8_ctx_free(ctx, tp[r].data);
    }
    f8_checkpoint_destroy(ck);
    f8_adamw_destroy(whole);
}

/* ---- checkpoints ---------------------------------------------------------------------- */

/* A copy of src (entries and user metadata) with len bytes at `byte` of the
 * entry `name` replaced by val. */
static f8_checkpoint *tampered(f8_ctx *ctx, const f8_checkpoint *src, const char *name, size_t byte, const void *val,
                               size_t len)
{
    f8_checkpoint *ck = NULL;
    if (f8_checkpoint_create(ctx, &ck) != F8_OK) die("f8_checkpoint_create", ctx);
    for (size_t i = 0; i < f8i_checkpoint_count(src); i++) {
        const f8i_ck_entry *e = f8i_checkpoint_entry(src, i);
        unsigned char *d = (unsigned char *)xmalloc(e->bytes);
        memcpy(d, e->data, e->bytes);
        if (!strcmp(e->name, name)) memcpy(d + byte, val, len);
        if (f8i_checkpoint_put(ck, e->name, e->dtype, e->ndim, e->shape, d, e->bytes) != F8_OK) die("put", ctx);
        free(d);
    }
    for (size_t i = 0; i < f8i_checkpoint_meta_count(src); i++) {
        const char *k, *v;
        f8i_checkpoint_meta_at(src, i, &k, &v);
        if (strncmp(k, "f8.", 3) && strcmp(k, "format") && f8i_checkpoint_set_meta(ck, k, v) != F8_OK) die("meta", ctx);
    }
    return ck;
}

/* A restore that must fail with want and leave the optimizer as it was. */
static void refused(f8_ctx *ctx, const f8_checkpoint *ck, f8_adamw *o, f8_status want, const char *needle, const char *what)
{
    f8_checkpoint *before = snapshot(ctx, o, "x");
    CHECK_STATUS(ctx, f8_checkpoint_restore_adamw(ck, "o", o), want);
    CHECK(!needle || strstr(f8_ctx_last_error(ctx), needle), "%s: the message \"%s\" does not name \"%s\"", what,
          f8_ctx_last_error(ctx), needle);
    f8_checkpoint *after = snapshot(ctx, o, "x");
    CHECK(same_entries(before, after), "%s: a refused restore changed the optimizer", what);
    f8_checkpoint_destroy(before), f8_checkpoint_destroy(after);
}

static void test_checkpoint(f8_ctx *ctx, f8_adamw_moments kind)
{
    const char *name = f8_adamw_moments_name(kind);
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.lr_min = 1e-3f, cfg.warmup_steps = 2, cfg.total_steps = 8, cfg.grad_clip = 1.0f;
    cfg.moments = kind;
    model a, b, c;
    model_make(ctx, &a, &cfg, 9);
    model_make(ctx, &b, &cfg, 9);
    model_make(ctx, &c, &cfg, 10); /* another start: the restore must overwrite all that matters */
    run_steps(ctx, &a, 0, 7);
    run_steps(ctx, &b, 0, 3);
    f8_checkpoint *ld = save_and_load(ctx, b.p, NP, b.o, "o", ctx, "test_adamw_moments");
    if (!ld) die("checkpoint load", ctx);
    const char *meta = f8_checkpoint_metadata(ld, "o.moments");
    CHECK(meta && !strcmp(meta, name), "%s: the checkpoint's metadata o.moments is %s", name, meta ? meta : "absent");
    const int fp8 = kind == F8_ADAMW_MOMENTS_FP8;
    const f8i_ck_entry *em = entry(ld, "m", 0), *ev = entry(ld, fp8 ? "v_sqrt" : "v", 0);
    const f8i_ck_entry *es = entry(ld, "v_sqrt_scale_inv", 0);
    const f8i_ck_dtype dt = fp8 ? F8I_CK_F8_E4M3 : F8I_CK_BF16;
    CHECK(em && ev && em->dtype == dt && ev->dtype == dt && em->ndim == 2 && em->shape[1] == PARAMS[0].cols,
          "%s: the stored moments' dtype or shape", name);
    CHECK(fp8 ? es && es->dtype == F8I_CK_F32 && es->shape[0] == 3 : !es && !entry(ld, "v", 0) == 0,
          "%s: the stored scale_invs (3 blocks of parameter 0)", name);
    read_params(ctx, ld, c.p, NP);
    CHECK_OK(ctx, f8_checkpoint_restore_adamw(ld, "o", c.o));
    run_steps(ctx, &c, 3, 4);
    int same = 1;
    for (int i = 0; i < NP; i++) {
        void *x = dev_read(ctx, &a.p[i]), *y = dev_read(ctx, &c.p[i]);
        same &= memcmp(x, y, (size_t)count(i) * f8_dtype_size(PARAMS[i].pdt)) == 0;
        free(x), free(y);
    }
    f8_checkpoint *sa = snapshot(ctx, a.o, "o"), *sc = snapshot(ctx, c.o, "o");
    CHECK(same && same_entries(sa, sc), "%s: 3 steps + checkpoint + 4 steps differ from 7 steps", name);
    f8_checkpoint_destroy(sa), f8_checkpoint_destroy(sc);

    /* another moments form, both ways: refused, nothing changed */
    for (int k = 0; k < 3; k++) {
        if ((f8_adamw_moments)k == kind) continue;
        f8_adamw_config other = cfg;
        other.moments = (f8_adamw_moments)k;
        model d;
        model_make(ctx, &d, &other, 11);
        run_steps(ctx, &d, 0, 1);
        refused(ctx, ld, d.o, F8_ERR_DTYPE, name, "another moments form");
        f8_checkpoint *mine = snapshot(ctx, d.o, "o");
        refused(ctx, mine, c.o, F8_ERR_DTYPE, f8_adamw_moments_name(other.moments), "another moments form, reversed");
        f8_checkpoint_destroy(mine);
        model_free(ctx, &d);
    }
    /* values a run must not load: a NaN code of m, a negative (FP8) scale_inv or v */
    const uint8_t nan8 = 0x7F;
    const uint16_t nan16 = 0x7FC0;
    const float neg = -1.0f;
    f8_checkpoint *bad = fp8 ? tampered(ctx, ld, "o.m.2", 5, &nan8, 1) : tampered(ctx, ld, "o.m.2", 10, &nan16, 2);
    refused(ctx, bad, c.o, F8_ERR_INVALID_ARGUMENT, "o.m.2", "a NaN first moment");
    f8_checkpoint_destroy(bad);
    bad = fp8 ? tampered(ctx, ld, "o.v_sqrt_scale_inv.0", 4, &neg, 4) : tampered(ctx, ld, "o.v.1", 2, &(uint16_t){0xBF80}, 2);
    refused(ctx, bad, c.o, F8_ERR_INVALID_ARGUMENT, fp8 ? "o.v_sqrt_scale_inv.0" : "o.v.1", "a negative value");
    f8_checkpoint_destroy(bad);

    f8_checkpoint_destroy(ld);
    model_free(ctx, &a), model_free(ctx, &b), model_free(ctx, &c);
}

/* ---- config, names, memory ---------------------------------------------------------------- */

static void test_config_memory(f8_ctx *ctx)
{
    CHECK(!strcmp(f8_adamw_moments_name(F8_ADAMW_MOMENTS_FP32), "fp32") &&
              !strcmp(f8_adamw_moments_name(F8_ADAMW_MOMENTS_BF16), "bf16") &&
              !strcmp(f8_adamw_moments_name(F8_ADAMW_MOMENTS_FP8), "fp8") && !f8_adamw_moments_name((f8_adamw_moments)3),
          "f8_adamw_moments_name");
    f8_adamw_config cfg = f8_adamw_config_default();
    CHECK(cfg.moments == F8_ADAMW_MOMENTS_FP32, "the default moments are FP32");
    cfg.moments = (f8_adamw_moments)3;
    f8_adamw *o = NULL;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &cfg, &o), F8_ERR_INVALID_ARGUMENT);
    CHECK(!o && strstr(f8_ctx_last_error(ctx), "moments"), "a bad moments value: %s", f8_ctx_last_error(ctx));
    /* bytes per parameter: 8, 4, 2 + 2·4/128 (one 65536-element parameter) */
    const int64_t n = 65536;
    const size_t want[3] = {8 * (size_t)n, 4 * (size_t)n, 2 * (size_t)n + 2 * 4 * (size_t)n / BLOCK};
    f8_tensor p = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 1, n), g = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 1, n);
    for (int k = 0; k < 3; k++) {
        cfg.moments = (f8_adamw_moments)k;
        f8_memory_report r0, r1;
        CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &o));
        CHECK_OK(ctx, f8_ctx_memory(ctx, &r0));
        CHECK_OK(ctx, f8_adamw_add(o, &p, &g, 1));
        CHECK_OK(ctx, f8_ctx_memory(ctx, &r1));
        const size_t got = r1.bytes[F8_MEM_OTHER] - r0.bytes[F8_MEM_OTHER];
        CHECK(got >= want[k] && got <= want[k] + 256, "%s moments of %lld parameters: %zu bytes, want %zu (+ the descriptor)",
              f8_adamw_moments_name(cfg.moments), (long long)n, got, want[k]);
        f8_adamw_destroy(o);
        /* an empty parameter (a rank's empty shard) beside a short one: steps, checkpoints, restores */
        f8_tensor ep = f8_tensor_make((float *)p.data + 64, F8_DTYPE_FP32, 1, 0),
                  eg = f8_tensor_make((float *)g.data + 64, F8_DTYPE_FP32, 1, 0);
        f8_tensor sp = f8_tensor_make(p.data, F8_DTYPE_FP32, 1, 5), sg = f8_tensor_make(g.data, F8_DTYPE_FP32, 1, 5);
        f8_adamw *a = NULL, *b = NULL;
        CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &a));
        CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &b));
        CHECK_OK(ctx, f8_adamw_add(a, &ep, &eg, 1));
        CHECK_OK(ctx, f8_adamw_add(a, &sp, &sg, 1));
        CHECK_OK(ctx, f8_adamw_add(b, &ep, &eg, 1));
        CHECK_OK(ctx, f8_adamw_add(b, &sp, &sg, 1));
        CHECK_OK(ctx, f8_adamw_step(a));
        f8_checkpoint *ck = snapshot(ctx, a, "o");
        CHECK_OK(ctx, f8_checkpoint_restore_adamw(ck, "o", b));
        f8_checkpoint *back = snapshot(ctx, b, "o");
        CHECK(same_entries(ck, back), "%s moments with an empty parameter: the restore differs",
              f8_adamw_moments_name(cfg.moments));
        f8_checkpoint_destroy(ck), f8_checkpoint_destroy(back);
        f8_adamw_destroy(a), f8_adamw_destroy(b);
    }
    f8_ctx_free(ctx, p.data), f8_ctx_free(ctx, g.data);
}

/* The moments' E4M3 load (f8i_adamw_m_from_fp8 with scale_inv 1: numerics.h's
 * f8i_fp8_decode, built from the code's bits) and stochastic encode
 * (adamw_moments.h: integer form, cheap on the GPU) against this file's
 * FP64 definitions: every code's value, and the rounding of FP32 values
 * swept over [0, 448) in steps of bit patterns (finer through FP32's own
 * subnormals), each with random bits,
 * the extreme bits, and bits one below, at and one above the value's
 * threshold where it lies between two codes. */
static void test_encode_definition(void)
{
    int bad_dec = 0;
    for (int c = 0; c < 256; c++) {
        const float got = f8i_adamw_m_from_fp8((uint8_t)c, 1.0f);
        const int nan = (c & 0x7F) == 0x7F;
        bad_dec += nan ? !isnan(got) : (double)got != e4m3_value(c) || !signbit(got) != !(c & 0x80);
    }
    CHECK(bad_dec == 0, "FP8 moments: %d of 256 E4M3 codes decode off the format's values", bad_dec);
    long n = 0, bad = 0, n_thr = 0;
    uint64_t h = 7;
    for (uint32_t b = 0; b < 0x43E00000u; b += b < 0x800000u ? 61u : 7919u) {
        const float y = f8i_bits_float(b);
        double thr, lo, hi;
        e4m3_sr(y, 0, &thr, &lo, &hi);
        uint32_t rs[6] = {0u, 0xFFFFFFFFu, 0u, 0u, 0u, 0u};
        int nr = 2;
        h = f8i_mix64(h + b), rs[nr++] = (uint32_t)h;
        if (lo != hi) { /* the u of the threshold, (|y| - lo) / (hi - lo) = k / 2^24 when exact */
            const double k = ldexp((y - lo) / (hi - lo), 24);
            if (k == floor(k) && k >= 1 && k < 16777215)
                rs[nr++] = (uint32_t)(k - 1) << 8, rs[nr++] = (uint32_t)k << 8, rs[nr++] = (uint32_t)(k + 1) << 8, n_thr++;
        }
        for (int i = 0; i < nr; i++)
            for (int sg = 0; sg < 2; sg++) {
                const double want = e4m3_sr(sg ? -(double)y : y, rs[i], &thr, &lo, &hi);
                const double got = e4m3_value(f8i_adamw_fp8_encode_sr(sg ? -y : y, rs[i]));
                bad += got != want && !(got == 0 && want == 0), n++;
            }
    }
    CHECK(bad == 0 && n_thr > 1000, "FP8 moments: %ld of %ld stochastic roundings differ from the definition (%ld at a "
          "threshold)", bad, n, n_thr);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) die(why, NULL);
    test_config_memory(ctx);
    test_encode_definition();
    for (int k = 0; k < 2; k++) {
        f8_adamw_config cfg = f8_adamw_config_default();
        cfg.lr_max = 1e-2f, cfg.lr_min = 1e-3f, cfg.warmup_steps = 2, cfg.total_steps = 6, cfg.grad_clip = 1.0f;
        test_reference(ctx, KINDS[k], "warmup+cosine, clipped", cfg, 8);
        cfg.grad_clip = 0.0f, cfg.warmup_steps = 0, cfg.total_steps = 0, cfg.weight_decay = 0.0f, cfg.beta2 = 0.99f;
        test_reference(ctx, KINDS[k], "constant lr, no clip, no decay, beta2 0.99", cfg, 6);
        test_sharded(ctx, KINDS[k]);
        test_checkpoint(ctx, KINDS[k]);
    }
    test_sharded(ctx, F8_ADAMW_MOMENTS_FP32);
    test_numerics(ctx);
    test_stochastic_decay(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_adamw_moments");
}
