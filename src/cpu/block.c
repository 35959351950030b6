/*
 * cpu/block.c — block scaling's two ops (backend.h): the block-scaled cast
 * and the block-scaled GEMM, the oracle a CUDA version will be held to.
 *
 * Design note. A tile's scale comes from its own amax, so the cast makes two
 * passes per tile (amax, then codes); the column-wise copy is quantized from
 * src again with the 128x1 tiles' scales, never transposed from the
 * row-wise codes. The GEMM keeps one FP32 partial sum per 128-deep K-block
 * and promotes it into the FP32 accumulator with the two operands' scales,
 * DeepGEMM's two-level accumulation, written out as plain loops. Built with
 * -ffp-contract=off like every CPU file: no product fuses into a sum.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/f8i.h"
#include "core/numerics.h"
#include "core/ops.h"
#include "cpu/element.h"

/* A tile's scale: f8i_current_scale with 1 as the fallback (backend.h). */
static inline float tile_scale(float amax, float scaled_max, int pow2)
{
    return f8i_current_scale(amax, 1.0f, scaled_max, pow2);
}

typedef struct cast_tally {
    uint64_t sat, flushed;
    float fmax;
    int e5m2;
} cast_tally;

static inline uint8_t encode(float v, float s, cast_tally *t)
{
    const uint8_t q = f8i_fp8_encode(v * s, t->e5m2);
    t->sat += fabsf(v * s) > t->fmax;
    t->flushed += v != 0.0f && (q & 0x7Fu) == 0;
    return q;
}

/* One tile: rows [r0, r1) x cols [c0, c1) of src. */
static float tile_amax(const f8i_cast_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    float m = 0.0f;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) m = fmaxf(m, fabsf(f8i_hp_load(a->src, a->src_dtype, r * a->cols + c)));
    return m;
}

/* 1x128 tiles along each row: out and its grid. */
static void rowwise(const f8i_cast_args *a, cast_tally *t, int count)
{
    const int64_t R = a->rows, C = a->cols, nb = (C + F8I_BLOCK - 1) / F8I_BLOCK;
    for (int64_t r = 0; r < R; r++)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t c0 = b * F8I_BLOCK, c1 = c0 + F8I_BLOCK < C ? c0 + F8I_BLOCK : C;
            const float s = tile_scale(tile_amax(a, r, r + 1, c0, c1), a->scaled_max, a->pow2);
            for (int64_t c = c0; c < c1; c++) {
                const float v = f8i_hp_load(a->src, a->src_dtype, r * C + c);
                const uint8_t q = count ? encode(v, s, t) : f8i_fp8_encode(v * s, t->e5m2);
                a->out[r * C + c] = q;
            }
            if (a->scale_inv) a->scale_inv[r * nb + b] = 1.0f / s;
        }
}

/* 128x1 tiles down each column, stored as out_t's 1x128 tiles. */
static void colwise(const f8i_cast_args *a, cast_tally *t, int count)
{
    const int64_t R = a->rows, C = a->cols, nb = (R + F8I_BLOCK - 1) / F8I_BLOCK;
    for (int64_t c = 0; c < C; c++)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t r0 = b * F8I_BLOCK, r1 = r0 + F8I_BLOCK < R ? r0 + F8I_BLOCK : R;
            const float s = tile_scale(tile_amax(a, r0, r1, c, c + 1), a->scaled_max, a->pow2);
            for (int64_t r = r0; r < r1; r++) {
                const float v = f8i_hp_load(a->src, a->src_dtype, r * C + c);
                const uint8_t q = count ? encode(v, s, t) : f8i_fp8_encode(v * s, t->e5m2);
                a->out_t[c * R + r] = q;
            }
            if (a->scale_inv_t) a->scale_inv_t[c * nb + b] = 1.0f / s;
        }
}

/* 128x128 blocks: codes and grid, both orientations from one scale. */
static void blockwise(const f8i_cast_args *a, cast_tally *t)
{
    const int64_t R = a->rows, C = a->cols;
    const int64_t nbr = (R + F8I_BLOCK - 1) / F8I_BLOCK, nbc = (C + F8I_BLOCK - 1) / F8I_BLOCK;
    for (int64_t br = 0; br < nbr; br++)
        for (int64_t bc = 0; bc < nbc; bc++) {
            const int64_t r0 = br * F8I_BLOCK, r1 = r0 + F8I_BLOCK < R ? r0 + F8I_BLOCK : R;
            const int64_t c0 = bc * F8I_BLOCK, c1 = c0 + F8I_BLOCK < C ? c0 + F8I_BLOCK : C;
            const float s = tile_scale(tile_amax(a, r0, r1, c0, c1), a->scaled_max, a->pow2);
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    const uint8_t q = encode(f8i_hp_load(a->src, a->src_dtype, r * C + c), s, t);
                    if (a->out) a->out[r * C + c] = q;
                    if (a->out_t) a->out_t[c * R + r] = q;
                }
            if (a->scale_inv) a->scale_inv[br * nbc + bc] = 1.0f / s;
            if (a->scale_inv_t) a->scale_inv_t[bc * nbr + br] = 1.0f / s;
        }
}

