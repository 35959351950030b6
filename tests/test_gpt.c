/*
 * test_gpt.c — the GPT trainer on the CPU: the model's backward against
 * central finite differences of its own loss (FP32, FP8 off), determinism
 * (two runs give bitwise the same losses), exact resume (interrupted + resumed
 * = uninterrupted, bitwise, losses, parameters and scaling state, FP8
 * attention's slots included), FP8 and FP32 runs both learning, the graphed
 * step equal to the eager one (FP8 attention too), the reported peak memory,
 * and bad options.
 */
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"
#include "trainer_fd.h"

static train_options tiny_options(int fp8)
{
    train_options o = quiet_run_options("cpu", 6);
    o.fp8 = fp8;
    o.layers = 2;
    o.heads = 2;
    o.channels = 32;
    o.seq = 16;
    o.batch = 4;
    o.grad_accum = 2;
    o.warmup = 2;
    return o;
}

/* head_chunk 0: the LM head in one pass; 24 of the 64 tokens: three passes
 * (24, 24, 16), the head's backward run by the forward pass by pass. */
static void test_gradients(int64_t head_chunk)
{
    train_options o = tiny_options(0);
    o.grad_accum = 1;
    o.head_chunk = head_chunk;
    trainer *t = make(&o);
    gpt *m = trainer_model(t);
    /* one batch into the model, forward + backward with grad_scale 1/T: the
     * gradients are those of the mean loss */
    fd_ctx f;
    int head_done;
    fd_check_trainer(t, &f, &head_done);
    CHECK(head_done == (head_chunk > 0), "head_chunk %lld: the head's backward ran %s the forward",
          (long long)head_chunk, head_done ? "in" : "after");
    CHECK(f.bad == 0, "%d of %d gradient elements differ from finite differences", f.bad, f.checked);
    printf("  gradients vs finite differences (head in passes of %lld): %d elements of %d parameters, worst relative "
           "error %.3g\n", (long long)(head_chunk ? head_chunk : m->T), f.checked, f.index, f.worst);
    trainer_destroy(t);
}

static void run_losses(const train_options *o, int steps, double *losses)
{
    trainer_destroy(run_steps(o, steps, losses, NULL));
}

/* The LM head in passes (--head-chunk): the same losses as one pass within
 * FP32 rounding (the head's weight gradient sums the passes), bitwise
 * repeatable, the CPU graph equal to eager, and a smaller peak. */
static void test_head_chunk(void)
{
    for (int fp8 = 0; fp8 <= 1; fp8++) {
        train_options o = tiny_options(fp8);
        double one[4], parts[4], again[4], graph[4];
        trainer *t = make(&o);
        for (int s = 0; s < 4; s++) CHECK_OK(NULL, trainer_step(t, &one[s]));
        const size_t peak_one = trainer_peak_memory(t);
        trainer_destroy(t);
        o.head_chunk = 24; /* 64 tokens: passes of 24, 24, 16 */
        t = make(&o);
        for (int s = 0; s < 4; s++) CHECK_OK(NULL, trainer_step(t, &parts[s]));
        const size_t peak_parts = trainer_peak_memory(t);
        trainer_destroy(t);
        run_losses(&o, 4, again);
        o.graph = 1;
        run_losses(&o, 4, graph);
        double worst = 0;
        for (int s = 0; s < 4; s++) worst = fmax(worst, fabs(parts[s] - one[s]) / fabs(one[s]));
        /* FP32 sums in another order; FP8 also rounds the codes of slightly other values */
        CHECK(worst <= (fp8 ? 1e-3 : 1e-5), "fp8 %d: losses in passes differ from one pass by %.3g", fp8, worst);
        CHECK(memcmp(parts, again, sizeof parts) == 0, "fp8 %d: two chunked runs differ", fp8);
        CHECK(memcmp(parts, graph, sizeof parts) == 0, "fp8 %d: the graphed chunked step differs from eager", fp8);
        /* logits and the head's saved state: 64 rows become 24 */
        const size_t saved = (size_t)(64 - 24) * 256 * 4; /* FP32 on the CPU */
        CHECK(peak_parts + saved <= peak_one, "fp8 %d: peak %zu in passes, %zu in one (expected %zu less at least)", fp8,
              peak_parts, peak_one, saved);
        printf("  head in passes of 24 (fp8 %d): losses within %.2g of one pass, peak %zu -> %zu bytes\n", fp8, worst,
               peak_one, peak_parts);
    }
}

