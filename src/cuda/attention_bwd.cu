/*
 * attention_bwd.cu — the fused causal attention backward for BF16 with
 * head_dim 64 or 128: FlashAttention-2's backward on mma.sync tensor cores,
 * made deterministic by splitting it in two kernels instead of adding dq
 * with atomics.
 *
 * Design note. Both kernels recompute P = exp2((s - L)·c2) from the saved L
 * (attention.h), so nothing S×S is ever stored; the price is that s and dP
 * of each (query, key) pair are computed twice, 7 products where the atomic
 * FlashAttention-2 backward has 5.
 *  - dq_kernel, first: one block per (b, h, 128 query rows), 8 warps × 16
 *    rows (ATT_BWD_WARPS), walking key blocks of 64 up to the diagonal (k, v
 *    streamed through 3 stages by cp.async, ATT_BWD_STAGES, as the
 *    forward). Per key block a warp computes s = q·kᵀ and
 *    dP = dy·vᵀ (q and dy fragments from shared memory), dS = P·(dP - D)·c,
 *    and dq += dS·k with dS, packed to BF16, as the A operand straight from
 *    registers. Before its loop each warp computes D = Σ dy·O for its 16 rows
 *    (two lanes a row, 16-byte loads) and writes it to the workspace for the
 *    second kernel.
 *  - dkv_kernel, second: one block per (b, h, 128 keys), 8 warps × 16 keys,
 *    walking query blocks (64 rows for HD 64, 32 for HD 128, so that dk, dv,
 *    sᵀ and dPᵀ fit in registers) from its diagonal to the end, q, dy, L and
 *    D streamed through the same number of stages by cp.async. Per query
 *    block a warp computes sᵀ = k·qᵀ and dPᵀ = v·dyᵀ (k, v fragments from shared
 *    memory), Pᵀ and dSᵀ, then dv += dt(Pᵀ)·dy and dk += dSᵀ·q, again with
 *    the A operands from the score registers.
 * A warp skips the blocks its rows (keys) are entirely masked from. Every
 * gradient element is one FP32 accumulator summed in a fixed order and
 * rounded to BF16 once (staged through the warp's own rows of a tile, then
 * 16-byte stores into dqkv's q, k or v third): deterministic, no atomics.
 * The longest blocks start first (dq: the last query blocks; dk/dv: the first
 * key blocks). Rows past S are zero-filled, so their P is finite and their
 * dS and contributions are exactly 0.
 */
#include <cuda_runtime.h>

#include "attention_common.cuh"

#define BWD_NW ATT_BWD_WARPS    /* warps per block, both kernels */
#define BWD_THREADS (BWD_NW * 32)
#define BWD_ST ATT_BWD_STAGES
#define DQ_BR (16 * BWD_NW)      /* dq: query rows per block */
#define DQ_BC 64                 /* dq: keys per key block */
#define KV_BC (16 * BWD_NW)      /* dk/dv: keys per block */

template <int HD>
struct dq_smem {
    static constexpr int Q_BYTES = DQ_BR * HD * 2, KV_BYTES = DQ_BC * HD * 2;
    static constexpr int BYTES = 2 * Q_BYTES + 2 * BWD_ST * KV_BYTES; /* q, dy, k[stages], v[stages] */
};

template <int HD>
struct kv_smem {
    static constexpr int BR = HD == 64 ? 64 : 32; /* query rows per step */
    static constexpr int KV_BYTES = KV_BC * HD * 2, Q_BYTES = BR * HD * 2;
    /* k, v, q[stages], dy[stages], L[stages], D[stages] */
    static constexpr int BYTES = 2 * KV_BYTES + 2 * BWD_ST * Q_BYTES + 2 * BWD_ST * BR * 4;
};


/* Grid: (B·nh, ceil(S/DQ_BR)); block BWD_THREADS. Block (bh, y) owns query
 * rows DQ_BR·(gridDim.y - 1 - y) + [0, DQ_BR) of pair bh, warp w 16 of them; fragment
 * ownership as the forward's (lane 4g + t: rows g, g + 8; columns 2t, 2t + 1). */
