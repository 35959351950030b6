// probe_rowwise_wgmma.h — the kernel of probe_rowwise_wgmma.cu: an sm_90a FP8 GEMM with row-wise
// scales applied in the epilogue, D = sa[m]·sb[n]·(A·Bᵀ) to BF16 or added to FP32 D, and the PTX it is
// built from (one inline asm statement per instruction; the forms are the PTX ISA's: 9.7.9.25
// cp.async.bulk.tensor, 9.7.13.15 mbarrier, 9.7.15 wgmma).
//
// The kernel (sm_90a only): a persistent grid of 384-thread CTAs over BM x BN output tiles. Warpgroup 0 is
// the producer: one thread issues the TMA loads of 128-wide k slabs (128-byte swizzle, one 128-byte row
// per M or N index) into a ring of STAGES shared-memory stages, each with a "full" mbarrier (TMA bytes
// arrived) and an "empty" one (every consumer warp done reading). Warpgroups 1 and 2 are the consumers:
// each owns BM/2 rows of the tile and all BN columns, issues wgmma.m64nBNk32 from the stage's
// descriptors (4 k32 steps per slab, one more wgmma per extra 64 rows), keeps one slab's wgmmas in
// flight while releasing the slab before, and at the tile's end multiplies its FP32 accumulators by
// sa[row]·sb[col] and stores them (BF16, or FP32 added to D). setmaxnreg moves registers from the
// producer (40) to the consumers (232). With CLUSTER = 2 the two CTAs of a cluster take vertically
// adjacent tiles with the same B columns: each loads its own A and half of B, multicast to both, and
// each stage is released to a producer only when the consumers of both CTAs are done with it.
// Tails: TMA zero-fills rows and k past the end, the epilogue masks rows and columns; so m is any,
// n even (pairs of columns per store) and k a multiple of 16 (TMA's row pitch).
//
// Kept apart from the probe's check and timing so the kernel can move into src/cuda/ as it is.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cstdint>

// ---- shared-memory addresses and barriers ----------------------------------------------------------

static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

// makes the inits visible to the async proxy (TMA's complete_tx) and to the other CTAs of the cluster
static __device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// the producer's arrival: one arrival plus the bytes the TMA loads of this phase will deliver
static __device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}

// arrival on the barrier at the same offset in CTA `rank` of the cluster (itself included)
static __device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
               "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}"
               :: "r"(bar), "r"(rank) : "memory");
}

static __device__ __forceinline__ uint32_t mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok;
}

static __device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Waits for the phase of parity `parity` to complete. A wrong phase or byte count deadlocks the whole
// grid; a watchdog turns that into a trap after ~5 s so a broken configuration costs seconds, not the
// run. Before trapping it leaves {1, block, thread, barrier, parity} in `diag` (mapped host memory, so
// the host can read it from a dead context). No printf: a call inside the wgmma pipeline makes ptxas
// serialize the wgmmas. The timer is read only once the wait is slow.
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, volatile unsigned *diag) {
  if (mbar_try_wait(bar, parity)) return;
  const uint64_t t0 = globaltimer_ns();
  for (uint32_t spins = 1;; spins++) {
    if (mbar_try_wait(bar, parity)) return;
    if ((spins & 1023) == 0 && globaltimer_ns() - t0 > 5000000000ull) {
      if (diag) {
        diag[1] = blockIdx.x, diag[2] = threadIdx.x, diag[3] = bar, diag[4] = parity;
        __threadfence_system();
        diag[0] = 1;
        __threadfence_system();
      }
      __trap();
    }
  }
}

// ---- clusters ----------------------------------------------------------------------------------------

static __device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %cluster_ctarank;" : "=r"(r));
  return r;
}

static __device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// ---- TMA ------------------------------------------------------------------------------------------------

// One 2-D box of the tensor map into this CTA's shared memory; c0 is the inner (k) coordinate in
// elements, c1 the row. Out-of-bounds parts of the box are zero-filled and still counted in the bytes.
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *tmap, uint32_t bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"((uint64_t)tmap), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// The same box written at offset dst of every CTA in ctamask, each CTA's barrier at offset bar
// receiving the bytes.
static __device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const void *tmap, uint32_t bar, int c0,
                                                             int c1, uint16_t ctamask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(dst), "l"((uint64_t)tmap), "r"(c0), "r"(c1), "r"(bar), "h"(ctamask) : "memory");
}