static void test_determinism_and_graph(void)
{
    /* FP8 off, on, on with FP8 attention; delayed and current scaling over two microbatches (the graph's
     * warm-up runs the first microbatch alone: its amaxes must not change the step's); FP8 attention
     * under current scaling, and with its FP8 backward */
    for (int v = 0; v < 7; v++) {
        train_options o = tiny_options(v > 0);
        if (v == 2 || v >= 5) o.fp8_attention = 1, o.dtype = "bf16";
        if (v >= 3) o.grad_accum = 2, o.batch = 1;
        if (v == 4 || v == 5) o.recipe = "current";
        o.fp8_attention_backward = v == 6;
        double a[4], b[4], g[4];
        run_losses(&o, 4, a);
        run_losses(&o, 4, b);
        CHECK(memcmp(a, b, sizeof a) == 0, "variant %d: two runs with one seed differ", v);
        /* the CPU's recorded replay of the whole step, after its eager warm-up */
        o.graph = 1;
        run_losses(&o, 4, g);
        CHECK(memcmp(a, g, sizeof a) == 0, "variant %d: the graphed step differs from the eager one (%.9g vs %.9g)", v,
              g[3], a[3]);
    }
}

/* --recompute-norm on: bitwise the losses of off (eager and graphed), FP8
 * under delayed and current scaling and FP8 off, and a lower peak with FP8
 * (the norm outputs leave the saved state). */
static void test_recompute_norm(void)
{
    static const char *const recipes[2] = {"delayed", "current"};
    for (int v = 0; v < 3; v++) {
        train_options o = tiny_options(v < 2);
        o.recipe = v < 2 ? recipes[v] : NULL;
        double off[4], on[4], graph[4];
        trainer *t = make(&o);
        for (int s = 0; s < 4; s++) CHECK_OK(NULL, trainer_step(t, &off[s]));
        const size_t peak_off = trainer_peak_memory(t);
        trainer_destroy(t);
        o.recompute_norm = 1;
        t = make(&o);
        for (int s = 0; s < 4; s++) CHECK_OK(NULL, trainer_step(t, &on[s]));
        const size_t peak_on = trainer_peak_memory(t);
        trainer_destroy(t);
        o.graph = 1;
        run_losses(&o, 4, graph);
        CHECK(memcmp(off, on, sizeof off) == 0, "variant %d: --recompute-norm on changes the losses (%.9g vs %.9g)", v,
              on[3], off[3]);
        CHECK(memcmp(off, graph, sizeof off) == 0, "variant %d: graphed --recompute-norm on differs (%.9g vs %.9g)",
              v, graph[3], off[3]);
        CHECK(v == 2 || peak_on < peak_off, "variant %d: peak %zu with --recompute-norm, %zu without", v, peak_on,
              peak_off);
        printf("  --recompute-norm on (%s): losses bitwise those of off, peak %zu -> %zu bytes\n",
               v < 2 ? recipes[v] : "fp8 off", peak_off, peak_on);
    }
}

