/*
 * trainer.h — the GPT training run behind f8_train (its options: options.h): the step (eager
 * or one captured graph), evaluation, checkpoints with exact resume, and
 * sampling. main.c parses the command line and drives it; the tests drive
 * it directly. Three files: trainer_setup.c makes and destroys a run (and
 * loads a --resume checkpoint), trainer.c steps, evaluates, saves and samples
 * it, trainer_run.c drives a whole run (progress, log, telemetry, exit code).
 */
#ifndef F8_TRAIN_TRAINER_H
#define F8_TRAIN_TRAINER_H

#include <stdio.h>

#include "data.h"
#include "dp.h"
#include "fp8w.h"
#include "gpt.h"
#include "log.h"
#include "memplan.h"
#include "options.h"

typedef struct trainer trainer;

/* A rank's whole training state. Visible for the trainer's tests, which
 * inspect it; programs go through the calls below. */
struct trainer {
    train_options o;
    f8_ctx *ctx;
    data_set *data;
    gpt m;
    f8_adamw *opt;           /* the whole model's, or with dp the rank's shard's (owned by dp) */
    f8_comm *comm;           /* all ranks (amaxes, gradient norm), or NULL */
    f8_comm *tp_comm, *dp_comm; /* with --tp: this rank's TP and DP groups (else NULL: comm is the DP group) */
    dp *dp;
    fp8w *fw;                /* --fp8-weights on one rank: the FP32 masters (with dp: dp's shards) */
    int64_t step;            /* optimizer steps done */
    int64_t M, T;            /* microbatches per step (all ranks), tokens per microbatch */
    int64_t Ml, mb0;         /* this rank's microbatches: mb0 .. mb0 + Ml - 1 */
    int32_t *stage;          /* (Ml, 2, T) backend: tokens then targets per microbatch */
    float *losses;           /* (M, T) backend: every rank's, gathered after the step */
    int32_t *host_stage;     /* (Ml, 2, T) */
    float *host_losses;      /* (M, T) */
    f8_graph *graph;
    int use_graph;
    int64_t ck_vocab, ck_padded_vocab, ck_step; /* from a --resume checkpoint's metadata */
    int64_t ck_positions;    /* its train.positions (hf.h): wpe's rows, 0 without a checkpoint */
    /* where trainer_create's time went, seconds: a large model spends tens of
     * seconds before its first step, and this says in which part */
    double t_ctx, t_data, t_model, t_opt;
    f8_ctx_config ctx_cfg;    /* what ctx was made with: the memory plan's probes are made alike */
    mem_plan plan;            /* the run's memory, planned before the model was made (memplan.h): on
                                 CUDA, with --memory-limit or without --quiet; else zeros */
    char error[512];
};

f8_status trainer_create(const train_options *o, trainer **t, char *err, size_t err_size);
void trainer_destroy(trainer *t);
/* One optimizer step (all microbatches); *loss = mean train loss. */
f8_status trainer_step(trainer *t, double *loss);
/* Mean loss over the validation batches (NAN without validation data). */
f8_status trainer_eval(trainer *t, double *loss);
f8_status trainer_save(trainer *t, const char *path);
/* The whole run as the command line asked: steps, progress lines, log,
 * checkpoints, plot, samples. Returns the process exit code: 0 the loss
 * fell, 1 an error, 2 the loss did not fall, 3 fewer than 2 steps trained
 * (too few to tell). */
int trainer_run(trainer *t);
/* Sample n tokens after prompt into out (bytes; n + 1 room). */
f8_status trainer_sample(trainer *t, const char *prompt, int64_t n, float temperature, uint64_t seed, char *out);

/* Sample n GPT-2 tokens after end-of-text and decode them with llm.c's
 * tokenizer file: *text (malloc'd, NUL-terminated) for the caller to free. */
f8_status trainer_sample_text(trainer *t, const char *tokenizer_path, int64_t n, float temperature, uint64_t seed,
                              char **text);

/* Peak backend memory of the run so far, in bytes: the high point of what f8
 * allocated from the trainer's ctx (f8_ctx_counters.peak_bytes: parameters,
 * gradients, AdamW moments, FP8 workspaces and scaling state, activations,
 * scratch, staging). Device memory on CUDA, host memory on the CPU backend;
 * the CUDA context, cuBLASLt's workspace and a CUDA graph's own memory are
 * not counted. A step allocates nothing after the first, so it is the same
 * from step 1 on. 0 if unknown. */
size_t trainer_peak_memory(const trainer *t);
/* Run the ranks the options ask for (o->ranks CPU threads or o->gpus
 * processes, launch.c), each a trainer_run; the exit code of rank 0, or 1
 * when any rank failed (the others are then stopped, not left hanging). */
int train_launch(const train_options *o);
/* 1 when the environment names a world size (torchrun, Open MPI, PMI). */
int train_launch_from_env(void);
/* The options of rank r of a world of ranks (launch.c): rank, world and the
 * per-rank paths and outputs (only rank 0 prints and writes). */
train_options train_rank_options(const train_options *o, int r, int world);
/* Rank 0 serves the communicator id to world - 1 TCP connections on port;
 * the others fetch it from addr:port, retrying for up to a minute while
 * rank 0 starts. 0, or -1 (a message on stderr). */
int train_tcp_share_id(int rank, int world, const char *addr, const char *port, f8_comm_id *id);

/* Dense BF16 peak FLOP/s of a GPU by its name (f8_ctx_device_name), the
 * MFU denominator for both precisions: H100 SXM ("... H100 ... HBM3" or
 * "SXM") and H200 989.4e12, H100 PCIe 756e12; 0 for any other device
 * (NVL parts included): the run then says "MFU: unknown GPU". */
double train_gpu_peak_flops(const char *device_name);

/* Introspection for the tests. */
gpt *trainer_model(trainer *t);
int64_t trainer_steps_done(const trainer *t);
const char *trainer_error(const trainer *t);

#endif /* F8_TRAIN_TRAINER_H */
