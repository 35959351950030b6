/*
 * rowwise.h — row-wise scaling's leaf ops (issue 30; torchao's and
 * torchtitan's "rowwise" recipe): one FP32 scale per row of each GEMM
 * operand along the contracted dimension (per token for activations and
 * gradients, per output channel for weights). Internal and not yet wired
 * into the operand core: these are the cast and the GEMM with plain
 * signatures, each with a CPU oracle (src/cpu/rowwise.c) and a CUDA version
 * (src/cuda/rowwise_cast.cu, src/cuda/gemm_rowwise.cu) that tests call
 * directly. dev/rowwise_plan.md says how they become one more scaling mode.
 *
 * The scale of one row (or column) with values v, v = (float)src:
 *   a        = max |v| over the row          (NaN ignored; inf counts)
 *   s        = scaled_max / a  if a is finite and a > 0, else 1.0f
 *              (an all-zero row, or one holding +-inf, keeps scale 1);
 *              FLT_MAX if the quotient is inf (a denormal amax);
 *              with pow2, rounded down to a power of two exactly (the
 *              mantissa bits cleared)
 *   codes    = fp8(v * s)                    (one FP32 multiply; cvt.rn.satfinite:
 *              RNE, +-inf and overflow saturate to +-max, NaN stays NaN,
 *              subnormal codes kept)
 *   scale_inv = 1.0f / s                     (IEEE division: what the GEMM multiplies by)
 * This is f8i_current_scale(a, 1.0f, scaled_max, pow2) of core/numerics.h,
 * the expression block scaling's tiles use, so a row is a 1 x cols tile.
 *
 * Beside torchao (torchao/float8/float8_utils.py, amax_to_scale with
 * round_scales_to_power_of_2): torchao computes fp8_max / max(a, 1e-12) in
 * FP64, rounded to FP32 — the same FP32 value as f8's FP32 division for
 * every a >= 1e-12 (a quotient of two floats rounds to the same float
 * either way) — and rounds down to a power of two as exp2(floor(log2(s)))
 * in FP32, which equals f8's exact round-down except for scales a few ulps
 * below a power of two 2^e with |e| >= 2, where FP32 log2 rounds up to e
 * and torchao's scale doubles (its codes may then saturate). Where f8
 * departs on purpose: an all-zero row (torchao: scale fp8_max·1e12, f8: 1;
 * the codes are zeros either way), a < 1e-12 (torchao caps the scale at
 * fp8_max·1e12; f8 keeps fp8_max / a, the FP8 range used in full), a row
 * holding inf (torchao: scale 0, the row's products NaN or 0; f8: scale 1,
 * inf saturates) and NaN (torchao: the row's scale is NaN; f8: the NaN
 * element alone is NaN).
 */
#ifndef F8_CORE_ROWWISE_H
#define F8_CORE_ROWWISE_H

#include "core/f8i.h"
#include "core/backend.h"
#include "core/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The row-wise cast of src [rows, cols] (FP32 or BF16), one launch:
 *   out [rows, cols], scale_inv [rows]: row r scaled by its own s(r), the
 *       row-wise operand (A of the forward GEMM: rows are tokens);
 *   out_t [cols, rows], scale_inv_t [cols]: srcᵀ with column c of src
 *       scaled by its own s(c), quantized from the high-precision values,
 *       never from out's codes (whose scales belong to other rows): the
 *       column-wise operand a dgrad or wgrad GEMM contracts over the rows.
 * Either orientation may be NULL (with its scale vector), not both unless
 * dbias is set. Also:
 *   *amax = max(*amax, max |v| over src)   (if amax; NaN ignored)
 *   stats[0] += rows·cols, stats[1] += the count of |v·s| > fp8_max
 *       (saturated, before the clamp), stats[2] += the count of v != 0 with
 *       a ±0 code (flushed), each element counted once: from its out code,
 *       or its out_t code when out is NULL (if stats; as f8i_cast_args)
 *   dbias[c] = (dbias_accumulate ? dbias[c] : 0) + Σ_r v   (if dbias: the
 *       bias gradient of a gradient cast, dbias_dtype FP32 or BF16; the sum's
 *       order is the backend's, as f8i_cast_args' dbias; workspace must
 *       then hold f8i_reduce_workspace_bytes(rows, cols), as f8i_cast_args'
 *       does: CUDA keeps per-row-block partial sums there, the CPU needs
 *       none but checks it, so both backends refuse the same calls)
 * If noop && *noop == 1.0f nothing at all is written. rows or cols may be 0
 * (nothing is written). CPU and CUDA agree bit for bit on every output but
 * dbias (within FP32 rounding of the sum).
 * col_amax_in (the column-only cast after a fused kernel, backend.h's
 * F8I_ROW_FUSED): scale_inv_t already holds, as float bits, each column's
 * a(c) = max |v| (NaN ignored), the kernel's col_amax of the same src, so
 * the cast does not measure them: it codes out_t from those amaxes and
 * writes scale_inv_t = 1/s(c) over them, the same bits as without the flag
 * (one read of src instead of two; with dbias too, summed in the same
 * order as without the flag, so the same dbias bits). Only with out NULL,
 * out_t set and no amax (the kernel recorded it); anything else is refused
 * with F8_ERR_INVALID_ARGUMENT by f8i_rowwise_cast_check. stats count
 * out_t's codes, as without it. */
