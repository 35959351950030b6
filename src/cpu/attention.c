/*
 * cpu/attention.c — the reference causal self-attention (attention.h): plain
 * loops over sequences, heads and rows, the oracle the CUDA backend is
 * tested against.
 *
 * Design note. attention.h's formulas, one row (or one key) at a time. Each
 * dot product and each output sum is one double accumulator rounded to FP32
 * where the GPU's tensor cores sum in FP32 (s, dP, D, y before 1/l, dq, dk,
 * dv), so the two backends see the same values and differ only in summation
 * order and exp2f's last bits. The softmax is FP32 as documented: m over the
 * whole row, p = exp2f((s - m)·c2), l an FP32 sum in key order, p rounded to
 * the dtype before its product with v. The backward recomputes P from the
 * saved L, dq row by row and dk, dv key by key (each pair's s and dP are
 * computed twice, as the GPU does; no S×S matrix is ever held). Scratch: the
 * two rows of S floats attention.h carves.
 *
 * The FP8 forward (fp8_forward) is attention.h's FP8 chain in the same
 * style, the oracle of cuDNN's FP8 graph: E4M3 codes decoded exactly, each
 * dot product a double sum rounded to FP32 then descaled, P normalized
 * before it is scaled and rounded to E4M3 (the graph's order), O's amax
 * taken before scale_o. Under current scaling the op first writes S's
 * scale into the slot (s_scale_now); O8's scale is then the QKV slot's
 * (attention.c passes it as o_scale: the chain is the same).
 * The FP8 backward is attention.h's FP8 backward chain in
 * the BF16 backward's loop order: D, then dq row by row, then dk, dv key by
 * key over the group's heads, each pair's P8 and dS8 recomputed where used.
 *
 * Threads (cpu/parallel.h): the oracle's loops take minutes at the GPU
 * tests' shapes, so a big call runs its units on up to 8 threads with the
 * same bits as one. A unit is one query row of one (sequence, head): the
 * forward's y and L row, or the backward's D and dq row (its dS reads only
 * that row's D); then, after every row is done, one key of one (sequence,
 * group): its dk, dv rows, summed over the group's heads as before. Each
 * output is written by one unit with its sums in the single-threaded order;
 * each worker has its own scratch rows and amaxes, maxed together at the
 * end (exact in any order).
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "nn/attention.h"
#include "core/numerics.h"
#include "cpu/parallel.h"
#include "cpu/element.h"

/* Columns of dk, dv summed at once in the backward (double accumulators on the stack). */
#define F8I_CPU_ATTN_HD_CHUNK 64

/* One (sequence, head) of a call: element offsets of its q, k, v columns in
 * qkv (GQA: k and v of its group's head h / (nh / G)), its y/dy/o columns,
 * and its L/D rows. */
typedef struct head_view {
    int64_t S, hd, ld3, ld1; /* ld3 = (nh + 2G)·hd, ld1 = C */
    int64_t q, k, v, y, lse;
    f8_dtype dt;
} head_view;

static head_view view_of(int64_t b, int64_t h, int64_t S, int64_t nh, int64_t G, int64_t hd, f8_dtype dt)
{
    const int64_t C = nh * hd, g = h / (nh / G);
    head_view v;
    v.S = S, v.hd = hd, v.ld3 = (nh + 2 * G) * hd, v.ld1 = C, v.dt = dt;
    v.q = b * S * v.ld3 + h * hd;
    v.k = b * S * v.ld3 + C + g * hd;
    v.v = v.k + G * hd;
    v.y = b * S * C + h * hd;
    v.lse = (b * nh + h) * S;
    return v;
}

/* G of a call (0 in args made before GQA: multi-head). */
static int64_t kv_heads(int64_t nh, int64_t G) { return G > 0 ? G : nh; }

/* A call's workers and each one's (2, S) scratch rows: worker 0 has the
 * caller's, the others share one block allocated per call (the oracle's
 * habit, as gemm.c's); without that block the call runs on one thread (it
 * never fails for it). */
