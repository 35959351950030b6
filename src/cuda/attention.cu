/*
 * attention.cu — causal self-attention on the GPU (attention.h has the
 * formulas and the args): the entry point, which picks the fused BF16
 * tensor-core kernels (attention_fwd.cu, attention_bwd.cu) or the generic
 * kernels below, and those generic kernels.
 *
 * Design note. The fast path takes BF16 with head_dim 64 or 128 whose
 * pointers are 16-byte aligned (its rows then are: C·2 bytes is a multiple
 * of 128). Everything else the API accepts (FP32, any head_dim in
 * [1, 2^16], misaligned views) runs here, plainly and correctly, not fast:
 * one warp per query row (or, for dk/dv, per key row) computing attention.h's
 * formulas in the CPU reference's order of operations. A dot product is
 * lanes over d, FP32 fused multiply-adds, then a butterfly: every lane ends
 * with the same value, so every lane computes the same p and l. The output
 * row is built 128 columns at a time (4 per lane in registers); a head wider
 * than 128 recomputes the row's scores for each further 128 columns (no
 * workspace, and the same values each time). The forward takes m over the
 * whole row first (a pass of its own), exactly as the CPU reference does.
 * The backward is two launches, as the fast path's: dq (which also writes
 * D = Σ dy·O to the workspace) and then dk, dv (which reads it).
 *
 * Both paths: no atomics, each sum in one fixed order, so the results are
 * bitwise reproducible; forward 1 launch, backward 2.
 *
 * Before either, attention_cudnn.cu is asked: cuDNN's fused attention takes
 * BF16 calls it has a plan for (head_dim a multiple of 8 up to 128, 16-byte
 * aligned views), and these kernels run everything it declines. The ctx
 * remembers which path the last call took (f8i_cuda_attn_last_path).
 */
#include <cuda_runtime.h>
#include <string.h>

#include "attention_common.cuh"
#include "kernels_common.cuh"

#define GEN_THREADS 256 /* 8 warps, one row each */
#define GEN_PER_LANE 4  /* output columns per lane per pass: 128-wide passes */

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

/* v as T would store it (T: float or uint16_t, as load_t, kernels_common.cuh). */
template <typename T>
static __device__ __forceinline__ float round_t(float v)
{
    if constexpr (sizeof(T) == 2)
        return f8i_bf16_to_float(f8i_bf16_from_float(v));
    else
        return v;
}

/* Σ_d x[d]·y[d] over n: lane l sums d = l, l + 32, ..., then a butterfly
 * (a + b == b + a: every lane ends with the same sum). */
template <typename T>
static __device__ __forceinline__ float warp_dot(const T *x, const T *y, int64_t n, int lane)
{
    float acc = 0.0f;
    for (int64_t d = lane; d < n; d += 32) acc = __fmaf_rn(load_t(x, d), load_t(y, d), acc);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    return acc;
}

/* Shape of a call, for the generic kernels (element strides). GQA: qkv rows
 * are ld = (nh + 2G)·hd wide; query head h reads k/v head h / group. */
typedef struct gen_shape {
    int64_t B, S, nh, hd, C;
    int64_t G, group, ld; /* kv heads, nh / G, the qkv row width */
    float c, c2;
} gen_shape;

/* Element offset of k head g's column 0 in row 0 of sequence b (v is G·hd further). */
static __device__ __forceinline__ int64_t k_col(const gen_shape &sh, int64_t b, int64_t g)
{
    return b * sh.S * sh.ld + sh.C + g * sh.hd;
}

/* ------------------------------------------------------------------------ */
/* Generic kernels                                                           */
/* ------------------------------------------------------------------------ */

/* Forward. Grid: 1-D, grid-stride over rows r = bh·S + i. Block GEN_THREADS;
 * warp w owns row r, lane l its output columns d0 + l + 32k (k < 4) of the
 * pass at d0. */
