/*
 * options.h — f8_train's options (train_options): defaults, the command
 * line, --help, a checkpoint's train.* metadata and the checks between
 * options. Three files: options.c holds the presets, defaults, option table
 * and --help; options_parse.c reads the command line and a checkpoint's
 * metadata through the table; options_check.c refuses what does not go
 * together.
 */
#ifndef F8_TRAIN_OPTIONS_H
#define F8_TRAIN_OPTIONS_H

#include <stdio.h>

#include "model.h"

/* Limits of the model shape, from the command line and from a checkpoint's
 * metadata alike (a checkpoint is untrusted input: its shape is checked
 * before anything is allocated). */
#define TRAIN_MAX_LAYERS 1024
/* --recompute-blocks on: every block, whatever the model's layers */
#define TRAIN_RECOMPUTE_ALL (-1)
#define TRAIN_MAX_HEADS 1024
#define TRAIN_MAX_CHANNELS 65536
#define TRAIN_MAX_SEQ 65536
#define TRAIN_MAX_VOCAB (1 << 20)
#define TRAIN_MAX_STEPS ((int64_t)1 << 40)

typedef struct train_options {
    const char *backend;      /* "auto" (CUDA when a GPU is there), "cpu", "cuda" */
    int fp8;                  /* 1: FP8 GEMMs in the blocks; 0: BF16 (GPU) / FP32 (CPU) */
    int fp8_head;             /* 1: the LM head's GEMMs in FP8 too (needs fp8; on --resume the checkpoint's) */
    int fp8_weights;          /* 1: the blocks' weights FP8 primary, FP32 masters in the optimizer (fp8w.h;
                                 needs fp8, delayed or current scaling, no --tp; on --resume the checkpoint's) */
    int recompute_norm;       /* --recompute-norm: the norm outputs of qkv and the MLP made again in backward
                                 instead of saved (memory; bitwise the same; not with --sequence-parallel or
                                 --recipe block) */
    int recompute_act;        /* --recompute-act: the MLP's activation output (fc2's input) made again in
                                 backward from the saved pre-activation instead of saved (memory; bitwise
                                 the same; not with --recipe block or rowwise*) */
    int recompute_proj_input; /* --recompute-proj-input: the attention projection's FP8 input cast again in
                                 backward from the kept attention output instead of saved (memory; bitwise
                                 the same; not with --recipe block or rowwise*) */
    int weight_transpose_per_call; /* --weight-transpose-per-call: no cached FP8 weight transposes in the
                                 first N blocks (and the head with every block): each backward makes its
                                 own (memory; bitwise the same; not with --recipe block or rowwise*); 0
                                 off, TRAIN_RECOMPUTE_ALL (on) every block and the head, or N */
    int recompute_blocks;     /* --recompute-blocks: of the first N blocks only the input kept, their forward
                                 run again in the backward (recompute.h; bitwise the same; not with --tp);
                                 0 off, TRAIN_RECOMPUTE_ALL (on) every block, resolved against the layers
                                 by trainer_create */
    int fp8_attention;        /* --fp8-attention: FP8 attention forward (f8_attention_config.fp8, TE's
                                 fp8_dpa with its BF16 backward); needs --fp8 on, --recipe delayed or
                                 current, bf16; on --resume the checkpoint's */
    int fp8_attention_backward; /* --fp8-attention-backward: its backward in FP8 too
                                 (f8_attention_config.fp8_backward, TE's NVTE_FP8_DPA_BWD=1); needs
                                 --fp8-attention on; on --resume the checkpoint's */
    const char *recipe;       /* FP8 scaling: "delayed", "current", "block"; NULL: delayed, or on
                                 --resume the checkpoint's */
    const char *attention;    /* --attention: "auto" (cuDNN where it takes the call) or "own" (f8's kernels);
                                 f8_ctx_config.attention_path */
    int attention_deterministic; /* --attention-deterministic: 1 (default) cuDNN's deterministic attention
                                 backward, 0 its faster atomic one (f8_ctx_config.attention_nondeterministic) */
    int gemm_tune;            /* --gemm-tune: 1 times cuBLASLt's candidates at each GEMM plan's first call
                                 (f8_ctx_set_gemm_tune); 0 (default) the heuristic's first */
    const char *adam_moments; /* --adam-moments: "fp32" (default), "bf16", "fp8" (f8_adamw_config.moments);
                                 NULL on --resume: the checkpoint's optimizer.moments */
    const char *dtype;        /* "auto" (bf16 on CUDA, fp32 on CPU), "fp32", "bf16" */
    const char *grad_dtype;   /* --grad-dtype: "auto" (the parameters'), "bf16" (needs bf16 parameters),
                                 "fp32" (with bf16 parameters: gpt_config.grad_fp32); not in checkpoints */
    const char *model;        /* preset: "tiny", "small", "124M", "350M", "1.3B", "llama-tiny", "llama-1B",
                                 "llama-3B", "llama-8B", or "custom" */
    int64_t layers, heads, channels, seq, batch, grad_accum;
    /* the Llama family (llama.h), set by the llama-* presets: kv_heads, the
     * SwiGLU width, an untied LM head, RoPE's theta and Llama 3 factor (0: none) */
    int llama;
    int64_t kv_heads, ffn;
    int untied;
    double rope_theta, rope_factor;
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
    int64_t head_chunk;       /* tokens per LM-head pass; 0: gpt.h's GPT_HEAD_CHUNK */
    float memory_limit;       /* --memory-limit GiB: refuse a run whose memory plan is larger (memplan.h);
                                 0: the GPU's free memory on CUDA, no limit on the CPU */
    float temperature;
    const char *prompt;
    int quiet;
    int fp8_report;           /* FP8 telemetry: <log>_fp8.csv, <plot>_fp8.svg, worst tensors at the end */
    uint64_t given;           /* train_option_bit of each model option the command line set (directly or
                                 through --model), checked against a --resume checkpoint; 0 when filled in code */
    uint64_t from_preset;     /* of those, the ones that came from --model */
    /* Data parallelism (dp.h): --ranks N in-process CPU ranks, --gpus N one process per GPU
     * (launch.c); --grad-accum microbatches are split among the ranks. */
    int64_t ranks, gpus;
    int dp_overlap;           /* --dp-overlap: per-block gradient buckets reduced during the backward */
    int64_t tp;               /* --tp N: tensor parallel over groups of N of the ranks (tp.h); 1: none */
    int sequence_parallel;    /* --sequence-parallel: with --tp, tokens split over the TP group outside the
                                 tensor-parallel regions (tp.h) */
    /* Set per rank by the launcher, not by the command line (world <= 1: no communicator). */
    int rank, world, device;
    f8_comm_group *comm_group; /* CPU ranks */
    const f8_comm_id *comm_id; /* NCCL ranks */
    /* With tp > 1, also this rank's tensor-parallel group (ranks d·tp .. d·tp + tp - 1 of the world)
     * and data-parallel group (the ranks of its TP index): CPU groups or NCCL ids. comm_group /
     * comm_id stay the whole world (amax reduction, gradient norm). */
    f8_comm_group *tp_group, *dp_group;
    const f8_comm_id *tp_id, *dp_id;
} train_options;