template <int HD>
static __global__ void __launch_bounds__(BWD_THREADS, 8 / BWD_NW) dq_kernel(att_fast_args a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    typedef dq_smem<HD> L;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int S = a.seq;
    const int64_t bh = blockIdx.x, b = bh / a.n_head, h = bh - b * a.n_head, ld = a.ld;
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * DQ_BR;
    const uint16_t *qg = a.qkv + b * S * ld + h * HD, *kg = a.qkv + att_k_col(a, b, h / (a.n_head / a.n_kv_head), HD);
    const uint16_t *vg = kg + (int64_t)a.n_kv_head * HD;
    const int64_t yo = b * S * a.C + h * HD; /* dy and O columns of this head */
    const uint32_t sq = smem_u32(smem), sdo = sq + L::Q_BYTES, sk = sdo + L::Q_BYTES, sv = sk + BWD_ST * L::KV_BYTES;
    const int last = min(q0 + DQ_BR, S) - 1;
    const int nkb = last / DQ_BC + 1;
    const int wr = warp * 16, r0 = q0 + wr;
    const float c2 = a.scale_log2, c = a.scale;

    /* one commit group per key block (q and dy join block 0's), as the forward */
    load_tile<HD, DQ_BR, BWD_THREADS>(sq, qg, ld, q0, S);
    load_tile<HD, DQ_BR, BWD_THREADS>(sdo, a.dy + yo, a.C, q0, S);
#pragma unroll
    for (int p = 0; p < BWD_ST - 1; p++) {
        if (p < nkb) {
            load_tile<HD, DQ_BC, BWD_THREADS>(sk + p * L::KV_BYTES, kg, ld, p * DQ_BC, S);
            load_tile<HD, DQ_BC, BWD_THREADS>(sv + p * L::KV_BYTES, vg, ld, p * DQ_BC, S);
        }
        cp_async_commit();
    }

    /* D of the warp's rows: lane 2r + half sums half of row r0 + r */
    float dsum = 0.0f;
    {
        const int row = r0 + (lane >> 1), half = lane & 1;
        if (row < S) {
            const uint4 *x = (const uint4 *)(a.dy + yo + (int64_t)row * a.C + half * (HD / 2));
            const uint4 *z = (const uint4 *)(a.o + yo + (int64_t)row * a.C + half * (HD / 2));
#pragma unroll
            for (int k = 0; k < HD / 16; k++) {
                const uint4 u = x[k], v = z[k];
                const uint32_t uw[4] = {u.x, u.y, u.z, u.w}, vw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    dsum = __fmaf_rn(__uint_as_float(uw[e] << 16), __uint_as_float(vw[e] << 16), dsum);
                    dsum = __fmaf_rn(__uint_as_float(uw[e] & 0xFFFF0000u), __uint_as_float(vw[e] & 0xFFFF0000u), dsum);
                }
            }
        }
        dsum += __shfl_xor_sync(0xFFFFFFFFu, dsum, 1); /* both halves: the same sum */
        if (row < S && half == 0) a.d[bh * S + row] = dsum;
    }
    float dr[2], lr[2];
    dr[0] = __shfl_sync(0xFFFFFFFFu, dsum, 2 * g);      /* row g's D is in lane 2g */
    dr[1] = __shfl_sync(0xFFFFFFFFu, dsum, 2 * g + 16); /* row g + 8's in lane 2g + 16 */
