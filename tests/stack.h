/*
 * stack.h — a three-module stack (Linear → LayerNormLinear → LayerNormMLP)
 * with one training step's driving code, shared by the workspace, graph and
 * checkpoint tests on both backends. Everything in FP32 parameters; an
 * optional host-side SGD that keeps FP32 master copies of FP8 primary weights
 * (the optimizer TE's fp8_model_init expects).
 */
#ifndef F8_TESTS_STACK_H
#define F8_TESTS_STACK_H

#include "check.h"

typedef struct stack_cfg {
    int64_t T, H, F;
    int fp8, fp8_weights;
    f8_activation act;
    uint64_t seed;
} stack_cfg;

typedef struct stack {
    f8_ctx *ctx;
    stack_cfg c;
    f8_module *lin;
    f8_module *lnl;
    f8_module *mlp;
    f8_saved *s0;
    f8_saved *s1;
    f8_saved *s2;
    float *x, *h0, *h1, *y;     /* (T, H) backend: input, Linear out, LNLinear out, output */
    float *dy, *dh1, *dh0, *dx; /* (T, H) backend: their gradients */
    float *stage;               /* (max weight elements) backend staging for write_weight */
    float *master[4];           /* host FP32 masters of the 4 weights (fp8_weights only) */
} stack;

/* The parameters of the stack as views: index, param (grad 0) or grad (1). */
enum { STACK_NPARAM = 10 };
static inline f8_status stack_param(stack *s, int i, int grad, f8_tensor *v)
{
    switch (i) {
    case 0: return grad ? f8_module_param(s->lin, F8_PARAM_WEIGHT, 1, v) : f8_module_param(s->lin, F8_PARAM_WEIGHT, 0, v);
    case 1: return grad ? f8_module_param(s->lin, F8_PARAM_BIAS, 1, v) : f8_module_param(s->lin, F8_PARAM_BIAS, 0, v);
    case 2: return f8_module_param(s->lnl, F8_PARAM_WEIGHT, grad, v);
    case 3: return f8_module_param(s->lnl, F8_PARAM_BIAS, grad, v);
    case 4: return f8_module_param(s->lnl, F8_PARAM_LN_WEIGHT, grad, v);
    case 5: return f8_module_param(s->mlp, F8_PARAM_LN_WEIGHT, grad, v);
    case 6: return f8_module_param(s->mlp, F8_PARAM_FC1_WEIGHT, grad, v);
    case 7: return f8_module_param(s->mlp, F8_PARAM_FC1_BIAS, grad, v);
    case 8: return f8_module_param(s->mlp, F8_PARAM_FC2_WEIGHT, grad, v);
    default: return f8_module_param(s->mlp, F8_PARAM_FC2_BIAS, grad, v);
    }
}
/* Which of the params are weights (0..3 in master[]), -1 otherwise. */
static inline int stack_weight_index(int i) { return i == 0 ? 0 : i == 2 ? 1 : i == 6 ? 2 : i == 8 ? 3 : -1; }

static inline size_t tensor_bytes(const f8_tensor *t) { return (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype); }

static inline float *stack_buf(f8_ctx *ctx, size_t floats)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, floats * sizeof(float), &p) != F8_OK) die("stack alloc", ctx);
    return (float *)p;
}

static inline void stack_write_weight(stack *s, int w, const float *host, int64_t rows, int64_t cols)
{
    if (f8_ctx_upload(s->ctx, s->stage, host, (size_t)(rows * cols) * 4) != F8_OK) die("stage upload", s->ctx);
    f8_tensor src = f8_tensor_make(s->stage, F8_DTYPE_FP32, rows, cols);
    f8_status st = w == 0 ? f8_module_write_weight(s->lin, F8_PARAM_WEIGHT, &src)
                 : w == 1 ? f8_module_write_weight(s->lnl, F8_PARAM_WEIGHT, &src)
                          : f8_module_write_weight(s->mlp, (w - 2) ? F8_PARAM_FC2_WEIGHT : F8_PARAM_FC1_WEIGHT, &src);
    if (st != F8_OK) die("write_weight", s->ctx);
}

/* The shapes of TE's test_cuda_graphs (hidden 64, 64 tokens), ffn 128. */
static inline stack_cfg small_cfg(int fp8, int fp8_weights)
{
    stack_cfg c = {64, 64, 128, fp8, fp8_weights, F8_ACT_GELU, 5};
    return c;
}

static inline void stack_destroy(stack *s);

/* Create the stack; with fp8_weights the FP32 masters start from the values
 * an identical high-precision stack is initialised with. */
