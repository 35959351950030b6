/*
 * params.h — a model's parameter table: one entry per trainable tensor,
 * built once when the model is created (gpt.c's gpt_params_build for GPT),
 * in the model's fixed order. Everything that walks the parameters loops
 * over it with an explicit filter: the optimizer (trainer_setup.c), ZeRO-1's
 * buckets (dp.c), tensor parallelism's one-rank layout (tp.c), the FP8
 * masters (fp8w.c) and the checkpoint (param_checkpoint_add/restore). The
 * order is the checkpoint's: the optimizer's state is stored by the index
 * of its parameter in the table, so the order never changes for a family.
 *
 * A new model family is a new table builder plus its forward.
 */
#ifndef F8_TRAIN_PARAMS_H
#define F8_TRAIN_PARAMS_H

#include "f8.h"

/* Entry flags. */
enum {
    PARAM_DECAY = 1,      /* AdamW's weight decay applies */
    PARAM_REPLICATED = 2, /* whole on every tensor-parallel rank (norms, embeddings, row-parallel biases) */
    PARAM_TP_SHARDED = 4, /* this rank holds a shard of it (tensor parallelism on): tp_dim, tp_parts */
    PARAM_TP_RANK0 = 8,   /* replicated, but its value lives on TP rank 0 and is zero on the others: a
                             row-parallel bias, added once to the sum of the partial outputs */
    PARAM_TP_GRAD_SUM = 16 /* replicated, its gradient summed over the TP group: a column-parallel
                              module's norm (each rank saw only its share of the output gradient) */
};

typedef struct model_param {
    char name[64];     /* the checkpoint name of the tensor: "<prefix>.<param>" ("model.h.3.qkv.weight"),
                          or the bare tensor's ("model.wpe") */
    char prefix[48];   /* its module's checkpoint prefix ("model.h.3.qkv"); "" for a bare tensor */
    int64_t layer;     /* its block, or -1 (embeddings, final norm, LM head) */
    f8_module *module; /* NULL for a bare tensor */
    f8_param which;
    int fp8;           /* its FP8 primary weight index k, or -1 */
    unsigned flags;    /* PARAM_* */
    int tp_dim;        /* a TP-sharded entry's split: along rows (0) or columns (1), */
    int tp_parts;      /* in this many stacked blocks each split alike (qkv's weight: q | k | v, 3) */
    int tp_sizes[3];   /* the blocks' relative sizes when they differ (a Llama's qkv: H, G, G heads);
                          all 0: equal */
    f8_tensor value;   /* views (this rank's shard under TP); an FP8 primary weight's value is FP8 */
    f8_tensor grad;
    f8_tensor stored;  /* a bare tensor's checkpoint view: value, or value's rows and more that are carried
                          untrained (an imported model's positions past the run's seq) */
    f8_tensor fold;    /* with FP32 main grads, a bias's or norm weight's: the module's own param-dtype
                          gradient of one microbatch, added into grad (FP32) by param_grads_fold; else
                          data NULL */
} model_param;

typedef struct param_table {
    model_param *v;
    int n, cap;
    float *fold_scratch; /* FP32, the largest fold entry's elements (inside the main grads' block), or NULL */
} param_table;

/* Append a module's parameter (its views from f8_module_param) named
 * "<prefix>.<f8 checkpoint name of which>". */
f8_status param_table_add(param_table *t, const char *prefix, f8_module *module, f8_param which, int64_t layer,
                          int fp8, unsigned flags);
/* Append a bare tensor (not in a module) with its gradient; stored is what
 * the checkpoint holds (NULL: value; else the same memory with value's rows
 * first and more after them). */
f8_status param_table_add_tensor(param_table *t, const char *name, const f8_tensor *value, const f8_tensor *grad,
                                 const f8_tensor *stored, int64_t layer, unsigned flags);
/* The last entry added is split over the TP group along dim in parts
 * stacked blocks (tp.h); meaningful with PARAM_TP_SHARDED. */
void param_table_split(param_table *t, int dim, int parts);
/* The same with blocks of unequal sizes: sizes[parts] (parts <= 3) in any
 * common unit (heads), each divisible by the TP size. */
void param_table_split_sizes(param_table *t, int dim, int parts, const int *sizes);
void param_table_free(param_table *t);

/* fn for every entry whose flags have none of skip's bits, in table order
 * (skip = PARAM_REPLICATED: the sharded ones only, as a TP rank other than
 * 0 keeps). Stops at the first status that is not F8_OK. */
typedef f8_status (*param_fn)(void *user, const model_param *p);
f8_status param_each(const param_table *t, unsigned skip, param_fn fn, void *user);
/* The entry of FP8 weight k, or NULL. */
const model_param *param_fp8(const param_table *t, int k);
/* Elements of every entry (a tied tensor counts once: it is one entry). */
int64_t param_elements(const param_table *t);

/* --grad-dtype fp32 beside BF16 parameters: every module entry of the table
 * gets an FP32 main grad, carved from one allocation (*block, *bytes;
 * f8_ctx_free it) and zeroed, and the entry's grad becomes its view, so the
 * optimizer, ZeRO-1's buckets, TP's sums and the tests read FP32 sums. A GEMM
 * weight (WEIGHT, FC1_WEIGHT, FC2_WEIGHT; its module created with
 * fuse_wgrad_accumulation, so it holds no gradient of its own for it): the
 * weight-gradient GEMM writes or accumulates into it (f8_module_set_main_grad).
 * A bias or norm weight, which the module
 * computes into its own param-dtype gradient: that one becomes the entry's
 * fold, added into the main grad after each microbatch (param_grads_fold).
 * Bare tensors keep the grad they were added with (the model allocates them
 * in its gradient dtype). */
f8_status param_main_grads_create(param_table *t, f8_ctx *ctx, void **block, size_t *bytes);
/* After a microbatch's backward of `layer` (-1: the embeddings, final norm
 * and head): each of its entries with a fold adds the fold into its grad in
 * FP32 (one rounding of the microbatch's own gradient, none in the sum
 * beyond FP32's) and zeroes the fold. Nothing without main grads. */
f8_status param_grads_fold(const param_table *t, f8_ctx *ctx, int64_t layer);
/* The gradient of a module's parameter as the table holds it (its main
 * grad, or the module's own); the module's own when it is not in the table. */
f8_status param_grad_of(const param_table *t, f8_module *module, f8_param which, f8_tensor *grad);

/* Store / restore every module of the table under its prefix (parameters
 * and FP8 scaling state, f8_checkpoint_add_module) and every bare tensor
 * under its name, in table order. */
f8_status param_checkpoint_add(const param_table *t, f8_checkpoint *ck);
f8_status param_checkpoint_restore(const param_table *t, const f8_checkpoint *ck);

/* AdamW's scalars (step, lr, grad_norm, as f8_checkpoint_add_adamw names
 * them) copied from src's "<from>.<scalar>" to dst's "<to>.<scalar>": how
 * dp.c and tp.c move them between the one-rank layout and a rank's own. One
 * missing from src: with err, F8_ERR_SHAPE and the message naming it (a
 * checkpoint the run cannot resume from); err NULL, F8_ERR_STATE (a rank's
 * own record, which has them). */
f8_status param_optimizer_scalars_copy(const f8_checkpoint *src, const char *from, f8_checkpoint *dst, const char *to,
                                       char *err, size_t n);

#endif /* F8_TRAIN_PARAMS_H */
