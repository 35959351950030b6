/*
 * modules/layernorm_mlp.c — f8_layernorm_mlp, TE's LayerNormMLP:
 * y = fc2(act(fc1(norm(x)))) (spec §5.3), written once above the backend table.
 *
 * Design note. FP8 forward: the norm writes fc1's FP8 input (GEMM1_INPUT), fc1
 * writes its pre-activation h1 in the parameter dtype (saved for backward),
 * the activation writes fc2's FP8 input (GEMM2_INPUT) with its amax, and fc2
 * produces y. Training, the activation also writes its codes transposed,
 * a8ᵀ (saved: fc2's wgrad operand), and the row-major a8 that only fc2's
 * fprop reads lives in ctx scratch, so the saved state is no larger and the
 * backward transposes nothing of fc2's. Backward:
 *   dy ─cast+transpose+dbias2→ G8, G8ᵀ (GRAD_OUTPUT1)
 *   da = G8 · W2_8;  dW2 += G8ᵀ · a8ᵀ
 *   d = act'(h1)·da ─fused cast+transpose+dbias1→ D8, D8ᵀ (GRAD_OUTPUT2), one op
 *   dln = D8 · W1_8;  dW1 += D8ᵀ · ln8ᵀ;  norm backward from dln.
 * da and dln, the dgrad GEMMs' outputs, are in the parameter dtype, as TE
 * writes them in the activation dtype: with BF16 parameters that halves the
 * bytes the GEMMs write and the activation and norm backwards read (the
 * largest of the layer's non-GEMM costs at its benchmark shape), and rounds
 * them once to BF16 (relative 2^-9, far inside the E5M2 step of d's codes
 * and the FP32 statistics of the norm backward); FP32 parameters keep FP32.
 * Both weights have their own workspace with the same microbatch rule.
 * Unused slots (GEMM1_OUTPUT, GEMM2_OUTPUT, GRAD_INPUT1, GRAD_INPUT2) are
 * registered, as TE does, and never written, so they never roll.
 */
#include <stdlib.h>
#include <string.h>

#include "modules/norm.h"
#include "modules/state.h"
#include "modules/weight.h"
#include "core/ops.h"

enum { GEMM1_INPUT = 0, GEMM1_WEIGHT = 1, GEMM2_INPUT = 3, GEMM2_WEIGHT = 4 };
enum { GRAD_OUTPUT1 = 0, GRAD_OUTPUT2 = 2 };

struct f8_layernorm_mlp {
    f8_ctx *ctx;
    f8_layernorm_mlp_config cfg;
    int64_t f1; /* fc1 output features: ffn, or 2·ffn when gated */
    f8i_norm norm;
    f8i_weight fc1, fc2;
    f8_slot fwd[6], bwd[4];
    size_t reduce_bytes;
    f8_memory_report mem; /* its allocations (saved-state objects included) */
};

struct f8_layernorm_mlp_saved {
    f8_layernorm_mlp *owner;
    void *block;
    void *ln;         /* (T, H) FP8 or param dtype */
    float *ln_sinv;
    float *mu, *rsigma;
    void *h1;         /* (T, F1) param dtype: fc1 output before the activation */
    void *act;        /* FP8: the codes transposed (F, T); else (T, F) param dtype */
    float *act_sinv;
    f8_tensor x;
    int64_t tokens;
    f8_microbatch microbatch;
    int filled;
};

f8_layernorm_mlp_config f8_layernorm_mlp_config_default(int64_t hidden_size, int64_t ffn_hidden_size)
{
    f8_layernorm_mlp_config c;
    c.hidden_size = hidden_size;
    c.ffn_hidden_size = ffn_hidden_size;
    c.bias = 1;
    c.normalization = F8_NORM_LAYERNORM;
    c.eps = 1e-5f;
    c.zero_centered_gamma = 0;
    c.activation = F8_ACT_GELU;
    c.param_dtype = F8_DTYPE_FP32;
    c.fp8 = 1;
    c.fuse_wgrad_accumulation = 0;
    c.fp8_weights = 0;
    c.max_tokens = 4096;
    c.seed = 1;
    return c;
}