static inline void stack_create(stack *s, f8_ctx *ctx, const stack_cfg *c)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->c = *c;
    f8_linear_config lc = f8_linear_config_default(c->H, c->H);
    lc.fp8 = c->fp8;
    lc.fp8_weights = c->fp8_weights;
    lc.max_tokens = c->T;
    lc.seed = c->seed;
    f8_layernorm_linear_config nc = f8_layernorm_linear_config_default(c->H, c->H);
    nc.fp8 = c->fp8;
    nc.fp8_weights = c->fp8_weights;
    nc.max_tokens = c->T;
    nc.seed = c->seed + 1;
    f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(c->H, c->F);
    mc.fp8 = c->fp8;
    mc.fp8_weights = c->fp8_weights;
    mc.max_tokens = c->T;
    mc.activation = c->act;
    mc.seed = c->seed + 2;
    if (f8_linear_create(ctx, &lc, &s->lin) != F8_OK) die("linear create", ctx);
    if (f8_layernorm_linear_create(ctx, &nc, &s->lnl) != F8_OK) die("lnl create", ctx);
    if (f8_layernorm_mlp_create(ctx, &mc, &s->mlp) != F8_OK) die("mlp create", ctx);
    if (f8_module_saved_create(s->lin, &s->s0) != F8_OK || f8_module_saved_create(s->lnl, &s->s1) != F8_OK ||
        f8_module_saved_create(s->mlp, &s->s2) != F8_OK)
        die("saved create", ctx);
    const size_t th = (size_t)(c->T * c->H);
    float **bufs[8] = {&s->x, &s->h0, &s->h1, &s->y, &s->dy, &s->dh1, &s->dh0, &s->dx};
    for (int i = 0; i < 8; i++) *bufs[i] = stack_buf(ctx, th);
    const int64_t F1 = f8_activation_gated(c->act) ? 2 * c->F : c->F;
    s->stage = stack_buf(ctx, (size_t)(c->H * (F1 > c->H ? F1 : c->H)));
    if (c->fp8_weights) {
        /* The masters start from the same init a high-precision stack gets. */
        stack_cfg hc = *c;
        hc.fp8_weights = 0;
        stack h;
        stack_create(&h, ctx, &hc);
        for (int i = 0; i < STACK_NPARAM; i++) {
            int w = stack_weight_index(i);
            if (w < 0) continue;
            f8_tensor v;
            stack_param(&h, i, 0, &v);
            s->master[w] = (float *)xmalloc(tensor_bytes(&v));
            if (f8_ctx_download(ctx, s->master[w], v.data, tensor_bytes(&v)) != F8_OK) die("master", ctx);
        }
        stack_destroy(&h);
    }
}

static inline void stack_destroy(stack *s)
{
    float *bufs[9] = {s->x, s->h0, s->h1, s->y, s->dy, s->dh1, s->dh0, s->dx, s->stage};
    for (int i = 0; i < 9; i++) f8_ctx_free(s->ctx, bufs[i]);
    f8_saved_destroy(s->s0);
    f8_saved_destroy(s->s1);
    f8_saved_destroy(s->s2);
    f8_module_destroy(s->lin);
    f8_module_destroy(s->lnl);
    f8_module_destroy(s->mlp);
    for (int i = 0; i < 4; i++) free(s->master[i]);
    memset(s, 0, sizeof *s);
}

static inline f8_tensor stack_t(const stack *s, float *p) { return f8_tensor_make(p, F8_DTYPE_FP32, s->c.T, s->c.H); }

/* Forward and backward of one microbatch (x and dy already in place). */
static inline f8_status stack_fwd_bwd(stack *s, f8_microbatch mb)
{
    f8_tensor x = stack_t(s, s->x), h0 = stack_t(s, s->h0), h1 = stack_t(s, s->h1), y = stack_t(s, s->y);
    f8_tensor dy = stack_t(s, s->dy), dh1 = stack_t(s, s->dh1), dh0 = stack_t(s, s->dh0), dx = stack_t(s, s->dx);
    f8_status st = f8_module_forward(s->lin, &x, &h0, mb, s->s0);
    if (st == F8_OK) st = f8_layernorm_linear_forward(s->lnl, &h0, &h1, NULL, mb, s->s1);
    if (st == F8_OK) st = f8_module_forward(s->mlp, &h1, &y, mb, s->s2);
    if (st == F8_OK) st = f8_module_backward(s->mlp, s->s2, &dy, &dh1);
    if (st == F8_OK) st = f8_layernorm_linear_backward(s->lnl, s->s1, &dh1, NULL, &dh0);
    if (st == F8_OK) st = f8_module_backward(s->lin, s->s0, &dh0, &dx);
    return st;
}

