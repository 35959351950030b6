/*
 * trainer.c — one GPT or Llama training run, running (trainer.h): the step,
 * evaluation, saving a checkpoint, sampling. Its creation and the loading of a
 * --resume checkpoint are in trainer_setup.c; the whole run as the command
 * line asks for it (progress, log, telemetry) in trainer_run.c.
 *
 * Design note. A step is: zero the gradients; per microbatch copy its tokens
 * from a staging buffer (all microbatches are uploaded before the step),
 * forward (FIRST for the first microbatch, NOT_FIRST after: the FP8 weight
 * workspaces are cast once per step), backward, keep its losses; the forward
 * and backward delayed-scaling updates; AdamW (lr schedule on the device).
 * Every piece is device work without host reads, so on the GPU the step is
 * captured once as one graph and replayed. Capture needs an eager warm-up
 * first (plans, lazy buffers): one microbatch's forward and backward, which
 * leaves nothing the step reads, or with ranks, FP8 primary weights or
 * telemetry a whole step undone by restoring the model and optimizer from an
 * in-memory checkpoint (capture), so a graphed run and an eager one start
 * from the same state. The host uploads the next step's tokens and downloads
 * the losses: one synchronization per step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dp.h"
#include "fp8w.h"
#include "hf.h"
#include "tokenizer.h"
#include "tp.h"
#include "trainer.h"
#include "llama.h"
#include "try.h"

/* ---- the step ------------------------------------------------------------- */

/* Everything a step does on the device; capturable. */
/* Forward and backward of this rank's first `count` microbatches of the
 * staged step (gradients zeroed first). */
static f8_status microbatches(trainer *t, int64_t count)
{
    gpt *m = &t->m;
    const float scale = 1.0f / (float)(t->M * t->T);
    TRY(gpt_zero_grad(m));
    int32_t *own_tokens = m->tokens, *own_targets = m->targets;
    float *own_losses = m->losses;
    f8_status st = F8_OK;
    for (int64_t mb = 0; mb < count && st == F8_OK; mb++) {
        /* the model reads this microbatch's staged tokens and writes its
         * losses in place (captured by address: no copies) */
        m->tokens = t->stage + (size_t)(mb * 2 * t->T);
        m->targets = m->tokens + t->T;
        m->losses = t->losses + (size_t)((t->mb0 + mb) * t->T);
        st = gpt_forward(m, m->c.batch, 1, scale, mb == 0 ? F8_MICROBATCH_FIRST : F8_MICROBATCH_NOT_FIRST);
        /* data parallel with overlap: the last backward reduces each block's bucket as it completes */
        const int hook = t->dp && dp_overlap(t->dp) && mb == t->Ml - 1;
        m->grads_ready = hook ? dp_grads_ready : NULL;
        m->grads_user = hook ? t->dp : NULL;
        if (st == F8_OK) st = gpt_backward(m);
        m->grads_ready = NULL;
    }
    m->tokens = own_tokens;
    m->targets = own_targets;
    m->losses = own_losses;
    return st;
}

static f8_status step_work(trainer *t)
{
    gpt *m = &t->m;
    TRY(microbatches(t, t->Ml));
    if (m->tp) TRY(tp_reduce_grads(m)); /* the column-parallel LayerNorms' shares */
    TRY(f8_ctx_update_scales(t->ctx, F8_DIR_FORWARD));
    TRY(f8_ctx_update_scales(t->ctx, F8_DIR_BACKWARD));
    if (!t->dp) {
        TRY(f8_adamw_step(t->opt));
        return t->fw ? fp8w_write(t->fw) : F8_OK; /* the FP8 weights from their masters */
    }
    TRY(dp_step(t->dp));
    if (m->tp) TRY(tp_sync_replicated(m)); /* updated on TP rank 0 only */
    /* every replica's losses, in microbatch order: the mean is the one-rank one */
    f8_comm *dpc = t->dp_comm ? t->dp_comm : t->comm;
    return f8_comm_all_gather(dpc, t->losses + t->mb0 * t->T, t->losses, t->Ml * t->T, F8_DTYPE_FP32);
}

