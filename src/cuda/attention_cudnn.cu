/*
 * attention_cudnn.cu — causal attention through cuDNN 9's fused flash
 * attention (the backend "graph" API of cudnn_graph.h), with libcudnn
 * loaded at run time. attention.cu asks here first; wherever this file says
 * no, f8's own kernels run.
 *
 * Design note.
 *  - Loading. No link-time dependency: libcudnn.so.9 (then libcudnn.so) is
 *    dlopen'ed per ctx, the first time an attention call runs outside a
 *    capture, and the dozen functions used are resolved with dlsym. The
 *    backend API's enums are declared below by value (the ABI numbers of
 *    cudnn_graph.h), so f8 builds without cuDNN's headers; where the header
 *    is present the numbers are checked against it at compile time. A
 *    missing library, a cuDNN older than 9.0 or a failed cudnnCreate leaves
 *    the reason in the state (f8i_cuda_attn_info) and every call on f8's
 *    kernels; nothing is printed and nothing is an error.
 *  - The graphs are the decomposition cuDNN's pattern matcher fuses into its
 *    flash-attention engines, as cudnn-frontend's SDPA nodes build them (the
 *    frontend is not used; its node code was read for the facts):
 *      forward  S = Q·Kᵀ; S·c; causal select(row >= col, S, -inf) from two
 *               GEN_INDEX and CMP_GE; m = max_j; e = exp(S - m); l = Σ_j e;
 *               Stats = m + log l; P = e / l (BF16); O = P·V.
 *      backward Σ = reduce_d(dO ⊙ O)·1 (the D of attention.h, written to the
 *               op's d workspace); P = exp(select(S·c - Stats)); dV = Pᵀ·dO;
 *               dS = (dO·Vᵀ - Σ)·P·c; dK = dSᵀ·Q; dQ = dS·K.
 *    Q, K, V, dQ, dK, dV are strided views of f8's (B·S, 3C) rows (no
 *    copies); Kᵀ and Vᵀ are the same memory with the last two dims swapped.
 *    The FP8 forward (f8_attention_config.fp8) is attention_cudnn_fp8.cu's,
 *    on this file's library and handle (f8i_cudnn_attn_handle).
 *  - Determinism. The backward exists in two forms: with dQ accumulated in
 *    an FP32 dQ_accum tensor (atomics: fast, not reproducible) or with dQ
 *    written directly (cuDNN's "dP workspace" algorithm: dS kept in a
 *    B·nh·S²·2-byte workspace, each gradient a plain product: bitwise
 *    reproducible). cudnn-frontend's set_deterministic_algorithm(true) picks
 *    the second on Hopper exactly by leaving dQ_accum out of the graph; f8
 *    promises reproducible runs, so that is the default, and the atomic
 *    form is an opt-in (f8_ctx_config.attention_nondeterministic, or the
 *    test hook).
 *  - Saved state keeps attention.h's meaning on either path: cuDNN's Stats
 *    are c·m + ln l (natural log of the scaled scores); f8's L is
 *    m + log2(l)/c2 = Stats / c. The forward converts in place after cuDNN
 *    (one small kernel, which also copies y to the saved O), the backward
 *    converts back into its own workspace before cuDNN runs (a second small
 *    kernel), so a forward on one path and a backward on the other agree.
 *  - Plans: one per (direction, B, S, n_head, head_dim, kv heads,
 *    deterministic), built on the first eager call of that shape (heuristics
 *    mode A, the first engine config that finalizes) and kept in the ctx's
 *    plan cache (plan_cache.cuh) with its own device buffer (cuDNN's
 *    workspace, then the Stats it reads or writes, then dQ_accum), never
 *    freed before the ctx: a captured graph keeps pointing at it. A shape
 *    that fails to build is remembered as refused (f8's kernels, eagerly or
 *    captured alike). Under capture nothing is loaded, built or allocated:
 *    cuDNN's documentation does not count plan building among what a
 *    capture may contain (the finalize of its runtime-fused engines compiles
 *    and loads kernels, and the buffer is a cudaMalloc, which f8 never does
 *    while capturing), so a shape cuDNN would be asked for and has not seen
 *    eagerly is F8_ERR_STATE, naming the shape and asking for one eager step
 *    first (the capture is spoiled), never a quiet run of f8's kernels whose
 *    numerics would depend on what ran before. The trainer warms up eagerly
 *    before it captures, so its captured step takes the plans.
 *  - Launch counters: cuDNN's execute counts as one launch, whatever it
 *    issues; each small kernel of this file as one more.
 */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_state.cuh"
