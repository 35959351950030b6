/*
 * model.h — the state of the trainer's GPT (gpt_config, gpt_block, gpt):
 * what gpt.c (the forward and backward, the parameter table's builder)
 * and tp.c (the tensor-parallel layout) both read, so neither includes the
 * other's header. The model's architecture and calls: gpt.h.
 */
#ifndef F8_TRAIN_MODEL_H
#define F8_TRAIN_MODEL_H

#include "f8.h"
#include "params.h"

typedef struct gpt_config {
    int64_t vocab;        /* real vocabulary (256 bytes, or 50257 GPT-2) */
    int64_t padded_vocab; /* logits width, a multiple of 128 */
    int64_t seq;          /* S: tokens per sequence */
    int64_t layers, heads, channels;
    int64_t batch;        /* B: sequences per microbatch */
    int fp8;              /* FP8 GEMMs in the blocks */
    f8_dtype dtype;       /* parameters and activations: FP32 (CPU) or BF16 (GPU) */
    uint64_t seed;
    int fp8_head;         /* FP8 GEMMs in the LM head too (with fp8 only; last, so older initializers leave it 0) */
    int fp8_weights;      /* the blocks' four weights FP8 primary (fp8w.h; with fp8, no TP) */
    int64_t head_chunk;   /* tokens per LM-head pass (logits buffer rows; at least seq); 0: GPT_HEAD_CHUNK */
    int recompute_norm;   /* qkv's and the MLP's norm output made again in backward, not saved
                             (recompute_norm_output, f8.h); not with sequence parallel or block scaling */
    int fp8_attention;    /* FP8 attention forward (f8_attention_config.fp8): one attention per layer,
                             each with its own QKV, S and O slots; BF16, delayed or current scaling */
    int64_t positions;    /* rows of wpe, the positions the model has (an imported GPT-2's n_positions);
                             0 or <= seq: seq. A run uses and trains the first seq rows and carries
                             the rest unchanged through checkpoints and exports (gpt_positions) */
    /* The Llama family (llama.h; appended, so older initializers leave it 0: GPT-2) */
    int llama;            /* 1: RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases, no wpe */
    int64_t kv_heads;     /* llama: key/value heads (divides heads); 0: heads */
    int64_t ffn;          /* llama: the SwiGLU width F (fc1 is [2F, C]) */
    int untied;           /* llama: an LM head of its own, not the embedding table */
    double rope_theta;    /* llama: RoPE's theta (0: 500000) */
    double rope_factor;   /* llama: Llama 3's "llama3" scaling factor (low 1, high 4, original 8192); 0: none */
    int recompute_blocks; /* N in [0, layers]: the first N blocks keep only their input and run their
                             forward again in the backward (recompute.h); not with tensor or sequence
                             parallelism */
    int grad_fp32;        /* with BF16 parameters: FP32 gradients (--grad-dtype fp32): main grads of every
                             module parameter (params.h, param_main_grads_create; the biases' and norms'
                             folded in per microbatch) and the embeddings'. 0: every gradient in dtype */
    int fp8_attention_backward; /* with fp8_attention: the layers' attention backward in FP8 too
                             (f8_attention_config.fp8_backward) */
    int recompute_act;    /* the MLP's activation output made again in backward from h1, not saved
                             (recompute_activation, f8.h); not with block or row-wise scaling */
    int recompute_proj;   /* the projection's FP8 input cast again in backward from the kept attention
                             output, not saved (recompute_input_cast, f8.h); not with block scaling */
    int wt_per_call;      /* N in [0, layers]: the first N blocks keep no cached FP8 weight transposes,
                             each backward makes its own (weight_transpose_per_call, f8.h); the LM head
                             too when N = layers; not with block or row-wise scaling */
} gpt_config;

/* Whether the LM head makes its FP8 weight transpose per call: with every
 * block's (--weight-transpose-per-call on, or N = layers). */
static inline int gpt_head_wt_per_call(const gpt_config *c) { return c->wt_per_call > 0 && c->wt_per_call >= c->layers; }

/* The rows of wpe: the most of seq and c->positions. */
static inline int64_t gpt_positions(const gpt_config *c) { return c->positions > c->seq ? c->positions : c->seq; }

/* The dtype of the embeddings' gradients (wpe's, an untied wte's): FP32
 * with grad_fp32, else the parameters'. */
static inline f8_dtype gpt_grad_dtype(const gpt_config *c) { return c->grad_fp32 ? F8_DTYPE_FP32 : c->dtype; }

/* The LM head and cross-entropy run over at most this many tokens at a time
 * by default: the BF16 logits of a 124M microbatch of 64 x 1024 tokens are
 * 6.6 GB whole, 0.8 GB per 8192-token chunk. */
#define GPT_HEAD_CHUNK 8192

/* Rows of one LM-head pass (the logits buffer's) with passes of `chunk`
 * tokens (0: c->head_chunk, else GPT_HEAD_CHUNK): at least one sequence, as
 * the sampler reads a batch-1 forward's logits whole, and at most the
 * microbatch. */