/* Lay out (or size, with base NULL) the saved block. */
static size_t saved_place(const f8_layernorm_mlp *m, f8_layernorm_mlp_saved *s, void *base)
{
    const int64_t T = m->cfg.max_tokens > 0 ? m->cfg.max_tokens : 1, H = m->cfg.hidden_size, F = m->cfg.ffn_hidden_size;
    const size_t es = f8_dtype_size(m->cfg.param_dtype), qs = m->cfg.fp8 ? 1 : es;
    unsigned char *c = (unsigned char *)base;
    void *ln = f8i_carve(&c, (size_t)(T * H) * qs);
    void *ln_sinv = f8i_carve(&c, sizeof(float));
    void *mu = f8i_carve(&c, (size_t)T * sizeof(float));
    void *rsigma = f8i_carve(&c, (size_t)T * sizeof(float));
    void *h1 = f8i_carve(&c, (size_t)(T * m->f1) * es);
    void *act = f8i_carve(&c, (size_t)(T * F) * qs);
    void *act_sinv = f8i_carve(&c, sizeof(float));
    if (s) {
        s->ln = ln;
        s->ln_sinv = (float *)ln_sinv;
        s->mu = (float *)mu;
        s->rsigma = (float *)rsigma;
        s->h1 = h1;
        s->act = act;
        s->act_sinv = (float *)act_sinv;
    }
    return (size_t)(c - (unsigned char *)base);
}

f8_status f8_layernorm_mlp_create(f8_ctx *ctx, const f8_layernorm_mlp_config *config, f8_layernorm_mlp **out)
{
    static const char fn[] = "f8_layernorm_mlp_create";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: module (the output) is NULL", fn);
    *out = NULL;
    if (!config) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: config is NULL", fn);
    const f8_layernorm_mlp_config *c = config;
    if (c->hidden_size < 1 || c->ffn_hidden_size < 1 || c->hidden_size > (1 << 24) || c->ffn_hidden_size > (1 << 23))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: hidden_size %lld and ffn_hidden_size %lld must be >= 1 (and at most "
                                            "2^24, 2^23)", fn, (long long)c->hidden_size, (long long)c->ffn_hidden_size);
    if (c->max_tokens < 0 || c->max_tokens > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: max_tokens %lld outside [0, 2^24]", fn, (long long)c->max_tokens);
    if (c->param_dtype != F8_DTYPE_FP32 && c->param_dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: param_dtype must be fp32 or bf16, not %s", fn,
                         f8_dtype_name(c->param_dtype));
    if ((int)c->activation < F8_ACT_GELU || (int)c->activation > F8_ACT_SRELU)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: activation %d is not one of f8_activation", fn,
                         (int)c->activation);
    f8_status st = f8i_norm_config_check(ctx, fn, c->normalization, c->eps);
    if (st == F8_OK) st = f8i_check_fp8_weights(ctx, fn, c->fp8, c->fp8_weights);
    if (st != F8_OK) return st;

    f8_layernorm_mlp *m = (f8_layernorm_mlp *)calloc(1, sizeof *m);
    if (!m) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    m->ctx = ctx;
    m->cfg = *c;
    const int64_t H = c->hidden_size, F = c->ffn_hidden_size, T = c->max_tokens;
    m->f1 = f8_activation_gated(c->activation) ? 2 * F : F;
    st = f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 6, m->fwd);
    if (st == F8_OK) st = f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, 4, m->bwd);
    if (st == F8_OK)
        st = f8i_norm_create(ctx, &m->norm, H, c->normalization, c->eps, c->zero_centered_gamma, c->param_dtype,
                             &m->mem);
    if (st == F8_OK && c->fp8_weights) st = f8i_register_fp8_weight_slots(ctx, m->fwd, 6);
    if (st == F8_OK) {
        f8i_weight_spec ws = {m->f1, H, c->bias, c->param_dtype, c->fp8, c->fp8_weights,
                              c->fuse_wgrad_accumulation, m->fwd[GEMM1_WEIGHT], T, c->seed, &m->mem};
        st = f8i_weight_create(ctx, &m->fc1, &ws);
    }
    if (st == F8_OK) {
        f8i_weight_spec ws = {H, F, c->bias, c->param_dtype, c->fp8, c->fp8_weights,
                              c->fuse_wgrad_accumulation, m->fwd[GEMM2_WEIGHT], T, c->seed + 0x5bd1e995u, &m->mem};
        st = f8i_weight_create(ctx, &m->fc2, &ws);
    }
    if (st == F8_OK) {
        /* forward without saved: a saved block (with saved: a8, smaller);
         * backward: dln, G8, G8ᵀ, da (param dtype with FP8, else FP32), D8,
         * D8ᵀ (or d in param dtype), ln8ᵀ, scale_invs: bounded by FP32 sizes */
        const int64_t F1 = m->f1;
        m->reduce_bytes = f8i_reduce_workspace_bytes(T, F1 > H ? F1 : H);
        size_t fwd = saved_place(m, NULL, NULL);
        size_t bwd = 2 * f8i_align256((size_t)(T * H)) + f8i_align256((size_t)(T * F) * 4) +
                     2 * f8i_align256((size_t)(T * F1) * 4) + f8i_align256((size_t)(T * H) * 4) +
                     f8i_align256((size_t)(T * H)) + 4 * 256;
        st = f8i_scratch_reserve(ctx, m->reduce_bytes + (fwd > bwd ? fwd : bwd));
    }
    if (st == F8_OK) st = ctx->be->synchronize(ctx);
    if (st != F8_OK) {
        f8_layernorm_mlp_destroy(m);
        return st;
    }
    *out = m;
    return F8_OK;
}