#pragma unroll
    for (int r = 0; r < 2; r++) lr[r] = r0 + g + 8 * r < S ? a.lse[bh * S + r0 + g + 8 * r] : 0.0f;

    float dq[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    for (int kb = 0, st = 0, ls = BWD_ST - 1; kb < nkb; kb++, st = next_stage<BWD_ST>(st), ls = next_stage<BWD_ST>(ls)) {
        cp_async_wait<BWD_ST - 2>();
        __syncthreads(); /* block kb is in; block kb - 1's stage (ls) is free */
        if (kb + BWD_ST - 1 < nkb) {
            load_tile<HD, DQ_BC, BWD_THREADS>(sk + ls * L::KV_BYTES, kg, ld, (kb + BWD_ST - 1) * DQ_BC, S);
            load_tile<HD, DQ_BC, BWD_THREADS>(sv + ls * L::KV_BYTES, vg, ld, (kb + BWD_ST - 1) * DQ_BC, S);
        }
        cp_async_commit();
        const int k0 = kb * DQ_BC;
        if (k0 <= r0 + 15) {
            const uint32_t kt = sk + st * L::KV_BYTES, vt = sv + st * L::KV_BYTES;
            float s[DQ_BC / 8][4], dp[DQ_BC / 8][4];
#pragma unroll
            for (int n = 0; n < DQ_BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t qa[4], da[4];
                ldsm_x4(qa, addr_a<HD>(sq, wr, kk, lane));
                ldsm_x4(da, addr_a<HD>(sdo, wr, kk, lane));
#pragma unroll
                for (int np = 0; np < DQ_BC / 16; np++) {
                    mma_bn<HD>(s, np, qa, kt, kk, lane);
                    mma_bn<HD>(dp, np, da, vt, kk, lane);
                }
            }
            const bool diag = k0 + DQ_BC - 1 > r0;
#pragma unroll
            for (int n = 0; n < DQ_BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float sv_ = diag && k0 + 8 * n + 2 * t + (e & 1) > r0 + g + 8 * (e >> 1) ? -INFINITY : s[n][e];
                    const float p = fast_exp2((sv_ - lr[e >> 1]) * c2);
                    s[n][e] = p * (dp[n][e] - dr[e >> 1]) * c; /* dS, FP32 */
                }
#pragma unroll
            for (int kk = 0; kk < DQ_BC / 16; kk++) {
                uint32_t da[4];
                pack_a(da, s, kk);
#pragma unroll
                for (int np = 0; np < HD / 16; np++) mma_bk<HD>(dq, np, da, kt, kk, lane);
            }
        }
    }
    stage_rows<HD>(smem, wr, dq, 1.0f, 1.0f, lane); /* into the warp's own q rows (only it reads them) */
    __syncwarp();
    store_rows<HD>(smem, wr, a.dqkv + b * S * ld + h * HD, NULL, ld, r0, S, lane);
}

/* Query block rows row0.. of the dk/dv kernel into stage st: q and dy tiles
 * (swizzled), L and D (BR floats each; thread x < BR moves row x). */
template <int HD, int BR>
static __device__ __forceinline__ void load_qblock(uint32_t sq, uint32_t sdo, uint32_t sl, uint32_t sd, int st,
                                                   const uint16_t *qg, const uint16_t *dyg, const float *lg,
                                                   const float *dg, int64_t ld, int64_t ldy, int row0, int seq)
{
    load_tile<HD, BR, BWD_THREADS>(sq + st * (BR * HD * 2), qg, ld, row0, seq);
    load_tile<HD, BR, BWD_THREADS>(sdo + st * (BR * HD * 2), dyg, ldy, row0, seq);
    if ((int)threadIdx.x < BR) {
        const int row = row0 + (int)threadIdx.x;
        const bool ok = row < seq;
        cp_async4(sl + (st * BR + threadIdx.x) * 4, lg + (ok ? row : seq - 1), ok);
        cp_async4(sd + (st * BR + threadIdx.x) * 4, dg + (ok ? row : seq - 1), ok);
    }
}

/* Grid: (B·G, ceil(S/KV_BC)); block BWD_THREADS. Block (bg, y) owns keys
 * KV_BC·y + [0, KV_BC) of k/v head pair bg (all its group's query heads), warp w 16 of them (the M dimension of every
 * product here: sᵀ is keys × queries); lane 4g + t owns keys g, g + 8 and
 * query columns 2t, 2t + 1 of each 8-wide tile, and dk, dv of keys g, g + 8. */
