/*
 * act.cu — the backend entry points of the fused modules' activations
 * (f8i_act_fwd_args and f8i_act_bwd_args in backend.h): validate, choose the
 * kernel and its geometry, and hand the job to the file that compiled the
 * activation's kernels. act_kernels.cuh's design note says how they work.
 */
#include <stdint.h>

#include "act_kernels.cuh"
#include "core/rowwise.h"

/* The rows kernels' block shape and grid: a power of two of threads across
 * (enough for the pieces of a row, at most ACT_THREADS), the rest down; at
 * most per_sm blocks per SM in all. rows, chunks >= 1. */
static void rows_geometry(const f8_ctx *ctx, act_rows_params *p, int per_sm, dim3 *grid)
{
    int l = 0;
    while (l < ACT_MAX_BX_LOG2 && ((int64_t)1 << l) < p->chunks) ++l;
    p->bx_log2 = l;
    const int64_t bx = (int64_t)1 << l, by = ACT_THREADS >> l;
    int64_t cap = (int64_t)f8i_cuda(ctx)->sm_count * per_sm;
    if (cap < 1) cap = 1;
    int64_t gx = (p->chunks + bx - 1) / bx, gy = (p->rows + by - 1) / by;
    if (gx > cap) gx = cap;
    const int64_t gy_cap = cap / gx > 0 ? cap / gx : 1;
    if (gy > gy_cap) gy = gy_cap;
    if (gy > 65535) gy = 65535;
    *grid = dim3((unsigned)gx, (unsigned)gy, 1);
}

static f8_status act_dispatch(f8_ctx *ctx, f8_activation act, act_job *j)
{
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: return f8i_cuda_act_run_gelu(ctx, act, j);
    case F8_ACT_SWIGLU:
    case F8_ACT_QGELU: return f8i_cuda_act_run_silu(ctx, act, j);
    case F8_ACT_RELU:
    case F8_ACT_REGLU: return f8i_cuda_act_run_relu(ctx, act, j);
    case F8_ACT_SRELU: return f8i_cuda_act_run_srelu(ctx, act, j);
    }
    return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "activation: unknown f8_activation %d", (int)act);
}

static int dtype_bytes(f8_dtype d) { return d == F8_DTYPE_FP32 ? 4 : d == F8_DTYPE_BF16 ? 2 : 1; }

/* *scale_inv = 1 / *scale for an empty tensor (1 when there is no scale, as
 * the kernels take it). */
static f8_status empty_scale_inv(f8_ctx *ctx, const float *scale, float *scale_inv)
{
    if (scale_inv == NULL) return F8_OK;
    if (scale == NULL) return f8i_cuda_fill_f32(ctx, scale_inv, 1.0f, 1);
    return f8i_cuda_reciprocal(ctx, scale, scale_inv, NULL);
}

/* The row-wise fused kernel's job (F8I_ROW_FUSED), forward (hp = y_hp) or
 * backward (hp = dx; dy set): rows, h >= 1. col_amax: taken by
 * act_row_kernel's COLMAX instance (into f8i_cuda_col_amax_target's target) where its slots fit
 * ACT_ROW_CMAX_MAX, else by the column amax pass over hp after the plain
 * kernel (refused before any launch without hp). */
