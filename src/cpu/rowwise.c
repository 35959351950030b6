/*
 * cpu/rowwise.c — row-wise scaling's cast and GEMM (core/rowwise.h) on the
 * host: the oracle the CUDA versions are held to.
 *
 * Design note. A row's scale comes from its own amax, so each row (and,
 * for the column-wise copy, each column of src) is walked twice: amax, then
 * codes. The column-wise copy is quantized from src again with the
 * column's scale, never transposed from the row-wise codes, as block
 * scaling's 128x1 tiles are (cpu/block.c). The GEMM sums the exact products
 * of decoded codes in FP64, rounds the sum once to FP32 and applies the two
 * scales in FP32: the error is then the FP32 rounding alone, well inside the
 * bound a tensor-core sum is held to. Built with -ffp-contract=off like
 * every CPU file.
 */
#include <math.h>
#include <stdlib.h>

#include "core/numerics.h"
#include "core/rowwise.h"
#include "cpu/element.h"

/* One line of src: n elements from `first`, `step` apart (a row: step 1;
 * a column: step cols). */
typedef struct line {
    int64_t first, step, n;
} line;

static float line_scale(const f8i_rowwise_cast_args *a, line l)
{
    float m = 0.0f;
    for (int64_t e = 0; e < l.n; e++) m = fmaxf(m, fabsf(f8i_hp_load(a->src, a->src_dtype, l.first + e * l.step)));
    return f8i_current_scale(m, 1.0f, a->scaled_max, a->pow2);
}

/* Codes of line l into dst[0 .. n) with scale s; counts into tally[1..2]
 * when tally is set (saturated before the clamp, flushed to +-0). */
static void line_codes(const f8i_rowwise_cast_args *a, line l, float s, uint8_t *dst, uint64_t *tally)
{
    const int e5m2 = a->out_dtype == F8_DTYPE_E5M2;
    const float fmax = e5m2 ? 57344.0f : 448.0f;
    for (int64_t e = 0; e < l.n; e++) {
        const float v = f8i_hp_load(a->src, a->src_dtype, l.first + e * l.step), x = v * s;
        dst[e] = f8i_fp8_encode(x, e5m2);
        if (tally) {
            tally[1] += fabsf(x) > fmax;
            tally[2] += v != 0.0f && (dst[e] & 0x7Fu) == 0;
        }
    }
}

f8_status f8i_cpu_cast_rowwise(f8_ctx *ctx, const f8i_rowwise_cast_args *a)
{
    const int64_t R = a->rows, C = a->cols;
    if (R == 0 || C == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (a->noop && *a->noop == 1.0f) return F8_OK;
    uint64_t tally[3] = {0, 0, 0};
    for (int64_t r = 0; a->out && r < R; r++) {
        const line l = {r * C, 1, C};
        const float s = line_scale(a, l);
        line_codes(a, l, s, a->out + r * C, tally);
        a->scale_inv[r] = 1.0f / s;
    }
    /* the statistics count each element once: from out, else from out_t */
    for (int64_t c = 0; a->out_t && c < C; c++) {
        const line l = {c, C, R};
        /* col_amax_in: the column's amax is given (a fused kernel took it), the scale from it as line_scale's */
        const float s = a->col_amax_in ? f8i_current_scale(a->scale_inv_t[c], 1.0f, a->scaled_max, a->pow2)
                                       : line_scale(a, l);
        line_codes(a, l, s, a->out_t + c * R, a->out ? NULL : tally);
        a->scale_inv_t[c] = 1.0f / s;
    }
    if (a->amax) {
        float m = *a->amax;
        for (int64_t i = 0; i < R * C; i++) m = fmaxf(m, fabsf(f8i_hp_load(a->src, a->src_dtype, i)));
        *a->amax = m;
    }
    if (a->dbias) { /* column sums in double: an oracle more precise than any GPU order */
        for (int64_t c = 0; c < C; c++) {
            double sum = 0.0;
            for (int64_t r = 0; r < R; r++) sum += f8i_hp_load(a->src, a->src_dtype, r * C + c);
            const float prev = a->dbias_accumulate ? f8i_hp_load(a->dbias, a->dbias_dtype, c) : 0.0f;
            f8i_hp_store(a->dbias, a->dbias_dtype, c, prev + (float)sum);
        }
    }
    if (a->stats && (a->out || a->out_t)) {
        a->stats[0] += (uint64_t)(R * C);
        a->stats[1] += tally[1];
        a->stats[2] += tally[2];
    }
    return F8_OK;
}

float f8i_cpu_rowwise_fused_row(const float *u, int64_t n, f8_dtype out_dtype, float scaled_max, int pow2,
                                uint8_t *codes, float *amax, uint64_t *tally, float *col_amax)
{
    const int e5m2 = out_dtype == F8_DTYPE_E5M2;
    const float fmax = e5m2 ? 57344.0f : 448.0f;
    float m = 0.0f;
    for (int64_t e = 0; e < n; e++) m = fmaxf(m, fabsf(u[e]));
    for (int64_t e = 0; col_amax && e < n; e++) col_amax[e] = fmaxf(col_amax[e], fabsf(u[e]));
    const float s = f8i_current_scale(m, 1.0f, scaled_max, pow2);
    for (int64_t e = 0; e < n; e++) {
        const float x = u[e] * s;
        codes[e] = f8i_fp8_encode(x, e5m2);
        if (tally) {
            tally[1] += fabsf(x) > fmax;
            tally[2] += u[e] != 0.0f && (codes[e] & 0x7Fu) == 0;
        }
    }
    if (amax) *amax = fmaxf(*amax, m);
    return 1.0f / s;
}

f8_status f8i_cpu_gemm_rowwise(f8_ctx *ctx, const f8i_rowwise_gemm_args *g)
{
    const int64_t m = g->m, n = g->n, k = g->k;
    if (m == 0 || n == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int ea = g->a_dtype == F8_DTYPE_E5M2, eb = g->b_dtype == F8_DTYPE_E5M2;
    /* decoded B once (FP8 values are exact in FP32), a row of A at a time */
    float *bf = (float *)malloc((size_t)(n * k + 1) * sizeof(float));
    float *af = (float *)malloc((size_t)(k + 1) * sizeof(float));
    if (!bf || !af) {
        free(bf);
        free(af);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu rowwise gemm: out of host memory for %lldx%lldx%lld",
                         (long long)m, (long long)n, (long long)k);
    }
    for (int64_t i = 0; i < n * k; i++) bf[i] = f8i_fp8_decode(g->b[i], eb);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t kk = 0; kk < k; kk++) af[kk] = f8i_fp8_decode(g->a[i * k + kk], ea);
        for (int64_t j = 0; j < n; j++) {
            const float *bj = bf + j * k;
            double p = 0.0;
            for (int64_t kk = 0; kk < k; kk++) p += (double)af[kk] * (double)bj[kk];
            float v = k ? (float)p * (g->a_scale_inv[i] * g->b_scale_inv[j]) : 0.0f; /* k = 0: no scales read */
            if (g->c) v += f8i_hp_load(g->c, g->d_dtype, i * n + j); /* read before D's write: c may be d */
            if (g->bias) v += f8i_hp_load(g->bias, g->bias_dtype, j);
            f8i_hp_store(g->d, g->d_dtype, i * n + j, v);
        }
    }
    free(bf);
    free(af);
    return F8_OK;
}
