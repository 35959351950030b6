/*
 * attention_cudnn_fp8.cu — the FP8 attention forward (f8_attention_config.fp8)
 * and FP8 backward (.fp8_backward) on cuDNN's fused FP8 flash attention,
 * where the loaded cuDNN computes it right; f8's own paths (attention.cu)
 * everywhere else.
 *
 * Design note.
 *  - Which cuDNN. cuDNN 9.14's FP8 forward kernels are wrong at training
 *    shapes (rows off by many times their size, runs that differ: a race),
 *    9.19's are right, bitwise repeatable, at every shape probed
 *    (docs/FP8_ATTENTION.md, "The fault found"). So this path runs only when
 *    cudnnGetVersion() >= F8I_CUDNN_FP8_MIN_VERSION, decided at run time on
 *    the library attention_cudnn.cu loaded; below it every FP8 forward is
 *    f8's kernel and f8_attention_query_path says OWN. Head dims 64 and 128
 *    only (the probed ones; cuDNN's FP8 engines are built for them).
 *  - The graph: cudnn-frontend's SDPA FP8 node's operations (its bmm1 a
 *    plain matmul of the E4M3 operands, its bmm2 the matmul_fp8 pattern):
 *      S = Q8·K8ᵀ · c · descale_q · descale_k; causal; softmax with Stats;
 *      amax_s = AMAX(P); P8 = E4M3(P · scale_s);
 *      O = P8·V8 · descale_s · descale_v; amax_o = AMAX(O); O8 = E4M3(O · scale_o).
 *    Q, Kᵀ, V are views of the saved (B·S, 3C) codes, as the BF16 graph's.
 *    It is attention.h's chain: cuDNN rounds P in its own blocked online
 *    order, so P8 codes (and O8 with them) may land a step from the CPU's.
 *    One graph for both recipes: under current scaling scale_o is the QKV
 *    slot's scale (attention.c; |O| <= max|v|, so it is known before the
 *    call). TE's current-scaling form, O in BF16 with scale_o 1, is no
 *    longer built: cuDNN has no engine for it below Blackwell (the
 *    frontend refuses "sdpa fp8 forward with HALF/BFLOAT16 output" there;
 *    docs/FP8_ATTENTION.md).
 *  - The backward (DIR_BWD, DIR_BWD_CS; graph_backward_fp8 has it): head
 *    dim 128 only (Hopper's FP8 backward engines; hd 64 finalizes none),
 *    multi-head; O8 and dQKV8 with their scales, or (current scaling) O
 *    and dQKV in BF16 with by-value 1s (TE's form: dQKV's scale cannot be
 *    known before the call). cuDNN's heuristics offer no engine for the
 *    latter below Blackwell, as for the forward's; the refusal is kept
 *    like a plan and f8's path runs it. Three launches: fp8_bwd_prep_kernel
 *    (Stats from L, the scales, amaxes zeroed), cuDNN, fp8_bwd_finish_kernel
 *    (dQKV8 to BF16 dqkv, amaxes into the dP and dQKV slots).
 *  - Three launches a forward: fp8_prep_kernel copies the per-step scales
 *    (the slots' sit 4 bytes apart in the ctx arrays) where each has 16
 *    bytes of its own and zeroes the amax outputs (cuDNN's AMAX is not
 *    promised to overwrite rather than max into); cuDNN's execute;
 *    fp8_finish_kernel dequantizes O8 into y and the saved o, turns Stats
 *    into attention.h's L and maxes the amaxes into the slots'.
 *  - Plans: in the ctx's plan cache (plan_cache.cuh, kind fp8_kind), one
 *    per (graph, B, S, n_head, head_dim, gradient format), under its rule: built on the first eager
 *    call; a shape first seen while a stream captures is an error that
 *    spoils the capture, never a quiet switch to f8's kernel. Each has one
 *    device buffer of its own, allocated by the cache: cuDNN's workspace,
 *    Stats (for a call without saved L, or the backward's), O8 (or the
 *    backward's dQKV8), the scalars. Released with the
 *    cache, before the handle (backend.cu's cuda_state_destroy).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_state.cuh"
#include "kernels_common.cuh"
#include "cudnn_api.cuh"
#include "plan_cache.cuh"

#define F8I_CUDNN_FP8_MIN_VERSION 91900 /* cuDNN 9.19.0: the first seen right (9.14 is not) */

/* What attention_cudnn_graphs.cuh's builder reads (its plan, key and uids). */
#define DN_WHY 384
#define DN_MAX_CONFIGS 8
enum {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SUM, U_DQ_ACC, U_SCALE, U_ONE, U_NEG_INF,
    U_DESCALE_Q, U_DESCALE_K, U_DESCALE_V, U_SCALE_S, U_DESCALE_S, U_SCALE_O, U_AMAX_S, U_AMAX_O,
    U_DESCALE_O, U_DESCALE_DO, U_DESCALE_DP, U_SCALE_DP, U_SCALE_DQ, U_SCALE_DK, U_SCALE_DV, /* the backward's */
    U_AMAX_DQ, U_AMAX_DK, U_AMAX_DV, U_AMAX_DP,
    DN_UID_VIRTUAL = 100
};
typedef struct dn_key {
    int64_t dir, e5m2, B, S, nh, hd, nkv; /* dir: DIR_*; e5m2: the backward's gradient format; nkv = nh */
} dn_key;
/* The graphs of this file: the FP8 forward (O8, both recipes); the FP8
 * backward under delayed scaling (O8 and dQKV8 with their scales) and
 * under current scaling (O and dQKV in BF16). */
enum { DIR_FWD = 2, DIR_BWD = 4, DIR_BWD_CS = 5 };
typedef struct dn_plan {
    dn_key key;
    int ok;
    void *plan, **descs;
    int n_descs, cap_descs;
    void *buf; /* device (the cache's): workspace [0, ws), Stats at stats_off, O8 at o8_off, scalars at sc_off */
    const void *api; /* the dn_api it was built with, for its release */
    size_t ws_bytes, stats_off, o8_off, sc_off;
    char why[DN_WHY];
} dn_plan;

