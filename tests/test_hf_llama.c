/*
 * test_hf_llama.c — Hugging Face Llama checkpoints in and out of the
 * trainer's Llama (train/hf_llama.c) without transformers: a tiny
 * LlamaForCausalLM in the layout save_pretrained writes (made here with
 * known values; tied and untied heads, FP32 and BF16, one file and two
 * shards with their index) is imported and checked where it lands (q, k, v
 * stacked into qkv's rows, gate over up in fc1, the padded head rows zero,
 * an untied embedding table), exported and compared with what was written
 * bit for bit; an f8 Llama goes out and comes back with every parameter and
 * its loss bit for bit; --init-from, eval-hf and export-hf through the
 * trainer and the program; and hostile files and configs are refused with
 * the key, name or value, leaving the model as it was.
 * tools/check_llama_hf.py checks the same files against transformers itself.
 */
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "hf_fixture.h"
#include "f8train.h"

enum { L = 2, C = 64, H = 4, G = 2, HD = 16, F = 96, V = 300, SEQ = 8 };
static char dir[64];


/* The tensors in a fixed order: per layer 9, then norm, embed_tokens, (lm_head). */
static int specs(spec *s, int untied)
{
    int k = 0;
    for (int l = 0; l < L; l++) {
        const struct { const char *n; int64_t r, c; } b[] = {
            {"input_layernorm.weight", C, 0},      {"self_attn.q_proj.weight", H * HD, C},
            {"self_attn.k_proj.weight", G * HD, C}, {"self_attn.v_proj.weight", G * HD, C},
            {"self_attn.o_proj.weight", C, C},     {"post_attention_layernorm.weight", C, 0},
            {"mlp.gate_proj.weight", F, C},        {"mlp.up_proj.weight", F, C},
            {"mlp.down_proj.weight", C, F}};
        for (size_t j = 0; j < 9; j++, k++) {
            snprintf(s[k].name, sizeof s[k].name, "model.layers.%d.%s", l, b[j].n);
            s[k].r = b[j].r, s[k].c = b[j].c;
        }
    }
    snprintf(s[k].name, sizeof s[k].name, "model.norm.weight"), s[k].r = C, s[k].c = 0, k++;
    snprintf(s[k].name, sizeof s[k].name, "model.embed_tokens.weight"), s[k].r = V, s[k].c = C, k++;
    if (untied) snprintf(s[k].name, sizeof s[k].name, "lm_head.weight"), s[k].r = V, s[k].c = C, k++;
    return k;
}

static int64_t count_of(const spec *s) { return s->r * (s->c ? s->c : 1); }

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) die(path, NULL);
}

/* A variant of the file: what is changed from a good one. */
typedef struct variant {
    int untied, bf16, shards;
    const char *eps;          /* rms_norm_eps's literal; NULL: absent */
    const char *extra;        /* more config keys (",\n  \"k\": v") */
    const char *bad;          /* a tensor to spoil, by name */
    int how;                  /* 1 NaN in it, 2 a row more, 3 left out, 4 another tensor of that name added */
    const char *index;        /* the index's text instead of the right one */
    int lm_head_tied;         /* tied, with an lm_head.weight (1: equal to the embedding, 2: not) */
} variant;

