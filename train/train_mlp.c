/*
 * train_mlp.c — the main program, first version: trains a two-layer MLP of
 * f8_linear layers in FP8 to imitate a fixed random "teacher" network it
 * generates itself, and exits non-zero if the loss did not fall.
 *
 *   student: x[T,64] → Linear(64,128) → ReLU → Linear(128,16) → y
 *   teacher: t = tanh(x·A)·B with A, B fixed random matrices
 *   loss   : mean squared error; AdamW on the FP32 master weights
 *
 * Each step runs two microbatches (FIRST casts the FP8 weight workspaces,
 * NOT_FIRST reuses them, gradients accumulate), then the delayed-scaling
 * updates (forward, backward) and the optimizer. Everything crosses the
 * backend boundary through f8_ctx_upload/download, so `--backend cuda` runs
 * the same program on a GPU. A GPT trainer replaces this program later.
 *
 * usage: f8_train [--steps N] [--backend cpu|cuda] [--seed S]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "f8.h"

enum { IN = 64, HID = 128, OUT = 16, MB_TOKENS = 128, MICROBATCHES = 2 };

#define TRY(call)                                                                                  \
    do {                                                                                           \
        f8_status st_ = (call);                                                                    \
        if (st_ != F8_OK) {                                                                        \
            fprintf(stderr, "f8_train: %s failed: %s: %s\n", #call, f8_status_string(st_),          \
                    f8_ctx_last_error(ctx));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    uint64_t s;
} rng;

static double uniform(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static float normal(rng *r) { return (float)(sqrt(-2.0 * log(uniform(r))) * cos(6.283185307179586 * uniform(r))); }

/* AdamW state of one parameter tensor (host copies of FP32 params). */
typedef struct {
    f8_tensor param, grad;
    float *p, *g, *m, *v;
    size_t n;
} adam_slot;

static adam_slot adam_make(f8_ctx *ctx, f8_tensor param, f8_tensor grad)
{
    adam_slot a;
    a.param = param;
    a.grad = grad;
    a.n = (size_t)(param.rows * param.cols);
    a.p = (float *)calloc(a.n, 4);
    a.g = (float *)calloc(a.n, 4);
    a.m = (float *)calloc(a.n, 4);
    a.v = (float *)calloc(a.n, 4);
    if (!a.p || !a.g || !a.m || !a.v) {
        fprintf(stderr, "f8_train: out of memory\n");
        exit(1);
    }
    TRY(f8_ctx_download(ctx, a.p, param.data, a.n * 4));
    return a;
}

static void adam_step(f8_ctx *ctx, adam_slot *a, int t, float lr, float wd)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    TRY(f8_ctx_download(ctx, a->g, a->grad.data, a->n * 4));
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < a->n; i++) {
        a->m[i] = b1 * a->m[i] + (1 - b1) * a->g[i];
        a->v[i] = b2 * a->v[i] + (1 - b2) * a->g[i] * a->g[i];
        a->p[i] -= lr * ((a->m[i] / c1) / (sqrtf(a->v[i] / c2) + eps) + wd * a->p[i]);
    }
    TRY(f8_ctx_upload(ctx, a->param.data, a->p, a->n * 4));
}

static void *buffer(f8_ctx *ctx, size_t floats)
{
    void *p = NULL;
    TRY(f8_ctx_alloc(ctx, floats * 4, &p));
    return p;
}

