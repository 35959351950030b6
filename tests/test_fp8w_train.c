/*
 * test_fp8w_train.c — f8_train --fp8-weights (train/fp8w.c, train/dp.c):
 * the blocks' weights FP8 primary, FP32 masters in the optimizer.
 *  - one rank learns (the loss falls, and ends within LEARN_TOL of the same
 *    run with high-precision weights: FP8 codes of FP32 masters train like
 *    the masters themselves); the codes are the masters quantized (within
 *    E4M3 rounding of their own scale_inv);
 *  - one rank resumes bitwise (losses, parameters, codes, scales, masters),
 *    and the CPU graph is bitwise the eager run;
 *  - 2 and 4 CPU ranks (ZeRO-1, sharded masters) against one rank: step 1's
 *    loss bitwise (same init, same scales); later losses, parameters and
 *    masters within LOSS_TOL / PARAM_TOL (the gradients are summed in
 *    another order, as test_dp explains, so the masters differ by rounding
 *    from step 1's update on); an FP8 code may then round the other way
 *    where its master sits within that rounding of a boundary: at most
 *    CODE_FLIPS of them, each one E4M3 step. Every rank holds bitwise the
 *    same codes, scale_invs, amaxes and scales (the amaxes of the shards are
 *    MAX-reduced before the weight-scale update);
 *  - the FP8 all-gather moves 1 byte per element: dp_step hands its
 *    gathers exactly the FP8 buckets' elements in bytes, and with BF16
 *    parameters the high-precision gather shrinks by 2 bytes per weight;
 *  - checkpoints of 2 ranks resume into 2 (bitwise), 1 and 4 (tolerance);
 *    --dp-overlap and the graph with ranks;
 *  - refusals: --recipe block, --fp8 off, --tp, a conflicting --resume;
 *  - the masters' init is the modules' own draw, bit for bit (GPT and
 *    Llama), and a Llama (llama.h) with FP8 primary weights learns as its
 *    high-precision run, resumes and graphs bitwise, and on 2 ranks matches
 *    one as the GPT does.
 * The ranks' runner is rank_fixture.h's (test_dp's); keep_rank adds the FP8
 * codes, the masters and the gathers' byte counts to what a rank keeps.
 */
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"

#define STEPS 4
#define MAXR 4
#define LOSS_TOL 1e-5
#define PARAM_TOL 1e-5
#define LEARN_TOL 0.02
#define CODE_FLIPS 8

#include "rank_fixture.h"

static train_options base_options(void)
{
    train_options o = cpu_rank_options(STEPS);
    o.layers = 2;
    o.heads = 2;
    o.channels = 32;
    o.fp8_weights = 1;
    return o;
}

static f8_status grab_codes(rank_out *r, gpt *m)
{
    for (int k = 0; k < gpt_fp8_weight_count(m); k++) {
        f8_module *mod;
        f8_param which;
        f8_tensor v;
        gpt_fp8_weight(m, k, &mod, &which);
        TRY(f8_module_param(mod, which, 0, &v));
        const int64_t n = v.rows * v.cols;
        r->codes = (uint8_t *)realloc(r->codes, (size_t)(r->n_codes + n + 4));
        TRY(f8_ctx_download(m->ctx, r->codes + r->n_codes, v.data, (size_t)n));
        TRY(f8_ctx_download(m->ctx, r->codes + r->n_codes + n, v.scale_inv, 4));
        r->n_codes += n + 4;
    }
    return F8_OK;
}

