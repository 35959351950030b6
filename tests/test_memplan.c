/*
 * test_memplan.c — f8_train's memory plan (train/memplan.c) against what
 * the run really holds on the CPU backend: a trainer is made with the plan
 * (trainer_create plans before it makes the model), runs a step (every
 * allocation, the FP8 transposes of the first backward included, is done by
 * then), and the library's accounting of its ctx (f8_ctx_memory by
 * category, the peak of f8_ctx_counters) is the oracle:
 *   weights    = parameters + wpe              exactly
 *   gradients  = gradients + wpe's gradient    exactly
 *   workspaces = workspace data + transposes   exactly
 *   scratch    = scratch                       exactly
 *   total      within TOTAL_TOL of the peak (the optimizer's own small
 *              buffers and such are not planned: seen 0.05-0.2% under; the
 *              FP8 scaling buffer grows by doubling, so a layer count past a
 *              power of two plans a little more than it holds)
 * over configurations that move each category: FP8 on and off, BF16, a
 * larger batch with --recompute-norm, --grad-dtype fp32, --recompute-act, the
 * weight transposes per call, BF16 and FP8 AdamW moments, FP8
 * primary weights, block scaling, --recompute-blocks (GPT and Llama). Then the refusal: --memory-limit below
 * the plan refuses before the model is made (F8_ERR_OUT_OF_MEMORY), names
 * the options that would make it fit, and the same limit above the plan
 * runs; the saving it names for --head-chunk 2048 is the plans' difference.
 * And f8_ctx_device_memory, the limit's source on CUDA, on the CPU.
 */
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "f8train.h"
#include "trainer_fixture.h"

#define TOTAL_TOL 0.005

static void check_config(const char *what, train_options o)
{
    trainer *t = NULL;
    char err[1024] = "";
    f8_status st = trainer_create(&o, &t, err, sizeof err);
    CHECK(st == F8_OK, "%s: trainer_create: %s", what, err);
    if (st != F8_OK) return;
    double loss;
    st = trainer_step(t, &loss); /* allocation happens at creation and in a first step (f8.h) */
    CHECK(st == F8_OK, "%s: a step failed: %s", what, trainer_error(t));
    gpt *m = trainer_model(t);
    f8_memory_report r;
    f8_ctx_counters cnt;
    CHECK(f8_ctx_memory(m->ctx, &r) == F8_OK && f8_ctx_counters_read(m->ctx, &cnt) == F8_OK, "%s: accounting", what);
    const mem_plan *p = &t->plan;
    const double es = (double)f8_dtype_size(m->c.dtype), C = (double)m->c.channels;
    const double wpe = (double)gpt_positions(&m->c) * C * es;
    const double dwpe = (double)m->c.seq * C * (double)f8_dtype_size(gpt_grad_dtype(&m->c));
    /* --grad-dtype fp32: the FP32 main grads (f8_ctx_alloc'd) are gradients too */
    const double weights = (double)r.bytes[F8_MEM_PARAMETERS] + wpe,
                 grads = (double)r.bytes[F8_MEM_GRADIENTS] + dwpe + (double)m->main_grad_bytes;
    const double ws = (double)r.bytes[F8_MEM_WORKSPACE_DATA] + (double)r.bytes[F8_MEM_WORKSPACE_TRANSPOSE];
    const double peak = (double)cnt.peak_bytes, rel = fabs(p->total - peak) / peak;
    printf("  %-34s plan %8.0f KiB, peak %8.0f KiB (%+.2f%%)\n", what, p->total / 1024, peak / 1024,
           100 * (p->total - peak) / peak);
    CHECK(p->bytes[PLAN_WEIGHTS] == weights, "%s: weights planned %.0f, held %.0f", what, p->bytes[PLAN_WEIGHTS], weights);
    CHECK(p->bytes[PLAN_GRADIENTS] == grads, "%s: gradients planned %.0f, held %.0f", what, p->bytes[PLAN_GRADIENTS],
          grads);
    CHECK(p->bytes[PLAN_WORKSPACES] == ws, "%s: FP8 workspaces planned %.0f, held %.0f", what,
          p->bytes[PLAN_WORKSPACES], ws);
    CHECK(p->bytes[PLAN_SCRATCH] == (double)r.bytes[F8_MEM_SCRATCH], "%s: scratch planned %.0f, held %zu", what,
          p->bytes[PLAN_SCRATCH], r.bytes[F8_MEM_SCRATCH]);
    CHECK(rel <= TOTAL_TOL, "%s: total planned %.0f, peak %.0f: %.2f%% apart (> %.0f%%)", what, p->total, peak,
          100 * rel, 100 * TOTAL_TOL);
    trainer_destroy(t);
}