static void test_resume(void)
{
    /* FP8 off; delayed; current scaling; current scaling with telemetry; block scaling; delayed with the
     * LM head in FP8; delayed with FP8 attention (BF16; its slots in the checkpoint); AdamW's moments in
     * BF16; in FP8; row-wise scaling; row-wise with the weight gradient in high precision; FP8 attention
     * under current scaling; FP8 attention with its FP8 backward (its backward slots in the checkpoint) */
    for (int v = 0; v < 13; v++) {
        const int fp8 = v > 0;
        char path[128];
        snprintf(path, sizeof path, "/tmp/f8_test_gpt_%d_%d.safetensors", v, (int)getpid());
        train_options o = tiny_options(fp8);
        if (v >= 2 && v <= 4) o.recipe = v == 4 ? "block" : "current";
        if (v == 9) o.recipe = "rowwise";
        if (v == 10) o.recipe = "rowwise_with_gw_hp";
        if (v == 11) o.recipe = "current";
        const int att = v == 6 || v >= 11; /* FP8 attention */
        o.fp8_report = v == 3;
        o.fp8_head = v == 5;
        o.fp8_attention = att;
        o.fp8_attention_backward = v == 12;
        if (att) o.dtype = "bf16";
        o.adam_moments = v == 7 ? "bf16" : v == 8 ? "fp8" : NULL;
        double full[4], part[4];
        trainer *u = make(&o);
        for (int s = 0; s < 4; s++) CHECK_OK(NULL, trainer_step(u, &full[s]));
        trainer *t = make(&o);
        for (int s = 0; s < 2; s++) CHECK_OK(NULL, trainer_step(t, &part[s]));
        CHECK_OK(NULL, trainer_save(t, path));
        trainer_destroy(t);
        o.resume = path;
        trainer *r = make(&o);
        CHECK(trainer_steps_done(r) == 2, "resumed at step %lld", (long long)trainer_steps_done(r));
        const int head_fp8 = f8_module_weight_workspace(trainer_model(r)->head, F8_PARAM_WEIGHT) != NULL;
        CHECK(head_fp8 == (v == 5), "variant %d: the resumed LM head is %sFP8", v, head_fp8 ? "" : "not ");
        CHECK(trainer_model(r)->c.fp8_attention == att, "variant %d: the resumed run's FP8 attention", v);
        CHECK(trainer_model(r)->c.fp8_attention_backward == (v == 12), "variant %d: the resumed run's FP8 attention "
              "backward", v);
        for (int s = 2; s < 4; s++) CHECK_OK(NULL, trainer_step(r, &part[s]));
        CHECK(memcmp(full, part, sizeof full) == 0, "variant %d: resumed losses differ (%.9g vs %.9g)", v, part[3],
              full[3]);
        /* and the parameters */
        CHECK(models_bitwise_equal(trainer_model(u), trainer_model(r)), "variant %d: resumed parameters differ", v);
        trainer_destroy(u);
        trainer_destroy(r);
        if (fp8) { /* the other --fp8-head than the checkpoint's, asked for on the command line: refused */
            char err[256] = "";
            trainer *x = NULL;
            o.fp8_head = v != 5;
            o.given |= train_option_bit("--fp8-head");
            CHECK(trainer_create(&o, &x, err, sizeof err) != F8_OK && x == NULL && strstr(err, "train.fp8_head"),
                  "variant %d: --fp8-head against the checkpoint: %s", v, err);
            o.fp8_head = v == 5; /* and the other --fp8-attention */
            o.fp8_attention = !att;
            o.fp8_attention_backward = 0;
            o.given |= train_option_bit("--fp8-attention");
            CHECK(trainer_create(&o, &x, err, sizeof err) != F8_OK && x == NULL && strstr(err, "train.fp8_attention"),
                  "variant %d: --fp8-attention against the checkpoint: %s", v, err);
            o.fp8_attention = att;
            if (att) { /* and the other --fp8-attention-backward */
                o.fp8_attention_backward = v != 12;
                o.given |= train_option_bit("--fp8-attention-backward");
                CHECK(trainer_create(&o, &x, err, sizeof err) != F8_OK && x == NULL &&
                          strstr(err, "train.fp8_attention_backward"),
                      "variant %d: --fp8-attention-backward against the checkpoint: %s", v, err);
                o.given &= ~train_option_bit("--fp8-attention-backward");
            }
            o.fp8_attention_backward = v == 12; /* and other AdamW moments than the checkpoint's */
            o.adam_moments = v == 7 ? "fp8" : "bf16";
            CHECK(trainer_create(&o, &x, err, sizeof err) != F8_OK && x == NULL && strstr(err, "optimizer.moments"),
                  "variant %d: --adam-moments against the checkpoint: %s", v, err);
        }
        remove(path);
    }
}

