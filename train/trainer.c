/*
 * trainer.c — one GPT training run (trainer.h).
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
 * telemetry a whole step
 * undone by restoring the model and optimizer from an in-memory checkpoint
 * (capture), so a graphed run and an eager one start from the same state. The host uploads the next
 * step's tokens and downloads the losses: one synchronization per step.
 *
 * Resume: a checkpoint holds the model (parameters and FP8 scaling state,
 * the FP8 attentions' slots included), the optimizer (moments, step) and the
 * step count; batches are a pure function of (seed, step, microbatch), so a
 * resumed run is bitwise the uninterrupted one. A checkpoint is untrusted input: its metadata is
 * parsed strictly and its shape bounded (train_options_from_metadata) before
 * anything is allocated, the model's memory is estimated against the
 * machine's before it is created, and every tensor's values are checked
 * (finite; scales > 0; amaxes and second moments >= 0) before any is
 * restored. Checksums (f8_checkpoint_load) catch corruption on the way.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dp.h"
#include "fp8w.h"
#include "hf.h"
#include "plot.h"
#include "fp8_report.h"
#include "tokenizer.h"
#include "tp.h"
#include "trainer.h"
#include "hf_llama.h"
#include "llama.h"
#include "try.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
        f8_status st = microbatches(t, 1);
        if (st == F8_OK) st = f8_graph_begin(t->ctx);
        if (st == F8_OK) {
            f8_status work = step_work(t);
            st = f8_graph_end(t->ctx, &t->graph);
            if (work != F8_OK) st = work;
        }
        return st;
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
    if (st == F8_OK) st = f8_graph_begin(t->ctx);
    if (st == F8_OK) {
        f8_status work = step_work(t);
        st = f8_graph_end(t->ctx, &t->graph);
        if (work != F8_OK) st = work;
    }
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
 * one-rank layout by tp.c, and back. */
static f8_status tp_optimizer_save(trainer *t, f8_checkpoint *ck)
{
    f8_checkpoint *local = NULL;
    f8_status st = f8_checkpoint_create(t->ctx, &local);
    if (st == F8_OK) st = dp_checkpoint_add(t->dp, local, "local");
    if (st == F8_OK) st = tp_optimizer_add(&t->m, local, ck, "optimizer");
    f8_checkpoint_destroy(local);
    return st;
}

