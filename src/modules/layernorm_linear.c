/*
 * modules/layernorm_linear.c — f8_layernorm_linear, TE's LayerNormLinear:
 * y = norm(x) · Wᵀ + b (spec §5.2), written once above the backend table.
 *
 * Design note. With FP8 on, the norm kernel writes the GEMM input directly
 * in FP8 (slot INPUT, amax of its output, its own scale_inv next to the
 * data): no high-precision round trip. With return_layernorm_output the norm
 * output goes to the caller in high precision and is cast separately. As in
 * TE, no transpose of the norm output is made in forward; backward transposes
 * the saved FP8 copy for wgrad. The backward chain is
 *   dy ─cast+transpose+dbias→ G8, G8ᵀ;  dln = G8 · W8 (+ dln_out);
 *   dW += G8ᵀ · ln8ᵀ;  norm backward (dx, dgamma, dbeta) from dln.
 * Per-call buffers live in ctx->scratch after the backend's reduction prefix.
 */
#include <stdlib.h>
#include <string.h>

#include "modules/norm.h"
#include "modules/state.h"
#include "modules/weight.h"
#include "core/ops.h"

enum { SLOT_INPUT = 0, SLOT_WEIGHT = 1 };
enum { SLOT_GRAD_OUTPUT = 0 };

struct f8_layernorm_linear {
    f8_ctx *ctx;
    f8_layernorm_linear_config cfg;
    f8i_norm norm;
    f8i_weight w;
    f8_slot fwd[3], bwd[2];
    size_t reduce_bytes;
    f8_memory_report mem; /* its allocations (saved-state objects included) */
};

struct f8_layernorm_linear_saved {
    f8_layernorm_linear *owner;
    void *block;      /* ln (T, K) FP8 or param dtype, ln_sinv, mu (T), rsigma (T) */
    void *ln;
    float *ln_sinv;
    float *mu, *rsigma;
    f8_tensor x;      /* the caller's x, by reference (the norm backward reads it) */
    int64_t tokens;
    f8_microbatch microbatch;
    int filled;
};

f8_layernorm_linear_config f8_layernorm_linear_config_default(int64_t in_features, int64_t out_features)
{
    f8_layernorm_linear_config c;
    c.in_features = in_features;
    c.out_features = out_features;
    c.bias = 1;
    c.normalization = F8_NORM_LAYERNORM;
    c.eps = 1e-5f;
    c.zero_centered_gamma = 0;
    c.return_layernorm_output = 0;
    c.param_dtype = F8_DTYPE_FP32;
    c.fp8 = 1;
    c.fuse_wgrad_accumulation = 0;
    c.fp8_weights = 0;
    c.max_tokens = 4096;
    c.seed = 1;
    return c;
}

/* Bytes of the saved block: the norm output (FP8 or param dtype), scale_inv, mu, rsigma. */
static size_t saved_bytes(const f8_layernorm_linear *m)
{
    const int64_t T = m->cfg.max_tokens > 0 ? m->cfg.max_tokens : 1, K = m->cfg.in_features;
    const size_t es = m->cfg.fp8 ? 1 : f8_dtype_size(m->cfg.param_dtype);
    return f8i_align256((size_t)(T * K) * es) + 256 + 2 * f8i_align256((size_t)T * sizeof(float));
}

static void saved_place(const f8_layernorm_linear *m, f8_layernorm_linear_saved *s, void *block)
{
    const int64_t T = m->cfg.max_tokens > 0 ? m->cfg.max_tokens : 1, K = m->cfg.in_features;
    const size_t es = m->cfg.fp8 ? 1 : f8_dtype_size(m->cfg.param_dtype);
    unsigned char *c = (unsigned char *)block;
    s->ln = f8i_carve(&c, (size_t)(T * K) * es);
    s->ln_sinv = (float *)f8i_carve(&c, 256);
    s->mu = (float *)f8i_carve(&c, (size_t)T * sizeof(float));
    s->rsigma = (float *)f8i_carve(&c, (size_t)T * sizeof(float));
}

