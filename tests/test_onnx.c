/*
 * test_onnx.c — the ONNX exporter (f8.h, "ONNX export") against f8's own CPU
 * forward, through ONNX Runtime.
 *
 * Every module kind (Linear; LayerNormLinear with both norms; LayerNormMLP
 * with all seven activations; FP8 on and off; FP32 and BF16 parameters; an
 * FP8 primary weight; shapes 5 x 17 / 33 / 250), attention (FP32, BF16),
 * the embedding, a small Llama (train/llama.c: RoPE, grouped- and multi-query
 * attention, tied and untied heads; FP8, FP32, BF16), a small GPT (train/gpt.c: FP8, BF16, FP8 off, dynamic batch
 * and sequence; the tied table as per-row FP8, fp8_embedding, against f8's
 * forward, against f8's forward with the table rounded the same way, and
 * the bytes it saves) and `f8_train export` of a trained checkpoint are exported
 * after a forward and a scale update (so the scales are not powers of two);
 * their inputs and f8's outputs go to .npy files beside the models and a
 * manifest, and tests/onnx_check.py checks each model (onnx.checker full
 * check, byte-identical re-serialization), runs it on ONNX Runtime's CPU
 * provider and compares (tolerances and why: onnx_check.py). It also
 * measures how often QuantizeLinear's division gives another FP8 code than
 * f8's product, on a sweep of values and scales.
 *
 * The ONNX fuzz target (fuzz/fuzz_onnx.c) replays fuzz/corpus_onnx.
 * Python: $F8_PYTHON, else .venv/bin/python3 (`.ci/run` makes it), else the
 * test skips; with F8_REQUIRE_ONNX=1 it fails instead. The C-side checks
 * (errors, rollback, serialize) run either way.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "../fuzz/fuzz.h" /* linked with fuzz/fuzz_onnx.c and fuzz/replay.c */

#include "check.h"
#include "f8train.h"

static char dir[256];
static FILE *manifest;
static int n_cases;
static test_rng rng;

/* ---- files --------------------------------------------------------------- */

/* A .npy file: dtype "<f4" or "<i8", shape up to 4 dims. */
static void write_npy(const char *name, const void *data, const char *dtype, size_t es, const int64_t *shape, int nd)
{
    char path[512], hdr[256], sh[128] = "";
    size_t count = 1;
    for (int d = 0; d < nd; d++) {
        snprintf(sh + strlen(sh), sizeof sh - strlen(sh), "%lld,%s", (long long)shape[d], nd > 1 && d < nd - 1 ? " " : "");
        count *= (size_t)shape[d];
    }
    int k = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", dtype, sh);
    while ((10 + k + 1) % 64) hdr[k++] = ' ';
    hdr[k++] = '\n';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot write a test file", NULL);
    const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    const unsigned char len[2] = {(unsigned char)(k & 0xFF), (unsigned char)(k >> 8)};
    fwrite(magic, 1, 8, f);
    fwrite(len, 1, 2, f);
    fwrite(hdr, 1, (size_t)k, f);
    fwrite(data, es, count, f);
    fclose(f);
}

/* One manifest entry: model, input/output arrays (float32 unless int64),
 * the comparison's kind. */
static void add_case(const char *name, const char *kind, const char *in_name, const char *in_file, const char *out_file)
{
    fprintf(manifest, "%s{\"name\": \"%s\", \"model\": \"%s.onnx\", \"kind\": \"%s\", \"inputs\": {\"%s\": \"%s\"}, "
                      "\"outputs\": [\"%s\"]}\n", n_cases++ ? "," : "", name, name, kind, in_name, in_file, out_file);
}

static char *path_of(const char *name, const char *ext)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s%s", dir, name, ext);
    return p;
}

/* ---- host <-> backend ----------------------------------------------------------- */

/* Upload host floats as dtype into a new buffer. */
static void *upload(f8_ctx *ctx, const float *h, size_t n, f8_dtype dt)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, n * 4 + 4, &p) != F8_OK) die("alloc", ctx);
    if (dt == F8_DTYPE_BF16) {
        uint16_t *b = (uint16_t *)xmalloc(n * 2);
        for (size_t i = 0; i < n; i++) b[i] = f8_bf16_from_float(h[i]);
        CHECK_OK(ctx, f8_ctx_upload(ctx, p, b, n * 2));
        free(b);
    } else {
        CHECK_OK(ctx, f8_ctx_upload(ctx, p, h, n * 4));
    }
    return p;
}

static void download(f8_ctx *ctx, float *h, const void *p, size_t n, f8_dtype dt)
{
    if (dt == F8_DTYPE_BF16) {
        uint16_t *b = (uint16_t *)xmalloc(n * 2);
        CHECK_OK(ctx, f8_ctx_download(ctx, b, p, n * 2));
        for (size_t i = 0; i < n; i++) h[i] = f8_bf16_to_float(b[i]);
        free(b);
    } else {
        CHECK_OK(ctx, f8_ctx_download(ctx, h, p, n * 4));
    }
}

/* Overwrite a parameter (if the module has it) with N(mean, std²) values. */
static void randomize(f8_ctx *ctx, f8_module *m, f8_param which, float mean, float std)
{
    f8_tensor v;
    if (f8_module_param(m, which, 0, &v) != F8_OK) return;
    const size_t n = (size_t)(v.rows * v.cols);
    float *h = (float *)xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = mean + std * (float)rng_normal(&rng);
    f8_tensor src = f8_tensor_make(upload(ctx, h, n, F8_DTYPE_FP32), F8_DTYPE_FP32, v.rows, v.cols);
    if (which == F8_PARAM_WEIGHT || which == F8_PARAM_FC1_WEIGHT || which == F8_PARAM_FC2_WEIGHT)
        CHECK_OK(ctx, f8_module_write_weight(m, which, &src));
    else
        CHECK_OK(ctx, f8_tensor_convert(ctx, &src, &v));
    f8_ctx_free(ctx, src.data);
    free(h);
}

/* ---- modules ------------------------------------------------------------------- */

typedef struct mcase {
    const char *name;
    f8_module *m;
    int64_t T, in, out;
    f8_dtype dtype;   /* x and y */
    int exact, opset, fp8;
} mcase;

