/*
 * test_cuda_adamw_moments.c — the CUDA AdamW step with FP32, BF16 and FP8
 * moments against the CPU backend (tests/test_adamw_moments.c holds the CPU
 * to an FP64 reference): the same inputs give the same bits, parameters and
 * stored moments (codes and scale_invs) alike. Skips (exit 77) without a GPU.
 *   - clipping off, Gaussian gradients (6 decades in one tensor: subnormal
 *     codes), a tensor of 1.38M elements (more than one sweep of the grid's
 *     warps), short blocks, BF16 params and grads, misaligned views;
 *   - clipping on with gradients whose sum of squares is exact in any order
 *     (multiples of 1/16), so both backends clip by the same factor: bitwise;
 *   - a checkpoint written on the GPU resumes on the CPU bit for bit;
 *   - a captured step replayed = eager steps; steps allocate nothing.
 */
#include "train_ops_tests.h"

static f8_ctx *CPU, *GPU;

typedef struct pspec {
    int64_t rows, cols;
    f8_dtype pdt, gdt;
    int decay, offset; /* offset: the view starts one element into its buffer */
    double spread;     /* gradient magnitudes over this many decades */
} pspec;

static const pspec PARAMS[7] = {
    {768, 1800, F8_DTYPE_FP32, F8_DTYPE_FP32, 1, 0, 1}, {1, 13, F8_DTYPE_FP32, F8_DTYPE_FP32, 0, 0, 0},
    {5, 9, F8_DTYPE_BF16, F8_DTYPE_FP32, 1, 0, 0},      {3, 3, F8_DTYPE_FP32, F8_DTYPE_BF16, 1, 1, 0},
    {64, 64, F8_DTYPE_BF16, F8_DTYPE_BF16, 1, 0, 2},    {2, 200, F8_DTYPE_FP32, F8_DTYPE_FP32, 1, 1, 6},
    {1, 1, F8_DTYPE_FP32, F8_DTYPE_FP32, 0, 0, 0},
};
#define NP 7

static int64_t count(int i) { return PARAMS[i].rows * PARAMS[i].cols; }

/* One backend's copy of the model: views (maybe misaligned) into buffers. */
typedef struct side {
    f8_ctx *ctx;
    void *pbuf[NP], *gbuf[NP];
    f8_tensor p[NP], g[NP];
    f8_adamw *o;
} side;

static f8_tensor view(f8_ctx *ctx, void **buf, const void *host, f8_dtype dt, int64_t rows, int64_t cols, int offset)
{
    const size_t es = f8_dtype_size(dt), bytes = (size_t)(rows * cols) * es;
    *buf = dev_new(ctx, bytes + es);
    f8_tensor t = f8_tensor_make((char *)*buf + (offset ? es : 0), dt, rows, cols);
    void *z = host ? NULL : calloc(1, bytes + 1);
    put(ctx, t.data, host ? host : z, bytes);
    free(z);
    return t;
}

static void side_make(side *s, f8_ctx *ctx, const f8_adamw_config *cfg, uint64_t seed)
{
    test_rng r = {seed};
    s->ctx = ctx;
    if (f8_adamw_create(ctx, cfg, &s->o) != F8_OK) die("f8_adamw_create", ctx);
    for (int i = 0; i < NP; i++) {
        const pspec *ps = &PARAMS[i];
        void *h = host_random(&r, ps->pdt, (size_t)count(i), 1.0, NULL);
        s->p[i] = view(ctx, &s->pbuf[i], h, ps->pdt, ps->rows, ps->cols, ps->offset);
        s->g[i] = view(ctx, &s->gbuf[i], NULL, ps->gdt, ps->rows, ps->cols, ps->offset);
        free(h);
        if (f8_adamw_add(s->o, &s->p[i], &s->g[i], ps->decay) != F8_OK) die("f8_adamw_add", ctx);
    }
}

static void side_free(side *s)
{
    f8_adamw_destroy(s->o);
    for (int i = 0; i < NP; i++) f8_ctx_free(s->ctx, s->pbuf[i]), f8_ctx_free(s->ctx, s->gbuf[i]);
}

