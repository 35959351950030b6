/*
 * test_grad_bf16.c — what BF16 gradients cost (README, "Gradients"): a BF16
 * model (the GPU's default --dtype) keeps each parameter's gradient in BF16
 * and accumulates the microbatches of a step into it, one BF16 rounding per
 * add. Measured here on the CPU oracle against FP32 accumulation of the same
 * microbatches, and held to the bound that rounding gives.
 *
 * Oracle: each microbatch's gradient alone (zeroed, one forward and backward:
 * g_i, the FP32 GEMM sum rounded once to BF16), summed in FP64: S. Then the
 * same M microbatches accumulated as a step does: G. Each of the M adds rounds
 * to BF16 (unit roundoff u = 2^-8), and each g_i is itself one rounding of the
 * exact w_i, so |G - S| <= M·u·(1 + u)·Σ|g_i| element by element (the
 * partial sums are at most Σ|w_i|). With M = 1 there is nothing to
 * accumulate: G is g_1 bit for bit. The test prints the measured error
 * (largest |G - S| / Σ|g_i| over the elements, and ||G - S|| / ||S||) at
 * M = 1, 4 and 16, FP8 (delayed) and FP8 off.
 *
 * --grad-dtype fp32 beside the same BF16 parameters: the GEMM weights' and
 * the embeddings' gradients are FP32 main grads, the weight-gradient GEMMs
 * adding each microbatch's FP32 product into them (one FP32 rounding per
 * add), the embedding backward each row's FP32 sum. Oracle: that model's own
 * per-microbatch gradients g_i (FP32), summed in FP64: S. Bound: |G - S| <=
 * M·2^-24·Σ|g_i| element by element; the tied wte (the head's GEMM adds
 * h_i, then the embedding e_i: two roundings a microbatch, on partial sums of
 * |h_i| + |e_i|, which may cancel in g_i and are not seen apart here) is held
 * to 4·M·2^-24·Σ|g_i|; G is g_1 bit for bit at M = 1; and G is
 * closer to S than the BF16 gradients of the same parameters and batches
 * are (||G - S|| / ||S|| at least 100 times smaller at M > 1). The biases
 * and norm weights, which the modules compute into BF16, fold each
 * microbatch's BF16 gradient into their FP32 one (g_i is that BF16 value,
 * exactly: the same bound). Checked against the table: every gradient FP32,
 * the folds where they belong.
 */
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"

typedef struct grads {
    float *v;
    unsigned char *in_block; /* per element: 1 for the blocks' parameters (one rounding per microbatch) */
    int64_t n;
} grads;

/* Count the table's gradient elements into g->n. */
static f8_status grab(void *user, const model_param *p)
{
    ((grads *)user)->n += p->grad.rows * p->grad.cols;
    return F8_OK;
}

static gpt *g_model; /* the model grab_bf16 reads from */

static int g_any_dtype; /* grab_bf16 takes FP32 gradients too (--grad-dtype fp32) */

/* Every gradient of the table (BF16; FP32 too with g_any_dtype), as FP32,
 * into g->v from g->n on; in_block[k]: 1 for a block's BF16 element, 2 for
 * an FP32 one, 3 for the tied wte's FP32 one, 0 for an embedding's BF16 one. */
static f8_status grab_bf16(void *user, const model_param *p)
{
    grads *g = (grads *)user;
    const int64_t n = p->grad.rows * p->grad.cols;
    const int fp32 = p->grad.dtype == F8_DTYPE_FP32;
    if (!(p->grad.dtype == F8_DTYPE_BF16 || (fp32 && g_any_dtype))) return F8_ERR_DTYPE;
    uint16_t *h = (uint16_t *)xmalloc((size_t)n * (fp32 ? 4 : 2) + 2);
    f8_status st = f8_ctx_download(g_model->ctx, h, p->grad.data, (size_t)n * (fp32 ? 4 : 2));
    if (fp32 && st == F8_OK) memcpy(g->v + g->n, h, (size_t)n * 4);
    for (int64_t i = 0; !fp32 && st == F8_OK && i < n; i++) g->v[g->n + i] = f8_bf16_to_float(h[i]);
    const int tied = fp32 && !strcmp(p->name, "model.head.weight"); /* wte: the head's and the embedding's */
    if (g->in_block) memset(g->in_block + g->n, tied ? 3 : fp32 ? 2 : p->layer >= 0, (size_t)n);
    free(h);
    g->n += n;
    return st;
}