#include "kernels_common.cuh"
#include "cudnn_api.cuh" /* the backend API by value, and the function table */

/* ------------------------------------------------------------------------ */
/* State                                                                     */
/* ------------------------------------------------------------------------ */

#define DN_WHY 384          /* bytes of a reason */
#define DN_MAX_CONFIGS 8    /* engine configs tried per plan, in heuristics order */

/* Tensor uids of a graph's real (non-virtual) tensors; virtual ones count from DN_UID_VIRTUAL. */
enum {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SUM, U_DQ_ACC, U_SCALE, U_ONE, U_NEG_INF,
    DN_UID_VIRTUAL = 100
};

typedef struct dn_key {
    int64_t dir;      /* 0 forward, 1 backward */
    int64_t det;      /* backward: 1 deterministic form, 0 dQ_accum form; forward: 1 */
    int64_t B, S, nh, hd;
    int64_t nkv;      /* G: K and V heads (GQA when < nh) */
} dn_key;

typedef struct dn_plan { /* a plan cache body (plan_cache.cuh) */
    dn_key key;
    int ok;              /* 1: usable; 0: refused for good (why) */
    void *plan;          /* the execution plan (one of descs) */
    void **descs;        /* (n_descs) every descriptor made for it, destroyed with it */
    int n_descs, cap_descs;
    void *buf;           /* device, the cache entry's own: cuDNN workspace [0, ws_bytes), Stats at stats_off, dQ_accum at acc_off */
    size_t ws_bytes, stats_off, acc_off, acc_bytes;
    int64_t engine;      /* global index of the engine that finalized (-1 unknown) */
    int64_t config;      /* its place in the heuristics' list, of n_configs offered */
    int64_t n_configs;
    int nondet_note;     /* its numerical notes say NONDETERMINISTIC */
    float neg_inf;       /* the masked score: -inf from cuDNN 9.10 on, -FLT_MAX before (as the frontend) */
    char why[DN_WHY];
} dn_plan;

struct f8i_attn_cudnn {
    dn_api api;
    int ready;           /* library loaded and handle created; else why says why not */
    void *handle;        /* cudnnHandle_t */
    cudaStream_t stream; /* the handle's stream */
    size_t version;      /* cudnnGetVersion() */
    const char *lib_name;
    int n_plans;         /* plans built or refused (kept in the ctx's plan cache) */
    char why[DN_WHY];
    char info[5 * DN_WHY]; /* f8i_cuda_attn_info's text (with the FP8 plans') */
    char last_plan[2 * DN_WHY]; /* the most recent plan built or refused, in words */
};

/* The descriptors of p (its buffer is the plan cache entry's). */
static void plan_release(const dn_api *api, dn_plan *p)
{
    for (int i = p->n_descs - 1; i >= 0; i--)
        if (p->descs[i]) (void)api->b_destroy(p->descs[i]);
    free(p->descs);
    p->descs = NULL, p->n_descs = p->cap_descs = 0, p->buf = NULL, p->plan = NULL;
}

void f8i_cuda_attn_cudnn_destroy(f8_ctx *ctx)
{
    if (!ctx || !ctx->be_state) return;
    f8i_attn_cudnn *c = f8i_cuda(ctx)->attn_cudnn;
    if (!c) return;
    if (c->handle) (void)c->api.destroy(c->handle);
    if (c->api.lib) (void)dlclose(c->api.lib);
    free(c);
    f8i_cuda(ctx)->attn_cudnn = NULL;
    (void)cudaGetLastError();
}

