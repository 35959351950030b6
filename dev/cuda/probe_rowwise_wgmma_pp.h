// probe_rowwise_wgmma_pp.h — the ping-pong form of probe_rowwise_wgmma.h's kernel: the same GEMM and
// numerics, D = bf16(sa[m]·sb[n]·(A·Bᵀ)) or D += sa[m]·sb[n]·(A·Bᵀ) in FP32, built from the same PTX
// helpers, with the epilogue of one tile running under the mainloop of the next.
//
// Why a second form: in the first, both consumer warpgroups share each tile (BM/2 rows each), so both
// reach the epilogue together and the tensor cores idle while it runs; at k = 2048 (16 slabs a tile)
// that costs 1.8-2x cuBLASLt's time. Here each consumer warpgroup owns whole BM x BN tiles (BM x BN =
// 128 x 128 or 64 x 256: 128 FP32 accumulators a thread, what 232 registers hold with the epilogue),
// the two take alternate tiles of their CTA, and their mainloops run in turn: while one issues wgmma,
// the other scales and stores its last tile. The grid is persistent (one CTA an SM); CTA b takes tiles
// b, b + grid, b + 2·grid, ... in unit_tile's raster, consumer warpgroup c its c-th, (c+2)-th, ...
//
// Barrier protocol. One producer thread fills one ring of STAGES stages with the CTA's slabs in tile
// order: slab g = i·kblocks + kb is k slab kb of the CTA's i-th tile, in stage g % STAGES, lap
// g / STAGES. Per stage s: FULL(s) (count 1: the producer's arrive.expect_tx, then the TMA bytes) and
// EMPTY(s) (count 4: lane 0 of each warp of the consumer that owns the slab). Two more, TURN(0) and
// TURN(1) (count 4: lane 0 of each warp of the other consumer). Consumer c (warpgroup c + 1) takes
// tiles i = c, c + 2, ...; j = (i - c) / 2 counts its own tiles.
//   producer, slab g:       wait EMPTY(g % STAGES) parity ((g / STAGES) & 1) ^ 1  (the slab g - STAGES
//                           released; a fresh barrier passes parity 1), arrive.expect_tx FULL, 2 loads
//   consumer c, tile i > 0: wait TURN(c) parity (j + c + 1) & 1  (phase j - 1 + c of TURN(c): the
//                           other consumer has issued all of tile i - 1's wgmmas)
//   consumer c, slab g:     wait FULL(g % STAGES) parity (g / STAGES) & 1; wgmmas; after the slab
//                           g + 1's are issued (or the tile's last), arrive EMPTY(g % STAGES)
//   consumer c, tile end:   arrive TURN(c ^ 1) once its last slab's wgmmas are issued, then the epilogue
// Why the parities are unambiguous (a parity wait only tells phase k - 1 from phase k):
// - FULL: when consumer c waits for slab g of tile i, every slab before tile i has been seen full, by
//   itself or by the other consumer before it passed the turn, and the slabs of tile i before g by
//   itself; so the fill of slab g - STAGES is complete. The fill of g + STAGES needs slab g released,
//   which only this waiter does. So FULL(s) is exactly one phase behind or at g's. Without the turn
//   (consumers running freely) a consumer could be a whole lap ahead of a slow fill of the other's
//   slab and take it for its own: the turn is what makes one ring shared by two consumers correct.
// - EMPTY: slab g can only be released after it is filled, which waits for slab g - STAGES's release;
//   and the producer waited for slab g - 2·STAGES's release before filling g - STAGES.
// - TURN(c): its phase j + c - 1 completes when the other consumer ends the mainloop of tile i - 1,
//   which it starts only after waiting on TURN(c ^ 1) for tile i - 2's end, which consumer c arrives
//   on only after its own previous wait on TURN(c). So the waiter is never two phases behind.
// Nothing waits on a turn that is never given: tile i - 1 exists for every tile i > 0 of the CTA, and a
// last turn given to a consumer with no tile left is never waited on.
//
// Epilogue: a thread holds, per 64-row atom, rows r and r + 8 and columns 8j + 2·(lane%4) + {0, 1}
// (the wgmma accumulator layout). BF16: it scales and rounds its pairs as the first form does, then the
// 4 lanes of a quad transpose their 4 x 4 words (rows r, r + 8 x columns 16J .. 16J + 15) with 4
// shuffles, so each lane stores 8 consecutive columns of one row: one 16-byte store. FP32 +=: lanes
// 2q and 2q + 1 swap halves, so each holds 4 consecutive columns of one row: one 16-byte load, add,
// store. Where n is not a multiple of 8 (BF16) or 4 (FP32) the same values go element by element,
// masked at the right edge. Tails as the first form: m any, n even, k a multiple of 16.
// probe_rowwise_wgmma_pp_protocol.py models the protocol (random interleavings, TMA fills landing out of
// order) and finds a consumer reading the other's slab once the turn is taken out.
#pragma once
#include <cstring>

