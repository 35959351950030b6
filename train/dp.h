/*
 * dp.h — data parallelism with a sharded optimizer (ZeRO-1) for f8_train:
 * every rank holds the whole model and runs its own microbatches; after the
 * backward the gradients are reduce-scattered so each rank owns the summed
 * gradient of one contiguous shard of the flattened parameters, AdamW
 * updates that shard only (its moments are the only ones the rank keeps),
 * and the updated shards are all-gathered back into every rank's model.
 */
#ifndef F8_TRAIN_DP_H
#define F8_TRAIN_DP_H

#include "gpt.h"

typedef struct dp dp;

/* Rank `rank` of `world` on ctx: a CPU rank of group (CPU ctx) or an NCCL
 * rank joined by id (CUDA ctx); also the ctx's amax-reduction group. */
f8_status dp_comm_create(f8_ctx *ctx, f8_comm_group *group, const f8_comm_id *id, int rank, int world, f8_comm **comm,
                         char *err, size_t err_size);

/* The layout and the sharded optimizer (config ac) of rank f8_comm_rank(comm)
 * for the parameters of model m whose flags have none of skip's bits
 * (params.h: PARAM_REPLICATED on a TP rank other than 0), on comm's ctx.
 * Allocates everything the step needs. */
f8_status dp_create(f8_comm *comm, gpt *m, unsigned skip, int overlap, const f8_adamw_config *ac, dp **out, char *err,
                    size_t err_size);
void dp_destroy(dp *d);

/* overlap != 0: one bucket per transformer block (and one for the embeddings
 * and head), each reduce-scattered as soon as gpt's grads_ready says its
 * gradients are complete: set m->grads_ready = dp_grads_ready, grads_user =
 * d for the last microbatch's backward. On NCCL the buckets run on the
 * comm's stream while the backward goes on (f8_comm_set_async); dp_step
 * waits for them. overlap 0: one bucket, reduced by dp_step. */
f8_status dp_grads_ready(void *user, int64_t layer);
int dp_overlap(const dp *d);

/* The rank's optimizer (owned by d): registered with its shard. */
f8_adamw *dp_optimizer(dp *d);

/* After the last microbatch's backward: reduce-scatter the gradients, AdamW
 * on the shard (global-norm clipping across ranks), all-gather the
 * parameters. Device work only: capturable. A collective: every rank. */
f8_status dp_step(dp *d);

/* Bytes dp_step has handed to its all-gathers so far (counted as each is
 * issued: a graph replay issues none): hp the parameters in their dtype,
 * fp8 the FP8 weights' codes (1 byte per element of their buckets). */
void dp_gathered_bytes(const dp *d, int64_t *hp, int64_t *fp8);
/* Bytes of FP8 codes in the buckets, all ranks' shards together (0 without
 * FP8 primary weights): what one step's FP8 all-gathers carry in all. */
int64_t dp_fp8_code_bytes(const dp *d);
/* This rank's FP32 masters of its FP8 weight pieces, [1, S8] (cols 0 and
 * data NULL without FP8 weights): the capture warm-up's snapshot. */
f8_tensor dp_masters(const dp *d);

/* The optimizer state in the one-rank layout, "<prefix>.m.<i>" and
 * "<prefix>.v.<i>" per parameter of m (registration order; in the form of
 * the config's moments, FP8 moments as their codes and per-block
 * scale_invs) plus step, lr, grad_norm and the "<prefix>.moments" record,
 * as f8_checkpoint_add_adamw writes it, and with FP8 weights
 * "<prefix>.master.<k>" as fp8w.c writes them: a checkpoint of any rank
 * count restores into any other. add is a collective (the shards are
 * gathered); every rank gets the full state in its ck. restore is local:
 * each rank takes its shard from the full state. */
f8_status dp_checkpoint_add(dp *d, f8_checkpoint *ck, const char *prefix);
f8_status dp_checkpoint_restore(dp *d, const f8_checkpoint *ck, const char *prefix, char *err, size_t err_size);

#endif /* F8_TRAIN_DP_H */