static inline f8_status stack_update_scales(stack *s)
{
    f8_status st = f8_ctx_update_scales(s->ctx, F8_DIR_FORWARD);
    return st == F8_OK ? f8_ctx_update_scales(s->ctx, F8_DIR_BACKWARD) : st;
}

static inline void stack_zero_grad(stack *s)
{
    if (f8_module_zero_grad(s->lin) != F8_OK || f8_module_zero_grad(s->lnl) != F8_OK ||
        f8_module_zero_grad(s->mlp) != F8_OK)
        die("zero_grad", s->ctx);
}

/* p -= lr·g on the host for every parameter; FP8 primary weights update
 * their FP32 master and are written back, then the post-optimizer scale
 * update runs. */
static inline void stack_sgd(stack *s, float lr)
{
    for (int i = 0; i < STACK_NPARAM; i++) {
        f8_tensor p, g;
        if (stack_param(s, i, 0, &p) != F8_OK || stack_param(s, i, 1, &g) != F8_OK) die("param view", s->ctx);
        const size_t n = (size_t)(g.rows * g.cols);
        float *gh = (float *)xmalloc(n * 4);
        if (f8_ctx_download(s->ctx, gh, g.data, n * 4) != F8_OK) die("grad download", s->ctx);
        int w = stack_weight_index(i);
        if (w >= 0 && s->master[w]) {
            for (size_t k = 0; k < n; k++) s->master[w][k] -= lr * gh[k];
            stack_write_weight(s, w, s->master[w], g.rows, g.cols);
        } else {
            float *ph = (float *)xmalloc(n * 4);
            if (f8_ctx_download(s->ctx, ph, p.data, n * 4) != F8_OK) die("param download", s->ctx);
            for (size_t k = 0; k < n; k++) ph[k] -= lr * gh[k];
            if (f8_ctx_upload(s->ctx, p.data, ph, n * 4) != F8_OK) die("param upload", s->ctx);
            free(ph);
        }
        free(gh);
    }
    if (f8_ctx_update_weight_scales(s->ctx) != F8_OK) die("update_weight_scales", s->ctx);
}

/* Deterministic microbatch data for (step, mb). */
static inline void stack_data(stack *s, int step, int mb)
{
    const size_t n = (size_t)(s->c.T * s->c.H);
    float *h = (float *)calloc(n + 1, 4);
    if (!h) die("host calloc", NULL);
    test_rng r = {1000003u + (uint64_t)step * 17u + (uint64_t)mb}; /* independent of the model seed */
    for (size_t i = 0; i < n; i++) h[i] = (float)rng_normal(&r);
    if (f8_ctx_upload(s->ctx, s->x, h, n * 4) != F8_OK) die("x upload", s->ctx);
    for (size_t i = 0; i < n; i++) h[i] = (float)(0.1 * rng_normal(&r));
    if (f8_ctx_upload(s->ctx, s->dy, h, n * 4) != F8_OK) die("dy upload", s->ctx);
    free(h);
}

/* Host copy of every parameter, every gradient and y, concatenated as bytes. */
static inline unsigned char *stack_snapshot(stack *s, size_t *bytes)
{
    size_t total = (size_t)(s->c.T * s->c.H) * 4;
    for (int i = 0; i < STACK_NPARAM; i++)
        for (int g = 0; g < 2; g++) {
            f8_tensor v;
            stack_param(s, i, g, &v);
            total += tensor_bytes(&v) + (v.scale_inv ? 4 : 0);
        }
    unsigned char *out = (unsigned char *)xmalloc(total), *p = out;
    for (int i = 0; i < STACK_NPARAM; i++)
        for (int g = 0; g < 2; g++) {
            f8_tensor v;
            stack_param(s, i, g, &v);
            if (f8_ctx_download(s->ctx, p, v.data, tensor_bytes(&v)) != F8_OK) die("snapshot", s->ctx);
            p += tensor_bytes(&v);
            if (v.scale_inv) {
                if (f8_ctx_download(s->ctx, p, v.scale_inv, 4) != F8_OK) die("snapshot", s->ctx);
                p += 4;
            }
        }
    if (f8_ctx_download(s->ctx, p, s->y, (size_t)(s->c.T * s->c.H) * 4) != F8_OK) die("snapshot y", s->ctx);
    *bytes = total;
    return out;
}

#endif /* F8_TESTS_STACK_H */