/* Gradients of step k into every side given: Gaussian over each tensor's
 * spread, or (dyadic) multiples of 1/16 in [-1/8, 1/8], whose squares
 * (multiples of 2^-8) add exactly in FP32 in any order at these sizes. */
static void grads(side **s, int ns, int k, int dyadic)
{
    test_rng r = {7000 + (uint64_t)k};
    for (int i = 0; i < NP; i++) {
        const pspec *ps = &PARAMS[i];
        const size_t n = (size_t)count(i), bytes = n * f8_dtype_size(ps->gdt);
        void *h = xmalloc(bytes);
        for (size_t j = 0; j < n; j++) {
            const float x = dyadic ? (float)((int)(rng_u64(&r) % 5) - 2) / 16.0f
                                   : (float)(0.02 * rng_normal(&r) * pow(10.0, -ps->spread * rng_uniform(&r)));
            if (ps->gdt == F8_DTYPE_BF16) ((uint16_t *)h)[j] = f8_bf16_from_float(x);
            else ((float *)h)[j] = x;
        }
        for (int q = 0; q < ns; q++) put(s[q]->ctx, s[q]->g[i].data, h, bytes);
        free(h);
    }
}

static uint64_t allocations(f8_ctx *ctx)
{
    f8_ctx_counters c;
    if (f8_ctx_counters_read(ctx, &c) != F8_OK) die("f8_ctx_counters_read", ctx);
    return c.allocations;
}

/* Parameters and every stored part of the optimizer (through a checkpoint
 * on each side): the count of parameters and entries that differ. */
static int differ(side *a, side *b)
{
    int bad = 0;
    for (int i = 0; i < NP; i++) {
        void *x = dev_read(a->ctx, &a->p[i]), *y = dev_read(b->ctx, &b->p[i]);
        bad += memcmp(x, y, (size_t)count(i) * f8_dtype_size(PARAMS[i].pdt)) != 0;
        free(x), free(y);
    }
    f8_checkpoint *ca = NULL, *cb = NULL;
    if (f8_checkpoint_create(a->ctx, &ca) != F8_OK || f8_checkpoint_add_adamw(ca, "o", a->o) != F8_OK ||
        f8_checkpoint_create(b->ctx, &cb) != F8_OK || f8_checkpoint_add_adamw(cb, "o", b->o) != F8_OK)
        die("checkpoint", NULL);
    for (size_t e = 0; e < f8i_checkpoint_count(ca); e++) {
        const f8i_ck_entry *x = f8i_checkpoint_entry(ca, e), *y = f8i_checkpoint_find(cb, x->name);
        if (!strcmp(x->name, "o.grad_norm")) continue; /* the norm's FP32 sum order is the backend's */
        const int off = !y || x->bytes != y->bytes || memcmp(x->data, y->data, x->bytes) != 0;
        if (off && bad < 3) fprintf(stderr, "    entry %s differs\n", x->name);
        bad += off;
    }
    CHECK(f8i_checkpoint_count(ca) == f8i_checkpoint_count(cb), "the two checkpoints hold other entries");
    f8_checkpoint_destroy(ca), f8_checkpoint_destroy(cb);
    return bad;
}

static void test_against_cpu(f8_adamw_moments kind, int clip)
{
    const char *name = f8_adamw_moments_name(kind);
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.lr_min = 1e-3f, cfg.warmup_steps = 2, cfg.total_steps = 6, cfg.moments = kind;
    cfg.grad_clip = clip ? 1.0f : 0.0f;
    side c, g;
    side_make(&c, CPU, &cfg, 42);
    side_make(&g, GPU, &cfg, 42);
    side *both[2] = {&c, &g};
    const uint64_t a0 = allocations(GPU);
    float norm = 0, ng = 0;
    for (int k = 0; k < 6; k++) {
        grads(both, 2, k, clip);
        CHECK_OK(CPU, f8_adamw_step(c.o));
        CHECK_OK(GPU, f8_adamw_step(g.o));
    }
    CHECK(allocations(GPU) == a0, "%s moments: steps allocated on the GPU", name);
    CHECK_OK(CPU, f8_adamw_read(c.o, NULL, NULL, &norm));
    CHECK_OK(GPU, f8_adamw_read(g.o, NULL, NULL, &ng));
    CHECK(clip ? norm == ng && norm > 1.0f : fabsf(norm - ng) <= 1e-5f * norm,
          "%s moments: gradient norm %.9g (CPU), %.9g (CUDA)", name, (double)norm, (double)ng);
    const int bad = differ(&c, &g);
    CHECK(bad == 0, "%s moments, clipping %s: %d CUDA parameters or stored moments differ from the CPU's", name,
          clip ? "on (exact norm)" : "off", bad);
    side_free(&c), side_free(&g);
}