static __device__ __forceinline__ void tma_prefetch_desc(const void *tmap) {
  asm volatile("prefetch.tensormap [%0];" :: "l"((uint64_t)tmap) : "memory");
}

// ---- warpgroup registers ----------------------------------------------------------------------------

template <int N> static __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}
template <int N> static __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}

// ---- wgmma ----------------------------------------------------------------------------------------------

// Shared-memory matrix descriptor of a K-major operand tile stored as TMA's 128-byte swizzle writes it:
// one 128-byte row (128 FP8 values along k) per M or N index, 8-row groups of 1024 bytes, the tile
// 1024-byte aligned. Fields (PTX ISA 9.7.15.5.1.2.2): bits 0-13 start address >> 4; 16-29 leading
// byte offset >> 4, unused for swizzled K-major layouts ("assumed 1"); 32-45 stride byte offset >> 4
// = 1024 >> 4, the distance between 8-row groups; 49-51 base offset 0 (the pattern starts on a 1024-byte
// boundary); 62-63 swizzle mode 1 = 128B.
static __device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}

// Pins the accumulators at this point of the program: the compiler may not move their reads or writes
// across it (after wgmma_wait, before the epilogue reads them; before a tile's first wgmma_fence).
template <int R> static __device__ __forceinline__ void reg_fence(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i]) :: "memory");
}

#define WGMMA_REGS_LO \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_REGS_HI \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define WGMMA_F8(d, i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_OPS64(d, o) \
  WGMMA_F8(d, o), WGMMA_F8(d, o + 8), WGMMA_F8(d, o + 16), WGMMA_F8(d, o + 24), \
  WGMMA_F8(d, o + 32), WGMMA_F8(d, o + 40), WGMMA_F8(d, o + 48), WGMMA_F8(d, o + 56)

// D(64 x N, FP32) (+)= A(64 x 32, atype, smem) · B(N x 32, E4M3, smem)ᵀ; scale_d 0 overwrites D.
// Operands: the N/2 accumulators first, then the two descriptors and scale_d.
#define WGMMA_N256(ATYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n256k32.f32." ATYPE ".e4m3 {" WGMMA_REGS_LO ", " WGMMA_REGS_HI "}," \
               " %128, %129, p, 1, 1;\n}" \
               : WGMMA_OPS64(d, 0), WGMMA_OPS64(d, 64) : "l"(da), "l"(db), "r"(scale_d))
#define WGMMA_N128(ATYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n128k32.f32." ATYPE ".e4m3 {" WGMMA_REGS_LO "}," \
               " %64, %65, p, 1, 1;\n}" \
               : WGMMA_OPS64(d, 0) : "l"(da), "l"(db), "r"(scale_d))

template <int N, int A_E5M2>
static __device__ __forceinline__ void wgmma_fp8(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  static_assert(N == 128 || N == 256, "wgmma_fp8: N is 128 or 256");
  if constexpr (N == 256) {
    if constexpr (A_E5M2) WGMMA_N256("e5m2"); else WGMMA_N256("e4m3");
  } else {
    if constexpr (A_E5M2) WGMMA_N128("e5m2"); else WGMMA_N128("e4m3");
  }
}

// ---- the kernel ---------------------------------------------------------------------------------------

enum { THREADS = 384, BK = 128, PRODUCER_REGS = 40, CONSUMER_REGS = 232 };
// The CTA's register pool is what it was launched with: 384 threads x 168 (65536 / 384 rounded down to 8,
// what __launch_bounds__(384, 1) lets ptxas use, and does: -Xptxas -v says 168). The producer's release
// must cover the consumers' growth, or setmaxnreg.inc waits forever.
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 168 * THREADS, "setmaxnreg: the register pool is overdrawn");

