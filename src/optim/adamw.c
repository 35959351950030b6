/*
 * adamw.c — f8_adamw: AdamW with global-norm clipping and a warmup + cosine
 * schedule, every per-step value on the device; and its checkpoint entries.
 *
 * Design note. Everything the step needs is allocated before the first step:
 * the device state (step counter, lr, norm, clip factor, bias corrections) and
 * the norm partials at create, the moments and the descriptor array at add.
 * The descriptor array (f8i_adamw_tensor per parameter: param, grad, m, v,
 * count, dtypes, decay) lives in backend memory and is rebuilt by each add (a
 * new allocation, the old one freed), so a step is one op
 * (f8i_op_adamw_step) however many parameters there are (CUDA: three
 * launches: norm partials, finalize, update)
 * and may be captured even before any eager step. Adds are refused once a
 * step has been issued (eagerly or into a graph): a captured step holds the
 * array's address and count. The schedule and the clip factor are computed on
 * the device from the device step counter, so a replayed graph advances the
 * schedule by itself and no step reads anything back.
 *
 * Moments are FP32, BF16 or FP8 (the config's `moments`; adamw_moments.h) and
 * accounted under F8_MEM_OTHER (f8_mem_category has no optimizer category):
 * one allocation per parameter, m then v, then for FP8 the blocks' scale_invs
 * of m and of sqrt(v), each part at a 256-byte boundary. A checkpoint stores
 * them in their own dtype as "<prefix>.m.<i>" and "<prefix>.v.<i>" (FP8:
 * "<prefix>.v_sqrt.<i>", "<prefix>.m_scale_inv.<i>",
 * "<prefix>.v_sqrt_scale_inv.<i>"; the moment_part table), the choice as the
 * metadata "<prefix>.moments", the step counter as "<prefix>.step" (I64 [1])
 * and the last lr and norm as "<prefix>.lr", "<prefix>.grad_norm" (F32 [1]);
 * nothing else of the state influences later steps, so a restored run
 * continues bit for bit. Restoring another moments form is refused, not
 * converted: a conversion would silently not continue the run it claims to
 * resume (FP8 and BF16 lose what FP32 kept), which a resume must not do.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "core/ops.h"
#include "nn/embed_xent_adamw.h"

typedef struct param_rec {
    f8_tensor param, grad;
    void *moments;  /* backend: m (n), v (n), then with FP8 moments m's and v's
                     * scale_invs (blocks each); every part 256-byte aligned */
    size_t v_off, msi_off, vsi_off; /* byte offsets of v and the scale_invs */
    int decay;
    int64_t first;  /* index of its element 0 in the whole parameter (f8_adamw_add_slice) */
} param_rec;

struct f8_adamw {
    f8_ctx *ctx;
    f8_adamw_config cfg;
    void *block;             /* backend: state (256 B), then partials (F8I_ADAMW_NORM_BLOCKS) */
    f8i_adamw_state *state;  /* (1) */
    float *partials;         /* (F8I_ADAMW_NORM_BLOCKS) */
    f8i_adamw_tensor *dev;   /* (n) backend copy of the descriptors, or NULL */
    param_rec *params;       /* (n) host */
    int n, cap;
    int stepped;             /* a step was issued: the set of parameters is frozen */
    f8_comm *comm;           /* sharded (ZeRO-1): Σ g² is all-reduced over it; or NULL */
    float *sumsq;            /* (1) backend, inside block's first 256 B: this shard's Σ g² */
};

f8_adamw_config f8_adamw_config_default(void)
{
    f8_adamw_config c;
    c.lr_max = 6e-4f;
    c.lr_min = 6e-5f;
    c.warmup_steps = 0;
    c.total_steps = 0;
    c.beta1 = 0.9f;
    c.beta2 = 0.95f;
    c.eps = 1e-8f;
    c.weight_decay = 0.1f;
    c.grad_clip = 1.0f;
    c.moments = F8_ADAMW_MOMENTS_FP32;
    return c;
}

