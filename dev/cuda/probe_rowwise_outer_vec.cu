// probe_rowwise_outer_vec.cu — a standalone probe of issue 30 (row-wise scaling),
// kept for the record: does cuBLASLt on this GPU and toolkit run FP8 matmuls with
// CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F scales (one FP32 per row of A and of
// B), with which dtypes and epilogues (fused BF16 bias, beta 1), how far its sums
// are from FP64 (as a multiple of 1e-5·Σ|ab| for FP32 D, 2^-8·Σ|ab| for BF16 D),
// and how fast against per-tensor scaling? Row-major TN mapping as src/cuda/gemm.cu.
// What it found on an H100 (cuBLASLt 13.1, 2026-12-05) is in dev/rowwise_plan.md;
// src/cuda/gemm_rowwise.cu is the library's use of the mode.
// Build and run on a GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90 probe_rowwise_outer_vec.cu -o probe -lcublasLt -lcudart && ./probe
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static cublasLtHandle_t lt;
static void *ws; static const size_t WS = 64 << 20;

struct Cfg { int m, n, k; cudaDataType_t at, bt, dt; int outer, fast, bias_bf16, beta; };

// returns status name of first failing step, runs once (and times if iters>0)
static const char *run(const Cfg &c, const void *a, const void *b, const float *sa, const float *sb, void *d,
                       const void *bias, int iters, double *ms) {
  cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N; int8_t fast = c.fast;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  if (c.outer) {
    int32_t v = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    cublasStatus_t s1 = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &v, sizeof v);
    cublasStatus_t s2 = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &v, sizeof v);
    if (s1 || s2) return cublasLtGetStatusName(s1 ? s1 : s2);
  }
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa);
  if (c.bias_bf16) {
    cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS; int32_t bt = CUDA_R_16BF;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
  }
  cublasLtMatrixLayoutCreate(&la, c.bt, c.k, c.n, c.k);
  cublasLtMatrixLayoutCreate(&lb, c.at, c.k, c.m, c.k);
  cublasLtMatrixLayoutCreate(&ld, c.dt, c.n, c.m, c.n);
  cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
  size_t w = WS; cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w);
  cublasLtMatmulHeuristicResult_t r; int nr = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &r, &nr);
  const char *res = "OK";
  if (st != CUBLAS_STATUS_SUCCESS) res = cublasLtGetStatusName(st);
  else if (nr == 0) res = "NO_ALGO";
  else {
    float alpha = 1, beta = c.beta ? 1.f : 0.f;
    st = cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, d, ld, d, ld, &r.algo, ws, WS, 0);
    if (st) res = cublasLtGetStatusName(st);
    else if (iters > 0) {
      cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
      for (int i = 0; i < 3; i++) cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, d, ld, d, ld, &r.algo, ws, WS, 0);
      cudaEventRecord(e0);
      for (int i = 0; i < iters; i++) cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, d, ld, d, ld, &r.algo, ws, WS, 0);
      cudaEventRecord(e1); cudaEventSynchronize(e1); float f; cudaEventElapsedTime(&f, e0, e1); *ms = f / iters;
    }
  }
  CK(cudaDeviceSynchronize());
  cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld); cublasLtMatmulDescDestroy(desc);
  return res;
}

static float dec(uint8_t q, bool e5) {
  if (e5) { __nv_fp8_e5m2 x; memcpy(&x, &q, 1); return (float)x; }
  __nv_fp8_e4m3 x; memcpy(&x, &q, 1); return (float)x;
}
static float bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