/* Forward and backward of microbatch i of the batch x (tokens, then targets,
 * batch·S each per microbatch) with the step's scale 1/(T·M), onto the
 * gradients as they are. */
static void microbatch(gpt *m, const int32_t *x, int i, int M)
{
    const int32_t *mb = x + (size_t)i * 2 * (size_t)m->T;
    f8_ctx_upload(m->ctx, m->tokens, mb, (size_t)m->T * 4);
    f8_ctx_upload(m->ctx, m->targets, mb + m->T, (size_t)m->T * 4);
    CHECK_OK(m->ctx, gpt_forward(m, m->c.batch, 1, 1.0f / (float)(m->T * M), F8_MICROBATCH_NONE));
    CHECK_OK(m->ctx, gpt_backward(m));
}

/* The model's gradients after microbatches [0, M) of x, from zero. */
static void accumulate(gpt *m, const int32_t *x, int M, grads *out)
{
    CHECK_OK(m->ctx, gpt_zero_grad(m));
    for (int i = 0; i < M; i++) microbatch(m, x, i, M);
    out->n = 0;
    g_model = m;
    CHECK_OK(m->ctx, param_each(&m->params, 0, grab_bf16, out));
}

/* The oracle: each microbatch's gradient alone (gi, scratch of n), summed
 * in FP64 into sum, their magnitudes into abs_sum (both zeroed, n each). */
static void oracle(gpt *m, const int32_t *x, int M, grads *gi, double *sum, double *abs_sum)
{
    for (int i = 0; i < M; i++) {
        CHECK_OK(m->ctx, gpt_zero_grad(m));
        microbatch(m, x, i, M);
        gi->n = 0;
        g_model = m;
        CHECK_OK(m->ctx, param_each(&m->params, 0, grab_bf16, gi));
        for (int64_t k = 0; k < gi->n; k++) sum[k] += gi->v[k], abs_sum[k] += fabs((double)gi->v[k]);
    }
}

static void measure(int fp8, int M)
{
    train_options o = quiet_run_options("cpu", 2);
    o.fp8 = fp8;
    o.dtype = "bf16";
    o.layers = 2, o.heads = 2, o.channels = 64, o.seq = 32, o.batch = 2, o.grad_accum = 1;
    trainer *t = NULL;
    char err[512] = "";
    if (trainer_create(&o, &t, err, sizeof err) != F8_OK) die(err, NULL);
    gpt *m = trainer_model(t);
    grads count = {NULL, NULL, 0};
    CHECK_OK(m->ctx, param_each(&m->params, 0, grab, &count));
    const int64_t n = count.n;
    int32_t *x = (int32_t *)xmalloc((size_t)M * 2 * (size_t)m->T * 4);
    for (int i = 0; i < M; i++)
        CHECK_OK(m->ctx, data_train_batch(t->data, 0, i, (int)o.batch, (int)o.seq, x + (size_t)i * 2 * (size_t)m->T,
                                          x + (size_t)i * 2 * (size_t)m->T + m->T));
    grads gi = {(float *)xmalloc((size_t)n * 4), NULL, 0}, acc = {(float *)xmalloc((size_t)n * 4), NULL, 0};
    acc.in_block = (unsigned char *)xmalloc((size_t)n);
    double *sum = (double *)calloc((size_t)n, sizeof(double)), *abs_sum = (double *)calloc((size_t)n, sizeof(double));
    oracle(m, x, M, &gi, sum, abs_sum); /* each microbatch alone, with the step's scale 1/(T·M) */
    accumulate(m, x, M, &acc);
    const double u = 0x1p-8, bound = M * u * (1 + u);
    /* [0] the blocks' parameters (a GEMM's or a reduction's FP32 result added once per microbatch: the
     * bound), [1] the embeddings (wte, tied to the head, and wpe: every token adds its row's gradient,
     * so an element takes as many roundings as tokens hit it: measured, not bounded) */
    double worst[2] = {0, 0}, e2[2] = {0, 0}, s2[2] = {0, 0};
    int64_t over = 0, nb = 0;
    for (int64_t k = 0; k < n; k++) {
        const int c = !acc.in_block[k];
        const double e = fabs((double)acc.v[k] - sum[k]);
        if (!c && e > bound * abs_sum[k]) over++;
        nb += !c;
        if (abs_sum[k] > 0) worst[c] = fmax(worst[c], e / abs_sum[k]);
        e2[c] += e * e, s2[c] += sum[k] * sum[k];
    }
    CHECK(over == 0, "fp8 %d, M %d: %lld of %lld block gradient elements past M·u·Σ|g_i|", fp8, M, (long long)over,
          (long long)nb);
    if (M == 1) CHECK(e2[0] + e2[1] == 0, "fp8 %d: one microbatch's gradient is not g_1 bit for bit", fp8);
    printf("  fp8 %d, %2d microbatches: blocks max |G - S| / sum|g_i| %.3g (bound %.3g), ||G - S|| / ||S|| %.3g; "
           "embeddings %.3g, %.3g\n", fp8, M, worst[0], bound, sqrt(e2[0] / s2[0]), worst[1], sqrt(e2[1] / s2[1]));
    free(gi.v);
    free(acc.v);
    free(acc.in_block);
    free(sum);
    free(abs_sum);
    free(x);
    trainer_destroy(t);
}

