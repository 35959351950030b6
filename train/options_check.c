/*
 * options_check.c — f8_train's refusals (options.h): options that contradict
 * each other (train_check_conflicts, run by train_parse_args), each feature's
 * conditions against the rest (trainer_create runs them again for a trainer
 * made in code and for the options a --resume checkpoint sets), and the run's
 * preconditions: --checkpoint writable, the model's memory bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tp.h"
#include "llama.h"
#include "options.h"

int train_check_tp(const train_options *o, char *err, size_t n)
{
    const int64_t ranks = o->ranks > 0 ? o->ranks : o->gpus;
    if (o->tp < 1) return snprintf(err, n, "--tp %lld: at least 1", (long long)o->tp), -1;
    if (o->sequence_parallel && tp_check_sp(o->seq, o->tp, err, n) != 0) return -1;
    if (o->tp == 1) return 0;
    if (ranks <= 0) {
        snprintf(err, n, "--tp %lld needs --ranks N or --gpus N with N a multiple of it", (long long)o->tp);
        return -1;
    }
    if (ranks % o->tp != 0) {
        snprintf(err, n, "--tp %lld does not divide the %lld ranks (data parallel = ranks / tp)", (long long)o->tp,
                 (long long)ranks);
        return -1;
    }
    if (o->grad_accum % (ranks / o->tp) != 0) {
        snprintf(err, n, "--grad-accum %lld does not split evenly over %lld data-parallel replicas", (long long)o->grad_accum,
                 (long long)(ranks / o->tp));
        return -1;
    }
    if (o->init_from && o->init_from[0]) {
        snprintf(err, n, "--init-from with --tp %lld is not supported (the GPT-2 import writes whole modules): import "
                         "with one rank, checkpoint, then --resume with --tp", (long long)o->tp);
        return -1;
    }
    if (o->dp_overlap) {
        snprintf(err, n, "--dp-overlap with --tp %lld is not supported (the LayerNorm gradients are reduced over the "
                         "tensor-parallel group after the backward)", (long long)o->tp);
        return -1;
    }
    const int64_t kv = o->kv_heads > 0 ? o->kv_heads : o->heads;
    if (o->llama && (o->heads % o->tp != 0 || kv % o->tp != 0 || o->ffn % o->tp != 0)) {
        snprintf(err, n, "--tp %lld: the llama's %lld heads, %lld key/value heads and SwiGLU width %lld (--ffn) must "
                 "divide by it", (long long)o->tp, (long long)o->heads, (long long)kv, (long long)o->ffn);
        return -1;
    }
    if (!o->llama && (o->heads % o->tp != 0 || (4 * o->channels) % o->tp != 0)) {
        snprintf(err, n, "--tp %lld: the %lld heads and the MLP width %lld (4 x channels) must divide by it",
                 (long long)o->tp, (long long)o->heads, (long long)(4 * o->channels));
        return -1;
    }
    return 0;
}

int train_check_fp8_weights(const train_options *o, const char *recipe, char *err, size_t n)
{
    const int64_t ranks = o->ranks > 0 ? o->ranks : o->gpus > 0 ? o->gpus : o->world;
    const char *why = NULL;
    if (!o->fp8_weights) return 0;
    if (!o->fp8) why = "needs --fp8 on (an FP8 primary weight is only read by FP8 GEMMs)";
    else if (recipe && strcmp(recipe, "block") == 0)
        why = "is not supported with --recipe block (a block-scaled primary weight would carry a scale per 128x128 "
              "block through the optimizer and checkpoints; the modules refuse it)";
    else if (recipe && strncmp(recipe, "rowwise", 7) == 0)
        why = "is not supported with --recipe rowwise or rowwise_with_gw_hp (a row-scaled primary weight would carry a scale per output "
              "channel through the optimizer and checkpoints, and dgrad's per-input-channel copy needs the "
              "high-precision weight; the modules refuse it)";
    else if (o->tp > 1) why = "is not supported with --tp (the tensor-parallel shards are made from high-precision weights)";
    else if (o->init_from && o->init_from[0])
        why = "is not supported with --init-from (the masters would not hold the imported weights)";
    else if (ranks > 1 && recipe && strcmp(recipe, "current") == 0)
        why = "with data parallel ranks needs --recipe delayed (current scaling takes the scale from the whole "
              "weight's amax at the cast; a rank casts only its shard)";
    if (why) snprintf(err, n, "--fp8-weights on %s", why);
    return why ? -1 : 0;
}

int train_check_recompute_norm(const train_options *o, const char *recipe, char *err, size_t n)
{
    const char *why = NULL;
    const int blocked = o->fp8 && recipe && (strcmp(recipe, "block") == 0 || strncmp(recipe, "rowwise", 7) == 0);
    if (o->recompute_act && blocked) { /* --recompute-act: the same test, its own words */
        snprintf(err, n, "--recompute-act on is not supported with --recipe %s (the column-wise copy of the "
                 "activation output is quantized from its high-precision values, not kept; the modules refuse it)",
                 recipe);
        return -1;
    }
    if (o->recompute_proj_input && blocked) {
        snprintf(err, n, "--recompute-proj-input on is not supported with --recipe %s (its column-wise copy of the "
                 "input is quantized on its own, not a transpose; the modules refuse it)", recipe);
        return -1;
    }
    if (o->weight_transpose_per_call && blocked) {
        snprintf(err, n, "--weight-transpose-per-call on is not supported with --recipe %s (its weights quantize "
                 "the transposed copy on its own, not as a transpose; the modules refuse it)", recipe);
        return -1;
    }
    if (!o->recompute_norm) return 0;
    if (o->sequence_parallel)
        why = "is not supported with --sequence-parallel (the norm output is gathered over the group; the modules "
              "refuse it)";
    else if (blocked)
        why = recipe[0] == 'b' ? "is not supported with --recipe block (its column-wise copy of the norm output is not "
                                 "recomputed; the modules refuse it)"
                               : "is not supported with --recipe rowwise or rowwise_with_gw_hp (the saved column-wise "
                                 "copy or high-precision norm output is not recomputed; the modules refuse it)";
    if (why) snprintf(err, n, "--recompute-norm on %s", why);
    return why ? -1 : 0;
}