f8_status f8_layernorm_linear_create(f8_ctx *ctx, const f8_layernorm_linear_config *config, f8_layernorm_linear **out)
{
    static const char fn[] = "f8_layernorm_linear_create";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: module (the output) is NULL", fn);
    *out = NULL;
    if (!config) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: config is NULL", fn);
    const f8_layernorm_linear_config *c = config;
    if (c->in_features < 1 || c->out_features < 1 || c->in_features > (1 << 24) || c->out_features > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: in_features %lld and out_features %lld must be in [1, 2^24]", fn,
                         (long long)c->in_features, (long long)c->out_features);
    if (c->max_tokens < 0 || c->max_tokens > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: max_tokens %lld outside [0, 2^24]", fn, (long long)c->max_tokens);
    if (c->param_dtype != F8_DTYPE_FP32 && c->param_dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: param_dtype must be fp32 or bf16, not %s", fn,
                         f8_dtype_name(c->param_dtype));
    f8_status st = f8i_norm_config_check(ctx, fn, c->normalization, c->eps);
    if (st == F8_OK) st = f8i_check_fp8_weights(ctx, fn, c->fp8, c->fp8_weights);
    if (st != F8_OK) return st;

    f8_layernorm_linear *m = (f8_layernorm_linear *)calloc(1, sizeof *m);
    if (!m) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    m->ctx = ctx;
    m->cfg = *c;
    const int64_t N = c->out_features, K = c->in_features, T = c->max_tokens;
    st = f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 3, m->fwd);
    if (st == F8_OK) st = f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, 2, m->bwd);
    if (st == F8_OK)
        st = f8i_norm_create(ctx, &m->norm, K, c->normalization, c->eps, c->zero_centered_gamma, c->param_dtype,
                             &m->mem);
    if (st == F8_OK && c->fp8_weights) st = f8i_register_fp8_weight_slots(ctx, m->fwd, 3);
    if (st == F8_OK) {
        f8i_weight_spec ws = {N, K, c->bias, c->param_dtype, c->fp8, c->fp8_weights,
                              c->fuse_wgrad_accumulation, m->fwd[SLOT_WEIGHT], T, c->seed, &m->mem};
        st = f8i_weight_create(ctx, &m->w, &ws);
    }
    if (st == F8_OK) {
        /* forward without saved: a saved block's worth; backward: G8, G8ᵀ,
         * scale_inv, dln and a converted dln_out (FP32), the transposed norm output */
        m->reduce_bytes = f8i_reduce_workspace_bytes(T, N > K ? N : K);
        size_t fwd = saved_bytes(m) + f8i_align256((size_t)(T * K) * 4);
        size_t bwd = 2 * f8i_align256((size_t)(T * N)) + 256 + 2 * f8i_align256((size_t)(T * K) * 4) +
                     f8i_align256((size_t)(T * K));
        st = f8i_scratch_reserve(ctx, m->reduce_bytes + (fwd > bwd ? fwd : bwd));
    }
    if (st == F8_OK) st = ctx->be->synchronize(ctx);
    if (st != F8_OK) {
        f8_layernorm_linear_destroy(m);
        return st;
    }
    *out = m;
    return F8_OK;
}

void f8_layernorm_linear_destroy(f8_layernorm_linear *m)
{
    if (!m) return;
    f8i_weight_destroy(m->ctx, &m->w);
    f8i_norm_destroy(m->ctx, &m->norm);
    free(m);
}

f8_status f8_layernorm_linear_param(f8_layernorm_linear *m, f8_param which, int grad, f8_tensor *view)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!view) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_param: view is NULL");
    f8_tensor v;
    switch (which) {
    case F8_PARAM_WEIGHT: v = f8i_weight_view(&m->w, grad); break;
    case F8_PARAM_BIAS: v = f8i_bias_view(&m->w, grad); break;
    case F8_PARAM_LN_WEIGHT: v = f8i_norm_view(&m->norm, 0, grad); break;
    case F8_PARAM_LN_BIAS: v = f8i_norm_view(&m->norm, 1, grad); break;
    default:
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_param: %d is not a LayerNormLinear "
                                                          "parameter", (int)which);
    }
    if (!v.data)
        return f8i_error(m->ctx, F8_ERR_STATE, "f8_layernorm_linear_param: this module has no parameter %d (no bias, "
                                               "or RMSNorm has no beta)", (int)which);
    *view = v;
    return F8_OK;
}

