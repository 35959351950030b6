/*
 * tp.h — tensor parallelism (Megatron-style) for the GPT of gpt.h: a group
 * of P ranks holds one model between them.
 *
 *   qkv   LayerNormLinear, column parallel: rank t keeps the q, k and v rows
 *         of heads t·H/P .. (t+1)·H/P - 1 (and their bias entries);
 *         attention runs on those heads only
 *   proj  Linear, row parallel: the input columns of the same heads; the
 *         ranks' outputs are all-reduced (SUM) before the residual add; the
 *         bias lives on rank 0 (zero elsewhere), so it is added once
 *   mlp   LayerNormMLP: fc1 rows (both halves of a gated fc1 alike) column
 *         parallel, fc2 columns row parallel, all-reduced like proj
 *   rest  embeddings, final norm, LM head: replicated
 * The Llama family (llama.h) the same way from its own table: qkv's q, k
 * and v blocks of H, G and G heads each split in P (unequal stacked parts:
 * model_param.tp_sizes), RoPE and GQA on the local heads, fc1's gate and up
 * halves, no biases, its RMSNorms as the LayerNorms here.
 * Backward: the input gradient of the two column-parallel modules is a sum
 * over the ranks (all-reduced before the residual add), and so are their
 * LayerNorms' gamma/beta gradients (each rank saw only its share of the
 * output gradient: tp_reduce_grads). Every other replicated parameter
 * (embeddings, head, the row-parallel biases) gets the full, bitwise equal
 * gradient on every rank, because the residual stream and its gradient are
 * identical on all ranks after each all-reduce.
 * The optimizer: rank 0 of the group updates the replicated parameters, the
 * others leave them out (param_each with PARAM_REPLICATED skipped), so the global gradient norm counts
 * each parameter once when Σ g² is summed over the ranks; after the update
 * tp_sync_replicated broadcasts them from rank 0.
 * Checkpoints are in the one-rank layout: tp_checkpoint_add gathers the
 * shards (a collective of the group), tp_checkpoint_restore takes this
 * rank's shard of a one-rank checkpoint, so any TP size restores any other.
 *
 * Sequence parallelism (--sequence-parallel, gpt.sp): outside the two
 * tensor-parallel regions the tokens are split too. Rank t keeps rows
 * t·T/P .. (t+1)·T/P - 1 of the residual stream (T = batch·seq; seq must
 * divide by P so every forward's tokens do); qkv and the MLP normalise
 * those rows and all-gather the result (FP8 codes under FP8, the module
 * does it: f8_module_set_sequence_parallel); proj's and fc2's partial
 * outputs are reduce-scattered (SUM, rank order) into the rank's rows
 * instead of all-reduced; backward all-gathers the residual gradient before
 * proj's and the MLP's backward, and the modules reduce-scatter their norm
 * input gradients. The embedding (computed whole, rows kept), the final
 * norm and the LM head (input gathered) stay replicated over all T tokens,
 * so their gradients are whole on every rank as without SP; the blocks'
 * LayerNorm gradients are summed by tp_reduce_grads as before (each rank
 * now saw its tokens instead of its share of the output gradient). The
 * parameters, their layout and the checkpoints do not change: SP and
 * non-SP runs resume from each other's checkpoints.
 */
#ifndef F8_TRAIN_TP_H
#define F8_TRAIN_TP_H

#include <stddef.h>
#include <stdio.h>

#include "model.h"

struct dp;

/* 0 when heads and the MLP width (4·channels) divide by tp; else -1 with the
 * reason in err. */
int tp_check_shape(int64_t heads, int64_t channels, int tp, char *err, size_t err_size);

/* 0 when sequence parallelism can split seq over tp ranks (tp > 1, seq
 * divisible by it); else -1 with the reason in err. Inline: the option
 * checks (options_check.c) use it without the rest of tp.c. */
static inline int tp_check_sp(int64_t seq, int64_t tp, char *err, size_t n)
{
    if (tp < 2) {
        snprintf(err, n, "--sequence-parallel needs --tp 2 or more (it splits the tokens over the tensor-parallel "
                         "group)");
        return -1;
    }
    if (seq % tp != 0) {
        snprintf(err, n, "--sequence-parallel with --tp %lld: --seq %lld must divide by it (every forward's tokens, "
                         "a sampled sequence's too, split evenly over the group)", (long long)tp, (long long)seq);
        return -1;
    }
    return 0;
}


/* A ctx of ctx's backend and device (destroy it after) where a TP rank
 * makes the one-rank modules it takes its shards from: their FP8 slots
 * stay out of ctx's. */
f8_status tp_scratch_ctx(f8_ctx *ctx, f8_ctx **init, char *err, size_t n);
/* Block b of m (rank m->tp_rank of m->tp_size): its modules made from the
 * one-rank configs with this rank's widths. */
