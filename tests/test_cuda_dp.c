/*
 * test_cuda_dp.c — the data-parallel path on one GPU with an NCCL
 * communicator of size 1 (skipped without a GPU or in a CUDA=0 build):
 *  - f8_train's --gpus 1 launcher (fork, NCCL id through the pipe) runs a
 *    few steps and exits with a training status, not an error;
 *  - every collective on NCCL, size 1: the result is the input, bit for bit
 *    (FP32 sum and max, reduce_scatter, all_gather of FP32 and of FP8 bytes
 *    in place, broadcast), also replayed from a captured CUDA graph;
 *  - the trainer with the NCCL comm (reduce-scatter, sharded AdamW with its
 *    norm all-reduce, all-gather, amax MAX all-reduce; whole step captured
 *    as one CUDA graph) against the trainer without a comm: step 1's loss is
 *    bitwise the same, later losses within 1e-3 and parameters within 1e-2
 *    relative of the largest (BF16 parameters; the global norm is summed in
 *    another order, so the clip factor may move by an ulp); and the graphed
 *    run against an eager one with the comm: bitwise; the same with
 *    --dp-overlap (bucket reduce-scatters on the comm's stream, forked and
 *    joined by events inside the captured graph);
 *  - --fp8-weights (FP32 masters, the FP8 codes all-gathered as bytes and
 *    written into the modules, the weight scales from MAX-reduced amaxes)
 *    with the NCCL comm against the same run without a comm: step 1
 *    bitwise, later losses within 1e-3, parameters within 0.13 of the
 *    largest (a code may round one E4M3 step the other way: at most 2^-3
 *    of its value); graphed bitwise eager;
 *  - --grad-dtype fp32 (FP32 main grads beside BF16 parameters): step 1
 *    bitwise the BF16-gradient run's, NCCL size 1 against no comm as above,
 *    graphed bitwise eager.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"

#define STEPS 4

static train_options gpu_options(void)
{
    train_options o = quiet_run_options("cuda", STEPS);
    o.layers = 2;
    o.heads = 2;
    o.channels = 64;
    o.seq = 32;
    o.batch = 4;
    o.grad_accum = 2;
    return o;
}

typedef struct run_out {
    double loss[STEPS];
    float *params;
    int64_t n;
} run_out;

typedef struct grab_ctx {
    run_out *r;
    f8_ctx *ctx;
} grab_ctx;

static f8_status grab(void *user, const model_param *e)
{
    const f8_tensor *p = &e->value;
    grab_ctx *c = (grab_ctx *)user;
    const int64_t n = p->rows * p->cols;
    float *t = (float *)realloc(c->r->params, (size_t)(c->r->n + n) * 4);
    if (!t) return F8_ERR_OUT_OF_MEMORY;
    c->r->params = t;
    f8_tensor dst = f8_tensor_make(NULL, F8_DTYPE_FP32, 1, n);
    void *dev = NULL;
    f8_status st = f8_ctx_alloc(c->ctx, (size_t)n * 4, &dev);
    dst.data = dev;
    f8_tensor src = f8_tensor_make(p->data, p->dtype, 1, n);
    src.scale_inv = p->scale_inv; /* an FP8 weight: dequantized */
    if (st == F8_OK) st = f8_tensor_convert(c->ctx, &src, &dst);
    if (st == F8_OK) st = f8_ctx_download(c->ctx, t + c->r->n, dev, (size_t)n * 4);
    f8_ctx_free(c->ctx, dev);
    c->r->n += n;
    return st;
}

static int run(const train_options *o, run_out *r)
{
    memset(r, 0, sizeof *r);
    trainer *t = NULL;
    char err[512] = "";
    f8_status st = trainer_create(o, &t, err, sizeof err);
    CHECK(st == F8_OK, "trainer_create: %s", err);
    if (st != F8_OK) return -1;
    for (int s = 0; s < STEPS && st == F8_OK; s++) st = trainer_step(t, &r->loss[s]);
    CHECK(st == F8_OK, "step: %s", trainer_error(t));
    grab_ctx g = {r, trainer_model(t)->ctx};
    if (st == F8_OK) CHECK_OK(g.ctx, param_each(&trainer_model(t)->params, 0, grab, &g));
    trainer_destroy(t);
    return st == F8_OK ? 0 : -1;
}

