/*
 * backend.h — the backend table: the one seam between the objects every
 * backend shares (ctx, qtensor, scaling, modules) and the code that touches
 * memory (src/cpu, src/cuda).
 *
 * Design note. A module never knows which backend runs it: it fills an args
 * struct and calls f8i_op_<name>(ctx, &args) (core/ops.h), which is
 * ctx->be->run(ctx, F8I_OP_<KIND>, &args): every work op is a (kind, args)
 * pair (F8I_OP_LIST below), so graph capture records any op alike. Each op has ONE contract, written
 * here, that both backends implement; casts, transposes, amax and scale
 * updates must agree bit for bit (the CPU backend is the oracle the GPU tests
 * compare against), GEMMs within a tolerance. All pointers are backend memory
 * of the ctx; every scalar the step reads (scale, scale_inv, amax, noop flag)
 * is a pointer, never a host value, so the same calls work inside a captured
 * CUDA graph. Validation of user input happens above this table; ops may
 * assume well-formed arguments and return only resource/runtime errors.
 *
 * This header is included from C and from the CUDA backend's .cu files.
 */
#ifndef F8_BACKEND_H
#define F8_BACKEND_H

#include "f8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How an FP8 operand's codes are scaled: the mode travels with the operand
 * in every op's args (a_mode, b_mode of the GEMM; mode of the cast), and each
 * backend dispatches on it, so a new recipe is a new mode and its backend
 * cases, not a new op. 0 is per-tensor, so args zeroed then filled as
 * before keep their meaning; high-precision operands ignore the mode.
 *   TENSOR         one scale_inv (a scalar) for the whole tensor
 *   BLOCK_1X128    1x128 tiles along the rows: scale_inv is the grid
 *                  [rows, ceil(cols/128)] (f8i_block_grid, block_rows 1)
 *   BLOCK_128X128  128x128 blocks: grid [ceil(rows/128), ceil(cols/128)]
 *   ROW            one FP32 scale per row of the operand as stored for the
 *                  GEMM: scale_inv [rows] (the column-wise copy's
 *                  scale_inv_t [cols], one per column of the stored
 *                  tensor); core/rowwise.h has the cast and GEMM contracts
 * (Room for the next: MX 1x32 blocks.) */
typedef enum f8i_scaling_mode {
    F8I_SCALING_TENSOR = 0,
    F8I_SCALING_BLOCK_1X128 = 1,
    F8I_SCALING_BLOCK_128X128 = 2,
    F8I_SCALING_ROW = 3
} f8i_scaling_mode;

/* The scale_inv count of a [rows, cols] operand stored in mode m (its
 * column-wise copy's: f8i_mode_scales(m, cols, rows)). */
static inline int64_t f8i_mode_scales(f8i_scaling_mode m, int64_t rows, int64_t cols);

/* The rows of one scale tile of a block mode (1 or 128); 0 for TENSOR. */
static inline int f8i_mode_block_rows(f8i_scaling_mode m)
{
    return m == F8I_SCALING_BLOCK_1X128 ? 1 : m == F8I_SCALING_BLOCK_128X128 ? 128 : 0;
}

/* One FP8 cast of src [rows, cols] (FP32 or BF16), in one pass. mode
 * TENSOR (per-tensor scaling, delayed or current):
 *   v        = (float)src[r, c]
 *   out[r,c] = fp8(v * (*scale))            (FP32 multiply, no FMA; satfinite RNE)
 *   out_t[c,r] = the same code                (if out_t)
 *   *amax    = max(*amax, max |v|)           (if amax; NaN ignored; FP32 bits, an
 *                                            atomic max of non-negative floats)
 *   *scale_inv = 1.0f / *scale               (if scale_inv; IEEE division)
 *   dbias[c] = (dbias_accumulate ? dbias[c] : 0) + Σ_r v   (if dbias; dbias_dtype
 *                                            FP32 or BF16; sum order is backend's)
 * If noop && *noop == 1.0f nothing at all is written. rows or cols may be 0
 * (then only scale_inv is written). The block modes are the block-scaled
 * cast below (after F8I_BLOCK): scale is unused, scaled_max and pow2 set
 * each tile's scale, scale_inv and scale_inv_t are the grids of out and
 * out_t. */
typedef struct f8i_cast_args {
    const void *src;
    f8_dtype src_dtype;
    int64_t rows, cols;
    f8_dtype out_dtype;   /* E4M3 or E5M2 */
    uint8_t *out;         /* [rows, cols] or NULL */
    uint8_t *out_t;       /* [cols, rows] or NULL */
    const float *scale;   /* scalar */
    float *amax;          /* scalar or NULL */
    float *scale_inv;     /* scalar or NULL */
    void *dbias;          /* [cols] or NULL */
    f8_dtype dbias_dtype;
    int dbias_accumulate;
    const float *noop;    /* scalar or NULL */
    void *workspace;      /* dbias only: f8i_reduce_workspace_bytes(rows, cols) bytes */
    size_t workspace_bytes;
    uint64_t *stats;      /* FP8 telemetry [3] or NULL: += rows·cols, += the count of
                             |v * scale| > fp8_max (saturated: the product before the
                             clamp), += the count of v != 0 whose code is +-0 (flushed) */
    f8i_scaling_mode mode; /* TENSOR, or a block mode (below) */
    float scaled_max;     /* block modes: ldexpf(fp8_max, -margin), from the host */
    int pow2;             /* block modes: power-of-two tile scales */
    float *scale_inv_t;   /* block modes: out_t's grid, or NULL (ROW: out_t's [cols]) */
    int col_amax_in;      /* ROW only (core/rowwise.h's f8i_rowwise_cast_args): scale_inv_t
                             already holds src's column amaxes (a fused kernel's col_amax,
                             F8I_ROW_FUSED below); other modes do not read it */
} f8i_cast_args;