static void write_llama(const char *sub, const variant *v)
{
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0777);
    spec s[32];
    int n = specs(s, v->untied);
    hf_out_tensor t[32];
    memset(t, 0, sizeof t);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (v->bad && v->how == 3 && !strcmp(s[i].name, v->bad)) continue;
        memcpy(t[k].name, s[i].name, sizeof t[k].name);
        t[k].ndim = s[i].c ? 2 : 1;
        t[k].dims[0] = s[i].r + (v->bad && v->how == 2 && !strcmp(s[i].name, v->bad));
        t[k].dims[1] = s[i].c;
        const int64_t cnt = t[k].dims[0] * (s[i].c ? s[i].c : 1);
        t[k].data = (float *)xmalloc((size_t)cnt * 4);
        for (int64_t e = 0; e < cnt; e++) t[k].data[e] = val(i, e);
        if (v->bad && v->how == 1 && !strcmp(s[i].name, v->bad)) t[k].data[5] = NAN;
        t[k].bf16 = v->bf16;
        k++;
    }
    if (v->lm_head_tied || (v->bad && v->how == 4)) {
        snprintf(t[k].name, sizeof t[k].name, "%s", v->lm_head_tied ? "lm_head.weight" : v->bad);
        t[k].ndim = 2, t[k].dims[0] = V, t[k].dims[1] = C;
        t[k].data = (float *)xmalloc((size_t)(V * C) * 4);
        for (int64_t e = 0; e < V * C; e++) t[k].data[e] = val(2 * 9 + 1, e) + (v->lm_head_tied == 2 ? 1.0f : 0.0f);
        t[k].bf16 = v->bf16;
        k++;
    }
    if (!v->shards) {
        snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, sub);
        CHECK(hf_write_safetensors(path, t, (size_t)k, err, sizeof err) == 0, "%s", err);
    } else { /* layer 0 in the first shard, the rest in the second (written sorted: split by name) */
        int a = 0;
        hf_out_tensor first[32], second[32];
        int nf = 0, ns = 0;
        for (int i = 0; i < k; i++) {
            if (!strncmp(t[i].name, "model.layers.0.", 15)) first[nf++] = t[i];
            else second[ns++] = t[i];
        }
        snprintf(path, sizeof path, "%s/%s/model-00001-of-00002.safetensors", dir, sub);
        CHECK(hf_write_safetensors(path, first, (size_t)nf, err, sizeof err) == 0, "%s", err);
        snprintf(path, sizeof path, "%s/%s/model-00002-of-00002.safetensors", dir, sub);
        CHECK(hf_write_safetensors(path, second, (size_t)ns, err, sizeof err) == 0, "%s", err);
        char *ix = (char *)xmalloc(16384);
        a = snprintf(ix, 16384, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        for (int i = 0; i < nf + ns; i++)
            a += snprintf(ix + a, (size_t)(16384 - a), "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                          i < nf ? first[i].name : second[i - nf].name, i < nf ? 1 : 2);
        snprintf(ix + a, (size_t)(16384 - a), "}}\n");
        snprintf(path, sizeof path, "%s/%s/model.safetensors.index.json", dir, sub);
        write_text(path, v->index ? v->index : ix);
        free(ix);
    }
    for (int i = 0; i < k; i++) free(t[i].data);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"hidden_size\": %d,\n"
             "  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
             "  \"num_key_value_heads\": %d,\n  \"vocab_size\": %d,\n  \"max_position_embeddings\": 64,\n"
             "  \"rope_theta\": 10000.0,\n  \"tie_word_embeddings\": %s%s%s%s\n}\n",
             C, F, L, H, G, V, v->untied ? "false" : "true", v->eps ? ",\n  \"rms_norm_eps\": " : "", v->eps ? v->eps : "",
             v->extra ? v->extra : "");
    snprintf(path, sizeof path, "%s/%s/config.json", dir, sub);
    write_text(path, cfg);
}

static void make_model(f8_ctx *ctx, gpt *m, int untied, uint64_t seed)
{
    gpt_config c;
    memset(&c, 0, sizeof c);
    c.vocab = V, c.padded_vocab = 384, c.seq = SEQ, c.layers = L, c.heads = H, c.channels = C, c.batch = 1;
    c.fp8 = 1, c.dtype = F8_DTYPE_FP32, c.seed = seed;
    c.llama = 1, c.kv_heads = G, c.ffn = F, c.untied = untied, c.rope_theta = 10000.0;
    char err[256];
    if (gpt_create(ctx, &c, m, err, sizeof err) != F8_OK) die(err, ctx);
}

/* A parameter's host values (a CPU ctx's memory), as FP32. */
static const float *param(f8_module *mod, f8_param which, int64_t *rows, int64_t *cols)
{
    f8_tensor v;
    if (f8_module_param(mod, which, 0, &v) != F8_OK) die("f8_module_param", NULL);
    *rows = v.rows, *cols = v.cols;
    return (const float *)v.data;
}

/* Elements of want (tensor k of the specs, maybe BF16-rounded) that differ from got. */
static int64_t differ(const float *got, int k, int64_t count, int bf16)
{
    int64_t bad = 0;
    for (int64_t e = 0; e < count; e++) {
        float w = val(k, e);
        if (bf16) w = f8_bf16_to_float(f8_bf16_from_float(w));
        bad += memcmp(&got[e], &w, 4) != 0;
    }
    return bad;
}

