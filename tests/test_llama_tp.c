/*
 * test_llama_tp.c — tensor parallelism for the trainer's Llama family
 * (train/llama.c on train/tp.c) on CPU ranks (threads, f8_comm_group),
 * against one rank, as test_tp_train holds the GPT. A Llama of 2 layers,
 * 8 heads over 4 key/value heads (GQA), 64 channels, SwiGLU 64 wide, RoPE
 * with Llama 3's scaling, an untied head; seq 16, 4 microbatches of 2
 * sequences, 4 steps:
 *  - the slicing of unequal stacked blocks (q | k | v of H, G, G heads)
 *    along rows and columns, P = 1, 2, 4: each rank's share starts where
 *    it should, and the shards put back give the whole;
 *  - creation: TP 2's gathered model is bitwise one rank's;
 *  - TP 2, TP 4 (one key/value head a rank) and DP 2 x TP 2, FP8 delayed
 *    scaling: the step losses and the parameters after 4 steps within
 *    LOSS_TOL / PARAM_TOL relative of one rank (not bitwise: the
 *    row-parallel o-projection and fc2 sum partial GEMMs over the ranks, the
 *    column-parallel input and RMSNorm gradients likewise), every rank the
 *    same amaxes, scales, losses and replicated parameters;
 *  - FP8 off with a tied head: TP 2 within the same bounds; a BF16 model:
 *    TP 2 and SP TP 2 within BF16_TOL of one rank, and with FP8 attention
 *    TP 2 within BF16_TOL of its one rank;
 *  - determinism: TP 2 twice and with the CPU graph, the same bits;
 *  - checkpoints in the one-rank layout: written by TP 2 after 2 steps,
 *    restored into one rank bitwise, resumed into TP 2 bitwise the
 *    uninterrupted run and into one rank within the bounds; written by one
 *    rank, resumed into TP 2 within the bounds of the one-rank run;
 *  - sequence parallelism (--sequence-parallel) over TP 2, FP8 delayed:
 *    within the bounds of one rank, step 1's loss bitwise TP's (the
 *    reduce-scatter adds the partial sums in the all-reduce's order), every
 *    rank in agreement; its checkpoint restores into one rank bitwise, and a
 *    one-rank checkpoint resumes into SP TP 2 within the bounds;
 *  - refused with the sizes named: multi-query attention (1 key/value head)
 *    or a SwiGLU width the TP size does not divide (the options and the
 *    trainer), a --seq SP cannot split; FP8 primary weights over TP 2.
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
/* BF16 (the GPU default): the all-reduces sum in FP32 and round once, one
 * rank rounds its whole GEMM once, so activations and gradients differ by
 * BF16 ulps, and AdamW turns an element whose gradient is at that noise
 * into about ±lr either way per step (test_tp_train's BF16_TOL) */
#define BF16_TOL 3e-2

#include "tp_fixture.h"

static train_options llama_base(void)
{
    train_options o = tp_base_options();
    o.llama = 1;
    o.heads = 8, o.kv_heads = 4, o.channels = 64, o.ffn = 64, o.untied = 1;
    o.rope_theta = 500000.0, o.rope_factor = 8.0;
    return o;
}

/* q | k | v of 4, 2, 2 heads (8 rows each... a head is 3 rows here) along
 * rows and columns: rank t's share of each block, laid block after block. */
static void check_shard_copy_sizes(void)
{
    enum { HD = 3, R = 8 * HD, K = 2 * R };
    const int sizes[3] = {4, 2, 2};
    float full[R * K], back[R * K], local[R * K];
    for (int i = 0; i < R * K; i++) full[i] = (float)i;
    for (int dim = 0; dim < 2; dim++)
        for (int P = 1; P <= 2; P *= 2) {
            const int n = dim ? K : R, unit = n / 8; /* one head's rows (or columns) */
            memset(back, 0, sizeof back);
            for (int t = 0; t < P; t++) {
                tp_shard_copy_sizes((unsigned char *)full, (unsigned char *)local, R, K, dim, 3, sizes, P, t, 4, 1);
                int f0 = 0, l0 = 0;
                for (int j = 0; j < 3; j++) { /* block j's share starts at f0 + t·nl in full, l0 in local */
                    const int nf = sizes[j] * unit, nl = nf / P;
                    CHECK(local[dim ? l0 : l0 * K] == full[dim ? f0 + t * nl : (f0 + t * nl) * K],
                          "shard_copy_sizes dim %d P %d rank %d: block %d starts at the wrong element", dim, P, t, j);
                    f0 += nf, l0 += nl;
                }
                tp_shard_copy_sizes((unsigned char *)back, (unsigned char *)local, R, K, dim, 3, sizes, P, t, 4, 0);
            }
            CHECK(memcmp(back, full, sizeof full) == 0, "shard_copy_sizes dim %d P %d: the shards put back are not the "
                  "whole", dim, P);
        }
}