/* The whole masters, in the one-rank layout (a collective with ranks). */
static f8_status grab_masters(rank_out *r, trainer *t)
{
    f8_checkpoint *ck = NULL;
    TRY(f8_checkpoint_create(t->ctx, &ck));
    f8_status st = t->dp ? dp_checkpoint_add(t->dp, ck, "optimizer") : fp8w_checkpoint_add(t->fw, ck, "optimizer");
    char name[64];
    for (int k = 0; st == F8_OK && k < gpt_fp8_weight_count(&t->m); k++) {
        snprintf(name, sizeof name, "optimizer.master.%d", k);
        const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
        if (!e) st = F8_ERR_STATE;
        if (st != F8_OK) break;
        r->masters = (float *)realloc(r->masters, (size_t)r->n_masters * 4 + e->bytes);
        memcpy(r->masters + r->n_masters, e->data, e->bytes);
        r->n_masters += (int64_t)(e->bytes / 4);
    }
    f8_checkpoint_destroy(ck);
    return st;
}

/* rank_capture: the parameters (FP8 weights dequantized), scales and
 * amaxes, the FP8 codes, the masters, and with ranks the gathers' bytes. */
static f8_status keep_rank(rank_out *r, trainer *t)
{
    TRY(grab_params(r, &t->m));
    TRY(grab_scales(r, t->ctx));
    TRY(grab_codes(r, &t->m));
    if (t->m.c.fp8_weights) TRY(grab_masters(r, t));
    if (t->dp) dp_gathered_bytes(t->dp, &r->hp_bytes, &r->fp8_bytes), r->n8 = dp_fp8_code_bytes(t->dp);
    return F8_OK;
}

/* P ranks (0: one rank without a communicator) into out[P or 1]. */
static void run(int P, const train_options *base, int steps, const char *save, rank_out *out)
{
    const rank_run run = {.R = P, .P = 1, .steps = steps, .save = save, .capture = keep_rank, .bad_rank = -1,
                          .expect_ok = 1};
    run_ranks(&run, base, out);
}

/* Every rank bitwise its rank 0: codes with their scale_invs, amaxes and scales, parameters, losses, masters. */
static void check_ranks_agree(const char *what, rank_out *out, int P)
{
    for (int r = 1; r < P; r++)
        CHECK(same(&out[r], &out[0], out[0].steps), "%s: rank %d differs from rank 0 (codes, scales, parameters, "
                                                     "losses or masters)", what, r);
}

/* Codes a and b (one FP8 weight's, then its scale_inv) at most one E4M3
 * step apart; returns how many differ. */
static int64_t code_flips(const uint8_t *a, const uint8_t *b, int64_t n, int *far)
{
    int64_t flips = 0;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        flips++;
        const int ma = a[i] & 0x7F, mb = b[i] & 0x7F;
        if ((a[i] ^ b[i]) & 0x80 ? ma + mb > 1 : abs(ma - mb) > 1) *far = 1; /* across zero only at the smallest codes */
    }
    return flips;
}

/* A run against the reference: losses, parameters, masters, codes. */
static void check_fp8w_close(const char *what, const rank_out *a, const rank_out *ref, int steps, int ref_from)
{
    check_losses_close(what, a, ref, steps, ref_from);
    CHECK(a->n_params == ref->n_params && a->n_masters == ref->n_masters && a->n_codes == ref->n_codes,
          "%s: sizes differ", what);
    if (a->n_params != ref->n_params || a->n_masters != ref->n_masters || a->n_codes != ref->n_codes) return;
    const double ep = max_rel(a->params, ref->params, a->n_params), em = max_rel(a->masters, ref->masters, a->n_masters);
    int far = 0;
    const int64_t flips = code_flips(a->codes, ref->codes, a->n_codes, &far);
    CHECK(em <= PARAM_TOL, "%s: masters differ by %.3g of the largest (> %g)", what, em, PARAM_TOL);
    CHECK(flips <= CODE_FLIPS && !far, "%s: %lld codes or scale_inv bytes differ (> %d), %s", what, (long long)flips,
          CODE_FLIPS, far ? "some by more than one step" : "each by one step");
    /* a flipped code moves its parameter by one E4M3 step: the parameters are held to that only where one flipped */
    CHECK(flips ? ep <= 0.07 : ep <= PARAM_TOL, "%s: parameters differ by %.3g of the largest", what, ep);
    printf("  %-36s masters %.2e, parameters %.2e, %lld code bytes differ\n", what, em, ep, (long long)flips);
}

