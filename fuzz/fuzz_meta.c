/*
 * fuzz_meta.c — the libFuzzer target for f8_train's reading of numbers it is
 * given: a checkpoint's train.* metadata (train_options_from_metadata) and
 * the command line (train_parse_args), both through parse.h.
 *
 * The input is lines. The first byte picks which shape options count as
 * given on the command line; the rest, split at '\n', is read twice: as
 * "key=value" metadata pairs, and as the argv of f8_train. Either call
 * refuses (a message, the options unchanged) or succeeds with every value
 * inside the trainer's limits and consistent (channels a multiple of heads,
 * padded vocab = vocab rounded up to 128, given options equal to the
 * checkpoint's). parse_int's and parse_real's results are also checked
 * against strtoll/strtod on every value. A broken property aborts.
 *
 * tests/test_fuzz_meta.c replays fuzz/corpus_meta with the normal toolchain.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "trainer.h"

#include "fuzz.h"

#define MAX_LINES 64

static FILE *devnull_slot;

void f8_fuzz_teardown(void)
{
    if (devnull_slot) fclose(devnull_slot);
    devnull_slot = NULL;
}

static void require(int cond)
{
    if (!cond) abort();
}

typedef struct table {
    char *key[MAX_LINES], *value[MAX_LINES];
    int n;
} table;

static const char *get(void *user, const char *key)
{
    const table *t = (const table *)user;
    for (int i = 0; i < t->n; i++) /* the first pair of a key wins, as a parser's duplicate check would refuse */
        if (strcmp(t->key[i], key) == 0) return t->value[i];
    return NULL;
}

static void check_numbers(const char *s)
{
    char err[256];
    int64_t i = 12345;
    if (parse_int("x", s, INT64_MIN, INT64_MAX, &i, err, sizeof err) == 0) {
        char *end;
        require(strtoll(s, &end, 10) == i && *end == 0);
    } else
        require(err[0] && i == 12345);
    double d = 0.5;
    if (parse_real("x", s, -1e300, 1e300, &d, err, sizeof err) == 0) {
        char *end;
        require(strtod(s, &end) == d && *end == 0 && d >= -1e300 && d <= 1e300);
    } else
        require(err[0] && d == 0.5);
}

static void check_model(const train_options *o)
{
    require(o->layers >= 1 && o->layers <= TRAIN_MAX_LAYERS && o->heads >= 1 && o->heads <= TRAIN_MAX_HEADS);
    require(o->channels >= 1 && o->channels <= TRAIN_MAX_CHANNELS && o->seq >= 2 && o->seq <= TRAIN_MAX_SEQ);
    require(o->channels % o->heads == 0 && (o->fp8 == 0 || o->fp8 == 1));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!devnull_slot) devnull_slot = fopen("/dev/null", "w");
    require(devnull_slot != NULL);
    if (size == 0) return 0;
    /* bits 0..5 of the first byte: --layers, --heads, --channels, --seq, --fp8, --dtype given */
    static const char *const model_options[6] = {"--layers", "--heads", "--channels", "--seq", "--fp8", "--dtype"};
    uint64_t given = 0;
    for (int b = 0; b < 6; b++)
        if (data[0] >> b & 1) given |= train_option_bit(model_options[b]);
    char *text = (char *)malloc(size);
    require(text != NULL);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    char *lines[MAX_LINES + 1];
    int n = 0;
    for (char *at = text; n < MAX_LINES;) {
        lines[n++] = at;
        char *nl = strchr(at, '\n');
        if (!nl) break;
        *nl = 0;
        at = nl + 1;
    }
    /* metadata */
    table t = {{0}, {0}, 0};
    for (int i = 0; i < n; i++) {
        char *eq = strchr(lines[i], '=');
        check_numbers(eq ? eq + 1 : lines[i]);
        if (!eq) continue;
        t.key[t.n] = lines[i];
        t.value[t.n++] = eq + 1;
    }
    for (int i = 0; i < t.n; i++) *(t.value[i] - 1) = 0; /* split at '=' */
    train_options o = train_options_default(), before;
    o.given = given;
    memcpy(&before, &o, sizeof o);
    int64_t vocab = -1, padded = -1, step = -1;
    char err[512] = "";
    if (train_options_from_metadata(&o, get, &t, &vocab, &padded, &step, err, sizeof err) == 0) {
        check_model(&o);
        require(vocab >= 1 && vocab <= TRAIN_MAX_VOCAB && padded == (vocab + 127) / 128 * 128);
        require(step >= 0 && step <= TRAIN_MAX_STEPS);
        require(!strcmp(o.dtype, "fp32") || !strcmp(o.dtype, "bf16"));
        if (given & train_option_bit("--layers")) require(o.layers == before.layers);
        if (given & train_option_bit("--seq")) require(o.seq == before.seq);
        if (given & train_option_bit("--fp8")) require(o.fp8 == before.fp8);
    } else {
        require(err[0] && !memcmp(&o, &before, sizeof o) && vocab == -1 && step == -1);
    }
    for (int i = 0; i < t.n; i++) *(t.value[i] - 1) = '=';
    /* command line */
    char *argv[MAX_LINES + 2];
    argv[0] = "f8_train";
    for (int i = 0; i < n; i++) argv[i + 1] = lines[i];
    argv[n + 1] = NULL;
    o = train_options_default();
    err[0] = 0;
    int r = train_parse_args(n + 1, argv, &o, devnull_slot, err, sizeof err);
    require(r >= -1 && r <= 1);
    if (r < 0) require(err[0] != 0);
    if (r == 0) {
        check_model(&o);
        require(o.steps >= 1 && o.steps <= TRAIN_MAX_STEPS && o.n_compare >= 0 && o.n_compare <= 4);
        require(!(o.text && o.data) && !(o.val_data && !o.data));
        require(o.lr >= 0 && o.lr <= 10 && o.temperature >= 1e-3f && o.grad_clip >= 0);
    }
    free(text);
    return 0;
}
