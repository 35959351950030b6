/*
 * hf_llama.c — Hugging Face Llama checkpoints in and out (hf_llama.h).
 *
 * Design note. The reading machinery is hf.c's (a CPU ctx's checkpoint per
 * file, hf_read_f32 into host FP32, one staging buffer into the model's
 * dtype, weights through f8_module_write_weight); what is Llama's is the
 * mapping, which is not one tensor per parameter: qkv's weight is q, k and v
 * stacked by rows and fc1 is gate over up. So the mapping is a list of
 * targets (one model parameter each) made of pieces (one file tensor each,
 * at a row offset), built once per layer and walked both ways. Every file
 * tensor must be claimed by exactly one piece: a checkpoint with a tensor
 * the model has no place for (a bias, a LoRA adapter, a quantizer's scale)
 * is refused, not half-loaded. Sharded checkpoints: every shard the index
 * names is loaded (a name with a '/' or "..", or not ending in
 * .safetensors, is refused before any file is opened), and each tensor must
 * live in the shard the index says.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf.h"
#include "hf_llama.h"
#include "options.h"
#include "try.h"

enum { MAX_SHARDS = 1024 };

static int is_dir(const char *p)
{
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

/* path/name when path is a directory, else name beside the file path. */
static void beside(const char *path, const char *name, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (is_dir(path)) snprintf(out, n, "%s/%s", path, name);
    else if (!slash) snprintf(out, n, "%s", name);
    else snprintf(out, n, "%.*s/%s", (int)(slash - path), path, name);
}

static f8_json *parse_file(const char *path, size_t limit, char *err, size_t n)
{
    size_t len = 0;
    char *text = hf_read_small(path, limit, &len, err, n), why[320];
    f8_json *root = NULL;
    if (text && f8_json_parse(text, len, 8, &root, why, sizeof why) != F8_OK) snprintf(err, n, "%s: not valid JSON: %s", path, why);
    else if (root && root->kind != F8_JSON_OBJECT) {
        snprintf(err, n, "%s: not a JSON object", path);
        f8_json_free(root);
        root = NULL;
    }
    free(text);
    return root;
}

/* ---- config.json ----------------------------------------------------------------- */

int hf_llama_is(const char *path)
{
    char p[1024], err[256];
    beside(path, "config.json", p, sizeof p);
    struct stat sb;
    if (stat(p, &sb) != 0) return 0;
    f8_json *root = parse_file(p, (size_t)1 << 24, err, sizeof err);
    const f8_json *t = f8_json_get(root, "model_type");
    const int yes = t && t->kind == F8_JSON_STRING && strcmp(t->str, "llama") == 0;
    f8_json_free(root);
    return yes;
}

/* A value for a message: the literal of a number, a string's text, else the kind. */
static const char *shown(const f8_json *v)
{
    return v->kind == F8_JSON_STRING || v->kind == F8_JSON_NUMBER ? v->str : f8_json_kind_name(v->kind);
}

/* key absent or null: dflt; true/false; anything else refused. */
static int get_bool(const char *p, const f8_json *root, const char *key, int dflt, int *out, char *err, size_t n)
{
    const f8_json *v = f8_json_get(root, key);
    *out = !v || v->kind == F8_JSON_NULL ? dflt : v->kind == F8_JSON_TRUE;
    if (!v || v->kind == F8_JSON_NULL || v->kind == F8_JSON_TRUE || v->kind == F8_JSON_FALSE) return 0;
    return snprintf(err, n, "%s: \"%s\" is %.40s, not true or false", p, key, shown(v)), -1;
}

/* A number key (absent: dflt, or refused when required) within [lo, hi]. */
static int get_num(const char *p, const f8_json *root, const char *key, double dflt, int required, double lo, double hi,
                   double *out, char *err, size_t n)
{
    const f8_json *v = f8_json_get(root, key);
    *out = dflt;
    if (!v && !required) return 0;
    if (!v) return snprintf(err, n, "%s: no \"%s\"", p, key), -1;
    if (v->kind != F8_JSON_NUMBER || !(v->num >= lo && v->num <= hi))
        return snprintf(err, n, "%s: \"%s\" is %.40s, not a number in [%g, %g]", p, key, shown(v), lo, hi), -1;
    *out = v->num;
    return 0;
}