#include "attention_cudnn_graphs.cuh"

/* The scalars' places in a plan's buffer, 16 bytes (4 floats) apart: the
 * forward's, and (from 0 again) the backward's. */
enum { SC_DQ, SC_SCALE_S, SC_DESCALE_S, SC_SCALE_O, SC_AMAX_S, SC_AMAX_O, SC_COUNT };
enum {
    SB_DQ, SB_DSO, SB_DSDO, SB_DSS, SB_DSDP, SB_SS, SB_SDP, SB_SDQKV, /* copied from the slots and the saved state */
    SB_AMAX_DQ, SB_AMAX_DK, SB_AMAX_DV, SB_AMAX_DP, SB_COUNT      /* cuDNN's outputs, zeroed first */
};
#define SC_AT(i) (4 * (i))

/* ------------------------------------------------------------------------ */
/* The graph                                                                 */
/* ------------------------------------------------------------------------ */

/* A [1,1,1,1] FP32 tensor in device memory (a scale, descale or amax: they change every step). */
static void *gb_dev_scalar(gb *g, const char *name, int64_t uid)
{
    static const int64_t one[4] = {1, 1, 1, 1};
    return gb_tensor(g, name, uid, DN_FLOAT, one, one, 0, 0);
}

/* O8 = E4M3(O · scale_o), scale_o a device scalar: the O slot's, or
 * (current scaling) the QKV slot's. */
static void graph_forward_fp8(gb *g, const dn_dims *d)
{
    void *t[FW_COUNT];
    gb_forward_io(g, d, DN_FP8_E4M3, DN_FP8_E4M3, t);
    void *dsq = gb_dev_scalar(g, "descale_q", U_DESCALE_Q), *dsk = gb_dev_scalar(g, "descale_k", U_DESCALE_K);
    void *dsv = gb_dev_scalar(g, "descale_v", U_DESCALE_V), *ss = gb_dev_scalar(g, "scale_s", U_SCALE_S);
    void *dss = gb_dev_scalar(g, "descale_s", U_DESCALE_S);
    void *so = gb_dev_scalar(g, "scale_o", U_SCALE_O);
    void *amax_s = gb_dev_scalar(g, "amax_s", U_AMAX_S), *amax_o = gb_dev_scalar(g, "amax_o", U_AMAX_O);

    void *s = gb_virtual(g, "S = Q8 K8^T", DN_FLOAT, d->ss, d->ss_s);
    gb_mm(g, "Q8 K8^T", t[FW_Q], t[FW_KT], s);
    void *sc = gb_mul(g, "S c", s, t[FW_SCALE], d->ss, d->ss_s);
    void *sd = gb_mul(g, "S descale_k", gb_mul(g, "S descale_q", sc, dsq, d->ss, d->ss_s), dsk, d->ss, d->ss_s);
    void *p = gb_softmax(g, d, gb_causal(g, d, sd, t[FW_NEG_INF]), t[FW_STATS], DN_FLOAT);
    gb_reduce(g, "amax_s", DN_REDUCE_AMAX, p, amax_s);
    void *p8 = gb_virtual(g, "P8 = P scale_s", DN_FP8_E4M3, d->ss, d->ss_s);
    gb_pw(g, "P8 = P scale_s", DN_PW_MUL, DN_FLOAT, p, ss, NULL, p8, -1);
    void *pv = gb_virtual(g, "P8 V8", DN_FLOAT, d->o, d->acc_s);
    gb_mm(g, "P8 V8", p8, t[FW_V], pv);
    void *od = gb_mul(g, "O", gb_mul(g, "P8 V8 descale_s", pv, dss, d->o, d->acc_s), dsv, d->o, d->acc_s);
    gb_pw(g, "O8 = O scale_o", DN_PW_MUL, DN_FLOAT, od, so, NULL, t[FW_O], -1);
    gb_reduce(g, "amax_o", DN_REDUCE_AMAX, od, amax_o);
}

/* The frontend's matmul_fp8 pattern: c = a·b · da · db (FP32, [b,h,s,d]
 * packed); out = c · sc; amax = AMAX(c), before sc. */
static void gb_mm_fp8(gb *g, const char *name, void *a, void *b, void *da, void *db, void *sc, void *out, void *amax,
                      const dn_dims *d)
{
    void *c0 = gb_virtual(g, name, DN_FLOAT, d->o, d->acc_s);
    gb_mm(g, name, a, b, c0);
    void *c2 = gb_mul(g, name, gb_mul(g, name, c0, da, d->o, d->acc_s), db, d->o, d->acc_s);
    gb_pw(g, name, DN_PW_MUL, DN_FLOAT, c2, sc, NULL, out, -1);
    gb_reduce(g, name, DN_REDUCE_AMAX, c2, amax);
}

/* The FP8 backward (cudnn-frontend's SDPA FP8 backward, per-tensor scales;
 * attention.h's chain; dev/cuda/fp8_sdpa_bwd.h probed it on the GPU):
 *   D  = reduce(dO8 ⊙ O) · descale_dO · descale_O
 *   P  = exp(mask(Q8·K8ᵀ · c · descale_q · descale_k) - Stats)
 *   dV = (P·scale_s → E4M3)ᵀ·dO8 · descale_s · descale_dO → · scale_dV, amax_dV
 *   dS = (dO8·V8ᵀ · descale_dO · descale_v - D) · P · c;  amax_dP;  dS8 = gd(dS · scale_dP)
 *   dQ = dS8·K8 · descale_dP · descale_k;  dK = dS8ᵀ·Q8 · descale_dP · descale_q   (each → · scale, amax)
 * gd the gradient format (dO8 and dS8); cs (current scaling): O in BF16
 * with descale_O a by-value 1, dQ, dK, dV in BF16 with by-value scales 1
 * (TE's Float8CurrentScaling form); else O8 and dQKV8 in gd. */
