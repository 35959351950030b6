/*
 * test_hf_doors.c — hostile files at f8_train's Hugging Face doors, through
 * the built program (F8_TRAIN, a subprocess: real exit codes and messages).
 * A tiny GPT-2 (config.json + model.safetensors, written here with the
 * public checkpoint API) is the good case; each bad file must exit 1 with a
 * message that names the file, the key or position, and the value:
 *   - config.json: a fraction, an absurd size, a size whose memory is past
 *     the machine's (refused by the estimate before anything is allocated),
 *     a string for a number, duplicate keys, a key hidden in a value;
 *   - model.safetensors with a NaN or an infinite weight (tensor, element);
 *   - eval-hf token files: an id >= vocab, negative, not a number, past
 *     64 bits, more tokens than positions + 1;
 *   - --tokenizer with a file that is not one: refused before training;
 *   - export and export-hf of a checkpoint whose train.* metadata is out of
 *     range, inconsistent or too large for memory.
 * And nothing lost: a GPT-2 of P positions fine-tuned at --seq S < P, saved,
 * resumed, saved again and exported with export-hf keeps all P rows of wpe:
 * the first S trained (changed), the other P - S bit for bit the import's,
 * n_positions P; `f8_train export` reads the same checkpoint.
 */
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "hf_fixture.h"

#ifndef F8_TRAIN
#define F8_TRAIN "build/f8_train"
#endif

enum { L = 2, C = 64, H = 2, V = 300, P = 16, SEQ = 8 };
static char dir[64];
static f8_ctx *ctx;


static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static const char *CONFIG = "{\"activation_function\": \"gelu_new\", \"n_embd\": 64, \"n_head\": 2, \"n_layer\": 2, "
                            "\"n_positions\": 16, \"vocab_size\": 300, \"layer_norm_epsilon\": 1e-05}";

/* A GPT-2 in sub/ (transformers' names), config.json given; tensor `bad`
 * (or none) gets `bad_value` at element bad_at. */
static void write_gpt2(const char *sub, const char *config, const char *bad, int64_t bad_at, float bad_value)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0777);
    static const struct { const char *n; int64_t r, c; } block[] = {
        {"ln_1.weight", 1, C}, {"ln_1.bias", 1, C}, {"attn.c_attn.weight", C, 3 * C}, {"attn.c_attn.bias", 1, 3 * C},
        {"attn.c_proj.weight", C, C}, {"attn.c_proj.bias", 1, C}, {"ln_2.weight", 1, C}, {"ln_2.bias", 1, C},
        {"mlp.c_fc.weight", C, 4 * C}, {"mlp.c_fc.bias", 1, 4 * C}, {"mlp.c_proj.weight", 4 * C, C},
        {"mlp.c_proj.bias", 1, C}};
    static const struct { const char *n; int64_t r, c; } top[] = {
        {"ln_f.weight", 1, C}, {"ln_f.bias", 1, C}, {"wte.weight", V, C}, {"wpe.weight", P, C}};
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    float *x = (float *)malloc((size_t)(V * C) * 4);
    int k = 0;
    for (int l = 0; l <= L; l++) {
        const int count = l < L ? 12 : 4;
        for (int j = 0; j < count; j++, k++) {
            char name[96];
            int64_t r = l < L ? block[j].r : top[j].r, c = l < L ? block[j].c : top[j].c;
            if (l < L) snprintf(name, sizeof name, "transformer.h.%d.%s", l, block[j].n);
            else snprintf(name, sizeof name, "transformer.%s", top[j].n);
            for (int64_t i = 0; i < r * c; i++) x[i] = val(k, i);
            if (strstr(name, "ln_") && strstr(name, ".weight"))
                for (int64_t i = 0; i < r * c; i++) x[i] = 1.0f + x[i] / 8; /* norms near 1 */
            if (bad && !strcmp(name, bad)) x[bad_at] = bad_value;
            f8_tensor t = f8_tensor_make(x, F8_DTYPE_FP32, r, c);
            CHECK_OK(ctx, f8_checkpoint_add_tensor(ck, name, &t));
        }
    }
    free(x);
    snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, sub);
    CHECK_OK(ctx, f8_checkpoint_save(ck, path));
    f8_checkpoint_destroy(ck);
    snprintf(path, sizeof path, "%s/%s/config.json", dir, sub);
    write_file(path, config);
}