template <typename T>
static __global__ void __launch_bounds__(GEN_THREADS)
    gen_fwd_kernel(gen_shape sh, const T *qkv, T *y, T *o_save, float *lse)
{
    const int lane = threadIdx.x & 31;
    const int64_t ld = sh.ld, warps = (int64_t)gridDim.x * (GEN_THREADS / 32);
    for (int64_t r = (int64_t)blockIdx.x * (GEN_THREADS / 32) + (threadIdx.x >> 5); r < sh.B * sh.nh * sh.S; r += warps) {
        const int64_t bh = r / sh.S, i = r - bh * sh.S, b = bh / sh.nh, h = bh - b * sh.nh;
        const T *q = qkv + (b * sh.S + i) * ld + h * sh.hd, *k = qkv + k_col(sh, b, h / sh.group), *v = k + sh.G * sh.hd;
        float m = -INFINITY;
        for (int64_t j = 0; j <= i; j++) m = fmaxf(m, warp_dot(q, k + j * ld, sh.hd, lane));
        float l = 0.0f;
        for (int64_t d0 = 0; d0 < sh.hd; d0 += 32 * GEN_PER_LANE) {
            float acc[GEN_PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f};
            l = 0.0f;
            for (int64_t j = 0; j <= i; j++) {
                const float p = exp2f((warp_dot(q, k + j * ld, sh.hd, lane) - m) * sh.c2);
                const float pr = round_t<T>(p);
                l += p;
#pragma unroll
                for (int u = 0; u < GEN_PER_LANE; u++) {
                    const int64_t d = d0 + lane + 32 * u;
                    if (d < sh.hd) acc[u] = __fmaf_rn(pr, load_t(v, j * ld + d), acc[u]);
                }
            }
            const float inv = 1.0f / l;
            const int64_t yo = (b * sh.S + i) * sh.C + h * sh.hd;
#pragma unroll
            for (int u = 0; u < GEN_PER_LANE; u++) {
                const int64_t d = d0 + lane + 32 * u;
                if (d < sh.hd) {
                    store_t(y, yo + d, acc[u] * inv);
                    if (o_save) store_t(o_save, yo + d, acc[u] * inv);
                }
            }
        }
        if (lse && lane == 0) lse[r] = m + log2f(l) / sh.c2;
    }
}

/* dS of the pair (query row at q, dy_i; key row at k, v) with L and D of the
 * row, and P rounded to T in *p_t. */
template <typename T>
static __device__ __forceinline__ float pair_grad(const gen_shape &sh, const T *q, const T *dyi, const T *k, const T *v,
                                                  float L, float D, int lane, float *p_t)
{
    const float s = warp_dot(q, k, sh.hd, lane), dp = warp_dot(dyi, v, sh.hd, lane);
    const float p = exp2f((s - L) * sh.c2);
    *p_t = round_t<T>(p);
    return round_t<T>(p * (dp - D) * sh.c);
}

/* Backward, dq and D. Grid: 1-D, grid-stride over rows r = bh·S + i. Block
 * GEN_THREADS; warp w owns query row r (its D, its dq columns as the forward). */
template <typename T>
static __global__ void __launch_bounds__(GEN_THREADS)
    gen_dq_kernel(gen_shape sh, const T *qkv, const T *o, const float *lse, const T *dy, T *dqkv, float *dd)
{
    const int lane = threadIdx.x & 31;
    const int64_t ld = sh.ld, warps = (int64_t)gridDim.x * (GEN_THREADS / 32);
    for (int64_t r = (int64_t)blockIdx.x * (GEN_THREADS / 32) + (threadIdx.x >> 5); r < sh.B * sh.nh * sh.S; r += warps) {
        const int64_t bh = r / sh.S, i = r - bh * sh.S, b = bh / sh.nh, h = bh - b * sh.nh;
        const int64_t qo = (b * sh.S + i) * ld + h * sh.hd, yo = (b * sh.S + i) * sh.C + h * sh.hd;
        const T *q = qkv + qo, *k = qkv + k_col(sh, b, h / sh.group), *v = k + sh.G * sh.hd;
        const float D = warp_dot(dy + yo, o + yo, sh.hd, lane), L = lse[r];
        if (lane == 0) dd[r] = D;
        for (int64_t d0 = 0; d0 < sh.hd; d0 += 32 * GEN_PER_LANE) {
            float acc[GEN_PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t j = 0; j <= i; j++) {
                float pt;
                const float ds = pair_grad(sh, q, dy + yo, k + j * ld, v + j * ld, L, D, lane, &pt);
#pragma unroll
                for (int u = 0; u < GEN_PER_LANE; u++) {
                    const int64_t d = d0 + lane + 32 * u;
                    if (d < sh.hd) acc[u] = __fmaf_rn(ds, load_t(k, j * ld + d), acc[u]);
                }
            }
#pragma unroll
            for (int u = 0; u < GEN_PER_LANE; u++) {
                const int64_t d = d0 + lane + 32 * u;
                if (d < sh.hd) store_t(dqkv, qo + d, acc[u]);
            }
        }
    }
}

