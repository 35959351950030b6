/*
 * memplan.c — the memory plan (memplan.h): two probe models measured by the
 * library's accounting, the rest counted from the options.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt.h"
#include "memplan.h"
#include "try.h"

static const char *const NAMES[PLAN_COUNT] = {"weights", "FP8 workspaces", "gradients", "optimizer",
                                              "activations", "scratch", "other"};

const char *mem_plan_name(plan_category k) { return k >= 0 && k < PLAN_COUNT ? NAMES[k] : "?"; }

/* What a model of c holds by the library's categories, less the ctx's own
 * (base), and its table's moment and master bytes. */
typedef struct probe {
    double mem[F8_MEM_COUNT];
    double moments, masters, elements, wpe, dwpe;
    double main_grads; /* --grad-dtype fp32: the FP32 main grads (f8_ctx_alloc'd: taken out of other) */
} probe;

/* Bytes of AdamW's moments for a tensor of n elements in form mo (f8.h's
 * table: m and v, with FP8 their blocks' scale_invs; the optimizer allocates
 * each part 256-byte aligned). */
static double align256(double b) { return (double)(((int64_t)b + 255) / 256 * 256); }
static double moment_bytes(f8_adamw_moments mo, double n)
{
    const double part = align256(n * (mo == F8_ADAMW_MOMENTS_FP8 ? 1 : mo == F8_ADAMW_MOMENTS_BF16 ? 2 : 4));
    if (mo != F8_ADAMW_MOMENTS_FP8) return 2 * part;
    const double blocks = (double)(((int64_t)n + F8_ADAMW_FP8_BLOCK - 1) / F8_ADAMW_FP8_BLOCK);
    return 2 * part + 2 * align256(4 * blocks);
}

/* A probe model of c on a fresh ctx of cfg (the FP8 scaling buffer grows by
 * doubling and keeps its size: a ctx of its own measures each alike);
 * *base gets the empty ctx's own bytes. */
static f8_status measure(const f8_ctx_config *cfg, const gpt_config *c, f8_adamw_moments mo, probe *p,
                         f8_memory_report *base, char *err, size_t n)
{
    memset(p, 0, sizeof *p);
    f8_ctx *ctx = NULL;
    f8_ctx_config cc = *cfg;
    TRY(f8_ctx_create(&cc, &ctx, err, n));
    gpt m;
    f8_status st = f8_ctx_memory(ctx, base);
    if (st == F8_OK) st = gpt_create(ctx, c, &m, err, n);
    if (st != F8_OK) {
        f8_ctx_destroy(ctx);
        return st;
    }
    f8_memory_report r;
    st = f8_ctx_memory(ctx, &r);
    for (int k = 0; st == F8_OK && k < F8_MEM_COUNT; k++) p->mem[k] = (double)r.bytes[k] - (double)base->bytes[k];
    for (int i = 0; st == F8_OK && i < m.params.n; i++) {
        const model_param *e = &m.params.v[i];
        const double el = (double)(e->value.rows * e->value.cols);
        p->elements += el;
        p->moments += moment_bytes(mo, el);
        if (e->fp8 >= 0) p->masters += 4 * el;
    }
    const double es = (double)f8_dtype_size(c->dtype);
    p->wpe = (double)gpt_positions(c) * (double)c->channels * es; /* f8_ctx_alloc'd: the library counts them as other */
    p->dwpe = (double)c->seq * (double)c->channels * (double)f8_dtype_size(gpt_grad_dtype(&m.c));
    p->main_grads = (double)m.main_grad_bytes;
    p->mem[F8_MEM_OTHER] -= p->main_grads;
    gpt_destroy(&m);
    f8_ctx_destroy(ctx);
    return st;
}

