/*
 * attention_cudnn_graphs.cuh — the cuDNN operation graphs of
 * attention_cudnn.cu: a small builder over the backend API (every call a
 * no-op after the first failure, which is kept as the plan's reason), the
 * tensors' dims and strides as views of f8's buffers, and the forward and
 * backward SDPA graphs and the FP8 forward (the operations cudnn-frontend's
 * SDPA and SDPA FP8 nodes use).
 * Included once, by attention_cudnn.cu, after its state types.
 */
#ifndef F8_ATTENTION_CUDNN_GRAPHS_CUH
#define F8_ATTENTION_CUDNN_GRAPHS_CUH

#include "plan_cache.cuh"

/* ------------------------------------------------------------------------ */
/* Graph building                                                            */
/* ------------------------------------------------------------------------ */

/* A plan under construction: every call is a no-op once one has failed, so
 * the graphs below read straight through and the first failure is kept. */
typedef struct gb {
    const dn_api *api;
    dn_plan *p;
    void *ops[48]; /* the FP8 backward has 41 */
    int n_ops;
    int64_t next_uid;
    int failed;
} gb;

static void gb_fail(gb *g, dn_status st, const char *what, const char *obj)
{
    if (g->failed) return;
    g->failed = 1;
    char detail[DN_WHY / 2] = "";
    if (g->api->last_error) g->api->last_error(detail, sizeof detail);
    snprintf(g->p->why, sizeof g->p->why, "%s of '%s': %s (%d)%s%s", what, obj, g->api->error_string(st), st,
             detail[0] ? "; " : "", detail);
}

static void *gb_new(gb *g, int type, const char *obj)
{
    if (g->failed) return NULL;
    dn_plan *p = g->p;
    if (p->n_descs == p->cap_descs) {
        const int cap = p->cap_descs ? 2 * p->cap_descs : 64;
        void **grown = (void **)realloc(p->descs, (size_t)cap * sizeof *grown);
        if (!grown) {
            g->failed = 1;
            snprintf(p->why, sizeof p->why, "out of host memory building '%s'", obj);
            return NULL;
        }
        p->descs = grown, p->cap_descs = cap;
    }
    void *d = NULL;
    const dn_status st = g->api->b_create(type, &d);
    if (st != DN_OK) {
        gb_fail(g, st, "cudnnBackendCreateDescriptor", obj);
        return NULL;
    }
    p->descs[p->n_descs++] = d;
    return d;
}

static void gb_set_(gb *g, void *d, int attr, int type, int64_t n, const void *v, const char *obj, const char *name)
{
    if (g->failed) return;
    const dn_status st = g->api->b_set(d, attr, type, n, v);
    if (st != DN_OK) gb_fail(g, st, name, obj);
}
#define gb_set(g, d, attr, type, n, v, obj) gb_set_(g, d, attr, type, n, v, obj, "set " #attr)

static void gb_fin(gb *g, void *d, const char *obj)
{
    if (g->failed) return;
    const dn_status st = g->api->b_finalize(d);
    if (st != DN_OK) gb_fail(g, st, "cudnnBackendFinalize", obj);
}

static void *gb_tensor(gb *g, const char *name, int64_t uid, int dtype, const int64_t dim[4], const int64_t str[4],
                       int is_virtual, int by_value)
{
    void *t = gb_new(g, DN_D_TENSOR, name);
    const int64_t align = 16;
    const bool yes = true;
    gb_set(g, t, DN_A_T_DTYPE, DN_T_DATA_TYPE, 1, &dtype, name);
    gb_set(g, t, DN_A_T_DIMS, DN_T_INT64, 4, dim, name);
    gb_set(g, t, DN_A_T_STRIDES, DN_T_INT64, 4, str, name);
    gb_set(g, t, DN_A_T_UID, DN_T_INT64, 1, &uid, name);
    gb_set(g, t, DN_A_T_ALIGN, DN_T_INT64, 1, &align, name);
    if (is_virtual) gb_set(g, t, DN_A_T_VIRTUAL, DN_T_BOOLEAN, 1, &yes, name);
    if (by_value) gb_set(g, t, DN_A_T_BY_VALUE, DN_T_BOOLEAN, 1, &yes, name);
    gb_fin(g, t, name);
    return t;
}