static void test_plans(void)
{
    /* 3 layers (the plan extrapolates past its probes of 1 and 2), small and quick; not quiet, so the
     * trainer plans (it prints nothing before trainer_run) */
    train_options base = quiet_run_options("cpu", 1);
    base.quiet = 0;
    base.layers = 3, base.heads = 2, base.channels = 64, base.seq = 32;
    train_options o = base;
    check_config("FP8, delayed", o);
    o.fp8 = 0;
    check_config("no FP8", o);
    o = base;
    o.dtype = "bf16";
    check_config("FP8, BF16 parameters", o);
    o = base;
    o.batch = 8;
    o.recompute_norm = 1;
    check_config("batch 8, --recompute-norm on", o);
    o.grad_dtype = "fp32"; /* FP32 main grads beside BF16 parameters */
    check_config("BF16 parameters, --grad-dtype fp32", o);
    o = base;
    o.batch = 8;
    o.recompute_act = 1;
    check_config("batch 8, --recompute-act on", o);
    o.fp8 = 0;
    check_config("batch 8, --recompute-act on, no FP8", o);
    o = base;
    o.weight_transpose_per_call = TRAIN_RECOMPUTE_ALL;
    check_config("--weight-transpose-per-call on", o);
    o.fp8_head = 1;
    check_config("the same, --fp8-head on", o);
    o = base;
    o.weight_transpose_per_call = 1; /* the first block of 3 */
    check_config("--weight-transpose-per-call 1", o);
    o.weight_transpose_per_call = 2;
    check_config("--weight-transpose-per-call 2", o);
    o.fp8_head = 1;
    check_config("the same, --fp8-head on", o);
    o = base;
    o.adam_moments = "bf16";
    check_config("--adam-moments bf16", o);
    o.adam_moments = "fp8";
    check_config("--adam-moments fp8", o);
    o = base;
    o.fp8_weights = 1;
    check_config("--fp8-weights on", o);
    o = base;
    o.recipe = "block";
    o.channels = 128;
    check_config("--recipe block", o);
    o = base;
    o.batch = 8;
    o.recompute_blocks = 2;
    check_config("batch 8, --recompute-blocks 2", o);
    o.recompute_blocks = TRAIN_RECOMPUTE_ALL;
    check_config("batch 8, --recompute-blocks on", o);
    o.llama = 1, o.heads = 4, o.kv_heads = 2, o.ffn = 96, o.rope_theta = 10000.0;
    check_config("llama, batch 8, --recompute-blocks on", o);
}

static void test_refusal(void)
{
    train_options o = quiet_run_options("cpu", 2);
    o.quiet = 0;
    trainer *t = NULL;
    char err[1024] = "";
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "the plain run: %s", err);
    const double need = t ? t->plan.total : 0;
    trainer_destroy(t);
    t = NULL;
    /* a limit a little under the plan: the FP8 moments alone would make it fit */
    o.memory_limit = (float)((need - 0.5 * 1048576.0) / 1073741824.0);
    f8_status st = trainer_create(&o, &t, err, sizeof err);
    CHECK(st == F8_ERR_OUT_OF_MEMORY && t == NULL, "a limit under the plan: %s (%s)", f8_status_string(st), err);
    CHECK(strstr(err, "--memory-limit") && strstr(err, "--adam-moments fp8") && strstr(err, "enough alone") &&
              strstr(err, "--recompute-norm on") && strstr(err, "--recompute-act on") && strstr(err, "--recompute-blocks ") &&
              strstr(err, "--weight-transpose-per-call on") && strstr(err, "--batch"),
          "the refusal names the limit and the options that help: %s", err);
    printf("  refused: %.300s...\n", err);
    trainer_destroy(t);
    t = NULL;
    /* so it does: the same limit with FP8 moments runs */
    o.adam_moments = "fp8";
    st = trainer_create(&o, &t, err, sizeof err);
    CHECK(st == F8_OK, "the same limit with --adam-moments fp8: %s", err);
    trainer_destroy(t);
    t = NULL;
    /* far under: nothing of f8_train's is enough alone */
    o.memory_limit = 1.0f / 1024; /* 1 MiB */
    st = trainer_create(&o, &t, err, sizeof err);
    CHECK(st == F8_ERR_OUT_OF_MEMORY && !strstr(err, "enough alone"), "1 MiB: %s", err);
    trainer_destroy(t);
    /* a Llama (llama-8B's family: one GPU judges it by the plan) refused alike; FP8 moments and block
     * recompute together make it fit */
    o = quiet_run_options("cpu", 2);
    o.quiet = 0;
    o.llama = 1, o.layers = 4, o.heads = 4, o.kv_heads = 2, o.channels = 64, o.ffn = 160, o.seq = 64, o.batch = 8;
    o.rope_theta = 10000.0;
    t = NULL;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "the Llama: %s", err);
    const double llama_need = t ? t->plan.total : 0, blocks = t ? t->plan.blocks_saves : 0;
    trainer_destroy(t);
    t = NULL;
    o.memory_limit = (float)((llama_need - 0.6 * blocks) / 1073741824.0);
    st = trainer_create(&o, &t, err, sizeof err);
    /* 4 blocks: 0.6 of 3 recomputed blocks' saving is over 1 and under 2: the smallest N is 3 */
    CHECK(st == F8_ERR_OUT_OF_MEMORY && strstr(err, "--adam-moments fp8") && strstr(err, "--recompute-blocks 3 ("),
          "the Llama under its plan: %s", err);
    printf("  refused: %.400s...\n", err);
    trainer_destroy(t);
    t = NULL;
    /* so it does, alone, and N = 2 does not */
    o.recompute_blocks = 2;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_ERR_OUT_OF_MEMORY && strstr(err, "--recompute-blocks 3 ("),
          "the Llama with --recompute-blocks 2: %s", err);
    trainer_destroy(t);
    t = NULL;
    o.recompute_blocks = 3;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "the Llama with --recompute-blocks 3: %s", err);
    trainer_destroy(t);
    t = NULL;
    /* well under: not enough alone, named as on; FP8 moments and block recompute together make it fit */
    o.recompute_blocks = 0;
    o.memory_limit = (float)((llama_need - 1.1 * blocks) / 1073741824.0);
    st = trainer_create(&o, &t, err, sizeof err);
    CHECK(st == F8_ERR_OUT_OF_MEMORY && strstr(err, "--recompute-blocks on (") && !strstr(err, "enough alone"),
          "the Llama well under its plan: %s", err);
    trainer_destroy(t);
    t = NULL;
    o.adam_moments = "fp8", o.recompute_blocks = TRAIN_RECOMPUTE_ALL;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "the Llama with FP8 moments and block recompute: %s", err);
    trainer_destroy(t);
    t = NULL;
    /* the CPU without a limit never refuses: the default */
    CHECK(quiet_run_options("cpu", 2).memory_limit == 0, "the default limit is none");
    /* a quiet CPU run without a limit does not plan (nothing would show or check it) */
    o = quiet_run_options("cpu", 2);
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK && t->plan.total == 0, "a quiet CPU run planned");
    trainer_destroy(t);
}