/* dlopen + dlsym + version check + cudnnCreate; on failure c->why says why. */
static void state_load(f8_ctx *ctx, f8i_attn_cudnn *c)
{
    dn_api *a = &c->api;
    static const char *const names[] = {"libcudnn.so.9", "libcudnn.so"};
    char err[DN_WHY / 2] = "";
    for (int i = 0; i < 2 && !a->lib; i++) {
        a->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (a->lib) c->lib_name = names[i];
        else if (i == 0) {
            const char *e = dlerror();
            snprintf(err, sizeof err, "%s", e ? e : "?");
        }
    }
    if (!a->lib) {
        snprintf(c->why, sizeof c->why, "cuDNN not loaded: dlopen(libcudnn.so.9) failed: %s", err);
        return;
    }
#define DN_SYM(field, name)                                                                                 \
    do {                                                                                                  \
        a->field = (decltype(a->field))dlsym(a->lib, name);                                               \
        if (!a->field) {                                                                                  \
            snprintf(c->why, sizeof c->why, "cuDNN from %s lacks %s (not cuDNN 9?)", c->lib_name, name); \
            return;                                                                                       \
        }                                                                                                 \
    } while (0)
    DN_SYM(get_version, "cudnnGetVersion");
    DN_SYM(create, "cudnnCreate");
    DN_SYM(destroy, "cudnnDestroy");
    DN_SYM(set_stream, "cudnnSetStream");
    DN_SYM(error_string, "cudnnGetErrorString");
    DN_SYM(b_create, "cudnnBackendCreateDescriptor");
    DN_SYM(b_destroy, "cudnnBackendDestroyDescriptor");
    DN_SYM(b_set, "cudnnBackendSetAttribute");
    DN_SYM(b_get, "cudnnBackendGetAttribute");
    DN_SYM(b_finalize, "cudnnBackendFinalize");
    DN_SYM(b_execute, "cudnnBackendExecute");
#undef DN_SYM
    a->last_error = (void (*)(char *, size_t))dlsym(a->lib, "cudnnGetLastErrorString"); /* 9.0+; optional */
    c->version = a->get_version();
    if (c->version < 90000) {
        snprintf(c->why, sizeof c->why, "cuDNN %zu from %s is older than 9.0", c->version, c->lib_name);
        return;
    }
    if (cudaSetDevice(f8i_cuda(ctx)->device) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(c->why, sizeof c->why, "cudaSetDevice(%d) failed before cudnnCreate", f8i_cuda(ctx)->device);
        return;
    }
    void *h = NULL;
    const dn_status st = a->create(&h);
    if (st != DN_OK) {
        snprintf(c->why, sizeof c->why, "cudnnCreate failed: %s (%d)", a->error_string(st), st);
        (void)cudaGetLastError();
        return;
    }
    c->handle = h;
    c->stream = f8i_stream(ctx);
    const dn_status ss = a->set_stream(h, c->stream);
    if (ss != DN_OK) {
        snprintf(c->why, sizeof c->why, "cudnnSetStream failed: %s (%d)", a->error_string(ss), ss);
        return;
    }
    c->ready = 1;
}

/* The ctx's mode: a test's choice (f8i_cuda_attn_set_mode) or the ctx
 * config's (attention_path, attention_nondeterministic). */
static int mode_of(const f8_ctx *ctx)
{
    const f8i_cuda_state *s = f8i_cuda(ctx);
    if (s->attn_mode_set) return s->attn_mode;
    if (ctx->attn_path == F8_ATTENTION_PATH_OWN) return F8I_ATTN_OWN;
    return ctx->attn_nondet ? F8I_ATTN_CUDNN_NONDET : F8I_ATTN_AUTO;
}

#include "attention_cudnn_graphs.cuh" /* the builder and the forward and backward graphs */

/* The engine behind config cfg: its global index and whether its notes say nondeterministic. */
static void engine_facts(gb *g, void *cfg)
{
    const dn_api *a = g->api;
    dn_plan *p = g->p;
    void *eng = gb_new(g, DN_D_ENGINE, "engine");
    if (!eng) return;
    int64_t n = 0, idx = -1;
    if (a->b_get(cfg, DN_A_CFG_ENGINE, DN_T_DESCRIPTOR, 1, &n, &eng) != DN_OK || n != 1) return;
    if (a->b_get(eng, DN_A_ENGINE_INDEX, DN_T_INT64, 1, &n, &idx) == DN_OK) p->engine = idx;
    int notes[16];
    n = 0;
    if (a->b_get(eng, DN_A_ENGINE_NUMERICAL_NOTE, DN_T_NUMERICAL_NOTE, 16, &n, notes) == DN_OK)
        for (int64_t i = 0; i < n && i < 16; i++)
            if (notes[i] == DN_NOTE_NONDETERMINISTIC) p->nondet_note = 1;
}

/* Build p for p->key: graph, heuristics, the first config that finalizes,
 * its buffer. p->ok = 1 on success; else p->why. */
