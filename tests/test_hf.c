/*
 * test_hf.c — the Hugging Face GPT-2 mapping of train/hf.c without
 * transformers: a tiny GPT-2 file in the layout transformers writes (made
 * here with known values), imported into the trainer's model and checked
 * parameter by parameter (Conv1D transposes, tied padded head, wpe rows),
 * exported and compared with the original bit for bit; the shape read off
 * config.json or the tensors; refusals with their reasons; --init-from
 * through the trainer; the llm.c tokenizer file. tools/check_gpt2.py does
 * the same against transformers itself.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "hf_fixture.h"
#include "f8train.h"

enum { L = 2, C = 64, V = 300, P = 16, SEQ = 8 };
static char dir[64];


static int specs(spec *s, const char *prefix)
{
    int k = 0;
    for (int l = 0; l < L; l++) {
        const struct { const char *n; int64_t r, c; } b[] = {
            {"ln_1.weight", C, 0},     {"ln_1.bias", C, 0},     {"attn.c_attn.weight", C, 3 * C}, {"attn.c_attn.bias", 3 * C, 0},
            {"attn.c_proj.weight", C, C}, {"attn.c_proj.bias", C, 0}, {"ln_2.weight", C, 0}, {"ln_2.bias", C, 0},
            {"mlp.c_fc.weight", C, 4 * C}, {"mlp.c_fc.bias", 4 * C, 0}, {"mlp.c_proj.weight", 4 * C, C}, {"mlp.c_proj.bias", C, 0}};
        for (size_t j = 0; j < sizeof b / sizeof b[0]; j++, k++) {
            snprintf(s[k].name, sizeof s[k].name, "%sh.%d.%s", prefix, l, b[j].n);
            s[k].r = b[j].r, s[k].c = b[j].c;
        }
    }
    const struct { const char *n; int64_t r, c; } f[] = {{"ln_f.weight", C, 0}, {"ln_f.bias", C, 0}, {"wte.weight", V, C}, {"wpe.weight", P, C}};
    for (int j = 0; j < 4; j++, k++) {
        snprintf(s[k].name, sizeof s[k].name, "%s%s", prefix, f[j].n);
        s[k].r = f[j].r, s[k].c = f[j].c;
    }
    return k;
}

/* The JSON header of a safetensors file (NUL-terminated), or NULL. */
static char *read_header(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char len8[8];
    char *h = NULL;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = len << 8 | len8[i];
        if (len < (100u << 20) && (h = (char *)malloc((size_t)len + 1))) {
            if (fread(h, 1, (size_t)len, f) != (size_t)len) {
                free(h);
                h = NULL;
            } else {
                h[len] = '\0';
            }
        }
    }
    fclose(f);
    return h;
}

/* Write a GPT-2 (transformers' layout) into sub/, with or without config.json. */
static void write_gpt2(const char *sub, const char *prefix, const char *config, int lm_head)
{
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0777);
    spec s[64];
    int n = specs(s, prefix);
    hf_out_tensor t[64];
    memset(t, 0, sizeof t);
    for (int k = 0; k < n; k++) {
        memcpy(t[k].name, s[k].name, sizeof t[k].name);
        t[k].ndim = s[k].c ? 2 : 1;
        t[k].dims[0] = s[k].r, t[k].dims[1] = s[k].c;
        const int64_t cnt = s[k].r * (s[k].c ? s[k].c : 1);
        t[k].data = (float *)xmalloc((size_t)cnt * 4);
        for (int64_t i = 0; i < cnt; i++) t[k].data[i] = val(k, i);
    }
    if (lm_head) { /* an untied head: wte's values shifted */
        snprintf(t[n].name, sizeof t[n].name, "lm_head.weight");
        t[n].ndim = 2, t[n].dims[0] = V, t[n].dims[1] = C;
        t[n].data = (float *)xmalloc((size_t)(V * C) * 4);
        for (int64_t i = 0; i < V * C; i++) t[n].data[i] = val(n - 2, i) + 1.0f;
        n++;
    }
    snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, sub);
    CHECK(hf_write_safetensors(path, t, (size_t)n, err, sizeof err) == 0, "%s", err);
    for (int k = 0; k < n; k++) free(t[k].data);
    if (config) {
        snprintf(path, sizeof path, "%s/%s/config.json", dir, sub);
        FILE *f = fopen(path, "w");
        if (!f) die(path, NULL);
        fputs(config, f);
        fclose(f);
    }
}

