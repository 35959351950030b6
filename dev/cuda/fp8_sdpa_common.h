/*
 * dev/cuda/fp8_sdpa_common.h — the host-side pieces fp8_sdpa_probe.cu and
 * its backward (fp8_sdpa_bwd.h) share: E4M3 on the host, a small builder
 * over cuDNN's backend API (every call a no-op after the first failure,
 * whose message is kept), plan finalization from a built op list, and the
 * error measures. Not built by the Makefile.
 */
#ifndef F8_DEV_FP8_SDPA_COMMON_H
#define F8_DEV_FP8_SDPA_COMMON_H

#include <cuda_runtime.h>
#include <cudnn.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- E4M3 on the host ---------------------------------------------------- */

static double e4m3_value(uint8_t c)
{
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    const double v = e == 0 ? ldexp((double)m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

/* Round to the nearest E4M3 value, ties to even, saturating at ±448. */
static double e4m3_round(double x)
{
    if (isnan(x)) return x;
    const double a = fabs(x);
    double q;
    if (a >= 448.0) q = 448.0;
    else if (a < ldexp(1.0, -6)) q = nearbyint(a * 512.0) / 512.0;
    else {
        int e;
        frexp(a, &e); /* a = f·2^e, f in [0.5, 1): the binade's step is 2^(e-4) */
        const double step = ldexp(1.0, e - 4);
        q = nearbyint(a / step) * step;
        if (q > 448.0) q = 448.0;
    }
    return x < 0 ? -q : q;
}

static uint8_t e4m3_code(double x)
{
    const double q = fabs(e4m3_round(x));
    int lo = 0, hi = 126; /* codes 0..126 are the non-negative finite values, ascending */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (e4m3_value((uint8_t)mid) < q) lo = mid + 1;
        else hi = mid;
    }
    return (uint8_t)(lo | (x < 0 && q > 0 ? 0x80 : 0));
}

/* ---- BF16 and FP16 on the host (an O typed in F16: current scaling) ------- */

/* Round to the nearest value of a binary format with `p` bits of precision
 * (the implicit one included), smallest normal 2^emin, largest finite maxv,
 * ties to even; past the largest finite, infinity. */
static double fmt_round(double x, int p, int emin, double maxv)
{
    if (isnan(x) || isinf(x)) return x;
    const double a = fabs(x);
    double q;
    if (a < ldexp(1.0, emin)) q = nearbyint(ldexp(a, p - 1 - emin)) * ldexp(1.0, emin - p + 1);
    else {
        int e;
        frexp(a, &e); /* a in [2^(e-1), 2^e): the binade's step is 2^(e-p) */
        const double step = ldexp(1.0, e - p);
        q = nearbyint(a / step) * step;
    }
    if (q > maxv) q = INFINITY;
    return copysign(q, x);
}

static double bf16_round(double x) { return fmt_round(x, 8, -126, 3.3895313892515355e38); }
static double fp16_round(double x) { return fmt_round(x, 11, -14, 65504.0); }

static double bf16_value(uint16_t u)
{
    const uint32_t w = (uint32_t)u << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}

static double fp16_value(uint16_t u)
{
    const int s = u >> 15, e = (u >> 10) & 31, m = u & 1023;
    const double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}

static uint16_t bf16_code(double x)
{
    if (isnan(x)) return 0x7fc0;
    const float f = (float)bf16_round(x); /* exact in FP32 */
    uint32_t w;
    memcpy(&w, &f, 4);
    return (uint16_t)(w >> 16);
}

static uint16_t fp16_code(double x)
{
    if (isnan(x)) return 0x7e00;
    const double q = fp16_round(x), a = fabs(q);
    const uint16_t s = signbit(q) ? 0x8000 : 0;
    if (isinf(a)) return s | 0x7c00;
    if (a < ldexp(1.0, -14)) return s | (uint16_t)ldexp(a, 24); /* subnormal: m·2^-24 */
    int e;
    const double f = frexp(a, &e); /* a = 2f·2^(e-1), 2f in [1, 2) */
    return s | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)ldexp(2 * f - 1, 10);
}

/* ---- a small builder over the backend API -------------------------------- */