/* GEMM in row-major terms, for per-tensor operands (a_mode = b_mode =
 * TENSOR; block-scaled operands are the block GEMM below, the same op):
 * D[m, n] = alpha · Σ_k A(m, k) · B(n, k) (+ C) (+ bias[n]),
 * with C = D if accumulate, C = c[m, n] if c is set, else no C, where
 *   A(m, k) = a[m * k + k']  (a_trans == 0: a stored [m, k])  or a[k * m + m'] (a_trans: [k, m])
 *   B(n, k) = b[n * k + k']  (b_trans == 0: b stored [n, k])  or b[k * n + n'] (b_trans: [k, n])
 *   alpha   = (*a_scale_inv) · (*b_scale_inv) for FP8 operands, 1 otherwise.
 * A and B have the same dtype class: both FP8 (E4M3/E5M2, any mix), both FP32,
 * or both BF16. FP8 operands come with a_trans = b_trans = 0 ("TN"). D is FP32
 * or BF16; bias (FP32 or BF16) may be NULL. split_accum: for FP8, 1 asks for
 * the precise (non fast-accumulation) mode used by dgrad and wgrad. m, n or
 * k may be 0 (k = 0 gives D = C (+ bias), or D = bias without C).
 * c: an addend (the residual a module's output takes, f8_module_forward_add)
 * with D's dtype and layout [m, n]: the sum is in FP32 and D is rounded once,
 * in the same place as the accumulate (alpha·ΣAB + C, then + bias). c may be
 * d itself (then it is the accumulate) but must not overlap D partly, nor A
 * or B; accumulate must be 0 when c is set.
 * workspace: scratch the backend may use to run an FP8 shape outside the
 * tensor-core rule (k % 16, n % 16; below) at tensor-core speed, by
 * zero-padded copies of the operands (and of D): f8i_gemm_workspace_bytes
 * bytes, 16-byte aligned, or NULL. Padding adds exact zeros to each sum, so
 * the result is the unpadded math. Without it such a shape still runs,
 * slowly; the CPU backend never needs it. */
typedef struct f8i_gemm_args {
    int64_t m, n, k;
    const void *a;
    f8_dtype a_dtype;
    int a_trans;
    const float *a_scale_inv;
    const void *b;
    f8_dtype b_dtype;
    int b_trans;
    const float *b_scale_inv;
    void *d;
    f8_dtype d_dtype;
    int accumulate;
    const void *bias;
    f8_dtype bias_dtype;
    int split_accum;
    void *workspace;      /* f8i_gemm_workspace_bytes(&args) bytes, or NULL */
    size_t workspace_bytes;
    const void *c;        /* [m, n] in d_dtype, the addend C, or NULL (see above) */
    f8i_scaling_mode a_mode, b_mode; /* TENSOR (both), or the block GEMM's modes */
} f8i_gemm_args;

/* The one sizing formula of f8i_gemm_args' workspace (0 for the block
 * GEMM, which takes none); it reads only m, n, k, a_dtype, a_mode, d_dtype, accumulate, bias_dtype and whether bias and c are set
 * (not the pointers, so a layout can measure before it places). An addend c
 * counts as accumulate: a backend may run such a call as D = C, then
 * D += alpha·ΣAB, the padded path's way (the CUDA backend does). The FP8 rule it
 * pads to is cuBLASLt's for TN FP8: k % 16 == 0 and n % 16 == 0 (cuBLASLt's
 * M; the documented n·sizeof(D) % 16 is not enough for FP8, whose heuristic
 * asks M % 16), m free. 0 for non-FP8 GEMMs and for shapes inside the rule,
 * which cost nothing. Otherwise, with k16 and n16 = k and n rounded up to
 * 16, in this order, each rounded up to 256 bytes:
 *   A padded [m, k16]            when k is off the rule
 *   B padded [n16, k16]          when k is; else, n being off the rule,
 *                                [16, k] (its last rows, zeros below: the
 *                                rest is read in place) if n > 16, else
 *                                [n16, k]
 *   D: when n is off the rule, either the split (D's rows are 16-byte
 *   aligned, n·sizeof(D) % 16 == 0 and n > 16, and the bias is absent or
 *   BF16: the GEMM writes columns [0, n & ~15) of D in place) with a
 *   [m, 16] FP32 tail, or a whole padded D [m, n16]: FP32 when
 *   accumulating, when D is FP32 or with an FP32 bias, else BF16; then also
 *   a padded BF16 bias [n16] when there is one and no accumulate.
 * A backend that meets operands it must pad beyond this (an operand pointer
 * not 16-byte aligned) may run such a call its slow way. */