static const char *CONFIG = "{\n  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                            "  \"n_embd\": 64,\n  \"n_head\": 2,\n  \"n_inner\": null,\n  \"n_layer\": 2,\n"
                            "  \"n_positions\": 16,\n  \"vocab_size\": 300\n}\n";

static void make_model(f8_ctx *ctx, gpt *m, int64_t heads, f8_dtype dt)
{
    gpt_config c;
    memset(&c, 0, sizeof c);
    c.vocab = V, c.padded_vocab = 384, c.seq = SEQ, c.layers = L, c.heads = heads, c.channels = C, c.batch = 1;
    c.fp8 = 1, c.dtype = dt, c.seed = 5;
    char err[256];
    if (gpt_create(ctx, &c, m, err, sizeof err) != F8_OK) die(err, ctx);
}

static float *host_of(f8_ctx *ctx, const f8_tensor *v)
{
    float *h = (float *)xmalloc((size_t)(v->rows * v->cols) * 4);
    if (v->dtype == F8_DTYPE_FP32) {
        CHECK_OK(ctx, f8_ctx_download(ctx, h, v->data, (size_t)(v->rows * v->cols) * 4));
    } else {
        uint16_t *b = (uint16_t *)xmalloc((size_t)(v->rows * v->cols) * 2);
        CHECK_OK(ctx, f8_ctx_download(ctx, b, v->data, (size_t)(v->rows * v->cols) * 2));
        for (int64_t i = 0; i < v->rows * v->cols; i++) h[i] = f8_bf16_to_float(b[i]);
        free(b);
    }
    return h;
}

/* Every parameter of m against the values write_gpt2 stored (rounded to BF16 when m is BF16). */
static void check_imported(f8_ctx *ctx, gpt *m, const char *what)
{
    spec s[64];
    specs(s, "");
    int bad = 0;
    const int bf = m->c.dtype == F8_DTYPE_BF16;
    for (int l = 0; l <= L; l++) {
        const hf_entry *tab = l < L ? hf_block_entries : hf_final_entries;
        const int cnt = l < L ? 12 : 2;
        for (int e = 0; e < cnt; e++) {
            const int k = l < L ? l * 12 + e : 2 * 12 + e;
            f8_tensor v;
            CHECK_OK(ctx, f8_module_param(hf_module_of(m, l, tab[e].where), tab[e].which, 0, &v));
            float *h = host_of(ctx, &v);
            for (int64_t r = 0; r < v.rows; r++)
                for (int64_t c = 0; c < v.cols; c++) {
                    /* f8 [out, in] = Conv1D [in, out] transposed */
                    const int64_t i = tab[e].conv1d ? c * v.rows + r : r * v.cols + c;
                    float want = val(k, i);
                    if (bf) want = f8_bf16_to_float(f8_bf16_from_float(want));
                    bad += h[r * v.cols + c] != want;
                }
            free(h);
        }
    }
    f8_tensor w, wpe = f8_tensor_make(m->wpe, m->c.dtype, SEQ, C);
    CHECK_OK(ctx, f8_module_param(m->head, F8_PARAM_WEIGHT, 0, &w));
    float *h = host_of(ctx, &w), *p = host_of(ctx, &wpe);
    for (int64_t i = 0; i < w.rows * C; i++) {
        float want = i < V * C ? val(2 * 12 + 2, i) : 0.0f; /* the padded rows are zero */
        if (bf) want = f8_bf16_to_float(f8_bf16_from_float(want));
        bad += h[i] != want;
    }
    for (int64_t i = 0; i < SEQ * C; i++) {
        float want = val(2 * 12 + 3, i);
        if (bf) want = f8_bf16_to_float(f8_bf16_from_float(want));
        bad += p[i] != want;
    }
    free(h);
    free(p);
    CHECK(bad == 0, "%s: %d imported values differ", what, bad);
}