/* GPU: 3 steps, checkpoint, file; CPU: restore; both 3 more steps. */
static void test_checkpoint(f8_adamw_moments kind)
{
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.warmup_steps = 2, cfg.total_steps = 9, cfg.grad_clip = 0.0f, cfg.moments = kind;
    side c, g;
    side_make(&c, CPU, &cfg, 1);
    side_make(&g, GPU, &cfg, 2);
    side *both[2] = {&c, &g}, *gpu[1] = {&g};
    for (int k = 0; k < 3; k++) {
        grads(gpu, 1, k, 0);
        CHECK_OK(GPU, f8_adamw_step(g.o));
    }
    f8_checkpoint *ld = save_and_load(GPU, g.p, NP, g.o, "o", CPU, "test_cuda_adamw_moments");
    read_params(CPU, ld, c.p, NP);
    CHECK(ld != NULL, "the GPU checkpoint did not load on the CPU");
    if (ld) CHECK_OK(CPU, f8_checkpoint_restore_adamw(ld, "o", c.o));
    for (int k = 3; k < 6; k++) {
        grads(both, 2, k, 0);
        CHECK_OK(CPU, f8_adamw_step(c.o));
        CHECK_OK(GPU, f8_adamw_step(g.o));
    }
    CHECK(differ(&c, &g) == 0, "%s moments: a GPU checkpoint resumed on the CPU differs from the GPU run",
          f8_adamw_moments_name(kind));
    f8_checkpoint_destroy(ld);
    side_free(&c), side_free(&g);
}

/* One captured step replayed = eager steps, on the GPU. */
static void test_graph(f8_adamw_moments kind)
{
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 1e-2f, cfg.warmup_steps = 2, cfg.total_steps = 9, cfg.moments = kind;
    side e, r;
    side_make(&e, GPU, &cfg, 3);
    side_make(&r, GPU, &cfg, 3);
    side *both[2] = {&e, &r};
    f8_graph *gr = NULL;
    CHECK_OK(GPU, f8_graph_begin(GPU));
    CHECK_OK(GPU, f8_adamw_step(r.o));
    CHECK_OK(GPU, f8_graph_end(GPU, &gr));
    for (int k = 0; k < 4 && gr; k++) {
        grads(both, 2, k, 0);
        CHECK_OK(GPU, f8_adamw_step(e.o));
        CHECK_OK(GPU, f8_graph_replay(gr));
    }
    CHECK(gr && differ(&e, &r) == 0, "%s moments: graph replays differ from eager steps", f8_adamw_moments_name(kind));
    f8_graph_destroy(gr);
    side_free(&e), side_free(&r);
}

int main(void)
{
    f8_ctx *ctxs[2];
    int rc = test_ctx_pair("test_cuda_adamw_moments", NULL, ctxs);
    if (rc) return rc;
    CPU = ctxs[0], GPU = ctxs[1];
    (void)dev_tensor, (void)host_get; /* train_ops_tests.h's helpers this file does not need */
    const f8_adamw_moments kinds[3] = {F8_ADAMW_MOMENTS_FP32, F8_ADAMW_MOMENTS_BF16, F8_ADAMW_MOMENTS_FP8};
    for (int k = 0; k < 3; k++) {
        test_against_cpu(kinds[k], 0);
        test_against_cpu(kinds[k], 1);
    }
    test_checkpoint(F8_ADAMW_MOMENTS_BF16);
    test_checkpoint(F8_ADAMW_MOMENTS_FP8);
    test_graph(F8_ADAMW_MOMENTS_FP8);
    f8_ctx_destroy(GPU);
    f8_ctx_destroy(CPU);
    return test_finish("test_cuda_adamw_moments");
}