static void check_refusals(const train_options *base)
{
    train_options o = *base;
    char err[256] = "";
    o.ranks = 2, o.tp = 2, o.kv_heads = 1; /* multi-query */
    CHECK(train_check_tp(&o, err, sizeof err) != 0 && strstr(err, "1 key/value heads"),
          "--tp 2 with 1 key/value head: got \"%s\"", err);
    o = *base;
    o.ranks = 4, o.tp = 4, o.ffn = 66;
    err[0] = 0;
    CHECK(train_check_tp(&o, err, sizeof err) != 0 && strstr(err, "SwiGLU width 66"), "--tp 4 with ffn 66: got \"%s\"",
          err);
    /* made in code (no option check): the model refuses, on every rank */
    o = *base;
    o.kv_heads = 1;
    check_run_refused("multi-query over TP 2", &o, 2, 2, "1 key/value heads");
    o = *base;
    o.heads = 4, o.kv_heads = 2, o.channels = 32;
    check_run_refused("2 key/value heads over TP 4", &o, 4, 4, "must divide by it");
    o = *base;
    o.sequence_parallel = 1, o.seq = 18, o.grad_accum = 2;
    check_run_refused("SP TP 4 with seq 18", &o, 4, 4, "--seq 18 must divide");
    static rank_out bad[2];
    o = *base;
    o.fp8_weights = 1;
    run(2, 2, &o, 1, NULL, bad, 0);
    for (int r = 0; r < 2; r++)
        CHECK(bad[r].st != F8_OK && strstr(bad[r].err, "--fp8-weights"), "--fp8-weights over TP 2, rank %d: %s", r,
              bad[r].err);
    release(bad, 2);
}

static void check_checkpoints(const train_options *base, const rank_out *tp2, const rank_out *one)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/f8_test_llama_tp_%ld.safetensors", (long)getpid());
    static rank_out half[2], r2[2], r1[1], onehalf[1], back[2];
    run(2, 2, base, 2, path, half, 1);
    train_options ro = *base;
    ro.resume = path;
    check_restored_into_one("llama TP 2", &ro, &half[0]);
    run(2, 2, &ro, 2, NULL, r2, 1);
    CHECK(r2[0].first == 2 && memcmp(r2[0].loss, tp2->loss + 2, 2 * sizeof(double)) == 0 && same_params(&r2[0], tp2),
          "llama TP 2 resumed into TP 2: not bitwise the uninterrupted run");
    run(0, 1, &ro, 2, NULL, r1, 1);
    check_close("llama TP 2 checkpoint resumed into 1", &r1[0], tp2, 2, 2);
    run(0, 1, base, 2, path, onehalf, 1); /* and back: one rank writes, TP 2 resumes */
    run(2, 2, &ro, 2, NULL, back, 1);
    check_close("one-rank checkpoint resumed into TP 2", &back[0], one, 2, 2);
    check_ranks_agree("llama resumed TP 2", back, 2, 2);
    unlink(path);
    release(half, 2), release(r2, 2), release(r1, 1), release(onehalf, 1), release(back, 2);
}

/* Sequence parallelism over TP 2 against one rank and TP 2 (tp2), and its
 * checkpoints both ways. */
