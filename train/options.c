/*
 * options.c — f8_train's command line: defaults, presets, parsing, --help.
 * Every option is listed in train_print_help with its default.
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parse.h"
#include "tp.h"
#include "llama.h"
#include "options.h"

typedef struct preset {
    const char *name;
    int64_t layers, heads, channels, seq, batch, grad_accum;
    float lr;
    const char *what;
} preset;

/* A Llama preset (llama.h): its shape as a preset's, and the family's own. */
typedef struct llama_preset {
    preset p;
    int64_t kv_heads, ffn;
    int untied;
    double rope_theta, rope_factor;
} llama_preset;

static const preset PRESETS[] = {
    {"tiny", 4, 4, 128, 64, 4, 2, 3e-3f, "0.8M parameters with byte data; the default (CPU: about 2 minutes)"},
    {"small", 6, 6, 384, 256, 16, 1, 1e-3f, "11M (bytes)"},
    {"50M", 10, 10, 640, 512, 16, 1, 6e-4f, "49M (bytes), 82M with GPT-2 tokens"},
    /* The GPU presets step on 64K tokens: microbatch 64 as llm.c trains
     * GPT-2 small; the 1.3B model accumulates 8 microbatches of 8, so the
     * optimizer and the FP8 weight casts (first microbatch) are spread over
     * as many tokens (real runs step on 0.5M-1M tokens: raise --grad-accum). */
    {"124M", 12, 12, 768, 1024, 64, 1, 6e-4f, "GPT-2 small: 124M with GPT-2 tokens"},
    {"350M", 24, 16, 1024, 1024, 8, 1, 3e-4f, "GPT-2 medium"},
    {"1.3B", 24, 16, 2048, 1024, 8, 8, 2e-4f, "1.3B (d 2048, 24 layers, 16 heads, seq 1024)"},
};

/* Llama 3 shapes (RMSNorm, RoPE theta 5e5 with the llama3 scaling, GQA,
 * SwiGLU); the vocabulary comes from the data (llm.c's Llama 3 shards: 128256). */
static const llama_preset LLAMA_PRESETS[] = {
    {{"llama-tiny", 4, 4, 128, 64, 4, 2, 3e-3f, "a small Llama (2 KV heads, FFN 384, tied) for CPU runs"}, 2, 384, 0,
     10000.0, 0},
    {{"llama-1B", 16, 32, 2048, 2048, 8, 4, 3e-4f, "Llama 3.2 1B's shape (8 KV heads, FFN 8192, tied)"}, 8, 8192, 0,
     500000.0, 32.0},
    {{"llama-3B", 28, 24, 3072, 2048, 4, 8, 3e-4f, "Llama 3.2 3B's shape (8 KV heads, FFN 8192, tied)"}, 8, 8192, 0,
     500000.0, 32.0},
    {{"llama-8B", 32, 32, 4096, 2048, 2, 16, 3e-4f, "Llama 3.1 8B's shape (8 KV heads, FFN 14336, untied; several GPUs)"},
     8, 14336, 1, 500000.0, 8.0},
};

static const preset *find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    for (size_t i = 0; i < sizeof LLAMA_PRESETS / sizeof LLAMA_PRESETS[0]; i++)
        if (strcmp(LLAMA_PRESETS[i].p.name, name) == 0) return &LLAMA_PRESETS[i].p;
    return NULL;
}

static void apply_preset(train_options *o, const preset *p)
{
    o->model = p->name;
    o->layers = p->layers;
    o->heads = p->heads;
    o->channels = p->channels;
    o->seq = p->seq;
    o->batch = p->batch;
    o->grad_accum = p->grad_accum;
    o->lr = p->lr;
    o->lr_min = p->lr / 10;
    /* a Llama preset's own fields (p is then the first member of its llama_preset) */
    const llama_preset *lp = NULL;
    for (size_t i = 0; i < sizeof LLAMA_PRESETS / sizeof LLAMA_PRESETS[0]; i++)
        if (p == &LLAMA_PRESETS[i].p) lp = &LLAMA_PRESETS[i];
    o->llama = lp != NULL;
    o->kv_heads = lp ? lp->kv_heads : 0;
    o->ffn = lp ? lp->ffn : 0;
    o->untied = lp ? lp->untied : 0;
    o->rope_theta = lp ? lp->rope_theta : 0;
    o->rope_factor = lp ? lp->rope_factor : 0;
}

train_options train_options_default(void)
{
    train_options o;
    memset(&o, 0, sizeof o);
    o.backend = "auto";
    o.fp8 = 1;
    o.dtype = "auto";
    o.attention = "auto";
    o.attention_deterministic = 1;
    apply_preset(&o, &PRESETS[0]);
    o.steps = 200;
    o.warmup = 20;
    o.weight_decay = 0.1f;
    o.grad_clip = 1.0f;
    o.seed = 1;
    o.val_every = 50;
    o.val_batches = 8;
    o.log = "f8_train.csv";
    o.plot = "f8_train.svg";
    o.checkpoint = "";
    o.checkpoint_every = 0;
    o.graph = -1;
    o.tp = 1;
    o.sample = 120;
    o.temperature = 0.8f;
    o.prompt = "";
    return o;
}


/* --name value, through the one parser (parse.h); err names the option. */
static int opt_i64(const char *a, const char *v, int64_t lo, int64_t hi, int64_t *out, char *err, size_t n)
{
    return parse_int(a, v, lo, hi, out, err, n);
}

