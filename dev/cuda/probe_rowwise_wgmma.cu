// probe_rowwise_wgmma.cu — f8's own Hopper FP8 GEMM with row-wise scales (the kernel is in
// probe_rowwise_wgmma.h), alone: is it right, and how fast against cuBLASLt's per-tensor and outer-vector
// (row-wise) FP8 GEMMs at the 1.3B trainer's shapes? (issue 30: cuBLASLt 13.1 has one outer-vector kernel,
// 11-17% slower than per-tensor at the large shapes, bench/RESULTS.md "Session 11"; its alpha-vector mode
// carries only one of the two scales.)
//
//   D[m, n] = bf16(sa[m] · sb[n] · Σ_k A[m, k]·B[n, k])      A E4M3 or E5M2, B E4M3, both k-contiguous
//   D[m, n] += sa[m] · sb[n] · Σ_k A[m, k]·B[n, k]           D FP32: wgrad accumulating over microbatches
//
// Two forms of the kernel: probe_rowwise_wgmma.h's (configurations 0-3: both consumer warpgroups share
// each tile) and probe_rowwise_wgmma_pp.h's ping-pong (configurations 4-5: the two consumers take
// alternate whole tiles of a persistent CTA, one's epilogue under the other's mainloop, 16-byte stores).
//
// For each configuration of the table (tile, stages, cluster), first the check: random finite FP8 codes
// of varied exponents and random positive scales, against an FP64 CUDA-core reference, on small and
// ragged shapes, each with the full grid and a 3-cluster grid (many tiles per CTA, the ring wrapping
// across tiles); tolerance 2^-8·|ref| (BF16 rounding) + 2e-3·S where S = sa·sb·Σ|a·b| (the accumulation:
// wgmma's FP8 sums keep fewer bits than FP32); NaN-filled outputs catch unwritten elements, guard bytes
// around D catch stray writes; a ping-pong configuration's output must also equal, bit for bit, that of
// its twin of the first form (the same wgmma shape on the same rows: the same sums in the same order,
// the same epilogue arithmetic). Then the timing at the trainer's shapes: median of 20 (after 3 warm-ups)
// of the kernel, cuBLASLt per-tensor and cuBLASLt outer-vector (the heuristic's first answer, fast
// accumulation, as f8 calls them), interleaved per shape so all three see the same clocks, and the
// kernel's output against cuBLASLt outer-vector's. A summary table ends the run. A kernel fault ends the
// process (the lines printed so far stay); a deadlock traps after 5 s and its barrier is reported.
//
// Build and run on an H100 (no -lcuda: cuTensorMapEncodeTiled comes from the runtime's entry points):
//   nvcc -std=c++17 -O3 -arch=sm_90a probe_rowwise_wgmma.cu -o probe_wgmma -lcublasLt && ./probe_wgmma
//   ./probe_wgmma [configs] [-check]    configs: digits of the table below (default all), -check: no timing
//   ./probe_wgmma 45                    the ping-pong configurations only (their twins 2 and 0 run for the
//                                       bit-for-bit comparison, untimed)
#include <cublasLt.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "probe_rowwise_wgmma.h"
#include "probe_rowwise_wgmma_pp.h"

// ---- the table of configurations ---------------------------------------------------------------------

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// variants: the three kinds of GEMM of the trainer
enum { V_FWD, V_DGRAD, V_WGRAD, N_VARIANTS };
static const char *const variant_name[N_VARIANTS] = {"E4M3 x E4M3 -> BF16", "E5M2 x E4M3 -> BF16",
                                                     "E5M2 x E4M3 -> FP32 +="};

struct kernel_cfg {
  const char *name;
  int bm, bn, stages, cluster; // bm x bn: the tile the kernel's unit_tile walks (a warpgroup's, ping-pong)
  int smem;                    // dynamic shared memory bytes
  int twin;                    // the first-form configuration that must give the same bits, or -1
  launch_fn launch[N_VARIANTS];
  setup_fn setup[N_VARIANTS];
};

#define CFG(NAME, BM, BN, ST, CL)                                                                              \
  {NAME, BM, BN, ST, CL, smem_bytes<BM, BN, ST>(), -1,                                                         \
   {gemm_launch<BM, BN, ST, CL, 0, 0>, gemm_launch<BM, BN, ST, CL, 1, 0>, gemm_launch<BM, BN, ST, CL, 1, 1>}, \
   {gemm_setup<BM, BN, ST, CL, 0, 0>, gemm_setup<BM, BN, ST, CL, 1, 0>, gemm_setup<BM, BN, ST, CL, 1, 1>}}
