/*
 * bench_util.cu — the nvcc-compiled helpers every benchmark links (declared,
 * with their contracts, in bench_util.h): an empty kernel for the launch-cost
 * floor, a spin kernel that keeps the GPU busy while the host queues timed
 * work, a random fill (benchmarks never run on zeros), and a raw cuBLASLt
 * matmul set up once, the yardstick for f8's own GEMM.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core/dtype.h"

/* grid 1, block 1: nothing; its launch is the whole cost. */
static __global__ void empty_kernel(void) {}

/* grid 1, block 1: returns once `ns` nanoseconds of %globaltimer passed. */
static __global__ void spin_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

static __device__ __forceinline__ unsigned long long mix64(unsigned long long z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Grid-stride over count elements, one element per thread per step: a
 * Box-Muller normal from two 24-bit uniforms hashed from (seed, i). */
static __global__ void fill_kernel(void *dst, int dtype, long long count, unsigned long long seed, float sd)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned long long h = mix64(seed * 0x9E3779B97F4A7C15ull + (unsigned long long)i);
        float u1 = ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
        float u2 = ((float)(h & 0xFFFFFFu) + 0.5f) * (1.0f / 16777216.0f);
        float v = sd * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        switch (dtype) {
        case F8_DTYPE_FP32: ((float *)dst)[i] = v; break;
        case F8_DTYPE_BF16: ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v); break;
        case F8_DTYPE_E4M3: ((__nv_fp8_storage_t *)dst)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3); break;
        default: ((__nv_fp8_storage_t *)dst)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2); break;
        }
    }
}

extern "C" void bench_empty_launch(void *stream) { empty_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(); }

extern "C" void bench_gpu_spin(void *stream, double microseconds)
{
    spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long)(microseconds * 1e3));
}

extern "C" int bench_fill_random(void *stream, void *dst, f8_dtype dtype, int64_t count, uint64_t seed, float stddev)
{
    if (count <= 0) return (int)cudaSuccess;
    long long blocks = (count + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    fill_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(dst, (int)dtype, (long long)count,
                                                                      (unsigned long long)seed, stddev);
    return (int)cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* Raw cuBLASLt matmul                                                       */
/* ------------------------------------------------------------------------ */

struct bench_lt {
    cublasLtHandle_t handle;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld; /* cuBLASLt's A (our b), B (our a), C = D */
    cublasLtMatmulAlgo_t algo;
    void *workspace;
    size_t workspace_bytes;
    cudaStream_t stream;
};

static cudaDataType_t lt_type(f8_dtype t)
{
    switch (t) {
    case F8_DTYPE_E4M3: return CUDA_R_8F_E4M3;
    case F8_DTYPE_E5M2: return CUDA_R_8F_E5M2;
    case F8_DTYPE_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

#define LT_TRY(call)                                                                          \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            fprintf(stderr, "bench_lt: %s: %s\n", #call, cublasLtGetStatusString(s_));        \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

/* Row-major D[m, n] = A[m, k]·B[n, k]ᵀ is column-major D'[n, m] = B'·A'
 * with cuBLASLt's A = our b ([n, k] row-major = k×n column-major, op T) and
 * its B = our a (k×m column-major, op N): FP8's only layout on Hopper. */
extern "C" int bench_lt_create(const bench_lt_config *c, void *stream, bench_lt **out)
{
    bench_lt *lt = (bench_lt *)calloc(1, sizeof *lt);
    if (!lt) return 1;
    *out = lt;
    lt->stream = (cudaStream_t)stream;
    const int fp8 = f8i_dtype_is_fp8(c->ab_dtype);
    const uint64_t m = (uint64_t)c->m, n = (uint64_t)c->n, k = (uint64_t)c->k;
    LT_TRY(cublasLtCreate(&lt->handle));
    LT_TRY(cublasLtMatmulDescCreate(&lt->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    if (fp8) {
        int8_t fast = (int8_t)(c->fast_accum != 0);
        LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
        LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &c->b_scale_inv,
                                              sizeof c->b_scale_inv));
        LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &c->a_scale_inv,
                                              sizeof c->a_scale_inv));
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&lt->la, lt_type(c->ab_dtype), k, n, (int64_t)k));
    LT_TRY(cublasLtMatrixLayoutCreate(&lt->lb, lt_type(c->ab_dtype), k, m, (int64_t)k));
    LT_TRY(cublasLtMatrixLayoutCreate(&lt->ld, lt_type(c->d_dtype), n, m, (int64_t)n));

    lt->workspace_bytes = c->workspace_bytes;
    if (cudaMalloc(&lt->workspace, lt->workspace_bytes ? lt->workspace_bytes : 1) != cudaSuccess) {
        fprintf(stderr, "bench_lt: cudaMalloc of the workspace failed\n");
        return 1;
    }
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt->workspace_bytes,
                                                sizeof lt->workspace_bytes));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(lt->handle, lt->desc, lt->la, lt->lb, lt->ld, lt->ld, pref, 1, &h, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found < 1) {
        fprintf(stderr, "bench_lt: no cuBLASLt algorithm for %lldx%lldx%lld\n", (long long)c->m, (long long)c->n,
                (long long)c->k);
        return 1;
    }
    lt->algo = h.algo;
    return 0;
}

extern "C" int bench_lt_run(bench_lt *lt, const void *a, const void *b, void *d)
{
    const float alpha = 1.0f, beta = 0.0f;
    return (int)cublasLtMatmul(lt->handle, lt->desc, &alpha, b, lt->la, a, lt->lb, &beta, d, lt->ld, d, lt->ld,
                               &lt->algo, lt->workspace, lt->workspace_bytes, lt->stream);
}

extern "C" void bench_lt_destroy(bench_lt *lt)
{
    if (!lt) return;
    if (lt->ld) cublasLtMatrixLayoutDestroy(lt->ld);
    if (lt->lb) cublasLtMatrixLayoutDestroy(lt->lb);
    if (lt->la) cublasLtMatrixLayoutDestroy(lt->la);
    if (lt->desc) cublasLtMatmulDescDestroy(lt->desc);
    if (lt->handle) cublasLtDestroy(lt->handle);
    cudaFree(lt->workspace);
    free(lt);
}
