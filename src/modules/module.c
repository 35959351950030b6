/*
 * modules/module.c — the module base (module.h): creation, the public
 * f8_module_* calls, argument checks, saved state and the FP8 casts every
 * module makes. Written once for every module.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modules/module.h"

/* ------------------------------------------------------------------------ */
/* Creation and destruction                                                  */
/* ------------------------------------------------------------------------ */

f8_status f8i_create_check(f8_ctx *ctx, const char *fn, const void *config, f8_module **out)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: module (the output) is NULL", fn);
    *out = NULL;
    if (!config) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: config is NULL", fn);
    return F8_OK;
}

void f8i_spec_single_weight(f8i_module_spec *s, const f8i_module_class *cls, int64_t in, int64_t out, uint64_t seed)
{
    s->cls = cls;
    s->in_features = in;
    s->out_features = out;
    s->n_fwd = 3;
    s->n_bwd = 2;
    s->n_weights = 1;
    s->weight_shape[0][0] = out;
    s->weight_shape[0][1] = in;
    s->weight_slot[0] = 1; /* WEIGHT */
    s->weight_seed[0] = seed;
    s->weight_names[0] = "weight";
    s->bias_names[0] = "bias";
    s->shape_names = "in_features and out_features";
    s->shape[0] = in;
    s->shape[1] = out;
    s->shape_max[0] = s->shape_max[1] = 1 << 24;
}

static f8_status flag_check(f8_ctx *ctx, const char *fn, const char *name, int value)
{
    if (value != 0 && value != 1)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: config.%s is %d; it must be 0 or 1", fn, name, value);
    return F8_OK;
}

static f8_status spec_check(f8_ctx *ctx, const f8i_module_spec *s, const char *fn)
{
    if (s->shape[0] < 1 || s->shape[1] < 1 || s->shape[0] > s->shape_max[0] || s->shape[1] > s->shape_max[1])
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: %s are %lld and %lld; they must be in [1, %lld] and [1, %lld]", fn,
                         s->shape_names, (long long)s->shape[0], (long long)s->shape[1], (long long)s->shape_max[0],
                         (long long)s->shape_max[1]);
    if (s->max_tokens < 0 || s->max_tokens > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: max_tokens %lld outside [0, 2^24]", fn, (long long)s->max_tokens);
    if (s->param_dtype != F8_DTYPE_FP32 && s->param_dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: param_dtype must be fp32 or bf16, not %s", fn,
                         f8_dtype_name(s->param_dtype));
    f8_status st = flag_check(ctx, fn, "bias", s->bias);
    if (st == F8_OK) st = flag_check(ctx, fn, "fp8", s->fp8);
    if (st == F8_OK) st = flag_check(ctx, fn, "fp8_weights", s->fp8_weights);
    if (st == F8_OK) st = flag_check(ctx, fn, "fuse_wgrad_accumulation", s->fuse_wgrad);
    if (st == F8_OK) st = flag_check(ctx, fn, "weight_transpose_per_call", s->weight_transpose_per_call);
    if (st == F8_OK && s->has_norm) st = flag_check(ctx, fn, "zero_centered_gamma", s->zero_centered_gamma);
    if (st == F8_OK && s->has_norm) st = f8i_norm_config_check(ctx, fn, s->normalization, s->eps);
    if (st == F8_OK && s->has_norm) st = flag_check(ctx, fn, "recompute_norm_output", s->recompute_norm);
    const f8i_quantizer q = f8i_quantizer_for(ctx);
    if (st == F8_OK && s->recompute_norm && s->fp8) st = f8i_quantizer_check_recompute_norm(ctx, &q, fn);
    if (st == F8_OK) st = f8i_check_fp8_weights(ctx, fn, s->fp8, s->fp8_weights);
    return st;
}

/* Everything but the slots (module_release_slots) and the host struct. */
static void release_memory(f8_module *m)
{
    for (int i = 0; i < m->n_weights; i++) f8i_weight_destroy(m->ctx, &m->w[i]);
    if (m->has_norm) f8i_norm_destroy(m->ctx, &m->norm);
}

