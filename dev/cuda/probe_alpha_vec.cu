// probe_alpha_vec.cu — a standalone probe for issue 30's GEMM gap (dev/rowwise_plan.md,
// session 17): do cuBLASLt's per-tensor FP8 kernels take a per-column alpha vector
// (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO / _BETA_HOST: one FP32 factor per
// row of cuBLASLt's column-major D, a column of f8's row-major D), with split
// accumulation, and how fast are they against the outer-vector kernel the row-wise
// recipe uses now? If they run at per-tensor speed, the dgrad and wgrad could take the
// weight's (or one operand's) factor there and leave the per-token one to the consumer,
// as torchao does for its gradients (the tensor-wise kernel, then the outer product of
// the inverse scales). Row-major TN mapping as src/cuda/gemm.cu: D[m, n] = A[m, k]·B[n, k]ᵀ.
// Prints, per shape and form: the heuristic's status, max error against FP64 as a
// multiple of 2^-8·Σ|ab| (BF16 D) or 1e-5·Σ|ab| (FP32 D), and the median ms of 20.
// Build and run on a GPU machine (session 18, H100: the alpha vector is CUBLAS_STATUS_NOT_SUPPORTED at every
// shape; bench/RESULTS.md):
//   nvcc -std=c++17 -O2 -arch=sm_90 probe_alpha_vec.cu -o probe_alpha_vec -lcublasLt -lcudart && ./probe_alpha_vec
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                      \
    do {                                                                           \
        cudaError_t e_ = (x);                                                      \
        if (e_ != cudaSuccess) {                                                   \
            printf("cuda %s: %s\n", #x, cudaGetErrorString(e_));                   \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

enum Form { PER_TENSOR = 0, ALPHA_VEC = 1, OUTER_VEC = 2 };
static const char *form_name[] = {"per-tensor", "alpha vector", "outer vector"};

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 64 << 20;

struct Shape { const char *name; int m, n, k; int fp32_acc; }; // fp32_acc: FP32 D += (wgrad), else BF16 D

/* One form at one shape: status, and with iters the median time. sa (m), sb (n): the rows' scales. */
static const char *run(Form f, const Shape &s, const void *a, const void *b, const float *sa, const float *sb,
                       const float *one, const float *alpha_vec, void *d, int iters, double *ms)
{
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t t = CUBLAS_OP_T, nop = CUBLAS_OP_N;
    int8_t fast = 0; /* split accumulation: dgrad's and wgrad's */
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nop, sizeof nop);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
    if (f == OUTER_VEC) {
        int32_t v = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        cublasStatus_t s1 = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &v, sizeof v);
        cublasStatus_t s2 = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &v, sizeof v);
        if (s1 || s2) return cublasLtGetStatusName(s1 ? s1 : s2);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa);
    } else {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof one);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof one);
    }
    if (f == ALPHA_VEC) {
        cublasLtPointerMode_t pm = s.fp32_acc ? CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST
                                              : CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
        cublasStatus_t s1 = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm);
        if (s1) return cublasLtGetStatusName(s1);
    }
    const cudaDataType_t dt = s.fp32_acc ? CUDA_R_32F : CUDA_R_16BF;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, s.k, s.n, s.k); /* cuBLASLt's A: B[n, k] */
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, s.k, s.m, s.k); /* cuBLASLt's B: A[m, k] */
    cublasLtMatrixLayoutCreate(&lc, dt, s.n, s.m, s.n);
    cublasLtMatrixLayoutCreate(&ld, dt, s.n, s.m, s.n);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t w = WS;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w);
    cublasLtMatmulHeuristicResult_t r;
    int nr = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 1, &r, &nr);
    const char *res = "OK";
    if (st != CUBLAS_STATUS_SUCCESS) res = cublasLtGetStatusName(st);
    else if (nr == 0) res = "NO_ALGO";
    else {
        /* the host scalars; in the alpha-vector mode alpha is the device vector (beta a host scalar or none) */
        const float h_one = 1.0f, beta = s.fp32_acc ? 1.0f : 0.0f;
        const void *alpha = f == ALPHA_VEC ? (const void *)alpha_vec : (const void *)&h_one;
        std::vector<float> times;
        for (int i = 0; i < (iters ? iters + 3 : 1) && st == CUBLAS_STATUS_SUCCESS; i++) {
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0), cudaEventCreate(&e1);
            cudaEventRecord(e0);
            st = cublasLtMatmul(lt, desc, alpha, b, la, a, lb, &beta, d, lc, d, ld, &r.algo, ws, WS, 0);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float t_ms = 0;
            cudaEventElapsedTime(&t_ms, e0, e1);
            if (i >= 3) times.push_back(t_ms);
            cudaEventDestroy(e0), cudaEventDestroy(e1);
        }
        if (st != CUBLAS_STATUS_SUCCESS) res = cublasLtGetStatusName(st);
        if (!times.empty()) {
            std::sort(times.begin(), times.end());
            *ms = times[times.size() / 2];
        }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc), cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return res;
}

