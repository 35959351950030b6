/*
 * test_recompute_blocks.c — f8_train --recompute-blocks N|on on the CPU
 * oracle (train/recompute.h):
 *  - bitwise the run without it, for the GPT and the Llama, FP8 off and
 *    every FP8 recipe (delayed, current, block), over two microbatches a
 *    step (FIRST and NOT_FIRST weight casts), with every block recomputed
 *    (on) and with the first N of them (N = 1 .. L-1, 4 layers): the losses
 *    of every step, and after them every parameter and the whole FP8
 *    scaling state (amax histories, scales, scale_invs: the checkpoint's
 *    bytes); the recorded CPU graph of the step the same; the peak memory
 *    lower, and falling with N by one recomputed block's saving a block,
 *    exactly as the memory plan's figures and total say;
 *  - with the options it composes with (GPT): --recompute-norm, FP8
 *    attention (a layer's own attention and saved state), --fp8-weights,
 *    the LM head in passes, BF16 and FP8 AdamW moments;
 *  - a checkpoint written with it resumes without it (and the other way,
 *    and with another N), bitwise the uninterrupted run; 2 data-parallel
 *    CPU ranks the same with and without;
 *  - f8_module_saved_rebind: refused between modules whose saved state
 *    differs, nothing changed; a rebound object holds no forward;
 *  - the parsing (on, off, N) and what it refuses (--tp, --fp8-report, N
 *    past the model's blocks, a word that is none of these).
 */
#include <math.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"
#include "trainer_fd.h"

#define MAXR 2
#define LOSS_TOL 0.0 /* rank_fixture.h's tolerances, unused here: the runs are compared bit for bit */
#define PARAM_TOL 0.0
#include "rank_fixture.h"

enum { STEPS = 4 };

/* 3 blocks: the first two are recomputed, the last is still there from the forward */
static train_options gpt_options(void) { return small_gpt_options(6, 3); }
static train_options llama_options(void) { return small_llama_options(gpt_options()); }

/* o with recompute off and with N blocks (TRAIN_RECOMPUTE_ALL: on), and graphed: the same bits everywhere. */
static void same_as_off_n(const char *what, train_options o, int N, int want_lower_peak)
{
    double off[STEPS], on[STEPS], graph[STEPS];
    size_t peak_off, peak_on;
    o.recompute_blocks = 0;
    trainer *a = run_steps(&o, STEPS, off, &peak_off);
    o.recompute_blocks = N;
    trainer *b = run_steps(&o, STEPS, on, &peak_on);
    CHECK(memcmp(off, on, sizeof off) == 0, "%s: losses with recompute differ (step %d: %.9g vs %.9g)", what, STEPS,
          on[STEPS - 1], off[STEPS - 1]);
    CHECK(models_bitwise_equal(trainer_model(a), trainer_model(b)),
          "%s: parameters or FP8 scaling state with recompute differ", what);
    trainer_destroy(a);
    trainer_destroy(b);
    o.graph = 1;
    trainer *g = run_steps(&o, STEPS, graph, NULL);
    CHECK(memcmp(off, graph, sizeof off) == 0, "%s: the graphed step with recompute differs (%.9g vs %.9g)", what,
          graph[STEPS - 1], off[STEPS - 1]);
    trainer_destroy(g);
    CHECK(!want_lower_peak || peak_on < peak_off, "%s: peak %zu with recompute, %zu without", what, peak_on, peak_off);
    printf("  %-44s bitwise; peak %7zu -> %7zu bytes\n", what, peak_off, peak_on);
}

static void same_as_off(const char *what, train_options o, int want_lower_peak)
{
    same_as_off_n(what, o, TRAIN_RECOMPUTE_ALL, want_lower_peak);
}

static void test_families_and_recipes(void)
{
    static const char *const recipes[3] = {"delayed", "current", "block"};
    for (int fam = 0; fam < 2; fam++)
        for (int v = 0; v < 4; v++) {
            train_options o = fam ? llama_options() : gpt_options();
            o.fp8 = v < 3;
            o.recipe = v < 3 ? recipes[v] : NULL;
            if (v == 2) o.channels = 128; /* block scaling's 128-wide tiles */
            char what[96];
            snprintf(what, sizeof what, "%s, %s", fam ? "llama" : "gpt", v < 3 ? recipes[v] : "FP8 off");
            same_as_off(what, o, 1);
        }
    /* one microbatch a step (F8_MICROBATCH_NONE: the weights cast by every forward) */
    train_options o = gpt_options();
    o.grad_accum = 1;
    same_as_off("gpt, delayed, one microbatch", o, 1);
    o = llama_options();
    o.grad_accum = 1;
    o.recipe = "current";
    same_as_off("llama, current, one microbatch", o, 1);
}