void f8_layernorm_mlp_destroy(f8_layernorm_mlp *m)
{
    if (!m) return;
    f8i_weight_destroy(m->ctx, &m->fc1);
    f8i_weight_destroy(m->ctx, &m->fc2);
    f8i_norm_destroy(m->ctx, &m->norm);
    free(m);
}

f8_status f8_layernorm_mlp_param(f8_layernorm_mlp *m, f8_param which, int grad, f8_tensor *view)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!view) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_mlp_param: view is NULL");
    f8_tensor v;
    switch (which) {
    case F8_PARAM_LN_WEIGHT: v = f8i_norm_view(&m->norm, 0, grad); break;
    case F8_PARAM_LN_BIAS: v = f8i_norm_view(&m->norm, 1, grad); break;
    case F8_PARAM_FC1_WEIGHT: v = f8i_weight_view(&m->fc1, grad); break;
    case F8_PARAM_FC1_BIAS: v = f8i_bias_view(&m->fc1, grad); break;
    case F8_PARAM_FC2_WEIGHT: v = f8i_weight_view(&m->fc2, grad); break;
    case F8_PARAM_FC2_BIAS: v = f8i_bias_view(&m->fc2, grad); break;
    default:
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_mlp_param: %d is not a LayerNormMLP parameter",
                         (int)which);
    }
    if (!v.data)
        return f8i_error(m->ctx, F8_ERR_STATE, "f8_layernorm_mlp_param: this module has no parameter %d (no bias, or "
                                               "RMSNorm has no beta)", (int)which);
    *view = v;
    return F8_OK;
}

f8_status f8_layernorm_mlp_slot(const f8_layernorm_mlp *m, f8_direction direction, int i, f8_slot *slot)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    int n = direction == F8_DIR_FORWARD ? 6 : direction == F8_DIR_BACKWARD ? 4 : 0;
    if (!slot || i < 0 || i >= n)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_mlp_slot: no slot %d in direction %d (or slot is "
                                                          "NULL)", i, (int)direction);
    *slot = direction == F8_DIR_FORWARD ? m->fwd[i] : m->bwd[i];
    return F8_OK;
}

