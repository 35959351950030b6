/*
 * tp.c — tensor parallelism for the GPT (tp.h).
 *
 * Design note. How each parameter is split is in the model's parameter
 * table (params.h, built by gpt.c), not here: a TP-sharded entry
 * (PARAM_TP_SHARDED) has a dimension (0: rows, 1: columns) and a number of
 * stacked parts. qkv's weight is three stacked [C, C] blocks (q, k, v), so
 * rank t's rows are the rows t·C/P .. of each part, laid part after part
 * (the attention module then reads q | k | v of its H/P heads exactly as one
 * rank reads all of them); a gated fc1 has two parts. Replicated entries
 * are either the same on every rank or, for the row-parallel biases
 * (PARAM_TP_RANK0), rank 0's value and zero elsewhere: added once to the
 * sum of the partial outputs. Every function here loops over the table with
 * these flags as its filter: the initial sharding, the step's gradient sums
 * and broadcasts, the checkpoint gather and scatter and the optimizer
 * state's mapping, so they cannot disagree. Host staging is used only at
 * creation and checkpoints, never in a step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp.h"
#include "try.h"

int tp_check_shape(int64_t heads, int64_t channels, int tp, char *err, size_t n)
{
    if (tp < 1 || heads % tp != 0 || (4 * channels) % tp != 0) {
        snprintf(err, n, "tensor parallel %d: the %lld heads and the MLP width %lld (4 x channels) must divide by it",
                 tp, (long long)heads, (long long)(4 * channels));
        return -1;
    }
    return 0;
}

/* ---- host slicing ------------------------------------------------------------ */

/* Copy between a full tensor [R, K] and rank t's shard of it (elements of es
 * bytes): along dim, in parts stacked blocks of relative sizes sizes[]
 * (NULL: equal), each split in P. to_local picks the direction. */
void tp_shard_copy_sizes(unsigned char *full, unsigned char *local, int64_t R, int64_t K, int dim, int parts,
                         const int *sizes, int P, int t, size_t es, int to_local)
{
    const int64_t n = dim == 0 ? R : K, lw = n / P; /* the split dimension, whole and local */
    int64_t total = 0, f0 = 0, l0 = 0;              /* f0, l0: block j's start in full and local */
    for (int j = 0; j < parts; j++) total += sizes ? sizes[j] : 1;
    for (int j = 0; j < parts; j++) {
        const int64_t nf = n * (sizes ? sizes[j] : 1) / total, nl = nf / P;
        /* dim 0: whole rows f0 + t·nl + i; dim 1: per row, the run of nl columns at f0 + t·nl */
        const int64_t outer = dim == 0 ? nl : R, len = dim == 0 ? K : nl;
        for (int64_t i = 0; i < outer; i++) {
            const int64_t f_off = dim == 0 ? (f0 + t * nl + i) * K : i * K + f0 + t * nl;
            const int64_t l_off = dim == 0 ? (l0 + i) * K : i * lw + l0;
            unsigned char *f = full + (size_t)f_off * es, *l = local + (size_t)l_off * es;
            if (to_local) memcpy(l, f, (size_t)len * es);
            else memcpy(f, l, (size_t)len * es);
        }
        f0 += nf, l0 += nl;
    }
}

void tp_shard_copy(unsigned char *full, unsigned char *local, int64_t R, int64_t K, int dim, int parts, int P, int t,
                   size_t es, int to_local)
{
    tp_shard_copy_sizes(full, local, R, K, dim, parts, NULL, P, t, es, to_local);
}

/* Entry p's block sizes for tp_shard_copy_sizes: NULL when equal. */
static const int *sizes_of(const model_param *p) { return p->tp_sizes[0] ? p->tp_sizes : NULL; }

/* The whole tensor's shape of a local shard v of entry p. */
static int64_t full_rows(const model_param *p, const f8_tensor *v, int P) { return p->tp_dim == 0 ? v->rows * P : v->rows; }
static int64_t full_cols(const model_param *p, const f8_tensor *v, int P) { return p->tp_dim == 1 ? v->cols * P : v->cols; }