#define CFG_PP(NAME, BM, BN, ST, TWIN)                                                                 \
  {NAME, BM, BN, ST, 1, pp_smem_bytes<BM, BN, ST>(), TWIN,                                             \
   {gemm_pp_launch<BM, BN, ST, 0, 0>, gemm_pp_launch<BM, BN, ST, 1, 0>, gemm_pp_launch<BM, BN, ST, 1, 1>}, \
   {gemm_pp_setup<BM, BN, ST, 0, 0>, gemm_pp_setup<BM, BN, ST, 1, 0>, gemm_pp_setup<BM, BN, ST, 1, 1>}}

// Ordered from the least to the most machinery: a fault in a later one leaves the earlier ones' lines.
static const kernel_cfg configs[] = {
    CFG("128x256 4 stages", 128, 256, 4, 1),
    CFG("256x128 4 stages", 256, 128, 4, 1),
    CFG("128x128 6 stages", 128, 128, 6, 1),
    CFG("128x256 4 stages, cluster 2x1 (B multicast)", 128, 256, 4, 2),
    // ping-pong: the tile is one warpgroup's; the twin runs the same wgmma shape on the same 64-row atoms
    CFG_PP("ping-pong 128x128 per warpgroup, 6 stages", 128, 128, 6, 2),
    CFG_PP("ping-pong 64x256 per warpgroup, 5 stages", 64, 256, 5, 0),
};
enum { N_CONFIGS = sizeof configs / sizeof configs[0] };

static encode_tiled_fn encode_tiled;
static volatile unsigned *watchdog; // mapped host memory: the kernels' report of a stuck barrier

// A k-contiguous [rows, k] FP8 operand, boxes of 128 k x box_rows rows, 128-byte swizzle.
static int tmap_make(CUtensorMap *map, const void *ptr, int rows, int k, int box_rows) {
  const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)k};
  const cuuint32_t box[2] = {BK, (cuuint32_t)box_rows}, estr[2] = {1, 1};
  const CUresult r = encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)ptr, dims, strides, box, estr,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) printf("    cuTensorMapEncodeTiled(rows %d, k %d, box %d) failed: %d\n", rows, k, box_rows, (int)r);
  return r == CUDA_SUCCESS;
}

static int plan_make(gemm_plan *p, const kernel_cfg *c, const void *a, const void *b, const float *sa,
                     const float *sb, void *d, int m, int n, int k, int grid) {
  if (n % 2 || k % 16) {
    printf("    shape %dx%dx%d: n must be even and k a multiple of 16\n", m, n, k);
    return 0;
  }
  if (!tmap_make(&p->ta, a, m, k, c->bm) || !tmap_make(&p->tb, b, n, k, c->bn / c->cluster)) return 0;
  p->args.sa = sa, p->args.sb = sb, p->args.d = d, p->args.m = m, p->args.n = n, p->args.k = k;
  p->args.diag = watchdog;
  const int rows = ((m + c->bm - 1) / c->bm + c->cluster - 1) / c->cluster;
  p->args.group = 2048 / (c->bm * c->cluster) < 1 ? 1 : 2048 / (c->bm * c->cluster);
  if (p->args.group > rows) p->args.group = rows;
  const int units = rows * ((n + c->bn - 1) / c->bn);
  p->grid = (grid / c->cluster < units ? grid / c->cluster : units) * c->cluster;
  return 1;
}

// ---- inputs, the reference, the comparisons -----------------------------------------------------------

static __device__ __forceinline__ uint32_t hash32(uint32_t x) {
  x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
  return x;
}

// grid-stride; element i of buffer `seed`: a finite code of exponent 2^-3..2^4, random sign and mantissa
static __global__ void fill_codes_kernel(uint8_t *x, size_t count, uint32_t seed, int e5m2) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const uint32_t h = hash32((uint32_t)i * 0x9e3779b9u ^ hash32(seed + (uint32_t)(i >> 32)));
    const uint32_t sign = (h >> 31) << 7, e = (h >> 8) & 7; // biased exponents 4..11 (E4M3), 12..19 (E5M2)
    x[i] = (uint8_t)(e5m2 ? sign | (e + 12) << 2 | (h & 3) : sign | (e + 4) << 3 | (h & 7));
  }
}