static f8_status module_init(f8_ctx *ctx, f8_module *m, const f8i_module_spec *s, const char *fn)
{
    F8I_TRY(spec_check(ctx, s, fn));
    m->cls = s->cls;
    m->ctx = ctx;
    m->fp8 = s->fp8;
    m->param_dtype = s->param_dtype;
    m->fuse_wgrad = s->fuse_wgrad;
    m->in_features = s->in_features;
    m->out_features = s->out_features;
    m->max_tokens = s->max_tokens;
    m->n_fwd = s->n_fwd;
    m->n_bwd = s->n_bwd;
    m->has_norm = s->has_norm;
    m->recompute_norm = s->recompute_norm;
    m->workspace = s->workspace;
    m->q = f8i_quantizer_for(ctx);

    /* Slots first (an FP8 primary weight is quantized with its slot's
     * scale); a failure later hands them back. */
    f8i_slot_mark mark = f8i_slots_mark(ctx);
    f8_status st = f8_ctx_slots_create(ctx, F8_DIR_FORWARD, s->n_fwd, m->fwd);
    if (st == F8_OK) st = f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, s->n_bwd, m->bwd);
    if (st == F8_OK && s->has_norm)
        st = f8i_norm_create(ctx, &m->norm, s->in_features, s->normalization, s->eps, s->zero_centered_gamma,
                             s->param_dtype, &m->mem);
    for (int i = 0; i < s->n_weights && st == F8_OK; i++) {
        f8i_weight_spec ws = {s->weight_shape[i][0], s->weight_shape[i][1], s->bias, s->param_dtype, s->fp8,
                              s->fp8_weights, s->fuse_wgrad, m->fwd[s->weight_slot[i]], s->max_tokens,
                              s->weight_seed[i], &m->mem, m->q.weight, s->weight_transpose_per_call};
        m->n_weights = i + 1; /* counted before: a failed create leaves parts to free */
        m->weight_names[i] = s->weight_names[i];
        m->bias_names[i] = s->bias_names[i];
        st = f8i_weight_create(ctx, &m->w[i], &ws);
    }
    if (st == F8_OK) {
        const size_t f = s->workspace(m, s->max_tokens, 0), b = s->workspace(m, s->max_tokens, 1);
        m->workspace_bytes = f > b ? f : b;
        st = f8i_scratch_reserve(ctx, m->workspace_bytes);
    }
    /* Last: the only registration outside the slot registry itself. */
    if (st == F8_OK && s->fp8_weights) st = f8i_register_fp8_weight_slots(ctx, m->fwd, s->n_fwd);
    if (st == F8_OK) st = ctx->be->synchronize(ctx);
    if (st != F8_OK) {
        release_memory(m);
        f8i_slots_rollback(ctx, mark);
    }
    return st;
}

f8_status f8i_module_create(f8_ctx *ctx, const f8i_module_spec *s, const char *fn, f8_module **out)
{
    f8_module *m = (f8_module *)calloc(1, s->module_bytes);
    if (!m) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    if (s->own_bytes) memcpy((unsigned char *)m + s->own_offset, s->own, s->own_bytes);
    f8_status st = module_init(ctx, m, s, fn);
    if (st != F8_OK) {
        free(m);
        return st;
    }
    *out = m;
    return F8_OK;
}

void f8_module_destroy(f8_module *m)
{
    if (!m) return;
    release_memory(m);
    free(m);
}

/* ------------------------------------------------------------------------ */
/* Parameters, slots, workspaces, memory                                     */
/* ------------------------------------------------------------------------ */

const char *f8_param_name(f8_param which)
{
    static const char *const names[] = {"weight",     "bias",    "layer_norm_weight", "layer_norm_bias",
                                        "fc1_weight", "fc1_bias", "fc2_weight",       "fc2_bias"};
    return (int)which >= 0 && (int)which < 8 ? names[which] : "unknown";
}

/* The weight a parameter names (*bias: its bias), or NULL when the module
 * has no such weight. */