static void test_compositions(void)
{
    train_options o = gpt_options();
    o.recompute_norm = 1;
    same_as_off("gpt, delayed, --recompute-norm on", o, 1);
    o = gpt_options();
    o.fp8_attention = 1, o.dtype = "bf16";
    same_as_off("gpt, FP8 attention (BF16)", o, 1);
    o = gpt_options();
    o.fp8_weights = 1;
    same_as_off("gpt, delayed, --fp8-weights on", o, 1);
    o = gpt_options();
    o.head_chunk = 16; /* 32 tokens a microbatch: two head passes */
    same_as_off("gpt, the LM head in passes", o, 1);
    o = llama_options();
    o.adam_moments = "bf16";
    same_as_off("llama, --adam-moments bf16", o, 1);
    o = gpt_options();
    o.adam_moments = "fp8";
    same_as_off("gpt, --adam-moments fp8", o, 1);
    o = gpt_options(); /* FP32 main grads: the recomputed modules' wgrad GEMMs write and add into them */
    o.dtype = "bf16", o.grad_dtype = "fp32";
    same_as_off("gpt, BF16, --grad-dtype fp32", o, 1);
    o = llama_options();
    o.fp8_attention = 1, o.dtype = "bf16", o.grad_dtype = "fp32";
    same_as_off("llama, FP8 attention, --grad-dtype fp32", o, 1);
    o = llama_options();
    o.fp8_weights = 1;
    same_as_off("llama, delayed, --fp8-weights on", o, 1);
}

/* A checkpoint of a run with recompute resumes without it, and the other way, and with another N: the
 * losses and model of the uninterrupted run without it. */
static void test_checkpoint(void)
{
    static const int pairs[3][2] = {{TRAIN_RECOMPUTE_ALL, 0}, {0, TRAIN_RECOMPUTE_ALL}, {2, 1}};
    for (int fam = 0; fam < 2; fam++)
        for (int k = 0; k < 3; k++) {
            char path[128];
            snprintf(path, sizeof path, "/tmp/f8_test_recompute_blocks_%d_%d.safetensors", fam, (int)getpid());
            train_options o = fam ? llama_options() : gpt_options();
            double full[STEPS], part[STEPS];
            trainer *u = run_steps(&o, STEPS, full, NULL);
            o.recompute_blocks = pairs[k][0];
            trainer *t = make(&o);
            for (int s = 0; s < 2; s++) CHECK_OK(NULL, trainer_step(t, &part[s]));
            CHECK_OK(NULL, trainer_save(t, path));
            trainer_destroy(t);
            o.recompute_blocks = pairs[k][1];
            o.resume = path;
            trainer *r = make(&o);
            for (int s = 2; s < STEPS; s++) CHECK_OK(NULL, trainer_step(r, &part[s]));
            CHECK(memcmp(full, part, sizeof full) == 0 && models_bitwise_equal(trainer_model(u), trainer_model(r)),
                  "%s: saved with --recompute-blocks %d, resumed with %d: not the uninterrupted run",
                  fam ? "llama" : "gpt", pairs[k][0], pairs[k][1]);
            trainer_destroy(u);
            trainer_destroy(r);
            unlink(path);
        }
    printf("  checkpoints: saved with recompute on / off / 2, resumed off / on / 1: bitwise the uninterrupted run\n");
}

/* --recompute-blocks N of 4 blocks, N = 1 .. 4, eager and graphed: bitwise the run without it; the peak
 * lower by N - 1 times what the memory plan says a recomputed block saves (its activations kept less
 * recomputed, measured by its probes), and so the plan's total (within 1% of the peak: test_memplan
 * checks the plan itself closer); on is N = 4. */