/* The option table: every command-line option, in --help's order, with
 * where its value goes. It drives train_parse_args, the given mask and
 * the check of a --resume checkpoint's train.* metadata and --help (the
 * entries' texts in table order, then the presets). */
typedef enum train_option_kind {
    OPT_FLAG,    /* no value: sets an int to 1 */
    OPT_INT,     /* int64_t in [lo, hi] */
    OPT_SEED,    /* uint64_t in [lo, hi] */
    OPT_REAL,    /* float in [lo, hi] */
    OPT_ON_OFF,  /* "off" / "on": an int 0 / 1 */
    OPT_GRAPH,   /* "off" / "on" / "auto": an int 0 / 1 / -1 */
    OPT_BLOCKS,  /* "off" / "on" / N in [lo, hi]: an int 0 / TRAIN_RECOMPUTE_ALL / N */
    OPT_WORD,    /* one of words: the word (a static string) */
    OPT_STRING,  /* a path or text, as given */
    OPT_COMPARE, /* repeatable, up to 4 (compare[]) */
    OPT_MODEL,   /* --model: a preset, applied before the other options */
    OPT_HELP     /* --help: prints and stops */
} train_option_kind;

typedef struct train_option_def {
    const char *name;  /* "--layers" */
    const char *alias; /* another spelling, or NULL */
    train_option_kind kind;
    size_t offset;     /* of its field in train_options */
    double lo, hi;     /* OPT_INT, OPT_SEED, OPT_REAL */
    const char *const *words; /* OPT_ON_OFF, OPT_GRAPH, OPT_BLOCKS, OPT_WORD */
    int n_words;
    const char *meta;  /* the train.* key a checkpoint records it under (a model option), or NULL */
    const char *group; /* --help: the heading printed before it, or NULL */
    const char *help;  /* --help: its lines, {name} standing for option --name's default; NULL: described
                          on the line of the option before it */
} train_option_def;

const train_option_def *train_option_table(int *count);
/* The table index of an option by name or alias; -1 for none. */
int train_option_index(const char *name);
/* The bit of an option (by name or alias) in train_options.given; 0 for none. */
uint64_t train_option_bit(const char *name);

