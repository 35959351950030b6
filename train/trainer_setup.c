/*
 * trainer_setup.c — making a training run (trainer_create, trainer_destroy;
 * trainer.h): the options' last checks, the context and its communicators,
 * the data, the model (new, imported with --init-from, or the shape of a
 * --resume checkpoint), the memory plan, the optimizer, the step's buffers.
 *
 * Resume: a checkpoint holds the model (parameters and FP8 scaling state,
 * the FP8 attentions' slots included), the optimizer (moments, step) and the
 * step count; batches are a pure function of (seed, step, microbatch), so a
 * resumed run is bitwise the uninterrupted one. A checkpoint is untrusted
 * input: its metadata is parsed strictly and its shape bounded
 * (train_options_from_metadata) before anything is allocated, the model's
 * memory is estimated against the machine's before it is created, and every
 * tensor's values are checked (finite; scales > 0; amaxes and second moments
 * >= 0) before any is restored. Checksums (f8_checkpoint_load) catch
 * corruption on the way.
 */
#include <stdlib.h>
#include <string.h>

#include "dp.h"
#include "fp8w.h"
#include "hf.h"
#include "tokenizer.h"
#include "tp.h"
#include "trainer.h"
#include "hf_llama.h"
#include "llama.h"
#include "try.h"

/* ---- a --resume checkpoint ---------------------------------------------------- */

/* With TP: the one-rank layout's optimizer reshaped into ZeRO-1's (the
 * reverse of trainer.c's tp_optimizer_save). */
static f8_status tp_optimizer_load(trainer *t, const f8_checkpoint *ck)
{
    f8_checkpoint *local = NULL;
    f8_status st = f8_checkpoint_create(t->ctx, &local);
    if (st == F8_OK) st = tp_optimizer_restore(&t->m, ck, "optimizer", local, t->error, sizeof t->error);
    if (st == F8_OK) st = dp_checkpoint_restore(t->dp, local, "local", t->error, sizeof t->error);
    f8_checkpoint_destroy(local);
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
    const int has_att_bwd = f8_checkpoint_has(ck, "model.h.0.attn.fp8.bwd.amax_history");
    if (has_att_bwd != t->o.fp8_attention_backward) {
        snprintf(err, n, "train.fp8_attention_backward = %d but the checkpoint %s FP8 attention backward state "
                         "(model.h.0.attn.fp8.bwd.*): the metadata does not match the tensors",
                 t->o.fp8_attention_backward, has_att_bwd ? "holds" : "has no");
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
    if (st == F8_OK && t->o.gemm_tune) st = f8_ctx_set_gemm_tune(t->ctx, 1);
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

/* An OPT_BLOCKS option's value (options.h) as a block count: on is every
 * one of the model's layers. */
static int blocks_of(int value, int64_t layers) { return value == TRAIN_RECOMPUTE_ALL ? (int)layers : value; }

/* st, or (st F8_OK) the error of option opt asking for more blocks than the
 * model's layers; the first error of trainer_create is the one it reports. */
static f8_status blocks_check(f8_status st, const char *opt, int blocks, int64_t layers, char *err, size_t n)
{
    if (st != F8_OK || blocks <= layers) return st;
    snprintf(err, n, "%s %d: the model has %lld blocks (on = all of them)", opt, blocks, (long long)layers);
    return F8_ERR_INVALID_ARGUMENT;
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
    double mark = tlog_now_s();
    if (st == F8_OK) st = make_ctx(t, err, n);
    t->t_ctx = tlog_now_s() - mark, mark = tlog_now_s();
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
    t->t_data = tlog_now_s() - mark, mark = tlog_now_s();
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
        c.recompute_blocks = blocks_of(t->o.recompute_blocks, c.layers);
        st = blocks_check(st, "--recompute-blocks", c.recompute_blocks, c.layers, err, n);
        c.fp8_attention = t->o.fp8_attention;
        c.fp8_attention_backward = t->o.fp8_attention_backward;
        c.recompute_act = t->o.recompute_act;
        c.wt_per_call = blocks_of(t->o.weight_transpose_per_call, c.layers);
        st = blocks_check(st, "--weight-transpose-per-call", c.wt_per_call, c.layers, err, n);
        c.recompute_proj = t->o.recompute_proj_input;
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
        /* --grad-dtype: fp32 beside BF16 parameters keeps FP32 main grads (model.h); fp32 beside FP32
         * parameters is what they have anyway */
        const char *gd = t->o.grad_dtype ? t->o.grad_dtype : "auto";
        c.grad_fp32 = strcmp(gd, "fp32") == 0 && c.dtype == F8_DTYPE_BF16;
        if (st == F8_OK && c.fp8_attention && c.dtype != F8_DTYPE_BF16) { /* --dtype auto resolved to fp32 */
            snprintf(err, n, "--fp8-attention on needs bf16 activations (--dtype bf16, or auto on a GPU; auto is fp32 "
                             "on the CPU)");
            st = F8_ERR_INVALID_ARGUMENT;
        }
        if (st == F8_OK && strcmp(gd, "bf16") == 0 && c.dtype != F8_DTYPE_BF16) {
            snprintf(err, n, "--grad-dtype bf16 needs bf16 parameters (--dtype bf16, or auto on a GPU): f8 keeps no "
                             "BF16 gradients beside FP32 parameters");
            st = F8_ERR_INVALID_ARGUMENT;
        }
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
    t->t_model = tlog_now_s() - mark, mark = tlog_now_s();
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
    t->t_opt = tlog_now_s() - mark;
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