static void test_learns(void)
{
    for (int v = 0; v <= 3; v++) { /* FP32, FP8 delayed, FP8 block scaling, FP8 row-wise */
        const int fp8 = v > 0;
        const char *name = v == 3 ? "FP8 rowwise" : v == 2 ? "FP8 block" : fp8 ? "FP8" : "FP32";
        train_options o = tiny_options(fp8);
        if (v == 2) o.recipe = "block";
        if (v == 3) o.recipe = "rowwise";
        o.steps = 30;
        o.warmup = 3;
        trainer *t = make(&o);
        double first = 0, last = 0, l;
        for (int s = 0; s < 30; s++) {
            CHECK_OK(NULL, trainer_step(t, &l));
            if (s < 3) first += l / 3;
            if (s >= 27) last += l / 3;
        }
        double val;
        CHECK_OK(NULL, trainer_eval(t, &val));
        printf("  %s: mean loss %.3f over the first 3 steps, %.3f over the last 3, val %.3f\n", name, first, last, val);
        CHECK(last < first - 0.5, "%s did not learn: %.3f -> %.3f", name, first, last);
        char text[33];
        CHECK_OK(NULL, trainer_sample(t, "The ", 32, 0.8f, 1, text));
        CHECK(strlen(text) == 32, "sampled %zu bytes", strlen(text));
        trainer_destroy(t);
    }
}

/* The peak memory f8_train reports: at least the parameters, their gradients
 * and the two FP32 AdamW moments, and the same on every step after the first
 * (a step allocates nothing). */
static void test_peak_memory(void)
{
    for (int fp8 = 0; fp8 <= 1; fp8++) {
        train_options o = tiny_options(fp8);
        trainer *t = make(&o);
        const double n = (double)gpt_param_count(trainer_model(t));
        const double es = (double)f8_dtype_size(trainer_model(t)->c.dtype), floor_bytes = n * (2 * es + 8);
        double l;
        size_t peak[4];
        for (int s = 0; s < 4; s++) {
            CHECK_OK(NULL, trainer_step(t, &l));
            peak[s] = trainer_peak_memory(t);
        }
        f8_memory_report now;
        CHECK_OK(NULL, f8_ctx_memory(trainer_model(t)->ctx, &now));
        CHECK((double)peak[0] >= floor_bytes, "fp8 %d: peak %zu bytes < parameters + gradients + moments %.0f", fp8,
              peak[0], floor_bytes);
        CHECK(peak[0] >= now.total, "fp8 %d: peak %zu below the memory held now %zu", fp8, peak[0], now.total);
        CHECK(peak[1] == peak[0] && peak[2] == peak[0] && peak[3] == peak[0],
              "fp8 %d: the peak moved after step 1: %zu %zu %zu %zu", fp8, peak[0], peak[1], peak[2], peak[3]);
        trainer_destroy(t);
    }
    CHECK(trainer_peak_memory(NULL) == 0, "NULL trainer");
}