static void plan_build(f8_ctx *ctx, f8i_attn_cudnn *c, dn_plan *p)
{
    gb g;
    memset(&g, 0, sizeof g);
    g.api = &c->api;
    g.p = p;
    g.next_uid = DN_UID_VIRTUAL;
    p->engine = -1;
    p->neg_inf = c->version >= 91000 ? -INFINITY : -FLT_MAX;
    dn_dims d;
    dims_of(&p->key, &d);
    if (p->key.dir == 0)
        graph_forward(&g, &d);
    else
        graph_backward(&g, &d, (int)p->key.det);

    void *opg = gb_new(&g, DN_D_OPGRAPH, "operation graph");
    gb_set(&g, opg, DN_A_OPGRAPH_HANDLE, DN_T_HANDLE, 1, &c->handle, "operation graph");
    gb_set(&g, opg, DN_A_OPGRAPH_OPS, DN_T_DESCRIPTOR, g.n_ops, g.ops, "operation graph");
    gb_fin(&g, opg, "operation graph");
    void *heur = gb_new(&g, DN_D_ENGINEHEUR, "heuristics");
    const int mode = DN_HEUR_MODE_A;
    gb_set(&g, heur, DN_A_HEUR_OPGRAPH, DN_T_DESCRIPTOR, 1, &opg, "heuristics");
    gb_set(&g, heur, DN_A_HEUR_MODE, DN_T_HEUR_MODE, 1, &mode, "heuristics");
    gb_fin(&g, heur, "heuristics");
    if (g.failed) return;

    int64_t n_cfg = 0;
    dn_status st = c->api.b_get(heur, DN_A_HEUR_RESULTS, DN_T_DESCRIPTOR, 0, &n_cfg, NULL);
    if (st != DN_OK) {
        gb_fail(&g, st, "get ENGINEHEUR_RESULTS count", "heuristics");
        return;
    }
    if (n_cfg <= 0) {
        snprintf(p->why, sizeof p->why, "heuristics offer no engine for this graph (cuDNN %zu does not fuse it)", c->version);
        return;
    }
    if (n_cfg > DN_MAX_CONFIGS) n_cfg = DN_MAX_CONFIGS;
    void *cfg[DN_MAX_CONFIGS];
    for (int64_t i = 0; i < n_cfg; i++) cfg[i] = gb_new(&g, DN_D_ENGINECFG, "engine config");
    int64_t got = 0;
    if (!g.failed) {
        st = c->api.b_get(heur, DN_A_HEUR_RESULTS, DN_T_DESCRIPTOR, n_cfg, &got, cfg);
        if (st != DN_OK) gb_fail(&g, st, "get ENGINEHEUR_RESULTS", "heuristics");
    }
    if (g.failed) return;

    char tried[DN_WHY] = "";
    p->n_configs = got;
    for (int64_t i = 0; i < got && !p->plan; i++) {
        void *plan = gb_new(&g, DN_D_PLAN, "execution plan");
        gb_set(&g, plan, DN_A_PLAN_HANDLE, DN_T_HANDLE, 1, &c->handle, "execution plan");
        gb_set(&g, plan, DN_A_PLAN_CONFIG, DN_T_DESCRIPTOR, 1, &cfg[i], "execution plan");
        if (g.failed) return;
        st = c->api.b_finalize(plan);
        if (st == DN_OK) {
            p->plan = plan;
            p->config = i;
            engine_facts(&g, cfg[i]);
        } else {
            char detail[DN_WHY / 2] = "";
            if (c->api.last_error) c->api.last_error(detail, sizeof detail);
            snprintf(tried, sizeof tried, "config %lld of %lld: %s (%d) %s", (long long)i, (long long)got,
                     c->api.error_string(st), st, detail);
        }
    }
    if (!p->plan) {
        snprintf(p->why, sizeof p->why, "no engine config finalized (last %s)", tried);
        return;
    }
    int64_t ws = 0, n = 0;
    st = c->api.b_get(p->plan, DN_A_PLAN_WORKSPACE, DN_T_INT64, 1, &n, &ws);
    if (st != DN_OK || ws < 0) {
        gb_fail(&g, st, "get EXECUTION_PLAN_WORKSPACE_SIZE", "execution plan");
        p->plan = NULL;
        return;
    }
    const dn_key *k = &p->key;
    p->ws_bytes = (size_t)ws;
    p->stats_off = f8i_align256(p->ws_bytes);
    p->acc_off = p->stats_off + f8i_align256((size_t)(k->B * k->nh * k->S) * sizeof(float));
    p->acc_bytes = k->dir == 1 && !k->det ? (size_t)(k->B * k->nh * k->S * k->hd) * sizeof(float) : 0;
    p->ok = 1; /* the cache allocates its buffer, acc_off + acc_bytes */
}