/* Where the file's tensors land in the model. */
static void check_landed(gpt *m, int untied, int bf16, const char *what)
{
    int64_t r, c;
    const int per = 9;
    const float *qkv = param(m->blocks[1].qkv, F8_PARAM_WEIGHT, &r, &c);
    CHECK(r == (H + 2 * G) * HD && c == C, "%s: qkv [%lld, %lld]", what, (long long)r, (long long)c);
    int64_t bad = differ(qkv, per + 1, H * HD * C, bf16) + differ(qkv + H * HD * C, per + 2, G * HD * C, bf16) +
                  differ(qkv + (H + G) * HD * C, per + 3, G * HD * C, bf16);
    CHECK(bad == 0, "%s: layer 1's qkv rows are q, k, v (%lld differ)", what, (long long)bad);
    const float *fc1 = param(m->blocks[1].mlp, F8_PARAM_FC1_WEIGHT, &r, &c);
    bad = differ(fc1, per + 6, F * C, bf16) + differ(fc1 + F * C, per + 7, F * C, bf16);
    CHECK(r == 2 * F && bad == 0, "%s: fc1 is gate over up (%lld differ)", what, (long long)bad);
    const float *fc2 = param(m->blocks[0].mlp, F8_PARAM_FC2_WEIGHT, &r, &c);
    CHECK(r == C && c == F && differ(fc2, 8, C * F, bf16) == 0, "%s: fc2 is down_proj", what);
    const float *ln = param(m->blocks[0].mlp, F8_PARAM_LN_WEIGHT, &r, &c);
    CHECK(differ(ln, 5, C, bf16) == 0, "%s: the MLP's norm is post_attention_layernorm", what);
    const float *hn = param(m->head, F8_PARAM_LN_WEIGHT, &r, &c);
    CHECK(differ(hn, 2 * per, C, bf16) == 0, "%s: the head's norm is model.norm", what);
    const float *hw = param(m->head, F8_PARAM_WEIGHT, &r, &c);
    const int head_k = untied ? 2 * per + 2 : 2 * per + 1;
    int64_t pad = 0;
    for (int64_t e = V * C; e < r * c; e++) pad += hw[e] != 0.0f;
    CHECK(r == 384 && differ(hw, head_k, V * C, bf16) == 0 && pad == 0, "%s: the head is %s, padding rows zero (%lld not)",
          what, untied ? "lm_head" : "embed_tokens", (long long)pad);
    if (untied)
        CHECK(differ((const float *)m->wte, 2 * per + 1, V * C, bf16) == 0, "%s: the untied embedding table", what);
}

/* Every tensor of an exported file against what was written (tensor names from the specs). */
static void check_exported(const char *sub, int untied, int bf16, const char *what)
{
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *ctx = NULL;
    char path[512], err[256];
    if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK) die(err, NULL);
    snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, sub);
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_load(ctx, path, &ck));
    spec s[32];
    const int n = specs(s, untied);
    int64_t bad = 0;
    for (int k = 0; ck && k < n; k++) {
        const f8_ck_entry *e = f8_checkpoint_find_entry(ck, s[k].name);
        const int shape = e && e->dtype == F8_CK_F32 && e->ndim == (s[k].c ? 2 : 1) && e->shape[0] == s[k].r &&
                          (!s[k].c || e->shape[1] == s[k].c);
        CHECK(shape, "%s: %s exported as F32 of its shape", what, s[k].name);
        if (shape) bad += differ((const float *)e->data, k, count_of(&s[k]), bf16);
    }
    CHECK(ck && f8_checkpoint_entry_count(ck) == (size_t)n && bad == 0, "%s: %zu tensors, %lld elements differ", what,
          ck ? f8_checkpoint_entry_count(ck) : 0, (long long)bad);
    f8_checkpoint_destroy(ck);
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    hf_llama_config h;
    CHECK(hf_llama_read_config(path, &h, err, sizeof err) == 0 && h.layers == L && h.heads == H && h.kv_heads == G &&
              h.channels == C && h.ffn == F && h.vocab == V && h.untied == untied && h.rope_theta == 10000.0,
          "%s: the exported config.json reads back: %s", what, err);
    f8_ctx_destroy(ctx);
}