static int opt_f(const char *a, const char *v, double lo, double hi, float *out, char *err, size_t n)
{
    double d;
    if (parse_real(a, v, lo, hi, &d, err, n) != 0) return -1;
    *out = (float)d;
    return 0;
}

/* One of a fixed set of words. */
static int opt_word(const char *a, const char *v, const char *const *words, int count, int *index, char *err, size_t n)
{
    for (int i = 0; i < count; i++)
        if (strcmp(v, words[i]) == 0) return *index = i, 0;
    int k = snprintf(err, n, "%s = '%.40s': expected", a, v);
    for (int i = 0; i < count && k > 0 && (size_t)k < n; i++)
        k += snprintf(err + k, n - (size_t)k, "%s%s", i ? (i + 1 == count ? " or " : ", ") : " ", words[i]);
    return -1;
}

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
    if (!o->fp8_attention) return 0;
    if (!o->fp8)
        why = "needs --fp8 on (FP8 attention with BF16 GEMMs around it is not a configuration)";
    else if (recipe && strcmp(recipe, "delayed") != 0)
        why = "needs --recipe delayed (the attention's S and O scales come from the amax history: current and "
              "block and row-wise scaling have no tensor to measure before the fused graph casts them)";
    else if (strcmp(o->dtype, "fp32") == 0)
        why = "needs bf16 activations (--dtype bf16, or auto on a GPU)";
    if (why) snprintf(err, n, "--fp8-attention on %s", why);
    return why ? -1 : 0;
}

/* Options that contradict each other, refused rather than resolved silently. */
static int check_conflicts(const train_options *o, char *err, size_t n)
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

/* ---- the option table ----------------------------------------------------------- */

static const char *const ON_OFF[2] = {"off", "on"}, *const GRAPH_WORDS[3] = {"off", "on", "auto"};
static const char *const BACKENDS[3] = {"auto", "cpu", "cuda"}, *const DTYPES[3] = {"auto", "fp32", "bf16"};
static const char *const RECIPES[5] = {"delayed", "current", "block", "rowwise", "rowwise_with_gw_hp"};
static const char *const ATTENTION_PATHS[2] = {"auto", "own"}, *const MOMENTS[3] = {"fp32", "bf16", "fp8"};

#define F(field) offsetof(train_options, field)
#define BIG ((double)TRAIN_MAX_STEPS)
#define WORDS(w) w, (int)(sizeof w / sizeof w[0])
/* Every option of the command line, in --help's order. The model options
 * name the train.* metadata key a --resume checkpoint records them under. */
