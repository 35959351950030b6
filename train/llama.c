/*
 * llama.c — the Llama family of llama.h on f8 modules, in the gpt struct.
 *
 * Design note. The buffers and their roles are the GPT's (model.h): the
 * residual stream at each block input and middle, each layer's qkv and
 * attention output kept for the backward, one chunk of logits. What differs
 * is the block: the modules are RMSNorm ones without biases, the MLP is
 * SwiGLU, q and k are rotated in place in the layer's qkv buffer right after
 * its GEMM (f8_rope: the attention and its backward see the rotated values;
 * the QKV module's backward needs its input, not its output, so nothing
 * keeps the unrotated ones), and the attention has G key/value heads. The
 * embedding adds a zero (S, C) "position" table: f8_embedding_forward takes
 * one, and x + 0 is exact. With an untied head the embedding table is a bare
 * tensor of the parameter table; tied, it is the head's weight as in the
 * GPT. The LM head and cross-entropy are the GPT's (head.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "head.h"
#include "llama.h"
#include "recompute.h"
#include "tp.h"
#include "try.h"

static size_t esize(const gpt *m) { return f8_dtype_size(m->c.dtype); }

static f8_tensor view(const gpt *m, void *base, int64_t index, int64_t rows, int64_t cols)
{
    return f8_tensor_make((unsigned char *)base + (size_t)(index * rows * cols) * esize(m), m->c.dtype, rows, cols);
}

/* An untied embedding table's gradient (Vp, C), in the gradient dtype (FP32 with grad_fp32). */
static f8_tensor dwte_view(const gpt *m)
{
    return f8_tensor_make(m->dwte, gpt_grad_dtype(&m->c), m->c.padded_vocab, m->c.channels);
}

/* Residual-stream slot i of the current call: this rank's rows (T_call, or
 * T_call / P with sequence parallelism; slots are Tr apart). */
static f8_tensor resid(const gpt *m, int64_t i)
{
    f8_tensor t = view(m, m->resid, i, m->Tr, m->c.channels);
    t.rows = m->sp ? m->T_call / m->tp_size : m->T_call;
    return t;
}

/* Tensor i of a [n, T, cols] stack, with the current call's rows. */
static f8_tensor slice(const gpt *m, void *base, int64_t i, int64_t cols)
{
    f8_tensor t = view(m, base, i, m->T, cols);
    t.rows = m->T_call;
    return t;
}

static int64_t kv_heads(const gpt_config *c) { return c->kv_heads > 0 ? c->kv_heads : c->heads; }
static int64_t head_dim(const gpt_config *c) { return c->channels / c->heads; }
/* The width of a qkv row: q of H heads, k and v of G each. */
static int64_t qkv_width(const gpt_config *c) { return (c->heads + 2 * kv_heads(c)) * head_dim(c); }
/* This rank's: H/P q heads, G/P k and v heads (tp.h). */
static int64_t qkv_local(const gpt *m) { return qkv_width(&m->c) / m->tp_size; }

double llama_param_estimate(const gpt_config *c)
{
    const double C = (double)c->channels, W = (double)qkv_width(c), F = (double)c->ffn, Vp = (double)c->padded_vocab;
    const double block = C * W + C * C + 3 * C * F + 2 * C;
    return (double)c->layers * block + Vp * C * (c->untied ? 2 : 1) + C;
}

double llama_bytes_estimate(const gpt_config *c)
{
    const double C = (double)c->channels, W = (double)qkv_width(c), F = (double)c->ffn, L = (double)c->layers;
    const double S = (double)c->seq, T = (double)c->batch * S, es = (double)f8_dtype_size(c->dtype);
    const double Vp = (double)c->padded_vocab, P = llama_param_estimate(c);
    const double head = (double)gpt_head_rows(c, 0);
    /* the stream, qkv, attention outputs, the modules' saved norm outputs and
     * SwiGLU inputs (fc1's output, 2F), the gradients' scratch, the logits */
    const double acts = T * ((2 * L + 1) * C + L * W + L * C + L * (2 * C + 2 * F) + 3 * C + W) * es + head * Vp * es;
    /* FP8: the weights' casts and transposes, and the GEMM inputs' codes saved for the backward */
    const double fp8 = c->fp8 ? L * (C * W + C * C + 3 * C * F) * 2 + T * L * (3 * C + F) : 0;
    return P * (2 * es + 8) + fp8 + acts;
}