typedef struct f8i_rowwise_cast_args {
    const void *src;      /* [rows, cols] */
    f8_dtype src_dtype;   /* FP32 or BF16 */
    int64_t rows, cols;
    f8_dtype out_dtype;   /* E4M3 (forward), E5M2 (gradients) */
    uint8_t *out;         /* [rows, cols] or NULL */
    float *scale_inv;     /* [rows], with out */
    uint8_t *out_t;       /* [cols, rows] or NULL */
    float *scale_inv_t;   /* [cols], with out_t */
    float scaled_max;     /* ldexpf(fp8_max(out_dtype), -margin), from the host */
    int pow2;             /* power-of-two scales (torchao's round_scales_to_power_of_2) */
    float *amax;          /* scalar or NULL */
    uint64_t *stats;      /* [3] or NULL */
    const float *noop;    /* scalar or NULL */
    void *dbias;          /* [cols] or NULL */
    f8_dtype dbias_dtype;
    int dbias_accumulate;
    void *workspace;      /* dbias only: f8i_reduce_workspace_bytes(rows, cols) bytes */
    size_t workspace_bytes;
    int col_amax_in;      /* scale_inv_t holds the column amaxes on entry (above) */
} f8i_rowwise_cast_args;

/* The row-wise GEMM, TN in row-major terms: A stored [m, k] with one scale
 * per row, B stored [n, k] with one per row (a weight's output channels, or
 * the column-wise copy of an activation or gradient), both FP8 (any mix of
 * E4M3/E5M2; cuBLASLt has no E5M2 x E5M2, which takes the fallback):
 *   P(i, j) = Σ_k A(i, k)·B(j, k)            (the sum's order and precision are
 *                                            the backend's: CPU FP64 rounded once
 *                                            to FP32; CUDA the tensor cores' FP32)
 *   D(i, j) = P(i, j)·(sa[i]·sb[j]) (+ C(i, j)) (+ bias[j])
 * with C the addend c [m, n] in D's dtype (a residual; c may be d itself:
 * then it is the accumulate) summed in FP32 with D rounded once. D FP32 or
 * BF16, bias FP32 or BF16 or NULL. m, n or k may be 0 (k = 0: D = C (+ bias),
 * or bias alone). split_accum: 1 for dgrad and wgrad (no fast accumulation),
 * 0 for the forward. Error per element against exact arithmetic, as a
 * multiple of Σ|a·b| (+|C| + |bias|): the CPU and the CUDA fallback kernel
 * 1e-5 (FP32 sums, the block GEMM's bound); cuBLASLt's tensor cores keep
 * fewer bits inside their sums (measured on an H100, k = 512: 3.8e-4 with
 * split accumulation, 1.0e-3 with fast accumulation); a BF16 D adds 2^-8,
 * and where an FP32 bias is added after cuBLASLt's matmul D is rounded
 * twice (as gemm.cu's per-tensor GEMM). */
typedef struct f8i_rowwise_gemm_args {
    int64_t m, n, k;
    const uint8_t *a;         /* [m, k] */
    f8_dtype a_dtype;
    const float *a_scale_inv; /* [m] */
    const uint8_t *b;         /* [n, k] */
    f8_dtype b_dtype;
    const float *b_scale_inv; /* [n] */
    void *d;                  /* [m, n] */
    f8_dtype d_dtype;         /* FP32 or BF16 */
    const void *c;            /* [m, n] in d_dtype, or NULL; may be d */
    const void *bias;         /* [n] or NULL */
    f8_dtype bias_dtype;      /* FP32 or BF16 */
    int split_accum;
} f8i_rowwise_gemm_args;

/* The backend table's CAST and GEMM ops dispatch mode ROW here
 * (f8i_cast_args.mode, f8i_gemm_args' a_mode = b_mode = ROW): the same
 * fields, in these ops' terms. The GEMM's accumulate is the addend C = D. */
static inline f8i_rowwise_cast_args f8i_rowwise_cast_from(const f8i_cast_args *c)
{
    f8i_rowwise_cast_args a = {c->src, c->src_dtype, c->rows, c->cols, c->out_dtype, c->out,
                               c->out ? c->scale_inv : NULL, c->out_t, c->out_t ? c->scale_inv_t : NULL,
                               c->scaled_max, c->pow2, c->amax, c->stats, c->noop, c->dbias, c->dbias_dtype,
                               c->dbias_accumulate, c->workspace, c->workspace_bytes, c->col_amax_in};
    return a;
}