static void graph_backward_fp8(gb *g, const dn_dims *d, int cs, int gd)
{
    const int E = DN_FP8_E4M3, F = DN_FLOAT, out_t = cs ? DN_BF16 : gd;
    void *q = gb_tensor(g, "Q8", U_Q, E, d->qkv, d->qkv_s, 0, 0);
    void *kt = gb_tensor(g, "K8^T", U_K, E, d->kt, d->kt_s, 0, 0);
    void *vt = gb_tensor(g, "V8^T", U_V, E, d->kt, d->kt_s, 0, 0);
    void *o = gb_tensor(g, cs ? "O" : "O8", U_O, cs ? DN_BF16 : E, d->o, d->o_s, 0, 0);
    void *dout = gb_tensor(g, "dO8", U_DO, gd, d->o, d->o_s, 0, 0);
    void *stats = gb_tensor(g, "Stats", U_STATS, F, d->row, d->row_s, 0, 0);
    void *dq = gb_tensor(g, "dQ", U_DQ, out_t, d->qkv, d->qkv_s, 0, 0);
    void *dk = gb_tensor(g, "dK", U_DK, out_t, d->kv, d->kv_s, 0, 0);
    void *dv = gb_tensor(g, "dV", U_DV, out_t, d->kv, d->kv_s, 0, 0);
    void *attn = gb_scalar(g, "attn_scale", U_SCALE), *ninf = gb_scalar(g, "-inf", U_NEG_INF);
    void *dsq = gb_dev_scalar(g, "descale_q", U_DESCALE_Q), *dsk = gb_dev_scalar(g, "descale_k", U_DESCALE_K);
    void *dsv = gb_dev_scalar(g, "descale_v", U_DESCALE_V);
    void *dso = cs ? gb_scalar(g, "descale_o = 1", U_DESCALE_O) : gb_dev_scalar(g, "descale_o", U_DESCALE_O);
    void *dsdo = gb_dev_scalar(g, "descale_dO", U_DESCALE_DO), *dss = gb_dev_scalar(g, "descale_s", U_DESCALE_S);
    void *dsdp = gb_dev_scalar(g, "descale_dP", U_DESCALE_DP), *ss = gb_dev_scalar(g, "scale_s", U_SCALE_S);
    void *sdp = gb_dev_scalar(g, "scale_dP", U_SCALE_DP);
    void *sdq = cs ? gb_scalar(g, "scale_dQ = 1", U_SCALE_DQ) : gb_dev_scalar(g, "scale_dQ", U_SCALE_DQ);
    void *sdk = cs ? gb_scalar(g, "scale_dK = 1", U_SCALE_DK) : gb_dev_scalar(g, "scale_dK", U_SCALE_DK);
    void *sdv = cs ? gb_scalar(g, "scale_dV = 1", U_SCALE_DV) : gb_dev_scalar(g, "scale_dV", U_SCALE_DV);
    void *am_dq = gb_dev_scalar(g, "amax_dQ", U_AMAX_DQ), *am_dk = gb_dev_scalar(g, "amax_dK", U_AMAX_DK);
    void *am_dv = gb_dev_scalar(g, "amax_dV", U_AMAX_DV), *am_dp = gb_dev_scalar(g, "amax_dP", U_AMAX_DP);

    /* D */
    void *t = gb_virtual(g, "dO O", F, d->o, d->dot_s), *r = gb_virtual(g, "sum dO O", F, d->row, d->row_s);
    gb_pw(g, "dO O", DN_PW_MUL, F, dout, o, NULL, t, -1);
    gb_reduce(g, "sum dO O", DN_REDUCE_ADD, t, r);
    void *dd = gb_mul(g, "D", gb_mul(g, "D descale_dO", r, dsdo, d->row, d->row_s), dso, d->row, d->row_s);

    /* P from Stats */
    void *s0 = gb_virtual(g, "S = Q8 K8^T", F, d->ss, d->ss_s);
    gb_mm(g, "Q8 K8^T", q, kt, s0);
    void *s1 = gb_mul(g, "S c", s0, attn, d->ss, d->ss_s);
    void *s3 = gb_mul(g, "S descale_k", gb_mul(g, "S descale_q", s1, dsq, d->ss, d->ss_s), dsk, d->ss, d->ss_s);
    void *sm = gb_causal(g, d, s3, ninf);
    void *s4 = gb_virtual(g, "S - Stats", F, d->ss, d->ss_s), *p = gb_virtual(g, "P", F, d->ss, d->ss_s);
    gb_pw(g, "S - Stats", DN_PW_SUB, F, sm, stats, NULL, s4, -1);
    gb_pw(g, "P = exp", DN_PW_EXP, F, s4, NULL, NULL, p, -1);

    /* dV = P8ᵀ dO8 */
    void *p8 = gb_virtual(g, "P8", E, d->ss, d->ss_s), *p8t = gb_virtual(g, "P8^T", E, d->ss, d->sst_s);
    gb_pw(g, "P8 = P scale_s", DN_PW_MUL, F, p, ss, NULL, p8, -1);
    gb_reshape(g, "P8^T", p8, p8t);
    gb_mm_fp8(g, "dV = P8^T dO8", p8t, dout, dss, dsdo, sdv, dv, am_dv, d);

    /* dS */
    void *dp0 = gb_virtual(g, "dP = dO8 V8^T", F, d->ss, d->ss_s), *dp3 = gb_virtual(g, "dP - D", F, d->ss, d->ss_s);
    gb_mm(g, "dO8 V8^T", dout, vt, dp0);
    void *dp2 = gb_mul(g, "dP descale_v", gb_mul(g, "dP descale_dO", dp0, dsdo, d->ss, d->ss_s), dsv, d->ss, d->ss_s);
    gb_pw(g, "dP - D", DN_PW_SUB, F, dp2, dd, NULL, dp3, -1);
    void *ds = gb_mul(g, "dS", gb_mul(g, "(dP - D) P", dp3, p, d->ss, d->ss_s), attn, d->ss, d->ss_s);
    gb_reduce(g, "amax_dP", DN_REDUCE_AMAX, ds, am_dp);
    void *ds8 = gb_virtual(g, "dS8", gd, d->ss, d->ss_s), *ds8t = gb_virtual(g, "dS8^T", gd, d->ss, d->sst_s);
    gb_pw(g, "dS8 = dS scale_dP", DN_PW_MUL, F, ds, sdp, NULL, ds8, -1);

    /* dQ = dS8 K8; dK = dS8ᵀ Q8 */
    void *kk = gb_virtual(g, "K8", E, d->kv, d->kv_s);
    gb_reshape(g, "K8", kt, kk);
    gb_mm_fp8(g, "dQ = dS8 K8", ds8, kk, dsdp, dsk, sdq, dq, am_dq, d);
    gb_reshape(g, "dS8^T", ds8, ds8t);
    gb_mm_fp8(g, "dK = dS8^T Q8", ds8t, q, dsdp, dsq, sdk, dk, am_dk, d);
}

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */
/* ------------------------------------------------------------------------ */