static float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main()
{
    cublasLtCreate(&lt);
    CK(cudaMalloc(&ws, WS));
    /* the 1.3B trainer's dgrad (BF16 D) and wgrad (FP32 D +=) shapes, and a small one checked element by element */
    const Shape shapes[] = {{"check", 128, 256, 512, 0},      {"check wgrad", 128, 256, 512, 1},
                            {"dgrad qkv", 8192, 2048, 6144, 0}, {"dgrad fc1", 8192, 2048, 8192, 0},
                            {"dgrad fc2", 8192, 8192, 2048, 0}, {"wgrad fc1", 8192, 2048, 8192, 1},
                            {"wgrad fc2", 2048, 8192, 8192, 1}, {"wgrad qkv", 6144, 2048, 8192, 1}};
    for (const Shape &s : shapes) {
        const size_t na = (size_t)s.m * s.k, nb = (size_t)s.n * s.k, nd = (size_t)s.m * s.n;
        std::vector<uint8_t> ha(na), hb(nb);
        std::vector<float> hsa(s.m), hsb(s.n);
        srand(7);
        for (auto &v : ha) v = (uint8_t)(rand() & 0x77); /* finite E4M3 codes, no NaN (0x7F) */
        for (auto &v : hb) v = (uint8_t)(rand() & 0xF7);
        for (auto &v : hsa) v = ldexpf(1.0f, rand() % 9 - 4); /* power-of-two scales, as the recipe's */
        for (auto &v : hsb) v = ldexpf(1.0f, rand() % 9 - 4);
        void *a, *b, *d;
        float *sa, *sb, *one;
        CK(cudaMalloc(&a, na));
        CK(cudaMalloc(&b, nb));
        CK(cudaMalloc(&d, nd * 4));
        CK(cudaMalloc(&sa, s.m * 4));
        CK(cudaMalloc(&sb, s.n * 4));
        CK(cudaMalloc(&one, 4));
        const float h1 = 1.0f;
        CK(cudaMemcpy(a, ha.data(), na, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(b, hb.data(), nb, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(sa, hsa.data(), s.m * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(sb, hsb.data(), s.n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(one, &h1, 4, cudaMemcpyHostToDevice));
        const int check = s.m * (double)s.n * s.k < 1e8;
        for (int f = 0; f < 3; f++) {
            double ms = 0.0, worst = 0.0;
            CK(cudaMemset(d, 0, nd * 4));
            const char *st = run((Form)f, s, a, b, sa, sb, one, sb, d, check ? 0 : 20, &ms);
            if (check && st[0] == 'O' && st[1] == 'K') {
                /* D[i, j] = factor · Σ a·b: per tensor 1, alpha vector sb[j], outer vector sa[i]·sb[j] */
                CK(cudaDeviceSynchronize());
                std::vector<uint8_t> hd(nd * 4);
                CK(cudaMemcpy(hd.data(), d, nd * (s.fp32_acc ? 4 : 2), cudaMemcpyDeviceToHost));
                for (int i = 0; i < s.m; i++)
                    for (int j = 0; j < s.n; j++) {
                        double sum = 0.0, mag = 0.0;
                        for (int k = 0; k < s.k; k++) {
                            __nv_fp8_e4m3 x, y;
                            x.__x = ha[(size_t)i * s.k + k], y.__x = hb[(size_t)j * s.k + k];
                            const double p = (double)(float)x * (double)(float)y;
                            sum += p, mag += fabs(p);
                        }
                        const double fac = f == PER_TENSOR ? 1.0 : f == ALPHA_VEC ? hsb[j] : (double)hsa[i] * hsb[j];
                        const double got = s.fp32_acc ? ((const float *)hd.data())[(size_t)i * s.n + j]
                                                      : bf16_to_float(((const uint16_t *)hd.data())[(size_t)i * s.n + j]);
                        const double unit = (s.fp32_acc ? 1e-5 : ldexp(1.0, -8)) * fac * (mag > 0 ? mag : 1.0);
                        worst = fmax(worst, fabs(got - fac * sum) / unit);
                    }
            }
            if (check) printf("%-12s %5d x %5d x %5d %-13s %-28s worst %.3f units\n", s.name, s.m, s.n, s.k,
                              form_name[f], st, worst);
            else printf("%-12s %5d x %5d x %5d %-13s %-28s %.4f ms  %.0f TFLOP/s\n", s.name, s.m, s.n, s.k,
                        form_name[f], st, ms, ms > 0 ? 2.0 * s.m * s.n * s.k / (ms * 1e9) : 0.0);
        }
        cudaFree(a), cudaFree(b), cudaFree(d), cudaFree(sa), cudaFree(sb), cudaFree(one);
    }
    cudaFree(ws);
    cublasLtDestroy(lt);
    return 0;
}