static f8_status stage_batches(trainer *t, int64_t step)
{
    const int B = (int)t->m.c.batch, S = (int)t->m.c.seq;
    for (int64_t mb = 0; mb < t->Ml; mb++) {
        int32_t *x = t->host_stage + (size_t)(mb * 2 * t->T);
        f8_status st = data_train_batch(t->data, step, (int)(t->mb0 + mb), B, S, x, x + t->T);
        if (st != F8_OK) {
            snprintf(t->error, sizeof t->error, "%s", data_last_error(t->data));
            return st;
        }
    }
    return f8_ctx_upload(t->ctx, t->stage, t->host_stage, (size_t)(t->Ml * 2 * t->T) * 4);
}

/* This rank's FP8 weight masters (all, or its shards'); cols 0 without. */
static f8_tensor masters(const trainer *t)
{
    return t->fw ? fp8w_all(t->fw) : t->dp ? dp_masters(t->dp) : f8_tensor_make(NULL, F8_DTYPE_FP32, 1, 0);
}

/* The in-memory snapshot used around the capture warm-up. */
static f8_status snapshot(trainer *t, f8_checkpoint **ck)
{
    TRY(f8_checkpoint_create(t->ctx, ck));
    f8_status st = gpt_checkpoint_add(&t->m, *ck);
    if (st == F8_OK) st = f8_checkpoint_add_adamw(*ck, "optimizer", t->opt);
    f8_tensor v = masters(t);
    if (st == F8_OK && v.cols) st = f8_checkpoint_add_tensor(*ck, "masters", &v);
    return st;
}

/* One step recorded into t->graph; a failure of the step's work wins over
 * the end's (f8_graph_end still runs, so a capture is never left open). */
static f8_status record_step(trainer *t)
{
    TRY(f8_graph_begin(t->ctx));
    f8_status work = step_work(t);
    f8_status st = f8_graph_end(t->ctx, &t->graph);
    return work != F8_OK ? work : st;
}

/* The capture's warm-up builds the plans and lazy buffers of the step's
 * kernels before they are recorded. One rank without telemetry warms up with
 * the forward and backward of the step's first microbatch alone: every
 * microbatch has the same shapes, AdamW and the scale updates need no
 * warm-up (f8.h), and what it leaves behind changes nothing the captured
 * step reads: gradients are zeroed again, weight workspaces cast again, and
 * its amaxes, those of the same microbatch, are maxed into the slots' row 0
 * again by the step. So no snapshot of the model and optimizer is taken (at
 * 1.3B, gigabytes each way). With ranks (collectives' buffers), FP8 primary
 * weights (their weight slots' amaxes are the masters' cast's, which the
 * step writes after AdamW) or telemetry (its counters add up) the warm-up
 * is a whole step, undone by a snapshot. */
static f8_status capture(trainer *t)
{
    if (!t->dp && !t->m.tp && !t->fw && !f8_ctx_telemetry_enabled(t->ctx)) {
        TRY(microbatches(t, 1));
        return record_step(t);
    }
    f8_checkpoint *ck = NULL;
    f8_status st = snapshot(t, &ck);
    if (st == F8_OK) st = stage_batches(t, t->step);
    if (st == F8_OK) st = step_work(t); /* warm-up: plans and lazy buffers */
    if (st == F8_OK) st = gpt_checkpoint_restore(&t->m, ck);
    if (st == F8_OK) st = f8_checkpoint_restore_adamw(ck, "optimizer", t->opt);
    f8_tensor v = masters(t);
    if (st == F8_OK && v.cols) st = f8_checkpoint_read_tensor(ck, "masters", &v);
    f8_checkpoint_destroy(ck);
    if (st == F8_OK) st = record_step(t);
    return st;
}

f8_status trainer_step(trainer *t, double *loss)
{
    TRY(stage_batches(t, t->step));
    if (t->use_graph && !t->graph) TRY(capture(t));
    if (t->graph) TRY(f8_graph_replay(t->graph));
    else TRY(step_work(t));
    TRY(f8_ctx_download(t->ctx, t->host_losses, t->losses, (size_t)(t->M * t->T) * 4));
    double sum = 0;
    for (int64_t i = 0; i < t->M * t->T; i++) sum += t->host_losses[i];
    *loss = sum / (double)(t->M * t->T);
    t->step++;
    return F8_OK;
}