static f8_status row_job(f8_ctx *ctx, f8_activation act, int backward, const void *x, f8_dtype x_dtype,
                         const void *dy, f8_dtype dy_dtype, int64_t rows, int64_t h, void *hp, f8_dtype hp_dtype,
                         uint8_t *out, f8_dtype out_dtype, float *scale_inv, float *amax, uint64_t *stats,
                         float scaled_max, int pow2, float *col_amax)
{
    const int two = backward && act_gated(act);
    const int64_t cols = two ? 2 * h : h, chunks = (h + ACT_VEC - 1) / ACT_VEC;
    const size_t smem = col_amax != NULL ? act_row_cmax_bytes(chunks, two, hp_dtype == F8_DTYPE_BF16) : 0;
    const int after = smem > ACT_ROW_CMAX_MAX; /* the column amaxes from hp, after the kernel */
    if (after && hp == NULL)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "activation %s: the column amaxes of rows of %lld columns need %s",
                         backward ? "backward" : "forward", (long long)cols, backward ? "dx" : "y_hp");
    const int xes = dtype_bytes(x_dtype), hes = dtype_bytes(hp_dtype);
    act_job j; /* the fields ACT_OP_ROW reads */
    j.op = ACT_OP_ROW;
    j.backward = backward;
    j.x_bf16 = x_dtype == F8_DTYPE_BF16;
    j.dy_bf16 = backward && dy_dtype == F8_DTYPE_BF16;
    j.hp_bf16 = hp_dtype == F8_DTYPE_BF16;
    j.e5m2 = out_dtype == F8_DTYPE_E5M2;
    act_row_params *p = &j.row;
    p->x = x;
    p->dy = dy;
    p->rows = rows;
    p->h = h;
    p->chunks = (h + ACT_VEC - 1) / ACT_VEC;
    p->hp = hp;
    p->hp_bf16 = j.hp_bf16;
    p->out = out;
    p->scale_inv = scale_inv;
    p->amax = amax;
    p->stats = (unsigned long long *)stats;
    p->scaled_max = scaled_max;
    p->pow2 = pow2;
    /* pitches and the d_b half's offset h: widths that hold at every piece */
    p->w_x = access_width(x, h * xes, 16);
    p->w_dy = backward ? access_width(dy, h * dtype_bytes(dy_dtype), 16) : 1;
    p->w_hp = hp != NULL ? access_width(hp, h * hes, 16) : 1;
    p->w_out = access_width(out, h, ACT_VEC);
    p->col_amax = after ? NULL : col_amax;
    j.row_smem = after ? 0 : smem;
    /* the register kernel where it measured faster: not the gated forward (SwiGLU 0.97x at 8192 x 16384 on an
     * H100, its 2 blocks an SM against act_row_kernel's 6) */
    j.row_reg = j.x_bf16 && j.hp_bf16 && (!backward || j.dy_bf16) && act_row_reg_fits(chunks) &&
                (backward || !act_gated(act));
    /* what is resident at once: 2048 threads an SM (the register kernel: its launch bounds); with the column
     * maxima the COLMAX instance's launch bounds, fewer where they fill the shared memory (a grid past it would
     * run a second wave of whole grid-stride shares, and flush each block's maxima) */
    int64_t per_sm = j.row_reg ? act_row_reg_blocks(act_gated(act), backward) : 2048 / ACT_THREADS;
    if (p->col_amax != NULL) {
        const int64_t fit = (int64_t)(ACT_SMEM_SM / (j.row_smem + ACT_SMEM_BLOCK));
        const int64_t bound = j.row_reg ? per_sm : act_row_cmax_blocks(two);
        per_sm = fit < bound ? fit : bound;
    }
    int64_t cap = (int64_t)f8i_cuda(ctx)->sm_count * per_sm;
    if (cap < 1) cap = 1;
    j.grid = dim3((unsigned)(rows < cap ? rows : cap), 1, 1);
    if (p->col_amax != NULL) F8I_TRY(f8i_cuda_col_amax_target(ctx, col_amax, cols, &p->col_amax));
    F8I_TRY(act_dispatch(ctx, act, &j));
    return after ? f8i_cuda_rowwise_col_amax(ctx, hp, hp_dtype, rows, cols, col_amax) : F8_OK;
}