template <int HD>
static __global__ void __launch_bounds__(BWD_THREADS, 8 / BWD_NW) dkv_kernel(att_fast_args a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    typedef kv_smem<HD> L;
    constexpr int BR = L::BR;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int S = a.seq;
    const int group = a.n_head / a.n_kv_head;
    const int64_t bg = blockIdx.x, b = bg / a.n_kv_head, gk = bg - b * a.n_kv_head, ld = a.ld;
    const int k0 = (int)blockIdx.y * KV_BC;
    const int64_t ko = att_k_col(a, b, gk, HD);
    const uint16_t *kg = a.qkv + ko, *vg = kg + (int64_t)a.n_kv_head * HD;
    const uint32_t sk = smem_u32(smem), sv = sk + L::KV_BYTES, sq = sv + L::KV_BYTES, sdo = sq + BWD_ST * L::Q_BYTES;
    const uint32_t sl = sdo + BWD_ST * L::Q_BYTES, sd = sl + BWD_ST * BR * 4; /* FP32 [stages][BR] each */
    const float *slf = (const float *)(smem + (sl - sk)), *sdf = (const float *)(smem + (sd - sk));
    const int wr = warp * 16, kw = k0 + wr; /* the warp's first tile row and key */
    const int qb0 = k0 / BR, nqb = (S + BR - 1) / BR;
    const float c2 = a.scale_log2, c = a.scale;

    /* one commit group per query block (k and v join the first's); rows past
     * S are zero-filled, L = D = 0 included (their q, dy are zero: dS = 0) */
    load_tile<HD, KV_BC, BWD_THREADS>(sk, kg, ld, k0, S);
    load_tile<HD, KV_BC, BWD_THREADS>(sv, vg, ld, k0, S);

    float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

    /* GQA: the group's query heads in order, each a full pass over its query
     * blocks into the same dk, dv (one FP32 sum; k and v stay in place) */
    for (int hh = 0; hh < group; hh++) {
        const int64_t h = gk * group + hh, bh = b * a.n_head + h;
        const uint16_t *qg = a.qkv + b * S * ld + h * HD, *dyg = a.dy + b * S * a.C + h * HD;
        const float *lg = a.lse + bh * S, *dg = a.d + bh * S;
        if (hh > 0) { /* the previous head's stages are all read before they are refilled */
            cp_async_wait<0>();
            __syncthreads();
        }
#pragma unroll
        for (int p = 0; p < BWD_ST - 1; p++) {
            if (qb0 + p < nqb) load_qblock<HD, BR>(sq, sdo, sl, sd, p, qg, dyg, lg, dg, ld, a.C, (qb0 + p) * BR, S);
            cp_async_commit();
        }

        for (int qb = qb0, st = 0, ls = BWD_ST - 1; qb < nqb; qb++, st = next_stage<BWD_ST>(st), ls = next_stage<BWD_ST>(ls)) {
            cp_async_wait<BWD_ST - 2>();
            __syncthreads(); /* block qb is in; block qb - 1's stage (ls) is free */
            if (qb + BWD_ST - 1 < nqb)
                load_qblock<HD, BR>(sq, sdo, sl, sd, ls, qg, dyg, lg, dg, ld, a.C, (qb + BWD_ST - 1) * BR, S);
            cp_async_commit();
            const int q0 = qb * BR;
            if (q0 + BR - 1 >= kw) {
                const uint32_t qt = sq + st * L::Q_BYTES, dot = sdo + st * L::Q_BYTES;
                const float *lq = slf + st * BR, *dq_ = sdf + st * BR;
                float s[BR / 8][4], dp[BR / 8][4];
#pragma unroll
                for (int n = 0; n < BR / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    uint32_t ka[4], va[4];
                    ldsm_x4(ka, addr_a<HD>(sk, wr, kk, lane));
                    ldsm_x4(va, addr_a<HD>(sv, wr, kk, lane));
#pragma unroll
                    for (int np = 0; np < BR / 16; np++) {
                        mma_bn<HD>(s, np, ka, qt, kk, lane);
                        mma_bn<HD>(dp, np, va, dot, kk, lane);
                    }
                }
                const bool diag = q0 < kw + 15; /* some query of the block precedes some key of the warp */
#pragma unroll
                for (int n = 0; n < BR / 8; n++) {
                    const float2 lv = *(const float2 *)(lq + 8 * n + 2 * t), dv2 = *(const float2 *)(dq_ + 8 * n + 2 * t);
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float sv_ = diag && q0 + 8 * n + 2 * t + (e & 1) < kw + g + 8 * (e >> 1) ? -INFINITY : s[n][e];
                        const float p = fast_exp2((sv_ - ((e & 1) ? lv.y : lv.x)) * c2);
                        dp[n][e] = p * (dp[n][e] - ((e & 1) ? dv2.y : dv2.x)) * c; /* dSᵀ */
                        s[n][e] = p;                                              /* Pᵀ */
                    }
                }
#pragma unroll
                for (int kk = 0; kk < BR / 16; kk++) {
                    uint32_t pa[4], sa[4];
                    pack_a(pa, s, kk);
                    pack_a(sa, dp, kk);
#pragma unroll
                    for (int np = 0; np < HD / 16; np++) {
                        mma_bk<HD>(dv, np, pa, dot, kk, lane);
                        mma_bk<HD>(dk, np, sa, qt, kk, lane);
                    }
                }
            }
        }
    } /* the group's heads */
    /* the warp's own k and v rows take its dk and dv */
    stage_rows<HD>(smem, wr, dk, 1.0f, 1.0f, lane);
    stage_rows<HD>(smem + L::KV_BYTES, wr, dv, 1.0f, 1.0f, lane);
    __syncwarp();
    uint16_t *dst = a.dqkv + ko;
    store_rows<HD>(smem, wr, dst, NULL, ld, kw, S, lane);
    store_rows<HD>(smem + L::KV_BYTES, wr, dst + (int64_t)a.n_kv_head * HD, NULL, ld, kw, S, lane);
}