/* eval-hf on sub/ with the token text; exit status, output in out. */
static int eval_hf(const char *sub, const char *tokens, char *out, size_t n)
{
    char path[256], args[512];
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    write_file(path, tokens);
    snprintf(args, sizeof args, "eval-hf %s/%s --tokens %s --backend cpu", dir, sub, path);
    return run(args, out, n);
}

/* rc 1 and every word in out */
static void refused(const char *what, int rc, const char *out, const char *w1, const char *w2, const char *w3)
{
    CHECK(rc == 1 && strstr(out, w1) && strstr(out, w2) && (!w3 || strstr(out, w3)),
          "%s: exit %d (wanted 1), output must name '%s', '%s', '%s':\n%s", what, rc, w1, w2, w3 ? w3 : "", out);
}

static void config_doors(void)
{
    static char out[1 << 16];
    write_gpt2("good", CONFIG, NULL, 0, 0);
    int rc = eval_hf("good", "1 2 3 4 5 6 7 8", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "loss "), "the good GPT-2: exit %d\n%s", rc, out);

    struct {
        const char *name, *config, *w1, *w2;
    } bad[] = {
        {"fraction", "{\"n_embd\": 64, \"n_head\": 2, \"n_layer\": 1.5, \"n_positions\": 16, \"vocab_size\": 300}",
         "\"n_layer\"", "1.5"},
        {"absurd", "{\"n_embd\": 64, \"n_head\": 2, \"n_layer\": 10000000, \"n_positions\": 16, \"vocab_size\": 300}",
         "\"n_layer\"", "10000000"},
        {"exponent", "{\"n_embd\": 6.4e1, \"n_head\": 2, \"n_layer\": 2, \"n_positions\": 16, \"vocab_size\": 300}",
         "\"n_embd\"", "6.4e1"},
        {"past64", "{\"n_embd\": 64, \"n_head\": 2, \"n_layer\": 2, \"n_positions\": 16, "
                   "\"vocab_size\": 99999999999999999999}", "\"vocab_size\"", "99999999999999999999"},
        {"negative", "{\"n_embd\": 64, \"n_head\": -2, \"n_layer\": 2, \"n_positions\": 16, \"vocab_size\": 300}",
         "\"n_head\"", "-2"},
        {"string", "{\"n_embd\": \"64\", \"n_head\": 2, \"n_layer\": 2, \"n_positions\": 16, \"vocab_size\": 300}",
         "\"n_embd\"", "a string"},
        {"duplicate", "{\"n_embd\": 64, \"n_head\": 2, \"n_layer\": 2, \"n_layer\": 3, \"n_positions\": 16, "
                      "\"vocab_size\": 300}", "\"n_layer\" appears twice", "byte 42"},
        /* the key's text inside another value is not the key: n_layer is missing */
        {"hidden", "{\"model_type\": \"\\\"n_layer\\\": 2\", \"n_embd\": 64, \"n_head\": 2, \"n_positions\": 16, "
                   "\"vocab_size\": 300}", "no \"n_layer\"", "config.json"},
        {"trailing", "{\"n_embd\": 64, \"n_head\": 2, \"n_layer\": 2, \"n_positions\": 16, \"vocab_size\": 300,}",
         "expected a key", "line 1"},
        {"ctx", "{\"n_embd\": 64, \"n_head\": 2, \"n_layer\": 2, \"n_positions\": 16, \"n_ctx\": 32, "
                "\"vocab_size\": 300}", "\"n_ctx\" 32", "16"},
        /* within every limit, but its memory is past any machine's: the estimate refuses before allocation */
        {"memory", "{\"n_embd\": 65536, \"n_head\": 1024, \"n_layer\": 1024, \"n_positions\": 16, "
                   "\"vocab_size\": 300}", "needs at least", "GiB"},
    };
    char sub[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(sub, sizeof sub, "cfg_%s", bad[i].name);
        write_gpt2(sub, bad[i].config, NULL, 0, 0);
        rc = eval_hf(sub, "1 2 3 4", out, sizeof out);
        refused(bad[i].name, rc, out, bad[i].w1, bad[i].w2, i < sizeof bad / sizeof bad[0] - 1 ? "config.json" : NULL);
    }

    /* non-finite weights: the tensor and the element named, exit 1 */
    write_gpt2("nan", CONFIG, "transformer.h.1.mlp.c_fc.weight", 1000, NAN);
    rc = eval_hf("nan", "1 2 3 4", out, sizeof out);
    refused("NaN weight", rc, out, "transformer.h.1.mlp.c_fc.weight", "element 1000", "NaN");
    write_gpt2("inf", CONFIG, "transformer.wpe.weight", 77, -INFINITY);
    rc = eval_hf("inf", "1 2 3 4", out, sizeof out);
    refused("-inf weight", rc, out, "transformer.wpe.weight", "element 77 ([1, 13]", "-inf");
}

