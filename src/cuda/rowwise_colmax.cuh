/*
 * rowwise_colmax.cuh — the row pass of the row-wise cast that also takes
 * the column amaxes and dbias's chunk sums (rowwise_colmax_kernel) and the
 * reduction of those sums (rwc_dbias_reduce_kernel): a part of
 * rowwise_cast.cu, included by it after the helpers and constants it uses
 * (rw_warp_max, RWT_WARP_ROWS, RWT_ROWS), not on its own. Why the pass is
 * built so: rowwise_cast.cu's design note.
 */
#ifndef F8_CUDA_ROWWISE_COLMAX_CUH
#define F8_CUDA_ROWWISE_COLMAX_CUH

#define RWC_THREADS 512                /* block */
#define RWC_WARPS (RWC_THREADS / 32)
#define RWC_BLOCKS_PER_SM 2            /* the grid: resident blocks, each over its shares of the rows */
#define RWC_GROUP_BYTES (64 * 1024)    /* src bytes of a block's round at most: its second read hits L1/L2 */
#define RWC_MAX_COLS 16384             /* the column maxima in shared memory: 64 KiB (with dbias, half: */
#define RWC_MAX_COLS_DBIAS 8192        /* the maxima and the chunk sums, 2 x 32 KiB) */
#define RWC_MAX_ROWS 8                 /* rows a thread holds at once, at most (the red and scale arrays) */
/* A load's words (VEC: 4 values, 8 bytes BF16 or 16 FP32; else one value)
 * and the rows a thread holds at once, each row's load in flight together:
 * as many as fit 64 registers without spilling (ptxas -v: BF16 spills at 8,
 * FP32 at 4), so VEC keeps 48 bytes a thread in flight. */
#define RWC_WORDS(BF16, VEC) ((VEC) ? ((BF16) ? 2 : 4) : 1)
#define RWC_ROWS(BF16, VEC) ((VEC) ? ((BF16) ? 6 : 3) : RWC_MAX_ROWS)

/* The raw words of the load at q (VEC: the caller checked the alignment),
 * and the values they hold (4, VEC; else 1). */