/* The codes are the masters quantized: |code · scale_inv - master| within
 * half an E4M3 step (2^-4 relative; below the normals, 2^-10 · scale_inv). */
static void check_codes_are_masters(const char *what, const rank_out *r)
{
    int64_t bad = 0, c = 0, mo = 0;
    /* qkv, proj, fc1, fc2: the GPT's 3C, C, 4C, C rows of C (fc2: C of 4C); a Llama's (H + 2G)·hd, C, 2F, C (of F) */
    const int64_t C = r->o.channels, H = r->o.heads, G = r->o.kv_heads > 0 ? r->o.kv_heads : H, F = r->o.ffn;
    int64_t sizes[4] = {3 * C * C, C * C, 4 * C * C, 4 * C * C};
    if (r->o.llama) sizes[0] = (H + 2 * G) * (C / H) * C, sizes[2] = 2 * F * C, sizes[3] = F * C;
    while (c < r->n_codes && mo < r->n_masters) {
        for (int j = 0; j < 4 && c < r->n_codes; j++) {
            const int64_t n = sizes[j];
            float sinv;
            memcpy(&sinv, r->codes + c + n, 4);
            for (int64_t i = 0; i < n; i++) {
                const double v = (double)f8_fp8_to_float(r->codes[c + i], F8_DTYPE_E4M3) * sinv, m = r->masters[mo + i];
                if (fabs(v - m) > fmax(fabs(m) / 16, ldexp(sinv, -10)) * (1 + 1e-6)) bad++;
            }
            c += n + 4, mo += n;
        }
    }
    CHECK(bad == 0 && c == r->n_codes && mo == r->n_masters, "%s: %lld codes are not their masters quantized", what,
          (long long)bad);
}

static double mean(const double *x, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) m += x[i];
    return m / n;
}

/* f8_train's command line (words separated by spaces) through train_parse_args: its return, err. */
static int parse(const char *line, char *err, size_t n)
{
    char buf[256], *argv[32] = {"f8_train"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *w = strtok(buf, " "); w && argc < 31; w = strtok(NULL, " ")) argv[argc++] = w;
    train_options o = train_options_default();
    err[0] = 0;
    return train_parse_args(argc, argv, &o, stdout, err, n);
}

static void check_refusals(const train_options *base, const char *fp8w_ck, const char *hp_ck)
{
    static const struct {
        const char *line, *says;
    } bad[5] = {{"--fp8-weights on --recipe block", "--recipe block"},
                {"--fp8-weights on --recipe rowwise", "--recipe rowwise"},
                {"--fp8 off --fp8-weights on", "needs --fp8 on"},
                {"--ranks 2 --tp 2 --fp8-weights on", "--tp"},
                {"--ranks 2 --recipe current --fp8-weights on", "--recipe delayed"}};
    char err[512];
    for (int i = 0; i < 5; i++)
        CHECK(parse(bad[i].line, err, sizeof err) == -1 && strstr(err, bad[i].says), "f8_train %s: '%s'", bad[i].line, err);
    CHECK(parse("--fp8-weights on --recipe current", err, sizeof err) == 0, "one rank, current scaling: '%s'", err);
    trainer *t = NULL;
    train_options o = *base;
    o.recipe = "block"; /* options filled in code reach trainer_create's own check */
    CHECK(trainer_create(&o, &t, err, sizeof err) != F8_OK && !t && strstr(err, "--recipe block"), "block: '%s'", err);
    o.recipe = "rowwise";
    CHECK(trainer_create(&o, &t, err, sizeof err) != F8_OK && !t && strstr(err, "--recipe rowwise"), "rowwise: '%s'", err);
    o = *base;
    o.resume = fp8w_ck;
    o.fp8_weights = 0;
    o.given = train_option_bit("--fp8-weights");
    CHECK(trainer_create(&o, &t, err, sizeof err) != F8_OK && !t && strstr(err, "train.fp8_weights"),
          "--fp8-weights off on an FP8-weight checkpoint: '%s'", err);
    o.resume = hp_ck;
    o.fp8_weights = 1;
    CHECK(trainer_create(&o, &t, err, sizeof err) != F8_OK && !t && strstr(err, "train.fp8_weights"),
          "--fp8-weights on on a checkpoint without: '%s'", err);
    o.given = 0; /* left out: the checkpoint's (off) */
    o.steps = 40; /* the run it continues trained 30 */
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK && !trainer_model(t)->c.fp8_weights, "hp resume: '%s'", err);
    trainer_destroy(t);
}