/* Forward, scale update, export, forward again (the reference), files. */
static void module_case(f8_ctx *ctx, const mcase *c)
{
    const size_t nx = (size_t)(c->T * c->in), ny = (size_t)(c->T * c->out);
    float *x = (float *)xmalloc(nx * 4), *y = (float *)xmalloc(ny * 4);
    for (size_t i = 0; i < nx; i++) x[i] = 0.3f + 1.7f * (float)rng_normal(&rng);
    if (c->dtype == F8_DTYPE_BF16)
        for (size_t i = 0; i < nx; i++) x[i] = f8_bf16_to_float(f8_bf16_from_float(x[i]));
    for (int p = F8_PARAM_LN_WEIGHT; p <= F8_PARAM_LN_BIAS; p++) randomize(ctx, c->m, (f8_param)p, 0.0f, 0.3f);
    randomize(ctx, c->m, F8_PARAM_BIAS, 0.0f, 0.1f);
    randomize(ctx, c->m, F8_PARAM_FC1_BIAS, 0.0f, 0.1f);
    randomize(ctx, c->m, F8_PARAM_FC2_BIAS, 0.0f, 0.1f);
    randomize(ctx, c->m, F8_PARAM_WEIGHT, 0.0f, 0.2f);
    randomize(ctx, c->m, F8_PARAM_FC1_WEIGHT, 0.0f, 0.2f);
    randomize(ctx, c->m, F8_PARAM_FC2_WEIGHT, 0.0f, 0.2f);
    f8_tensor tx = f8_tensor_make(upload(ctx, x, nx, c->dtype), c->dtype, c->T, c->in);
    f8_tensor ty = f8_tensor_make(upload(ctx, y, ny, F8_DTYPE_FP32), c->dtype, c->T, c->out);
    /* a forward, then scales from its amaxes (448 / amax: not powers of two) */
    CHECK_OK(ctx, f8_module_forward(c->m, &tx, &ty, F8_MICROBATCH_NONE, NULL));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_weight_scales(ctx));

    f8_onnx_config cfg = f8_onnx_config_default();
    cfg.dtype = c->dtype;
    cfg.exact_cast = c->exact;
    if (c->opset) cfg.opset = c->opset;
    f8_onnx *g = NULL;
    char shape[64];
    CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
    snprintf(shape, sizeof shape, "tokens,%lld", (long long)c->in);
    CHECK_OK(ctx, f8_onnx_add_input(g, "x", F8_ONNX_FLOAT, shape));
    CHECK_OK(ctx, f8_onnx_add_module(g, c->m, "x", "y"));
    snprintf(shape, sizeof shape, "tokens,%lld", (long long)c->out);
    CHECK_OK(ctx, f8_onnx_add_output(g, "y", shape));
    CHECK_OK(ctx, f8_onnx_save(g, path_of(c->name, ".onnx")));
    f8_onnx_destroy(g);

    CHECK_OK(ctx, f8_module_forward(c->m, &tx, &ty, F8_MICROBATCH_NONE, NULL));
    download(ctx, y, ty.data, ny, c->dtype);
    char xf[128], yf[128];
    snprintf(xf, sizeof xf, "%s.x.npy", c->name);
    snprintf(yf, sizeof yf, "%s.y.npy", c->name);
    const int64_t sx[2] = {c->T, c->in}, sy[2] = {c->T, c->out};
    write_npy(xf, x, "<f4", 4, sx, 2);
    write_npy(yf, y, "<f4", 4, sy, 2);
    char kind[64];
    snprintf(kind, sizeof kind, "%s%s", c->fp8 ? (c->exact ? "fp8_exact" : "fp8") : "hp",
             c->dtype == F8_DTYPE_BF16 ? "_bf16" : "");
    add_case(c->name, kind, "x", xf, yf);
    f8_ctx_free(ctx, tx.data);
    f8_ctx_free(ctx, ty.data);
    free(x);
    free(y);
    f8_module_destroy(c->m);
}

static void module_cases(f8_ctx *ctx)
{
    static const char *acts[] = {"gelu", "relu", "geglu", "reglu", "swiglu", "qgelu", "srelu"};
    const int64_t T = 5;
    mcase c;
    /* Linear: FP8 (FP32, BF16 params; exact cast), FP8 off (FP32, BF16), FP8 primary weight */
    for (int v = 0; v < 6; v++) {
        f8_linear_config lc = f8_linear_config_default(v == 1 ? 250 : 17, 33);
        lc.max_tokens = T;
        lc.param_dtype = v == 2 || v == 4 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
        lc.fp8 = v != 3 && v != 4;
        lc.fp8_weights = v == 5;
        static const char *names[] = {"linear_fp8", "linear_fp8_exact", "linear_fp8_bf16", "linear_fp32", "linear_bf16",
                                      "linear_fp8_primary"};
        memset(&c, 0, sizeof c);
        c.name = names[v];
        c.T = T, c.in = lc.in_features, c.out = 33;
        c.dtype = lc.param_dtype;
        c.exact = v == 1;
        c.fp8 = lc.fp8;
        CHECK_OK(ctx, f8_linear_create(ctx, &lc, &c.m));
        if (c.m) module_case(ctx, &c);
    }
    /* LayerNormLinear: LayerNorm and RMSNorm (zero-centred), FP8 and not, BF16; opsets 20 and 23 */
    for (int v = 0; v < 6; v++) {
        f8_layernorm_linear_config nc = f8_layernorm_linear_config_default(33, v == 0 ? 250 : 17);
        nc.max_tokens = T;
        nc.normalization = v == 1 || v == 3 || v == 5 ? F8_NORM_RMSNORM : F8_NORM_LAYERNORM;
        nc.zero_centered_gamma = v == 1 || v == 5;
        nc.fp8 = v != 2 && v != 3;
        nc.param_dtype = v == 2 || v == 4 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
        static const char *names[] = {"lnl_ln_fp8", "lnl_rms_fp8", "lnl_ln_bf16", "lnl_rms_fp32", "lnl_ln_fp8_bf16_op20",
                                      "lnl_rms_fp8_op23"};
        memset(&c, 0, sizeof c);
        c.name = names[v];
        c.T = T, c.in = 33, c.out = nc.out_features;
        c.dtype = nc.param_dtype;
        c.opset = v == 4 ? 20 : v == 5 ? 23 : 0;
        c.fp8 = nc.fp8;
        CHECK_OK(ctx, f8_layernorm_linear_create(ctx, &nc, &c.m));
        if (c.m) module_case(ctx, &c);
    }
    /* LayerNormMLP: every activation in FP8; GELU and SwiGLU FP8 off; GEGLU BF16 FP8; RMS SwiGLU BF16 off */
    for (int v = 0; v < 11; v++) {
        const int act = v < 7 ? v : v == 7 ? F8_ACT_GELU : v == 8 ? F8_ACT_SWIGLU : v == 9 ? F8_ACT_GEGLU : F8_ACT_SWIGLU;
        f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(33, 17);
        mc.max_tokens = T;
        mc.activation = (f8_activation)act;
        mc.fp8 = v < 7 || v == 9;
        mc.param_dtype = v >= 9 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
        mc.normalization = v == 10 ? F8_NORM_RMSNORM : F8_NORM_LAYERNORM;
        char name[64];
        snprintf(name, sizeof name, "mlp_%s_%s%s", acts[act], mc.fp8 ? "fp8" : "hp",
                 mc.param_dtype == F8_DTYPE_BF16 ? "_bf16" : "");
        memset(&c, 0, sizeof c);
        c.name = strdup(name);
        c.T = T, c.in = 33, c.out = 33;
        c.dtype = mc.param_dtype;
        c.fp8 = mc.fp8;
        CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &mc, &c.m));
        if (c.m) module_case(ctx, &c);
        free((void *)c.name);
    }
}