const f8_qtensor *f8_layernorm_mlp_weight_workspace(const f8_layernorm_mlp *m, int which)
{
    if (!m || which < 0 || which > 1) return NULL;
    return which ? m->fc2.w8 : m->fc1.w8;
}

f8_status f8_layernorm_mlp_write_weight(f8_layernorm_mlp *m, int which, const f8_tensor *src)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (which != 0 && which != 1)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_mlp_write_weight: which %d is not 0 (fc1) or 1 "
                                                          "(fc2)", which);
    return f8i_weight_write(m->ctx, which ? &m->fc2 : &m->fc1, src, "f8_layernorm_mlp_write_weight");
}

f8_status f8_layernorm_mlp_memory(const f8_layernorm_mlp *m, f8_memory_report *report)
{
    if (!m || !report) return F8_ERR_INVALID_ARGUMENT;
    f8i_module_memory(m->ctx, &m->mem, 10, report);
    return F8_OK;
}

f8_status f8_layernorm_mlp_set_main_grad(f8_layernorm_mlp *m, float *fc1_main_grad, float *fc2_main_grad)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!m->cfg.fuse_wgrad_accumulation)
        return f8i_error(m->ctx, F8_ERR_STATE, "f8_layernorm_mlp_set_main_grad: created without fuse_wgrad_accumulation");
    m->fc1.main_grad = fc1_main_grad;
    m->fc2.main_grad = fc2_main_grad;
    return F8_OK;
}

f8_status f8_layernorm_mlp_zero_grad(f8_layernorm_mlp *m)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8_status st = f8i_weight_zero_grad(m->ctx, &m->fc1);
    if (st == F8_OK) st = f8i_weight_zero_grad(m->ctx, &m->fc2);
    return st == F8_OK ? f8i_norm_zero_grad(m->ctx, &m->norm) : st;
}

f8_status f8_layernorm_mlp_saved_create(f8_layernorm_mlp *m, f8_layernorm_mlp_saved **out)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_mlp_saved_create: saved is NULL");
    *out = NULL;
    f8_layernorm_mlp_saved *s = (f8_layernorm_mlp_saved *)calloc(1, sizeof *s);
    if (!s) return f8i_error(m->ctx, F8_ERR_OUT_OF_MEMORY, "f8_layernorm_mlp_saved_create: out of host memory");
    s->owner = m;
    f8_status st = f8i_alloc(m->ctx, F8_MEM_SAVED_ACTIVATIONS, &m->mem, saved_place(m, NULL, NULL), &s->block);
    if (st != F8_OK) {
        free(s);
        return st;
    }
    saved_place(m, s, s->block);
    *out = s;
    return F8_OK;
}

void f8_layernorm_mlp_saved_destroy(f8_layernorm_mlp_saved *s)
{
    if (!s) return;
    f8i_free(s->owner->ctx, s->block);
    free(s);
}

