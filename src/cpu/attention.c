/*
 * cpu/attention.c — the reference causal self-attention (attention.h): plain
 * loops over sequences, heads and rows, the oracle the CUDA backend is
 * tested against.
 *
 * Design note. Each dot product is one double accumulator, rounded to FP32
 * where attention.h says the CUDA GEMM writes FP32 (scores, dP) and to the
 * dtype where it writes the dtype (P, y, dS, dq, dk, dv), so both backends
 * multiply the same values and differ only in summation order. The softmax
 * statistics are FP32 (max, expf, 1/l), its sum a double rounded to FP32.
 * The backward reads the saved P and recomputes nothing of the softmax.
 * Scratch: only s, as one [S, S] FP32 block per (b, h) (the backward's dS) or
 * one row (the forward's probabilities when nothing is saved).
 */
#include <math.h>
#include <stddef.h>

#include "attention.h"
#include "numerics.h"

static float load(const void *p, f8_dtype dt, int64_t i)
{
    return dt == F8_DTYPE_BF16 ? f8i_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void store(void *p, f8_dtype dt, int64_t i, float v)
{
    if (dt == F8_DTYPE_BF16)
        ((uint16_t *)p)[i] = f8i_bf16_from_float(v);
    else
        ((float *)p)[i] = v;
}

/* v as the dtype would store it. */
static float round_to(f8_dtype dt, float v) { return dt == F8_DTYPE_BF16 ? f8i_bf16_to_float(f8i_bf16_from_float(v)) : v; }

static f8_status forward(f8_ctx *ctx, const f8i_attn_fwd_args *a)
{
    const int64_t B = a->batch, S = a->seq, nh = a->n_head, hd = a->head_dim, C = nh * hd;
    const f8_dtype dt = a->dtype;
    F8I_COUNT_LAUNCHES(ctx, 1);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < nh; h++) {
            const int64_t bh = b * nh + h;
            for (int64_t i = 0; i < S; i++) {
                /* q at row t_i, column h·hd; k and v C and 2C further. */
                const int64_t qi = (b * S + i) * 3 * C + h * hd;
                float *prow = a->p ? NULL : a->s; /* the row when nothing is saved */
                float m = -INFINITY;
                for (int64_t j = 0; j <= i; j++) {
                    const int64_t kj = (b * S + j) * 3 * C + C + h * hd;
                    double acc = 0.0;
                    for (int64_t d = 0; d < hd; d++) acc += (double)load(a->qkv, dt, qi + d) * load(a->qkv, dt, kj + d);
                    const float x = (float)acc * a->scale;
                    a->s[j] = x; /* c·s[i, j] for this row */
                    if (x > m) m = x;
                }
                double l = 0.0;
                for (int64_t j = 0; j <= i; j++) l += expf(a->s[j] - m);
                const float inv = 1.0f / (float)l;
                for (int64_t j = 0; j < S; j++) {
                    const float pv = j <= i ? round_to(dt, expf(a->s[j] - m) * inv) : 0.0f;
                    if (prow)
                        prow[j] = pv; /* overwrites the x it was made from (j-th) only */
                    else
                        store(a->p, dt, (bh * S + i) * S + j, pv);
                }
                for (int64_t d = 0; d < hd; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j <= i; j++) {
                        const float pv = prow ? prow[j] : load(a->p, dt, (bh * S + i) * S + j);
                        acc += (double)pv * load(a->qkv, dt, (b * S + j) * 3 * C + 2 * C + h * hd + d);
                    }
                    store(a->y, dt, (b * S + i) * C + h * hd + d, (float)acc);
                }
            }
        }
    }
    return F8_OK;
}

static f8_status backward(f8_ctx *ctx, const f8i_attn_bwd_args *a)
{
    const int64_t B = a->batch, S = a->seq, nh = a->n_head, hd = a->head_dim, C = nh * hd;
    const f8_dtype dt = a->dtype;
    F8I_COUNT_LAUNCHES(ctx, 1);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < nh; h++) {
            const int64_t bh = b * nh + h;
            const void *qkv = a->qkv;
#define Q(i, d) load(qkv, dt, (b * S + (i)) * 3 * C + h * hd + (d))
#define K(i, d) load(qkv, dt, (b * S + (i)) * 3 * C + C + h * hd + (d))
#define V(i, d) load(qkv, dt, (b * S + (i)) * 3 * C + 2 * C + h * hd + (d))
#define DY(i, d) load(a->dy, dt, (b * S + (i)) * C + h * hd + (d))
#define P(i, j) load(a->p, dt, (bh * S + (i)) * S + (j))
            float *ds = a->s; /* [S, S]: dS[i, j] for j <= i */
            for (int64_t i = 0; i < S; i++) {
                double dot = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    double acc = 0.0;
                    for (int64_t d = 0; d < hd; d++) acc += (double)DY(i, d) * V(j, d);
                    ds[i * S + j] = (float)acc; /* dP, FP32 */
                    dot += (double)P(i, j) * ds[i * S + j];
                }
                const float dotf = (float)dot;
                for (int64_t j = 0; j <= i; j++) ds[i * S + j] = round_to(dt, P(i, j) * (ds[i * S + j] - dotf) * a->scale);
            }
            for (int64_t j = 0; j < S; j++) {
                for (int64_t d = 0; d < hd; d++) {
                    double dq = 0.0, dk = 0.0, dv = 0.0;
                    /* row j of dq sums over keys j' <= j; dk and dv of key j over queries i >= j */
                    for (int64_t jj = 0; jj <= j; jj++) dq += (double)ds[j * S + jj] * K(jj, d);
                    for (int64_t i = j; i < S; i++) {
                        dk += (double)ds[i * S + j] * Q(i, d);
                        dv += (double)P(i, j) * DY(i, d);
                    }
                    const int64_t row = (b * S + j) * 3 * C + h * hd + d;
                    store(a->dqkv, dt, row, (float)dq);
                    store(a->dqkv, dt, row + C, (float)dk);
                    store(a->dqkv, dt, row + 2 * C, (float)dv);
                }
            }
#undef Q
#undef K
#undef V
#undef DY
#undef P
        }
    }
    return F8_OK;
}

f8_status f8i_cpu_attention_op(f8_ctx *ctx, int kind, const void *args)
{
    switch (kind) {
    case F8I_ATTN_STATE_CREATE: *((const f8i_attn_state_args *)args)->state = NULL; return F8_OK;
    case F8I_ATTN_STATE_DESTROY: return F8_OK;
    case F8I_ATTN_FORWARD: return forward(ctx, (const f8i_attn_fwd_args *)args);
    case F8I_ATTN_BACKWARD: return backward(ctx, (const f8i_attn_bwd_args *)args);
    default: return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "train op %d: not an attention op", kind);
    }
}