static void test_options(void)
{
    train_options o = train_options_default();
    char err[256];
    char *bad1[] = {"f8_train", "--steps", "-3"};
    CHECK(train_parse_args(3, bad1, &o, stdout, err, sizeof err) == -1 && strstr(err, "--steps"), "bad --steps: %s", err);
    char *bad2[] = {"f8_train", "--frobnicate", "1"};
    CHECK(train_parse_args(3, bad2, &o, stdout, err, sizeof err) == -1 && strstr(err, "unknown option"), "unknown: %s",
          err);
    char *bad4[] = {"f8_train", "--fp8", "off", "--fp8-head", "on"};
    o = train_options_default();
    CHECK(train_parse_args(5, bad4, &o, stdout, err, sizeof err) == -1 && strstr(err, "--fp8-head"),
          "--fp8-head on with --fp8 off: %s", err);
    char *bad3[] = {"f8_train", "--model", "7B"};
    CHECK(train_parse_args(3, bad3, &o, stdout, err, sizeof err) == -1, "unknown preset");
    char *ok[] = {"f8_train", "--model", "small", "--layers", "3", "--fp8", "off"};
    o = train_options_default();
    CHECK(train_parse_args(7, ok, &o, stdout, err, sizeof err) == 0 && o.layers == 3 && o.channels == 384 && !o.fp8,
          "preset then override");
    FILE *devnull = fopen("/dev/null", "w");
    char *help[] = {"f8_train", "--help"};
    CHECK(train_parse_args(2, help, &o, devnull, err, sizeof err) == 1, "--help");
    fclose(devnull);
    char *rn[] = {"f8_train", "--recompute-norm", "on"};
    o = train_options_default();
    CHECK(train_parse_args(3, rn, &o, stdout, err, sizeof err) == 0 && o.recompute_norm == 1, "--recompute-norm on");
    char *rn_block[] = {"f8_train", "--recompute-norm", "on", "--recipe", "block"};
    o = train_options_default();
    CHECK(train_parse_args(5, rn_block, &o, stdout, err, sizeof err) == -1 && strstr(err, "--recompute-norm"),
          "--recompute-norm on with --recipe block: %s", err);
    char *rn_sp[] = {"f8_train", "--recompute-norm", "on", "--tp", "2", "--ranks", "2", "--sequence-parallel"};
    o = train_options_default();
    CHECK(train_parse_args(8, rn_sp, &o, stdout, err, sizeof err) == -1 && strstr(err, "--recompute-norm"),
          "--recompute-norm on with --sequence-parallel: %s", err);
    char *rn_bad[] = {"f8_train", "--recompute-norm", "maybe"};
    o = train_options_default();
    CHECK(train_parse_args(3, rn_bad, &o, stdout, err, sizeof err) == -1, "--recompute-norm maybe");
    /* FP8 attention: block and row-wise scaling refused; its FP8 backward only with its FP8 forward */
    static const char *const no_att[2] = {"block", "rowwise"};
    for (int i = 0; i < 3; i++) {
        train_options a = tiny_options(1);
        trainer *x = NULL;
        a.dtype = "bf16";
        a.fp8_attention = i < 2;
        a.fp8_attention_backward = i == 2;
        if (i < 2) a.recipe = no_att[i];
        err[0] = 0;
        CHECK(trainer_create(&a, &x, err, sizeof err) != F8_OK && x == NULL &&
                  strstr(err, i < 2 ? "--recipe delayed or current" : "needs --fp8-attention on"),
              "case %d: FP8 attention refusal: %s", i, err);
        if (x) trainer_destroy(x);
    }
    train_options m = tiny_options(1);
    m.text = "/nonexistent/file.txt";
    trainer *t = NULL;
    CHECK(trainer_create(&m, &t, err, sizeof err) != F8_OK && t == NULL && strstr(err, "nonexistent"),
          "unreadable --text: %s", err);
}

int main(void)
{
    test_options();
    test_peak_memory();
    test_gradients(0);
    test_gradients(24);
    test_head_chunk();
    test_determinism_and_graph();
    test_recompute_norm();
    test_resume();
    test_learns();
    return test_finish("test_gpt");
}
