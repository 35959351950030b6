/*
 * options_parse.c — f8_train's options read through the option table
 * (options.c): the command line (train_parse_args) and a --resume
 * checkpoint's train.* metadata (train_options_from_metadata), both strict
 * (parse.h), plus the recipe a run or checkpoint names.
 */
#include <stddef.h>
#include <string.h>

#include "parse.h"
#include "options.h"

/* --name value, through the one parser (parse.h); err names the option. */
static int opt_i64(const char *a, const char *v, int64_t lo, int64_t hi, int64_t *out, char *err, size_t n)
{
    return parse_int(a, v, lo, hi, out, err, n);
}

static int opt_f(const char *a, const char *v, double lo, double hi, float *out, char *err, size_t n)
{
    double d;
    if (parse_real(a, v, lo, hi, &d, err, n) != 0) return -1;
    *out = (float)d;
    return 0;
}

/* One of a fixed set of words. */
static int opt_word(const char *a, const char *v, const char *const *words, int count, int *index, char *err, size_t n)
{
    for (int i = 0; i < count; i++)
        if (strcmp(v, words[i]) == 0) return *index = i, 0;
    int k = snprintf(err, n, "%s = '%.40s': expected", a, v);
    for (int i = 0; i < count && k > 0 && (size_t)k < n; i++)
        k += snprintf(err + k, n - (size_t)k, "%s%s", i ? (i + 1 == count ? " or " : ", ") : " ", words[i]);
    return -1;
}

/* The value v of option d into o; 0, or -1 with the reason in err. */
static int set_option(train_options *o, const train_option_def *d, const char *v, char *err, size_t n)
{
    char *field = (char *)o + d->offset;
    int w = 0;
    int64_t k = 0;
    switch (d->kind) {
    case OPT_INT: return opt_i64(d->name, v, (int64_t)d->lo, (int64_t)d->hi, (int64_t *)(void *)field, err, n);
    case OPT_SEED:
        if (opt_i64(d->name, v, (int64_t)d->lo, (int64_t)d->hi, &k, err, n)) return -1;
        *(uint64_t *)(void *)field = (uint64_t)k;
        return 0;
    case OPT_REAL: return opt_f(d->name, v, d->lo, d->hi, (float *)(void *)field, err, n);
    case OPT_ON_OFF:
    case OPT_GRAPH:
        if (opt_word(d->name, v, d->words, d->n_words, &w, err, n)) return -1;
        *(int *)(void *)field = d->kind == OPT_GRAPH && w == 2 ? -1 : w;
        return 0;
    case OPT_BLOCKS: /* off, on (every block: the layers are known later), or a count */
        if (opt_word(d->name, v, d->words, d->n_words, &w, err, n) == 0) {
            *(int *)(void *)field = w ? TRAIN_RECOMPUTE_ALL : 0;
            return 0;
        }
        if (opt_i64(d->name, v, (int64_t)d->lo, (int64_t)d->hi, &k, err, n)) {
            snprintf(err, n, "%s = '%.40s': expected on, off or a number of blocks 0 to %d", d->name, v,
                     (int)d->hi);
            return -1;
        }
        *(int *)(void *)field = (int)k;
        return 0;
    case OPT_WORD:
        if (opt_word(d->name, v, d->words, d->n_words, &w, err, n)) return -1;
        *(const char **)(void *)field = d->words[w];
        return 0;
    case OPT_STRING: *(const char **)(void *)field = v; return 0;
    case OPT_COMPARE:
        if (o->n_compare == 4) {
            snprintf(err, n, "--compare: at most 4 logs");
            return -1;
        }
        o->compare[o->n_compare++] = v;
        return 0;
    default: return 0; /* --model: applied first */
    }
}

int train_parse_args(int argc, char **argv, train_options *o, FILE *out, char *err, size_t n)
{
    const uint64_t shape_bits = train_option_bit("--layers") | train_option_bit("--heads") |
                                train_option_bit("--channels") | train_option_bit("--seq");
    /* a preset first, so explicit sizes given before or after it win */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--model") == 0) {
            if (train_options_preset(o, argv[i + 1]) != 0) {
                snprintf(err, n, "--model %s: unknown preset (tiny, small, 50M, 124M, 350M, 1.3B, llama-tiny, llama-1B, llama-3B, llama-8B)", argv[i + 1]);
                return -1;
            }
            o->given |= shape_bits;
            o->from_preset |= shape_bits;
        }
    int n_options;
    const train_option_def *table = train_option_table(&n_options);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int x = train_option_index(a);
        const train_option_def *d = x >= 0 ? &table[x] : NULL;
        if (d && d->kind == OPT_HELP) {
            train_print_help(out);
            return 1;
        }
        if (d && d->kind == OPT_FLAG) {
            *(int *)(void *)((char *)o + d->offset) = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, n, "unexpected argument '%s' (see --help)", a);
            return -1;
        }
        if (i + 1 >= argc) {
            snprintf(err, n, "%s needs a value (see --help)", a);
            return -1;
        }
        const char *v = argv[++i];
        if (!d) {
            snprintf(err, n, "unknown option '%s' (see --help)", a);
            return -1;
        }
        if (set_option(o, d, v, err, n) != 0) {
            if (d->kind == OPT_COMPARE) return -1;
            size_t k2 = strlen(err);
            if (k2 + 16 < n) snprintf(err + k2, n - k2, " (see --help)");
            return -1;
        }
        /* the model options a --resume checkpoint records count as given (--dtype auto: whatever it has) */
        uint64_t bit = d->meta && d->kind != OPT_WORD ? (uint64_t)1 << x : 0;
        if (d->kind == OPT_WORD && d->offset == offsetof(train_options, dtype)) {
            bit = (uint64_t)1 << x;
            if (!strcmp(o->dtype, "auto")) o->given &= ~bit, bit = 0;
        }
        o->given |= bit;
        o->from_preset &= ~bit;
    }
    return train_check_conflicts(o, err, n);
}