f8_status tp_scratch_ctx(f8_ctx *ctx, f8_ctx **init, char *err, size_t n)
{
    f8_ctx_config ic = f8_ctx_config_default();
    ic.backend = f8_ctx_backend(ctx);
    ic.device = f8_ctx_device(ctx);
    return f8_ctx_create(&ic, init, err, n);
}

f8_status tp_block_create(gpt *m, gpt_block *b, const f8_layernorm_linear_config *qc, const f8_linear_config *pc,
                          const f8_layernorm_mlp_config *mc)
{
    f8_layernorm_linear_config q = *qc;
    f8_linear_config p = *pc;
    f8_layernorm_mlp_config f = *mc;
    q.out_features = 3 * m->Cl;
    p.in_features = m->Cl;
    f.ffn_hidden_size = m->Fl;
    TRY(f8_layernorm_linear_create(m->ctx, &q, &b->qkv));
    TRY(f8_linear_create(m->ctx, &p, &b->proj));
    TRY(f8_layernorm_mlp_create(m->ctx, &f, &b->mlp));
    return F8_OK;
}

f8_status tp_block_shard(gpt *m, f8_ctx *init, const param_table *full, const param_table *local)
{
    const int P = m->tp_size, t = m->tp_rank;
    if (full->n != local->n) return F8_ERR_STATE;
    f8_status st = F8_OK;
    for (int k = 0; k < local->n && st == F8_OK; k++) {
        const model_param *lp = &local->v[k];
        const f8_tensor fv = full->v[k].value, lv = lp->value;
        const size_t es = f8_dtype_size(lv.dtype), fb = (size_t)(fv.rows * fv.cols) * es, lb = (size_t)(lv.rows * lv.cols) * es;
        unsigned char *hf = (unsigned char *)malloc(fb + 1), *hl = (unsigned char *)calloc(1, lb + 1);
        st = hf && hl ? f8_ctx_download(init, hf, fv.data, fb) : F8_ERR_OUT_OF_MEMORY;
        if (st == F8_OK) {
            if (lp->flags & PARAM_TP_SHARDED) tp_shard_copy_sizes(hf, hl, fv.rows, fv.cols, lp->tp_dim, lp->tp_parts, sizes_of(lp), P, t, es, 1);
            else if (!(lp->flags & PARAM_TP_RANK0) || t == 0) memcpy(hl, hf, lb); /* RANK0 elsewhere: zero */
            st = f8_ctx_upload(m->ctx, lv.data, hl, lb);
        }
        free(hf);
        free(hl);
    }
    if (st == F8_OK) st = f8_ctx_synchronize(m->ctx);
    return st;
}

/* ---- the step's collectives ---------------------------------------------------- */

f8_status tp_all_reduce(gpt *m, f8_tensor *x)
{
    const int64_t n = x->rows * x->cols;
    if (x->dtype == F8_DTYPE_FP32) return f8_comm_all_reduce(m->tp, x->data, x->data, n, F8_DTYPE_FP32, F8_REDUCE_SUM);
    /* the collectives reduce FP32: BF16 goes through the staging buffer */
    f8_tensor s = f8_tensor_make(m->tp_buf, F8_DTYPE_FP32, x->rows, x->cols);
    TRY(f8_tensor_convert(m->ctx, x, &s));
    TRY(f8_comm_all_reduce(m->tp, m->tp_buf, m->tp_buf, n, F8_DTYPE_FP32, F8_REDUCE_SUM));
    return f8_tensor_convert(m->ctx, &s, x);
}

