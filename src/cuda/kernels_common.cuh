/*
 * kernels_common.cuh — small device and launch helpers shared by the CUDA
 * backend's kernel files (cast, transpose, convert, norm, act). Only src/cuda/ includes it.
 *
 * Design note. The memory-bound kernels move data in 16-byte pieces. When a
 * pointer or a row pitch is not 16-byte aligned, the same code path moves the
 * piece with narrower accesses (8, 4, 2 or 1 bytes): the launcher computes the
 * widest legal access once per launch (access_width) and the kernels switch on
 * it, a uniform branch. Narrow accesses are slow where a whole row is
 * unaligned (an odd FP8 row, an odd-length BF16 one): one instruction per 1
 * or 2 bytes, each touching as many cache lines as a 16-byte one. Such rows
 * go through the helpers at the end instead (load16_any,
 * store_pieces_unaligned): aligned 16-byte loads of the chunks that hold a
 * piece, shifted into place, and aligned stores of pieces joined across
 * neighbouring lanes, with narrow stores only at a row segment's two ends.
 * A 4x4 byte block is transposed in registers with __byte_perm so that
 * transposes go through shared memory as 32-bit words.
 */
#ifndef F8_CUDA_KERNELS_COMMON_CUH
#define F8_CUDA_KERNELS_COMMON_CUH

#include <stdint.h>

#include "cuda_state.cuh"
#include "core/numerics.h"

/* Resident blocks per SM assumed when sizing grid-stride launches. */
#define F8I_BLOCKS_PER_SM 8

/* 1 when the caller's noop flag is set: the kernel must write nothing. */
static __device__ __forceinline__ bool noop_set(const float *noop)
{
    return noop != NULL && *noop == 1.0f;
}

/* Widest access (16, 8, 4, 2 or 1 bytes, at most `max`) that is aligned at
 * `p` and at every multiple of `pitch` bytes after it. */
static inline int access_width(const void *p, int64_t pitch, int max)
{
    uint64_t bits = (uint64_t)(uintptr_t)p | (uint64_t)pitch;
    int w = max;
    while (w > 1 && (bits & (uint64_t)(w - 1)) != 0) w >>= 1;
    return w;
}

/* Blocks for a grid-stride loop over `work` items with `threads` per block:
 * enough to cover the work, at most F8I_BLOCKS_PER_SM per SM, at least 1. */
static inline int grid_size(const f8_ctx *ctx, int64_t work, int threads)
{
    int64_t need = (work + threads - 1) / threads;
    int64_t cap = (int64_t)f8i_cuda(ctx)->sm_count * F8I_BLOCKS_PER_SM;
    if (cap < 1) cap = 1;
    if (need > cap) need = cap;
    return need < 1 ? 1 : (int)need;
}

/* Load N bytes (N = 4, 8 or 16) at p into N/4 little-endian words, with
 * accesses of w bytes (w is a power of two; widths above N act as N). */
template <int N>
static __device__ __forceinline__ void load_bytes(uint32_t (&v)[N / 4], const void *p, int w)
{
    if (w >= 16 && N >= 16) {
#pragma unroll
        for (int i = 0; i < N / 16; ++i) {
            uint4 t = ((const uint4 *)p)[i];
            v[4 * i] = t.x;
            v[4 * i + 1] = t.y;
            v[4 * i + 2] = t.z;
            v[4 * i + 3] = t.w;
        }
    } else if (w >= 8 && N >= 8) {
#pragma unroll
        for (int i = 0; i < N / 8; ++i) {
            uint2 t = ((const uint2 *)p)[i];
            v[2 * i] = t.x;
            v[2 * i + 1] = t.y;
        }
    } else if (w >= 4) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i) v[i] = ((const uint32_t *)p)[i];
    } else if (w == 2) {
        const uint16_t *h = (const uint16_t *)p;
#pragma unroll
        for (int i = 0; i < N / 4; ++i) v[i] = (uint32_t)h[2 * i] | ((uint32_t)h[2 * i + 1] << 16);
    } else {
        const uint8_t *b = (const uint8_t *)p;
#pragma unroll
        for (int i = 0; i < N / 4; ++i)
            v[i] = (uint32_t)b[4 * i] | ((uint32_t)b[4 * i + 1] << 8) | ((uint32_t)b[4 * i + 2] << 16) |
                   ((uint32_t)b[4 * i + 3] << 24);
    }
}