// One k-slab of a consumer's tile: its M_ATOMS x (BK / 32) wgmmas, issued and committed as one group; the
// first slab of a tile (kb 0) starts from zero (scale_d 0), the rest accumulate. Both kernels' mainloop step.
template <int BN, int M_ATOMS, int A_E5M2>
static __device__ __forceinline__ void wgmma_slab(float (&acc)[M_ATOMS][BN / 2], uint32_t a0, uint32_t b0, int kb) {
#pragma unroll
  for (int ma = 0; ma < M_ATOMS; ma++) reg_fence(acc[ma]);
  wgmma_fence();
  // k32 step kk starts 32·kk bytes into each 128-byte row: the hardware applies the swizzle to the address
  // it forms (bits 4-6 ^= bits 7-9), as TMA did when it wrote the rows
#pragma unroll
  for (int kk = 0; kk < BK / 32; kk++)
#pragma unroll
    for (int ma = 0; ma < M_ATOMS; ma++)
      wgmma_fp8<BN, A_E5M2>(acc[ma], wgmma_desc_sw128(a0 + ma * 64 * BK + kk * 32), wgmma_desc_sw128(b0 + kk * 32),
                            (kb | kk) != 0);
  wgmma_commit();
}

struct gemm_args {
  const float *sa, *sb; // (m), (n)
  void *d;              // (m, n) BF16, or FP32 accumulated into
  int m, n, k;
  int group;            // cluster rows of tiles per raster group
  volatile unsigned *diag; // the watchdog's report (mapped host memory), or NULL
};

template <int BM, int BN, int STAGES> static constexpr __host__ __device__ int smem_bytes() {
  return STAGES * (BM + BN) * BK + 2 * STAGES * 8 + 1024; // stages, barriers, slack to align to 1024
}

// nvcc -arch=sm_90a also embeds compute_90 PTX, which has no wgmma or setmaxnreg: in that pass the
// kernel is an empty shell (never the copy that runs on an H100, which takes the sm_90a cubin).
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SM90A_BODY 1
#else
#define SM90A_BODY 0
#endif

#if SM90A_BODY
// Work unit u (a cluster's tile) -> (cluster row, tile column). Units run GROUP rows at a time, down
// each column then to the next, so the CTAs running together share A rows and B columns in L2.
static __device__ __forceinline__ void unit_tile(int u, int rows, int cols, int group, int *r, int *c) {
  const int per = group * cols, g = u / per, first = g * group;
  const int gm = min(rows - first, group), w = u - g * per;
  *r = first + w % gm;
  *c = w / gm;
}

// A consumer warp is done with a stage (its wgmmas on it completed): tell the producers of every CTA
// whose multicast writes into it.
template <int CLUSTER> static __device__ __forceinline__ void release_stage(uint32_t empty_bar) {
  if constexpr (CLUSTER == 1) mbar_arrive(empty_bar);
  else
    for (int q = 0; q < CLUSTER; q++) mbar_arrive_cluster(empty_bar, q);
}
#endif