static void check_sp(const train_options *base, const rank_out *one, const rank_out *tp2)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/f8_test_llama_sp_%ld.safetensors", (long)getpid());
    static rank_out sp[2], half[2], onehalf[1], back[2];
    train_options s = *base;
    s.sequence_parallel = 1;
    run(2, 2, &s, STEPS, NULL, sp, 1);
    check_close("llama SP TP 2 vs one rank", &sp[0], one, STEPS, 0);
    CHECK(sp[0].loss[0] == tp2->loss[0], "llama SP's first loss %.9g is not TP's %.9g bit for bit", sp[0].loss[0],
          tp2->loss[0]);
    check_ranks_agree("llama SP TP 2", sp, 2, 2);
    run(2, 2, &s, 2, path, half, 1);
    train_options ro = *base;
    ro.resume = path;
    check_restored_into_one("llama SP TP 2", &ro, &half[0]);
    run(0, 1, base, 2, path, onehalf, 1);
    s.resume = path;
    run(2, 2, &s, 2, NULL, back, 1);
    check_close("one-rank checkpoint resumed into SP TP 2", &back[0], one, 2, 2);
    unlink(path);
    release(sp, 2), release(half, 2), release(onehalf, 1), release(back, 2);
}

/* A BF16 model: TP 2 and SP TP 2 against one rank, and with FP8 attention
 * (each rank's own heads' slots, their amaxes MAX-reduced) TP 2 against its
 * one rank, within BF16_TOL. */
static void check_bf16(const train_options *base)
{
    static rank_out b1[1], b2[2], s2[2], f1[1], f2[2];
    train_options bb = *base;
    bb.dtype = "bf16";
    run(0, 1, &bb, STEPS, NULL, b1, 1);
    run(2, 2, &bb, STEPS, NULL, b2, 1);
    bb.sequence_parallel = 1;
    run(2, 2, &bb, STEPS, NULL, s2, 1);
    bb.sequence_parallel = 0, bb.fp8_attention = 1;
    run(0, 1, &bb, STEPS, NULL, f1, 1);
    run(2, 2, &bb, STEPS, NULL, f2, 1);
    const rank_out *r[3] = {b2, s2, f2}, *ref[3] = {b1, b1, f1};
    static const char *const whats[3] = {"llama BF16: TP 2", "llama BF16: SP TP 2", "llama BF16, FP8 attention: TP 2"};
    for (int k = 0; k < 3; k++) {
        const char *what = whats[k];
        const rank_out *b = ref[k];
        const double e = r[k]->n_params == b->n_params ? max_rel(r[k]->params, b->params, b->n_params) : 1;
        const double dl = fabs(r[k]->loss[STEPS - 1] - b->loss[STEPS - 1]) / b->loss[STEPS - 1];
        printf("  %-36s parameters %.2e, last loss %.2e of one rank\n", what, e, dl);
        CHECK(e <= BF16_TOL && dl <= BF16_TOL, "%s: parameters %.3g, last loss %.3g apart (> %g)", what, e, dl, BF16_TOL);
        check_ranks_agree(what, r[k], 2, 2);
    }
    release(b1, 1), release(b2, 2), release(s2, 2), release(f1, 1), release(f2, 2);
}

int main(void)
{
    check_shard_copy_sizes();
    const train_options base = llama_base();
    static rank_out one[1], tp2[2], tp4[4], dt[4];
    check_created_bitwise("llama ", &base);
    run(0, 1, &base, STEPS, NULL, one, 1);
    check_tp_layouts("llama ", &base, STEPS, one, tp2, tp4, dt);
    {
        static rank_out h1[1], h2[2];
        train_options hp = base;
        hp.fp8 = 0, hp.untied = 0;
        run(0, 1, &hp, STEPS, NULL, h1, 1);
        run(2, 2, &hp, STEPS, NULL, h2, 1);
        check_close("llama FP8 off, tied: TP 2 vs one rank", &h2[0], h1, STEPS, 0);
        check_ranks_agree("llama FP8 off, tied: TP 2", h2, 2, 2);
        release(h1, 1), release(h2, 2);
    }
    check_tp2_repeats("llama ", &base, &tp2[0]);
    check_checkpoints(&base, &tp2[0], one);
    check_sp(&base, one, &tp2[0]);
    check_bf16(&base);
    check_refusals(&base);
    release(one, 1), release(tp2, 2), release(tp4, 4), release(dt, 4);
    return test_finish("test_llama_tp");
}