#include "onnx_recipe_cases.h"

/* ---- attention and embedding ---------------------------------------------------- */

static void attention_case(f8_ctx *ctx, const char *name, int64_t B, int64_t S, int64_t H, int64_t hd, f8_dtype dt)
{
    const int64_t C = H * hd, T = B * S;
    f8_attention_config ac = f8_attention_config_default(H, hd, B, S);
    ac.dtype = dt;
    f8_attention *att = NULL;
    CHECK_OK(ctx, f8_attention_create(ctx, &ac, &att));
    if (!att) return;
    float *q = (float *)xmalloc((size_t)(T * 3 * C) * 4), *y = (float *)xmalloc((size_t)(T * C) * 4);
    for (int64_t i = 0; i < T * 3 * C; i++) q[i] = 1.5f * (float)rng_normal(&rng);
    if (dt == F8_DTYPE_BF16)
        for (int64_t i = 0; i < T * 3 * C; i++) q[i] = f8_bf16_to_float(f8_bf16_from_float(q[i]));
    f8_tensor tq = f8_tensor_make(upload(ctx, q, (size_t)(T * 3 * C), dt), dt, T, 3 * C);
    f8_tensor ty = f8_tensor_make(upload(ctx, y, (size_t)(T * C), F8_DTYPE_FP32), dt, T, C);
    CHECK_OK(ctx, f8_attention_forward(att, &tq, B, S, &ty, NULL));
    download(ctx, y, ty.data, (size_t)(T * C), dt);

    f8_onnx_config cfg = f8_onnx_config_default();
    cfg.dtype = dt;
    f8_onnx *g = NULL;
    char shape[64];
    CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
    snprintf(shape, sizeof shape, "batch,seq,%lld", (long long)(3 * C));
    CHECK_OK(ctx, f8_onnx_add_input(g, "qkv", F8_ONNX_FLOAT, shape));
    CHECK_OK(ctx, f8_onnx_add_attention(g, att, "qkv", "y"));
    CHECK_OK(ctx, f8_onnx_add_output(g, "y", NULL));
    CHECK_OK(ctx, f8_onnx_save(g, path_of(name, ".onnx")));
    f8_onnx_destroy(g);
    char xf[128], yf[128];
    snprintf(xf, sizeof xf, "%s.x.npy", name);
    snprintf(yf, sizeof yf, "%s.y.npy", name);
    const int64_t sx[3] = {B, S, 3 * C}, sy[3] = {B, S, C};
    write_npy(xf, q, "<f4", 4, sx, 3);
    write_npy(yf, y, "<f4", 4, sy, 3);
    add_case(name, dt == F8_DTYPE_BF16 ? "hp_bf16" : "hp", "qkv", xf, yf);
    f8_ctx_free(ctx, tq.data);
    f8_ctx_free(ctx, ty.data);
    f8_attention_destroy(att);
    free(q);
    free(y);
}

/* Each row of the host table h [R, C] as the fp8_embedding export stores it:
 * fp8(x · s_r) / s_r with s_r = 448 / max |row| (1 for a row of zeros; f8.h,
 * "FP8 embedding table"), from the public FP8 conversions, independently of
 * the exporter. */
static void round_rows_fp8(float *h, int64_t R, int64_t C)
{
    for (int64_t r = 0; r < R; r++) {
        float amax = 0.0f, *row = h + r * C;
        for (int64_t c = 0; c < C; c++) amax = fmaxf(amax, fabsf(row[c]));
        const float scale = amax > 0.0f ? 448.0f / amax : 1.0f, sinv = 1.0f / scale;
        for (int64_t c = 0; c < C; c++)
            row[c] = f8_fp8_to_float(f8_fp8_from_float(row[c] * scale, F8_DTYPE_E4M3), F8_DTYPE_E4M3) * sinv;
    }
}

/* Export the embedding of wte, wpe as name.onnx (fp8_table: config
 * fp8_embedding) with the case's tokens [B, S] and expected y [B, S, C]. */