static f8i_weight *weight_of(f8_module *m, f8_param which, int *bias)
{
    int fc = m->cls->fc_names, i = -1;
    *bias = which == F8_PARAM_BIAS || which == F8_PARAM_FC1_BIAS || which == F8_PARAM_FC2_BIAS;
    if (!fc && (which == F8_PARAM_WEIGHT || which == F8_PARAM_BIAS)) i = 0;
    if (fc && (which == F8_PARAM_FC1_WEIGHT || which == F8_PARAM_FC1_BIAS)) i = 0;
    if (fc && (which == F8_PARAM_FC2_WEIGHT || which == F8_PARAM_FC2_BIAS)) i = 1;
    return i >= 0 && i < m->n_weights ? &m->w[i] : NULL;
}

static f8_status no_param(f8_module *m, const char *fn, f8_param which)
{
    return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: %s (%d) is not a parameter of a %s", fn,
                     f8_param_name(which), (int)which, m->cls->name);
}

/* The weight (not a bias) a parameter names, or an error naming fn. */
static f8_status weight_param(f8_module *m, const char *fn, f8_param which, f8i_weight **w)
{
    int bias = 0;
    *w = weight_of(m, which, &bias);
    if (!*w || bias) return no_param(m, fn, which);
    return F8_OK;
}

f8_status f8_module_param(f8_module *m, f8_param which, int grad, f8_tensor *view)
{
    static const char fn[] = "f8_module_param";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!view) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: view (the output) is NULL", fn);
    if (grad != 0 && grad != 1) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: grad is %d, not 0 or 1", fn, grad);
    f8_tensor v;
    int bias = 0;
    f8i_weight *w = weight_of(m, which, &bias);
    if (w) {
        v = bias ? f8i_bias_view(w, grad) : f8i_weight_view(w, grad);
    } else if (m->has_norm && (which == F8_PARAM_LN_WEIGHT || which == F8_PARAM_LN_BIAS)) {
        v = f8i_norm_view(&m->norm, which == F8_PARAM_LN_BIAS, grad);
    } else {
        return no_param(m, fn, which);
    }
    if (!v.data && w && !bias && grad) /* fused: its gradient is the main_grad, not set yet */
        return f8i_error(m->ctx, F8_ERR_STATE, "%s: the %s's %s gradient goes to a main_grad (fuse_wgrad_accumulation) "
                                               "and none is set yet (f8_module_set_main_grad)", fn, m->cls->name,
                         f8_param_name(which));
    if (!v.data)
        return f8i_error(m->ctx, F8_ERR_STATE, "%s: this %s has no %s (created without a bias, or an RMSNorm has no beta)",
                         fn, m->cls->name, f8_param_name(which));
    *view = v;
    return F8_OK;
}

f8_status f8_module_slot(const f8_module *m, f8_direction direction, int i, f8_slot *slot)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    int n = direction == F8_DIR_FORWARD ? m->n_fwd : direction == F8_DIR_BACKWARD ? m->n_bwd : 0;
    if (!slot || i < 0 || i >= n)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_module_slot: a %s has no slot %d in direction %d (or slot "
                                                          "is NULL)", m->cls->name, i, (int)direction);
    *slot = direction == F8_DIR_FORWARD ? m->fwd[i] : m->bwd[i];
    return F8_OK;
}

const f8_qtensor *f8_module_weight_workspace(const f8_module *m, f8_param which)
{
    if (!m) return NULL;
    int bias = 0;
    f8i_weight *w = weight_of((f8_module *)m, which, &bias);
    return w && !bias ? w->w8 : NULL;
}

f8_status f8_module_write_weight(f8_module *m, f8_param which, const f8_tensor *src)
{
    static const char fn[] = "f8_module_write_weight";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8i_weight *w = NULL;
    f8_status st = weight_param(m, fn, which, &w);
    return st == F8_OK ? f8i_weight_write(m->ctx, w, src, fn) : st;
}