static const train_option_def OPTIONS[] = {
    {"--model", NULL, OPT_MODEL, 0, 0, 0, NULL, 0, NULL,
     "\n"
     "Model and precision\n",
     "  --model NAME         preset: tiny, small, 50M, 124M, 350M, 1.3B, llama-tiny, llama-1B, llama-3B,\n"
     "                       llama-8B (default {model})\n"},
    {"--layers", NULL, OPT_INT, F(layers), 1, TRAIN_MAX_LAYERS, NULL, 0, "train.layers",
     NULL,
     "  --layers N --heads N --channels N --seq N   override the preset (default {layers}, {heads}, {channels}, {seq})\n"},
    {"--heads", NULL, OPT_INT, F(heads), 1, TRAIN_MAX_HEADS, NULL, 0, "train.heads", NULL, NULL},
    {"--channels", NULL, OPT_INT, F(channels), 1, TRAIN_MAX_CHANNELS, NULL, 0, "train.channels", NULL, NULL},
    {"--seq", NULL, OPT_INT, F(seq), 2, TRAIN_MAX_SEQ, NULL, 0, "train.seq", NULL, NULL},
    {"--kv-heads", NULL, OPT_INT, F(kv_heads), 1, TRAIN_MAX_HEADS, NULL, 0, NULL, NULL,
     "  --kv-heads N --ffn N   a llama-* preset's key/value heads (dividing --heads) and SwiGLU width\n"},
    {"--ffn", NULL, OPT_INT, F(ffn), 1, 1 << 23, NULL, 0, NULL, NULL, NULL},
    {"--fp8", NULL, OPT_ON_OFF, F(fp8), 0, 0, WORDS(ON_OFF), "train.fp8",
     NULL,
     "  --fp8 on|off         FP8 GEMMs in the blocks; off = BF16 on the GPU, FP32 on the CPU (default on)\n"},
    {"--fp8-head", NULL, OPT_ON_OFF, F(fp8_head), 0, 0, WORDS(ON_OFF), "train.fp8_head",
     NULL,
     "  --fp8-head on|off    the LM head's GEMMs in FP8 too (default off: high precision, as TE keeps it;\n"
     "                       needs --fp8 on; on --resume the checkpoint's)\n"},
    {"--fp8-weights", NULL, OPT_ON_OFF, F(fp8_weights), 0, 0, WORDS(ON_OFF), "train.fp8_weights",
     NULL,
     "  --fp8-weights on|off the blocks' weights kept only in FP8 (TE's fp8_model_init): AdamW steps FP32\n"
     "                       masters and writes them back as FP8 codes; with --ranks/--gpus the masters\n"
     "                       are sharded and the all-gather moves 1 byte per weight (default off; needs\n"
     "                       --fp8 on, not --recipe block or --tp; on --resume the checkpoint's)\n"},
    {"--recompute-norm", NULL, OPT_ON_OFF, F(recompute_norm), 0, 0, WORDS(ON_OFF), NULL,
     NULL,
     "  --recompute-norm on|off  make the norm outputs of qkv and the MLP again in backward instead of\n"
     "                       saving them: 2 x tokens x channels bytes less per layer in FP8, one more\n"
     "                       norm forward each; bitwise the same (default off; not with\n"
     "                       --sequence-parallel or --recipe block)\n"},
    {"--recompute-act", NULL, OPT_ON_OFF, F(recompute_act), 0, 0, WORDS(ON_OFF), NULL,
     NULL,
     "  --recompute-act on|off  make the MLP's activation output (fc2's input) again in backward from the\n"
     "                       saved pre-activation instead of saving it: 4 x tokens x channels bytes less\n"
     "                       per layer in FP8 (GPT; Llama: tokens x ffn), one more activation pass each,\n"
     "                       no GEMM; bitwise the same (default off; not with --recipe block or rowwise)\n"},
    {"--recompute-proj-input", NULL, OPT_ON_OFF, F(recompute_proj_input), 0, 0, WORDS(ON_OFF), NULL,
     NULL,
     "  --recompute-proj-input on|off  cast the attention projection's input (the attention output,\n"
     "                       which the step keeps) to FP8 again in backward instead of saving its codes:\n"
     "                       tokens x channels bytes less per layer, one more cast each; bitwise the same\n"
     "                       (default off; not with --recipe block or rowwise)\n"},
    {"--weight-transpose-per-call", NULL, OPT_ON_OFF, F(weight_transpose_per_call), 0, 0, WORDS(ON_OFF), NULL,
     NULL,
     "  --weight-transpose-per-call on|off  keep no transposed copy of the FP8 weights (the dgrad's\n"
     "                       operand, a byte a weight: 1.13 GiB at 1.3B); each backward transposes the\n"
     "                       codes into its workspace instead, a read and a write of a byte a weight;\n"
     "                       bitwise the same (default off; not with --recipe block or rowwise)\n"},
    {"--recompute-blocks", NULL, OPT_BLOCKS, F(recompute_blocks), 0, TRAIN_MAX_LAYERS, WORDS(ON_OFF), NULL,
     NULL,
     "  --recompute-blocks N|on|off  keep only the input of the first N blocks and run their forward\n"
     "                       again in the backward (the last of them keeps its activations: it ran\n"
     "                       last); the rest keep theirs. on = every block: the activations of one\n"
     "                       block instead of all, about a third more GEMM work; N trades between\n"
     "                       (the memory plan prints the bytes per block kept and recomputed);\n"
     "                       bitwise the same (default off = 0; not with --tp or --fp8-report)\n"},
    {"--fp8-attention", NULL, OPT_ON_OFF, F(fp8_attention), 0, 0, WORDS(ON_OFF), "train.fp8_attention",
     NULL,
     "  --fp8-attention on|off  attention's forward in FP8 (TE's fp8_dpa: Q, K, V, P and O in E4M3 with\n"
     "                       per-layer delayed scaling; the backward in BF16 on the dequantized inputs)\n"
     "                       (default off; needs --fp8 on, --recipe delayed and bf16). On cuDNN's FP8\n"
     "                       flash attention when the loaded cuDNN is >= 9.19 (else f8's FP8 kernel,\n"
     "                       about 35x slower); pays at long sequences only (docs/FP8_ATTENTION.md;\n"
     "                       on --resume the checkpoint's)\n"},
    {"--recipe", NULL, OPT_WORD, F(recipe), 0, 0, WORDS(RECIPES), "train.recipe",
     NULL,
     "  --recipe delayed|current|block|rowwise|rowwise_with_gw_hp   FP8 scaling recipe (default delayed;\n"
     "                       on --resume the checkpoint's). delayed, current, block: TransformerEngine's\n"
     "                       DelayedScaling, Float8CurrentScaling, Float8BlockScaling. rowwise: torchao's\n"
     "                       and torchtitan's \"rowwise\" (one scale per token, output and input channel,\n"
     "                       E4M3 everywhere, power-of-two scales); rowwise_with_gw_hp: torchao's, the\n"
     "                       same with the weight gradient's GEMM in high precision\n"},
    {"--attention", NULL, OPT_WORD, F(attention), 0, 0, WORDS(ATTENTION_PATHS), NULL,
     NULL,
     "  --attention auto|own  attention's implementation on the GPU: auto runs cuDNN's fused flash\n"
     "                       attention where it takes the call, f8's kernels elsewhere; own always\n"
     "                       f8's kernels (default auto)\n"},
    {"--attention-deterministic", NULL, OPT_ON_OFF, F(attention_deterministic), 0, 0, WORDS(ON_OFF), NULL,
     NULL,
     "  --attention-deterministic on|off  cuDNN's attention backward: on, bitwise repeatable runs;\n"
     "                       off, dQ accumulated with atomics, faster and not repeatable (default on)\n"},
    {"--adam-moments", NULL, OPT_WORD, F(adam_moments), 0, 0, WORDS(MOMENTS), NULL,
     NULL,
     "  --adam-moments fp32|bf16|fp8  how AdamW keeps its two moments: 8, 4 or about 2 bytes a\n"
     "                       parameter (fp8: E4M3 m and sqrt(v), per-128 power-of-two scales; f8.h);\n"
     "                       fp8 not with --tp (default fp32; on --resume the checkpoint's)\n"},
    {"--dtype", NULL, OPT_WORD, F(dtype), 0, 0, WORDS(DTYPES), "train.dtype",
     NULL,
     "  --dtype auto|fp32|bf16   parameters, activations and gradients (default auto: bf16 on CUDA, fp32\n"
     "                       on CPU); BF16 gradients sum --grad-accum microbatches in BF16 (README,\n"
     "                       \"Gradients\": within M x 2^-8 of FP32's); fp32 accumulates in FP32\n"},
    {"--backend", NULL, OPT_WORD, F(backend), 0, 0, WORDS(BACKENDS), NULL,
     NULL,
     "  --backend auto|cpu|cuda  (default auto: CUDA when a GPU is usable)\n"},
    {"--graph", NULL, OPT_GRAPH, F(graph), 0, 0, WORDS(GRAPH_WORDS), NULL,
     NULL,
     "  --graph auto|on|off  capture the whole step as one CUDA graph (default auto: on for CUDA; on the CPU\n"
     "                       backend \"on\" records and replays the step: same losses, no speedup)\n"},
    {"--steps", NULL, OPT_INT, F(steps), 1, BIG, NULL, 0, NULL,
     "\n"
     "Optimization\n",
     "  --steps N            optimizer steps, >= 1 (default {steps}; a run that trains fewer than 2 exits 3:\n"
     "                       too few steps to tell whether the loss fell)\n"},
    {"--batch", NULL, OPT_INT, F(batch), 1, 1 << 16, NULL, 0, NULL,
     NULL,
     "  --batch N            sequences per microbatch (default {batch})\n"},
    {"--grad-accum", NULL, OPT_INT, F(grad_accum), 1, 1 << 16, NULL, 0, NULL,
     NULL,
     "  --grad-accum N       microbatches per step (default {grad-accum})\n"},
    {"--head-chunk", NULL, OPT_INT, F(head_chunk), 0, BIG, NULL, 0, NULL,
     NULL,
     "  --head-chunk N       tokens per LM-head + cross-entropy pass: the logits buffer's rows\n"
     "                       (default 0: 8192; a microbatch of more runs the head in passes)\n"},
    {"--memory-limit", NULL, OPT_REAL, F(memory_limit), 0.0, 1e6, NULL, 0, NULL,
     NULL,
     "  --memory-limit GIB   refuse a run whose memory plan (printed at the start) is larger, naming the\n"
     "                       options that would make it fit (default 0: the GPU's free memory on CUDA,\n"
     "                       none on the CPU)\n"},
    {"--lr", NULL, OPT_REAL, F(lr), 0.0, 10.0, NULL, 0, NULL,
     NULL,
     "  --lr X --lr-min X    AdamW peak and final learning rate (default {lr}, {lr-min})\n"},
    {"--lr-min", NULL, OPT_REAL, F(lr_min), 0.0, 10.0, NULL, 0, NULL, NULL, NULL},
    {"--warmup", NULL, OPT_INT, F(warmup), 0, BIG, NULL, 0, NULL,
     NULL,
     "  --warmup N           linear warmup steps, then cosine to --lr-min (default {warmup})\n"},
    {"--weight-decay", NULL, OPT_REAL, F(weight_decay), 0.0, 10.0, NULL, 0, NULL,
     NULL,
     "  --weight-decay X     (default {weight-decay})   --grad-clip X   global norm, 0 = off (default {grad-clip})\n"},
    {"--grad-clip", NULL, OPT_REAL, F(grad_clip), 0.0, 1e6, NULL, 0, NULL, NULL, NULL},
    {"--seed", NULL, OPT_SEED, F(seed), 0, BIG, NULL, 0, NULL,
     NULL,
     "  --seed N             model init and batch sampling (default {seed})\n"},
    {"--text", NULL, OPT_STRING, F(text), 0, 0, NULL, 0, NULL,
     "\n"
     "Data (default: a corpus the program generates itself, byte-level)\n",
     "  --text FILE          any text file, byte-level\n"},
    {"--data", NULL, OPT_STRING, F(data), 0, 0, NULL, 0, NULL,
     NULL,
     "  --data PATTERN       llm.c token shards (.bin, GPT-2 vocab): paths or globs, comma-separated\n"},
    {"--val-data", NULL, OPT_STRING, F(val_data), 0, 0, NULL, 0, NULL,
     NULL,
     "  --val-data PATTERN   validation shards (default: the last 10% of the data)\n"},
    {"--val-every", NULL, OPT_INT, F(val_every), 0, BIG, NULL, 0, NULL,
     NULL,
     "  --val-every N        validation loss every N steps, 0 = never (default {val-every})\n"},
    {"--val-batches", NULL, OPT_INT, F(val_batches), 1, BIG, NULL, 0, NULL,
     NULL,
     "  --val-batches N      batches per validation (default {val-batches})\n"},
    {"--log", NULL, OPT_STRING, F(log), 0, 0, NULL, 0, NULL,
     "\n"
     "Output\n",
     "  --log FILE           CSV log, one row per step (default {log}; \"\" = none)\n"},
    {"--plot", NULL, OPT_STRING, F(plot), 0, 0, NULL, 0, NULL,
     NULL,
     "  --plot FILE          SVG of the loss curves at the end (default {plot}; \"\" = none)\n"},
    {"--compare", NULL, OPT_COMPARE, 0, 0, 0, NULL, 0, NULL,
     NULL,
     "  --compare LOG        overlay another run's log in the plot (repeatable, up to 4)\n"},
    {"--checkpoint", NULL, OPT_STRING, F(checkpoint), 0, 0, NULL, 0, NULL,
     NULL,
     "  --checkpoint FILE    save a checkpoint (safetensors) at the end (default none; its directory must\n"
     "                       be writable: checked before training)\n"},
    {"--checkpoint-every", NULL, OPT_INT, F(checkpoint_every), 0, BIG, NULL, 0, NULL,
     NULL,
     "  --checkpoint-every N also every N steps (default 0 = only at the end)\n"},
    {"--resume", NULL, OPT_STRING, F(resume), 0, 0, NULL, 0, NULL,
     NULL,
     "  --resume FILE        continue a run from its checkpoint, exactly (the model comes from the file;\n"
     "                       --model/--layers/--heads/--channels/--seq/--fp8/--fp8-head/--fp8-weights/\n"
     "                       --fp8-attention/--dtype/--recipe, when given, must match it)\n"},
    {"--init-from", NULL, OPT_STRING, F(init_from), 0, 0, NULL, 0, NULL,
     NULL,
     "  --init-from PATH     start from a Hugging Face GPT-2 (a save_pretrained directory or its\n"
     "                       model.safetensors): layers, heads, channels and weights from it\n"},
    {"--tokenizer", NULL, OPT_STRING, F(tokenizer), 0, 0, NULL, 0, NULL,
     NULL,
     "  --tokenizer FILE     llm.c's gpt2_tokenizer.bin: samples of GPT-2 token data as text\n"},
    {"--sample", NULL, OPT_INT, F(sample), 0, 1 << 20, NULL, 0, NULL,
     NULL,
     "  --sample N           sample N bytes (or GPT-2 tokens with --tokenizer) at the end (default {sample})\n"},
    {"--prompt", NULL, OPT_STRING, F(prompt), 0, 0, NULL, 0, NULL,
     NULL,
     "  --prompt TEXT        start the sample with TEXT\n"},
    {"--temperature", NULL, OPT_REAL, F(temperature), 1e-3, 100.0, NULL, 0, NULL,
     NULL,
     "  --temperature X      (default {temperature})\n"},
    {"--quiet", NULL, OPT_FLAG, F(quiet), 0, 0, NULL, 0, NULL,
     NULL,
     "  --quiet              only errors and the final line\n"},
    {"--fp8-report", NULL, OPT_FLAG, F(fp8_report), 0, 0, NULL, 0, NULL,
     NULL,
     "  --fp8-report         FP8 telemetry: per tensor and step amax, scale, saturated and flushed\n"
     "                       fractions to <log>_fp8.csv and <plot>_fp8.svg, the worst tensors at the end\n"},
    {"--help", "-h", OPT_HELP, 0, 0, 0, NULL, 0, NULL,
     NULL,
     "  --help               this text\n"},
    {"--gpus", NULL, OPT_INT, F(gpus), 1, 1024, NULL, 0, NULL,
     "\n"
     "Data parallel (ZeRO-1: sharded AdamW; --grad-accum microbatches split among the ranks)\n",
     "  --gpus N             over N GPUs of this machine: one process per GPU, NCCL\n"},
    {"--ranks", NULL, OPT_INT, F(ranks), 1, 1024, NULL, 0, NULL,
     NULL,
     "  --ranks N            over N in-process CPU ranks (threads; the CPU backend)\n"},
    {"--dp-overlap", NULL, OPT_ON_OFF, F(dp_overlap), 0, 0, WORDS(ON_OFF), NULL,
     NULL,
     "  --dp-overlap on|off  one gradient bucket per block, reduce-scattered while the backward\n"
     "                       goes on (NCCL: on a second stream); default off: one bucket after it\n"},
    {"--tp", NULL, OPT_INT, F(tp), 1, 1024, NULL, 0, NULL,
     NULL,
     "  --tp N               tensor parallel over groups of N of those ranks (heads, MLP split;\n"
     "                       data parallel = ranks / N); amaxes reduced over all ranks (llama:\n"
     "                       heads, --kv-heads and --ffn must divide by N)\n"},
    {"--sequence-parallel", "--sp", OPT_FLAG, F(sequence_parallel), 0, 0, NULL, 0, NULL,
     NULL,
     "  --sequence-parallel  with --tp N: the residual stream and LayerNorms keep 1/N of the tokens\n"
     "                       per rank; norm outputs all-gathered (FP8), proj/fc2 reduce-scattered\n"
     "                       (--seq must divide by N; checkpoints as without it)\n"
     "  Across machines: one f8_train per GPU with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and\n"
     "  MASTER_PORT set (torchrun style); rank 0 serves the NCCL id on MASTER_PORT.\n"},
};
#undef F
#undef BIG
#undef WORDS
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

