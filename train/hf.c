/*
 * hf.c — GPT-2 checkpoints of Hugging Face transformers in and out (hf.h).
 *
 * Design note. The file is read on a CPU ctx (host memory) with f8's
 * safetensors hf_reader, each tensor transposed on the host where GPT-2's
 * Conv1D stores [in, out], then uploaded through one FP32 staging buffer and
 * converted into the model's dtype on its own ctx; weights go through
 * f8_module_write_weight so no FP8 workspace keeps a cast of the old values.
 * The mapping is one table (names, the module and parameter they fill,
 * whether transposed), used in both directions. Export writes its own small
 * safetensors file rather than an f8_checkpoint: transformers wants the
 * metadata "format": "pt" and 1-D biases, and f8 checkpoints say "f8" and
 * store [rows, cols].
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf.h"
#include "options.h"
#include "try.h"


/* ---- paths and config.json -------------------------------------------------- */

static int is_dir(const char *p)
{
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

/* dir/name, or the file's own directory + name when path is a file. */
static void sibling(const char *path, const char *name, char *out, size_t n)
{
    if (is_dir(path)) {
        snprintf(out, n, "%s/%s", path, name);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, n, "%s", name);
    else snprintf(out, n, "%.*s/%s", (int)(slash - path), path, name);
}

static void weights_path(const char *path, char *out, size_t n)
{
    if (is_dir(path)) snprintf(out, n, "%s/model.safetensors", path);
    else snprintf(out, n, "%s", path);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size >= 0 && size < (1 << 24) && fseek(f, 0, SEEK_SET) == 0 && (buf = (char *)malloc((size_t)size + 1))) {
        if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        } else {
            buf[size] = '\0';
        }
    }
    fclose(f);
    return buf;
}

/* The value after "key": in a flat JSON object (config.json is one): a
 * pointer at its first character, or NULL when the key is absent. */
static const char *json_value(const char *text, const char *key)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(text, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != ':') return NULL;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static int json_int(const char *text, const char *key, int64_t *out)
{
    const char *v = json_value(text, key);
    if (!v) return 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v) return 0;
    *out = x;
    return 1;
}

char *hf_read_header(const char *path)
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

/* The 2-D "shape" of tensor name in a safetensors header. */
static int json_shape(const char *hdr, const char *name, int64_t d[2])
{
    char pat[160];
    snprintf(pat, sizeof pat, "\"%s\"", name);
    const char *p = strstr(hdr, pat);
    if (!p || !(p = strstr(p, "\"shape\"")) || !(p = strchr(p, '['))) return 0;
    return sscanf(p, "[%lld ,%lld]", (long long *)&d[0], (long long *)&d[1]) == 2;
}

/* ---- the checkpoint's tensors ----------------------------------------------- */

typedef struct hf_reader {
    f8_ctx *ctx;          /* CPU: the tensors land in host memory */
    f8_checkpoint *ck;
    const char *prefix;   /* "transformer." or "" (the hub's original files) */
    uint16_t *bf16;       /* scratch for BF16 files */
} hf_reader;

/* Read name ([rows, cols], or [n] as [1, n]) into host FP32. */
static f8_status read_f32(hf_reader *r, const char *name, int64_t rows, int64_t cols, float *out, char *err, size_t n)
{
    char full[128];
    snprintf(full, sizeof full, "%s%s", r->prefix, name);
    if (!f8_checkpoint_has(r->ck, full)) {
        snprintf(err, n, "the GPT-2 checkpoint has no tensor %s", full);
        return F8_ERR_INVALID_ARGUMENT;
    }
    f8_tensor t = f8_tensor_make(out, F8_DTYPE_FP32, rows, cols);
    f8_status st = f8_checkpoint_read_tensor(r->ck, full, &t);
    if (st == F8_ERR_DTYPE) { /* a BF16 file */
        uint16_t *b = (uint16_t *)realloc(r->bf16, (size_t)(rows * cols) * 2 + 2);
        if (!b) return F8_ERR_OUT_OF_MEMORY;
        r->bf16 = b;
        t = f8_tensor_make(b, F8_DTYPE_BF16, rows, cols);
        st = f8_checkpoint_read_tensor(r->ck, full, &t);
        for (int64_t i = 0; st == F8_OK && i < rows * cols; i++) out[i] = f8_bf16_to_float(b[i]);
    }
    if (st != F8_OK) snprintf(err, n, "%s: %s (FP32 or BF16 expected)", full, f8_ctx_last_error(r->ctx));
    return st;
}