f8_status f8i_cpu_cast_block(f8_ctx *ctx, const f8i_cast_args *a)
{
    const int64_t R = a->rows, C = a->cols;
    if (R == 0 || C == 0) return F8_OK;
    if (a->dbias) {
        F8I_TRY(f8i_check_reduce_workspace(ctx, a->workspace, a->workspace_bytes, R, C, "block cast"));
    }
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (a->noop && *a->noop == 1.0f) return F8_OK;
    double *colsum = NULL;
    if (a->dbias) {
        colsum = (double *)calloc((size_t)C, sizeof(double));
        if (!colsum) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu block cast: out of host memory for dbias");
    }
    cast_tally t = {0, 0, a->out_dtype == F8_DTYPE_E5M2 ? 57344.0f : 448.0f, a->out_dtype == F8_DTYPE_E5M2};
    if (a->mode == F8I_SCALING_BLOCK_128X128) {
        blockwise(a, &t);
    } else {
        /* the statistics count each element once: from the row-wise codes,
         * or the column-wise ones when there are no row-wise */
        if (a->out) rowwise(a, &t, 1);
        if (a->out_t) colwise(a, &t, !a->out);
    }
    float amax = 0.0f;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            const float v = f8i_hp_load(a->src, a->src_dtype, r * C + c);
            amax = fmaxf(amax, fabsf(v));
            if (colsum) colsum[c] += v; /* double, as the cast's oracle */
        }
    if (a->amax) *a->amax = fmaxf(*a->amax, amax);
    if (a->stats) {
        a->stats[0] += (uint64_t)(R * C);
        a->stats[1] += t.sat;
        a->stats[2] += t.flushed;
    }
    if (colsum) {
        for (int64_t c = 0; c < C; c++) {
            const float prev = a->dbias_accumulate ? f8i_hp_load(a->dbias, a->dbias_dtype, c) : 0.0f;
            f8i_hp_store(a->dbias, a->dbias_dtype, c, prev + (float)colsum[c]);
        }
        free(colsum);
    }
    return F8_OK;
}

f8_status f8i_cpu_gemm_block(f8_ctx *ctx, const f8i_gemm_args *g)
{
    const int64_t m = g->m, n = g->n, k = g->k;
    if (m == 0 || n == 0) return F8_OK;
    if (k == 0 && !g->bias && (g->accumulate || g->c == g->d)) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int a_br = f8i_mode_block_rows(g->a_mode), b_br = f8i_mode_block_rows(g->b_mode);
    const uint8_t *a8 = (const uint8_t *)g->a, *b8 = (const uint8_t *)g->b;
    const int64_t nkb = (k + F8I_BLOCK - 1) / F8I_BLOCK;
    const int ea = g->a_dtype == F8_DTYPE_E5M2, eb = g->b_dtype == F8_DTYPE_E5M2;
    float *af = (float *)malloc((size_t)(k + 1) * sizeof(float));
    float *bf = (float *)malloc((size_t)(n * k + 1) * sizeof(float));
    if (!af || !bf) {
        free(af);
        free(bf);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu block gemm: out of host memory for %lldx%lldx%lld",
                         (long long)m, (long long)n, (long long)k);
    }
    for (int64_t i = 0; i < n * k; i++) bf[i] = f8i_fp8_decode(b8[i], eb);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t kk = 0; kk < k; kk++) af[kk] = f8i_fp8_decode(a8[i * k + kk], ea);
        const float *sa = g->a_scale_inv + (i / a_br) * nkb;
        for (int64_t j = 0; j < n; j++) {
            const float *sb = g->b_scale_inv + (j / b_br) * nkb, *bj = bf + j * k;
            float acc = 0.0f;
            for (int64_t kb = 0; kb < nkb; kb++) {
                const int64_t k0 = kb * F8I_BLOCK, k1 = k0 + F8I_BLOCK < k ? k0 + F8I_BLOCK : k;
                float p = 0.0f;
                for (int64_t kk = k0; kk < k1; kk++) p += af[kk] * bj[kk];
                acc += p * (sa[kb] * sb[kb]);
            }
            float v = acc;
            if (g->accumulate) v += f8i_hp_load(g->d, g->d_dtype, i * n + j);
            else if (g->c) v += f8i_hp_load(g->c, g->d_dtype, i * n + j); /* the addend (c may be d) */
            if (g->bias) v += f8i_hp_load(g->bias, g->bias_dtype, j);
            f8i_hp_store(g->d, g->d_dtype, i * n + j, v);
        }
    }
    free(af);
    free(bf);
    return F8_OK;
}