typedef struct team {
    int n;
    float *rows[F8I_CPU_MAX_WORKERS];
    float *block;
} team;

/* work: about the call's multiply-adds (work_of); units: the fewest any of its passes has. */
static team team_of(float *rows, int64_t S, double work, int64_t units)
{
    team t = {0};
    t.n = f8i_cpu_workers(work, units);
    if (t.n > 1) t.block = (float *)malloc((size_t)(t.n - 1) * 2 * (size_t)S * sizeof(float));
    if (!t.block) t.n = 1;
    for (int w = 0; w < t.n; w++) t.rows[w] = w == 0 ? rows : t.block + (size_t)(w - 1) * 2 * (size_t)S;
    return t;
}

static double work_of(int64_t B, int64_t nh, int64_t S, int64_t hd) { return (double)B * nh * S * S * hd; }

/* FP32 of the double sum Σ_d x[xo + d]·y[yo + d]. */
static float dot(const void *x, int64_t xo, const void *y, int64_t yo, int64_t n, f8_dtype dt)
{
    double acc = 0.0;
    for (int64_t d = 0; d < n; d++) acc += (double)f8i_hp_load(x, dt, xo + d) * f8i_hp_load(y, dt, yo + d);
    return (float)acc;
}

/* A forward's units: unit u is query row i of (sequence, head) u / S, the
 * long rows first so the last ones claimed are short. The FP8 chain's scales
 * are read once, after the current-scaling write. */
typedef struct fwd_job {
    const f8i_attn_fwd_args *a;
    int64_t G;
    team t;
    float dq, ss, ds, so, dso;     /* FP8 */
    float amax_s[F8I_CPU_MAX_WORKERS], amax_o[F8I_CPU_MAX_WORKERS]; /* FP8: each worker's */
} fwd_job;

static void forward_row(void *arg, int64_t u, int worker)
{
    const fwd_job *job = (const fwd_job *)arg;
    const f8i_attn_fwd_args *a = job->a;
    const int64_t S = a->seq, nh = a->n_head, hd = a->head_dim, i = S - 1 - u % S;
    const f8_dtype dt = a->dtype;
    const float c2 = a->scale_log2;
    const head_view w = view_of(u / S / nh, u / S % nh, S, nh, job->G, hd, dt);
    float *srow = job->t.rows[worker], *prow = srow + S; /* c·s is never formed: raw s, then p rounded to dt */
    float m = -INFINITY;
    for (int64_t j = 0; j <= i; j++) {
        srow[j] = dot(a->qkv, w.q + i * w.ld3, a->qkv, w.k + j * w.ld3, hd, dt);
        if (srow[j] > m) m = srow[j];
    }
    float l = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        const float p = exp2f((srow[j] - m) * c2);
        l += p;
        prow[j] = f8i_round_to(dt, p);
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < hd; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j <= i; j++) acc += (double)prow[j] * f8i_hp_load(a->qkv, dt, w.v + j * w.ld3 + d);
        const float yv = (float)acc * inv;
        f8i_hp_store(a->y, dt, w.y + i * w.ld1 + d, yv);
        if (a->o) f8i_hp_store(a->o, dt, w.y + i * w.ld1 + d, yv);
    }
    if (a->lse) a->lse[w.lse + i] = m + log2f(l) / c2;
}

static f8_status forward(f8_ctx *ctx, const f8i_attn_fwd_args *a)
{
    const int64_t B = a->batch, S = a->seq, nh = a->n_head;
    F8I_COUNT_LAUNCHES(ctx, 1);
    fwd_job job = {.a = a, .G = kv_heads(nh, a->n_kv_head)};
    job.t = team_of(a->rows, S, work_of(B, nh, S, a->head_dim), B * nh * S);
    f8i_cpu_parallel_run(forward_row, &job, B * nh * S, job.t.n);
    free(job.t.block);
    return F8_OK;
}

static float e4m3(float v) { return f8i_fp8_decode(f8i_fp8_encode(v, 0), 0); }