f8_status tp_reduce_scatter(gpt *m, const f8_tensor *x, f8_tensor *y)
{
    const int64_t n = y->rows * y->cols;
    if (x->dtype == F8_DTYPE_FP32) return f8_comm_reduce_scatter(m->tp, x->data, y->data, n, F8_DTYPE_FP32);
    /* the collectives reduce FP32: BF16 through the staging buffer, source then destination */
    float *src = m->tp_buf, *dst = m->tp_buf + x->rows * x->cols;
    f8_tensor s = f8_tensor_make(src, F8_DTYPE_FP32, x->rows, x->cols), d = f8_tensor_make(dst, F8_DTYPE_FP32, y->rows, y->cols);
    TRY(f8_tensor_convert(m->ctx, x, &s));
    TRY(f8_comm_reduce_scatter(m->tp, src, dst, n, F8_DTYPE_FP32));
    return f8_tensor_convert(m->ctx, &d, y);
}

f8_status tp_row_parallel(gpt *m, f8_module *mod, const f8_tensor *in, f8_saved *saved, f8_microbatch mb,
                         f8_tensor *y, const f8_tensor *residual)
{
    if (!m->tp && !m->sp) return f8_module_forward_add(mod, in, y, residual, mb, saved);
    f8_tensor out = m->sp ? f8_tensor_make(m->full, m->c.dtype, m->T_call, m->c.channels) : *y;
    TRY(f8_module_forward(mod, in, &out, mb, saved));
    if (m->sp) TRY(tp_reduce_scatter(m, &out, y));
    else if (m->tp) TRY(tp_all_reduce(m, y));
    /* the branch output takes the residual: one add, no copy (a + b is commutative in IEEE) */
    return f8_tensor_add(m->ctx, y, residual);
}

f8_status tp_column_backward(gpt *m, f8_module *mod, f8_saved *saved, const f8_tensor *dy, f8_tensor *d,
                             f8_tensor *tmp)
{
    if (!m->tp) return f8_module_backward_add(mod, saved, dy, d); /* d is also dy for the MLP: allowed */
    TRY(f8_module_backward(mod, saved, dy, tmp));
    /* each rank's rows of the weight give part of the input gradient (SP: summed in the module) */
    if (!m->sp) TRY(tp_all_reduce(m, tmp));
    return f8_tensor_add(m->ctx, d, tmp);
}

f8_status tp_embed(gpt *m, const int32_t *tokens, const f8_tensor *wte, const f8_tensor *wpe, f8_tensor *x0)
{
    if (!m->sp) return f8_embedding_forward(m->ctx, tokens, m->c.seq, wte, wpe, x0);
    /* every rank embeds all tokens (cheap, replicated) and keeps its rows */
    const int64_t C = m->c.channels;
    f8_tensor e = f8_tensor_make(m->full, m->c.dtype, m->T_call, C);
    TRY(f8_embedding_forward(m->ctx, tokens, m->c.seq, wte, wpe, &e));
    const size_t bytes = (size_t)(x0->rows * C) * f8_dtype_size(m->c.dtype);
    return f8_ctx_copy(m->ctx, x0->data, (unsigned char *)m->full + (size_t)m->tp_rank * bytes, bytes);
}

f8_status tp_head_input(gpt *m, f8_tensor *xf)
{
    if (!m->sp) return F8_OK;
    f8_tensor all = f8_tensor_make(m->xf, m->c.dtype, m->T_call, m->c.channels);
    TRY(f8_comm_all_gather(m->tp, xf->data, all.data, xf->rows * xf->cols, m->c.dtype));
    *xf = all;
    return F8_OK;
}

f8_status tp_reduce_grads(gpt *m)
{
    const param_table *t = &m->params;
    for (int i = 0; i < t->n; i++) {
        if (!(t->v[i].flags & PARAM_TP_GRAD_SUM)) continue; /* the LayerNorms of the column-parallel modules */
        f8_tensor g = t->v[i].grad;
        TRY(tp_all_reduce(m, &g));
    }
    return F8_OK;
}

/* The replicated parameters: the head (final norm, LM head = wte), wpe (all
 * its rows, used or not) and the blocks' LayerNorms. The RANK0 biases stay
 * zero off rank 0. */