static void import_export(void)
{
    char why[256], err[512] = "", path[256], out[256];
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) die(why, NULL);
    write_gpt2("hf", "transformer.", CONFIG, 0);
    snprintf(path, sizeof path, "%s/hf", dir);
    hf_config hc;
    CHECK(hf_read_config(path, &hc, err, sizeof err) == 0 && hc.layers == L && hc.heads == 2 && hc.channels == C &&
              hc.vocab == V && hc.positions == P, "config.json: %s", err);
    gpt m;
    make_model(ctx, &m, 2, F8_DTYPE_FP32);
    CHECK(hf_import(&m, path, err, sizeof err) == F8_OK, "import: %s", err);
    check_imported(ctx, &m, "fp32 import");

    /* export, then the file against the original tensor by tensor */
    snprintf(out, sizeof out, "%s/out", dir);
    CHECK(hf_export(&m, out, err, sizeof err) == F8_OK, "export: %s", err);
    snprintf(path, sizeof path, "%s/out/model.safetensors", dir);
    char *hdr = read_header(path);
    CHECK(hdr && strstr(hdr, "\"format\":\"pt\"") && strstr(hdr, "\"transformer.h.1.attn.c_attn.bias\":{\"dtype\":\"F32\",\"shape\":[192]") &&
              strstr(hdr, "\"transformer.h.0.mlp.c_fc.weight\":{\"dtype\":\"F32\",\"shape\":[64,256]") &&
              strstr(hdr, "\"transformer.wpe.weight\":{\"dtype\":\"F32\",\"shape\":[8,64]") && !strstr(hdr, "lm_head"),
          "export header: %s", hdr ? hdr : "(none)");
    free(hdr);
    f8_checkpoint *a = NULL, *b = NULL;
    snprintf(why, sizeof why, "%s/hf/model.safetensors", dir);
    CHECK_OK(ctx, f8_checkpoint_load(ctx, why, &a));
    CHECK_OK(ctx, f8_checkpoint_load(ctx, path, &b));
    spec s[64];
    const int n = specs(s, "transformer.");
    int differ = 0;
    for (int k = 0; a && b && k < n; k++) {
        const int64_t rows = strstr(s[k].name, "wpe") ? SEQ : s[k].c ? s[k].r : 1, cols = s[k].c ? s[k].c : s[k].r;
        float *x = (float *)xmalloc((size_t)(P * 4 * C * C)), *y = (float *)xmalloc((size_t)(P * 4 * C * C));
        f8_tensor tx = f8_tensor_make(x, F8_DTYPE_FP32, strstr(s[k].name, "wpe") ? P : rows, cols);
        f8_tensor ty = f8_tensor_make(y, F8_DTYPE_FP32, rows, cols);
        CHECK_OK(ctx, f8_checkpoint_read_tensor(a, s[k].name, &tx));
        CHECK_OK(ctx, f8_checkpoint_read_tensor(b, s[k].name, &ty));
        differ += memcmp(x, y, (size_t)(rows * cols) * 4) != 0;
        free(x);
        free(y);
    }
    CHECK(differ == 0, "%d exported tensors differ from the imported ones", differ);
    f8_checkpoint_destroy(a);
    f8_checkpoint_destroy(b);
    snprintf(path, sizeof path, "%s/out", dir);
    CHECK(hf_read_config(path, &hc, err, sizeof err) == 0 && hc.positions == SEQ && hc.heads == 2, "exported config: %s", err);
    gpt_destroy(&m);

    /* the hub's names (no "transformer."), no config.json: heads = C / 64 */
    write_gpt2("bare", "", NULL, 0);
    snprintf(path, sizeof path, "%s/bare/model.safetensors", dir);
    CHECK(hf_read_config(path, &hc, err, sizeof err) == 0 && hc.layers == L && hc.heads == 1 && hc.vocab == V &&
              hc.positions == P, "shape off the tensors: %s", err);
    make_model(ctx, &m, 1, F8_DTYPE_BF16);
    CHECK(hf_import(&m, path, err, sizeof err) == F8_OK, "bare import: %s", err);
    check_imported(ctx, &m, "bf16 import of a bare file");

    /* refusals, each with its reason, the model unchanged where checked first */
    write_gpt2("untied", "transformer.", CONFIG, 1);
    snprintf(path, sizeof path, "%s/untied", dir);
    err[0] = '\0';
    CHECK(hf_import(&m, path, err, sizeof err) != F8_OK && strstr(err, "2 heads"), "heads 1 vs 2 refused: %s", err);
    gpt_destroy(&m);
    make_model(ctx, &m, 2, F8_DTYPE_FP32);
    err[0] = '\0';
    CHECK(hf_import(&m, path, err, sizeof err) == F8_ERR_INVALID_ARGUMENT && strstr(err, "lm_head"), "untied: %s", err);
    gpt_destroy(&m);
    write_gpt2("relu", "transformer.", "{\"activation_function\": \"relu\", \"n_embd\": 64, \"n_head\": 2, "
                                       "\"n_layer\": 2, \"n_positions\": 16, \"vocab_size\": 300}", 0);
    snprintf(path, sizeof path, "%s/relu", dir);
    CHECK(hf_read_config(path, &hc, err, sizeof err) != 0 && strstr(err, "gelu_new"), "relu refused: %s", err);
    snprintf(path, sizeof path, "%s/none", dir);
    CHECK(hf_read_config(path, &hc, err, sizeof err) != 0, "a missing model refused: %s", err);
    f8_ctx_destroy(ctx);
}

