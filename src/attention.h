/*
 * attention.h — the attention family of training ops: kinds
 * F8I_TRAIN_ATTENTION_FIRST + k of f8i_backend.train_op, their args, and the
 * scratch layout attention.c carves for them. Included from C and CUDA.
 *
 * Design note. Per (sequence b, head h) with S tokens, head dim hd, scale
 * c = 1/sqrtf(hd) (FP32, computed once on the host), the ops compute
 *   forward   s[i, j]  = Σ_d q[i, d]·k[j, d]                (FP32)
 *             P[i, j]  = j <= i ? exp(c·s[i, j] - m_i) / l_i : 0   (stored in dtype)
 *                        m_i = max_{j<=i} c·s[i, j], l_i = Σ_{j<=i} exp(c·s[i, j] - m_i)
 *             y[i, d]  = Σ_j P[i, j]·v[j, d]                (dtype)
 *   backward  dP[i, j] = Σ_d dy[i, d]·v[j, d]               (FP32)
 *             dv[j, d] = Σ_i P[i, j]·dy[i, d]
 *             dS[i, j] = j <= i ? P[i, j]·(dP[i, j] - Σ_{j'} P[i, j']·dP[i, j'])·c : 0   (stored in dtype)
 *             dq[i, d] = Σ_j dS[i, j]·k[j, d],  dk[j, d] = Σ_i dS[i, j]·q[i, d]
 * with c·s, expf, the sum l and P = e·(1/l) in FP32. Every stored
 * intermediate (P, dS) is rounded to the dtype, so the CPU reference and
 * the CUDA GEMMs multiply the same values; they differ by summation order
 * and expf's last bits only. q, k, v are read from qkv
 * [B·S, 3C] (head h at columns h·hd of each third); the backward reads the
 * forward's qkv again (the caller keeps it unchanged) and its saved P.
 *
 * Every pointer in a forward/backward args struct is backend memory, except
 * `state`, a host pointer owned by the f8_attention object (the CUDA backend's
 * cuBLASLt handle and plan cache; NULL on the CPU), which lives as long as
 * the object: replaying recorded args is therefore exact. STATE_CREATE and
 * STATE_DESTROY are object set-up/tear-down, not work: they issue nothing and
 * count no launch. Create is refused while capturing a graph; a destroy
 * during a capture spoils it (attention.c), so neither is ever replayed.
 */
#ifndef F8_ATTENTION_H
#define F8_ATTENTION_H

#include "train_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    F8I_ATTN_STATE_CREATE = F8I_TRAIN_ATTENTION_FIRST + 0,  /* f8i_attn_state_args */
    F8I_ATTN_STATE_DESTROY = F8I_TRAIN_ATTENTION_FIRST + 1, /* f8i_attn_state_args */
    F8I_ATTN_FORWARD = F8I_TRAIN_ATTENTION_FIRST + 2,       /* f8i_attn_fwd_args */
    F8I_ATTN_BACKWARD = F8I_TRAIN_ATTENTION_FIRST + 3       /* f8i_attn_bwd_args */
};

/* CREATE: *state = the backend's per-object state (or NULL); DESTROY: frees
 * *state and sets it to NULL (NULL is a no-op). */
typedef struct f8i_attn_state_args {
    void **state;
} f8i_attn_state_args;

/* The cuBLASLt workspace at the start of the scratch (CUDA; the CPU ignores it). */
#define F8I_ATTN_WORKSPACE_BYTES ((size_t)32 << 20)

/* One forward over B = batch sequences of S = seq tokens (B·S >= 1). */
typedef struct f8i_attn_fwd_args {
    void *state;               /* host: the backend's per-object state (see above) */
    int64_t batch, seq, n_head, head_dim;
    f8_dtype dtype;            /* FP32 or BF16: qkv, y, P */
    float scale;               /* 1/sqrtf(head_dim) */
    const void *qkv;           /* (B·S, 3C) */
    void *y;                   /* (B·S, C) */
    void *p;                   /* (B·nh, S, S) saved probabilities, or NULL (inference) */
    void *heads;               /* scratch (4, B·nh, S, hd) dtype: q, k, v, o head-major */
    float *s;                  /* scratch (B·nh, S, S) FP32 scores */
    void *workspace;           /* scratch (workspace_bytes) for cuBLASLt */
    size_t workspace_bytes;
} f8i_attn_fwd_args;

/* One backward of the forward that filled p (same B, S, qkv). */
typedef struct f8i_attn_bwd_args {
    void *state;
    int64_t batch, seq, n_head, head_dim;
    f8_dtype dtype;            /* qkv, p, dy, dqkv */
    float scale;
    const void *qkv;           /* (B·S, 3C) the forward's input */
    const void *p;             /* (B·nh, S, S) the forward's probabilities */
    const void *dy;            /* (B·S, C) */
    void *dqkv;                /* (B·S, 3C) overwritten; overlaps neither qkv nor dy */
    void *heads;               /* scratch (7, B·nh, S, hd) dtype: q, k, v, dO, dq, dk, dv */
    float *s;                  /* scratch (B·nh, S, S) FP32: dP, then dS in place */
    void *workspace;
    size_t workspace_bytes;
} f8i_attn_bwd_args;

/* Scratch bytes of one call over `tokens` = B·S tokens of S: the workspace,
 * 7 head-major [B·nh, S, hd] buffers (the backward's; the forward uses 4) and
 * the FP32 scores [B·nh, S, S], each part 256-byte aligned. */
static inline size_t f8i_attn_heads_bytes(int64_t tokens, int64_t n_head, int64_t head_dim, f8_dtype dtype)
{
    return f8i_align256(7u * (size_t)tokens * (size_t)n_head * (size_t)head_dim * f8_dtype_size(dtype));
}
static inline size_t f8i_attn_scores_bytes(int64_t tokens, int64_t seq, int64_t n_head)
{
    return f8i_align256((size_t)tokens * (size_t)n_head * (size_t)seq * sizeof(float));
}

#ifdef __cplusplus
}
#endif

#endif /* F8_ATTENTION_H */