f8_status tp_sync_replicated(gpt *m)
{
    const param_table *t = &m->params;
    for (int i = 0; i < t->n; i++) {
        const model_param *p = &t->v[i];
        if (!(p->flags & PARAM_REPLICATED) || (p->flags & PARAM_TP_RANK0)) continue;
        const f8_tensor *v = p->module ? &p->value : &p->stored;
        TRY(f8_comm_broadcast(m->tp, v->data, v->data, v->rows * v->cols, v->dtype, 0));
    }
    return F8_OK;
}

/* ---- checkpoints: the one-rank layout ------------------------------------------ */

/* Entry i is its module's first (a module's entries are consecutive). */
static int module_starts(const param_table *t, int i)
{
    return t->v[i].module && (i == 0 || t->v[i - 1].module != t->v[i].module);
}

/* Every module (under its prefix) and bare tensor (its stored view) of the
 * table in blocks (1: layer >= 0) or outside them (0), in table order, as
 * they are on this rank. */
static f8_status add_entries(const param_table *t, f8_checkpoint *ck, int blocks)
{
    for (int i = 0; i < t->n; i++) {
        const model_param *p = &t->v[i];
        if ((p->layer >= 0) != blocks) continue;
        if (module_starts(t, i)) TRY(f8_checkpoint_add_module(ck, p->prefix, p->module));
        else if (!p->module) TRY(f8_checkpoint_add_tensor(ck, p->name, &p->stored));
    }
    return F8_OK;
}

/* The whole of a sharded local tensor v (split s): every rank's shard
 * gathered (a collective) and laid out as one rank has it, into host (the
 * full tensor's bytes). */
static f8_status gather_shards(gpt *m, const model_param *s, const f8_tensor *v, unsigned char *host)
{
    const int P = m->tp_size;
    const size_t es = f8_dtype_size(v->dtype), lb = (size_t)(v->rows * v->cols) * es;
    void *dev = NULL;
    unsigned char *all = (unsigned char *)malloc(lb * (size_t)P + 1);
    f8_status st = all ? f8_ctx_alloc(m->ctx, lb * (size_t)P, &dev) : F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = f8_comm_all_gather(m->tp, v->data, dev, v->rows * v->cols, v->dtype);
    if (st == F8_OK) st = f8_ctx_download(m->ctx, all, dev, lb * (size_t)P);
    for (int t = 0; t < P && st == F8_OK; t++)
        tp_shard_copy_sizes(host, all + lb * (size_t)t, full_rows(s, v, P), full_cols(s, v, P), s->tp_dim, s->tp_parts,
                            sizes_of(s), P, t, es, 0);
    f8_ctx_free(m->ctx, dev);
    free(all);
    return st;
}

f8_status tp_checkpoint_add(gpt *m, f8_checkpoint *ck)
{
    const int P = m->tp_size;
    const param_table *t = &m->params;
    f8_checkpoint *tmp = NULL;
    TRY(f8_checkpoint_create(m->ctx, &tmp));
    f8_status st = add_entries(t, tmp, 1); /* the blocks as this rank has them */
    /* the sharded parameters whole (RANK0 biases: rank 0's, the one that writes, holds them) */
    for (int i = 0; i < t->n && st == F8_OK; i++) {
        const model_param *s = &t->v[i];
        if (!(s->flags & PARAM_TP_SHARDED)) continue;
        const f8_tensor v = s->value;
        const f8_ck_entry *e = f8_checkpoint_find_entry(tmp, s->name);
        if (!e) st = F8_ERR_STATE;
        if (st != F8_OK) break;
        const size_t bytes = (size_t)(v.rows * v.cols) * f8_dtype_size(v.dtype) * (size_t)P;
        unsigned char *host = (unsigned char *)malloc(bytes);
        st = host ? gather_shards(m, s, &v, host) : F8_ERR_OUT_OF_MEMORY;
        int64_t shape[2] = {full_rows(s, &v, P), full_cols(s, &v, P)};
        if (e->ndim == 1) shape[0] = shape[0] * shape[1]; /* biases and norms are stored 1-D */
        if (st == F8_OK) st = f8_checkpoint_put_entry(ck, s->name, e->dtype, e->ndim, shape, host, bytes);
        free(host);
    }
    for (size_t i = 0; i < f8_checkpoint_entry_count(tmp) && st == F8_OK; i++) { /* the rest as it is */
        const f8_ck_entry *e = f8_checkpoint_entry_at(tmp, i);
        if (!f8_checkpoint_find_entry(ck, e->name))
            st = f8_checkpoint_put_entry(ck, e->name, e->dtype, e->ndim, e->shape, e->data, e->bytes);
    }
    for (size_t i = 0; i < f8_checkpoint_metadata_count(tmp) && st == F8_OK; i++) { /* each module's fp8.recipe */
        const char *key, *value;
        f8_checkpoint_metadata_at(tmp, i, &key, &value);
        if (strncmp(key, "model.", 6) == 0) st = f8_checkpoint_set_metadata(ck, key, value);
    }
    f8_checkpoint_destroy(tmp);
    if (st == F8_OK) st = add_entries(t, ck, 0); /* the head and wpe: replicated, whole */
    return st;
}

