/*
 * params.c — the parameter table (params.h): building it, walking it with a
 * filter, and checkpointing the modules and tensors it names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "try.h"

/* f8's checkpoint name of each parameter within its module (f8.h, "Checkpoints"). */
static const char *param_suffix(f8_param which)
{
    switch (which) {
    case F8_PARAM_WEIGHT: return "weight";
    case F8_PARAM_BIAS: return "bias";
    case F8_PARAM_LN_WEIGHT: return "layer_norm_weight";
    case F8_PARAM_LN_BIAS: return "layer_norm_bias";
    case F8_PARAM_FC1_WEIGHT: return "fc1_weight";
    case F8_PARAM_FC1_BIAS: return "fc1_bias";
    case F8_PARAM_FC2_WEIGHT: return "fc2_weight";
    case F8_PARAM_FC2_BIAS: return "fc2_bias";
    default: return "?";
    }
}

static model_param *grow(param_table *t)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        model_param *v = (model_param *)realloc(t->v, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        t->v = v;
        t->cap = cap;
    }
    model_param *p = &t->v[t->n];
    memset(p, 0, sizeof *p);
    return p;
}

static int is_gemm_weight(f8_param which)
{
    return which == F8_PARAM_WEIGHT || which == F8_PARAM_FC1_WEIGHT || which == F8_PARAM_FC2_WEIGHT;
}

f8_status param_table_add(param_table *t, const char *prefix, f8_module *module, f8_param which, int64_t layer,
                          int fp8, unsigned flags)
{
    model_param *p = grow(t);
    if (!p) return F8_ERR_OUT_OF_MEMORY;
    TRY(f8_module_param(module, which, 0, &p->value));
    f8_status st = f8_module_param(module, which, 1, &p->grad);
    /* a fused GEMM weight (--grad-dtype fp32) has no gradient of its own: F8_ERR_STATE until
     * param_main_grads_create gives it its main_grad; its shape stands in until then */
    if (st == F8_ERR_STATE && is_gemm_weight(which))
        p->grad = f8_tensor_make(NULL, F8_DTYPE_FP32, p->value.rows, p->value.cols);
    else if (st != F8_OK) return st;
    snprintf(p->prefix, sizeof p->prefix, "%s", prefix);
    snprintf(p->name, sizeof p->name, "%s.%s", prefix, param_suffix(which));
    p->layer = layer;
    p->module = module;
    p->which = which;
    p->fp8 = fp8;
    p->flags = flags;
    t->n++;
    return F8_OK;
}

f8_status param_table_add_tensor(param_table *t, const char *name, const f8_tensor *value, const f8_tensor *grad,
                                 const f8_tensor *stored, int64_t layer, unsigned flags)
{
    model_param *p = grow(t);
    if (!p) return F8_ERR_OUT_OF_MEMORY;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->layer = layer;
    p->fp8 = -1;
    p->flags = flags;
    p->value = *value;
    p->grad = *grad;
    p->stored = stored ? *stored : *value;
    t->n++;
    return F8_OK;
}

void param_table_split(param_table *t, int dim, int parts)
{
    if (t->n == 0) return;
    t->v[t->n - 1].tp_dim = dim;
    t->v[t->n - 1].tp_parts = parts;
}

void param_table_split_sizes(param_table *t, int dim, int parts, const int *sizes)
{
    param_table_split(t, dim, parts);
    for (int j = 0; t->n > 0 && j < parts && j < 3; j++) t->v[t->n - 1].tp_sizes[j] = sizes[j];
}

void param_table_free(param_table *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}

f8_status param_each(const param_table *t, unsigned skip, param_fn fn, void *user)
{
    for (int i = 0; i < t->n; i++)
        if (!(t->v[i].flags & skip)) TRY(fn(user, &t->v[i]));
    return F8_OK;
}

const model_param *param_fp8(const param_table *t, int k)
{
    for (int i = 0; i < t->n; i++)
        if (t->v[i].fp8 == k && k >= 0) return &t->v[i];
    return NULL;
}

int64_t param_elements(const param_table *t)
{
    int64_t n = 0;
    for (int i = 0; i < t->n; i++) n += t->v[i].value.rows * t->v[i].value.cols;
    return n;
}