static void transpose_host(const float *src, int64_t rows, int64_t cols, float *dst) /* dst [cols, rows] */
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}

/* ---- the mapping ----------------------------------------------------------------- */


const hf_entry hf_block_entries[HF_BLOCK_ENTRIES] = {
    {"ln_1.weight", AT_QKV, F8_PARAM_LN_WEIGHT, 0},     {"ln_1.bias", AT_QKV, F8_PARAM_LN_BIAS, 0},
    {"attn.c_attn.weight", AT_QKV, F8_PARAM_WEIGHT, 1}, {"attn.c_attn.bias", AT_QKV, F8_PARAM_BIAS, 0},
    {"attn.c_proj.weight", AT_PROJ, F8_PARAM_WEIGHT, 1}, {"attn.c_proj.bias", AT_PROJ, F8_PARAM_BIAS, 0},
    {"ln_2.weight", AT_MLP, F8_PARAM_LN_WEIGHT, 0},     {"ln_2.bias", AT_MLP, F8_PARAM_LN_BIAS, 0},
    {"mlp.c_fc.weight", AT_MLP, F8_PARAM_FC1_WEIGHT, 1}, {"mlp.c_fc.bias", AT_MLP, F8_PARAM_FC1_BIAS, 0},
    {"mlp.c_proj.weight", AT_MLP, F8_PARAM_FC2_WEIGHT, 1}, {"mlp.c_proj.bias", AT_MLP, F8_PARAM_FC2_BIAS, 0},
};
const hf_entry hf_final_entries[HF_FINAL_ENTRIES] = {{"ln_f.weight", AT_HEAD, F8_PARAM_LN_WEIGHT, 0},
                                                     {"ln_f.bias", AT_HEAD, F8_PARAM_LN_BIAS, 0}};

f8_module *hf_module_of(gpt *m, int64_t l, hf_part p)
{
    return p == AT_QKV ? m->blocks[l].qkv : p == AT_PROJ ? m->blocks[l].proj : p == AT_MLP ? m->blocks[l].mlp : m->head;
}

static int is_weight(f8_param w) { return w == F8_PARAM_WEIGHT || w == F8_PARAM_FC1_WEIGHT || w == F8_PARAM_FC2_WEIGHT; }

/* host FP32 [view's shape] -> a parameter (or any view) of the model. */
static f8_status param_put(gpt *m, f8_module *mod, f8_param which, f8_tensor *view, const float *host, void *stage)
{
    const size_t bytes = (size_t)(view->rows * view->cols) * 4;
    f8_tensor src = f8_tensor_make(stage, F8_DTYPE_FP32, view->rows, view->cols);
    TRY(f8_ctx_upload(m->ctx, stage, host, bytes));
    if (mod && is_weight(which)) TRY(f8_module_write_weight(mod, which, &src));
    else TRY(f8_tensor_convert(m->ctx, &src, view));
    return f8_ctx_synchronize(m->ctx); /* the stage is reused */
}

/* a view of the model -> host FP32. */
static f8_status param_get(gpt *m, const f8_tensor *view, float *host, void *stage)
{
    f8_tensor dst = f8_tensor_make(stage, F8_DTYPE_FP32, view->rows, view->cols);
    TRY(f8_tensor_convert(m->ctx, view, &dst));
    return f8_ctx_download(m->ctx, host, stage, (size_t)(view->rows * view->cols) * 4);
}

