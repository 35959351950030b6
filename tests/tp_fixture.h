/*
 * tp_fixture.h — what the tensor- and sequence-parallel trainer tests
 * (test_tp_train, test_sp_train) share: run a trainer on R CPU ranks in TP
 * groups of P (R = 0: one rank, the oracle), each rank a thread with the
 * launcher's groups; keep its step losses, its model in the one-rank layout
 * (gathered: a collective), and every FP8 slot's scale and last amax; and
 * compare runs: within a tolerance of the oracle, bitwise among ranks, or
 * bitwise between two runs. Include after train/tp.c, train/trainer.c and
 * trainer_fixture.h, with STEPS (steps a run keeps), MAXR (most ranks),
 * LOSS_TOL and PARAM_TOL defined.
 */
#ifndef F8_TESTS_TP_FIXTURE_H
#define F8_TESTS_TP_FIXTURE_H

#include <pthread.h>

typedef struct run_groups {
    f8_comm_group *g[1 + 2 * MAXR];
    int n;
} run_groups;

typedef struct rank_out {
    train_options o;
    const run_groups *groups; /* every group of the run, aborted when this rank fails */
    int steps;
    const char *save;
    double loss[STEPS];
    int64_t first;
    float *params;   /* the model in the one-rank layout (every "model." tensor, name order) */
    int64_t n_params;
    float *shared;   /* the same without the row-parallel biases (zero off TP rank 0) */
    int64_t n_shared;
    float *scales;   /* every slot's scale and last amax */
    int n_scales;
    f8_status st;
    char err[512];
} rank_out;

static void append(float **v, int64_t *n, const float *src, int64_t k)
{
    *v = (float *)realloc(*v, sizeof(float) * (size_t)(*n + k + 1));
    if (!*v) die("out of memory", NULL);
    memcpy(*v + *n, src, sizeof(float) * (size_t)k);
    *n += k;
}

/* The model as one rank would checkpoint it (TP: gathered, a collective). */
static f8_status grab_model(rank_out *r, gpt *m)
{
    f8_checkpoint *ck = NULL;
    f8_status st = f8_checkpoint_create(m->ctx, &ck);
    if (st == F8_OK) st = gpt_checkpoint_add(m, ck);
    for (size_t i = 0; st == F8_OK && i < f8i_checkpoint_count(ck); i++) {
        const f8i_ck_entry *e = f8i_checkpoint_entry(ck, i);
        if ((e->dtype != F8I_CK_F32 && e->dtype != F8I_CK_BF16) || strncmp(e->name, "model.", 6) != 0 ||
            strstr(e->name, "amax") || strstr(e->name, "scale"))
            continue;
        const int64_t k = (int64_t)(e->bytes / (e->dtype == F8I_CK_F32 ? 4 : 2));
        float *v = (float *)xmalloc(sizeof(float) * (size_t)(k + 1));
        for (int64_t j = 0; j < k; j++) {
            uint16_t h;
            if (e->dtype == F8I_CK_F32) memcpy(&v[j], e->data + 4 * j, 4);
            else memcpy(&h, e->data + 2 * j, 2), v[j] = f8_bf16_to_float(h);
        }
        append(&r->params, &r->n_params, v, k);
        const size_t n = strlen(e->name);
        const int rank0_bias = (n > 9 && strcmp(e->name + n - 9, "proj.bias") == 0) || strstr(e->name, "fc2_bias");
        if (!rank0_bias) append(&r->shared, &r->n_shared, v, k);
        free(v);
    }
    f8_checkpoint_destroy(ck);
    return st;
}

static f8_status grab_scales(rank_out *r, f8_ctx *ctx)
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
        r->scales[2 * k + 1] = hist[L - 1]; /* the newest amax, rolled to the end */
    }
    free(hist);
    return st;
}

static void *rank_thread(void *arg)
{
    rank_out *r = (rank_out *)arg;
    trainer *t = NULL;
    r->st = trainer_create(&r->o, &t, r->err, sizeof r->err);
    if (r->st == F8_OK) {
        r->first = trainer_steps_done(t);
        for (int s = 0; s < r->steps && r->st == F8_OK; s++) r->st = trainer_step(t, &r->loss[s]);
        if (r->st == F8_OK && r->save) r->st = trainer_save(t, r->save);
        gpt *m = trainer_model(t);
        if (r->st == F8_OK) r->st = grab_model(r, m);
        if (r->st == F8_OK && r->o.fp8) r->st = grab_scales(r, m->ctx);
        if (r->st != F8_OK) snprintf(r->err, sizeof r->err, "%s", trainer_error(t));
    }
    if (r->st != F8_OK) { /* leave nobody waiting */
        for (int k = 0; r->groups && k < r->groups->n; k++) f8_comm_group_abort(r->groups->g[k]);
    }
    trainer_destroy(t);
    return NULL;
}