int train_check_recompute_blocks(const train_options *o, char *err, size_t n)
{
    const char *why = NULL;
    if (!o->recompute_blocks) return 0;
    if (o->tp > 1 || o->sequence_parallel)
        why = "is not yet for --tp or --sequence-parallel (the blocks' all-reduces would run again)";
    else if (o->fp8_report)
        why = "is not with --fp8-report (the recomputed casts would count their saturated and flushed values again)";
    if (why) snprintf(err, n, "--recompute-blocks %s", why);
    return why ? -1 : 0;
}

int train_check_fp8_attention(const train_options *o, const char *recipe, char *err, size_t n)
{
    const char *why = NULL;
    if (o->fp8_attention_backward && !o->fp8_attention) {
        snprintf(err, n, "--fp8-attention-backward on needs --fp8-attention on (the FP8 backward takes the "
                         "forward's FP8 codes and scales)");
        return -1;
    }
    if (!o->fp8_attention) return 0;
    if (!o->fp8)
        why = "needs --fp8 on (FP8 attention with BF16 GEMMs around it is not a configuration)";
    else if (recipe && strcmp(recipe, "delayed") != 0 && strcmp(recipe, "current") != 0)
        why = "needs --recipe delayed or current (block and row-wise scaling have no fused FP8 attention: one "
              "scale per block or row does not fit the fused graph's per-tensor Q, K, V, P and O)";
    else if (strcmp(o->dtype, "fp32") == 0)
        why = "needs bf16 activations (--dtype bf16, or auto on a GPU)";
    if (why) snprintf(err, n, "--fp8-attention on %s", why);
    return why ? -1 : 0;
}