f8_status f8_layernorm_mlp_forward(f8_layernorm_mlp *m, const f8_tensor *x, f8_tensor *y, f8_microbatch mb,
                                   f8_layernorm_mlp_saved *saved)
{
    static const char fn[] = "f8_layernorm_mlp_forward";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = m->ctx;
    const int64_t H = m->cfg.hidden_size, F = m->cfg.ffn_hidden_size;
    const int fp8 = m->cfg.fp8, must = fp8 ? -1 : (int)m->cfg.param_dtype;
    const f8_dtype pdt = m->cfg.param_dtype;
    f8_status st = f8i_check_act(ctx, x, "f8_layernorm_mlp_forward: x", -1, H, must);
    if (st != F8_OK) return st;
    const int64_t T = x->rows;
    if (T > m->cfg.max_tokens)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: x has %lld tokens, more than max_tokens %lld", fn, (long long)T,
                         (long long)m->cfg.max_tokens);
    st = f8i_check_act(ctx, y, "f8_layernorm_mlp_forward: y", T, H, -1);
    if (st != F8_OK) return st;
    if (mb != F8_MICROBATCH_NONE && mb != F8_MICROBATCH_FIRST && mb != F8_MICROBATCH_NOT_FIRST)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: microbatch %d is not NONE, FIRST or NOT_FIRST", fn, (int)mb);
    if (saved && saved->owner != m)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved belongs to another module", fn);

    f8_layernorm_mlp_saved tmp;
    f8_layernorm_mlp_saved *s = saved;
    if (!s) { /* inference keeps its intermediates in scratch */
        memset(&tmp, 0, sizeof tmp);
        saved_place(m, &tmp, (unsigned char *)ctx->scratch + m->reduce_bytes);
        s = &tmp;
    }
    const f8_dtype qdt = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), adt = fp8 ? qdt : pdt;
    /* fc2's input: FP8 training keeps its transpose in saved and the codes
     * themselves, read by fc2's fprop only, in scratch (nothing else of the
     * forward uses scratch: no dbias, and the GEMMs have their own workspace) */
    void *a8 = fp8 && saved ? (unsigned char *)ctx->scratch + m->reduce_bytes : s->act;
    if (fp8)
        st = f8i_norm_forward(ctx, &m->norm, x, s->ln, qdt, f8i_slot_scale(ctx, m->fwd[GEMM1_INPUT]),
                              f8i_slot_amax(ctx, m->fwd[GEMM1_INPUT]), s->ln_sinv, s->mu, s->rsigma);
    else
        st = f8i_norm_forward(ctx, &m->norm, x, s->ln, pdt, NULL, NULL, NULL, s->mu, s->rsigma);
    if (st == F8_OK && fp8) st = f8i_weight_cast(ctx, &m->fc1, mb, saved != NULL);
    if (st == F8_OK && fp8) st = f8i_weight_cast(ctx, &m->fc2, mb, saved != NULL);
    if (st == F8_OK) st = f8i_weight_fprop(ctx, &m->fc1, s->ln, adt, fp8 ? s->ln_sinv : NULL, T, s->h1, pdt);
    if (st == F8_OK) {
        f8i_act_fwd_args a;
        memset(&a, 0, sizeof a);
        a.act = m->cfg.activation;
        a.x = s->h1;
        a.x_dtype = pdt;
        a.rows = T;
        a.cols = F;
        a.y = a8;
        a.y_dtype = adt;
        if (fp8) {
            a.y_t = saved ? (uint8_t *)s->act : NULL;
            a.scale = f8i_slot_scale(ctx, m->fwd[GEMM2_INPUT]);
            a.amax = f8i_slot_amax(ctx, m->fwd[GEMM2_INPUT]);
            a.scale_inv = s->act_sinv;
        }
        st = f8i_op_act_fwd(ctx, &a);
    }
    if (st == F8_OK) st = f8i_weight_fprop(ctx, &m->fc2, a8, adt, fp8 ? s->act_sinv : NULL, T, y->data, y->dtype);
    if (st == F8_OK && saved) {
        saved->x = *x;
        saved->tokens = T;
        saved->microbatch = mb;
        saved->filled = 1;
    }
    return st;
}

