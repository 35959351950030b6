/*
 * gemm_lt.cuh — the cuBLASLt set-up both GEMM paths share (gemm.cu: the
 * per-tensor operands; gemm_block.cu: the block-scaled ones): dtype and
 * alignment classes, the release of a plan's descriptor and layouts, and the
 * one heuristic query; and the fallback kernels' element access, register
 * tile and epilogue. Only src/cuda/gemm*.cu include it.
 */
#ifndef F8_CUDA_GEMM_LT_CUH
#define F8_CUDA_GEMM_LT_CUH

#include <cublasLt.h>
#include <string.h>

#include "cuda_state.cuh"
#include "core/f8i.h"
#include "core/numerics.h"

/* log2 of the largest power of two <= 256 dividing the address (8 for
 * NULL): the alignment class a plan key holds, since the heuristic's choice
 * depends on it (MIN_ALIGNMENT_*_BYTES). */
static inline uint32_t f8i_lt_align_log2(const void *p)
{
    const uintptr_t u = (uintptr_t)p;
    if (u == 0) return 8;
    const uint32_t tz = (uint32_t)__builtin_ctzll((unsigned long long)u);
    return tz > 8 ? 8 : tz;
}

/* The alignments in bytes a heuristic query states (MIN_ALIGNMENT_*), for
 * cuBLASLt's A' (our b), B' (our a), C' (the addend c, else D) and D'. */
static inline void f8i_lt_query_aligns(const void *a, const void *b, const void *c, const void *d, uint32_t al[4])
{
    al[0] = 1u << f8i_lt_align_log2(b), al[1] = 1u << f8i_lt_align_log2(a);
    al[2] = 1u << f8i_lt_align_log2(c ? c : d), al[3] = 1u << f8i_lt_align_log2(d);
}

static inline cudaDataType_t f8i_lt_type(f8_dtype t)
{
    switch (t) {
    case F8_DTYPE_BF16: return CUDA_R_16BF;
    case F8_DTYPE_E4M3: return CUDA_R_8F_E4M3;
    case F8_DTYPE_E5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
    }
}

/* Destroy a plan's descriptor and three layouts (C = D shares D's); any may
 * be NULL. All four are NULL after. */
static inline void f8i_lt_release(cublasLtMatmulDesc_t *desc, cublasLtMatrixLayout_t *lay_a,
                                  cublasLtMatrixLayout_t *lay_b, cublasLtMatrixLayout_t *lay_d)
{
    if (*desc) cublasLtMatmulDescDestroy(*desc);
    if (*lay_a) cublasLtMatrixLayoutDestroy(*lay_a);
    if (*lay_b) cublasLtMatrixLayoutDestroy(*lay_b);
    if (*lay_d) cublasLtMatrixLayoutDestroy(*lay_d);
    *desc = NULL;
    *lay_a = *lay_b = *lay_d = NULL;
}

/* Up to want algorithms from the heuristic for (desc, A', B', D' as C' and
 * D'), at most ws workspace bytes, with the operands' alignments in bytes
 * (al_*: cuBLASLt's A' = our b, B' = our a), best first, into res; *n_res
 * of them usable (state SUCCESS and within ws). *n_res = 0 (and SUCCESS)
 * when cuBLASLt has none for it: "no algorithm for this configuration" is
 * an answer, not an error. */
static inline cublasStatus_t f8i_lt_candidates(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc,
                                               cublasLtMatrixLayout_t lay_a, cublasLtMatrixLayout_t lay_b,
                                               cublasLtMatrixLayout_t lay_d, uint64_t ws, uint32_t al_a, uint32_t al_b,
                                               uint32_t al_c, uint32_t al_d, int want,
                                               cublasLtMatmulHeuristicResult_t *res, int *n_res)
{
    *n_res = 0;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d);
    /* No in-place split-K: its counters need a memset before every matmul,
     * which costs a graph node (and host time) per GEMM on each replay. */
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                  sizeof schemes);
    if (st == CUBLAS_STATUS_SUCCESS) {
        int got = 0;
        memset(res, 0, sizeof *res * (size_t)want);
        st = cublasLtMatmulAlgoGetHeuristic(lt, desc, lay_a, lay_b, lay_d, lay_d, pref, want, res, &got);
        if (st == CUBLAS_STATUS_SUCCESS)
            for (int i = 0; i < got; i++)
                if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws) res[(*n_res)++] = res[i];
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH)
            st = CUBLAS_STATUS_SUCCESS;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