static inline size_t f8i_gemm_workspace_bytes(const f8i_gemm_args *g)
{
    const int fp8 = g->a_dtype == F8_DTYPE_E4M3 || g->a_dtype == F8_DTYPE_E5M2;
    if (!fp8 || g->a_mode != F8I_SCALING_TENSOR || g->m <= 0 || g->n <= 0 || g->k <= 0) return 0;
    const int pad_k = g->k % 16 != 0, pad_d = g->n % 16 != 0;
    if (!pad_k && !pad_d) return 0;
    const size_t m = (size_t)g->m, k = (size_t)g->k, n = (size_t)g->n, ds = g->d_dtype == F8_DTYPE_FP32 ? 4 : 2;
    const size_t k16 = (k + 15) / 16 * 16, n16 = (n + 15) / 16 * 16;
    const int acc = g->accumulate || g->c;
    const int split = pad_d && n > 16 && (n * ds) % 16 == 0 && (!g->bias || g->bias_dtype == F8_DTYPE_BF16);
    const int fuse = pad_d && !split && g->bias && g->bias_dtype == F8_DTYPE_BF16 && !acc;
    const size_t pe = (acc || (g->bias && !fuse) || ds == 4) ? 4 : 2;
    size_t b = pad_k ? (m * k16 + 255u) & ~(size_t)255u : 0;
    b += ((pad_k ? n16 * k16 : n > 16 ? 16 * k : n16 * k) + 255u) & ~(size_t)255u;
    if (split) b += (m * 16 * 4 + 255u) & ~(size_t)255u;
    if (pad_d && !split) b += (m * n16 * pe + 255u) & ~(size_t)255u;
    if (fuse) b += (n16 * 2 + 255u) & ~(size_t)255u;
    return b;
}

/* The fused delayed-scaling update over `count` slots (columns) of one
 * direction. history is [L, ld] (row-major, row 0 = current accumulators),
 * scale and scale_inv are [ld]; the columns are 0..count-1 or cols[0..count). Per column, exactly as f8.h's
 * f8_ctx_update_scales says, with scale = scaled_max / amax (scaled_max =
 * ldexpf(fp8_max, -margin), precomputed on the host), the FLT_MAX clamp and
 * scale_inv = 1.0f / scale. max over the window uses fmaxf from 0. */
typedef struct f8i_scale_update_args {
    float *history;
    int64_t ld;
    int history_len;
    int count;
    float *scale;
    float *scale_inv;
    float scaled_max;
    f8_amax_algo algo;
    const int32_t *cols; /* (count) backend memory: update only these columns of
                            history/scale/scale_inv (ld wide); NULL = columns 0..count-1 */
} f8i_scale_update_args;

/* Current scaling's amax pass (F8_RECIPE_CURRENT), one op before the cast it
 * serves: over src [count] (FP32 or BF16),
 *   a          = max |src[i]|   (NaN ignored; 0 when count is 0)
 *   s          = scaled_max / a if a is finite and a > 0, else *scale (kept);
 *                FLT_MAX if s is inf; with pow2, s's mantissa bits cleared
 *   *scale     = s;  *scale_inv = 1.0f / s      (the slot's; IEEE division)
 *   *amax      = max(*amax, a)                  (if amax: the step's record)
 * all computed on the device (no host read). If noop && *noop == 1.0f
 * nothing is written. The cast that follows reads *scale. */
typedef struct f8i_amax_scale_args {
    const void *src;
    f8_dtype src_dtype;
    int64_t count;
    float scaled_max;     /* ldexpf(fp8_max, -margin), from the host */
    int pow2;
    float *scale;         /* scalar, read (fallback) and written */
    float *scale_inv;     /* scalar or NULL */
    float *amax;          /* scalar or NULL */
    const float *noop;    /* scalar or NULL */
} f8i_amax_scale_args;

/* FP8 telemetry's step boundary, for columns 0..count-1 of one direction:
 * snap_f[2j] = amax[j] (history row 0), snap_f[2j+1] = scale[j],
 * snap_c[3j + k] = live[3j + k], then live[3j + k] = 0. Runs before the
 * direction's scale update, so it sees the step's amax and the scale the
 * step cast with. */
typedef struct f8i_telemetry_snap_args {
    const float *amax;    /* (count) history row 0 */
    const float *scale;   /* (count) */
    uint64_t *live;       /* (count, 3) */
    float *snap_f;        /* (count, 2) */
    uint64_t *snap_c;     /* (count, 3) */
    int count;
} f8i_telemetry_snap_args;

/* The workspace an op that reduces over rows (cast's and act_bwd's dbias,
 * norm_bwd's dgamma/dbeta) takes in its args: one FP32 per column per 16-row
 * group, twice, rounded up. The one sizing formula: every backend needs at
 * most this (the CUDA tile cast writes one partial row per 128-row tile,
 * cast_tile.cuh; the norm backward two per block of >= 16 rows, norm_bwd.cu;
 * the CPU column sums one double per column), each checks it before any
 * work and fails with F8_ERR_STATE when the args give less. */
static inline size_t f8i_reduce_workspace_bytes(int64_t rows, int64_t cols)
{
    size_t b = (size_t)((rows + 15) / 16) * (size_t)cols * 2 * sizeof(float) + 512;
    return (b + 255u) & ~(size_t)255u;
}

