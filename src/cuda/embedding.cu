/*
 * embedding.cu — the token + position
 * embedding forward and backward (contracts in src/nn/embed_xent_adamw.h).
 *
 * Design note (backward, dwte). The gradient must be bitwise the same on every
 * run, the host may not read the token ids, and no memory may be allocated, so
 * neither float atomics nor a global sort is available. Instead each block
 * owns a tile of dwte, EB_ROWS vocabulary rows x EB_CH channels, and nobody
 * else writes it:
 *   1. scan: the block reads all token ids (from L1/L2: 64 KB at T = 16k) and
 *      compacts the positions t whose token falls in its rows into a shared
 *      list, in ascending t (warp ballots + a block prefix per round);
 *   2. sort: when the list is nearly full or the scan ends, warp 0 sorts it by
 *      row, stably (a counting sort; placement with __match_any_sync), so each
 *      row's positions form one run in ascending t;
 *   3. sum: the sorted list is cut into EB_WARPS equal segments, one per warp;
 *      a warp walks its segment summing each run in registers (lane = 4
 *      channels, loads of EB_UNROLL entries in flight). A run wholly inside a
 *      segment is added to dwte at once; a run cut by a segment boundary
 *      leaves its partial in shared memory, and after a barrier the warp that
 *      holds the run's start adds the pieces in segment order and writes it.
 * Every sum is thus a fixed function of the token ids: ascending t within a
 * segment, segments in order, list chunks in order. A frequent token spreads
 * over all warps of every channel tile (no warp walks its ~600 occurrences
 * alone), and rows no token names are never touched. At GPT-2 shapes (V =
 * 50304, C = 768, T = 16k) the grid is 6 x 197 blocks.
 * dwpe: one thread per (position, 4 channels) sums its t ≡ s (mod S) rows in
 * ascending t, then adds to dwpe.
 */
#include <stdint.h>

#include "embed_xent_adamw.cuh"

#define EMB_THREADS 256
#define EB_WARPS (EMB_THREADS / 32)
#define EB_ROWS 256                 /* vocabulary rows per block: a row index fits a byte */
#define EB_CH 128                   /* channels per block: 32 lanes x 4 */
#define EB_ROUND (EMB_THREADS * 4)  /* token ids scanned per round: 4 per thread */
#define EB_CAP 3072                 /* list capacity (entries) */
#define EB_UNROLL 8                 /* dy rows a warp has in flight */

static_assert(EB_ROWS == EMB_THREADS, "the row histogram gives one bin per thread");
static_assert(EB_ROWS <= 256, "row indices are stored as bytes");
static_assert(EB_CAP >= 2 * EB_ROUND, "a flush must leave room for a round");

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* Forward. Grid-stride over (token, 4-channel group): y = wte[tok] + wpe[t mod S].
 * Grid: grid_size blocks of EMB_THREADS; a thread owns one group per step. */
static __global__ void __launch_bounds__(EMB_THREADS) embedding_fwd_kernel(f8i_embedding_fwd_args a, bool vec)
{
    const int64_t C = a.channels, CQ = (C + 3) / 4, total = a.n_tokens * CQ;
    const int wb = a.wte_dtype == F8_DTYPE_BF16, pb = a.wpe_dtype == F8_DTYPE_BF16, yb = a.y_dtype == F8_DTYPE_BF16;
    for (int64_t q = (int64_t)blockIdx.x * EMB_THREADS + threadIdx.x; q < total; q += (int64_t)gridDim.x * EMB_THREADS) {
        const int64_t t = q / CQ, c = (q - t * CQ) * 4;
        const int nv = C - c < 4 ? (int)(C - c) : 4;
        const int32_t tok = a.tokens[t];
        float w[4] = {0.0f, 0.0f, 0.0f, 0.0f}, p[4], y[4];
        if (tok >= 0 && tok < a.vocab) ld4(a.wte, wb, (int64_t)tok * C + c, nv, vec, w);
        ld4(a.wpe, pb, (t % a.seq_len) * C + c, nv, vec, p);
#pragma unroll
        for (int j = 0; j < 4; ++j) y[j] = w[j] + p[j];
        st4(a.y, yb, t * C + c, nv, vec, y);
    }
}