static void test_collectives(f8_ctx *ctx, f8_comm *c)
{
    enum { N = 1000 };
    float h[N], out[N];
    uint8_t hb[N], ob[N];
    test_rng g = {7};
    for (int i = 0; i < N; i++) h[i] = (float)rng_normal(&g), hb[i] = (uint8_t)(i * 13);
    float *a = NULL, *b = NULL;
    uint8_t *q = NULL;
    CHECK_OK(ctx, f8_ctx_alloc(ctx, sizeof h, (void **)&a));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, sizeof h, (void **)&b));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, sizeof hb, (void **)&q));
    CHECK_OK(ctx, f8_ctx_upload(ctx, a, h, sizeof h));
    CHECK_OK(ctx, f8_ctx_upload(ctx, q, hb, sizeof hb));
    for (int k = 0; k < 5; k++) {
        CHECK_OK(ctx, f8_ctx_upload(ctx, b, h, sizeof h)); /* b = a for the in-place kinds */
        switch (k) {
        case 0: CHECK_OK(ctx, f8_comm_all_reduce(c, a, b, N, F8_DTYPE_FP32, F8_REDUCE_SUM)); break;
        case 1: CHECK_OK(ctx, f8_comm_all_reduce(c, b, b, N, F8_DTYPE_FP32, F8_REDUCE_MAX)); break;
        case 2: CHECK_OK(ctx, f8_comm_reduce_scatter(c, a, b, N, F8_DTYPE_FP32)); break;
        case 3: CHECK_OK(ctx, f8_comm_all_gather(c, b, b, N, F8_DTYPE_FP32)); break;
        default: CHECK_OK(ctx, f8_comm_broadcast(c, a, b, N, F8_DTYPE_FP32, 0)); break;
        }
        CHECK_OK(ctx, f8_ctx_download(ctx, out, b, sizeof out));
        CHECK(memcmp(out, h, sizeof h) == 0, "NCCL size 1, collective %d: the result is not the input", k);
    }
    CHECK_OK(ctx, f8_comm_all_gather(c, q, q, N, F8_DTYPE_E4M3));
    CHECK_OK(ctx, f8_ctx_download(ctx, ob, q, sizeof ob));
    CHECK(memcmp(ob, hb, sizeof hb) == 0, "NCCL FP8 all_gather");
    /* captured in a CUDA graph, replayed with a new input */
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, f8_comm_all_reduce(c, a, b, N, F8_DTYPE_FP32, F8_REDUCE_SUM));
    f8_graph *gr = NULL;
    CHECK_OK(ctx, f8_graph_end(ctx, &gr));
    for (int i = 0; i < N; i++) h[i] = -2.0f * h[i];
    CHECK_OK(ctx, f8_ctx_upload(ctx, a, h, sizeof h));
    if (gr) CHECK_OK(ctx, f8_graph_replay(gr));
    CHECK_OK(ctx, f8_ctx_download(ctx, out, b, sizeof out));
    CHECK(memcmp(out, h, sizeof h) == 0, "NCCL all_reduce replayed from a CUDA graph");
    f8_graph_destroy(gr);
    f8_ctx_free(ctx, a);
    f8_ctx_free(ctx, b);
    f8_ctx_free(ctx, q);
}

/* The same losses and parameters, bit for bit. */
static int same_runs(const run_out *a, const run_out *b)
{
    return memcmp(a->loss, b->loss, sizeof a->loss) == 0 && a->n == b->n &&
           memcmp(a->params, b->params, (size_t)a->n * 4) == 0;
}

/* a against ref: later step losses within 1e-3 relative; the parameters' largest distance over the largest of ref. */
static double runs_apart(const char *what, const run_out *a, const run_out *ref)
{
    for (int s = 1; s < STEPS; s++)
        CHECK(fabs(a->loss[s] - ref->loss[s]) <= 1e-3 * fabs(ref->loss[s]), "%s: step %d loss %.9g vs %.9g", what, s + 1,
              a->loss[s], ref->loss[s]);
    double big = 0, worst = a->n == ref->n ? 0 : 1;
    for (int64_t i = 0; i < ref->n; i++) big = fmax(big, fabs((double)ref->params[i]));
    for (int64_t i = 0; i < ref->n && i < a->n; i++) worst = fmax(worst, fabs((double)a->params[i] - ref->params[i]) / big);
    return worst;
}

/* --grad-dtype fp32 (FP32 main grads beside the BF16 parameters; the wgrad
 * GEMMs write FP32, the embedding backward adds into FP32 rows, ZeRO-1
 * converts FP32 gradients): without a comm, step 1's loss is bf16_loss0, the
 * BF16-gradient run's, bit for bit (the same forward); the NCCL comm of size
 * 1 against no comm as above (1e-2 of the largest parameter); graphed bitwise
 * eager. o: the options of the runs above (its fp8 weights are turned off). */
