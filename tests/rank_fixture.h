/*
 * rank_fixture.h — the CPU-rank runner of the multi-rank trainer tests
 * (test_dp, test_fp8w_train, and through tp_fixture.h test_tp_train and
 * test_sp_train): run a trainer on R ranks, each a thread with the
 * launcher's groups (all ranks; with TP groups of P, one group per TP group
 * and one per DP replica set), R = 0 being one rank without a communicator,
 * the oracle. Each rank keeps its step losses and whatever the test's
 * capture takes from the trainer after the steps: the parameters, FP8
 * scales, codes, masters. Then runs are compared: within LOSS_TOL /
 * PARAM_TOL of a reference, or bitwise.
 * Include after train/launch.c, train/trainer.c and trainer_fixture.h, with
 * MAXR (most ranks of a run), LOSS_TOL and PARAM_TOL defined. Everything
 * here is static inline: not every test uses every helper.
 */
#ifndef F8_TESTS_RANK_FIXTURE_H
#define F8_TESTS_RANK_FIXTURE_H

#include <pthread.h>

#define RANK_MAX_STEPS 64 /* the losses a rank keeps (test_fp8w_train's longest run is 30 steps) */

/* The multi-rank tests' runs: `steps` steps of 4 microbatches (--grad-accum
 * 4, split among 1, 2 or 4 ranks) of 2 sequences of 16 tokens on the CPU,
 * eager; each test sets its model's shape and what else it varies. */
static inline train_options cpu_rank_options(int64_t steps)
{
    train_options o = quiet_run_options("cpu", steps);
    o.seq = 16;
    o.batch = 2;
    o.grad_accum = 4;
    o.graph = 0;
    return o;
}

/* Every group of one run: g[0] spans all ranks; with TP, g[1..D] the TP
 * groups, g[D+1..D+P] the DP groups. */
typedef struct run_groups {
    f8_comm_group *g[1 + 2 * MAXR];
    int n;
} run_groups;

typedef struct rank_out rank_out;

/* What a test keeps of a rank once its steps (and save) are done. Called on
 * the rank's thread by every rank of the run, so it may be a collective. */
typedef f8_status (*rank_capture)(rank_out *r, trainer *t);

/* What one rank saw. A capture fills the parts its test compares; the rest
 * stay empty (NULL, 0), and the comparisons below skip them. */
struct rank_out {
    train_options o;
    const run_groups *groups; /* every group of the run, aborted when this rank fails */
    rank_capture capture;
    int steps;                /* optimizer steps to take */
    const char *save;         /* checkpoint after the steps (collective), or NULL */
    double loss[RANK_MAX_STEPS];
    int64_t first;            /* steps done before (resumed) */
    float *params;            /* the parameters as FP32, in the order the capture took them */
    int64_t n_params;
    float *shared;            /* TP: the model without the row-parallel biases (zero off TP rank 0) */
    int64_t n_shared;
    float *scales;            /* every slot's scale then its newest amax, both directions */
    int n_scales;
    float *masters;           /* --fp8-weights: the FP32 masters, in the one-rank layout */
    int64_t n_masters;
    uint8_t *codes;           /* --fp8-weights: every FP8 weight's codes, then its scale_inv's 4 bytes */
    int64_t n_codes;
    int64_t hp_bytes, fp8_bytes, n8; /* with dp: dp_gathered_bytes after the run; the FP8 buckets' elements */
    f8_status st;
    char err[512];
};

/* One run: R ranks in TP groups of P (R = 0: one rank, no communicator;
 * P = 1: data parallel only). */
typedef struct rank_run {
    int R, P;
    int steps;           /* optimizer steps each rank takes */
    const char *save;    /* checkpoint after the steps, or NULL */
    rank_capture capture;
    int bad_rank;        /* >= 0: that rank is given --steps 0, so it fails to start; -1: none */
    int expect_ok;       /* CHECK that every rank ended with F8_OK */
} rank_run;

static inline void *rank_thread(void *arg)
{
    rank_out *r = (rank_out *)arg;
    trainer *t = NULL;
    r->st = trainer_create(&r->o, &t, r->err, sizeof r->err);
    if (r->st == F8_OK) {
        r->first = trainer_steps_done(t);
        for (int s = 0; s < r->steps && r->st == F8_OK; s++) r->st = trainer_step(t, &r->loss[s]);
        if (r->st == F8_OK && r->save) r->st = trainer_save(t, r->save);
        if (r->st == F8_OK) r->st = r->capture(r, t);
        if (r->st != F8_OK) snprintf(r->err, sizeof r->err, "%s", trainer_error(t));
    }
    if (r->st != F8_OK) { /* leave nobody waiting */
        for (int k = 0; r->groups && k < r->groups->n; k++) f8_comm_group_abort(r->groups->g[k]);
    }
    trainer_destroy(t);
    return NULL;
}