typedef struct eb_smem {
    int32_t list_t[EB_CAP];  /* matching positions, ascending */
    int32_t sort_t[EB_CAP];  /* the same, sorted by row (stable) */
    uint8_t list_r[EB_CAP];  /* their rows (token - v0) */
    uint8_t sort_r[EB_CAP];
    int32_t bin[EB_ROWS];    /* row counts, then placement offsets */
    int32_t warp_count[EB_WARPS];
    float part[EB_WARPS][2][EB_CH]; /* partials of runs cut by a segment boundary: [0] first run, [1] last */
} eb_smem;

/* dwte[row, c..c+nv) += s (FP32 sum, one rounding for BF16). */
static __device__ __forceinline__ void add_row(const f8i_embedding_bwd_args &a, int64_t row, int64_t c, int nv, bool vec,
                                               const float (&s)[4])
{
    const int bf = a.dwte_dtype == F8_DTYPE_BF16;
    float d[4];
    ld4(a.dwte, bf, row * a.channels + c, nv, vec, d);
#pragma unroll
    for (int j = 0; j < 4; ++j) d[j] += s[j];
    st4(a.dwte, bf, row * a.channels + c, nv, vec, d);
}

/* A run of row `r` over sorted entries [run_lo, run_hi) of segment [lo, hi)
 * is summed in acc. Whole (not cut by a segment boundary): add it to dwte.
 * Cut: park it, [0] if it starts the segment, [1] if it ends it. */
static __device__ __forceinline__ void eb_finish_run(const f8i_embedding_bwd_args &a, eb_smem &sm, int warp, int lo,
                                                     int hi, int n, int r, int run_lo, int run_hi, int64_t v0,
                                                     int64_t c, int nv, bool vec_dw, const float (&acc)[4])
{
    const bool from_prev = run_lo == lo && lo > 0 && sm.sort_r[lo - 1] == r;
    const bool to_next = run_hi == hi && hi < n && sm.sort_r[hi] == r;
    if (!from_prev && !to_next) {
        add_row(a, v0 + r, c, nv, vec_dw, acc);
        return;
    }
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < 4; ++j) sm.part[warp][run_lo == lo ? 0 : 1][lane * 4 + j] = acc[j];
}

/* Steps 2 and 3 of the design note over the n entries of the list. Every
 * thread of the block calls it (it synchronizes). */
static __device__ void eb_flush(const f8i_embedding_bwd_args &a, eb_smem &sm, int n, int64_t v0, int64_t c, int nv,
                                bool vec_dy, bool vec_dw)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* Counting sort by row: counts, exclusive offsets, stable placement. */
    sm.bin[tid] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += EMB_THREADS) atomicAdd(&sm.bin[sm.list_r[i]], 1); /* integer counts: exact */
    __syncthreads();
    if (warp == 0) {
        int loc[EB_ROWS / 32], s = 0;
#pragma unroll
        for (int k = 0; k < EB_ROWS / 32; ++k) s += (loc[k] = sm.bin[lane * (EB_ROWS / 32) + k]);
        int incl = s;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += y;
        }
        int off = incl - s;