/* The operation graph, heuristics (mode A), the first engine config that
 * finalizes, the buffer. p->ok = 1, or p->why. */
static void plan_build(const dn_api *api, void *handle, dn_plan *p, size_t *buf_bytes)
{
    gb g;
    memset(&g, 0, sizeof g);
    g.api = api, g.p = p, g.next_uid = DN_UID_VIRTUAL;
    (void)graph_forward, (void)graph_backward; /* the BF16 graphs are attention_cudnn.cu's */
    dn_dims d;
    dims_of(&p->key, &d);
    const int64_t dir = p->key.dir, bwd = dir == DIR_BWD || dir == DIR_BWD_CS;
    if (bwd)
        graph_backward_fp8(&g, &d, dir == DIR_BWD_CS, p->key.e5m2 ? DN_FP8_E5M2 : DN_FP8_E4M3);
    else
        graph_forward_fp8(&g, &d);
    void *opg = gb_new(&g, DN_D_OPGRAPH, "FP8 operation graph");
    gb_set(&g, opg, DN_A_OPGRAPH_HANDLE, DN_T_HANDLE, 1, &handle, "FP8 operation graph");
    gb_set(&g, opg, DN_A_OPGRAPH_OPS, DN_T_DESCRIPTOR, g.n_ops, g.ops, "FP8 operation graph");
    gb_fin(&g, opg, "FP8 operation graph");
    void *heur = gb_new(&g, DN_D_ENGINEHEUR, "FP8 heuristics");
    const int mode = DN_HEUR_MODE_A;
    gb_set(&g, heur, DN_A_HEUR_OPGRAPH, DN_T_DESCRIPTOR, 1, &opg, "FP8 heuristics");
    gb_set(&g, heur, DN_A_HEUR_MODE, DN_T_HEUR_MODE, 1, &mode, "FP8 heuristics");
    gb_fin(&g, heur, "FP8 heuristics");
    void *cfg[DN_MAX_CONFIGS];
    int64_t n = 0;
    for (int i = 0; i < DN_MAX_CONFIGS; i++) cfg[i] = gb_new(&g, DN_D_ENGINECFG, "FP8 engine config");
    if (g.failed) return;
    if (api->b_get(heur, DN_A_HEUR_RESULTS, DN_T_DESCRIPTOR, DN_MAX_CONFIGS, &n, cfg) != DN_OK || n <= 0) {
        snprintf(p->why, sizeof p->why, "heuristics offer no engine for the FP8 graph");
        return;
    }
    for (int64_t i = 0; i < n && !p->plan && !g.failed; i++) {
        void *plan = gb_new(&g, DN_D_PLAN, "FP8 execution plan");
        gb_set(&g, plan, DN_A_PLAN_HANDLE, DN_T_HANDLE, 1, &handle, "FP8 execution plan");
        gb_set(&g, plan, DN_A_PLAN_CONFIG, DN_T_DESCRIPTOR, 1, &cfg[i], "FP8 execution plan");
        if (!g.failed && api->b_finalize(plan) == DN_OK) p->plan = plan;
    }
    int64_t ws = 0, got = 0;
    if (!p->plan || api->b_get(p->plan, DN_A_PLAN_WORKSPACE, DN_T_INT64, 1, &got, &ws) != DN_OK || ws < 0) {
        if (!g.failed) snprintf(p->why, sizeof p->why, "none of %lld engine configs finalized", (long long)n);
        p->plan = NULL;
        return;
    }
    const dn_key *k = &p->key;
    p->ws_bytes = (size_t)ws;
    p->stats_off = f8i_align256(p->ws_bytes);
    /* O8 after Stats; the backward's dQKV8 (delayed scaling), 3 times its size */
    const size_t o8_bytes = (size_t)(k->B * k->S * k->nh * k->hd) * (dir == DIR_BWD ? 3 : dir == DIR_BWD_CS ? 0 : 1);
    p->o8_off = p->stats_off + f8i_align256((size_t)(k->B * k->nh * k->S) * sizeof(float));
    p->sc_off = p->o8_off + f8i_align256(o8_bytes);
    *buf_bytes = p->sc_off + SC_AT(bwd ? (int)SB_COUNT : (int)SC_COUNT) * sizeof(float);
    p->ok = 1;
}

/* Every descriptor of p, the last made first (the buffer is the cache's); p stays as a refusal. */
static void plan_release(const dn_api *api, dn_plan *p)
{
    while (p->n_descs > 0) {
        void *desc = p->descs[--p->n_descs];
        if (desc) (void)api->b_destroy(desc);
    }
    free(p->descs);
    p->descs = NULL, p->cap_descs = 0, p->buf = NULL, p->plan = NULL;
}

