/*
 * attention_common.cuh — what the flash-attention kernel files share
 * (attention.cu: dispatch and the generic kernels; attention_fwd.cu and
 * attention_bwd.cu: the BF16 tensor-core fast path). Only src/cuda/attention*
 * includes it.
 *
 * Design note. The fast path's tiles live in shared memory as rows of HD
 * BF16 (HD = 64 or 128: 8 or 16 chunks of 16 bytes). ldmatrix reads eight
 * rows at the same column, which in a plain row-major tile are all in the
 * same four banks; so chunk c of row r is stored at chunk c ^ (r & 7) (an XOR
 * swizzle): the eight rows then hit eight different chunks, conflict-free,
 * and cp.async's 16-byte writes of a row stay a permutation of that row.
 * The operand fragments of mma.m16n8k16 (PTX ISA, "Matrix fragments"), for
 * lane = 4·g + t:
 *   A (16×16, row)  a0 = (g, 2t..2t+1)   a1 = (g+8, 2t..)   a2 = (g, 2t+8..)   a3 = (g+8, 2t+8..)
 *   B (16×8, col)   b0 = (k 2t..2t+1, n g)                   b1 = (k 2t+8.., n g)
 *   C (16×8)        c0, c1 = (g, 2t..2t+1)                   c2, c3 = (g+8, 2t..2t+1)
 * so the C fragments of two neighbouring 8-column tiles, packed to BF16, are
 * exactly the A fragment of their 16 columns: a score tile becomes the A
 * operand of the next product without leaving registers. The addressing
 * helpers below name which ldmatrix lane points where for each of the three
 * uses (A from a row-major tile; B from a tile whose rows are B's n index,
 * "K-like"; B from a tile whose rows are B's k index, "V-like", .trans).
 */
#ifndef F8_CUDA_ATTENTION_COMMON_CUH
#define F8_CUDA_ATTENTION_COMMON_CUH

#include <stdint.h>

#include "nn/attention.h"
#include "cuda_state.cuh"

/* Launch shape knobs (-D to try others). Warps per block (4 or 8; each
 * owns 16 query rows or keys) and
 * shared-memory stages of the streamed operand (k, v in the forward and dq
 * kernels; q, dy, L, D in the dk/dv kernel): block i + STAGES - 1 is
 * requested while block i is used, so each load has STAGES - 1 blocks of
 * math to land in; one barrier per block, after which every warp is done
 * with block i - 1, whose stage the next request reuses. Measured on the
 * H200 (bench_attention, both model shapes): 2 or 3 stages, 4 or 8 warps,
 * every combination within about ±5% of the others, none best everywhere;
 * the defaults (8 warps, 3 stages) are the configuration the tests run. */
#ifndef ATT_FWD_WARPS
#define ATT_FWD_WARPS 8
#endif
#ifndef ATT_BWD_WARPS
#define ATT_BWD_WARPS 8
#endif
#ifndef ATT_FWD_STAGES
#define ATT_FWD_STAGES 3
#endif
#ifndef ATT_BWD_STAGES
#define ATT_BWD_STAGES 3
#endif
static_assert((ATT_FWD_WARPS == 4 || ATT_FWD_WARPS == 8) && (ATT_BWD_WARPS == 4 || ATT_BWD_WARPS == 8),
              "4 or 8 warps per block");
static_assert(ATT_FWD_STAGES >= 2 && ATT_BWD_STAGES >= 2, "at least double buffering");

/* The fast kernels' arguments: element pointers and strides of one call. */
typedef struct att_fast_args {
    const uint16_t *qkv;  /* (B·S, 3C) */
    const uint16_t *dy;   /* (B·S, C) backward */
    const uint16_t *o;    /* (B·S, C) backward: the forward's y */
    uint16_t *y;          /* (B·S, C) forward */
    uint16_t *o_save;     /* (B·S, C) forward: copy of y, or NULL */
    uint16_t *dqkv;       /* (B·S, 3C) backward */
    float *lse;           /* (B·nh, S): written by the forward (or NULL), read by the backward */
    float *d;             /* (B·nh, S) backward: D, written by the dq kernel, read by the dk/dv kernel */
    int seq, n_head;
    int n_kv_head;        /* G (GQA): divides n_head; n_head for multi-head */
    int64_t C;            /* n_head · head_dim */
    int64_t ld;           /* qkv row width: (n_head + 2G)·head_dim */
    float scale, scale_log2;
} att_fast_args;