static void embedding_export(f8_ctx *ctx, const char *name, int fp8_table, const f8_tensor *wte, const f8_tensor *wpe,
                             const int64_t *tok64, const float *y, int64_t B, int64_t S)
{
    f8_onnx_config cfg = f8_onnx_config_default();
    cfg.fp8_embedding = fp8_table;
    f8_onnx *g = NULL;
    char shape[64], xf[128], yf[128];
    snprintf(shape, sizeof shape, "batch,seq,%lld", (long long)wte->cols);
    CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
    CHECK_OK(ctx, f8_onnx_add_input(g, "tokens", F8_ONNX_INT64, "batch,seq"));
    CHECK_OK(ctx, f8_onnx_add_embedding(g, wte, wpe, "tokens", "y"));
    CHECK_OK(ctx, f8_onnx_add_output(g, "y", shape));
    CHECK_OK(ctx, f8_onnx_save(g, path_of(name, ".onnx")));
    f8_onnx_destroy(g);
    const int64_t st[2] = {B, S}, sy[3] = {B, S, wte->cols};
    snprintf(xf, sizeof xf, "%s.x.npy", name);
    snprintf(yf, sizeof yf, "%s.y.npy", name);
    write_npy(xf, tok64, "<i8", 8, st, 2);
    write_npy(yf, y, "<f4", 4, sy, 3);
    add_case(name, "hp", "tokens", xf, yf);
}

static void embedding_case(f8_ctx *ctx)
{
    const int64_t V = 50, C = 17, S = 9, B = 2, T = B * S;
    float *te = (float *)xmalloc(V * C * 4), *pe = (float *)xmalloc(S * C * 4), *y = (float *)xmalloc(T * C * 4);
    for (int64_t i = 0; i < V * C; i++) te[i] = (float)rng_normal(&rng);
    for (int64_t i = 0; i < S * C; i++) pe[i] = (float)rng_normal(&rng);
    int32_t tok[18];
    int64_t tok64[18];
    for (int64_t i = 0; i < T; i++) tok64[i] = tok[i] = (int32_t)(rng_u64(&rng) % V);
    f8_tensor wte = f8_tensor_make(upload(ctx, te, V * C, F8_DTYPE_BF16), F8_DTYPE_BF16, V, C);
    f8_tensor wpe = f8_tensor_make(upload(ctx, pe, S * C, F8_DTYPE_FP32), F8_DTYPE_FP32, S, C);
    f8_tensor ty = f8_tensor_make(upload(ctx, y, T * C, F8_DTYPE_FP32), F8_DTYPE_FP32, T, C);
    void *tb = NULL;
    CHECK_OK(ctx, f8_ctx_alloc(ctx, sizeof tok, &tb));
    CHECK_OK(ctx, f8_ctx_upload(ctx, tb, tok, sizeof tok));
    CHECK_OK(ctx, f8_embedding_forward(ctx, (const int32_t *)tb, S, &wte, &wpe, &ty));
    download(ctx, y, ty.data, T * C, F8_DTYPE_FP32);
    embedding_export(ctx, "embedding", 0, &wte, &wpe, tok64, y, B, S);
    /* fp8_embedding: an FP32 table with a row of zeros and a row of tiny
     * values, against f8's embedding of the table rounded per row on the
     * host: the same sums, bit for bit */
    for (int64_t c = 0; c < C; c++) te[3 * C + c] = 0.0f, te[5 * C + c] *= 1e-30f;
    tok[0] = 3, tok[1] = 5, tok64[0] = 3, tok64[1] = 5;
    f8_tensor wte32 = f8_tensor_make(upload(ctx, te, V * C, F8_DTYPE_FP32), F8_DTYPE_FP32, V, C);
    round_rows_fp8(te, V, C);
    f8_tensor wtr = f8_tensor_make(upload(ctx, te, V * C, F8_DTYPE_FP32), F8_DTYPE_FP32, V, C);
    CHECK_OK(ctx, f8_ctx_upload(ctx, tb, tok, sizeof tok));
    CHECK_OK(ctx, f8_embedding_forward(ctx, (const int32_t *)tb, S, &wtr, &wpe, &ty));
    download(ctx, y, ty.data, T * C, F8_DTYPE_FP32);
    embedding_export(ctx, "embedding_fp8", 1, &wte32, &wpe, tok64, y, B, S);
    void *bufs[] = {wte.data, wpe.data, ty.data, tb, wte32.data, wtr.data};
    for (int i = 0; i < 6; i++) f8_ctx_free(ctx, bufs[i]);
    free(te);
    free(pe);
    free(y);
}

/* ---- the GPT ------------------------------------------------------------------- */

/* Logits of gpt_forward on tokens [B, S] (the first `vocab` columns). */
static void gpt_logits(gpt *m, const int64_t *tok, float *out)
{
    f8_ctx *ctx = m->ctx;
    const int64_t T = m->c.batch * m->c.seq, V = m->c.vocab, Vp = m->c.padded_vocab;
    int32_t *t32 = (int32_t *)xmalloc((size_t)T * 8);
    for (int64_t i = 0; i < T; i++) t32[i] = (int32_t)tok[i], t32[T + i] = 0;
    CHECK_OK(ctx, f8_ctx_upload(ctx, m->tokens, t32, (size_t)T * 4));
    CHECK_OK(ctx, f8_ctx_upload(ctx, m->targets, t32 + T, (size_t)T * 4));
    CHECK_OK(ctx, gpt_forward(m, m->c.batch, 0, 1.0f, F8_MICROBATCH_NONE));
    float *all = (float *)xmalloc((size_t)(T * Vp) * 4);
    download(ctx, all, m->logits, (size_t)(T * Vp), m->c.dtype);
    for (int64_t t = 0; t < T; t++) memcpy(out + t * V, all + t * Vp, (size_t)V * 4);
    free(all);
    free(t32);
}

/* Write tokens and f8's logits for the case `name` of the model exported as
 * model.onnx; also the first `part` positions alone (a shorter sequence:
 * causal attention and the position embedding make them the same). */