/* Runs `run` from base into out[R or 1], each rank with rank_options' view
 * of base (as the launcher gives it) and the launcher's groups. */
static inline void run_ranks(const rank_run *run, const train_options *base, rank_out *out)
{
    const int R = run->R, P = run->P, n = R ? R : 1, D = R ? R / P : 1;
    run_groups rg; /* the threads are joined before it goes */
    char err[256];
    if (R > MAXR || run->steps > RANK_MAX_STEPS) die("run_ranks: more ranks or steps than a rank_out holds", NULL);
    memset(&rg, 0, sizeof rg);
    if (R) {
        rg.n = P > 1 ? 1 + D + P : 1;
        for (int k = 0; k < rg.n; k++)
            if (f8_comm_group_create(k == 0 ? R : k <= D ? P : D, &rg.g[k], err, sizeof err) != F8_OK) die(err, NULL);
    }
    pthread_t th[MAXR];
    for (int r = 0; r < n; r++) {
        memset(&out[r], 0, sizeof out[r]);
        out[r].o = R ? train_rank_options(base, r, R) : *base;
        out[r].o.tp = P;
        if (R) {
            out[r].o.comm_group = rg.g[0];
            if (P > 1) out[r].o.tp_group = rg.g[1 + r / P], out[r].o.dp_group = rg.g[1 + D + r % P];
        }
        if (r == run->bad_rank) out[r].o.steps = 0;
        out[r].steps = run->steps;
        out[r].save = run->save;
        out[r].capture = run->capture;
        out[r].groups = &rg;
        if (pthread_create(&th[r], NULL, rank_thread, &out[r]) != 0) die("pthread_create", NULL);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL), out[r].groups = NULL;
    for (int k = 0; k < rg.n; k++) f8_comm_group_destroy(rg.g[k]);
    for (int r = 0; r < n && run->expect_ok; r++)
        CHECK(out[r].st == F8_OK, "R=%d TP=%d rank %d: %s: %s", R, P, r, f8_status_string(out[r].st), out[r].err);
}

static inline void release(rank_out *out, int n)
{
    for (int r = 0; r < n; r++)
        free(out[r].params), free(out[r].shared), free(out[r].scales), free(out[r].masters), free(out[r].codes);
}

typedef struct param_grab {
    rank_out *r;
    f8_ctx *ctx;
} param_grab;

/* param_each callback: append the parameter to r->params as FP32 (the
 * model may be BF16; an FP8 weight is dequantized with its scale_inv). */
static inline f8_status grab_param(void *user, const model_param *e)
{
    const f8_tensor *p = &e->value;
    param_grab *pg = (param_grab *)user;
    rank_out *r = pg->r;
    const int64_t n = p->rows * p->cols;
    float *v = (float *)realloc(r->params, (size_t)(r->n_params + n) * 4);
    if (!v) return F8_ERR_OUT_OF_MEMORY;
    r->params = v;
    void *tmp = NULL; /* the FP32 copy, in backend memory */
    f8_status st = f8_ctx_alloc(pg->ctx, (size_t)n * 4, &tmp);
    f8_tensor dst = f8_tensor_make(tmp, F8_DTYPE_FP32, p->rows, p->cols);
    if (st == F8_OK) st = f8_tensor_convert(pg->ctx, p, &dst);
    if (st == F8_OK) st = f8_ctx_download(pg->ctx, r->params + r->n_params, tmp, (size_t)n * 4);
    f8_ctx_free(pg->ctx, tmp);
    r->n_params += n;
    return st;
}

/* Every parameter of m, end to end in the table's order. */
static inline f8_status grab_params(rank_out *r, gpt *m)
{
    param_grab pg = {r, m->ctx};
    return param_each(&m->params, 0, grab_param, &pg);
}

/* Every slot's scale and newest amax, both directions. f8_ctx_update_scales
 * rolls the history left and writes the step's amax to row L-1 (row 0, the
 * accumulator, is then 0). */
