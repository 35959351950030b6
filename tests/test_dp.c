/*
 * test_dp.c — data parallelism with ZeRO-1 (train/dp.c) on CPU ranks
 * (threads, f8_comm_group), against one rank:
 *  - 1 rank through a communicator of size 1, 2 and 4 ranks (DP), with
 *    --grad-accum 4 split among them, FP8 delayed scaling:
 *      step 1's loss is bitwise the one-rank loss (same weights, and the
 *      amax MAX-reduction gives every rank the one-rank scales);
 *      later losses and the parameters after STEPS steps agree within
 *      LOSS_TOL / PARAM_TOL (relative): the gradient sum runs in another
 *      order (rank 0 + rank 1 + ... of per-rank sums, against one rank's
 *      microbatch-by-microbatch accumulation), so the bits differ from step 1's
 *      update on;
 *      every rank holds bitwise the same parameters, amaxes and scales;
 *  - --dp-overlap (a bucket per block, reduced from the backward): 2 and 4
 *    ranks within the tolerance, ranks agree, graph bitwise eager, and its
 *    checkpoint resumes into one rank;
 *  - determinism: a 2-rank run repeated gives the same bits; the CPU graph
 *    (record and replay, collectives included) gives the eager bits;
 *  - a BF16 model, 2 ranks: within BF16_TOL (one rank accumulates its
 *    gradients in BF16, the ranks' reduction is FP32); with --grad-dtype
 *    fp32 (FP32 main grads), with and without --dp-overlap: step 1 bitwise,
 *    and at least as close as with BF16 gradients;
 *  - resume: a checkpoint written by a 2-rank run after 2 steps resumes into
 *    2 ranks bitwise, and into 1 and 4 ranks within the tolerance, against
 *    the uninterrupted 2-rank run;
 *  - AdamW moments in BF16 and FP8 (--adam-moments) on 2 ranks: step 1
 *    bitwise one rank's, then within MOMENTS_TOL of one rank; the checkpoint
 *    holds the moments in their form (one-rank names and dtypes) and resumes
 *    into 2 ranks bitwise and into 1 within MOMENTS_TOL; a one-rank
 *    checkpoint resumes into 2 ranks; a checkpoint of another form is
 *    refused.
 * The ranks' runner is rank_fixture.h's; this test keeps each rank's
 * parameters (the parameter table) and FP8 scales.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"

#define STEPS 4
#define MAXR 4
#define LOSS_TOL 1e-5
#define PARAM_TOL 1e-5
#define BF16_TOL 2e-2
/* Low-precision moments round the step's m and v into BF16 or FP8: the
 * ranks' gradient sums (another order than one rank's, 1e-7 apart) can then
 * land on the other side of a rounding boundary and move that moment by one
 * BF16 (2^-8) or FP8 (2^-4) step, so the parameters drift further apart
 * than with FP32 moments (seen after 4 steps: 1.9e-6 with BF16, 6.5e-7 with
 * FP8, against 6.6e-7 with FP32 moments). */
#define MOMENTS_TOL 2e-5

#include "rank_fixture.h"

static train_options base_options(void)
{
    train_options o = cpu_rank_options(STEPS);
    o.layers = 1;
    o.heads = 2;
    o.channels = 32;
    return o;
}

/* rank_capture: every parameter end to end, and every slot's scale and amax. */
static f8_status keep_rank(rank_out *r, trainer *t)
{
    gpt *m = trainer_model(t);
    f8_status st = grab_params(r, m);
    return st == F8_OK ? grab_scales(r, m->ctx) : st;
}

/* One run: P ranks (0: one rank without a communicator). out[P or 1].
 * bad_rank >= 0: that rank is given --steps 0, so it fails to start. */
static void run_bad(int P, const train_options *base, int steps, const char *save, rank_out *out, int bad_rank)
{
    const rank_run run = {.R = P, .P = 1, .steps = steps, .save = save, .capture = keep_rank, .bad_rank = bad_rank,
                          .expect_ok = bad_rank < 0};
    run_ranks(&run, base, out);
}

static void run(int P, const train_options *base, int steps, const char *save, rank_out *out)
{
    run_bad(P, base, steps, save, out, -1);
}