f8_status trainer_eval(trainer *t, double *loss)
{
    const int B = (int)t->m.c.batch, S = (int)t->m.c.seq;
    int64_t n = data_val_batches(t->data, B, S);
    if (t->o.val_batches > 0 && n > t->o.val_batches) n = t->o.val_batches;
    *loss = NAN;
    if (n <= 0) return F8_OK;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        f8_status st = data_val_batch(t->data, i, B, S, t->host_stage, t->host_stage + t->T);
        if (st != F8_OK) {
            snprintf(t->error, sizeof t->error, "%s", data_last_error(t->data));
            return st;
        }
        TRY(f8_ctx_upload(t->ctx, t->m.tokens, t->host_stage, (size_t)t->T * 4));
        TRY(f8_ctx_upload(t->ctx, t->m.targets, t->host_stage + t->T, (size_t)t->T * 4));
        /* NONE: casts the current weights (the cached workspaces hold the
         * values before the last optimizer step) */
        TRY(gpt_forward(&t->m, t->m.c.batch, 0, 1.0f, F8_MICROBATCH_NONE));
        TRY(f8_ctx_download(t->ctx, t->host_losses, t->m.losses, (size_t)t->T * 4));
        for (int64_t k = 0; k < t->T; k++) sum += t->host_losses[k];
    }
    *loss = sum / (double)(n * t->T);
    return F8_OK;
}

/* ---- checkpoints ------------------------------------------------------------ */

static const char *const META_KEYS[] = {"train.layers", "train.heads", "train.channels", "train.seq",
                                        "train.vocab", "train.padded_vocab", "train.fp8", "train.dtype"};

static void config_values(const gpt_config *c, char v[8][32])
{
    int64_t nums[7] = {c->layers, c->heads, c->channels, c->seq, c->vocab, c->padded_vocab, c->fp8};
    for (int i = 0; i < 7; i++) snprintf(v[i], 32, "%lld", (long long)nums[i]);
    snprintf(v[7], 32, "%s", f8_dtype_name(c->dtype));
}


/* With TP: ZeRO-1's state (dp.c) in its own layout, reshaped to the
 * one-rank layout by tp.c (and back on resume: trainer_setup.c). */
static f8_status tp_optimizer_save(trainer *t, f8_checkpoint *ck)
{
    f8_checkpoint *local = NULL;
    f8_status st = f8_checkpoint_create(t->ctx, &local);
    if (st == F8_OK) st = dp_checkpoint_add(t->dp, local, "local");
    if (st == F8_OK) st = tp_optimizer_add(&t->m, local, ck, "optimizer");
    f8_checkpoint_destroy(local);
    return st;
}

f8_status trainer_save(trainer *t, const char *path)
{
    f8_checkpoint *ck = NULL;
    TRY(f8_checkpoint_create(t->ctx, &ck));
    char v[8][32], step[32];
    config_values(&t->m.c, v);
    f8_status st = F8_OK;
    for (int i = 0; i < 8 && st == F8_OK; i++) st = f8_checkpoint_set_metadata(ck, META_KEYS[i], v[i]);
    snprintf(step, sizeof step, "%lld", (long long)t->step);
    if (st == F8_OK) st = f8_checkpoint_set_metadata(ck, "train.step", step);
    if (st == F8_OK) st = f8_checkpoint_set_metadata(ck, "train.recipe", f8_recipe_kind_name(f8_ctx_recipe(t->ctx)->kind));
    if (st == F8_OK) st = f8_checkpoint_set_metadata(ck, "train.fp8_head", t->m.c.fp8_head ? "1" : "0");
    if (st == F8_OK) st = f8_checkpoint_set_metadata(ck, "train.fp8_weights", t->m.c.fp8_weights ? "1" : "0");
    if (st == F8_OK) st = f8_checkpoint_set_metadata(ck, "train.fp8_attention", t->m.c.fp8_attention ? "1" : "0");
    if (st == F8_OK)
        st = f8_checkpoint_set_metadata(ck, "train.fp8_attention_backward", t->m.c.fp8_attention_backward ? "1" : "0");
    if (st == F8_OK && t->m.c.llama) st = llama_metadata_add(&t->m.c, ck);
    if (st == F8_OK) st = hf_checkpoint_set_positions(&t->m, ck);
    if (st == F8_OK) st = gpt_checkpoint_add(&t->m, ck);
    if (st == F8_OK)
        st = t->m.tp ? tp_optimizer_save(t, ck)
           : t->dp   ? dp_checkpoint_add(t->dp, ck, "optimizer")
                     : f8_checkpoint_add_adamw(ck, "optimizer", t->opt);
    if (st == F8_OK && t->fw) st = fp8w_checkpoint_add(t->fw, ck, "optimizer");
    /* one file per model: every rank took part in gathering it, rank 0 writes it */
    if (st == F8_OK && t->o.rank == 0) st = f8_checkpoint_save(ck, path);
    f8_checkpoint_destroy(ck);
    return st;
}

