/*
 * trainer_options.h — what the trainer tests (test_gpt, test_dp,
 * test_tp_train, test_cuda_dp) share: f8_train's options for a short, quiet
 * run of a small model on `backend` (FP8 on, a short warm-up and cosine
 * schedule, no validation, log, plot or sample). Each test sets its model's
 * shape and anything else it varies. Include after train/trainer.c.
 */
#ifndef F8_TESTS_TRAINER_OPTIONS_H
#define F8_TESTS_TRAINER_OPTIONS_H

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

#endif /* F8_TESTS_TRAINER_OPTIONS_H */
