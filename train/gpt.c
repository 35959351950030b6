/*
 * gpt.c — the GPT model of gpt.h on f8 modules.
 *
 * Design note. The modules keep their inputs by reference until backward
 * (the norms re-read x), so every value a backward needs has its own buffer:
 * the residual stream at each block input and middle (2L+1 tensors), each
 * layer's qkv and attention output. Microbatches reuse them (forward and
 * backward of one microbatch run back to back). The LM head is a
 * LayerNormLinear in high precision whose weight doubles as the token
 * embedding table (tied): the embedding reads it, and its backward adds into
 * the head's weight gradient.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "head.h"
#include "llama.h"
#include "recompute.h"
#include "tp.h"
#include "try.h"


static size_t esize(const gpt *m) { return f8_dtype_size(m->c.dtype); }

/* wpe's gradient (S, C): in the gradient dtype (FP32 with grad_fp32) */
static f8_tensor dwpe_view(const gpt *m)
{
    return f8_tensor_make(m->dwpe, gpt_grad_dtype(&m->c), m->c.seq, m->c.channels);
}

static f8_tensor view(const gpt *m, void *base, int64_t index, int64_t rows, int64_t cols)
{
    return f8_tensor_make((unsigned char *)base + (size_t)(index * rows * cols) * esize(m), m->c.dtype, rows, cols);
}

/* This rank's rows of the residual stream in the current call: T_call, or
 * T_call / P with sequence parallelism. */
static int64_t local_rows(const gpt *m) { return m->sp ? m->T_call / m->tp_size : m->T_call; }

/* Residual-stream tensor i of the current call (local_rows; slots are Tr apart). */
static f8_tensor resid(const gpt *m, int64_t i)
{
    f8_tensor t = view(m, m->resid, i, m->Tr, m->c.channels);
    t.rows = local_rows(m);
    return t;
}

/* Tensor i of a [n, T, cols] stack, with the current call's rows. */
static f8_tensor slice(const gpt *m, void *base, int64_t i, int64_t cols)
{
    f8_tensor t = view(m, base, i, m->T, cols);
    t.rows = m->T_call;
    return t;
}

/* GPT-2 scales the init of the projections into the residual by 1/sqrt(2L). */
static f8_status scale_weight(gpt *m, f8_ctx *ctx, f8_tensor *w, float factor, f8_module *mod, f8_param which)
{
    const size_t n = (size_t)(w->rows * w->cols), bytes = n * esize(m);
    unsigned char *h = (unsigned char *)malloc(bytes + 1);
    float *f = (float *)malloc(n * sizeof(float) + 1);
    void *stage = NULL;
    f8_status st = (h && f) ? f8_ctx_download(ctx, h, w->data, bytes) : F8_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; st == F8_OK && i < n; i++) {
        float v;
        if (m->c.dtype == F8_DTYPE_BF16) {
            uint16_t b;
            memcpy(&b, h + 2 * i, 2);
            v = f8_bf16_to_float(b);
        } else {
            memcpy(&v, h + 4 * i, 4);
        }
        f[i] = v * factor;
    }
    if (st == F8_OK) st = f8_ctx_alloc(ctx, n * sizeof(float), &stage);
    if (st == F8_OK) st = f8_ctx_upload(ctx, stage, f, n * sizeof(float));
    f8_tensor src = f8_tensor_make(stage, F8_DTYPE_FP32, w->rows, w->cols);
    if (st == F8_OK) st = f8_module_write_weight(mod, which, &src);
    if (st == F8_OK) st = f8_ctx_synchronize(ctx);
    f8_ctx_free(ctx, stage);
    free(h);
    free(f);
    return st;
}

static f8_status alloc_act(gpt *m, void **p, size_t bytes) { return f8_ctx_alloc(m->ctx, bytes ? bytes : 1, p); }

/* The seed of block l's module j (1 qkv, 2 proj, 3 mlp): one place, so the
 * FP8 weights' master init (gpt_fp8_master_init) draws what the modules drew. */
static uint64_t module_seed(const gpt_config *c, int64_t l, int j) { return c->seed * 1315423911u + (uint64_t)l * 4 + (uint64_t)j; }