train_options train_options_default(void);
/* The preset called name (--model: tiny ... 1.3B, llama-*) into o's shape,
 * batch, learning rate and model family; 0, or -1 for an unknown name (o
 * unchanged). */
int train_options_preset(train_options *o, const char *name);

/* The scaling recipe an f8_train checkpoint was trained with (its
 * train.recipe; delayed when absent or unreadable: the restore then says
 * what is wrong), read through a CPU ctx of its own: a ctx that restores the
 * model must be created with the same kind. */
f8_recipe_kind train_checkpoint_recipe(const char *path);

/* The recipe f8_train runs for a kind: f8_recipe_default() with that kind,
 * and for ROWWISE torchao's from_recipe_name("rowwise") settings (E4M3
 * gradients, power-of-two scales). Every ctx that trains, resumes or exports
 * a run makes its recipe here, so a checkpoint's recipe always matches. */
f8_recipe train_recipe(f8_recipe_kind kind);
/* Fill o from argv. Returns 0 to run, 1 when --help was printed to out, -1 on
 * a bad option (message in err). */
int train_parse_args(int argc, char **argv, train_options *o, FILE *out, char *err, size_t err_size);
void train_print_help(FILE *out);

/* The model a checkpoint's metadata describes (train.layers, train.heads,
 * train.channels, train.seq, train.vocab, train.padded_vocab, train.fp8,
 * train.dtype, train.step), read through get(user, key) (NULL: absent).
 * Every value is parsed strictly (parse.h) and checked against the
 * command line's limits; a shape option the command line gave (o->given)
 * with another value is a conflict naming both. On success o's model fields
 * hold the checkpoint's (model "custom") and *vocab, *padded_vocab, *step
 * are set; returns 0. Otherwise -1 with the reason in err, o unchanged. */
typedef const char *(*train_meta_fn)(void *user, const char *key);
int train_options_from_metadata(train_options *o, train_meta_fn get, void *user, int64_t *vocab,
                                int64_t *padded_vocab, int64_t *step, char *err, size_t err_size);

/* The refusals (options_check.c). Options that contradict each other, each
 * feature's conditions below included, refused rather than resolved
 * silently (train_parse_args runs it last). 0, or -1 with the reason in err. */
int train_check_conflicts(const train_options *o, char *err, size_t err_size);
/* Preconditions trainer_create checks before it allocates:
 * --checkpoint's directory takes files (a temporary is created and
 * removed); the model c fits (the machine's memory on the CPU, 1 TiB
 * anywhere). 0, or -1 with the reason in err. */
int train_check_writable(const char *path, char *err, size_t err_size);
int train_check_memory(const gpt_config *c, int cuda, char *err, size_t err_size);
/* --tp against the rest: ranks (--ranks or --gpus) a multiple of it, the
 * replicas splitting --grad-accum evenly, heads and the MLP width divisible
 * by it, no --dp-overlap with it; --sequence-parallel only with --tp > 1
 * and --seq divisible by it. 0, or -1 with the reason in err. */
int train_check_tp(const train_options *o, char *err, size_t err_size);
/* --fp8-weights against the rest: --fp8 on, not --recipe block (the modules
 * refuse FP8 primary weights under block scaling), no --tp > 1, no
 * --init-from, and with more than one data-parallel rank not --recipe
 * current (its scale comes from the amax of the whole weight at the cast; a
 * rank casts only its shard). recipe: the one the run will use (NULL:
 * delayed). 0, or -1 with the reason in err. */
int train_check_fp8_weights(const train_options *o, const char *recipe, char *err, size_t err_size);
/* --recompute-norm on against the rest: the modules refuse it with sequence
 * parallelism and, with --fp8 on, under --recipe block or rowwise*; and
 * --recompute-act on, --recompute-proj-input on and --weight-transpose-per-
 * call on, refused under those recipes too. recipe: as above.
 * 0, or -1 with the reason in err. */
int train_check_recompute_norm(const train_options *o, const char *recipe, char *err, size_t err_size);
/* --recompute-blocks on against the rest: not with --tp or --sequence-parallel
 * (the blocks' all-reduces would run again), nor with --fp8-report (the
 * recomputed casts would count their saturated and flushed values again). */
int train_check_recompute_blocks(const train_options *o, char *err, size_t err_size);
/* --fp8-attention on against the rest: it needs --fp8 on and delayed
 * scaling (the attention's S and O slots have no tensor to measure before
 * their cast). recipe: as above. 0, or -1 with the reason in err. */
int train_check_fp8_attention(const train_options *o, const char *recipe, char *err, size_t err_size);

#endif /* F8_TRAIN_OPTIONS_H */