/* A BF16 model on the CPU with --grad-dtype gd. */
static trainer *make_bf16(int fp8, const char *gd)
{
    train_options o = quiet_run_options("cpu", 2);
    o.fp8 = fp8;
    o.dtype = "bf16";
    o.grad_dtype = gd;
    o.layers = 2, o.heads = 2, o.channels = 64, o.seq = 32, o.batch = 2, o.grad_accum = 1;
    trainer *t = NULL;
    char err[512] = "";
    if (trainer_create(&o, &t, err, sizeof err) != F8_OK) die(err, NULL);
    return t;
}

/* --grad-dtype fp32's table: every gradient FP32; the biases and norm
 * weights fold their module's BF16 gradient in (a fold), the GEMM weights
 * (their wgrad GEMMs write the main grad) and bare tensors do not; the main
 * grads' bytes: every module entry's FP32 and the fold's scratch. */
static void check_table(const gpt *m)
{
    int64_t wrong = 0, elements = 0, most = 0;
    for (int i = 0; i < m->params.n; i++) {
        const model_param *p = &m->params.v[i];
        const int gemm = p->which == F8_PARAM_WEIGHT || p->which == F8_PARAM_FC1_WEIGHT || p->which == F8_PARAM_FC2_WEIGHT;
        const int folds = p->module && !gemm, n = (int)(p->grad.rows * p->grad.cols);
        wrong += p->grad.dtype != F8_DTYPE_FP32 || (p->fold.data != NULL) != folds ||
                 (folds && p->fold.dtype != F8_DTYPE_BF16);
        if (p->module) elements += n;
        if (folds && n > most) most = n;
    }
    const size_t least = (size_t)(elements + most) * 4;
    CHECK(wrong == 0, "%lld entries with another gradient dtype or fold than their kind's", (long long)wrong);
    CHECK(m->main_grads && m->main_grad_bytes >= least && m->main_grad_bytes < least + 256 * (size_t)(m->params.n + 1),
          "main grads: %zu bytes for %lld module elements", m->main_grad_bytes, (long long)elements);
}

/* The fused modules of --grad-dtype fp32 hold no BF16 gradient of their GEMM
 * weights: the library's gradient bytes are the BF16 model's less exactly 2
 * bytes a GEMM weight element (the preset's shapes fill whole 256-byte
 * granules), and the FP32 main grads are the caller's (f8_ctx_alloc'd). */