/* Every FP8 primary weight from its master init (gpt_fp8_master_init). */
static f8_status write_fp8_weights(gpt *m)
{
    /* the largest: the GPT's fc1 and fc2 (4C x C), a Llama's fc1 (2F x C) or qkv */
    const int64_t C = m->c.channels, W = m->c.llama ? (m->c.heads + 2 * m->c.kv_heads) * (C / m->c.heads) : 3 * C;
    int64_t most = m->c.llama ? 2 * m->c.ffn * C : 4 * C * C;
    if (W * C > most) most = W * C;
    float *host = (float *)malloc((size_t)most * 4 + 4);
    void *stage = NULL;
    f8_status st = host ? f8_ctx_alloc(m->ctx, (size_t)most * 4 + 4, &stage) : F8_ERR_OUT_OF_MEMORY;
    for (int k = 0; st == F8_OK && k < gpt_fp8_weight_count(m); k++) {
        f8_module *mod;
        f8_param which;
        f8_tensor g;
        gpt_fp8_weight(m, k, &mod, &which);
        st = f8_module_param(mod, which, 0, &g); /* its shape */
        if (st == F8_OK) st = gpt_fp8_master_init(m, k, host);
        if (st == F8_OK) st = f8_ctx_upload(m->ctx, stage, host, (size_t)(g.rows * g.cols) * 4);
        f8_tensor src = f8_tensor_make(stage, F8_DTYPE_FP32, g.rows, g.cols);
        if (st == F8_OK) st = f8_module_write_weight(mod, which, &src);
    }
    if (st == F8_OK) st = f8_ctx_synchronize(m->ctx);
    f8_ctx_free(m->ctx, stage);
    free(host);
    return st;
}

/* The FP8 primary weights of either family at creation: quantized with scale
 * 1 (the slot's at creation, TE's fp8_model_init), then again with the scale
 * of their amax: training starts from codes that use the E4M3 range, not its
 * subnormals. */
static f8_status init_fp8_weights(gpt *m)
{
    for (int pass = 0; pass < 2; pass++) {
        TRY(write_fp8_weights(m));
        TRY(f8_ctx_update_weight_scales(m->ctx));
    }
    return F8_OK;
}

static f8_status tp_block(gpt *m, gpt_block *b, int64_t l, const f8_layernorm_linear_config *qc,
                          const f8_linear_config *pc, const f8_layernorm_mlp_config *mc, f8_ctx *init,
                          f8_module *const full[3]);

/* init: where the one-rank modules a TP rank takes its shards from are made
 * (its own ctx of the same device, so their FP8 slots do not join m's). */
static f8_status create_blocks(gpt *m, f8_ctx *init)
{
    const gpt_config *c = &m->c;
    const int64_t C = c->channels, T = m->T;
    const float proj_scale = 1.0f / sqrtf(2.0f * (float)c->layers);
    for (int64_t l = 0; l < c->layers; l++) {
        gpt_block *b = &m->blocks[l];
        f8_layernorm_linear_config qc = f8_layernorm_linear_config_default(C, 3 * C);
        qc.param_dtype = c->dtype;
        qc.fp8 = c->fp8;
        qc.max_tokens = T;
        qc.seed = module_seed(c, l, 1);
        qc.fp8_weights = c->fp8_weights;
        qc.recompute_norm_output = c->recompute_norm;
        qc.fuse_wgrad_accumulation = c->grad_fp32; /* the main grads: param_main_grads_create */
        qc.weight_transpose_per_call = l < c->wt_per_call;
        f8_linear_config pc = f8_linear_config_default(C, C);
        pc.param_dtype = c->dtype;
        pc.fp8 = c->fp8;
        pc.max_tokens = T;
        pc.seed = module_seed(c, l, 2);
        pc.fp8_weights = c->fp8_weights;
        pc.fuse_wgrad_accumulation = c->grad_fp32;
        pc.weight_transpose_per_call = l < c->wt_per_call;
        pc.recompute_input_cast = c->recompute_proj;
        f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(C, 4 * C);
        mc.param_dtype = c->dtype;
        mc.fp8 = c->fp8;
        mc.max_tokens = T;
        mc.seed = module_seed(c, l, 3);
        mc.fp8_weights = c->fp8_weights;
        mc.recompute_norm_output = c->recompute_norm;
        mc.fuse_wgrad_accumulation = c->grad_fp32;
        mc.recompute_activation = c->recompute_act;
        mc.weight_transpose_per_call = l < c->wt_per_call;
        if (m->tp) { /* the full block as one rank makes it, this rank's shard kept */
            f8_layernorm_linear_config fq = qc;
            f8_linear_config fp = pc;
            f8_layernorm_mlp_config fm = mc;
            fq.fp8 = fp.fp8 = fm.fp8 = 0;
            f8_module *full[3] = {NULL, NULL, NULL}; /* high precision: only the parameters are wanted */
            f8_tensor w;
            f8_status st = f8_layernorm_linear_create(init, &fq, &full[0]);
            if (st == F8_OK) st = f8_linear_create(init, &fp, &full[1]);
            if (st == F8_OK) st = f8_layernorm_mlp_create(init, &fm, &full[2]);
            if (st == F8_OK) st = f8_module_param(full[1], F8_PARAM_WEIGHT, 0, &w);
            if (st == F8_OK) st = scale_weight(m, init, &w, proj_scale, full[1], F8_PARAM_WEIGHT);
            if (st == F8_OK) st = f8_module_param(full[2], F8_PARAM_FC2_WEIGHT, 0, &w);
            if (st == F8_OK) st = scale_weight(m, init, &w, proj_scale, full[2], F8_PARAM_FC2_WEIGHT);
            if (st == F8_OK) st = tp_block(m, b, l, &qc, &pc, &mc, init, full);
            for (int k = 0; k < 3; k++) f8_module_destroy(full[k]);
            TRY(st);
            if (m->sp) { /* the column-parallel modules take this rank's tokens and gather their norm output */
                TRY(f8_module_set_sequence_parallel(b->qkv, m->tp));
                TRY(f8_module_set_sequence_parallel(b->mlp, m->tp));
            }
        } else {
            TRY(f8_layernorm_linear_create(m->ctx, &qc, &b->qkv));
            TRY(f8_linear_create(m->ctx, &pc, &b->proj));
            TRY(f8_layernorm_mlp_create(m->ctx, &mc, &b->mlp));
            f8_tensor w;
            if (!c->fp8_weights) { /* FP8 weights: scaled in their master init (write_fp8_weights) */
                TRY(f8_module_param(b->proj, F8_PARAM_WEIGHT, 0, &w));
                TRY(scale_weight(m, m->ctx, &w, proj_scale, b->proj, F8_PARAM_WEIGHT));
                TRY(f8_module_param(b->mlp, F8_PARAM_FC2_WEIGHT, 0, &w));
                TRY(scale_weight(m, m->ctx, &w, proj_scale, b->mlp, F8_PARAM_FC2_WEIGHT));
            }
        }
        b->att = m->att;
        if (m->c.fp8_attention) TRY(f8_attention_create(m->ctx, &m->att_cfg, &b->att));
        TRY(recompute_block_saved(m, l)); /* its own saved state, or (recompute) layer 0's */
    }
    return F8_OK;
}