/* ------------------------------------------------------------------------ */
/* Backend entry points                                                      */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *a)
{
    if (!f8i_dtype_is_hp(a->x_dtype) || (!f8i_dtype_is_hp(a->y_dtype) && !f8i_dtype_is_fp8(a->y_dtype)))
        return f8i_error(ctx, F8_ERR_DTYPE, "activation forward: x %s, y %s; expected fp32/bf16 x", 
                         f8_dtype_name(a->x_dtype), f8_dtype_name(a->y_dtype));
    if (a->rows < 0 || a->cols < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "activation forward: negative shape [%lld, %lld]",
                         (long long)a->rows, (long long)a->cols);
    const int fp8 = f8i_dtype_is_fp8(a->y_dtype);
    const int row = fp8 && a->mode == F8I_SCALING_ROW; /* F8I_ROW_FUSED (backend.h) */
    if (row && (a->rows == 0 || a->cols == 0)) return F8_OK;
    if (row)
        return row_job(ctx, a->act, 0, a->x, a->x_dtype, NULL, F8_DTYPE_FP32, a->rows, a->cols, a->y_hp, a->hp_dtype,
                       (uint8_t *)a->y, a->y_dtype, a->scale_inv, a->amax, a->stats, a->scaled_max, a->pow2,
                       a->col_amax);
    if (a->rows == 0 || a->cols == 0) return fp8 ? empty_scale_inv(ctx, a->scale, a->scale_inv) : F8_OK;

    const int gated = act_gated(a->act), xes = dtype_bytes(a->x_dtype), yes = dtype_bytes(a->y_dtype);
    act_job j;
    if (fp8 && (a->y_t != NULL || a->stats != NULL)) {
        /* Codes and transposed codes, or codes with telemetry: the tile
         * kernel (it counts as the cast counts; the rows kernel does not). */
        j.op = ACT_OP_FWD_TILE;
        j.x_bf16 = a->x_dtype == F8_DTYPE_BF16;
        j.dy_bf16 = 0;
        j.yk = 0;
        j.e5m2 = a->y_dtype == F8_DTYPE_E5M2;
        cast_tile_params *t = &j.tile;
        t->rows = a->rows;
        t->cols = a->cols;
        t->out = (uint8_t *)a->y;
        t->out_t = a->y_t;
        t->scale = a->scale;
        t->amax = a->amax;
        t->scale_inv = a->scale_inv;
        t->noop = NULL;
        t->stats = (unsigned long long *)a->stats;
        t->dbias = NULL;
        t->dbias_bf16 = 0;
        t->dbias_accumulate = 0;
        t->workspace = NULL;
        t->workspace_bytes = 0;
        t->w_out_t = access_width(a->y_t, a->rows, 16);
        j.x = a->x;
        j.dy = NULL;
        j.h = a->cols;
        j.dx = NULL;
        j.dx_bf16 = 0;
        j.w_x = access_width(a->x, a->cols * xes, 16);
        j.w_dy = j.w_dx = 1;
        return act_dispatch(ctx, a->act, &j);
    }
    j.op = ACT_OP_FWD;
    j.x_bf16 = a->x_dtype == F8_DTYPE_BF16;
    j.dy_bf16 = 0;
    j.yk = a->y_dtype == F8_DTYPE_FP32 ? 0 : a->y_dtype == F8_DTYPE_BF16 ? 1 : a->y_dtype == F8_DTYPE_E4M3 ? 2 : 3;
    j.e5m2 = 0;
    act_rows_params *p = &j.rows;
    /* Plain activations: one flat row (pitches then never matter). */
    p->rows = gated ? a->rows : 1;
    p->h = gated ? a->cols : a->rows * a->cols;
    p->chunks = (p->h + ACT_VEC - 1) / ACT_VEC;
    p->x = a->x;
    p->dy = NULL;
    p->y = a->y;
    p->y_bf16 = 0;
    p->out = NULL;
    p->scale = fp8 ? a->scale : NULL;
    p->amax = fp8 ? a->amax : NULL;
    p->scale_inv = fp8 ? a->scale_inv : NULL;
    p->w_x = access_width(a->x, gated ? p->h * xes : 0, 16);
    p->w_dy = 1;
    p->w_y = access_width(a->y, gated ? p->h * yes : 0, 16);
    p->w_out = 1;
    rows_geometry(ctx, p, ACT_FWD_BLOCKS, &j.grid);
    return act_dispatch(ctx, a->act, &j);
}