#include "probe_rowwise_wgmma.h"

enum { PP_WG_ACC = 128 }; // FP32 accumulators a consumer thread holds: BM·BN / 128

template <int BM, int BN, int STAGES> static constexpr __host__ __device__ int pp_smem_bytes() {
  return STAGES * (BM + BN) * BK + (2 * STAGES + 2) * 8 + 1024; // stages, FULL/EMPTY/TURN, alignment slack
}

#if SM90A_BODY
// Transposes the quad's 4 x 4 words: lane q's word s goes to lane s, word q. Two butterflies, one per
// index bit: swap lane bit b with word bit b (the words whose bit b differs from the lane's travel).
static __device__ __forceinline__ void quad_transpose(uint32_t (&x)[4], int q) {
#pragma unroll
  for (int hi = 0; hi < 2; hi++) { // bit 0: words 2hi, 2hi + 1 with lane q ^ 1
    const uint32_t r = __shfl_xor_sync(0xffffffffu, (q & 1) ? x[2 * hi] : x[2 * hi + 1], 1);
    if (q & 1) x[2 * hi] = r;
    else x[2 * hi + 1] = r;
  }
#pragma unroll
  for (int lo = 0; lo < 2; lo++) { // bit 1: words lo, lo + 2 with lane q ^ 2
    const uint32_t r = __shfl_xor_sync(0xffffffffu, (q & 2) ? x[lo] : x[lo + 2], 2);
    if (q & 2) x[lo] = r;
    else x[lo + 2] = r;
  }
}