static void token_doors(void)
{
    static char out[1 << 16];
    char many[256] = "";
    for (int i = 0; i < P + 2; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "%d ", i + 1);
    struct {
        const char *name, *tokens, *w1, *w2;
    } bad[] = {
        {"at vocab", "1 2\n3 300 4", "token 3 (line 2) '300'", "vocabulary"},
        {"negative", "1 -5 2", "token 1 (line 1) '-5'", "negative"},
        {"word", "1 2 x3 4", "token 2 (line 1) 'x3'", "not a token id"},
        {"suffix", "1 2 3x", "token 2 (line 1) '3x'", "not a token id"},
        {"past 64 bits", "1 18446744073709551617", "token 1 (line 1) '18446744073709551617'", "64 bits"},
        {"past int64", "1 9223372036854775808", "'9223372036854775808'", "64 bits"},
        {"too many", many, "token 17 (line 1) '18'", "positions"},
        {"one", "5", "1 token ids", "at least 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = eval_hf("good", bad[i].tokens, out, sizeof out);
        refused(bad[i].name, rc, out, bad[i].w1, bad[i].w2, "tokens.txt");
    }
    /* exactly positions + 1 tokens is one window: accepted */
    many[0] = 0;
    for (int i = 0; i < P + 1; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "%d\n", 299 - i);
    int rc = eval_hf("good", many, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "16 targets"), "positions + 1 tokens: exit %d\n%s", rc, out);
}

static void tokenizer_door(void)
{
    static char out[1 << 16];
    char path[256], args[768];
    snprintf(path, sizeof path, "%s/not_a_tokenizer.bin", dir);
    write_file(path, CONFIG);
    snprintf(args, sizeof args, "--backend cpu --steps 4 --log '' --plot '' --tokenizer %s", path);
    int rc = run(args, out, sizeof out);
    refused("--tokenizer not a tokenizer", rc, out, "not_a_tokenizer.bin", "tokenizer", NULL);
    CHECK(!strstr(out, "step "), "refused before any step:\n%s", out);
}

/* The exporters read an f8_train checkpoint's train.* metadata strictly and
 * estimate the model's memory before making it. */
static void export_doors(void)
{
    static char out[1 << 16];
    struct {
        const char *key, *value, *w1, *w2;
    } bad[] = {
        {"train.layers", "1000000", "train.layers", "1000000"},
        {"train.layers", "2.5", "train.layers", "2.5"},
        {"train.heads", "3", "multiple of train.heads", "3"},
        {"train.padded_vocab", "300", "train.padded_vocab = 300", "rounded up"},
        {"train.dtype", "fp16", "train.dtype", "fp16"},
        {"train.positions", "4", "train.positions", "4"},
        /* within every limit, but past the 1 TiB bound: refused before allocation */
        {"train.channels", "65536", "needs at least", "GiB"},
    };
    const char *keys[] = {"train.layers", "train.heads", "train.channels", "train.seq", "train.vocab",
                          "train.padded_vocab", "train.fp8", "train.dtype"};
    const char *good[] = {"2", "2", "64", "8", "300", "384", "0", "fp32"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f8_checkpoint *ck = NULL;
        CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
        for (int k = 0; k < 8; k++) {
            const int big = !strcmp(bad[i].key, "train.channels");
            const char *v = !strcmp(keys[k], bad[i].key) ? bad[i].value
                          : big && !strcmp(keys[k], "train.layers") ? "1024"
                          : big && !strcmp(keys[k], "train.heads") ? "1024" : good[k];
            CHECK_OK(ctx, f8_checkpoint_set_metadata(ck, keys[k], v));
        }
        if (!strcmp(bad[i].key, "train.positions")) CHECK_OK(ctx, f8_checkpoint_set_metadata(ck, bad[i].key, bad[i].value));
        char path[256], args[768];
        snprintf(path, sizeof path, "%s/meta.safetensors", dir);
        CHECK_OK(ctx, f8_checkpoint_save(ck, path));
        f8_checkpoint_destroy(ck);
        snprintf(args, sizeof args, "export-hf %s %s/meta_out", path, dir);
        int rc = run(args, out, sizeof out);
        refused(bad[i].key, rc, out, bad[i].w1, bad[i].w2, NULL);
        snprintf(args, sizeof args, "export %s %s/meta.onnx --backend cpu", path, dir);
        rc = run(args, out, sizeof out);
        refused(bad[i].key, rc, out, bad[i].w1, bad[i].w2, NULL);
    }
}

