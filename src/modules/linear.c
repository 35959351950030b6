/*
 * modules/linear.c — f8_linear, TE's Linear: y = x·Wᵀ + b in FP8 or in the
 * parameter dtype, written once above the backend table.
 *
 * Design note. Data flow with FP8 on (spec §5.1), in row-major GEMM terms
 * D[m, n] = Σ_k A(m, k)·B(n, k), both operands K-contiguous ("TN"):
 *   forward   x ─cast(+transpose)→ X8 [T,K] (scratch), X8ᵀ [K,T] (saved)
 *             W ─cast+transpose→ workspace W8 [N,K], W8ᵀ [K,N] (per microbatch rule)
 *             y [T,N] = X8 · W8ᵀ          A = X8,   B = W8,   fast accumulation
 *   backward  dy ─cast+transpose+dbias→ G8 [T,N], G8ᵀ [N,T] (scratch), db += Σ dy
 *             dx [T,K] = G8 · W8          A = G8,   B = W8ᵀ,  split accumulation
 *             dW [N,K] = G8ᵀ · X8         A = G8ᵀ,  B = X8ᵀ,  split accumulation
 * Every GEMM takes each operand's own scale_inv: W8's private one (written with
 * its bytes), X8ᵀ's copy saved at forward time, G8's written by its cast.
 * With FP8 off the same products run in the parameter dtype with trans flags
 * (NN dgrad, NT wgrad) and the bias gradient is a GEMM against a ones vector.
 * The weight, its workspace and the three GEMMs live in weight.c, shared
 * with the fused modules. Scratch (ctx->scratch, shared by all modules within
 * one call) holds what does not outlive a call; its first reduce_bytes belong
 * to the backend's row reductions (the bias-gradient partial sums).
 */
#include <stdlib.h>
#include <string.h>

#include "modules/state.h"
#include "modules/weight.h"
#include "core/ops.h"

enum { SLOT_INPUT = 0, SLOT_WEIGHT = 1, SLOT_OUTPUT = 2 };
enum { SLOT_GRAD_OUTPUT = 0, SLOT_GRAD_INPUT = 1 };

struct f8_linear {
    f8_ctx *ctx;
    f8_linear_config cfg;
    f8i_weight w;
    f8_slot fwd[3], bwd[2];
    size_t reduce_bytes; /* scratch prefix for the backend's row reductions (dbias) */
    f8_memory_report mem; /* its allocations (saved-state objects included) */
};

struct f8_linear_saved {
    f8_linear *owner;
    void *block;        /* FP8: scale_inv (256 B) then X8ᵀ (K, max_tokens) */
    float *x_scale_inv; /* (1) the scale_inv X8ᵀ was cast with */
    uint8_t *xt;        /* (K, T) */
    f8_tensor x;        /* FP8 off: the caller's x, by reference */
    int64_t tokens;
    f8_microbatch microbatch;
    int filled;         /* a forward filled it and no backward consumed it */
};

f8_linear_config f8_linear_config_default(int64_t in_features, int64_t out_features)
{
    f8_linear_config c;
    c.in_features = in_features;
    c.out_features = out_features;
    c.bias = 1;
    c.param_dtype = F8_DTYPE_FP32;
    c.fp8 = 1;
    c.fuse_wgrad_accumulation = 0;
    c.fp8_weights = 0;
    c.max_tokens = 4096;
    c.seed = 1;
    return c;
}