f8_status f8_layernorm_linear_slot(const f8_layernorm_linear *m, f8_direction direction, int i, f8_slot *slot)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    int n = direction == F8_DIR_FORWARD ? 3 : direction == F8_DIR_BACKWARD ? 2 : 0;
    if (!slot || i < 0 || i >= n)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT,
                         "f8_layernorm_linear_slot: no slot %d in direction %d (or slot is NULL)", i, (int)direction);
    *slot = direction == F8_DIR_FORWARD ? m->fwd[i] : m->bwd[i];
    return F8_OK;
}

const f8_qtensor *f8_layernorm_linear_weight_workspace(const f8_layernorm_linear *m) { return m ? m->w.w8 : NULL; }

f8_status f8_layernorm_linear_write_weight(f8_layernorm_linear *m, const f8_tensor *src)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    return f8i_weight_write(m->ctx, &m->w, src, "f8_layernorm_linear_write_weight");
}

f8_status f8_layernorm_linear_memory(const f8_layernorm_linear *m, f8_memory_report *report)
{
    if (!m || !report) return F8_ERR_INVALID_ARGUMENT;
    f8i_module_memory(m->ctx, &m->mem, 5, report);
    return F8_OK;
}

f8_status f8_layernorm_linear_set_main_grad(f8_layernorm_linear *m, float *main_grad)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!m->cfg.fuse_wgrad_accumulation)
        return f8i_error(m->ctx, F8_ERR_STATE, "f8_layernorm_linear_set_main_grad: created without "
                                               "fuse_wgrad_accumulation");
    m->w.main_grad = main_grad;
    return F8_OK;
}

f8_status f8_layernorm_linear_zero_grad(f8_layernorm_linear *m)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8_status st = f8i_weight_zero_grad(m->ctx, &m->w);
    return st == F8_OK ? f8i_norm_zero_grad(m->ctx, &m->norm) : st;
}

f8_status f8_layernorm_linear_saved_create(f8_layernorm_linear *m, f8_layernorm_linear_saved **out)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_saved_create: saved is NULL");
    *out = NULL;
    f8_layernorm_linear_saved *s = (f8_layernorm_linear_saved *)calloc(1, sizeof *s);
    if (!s) return f8i_error(m->ctx, F8_ERR_OUT_OF_MEMORY, "f8_layernorm_linear_saved_create: out of host memory");
    s->owner = m;
    f8_status st = f8i_alloc(m->ctx, F8_MEM_SAVED_ACTIVATIONS, &m->mem, saved_bytes(m), &s->block);
    if (st != F8_OK) {
        free(s);
        return st;
    }
    saved_place(m, s, s->block);
    *out = s;
    return F8_OK;
}

void f8_layernorm_linear_saved_destroy(f8_layernorm_linear_saved *s)
{
    if (!s) return;
    f8i_free(s->owner->ctx, s->block);
    free(s);
}