static void *gb_virtual(gb *g, const char *name, int dtype, const int64_t dim[4], const int64_t str[4])
{
    return gb_tensor(g, name, g->next_uid++, dtype, dim, str, 1, 0);
}

/* A by-value FP32 scalar [1,1,1,1] (its value is a host pointer in the variant pack). */
static void *gb_scalar(gb *g, const char *name, int64_t uid)
{
    static const int64_t one[4] = {1, 1, 1, 1};
    return gb_tensor(g, name, uid, DN_FLOAT, one, one, 0, 1);
}

static void gb_op(gb *g, void *op, const char *name)
{
    if (g->failed) return;
    if (g->n_ops == (int)(sizeof g->ops / sizeof g->ops[0])) {
        g->failed = 1;
        snprintf(g->p->why, sizeof g->p->why, "too many operations at '%s'", name);
        return;
    }
    g->ops[g->n_ops++] = op;
}

/* y = mode(x[, b][, t]) at math precision prec; axis >= 0 for GEN_INDEX. */
static void gb_pw(gb *g, const char *name, int mode, int prec, void *x, void *b, void *t, void *y, int64_t axis)
{
    void *pd = gb_new(g, DN_D_POINTWISE, name);
    gb_set(g, pd, DN_A_PW_MODE, DN_T_POINTWISE_MODE, 1, &mode, name);
    gb_set(g, pd, DN_A_PW_MATH_PREC, DN_T_DATA_TYPE, 1, &prec, name);
    if (axis >= 0) gb_set(g, pd, DN_A_PW_AXIS, DN_T_INT64, 1, &axis, name);
    gb_fin(g, pd, name);
    void *op = gb_new(g, DN_D_OP_POINTWISE, name);
    const float alpha = 1.0f;
    gb_set(g, op, DN_A_OP_PW_DESC, DN_T_DESCRIPTOR, 1, &pd, name);
    gb_set(g, op, DN_A_OP_PW_X, DN_T_DESCRIPTOR, 1, &x, name);
    if (b) gb_set(g, op, DN_A_OP_PW_B, DN_T_DESCRIPTOR, 1, &b, name);
    if (t) gb_set(g, op, DN_A_OP_PW_T, DN_T_DESCRIPTOR, 1, &t, name);
    gb_set(g, op, DN_A_OP_PW_Y, DN_T_DESCRIPTOR, 1, &y, name);
    gb_set(g, op, DN_A_OP_PW_ALPHA1, DN_T_FLOAT, 1, &alpha, name);
    if (b) gb_set(g, op, DN_A_OP_PW_ALPHA2, DN_T_FLOAT, 1, &alpha, name);
    gb_fin(g, op, name);
    gb_op(g, op, name);
}

/* c = a·b (batched over the first two dims), FP32 accumulation. */
static void gb_mm(gb *g, const char *name, void *a, void *b, void *c)
{
    void *md = gb_new(g, DN_D_MATMUL, name);
    const int comp = DN_FLOAT;
    gb_set(g, md, DN_A_MM_COMP_TYPE, DN_T_DATA_TYPE, 1, &comp, name);
    gb_fin(g, md, name);
    void *op = gb_new(g, DN_D_OP_MATMUL, name);
    gb_set(g, op, DN_A_OP_MM_A, DN_T_DESCRIPTOR, 1, &a, name);
    gb_set(g, op, DN_A_OP_MM_B, DN_T_DESCRIPTOR, 1, &b, name);
    gb_set(g, op, DN_A_OP_MM_C, DN_T_DESCRIPTOR, 1, &c, name);
    gb_set(g, op, DN_A_OP_MM_DESC, DN_T_DESCRIPTOR, 1, &md, name);
    gb_fin(g, op, name);
    gb_op(g, op, name);
}