const char *f8_adamw_moments_name(f8_adamw_moments moments)
{
    switch (moments) {
    case F8_ADAMW_MOMENTS_FP32: return "fp32";
    case F8_ADAMW_MOMENTS_BF16: return "bf16";
    case F8_ADAMW_MOMENTS_FP8: return "fp8";
    }
    return NULL;
}

/* Bytes of one stored moment element. */
static size_t moment_size(f8_adamw_moments moments)
{
    return moments == F8_ADAMW_MOMENTS_FP32 ? 4 : moments == F8_ADAMW_MOMENTS_BF16 ? 2 : 1;
}

static int finite_nonneg(float x) { return isfinite(x) && x >= 0.0f; }

static f8_status config_check(f8_ctx *ctx, const f8_adamw_config *c)
{
    static const char fn[] = "f8_adamw_create";
    if (!finite_nonneg(c->lr_max) || !finite_nonneg(c->lr_min))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: lr_max %g and lr_min %g must be finite and >= 0", fn,
                         (double)c->lr_max, (double)c->lr_min);
    if (c->warmup_steps < 0 || c->total_steps < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: warmup_steps %lld and total_steps %lld must be >= 0", fn,
                         (long long)c->warmup_steps, (long long)c->total_steps);
    if (c->total_steps != 0 && c->total_steps <= c->warmup_steps)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT,
                         "%s: total_steps %lld must be 0 (no cosine) or greater than warmup_steps %lld", fn,
                         (long long)c->total_steps, (long long)c->warmup_steps);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: beta1 %g and beta2 %g must be in [0, 1)", fn,
                         (double)c->beta1, (double)c->beta2);
    if (!finite_nonneg(c->eps) || !finite_nonneg(c->weight_decay) || !finite_nonneg(c->grad_clip))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: eps %g, weight_decay %g and grad_clip %g must be finite and >= 0",
                         fn, (double)c->eps, (double)c->weight_decay, (double)c->grad_clip);
    if (!f8_adamw_moments_name(c->moments))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: moments %d is not an f8_adamw_moments value (FP32, BF16, FP8)",
                         fn, (int)c->moments);
    return F8_OK;
}

f8_status f8_adamw_create(f8_ctx *ctx, const f8_adamw_config *config, f8_adamw **out)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create: adamw (the output) is NULL");
    *out = NULL;
    if (!config) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create: config is NULL");
    F8I_TRY(config_check(ctx, config));
    f8_adamw *o = (f8_adamw *)calloc(1, sizeof *o);
    if (!o) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_adamw_create: out of host memory");
    o->ctx = ctx;
    o->cfg = *config;
    f8_status st = f8i_alloc(ctx, F8_MEM_OTHER, NULL, 256 + F8I_ADAMW_NORM_BLOCKS * sizeof(float), &o->block);
    if (st == F8_OK) {
        o->state = (f8i_adamw_state *)o->block;
        o->partials = (float *)((char *)o->block + 256);
        o->sumsq = (float *)((char *)o->block + 128); /* the state is 32 bytes */
        f8i_adamw_state zero;
        memset(&zero, 0, sizeof zero);
        st = ctx->be->upload(ctx, o->state, &zero, sizeof zero);
    }
    if (st != F8_OK) {
        f8_adamw_destroy(o);
        return st;
    }
    *out = o;
    return F8_OK;
}

void f8_adamw_destroy(f8_adamw *o)
{
    if (!o) return;
    for (int i = 0; i < o->n; i++) f8i_free(o->ctx, o->params[i].moments);
    f8i_free(o->ctx, o->dev);
    f8i_free(o->ctx, o->block);
    free(o->params);
    free(o);
}


static f8i_adamw_tensor descriptor(const f8_adamw *o, const param_rec *p)
{
    f8i_adamw_tensor d;
    memset(&d, 0, sizeof d);
    d.param = p->param.data;
    d.grad = p->grad.data;
    d.m = p->moments;
    d.v = (char *)p->moments + p->v_off;
    if (o->cfg.moments == F8_ADAMW_MOMENTS_FP8) {
        d.m_scale_inv = (float *)((char *)p->moments + p->msi_off);
        d.v_scale_inv = (float *)((char *)p->moments + p->vsi_off);
    }
    d.n = p->param.rows * p->param.cols;
    d.first = p->first;
    d.param_dtype = (int32_t)p->param.dtype;
    d.grad_dtype = (int32_t)p->grad.dtype;
    d.weight_decay = p->decay ? o->cfg.weight_decay : 0.0f;
    return d;
}

