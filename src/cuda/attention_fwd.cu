/*
 * attention_fwd.cu — the fused causal attention forward for BF16 with
 * head_dim 64 or 128: FlashAttention-2's algorithm on mma.sync tensor cores.
 *
 * Design note. One block owns (sequence b, head h, BR = 128 query rows);
 * its 8 warps (ATT_FWD_WARPS) own 16 rows each. The block walks the key
 * blocks of 64 up to its diagonal, K and V streamed through 3
 * (ATT_FWD_STAGES) shared-memory stages by cp.async (blocks kb + 1, kb + 2
 * land while kb is used; one barrier per block, attention_common.cuh). Per key block a warp computes its 16×64
 * scores s = q·kᵀ on tensor cores (q's fragments stay in registers for the
 * whole loop), masks keys above the diagonal, and updates its online softmax
 * in FP32: m_new = max(m, max_j s), every accumulator and the running sum l
 * scaled by exp2((m - m_new)·c2), p = exp2((s - m_new)·c2) (attention.h's
 * p relative to the running maximum). p, rounded to BF16, is the A operand
 * of o += p·v straight from the score registers (attention_common.cuh). A
 * warp whose rows all lie above a key block skips it (a quarter of the
 * diagonal tiles' work). At the end y = o·(1/l) is rounded to BF16, staged
 * through the warp's own rows of the q tile and written with 16-byte stores,
 * to y and, when saving, to O; L = m + log2(l)/c2.
 *
 * Order: the grid's y index counts query blocks from the last (the longest:
 * it sees every key block) to the first, so the longest blocks start first
 * and the short ones fill the tail. Each sum has one fixed order (the MMA's,
 * then the block order; l's per-thread partials joined by a fixed butterfly),
 * so the kernel is deterministic. Shared memory: q 128 rows + 3 × (k, v) 64
 * rows = 64 KiB (HD 64: two blocks per SM) or 128 KiB (HD 128: one).
 */
#include <cuda_runtime.h>

#include "attention_common.cuh"

#define FWD_NW ATT_FWD_WARPS      /* warps per block */
#define FWD_THREADS (FWD_NW * 32)
#define FWD_BR (16 * FWD_NW)       /* query rows per block */
#define FWD_BC 64                  /* keys per key block */
#define FWD_ST ATT_FWD_STAGES

template <int HD>
struct fwd_smem {
    static constexpr int Q_BYTES = FWD_BR * HD * 2, KV_BYTES = FWD_BC * HD * 2;
    static constexpr int BYTES = Q_BYTES + 2 * FWD_ST * KV_BYTES; /* q, k[stages], v[stages] */
    /* blocks per SM the registers are capped for: 2 × 8 or 4 × 4 warps at HD 64 (128 registers), 8 warps at 128 */
    static constexpr int MIN_BLOCKS = (HD == 64 ? 2 : 1) * (8 / FWD_NW);
};

/* Grid: (B·nh, ceil(S/BR)); block FWD_THREADS. Block (bh, y) owns query rows
 * BR·(gridDim.y - 1 - y) + [0, BR) of pair bh (BR = 16 per warp); warp w owns 16 of them; in
 * each MMA fragment lane 4g + t owns rows g and g + 8 of the warp's 16 and
 * columns 2t, 2t + 1 of each 8-wide tile (attention_common.cuh). */