static void held_gradients(gpt *a, gpt *b)
{
    int64_t gemm = 0;
    for (int i = 0; i < b->params.n; i++) {
        const model_param *p = &b->params.v[i];
        if (p->module && (p->which == F8_PARAM_WEIGHT || p->which == F8_PARAM_FC1_WEIGHT || p->which == F8_PARAM_FC2_WEIGHT))
            gemm += p->value.rows * p->value.cols;
    }
    f8_memory_report ra, rb;
    CHECK_OK(a->ctx, f8_ctx_memory(a->ctx, &ra));
    CHECK_OK(b->ctx, f8_ctx_memory(b->ctx, &rb));
    CHECK(ra.bytes[F8_MEM_GRADIENTS] - rb.bytes[F8_MEM_GRADIENTS] == (size_t)gemm * 2,
          "gradients held: %zu bytes with BF16 gradients, %zu with FP32 main grads; expected %lld less",
          ra.bytes[F8_MEM_GRADIENTS], rb.bytes[F8_MEM_GRADIENTS], (long long)gemm * 2);
}

static void measure_fp32(int fp8, int M)
{
    trainer *t16 = make_bf16(fp8, "auto"), *t32 = make_bf16(fp8, "fp32");
    gpt *a = trainer_model(t16), *b = trainer_model(t32);
    check_table(b);
    held_gradients(a, b);
    grads count = {NULL, NULL, 0};
    CHECK_OK(b->ctx, param_each(&b->params, 0, grab, &count));
    const int64_t n = count.n;
    int32_t *x = (int32_t *)xmalloc((size_t)M * 2 * (size_t)b->T * 4);
    for (int i = 0; i < M; i++)
        CHECK_OK(b->ctx, data_train_batch(t32->data, 0, i, (int)b->c.batch, (int)b->c.seq, x + (size_t)i * 2 * (size_t)b->T,
                                          x + (size_t)i * 2 * (size_t)b->T + b->T));
    grads gi = {(float *)xmalloc((size_t)n * 4), NULL, 0}, g32 = {(float *)xmalloc((size_t)n * 4), NULL, 0};
    grads g16 = {(float *)xmalloc((size_t)n * 4), NULL, 0};
    g32.in_block = (unsigned char *)xmalloc((size_t)n);
    double *sum = (double *)calloc((size_t)n, sizeof(double)), *abs_sum = (double *)calloc((size_t)n, sizeof(double));
    g_any_dtype = 1;
    oracle(b, x, M, &gi, sum, abs_sum); /* the FP32 model's microbatches alone */
    accumulate(b, x, M, &g32);
    g_any_dtype = 0;
    accumulate(a, x, M, &g16);
    const double u32 = 0x1p-24;
    double e32 = 0, e16 = 0, s2 = 0, worst = 0;
    int64_t over = 0, nf = 0, diff = 0;
    for (int64_t k = 0; k < n; k++) {
        const double e = fabs((double)g32.v[k] - sum[k]);
        nf += g32.in_block[k] >= 2;
        if (e > (g32.in_block[k] == 3 ? 4 : 1) * M * u32 * abs_sum[k]) over++;
        diff += g32.v[k] != gi.v[k] && M == 1;
        if (abs_sum[k] > 0) worst = fmax(worst, e / abs_sum[k]);
        e32 += e * e, s2 += sum[k] * sum[k];
        const double d16 = (double)g16.v[k] - sum[k];
        e16 += d16 * d16;
    }
    CHECK(over == 0, "fp8 %d, M %d: %lld gradient elements past their bound (FP32: M·2^-24·sum|g_i|)", fp8, M,
          (long long)over);
    CHECK(nf == n, "fp8 %d: %lld of %lld elements in FP32", fp8, (long long)nf, (long long)n);
    if (M == 1) CHECK(diff == 0, "fp8 %d: one microbatch's FP32 gradient is not g_1 bit for bit", fp8);
    if (M > 1)
        CHECK(100 * sqrt(e32 / s2) < sqrt(e16 / s2), "fp8 %d, M %d: FP32 gradients %.3g off, BF16 ones %.3g: not 100x "
              "closer", fp8, M, sqrt(e32 / s2), sqrt(e16 / s2));
    printf("  --grad-dtype fp32, fp8 %d, %2d microbatches: max |G - S| / sum|g_i| %.3g (bound %.3g, the tied wte's 4x), "
           "||G - S|| / ||S|| %.3g; the BF16 gradients of the same run %.3g\n", fp8, M, worst, M * u32, sqrt(e32 / s2), sqrt(e16 / s2));
    free(gi.v), free(g32.v), free(g16.v), free(g32.in_block), free(sum), free(abs_sum), free(x);
    trainer_destroy(t16);
    trainer_destroy(t32);
}