/* Norm forward of x [rows, cols] (FP32 or BF16), statistics in FP32:
 *   LayerNorm (rms == 0): mu = mean_c x, var = mean_c (x - mu)², rsigma = 1/sqrtf(var + eps),
 *                         v = (x - mu) · rsigma · g + beta
 *   RMSNorm   (rms != 0): rsigma = 1/sqrtf(mean_c x² + eps), v = x · rsigma · g
 *   g = zero_centered ? 1 + gamma : gamma; gamma, beta [cols] in param_dtype (beta unused for RMS).
 * y [rows, cols]: y_dtype FP32/BF16 stores v; E4M3/E5M2 stores fp8(v · *scale) with
 * *amax = max(*amax, max |v|) and *scale_inv = 1 / *scale, as the cast does.
 * mu (LayerNorm) and rsigma [rows] FP32 are written for the backward (either may be NULL).
 * With FP8 y, stats (if not NULL) counts the codes as f8i_cast_args.stats says
 * (telemetry inside the fused cast: no extra pass over y).
 * rows may be 0 (then only scale_inv is written for FP8 y). Sums are in FP32 in an
 * order each backend picks: backends agree within a tolerance, not bit for bit;
 * a re-run on the same backend gives the same bits. */
typedef struct f8i_norm_fwd_args {
    const void *x;
    f8_dtype x_dtype;
    int64_t rows, cols;
    const void *gamma, *beta;
    f8_dtype param_dtype;
    int rms, zero_centered;
    float eps;
    void *y;
    f8_dtype y_dtype;
    const float *scale; /* FP8 y only */
    float *amax;        /* FP8 y only, may be NULL */
    float *scale_inv;   /* FP8 y only, may be NULL */
    float *mu, *rsigma;
    uint64_t *stats;    /* FP8 y only: telemetry [3] or NULL, counted as the cast counts */
    /* Row-wise scaling fused into the kernel (mode ROW; F8I_ROW_FUSED below) */
    f8i_scaling_mode mode; /* TENSOR (above) or ROW */
    float scaled_max;   /* ROW: ldexpf(fp8_max(y_dtype), -margin), from the host */
    int pow2;           /* ROW: power-of-two scales */
    void *y_hp;         /* ROW: u [rows, cols] in hp_dtype, or NULL */
    f8_dtype hp_dtype;  /* ROW: FP32 or BF16, the dtype v is rounded to before its scale */
    float *col_amax;    /* ROW: [cols] max |u| of each column (F8I_ROW_FUSED), or NULL */
} f8i_norm_fwd_args;

/* F8I_ROW_FUSED: the row-wise cast (core/rowwise.h, out only) fused into the
 * norm forward and the activation forward and backward (mode ROW, FP8
 * output), so that no kernel reads their output back for it. Each output
 * value v (the norm's or the activation's; d of the backward) is first
 * rounded to the high-precision dtype (hp_dtype; dx_dtype in the backward):
 * u = (float)(hp_dtype)v, the value the unfused path stores and its cast
 * reads. Then, row r by itself (a token row: the kernel holds it whole),
 * exactly the row-wise cast of u:
 *   a(r)         = max |u| over row r      (NaN ignored)
 *   s(r)         = f8i_current_scale(a(r), 1.0f, scaled_max, pow2)
 *   y[r, c]      = fp8(u · s(r))            (FP32 multiply; satfinite RNE)
 *   scale_inv[r] = 1.0f / s(r)              ([rows]: one per row, not a scalar)
 *   *amax        = max(*amax, a(r))         (if amax: the slot's record)
 *   stats        += as the cast counts the codes of y (if stats)
 *   y_hp (dx)    = u                         (if not NULL)
 *   col_amax[c]  = max |u| over column c    (if col_amax: [cols], the backward's
 *                                            cols_in; NaN ignored, inf counts; the
 *                                            buffer's old contents are not read)
 * scale is not read. Codes, scale_inv, amax and stats are then bit for bit
 * those of f8i_rowwise_cast_args on u with out = y: the unfused path's (u
 * stored, then cast). What needs whole columns (the column-wise copy out_t
 * or y_t, and dbias) is not fused: the caller casts u after, with out NULL
 * (the activation backward's out_t and dbias must be NULL here, the
 * forward's y_t too). col_amax is that cast's first half: the column amaxes
 * it would measure by reading u again, as float bits (max is exact in any
 * order, so bit for bit). The backend zeroes the buffer and takes the maxima
 * in the same kernels, all in stream order before the next op (no
 * allocation, no sync: graph-legal); the caller passes the column-wise
 * copy's scale_inv_t and casts with col_amax_in (core/rowwise.h), which
 * codes the copy from those amaxes and overwrites them with 1/s. rows or
 * cols 0: nothing is written (col_amax neither: that cast writes nothing
 * then). */