const train_option_def *train_option_table(int *count)
{
    *count = N_OPTIONS;
    return OPTIONS;
}

static int option_index(const char *name)
{
    for (int i = 0; i < N_OPTIONS; i++)
        if (!strcmp(name, OPTIONS[i].name) || (OPTIONS[i].alias && !strcmp(name, OPTIONS[i].alias))) return i;
    return -1;
}

/* {name} in a help text: the default of option --name, as the option reads it. */
static void print_default(FILE *f, const train_options *d, const char *name, size_t len)
{
    char opt[40];
    snprintf(opt, sizeof opt, "--%.*s", (int)len, name);
    const int i = option_index(opt);
    const train_option_def *e = i >= 0 ? &OPTIONS[i] : NULL;
    const char *field = e ? (const char *)d + e->offset : NULL;
    if (!e) fprintf(f, "{%.*s}", (int)len, name);
    else if (e->kind == OPT_MODEL) fputs(d->model, f);
    else if (e->kind == OPT_INT) fprintf(f, "%lld", (long long)*(const int64_t *)(const void *)field);
    else if (e->kind == OPT_SEED) fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)(const void *)field);
    else if (e->kind == OPT_REAL) fprintf(f, "%g", (double)*(const float *)(const void *)field);
    else if (e->kind == OPT_STRING) fputs(*(const char *const *)(const void *)field, f);
}

