/*
 * recompute.c — per-block activation recompute (recompute.h).
 */
#include "recompute.h"
#include "try.h"

f8_status recompute_block_saved(gpt *m, int64_t l)
{
    gpt_block *b = &m->blocks[l], *b0 = &m->blocks[0];
    /* with FP8 attention each layer's attention is its own object with its own saved state */
    const int own_att = b->att != m->att;
    if (rc_shared(m, l) && l > 0) {
        b->qkv_s = b0->qkv_s, b->proj_s = b0->proj_s, b->mlp_s = b0->mlp_s;
        if (!own_att) {
            b->att_s = b0->att_s;
            return F8_OK;
        }
        return f8_attention_saved_create(b->att, &b->att_s);
    }
    TRY(f8_module_saved_create(b->qkv, &b->qkv_s));
    TRY(f8_attention_saved_create(b->att, &b->att_s));
    TRY(f8_module_saved_create(b->proj, &b->proj_s));
    return f8_module_saved_create(b->mlp, &b->mlp_s);
}

void recompute_block_release(gpt *m, int64_t l)
{
    gpt_block *b = &m->blocks[l];
    const int shared = rc_shared(m, l) && l > 0;
    if (!shared || b->att != m->att) f8_attention_saved_destroy(b->att_s);
    if (!shared) { /* layer 0's objects: released before any module (layer 0's made them) */
        f8_saved_destroy(b->qkv_s);
        f8_saved_destroy(b->proj_s);
        f8_saved_destroy(b->mlp_s);
    }
    b->qkv_s = b->proj_s = b->mlp_s = NULL;
    b->att_s = NULL;
}

f8_status recompute_bind(gpt *m, int64_t l, int64_t batch, f8_microbatch mb)
{
    if (!rc_shared(m, l)) return F8_OK;
    gpt_block *b = &m->blocks[l];
    m->rc_batch = batch;
    m->rc_mb = mb;
    m->rc_last = l;
    TRY(f8_module_saved_rebind(b->qkv, b->qkv_s));
    TRY(f8_module_saved_rebind(b->proj, b->proj_s));
    return f8_module_saved_rebind(b->mlp, b->mlp_s);
}

f8_status recompute_block(gpt *m, int64_t l, block_forward_fn forward)
{
    if (!rc_shared(m, l) || l == m->rc_last) return F8_OK;
    TRY(recompute_bind(m, l, m->rc_batch, m->rc_mb));
    return forward(m, l, m->rc_batch, 1, m->rc_mb);
}

/* One step buffer (at least a byte: a zero-size run still gets a pointer). */
static f8_status step_alloc(gpt *m, void **p, size_t bytes) { return f8_ctx_alloc(m->ctx, bytes ? bytes : 1, p); }

/* The step's buffers, shared by both families (their sizes follow the
 * recompute setting: rc_resid_slots, rc_act_layers): the residual stream, the
 * blocks' qkv (qkv_width columns a token) and attention outputs, the head's
 * logits (vocab_cols), the backward's scratch, TP/SP's, and the token io. */
f8_status gpt_alloc_step_buffers(gpt *m, int64_t qkv_width, int64_t vocab_cols)
{
    const gpt_config *c = &m->c;
    const int64_t C = c->channels, T = m->T, Cl = m->Cl;
    const size_t es = f8_dtype_size(c->dtype);
    f8_status st = F8_OK;
    if (st == F8_OK) st = step_alloc(m, &m->resid, (size_t)(rc_resid_slots(c) * m->Tr * C) * es);
    if (st == F8_OK) st = step_alloc(m, &m->qkv, (size_t)(rc_act_layers(c) * T * qkv_width) * es);
    if (st == F8_OK) st = step_alloc(m, &m->atty, (size_t)(rc_act_layers(c) * T * Cl) * es);
    if (st == F8_OK) st = step_alloc(m, &m->logits, (size_t)(m->head_rows * vocab_cols) * es);
    if (st == F8_OK) st = step_alloc(m, &m->dres, (size_t)(T * C) * es);
    if (st == F8_OK) st = step_alloc(m, &m->dtmp, (size_t)(T * C) * es);
    if (st == F8_OK) st = step_alloc(m, &m->dqkv, (size_t)(T * qkv_width) * es);
    if (st == F8_OK && m->tp) st = step_alloc(m, (void **)&m->tp_buf, (size_t)((T + (m->sp ? m->Tr : 0)) * C) * 4);
    if (st == F8_OK && m->sp) st = step_alloc(m, &m->full, (size_t)(T * C) * es);
    if (st == F8_OK && m->sp) st = step_alloc(m, &m->xf, (size_t)(T * C) * es);
    if (st == F8_OK) st = step_alloc(m, &m->io, (size_t)T * 12);
    if (st == F8_OK) {
        m->tokens = (int32_t *)m->io;
        m->targets = m->tokens + T;
        m->losses = (float *)(m->targets + T);
    }
    return st;
}
