/*
 * test_llama_dp.c — the Llama family (train/llama.h) under data
 * parallelism with ZeRO-1 on CPU ranks (threads), against one rank, as
 * test_dp.c holds the GPT: --grad-accum 4 split among 2 and 4 ranks, FP8
 * delayed scaling, GQA and an untied head; step 1's loss bitwise the
 * one-rank loss, later losses and the parameters within LOSS_TOL /
 * PARAM_TOL (the gradient sums run in another order), every rank bitwise
 * the same parameters and scales; and so with FP8 primary weights (the
 * masters sharded; tensor and sequence parallelism: test_llama_tp).
 */
#include <unistd.h>

#include "check.h"
#include "f8train.h"
#include "trainer_fixture.h"

#define STEPS 4
#define MAXR 4
#define LOSS_TOL 1e-5
#define PARAM_TOL 1e-5

#include "rank_fixture.h"

static f8_status keep_rank(rank_out *r, trainer *t)
{
    gpt *m = trainer_model(t);
    f8_status st = grab_params(r, m);
    return st == F8_OK ? grab_scales(r, m->ctx) : st;
}

static void run(int R, int P, const train_options *base, rank_out *out, int expect_ok)
{
    const rank_run run = {.R = R, .P = P, .steps = STEPS, .save = NULL, .capture = keep_rank, .bad_rank = -1,
                          .expect_ok = expect_ok};
    run_ranks(&run, base, out);
}

int main(void)
{
    train_options base = cpu_rank_options(STEPS);
    base.llama = 1;
    base.layers = 2, base.heads = 4, base.kv_heads = 2, base.channels = 32, base.ffn = 48, base.untied = 1;
    base.rope_theta = 500000.0, base.rope_factor = 8.0;
    static rank_out one[1], dp2[2], dp4[4], tp2[2];
    run(0, 1, &base, one, 1);
    run(2, 1, &base, dp2, 1);
    run(4, 1, &base, dp4, 1);
    rank_out *runs[2] = {dp2, dp4};
    for (int k = 0; k < 2; k++) {
        const int P = k ? 4 : 2;
        char what[64];
        snprintf(what, sizeof what, "llama, %d ranks vs one rank", P);
        CHECK(runs[k][0].loss[0] == one[0].loss[0], "%s: step 1 loss %.9g vs %.9g: not bitwise", what, runs[k][0].loss[0],
              one[0].loss[0]);
        check_close(what, &runs[k][0], one, STEPS, 0);
        for (int r = 1; r < P; r++) {
            CHECK(same_params(&runs[k][r], &runs[k][0]), "%s: rank %d's parameters differ from rank 0's", what, r);
            CHECK(same_scales(&runs[k][r], &runs[k][0]), "%s: rank %d's scales differ from rank 0's", what, r);
        }
    }
    /* FP8 primary weights: the masters sharded over the ranks, as the GPT's (test_fp8w_train) */
    static rank_out fw1[1];
    train_options fw = base;
    fw.fp8_weights = 1;
    run(0, 1, &fw, fw1, 1);
    run(2, 1, &fw, tp2, 1);
    CHECK(tp2[0].st == F8_OK && tp2[0].loss[0] == fw1[0].loss[0], "--fp8-weights, 2 ranks: step 1 loss %.9g vs %.9g: "
          "not bitwise (%s)", tp2[0].loss[0], fw1[0].loss[0], tp2[0].err);
    check_close("llama --fp8-weights, 2 ranks vs one", &tp2[0], fw1, STEPS, 0);
    CHECK(same_params(&tp2[1], &tp2[0]) && same_scales(&tp2[1], &tp2[0]), "--fp8-weights, 2 ranks: rank 1 differs");
    release(one, 1), release(dp2, 2), release(dp4, 4), release(tp2, 2), release(fw1, 1);
    return test_finish("test_llama_dp");
}
