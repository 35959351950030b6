/*
 * test_memory_savings.c — the memory savings that cost no numerics, on the
 * CPU oracle: LayerNormMLP's recompute_activation (f8_train --recompute-act
 * on), Linear's recompute_input_cast (--recompute-proj-input on) and every
 * module's weight_transpose_per_call (--weight-transpose-per-call on). For
 * each:
 *  - a run with it is bitwise the run without it, GPT and Llama (GELU and
 *    SwiGLU), FP8 off (FP32 and BF16), delayed and current scaling, two
 *    microbatches a step (FIRST and NOT_FIRST weight casts) and one: the
 *    losses of every step, every parameter and the whole FP8 scaling state
 *    after them (the checkpoint's bytes), and then the gradients of one more
 *    forward and backward, byte for byte; graphed the same;
 *  - composed with --recompute-norm on and --recompute-blocks on (still
 *    bitwise), and a checkpoint written with it resumes without it;
 *  - memory: the peak is lower by exactly as much as the memory plan's
 *    total, and by what the plan says the option saves (act_outputs: tokens
 *    x ffn bytes a layer with FP8, less a saved float; proj_inputs: tokens x
 *    channels, less a saved float; transposes: a byte a weight, less the
 *    workspace's growth by the largest weight);
 *  - the modules refuse it under block and row-wise scaling
 *    (F8_ERR_UNSUPPORTED) and a flag other than 0 or 1, and f8_train's
 *    options refuse it with --recipe block.
 */
#include <math.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"
#include "trainer_fd.h"

enum { STEPS = 3 };

static train_options gpt_options(void) { return small_gpt_options(5, 2); }
static train_options llama_options(void) { return small_llama_options(gpt_options()); }

/* Every gradient of m after one more training forward and backward of a
 * fixed batch, end to end as raw bytes (caller frees); *n their count. */
static unsigned char *grads_of_one_more(gpt *m, size_t *n)
{
    const int64_t T = m->c.batch * m->c.seq;
    int32_t *tok = (int32_t *)malloc((size_t)(2 * T) * sizeof(int32_t));
    for (int64_t i = 0; tok && i < 2 * T; i++) tok[i] = (int32_t)((i * 7919 + 13) % m->c.vocab);
    CHECK_OK(m->ctx, f8_ctx_upload(m->ctx, m->tokens, tok, (size_t)T * sizeof(int32_t)));
    CHECK_OK(m->ctx, f8_ctx_upload(m->ctx, m->targets, tok + T, (size_t)T * sizeof(int32_t)));
    free(tok);
    CHECK_OK(m->ctx, gpt_zero_grad(m));
    CHECK_OK(m->ctx, gpt_forward(m, m->c.batch, 1, 0.25f, F8_MICROBATCH_NONE));
    CHECK_OK(m->ctx, gpt_backward(m));
    size_t total = 0;
    for (int i = 0; i < m->params.n; i++) {
        const f8_tensor *g = &m->params.v[i].grad;
        total += (size_t)(g->rows * g->cols) * f8_dtype_size(g->dtype);
    }
    unsigned char *h = (unsigned char *)calloc(total + 1, 1), *at = h;
    for (int i = 0; h && i < m->params.n; i++) {
        const f8_tensor *g = &m->params.v[i].grad;
        const size_t b = (size_t)(g->rows * g->cols) * f8_dtype_size(g->dtype);
        CHECK_OK(m->ctx, f8_ctx_download(m->ctx, at, g->data, b));
        at += b;
    }
    *n = total;
    return h;
}

/* The savings under test: which option, its name, and what the plan says it saves. */
typedef enum saving { ACT, TRANSPOSE, PROJ, SAVINGS } saving;
static const char *const SAVING_NAME[SAVINGS] = {"--recompute-act", "--weight-transpose-per-call",
                                                 "--recompute-proj-input"};

static void set_saving(train_options *o, saving k, int on)
{
    if (k == ACT) o->recompute_act = on;
    else if (k == TRANSPOSE) o->weight_transpose_per_call = on ? TRAIN_RECOMPUTE_ALL : 0;
    else o->recompute_proj_input = on;
}