typedef struct bld {
    cudnnHandle_t h;
    cudnnBackendDescriptor_t all[1024];
    int n_all;
    cudnnBackendDescriptor_t ops[64];
    int n_ops;
    int64_t next_uid;
    char err[1024];
} bld;

static int bad(bld *b, cudnnStatus_t st, const char *what)
{
    if (st == CUDNN_STATUS_SUCCESS || b->err[0]) return st != CUDNN_STATUS_SUCCESS;
    char last[256] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(b->err, sizeof b->err, "%s: %s; %s", what, cudnnGetErrorString(st), last);
    return 1;
}

static cudnnBackendDescriptor_t make(bld *b, cudnnBackendDescriptorType_t t)
{
    cudnnBackendDescriptor_t d = NULL;
    if (b->err[0]) return NULL;
    if (b->n_all == (int)(sizeof b->all / sizeof b->all[0])) {
        snprintf(b->err, sizeof b->err, "too many descriptors");
        return NULL;
    }
    if (bad(b, cudnnBackendCreateDescriptor(t, &d), "create")) return NULL;
    b->all[b->n_all++] = d;
    return d;
}

static void set(bld *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                int64_t n, const void *v, const char *what)
{
    if (!b->err[0]) bad(b, cudnnBackendSetAttribute(d, a, t, n, v), what);
}

static void fin(bld *b, cudnnBackendDescriptor_t d, const char *what)
{
    if (!b->err[0]) bad(b, cudnnBackendFinalize(d), what);
}

static cudnnBackendDescriptor_t tensor(bld *b, int64_t uid, cudnnDataType_t dt, const int64_t *dim,
                                       const int64_t *str, int virt, int by_value, const char *what)
{
    cudnnBackendDescriptor_t t = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    const bool yes = true;
    if (uid < 0) uid = b->next_uid++;
    set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
    set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, what);
    set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, what);
    set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    if (virt) set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes, what);
    if (by_value) set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, what);
    fin(b, t, what);
    return t;
}

static void add_op(bld *b, cudnnBackendDescriptor_t op)
{
    if (b->err[0]) return;
    if (b->n_ops == (int)(sizeof b->ops / sizeof b->ops[0])) snprintf(b->err, sizeof b->err, "too many operations");
    else b->ops[b->n_ops++] = op;
}

/* y = mode(x [, b2] [, t]); axis >= 0 for GEN_INDEX. */
static void pw(bld *b, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t b2, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis,
               const char *what)
{
    cudnnBackendDescriptor_t d = make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(b, d, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set(b, d, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    if (axis >= 0) set(b, d, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    fin(b, d, what);
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    const float one = 1.0f;
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, what);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    if (b2) set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b2, what);
    if (t) set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, what);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, what);
    if (b2) set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, what);
    fin(b, op, what);
    add_op(b, op);
}

static void mm(bld *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bb, cudnnBackendDescriptor_t c,
               const char *what)
{
    cudnnBackendDescriptor_t d = make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(b, d, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
    fin(b, d, what);
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bb, what);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, what);
    fin(b, op, what);
    add_op(b, op);
}

static void red(bld *b, cudnnReduceTensorOp_t kind, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                const char *what)
{
    cudnnBackendDescriptor_t d = make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(b, d, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &kind, what);
    set(b, d, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
    fin(b, d, what);
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, what);
    fin(b, op, what);
    add_op(b, op);
}

/* y = x seen with y's dims and strides (a transpose view). */
static void reshape(bld *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, const char *what)
{
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    fin(b, op, what);
    add_op(b, op);
}

/* The causal mask on scores x [b,h,s,s]: select(row >= col, x, mask value)
 * from two GEN_INDEX and a CMP_GE, into a new FP32 virtual. */
