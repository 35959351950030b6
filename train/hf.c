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
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf.h"
#include "options.h"
#include "parse.h"
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
    if (st != F8_OK) {
        snprintf(err, n, "%s: %s (FP32 or BF16 expected)", full, f8_ctx_last_error(r->ctx));
        return st;
    }
    /* a NaN or infinity would train (or evaluate) to NaN: refused by name and place, as checkpoints are */
    for (int64_t i = 0; i < rows * cols; i++)
        if (!isfinite(out[i])) {
            snprintf(err, n, "%s: element %lld ([%lld, %lld] of [%lld, %lld]) is %s", full, (long long)i,
                     (long long)(i / cols), (long long)(i % cols), (long long)rows, (long long)cols,
                     isnan(out[i]) ? "NaN" : out[i] > 0 ? "+inf" : "-inf");
            return F8_ERR_INVALID_ARGUMENT;
        }
    return F8_OK;
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

/* A whole small file (config.json, a safetensors header's prefix), or NULL
 * with the reason in err. */
static char *read_small(const char *path, size_t limit, size_t *len, char *err, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || (size_t)size > limit) snprintf(err, n, "'%s': %ld bytes, more than the %zu a config may have", path, size, limit);
    else if (fseek(f, 0, SEEK_SET) != 0 || !(buf = (char *)malloc((size_t)size + 1)))
        snprintf(err, n, "cannot read '%s'", path);
    else if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        snprintf(err, n, "cannot read '%s': %s", path, strerror(errno));
        free(buf);
        buf = NULL;
    } else {
        buf[size] = '\0';
        *len = (size_t)size;
    }
    fclose(f);
    return buf;
}

/* config.json's integer `key` into *out, in [lo, hi]: absent (-> 0 when
 * optional), not a number, a fraction, out of range are refused by name and
 * value. */
static int config_int(const char *path, const f8_json *root, const char *key, int64_t lo, int64_t hi, int optional,
                      int64_t *out, char *err, size_t n)
{
    const f8_json *v = f8_json_get(root, key);
    if (!v && optional) return 0;
    if (!v) return snprintf(err, n, "%s: no \"%s\"", path, key), -1;
    if (v->kind != F8_JSON_NUMBER)
        return snprintf(err, n, "%s: \"%s\" is %s %s, not an integer", path, key,
                        v->kind == F8_JSON_ARRAY || v->kind == F8_JSON_OBJECT ? "an" : "a", f8_json_kind_name(v->kind)), -1;
    if (!v->is_int)
        return snprintf(err, n, "%s: \"%s\" is %.40s, not an integer%s", path, key, v->str,
                        strpbrk(v->str, ".eE") ? "" : " in range"), -1;
    if (v->i < lo || v->i > hi)
        return snprintf(err, n, "%s: \"%s\" is %lld, outside [%lld, %lld]", path, key, (long long)v->i, (long long)lo,
                        (long long)hi), -1;
    *out = v->i;
    return 0;
}