/* What f8's Llama does not compute, refused by key and value. */
static int refuse_features(const char *p, const f8_json *root, const hf_llama_config *c, char *err, size_t n)
{
    int b = 0;
    const char *bools[2] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        if (get_bool(p, root, bools[i], 0, &b, err, n)) return -1;
        if (b) return snprintf(err, n, "%s: \"%s\" is true: f8's Llama has no biases", p, bools[i]), -1;
    }
    const f8_json *act = f8_json_get(root, "hidden_act"), *hd = f8_json_get(root, "head_dim");
    if (act && (act->kind != F8_JSON_STRING || strcmp(act->str, "silu")))
        return snprintf(err, n, "%s: \"hidden_act\" is %.40s: f8's Llama MLP is SwiGLU (silu)", p, shown(act)), -1;
    if (hd && hd->kind != F8_JSON_NULL && !(hd->is_int && hd->i == c->channels / c->heads))
        return snprintf(err, n, "%s: \"head_dim\" is %.40s, not hidden_size / num_attention_heads = %lld", p, shown(hd),
                        (long long)(c->channels / c->heads)), -1;
    const f8_json *eps = f8_json_get(root, "rms_norm_eps"), *q = f8_json_get(root, "quantization_config");
    if (!eps || eps->kind != F8_JSON_NUMBER || fabs(eps->num - 1e-5) > 1e-12)
        return snprintf(err, n, "%s: \"rms_norm_eps\" is %.40s: f8's RMSNorm has eps 1e-5 (transformers' default, "
                        "when absent, is 1e-6)", p, eps ? shown(eps) : "absent"), -1;
    if (q && q->kind != F8_JSON_NULL)
        return snprintf(err, n, "%s: \"quantization_config\" is set: a quantized checkpoint, not FP32 or BF16", p), -1;
    double drop = 0;
    if (get_num(p, root, "attention_dropout", 0, 0, 0, 0, &drop, err, n)) return -1;
    return 0;
}

/* A RoPE object (rope_scaling's, or transformers 5's rope_parameters): its
 * type none, default or llama3 with the factors f8_rope has; where names
 * it for messages. */