template <int BF16, int VEC>
static __device__ __forceinline__ void rwc_load(const char *q, uint32_t (&w)[RWC_WORDS(BF16, VEC)])
{
    if constexpr (VEC && BF16) {
        const uint2 u = *(const uint2 *)q;
        w[0] = u.x, w[1] = u.y;
    } else if constexpr (VEC) {
        const uint4 u = *(const uint4 *)q;
        w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else {
        w[0] = BF16 ? (uint32_t)*(const uint16_t *)q << 16 : *(const uint32_t *)q;
    }
}

template <int BF16, int VEC>
static __device__ __forceinline__ void rwc_values(const uint32_t (&w)[RWC_WORDS(BF16, VEC)], float (&v)[4])
{
    if constexpr (VEC && BF16) {
        v[0] = __uint_as_float(w[0] << 16), v[1] = __uint_as_float(w[0] & 0xFFFF0000u);
        v[2] = __uint_as_float(w[1] << 16), v[3] = __uint_as_float(w[1] & 0xFFFF0000u);
    } else {
#pragma unroll
        for (int j = 0; j < RWC_WORDS(BF16, VEC); ++j) v[j] = __uint_as_float(w[j]);
    }
}

/* The STEP column maxima at cm + c, and their store back (VEC: one 16-byte
 * access, conflict-free over a warp; cm + c is 16-byte aligned as 4 | cols). */
template <int VEC>
static __device__ __forceinline__ void rwc_cm_get(const float *cm, int c, float (&m)[4])
{
    if constexpr (VEC) {
        const float4 u = *(const float4 *)(cm + c);
        m[0] = u.x, m[1] = u.y, m[2] = u.z, m[3] = u.w;
    } else {
        m[0] = cm[c];
    }
}

template <int VEC>
static __device__ __forceinline__ void rwc_cm_put(float *cm, int c, const float (&m)[4])
{
    if constexpr (VEC) *(float4 *)(cm + c) = make_float4(m[0], m[1], m[2], m[3]);
    else cm[c] = m[0];
}

/* A relaxed load of a word the atomics of other blocks update (at the L2,
 * where they are done: never a stale copy from this SM's L1). */
static __device__ __forceinline__ int ld_relaxed(const float *p)
{
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* The row pass of a call with out and out_t, which also takes the column
 * amaxes (and, DBIAS, dbias's chunk sums). Grid: min(ceil(rows / rg),
 * RWC_BLOCKS_PER_SM an SM), rg = nty·group (DBIAS: min(chunks, ..)); block
 * RWC_THREADS as nty = RWC_THREADS / tx row slots of tx threads (a power of
 * two >= 32: a warp is in one slot). In each round a block takes at most rg
 * consecutive rows r0 .. r0 + n - 1, slot ty the group (<= RWC_ROWS) from
 * r0 + ty·group; thread (ty, x) holds its slot's rows at columns 4x .. 4x +
 * 3, + 4tx, ... (VEC; else x, + tx, ...). cmax [nty][cols] (dynamic shared
 * memory): a slot read and written only by the thread that loads its column
 * for its ty, so no atomics; after the last round the block takes the max
 * over ty and adds it with one atomicMax of the bits a column into
 * scale_inv_t, zeroed by the launch before. Two barriers a round: the
 * warps' row maxima (red), then the rows' scales.
 * DBIAS (one row slot, nty = 1; group a power of two): block b instead
 * takes whole 32-row chunks (chunks·b/gridDim.x .. of ceil(rows / 32)) in
 * row order, rounds of group rows, and each thread sums its columns down a
 * chunk in row order into csum [cols] (its own slots, after cmax), written
 * after the chunk's last round to sums [chunk][cols]: kernel 1's sum of a
 * warp's 32 rows, bit for bit. */
template <int BF16, int E5M2, int VEC, int DBIAS>
static __global__ void __launch_bounds__(RWC_THREADS, RWC_BLOCKS_PER_SM)
    rowwise_colmax_kernel(f8i_rowwise_cast_args p, int tx, int group, float *sums)
{
    constexpr int STEP = VEC ? 4 : 1, W = RWC_WORDS(BF16, VEC), G = RWC_ROWS(BF16, VEC), ES = BF16 ? 2 : 4;
    extern __shared__ float4 cmax4[];
    __shared__ float red[RWC_MAX_ROWS][RWC_WARPS];    /* [g][warp]: the warps' maxima of their row g */
    __shared__ float scale[RWC_WARPS * RWC_MAX_ROWS]; /* [row - r0]: the round's scales (nty <= RWC_WARPS) */
    if (noop_set(p.noop)) return;
    float *cmax = (float *)cmax4;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int x = t & (tx - 1), ty = t / tx, nty = RWC_THREADS / tx, wx = tx / 32;
    const int cols = (int)p.cols, pitch = cols * ES, rg = nty * group; /* cols <= RWC_MAX_COLS */
    float *cm = cmax + ty * cols;   /* this thread's row slot's maxima: its own columns only */
    float *csum = cmax + nty * cols; /* DBIAS: the chunk's sums so far, likewise */
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int c = STEP * x; c < cols; c += STEP * tx) {
        rwc_cm_put<VEC>(cm, c, zero);
        if (DBIAS) rwc_cm_put<VEC>(csum, c, zero);
    }
    float amax = 0.0f;
    unsigned sat = 0, flushed = 0;
    /* Round i's rows [rows·i/rounds, rows·(i+1)/rounds) split evenly over the blocks, at most rg each (rounds
     * of gridDim.x·rg rows cover them): the blocks' shares differ by a row a round, and the rounds go down the
     * matrix together. */
    const int64_t chunks = (p.rows + RWT_WARP_ROWS - 1) / RWT_WARP_ROWS; /* DBIAS: this block's whole chunks */
    const int64_t lo = RWT_WARP_ROWS * (chunks * blockIdx.x / gridDim.x);
    const int64_t hi = min(p.rows, (int64_t)RWT_WARP_ROWS * (chunks * (blockIdx.x + 1) / gridDim.x));
    const int64_t rounds = DBIAS ? (hi - lo + rg - 1) / rg
                                 : (p.rows + (int64_t)gridDim.x * rg - 1) / ((int64_t)gridDim.x * rg);
    for (int64_t i = 0; i < rounds; ++i) { /* uniform */
        const int64_t first = p.rows * i / rounds, span = p.rows * (i + 1) / rounds - first;
        const int64_t r0 = DBIAS ? lo + i * rg : first + span * blockIdx.x / gridDim.x;
        const int n = DBIAS ? (int)min((int64_t)rg, hi - r0) : (int)(first + span * (blockIdx.x + 1) / gridDim.x - r0);
        const int ny = n - ty * group; /* n <= rg */
        const int gn = ny <= 0 ? 0 : ny < group ? ny : group; /* this slot's rows: uniform over a warp */
        const int64_t ry = r0 + ty * group;
        /* DBIAS: group | 32 and the block's rows start a chunk, so a round is within one chunk; its last? */
        const bool chunk_end = (r0 + n) % RWT_WARP_ROWS == 0 || r0 + n == p.rows;
        float rm[G];
#pragma unroll
        for (int g = 0; g < G; ++g) rm[g] = 0.0f;
        const char *src = (const char *)p.src + ry * pitch; /* row ry (64-bit offsets from here) */
        for (int c = STEP * x; c < cols; c += STEP * tx) {
            uint32_t w[G][W];
            const char *q = src + c * ES;
#pragma unroll
            for (int g = 0; g < G; ++g, q += pitch)
                if (g < gn) rwc_load<BF16, VEC>(q, w[g]);
            float m[4], sum[4];
            rwc_cm_get<VEC>(cm, c, m);
            if (DBIAS) rwc_cm_get<VEC>(csum, c, sum);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (g >= gn) continue;
                float v[4];
                rwc_values<BF16, VEC>(w[g], v);
#pragma unroll
                for (int j = 0; j < STEP; ++j) {
                    const float u = fabsf(v[j]); /* fmaxf drops NaN, as the CPU's max */
                    rm[g] = fmaxf(rm[g], u), m[j] = fmaxf(m[j], u);
                }
#pragma unroll
                for (int j = 0; DBIAS && j < STEP; ++j) sum[j] += v[j]; /* down the chunk in row order, from 0 */
            }
            rwc_cm_put<VEC>(cm, c, m);
            if (DBIAS && chunk_end) { /* the chunk's sums out, and the next chunk's from 0 */
                float *d = sums + (r0 / RWT_WARP_ROWS) * cols + c;
#pragma unroll
                for (int j = 0; j < STEP; ++j) d[j] = sum[j];
                rwc_cm_put<VEC>(csum, c, zero);
            } else if (DBIAS) {
                rwc_cm_put<VEC>(csum, c, sum);
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g >= gn) continue; /* the warp's rows end together: its lanes all shuffle */
            const float m = rw_warp_max(rm[g]);
            if (lane == 0) red[g][warp] = m;
        }
        __syncthreads();
        if (t < n) { /* row r0 + t: slot t / group, its row t % group */
            const int w0 = (t / group) * wx, g = t % group;
            float m = 0.0f;
            for (int w = w0; w < w0 + wx; ++w) m = fmaxf(m, red[g][w]);
            const float s = f8i_current_scale(m, 1.0f, p.scaled_max, p.pow2);
            scale[t] = s;
            p.scale_inv[r0 + t] = 1.0f / s;
            amax = fmaxf(amax, m);
        }
        __syncthreads(); /* red and scale are written again only past the next round's first barrier */
        uint8_t *out = p.out + ry * cols;
        for (int c = STEP * x; c < cols; c += STEP * tx) {
            uint32_t w[G][W]; /* the second read (L1 or L2), every row's before the first store */
            const char *q = src + c * ES;
#pragma unroll
            for (int g = 0; g < G; ++g, q += pitch)
                if (g < gn) rwc_load<BF16, VEC>(q, w[g]);
            uint8_t *o = out + c;
#pragma unroll
            for (int g = 0; g < G; ++g, o += cols) {
                if (g >= gn) continue;
                const float sg = scale[ty * group + g]; /* read where used: fewer registers than held */
                float v[4];
                rwc_values<BF16, VEC>(w[g], v);
                if (VEC) {
                    const uint32_t code = fp8x4<E5M2>(v, sg);
                    *(uint32_t *)o = code;
                    for (int j = 0; p.stats != NULL && j < 4; j++)
                        code_stats<E5M2>(v[j], sg, (code >> (8 * j)) & 0xFFu, sat, flushed);
                } else {
                    const uint32_t code = fp8x2<E5M2>(v[0] * sg, 0.0f) & 0xFFu;
                    *o = (uint8_t)code;
                    if (p.stats != NULL) code_stats<E5M2>(v[0], sg, code, sat, flushed);
                }
            }
        }
    }
    __syncthreads(); /* every slot of cmax final */
    for (int c = t; c < cols; c += RWC_THREADS) {
        float m = 0.0f;
        for (int y = 0; y < nty; ++y) m = fmaxf(m, cmax[y * cols + c]);
        /* max is order-free: the amax kernel's bits; the word only grows, so one already as large makes the
         * atomic moot */
        const int bits = __float_as_int(m);
        if (bits > ld_relaxed(p.scale_inv_t + c)) atomicMax((int *)p.scale_inv_t + c, bits);
    }
    if (p.amax != NULL) block_amax_atomic<RWC_THREADS>(amax, p.amax); /* uniform: every thread calls it */
    if (p.stats != NULL) block_stats_atomic<RWC_THREADS>(sat, flushed, (unsigned long long *)p.stats, p.rows * p.cols,
                                                         blockIdx.x == 0);
}