/* y = reduce(x) over the dims where y has extent 1, FP32. */
static void gb_reduce(gb *g, const char *name, int op_kind, void *x, void *y)
{
    void *rd = gb_new(g, DN_D_REDUCTION, name);
    const int comp = DN_FLOAT;
    gb_set(g, rd, DN_A_RED_OPERATOR, DN_T_REDUCTION_OPERATOR, 1, &op_kind, name);
    gb_set(g, rd, DN_A_RED_COMP_TYPE, DN_T_DATA_TYPE, 1, &comp, name);
    gb_fin(g, rd, name);
    void *op = gb_new(g, DN_D_OP_REDUCTION, name);
    gb_set(g, op, DN_A_OP_RED_X, DN_T_DESCRIPTOR, 1, &x, name);
    gb_set(g, op, DN_A_OP_RED_Y, DN_T_DESCRIPTOR, 1, &y, name);
    gb_set(g, op, DN_A_OP_RED_DESC, DN_T_DESCRIPTOR, 1, &rd, name);
    gb_fin(g, op, name);
    gb_op(g, op, name);
}

/* y = x seen with y's dims and strides (a transpose view). */
static void gb_reshape(gb *g, const char *name, void *x, void *y)
{
    void *op = gb_new(g, DN_D_OP_RESHAPE, name);
    gb_set(g, op, DN_A_OP_RESHAPE_X, DN_T_DESCRIPTOR, 1, &x, name);
    gb_set(g, op, DN_A_OP_RESHAPE_Y, DN_T_DESCRIPTOR, 1, &y, name);
    gb_fin(g, op, name);
    gb_op(g, op, name);
}

/* Dims and strides of the graphs' tensors for one key (element strides). */
typedef struct dn_dims {
    int64_t qkv[4], qkv_s[4];   /* Q, dQ: [b, h, s, d] in the (B·S, (h + 2G)·d) rows */
    int64_t kv[4], kv_s[4];     /* K, V, dK, dV: [b, G, s, d] in the same rows (GQA: G < h) */
    int64_t kt[4], kt_s[4];     /* Kᵀ, Vᵀ: [b, G, d, s] */
    int64_t full_s[4];          /* GQA: dK, dV per query head [b, h, s, d] packed, before the head sum */
    int64_t o[4], o_s[4];       /* O, dO: [b, h, s, d] in (B·S, C) rows */
    int64_t ss[4], ss_s[4];     /* scores [b, h, s, s] */
    int64_t sst_s[4];           /* scores transposed (same dims) */
    int64_t row[4], row_s[4];   /* per-row [b, h, s, 1]: Stats, max, sum (f8's (B·nh, S) layout) */
    int64_t acc_s[4];           /* dQ_accum [b, h, s, d] packed */
    int64_t dot_s[4];           /* dO ⊙ O before its reduction (the frontend's strides) */
} dn_dims;

static void dims_of(const dn_key *k, dn_dims *d)
{
    const int64_t b = k->B, h = k->nh, s = k->S, e = k->hd, C = h * e, G = k->nkv, ld = (h + 2 * G) * e;
    const int64_t qkv[4] = {b, h, s, e}, qkv_s[4] = {s * ld, e, ld, 1};
    const int64_t kv[4] = {b, G, s, e}, full_s[4] = {h * s * e, s * e, e, 1};
    const int64_t kt[4] = {b, G, e, s}, kt_s[4] = {s * ld, e, 1, ld};
    memcpy(d->kv, kv, sizeof kv), memcpy(d->kv_s, qkv_s, sizeof qkv_s), memcpy(d->full_s, full_s, sizeof full_s);
    const int64_t o_s[4] = {s * C, e, C, 1}, ss[4] = {b, h, s, s}, ss_s[4] = {h * s * s, s * s, s, 1};
    const int64_t sst_s[4] = {h * s * s, s * s, 1, s}, row[4] = {b, h, s, 1}, row_s[4] = {h * s, s, 1, 1};
    const int64_t acc_s[4] = {h * s * e, s * e, e, 1}, dot_s[4] = {h * s * e, s * e, h * e, 1};
    memcpy(d->qkv, qkv, sizeof qkv), memcpy(d->qkv_s, qkv_s, sizeof qkv_s);
    memcpy(d->kt, kt, sizeof kt), memcpy(d->kt_s, kt_s, sizeof kt_s);
    memcpy(d->o, qkv, sizeof qkv), memcpy(d->o_s, o_s, sizeof o_s);
    memcpy(d->ss, ss, sizeof ss), memcpy(d->ss_s, ss_s, sizeof ss_s), memcpy(d->sst_s, sst_s, sizeof sst_s);
    memcpy(d->row, row, sizeof row), memcpy(d->row_s, row_s, sizeof row_s);
    memcpy(d->acc_s, acc_s, sizeof acc_s), memcpy(d->dot_s, dot_s, sizeof dot_s);
}