/* The FP8 primary weight `which` of m, or an error naming fn. */
static f8_status primary_param(f8_module *m, const char *fn, f8_param which, f8i_weight **w)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8_status st = weight_param(m, fn, which, w);
    if (st == F8_OK && !(*w)->fp8_primary)
        return f8i_error(m->ctx, F8_ERR_STATE, "%s: the %s's %s is not an FP8 primary weight (fp8_weights = 0)", fn,
                         m->cls->name, f8_param_name(which));
    if (st == F8_OK && m->q.current)
        return f8i_error(m->ctx, F8_ERR_UNSUPPORTED, "%s: current scaling casts with the whole weight's amax; a part "
                                                     "of it cannot be cast alone", fn);
    return st;
}

f8_status f8_module_quantize_weight_part(f8_module *m, f8_param which, const f8_tensor *src, void *codes)
{
    static const char fn[] = "f8_module_quantize_weight_part";
    f8i_weight *w = NULL;
    f8_status st = primary_param(m, fn, which, &w);
    if (st == F8_OK) st = f8i_check_act(m->ctx, src, "f8_module_quantize_weight_part: src", 1, src->cols, -1);
    if (st == F8_OK && src->cols > w->rows * w->cols)
        st = f8i_error(m->ctx, F8_ERR_SHAPE, "%s: %lld values, the weight has %lld", fn, (long long)src->cols,
                       (long long)(w->rows * w->cols));
    return st == F8_OK ? f8i_weight_quantize_part(m->ctx, w, src->data, src->dtype, src->cols, codes) : st;
}

f8_status f8_module_write_weight_codes(f8_module *m, f8_param which, const void *codes)
{
    f8i_weight *w = NULL;
    f8_status st = primary_param(m, "f8_module_write_weight_codes", which, &w);
    return st == F8_OK ? f8i_weight_write_codes(m->ctx, w, codes) : st;
}

f8_status f8_module_set_main_grad(f8_module *m, f8_param which, float *main_grad)
{
    static const char fn[] = "f8_module_set_main_grad";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8i_weight *w = NULL;
    F8I_TRY(weight_param(m, fn, which, &w));
    if (!m->fuse_wgrad)
        return f8i_error(m->ctx, F8_ERR_STATE, "%s: the %s was created without fuse_wgrad_accumulation", fn, m->cls->name);
    if (!main_grad) /* not a way to unset it: a backward would then fail, or write nowhere */
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: main_grad is NULL", fn);
    w->main_grad = main_grad;
    return F8_OK;
}

f8_status f8_module_zero_grad(f8_module *m)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    f8_status st = F8_OK;
    for (int i = 0; i < m->n_weights && st == F8_OK; i++) st = f8i_weight_zero_grad(m->ctx, &m->w[i]);
    if (st == F8_OK && m->has_norm) st = f8i_norm_zero_grad(m->ctx, &m->norm);
    return st;
}

f8_status f8_module_memory(const f8_module *m, f8_memory_report *report)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!report) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_module_memory: report (the output) is NULL");
    f8i_module_memory(m->ctx, &m->mem, m->n_fwd + m->n_bwd, report);
    return F8_OK;
}

/* ------------------------------------------------------------------------ */
/* Saved state                                                               */
/* ------------------------------------------------------------------------ */