/* Norm backward, with xhat = (x - mu)·rsigma (LayerNorm) or x·rsigma (RMS) and
 * gdy = g · dy (g as above), per row:
 *   LayerNorm: dx = rsigma · (gdy - mean_c(gdy) - xhat · mean_c(gdy · xhat))
 *   RMSNorm:   dx = rsigma · (gdy - xhat · mean_c(gdy · xhat))
 *   dgamma[c] (+)= Σ_rows dy · xhat;  dbeta[c] (+)= Σ_rows dy (LayerNorm; dbeta may be NULL)
 * dy, x FP32/BF16 [rows, cols]; dx FP32/BF16 (may be NULL); dgamma/dbeta in
 * param_dtype, accumulated when accumulate != 0 (else overwritten). With
 * dgamma or dbeta, workspace must hold f8i_reduce_workspace_bytes(rows, cols).
 * dx_accumulate != 0: dx (+)= the value above: the FP32 dx of the formula
 * plus dx as it was (read in dx_dtype), rounded once (f8_module_backward_add:
 * the residual's gradient joins in the store). dx must not overlap dy or x. */
typedef struct f8i_norm_bwd_args {
    const void *dy;
    f8_dtype dy_dtype;
    const void *x;
    f8_dtype x_dtype;
    int64_t rows, cols;
    const float *mu, *rsigma;
    const void *gamma;
    f8_dtype param_dtype;
    int rms, zero_centered;
    void *dx;
    f8_dtype dx_dtype;
    void *dgamma, *dbeta;
    int accumulate;       /* dgamma, dbeta */
    void *workspace;      /* f8i_reduce_workspace_bytes(rows, cols) bytes */
    size_t workspace_bytes;
    int dx_accumulate;    /* dx += (else dx =) */
} f8i_norm_bwd_args;

/* Activation forward: x [rows, cols_in] → v [rows, cols], cols_in = cols, or
 * 2·cols for the gated ones (x = [a | b] along each row; v = act(a)·b).
 * f8.h's f8_activation gives each formula (GELU in the tanh form). y_dtype
 * FP32/BF16 stores v; FP8 stores fp8(v · *scale) with amax and scale_inv as
 * the cast (and stats, the cast's telemetry counts, if not NULL), and, if
 * y_t, the same codes transposed (y_t[c, r] = y[r, c]: the
 * operand fc2's wgrad reads, so no separate transpose is needed; y may then
 * be NULL). Transcendentals differ between libm and CUDA: a tolerance. */
typedef struct f8i_act_fwd_args {
    f8_activation act;
    const void *x;
    f8_dtype x_dtype;
    int64_t rows, cols; /* cols of the output */
    void *y;
    f8_dtype y_dtype;
    uint8_t *y_t;       /* FP8 y only: the same codes transposed [cols, rows], or NULL */
    const float *scale;
    float *amax;
    float *scale_inv;
    uint64_t *stats;    /* FP8 y only: telemetry [3] or NULL, counted as the cast counts */
    f8i_scaling_mode mode; /* TENSOR, or ROW (F8I_ROW_FUSED above; y_t NULL) */
    float scaled_max;   /* ROW */
    int pow2;           /* ROW */
    void *y_hp;         /* ROW: u [rows, cols] in hp_dtype, or NULL */
    f8_dtype hp_dtype;  /* ROW: FP32 or BF16 */
    float *col_amax;    /* ROW: [cols] max |u| of each column (F8I_ROW_FUSED), or NULL */
} f8i_act_fwd_args;

/* Activation backward: d [rows, cols_in] = ∂(act)/∂x · dy, dy [rows, cols]:
 *   plain: d = act'(x) · dy;  gated: d_a = act'(a)·b·dy, d_b = act(a)·dy.
 * Outputs, any subset: dx (FP32/BF16 [rows, cols_in]) stores d; and the fused
 * cast of d exactly as f8i_cast_args says (out [rows, cols_in], out_t
 * [cols_in, rows], *amax, *scale_inv, stats, dbias [cols_in] with dbias_accumulate;
 * with dbias, workspace must hold f8i_reduce_workspace_bytes(rows, cols_in)). */
typedef struct f8i_act_bwd_args {
    f8_activation act;
    const void *x;
    f8_dtype x_dtype;
    const void *dy;
    f8_dtype dy_dtype;
    int64_t rows, cols; /* cols of dy */
    void *dx;
    f8_dtype dx_dtype;
    uint8_t *out, *out_t;
    f8_dtype out_dtype;
    const float *scale;
    float *amax;
    float *scale_inv;
    void *dbias;
    f8_dtype dbias_dtype;
    int dbias_accumulate;
    void *workspace;      /* dbias only: f8i_reduce_workspace_bytes(rows, cols_in) bytes */
    size_t workspace_bytes;
    uint64_t *stats;      /* with codes (out or out_t): telemetry [3] or NULL, as the cast */
    f8i_scaling_mode mode; /* TENSOR, or ROW (F8I_ROW_FUSED above: d rounded to dx_dtype, dx
                              may still be NULL; out_t and dbias NULL) */
    float scaled_max;     /* ROW */
    int pow2;             /* ROW */
    float *col_amax;      /* ROW: [cols_in] max |u| of each column of d (F8I_ROW_FUSED), or NULL */
} f8i_act_bwd_args;

/* Block scaling (F8_RECIPE_BLOCK, DeepSeek-V3's recipe, TE's
 * Float8BlockScaling): the tile edge along the reduction dimension. */
#define F8I_BLOCK 128

/* Scale tiles of a [rows, cols] operand whose tiles are block_rows x 128
 * (block_rows 1: 1x128 tiles; 128: 128x128 blocks): the scale grid is
 * [ceil(rows / block_rows), ceil(cols / 128)], row-major. Partial tiles at
 * the right and bottom edges hold fewer elements and one scale each. */