static f8_status backward_fp8(f8_layernorm_mlp *m, f8_layernorm_mlp_saved *s, const f8_tensor *dy, void *dln)
{
    f8_ctx *ctx = m->ctx;
    const int64_t T = s->tokens, H = m->cfg.hidden_size, F = m->cfg.ffn_hidden_size, F1 = m->f1;
    const f8_dtype gdt = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD), qdt = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD);
    const f8_dtype pdt = m->cfg.param_dtype; /* da's and dln's dtype (design note) */
    const size_t es = f8_dtype_size(pdt);
    /* dln sits at the start of the module scratch; these buffers follow it */
    unsigned char *cursor = (unsigned char *)ctx->scratch + m->reduce_bytes + f8i_align256((size_t)(T * H) * es);
    uint8_t *g8 = (uint8_t *)f8i_carve(&cursor, (size_t)(T * H));
    uint8_t *g8t = (uint8_t *)f8i_carve(&cursor, (size_t)(T * H));
    float *g_sinv = (float *)f8i_carve(&cursor, sizeof(float));
    void *da = f8i_carve(&cursor, (size_t)(T * F) * es);
    uint8_t *d8 = (uint8_t *)f8i_carve(&cursor, (size_t)(T * F1));
    uint8_t *d8t = (uint8_t *)f8i_carve(&cursor, (size_t)(T * F1));
    float *d_sinv = (float *)f8i_carve(&cursor, sizeof(float));
    uint8_t *lnt = (uint8_t *)f8i_carve(&cursor, (size_t)(T * H));

    f8i_cast_args c;
    memset(&c, 0, sizeof c);
    c.src = dy->data;
    c.src_dtype = dy->dtype;
    c.rows = T;
    c.cols = H;
    c.out_dtype = gdt;
    c.out = g8;
    c.out_t = g8t;
    c.scale = f8i_slot_scale(ctx, m->bwd[GRAD_OUTPUT1]);
    c.amax = f8i_slot_amax(ctx, m->bwd[GRAD_OUTPUT1]);
    c.scale_inv = g_sinv;
    c.dbias = m->fc2.db;
    c.dbias_dtype = m->cfg.param_dtype;
    c.dbias_accumulate = 1;
    c.workspace = ctx->scratch; /* the reduce prefix */
    c.workspace_bytes = ctx->scratch_bytes;
    f8_status st = f8i_op_cast(ctx, &c);
    if (st == F8_OK) st = f8i_weight_dgrad(ctx, &m->fc2, g8, gdt, g_sinv, T, da, pdt);
    if (st == F8_OK) /* s->act holds the codes transposed (the forward wrote them) */
        st = f8i_weight_wgrad(ctx, &m->fc2, g8t, gdt, g_sinv, s->act, qdt, s->act_sinv, T, s->microbatch);
    if (st == F8_OK) {
        f8i_act_bwd_args a;
        memset(&a, 0, sizeof a);
        a.act = m->cfg.activation;
        a.x = s->h1;
        a.x_dtype = m->cfg.param_dtype;
        a.dy = da;
        a.dy_dtype = pdt;
        a.rows = T;
        a.cols = F;
        a.out = d8;
        a.out_t = d8t;
        a.out_dtype = gdt;
        a.scale = f8i_slot_scale(ctx, m->bwd[GRAD_OUTPUT2]);
        a.amax = f8i_slot_amax(ctx, m->bwd[GRAD_OUTPUT2]);
        a.scale_inv = d_sinv;
        a.dbias = m->fc1.db;
        a.dbias_dtype = m->cfg.param_dtype;
        a.dbias_accumulate = 1;
        a.workspace = ctx->scratch; /* the reduce prefix */
        a.workspace_bytes = ctx->scratch_bytes;
        st = f8i_op_act_bwd(ctx, &a);
    }
    if (st == F8_OK) st = f8i_weight_dgrad(ctx, &m->fc1, d8, gdt, d_sinv, T, dln, pdt);
    if (st == F8_OK) st = f8i_op_transpose_u8(ctx, (const uint8_t *)s->ln, lnt, T, H, NULL);
    if (st == F8_OK) st = f8i_weight_wgrad(ctx, &m->fc1, d8t, gdt, d_sinv, lnt, qdt, s->ln_sinv, T, s->microbatch);
    return st;
}