f8_status f8_layernorm_linear_forward(f8_layernorm_linear *m, const f8_tensor *x, f8_tensor *y, f8_tensor *ln_out,
                                      f8_microbatch mb, f8_layernorm_linear_saved *saved)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = m->ctx;
    const int64_t N = m->cfg.out_features, K = m->cfg.in_features;
    const int fp8 = m->cfg.fp8, must = fp8 ? -1 : (int)m->cfg.param_dtype;
    f8_status st = f8i_check_act(ctx, x, "f8_layernorm_linear_forward: x", -1, K, must);
    if (st != F8_OK) return st;
    const int64_t T = x->rows;
    if (T > m->cfg.max_tokens)
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_layernorm_linear_forward: x has %lld tokens, more than max_tokens %lld",
                         (long long)T, (long long)m->cfg.max_tokens);
    st = f8i_check_act(ctx, y, "f8_layernorm_linear_forward: y", T, N, -1);
    if (st != F8_OK) return st;
    if (m->cfg.return_layernorm_output) {
        if (!ln_out)
            return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_forward: ln_out is NULL but the module "
                                                           "returns its norm output (return_layernorm_output)");
        st = f8i_check_act(ctx, ln_out, "f8_layernorm_linear_forward: ln_out", T, K, -1);
        if (st != F8_OK) return st;
    } else if (ln_out) {
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_forward: ln_out given but the module was "
                                                       "created without return_layernorm_output");
    }
    if (mb != F8_MICROBATCH_NONE && mb != F8_MICROBATCH_FIRST && mb != F8_MICROBATCH_NOT_FIRST)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_forward: microbatch %d is not NONE, FIRST or "
                                                       "NOT_FIRST", (int)mb);
    if (saved && saved->owner != m)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_forward: saved belongs to another module");

    /* Inference keeps the norm output and statistics in scratch. */
    f8_layernorm_linear_saved tmp;
    f8_layernorm_linear_saved *s = saved;
    if (!s) {
        memset(&tmp, 0, sizeof tmp);
        saved_place(m, &tmp, (unsigned char *)ctx->scratch + m->reduce_bytes);
        s = &tmp;
    }
    const f8_dtype in_dt = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD);
    const float *in_scale = f8i_slot_scale(ctx, m->fwd[SLOT_INPUT]);
    float *in_amax = f8i_slot_amax(ctx, m->fwd[SLOT_INPUT]);
    if (fp8 && !m->cfg.return_layernorm_output) {
        st = f8i_norm_forward(ctx, &m->norm, x, s->ln, in_dt, in_scale, in_amax, s->ln_sinv, s->mu, s->rsigma);
    } else if (fp8) {
        st = f8i_norm_forward(ctx, &m->norm, x, ln_out->data, ln_out->dtype, NULL, NULL, NULL, s->mu, s->rsigma);
        f8i_cast_args c;
        memset(&c, 0, sizeof c);
        c.src = ln_out->data;
        c.src_dtype = ln_out->dtype;
        c.rows = T;
        c.cols = K;
        c.out_dtype = in_dt;
        c.out = (uint8_t *)s->ln;
        c.scale = in_scale;
        c.amax = in_amax;
        c.scale_inv = s->ln_sinv;
        if (st == F8_OK) st = f8i_op_cast(ctx, &c);
    } else {
        st = f8i_norm_forward(ctx, &m->norm, x, s->ln, m->cfg.param_dtype, NULL, NULL, NULL, s->mu, s->rsigma);
        if (st == F8_OK && ln_out && T > 0)
            st = f8i_op_convert(ctx, s->ln, m->cfg.param_dtype, NULL, ln_out->data, ln_out->dtype, T * K);
    }
    if (st == F8_OK && fp8) st = f8i_weight_cast(ctx, &m->w, mb, saved != NULL);
    if (st == F8_OK)
        st = f8i_weight_fprop(ctx, &m->w, s->ln, fp8 ? in_dt : m->cfg.param_dtype, fp8 ? s->ln_sinv : NULL, T, y->data,
                              y->dtype);
    if (st == F8_OK && saved) {
        saved->x = *x;
        saved->tokens = T;
        saved->microbatch = mb;
        saved->filled = 1;
    }
    return st;
}

