/*
 * cpu/backend.c — the reference backend: plain loops a reader can check
 * against the contracts in backend.h, and the oracle the CUDA backend is
 * tested against bit for bit (casts, transposes, amax, scale updates).
 *
 * Design note: "backend memory" is host memory here and every op runs to
 * completion before it returns, so there is no stream and synchronize is a
 * no-op. The scalar conversions come from numerics.h, the same code the CUDA
 * kernels use where no hardware instruction does the work. The file is built
 * with -ffp-contract=off: v * scale must not fuse into anything.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/f8i.h"
#include "train/train_ops.h"
#include "core/numerics.h"

/* ---- memory ---------------------------------------------------------- */

static f8_status cpu_alloc(f8_ctx *ctx, size_t bytes, void **ptr)
{
    size_t rounded = f8i_align256(bytes ? bytes : 1);
    void *p = aligned_alloc(256, rounded);
    if (!p) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory (%zu bytes)", bytes);
    *ptr = p;
    return F8_OK;
}

static void cpu_free(f8_ctx *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

/* upload and download: host <-> "backend" (host) memory; not stream work, so
 * not counted as launches. */
static f8_status cpu_transfer(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes) memmove(dst, src, bytes);
    return F8_OK;
}

/* Every op below counts one launch when it has anything to write (the
 * counters' CPU rule: one per backend op run; an op that writes nothing, such
 * as an empty copy, counts none, as on CUDA). */
static f8_status cpu_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    memmove(dst, src, bytes);
    return F8_OK;
}

static f8_status cpu_memset_zero(f8_ctx *ctx, void *dst, size_t bytes)
{
    if (!bytes) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    memset(dst, 0, bytes);
    return F8_OK;
}