/* The heuristic's first algorithm (f8i_lt_candidates), *found = 0 when it
 * has none. */
static inline cublasStatus_t f8i_lt_heuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t lay_a,
                                              cublasLtMatrixLayout_t lay_b, cublasLtMatrixLayout_t lay_d, uint64_t ws,
                                              uint32_t al_a, uint32_t al_b, uint32_t al_c, uint32_t al_d,
                                              cublasLtMatmulAlgo_t *algo, int *found)
{
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    const cublasStatus_t st = f8i_lt_candidates(lt, desc, lay_a, lay_b, lay_d, ws, al_a, al_b, al_c, al_d, 1, &res, &n);
    *found = st == CUBLAS_STATUS_SUCCESS && n > 0;
    if (*found) *algo = res.algo;
    return st;
}

/* A GEMM plan's key in the plan cache (plan_cache.cuh): the shape, D's
 * leading dimension, a word of dtypes and flags each path lays out its own
 * way (types), and the alignment classes of the pointers the heuristic
 * reads (aligns: f8i_lt_aligns). No padding: compared as bytes. */
typedef struct f8i_gemm_key {
    int64_t m, n, k, ldd;
    uint32_t types, aligns;
} f8i_gemm_key;

/* 4 bits per pointer, the i-th at bit 4·i: f8i_lt_align_log2, 0 for NULL
 * (at most 8 pointers). */
static inline uint32_t f8i_lt_aligns(const void *const *ptrs, int n)
{
    uint32_t a = 0;
    for (int i = 0; i < n && i < 8; i++) a |= (ptrs[i] ? f8i_lt_align_log2(ptrs[i]) : 0u) << (4 * i);
    return a;
}

static inline f8i_gemm_key f8i_gemm_key_of(int64_t m, int64_t n, int64_t k, int64_t ldd, uint32_t types,
                                           uint32_t aligns)
{
    f8i_gemm_key key;
    key.m = m, key.n = n, key.k = k, key.ldd = ldd;
    key.types = types, key.aligns = aligns;
    return key;
}

/* One matmul of a cuBLASLt plan: D' = op(A')·op(B') + beta·C' with A' = our
 * b, B' = our a (gemm.cu's mapping), C' = c under D's layout (the addend, or
 * D itself for the accumulate: beta 1) or none (c NULL: beta 0), alpha 1. */
typedef struct f8i_lt_call {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay_a, lay_b, lay_d; /* A' (our b), B' (our a), C' = D' */
    const cublasLtMatmulAlgo_t *algo;
    const void *a, *b, *c;
    void *d;
} f8i_lt_call;

/* Enqueue call on the GEMM op's handle and the cuBLASLt part of its
 * workspace, on the ctx's stream. NOT_SUPPORTED: *refused = 1 and F8_OK,
 * nothing enqueued (the caller's plan turns to its other path); another
 * failure: F8_ERR_CUBLAS naming who and the shape m x n x k; success counts
 * one launch. */
static inline f8_status f8i_lt_matmul(f8_ctx *ctx, const f8i_lt_call *call, const char *who, int64_t m, int64_t n,
                                      int64_t k, int *refused)
{
    void *handle = NULL, *ws = NULL;
    size_t ws_bytes = 0;
    *refused = 0;
    F8I_TRY(f8i_cuda_gemm_lt(ctx, &handle, &ws, &ws_bytes));
    const float alpha = 1.0f, beta = call->c ? 1.0f : 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul((cublasLtHandle_t)handle, call->desc, &alpha, call->b, call->lay_a, call->a, call->lay_b, &beta,
                       call->c ? call->c : call->d, call->lay_d, call->d, call->lay_d, call->algo, ws, ws_bytes,
                       f8i_stream(ctx));
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
        *refused = 1;
        return F8_OK;
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        return f8i_error(ctx, F8_ERR_CUBLAS, "%s %lldx%lldx%lld: cublasLtMatmul: %s", who, (long long)m, (long long)n,
                         (long long)k, cublasLtGetStatusName(st));
    F8I_COUNT_LAUNCHES(ctx, 1);
    return F8_OK;
}