/* This rank's shard of entry e (a whole tensor of split s) into tmp under
 * name, for a local tensor shaped like v. A whole tensor of another size is
 * put as it is: restoring it then fails on its shape, naming it. */
static f8_status put_shard(gpt *m, const model_param *s, const f8_tensor *v, const f8_ck_entry *e, f8_checkpoint *tmp,
                           const char *name)
{
    const int P = m->tp_size;
    const size_t es = f8_ck_dtype_size(e->dtype), lb = (size_t)(v->rows * v->cols) * es;
    if (e->bytes != lb * (size_t)P)
        return f8_checkpoint_put_entry(tmp, name, e->dtype, e->ndim, e->shape, e->data, e->bytes);
    unsigned char *h = (unsigned char *)calloc(1, lb + 1);
    if (!h) return F8_ERR_OUT_OF_MEMORY;
    tp_shard_copy_sizes((unsigned char *)e->data, h, full_rows(s, v, P), full_cols(s, v, P), s->tp_dim, s->tp_parts,
                        sizes_of(s), P, m->tp_rank, es, 1);
    int64_t shape[2] = {v->rows, v->cols};
    if (e->ndim == 1) shape[0] = v->rows * v->cols;
    f8_status st = f8_checkpoint_put_entry(tmp, name, e->dtype, e->ndim, shape, h, lb);
    free(h);
    return st;
}

/* Block module of entries first .. (its consecutive entries) from ck: this
 * rank's shards and the rest of the module as it is, through tmp. */
static f8_status restore_block_module(gpt *m, const f8_checkpoint *ck, int first)
{
    const param_table *t = &m->params;
    const model_param *head = &t->v[first];
    const size_t plen = strlen(head->prefix);
    char name[128];
    f8_checkpoint *tmp = NULL;
    TRY(f8_checkpoint_create(m->ctx, &tmp));
    f8_status st = F8_OK;
    for (int j = first; j < t->n && t->v[j].module == head->module && st == F8_OK; j++) { /* this rank's shards */
        const model_param *s = &t->v[j];
        const int zero = (s->flags & PARAM_TP_RANK0) && m->tp_rank != 0;
        if (!(s->flags & PARAM_TP_SHARDED) && !zero) continue;
        const f8_ck_entry *e = f8_checkpoint_find_entry(ck, s->name);
        if (!e) continue; /* restore_module names what is missing */
        if (zero) { /* zero off rank 0 */
            unsigned char *z = (unsigned char *)calloc(1, e->bytes + 1);
            st = z ? f8_checkpoint_put_entry(tmp, s->name, e->dtype, e->ndim, e->shape, z, e->bytes) : F8_ERR_OUT_OF_MEMORY;
            free(z);
        } else {
            st = put_shard(m, s, &s->value, e, tmp, s->name);
        }
    }
    for (size_t i = 0; i < f8_checkpoint_entry_count(ck) && st == F8_OK; i++) { /* the rest of the module */
        const f8_ck_entry *e = f8_checkpoint_entry_at(ck, i);
        if (strncmp(e->name, head->prefix, plen) == 0 && e->name[plen] == '.' && !f8_checkpoint_find_entry(tmp, e->name))
            st = f8_checkpoint_put_entry(tmp, e->name, e->dtype, e->ndim, e->shape, e->data, e->bytes);
    }
    snprintf(name, sizeof name, "%s.fp8.recipe", head->prefix);
    const char *recipe = f8_checkpoint_metadata(ck, name);
    if (st == F8_OK && recipe) st = f8_checkpoint_set_metadata(tmp, name, recipe);
    if (st == F8_OK) st = f8_checkpoint_restore_module(tmp, head->prefix, head->module);
    f8_checkpoint_destroy(tmp);
    return st;
}