static f8_status add(f8_adamw *o, const f8_tensor *param, const f8_tensor *grad, int decay, int64_t first, const char *fn)
{
    if (!o) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = o->ctx;
    char what[40];
    snprintf(what, sizeof what, "%s: param", fn);
    F8I_TRY(f8i_check_tensor(ctx, param, what));
    snprintf(what, sizeof what, "%s: grad", fn);
    F8I_TRY(f8i_check_tensor(ctx, grad, what));
    if (first < 0) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: first %lld is negative", fn, (long long)first);
    if (o->stepped)
        return f8i_error(ctx, F8_ERR_STATE, "%s: the optimizer has already stepped; register every parameter first", fn);
    if (!f8i_dtype_is_hp(param->dtype) || !f8i_dtype_is_hp(grad->dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: param (%s) and grad (%s) must be fp32 or bf16", fn,
                         f8_dtype_name(param->dtype), f8_dtype_name(grad->dtype));
    if (param->rows != grad->rows || param->cols != grad->cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: param [%lld, %lld] and grad [%lld, %lld] differ", fn,
                         (long long)param->rows, (long long)param->cols, (long long)grad->rows, (long long)grad->cols);
    const int64_t n = f8i_tensor_elems(param);
    for (int i = 0; i < o->n && n > 0; i++)
        if (o->params[i].param.data == param->data)
            return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: this param is already registered (parameter %d)", fn, i);
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 16;
        param_rec *t = (param_rec *)realloc(o->params, (size_t)cap * sizeof *t);
        if (!t) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        o->params = t;
        o->cap = cap;
    }
    /* Allocate everything first; commit only when all of it succeeded. */
    param_rec p;
    p.param = *param;
    p.grad = *grad;
    p.decay = decay != 0;
    p.first = first;
    p.moments = NULL;
    void *moments = NULL, *dev = NULL;
    /* m and v (n each, 4, 2 or 1 bytes) and FP8's scale_invs, each rounded to
     * 256; a BF16 view's count may be past what FP32 moments can hold (2 · 4
     * bytes bounds every form's m, v and scale_invs). */
    size_t mbytes = 0;
    if (!f8i_size_mul((size_t)n, 2 * sizeof(float), &mbytes) || !f8i_size_add(mbytes, 1024, &mbytes))
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: the moments of a [%lld, %lld] param are more than 2^62 bytes", fn,
                         (long long)param->rows, (long long)param->cols);
    const size_t part = f8i_align256((size_t)n * moment_size(o->cfg.moments));
    const size_t sparts = o->cfg.moments == F8_ADAMW_MOMENTS_FP8
                              ? f8i_align256((size_t)F8I_ADAMW_FP8_BLOCKS(n) * sizeof(float)) : 0;
    p.v_off = part;
    p.msi_off = 2 * part;
    p.vsi_off = 2 * part + sparts;
    mbytes = 2 * part + 2 * sparts;
    f8_status st = f8i_alloc(ctx, F8_MEM_OTHER, NULL, mbytes ? mbytes : 1, &moments);
    if (st == F8_OK) st = f8i_alloc(ctx, F8_MEM_OTHER, NULL, (size_t)(o->n + 1) * sizeof(f8i_adamw_tensor), &dev);
    f8i_adamw_tensor *host = NULL;
    if (st == F8_OK) {
        p.moments = moments;
        host = (f8i_adamw_tensor *)malloc((size_t)(o->n + 1) * sizeof *host);
        if (!host) st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    if (st == F8_OK) {
        for (int i = 0; i < o->n; i++) host[i] = descriptor(o, &o->params[i]);
        host[o->n] = descriptor(o, &p);
        st = ctx->be->upload(ctx, dev, host, (size_t)(o->n + 1) * sizeof *host);
    }
    if (st == F8_OK && mbytes) st = f8i_op_memset_zero(ctx, moments, mbytes);
    if (st == F8_OK) st = ctx->be->synchronize(ctx);
    free(host);
    if (st != F8_OK) {
        f8i_free(ctx, moments);
        f8i_free(ctx, dev);
        return st;
    }
    f8i_free(ctx, o->dev);
    o->dev = (f8i_adamw_tensor *)dev;
    o->params[o->n++] = p;
    return F8_OK;
}