static f8_status tp_optimizer_load(trainer *t, const f8_checkpoint *ck)
{
    f8_checkpoint *local = NULL;
    f8_status st = f8_checkpoint_create(t->ctx, &local);
    if (st == F8_OK) st = tp_optimizer_restore(&t->m, ck, "optimizer", local, t->error, sizeof t->error);
    if (st == F8_OK) st = dp_checkpoint_restore(t->dp, local, "local", t->error, sizeof t->error);
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

static const char *meta_get(void *ck, const char *key) { return f8_checkpoint_metadata((const f8_checkpoint *)ck, key); }

/* What the tensors of a checkpoint must hold, by name: scales > 0, amax
 * histories and second moments >= 0, every other float finite. */
static f8_ck_rule rule_for(const char *name)
{
    size_t n = strlen(name);
#define ENDS(s) (n >= sizeof(s) - 1 && strcmp(name + n - (sizeof(s) - 1), s) == 0)
    if (ENDS(".scale") || ENDS("scale_inv")) return F8_CK_POSITIVE;
    if (ENDS(".amax_history") || strncmp(name, "optimizer.v.", 12) == 0) return F8_CK_NONNEGATIVE;
#undef ENDS
    return F8_CK_FINITE;
}

/* Model shape from a checkpoint's metadata (for --resume), checked against
 * the command line and against the checkpoint's own tensors. */
static int config_from_checkpoint(trainer *t, const f8_checkpoint *ck, char *err, size_t n)
{
    if (train_options_from_metadata(&t->o, meta_get, (void *)ck, &t->ck_vocab, &t->ck_padded_vocab, &t->ck_step, err,
                                    n) != 0)
        return -1;
    if ((t->ck_positions = hf_checkpoint_positions(ck, t->o.seq, err, n)) < 0) return -1;
    gpt_config lc; /* the model family: a Llama's own shape (llama.h) */
    memset(&lc, 0, sizeof lc);
    if (llama_metadata_read(ck, &lc, err, n) != 0) return -1;
    if (t->o.llama && !lc.llama) {
        snprintf(err, n, "the options ask for a Llama (--model llama-*) but the checkpoint holds a GPT (no train.family)");
        return -1;
    }
    t->o.llama = lc.llama, t->o.kv_heads = lc.kv_heads, t->o.ffn = lc.ffn, t->o.untied = lc.untied;
    t->o.rope_theta = lc.rope_theta, t->o.rope_factor = lc.rope_factor;
    /* train.fp8 must say what the tensors say: FP8 blocks store scaling state */
    const int has_fp8 = f8_checkpoint_has(ck, "model.h.0.qkv.fp8.fwd.amax_history");
    if (has_fp8 != t->o.fp8) {
        snprintf(err, n, "train.fp8 = %d but the checkpoint %s FP8 scaling state (model.h.0.qkv.fp8.*): the metadata "
                         "does not match the tensors", t->o.fp8, has_fp8 ? "holds" : "has no");
        return -1;
    }
    const int has_masters = f8_checkpoint_has(ck, "optimizer.master.0"); /* FP8 weights keep FP32 masters */
    if (has_masters != t->o.fp8_weights) {
        snprintf(err, n, "train.fp8_weights = %d but the checkpoint %s FP8 weight masters (optimizer.master.*): the "
                         "metadata does not match the tensors", t->o.fp8_weights, has_masters ? "holds" : "has no");
        return -1;
    }
    const int has_att = f8_checkpoint_has(ck, "model.h.0.attn.fp8.fwd.amax_history"); /* FP8 attention's slots */
    if (has_att != t->o.fp8_attention) {
        snprintf(err, n, "train.fp8_attention = %d but the checkpoint %s FP8 attention state (model.h.0.attn.fp8.*): "
                         "the metadata does not match the tensors", t->o.fp8_attention, has_att ? "holds" : "has no");
        return -1;
    }
    if (t->ck_step >= t->o.steps) {
        snprintf(err, n, "the checkpoint is at step %lld and --steps is %lld: nothing left to train (raise --steps)",
                 (long long)t->ck_step, (long long)t->o.steps);
        return -1;
    }
    return 0;
}

static f8_status resume(trainer *t, const char *path)
{
    f8_checkpoint *ck = NULL;
    TRY(f8_checkpoint_load(t->ctx, path, &ck));
    f8_status st = F8_OK;
    /* values first: nothing is restored from a file holding a NaN */
    for (size_t i = 0; st == F8_OK && i < f8_checkpoint_entry_count(ck); i++) {
        const char *name = f8_checkpoint_entry_at(ck, i)->name;
        st = f8_checkpoint_check_entry(ck, "--resume", name, rule_for(name));
    }
    if (st == F8_OK) st = gpt_checkpoint_restore(&t->m, ck);
    if (st == F8_OK)
        st = t->m.tp ? tp_optimizer_load(t, ck)
           : t->dp   ? dp_checkpoint_restore(t->dp, ck, "optimizer", t->error, sizeof t->error)
                     : f8_checkpoint_restore_adamw(ck, "optimizer", t->opt);
    if (st == F8_OK && t->fw) st = fp8w_checkpoint_restore(t->fw, ck, "optimizer", t->error, sizeof t->error);
    int64_t done = -1;
    if (st == F8_OK) st = f8_adamw_read(t->opt, &done, NULL, NULL);
    if (st == F8_OK && done != t->ck_step) {
        snprintf(t->error, sizeof t->error, "checkpoint '%s': train.step = %lld but the optimizer has done %lld steps",
                 path, (long long)t->ck_step, (long long)done);
        st = F8_ERR_INVALID_ARGUMENT;
    }
    if (st == F8_OK) t->step = t->ck_step;
    f8_checkpoint_destroy(ck);
    return st;
}

/* ---- creation --------------------------------------------------------------- */

static f8_status add_param(void *user, const model_param *p)
{
    trainer *t = (trainer *)user;
    f8_tensor master = p->fp8 >= 0 ? fp8w_master(t->fw, p->fp8) : p->value; /* AdamW steps the master */
    return f8_adamw_add(t->opt, &master, &p->grad, (p->flags & PARAM_DECAY) != 0);
}

/* Rank world_rank's tensor-parallel and data-parallel communicators: its TP
 * group is ranks d·tp .. d·tp + tp - 1 (d = world_rank / tp), its DP group
 * the ranks of the same TP index. CPU ranks: from the launcher's groups;
 * NCCL: from its ids (untested: no GPU run yet). */
static f8_status tp_comms_create(f8_ctx *ctx, const train_options *o, f8_comm **tp, f8_comm **dp, char *err, size_t n)
{
    const int P = (int)o->tp, r = o->rank;
    f8_status st;
    *tp = *dp = NULL;
    /* what the launcher checks (train_check_tp), again for a trainer made in code */
    if (o->world % P != 0 || o->dp_overlap || (o->init_from && o->init_from[0])) {
        snprintf(err, n, "--tp %d: %s", P,
                 o->world % P ? "the ranks are not a multiple of it"
                 : o->dp_overlap ? "--dp-overlap with it is not supported"
                                 : "--init-from with it is not supported (import with one rank, then --resume)");
        return F8_ERR_INVALID_ARGUMENT;
    }
    if (f8_ctx_backend(ctx) == F8_BACKEND_CPU) {
        st = f8_comm_create_cpu(ctx, o->tp_group, r % P, tp);
        if (st == F8_OK) st = f8_comm_create_cpu(ctx, o->dp_group, r / P, dp);
    } else { /* NCCL: one id per group, made by rank 0 (launch.c); untested on GPUs */
        st = f8_comm_create_nccl(ctx, o->tp_id, r % P, P, tp);
        if (st == F8_OK) st = f8_comm_create_nccl(ctx, o->dp_id, r / P, o->world / P, dp);
    }
    if (st != F8_OK) snprintf(err, n, "rank %d: tensor/data-parallel groups: %s", r, f8_ctx_last_error(ctx));
    return st;
}

static f8_status make_ctx(trainer *t, char *err, size_t n)
{
    f8_ctx_config cfg = f8_ctx_config_default();
    const char *b = t->o.backend;
    cfg.backend = strcmp(b, "cpu") == 0 ? F8_BACKEND_CPU : F8_BACKEND_CUDA;
    cfg.device = t->o.device;
    const char *r = t->o.recipe ? t->o.recipe : "delayed";
    cfg.recipe = train_recipe(strcmp(r, "current") == 0   ? F8_RECIPE_CURRENT
                              : strcmp(r, "block") == 0   ? F8_RECIPE_BLOCK
                              : strcmp(r, "rowwise") == 0 ? F8_RECIPE_ROWWISE
                              : strcmp(r, "rowwise_with_gw_hp") == 0 ? F8_RECIPE_ROWWISE_GW_HP
                                                          : F8_RECIPE_DELAYED);
    cfg.attention_path = strcmp(t->o.attention, "own") == 0 ? F8_ATTENTION_PATH_OWN : F8_ATTENTION_PATH_AUTO;
    cfg.attention_nondeterministic = !t->o.attention_deterministic;
    f8_status st = f8_ctx_create(&cfg, &t->ctx, err, n);
    if (st == F8_ERR_NO_DEVICE && strcmp(b, "auto") == 0) {
        cfg.backend = F8_BACKEND_CPU;
        st = f8_ctx_create(&cfg, &t->ctx, err, n);
    }
    t->ctx_cfg = cfg;
    if (st == F8_OK && t->o.fp8_report && t->o.fp8 && (st = f8_ctx_enable_telemetry(t->ctx)) != F8_OK)
        snprintf(err, n, "FP8 telemetry: %s", f8_ctx_last_error(t->ctx));
    if (st == F8_OK && (t->o.comm_group || t->o.comm_id)) /* data parallel, any size (1 included) */
        st = dp_comm_create(t->ctx, t->o.comm_group, t->o.comm_id, t->o.rank, t->o.world, &t->comm, err, n);
    if (st == F8_OK && t->comm && t->o.tp > 1) st = tp_comms_create(t->ctx, &t->o, &t->tp_comm, &t->dp_comm, err, n);
    return st;
}

static f8_adamw_moments moments_of(const char *word)
{
    return word && strcmp(word, "bf16") == 0 ? F8_ADAMW_MOMENTS_BF16
         : word && strcmp(word, "fp8") == 0  ? F8_ADAMW_MOMENTS_FP8
                                             : F8_ADAMW_MOMENTS_FP32;
}

/* The run's memory plan (memplan.h), before the model is made; refused when
 * it exceeds --memory-limit or, on CUDA, the GPU's free memory. */
static f8_status plan_memory(trainer *t, const gpt_config *c, int cuda, char *err, size_t n)
{
    mem_plan_run r;
    memset(&r, 0, sizeof r);
    r.ctx = t->ctx_cfg;
    r.tp = (int)(t->o.tp > 1 ? t->o.tp : 1);
    r.ranks = t->comm ? t->o.world / r.tp : 0;
    r.moments = moments_of(t->o.adam_moments);
    TRY(mem_plan_make(c, &r, &t->plan, err, n));
    double limit = 0;
    const char *what = "";
    size_t free_bytes = 0;
    if (cuda && f8_ctx_device_memory(t->ctx, &free_bytes, NULL) == F8_OK)
        limit = (double)free_bytes, what = "the GPU's free memory";
    if (t->o.memory_limit > 0 && (limit == 0 || t->o.memory_limit * 1073741824.0 < limit))
        limit = t->o.memory_limit * 1073741824.0, what = "--memory-limit";
    if (limit > 0 && mem_plan_check(&t->plan, c, &r, limit, what, err, n) != 0) return F8_ERR_OUT_OF_MEMORY;
    return F8_OK;
}

f8_status trainer_create(const train_options *opt, trainer **out, char *err, size_t n)
{
    *out = NULL;
    trainer *t = (trainer *)calloc(1, sizeof *t);
    if (!t) return F8_ERR_OUT_OF_MEMORY;
    t->o = *opt;
    f8_status st = F8_OK;
    err[0] = 0;
    if (t->o.steps < 1) {
        snprintf(err, n, "--steps %lld: nothing to train (at least 1)", (long long)t->o.steps);
        st = F8_ERR_INVALID_ARGUMENT;
    }
    if (st == F8_OK && t->o.checkpoint && t->o.checkpoint[0] && train_check_writable(t->o.checkpoint, err, n) != 0)
        st = F8_ERR_IO;
    if (st == F8_OK && t->o.resume && t->o.resume[0]) {
        /* the model shape comes from the checkpoint (a CPU ctx reads it) */
        f8_ctx_config cc = f8_ctx_config_default();
        f8_ctx *tmp = NULL;
        f8_checkpoint *ck = NULL;
        st = f8_ctx_create(&cc, &tmp, err, n);
        if (st == F8_OK && (st = f8_checkpoint_load(tmp, t->o.resume, &ck)) != F8_OK)
            snprintf(err, n, "cannot load '%s': %s", t->o.resume, f8_ctx_last_error(tmp));
        if (st == F8_OK && config_from_checkpoint(t, ck, err, n) != 0) st = F8_ERR_INVALID_ARGUMENT;
        f8_checkpoint_destroy(ck);
        f8_ctx_destroy(tmp);
    }
    if (st == F8_OK && train_check_fp8_weights(&t->o, t->o.recipe, err, n) != 0) st = F8_ERR_INVALID_ARGUMENT;
    if (st == F8_OK && train_check_recompute_norm(&t->o, t->o.recipe, err, n) != 0) st = F8_ERR_INVALID_ARGUMENT;
    if (st == F8_OK && train_check_recompute_blocks(&t->o, err, n) != 0) st = F8_ERR_INVALID_ARGUMENT;
    if (st == F8_OK && train_check_fp8_attention(&t->o, t->o.recipe, err, n) != 0) st = F8_ERR_INVALID_ARGUMENT;
    hf_config hc;
    const int from_hf = t->o.init_from && t->o.init_from[0];
    if (st == F8_OK && from_hf) {
        /* the model's shape is the GPT-2's, or the Llama's (hf_llama.h) */
        hf_llama_config lc;
        if (hf_llama_is(t->o.init_from)) {
            if (hf_llama_read_config(t->o.init_from, &lc, err, n) != 0) st = F8_ERR_INVALID_ARGUMENT;
            hc.layers = lc.layers, hc.heads = lc.heads, hc.channels = lc.channels;
            hc.positions = lc.positions, hc.vocab = lc.vocab;
            t->o.llama = 1, t->o.kv_heads = lc.kv_heads, t->o.ffn = lc.ffn, t->o.untied = lc.untied;
            t->o.rope_theta = lc.rope_theta, t->o.rope_factor = lc.rope_factor;
        } else if (hf_read_config(t->o.init_from, &hc, err, n) != 0) {
            st = F8_ERR_INVALID_ARGUMENT;
        } else if (t->o.llama) {
            snprintf(err, n, "--init-from '%s' is a GPT-2 (its config.json does not say \"model_type\": \"llama\"), "
                             "and --model asks for a Llama", t->o.init_from);
            st = F8_ERR_INVALID_ARGUMENT;
        }
        if (st != F8_OK)
            ;
        else if (t->o.seq > hc.positions) {
            snprintf(err, n, "--seq %lld is longer than the checkpoint's %lld positions", (long long)t->o.seq,
                     (long long)hc.positions);
            st = F8_ERR_INVALID_ARGUMENT;
        } else {
            t->o.model = "custom";
            t->o.layers = hc.layers, t->o.heads = hc.heads, t->o.channels = hc.channels;
        }
    }
    double mark = now_s();
    if (st == F8_OK) st = make_ctx(t, err, n);
    t->t_ctx = now_s() - mark, mark = now_s();
    data_config dc = data_config_default();
    dc.sample_seed = t->o.seed;
    if (t->o.data && t->o.data[0]) {
        dc.source = DATA_SOURCE_SHARDS;
        dc.path = t->o.data;
        dc.val_path = t->o.val_data && t->o.val_data[0] ? t->o.val_data : NULL;
    } else if (t->o.text && t->o.text[0]) {
        dc.source = DATA_SOURCE_TEXT;
        dc.path = t->o.text;
    }
    if (st == F8_OK) st = data_create(&dc, &t->data, err, n);
    if (st == F8_OK && t->o.tokenizer && t->o.tokenizer[0]) {
        /* a file that is not a tokenizer is refused now, not after the run when it samples */
        tokenizer *tok = NULL;
        if (tokenizer_load(t->o.tokenizer, &tok, err, n) != 0) st = F8_ERR_INVALID_ARGUMENT;
        else if (data_vocab_size(t->data) > 256 && tokenizer_vocab(tok) < data_vocab_size(t->data)) {
            snprintf(err, n, "--tokenizer '%s' has %lld tokens, the data's ids go to %lld", t->o.tokenizer,
                     (long long)tokenizer_vocab(tok), (long long)data_vocab_size(t->data) - 1);
            st = F8_ERR_INVALID_ARGUMENT;
        }
        tokenizer_destroy(tok);
    }
    t->t_data = now_s() - mark, mark = now_s();
    if (st == F8_OK) {
        gpt_config c;
        const int cuda = f8_ctx_backend(t->ctx) == F8_BACKEND_CUDA;
        c.vocab = data_vocab_size(t->data);
        if (from_hf && c.vocab > hc.vocab) {
            snprintf(err, n, "the data has %lld token ids, the checkpoint's vocabulary only %lld", (long long)c.vocab, (long long)hc.vocab);
            st = F8_ERR_INVALID_ARGUMENT;
        }
        if (from_hf) c.vocab = hc.vocab; /* byte data fits GPT-2's vocabulary too */
        c.padded_vocab = (c.vocab + 127) / 128 * 128;
        c.seq = t->o.seq;
        c.layers = t->o.layers;
        c.heads = t->o.heads;
        c.channels = t->o.channels;
        c.batch = t->o.batch;
        c.fp8 = t->o.fp8;
        c.fp8_head = t->o.fp8_head;
        c.fp8_weights = t->o.fp8_weights;
        c.recompute_norm = t->o.recompute_norm;
        c.recompute_act = t->o.recompute_act;
        c.wt_per_call = t->o.weight_transpose_per_call;
        c.recompute_proj = t->o.recompute_proj_input;
        c.recompute_blocks = t->o.recompute_blocks == TRAIN_RECOMPUTE_ALL ? (int)c.layers : t->o.recompute_blocks;
        if (st == F8_OK && c.recompute_blocks > c.layers) {
            snprintf(err, n, "--recompute-blocks %d: the model has %lld blocks (on = all of them)",
                     c.recompute_blocks, (long long)c.layers);
            st = F8_ERR_INVALID_ARGUMENT;
        }
        c.fp8_attention = t->o.fp8_attention;
        c.head_chunk = t->o.head_chunk;
        c.llama = t->o.llama; /* the Llama family (llama.h) */
        c.kv_heads = t->o.kv_heads;
        c.ffn = t->o.ffn;
        c.untied = t->o.untied;
        c.rope_theta = t->o.rope_theta;
        c.rope_factor = t->o.rope_factor;
        /* every position of an imported GPT-2 (or of the checkpoint's model) is kept */
        c.positions = from_hf ? hc.positions : t->ck_positions;
        c.dtype = strcmp(t->o.dtype, "bf16") == 0 || (strcmp(t->o.dtype, "auto") == 0 && cuda) ? F8_DTYPE_BF16
                                                                                                 : F8_DTYPE_FP32;
        c.seed = t->o.seed;
        /* a model with the larger vocabulary (a fine-tuned GPT-2) resumes on byte data too, as --init-from took it */
        if (t->o.resume && t->o.resume[0] && t->ck_vocab > c.vocab && c.vocab <= 256) c.vocab = t->ck_vocab;
        c.padded_vocab = (c.vocab + 127) / 128 * 128;
        if (t->o.resume && t->o.resume[0] && t->ck_vocab != c.vocab) {
            snprintf(err, n, "the checkpoint's model has a vocabulary of %lld (train.vocab), the data %lld: resume with "
                             "the same kind of data", (long long)t->ck_vocab, (long long)c.vocab);
            st = F8_ERR_INVALID_ARGUMENT;
        }
        if (st == F8_OK && train_check_memory(&c, cuda, err, n) != 0) st = F8_ERR_OUT_OF_MEMORY;
        /* one GPU: a Llama that does not fit is refused by its memory plan (below, before anything is
         * allocated), which names the options that would make it fit */
        if (st == F8_OK && !c.llama && (t->o.kv_heads || t->o.ffn)) { /* the GPT presets leave both 0 */
            snprintf(err, n, "--kv-heads and --ffn shape a Llama: give a --model llama-* too");
            st = F8_ERR_INVALID_ARGUMENT;
        }
        /* planned where it is printed or checked: CUDA (the free memory), a limit, or a run that prints */
        if (st == F8_OK && (cuda || t->o.memory_limit > 0 || !t->o.quiet)) st = plan_memory(t, &c, cuda, err, n);
        if (st == F8_OK) st = gpt_create_tp(t->ctx, &c, t->tp_comm, t->o.sequence_parallel, &t->m, err, n);
        if (st == F8_OK && from_hf)
            st = c.llama ? hf_llama_import(&t->m, t->o.init_from, err, n) : hf_import(&t->m, t->o.init_from, err, n);
        t->use_graph = t->o.graph < 0 ? cuda : t->o.graph;
    }
    t->t_model = now_s() - mark, mark = now_s();
    f8_adamw_config ac = f8_adamw_config_default();
    ac.lr_max = t->o.lr;
    ac.lr_min = t->o.lr_min;
    /* a run shorter than its warmup warms up for a tenth of it instead */
    ac.warmup_steps = t->o.warmup < t->o.steps ? t->o.warmup : t->o.steps / 10;
    ac.total_steps = t->o.steps > ac.warmup_steps ? t->o.steps : 0;
    ac.weight_decay = t->o.weight_decay;
    ac.grad_clip = t->o.grad_clip;
    const char *mo = t->o.adam_moments ? t->o.adam_moments : "fp32";
    ac.moments = moments_of(mo);
    if (st == F8_OK && t->m.tp && ac.moments == F8_ADAMW_MOMENTS_FP8)
        st = train_fail(err, n, F8_ERR_UNSUPPORTED, "--adam-moments fp8: not with --tp (a shard's 128-value "
                        "blocks are not the whole tensor's, so the one-rank checkpoint cannot hold them)");
    if (st == F8_OK && t->comm) {
        /* with TP: ZeRO-1 over the DP group of this rank's parameters, the replicated ones on
         * TP rank 0 only; the gradient norm over every rank (tp.h) */
        const unsigned skip = t->m.tp_rank > 0 ? PARAM_REPLICATED : 0;
        st = dp_create(t->dp_comm ? t->dp_comm : t->comm, &t->m, skip, t->o.dp_overlap, &ac, &t->dp, err, n);
        if (st == F8_OK) t->opt = dp_optimizer(t->dp);
        if (st == F8_OK && t->tp_comm) st = f8_adamw_set_comm(t->opt, t->comm);
    } else if (st == F8_OK) {
        st = f8_adamw_create(t->ctx, &ac, &t->opt);
        if (st == F8_OK && t->m.c.fp8_weights) st = fp8w_create(&t->m, &t->fw);
        if (st == F8_OK) st = param_each(&t->m.params, 0, add_param, t);
    }
    t->M = t->o.grad_accum;
    t->T = t->m.T;
    f8_comm *dpc = t->dp_comm ? t->dp_comm : t->comm; /* the replicas split the microbatches */
    const int64_t world = dpc ? f8_comm_size(dpc) : 1;
    if (st == F8_OK && t->M % world != 0) {
        snprintf(err, n, "--grad-accum %lld does not split evenly over %lld ranks (each rank runs grad-accum / ranks "
                         "microbatches)", (long long)t->M, (long long)world);
        st = F8_ERR_INVALID_ARGUMENT;
    }
    t->Ml = t->M / world;
    t->mb0 = (dpc ? f8_comm_rank(dpc) : 0) * t->Ml;
    if (st == F8_OK) st = f8_ctx_alloc(t->ctx, (size_t)(t->Ml * 2 * t->T) * 4, (void **)&t->stage);
    if (st == F8_OK) st = f8_ctx_alloc(t->ctx, (size_t)(t->M * t->T) * 4, (void **)&t->losses);
    if (st == F8_OK) {
        t->host_stage = (int32_t *)malloc((size_t)(t->Ml * 2 * t->T) * 4 + 4);
        t->host_losses = (float *)malloc((size_t)(t->M * t->T) * 4 + 4);
        if (!t->host_stage || !t->host_losses) st = F8_ERR_OUT_OF_MEMORY;
    }
    if (st == F8_OK && t->o.resume && t->o.resume[0]) st = resume(t, t->o.resume);
    t->t_opt = now_s() - mark;
    if (st != F8_OK) {
        if (t->ctx && !err[0]) snprintf(err, n, "%s", t->error[0] ? t->error : f8_ctx_last_error(t->ctx));
        trainer_destroy(t);
        return st;
    }
    *out = t;
    return F8_OK;
}

void trainer_destroy(trainer *t)
{
    if (!t) return;
    f8_graph_destroy(t->graph);
    if (t->ctx) {
        f8_ctx_free(t->ctx, t->stage);
        f8_ctx_free(t->ctx, t->losses);
        if (t->dp) dp_destroy(t->dp);
        else f8_adamw_destroy(t->opt);
        fp8w_destroy(t->fw);
        gpt_destroy(&t->m);
        f8_comm_destroy(t->tp_comm);
        f8_comm_destroy(t->dp_comm);
        f8_comm_destroy(t->comm); /* peers still waiting in a collective fail instead of hanging */
        f8_ctx_destroy(t->ctx);
    }
    data_destroy(t->data);
    free(t->host_stage);
    free(t->host_losses);
    free(t);
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

/* ---- the run -------------------------------------------------------------------- */

static void fmt_time(char *b, size_t n, double s)
{
    if (s < 60) snprintf(b, n, "%.1fs", s);
    else if (s < 3600) snprintf(b, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(b, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* base without its extension (".csv", ".svg") + suffix; "" when base is empty. */
static void sibling_path(char *out, size_t n, const char *base, const char *suffix)
{
    out[0] = '\0';
    if (!base || !base[0]) return;
    size_t len = strlen(base);
    const char *dot = strrchr(base, '.'), *slash = strrchr(base, '/');
    if (dot && (!slash || dot > slash)) len = (size_t)(dot - base);
    snprintf(out, n, "%.*s%s", (int)len, base, suffix);
}

double train_gpu_peak_flops(const char *name)
{
    if (!name || strstr(name, "NVL")) return 0.0;
    if (strstr(name, "H200")) return 989.4e12;
    if (strstr(name, "H100") && strstr(name, "PCIe")) return 756.0e12;
    if (strstr(name, "H100") && (strstr(name, "HBM3") || strstr(name, "SXM"))) return 989.4e12;
    return 0.0;
}

int trainer_run(trainer *t)
{
    const train_options *o = &t->o;
    const int cuda = f8_ctx_backend(t->ctx) == F8_BACKEND_CUDA;
    char device[128] = "";
    if (cuda) (void)f8_ctx_device_name(t->ctx, device, sizeof device); /* once, before any step */
    const double peak = train_gpu_peak_flops(device); /* 0 on the CPU or an unknown GPU: no MFU */
    const double fpt = gpt_flops_per_token(&t->m);
    const int64_t tokens_per_step = t->M * t->T;
    char line[256], err[256];
    if (!o->quiet) {
        const f8_recipe_kind kind = f8_ctx_recipe(t->ctx)->kind;
        printf("f8_train: %s backend, %s%s%s, %s, graph %s\n", cuda ? "CUDA" : "CPU", o->fp8 ? "FP8" : "no FP8",
               o->fp8 && kind != F8_RECIPE_DELAYED ? " " : "",
               o->fp8 && kind != F8_RECIPE_DELAYED ? (kind == F8_RECIPE_CURRENT ? "current scaling"
                                                      : kind == F8_RECIPE_BLOCK   ? "block scaling"
                                                      : kind == F8_RECIPE_ROWWISE ? "row-wise scaling"
                                                                                  : "row-wise scaling, wgrad in high precision")
                                                   : "",
               f8_dtype_name(t->m.c.dtype), t->use_graph ? "on" : "off");
        if (t->m.c.fp8_attention) /* the option's cost, before anyone waits on it */
            printf("FP8 attention: forward in FP8%s\n",
                   cuda ? " on cuDNN's FP8 flash attention where cuDNN >= 9.19 is loaded (else f8's own FP8 kernel, about "
                          "35x slower than BF16 attention); backward BF16"
                        : "");
        if (cuda && peak <= 0) printf("MFU: unknown GPU (%s): no peak to measure against\n", device[0] ? device : "?");
        printf("model: %lld layers, %lld heads, %lld channels, seq %lld, vocab %lld: %.2fM parameters\n",
               (long long)t->m.c.layers, (long long)t->m.c.heads, (long long)t->m.c.channels, (long long)t->m.c.seq,
               (long long)t->m.c.vocab, (double)gpt_param_count(&t->m) / 1e6);
        if (t->m.c.llama) /* the family's own shape (llama.h) */
            printf("Llama: %lld key/value heads, SwiGLU %lld, RoPE theta %g%s, %s LM head\n", (long long)t->m.c.kv_heads,
                   (long long)t->m.c.ffn, t->m.c.rope_theta > 0 ? t->m.c.rope_theta : 500000.0,
                   t->m.c.rope_factor > 0 ? " (llama3 scaling)" : "", t->m.c.untied ? "untied" : "tied");
        printf("data: %s\n", data_describe(t->data));
        double h;
        if (data_unigram_entropy(t->data, DATA_SPLIT_TRAIN, 1 << 22, &h) == F8_OK)
            printf("unigram entropy of the training data: %.3f nats/token\n", h);
        printf("batch: %lld microbatches x %lld sequences x %lld tokens = %lld tokens/step\n", (long long)t->M,
               (long long)t->m.c.batch, (long long)t->m.c.seq, (long long)tokens_per_step);
        if (t->comm)
            printf("data parallel: %d ranks (%s), %lld microbatches each, ZeRO-1 sharded AdamW\n",
                   t->o.world / t->m.tp_size, cuda ? "NCCL" : "CPU threads", (long long)t->Ml);
        if (t->m.tp)
            printf("tensor parallel: %d ranks per replica, %lld heads and %lld MLP columns each%s\n", t->m.tp_size,
                   (long long)(t->m.c.heads / t->m.tp_size), (long long)t->m.Fl,
                   t->m.sp ? "; sequence parallel: the residual stream split by tokens" : "");
        char plan[512];
        mem_plan_format(&t->plan, plan, sizeof plan);
        printf("memory plan: %s\n", plan);
        printf("startup: device %.1f s, data %.1f s, model %.1f s, optimizer and state %.1f s\n", t->t_ctx, t->t_data,
               t->t_model, t->t_opt);
        fflush(stdout);
    }
    tlog *log = NULL;
    if (o->log && o->log[0] && tlog_create(o->log, t->step > 0, &log, err, sizeof err) != F8_OK) {
        fprintf(stderr, "f8_train: %s\n", err);
        return 1;
    }
    fp8_report *rep = NULL;
    char path[512];
    if (o->fp8_report && f8_ctx_telemetry_enabled(t->ctx)) {
        sibling_path(path, sizeof path, o->log, "_fp8.csv");
        if (fp8_report_create(t->ctx, &t->m, path, t->step > 0, &rep, err, sizeof err) != F8_OK) {
            fprintf(stderr, "f8_train: %s\n", err);
            tlog_destroy(log);
            return 1;
        }
    }
    double first = 0, last = 0, start = now_s(), t0 = start;
    int64_t n_first = 0, n_last = 0, first_step = t->step;
    const int64_t window = (o->steps - first_step) / 10 > 0 ? (o->steps - first_step) / 10 : 1;
    int rc = 0;
    while (t->step < o->steps) {
        double loss;
        double ts = now_s();
        f8_status st = trainer_step(t, &loss);
        if (st != F8_OK) {
            fprintf(stderr, "f8_train: step %lld failed: %s: %s\n", (long long)t->step, f8_status_string(st),
                    trainer_error(t));
            rc = 1;
            break;
        }
        double dt = now_s() - ts;
        if (t->step - first_step <= window) first += loss, n_first++;
        if (t->step > o->steps - window) last += loss, n_last++;
        tlog_row r = tlog_row_empty();
        r.step = t->step;
        r.tokens = t->step * tokens_per_step;
        r.train_loss = loss;
        r.ms_per_step = dt * 1e3;
        r.tokens_per_s = (double)tokens_per_step / dt;
        if (peak > 0) r.mfu = fpt * r.tokens_per_s / peak;
        r.peak_mem_mib = (double)trainer_peak_memory(t) / 1048576.0;
        int64_t done;
        float lr, gn;
        if (f8_adamw_read(t->opt, &done, &lr, &gn) == F8_OK) {
            r.lr = lr;
            r.grad_norm = gn;
        }
        if (o->val_every > 0 && (t->step % o->val_every == 0 || t->step == o->steps)) {
            double vl;
            if (trainer_eval(t, &vl) == F8_OK) r.val_loss = vl;
        }
        if (log) tlog_write(log, &r);
        if (rep && (st = fp8_report_step(rep, t->step)) != F8_OK)
            fprintf(stderr, "f8_train: FP8 telemetry: %s\n", f8_ctx_last_error(t->ctx));
        if (!o->quiet && (t->step % 10 == 0 || t->step == o->steps || t->step == first_step + 1 || !isnan(r.val_loss))) {
            double el = now_s() - t0, eta = el / (double)(t->step - first_step) * (double)(o->steps - t->step);
            tlog_progress(line, sizeof line, &r, o->steps, eta);
            printf("%s\n", line);
            fflush(stdout);
        }
        if (o->checkpoint && o->checkpoint[0] && o->checkpoint_every > 0 && t->step % o->checkpoint_every == 0 &&
            trainer_save(t, o->checkpoint) != F8_OK)
            fprintf(stderr, "f8_train: checkpoint '%s': %s\n", o->checkpoint, f8_ctx_last_error(t->ctx));
    }
    tlog_destroy(log);
    if (rep) {
        if (!rc) fp8_report_print(rep, stdout, 8);
        char csv[512];
        sibling_path(csv, sizeof csv, o->log, "_fp8.csv");
        sibling_path(path, sizeof path, o->plot, "_fp8.svg");
        if (!rc && path[0] && fp8_report_plot(rep, path, err, sizeof err) != F8_OK)
            fprintf(stderr, "f8_train: FP8 telemetry plot: %s\n", err);
        else if (!rc && !o->quiet && (csv[0] || path[0]))
            printf("FP8 telemetry: %s%s%s\n", csv, csv[0] && path[0] ? ", " : "", path);
        fp8_report_destroy(rep);
    }
    if (rc) return rc;
    char el[48];
    fmt_time(el, 32, now_s() - start);
    /* the run's memory joins its time in the final line: "done in 1m02s, peak memory 2.41 GiB" */
    const double peak_mib = (double)trainer_peak_memory(t) / 1048576.0;
    snprintf(el + strlen(el), sizeof el - strlen(el), ", peak memory %.*f %s", peak_mib < 1024 ? 1 : 2,
             peak_mib < 1024 ? peak_mib : peak_mib / 1024, peak_mib < 1024 ? "MiB" : "GiB");
    if (o->checkpoint && o->checkpoint[0]) {
        if (trainer_save(t, o->checkpoint) != F8_OK) {
            fprintf(stderr, "f8_train: checkpoint '%s': %s\n", o->checkpoint, f8_ctx_last_error(t->ctx));
            return 1;
        }
        if (!o->quiet) printf("checkpoint: %s (step %lld)\n", o->checkpoint, (long long)t->step);
    }
    /* rank 0 reports the run; with TP every rank samples (the forward's collectives), rank 0 prints */
    if (t->o.rank > 0 && !t->m.tp) return 0;
    const int say = t->o.rank == 0;
    if (say && o->plot && o->plot[0] && o->log && o->log[0]) {
        const char *paths[5], *names[5];
        paths[0] = o->log;
        names[0] = o->fp8 ? "FP8" : "BF16";
        for (int i = 0; i < o->n_compare; i++) paths[i + 1] = names[i + 1] = o->compare[i];
        plot_config pc = plot_config_default();
        if (plot_logs_svg(o->plot, &pc, paths, names, 1 + o->n_compare, err, sizeof err) != F8_OK)
            fprintf(stderr, "f8_train: plot: %s\n", err);
        else if (!o->quiet) printf("plot: %s\n", o->plot);
    }
    if (o->sample > 0 && t->m.c.vocab > 256 && o->tokenizer && o->tokenizer[0]) {
        char *text = NULL;
        if (trainer_sample_text(t, o->tokenizer, o->sample, o->temperature, o->seed, &text) == F8_OK) {
            if (say) {
                printf("sample:\n");
                tlog_print_text(stdout, text);
                printf("\n");
            }
        } else {
            fprintf(stderr, "f8_train: sample: %s\n", trainer_error(t));
        }
        free(text);
    } else if (o->sample > 0 && t->m.c.vocab <= 256) {
        char *text = (char *)malloc((size_t)o->sample + 1);
        if (text && trainer_sample(t, o->prompt, o->sample, o->temperature, o->seed, text) == F8_OK && say) {
            printf("sample:\n");
            tlog_print_text(stdout, o->prompt ? o->prompt : "");
            tlog_print_text(stdout, text);
            printf("\n");
        }
        free(text);
    }
    if (!say) return 0;
    if (o->steps - first_step < 2) {
        /* one step has nothing to compare its loss with: not a success */
        printf("done in %s: trained %lld step%s: too few to tell whether the loss fell (2 are needed; exit status 3)\n",
               el, (long long)(o->steps - first_step), o->steps - first_step == 1 ? "" : "s");
        return 3;
    }
    if (n_first && n_last) {
        first /= (double)n_first;
        last /= (double)n_last;
        printf("done in %s: mean loss %.4f over the first %lld steps, %.4f over the last %lld: %s\n", el, first,
               (long long)n_first, last, (long long)n_last, last < first ? "loss fell: OK" : "loss did NOT fall");
        if (!(last < first)) return 2;
    }
    return 0;
}
