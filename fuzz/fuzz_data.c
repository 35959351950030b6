/*
 * fuzz_data.c — libFuzzer targets for the trainer's data loaders
 * (train/data.c): FUZZ_DATA_SHARDS (the default) reads the input as an llm.c
 * token shard, FUZZ_DATA_TEXT as a text file. The loader maps files, so each
 * input is written to one temporary file first (made once per process,
 * removed by f8_fuzz_teardown).
 *
 * Any input either is refused (F8_ERR_IO or F8_ERR_INVALID_ARGUMENT, with a
 * message, no dataset) or opens; an open dataset must then behave for a few
 * window lengths S: the split sizes add up to the file's tokens, every train
 * and validation batch either fits (every token < vocab, targets are the
 * inputs shifted by one, nothing written past B·S) or is refused with
 * F8_ERR_SHAPE (no window) or F8_ERR_IO (a token outside the vocabulary,
 * shards only), the same batch twice is the same bytes, and the unigram
 * entropy is finite and in [0, log vocab]. A broken property aborts.
 *
 * fuzz/replay_main.c and tests/test_fuzz_shards.c, test_fuzz_text.c run it over
 * fuzz/corpus_shards and fuzz/corpus_text with the normal toolchain.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "corpus.h"
#include "data.h"

#if !defined(FUZZ_DATA_SHARDS) && !defined(FUZZ_DATA_TEXT)
#define FUZZ_DATA_SHARDS 1
#endif

#include "fuzz.h"

static char fuzz_path_slot[64];

static void require(int cond)
{
    if (!cond) abort();
}

static const char *fuzz_file(void)
{
    if (!fuzz_path_slot[0]) {
        const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(fuzz_path_slot, sizeof fuzz_path_slot, "%.40s/f8_fuzz_data_XXXXXX", dir);
        int fd = mkstemp(fuzz_path_slot);
        require(fd >= 0);
        close(fd);
    }
    return fuzz_path_slot;
}

void f8_fuzz_teardown(void)
{
    if (fuzz_path_slot[0]) unlink(fuzz_path_slot);
    fuzz_path_slot[0] = 0;
}

static void write_input(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    require(f != NULL);
    require(size == 0 || fwrite(data, 1, size, f) == size);
    require(fclose(f) == 0);
}

/* One batch call's checks; returns the status. */
static f8_status check_batch_call(data_set *ds, int val, int64_t which, int B, int S, int32_t *x, int32_t *y)
{
    const size_t n = (size_t)B * (size_t)S;
    for (size_t i = 0; i < n + 4; i++) x[i] = y[i] = -7;
    f8_status st = val ? data_val_batch(ds, which, B, S, x, y) : data_train_batch(ds, which, 0, B, S, x, y);
    for (size_t i = n; i < n + 4; i++) require(x[i] == -7 && y[i] == -7); /* nothing past B·S */
    if (st != F8_OK) {
        require(st == F8_ERR_SHAPE || st == F8_ERR_IO);
        require(data_last_error(ds)[0] != 0);
        return st;
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) {
            int32_t a = x[(size_t)b * S + t], c = y[(size_t)b * S + t];
            require(a >= 0 && a < data_vocab_size(ds) && c >= 0 && c < data_vocab_size(ds));
            if (t + 1 < S) require(y[(size_t)b * S + t] == x[(size_t)b * S + t + 1]);
        }
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file();
    write_input(path, data, size);
    data_config c = data_config_default();
#ifdef FUZZ_DATA_TEXT
    c.source = DATA_SOURCE_TEXT;
    /* odd sizes use an ASCII vocabulary, so bytes >= 128 are out of range */
    c.vocab_size = size % 2 ? 128 : 0;
#else
    c.source = DATA_SOURCE_SHARDS;
    /* a small vocabulary on odd sizes: out-of-range tokens are reachable */
    c.vocab_size = size % 2 ? 300 : 0;
#endif
    c.path = path;
    c.val_fraction = (double)(size % 5) / 10.0;
    data_set *ds = (data_set *)&c;
    char err[512];
    f8_status st = data_create(&c, &ds, err, sizeof err);
    if (st != F8_OK) {
        require((st == F8_ERR_IO || st == F8_ERR_INVALID_ARGUMENT) && ds == NULL && err[0]);
        return 0;
    }
#ifdef FUZZ_DATA_TEXT
    const int64_t tokens = (int64_t)size;
#else
    const int64_t tokens = (int64_t)(size - 1024) / 2;
#endif
    require(data_tokens(ds, DATA_SPLIT_TRAIN) + data_tokens(ds, DATA_SPLIT_VAL) == tokens);
    require(data_describe(ds)[0] != 0);
    static const int Ss[3] = {1, 3, 17};
    int32_t x[4 * 17 + 4], y[4 * 17 + 4], x2[4 * 17 + 4], y2[4 * 17 + 4];
    for (int k = 0; k < 3; k++) {
        const int S = Ss[k], B = 1 + k;
        for (int val = 0; val <= 1; val++) {
            int64_t w = data_windows(ds, val ? DATA_SPLIT_VAL : DATA_SPLIT_TRAIN, S);
            require(w >= 0);
            for (int64_t i = 0; i < 3; i++) {
                f8_status a = check_batch_call(ds, val, i, B, S, x, y);
                if (w == 0) require(a == F8_ERR_SHAPE);
                f8_status b = check_batch_call(ds, val, i, B, S, x2, y2);
                require(a == b);
                const size_t n = (size_t)B * (size_t)S * sizeof *x;
                if (a == F8_OK) require(!memcmp(x, x2, n) && !memcmp(y, y2, n));
            }
            if (val) require(data_val_batches(ds, B, S) == (w + B - 1) / B);
        }
    }
    double h = -1;
    st = data_unigram_entropy(ds, DATA_SPLIT_TRAIN, 0, &h);
    if (st == F8_OK) require(h >= 0 && h <= log((double)data_vocab_size(ds)) + 1e-9);
    else require(st == F8_ERR_IO && data_last_error(ds)[0]);
    data_destroy(ds);
    return 0;
}