static __device__ __forceinline__ uint32_t bf162_bits(__nv_bfloat162 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// One 64-row atom's epilogue, BF16 out. v: the atom's BN/2 accumulators; r0: the thread's first row;
// c0: the tile's first column; q = lane % 4; vec: 16-byte stores allowed (n % 8 == 0, D and sb aligned).
template <int BN>
static __device__ __forceinline__ void pp_store_bf16(const float (&v)[BN / 2], int r0, int c0, int q, bool vec,
                                                     const gemm_args &p) {
  const int r1 = r0 + 8;
  const float s0 = r0 < p.m ? __ldg(p.sa + r0) : 0.0f, s1 = r1 < p.m ? __ldg(p.sa + r1) : 0.0f;
  const int row = (q & 1) ? r1 : r0;
  __nv_bfloat16 *drow = (__nv_bfloat16 *)p.d + (size_t)row * p.n;
#pragma unroll
  for (int J = 0; J < BN / 16; J++) {
    // word 2jj + h: row r + 8h, columns 16J + 8jj + 2q + {0, 1}; scaled as the first form scales
    uint32_t x[4];
#pragma unroll
    for (int jj = 0; jj < 2; jj++) {
      const int j = 2 * J + jj, c = c0 + 8 * j + 2 * q;
      const float2 sb = c < p.n ? __ldg((const float2 *)(p.sb + c)) : make_float2(0.0f, 0.0f);
      x[2 * jj] = bf162_bits(__floats2bfloat162_rn(s0 * sb.x * v[4 * j], s0 * sb.y * v[4 * j + 1]));
      x[2 * jj + 1] = bf162_bits(__floats2bfloat162_rn(s1 * sb.x * v[4 * j + 2], s1 * sb.y * v[4 * j + 3]));
    }
    quad_transpose(x, q); // now: row r + 8·(q & 1), columns 16J + 8·(q >> 1) + 0..7
    const int col = c0 + 16 * J + 8 * (q >> 1);
    if (row >= p.m || col >= p.n) continue;
    if (vec) *(uint4 *)(drow + col) = make_uint4(x[0], x[1], x[2], x[3]);
    else {
      unsigned short *d = (unsigned short *)(drow + col);
#pragma unroll
      for (int e = 0; e < 8; e++)
        if (col + e < p.n) d[e] = (unsigned short)(x[e / 2] >> (16 * (e & 1)));
    }
  }
}

// The same, FP32 D accumulated into; vec: 16-byte accesses allowed (n % 4 == 0, D and sb aligned).
template <int BN>
static __device__ __forceinline__ void pp_store_f32(const float (&v)[BN / 2], int r0, int c0, int q, bool vec,
                                                    const gemm_args &p) {
  // every lane of the quad takes part in the shuffles, rows past m too: the masks are on the accesses
  const int odd = q & 1, row = r0 + 8 * odd;
  const float s = row < p.m ? __ldg(p.sa + row) : 0.0f;
  float *drow = (float *)p.d + (size_t)row * p.n;
#pragma unroll
  for (int j = 0; j < BN / 8; j++) {
    // lane 2q' keeps row r's pair and takes its neighbour's (columns + 2, + 3); lane 2q' + 1 keeps row
    // r + 8's pair and takes its neighbour's (columns - 2, - 1)
    const float y0 = __shfl_xor_sync(0xffffffffu, odd ? v[4 * j] : v[4 * j + 2], 1);
    const float y1 = __shfl_xor_sync(0xffffffffu, odd ? v[4 * j + 1] : v[4 * j + 3], 1);
    const float w[4] = {odd ? y0 : v[4 * j], odd ? y1 : v[4 * j + 1], odd ? v[4 * j + 2] : y0,
                        odd ? v[4 * j + 3] : y1};
    const int col = c0 + 8 * j + 4 * (q >> 1);
    if (row >= p.m || col >= p.n) continue;
    if (vec) {
      const float4 sb = __ldg((const float4 *)(p.sb + col));
      float4 *dq = (float4 *)(drow + col), o = *dq;
      o.x += s * sb.x * w[0], o.y += s * sb.y * w[1], o.z += s * sb.z * w[2], o.w += s * sb.w * w[3];
      *dq = o;
    } else {
#pragma unroll
      for (int e = 0; e < 4; e++)
        if (col + e < p.n) drow[col + e] += s * __ldg(p.sb + col + e) * w[e];
    }
  }
}
#endif

// grid: persistent, at most one CTA an SM (min(SMs, tiles)); block: 384 threads = the producer
// warpgroup (one thread issues the TMA loads) and two consumer warpgroups taking alternate tiles. A
// consumer thread owns, for its tile, per 64-row atom rows (warp·16 + lane/4) and that + 8, columns
// 8j + 2·(lane%4) + {0,1} for j < BN/8 (acc[ma][4j + 2h + e] is row + 8h, column 8j + 2·(lane%4) + e).
template <int BM, int BN, int STAGES, int A_E5M2, int OUT_F32>
__global__ void __launch_bounds__(THREADS, 1)
rowwise_gemm_pp_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                       gemm_args p) {
#if SM90A_BODY
  constexpr int M_ATOMS = BM / 64;
  constexpr uint32_t A_BYTES = BM * BK, B_BYTES = BN * BK;
  static_assert(BM * BN / 128 == PP_WG_ACC && M_ATOMS >= 1 && BM % 64 == 0, "a warpgroup holds 128 x 128 or 64 x 256");
  static_assert(BN == 128 || BN == 256, "BN is one wgmma's N");
  static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "every stage's tiles start a swizzle atom");
  static_assert(pp_smem_bytes<BM, BN, STAGES>() <= 227 * 1024, "stages exceed the 227 KiB of shared memory");

  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t s_a = base, s_b = base + STAGES * A_BYTES, bars = s_b + STAGES * B_BYTES;
