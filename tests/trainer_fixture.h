/*
 * trainer_fixture.h — what the trainer tests (test_gpt, test_dp,
 * test_tp_train, test_cuda_dp) share: f8_train's options for a short, quiet
 * run of a small model on `backend` (FP8 on, a short warm-up and cosine
 * schedule, no validation, log, plot or sample; each test sets its model's
 * shape and anything else it varies), and the scale-free distance the
 * multi-rank tests hold runs to. Include after train/trainer.c.
 */
#ifndef F8_TESTS_TRAINER_FIXTURE_H
#define F8_TESTS_TRAINER_FIXTURE_H

#include <math.h>

static inline train_options quiet_run_options(const char *backend, int64_t steps)
{
    train_options o = train_options_default();
    o.backend = backend;
    o.fp8 = 1;
    o.steps = steps;
    o.warmup = 1;
    o.lr = 3e-3f;
    o.lr_min = 3e-4f;
    o.val_every = 0;
    o.log = "";
    o.plot = "";
    o.sample = 0;
    o.quiet = 1;
    return o;
}

/* max |a - b| / max |b| over n values (an all-zero b: 0 where a is zero too, inf elsewhere). */
static inline double max_rel(const float *a, const float *b, int64_t n)
{
    double w = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (int64_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]) / scale);
    return w;
}

#endif /* F8_TESTS_TRAINER_FIXTURE_H */
