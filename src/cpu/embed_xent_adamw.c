/*
 * cpu/embed_xent_adamw.c — the reference embedding, cross-entropy and AdamW step
 * (contracts in src/nn/embed_xent_adamw.h): plain loops, the oracle the CUDA backend is
 * compared against.
 *
 * Design note. Like the other CPU ops, the reductions pick the most accurate
 * fixed order they can afford and round once: the embedding gradient sums
 * each vocabulary row's dy rows in ascending t in FP32 (a host-sorted index
 * list gives the rows' groups), then adds the sum to the gradient once; the
 * softmax denominator and the gradient norm sum in double. Elementwise steps
 * are FP32 in the contract's order (the file is built with -ffp-contract=off),
 * and the AdamW element update is f8i_adamw_update, the very function the GPU
 * runs, between the moments' loads and stores of adamw_moments.h (FP8: a
 * block of F8_ADAMW_FP8_BLOCK at a time, as a warp of the GPU takes it). Temporaries are host mallocs inside the op (this is the oracle, not a
 * fast path; no backend memory is allocated).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/embed_xent_adamw.h"
#include "cpu/element.h"

static f8_status oom(f8_ctx *ctx, const char *what)
{
    return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu %s: out of host memory", what);
}

/* ---- embedding ---------------------------------------------------------- */

f8_status f8i_cpu_embedding_fwd(f8_ctx *ctx, const f8i_embedding_fwd_args *a)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int64_t C = a->channels;
    for (int64_t t = 0; t < a->n_tokens; t++) {
        const int32_t tok = a->tokens[t];
        const int valid = tok >= 0 && tok < a->vocab;
        const int64_t s = t % a->seq_len;
        for (int64_t c = 0; c < C; c++) {
            const float w = valid ? f8i_hp_load(a->wte, a->wte_dtype, (int64_t)tok * C + c) : 0.0f;
            f8i_hp_store(a->y, a->y_dtype, t * C + c, w + f8i_hp_load(a->wpe, a->wpe_dtype, s * C + c));
        }
    }
    return F8_OK;
}

static int cmp_u64(const void *x, const void *y)
{
    const uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

f8_status f8i_cpu_embedding_bwd(f8_ctx *ctx, const f8i_embedding_bwd_args *a)
{
    const int64_t T = a->n_tokens, C = a->channels;
    uint64_t *keys = (uint64_t *)malloc((size_t)T * sizeof *keys + 1); /* token << 32 | t, valid tokens only */
    float *acc = (float *)malloc((size_t)C * sizeof *acc + 1);
    if (!keys || !acc) {
        free(keys);
        free(acc);
        return oom(ctx, "embedding backward");
    }
    F8I_COUNT_LAUNCHES(ctx, 1);
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++)
        if (a->tokens[t] >= 0 && a->tokens[t] < a->vocab) keys[n++] = ((uint64_t)a->tokens[t] << 32) | (uint64_t)t;
    qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
    for (int64_t i = 0; i < n;) {
        const uint64_t v = keys[i] >> 32;
        memset(acc, 0, (size_t)C * sizeof *acc);
        for (; i < n && keys[i] >> 32 == v; i++) {
            const int64_t t = (int64_t)(keys[i] & 0xFFFFFFFFu);
            for (int64_t c = 0; c < C; c++) acc[c] += f8i_hp_load(a->dy, a->dy_dtype, t * C + c);
        }
        for (int64_t c = 0; c < C; c++) {
            const int64_t j = (int64_t)v * C + c;
            f8i_hp_store(a->dwte, a->dwte_dtype, j, f8i_hp_load(a->dwte, a->dwte_dtype, j) + acc[c]);
        }
    }
    if (a->dwpe) {
        const int64_t S = a->seq_len < T ? a->seq_len : T;
        for (int64_t s = 0; s < S; s++) {
            for (int64_t c = 0; c < C; c++) {
                float sum = 0.0f;
                for (int64_t t = s; t < T; t += a->seq_len) sum += f8i_hp_load(a->dy, a->dy_dtype, t * C + c);
                f8i_hp_store(a->dwpe, a->dwpe_dtype, s * C + c, f8i_hp_load(a->dwpe, a->dwpe_dtype, s * C + c) + sum);
            }
        }
    }
    free(keys);
    free(acc);
    return F8_OK;
}

/* ---- cross-entropy ------------------------------------------------------ */

f8_status f8i_cpu_cross_entropy(f8_ctx *ctx, const f8i_cross_entropy_args *a)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int64_t V = a->vocab, Vp = a->cols;
    for (int64_t r = 0; r < a->rows; r++) {
        const void *x = a->logits;
        const int64_t base = r * Vp;
        const int32_t y = a->targets[r];
        if (y < 0 || y >= V) {
            a->losses[r] = 0.0f;
            if (a->dlogits)
                for (int64_t c = 0; c < Vp; c++) f8i_hp_store(a->dlogits, a->dlogits_dtype, base + c, 0.0f);
            continue;
        }
        float m = -INFINITY;
        for (int64_t c = 0; c < V; c++) m = fmaxf(m, f8i_hp_load(x, a->logits_dtype, base + c));
        double sum = 0.0;
        for (int64_t c = 0; c < V; c++) sum += (double)expf(f8i_hp_load(x, a->logits_dtype, base + c) - m);
        const float s = (float)sum;
        const float xy = f8i_hp_load(x, a->logits_dtype, base + y); /* before dlogits may overwrite it */
        a->losses[r] = logf(s) - (xy - m);
        if (!a->dlogits) continue;
        for (int64_t c = 0; c < Vp; c++) {
            float d = 0.0f;
            if (c < V)
                d = (expf(f8i_hp_load(x, a->logits_dtype, base + c) - m) / s - (c == y ? 1.0f : 0.0f)) * a->grad_scale;
            f8i_hp_store(a->dlogits, a->dlogits_dtype, base + c, d);
        }
    }
    return F8_OK;
}

