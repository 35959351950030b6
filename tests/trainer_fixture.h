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

/* A small GPT on the CPU that compares runs bit for bit (test_recompute_blocks,
 * test_memory_savings): `layers` blocks of 2 heads x 32 channels, 16-token
 * sequences, 2 x 2 sequences a step, a warm-up of 2 steps. */
static inline train_options small_gpt_options(int64_t steps, int64_t layers)
{
    train_options o = quiet_run_options("cpu", steps);
    o.layers = layers;
    o.heads = 2;
    o.channels = 32;
    o.seq = 16;
    o.batch = 2;
    o.grad_accum = 2;
    o.warmup = 2;
    return o;
}

/* The same as a Llama: 4 heads over 2 key/value heads, SwiGLU of 48. */
static inline train_options small_llama_options(train_options o)
{
    o.llama = 1;
    o.heads = 4;
    o.kv_heads = 2;
    o.ffn = 48;
    o.rope_theta = 10000.0;
    return o;
}

/* The CUDA tests' small model that compares runs bit for bit
 * (test_cuda_recompute_blocks, test_cuda_memory_savings): 3 blocks of 128
 * channels (block scaling's 128-wide tiles), 64-token sequences, 2 x 2
 * sequences a step, 6 steps; a Llama has 4 heads over 2 key/value heads
 * and SwiGLU of 256, a GPT 2 heads. */
static inline train_options small_cuda_options(int llama, const char *recipe, int graph)
{
    train_options o = quiet_run_options("cuda", 6);
    o.layers = 3;
    o.heads = llama ? 4 : 2;
    o.channels = 128;
    o.seq = 64;
    o.batch = 2;
    o.grad_accum = 2;
    o.warmup = 2;
    o.recipe = recipe;
    o.graph = graph;
    if (llama) o.llama = 1, o.kv_heads = 2, o.ffn = 256, o.rope_theta = 10000.0;
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