static inline int64_t gpt_head_rows(const gpt_config *c, int64_t chunk)
{
    const int64_t T = c->batch * c->seq, pass = chunk > 0 ? chunk : c->head_chunk > 0 ? c->head_chunk : GPT_HEAD_CHUNK;
    return pass < T ? (pass > c->seq ? pass : c->seq) : T;
}

typedef struct gpt_block {
    f8_module *qkv;
    f8_module *proj;
    f8_module *mlp;
    f8_saved *qkv_s;
    f8_attention *att;        /* this layer's attention: the shared m->att, or its own with fp8_attention */
    f8_attention_saved *att_s;
    f8_saved *proj_s;
    f8_saved *mlp_s;
} gpt_block;

typedef struct gpt {
    f8_ctx *ctx;
    gpt_config c;
    int64_t T;                /* B·S rows per microbatch (the most) */
    int64_t T_call;           /* rows of the last forward (batch·S) */
    gpt_block *blocks;        /* (layers) */
    f8_attention *att;
    f8_attention_config att_cfg; /* the config of the layers' own attentions (fp8_attention: att's with fp8 = 1) */
    f8_module *head; /* final LayerNorm + LM head; its weight [Vp, C] is wte */
    f8_saved *head_s;
    void *wpe, *dwpe;         /* (P, C) position embedding (P = gpt_positions) and (S, C) its gradient */
    void *resid;              /* (2L+1, T, C) residual stream: block inputs and mid-block values
                                 (recompute: (L+2, T, C), recompute.h) */
    void *qkv;                /* (L, T, 3C) attention inputs (kept for its backward; recompute: 1 layer) */
    void *atty;               /* (L, T, C) attention outputs (the proj input; recompute: 1 layer) */
    void *logits;             /* (head_rows, Vp): one chunk's logits, overwritten by its dlogits */
    int64_t head_rows;        /* tokens per LM-head pass: min(T, the config's head_chunk) */
    int head_done;            /* the last training forward ran the head's backward (chunked) */
    void *dres;               /* (T, C) the residual-stream gradient */
    void *dtmp;               /* (T, C) branch input gradient */
    void *dqkv;               /* (T, 3C) */
    void *io;                 /* owned: tokens, targets (int32) and losses (FP32), (T) each */
    int32_t *tokens, *targets; /* (T) backend, what gpt_forward reads: its own buffers in io, or
                                  the caller may point them at its own (a staging buffer) */
    float *losses;            /* (T) backend, where gpt_forward writes (same rule) */
    /* When set, gpt_backward calls grads_ready(grads_user, l) after block l's
     * backward and (l = -1) after the embedding's: that part's gradients are
     * then complete for this backward (data parallel: reduce its bucket). */
    f8_status (*grads_ready)(void *user, int64_t layer);
    void *grads_user;
    param_table params;       /* every parameter, in the checkpoint's order (gpt_create builds it) */
    /* Tensor parallelism (tp.h): this rank holds heads tp_rank·H/P .. of
     * every block's attention and the same share of the MLP; NULL, 0, 1
     * without it. */
    f8_comm *tp;
    int tp_rank, tp_size;
    int64_t Cl;               /* channels / tp_size: the local heads' width */
    int64_t Fl;               /* 4·channels / tp_size: the local MLP width */
    float *tp_buf;            /* (T, C) FP32 staging of a BF16 all-reduce (tp.c); with sp
                                 (T + T/P, C): the reduce-scatter's source and destination */
    /* Sequence parallelism (tp.h, with TP only): the residual stream, the
     * LayerNorms and the dropout-free adds hold this rank's T/P tokens; 0, T
     * and NULL without it. */
    int sp;
    int64_t Tr;               /* rows of a residual slot: T, or T / tp_size with sp */
    void *full;               /* sp: (T, C) the embedding, then each row-parallel output before its
                                 reduce-scatter */
    void *xf;                 /* sp: (T, C) the last residual gathered: the head's input, kept for its
                                 backward */
    /* Llama (llama.c): the rotary embedding of every layer's q and k, and with
     * an untied head the embedding table and its gradient (else NULL: the
     * head's weight is the table). wpe is then a zero (S, C), not a parameter. */
    f8_rope *rope;
    void *wte, *dwte;         /* untied: (Vp, C) each */
    /* Block recompute (recompute.h): the last training forward's batch and
     * microbatch, and the block whose forward the shared saved state holds. */
    int64_t rc_batch, rc_last;
    f8_microbatch rc_mb;
    /* grad_fp32: the FP32 main grads of the GEMM weights, one allocation of main_grad_bytes (else NULL, 0) */
    void *main_grads;
    size_t main_grad_bytes;
} gpt;

/* Zero the main grads (grad_fp32; nothing without): the zero_grad of either
 * family, so that a forward run without F8_MICROBATCH_FIRST accumulates
 * from zero as the modules' own gradients do. */
static inline f8_status gpt_zero_main_grads(gpt *m)
{
    if (!m->main_grads) return F8_OK;
    f8_tensor all = f8_tensor_make(m->main_grads, F8_DTYPE_FP32, 1, (int64_t)(m->main_grad_bytes / 4));
    return f8_tensor_zero(m->ctx, &all);
}

#endif /* F8_TRAIN_MODEL_H */