void train_print_help(FILE *f)
{
    const train_options d = train_options_default();
    fputs(
    "usage: f8_train [options]\n"
    "       f8_train plot OUT.svg LOG.csv [LOG.csv ...]   overlay loss curves\n"
    "       f8_train export CHECKPOINT OUT.onnx [--fp8 on|off]   the model as ONNX (export --help)\n"
    "       f8_train export-hf CHECKPOINT OUT_DIR        the model as a Hugging Face GPT-2\n"
    "       f8_train eval-hf DIR --tokens FILE           loss of a Hugging Face GPT-2 on token ids\n"
    "Trains a GPT-2-style model with f8 (FP8 or BF16), on the GPU when there is one.\n",
        f);
    for (int i = 0; i < N_OPTIONS; i++) { /* the table's texts, defaults filled in */
        if (OPTIONS[i].group) fputs(OPTIONS[i].group, f);
        for (const char *p = OPTIONS[i].help; p && *p; p++) {
            const char *close = *p == '{' ? strchr(p, '}') : NULL;
            if (close) {
                print_default(f, &d, p + 1, (size_t)(close - p - 1));
                p = close;
            } else {
                fputc(*p, f);
            }
        }
    }
    fprintf(f, "\nPresets (--model): layers/heads/channels/seq, batch x microbatches, lr\n");
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++) {
        const preset *p = &PRESETS[i];
        fprintf(f, "  %-6s %lld/%lld/%lld/%lld, %lld x %lld, %g: %s\n", p->name, (long long)p->layers, (long long)p->heads,
                (long long)p->channels, (long long)p->seq, (long long)p->batch, (long long)p->grad_accum, (double)p->lr,
                p->what);
    }
    for (size_t i = 0; i < sizeof LLAMA_PRESETS / sizeof LLAMA_PRESETS[0]; i++) {
        const preset *p = &LLAMA_PRESETS[i].p;
        fprintf(f, "  %-10s %lld/%lld/%lld/%lld, %lld x %lld, %g: %s\n", p->name, (long long)p->layers,
                (long long)p->heads, (long long)p->channels, (long long)p->seq, (long long)p->batch,
                (long long)p->grad_accum, (double)p->lr, p->what);
    }
}