/* Block l's entries of the parameter table, of the modules qkv, proj, mlp
 * (the model's, or the one-rank modules a TP rank takes its shards from):
 * one place, so the table and tp.c's sharding cannot disagree. With TP,
 * the column-parallel qkv and fc1 are split by rows (qkv's weight in its
 * three stacked q | k | v blocks; GPT's fc1 is GELU, one block), their
 * biases alike, and the row-parallel proj and fc2 weights by columns. */
static f8_status block_params(param_table *t, const gpt *m, int64_t l, f8_module *qkv, f8_module *proj,
                              f8_module *mlp)
{
    const int tp = m->tp != NULL;
    const unsigned D = PARAM_DECAY, R = PARAM_REPLICATED, S = tp ? PARAM_TP_SHARDED : 0,
                   R0 = R | (tp ? PARAM_TP_RANK0 : 0), N = R | (tp ? PARAM_TP_GRAD_SUM : 0);
    /* FP8 weight k = 4l + j of the block's j-th weight, with fp8_weights */
    const int k = m->c.fp8_weights ? (int)(4 * l) : -1, k1 = k < 0 ? -1 : k + 1, k2 = k < 0 ? -1 : k + 2,
              k3 = k < 0 ? -1 : k + 3;
    char q[48], p[48], f[48];
    snprintf(q, sizeof q, "model.h.%lld.qkv", (long long)l);
    snprintf(p, sizeof p, "model.h.%lld.proj", (long long)l);
    snprintf(f, sizeof f, "model.h.%lld.mlp", (long long)l);
    TRY(param_table_add(t, q, qkv, F8_PARAM_LN_WEIGHT, l, -1, N));
    TRY(param_table_add(t, q, qkv, F8_PARAM_LN_BIAS, l, -1, N));
    TRY(param_table_add(t, q, qkv, F8_PARAM_WEIGHT, l, k, D | S));
    param_table_split(t, 0, 3);
    TRY(param_table_add(t, q, qkv, F8_PARAM_BIAS, l, -1, S));
    param_table_split(t, 1, 3); /* stored [1, 3C]: its columns */
    TRY(param_table_add(t, p, proj, F8_PARAM_WEIGHT, l, k1, D | S));
    param_table_split(t, 1, 1);
    TRY(param_table_add(t, p, proj, F8_PARAM_BIAS, l, -1, R0));
    TRY(param_table_add(t, f, mlp, F8_PARAM_LN_WEIGHT, l, -1, N));
    TRY(param_table_add(t, f, mlp, F8_PARAM_LN_BIAS, l, -1, N));
    TRY(param_table_add(t, f, mlp, F8_PARAM_FC1_WEIGHT, l, k2, D | S));
    param_table_split(t, 0, 1);
    TRY(param_table_add(t, f, mlp, F8_PARAM_FC1_BIAS, l, -1, S));
    param_table_split(t, 1, 1);
    TRY(param_table_add(t, f, mlp, F8_PARAM_FC2_WEIGHT, l, k3, D | S));
    param_table_split(t, 1, 1);
    TRY(param_table_add(t, f, mlp, F8_PARAM_FC2_BIAS, l, -1, R0));
    return F8_OK;
}

