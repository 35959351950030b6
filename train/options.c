/*
 * options.c — f8_train's command line: defaults, presets, parsing, --help.
 * Every option is listed in train_print_help with its default.
 */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"

typedef struct preset {
    const char *name;
    int64_t layers, heads, channels, seq, batch, grad_accum;
    float lr;
    const char *what;
} preset;

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

static const preset *find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
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
}

train_options train_options_default(void)
{
    train_options o;
    memset(&o, 0, sizeof o);
    o.backend = "auto";
    o.fp8 = 1;
    o.dtype = "auto";
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
    o.sample = 120;
    o.temperature = 0.8f;
    o.prompt = "";
    return o;
}

void train_print_help(FILE *f)
{
    train_options d = train_options_default();
    fprintf(f,
            "usage: f8_train [options]\n"
            "       f8_train plot OUT.svg LOG.csv [LOG.csv ...]   overlay loss curves\n"
            "       f8_train export CHECKPOINT OUT.onnx [--fp8 on|off]   the model as ONNX (export --help)\n"
            "       f8_train export-hf CHECKPOINT OUT_DIR        the model as a Hugging Face GPT-2\n"
            "       f8_train eval-hf DIR --tokens FILE           loss of a Hugging Face GPT-2 on token ids\n"
            "Trains a GPT-2-style model with f8 (FP8 or BF16), on the GPU when there is one.\n\n"
            "Model and precision\n"
            "  --model NAME         preset: tiny, small, 50M, 124M, 350M, 1.3B (default %s)\n"
            "  --layers N --heads N --channels N --seq N   override the preset (default %lld, %lld, %lld, %lld)\n"
            "  --fp8 on|off         FP8 GEMMs in the blocks; off = BF16 on the GPU, FP32 on the CPU (default on)\n"
            "  --dtype auto|fp32|bf16   parameters and activations (default auto: bf16 on CUDA, fp32 on CPU)\n"
            "  --backend auto|cpu|cuda  (default auto: CUDA when a GPU is usable)\n"
            "  --graph auto|on|off  capture the whole step as one CUDA graph (default auto: on for CUDA)\n\n"
            "Optimization\n"
            "  --steps N            optimizer steps (default %lld)\n"
            "  --batch N            sequences per microbatch (default %lld)\n"
            "  --grad-accum N       microbatches per step (default %lld)\n"
            "  --lr X --lr-min X    AdamW peak and final learning rate (default %g, %g)\n"
            "  --warmup N           linear warmup steps, then cosine to --lr-min (default %lld)\n"
            "  --weight-decay X     (default %g)   --grad-clip X   global norm, 0 = off (default %g)\n"
            "  --seed N             model init and batch sampling (default %llu)\n\n"
            "Data (default: a corpus the program generates itself, byte-level)\n"
            "  --text FILE          any text file, byte-level\n"
            "  --data PATTERN       llm.c token shards (.bin, GPT-2 vocab): paths or globs, comma-separated\n"
            "  --val-data PATTERN   validation shards (default: the last 10%% of the data)\n"
            "  --val-every N        validation loss every N steps, 0 = never (default %lld)\n"
            "  --val-batches N      batches per validation (default %lld)\n\n"
            "Output\n"
            "  --log FILE           CSV log, one row per step (default %s; \"\" = none)\n"
            "  --plot FILE          SVG of the loss curves at the end (default %s; \"\" = none)\n"
            "  --compare LOG        overlay another run's log in the plot (repeatable, up to 4)\n"
            "  --checkpoint FILE    save a checkpoint (safetensors) at the end (default none)\n"
            "  --checkpoint-every N also every N steps (default 0 = only at the end)\n"
            "  --resume FILE        continue a run from its checkpoint, exactly\n"
            "  --init-from PATH     start from a Hugging Face GPT-2 (a save_pretrained directory or its\n"
            "                       model.safetensors): layers, heads, channels and weights from it\n"
            "  --tokenizer FILE     llm.c's gpt2_tokenizer.bin: samples of GPT-2 token data as text\n"
            "  --sample N           sample N bytes (or GPT-2 tokens with --tokenizer) at the end (default %lld)\n"
            "  --prompt TEXT        start the sample with TEXT\n"
            "  --temperature X      (default %g)\n"
            "  --quiet              only errors and the final line\n"
            "  --help               this text\n",
            d.model, (long long)d.layers, (long long)d.heads, (long long)d.channels, (long long)d.seq,
            (long long)d.steps, (long long)d.batch, (long long)d.grad_accum, (double)d.lr, (double)d.lr_min,
            (long long)d.warmup, (double)d.weight_decay, (double)d.grad_clip, (unsigned long long)d.seed,
            (long long)d.val_every, (long long)d.val_batches, d.log, d.plot, (long long)d.sample, (double)d.temperature);
    fprintf(f, "\nPresets (--model): layers/heads/channels/seq, batch x microbatches, lr\n");
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++) {
        const preset *p = &PRESETS[i];
        fprintf(f, "  %-6s %lld/%lld/%lld/%lld, %lld x %lld, %g: %s\n", p->name, (long long)p->layers, (long long)p->heads,
                (long long)p->channels, (long long)p->seq, (long long)p->batch, (long long)p->grad_accum, (double)p->lr,
                p->what);
    }
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_f(const char *s, float lo, float hi, float *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi)) return -1;
    *out = (float)v;
    return 0;
}