/* The causal mask on scores x: select(row >= col, x, -inf) into a new virtual. */
static void *gb_causal(gb *g, const dn_dims *d, void *x, void *neg_inf)
{
    void *row = gb_virtual(g, "row index", DN_INT32, d->ss, d->ss_s);
    void *col = gb_virtual(g, "col index", DN_INT32, d->ss, d->ss_s);
    void *keep = gb_virtual(g, "row >= col", DN_BOOLEAN, d->ss, d->ss_s);
    void *y = gb_virtual(g, "masked scores", DN_FLOAT, d->ss, d->ss_s);
    gb_pw(g, "gen_index(row)", DN_PW_GEN_INDEX, DN_FLOAT, x, NULL, NULL, row, 2);
    gb_pw(g, "gen_index(col)", DN_PW_GEN_INDEX, DN_FLOAT, x, NULL, NULL, col, 3);
    gb_pw(g, "row >= col", DN_PW_CMP_GE, DN_BOOLEAN, row, col, NULL, keep, -1);
    gb_pw(g, "causal select", DN_PW_BINARY_SELECT, DN_FLOAT, x, neg_inf, keep, y, -1);
    return y;
}

/* The softmax of masked scores sm with its Stats (max + log sum), as
 * cudnn-frontend's softmax node with stats: P = exp(sm - max) / sum, a new
 * virtual of p_dtype. */
static void *gb_softmax(gb *g, const dn_dims *d, void *sm, void *stats, int p_dtype)
{
    void *mx = gb_virtual(g, "max", DN_FLOAT, d->row, d->row_s);
    void *sub = gb_virtual(g, "S - max", DN_FLOAT, d->ss, d->ss_s);
    void *e = gb_virtual(g, "exp", DN_FLOAT, d->ss, d->ss_s);
    void *sum = gb_virtual(g, "sum exp", DN_FLOAT, d->row, d->row_s);
    void *lg = gb_virtual(g, "log sum", DN_FLOAT, d->row, d->row_s);
    void *p = gb_virtual(g, "P", p_dtype, d->ss, d->ss_s);
    gb_reduce(g, "max", DN_REDUCE_MAX, sm, mx);
    gb_pw(g, "S - max", DN_PW_SUB, DN_FLOAT, sm, mx, NULL, sub, -1);
    gb_pw(g, "exp", DN_PW_EXP, DN_FLOAT, sub, NULL, NULL, e, -1);
    gb_reduce(g, "sum exp", DN_REDUCE_ADD, e, sum);
    gb_pw(g, "log sum", DN_PW_LOG, DN_FLOAT, sum, NULL, NULL, lg, -1);
    gb_pw(g, "Stats = max + log sum", DN_PW_ADD, DN_FLOAT, mx, lg, NULL, stats, -1);
    gb_pw(g, "P = exp / sum", DN_PW_DIV, DN_FLOAT, e, sum, NULL, p, -1);
    return p;
}

/* y = x · t for a [1,1,1,1] tensor t, into a new FP32 virtual of dims (dim, str). */
static void *gb_mul(gb *g, const char *name, void *x, void *t, const int64_t dim[4], const int64_t str[4])
{
    void *y = gb_virtual(g, name, DN_FLOAT, dim, str);
    gb_pw(g, name, DN_PW_MUL, DN_FLOAT, x, t, NULL, y, -1);
    return y;
}

/* A forward's real tensors: Q, Kᵀ, V of the I/O dtype, O of o_dtype, Stats,
 * and the by-value attn_scale and mask value; t[] in that order. */
