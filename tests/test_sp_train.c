/*
 * test_sp_train.c — sequence parallelism in the GPT trainer
 * (--sequence-parallel: train/gpt.c, train/tp.c; the modules' gather and
 * reduce-scatter: src/modules/sequence.c) on CPU ranks, against one rank.
 * The GPT of test_tp_train (2 layers, 4 heads, 64 channels, seq 16, 4
 * microbatches of 2 sequences, 4 steps):
 *  - TP 2, TP 4 and DP 2 x TP 2 with SP, FP8 delayed scaling; TP 2 with SP
 *    under current and block scaling, FP8 off (FP32) and a BF16 model: the
 *    step losses and the parameters after 4 steps (in the one-rank layout)
 *    within LOSS_TOL / PARAM_TOL relative of one rank (BF16, current and
 *    block scaling: NOISE_TOL, main says why), and of TP 2 without SP.
 *    Not bitwise, for TP's reason: the row-
 *    parallel outputs and the column-parallel input gradients are summed
 *    over the ranks in parts (SP reduce-scatters what TP all-reduces; the
 *    LayerNorm gradients are summed over token shards instead of over
 *    output-gradient shards);
 *  - the first step's forward is bitwise TP's without SP: each rank
 *    normalises its tokens (row-wise), the gathered FP8 codes are the ones
 *    TP casts (one scale), and the reduce-scatter adds the same partial sums
 *    in the same rank order as the all-reduce: step 1's loss is TP's, bit
 *    for bit (current scaling too: its group amax is the whole tensor's);
 *  - every rank holds bitwise the same amaxes and scales, losses and
 *    replicated parameters (the DP replicas of one TP index the same shards);
 *  - determinism: SP TP 2 twice, and with the CPU graph, the same bits;
 *  - checkpoints (one model, not per rank): written by SP TP 2 after 2
 *    steps, restored into one rank (no SP) bitwise the SP model, resumed
 *    there within the tolerance of the uninterrupted SP run, resumed into
 *    SP TP 2 bitwise it; and back: written by one rank, resumed into SP
 *    TP 2 within the tolerance of the uninterrupted one-rank run;
 *  - refused with a message: --sequence-parallel without --tp, or with a
 *    --seq the TP size does not divide (the options and trainer_create);
 *    f8_module_set_sequence_parallel on a Linear.
 */
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"

#define STEPS 4
#define MAXR 4
#define LOSS_TOL 1e-4
#define PARAM_TOL 1e-4
#define NOISE_TOL 3e-2 /* BF16, current and block scaling: see main */

#include "tp_fixture.h"

static train_options with_sp(train_options o)
{
    o.sequence_parallel = 1;
    return o;
}

/* a's losses and parameters within tol of ref's (relative, as check_close). */
static void within(const char *what, const rank_out *a, const rank_out *ref, double tol)
{
    double dl = 0;
    for (int s = 0; s < STEPS; s++) dl = fmax(dl, fabs(a->loss[s] - ref->loss[s]) / fabs(ref->loss[s]));
    const double e = a->n_params == ref->n_params ? max_rel(a->params, ref->params, ref->n_params) : INFINITY;
    printf("  %-40s parameters %.2e, losses %.2e\n", what, e, dl);
    CHECK(e <= tol && dl <= tol, "%s: parameters %.3g, losses %.3g apart (> %g)", what, e, dl, tol);
}

/* One rank, TP 2, and TP 2 with SP on o: SP within tol_one of one rank and
 * tol_tp of TP, its first loss bitwise TP's, every rank the same scales. */
static void check_recipe(const char *what, train_options o, double tol_one, double tol_tp)
{
    static rank_out one[1], tp[2], sp[2];
    char name[96];
    run(0, 1, &o, STEPS, NULL, one, 1);
    run(2, 2, &o, STEPS, NULL, tp, 1);
    train_options s = with_sp(o);
    run(2, 2, &s, STEPS, NULL, sp, 1);
    snprintf(name, sizeof name, "%s: SP TP 2 vs one rank", what);
    within(name, &sp[0], &one[0], tol_one);
    snprintf(name, sizeof name, "%s: SP TP 2 vs TP 2", what);
    within(name, &sp[0], &tp[0], tol_tp);
    CHECK(sp[0].loss[0] == tp[0].loss[0], "%s: SP's first loss %.9g is not TP's %.9g bit for bit", what,
          sp[0].loss[0], tp[0].loss[0]);
    snprintf(name, sizeof name, "%s: SP TP 2", what);
    check_ranks_agree(name, sp, 2, 2);
    release(one, 1), release(tp, 2), release(sp, 2);
}