static void import_export(void)
{
    static const struct { variant v; const char *sub; } cases[] = {
        {{0, 0, 0, "1e-05", NULL, NULL, 0, NULL, 0}, "tied"},
        {{1, 0, 0, "1e-05", NULL, NULL, 0, NULL, 0}, "untied"},
        {{0, 1, 0, "1e-05", NULL, NULL, 0, NULL, 0}, "bf16"},
        {{1, 0, 1, "1e-05", NULL, NULL, 0, NULL, 0}, "sharded"},
        {{0, 0, 0, "1e-05", NULL, NULL, 0, NULL, 1}, "tied_lm_head"},
        {{0, 0, 0, "1e-05", NULL, "model.layers.0.self_attn.rotary_emb.inv_freq", 4, NULL, 0}, "inv_freq"}, /* skipped */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const variant *v = &cases[i].v;
        write_llama(cases[i].sub, v);
        f8_ctx_config cc = f8_ctx_config_default();
        f8_ctx *ctx = NULL;
        char err[512] = "", path[512], out[64];
        if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK) die(err, NULL);
        gpt m;
        make_model(ctx, &m, v->untied, 3);
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].sub);
        CHECK(hf_llama_is(path), "%s: config.json says llama", cases[i].sub);
        f8_status st = hf_llama_import(&m, path, err, sizeof err);
        CHECK(st == F8_OK, "%s: import: %s", cases[i].sub, err);
        if (st == F8_OK) check_landed(&m, v->untied, v->bf16, cases[i].sub);
        snprintf(out, sizeof out, "%s_out", cases[i].sub);
        snprintf(path, sizeof path, "%s/%s", dir, out);
        st = hf_llama_export(&m, path, err, sizeof err);
        CHECK(st == F8_OK, "%s: export: %s", cases[i].sub, err);
        if (st == F8_OK) check_exported(out, v->untied, v->bf16, cases[i].sub);
        gpt_destroy(&m);
        f8_ctx_destroy(ctx);
    }
}

/* f8's own Llama out to the Hugging Face layout and back: every parameter, then its loss, bit for bit. */
static void f8_round_trip(int untied)
{
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *ctx = NULL;
    char err[512] = "", path[256];
    if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK) die(err, NULL);
    gpt a, b;
    make_model(ctx, &a, untied, 7);
    make_model(ctx, &b, untied, 11);
    snprintf(path, sizeof path, "%s/f8_%s", dir, untied ? "untied" : "tied");
    CHECK_OK(ctx, hf_llama_export(&a, path, err, sizeof err));
    CHECK(hf_llama_import(&b, path, err, sizeof err) == F8_OK, "the f8 export imports: %s", err);
    size_t differ_params = 0;
    for (int i = 0; i < a.params.n; i++) {
        const f8_tensor *x = &a.params.v[i].value, *y = &b.params.v[i].value;
        /* the head's and the embedding's padding rows past the vocabulary are not in the file: they come back 0 */
        const int64_t rows = x->rows == 384 ? V : x->rows;
        differ_params += memcmp(x->data, y->data, (size_t)(rows * x->cols) * 4) != 0;
    }
    CHECK(a.params.n == b.params.n && differ_params == 0, "%s: %zu of %d parameters differ after the round trip",
          untied ? "untied" : "tied", differ_params, a.params.n);
    int32_t tok[SEQ], tgt[SEQ];
    for (int i = 0; i < SEQ; i++) tok[i] = (i * 37 + 5) % V, tgt[i] = (i * 91 + 2) % V;
    float la[SEQ], lb[SEQ];
    gpt *ms[2] = {&a, &b};
    float *ls[2] = {la, lb};
    for (int k = 0; k < 2; k++) {
        memcpy(ms[k]->tokens, tok, sizeof tok);
        memcpy(ms[k]->targets, tgt, sizeof tgt);
        CHECK_OK(ctx, gpt_forward(ms[k], 1, 0, 1.0f, F8_MICROBATCH_NONE));
        memcpy(ls[k], ms[k]->losses, sizeof la);
    }
    CHECK(memcmp(la, lb, sizeof la) == 0 && isfinite(la[0]) && la[0] > 0, "%s: the losses after the round trip (%g, %g)",
          untied ? "untied" : "tied", (double)la[0], (double)lb[0]);
    gpt_destroy(&a);
    gpt_destroy(&b);
    f8_ctx_destroy(ctx);
}

