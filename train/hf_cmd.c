/*
 * hf_cmd.c — the Hugging Face commands of f8_train (hf_cmd.h): eval-hf and
 * export-hf, for a GPT-2 (hf.h) or a Llama (hf_llama.h), whichever the
 * config.json or the checkpoint's train.family names. Apart from hf.c so
 * that the two mappings stay below the commands that choose between them.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"
#include "hf_cmd.h"
#include "hf_llama.h"
#include "options.h"

/* ---- the commands ---------------------------------------------------------------- */

static f8_ctx *cmd_ctx(const char *backend, f8_recipe_kind recipe, char *err, size_t n)
{
    f8_ctx_config cc = f8_ctx_config_default();
    cc.recipe = train_recipe(recipe);
    cc.backend = strcmp(backend, "cpu") == 0 ? F8_BACKEND_CPU : F8_BACKEND_CUDA;
    f8_ctx *ctx = NULL;
    f8_status st = f8_ctx_create(&cc, &ctx, err, n);
    if (st == F8_ERR_NO_DEVICE && strcmp(backend, "auto") == 0) {
        cc.backend = F8_BACKEND_CPU;
        st = f8_ctx_create(&cc, &ctx, err, n);
    }
    return st == F8_OK ? ctx : NULL;
}

/* FILE's token ids: decimal integers separated by whitespace, each in
 * [0, vocab), at most max_count of them. NULL with the reason in err (the
 * file, the token's index and line, its text): a negative id, one at or past
 * the vocabulary, one past 64 bits, a word that is not a number, too many
 * tokens. Nothing out of range ever reaches the model's embedding. */
static int32_t *read_tokens(const char *path, int64_t vocab, int64_t max_count, int64_t *count, char *err, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, n, "'%s': %s", path, strerror(errno));
        return NULL;
    }
    int64_t cap = 1024, k = 0, line = 1;
    int32_t *t = (int32_t *)malloc((size_t)cap * 4);
    const char *why = t ? NULL : "out of memory";
    char word[40];
    int ch = fgetc(f);
    while (!why) {
        while (ch != EOF && isspace(ch)) {
            if (ch == '\n') line++;
            ch = fgetc(f);
        }
        if (ch == EOF) break;
        size_t len = 0, all = 0; /* the word's first bytes, and its length */
        int sign = 0, other = 0, over = 0;
        uint64_t v = 0;
        for (; ch != EOF && !isspace(ch); ch = fgetc(f), all++) {
            if (len + 1 < sizeof word) word[len++] = isprint(ch) ? (char)ch : '?';
            if (all == 0 && ch == '-') sign = 1;
            else if (ch < '0' || ch > '9') other = 1;
            else if (!over && v > ((uint64_t)INT64_MAX - (uint64_t)(ch - '0')) / 10) over = 1;
            else if (!over) v = v * 10 + (uint64_t)(ch - '0');
        }
        word[len] = '\0';
        const char *ell = all > len ? "..." : "";
        if (other || all == (size_t)sign) why = "is not a token id (a decimal integer)";
        else if (over) why = "overflows 64 bits";
        else if (sign) why = "is negative";
        else if ((int64_t)v >= vocab) why = "is not below the vocabulary size";
        else if (k == max_count) why = "is one token more than the model's positions take (positions + 1)";
        if (why) {
            snprintf(err, n, "'%s': token %lld (line %lld) '%s%s' %s (vocabulary %lld, at most %lld tokens)", path,
                     (long long)k, (long long)line, word, ell, why, (long long)vocab, (long long)max_count);
            break;
        }
        if (k == cap) {
            int32_t *g = (int32_t *)realloc(t, (size_t)(cap *= 2) * 4);
            if (!g) {
                why = "out of memory";
                snprintf(err, n, "'%s': out of memory", path);
                break;
            }
            t = g;
        }
        t[k++] = (int32_t)v;
    }
    if (!why && ferror(f)) {
        why = "read";
        snprintf(err, n, "cannot read '%s'", path);
    }
    fclose(f);
    if (!why && k < 2) {
        why = "few";
        snprintf(err, n, "'%s': %lld token ids; at least 2 are needed (token i+1 is the target of token i)", path,
                 (long long)k);
    }
    if (why) {
        free(t);
        return NULL;
    }
    *count = k;
    return t;
}