f8_status f8_module_saved_create(f8_module *m, f8_saved **out)
{
    static const char fn[] = "f8_module_saved_create";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved (the output) is NULL", fn);
    *out = NULL;
    f8_saved *s = (f8_saved *)calloc(1, sizeof *s + m->cls->saved_impl_size);
    if (!s) return f8i_error(m->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    s->owner = m;
    s->impl = s + 1;
    const int64_t T = m->max_tokens > 0 ? m->max_tokens : 1;
    f8i_layout l = f8i_layout_at(NULL);
    const size_t bytes = m->cls->place_saved(m, &l, T, s->impl);
    f8_status st = F8_OK;
    if (bytes) st = f8i_alloc(m->ctx, F8_MEM_SAVED_ACTIVATIONS, &m->mem, bytes, &s->block);
    if (st != F8_OK) {
        free(s);
        return st;
    }
    l = f8i_layout_at(s->block);
    if (bytes) m->cls->place_saved(m, &l, T, s->impl);
    *out = s;
    return F8_OK;
}

void f8_saved_destroy(f8_saved *s)
{
    if (!s) return;
    f8i_free(s->owner->ctx, s->block);
    free(s);
}

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                      */
/* ------------------------------------------------------------------------ */

/* Do the bytes of a and b (checked tensors) share any address? */
static int overlap(const f8_tensor *a, const f8_tensor *b)
{
    const uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
    const size_t na = f8i_tensor_bytes(a), nb = f8i_tensor_bytes(b);
    return na && nb && a0 < b0 + nb && b0 < a0 + na;
}

/* An addend (the residual of forward_add, the old dx of backward_add) of
 * the output out [rows, cols] (checked): same dtype and shape, and either
 * out itself (identical view) or apart from it. Sets the ctx error. */
static f8_status addend_check(f8_ctx *ctx, const f8_tensor *r, const f8_tensor *out, const char *name, const char *fn)
{
    char what[96];
    snprintf(what, sizeof what, "%s: %s", fn, name);
    F8I_TRY(f8i_check_tensor(ctx, r, what));
    if (r->dtype != out->dtype)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s is %s but y is %s: the residual takes y's dtype", what,
                         f8_dtype_name(r->dtype), f8_dtype_name(out->dtype));
    if (r->rows != out->rows || r->cols != out->cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s is [%lld, %lld], y is [%lld, %lld]: they must match", what,
                         (long long)r->rows, (long long)r->cols, (long long)out->rows, (long long)out->cols);
    if (r->data != out->data && overlap(r, out))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s overlaps y in part: it must be y itself (y += the "
                                                       "output) or apart from it", what);
    return F8_OK;
}

static f8_status forward_checked(f8_module *m, const f8_tensor *x, f8_tensor *y, f8_tensor *aux, f8_microbatch mb,
                                 f8_saved *saved, const f8_tensor *residual, const char *fn)
{
    f8_ctx *ctx = m->ctx;
    char name[96];
    const int must = m->fp8 ? -1 : (int)m->param_dtype;
    snprintf(name, sizeof name, "%s: x", fn);
    F8I_TRY(f8i_check_act(ctx, x, name, -1, m->in_features, must));
    const int64_t T = f8i_sp_tokens(m, x->rows); /* sequence parallel: x holds T / P of them */
    if (T > m->max_tokens)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: x has %lld tokens%s, more than config.max_tokens %lld", fn,
                         (long long)T, m->sp ? " over the sequence-parallel group" : "", (long long)m->max_tokens);
    snprintf(name, sizeof name, "%s: y", fn);
    F8I_TRY(f8i_check_act(ctx, y, name, T, m->out_features, -1));
    /* the GEMMs' D must not alias their inputs (cuBLASLt), and the norm reads x while writing its output */
    if (overlap(x, y)) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: y overlaps x: pass them apart", fn);
    if (mb != F8_MICROBATCH_NONE && mb != F8_MICROBATCH_FIRST && mb != F8_MICROBATCH_NOT_FIRST)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: microbatch %d is not NONE, FIRST or NOT_FIRST", fn, (int)mb);
    if (saved && saved->owner != m)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved belongs to another module", fn);
    if (residual) F8I_TRY(addend_check(ctx, residual, y, "residual", fn));
    const f8_status st = m->cls->forward(m, x, y, aux, mb, saved, residual);
    if (st == F8_OK && saved) {
        saved->x = *x;
        saved->tokens = T;
        saved->microbatch = mb;
        saved->filled = 1;
    }
    return st;
}