/* GEMM tuning (f8_ctx_set_gemm_tune): the heuristic's first
 * F8I_LT_TUNE_CANDIDATES algorithms timed on the call, F8I_LT_TUNE_REPS
 * matmuls each after one untimed; a temporary D for calls that read D
 * (beta 1) only up to F8I_LT_TUNE_TEMP_MAX bytes. */
#ifndef F8I_LT_TUNE_CANDIDATES /* a build may time more (bench/RESULTS.md: 8 against 32) */
#define F8I_LT_TUNE_CANDIDATES 8
#endif
#define F8I_LT_TUNE_REPS 3
#define F8I_LT_TUNE_TEMP_MAX ((size_t)64 << 20)

/* With the ctx's GEMM tuning on and the plan not yet tuned (*done = 0),
 * tune call's algorithm (*algo, the heuristic's first; d_bytes D's size;
 * the query's alignments are the call's pointers'): on return *algo is the
 * fastest of the candidates (the heuristic's order breaks ties) and *done =
 * 1, or, in a graph capture (no timing there: nothing runs), *done = 0 and
 * *algo is unchanged. Otherwise nothing. Timing writes call->d only when the call has no C (beta 0: the
 * call overwrites all of D after); with a C (the accumulate, an addend) the
 * candidates run on a zeroed temporary D, or not at all past
 * F8I_LT_TUNE_TEMP_MAX or if it cannot be allocated (*done = 1, the
 * heuristic's choice kept). Synchronizes the stream; the timing launches
 * are not counted. */
static inline f8_status f8i_lt_tune(f8_ctx *ctx, const f8i_lt_call *call, size_t d_bytes, cublasLtMatmulAlgo_t *algo,
                                    int *done)
{
    if (!ctx->gemm_tune || *done) return F8_OK;
    cudaStream_t s = f8i_stream(ctx);
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    F8I_TRY(f8i_cuda_check(ctx, cudaStreamIsCapturing(s, &cap), "gemm tuning: cudaStreamIsCapturing"));
    if (cap != cudaStreamCaptureStatusNone) return F8_OK;
    *done = 1;
    void *handle = NULL, *ws = NULL;
    size_t ws_bytes = 0;
    F8I_TRY(f8i_cuda_gemm_lt(ctx, &handle, &ws, &ws_bytes));
    uint32_t al[4]; /* as the plan's query: C' is the addend or D (c here is D for the accumulate) */
    f8i_lt_query_aligns(call->a, call->b, call->c, call->d, al);
    cublasLtMatmulHeuristicResult_t res[F8I_LT_TUNE_CANDIDATES];
    int n = 0;
    cublasStatus_t st = f8i_lt_candidates((cublasLtHandle_t)handle, call->desc, call->lay_a, call->lay_b, call->lay_d,
                                          ws_bytes, al[0], al[1], al[2], al[3], F8I_LT_TUNE_CANDIDATES, res, &n);
    if (st != CUBLAS_STATUS_SUCCESS)
        return f8i_error(ctx, F8_ERR_CUBLAS, "gemm tuning: cublasLtMatmulAlgoGetHeuristic: %s", cublasLtGetStatusName(st));
    if (n < 2) return F8_OK;
    void *d = call->d, *temp = NULL;
    if (call->c) {
        if (d_bytes > F8I_LT_TUNE_TEMP_MAX) return F8_OK;
        if (cudaMalloc(&temp, d_bytes) != cudaSuccess) {
            (void)cudaGetLastError(); /* no room: keep the heuristic's choice */
            return F8_OK;
        }
        d = temp;
    }
    cudaEvent_t ev[2] = {NULL, NULL};
    cudaError_t err = temp ? cudaMemsetAsync(temp, 0, d_bytes, s) : cudaSuccess;
    if (err == cudaSuccess) err = cudaEventCreate(&ev[0]);
    if (err == cudaSuccess) err = cudaEventCreate(&ev[1]);
    const float alpha = 1.0f, beta = call->c ? 1.0f : 0.0f;
    float best = 0.0f;
    int chosen = -1;
    for (int i = 0; i < n && err == cudaSuccess; i++) {
        st = CUBLAS_STATUS_SUCCESS;
        for (int r = 0; r <= F8I_LT_TUNE_REPS && st == CUBLAS_STATUS_SUCCESS; r++) {
            if (r == 1) err = cudaEventRecord(ev[0], s);
            st = cublasLtMatmul((cublasLtHandle_t)handle, call->desc, &alpha, call->b, call->lay_a, call->a, call->lay_b,
                                &beta, d, call->lay_d, d, call->lay_d, &res[i].algo, ws, ws_bytes, s);
        }
        if (st != CUBLAS_STATUS_SUCCESS) continue; /* this candidate refuses the call: not a choice */
        float ms = 0.0f;
        err = cudaEventRecord(ev[1], s);
        if (err == cudaSuccess) err = cudaEventSynchronize(ev[1]);
        if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, ev[0], ev[1]);
        if (err == cudaSuccess && (chosen < 0 || ms < best)) best = ms, chosen = i;
    }
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    if (temp) cudaFree(temp);
    if (err != cudaSuccess) return f8i_cuda_check(ctx, err, "gemm tuning");
    if (chosen >= 0) *algo = res[chosen].algo, ctx->gemm_tuned++;
    return F8_OK;
}