// grid-stride; positive scales in [lo, 4·lo), or (signed = 1) values in [-lo, lo) for D's initial FP32
static __global__ void fill_f32_kernel(float *x, size_t count, uint32_t seed, float lo, int is_signed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const float u = (hash32((uint32_t)i ^ hash32(seed)) >> 8) * (1.0f / 16777216.0f);
    x[i] = is_signed ? lo * (2 * u - 1) : lo * exp2f(2 * u);
  }
}

// grid (ceil(n/128), m), block 128: thread owns D[row, col]; FP64 sums of the decoded products and of
// their magnitudes (the S of the tolerance), both times sa[row]·sb[col]
template <int A_E5M2>
static __global__ void ref_kernel(const uint8_t *a, const uint8_t *b, const float *sa, const float *sb, int m, int n,
                                  int k, float *ref, float *mag) {
  __shared__ float la[256], lb[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    __nv_fp8_e4m3 x4;
    __nv_fp8_e5m2 x5;
    x4.__x = (__nv_fp8_storage_t)i, x5.__x = (__nv_fp8_storage_t)i;
    la[i] = A_E5M2 ? (float)x5 : (float)x4;
    lb[i] = (float)x4;
  }
  __syncthreads();
  const int row = blockIdx.y, col = blockIdx.x * 128 + threadIdx.x;
  if (col >= n) return;
  const uint8_t *ar = a + (size_t)row * k, *br = b + (size_t)col * k;
  double s = 0, abs_s = 0;
  for (int i = 0; i < k; i++) {
    const double v = (double)la[ar[i]] * lb[br[i]];
    s += v, abs_s += fabs(v);
  }
  const double sc = (double)sa[row] * sb[col];
  ref[(size_t)row * n + col] = (float)(sc * s);
  mag[(size_t)row * n + col] = (float)(sc * abs_s);
}