int eval_hf_main(int argc, char **argv)
{
    const char *dir = NULL, *tokens_path = NULL, *backend = "auto", *dtype = "fp32";
    int fp8 = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tokens") && v) tokens_path = v, i++;
        else if (!strcmp(a, "--backend") && v) backend = v, i++;
        else if (!strcmp(a, "--dtype") && v) dtype = v, i++;
        else if (!strcmp(a, "--fp8") && v) fp8 = !strcmp(v, "on"), i++;
        else if (a[0] != '-' && !dir) dir = a;
        else dir = NULL, tokens_path = NULL, i = argc;
    }
    if (!dir || !tokens_path) {
        fprintf(stderr, "usage: f8_train eval-hf DIR|model.safetensors --tokens FILE [--backend auto|cpu|cuda]\n"
                        "                        [--dtype fp32|bf16] [--fp8 on|off]\n"
                        "  the mean next-token loss of a Hugging Face GPT-2 or Llama on FILE's token ids (whitespace-separated;\n"
                        "  token i+1 is the target of token i), FP8 off and FP32 by default\n");
        return 1;
    }
    char err[512] = "";
    hf_config hc;
    hf_llama_config lc; /* a LlamaForCausalLM (hf_llama.h) */
    const int llama = hf_llama_is(dir);
    int64_t n = 0;
    if (llama && hf_llama_read_config(dir, &lc, err, sizeof err) == 0) {
        hc.layers = lc.layers, hc.heads = lc.heads, hc.channels = lc.channels;
        hc.positions = lc.positions, hc.vocab = lc.vocab;
    } else if (llama || hf_read_config(dir, &hc, err, sizeof err) != 0) {
        fprintf(stderr, "f8_train eval-hf: %s\n", err);
        return 1;
    }
    /* one window: at most positions + 1 tokens (positions targets) */
    int32_t *tok = read_tokens(tokens_path, hc.vocab, hc.positions + 1, &n, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "f8_train eval-hf: %s\n", err);
        return 1;
    }
    f8_ctx *ctx = cmd_ctx(backend, F8_RECIPE_DELAYED, err, sizeof err);
    gpt m;
    memset(&m, 0, sizeof m);
    gpt_config c;
    memset(&c, 0, sizeof c);
    c.vocab = hc.vocab;
    c.padded_vocab = (hc.vocab + 127) / 128 * 128;
    c.seq = n - 1;
    c.layers = hc.layers, c.heads = hc.heads, c.channels = hc.channels;
    c.batch = 1;
    c.fp8 = fp8;
    c.dtype = strcmp(dtype, "bf16") == 0 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
    c.seed = 1;
    c.positions = hc.positions;
    if (llama) hf_llama_gpt_config(&lc, &c);
    f8_status st = ctx ? F8_OK : F8_ERR_NO_DEVICE;
    /* the model's memory against what there is, before anything is allocated */
    if (st == F8_OK && train_check_memory(&c, f8_ctx_backend(ctx) == F8_BACKEND_CUDA, err, sizeof err) != 0)
        st = F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = gpt_create(ctx, &c, &m, err, sizeof err);
    if (st == F8_OK) st = llama ? hf_llama_import(&m, dir, err, sizeof err) : hf_import(&m, dir, err, sizeof err);
    if (st == F8_OK) st = f8_ctx_upload(ctx, m.tokens, tok, (size_t)(n - 1) * 4);
    if (st == F8_OK) st = f8_ctx_upload(ctx, m.targets, tok + 1, (size_t)(n - 1) * 4);
    if (st == F8_OK) st = gpt_forward(&m, 1, 0, 1.0f, F8_MICROBATCH_NONE);
    float *losses = (float *)malloc((size_t)n * 4);
    if (st == F8_OK) st = losses ? f8_ctx_download(ctx, losses, m.losses, (size_t)(n - 1) * 4) : F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) {
        double sum = 0;
        for (int64_t i = 0; i < n - 1; i++) sum += losses[i];
        printf("eval-hf: %lld layers, %lld channels, vocab %lld, %s backend, %s, FP8 %s: %lld targets\n",
               (long long)c.layers, (long long)c.channels, (long long)c.vocab,
               f8_ctx_backend(ctx) == F8_BACKEND_CUDA ? "CUDA" : "CPU", f8_dtype_name(c.dtype), fp8 ? "on" : "off",
               (long long)(n - 1));
        printf("loss %.9g\n", sum / (double)(n - 1));
    } else {
        fprintf(stderr, "f8_train eval-hf: %s: %s\n", f8_status_string(st),
                err[0] ? err : ctx ? f8_ctx_last_error(ctx) : "no ctx");
    }
    free(losses);
    free(tok);
    gpt_destroy(&m);
    f8_ctx_destroy(ctx);
    return st == F8_OK ? 0 : 1;
}

int export_hf_main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: f8_train export-hf CHECKPOINT OUT_DIR\n"
                        "  writes OUT_DIR/model.safetensors and config.json: a GPT-2 (or Llama) that transformers'\n"
                        "  GPT2LMHeadModel (LlamaForCausalLM).from_pretrained(OUT_DIR) loads (FP32; n_positions = the model's, an import's own)\n");
        return 1;
    }
    char err[512] = "";
    /* the checkpoint's recipe, so its FP8 state restores (only parameters go out) */
    f8_ctx *ctx = cmd_ctx("cpu", train_checkpoint_recipe(argv[2]), err, sizeof err);
    f8_checkpoint *ck = NULL;
    gpt m;
    memset(&m, 0, sizeof m);
    f8_status st = ctx ? f8_checkpoint_load(ctx, argv[2], &ck) : F8_ERR_NO_DEVICE;
    if (st != F8_OK && ctx) snprintf(err, sizeof err, "cannot load '%s': %s", argv[2], f8_ctx_last_error(ctx));
    gpt_config c;
    if (st == F8_OK && hf_checkpoint_model(ck, 1, &c, err, sizeof err) != 0) st = F8_ERR_INVALID_ARGUMENT;
    if (st == F8_OK) st = gpt_create(ctx, &c, &m, err, sizeof err);
    if (st == F8_OK) st = gpt_checkpoint_restore(&m, ck);
    if (st != F8_OK && !err[0]) snprintf(err, sizeof err, "%s", f8_ctx_last_error(ctx));
    f8_checkpoint_destroy(ck);
    ck = NULL;
    if (st == F8_OK) st = c.llama ? hf_llama_export(&m, argv[3], err, sizeof err) : hf_export(&m, argv[3], err, sizeof err);
    if (st == F8_OK) printf("export-hf: %s -> %s/model.safetensors, %s/config.json\n", argv[2], argv[3], argv[3]);
    else fprintf(stderr, "f8_train export-hf: %s: %s\n", f8_status_string(st), err);
    gpt_destroy(&m);
    f8_ctx_destroy(ctx);
    return st == F8_OK ? 0 : 1;
}