f8_status f8_adamw_add(f8_adamw *o, const f8_tensor *param, const f8_tensor *grad, int decay)
{
    return add(o, param, grad, decay, 0, "f8_adamw_add");
}

f8_status f8_adamw_add_slice(f8_adamw *o, const f8_tensor *param, const f8_tensor *grad, int decay, int64_t first)
{
    return add(o, param, grad, decay, first, "f8_adamw_add_slice");
}

f8_status f8_adamw_step(f8_adamw *o)
{
    if (!o) return F8_ERR_INVALID_ARGUMENT;
    const f8_adamw_config *c = &o->cfg;
    f8i_adamw_step_args a;
    memset(&a, 0, sizeof a);
    a.tensors = o->dev;
    a.n_tensors = o->n;
    a.partials = o->partials;
    a.state = o->state;
    a.lr_max = c->lr_max;
    a.lr_min = c->lr_min;
    a.warmup_steps = c->warmup_steps;
    a.total_steps = c->total_steps;
    a.beta1 = c->beta1;
    a.beta2 = c->beta2;
    a.eps = c->eps;
    a.grad_clip = c->grad_clip;
    a.moments = (int32_t)c->moments;
    a.sumsq = o->sumsq;
    f8_status st;
    if (o->comm) { /* the shard's Σ g², summed over the ranks, then the update */
        a.mode = F8I_ADAMW_NORM;
        st = f8i_op_adamw_step(o->ctx, &a);
        if (st == F8_OK) st = f8_comm_all_reduce(o->comm, o->sumsq, o->sumsq, 1, F8_DTYPE_FP32, F8_REDUCE_SUM);
        a.mode = F8I_ADAMW_UPDATE;
    } else {
        st = F8_OK;
        a.mode = F8I_ADAMW_WHOLE;
    }
    if (st == F8_OK) st = f8i_op_adamw_step(o->ctx, &a);
    if (st == F8_OK) o->stepped = 1;
    return st;
}

f8_status f8_adamw_set_comm(f8_adamw *o, f8_comm *comm)
{
    if (!o) return F8_ERR_INVALID_ARGUMENT;
    if (o->ctx->capturing)
        return f8i_error(o->ctx, F8_ERR_STATE, "f8_adamw_set_comm: refused while capturing a graph");
    if (comm && f8_comm_ctx(comm) != o->ctx)
        return f8i_error(o->ctx, F8_ERR_INVALID_ARGUMENT, "f8_adamw_set_comm: the comm belongs to another ctx");
    o->comm = comm;
    return F8_OK;
}

f8_status f8_adamw_read(f8_adamw *o, int64_t *step, float *lr, float *grad_norm)
{
    if (!o) return F8_ERR_INVALID_ARGUMENT;
    f8i_adamw_state s;
    F8I_TRY(o->ctx->be->download(o->ctx, &s, o->state, sizeof s));
    if (step) *step = s.step;
    if (lr) *lr = s.lr;
    if (grad_norm) *grad_norm = s.grad_norm;
    return F8_OK;
}

/* ---- checkpoint --------------------------------------------------------- */

#define NAME_LEN 512

static f8_status name_of(f8_ctx *ctx, char *out, const char *prefix, const char *field, int index)
{
    int k = index >= 0 ? snprintf(out, NAME_LEN, "%s%s%s.%d", prefix, prefix[0] ? "." : "", field, index)
                       : snprintf(out, NAME_LEN, "%s%s%s", prefix, prefix[0] ? "." : "", field);
    if (k < 0 || k >= NAME_LEN)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "checkpoint: names under prefix \"%.64s...\" are too long", prefix);
    return F8_OK;
}

