/*
 * trainer.h — the GPT training run behind f8_train: options, the step (eager
 * or one captured graph), evaluation, checkpoints with exact resume, and
 * sampling. main.c parses the command line and drives it; the tests drive
 * it directly.
 */
#ifndef F8_TRAIN_TRAINER_H
#define F8_TRAIN_TRAINER_H

#include <stdio.h>

#include "data.h"
#include "gpt.h"
#include "log.h"

typedef struct train_options {
    const char *backend;      /* "auto" (CUDA when a GPU is there), "cpu", "cuda" */
    int fp8;                  /* 1: FP8 GEMMs in the blocks; 0: BF16 (GPU) / FP32 (CPU) */
    const char *dtype;        /* "auto" (bf16 on CUDA, fp32 on CPU), "fp32", "bf16" */
    const char *model;        /* preset: "tiny", "small", "124M", "350M", "1.3B", or "custom" */
    int64_t layers, heads, channels, seq, batch, grad_accum;
    int64_t steps;
    float lr, lr_min, weight_decay, grad_clip;
    int64_t warmup;
    uint64_t seed;
    const char *text, *data, *val_data; /* data sources (default: the embedded corpus) */
    int64_t val_every, val_batches;
    const char *log, *plot;   /* CSV log and SVG plot paths ("" = none) */
    const char *compare[4];   /* other logs to overlay in the plot */
    int n_compare;
    const char *checkpoint;   /* save here ("" = none) every checkpoint_every steps and at the end */
    int64_t checkpoint_every;
    const char *resume;       /* continue from this checkpoint */
    const char *init_from;    /* start from a Hugging Face GPT-2 (hf.h): its shape and weights */
    const char *tokenizer;    /* llm.c gpt2_tokenizer.bin: decode samples of GPT-2 token data */
    int graph;                /* -1 auto (on for CUDA), 0 off, 1 on */
    int64_t sample;           /* tokens to sample at the end (byte data only) */
    float temperature;
    const char *prompt;
    int quiet;
} train_options;

train_options train_options_default(void);
/* Fill o from argv. Returns 0 to run, 1 when --help was printed to out, -1 on
 * a bad option (message in err). */
int train_parse_args(int argc, char **argv, train_options *o, FILE *out, char *err, size_t err_size);
void train_print_help(FILE *out);

typedef struct trainer trainer;

f8_status trainer_create(const train_options *o, trainer **t, char *err, size_t err_size);
void trainer_destroy(trainer *t);
/* One optimizer step (all microbatches); *loss = mean train loss. */
f8_status trainer_step(trainer *t, double *loss);
/* Mean loss over the validation batches (NAN without validation data). */
f8_status trainer_eval(trainer *t, double *loss);
f8_status trainer_save(trainer *t, const char *path);
/* The whole run as the command line asked: steps, progress lines, log,
 * checkpoints, plot, samples. Returns the process exit code. */
int trainer_run(trainer *t);
/* Sample n tokens after prompt into out (bytes; n + 1 room). */
f8_status trainer_sample(trainer *t, const char *prompt, int64_t n, float temperature, uint64_t seed, char *out);

/* Sample n GPT-2 tokens after end-of-text and decode them with llm.c's
 * tokenizer file: *text (malloc'd, NUL-terminated) for the caller to free. */
f8_status trainer_sample_text(trainer *t, const char *tokenizer_path, int64_t n, float temperature, uint64_t seed,
                              char **text);

/* Introspection for the tests. */
gpt *trainer_model(trainer *t);
int64_t trainer_steps_done(const trainer *t);
const char *trainer_error(const trainer *t);

#endif /* F8_TRAIN_TRAINER_H */