/* FP32 of the double sum Σ_d x[xo + d]·y[yo + d] over E4M3 codes. */
static float dot8(const uint8_t *x, int64_t xo, const uint8_t *y, int64_t yo, int64_t n)
{
    double acc = 0.0;
    for (int64_t d = 0; d < n; d++) acc += (double)f8i_fp8_decode(x[xo + d], 0) * f8i_fp8_decode(y[yo + d], 0);
    return (float)acc;
}

/* Max into an amax accumulator, NaN ignored. */
static void amax_into(float *acc, float v)
{
    if (fabsf(v) > *acc) *acc = fabsf(v);
}

static void fp8_forward_row(void *arg, int64_t u, int worker)
{
    fwd_job *job = (fwd_job *)arg;
    const f8i_attn_fwd_args *a = job->a;
    const int64_t S = a->seq, nh = a->n_head, hd = a->head_dim, i = S - 1 - u % S;
    const float c2 = a->scale_log2, dq = job->dq, ss = job->ss, ds = job->ds, so = job->so, dso = job->dso;
    const uint8_t *qkv = (const uint8_t *)a->qkv;
    const head_view w = view_of(u / S / nh, u / S % nh, S, nh, job->G, hd, F8_DTYPE_E4M3); /* GQA: its group's k, v */
    float *srow = job->t.rows[worker], *prow = srow + S, amax_s = 0.0f, amax_o = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        srow[j] = dot8(qkv, w.q + i * w.ld3, qkv, w.k + j * w.ld3, hd) * dq * dq;
        if (srow[j] > m) m = srow[j];
    }
    for (int64_t j = 0; j <= i; j++) {
        srow[j] = exp2f((srow[j] - m) * c2);
        l += srow[j];
    }
    for (int64_t j = 0; j <= i; j++) {
        const float pn = srow[j] / l;
        amax_into(&amax_s, pn);
        prow[j] = e4m3(pn * ss);
    }
    for (int64_t d = 0; d < hd; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j <= i; j++) acc += (double)prow[j] * f8i_fp8_decode(qkv[w.v + j * w.ld3 + d], 0);
        const float o = (float)acc * ds * dq;
        amax_into(&amax_o, o);
        const float yv = e4m3(o * so) * dso;
        if (a->o8) a->o8[w.y + i * w.ld1 + d] = f8i_fp8_encode(o * so, 0); /* kept for the FP8 backward */
        f8i_hp_store(a->y, F8_DTYPE_BF16, w.y + i * w.ld1 + d, yv);
        if (a->o) f8i_hp_store(a->o, F8_DTYPE_BF16, w.y + i * w.ld1 + d, yv);
    }
    if (a->lse) a->lse[w.lse + i] = m + log2f(l) / c2;
    /* the row's amaxes kept locally, so workers write their slots once a row */
    amax_into(&job->amax_s[worker], amax_s);
    amax_into(&job->amax_o[worker], amax_o);
}

static f8_status fp8_forward(f8_ctx *ctx, const f8i_attn_fwd_args *a)
{
    const int64_t B = a->batch, S = a->seq, nh = a->n_head;
    if (a->s_scale_now > 0.0f) *a->s_scale = a->s_scale_now, *a->s_scale_inv = 1.0f / a->s_scale_now; /* current scaling */
    fwd_job job = {.a = a, .G = kv_heads(nh, a->n_kv_head)};
    job.dq = *a->qkv_scale_inv, job.ss = *a->s_scale, job.ds = *a->s_scale_inv;
    job.so = *a->o_scale, job.dso = *a->o_scale_inv;
    F8I_COUNT_LAUNCHES(ctx, 1);
    job.t = team_of(a->rows, S, work_of(B, nh, S, a->head_dim), B * nh * S);
    f8i_cpu_parallel_run(fp8_forward_row, &job, B * nh * S, job.t.n);
    free(job.t.block);
    float amax_s = 0.0f, amax_o = 0.0f;
    for (int w = 0; w < job.t.n; w++) amax_into(&amax_s, job.amax_s[w]), amax_into(&amax_o, job.amax_o[w]);
    amax_into(a->s_amax, amax_s);
    amax_into(a->o_amax, amax_o);
    if (a->o8) *a->o8_scale_inv = job.dso;
    return F8_OK;
}