static void describe(f8i_attn_cudnn *c, const dn_plan *p)
{
    const dn_key *k = &p->key;
    const char *dir = k->dir ? "backward" : "forward";
    if (p->ok)
        snprintf(c->last_plan, sizeof c->last_plan,
                 "%s%s B%lld S%lld nh%lld hd%lld: engine %lld (config %lld of %lld), workspace %.1f MiB (+%.1f MiB f8 buffers), "
                 "engine notes nondeterministic: %s",
                 dir, k->dir == 1 ? (k->det ? " (deterministic)" : " (dQ atomics)") : "",
                 (long long)k->B, (long long)k->S, (long long)k->nh, (long long)k->hd, (long long)p->engine,
                 (long long)p->config, (long long)p->n_configs, (double)p->ws_bytes / 1048576.0, (double)(p->acc_off + p->acc_bytes - p->ws_bytes) / 1048576.0,
                 p->nondet_note ? "yes" : "no");
    else
        snprintf(c->last_plan, sizeof c->last_plan, "%s B%lld S%lld nh%lld hd%lld refused: %s",
                 k->dir == 1 ? (k->det ? "backward (deterministic)" : "backward (dQ atomics)") : dir, (long long)k->B,
                 (long long)k->S, (long long)k->nh, (long long)k->hd, p->why);
}

/* The plan cache's view of these plans (plan_cache.cuh): arg is the
 * dn_key; never built while capturing (cuDNN's finalize may compile and
 * load kernels, and the plan's buffer is a cudaMalloc). */
static f8_status kind_build(f8_ctx *ctx, void *body, const void *arg, size_t *buf_bytes)
{
    f8i_attn_cudnn *c = f8i_cuda(ctx)->attn_cudnn;
    dn_plan *p = (dn_plan *)body;
    p->key = *(const dn_key *)arg;
    plan_build(ctx, c, p);
    if (!p->ok) plan_release(&c->api, p);
    describe(c, p);
    c->n_plans++;
    *buf_bytes = p->ok ? p->acc_off + p->acc_bytes : 0;
    (void)cudaGetLastError(); /* nothing sticky from cuDNN's internals leaks into f8's launch checks */
    return F8_OK;
}

static void kind_release(f8_ctx *ctx, void *body)
{
    f8i_attn_cudnn *c = f8i_cuda(ctx)->attn_cudnn;
    if (c) plan_release(&c->api, (dn_plan *)body);
}

static void kind_describe(const void *arg, char *out, size_t size)
{
    const dn_key *k = (const dn_key *)arg;
    snprintf(out, size, "%s B%lld S%lld nh%lld hd%lld", k->dir ? "backward" : "forward", (long long)k->B,
             (long long)k->S, (long long)k->nh, (long long)k->hd);
}

static const f8i_plan_kind cudnn_kind = {"attention (cuDNN)", sizeof(dn_plan), 0, kind_build, kind_release,
                                         kind_describe};

/* The ready plan for key, built now if new; NULL with F8_OK: run f8's
 * kernels (cuDNN absent, or refusing the shape: eagerly or not, the same
 * answer). Errors (*st): a plan that cannot be allocated (the shape is not
 * remembered, so a later call tries again), and a shape cuDNN would be
 * asked for first seen while a graph is captured (plan_cache.cuh's rule:
 * never a quiet switch to f8's kernels inside a capture). */
/* The loaded library and handle; NULL with F8_OK where cuDNN is absent,
 * an error where it would first be loaded inside a capture. */
static f8i_attn_cudnn *state_of(f8_ctx *ctx, f8_status *st)
{
    f8i_cuda_state *s = f8i_cuda(ctx);
    f8i_attn_cudnn *c = s->attn_cudnn;
    *st = F8_OK;
    if (!c) {
        if (f8i_cuda_capturing(ctx)) {
            *st = f8i_capture_spoil(ctx, f8i_error(ctx, F8_ERR_STATE,
                                                   "attention (cuDNN): first attention call while a graph is captured "
                                                   "(cuDNN is loaded and its plans built eagerly); run one eager step of "
                                                   "this shape before f8_graph_begin"));
            return NULL;
        }
        c = (f8i_attn_cudnn *)calloc(1, sizeof *c);
        if (!c) {
            *st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "attention (cuDNN): no host memory for its state");
            return NULL;
        }
        s->attn_cudnn = c;
        state_load(ctx, c);
    }
    return c->ready ? c : NULL;
}

static dn_plan *plan_for(f8_ctx *ctx, const dn_key *key, f8_status *st)
{
    return state_of(ctx, st) ? dn_plan_cached(ctx, &cudnn_kind, key, key, st) : NULL;
}