static f8_status cpu_fill_f32(f8_ctx *ctx, float *dst, float value, int64_t count)
{
    if (count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    for (int64_t i = 0; i < count; i++) dst[i] = value;
    return F8_OK;
}

static f8_status cpu_synchronize(f8_ctx *ctx)
{
    (void)ctx;
    return F8_OK;
}

/* ---- element access ---------------------------------------------------- */

static inline float load_f(const void *p, f8_dtype dt, int64_t i)
{
    if (dt == F8_DTYPE_BF16) return f8i_bf16_to_float(((const uint16_t *)p)[i]);
    if (dt == F8_DTYPE_E4M3) return f8i_fp8_decode(((const uint8_t *)p)[i], 0);
    if (dt == F8_DTYPE_E5M2) return f8i_fp8_decode(((const uint8_t *)p)[i], 1);
    return ((const float *)p)[i];
}

static inline void store_f(void *p, f8_dtype dt, int64_t i, float v)
{
    if (dt == F8_DTYPE_BF16) ((uint16_t *)p)[i] = f8i_bf16_from_float(v);
    else ((float *)p)[i] = v;
}

/* ---- casts and layouts -------------------------------------------------- */

/* The cast itself, uncounted: the table's cast and cpu/act.c's fused cast
 * (which its own op counts) both run it. */
static f8_status cast_run(f8_ctx *ctx, const f8i_cast_args *a)
{
    if (a->noop && *a->noop == 1.0f) return F8_OK;
    const float scale = *a->scale;
    const int e5m2 = a->out_dtype == F8_DTYPE_E5M2;
    double *colsum = NULL;
    if (a->dbias && a->rows > 0 && a->cols > 0) { /* an empty cast writes no dbias (backend.h) */
        colsum = (double *)calloc((size_t)a->cols, sizeof(double));
        if (!colsum) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu cast: out of host memory for the bias gradient");
    }
    float amax = 0.0f;
    for (int64_t r = 0; r < a->rows; r++) {
        for (int64_t c = 0; c < a->cols; c++) {
            float v = load_f(a->src, a->src_dtype, r * a->cols + c);
            amax = fmaxf(amax, fabsf(v));
            uint8_t q = f8i_fp8_encode(v * scale, e5m2);
            if (a->out) a->out[r * a->cols + c] = q;
            if (a->out_t) a->out_t[c * a->rows + r] = q;
            if (colsum) colsum[c] += v; /* double: an oracle more precise than any GPU order */
        }
    }
    if (a->amax) *a->amax = fmaxf(*a->amax, amax);
    if (a->scale_inv) *a->scale_inv = 1.0f / scale;
    if (colsum) {
        for (int64_t c = 0; c < a->cols; c++) {
            float prev = a->dbias_accumulate ? load_f(a->dbias, a->dbias_dtype, c) : 0.0f;
            store_f(a->dbias, a->dbias_dtype, c, prev + (float)colsum[c]);
        }
        free(colsum);
    }
    return F8_OK;
}

static f8_status cpu_cast(f8_ctx *ctx, const f8i_cast_args *a)
{
    /* An empty cast writes only scale_inv (backend.h). */
    if ((a->rows == 0 || a->cols == 0) && !a->scale_inv) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    return cast_run(ctx, a);
}

static f8_status cpu_convert(f8_ctx *ctx, const void *src, f8_dtype src_dtype, const float *scale_inv, void *dst,
                             f8_dtype dst_dtype, int64_t count)
{
    if (count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int fp8 = src_dtype == F8_DTYPE_E4M3 || src_dtype == F8_DTYPE_E5M2;
    const float s = fp8 ? *scale_inv : 1.0f;
    for (int64_t i = 0; i < count; i++) {
        float v = load_f(src, src_dtype, i);
        store_f(dst, dst_dtype, i, fp8 ? v * s : v);
    }
    return F8_OK;
}

static f8_status cpu_transpose_u8(f8_ctx *ctx, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols,
                                  const float *noop)
{
    if (rows == 0 || cols == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1); /* counted even when the flag skips it (f8.h) */
    if (noop && *noop == 1.0f) return F8_OK;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
    return F8_OK;
}

static f8_status cpu_reciprocal(f8_ctx *ctx, const float *src, float *dst, const float *noop)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (noop && *noop == 1.0f) return F8_OK;
    *dst = 1.0f / *src;
    return F8_OK;
}

static f8_status cpu_add(f8_ctx *ctx, void *dst, const void *src, f8_dtype dtype, int64_t count)
{
    if (count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    for (int64_t i = 0; i < count; i++) store_f(dst, dtype, i, load_f(dst, dtype, i) + load_f(src, dtype, i));
    return F8_OK;
}

/* ---- scaling ------------------------------------------------------------ */

static f8_status cpu_scale_update(f8_ctx *ctx, const f8i_scale_update_args *a)
{
    if (a->count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int L = a->history_len;
    for (int j = 0; j < a->count; j++) {
        const int64_t c = a->cols ? (int64_t)a->cols[j] : j; /* the slot's column */
        float *h = a->history + c; /* h[r * ld] is row r of this column */
        const float last = h[0];
        float amax = 0.0f;
        if (last != 0.0f) {
            if (a->algo == F8_AMAX_MAX) {
                for (int r = 1; r < L; r++) amax = fmaxf(amax, h[(int64_t)r * a->ld]);
                amax = fmaxf(amax, last);
            } else {
                amax = last;
            }
            for (int r = 1; r < L - 1; r++) h[(int64_t)r * a->ld] = h[(int64_t)(r + 1) * a->ld];
            if (L >= 2) h[(int64_t)(L - 1) * a->ld] = last;
            h[0] = 0.0f;
        }
        float scale = a->scale[c];
        if (isfinite(amax) && amax > 0.0f) scale = a->scaled_max / amax;
        if (isinf(scale)) scale = FLT_MAX;
        a->scale[c] = scale;
        a->scale_inv[c] = 1.0f / scale;
    }
    return F8_OK;
}

/* ---- state -------------------------------------------------------------- */

static f8_status cpu_state_create(f8_ctx *ctx)
{
    ctx->be_state = NULL;
    return F8_OK;
}

static void cpu_state_destroy(f8_ctx *ctx) { (void)ctx; }

static f8_status cpu_set_stream(f8_ctx *ctx, void *stream)
{
    (void)stream;
    return f8i_error(ctx, F8_ERR_UNSUPPORTED, "the CPU backend has no stream");
}

static void *cpu_get_stream(const f8_ctx *ctx)
{
    (void)ctx;
    return NULL;
}

f8_status f8i_cpu_gemm(f8_ctx *ctx, const f8i_gemm_args *args); /* cpu/gemm.c */
f8_status f8i_cpu_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *args); /* cpu/norm.c */
f8_status f8i_cpu_norm_bwd(f8_ctx *ctx, const f8i_norm_bwd_args *args);
f8_status f8i_cpu_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *args); /* cpu/act.c */
f8_status f8i_cpu_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *args);
f8_status f8i_cpu_cast(f8_ctx *ctx, const f8i_cast_args *args); /* the uncounted cast, for cpu/act.c */

f8_status f8i_cpu_cast(f8_ctx *ctx, const f8i_cast_args *args) { return cast_run(ctx, args); }

static const f8i_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_transfer,
    .download = cpu_transfer,
    .copy = cpu_copy,
    .memset_zero = cpu_memset_zero,
    .fill_f32 = cpu_fill_f32,
    .synchronize = cpu_synchronize,
    .cast = cpu_cast,
    .convert = cpu_convert,
    .transpose_u8 = cpu_transpose_u8,
    .reciprocal = cpu_reciprocal,
    .add = cpu_add,
    .gemm = f8i_cpu_gemm,
    .scale_update = cpu_scale_update,
    .norm_fwd = f8i_cpu_norm_fwd,
    .norm_bwd = f8i_cpu_norm_bwd,
    .act_fwd = f8i_cpu_act_fwd,
    .act_bwd = f8i_cpu_act_bwd,
    .state_create = cpu_state_create,
    .state_destroy = cpu_state_destroy,
    .set_stream = cpu_set_stream,
    .get_stream = cpu_get_stream,
    .train_op = f8i_cpu_train_op,
};

const f8i_backend *f8i_cpu_backend(void) { return &cpu_backend; }