static void gpt_files(gpt *m, const char *model, const char *name, const char *kind)
{
    const int64_t B = m->c.batch, S = m->c.seq, V = m->c.vocab, T = B * S;
    int64_t *tok = (int64_t *)xmalloc((size_t)T * 8);
    float *lg = (float *)xmalloc((size_t)(T * V) * 4);
    for (int64_t i = 0; i < T; i++) tok[i] = (int64_t)(rng_u64(&rng) % (uint64_t)V);
    gpt_logits(m, tok, lg);
    char xf[128], yf[128];
    for (int part = 0; part < 2; part++) {
        /* part 1: batch 1, seq S - 3 (the dynamic axes) */
        const int64_t b = part ? 1 : B, s = part ? S - 3 : S, st[2] = {b, s}, sy[3] = {b, s, V};
        float *y = (float *)xmalloc((size_t)(b * s * V) * 4);
        for (int64_t t = 0; t < b * s; t++) memcpy(y + t * V, lg + t * V, (size_t)V * 4);
        snprintf(xf, sizeof xf, "%s%s.x.npy", name, part ? ".short" : "");
        snprintf(yf, sizeof yf, "%s%s.y.npy", name, part ? ".short" : "");
        write_npy(xf, tok, "<i8", 8, st, 2);
        write_npy(yf, y, "<f4", 4, sy, 3);
        fprintf(manifest, "%s{\"name\": \"%s%s\", \"model\": \"%s.onnx\", \"kind\": \"%s\", \"inputs\": {\"tokens\": "
                          "\"%s\"}, \"outputs\": [\"%s\"]}\n", n_cases++ ? "," : "", name, part ? ".short" : "", model,
                kind, xf, yf);
        free(y);
    }
    free(tok);
    free(lg);
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* The tied table of m (wte = the LM head's weight) replaced by what the
 * fp8_embedding export stores (round_rows_fp8). */
static void round_table_fp8(gpt *m)
{
    f8_ctx *ctx = m->ctx;
    f8_tensor wte;
    CHECK_OK(ctx, f8_module_param(m->head, F8_PARAM_WEIGHT, 0, &wte));
    const int64_t R = wte.rows, C = wte.cols;
    float *h = (float *)xmalloc((size_t)(R * C) * 4);
    download(ctx, h, wte.data, (size_t)(R * C), wte.dtype);
    round_rows_fp8(h, R, C);
    void *tmp = upload(ctx, h, (size_t)(R * C), wte.dtype);
    CHECK_OK(ctx, f8_ctx_copy(ctx, wte.data, tmp, (size_t)(R * C) * f8_dtype_size(wte.dtype)));
    f8_ctx_free(ctx, tmp);
    free(h);
}

static void gpt_case(f8_ctx *ctx, const char *name, int fp8, f8_dtype dt, int export_fp8, int fp8_head)
{
    gpt_config c = {.vocab = 256, .padded_vocab = 256, .seq = 11, .layers = 2, .heads = 2, .channels = 32,
                    .batch = 2, .fp8 = fp8, .dtype = dt, .seed = 7, .fp8_head = fp8_head};
    gpt m;
    char err[256];
    CHECK(gpt_create(ctx, &c, &m, err, sizeof err) == F8_OK, "gpt_create: %s", err);
    /* a forward and a scale update: scales from real amaxes */
    int64_t *tok = (int64_t *)xmalloc(2 * 11 * 8);
    float *lg = (float *)xmalloc((size_t)(2 * 11 * 256) * 4);
    for (int i = 0; i < 22; i++) tok[i] = (int64_t)(rng_u64(&rng) % 256);
    gpt_logits(&m, tok, lg);
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    const char *kind = export_fp8 ? (dt == F8_DTYPE_BF16 ? "gpt_fp8_bf16" : "gpt_fp8") : dt == F8_DTYPE_BF16 ? "gpt_bf16" : "gpt";
    CHECK(gpt_export_onnx(&m, export_fp8, 0, 0, path_of(name, ".onnx"), err, sizeof err) == F8_OK, "export: %s", err);
    gpt_files(&m, name, name, kind);
    if (export_fp8 && !fp8_head) {
        /* (an FP8 head holds its own per-tensor FP8 copy of the table, which
         * these structural and rounding checks do not model: only without it)
         * the tied table as per-row FP8 (fp8_embedding): against f8's forward
         * (its table in high precision: kind gpt_fp8_emb, a looser bound),
         * then against f8's forward with the table rounded as the export
         * rounds it (the FP8 graph's own bound); and the bytes it saves */
        char emb[64], hp[64];
        snprintf(emb, sizeof emb, "%s_emb", name);
        snprintf(hp, sizeof hp, "%s_hp", name);
        CHECK(gpt_export_onnx(&m, 1, 0, 1, path_of(emb, ".onnx"), err, sizeof err) == F8_OK, "export: %s", err);
        CHECK(gpt_export_onnx(&m, 0, 0, 0, path_of(hp, ".onnx"), err, sizeof err) == F8_OK, "export: %s", err);
        const long b_fp8 = file_size(path_of(name, ".onnx")), b_emb = file_size(path_of(emb, ".onnx"));
        const long b_hp = file_size(path_of(hp, ".onnx")), es = (long)f8_dtype_size(dt);
        /* the table [256, 32]: es bytes an element become 1, plus a 4-byte scale a row */
        CHECK(b_fp8 - b_emb >= 256 * 32 * (es - 1) - 256 * 4 - 256, "fp8_embedding saved %ld bytes", b_fp8 - b_emb);
        printf("  %s: %ld bytes high precision, %ld FP8, %ld FP8 + FP8 table (%.3f, %.3f of high precision)\n", name,
               b_hp, b_fp8, b_emb, (double)b_fp8 / (double)b_hp, (double)b_emb / (double)b_hp);
        gpt_files(&m, emb, emb, "gpt_fp8_emb");
        if (dt == F8_DTYPE_FP32) { /* a BF16 table could not hold code / s_r exactly */
            round_table_fp8(&m);
            snprintf(hp, sizeof hp, "%s_emb.rounded", name);
            gpt_files(&m, emb, hp, kind);
        }
    }
    free(tok);
    free(lg);
    gpt_destroy(&m);
}

/* A small Llama (train/llama.h: RMSNorm, RoPE, grouped or multi-query attention, SwiGLU, tied or untied
 * head) against f8's forward; and f8_onnx_add_rope's refusals. */
static void llama_case(f8_ctx *ctx, const char *name, int fp8, f8_dtype dt, int64_t kv, int untied)
{
    gpt_config c;
    memset(&c, 0, sizeof c);
    c.vocab = 256, c.padded_vocab = 256, c.seq = 11, c.layers = 2, c.heads = 4, c.channels = 32, c.batch = 2;
    c.fp8 = fp8, c.dtype = dt, c.seed = 9, c.llama = 1, c.kv_heads = kv, c.ffn = 48, c.untied = untied;
    c.rope_theta = 10000.0, c.rope_factor = untied ? 0.0 : 8.0; /* Llama 3's scaling with the tied head */
    gpt m;
    char err[256];
    if (gpt_create(ctx, &c, &m, err, sizeof err) != F8_OK) die(err, ctx);
    int64_t tok[22];
    float *lg = (float *)xmalloc((size_t)(2 * 11 * 256) * 4);
    for (int i = 0; i < 22; i++) tok[i] = (int64_t)(rng_u64(&rng) % 256);
    gpt_logits(&m, tok, lg), free(lg); /* a forward and a scale update: scales from real amaxes */
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    const char *kind = fp8 ? "gpt_fp8" : dt == F8_DTYPE_BF16 ? "gpt_bf16" : "gpt";
    CHECK(gpt_export_onnx(&m, fp8, 0, 0, path_of(name, ".onnx"), err, sizeof err) == F8_OK, "export: %s", err);
    gpt_files(&m, name, name, kind);
    f8_onnx_config cfg = f8_onnx_config_default();
    f8_onnx *g = NULL;
    CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
    CHECK_OK(ctx, f8_onnx_add_input(g, "qkv", F8_ONNX_FLOAT, "2,5,63")); /* 4 + 2·kv heads of 8: not 63 */
    CHECK_STATUS(ctx, f8_onnx_add_rope(g, m.rope, "qkv", "y"), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_onnx_add_rope(g, NULL, "qkv", "y"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_onnx_add_rope(g, m.rope, "nothing", "y"), F8_ERR_INVALID_ARGUMENT);
    f8_onnx_destroy(g);
    gpt_destroy(&m);
}

/* f8_train's path: train a few steps, checkpoint, `export` it, compare with
 * the trained model's forward. */
static void trainer_case(void)
{
    train_options o = train_options_default();
    o.backend = "cpu";
    o.layers = 2, o.heads = 2, o.channels = 32, o.seq = 16, o.batch = 2, o.grad_accum = 1;
    o.steps = 3, o.val_every = 0, o.sample = 0, o.log = "", o.plot = "", o.quiet = 1;
    trainer *t = NULL;
    char err[512] = "", ck[512];
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "trainer_create: %s", err);
    if (!t) return;
    double loss;
    for (int i = 0; i < 3; i++) CHECK_OK(t->ctx, trainer_step(t, &loss));
    snprintf(ck, sizeof ck, "%s/ck.safetensors", dir);
    CHECK_OK(t->ctx, trainer_save(t, ck));
    export_options eo = {ck, NULL, -1, 0, "cpu", 1, 0};
    eo.out = strdup(path_of("train_export", ".onnx"));
    CHECK(export_run(&eo, err, sizeof err) == 0, "export_run: %s", err);
    free((void *)eo.out);
    gpt_files(trainer_model(t), "train_export", "train_export", "gpt_fp8");
    trainer_destroy(t);
    /* an FP8-off checkpoint cannot be exported with --fp8 on */
    o.fp8 = 0;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "trainer_create: %s", err);
    if (!t) return;
    CHECK_OK(t->ctx, trainer_save(t, ck));
    trainer_destroy(t);
    eo.fp8 = 1;
    eo.out = strdup(path_of("never", ".onnx"));
    CHECK(export_run(&eo, err, sizeof err) != 0 && strstr(err, "--fp8 off"), "exported an FP8-off checkpoint as FP8: %s",
          err);
    CHECK(access(eo.out, F_OK) != 0, "a refused export left a file");
    free((void *)eo.out);

    /* the other recipes: each checkpoint restores under its own recipe
     * (train.recipe) for `export` and `export-hf`, FP8 included (block
     * scaling's tiles and row-wise scaling's rows computed in the graph) */
    static const char *const recipes[3] = {"current", "block", "rowwise"};
    for (int r = 0; r < 3; r++) {
        o.fp8 = 1;
        o.recipe = recipes[r];
        CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "trainer_create (%s): %s", recipes[r], err);
        if (!t) return;
        for (int i = 0; i < 2; i++) CHECK_OK(t->ctx, trainer_step(t, &loss));
        CHECK_OK(t->ctx, trainer_save(t, ck));
        trainer_destroy(t);
        eo.fp8 = -1;
        char base[64];
        snprintf(base, sizeof base, "train_export_%s", recipes[r]);
        eo.out = strdup(path_of(base, ".onnx"));
        const int rc = export_run(&eo, err, sizeof err);
        CHECK(rc == 0 && access(eo.out, F_OK) == 0, "export of a %s-scaling checkpoint: %s", recipes[r], err);
        free((void *)eo.out);
        char hf_dir[600], cfg[700];
        snprintf(hf_dir, sizeof hf_dir, "%s/hf_%s", dir, recipes[r]);
        char *argv[4] = {"f8_train", "export-hf", ck, hf_dir};
        CHECK(export_hf_main(4, argv) == 0, "export-hf of a %s-scaling checkpoint failed", recipes[r]);
        snprintf(cfg, sizeof cfg, "%s/config.json", hf_dir);
        CHECK(access(cfg, F_OK) == 0, "export-hf (%s) wrote no config.json", recipes[r]);
    }
}