const dn_api *f8i_cudnn_attn_handle(f8_ctx *ctx, void **handle, size_t *version, f8_status *st)
{
    *st = F8_OK;
    if (mode_of(ctx) == F8I_ATTN_OWN) return NULL;
    f8i_attn_cudnn *c = state_of(ctx, st);
    if (!c) return NULL;
    if (c->stream != f8i_stream(ctx)) {
        if (c->api.set_stream(c->handle, f8i_stream(ctx)) != DN_OK) return NULL;
        c->stream = f8i_stream(ctx);
    }
    *handle = c->handle, *version = c->version;
    return &c->api;
}

/* Execute p with the given (uid, pointer) pairs; the workspace is p's buffer. */
static dn_status run_plan(f8_ctx *ctx, f8i_attn_cudnn *c, dn_plan *p, int n, const int64_t *uids, void *const *ptrs)
{
    const dn_api *a = &c->api;
    if (c->stream != f8i_stream(ctx)) {
        const dn_status st = a->set_stream(c->handle, f8i_stream(ctx));
        if (st != DN_OK) return st;
        c->stream = f8i_stream(ctx);
    }
    void *vp = NULL;
    dn_status st = a->b_create(DN_D_VARIANT_PACK, &vp);
    if (st != DN_OK) return st;
    st = a->b_set(vp, DN_A_VP_UIDS, DN_T_INT64, n, uids);
    if (st == DN_OK) st = a->b_set(vp, DN_A_VP_PTRS, DN_T_VOID_PTR, n, ptrs);
    if (st == DN_OK) st = a->b_set(vp, DN_A_VP_WORKSPACE, DN_T_VOID_PTR, 1, &p->buf);
    if (st == DN_OK) st = a->b_finalize(vp);
    if (st == DN_OK) st = a->b_execute(c->handle, p->plan, vp);
    (void)a->b_destroy(vp);
    return st;
}

/* Execution failed: the plan is refused from now on (its reason kept), and the caller falls back. */
static void refuse(f8i_attn_cudnn *c, dn_plan *p, dn_status st)
{
    char detail[DN_WHY / 2] = "";
    if (c->api.last_error) c->api.last_error(detail, sizeof detail);
    snprintf(p->why, sizeof p->why, "cudnnBackendExecute: %s (%d) %s", c->api.error_string(st), st, detail);
    p->ok = 0;
    describe(c, p);
    (void)cudaGetLastError();
}

/* run_plan, counted and recorded as the ctx's path; 1 if it ran, 0 if
 * cuDNN refused (the plan is then refused for good and the caller falls back). */
static int execute(f8_ctx *ctx, f8i_attn_cudnn *c, dn_plan *p, int n, const int64_t *uids, void *const *ptrs)
{
    const dn_status st = run_plan(ctx, c, p, n, uids, ptrs);
    if (st != DN_OK) {
        refuse(c, p, st);
        return 0;
    }
    F8I_COUNT_LAUNCHES(ctx, 1);
    f8i_cuda(ctx)->attn_last_path = F8I_ATTN_PATH_CUDNN;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

#define DN_THREADS 256

/* After cuDNN's forward: lse[i] = Stats[i] / c in place (attention.h's L),
 * and o = y (n16 16-byte chunks). Grid: 1-D, grid-stride over
 * max(n_lse, n16); block DN_THREADS; a thread owns item i of each array. */
static __global__ void __launch_bounds__(DN_THREADS)
    fwd_finish_kernel(float *lse, int64_t n_lse, float c, const uint4 *y, uint4 *o, int64_t n16)
{
    const int64_t n = n_lse > n16 ? n_lse : n16, step = (int64_t)gridDim.x * DN_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * DN_THREADS + threadIdx.x; i < n; i += step) {
        if (i < n_lse) lse[i] = __fdiv_rn(lse[i], c);
        if (i < n16) o[i] = y[i];
    }
}

/* Before cuDNN's backward: stats[i] = L[i]·c (cuDNN's units). Grid: 1-D,
 * grid-stride over n; block DN_THREADS; a thread owns element i. */
static __global__ void __launch_bounds__(DN_THREADS) bwd_stats_kernel(const float *lse, float *stats, int64_t n, float c)
{
    for (int64_t i = (int64_t)blockIdx.x * DN_THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * DN_THREADS)
        stats[i] = __fmul_rn(lse[i], c);
}