static cudnnBackendDescriptor_t causal(bld *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t ninf,
                                       const int64_t *ssd, const int64_t *sss)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, BO = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t row = tensor(b, -1, CUDNN_DATA_INT32, ssd, sss, 1, 0, "row");
    cudnnBackendDescriptor_t col = tensor(b, -1, CUDNN_DATA_INT32, ssd, sss, 1, 0, "col");
    cudnnBackendDescriptor_t keep = tensor(b, -1, BO, ssd, sss, 1, 0, "keep");
    cudnnBackendDescriptor_t y = tensor(b, -1, F, ssd, sss, 1, 0, "masked");
    pw(b, CUDNN_POINTWISE_GEN_INDEX, F, x, NULL, NULL, row, 2, "row index");
    pw(b, CUDNN_POINTWISE_GEN_INDEX, F, x, NULL, NULL, col, 3, "col index");
    pw(b, CUDNN_POINTWISE_CMP_GE, BO, row, col, NULL, keep, -1, "row >= col");
    pw(b, CUDNN_POINTWISE_BINARY_SELECT, F, x, ninf, keep, y, -1, "select");
    return y;
}

/* ---- plans --------------------------------------------------------------- */

typedef struct plan {
    bld b;
    cudnnBackendDescriptor_t plan;
    int64_t ws, engine, n_cfg, cfg;
    char how[96]; /* how the plan was found: "heuristics A", ..., "engine 7 by global index" */
    char stale[256]; /* cuDNN's last message before this plan: not this plan's reason */
} plan;

/* Start a plan: its builder empty, virtual uids from 100. */
static void plan_start(plan *pl, cudnnHandle_t h)
{
    memset(pl, 0, sizeof *pl);
    pl->b.h = h;
    pl->b.next_uid = 100;
    pl->engine = -1;
    cudnnGetLastErrorString(pl->stale, sizeof pl->stale); /* an earlier case's message is not this one's */
}

/* A descriptor kept with the builder's (destroyed by plan_free); NULL where
 * it cannot be created (b->err untouched: a search expects failures). */
static cudnnBackendDescriptor_t keep(bld *b, cudnnBackendDescriptorType_t t)
{
    cudnnBackendDescriptor_t d = NULL;
    if (b->n_all == (int)(sizeof b->all / sizeof b->all[0]) || cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS)
        return NULL;
    return b->all[b->n_all++] = d;
}

/* cuDNN's status and last message for a failed call, into why. */
static void why_of(char *why, size_t n, const char *what, cudnnStatus_t st)
{
    char last[400] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(why, n, "%s: %s%s%s", what, cudnnGetErrorString(st), last[0] ? "; " : "", last);
}

/* An execution plan for engine config cfg; 1 and pl->plan set if it finalizes. */
static int plan_try_cfg(plan *pl, cudnnBackendDescriptor_t cfg, char *why, size_t wn, const char *what)
{
    bld *b = &pl->b;
    cudnnBackendDescriptor_t p = keep(b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    if (!p) return 0;
    cudnnStatus_t st = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->h);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(p);
    if (st != CUDNN_STATUS_SUCCESS) {
        why_of(why, wn, what, st);
        return 0;
    }
    pl->plan = p;
    return 1;
}

/* Heuristics of `mode` on graph g; the first of its configs (or config
 * `config` >= 0) whose plan finalizes becomes pl->plan. why: the reason if
 * none does ("offer no engine" where the heuristics list none). */
