/*
 * tp_fixture.h — what the tensor- and sequence-parallel trainer tests
 * (test_tp_train, test_sp_train) share on top of rank_fixture.h's runner:
 * their model, a run of R CPU ranks in TP groups of P that keeps each
 * rank's model in the one-rank layout (gathered: a collective) and every
 * FP8 slot's scale and newest amax, and the TP comparisons: every rank in
 * agreement (the DP replicas of one TP index too), and the three layouts
 * against one rank. Include after train/tp.c, train/trainer.c and
 * trainer_fixture.h, with STEPS (steps a run keeps), MAXR (most ranks),
 * LOSS_TOL and PARAM_TOL defined.
 */
#ifndef F8_TESTS_TP_FIXTURE_H
#define F8_TESTS_TP_FIXTURE_H

#include "rank_fixture.h"

/* The GPT both tests train: 2 layers, 4 heads (TP 4 gives each rank one),
 * 64 channels, STEPS steps. */
static train_options tp_base_options(void)
{
    train_options o = cpu_rank_options(STEPS);
    o.layers = 2;
    o.heads = 4;
    o.channels = 64;
    return o;
}

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

/* rank_capture: the gathered model, and with FP8 on the slots' scales. */
static f8_status keep_rank(rank_out *r, trainer *t)
{
    gpt *m = trainer_model(t);
    f8_status st = grab_model(r, m);
    if (st == F8_OK && r->o.fp8) st = grab_scales(r, m->ctx);
    return st;
}

/* R ranks in TP groups of P (R = 0: one rank, no communicator) into out[R or 1]. */
static void run(int R, int P, const train_options *base, int steps, const char *save, rank_out *out, int expect_ok)
{
    const rank_run run = {.R = R, .P = P, .steps = steps, .save = save, .capture = keep_rank, .bad_rank = -1,
                          .expect_ok = expect_ok};
    run_ranks(&run, base, out);
}

/* A model trainer_create refuses (options made in code skip the option
 * check, so the trainer's own check must catch it): R ranks in TP groups of
 * P, and rank 0's message names the cause. */
static void check_run_refused(const char *what, const train_options *o, int R, int P, const char *needle)
{
    rank_out bad[MAXR];
    run(R, P, o, 1, NULL, bad, 0);
    CHECK(bad[0].st == F8_ERR_INVALID_ARGUMENT && strstr(bad[0].err, needle), "%s: %s: %s", what,
          f8_status_string(bad[0].st), bad[0].err);
    release(bad, R ? R : 1);
}

/* Determinism: TP 2 of o (tag: "" or "SP ") run again, and with the CPU
 * graph (collectives recorded and replayed), bitwise ref, its eager run. */
static void check_tp2_repeats(const char *tag, const train_options *o, const rank_out *ref)
{
    rank_out again[2], graphed[2];
    train_options g = *o;
    g.graph = 1;
    run(2, 2, o, STEPS, NULL, again, 1);
    CHECK(same(&again[0], ref, STEPS), "%sTP 2 run twice: not bitwise the same", tag);
    run(2, 2, &g, STEPS, NULL, graphed, 1);
    CHECK(same(&graphed[0], ref, STEPS), "%sTP 2 with the CPU graph: not bitwise the eager run", tag);
    release(again, 2), release(graphed, 2);
}

/* A checkpoint that `half` wrote after 2 steps, restored (resume: its
 * path) into one rank without a step: bitwise the model written, whatever
 * layout wrote it. */
static void check_restored_into_one(const char *what, const train_options *resume, const rank_out *half)
{
    rank_out into1[1];
    run(0, 1, resume, 0, NULL, into1, 1);
    CHECK(into1[0].first == 2 && same_params(&into1[0], half), "the %s checkpoint restored into one rank: not "
          "bitwise the model it wrote", what);
    release(into1, 1);
}

/* Creation: TP 2's model of o, gathered before a step, is bitwise one
 * rank's (the shards are its parameters). tag prefixes the message. */
static inline void check_created_bitwise(const char *tag, const train_options *o)
{
    static rank_out a1[1], a2[2];
    run(0, 1, o, 0, NULL, a1, 1);
    run(2, 2, o, 0, NULL, a2, 1);
    CHECK(a1[0].n_params > 0 && same_params(&a2[0], &a1[0]),
          "%sTP 2 at creation: the gathered model is not bitwise one rank's", tag);
    release(a1, 1), release(a2, 2);
}

/* Every rank: the same scales, losses and replicated parameters; R > P: the
 * replicas of one TP index the same model. */
static void check_ranks_agree(const char *what, const rank_out *out, int R, int P)
{
    for (int r = 1; r < R; r++) {
        CHECK(same_scales(&out[r], &out[0]), "%s: rank %d's amaxes or scales differ from rank 0's", what, r);
        CHECK(memcmp(out[r].loss, out[0].loss, sizeof out[0].loss) == 0, "%s: rank %d reports other losses", what, r);
        CHECK(out[r].n_shared == out[0].n_shared &&
                  memcmp(out[r].shared, out[0].shared, sizeof(float) * (size_t)out[0].n_shared) == 0,
              "%s: rank %d's model differs from rank 0's", what, r);
        const rank_out *twin = &out[r % P]; /* same TP index, replica 0 */
        CHECK(same_params(&out[r], twin), "%s: rank %d's parameters differ from its TP twin's in replica 0", what, r);
    }
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

#endif /* F8_TESTS_TP_FIXTURE_H */