static void test_partial(void)
{
    static const char *const recipes[3] = {"delayed", "current", NULL};
    for (int fam = 0; fam < 2; fam++)
        for (int v = 0; v < 3; v++) {
            train_options o = fam ? llama_options() : gpt_options();
            o.layers = 4;
            o.quiet = 0; /* the trainer plans (it prints nothing before trainer_run) */
            o.fp8 = v < 2;
            o.recipe = recipes[v];
            const char *what = fam ? "llama" : "gpt", *rname = v < 2 ? recipes[v] : "FP8 off";
            double off[STEPS], on[STEPS];
            size_t peak_off, peak;
            o.recompute_blocks = 0;
            trainer *a = run_steps(&o, STEPS, off, &peak_off);
            for (int N = 1; N <= 4; N++)
                for (int graph = 0; graph <= 1; graph++) {
                    o.recompute_blocks = N;
                    o.graph = graph;
                    trainer *b = run_steps(&o, STEPS, on, &peak);
                    CHECK(memcmp(off, on, sizeof off) == 0 && models_bitwise_equal(trainer_model(a), trainer_model(b)),
                          "%s, %s, --recompute-blocks %d, graph %d: losses, parameters or FP8 state differ (%.9g vs "
                          "%.9g)", what, rname, N, graph, on[STEPS - 1], off[STEPS - 1]);
                    const mem_plan *p = &b->plan;
                    const double each = p->block_kept - p->block_recomputed, want = (double)(N - 1) * each;
                    CHECK(each > 0 && (double)peak_off - (double)peak == want,
                          "%s, %s, --recompute-blocks %d: peak %zu, %zu without: %.0f less, the plan says %.0f", what,
                          rname, N, peak, peak_off, (double)peak_off - (double)peak, want);
                    CHECK(a->plan.total - p->total == want, "%s, %s, --recompute-blocks %d: planned %.0f less, not %.0f",
                          what, rname, N, a->plan.total - p->total, want);
                    CHECK(fabs(p->total - (double)peak) <= 0.01 * (double)peak,
                          "%s, %s, --recompute-blocks %d: planned %.0f, peak %zu", what, rname, N, p->total, peak);
                    if (graph == 0)
                        printf("  %s, %s, --recompute-blocks %d: bitwise; peak %zu -> %zu bytes (plan %.0f)\n", what,
                               rname, N, peak_off, peak, p->total);
                    trainer_destroy(b);
                }
            o.recompute_blocks = TRAIN_RECOMPUTE_ALL;
            o.graph = 0;
            trainer *b = make(&o);
            CHECK(trainer_model(b)->c.recompute_blocks == 4, "%s: on recomputes %d of 4 blocks", what,
                  trainer_model(b)->c.recompute_blocks);
            trainer_destroy(b);
            trainer_destroy(a);
        }
}

static f8_status keep_params(rank_out *r, trainer *t) { return grab_params(r, trainer_model(t)); }

static void test_data_parallel(void)
{
    train_options o = cpu_rank_options(3);
    o.layers = 3, o.heads = 2, o.channels = 32;
    rank_out off[2], on[2];
    const rank_run rr = {.R = 2, .P = 1, .steps = 3, .save = NULL, .capture = keep_params, .bad_rank = -1,
                         .expect_ok = 1};
    run_ranks(&rr, &o, off);
    for (int k = 0; k < 2; k++) {
        o.recompute_blocks = k ? 2 : TRAIN_RECOMPUTE_ALL;
        run_ranks(&rr, &o, on);
        for (int r = 0; r < 2; r++) {
            CHECK(memcmp(off[r].loss, on[r].loss, 3 * sizeof(double)) == 0, "2 ranks, %d blocks: rank %d's losses differ",
                  o.recompute_blocks, r);
            CHECK(off[r].n_params == on[r].n_params && off[r].params && on[r].params &&
                      memcmp(off[r].params, on[r].params, (size_t)off[r].n_params * 4) == 0,
                  "2 ranks, %d blocks: rank %d's parameters differ", o.recompute_blocks, r);
            free(on[r].params);
        }
    }
    for (int r = 0; r < 2; r++) free(off[r].params);
    printf("  2 data-parallel CPU ranks (ZeRO-1), on and 2 blocks: bitwise the run without recompute\n");
}

/* The gradients of a recomputing model (FP32, FP8 off, one step's forward
 * and backward) against central finite differences of its own loss. */
static void test_gradients(int llama)
{
    train_options o = llama ? llama_options() : gpt_options();
    o.fp8 = 0;
    o.grad_accum = 1;
    o.recompute_blocks = TRAIN_RECOMPUTE_ALL;
    trainer *t = make(&o);
    fd_ctx f;
    fd_check_trainer(t, &f, NULL);
    CHECK(f.bad == 0, "%s: %d of %d gradient elements differ from finite differences", llama ? "llama" : "gpt", f.bad,
          f.checked);
    printf("  %s with recompute, gradients vs finite differences: %d elements, worst relative error %.3g\n",
           llama ? "llama" : "gpt", f.checked, f.worst);
    trainer_destroy(t);
}