/* Store N/4 words as N bytes at p with accesses of w bytes (as load_bytes). */
template <int N>
static __device__ __forceinline__ void store_bytes(void *p, const uint32_t (&v)[N / 4], int w)
{
    if (w >= 16 && N >= 16) {
#pragma unroll
        for (int i = 0; i < N / 16; ++i)
            ((uint4 *)p)[i] = make_uint4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    } else if (w >= 8 && N >= 8) {
#pragma unroll
        for (int i = 0; i < N / 8; ++i) ((uint2 *)p)[i] = make_uint2(v[2 * i], v[2 * i + 1]);
    } else if (w >= 4) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i) ((uint32_t *)p)[i] = v[i];
    } else if (w == 2) {
        uint16_t *h = (uint16_t *)p;
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            h[2 * i] = (uint16_t)v[i];
            h[2 * i + 1] = (uint16_t)(v[i] >> 16);
        }
    } else {
        uint8_t *b = (uint8_t *)p;
#pragma unroll
        for (int i = 0; i < N; ++i) b[i] = (uint8_t)(v[i / 4] >> (8 * (i % 4)));
    }
}

/* Transpose a 4x4 byte block: in r[i] byte j is element (i, j); out c[j]
 * byte i is element (i, j). */
static __device__ __forceinline__ void transpose_4x4_bytes(const uint32_t r[4], uint32_t c[4])
{
    uint32_t lo01 = __byte_perm(r[0], r[1], 0x5140); /* r0b0 r1b0 r0b1 r1b1 */
    uint32_t hi01 = __byte_perm(r[0], r[1], 0x7362); /* r0b2 r1b2 r0b3 r1b3 */
    uint32_t lo23 = __byte_perm(r[2], r[3], 0x5140);
    uint32_t hi23 = __byte_perm(r[2], r[3], 0x7362);
    c[0] = __byte_perm(lo01, lo23, 0x5410);
    c[1] = __byte_perm(lo01, lo23, 0x7632);
    c[2] = __byte_perm(hi01, hi23, 0x5410);
    c[3] = __byte_perm(hi01, hi23, 0x7632);
}

/* A thread's 4 rows of VEC codes (code[r][k]: row r's codes 4k .. 4k + 3,
 * byte j code 4k + j) parked in a column-major shared tile: column
 * col0 + 4k + i gets, at word `word`, its codes of the 4 rows (byte r row
 * r). The tile kernels' transposed store (cast_tile.cuh, the row-wise
 * codes pass). */
template <int VEC, typename Tile>
static __device__ __forceinline__ void park_codes_t(const uint32_t (&code)[4][VEC / 4], Tile &tile_t, int col0,
                                                    int word)
{
#pragma unroll
    for (int k = 0; k < VEC / 4; ++k) {
        const uint32_t rw[4] = {code[0][k], code[1][k], code[2][k], code[3][k]};
        uint32_t cw[4];
        transpose_4x4_bytes(rw, cw);
#pragma unroll
        for (int i = 0; i < 4; ++i) tile_t[col0 + 4 * k + i][word] = cw[i];
    }
}

/* Two FP8 codes (lo in the low byte), satfinite round-to-nearest-even. */
template <int E5M2>
static __device__ __forceinline__ uint32_t fp8x2(float lo, float hi)
{
    unsigned short r;
    if (E5M2)
        asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return (uint32_t)r;
}

/* Codes of v[0..3] * s packed little-endian into one word. */
template <int E5M2>
static __device__ __forceinline__ uint32_t fp8x4(const float *v, float s)
{
    return fp8x2<E5M2>(v[0] * s, v[1] * s) | (fp8x2<E5M2>(v[2] * s, v[3] * s) << 16);
}

/* 16 source bytes (4 words) -> 4 FP32 or 8 BF16 values, exactly. */
template <int BF16>
static __device__ __forceinline__ void decode16(const uint32_t (&w)[4], float (&v)[BF16 ? 8 : 4])
{
    if constexpr (BF16) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = __uint_as_float(w[i] << 16);
            v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(w[i]);
    }
}