int main(int argc, char **argv)
{
    int steps = 300;
    uint64_t seed = 42;
    f8_ctx_config cfg = f8_ctx_config_default();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = (uint64_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            const char *b = argv[++i];
            cfg.backend = !strcmp(b, "cuda") ? F8_BACKEND_CUDA : F8_BACKEND_CPU;
        } else {
            fprintf(stderr, "usage: %s [--steps N] [--backend cpu|cuda] [--seed S]\n", argv[0]);
            return 2;
        }
    }
    if (steps < 20) steps = 20;
    /* A short history reacts faster than TE's conservative 1024 (spec §9, #1169). */
    cfg.recipe.amax_history_len = 16;
    f8_ctx *ctx = NULL;
    char why[256];
    if (f8_ctx_create(&cfg, &ctx, why, sizeof why) != F8_OK) {
        fprintf(stderr, "f8_train: cannot create the ctx: %s\n", why);
        return 1;
    }

    f8_linear *l1 = NULL, *l2 = NULL;
    f8_linear_config c1 = f8_linear_config_default(IN, HID), c2 = f8_linear_config_default(HID, OUT);
    c1.max_tokens = c2.max_tokens = MB_TOKENS;
    c1.seed = seed;
    c2.seed = seed + 1;
    TRY(f8_linear_create(ctx, &c1, &l1));
    TRY(f8_linear_create(ctx, &c2, &l2));
    f8_linear_saved *s1[MICROBATCHES], *s2[MICROBATCHES];
    for (int m = 0; m < MICROBATCHES; m++) {
        TRY(f8_linear_saved_create(l1, &s1[m]));
        TRY(f8_linear_saved_create(l2, &s2[m]));
    }
    adam_slot opt[4];
    f8_tensor p, g;
    f8_linear *layers[2] = {l1, l2};
    for (int i = 0; i < 2; i++) {
        TRY(f8_linear_weight(layers[i], &p));
        TRY(f8_linear_weight_grad(layers[i], &g));
        opt[2 * i] = adam_make(ctx, p, g);
        TRY(f8_linear_bias(layers[i], &p));
        TRY(f8_linear_bias_grad(layers[i], &g));
        opt[2 * i + 1] = adam_make(ctx, p, g);
    }

    /* The teacher. */
    rng r = {seed * 7919u + 1};
    static float A[IN * HID], B[HID * OUT];
    for (int i = 0; i < IN * HID; i++) A[i] = normal(&r) / sqrtf((float)IN);
    for (int i = 0; i < HID * OUT; i++) B[i] = normal(&r) / sqrtf((float)HID);

    /* Host staging and backend buffers, per microbatch where they must outlive the forward. */
    static float x[MB_TOKENS * IN], tgt[MB_TOKENS * OUT], h[MB_TOKENS * HID], y[MB_TOKENS * OUT];
    static float hsave[MICROBATCHES][MB_TOKENS * HID], dysave[MICROBATCHES][MB_TOKENS * OUT];
    void *xb[MICROBATCHES], *ab[MICROBATCHES];
    for (int m = 0; m < MICROBATCHES; m++) xb[m] = buffer(ctx, MB_TOKENS * IN), ab[m] = buffer(ctx, MB_TOKENS * HID);
    void *hb = buffer(ctx, MB_TOKENS * HID), *yb = buffer(ctx, MB_TOKENS * OUT);
    void *dyb = buffer(ctx, MB_TOKENS * OUT), *dab = buffer(ctx, MB_TOKENS * HID);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    printf("f8_train: MLP %d-%d-%d in FP8 (%s backend), %d steps of %d microbatches x %d tokens\n", IN, HID, OUT,
           cfg.backend == F8_BACKEND_CUDA ? "cuda" : "cpu", steps, MICROBATCHES, MB_TOKENS);
    double first_loss = 0, last_loss = 0;
    const int window = 20; /* losses averaged over the first and the last steps */
    for (int step = 1; step <= steps; step++) {
        double loss = 0;
        TRY(f8_linear_zero_grad(l1));
        TRY(f8_linear_zero_grad(l2));
        for (int m = 0; m < MICROBATCHES; m++) {
            f8_microbatch mb = m == 0 ? F8_MICROBATCH_FIRST : F8_MICROBATCH_NOT_FIRST;
            for (int i = 0; i < MB_TOKENS * IN; i++) x[i] = normal(&r);
            for (int t = 0; t < MB_TOKENS; t++) {
                float hid[HID];
                for (int j = 0; j < HID; j++) {
                    float acc = 0;
                    for (int k = 0; k < IN; k++) acc += x[t * IN + k] * A[k * HID + j];
                    hid[j] = tanhf(acc);
                }
                for (int o = 0; o < OUT; o++) {
                    float acc = 0;
                    for (int j = 0; j < HID; j++) acc += hid[j] * B[j * OUT + o];
                    tgt[t * OUT + o] = acc;
                }
            }
            TRY(f8_ctx_upload(ctx, xb[m], x, sizeof x));
            f8_tensor tx = f8_tensor_make(xb[m], F8_DTYPE_FP32, MB_TOKENS, IN);
            f8_tensor th = f8_tensor_make(hb, F8_DTYPE_FP32, MB_TOKENS, HID);
            f8_tensor ta = f8_tensor_make(ab[m], F8_DTYPE_FP32, MB_TOKENS, HID);
            f8_tensor ty = f8_tensor_make(yb, F8_DTYPE_FP32, MB_TOKENS, OUT);
            TRY(f8_linear_forward(l1, &tx, &th, mb, s1[m]));
            TRY(f8_ctx_download(ctx, hsave[m], hb, sizeof h));
            for (int i = 0; i < MB_TOKENS * HID; i++) h[i] = hsave[m][i] > 0 ? hsave[m][i] : 0;
            TRY(f8_ctx_upload(ctx, ab[m], h, sizeof h));
            TRY(f8_linear_forward(l2, &ta, &ty, mb, s2[m]));
            TRY(f8_ctx_download(ctx, y, yb, sizeof y));
            /* dL/dy of this microbatch, kept until its backward. */
            for (int i = 0; i < MB_TOKENS * OUT; i++) {
                float d = y[i] - tgt[i];
                loss += (double)d * d / (MB_TOKENS * OUT * MICROBATCHES);
                dysave[m][i] = 2.0f * d / (MB_TOKENS * OUT * MICROBATCHES);
            }
        }
        /* "Autocast exit": one fused forward scale update for every module. */
        TRY(f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        for (int m = MICROBATCHES - 1; m >= 0; m--) {
            f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, MB_TOKENS, OUT);
            f8_tensor tda = f8_tensor_make(dab, F8_DTYPE_FP32, MB_TOKENS, HID);
            TRY(f8_ctx_upload(ctx, dyb, dysave[m], sizeof y));
            TRY(f8_linear_backward(l2, s2[m], &tdy, &tda));
            TRY(f8_ctx_download(ctx, h, dab, sizeof h));
            for (int i = 0; i < MB_TOKENS * HID; i++) h[i] = hsave[m][i] > 0 ? h[i] : 0; /* ReLU' */
            TRY(f8_ctx_upload(ctx, dab, h, sizeof h));
            TRY(f8_linear_backward(l1, s1[m], &tda, NULL));
        }
        TRY(f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
        for (int i = 0; i < 4; i++) adam_step(ctx, &opt[i], step, 3e-3f, i % 2 ? 0.0f : 1e-4f);

        if (step <= window) first_loss += loss / window;
        if (step > steps - window) last_loss += loss / window;
        if (step == 1 || step % 25 == 0 || step == steps) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            printf("step %4d  loss %.6f  %8.0f tokens/s\n", step, loss,
                   (double)step * MICROBATCHES * MB_TOKENS / (secs > 0 ? secs : 1e-9));
        }
    }
    float scale;
    f8_slot slot;
    TRY(f8_linear_slot(l1, F8_DIR_FORWARD, 0, &slot));
    TRY(f8_slot_read(ctx, slot, &scale, NULL, NULL));
    printf("mean loss: first %d steps %.6f, last %d steps %.6f (layer 1 input scale %.3g)\n", window, first_loss, window,
           last_loss, scale);
    int fell = last_loss < 0.5 * first_loss;
    printf("%s\n", fell ? "loss fell: OK" : "loss did NOT fall by half: FAIL");
    for (int i = 0; i < 4; i++) free(opt[i].p), free(opt[i].g), free(opt[i].m), free(opt[i].v);
    for (int m = 0; m < MICROBATCHES; m++) {
        f8_linear_saved_destroy(s1[m]);
        f8_linear_saved_destroy(s2[m]);
        f8_ctx_free(ctx, xb[m]);
        f8_ctx_free(ctx, ab[m]);
    }
    f8_ctx_free(ctx, hb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, dyb), f8_ctx_free(ctx, dab);
    f8_linear_destroy(l1);
    f8_linear_destroy(l2);
    f8_ctx_destroy(ctx);
    return fell ? 0 : 1;

}