template <int HD>
static f8_status launch_bwd(f8_ctx *ctx, const att_fast_args *a, int64_t bh)
{
    const int dq_bytes = dq_smem<HD>::BYTES, kv_bytes = kv_smem<HD>::BYTES;
    if (dq_bytes > 48 * 1024)
        F8I_TRY(f8i_cuda_smem_optin(ctx, (const void *)dq_kernel<HD>, "attention backward: shared-memory opt-in"));
    if (kv_bytes > 48 * 1024)
        F8I_TRY(f8i_cuda_smem_optin(ctx, (const void *)dkv_kernel<HD>, "attention backward: shared-memory opt-in"));
    cudaStream_t stream = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 2);
    dq_kernel<HD><<<dim3((unsigned)bh, (unsigned)((a->seq + DQ_BR - 1) / DQ_BR)), BWD_THREADS, dq_bytes, stream>>>(*a);
    F8I_TRY(f8i_cuda_launch_check(ctx, "attention dq_kernel"));
    const int64_t bkv = bh / (a->n_head / a->n_kv_head); /* B·G blocks of keys: each sums its group's heads */
    dkv_kernel<HD><<<dim3((unsigned)bkv, (unsigned)((a->seq + KV_BC - 1) / KV_BC)), BWD_THREADS, kv_bytes, stream>>>(*a);
    return f8i_cuda_launch_check(ctx, "attention dkv_kernel");
}

f8_status f8i_att_fast_backward(f8_ctx *ctx, const att_fast_args *a, int64_t bh, int hd)
{
    return hd == 64 ? launch_bwd<64>(ctx, a, bh) : launch_bwd<128>(ctx, a, bh);
}