static int read_config_json(const char *p, const char *text, size_t len, hf_config *c, char *err, size_t n)
{
    f8_json *root = NULL;
    char why[320];
    if (f8_json_parse(text, len, 0, &root, why, sizeof why) != F8_OK) {
        snprintf(err, n, "%s: not valid JSON: %s", p, why);
        return -1;
    }
    int64_t inner = 0;
    int rc = root->kind == F8_JSON_OBJECT ? 0 : (snprintf(err, n, "%s: not a JSON object", p), -1);
    if (!rc) rc = config_int(p, root, "n_layer", 1, TRAIN_MAX_LAYERS, 0, &c->layers, err, n);
    if (!rc) rc = config_int(p, root, "n_head", 1, TRAIN_MAX_HEADS, 0, &c->heads, err, n);
    if (!rc) rc = config_int(p, root, "n_embd", 1, TRAIN_MAX_CHANNELS, 0, &c->channels, err, n);
    if (!rc) rc = config_int(p, root, "vocab_size", 1, TRAIN_MAX_VOCAB, 0, &c->vocab, err, n);
    /* n_positions, or the older n_ctx; both given must agree */
    int64_t ctx = 0;
    if (!rc) rc = config_int(p, root, "n_positions", 1, TRAIN_MAX_SEQ, 1, &c->positions, err, n);
    if (!rc) rc = config_int(p, root, "n_ctx", 1, TRAIN_MAX_SEQ, 1, &ctx, err, n);
    if (!rc && !c->positions) c->positions = ctx;
    if (!rc && !c->positions) rc = (snprintf(err, n, "%s: no \"n_positions\" (or \"n_ctx\")", p), -1);
    if (!rc && ctx && ctx != c->positions)
        rc = (snprintf(err, n, "%s: \"n_ctx\" %lld differs from \"n_positions\" %lld", p, (long long)ctx,
                       (long long)c->positions), -1);
    const f8_json *in = f8_json_get(root, "n_inner"), *act = f8_json_get(root, "activation_function"),
                   *eps = f8_json_get(root, "layer_norm_epsilon");
    if (!rc && in && in->kind != F8_JSON_NULL) rc = config_int(p, root, "n_inner", 1, INT64_MAX, 0, &inner, err, n);
    if (!rc && inner && inner != 4 * c->channels)
        rc = (snprintf(err, n, "%s: \"n_inner\" %lld is not 4 * n_embd (%lld)", p, (long long)inner,
                       (long long)(4 * c->channels)), -1);
    if (!rc && act && (act->kind != F8_JSON_STRING || (strcmp(act->str, "gelu_new") && strcmp(act->str, "gelu_pytorch_tanh"))))
        rc = (snprintf(err, n, "%s: \"activation_function\" is %.40s, not gelu_new (f8's GELU is the tanh form)", p,
                       act->kind == F8_JSON_STRING ? act->str : f8_json_kind_name(act->kind)), -1);
    if (!rc && eps && (eps->kind != F8_JSON_NUMBER || fabs(eps->num - 1e-5) > 1e-12))
        rc = (snprintf(err, n, "%s: \"layer_norm_epsilon\" is %.40s, not 1e-5", p,
                       eps->kind == F8_JSON_NUMBER ? eps->str : f8_json_kind_name(eps->kind)), -1);
    if (!rc && c->channels % c->heads)
        rc = (snprintf(err, n, "%s: \"n_embd\" %lld is not a multiple of \"n_head\" %lld", p, (long long)c->channels,
                       (long long)c->heads), -1);
    f8_json_free(root);
    return rc;
}

/* The [rows, cols] of a 2-D tensor in a parsed safetensors header. */
static int header_shape(const f8_json *root, const char *name, int64_t d[2])
{
    const f8_json *t = f8_json_get(root, name), *s = f8_json_get(t, "shape");
    if (!s || s->kind != F8_JSON_ARRAY || s->count != 2 || !s->child->is_int || !s->child->next->is_int) return 0;
    d[0] = s->child->i, d[1] = s->child->next->i;
    return d[0] > 0 && d[1] > 0;
}

/* No config.json: the shape from the safetensors header, head_dim 64 as
 * every GPT-2 size has. */
static int read_header_shape(const char *p, const char *ws, hf_config *c, char *err, size_t n)
{
    FILE *f = fopen(ws, "rb");
    unsigned char len8[8];
    int ok = f && fread(len8, 1, 8, f) == 8;
    uint64_t len = 0;
    for (int i = 7; ok && i >= 0; i--) len = len << 8 | len8[i];
    char *hdr = ok && len <= 100000000u ? (char *)malloc((size_t)len + 1) : NULL;
    ok = hdr && fread(hdr, 1, (size_t)len, f) == (size_t)len;
    if (f) fclose(f);
    f8_json *root = NULL;
    char why[320] = "";
    if (ok && f8_json_parse(hdr, (size_t)len, 3, &root, why, sizeof why) != F8_OK) ok = 0;
    free(hdr);
    if (!ok) {
        snprintf(err, n, "no %s and cannot read the header of '%s'%s%s", p, ws, why[0] ? ": " : "", why);
        return -1;
    }
    const char *pre = f8_json_get(root, "transformer.wte.weight") ? "transformer." : "";
    int64_t d[2] = {0, 0}, e[2] = {0, 0};
    char name[128];
    snprintf(name, sizeof name, "%swte.weight", pre);
    ok = header_shape(root, name, d);
    snprintf(name, sizeof name, "%swpe.weight", pre);
    ok = ok && header_shape(root, name, e) && e[1] == d[1];
    for (c->layers = 0; ok && c->layers <= TRAIN_MAX_LAYERS; c->layers++) {
        snprintf(name, sizeof name, "%sh.%lld.ln_1.weight", pre, (long long)c->layers);
        if (!f8_json_get(root, name)) break;
    }
    f8_json_free(root);
    if (!ok || c->layers == 0 || d[1] % 64) {
        snprintf(err, n, "no %s, and '%s' does not look like a GPT-2 (wte, wpe, h.N.*)", p, ws);
        return -1;
    }
    c->vocab = d[0];
    c->channels = d[1];
    c->positions = e[0];
    c->heads = c->channels / 64;
    if (c->vocab > TRAIN_MAX_VOCAB || c->channels > TRAIN_MAX_CHANNELS || c->positions > TRAIN_MAX_SEQ ||
        c->layers > TRAIN_MAX_LAYERS) {
        snprintf(err, n, "'%s': a GPT-2 of %lld layers, %lld channels, vocab %lld, %lld positions is past f8_train's "
                 "limits", ws, (long long)c->layers, (long long)c->channels, (long long)c->vocab, (long long)c->positions);
        return -1;
    }
    return 0;
}