/* Hostile configs, tensors and indexes: refused with the key, name or value, the model unchanged. */
static void hostile(void)
{
    static const char *const I1 = "model-00001-of-00002.safetensors", *const I2 = "model-00002-of-00002.safetensors";
    char traversal[256], misplaced[8192], unlisted[8192];
    snprintf(traversal, sizeof traversal, "{\"weight_map\": {\"model.norm.weight\": \"../%s\"}}", I2);
    /* every name where it is, but layer 0's input norm said to be in the second file; or not listed */
    int a = snprintf(misplaced, sizeof misplaced, "{\"weight_map\": {");
    int b = snprintf(unlisted, sizeof unlisted, "{\"weight_map\": {");
    spec s[32];
    const int n = specs(s, 0);
    for (int k = 0; k < n; k++) {
        const int first = !strncmp(s[k].name, "model.layers.0.", 15);
        a += snprintf(misplaced + a, sizeof misplaced - (size_t)a, "%s\"%s\": \"%s\"", k ? ", " : "", s[k].name,
                      first && k ? I1 : I2);
        if (k != 3) b += snprintf(unlisted + b, sizeof unlisted - (size_t)b, "%s\"%s\": \"%s\"", k ? ", " : "", s[k].name, first ? I1 : I2);
    }
    snprintf(misplaced + a, sizeof misplaced - (size_t)a, "}}");
    snprintf(unlisted + b, sizeof unlisted - (size_t)b, "}}");
    const struct { variant v; const char *want; } cases[] = {
        {{0, 0, 0, "1e-05", ",\n  \"attention_bias\": true", NULL, 0, NULL, 0}, "\"attention_bias\" is true"},
        {{0, 0, 0, "1e-05", ",\n  \"mlp_bias\": true", NULL, 0, NULL, 0}, "\"mlp_bias\" is true"},
        {{0, 0, 0, "1e-05", ",\n  \"hidden_act\": \"gelu\"", NULL, 0, NULL, 0}, "\"hidden_act\" is gelu"},
        {{0, 0, 0, "1e-05", ",\n  \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", NULL, 0, NULL, 0}, "is yarn"},
        {{0, 0, 0, "1e-05", ",\n  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 2.0, "
                           "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", NULL, 0, NULL, 0},
         "\"low_freq_factor\" is 2"},
        {{0, 0, 0, "1e-05", ",\n  \"rope_parameters\": {\"rope_type\": \"linear\", \"rope_theta\": 1e4, \"factor\": 2.0}", NULL, 0,
          NULL, 0}, "\"rope_parameters\": \"rope_type\" is linear"},
        {{0, 0, 0, "1e-06", NULL, NULL, 0, NULL, 0}, "\"rms_norm_eps\" is 1e-06"},
        {{0, 0, 0, NULL, NULL, NULL, 0, NULL, 0}, "\"rms_norm_eps\" is absent"},
        {{0, 0, 0, "1e-05", ",\n  \"head_dim\": 32", NULL, 0, NULL, 0}, "\"head_dim\" is 32"},
        {{0, 0, 0, "1e-05", ",\n  \"quantization_config\": {\"quant_method\": \"fp8\"}", NULL, 0, NULL, 0}, "quantization_config"},
        {{0, 0, 0, "1e-05", ",\n  \"attention_dropout\": 0.1", NULL, 0, NULL, 0}, "\"attention_dropout\" is 0.1"},
        {{0, 0, 0, "1e-05", ",\n  \"architectures\": [\"LlamaForSequenceClassification\"]", NULL, 0, NULL, 0}, "architectures"},
        {{1, 0, 0, "1e-05", NULL, NULL, 0, NULL, 0}, "is not the model's"}, /* untied file, tied model */
        {{0, 0, 0, "1e-05", NULL, NULL, 0, NULL, 2}, "lm_head.weight differs"},
        {{0, 0, 0, "1e-05", NULL, "model.layers.1.self_attn.q_proj.bias", 4, NULL, 0}, "q_proj.bias"},
        {{0, 0, 0, "1e-05", NULL, "model.layers.1.self_attn.k_proj.weight", 2, NULL, 0}, "k_proj.weight: shape [33, 64]"},
        {{0, 0, 0, "1e-05", NULL, "model.layers.1.mlp.up_proj.weight", 1, NULL, 0}, "up_proj.weight: element 5"},
        {{0, 0, 0, "1e-05", NULL, "model.layers.1.mlp.down_proj.weight", 3, NULL, 0}, "no tensor model.layers.1.mlp.down_proj"},
        {{0, 0, 0, "1e-05", NULL, "model.layers.2.mlp.down_proj.weight", 4, NULL, 0}, "reads"},
        {{0, 0, 1, "1e-05", NULL, NULL, 0, traversal, 0}, "not a .safetensors file name"},
        {{0, 0, 1, "1e-05", NULL, NULL, 0, misplaced, 0}, "not in that file"},
        {{0, 0, 1, "1e-05", NULL, NULL, 0, unlisted, 0}, "does not list"},
        {{0, 0, 1, "1e-05", NULL, NULL, 0, "{\"weight_map\": []}", 0}, "no \"weight_map\""},
    };
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *ctx = NULL;
    char err[512] = "", path[256];
    if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK) die(err, NULL);
    gpt m;
    make_model(ctx, &m, 0, 3);
    int64_t r, c;
    const float *w = param(m.blocks[0].qkv, F8_PARAM_WEIGHT, &r, &c);
    float *before = (float *)xmalloc((size_t)(r * c) * 4);
    memcpy(before, w, (size_t)(r * c) * 4);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char sub[32];
        snprintf(sub, sizeof sub, "bad%zu", i);
        write_llama(sub, &cases[i].v);
        snprintf(path, sizeof path, "%s/%s", dir, sub);
        err[0] = 0;
        const f8_status st = hf_llama_import(&m, path, err, sizeof err);
        CHECK(st != F8_OK && strstr(err, cases[i].want), "case %zu refused naming '%s': %s", i, cases[i].want, err);
        CHECK(memcmp(w, before, (size_t)(r * c) * 4) == 0, "case %zu: the model is unchanged", i);
        if (i < 3 || i == 17 || i == 19) printf("  %-26s -> %s\n", cases[i].want, err);
    }
    /* a truncated file: the safetensors reader's own refusal */
    snprintf(path, sizeof path, "%s/tied/model.safetensors", dir);
    CHECK(truncate(path, 4000) == 0, "truncate");
    snprintf(path, sizeof path, "%s/tied", dir);
    CHECK(hf_llama_import(&m, path, err, sizeof err) != F8_OK && strstr(err, "cannot read"), "a truncated file: %s", err);
    CHECK(memcmp(w, before, (size_t)(r * c) * 4) == 0, "truncated: the model is unchanged");
    free(before);
    gpt_destroy(&m);
    f8_ctx_destroy(ctx);
}