f8_status tp_block_create(gpt *m, gpt_block *b, const f8_layernorm_linear_config *qc, const f8_linear_config *pc,
                          const f8_layernorm_mlp_config *mc);
/* The block's parameters given this rank's shards: full and local are the
 * block's entries of the parameter table (same order) over the one-rank
 * modules (on ctx init, initialised as gpt_create makes them) and over
 * this rank's, with their TP flags and splits. */
f8_status tp_block_shard(gpt *m, f8_ctx *init, const param_table *full, const param_table *local);

/* x = Σ over the group of x (every rank gets the same bits); FP32 or BF16
 * (BF16 through m->tp_buf, summed in FP32). */
f8_status tp_all_reduce(gpt *m, f8_tensor *x);
/* SP: y (this rank's T/P rows) = its rows of Σ over the group of x (T
 * rows); FP32 or BF16 (BF16 through m->tp_buf, summed in FP32). */
f8_status tp_reduce_scatter(gpt *m, const f8_tensor *x, f8_tensor *y);
/* A row-parallel module's forward (the GPT's and the Llama's proj and
 * MLP): y = Σ over the group of its partial outputs (TP: all-reduced in
 * place; SP: this rank's rows, reduce-scattered through m->full), then
 * y += residual. One rank: f8_module_forward_add (the residual joins in the
 * last GEMM: no add kernel, one rounding). */
f8_status tp_row_parallel(gpt *m, f8_module *mod, const f8_tensor *in, f8_saved *saved, f8_microbatch mb,
                          f8_tensor *y, const f8_tensor *residual);
/* A column-parallel module's backward into the residual gradient: d (this
 * rank's rows with SP) += its input gradient, summed over the group
 * (through tmp, all-reduced; SP: reduce-scattered by the module, tmp then
 * has d's rows) with TP; one rank: f8_module_backward_add (dy may be d). */
f8_status tp_column_backward(gpt *m, f8_module *mod, f8_saved *saved, const f8_tensor *dy, f8_tensor *d,
                             f8_tensor *tmp);
/* The embedding of tokens into x0 (the first residual slot, this rank's
 * rows); SP: computed whole in m->full (replicated, cheap), this rank's
 * rows copied. */
f8_status tp_embed(gpt *m, const int32_t *tokens, const f8_tensor *wte, const f8_tensor *wpe, f8_tensor *x0);
/* The replicated head's input: xf itself, or with SP every rank's rows of
 * it all-gathered into m->xf (*xf then views all T_call rows). */
f8_status tp_head_input(gpt *m, f8_tensor *xf);
/* After the step's last backward: the column-parallel LayerNorms' gamma and
 * beta gradients summed over the group. */
f8_status tp_reduce_grads(gpt *m);
/* After the optimizer: the replicated parameters from rank 0. */
f8_status tp_sync_replicated(gpt *m);

/* The model in the one-rank layout (collective: every rank of the group
 * calls it; each gets the whole model in ck) / this rank's shard of one. */
f8_status tp_checkpoint_add(gpt *m, f8_checkpoint *ck);
f8_status tp_checkpoint_restore(gpt *m, const f8_checkpoint *ck);

/* The optimizer state of a ZeRO-1 rank (dp.h, made with PARAM_REPLICATED
 * skipped on ranks > 0) between its own layout and the one-rank layout:
 * add reads local (dp_checkpoint_add(d, local, "local"): this rank's list,
 * whole over the DP group) and writes ck under prefix, a collective of the
 * TP group; restore reads ck under prefix and fills local (then
 * dp_checkpoint_restore(d, local, "local", ...)), locally. tp.c calls no
 * dp.c function: the trainer joins the two. */
f8_status tp_optimizer_add(gpt *m, const f8_checkpoint *local, f8_checkpoint *ck, const char *prefix);
f8_status tp_optimizer_restore(gpt *m, const f8_checkpoint *ck, const char *prefix, f8_checkpoint *local, char *err,
                               size_t err_size);

/* Host slicing: copy between a full tensor [R, K] and rank t's shard of it
 * (elements of es bytes) along dim, the tensor being parts stacked blocks
 * (qkv: 3), each split in P. to_local = 1 full -> local, 0 local -> full. */
void tp_shard_copy(unsigned char *full, unsigned char *local, int64_t R, int64_t K, int dim, int parts, int P, int t,
                   size_t es, int to_local);
/* The same with blocks of relative sizes sizes[parts] (a Llama's q | k | v:
 * H, G, G heads; NULL: equal), rank t's share of each laid block after block. */
void tp_shard_copy_sizes(unsigned char *full, unsigned char *local, int64_t R, int64_t K, int dim, int parts,
                         const int *sizes, int P, int t, size_t es, int to_local);

#endif /* F8_TRAIN_TP_H */
