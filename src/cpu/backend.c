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
#include "core/rowwise.h"
#include "core/numerics.h"
#include "core/ops.h"
#include "cpu/element.h"

/* Every op's implementation, f8i_cpu_<name> (this file, gemm.c, norm.c,
 * act.c, attention.c, embed_xent_adamw.c): the table at the end points at them. */
#define DECLARE(K, n, T, W) f8_status f8i_cpu_##n(f8_ctx *ctx, const T *args);
F8I_OP_LIST(DECLARE)
#undef DECLARE

/* ---- memory ---------------------------------------------------------- */

static f8_status cpu_alloc(f8_ctx *ctx, size_t bytes, void **ptr)
{
    size_t rounded; /* aligned_alloc wants a multiple of the alignment */
    F8I_TRY(f8i_alloc_size(ctx, bytes, "cpu backend", &rounded));
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
f8_status f8i_cpu_copy(f8_ctx *ctx, const f8i_copy_args *a)
{
    if (!a->bytes) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    memmove(a->dst, a->src, a->bytes);
    return F8_OK;
}

f8_status f8i_cpu_memset_zero(f8_ctx *ctx, const f8i_memset_zero_args *a)
{
    if (!a->bytes) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    memset(a->dst, 0, a->bytes);
    return F8_OK;
}

f8_status f8i_cpu_fill_f32(f8_ctx *ctx, const f8i_fill_f32_args *a)
{
    if (a->count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    for (int64_t i = 0; i < a->count; i++) a->dst[i] = a->value;
    return F8_OK;
}

static f8_status cpu_synchronize(f8_ctx *ctx)
{
    (void)ctx;
    return F8_OK;
}

/* ---- casts and layouts -------------------------------------------------- */

/* The cast itself, uncounted and unchecked: the table's cast and
 * cpu/act.c's fused cast (which its own op counts and checks) both run it. */
f8_status f8i_cpu_cast_run(f8_ctx *ctx, const f8i_cast_args *a)
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
    const float fmax = e5m2 ? 57344.0f : 448.0f;
    uint64_t sat = 0, flushed = 0;
    for (int64_t r = 0; r < a->rows; r++) {
        for (int64_t c = 0; c < a->cols; c++) {
            float v = f8i_any_load(a->src, a->src_dtype, r * a->cols + c);
            amax = fmaxf(amax, fabsf(v));
            uint8_t q = f8i_fp8_encode(v * scale, e5m2);
            sat += fabsf(v * scale) > fmax;
            flushed += v != 0.0f && (q & 0x7Fu) == 0;
            if (a->out) a->out[r * a->cols + c] = q;
            if (a->out_t) a->out_t[c * a->rows + r] = q;
            if (colsum) colsum[c] += v; /* double: an oracle more precise than any GPU order */
        }
    }
    if (a->amax) *a->amax = fmaxf(*a->amax, amax);
    if (a->scale_inv) *a->scale_inv = 1.0f / scale;
    if (a->stats) {
        a->stats[0] += (uint64_t)(a->rows * a->cols);
        a->stats[1] += sat;
        a->stats[2] += flushed;
    }
    if (colsum) {
        for (int64_t c = 0; c < a->cols; c++) {
            float prev = a->dbias_accumulate ? f8i_any_load(a->dbias, a->dbias_dtype, c) : 0.0f;
            f8i_hp_store(a->dbias, a->dbias_dtype, c, prev + (float)colsum[c]);
        }
        free(colsum);
    }
    return F8_OK;
}

/* The block modes' cast (block.c). */
f8_status f8i_cpu_cast_block(f8_ctx *ctx, const f8i_cast_args *a);

f8_status f8i_cpu_cast(f8_ctx *ctx, const f8i_cast_args *a)
{
    if (a->mode == F8I_SCALING_ROW) {
        const f8i_rowwise_cast_args r = f8i_rowwise_cast_from(a);
        F8I_TRY(f8i_rowwise_cast_check(ctx, &r));
        return f8i_cpu_cast_rowwise(ctx, &r);
    }
    if (a->mode != F8I_SCALING_TENSOR) return f8i_cpu_cast_block(ctx, a);
    /* An empty cast writes only scale_inv (backend.h). */
    if ((a->rows == 0 || a->cols == 0) && !a->scale_inv) return F8_OK;
    if (a->dbias && a->rows > 0 && a->cols > 0) { /* the contract both backends check */
        F8I_TRY(f8i_check_reduce_workspace(ctx, a->workspace, a->workspace_bytes, a->rows, a->cols, "cast"));
    }
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cpu_cast_run(ctx, a);
}

f8_status f8i_cpu_convert(f8_ctx *ctx, const f8i_convert_args *a)
{
    if (a->count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int fp8 = f8i_dtype_is_fp8(a->src_dtype);
    const float s = fp8 ? *a->scale_inv : 1.0f;
    for (int64_t i = 0; i < a->count; i++) {
        float v = f8i_any_load(a->src, a->src_dtype, i);
        f8i_hp_store(a->dst, a->dst_dtype, i, fp8 ? v * s : v);
    }
    return F8_OK;
}

f8_status f8i_cpu_transpose_u8(f8_ctx *ctx, const f8i_transpose_u8_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    if (rows == 0 || cols == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1); /* counted even when the flag skips it (f8.h) */
    if (a->noop && *a->noop == 1.0f) return F8_OK;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) a->dst[c * rows + r] = a->src[r * cols + c];
    return F8_OK;
}

f8_status f8i_cpu_reciprocal(f8_ctx *ctx, const f8i_reciprocal_args *a)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (a->noop && *a->noop == 1.0f) return F8_OK;
    *a->dst = 1.0f / *a->src;
    return F8_OK;
}

