/*
 * export.c — the GPT of gpt.h (or its Llama, llama.h) as an ONNX model, and `f8_train export`.
 *
 * Design note. The graph follows gpt_forward call by call (embedding, per
 * block LayerNormLinear → attention → Linear + residual → LayerNormMLP +
 * residual, the tied LM head; a Llama's RMSNorm modules, RoPE after the QKV
 * GEMM, grouped-query attention, SwiGLU, a tied or untied head, a zero
 * position table), so the file computes what an inference
 * forward computes, in the model's dtype; the padded vocabulary columns are
 * sliced off. --fp8-embedding (off by default) trades that exactness for a
 * smaller file: the tied table as per-row FP8 (f8.h, "FP8 embedding
 * table"); the embedding is added first, so the head reads the same FP8
 * table. The checkpoint's model is built with batch 1 (the graph's batch is
 * dynamic) and the checkpoint is freed before the export, so the peak
 * memory is the model (parameters and gradients) plus the graph's host copy
 * of the weights.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "export.h"
#include "hf.h"
#include "options.h"
#include "try.h"

static f8_status build(gpt *m, f8_onnx *g)
{
    const gpt_config *c = &m->c;
    const int64_t C = c->channels;
    char shape[64], x[32], q[32], a[32], p[32], mid[32], o[32];
    TRY(f8_onnx_add_input(g, "tokens", F8_ONNX_INT64, "batch,seq"));
    f8_tensor wte, wpe = f8_tensor_make(m->wpe, c->dtype, c->seq, C); /* a Llama's: zeros */
    if (c->llama && c->untied) wte = f8_tensor_make(m->wte, c->dtype, c->padded_vocab, C);
    else TRY(f8_module_param(m->head, F8_PARAM_WEIGHT, 0, &wte));
    TRY(f8_onnx_add_embedding(g, &wte, &wpe, "tokens", "h.0.in"));
    snprintf(x, sizeof x, "h.0.in");
    for (int64_t l = 0; l < c->layers; l++) {
        const gpt_block *b = &m->blocks[l];
        snprintf(q, sizeof q, "h.%lld.qkv", (long long)l);
        snprintf(a, sizeof a, "h.%lld.attn", (long long)l);
        snprintf(p, sizeof p, "h.%lld.proj", (long long)l);
        snprintf(mid, sizeof mid, "h.%lld.mid", (long long)l);
        snprintf(o, sizeof o, "h.%lld.mlp", (long long)l);
        TRY(f8_onnx_add_module(g, b->qkv, x, q));
        if (c->llama) { /* q and k rotated in place after the QKV GEMM, as llama_forward does */
            char r[32];
            snprintf(r, sizeof r, "h.%lld.rope", (long long)l);
            TRY(f8_onnx_add_rope(g, m->rope, q, r));
            snprintf(q, sizeof q, "%s", r);
        }
        TRY(f8_onnx_add_attention(g, m->att, q, a));
        TRY(f8_onnx_add_module(g, b->proj, a, p));
        TRY(f8_onnx_add_add(g, p, x, mid)); /* xm = proj(a) + x, as gpt_forward adds */
        TRY(f8_onnx_add_module(g, b->mlp, mid, o));
        snprintf(x, sizeof x, "h.%lld.in", (long long)(l + 1));
        TRY(f8_onnx_add_add(g, o, mid, x));
    }
    TRY(f8_onnx_add_module(g, m->head, x, "logits_padded"));
    TRY(f8_onnx_add_slice(g, "logits_padded", 0, c->vocab, "logits"));
    snprintf(shape, sizeof shape, "batch,seq,%lld", (long long)c->vocab);
    return f8_onnx_add_output(g, "logits", shape);
}

f8_status gpt_export_onnx(gpt *m, int fp8, int exact_cast, int fp8_embedding, const char *path, char *err, size_t n)
{
    f8_onnx_config cfg = f8_onnx_config_default();
    cfg.fp8 = fp8;
    cfg.exact_cast = exact_cast;
    cfg.fp8_embedding = fp8_embedding;
    cfg.dtype = m->c.dtype;
    cfg.name = m->c.llama ? "f8_llama" : "f8_gpt";
    f8_onnx *g = NULL;
    f8_status st = f8_onnx_create(m->ctx, &cfg, &g);
    if (st == F8_OK) st = build(m, g);
    if (st == F8_OK) st = f8_onnx_save(g, path);
    if (st != F8_OK) snprintf(err, n, "%s", f8_ctx_last_error(m->ctx));
    f8_onnx_destroy(g);
    return st;
}