static void check_grad_fp32(train_options *o, f8_comm_id *id, double bf16_loss0)
{
    run_out gp, gd, gde;
    char err[256] = "";
    memset(&gp, 0, sizeof gp), memset(&gd, 0, sizeof gd), memset(&gde, 0, sizeof gde);
    o->fp8_weights = 0, o->grad_dtype = "fp32";
    o->comm_id = NULL, o->world = 0, o->graph = 1;
    int ok = run(o, &gp) == 0;
    o->comm_id = id, o->world = 1;
    ok = ok && f8_comm_id_create(id, err, sizeof err) == F8_OK && run(o, &gd) == 0;
    o->graph = 0;
    ok = ok && f8_comm_id_create(id, err, sizeof err) == F8_OK && run(o, &gde) == 0;
    CHECK(ok, "the three --grad-dtype fp32 runs: %s", err);
    if (ok) {
        CHECK(gp.loss[0] == bf16_loss0, "fp32 gradients: step 1 loss %.9g, with BF16 ones %.9g: not bitwise", gp.loss[0],
              bf16_loss0);
        CHECK(gd.loss[0] == gp.loss[0], "fp32 gradients: step 1 loss %.9g vs %.9g: not bitwise", gd.loss[0], gp.loss[0]);
        const double w = runs_apart("fp32 gradients", &gd, &gp);
        CHECK(w <= 1e-2, "fp32 gradients: parameters %.3g of the largest apart", w);
        CHECK(same_runs(&gd, &gde), "fp32 gradients: the graphed NCCL step differs from the eager one");
        printf("  NCCL size 1 with --grad-dtype fp32: losses %.6f .. %.6f, parameters %.2e apart from no comm\n",
               gd.loss[0], gd.loss[STEPS - 1], w);
    }
    free(gp.params), free(gd.params), free(gde.params);
}