f8_status mem_plan_make(const gpt_config *c, const mem_plan_run *r, mem_plan *p, char *err, size_t n)
{
    memset(p, 0, sizeof *p);
    f8_memory_report base;
    probe one, two, two_rc;
    /* one and two blocks that keep their activations, and (one rank: block recompute is not for --tp) two
     * that share one set, the second recomputed: a recomputed block's bytes, exactly (FP8 attention's own
     * saved state included) */
    gpt_config c1 = *c, c2 = *c, c2r = *c;
    c1.layers = 1, c1.recompute_blocks = 0;
    c2.layers = 2, c2.recompute_blocks = 0;
    c2r.layers = 2, c2r.recompute_blocks = 2;
    /* --weight-transpose-per-call N: the probes' blocks all make their own (the workspace's growth); the
     * transposes of the other L - N blocks are counted below */
    c1.wt_per_call = c->wt_per_call > 0 ? 1 : 0;
    c2.wt_per_call = c2r.wt_per_call = c->wt_per_call > 0 ? 2 : 0;
    const int rc_probe = r->tp <= 1;
    TRY(measure(&r->ctx, &c1, r->moments, &one, &base, err, n));
    TRY(measure(&r->ctx, &c2, r->moments, &two, &base, err, n));
    if (rc_probe) TRY(measure(&r->ctx, &c2r, r->moments, &two_rc, &base, err, n));
    else two_rc = two;
    /* the blocks recomputed: of the first N, all but the last (its state is still there) */
    const double rc = c->recompute_blocks > 1 ? (double)(c->recompute_blocks - 1) : 0;
    /* fixed part + (layers - 1) x the second layer's, per library category; the blocks' own
     * categories shared over tp ranks */
    const double L = (double)c->layers, tp = r->tp > 1 ? (double)r->tp : 1;
    double mem[F8_MEM_COUNT];
    for (int k = 0; k < F8_MEM_COUNT; k++) {
        const double per = two.mem[k] - one.mem[k], per_rc = two_rc.mem[k] - one.mem[k];
        const int split = k == F8_MEM_PARAMETERS || k == F8_MEM_GRADIENTS || k == F8_MEM_WORKSPACE_DATA;
        mem[k] = one.mem[k] - per + L * per / (split ? tp : 1) - rc * (per - per_rc);
    }
    const double el = one.elements + (L - 1) * (two.elements - one.elements);
    const double moments = one.moments + (L - 1) * (two.moments - one.moments);
    const double masters = one.masters + (L - 1) * (two.masters - one.masters);
    /* FP8 GEMM weights get a cached transpose at the first backward: a byte a weight element */
    const double C = (double)c->channels;
    /* block and row-wise workspaces hold both layouts: no transposes made later */
    const int block = r->ctx.recipe.kind == F8_RECIPE_BLOCK || r->ctx.recipe.kind == F8_RECIPE_ROWWISE ||
                      r->ctx.recipe.kind == F8_RECIPE_ROWWISE_GW_HP;
    /* a block's weight elements: GPT 12·C² (qkv 3C², proj C², fc1 and fc2 4C² each); Llama qkv C·W (W = q,
     * k and v of H and G heads), proj C², fc1 (SwiGLU, 2F) and fc2 3·C·F */
    const double kv = (double)(c->kv_heads > 0 ? c->kv_heads : c->heads), W = ((double)c->heads + 2 * kv) * C / (double)c->heads;
    const double per_block = c->llama ? C * W + C * C + 3 * C * (double)c->ffn : 12 * C * C;
    const double head_t = c->fp8_head ? (double)c->padded_vocab * C : 0;
    const double transposes = c->fp8 && !block ? L * per_block / tp + head_t : 0;
    /* --weight-transpose-per-call N: the blocks past the first N keep theirs, and the head unless N = L
     * (the workspace's growth is in the probes' scratch, whose blocks all make their own) */
    const double cached = !c->wt_per_call ? transposes
                          : c->fp8 && !block ? (L - c->wt_per_call) * per_block / tp + (gpt_head_wt_per_call(c) ? 0 : head_t)
                                             : 0;
    /* what "on" would save: the cached transposes, less the workspace's growth if it has none yet (the
     * largest weight: the head's with --fp8-head, else fc1's or fc2's) */
    const double largest = c->fp8_head ? (double)c->padded_vocab * C
                                       : (c->llama ? (2 * (double)c->ffn > W ? 2 * (double)c->ffn : W) * C : 4 * C * C) / tp;
    if (!c->wt_per_call && transposes > largest) p->transposes = transposes - largest;
    else if (c->wt_per_call && cached > 0) p->transposes = cached;
    p->bytes[PLAN_WEIGHTS] = mem[F8_MEM_PARAMETERS] + one.wpe;
    /* --grad-dtype fp32: the main grads beside the modules' own gradients (the probes' fused modules hold
     * those of their biases and norm weights only: a GEMM weight's is its main grad), the blocks' shared
     * over tp ranks */
    const double main_grads = one.main_grads + (L - 1) * (two.main_grads - one.main_grads) / tp;
    p->bytes[PLAN_GRADIENTS] = mem[F8_MEM_GRADIENTS] + one.dwpe + main_grads;
    p->bytes[PLAN_WORKSPACES] = mem[F8_MEM_WORKSPACE_DATA] + mem[F8_MEM_WORKSPACE_TRANSPOSE] + cached;
    p->bytes[PLAN_ACTIVATIONS] = mem[F8_MEM_SAVED_ACTIVATIONS] + mem[F8_MEM_OTHER] - one.wpe - one.dwpe;
    p->bytes[PLAN_SCRATCH] = mem[F8_MEM_SCRATCH];
    p->bytes[PLAN_OTHER] = mem[F8_MEM_SCALING_STATE] + (double)base.total;
    /* ZeRO-1 (dp.c): the moments and masters of one shard, the flat FP32 gradients whole and a shard of them */
    const double ranks = r->ranks > 0 ? (double)r->ranks : 1;
    p->bytes[PLAN_OPTIMIZER] = (moments + masters) / ranks + (r->ranks > 0 ? 4 * el + 4 * el / ranks : 0);
    /* --recompute-norm: the norm outputs of qkv and the MLP, FP8 (a byte each), per set of activations */
    if (c->fp8 && !c->recompute_norm && !block) p->norm_outputs = 2 * (L - rc) * (double)c->batch * (double)c->seq * C;
    /* --recompute-act: the MLP's activation output (F wide: GPT 4C, Llama ffn; a byte each in FP8) per set */
    const double F = c->llama ? (double)c->ffn : 4 * C, as = c->fp8 ? 1 : (double)f8_dtype_size(c->dtype);
    if (!c->recompute_act && !(c->fp8 && block)) p->act_outputs = (L - rc) * (double)c->batch * (double)c->seq * F / tp * as;
    /* --recompute-proj-input: the projection's X8ᵀ (a byte a token and local channel) per set */
    if (c->fp8 && !c->recompute_proj && !block) p->proj_inputs = (L - rc) * (double)c->batch * (double)c->seq * C / tp;
    /* --recompute-blocks: a block's activations (its saved state and buffers) kept, and recomputed (its
     * input alone); a block more recomputed saves the difference, up to all but one */
    p->block_kept = two.mem[F8_MEM_SAVED_ACTIVATIONS] + two.mem[F8_MEM_OTHER] - one.mem[F8_MEM_SAVED_ACTIVATIONS] -
                    one.mem[F8_MEM_OTHER];
    if (rc_probe) {
        p->block_recomputed = two_rc.mem[F8_MEM_SAVED_ACTIVATIONS] + two_rc.mem[F8_MEM_OTHER] -
                              one.mem[F8_MEM_SAVED_ACTIVATIONS] - one.mem[F8_MEM_OTHER];
        const double each = p->block_kept - p->block_recomputed;
        p->blocks_saves = each > 0 ? (L - 1 - rc) * each : 0;
    }
    for (int k = 0; k < PLAN_COUNT; k++) p->total += p->bytes[k];
    return F8_OK;
}