/* ---- FP8 code agreement: QuantizeLinear's x / s_inv against f8's x · scale --------- */

static void sweep_case(void)
{
    enum { N = 1 << 20, NS = 6 };
    /* 896 and 448 / 0.50487524 are scales whose reciprocal's reciprocal is
     * not the scale again in FP32 (about 15% of 448 / amax are so) */
    const float scales[NS] = {448.0f / 3.7f, 448.0f / 0.913f, 448.0f / 17.3f, 896.0f, 448.0f / 0.50487524f, 64.0f};
    float *x = (float *)xmalloc((size_t)N * NS * 4), *code = (float *)xmalloc((size_t)N * NS * 4), sc[NS];
    for (int s = 0; s < NS; s++) {
        sc[s] = scales[s];
        for (int i = 0; i < N; i++) {
            /* magnitudes over the whole E4M3 range after scaling, both signs */
            float v = (float)(exp2(rng_uniform(&rng) * 20.0 - 12.0) / scales[s]);
            if (rng_u64(&rng) & 1) v = -v;
            x[(size_t)s * N + i] = v;
            code[(size_t)s * N + i] = f8_fp8_to_float(f8_fp8_from_float(v * scales[s], F8_DTYPE_E4M3), F8_DTYPE_E4M3);
        }
    }
    const int64_t shape[2] = {NS, N}, ss[1] = {NS};
    write_npy("sweep.x.npy", x, "<f4", 4, shape, 2);
    write_npy("sweep.codes.npy", code, "<f4", 4, shape, 2);
    write_npy("sweep.scales.npy", sc, "<f4", 4, ss, 1);
    free(x);
    free(code);
}

