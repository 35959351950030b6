/*
 * test_adamw.c — the CPU backend's AdamW against an FP64 host implementation
 * of f8.h's formulas over several steps (warmup, cosine, clipping on and off,
 * decay on and off, BF16 parameters), the schedule, and a checkpoint round
 * trip that continues bit for bit.
 */
#include "train_ops_tests.h"

#include "io/checkpoint.h"

static const double PI = 3.14159265358979323846;

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

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) die(why, NULL);
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.lr_min = 1e-3f, cfg.warmup_steps = 2, cfg.total_steps = 5, cfg.grad_clip = 1.0f;
    test_adamw_reference(ctx, "warmup+cosine, clipped", cfg, 7);
    cfg.grad_clip = 0.0f, cfg.warmup_steps = 0, cfg.total_steps = 0, cfg.weight_decay = 0.0f;
    test_adamw_reference(ctx, "constant lr, no clip, no decay", cfg, 4);
    cfg.grad_clip = 100.0f, cfg.weight_decay = 0.5f, cfg.warmup_steps = 3, cfg.total_steps = 0;
    test_adamw_reference(ctx, "warmup only, clip inactive", cfg, 5);
    test_schedule(ctx);
    test_checkpoint(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_adamw");
}