int hf_read_config(const char *path, hf_config *c, char *err, size_t n)
{
    char p[1024];
    memset(c, 0, sizeof *c);
    sibling(path, "config.json", p, sizeof p);
    char *text = read_text(p);
    if (text) {
        int64_t inner = -1, pos = 0;
        int ok = json_int(text, "n_layer", &c->layers) && json_int(text, "n_head", &c->heads) &&
                 json_int(text, "n_embd", &c->channels) && json_int(text, "vocab_size", &c->vocab);
        if (json_int(text, "n_positions", &pos) || json_int(text, "n_ctx", &pos)) c->positions = pos;
        const char *act = json_value(text, "activation_function"), *eps = json_value(text, "layer_norm_epsilon");
        json_int(text, "n_inner", &inner);
        const char *why = !ok ? "n_layer, n_head, n_embd or vocab_size missing"
                        : c->positions < 1 ? "n_positions missing"
                        : (act && strncmp(act, "\"gelu_new\"", 10) && strncmp(act, "\"gelu_pytorch_tanh\"", 19))
                            ? "activation_function is not gelu_new (f8's GELU is the tanh form)"
                        : (eps && fabs(strtod(eps, NULL) - 1e-5) > 1e-12) ? "layer_norm_epsilon is not 1e-5"
                        : (inner != -1 && inner != 4 * c->channels) ? "n_inner is not 4 * n_embd"
                        : (c->channels % c->heads) ? "n_embd is not a multiple of n_head"
                        : NULL;
        free(text);
        if (why) {
            snprintf(err, n, "%s: %s", p, why);
            return -1;
        }
        return 0;
    }
    /* no config.json: the shape from the safetensors header, head_dim 64 as
     * every GPT-2 size has */
    char ws[1024];
    weights_path(path, ws, sizeof ws);
    char *hdr = hf_read_header(ws);
    if (!hdr) {
        snprintf(err, n, "no %s and cannot read the header of '%s'", p, ws);
        return -1;
    }
    const char *pre = strstr(hdr, "\"transformer.wte.weight\"") ? "transformer." : "";
    int64_t d[2], e[2];
    char name[128];
    snprintf(name, sizeof name, "%swte.weight", pre);
    int ok = json_shape(hdr, name, d);
    snprintf(name, sizeof name, "%swpe.weight", pre);
    ok = ok && json_shape(hdr, name, e);
    for (c->layers = 0; ok; c->layers++) {
        snprintf(name, sizeof name, "\"%sh.%lld.ln_1.weight\"", pre, (long long)c->layers);
        if (!strstr(hdr, name)) break;
    }
    free(hdr);
    if (!ok || c->layers == 0 || d[1] % 64) {
        snprintf(err, n, "no %s, and '%s' does not look like a GPT-2 (wte, wpe, h.N.*)", p, ws);
        return -1;
    }
    c->vocab = d[0];
    c->channels = d[1];
    c->positions = e[0];
    c->heads = c->channels / 64;
    return 0;
}

