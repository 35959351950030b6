/*
 * recompute.h — per-block activation recompute (f8_train --recompute-blocks):
 * what the model families (gpt.c, llama.c) call to keep one block's
 * activations at a time instead of all of them.
 *
 * With c.recompute_blocks a training forward keeps, per block, only its
 * input (the residual stream at the block's entry); the modules' saved
 * state, the block's middle residual, its qkv and attention output are one
 * set shared by all blocks (one module's saved object per kind, handed from
 * layer to layer with f8_module_saved_rebind). The backward runs each
 * block's forward again into that set before the block's backward (the last
 * block's is still there from the forward). The recomputed forward is the
 * same call on the same input with the same microbatch: the FP8 casts use
 * the scales of the forward (delayed: the slot's scale, which only the
 * step's update moves; current and block: the amax of the same values), so
 * every code, scale_inv, activation and gradient is bitwise that of a run
 * without recompute; the casts max the same amaxes into the step's history
 * row again, which leaves it as it was.
 *
 * Without c.recompute_blocks every call here is the layout the families had
 * before: per-layer saved objects, 2L+1 residual slots, L qkv and attention
 * outputs.
 */
#ifndef F8_TRAIN_RECOMPUTE_H
#define F8_TRAIN_RECOMPUTE_H

#include "model.h"

/* Residual-stream slots: L+1 block boundaries and one shared middle with
 * recompute, else a block's input, middle and output per layer (2L+1). */
static inline int64_t rc_resid_slots(const gpt_config *c) { return c->recompute_blocks ? c->layers + 2 : 2 * c->layers + 1; }
static inline int64_t rc_in(const gpt *m, int64_t l) { return m->c.recompute_blocks ? l : 2 * l; }
static inline int64_t rc_mid(const gpt *m, int64_t l) { return m->c.recompute_blocks ? m->c.layers + 1 : 2 * l + 1; }
static inline int64_t rc_out(const gpt *m, int64_t l) { return m->c.recompute_blocks ? l + 1 : 2 * l + 2; }
static inline int64_t rc_final(const gpt *m) { return m->c.recompute_blocks ? m->c.layers : 2 * m->c.layers; }
/* Layers of qkv and attention-output buffers (1: shared), and block l's index in them. */
static inline int64_t rc_act_layers(const gpt_config *c) { return c->recompute_blocks ? 1 : c->layers; }
static inline int64_t rc_act(const gpt *m, int64_t l) { return m->c.recompute_blocks ? 0 : l; }

/* A block's forward as its family runs it (train: into the block's saved state). */
typedef f8_status (*block_forward_fn)(gpt *m, int64_t l, int64_t batch, int train, f8_microbatch mb);

/* Block l's saved-state objects, made when the block's modules and
 * attention exist: its own, or (recompute) layer 0's, made once. */
f8_status recompute_block_saved(gpt *m, int64_t l);
/* Free block l's saved state (each object once), before its modules. */
void recompute_block_release(gpt *m, int64_t l);

/* Before block l's training forward: the shared saved state becomes
 * block l's, and the call's batch and microbatch are kept for the
 * recompute. No-op without recompute. */
f8_status recompute_bind(gpt *m, int64_t l, int64_t batch, f8_microbatch mb);
/* Before block l's backward: its forward again into the shared state (not
 * for the block the forward ran last, whose state is still there). No-op
 * without recompute. */
f8_status recompute_block(gpt *m, int64_t l, block_forward_fn forward);

#endif /* F8_TRAIN_RECOMPUTE_H */