f8_status tp_checkpoint_restore(gpt *m, const f8_checkpoint *ck)
{
    const param_table *t = &m->params;
    for (int i = 0; i < t->n; i++) /* the blocks: this rank's shards */
        if (t->v[i].layer >= 0 && module_starts(t, i)) TRY(restore_block_module(m, ck, i));
    for (int i = 0; i < t->n; i++) { /* the head and wpe: whole */
        const model_param *p = &t->v[i];
        if (p->layer >= 0) continue;
        if (module_starts(t, i)) TRY(f8_checkpoint_restore_module(ck, p->prefix, p->module));
        else if (!p->module) {
            f8_tensor v = p->stored;
            TRY(f8_checkpoint_read_tensor(ck, p->name, &v));
        }
    }
    return F8_OK;
}

/* ---- the optimizer state: the one-rank layout ------------------------------------ */


/* Sharded: the entry; NULL for a replicated parameter (rank 0 keeps its state). */
static const model_param *sharded(const model_param *p) { return p->flags & PARAM_TP_SHARDED ? p : NULL; }

/* The element dtype of moments stored as ck dtype t (FP32 or BF16: the forms
 * TP takes; FP8 moments' per-block scales do not split along a shard). */
static int moment_dtype(f8_ck_dtype t, f8_dtype *d)
{
    if (t == F8_CK_F32) *d = F8_DTYPE_FP32;
    else if (t == F8_CK_BF16) *d = F8_DTYPE_BF16;
    else return -1;
    return 0;
}

f8_status tp_optimizer_add(gpt *m, const f8_checkpoint *tmp, f8_checkpoint *ck, const char *prefix)
{
    const int P = m->tp_size;
    const param_table *l = &m->params; /* every parameter: the one-rank order */
    f8_status st = F8_OK;
    char name[256];
    for (int i = 0, li = 0; i < l->n && st == F8_OK; i++) {
        const model_param *s = sharded(&l->v[i]);
        if (!s && m->tp_rank != 0) continue; /* not in this rank's list */
        for (int w = 0; w < 2 && st == F8_OK; w++) {
            snprintf(name, sizeof name, "local.%s.%d", w ? "v" : "m", li);
            const f8_ck_entry *e = f8_checkpoint_find_entry(tmp, name);
            snprintf(name, sizeof name, "%s.%s.%d", prefix, w ? "v" : "m", i);
            f8_dtype dt = F8_DTYPE_FP32;
            if (!e || moment_dtype(e->dtype, &dt) != 0) st = F8_ERR_STATE;
            else if (!s) st = f8_checkpoint_put_entry(ck, name, e->dtype, e->ndim, e->shape, e->data, e->bytes);
            if (!s || st != F8_OK) continue;
            /* the moments (FP32 or BF16, the parameter's shape) gathered like the parameter */
            f8_tensor v = f8_tensor_make(NULL, dt, l->v[i].value.rows, l->v[i].value.cols);
            unsigned char *host = (unsigned char *)malloc(e->bytes * (size_t)P);
            st = host ? f8_ctx_alloc(m->ctx, e->bytes, &v.data) : F8_ERR_OUT_OF_MEMORY;
            if (st == F8_OK) st = f8_ctx_upload(m->ctx, v.data, e->data, e->bytes);
            if (st == F8_OK) st = gather_shards(m, s, &v, host);
            const int64_t shape[2] = {full_rows(s, &v, P), full_cols(s, &v, P)};
            if (st == F8_OK) st = f8_checkpoint_put_entry(ck, name, e->dtype, 2, shape, host, e->bytes * (size_t)P);
            f8_ctx_free(m->ctx, v.data);
            free(host);
        }
        li++;
    }
    if (st == F8_OK) st = param_optimizer_scalars_copy(tmp, "local", ck, prefix, NULL, 0);
    const char *form = f8_checkpoint_metadata(tmp, "local.moments"); /* the moments' form, as dp.c records it */
    snprintf(name, sizeof name, "%s.moments", prefix);
    if (st == F8_OK && form) st = f8_checkpoint_set_metadata(ck, name, form);
    return st;
}