template <int HD>
static __global__ void __launch_bounds__(FWD_THREADS, fwd_smem<HD>::MIN_BLOCKS) fwd_kernel(att_fast_args a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    typedef fwd_smem<HD> L;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int S = a.seq;
    const int64_t bh = blockIdx.x, b = bh / a.n_head, h = bh - b * a.n_head, ld = a.ld;
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * FWD_BR;
    const uint16_t *qg = a.qkv + b * S * ld + h * HD, *kg = a.qkv + att_k_col(a, b, h / (a.n_head / a.n_kv_head), HD);
    const uint16_t *vg = kg + (int64_t)a.n_kv_head * HD;
    const uint32_t sq = smem_u32(smem), sk = sq + L::Q_BYTES, sv = sk + FWD_ST * L::KV_BYTES;
    const int last = min(q0 + FWD_BR, S) - 1;
    const int nkb = last / FWD_BC + 1;
    const int wr = warp * 16, r0 = q0 + wr; /* the warp's first tile row and sequence row */
    const float c2 = a.scale_log2;

    /* one commit group per key block (q joins block 0's); blocks past nkb are empty groups */
    load_tile<HD, FWD_BR, FWD_THREADS>(sq, qg, ld, q0, S);
#pragma unroll
    for (int p = 0; p < FWD_ST - 1; p++) {
        if (p < nkb) {
            load_tile<HD, FWD_BC, FWD_THREADS>(sk + p * L::KV_BYTES, kg, ld, p * FWD_BC, S);
            load_tile<HD, FWD_BC, FWD_THREADS>(sv + p * L::KV_BYTES, vg, ld, p * FWD_BC, S);
        }
        cp_async_commit();
    }

    uint32_t qf[HD / 16][4];
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int kb = 0, st = 0, ls = FWD_ST - 1; kb < nkb; kb++, st = next_stage<FWD_ST>(st), ls = next_stage<FWD_ST>(ls)) {
        cp_async_wait<FWD_ST - 2>(); /* block kb has landed (this thread's part) */
        __syncthreads();             /* everyone's part; and block kb - 1's stage (ls) is free */
        if (kb + FWD_ST - 1 < nkb) {
            load_tile<HD, FWD_BC, FWD_THREADS>(sk + ls * L::KV_BYTES, kg, ld, (kb + FWD_ST - 1) * FWD_BC, S);
            load_tile<HD, FWD_BC, FWD_THREADS>(sv + ls * L::KV_BYTES, vg, ld, (kb + FWD_ST - 1) * FWD_BC, S);
        }
        cp_async_commit();
        if (kb == 0) {
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) ldsm_x4(qf[kk], addr_a<HD>(sq, wr, kk, lane));
        }
        const int k0 = kb * FWD_BC;
        if (k0 <= r0 + 15) {
            const uint32_t kt = sk + st * L::KV_BYTES, vt = sv + st * L::KV_BYTES;
            float s[FWD_BC / 8][4];
#pragma unroll
            for (int n = 0; n < FWD_BC / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
                for (int np = 0; np < FWD_BC / 16; np++) mma_bn<HD>(s, np, qf[kk], kt, kk, lane);
            }
            if (k0 + FWD_BC - 1 > r0) { /* the diagonal: key > row is masked */
#pragma unroll
                for (int n = 0; n < FWD_BC / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (k0 + 8 * n + 2 * t + (e & 1) > r0 + g + 8 * (e >> 1)) s[n][e] = -INFINITY;
            }
            /* Online softmax. Key 0 is in block 0 and never masked, so m is
             * finite from the first block on and m - m_new is never inf - inf. */
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int n = 0; n < FWD_BC / 8; n++) {
                mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
            }
            float alpha[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 2));
                alpha[r] = fast_exp2((m[r] - mx[r]) * c2);
                m[r] = mx[r];
                l[r] *= alpha[r];
            }
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                o[n][0] *= alpha[0], o[n][1] *= alpha[0];
                o[n][2] *= alpha[1], o[n][3] *= alpha[1];
            }
#pragma unroll
            for (int n = 0; n < FWD_BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[n][e] = fast_exp2((s[n][e] - m[e >> 1]) * c2);
                    l[e >> 1] += s[n][e];
                }
            /* o += dt(p)·v, 16 keys per step */
#pragma unroll
            for (int kk = 0; kk < FWD_BC / 16; kk++) {
                uint32_t pa[4];
                pack_a(pa, s, kk);
#pragma unroll
                for (int np = 0; np < HD / 16; np++) mma_bk<HD>(o, np, pa, vt, kk, lane);
            }
        }
    }

    /* l: the quad's partial sums, joined by a butterfly (every lane gets the same sum) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);
        l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 2);
    }
    /* the warp's q rows are its own (only it read them): stage y there */
    stage_rows<HD>(smem, wr, o, 1.0f / l[0], 1.0f / l[1], lane);
    __syncwarp();
    const int64_t yo = b * S * a.C + h * HD;
    store_rows<HD>(smem, wr, a.y + yo, a.o_save ? a.o_save + yo : NULL, a.C, r0, S, lane);
    if (a.lse && t == 0) {
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (r0 + g + 8 * r < S) a.lse[bh * S + r0 + g + 8 * r] = m[r] + log2f(l[r]) / c2;
    }
}

template <int HD>
static f8_status launch_fwd(f8_ctx *ctx, const att_fast_args *a, int64_t bh)
{
    const int bytes = fwd_smem<HD>::BYTES;
    if (bytes > 48 * 1024) {
        F8I_TRY(f8i_cuda_smem_optin(ctx, (const void *)fwd_kernel<HD>, "attention forward: shared-memory opt-in"));
    }
    const dim3 grid((unsigned)bh, (unsigned)((a->seq + FWD_BR - 1) / FWD_BR));
    F8I_COUNT_LAUNCHES(ctx, 1);
    fwd_kernel<HD><<<grid, FWD_THREADS, bytes, f8i_stream(ctx)>>>(*a);
    return f8i_cuda_launch_check(ctx, "attention fwd_kernel");
}

f8_status f8i_att_fast_forward(f8_ctx *ctx, const att_fast_args *a, int64_t bh, int hd)
{
    return hd == 64 ? launch_fwd<64>(ctx, a, bh) : launch_fwd<128>(ctx, a, bh);
}