// grid: persistent, a multiple of CLUSTER, at most one CTA per SM (the shared memory sees to that);
// block: 384 threads = the producer warpgroup and two consumer warpgroups. A consumer thread owns, per
// 64-row atom of its BM/2 rows, rows (warp·16 + lane/4) and that + 8, and columns 8j + 2·(lane%4) + {0,1}
// for j < BN/8: the wgmma accumulator layout (acc[4j + 2h + e] is row + 8h, column 8j + 2·(lane%4) + e).
template <int BM, int BN, int STAGES, int CLUSTER, int A_E5M2, int OUT_F32>
__global__ void __launch_bounds__(THREADS, 1)
rowwise_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b, gemm_args p) {
#if SM90A_BODY
  constexpr int WG_ROWS = BM / 2, M_ATOMS = WG_ROWS / 64;
  constexpr uint32_t A_BYTES = BM * BK, B_BYTES = BN * BK, B_PART = B_BYTES / CLUSTER;
  static_assert(WG_ROWS % 64 == 0 && M_ATOMS <= 2, "each consumer takes one or two 64-row wgmma atoms");
  static_assert(BN == 128 || BN == 256, "BN is one wgmma's N");
  static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of 1 or 2 CTAs along m");
  static_assert((BN / CLUSTER) % 8 == 0 && B_PART % 1024 == 0, "each CTA's part of B starts a swizzle atom");
  static_assert(smem_bytes<BM, BN, STAGES>() <= 227 * 1024, "stages exceed the 227 KiB of shared memory");

  extern __shared__ uint8_t smem_raw[];
  // TMA's 128-byte swizzle and the descriptors' base offset 0 both assume 1024-byte aligned tiles
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t s_a = base, s_b = base + STAGES * A_BYTES, bars = s_b + STAGES * B_BYTES;
#define FULL(s) (bars + 8 * (s))
#define EMPTY(s) (bars + 8 * (STAGES + (s)))

  const int wg = threadIdx.x / 128;
  const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(FULL(s), 1);                // the producer's arrive.expect_tx; the bytes do the rest
      mbar_init(EMPTY(s), 8 * CLUSTER);     // one arrival per consumer warp of every CTA of the cluster
    }
    mbar_init_fence();
  }
  if (CLUSTER > 1) cluster_sync(); else __syncthreads();

  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int rows = (tiles_m + CLUSTER - 1) / CLUSTER; // cluster rows; an odd last one runs a dead tile
  const int units = rows * tiles_n, kblocks = (p.k + BK - 1) / BK;
  const int cid = blockIdx.x / CLUSTER, nclusters = gridDim.x / CLUSTER;

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      tma_prefetch_desc(&tma_a);
      tma_prefetch_desc(&tma_b);
      int stage = 0;
      uint32_t phase = 0;
      for (int u = cid; u < units; u += nclusters) {
        int r, tn;
        unit_tile(u, rows, tiles_n, p.group, &r, &tn);
        const int tm = r * CLUSTER + rank;
        for (int kb = 0; kb < kblocks; kb++) {
          // a fresh barrier counts as having completed the phase before phase 0: the first lap passes
          mbar_wait(EMPTY(stage), phase ^ 1, p.diag);
          mbar_arrive_expect_tx(FULL(stage), A_BYTES + B_BYTES);
          // a dead tile (odd tile rows, CLUSTER 2) loads the last real rows: its stores are all masked
          tma_load_2d(s_a + stage * A_BYTES, &tma_a, FULL(stage), kb * BK, min(tm, tiles_m - 1) * BM);
          if (CLUSTER == 1)
            tma_load_2d(s_b + stage * B_BYTES, &tma_b, FULL(stage), kb * BK, tn * BN);
          else // this CTA's part of B, into the same place of every CTA, counted by each one's barrier
            tma_load_2d_multicast(s_b + stage * B_BYTES + rank * B_PART, &tma_b, FULL(stage), kb * BK,
                                  tn * BN + (int)rank * (BN / CLUSTER), (uint16_t)((1 << CLUSTER) - 1));
          if (++stage == STAGES) stage = 0, phase ^= 1;
        }
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int cw = wg - 1, t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    float acc[M_ATOMS][BN / 2] = {}; // defined once; each tile's first wgmma (scale_d 0) overwrites it
    int stage = 0, prev = 0;
    uint32_t phase = 0;
    for (int u = cid; u < units; u += nclusters) {
      int r, tn;
      unit_tile(u, rows, tiles_n, p.group, &r, &tn);
      const int tm = r * CLUSTER + rank;
      for (int kb = 0; kb < kblocks; kb++) {
        mbar_wait(FULL(stage), phase, p.diag);
        const uint32_t a0 = s_a + stage * A_BYTES + cw * WG_ROWS * BK, b0 = s_b + stage * B_BYTES;
        wgmma_slab<BN, M_ATOMS, A_E5M2>(acc, a0, b0, kb);
        // keep this slab's wgmmas in flight; the slab before is done once at most one group is pending
        if (kb > 0) {
          wgmma_wait<1>();
          if (lane == 0) release_stage<CLUSTER>(EMPTY(prev));
        }
        prev = stage;
        if (++stage == STAGES) stage = 0, phase ^= 1;
      }
      wgmma_wait<0>();
      if (lane == 0) release_stage<CLUSTER>(EMPTY(prev));
#pragma unroll
      for (int ma = 0; ma < M_ATOMS; ma++) reg_fence(acc[ma]);

      // epilogue: the producer is already filling the ring with the next tile's slabs
      const int row0 = tm * BM + cw * WG_ROWS + warp * 16 + lane / 4, col0 = tn * BN + 2 * (lane % 4);
#pragma unroll
      for (int ma = 0; ma < M_ATOMS; ma++) {
        const int r0 = row0 + ma * 64, r1 = r0 + 8;
        const float s0 = r0 < p.m ? __ldg(p.sa + r0) : 0.0f, s1 = r1 < p.m ? __ldg(p.sa + r1) : 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
          const int c = col0 + 8 * j;
          if (c >= p.n) continue;
          const float2 sb = __ldg((const float2 *)(p.sb + c));
          const float *v = &acc[ma][4 * j];
          if (OUT_F32) {
            float *d = (float *)p.d;
            if (r0 < p.m) {
              float2 *q = (float2 *)(d + (size_t)r0 * p.n + c), o = *q;
              o.x += s0 * sb.x * v[0], o.y += s0 * sb.y * v[1];
              *q = o;
            }
            if (r1 < p.m) {
              float2 *q = (float2 *)(d + (size_t)r1 * p.n + c), o = *q;
              o.x += s1 * sb.x * v[2], o.y += s1 * sb.y * v[3];
              *q = o;
            }
          } else {
            __nv_bfloat16 *d = (__nv_bfloat16 *)p.d;
            if (r0 < p.m)
              *(__nv_bfloat162 *)(d + (size_t)r0 * p.n + c) = __floats2bfloat162_rn(s0 * sb.x * v[0], s0 * sb.y * v[1]);
            if (r1 < p.m)
              *(__nv_bfloat162 *)(d + (size_t)r1 * p.n + c) = __floats2bfloat162_rn(s1 * sb.x * v[2], s1 * sb.y * v[3]);
          }
        }
      }
    }
  }
  // with a cluster, no CTA may leave while its peer can still arrive on its barriers
  if (CLUSTER > 1) {
    __syncwarp();
    cluster_sync();
  }