static int read_rope_object(const char *where, const f8_json *rs, double *factor, char *err, size_t n)
{
    *factor = 0;
    if (!rs || rs->kind == F8_JSON_NULL) return 0;
    if (rs->kind != F8_JSON_OBJECT) return snprintf(err, n, "%s is %s, not an object or null", where, shown(rs)), -1;
    const f8_json *t = f8_json_get(rs, "rope_type");
    if (!t) t = f8_json_get(rs, "type");
    if (!t || t->kind != F8_JSON_STRING) return snprintf(err, n, "%s names no \"rope_type\"", where), -1;
    if (strcmp(t->str, "default") == 0) return 0;
    if (strcmp(t->str, "llama3") != 0)
        return snprintf(err, n, "%s: \"rope_type\" is %.40s: f8_rope has default and llama3", where, t->str), -1;
    /* f8_rope's llama3 has low 1, high 4, original 8192 (Llama 3.1's and 3.2's); others are refused */
    static const char *const keys[3] = {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    static const double want[3] = {1.0, 4.0, 8192.0};
    if (get_num(where, rs, "factor", 0, 1, 1.0, 1e6, factor, err, n)) return -1;
    for (int i = 0; i < 3; i++) {
        double v = 0;
        if (get_num(where, rs, keys[i], 0, 1, -1e300, 1e300, &v, err, n)) return -1;
        if (v != want[i])
            return snprintf(err, n, "%s: \"%s\" is %g: f8_rope's llama3 scaling has %g", where, keys[i], v, want[i]), -1;
    }
    return 0;
}

/* theta and the scaling: transformers 4's rope_theta and rope_scaling, or 5's rope_parameters (which wins). */
static int read_rope(const char *p, const f8_json *root, hf_llama_config *c, char *err, size_t n)
{
    char where[1100];
    const f8_json *rp = f8_json_get(root, "rope_parameters");
    if (get_num(p, root, "rope_theta", 10000.0, 0, 1.0000001, 1e12, &c->rope_theta, err, n)) return -1;
    if (rp && rp->kind != F8_JSON_NULL) {
        snprintf(where, sizeof where, "%.1000s: \"rope_parameters\"", p);
        if (rp->kind == F8_JSON_OBJECT &&
            get_num(where, rp, "rope_theta", c->rope_theta, 0, 1.0000001, 1e12, &c->rope_theta, err, n))
            return -1;
        return read_rope_object(where, rp, &c->rope_factor, err, n);
    }
    snprintf(where, sizeof where, "%.1000s: \"rope_scaling\"", p);
    return read_rope_object(where, f8_json_get(root, "rope_scaling"), &c->rope_factor, err, n);
}

int hf_llama_read_config(const char *path, hf_llama_config *c, char *err, size_t n)
{
    char p[1024];
    memset(c, 0, sizeof *c);
    beside(path, "config.json", p, sizeof p);
    f8_json *root = parse_file(p, (size_t)1 << 24, err, n);
    if (!root) return -1;
    const f8_json *mt = f8_json_get(root, "model_type"), *arch = f8_json_get(root, "architectures");
    int rc = mt && mt->kind == F8_JSON_STRING && !strcmp(mt->str, "llama") ? 0
             : (snprintf(err, n, "%s: \"model_type\" is not \"llama\"", p), -1);
    if (!rc && arch && arch->kind != F8_JSON_NULL) { /* when named, a causal LM: a classifier's head is not f8's */
        int lm = arch->kind == F8_JSON_ARRAY;
        for (const f8_json *a = arch->kind == F8_JSON_ARRAY ? arch->child : NULL; a; a = a->next)
            lm = lm && a->kind == F8_JSON_STRING && strcmp(a->str, "LlamaForCausalLM") == 0;
        if (!lm) rc = (snprintf(err, n, "%s: \"architectures\" names other than LlamaForCausalLM", p), -1);
    }
    int64_t mpe = 0;
    if (!rc) rc = hf_config_int(p, root, "num_hidden_layers", 1, TRAIN_MAX_LAYERS, 0, &c->layers, err, n);
    if (!rc) rc = hf_config_int(p, root, "num_attention_heads", 1, TRAIN_MAX_HEADS, 0, &c->heads, err, n);
    c->kv_heads = c->heads;
    if (!rc) rc = hf_config_int(p, root, "num_key_value_heads", 1, TRAIN_MAX_HEADS, 1, &c->kv_heads, err, n);
    if (!rc) rc = hf_config_int(p, root, "hidden_size", 1, TRAIN_MAX_CHANNELS, 0, &c->channels, err, n);
    if (!rc) rc = hf_config_int(p, root, "intermediate_size", 1, 1 << 23, 0, &c->ffn, err, n);
    if (!rc) rc = hf_config_int(p, root, "vocab_size", 1, TRAIN_MAX_VOCAB, 0, &c->vocab, err, n);
    if (!rc) rc = hf_config_int(p, root, "max_position_embeddings", 1, INT32_MAX, 0, &mpe, err, n);
    /* f8_train carries at most TRAIN_MAX_SEQ positions (RoPE has no table to lose: the number is only a bound) */
    c->positions = mpe > TRAIN_MAX_SEQ ? TRAIN_MAX_SEQ : mpe;
    if (!rc && (c->channels % c->heads || (c->channels / c->heads) % 2 || c->heads % c->kv_heads))
        rc = (snprintf(err, n, "%s: \"hidden_size\" %lld, \"num_attention_heads\" %lld, \"num_key_value_heads\" %lld: "
                       "f8's Llama needs an even head_dim and kv heads dividing heads", p, (long long)c->channels,
                       (long long)c->heads, (long long)c->kv_heads), -1);
    int tied = 0;
    if (!rc) rc = get_bool(p, root, "tie_word_embeddings", 0, &tied, err, n);
    c->untied = !tied;
    if (!rc) rc = read_rope(p, root, c, err, n);
    if (!rc) rc = refuse_features(p, root, c, err, n);
    f8_json_free(root);
    if (rc) memset(c, 0, sizeof *c);
    return rc;
}

void hf_llama_gpt_config(const hf_llama_config *h, gpt_config *c)
{
    c->vocab = h->vocab;
    c->padded_vocab = (h->vocab + 127) / 128 * 128;
    c->layers = h->layers, c->heads = h->heads, c->channels = h->channels;
    c->llama = 1;
    c->kv_heads = h->kv_heads, c->ffn = h->ffn, c->untied = h->untied;
    c->rope_theta = h->rope_theta, c->rope_factor = h->rope_factor;
    c->positions = h->positions;
}

/* ---- the mapping ------------------------------------------------------------------ */

/* One file tensor: rows [row0, row0 + rows) of its target's [R, cols] (1-D [cols] when one_d). */
typedef struct piece {
    char name[96];
    int64_t row0, rows;
    int one_d;
} piece;

/* One model parameter: the module (NULL: the untied embedding, a bare tensor) and its view. */
typedef struct target {
    f8_module *mod;
    f8_param which;
    f8_tensor view;
    piece p[3];
    int np;
} target;

static void add_piece(target *t, const char *name, int64_t rows, int one_d)
{
    piece *p = &t->p[t->np];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->row0 = t->np ? t->p[t->np - 1].row0 + t->p[t->np - 1].rows : 0;
    p->rows = rows, p->one_d = one_d;
    t->np++;
}

static f8_status module_target(f8_module *mod, f8_param which, target *t)
{
    memset(t, 0, sizeof *t);
    t->mod = mod, t->which = which;
    return f8_module_param(mod, which, 0, &t->view);
}

/* The targets of block l (5), or of the ends (l == layers: 2 or 3). */
static f8_status targets_of(gpt *m, int64_t l, target *t, int *count)
{
    const gpt_config *c = &m->c;
    const int64_t hd = c->channels / c->heads, G = c->kv_heads > 0 ? c->kv_heads : c->heads;
    char b[96];
    if (l == c->layers) { /* the final norm, the head, and an untied head's embedding table */
        TRY(module_target(m->head, F8_PARAM_LN_WEIGHT, &t[0]));
        add_piece(&t[0], "model.norm.weight", 1, 1);
        TRY(module_target(m->head, F8_PARAM_WEIGHT, &t[1]));
        add_piece(&t[1], c->untied ? "lm_head.weight" : "model.embed_tokens.weight", c->vocab, 0); /* padding rows 0 */
        *count = 2;
        if (!c->untied) return F8_OK;
        memset(&t[2], 0, sizeof t[2]);
        t[2].view = f8_tensor_make(m->wte, c->dtype, c->padded_vocab, c->channels);
        add_piece(&t[2], "model.embed_tokens.weight", c->vocab, 0);
        *count = 3;
        return F8_OK;
    }
    const gpt_block *k = &m->blocks[l];
#define NAME(s) (snprintf(b, sizeof b, "model.layers.%lld.%s", (long long)l, s), b)
    TRY(module_target(k->qkv, F8_PARAM_LN_WEIGHT, &t[0]));
    add_piece(&t[0], NAME("input_layernorm.weight"), 1, 1);
    TRY(module_target(k->qkv, F8_PARAM_WEIGHT, &t[1]));
    add_piece(&t[1], NAME("self_attn.q_proj.weight"), c->heads * hd, 0);
    add_piece(&t[1], NAME("self_attn.k_proj.weight"), G * hd, 0);
    add_piece(&t[1], NAME("self_attn.v_proj.weight"), G * hd, 0);
    TRY(module_target(k->proj, F8_PARAM_WEIGHT, &t[2]));
    add_piece(&t[2], NAME("self_attn.o_proj.weight"), c->channels, 0);
    TRY(module_target(k->mlp, F8_PARAM_LN_WEIGHT, &t[3]));
    add_piece(&t[3], NAME("post_attention_layernorm.weight"), 1, 1);
    TRY(module_target(k->mlp, F8_PARAM_FC1_WEIGHT, &t[4]));
    add_piece(&t[4], NAME("mlp.gate_proj.weight"), c->ffn, 0);
    add_piece(&t[4], NAME("mlp.up_proj.weight"), c->ffn, 0);
    TRY(module_target(k->mlp, F8_PARAM_FC2_WEIGHT, &t[5]));
    add_piece(&t[5], NAME("mlp.down_proj.weight"), c->channels, 0);
#undef NAME
    *count = 6;
    return F8_OK;
}

/* ---- the files -------------------------------------------------------------------- */

typedef struct shards {
    f8_ctx *cpu;
    f8_checkpoint *ck[MAX_SHARDS];
    char file[MAX_SHARDS][256];
    int n;
    f8_json *index;      /* model.safetensors.index.json, or NULL for one file */
    const f8_json *map;  /* its weight_map */
    size_t claimed;      /* tensors read */
    uint16_t *bf16;
} shards;

static void shards_free(shards *s)
{
    for (int i = 0; i < s->n; i++) f8_checkpoint_destroy(s->ck[i]);
    f8_json_free(s->index);
    free(s->bf16);
    f8_ctx_destroy(s->cpu);
}

static int shard_named(const shards *s, const char *file)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->file[i], file) == 0) return i;
    return -1;
}