static int plan_try_heur(plan *pl, cudnnBackendDescriptor_t g, cudnnBackendHeurMode_t mode, const char *mname, int config,
                         int64_t *n_out, char *why, size_t wn)
{
    bld *b = &pl->b;
    char what[112];
    cudnnBackendDescriptor_t he = keep(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    if (!he) return snprintf(why, wn, "heuristics %s: no descriptor", mname), 0;
    cudnnStatus_t st = cudnnBackendSetAttribute(he, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendSetAttribute(he, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(he);
    int64_t n = 0;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(he, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(what, sizeof what, "heuristics %s", mname);
        why_of(why, wn, what, st);
        return 0;
    }
    if (n > 8) n = 8;
    cudnnBackendDescriptor_t cfg[8];
    for (int64_t i = 0; i < n; i++)
        if (!(cfg[i] = keep(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))) n = i;
    if (n > 0 && (st = cudnnBackendGetAttribute(he, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n,
                                                cfg)) != CUDNN_STATUS_SUCCESS) {
        snprintf(what, sizeof what, "heuristics %s results", mname);
        why_of(why, wn, what, st);
        return 0;
    }
    if (n_out) *n_out = n;
    if (n == 0) {
        char last[400] = "";
        cudnnGetLastErrorString(last, sizeof last);
        if (strcmp(last, pl->stale) == 0) last[0] = 0;
        snprintf(why, wn, "heuristics %s offer no engine%s%s", mname, last[0] ? "; cuDNN's last message: " : "", last);
        return 0;
    }
    snprintf(why, wn, "heuristics %s: none of %lld configs tried", mname, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (config >= 0 && i != config) continue;
        snprintf(what, sizeof what, "heuristics %s: %lld configs, config %lld plan", mname, (long long)n, (long long)i);
        if (!plan_try_cfg(pl, cfg[i], why, wn, what)) continue;
        pl->cfg = i;
        cudnnBackendDescriptor_t eng = keep(b, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        int64_t k = 0;
        if (eng && cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, &eng) ==
                       CUDNN_STATUS_SUCCESS)
            (void)cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &k, &pl->engine);
        snprintf(pl->how, sizeof pl->how, "heuristics %s", mname);
        return 1;
    }
    return 0;
}

/* Every engine of graph g by global index, default knobs, for at most
 * `seconds`: the first whose plan finalizes becomes pl->plan. why: a count
 * of how far each got and the first two distinct reasons. */
static int plan_try_every_engine(plan *pl, cudnnBackendDescriptor_t g, double seconds, char *why, size_t wn)
{
    bld *b = &pl->b;
    int64_t count = 0, k = 0;
    cudnnStatus_t st =
        cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &k, &count);
    if (st != CUDNN_STATUS_SUCCESS) return why_of(why, wn, "engine count", st), 0;
    const time_t t0 = time(NULL);
    int64_t tried = 0, eng_ok = 0;
    char r1[300] = "", r2[300] = "", r[300];
    for (int64_t i = 0; i < count; i++) {
        if (difftime(time(NULL), t0) > seconds) break;
        tried++;
        cudnnBackendDescriptor_t eng = NULL, cfg = NULL;
        char what[48];
        snprintf(what, sizeof what, "engine %lld", (long long)i);
        st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i);
        if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(eng);
        if (st != CUDNN_STATUS_SUCCESS) { /* nothing refers to it: gone now */
            why_of(r, sizeof r, what, st);
            if (eng) cudnnBackendDestroyDescriptor(eng);
        } else if (b->n_all + 3 > (int)(sizeof b->all / sizeof b->all[0])) {
            cudnnBackendDestroyDescriptor(eng);
            snprintf(r, sizeof r, "engine %lld: the probe's descriptor list is full", (long long)i);
            break;
        } else { /* a config and a plan refer to it: kept for plan_free, as they are */
            b->all[b->n_all++] = eng;
            eng_ok++;
            snprintf(what, sizeof what, "engine %lld config", (long long)i);
            cfg = keep(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
            st = cfg ? cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng)
                     : CUDNN_STATUS_ALLOC_FAILED;
            if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(cfg);
            if (st != CUDNN_STATUS_SUCCESS) why_of(r, sizeof r, what, st);
            else {
                snprintf(what, sizeof what, "engine %lld plan", (long long)i);
                if (plan_try_cfg(pl, cfg, r, sizeof r, what)) {
                    pl->engine = i, pl->cfg = -1;
                    snprintf(pl->how, sizeof pl->how, "engine %lld by global index (of %lld; not from heuristics A)",
                             (long long)i, (long long)count);
                    return 1;
                }
            }
        }
        /* keep the first two distinct reasons, the engine index aside */
        const char *body = strchr(r, ':') ? strchr(r, ':') : r;
        if (!r1[0]) snprintf(r1, sizeof r1, "%s", r);
        else if (!r2[0] && !strstr(r1, body)) snprintf(r2, sizeof r2, "%s", r);
    }
    snprintf(why, wn, "every engine: %lld of %lld tried%s, %lld finalized as engines, no plan (%s%s%s)", (long long)tried,
             (long long)count, tried < count ? " (time cap)" : "", (long long)eng_ok, r1[0] ? r1 : "none",
             r2[0] ? " | " : "", r2);
    return 0;
}

