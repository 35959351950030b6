// probe_rowwise_algos.cu — which cuBLASLt kernels run FP8 matmuls with outer-
// vector (row-wise) scales at the 1.3B trainer's shapes, and how fast, against
// per-tensor scaling (issue 30: the row-wise GEMMs ran ~5% slower than current
// scaling's, every one on the heuristic's single 128x128 candidate).
// For each shape and mode it times: the heuristic's first answer (what f8's
// plans take), the best of its first 32 answers (what --gemm-tune could
// reach), and the best of every configuration cuBLASLt admits when asked by
// hand (cublasLtMatmulAlgoGetIds x tile x stages x cluster shape, each passed
// through cublasLtMatmulAlgoCheck), and prints the winners' configurations.
// Row-major TN mapping as src/cuda/gemm.cu: D[m, n] = A[m, k]·B[n, k]ᵀ.
// Build and run on a GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90 probe_rowwise_algos.cu -o probe -lcublasLt -lcudart && ./probe [max configs]
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 32 << 20;

struct Shape { const char *name; int m, n, k; cudaDataType_t at, bt, dt; int beta; };

struct Mm {
  cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t la, lb, ld;
  const void *a, *b; void *d;
};

static void mm_make(Mm &x, const Shape &s, int outer, const float *sa, const float *sb) {
  cublasLtMatmulDescCreate(&x.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N; int8_t fast = 1;
  cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n);
  cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  if (outer) {
    int32_t v = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &v, sizeof v);
    cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &v, sizeof v);
  }
  cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb);
  cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa);
  cublasLtMatrixLayoutCreate(&x.la, s.bt, s.k, s.n, s.k);
  cublasLtMatrixLayoutCreate(&x.lb, s.at, s.k, s.m, s.k);
  cublasLtMatrixLayoutCreate(&x.ld, s.dt, s.n, s.m, s.n);
}

static void mm_free(Mm &x) {
  cublasLtMatrixLayoutDestroy(x.la); cublasLtMatrixLayoutDestroy(x.lb); cublasLtMatrixLayoutDestroy(x.ld);
  cublasLtMatmulDescDestroy(x.desc);
}

// mean ms of one matmul over reps after 2 warm-ups, or -1 on a refusal
static double timed(const Mm &x, const cublasLtMatmulAlgo_t &algo, float beta, int reps) {
  float alpha = 1;
  for (int i = 0; i < 2; i++)
    if (cublasLtMatmul(lt, x.desc, &alpha, x.a, x.la, x.b, x.lb, &beta, x.d, x.ld, x.d, x.ld, &algo, ws, WS, 0))
      return -1;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int i = 0; i < reps; i++) cublasLtMatmul(lt, x.desc, &alpha, x.a, x.la, x.b, x.lb, &beta, x.d, x.ld, x.d, x.ld, &algo, ws, WS, 0);
  cudaEventRecord(e1);
  if (cudaEventSynchronize(e1) != cudaSuccess) { cudaGetLastError(); return -1; }
  float f; cudaEventElapsedTime(&f, e0, e1);
  cudaEventDestroy(e0); cudaEventDestroy(e1);
  return f / reps;
}

static void describe(const cublasLtMatmulAlgo_t &algo, char *out, size_t n) {
  int id = 0; uint32_t tile = 0, stages = 0, swz = 0, split = 0; uint16_t cluster = 0; size_t w;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split, &w);
  snprintf(out, n, "id %d tile %u stages %u cluster %u swizzle %u splitk %u", id, tile, stages, (unsigned)cluster, swz, split);
}

