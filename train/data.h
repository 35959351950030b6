/*
 * data.h — the trainer's datasets: token streams split into train and
 * validation, and a deterministic batch sampler over them.
 *
 * Sources (data_source):
 *   CORPUS  the embedded corpus (corpus.h), generated in memory; bytes, vocab 256.
 *   TEXT    any file read byte-level (--text FILE); vocab 256.
 *   SHARDS  llm.c token shards (--data a.bin,b.bin or "dir/train_*.bin"):
 *           a header of 256 little-endian int32 — [0] magic 20240520,
 *           [1] version 1, [2] number of tokens — then that many uint16
 *           tokens (GPT-2, vocab 50257). The file size must be exactly
 *           1024 + 2 * count bytes (llm.c's own check). llm.c's Llama 3
 *           shards (magic 20240801, version 7) hold uint32 tokens instead
 *           (vocab 128256; 1024 + 4 * count bytes). A dataset is one kind:
 *           GPT-2 and Llama 3 shards together are refused.
 * Files are memory-mapped read-only, not loaded: a dataset of a hundred
 * 200 MB shards costs page cache, not heap. The files must not change while
 * the dataset is open.
 *
 * Split: the validation split is the last val_fraction of the tokens (the
 * tail of the concatenation of the files in order), or, when val_path is
 * given, the files of val_path (llm.c's "fineweb_val_*.bin" convention).
 *
 * Sampling is stateless: train batch (step, micro) is a pure function of
 * (sample_seed, step, micro), so a run resumed at step k sees exactly the
 * batches it would have seen; the only state to checkpoint is the step
 * counter. Each row is a window of S+1 consecutive tokens at a position drawn
 * uniformly (with replacement) from every position where a window fits inside
 * one file; inputs are its first S tokens, targets its last S (the inputs
 * shifted by one). Validation batches walk fixed non-overlapping windows (start
 * every S tokens) from the start of the validation split, so every evaluation
 * scores the same tokens.
 *
 * Token ids are checked against vocab_size as they are copied out: a shard
 * holding a larger id is reported, never passed on to an embedding lookup.
 *
 * Errors are f8_status values: F8_ERR_INVALID_ARGUMENT (bad config or
 * argument), F8_ERR_IO (a file missing, unreadable or malformed; a token out of
 * range), F8_ERR_OUT_OF_MEMORY, F8_ERR_SHAPE (a split too short for a window
 * of S+1 tokens). Every message names the file and what was wrong with it.
 */
#ifndef F8_TRAIN_DATA_H
#define F8_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "f8.h"

#define DATA_SHARD_MAGIC 20240520
#define DATA_SHARD_VERSION 1
#define DATA_SHARD_HEADER_INTS 256
#define DATA_GPT2_VOCAB 50257
/* llm.c's Llama 3 shards: the same header with this magic and version, uint32 tokens */
#define DATA_SHARD_LLAMA3_MAGIC 20240801
#define DATA_SHARD_LLAMA3_VERSION 7
#define DATA_LLAMA3_VOCAB 128256
#define DATA_GPT2_EOT 50256

typedef enum data_source {
    DATA_SOURCE_CORPUS = 0, /* the embedded corpus */
    DATA_SOURCE_TEXT = 1,   /* a text file, byte-level */
    DATA_SOURCE_SHARDS = 2  /* llm.c .bin token shards */
} data_source;

typedef enum data_split {
    DATA_SPLIT_TRAIN = 0,
    DATA_SPLIT_VAL = 1
} data_split;

typedef struct data_config {
    data_source source;    /* default DATA_SOURCE_CORPUS */
    const char *path;      /* TEXT: the file; SHARDS: paths and glob patterns
                              separated by commas ("a.bin,dir/b_*.bin"; a
                              pattern's matches in sorted order). Read only
                              during data_create. Default NULL */
    const char *val_path;  /* optional, TEXT or SHARDS: the validation files,
                              same syntax; then val_fraction is not used.
                              Default NULL */
    double val_fraction;   /* in [0, 1): tail held out when val_path is NULL;
                              default 0.1 */
    uint64_t corpus_seed;  /* CORPUS: the generator's seed; default 1 */
    size_t corpus_bytes;   /* CORPUS: bytes generated; default 8 MiB */
    uint64_t sample_seed;  /* train batch sampler's seed; default 1 */
    int vocab_size;        /* token ids must be < vocab_size; 0 (default):
                              256 for CORPUS and TEXT, 50257 for GPT-2 SHARDS,
                              128256 for Llama 3 ones */
} data_config;