/* ---- a checkpoint's model ------------------------------------------------------ */

static int meta_int(train_meta_fn get, void *user, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err,
                    size_t n)
{
    const char *v = get(user, key);
    if (!v) {
        snprintf(err, n, "the checkpoint has no %s: not written by f8_train", key);
        return -1;
    }
    return parse_int(key, v, lo, hi, out, err, n);
}

/* An on/off option recorded as metadata `key` (absent: off, as before the
 * option existed) into *out; the command line's value, if `flag` was given,
 * must match it. */
static int meta_flag(train_meta_fn get, void *user, const train_options *o, const char *key, const char *flag,
                     int given, int64_t *out, char *err, size_t n)
{
    const uint64_t bit = train_option_bit(flag);
    *out = 0;
    if (get(user, key) && meta_int(get, user, key, 0, 1, out, err, n)) return -1;
    if ((o->given & bit) && given != (int)*out) {
        snprintf(err, n, "%s %s conflicts with the checkpoint's %s = %lld (leave %s out or make it match)", flag,
                 given ? "on" : "off", key, (long long)*out, flag);
        return -1;
    }
    return 0;
}

f8_recipe train_recipe(f8_recipe_kind kind)
{
    f8_recipe r = f8_recipe_default();
    r.kind = kind;
    if (kind == F8_RECIPE_ROWWISE || kind == F8_RECIPE_ROWWISE_GW_HP) {
        r.format = F8_FORMAT_E4M3;
        r.power_2_scales = 1;
    }
    return r;
}

f8_recipe_kind train_checkpoint_recipe(const char *path)
{
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *tmp = NULL;
    f8_checkpoint *ck = NULL;
    f8_recipe_kind kind = F8_RECIPE_DELAYED;
    if (f8_ctx_create(&cc, &tmp, NULL, 0) == F8_OK && f8_checkpoint_load(tmp, path, &ck) == F8_OK) {
        const char *r = f8_checkpoint_metadata(ck, "train.recipe");
        for (int k = F8_RECIPE_DELAYED; r && k <= F8_RECIPE_ROWWISE_GW_HP; k++)
            if (strcmp(r, f8_recipe_kind_name((f8_recipe_kind)k)) == 0) kind = (f8_recipe_kind)k;
    }
    f8_checkpoint_destroy(ck);
    f8_ctx_destroy(tmp);
    return kind;
}

