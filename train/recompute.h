/*
 * recompute.h — per-block activation recompute (f8_train --recompute-blocks
 * N): what the model families (gpt.c, llama.c) call to keep the activations
 * of fewer blocks.
 *
 * With N = c.recompute_blocks > 0 a training forward keeps, of each of the
 * first N blocks, only its input (the residual stream at the block's
 * entry); their modules' saved state, middle residual, qkv and attention
 * output are one set shared by those N blocks (layer 0's saved object per
 * kind, handed from layer to layer with f8_module_saved_rebind). Blocks N
 * to L-1 keep all theirs, as without recompute. The backward runs each of
 * the first N blocks' forward again into the shared set before the block's
 * backward, but for block N-1, whose state is still there from the forward.
 * So N blocks cost the activations of one, N-1 forwards run twice, and
 * N = L (on) is the least memory; N = 1 is N = 0's memory and work.
 *
 * The recomputed forward is the same call on the same input with the same
 * microbatch: the FP8 casts use the scales of the forward (delayed: the
 * slot's scale, which only the step's update moves; current and block: the
 * amax of the same values), so every code, scale_inv, activation and
 * gradient is bitwise that of a run without recompute; the casts max the
 * same amaxes into the step's history row again, which leaves it as it was.
 *
 * With N = 0 every call here is the layout the families had before:
 * per-layer saved objects, 2L+1 residual slots, L qkv and attention outputs.
 */
#ifndef F8_TRAIN_RECOMPUTE_H
#define F8_TRAIN_RECOMPUTE_H

#include "model.h"

/* Blocks 0..N-1 share one set of activations (N = c.recompute_blocks, 0..L). */
static inline int rc_shared(const gpt *m, int64_t l) { return l < m->c.recompute_blocks; }
/* Residual-stream slots: the first N blocks' boundaries 0..N, then a kept
 * block's middle and output each, then (N > 0) the shared middle: 2L-N+1
 * (+1); N = 0: a block's input, middle and output per layer (2L+1). */
static inline int64_t rc_resid_slots(const gpt_config *c)
{
    return 2 * c->layers - c->recompute_blocks + 1 + (c->recompute_blocks > 0);
}
static inline int64_t rc_in(const gpt *m, int64_t l)
{
    const int64_t N = m->c.recompute_blocks;
    return l < N ? l : N + 2 * (l - N);
}
static inline int64_t rc_final(const gpt *m) { return 2 * m->c.layers - m->c.recompute_blocks; }
static inline int64_t rc_mid(const gpt *m, int64_t l) { return rc_shared(m, l) ? rc_final(m) + 1 : rc_in(m, l) + 1; }
static inline int64_t rc_out(const gpt *m, int64_t l) { return rc_shared(m, l) ? l + 1 : rc_in(m, l) + 2; }
/* Layers of qkv and attention-output buffers (the shared one first), and block l's index in them. */
static inline int64_t rc_act_layers(const gpt_config *c)
{
    return c->layers - c->recompute_blocks + (c->recompute_blocks > 0);
}
static inline int64_t rc_act(const gpt *m, int64_t l)
{
    const int64_t N = m->c.recompute_blocks;
    return l < N ? 0 : l - N + (N > 0);
}

/* A block's forward as its family runs it (train: into the block's saved state). */
typedef f8_status (*block_forward_fn)(gpt *m, int64_t l, int64_t batch, int train, f8_microbatch mb);

/* Block l's saved-state objects, made when the block's modules and
 * attention exist: its own, or (one of the first N blocks) layer 0's. */
/* The step's activation, scratch and io buffers, sized for the recompute
 * setting (recompute.c; both families' create calls it). */
f8_status gpt_alloc_step_buffers(gpt *m, int64_t qkv_width, int64_t vocab_cols);

f8_status recompute_block_saved(gpt *m, int64_t l);
/* Free block l's saved state (each object once), before its modules. */
void recompute_block_release(gpt *m, int64_t l);

/* Before block l's training forward: the shared saved state becomes
 * block l's, and the call's batch and microbatch are kept for the
 * recompute. No-op for a block that keeps its own (l >= N). */
f8_status recompute_bind(gpt *m, int64_t l, int64_t batch, f8_microbatch mb);
/* Before block l's backward: its forward again into the shared state (not
 * for block N-1, the one the forward ran last, whose state is still there).
 * No-op for a block that keeps its own (l >= N). */
f8_status recompute_block(gpt *m, int64_t l, block_forward_fn forward);

#endif /* F8_TRAIN_RECOMPUTE_H */