/* ---- AdamW -------------------------------------------------------------- */

/* The step's scalars, the same for every element. */
typedef struct adamw_hyper {
    float c, lr, b1, omb1, b2, omb2, bc1, bc2, eps;
    uint64_t sr_step; /* f8i_adamw_sr_step of the step being taken: FP8 moments' rounding bits */
} adamw_hyper;

static void adamw_element(const f8i_adamw_tensor *d, const adamw_hyper *h, int64_t i, float *m, float *v)
{
    float p = f8i_hp_load(d->param, d->param_dtype, i);
    f8i_adamw_update(&p, f8i_hp_load(d->grad, d->grad_dtype, i), m, v, h->c, h->lr, h->b1, h->omb1, h->b2, h->omb2,
                     h->bc1, h->bc2, h->eps, d->weight_decay);
    f8i_hp_store(d->param, d->param_dtype, i, p);
}

/* FP8 moments: per block, load every element's m and v, update, then choose
 * the block's scales from the new values' amax and store codes (rounded
 * stochastically, adamw_moments.h) and scale_invs. */
static void adamw_tensor_fp8(const f8i_adamw_tensor *d, const adamw_hyper *h)
{
    uint8_t *mc = (uint8_t *)d->m, *vc = (uint8_t *)d->v;
    for (int64_t b0 = 0, blk = 0; b0 < d->n; b0 += F8_ADAMW_FP8_BLOCK, blk++) {
        const int nb = d->n - b0 < F8_ADAMW_FP8_BLOCK ? (int)(d->n - b0) : F8_ADAMW_FP8_BLOCK;
        float m[F8_ADAMW_FP8_BLOCK], s[F8_ADAMW_FP8_BLOCK], am = 0.0f, as = 0.0f;
        for (int j = 0; j < nb; j++) {
            m[j] = f8i_adamw_m_from_fp8(mc[b0 + j], d->m_scale_inv[blk]);
            float v = f8i_adamw_v_from_fp8(vc[b0 + j], d->v_scale_inv[blk]);
            adamw_element(d, h, b0 + j, &m[j], &v);
            s[j] = sqrtf(v);
            am = fmaxf(am, fabsf(m[j]));
            as = fmaxf(as, s[j]);
        }
        const float sm = f8i_adamw_fp8_scale(am), sv = f8i_adamw_fp8_scale(as);
        for (int j = 0; j < nb; j++) {
            const int64_t at = d->first + b0 + j; /* the element's index in its parameter */
            mc[b0 + j] = f8i_adamw_fp8_encode_sr(m[j] * sm, f8i_adamw_sr_bits(at, h->sr_step, 0));
            vc[b0 + j] = f8i_adamw_fp8_encode_sr(s[j] * sv, f8i_adamw_sr_bits(at, h->sr_step, 1));
        }
        d->m_scale_inv[blk] = 1.0f / sm;
        d->v_scale_inv[blk] = 1.0f / sv;
    }
}

f8_status f8i_cpu_adamw_step(f8_ctx *ctx, const f8i_adamw_step_args *a)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    double sq = 0.0;
    for (int k = 0; k < a->n_tensors && a->mode != F8I_ADAMW_UPDATE; k++) {
        const f8i_adamw_tensor *d = &a->tensors[k];
        for (int64_t i = 0; i < d->n; i++) {
            const double g = f8i_hp_load(d->grad, d->grad_dtype, i);
            sq += g * g;
        }
    }
    if (a->mode == F8I_ADAMW_NORM) { /* a shard's part of the global sum */
        *a->sumsq = (float)sq;
        return F8_OK;
    }
    if (a->mode == F8I_ADAMW_UPDATE) sq = (double)*a->sumsq;
    f8i_adamw_state *s = a->state;
    const int64_t step = s->step, t = step + 1;
    const float norm = (float)sqrt(sq);
    adamw_hyper h;
    h.lr = f8i_adamw_lr(a->lr_max, a->lr_min, a->warmup_steps, a->total_steps, step);
    h.c = f8i_adamw_clip(a->grad_clip, norm);
    h.bc1 = f8i_adamw_bias_correction(a->beta1, t), h.bc2 = f8i_adamw_bias_correction(a->beta2, t);
    h.b1 = a->beta1, h.b2 = a->beta2, h.omb1 = 1.0f - a->beta1, h.omb2 = 1.0f - a->beta2, h.eps = a->eps;
    h.sr_step = f8i_adamw_sr_step(t);
    const int mdt = a->moments == F8_ADAMW_MOMENTS_BF16 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
    for (int k = 0; k < a->n_tensors; k++) {
        const f8i_adamw_tensor *d = &a->tensors[k];
        if (a->moments == F8_ADAMW_MOMENTS_FP8) {
            adamw_tensor_fp8(d, &h);
            continue;
        }
        for (int64_t i = 0; i < d->n; i++) { /* FP32 or BF16 moments: element by element */
            float m = f8i_hp_load(d->m, mdt, i), v = f8i_hp_load(d->v, mdt, i);
            adamw_element(d, &h, i, &m, &v);
            f8i_hp_store(d->m, mdt, i, m);
            f8i_hp_store(d->v, mdt, i, v);
        }
    }
    s->step = t;
    s->lr = h.lr;
    s->grad_norm = norm;
    s->clip = h.c;
    s->bc1 = h.bc1;
    s->bc2 = h.bc2;
    return F8_OK;
}