int llama_check_memory(const gpt_config *c, const char *device_name, double limit, char *err, size_t n)
{
    const char *what = "this machine's memory";
    if (device_name) { /* 90% of it: the CUDA context, cuBLASLt's workspace and the allocator are not counted */
        limit = strstr(device_name, "H200") ? 141e9 * 0.9 : strstr(device_name, "H100") ? 80.0 * 1073741824.0 * 0.9 : 0;
        what = device_name;
    }
    const double need = llama_bytes_estimate(c);
    if (limit <= 0 || need <= limit) return 0;
    snprintf(err, n,
             "the Llama model (%lld layers, %lld wide, %lld/%lld heads, FFN %lld, vocab %lld: %.3g parameters) needs at "
             "least %.1f GiB on one rank (parameters, gradients, AdamW's FP32 moments, activations at batch %lld x seq "
             "%lld), more than %s (%.1f GiB): it needs several GPUs (data parallelism with ZeRO-1, --gpus N)",
             (long long)c->layers, (long long)c->channels, (long long)c->heads, (long long)kv_heads(c), (long long)c->ffn,
             (long long)c->vocab, llama_param_estimate(c), need / 1073741824.0, (long long)c->batch, (long long)c->seq,
             what, limit / 1073741824.0);
    return -1;
}

static f8_status alloc_act(gpt *m, void **p, size_t bytes) { return f8_ctx_alloc(m->ctx, bytes ? bytes : 1, p); }

/* Apart from the GPT's streams (llama.h). */
uint64_t llama_module_seed(const gpt_config *c, int64_t l, int j)
{
    return c->seed * 2246822519u + (uint64_t)l * 4 + (uint64_t)j + 0x11A3Au;
}

/* The one-rank configs of block l's modules. */
static void block_configs(const gpt *m, int64_t l, f8_layernorm_linear_config *qc, f8_linear_config *pc,
                          f8_layernorm_mlp_config *mc)
{
    const gpt_config *c = &m->c;
    const int64_t C = c->channels, T = m->T;
    *qc = f8_layernorm_linear_config_default(C, qkv_width(c));
    qc->bias = 0;
    qc->normalization = F8_NORM_RMSNORM;
    qc->param_dtype = c->dtype;
    qc->fp8 = c->fp8;
    qc->max_tokens = T;
    qc->seed = llama_module_seed(c, l, 1);
    qc->recompute_norm_output = c->recompute_norm;
    qc->fp8_weights = c->fp8_weights; /* scale 1 at creation; gpt_create writes them from their masters */
    qc->fuse_wgrad_accumulation = c->grad_fp32; /* the main grads: param_main_grads_create */
    qc->weight_transpose_per_call = l < c->wt_per_call;
    *pc = f8_linear_config_default(C, C);
    pc->bias = 0;
    pc->param_dtype = c->dtype;
    pc->fp8 = c->fp8;
    pc->max_tokens = T;
    pc->seed = llama_module_seed(c, l, 2);
    pc->fuse_wgrad_accumulation = c->grad_fp32;
    pc->fp8_weights = c->fp8_weights;
    pc->weight_transpose_per_call = l < c->wt_per_call;
    pc->recompute_input_cast = c->recompute_proj;
    *mc = f8_layernorm_mlp_config_default(C, c->ffn);
    mc->bias = 0;
    mc->normalization = F8_NORM_RMSNORM;
    mc->activation = F8_ACT_SWIGLU;
    mc->param_dtype = c->dtype;
    mc->fp8 = c->fp8;
    mc->max_tokens = T;
    mc->seed = llama_module_seed(c, l, 3);
    mc->recompute_norm_output = c->recompute_norm;
    mc->fuse_wgrad_accumulation = c->grad_fp32;
    mc->fp8_weights = c->fp8_weights;
    mc->recompute_activation = c->recompute_act;
    mc->weight_transpose_per_call = l < c->wt_per_call;
}