int export_run(const export_options *o, char *err, size_t n)
{
    f8_ctx_config cc = f8_ctx_config_default();
    cc.backend = strcmp(o->backend, "cpu") == 0 ? F8_BACKEND_CPU : F8_BACKEND_CUDA;
    cc.recipe = train_recipe(train_checkpoint_recipe(o->checkpoint));
    f8_ctx *ctx = NULL;
    f8_status st = f8_ctx_create(&cc, &ctx, err, n);
    if (st == F8_ERR_NO_DEVICE && strcmp(o->backend, "auto") == 0) {
        cc.backend = F8_BACKEND_CPU;
        st = f8_ctx_create(&cc, &ctx, err, n);
    }
    if (st != F8_OK) return 1;
    const double t0 = (double)clock() / CLOCKS_PER_SEC;
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    f8_checkpoint *ck = NULL;
    gpt m;
    memset(&m, 0, sizeof m);
    gpt_config c;
    int rc = 1, fp8 = 0;
    if (f8_checkpoint_load(ctx, o->checkpoint, &ck) != F8_OK)
        snprintf(err, n, "cannot load '%s': %s", o->checkpoint, f8_ctx_last_error(ctx));
    else if (hf_checkpoint_model(ck, 1, &c, err, n) != 0) /* the sanity bound (hf.h) */
        ;
    else if (o->fp8 == 1 && !c.fp8)
        snprintf(err, n, "'%s' was trained with --fp8 off: it holds no FP8 scaling state to export; use --fp8 off",
                 o->checkpoint);
    else if (gpt_create(ctx, &c, &m, err, n) != F8_OK)
        ;
    else if (gpt_checkpoint_restore(&m, ck) != F8_OK)
        snprintf(err, n, "cannot restore the model from '%s': %s", o->checkpoint, f8_ctx_last_error(ctx));
    else {
        f8_checkpoint_destroy(ck);
        ck = NULL;
        fp8 = o->fp8 < 0 ? c.fp8 : o->fp8;
        rc = gpt_export_onnx(&m, fp8, o->exact_cast, o->fp8_embedding, o->out, err, n) == F8_OK ? 0 : 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &w1);
    if (rc == 0 && !o->quiet) {
        FILE *f = fopen(o->out, "rb");
        long bytes = -1;
        if (f && fseek(f, 0, SEEK_END) == 0) bytes = ftell(f);
        if (f) fclose(f);
        printf("export: %s (%s GEMMs, %s, %s embedding, %lld layers, vocab %lld): %.1f MB in %.2f s (%.2f s CPU)\n",
               o->out, fp8 ? "FP8" : "high-precision", f8_dtype_name(c.dtype),
               o->fp8_embedding ? "per-row FP8" : f8_dtype_name(c.dtype), (long long)c.layers, (long long)c.vocab,
               (double)bytes / 1e6, (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec),
               (double)clock() / CLOCKS_PER_SEC - t0);
    }
    f8_checkpoint_destroy(ck);
    gpt_destroy(&m);
    f8_ctx_destroy(ctx);
    return rc;
}

int export_main(int argc, char **argv)
{
    export_options o = {NULL, NULL, -1, 0, "auto", 0, 0};
    const char *usage = "usage: f8_train export CHECKPOINT OUT.onnx [--fp8 on|off] [--exact-cast] [--fp8-embedding] "
                        "[--backend auto|cpu|cuda] [--quiet]\n";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("%s  writes the GPT of an f8_train checkpoint as an ONNX model: input tokens int64 [batch, seq],\n"
                   "  output logits float32 [batch, seq, vocab]; --fp8 defaults to the checkpoint's precision,\n"
                   "  --exact-cast casts to FP8 as Mul(x, scale) -> QuantizeLinear(1): f8's codes bit for bit,\n"
                   "  --fp8-embedding stores the tied embedding / LM head as FP8 with a scale per row (smaller;\n"
                   "  the logits then differ from f8's, which keeps that table in high precision)\n", usage);
            return 0;
        }
        if (strcmp(a, "--fp8") == 0 && v && (!strcmp(v, "on") || !strcmp(v, "off"))) o.fp8 = !strcmp(v, "on"), i++;
        else if (strcmp(a, "--backend") == 0 && v && (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "cuda")))
            o.backend = v, i++;
        else if (strcmp(a, "--exact-cast") == 0) o.exact_cast = 1;
        else if (strcmp(a, "--fp8-embedding") == 0) o.fp8_embedding = 1;
        else if (strcmp(a, "--quiet") == 0) o.quiet = 1;
        else if (a[0] != '-' && !o.checkpoint) o.checkpoint = a;
        else if (a[0] != '-' && !o.out) o.out = a;
        else {
            fprintf(stderr, "f8_train export: bad argument '%s'\n%s", a, usage);
            return 1;
        }
    }
    if (!o.checkpoint || !o.out) {
        fprintf(stderr, "%s", usage);
        return 1;
    }
    char err[512] = "";
    if (export_run(&o, err, sizeof err) != 0) {
        fprintf(stderr, "f8_train export: %s\n", err);
        return 1;
    }
    return 0;
}