/* The stored parts of one parameter's moments: m and v (FP32, BF16), or with
 * FP8 the codes of m and sqrt(v) and their blocks' scale_invs. The table
 * every checkpoint path loops over. */
typedef struct moment_part {
    const char *field;     /* entry "<prefix>.<field>.<i>" */
    f8i_ck_dtype dtype;
    size_t off;            /* byte offset in the parameter's moments */
    int64_t rows, cols;    /* the parameter's shape, or [1, blocks] */
    f8i_ck_rule rule;      /* what a restore requires of every element */
} moment_part;

static int n_parts(const f8_adamw *o) { return o->cfg.moments == F8_ADAMW_MOMENTS_FP8 ? 4 : 2; }

static moment_part part_of(const f8_adamw *o, const param_rec *p, int k)
{
    static const char *const fields[2][4] = {{"m", "v", "", ""}, {"m", "v_sqrt", "m_scale_inv", "v_sqrt_scale_inv"}};
    const int fp8 = o->cfg.moments == F8_ADAMW_MOMENTS_FP8;
    const f8i_ck_dtype dt = fp8 ? F8I_CK_F8_E4M3 : o->cfg.moments == F8_ADAMW_MOMENTS_BF16 ? F8I_CK_BF16 : F8I_CK_F32;
    const size_t offs[4] = {0, p->v_off, p->msi_off, p->vsi_off};
    moment_part m;
    m.field = fields[fp8][k];
    m.dtype = k < 2 ? dt : F8I_CK_F32;
    m.off = offs[k];
    m.rows = k < 2 ? p->param.rows : 1;
    m.cols = k < 2 ? p->param.cols : F8I_ADAMW_FP8_BLOCKS(p->param.rows * p->param.cols);
    m.rule = k == 0 ? F8I_CK_FINITE : F8I_CK_NONNEGATIVE; /* scale_inv 0 before the first step */
    return m;
}

static size_t part_bytes(const moment_part *m) { return (size_t)(m->rows * m->cols) * f8i_ck_dtype_size(m->dtype); }

static f8_status check_pair(const f8_checkpoint *ck, const char *prefix, f8_adamw *o, const char *fn)
{
    if (!o) {
        f8_ctx *ctx = ck ? f8i_checkpoint_ctx(ck) : NULL; /* its ctx says so, where there is one */
        return ctx ? f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: the optimizer is NULL", fn) : F8_ERR_INVALID_ARGUMENT;
    }
    if (!ck || !prefix) return f8i_error(o->ctx, F8_ERR_INVALID_ARGUMENT, "%s: checkpoint or prefix is NULL", fn);
    if (f8i_checkpoint_ctx(ck) != o->ctx)
        return f8i_error(o->ctx, F8_ERR_INVALID_ARGUMENT, "%s: the checkpoint belongs to another ctx", fn);
    return F8_OK;
}

