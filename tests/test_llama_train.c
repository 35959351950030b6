/*
 * test_llama_train.c — the trainer's Llama family (train/llama.h) on the CPU:
 *  - the model's backward against central finite differences of its own
 *    loss (FP32, FP8 off), tied and untied heads, RoPE with and without
 *    Llama 3's scaling: every parameter of the table (3 elements each);
 *  - the parameter table: its names in order, and the element count against
 *    the shapes (GQA's narrower k and v, SwiGLU's 2F-wide fc1, no biases);
 *  - it learns real text (../shared/data/tinyshakespeare.txt, read in place;
 *    the embedded corpus where that file is absent) in FP32 and in every FP8
 *    recipe (delayed, current, block, rowwise), and FP8 against BF16 on the same run
 *    lands close;
 *  - exact resume: interrupted + resumed = uninterrupted, bitwise losses and
 *    parameters (FP8 delayed and off; untied);
 *  - FP8 attention (BF16, GQA on the rotated q and k): learns within 5% of
 *    the BF16 run, its slots are saved measured, it resumes bitwise and the
 *    CPU graph is the eager run (FP8 primary weights: test_fp8w_train);
 *  - what it does not do is refused clearly (FP8 weights without FP8, FP8
 *    attention without BF16, a kv_heads that does not divide heads, a GPT's checkpoint
 *    resumed as a Llama), the exporters' model of a Llama checkpoint has its
 *    family's shape (test_hf_llama: the export itself), and llama-8B's
 *    memory estimate refuses one H100 or H200 (AdamW's FP32 moments alone are
 *    64 GB), while llama-1B and llama-3B fit an H200.
 */
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "llama.h"
#include "trainer_fixture.h"
#include "trainer_fd.h"

static const char *g_text; /* tinyshakespeare, or NULL: the embedded corpus */

static train_options llama_options(int fp8, int untied, double rope_factor)
{
    train_options o = quiet_run_options("cpu", 6);
    o.fp8 = fp8;
    o.llama = 1;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.channels = 32;
    o.ffn = 48;
    o.untied = untied;
    o.rope_theta = 10000.0;
    o.rope_factor = rope_factor;
    o.seq = 16;
    o.batch = 4;
    o.grad_accum = 2;
    o.warmup = 2;
    o.text = g_text;
    return o;
}

static void test_gradients(int untied, double rope_factor)
{
    train_options o = llama_options(0, untied, rope_factor);
    o.grad_accum = 1;
    trainer *t = make(&o);
    fd_ctx f;
    fd_check_trainer(t, &f, NULL);
    CHECK(f.bad == 0, "untied %d rope factor %g: %d of %d gradient elements differ from finite differences", untied,
          rope_factor, f.bad, f.checked);
    printf("  gradients vs finite differences (%s head, rope factor %g): %d elements of %d parameters, worst %.3g\n",
           untied ? "untied" : "tied", rope_factor, f.checked, f.index, f.worst);
    trainer_destroy(t);
}

static void test_table(void)
{
    train_options o = llama_options(1, 1, 0);
    trainer *t = make(&o);
    gpt *m = trainer_model(t);
    static const char *const want[] = {"model.head.weight", "model.head.layer_norm_weight", "model.wte",
                                       "model.h.0.qkv.layer_norm_weight", "model.h.0.qkv.weight", "model.h.0.proj.weight",
                                       "model.h.0.mlp.layer_norm_weight", "model.h.0.mlp.fc1_weight",
                                       "model.h.0.mlp.fc2_weight"};
    CHECK(m->params.n == 3 + 6 * 2, "the untied table has %d entries, expected 15", m->params.n);
    for (int i = 0; i < 9 && i < m->params.n; i++)
        CHECK(strcmp(m->params.v[i].name, want[i]) == 0, "entry %d is %s, expected %s", i, m->params.v[i].name, want[i]);
    const int64_t C = 32, W = (4 + 2 * 2) * 8, F = 48, Vp = m->c.padded_vocab;
    const int64_t expect = 2 * Vp * C + C + 2 * (C + C * W + C * C + C + 2 * F * C + C * F);
    CHECK(gpt_param_count(m) == expect, "parameters %lld, expected %lld", (long long)gpt_param_count(m), (long long)expect);
    CHECK(llama_param_estimate(&m->c) == (double)expect, "the memory estimate's parameters %.0f", llama_param_estimate(&m->c));
    const model_param *q = &m->params.v[4];
    CHECK(q->value.rows == W && q->value.cols == C, "qkv weight [%lld, %lld], expected [%lld, %lld]", (long long)q->value.rows,
          (long long)q->value.cols, (long long)W, (long long)C);
    trainer_destroy(t);
}