int train_options_from_metadata(train_options *o, train_meta_fn get, void *user, int64_t *vocab,
                                int64_t *padded_vocab, int64_t *step, char *err, size_t n)
{
    /* the shape: the table's four integer model options, their keys and limits */
    static const char *const flags[4] = {"--layers", "--heads", "--channels", "--seq"};
    const char *keys[4];
    uint64_t bits[4];
    int64_t lo[4], hi[4], *cur[4];
    int n_options;
    for (int i = 0; i < 4; i++) {
        const train_option_def *d = &train_option_table(&n_options)[train_option_index(flags[i])];
        keys[i] = d->meta;
        bits[i] = train_option_bit(flags[i]);
        lo[i] = (int64_t)d->lo, hi[i] = (int64_t)d->hi;
        cur[i] = (int64_t *)(void *)((char *)o + d->offset);
    }
    int64_t shape[4], fp8, v, pv, s;
    for (int i = 0; i < 4; i++)
        if (meta_int(get, user, keys[i], lo[i], hi[i], &shape[i], err, n)) return -1;
    if (meta_int(get, user, "train.vocab", 1, TRAIN_MAX_VOCAB, &v, err, n) ||
        meta_int(get, user, "train.padded_vocab", 1, TRAIN_MAX_VOCAB, &pv, err, n) ||
        meta_int(get, user, "train.fp8", 0, 1, &fp8, err, n) ||
        meta_int(get, user, "train.step", 0, TRAIN_MAX_STEPS, &s, err, n))
        return -1;
    if (shape[2] % shape[1]) {
        snprintf(err, n, "train.channels = %lld is not a multiple of train.heads = %lld", (long long)shape[2],
                 (long long)shape[1]);
        return -1;
    }
    if (pv != (v + 127) / 128 * 128) {
        snprintf(err, n, "train.padded_vocab = %lld is not train.vocab = %lld rounded up to 128", (long long)pv,
                 (long long)v);
        return -1;
    }
    const char *dt = get(user, "train.dtype");
    if (!dt || (strcmp(dt, "fp32") && strcmp(dt, "bf16"))) {
        snprintf(err, n, dt ? "train.dtype = '%.40s': expected fp32 or bf16" : "the checkpoint has no train.dtype%.0s: "
                              "not written by f8_train", dt ? dt : "");
        return -1;
    }
    const char *dtype = strcmp(dt, "bf16") == 0 ? "bf16" : "fp32";
    /* The scaling recipe the run was trained with (none: delayed, as before recipes existed). */
    static const char *const kinds[5] = {"delayed", "current", "block", "rowwise", "rowwise_with_gw_hp"};
    const char *rv = get(user, "train.recipe"), *kind = rv ? NULL : kinds[0];
    for (int i = 0; rv && i < 5; i++)
        if (strcmp(rv, kinds[i]) == 0) kind = kinds[i];
    if (!kind) {
        snprintf(err, n, "train.recipe = '%.40s': expected delayed, current, block, rowwise or rowwise_with_gw_hp", rv);
        return -1;
    }
    if (o->recipe && strcmp(o->recipe, kind) != 0) {
        snprintf(err, n, "--recipe %s conflicts with the checkpoint's train.recipe = %s: a resumed run keeps its "
                         "recipe (leave --recipe out or make it match)", o->recipe, kind);
        return -1;
    }
    /* What the command line asked for must be what the checkpoint holds. */
    for (int i = 0; i < 4; i++)
        if ((o->given & bits[i]) && *cur[i] != shape[i]) {
            snprintf(err, n, "%s %lld%s conflicts with the checkpoint's %s = %lld: a resumed run keeps its model "
                             "(leave the option out or make it match)", flags[i], (long long)*cur[i],
                     (o->from_preset & bits[i]) ? " (from --model)" : "", keys[i], (long long)shape[i]);
            return -1;
        }
    if ((o->given & train_option_bit("--fp8")) && o->fp8 != (int)fp8) {
        snprintf(err, n, "--fp8 %s conflicts with the checkpoint's train.fp8 = %lld (leave --fp8 out or make it match)",
                 o->fp8 ? "on" : "off", (long long)fp8);
        return -1;
    }
    /* the LM head in FP8, the blocks' weights FP8 primary, FP8 attention */
    int64_t head, fp8w, att, att_bwd;
    if (meta_flag(get, user, o, "train.fp8_head", "--fp8-head", o->fp8_head, &head, err, n) ||
        meta_flag(get, user, o, "train.fp8_weights", "--fp8-weights", o->fp8_weights, &fp8w,
                  err, n) ||
        meta_flag(get, user, o, "train.fp8_attention", "--fp8-attention", o->fp8_attention,
                  &att, err, n) ||
        meta_flag(get, user, o, "train.fp8_attention_backward", "--fp8-attention-backward",
                  o->fp8_attention_backward, &att_bwd, err, n))
        return -1;
    if ((o->given & train_option_bit("--dtype")) && strcmp(o->dtype, dtype)) {
        snprintf(err, n, "--dtype %s conflicts with the checkpoint's train.dtype = %s (leave --dtype out or make it "
                         "match)", o->dtype, dtype);
        return -1;
    }
    /* AdamW's moments as the library recorded them (none: FP32, as before the option) */
    const char *mv = get(user, "optimizer.moments"), *moments = mv ? NULL : "fp32";
    static const char *const forms[3] = {"fp32", "bf16", "fp8"};
    for (int i = 0; mv && i < 3; i++)
        if (strcmp(mv, forms[i]) == 0) moments = forms[i];
    if (!moments) {
        snprintf(err, n, "optimizer.moments = '%.40s': expected fp32, bf16 or fp8", mv);
        return -1;
    }
    if (o->adam_moments && strcmp(o->adam_moments, moments) != 0) {
        snprintf(err, n, "--adam-moments %s conflicts with the checkpoint's optimizer.moments = %s: a resumed run "
                         "keeps its optimizer state (leave --adam-moments out or make it match)", o->adam_moments,
                 moments);
        return -1;
    }
    o->adam_moments = moments;
    o->model = "custom";
    for (int i = 0; i < 4; i++) *cur[i] = shape[i];
    o->fp8 = (int)fp8;
    o->fp8_head = (int)head;
    o->fp8_weights = (int)fp8w;
    o->fp8_attention = (int)att;
    o->fp8_attention_backward = (int)att_bwd;
    o->dtype = dtype;
    o->recipe = kind;
    *vocab = v;
    *padded_vocab = pv;
    *step = s;
    return 0;
}