f8_status hf_import(gpt *m, const char *path, char *err, size_t n)
{
    const gpt_config *c = &m->c;
    const int64_t C = c->channels, V = c->vocab, Vp = c->padded_vocab;
    hf_config hc;
    if (hf_read_config(path, &hc, err, n) != 0) return F8_ERR_INVALID_ARGUMENT;
    if (hc.layers != c->layers || hc.channels != C || hc.vocab != V || hc.heads != c->heads || c->seq > hc.positions) {
        snprintf(err, n, "the GPT-2 has %lld layers, %lld heads, %lld channels, vocab %lld, %lld positions; the model "
                 "%lld, %lld, %lld, %lld, seq %lld", (long long)hc.layers, (long long)hc.heads, (long long)hc.channels,
                 (long long)hc.vocab, (long long)hc.positions, (long long)c->layers, (long long)c->heads, (long long)C,
                 (long long)V, (long long)c->seq);
        return F8_ERR_SHAPE;
    }
    char ws[1024];
    weights_path(path, ws, sizeof ws);
    hf_reader r = {NULL, NULL, "", NULL};
    f8_ctx_config cc = f8_ctx_config_default();
    f8_status st = f8_ctx_create(&cc, &r.ctx, err, n);
    if (st != F8_OK) return st;
    if ((st = f8_checkpoint_load(r.ctx, ws, &r.ck)) != F8_OK)
        snprintf(err, n, "cannot read '%s': %s", ws, f8_ctx_last_error(r.ctx));
    if (st == F8_OK) r.prefix = f8_checkpoint_has(r.ck, "transformer.wte.weight") ? "transformer." : "";
    const size_t big = (size_t)((Vp > hc.positions ? Vp : hc.positions) * C) + (size_t)(16 * C * C);
    float *a = (float *)calloc(big, 4), *b = (float *)calloc(big, 4);
    void *stage = NULL;
    if (st == F8_OK && (!a || !b)) st = F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = f8_ctx_alloc(m->ctx, big * 4, &stage);
    char name[128];
    for (int64_t l = 0; st == F8_OK && l < c->layers + 1; l++) {
        const hf_entry *tab = l < c->layers ? hf_block_entries : hf_final_entries;
        const size_t count = l < c->layers ? HF_BLOCK_ENTRIES : HF_FINAL_ENTRIES;
        for (size_t e = 0; st == F8_OK && e < count; e++) {
            f8_module *mod = hf_module_of(m, l, tab[e].where);
            f8_tensor v;
            if ((st = f8_module_param(mod, tab[e].which, 0, &v)) != F8_OK) break;
            if (l < c->layers) snprintf(name, sizeof name, "h.%lld.%s", (long long)l, tab[e].name);
            else snprintf(name, sizeof name, "%s", tab[e].name);
            if (tab[e].conv1d) {
                st = read_f32(&r, name, v.cols, v.rows, b, err, n); /* [in, out] */
                if (st == F8_OK) transpose_host(b, v.cols, v.rows, a);
            } else {
                st = read_f32(&r, name, v.rows, v.cols, a, err, n);
            }
            if (st == F8_OK && (st = param_put(m, mod, tab[e].which, &v, a, stage)) != F8_OK)
                snprintf(err, n, "%s: %s", name, f8_ctx_last_error(m->ctx));
        }
    }
    /* wte into the tied head's weight [Vp, C], padding rows zero; wpe's first seq rows */
    if (st == F8_OK) {
        memset(a, 0, (size_t)(Vp * C) * 4);
        st = read_f32(&r, "wte.weight", V, C, a, err, n);
    }
    f8_tensor w;
    if (st == F8_OK) st = f8_module_param(m->head, F8_PARAM_WEIGHT, 0, &w);
    if (st == F8_OK) st = param_put(m, m->head, F8_PARAM_WEIGHT, &w, a, stage);
    if (st == F8_OK) st = read_f32(&r, "wpe.weight", hc.positions, C, a, err, n);
    f8_tensor wpe = f8_tensor_make(m->wpe, c->dtype, c->seq, C);
    if (st == F8_OK) st = param_put(m, NULL, F8_PARAM_WEIGHT, &wpe, a, stage);
    if (st == F8_OK && f8_checkpoint_has(r.ck, "lm_head.weight")) {
        /* f8's head is tied: an lm_head.weight that is not wte is refused, not dropped */
        const char *pre = r.prefix;
        st = read_f32(&r, "wte.weight", V, C, a, err, n);
        r.prefix = "";
        if (st == F8_OK) st = read_f32(&r, "lm_head.weight", V, C, b, err, n);
        r.prefix = pre;
        if (st == F8_OK && memcmp(a, b, (size_t)(V * C) * 4) != 0) {
            snprintf(err, n, "lm_head.weight differs from wte.weight: f8's GPT ties them");
            st = F8_ERR_INVALID_ARGUMENT;
        }
    }
    if (st != F8_OK && !err[0]) snprintf(err, n, "%s", f8_ctx_last_error(m->ctx));
    f8_ctx_free(m->ctx, stage);
    free(a);
    free(b);
    free(r.bf16);
    f8_checkpoint_destroy(r.ck);
    f8_ctx_destroy(r.ctx);
    return st;
}

/* ---- export ------------------------------------------------------------------------ */