f8_status f8i_cuda_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *a)
{
    const int want_codes = a->out != NULL || a->out_t != NULL;
    if (!f8i_dtype_is_hp(a->x_dtype) || !f8i_dtype_is_hp(a->dy_dtype) ||
        (a->dx != NULL && !f8i_dtype_is_hp(a->dx_dtype)) ||
        (want_codes && !f8i_dtype_is_fp8(a->out_dtype)) || (a->dbias != NULL && !f8i_dtype_is_hp(a->dbias_dtype)))
        return f8i_error(ctx, F8_ERR_DTYPE,
                         "activation backward: x %s, dy %s, dx %s, out %s, dbias %s; expected fp32/bf16 "
                         "x, dy, dx, dbias and e4m3/e5m2 out",
                         f8_dtype_name(a->x_dtype), f8_dtype_name(a->dy_dtype), f8_dtype_name(a->dx_dtype),
                         f8_dtype_name(a->out_dtype), f8_dtype_name(a->dbias_dtype));
    if (a->rows < 0 || a->cols < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "activation backward: negative shape [%lld, %lld]",
                         (long long)a->rows, (long long)a->cols);
    const int row = a->mode == F8I_SCALING_ROW && a->out != NULL; /* F8I_ROW_FUSED (backend.h) */
    if (row && (a->rows == 0 || a->cols == 0)) return F8_OK;
    if (row)
        return row_job(ctx, a->act, 1, a->x, a->x_dtype, a->dy, a->dy_dtype, a->rows, a->cols, a->dx, a->dx_dtype,
                       a->out, a->out_dtype, a->scale_inv, a->amax, a->stats, a->scaled_max, a->pow2,
                       a->col_amax);
    if (a->rows == 0 || a->cols == 0) return empty_scale_inv(ctx, a->scale, a->scale_inv);

    const int gated = act_gated(a->act);
    const int64_t h = a->cols, cols_in = gated ? 2 * h : h;
    const int xes = dtype_bytes(a->x_dtype), dyes = dtype_bytes(a->dy_dtype);
    const int dxes = a->dx != NULL ? dtype_bytes(a->dx_dtype) : 1;
    act_job j;
    j.x_bf16 = a->x_dtype == F8_DTYPE_BF16;
    j.dy_bf16 = a->dy_dtype == F8_DTYPE_BF16;
    j.yk = 0;
    j.e5m2 = want_codes && a->out_dtype == F8_DTYPE_E5M2;

    if (a->out_t != NULL || a->dbias != NULL || (want_codes && a->stats != NULL)) {
        /* The fused tile: d's codes row-major and transposed, amax, dbias,
         * dx, and telemetry (which the rows kernel does not count). */
        j.op = ACT_OP_BWD_TILE;
        cast_tile_params *t = &j.tile;
        t->rows = a->rows;
        t->cols = cols_in;
        t->out = a->out;
        t->out_t = a->out_t;
        t->scale = a->scale;
        t->amax = a->amax;
        t->scale_inv = a->scale_inv;
        t->noop = NULL;
        t->stats = want_codes ? (unsigned long long *)a->stats : NULL;
        t->dbias = a->dbias;
        t->dbias_bf16 = a->dbias_dtype == F8_DTYPE_BF16;
        t->dbias_accumulate = a->dbias_accumulate != 0;
        t->workspace = a->workspace;
        t->workspace_bytes = a->workspace_bytes;
        t->w_out_t = a->out_t != NULL ? access_width(a->out_t, a->rows, 16) : 1;
        j.x = a->x;
        j.dy = a->dy;
        j.h = h;
        j.dx = a->dx;
        j.dx_bf16 = a->dx != NULL && a->dx_dtype == F8_DTYPE_BF16;
        j.w_x = access_width(a->x, h * xes, 16);
        j.w_dy = access_width(a->dy, h * dyes, 16);
        j.w_dx = a->dx != NULL ? access_width(a->dx, cols_in * dxes, 16) : 1;
        return act_dispatch(ctx, a->act, &j);
    }
    if (a->dx == NULL && a->out == NULL && a->amax == NULL) return empty_scale_inv(ctx, a->scale, a->scale_inv);

    /* Row pieces: dx and/or codes, amax. */
    j.op = ACT_OP_BWD_ROWS;
    act_rows_params *p = &j.rows;
    p->rows = gated ? a->rows : 1;
    p->h = gated ? h : a->rows * h;
    p->chunks = (p->h + ACT_VEC - 1) / ACT_VEC;
    p->x = a->x;
    p->dy = a->dy;
    p->y = a->dx;
    p->y_bf16 = a->dx != NULL && a->dx_dtype == F8_DTYPE_BF16;
    p->out = a->out;
    p->scale = a->scale;
    p->amax = a->amax;
    p->scale_inv = a->scale_inv;
    p->w_x = access_width(a->x, gated ? h * xes : 0, 16);
    p->w_dy = access_width(a->dy, gated ? h * dyes : 0, 16);
    p->w_y = a->dx != NULL ? access_width(a->dx, gated ? h * dxes : 0, 16) : 1;
    p->w_out = a->out != NULL ? access_width(a->out, gated ? h : 0, ACT_VEC) : 1;
    rows_geometry(ctx, p, F8I_BLOCKS_PER_SM, &j.grid);
    return act_dispatch(ctx, a->act, &j);
}
