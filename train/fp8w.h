/*
 * fp8w.h — f8_train --fp8-weights on one rank: the FP32 master copy of each
 * FP8 primary weight of the blocks (gpt_fp8_weight), which AdamW updates in
 * place of the FP8 view, written back into the modules after each step.
 * With data parallelism the ranks keep masters for their shards only, in
 * dp.c; the two lay their checkpoints out alike ("<prefix>.master.<k>",
 * FP32 [rows, cols], k the FP8 weight's index), so a checkpoint of any rank
 * count resumes into any other.
 */
#ifndef F8_TRAIN_FP8W_H
#define F8_TRAIN_FP8W_H

#include "gpt.h"

typedef struct fp8w fp8w;

/* The masters of m's FP8 weights (gpt_fp8_weight_count of them, > 0),
 * initialised from gpt_fp8_master_init: the values the modules hold
 * quantized. Allocates everything here. */
f8_status fp8w_create(gpt *m, fp8w **out);
void fp8w_destroy(fp8w *w);

/* Weight k's master, [rows, cols] FP32 backend memory owned by w: what the
 * optimizer registers in place of the FP8 view. */
f8_tensor fp8w_master(const fp8w *w, int k);
/* Every master end to end, [1, total] (the capture warm-up's snapshot). */
f8_tensor fp8w_all(const fp8w *w);

/* After the optimizer step, TE's order: every master written into its
 * module (f8_module_write_weight: codes with the weight slot's scale, amax
 * recorded, the transpose invalidated), then f8_ctx_update_weight_scales.
 * Device work only: capturable. */
f8_status fp8w_write(fp8w *w);

/* "<prefix>.master.<k>" for every weight / back (each present, F32 of the
 * weight's shape; err says which is not). */
f8_status fp8w_checkpoint_add(fp8w *w, f8_checkpoint *ck, const char *prefix);
f8_status fp8w_checkpoint_restore(fp8w *w, const f8_checkpoint *ck, const char *prefix, char *err, size_t err_size);

#endif /* F8_TRAIN_FP8W_H */