/* Block l's entries of the parameter table over the modules qkv, proj, mlp
 * (the model's, or the one-rank modules a TP rank takes its shards from):
 * one place, so the table and tp.c's sharding cannot disagree. With TP the
 * column-parallel qkv is split by rows in its three stacked blocks of
 * unequal size (q | k | v: H, G, G heads) and fc1 in its two ([gate | up]),
 * the row-parallel proj and fc2 by columns; the RMSNorms are replicated,
 * their gradients summed over the group (as the GPT's LayerNorms). */
static f8_status block_params(param_table *t, const gpt *m, int64_t l, f8_module *qkv, f8_module *proj,
                              f8_module *mlp)
{
    const int tp = m->tp != NULL;
    const unsigned D = PARAM_DECAY, S = tp ? PARAM_TP_SHARDED : 0, N = PARAM_REPLICATED | (tp ? PARAM_TP_GRAD_SUM : 0);
    const int qkv_sizes[3] = {(int)m->c.heads, (int)kv_heads(&m->c), (int)kv_heads(&m->c)};
    /* FP8 weight k = 4l + j of the block's j-th GEMM weight, with fp8_weights (the GPT's numbering) */
    const int k = m->c.fp8_weights ? (int)(4 * l) : -1;
    char q[48], p[48], f[48];
    snprintf(q, sizeof q, "model.h.%lld.qkv", (long long)l);
    snprintf(p, sizeof p, "model.h.%lld.proj", (long long)l);
    snprintf(f, sizeof f, "model.h.%lld.mlp", (long long)l);
    TRY(param_table_add(t, q, qkv, F8_PARAM_LN_WEIGHT, l, -1, N));
    TRY(param_table_add(t, q, qkv, F8_PARAM_WEIGHT, l, k, D | S));
    param_table_split_sizes(t, 0, 3, qkv_sizes);
    TRY(param_table_add(t, p, proj, F8_PARAM_WEIGHT, l, k < 0 ? -1 : k + 1, D | S));
    param_table_split(t, 1, 1);
    TRY(param_table_add(t, f, mlp, F8_PARAM_LN_WEIGHT, l, -1, N));
    TRY(param_table_add(t, f, mlp, F8_PARAM_FC1_WEIGHT, l, k < 0 ? -1 : k + 2, D | S));
    param_table_split(t, 0, 2);
    TRY(param_table_add(t, f, mlp, F8_PARAM_FC2_WEIGHT, l, k < 0 ? -1 : k + 3, D | S));
    param_table_split(t, 1, 1);
    return F8_OK;
}

/* A TP rank's block b: the one-rank modules made on init in high precision
 * (only their parameters are wanted: bitwise a one-rank run's), this rank's
 * modules with its widths, given their shards over the two blocks' tables
 * (and with SP their norm outputs gathered over the group). */