f8_status f8_checkpoint_add_adamw(f8_checkpoint *ck, const char *prefix, f8_adamw *o)
{
    static const char fn[] = "f8_checkpoint_add_adamw";
    F8I_TRY(check_pair(ck, prefix, o, fn));
    f8_ctx *ctx = o->ctx;
    char name[NAME_LEN];
    const int np = n_parts(o);
    /* Refuse a name collision before adding anything. */
    static const char *const scalars[3] = {"step", "lr", "grad_norm"};
    f8_status st = F8_OK;
    for (int i = 0; i < np * o->n + 3 && st == F8_OK; i++) {
        st = i < np * o->n ? name_of(ctx, name, prefix, part_of(o, &o->params[i / np], i % np).field, i / np)
                           : name_of(ctx, name, prefix, scalars[i - np * o->n], -1);
        if (st == F8_OK && f8i_checkpoint_find(ck, name))
            st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"%s\" is already in the checkpoint", fn, name);
    }
    if (st != F8_OK) return st;
    f8i_adamw_state s;
    st = ctx->be->download(ctx, &s, o->state, sizeof s);
    size_t max_bytes = 1;
    for (int i = 0; i < np * o->n; i++) {
        const moment_part m = part_of(o, &o->params[i / np], i % np);
        if (part_bytes(&m) > max_bytes) max_bytes = part_bytes(&m);
    }
    void *host = st == F8_OK ? malloc(max_bytes) : NULL;
    if (st == F8_OK && !host) st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (int i = 0; i < np * o->n && st == F8_OK; i++) {
        const param_rec *p = &o->params[i / np];
        const moment_part m = part_of(o, p, i % np);
        const size_t bytes = part_bytes(&m);
        int64_t shape[2] = {m.rows, m.cols};
        st = bytes ? ctx->be->download(ctx, host, (char *)p->moments + m.off, bytes) : F8_OK;
        if (st == F8_OK) st = name_of(ctx, name, prefix, m.field, i / np);
        if (st == F8_OK) st = f8i_checkpoint_put(ck, name, m.dtype, i % np < 2 ? 2 : 1, i % np < 2 ? shape : shape + 1,
                                                 host, bytes);
    }
    free(host);
    const int64_t one = 1;
    if (st == F8_OK) st = name_of(ctx, name, prefix, "step", -1);
    if (st == F8_OK) st = f8i_checkpoint_put(ck, name, F8I_CK_I64, 1, &one, &s.step, sizeof s.step);
    if (st == F8_OK) st = name_of(ctx, name, prefix, "lr", -1);
    if (st == F8_OK) st = f8i_checkpoint_put(ck, name, F8I_CK_F32, 1, &one, &s.lr, sizeof s.lr);
    if (st == F8_OK) st = name_of(ctx, name, prefix, "grad_norm", -1);
    if (st == F8_OK) st = f8i_checkpoint_put(ck, name, F8I_CK_F32, 1, &one, &s.grad_norm, sizeof s.grad_norm);
    if (st == F8_OK) st = name_of(ctx, name, prefix, "moments", -1);
    if (st == F8_OK) st = f8i_checkpoint_set_meta(ck, name, f8_adamw_moments_name(o->cfg.moments));
    return st;
}

/* The entry `name`, which must hold `count` elements of dtype; for a 2-D
 * parameter shape also [rows, cols] (or [cols] when rows == 1). */
static f8_status find_checked(const f8_checkpoint *ck, f8_ctx *ctx, const char *name, f8i_ck_dtype dtype,
                              int64_t rows, int64_t cols, const f8i_ck_entry **out)
{
    const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
    if (!e) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_restore_adamw: no tensor \"%s\"", name);
    if (e->dtype != dtype)
        return f8i_error(ctx, F8_ERR_DTYPE, "f8_checkpoint_restore_adamw: \"%s\" is %s, expected %s", name,
                         f8i_ck_dtype_name(e->dtype), f8i_ck_dtype_name(dtype));
    int ok = (e->ndim == 2 && e->shape[0] == rows && e->shape[1] == cols) ||
             (e->ndim == 1 && rows == 1 && e->shape[0] == cols) || (e->ndim == 0 && rows * cols == 1);
    if (!ok)
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_checkpoint_restore_adamw: \"%s\" does not have the shape [%lld, %lld] of the "
                                            "registered parameter", name, (long long)rows, (long long)cols);
    *out = e;
    return F8_OK;
}

/* The checkpoint's moments form (metadata "<prefix>.moments"; a checkpoint
 * without it predates the choice: FP32) must be the optimizer's. */
static f8_status check_moments(const f8_checkpoint *ck, const char *prefix, f8_adamw *o, const char *fn)
{
    char key[NAME_LEN];
    F8I_TRY(name_of(o->ctx, key, prefix, "moments", -1));
    const char *stored = f8_checkpoint_metadata(ck, key);
    const char *mine = f8_adamw_moments_name(o->cfg.moments);
    if (!stored) stored = "fp32";
    if (strcmp(stored, mine) != 0)
        return f8i_error(o->ctx, F8_ERR_DTYPE,
                         "%s: the checkpoint's moments under \"%s\" are %.16s (metadata \"%s\") but this optimizer keeps "
                         "%s moments: create it with f8_adamw_config.moments set to the checkpoint's choice "
                         "(moments are not converted)", fn, prefix, stored, key, mine);
    return F8_OK;
}