static void test_rebind(void)
{
    char why[256] = "";
    f8_recipe rc = f8_recipe_default();
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, &rc, why);
    if (!ctx) die(why, NULL);
    f8_linear_config lc = f8_linear_config_default(32, 32);
    f8_module *a = NULL, *b = NULL, *wide = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &a));
    lc.seed = 9;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &b));
    lc.in_features = 64; /* a Linear saves its input: another width, another layout */
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &wide));
    f8_layernorm_linear_config nc = f8_layernorm_linear_config_default(32, 32);
    f8_module *norm = NULL;
    CHECK_OK(ctx, f8_layernorm_linear_create(ctx, &nc, &norm));
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(a, &s));
    float x[4 * 32], y[4 * 64];
    for (int i = 0; i < 4 * 32; i++) x[i] = (float)(i % 7) - 3.0f;
    f8_tensor tx = f8_tensor_make(x, F8_DTYPE_FP32, 4, 32), ty = f8_tensor_make(y, F8_DTYPE_FP32, 4, 32);
    CHECK_OK(ctx, f8_module_forward(a, &tx, &ty, F8_MICROBATCH_NONE, s));
    /* another kind, or other shapes: refused, the object still a's with its forward */
    CHECK_STATUS(ctx, f8_module_saved_rebind(norm, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_saved_rebind(wide, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_saved_rebind(b, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK(f8_module_saved_rebind(NULL, s) == F8_ERR_INVALID_ARGUMENT, "a NULL module accepted");
    CHECK_OK(ctx, f8_module_saved_rebind(a, s)); /* its owner: nothing changes */
    CHECK_OK(ctx, f8_module_backward(a, s, &ty, NULL));
    /* b: the same layout; the object is b's now and holds no forward until b's */
    CHECK_OK(ctx, f8_module_forward(a, &tx, &ty, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_saved_rebind(b, s));
    CHECK_STATUS(ctx, f8_module_backward(b, s, &ty, NULL), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_module_forward(a, &tx, &ty, F8_MICROBATCH_NONE, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(ctx, f8_module_forward(b, &tx, &ty, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward(b, s, &ty, NULL));
    f8_saved_destroy(s);
    f8_module_destroy(a);
    f8_module_destroy(b);
    f8_module_destroy(wide);
    f8_module_destroy(norm);
    f8_ctx_destroy(ctx);
}

static void test_refusals(void)
{
    train_options o = train_options_default();
    char err[512];
    char *tp[] = {"f8_train", "--recompute-blocks", "on", "--ranks", "2", "--tp", "2"};
    CHECK(train_parse_args(7, tp, &o, NULL, err, sizeof err) != 0 && strstr(err, "--recompute-blocks"),
          "--recompute-blocks with --tp: %s", err);
    char *rep[] = {"f8_train", "--recompute-blocks", "on", "--fp8-report"};
    o = train_options_default();
    CHECK(train_parse_args(4, rep, &o, NULL, err, sizeof err) != 0 && strstr(err, "--fp8-report"),
          "--recompute-blocks with --fp8-report: %s", err);
    char *ok[] = {"f8_train", "--recompute-blocks", "on"};
    o = train_options_default();
    CHECK(train_parse_args(3, ok, &o, NULL, err, sizeof err) == 0 && o.recompute_blocks == TRAIN_RECOMPUTE_ALL,
          "--recompute-blocks on: %s", err);
    CHECK(train_options_default().recompute_blocks == 0, "--recompute-blocks is on by default");
    static const char *const good[4] = {"off", "0", "3", "1024"};
    static const int value[4] = {0, 0, 3, 1024};
    for (int i = 0; i < 4; i++) {
        char *argv[] = {"f8_train", "--recompute-blocks", (char *)good[i]};
        o = train_options_default();
        o.recompute_blocks = 7;
        CHECK(train_parse_args(3, argv, &o, NULL, err, sizeof err) == 0 && o.recompute_blocks == value[i],
              "--recompute-blocks %s: %d (%s)", good[i], o.recompute_blocks, err);
    }
    static const char *const bad[4] = {"-1", "1025", "all", "2x"};
    for (int i = 0; i < 4; i++) {
        char *argv[] = {"f8_train", "--recompute-blocks", (char *)bad[i]};
        o = train_options_default();
        err[0] = 0;
        CHECK(train_parse_args(3, argv, &o, NULL, err, sizeof err) != 0 && strstr(err, "--recompute-blocks") &&
                  strstr(err, "on, off or a number") && o.recompute_blocks == 0,
              "--recompute-blocks %s accepted or unclear: %s", bad[i], err);
    }
    /* more blocks than the model has: refused by the trainer, naming both */
    o = gpt_options();
    o.recompute_blocks = 4;
    trainer *t = NULL;
    f8_status st = trainer_create(&o, &t, err, sizeof err);
    CHECK(st == F8_ERR_INVALID_ARGUMENT && t == NULL && strstr(err, "--recompute-blocks 4") && strstr(err, "3 blocks"),
          "--recompute-blocks 4 of 3 blocks: %s (%s)", f8_status_string(st), err);
    trainer_destroy(t);
}

int main(void)
{
    test_rebind();
    test_refusals();
    test_gradients(0);
    test_gradients(1);
    test_families_and_recipes();
    test_compositions();
    test_partial();
    test_checkpoint();
    test_data_parallel();
    return test_finish("test_recompute_blocks");
}