f8_status f8i_cpu_add(f8_ctx *ctx, const f8i_add_args *a)
{
    if (a->count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    for (int64_t i = 0; i < a->count; i++)
        f8i_hp_store(a->dst, a->dtype, i, f8i_any_load(a->dst, a->dtype, i) + f8i_any_load(a->src, a->dtype, i));
    return F8_OK;
}

/* ---- scaling ------------------------------------------------------------ */

f8_status f8i_cpu_scale_update(f8_ctx *ctx, const f8i_scale_update_args *a)
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

f8_status f8i_cpu_amax_scale(f8_ctx *ctx, const f8i_amax_scale_args *a)
{
    F8I_COUNT_LAUNCHES(ctx, 1); /* one launch on CUDA, empty tensors included */
    if (a->noop && *a->noop == 1.0f) return F8_OK;
    float amax = 0.0f;
    for (int64_t i = 0; i < a->count; i++) amax = fmaxf(amax, fabsf(f8i_any_load(a->src, a->src_dtype, i)));
    *a->scale = f8i_current_scale(amax, *a->scale, a->scaled_max, a->pow2);
    if (a->scale_inv) *a->scale_inv = 1.0f / *a->scale;
    if (a->amax) *a->amax = fmaxf(*a->amax, amax);
    return F8_OK;
}

f8_status f8i_cpu_telemetry_snap(f8_ctx *ctx, const f8i_telemetry_snap_args *a)
{
    if (a->count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    for (int j = 0; j < a->count; j++) {
        a->snap_f[2 * j] = a->amax[j];
        a->snap_f[2 * j + 1] = a->scale[j];
        for (int k = 0; k < 3; k++) {
            a->snap_c[3 * j + k] = a->live[3 * j + k];
            a->live[3 * j + k] = 0;
        }
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

/* ---- the table ------------------------------------------------------- */

/* One entry per kind: the typed implementation behind an untyped pointer. */
#define THUNK(K, n, T, W) \
    static f8_status run_##n(f8_ctx *ctx, const void *args) { return f8i_cpu_##n(ctx, (const T *)args); }
F8I_OP_LIST(THUNK)
#undef THUNK

#define ENTRY(K, n, T, W) [F8I_OP_##K] = run_##n,
static const f8i_op_fn cpu_ops[F8I_OP_COUNT] = {F8I_OP_LIST(ENTRY)};
#undef ENTRY

static f8_status cpu_run(f8_ctx *ctx, f8i_op_kind kind, const void *args)
{
    if ((unsigned)kind >= F8I_OP_COUNT)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "cpu backend: unknown op kind %d", (int)kind);
    return cpu_ops[kind](ctx, args);
}

static const f8i_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_transfer,
    .download = cpu_transfer,
    .synchronize = cpu_synchronize,
    .run = cpu_run,
    .state_create = cpu_state_create,
    .state_destroy = cpu_state_destroy,
    .set_stream = cpu_set_stream,
    .get_stream = cpu_get_stream,
};

const f8i_backend *f8i_cpu_backend(void) { return &cpu_backend; }
