/*
 * test_tp_train.c — tensor parallelism in the GPT trainer (train/tp.c) on
 * CPU ranks (threads, f8_comm_group), against one rank. A GPT of 2 layers,
 * 4 heads, 64 channels, seq 16, 4 microbatches of 2 sequences, 4 steps:
 *  - TP 2, TP 4 and DP 2 x TP 2, FP8 delayed scaling; TP 2 with FP8 off
 *    (FP32; and a BF16 model within BF16_TOL, a few BF16 ulps, with BF16
 *    and with FP32 gradients, --grad-dtype fp32):
 *      the step losses and the parameters after 4 steps (gathered into the
 *      one-rank layout) within LOSS_TOL / PARAM_TOL relative of one rank.
 *      Not bitwise: the row-parallel modules (proj, fc2) sum their output
 *      over the ranks (rank 0's partial GEMM + rank 1's + ...) where one rank
 *      sums the whole reduction dimension in one GEMM, and the column-parallel
 *      input gradients and LayerNorm gradients are likewise summed in parts;
 *      with DP the gradients are also summed over replicas (test_dp's
 *      difference). The parameters at creation are bitwise one rank's.
 *    every rank holds bitwise the same amaxes and scales (MAX over all
 *    ranks), the same replicated parameters and losses; the DP replicas of
 *    one TP index the same shards;
 *  - determinism: TP 2 run twice gives the same bits, and so does the CPU
 *    graph (collectives recorded and replayed);
 *  - checkpoints: written by TP 2 after 2 steps in the one-rank layout, it
 *    restores into one rank with bitwise the TP run's parameters, resumes
 *    into TP 2 bitwise the uninterrupted run, and into one rank within the
 *    tolerance; with FP8 attention (BF16) TP 2 resumes bitwise too, every
 *    slot's scale and amax included;
 *  - BF16 AdamW moments (--adam-moments bf16): TP 2 within MOMENTS_TOL of
 *    one rank; its checkpoint holds BF16 moments in the one-rank layout,
 *    resumes into TP 2 bitwise and into one rank within MOMENTS_TOL; FP8
 *    moments are refused with --tp (a shard's blocks are not the tensor's);
 *  - the slicing itself: q|k|v (3 parts) and a gated fc1 (2 parts) along rows
 *    and columns, P = 1, 2, 4: each rank's share, and the shards put back;
 *  - refused: heads or the MLP width not divisible by --tp, ranks not a
 *    multiple of it, --dp-overlap with it: each with a message saying so;
 *    the launcher (train_launch) runs --ranks 4 --tp 2 and refuses 3 ranks.
 * The ranks' runner and the comparisons are tp_fixture.h's (test_sp_train
 * shares them), on rank_fixture.h's.
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
#define BF16_TOL 3e-2
/* BF16 moments round each step's m and v: TP's partial sums (PARAM_TOL's
 * difference) can round a moment to the neighbouring BF16 value (2^-8
 * relative), so the parameters may drift a little further (seen: 7.7e-7) */
#define MOMENTS_TOL 1e-4

#include "tp_fixture.h"

static void refused(train_options o, const char *needle)
{
    char err[256] = "";
    CHECK(train_check_tp(&o, err, sizeof err) != 0 && strstr(err, needle), "--tp %lld --ranks %lld --heads %lld: "
          "expected a refusal naming \"%s\", got \"%s\"", (long long)o.tp, (long long)o.ranks, (long long)o.heads,
          needle, err);
}

/* tp.c's slicing: for stacked parts (q|k|v, a gated fc1's a|b) along rows or columns, rank t's
 * shard holds rows/columns t·n/P.. of each part, and the P shards put back give the whole. */
static void check_shard_copy(void)
{
    enum { R = 24, K = 48 }; /* divisible by parts x P for every case */
    float full[R * K], back[R * K], local[R * K];
    for (int i = 0; i < R * K; i++) full[i] = (float)i;
    for (int dim = 0; dim < 2; dim++)
        for (int parts = 1; parts <= 3; parts++)
            for (int P = 1; P <= 4; P *= 2) {
                const int nf = (dim ? K : R) / parts, nl = nf / P;
                memset(back, 0, sizeof back);
                for (int t = 0; t < P; t++) {
                    tp_shard_copy((unsigned char *)full, (unsigned char *)local, R, K, dim, parts, P, t, 4, 1);
                    for (int j = 0; j < parts; j++) /* the first element of each part's share */
                        CHECK(local[dim ? j * nl : j * nl * K] == full[dim ? j * nf + t * nl : (j * nf + t * nl) * K],
                              "shard_copy dim %d parts %d P %d rank %d: part %d starts at the wrong element", dim,
                              parts, P, t, j);
                    tp_shard_copy((unsigned char *)back, (unsigned char *)local, R, K, dim, parts, P, t, 4, 0);
                }
                CHECK(memcmp(back, full, sizeof full) == 0, "shard_copy dim %d parts %d P %d: the shards put back "
                      "are not the whole", dim, parts, P);
            }
}