f8_status tp_optimizer_restore(gpt *m, const f8_checkpoint *ck, const char *prefix, f8_checkpoint *tmp, char *err,
                               size_t n)
{
    const param_table *l = &m->params; /* every parameter: the one-rank order */
    f8_status st = F8_OK;
    char name[256], local[64];
    /* the moments' form the checkpoint records (none: FP32); dp_checkpoint_restore checks it against the run's */
    snprintf(name, sizeof name, "%s.moments", prefix);
    const char *form = f8_checkpoint_metadata(ck, name);
    const int bf16 = form && strcmp(form, "bf16") == 0;
    if (form && !bf16 && strcmp(form, "fp32") != 0)
        return train_fail(err, n, F8_ERR_DTYPE, "optimizer state: %s AdamW moments do not resume with --tp (FP32 "
                          "and BF16 moments do)", form);
    const f8_ck_dtype want_t = bf16 ? F8_CK_BF16 : F8_CK_F32;
    const size_t es = bf16 ? 2 : 4;
    for (int i = 0, li = 0; i < l->n && st == F8_OK; i++) {
        const model_param *s = sharded(&l->v[i]);
        if (!s && m->tp_rank != 0) continue;
        for (int w = 0; w < 2 && st == F8_OK; w++) {
            snprintf(name, sizeof name, "%s.%s.%d", prefix, w ? "v" : "m", i);
            snprintf(local, sizeof local, "local.%s.%d", w ? "v" : "m", li);
            const f8_ck_entry *e = f8_checkpoint_find_entry(ck, name);
            const size_t want = (size_t)(l->v[i].value.rows * l->v[i].value.cols) * es * (size_t)(s ? m->tp_size : 1);
            if (!e || e->dtype != want_t || e->bytes != want) {
                st = train_fail(err, n, F8_ERR_SHAPE, "optimizer state: \"%s\" is missing or not %s of %zu elements",
                                name, bf16 ? "BF16" : "F32", want / es);
            } else if (!s) {
                st = f8_checkpoint_put_entry(tmp, local, e->dtype, e->ndim, e->shape, e->data, e->bytes);
            } else {
                f8_tensor v = f8_tensor_make(NULL, bf16 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, l->v[i].value.rows,
                                             l->v[i].value.cols);
                st = put_shard(m, s, &v, e, tmp, local);
            }
        }
        li++;
    }
    snprintf(name, sizeof name, "%s.m.%d", prefix, l->n);
    if (st == F8_OK && f8_checkpoint_find_entry(ck, name))
        st = train_fail(err, n, F8_ERR_SHAPE, "optimizer state: \"%s\": more parameters than the model has", name);
    if (st == F8_OK) st = param_optimizer_scalars_copy(ck, prefix, tmp, "local", err, n);
    if (st == F8_OK && form) st = f8_checkpoint_set_metadata(tmp, "local.moments", form);
    return st;
}