/* The backward's operands under either chain (attention.h): values of the
 * dtype (BF16 or FP32), or the FP8 backward chain's codes with their
 * scales: E4M3 qkv, dO (and dS8) in the gradient format, P8 in E4M3. */
typedef struct bwd_view {
    const f8i_attn_bwd_args *a; /* a->fp8 picks the chain, a->dtype is the high-precision one's */
    /* FP8 only: the gradient format, descales of qkv, dO, P8, dS8 and O8,
     * scales of S (P8) and dP (dS8), and the amaxes of dS and of the
     * gradient written (one unit's: each works on its own copy) */
    int e5m2;
    float dq, ddo, ds, dsdp, dso, ss, sdp;
    float amax_dp, amax_g;
} bwd_view;

static bwd_view bwd_view_of(const f8i_attn_bwd_args *a)
{
    bwd_view v = {0};
    v.a = a;
    if (!a->fp8) return v;
    v.e5m2 = a->grad_dtype == F8_DTYPE_E5M2;
    v.dq = *a->qkv_scale_inv, v.ddo = *a->do_scale_inv, v.ds = *a->s_scale_inv, v.dsdp = *a->dp_scale_inv;
    v.dso = a->o8 ? *a->o8_scale_inv : 1.0f;
    v.ss = *a->s_scale, v.sdp = *a->dp_scale;
    return v;
}

/* Element at of qkv, and of dO, as the chain reads it (FP8: the code's value, not descaled). */
static float qkv_at(const bwd_view *v, int64_t at)
{
    return v->a->fp8 ? f8i_fp8_decode(((const uint8_t *)v->a->qkv)[at], 0) : f8i_hp_load(v->a->qkv, v->a->dtype, at);
}

static float dy_at(const bwd_view *v, int64_t at)
{
    return v->a->fp8 ? f8i_fp8_decode(v->a->do8[at], v->e5m2) : f8i_hp_load(v->a->dy, v->a->dtype, at);
}

/* D of query row i: Σ_d dO·O (FP8: the codes' sum, descaled). */
static float d_row(const bwd_view *v, const head_view *w, int64_t i)
{
    const f8i_attn_bwd_args *a = v->a;
    if (!a->fp8) return dot(a->dy, w->y + i * w->ld1, a->o, w->y + i * w->ld1, w->hd, a->dtype);
    double acc = 0.0;
    for (int64_t d = 0; d < w->hd; d++) {
        const int64_t at = w->y + i * w->ld1 + d;
        const float o = a->o8 ? f8i_fp8_decode(a->o8[at], 0) : f8i_hp_load(a->o, F8_DTYPE_BF16, at);
        acc += (double)f8i_fp8_decode(a->do8[at], v->e5m2) * o;
    }
    return (float)acc * v->ddo * v->dso;
}

/* One pair (i, j): returns dS as the chain uses it (the dtype's rounding;
 * FP8: dS8's code value, not descaled) and sets *p to P likewise (FP8:
 * P8's). Under FP8 dS's amax is maxed into *amax_dp. */