static f8_status config_check(f8_ctx *ctx, const f8_linear_config *c)
{
    if (c->in_features < 1 || c->out_features < 1 || c->in_features > (1 << 24) || c->out_features > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_linear_create: in_features %lld and out_features %lld must be in [1, 2^24]",
                         (long long)c->in_features, (long long)c->out_features);
    if (c->max_tokens < 0 || c->max_tokens > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_linear_create: max_tokens %lld outside [0, 2^24]", (long long)c->max_tokens);
    if (c->param_dtype != F8_DTYPE_FP32 && c->param_dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "f8_linear_create: param_dtype must be fp32 or bf16, not %s",
                         f8_dtype_name(c->param_dtype));
    return F8_OK;
}

f8_status f8_linear_create(f8_ctx *ctx, const f8_linear_config *config, f8_linear **out)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_create: linear (the output) is NULL");
    *out = NULL;
    if (!config) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_create: config is NULL");
    f8_status st = config_check(ctx, config);
    if (st == F8_OK) st = f8i_check_fp8_weights(ctx, "f8_linear_create", config->fp8, config->fp8_weights);
    if (st != F8_OK) return st;

    f8_linear *l = (f8_linear *)calloc(1, sizeof *l);
    if (!l) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_linear_create: out of host memory");
    l->ctx = ctx;
    l->cfg = *config;
    const int64_t N = config->out_features, K = config->in_features, T = config->max_tokens;
    st = f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 3, l->fwd);
    if (st == F8_OK) st = f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, 2, l->bwd);
    if (st == F8_OK && config->fp8_weights) st = f8i_register_fp8_weight_slots(ctx, l->fwd, 3);
    if (st == F8_OK) {
        f8i_weight_spec ws = {N, K, config->bias, config->param_dtype, config->fp8, config->fp8_weights,
                              config->fuse_wgrad_accumulation, l->fwd[SLOT_WEIGHT], T, config->seed, &l->mem};
        st = f8i_weight_create(ctx, &l->w, &ws);
    }
    if (st == F8_OK && config->fp8) {
        /* forward: X8 + its scale_inv; backward: reduction prefix, G8, G8ᵀ, scale_inv */
        l->reduce_bytes = f8i_reduce_workspace_bytes(T, N);
        size_t fwd = f8i_align256((size_t)(T * K)) + 256;
        size_t bwd = l->reduce_bytes + 2 * f8i_align256((size_t)(T * N)) + 256;
        st = f8i_scratch_reserve(ctx, fwd > bwd ? fwd : bwd);
    }
    if (st == F8_OK) st = ctx->be->synchronize(ctx);
    if (st != F8_OK) {
        f8_linear_destroy(l);
        return st;
    }
    *out = l;
    return F8_OK;
}

void f8_linear_destroy(f8_linear *l)
{
    if (!l) return;
    f8i_weight_destroy(l->ctx, &l->w);
    free(l);
}

static f8_status view_out(f8_linear *l, f8_tensor *v, const char *fn, f8_tensor src)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    if (!v) return f8i_error(l->ctx, F8_ERR_INVALID_ARGUMENT, "%s: the output view is NULL", fn);
    if (!src.data) return f8i_error(l->ctx, F8_ERR_STATE, "%s: this Linear was created without a bias", fn);
    *v = src;
    return F8_OK;
}

f8_status f8_linear_weight(f8_linear *l, f8_tensor *v)
{
    return view_out(l, v, "f8_linear_weight", l ? f8i_weight_view(&l->w, 0) : f8_tensor_make(NULL, F8_DTYPE_FP32, 0, 0));
}

f8_status f8_linear_bias(f8_linear *l, f8_tensor *v)
{
    return view_out(l, v, "f8_linear_bias", l ? f8i_bias_view(&l->w, 0) : f8_tensor_make(NULL, F8_DTYPE_FP32, 0, 0));
}

f8_status f8_linear_weight_grad(f8_linear *l, f8_tensor *v)
{
    return view_out(l, v, "f8_linear_weight_grad",
                    l ? f8i_weight_view(&l->w, 1) : f8_tensor_make(NULL, F8_DTYPE_FP32, 0, 0));
}

f8_status f8_linear_bias_grad(f8_linear *l, f8_tensor *v)
{
    return view_out(l, v, "f8_linear_bias_grad", l ? f8i_bias_view(&l->w, 1) : f8_tensor_make(NULL, F8_DTYPE_FP32, 0, 0));
}

f8_status f8_linear_slot(const f8_linear *l, f8_direction direction, int i, f8_slot *slot)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    int n = direction == F8_DIR_FORWARD ? 3 : direction == F8_DIR_BACKWARD ? 2 : 0;
    if (!slot || i < 0 || i >= n)
        return f8i_error(l->ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_slot: no slot %d in direction %d (or slot is NULL)", i,
                         (int)direction);
    *slot = direction == F8_DIR_FORWARD ? l->fwd[i] : l->bwd[i];
    return F8_OK;
}

const f8_qtensor *f8_linear_weight_workspace(const f8_linear *l) { return l ? l->w.w8 : NULL; }

f8_status f8_linear_write_weight(f8_linear *l, const f8_tensor *src)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    return f8i_weight_write(l->ctx, &l->w, src, "f8_linear_write_weight");
}

f8_status f8_linear_memory(const f8_linear *l, f8_memory_report *report)
{
    if (!l || !report) return F8_ERR_INVALID_ARGUMENT;
    f8i_module_memory(l->ctx, &l->mem, 5, report);
    return F8_OK;
}