/* A shard's file name from the index: a plain name in the same directory. */
static int plain_name(const char *f)
{
    const size_t len = strlen(f);
    return len > 12 && len < 200 && !strchr(f, '/') && !strchr(f, '\\') && strcmp(f + len - 12, ".safetensors") == 0 &&
           f[0] != '.';
}

static f8_status load_one(shards *s, const char *dir, const char *file, char *err, size_t n)
{
    char path[1280];
    if (s->n == MAX_SHARDS) return snprintf(err, n, "more than %d shards", MAX_SHARDS), F8_ERR_INVALID_ARGUMENT;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(s->file[s->n], sizeof s->file[0], "%s", file);
    const f8_status st = f8_checkpoint_load(s->cpu, path, &s->ck[s->n]);
    if (st != F8_OK) return snprintf(err, n, "cannot read '%s': %s", path, f8_ctx_last_error(s->cpu)), st;
    s->n++;
    return F8_OK;
}

/* Every tensor of every shard is where the index puts it. */
static f8_status check_index(shards *s, const char *ip, char *err, size_t n)
{
    size_t listed = 0;
    for (const f8_json *e = s->map->child; e; e = e->next, listed++) {
        const int k = shard_named(s, e->str);
        if (!f8_checkpoint_has(s->ck[k], e->key))
            return snprintf(err, n, "%s: \"%.96s\" is in %s by the index, not in that file", ip, e->key, e->str),
                   F8_ERR_INVALID_ARGUMENT;
    }
    size_t held = 0;
    for (int k = 0; k < s->n; k++) {
        const size_t cnt = f8_checkpoint_entry_count(s->ck[k]);
        held += cnt;
        for (size_t i = 0; i < cnt; i++) {
            const char *name = f8_checkpoint_entry_at(s->ck[k], i)->name;
            const f8_json *e = f8_json_get(s->map, name);
            if (!e || strcmp(e->str, s->file[k]) != 0)
                return snprintf(err, n, "%s: %s holds \"%.96s\", which the index %s", ip, s->file[k], name,
                                e ? "puts in another file" : "does not list"), F8_ERR_INVALID_ARGUMENT;
        }
    }
    if (held != listed) /* a name twice in the JSON object */
        return snprintf(err, n, "%s: %zu names in weight_map, %zu tensors in the files", ip, listed, held),
               F8_ERR_INVALID_ARGUMENT;
    return F8_OK;
}