static inline int64_t f8i_block_grid(int64_t rows, int64_t cols, int block_rows)
{
    return ((rows + block_rows - 1) / block_rows) * ((cols + F8I_BLOCK - 1) / F8I_BLOCK);
}

static inline int64_t f8i_mode_scales(f8i_scaling_mode m, int64_t rows, int64_t cols)
{
    switch (m) {
    case F8I_SCALING_BLOCK_1X128: return f8i_block_grid(rows, cols, 1);
    case F8I_SCALING_BLOCK_128X128: return f8i_block_grid(rows, cols, F8I_BLOCK);
    case F8I_SCALING_ROW: return rows;
    default: return 1;
    }
}

/* The block-scaled cast (f8i_cast_args with mode BLOCK_1X128 or
 * BLOCK_128X128; block_rows below is f8i_mode_block_rows(mode)) of src
 * [rows, cols] (FP32 or BF16), one pass, every
 * orientation quantized from the high-precision values (TE, DeepSeek: the
 * column-wise copy is not the transpose of the row-wise codes, whose scales
 * belong to other tiles). For one tile t with values v (v = (float)src):
 *   a(t)      = max |v| over t        (NaN ignored)
 *   s(t)      = scaled_max / a(t) if a(t) is finite and > 0, else 1.0f
 *               (an all-zero, inf or NaN tile keeps scale 1); FLT_MAX if
 *               that is inf; with pow2 its mantissa bits are cleared (rounded
 *               down to a power of two, so codes · scale_inv are exact)
 *   codes     = fp8(v * s(t))          (FP32 multiply; satfinite RNE, as the cast)
 *   scale_inv = 1.0f / s(t)            (IEEE division; the GEMM's dequant factor)
 * block_rows 1 (activations, gradients):
 *   out [rows, cols], scale_inv [rows, ceil(cols/128)]: 1x128 tiles of src's rows;
 *   out_t [cols, rows], scale_inv_t [cols, ceil(rows/128)]: 1x128 tiles of the
 *   rows of srcᵀ (128x1 tiles of src), scaled on their own.
 * block_rows 128 (weights): one scale per 128x128 block of src: out and
 *   scale_inv [ceil(rows/128), ceil(cols/128)]; out_t is the same codes
 *   transposed and scale_inv_t the grid transposed (both orientations share
 *   the block scale, so each is exact in either GEMM).
 * Any of out, out_t may be NULL (with its scale grid). Also, like the cast:
 *   *amax = max(*amax, max |v|) (if amax: the slot's record), dbias as
 *   f8i_cast_args says (workspace f8i_reduce_workspace_bytes(rows, cols)),
 *   stats += (count, saturated |v·s(t)| > fp8_max, flushed) of each element
 *   once (its row-wise code; the column-wise one when out is NULL), nothing
 *   if noop && *noop == 1.0f. rows or cols may be 0 (nothing is written). */
/* The block-scaled GEMM (DeepSeek-V3 / DeepGEMM / TE's blockwise GEMM):
 * f8i_gemm_args with a_mode and b_mode block modes (at least one of them
 * BLOCK_1X128: 128x128 by 128x128 is not a GEMM of the recipe; a_block_rows
 * below is f8i_mode_block_rows(a_mode), b's alike), TN in row-major terms
 * (a_trans = b_trans = 0): A stored [m, k], B stored [n, k], both FP8 (any
 * mix of E4M3/E5M2), a_scale_inv and b_scale_inv grids in f8i_block_grid's
 * layout:
 *   P(i, j, kb) = Σ_{k in K-block kb} A(i, k)·B(j, k)          (FP32; the
 *                 products of FP8 codes are exact in FP32)
 *   acc(i, j)   = Σ_kb P(i, j, kb) · (sa(i / a_block_rows, kb) · sb(j / b_block_rows, kb))
 *                 (FP32, K-blocks in order: the scales are applied per
 *                 128-deep block as the tensor-core partial sums are
 *                 promoted, DeepGEMM's two-level accumulation)
 *   D(i, j)     = acc (+ C(i, j)) (+ bias[j])
 * with C as the per-tensor GEMM's (D if accumulate, the addend c if set:
 * FP32 sum, D rounded once). D FP32 or BF16, bias FP32/BF16 or NULL. m, n or
 * k may be 0 (k = 0: D = C (+ bias)). split_accum and workspace are not
 * read. Backends agree within a tolerance (the order inside a K-block is
 * theirs). */

/* Test hooks of the CUDA block GEMM (src/cuda/gemm_block.cu; no-ops in a
 * CUDA=0 build, and on a CPU ctx): force != 0 sends every later call of the
 * ctx to the own fallback kernel, 0 restores the per-shape choice; last_path
 * names the path the ctx's last call took: 0 none yet, 1 the fallback
 * kernel, 2 cuBLASLt's block-scaled matmul. Never on the step path. */
void f8i_cuda_gemm_block_force_fallback(f8_ctx *ctx, int force);
int f8i_cuda_gemm_block_last_path(const f8_ctx *ctx);