uint64_t train_option_bit(const char *name)
{
    const int i = option_index(name);
    return i < 0 ? 0 : (uint64_t)1 << i;
}

/* The value v of option d into o; 0, or -1 with the reason in err. */
static int set_option(train_options *o, const train_option_def *d, const char *v, char *err, size_t n)
{
    char *field = (char *)o + d->offset;
    int w = 0;
    int64_t k = 0;
    switch (d->kind) {
    case OPT_INT: return opt_i64(d->name, v, (int64_t)d->lo, (int64_t)d->hi, (int64_t *)(void *)field, err, n);
    case OPT_SEED:
        if (opt_i64(d->name, v, (int64_t)d->lo, (int64_t)d->hi, &k, err, n)) return -1;
        *(uint64_t *)(void *)field = (uint64_t)k;
        return 0;
    case OPT_REAL: return opt_f(d->name, v, d->lo, d->hi, (float *)(void *)field, err, n);
    case OPT_ON_OFF:
    case OPT_GRAPH:
        if (opt_word(d->name, v, d->words, d->n_words, &w, err, n)) return -1;
        *(int *)(void *)field = d->kind == OPT_GRAPH && w == 2 ? -1 : w;
        return 0;
    case OPT_BLOCKS: /* off, on (every block: the layers are known later), or a count */
        if (opt_word(d->name, v, d->words, d->n_words, &w, err, n) == 0) {
            *(int *)(void *)field = w ? TRAIN_RECOMPUTE_ALL : 0;
            return 0;
        }
        if (opt_i64(d->name, v, (int64_t)d->lo, (int64_t)d->hi, &k, err, n)) {
            snprintf(err, n, "%s = '%.40s': expected on, off or a number of blocks 0 to %d", d->name, v,
                     (int)d->hi);
            return -1;
        }
        *(int *)(void *)field = (int)k;
        return 0;
    case OPT_WORD:
        if (opt_word(d->name, v, d->words, d->n_words, &w, err, n)) return -1;
        *(const char **)(void *)field = d->words[w];
        return 0;
    case OPT_STRING: *(const char **)(void *)field = v; return 0;
    case OPT_COMPARE:
        if (o->n_compare == 4) {
            snprintf(err, n, "--compare: at most 4 logs");
            return -1;
        }
        o->compare[o->n_compare++] = v;
        return 0;
    default: return 0; /* --model: applied first */
    }
}