#pragma unroll
        for (int k = 0; k < EB_ROWS / 32; ++k) {
            sm.bin[lane * (EB_ROWS / 32) + k] = off;
            off += loc[k];
        }
        __syncwarp();
        for (int base = 0; base < n; base += 32) {
            const int i = base + lane;
            const bool act = i < n;
            const int r = act ? sm.list_r[i] : EB_ROWS; /* inactive lanes form their own group */
            const unsigned peers = __match_any_sync(0xFFFFFFFFu, r);
            const int leader = __ffs(peers) - 1;
            int start = (act && lane == leader) ? sm.bin[r] : 0;
            start = __shfl_sync(0xFFFFFFFFu, start, leader);
            if (act) {
                const int dst = start + __popc(peers & ((1u << lane) - 1u));
                sm.sort_t[dst] = sm.list_t[i];
                sm.sort_r[dst] = (uint8_t)r;
                if (lane == leader) sm.bin[r] = start + __popc(peers);
            }
            __syncwarp();
        }
    }
    __syncthreads();

    /* Sum: warp `warp` owns sorted entries [lo, hi). */
    const int seg = (n + EB_WARPS - 1) / EB_WARPS;
    const int lo = min(warp * seg, n), hi = min(lo + seg, n);
    const int dyb = a.dy_dtype == F8_DTYPE_BF16;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int cur = -1, run_lo = lo;
    for (int i0 = lo; i0 < hi; i0 += EB_UNROLL) {
        float val[EB_UNROLL][4];
        int row[EB_UNROLL];
#pragma unroll
        for (int u = 0; u < EB_UNROLL; ++u) {
            const int i = i0 + u;
            row[u] = i < hi ? sm.sort_r[i] : -1;
            if (i < hi) ld4(a.dy, dyb, (int64_t)sm.sort_t[i] * a.channels + c, nv, vec_dy, val[u]);
        }
#pragma unroll
        for (int u = 0; u < EB_UNROLL; ++u) {
            if (row[u] < 0) continue;
            if (row[u] != cur) {
                if (cur >= 0) eb_finish_run(a, sm, warp, lo, hi, n, cur, run_lo, i0 + u, v0, c, nv, vec_dw, acc);
                cur = row[u];
                run_lo = i0 + u;
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[j] += val[u][j];
        }
    }
    if (cur >= 0) eb_finish_run(a, sm, warp, lo, hi, n, cur, run_lo, hi, v0, c, nv, vec_dw, acc);
    __syncthreads();
    /* The warp holding the start of a cut run adds the pieces in segment order. */
    if (hi > lo && hi < n && sm.sort_r[hi] == sm.sort_r[hi - 1]) {
        const int r = sm.sort_r[hi - 1];
        const bool single = sm.sort_r[lo] == r; /* the whole segment is this run */
        if (!(single && lo > 0 && sm.sort_r[lo - 1] == r)) {
            float s[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) s[j] = sm.part[warp][single ? 0 : 1][lane * 4 + j];
            for (int w = warp + 1; w < EB_WARPS; ++w) {
                const int lo2 = min(w * seg, n), hi2 = min(lo2 + seg, n);
#pragma unroll
                for (int j = 0; j < 4; ++j) s[j] += sm.part[w][0][lane * 4 + j];
                if (!(hi2 < n && sm.sort_r[hi2] == r && sm.sort_r[lo2] == sm.sort_r[hi2 - 1])) break;
            }
            add_row(a, v0 + r, c, nv, vec_dw, s);
        }
    }
    __syncthreads();
}

/* Backward, dwte. Grid (ceil(C / EB_CH), ceil(V / EB_ROWS)); EMB_THREADS threads.
 * Block (x, y) owns dwte rows [y·EB_ROWS, +EB_ROWS) x channels [x·EB_CH, +EB_CH);
 * lane l of every warp owns channels x·EB_CH + 4l .. +3 (design note). */
static __global__ void __launch_bounds__(EMB_THREADS)
    embedding_bwd_kernel(f8i_embedding_bwd_args a, bool vec_tok, bool vec_dy, bool vec_dw)
{
    __shared__ eb_smem sm;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t v0 = (int64_t)blockIdx.y * EB_ROWS;
    const int64_t c = (int64_t)blockIdx.x * EB_CH + lane * 4;
    const int nv = c >= a.channels ? 0 : a.channels - c < 4 ? (int)(a.channels - c) : 4;
    const int64_t T = a.n_tokens;
    int n = 0; /* list length: the same in every thread */
    for (int64_t base = 0; base < T; base += EB_ROUND) {
        const int64_t t0 = base + 4 * tid;
        int32_t tok[4];
        if (vec_tok && t0 + 3 < T) {
            const int4 q = *(const int4 *)(a.tokens + t0);
            tok[0] = q.x, tok[1] = q.y, tok[2] = q.z, tok[3] = q.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) tok[j] = t0 + j < T ? a.tokens[t0 + j] : -1;
        }
        int cnt = 0;
        bool hit[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            hit[j] = tok[j] >= 0 && tok[j] < a.vocab && (uint64_t)((int64_t)tok[j] - v0) < (uint64_t)EB_ROWS;
            cnt += hit[j];
        }
        int incl = cnt;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += y;
        }
        if (lane == 31) sm.warp_count[warp] = incl;
        __syncthreads();
        int pos = n, total = n;
#pragma unroll
        for (int w = 0; w < EB_WARPS; ++w) {
            pos += w < warp ? sm.warp_count[w] : 0;
            total += sm.warp_count[w];
        }
        pos += incl - cnt;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (hit[j]) {
                sm.list_t[pos] = (int32_t)(t0 + j);
                sm.list_r[pos] = (uint8_t)(tok[j] - v0);
                ++pos;
            }
        __syncthreads();
        n = total;
        if (n > EB_CAP - EB_ROUND) {
            eb_flush(a, sm, n, v0, c, nv, vec_dy, vec_dw);
            n = 0;
        }
    }
    if (n > 0) eb_flush(a, sm, n, v0, c, nv, vec_dy, vec_dw);
}