static void human(char *out, size_t n, double b)
{
    if (b >= 1073741824.0) snprintf(out, n, "%.2f GiB", b / 1073741824.0);
    else snprintf(out, n, "%.1f MiB", b / 1048576.0);
}

void mem_plan_format(const mem_plan *p, char *out, size_t size)
{
    size_t at = 0;
    char h[32];
    out[0] = '\0';
    for (int k = 0; k < PLAN_COUNT && at < size; k++) {
        human(h, sizeof h, p->bytes[k]);
        at += (size_t)snprintf(out + at, size - at, "%s%s %s", k ? ", " : "", NAMES[k], h);
    }
    human(h, sizeof h, p->total);
    if (at < size) at += (size_t)snprintf(out + at, size - at, ": %s", h);
    if (p->block_kept <= 0 || at >= size) return;
    /* what --recompute-blocks N moves: N - 1 blocks from the first figure to the second */
    char r[32];
    human(h, sizeof h, p->block_kept);
    human(r, sizeof r, p->block_recomputed);
    if (p->block_recomputed > 0)
        snprintf(out + at, size - at, "; activations a block: %s kept, %s recomputed", h, r);
    else
        snprintf(out + at, size - at, "; activations a block: %s", h);
}

typedef struct plan_fix {
    const char *option;
    double saves;
} plan_fix;