/* The FP8 gather's traffic: 1 byte per element of the FP8 buckets, and the
 * high-precision gather without the weights (BF16: 2 bytes each less). */
static void check_bytes(const train_options *base)
{
    const int64_t C = base->channels, W = 12 * C * C * base->layers, pad = 64 * (4 * base->layers + 2);
    static rank_out with[2], without[2];
    train_options b = *base;
    b.dtype = "bf16";
    run(2, &b, 1, NULL, with);
    b.fp8_weights = 0;
    run(2, &b, 1, NULL, without);
    const int64_t removed = without[0].hp_bytes - with[0].hp_bytes;
    printf("  BF16, 2 ranks, one step: all-gather %lld bytes without FP8 weights; %lld + %lld FP8 with them\n",
           (long long)without[0].hp_bytes, (long long)with[0].hp_bytes, (long long)with[0].fp8_bytes);
    CHECK(with[0].fp8_bytes == with[0].n8 && with[0].n8 >= W && with[0].n8 <= W + pad,
          "FP8 gather: %lld bytes for %lld bucket elements (weights %lld)", (long long)with[0].fp8_bytes,
          (long long)with[0].n8, (long long)W);
    CHECK(removed >= 2 * W && removed <= 2 * (W + pad), "the BF16 gather lost %lld bytes, not 2 x %lld",
          (long long)removed, (long long)W);
    CHECK(without[0].fp8_bytes == 0, "no FP8 weights, %lld FP8 bytes", (long long)without[0].fp8_bytes);
    release(with, 2), release(without, 2);
}

/* One rank of b learns in 30 steps, as the same run with high-precision
 * weights does (saved to hp_save when not NULL), and its codes are its
 * masters quantized. */
static void check_learns(const char *what, const train_options *b, const char *hp_save)
{
    static rank_out a[1], h[1];
    train_options lo = *b;
    lo.steps = 30;
    run(0, &lo, 30, NULL, a);
    lo.fp8_weights = 0;
    run(0, &lo, 30, hp_save, h);
    const double f = mean(a[0].loss, 3), l = mean(a[0].loss + 27, 3), lh = mean(h[0].loss + 27, 3);
    printf("  %s, 30 steps: loss %.4f -> %.4f (high-precision weights: -> %.4f)\n", what, f, l, lh);
    CHECK(l < 0.8 * f, "%s: FP8 weights: the loss did not fall: %.4f -> %.4f", what, f, l);
    CHECK(fabs(l - lh) <= LEARN_TOL * lh, "%s: FP8 weights end at %.4f, high-precision ones at %.4f", what, l, lh);
    check_codes_are_masters(what, &a[0]);
    release(a, 1), release(h, 1);
}

/* One rank of b, STEPS steps, into one: its codes are its masters; 2 steps
 * saved to path and resumed (the FP8 weights left out: the checkpoint's)
 * are bitwise the uninterrupted run, and so is the CPU graph. */
