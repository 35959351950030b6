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
 */
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

/* Every gradient of the table (BF16), as FP32, into g->v from g->n on. */
static f8_status grab_bf16(void *user, const model_param *p)
{
    grads *g = (grads *)user;
    const int64_t n = p->grad.rows * p->grad.cols;
    if (p->grad.dtype != F8_DTYPE_BF16) return F8_ERR_DTYPE;
    uint16_t *h = (uint16_t *)xmalloc((size_t)n * 2 + 2);
    f8_status st = f8_ctx_download(g_model->ctx, h, p->grad.data, (size_t)n * 2);
    for (int64_t i = 0; st == F8_OK && i < n; i++) g->v[g->n + i] = f8_bf16_to_float(h[i]);
    if (g->in_block) memset(g->in_block + g->n, p->layer >= 0, (size_t)n);
    free(h);
    g->n += n;
    return st;
}

/* The model's gradients after forward + backward of microbatches [0, M) of
 * the batch x (tokens, then targets, batch·S each per microbatch), from zero. */
static void accumulate(gpt *m, const int32_t *x, int M, grads *out)
{
    CHECK_OK(m->ctx, gpt_zero_grad(m));
    for (int i = 0; i < M; i++) {
        const int32_t *mb = x + (size_t)i * 2 * (size_t)m->T;
        f8_ctx_upload(m->ctx, m->tokens, mb, (size_t)m->T * 4);
        f8_ctx_upload(m->ctx, m->targets, mb + m->T, (size_t)m->T * 4);
        CHECK_OK(m->ctx, gpt_forward(m, m->c.batch, 1, 1.0f / (float)(m->T * M), F8_MICROBATCH_NONE));
        CHECK_OK(m->ctx, gpt_backward(m));
    }
    out->n = 0;
    g_model = m;
    CHECK_OK(m->ctx, param_each(&m->params, 0, grab_bf16, out));
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
    for (int i = 0; i < M; i++) { /* each microbatch alone, with the step's scale 1/(T·M) */
        CHECK_OK(m->ctx, gpt_zero_grad(m));
        const int32_t *mb = x + (size_t)i * 2 * (size_t)m->T;
        f8_ctx_upload(m->ctx, m->tokens, mb, (size_t)m->T * 4);
        f8_ctx_upload(m->ctx, m->targets, mb + m->T, (size_t)m->T * 4);
        CHECK_OK(m->ctx, gpt_forward(m, m->c.batch, 1, 1.0f / (float)(m->T * M), F8_MICROBATCH_NONE));
        CHECK_OK(m->ctx, gpt_backward(m));
        gi.n = 0;
        g_model = m;
        CHECK_OK(m->ctx, param_each(&m->params, 0, grab_bf16, &gi));
        for (int64_t k = 0; k < n; k++) sum[k] += gi.v[k], abs_sum[k] += fabs((double)gi.v[k]);
    }
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

int main(void)
{
    for (int fp8 = 1; fp8 >= 0; fp8--) {
        measure(fp8, 1);
        measure(fp8, 4);
        measure(fp8, 16);
    }
    return test_finish("test_grad_bf16");
}