/* The parameter table (gpt.h lists its order: the checkpoint's, never to change). */
static f8_status gpt_params_build(gpt *m)
{
    param_table *t = &m->params;
    const unsigned D = PARAM_DECAY, R = PARAM_REPLICATED;
    TRY(param_table_add(t, "model.head", m->head, F8_PARAM_WEIGHT, -1, -1, D | R));
    TRY(param_table_add(t, "model.head", m->head, F8_PARAM_LN_WEIGHT, -1, -1, R));
    TRY(param_table_add(t, "model.head", m->head, F8_PARAM_LN_BIAS, -1, -1, R));
    f8_tensor wpe = view(m, m->wpe, 0, m->c.seq, m->c.channels), dwpe = dwpe_view(m);
    f8_tensor all = view(m, m->wpe, 0, gpt_positions(&m->c), m->c.channels); /* every row, used or not */
    TRY(param_table_add_tensor(t, "model.wpe", &wpe, &dwpe, &all, -1, D | R));
    for (int64_t l = 0; l < m->c.layers; l++) {
        const gpt_block *b = &m->blocks[l];
        TRY(block_params(t, m, l, b->qkv, b->proj, b->mlp));
    }
    return F8_OK;
}

/* A TP rank's block b from the one-rank modules full[]: this rank's modules
 * made (tp_block_create), then given their shards over the two blocks'
 * tables (tp_block_shard). */
static f8_status tp_block(gpt *m, gpt_block *b, int64_t l, const f8_layernorm_linear_config *qc,
                          const f8_linear_config *pc, const f8_layernorm_mlp_config *mc, f8_ctx *init,
                          f8_module *const full[3])
{
    TRY(tp_block_create(m, b, qc, pc, mc));
    param_table ft = {0}, lt = {0};
    f8_status st = block_params(&ft, m, l, full[0], full[1], full[2]);
    if (st == F8_OK) st = block_params(&lt, m, l, b->qkv, b->proj, b->mlp);
    if (st == F8_OK) st = tp_block_shard(m, init, &ft, &lt);
    param_table_free(&ft);
    param_table_free(&lt);
    return st;
}

f8_status gpt_create(f8_ctx *ctx, const gpt_config *c, gpt *m, char *err, size_t err_size)
{
    return gpt_create_tp(ctx, c, NULL, 0, m, err, err_size);
}