size_t trainer_peak_memory(const trainer *t)
{
    f8_ctx_counters c;
    return t && t->ctx && f8_ctx_counters_read(t->ctx, &c) == F8_OK ? (size_t)c.peak_bytes : 0;
}

gpt *trainer_model(trainer *t) { return &t->m; }
int64_t trainer_steps_done(const trainer *t) { return t->step; }
const char *trainer_error(const trainer *t) { return t->error[0] ? t->error : f8_ctx_last_error(t->ctx); }

/* ---- sampling ----------------------------------------------------------------- */

f8_status trainer_sample(trainer *t, const char *prompt, int64_t n, float temperature, uint64_t seed, char *out)
{
    const int64_t S = t->m.c.seq;
    int32_t *ctx_tok = (int32_t *)calloc((size_t)S, 4), *ids = (int32_t *)malloc((size_t)n * 4 + 4);
    f8_status st = ctx_tok && ids ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    int64_t len = 0;
    for (const char *c = prompt ? prompt : ""; *c && len < S; c++) ctx_tok[len++] = (unsigned char)*c;
    if (len == 0) ctx_tok[len++] = '\n';
    if (st == F8_OK) st = gpt_sample(&t->m, ctx_tok, len, n, temperature, seed, ids);
    for (int64_t i = 0; st == F8_OK && i < n; i++) out[i] = (char)(ids[i] < 256 ? ids[i] : '?');
    out[st == F8_OK ? n : 0] = '\0';
    free(ctx_tok);
    free(ids);
    return st;
}

f8_status trainer_sample_text(trainer *t, const char *tokenizer_path, int64_t n, float temperature, uint64_t seed,
                              char **text)
{
    *text = NULL;
    tokenizer *tok = NULL;
    char why[256];
    if (tokenizer_load(tokenizer_path, &tok, why, sizeof why) != 0) {
        snprintf(t->error, sizeof t->error, "%s", why);
        return F8_ERR_IO;
    }
    const int64_t S = t->m.c.seq;
    int32_t *ctx_tok = (int32_t *)calloc((size_t)S, 4), *ids = (int32_t *)malloc((size_t)n * 4 + 4);
    char *buf = (char *)malloc((size_t)n * 255 + 1);
    f8_status st = ctx_tok && ids && buf ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) ctx_tok[0] = tokenizer_eot(tok) < t->m.c.vocab ? tokenizer_eot(tok) : 0; /* from end-of-text */
    if (st == F8_OK) st = gpt_sample(&t->m, ctx_tok, 1, n, temperature, seed, ids);
    size_t k = 0;
    for (int64_t i = 0; st == F8_OK && i < n; i++) {
        size_t len = 0;
        const char *piece = tokenizer_decode(tok, ids[i], &len);
        if (!piece) piece = "?", len = 1; /* a padded or unknown id */
        memcpy(buf + k, piece, len);
        k += len;
    }
    if (st == F8_OK) {
        buf[k] = '\0';
        *text = buf;
    } else {
        free(buf);
    }
    free(ctx_tok);
    free(ids);
    tokenizer_destroy(tok);
    return st;
}
