/*
 * tp.c — tensor parallelism for the GPT (tp.h).
 *
 * Design note. Every block parameter is described once (SPLITS): which
 * module and parameter, its checkpoint field, and how it is split. A split
 * is a dimension (0: rows, 1: columns) and a number of parts: qkv's weight
 * is three stacked [C, C] blocks (q, k, v), so rank t's rows are the rows
 * t·C/P .. of each part, laid part after part (the attention module then
 * reads q | k | v of its H/P heads exactly as one rank reads all of them);
 * a gated fc1 has two parts. Replicated parameters are either the same on
 * every rank (REPL) or, for the row-parallel biases, rank 0's value and
 * zero elsewhere (RANK0): added once to the sum of the partial outputs.
 * The same table drives the initial sharding, the checkpoint gather and
 * scatter, and the optimizer state's mapping, so the three cannot disagree.
 * Host staging is used only at creation and checkpoints, never in a step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp.h"
#include "try.h"


enum { REPL = -1, RANK0 = -2 };

typedef struct tp_split {
    int mod;            /* 0 qkv, 1 proj, 2 mlp */
    f8_param which;
    const char *field;  /* its name in a module checkpoint */
    int dim;            /* 0 rows, 1 columns, REPL or RANK0 */
    int parts;          /* stacked blocks along dim (0: fc1's, 1 or 2 for gated) */
} tp_split;

static const tp_split SPLITS[] = {
    {0, F8_PARAM_LN_WEIGHT, "layer_norm_weight", REPL, 1},
    {0, F8_PARAM_LN_BIAS, "layer_norm_bias", REPL, 1},
    {0, F8_PARAM_WEIGHT, "weight", 0, 3},
    {0, F8_PARAM_BIAS, "bias", 1, 3},
    {1, F8_PARAM_WEIGHT, "weight", 1, 1},
    {1, F8_PARAM_BIAS, "bias", RANK0, 1},
    {2, F8_PARAM_LN_WEIGHT, "layer_norm_weight", REPL, 1},
    {2, F8_PARAM_LN_BIAS, "layer_norm_bias", REPL, 1},
    {2, F8_PARAM_FC1_WEIGHT, "fc1_weight", 0, 0},
    {2, F8_PARAM_FC1_BIAS, "fc1_bias", 1, 0},
    {2, F8_PARAM_FC2_WEIGHT, "fc2_weight", 1, 1},
    {2, F8_PARAM_FC2_BIAS, "fc2_bias", RANK0, 1},
};
#define N_SPLITS ((int)(sizeof SPLITS / sizeof SPLITS[0]))
static const char *const MOD_NAMES[3] = {"qkv", "proj", "mlp"};

static f8_module *mod_of(const gpt_block *b, int k) { return k == 0 ? b->qkv : k == 1 ? b->proj : b->mlp; }

/* Parts of a split for this model: fc1 has two when gated (its local rows
 * are then 2·Fl). */
static int parts_of(const gpt *m, const tp_split *s, const f8_tensor *local)
{
    if (s->parts) return s->parts;
    const int64_t n = s->dim == 0 ? local->rows : local->cols;
    return n == 2 * m->Fl ? 2 : 1;
}

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
 * bytes): along dim, in parts stacked blocks, each split in P. to_local
 * picks the direction. */
void tp_shard_copy(unsigned char *full, unsigned char *local, int64_t R, int64_t K, int dim, int parts, int P, int t,
                   size_t es, int to_local)
{
    const int64_t nf = (dim == 0 ? R : K) / parts, nl = nf / P;
    /* dim 0: whole rows j·nf + t·nl + i; dim 1: per row, the runs of nl columns at j·nf + t·nl */
    const int64_t outer = dim == 0 ? 1 : R, lk = dim == 0 ? K : parts * nl, len = dim == 0 ? K : nl;
    for (int64_t r = 0; r < outer; r++)
        for (int j = 0; j < parts; j++)
            for (int64_t i = 0; i < (dim == 0 ? nl : 1); i++) {
                const int64_t f_off = dim == 0 ? (j * nf + t * nl + i) * K : r * K + j * nf + t * nl;
                const int64_t l_off = dim == 0 ? (j * nl + i) * K : r * lk + j * nl;
                unsigned char *f = full + (size_t)f_off * es, *l = local + (size_t)l_off * es;
                if (to_local) memcpy(l, f, (size_t)len * es);
                else memcpy(f, l, (size_t)len * es);
            }
}

static int64_t full_rows(const tp_split *s, const f8_tensor *v, int P) { return s->dim == 0 ? v->rows * P : v->rows; }
static int64_t full_cols(const tp_split *s, const f8_tensor *v, int P) { return s->dim == 1 ? v->cols * P : v->cols; }