typedef struct data_set data_set;

/* CORPUS, no paths, val_fraction 0.1, corpus_seed 1, 8 MiB, sample_seed 1. */
data_config data_config_default(void);

/* Open (map or generate) the data and split it. [out] *ds, owned by the
 * caller (data_destroy). On error *ds is NULL and, when `error` is not NULL, a
 * message of at most error_size-1 characters is written there, e.g.
 *   "shard 'x.bin': bad magic 1234 (expected 20240520): not an llm.c token shard"
 *   "shard 'x.bin': header says 5000 tokens (11024 bytes) but the file has 4096 bytes (truncated?)"
 *   "text 'in.txt': cannot open: No such file or directory"
 * Errors: F8_ERR_INVALID_ARGUMENT (NULL config, no path for TEXT/SHARDS,
 * val_fraction outside [0, 1), corpus_bytes 0, vocab_size < 0, a pattern
 * matching nothing), F8_ERR_IO (a file unreadable, empty or malformed),
 * F8_ERR_OUT_OF_MEMORY. An empty split is not an error here (val_fraction 0);
 * the batch calls report it. */
f8_status data_create(const data_config *config, data_set **ds, char *error, size_t error_size);

void data_destroy(data_set *ds);

/* Message of the last failing call on ds ("" if none). Owned by ds, valid
 * until the next failing call on it. */
const char *data_last_error(const data_set *ds);

/* The vocabulary in use (256, 50257 or 128256, or config vocab_size). */
int data_vocab_size(const data_set *ds);

/* Tokens in a split (0 for a bad split). */
int64_t data_tokens(const data_set *ds, data_split split);

/* One line describing the data, e.g. "corpus seed 1: 7549747 train +
 * 838861 val bytes". Owned by ds. */
const char *data_describe(const data_set *ds);

/* Number of positions a window of S+1 tokens can start at, in the train
 * split (every position) or the val split (every S-th position: the distinct
 * validation windows). 0 when the split is too short or S < 1. */
int64_t data_windows(const data_set *ds, data_split split, int S);

/* Train batch `micro` of optimizer step `step`: B rows of S tokens.
 *   [out] x[b*S + t] = w_b[t], y[b*S + t] = w_b[t + 1]   (b < B, t < S)
 * where w_b is a window of S+1 tokens at a position drawn by hashing
 * (sample_seed, step, micro, b). Pure: the same arguments give the same batch
 * on every call and platform. Distinct micro values give independent batches;
 * with data parallelism use micro = rank * accumulation + m. x and y hold B*S
 * int32 each. Errors: F8_ERR_INVALID_ARGUMENT (NULL, B < 1, S < 1, step < 0,
 * micro < 0), F8_ERR_SHAPE (no window fits), F8_ERR_IO (a token >= vocab_size;
 * x and y are then partly written). */
f8_status data_train_batch(data_set *ds, int64_t step, int micro, int B, int S, int32_t *x, int32_t *y);

/* Validation batches of B rows that cover the validation windows once:
 * ceil(data_windows(ds, DATA_SPLIT_VAL, S) / B); 0 when there is no window. */
int64_t data_val_batches(const data_set *ds, int B, int S);

/* Validation batch `index` (>= 0): row b is validation window
 * (index * B + b) mod data_windows(ds, DATA_SPLIT_VAL, S), so the last batch
 * wraps around to the first windows. Same layout and errors as
 * data_train_batch. */
f8_status data_val_batch(data_set *ds, int64_t index, int B, int S, int32_t *x, int32_t *y);

/* Unigram entropy in nats per token of the first max_tokens tokens of a split
 * (0: all of it; a shard dataset of billions of tokens wants a limit), for the
 * trainer's "loss to beat". [out] *nats. Errors: F8_ERR_INVALID_ARGUMENT,
 * F8_ERR_OUT_OF_MEMORY, F8_ERR_IO (a token >= vocab_size). */
f8_status data_unigram_entropy(data_set *ds, data_split split, int64_t max_tokens, double *nats);

#endif /* F8_TRAIN_DATA_H */