int main() {
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0));
  int ver = 0; cublasLtGetProperty(MAJOR_VERSION, &ver); int mi = 0; cublasLtGetProperty(MINOR_VERSION, &mi);
  int pa = 0; cublasLtGetProperty(PATCH_LEVEL, &pa);
  printf("device %s sm_%d%d, cublasLt %d.%d.%d (header %d)\n", p.name, p.major, p.minor, ver, mi, pa, CUBLAS_VERSION);
  cublasLtCreate(&lt); CK(cudaMalloc(&ws, WS));
  const int M = 16384, N = 8192, K = 8192; // room for every timed shape's operands and D
  uint8_t *a, *b; float *sa, *sb; void *d, *bias;
  CK(cudaMalloc(&a, (size_t)M * K)); CK(cudaMalloc(&b, (size_t)N * K));
  CK(cudaMalloc(&sa, M * 4)); CK(cudaMalloc(&sb, N * 4)); CK(cudaMalloc(&d, (size_t)M * N * 4)); CK(cudaMalloc(&bias, N * 2));
  std::vector<uint8_t> ha((size_t)M * K), hb((size_t)N * K); std::vector<float> hsa(M), hsb(N); std::vector<uint16_t> hbias(N);
  // d holds M x N FP32: the timed BF16 outputs (at most 16384 x 8192) fit
  srand(1);
  for (auto &x : ha) { x = (uint8_t)(rand() & 0xFF); if ((x & 0x7F) >= 0x78) x &= 0xB7; }  // finite in both formats
  for (auto &x : hb) { x = (uint8_t)(rand() & 0xFF); if ((x & 0x7F) >= 0x78) x &= 0xB7; }
  for (int i = 0; i < M; i++) hsa[i] = ldexpf(1.0f + (rand() % 1000) / 1000.0f, rand() % 9 - 4);
  for (int i = 0; i < N; i++) hsb[i] = ldexpf(1.0f + (rand() % 1000) / 1000.0f, rand() % 9 - 4);
  for (int i = 0; i < N; i++) hbias[i] = (uint16_t)(0x3F80 + (rand() % 64));
  CK(cudaMemcpy(a, ha.data(), ha.size(), cudaMemcpyHostToDevice)); CK(cudaMemcpy(b, hb.data(), hb.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sa, hsa.data(), M * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(sb, hsb.data(), N * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bias, hbias.data(), N * 2, cudaMemcpyHostToDevice));
  const cudaDataType_t E4 = CUDA_R_8F_E4M3, E5 = CUDA_R_8F_E5M2, F32 = CUDA_R_32F, B16 = CUDA_R_16BF;
  // correctness on 256x128x512 (small, CPU FP64 reference), every combination
  const int m = 256, n = 128, k = 512;
  for (int combo = 0; combo < 48; combo++) {
    Cfg c{m, n, k, (combo & 1) ? E5 : E4, (combo & 2) ? E5 : E4, (combo & 4) ? B16 : F32, 1, (combo >> 3) & 1,
          (combo >> 4) & 1, combo >= 32};
    if (c.beta && c.bias_bf16) continue;
    std::vector<uint8_t> d0((size_t)m * n * 4, 0);
    // C = 1.0 everywhere when beta
    for (int i = 0; i < m * n; i++) {
      if (c.dt == F32) { float one = 1; memcpy(&d0[i * 4], &one, 4); } else { uint16_t one = 0x3F80; memcpy(&d0[i * 2], &one, 2); }
    }
    CK(cudaMemcpy(d, d0.data(), d0.size(), cudaMemcpyHostToDevice));
    double ms = 0;
    const char *r = run(c, a, b, sa, sb, d, bias, 0, &ms);
    double worst = 0;
    if (!strcmp(r, "OK")) {
      std::vector<uint8_t> hd((size_t)m * n * 4); CK(cudaMemcpy(hd.data(), d, hd.size(), cudaMemcpyDeviceToHost));
      for (int i = 0; i < m; i++) for (int j = 0; j < n; j++) {
        double ref = 0, mag = 0;
        for (int t = 0; t < k; t++) { double x = (double)dec(ha[(size_t)i * k + t], c.at == E5) * dec(hb[(size_t)j * k + t], c.bt == E5); ref += x; mag += fabs(x); }
        ref *= (double)hsa[i] * hsb[j]; mag *= (double)hsa[i] * hsb[j];
        if (c.beta) { ref += 1; mag += 1; }
        if (c.bias_bf16) { ref += bf(hbias[j]); mag += fabs(bf(hbias[j])); }
        double got = c.dt == F32 ? ((float *)hd.data())[i * n + j] : bf(((uint16_t *)hd.data())[i * n + j]);
        double e = fabs(got - ref) / (mag * (c.dt == F32 ? 1e-5 : 0x1p-8) + 1e-30);
        if (e > worst) worst = e;
      }
    }
    printf("outer_vec %s x %s -> %s fast %d bias_bf16 %d beta %d: %s  worst err/bound %.3f\n",
           c.at == E5 ? "e5m2" : "e4m3", c.bt == E5 ? "e5m2" : "e4m3", c.dt == F32 ? "fp32" : "bf16", c.fast, c.bias_bf16,
           c.beta, r, worst);
  }
  // timing: per-tensor vs outer-vector, 8192^3 and a 1.3B-like 16384x2048x8192, BF16 D
  const int shapes[3][3] = {{8192, 8192, 8192}, {16384, 2048, 8192}, {16384, 8192, 2048}};
  for (auto &s : shapes)
    for (int outer = 0; outer < 2; outer++)
      for (int fast = 0; fast < 2; fast++) {
        Cfg c{s[0], s[1], s[2], E4, E4, B16, outer, fast, 0, 0};
        double ms = 0; const char *r = run(c, a, b, sa, sb, d, bias, 20, &ms);
        printf("time %dx%dx%d %s fast %d: %s %.3f ms %.0f TFLOP/s\n", s[0], s[1], s[2], outer ? "outer_vec" : "per-tensor",
               fast, r, ms, ms > 0 ? 2.0 * s[0] * s[1] * s[2] / ms / 1e9 : 0.0);
      }
  printf("probe done\n");
  return 0;
}