/* 30 steps: the mean of the last 3 losses, after checking it fell from the first 3. */
static double learn(train_options *o, const char *name)
{
    o->steps = 30;
    o->warmup = 3;
    trainer *t = make(o);
    double first = 0, last = 0, l;
    for (int s = 0; s < 30; s++) {
        CHECK_OK(NULL, trainer_step(t, &l));
        if (s < 3) first += l / 3;
        if (s >= 27) last += l / 3;
    }
    printf("  %s: mean loss %.3f over the first 3 steps, %.3f over the last 3\n", name, first, last);
    CHECK(last < first - 0.5, "%s did not learn: %.3f -> %.3f", name, first, last);
    char text[33];
    CHECK_OK(NULL, trainer_sample(t, "The ", 32, 0.8f, 1, text));
    CHECK(strlen(text) == 32, "%s sampled %zu bytes", name, strlen(text));
    trainer_destroy(t);
    return last;
}

static void test_learns(void)
{
    static const char *const recipes[] = {"delayed", "current", "block", "rowwise", "rowwise_with_gw_hp"};
    train_options o = llama_options(0, 0, 0);
    learn(&o, "FP32");
    for (int r = 0; r < 5; r++) {
        o = llama_options(1, 0, 0);
        o.recipe = recipes[r];
        char name[64];
        snprintf(name, sizeof name, "FP8 %s", recipes[r]);
        learn(&o, name);
    }
    /* FP8 against BF16, the same run in BF16 parameters and activations */
    o = llama_options(0, 1, 8.0);
    o.dtype = "bf16";
    const double bf16 = learn(&o, "BF16 (untied, llama3 rope)");
    o.fp8 = 1;
    const double fp8 = learn(&o, "FP8 delayed, BF16 (untied, llama3 rope)");
    CHECK(fabs(fp8 - bf16) <= 0.05 * bf16, "FP8 %.4f vs BF16 %.4f: more than 5%% apart", fp8, bf16);
    /* and with FP8 attention (the rotated q and k, GQA's 2 key/value heads, cast into FP8) */
    o.fp8_attention = 1;
    const double att = learn(&o, "FP8 delayed + FP8 attention, BF16 (untied, llama3 rope)");
    CHECK(fabs(att - bf16) <= 0.05 * bf16, "FP8 attention %.4f vs BF16 %.4f: more than 5%% apart", att, bf16);
}

