/*
 * attention.h — the attention family of training ops: the args of
 * F8I_OP_ATTN_FWD and F8I_OP_ATTN_BWD (backend.h's op list; called as
 * f8i_op_attn_fwd/bwd, core/ops.h), and the saved-state and workspace
 * layouts attention.c carves for them. Included from C and CUDA.
 *
 * Design note: what is computed. Per (sequence b, head h) with S tokens,
 * head dim hd, c = 1/sqrtf(hd) and c2 = c·log2(e) (both FP32, made once on
 * the host; c2 = FP32(c · 1.44269504f)), for rows i and keys j <= i:
 *   forward   s[i, j] = Σ_d q[i, d]·k[j, d]                      (FP32 sum)
 *             m_i     = max_{j<=i} s[i, j]                       (raw scores: c2 > 0)
 *             p[i, j] = exp2((s[i, j] - m_i)·c2)                 (FP32, unnormalized)
 *             l_i     = Σ_{j<=i} p[i, j]                         (FP32)
 *             y[i, :] = (Σ_{j<=i} dt(p[i, j])·v[j, :]) · (1/l_i) (FP32 sum, product, one rounding to dt)
 *             L_i     = m_i + log2(l_i)/c2                       (FP32, saved: raw-score units)
 *   backward  P[i, j]  = exp2((s[i, j] - L_i)·c2)   = p/l, recomputed from L
 *             dP[i, j] = Σ_d dy[i, d]·v[j, d]                    (FP32)
 *             D_i      = Σ_d dy[i, d]·y[i, d]                    (FP32; y the stored output)
 *             dS[i, j] = dt(P·(dP - D_i)·c)                      (FP32 ops in this order, then rounded)
 *             dv[j, :] = Σ_{i>=j} dt(P[i, j])·dy[i, :],  dk[j, :] = Σ_{i>=j} dS[i, j]·q[i, :],
 *             dq[i, :] = Σ_{j<=i} dS[i, j]·k[j, :]               (FP32 sums, one rounding to dt)
 * where dt(x) rounds to the dtype (BF16: nearest even; FP32: x). The
 * subtraction comes before the scale so that the largest score of a row
 * gives exp2(0) = 1 exactly (S = 1 is then exact: y = v, dq = dk = 0).
 * Both backends follow these formulas; what they may differ in is the order
 * of each sum, exp2/log2's last bits, and one thing the flash kernels do by
 * design: the CUDA BF16 fast path takes m_i as a running maximum over blocks
 * of 64 keys, so it rounds p relative to that running maximum and rescales
 * its FP32 sums by exp2((m_old - m_new)·c2) when the maximum grows (the
 * online softmax). Either way p is rounded once to the dtype before its
 * product, so the two agree to about one BF16 rounding of p per term.
 *
 * The CUDA backend's BF16 calls run on cuDNN's fused flash attention when
 * it is installed and takes them (cuda/attention_cudnn.cu; F8_ATTN=own
 * forces f8's kernels). cuDNN computes the same quantities in natural-log
 * form on the scaled scores (softmax of c·s, Stats = c·m + ln l), with its
 * own block order and BF16 rounding of p and dS; its results differ from
 * the CPU's by a few BF16 roundings, as the fused kernels' do, and are
 * bitwise reproducible run to run (its deterministic backward, unless
 * F8_ATTN=cudnn-nondet). The saved L keeps the meaning above on every path:
 * L = Stats / c after a cuDNN forward, Stats = L·c before a cuDNN backward,
 * so a forward and a backward may take different paths. cuDNN's D (its
 * softmax_sum) is written to the same workspace D.
 *
 * Saved state (per f8_attention_saved, sized for max_batch, max_seq): L
 * (FP32 [B·nh, S]) and O, a copy of y ([B·S, C] dtype) that the forward
 * writes beside y, so the backward's D does not depend on the caller
 * keeping y. Together T·(nh·4 + C·es) bytes, O(T·C) where the old saved
 * probabilities were O(B·nh·S²). The forward's qkv is not copied: the
 * caller keeps it until backward (f8.h says so).
 *
 * Workspace (f8i_attn_workspace: measured at create for max_batch, max_seq
 * and reserved in ctx->scratch, placed per call; the op reads only the
 * pointers in its args): D (FP32 [B·nh, S], the backward's row sums:
 * written by its first CUDA kernel, read by its second) and two FP32 rows of
 * S (the CPU reference's row buffers). Every pointer in an args struct is
 * backend memory and lives as long as its object, so recorded args replay
 * exactly.
 */