static f8_status backward_checked(f8_module *m, f8_saved *s, const f8_tensor *dy, const f8_tensor *aux, f8_tensor *dx,
                                  int dx_add, const char *fn)
{
    f8_ctx *ctx = m->ctx;
    if (!s) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved is NULL", fn);
    if (s->owner != m) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved belongs to another module", fn);
    if (!s->filled)
        return f8i_error(ctx, F8_ERR_STATE, "%s: saved holds no forward (never filled, or already consumed by a "
                                            "backward)", fn);
    char name[96];
    const int must = m->fp8 ? -1 : (int)m->param_dtype;
    snprintf(name, sizeof name, "%s: dy", fn);
    F8I_TRY(f8i_check_act(ctx, dy, name, s->tokens, m->out_features, must));
    snprintf(name, sizeof name, "%s: dx", fn);
    if (dx) F8I_TRY(f8i_check_act(ctx, dx, name, s->x.rows, m->in_features, -1)); /* x's rows: T / P */
    /* dx is read and written. A norm module reads dy before its last op
     * (the norm backward) writes dx, so dx may be dy itself; a Linear's
     * dgrad reads dy (FP8 off) while it writes dx, and wgrad reads it after. */
    const int same = dx && dx->data == dy->data && f8i_tensor_bytes(dx) == f8i_tensor_bytes(dy);
    if (dx_add && overlap(dx, dy) && !(m->has_norm && same))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: dx overlaps dy%s", fn,
                         m->has_norm ? " in part: it may be dy itself (same bytes) or apart from it"
                                     : ": a Linear reads dy while it writes dx; pass them apart");
    for (int i = 0; i < m->n_weights; i++)
        if (m->fuse_wgrad && !m->w[i].main_grad)
            return f8i_error(ctx, F8_ERR_STATE, "%s: fuse_wgrad_accumulation is on but no main_grad was set for %s "
                                                "(f8_module_set_main_grad)", fn, m->weight_names[i]);
    F8I_TRY(m->cls->backward(m, s, dy, aux, dx, dx_add));
    s->filled = 0;
    return F8_OK;
}

f8_status f8_module_forward(f8_module *m, const f8_tensor *x, f8_tensor *y, f8_microbatch microbatch, f8_saved *saved)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    return forward_checked(m, x, y, NULL, microbatch, saved, NULL, "f8_module_forward");
}

f8_status f8_module_forward_add(f8_module *m, const f8_tensor *x, f8_tensor *y, const f8_tensor *residual,
                                f8_microbatch microbatch, f8_saved *saved)
{
    static const char fn[] = "f8_module_forward_add";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!residual)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: residual is NULL (f8_module_forward has none)", fn);
    return forward_checked(m, x, y, NULL, microbatch, saved, residual, fn);
}

f8_status f8_module_backward(f8_module *m, f8_saved *saved, const f8_tensor *dy, f8_tensor *dx)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    return backward_checked(m, saved, dy, NULL, dx, 0, "f8_module_backward");
}

f8_status f8_module_backward_add(f8_module *m, f8_saved *saved, const f8_tensor *dy, f8_tensor *dx)
{
    static const char fn[] = "f8_module_backward_add";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!dx) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: dx is NULL (it is read and added to)", fn);
    return backward_checked(m, saved, dy, NULL, dx, 1, fn);
}

f8_status f8i_module_forward_aux(f8_module *m, const f8i_module_class *cls, const f8_tensor *x, f8_tensor *y,
                                 f8_tensor *aux, f8_microbatch mb, f8_saved *saved, const char *fn)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (m->cls != cls) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: the module is a %s", fn, m->cls->name);
    return forward_checked(m, x, y, aux, mb, saved, NULL, fn);
}

f8_status f8i_module_backward_aux(f8_module *m, const f8i_module_class *cls, f8_saved *s, const f8_tensor *dy,
                                  const f8_tensor *aux, f8_tensor *dx, const char *fn)
{
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (m->cls != cls) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: the module is a %s", fn, m->cls->name);
    return backward_checked(m, s, dy, aux, dx, 0, fn);
}

/* ------------------------------------------------------------------------ */
/* FP8 casts                                                                 */
/* ------------------------------------------------------------------------ */

float *f8i_take_sinv(const f8_module *m, f8i_layout *l, int64_t rows, int64_t cols, size_t bytes)
{
    return (float *)f8i_take(l, f8i_quantizer_sinv_bytes(&m->q, rows, cols, bytes));
}