static double plan_saves(const mem_plan *p, saving k)
{
    return k == ACT ? p->act_outputs : k == TRANSPOSE ? p->transposes : p->proj_inputs;
}

/* What the ctx of t's model holds after its steps (f8_ctx_memory). */
static double held(trainer *t)
{
    f8_memory_report r;
    CHECK_OK(NULL, f8_ctx_memory(trainer_model(t)->ctx, &r));
    return (double)r.total;
}

/* o with the saving off and on (and on, graphed): the same bits; the peak
 * lower; where want_exact (FP8) what the ctx holds after the steps lower
 * by exactly the plan total's drop, and that by the plan's own figure for
 * the option to within `slack` bytes. */
static void same_as_off(const char *what, train_options o, saving k, int want_exact)
{
    double off[STEPS], on[STEPS], graph[STEPS];
    const char *name = SAVING_NAME[k];
    o.quiet = 0; /* the trainer plans (it prints nothing before trainer_run) */
    set_saving(&o, k, 0);
    trainer *a = make(&o);
    for (int s = 0; s < STEPS; s++) CHECK_OK(NULL, trainer_step(a, &off[s]));
    set_saving(&o, k, 1);
    trainer *b = make(&o);
    for (int s = 0; s < STEPS; s++) CHECK_OK(NULL, trainer_step(b, &on[s]));
    CHECK(memcmp(off, on, sizeof off) == 0, "%s: losses with %s differ (step %d: %.9g vs %.9g)", what, name, STEPS,
          on[STEPS - 1], off[STEPS - 1]);
    CHECK(models_bitwise_equal(trainer_model(a), trainer_model(b)),
          "%s: parameters or FP8 scaling state with %s differ", what, name);
    const size_t peak_off = trainer_peak_memory(a), peak_on = trainer_peak_memory(b);
    const double saves = plan_saves(&a->plan, k), plan_drop = a->plan.total - b->plan.total;
    CHECK(saves > 0 && plan_saves(&b->plan, k) == 0, "%s: the plan says %s saves %.0f without it, %.0f with", what,
          name, saves, plan_saves(&b->plan, k));
    CHECK(peak_on < peak_off, "%s: peak %zu with %s, %zu without", what, peak_on, name, peak_off);
    /* act: the saved state smaller by act's bytes less the scale kept in their place (one float in its own
     * 256-byte-aligned slot a layer); transposes: the workspace grows by the largest weight where the
     * module that holds it has the largest backward workspace, by less where another has (so the plan's
     * figure is at most the true saving, short by at most that weight) */
    const double slack = k != TRANSPOSE ? 256.0 * (double)o.layers : (double)(4 * o.channels * o.channels);
    const double held_drop = held(a) - held(b);
    CHECK(!want_exact || (held_drop == plan_drop && fabs(plan_drop - saves) <= slack),
          "%s: the bytes held fell by %.0f and the plan by %.0f; the plan says %s saves %.0f", what, held_drop,
          plan_drop, name, saves);
    size_t na = 0, nb = 0;
    unsigned char *ga = grads_of_one_more(trainer_model(a), &na), *gb = grads_of_one_more(trainer_model(b), &nb);
    CHECK(na > 0 && na == nb && ga && gb && memcmp(ga, gb, na) == 0, "%s: gradients with %s differ", what, name);
    free(ga);
    free(gb);
    trainer_destroy(a);
    trainer_destroy(b);
    o.graph = 1;
    trainer *g = make(&o);
    for (int s = 0; s < STEPS; s++) CHECK_OK(NULL, trainer_step(g, &graph[s]));
    CHECK(memcmp(off, graph, sizeof off) == 0, "%s: the graphed step with %s differs", what, name);
    trainer_destroy(g);
    printf("  %-28s %-46s bitwise; peak %7zu -> %7zu bytes (plan: %.0f less)\n", name, what, peak_off, peak_on,
           saves);
}