f8_status f8_layernorm_linear_backward(f8_layernorm_linear *m, f8_layernorm_linear_saved *s, const f8_tensor *dy,
                                       const f8_tensor *dln_out, f8_tensor *dx)
{
    static const char fn[] = "f8_layernorm_linear_backward";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = m->ctx;
    if (!s) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved is NULL", fn);
    if (s->owner != m) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved belongs to another module", fn);
    if (!s->filled)
        return f8i_error(ctx, F8_ERR_STATE, "%s: saved holds no forward (never filled, or already consumed)", fn);
    const int64_t T = s->tokens, N = m->cfg.out_features, K = m->cfg.in_features;
    const int fp8 = m->cfg.fp8, must = fp8 ? -1 : (int)m->cfg.param_dtype;
    f8_status st = f8i_check_act(ctx, dy, "f8_layernorm_linear_backward: dy", T, N, must);
    if (st == F8_OK && dx) st = f8i_check_act(ctx, dx, "f8_layernorm_linear_backward: dx", T, K, -1);
    if (st == F8_OK && dln_out) {
        if (!m->cfg.return_layernorm_output)
            return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: dln_out given but the module does not return its norm "
                                                           "output", fn);
        st = f8i_check_act(ctx, dln_out, "f8_layernorm_linear_backward: dln_out", T, K, -1);
    }
    if (st != F8_OK) return st;
    if (m->cfg.fuse_wgrad_accumulation && !m->w.main_grad)
        return f8i_error(ctx, F8_ERR_STATE, "%s: fuse_wgrad_accumulation is on but no main_grad was set", fn);

    unsigned char *cursor = (unsigned char *)ctx->scratch + m->reduce_bytes;
    float *dln = (float *)f8i_carve(&cursor, (size_t)(T * K) * 4);
    if (fp8) {
        uint8_t *g8 = (uint8_t *)f8i_carve(&cursor, (size_t)(T * N));
        uint8_t *g8t = (uint8_t *)f8i_carve(&cursor, (size_t)(T * N));
        float *g_sinv = (float *)f8i_carve(&cursor, sizeof(float));
        uint8_t *lnt = (uint8_t *)f8i_carve(&cursor, (size_t)(T * K));
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
        c.scale = f8i_slot_scale(ctx, m->bwd[SLOT_GRAD_OUTPUT]);
        c.amax = f8i_slot_amax(ctx, m->bwd[SLOT_GRAD_OUTPUT]);
        c.scale_inv = g_sinv;
        c.dbias = m->w.db;
        c.dbias_dtype = m->cfg.param_dtype;
        c.dbias_accumulate = 1;
        c.workspace = ctx->scratch; /* the reduce prefix */
        c.workspace_bytes = ctx->scratch_bytes;
        st = f8i_op_cast(ctx, &c);
        if (st == F8_OK) st = f8i_weight_dgrad(ctx, &m->w, g8, gdt, g_sinv, T, dln, F8_DTYPE_FP32);
        if (st == F8_OK) st = f8i_op_transpose_u8(ctx, (const uint8_t *)s->ln, lnt, T, K, NULL);
        if (st == F8_OK)
            st = f8i_weight_wgrad(ctx, &m->w, g8t, gdt, g_sinv, lnt, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), s->ln_sinv,
                                  T, s->microbatch);
    } else {
        st = f8i_weight_dgrad(ctx, &m->w, dy->data, dy->dtype, NULL, T, dln, F8_DTYPE_FP32);
        if (st == F8_OK)
            st = f8i_weight_wgrad(ctx, &m->w, dy->data, dy->dtype, NULL, s->ln, m->cfg.param_dtype, NULL, T,
                                  s->microbatch);
        if (st == F8_OK) st = f8i_weight_bgrad(ctx, &m->w, dy->data, T);
    }
    if (st == F8_OK && dln_out && T > 0) {
        /* The returned norm output's gradient joins dgrad before the norm backward. */
        const void *add = dln_out->data;
        if (dln_out->dtype != F8_DTYPE_FP32) {
            float *tmp = (float *)f8i_carve(&cursor, (size_t)(T * K) * 4);
            st = f8i_op_convert(ctx, dln_out->data, dln_out->dtype, NULL, tmp, F8_DTYPE_FP32, T * K);
            add = tmp;
        }
        if (st == F8_OK) st = f8i_op_add(ctx, dln, add, F8_DTYPE_FP32, T * K);
    }
    if (st == F8_OK)
        st = f8i_norm_backward(ctx, &m->norm, dln, F8_DTYPE_FP32, &s->x, s->mu, s->rsigma, dx ? dx->data : NULL,
                               dx ? dx->dtype : F8_DTYPE_FP32);
    if (st == F8_OK) s->filled = 0;
    return st;
}

void f8i_layernorm_linear_state(f8_layernorm_linear *m, f8i_module_state *s)
{
    memset(s, 0, sizeof *s);
    s->ctx = m->ctx;
    s->fp8 = m->cfg.fp8;
    s->n_weights = 1;
    s->weights[0] = &m->w;
    s->weight_names[0] = "weight";
    s->bias_names[0] = "bias";
    s->norm = &m->norm;
    s->n_fwd = 3;
    s->n_bwd = 2;
    s->fwd = m->fwd;
    s->bwd = m->bwd;
}