int main(void)
{
    char why[256] = "";
    /* the probe is a child process: CUDA must not be initialised here before the launcher forks */
    pid_t probe = fork();
    if (probe == 0) {
        f8_ctx *c = test_ctx(F8_BACKEND_CUDA, NULL, why);
        _exit(c ? 0 : 77);
    }
    int status = 0;
    waitpid(probe, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return test_skip("test_cuda_dp", "no usable GPU or a CUDA=0 build");
    train_options o = gpu_options();
    o.gpus = 1;
    const int rc = train_launch(&o);
    CHECK(rc == 0 || rc == 2, "f8_train --gpus 1: exit status %d (0 or 2 wanted: it trained)", rc);
    o.gpus = 0;

    f8_ctx *ctx = test_ctx(F8_BACKEND_CUDA, NULL, why);
    if (!ctx) return test_skip("test_cuda_dp", why);
    f8_comm_id id;
    char err[256] = "";
    f8_status st = f8_comm_id_create(&id, err, sizeof err);
    CHECK(st == F8_OK, "f8_comm_id_create: %s", err);
    f8_comm *c = NULL;
    if (st == F8_OK) CHECK_OK(ctx, f8_comm_create_nccl(ctx, &id, 0, 1, &c));
    if (c) test_collectives(ctx, c);
    f8_comm_destroy(c);
    f8_ctx_destroy(ctx);

    /* an NCCL id serves one communicator (its bootstrap ends with the init):
     * a fresh one for each run */
    run_out plain, dp, dp_eager, ov, ov_eager;
    memset(&dp, 0, sizeof dp), memset(&dp_eager, 0, sizeof dp_eager);
    memset(&ov, 0, sizeof ov), memset(&ov_eager, 0, sizeof ov_eager);
    o.graph = 1;
    int ok = run(&o, &plain) == 0;
    o.comm_id = &id;
    o.world = 1;
    ok = ok && f8_comm_id_create(&id, err, sizeof err) == F8_OK && run(&o, &dp) == 0;
    o.graph = 0;
    ok = ok && f8_comm_id_create(&id, err, sizeof err) == F8_OK && run(&o, &dp_eager) == 0;
    /* --dp-overlap: buckets reduce-scattered on the comm's stream during the backward (fork/join events,
     * captured into the step's graph) */
    o.dp_overlap = 1;
    ok = ok && f8_comm_id_create(&id, err, sizeof err) == F8_OK && run(&o, &ov_eager) == 0;
    o.graph = 1;
    ok = ok && f8_comm_id_create(&id, err, sizeof err) == F8_OK && run(&o, &ov) == 0;
    CHECK(ok, "the five runs: %s", err);
    if (ok) {
        CHECK(dp.loss[0] == plain.loss[0], "step 1 loss %.9g with the NCCL comm, %.9g without: not bitwise", dp.loss[0],
              plain.loss[0]);
        for (int s = 1; s < STEPS; s++)
            CHECK(fabs(dp.loss[s] - plain.loss[s]) <= 1e-3 * fabs(plain.loss[s]), "step %d loss %.9g vs %.9g", s + 1,
                  dp.loss[s], plain.loss[s]);
        double big = 0, worst = 0;
        for (int64_t i = 0; i < plain.n; i++) big = fmax(big, fabs((double)plain.params[i]));
        for (int64_t i = 0; i < plain.n && i < dp.n; i++)
            worst = fmax(worst, fabs((double)dp.params[i] - plain.params[i]) / big);
        CHECK(dp.n == plain.n && worst <= 1e-2, "parameters: %.3g of the largest apart", worst);
        printf("  NCCL size 1 vs no comm: losses %.6f .. %.6f vs %.6f .. %.6f, parameters %.2e apart\n", dp.loss[0],
               dp.loss[STEPS - 1], plain.loss[0], plain.loss[STEPS - 1], worst);
        CHECK(memcmp(dp.loss, dp_eager.loss, sizeof dp.loss) == 0 && dp.n == dp_eager.n &&
                  memcmp(dp.params, dp_eager.params, (size_t)dp.n * 4) == 0,
              "the graphed NCCL step differs from the eager one");
        CHECK(ov.loss[0] == plain.loss[0], "overlap: step 1 loss %.9g vs %.9g: not bitwise", ov.loss[0], plain.loss[0]);
        double wo = 0;
        for (int64_t i = 0; i < plain.n && i < ov.n; i++) wo = fmax(wo, fabs((double)ov.params[i] - plain.params[i]) / big);
        CHECK(ov.n == plain.n && wo <= 1e-2, "overlap: parameters %.3g of the largest apart", wo);
        for (int s = 1; s < STEPS; s++)
            CHECK(fabs(ov.loss[s] - plain.loss[s]) <= 1e-3 * fabs(plain.loss[s]), "overlap: step %d loss %.9g vs %.9g",
                  s + 1, ov.loss[s], plain.loss[s]);
        CHECK(memcmp(ov.loss, ov_eager.loss, sizeof ov.loss) == 0 && ov.n == ov_eager.n &&
                  memcmp(ov.params, ov_eager.params, (size_t)ov.n * 4) == 0,
              "overlap: the graphed step (side stream captured) differs from the eager one");
        printf("  NCCL size 1 with --dp-overlap: parameters %.2e apart from no comm\n", wo);
    }
    free(plain.params), free(dp.params), free(dp_eager.params), free(ov.params), free(ov_eager.params);
    /* --fp8-weights: no comm, then NCCL size 1 graphed and eager */
    run_out wp, wd, wde;
    memset(&wd, 0, sizeof wd), memset(&wde, 0, sizeof wde);
    o.dp_overlap = 0;
    o.fp8_weights = 1;
    o.comm_id = NULL;
    o.world = 0;
    ok = run(&o, &wp) == 0;
    o.comm_id = &id;
    o.world = 1;
    ok = ok && f8_comm_id_create(&id, err, sizeof err) == F8_OK && run(&o, &wd) == 0;
    o.graph = 0;
    ok = ok && f8_comm_id_create(&id, err, sizeof err) == F8_OK && run(&o, &wde) == 0;
    CHECK(ok, "the three --fp8-weights runs: %s", err);
    if (ok) {
        CHECK(wd.loss[0] == wp.loss[0], "fp8 weights: step 1 loss %.9g vs %.9g: not bitwise", wd.loss[0], wp.loss[0]);
        const double w8 = runs_apart("fp8 weights", &wd, &wp);
        CHECK(w8 <= 0.13, "fp8 weights: parameters %.3g of the largest apart", w8);
        CHECK(same_runs(&wd, &wde), "fp8 weights: the graphed NCCL step differs from the eager one");
        printf("  NCCL size 1 with --fp8-weights: losses %.6f .. %.6f, parameters %.2e apart from no comm\n",
               wd.loss[0], wd.loss[STEPS - 1], w8);
    }
    free(wp.params), free(wd.params), free(wde.params);
    check_grad_fp32(&o, &id, plain.loss[0]);
    return test_finish("test_cuda_dp");
}
