/*
 * embed_xent_adamw.h — the embedding, cross-entropy and AdamW ops (backend.h's op list:
 * F8I_OP_EMBEDDING_FWD/BWD, F8I_OP_CROSS_ENTROPY, F8I_OP_ADAMW_STEP):
 * token + position embedding, softmax cross-entropy and the AdamW step. Their
 * args structs, the AdamW device records and
 * the scalar formulas both backends run (F8I_HD: the same source for the host
 * and the device, so an update with the same inputs is the same bits).
 *
 * Args hold only pointers to backend memory and scalars: the graph recorder
 * copies the bytes of an args struct and replays them later. Validation
 * happens above (src/nn/embedding_xent.c, src/optim/adamw.c); ops may assume well-formed
 * arguments. Included from C and CUDA.
 */
#ifndef F8_NN_EMBED_XENT_ADAMW_H
#define F8_NN_EMBED_XENT_ADAMW_H

#include "core/numerics.h"
#include "core/f8i.h"
#include "optim/adamw_moments.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[t, :] = (float)wte[tokens[t], :] + (float)wpe[t mod S, :], stored in y_dtype
 * (one FP32 add, so both backends give the same bits). A token outside
 * [0, vocab) contributes 0.0f. Matrices are contiguous with `channels` columns.
 * tokens >= 1 (the op is not issued for 0 tokens). */
typedef struct f8i_embedding_fwd_args {
    const int32_t *tokens; /* (tokens) */
    int64_t n_tokens, seq_len, vocab, channels;
    const void *wte;       /* (vocab, channels) */
    f8_dtype wte_dtype;
    const void *wpe;       /* (>= seq_len, channels) */
    f8_dtype wpe_dtype;
    void *y;               /* (n_tokens, channels) */
    f8_dtype y_dtype;
} f8i_embedding_fwd_args;

/* dwte[v, :] = dwte[v, :] + Σ_{t: tokens[t] = v} dy[t, :]   (rows no token names
 *                                                            are not touched)
 * dwpe[s, :] = dwpe[s, :] + Σ_{t ≡ s mod S} dy[t, :]       (s < min(S, n_tokens); if dwpe)
 * Sums in FP32, in an order each backend fixes (the same on every run, no
 * order-dependent atomics), added to the FP32/BF16 gradient at the end (BF16:
 * one rounding, RNE). */
typedef struct f8i_embedding_bwd_args {
    const int32_t *tokens; /* (n_tokens) */
    int64_t n_tokens, seq_len, vocab, channels;
    const void *dy;        /* (n_tokens, channels) */
    f8_dtype dy_dtype;
    void *dwte;            /* (vocab, channels) */
    f8_dtype dwte_dtype;
    void *dwpe;            /* (>= seq_len, channels) or NULL */
    f8_dtype dwpe_dtype;
} f8i_embedding_bwd_args;

/* Per row r (target y = targets[r]; the row is ignored if y is outside [0, vocab)):
 *   m = max_{c < vocab} x_c, s = Σ_{c < vocab} expf(x_c - m)      (FP32 statistics)
 *   losses[r] = logf(s) - (x_y - m)                                  (0 if ignored)
 *   dlogits[r, c] = (expf(x_c - m) / s - [c = y]) · grad_scale       (c < vocab)
 *                 = 0                                                (c >= vocab, or ignored)
 * dlogits may be NULL, or be logits itself (same dtype; every element is read
 * before it is written). */
typedef struct f8i_cross_entropy_args {
    const void *logits;    /* (rows, cols) */
    f8_dtype logits_dtype;
    int64_t rows, cols, vocab;
    const int32_t *targets; /* (rows) */
    float grad_scale;
    float *losses;         /* (rows) */
    void *dlogits;         /* (rows, cols) or NULL */
    f8_dtype dlogits_dtype;
} f8i_cross_entropy_args;

/* ---- AdamW ------------------------------------------------------------ */

/* One registered parameter, as the step reads it (an array of these lives in
 * backend memory, built by f8_adamw_add). param and grad FP32 or BF16
 * (f8_dtype values); m and v in the step's moments form (FP32, BF16, or the
 * E4M3 codes of m and sqrt(v) with their blocks' scale_invs: adamw_moments.h). */
typedef struct f8i_adamw_tensor {
    void *param;           /* (n) */
    const void *grad;      /* (n) */
    void *m, *v;           /* (n) each; 256-byte aligned */
    float *m_scale_inv, *v_scale_inv; /* FP8: (F8I_ADAMW_FP8_BLOCKS(n)) each; else NULL */
    int64_t n;
    int64_t first;         /* index of element 0 in its parameter (a shard's slice; FP8 moments' rounding bits) */
    int32_t param_dtype, grad_dtype;
    float weight_decay;    /* the config's, or 0 for a tensor added without decay */
    int32_t pad_;
} f8i_adamw_tensor;

/* The optimizer's per-step values, in backend memory. The step reads `step`,
 * writes all of it: step += 1 and the values it used. */