static void test_families_and_recipes(saving k)
{
    static const char *const recipes[2] = {"delayed", "current"};
    for (int fam = 0; fam < 2; fam++)
        for (int v = 0; v < 4; v++) {
            if (k != ACT && v >= 2) continue; /* FP8 off: no FP8 weights, no FP8 copy of x */
            train_options o = fam ? llama_options() : gpt_options();
            o.fp8 = v < 2;
            o.recipe = v < 2 ? recipes[v] : NULL;
            if (v == 3) o.dtype = "bf16";
            char what[96];
            snprintf(what, sizeof what, "%s, %s", fam ? "llama" : "gpt",
                     v < 2 ? recipes[v] : v == 2 ? "FP8 off" : "FP8 off, BF16");
            same_as_off(what, o, k, v < 2);
        }
    train_options o = gpt_options();
    o.grad_accum = 1; /* F8_MICROBATCH_NONE: the weights cast by every forward */
    same_as_off("gpt, delayed, one microbatch", o, k, 1);
    o = gpt_options();
    o.dtype = "bf16";
    same_as_off("gpt, delayed, BF16", o, k, 1);
    o = llama_options();
    o.recipe = "current", o.dtype = "bf16";
    same_as_off("llama, current, BF16", o, k, 1);
}

static void test_compositions(saving k)
{
    train_options o = gpt_options();
    o.recompute_norm = 1;
    same_as_off("gpt, delayed, --recompute-norm on", o, k, 1);
    o = gpt_options();
    o.recompute_blocks = TRAIN_RECOMPUTE_ALL;
    same_as_off("gpt, delayed, --recompute-blocks on", o, k, 1);
    o = llama_options();
    o.recompute_blocks = TRAIN_RECOMPUTE_ALL, o.recompute_norm = 1, o.recipe = "current";
    for (int j = 0; j < SAVINGS; j++) set_saving(&o, (saving)j, j != (int)k); /* and the other savings */
    same_as_off("llama, current, with all the others", o, k, 1);
    o = gpt_options();
    o.adam_moments = "fp8";
    same_as_off("gpt, delayed, --adam-moments fp8", o, k, 1);
    if (k == TRANSPOSE) {
        o = gpt_options();
        o.fp8_weights = 1; /* FP8 primary weights: their transposes made per call too */
        same_as_off("gpt, delayed, --fp8-weights on", o, k, 1);
        o = gpt_options();
        o.fp8_head = 1; /* the LM head's weight too (the largest) */
        same_as_off("gpt, delayed, --fp8-head on", o, k, 1);
    }
}

/* Saved with it, resumed without (and the other way): the uninterrupted run. */
static void test_checkpoint(saving k)
{
    for (int on = 0; on < 2; on++) {
        char path[128];
        snprintf(path, sizeof path, "/tmp/f8_test_memory_savings_%d.safetensors", (int)getpid());
        train_options o = gpt_options();
        double full[2 * STEPS], part[2 * STEPS];
        trainer *u = make(&o);
        for (int s = 0; s < 2 * STEPS; s++) CHECK_OK(NULL, trainer_step(u, &full[s]));
        set_saving(&o, k, !on);
        trainer *t = make(&o);
        for (int s = 0; s < STEPS; s++) CHECK_OK(NULL, trainer_step(t, &part[s]));
        CHECK_OK(NULL, trainer_save(t, path));
        trainer_destroy(t);
        set_saving(&o, k, on);
        o.resume = path;
        trainer *r = make(&o);
        for (int s = STEPS; s < 2 * STEPS; s++) CHECK_OK(NULL, trainer_step(r, &part[s]));
        CHECK(memcmp(full, part, sizeof full) == 0 && models_bitwise_equal(trainer_model(u), trainer_model(r)),
              "saved with %s %s, resumed %s: not the uninterrupted run", SAVING_NAME[k], on ? "off" : "on",
              on ? "on" : "off");
        trainer_destroy(u);
        trainer_destroy(r);
        unlink(path);
    }
    printf("  %-28s checkpoints saved with it on / off, resumed off / on: bitwise the uninterrupted run\n",
           SAVING_NAME[k]);
}