/* Llama 3's RoPE as transformers 4 and 5 write it: theta and the llama3 factor read either way. */
static void rope_keys(void)
{
    static const char *const extra[2] = {
        ",\n  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}",
        ",\n  \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 32.0, "
        "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"};
    for (int i = 0; i < 2; i++) {
        char sub[16], path[256], err[512] = "";
        snprintf(sub, sizeof sub, "rope%d", i);
        write_llama(sub, &(variant){0, 0, 0, "1e-05", extra[i], NULL, 0, NULL, 0});
        snprintf(path, sizeof path, "%s/%s", dir, sub);
        hf_llama_config h;
        const int rc = hf_llama_read_config(path, &h, err, sizeof err);
        CHECK(rc == 0 && h.rope_factor == 32.0 && h.rope_theta == (i ? 500000.0 : 10000.0),
              "%s: theta %g, llama3 factor %g: %s", i ? "rope_parameters" : "rope_scaling", rc ? 0 : h.rope_theta,
              rc ? 0 : h.rope_factor, err);
    }
}

/* --init-from through the trainer, a checkpoint, export-hf of it, and eval-hf of both ends. */
static void doors(void)
{
    write_llama("door", &(variant){1, 0, 0, "1e-05", NULL, NULL, 0, NULL, 0});
    train_options o = train_options_default();
    char path[256], err[512] = "", ck[256], out[4096], args[1024];
    snprintf(path, sizeof path, "%s/door", dir);
    snprintf(ck, sizeof ck, "%s/door.safetensors", dir);
    o.init_from = path;
    o.backend = "cpu";
    o.seq = SEQ, o.batch = 2, o.grad_accum = 1, o.steps = 2, o.fp8 = 1, o.warmup = 1;
    o.log = "", o.plot = "", o.quiet = 1, o.sample = 0, o.val_every = 0;
    trainer *t = NULL;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "trainer --init-from a Llama: %s", err);
    if (!t) return;
    gpt *m = trainer_model(t);
    CHECK(m->c.llama && m->c.layers == L && m->c.heads == H && m->c.kv_heads == G && m->c.ffn == F && m->c.untied &&
              m->c.vocab == V, "the trainer's model is the file's Llama");
    check_landed(m, 1, 0, "trainer --init-from");
    double loss = 0;
    CHECK_OK(NULL, trainer_step(t, &loss));
    CHECK(isfinite(loss) && loss > 0, "a step from the Llama: loss %g", loss);
    CHECK_OK(NULL, trainer_save(t, ck));
    trainer_destroy(t);
    /* the trained model out, and eval-hf gives the same loss from the export as from the checkpoint's own model */
    snprintf(args, sizeof args, "export-hf %s %s/door_out", ck, dir);
    CHECK(run(args, out, sizeof out) == 0, "export-hf of a Llama checkpoint: %s", out);
    char tokens[256];
    snprintf(tokens, sizeof tokens, "%s/tokens.txt", dir);
    write_text(tokens, "5 17 299 0 42 42 7 100 250\n");
    snprintf(args, sizeof args, "eval-hf %s/door_out --tokens %s --backend cpu", dir, tokens);
    const int rc = run(args, out, sizeof out);
    const char *lp = strstr(out, "loss ");
    CHECK(rc == 0 && lp, "eval-hf of the export: %s", out);
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *ctx = NULL;
    if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK) die(err, NULL);
    gpt e; /* the checkpoint's model as eval-hf builds one: FP8 off, FP32 */
    gpt_config gc;
    memset(&gc, 0, sizeof gc);
    gc.vocab = V, gc.padded_vocab = 384, gc.seq = SEQ, gc.layers = L, gc.heads = H, gc.channels = C, gc.batch = 1;
    gc.dtype = F8_DTYPE_FP32, gc.seed = 1, gc.llama = 1, gc.kv_heads = G, gc.ffn = F, gc.untied = 1, gc.rope_theta = 10000.0;
    CHECK_OK(ctx, gpt_create(ctx, &gc, &e, err, sizeof err));
    f8_checkpoint *k = NULL;
    CHECK_OK(ctx, f8_checkpoint_load(ctx, ck, &k));
    f8_status st = k ? gpt_checkpoint_restore(&e, k) : F8_ERR_IO;
    CHECK(st == F8_OK, "the checkpoint restores into an FP8-off model: %s", f8_ctx_last_error(ctx));
    f8_checkpoint_destroy(k);
    const int32_t tk[SEQ + 1] = {5, 17, 299, 0, 42, 42, 7, 100, 250};
    memcpy(e.tokens, tk, SEQ * 4);
    memcpy(e.targets, tk + 1, SEQ * 4);
    CHECK_OK(ctx, gpt_forward(&e, 1, 0, 1.0f, F8_MICROBATCH_NONE));
    double sum = 0;
    for (int i = 0; i < SEQ; i++) sum += e.losses[i];
    char want[64];
    snprintf(want, sizeof want, "loss %.9g", sum / SEQ);
    CHECK(lp && strncmp(lp, want, strlen(want)) == 0, "eval-hf's %.20s is the checkpoint's %s", lp ? lp : "(none)", want);
    gpt_destroy(&e);
    f8_ctx_destroy(ctx);
    /* the same checkpoint to ONNX (test_onnx runs Llama graphs on ONNX Runtime) */
    snprintf(args, sizeof args, "export %s %s/door.onnx --quiet", ck, dir);
    CHECK(run(args, out, sizeof out) == 0, "f8_train export of a Llama checkpoint: %s", out);
    snprintf(args, sizeof args, "%s/door.onnx", dir);
    struct stat sb;
    memset(&sb, 0, sizeof sb);
    CHECK(stat(args, &sb) == 0 && sb.st_size > 100000, "the Llama's ONNX file: %lld bytes", (long long)sb.st_size);
    /* eval-hf refuses a config f8 does not compute */
    snprintf(args, sizeof args, "eval-hf %s/bad0 --tokens %s --backend cpu", dir, tokens);
    CHECK(run(args, out, sizeof out) != 0 && strstr(out, "attention_bias"), "eval-hf refuses a biased Llama: %s", out);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/f8_hf_llama_XXXXXX");
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    import_export();
    f8_round_trip(0);
    f8_round_trip(1);
    hostile();
    rope_keys();
    doors();
    if (!test_failures) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cannot remove %s", dir);
    }
    return test_finish("test_hf_llama");
}