typedef struct f8i_adamw_state {
    int64_t step;          /* steps done */
    float lr;              /* lr(step) of the last step */
    float grad_norm;       /* global gradient norm before clipping, last step */
    float clip;            /* clip factor c of the last step */
    float bc1, bc2;        /* 1 - β1^t, 1 - β2^t of the last step */
    float pad_;
} f8i_adamw_state;

/* Norm partial sums the CUDA step writes (a fixed layout: one FP32 per block
 * of the first kernel, summed in order by the second), allocated with the
 * optimizer; the CPU step does not use them. */
#define F8I_ADAMW_NORM_BLOCKS 512

/* One AdamW step over n_tensors tensors, with the formulas of f8.h:
 *   1. norm = sqrt(Σ g²) over every grad (FP32, a fixed order);
 *   2. with step = state->step, t = step + 1: lr = f8i_adamw_lr(args, step),
 *      c = grad_clip > 0 && norm > grad_clip ? grad_clip / norm : 1,
 *      bc1 = 1 - β1^t, bc2 = 1 - β2^t (f8i_adamw_bias_corrections);
 *      state = {t, lr, norm, c, bc1, bc2};
 *   3. every element through f8i_adamw_update, its moments loaded from and
 *      then stored into their form (adamw_moments.h; FP8: per block, the
 *      block's scale_invs rewritten with its codes).
 * n_tensors may be 0 (the step counter still advances).
 * A sharded optimizer (f8_adamw_set_comm) splits the step around an
 * all-reduce of Σ g²: mode NORM does only 1's sum and writes it (FP32) to
 * *sumsq (nothing else changes); mode UPDATE takes Σ g² from *sumsq instead
 * of computing it and does 2 and 3. mode WHOLE (0) is all of it. */
enum { F8I_ADAMW_WHOLE = 0, F8I_ADAMW_NORM = 1, F8I_ADAMW_UPDATE = 2 };

typedef struct f8i_adamw_step_args {
    const f8i_adamw_tensor *tensors; /* (n_tensors) backend memory */
    int32_t n_tensors;
    float *partials;       /* (F8I_ADAMW_NORM_BLOCKS) backend memory, CUDA scratch */
    f8i_adamw_state *state; /* (1) backend memory */
    float lr_max, lr_min;
    int64_t warmup_steps, total_steps;
    float beta1, beta2, eps, grad_clip;
    int32_t mode;          /* F8I_ADAMW_WHOLE, _NORM or _UPDATE */
    int32_t moments;       /* f8_adamw_moments: every tensor's m and v form */
    float *sumsq;          /* (1) backend memory: NORM writes it, UPDATE reads it */
} f8i_adamw_step_args;

#ifdef __cplusplus
}
#endif

/* lr of a step (0-based), in double, rounded once to float:
 *   step < warmup:     lr_max · (step + 1) / warmup
 *   total > warmup:    lr_min + (lr_max - lr_min) · (1 + cos(π p)) / 2, p = min(1, (step - warmup) / (total - warmup))
 *   otherwise:         lr_max */
F8I_HD float f8i_adamw_lr(float lr_max, float lr_min, int64_t warmup, int64_t total, int64_t step)
{
    if (step < warmup) return (float)((double)lr_max * (double)(step + 1) / (double)warmup);
    if (total <= warmup) return lr_max;
    double p = (double)(step - warmup) / (double)(total - warmup);
    if (p > 1.0) p = 1.0;
    const double pi = 3.14159265358979323846;
    return (float)((double)lr_min + ((double)lr_max - (double)lr_min) * (1.0 + cos(pi * p)) * 0.5);
}

/* 1 - β^t in double, rounded once to float (t >= 1). */
F8I_HD float f8i_adamw_bias_correction(float beta, int64_t t) { return (float)(1.0 - pow((double)beta, (double)t)); }

/* Clip factor from the norm: grad_clip / norm when clipping applies, else 1. */
F8I_HD float f8i_adamw_clip(float grad_clip, float norm)
{
    return (grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f;
}

/* One element's update, FP32, in this exact order (no FMA: the C files are
 * built with -ffp-contract=off, the .cu files with -fmad=false):
 *   g = c·grad; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·(g·g)
 *   p = p - lr · ((m / bc1) / (sqrtf(v / bc2) + eps) + wd · p)
 * one_m_b1 = 1 - β1 and one_m_b2 = 1 - β2 are FP32 values the caller computes
 * once (the same way on both backends). */
F8I_HD void f8i_adamw_update(float *p, float grad, float *m, float *v, float c, float lr, float b1, float one_m_b1,
                             float b2, float one_m_b2, float bc1, float bc2, float eps, float wd)
{
    const float g = c * grad;
    const float mm = b1 * *m + one_m_b1 * g;
    const float vv = b2 * *v + one_m_b2 * (g * g);
    *m = mm;
    *v = vv;
    const float step = (mm / bc1) / (sqrtf(vv / bc2) + eps) + wd * *p;
    *p = *p - lr * step;
}

#endif /* F8_NN_EMBED_XENT_ADAMW_H */