/* The losses of `steps` steps of o (from a checkpoint when o->resume); saved to save after them when not NULL. */
static void losses(const train_options *o, int steps, double *out, const char *save)
{
    trainer *t = NULL;
    char err[512] = "";
    if (trainer_create(o, &t, err, sizeof err) != F8_OK) die(err, NULL);
    for (int s = 0; s < steps; s++) CHECK_OK(NULL, trainer_step(t, &out[s]));
    if (save) CHECK_OK(NULL, trainer_save(t, save));
    trainer_destroy(t);
}

/* --grad-dtype fp32 in the trainer: the CPU graph is bitwise the eager step;
 * checkpoints hold no gradients, so a run resumes bitwise with its own
 * gradient dtype and resumes with the other one (a step's loss is the
 * forward of the checkpoint's parameters: bitwise the other run's); BF16
 * gradients beside FP32 parameters are refused. */
static void test_runs(void)
{
    train_options o = quiet_run_options("cpu", 4);
    o.dtype = "bf16";
    o.layers = 2, o.heads = 2, o.channels = 64, o.seq = 32, o.batch = 2, o.grad_accum = 2;
    char path[64];
    snprintf(path, sizeof path, "/tmp/f8_test_grad_fp32_%d.safetensors", (int)getpid());
    double f32[4], f32g[4], bf[4], part[4];
    o.grad_dtype = "fp32";
    losses(&o, 4, f32, NULL);
    o.graph = 1;
    losses(&o, 4, f32g, NULL);
    CHECK(memcmp(f32, f32g, sizeof f32) == 0, "fp32 gradients: the graphed steps differ from the eager ones");
    o.graph = 0;
    o.grad_dtype = "auto";
    losses(&o, 4, bf, NULL);
    CHECK(bf[0] == f32[0] && bf[1] != f32[1], "fp32 gradients: step 1 %s the BF16 run's, step 2 %s",
          bf[0] == f32[0] ? "is" : "is not", bf[1] != f32[1] ? "differs" : "does not differ");
    for (int k = 0; k < 2; k++) { /* written with fp32 (k 0) or BF16 gradients, resumed with fp32 */
        train_options w = o;
        w.grad_dtype = k ? "auto" : "fp32";
        losses(&w, 2, part, path);
        train_options r = o;
        r.grad_dtype = "fp32";
        r.resume = path;
        losses(&r, 1, part + 2, NULL);
        const double want = k ? bf[2] : f32[2];
        CHECK(part[2] == want, "a checkpoint of %s gradients resumed with fp32 ones: step 3 loss %.9g, the "
              "uninterrupted run's %.9g", k ? "BF16" : "FP32", part[2], want);
        if (!k) {
            losses(&r, 2, part + 2, NULL);
            CHECK(memcmp(part + 2, f32 + 2, 2 * sizeof(double)) == 0, "fp32 gradients: resumed losses not bitwise");
        }
    }
    remove(path);
    train_options x = o;
    x.dtype = "fp32";
    x.grad_dtype = "bf16";
    trainer *t = NULL;
    char err[512] = "";
    CHECK(trainer_create(&x, &t, err, sizeof err) != F8_OK && !t && strstr(err, "--grad-dtype bf16 needs bf16"),
          "--grad-dtype bf16 with fp32 parameters: %s", err);
    char *argv[] = {"f8_train", "--grad-dtype", "fp16"};
    train_options po = train_options_default();
    CHECK(train_parse_args(3, argv, &po, NULL, err, sizeof err) != 0 && strstr(err, "auto, bf16 or fp32"),
          "--grad-dtype fp16: %s", err);
}

int main(void)
{
    test_runs();
    for (int fp8 = 1; fp8 >= 0; fp8--) {
        measure(fp8, 1);
        measure(fp8, 4);
        measure(fp8, 16);
        measure_fp32(fp8, 1);
        measure_fp32(fp8, 4);
        measure_fp32(fp8, 16);
    }
    return test_finish("test_grad_bf16");
}