static f8_status tp_block(gpt *m, gpt_block *b, int64_t l, f8_ctx *init, const f8_layernorm_linear_config *qc,
                          const f8_linear_config *pc, const f8_layernorm_mlp_config *mc)
{
    f8_layernorm_linear_config fq = *qc, lq = *qc;
    f8_linear_config fp = *pc, lp = *pc;
    f8_layernorm_mlp_config fm = *mc, lm = *mc;
    fq.fp8 = fp.fp8 = fm.fp8 = 0;
    lq.out_features = qkv_local(m);
    lp.in_features = m->Cl;
    lm.ffn_hidden_size = m->Fl;
    f8_module *full[3] = {NULL, NULL, NULL};
    param_table ft = {0}, lt = {0};
    f8_status st = f8_layernorm_linear_create(init, &fq, &full[0]);
    if (st == F8_OK) st = f8_linear_create(init, &fp, &full[1]);
    if (st == F8_OK) st = f8_layernorm_mlp_create(init, &fm, &full[2]);
    if (st == F8_OK) st = f8_layernorm_linear_create(m->ctx, &lq, &b->qkv);
    if (st == F8_OK) st = f8_linear_create(m->ctx, &lp, &b->proj);
    if (st == F8_OK) st = f8_layernorm_mlp_create(m->ctx, &lm, &b->mlp);
    if (st == F8_OK) st = block_params(&ft, m, l, full[0], full[1], full[2]);
    if (st == F8_OK) st = block_params(&lt, m, l, b->qkv, b->proj, b->mlp);
    if (st == F8_OK) st = tp_block_shard(m, init, &ft, &lt);
    /* SP: the column-parallel modules take this rank's tokens and gather their norm output */
    if (st == F8_OK && m->sp) st = f8_module_set_sequence_parallel(b->qkv, m->tp);
    if (st == F8_OK && m->sp) st = f8_module_set_sequence_parallel(b->mlp, m->tp);
    param_table_free(&ft);
    param_table_free(&lt);
    for (int k = 0; k < 3; k++) f8_module_destroy(full[k]);
    return st;
}

/* init: with TP, where the one-rank modules are made (tp_block). */
static f8_status create_blocks(gpt *m, f8_ctx *init)
{
    for (int64_t l = 0; l < m->c.layers; l++) {
        gpt_block *b = &m->blocks[l];
        f8_layernorm_linear_config qc;
        f8_linear_config pc;
        f8_layernorm_mlp_config mc;
        block_configs(m, l, &qc, &pc, &mc);
        if (m->tp) {
            TRY(tp_block(m, b, l, init, &qc, &pc, &mc));
        } else {
            TRY(f8_layernorm_linear_create(m->ctx, &qc, &b->qkv));
            TRY(f8_linear_create(m->ctx, &pc, &b->proj));
            TRY(f8_layernorm_mlp_create(m->ctx, &mc, &b->mlp));
        }
        b->att = m->att;
        if (m->c.fp8_attention) TRY(f8_attention_create(m->ctx, &m->att_cfg, &b->att)); /* its own FP8 slots */
        TRY(recompute_block_saved(m, l)); /* its own saved state, or (recompute) layer 0's */
    }
    return F8_OK;
}

/* The parameter table (llama.h lists its order: the checkpoint's). */
static f8_status params_build(gpt *m)
{
    param_table *t = &m->params;
    const unsigned D = PARAM_DECAY, R = PARAM_REPLICATED;
    TRY(param_table_add(t, "model.head", m->head, F8_PARAM_WEIGHT, -1, -1, D | R));
    TRY(param_table_add(t, "model.head", m->head, F8_PARAM_LN_WEIGHT, -1, -1, R));
    if (m->c.untied) {
        f8_tensor w = view(m, m->wte, 0, m->c.padded_vocab, m->c.channels), g = dwte_view(m);
        TRY(param_table_add_tensor(t, "model.wte", &w, &g, NULL, -1, D | R));
    }
    for (int64_t l = 0; l < m->c.layers; l++) {
        const gpt_block *b = &m->blocks[l];
        TRY(block_params(t, m, l, b->qkv, b->proj, b->mlp));
    }
    return F8_OK;
}

/* What this family does not do yet (F8_ERR_UNSUPPORTED) or a shape it
 * cannot have (F8_ERR_INVALID_ARGUMENT), with a message; F8_OK. */