static inline f8i_rowwise_gemm_args f8i_rowwise_gemm_from(const f8i_gemm_args *g)
{
    f8i_rowwise_gemm_args r = {g->m, g->n, g->k, (const uint8_t *)g->a, g->a_dtype, g->a_scale_inv,
                               (const uint8_t *)g->b, g->b_dtype, g->b_scale_inv, g->d, g->d_dtype,
                               g->accumulate ? g->d : g->c, g->bias, g->bias_dtype, g->split_accum};
    return r;
}

/* Check a and g as a caller above the backends must (dtypes, shapes,
 * pointers present with their orientation, a finite scaled_max > 0): F8_OK,
 * or an error on ctx naming the argument, changing nothing. */
f8_status f8i_rowwise_cast_check(f8_ctx *ctx, const f8i_rowwise_cast_args *a);
f8_status f8i_rowwise_gemm_check(f8_ctx *ctx, const f8i_rowwise_gemm_args *g);

/* The CPU oracle (src/cpu/rowwise.c): host memory. */
f8_status f8i_cpu_cast_rowwise(f8_ctx *ctx, const f8i_rowwise_cast_args *a);
f8_status f8i_cpu_gemm_rowwise(f8_ctx *ctx, const f8i_rowwise_gemm_args *g);

/* One row of backend.h's F8I_ROW_FUSED on the host (the CPU norm and
 * activation kernels call it): u [n] the row's values already rounded to the
 * high-precision dtype; writes codes [n] of u·s, returns scale_inv = 1/s,
 * *amax = max(*amax, max|u|), if tally, tally[1..2] += the row's saturated
 * and flushed counts and, if col_amax, col_amax[e] = max(col_amax[e], |u[e]|)
 * (the caller zeroed it before the first row). The arithmetic of
 * f8i_cpu_cast_rowwise's rows (and columns' amaxes), so the cast's bits. */
float f8i_cpu_rowwise_fused_row(const float *u, int64_t n, f8_dtype out_dtype, float scaled_max, int pow2,
                                uint8_t *codes, float *amax, uint64_t *tally, float *col_amax);

/* The CUDA versions (src/cuda/rowwise_cast.cu, gemm_rowwise.cu): device
 * memory of a CUDA ctx, on its stream. A CUDA=0 build has stubs that answer
 * F8_ERR_NO_DEVICE (src/cpu/no_cuda_rowwise.c).
 *
 * The GEMM takes a plan: cuBLASLt's descriptor, layouts and algorithm for
 * one key (m, n, k, dtypes, D's dtype, whether c and bias are set and
 * their dtypes, split_accum, alignments), built once with
 * f8i_cuda_rowwise_plan_create outside the step and passed to every call
 * of that key. A NULL plan takes the key's plan from the ctx's plan cache
 * (src/cuda/plan_cache.cuh: built on the key's first call, kept until the
 * ctx is destroyed). A plan whose key differs from g is F8_ERR_INVALID_ARGUMENT.
 * fallback_only (a test hook; 0 on every other path) builds a plan that
 * takes the own CUDA-core kernel whatever cuBLASLt would take.
 * last_path (a test hook, may be NULL) is set to 1 for the fallback kernel,
 * 2 for cuBLASLt's outer-vector matmul. */
typedef struct f8i_rowwise_plan f8i_rowwise_plan;
f8_status f8i_cuda_cast_rowwise(f8_ctx *ctx, const f8i_rowwise_cast_args *a);
/* The former one-launch cast (column-wise copy in stripes of 32 columns
 * over all rows; rowwise_cast.cu), the same contract bit for bit: kept for
 * bench_kernels' old-against-new line and as a second path in
 * test_cuda_rowwise, and taken by f8i_cuda_cast_rowwise for more than
 * 65,535 x 128 columns. dbias here needs no workspace. */
f8_status f8i_cuda_cast_rowwise_stripes(f8_ctx *ctx, const f8i_rowwise_cast_args *a);
/* col_amax[c] = max |src[r, c]| over the rows (NaN ignored) as float bits,
 * zeroed first: the column cast's amax pass alone, for a fused kernel that
 * cannot take the column maxima itself (F8I_ROW_FUSED's col_amax of rows
 * past its shared memory). src [rows, cols] FP32 or BF16; nothing for an
 * empty src; F8_ERR_UNSUPPORTED past the 2-D grid (65,535 x 128 columns). */
f8_status f8i_cuda_rowwise_col_amax(f8_ctx *ctx, const void *src, f8_dtype src_dtype, int64_t rows, int64_t cols,
                                    float *col_amax);
f8_status f8i_cuda_rowwise_plan_create(f8_ctx *ctx, const f8i_rowwise_gemm_args *g, int fallback_only,
                                       f8i_rowwise_plan **plan);
void f8i_cuda_rowwise_plan_destroy(f8i_rowwise_plan *plan);
f8_status f8i_cuda_gemm_rowwise(f8_ctx *ctx, const f8i_rowwise_gemm_args *g, f8i_rowwise_plan *plan, int *last_path);

#ifdef __cplusplus
}
#endif

#endif /* F8_CORE_ROWWISE_H */