#undef FULL
#undef EMPTY
#else
  __trap();
#endif
}

// ---- launchers -------------------------------------------------------------------------------------------

// One GEMM, ready to launch: the tensor maps hold the operands' addresses and shapes.
struct gemm_plan {
  CUtensorMap ta, tb;
  gemm_args args;
  int grid;
};

typedef cudaError_t (*launch_fn)(const gemm_plan *p, cudaStream_t s);
typedef cudaError_t (*setup_fn)(int *max_grid, int *regs, int *local_bytes);

template <int BM, int BN, int STAGES, int CLUSTER, int A_E5M2, int OUT_F32>
static cudaError_t gemm_launch(const gemm_plan *p, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3(p->grid);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = smem_bytes<BM, BN, STAGES>();
  cfg.stream = s;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CLUSTER, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = CLUSTER > 1;
  return cudaLaunchKernelEx(&cfg, rowwise_gemm_kernel<BM, BN, STAGES, CLUSTER, A_E5M2, OUT_F32>, p->ta, p->tb, p->args);
}

// Opts the kernel into its shared memory and says how many CTAs run at once (the persistent grid).
template <int BM, int BN, int STAGES, int CLUSTER, int A_E5M2, int OUT_F32>
static cudaError_t gemm_setup(int *max_grid, int *regs, int *local_bytes) {
  void (*k)(CUtensorMap, CUtensorMap, gemm_args) = rowwise_gemm_kernel<BM, BN, STAGES, CLUSTER, A_E5M2, OUT_F32>;
  const int smem = smem_bytes<BM, BN, STAGES>();
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  cudaFuncAttributes fa;
  if ((e = cudaFuncGetAttributes(&fa, k)) != cudaSuccess) return e;
  *regs = fa.numRegs, *local_bytes = (int)fa.localSizeBytes;
  if (fa.numRegs * THREADS < 128 * PRODUCER_REGS + 256 * CONSUMER_REGS) return cudaErrorInvalidConfiguration; // would hang
  int sms = 0;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0)) != cudaSuccess) return e;
  *max_grid = sms / CLUSTER * CLUSTER;
  if (CLUSTER > 1) { // SMs of a GPC that cannot pair stay idle: ask how many clusters fit
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3(*max_grid), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = smem;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
    int nc = 0;
    if ((e = cudaOccupancyMaxActiveClusters(&nc, k, &cfg)) != cudaSuccess) return e;
    if (nc > 0) *max_grid = nc * CLUSTER;
  }
  return cudaSuccess;
}