static f8_status refuse(const gpt_config *c, f8_comm *tp, int sp, char *err, size_t n)
{
    const int64_t G = kv_heads(c), P = tp ? f8_comm_size(tp) : 1;
    if (c->fp8_weights && (!c->fp8 || P > 1)) {
        snprintf(err, n, "FP8 primary weights need fp8 and no tensor parallelism");
        return F8_ERR_INVALID_ARGUMENT;
    } else if (c->recompute_blocks && (P > 1 || sp)) snprintf(err, n, "block recompute is not yet for tensor or sequence parallelism");
    else if (c->heads < 1 || c->channels % c->heads || G < 1 || c->heads % G || head_dim(c) % 2 || c->ffn < 1) {
        snprintf(err, n, "llama: channels %lld must divide by heads %lld into an even head_dim, kv_heads %lld must divide "
                 "heads, ffn %lld >= 1", (long long)c->channels, (long long)c->heads, (long long)G, (long long)c->ffn);
        return F8_ERR_INVALID_ARGUMENT;
    } else if (c->heads % P || G % P || c->ffn % P) { /* each rank whole q and kv heads, and a share of the MLP */
        snprintf(err, n, "tensor parallel %lld: the llama's %lld heads, %lld key/value heads and SwiGLU width %lld must "
                 "divide by it", (long long)P, (long long)c->heads, (long long)G, (long long)c->ffn);
        return F8_ERR_INVALID_ARGUMENT;
    } else if (sp && tp_check_sp(c->seq, P, err, n) != 0) {
        return F8_ERR_INVALID_ARGUMENT;
    } else if (c->padded_vocab < c->vocab) {
        snprintf(err, n, "padded vocab %lld < vocab %lld", (long long)c->padded_vocab, (long long)c->vocab);
        return F8_ERR_INVALID_ARGUMENT;
    } else
        return F8_OK;
    return F8_ERR_UNSUPPORTED;
}