f8_status gpt_create_tp(f8_ctx *ctx, const gpt_config *config, f8_comm *tp, int sp, gpt *m, char *err, size_t err_size)
{
    gpt_config cc = *config; /* FP32 gradients are what FP32 parameters have anyway: no main grads */
    cc.grad_fp32 = config->grad_fp32 && config->dtype == F8_DTYPE_BF16;
    const gpt_config *c = &cc;
    if (c->recompute_blocks < 0 || c->recompute_blocks > c->layers) {
        snprintf(err, err_size, "block recompute of %d blocks: the model has %lld", c->recompute_blocks,
                 (long long)c->layers);
        return F8_ERR_INVALID_ARGUMENT;
    }
    if (c->llama) {
        f8_status st = llama_create_tp(ctx, c, tp, sp, m, err, err_size);
        if (st == F8_OK && c->fp8_weights && (st = init_fp8_weights(m)) != F8_OK)
            snprintf(err, err_size, "%s", f8_ctx_last_error(ctx));
        return st;
    }
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->c = *c;
    m->T = c->batch * c->seq;
    m->T_call = m->T;
    if (c->channels % c->heads || c->padded_vocab < c->vocab) {
        snprintf(err, err_size, "channels %lld must divide by heads %lld, padded vocab %lld >= vocab %lld",
                 (long long)c->channels, (long long)c->heads, (long long)c->padded_vocab, (long long)c->vocab);
        return F8_ERR_INVALID_ARGUMENT;
    }
    m->tp = tp && f8_comm_size(tp) > 1 ? tp : NULL; /* a group of one is one rank */
    m->tp_size = m->tp ? f8_comm_size(tp) : 1;
    m->tp_rank = m->tp ? f8_comm_rank(tp) : 0;
    if (tp_check_shape(c->heads, c->channels, m->tp_size, err, err_size) != 0) return F8_ERR_INVALID_ARGUMENT;
    if (sp && tp_check_sp(c->seq, m->tp_size, err, err_size) != 0) return F8_ERR_INVALID_ARGUMENT;
    if (c->fp8_weights && (!c->fp8 || m->tp)) {
        snprintf(err, err_size, "FP8 primary weights need fp8 and no tensor parallelism");
        return F8_ERR_INVALID_ARGUMENT;
    }
    if (c->recompute_blocks && (m->tp || sp)) {
        snprintf(err, err_size, "block recompute is not yet for tensor or sequence parallelism");
        return F8_ERR_UNSUPPORTED;
    }
    m->sp = sp != 0;
    m->Tr = m->sp ? m->T / m->tp_size : m->T;
    m->Cl = c->channels / m->tp_size;
    m->Fl = 4 * c->channels / m->tp_size;
    const int64_t C = c->channels, L = c->layers, Cl = m->Cl;
    const size_t es = esize(m);
    f8_status st = F8_OK;
    m->blocks = (gpt_block *)calloc((size_t)L, sizeof *m->blocks);
    if (!m->blocks) st = F8_ERR_OUT_OF_MEMORY;
    f8_attention_config ac = f8_attention_config_default(c->heads / m->tp_size, C / c->heads, c->batch, c->seq);
    ac.dtype = c->dtype;
    ac.output_kept = 1; /* each layer's y stays in atty until its backward: no copy saved */
    m->att_cfg = ac;
    m->att_cfg.fp8 = c->fp8_attention; /* the layers' own; m->att (shared, exported) stays BF16 */
    m->att_cfg.fp8_backward = c->fp8_attention && c->fp8_attention_backward;
    if (st == F8_OK) st = f8_attention_create(ctx, &ac, &m->att);
    f8_ctx *init = NULL;
    if (st == F8_OK && m->tp) st = tp_scratch_ctx(ctx, &init, err, err_size);
    if (st == F8_OK) st = create_blocks(m, init);
    if (st == F8_OK && c->fp8_weights) st = init_fp8_weights(m);
    char init_err[256] = "";
    if (st != F8_OK && init) snprintf(init_err, sizeof init_err, "%s", f8_ctx_last_error(init));
    f8_ctx_destroy(init);
    f8_layernorm_linear_config hc = f8_layernorm_linear_config_default(C, c->padded_vocab);
    hc.bias = 0;
    hc.param_dtype = c->dtype;
    /* The LM head stays in high precision by default, as TE recipes keep it;
     * --fp8-head casts it too (its GEMMs are a quarter of a 124M step's FLOPs). */
    hc.fp8 = c->fp8 && c->fp8_head;
    hc.fuse_wgrad_accumulation = c->grad_fp32; /* wte's gradient: the head's and the embedding's, in FP32 */
    hc.weight_transpose_per_call = gpt_head_wt_per_call(c);
    m->head_rows = gpt_head_rows(c, 0); /* tokens per LM-head pass */
    hc.max_tokens = m->head_rows;
    hc.seed = c->seed * 2654435761u + 7;
    if (st == F8_OK) st = f8_layernorm_linear_create(ctx, &hc, &m->head);
    if (st == F8_OK) st = f8_module_saved_create(m->head, &m->head_s);
    /* all the model's positions (an imported GPT-2's); a run trains the first seq rows */
    if (st == F8_OK) st = alloc_act(m, &m->wpe, (size_t)(gpt_positions(c) * C) * es);
    if (st == F8_OK) st = alloc_act(m, &m->dwpe, (size_t)(c->seq * C) * f8_dtype_size(gpt_grad_dtype(c)));
    f8_tensor wpe = view(m, m->wpe, 0, gpt_positions(c), C);
    if (st == F8_OK) st = f8_tensor_fill_normal(ctx, &wpe, 0.01, c->seed * 40503u + 11);
    if (st == F8_OK) st = gpt_alloc_step_buffers(m, 3 * Cl, c->padded_vocab);
    if (st == F8_OK) st = gpt_zero_grad(m);
    if (st == F8_OK) st = gpt_params_build(m);
    if (st == F8_OK && c->grad_fp32) st = param_main_grads_create(&m->params, ctx, &m->main_grads, &m->main_grad_bytes);
    if (st == F8_OK) st = f8_ctx_synchronize(ctx);
    if (st != F8_OK) snprintf(err, err_size, "%s", init_err[0] ? init_err : f8_ctx_last_error(ctx));
    return st;
}

void gpt_destroy(gpt *m)
{
    if (!m->ctx) return;
    for (int64_t l = 0; m->blocks && l < m->c.layers; l++) {
        gpt_block *b = &m->blocks[l];
        recompute_block_release(m, l);
        if (b->att != m->att) f8_attention_destroy(b->att);
        f8_module_destroy(b->qkv);
        f8_module_destroy(b->proj);
        f8_module_destroy(b->mlp);
    }
    free(m->blocks);
    param_table_free(&m->params);
    f8_saved_destroy(m->head_s);
    f8_module_destroy(m->head);
    f8_attention_destroy(m->att);
    f8_rope_destroy(m->rope);
    void *bufs[] = {m->wpe, m->dwpe, m->resid, m->qkv, m->atty, m->logits, m->dres, m->dtmp, m->dqkv, m->io, m->tp_buf,
                    m->full, m->xf, m->wte, m->dwte, m->main_grads};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) f8_ctx_free(m->ctx, bufs[i]);
    memset(m, 0, sizeof *m);
}