int hf_read_config(const char *path, hf_config *c, char *err, size_t n)
{
    char p[1024], ws[1024];
    memset(c, 0, sizeof *c);
    sibling(path, "config.json", p, sizeof p);
    weights_path(path, ws, sizeof ws);
    struct stat sb;
    if (stat(p, &sb) != 0) return read_header_shape(p, ws, c, err, n);
    size_t len = 0;
    char *text = read_small(p, (size_t)1 << 24, &len, err, n);
    int rc = text ? read_config_json(p, text, len, c, err, n) : -1;
    free(text);
    if (rc) memset(c, 0, sizeof *c);
    return rc;
}

f8_status hf_import(gpt *m, const char *path, char *err, size_t n)
{
    const gpt_config *c = &m->c;
    const int64_t C = c->channels, V = c->vocab, Vp = c->padded_vocab;
    hf_config hc;
    if (hf_read_config(path, &hc, err, n) != 0) return F8_ERR_INVALID_ARGUMENT;
    if (hc.layers != c->layers || hc.channels != C || hc.vocab != V || hc.heads != c->heads || gpt_positions(c) > hc.positions) {
        snprintf(err, n, "the GPT-2 has %lld layers, %lld heads, %lld channels, vocab %lld, %lld positions; the model "
                 "%lld, %lld, %lld, %lld, %lld positions", (long long)hc.layers, (long long)hc.heads, (long long)hc.channels,
                 (long long)hc.vocab, (long long)hc.positions, (long long)c->layers, (long long)c->heads, (long long)C,
                 (long long)V, (long long)gpt_positions(c));
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
    /* wte into the tied head's weight [Vp, C], padding rows zero; wpe's first rows, as many as the model has */
    if (st == F8_OK) {
        memset(a, 0, (size_t)(Vp * C) * 4);
        st = read_f32(&r, "wte.weight", V, C, a, err, n);
    }
    f8_tensor w;
    if (st == F8_OK) st = f8_module_param(m->head, F8_PARAM_WEIGHT, 0, &w);
    if (st == F8_OK) st = param_put(m, m->head, F8_PARAM_WEIGHT, &w, a, stage);
    if (st == F8_OK) st = read_f32(&r, "wpe.weight", hc.positions, C, a, err, n);
    f8_tensor wpe = f8_tensor_make(m->wpe, c->dtype, gpt_positions(c), C);
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
    const int64_t rows = c->padded_vocab > gpt_positions(c) ? c->padded_vocab : gpt_positions(c);
    float *tmp = (float *)malloc((size_t)(rows * C + 16 * C * C) * 4);
    f8_status st = t && tmp ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = f8_ctx_alloc(m->ctx, (size_t)(rows * C + 16 * C * C) * 4, &stage);
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
    const int64_t P = gpt_positions(c); /* every row of wpe: an import's shape, whatever seq trained */
    f8_tensor w, wpe = f8_tensor_make(m->wpe, c->dtype, P, C);
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
        t[k].ndim = 2, t[k].dims[0] = P, t[k].dims[1] = C;
        t[k].data = (float *)malloc((size_t)(P * C) * 4);
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
                (long long)c->vocab, (long long)P, (long long)P, (long long)C, (long long)L,
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

/* ---- positions through f8_train checkpoints -------------------------------------- */

int64_t hf_checkpoint_positions(const f8_checkpoint *ck, int64_t seq, char *err, size_t n)
{
    const char *v = f8_checkpoint_metadata(ck, "train.positions");
    int64_t p = seq;
    if (v && parse_int("train.positions", v, seq, TRAIN_MAX_SEQ, &p, err, n) != 0) return -1;
    return p;
}

int hf_checkpoint_model(const f8_checkpoint *ck, int cuda, gpt_config *c, char *err, size_t n)
{
    static const char *const KEYS[7] = {"train.layers", "train.heads", "train.channels", "train.seq",
                                        "train.vocab", "train.padded_vocab", "train.fp8"};
    static const int64_t LO[7] = {1, 1, 1, 1, 1, 1, 0};
    static const int64_t HI[7] = {TRAIN_MAX_LAYERS, TRAIN_MAX_HEADS, TRAIN_MAX_CHANNELS, TRAIN_MAX_SEQ,
                                  TRAIN_MAX_VOCAB, TRAIN_MAX_VOCAB, 1};
    int64_t v[7];
    memset(c, 0, sizeof *c);
    const char *family = f8_checkpoint_metadata(ck, "train.family");
    if (family && strcmp(family, "gpt") != 0) /* llama.h: its exporters are not written yet */
        return snprintf(err, n, "the checkpoint holds a %.20s model: its ONNX and Hugging Face export is not yet "
                                "written (GPT-2 only)", family), -1;
    for (int i = 0; i < 7; i++) {
        const char *s = f8_checkpoint_metadata(ck, KEYS[i]);
        if (!s) return snprintf(err, n, "the checkpoint has no %s: not written by f8_train", KEYS[i]), -1;
        if (parse_int(KEYS[i], s, LO[i], HI[i], &v[i], err, n) != 0) return -1;
    }
    c->layers = v[0], c->heads = v[1], c->channels = v[2], c->seq = v[3], c->vocab = v[4], c->padded_vocab = v[5];
    c->fp8 = (int)v[6]; /* as trained, so the checkpoint restores */
    if (c->channels % c->heads)
        return snprintf(err, n, "train.channels = %lld is not a multiple of train.heads = %lld", (long long)c->channels,
                        (long long)c->heads), -1;
    if (c->padded_vocab != (c->vocab + 127) / 128 * 128)
        return snprintf(err, n, "train.padded_vocab = %lld is not train.vocab = %lld rounded up to 128",
                        (long long)c->padded_vocab, (long long)c->vocab), -1;
    const char *dt = f8_checkpoint_metadata(ck, "train.dtype"), *head = f8_checkpoint_metadata(ck, "train.fp8_head");
    if (!dt || (strcmp(dt, "fp32") && strcmp(dt, "bf16")))
        return snprintf(err, n, "train.dtype = '%.40s': expected fp32 or bf16", dt ? dt : "(none)"), -1;
    c->dtype = strcmp(dt, "bf16") == 0 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
    c->fp8_head = c->fp8 && head && strcmp(head, "1") == 0; /* absent: a high-precision head */
    c->batch = 1;
    c->seed = 1;
    if ((c->positions = hf_checkpoint_positions(ck, c->seq, err, n)) < 0) return -1;
    /* untrusted sizes: the memory they need against what there is, before gpt_create */
    return train_check_memory(c, cuda, err, n);
}

f8_status hf_checkpoint_set_positions(const gpt *m, f8_checkpoint *ck)
{
    if (gpt_positions(&m->c) == m->c.seq) return F8_OK; /* checkpoints of models without more stay as they were */
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)gpt_positions(&m->c));
    return f8_checkpoint_set_metadata(ck, "train.positions", v);
}

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
                        "  the mean next-token loss of a Hugging Face GPT-2 on FILE's token ids (whitespace-separated;\n"
                        "  token i+1 is the target of token i), FP8 off and FP32 by default\n");
        return 1;
    }
    char err[512] = "";
    hf_config hc;
    int64_t n = 0;
    if (hf_read_config(dir, &hc, err, sizeof err) != 0) {
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
    f8_status st = ctx ? F8_OK : F8_ERR_NO_DEVICE;
    /* the model's memory against what there is, before anything is allocated */
    if (st == F8_OK && train_check_memory(&c, f8_ctx_backend(ctx) == F8_BACKEND_CUDA, err, sizeof err) != 0)
        st = F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = gpt_create(ctx, &c, &m, err, sizeof err);
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
                        "  GPT2LMHeadModel.from_pretrained(OUT_DIR) loads (FP32; n_positions = the model's, an import's own)\n");
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
    if (st == F8_OK) st = hf_export(&m, argv[3], err, sizeof err);
    if (st == F8_OK) printf("export-hf: %s -> %s/model.safetensors, %s/config.json\n", argv[2], argv[3], argv[3]);
    else fprintf(stderr, "f8_train export-hf: %s: %s\n", f8_status_string(st), err);
    gpt_destroy(&m);
    f8_ctx_destroy(ctx);
    return st == F8_OK ? 0 : 1;
}