/* The plan cache's view (plan_cache.cuh): arg is an fp8_build_arg. */
typedef struct fp8_build_arg {
    dn_key key;
    const dn_api *api;
    void *handle;
} fp8_build_arg;

static f8_status fp8_kind_build(f8_ctx *ctx, void *body, const void *arg, size_t *buf_bytes)
{
    const fp8_build_arg *b = (const fp8_build_arg *)arg;
    dn_plan *p = (dn_plan *)body;
    (void)ctx;
    p->key = b->key, p->api = b->api;
    plan_build(b->api, b->handle, p, buf_bytes);
    if (!p->ok) plan_release(b->api, p), *buf_bytes = 0;
    (void)cudaGetLastError(); /* nothing sticky from cuDNN's internals leaks into f8's launch checks */
    return F8_OK; /* a refusal is kept like a plan: answered once */
}

static void fp8_kind_release(f8_ctx *ctx, void *body)
{
    dn_plan *p = (dn_plan *)body;
    (void)ctx;
    if (p->api) plan_release((const dn_api *)p->api, p);
}

static void describe_key(const dn_key *k, char *out, size_t size)
{
    const int bwd = k->dir == DIR_BWD || k->dir == DIR_BWD_CS, cs = k->dir == DIR_BWD_CS;
    snprintf(out, size, "FP8 %s%s%s B%lld S%lld nh%lld hd%lld", bwd ? "backward" : "forward", cs ? " (current scaling)" : "",
             bwd && k->e5m2 ? " E5M2" : "", (long long)k->B, (long long)k->S, (long long)k->nh, (long long)k->hd);
}

static void fp8_kind_describe(const void *arg, char *out, size_t size)
{
    describe_key(&((const fp8_build_arg *)arg)->key, out, size);
}

static const f8i_plan_kind fp8_kind = {"attention (cuDNN FP8)", sizeof(dn_plan), 0, fp8_kind_build, fp8_kind_release,
                                       fp8_kind_describe};

/* The ready plan of this shape, built now if new; NULL: f8's kernel runs
 * (cuDNN absent, older than the gate, the ctx's mode f8's kernels, the shape
 * declined or refused), unless *st is an error (plan_cache.cuh: a new shape
 * inside a capture, a buffer that cannot be allocated). */