/* Backward, dk and dv (after gen_dq_kernel wrote D). Grid: 1-D, grid-stride
 * over key rows r = (b·G + g)·S + j of the k/v heads. Block GEN_THREADS;
 * warp w owns key row r, lane l its dk and dv columns as the forward's; the
 * sums run over the group's query heads in order, then queries i >= j. */
template <typename T>
static __global__ void __launch_bounds__(GEN_THREADS)
    gen_dkv_kernel(gen_shape sh, const T *qkv, const float *lse, const T *dy, T *dqkv, const float *dd)
{
    const int lane = threadIdx.x & 31;
    const int64_t ld = sh.ld, warps = (int64_t)gridDim.x * (GEN_THREADS / 32);
    for (int64_t r = (int64_t)blockIdx.x * (GEN_THREADS / 32) + (threadIdx.x >> 5); r < sh.B * sh.G * sh.S; r += warps) {
        const int64_t bg = r / sh.S, j = r - bg * sh.S, b = bg / sh.G, g = bg - b * sh.G;
        const int64_t ko = k_col(sh, b, g) + j * ld;
        const T *k = qkv + ko, *v = k + sh.G * sh.hd;
        for (int64_t d0 = 0; d0 < sh.hd; d0 += 32 * GEN_PER_LANE) {
            float ak[GEN_PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f}, av[GEN_PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t h = g * sh.group; h < (g + 1) * sh.group; h++) {
                const int64_t bh = b * sh.nh + h;
                const T *q = qkv + b * sh.S * ld + h * sh.hd, *dyh = dy + b * sh.S * sh.C + h * sh.hd;
                for (int64_t i = j; i < sh.S; i++) {
                    float pt;
                    const float ds =
                        pair_grad(sh, q + i * ld, dyh + i * sh.C, k, v, lse[bh * sh.S + i], dd[bh * sh.S + i], lane, &pt);
#pragma unroll
                    for (int u = 0; u < GEN_PER_LANE; u++) {
                        const int64_t d = d0 + lane + 32 * u;
                        if (d < sh.hd) {
                            ak[u] = __fmaf_rn(ds, load_t(q, i * ld + d), ak[u]);
                            av[u] = __fmaf_rn(pt, load_t(dyh, i * sh.C + d), av[u]);
                        }
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < GEN_PER_LANE; u++) {
                const int64_t d = d0 + lane + 32 * u;
                if (d < sh.hd) {
                    store_t(dqkv, ko + d, ak[u]);
                    store_t(dqkv, ko + sh.G * sh.hd + d, av[u]);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The fast kernels' shape fields of a call (the pointers are the caller's to set). */
static att_fast_args fast_args_of(int64_t seq, int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale,
                                  float scale_log2)
{
    att_fast_args f;
    memset(&f, 0, sizeof f);
    f.seq = (int)seq;
    f.n_head = (int)n_head;
    f.C = n_head * head_dim;
    f.n_kv_head = (int)(n_kv_head > 0 ? n_kv_head : n_head);
    f.ld = (n_head + 2 * (int64_t)f.n_kv_head) * head_dim;
    f.scale = scale;
    f.scale_log2 = scale_log2;
    return f;
}

static bool fast_shape(f8_dtype dt, int64_t hd) { return dt == F8_DTYPE_BF16 && (hd == 64 || hd == 128); }

/* The FP8 forward (attention.h's FP8 chain), the fallback of cuDNN's FP8
 * graph and the CPU oracle's order of operations: three passes over the
 * keys of a row (m; l; then P normalized, scaled and rounded to E4M3, and
 * its product with v8). Codes are decoded exactly; sums are FP32.
 * Grid, block and ownership as gen_fwd_kernel; each thread keeps its
 * running amaxes of P and O, and the block maxes them into the slots once. */
typedef struct fp8_scales {
    float *s_scale, *s_scale_inv; /* the S slot's: read, or (s_now > 0) written by thread 0 of block 0 */
    const float *dq, *o_scale, *o_scale_inv; /* O8's (current scaling: the QKV slot's scale and dq) */
    float *s_amax, *o_amax;
    float s_now; /* > 0: S's scale this call (current scaling) */
    uint8_t *o8; /* the O8 codes kept for an FP8 backward, or NULL; o8_scale_inv their descale */
    float *o8_scale_inv;
} fp8_scales;

static __device__ __forceinline__ float e4m3(uint8_t b) { return f8i_fp8_decode(b, 0); }

static __device__ __forceinline__ float warp_dot8(const uint8_t *x, const uint8_t *y, int64_t n, int lane)
{
    float acc = 0.0f;
    for (int64_t d = lane; d < n; d += 32) acc = __fmaf_rn(e4m3(x[d]), e4m3(y[d]), acc);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    return acc;
}

static __global__ void __launch_bounds__(GEN_THREADS)
    gen_fwd_fp8_kernel(gen_shape sh, fp8_scales f, const uint8_t *qkv, uint16_t *y, uint16_t *o_save, float *lse)
{
    const int lane = threadIdx.x & 31;
    const int64_t ld = sh.ld, warps = (int64_t)gridDim.x * (GEN_THREADS / 32); /* GQA: (nh + 2G)·hd */
    const bool now = f.s_now > 0.0f;
    const float dq = *f.dq, ss = now ? f.s_now : *f.s_scale, ds = now ? __fdiv_rn(1.0f, f.s_now) : *f.s_scale_inv;
    const float so = *f.o_scale, dso = *f.o_scale_inv;
    if (now && blockIdx.x == 0 && threadIdx.x == 0) *f.s_scale = ss, *f.s_scale_inv = ds; /* no block reads them */
    if (f.o8 && blockIdx.x == 0 && threadIdx.x == 0) *f.o8_scale_inv = dso;
    float amax_s = 0.0f, amax_o = 0.0f;
    for (int64_t r = (int64_t)blockIdx.x * (GEN_THREADS / 32) + (threadIdx.x >> 5); r < sh.B * sh.nh * sh.S; r += warps) {
        const int64_t bh = r / sh.S, i = r - bh * sh.S, b = bh / sh.nh, h = bh - b * sh.nh;
        const uint8_t *q = qkv + (b * sh.S + i) * ld + h * sh.hd;
        const uint8_t *k = qkv + b * sh.S * ld + sh.C + (h / sh.group) * sh.hd, *v = k + sh.G * sh.hd; /* its group's k, v */
        float m = -INFINITY, l = 0.0f;
        for (int64_t j = 0; j <= i; j++) m = fmaxf(m, __fmul_rn(__fmul_rn(warp_dot8(q, k + j * ld, sh.hd, lane), dq), dq));
        for (int64_t j = 0; j <= i; j++)
            l += exp2f((__fmul_rn(__fmul_rn(warp_dot8(q, k + j * ld, sh.hd, lane), dq), dq) - m) * sh.c2);
        for (int64_t d0 = 0; d0 < sh.hd; d0 += 32 * GEN_PER_LANE) {
            float acc[GEN_PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t j = 0; j <= i; j++) {
                const float s = __fmul_rn(__fmul_rn(warp_dot8(q, k + j * ld, sh.hd, lane), dq), dq);
                const float pn = __fdiv_rn(exp2f((s - m) * sh.c2), l);
                amax_s = fmaxf(amax_s, pn);
                const float p8 = e4m3(f8i_fp8_encode(__fmul_rn(pn, ss), 0));
#pragma unroll
                for (int u = 0; u < GEN_PER_LANE; u++) {
                    const int64_t d = d0 + lane + 32 * u;
                    if (d < sh.hd) acc[u] = __fmaf_rn(p8, e4m3(v[j * ld + d]), acc[u]);
                }
            }
#pragma unroll
            for (int u = 0; u < GEN_PER_LANE; u++) {
                const int64_t d = d0 + lane + 32 * u;
                if (d >= sh.hd) continue;
                const float ov = __fmul_rn(__fmul_rn(acc[u], ds), dq);
                amax_o = fmaxf(amax_o, fabsf(ov));
                const uint8_t code = f8i_fp8_encode(__fmul_rn(ov, so), 0);
                const uint16_t yv = f8i_bf16_from_float(__fmul_rn(e4m3(code), dso));
                if (f.o8) f.o8[(b * sh.S + i) * sh.C + h * sh.hd + d] = code;
                y[(b * sh.S + i) * sh.C + h * sh.hd + d] = yv;
                if (o_save) o_save[(b * sh.S + i) * sh.C + h * sh.hd + d] = yv;
            }
        }
        if (lse && lane == 0) lse[r] = m + log2f(l) / sh.c2;
    }
    block_amax_atomic<GEN_THREADS>(amax_s, f.s_amax);
    block_amax_atomic<GEN_THREADS>(amax_o, f.o_amax);
}

static gen_shape shape_of(int64_t B, int64_t S, int64_t nh, int64_t G, int64_t hd, float c, float c2)
{
    gen_shape sh;
    if (G <= 0) G = nh; /* args made before GQA: multi-head */
    sh.B = B, sh.S = S, sh.nh = nh, sh.hd = hd, sh.C = nh * hd, sh.c = c, sh.c2 = c2;
    sh.G = G, sh.group = nh / G, sh.ld = (nh + 2 * G) * hd;
    return sh;
}

static f8_status forward(f8_ctx *ctx, const f8i_attn_fwd_args *a)
{
    const int64_t BH = a->batch * a->n_head;
    int ran = 0;
    const f8_status cs = f8i_cudnn_attn_fwd(ctx, a, &ran);
    if (cs != F8_OK || ran) return cs;
    f8i_cuda(ctx)->attn_last_path = F8I_ATTN_PATH_OWN;
    if (a->fp8) {
        const gen_shape sh = shape_of(a->batch, a->seq, a->n_head, a->n_kv_head, a->head_dim, a->scale, a->scale_log2);
        const fp8_scales f = {a->s_scale, a->s_scale_inv, a->qkv_scale_inv, a->o_scale, a->o_scale_inv,
                              a->s_amax,  a->o_amax,      a->s_scale_now,   a->o8,      a->o8_scale_inv};
        F8I_COUNT_LAUNCHES(ctx, 1);
        gen_fwd_fp8_kernel<<<grid_size(ctx, BH * a->seq * 32, GEN_THREADS), GEN_THREADS, 0, f8i_stream(ctx)>>>(
            sh, f, (const uint8_t *)a->qkv, (uint16_t *)a->y, (uint16_t *)a->o, a->lse);
        return f8i_cuda_launch_check(ctx, "attention gen_fwd_fp8_kernel");
    }
    if (fast_shape(a->dtype, a->head_dim) && aligned16(a->qkv) && aligned16(a->y) && aligned16(a->o)) {
        att_fast_args f = fast_args_of(a->seq, a->n_head, a->n_kv_head, a->head_dim, a->scale, a->scale_log2);
        f.qkv = (const uint16_t *)a->qkv;
        f.y = (uint16_t *)a->y;
        f.o_save = (uint16_t *)a->o;
        f.lse = a->lse;
        return f8i_att_fast_forward(ctx, &f, BH, (int)a->head_dim);
    }
    const gen_shape sh = shape_of(a->batch, a->seq, a->n_head, a->n_kv_head, a->head_dim, a->scale, a->scale_log2);
    const int grid = grid_size(ctx, BH * a->seq * 32, GEN_THREADS);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (a->dtype == F8_DTYPE_BF16)
        gen_fwd_kernel<uint16_t><<<grid, GEN_THREADS, 0, f8i_stream(ctx)>>>(sh, (const uint16_t *)a->qkv, (uint16_t *)a->y,
                                                                           (uint16_t *)a->o, a->lse);
    else
        gen_fwd_kernel<float><<<grid, GEN_THREADS, 0, f8i_stream(ctx)>>>(sh, (const float *)a->qkv, (float *)a->y, (float *)a->o,
                                                                        a->lse);
    return f8i_cuda_launch_check(ctx, "attention gen_fwd_kernel");
}

static f8_status fp8_backward(f8_ctx *ctx, const f8i_attn_bwd_args *a);

static f8_status backward(f8_ctx *ctx, const f8i_attn_bwd_args *a)
{
    if (a->fp8) return fp8_backward(ctx, a);
    const int64_t BH = a->batch * a->n_head;
    int ran = 0;
    const f8_status cs = f8i_cudnn_attn_bwd(ctx, a, &ran);
    if (cs != F8_OK || ran) return cs;
    f8i_cuda(ctx)->attn_last_path = F8I_ATTN_PATH_OWN;
    if (fast_shape(a->dtype, a->head_dim) && aligned16(a->qkv) && aligned16(a->o) && aligned16(a->dy) &&
        aligned16(a->dqkv)) {
        att_fast_args f = fast_args_of(a->seq, a->n_head, a->n_kv_head, a->head_dim, a->scale, a->scale_log2);
        f.qkv = (const uint16_t *)a->qkv;
        f.o = (const uint16_t *)a->o;
        f.dy = (const uint16_t *)a->dy;
        f.dqkv = (uint16_t *)a->dqkv;
        f.lse = (float *)a->lse;
        f.d = a->d;
        return f8i_att_fast_backward(ctx, &f, BH, (int)a->head_dim);
    }
    const gen_shape sh = shape_of(a->batch, a->seq, a->n_head, a->n_kv_head, a->head_dim, a->scale, a->scale_log2);
    const int grid = grid_size(ctx, BH * a->seq * 32, GEN_THREADS);
    cudaStream_t st = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 2);
    if (a->dtype == F8_DTYPE_BF16) {
        const uint16_t *qkv = (const uint16_t *)a->qkv, *o = (const uint16_t *)a->o, *dy = (const uint16_t *)a->dy;
        gen_dq_kernel<uint16_t><<<grid, GEN_THREADS, 0, st>>>(sh, qkv, o, a->lse, dy, (uint16_t *)a->dqkv, a->d);
        gen_dkv_kernel<uint16_t><<<grid, GEN_THREADS, 0, st>>>(sh, qkv, a->lse, dy, (uint16_t *)a->dqkv, a->d);
    } else {
        const float *qkv = (const float *)a->qkv, *o = (const float *)a->o, *dy = (const float *)a->dy;
        gen_dq_kernel<float><<<grid, GEN_THREADS, 0, st>>>(sh, qkv, o, a->lse, dy, (float *)a->dqkv, a->d);
        gen_dkv_kernel<float><<<grid, GEN_THREADS, 0, st>>>(sh, qkv, a->lse, dy, (float *)a->dqkv, a->d);
    }
    return f8i_cuda_launch_check(ctx, "attention gen_dq_kernel/gen_dkv_kernel");
}

/* The FP8 backward (attention.h's chain): cuDNN's FP8 backward graph where
 * it takes the call (attention_cudnn_fp8.cu); else f8's path, the BF16
 * backward on the dequantized codes with the BF16 o and dy (its numerics
 * are the F16 backward's: no dO8, P8 or dS8 roundings, no dP or dQKV amax;
 * attention.h says so). */
static f8_status fp8_backward(f8_ctx *ctx, const f8i_attn_bwd_args *a)
{
    int ran = 0;
    F8I_TRY(f8i_cudnn_fp8_attn_bwd(ctx, a, &ran));
    if (ran) return F8_OK;
    const int64_t G = a->n_kv_head > 0 ? a->n_kv_head : a->n_head, W = (a->n_head + 2 * G) * a->head_dim;
    F8I_TRY(f8i_cuda_convert(ctx, a->qkv, F8_DTYPE_E4M3, a->qkv_scale_inv, a->qkv_hp, F8_DTYPE_BF16, a->batch * a->seq * W));
    f8i_attn_bwd_args b = *a;
    b.fp8 = 0;
    b.qkv = a->qkv_hp;
    F8I_TRY(backward(ctx, &b));
    f8i_cuda(ctx)->attn_last_path = F8I_ATTN_PATH_OWN; /* f8's FP8-backward path (whatever ran its BF16 part) */
    return F8_OK;
}

f8_status f8i_cuda_attn_fwd(f8_ctx *ctx, const f8i_attn_fwd_args *a) { return forward(ctx, a); }
f8_status f8i_cuda_attn_bwd(f8_ctx *ctx, const f8i_attn_bwd_args *a) { return backward(ctx, a); }