f8i_qbuf f8i_take_qbuf(f8_module *m, f8i_layout *l, f8_direction dir, int64_t rows, int64_t cols, int t)
{
    f8i_qbuf q;
    q.data = (uint8_t *)f8i_take(l, (size_t)(rows * cols));
    q.data_t = t ? (uint8_t *)f8i_take(l, (size_t)(rows * cols)) : NULL;
    f8i_quantizer_take_sinv(&m->q, l, rows, cols, t, &q.scale_inv, &q.scale_inv_t);
    q.dtype = f8_ctx_slot_dtype(m->ctx, dir);
    q.mode = m->q.act;
    return q;
}

/* The bias gradient a cast adds up: += column sums of src, reduce as the
 * workspace. */
#define SET_DBIAS(c, w, reduce, rows, cols)                                                                         \
    ((c).dbias = (w)->db, (c).dbias_dtype = (w)->dtype, (c).dbias_accumulate = 1, (c).workspace = (reduce),          \
     (c).workspace_bytes = f8i_reduce_workspace_bytes((rows), (cols)))

f8i_cast_args f8i_module_cast_args(f8_ctx *ctx, f8_slot sl, const void *src, f8_dtype src_dtype, int64_t rows,
                                   int64_t cols, const f8i_qbuf *out)
{
    f8i_cast_args c;
    memset(&c, 0, sizeof c); /* recorded byte for byte while capturing */
    c.src = src;
    c.src_dtype = src_dtype;
    c.rows = rows;
    c.cols = cols;
    c.out_dtype = out->dtype;
    c.out = out->data;
    c.scale = f8i_slot_scale(ctx, sl);
    c.scale_inv = out->scale_inv;
    c.stats = f8i_slot_stats(ctx, sl);
    return c;
}

/* The cast of f8i_module_quantize; cols_only: no row-wise codes, amax or
 * telemetry (a fused kernel wrote and counted them), nothing without a
 * column-wise copy or dbias to make; col_amax_in: as
 * f8i_module_quantize_cols says. */
static f8_status quantize(f8_module *m, const void *src, f8_dtype src_dtype, int64_t rows, int64_t cols,
                          f8_direction dir, int slot, const f8i_qbuf *out, f8i_weight *dbias_of, void *reduce,
                          int cols_only, int col_amax_in)
{
    f8_ctx *ctx = m->ctx;
    const int dbias = dbias_of && dbias_of->db;
    if (cols_only && !out->data_t && !dbias) return F8_OK;
    const f8_slot sl = dir == F8_DIR_FORWARD ? m->fwd[slot] : m->bwd[slot];
    f8i_cast_args c = f8i_module_cast_args(ctx, sl, src, src_dtype, rows, cols, out);
    if (cols_only) c.out = NULL;
    c.out_t = out->data_t;
    c.scale_inv_t = out->scale_inv_t;
    F8I_TRY(f8i_quantizer_cast_scaling(ctx, m->q.act, sl, &c));
    if (cols_only) c.amax = NULL, c.stats = NULL;
    c.col_amax_in = cols_only && col_amax_in;
    if (dbias) SET_DBIAS(c, dbias_of, reduce, rows, cols);
    return f8i_op_cast(ctx, &c);
}

f8_status f8i_module_quantize(f8_module *m, const void *src, f8_dtype src_dtype, int64_t rows, int64_t cols,
                              f8_direction dir, int slot, const f8i_qbuf *out, f8i_weight *dbias_of, void *reduce)
{
    return quantize(m, src, src_dtype, rows, cols, dir, slot, out, dbias_of, reduce, 0, 0);
}

float *f8i_module_col_amax(const f8i_qbuf *out) { return out->data_t ? out->scale_inv_t : NULL; }

f8_status f8i_module_quantize_cols(f8_module *m, const void *src, f8_dtype src_dtype, int64_t rows, int64_t cols,
                                   f8_direction dir, int slot, const f8i_qbuf *out, f8i_weight *dbias_of,
                                   void *reduce, int col_amax_in)
{
    return quantize(m, src, src_dtype, rows, cols, dir, slot, out, dbias_of, reduce, 1, col_amax_in);
}