static f8_status backward_hp(f8_layernorm_mlp *m, f8_layernorm_mlp_saved *s, const f8_tensor *dy, void *dln)
{
    f8_ctx *ctx = m->ctx;
    const int64_t T = s->tokens, H = m->cfg.hidden_size, F = m->cfg.ffn_hidden_size, F1 = m->f1;
    const f8_dtype pdt = m->cfg.param_dtype;
    unsigned char *cursor = (unsigned char *)ctx->scratch + m->reduce_bytes + f8i_align256((size_t)(T * H) * 4);
    float *da = (float *)f8i_carve(&cursor, (size_t)(T * F) * 4);
    void *d = f8i_carve(&cursor, (size_t)(T * F1) * f8_dtype_size(pdt));
    f8_status st = f8i_weight_dgrad(ctx, &m->fc2, dy->data, pdt, NULL, T, da, F8_DTYPE_FP32);
    if (st == F8_OK) st = f8i_weight_wgrad(ctx, &m->fc2, dy->data, pdt, NULL, s->act, pdt, NULL, T, s->microbatch);
    if (st == F8_OK) st = f8i_weight_bgrad(ctx, &m->fc2, dy->data, T);
    if (st == F8_OK) {
        f8i_act_bwd_args a;
        memset(&a, 0, sizeof a);
        a.act = m->cfg.activation;
        a.x = s->h1;
        a.x_dtype = pdt;
        a.dy = da;
        a.dy_dtype = F8_DTYPE_FP32;
        a.rows = T;
        a.cols = F;
        a.dx = d;
        a.dx_dtype = pdt;
        st = f8i_op_act_bwd(ctx, &a);
    }
    if (st == F8_OK) st = f8i_weight_dgrad(ctx, &m->fc1, d, pdt, NULL, T, dln, F8_DTYPE_FP32);
    if (st == F8_OK) st = f8i_weight_wgrad(ctx, &m->fc1, d, pdt, NULL, s->ln, pdt, NULL, T, s->microbatch);
    if (st == F8_OK) st = f8i_weight_bgrad(ctx, &m->fc1, d, T);
    return st;
}

f8_status f8_layernorm_mlp_backward(f8_layernorm_mlp *m, f8_layernorm_mlp_saved *s, const f8_tensor *dy, f8_tensor *dx)
{
    static const char fn[] = "f8_layernorm_mlp_backward";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = m->ctx;
    if (!s) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved is NULL", fn);
    if (s->owner != m) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved belongs to another module", fn);
    if (!s->filled) return f8i_error(ctx, F8_ERR_STATE, "%s: saved holds no forward (never filled, or consumed)", fn);
    const int64_t T = s->tokens, H = m->cfg.hidden_size;
    const int must = m->cfg.fp8 ? -1 : (int)m->cfg.param_dtype;
    f8_status st = f8i_check_act(ctx, dy, "f8_layernorm_mlp_backward: dy", T, H, must);
    if (st == F8_OK && dx) st = f8i_check_act(ctx, dx, "f8_layernorm_mlp_backward: dx", T, H, -1);
    if (st != F8_OK) return st;
    if (m->cfg.fuse_wgrad_accumulation && (!m->fc1.main_grad || !m->fc2.main_grad))
        return f8i_error(ctx, F8_ERR_STATE, "%s: fuse_wgrad_accumulation is on but the main_grads were not set", fn);
    void *dln = (unsigned char *)ctx->scratch + m->reduce_bytes;
    const f8_dtype ddt = m->cfg.fp8 ? m->cfg.param_dtype : F8_DTYPE_FP32; /* dln's dtype */
    st = m->cfg.fp8 ? backward_fp8(m, s, dy, dln) : backward_hp(m, s, dy, dln);
    if (st == F8_OK)
        st = f8i_norm_backward(ctx, &m->norm, dln, ddt, &s->x, s->mu, s->rsigma, dx ? dx->data : NULL,
                               dx ? dx->dtype : F8_DTYPE_FP32);
    if (st == F8_OK) s->filled = 0;
    return st;
}

void f8i_layernorm_mlp_state(f8_layernorm_mlp *m, f8i_module_state *s)
{
    memset(s, 0, sizeof *s);
    s->ctx = m->ctx;
    s->fp8 = m->cfg.fp8;
    s->n_weights = 2;
    s->weights[0] = &m->fc1;
    s->weights[1] = &m->fc2;
    s->weight_names[0] = "fc1_weight";
    s->weight_names[1] = "fc2_weight";
    s->bias_names[0] = "fc1_bias";
    s->bias_names[1] = "fc2_bias";
    s->norm = &m->norm;
    s->n_fwd = 6;
    s->n_bwd = 4;
    s->fwd = m->fwd;
    s->bwd = m->bwd;
}