static void check_one_rank(const char *what, const train_options *b, const char *path, rank_out *one)
{
    static rank_out half[1], res[1], g1[1];
    run(0, b, STEPS, NULL, one);
    check_codes_are_masters(what, &one[0]);
    run(0, b, 2, path, half);
    train_options ro = *b;
    ro.resume = path;
    ro.fp8_weights = 0;
    ro.given = 0;
    run(0, &ro, 2, NULL, res);
    CHECK(res[0].first == 2 && memcmp(res[0].loss, one[0].loss + 2, 2 * sizeof(double)) == 0 && same_state(&res[0], &one[0]),
          "%s: resumed at step %lld: not bitwise the uninterrupted run", what, (long long)res[0].first);
    train_options g = *b;
    g.graph = 1;
    run(0, &g, STEPS, NULL, g1);
    CHECK(same(&g1[0], &one[0], STEPS), "%s: the CPU graph is not bitwise the eager run", what);
    release(half, 1), release(res, 1), release(g1, 1);
}

/* The masters are drawn as a high-precision model's modules draw its
 * weights (gpt_fp8_master_init, both families): every FP8 weight k of the
 * FP32 model o (its --fp8-weights off) bit for bit. */
static void check_master_init(const char *what, train_options o)
{
    o.fp8_weights = 0;
    trainer *t = NULL;
    char err[512] = "";
    if (trainer_create(&o, &t, err, sizeof err) != F8_OK) die(err, NULL);
    gpt *m = trainer_model(t);
    int64_t differ = 0, n_all = 0;
    for (int k = 0; k < 4 * (int)m->c.layers; k++) {
        f8_module *mod;
        f8_param which;
        f8_tensor v;
        gpt_fp8_weight(m, k, &mod, &which);
        CHECK_OK(m->ctx, f8_module_param(mod, which, 0, &v));
        const int64_t n = v.rows * v.cols;
        float *w = (float *)xmalloc((size_t)n * 4), *drawn = (float *)xmalloc((size_t)n * 4);
        CHECK_OK(m->ctx, f8_ctx_download(m->ctx, w, v.data, (size_t)n * 4));
        CHECK_OK(m->ctx, gpt_fp8_master_init(m, k, drawn));
        differ += memcmp(w, drawn, (size_t)n * 4) != 0;
        n_all += n;
        free(w), free(drawn);
    }
    CHECK(differ == 0 && n_all > 0, "%s: %lld of %lld FP8 weights' master inits are not the module's weights", what,
          (long long)differ, 4 * (long long)m->c.layers);
    trainer_destroy(t);
}

/* A Llama's FP8 primary weights (llama.h): the same four GEMM weights a
 * block, numbered as the GPT's. Its masters are its modules' draws; one rank
 * learns as the high-precision run does, its codes are its masters
 * quantized, it resumes bitwise and its CPU graph is the eager run; 2 ranks
 * (sharded masters) against one as the GPT's. */
static void test_llama(const char *path)
{
    train_options b = base_options();
    b.llama = 1, b.heads = 4, b.kv_heads = 2, b.ffn = 48, b.rope_theta = 10000.0;
    check_master_init("llama", b);
    static rank_out one[1], two[2];
    check_learns("llama, one rank", &b, NULL);
    check_one_rank("llama", &b, path, one);
    run(2, &b, STEPS, NULL, two);
    CHECK(two[0].loss[0] == one[0].loss[0], "llama, 2 ranks: step 1 loss %.9g vs %.9g: not bitwise", two[0].loss[0],
          one[0].loss[0]);
    check_fp8w_close("llama: 2 ranks vs one rank", &two[0], &one[0], STEPS, 0);
    check_ranks_agree("llama, 2 ranks", two, 2);
    check_codes_are_masters("llama, 2 ranks", &two[0]);
    unlink(path);
    release(one, 1), release(two, 2);
}