f8_status llama_create_tp(f8_ctx *ctx, const gpt_config *c, f8_comm *tp, int sp, gpt *m, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->c = *c;
    const f8_status no = refuse(c, tp, sp, err, err_size);
    if (no != F8_OK) return no;
    m->T = c->batch * c->seq;
    m->T_call = m->T;
    m->tp = tp && f8_comm_size(tp) > 1 ? tp : NULL; /* a group of one is one rank */
    m->tp_size = m->tp ? f8_comm_size(tp) : 1;
    m->tp_rank = m->tp ? f8_comm_rank(tp) : 0;
    m->sp = sp != 0;
    m->Tr = m->sp ? m->T / m->tp_size : m->T;
    m->Cl = c->channels / m->tp_size;
    m->Fl = c->ffn / m->tp_size;
    const int64_t C = c->channels, L = c->layers, W = qkv_local(m), Vp = c->padded_vocab;
    const size_t es = esize(m);
    f8_status st = F8_OK;
    m->blocks = (gpt_block *)calloc((size_t)L, sizeof *m->blocks);
    if (!m->blocks) st = F8_ERR_OUT_OF_MEMORY;
    /* this rank's heads (TP: H/P q heads and their G/P key/value heads) */
    f8_attention_config ac = f8_attention_config_default(c->heads / m->tp_size, head_dim(c), c->batch, c->seq);
    ac.dtype = c->dtype;
    ac.n_kv_head = kv_heads(c) / m->tp_size;
    ac.output_kept = 1; /* each layer's y stays in atty until its backward */
    m->att_cfg = ac;
    m->att_cfg.fp8 = c->fp8_attention; /* the layers' own (GQA, after RoPE); m->att (shared) stays BF16 */
    m->att_cfg.fp8_backward = c->fp8_attention && c->fp8_attention_backward;
    if (st == F8_OK) st = f8_attention_create(ctx, &ac, &m->att);
    f8_rope_config rc = f8_rope_config_default(c->heads / m->tp_size, kv_heads(c) / m->tp_size, head_dim(c), c->seq);
    rc.theta = c->rope_theta > 0 ? c->rope_theta : 500000.0;
    if (c->rope_factor > 0) {
        rc.scaling = F8_ROPE_SCALING_LLAMA3;
        rc.factor = c->rope_factor; /* low 1, high 4, original 8192: the defaults, Llama 3.1's and 3.2's */
    }
    if (st == F8_OK) st = f8_rope_create(ctx, &rc, &m->rope);
    f8_ctx *init = NULL; /* TP: the one-rank modules' own ctx, so their slots do not join m's */
    if (st == F8_OK && m->tp) st = tp_scratch_ctx(ctx, &init, err, err_size);
    if (st == F8_OK) st = create_blocks(m, init);
    char init_err[256] = "";
    if (st != F8_OK && init) snprintf(init_err, sizeof init_err, "%s", f8_ctx_last_error(init));
    f8_ctx_destroy(init);
    f8_layernorm_linear_config hc = f8_layernorm_linear_config_default(C, Vp);
    hc.bias = 0;
    hc.normalization = F8_NORM_RMSNORM;
    hc.param_dtype = c->dtype;
    hc.fp8 = c->fp8 && c->fp8_head;
    hc.fuse_wgrad_accumulation = c->grad_fp32; /* a tied wte's gradient: the head's and the embedding's, in FP32 */
    hc.weight_transpose_per_call = gpt_head_wt_per_call(c);
    m->head_rows = gpt_head_rows(c, 0);
    hc.max_tokens = m->head_rows;
    hc.seed = c->seed * 2654435761u + 17;
    if (st == F8_OK) st = f8_layernorm_linear_create(ctx, &hc, &m->head);
    if (st == F8_OK) st = f8_module_saved_create(m->head, &m->head_s);
    if (st == F8_OK && c->untied) { /* the embedding table: N(0, 0.02²) as the modules' weights */
        st = alloc_act(m, &m->wte, (size_t)(Vp * C) * es);
        if (st == F8_OK) st = alloc_act(m, &m->dwte, (size_t)(Vp * C) * f8_dtype_size(gpt_grad_dtype(c)));
        f8_tensor w = view(m, m->wte, 0, Vp, C);
        if (st == F8_OK) st = f8_tensor_fill_normal(ctx, &w, 0.02, c->seed * 40503u + 29);
    }
    /* a zero position table: the embedding op's second input (x + 0 is exact) */
    if (st == F8_OK) st = alloc_act(m, &m->wpe, (size_t)(c->seq * C) * es);
    f8_tensor wpe = view(m, m->wpe, 0, c->seq, C);
    if (st == F8_OK) st = f8_tensor_zero(ctx, &wpe);
    if (st == F8_OK) st = gpt_alloc_step_buffers(m, W, Vp);
    if (st == F8_OK) st = llama_zero_grad(m);
    if (st == F8_OK) st = params_build(m);
    if (st == F8_OK && c->grad_fp32) st = param_main_grads_create(&m->params, ctx, &m->main_grads, &m->main_grad_bytes);
    if (st == F8_OK) st = f8_ctx_synchronize(ctx);
    if (st != F8_OK) snprintf(err, err_size, "%s", init_err[0] ? init_err : f8_ctx_last_error(ctx));
    return st;
}

/* The embedding table: the untied one, or the head's weight (tied); grad 1 for its gradient. */
static f8_status embedding_table(gpt *m, int grad, f8_tensor *t)
{
    if (m->c.untied) {
        *t = grad ? dwte_view(m) : view(m, m->wte, 0, m->c.padded_vocab, m->c.channels);
        return F8_OK;
    }
    /* tied: the head's weight; its gradient as the table holds it (the main grad with grad_fp32) */
    return grad ? param_grad_of(&m->params, m->head, F8_PARAM_WEIGHT, t) : f8_module_param(m->head, F8_PARAM_WEIGHT, 0, t);
}