static int by_name(const void *a, const void *b)
{
    return strcmp(((const hf_out_tensor *)a)->name, ((const hf_out_tensor *)b)->name);
}

int hf_write_safetensors(const char *path, hf_out_tensor *t, size_t count, char *err, size_t n)
{
    qsort(t, count, sizeof *t, by_name);
    size_t cap = 256 + count * 200, len = 0, off = 0;
    char *h = (char *)malloc(cap);
    if (!h) return -1;
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < count; i++) {
        size_t bytes = (size_t)(t[i].dims[0] * (t[i].ndim == 2 ? t[i].dims[1] : 1)) * 4;
        if (t[i].ndim == 2)
            len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],", t[i].name,
                                    (long long)t[i].dims[0], (long long)t[i].dims[1]);
        else
            len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],", t[i].name,
                                    (long long)t[i].dims[0]);
        len += (size_t)snprintf(h + len, cap - len, "\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    FILE *f = fopen(path, "wb");
    int ok = f != NULL;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)len >> (8 * i));
    ok = ok && fwrite(len8, 1, 8, f) == 8 && fwrite(h, 1, len, f) == len;
    for (size_t i = 0; ok && i < count; i++) {
        size_t k = (size_t)(t[i].dims[0] * (t[i].ndim == 2 ? t[i].dims[1] : 1));
        ok = fwrite(t[i].data, 4, k, f) == k; /* little-endian hosts: FP32 as stored */
    }
    if (f && fclose(f) != 0) ok = 0;
    free(h);
    if (!ok) snprintf(err, n, "cannot write '%s': %s", path, strerror(errno));
    return ok ? 0 : -1;
}

f8_status hf_export(gpt *m, const char *dir, char *err, size_t n)
{
    const gpt_config *c = &m->c;
    const int64_t C = c->channels, L = c->layers;
    const size_t per = HF_BLOCK_ENTRIES, count = (size_t)L * per + 4;
    hf_out_tensor *t = (hf_out_tensor *)calloc(count, sizeof *t);
    void *stage = NULL;
    float *tmp = (float *)malloc((size_t)(c->padded_vocab * C + 16 * C * C) * 4);
    f8_status st = t && tmp ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = f8_ctx_alloc(m->ctx, (size_t)(c->padded_vocab * C + 16 * C * C) * 4, &stage);
    size_t k = 0;
    for (int64_t l = 0; st == F8_OK && l <= L; l++) {
        const hf_entry *tab = l < L ? hf_block_entries : hf_final_entries;
        const size_t cnt = l < L ? per : 2;
        for (size_t e = 0; st == F8_OK && e < cnt; e++, k++) {
            f8_tensor v;
            st = f8_module_param(hf_module_of(m, l, tab[e].where), tab[e].which, 0, &v);
            if (l < L) snprintf(t[k].name, sizeof t[k].name, "transformer.h.%lld.%s", (long long)l, tab[e].name);
            else snprintf(t[k].name, sizeof t[k].name, "transformer.%s", tab[e].name);
            t[k].data = (float *)malloc((size_t)(v.rows * v.cols) * 4 + 4);
            if (st == F8_OK && !t[k].data) st = F8_ERR_OUT_OF_MEMORY;
            if (st == F8_OK) st = param_get(m, &v, tab[e].conv1d ? tmp : t[k].data, stage);
            if (st == F8_OK && tab[e].conv1d) transpose_host(tmp, v.rows, v.cols, t[k].data); /* [in, out] */
            t[k].ndim = tab[e].conv1d ? 2 : 1;
            t[k].dims[0] = tab[e].conv1d ? v.cols : v.rows * v.cols;
            t[k].dims[1] = v.rows;
        }
    }
    f8_tensor w, wpe = f8_tensor_make(m->wpe, c->dtype, c->seq, C);
    if (st == F8_OK) st = f8_module_param(m->head, F8_PARAM_WEIGHT, 0, &w);
    if (st == F8_OK) {
        snprintf(t[k].name, sizeof t[k].name, "transformer.wte.weight");
        t[k].ndim = 2, t[k].dims[0] = c->vocab, t[k].dims[1] = C;
        t[k].data = (float *)malloc((size_t)(w.rows * C) * 4);
        st = t[k].data ? param_get(m, &w, t[k].data, stage) : F8_ERR_OUT_OF_MEMORY; /* the first V of Vp rows */
        k++;
    }
    if (st == F8_OK) {
        snprintf(t[k].name, sizeof t[k].name, "transformer.wpe.weight");
        t[k].ndim = 2, t[k].dims[0] = c->seq, t[k].dims[1] = C;
        t[k].data = (float *)malloc((size_t)(c->seq * C) * 4);
        st = t[k].data ? param_get(m, &wpe, t[k].data, stage) : F8_ERR_OUT_OF_MEMORY;
        k++;
    }
    if (st != F8_OK && !err[0]) snprintf(err, n, "%s", f8_ctx_last_error(m->ctx));
    char path[1024];
    if (st == F8_OK && mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, n, "cannot create '%s': %s", dir, strerror(errno));
        st = F8_ERR_IO;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st == F8_OK && hf_write_safetensors(path, t, k, err, n) != 0) st = F8_ERR_IO;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = st == F8_OK ? fopen(path, "w") : NULL;
    if (st == F8_OK && !f) {
        snprintf(err, n, "cannot write '%s': %s", path, strerror(errno));
        st = F8_ERR_IO;
    }
    if (f) {
        const long long eot = c->vocab > 50256 ? 50256 : (long long)c->vocab - 1;
        fprintf(f,
                "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n"
                "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": null,\n"
                "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                "  \"tie_word_embeddings\": true,\n  \"bos_token_id\": %lld,\n  \"eos_token_id\": %lld,\n"
                "  \"torch_dtype\": \"float32\"\n}\n",
                (long long)c->vocab, (long long)c->seq, (long long)c->seq, (long long)C, (long long)L,
                (long long)c->heads, eot, eot);
        if (fclose(f) != 0) {
            snprintf(err, n, "cannot write '%s'", path);
            st = F8_ERR_IO;
        }
    }
    for (size_t i = 0; t && i < count; i++) free(t[i].data);
    free(t);
    free(tmp);
    f8_ctx_free(m->ctx, stage);
    return st;
}