int gpt_fp8_weight_count(const gpt *m) { return m->c.fp8_weights ? (int)(4 * m->c.layers) : 0; }

void gpt_fp8_weight(const gpt *m, int k, f8_module **module, f8_param *which)
{
    const gpt_block *b = &m->blocks[k / 4];
    static const f8_param params[4] = {F8_PARAM_WEIGHT, F8_PARAM_WEIGHT, F8_PARAM_FC1_WEIGHT, F8_PARAM_FC2_WEIGHT};
    *module = k % 4 == 0 ? b->qkv : k % 4 == 1 ? b->proj : b->mlp;
    *which = params[k % 4];
}

f8_status gpt_fp8_master_init(gpt *m, int k, float *host)
{
    f8_module *mod;
    f8_param which;
    gpt_fp8_weight(m, k, &mod, &which);
    f8_tensor g; /* the weight's view (FP8 codes: a primary weight): its shape */
    TRY(f8_module_param(mod, which, 0, &g));
    const int64_t l = k / 4, j = k % 4, n = g.rows * g.cols;
    const int mod_j = j == 0 ? 1 : j == 1 ? 2 : 3;
    uint64_t seed = m->c.llama ? llama_module_seed(&m->c, l, mod_j) : module_seed(&m->c, l, mod_j);
    if (j == 3) seed += 0x5bd1e995u; /* LayerNormMLP's fc2 seed (layernorm_mlp.c) */
    /* the GPT's proj and fc2 are scaled by 1/sqrt(2L) at init (scale_weight); a Llama's are not */
    const float factor = !m->c.llama && (j == 1 || j == 3) ? 1.0f / sqrtf(2.0f * (float)m->c.layers) : 1.0f;
    void *draw = NULL, *f32 = NULL;
    f8_status st = f8_ctx_alloc(m->ctx, (size_t)n * esize(m) + 1, &draw);
    if (st == F8_OK) st = f8_ctx_alloc(m->ctx, (size_t)n * 4 + 1, &f32);
    f8_tensor d = f8_tensor_make(draw, m->c.dtype, 1, n), f = f8_tensor_make(f32, F8_DTYPE_FP32, 1, n);
    if (st == F8_OK) st = f8_tensor_fill_normal(m->ctx, &d, 0.02, seed); /* the module's own draw (weight.c) */
    if (st == F8_OK) st = f8_tensor_convert(m->ctx, &d, &f);
    if (st == F8_OK) st = f8_ctx_download(m->ctx, host, f32, (size_t)n * 4);
    for (int64_t i = 0; st == F8_OK && i < n; i++) host[i] *= factor; /* as scale_weight: v · factor in FP32 */
    f8_ctx_free(m->ctx, draw);
    f8_ctx_free(m->ctx, f32);
    return st;
}

int64_t gpt_param_count(const gpt *m) { return param_elements(&m->params); }

double gpt_flops_per_token(const gpt *m)
{
    /* 6 per parameter (forward 2, backward 4) plus attention's two S-long
     * products per layer (12·L·C·S, the usual MFU convention). */
    return 6.0 * (double)gpt_param_count(m) + 12.0 * (double)(m->c.layers * m->c.channels * m->c.seq);
}

/* ---- sampling (gpt.h) ------------------------------------------------------- */

static float logit_at(const gpt *m, const unsigned char *row, int64_t v)
{
    if (m->c.dtype == F8_DTYPE_BF16) {
        uint16_t b;
        memcpy(&b, row + 2 * v, 2);
        return f8_bf16_to_float(b);
    }
    float f;
    memcpy(&f, row + 4 * v, 4);
    return f;
}

/* Sample n token ids after the len ids in ctx_tok (room for seq), each from
 * softmax(logits / temperature) of the last position, sliding the window when
 * it is full. */
