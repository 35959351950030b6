/*
 * trainer_fd.h — what the model tests (test_gpt, test_llama_train) share: a
 * trainer made or the test stopped, the mean loss of the model's current
 * tokens, and the finite-difference check of one parameter-table entry
 * (param_each's callback), a few steps run with their losses and peak, and
 * two models compared bit for bit. Include
 * after check.h, io/checkpoint.h and f8train.h.
 */
#ifndef F8_TESTS_TRAINER_FD_H
#define F8_TESTS_TRAINER_FD_H

static trainer *make(const train_options *o)
{
    trainer *t = NULL;
    char err[512] = "";
    if (trainer_create(o, &t, err, sizeof err) != F8_OK) {
        fprintf(stderr, "trainer_create: %s\n", err);
        exit(1);
    }
    return t;
}

/* steps steps of o: their losses, the trainer kept (the caller destroys
 * it) and, peak not NULL, its peak memory. */
static inline trainer *run_steps(const train_options *o, int steps, double *losses, size_t *peak)
{
    trainer *t = make(o);
    for (int s = 0; s < steps; s++) CHECK_OK(NULL, trainer_step(t, &losses[s]));
    if (peak) *peak = trainer_peak_memory(t);
    return t;
}

/* Mean loss of the current tokens/targets (a forward in FP32). */
static double model_loss(gpt *m)
{
    if (gpt_forward(m, m->c.batch, 0, 1.0f, F8_MICROBATCH_NONE) != F8_OK) die("forward", m->ctx);
    float *l = (float *)xmalloc((size_t)m->T * 4);
    f8_ctx_download(m->ctx, l, m->losses, (size_t)m->T * 4);
    double s = 0;
    for (int64_t i = 0; i < m->T; i++) s += l[i];
    free(l);
    return s / (double)m->T;
}

typedef struct fd_ctx {
    gpt *m;
    int index, checked, bad;
    double worst;
} fd_ctx;

/* Check 3 elements of each parameter: analytic gradient against
 * (L(p + h) - L(p - h)) / 2h of the mean loss. */
static f8_status fd_param(void *user, const model_param *e)
{
    const f8_tensor *p = &e->value, *g = &e->grad;
    fd_ctx *f = (fd_ctx *)user;
    const int64_t n = p->rows * p->cols;
    float *pv = (float *)xmalloc((size_t)n * 4), *gv = (float *)xmalloc((size_t)n * 4);
    f8_ctx_download(f->m->ctx, pv, p->data, (size_t)n * 4);
    f8_ctx_download(f->m->ctx, gv, g->data, (size_t)n * 4);
    for (int s = 0; s < 3; s++) {
        int64_t i = (int64_t)((s * 7919 + f->index * 104729) % n);
        const float h = 1e-2f, keep = pv[i];
        pv[i] = keep + h;
        f8_ctx_upload(f->m->ctx, p->data, pv, (size_t)n * 4);
        double lp = model_loss(f->m);
        pv[i] = keep - h;
        f8_ctx_upload(f->m->ctx, p->data, pv, (size_t)n * 4);
        double lm = model_loss(f->m);
        pv[i] = keep;
        f8_ctx_upload(f->m->ctx, p->data, pv, (size_t)n * 4);
        double fd = (lp - lm) / (2.0 * h), an = gv[i];
        double err = fabs(fd - an) / (fabs(fd) + 2e-4);
        if (err > f->worst) f->worst = err;
        f->checked++;
        if (err > 5e-2) {
            f->bad++;
            fprintf(stderr, "param %d element %lld: analytic %.6g, finite difference %.6g\n", f->index, (long long)i, an, fd);
        }
    }
    f->index++;
    free(pv);
    free(gv);
    return F8_OK;
}

/* One training forward + backward of the trainer's first batch from zero
 * gradients (grad_scale 1/T: the mean loss's), then 3 elements of every
 * table entry against finite differences into *f (f->m is set).
 * head_done (NULL: not wanted): whether that forward ran the head's backward. */
static void fd_check_trainer(trainer *t, fd_ctx *f, int *head_done)
{
    gpt *m = trainer_model(t);
    int32_t *x = (int32_t *)xmalloc((size_t)m->T * 8);
    CHECK_OK(m->ctx, data_train_batch(t->data, 0, 0, (int)m->c.batch, (int)m->c.seq, x, x + m->T));
    f8_ctx_upload(m->ctx, m->tokens, x, (size_t)m->T * 4);
    f8_ctx_upload(m->ctx, m->targets, x + m->T, (size_t)m->T * 4);
    CHECK_OK(m->ctx, gpt_zero_grad(m));
    CHECK_OK(m->ctx, gpt_forward(m, m->c.batch, 1, 1.0f / (float)m->T, F8_MICROBATCH_FIRST));
    if (head_done) *head_done = m->head_done;
    CHECK_OK(m->ctx, gpt_backward(m));
    memset(f, 0, sizeof *f);
    f->m = m;
    CHECK_OK(m->ctx, param_each(&m->params, 0, fd_param, f));
    free(x);
}

/* Two models' checkpoints (parameters and FP8 scaling state) serialize to
 * the same bytes. Needs io/checkpoint.h. */
static int models_bitwise_equal(gpt *mu, gpt *mr)
{
    f8_checkpoint *a = NULL, *b = NULL;
    CHECK_OK(mu->ctx, f8_checkpoint_create(mu->ctx, &a));
    CHECK_OK(mr->ctx, f8_checkpoint_create(mr->ctx, &b));
    CHECK_OK(mu->ctx, gpt_checkpoint_add(mu, a));
    CHECK_OK(mr->ctx, gpt_checkpoint_add(mr, b));
    unsigned char *sa = NULL, *sb = NULL;
    size_t na = 0, nb = 0;
    CHECK_OK(NULL, f8i_checkpoint_serialize(a, &sa, &na));
    CHECK_OK(NULL, f8i_checkpoint_serialize(b, &sb, &nb));
    const int same = na == nb && sa && sb && memcmp(sa, sb, na) == 0;
    free(sa);
    free(sb);
    f8_checkpoint_destroy(a);
    f8_checkpoint_destroy(b);
    return same;
}

#endif /* F8_TESTS_TRAINER_FD_H */