static inline f8_status grab_scales(rank_out *r, f8_ctx *ctx)
{
    const int nf = f8_ctx_slot_count(ctx, F8_DIR_FORWARD), nb = f8_ctx_slot_count(ctx, F8_DIR_BACKWARD);
    const int L = f8_ctx_recipe(ctx)->amax_history_len;
    r->n_scales = 2 * (nf + nb);
    r->scales = (float *)xmalloc(sizeof(float) * (size_t)(r->n_scales + 1));
    float *hist = (float *)xmalloc(sizeof(float) * (size_t)L);
    f8_status st = F8_OK;
    for (int k = 0; k < nf + nb && st == F8_OK; k++) {
        f8_slot s = {k < nf ? F8_DIR_FORWARD : F8_DIR_BACKWARD, k < nf ? k : k - nf};
        st = f8_slot_read(ctx, s, &r->scales[2 * k], NULL, hist);
        r->scales[2 * k + 1] = hist[L - 1];
    }
    free(hist);
    return st;
}

/* n bytes of a and b equal (empty parts are equal; no memcmp of NULL). */
static inline int same_bytes(const void *a, const void *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

/* The parameters bitwise. */
static inline int same_params(const rank_out *a, const rank_out *b)
{
    return a->n_params == b->n_params && same_bytes(a->params, b->params, sizeof(float) * (size_t)a->n_params);
}

/* Every slot's scale and amax bitwise. */
static inline int same_scales(const rank_out *a, const rank_out *b)
{
    return a->n_scales == b->n_scales && same_bytes(a->scales, b->scales, sizeof(float) * (size_t)a->n_scales);
}

/* The state after the run bitwise: parameters, scales, FP8 codes, masters
 * (the parts a test does not capture are empty on both sides). */
static inline int same_state(const rank_out *a, const rank_out *b)
{
    return same_params(a, b) && same_scales(a, b) && a->n_codes == b->n_codes &&
           same_bytes(a->codes, b->codes, (size_t)a->n_codes) &&
           a->n_masters == b->n_masters && same_bytes(a->masters, b->masters, sizeof(float) * (size_t)a->n_masters);
}

/* The first `steps` losses and the state bitwise. */
static inline int same(const rank_out *a, const rank_out *b, int steps)
{
    return memcmp(a->loss, b->loss, sizeof(double) * (size_t)steps) == 0 && same_state(a, b);
}

/* a's `steps` losses against ref's from step ref_from on, each within
 * LOSS_TOL relative (one CHECK a step); returns the largest difference. */
static inline double check_losses_close(const char *what, const rank_out *a, const rank_out *ref, int steps,
                                        int ref_from)
{
    double worst = 0;
    for (int s = 0; s < steps; s++) {
        const double d = fabs(a->loss[s] - ref->loss[ref_from + s]) / fabs(ref->loss[ref_from + s]);
        worst = fmax(worst, d);
        CHECK(d <= LOSS_TOL, "%s: step %d loss %.9g vs %.9g (rel %.3g > %g)", what, s + 1, a->loss[s],
              ref->loss[ref_from + s], d, LOSS_TOL);
    }
    return worst;
}

/* A run against the reference: the losses, then the parameters within
 * PARAM_TOL of the largest. */
static inline void check_close(const char *what, const rank_out *a, const rank_out *ref, int steps, int ref_from)
{
    const double worst = check_losses_close(what, a, ref, steps, ref_from);
    CHECK(a->n_params == ref->n_params, "%s: %lld parameters vs %lld", what, (long long)a->n_params,
          (long long)ref->n_params);
    if (a->n_params != ref->n_params) return;
    const double e = max_rel(a->params, ref->params, a->n_params);
    CHECK(e <= PARAM_TOL, "%s: parameters differ by %.3g of the largest (> %g)", what, e, PARAM_TOL);
    printf("  %-36s parameters %.2e, losses %.2e (max |x - ref| / max |ref|)\n", what, e, worst);
}

/* The checkpoint at path, loaded on a CPU ctx of its own (*ctx; destroy
 * both after), or NULL. For looking at what a run wrote. */
static inline f8_checkpoint *load_on_cpu(const char *path, f8_ctx **ctx)
{
    f8_checkpoint *ck = NULL;
    char err[256];
    f8_ctx_config cc = f8_ctx_config_default();
    cc.backend = F8_BACKEND_CPU;
    *ctx = NULL;
    if (f8_ctx_create(&cc, ctx, err, sizeof err) != F8_OK || f8_checkpoint_load(*ctx, path, &ck) != F8_OK) return NULL;
    return ck;
}

#endif /* F8_TESTS_RANK_FIXTURE_H */