static void test_resume(void)
{
    for (int v = 0; v < 3; v++) { /* FP8 delayed, untied; FP8 off, tied; FP8 attention (BF16), tied */
        char path[128];
        snprintf(path, sizeof path, "/tmp/f8_test_llama_%d_%d.safetensors", v, (int)getpid());
        train_options o = llama_options(v != 1, v == 0, v == 0 ? 8.0 : 0);
        if (v == 2) o.fp8_attention = 1, o.dtype = "bf16";
        double full[4], part[4];
        trainer *u = make(&o);
        for (int s = 0; s < 4; s++) CHECK_OK(NULL, trainer_step(u, &full[s]));
        trainer *t = make(&o);
        for (int s = 0; s < 2; s++) CHECK_OK(NULL, trainer_step(t, &part[s]));
        CHECK_OK(NULL, trainer_save(t, path));
        trainer_destroy(t);
        if (v == 2) { /* every layer's FP8 attention slots are saved, and measured (amaxes > 0) */
            f8_ctx *cc = NULL;
            f8_ctx_config cfg = f8_ctx_config_default();
            f8_checkpoint *ck = NULL;
            CHECK_OK(NULL, f8_ctx_create(&cfg, &cc, NULL, 0));
            CHECK_OK(cc, f8_checkpoint_load(cc, path, &ck));
            for (int l = 0; ck && l < 2; l++) {
                char name[64];
                snprintf(name, sizeof name, "model.h.%d.attn.fp8.fwd.amax_history", l);
                const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
                float most = 0;
                for (size_t i = 0; e && i < e->bytes / 4; i++) most = fmaxf(most, ((const float *)e->data)[i]);
                CHECK(e && most > 0, "FP8 attention: %s %s", name, e ? "holds no measured amax" : "is missing");
            }
            f8_checkpoint_destroy(ck);
            f8_ctx_destroy(cc);
        }
        o.resume = path;
        if (v == 1) /* the family and its shape come from the checkpoint: a plain --resume */
            o.llama = 0, o.kv_heads = o.ffn = 0, o.rope_theta = 0;
        trainer *r = make(&o);
        CHECK(trainer_steps_done(r) == 2 && trainer_model(r)->c.llama, "variant %d: resumed a Llama at step %lld", v,
              (long long)trainer_steps_done(r));
        for (int s = 2; s < 4; s++) CHECK_OK(NULL, trainer_step(r, &part[s]));
        CHECK(memcmp(full, part, sizeof full) == 0, "variant %d: resumed losses differ (%.9g vs %.9g)", v, part[3], full[3]);
        CHECK(models_bitwise_equal(trainer_model(u), trainer_model(r)), "variant %d: resumed parameters differ", v);
        CHECK(trainer_model(r)->c.fp8_attention == (v == 2), "variant %d: the resumed run's FP8 attention", v);
        if (v == 2) { /* the CPU's recorded replay of the step is the eager one */
            train_options g = o;
            g.resume = NULL, g.graph = 1;
            trainer *gt = make(&g);
            double gl[4];
            for (int s = 0; s < 4; s++) CHECK_OK(NULL, trainer_step(gt, &gl[s]));
            CHECK(memcmp(gl, full, sizeof full) == 0, "FP8 attention: the graphed steps differ from the eager ones");
            trainer_destroy(gt);
        }
        trainer_destroy(u);
        trainer_destroy(r);
        unlink(path);
    }
}

static void refused(train_options *o, const char *want)
{
    trainer *t = NULL;
    char err[512] = "";
    CHECK(trainer_create(o, &t, err, sizeof err) != F8_OK && t == NULL && strstr(err, want), "expected a refusal with '%s': %s",
          want, err);
}

