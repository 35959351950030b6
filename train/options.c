/*
 * options.c — f8_train's options as data: the presets, the defaults, the
 * option table (every option, its field, limits and --help text) and --help.
 * Parsing the command line and a checkpoint's metadata through the table:
 * options_parse.c; the refusals of options that contradict each other or
 * the machine: options_check.c.
 */
#include <stddef.h>
#include <string.h>

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
    {{"llama-tiny", 4, 4, 128, 64, 4, 2, 1e-3f, "a small Llama (2 KV heads, FFN 384, tied) for CPU runs"}, 2, 384, 0,
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

int train_options_preset(train_options *o, const char *name)
{
    const preset *p = find_preset(name);
    if (!p) return -1;
    apply_preset(o, p);
    return 0;
}

train_options train_options_default(void)
{
    train_options o;
    memset(&o, 0, sizeof o);
    o.backend = "auto";
    o.fp8 = 1;
    o.dtype = "auto";
    o.grad_dtype = "auto";
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

/* ---- the option table ----------------------------------------------------------- */

static const char *const ON_OFF[2] = {"off", "on"}, *const GRAPH_WORDS[3] = {"off", "on", "auto"};
static const char *const BACKENDS[3] = {"auto", "cpu", "cuda"}, *const DTYPES[3] = {"auto", "fp32", "bf16"};
static const char *const RECIPES[5] = {"delayed", "current", "block", "rowwise", "rowwise_with_gw_hp"};
static const char *const GRAD_DTYPES[3] = {"auto", "bf16", "fp32"};
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
    {"--weight-transpose-per-call", NULL, OPT_BLOCKS, F(weight_transpose_per_call), 0, TRAIN_MAX_LAYERS, WORDS(ON_OFF),
     NULL, NULL,
     "  --weight-transpose-per-call N|on|off  keep no transposed copy of the FP8 weights (the dgrad's\n"
     "                       operand, a byte a weight: 1.13 GiB at 1.3B); each backward transposes the\n"
     "                       codes into its workspace instead, a read and a write of a byte a weight a\n"
     "                       microbatch; N: the first N blocks only (a fraction of the memory for that\n"
     "                       fraction of the cost); on: every block and the LM head; bitwise the same\n"
     "                       (default off; not with --recipe block or rowwise)\n"},
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
     "                       per-layer delayed or current scaling; the backward in BF16 on the\n"
     "                       dequantized inputs unless --fp8-attention-backward on) (default off;\n"
     "                       needs --fp8 on, --recipe delayed or current, and bf16). On cuDNN's FP8\n"
     "                       flash attention when the loaded cuDNN is >= 9.19 (else f8's FP8 kernel,\n"
     "                       about 35x slower); pays at long sequences only (docs/FP8_ATTENTION.md;\n"
     "                       on --resume the checkpoint's)\n"},
    {"--fp8-attention-backward", NULL, OPT_ON_OFF, F(fp8_attention_backward), 0, 0, WORDS(ON_OFF),
     "train.fp8_attention_backward", NULL,
     "  --fp8-attention-backward on|off  attention's backward in FP8 too (TE's NVTE_FP8_DPA_BWD=1: dO,\n"
     "                       dP and the saved O in FP8, per-layer dO, dP and dQKV slots) on cuDNN's FP8\n"
     "                       backward (cuDNN >= 9.19, head dim 128, no GQA; elsewhere the BF16 backward\n"
     "                       on the dequantized codes); no faster than BF16 on Hopper: for its numerics\n"
     "                       (default off; needs --fp8-attention on; on --resume the checkpoint's)\n"},
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
    {"--gemm-tune", NULL, OPT_ON_OFF, F(gemm_tune), 0, 0, WORDS(ON_OFF), NULL,
     NULL,
     "  --gemm-tune on|off   time up to 8 of cuBLASLt's candidate algorithms at each GEMM shape's first\n"
     "                       call (the warm-up) and keep the fastest, as torch.backends.cudnn.benchmark\n"
     "                       does; two runs may pick different ones and differ in the last bits\n"
     "                       (default off: the heuristic's first choice, bitwise repeatable)\n"},
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
    {"--grad-dtype", NULL, OPT_WORD, F(grad_dtype), 0, 0, WORDS(GRAD_DTYPES), NULL,
     NULL,
     "  --grad-dtype auto|bf16|fp32  the gradients' dtype (default auto: the parameters'); fp32 with bf16\n"
     "                       parameters sums the microbatches in FP32 (main grads the wgrad GEMMs\n"
     "                       accumulate into; +4 bytes a parameter; README, \"Gradients\"); bf16 only\n"
     "                       with bf16 parameters\n"},
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

int train_option_index(const char *name)
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
    const int i = train_option_index(opt);
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
    "       f8_train export-hf CHECKPOINT OUT_DIR        the model as a Hugging Face GPT-2 or Llama\n"
    "       f8_train eval-hf DIR --tokens FILE           loss of a Hugging Face GPT-2 or Llama on token ids\n"
    "Trains a GPT-2-style or Llama-style model with f8 (FP8 or BF16), on the GPU when there is one.\n",
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
    const int i = train_option_index(name);
    return i < 0 ? 0 : (uint64_t)1 << i;
}