/* ---- the API's own checks (no Python needed) ------------------------------------ */

/* fp8_embedding refuses a table a high-precision module stored first (the
 * tie would be lost) and one holding a non-finite value, changing nothing. */
static void fp8_embedding_checks(f8_ctx *ctx)
{
    f8_onnx_config cfg = f8_onnx_config_default();
    cfg.fp8_embedding = 1;
    f8_onnx *g = NULL;
    CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
    f8_linear_config lc = f8_linear_config_default(16, 8);
    lc.max_tokens = 4;
    lc.fp8 = 0;
    f8_module *head = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &head));
    f8_tensor wte, wpe;
    CHECK_OK(ctx, f8_module_param(head, F8_PARAM_WEIGHT, 0, &wte)); /* [8, 16]: a "vocabulary" of 8 */
    float h[4 * 16];
    for (int i = 0; i < 4 * 16; i++) h[i] = (float)i;
    wpe = f8_tensor_make(upload(ctx, h, 4 * 16, F8_DTYPE_FP32), F8_DTYPE_FP32, 4, 16);
    CHECK_OK(ctx, f8_onnx_add_input(g, "tokens", F8_ONNX_INT64, "batch,seq"));
    CHECK_OK(ctx, f8_onnx_add_input(g, "x", F8_ONNX_FLOAT, "batch,seq,16"));
    CHECK_OK(ctx, f8_onnx_add_module(g, head, "x", "logits"));
    CHECK_STATUS(ctx, f8_onnx_add_embedding(g, &wte, &wpe, "tokens", "e"), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(ctx), "before the tied LM head") != NULL, "message: %s", f8_ctx_last_error(ctx));
    f8_onnx_destroy(g);
    /* in the right order the head reads the FP8 table; a non-finite row is refused */
    CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
    CHECK_OK(ctx, f8_onnx_add_input(g, "tokens", F8_ONNX_INT64, "batch,seq"));
    CHECK_OK(ctx, f8_onnx_add_embedding(g, &wte, &wpe, "tokens", "e"));
    CHECK_OK(ctx, f8_onnx_add_module(g, head, "e", "logits"));
    CHECK_OK(ctx, f8_onnx_add_output(g, "logits", NULL));
    size_t before = 0, after = 0;
    CHECK_OK(ctx, f8_onnx_serialize(g, NULL, 0, &before));
    const float inf = INFINITY;
    f8_tensor bad = f8_tensor_make(upload(ctx, h, 64, F8_DTYPE_FP32), F8_DTYPE_FP32, 4, 16);
    CHECK_OK(ctx, f8_ctx_upload(ctx, (float *)bad.data + 37, &inf, sizeof inf));
    CHECK_STATUS(ctx, f8_onnx_add_embedding(g, &bad, &wpe, "tokens", "e2"), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(ctx), "row 2") != NULL, "message: %s", f8_ctx_last_error(ctx));
    CHECK_OK(ctx, f8_onnx_serialize(g, NULL, 0, &after));
    CHECK(before == after, "a refused fp8_embedding call changed the graph (%zu -> %zu bytes)", before, after);
    f8_onnx_destroy(g);
    f8_ctx_free(ctx, wpe.data);
    f8_ctx_free(ctx, bad.data);
    f8_module_destroy(head);
}