int main(void)
{
    const train_options base = base_options();
    char path[64], path1[64], hpath[64];
    snprintf(path, sizeof path, "/tmp/f8_test_fp8w_%ld.safetensors", (long)getpid());
    snprintf(path1, sizeof path1, "/tmp/f8_test_fp8w1_%ld.safetensors", (long)getpid());
    snprintf(hpath, sizeof hpath, "/tmp/f8_test_fp8w_hp_%ld.safetensors", (long)getpid());
    check_learns("one rank", &base, hpath);
    static rank_out one[1];
    check_one_rank("one rank", &base, path1, one);
    train_options ro = base; /* path1: the one-rank checkpoint after 2 steps */
    ro.resume = path1;
    ro.fp8_weights = 0; /* left out (given 0): the checkpoint's */
    ro.given = 0;
    train_options g = base;
    g.graph = 1;
    /* data parallel against one rank */
    static rank_out dp2[2], dp4[4], ov2[2], gr2[2];
    run(2, &base, STEPS, NULL, dp2);
    run(4, &base, STEPS, NULL, dp4);
    rank_out *runs[2] = {dp2, dp4};
    for (int k = 0; k < 2; k++) {
        const int P = k ? 4 : 2;
        char what[64];
        snprintf(what, sizeof what, "%d ranks vs one rank", P);
        CHECK(runs[k][0].loss[0] == one[0].loss[0], "%s: step 1 loss %.9g vs %.9g: not bitwise", what,
              runs[k][0].loss[0], one[0].loss[0]);
        check_fp8w_close(what, &runs[k][0], &one[0], STEPS, 0);
        check_ranks_agree(what, runs[k], P);
        check_codes_are_masters(what, &runs[k][0]);
        CHECK(runs[k][0].fp8_bytes == STEPS * runs[k][0].n8, "%s: %lld FP8 bytes gathered in %d steps of %lld", what,
              (long long)runs[k][0].fp8_bytes, STEPS, (long long)runs[k][0].n8);
    }
    check_bytes(&base);
    train_options ov = base;
    ov.dp_overlap = 1;
    run(2, &ov, STEPS, NULL, ov2);
    check_fp8w_close("2 ranks, overlap, vs one rank", &ov2[0], &one[0], STEPS, 0);
    check_ranks_agree("2 ranks, overlap", ov2, 2);
    run(2, &g, STEPS, NULL, gr2);
    CHECK(same(&gr2[0], &dp2[0], STEPS), "2 ranks: the CPU graph is not bitwise the eager run");
    /* checkpoints across rank counts */
    static rank_out h2[2], r2[2], r1[1], r4[4], o2[2];
    run(2, &base, 2, path, h2);
    train_options rp = base;
    rp.resume = path;
    rp.given = 0;
    run(2, &rp, 2, NULL, r2);
    CHECK(r2[0].first == 2 && memcmp(r2[0].loss, dp2[0].loss + 2, 2 * sizeof(double)) == 0 && same_state(&r2[0], &dp2[0]),
          "2 ranks resumed into 2: not bitwise the uninterrupted run");
    check_ranks_agree("resumed into 2", r2, 2);
    run(0, &rp, 2, NULL, r1);
    check_fp8w_close("2-rank checkpoint resumed into 1", &r1[0], &dp2[0], 2, 2);
    run(4, &rp, 2, NULL, r4);
    check_fp8w_close("2-rank checkpoint resumed into 4", &r4[0], &dp2[0], 2, 2);
    check_ranks_agree("resumed into 4", r4, 4);
    run(2, &ro, 2, NULL, o2);
    check_fp8w_close("1-rank checkpoint resumed into 2", &o2[0], &one[0], 2, 2);
    check_refusals(&base, path1, hpath);
    check_master_init("gpt", base);
    test_llama(path1);
    unlink(path), unlink(path1), unlink(hpath);
    release(one, 1), release(dp2, 2), release(dp4, 4);
    release(ov2, 2), release(gr2, 2), release(h2, 2), release(r2, 2), release(r1, 1), release(r4, 4), release(o2, 2);
    return test_finish("test_fp8w_train");
}