/* --init-from through the trainer: its model is the GPT-2, and it trains. */
static void trainer_init_from(void)
{
    train_options o = train_options_default();
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s/hf", dir);
    o.init_from = path;
    o.backend = "cpu";
    o.seq = SEQ, o.batch = 2, o.grad_accum = 1, o.steps = 2, o.fp8 = 1;
    o.log = "", o.plot = "", o.quiet = 1, o.sample = 0;
    trainer *t = NULL;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "trainer --init-from: %s", err);
    if (!t) return;
    gpt *m = trainer_model(t);
    CHECK(m->c.layers == L && m->c.heads == 2 && m->c.channels == C && m->c.vocab == V, "the trainer's model shape");
    check_imported(m->ctx, m, "trainer --init-from");
    double loss = 0;
    CHECK_OK(NULL, trainer_step(t, &loss));
    CHECK(isfinite(loss) && loss > 0, "a step from the GPT-2: loss %g", loss);
    trainer_destroy(t);
    o.seq = P + 1;
    CHECK(trainer_create(&o, &t, err, sizeof err) != F8_OK && strstr(err, "positions"), "seq past n_positions: %s", err);
}

static void tokenizer_file(void)
{
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/tok.bin", dir);
    uint32_t h[256] = {20240328u, 2, 3, 2};
    FILE *f = fopen(path, "wb");
    if (!f) die(path, NULL);
    fwrite(h, 4, 256, f);
    const char *toks[3] = {"Hello", " world", "<|endoftext|>"};
    for (int i = 0; i < 3; i++) {
        unsigned char len = (unsigned char)strlen(toks[i]);
        fwrite(&len, 1, 1, f);
        fwrite(toks[i], 1, len, f);
    }
    fclose(f);
    tokenizer *t = NULL;
    CHECK(tokenizer_load(path, &t, err, sizeof err) == 0, "tokenizer: %s", err);
    if (t) {
        size_t len = 0;
        const char *s = tokenizer_decode(t, 1, &len);
        CHECK(tokenizer_vocab(t) == 3 && tokenizer_eot(t) == 2 && s && len == 6 && !memcmp(s, " world", 6), "decode");
        CHECK(tokenizer_decode(t, 3, &len) == NULL && tokenizer_decode(t, -1, &len) == NULL, "ids out of range");
        tokenizer_destroy(t);
    }
    h[0] = 1;
    f = fopen(path, "r+b");
    if (!f) die(path, NULL);
    fwrite(h, 4, 1, f);
    fclose(f);
    CHECK(tokenizer_load(path, &t, err, sizeof err) != 0 && strstr(err, "magic") && !t, "bad magic: %s", err);
    CHECK(truncate(path, 100) == 0, "truncate");
    CHECK(tokenizer_load(path, &t, err, sizeof err) != 0 && !t, "short file: %s", err);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/f8_hf_XXXXXX");
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    import_export();
    trainer_init_from();
    tokenizer_file();
    if (!test_failures) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cannot remove %s", dir);
    }
    return test_finish("test_hf");
}