static void api_checks(f8_ctx *ctx)
{
    f8_onnx_config cfg = f8_onnx_config_default();
    f8_onnx *g = NULL;
    cfg.opset = 19;
    CHECK_STATUS(ctx, f8_onnx_create(ctx, &cfg, &g), F8_ERR_INVALID_ARGUMENT);
    CHECK(g == NULL, "a refused create gave a graph");
    cfg = f8_onnx_config_default();
    cfg.dtype = F8_DTYPE_E4M3;
    CHECK_STATUS(ctx, f8_onnx_create(ctx, &cfg, &g), F8_ERR_INVALID_ARGUMENT);
    cfg = f8_onnx_config_default();
    cfg.fp8_embedding = 2;
    CHECK_STATUS(ctx, f8_onnx_create(ctx, &cfg, &g), F8_ERR_INVALID_ARGUMENT);
    fp8_embedding_checks(ctx);
    cfg = f8_onnx_config_default();
    CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
    size_t size = 0;
    CHECK_STATUS(ctx, f8_onnx_serialize(g, NULL, 0, &size), F8_ERR_INVALID_ARGUMENT); /* no input yet */
    const char *bad_shapes[] = {"", ",", "3,", "0", "-1", "3,,4", "a b", "1,2,3,4,5,6,7,8,9", "x.y", "9999999999999",
                                "01"};
    for (size_t i = 0; i < sizeof bad_shapes / sizeof *bad_shapes; i++)
        CHECK_STATUS(ctx, f8_onnx_add_input(g, "x", F8_ONNX_FLOAT, bad_shapes[i]), F8_ERR_INVALID_ARGUMENT);
    const char *bad_names[] = {"", "_f8.x", "a b", "é", NULL};
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++)
        CHECK_STATUS(ctx, f8_onnx_add_input(g, bad_names[i], F8_ONNX_FLOAT, "4"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_onnx_add_input(g, "x", (f8_onnx_type)3, "4"), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(ctx, f8_onnx_add_input(g, "x", F8_ONNX_FLOAT, "tokens,17"));
    CHECK_STATUS(ctx, f8_onnx_add_input(g, "x", F8_ONNX_FLOAT, "4"), F8_ERR_INVALID_ARGUMENT); /* used */
    f8_linear_config lc = f8_linear_config_default(16, 8);
    lc.max_tokens = 4;
    f8_module *lin = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &lin));
    CHECK_OK(ctx, f8_onnx_add_output(g, "x", NULL));
    CHECK_OK(ctx, f8_onnx_serialize(g, NULL, 0, &size));
    const size_t before = size;
    /* refused calls leave the graph as it was */
    CHECK_STATUS(ctx, f8_onnx_add_module(g, lin, "x", "y"), F8_ERR_SHAPE); /* 17 != 16 */
    CHECK_STATUS(ctx, f8_onnx_add_module(g, lin, "nope", "y"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_onnx_add_module(g, NULL, "x", "y"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_onnx_add_add(g, "x", "x", "x"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_onnx_add_slice(g, "x", 3, 18, "s"), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_onnx_add_output(g, "x", NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_onnx_add_output(g, "y", NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(ctx, f8_onnx_serialize(g, NULL, 0, &size));
    CHECK(size == before, "a refused call changed the graph (%zu -> %zu bytes)", before, size);
    /* a graph of 16 columns; serialize to memory equals the saved file */
    CHECK_OK(ctx, f8_onnx_add_input(g, "x16", F8_ONNX_FLOAT, "tokens,16"));
    CHECK_OK(ctx, f8_onnx_add_module(g, lin, "x16", "y"));
    CHECK_OK(ctx, f8_onnx_add_slice(g, "y", 2, 5, "s"));
    CHECK_STATUS(ctx, f8_onnx_add_output(g, "s", "tokens,4"), F8_ERR_SHAPE);
    CHECK_OK(ctx, f8_onnx_add_output(g, "s", "tokens,3"));
    CHECK_OK(ctx, f8_onnx_serialize(g, NULL, 0, &size));
    unsigned char *mem = (unsigned char *)xmalloc(size);
    CHECK_STATUS(ctx, f8_onnx_serialize(g, mem, size - 1, &size), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(ctx, f8_onnx_serialize(g, mem, size, &size));
    CHECK_OK(ctx, f8_onnx_save(g, path_of("api", ".onnx")));
    FILE *f = fopen(path_of("api", ".onnx"), "rb");
    unsigned char *file = (unsigned char *)xmalloc(size + 1);
    CHECK(f && fread(file, 1, size + 1, f) == size && memcmp(file, mem, size) == 0, "saved file != serialized bytes");
    if (f) fclose(f);
    CHECK_STATUS(ctx, f8_onnx_save(g, "/nonexistent-dir/x.onnx"), F8_ERR_IO);
    free(file);
    free(mem);
    f8_onnx_destroy(g);
    f8_onnx_destroy(NULL);
    f8_module_destroy(lin);
}

/* The Python to run the checker with, or NULL. */
static const char *python(void)
{
    const char *p = getenv("F8_PYTHON");
    if (p && *p) return p;
    return access(".venv/bin/python3", X_OK) == 0 ? ".venv/bin/python3" : NULL;
}

int main(void)
{
    char why[256];
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) die(why, NULL);
    rng.s = 2024;
    snprintf(dir, sizeof dir, "/tmp/f8_onnx_XXXXXX");
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    api_checks(ctx);
    int files = 0; /* the fuzz target's seeds (fuzz/corpus_onnx) */
    CHECK(f8_fuzz_replay("fuzz/corpus_onnx", &files) == 0 && files >= 8, "fuzz/corpus_onnx: %d inputs", files);
    f8_fuzz_teardown();
    const char *py = python();
    const int require = getenv("F8_REQUIRE_ONNX") && !strcmp(getenv("F8_REQUIRE_ONNX"), "1");
    if (!py && !require) {
        f8_ctx_destroy(ctx);
        if (test_failures) return test_finish("test_onnx");
        return test_skip("test_onnx", "no Python with onnx and onnxruntime: set F8_PYTHON or make .venv (see .ci/run)");
    }
    CHECK(py != NULL, "F8_REQUIRE_ONNX=1 but there is no Python: set F8_PYTHON or make .venv");
    manifest = fopen(path_of("manifest", ".json"), "w");
    if (!manifest) die("manifest", NULL);
    fprintf(manifest, "[\n");
    module_cases(ctx);
    recipe_cases();
    attention_case(ctx, "attention_fp32", 2, 7, 3, 5, F8_DTYPE_FP32);
    attention_case(ctx, "attention_bf16", 2, 9, 2, 8, F8_DTYPE_BF16);
    embedding_case(ctx);
    gpt_case(ctx, "gpt_fp8", 1, F8_DTYPE_FP32, 1, 0);
    gpt_case(ctx, "gpt_fp8_head", 1, F8_DTYPE_FP32, 1, 1); /* f8_train --fp8-head: the LM head's FP8 casts too */
    gpt_case(ctx, "gpt_fp32", 0, F8_DTYPE_FP32, 0, 0);
    gpt_case(ctx, "gpt_fp8_bf16", 1, F8_DTYPE_BF16, 1, 0);
    gpt_case(ctx, "gpt_bf16", 0, F8_DTYPE_BF16, 0, 0);
    llama_case(ctx, "llama_fp8_gqa", 1, F8_DTYPE_FP32, 2, 0);
    llama_case(ctx, "llama_fp32_mqa_untied", 0, F8_DTYPE_FP32, 1, 1);
    llama_case(ctx, "llama_bf16_gqa", 0, F8_DTYPE_BF16, 2, 1);
    f8_ctx_destroy(ctx);
    trainer_case();
    sweep_case();
    fprintf(manifest, "]\n");
    fclose(manifest);
    if (py) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' tests/onnx_check.py '%s'", py, dir);
        const int rc = system(cmd);
        CHECK(rc == 0, "tests/onnx_check.py failed (exit %d); files kept in %s", rc, dir);
        if (rc == 0) {
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            CHECK(system(cmd) == 0, "cannot remove %s", dir);
        }
    }
    return test_finish("test_onnx");
}