/* Block l's forward (a block_forward_fn: recompute.h runs it again in the backward). */
static f8_status block_forward(gpt *m, int64_t l, int64_t batch, int train, f8_microbatch mb)
{
    const gpt_config *c = &m->c;
    const int64_t W = qkv_local(m);
    gpt_block *b = &m->blocks[l];
    f8_tensor x = resid(m, rc_in(m, l)), xm = resid(m, rc_mid(m, l)), xo = resid(m, rc_out(m, l));
    f8_tensor qkv = slice(m, m->qkv, rc_act(m, l), W), a = slice(m, m->atty, rc_act(m, l), m->Cl);
    TRY(f8_layernorm_linear_forward(b->qkv, &x, &qkv, NULL, mb, train ? b->qkv_s : NULL));
    TRY(f8_rope_forward(m->rope, &qkv, c->seq));
    TRY(f8_attention_forward(b->att, &qkv, batch, c->seq, &a, train ? b->att_s : NULL));
    /* one rank: the residual joins in the GEMM; TP: after the partial outputs' sum */
    TRY(tp_row_parallel(m, b->proj, &a, train ? b->proj_s : NULL, mb, &xm, &x));
    return tp_row_parallel(m, b->mlp, &xm, train ? b->mlp_s : NULL, mb, &xo, &xm);
}

f8_status llama_forward(gpt *m, int64_t batch, int train, float grad_scale, f8_microbatch mb)
{
    const gpt_config *c = &m->c;
    if (batch < 1 || batch > c->batch) return F8_ERR_SHAPE;
    const int64_t C = c->channels;
    m->T_call = batch * c->seq;
    f8_tensor wte, wpe = view(m, m->wpe, 0, c->seq, C), x0 = resid(m, 0);
    TRY(embedding_table(m, 0, &wte));
    TRY(tp_embed(m, m->tokens, &wte, &wpe, &x0)); /* SP: this rank's rows of it */
    for (int64_t l = 0; l < c->layers; l++) {
        if (train) TRY(recompute_bind(m, l, batch, mb));
        TRY(block_forward(m, l, batch, train, mb));
    }
    f8_tensor xf = resid(m, rc_final(m));
    TRY(tp_head_input(m, &xf)); /* SP: all T tokens gathered for the replicated head */
    return head_forward(m, &xf, train, grad_scale, mb);
}

/* SP: d (all T rows) from every rank's own rows dl, gathered in place. */
static f8_status gather_grad(gpt *m, const f8_tensor *dl, f8_tensor *d)
{
    return m->sp ? f8_comm_all_gather(m->tp, dl->data, d->data, dl->rows * dl->cols, dl->dtype) : F8_OK;
}

f8_status llama_backward(gpt *m)
{
    const gpt_config *c = &m->c;
    const int64_t C = c->channels;
    f8_tensor d = slice(m, m->dres, 0, C), datt = slice(m, m->dtmp, 0, m->Cl), tmp = slice(m, m->dtmp, 0, C);
    f8_tensor dlogits = slice(m, m->logits, 0, c->padded_vocab), dqkv = slice(m, m->dqkv, 0, qkv_local(m));
    /* dl: this rank's rows of d (SP: where the gather puts them), or d; tmp the same rows */
    f8_tensor dl = resid(m, 0);
    dl.data = (unsigned char *)m->dres + (size_t)((m->sp ? m->tp_rank : 0) * dl.rows * C) * esize(m);
    tmp.rows = dl.rows;
    if (!m->head_done) TRY(f8_layernorm_linear_backward(m->head, m->head_s, &dlogits, NULL, &d));
    for (int64_t l = c->layers - 1; l >= 0; l--) {
        gpt_block *b = &m->blocks[l];
        TRY(recompute_block(m, l, block_forward));
        if (l < c->layers - 1) TRY(gather_grad(m, &dl, &d)); /* after the head, d is whole already */
        TRY(tp_column_backward(m, b->mlp, b->mlp_s, &d, &dl, &tmp)); /* d = ∂loss/∂x' */
        TRY(gather_grad(m, &dl, &d));
        TRY(f8_module_backward(b->proj, b->proj_s, &d, &datt));
        TRY(f8_attention_backward(b->att, b->att_s, &datt, &dqkv));
        TRY(f8_rope_backward(m->rope, &dqkv, c->seq)); /* ∂loss/∂(the QKV GEMM's output) */
        TRY(tp_column_backward(m, b->qkv, b->qkv_s, &dqkv, &dl, &tmp)); /* d = ∂loss/∂x */
        TRY(param_grads_fold(&m->params, m->ctx, l)); /* FP32 main grads: the biases' and norms' */
        if (m->grads_ready) TRY(m->grads_ready(m->grads_user, l));
    }
    TRY(gather_grad(m, &dl, &d));
    f8_tensor dwte;
    TRY(embedding_table(m, 1, &dwte));
    TRY(f8_embedding_backward(m->ctx, m->tokens, c->seq, &d, &dwte, NULL));
    TRY(param_grads_fold(&m->params, m->ctx, -1));
    return m->grads_ready ? m->grads_ready(m->grads_user, -1) : F8_OK;
}