static f8_status shards_open(shards *s, const char *path, char *err, size_t n)
{
    memset(s, 0, sizeof *s);
    f8_ctx_config cc = f8_ctx_config_default();
    TRY(f8_ctx_create(&cc, &s->cpu, err, n));
    if (!is_dir(path)) { /* one .safetensors file */
        const char *slash = strrchr(path, '/');
        char dir[1024];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
        return load_one(s, dir, slash ? slash + 1 : path, err, n);
    }
    char ip[1280];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", path);
    struct stat sb;
    if (stat(ip, &sb) != 0) return load_one(s, path, "model.safetensors", err, n);
    if (!(s->index = parse_file(ip, (size_t)1 << 26, err, n))) return F8_ERR_INVALID_ARGUMENT;
    s->map = f8_json_get(s->index, "weight_map");
    if (!s->map || s->map->kind != F8_JSON_OBJECT || s->map->count == 0)
        return snprintf(err, n, "%s: no \"weight_map\" object of names and files", ip), F8_ERR_INVALID_ARGUMENT;
    for (const f8_json *e = s->map->child; e; e = e->next) {
        if (e->kind != F8_JSON_STRING || !plain_name(e->str))
            return snprintf(err, n, "%s: \"%.96s\" maps to %.80s, not a .safetensors file name in the directory", ip,
                            e->key, shown(e)), F8_ERR_INVALID_ARGUMENT;
        if (shard_named(s, e->str) < 0) TRY(load_one(s, path, e->str, err, n));
    }
    return check_index(s, ip, err, n);
}