f8_status tp_block_create(gpt *m, gpt_block *b, const f8_layernorm_linear_config *qc, const f8_linear_config *pc,
                          const f8_layernorm_mlp_config *mc, f8_ctx *init, f8_module *const full[3])
{
    const int P = m->tp_size, t = m->tp_rank;
    f8_layernorm_linear_config q = *qc;
    f8_linear_config p = *pc;
    f8_layernorm_mlp_config f = *mc;
    q.out_features = 3 * m->Cl;
    p.in_features = m->Cl;
    f.ffn_hidden_size = m->Fl;
    TRY(f8_layernorm_linear_create(m->ctx, &q, &b->qkv));
    TRY(f8_linear_create(m->ctx, &p, &b->proj));
    TRY(f8_layernorm_mlp_create(m->ctx, &f, &b->mlp));
    f8_status st = F8_OK;
    for (int k = 0; k < N_SPLITS && st == F8_OK; k++) {
        const tp_split *s = &SPLITS[k];
        f8_tensor fv, lv;
        st = f8_module_param(full[s->mod], s->which, 0, &fv);
        if (st == F8_OK) st = f8_module_param(mod_of(b, s->mod), s->which, 0, &lv);
        if (st != F8_OK) break;
        const size_t es = f8_dtype_size(lv.dtype), fb = (size_t)(fv.rows * fv.cols) * es, lb = (size_t)(lv.rows * lv.cols) * es;
        unsigned char *hf = (unsigned char *)malloc(fb + 1), *hl = (unsigned char *)calloc(1, lb + 1);
        st = hf && hl ? f8_ctx_download(init, hf, fv.data, fb) : F8_ERR_OUT_OF_MEMORY;
        if (st == F8_OK) {
            if (s->dim >= 0) tp_shard_copy(hf, hl, fv.rows, fv.cols, s->dim, parts_of(m, s, &lv), P, t, es, 1);
            else if (s->dim == REPL || t == 0) memcpy(hl, hf, lb); /* RANK0 elsewhere: zero */
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

f8_status tp_reduce_grads(gpt *m)
{
    for (int64_t l = 0; l < m->c.layers; l++)
        for (int k = 0; k < N_SPLITS; k++) {
            const tp_split *s = &SPLITS[k];
            if (s->dim != REPL) continue; /* the LayerNorms of the column-parallel modules */
            f8_tensor g;
            TRY(f8_module_param(mod_of(&m->blocks[l], s->mod), s->which, 1, &g));
            TRY(tp_all_reduce(m, &g));
        }
    return F8_OK;
}

/* The replicated parameters: the head (final norm, LM head = wte), wpe and
 * the blocks' LayerNorms. The RANK0 biases stay zero off rank 0. */
f8_status tp_sync_replicated(gpt *m)
{
    static const f8_param HEAD[3] = {F8_PARAM_WEIGHT, F8_PARAM_LN_WEIGHT, F8_PARAM_LN_BIAS};
    f8_tensor v;
    for (int k = 0; k < 3; k++) {
        TRY(f8_module_param(m->head, HEAD[k], 0, &v));
        TRY(f8_comm_broadcast(m->tp, v.data, v.data, v.rows * v.cols, v.dtype, 0));
    }
    TRY(f8_comm_broadcast(m->tp, m->wpe, m->wpe, gpt_positions(&m->c) * m->c.channels, m->c.dtype, 0));
    for (int64_t l = 0; l < m->c.layers; l++)
        for (int k = 0; k < N_SPLITS; k++) {
            if (SPLITS[k].dim != REPL) continue;
            TRY(f8_module_param(mod_of(&m->blocks[l], SPLITS[k].mod), SPLITS[k].which, 0, &v));
            TRY(f8_comm_broadcast(m->tp, v.data, v.data, v.rows * v.cols, v.dtype, 0));
        }
    return F8_OK;
}

/* The split of a block parameter (by address) with its view, or NULL for the
 * embeddings and head (replicated). */
static const tp_split *split_of(const gpt *m, const void *data, f8_tensor *local)
{
    for (int64_t l = 0; l < m->c.layers; l++)
        for (int k = 0; k < N_SPLITS; k++) {
            f8_tensor v;
            if (f8_module_param(mod_of(&m->blocks[l], SPLITS[k].mod), SPLITS[k].which, 0, &v) == F8_OK &&
                v.data == data) {
                if (local) *local = v;
                return &SPLITS[k];
            }
        }
    return NULL;
}

/* ---- checkpoints: the one-rank layout ------------------------------------------ */

static void block_prefix(char *out, size_t n, int64_t l, int mod)
{
    snprintf(out, n, "model.h.%lld.%s", (long long)l, MOD_NAMES[mod]);
}

/* The whole of a sharded local tensor v (split s): every rank's shard
 * gathered (a collective) and laid out as one rank has it, into host (the
 * full tensor's bytes). */
static f8_status gather_shards(gpt *m, const tp_split *s, const f8_tensor *v, unsigned char *host)
{
    const int P = m->tp_size;
    const size_t es = f8_dtype_size(v->dtype), lb = (size_t)(v->rows * v->cols) * es;
    void *dev = NULL;
    unsigned char *all = (unsigned char *)malloc(lb * (size_t)P + 1);
    f8_status st = all ? f8_ctx_alloc(m->ctx, lb * (size_t)P, &dev) : F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = f8_comm_all_gather(m->tp, v->data, dev, v->rows * v->cols, v->dtype);
    if (st == F8_OK) st = f8_ctx_download(m->ctx, all, dev, lb * (size_t)P);
    for (int t = 0; t < P && st == F8_OK; t++)
        tp_shard_copy(host, all + lb * (size_t)t, full_rows(s, v, P), full_cols(s, v, P), s->dim, parts_of(m, s, v), P, t,
                   es, 0);
    f8_ctx_free(m->ctx, dev);
    free(all);
    return st;
}

f8_status tp_checkpoint_add(gpt *m, f8_checkpoint *ck)
{
    const int P = m->tp_size;
    char prefix[64], name[128];
    f8_checkpoint *tmp = NULL;
    TRY(f8_checkpoint_create(m->ctx, &tmp));
    f8_status st = F8_OK;
    for (int64_t l = 0; l < m->c.layers && st == F8_OK; l++)
        for (int k = 0; k < 3 && st == F8_OK; k++) {
            block_prefix(prefix, sizeof prefix, l, k);
            st = f8_checkpoint_add_module(tmp, prefix, mod_of(&m->blocks[l], k));
        }
    /* the sharded parameters whole (RANK0 biases: rank 0's, the one that writes, holds them) */
    for (int64_t l = 0; l < m->c.layers && st == F8_OK; l++)
        for (int k = 0; k < N_SPLITS && st == F8_OK; k++) {
            const tp_split *s = &SPLITS[k];
            if (s->dim < 0) continue;
            f8_tensor v;
            st = f8_module_param(mod_of(&m->blocks[l], s->mod), s->which, 0, &v);
            block_prefix(prefix, sizeof prefix, l, s->mod);
            snprintf(name, sizeof name, "%s.%s", prefix, s->field);
            const f8_ck_entry *e = f8_checkpoint_find_entry(tmp, name);
            if (st == F8_OK && !e) st = F8_ERR_STATE;
            if (st != F8_OK) break;
            const size_t bytes = (size_t)(v.rows * v.cols) * f8_dtype_size(v.dtype) * (size_t)P;
            unsigned char *host = (unsigned char *)malloc(bytes);
            st = host ? gather_shards(m, s, &v, host) : F8_ERR_OUT_OF_MEMORY;
            int64_t shape[2] = {full_rows(s, &v, P), full_cols(s, &v, P)};
            if (e->ndim == 1) shape[0] = shape[0] * shape[1]; /* biases and norms are stored 1-D */
            if (st == F8_OK) st = f8_checkpoint_put_entry(ck, name, e->dtype, e->ndim, shape, host, bytes);
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
    if (st == F8_OK) st = f8_checkpoint_add_module(ck, "model.head", m->head);
    f8_tensor wpe = f8_tensor_make(m->wpe, m->c.dtype, gpt_positions(&m->c), m->c.channels);
    if (st == F8_OK) st = f8_checkpoint_add_tensor(ck, "model.wpe", &wpe);
    return st;
}

/* This rank's shard of entry e (a whole tensor of split s) into tmp under
 * name, for a local tensor shaped like v. A whole tensor of another size is
 * put as it is: restoring it then fails on its shape, naming it. */
static f8_status put_shard(gpt *m, const tp_split *s, const f8_tensor *v, const f8_ck_entry *e, f8_checkpoint *tmp,
                           const char *name)
{
    const int P = m->tp_size;
    const size_t es = f8_ck_dtype_size(e->dtype), lb = (size_t)(v->rows * v->cols) * es;
    if (e->bytes != lb * (size_t)P)
        return f8_checkpoint_put_entry(tmp, name, e->dtype, e->ndim, e->shape, e->data, e->bytes);
    unsigned char *h = (unsigned char *)calloc(1, lb + 1);
    if (!h) return F8_ERR_OUT_OF_MEMORY;
    tp_shard_copy((unsigned char *)e->data, h, full_rows(s, v, P), full_cols(s, v, P), s->dim, parts_of(m, s, v), P,
                   m->tp_rank, es, 1);
    int64_t shape[2] = {v->rows, v->cols};
    if (e->ndim == 1) shape[0] = v->rows * v->cols;
    f8_status st = f8_checkpoint_put_entry(tmp, name, e->dtype, e->ndim, shape, h, lb);
    free(h);
    return st;
}

f8_status tp_checkpoint_restore(gpt *m, const f8_checkpoint *ck)
{
    char prefix[64], name[128];
    f8_status st = F8_OK;
    for (int64_t l = 0; l < m->c.layers && st == F8_OK; l++)
        for (int k = 0; k < 3 && st == F8_OK; k++) {
            f8_module *mod = mod_of(&m->blocks[l], k);
            f8_checkpoint *tmp = NULL;
            block_prefix(prefix, sizeof prefix, l, k);
            const size_t plen = strlen(prefix);
            st = f8_checkpoint_create(m->ctx, &tmp);
            for (int j = 0; j < N_SPLITS && st == F8_OK; j++) { /* this rank's shards */
                const tp_split *s = &SPLITS[j];
                if (s->mod != k || s->dim == REPL || (s->dim == RANK0 && m->tp_rank == 0)) continue;
                f8_tensor v;
                snprintf(name, sizeof name, "%s.%s", prefix, s->field);
                const f8_ck_entry *e = f8_checkpoint_find_entry(ck, name);
                if (!e) continue; /* restore_module names what is missing */
                st = f8_module_param(mod, s->which, 0, &v);
                if (st == F8_OK && s->dim == RANK0 && m->tp_rank != 0) { /* zero off rank 0 */
                    unsigned char *z = (unsigned char *)calloc(1, e->bytes + 1);
                    st = z ? f8_checkpoint_put_entry(tmp, name, e->dtype, e->ndim, e->shape, z, e->bytes) : F8_ERR_OUT_OF_MEMORY;
                    free(z);
                } else if (st == F8_OK) {
                    st = put_shard(m, s, &v, e, tmp, name);
                }
            }
            for (size_t i = 0; i < f8_checkpoint_entry_count(ck) && st == F8_OK; i++) { /* the rest of the module */
                const f8_ck_entry *e = f8_checkpoint_entry_at(ck, i);
                if (strncmp(e->name, prefix, plen) == 0 && e->name[plen] == '.' && !f8_checkpoint_find_entry(tmp, e->name))
                    st = f8_checkpoint_put_entry(tmp, e->name, e->dtype, e->ndim, e->shape, e->data, e->bytes);
            }
            snprintf(name, sizeof name, "%s.fp8.recipe", prefix);
            const char *recipe = f8_checkpoint_metadata(ck, name);
            if (st == F8_OK && recipe) st = f8_checkpoint_set_metadata(tmp, name, recipe);
            if (st == F8_OK) st = f8_checkpoint_restore_module(tmp, prefix, mod);
            f8_checkpoint_destroy(tmp);
        }
    if (st == F8_OK) st = f8_checkpoint_restore_module(ck, "model.head", m->head);
    f8_tensor wpe = f8_tensor_make(m->wpe, m->c.dtype, gpt_positions(&m->c), m->c.channels);
    if (st == F8_OK) st = f8_checkpoint_read_tensor(ck, "model.wpe", &wpe);
    return st;
}

/* ---- the optimizer state: the one-rank layout ------------------------------------ */


/* Sharded: its split; NULL for a replicated parameter (rank 0 keeps its state). */
static const tp_split *sharded_split(const gpt *m, const f8_tensor *p)
{
    const tp_split *s = split_of(m, p->data, NULL);
    return s && s->dim >= 0 ? s : NULL;
}

static const char *const OPT_SCALARS[3] = {"step", "lr", "grad_norm"};

f8_status tp_optimizer_add(gpt *m, const f8_checkpoint *tmp, f8_checkpoint *ck, const char *prefix)
{
    const int P = m->tp_size;
    const param_table *l = &m->params; /* every parameter: the one-rank order */
    f8_status st = F8_OK;
    char name[256];
    for (int i = 0, li = 0; i < l->n && st == F8_OK; i++) {
        const tp_split *s = sharded_split(m, &l->v[i].value);
        if (!s && m->tp_rank != 0) continue; /* not in this rank's list */
        for (int w = 0; w < 2 && st == F8_OK; w++) {
            snprintf(name, sizeof name, "local.%s.%d", w ? "v" : "m", li);
            const f8_ck_entry *e = f8_checkpoint_find_entry(tmp, name);
            snprintf(name, sizeof name, "%s.%s.%d", prefix, w ? "v" : "m", i);
            if (!e) st = F8_ERR_STATE;
            else if (!s) st = f8_checkpoint_put_entry(ck, name, e->dtype, e->ndim, e->shape, e->data, e->bytes);
            if (!s || st != F8_OK) continue;
            /* the moments (FP32, the parameter's shape) gathered like the parameter */
            f8_tensor v = f8_tensor_make(NULL, F8_DTYPE_FP32, l->v[i].value.rows, l->v[i].value.cols);
            unsigned char *host = (unsigned char *)malloc(e->bytes * (size_t)P);
            st = host ? f8_ctx_alloc(m->ctx, e->bytes, &v.data) : F8_ERR_OUT_OF_MEMORY;
            if (st == F8_OK) st = f8_ctx_upload(m->ctx, v.data, e->data, e->bytes);
            if (st == F8_OK) st = gather_shards(m, s, &v, host);
            const int64_t shape[2] = {full_rows(s, &v, P), full_cols(s, &v, P)};
            if (st == F8_OK) st = f8_checkpoint_put_entry(ck, name, F8_CK_F32, 2, shape, host, e->bytes * (size_t)P);
            f8_ctx_free(m->ctx, v.data);
            free(host);
        }
        li++;
    }
    for (int k = 0; k < 3 && st == F8_OK; k++) {
        snprintf(name, sizeof name, "local.%s", OPT_SCALARS[k]);
        const f8_ck_entry *e = f8_checkpoint_find_entry(tmp, name);
        snprintf(name, sizeof name, "%s.%s", prefix, OPT_SCALARS[k]);
        st = e ? f8_checkpoint_put_entry(ck, name, e->dtype, e->ndim, e->shape, e->data, e->bytes) : F8_ERR_STATE;
    }
    return st;
}

f8_status tp_optimizer_restore(gpt *m, const f8_checkpoint *ck, const char *prefix, f8_checkpoint *tmp, char *err,
                               size_t n)
{
    const param_table *l = &m->params; /* every parameter: the one-rank order */
    f8_status st = F8_OK;
    char name[256], local[64];
    for (int i = 0, li = 0; i < l->n && st == F8_OK; i++) {
        const tp_split *s = sharded_split(m, &l->v[i].value);
        if (!s && m->tp_rank != 0) continue;
        for (int w = 0; w < 2 && st == F8_OK; w++) {
            snprintf(name, sizeof name, "%s.%s.%d", prefix, w ? "v" : "m", i);
            snprintf(local, sizeof local, "local.%s.%d", w ? "v" : "m", li);
            const f8_ck_entry *e = f8_checkpoint_find_entry(ck, name);
            const size_t want = (size_t)(l->v[i].value.rows * l->v[i].value.cols) * 4 * (size_t)(s ? m->tp_size : 1);
            if (!e || e->dtype != F8_CK_F32 || e->bytes != want) {
                snprintf(err, n, "optimizer state: \"%s\" is missing or not F32 of %zu elements", name, want / 4);
                st = F8_ERR_SHAPE;
            } else if (!s) {
                st = f8_checkpoint_put_entry(tmp, local, e->dtype, e->ndim, e->shape, e->data, e->bytes);
            } else {
                f8_tensor v = f8_tensor_make(NULL, F8_DTYPE_FP32, l->v[i].value.rows, l->v[i].value.cols);
                st = put_shard(m, s, &v, e, tmp, local);
            }
        }
        li++;
    }
    snprintf(name, sizeof name, "%s.m.%d", prefix, l->n);
    if (st == F8_OK && f8_checkpoint_find_entry(ck, name)) {
        snprintf(err, n, "optimizer state: \"%s\": more parameters than the model has", name);
        st = F8_ERR_SHAPE;
    }
    for (int k = 0; k < 3 && st == F8_OK; k++) {
        snprintf(name, sizeof name, "%s.%s", prefix, OPT_SCALARS[k]);
        const f8_ck_entry *e = f8_checkpoint_find_entry(ck, name);
        snprintf(local, sizeof local, "local.%s", OPT_SCALARS[k]);
        if (!e) snprintf(err, n, "optimizer state: no \"%s\"", name);
        st = e ? f8_checkpoint_put_entry(tmp, local, e->dtype, e->ndim, e->shape, e->data, e->bytes) : F8_ERR_SHAPE;
    }
    return st;
}