/* Two BF16 codes (lo in the low half), round to nearest even: the hardware
 * conversion, equal to f8i_bf16_from_float except for a NaN's payload. */
static __device__ __forceinline__ uint32_t bf16x2(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Element i of p as FP32, and v stored there (round to nearest even): T is
 * float (FP32) or uint16_t (BF16 bits). */
template <typename T>
static __device__ __forceinline__ float load_t(const T *p, int64_t i)
{
    if constexpr (sizeof(T) == 2)
        return f8i_bf16_to_float(p[i]);
    else
        return p[i];
}

template <typename T>
static __device__ __forceinline__ void store_t(T *p, int64_t i, float v)
{
    if constexpr (sizeof(T) == 2)
        p[i] = f8i_bf16_from_float(v);
    else
        p[i] = v;
}

/* The same for an untyped array: BF16 bits when BF16, else FP32. */
template <int BF16>
static __device__ __forceinline__ float load_elem(const void *src, int64_t i)
{
    if (BF16) return f8i_bf16_to_float(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

/* Block-wide fmaxf of `a`, then one atomicMax of its bits into *amax (valid
 * for non-negative floats, +inf included). Every thread of the 1-D block of
 * THREADS threads calls it. */
template <int THREADS>
static __device__ __forceinline__ void block_amax_atomic(float a, float *amax)
{
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps");
    __shared__ float warp_max[THREADS / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = 0.0f;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) m = fmaxf(m, warp_max[w]);
        atomicMax((int *)amax, __float_as_int(m));
    }
}

/* FP8 telemetry of one code: 1 when |v * s| passed the format's max before
 * the clamp (saturated), and when a nonzero v got the code +-0 (flushed). */
template <int E5M2>
static __device__ __forceinline__ void code_stats(float v, float s, uint32_t code, unsigned &sat, unsigned &flushed)
{
    sat += fabsf(v * s) > (E5M2 ? 57344.0f : 448.0f);
    flushed += v != 0.0f && (code & 0x7Fu) == 0u;
}

/* Block-wide sums of sat and flushed, added to stats[1] and stats[2] with
 * one atomic each; stats[0] += n by thread 0 of the block `first` marks.
 * Every thread of the 1-D block of THREADS threads calls it. */
template <int THREADS>
static __device__ __forceinline__ void block_stats_atomic(unsigned sat, unsigned flushed, unsigned long long *stats,
                                                          int64_t n, bool first)
{
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps");
    __shared__ unsigned warp_sum[2][THREADS / 32];
    sat = __reduce_add_sync(0xFFFFFFFFu, sat);
    flushed = __reduce_add_sync(0xFFFFFFFFu, flushed);
    if ((threadIdx.x & 31) == 0) {
        warp_sum[0][threadIdx.x >> 5] = sat;
        warp_sum[1][threadIdx.x >> 5] = flushed;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long a = 0, b = 0;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) {
            a += warp_sum[0][w];
            b += warp_sum[1][w];
        }
        if (first) atomicAdd(&stats[0], (unsigned long long)n);
        if (a) atomicAdd(&stats[1], a);
        if (b) atomicAdd(&stats[2], b);
    }
}

/* Bytes s .. s + 4W - 1 (s < 4W) of the 8W-byte little-endian x, as W
 * words: whole-word steps by selects (indexing registers by a runtime value
 * would put them in local memory), then one funnel shift per word. */
template <int W>
static __device__ __forceinline__ void bytes_at(const uint32_t (&x)[2 * W], unsigned s, uint32_t (&w)[W])
{
    static_assert(W == 1 || W == 2 || W == 4, "4, 8 or 16 bytes");
    uint32_t y[2 * W];
#pragma unroll
    for (int j = 0; j < 2 * W; ++j) y[j] = x[j];
#pragma unroll
    for (int step = W / 2; step >= 1; step /= 2) {
        const bool take = ((s >> 2) & (unsigned)step) != 0;
#pragma unroll
        for (int j = 0; j + step < 2 * W; ++j) y[j] = take ? y[j + step] : y[j];
    }
#pragma unroll
    for (int i = 0; i < W; ++i) w[i] = __funnelshift_r(y[i], y[i + 1], 8 * (s & 3));
}

/* The 16 bytes at p (any alignment; [p, p + 16) inside [lo, hi)) as 4
 * little-endian words, read with the aligned 16-byte loads of the one or two
 * chunks that hold them. A chunk reaching outside [lo, hi) (a buffer whose
 * first or last piece is not aligned) is not loaded: those 16 bytes are read
 * one by one. A warp of lanes on consecutive pieces reads each chunk twice,
 * the second time from L1: half the load instructions of 8-byte accesses,
 * an eighth of 2-byte ones. */
static __device__ __forceinline__ void load16_any(uint32_t (&w)[4], const void *p, const void *lo, const void *hi)
{
    const unsigned s = (unsigned)((uintptr_t)p & 15);
    const char *c = (const char *)p - s;
    if (s == 0) {
        load_bytes<16>(w, p, 16);
    } else if (c < (const char *)lo || c + 32 > (const char *)hi) {
        load_bytes<16>(w, p, 1);
    } else {
        uint32_t a[4], b[4];
        load_bytes<16>(a, c, 16);
        load_bytes<16>(b, c + 16, 16);
        const uint32_t x[8] = {a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]};
        bytes_at<4>(x, s, w);
    }
}

