/*
 * cpu/gemm.c — the reference GEMM of backend.h's contract.
 *
 * Design note: FP8 operands are decoded to their exact FP32 values (every FP8
 * value is an FP32 value, and a product of two is exact in FP32), the sum runs
 * in FP32, and the operands' scale_invs are applied once at the end, as the
 * tensor cores do. Both operands are first packed K-contiguous as FP32
 * (A as [m, k], B as Bt [k, n] so the inner loop streams rows), which also
 * resolves the trans flags. With BLAS_LIB set at build time the product goes
 * through sgemm_; otherwise an i-k-j loop. The epilogue adds, in FP32 and in
 * this order, the scale, C (D when accumulating, or the addend c) and the
 * bias, and rounds once. This is the oracle, not a fast path: it allocates
 * its packing buffers per call.
 */
#include <stdlib.h>
#include <string.h>

#include "core/f8i.h"
#include "core/rowwise.h"
#include "core/numerics.h"
#include "cpu/parallel.h"
#include "cpu/element.h"

#ifdef F8_HAVE_BLAS
/* Fortran BLAS, column-major; declared here so no cblas.h is needed. */
void sgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k, const float *alpha,
            const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c, const int *ldc);
#endif

/* out[r * ld_out + c] = X(r, c) for r < rows, c < cols, where X(r, c) is
 * stored [rows, cols] (trans == 0) or [cols, rows] (trans != 0). */
static void pack(float *out, const void *src, f8_dtype dt, int trans, int64_t rows, int64_t cols, int transpose_out)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = f8i_any_load(src, dt, trans ? c * rows + r : r * cols + c);
            if (transpose_out) out[c * rows + r] = v;
            else out[r * cols + c] = v;
        }
}


#ifndef F8_HAVE_BLAS
/* Rows [r0, r1) of acc = Ap · Bt with the i-k-j loop. Each row's sums run in
 * the same order whatever the row split, so threads change no bit. */
typedef struct rows_job {
    const float *ap, *bt;
    float *acc;
    int64_t r0, r1, n, k;
} rows_job;

/* x86-64: also built for AVX2 and AVX-512 and picked at load time; the
 * loop is elementwise in c (no reordered sums), so every clone gives the
 * same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void *rows_run(void *arg)
{
    const rows_job *j = (const rows_job *)arg;
    const int64_t n = j->n, k = j->k;
    int64_t i = j->r0;
    /* four rows at a time share each load of a B row */
    for (; i + 4 <= j->r1; i += 4) {
        float *r0 = j->acc + i * n, *r1 = r0 + n, *r2 = r1 + n, *r3 = r2 + n;
        const float *a = j->ap + i * k;
        for (int64_t kk = 0; kk < k; kk++) {
            const float a0 = a[kk], a1 = a[k + kk], a2 = a[2 * k + kk], a3 = a[3 * k + kk];
            const float *brow = j->bt + kk * n;
            for (int64_t c = 0; c < n; c++) {
                const float b = brow[c];
                r0[c] += a0 * b;
                r1[c] += a1 * b;
                r2[c] += a2 * b;
                r3[c] += a3 * b;
            }
        }
    }
    for (; i < j->r1; i++) {
        float *row = j->acc + i * n;
        for (int64_t kk = 0; kk < k; kk++) {
            const float av = j->ap[i * k + kk];
            const float *brow = j->bt + kk * n;
            for (int64_t c = 0; c < n; c++) row[c] += av * brow[c];
        }
    }
    return NULL;
}

/* The product over cpu/parallel.h's workers (up to 8, one per online core,
 * when it is big enough to pay for them): unit u is the u-th of `units`
 * equal row ranges, rows costing the same. */
typedef struct product_job {
    const float *ap, *bt;
    float *acc;
    int64_t m, n, k, units;
} product_job;