/* dbias from rowwise_colmax_kernel's chunk sums sums [chunks, cols]: a
 * 256-row tile's partial is ((0 + S[8t]) + S[8t + 1]) + ... (its chunks),
 * kernel 1's partial bit for bit, and the tiles are summed as
 * dbias_reduce_kernel sums kernel 1's partials (split y adds tiles y, y +
 * F8I_REDUCE_SPLIT, ... in order; then the splits in order): so the same
 * dbias. Grid: 32 columns a block; block (32, RWC_REDUCE_TILES): thread
 * (x, y) sums tiles y, y + RWC_REDUCE_TILES, ... each on its own (its
 * chunks' loads in flight together), into tsum; then the first
 * F8I_REDUCE_SPLIT rows of threads add them in dbias_reduce_kernel's order. */
#define RWC_REDUCE_TILES 32
static_assert(RWC_REDUCE_TILES % F8I_REDUCE_SPLIT == 0, "a batch of tiles holds whole turns of the splits");
static __global__ void __launch_bounds__(32 * RWC_REDUCE_TILES)
    rwc_dbias_reduce_kernel(const float *__restrict__ sums, int64_t chunks, int64_t cols, void *dbias, int bf16,
                            int accumulate, const float *noop)
{
    constexpr int TILE = RWT_ROWS / RWT_WARP_ROWS; /* chunks a tile */
    __shared__ float tsum[RWC_REDUCE_TILES][33];  /* a batch's tile sums (32 + 1: no bank conflicts) */
    __shared__ float part[F8I_REDUCE_SPLIT][33];
    if (noop_set(noop)) return;
    const int x = threadIdx.x, y = threadIdx.y;
    const int64_t c = (int64_t)blockIdx.x * 32 + x, tiles = (chunks + TILE - 1) / TILE;
    float sum = 0.0f; /* split y's (y < F8I_REDUCE_SPLIT) */
    for (int64_t t0 = 0; t0 < tiles; t0 += RWC_REDUCE_TILES) { /* uniform */
        const int64_t t = t0 + y;
        float tile = 0.0f;
        if (c < cols && t < tiles) {
            float s[TILE];
#pragma unroll
            for (int k = 0; k < TILE; ++k) s[k] = TILE * t + k < chunks ? sums[(TILE * t + k) * cols + c] : 0.0f;
#pragma unroll
            for (int k = 0; k < TILE; ++k)
                if (TILE * t + k < chunks) tile += s[k];
        }
        tsum[y][x] = tile;
        __syncthreads();
        if (y < F8I_REDUCE_SPLIT)
            for (int k = y; k < RWC_REDUCE_TILES && t0 + k < tiles; k += F8I_REDUCE_SPLIT) sum += tsum[k][x];
        __syncthreads(); /* tsum is written again by the next batch */
    }
    if (y < F8I_REDUCE_SPLIT) part[y][x] = sum;
    __syncthreads();
    if (y != 0 || c >= cols) return;
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < F8I_REDUCE_SPLIT; ++k) total += part[k][x];
    dbias_write(dbias, bf16, accumulate, c, total);
}

#endif /* F8_CUDA_ROWWISE_COLMAX_CUH */