/* ---- the commands ---------------------------------------------------------------- */

static f8_ctx *cmd_ctx(const char *backend, f8_recipe_kind recipe, char *err, size_t n)
{
    f8_ctx_config cc = f8_ctx_config_default();
    cc.recipe.kind = recipe;
    cc.backend = strcmp(backend, "cpu") == 0 ? F8_BACKEND_CPU : F8_BACKEND_CUDA;
    f8_ctx *ctx = NULL;
    f8_status st = f8_ctx_create(&cc, &ctx, err, n);
    if (st == F8_ERR_NO_DEVICE && strcmp(backend, "auto") == 0) {
        cc.backend = F8_BACKEND_CPU;
        st = f8_ctx_create(&cc, &ctx, err, n);
    }
    return st == F8_OK ? ctx : NULL;
}

/* Whitespace-separated token ids. */
static int32_t *read_tokens(const char *path, int64_t *count)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    int64_t cap = 1024, k = 0;
    int32_t *t = (int32_t *)malloc((size_t)cap * 4);
    long long v;
    while (t && fscanf(f, "%lld", &v) == 1) {
        if (k == cap) {
            int32_t *g = (int32_t *)realloc(t, (size_t)(cap *= 2) * 4);
            if (!g) free(t);
            t = g;
            if (!t) break;
        }
        t[k++] = (int32_t)v;
    }
    fclose(f);
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
                        "  the mean next-token loss of a Hugging Face GPT-2 on FILE's token ids (whitespace-separated;\n"
                        "  token i+1 is the target of token i), FP8 off and FP32 by default\n");
        return 1;
    }
    char err[512] = "";
    hf_config hc;
    int64_t n = 0;
    int32_t *tok = read_tokens(tokens_path, &n);
    if (!tok || n < 2) {
        fprintf(stderr, "f8_train eval-hf: '%s': need at least 2 token ids\n", tokens_path);
        free(tok);
        return 1;
    }
    if (hf_read_config(dir, &hc, err, sizeof err) != 0) {
        fprintf(stderr, "f8_train eval-hf: %s\n", err);
        free(tok);
        return 1;
    }
    if (n - 1 > hc.positions) n = hc.positions + 1; /* one window */
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
    f8_status st = ctx ? gpt_create(ctx, &c, &m, err, sizeof err) : F8_ERR_NO_DEVICE;
    if (st == F8_OK) st = hf_import(&m, dir, err, sizeof err);
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
                        "  writes OUT_DIR/model.safetensors and config.json: a GPT-2 that transformers'\n"
                        "  GPT2LMHeadModel.from_pretrained(OUT_DIR) loads (FP32; n_positions = the trained seq)\n");
        return 1;
    }
    static const char *const KEYS[] = {"train.layers", "train.heads", "train.channels", "train.seq",
                                       "train.vocab", "train.padded_vocab", "train.dtype", "train.fp8"};
    char err[512] = "";
    /* the checkpoint's recipe, so its FP8 state restores (only parameters go out) */
    f8_ctx *ctx = cmd_ctx("cpu", train_checkpoint_recipe(argv[2]), err, sizeof err);
    f8_checkpoint *ck = NULL;
    gpt m;
    memset(&m, 0, sizeof m);
    f8_status st = ctx ? f8_checkpoint_load(ctx, argv[2], &ck) : F8_ERR_NO_DEVICE;
    if (st != F8_OK && ctx) snprintf(err, sizeof err, "cannot load '%s': %s", argv[2], f8_ctx_last_error(ctx));
    const char *v[8] = {0};
    for (int i = 0; st == F8_OK && i < 8; i++)
        if (!(v[i] = f8_checkpoint_metadata(ck, KEYS[i]))) {
            snprintf(err, sizeof err, "'%s' has no %s: not written by f8_train", argv[2], KEYS[i]);
            st = F8_ERR_INVALID_ARGUMENT;
        }
    if (st == F8_OK) {
        gpt_config c;
        memset(&c, 0, sizeof c);
        c.layers = atoll(v[0]), c.heads = atoll(v[1]), c.channels = atoll(v[2]), c.seq = atoll(v[3]);
        c.vocab = atoll(v[4]), c.padded_vocab = atoll(v[5]);
        c.dtype = strcmp(v[6], "bf16") == 0 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
        c.fp8 = atoi(v[7]) != 0; /* as trained, so the checkpoint restores; only parameters go out */
        const char *head = f8_checkpoint_metadata(ck, "train.fp8_head");
        c.fp8_head = c.fp8 && head && strcmp(head, "1") == 0;
        c.batch = 1;
        c.seed = 1;
        if (c.layers < 1 || c.heads < 1 || c.channels < 1 || c.seq < 1 || c.vocab < 1 || c.padded_vocab < c.vocab) {
            snprintf(err, sizeof err, "'%s': the model metadata is not valid", argv[2]);
            st = F8_ERR_INVALID_ARGUMENT;
        }
        if (st == F8_OK) st = gpt_create(ctx, &c, &m, err, sizeof err);
    }
    if (st == F8_OK) st = gpt_checkpoint_restore(&m, ck);
    if (st != F8_OK && !err[0]) snprintf(err, sizeof err, "%s", f8_ctx_last_error(ctx));
    f8_checkpoint_destroy(ck);
    ck = NULL;
    if (st == F8_OK) st = hf_export(&m, argv[3], err, sizeof err);
    if (st == F8_OK) printf("export-hf: %s -> %s/model.safetensors, %s/config.json\n", argv[2], argv[3], argv[3]);
    else fprintf(stderr, "f8_train export-hf: %s: %s\n", f8_status_string(st), err);
    gpt_destroy(&m);
    f8_ctx_destroy(ctx);
    return st == F8_OK ? 0 : 1;
}