/* Every rank of a run equal to its rank 0 (parameters, scales, losses). */
static void check_ranks_agree(const char *what, rank_out *out, int P)
{
    for (int r = 1; r < P; r++) {
        CHECK(same_params(&out[r], &out[0]), "%s: rank %d's parameters differ from rank 0's", what, r);
        CHECK(same_scales(&out[r], &out[0]), "%s: rank %d's amaxes or scales differ from rank 0's", what, r);
        CHECK(memcmp(out[r].loss, out[0].loss, sizeof out[0].loss) == 0, "%s: rank %d reports other losses", what, r);
    }
}

int main(void)
{
    const train_options base = base_options();
    static rank_out one[1], dp1[1], dp2[2], dp2b[2], dp2g[2], dp4[4];
    run(0, &base, STEPS, NULL, one);
    run(1, &base, STEPS, NULL, dp1);
    run(2, &base, STEPS, NULL, dp2);
    run(4, &base, STEPS, NULL, dp4);
    const int Ps[3] = {1, 2, 4};
    rank_out *runs[3] = {dp1, dp2, dp4};
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "%d rank%s vs one rank", Ps[k], Ps[k] > 1 ? "s" : "");
        CHECK(runs[k][0].loss[0] == one[0].loss[0], "%s: step 1 loss %.9g vs %.9g: not bitwise", what,
              runs[k][0].loss[0], one[0].loss[0]);
        check_close(what, &runs[k][0], one, STEPS, 0);
        check_ranks_agree(what, runs[k], Ps[k]);
    }
    /* a BF16 model (the GPU default): gradients converted to FP32 for the
     * reduce-scatter, BF16 parameters all-gathered. One rank accumulates its
     * microbatches' gradients in BF16 (rounded at every add); the ranks' sums
     * are FP32, so the gradients differ at BF16 rounding, and the updates,
     * rounded to BF16 again, by a few BF16 ulps (seen: 7e-3 of the largest
     * parameter after 4 steps; 2^-8 = 3.9e-3 is one ulp) */
    {
        static rank_out b1[1], b2[2];
        train_options bb = base;
        bb.dtype = "bf16";
        run(0, &bb, STEPS, NULL, b1);
        run(2, &bb, STEPS, NULL, b2);
        CHECK(b2[0].loss[0] == b1[0].loss[0], "bf16, 2 ranks: step 1 loss not bitwise");
        double e = b2[0].n_params == b1[0].n_params ? max_rel(b2[0].params, b1[0].params, b1[0].n_params) : 1;
        double dl = fabs(b2[0].loss[STEPS - 1] - b1[0].loss[STEPS - 1]) / b1[0].loss[STEPS - 1];
        printf("  %-34s max |dp - ref| / max |ref| = %.2e, step losses rel <= %.2e\n", "bf16: 2 ranks vs one rank", e, dl);
        CHECK(e <= BF16_TOL && dl <= BF16_TOL, "bf16, 2 ranks: parameters %.3g, last loss %.3g apart (> %g)", e, dl,
              BF16_TOL);
        check_ranks_agree("bf16, 2 ranks", b2, 2);
        /* --grad-dtype fp32: FP32 main grads on one rank and on each rank (ZeRO-1 converts them as it does
         * BF16 ones), with and without --dp-overlap: the sums differ only in their order (FP32), so the
         * BF16 parameters end closer than with BF16 gradients */
        static rank_out f1[1], f2[2], f2o[2];
        bb.grad_dtype = "fp32";
        run(0, &bb, STEPS, NULL, f1);
        run(2, &bb, STEPS, NULL, f2);
        bb.dp_overlap = 1;
        run(2, &bb, STEPS, NULL, f2o);
        CHECK(f2[0].loss[0] == f1[0].loss[0] && f2o[0].loss[0] == f1[0].loss[0],
              "bf16 with fp32 gradients, 2 ranks: step 1 loss not bitwise");
        const double ef = f2[0].n_params == f1[0].n_params ? max_rel(f2[0].params, f1[0].params, f1[0].n_params) : 1;
        const double eo = f2o[0].n_params == f1[0].n_params ? max_rel(f2o[0].params, f1[0].params, f1[0].n_params) : 1;
        printf("  %-34s max |dp - ref| / max |ref| = %.2e (overlap %.2e; bf16 gradients %.2e)\n",
               "bf16, fp32 grads: 2 ranks vs one", ef, eo, e);
        CHECK(ef <= e && eo <= e && ef <= BF16_TOL, "bf16 with fp32 gradients, 2 ranks: parameters %.3g (overlap "
              "%.3g) apart, bf16 gradients %.3g", ef, eo, e);
        check_ranks_agree("bf16 with fp32 gradients, 2 ranks", f2, 2);
        check_ranks_agree("bf16 with fp32 gradients, 2 ranks, overlap", f2o, 2);
        release(b1, 1), release(b2, 2), release(f1, 1), release(f2, 2), release(f2o, 2);
    }
    /* overlap: one bucket per block, reduce-scattered from the backward's
     * grads_ready (the same sums in the same rank order; only the norm's
     * partition into shards differs), eager and graphed */
    {
        static rank_out o2[2], o4[4], o2g[2], oh[2], o1[1];
        train_options ov = base;
        ov.dp_overlap = 1;
        run(2, &ov, STEPS, NULL, o2);
        run(4, &ov, STEPS, NULL, o4);
        check_close("2 ranks, overlap, vs one rank", &o2[0], one, STEPS, 0);
        check_close("4 ranks, overlap, vs one rank", &o4[0], one, STEPS, 0);
        check_ranks_agree("2 ranks, overlap", o2, 2);
        check_ranks_agree("4 ranks, overlap", o4, 4);
        ov.graph = 1;
        run(2, &ov, STEPS, NULL, o2g);
        CHECK(same(&o2g[0], &o2[0], STEPS), "2 ranks with overlap: the CPU graph is not bitwise the eager run");
        /* its checkpoint is the one-rank layout too: into one rank without overlap */
        char opath[64];
        snprintf(opath, sizeof opath, "/tmp/f8_test_dp_ov_%ld.safetensors", (long)getpid());
        ov.graph = 0;
        run(2, &ov, 2, opath, oh);
        train_options ro1 = base;
        ro1.resume = opath;
        run(0, &ro1, 2, NULL, o1);
        check_close("overlap checkpoint resumed into 1", &o1[0], &o2[0], 2, 2);
        unlink(opath);
        release(o2, 2), release(o4, 4), release(o2g, 2), release(oh, 2), release(o1, 1);
    }
    /* determinism, and the CPU graph (collectives recorded and replayed) */
    run(2, &base, STEPS, NULL, dp2b);
    CHECK(same(&dp2b[0], &dp2[0], STEPS), "2 ranks run twice: not bitwise the same");
    train_options g = base;
    g.graph = 1;
    run(2, &g, STEPS, NULL, dp2g);
    CHECK(same(&dp2g[0], &dp2[0], STEPS), "2 ranks with the CPU graph: not bitwise the eager run");
    check_ranks_agree("2 ranks, graph", dp2g, 2);
    /* resume: 2 ranks write a checkpoint after 2 steps; resume into 2, 1 and 4 ranks */
    char path[64];
    snprintf(path, sizeof path, "/tmp/f8_test_dp_%ld.safetensors", (long)getpid());
    static rank_out half[2], r2[2], r1[1], r4[4];
    run(2, &base, 2, path, half);
    train_options ro = base;
    ro.resume = path;
    ro.given = 0;
    run(2, &ro, 2, NULL, r2);
    CHECK(r2[0].first == 2, "resumed at step %lld", (long long)r2[0].first);
    CHECK(memcmp(r2[0].loss, dp2[0].loss + 2, 2 * sizeof(double)) == 0 && same_params(&r2[0], &dp2[0]),
          "2 ranks resumed into 2: not bitwise the uninterrupted run");
    check_ranks_agree("resumed into 2", r2, 2);
    run(0, &ro, 2, NULL, r1);
    check_close("2-rank checkpoint resumed into 1", &r1[0], &dp2[0], 2, 2);
    run(4, &ro, 2, NULL, r4);
    check_close("2-rank checkpoint resumed into 4", &r4[0], &dp2[0], 2, 2);
    check_ranks_agree("resumed into 4", r4, 4);
    unlink(path);
    /* AdamW moments in BF16 and FP8: the sharded optimizer keeps them in their form */
    for (int f = 0; f < 2; f++) {
        static const char *const forms[2] = {"bf16", "fp8"};
        static const f8_ck_dtype dts[2] = {F8_CK_BF16, F8_CK_F8_E4M3};
        static rank_out m1[1], m2[2], mh[2], mr2[2], mr1[1], oh[1], or2[2], bad2[2];
        char what[96], mpath[96], opath[96];
        train_options mo = base;
        mo.adam_moments = forms[f];
        run(0, &mo, STEPS, NULL, m1);
        run(2, &mo, STEPS, NULL, m2);
        snprintf(what, sizeof what, "%s moments, 2 ranks vs one rank", forms[f]);
        CHECK(m2[0].loss[0] == m1[0].loss[0], "%s: step 1 loss %.9g vs %.9g: not bitwise", what, m2[0].loss[0],
              m1[0].loss[0]);
        const double e = m2[0].n_params == m1[0].n_params ? max_rel(m2[0].params, m1[0].params, m1[0].n_params) : 1;
        double dl = 0;
        for (int s = 0; s < STEPS; s++) dl = fmax(dl, fabs(m2[0].loss[s] - m1[0].loss[s]) / m1[0].loss[s]);
        printf("  %-36s parameters %.2e, losses %.2e (max |x - ref| / max |ref|)\n", what, e, dl);
        CHECK(e <= MOMENTS_TOL && dl <= MOMENTS_TOL, "%s: parameters %.3g, losses %.3g apart (> %g)", what, e, dl,
              MOMENTS_TOL);
        check_ranks_agree(what, m2, 2);
        /* the 2-rank checkpoint: the one-rank names, the moments in their form */
        snprintf(mpath, sizeof mpath, "/tmp/f8_test_dp_mo_%s_%ld.safetensors", forms[f], (long)getpid());
        run(2, &mo, 2, mpath, mh);
        {
            f8_ctx *ctx = NULL;
            f8_checkpoint *ck = load_on_cpu(mpath, &ctx);
            CHECK(ck != NULL, "%s: the 2-rank checkpoint does not load", forms[f]);
            const f8_ck_entry *m0 = ck ? f8_checkpoint_find_entry(ck, "optimizer.m.0") : NULL;
            const f8_ck_entry *v0 = ck ? f8_checkpoint_find_entry(ck, f ? "optimizer.v_sqrt.0" : "optimizer.v.0") : NULL;
            const char *rec = ck ? f8_checkpoint_metadata(ck, "optimizer.moments") : NULL;
            CHECK(m0 && v0 && m0->dtype == dts[f] && v0->dtype == dts[f] && rec && strcmp(rec, forms[f]) == 0,
                  "%s: the 2-rank checkpoint's moments are not %s (or not recorded as such)", forms[f], forms[f]);
            if (f) CHECK(ck && f8_checkpoint_find_entry(ck, "optimizer.m_scale_inv.0") &&
                             f8_checkpoint_find_entry(ck, "optimizer.v_sqrt_scale_inv.0"),
                         "fp8: the 2-rank checkpoint has no per-block scale_invs");
            f8_checkpoint_destroy(ck);
            f8_ctx_destroy(ctx);
        }
        train_options rm = base;
        rm.resume = mpath;
        run(2, &rm, 2, NULL, mr2);
        snprintf(what, sizeof what, "%s moments: 2 ranks resumed into 2", forms[f]);
        CHECK(mr2[0].first == 2 && memcmp(mr2[0].loss, m2[0].loss + 2, 2 * sizeof(double)) == 0 &&
                  same_params(&mr2[0], &m2[0]),
              "%s: not bitwise the uninterrupted run", what);
        run(0, &rm, 2, NULL, mr1);
        const double e1 = mr1[0].n_params == m2[0].n_params ? max_rel(mr1[0].params, m2[0].params, m2[0].n_params) : 1;
        printf("  %-36s parameters %.2e\n", "  ... resumed into 1", e1);
        CHECK(mr1[0].first == 2 && e1 <= MOMENTS_TOL, "%s moments: the 2-rank checkpoint resumed into 1: %.3g apart",
              forms[f], e1);
        /* a one-rank checkpoint into 2 ranks */
        snprintf(opath, sizeof opath, "/tmp/f8_test_dp_mo1_%s_%ld.safetensors", forms[f], (long)getpid());
        run(0, &mo, 2, opath, oh);
        train_options ro1 = base;
        ro1.resume = opath;
        run(2, &ro1, 2, NULL, or2);
        const double e2 = or2[0].n_params == m1[0].n_params ? max_rel(or2[0].params, m1[0].params, m1[0].n_params) : 1;
        printf("  %-36s parameters %.2e\n", "  ... one rank's resumed into 2", e2);
        CHECK(or2[0].first == 2 && e2 <= MOMENTS_TOL, "%s moments: a one-rank checkpoint resumed into 2: %.3g apart",
              forms[f], e2);
        check_ranks_agree("one rank's resumed into 2", or2, 2);
        /* the other form, given: refused before training */
        train_options other = rm;
        other.adam_moments = forms[1 - f];
        const rank_run refused = {.R = 2, .P = 1, .steps = 2, .capture = keep_rank, .bad_rank = -1, .expect_ok = 0};
        run_ranks(&refused, &other, bad2);
        CHECK(bad2[0].st != F8_OK && bad2[1].st != F8_OK && (strstr(bad2[0].err, "moments") || strstr(bad2[1].err, "moments")),
              "%s checkpoint resumed with --adam-moments %s: accepted, or refused for another reason (%s)", forms[f],
              forms[1 - f], bad2[0].err);
        unlink(mpath);
        unlink(opath);
        release(m1, 1), release(m2, 2), release(mh, 2), release(mr2, 2), release(mr1, 1), release(oh, 1);
        release(or2, 2), release(bad2, 2);
    }
    /* a rank that fails to start: the other ends with F8_ERR_COMM, not a hang */
    static rank_out bad[2];
    run_bad(2, &base, STEPS, NULL, bad, 1);
    CHECK(bad[1].st == F8_ERR_INVALID_ARGUMENT, "the bad rank: %s", f8_status_string(bad[1].st));
    CHECK(bad[0].st == F8_ERR_COMM && strstr(bad[0].err, "aborted") != NULL, "the other rank: %s: %s",
          f8_status_string(bad[0].st), bad[0].err);
    release(bad, 2);
    /* the multi-node bootstrap: rank 0 serves the id over TCP, rank 1 fetches it */
    {
        f8_comm_id id0, id1;
        for (int i = 0; i < F8_COMM_ID_BYTES; i++) id0.bytes[i] = (unsigned char)(i * 7 + 3);
        char port[16];
        snprintf(port, sizeof port, "%d", 20000 + (int)(getpid() % 20000));
        fflush(stdout);
        pid_t kid = fork();
        if (kid == 0) {
            memset(&id1, 0, sizeof id1);
            int ok = train_tcp_share_id(1, 2, "127.0.0.1", port, &id1) == 0 && memcmp(&id0, &id1, sizeof id0) == 0;
            _exit(ok ? 0 : 1);
        }
        CHECK(train_tcp_share_id(0, 2, NULL, port, &id0) == 0, "rank 0 serving the id on port %s", port);
        int status = 1;
        waitpid(kid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 did not get rank 0's id over TCP");
    }
    /* the launcher of f8_train --ranks 2 */
    train_options lo = base;
    lo.ranks = 2;
    const int rc = train_launch(&lo);
    CHECK(rc == 0 || rc == 2, "f8_train --ranks 2: exit status %d (0 or 2: it trained)", rc);
    lo.steps = 0;
    CHECK(train_launch(&lo) == 1, "f8_train --ranks 2 --steps 0: exit status 1");
    release(one, 1), release(dp1, 1), release(dp2, 2), release(dp2b, 2), release(dp2g, 2), release(dp4, 4);
    release(half, 2), release(r2, 2), release(r1, 1), release(r4, 4);
    return test_finish("test_dp");
}