int train_parse_args(int argc, char **argv, train_options *o, FILE *out, char *err, size_t n)
{
    const uint64_t shape_bits = train_option_bit("--layers") | train_option_bit("--heads") |
                                train_option_bit("--channels") | train_option_bit("--seq");
    /* a preset first, so explicit sizes given before or after it win */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--model") == 0) {
            const preset *p = find_preset(argv[i + 1]);
            if (!p) {
                snprintf(err, n, "--model %s: unknown preset (tiny, small, 50M, 124M, 350M, 1.3B, llama-tiny, llama-1B, llama-3B, llama-8B)", argv[i + 1]);
                return -1;
            }
            apply_preset(o, p);
            o->given |= shape_bits;
            o->from_preset |= shape_bits;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int x = option_index(a);
        const train_option_def *d = x >= 0 ? &OPTIONS[x] : NULL;
        if (d && d->kind == OPT_HELP) {
            train_print_help(out);
            return 1;
        }
        if (d && d->kind == OPT_FLAG) {
            *(int *)(void *)((char *)o + d->offset) = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, n, "unexpected argument '%s' (see --help)", a);
            return -1;
        }
        if (i + 1 >= argc) {
            snprintf(err, n, "%s needs a value (see --help)", a);
            return -1;
        }
        const char *v = argv[++i];
        if (!d) {
            snprintf(err, n, "unknown option '%s' (see --help)", a);
            return -1;
        }
        if (set_option(o, d, v, err, n) != 0) {
            if (d->kind == OPT_COMPARE) return -1;
            size_t k2 = strlen(err);
            if (k2 + 16 < n) snprintf(err + k2, n - k2, " (see --help)");
            return -1;
        }
        /* the model options a --resume checkpoint records count as given (--dtype auto: whatever it has) */
        uint64_t bit = d->meta && d->kind != OPT_WORD ? (uint64_t)1 << x : 0;
        if (d->kind == OPT_WORD && d->offset == offsetof(train_options, dtype)) {
            bit = (uint64_t)1 << x;
            if (!strcmp(o->dtype, "auto")) o->given &= ~bit, bit = 0;
        }
        o->given |= bit;
        o->from_preset &= ~bit;
    }
    return check_conflicts(o, err, n);
}

/* ---- a checkpoint's model ------------------------------------------------------ */

static int meta_int(train_meta_fn get, void *user, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err,
                    size_t n)
{
    const char *v = get(user, key);
    if (!v) {
        snprintf(err, n, "the checkpoint has no %s: not written by f8_train", key);
        return -1;
    }
    return parse_int(key, v, lo, hi, out, err, n);
}

/* An on/off option recorded as metadata `key` (absent: off, as before the
 * option existed) into *out; the command line's value, if `flag` was given,
 * must match it. */
static int meta_flag(train_meta_fn get, void *user, const train_options *o, const char *key, const char *flag,
                     int given, int64_t *out, char *err, size_t n)
{
    const uint64_t bit = train_option_bit(flag);
    *out = 0;
    if (get(user, key) && meta_int(get, user, key, 0, 1, out, err, n)) return -1;
    if ((o->given & bit) && given != (int)*out) {
        snprintf(err, n, "%s %s conflicts with the checkpoint's %s = %lld (leave %s out or make it match)", flag,
                 given ? "on" : "off", key, (long long)*out, flag);
        return -1;
    }
    return 0;
}

f8_recipe train_recipe(f8_recipe_kind kind)
{
    f8_recipe r = f8_recipe_default();
    r.kind = kind;
    if (kind == F8_RECIPE_ROWWISE || kind == F8_RECIPE_ROWWISE_GW_HP) {
        r.format = F8_FORMAT_E4M3;
        r.power_2_scales = 1;
    }
    return r;
}

f8_recipe_kind train_checkpoint_recipe(const char *path)
{
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *tmp = NULL;
    f8_checkpoint *ck = NULL;
    f8_recipe_kind kind = F8_RECIPE_DELAYED;
    if (f8_ctx_create(&cc, &tmp, NULL, 0) == F8_OK && f8_checkpoint_load(tmp, path, &ck) == F8_OK) {
        const char *r = f8_checkpoint_metadata(ck, "train.recipe");
        for (int k = F8_RECIPE_DELAYED; r && k <= F8_RECIPE_ROWWISE_GW_HP; k++)
            if (strcmp(r, f8_recipe_kind_name((f8_recipe_kind)k)) == 0) kind = (f8_recipe_kind)k;
    }
    f8_checkpoint_destroy(ck);
    f8_ctx_destroy(tmp);
    return kind;
}

