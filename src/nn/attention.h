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
 * it is installed and takes them (cuda/attention_cudnn.cu; the ctx config's
 * attention_path OWN forces f8's kernels). cuDNN computes the same quantities in natural-log
 * form on the scaled scores (softmax of c·s, Stats = c·m + ln l), with its
 * own block order and BF16 rounding of p and dS; its results differ from
 * the CPU's by a few BF16 roundings, as the fused kernels' do, and are
 * bitwise reproducible run to run (its deterministic backward, unless
 * the ctx config's attention_nondeterministic). The saved L keeps the meaning above on every path:
 * L = Stats / c after a cuDNN forward, Stats = L·c before a cuDNN backward,
 * so a forward and a backward may take different paths. cuDNN's D (its
 * softmax_sum) is written to the same workspace D.
 *
 * GQA (n_kv_head = G < n_head): qkv rows are [q (nh heads) | k (G) | v (G)],
 * (nh + 2G)·hd wide; query head h reads key/value head h / (nh / G), and
 * dk, dv of head g are Σ over its nh / G query heads of the formulas above,
 * one FP32 sum per element (heads in order, then queries), rounded once.
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
 *
 * FP8 (f8_attention_config.fp8; TE's fp8_dpa with its F16 backward,
 * NVTE_FP8_DPA_BWD=0). attention.c casts qkv (BF16) to E4M3 codes with the
 * QKV slot's scale (the cast op: codes, the slot's amax, and the codes' own
 * scale_inv dq, saved with them), then the forward op runs the chain of
 * cuDNN's FP8 SDPA graph (cudnn-frontend's SDPA FP8 node), per row i, keys
 * j <= i, with q8, k8, v8 the codes' values and dq their scale_inv:
 *   s[i, j] = FP32(Σ_d q8·k8)·dq·dk                   (raw-score units, as above)
 *   m, p, l, L as above (p unnormalized, FP32)
 *   P[i, j] = p / l                                    (normalized: the graph's softmax output)
 *   amax_s  = max P                                    (1 for any causal call: row 0 is P = 1)
 *   P8      = e4m3(P · scale_s)                        (satfinite RNE)
 *   O[i, :] = FP32(Σ_j P8·v8)·descale_s·dv             (descale_s = the S slot's scale_inv)
 *   amax_o  = max |O|                                  (before scale_o, as the frontend's matmul_fp8)
 *   O8      = e4m3(O · scale_o);  y = o = dt(O8 · descale_o)
 * amax_s and amax_o are maxed into the S and O slots' accumulators. Under
 * current scaling the cast's scale comes from its amax pass, scale_s is
 * s_scale_now (the amax-1 scale: P's amax is 1 in any causal call), which
 * the op writes into the S slot before use, and scale_o is the QKV slot's
 * scale with descale_o = dq (|O| <= max|v| <= amax(qkv): P's rows are
 * convex weights), so O8 needs no history either; amax_o still goes to
 * the O slot. cuDNN's kernels take P in their own blocked, online order
 * (and may round the unnormalized p), so a P code may land one E4M3 step
 * away and y a step or two of O8; f8's fallback kernel and the CPU follow
 * the formulas above. The
 * backward is the BF16 one on the dequantized inputs the forward used:
 * attention.c converts the saved codes to qkv_hp = dt(q8·dq) (workspace)
 * and runs the op above with the saved o and L. FP8 workspace, after the
 * rows: qkv_hp (BF16 [B·S, 3C]: the backward's input; the forward's codes
 * when there is no saved state) and dq_infer (an inference forward's dq:
 * no saved state holds it).
 *
 * The FP8 backward (f8_attention_config.fp8_backward; TE's
 * NVTE_FP8_DPA_BWD=1, the graph of cudnn-frontend's SDPA FP8 backward).
 * attention.c casts dy to dO8 in the gradient format gd (E5M2 under
 * HYBRID) with the dO slot's scale (descale ddo); the forward kept, under
 * delayed scaling, O8 and its descale dso (under current scaling D takes
 * the BF16 o, the dequantized O8, with dso = 1: TE's O in F16). With q8,
 * k8, v8, dO8, O8 the codes' values, dq their descale, ss/ds the S slot's
 * scale and scale_inv, sdp/dsdp the dP slot's, per row i and key j <= i:
 *   D_i      = FP32(Σ_d dO8·O8)·ddo·dso
 *   s        = FP32(Σ_d q8·k8)·dq·dq;  P = exp2((s - L_i)·c2)
 *   P8       = e4m3(P·ss)
 *   dP       = FP32(Σ_d dO8·v8)·ddo·dq
 *   dS       = P·(dP - D_i)·c       (FP32, in this order);  amax_dp = max |dS|
 *   dS8      = gd(dS·sdp)
 *   dq[i, :] = FP32(Σ_j dS8·k8)·dsdp·dq,  dk[j, :] = FP32(Σ_i dS8·q8)·dsdp·dq,
 *   dv[j, :] = FP32(Σ_i P8·dO8)·ds·ddo    (GQA: dk, dv also summed over the group's heads, one sum)
 *   amax_dqkv = max |dq|, |dk|, |dv|;  dqkv = dt(gd(x·sq)·dsq) with the dQKV
 *   slot's sq, dsq (delayed), dt(x) (current: TE's dQKV in F16)
 * amax_dp and amax_dqkv are maxed into the dP and dQKV slots. The CPU
 * computes exactly this; cuDNN's graph the same in its own block order;
 * f8's CUDA fallback (where cuDNN declines: head_dim not 128, GQA, cuDNN
 * older than 9.19) is the BF16 backward on the dequantized codes, o and dy,
 * whose numerics differ (no dO8, P8, dS8 roundings) and which records no
 * dP or dQKV amax.
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
/* A rope's config, ctx and table (cos (max_seq, hd/2), then sin; backend memory), for the exporter. */
const f8_rope_config *f8i_rope_config(const f8_rope *r);
f8_ctx *f8i_rope_ctx(const f8_rope *r);
const float *f8i_rope_table(const f8_rope *r);

/* Where a saved state's parts are (tests read the saved L, o and codes). */
struct f8i_attn_saved_at;
void f8i_attention_saved_parts(const f8_attention_saved *s, struct f8i_attn_saved_at *at);

/* One forward over B = batch sequences of S = seq tokens (B·S >= 1). */
typedef struct f8i_attn_fwd_args {
    int64_t batch, seq, n_head, head_dim;
    int64_t n_kv_head;         /* G: divides n_head (G = n_head: multi-head); qkv rows (nh + 2G)·hd wide */
    f8_dtype dtype;            /* FP32 or BF16: qkv, y, o */
    float scale;               /* c = 1/sqrtf(head_dim) */
    float scale_log2;          /* c2 = c·log2(e) */
    const void *qkv;           /* (B·S, 3C); GQA (B·S, (nh + 2G)·hd) */
    void *y;                   /* (B·S, C) */
    void *o;                   /* (B·S, C) saved copy of y, or NULL (inference: with lse) */
    float *lse;                /* (B·nh, S) saved L, or NULL */
    float *rows;               /* workspace (2, S) FP32 (CPU) */
    /* FP8 (the chain in the note; dtype is then BF16, qkv E4M3 codes): */
    int fp8;
    const float *qkv_scale_inv; /* (1) dq = dk = dv: the codes' own scale_inv */
    float *s_scale, *s_scale_inv; /* (1) each: the S slot's */
    float s_scale_now;         /* > 0 (current scaling): S's scale this call; the op first writes it and 1/it
                                  (FP32 division) into *s_scale, *s_scale_inv; 0: they are read */
    const float *o_scale, *o_scale_inv; /* (1) each: the O slot's (current scaling: the QKV slot's scale, dq) */
    float *s_amax, *o_amax;    /* (1) each: the slots' accumulators, maxed into */
    uint8_t *o8;               /* (B·S, C) the O8 codes kept for an FP8 backward (delayed scaling), or NULL */
    float *o8_scale_inv;       /* (1) with o8: *o_scale_inv copied (their descale, as the slot moves on) */
} f8i_attn_fwd_args;

/* One backward of the forward that filled o and lse (same B, S, qkv). */
typedef struct f8i_attn_bwd_args {
    int64_t batch, seq, n_head, head_dim;
    int64_t n_kv_head;         /* G as the forward's; dk, dv sum their n_head / G query heads */
    f8_dtype dtype;            /* qkv, o, dy, dqkv */
    float scale, scale_log2;
    const void *qkv;           /* (B·S, 3C) the forward's input */
    const void *o;             /* (B·S, C) the forward's output (saved copy) */
    const float *lse;          /* (B·nh, S) the forward's L */
    const void *dy;            /* (B·S, C) */
    void *dqkv;                /* (B·S, 3C) overwritten; overlaps neither qkv nor dy */
    float *d;                  /* workspace (B·nh, S) FP32: D */
    float *rows;               /* workspace (2, S) FP32 (CPU) */
    /* The FP8 backward (f8_attention_config.fp8_backward; the note's FP8
     * backward chain): qkv is then the saved E4M3 codes, o and dy stay
     * (BF16: the fallback's inputs), dqkv is BF16. */
    int fp8;
    f8_dtype grad_dtype;       /* dO8's and dS8's (and dQKV8's): E5M2 under HYBRID, else E4M3 */
    const float *qkv_scale_inv; /* (1) the codes' */
    const uint8_t *o8;         /* (B·S, C) the forward's O8 (delayed scaling), or NULL: D takes the BF16 o */
    const float *o8_scale_inv; /* (1) with o8: its descale */
    const uint8_t *do8;        /* (B·S, C) dy's codes */
    const float *do_scale_inv; /* (1) theirs */
    const float *s_scale, *s_scale_inv;   /* (1) each: the S slot's */
    const float *dp_scale, *dp_scale_inv; /* (1) each: the dP slot's */
    const float *dqkv_scale, *dqkv_scale_inv; /* (1) each: the dQKV slot's; NULL (current scaling): not quantized */
    float *dp_amax, *dqkv_amax; /* (1) each: the slots' accumulators, maxed into */
    void *qkv_hp;              /* workspace (B·S, 3C) BF16: the codes dequantized (CUDA's fallback) */
} f8i_attn_bwd_args;

/* RoPE (f8_rope_forward / backward; nn/rope.c), in place on the q and k
 * heads of qkv rows. Per row t (position p = t mod seq), per head of q
 * (nh) and k (G), per pair (x1, x2) = (x[d], x[d + hd/2]), d < hd/2, with
 * c = table[p·hd/2 + d], s = table[table_rows·hd/2 + p·hd/2 + d] (FP32):
 *   forward   x1' = x1·c - x2·s,  x2' = x2·c + x1·s
 *   inverse   x1' = x1·c + x2·s,  x2' = x2·c - x1·s   (the transpose: the backward)
 * each an FP32 product, product, sum in that order (no fused multiply-add),
 * rounded once to the dtype: the backends agree bit for bit. v is untouched. */
typedef struct f8i_rope_args {
    void *qkv;                /* (rows, (nh + 2G)·hd) FP32 or BF16, in place */
    f8_dtype dtype;
    int64_t rows, seq, n_head, n_kv_head, head_dim;
    const float *table;       /* cos (table_rows, hd/2), then sin (table_rows, hd/2) */
    int64_t table_rows;       /* max_seq */
    int32_t inverse;          /* 1: the backward */
} f8i_rope_args;

/* The saved state of one f8_attention_saved for `tokens` = B·S, in this
 * order, each at 256 bytes: L (FP32 [B·nh, S]); o (dtype [B·S, C]) unless
 * kept; FP8 only: dq (1 FP32) and the codes qkv8 ([B·S, 3C] bytes: GQA's
 * (nh + 2G)·hd-wide rows use the first of them); with o8 (an FP8 backward
 * under delayed scaling): O8's descale (1 FP32) and O8 ([B·S, C] bytes).
 * Returns its bytes; with a base (256-byte aligned) also places it (any
 * output may be NULL). The one layout create (base NULL) and saved_create
 * use. */
typedef struct f8i_attn_saved_at {
    float *lse;
    void *o;
    float *qkv_scale_inv;
    uint8_t *qkv8;
    float *o8_scale_inv;
    uint8_t *o8;
} f8i_attn_saved_at;
static inline size_t f8i_attn_saved_layout(void *base, int64_t tokens, int64_t n_head, int64_t head_dim, f8_dtype dtype,
                                           int kept, int fp8, int o8, f8i_attn_saved_at *at)
{
    const size_t T = (size_t)tokens, C = (size_t)(n_head * head_dim);
    f8i_layout l = f8i_layout_at(base);
    const size_t lse_b = T * (size_t)n_head * sizeof(float), o_b = kept ? 0 : T * C * f8_dtype_size(dtype);
    void *lse = f8i_take(&l, lse_b);
    void *o = kept ? NULL : f8i_take(&l, o_b);
    void *sinv = fp8 ? f8i_take(&l, sizeof(float)) : NULL;
    void *qkv8 = fp8 ? f8i_take(&l, T * 3 * C) : NULL;
    void *o8_sinv = o8 ? f8i_take(&l, sizeof(float)) : NULL;
    void *o8_codes = o8 ? f8i_take(&l, T * C) : NULL;
    if (base != NULL && at != NULL) {
        at->lse = (float *)lse, at->o = o, at->qkv_scale_inv = (float *)sinv, at->qkv8 = (uint8_t *)qkv8;
        at->o8_scale_inv = (float *)o8_sinv, at->o8 = (uint8_t *)o8_codes;
    }
    /* the allocation asks for the last part unrounded (the memory report counts requests) */
    const size_t last = o8 ? T * C : fp8 ? T * 3 * C : kept ? lse_b : o_b;
    return l.bytes - f8i_align256(last ? last : 1) + last;
}

/* The workspace of one call over `tokens` = B·S (C = n_head · head_dim). */
typedef struct f8i_attn_ws {
    float *d;          /* (B·nh, S) FP32: D */
    float *rows;       /* (2, S) FP32 (CPU) */
    void *qkv_hp;      /* FP8 only: (B·S, 3C) BF16 (GQA: its first (nh + 2G)·hd columns' worth); an inference forward's codes */
    float *dq_infer;   /* FP8 only: (1) FP32, an inference forward's dq */
    uint8_t *do8;      /* FP8 backward only: (B·S, C) dy's codes */
    float *do_scale_inv; /* FP8 backward only: (1) theirs */
} f8i_attn_ws;

/* Measures (base NULL) or places (base 256-byte aligned; w may then be
 * filled) that workspace, in the order of the struct, each at 256 bytes;
 * returns its bytes. The one layout both the create-time reservation and
 * each call use. */
static inline size_t f8i_attn_workspace(void *base, int64_t tokens, int64_t seq, int64_t n_head, int64_t head_dim, int fp8,
                                        int fp8_bwd, f8i_attn_ws *w)
{
    const size_t T = (size_t)tokens, C = (size_t)(n_head * head_dim);
    f8i_layout l = f8i_layout_at(base);
    void *d = f8i_take(&l, T * (size_t)n_head * sizeof(float));
    void *rows = f8i_take(&l, 2u * (size_t)seq * sizeof(float));
    void *hp = fp8 ? f8i_take(&l, T * 3 * C * 2) : NULL;
    void *dq = fp8 ? f8i_take(&l, sizeof(float)) : NULL;
    void *do8 = fp8_bwd ? f8i_take(&l, T * C) : NULL;
    void *dos = fp8_bwd ? f8i_take(&l, sizeof(float)) : NULL;
    if (base != NULL && w != NULL) {
        w->d = (float *)d, w->rows = (float *)rows, w->qkv_hp = hp, w->dq_infer = (float *)dq;
        w->do8 = (uint8_t *)do8, w->do_scale_inv = (float *)dos;
    }
    return l.bytes;
}

#ifdef __cplusplus
}
#endif

#endif /* F8_ATTENTION_H */