f8_status gpt_sample(gpt *m, int32_t *ctx_tok, int64_t len, int64_t n, float temperature, uint64_t seed, int32_t *out)
{
    const int64_t S = m->c.seq, V = m->c.vocab, Vp = m->c.padded_vocab;
    const size_t es = f8_dtype_size(m->c.dtype);
    unsigned char *row = (unsigned char *)malloc((size_t)Vp * es);
    double *p = (double *)malloc((size_t)V * sizeof(double));
    if (!row || !p) {
        free(row);
        free(p);
        return F8_ERR_OUT_OF_MEMORY;
    }
    uint64_t s = seed;
    f8_status st = F8_OK;
    for (int64_t i = 0; i < n && st == F8_OK; i++) {
        st = f8_ctx_upload(m->ctx, m->tokens, ctx_tok, (size_t)S * 4);
        if (st == F8_OK) st = f8_ctx_upload(m->ctx, m->targets, ctx_tok, (size_t)S * 4);
        if (st == F8_OK) st = gpt_forward(m, 1, 0, 1.0f, F8_MICROBATCH_NONE);
        if (st == F8_OK)
            st = f8_ctx_download(m->ctx, row, (unsigned char *)m->logits + (size_t)((len - 1) * Vp) * es, (size_t)Vp * es);
        if (st != F8_OK) break;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, (double)logit_at(m, row, v));
        for (int64_t v = 0; v < V; v++) sum += p[v] = exp(((double)logit_at(m, row, v) - mx) / (double)temperature);
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        double u = ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0) * sum, acc = 0;
        int64_t pick = V - 1;
        for (int64_t v = 0; v < V; v++) {
            acc += p[v];
            if (acc >= u) {
                pick = v;
                break;
            }
        }
        out[i] = (int32_t)pick;
        if (len == S) { /* slide the window */
            memmove(ctx_tok, ctx_tok + 1, (size_t)(S - 1) * 4);
            len--;
        }
        ctx_tok[len++] = (int32_t)pick;
    }
    free(row);
    free(p);
    return st;
}

/* Block l's forward (a block_forward_fn: recompute.h runs it again in the backward). */
static f8_status block_forward(gpt *m, int64_t l, int64_t batch, int train, f8_microbatch mb)
{
    gpt_block *b = &m->blocks[l];
    f8_tensor x = resid(m, rc_in(m, l)), xm = resid(m, rc_mid(m, l)), xo = resid(m, rc_out(m, l));
    f8_tensor qkv = slice(m, m->qkv, rc_act(m, l), 3 * m->Cl), a = slice(m, m->atty, rc_act(m, l), m->Cl);
    /* SP: x holds this rank's tokens; the module gathers its norm output, qkv is all T */
    TRY(f8_layernorm_linear_forward(b->qkv, &x, &qkv, NULL, mb, train ? b->qkv_s : NULL));
    TRY(f8_attention_forward(b->att, &qkv, batch, m->c.seq, &a, train ? b->att_s : NULL));
    TRY(tp_row_parallel(m, b->proj, &a, train ? b->proj_s : NULL, mb, &xm, &x));
    return tp_row_parallel(m, b->mlp, &xm, train ? b->mlp_s : NULL, mb, &xo, &xm);
}

f8_status gpt_forward(gpt *m, int64_t batch, int train, float grad_scale, f8_microbatch mb)
{
    const gpt_config *c = &m->c;
    if (c->llama) return llama_forward(m, batch, train, grad_scale, mb);
    if (batch < 1 || batch > c->batch) return F8_ERR_SHAPE;
    const int64_t T = batch * c->seq, C = c->channels;
    m->T_call = T;
    f8_tensor wte, wpe = view(m, m->wpe, 0, c->seq, C), x0 = resid(m, 0);
    TRY(f8_module_param(m->head, F8_PARAM_WEIGHT, 0, &wte));
    TRY(tp_embed(m, m->tokens, &wte, &wpe, &x0)); /* SP: every rank embeds all tokens, keeps its rows */
    for (int64_t l = 0; l < c->layers; l++) {
        if (train) TRY(recompute_bind(m, l, batch, mb));
        TRY(block_forward(m, l, batch, train, mb));
    }
    f8_tensor xf = resid(m, rc_final(m));
    TRY(tp_head_input(m, &xf)); /* the head is replicated: SP gathers all T tokens on every rank */
    return head_forward(m, &xf, train, grad_scale, mb);
}

/* SP: d (all T rows) from every rank's own rows dl, gathered in place. */
static f8_status gather_grad(gpt *m, const f8_tensor *dl, f8_tensor *d)
{
    return m->sp ? f8_comm_all_gather(m->tp, dl->data, d->data, dl->rows * dl->cols, dl->dtype) : F8_OK;
}