int mem_plan_check(const mem_plan *p, const gpt_config *c, const mem_plan_run *r, double limit, const char *what,
                   char *err, size_t n)
{
    if (p->total <= limit) return 0;
    char plan[512], lim[32], total[32], fixes[896] = "", h[32], blocks[48], chunk[48];
    size_t at = 0;
    mem_plan_format(p, plan, sizeof plan);
    human(lim, sizeof lim, limit);
    human(total, sizeof total, p->total);
    const double over = p->total - limit, opt = p->bytes[PLAN_OPTIMIZER];
    /* each option alone, with what it saves: those that would make it fit alone first */
    plan_fix f[8];
    int nf = 0;
    if (r->moments != F8_ADAMW_MOMENTS_FP8) /* the moments' share of the optimizer bytes, to about 2 B a parameter */
        f[nf++] = (plan_fix){"--adam-moments fp8",
                             opt * (1 - 2.0625 / (r->moments == F8_ADAMW_MOMENTS_BF16 ? 4 : 8))};
    if (p->blocks_saves > 0) { /* the fewest blocks recomputed that fit, else all */
        const double each = p->block_kept - p->block_recomputed, rc = c->recompute_blocks > 1 ? c->recompute_blocks - 1 : 0;
        const double more = ceil(over / each), N = rc + more + 1;
        if (N < (double)c->layers) {
            snprintf(blocks, sizeof blocks, "--recompute-blocks %.0f", N);
            f[nf++] = (plan_fix){blocks, more * each};
        } else {
            f[nf++] = (plan_fix){"--recompute-blocks on", p->blocks_saves};
        }
    }
    if (p->norm_outputs > 0) f[nf++] = (plan_fix){"--recompute-norm on", p->norm_outputs};
    if (p->act_outputs > 0) f[nf++] = (plan_fix){"--recompute-act on", p->act_outputs};
    if (p->transposes > 0) f[nf++] = (plan_fix){"--weight-transpose-per-call on", p->transposes};
    if (p->proj_inputs > 0) f[nf++] = (plan_fix){"--recompute-proj-input on", p->proj_inputs};
    /* the LM head in passes of 2048 tokens: a row fewer is its logits and its norm output in the
     * activation dtype and the norm's two statistics; about 0.2% of the 1.3B step */
    const int64_t rows = gpt_head_rows(c, 0), fewer = gpt_head_rows(c, 2048);
    if (rows > fewer) {
        snprintf(chunk, sizeof chunk, "--head-chunk %lld", (long long)fewer);
        const double row_bytes = (double)(c->padded_vocab + c->channels) * (double)f8_dtype_size(c->dtype) + 8;
        f[nf++] = (plan_fix){chunk, (double)(rows - fewer) * row_bytes};
    }
    if (c->batch > 1) f[nf++] = (plan_fix){"half the --batch", p->bytes[PLAN_ACTIVATIONS] / 2};
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < nf && at < sizeof fixes; k++) {
            if ((f[k].saves >= over) != (pass == 0)) continue;
            human(h, sizeof h, f[k].saves);
            at += (size_t)snprintf(fixes + at, sizeof fixes - at, "%s%s (about %s less%s)", at ? ", " : "",
                                   f[k].option, h, pass == 0 ? ": enough alone" : "");
        }
    snprintf(err, n, "the run needs about %s (%s), more than %s (%s); %s%s", total, plan, lim, what,
             at ? "options that would help: " : "no option of f8_train's shrinks it", fixes);
    return -1;
}