f8_status f8_linear_set_main_grad(f8_linear *l, float *main_grad)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    if (!l->cfg.fuse_wgrad_accumulation)
        return f8i_error(l->ctx, F8_ERR_STATE, "f8_linear_set_main_grad: the Linear was created without "
                                               "fuse_wgrad_accumulation");
    l->w.main_grad = main_grad;
    return F8_OK;
}

f8_status f8_linear_zero_grad(f8_linear *l)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    return f8i_weight_zero_grad(l->ctx, &l->w);
}

f8_status f8_linear_saved_create(f8_linear *l, f8_linear_saved **out)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(l->ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_saved_create: saved (the output) is NULL");
    *out = NULL;
    f8_linear_saved *s = (f8_linear_saved *)calloc(1, sizeof *s);
    if (!s) return f8i_error(l->ctx, F8_ERR_OUT_OF_MEMORY, "f8_linear_saved_create: out of host memory");
    s->owner = l;
    if (l->cfg.fp8) {
        size_t bytes = 256 + f8i_align256((size_t)(l->cfg.in_features * l->cfg.max_tokens));
        f8_status st = f8i_alloc(l->ctx, F8_MEM_SAVED_ACTIVATIONS, &l->mem, bytes, &s->block);
        if (st != F8_OK) {
            free(s);
            return st;
        }
        s->x_scale_inv = (float *)s->block;
        s->xt = (uint8_t *)s->block + 256;
    }
    *out = s;
    return F8_OK;
}

void f8_linear_saved_destroy(f8_linear_saved *s)
{
    if (!s) return;
    f8i_free(s->owner->ctx, s->block);
    free(s);
}

f8_status f8_linear_forward(f8_linear *l, const f8_tensor *x, f8_tensor *y, f8_microbatch mb, f8_linear_saved *saved)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = l->ctx;
    const int64_t N = l->cfg.out_features, K = l->cfg.in_features;
    const int must = l->cfg.fp8 ? -1 : (int)l->cfg.param_dtype;
    f8_status st = f8i_check_act(ctx, x, "f8_linear_forward: x", -1, K, must);
    if (st != F8_OK) return st;
    const int64_t T = x->rows;
    if (T > l->cfg.max_tokens)
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_linear_forward: x has %lld tokens, more than config.max_tokens %lld",
                         (long long)T, (long long)l->cfg.max_tokens);
    st = f8i_check_act(ctx, y, "f8_linear_forward: y", T, N, -1);
    if (st != F8_OK) return st;
    if (mb != F8_MICROBATCH_NONE && mb != F8_MICROBATCH_FIRST && mb != F8_MICROBATCH_NOT_FIRST)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_forward: microbatch %d is not NONE, FIRST or NOT_FIRST",
                         (int)mb);
    if (saved && saved->owner != l)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_forward: saved belongs to another Linear");

    if (!l->cfg.fp8) {
        st = f8i_weight_fprop(ctx, &l->w, x->data, x->dtype, NULL, T, y->data, y->dtype);
        if (st == F8_OK && saved) saved->x = *x;
    } else {
        st = f8i_weight_cast(ctx, &l->w, mb, saved != NULL);
        uint8_t *x8 = (uint8_t *)ctx->scratch;
        float *x_sinv = saved ? saved->x_scale_inv : (float *)(x8 + f8i_align256((size_t)(T * K)));
        f8i_cast_args c;
        memset(&c, 0, sizeof c);
        c.src = x->data;
        c.src_dtype = x->dtype;
        c.rows = T;
        c.cols = K;
        c.out_dtype = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD);
        c.out = x8;
        c.out_t = saved ? saved->xt : NULL;
        c.scale = f8i_slot_scale(ctx, l->fwd[SLOT_INPUT]);
        c.amax = f8i_slot_amax(ctx, l->fwd[SLOT_INPUT]);
        c.scale_inv = x_sinv;
        if (st == F8_OK) st = f8i_op_cast(ctx, &c);
        if (st == F8_OK) st = f8i_weight_fprop(ctx, &l->w, x8, c.out_dtype, x_sinv, T, y->data, y->dtype);
    }
    if (st == F8_OK && saved) {
        saved->tokens = T;
        saved->microbatch = mb;
        saved->filled = 1;
    }
    return st;
}