static float pair_grad(const bwd_view *v, const head_view *w, int64_t i, int64_t j, float *p_out, float *amax_dp)
{
    const f8i_attn_bwd_args *a = v->a;
    if (!a->fp8) {
        const f8_dtype dt = a->dtype;
        const float s = dot(a->qkv, w->q + i * w->ld3, a->qkv, w->k + j * w->ld3, w->hd, dt);
        const float dp = dot(a->dy, w->y + i * w->ld1, a->qkv, w->v + j * w->ld3, w->hd, dt);
        const float p = exp2f((s - a->lse[w->lse + i]) * a->scale_log2);
        *p_out = f8i_round_to(dt, p);
        return f8i_round_to(dt, p * (dp - a->d[w->lse + i]) * a->scale);
    }
    const uint8_t *qkv = (const uint8_t *)a->qkv;
    const float s = dot8(qkv, w->q + i * w->ld3, qkv, w->k + j * w->ld3, w->hd) * v->dq * v->dq;
    double acc = 0.0;
    for (int64_t d = 0; d < w->hd; d++)
        acc += (double)f8i_fp8_decode(a->do8[w->y + i * w->ld1 + d], v->e5m2) * f8i_fp8_decode(qkv[w->v + j * w->ld3 + d], 0);
    const float dp = (float)acc * v->ddo * v->dq;
    const float p = exp2f((s - a->lse[w->lse + i]) * a->scale_log2);
    *p_out = e4m3(p * v->ss);
    const float ds = p * (dp - a->d[w->lse + i]) * a->scale;
    amax_into(amax_dp, ds);
    return f8i_fp8_decode(f8i_fp8_encode(ds * v->sdp, v->e5m2), v->e5m2);
}

/* One gradient element out, from its FP32 sum x (attention.h). The dtype
 * stores x. FP8: descaled by s1·s2 (in that order), its amax taken, then
 * dt(gd(x·sq)·dsq) under delayed scaling, dt(x) under current. */
static void put_grad(bwd_view *v, int64_t at, float x, float s1, float s2)
{
    const f8i_attn_bwd_args *a = v->a;
    if (!a->fp8) {
        f8i_hp_store(a->dqkv, a->dtype, at, x);
        return;
    }
    x = x * s1 * s2;
    amax_into(&v->amax_g, x);
    if (a->dqkv_scale) x = f8i_fp8_decode(f8i_fp8_encode(x * *a->dqkv_scale, v->e5m2), v->e5m2) * *a->dqkv_scale_inv;
    f8i_hp_store(a->dqkv, F8_DTYPE_BF16, at, x);
}

/* A backward's units, two passes: dq_row's unit u is query row i of
 * (sequence, head) u / S (long rows first), dkv_key's is key j = u % S of
 * (sequence, group) u / S (long keys first), once every D is written. A
 * unit works on its own copy of the view (its amaxes from 0) and maxes them
 * into its worker's. */
typedef struct bwd_job {
    bwd_view v;
    int64_t G;
    team t;
    float amax_dp[F8I_CPU_MAX_WORKERS], amax_g[F8I_CPU_MAX_WORKERS];
} bwd_job;

static f8_dtype bwd_vdt(const f8i_attn_bwd_args *a) { return a->fp8 ? F8_DTYPE_E4M3 : a->dtype; }

static void bwd_unit_done(bwd_job *job, const bwd_view *v, int worker)
{
    amax_into(&job->amax_dp[worker], v->amax_dp);
    amax_into(&job->amax_g[worker], v->amax_g);
}

/* D of row i, then dq row i over keys j <= i (its dS reads only that D). */
static void dq_row(void *arg, int64_t u, int worker)
{
    bwd_job *job = (bwd_job *)arg;
    bwd_view v = job->v;
    const f8i_attn_bwd_args *a = v.a;
    const int64_t S = a->seq, nh = a->n_head, hd = a->head_dim, i = S - 1 - u % S;
    const head_view w = view_of(u / S / nh, u / S % nh, S, nh, job->G, hd, bwd_vdt(a));
    float *prow = job->t.rows[worker], *dsrow = prow + S;
    a->d[w.lse + i] = d_row(&v, &w, i);
    for (int64_t j = 0; j <= i; j++) dsrow[j] = pair_grad(&v, &w, i, j, &prow[j], &v.amax_dp);
    for (int64_t d = 0; d < hd; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j <= i; j++) acc += (double)dsrow[j] * qkv_at(&v, w.k + j * w.ld3 + d);
        put_grad(&v, w.q + i * w.ld3 + d, (float)acc, v.dsdp, v.dq);
    }
    bwd_unit_done(job, &v, worker);
}