/* Options that contradict each other, refused rather than resolved silently. */
int train_check_conflicts(const train_options *o, char *err, size_t n)
{
    if (o->ranks > 0 && o->gpus > 0) {
        snprintf(err, n, "--ranks (CPU ranks) and --gpus both given: choose one");
        return -1;
    }
    if (o->fp8_head && !o->fp8) {
        snprintf(err, n, "--fp8-head on needs --fp8 on (the head in FP8 and the blocks not is not a configuration)");
        return -1;
    }
    if (o->fp8_weights && train_check_fp8_weights(o, o->recipe, err, n) != 0) return -1;
    if (train_check_recompute_norm(o, o->recipe, err, n) != 0) return -1;
    if (train_check_recompute_blocks(o, err, n) != 0) return -1;
    if (train_check_fp8_attention(o, o->recipe, err, n) != 0) return -1;
    if (o->adam_moments && strcmp(o->adam_moments, "fp8") == 0 && o->tp > 1) {
        snprintf(err, n, "--adam-moments fp8: not with --tp (a shard's 128-value blocks are not the whole "
                         "tensor's, so the one-rank checkpoint cannot hold them): use bf16 or leave out --tp");
        return -1;
    }
    const int64_t ranks = o->ranks > 0 ? o->ranks : o->gpus;
    if ((o->tp > 1 || o->sequence_parallel) && train_check_tp(o, err, n) != 0) return -1;
    if (o->tp <= 1 && ranks > 0 && o->grad_accum % ranks != 0) {
        snprintf(err, n, "--grad-accum %lld does not split evenly over %lld ranks (each rank runs grad-accum / ranks "
                         "microbatches)", (long long)o->grad_accum, (long long)ranks);
        return -1;
    }
    static const char *const names[3] = {"--text", "--data", "--val-data"};
    const char *vals[3] = {o->text, o->data, o->val_data};
    for (int i = 0; i < 3; i++)
        if (vals[i] && !vals[i][0]) {
            snprintf(err, n, "%s \"\": an empty path (leave the option out for the default data)", names[i]);
            return -1;
        }
    if (o->text && o->data) {
        snprintf(err, n, "--text and --data both given: choose one data source");
        return -1;
    }
    if (o->val_data && !o->data) {
        snprintf(err, n, "--val-data needs --data (validation shards go with training shards; --text holds out "
                         "its last 10%%)");
        return -1;
    }
    if (o->resume && !o->resume[0]) {
        snprintf(err, n, "--resume \"\": an empty path");
        return -1;
    }
    if (o->init_from && (!o->init_from[0] || o->resume)) {
        snprintf(err, n, o->resume ? "--init-from and --resume both given: a resumed run has its own weights"
                                   : "--init-from \"\": an empty path");
        return -1;
    }
    if (o->channels % o->heads) {
        snprintf(err, n, "--channels %lld must be a multiple of --heads %lld", (long long)o->channels, (long long)o->heads);
        return -1;
    }
    return 0;
}

/* ---- run preconditions (trainer_create) ------------------------------------ */

/* --checkpoint must be writable before the run, not after it: create (and
 * remove) the temporary f8_checkpoint_save would write next to it. */
int train_check_writable(const char *path, char *err, size_t n)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(err, n, "--checkpoint '%s' is a directory (give a file name)", path);
        return -1;
    }
    size_t len = strlen(path) + 32;
    char *tmp = (char *)malloc(len);
    if (!tmp) return snprintf(err, n, "out of memory"), -1;
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    } else
        snprintf(err, n, "--checkpoint '%s': cannot create files there: %s (checked before training)", path,
                 strerror(e));
    free(tmp);
    return fd >= 0 ? 0 : -1;
}

/* A bound on the model's memory before it is made: parameters with their
 * gradients and the two AdamW moments, the FP8 weight workspaces, and the
 * activation buffers gpt_create allocates (the modules' saved activations
 * come on top). On the CPU it must fit the machine's memory; anywhere it
 * must fit 1 TiB (a checkpoint's metadata is untrusted: this stops
 * train.layers = 1000000 before anything is allocated). */
int train_check_memory(const gpt_config *c, int cuda, char *err, size_t n)
{
    const double C = (double)c->channels, L = (double)c->layers, S = (double)c->seq, Vp = (double)c->padded_vocab;
    const double P = (double)gpt_positions(c); /* wpe's rows */
    const double T = (double)c->batch * S, es = (double)f8_dtype_size(c->dtype);
    const double block = 12 * C * C + 13 * C;
    double params = L * block + Vp * C + P * C + 2 * C;
    /* the logits buffer: one LM-head pass (gpt_create's head_rows) */
    const double head = (double)gpt_head_rows(c, 0);
    const double acts = T * ((2 * L + 1) * C + 3 * L * C + L * C + 5 * C) * es + head * Vp * es + T * 12;
    double bytes = params * (2 * es + 8) + (c->fp8 ? L * 12 * C * C * 2 : 0) + acts;
    if (c->llama) bytes = llama_bytes_estimate(c), params = llama_param_estimate(c); /* llama.h */
    double limit = 1099511627776.0;
    const char *what = "the 1 TiB sanity bound";
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (!cuda && pages > 0 && page > 0 && (double)pages * (double)page < limit) {
        limit = (double)pages * (double)page;
        what = "this machine's memory";
    }
    if (bytes > limit) {
        snprintf(err, n, "the model (%lld layers, %lld channels, seq %lld, batch %lld, vocab %lld: %.3g parameters) "
                         "needs at least %.1f GiB, more than %s (%.1f GiB)", (long long)c->layers,
                 (long long)c->channels, (long long)c->seq, (long long)c->batch, (long long)c->vocab, params,
                 bytes / 1073741824.0, what, limit / 1073741824.0);
        return -1;
    }
    return 0;
}