static f8_status backward_fp8(f8_linear *l, f8_linear_saved *s, const f8_tensor *dy, f8_tensor *dx)
{
    f8_ctx *ctx = l->ctx;
    const int64_t T = s->tokens, N = l->cfg.out_features;
    unsigned char *cursor = (unsigned char *)ctx->scratch + l->reduce_bytes;
    uint8_t *g8 = (uint8_t *)f8i_carve(&cursor, (size_t)(T * N));
    uint8_t *g8t = (uint8_t *)f8i_carve(&cursor, (size_t)(T * N));
    float *g_sinv = (float *)f8i_carve(&cursor, sizeof(float));
    const f8_dtype gdt = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);

    f8i_cast_args c;
    memset(&c, 0, sizeof c);
    c.src = dy->data;
    c.src_dtype = dy->dtype;
    c.rows = T;
    c.cols = N;
    c.out_dtype = gdt;
    c.out = g8;
    c.out_t = g8t;
    c.scale = f8i_slot_scale(ctx, l->bwd[SLOT_GRAD_OUTPUT]);
    c.amax = f8i_slot_amax(ctx, l->bwd[SLOT_GRAD_OUTPUT]);
    c.scale_inv = g_sinv;
    c.dbias = l->w.db;
    c.dbias_dtype = l->cfg.param_dtype;
    c.dbias_accumulate = 1;
    c.workspace = ctx->scratch; /* the reduce prefix */
    c.workspace_bytes = ctx->scratch_bytes;
    f8_status st = f8i_op_cast(ctx, &c);
    if (st == F8_OK && dx) st = f8i_weight_dgrad(ctx, &l->w, g8, gdt, g_sinv, T, dx->data, dx->dtype);
    if (st == F8_OK)
        st = f8i_weight_wgrad(ctx, &l->w, g8t, gdt, g_sinv, s->xt, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD),
                              s->x_scale_inv, T, s->microbatch);
    return st;
}

static f8_status backward_hp(f8_linear *l, f8_linear_saved *s, const f8_tensor *dy, f8_tensor *dx)
{
    f8_ctx *ctx = l->ctx;
    const int64_t T = s->tokens;
    f8_status st = F8_OK;
    if (dx) st = f8i_weight_dgrad(ctx, &l->w, dy->data, dy->dtype, NULL, T, dx->data, dx->dtype);
    if (st == F8_OK)
        st = f8i_weight_wgrad(ctx, &l->w, dy->data, dy->dtype, NULL, s->x.data, s->x.dtype, NULL, T, s->microbatch);
    if (st == F8_OK) st = f8i_weight_bgrad(ctx, &l->w, dy->data, T);
    return st;
}

f8_status f8_linear_backward(f8_linear *l, f8_linear_saved *s, const f8_tensor *dy, f8_tensor *dx)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = l->ctx;
    if (!s) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_backward: saved is NULL");
    if (s->owner != l) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_backward: saved belongs to another Linear");
    if (!s->filled)
        return f8i_error(ctx, F8_ERR_STATE, "f8_linear_backward: saved holds no forward (never filled, or already consumed "
                                            "by a backward)");
    const int64_t T = s->tokens, N = l->cfg.out_features, K = l->cfg.in_features;
    const int must = l->cfg.fp8 ? -1 : (int)l->cfg.param_dtype;
    f8_status st = f8i_check_act(ctx, dy, "f8_linear_backward: dy", T, N, must);
    if (st == F8_OK && dx) st = f8i_check_act(ctx, dx, "f8_linear_backward: dx", T, K, -1);
    if (st != F8_OK) return st;
    if (l->cfg.fuse_wgrad_accumulation && !l->w.main_grad)
        return f8i_error(ctx, F8_ERR_STATE, "f8_linear_backward: fuse_wgrad_accumulation is on but no main_grad was set "
                                            "(f8_linear_set_main_grad)");
    st = l->cfg.fp8 ? backward_fp8(l, s, dy, dx) : backward_hp(l, s, dy, dx);
    if (st == F8_OK) s->filled = 0;
    return st;
}

void f8i_linear_state(f8_linear *l, f8i_module_state *s)
{
    memset(s, 0, sizeof *s);
    s->ctx = l->ctx;
    s->fp8 = l->cfg.fp8;
    s->n_weights = 1;
    s->weights[0] = &l->w;
    s->weight_names[0] = "weight";
    s->bias_names[0] = "bias";
    s->n_fwd = 3;
    s->n_bwd = 2;
    s->fwd = l->fwd;
    s->bwd = l->bwd;
}
