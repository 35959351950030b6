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
#include "model.h"

/* Create (parameters initialised from c.seed), with its activations. A
 * config with c.llama is the Llama family (llama.h): every call below
 * takes it. */
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

/* The parameters: m->params (params.h), built by gpt_create in this order:
 *   model.head.weight (wte, tied), .layer_norm_weight, .layer_norm_bias; model.wpe;
 *   per block l, model.h.<l>.qkv  layer_norm_weight, layer_norm_bias, weight, bias
 *                model.h.<l>.proj weight, bias
 *                model.h.<l>.mlp  layer_norm_weight, layer_norm_bias, fc1_weight, fc1_bias,
 *                                 fc2_weight, fc2_bias
 * Weights decay; with TP the norms, embeddings and the row-parallel biases
 * (proj, fc2) are replicated, the rest sharded. */

/* With c.fp8_weights: the FP8 primary weights, k = 4·layer + j for the
 * block's qkv, proj, fc1 and fc2 weights (the table's order). count:
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
