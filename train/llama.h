/*
 * llama.h — the Llama family in the trainer (Llama 3's architecture), the
 * second model of the gpt struct (model.h: gpt_config.llama = 1):
 *
 *   x0   = wte[tokens]                                   (no position embedding)
 *   per block l:
 *     qkv  = RMSNorm-Linear(x), no bias   [T, (H + 2G)·hd]   (FP8 when enabled)
 *     q, k = RoPE(q, k)                   in place (f8_rope: theta, Llama 3 scaling)
 *     a    = causal GQA attention(qkv)    [T, C]             (G key/value heads)
 *     x'   = x + Linear(a), no bias                          (FP8)
 *     x    = x' + RMSNorm-MLP(x'), SwiGLU, F wide, no bias   (FP8)
 *   logits = RMSNorm-Linear(x)            [T, Vp]            (final norm + LM head; tied to wte, or untied)
 *
 * The gpt_* calls (gpt.h) dispatch here for such a config, so the trainer,
 * the optimizer, checkpoints, resume, sampling and data parallelism take it
 * through the same parameter table, and so does tensor parallelism (tp.h:
 * rank t of P keeps q heads t·H/P.. and key/value heads t·G/P.., F/P of
 * the SwiGLU width; H, G and F divide by P) with sequence parallelism as
 * the GPT's. FP8 primary weights (--fp8-weights: the four GEMM weights of
 * every block, FP8 weight k = 4l + j as the GPT's, fp8w.h) and FP8 attention
 * (--fp8-attention: each layer's own attention with FP8 slots, G key/value
 * heads, on the rotated q and k) as the GPT has them; FP8 primary weights
 * are refused with TP, as the GPT's are.
 *
 * The parameter table (the checkpoint's order, never to change):
 *   model.head.weight (the LM head; tied: also the embedding), .layer_norm_weight (the final RMSNorm);
 *   untied: model.wte (the embedding table);
 *   per block l, model.h.<l>.qkv  layer_norm_weight, weight
 *                model.h.<l>.proj weight
 *                model.h.<l>.mlp  layer_norm_weight, fc1_weight ([gate | up], 2F x C), fc2_weight
 * Weights and the embedding decay; the norms do not. With TP the qkv weight
 * is split by rows in its q | k | v blocks (H, G, G heads: unequal parts),
 * fc1 by rows in [gate | up], proj and fc2 by columns; the norms, the head
 * and the embedding are replicated.
 */
#ifndef F8_TRAIN_LLAMA_H
#define F8_TRAIN_LLAMA_H

#include "f8.h"
#include "model.h"

f8_status llama_create_tp(f8_ctx *ctx, const gpt_config *c, f8_comm *tp, int sp, gpt *m, char *err, size_t err_size);
f8_status llama_forward(gpt *m, int64_t batch, int train, float grad_scale, f8_microbatch mb);
f8_status llama_backward(gpt *m);
f8_status llama_zero_grad(gpt *m);
/* The seed block l's module j (1 qkv, 2 proj, 3 mlp) draws its weights
 * with: gpt_fp8_master_init draws an FP8 primary weight's master alike. */
uint64_t llama_module_seed(const gpt_config *c, int64_t l, int j);

/* Parameters of a config (the table's elements) and the bytes a one-rank run
 * needs at least: parameters and gradients in the dtype, AdamW's two FP32
 * moments, the FP8 weight copies, the activations the step keeps. */
double llama_param_estimate(const gpt_config *c);
double llama_bytes_estimate(const gpt_config *c);
/* -1 (err says why, with the estimate) when that exceeds 90% of the memory
 * of the GPU named device_name (H100 80 GB, H200 141 GB; other names: no
 * check) or, on the CPU (device_name NULL), limit bytes. The estimate is a
 * lower bound (no CUDA context, cuBLASLt workspace or allocator slack). */
int llama_check_memory(const gpt_config *c, const char *device_name, double limit, char *err, size_t n);

/* The family in a checkpoint's metadata: train.family = "llama" and
 * train.kv_heads, .ffn, .untied, .rope_theta, .rope_factor (add). read sets
 * c's llama fields from them (c->llama = 0 for a GPT's checkpoint, which
 * names no family); -1 with err for a malformed or unknown value. */
f8_status llama_metadata_add(const gpt_config *c, f8_checkpoint *ck);
int llama_metadata_read(const f8_checkpoint *ck, gpt_config *c, char *err, size_t n);

#endif /* F8_TRAIN_LLAMA_H */