f8_status llama_zero_grad(gpt *m)
{
    for (int64_t l = 0; l < m->c.layers; l++) {
        TRY(f8_module_zero_grad(m->blocks[l].qkv));
        TRY(f8_module_zero_grad(m->blocks[l].proj));
        TRY(f8_module_zero_grad(m->blocks[l].mlp));
    }
    TRY(f8_module_zero_grad(m->head));
    TRY(gpt_zero_main_grads(m));
    if (!m->c.untied) return F8_OK;
    f8_tensor g = dwte_view(m);
    return f8_tensor_zero(m->ctx, &g);
}

/* ---- the family in a checkpoint's metadata (llama.h) ------------------------ */

f8_status llama_metadata_add(const gpt_config *c, f8_checkpoint *ck)
{
    char v[5][40];
    snprintf(v[0], sizeof v[0], "%lld", (long long)kv_heads(c));
    snprintf(v[1], sizeof v[1], "%lld", (long long)c->ffn);
    snprintf(v[2], sizeof v[2], "%d", c->untied ? 1 : 0);
    snprintf(v[3], sizeof v[3], "%.17g", c->rope_theta > 0 ? c->rope_theta : 500000.0);
    snprintf(v[4], sizeof v[4], "%.17g", c->rope_factor);
    static const char *const keys[5] = {"train.kv_heads", "train.ffn", "train.untied", "train.rope_theta",
                                        "train.rope_factor"};
    TRY(f8_checkpoint_set_metadata(ck, "train.family", "llama"));
    for (int i = 0; i < 5; i++) TRY(f8_checkpoint_set_metadata(ck, keys[i], v[i]));
    return F8_OK;
}

/* A finite number from metadata key, in [lo, hi]. */
static int meta_number(const f8_checkpoint *ck, const char *key, double lo, double hi, double *out, char *err, size_t n)
{
    const char *v = f8_checkpoint_metadata(ck, key);
    char *end = NULL;
    const double x = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end || !(x >= lo && x <= hi)) {
        snprintf(err, n, "the checkpoint's %s = '%.40s' is %s (expected a number in [%g, %g])", key, v ? v : "",
                 v ? "malformed" : "missing", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int llama_metadata_read(const f8_checkpoint *ck, gpt_config *c, char *err, size_t n)
{
    const char *family = f8_checkpoint_metadata(ck, "train.family");
    c->llama = 0;
    if (!family || strcmp(family, "gpt") == 0) return 0; /* a GPT (older checkpoints name no family) */
    if (strcmp(family, "llama") != 0) {
        snprintf(err, n, "the checkpoint's train.family = '%.40s' is not a family f8_train has (gpt, llama)", family);
        return -1;
    }
    double kv, ffn, untied;
    if (meta_number(ck, "train.kv_heads", 1, 65536, &kv, err, n) || meta_number(ck, "train.ffn", 1, 1 << 23, &ffn, err, n) ||
        meta_number(ck, "train.untied", 0, 1, &untied, err, n) ||
        meta_number(ck, "train.rope_theta", 1, 1e12, &c->rope_theta, err, n) ||
        meta_number(ck, "train.rope_factor", 0, 1e6, &c->rope_factor, err, n))
        return -1;
    c->llama = 1;
    c->kv_heads = (int64_t)kv, c->ffn = (int64_t)ffn, c->untied = untied != 0;
    return 0;
}
