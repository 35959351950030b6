/*
 * memplan.h — f8_train's memory plan: the bytes a run will hold, by
 * category, worked out before the model is allocated, and the check that
 * refuses a model that will not fit, naming the options that would make it
 * fit.
 *
 * How: the library's own accounting (f8_ctx_memory) of two probe models of
 * one and two layers, made on a scratch ctx of the run's kind and freed
 * again, gives the fixed part and the part per layer exactly (the modules'
 * parameters, gradients, FP8 workspaces, saved activations, scratch and the
 * model's own buffers); the rest is counted from the options: the FP8
 * weight transposes a first backward adds, the optimizer's moments in their
 * form (--adam-moments) and ZeRO-1's flat buffers, the FP8 weights' FP32
 * masters. A probe costs one block and the head, briefly; there are
 * three: one and two blocks that keep their activations, and two that
 * share one set (--recompute-blocks 2: the second is recomputed), so a
 * recomputed block's bytes are measured too, and --recompute-blocks N
 * (N - 1 blocks recomputed) follows from them exactly.
 */
#ifndef F8_TRAIN_MEMPLAN_H
#define F8_TRAIN_MEMPLAN_H

#include <stddef.h>

#include "model.h"

typedef enum plan_category {
    PLAN_WEIGHTS,     /* parameters (FP8 primary weights as codes), wpe */
    PLAN_WORKSPACES,  /* FP8 weight workspaces and their transposes */
    PLAN_GRADIENTS,   /* parameter gradients */
    PLAN_OPTIMIZER,   /* AdamW's moments, ZeRO-1's flat buffers, FP8 weights' masters */
    PLAN_ACTIVATIONS, /* the modules' saved state and the model's activation buffers (residual stream,
                         attention inputs and outputs, logits, gradients in flight) */
    PLAN_SCRATCH,     /* the ctx's scratch shared by the modules within a call */
    PLAN_OTHER,       /* FP8 scaling state and the ctx's own */
    PLAN_COUNT
} plan_category;

typedef struct mem_plan {
    double bytes[PLAN_COUNT];
    double total;
    double norm_outputs; /* bytes --recompute-norm on would not keep (0 where it does not apply) */
    double act_outputs;  /* bytes --recompute-act on would not keep (0 where it does not apply) */
    double proj_inputs;  /* bytes --recompute-proj-input on would not keep (0 where it does not apply) */
    double transposes;   /* bytes --weight-transpose-per-call on would save (the cached FP8 weight transposes
                            less the workspace's growth by the largest weight; 0 where it does not apply) */
    double blocks_saves; /* bytes --recompute-blocks on would not keep beyond the run's N (0 where it does
                            not apply) */
    double block_kept;       /* activations of a block that keeps them (saved state and buffers) */
    double block_recomputed; /* of a block --recompute-blocks recomputes (its input; 0: not planned, --tp) */
} mem_plan;

/* What the plan needs of a run besides its model config. */
typedef struct mem_plan_run {
    f8_ctx_config ctx;        /* the run's ctx config: the probes' ctx is made alike */
    int ranks;                /* ZeRO-1 ranks sharing the optimizer state (0: none, one rank) */
    int tp;                   /* tensor-parallel ranks sharing each block (1: none) */
    f8_adamw_moments moments;
} mem_plan_run;

/* The category's name ("weights", "FP8 workspaces", ...). */
const char *mem_plan_name(plan_category k);

/* The plan of a run of model c (a collective of nothing: local, any rank). */
f8_status mem_plan_make(const gpt_config *c, const mem_plan_run *r, mem_plan *p, char *err, size_t err_size);

/* "weights 3.2 MiB, FP8 workspaces 1.5 MiB, ...: 28.0 MiB" into out. */
void mem_plan_format(const mem_plan *p, char *out, size_t size);

/* 0 when p fits in limit bytes; else -1 with err saying the plan, the
 * limit (what: where it comes from) and the options that would make it
 * fit, each with what it saves (--recompute-blocks: the smallest N that
 * fits, where one does). */
int mem_plan_check(const mem_plan *p, const gpt_config *c, const mem_plan_run *r, double limit, const char *what,
                   char *err, size_t err_size);

#endif /* F8_TRAIN_MEMPLAN_H */