/* Piece p (exactly its shape, F32 or BF16) into out [rows, cols]. */
static f8_status read_piece(shards *s, const piece *p, int64_t cols, float *out, char *err, size_t n)
{
    const f8_json *e = s->map ? f8_json_get(s->map, p->name) : NULL;
    const int k = e ? shard_named(s, e->str) : 0;
    const f8_ck_entry *t = k >= 0 ? f8_checkpoint_find_entry(s->ck[k], p->name) : NULL;
    if (!t) return snprintf(err, n, "the Llama checkpoint has no tensor %s", p->name), F8_ERR_INVALID_ARGUMENT;
    if (t->dtype != F8_CK_F32 && t->dtype != F8_CK_BF16)
        return snprintf(err, n, "%s: stored as dtype %d, not F32 or BF16", p->name, (int)t->dtype), F8_ERR_DTYPE;
    const int ok = p->one_d ? t->ndim == 1 && t->shape[0] == cols
                            : t->ndim == 2 && t->shape[0] == p->rows && t->shape[1] == cols;
    if (!ok)
        return snprintf(err, n, "%s: shape [%lld%s%lld] (%d dims), the model's is [%lld%s%lld]", p->name,
                        (long long)t->shape[0], t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)t->shape[1] : 0LL, t->ndim,
                        p->one_d ? (long long)cols : (long long)p->rows, p->one_d ? "" : ", ", p->one_d ? 0LL : (long long)cols),
               F8_ERR_SHAPE;
    hf_reader r = {s->cpu, s->ck[k], "", s->bf16};
    const f8_status st = hf_read_f32(&r, p->name, p->rows, cols, out, err, n);
    s->bf16 = r.bf16;
    s->claimed++;
    return st;
}

/* ---- import ----------------------------------------------------------------------- */

/* The tied head: an lm_head.weight beside the embedding must equal it. */
static f8_status check_tied_head(shards *s, const gpt_config *c, float *a, float *b, char *err, size_t n)
{
    piece lm = {"lm_head.weight", 0, c->vocab, 0}, emb = {"model.embed_tokens.weight", 0, c->vocab, 0};
    const f8_json *e = s->map ? f8_json_get(s->map, lm.name) : NULL;
    if (!(s->map ? e != NULL : f8_checkpoint_has(s->ck[0], lm.name))) return F8_OK;
    TRY(read_piece(s, &lm, c->channels, a, err, n));
    TRY(read_piece(s, &emb, c->channels, b, err, n));
    s->claimed--; /* the embedding was claimed by its target already */
    if (memcmp(a, b, (size_t)(c->vocab * c->channels) * 4) != 0)
        return snprintf(err, n, "lm_head.weight differs from model.embed_tokens.weight, and config.json says "
                                "\"tie_word_embeddings\": true"), F8_ERR_INVALID_ARGUMENT;
    return F8_OK;
}

/* Tensors none of the targets took (old saves' rotary_emb.inv_freq buffers are transformers' own: skipped). */
static f8_status check_claimed(shards *s, char *err, size_t n)
{
    size_t total = 0;
    for (int k = 0; k < s->n; k++)
        for (size_t i = 0; i < f8_checkpoint_entry_count(s->ck[k]); i++) {
            const char *name = f8_checkpoint_entry_at(s->ck[k], i)->name;
            static const char inv_freq[] = ".rotary_emb.inv_freq";
            const size_t len = strlen(name), k = sizeof inv_freq - 1;
            if (len > k && strcmp(name + len - k, inv_freq) == 0) continue;
            total++;
        }
    if (total == s->claimed) return F8_OK;
    /* name one: the first that no target has */
    for (int k = 0; k < s->n; k++)
        for (size_t i = 0; i < f8_checkpoint_entry_count(s->ck[k]); i++) {
            const char *name = f8_checkpoint_entry_at(s->ck[k], i)->name;
            int known = strncmp(name, "model.layers.", 13) == 0 || !strcmp(name, "model.norm.weight") ||
                        !strcmp(name, "model.embed_tokens.weight") || !strcmp(name, "lm_head.weight");
            if (known && strstr(name, ".bias")) known = 0;
            if (!known) return snprintf(err, n, "%s holds \"%.96s\": f8's Llama has no such tensor", s->file[k], name),
                               F8_ERR_INVALID_ARGUMENT;
        }
    return snprintf(err, n, "the checkpoint holds %zu tensors, f8's Llama of this shape reads %zu: a layer past "
                            "num_hidden_layers, a bias or an extra weight", total, s->claimed), F8_ERR_INVALID_ARGUMENT;
}