f8_status f8_checkpoint_restore_adamw(const f8_checkpoint *ck, const char *prefix, f8_adamw *o)
{
    static const char fn[] = "f8_checkpoint_restore_adamw";
    F8I_TRY(check_pair(ck, prefix, o, fn));
    F8I_TRY(check_moments(ck, prefix, o, fn));
    f8_ctx *ctx = o->ctx;
    char name[NAME_LEN];
    const int np = n_parts(o);
    const f8i_ck_entry **mv = (const f8i_ck_entry **)calloc((size_t)np * (size_t)o->n + 1, sizeof *mv);
    if (!mv) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    /* Check everything first. */
    f8_status st = F8_OK;
    for (int i = 0; i < np * o->n && st == F8_OK; i++) {
        const moment_part m = part_of(o, &o->params[i / np], i % np);
        st = name_of(ctx, name, prefix, m.field, i / np);
        if (st == F8_OK) st = find_checked(ck, ctx, name, m.dtype, m.rows, m.cols, &mv[i]);
    }
    if (st == F8_OK) st = name_of(ctx, name, prefix, "m", o->n);
    if (st == F8_OK && f8i_checkpoint_find(ck, name))
        st = f8i_error(ctx, F8_ERR_SHAPE, "%s: the checkpoint holds more than the %d registered parameters (\"%s\")", fn,
                       o->n, name);
    const f8i_ck_entry *es = NULL, *elr = NULL, *en = NULL;
    if (st == F8_OK) st = name_of(ctx, name, prefix, "step", -1);
    if (st == F8_OK) st = find_checked(ck, ctx, name, F8I_CK_I64, 1, 1, &es);
    if (st == F8_OK) st = name_of(ctx, name, prefix, "lr", -1);
    if (st == F8_OK) st = find_checked(ck, ctx, name, F8I_CK_F32, 1, 1, &elr);
    if (st == F8_OK) st = name_of(ctx, name, prefix, "grad_norm", -1);
    if (st == F8_OK) st = find_checked(ck, ctx, name, F8I_CK_F32, 1, 1, &en);
    /* Values: a NaN moment or a negative second moment or scale_inv would
     * poison every later step (the file is untrusted; checksums catch only
     * corruption). */
    for (int i = 0; i < np * o->n && st == F8_OK; i++)
        st = f8i_checkpoint_check_finite(ck, fn, mv[i]->name, part_of(o, &o->params[i / np], i % np).rule);
    if (st == F8_OK) st = f8i_checkpoint_check_finite(ck, fn, elr->name, F8I_CK_NONNEGATIVE);
    if (st == F8_OK) st = f8i_checkpoint_check_finite(ck, fn, en->name, F8I_CK_NONNEGATIVE);
    f8i_adamw_state s;
    memset(&s, 0, sizeof s);
    if (st == F8_OK) {
        memcpy(&s.step, es->data, sizeof s.step);
        memcpy(&s.lr, elr->data, sizeof s.lr);
        memcpy(&s.grad_norm, en->data, sizeof s.grad_norm);
        if (s.step < 0) st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: step %lld is negative", fn, (long long)s.step);
    }
    /* Write: moments, then the state (the outputs of the step it continues from;
     * clip and the bias corrections are recomputed by every step). */
    for (int i = 0; i < np * o->n && st == F8_OK; i++) {
        const param_rec *p = &o->params[i / np];
        const moment_part m = part_of(o, p, i % np);
        if (mv[i]->bytes) st = ctx->be->upload(ctx, (char *)p->moments + m.off, mv[i]->data, mv[i]->bytes);
    }
    if (st == F8_OK) {
        s.clip = 1.0f;
        if (s.step > 0) {
            s.bc1 = f8i_adamw_bias_correction(o->cfg.beta1, s.step);
            s.bc2 = f8i_adamw_bias_correction(o->cfg.beta2, s.step);
        }
        st = ctx->be->upload(ctx, o->state, &s, sizeof s);
    }
    free(mv);
    return st;
}