/* Finalize the ops built into pl->b: the operation graph, heuristics mode A,
 * engine config `config` (or, with config < 0, the first that finalizes),
 * its workspace size. With search, where mode A gives no plan: heuristics
 * modes B and FALLBACK, then every engine by global index (for at most 5 s).
 * 0 with pl->b.err on failure (every step's reason). */
static int plan_finish_ex(plan *pl, int config, int search)
{
    bld *b = &pl->b;
    cudnnHandle_t h = b->h;
    cudnnBackendDescriptor_t g = make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph");
    set(b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b->n_ops, b->ops, "graph");
    fin(b, g, "graph");
    if (b->err[0]) return 0;
    char wa[400], wb[300] = "", wf[300] = "", we[500] = "";
    int ok = plan_try_heur(pl, g, CUDNN_HEUR_MODE_A, "A", config, &pl->n_cfg, wa, sizeof wa);
    if (!ok && search) {
        ok = plan_try_heur(pl, g, CUDNN_HEUR_MODE_B, "B", -1, NULL, wb, sizeof wb) ||
             plan_try_heur(pl, g, CUDNN_HEUR_MODE_FALLBACK, "FALLBACK", -1, NULL, wf, sizeof wf) ||
             plan_try_every_engine(pl, g, 5.0, we, sizeof we);
        if (ok && strncmp(pl->how, "heuristics", 10) == 0) strncat(pl->how, " (not A)", sizeof pl->how - strlen(pl->how) - 1);
    }
    if (!ok) {
        snprintf(b->err, sizeof b->err, "%s%s%s%s%s%s%s", wa, wb[0] ? " || " : "", wb, wf[0] ? " || " : "", wf,
                 we[0] ? " || " : "", we);
        return 0;
    }
    int64_t k = 0;
    return !bad(b, cudnnBackendGetAttribute(pl->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k,
                                            &pl->ws), "workspace size");
}

static int plan_finish(plan *pl, int config) { return plan_finish_ex(pl, config, 0); }

static void plan_free(plan *pl)
{
    for (int i = pl->b.n_all - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(pl->b.all[i]);
}

#define CUDA(x)                                                                                  \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rnd_normal(void)
{
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
        u[i] = ((rng_state >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* Errors of got against want over rows of d: whole-tensor relative (L2) and
 * the worst row's, each row's error over its own norm plus 1% of the rms
 * row norm. The floor matters for dQ: at query 0 of a causal call P = 1 and
 * dP = D in exact arithmetic, so that row of dQ is only FP8 rounding
 * (norm 1e-9 to 1e-1 against rows of about 1) and, divided by its own norm
 * alone, it read as a row "10.5x off" (docs/FP8_ATTENTION.md). */
static void errs(const double *got, const double *want, int64_t n, int64_t d, double *whole, double *worst, int64_t *at)
{
    double num = 0, den = 0;
    *worst = 0, *at = -1;
    for (int64_t i = 0; i < n; i++) den += want[i] * want[i];
    const double floor_ = 0.01 * sqrt(den * (double)d / (double)n);
    den = 0;
    for (int64_t r = 0; r < n / d; r++) {
        double rn = 0, rd = 0;
        for (int64_t e = 0; e < d; e++) {
            const double x = got[r * d + e] - want[r * d + e];
            rn += x * x, rd += want[r * d + e] * want[r * d + e];
        }
        num += rn, den += rd;
        const double rel = sqrt(rn) / (sqrt(rd) + floor_);
        if (!(rel <= *worst)) *worst = rel, *at = r;
    }
    *whole = sqrt(num) / sqrt(den);
}

/* Remove uid (and its pointer) from a variant pack's lists of *n. */
static void pack_drop(int64_t *uids, void **ptrs, int *n, int64_t uid)
{
    for (int i = 0; i < *n; i++)
        if (uids[i] == uid) {
            for (int k = i; k + 1 < *n; k++) uids[k] = uids[k + 1], ptrs[k] = ptrs[k + 1];
            (*n)--;
            return;
        }
}

#endif /* F8_DEV_FP8_SDPA_COMMON_H */