/* The modules: refused where not supported, nothing made. */
static void test_refusals(void)
{
    static const f8_recipe_kind kinds[3] = {F8_RECIPE_BLOCK, F8_RECIPE_ROWWISE, F8_RECIPE_ROWWISE_GW_HP};
    for (int k = 0; k < 3; k++)
        for (int which = 0; which < 4; which++) { /* MLP act, MLP transposes, Linear transposes, input cast */
            f8_ctx_config cc = f8_ctx_config_default();
            cc.recipe.kind = kinds[k];
            f8_ctx *ctx = NULL;
            CHECK_OK(NULL, f8_ctx_create(&cc, &ctx, NULL, 0));
            f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(128, 256);
            f8_linear_config lc = f8_linear_config_default(128, 256);
            c.recompute_activation = which == 0;
            c.weight_transpose_per_call = which == 1;
            lc.weight_transpose_per_call = which == 2;
            lc.recompute_input_cast = which == 3;
            f8_module *m = (f8_module *)&c; /* not NULL: the refusal must set it */
            f8_status st = which < 2 ? f8_layernorm_mlp_create(ctx, &c, &m) : f8_linear_create(ctx, &lc, &m);
            CHECK(st == F8_ERR_UNSUPPORTED && m == NULL, "recipe %d, case %d: %s", (int)kinds[k], which,
                  f8_status_string(st));
            c.fp8 = lc.fp8 = 0; /* FP8 off: nothing to quantize, supported */
            st = which < 2 ? f8_layernorm_mlp_create(ctx, &c, &m) : f8_linear_create(ctx, &lc, &m);
            CHECK(st == F8_OK && m, "recipe %d, case %d, FP8 off: %s", (int)kinds[k], which, f8_status_string(st));
            f8_module_destroy(m);
            f8_ctx_destroy(ctx);
        }
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *ctx = NULL;
    CHECK_OK(NULL, f8_ctx_create(&cc, &ctx, NULL, 0));
    f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(64, 128);
    c.recompute_activation = 2;
    f8_module *m = NULL;
    CHECK(f8_layernorm_mlp_create(ctx, &c, &m) == F8_ERR_INVALID_ARGUMENT && m == NULL, "recompute_activation 2");
    f8_layernorm_linear_config lc = f8_layernorm_linear_config_default(64, 128);
    lc.weight_transpose_per_call = -1;
    CHECK(f8_layernorm_linear_create(ctx, &lc, &m) == F8_ERR_INVALID_ARGUMENT && m == NULL,
          "weight_transpose_per_call -1");
    f8_linear_config pc = f8_linear_config_default(64, 128);
    pc.recompute_input_cast = 3;
    CHECK(f8_linear_create(ctx, &pc, &m) == F8_ERR_INVALID_ARGUMENT && m == NULL, "recompute_input_cast 3");
    f8_ctx_destroy(ctx);
    for (int k = 0; k < SAVINGS; k++) {
        train_options o = gpt_options();
        o.recipe = "block", o.channels = 128;
        set_saving(&o, (saving)k, 1);
        trainer *t = NULL;
        char err[512] = "";
        CHECK(trainer_create(&o, &t, err, sizeof err) == F8_ERR_INVALID_ARGUMENT && t == NULL &&
                  strstr(err, SAVING_NAME[k]),
              "%s on with --recipe block: %s", SAVING_NAME[k], err);
    }
    printf("  refused under block and row-wise scaling, and flags other than 0 or 1\n");
}

int main(void)
{
    (void)fd_check_trainer; /* trainer_fd.h's, for its models_bitwise_equal */
    for (int k = 0; k < SAVINGS; k++) {
        test_families_and_recipes((saving)k);
        test_compositions((saving)k);
        test_checkpoint((saving)k);
    }
    test_refusals();
    return test_finish("test_memory_savings");
}