static void test_refusals(void)
{
    /* FP8 primary weights and FP8 attention are refused as the GPT's are: without FP8, without BF16 */
    train_options o = llama_options(0, 0, 0);
    o.fp8_weights = 1;
    refused(&o, "needs --fp8 on");
    o = llama_options(1, 0, 0);
    o.fp8_attention = 1;
    refused(&o, "needs bf16 activations");
    o = llama_options(1, 0, 0);
    o.kv_heads = 3;
    refused(&o, "kv_heads");
    o = llama_options(1, 0, 0); /* a GPT given a Llama's shape options */
    o.llama = 0;
    refused(&o, "--kv-heads and --ffn shape a Llama");
    /* the command line: --kv-heads and --ffn reach the options */
    char *argv[] = {"f8_train", "--model", "llama-tiny", "--kv-heads", "1", "--ffn", "96"};
    char perr[256] = "";
    train_options po = train_options_default();
    CHECK(train_parse_args(7, argv, &po, NULL, perr, sizeof perr) == 0 && po.llama && po.kv_heads == 1 && po.ffn == 96,
          "--model llama-tiny --kv-heads 1 --ffn 96: %s", perr);
    /* a GPT's checkpoint resumed as a Llama */
    char path[128];
    snprintf(path, sizeof path, "/tmp/f8_test_llama_gpt_%d.safetensors", (int)getpid());
    train_options g = quiet_run_options("cpu", 6);
    g.layers = 2, g.heads = 4, g.channels = 32, g.seq = 16, g.batch = 4, g.text = g_text;
    trainer *gt = make(&g);
    double l;
    CHECK_OK(NULL, trainer_step(gt, &l));
    CHECK_OK(NULL, trainer_save(gt, path));
    trainer_destroy(gt);
    o = llama_options(1, 0, 0);
    o.resume = path;
    refused(&o, "holds a GPT");
    /* a Llama's checkpoint as the exporters see it: the family's shape from train.* */
    o = llama_options(1, 0, 0);
    trainer *lt = make(&o);
    CHECK_OK(NULL, trainer_step(lt, &l));
    CHECK_OK(NULL, trainer_save(lt, path));
    f8_checkpoint *ck = NULL;
    CHECK_OK(lt->ctx, f8_checkpoint_load(lt->ctx, path, &ck));
    gpt_config ec;
    char eerr[256] = "";
    CHECK(ck && hf_checkpoint_model(ck, 0, &ec, eerr, sizeof eerr) == 0 && ec.llama && ec.kv_heads == 2 && ec.ffn == 48 &&
              !ec.untied && ec.rope_theta == 10000.0,
          "the exporters' model of a Llama checkpoint: %s", eerr);
    f8_checkpoint_destroy(ck);
    trainer_destroy(lt);
    unlink(path);
    /* the presets' memory on one GPU: 8B refused with its estimate, 1B and 3B fit an H200 */
    gpt_config c;
    memset(&c, 0, sizeof c);
    c.llama = 1, c.vocab = 128256, c.padded_vocab = 128256, c.dtype = F8_DTYPE_BF16, c.fp8 = 1;
    c.layers = 32, c.heads = 32, c.kv_heads = 8, c.channels = 4096, c.ffn = 14336, c.untied = 1, c.seq = 2048, c.batch = 2;
    char err[512] = "";
    CHECK(llama_param_estimate(&c) > 8.0e9 && llama_param_estimate(&c) < 8.1e9, "8B: %.4g parameters", llama_param_estimate(&c));
    CHECK(llama_check_memory(&c, "NVIDIA H100 80GB HBM3", 0, err, sizeof err) != 0 && strstr(err, "several GPUs"),
          "8B on an H100: %s", err);
    CHECK(llama_check_memory(&c, "NVIDIA H200", 0, err, sizeof err) != 0, "8B on an H200 refused");
    printf("  %s\n", err);
    c.layers = 16, c.heads = 32, c.channels = 2048, c.ffn = 8192, c.untied = 0, c.batch = 8;
    CHECK(llama_param_estimate(&c) > 1.2e9 && llama_param_estimate(&c) < 1.25e9, "1B: %.4g parameters", llama_param_estimate(&c));
    CHECK(llama_check_memory(&c, "NVIDIA H200", 0, err, sizeof err) == 0, "1B fits an H200: %s", err);
    c.layers = 28, c.heads = 24, c.channels = 3072, c.ffn = 8192, c.batch = 4;
    CHECK(llama_param_estimate(&c) > 3.1e9 && llama_param_estimate(&c) < 3.3e9, "3B: %.4g parameters", llama_param_estimate(&c));
    CHECK(llama_check_memory(&c, "NVIDIA H200", 0, err, sizeof err) == 0, "3B fits an H200: %s", err);
}

int main(void)
{
    static const char *const paths[] = {"../shared/data/tinyshakespeare.txt", "../../../shared/data/tinyshakespeare.txt"};
    for (size_t i = 0; i < 2 && !g_text; i++)
        if (access(paths[i], R_OK) == 0) g_text = paths[i];
    printf("  data: %s\n", g_text ? g_text : "the embedded corpus (tinyshakespeare not found)");
    test_table();
    test_gradients(0, 0);
    test_gradients(1, 8.0);
    test_learns();
    test_resume();
    test_refusals();
    return test_finish("test_llama_train");
}