/* Element offset of k/v head gk's k columns in row 0 of sequence b (v is G·HD further). */
static __device__ __forceinline__ int64_t att_k_col(const att_fast_args &a, int64_t b, int64_t gk, int hd)
{
    return b * a.seq * a.ld + a.C + gk * hd;
}

/* attention_fwd.cu and attention_bwd.cu: HD = 64 or 128, B·nh >= 1, S >= 1. */
f8_status f8i_att_fast_forward(f8_ctx *ctx, const att_fast_args *a, int64_t bh, int hd);
f8_status f8i_att_fast_backward(f8_ctx *ctx, const att_fast_args *a, int64_t bh, int hd);

/* ------------------------------------------------------------------------ */
/* PTX wrappers                                                              */
/* ------------------------------------------------------------------------ */

static __device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global → shared, asynchronous; zero-filled when !valid (src is then
 * not read but must still be a mapped address). */
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
/* 4 bytes global → shared (L and D rows), zero-filled when !valid. */
static __device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
static __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

static __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
static __device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* c += a·b, BF16 in, FP32 accumulate. */
static __device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two FP32 → BF16 (round to nearest even), lo in the low half. */
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 2^x (MUFU; ~2 ulp, subnormal results flushed to 0, 2^-inf = 0). */
static __device__ __forceinline__ float fast_exp2(float x)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

/* ------------------------------------------------------------------------ */
/* Swizzled tiles                                                            */
/* ------------------------------------------------------------------------ */

/* Byte offset of 16-byte chunk c of row r in a tile of HD-wide BF16 rows. */
template <int HD>
static __device__ __forceinline__ uint32_t swz(int r, int c)
{
    return (uint32_t)(r * (HD * 2) + ((c ^ (r & 7)) << 4));
}

/* ldmatrix lane addresses (row, chunk) for a 16×16 block at (row r0, column
 * 16·kk) of a swizzled tile:
 *  - A operand (rows = A's rows): matrices (rows 0-7, 8-15) × (cols 0-7, 8-15), → a0..a3;
 *  - B_n ("K-like": tile rows = B's n, columns = B's k), plain: → b0, b1 of n-tile r0 and b0, b1 of n-tile r0 + 8;
 *  - B_k ("V-like": tile rows = B's k, columns = B's n), .trans: → b0, b1 of n-tile 16kk and of 16kk + 8. */
template <int HD>
static __device__ __forceinline__ uint32_t addr_a(uint32_t base, int r0, int kk, int lane)
{
    return base + swz<HD>(r0 + (lane & 15), 2 * kk + (lane >> 4));
}
template <int HD>
static __device__ __forceinline__ uint32_t addr_bn(uint32_t base, int r0, int kk, int lane)
{
    return base + swz<HD>(r0 + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1));
}
template <int HD>
static __device__ __forceinline__ uint32_t addr_bk(uint32_t base, int r0, int kk, int lane)
{
    return base + swz<HD>(r0 + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * kk + (lane >> 4));
}

/* acc[2j], acc[2j + 1] += a·B, B the k-block kk × n-block j (16 × 16) of a
 * K-like tile (n-tiles 16j and 16j + 8 of the product). */