f8_status hf_llama_import(gpt *m, const char *path, char *err, size_t n)
{
    const gpt_config *c = &m->c;
    hf_llama_config h;
    if (!c->llama) return snprintf(err, n, "hf_llama_import: the model is not a Llama"), F8_ERR_INVALID_ARGUMENT;
    if (hf_llama_read_config(path, &h, err, n) != 0) return F8_ERR_INVALID_ARGUMENT;
    const int64_t G = c->kv_heads > 0 ? c->kv_heads : c->heads;
    if (h.layers != c->layers || h.heads != c->heads || h.kv_heads != G || h.channels != c->channels || h.ffn != c->ffn ||
        h.vocab != c->vocab || h.untied != c->untied)
        return snprintf(err, n, "the checkpoint's Llama (%lld layers, %lld/%lld heads, %lld wide, FFN %lld, vocab %lld, "
                                "%s) is not the model's", (long long)h.layers, (long long)h.heads, (long long)h.kv_heads,
                        (long long)h.channels, (long long)h.ffn, (long long)h.vocab, h.untied ? "untied" : "tied"),
               F8_ERR_SHAPE;
    shards s;
    f8_status st = shards_open(&s, path, err, n);
    const int64_t C = c->channels, W = (c->heads + 2 * G) * (C / c->heads);
    int64_t most = c->padded_vocab * C; /* the largest parameter */
    if (W * C > most) most = W * C;
    if (2 * c->ffn * C > most) most = 2 * c->ffn * C;
    float *a = (float *)malloc((size_t)most * 4), *b = (float *)malloc((size_t)most * 4);
    void *stage = NULL;
    if (st == F8_OK && (!a || !b)) st = F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = f8_ctx_alloc(m->ctx, (size_t)most * 4, &stage);
    target t[6];
    int cnt = 0;
    /* pass 0 reads and checks every tensor, pass 1 writes: a refused file leaves the model as it was */
    for (int pass = 0; pass < 2 && st == F8_OK; pass++) {
        s.claimed = 0;
        for (int64_t l = 0; st == F8_OK && l <= c->layers; l++) {
            st = targets_of(m, l, t, &cnt);
            for (int i = 0; st == F8_OK && i < cnt; i++) {
                memset(a, 0, (size_t)(t[i].view.rows * t[i].view.cols) * 4); /* the head's padding rows */
                for (int j = 0; st == F8_OK && j < t[i].np; j++)
                    st = read_piece(&s, &t[i].p[j], t[i].view.cols, a + t[i].p[j].row0 * t[i].view.cols, err, n);
                if (st == F8_OK && pass && (st = hf_param_put(m, t[i].mod, t[i].which, &t[i].view, a, stage)) != F8_OK)
                    snprintf(err, n, "%s: %s", t[i].p[0].name, f8_ctx_last_error(m->ctx));
            }
        }
        if (st == F8_OK && !pass && !c->untied) st = check_tied_head(&s, c, a, b, err, n);
        if (st == F8_OK && !pass) st = check_claimed(&s, err, n);
    }
    if (st != F8_OK && !err[0]) snprintf(err, n, "%s", f8_ctx_last_error(m->ctx));
    if (stage) f8_ctx_free(m->ctx, stage);
    free(a);
    free(b);
    shards_free(&s);
    return st;
}

/* ---- export ----------------------------------------------------------------------- */