/* The LM head in passes: a run of 4096 tokens a microbatch, refused, names
 * --head-chunk 2048, and what it says that saves is what the plan of the
 * same run with it holds less (the probes measure the head's buffers), to
 * within 2%. */
static void test_head_chunk_fix(void)
{
    train_options o = small_gpt_options(1, 2);
    o.quiet = 0, o.seq = 64, o.batch = 64, o.grad_accum = 1;
    trainer *t = NULL;
    char err[1024] = "";
    double need[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        o.head_chunk = k ? 2048 : 0;
        CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "head chunk %d: %s", k ? 2048 : 0, err);
        need[k] = t ? t->plan.total : 0;
        trainer_destroy(t);
        t = NULL;
    }
    o.head_chunk = 0, o.memory_limit = (float)((need[0] - 1024.0) / 1073741824.0);
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_ERR_OUT_OF_MEMORY, "a limit under the plan: %s", err);
    trainer_destroy(t);
    const char *at = strstr(err, "--head-chunk 2048 (about ");
    double said = 0;
    char unit[8] = "";
    if (at && sscanf(at + strlen("--head-chunk 2048 (about "), "%lf %7s", &said, unit) == 2)
        said *= strcmp(unit, "GiB") == 0 ? 1073741824.0 : 1048576.0;
    const double saves = need[0] - need[1];
    CHECK(at && saves > 0 && fabs(said / saves - 1) <= 0.02,
          "--head-chunk 2048 named as saving %.0f bytes where the plans differ by %.0f: %s", said, saves, err);
    printf("  head in passes: named %.0f bytes, the plans differ by %.0f\n", said, saves);
    /* a microbatch of 2048 tokens or fewer is not offered it */
    o.batch = 32, o.memory_limit = 1.0f / 1024;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_ERR_OUT_OF_MEMORY && !strstr(err, "--head-chunk"),
          "2048 tokens offered the head's passes: %s", err);
    trainer_destroy(t);
}

/* f8_ctx_device_memory on the CPU: the host's memory, against sysconf. */
static void test_device_memory(void)
{
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = F8_BACKEND_CPU;
    f8_ctx *ctx = NULL;
    char err[256];
    CHECK(f8_ctx_create(&cfg, &ctx, err, sizeof err) == F8_OK, "ctx: %s", err);
    size_t fr = 0, total = 0;
    const double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    CHECK(f8_ctx_device_memory(ctx, &fr, &total) == F8_OK && (double)total == phys && fr > 0 && fr <= total,
          "CPU: free %zu, total %zu (sysconf: %.0f)", fr, total, phys);
    CHECK(f8_ctx_device_memory(ctx, NULL, &total) == F8_OK && f8_ctx_device_memory(ctx, &fr, NULL) == F8_OK,
          "either output may be NULL");
    CHECK(f8_ctx_device_memory(NULL, &fr, &total) == F8_ERR_INVALID_ARGUMENT && fr == 0 && total == 0,
          "a NULL ctx: refused, outputs 0");
    f8_ctx_destroy(ctx);
}

int main(void)
{
    test_device_memory();
    test_plans();
    test_refusal();
    test_head_chunk_fix();
    return test_finish("test_memplan");
}
