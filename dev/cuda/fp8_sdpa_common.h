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

/* ---- a small builder over the backend API -------------------------------- */

typedef struct bld {
    cudnnHandle_t h;
    cudnnBackendDescriptor_t all[512];
    int n_all;
    cudnnBackendDescriptor_t ops[64];
    int n_ops;
    int64_t next_uid;
    char err[512];
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
} plan;

/* Start a plan: its builder empty, virtual uids from 100. */
static void plan_start(plan *pl, cudnnHandle_t h)
{
    memset(pl, 0, sizeof *pl);
    pl->b.h = h;
    pl->b.next_uid = 100;
    pl->engine = -1;
}

/* Finalize the ops built into pl->b: the operation graph, heuristics mode A,
 * engine config `config` (or, with config < 0, the first that finalizes),
 * its workspace size. 0 with pl->b.err on failure. */
static int plan_finish(plan *pl, int config)
{
    bld *b = &pl->b;
    cudnnHandle_t h = b->h;
    cudnnBackendDescriptor_t g = make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph");
    set(b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b->n_ops, b->ops, "graph");
    fin(b, g, "graph");
    cudnnBackendDescriptor_t he = make(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(b, he, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, "heuristics");
    set(b, he, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
    fin(b, he, "heuristics");
    if (b->err[0]) return 0;
    int64_t n = 0;
    if (bad(b, cudnnBackendGetAttribute(he, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL),
            "heuristics count"))
        return 0;
    if (n > 8) n = 8;
    cudnnBackendDescriptor_t cfg[8];
    for (int64_t i = 0; i < n; i++) cfg[i] = make(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (b->err[0] || bad(b, cudnnBackendGetAttribute(he, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                    n, &pl->n_cfg, cfg), "heuristics results"))
        return 0;
    char why[256] = "none tried";
    for (int64_t i = 0; i < pl->n_cfg && !pl->plan; i++) {
        if (config >= 0 && i != config) continue;
        cudnnBackendDescriptor_t p = make(b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        set(b, p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan");
        set(b, p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i], "plan");
        if (b->err[0]) return 0;
        const cudnnStatus_t fs = cudnnBackendFinalize(p);
        if (fs != CUDNN_STATUS_SUCCESS) { /* kept for the message if no config finalizes */
            char last[200] = "";
            cudnnGetLastErrorString(last, sizeof last);
            snprintf(why, sizeof why, "config %lld: %s; %s", (long long)i, cudnnGetErrorString(fs), last);
        } else {
            pl->plan = p, pl->cfg = i;
            cudnnBackendDescriptor_t eng = make(b, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
            int64_t k = 0;
            if (eng && cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k,
                                                &eng) == CUDNN_STATUS_SUCCESS)
                (void)cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &k, &pl->engine);
        }
    }
    if (!pl->plan) {
        snprintf(b->err, sizeof b->err, "no engine config finalized (of %lld; last %s)", (long long)pl->n_cfg, why);
        return 0;
    }
    int64_t k = 0;
    return !bad(b, cudnnBackendGetAttribute(pl->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k,
                                            &pl->ws), "workspace size");
}

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