enum { FW_Q, FW_KT, FW_V, FW_O, FW_STATS, FW_SCALE, FW_NEG_INF, FW_COUNT };
static void gb_forward_io(gb *g, const dn_dims *d, int dtype, int o_dtype, void *t[FW_COUNT])
{
    t[FW_Q] = gb_tensor(g, "Q", U_Q, dtype, d->qkv, d->qkv_s, 0, 0);
    t[FW_KT] = gb_tensor(g, "K^T", U_K, dtype, d->kt, d->kt_s, 0, 0);
    t[FW_V] = gb_tensor(g, "V", U_V, dtype, d->kv, d->kv_s, 0, 0);
    t[FW_O] = gb_tensor(g, "O", U_O, o_dtype, d->o, d->o_s, 0, 0);
    t[FW_STATS] = gb_tensor(g, "Stats", U_STATS, DN_FLOAT, d->row, d->row_s, 0, 0);
    t[FW_SCALE] = gb_scalar(g, "attn_scale", U_SCALE);
    t[FW_NEG_INF] = gb_scalar(g, "-inf", U_NEG_INF);
}

static void graph_forward(gb *g, const dn_dims *d)
{
    void *t[FW_COUNT];
    gb_forward_io(g, d, DN_BF16, DN_BF16, t);
    void *s = gb_virtual(g, "S = Q K^T", DN_FLOAT, d->ss, d->ss_s);
    gb_mm(g, "Q K^T", t[FW_Q], t[FW_KT], s);
    void *sm = gb_causal(g, d, gb_mul(g, "S c", s, t[FW_SCALE], d->ss, d->ss_s), t[FW_NEG_INF]);
    gb_mm(g, "O = P V", gb_softmax(g, d, sm, t[FW_STATS], DN_BF16), t[FW_V], t[FW_O]);
}