// grid-stride; max |x - y| and max |y| over two outputs (BF16 or FP32), as float bits in out[0], out[1]
static __global__ void maxdiff_kernel(const void *x, const void *y, size_t count, int f32, unsigned *out) {
  float md = 0, my = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const float a = f32 ? ((const float *)x)[i] : __bfloat162float(((const __nv_bfloat16 *)x)[i]);
    const float b = f32 ? ((const float *)y)[i] : __bfloat162float(((const __nv_bfloat16 *)y)[i]);
    const float d = fabsf(a - b);
    md = d == d ? fmaxf(md, d) : INFINITY; // a NaN anywhere is the worst difference
    my = fmaxf(my, fabsf(b));
  }
  atomicMax(out, __float_as_uint(md));
  atomicMax(out + 1, __float_as_uint(my));
}

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      printf("    %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      fflush(stdout);                                                          \
      return 0;                                                                \
    }                                                                          \
  } while (0)

// After a failure: a fault poisons the context for good (stop), anything else is reported and passed.
static void after_failure(void) {
  cudaGetLastError();
  const cudaError_t e = cudaDeviceSynchronize();
  if (watchdog && watchdog[0])
    printf("watchdog: block %u thread %u waited 5 s on the mbarrier at shared 0x%x for parity %u (%s)\n", watchdog[1],
           watchdog[2], watchdog[3], watchdog[4],
           watchdog[2] < 128 ? "producer, an empty barrier" : "consumer, a full barrier (ping-pong: or a turn)");
  if (e != cudaSuccess) {
    printf("the CUDA context is lost (%s): stopping here; rerun with the other configurations\n", cudaGetErrorString(e));
    fflush(stdout);
    exit(2);
  }
}

// ---- the buffers the program works on ------------------------------------------------------------------

enum { MAXD = 8192, GUARD = 1 << 16, CHECK_MAX = 4 << 20 }; // CHECK_MAX: m·n of the largest check

struct bufs {
  uint8_t *a4, *a5, *b;  // (MAXD, MAXD) codes: A as E4M3, A as E5M2, B as E4M3
  float *sa, *sb;        // (MAXD)
  uint8_t *d_alloc;      // GUARD | D (MAXD, MAXD) FP32 at most | GUARD
  void *d, *d2;          // D, and cuBLASLt's D for the comparison at the timed shapes
  float *ref, *mag, *d0; // the check's reference, its S, and D's initial values (FP32 accumulation)
  unsigned *stat;        // maxdiff_kernel's two results
  void *ws;              // cuBLASLt's workspace
};
static const size_t WS = 32 << 20;

static int bufs_make(bufs *b) {
  const size_t e = (size_t)MAXD * MAXD;
  CK(cudaMalloc(&b->a4, e));
  CK(cudaMalloc(&b->a5, e));
  CK(cudaMalloc(&b->b, e));
  CK(cudaMalloc(&b->sa, MAXD * 4));
  CK(cudaMalloc(&b->sb, MAXD * 4));
  CK(cudaMalloc(&b->d_alloc, e * 4 + 2 * GUARD));
  CK(cudaMalloc(&b->d2, e * 4));
  CK(cudaMalloc(&b->ref, CHECK_MAX * 4));
  CK(cudaMalloc(&b->mag, CHECK_MAX * 4));
  CK(cudaMalloc(&b->d0, CHECK_MAX * 4));
  CK(cudaMalloc(&b->stat, 8));
  CK(cudaMalloc(&b->ws, WS));
  b->d = b->d_alloc + GUARD;
  fill_codes_kernel<<<1024, 256>>>(b->a4, e, 11, 0);
  fill_codes_kernel<<<1024, 256>>>(b->a5, e, 12, 1);
  fill_codes_kernel<<<1024, 256>>>(b->b, e, 13, 0);
  fill_f32_kernel<<<64, 256>>>(b->sa, MAXD, 14, 0.25f, 0);
  fill_f32_kernel<<<64, 256>>>(b->sb, MAXD, 15, 0.25f, 0);
  fill_f32_kernel<<<1024, 256>>>(b->d0, CHECK_MAX, 16, 64.0f, 1);
  CK(cudaDeviceSynchronize());
  return 1;
}

// ---- the check -----------------------------------------------------------------------------------------

struct shape {
  const char *name;
  int m, n, k;
};

// small first, then ragged (m, n off every tile size, k off the 128 slab), then many tiles
static const shape check_shapes[] = {
    {"one tile", 128, 256, 128},    {"2x2 tiles", 256, 512, 384},   {"m, n off 256", 384, 640, 1024},
    {"ragged", 200, 328, 208},      {"ragged 2", 1000, 1000, 1040}, {"many tiles", 1024, 1536, 2048},
    {"wide", 256, 2048, 512},       {"short k", 768, 1280, 64},     {"n off 8", 136, 330, 144},
};
enum { N_CHECK = sizeof check_shapes / sizeof check_shapes[0] };

// One check: the kernel on fresh D against the reference (and, for a ping-pong configuration, against
// its twin's output from the same fresh D, bit for bit); prints " ok" or the failure, returns 1 on a
// pass. worst[0], worst[1]: the largest err/S and err/|ref| (where |ref| >= S/64) seen so far.
static int check_one(const kernel_cfg *c, int v, const shape *s, int grid, const bufs *b, double worst[2]) {
  const size_t mn = (size_t)s->m * s->n, esz = v == V_WGRAD ? 4 : 2;
  const uint8_t *a = v == V_FWD ? b->a4 : b->a5;
  gemm_plan plan;
  if (!plan_make(&plan, c, a, b->b, b->sa, b->sb, b->d, s->m, s->n, s->k, grid)) return 0;
  CK(cudaMemset(b->d_alloc, 0xA5, GUARD));
  CK(cudaMemset((uint8_t *)b->d + mn * esz, 0xA5, GUARD));
  if (v == V_WGRAD) CK(cudaMemcpy(b->d, b->d0, mn * 4, cudaMemcpyDeviceToDevice));
  else CK(cudaMemset(b->d, 0xFF, mn * 2)); // BF16 NaN: an element not written fails
  if (v == V_FWD) ref_kernel<0><<<dim3((s->n + 127) / 128, s->m), 128>>>(a, b->b, b->sa, b->sb, s->m, s->n, s->k, b->ref, b->mag);
  else ref_kernel<1><<<dim3((s->n + 127) / 128, s->m), 128>>>(a, b->b, b->sa, b->sb, s->m, s->n, s->k, b->ref, b->mag);
  CK(cudaGetLastError());
  CK(c->launch[v](&plan, 0));
  CK(cudaDeviceSynchronize());
  const kernel_cfg *tw = c->twin >= 0 ? &configs[c->twin] : NULL;
  if (tw) { // the twin on its own full grid, into d2 from the same start
    int twin_grid = 0, regs = 0, local = 0;
    gemm_plan tp;
    CK(tw->setup[v](&twin_grid, &regs, &local));
    if (!plan_make(&tp, tw, a, b->b, b->sa, b->sb, b->d2, s->m, s->n, s->k, twin_grid)) return 0;
    if (v == V_WGRAD) CK(cudaMemcpy(b->d2, b->d0, mn * 4, cudaMemcpyDeviceToDevice));
    else CK(cudaMemset(b->d2, 0xFF, mn * 2));
    CK(tw->launch[v](&tp, 0));
    CK(cudaDeviceSynchronize());
  }

  float *ref = (float *)malloc(mn * 4), *mag = (float *)malloc(mn * 4), *d0 = (float *)malloc(mn * 4);
  uint8_t *got = (uint8_t *)malloc(mn * esz), *guard = (uint8_t *)malloc(2 * GUARD);
  uint8_t *twin = tw ? (uint8_t *)malloc(mn * esz) : NULL;
  int ok = ref && mag && d0 && got && guard && (!tw || twin);
  if (ok) {
    ok = cudaMemcpy(ref, b->ref, mn * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaMemcpy(mag, b->mag, mn * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaMemcpy(d0, b->d0, mn * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaMemcpy(got, b->d, mn * esz, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaMemcpy(guard, b->d_alloc, GUARD, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaMemcpy(guard + GUARD, (uint8_t *)b->d + mn * esz, GUARD, cudaMemcpyDeviceToHost) == cudaSuccess &&
         (!tw || cudaMemcpy(twin, b->d2, mn * esz, cudaMemcpyDeviceToHost) == cudaSuccess);
    if (!ok) printf("    copy back failed\n");
  }
  size_t twin_bad = 0;
  for (size_t i = 0; ok && tw && i < mn; i++)
    if (memcmp(got + i * esz, twin + i * esz, esz)) {
      if (twin_bad < 2) {
        double g, t;
        if (v == V_WGRAD) g = ((const float *)got)[i], t = ((const float *)twin)[i];
        else {
          __nv_bfloat16 h;
          memcpy(&h, got + 2 * i, 2), g = __bfloat162float(h);
          memcpy(&h, twin + 2 * i, 2), t = __bfloat162float(h);
        }
        printf("\n      %s grid %d: (%zu, %zu) is %.9g, config %d's %.9g", variant_name[v], plan.grid, i / s->n,
               i % s->n, g, c->twin, t);
      }
      twin_bad++;
    }
  size_t bad = 0, guard_bad = 0;
  double w_s = 0, w_rel = 0; // worst err/S; worst err/|ref| where |ref| >= S/64
  for (size_t i = 0; ok && i < mn; i++) {
    double g, r = ref[i], tol;
    if (v == V_WGRAD) {
      g = ((const float *)got)[i], r += d0[i];
      tol = 1e-6 * (fabs(d0[i]) + fabs(r)) + 2e-3 * mag[i];
    } else {
      __nv_bfloat16 h;
      memcpy(&h, got + 2 * i, 2);
      g = __bfloat162float(h);
      tol = (1.0 / 256) * fabs(r) + 2e-3 * mag[i];
    }
    const double err = fabs(g - r);
    if (!(err <= tol)) {
      if (bad < 4)
        printf("\n      %s grid %d: mismatch at (%zu, %zu): got %.6g want %.6g (S %.4g)", variant_name[v], plan.grid,
               i / s->n, i % s->n, g, r, (double)mag[i]);
      bad++;
    }
    if (err != err) w_s = INFINITY;
    else if (mag[i] > 0) {
      if (err / mag[i] > w_s) w_s = err / mag[i];
      if (fabs(ref[i]) >= mag[i] / 64 && err / fabs(ref[i]) > w_rel) w_rel = err / fabs(ref[i]);
    }
  }
  for (int i = 0; ok && i < 2 * GUARD; i++) guard_bad += guard[i] != 0xA5;
  const int pass = ok && bad == 0 && guard_bad == 0 && twin_bad == 0;
  if (pass) printf(" ok");
  else if (twin_bad && bad == 0 && guard_bad == 0) // right, but not the twin's bits
    printf("\n      FAIL %s grid %d: %zu of %zu differ from config %d's bits (all within tolerance)\n     ",
           variant_name[v], plan.grid, twin_bad, mn, c->twin);
  else
    printf("\n      FAIL %s grid %d: %zu of %zu off, worst err/S %.2e%s%s\n     ", variant_name[v], plan.grid, bad, mn,
           w_s, guard_bad ? ", WRITES OUTSIDE D" : "", twin_bad ? ", differs from the twin" : "");
  fflush(stdout);
  if (w_s > worst[0]) worst[0] = w_s;
  if (w_rel > worst[1]) worst[1] = w_rel;
  free(ref), free(mag), free(d0), free(got), free(guard), free(twin);
  return pass;
}

// ---- cuBLASLt, as f8 calls it (the heuristic's first answer, fast accumulation) ------------------------

struct lt_mm {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  const void *a, *b;
  void *d;
  float beta;
  int ok;
};

static cublasLtHandle_t lt;

// Row-major TN as src/cuda/gemm.cu: cuBLASLt's A is our B (its scale vector sb), its B our A (sa).
static void lt_make(lt_mm *x, int m, int n, int k, int v, int outer, const void *a, const void *b, const float *sa,
                    const float *sb, void *d) {
  const cudaDataType_t at = v == V_FWD ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2, dt = v == V_WGRAD ? CUDA_R_32F : CUDA_R_16BF;
  cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  int8_t fast = 1;
  memset(x, 0, sizeof *x);
  x->a = b, x->b = a, x->d = d, x->beta = v == V_WGRAD ? 1.0f : 0.0f;
  cublasLtMatmulDescCreate(&x->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn);
  cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  if (outer) {
    int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
    cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
  }
  cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb);
  cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa);
  cublasLtMatrixLayoutCreate(&x->la, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&x->lb, at, k, m, k);
  cublasLtMatrixLayoutCreate(&x->ld, dt, n, m, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  size_t w = WS;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w);
  cublasLtMatmulHeuristicResult_t r;
  int nr = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, x->desc, x->la, x->lb, x->ld, x->ld, pref, 1, &r, &nr);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && nr > 0) x->algo = r.algo, x->ok = 1;
  else printf("    cuBLASLt %s: no algorithm (%s)\n", outer ? "outer-vector" : "per-tensor", cublasLtGetStatusName(st));
}

static void lt_free(lt_mm *x) {
  cublasLtMatrixLayoutDestroy(x->la), cublasLtMatrixLayoutDestroy(x->lb), cublasLtMatrixLayoutDestroy(x->ld);
  cublasLtMatmulDescDestroy(x->desc);
}

static void *lt_ws;
static cudaError_t lt_run(const void *ctx) {
  const lt_mm *x = (const lt_mm *)ctx;
  const float alpha = 1;
  const cublasStatus_t st = cublasLtMatmul(lt, x->desc, &alpha, x->a, x->la, x->b, x->lb, &x->beta, x->d, x->ld, x->d,
                                           x->ld, &x->algo, lt_ws, WS, 0);
  return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

struct probe_run {
  const kernel_cfg *cfg;
  int v;
  gemm_plan plan;
};
static cudaError_t probe_run_fn(const void *ctx) {
  const probe_run *r = (const probe_run *)ctx;
  return r->cfg->launch[r->v](&r->plan, 0);
}

// ---- timing ----------------------------------------------------------------------------------------------

enum { WARMUP = 3, REPS = 20 };

static int cmp_float(const void *x, const void *y) {
  const float a = *(const float *)x, b = *(const float *)y;
  return (a > b) - (a < b);
}

// median ms of one call over REPS back-to-back calls, each between two events; -1 on failure
static double time_median(cudaError_t (*fn)(const void *), const void *ctx) {
  cudaEvent_t ev[REPS + 1];
  float ms[REPS];
  for (int i = 0; i < WARMUP; i++)
    if (fn(ctx) != cudaSuccess) return -1;
  for (int i = 0; i <= REPS; i++) cudaEventCreate(&ev[i]);
  cudaEventRecord(ev[0]);
  int ok = 1;
  for (int i = 0; i < REPS; i++) {
    ok &= fn(ctx) == cudaSuccess;
    cudaEventRecord(ev[i + 1]);
  }
  ok &= cudaEventSynchronize(ev[REPS]) == cudaSuccess;
  for (int i = 0; ok && i < REPS; i++) cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]);
  for (int i = 0; i <= REPS; i++) cudaEventDestroy(ev[i]);
  if (!ok) return -1;
  qsort(ms, REPS, sizeof ms[0], cmp_float);
  return 0.5 * (ms[REPS / 2 - 1] + ms[REPS / 2]);
}

// the 1.3B trainer's GEMMs (T = 8192 tokens, C = 2048), as in probe_rowwise_algos.cu
static const struct {
  shape s;
  int v;
} timed_shapes[] = {
    {{"fwd qkv", 8192, 6144, 2048}, V_FWD},     {{"fwd proj", 8192, 2048, 2048}, V_FWD},
    {{"fwd fc1", 8192, 8192, 2048}, V_FWD},     {{"fwd fc2", 8192, 2048, 8192}, V_FWD},
    {{"dgrad qkv", 8192, 2048, 6144}, V_DGRAD}, {{"dgrad fc1", 8192, 2048, 8192}, V_DGRAD},
    {{"dgrad fc2", 8192, 8192, 2048}, V_DGRAD}, {{"wgrad qkv", 6144, 2048, 8192}, V_WGRAD},
    {{"wgrad fc1", 8192, 2048, 8192}, V_WGRAD}, {{"wgrad fc2", 2048, 8192, 8192}, V_WGRAD},
    {{"wgrad proj", 2048, 2048, 8192}, V_WGRAD},
};
enum { N_TIMED = sizeof timed_shapes / sizeof timed_shapes[0] };

static double t_probe[N_CONFIGS][N_TIMED], t_pt[N_CONFIGS][N_TIMED], t_ov[N_CONFIGS][N_TIMED];

// One timed shape for one configuration: the probe against cuBLASLt outer-vector once (both from zeroed
// or fresh D), then the three timings back to back. Returns 0 on an error.
static int time_one(int ci, int ti, int max_grid, const bufs *b) {
  const kernel_cfg *c = &configs[ci];
  const shape *s = &timed_shapes[ti].s;
  const int v = timed_shapes[ti].v;
  const size_t mn = (size_t)s->m * s->n, esz = v == V_WGRAD ? 4 : 2;
  const uint8_t *a = v == V_FWD ? b->a4 : b->a5;
  probe_run pr;
  pr.cfg = c, pr.v = v;
  if (!plan_make(&pr.plan, c, a, b->b, b->sa, b->sb, b->d, s->m, s->n, s->k, max_grid)) return 0;
  lt_mm pt, ov;
  lt_make(&pt, s->m, s->n, s->k, v, 0, a, b->b, b->sa, b->sb, b->d2);
  lt_make(&ov, s->m, s->n, s->k, v, 1, a, b->b, b->sa, b->sb, b->d2);
  double diff = -1;
  if (ov.ok) {
    unsigned st[2];
    CK(cudaMemset(b->d, 0, mn * esz));
    CK(cudaMemset(b->d2, 0, mn * esz));
    CK(probe_run_fn(&pr));
    CK(lt_run(&ov));
    CK(cudaMemset(b->stat, 0, 8));
    maxdiff_kernel<<<1024, 256>>>(b->d, b->d2, mn, v == V_WGRAD, b->stat);
    CK(cudaMemcpy(st, b->stat, 8, cudaMemcpyDeviceToHost));
    float md, my;
    memcpy(&md, &st[0], 4), memcpy(&my, &st[1], 4);
    diff = my > 0 ? md / my : INFINITY;
  }
  const double ms = time_median(probe_run_fn, &pr);
  const double ms_pt = pt.ok ? time_median(lt_run, &pt) : -1, ms_ov = ov.ok ? time_median(lt_run, &ov) : -1;
  lt_free(&pt), lt_free(&ov);
  t_probe[ci][ti] = ms, t_pt[ci][ti] = ms_pt, t_ov[ci][ti] = ms_ov;
  const double tf = 2.0 * s->m * s->n * s->k / 1e9;
  printf("    %-10s %5dx%5dx%5d  probe %.3f ms %4.0f TF/s | per-tensor %.3f ms, probe/pt %.2fx | outer-vec %.3f ms, "
         "probe/ov %.2fx | vs ov max|diff|/max|ov| %.1e%s\n",
         s->name, s->m, s->n, s->k, ms, ms > 0 ? tf / ms : 0.0, ms_pt, ms_pt > 0 ? ms / ms_pt : 0.0, ms_ov,
         ms_ov > 0 ? ms / ms_ov : 0.0, diff, diff > 1e-2 ? " MISMATCH" : "");
  fflush(stdout);
  return ms > 0;
}

// ---- main ----------------------------------------------------------------------------------------------

int main(int argc, char **argv) {
  const char *which = "0123456789"; // every configuration of the table
  int check_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-check")) check_only = 1;
    else which = argv[i];
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    printf("needs an sm_90 GPU (the kernels are sm_90a)\n");
    return 1;
  }
  int ver = 0, mi = 0, pa = 0, drv = 0;
  cublasLtGetProperty(MAJOR_VERSION, &ver), cublasLtGetProperty(MINOR_VERSION, &mi), cublasLtGetProperty(PATCH_LEVEL, &pa);
  cudaDriverGetVersion(&drv);
  printf("device %s sm_%d%d, %d SMs, driver %d, cublasLt %d.%d.%d\n", prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, drv, ver, mi, pa);
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode_tiled, 12000, cudaEnableDefault, &q) !=
          cudaSuccess || q != cudaDriverEntryPointSuccess || !encode_tiled) {
    printf("no cuTensorMapEncodeTiled in this driver\n");
    return 1;
  }
  void *wd = NULL;
  if (cudaHostAlloc(&wd, 64, cudaHostAllocMapped) == cudaSuccess) memset(wd, 0, 64), watchdog = (volatile unsigned *)wd;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    printf("cublasLtCreate failed\n");
    return 1;
  }
  bufs b;
  if (!bufs_make(&b)) return 1;
  lt_ws = b.ws;

  int failed = 0, ran[N_CONFIGS] = {0};
  for (int ci = 0; ci < N_CONFIGS; ci++) {
    if (!strchr(which, '0' + ci)) continue;
    const kernel_cfg *c = &configs[ci];
    printf("config %d: %s, tile %dx%dx%d, %d stages, cluster %d, %d B shared\n", ci, c->name, c->bm, c->bn, BK,
           c->stages, c->cluster, c->smem);
    int max_grid[N_VARIANTS], ok = 1;
    for (int v = 0; v < N_VARIANTS; v++) {
      int regs = 0, local = 0;
      const cudaError_t e = c->setup[v](&max_grid[v], &regs, &local);
      if (e != cudaSuccess) {
        printf("  %s: setup failed: %s (%d registers)\n", variant_name[v], cudaGetErrorString(e), regs);
        after_failure();
        ok = 0;
        break;
      }
      printf("  %-22s %d registers, %d B local, grid %d\n", variant_name[v], regs, local, max_grid[v]);
    }
    fflush(stdout);
    if (!ok) {
      failed++;
      continue;
    }
    // one line per shape: fwd, dgrad, wgrad, each on the full grid then on 3 clusters
    int pass = 1;
    double worst[2] = {0, 0};
    for (int si = 0; si < N_CHECK; si++) {
      const shape *s = &check_shapes[si];
      printf("  check %-13s %5dx%5dx%5d:", s->name, s->m, s->n, s->k);
      fflush(stdout);
      for (int v = 0; v < N_VARIANTS; v++) {
        const int grids[2] = {max_grid[v], 3 * c->cluster};
        for (int g = 0; g < 2; g++)
          if (!check_one(c, v, s, grids[g], &b, worst)) {
            pass = 0;
            after_failure();
          }
      }
      printf("\n");
    }
    printf("  config %d check: %s (worst err/S %.2e, worst err/|ref| %.2e where |ref| >= S/64)\n", ci,
           pass ? "PASS" : "FAIL", worst[0], worst[1]);
    fflush(stdout);
    failed += !pass;
    if (check_only) continue;
    printf("  timings (median of %d; cuBLASLt: heuristic's first answer, fast accumulation)%s\n", REPS,
           pass ? "" : " -- THIS CONFIGURATION FAILED ITS CHECK");
    for (int ti = 0; ti < N_TIMED; ti++)
      if (!time_one(ci, ti, max_grid[timed_shapes[ti].v], &b)) after_failure();
    ran[ci] = pass ? 1 : -1;
  }

  if (!check_only) {
    printf("\nsummary (ms; best = fastest configuration that passed its check)\n%-10s %-17s %9s %9s", "GEMM", "m x n x k",
           "per-tens", "outer-vec");
    for (int ci = 0; ci < N_CONFIGS; ci++)
      if (ran[ci]) printf("   cfg %d%s", ci, ran[ci] < 0 ? "!" : " ");
    printf("   best/pt best/ov\n");
    for (int ti = 0; ti < N_TIMED; ti++) {
      const shape *s = &timed_shapes[ti].s;
      double best = 1e30, pt = -1, ov = -1;
      printf("%-10s %5dx%5dx%5d", s->name, s->m, s->n, s->k);
      for (int ci = 0; ci < N_CONFIGS; ci++)
        if (ran[ci]) {
          if (pt < 0) pt = t_pt[ci][ti], ov = t_ov[ci][ti]; // the first configuration's cuBLASLt numbers
          if (ran[ci] > 0 && t_probe[ci][ti] > 0 && t_probe[ci][ti] < best) best = t_probe[ci][ti];
        }
      printf(" %9.3f %9.3f", pt, ov);
      for (int ci = 0; ci < N_CONFIGS; ci++)
        if (ran[ci]) printf(" %8.3f", t_probe[ci][ti]);
      if (best < 1e30 && pt > 0 && ov > 0) printf("   %6.2fx %6.2fx\n", best / pt, best / ov);
      else printf("   -\n");
    }
  }
  printf("probe done: %d configuration(s) failed\n", failed);
  return failed ? 1 : 0;
}