int train_options_from_metadata(train_options *o, train_meta_fn get, void *user, int64_t *vocab,
                                int64_t *padded_vocab, int64_t *step, char *err, size_t n)
{
    /* the shape: the table's four integer model options, their keys and limits */
    static const char *const flags[4] = {"--layers", "--heads", "--channels", "--seq"};
    const char *keys[4];
    uint64_t bits[4];
    int64_t lo[4], hi[4], *cur[4];
    for (int i = 0; i < 4; i++) {
        const train_option_def *d = &OPTIONS[option_index(flags[i])];
        keys[i] = d->meta;
        bits[i] = train_option_bit(flags[i]);
        lo[i] = (int64_t)d->lo, hi[i] = (int64_t)d->hi;
        cur[i] = (int64_t *)(void *)((char *)o + d->offset);
    }
    int64_t shape[4], fp8, v, pv, s;
    for (int i = 0; i < 4; i++)
        if (meta_int(get, user, keys[i], lo[i], hi[i], &shape[i], err, n)) return -1;
    if (meta_int(get, user, "train.vocab", 1, TRAIN_MAX_VOCAB, &v, err, n) ||
        meta_int(get, user, "train.padded_vocab", 1, TRAIN_MAX_VOCAB, &pv, err, n) ||
        meta_int(get, user, "train.fp8", 0, 1, &fp8, err, n) ||
        meta_int(get, user, "train.step", 0, TRAIN_MAX_STEPS, &s, err, n))
        return -1;
    if (shape[2] % shape[1]) {
        snprintf(err, n, "train.channels = %lld is not a multiple of train.heads = %lld", (long long)shape[2],
                 (long long)shape[1]);
        return -1;
    }
    if (pv != (v + 127) / 128 * 128) {
        snprintf(err, n, "train.padded_vocab = %lld is not train.vocab = %lld rounded up to 128", (long long)pv,
                 (long long)v);
        return -1;
    }
    const char *dt = get(user, "train.dtype");
    if (!dt || (strcmp(dt, "fp32") && strcmp(dt, "bf16"))) {
        snprintf(err, n, dt ? "train.dtype = '%.40s': expected fp32 or bf16" : "the checkpoint has no train.dtype%.0s: "
                              "not written by f8_train", dt ? dt : "");
        return -1;
    }
    const char *dtype = strcmp(dt, "bf16") == 0 ? "bf16" : "fp32";
    /* The scaling recipe the run was trained with (none: delayed, as before recipes existed). */
    static const char *const kinds[5] = {"delayed", "current", "block", "rowwise", "rowwise_with_gw_hp"};
    const char *rv = get(user, "train.recipe"), *kind = rv ? NULL : kinds[0];
    for (int i = 0; rv && i < 5; i++)
        if (strcmp(rv, kinds[i]) == 0) kind = kinds[i];
    if (!kind) {
        snprintf(err, n, "train.recipe = '%.40s': expected delayed, current, block, rowwise or rowwise_with_gw_hp", rv);
        return -1;
    }
    if (o->recipe && strcmp(o->recipe, kind) != 0) {
        snprintf(err, n, "--recipe %s conflicts with the checkpoint's train.recipe = %s: a resumed run keeps its "
                         "recipe (leave --recipe out or make it match)", o->recipe, kind);
        return -1;
    }
    /* What the command line asked for must be what the checkpoint holds. */
    for (int i = 0; i < 4; i++)
        if ((o->given & bits[i]) && *cur[i] != shape[i]) {
            snprintf(err, n, "%s %lld%s conflicts with the checkpoint's %s = %lld: a resumed run keeps its model "
                             "(leave the option out or make it match)", flags[i], (long long)*cur[i],
                     (o->from_preset & bits[i]) ? " (from --model)" : "", keys[i], (long long)shape[i]);
            return -1;
        }
    if ((o->given & train_option_bit("--fp8")) && o->fp8 != (int)fp8) {
        snprintf(err, n, "--fp8 %s conflicts with the checkpoint's train.fp8 = %lld (leave --fp8 out or make it match)",
                 o->fp8 ? "on" : "off", (long long)fp8);
        return -1;
    }
    /* the LM head in FP8, the blocks' weights FP8 primary, FP8 attention */
    int64_t head, fp8w, att;
    if (meta_flag(get, user, o, "train.fp8_head", "--fp8-head", o->fp8_head, &head, err, n) ||
        meta_flag(get, user, o, "train.fp8_weights", "--fp8-weights", o->fp8_weights, &fp8w,
                  err, n) ||
        meta_flag(get, user, o, "train.fp8_attention", "--fp8-attention", o->fp8_attention,
                  &att, err, n))
        return -1;
    if ((o->given & train_option_bit("--dtype")) && strcmp(o->dtype, dtype)) {
        snprintf(err, n, "--dtype %s conflicts with the checkpoint's train.dtype = %s (leave --dtype out or make it "
                         "match)", o->dtype, dtype);
        return -1;
    }
    /* AdamW's moments as the library recorded them (none: FP32, as before the option) */
    const char *mv = get(user, "optimizer.moments"), *moments = mv ? NULL : "fp32";
    static const char *const forms[3] = {"fp32", "bf16", "fp8"};
    for (int i = 0; mv && i < 3; i++)
        if (strcmp(mv, forms[i]) == 0) moments = forms[i];
    if (!moments) {
        snprintf(err, n, "optimizer.moments = '%.40s': expected fp32, bf16 or fp8", mv);
        return -1;
    }
    if (o->adam_moments && strcmp(o->adam_moments, moments) != 0) {
        snprintf(err, n, "--adam-moments %s conflicts with the checkpoint's optimizer.moments = %s: a resumed run "
                         "keeps its optimizer state (leave --adam-moments out or make it match)", o->adam_moments,
                 moments);
        return -1;
    }
    o->adam_moments = moments;
    o->model = "custom";
    for (int i = 0; i < 4; i++) *cur[i] = shape[i];
    o->fp8 = (int)fp8;
    o->fp8_head = (int)head;
    o->fp8_weights = (int)fp8w;
    o->fp8_attention = (int)att;
    o->dtype = dtype;
    o->recipe = kind;
    *vocab = v;
    *padded_vocab = pv;
    *step = s;
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
    const double pass = c->head_chunk > 0 ? (double)c->head_chunk : (double)GPT_HEAD_CHUNK;
    const double head = pass < T ? (pass > S ? pass : S) : T;
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