int train_parse_args(int argc, char **argv, train_options *o, FILE *out, char *err, size_t n)
{
    /* a preset first, so explicit sizes given before or after it win */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--model") == 0) {
            const preset *p = find_preset(argv[i + 1]);
            if (!p) {
                snprintf(err, n, "--model %s: unknown preset (tiny, small, 50M, 124M, 350M, 1.3B)", argv[i + 1]);
                return -1;
            }
            apply_preset(o, p);
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            train_print_help(out);
            return 1;
        }
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
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
        int bad = 0;
        int64_t k = 0;
        const int64_t BIG = (int64_t)1 << 40;
        if (strcmp(a, "--model") == 0) continue;
        else if (strcmp(a, "--layers") == 0) bad = parse_i64(v, 1, 1024, &o->layers);
        else if (strcmp(a, "--heads") == 0) bad = parse_i64(v, 1, 1024, &o->heads);
        else if (strcmp(a, "--channels") == 0) bad = parse_i64(v, 1, 1 << 16, &o->channels);
        else if (strcmp(a, "--seq") == 0) bad = parse_i64(v, 2, 1 << 16, &o->seq);
        else if (strcmp(a, "--batch") == 0) bad = parse_i64(v, 1, 1 << 16, &o->batch);
        else if (strcmp(a, "--grad-accum") == 0) bad = parse_i64(v, 1, 1 << 16, &o->grad_accum);
        else if (strcmp(a, "--steps") == 0) bad = parse_i64(v, 0, BIG, &o->steps);
        else if (strcmp(a, "--warmup") == 0) bad = parse_i64(v, 0, BIG, &o->warmup);
        else if (strcmp(a, "--val-every") == 0) bad = parse_i64(v, 0, BIG, &o->val_every);
        else if (strcmp(a, "--val-batches") == 0) bad = parse_i64(v, 1, BIG, &o->val_batches);
        else if (strcmp(a, "--checkpoint-every") == 0) bad = parse_i64(v, 0, BIG, &o->checkpoint_every);
        else if (strcmp(a, "--sample") == 0) bad = parse_i64(v, 0, 1 << 20, &o->sample);
        else if (strcmp(a, "--seed") == 0) bad = parse_i64(v, 0, BIG, &k), o->seed = (uint64_t)k;
        else if (strcmp(a, "--lr") == 0) bad = parse_f(v, 0.0f, 10.0f, &o->lr);
        else if (strcmp(a, "--lr-min") == 0) bad = parse_f(v, 0.0f, 10.0f, &o->lr_min);
        else if (strcmp(a, "--weight-decay") == 0) bad = parse_f(v, 0.0f, 10.0f, &o->weight_decay);
        else if (strcmp(a, "--grad-clip") == 0) bad = parse_f(v, 0.0f, 1e6f, &o->grad_clip);
        else if (strcmp(a, "--temperature") == 0) bad = parse_f(v, 1e-3f, 100.0f, &o->temperature);
        else if (strcmp(a, "--fp8") == 0) bad = strcmp(v, "on") == 0 ? (o->fp8 = 1, 0) : strcmp(v, "off") == 0 ? (o->fp8 = 0, 0) : -1;
        else if (strcmp(a, "--graph") == 0)
            bad = strcmp(v, "on") == 0 ? (o->graph = 1, 0)
                : strcmp(v, "off") == 0 ? (o->graph = 0, 0)
                : strcmp(v, "auto") == 0 ? (o->graph = -1, 0) : -1;
        else if (strcmp(a, "--backend") == 0)
            bad = (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) ? -1 : (o->backend = v, 0);
        else if (strcmp(a, "--dtype") == 0)
            bad = (strcmp(v, "auto") && strcmp(v, "fp32") && strcmp(v, "bf16")) ? -1 : (o->dtype = v, 0);
        else if (strcmp(a, "--text") == 0) o->text = v;
        else if (strcmp(a, "--data") == 0) o->data = v;
        else if (strcmp(a, "--val-data") == 0) o->val_data = v;
        else if (strcmp(a, "--log") == 0) o->log = v;
        else if (strcmp(a, "--plot") == 0) o->plot = v;
        else if (strcmp(a, "--checkpoint") == 0) o->checkpoint = v;
        else if (strcmp(a, "--resume") == 0) o->resume = v;
        else if (strcmp(a, "--init-from") == 0) o->init_from = v;
        else if (strcmp(a, "--tokenizer") == 0) o->tokenizer = v;
        else if (strcmp(a, "--prompt") == 0) o->prompt = v;
        else if (strcmp(a, "--compare") == 0) {
            if (o->n_compare == 4) {
                snprintf(err, n, "--compare: at most 4 logs");
                return -1;
            }
            o->compare[o->n_compare++] = v;
        } else {
            snprintf(err, n, "unknown option '%s' (see --help)", a);
            return -1;
        }
        if (bad) {
            snprintf(err, n, "bad value '%s' for %s (see --help)", v, a);
            return -1;
        }
    }
    if (o->init_from && o->init_from[0] && o->resume && o->resume[0]) {
        snprintf(err, n, "--init-from and --resume: give one (a resumed run has its own weights)");
        return -1;
    }
    if (o->channels % o->heads) {
        snprintf(err, n, "--channels %lld must be a multiple of --heads %lld", (long long)o->channels, (long long)o->heads);
        return -1;
    }
    if (!(o->graph == 0) && strcmp(o->backend, "cpu") == 0 && o->graph == 1) {
        snprintf(err, n, "--graph on needs the CUDA backend");
        return -1;
    }
    return 0;
}