static dn_plan *plan_for(f8_ctx *ctx, int dir, int e5m2, int64_t B, int64_t S, int64_t nh, int64_t hd,
                         const dn_api **api_out, void **handle_out, f8_status *st)
{
    *st = F8_OK;
    if (hd != 64 && hd != 128) return NULL;
    if ((dir == DIR_BWD || dir == DIR_BWD_CS) && hd != 128) return NULL; /* Hopper's FP8 backward: hd 128 only */
    void *handle = NULL;
    size_t version = 0;
    const dn_api *api = f8i_cudnn_attn_handle(ctx, &handle, &version, st);
    if (!api || version < F8I_CUDNN_FP8_MIN_VERSION) return NULL;
    *api_out = api, *handle_out = handle;
    const fp8_build_arg arg = {{dir, e5m2, B, S, nh, hd, nh}, api, handle};
    return dn_plan_cached(ctx, &fp8_kind, &arg.key, &arg, st);
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

#define FP8_THREADS 256

/* Before cuDNN: the scalars it reads, each at 16 bytes of its own, and its
 * two amax outputs zeroed; under current scaling (s_now > 0) S's scale of
 * this call written into the S slot first. One thread. */
static __global__ void fp8_prep_kernel(const float *dq, float *s_scale, float *s_scale_inv, const float *o_scale, float s_now,
                                       float *sc)
{
    if (s_now > 0.0f) *s_scale = s_now, *s_scale_inv = __fdiv_rn(1.0f, s_now);
    sc[SC_AT(SC_AMAX_S)] = 0.0f;
    sc[SC_AT(SC_AMAX_O)] = 0.0f;
    sc[SC_AT(SC_DQ)] = *dq;
    sc[SC_AT(SC_SCALE_S)] = *s_scale;
    sc[SC_AT(SC_DESCALE_S)] = *s_scale_inv;
    sc[SC_AT(SC_SCALE_O)] = *o_scale;
}

/* Two BF16 values in one word: bf16(decode(code)·ds) of the codes (E4M3,
 * or E5M2) at bits [sh, sh + 8) and [sh + 8, sh + 16) of w, the first in
 * the low half. */
static __device__ __forceinline__ uint32_t dequant2(uint32_t w, int sh, float ds, int e5m2)
{
    const uint32_t lo = f8i_bf16_from_float(__fmul_rn(f8i_fp8_decode((uint8_t)(w >> sh), e5m2), ds));
    const uint32_t hi = f8i_bf16_from_float(__fmul_rn(f8i_fp8_decode((uint8_t)(w >> (sh + 8)), e5m2), ds));
    return lo | hi << 16;
}

/* 16 codes (one 16-byte load) to 16 BF16 values (two 16-byte stores) at item i. */
static __device__ __forceinline__ void dequant16(const uint8_t *codes, int64_t i, float ds, int e5m2, uint4 *a, uint4 *b)
{
    const uint4 w = ((const uint4 *)codes)[i];
    *a = make_uint4(dequant2(w.x, 0, ds, e5m2), dequant2(w.x, 16, ds, e5m2), dequant2(w.y, 0, ds, e5m2),
                    dequant2(w.y, 16, ds, e5m2));
    *b = make_uint4(dequant2(w.z, 0, ds, e5m2), dequant2(w.z, 16, ds, e5m2), dequant2(w.w, 0, ds, e5m2),
                    dequant2(w.w, 16, ds, e5m2));
}

/* After cuDNN: lse[i] = Stats[i] / c in place; y = o = bf16(O8 · descale_o)
 * (o may be NULL); the call's amax_s and amax_o maxed into the slots'
 * accumulators and (an FP8 backward's saved O8) O8's descale written
 * (thread 0). Vectorized: item i is 16 elements (one 16-byte load of
 * codes, two 16-byte stores of BF16 each to y and o; every pointer 16-byte
 * aligned and C a multiple of 16: the caller's checks). Grid: 1-D,
 * grid-stride over max(n_lse, n16); block FP8_THREADS; a thread owns item
 * i of each array. */
static __global__ void __launch_bounds__(FP8_THREADS)
    fp8_finish_kernel(float *lse, int64_t n_lse, float c, const uint8_t *o8, int64_t n16, const float *o_scale_inv,
                      uint16_t *y, uint16_t *o, const float *sc, float *s_amax, float *o_amax, float *o8_scale_inv)
{
    const float dso = *o_scale_inv;
    const int64_t m = n_lse > n16 ? n_lse : n16, step = (int64_t)gridDim.x * FP8_THREADS;
    const int64_t first = (int64_t)blockIdx.x * FP8_THREADS + threadIdx.x;
    uint4 *y4 = (uint4 *)y, *o4 = (uint4 *)o;
    for (int64_t i = first; i < m; i += step) {
        if (i < n_lse) lse[i] = __fdiv_rn(lse[i], c);
        if (i >= n16) continue;
        uint4 a, b;
        dequant16(o8, i, dso, 0, &a, &b);
        y4[2 * i] = a, y4[2 * i + 1] = b;
        if (o) o4[2 * i] = a, o4[2 * i + 1] = b;
    }
    if (first == 0) { /* amaxes are non-negative: their bits order as the floats do */
        if (o8_scale_inv) *o8_scale_inv = dso; /* O8 kept for the FP8 backward: its descale */
        atomicMax((int *)s_amax, __float_as_int(sc[SC_AT(SC_AMAX_S)]));
        atomicMax((int *)o_amax, __float_as_int(sc[SC_AT(SC_AMAX_O)]));
    }
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* One execution of p with these tensors (its workspace at the buffer's
 * start). On an error the plan is refused from now on (p->why says why)
 * and f8's path runs the call. */
static bool run_pack(const dn_api *api, void *handle, dn_plan *p, int n, const int64_t *uids, void *const *ptrs)
{
    void *vp = NULL;
    dn_status ds = api->b_create(DN_D_VARIANT_PACK, &vp);
    if (ds == DN_OK) ds = api->b_set(vp, DN_A_VP_UIDS, DN_T_INT64, n, uids);
    if (ds == DN_OK) ds = api->b_set(vp, DN_A_VP_PTRS, DN_T_VOID_PTR, n, ptrs);
    if (ds == DN_OK) ds = api->b_set(vp, DN_A_VP_WORKSPACE, DN_T_VOID_PTR, 1, &p->buf);
    if (ds == DN_OK) ds = api->b_finalize(vp);
    if (ds == DN_OK) ds = api->b_execute(handle, p->plan, vp);
    if (vp) (void)api->b_destroy(vp);
    if (ds == DN_OK) return true;
    snprintf(p->why, sizeof p->why, "cudnnBackendExecute: %s (%d)", api->error_string(ds), ds);
    p->ok = 0;
    (void)cudaGetLastError();
    return false;
}

f8_status f8i_cudnn_fp8_attn_fwd(f8_ctx *ctx, const f8i_attn_fwd_args *a, int *ran)
{
    *ran = 0;
    const int64_t G = a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
    if (G != a->n_head || a->dtype != F8_DTYPE_BF16 || !aligned16(a->qkv) || !aligned16(a->y) || !aligned16(a->o) ||
        !aligned16(a->o8))
        return F8_OK;
    const dn_api *api = NULL;
    void *handle = NULL;
    f8_status st = F8_OK;
    dn_plan *p = plan_for(ctx, DIR_FWD, 0, a->batch, a->seq, a->n_head, a->head_dim, &api, &handle, &st);
    if (!p) return st;
    cudaStream_t stream = f8i_stream(ctx);
    unsigned char *buf = (unsigned char *)p->buf;
    float *sc = (float *)(buf + p->sc_off);
    uint8_t *o8 = a->o8 ? a->o8 : buf + p->o8_off; /* an FP8 backward's saved O8 is written in place */
    F8I_COUNT_LAUNCHES(ctx, 1);
    fp8_prep_kernel<<<1, 1, 0, stream>>>(a->qkv_scale_inv, a->s_scale, a->s_scale_inv, a->o_scale, a->s_scale_now, sc);
    F8I_TRY(f8i_cuda_launch_check(ctx, "attention (cuDNN FP8) fp8_prep_kernel"));

    const int64_t C = a->n_head * a->head_dim, rows = a->batch * a->n_head * a->seq, n = a->batch * a->seq * C;
    const uint8_t *qkv = (const uint8_t *)a->qkv;
    float *stats = a->lse ? a->lse : (float *)(buf + p->stats_off);
    float scale = a->scale, neg_inf = -INFINITY; /* -inf: cuDNN >= 9.10, as the frontend */
    float *dq = sc + SC_AT(SC_DQ);
    const int64_t uids[15] = {U_Q,         U_K,         U_V,         U_O,         U_STATS,   U_SCALE,  U_NEG_INF, U_DESCALE_Q,
                              U_DESCALE_K, U_DESCALE_V, U_SCALE_S,   U_DESCALE_S, U_SCALE_O, U_AMAX_S, U_AMAX_O};
    void *const ptrs[15] = {(void *)qkv,
                            (void *)(qkv + C),
                            (void *)(qkv + 2 * C),
                            (void *)o8,
                            stats,
                            &scale,
                            &neg_inf,
                            dq,
                            dq,
                            dq,
                            sc + SC_AT(SC_SCALE_S),
                            sc + SC_AT(SC_DESCALE_S),
                            sc + SC_AT(SC_SCALE_O),
                            sc + SC_AT(SC_AMAX_S),
                            sc + SC_AT(SC_AMAX_O)};
    /* refused: f8's kernel runs this call (the prep kernel wrote the plan's buffer and, under current
     * scaling, the S slot's scale that kernel writes too) */
    if (!run_pack(api, handle, p, 15, uids, ptrs)) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 2);
    f8i_cuda(ctx)->attn_last_path = F8I_ATTN_PATH_CUDNN;
    *ran = 1;
    const int64_t n_lse = a->lse ? rows : 0, n16 = n / 16, m = n_lse > n16 ? n_lse : n16;
    fp8_finish_kernel<<<grid_size(ctx, m > 0 ? m : 1, FP8_THREADS), FP8_THREADS, 0, stream>>>(
        a->lse, n_lse, a->scale, o8, n16, a->o_scale_inv, (uint16_t *)a->y, (uint16_t *)a->o, sc, a->s_amax, a->o_amax,
        a->o8_scale_inv);
    return f8i_cuda_launch_check(ctx, "attention (cuDNN FP8) fp8_finish_kernel");
}

/* ------------------------------------------------------------------------ */
/* The backward                                                              */
/* ------------------------------------------------------------------------ */

/* The scales the backward graph reads (device scalars of the slots and the
 * saved state); dso and sdqkv NULL under current scaling (by-value 1s). */
typedef struct fp8_bwd_scalars {
    const float *dq, *dso, *ddo, *ds, *dsdp, *ss, *sdp, *sdqkv;
} fp8_bwd_scalars;

/* Before cuDNN's FP8 backward: Stats = L·c into the plan's buffer (cuDNN's
 * units, as the BF16 backward converts them); thread 0 also copies the
 * scales, 16 bytes each, and zeroes the four amax outputs. Grid-stride
 * over the rows; block FP8_THREADS. */
static __global__ void __launch_bounds__(FP8_THREADS)
    fp8_bwd_prep_kernel(const float *lse, float *stats, int64_t rows, float c, fp8_bwd_scalars in, float *sc)
{
    const int64_t first = (int64_t)blockIdx.x * FP8_THREADS + threadIdx.x;
    for (int64_t i = first; i < rows; i += (int64_t)gridDim.x * FP8_THREADS) stats[i] = __fmul_rn(lse[i], c);
    if (first == 0) {
        sc[SC_AT(SB_DQ)] = *in.dq;
        sc[SC_AT(SB_DSO)] = in.dso ? *in.dso : 1.0f;
        sc[SC_AT(SB_DSDO)] = *in.ddo;
        sc[SC_AT(SB_DSS)] = *in.ds;
        sc[SC_AT(SB_DSDP)] = *in.dsdp;
        sc[SC_AT(SB_SS)] = *in.ss;
        sc[SC_AT(SB_SDP)] = *in.sdp;
        sc[SC_AT(SB_SDQKV)] = in.sdqkv ? *in.sdqkv : 1.0f;
        for (int k = SB_AMAX_DQ; k <= SB_AMAX_DP; k++) sc[SC_AT(k)] = 0.0f;
    }
}

/* After it: under delayed scaling dqkv = bf16(gd(dQKV8) · descale_dqkv)
 * over n16 items of 16 elements (n16 = 0 under current scaling: cuDNN
 * wrote dqkv); the call's amax_dP and max(amax_dQ, amax_dK, amax_dV) maxed
 * into the slots' accumulators (thread 0). Grid-stride; block
 * FP8_THREADS. */
static __global__ void __launch_bounds__(FP8_THREADS)
    fp8_bwd_finish_kernel(const uint8_t *g8, int e5m2, const float *dsdqkv, uint16_t *dqkv, int64_t n16, const float *sc,
                          float *dp_amax, float *dqkv_amax)
{
    const int64_t first = (int64_t)blockIdx.x * FP8_THREADS + threadIdx.x;
    if (n16 > 0) {
        const float dsq = *dsdqkv;
        uint4 *d4 = (uint4 *)dqkv;
        for (int64_t i = first; i < n16; i += (int64_t)gridDim.x * FP8_THREADS)
            dequant16(g8, i, dsq, e5m2, &d4[2 * i], &d4[2 * i + 1]);
    }
    if (first == 0) { /* amaxes are non-negative: their bits order as the floats do */
        const float g = fmaxf(fmaxf(sc[SC_AT(SB_AMAX_DQ)], sc[SC_AT(SB_AMAX_DK)]), sc[SC_AT(SB_AMAX_DV)]);
        atomicMax((int *)dp_amax, __float_as_int(sc[SC_AT(SB_AMAX_DP)]));
        atomicMax((int *)dqkv_amax, __float_as_int(g));
    }
}

f8_status f8i_cudnn_fp8_attn_bwd(f8_ctx *ctx, const f8i_attn_bwd_args *a, int *ran)
{
    *ran = 0;
    const int64_t G = a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
    const int cs = a->dqkv_scale == NULL, e5m2 = a->grad_dtype == F8_DTYPE_E5M2;
    const void *o = cs ? a->o : (const void *)a->o8;
    if (G != a->n_head || !aligned16(a->qkv) || !aligned16(a->dqkv) || !aligned16(a->do8) || !aligned16(o))
        return F8_OK;
    const dn_api *api = NULL;
    void *handle = NULL;
    f8_status st = F8_OK;
    dn_plan *p = plan_for(ctx, cs ? DIR_BWD_CS : DIR_BWD, e5m2, a->batch, a->seq, a->n_head, a->head_dim, &api, &handle,
                          &st);
    if (!p) return st;
    cudaStream_t stream = f8i_stream(ctx);
    unsigned char *buf = (unsigned char *)p->buf;
    float *sc = (float *)(buf + p->sc_off), *stats = (float *)(buf + p->stats_off);
    uint8_t *g8 = cs ? NULL : buf + p->o8_off;
    const int64_t C = a->n_head * a->head_dim, rows = a->batch * a->n_head * a->seq, n = a->batch * a->seq * 3 * C;
    const fp8_bwd_scalars in = {a->qkv_scale_inv, cs ? NULL : a->o8_scale_inv, a->do_scale_inv, a->s_scale_inv,
                                a->dp_scale_inv,  a->s_scale,                   a->dp_scale,     a->dqkv_scale};
    F8I_COUNT_LAUNCHES(ctx, 1);
    fp8_bwd_prep_kernel<<<grid_size(ctx, rows, FP8_THREADS), FP8_THREADS, 0, stream>>>(a->lse, stats, rows, a->scale, in,
                                                                                       sc);
    F8I_TRY(f8i_cuda_launch_check(ctx, "attention (cuDNN FP8) fp8_bwd_prep_kernel"));

    const uint8_t *qkv = (const uint8_t *)a->qkv;
    unsigned char *dst = cs ? (unsigned char *)a->dqkv : g8; /* dQ, dK, dV in qkv's layout: BF16, or the codes */
    const int64_t es = cs ? 2 : 1;
    float scale = a->scale, neg_inf = -INFINITY, one = 1.0f;
    void *const one_or = (void *)&one;
    enum { N = 27 };
    const int64_t uids[N] = {U_Q,          U_K,          U_V,          U_O,          U_DO,         U_STATS,      U_DQ,
                             U_DK,         U_DV,         U_SCALE,      U_NEG_INF,    U_DESCALE_Q,  U_DESCALE_K,  U_DESCALE_V,
                             U_DESCALE_O,  U_DESCALE_DO, U_DESCALE_S,  U_DESCALE_DP, U_SCALE_S,    U_SCALE_DP,   U_SCALE_DQ,
                             U_SCALE_DK,   U_SCALE_DV,   U_AMAX_DQ,    U_AMAX_DK,    U_AMAX_DV,    U_AMAX_DP};
    float *dqs = sc + SC_AT(SB_DQ), *sg = sc + SC_AT(SB_SDQKV);
    void *const ptrs[N] = {(void *)qkv,
                           (void *)(qkv + C),
                           (void *)(qkv + 2 * C),
                           (void *)o,
                           (void *)a->do8,
                           stats,
                           dst,
                           dst + C * es,
                           dst + 2 * C * es,
                           &scale,
                           &neg_inf,
                           dqs,
                           dqs,
                           dqs,
                           cs ? one_or : (void *)(sc + SC_AT(SB_DSO)),
                           sc + SC_AT(SB_DSDO),
                           sc + SC_AT(SB_DSS),
                           sc + SC_AT(SB_DSDP),
                           sc + SC_AT(SB_SS),
                           sc + SC_AT(SB_SDP),
                           cs ? one_or : (void *)sg,
                           cs ? one_or : (void *)sg,
                           cs ? one_or : (void *)sg,
                           sc + SC_AT(SB_AMAX_DQ),
                           sc + SC_AT(SB_AMAX_DK),
                           sc + SC_AT(SB_AMAX_DV),
                           sc + SC_AT(SB_AMAX_DP)};
    if (!run_pack(api, handle, p, N, uids, ptrs)) return F8_OK; /* f8's path runs the call */
    F8I_COUNT_LAUNCHES(ctx, 2);
    f8i_cuda(ctx)->attn_last_path = F8I_ATTN_PATH_CUDNN;
    *ran = 1;
    const int64_t nq = cs ? 0 : n / 16; /* 3C is a multiple of 16 (head_dim 128) */
    fp8_bwd_finish_kernel<<<grid_size(ctx, nq > 0 ? nq : 1, FP8_THREADS), FP8_THREADS, 0, stream>>>(
        g8, e5m2, a->dqkv_scale_inv, (uint16_t *)a->dqkv, nq, sc, a->dp_amax, a->dqkv_amax);
    return f8i_cuda_launch_check(ctx, "attention (cuDNN FP8) fp8_bwd_finish_kernel");
}

/* f8i_cuda_attn_info's FP8 part: how many FP8 plans are ready and refused,
 * and one refusal's shape and reason (cuDNN's words), so a call that fell
 * back to f8's kernel says why. */
typedef struct fp8_census {
    int ready, refused;
    char refusal[2 * DN_WHY];
} fp8_census;

static void census(void *body, void *user)
{
    const dn_plan *p = (const dn_plan *)body;
    fp8_census *c = (fp8_census *)user;
    if (p->ok) {
        c->ready++;
        return;
    }
    char shape[96];
    describe_key(&p->key, shape, sizeof shape);
    if (c->refused++ == 0) snprintf(c->refusal, sizeof c->refusal, "; refused: %s: %s", shape, p->why);
}

void f8i_cudnn_fp8_attn_info(f8_ctx *ctx, char *out, size_t size)
{
    fp8_census c = {0, 0, ""};
    f8i_plan_each(ctx, &fp8_kind, census, &c);
    snprintf(out, size, "FP8 plans: %d ready, %d refused%s", c.ready, c.refused, c.refusal);
}

f8_status f8i_cudnn_fp8_attn_takes(f8_ctx *ctx, int64_t batch, int64_t seq, int64_t n_head, int64_t n_kv_head,
                                   int64_t head_dim, int backward, int *takes)
{
    *takes = 0;
    if (n_kv_head > 0 && n_kv_head != n_head) return F8_OK; /* GQA: f8's kernel (as the call) */
    const dn_api *api = NULL;
    void *handle = NULL;
    f8_status st = F8_OK;
    /* the graph attention.c's call asks for: the recipe decides the variant, its backward format dO's */
    const int cs = f8i_recipe_current(ctx), e5m2 = backward && f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD) == F8_DTYPE_E5M2;
    const int dir = backward ? (cs ? DIR_BWD_CS : DIR_BWD) : DIR_FWD;
    *takes = plan_for(ctx, dir, e5m2, batch, seq, n_head, head_dim, &api, &handle, &st) != NULL;
    return st;
}