/* ------------------------------------------------------------------------ */
/* Entry points (attention.cu)                                               */
/* ------------------------------------------------------------------------ */

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* What cuDNN's fused attention is asked to take: BF16, head_dim a multiple of 8 up to 128. */
static bool cudnn_shape(f8_dtype dt, int64_t hd) { return dt == F8_DTYPE_BF16 && hd % 8 == 0 && hd >= 8 && hd <= 128; }

f8_status f8i_cudnn_attn_fwd(f8_ctx *ctx, const f8i_attn_fwd_args *a, int *ran)
{
    *ran = 0;
    if (a->fp8) return f8i_cudnn_fp8_attn_fwd(ctx, a, ran); /* attention_cudnn_fp8.cu */
    f8i_cuda_state *s = f8i_cuda(ctx);
    if (mode_of(ctx) == F8I_ATTN_OWN || !cudnn_shape(a->dtype, a->head_dim) || !aligned16(a->qkv) || !aligned16(a->y) ||
        !aligned16(a->o))
        return F8_OK;
    const int64_t G = a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
    const dn_key key = {0, 1, a->batch, a->seq, a->n_head, a->head_dim, G};
    f8_status ps = F8_OK;
    dn_plan *p = plan_for(ctx, &key, &ps);
    if (!p) return ps;
    f8i_attn_cudnn *c = s->attn_cudnn;
    const int64_t C = a->n_head * a->head_dim, rows = a->batch * a->n_head * a->seq;
    const size_t es = 2;
    const unsigned char *qkv = (const unsigned char *)a->qkv;
    float *stats = a->lse ? a->lse : (float *)((unsigned char *)p->buf + p->stats_off);
    float scale = a->scale, neg_inf = p->neg_inf;
    const int64_t uids[7] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF};
    const int64_t vo = C + G * a->head_dim; /* v's first column */
    void *const ptrs[7] = {(void *)qkv, (void *)(qkv + C * es), (void *)(qkv + vo * es), a->y, stats, &scale, &neg_inf};
    if (!(*ran = execute(ctx, c, p, 7, uids, ptrs))) return F8_OK;
    const int64_t n_lse = a->lse ? rows : 0, n16 = a->o ? a->batch * a->seq * C * (int64_t)es / 16 : 0;
    if (n_lse == 0 && n16 == 0) return F8_OK;
    const int64_t n = n_lse > n16 ? n_lse : n16;
    F8I_COUNT_LAUNCHES(ctx, 1);
    fwd_finish_kernel<<<grid_size(ctx, n, DN_THREADS), DN_THREADS, 0, f8i_stream(ctx)>>>(
        a->lse, n_lse, a->scale, (const uint4 *)a->y, (uint4 *)a->o, n16);
    return f8i_cuda_launch_check(ctx, "attention (cuDNN) fwd_finish_kernel");
}

f8_status f8i_cudnn_attn_bwd(f8_ctx *ctx, const f8i_attn_bwd_args *a, int *ran)
{
    *ran = 0;
    f8i_cuda_state *s = f8i_cuda(ctx);
    const int mode = mode_of(ctx);
    if (mode == F8I_ATTN_OWN || !cudnn_shape(a->dtype, a->head_dim) || !aligned16(a->qkv) || !aligned16(a->o) ||
        !aligned16(a->dy) || !aligned16(a->dqkv) || !aligned16(a->d))
        return F8_OK;
    const int64_t G = a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
    const dn_key key = {1, mode == F8I_ATTN_CUDNN_NONDET ? 0 : 1, a->batch, a->seq, a->n_head, a->head_dim, G};
    f8_status ps = F8_OK;
    dn_plan *p = plan_for(ctx, &key, &ps);
    if (!p) return ps;
    f8i_attn_cudnn *c = s->attn_cudnn;
    cudaStream_t stream = f8i_stream(ctx);
    const int64_t C = a->n_head * a->head_dim, rows = a->batch * a->n_head * a->seq;
    const size_t es = 2;
    float *stats = (float *)((unsigned char *)p->buf + p->stats_off);
    void *acc = p->acc_bytes ? (unsigned char *)p->buf + p->acc_off : NULL;

    F8I_COUNT_LAUNCHES(ctx, 1);
    bwd_stats_kernel<<<grid_size(ctx, rows, DN_THREADS), DN_THREADS, 0, stream>>>(a->lse, stats, rows, a->scale);
    F8I_TRY(f8i_cuda_launch_check(ctx, "attention (cuDNN) bwd_stats_kernel"));
    if (acc && c->version < 90600) { /* cuDNN zeroes dQ_accum itself from 9.6 (the frontend's note) */
        F8I_COUNT_LAUNCHES(ctx, 1);
        F8I_TRY(f8i_cuda_check(ctx, cudaMemsetAsync(acc, 0, p->acc_bytes, stream), "attention (cuDNN) dQ_accum memset"));
    }

    const unsigned char *qkv = (const unsigned char *)a->qkv;
    unsigned char *dqkv = (unsigned char *)a->dqkv;
    float scale = a->scale, one = 1.0f, neg_inf = p->neg_inf;
    const int64_t uids[14] = {U_Q,  U_K,  U_V,   U_O,     U_DO,  U_STATS,   U_DQ,
                              U_DK, U_DV, U_SUM, U_SCALE, U_ONE, U_NEG_INF, U_DQ_ACC};
    const int64_t vo = C + G * a->head_dim; /* v's first column */
    void *const ptrs[14] = {(void *)qkv,  (void *)(qkv + C * es), (void *)(qkv + vo * es), (void *)a->o,
                            (void *)a->dy, stats,                  dqkv,                      dqkv + C * es,
                            dqkv + vo * es, a->d,                  &scale,                    &one,
                            &neg_inf,      acc};
    *ran = execute(ctx, c, p, acc ? 14 : 13, uids, ptrs);
    return F8_OK;
}