/* dk, dv row j of the group over its query heads (in order) and queries i >= j. */
static void dkv_key(void *arg, int64_t u, int worker)
{
    bwd_job *job = (bwd_job *)arg;
    bwd_view v = job->v;
    const f8i_attn_bwd_args *a = v.a;
    const int64_t S = a->seq, nh = a->n_head, hd = a->head_dim, G = job->G, group = nh / G, j = u % S;
    const int64_t b = u / S / G, g = u / S % G;
    const f8_dtype vdt = bwd_vdt(a);
    const head_view w0 = view_of(b, g * group, S, nh, G, hd, vdt);
    float *prow = job->t.rows[worker], *dsrow = prow + S;
    double dk[F8I_CPU_ATTN_HD_CHUNK], dv[F8I_CPU_ATTN_HD_CHUNK];
    for (int64_t d0 = 0; d0 < hd; d0 += F8I_CPU_ATTN_HD_CHUNK) {
        const int64_t n = hd - d0 < F8I_CPU_ATTN_HD_CHUNK ? hd - d0 : F8I_CPU_ATTN_HD_CHUNK;
        for (int64_t d = 0; d < n; d++) dk[d] = dv[d] = 0.0;
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
            const head_view w = view_of(b, h, S, nh, G, hd, vdt);
            float seen = 0.0f; /* the dq pass counted these dS already */
            for (int64_t i = j; i < S; i++) dsrow[i] = pair_grad(&v, &w, i, j, &prow[i], &seen);
            for (int64_t d = 0; d < n; d++) {
                for (int64_t i = j; i < S; i++) {
                    dk[d] += (double)dsrow[i] * qkv_at(&v, w.q + i * w.ld3 + d0 + d);
                    dv[d] += (double)prow[i] * dy_at(&v, w.y + i * w.ld1 + d0 + d);
                }
            }
        }
        for (int64_t d = 0; d < n; d++) {
            put_grad(&v, w0.k + j * w0.ld3 + d0 + d, (float)dk[d], v.dsdp, v.dq);
            put_grad(&v, w0.v + j * w0.ld3 + d0 + d, (float)dv[d], v.ds, v.ddo);
        }
    }
    bwd_unit_done(job, &v, worker);
}

/* Both chains in one loop order: D, then dq row by row over keys j <= i,
 * then dk, dv key by key over the group's query heads (in order) and
 * queries i >= j, one sum per element; each pair's P and dS recomputed
 * where used, as the GPU does. */
static f8_status backward(f8_ctx *ctx, const f8i_attn_bwd_args *a)
{
    const int64_t B = a->batch, S = a->seq, nh = a->n_head, G = kv_heads(nh, a->n_kv_head);
    bwd_job job = {.v = bwd_view_of(a), .G = G};
    F8I_COUNT_LAUNCHES(ctx, 1);
    job.t = team_of(a->rows, S, 4.0 * work_of(B, nh, S, a->head_dim), B * G * S);
    f8i_cpu_parallel_run(dq_row, &job, B * nh * S, job.t.n);
    f8i_cpu_parallel_run(dkv_key, &job, B * G * S, job.t.n);
    free(job.t.block);
    if (a->fp8) {
        float amax_dp = 0.0f, amax_g = 0.0f;
        for (int w = 0; w < job.t.n; w++) amax_into(&amax_dp, job.amax_dp[w]), amax_into(&amax_g, job.amax_g[w]);
        amax_into(a->dp_amax, amax_dp);
        amax_into(a->dqkv_amax, amax_g);
    }
    return F8_OK;
}

f8_status f8i_cpu_attn_fwd(f8_ctx *ctx, const f8i_attn_fwd_args *a) { return a->fp8 ? fp8_forward(ctx, a) : forward(ctx, a); }
f8_status f8i_cpu_attn_bwd(f8_ctx *ctx, const f8i_attn_bwd_args *a) { return backward(ctx, a); }