static f8_status write_config(const gpt_config *c, const char *dir, char *err, size_t n)
{
    char path[1280], scaling[256] = "null", params[320];
    const double theta = c->rope_theta > 0 ? c->rope_theta : 500000.0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (c->rope_factor > 0)
        snprintf(scaling, sizeof scaling, "{\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": 1.0, "
                 "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", c->rope_factor);
    /* transformers 5 reads rope_parameters (theta inside), 4 reads rope_theta and rope_scaling: both written, alike */
    if (c->rope_factor > 0)
        snprintf(params, sizeof params, "{\"rope_type\": \"llama3\", \"rope_theta\": %.17g, \"factor\": %.17g, "
                 "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}",
                 theta, c->rope_factor);
    else
        snprintf(params, sizeof params, "{\"rope_type\": \"default\", \"rope_theta\": %.17g}", theta);
    FILE *f = fopen(path, "w");
    if (!f) return snprintf(err, n, "cannot write '%s': %s", path, strerror(errno)), F8_ERR_IO;
    fprintf(f,
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"vocab_size\": %lld,\n"
            "  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n"
            "  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n"
            "  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": 1e-05,\n"
            "  \"rope_theta\": %.17g,\n  \"rope_scaling\": %s,\n  \"rope_parameters\": %s,\n  \"tie_word_embeddings\": %s,\n"
            "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"attention_dropout\": 0.0,\n"
            "  \"initializer_range\": 0.02,\n  \"pretraining_tp\": 1,\n  \"use_cache\": true,\n"
            "  \"torch_dtype\": \"float32\"\n}\n",
            (long long)c->vocab, (long long)c->channels, (long long)c->ffn, (long long)c->layers, (long long)c->heads,
            (long long)(c->kv_heads > 0 ? c->kv_heads : c->heads), (long long)(c->channels / c->heads),
            (long long)gpt_positions(c), theta, scaling, params, c->untied ? "false" : "true");
    if (fclose(f) != 0) return snprintf(err, n, "cannot write '%s'", path), F8_ERR_IO;
    return F8_OK;
}

f8_status hf_llama_export(gpt *m, const char *dir, char *err, size_t n)
{
    const gpt_config *c = &m->c;
    if (!c->llama) return snprintf(err, n, "hf_llama_export: the model is not a Llama"), F8_ERR_INVALID_ARGUMENT;
    const size_t cap = (size_t)c->layers * 9 + 4;
    hf_out_tensor *o = (hf_out_tensor *)calloc(cap, sizeof *o);
    const int64_t C = c->channels, G = c->kv_heads > 0 ? c->kv_heads : c->heads;
    int64_t most = c->padded_vocab * C;
    if ((c->heads + 2 * G) * (C / c->heads) * C > most) most = (c->heads + 2 * G) * (C / c->heads) * C;
    if (2 * c->ffn * C > most) most = 2 * c->ffn * C;
    float *a = (float *)malloc((size_t)most * 4);
    void *stage = NULL;
    f8_status st = o && a ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = f8_ctx_alloc(m->ctx, (size_t)most * 4, &stage);
    size_t k = 0;
    target t[6];
    int cnt = 0;
    for (int64_t l = 0; st == F8_OK && l <= c->layers; l++) {
        st = targets_of(m, l, t, &cnt);
        for (int i = 0; st == F8_OK && i < cnt; i++) {
            const int64_t cols = t[i].view.cols;
            if ((st = hf_param_get(m, &t[i].view, a, stage)) != F8_OK) break;
            for (int j = 0; st == F8_OK && j < t[i].np; j++, k++) {
                const piece *p = &t[i].p[j];
                snprintf(o[k].name, sizeof o[k].name, "%s", p->name);
                o[k].ndim = p->one_d ? 1 : 2;
                o[k].dims[0] = p->one_d ? cols : p->rows, o[k].dims[1] = cols;
                o[k].data = (float *)malloc((size_t)(p->rows * cols) * 4);
                if (!o[k].data) st = F8_ERR_OUT_OF_MEMORY;
                else memcpy(o[k].data, a + p->row0 * cols, (size_t)(p->rows * cols) * 4);
            }
        }
    }
    if (st != F8_OK && !err[0]) snprintf(err, n, "%s", f8_ctx_last_error(m->ctx));
    char path[1280];
    if (st == F8_OK && mkdir(dir, 0777) != 0 && errno != EEXIST)
        st = (snprintf(err, n, "cannot create '%s': %s", dir, strerror(errno)), F8_ERR_IO);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st == F8_OK && hf_write_safetensors(path, o, k, err, n) != 0) st = F8_ERR_IO;
    if (st == F8_OK) st = write_config(c, dir, err, n);
    for (size_t i = 0; o && i < cap; i++) free(o[i].data);
    free(o);
    free(a);
    if (stage) f8_ctx_free(m->ctx, stage);
    return st;
}