static void graph_backward(gb *g, const dn_dims *d, int det)
{
    void *q = gb_tensor(g, "Q", U_Q, DN_BF16, d->qkv, d->qkv_s, 0, 0);
    void *kt = gb_tensor(g, "K^T", U_K, DN_BF16, d->kt, d->kt_s, 0, 0);
    void *vt = gb_tensor(g, "V^T", U_V, DN_BF16, d->kt, d->kt_s, 0, 0);
    void *o = gb_tensor(g, "O", U_O, DN_BF16, d->o, d->o_s, 0, 0);
    void *dout = gb_tensor(g, "dO", U_DO, DN_BF16, d->o, d->o_s, 0, 0);
    void *stats = gb_tensor(g, "Stats", U_STATS, DN_FLOAT, d->row, d->row_s, 0, 0);
    void *dq = gb_tensor(g, "dQ", U_DQ, DN_BF16, d->qkv, d->qkv_s, 0, 0);
    void *dk = gb_tensor(g, "dK", U_DK, DN_BF16, d->kv, d->kv_s, 0, 0);
    void *dv = gb_tensor(g, "dV", U_DV, DN_BF16, d->kv, d->kv_s, 0, 0);
    /* GQA (G < h): each query head's dK, dV into a packed BF16 virtual, then
     * the sum over the group's heads (cudnn-frontend's SDPA backward form) */
    const int gqa = d->kv[1] != d->qkv[1];
    void *dk_full = gqa ? gb_virtual(g, "dK per query head", DN_BF16, d->qkv, d->full_s) : dk;
    void *dv_full = gqa ? gb_virtual(g, "dV per query head", DN_BF16, d->qkv, d->full_s) : dv;
    void *rsum = gb_tensor(g, "softmax_sum (D)", U_SUM, DN_FLOAT, d->row, d->row_s, 0, 0);
    void *scale = gb_scalar(g, "attn_scale", U_SCALE), *one = gb_scalar(g, "1", U_ONE);
    void *neg_inf = gb_scalar(g, "-inf", U_NEG_INF);

    /* D = Σ_d dO ⊙ O (times the dropout scale, here 1: the pattern wants the multiply) */
    void *dot = gb_virtual(g, "dO O", DN_FLOAT, d->o, d->dot_s);
    void *red = gb_virtual(g, "sum dO O", DN_FLOAT, d->row, d->row_s);
    gb_pw(g, "dO O", DN_PW_MUL, DN_FLOAT, dout, o, NULL, dot, -1);
    gb_reduce(g, "sum dO O", DN_REDUCE_ADD, dot, red);
    gb_pw(g, "D = sum 1", DN_PW_MUL, DN_FLOAT, red, one, NULL, rsum, -1);

    /* P recomputed from Stats */
    void *s = gb_virtual(g, "S = Q K^T", DN_FLOAT, d->ss, d->ss_s);
    void *sc = gb_virtual(g, "S c", DN_FLOAT, d->ss, d->ss_s);
    void *sub = gb_virtual(g, "S c - Stats", DN_FLOAT, d->ss, d->ss_s);
    gb_mm(g, "Q K^T", q, kt, s);
    gb_pw(g, "S c", DN_PW_MUL, DN_FLOAT, s, scale, NULL, sc, -1);
    gb_pw(g, "S c - Stats", DN_PW_SUB, DN_FLOAT, sc, stats, NULL, sub, -1);
    void *sm = gb_causal(g, d, sub, neg_inf);
    void *p = gb_virtual(g, "P", DN_FLOAT, d->ss, d->ss_s);
    gb_pw(g, "P = exp", DN_PW_EXP, DN_FLOAT, sm, NULL, NULL, p, -1);

    /* dV = Pᵀ dO */
    void *pt = gb_virtual(g, "P^T", DN_BF16, d->ss, d->sst_s);
    gb_reshape(g, "P^T", p, pt);
    gb_mm(g, "dV = P^T dO", pt, dout, dv_full);
    if (gqa) gb_reduce(g, "dV = sum over the group", DN_REDUCE_ADD, dv_full, dv);

    /* dS = (dO Vᵀ - D) P c */
    void *dp = gb_virtual(g, "dP = dO V^T", DN_FLOAT, d->ss, d->ss_s);
    void *t1 = gb_virtual(g, "dP - D", DN_FLOAT, d->ss, d->ss_s);
    void *t2 = gb_virtual(g, "(dP - D) P", DN_FLOAT, d->ss, d->ss_s);
    void *ds = gb_virtual(g, "dS", DN_FLOAT, d->ss, d->ss_s);
    gb_mm(g, "dP = dO V^T", dout, vt, dp);
    gb_pw(g, "dP - D", DN_PW_SUB, DN_FLOAT, dp, rsum, NULL, t1, -1);
    gb_pw(g, "(dP - D) P", DN_PW_MUL, DN_FLOAT, t1, p, NULL, t2, -1);
    gb_pw(g, "dS = (dP - D) P c", DN_PW_MUL, DN_FLOAT, t2, scale, NULL, ds, -1);

    /* dK = dSᵀ Q */
    void *dst = gb_virtual(g, "dS^T", DN_BF16, d->ss, d->sst_s);
    gb_reshape(g, "dS^T", ds, dst);
    gb_mm(g, "dK = dS^T Q", dst, q, dk_full);
    if (gqa) gb_reduce(g, "dK = sum over the group", DN_REDUCE_ADD, dk_full, dk);

    /* dQ = dS K: straight into dQ (deterministic), or through the FP32 dQ_accum (atomics) */
    void *kk = gb_virtual(g, "K", DN_FLOAT, d->kv, d->kv_s);
    gb_reshape(g, "K", kt, kk);
    if (det) {
        gb_mm(g, "dQ = dS K", ds, kk, dq);
    } else {
        void *acc = gb_tensor(g, "dQ_accum", U_DQ_ACC, DN_FLOAT, d->qkv, d->acc_s, 0, 0);
        gb_mm(g, "dQ_accum = dS K", ds, kk, acc);
        gb_pw(g, "dQ = dQ_accum", DN_PW_IDENTITY, DN_FLOAT, acc, NULL, NULL, dq, -1);
    }
}

/* The ready plan for key from the ctx's plan cache (plan_cache.cuh), built
 * from arg if new; NULL: refused (f8's kernels run) or *st an error. The
 * plan's workspace is the cache's buffer. Both cuDNN files' kinds use it. */
static inline dn_plan *dn_plan_cached(f8_ctx *ctx, const f8i_plan_kind *kind, const dn_key *key, const void *arg,
                                      f8_status *st)
{
    f8i_plan *e = NULL;
    *st = f8i_plan_get(ctx, kind, key, sizeof *key, arg, &e);
    if (*st != F8_OK) return NULL;
    dn_plan *p = (dn_plan *)e->body;
    if (!p->ok) return NULL;
    p->buf = e->buf;
    return p;
}

#endif /* F8_ATTENTION_CUDNN_GRAPHS_CUH */