/* Test and benchmark hooks of the CUDA attention (src/cuda/attention_cudnn.cu;
 * no-ops in a CUDA=0 build and on a CPU ctx). set_mode picks the path of the
 * ctx's later calls: F8I_ATTN_AUTO (cuDNN where it takes the call, its
 * deterministic backward; f8's kernels elsewhere), F8I_ATTN_OWN (f8's kernels
 * only), F8I_ATTN_CUDNN_NONDET (as AUTO with cuDNN's faster, atomic,
 * non-reproducible backward); a negative mode goes back to the ctx config's
 * choice (attention_path, attention_nondeterministic). last_path
 * names the path the ctx's last attention call took; info describes the
 * cuDNN state in words (version, plans, why a plan or the library was
 * refused), valid until the next call on ctx; *loaded (may be NULL) says
 * whether the library and a handle are ready. Never on the step path.
 * takes (f8_attention_query_path's answer on a CUDA ctx): *takes = 1 when
 * cuDNN runs a forward (backward 0; dtype E4M3: the FP8 forward, taken only
 * where the loaded cuDNN is >= 9.19) or backward (1) of that shape
 * for 16-byte aligned tensors under the ctx's mode, its plan built now if
 * new; 0 otherwise (and on a CPU ctx). F8_ERR_OUT_OF_MEMORY when the plan
 * cannot be allocated, F8_ERR_STATE for a shape not built before a graph
 * capture began (src/cuda/plan_cache.cuh's rule), as the call itself would
 * fail. */
enum { F8I_ATTN_AUTO = 0, F8I_ATTN_OWN = 1, F8I_ATTN_CUDNN_NONDET = 2 };
enum { F8I_ATTN_PATH_NONE = 0, F8I_ATTN_PATH_OWN = 1, F8I_ATTN_PATH_CUDNN = 2 };
void f8i_cuda_attn_set_mode(f8_ctx *ctx, int mode);
int f8i_cuda_attn_last_path(const f8_ctx *ctx);
f8_status f8i_cuda_attn_takes(f8_ctx *ctx, f8_dtype dtype, int64_t batch, int64_t seq, int64_t n_head,
                              int64_t n_kv_head, int64_t head_dim, int backward, int *takes);
const char *f8i_cuda_attn_info(f8_ctx *ctx, int *loaded);
/* The product name of CUDA device `device` (cudaGetDeviceProperties) into
 * name; 0, or -1 when the runtime cannot say (and without CUDA). */
int f8i_cuda_device_name(int device, char *name, size_t size);
/* The device's free and total memory (cudaMemGetInfo on it); 0 on success. */
int f8i_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes);

/* ---- the simple ops' args ------------------------------------------- */

/* dst[0, bytes) = src[0, bytes) (memmove semantics on the CPU). */
typedef struct f8i_copy_args {
    void *dst;
    const void *src;
    size_t bytes;
} f8i_copy_args;

/* dst[0, bytes) = 0. */
typedef struct f8i_memset_zero_args {
    void *dst;
    size_t bytes;
} f8i_memset_zero_args;

/* dst[i] = value for i < count. */
typedef struct f8i_fill_f32_args {
    float *dst;
    float value;
    int64_t count;
} f8i_fill_f32_args;

/* dst[i] = convert((float)src[i] * (src FP8 ? *scale_inv : 1)) for i < count;
 * src FP32/BF16/E4M3/E5M2, dst FP32/BF16 (BF16: RNE). scale_inv may be NULL
 * for non-FP8 src. */
typedef struct f8i_convert_args {
    const void *src;
    f8_dtype src_dtype;
    const float *scale_inv;
    void *dst;
    f8_dtype dst_dtype;
    int64_t count;
} f8i_convert_args;

/* dst[c, r] = src[r, c] for bytes; nothing if noop && *noop == 1.0f. */
typedef struct f8i_transpose_u8_args {
    const uint8_t *src;
    uint8_t *dst;
    int64_t rows, cols;
    const float *noop;
} f8i_transpose_u8_args;

/* *dst = 1.0f / *src unless noop && *noop == 1.0f (a workspace's scale_inv). */
typedef struct f8i_reciprocal_args {
    const float *src;
    float *dst;
    const float *noop;
} f8i_reciprocal_args;

/* dst[i] += src[i] for i < count, both of dtype (FP32 or BF16; BF16 sums in
 * FP32 then rounds). */
typedef struct f8i_add_args {
    void *dst;
    const void *src;
    f8_dtype dtype;
    int64_t count;
} f8i_add_args;

/* One collective of a communicator (f8.h's f8_comm_* contracts), issued on
 * the comm's ctx. Both backends hand it to the comm's transport (CPU ranks or
 * NCCL, src/comm), which knows how to move bytes for its ctx; being a work
 * op, it is recorded and replayed like the others. */
typedef enum f8i_collective {
    F8I_COLL_ALL_REDUCE = 0,
    F8I_COLL_REDUCE_SCATTER = 1,
    F8I_COLL_ALL_GATHER = 2,
    F8I_COLL_BROADCAST = 3,
    F8I_COLL_WAIT = 4     /* local: later ctx work after the async collectives (f8_comm_wait) */
} f8i_collective;

typedef struct f8i_collective_args {
    f8_comm *comm;
    int32_t kind;         /* f8i_collective */
    int32_t op;           /* f8_reduce_op (reductions) */
    const void *src;
    void *dst;
    int64_t count;        /* elements per rank */
    f8_dtype dtype;
    int32_t root;         /* broadcast */
    int32_t async;        /* f8_comm_set_async when issued: NCCL runs it on the comm's stream */
} f8i_collective_args;