int main(int argc, char **argv) {
  const int max_cfg = argc > 1 ? atoi(argv[1]) : 600;
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0));
  int ver = 0, mi = 0, pa = 0;
  cublasLtGetProperty(MAJOR_VERSION, &ver); cublasLtGetProperty(MINOR_VERSION, &mi); cublasLtGetProperty(PATCH_LEVEL, &pa);
  printf("device %s sm_%d%d, cublasLt %d.%d.%d\n", p.name, p.major, p.minor, ver, mi, pa);
  cublasLtCreate(&lt); CK(cudaMalloc(&ws, WS));
  const size_t MAXE = (size_t)8192 * 8192;
  void *a, *b, *d; float *sa, *sb;
  CK(cudaMalloc(&a, MAXE)); CK(cudaMalloc(&b, MAXE)); CK(cudaMalloc(&d, MAXE * 4));
  CK(cudaMalloc(&sa, 8192 * 4)); CK(cudaMalloc(&sb, 8192 * 4));
  // codes 0x38 (1.0 in E4M3, 0.5 in E5M2): finite products whatever the pairing; scales 1
  CK(cudaMemset(a, 0x38, MAXE)); CK(cudaMemset(b, 0x38, MAXE)); CK(cudaMemset(d, 0, MAXE * 4));
  std::vector<float> ones(8192, 1.0f);
  CK(cudaMemcpy(sa, ones.data(), 8192 * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(sb, ones.data(), 8192 * 4, cudaMemcpyHostToDevice));
  const cudaDataType_t E4 = CUDA_R_8F_E4M3, E5 = CUDA_R_8F_E5M2, F32 = CUDA_R_32F, B16 = CUDA_R_16BF;
  // the 1.3B trainer's GEMMs (T = 8192 tokens, C = 2048): forward, dgrad (dY E5M2), wgrad (FP32, accumulated)
  const Shape shapes[] = {
    {"fwd qkv", 8192, 6144, 2048, E4, E4, B16, 0}, {"fwd proj", 8192, 2048, 2048, E4, E4, B16, 0},
    {"fwd fc1", 8192, 8192, 2048, E4, E4, B16, 0}, {"fwd fc2", 8192, 2048, 8192, E4, E4, B16, 0},
    {"dgrad qkv", 8192, 2048, 6144, E5, E4, B16, 0}, {"dgrad fc1", 8192, 2048, 8192, E5, E4, B16, 0},
    {"dgrad fc2", 8192, 8192, 2048, E5, E4, B16, 0},
    {"wgrad qkv", 6144, 2048, 8192, E5, E4, F32, 1}, {"wgrad fc1", 8192, 2048, 8192, E5, E4, F32, 1},
    {"wgrad fc2", 2048, 8192, 8192, E5, E4, F32, 1}, {"wgrad proj", 2048, 2048, 8192, E5, E4, F32, 1},
  };
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                               CUBLASLT_CLUSTER_SHAPE_1x2x1};
  for (const Shape &s : shapes) {
    const double gf = 2.0 * s.m * s.n * s.k / 1e9;
    const float beta = s.beta ? 1.0f : 0.0f;
    for (int outer = 0; outer < 2; outer++) {
      Mm x; mm_make(x, s, outer, sa, sb); x.a = b; x.b = a; x.d = d; // cuBLASLt's A' = our b, B' = our a
      cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
      size_t w = WS; cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w);
      cublasLtMatmulHeuristicResult_t r[32]; int nr = 0;
      cublasLtMatmulAlgoGetHeuristic(lt, x.desc, x.la, x.lb, x.ld, x.ld, pref, 32, r, &nr);
      double first = -1, best_h = 1e30; int best_hi = -1;
      for (int i = 0; i < nr; i++) {
        const double ms = timed(x, r[i].algo, beta, 10);
        if (i == 0) first = ms;
        if (ms > 0 && ms < best_h) best_h = ms, best_hi = i;
      }
      // by hand: every id x tile x stages x cluster that AlgoCheck admits
      int ids[256], nids = 0;
      cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, s.bt, s.at, s.dt, s.dt, 256, ids, &nids);
      int tried = 0, admitted = 0; double best_e = 1e30; cublasLtMatmulAlgo_t best_algo{};
      for (int ii = 0; ii < nids && tried < max_cfg; ii++) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, s.bt, s.at, s.dt, s.dt, ids[ii], &algo)) continue;
        uint32_t tiles[128], stages[128]; size_t tw = 0, sw = 0;
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof tiles, &tw);
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, sizeof stages, &sw);
        int nt = (int)(tw / 4), ns = (int)(sw / 4);
        if (nt == 0) tiles[0] = CUBLASLT_MATMUL_TILE_UNDEFINED, nt = 1;
        if (ns == 0) stages[0] = 0, ns = 1;
        for (int ti = 0; ti < nt && tried < max_cfg; ti++)
          for (int si = 0; si < ns && tried < max_cfg; si++)
            for (uint16_t cl : clusters) {
              if (tried >= max_cfg) break;
              cublasLtMatmulAlgo_t c = algo;
              cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[ti], 4);
              cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[si], 4);
              cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, 2);
              cublasLtMatmulHeuristicResult_t chk;
              if (cublasLtMatmulAlgoCheck(lt, x.desc, x.la, x.lb, x.ld, x.ld, &c, &chk) || chk.workspaceSize > WS) continue;
              ++tried;
              const double ms = timed(x, c, beta, 5);
              if (ms <= 0) continue;
              ++admitted;
              if (ms < best_e) best_e = ms, best_algo = c;
            }
      }
      char hd[160] = "-", ed[160] = "-";
      if (best_hi >= 0) describe(r[best_hi].algo, hd, sizeof hd);
      if (admitted) {
        describe(best_algo, ed, sizeof ed);
        best_e = timed(x, best_algo, beta, 10); // again, at the heuristic's repetitions
      }
      printf("%-10s %5dx%5dx%5d %-10s heuristic: %d answers, first %.3f ms (%.0f TF/s), best %.3f ms [%s]; "
             "by hand: %d ids, %d run, best %.3f ms (%.0f TF/s) [%s]\n",
             s.name, s.m, s.n, s.k, outer ? "outer_vec" : "per-tensor", nr, first, first > 0 ? gf / first : 0.0,
             best_hi >= 0 ? best_h : -1.0, hd, nids, admitted, admitted ? best_e : -1.0, admitted ? gf / best_e : 0.0, ed);
      fflush(stdout);
      cublasLtMatmulPreferenceDestroy(pref); mm_free(x);
    }
  }
  printf("probe done\n");
  return 0;
}