f8_status gpt_backward(gpt *m)
{
    const gpt_config *c = &m->c;
    if (c->llama) return llama_backward(m);
    const int64_t C = c->channels, Tl = local_rows(m);
    f8_tensor d = slice(m, m->dres, 0, C), tmp = slice(m, m->dtmp, 0, C);
    f8_tensor dlogits = slice(m, m->logits, 0, c->padded_vocab), dqkv = slice(m, m->dqkv, 0, 3 * m->Cl);
    f8_tensor datt = slice(m, m->dtmp, 0, m->Cl); /* the local heads' share of tmp */
    /* dl: this rank's rows of d, where the gather puts them (SP), or d */
    f8_tensor dl = view(m, m->dres, 0, 1, C);
    dl.data = (unsigned char *)m->dres + (size_t)((m->sp ? m->tp_rank : 0) * Tl * C) * esize(m);
    dl.rows = tmp.rows = Tl;
    /* one rank: the residual's gradient joins in the blocks' input-gradient
     * stores (f8_module_backward_add); with ranks it waits for their sum */
    const int fused = !m->tp && !m->sp;
    /* every row, every rank; already done, pass by pass, by a chunked forward */
    if (!m->head_done) TRY(f8_layernorm_linear_backward(m->head, m->head_s, &dlogits, NULL, &d));
    for (int64_t l = c->layers - 1; l >= 0; l--) {
        gpt_block *b = &m->blocks[l];
        TRY(recompute_block(m, l, block_forward));
        if (l < c->layers - 1) TRY(gather_grad(m, &dl, &d)); /* after the head, d is whole already */
        if (fused) { /* the norm backward adds into d as it stores; d is also dy, read before */
            TRY(f8_module_backward_add(b->mlp, b->mlp_s, &d, &d)); /* d = ∂loss/∂x' */
        } else {
            TRY(f8_module_backward(b->mlp, b->mlp_s, &d, &tmp));
            /* column parallel: each rank's fc1 rows give part of the input gradient (SP: summed in the module) */
            if (m->tp && !m->sp) TRY(tp_all_reduce(m, &tmp));
            TRY(f8_tensor_add(m->ctx, &dl, &tmp)); /* d = ∂loss/∂x' */
        }
        TRY(gather_grad(m, &dl, &d));
        TRY(f8_module_backward(b->proj, b->proj_s, &d, &datt));
        TRY(f8_attention_backward(b->att, b->att_s, &datt, &dqkv));
        if (fused) {
            TRY(f8_module_backward_add(b->qkv, b->qkv_s, &dqkv, &d)); /* d = ∂loss/∂x */
        } else {
            TRY(f8_layernorm_linear_backward(b->qkv, b->qkv_s, &dqkv, NULL, &tmp));
            if (m->tp && !m->sp) TRY(tp_all_reduce(m, &tmp));
            TRY(f8_tensor_add(m->ctx, &dl, &tmp)); /* d = ∂loss/∂x */
        }
        TRY(param_grads_fold(&m->params, m->ctx, l)); /* FP32 main grads: the biases' and norms' */
        if (m->grads_ready) TRY(m->grads_ready(m->grads_user, l));
    }
    TRY(gather_grad(m, &dl, &d));
    f8_tensor dwte, dwpe = dwpe_view(m);
    TRY(param_grad_of(&m->params, m->head, F8_PARAM_WEIGHT, &dwte)); /* its main grad with grad_fp32 */
    TRY(f8_embedding_backward(m->ctx, m->tokens, c->seq, &d, &dwte, &dwpe));
    TRY(param_grads_fold(&m->params, m->ctx, -1));
    return m->grads_ready ? m->grads_ready(m->grads_user, -1) : F8_OK;
}

f8_status gpt_zero_grad(gpt *m)
{
    if (m->c.llama) return llama_zero_grad(m);
    for (int64_t l = 0; l < m->c.layers; l++) {
        TRY(f8_module_zero_grad(m->blocks[l].qkv));
        TRY(f8_module_zero_grad(m->blocks[l].proj));
        TRY(f8_module_zero_grad(m->blocks[l].mlp));
    }
    TRY(f8_module_zero_grad(m->head));
    TRY(gpt_zero_main_grads(m));
    f8_tensor dwpe = dwpe_view(m);
    return f8_tensor_zero(m->ctx, &dwpe);
}

/* With fp8_attention each layer's own attention has FP8 slots, stored as
 * model.h.<l>.attn (whole on every rank: they are all-reduced, not split):
 * added to `add`, or else restored from `from`. The shared BF16 attention
 * has none. */
static f8_status attentions_checkpoint(gpt *m, f8_checkpoint *add, const f8_checkpoint *from)
{
    char name[64];
    for (int64_t l = 0; m->c.fp8_attention && l < m->c.layers; l++) {
        snprintf(name, sizeof name, "model.h.%lld.attn", (long long)l);
        TRY(add ? f8_checkpoint_add_attention(add, name, m->blocks[l].att)
                : f8_checkpoint_restore_attention(from, name, m->blocks[l].att));
    }
    return F8_OK;
}

f8_status gpt_checkpoint_add(gpt *m, f8_checkpoint *ck)
{
    TRY(attentions_checkpoint(m, ck, NULL));
    return m->tp ? tp_checkpoint_add(m, ck) : param_checkpoint_add(&m->params, ck);
}

f8_status gpt_checkpoint_restore(gpt *m, const f8_checkpoint *ck)
{
    TRY(attentions_checkpoint(m, NULL, ck));
    return m->tp ? tp_checkpoint_restore(m, ck) : param_checkpoint_restore(&m->params, ck);
}