/* 8 bytes from byte o (o < 16) of the 16-byte little-endian value lo, hi. */
static __device__ __forceinline__ unsigned long long bytes8_at(unsigned long long lo, unsigned long long hi, unsigned o)
{
    if (o >= 8) return hi >> (8 * (o - 8));
    return o == 0 ? lo : (lo >> (8 * o)) | (hi << (64 - 8 * o));
}

/* Bytes [o, o + n) of the value lo, hi at dst + o, n < 16, in aligned
 * pieces of 1, 2, 4 and 8 bytes: ascending sizes when dst + o + n is
 * 8-aligned (a head that ends at an aligned address), descending when
 * dst + o is (a tail that starts at one). */
template <int N, bool ASCENDING>
static __device__ __forceinline__ void store_span(uint8_t *dst, unsigned long long lo, unsigned long long hi,
                                                  unsigned o, unsigned n)
{
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const unsigned z = ASCENDING ? 1u << i : 8u >> i;
        if (z >= N || !(n & z)) continue;
        const unsigned long long v = bytes8_at(lo, hi, o);
        if (z == 8) *(unsigned long long *)(dst + o) = v;
        if (z == 4) *(uint32_t *)(dst + o) = (uint32_t)v;
        if (z == 2) *(uint16_t *)(dst + o) = (uint16_t)v;
        if (z == 1) dst[o] = (uint8_t)v;
        o += z;
    }
}

/* Warp-cooperative store of a row's consecutive N-byte pieces (N = 4, 8 or
 * 16) where the row is not N-byte aligned; every lane of the warp calls it
 * (it shuffles). Groups of G consecutive lanes (G divides 32) hold
 * consecutive pieces of one row: lane k = lane % G holds w, due at dst (lane
 * k + 1's is due at dst + N), of which the first `valid` bytes are written
 * (N inside the matrix, fewer at its edge, 0 outside; the lanes of a group
 * with valid == N are a prefix of it). A lane stores the aligned N bytes
 * that start in its piece, s = -dst mod N bytes in: its bytes from s on and
 * the next lane's first s, in one access. What no such store covers goes in
 * aligned pieces of at most 8 bytes (store_span): the group's head (the
 * first lane's bytes before s) and its tail (the bytes from s on of the
 * last whole piece, whose next piece is in another group or not whole);
 * a piece cut by the matrix's edge goes byte by byte. */