/* Backward, dwpe. Grid-stride over (position s < min(S, T), 4-channel group);
 * a thread sums dy rows s, s + S, ... in order, then adds to dwpe. */
static __global__ void __launch_bounds__(EMB_THREADS) embedding_dwpe_kernel(f8i_embedding_bwd_args a, bool vec_dy, bool vec_dw)
{
    const int64_t C = a.channels, CQ = (C + 3) / 4, S = a.seq_len < a.n_tokens ? a.seq_len : a.n_tokens;
    const int dyb = a.dy_dtype == F8_DTYPE_BF16, pb = a.dwpe_dtype == F8_DTYPE_BF16;
    for (int64_t q = (int64_t)blockIdx.x * EMB_THREADS + threadIdx.x; q < S * CQ; q += (int64_t)gridDim.x * EMB_THREADS) {
        const int64_t s = q / CQ, c = (q - s * CQ) * 4;
        const int nv = C - c < 4 ? (int)(C - c) : 4;
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f}, v[4];
        for (int64_t t = s; t < a.n_tokens; t += a.seq_len) {
            ld4(a.dy, dyb, t * C + c, nv, vec_dy, v);
#pragma unroll
            for (int j = 0; j < 4; ++j) sum[j] += v[j];
        }
        ld4(a.dwpe, pb, s * C + c, nv, vec_dw, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] += sum[j];
        st4(a.dwpe, pb, s * C + c, nv, vec_dw, v);
    }
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_embedding_fwd(f8_ctx *ctx, const f8i_embedding_fwd_args *a)
{
    const bool vec = a->channels % 4 == 0 && vec4_ok(a->wte, a->wte_dtype) && vec4_ok(a->wpe, a->wpe_dtype) &&
                     vec4_ok(a->y, a->y_dtype);
    F8I_COUNT_LAUNCHES(ctx, 1);
    embedding_fwd_kernel<<<grid_size(ctx, a->n_tokens * ((a->channels + 3) / 4), EMB_THREADS), EMB_THREADS, 0,
                           f8i_stream(ctx)>>>(*a, vec);
    return f8i_cuda_launch_check(ctx, "embedding_fwd_kernel");
}

f8_status f8i_cuda_embedding_bwd(f8_ctx *ctx, const f8i_embedding_bwd_args *a)
{
    const int64_t tiles_c = (a->channels + EB_CH - 1) / EB_CH, tiles_v = (a->vocab + EB_ROWS - 1) / EB_ROWS;
    if (tiles_v > 65535 || tiles_c > INT32_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "embedding backward: vocab %lld x channels %lld is too large for the "
                         "CUDA kernel (at most %d rows)", (long long)a->vocab, (long long)a->channels, 65535 * EB_ROWS);
    const bool c4 = a->channels % 4 == 0;
    const bool vec_dy = c4 && vec4_ok(a->dy, a->dy_dtype);
    f8_status st = F8_OK;
    if (tiles_v > 0) {
        F8I_COUNT_LAUNCHES(ctx, 1);
        const bool vec_tok = ((uintptr_t)a->tokens & 15) == 0;
        embedding_bwd_kernel<<<dim3((unsigned)tiles_c, (unsigned)tiles_v), EMB_THREADS, 0, f8i_stream(ctx)>>>(
            *a, vec_tok, vec_dy, c4 && vec4_ok(a->dwte, a->dwte_dtype));
        st = f8i_cuda_launch_check(ctx, "embedding_bwd_kernel");
    }
    if (st == F8_OK && a->dwpe) {
        const int64_t S = a->seq_len < a->n_tokens ? a->seq_len : a->n_tokens;
        F8I_COUNT_LAUNCHES(ctx, 1);
        embedding_dwpe_kernel<<<grid_size(ctx, S * ((a->channels + 3) / 4), EMB_THREADS), EMB_THREADS, 0,
                                f8i_stream(ctx)>>>(*a, vec_dy, c4 && vec4_ok(a->dwpe, a->dwpe_dtype));
        st = f8i_cuda_launch_check(ctx, "embedding_dwpe_kernel");
    }
    return st;
}