static void check_refusals(const train_options *base)
{
    char err[256] = "";
    train_options o = with_sp(*base);
    CHECK(train_check_tp(&o, err, sizeof err) != 0 && strstr(err, "needs --tp 2"),
          "--sequence-parallel without --tp: got \"%s\"", err);
    o.ranks = 2, o.tp = 2, o.seq = 15;
    err[0] = 0;
    CHECK(train_check_tp(&o, err, sizeof err) != 0 && strstr(err, "--seq 15 must divide"),
          "--sequence-parallel --tp 2 --seq 15: got \"%s\"", err);
    /* a trainer made in code (no option check): gpt_create_tp refuses */
    o = with_sp(*base);
    o.seq = 18, o.grad_accum = 2;
    check_run_refused("SP TP 4 with seq 18", &o, 4, 4, "--seq 18 must divide");
    /* the module call: a Linear has no norm to gather */
    f8_ctx *ctx = NULL;
    f8_ctx_config cc = f8_ctx_config_default();
    f8_comm_group *g = NULL;
    f8_comm *comm = NULL;
    f8_module *lin = NULL;
    f8_linear_config lc = f8_linear_config_default(16, 16);
    lc.max_tokens = 8;
    if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK || f8_comm_group_create(1, &g, err, sizeof err) != F8_OK ||
        f8_comm_create_cpu(ctx, g, 0, &comm) != F8_OK || f8_linear_create(ctx, &lc, &lin) != F8_OK)
        die(err[0] ? err : "module refusal setup", ctx);
    CHECK(f8_module_set_sequence_parallel(lin, comm) == F8_ERR_INVALID_ARGUMENT &&
              strstr(f8_ctx_last_error(ctx), "no norm"),
          "f8_module_set_sequence_parallel on a Linear: %s", f8_ctx_last_error(ctx));
    f8_module_destroy(lin);
    f8_comm_destroy(comm);
    f8_comm_group_destroy(g);
    f8_ctx_destroy(ctx);
}

static void check_checkpoints(const train_options *base, const rank_out *sp2, const rank_out *one)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/f8_test_sp_%ld.safetensors", (long)getpid());
    const train_options s = with_sp(*base);
    static rank_out half[2], r1[1], r2[2], onehalf[1], back[2];
    run(2, 2, &s, 2, path, half, 1);
    train_options ro = *base;
    ro.resume = path;
    check_restored_into_one("SP TP 2", &ro, &half[0]);
    run(0, 1, &ro, 2, NULL, r1, 1);
    check_close("SP TP 2 checkpoint resumed into 1", &r1[0], sp2, 2, 2);
    train_options rs = with_sp(ro);
    run(2, 2, &rs, 2, NULL, r2, 1);
    CHECK(r2[0].first == 2 && memcmp(r2[0].loss, sp2->loss + 2, 2 * sizeof(double)) == 0 && same_params(&r2[0], sp2),
          "SP TP 2 resumed into SP TP 2: not bitwise the uninterrupted run");
    /* and back: one rank writes, SP resumes */
    run(0, 1, base, 2, path, onehalf, 1);
    run(2, 2, &rs, 2, NULL, back, 1);
    check_close("one-rank checkpoint resumed into SP TP 2", &back[0], one, 2, 2);
    check_ranks_agree("resumed SP TP 2", back, 2, 2);
    unlink(path);
    release(half, 2), release(r1, 1), release(r2, 2), release(onehalf, 1), release(back, 2);
}

int main(void)
{
    const train_options base = tp_base_options(), sp = with_sp(base);
    static rank_out one[1], sp2[2], sp4[4], dt[4];
    run(0, 1, &base, STEPS, NULL, one, 1);
    check_tp_layouts("SP ", &sp, STEPS, one, sp2, sp4, dt);
    /* the recipes and dtypes, each against its own one-rank and TP runs. Current and block
     * scaling derive each cast's scale from the tensor a rank holds, and under TP that is its
     * shard (proj's input columns, the dgrad inputs...): TP itself is then 1.6e-2 from one
     * rank after 4 steps (AdamW moves elements whose gradient is at the FP8 noise by about
     * +-lr either way, as test_tp_train says of BF16), so those runs are held to NOISE_TOL of
     * one rank, and current scaling to PARAM_TOL of TP (seen 6.6e-6); block scaling's 1x128
     * tiles each take their own amax, so a rounding-level difference in the summed gradients
     * moves more codes (SP vs TP seen 1.6e-3). BF16 as in test_tp_train. */
    train_options o = base;
    check_recipe("delayed", o, PARAM_TOL, PARAM_TOL);
    o.recipe = "current";
    check_recipe("current", o, NOISE_TOL, PARAM_TOL);
    o.recipe = "block";
    check_recipe("block", o, NOISE_TOL, NOISE_TOL);
    o = base;
    o.fp8 = 0;
    check_recipe("FP8 off", o, PARAM_TOL, PARAM_TOL);
    o = base;
    o.dtype = "bf16";
    check_recipe("BF16", o, NOISE_TOL, NOISE_TOL);
    /* determinism and the CPU graph */
    check_tp2_repeats("SP ", &sp, &sp2[0]);
    check_checkpoints(&base, &sp2[0], one);
    check_refusals(&base);
    release(one, 1), release(sp2, 2), release(sp4, 4), release(dt, 4);
    return test_finish("test_sp_train");
}