static void product_unit(void *arg, int64_t u, int worker)
{
    const product_job *p = (const product_job *)arg;
    (void)worker;
    rows_job j = {p->ap, p->bt, p->acc, p->m * u / p->units, p->m * (u + 1) / p->units, p->n, p->k};
    rows_run(&j);
}

static void product(const float *ap, const float *bt, float *acc, int64_t m, int64_t n, int64_t k)
{
    const int nt = f8i_cpu_workers((double)m * (double)n * (double)k, m / 2); /* two rows a thread at least */
    product_job p = {ap, bt, acc, m, n, k, nt};
    f8i_cpu_parallel_run(product_unit, &p, nt, nt);
}
#endif

/* Block-scaled operands' GEMM (block.c). */
f8_status f8i_cpu_gemm_block(f8_ctx *ctx, const f8i_gemm_args *g);

f8_status f8i_cpu_gemm(f8_ctx *ctx, const f8i_gemm_args *g)
{
    if (g->a_mode == F8I_SCALING_ROW || g->b_mode == F8I_SCALING_ROW) {
        const f8i_rowwise_gemm_args r = f8i_rowwise_gemm_from(g);
        if (g->a_mode != g->b_mode || g->a_trans || g->b_trans)
            return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "gemm: a row-wise operand needs a row-wise partner, TN");
        F8I_TRY(f8i_rowwise_gemm_check(ctx, &r));
        return f8i_cpu_gemm_rowwise(ctx, &r);
    }
    if (g->a_mode != F8I_SCALING_TENSOR || g->b_mode != F8I_SCALING_TENSOR) return f8i_cpu_gemm_block(ctx, g);
    const int64_t m = g->m, n = g->n, k = g->k;
    if (m == 0 || n == 0) return F8_OK;
    if (k == 0 && !g->bias && (g->accumulate || g->c == g->d)) return F8_OK; /* D += 0: nothing to write */
    F8I_COUNT_LAUNCHES(ctx, 1);
    float *acc = (float *)calloc((size_t)(m * n), sizeof(float));
    float *ap = (float *)malloc((size_t)(m * k + 1) * sizeof(float));
    float *bt = (float *)malloc((size_t)(k * n + 1) * sizeof(float));
    if (!acc || !ap || !bt) {
        free(acc);
        free(ap);
        free(bt);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu gemm: out of host memory for %lldx%lldx%lld", (long long)m,
                         (long long)n, (long long)k);
    }
    pack(ap, g->a, g->a_dtype, g->a_trans, m, k, 0); /* A(m, k) as [m, k] */
    pack(bt, g->b, g->b_dtype, g->b_trans, n, k, 1); /* B(n, k) as Bt [k, n] */
#ifdef F8_HAVE_BLAS
    if (k > 0) {
        /* Read column-major, acc (row-major [m, n]) is [n, m], Bt (row-major
         * [k, n]) is [n, k] and Ap (row-major [m, k]) is [k, m]: acc = Bt · Ap. */
        int in = (int)n, im = (int)m, ik = (int)k;
        float one = 1.0f, zero = 0.0f;
        sgemm_("N", "N", &in, &im, &ik, &one, bt, &in, ap, &ik, &zero, acc, &in);
    }
#else
    product(ap, bt, acc, m, n, k);
#endif
    const float alpha = f8i_dtype_is_fp8(g->a_dtype) ? *g->a_scale_inv * *g->b_scale_inv : 1.0f;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float v = acc[i * n + j];
            if (alpha != 1.0f) v = alpha * v;
            if (g->accumulate) v += f8i_any_load(g->d, g->d_dtype, i * n + j);
            if (g->c) v += f8i_any_load(g->c, g->d_dtype, i * n + j); /* the addend, before the one rounding */
            if (g->bias) v += f8i_any_load(g->bias, g->bias_dtype, j);
            f8i_hp_store(g->d, g->d_dtype, i * n + j, v);
        }
    free(acc);
    free(ap);
    free(bt);
    return F8_OK;
}