/* ------------------------------------------------------------------------ */
/* Test and benchmark hooks (backend.h)                                      */
/* ------------------------------------------------------------------------ */

static f8i_cuda_state *cuda_of(const f8_ctx *ctx)
{
    return ctx && ctx->kind == F8_BACKEND_CUDA && ctx->be_state ? f8i_cuda(ctx) : NULL;
}

void f8i_cuda_attn_set_mode(f8_ctx *ctx, int mode)
{
    f8i_cuda_state *s = cuda_of(ctx);
    if (!s) return;
    s->attn_mode = mode;
    s->attn_mode_set = mode >= 0;
}

int f8i_cuda_attn_last_path(const f8_ctx *ctx)
{
    const f8i_cuda_state *s = cuda_of(ctx);
    return s ? s->attn_last_path : 0;
}

f8_status f8i_cuda_attn_takes(f8_ctx *ctx, f8_dtype dtype, int64_t batch, int64_t seq, int64_t n_head,
                              int64_t n_kv_head, int64_t head_dim, int backward, int *takes)
{
    *takes = 0;
    if (!cuda_of(ctx)) return F8_OK;
    if (dtype == F8_DTYPE_E4M3) /* FP8: the forward, or the backward of fp8_backward */
        return f8i_cudnn_fp8_attn_takes(ctx, batch, seq, n_head, n_kv_head, head_dim, backward, takes);
    const int mode = mode_of(ctx);
    if (mode == F8I_ATTN_OWN || !cudnn_shape(dtype, head_dim)) return F8_OK;
    const dn_key key = {backward ? 1 : 0, backward && mode == F8I_ATTN_CUDNN_NONDET ? 0 : 1, batch, seq, n_head, head_dim,
                        n_kv_head > 0 ? n_kv_head : n_head};
    f8_status st = F8_OK;
    *takes = plan_for(ctx, &key, &st) != NULL;
    return st;
}

static void count_plan(void *body, void *user) { ((int *)user)[((const dn_plan *)body)->ok ? 1 : 0]++; }

const char *f8i_cuda_attn_info(f8_ctx *ctx, int *loaded)
{
    f8i_cuda_state *s = cuda_of(ctx);
    if (loaded) *loaded = s && s->attn_cudnn && s->attn_cudnn->ready;
    if (!s) return "not a CUDA ctx";
    f8i_attn_cudnn *c = s->attn_cudnn;
    if (!c) return "cuDNN not loaded yet (no eager attention call has asked for it)";
    if (!c->ready) return c->why;
    int counts[2] = {0, 0}; /* refused, ready */
    f8i_plan_each(ctx, &cudnn_kind, count_plan, counts);
    char fp8[2 * DN_WHY + 64];
    f8i_cudnn_fp8_attn_info(ctx, fp8, sizeof fp8);
    snprintf(c->info, sizeof c->info, "cuDNN %zu (%s), %d plans ready, %d refused; last plan: %s; %s", c->version,
             c->lib_name, counts[1], counts[0], c->n_plans ? c->last_plan : "none", fp8);
    return c->info;
}
