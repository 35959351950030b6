/*
 * gpt.h — a GPT-2-style decoder built from f8 modules (the trainer's model).
 *
 *   x0   = wte[tokens] + wpe[pos]                       (embedding; wte is the LM head's weight)
 *   per block l:
 *     qkv  = LayerNormLinear(x)            [T, 3C]       (FP8 when enabled)
 *     a    = causal attention(qkv)         [T, C]        (BF16 on the GPU, FP32 on the CPU)
 *     x'   = x + Linear(a)                               (FP8)
 *     x    = x' + LayerNormMLP(x')         gelu, 4C      (FP8)
 *   logits = LayerNormLinear(x)            [T, Vp]       (final norm + LM head, high precision, tied)
 *   loss   = cross-entropy(logits, targets) over the real vocab
 *
 * Everything lives in backend memory allocated at creation; a step
 * allocates nothing, so the whole step (all microbatches, the scale updates
 * and AdamW) can be captured as one graph.
 */
#ifndef F8_TRAIN_GPT_H
#define F8_TRAIN_GPT_H

#include "f8.h"

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
                             each with its own QKV, S and O slots; BF16 and delayed scaling only */
    int64_t positions;    /* rows of wpe, the positions the model has (an imported GPT-2's n_positions);
                             0 or <= seq: seq. A run uses and trains the first seq rows and carries
                             the rest unchanged through checkpoints and exports (gpt_positions) */
} gpt_config;

/* The rows of wpe: the most of seq and c->positions. */
static inline int64_t gpt_positions(const gpt_config *c) { return c->positions > c->seq ? c->positions : c->seq; }

/* The LM head and cross-entropy run over at most this many tokens at a time
 * by default: the BF16 logits of a 124M microbatch of 64 x 1024 tokens are
 * 6.6 GB whole, 0.8 GB per 8192-token chunk. */
#define GPT_HEAD_CHUNK 8192

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
    void *resid;              /* (2L+1, T, C) residual stream: block inputs and mid-block values */
    void *qkv;                /* (L, T, 3C) attention inputs (kept for its backward) */
    void *atty;               /* (L, T, C) attention outputs (the proj input) */
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
    int64_t param_layer;      /* during gpt_each_param: the visited parameter's block, or -1
                                 (embeddings, final norm, LM head) */
    int param_fp8;            /* during gpt_each_param: the visited parameter's FP8 weight index k
                                 (gpt_fp8_weight), or -1; its param view is then FP8 */
    /* Tensor parallelism (tp.h): this rank holds heads tp_rank·H/P .. of
     * every block's attention and the same share of the MLP; NULL, 0, 1
     * without it. */
    f8_comm *tp;
    int tp_rank, tp_size;
    int64_t Cl;               /* channels / tp_size: the local heads' width */
    int64_t Fl;               /* 4·channels / tp_size: the local MLP width */
    int skip_replicated;      /* gpt_each_param visits only the sharded parameters (tp.h) */
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
} gpt;

/* Create (parameters initialised from c.seed), with its activations. */
f8_status gpt_create(f8_ctx *ctx, const gpt_config *c, gpt *m, char *err, size_t err_size);
/* The same model as rank tp_rank of the tensor-parallel group tp (NULL: one
 * rank, as gpt_create): the full parameters are initialised as gpt_create
 * does and this rank keeps its shard (tp.h). sp: sequence parallel too
 * (needs a group of 2 or more and c->seq divisible by its size). */
f8_status gpt_create_tp(f8_ctx *ctx, const gpt_config *c, f8_comm *tp, int sp, gpt *m, char *err, size_t err_size);
void gpt_destroy(gpt *m);

/* Number of parameters (wte counted once). */
int64_t gpt_param_count(const gpt *m);

/* Forward of the first batch·S of m->tokens (batch <= c.batch) against
 * m->targets: losses (batch·S) are written; with train != 0 it keeps what
 * backward needs and the logits are replaced by dlogits · grad_scale.
 * microbatch as the modules. The LM head and cross-entropy run over
 * head_rows tokens at a time; when that takes more than one pass, a
 * training forward also runs each pass's head backward right away (its
 * logits are then gone) into the residual gradient, and gpt_backward
 * starts below the head. m->logits holds the last pass's logits (all of
 * them when one pass covers the call: the sampler's and tests' case). */
f8_status gpt_forward(gpt *m, int64_t batch, int train, float grad_scale, f8_microbatch mb);
/* Backward of the last training forward: all parameter gradients +=. */
f8_status gpt_backward(gpt *m);
/* Zero every gradient. */
f8_status gpt_zero_grad(gpt *m);

/* Call fn for every parameter with its gradient and whether it decays. */
typedef f8_status (*gpt_param_fn)(void *user, const f8_tensor *param, const f8_tensor *grad, int decay);
f8_status gpt_each_param(gpt *m, gpt_param_fn fn, void *user);

/* With c.fp8_weights: the FP8 primary weights, k = 4·layer + j for the
 * block's qkv, proj, fc1 and fc2 weights (gpt_each_param's order). count:
 * 0 without them. weight: its module and parameter. master_init: the FP32
 * values it was created from (host, rows·cols): the draw of the
 * high-precision model in c.dtype, proj and fc2 scaled as there, so the
 * trainer's masters start where a model without FP8 weights starts; the
 * module holds them quantized with the amax-based scale (gpt_create writes
 * them, updates the weight scales, and writes them again). */
int gpt_fp8_weight_count(const gpt *m);
void gpt_fp8_weight(const gpt *m, int k, f8_module **module, f8_param *which);
f8_status gpt_fp8_master_init(gpt *m, int k, float *host);

/* Checkpoint the model under "model." / restore it (with fp8_attention the
 * layers' attention slots too, as model.h.<l>.attn). */
f8_status gpt_checkpoint_add(gpt *m, f8_checkpoint *ck);
f8_status gpt_checkpoint_restore(gpt *m, const f8_checkpoint *ck);

/* Sample n token ids after the len ids in ctx_tok (room for c.seq), each
 * from softmax(logits / temperature) of the last position, sliding the
 * window when it is full (seed: the sampler's stream). */
f8_status gpt_sample(gpt *m, int32_t *ctx_tok, int64_t len, int64_t n, float temperature, uint64_t seed, int32_t *out);

/* FLOPs of one training token (forward + backward), for MFU. */
double gpt_flops_per_token(const gpt *m);

#endif /* F8_TRAIN_GPT_H */