template <int N, int G>
static __device__ __forceinline__ void store_pieces_unaligned(uint8_t *dst, const uint32_t (&w)[N / 4], int valid)
{
    constexpr int W = N / 4;
    static_assert(N == 4 || N == 8 || N == 16, "4, 8 or 16-byte pieces");
    static_assert(G >= 1 && 32 % G == 0, "groups of lanes tile the warp");
    const int k = (int)(threadIdx.x & 31) % G;
    uint32_t x[2 * W];
#pragma unroll
    for (int i = 0; i < W; ++i) {
        x[i] = w[i];
        x[W + i] = __shfl_down_sync(0xFFFFFFFFu, w[i], 1);
    }
    const int next_valid = __shfl_down_sync(0xFFFFFFFFu, valid, 1);
    const unsigned s = (unsigned)(N - (uintptr_t)dst % N) % N;
    const bool whole = valid == N && (s == 0 || (k + 1 < G && next_valid == N));
    if (whole) {
        uint32_t o[W];
        bytes_at<W>(x, s, o);
        store_bytes<N>(dst + s, o, N);
    }
    unsigned long long lo = x[0], hi = 0ull; /* w as 16 bytes, zeros past N */
    if constexpr (W >= 2) lo |= (unsigned long long)x[1] << 32;
    if constexpr (W == 4) hi = (unsigned long long)x[2] | (unsigned long long)x[3] << 32;
    if (valid == N && s != 0 && k == 0) store_span<N, true>(dst, lo, hi, 0, s);
    if (valid == N && !whole) store_span<N, false>(dst, lo, hi, s, N - s);
    if (valid > 0 && valid < N) {
#pragma unroll
        for (int b = 0; b < N; ++b)
            if (b < valid) dst[b] = (uint8_t)(w[b / 4] >> (8 * (b % 4)));
    }
}

/* Row-tile strides per column in dbias_reduce_kernel. */
#define F8I_REDUCE_SPLIT 8

/* dbias[c] = (accumulate ? dbias[c] : 0) + sum, FP32 or BF16 (RNE). */
static __device__ __forceinline__ void dbias_write(void *dbias, int bf16, int accumulate, int64_t c, float sum)
{
    if (bf16) {
        uint16_t *d = (uint16_t *)dbias;
        float base = accumulate ? f8i_bf16_to_float(d[c]) : 0.0f;
        d[c] = f8i_bf16_from_float(base + sum);
    } else {
        float *d = (float *)dbias;
        d[c] = (accumulate ? d[c] : 0.0f) + sum;
    }
}

/* dbias (or any column sum: dgamma, dbeta) from per-row-tile partial sums
 * partial [row_tiles, cols] FP32. row_tiles may be 0 (the sums are 0).
 * Grid: ceil(cols / 32) blocks; block (32, F8I_REDUCE_SPLIT). Thread (x, y) owns
 * column 32 * blockIdx.x + x and adds the row tiles y, y + F8I_REDUCE_SPLIT, ...
 * in order; thread (x, 0) then adds the F8I_REDUCE_SPLIT sums in y order. The
 * split keeps several loads in flight per column (one thread per column
 * walking all row tiles was latency bound; bench/RESULTS.md) while the
 * fixed order keeps the result deterministic. */
/* The end of a split column reduction (dbias_reduce_kernel's, the row-wise
 * row pass's rwc_dbias_reduce_kernel): thread (x, y) leaves its sum in
 * part, then thread (x, 0) adds the F8I_REDUCE_SPLIT sums in y order and
 * writes column c. Every thread of the block calls it (a barrier). */
static __device__ __forceinline__ void dbias_split_finish(float (&part)[F8I_REDUCE_SPLIT][33], float sum, int64_t c,
                                                          int64_t cols, void *dbias, int bf16, int accumulate)
{
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) return;
    float total = 0.0f;
#pragma unroll
    for (int y = 0; y < F8I_REDUCE_SPLIT; ++y) total += part[y][threadIdx.x];
    dbias_write(dbias, bf16, accumulate, c, total);
}

static __global__ void __launch_bounds__(32 * F8I_REDUCE_SPLIT)
    dbias_reduce_kernel(const float *__restrict__ partial, int64_t row_tiles, int64_t cols, void *dbias, int bf16,
                        int accumulate, const float *noop)
{
    __shared__ float part[F8I_REDUCE_SPLIT][33]; /* (F8I_REDUCE_SPLIT, 32 + 1) */
    if (noop_set(noop)) return;
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < cols)
        for (int64_t t = threadIdx.y; t < row_tiles; t += F8I_REDUCE_SPLIT) sum += partial[t * cols + c];
    dbias_split_finish(part, sum, c, cols, dbias, bf16, accumulate);
}

#endif /* F8_CUDA_KERNELS_COMMON_CUH */