/* The own fallback kernels' launch (gemm_block.cu's, gemm_rowwise.cu's): a
 * 2-D grid of tile x tile pieces of D [m, n] (x over columns, y over rows,
 * each capped at 65535: the kernels walk the rest), and KERNEL<AE5, BE5>
 * chosen by the operands' dtypes (1: E5M2, 0: E4M3). */
static inline dim3 f8i_fb_grid(int64_t m, int64_t n, int64_t tile)
{
    int64_t gx = (n + tile - 1) / tile, gy = (m + tile - 1) / tile;
    return dim3((unsigned)(gx > 65535 ? 65535 : gx), (unsigned)(gy > 65535 ? 65535 : gy));
}
#define F8I_FB_LAUNCH(KERNEL, a_dtype, b_dtype, grid, block, stream, arg)                                          \
    do {                                                                                                          \
        const int ae5_ = (a_dtype) == F8_DTYPE_E5M2, be5_ = (b_dtype) == F8_DTYPE_E5M2;                           \
        if (ae5_)                                                                                                 \
            be5_ ? KERNEL<1, 1><<<grid, block, 0, stream>>>(arg) : KERNEL<1, 0><<<grid, block, 0, stream>>>(arg); \
        else                                                                                                      \
            be5_ ? KERNEL<0, 1><<<grid, block, 0, stream>>>(arg) : KERNEL<0, 0><<<grid, block, 0, stream>>>(arg); \
    } while (0)

/* D, C and bias elements of the fallback kernels, FP32 or BF16 (BF16 stores
 * round to nearest even). */