#ifndef F8_ATTENTION_H
#define F8_ATTENTION_H

#include "core/f8i.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The config and ctx an attention was created with (the ONNX exporter reads them). */
const f8_attention_config *f8i_attention_config(const f8_attention *a);
f8_ctx *f8i_attention_ctx(const f8_attention *a);

/* One forward over B = batch sequences of S = seq tokens (B·S >= 1). */
typedef struct f8i_attn_fwd_args {
    int64_t batch, seq, n_head, head_dim;
    f8_dtype dtype;            /* FP32 or BF16: qkv, y, o */
    float scale;               /* c = 1/sqrtf(head_dim) */
    float scale_log2;          /* c2 = c·log2(e) */
    const void *qkv;           /* (B·S, 3C) */
    void *y;                   /* (B·S, C) */
    void *o;                   /* (B·S, C) saved copy of y, or NULL (inference: with lse) */
    float *lse;                /* (B·nh, S) saved L, or NULL */
    float *rows;               /* workspace (2, S) FP32 (CPU) */
} f8i_attn_fwd_args;

/* One backward of the forward that filled o and lse (same B, S, qkv). */
typedef struct f8i_attn_bwd_args {
    int64_t batch, seq, n_head, head_dim;
    f8_dtype dtype;            /* qkv, o, dy, dqkv */
    float scale, scale_log2;
    const void *qkv;           /* (B·S, 3C) the forward's input */
    const void *o;             /* (B·S, C) the forward's output (saved copy) */
    const float *lse;          /* (B·nh, S) the forward's L */
    const void *dy;            /* (B·S, C) */
    void *dqkv;                /* (B·S, 3C) overwritten; overlaps neither qkv nor dy */
    float *d;                  /* workspace (B·nh, S) FP32: D */
    float *rows;               /* workspace (2, S) FP32 (CPU) */
} f8i_attn_bwd_args;

/* Saved-state bytes for `tokens` = B·S: L, then O at the next 256 bytes. */
static inline size_t f8i_attn_lse_bytes(int64_t tokens, int64_t n_head)
{
    return f8i_align256((size_t)tokens * (size_t)n_head * sizeof(float));
}
static inline size_t f8i_attn_saved_bytes(int64_t tokens, int64_t n_head, int64_t head_dim, f8_dtype dtype)
{
    return f8i_attn_lse_bytes(tokens, n_head) + (size_t)tokens * (size_t)(n_head * head_dim) * f8_dtype_size(dtype);
}
/* The workspace of one call over `tokens` = B·S: D, then the two rows at the
 * next 256 bytes. Returns its bytes; with a base (256-byte aligned) also
 * places it: *d and *rows (either may be NULL) point into base. The one
 * layout both the create-time reservation (base NULL) and each call use. */
static inline size_t f8i_attn_workspace(void *base, int64_t tokens, int64_t seq, int64_t n_head, float **d,
                                        float **rows)
{
    const size_t d_bytes = f8i_align256((size_t)tokens * (size_t)n_head * sizeof(float));
    if (base != NULL && d != NULL) *d = (float *)base;
    if (base != NULL && rows != NULL) *rows = (float *)((unsigned char *)base + d_bytes);
    return d_bytes + f8i_align256(2u * (size_t)seq * sizeof(float));
}

#ifdef __cplusplus
}
#endif

#endif /* F8_ATTENTION_H */