/* wpe [P, C] of a safetensors file as FP32 (names with or without "transformer.") */
static int read_wpe(const char *path, const char *name, float *w)
{
    f8_checkpoint *ck = NULL;
    if (f8_checkpoint_load(ctx, path, &ck) != F8_OK) return 0;
    f8_tensor t = f8_tensor_make(w, F8_DTYPE_FP32, P, C);
    f8_status st = f8_checkpoint_read_tensor(ck, name, &t);
    f8_checkpoint_destroy(ck);
    return st == F8_OK;
}

static void nothing_lost(void)
{
    static char out[1 << 16];
    char args[1024], path[256];
    snprintf(args, sizeof args,
             "--backend cpu --init-from %s/good --seq %d --batch 2 --steps 4 --log '' --plot '' --sample 0 "
             "--checkpoint %s/ft.safetensors", dir, SEQ, dir);
    int rc = run(args, out, sizeof out);
    CHECK(rc == 0 || rc == 2, "fine-tune at --seq %d: exit %d\n%s", SEQ, rc, out);
    /* resume two more steps: train.positions read back, all rows carried */
    snprintf(args, sizeof args, "--backend cpu --resume %s/ft.safetensors --steps 6 --log '' --plot '' --sample 0 "
             "--checkpoint %s/ft2.safetensors", dir, dir);
    rc = run(args, out, sizeof out);
    CHECK(rc == 0 || rc == 2, "resume: exit %d\n%s", rc, out);
    snprintf(args, sizeof args, "export-hf %s/ft2.safetensors %s/exported", dir, dir);
    rc = run(args, out, sizeof out);
    CHECK(rc == 0, "export-hf: exit %d\n%s", rc, out);

    static float a[P * C], b[P * C], c[P * C];
    snprintf(path, sizeof path, "%s/good/model.safetensors", dir);
    CHECK(read_wpe(path, "transformer.wpe.weight", a), "the import's wpe");
    snprintf(path, sizeof path, "%s/ft2.safetensors", dir);
    CHECK(read_wpe(path, "model.wpe", b), "the checkpoint's wpe is [%d, %d]: %s", P, C, f8_ctx_last_error(ctx));
    snprintf(path, sizeof path, "%s/exported/model.safetensors", dir);
    CHECK(read_wpe(path, "transformer.wpe.weight", c), "the export's wpe is [%d, %d]: %s", P, C,
          f8_ctx_last_error(ctx));
    CHECK(memcmp(a + SEQ * C, c + SEQ * C, (size_t)((P - SEQ) * C) * 4) == 0,
          "rows %d..%d of wpe, unused at --seq %d, must leave as they came", SEQ, P - 1, SEQ);
    CHECK(memcmp(b, c, sizeof b) == 0, "the export's wpe is the checkpoint's");
    int trained = 0;
    for (int r = 0; r < SEQ; r++) trained += memcmp(a + r * C, c + r * C, (size_t)C * 4) != 0;
    CHECK(trained == SEQ, "%d of the %d rows the run used were trained", trained, SEQ);

    snprintf(path, sizeof path, "%s/exported/config.json", dir);
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[k] = 0;
    if (f) fclose(f);
    CHECK(strstr(out, "\"n_positions\": 16,") && strstr(out, "\"n_ctx\": 16,"), "export's config:\n%s", out);
    /* the export imports again, at its full length */
    rc = eval_hf("exported", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "16 targets"), "eval-hf of the export over 17 tokens: exit %d\n%s", rc, out);
    /* the ONNX exporter reads the same checkpoint */
    snprintf(args, sizeof args, "export %s/ft2.safetensors %s/ft.onnx --backend cpu --quiet", dir, dir);
    rc = run(args, out, sizeof out);
    CHECK(rc == 0, "f8_train export of a checkpoint with more positions than seq: exit %d\n%s", rc, out);
}

int main(void)
{
    if (access(F8_TRAIN, X_OK) != 0) {
        fprintf(stderr, "test_hf_doors: %s is not built\n", F8_TRAIN);
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/f8_hf_doors_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    f8_ctx_config cc = f8_ctx_config_default();
    char err[256];
    if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK) return 1;
    config_doors();
    token_doors();
    tokenizer_door();
    export_doors();
    nothing_lost();
    f8_ctx_destroy(ctx);
    if (!test_failures) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cannot remove %s", dir);
    }
    return test_finish("test_hf_doors");
}