/* A BF16 model o: TP 2 against one rank within BF16_TOL (main's comment says why). */
static void check_bf16_tp2(const char *what, const train_options *o)
{
    static rank_out b1[1], b2[2];
    run(0, 1, o, STEPS, NULL, b1, 1);
    run(2, 2, o, STEPS, NULL, b2, 1);
    const double e = b2[0].n_params == b1[0].n_params ? max_rel(b2[0].params, b1[0].params, b1[0].n_params) : 1;
    const double dl = fabs(b2[0].loss[STEPS - 1] - b1[0].loss[STEPS - 1]) / b1[0].loss[STEPS - 1];
    printf("  %-36s parameters %.2e, last loss %.2e\n", what, e, dl);
    CHECK(e <= BF16_TOL && dl <= BF16_TOL, "%s: parameters %.3g, last loss %.3g apart (> %g)", what, e, dl, BF16_TOL);
    check_ranks_agree(what, b2, 2, 2);
    release(b1, 1), release(b2, 2);
}

int main(void)
{
    check_shard_copy();
    const train_options base = tp_base_options();
    static rank_out one[1], tp2[2], tp4[4], dt[4];
    check_created_bitwise("", &base); /* the shards are one rank's parameters, bitwise */
    run(0, 1, &base, STEPS, NULL, one, 1);
    check_tp_layouts("", &base, STEPS, one, tp2, tp4, dt);
    /* FP8 off (FP32 GEMMs) */
    {
        static rank_out h1[1], h2[2];
        train_options hp = base;
        hp.fp8 = 0;
        run(0, 1, &hp, STEPS, NULL, h1, 1);
        run(2, 2, &hp, STEPS, NULL, h2, 1);
        check_close("FP8 off: TP 2 vs one rank", &h2[0], h1, STEPS, 0);
        check_ranks_agree("FP8 off: TP 2", h2, 2, 2);
        release(h1, 1), release(h2, 2);
    }
    /* a BF16 model (the GPU default): the all-reduces convert to FP32 and back, so each
     * row-parallel output is rounded to BF16 once after the sum where one rank rounds the whole
     * GEMM once too, but from other partial sums; BF16 activations and gradients then differ by
     * BF16 ulps. AdamW turns an element whose gradient is at that noise into an update of about
     * ±lr either way: after 4 steps up to 2·4·lr = 2.4e-2 apart, against the largest parameter
     * (LayerNorm gamma, ~1): BF16_TOL 3e-2 (seen: 1.6e-2) */
    train_options bb = base;
    bb.dtype = "bf16";
    check_bf16_tp2("BF16: TP 2 vs one rank", &bb);
    /* --grad-dtype fp32: each rank's shards get FP32 main grads (the column-parallel norms' BF16
     * gradients are summed over the group as without it): the same tolerance against one rank with
     * FP32 gradients */
    bb.grad_dtype = "fp32";
    check_bf16_tp2("BF16, FP32 gradients: TP 2 vs one", &bb);
    /* determinism and the CPU graph */
    check_tp2_repeats("", &base, &tp2[0]);
    /* checkpoints: TP 2 writes the one-rank layout after 2 steps */
    char path[64];
    snprintf(path, sizeof path, "/tmp/f8_test_tp_%ld.safetensors", (long)getpid());
    static rank_out half[2], r2[2], r1[1], r4[4];
    run(2, 2, &base, 2, path, half, 1);
    train_options ro = base;
    ro.resume = path;
    check_restored_into_one("TP 2", &ro, &half[0]);
    run(2, 2, &ro, 2, NULL, r2, 1);
    CHECK(r2[0].first == 2 && memcmp(r2[0].loss, tp2[0].loss + 2, 2 * sizeof(double)) == 0 &&
              same_params(&r2[0], &tp2[0]),
          "TP 2 resumed into TP 2: not bitwise the uninterrupted run");
    run(0, 1, &ro, 2, NULL, r1, 1);
    check_close("TP 2 checkpoint resumed into 1", &r1[0], &tp2[0], 2, 2);
    run(4, 4, &ro, 2, NULL, r4, 1);
    check_close("TP 2 checkpoint resumed into TP 4", &r4[0], &tp2[0], 2, 2);
    unlink(path);
    /* FP8 attention (BF16): its slots are whole on every rank and in the checkpoint */
    {
        static rank_out a2[2], ahalf[2], ar2[2];
        train_options fa = base;
        fa.dtype = "bf16", fa.fp8_attention = 1;
        run(2, 2, &fa, STEPS, NULL, a2, 1);
        run(2, 2, &fa, 2, path, ahalf, 1);
        fa.resume = path;
        run(2, 2, &fa, 2, NULL, ar2, 1);
        CHECK(ar2[0].first == 2 && memcmp(ar2[0].loss, a2[0].loss + 2, 2 * sizeof(double)) == 0 &&
                  same_state(&ar2[0], &a2[0]),
              "FP8 attention: TP 2 resumed into TP 2: not bitwise the uninterrupted run");
        check_ranks_agree("FP8 attention: TP 2 resumed", ar2, 2, 2);
        release(a2, 2), release(ahalf, 2), release(ar2, 2);
        unlink(path);
    }
    /* BF16 AdamW moments: gathered and sliced like the parameters */
    {
        static rank_out m1[1], m2[2], mh[2], mr2[2], mr1[1];
        train_options mo = base;
        mo.adam_moments = "bf16";
        run(0, 1, &mo, STEPS, NULL, m1, 1);
        run(2, 2, &mo, STEPS, NULL, m2, 1);
        const double e = m2[0].n_params == m1[0].n_params ? max_rel(m2[0].params, m1[0].params, m1[0].n_params) : 1;
        printf("  %-36s parameters %.2e\n", "BF16 moments: TP 2 vs one rank", e);
        CHECK(e <= MOMENTS_TOL, "BF16 moments, TP 2: parameters %.3g apart (> %g)", e, MOMENTS_TOL);
        check_ranks_agree("BF16 moments: TP 2", m2, 2, 2);
        run(2, 2, &mo, 2, path, mh, 1);
        {
            f8_ctx *ctx = NULL;
            f8_checkpoint *ck = load_on_cpu(path, &ctx);
            CHECK(ck != NULL, "BF16 moments: the TP 2 checkpoint does not load");
            int bf16 = ck != NULL;
            for (int i = 0; ck && i < 16; i++) { /* the head, wpe and a block's sharded and replicated entries */
                char name[64];
                snprintf(name, sizeof name, "optimizer.v.%d", i);
                const f8_ck_entry *en = f8_checkpoint_find_entry(ck, name);
                bf16 = bf16 && en && en->dtype == F8_CK_BF16;
            }
            const char *rec = ck ? f8_checkpoint_metadata(ck, "optimizer.moments") : NULL;
            CHECK(bf16 && rec && strcmp(rec, "bf16") == 0, "BF16 moments: the TP 2 checkpoint's are not BF16 (%s)",
                  rec ? rec : "no record");
            f8_checkpoint_destroy(ck);
            f8_ctx_destroy(ctx);
        }
        train_options rm = base;
        rm.resume = path;
        run(2, 2, &rm, 2, NULL, mr2, 1);
        CHECK(mr2[0].first == 2 && memcmp(mr2[0].loss, m2[0].loss + 2, 2 * sizeof(double)) == 0 &&
                  same_params(&mr2[0], &m2[0]),
              "BF16 moments: TP 2 resumed into TP 2: not bitwise the uninterrupted run");
        run(0, 1, &rm, 2, NULL, mr1, 1);
        const double e1 = mr1[0].n_params == m2[0].n_params ? max_rel(mr1[0].params, m2[0].params, m2[0].n_params) : 1;
        CHECK(mr1[0].first == 2 && e1 <= MOMENTS_TOL, "BF16 moments: TP 2's checkpoint resumed into one rank: %.3g",
              e1);
        unlink(path);
        release(m1, 1), release(m2, 2), release(mh, 2), release(mr2, 2), release(mr1, 1);
        /* FP8 moments with --tp: the command line refuses them, and so does the trainer */
        char *argv[] = {"f8_train", "--ranks", "2", "--tp", "2", "--adam-moments", "fp8"};
        train_options po = train_options_default();
        char err[256] = "";
        CHECK(train_parse_args(7, argv, &po, stdout, err, sizeof err) < 0 && strstr(err, "--adam-moments fp8"),
              "FP8 moments with --tp: the command line accepted them (%s)", err);
        static rank_out bad8[2];
        train_options f8m = base;
        f8m.adam_moments = "fp8";
        run(2, 2, &f8m, 1, NULL, bad8, 0);
        CHECK(bad8[0].st != F8_OK && strstr(bad8[0].err, "--adam-moments fp8"), "FP8 moments over TP 2: %s: %s",
              f8_status_string(bad8[0].st), bad8[0].err);
        release(bad8, 2);
    }
    /* refusals */
    train_options bad = base;
    bad.ranks = 3, bad.tp = 3;
    refused(bad, "heads");
    bad.ranks = 3, bad.tp = 2;
    refused(bad, "does not divide the 3 ranks");
    bad.ranks = 4, bad.tp = 2, bad.dp_overlap = 1;
    refused(bad, "--dp-overlap");
    bad = base;
    bad.tp = 2;
    refused(bad, "needs --ranks");
    bad = base;
    bad.heads = 6, bad.channels = 60;
    check_run_refused("6 heads over TP 4", &bad, 4, 4, "must divide by it");
    /* the launcher: f8_train --ranks 4 --tp 2 (its groups made by launch.c) */
    train_options lo = base;
    lo.ranks = 4, lo.tp = 2;
    const int rc = train_launch(&lo);
    CHECK(rc == 0 || rc == 2, "f8_train --ranks 4 --tp 2: exit status %d (0 or 2: it trained)", rc);
    lo.ranks = 3;
    CHECK(train_launch(&lo) == 1, "f8_train --ranks 3 --tp 2: exit status not 1");
    release(one, 1), release(tp2, 2);
    release(tp4, 4), release(dt, 4), release(half, 2), release(r2, 2), release(r1, 1), release(r4, 4);
    return test_finish("test_tp_train");
}