template <int HD, int N>
static __device__ __forceinline__ void mma_bn(float (&acc)[N][4], int j, const uint32_t (&a)[4], uint32_t tile, int kk,
                                              int lane)
{
    uint32_t bf[4];
    ldsm_x4(bf, addr_bn<HD>(tile, 16 * j, kk, lane));
    mma_bf16(acc[2 * j], a, bf[0], bf[1]);
    mma_bf16(acc[2 * j + 1], a, bf[2], bf[3]);
}
/* The same with B from a V-like tile (tile rows 16kk.. are B's k). */
template <int HD, int N>
static __device__ __forceinline__ void mma_bk(float (&acc)[N][4], int j, const uint32_t (&a)[4], uint32_t tile, int kk,
                                              int lane)
{
    uint32_t bf[4];
    ldsm_x4_t(bf, addr_bk<HD>(tile, 16 * kk, j, lane));
    mma_bf16(acc[2 * j], a, bf[0], bf[1]);
    mma_bf16(acc[2 * j + 1], a, bf[2], bf[3]);
}

/* The A fragment of columns 16kk..16kk + 15 of a warp's scores: their C
 * fragments c[2kk], c[2kk + 1] packed to BF16 (the design note). */
template <int N>
static __device__ __forceinline__ void pack_a(uint32_t (&a)[4], const float (&c)[N][4], int kk)
{
    a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* ROWS rows of a head (row r at g + r·ld, HD BF16 each) from row row0 into a
 * swizzled tile, asynchronously; rows >= seq are zero-filled. All THREADS
 * threads of the block call it; thread x moves chunks x, x + THREADS, .... */
template <int HD, int ROWS, int THREADS>
static __device__ __forceinline__ void load_tile(uint32_t tile, const uint16_t *g, int64_t ld, int row0, int seq)
{
    constexpr int CH = HD / 8;
    static_assert((ROWS * CH) % THREADS == 0, "a tile is a whole number of 16-byte chunks per thread");
#pragma unroll
    for (int k = 0; k < ROWS * CH / THREADS; k++) {
        const int idx = (int)threadIdx.x + k * THREADS, r = idx / CH, c = idx % CH, row = row0 + r;
        const bool ok = row < seq;
        cp_async16(tile + swz<HD>(r, c), g + (int64_t)(ok ? row : seq - 1) * ld + c * 8, ok);
    }
}

/* A warp's 16 staged rows (tile rows r0..r0+15, BF16) to global rows
 * row0.. (< seq) of dst (+ dst2 when not NULL); lane l moves chunks l, l + 32, .... */
template <int HD>
static __device__ __forceinline__ void store_rows(const unsigned char *tile, int r0, uint16_t *dst, uint16_t *dst2,
                                                  int64_t ld, int row0, int seq, int lane)
{
    constexpr int CH = HD / 8;
#pragma unroll
    for (int k = 0; k < 16 * CH / 32; k++) {
        const int idx = lane + 32 * k, r = idx / CH, c = idx % CH;
        if (row0 + r < seq) {
            const uint4 v = *(const uint4 *)(tile + swz<HD>(r0 + r, c));
            *(uint4 *)(dst + (int64_t)(row0 + r) * ld + c * 8) = v;
            if (dst2) *(uint4 *)(dst2 + (int64_t)(row0 + r) * ld + c * 8) = v;
        }
    }
}

/* A warp's 16×HD FP32 accumulator tile (C fragments acc[HD/8][4]) as BF16
 * into tile rows r0..r0+15, each value times mul[row half] first. */
template <int HD>
static __device__ __forceinline__ void stage_rows(unsigned char *tile, int r0, const float (&acc)[HD / 8][4], float mul0,
                                                  float mul1, int lane)
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        *(uint32_t *)(tile + swz<HD>(r0 + g, n) + 4 * t) = pack_bf16(acc[n][0] * mul0, acc[n][1] * mul0);
        *(uint32_t *)(tile + swz<HD>(r0 + g + 8, n) + 4 * t) = pack_bf16(acc[n][2] * mul1, acc[n][3] * mul1);
    }
}

/* The next stage of a ring of N. */
template <int N>
static __device__ __forceinline__ int next_stage(int st)
{
    return st + 1 == N ? 0 : st + 1;
}

#endif /* F8_CUDA_ATTENTION_COMMON_CUH */