f8_status param_main_grads_create(param_table *t, f8_ctx *ctx, void **block, size_t *bytes)
{
    size_t total = 0;
    int64_t most = 0; /* the largest fold: the scratch its conversion goes through */
    *block = NULL;
    for (int i = 0; i < t->n; i++) {
        const model_param *p = &t->v[i];
        if (!p->module) continue;
        const int64_t n = p->grad.rows * p->grad.cols;
        total += (size_t)(n * 4 + 255) / 256 * 256;
        if (!is_gemm_weight(p->which) && n > most) most = n;
    }
    const size_t scratch = (size_t)(most * 4 + 255) / 256 * 256;
    *bytes = total + scratch;
    if (total == 0) return F8_OK;
    TRY(f8_ctx_alloc(ctx, *bytes, block));
    unsigned char *at = (unsigned char *)*block;
    for (int i = 0; i < t->n; i++) {
        model_param *p = &t->v[i];
        if (!p->module) continue;
        const int64_t n = p->grad.rows * p->grad.cols;
        if (is_gemm_weight(p->which)) TRY(f8_module_set_main_grad(p->module, p->which, (float *)(void *)at));
        else p->fold = p->grad; /* the module's own, one microbatch's */
        p->grad = f8_tensor_make(at, F8_DTYPE_FP32, p->grad.rows, p->grad.cols);
        at += (size_t)(n * 4 + 255) / 256 * 256;
    }
    t->fold_scratch = most > 0 ? (float *)(void *)at : NULL;
    f8_tensor all = f8_tensor_make(*block, F8_DTYPE_FP32, 1, (int64_t)(*bytes / 4));
    return f8_tensor_zero(ctx, &all);
}

f8_status param_grads_fold(const param_table *t, f8_ctx *ctx, int64_t layer)
{
    for (int i = 0; i < t->n; i++) {
        const model_param *p = &t->v[i];
        if (p->layer != layer || !p->fold.data) continue;
        f8_tensor g = p->grad, f = p->fold, s = f8_tensor_make(t->fold_scratch, F8_DTYPE_FP32, g.rows, g.cols);
        TRY(f8_tensor_convert(ctx, &f, &s)); /* exact: BF16 into FP32 */
        TRY(f8_tensor_add(ctx, &g, &s));
        TRY(f8_tensor_zero(ctx, &f));
    }
    return F8_OK;
}

f8_status param_grad_of(const param_table *t, f8_module *module, f8_param which, f8_tensor *grad)
{
    for (int i = 0; i < t->n; i++)
        if (t->v[i].module == module && t->v[i].which == which) return *grad = t->v[i].grad, F8_OK;
    return f8_module_param(module, which, 1, grad); /* not in the table (yet): the module's own */
}

/* Each module once: at its first entry (a module's entries are consecutive). */
static int module_starts(const param_table *t, int i)
{
    return t->v[i].module && (i == 0 || t->v[i - 1].module != t->v[i].module);
}

f8_status param_checkpoint_add(const param_table *t, f8_checkpoint *ck)
{
    for (int i = 0; i < t->n; i++) {
        const model_param *p = &t->v[i];
        if (module_starts(t, i)) TRY(f8_checkpoint_add_module(ck, p->prefix, p->module));
        else if (!p->module) TRY(f8_checkpoint_add_tensor(ck, p->name, &p->stored));
    }
    return F8_OK;
}

f8_status param_checkpoint_restore(const param_table *t, const f8_checkpoint *ck)
{
    for (int i = 0; i < t->n; i++) {
        const model_param *p = &t->v[i];
        if (module_starts(t, i)) TRY(f8_checkpoint_restore_module(ck, p->prefix, p->module));
        else if (!p->module) {
            f8_tensor v = p->stored;
            TRY(f8_checkpoint_read_tensor(ck, p->name, &v));
        }
    }
    return F8_OK;
}

f8_status param_optimizer_scalars_copy(const f8_checkpoint *src, const char *from, f8_checkpoint *dst, const char *to,
                                       char *err, size_t n)
{
    static const char *const scalars[3] = {"step", "lr", "grad_norm"};
    char have[256], want[256];
    for (int k = 0; k < 3; k++) {
        snprintf(have, sizeof have, "%s.%s", from, scalars[k]);
        const f8_ck_entry *e = f8_checkpoint_find_entry(src, have);
        if (!e) return err ? train_fail(err, n, F8_ERR_SHAPE, "optimizer state: no \"%s\"", have) : F8_ERR_STATE;
        snprintf(want, sizeof want, "%s.%s", to, scalars[k]);
        TRY(f8_checkpoint_put_entry(dst, want, e->dtype, e->ndim, e->shape, e->data, e->bytes));
    }
    return F8_OK;
}