/* ---- the work ops ------------------------------------------------------ */

/* Every work op (everything that puts work on the stream), listed once as
 * X(KIND, name, args type, WRAP): the kind is F8I_OP_<KIND>, the args struct
 * is `args type` (the training ops' in src/nn/attention.h and
 * src/nn/embed_xent_adamw.h), and core/ops.h gives the caller's entry point
 * f8i_op_<name>: generated as (ctx, const args *) where WRAP is ARGS, written
 * by hand with the fields as parameters where it is FIELDS. Backends fill
 * one table indexed by kind; the graph recorder stores (kind, a copy of the
 * args) and replays it, with no per-op code. Adding an op is one line here,
 * its args struct, and one implementation per backend. */
#define F8I_OP_LIST(X)                                               \
    X(COPY, copy, f8i_copy_args, FIELDS)                             \
    X(MEMSET_ZERO, memset_zero, f8i_memset_zero_args, FIELDS)        \
    X(FILL_F32, fill_f32, f8i_fill_f32_args, FIELDS)                 \
    X(CAST, cast, f8i_cast_args, ARGS)                               \
    X(CONVERT, convert, f8i_convert_args, FIELDS)                    \
    X(TRANSPOSE_U8, transpose_u8, f8i_transpose_u8_args, FIELDS)     \
    X(RECIPROCAL, reciprocal, f8i_reciprocal_args, FIELDS)           \
    X(ADD, add, f8i_add_args, FIELDS)                                \
    X(GEMM, gemm, f8i_gemm_args, ARGS)                               \
    X(SCALE_UPDATE, scale_update, f8i_scale_update_args, ARGS)       \
    X(NORM_FWD, norm_fwd, f8i_norm_fwd_args, ARGS)                   \
    X(NORM_BWD, norm_bwd, f8i_norm_bwd_args, ARGS)                   \
    X(ACT_FWD, act_fwd, f8i_act_fwd_args, ARGS)                      \
    X(ACT_BWD, act_bwd, f8i_act_bwd_args, ARGS)                      \
    X(ATTN_FWD, attn_fwd, f8i_attn_fwd_args, ARGS)                   \
    X(ATTN_BWD, attn_bwd, f8i_attn_bwd_args, ARGS)                   \
    X(ROPE, rope, f8i_rope_args, ARGS)                               \
    X(EMBEDDING_FWD, embedding_fwd, f8i_embedding_fwd_args, ARGS)    \
    X(EMBEDDING_BWD, embedding_bwd, f8i_embedding_bwd_args, ARGS)    \
    X(CROSS_ENTROPY, cross_entropy, f8i_cross_entropy_args, ARGS)    \
    X(ADAMW_STEP, adamw_step, f8i_adamw_step_args, ARGS)             \
    X(AMAX_SCALE, amax_scale, f8i_amax_scale_args, ARGS)             \
    X(TELEMETRY_SNAP, telemetry_snap, f8i_telemetry_snap_args, ARGS) \
    X(COLLECTIVE, collective, f8i_collective_args, ARGS)

#define F8I_OP_ENUM_(K, n, T, W) F8I_OP_##K,
typedef enum f8i_op_kind { F8I_OP_LIST(F8I_OP_ENUM_) F8I_OP_COUNT } f8i_op_kind;
#undef F8I_OP_ENUM_

/* One backend's implementation of one op: args points at the kind's args
 * struct. A backend's table is f8i_op_fn[F8I_OP_COUNT], indexed by kind. */
typedef f8_status (*f8i_op_fn)(f8_ctx *ctx, const void *args);

typedef struct f8i_backend {
    const char *name;
    /* Memory. alloc returns 256-byte aligned memory. upload/download are
     * synchronous (host ops, never recorded); the copy and memset work ops
     * are ordered on the stream. */
    f8_status (*alloc)(f8_ctx *ctx, size_t bytes, void **ptr);
    void (*free)(f8_ctx *ctx, void *ptr);
    f8_status (*upload)(f8_ctx *ctx, void *dst, const void *host_src, size_t bytes);
    f8_status (*download)(f8_ctx *ctx, void *host_dst, const void *src, size_t bytes);
    f8_status (*synchronize)(f8_ctx *ctx);

    /* Every work op: args points at the args struct of kind (F8I_OP_LIST).
     * An unknown kind gives F8_ERR_INVALID_ARGUMENT. */
    f8_status (*run)(f8_ctx *ctx, f8i_op_kind kind, const void *args);

    /* Backend state: create fills ctx->be_state (may read ctx->device), destroy
     * frees it. set_stream: NULL = own stream. */
    f8_status (*state_create)(f8_ctx *ctx);
    void (*state_destroy)(f8_ctx *ctx);
    f8_status (*set_stream)(f8_ctx *ctx, void *stream);
    void *(*get_stream)(const f8_ctx *ctx);
} f8i_backend;

/* The backends. f8i_cuda_backend() is NULL in a build without CUDA. */
const f8i_backend *f8i_cpu_backend(void);
const f8i_backend *f8i_cuda_backend(void);

#ifdef __cplusplus
}
#endif

#endif /* F8_BACKEND_H */