static __device__ __forceinline__ float f8i_lt_load(const void *p, int64_t i, f8_dtype dt)
{
    return dt == F8_DTYPE_BF16 ? f8i_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static __device__ __forceinline__ void f8i_lt_store(void *p, int64_t i, f8_dtype dt, float v)
{
    if (dt == F8_DTYPE_BF16)
        ((uint16_t *)p)[i] = f8i_bf16_from_float(v);
    else
        ((float *)p)[i] = v;
}

/* The fallback kernels' tiling (gemm_kernels.cu's per-tensor one and
 * gemm_block.cu's block-scaled one, on CUDA cores): a 16x16 block computes
 * a 64x64 tile of D, each thread a 4x4 register tile (rows ty + 16·r,
 * cols tx + 16·c), stepping K by 16 through shared-memory operand tiles
 * as[kk][i] = A(i0 + i, k0 + kk), bs[kk][j] = B(j0 + j, k0 + kk). */
#define F8I_FB_THREADS 16
#define F8I_FB_TILE 64
#define F8I_FB_PER (F8I_FB_TILE / F8I_FB_THREADS)
#define F8I_FB_K 16
static_assert(F8I_FB_TILE * F8I_FB_K == 4 * F8I_FB_THREADS * F8I_FB_THREADS, "each thread loads 4 elements of a tile");

typedef float f8i_fb_acc[F8I_FB_PER][F8I_FB_PER];
typedef float f8i_fb_stage[F8I_FB_K][F8I_FB_TILE + 1];

/* The t-th 64x64 tile of D [m, n] this block computes: 1 with its corner
 * (*i0, *j0), 0 past the last. The tiles are (blockIdx.y + a·gridDim.y,
 * blockIdx.x + b·gridDim.x), b fastest: a grid-stride walk in both
 * dimensions, so any m, n fits the grid limits. */
static __device__ __forceinline__ int f8i_fb_tile(int64_t m, int64_t n, int64_t t, int64_t *i0, int64_t *j0)
{
    const int64_t tiles_m = (m + F8I_FB_TILE - 1) / F8I_FB_TILE, tiles_n = (n + F8I_FB_TILE - 1) / F8I_FB_TILE;
    const int64_t per_row = (tiles_n - (int64_t)blockIdx.x + gridDim.x - 1) / gridDim.x; /* this block's columns */
    if (per_row <= 0) return 0;
    const int64_t tm = blockIdx.y + (t / per_row) * (int64_t)gridDim.y;
    if (tm >= tiles_m) return 0;
    *i0 = tm * F8I_FB_TILE;
    *j0 = (blockIdx.x + (t % per_row) * (int64_t)gridDim.x) * F8I_FB_TILE;
    return 1;
}

static __device__ __forceinline__ void f8i_fb_zero(f8i_fb_acc &acc)
{
#pragma unroll
    for (int r = 0; r < F8I_FB_PER; r++)
#pragma unroll
        for (int c = 0; c < F8I_FB_PER; c++) acc[r][c] = 0.0f;
}

/* acc[r][c] += Σ_kk as[kk][ty + 16·r] · bs[kk][tx + 16·c] over one staged
 * K step: one fmaf per term, in kk order (the summation order both
 * kernels' contracts rely on). */
static __device__ __forceinline__ void f8i_fb_mac(const f8i_fb_stage &as, const f8i_fb_stage &bs, f8i_fb_acc &acc,
                                                  int tx, int ty)
{
#pragma unroll
    for (int kk = 0; kk < F8I_FB_K; kk++) {
        float av[F8I_FB_PER], bv[F8I_FB_PER];
#pragma unroll
        for (int r = 0; r < F8I_FB_PER; r++) av[r] = as[kk][ty + F8I_FB_THREADS * r];
#pragma unroll
        for (int c = 0; c < F8I_FB_PER; c++) bv[c] = bs[kk][tx + F8I_FB_THREADS * c];
#pragma unroll
        for (int r = 0; r < F8I_FB_PER; r++)
#pragma unroll
            for (int c = 0; c < F8I_FB_PER; c++) acc[r][c] = __fmaf_rn(av[r], bv[c], acc[r][c]);
    }
}

/* The thread's elements of D's tile at (i0, j0), inside [m, n]:
 * v = alpha·acc (+ D if accumulate, else + C if c) (+ bias[j]), each sum in
 * FP32, stored once in D's dtype. alpha 1 is exact (v·1 = v). */
static __device__ __forceinline__ void f8i_fb_store(void *d, f8_dtype d_dtype, const void *c, const void *bias,
                                                    f8_dtype bias_dtype, int accumulate, int64_t m, int64_t n,
                                                    int64_t i0, int64_t j0, int tx, int ty, float alpha,
                                                    const f8i_fb_acc &acc)
{
#pragma unroll
    for (int r = 0; r < F8I_FB_PER; r++) {
        const int64_t i = i0 + ty + F8I_FB_THREADS * r;
#pragma unroll
        for (int cc = 0; cc < F8I_FB_PER; cc++) {
            const int64_t j = j0 + tx + F8I_FB_THREADS * cc;
            if (i >= m || j >= n) continue;
            float v = alpha * acc[r][cc];
            if (accumulate) v = v + f8i_lt_load(d, i * n + j, d_dtype);
            else if (c) v = v + f8i_lt_load(c, i * n + j, d_dtype);
            if (bias) v = v + f8i_lt_load(bias, j, bias_dtype);
            f8i_lt_store(d, i * n + j, d_dtype, v);
        }
    }
}

#endif /* F8_CUDA_GEMM_LT_CUH */