#define FULL(s) (bars + 8 * (s))
#define EMPTY(s) (bars + 8 * (STAGES + (s)))
#define TURN(c) (bars + 8 * (2 * STAGES + (c)))

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(FULL(s), 1);  // the producer's arrive.expect_tx; the bytes do the rest
      mbar_init(EMPTY(s), 4); // one arrival per warp of the consumer that owns the slab
    }
    mbar_init(TURN(0), 4), mbar_init(TURN(1), 4); // one arrival per warp of the other consumer
    mbar_init_fence();
  }
  __syncthreads();

  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int units = tiles_m * tiles_n, kblocks = (p.k + BK - 1) / BK;

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      tma_prefetch_desc(&tma_a);
      tma_prefetch_desc(&tma_b);
      int stage = 0;
      uint32_t phase = 0; // (g / STAGES) & 1 of slab g
      for (int u = blockIdx.x; u < units; u += gridDim.x) {
        int tm, tn;
        unit_tile(u, tiles_m, tiles_n, p.group, &tm, &tn);
        for (int kb = 0; kb < kblocks; kb++) {
          mbar_wait(EMPTY(stage), phase ^ 1, p.diag);
          mbar_arrive_expect_tx(FULL(stage), A_BYTES + B_BYTES);
          tma_load_2d(s_a + stage * A_BYTES, &tma_a, FULL(stage), kb * BK, tm * BM);
          tma_load_2d(s_b + stage * B_BYTES, &tma_b, FULL(stage), kb * BK, tn * BN);
          if (++stage == STAGES) stage = 0, phase ^= 1;
        }
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1, t = threadIdx.x % 128, warp = t / 32, lane = t % 32, q = lane % 4;
    const bool vec = (OUT_F32 ? p.n % 4 == 0 : p.n % 8 == 0) && ((uintptr_t)p.d & 15) == 0 && ((uintptr_t)p.sb & 15) == 0;
    float acc[M_ATOMS][BN / 2] = {}; // defined once; each tile's first wgmma (scale_d 0) overwrites it
    for (int i = c, j = 0;; i += 2, j++) {
      const int u = blockIdx.x + i * gridDim.x;
      if (u >= units) break;
      int tm, tn;
      unit_tile(u, tiles_m, tiles_n, p.group, &tm, &tn);
      // the other consumer has issued tile i - 1's last wgmmas: every slab before this tile was seen full
      if (i > 0) mbar_wait(TURN(c), (j + c + 1) & 1, p.diag);
      const int g0 = i * kblocks; // this tile's first slab in the CTA's sequence
      int stage = g0 % STAGES, prev = 0;
      uint32_t phase = (g0 / STAGES) & 1;
      for (int kb = 0; kb < kblocks; kb++) {
        mbar_wait(FULL(stage), phase, p.diag);
        const uint32_t a0 = s_a + stage * A_BYTES, b0 = s_b + stage * B_BYTES;
        wgmma_slab<BN, M_ATOMS, A_E5M2>(acc, a0, b0, kb);
        // the tile's wgmmas are all issued: the other consumer's mainloop may start behind them
        if (kb == kblocks - 1 && lane == 0) mbar_arrive(TURN(c ^ 1));
        if (kb > 0) {
          wgmma_wait<1>();
          if (lane == 0) mbar_arrive(EMPTY(prev));
        }
        prev = stage;
        if (++stage == STAGES) stage = 0, phase ^= 1;
      }
      wgmma_wait<0>();
      if (lane == 0) mbar_arrive(EMPTY(prev));
#pragma unroll
      for (int ma = 0; ma < M_ATOMS; ma++) reg_fence(acc[ma]);

      // epilogue, under the other consumer's mainloop
      const int r0 = tm * BM + warp * 16 + lane / 4, c0 = tn * BN;
#pragma unroll
      for (int ma = 0; ma < M_ATOMS; ma++) {
        if (OUT_F32) pp_store_f32<BN>(acc[ma], r0 + 64 * ma, c0, q, vec, p);
        else pp_store_bf16<BN>(acc[ma], r0 + 64 * ma, c0, q, vec, p);
      }
    }
  }
#undef FULL
#undef EMPTY
#undef TURN
#else
  __trap();
#endif
}

template <int BM, int BN, int STAGES, int A_E5M2, int OUT_F32>
static cudaError_t gemm_pp_launch(const gemm_plan *p, cudaStream_t s) {
  rowwise_gemm_pp_kernel<BM, BN, STAGES, A_E5M2, OUT_F32>
      <<<p->grid, THREADS, pp_smem_bytes<BM, BN, STAGES>(), s>>>(p->ta, p->tb, p->args);
  return cudaGetLastError();
}

// Opts the kernel into its shared memory; the persistent grid is one CTA an SM.
template <int BM, int BN, int STAGES, int A_E5M2, int OUT_F32>
static cudaError_t gemm_pp_setup(int *max_grid, int *regs, int *local_bytes) {
  void (*k)(CUtensorMap, CUtensorMap, gemm_args) = rowwise_gemm_pp_kernel<BM, BN, STAGES, A_E5M2, OUT_F32>;
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, pp_smem_bytes<BM, BN, STAGES>());
  if (e != cudaSuccess) return e;
  cudaFuncAttributes fa;
  if ((e = cudaFuncGetAttributes(&fa, k)) != cudaSuccess) return e;
  *regs = fa.numRegs, *local_bytes = (int)fa.localSizeBytes;
  if (fa.numRegs * THREADS < 128 * PRODUCER_REGS + 256 * CONSUMER_REGS) return cudaErrorInvalidConfiguration; // would hang
  return cudaDeviceGetAttribute(max_grid, cudaDevAttrMultiProcessorCount, 0);
}