/* R ranks in TP groups of P (R = 0: one rank, no communicator). */
static void run(int R, int P, const train_options *base, int steps, const char *save, rank_out *out, int expect_ok)
{
    const int n = R ? R : 1, D = R ? R / P : 1;
    static run_groups rg;
    char err[256];
    memset(&rg, 0, sizeof rg);
    if (R) {
        rg.n = P > 1 ? 1 + D + P : 1;
        for (int k = 0; k < rg.n; k++)
            if (f8_comm_group_create(k == 0 ? R : k <= D ? P : D, &rg.g[k], err, sizeof err) != F8_OK) die(err, NULL);
    }
    pthread_t th[MAXR];
    for (int r = 0; r < n; r++) {
        memset(&out[r], 0, sizeof out[r]);
        out[r].o = R ? rank_options(base, r, R) : *base;
        out[r].o.tp = P;
        if (R) {
            out[r].o.comm_group = rg.g[0];
            if (P > 1) out[r].o.tp_group = rg.g[1 + r / P], out[r].o.dp_group = rg.g[1 + D + r % P];
        }
        out[r].steps = steps;
        out[r].save = save;
        out[r].groups = &rg;
        if (pthread_create(&th[r], NULL, rank_thread, &out[r]) != 0) die("pthread_create", NULL);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (int k = 0; k < rg.n; k++) f8_comm_group_destroy(rg.g[k]);
    for (int r = 0; r < n && expect_ok; r++)
        CHECK(out[r].st == F8_OK, "R=%d TP=%d rank %d: %s: %s", R, P, r, f8_status_string(out[r].st), out[r].err);
}

static void release(rank_out *out, int n)
{
    for (int r = 0; r < n; r++) free(out[r].params), free(out[r].shared), free(out[r].scales);
}

/* Every rank: the same scales, losses and replicated parameters; R > P: the
 * replicas of one TP index the same model. */
static void check_ranks_agree(const char *what, const rank_out *out, int R, int P)
{
    for (int r = 1; r < R; r++) {
        CHECK(out[r].n_scales == out[0].n_scales &&
                  (!out[0].n_scales || memcmp(out[r].scales, out[0].scales, sizeof(float) * (size_t)out[0].n_scales) == 0),
              "%s: rank %d's amaxes or scales differ from rank 0's", what, r);
        CHECK(memcmp(out[r].loss, out[0].loss, sizeof out[0].loss) == 0, "%s: rank %d reports other losses", what, r);
        CHECK(out[r].n_shared == out[0].n_shared &&
                  memcmp(out[r].shared, out[0].shared, sizeof(float) * (size_t)out[0].n_shared) == 0,
              "%s: rank %d's model differs from rank 0's", what, r);
        const rank_out *twin = &out[r % P]; /* same TP index, replica 0 */
        CHECK(out[r].n_params == twin->n_params &&
                  memcmp(out[r].params, twin->params, sizeof(float) * (size_t)twin->n_params) == 0,
              "%s: rank %d's parameters differ from its TP twin's in replica 0", what, r);
    }
}

static void check_close(const char *what, const rank_out *a, const rank_out *ref, int steps, int ref_from)
{
    double worst = 0;
    for (int s = 0; s < steps; s++) {
        const double d = fabs(a->loss[s] - ref->loss[ref_from + s]) / fabs(ref->loss[ref_from + s]);
        worst = fmax(worst, d);
        CHECK(d <= LOSS_TOL, "%s: step %d loss %.9g vs %.9g (rel %.3g > %g)", what, s + 1, a->loss[s],
              ref->loss[ref_from + s], d, LOSS_TOL);
    }
    CHECK(a->n_params == ref->n_params, "%s: %lld parameters vs %lld", what, (long long)a->n_params,
          (long long)ref->n_params);
    if (a->n_params != ref->n_params) return;
    const double e = max_rel(a->params, ref->params, a->n_params);
    CHECK(e <= PARAM_TOL, "%s: parameters differ by %.3g of the largest (> %g)", what, e, PARAM_TOL);
    printf("  %-36s parameters %.2e, losses %.2e (max |x - ref| / max |ref|)\n", what, e, worst);
}

/* The three layouts every TP test holds against one rank (one[0]): TP 2,
 * TP 4 and DP 2 x TP 2 of o for `steps` steps (into tp2[2], tp4[4], dt[4];
 * the caller releases them). Each close to one rank, its ranks in agreement,
 * and TP 2 with one rank's FP8 slots. tag prefixes the names ("" or "SP "). */
static void check_tp_layouts(const char *tag, const train_options *o, int steps, const rank_out *one, rank_out *tp2,
                             rank_out *tp4, rank_out *dt)
{
    const struct {
        const char *name;
        rank_out *r;
        int R, P;
    } lay[3] = {{"TP 2", tp2, 2, 2}, {"TP 4", tp4, 4, 4}, {"DP 2 x TP 2", dt, 4, 2}};
    char what[64];
    for (int k = 0; k < 3; k++) run(lay[k].R, lay[k].P, o, steps, NULL, lay[k].r, 1);
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof what, "%s%s vs one rank", tag, lay[k].name);
        check_close(what, &lay[k].r[0], one, steps, 0);
    }
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof what, "%s%s", tag, lay[k].name);
        check_ranks_agree(what, lay[k].r, lay[k].R, lay[k].P);
    }
    CHECK(tp2[0].n_scales == one[0].n_scales && tp2[0].n_scales > 0, "%sTP 2: %d FP8 slots, one rank %d", tag,
          tp2[0].n_scales, one[0].n_scales);
    snprintf(what, sizeof what, "%sTP 2", tag);
    if (tp2[0].n_scales == one[0].n_scales)
        printf("  %-36s scales and amaxes %.2e of one rank's (the same slots)\n", what,
               max_rel(tp2[0].scales, one[0].scales, one[0].n_scales));
}

static int same(const rank_out *a, const rank_out *b, int steps)
{
    return memcmp(a->loss, b->loss, sizeof(double) * (size_t)steps) == 0 && a->n_params == b->n_params &&
           memcmp(a->params, b->params, sizeof(float) * (size_t)a->n_params) == 0 && a->n_scales == b->n_scales &&
           (!a->n_scales || memcmp(a->scales, b->scales, sizeof(float) * (size_t)a->n_scales) == 0);
}

#endif /* F8_TESTS_TP_FIXTURE_H */
