/*
 * test_tp.c — tensor parallelism (Megatron-style) composed from f8's public
 * modules and CPU-rank collectives, against one rank: a column-parallel
 * LayerNormLinear (K -> N, rank r owns rows r·N/P.. of W1 and b1; gamma and
 * beta replicated) feeding a row-parallel Linear (N -> K, rank r owns
 * columns r·N/P.. of W2; the bias b2 lives on rank 0 only), whose partial
 * outputs are all-reduced; in the backward, the input gradient and the
 * LayerNorm's gamma/beta gradients are all-reduced (every rank saw only its
 * slice of the output). FP8 GEMMs, delayed scaling, amaxes reduced (MAX)
 * over the TP group through f8_ctx_set_comm. For P = 1, 2, 4 ranks:
 *  - after the first step's scale update every rank's scales equal the
 *    one-rank scales, bit for bit (the MAX over slices is the full amax);
 *  - the second step (those scales in use): the column-parallel output is
 *    bitwise the one-rank columns (the reduction dimension is not split);
 *    the all-reduced output, input gradient and gamma/beta gradients agree
 *    within 1e-5 relative (the row-parallel GEMM's sum runs in P parts;
 *    seen: 1.6e-7); the sliced weight gradients bitwise (neither wgrad's
 *    reduction dimension, the tokens, is split, and their FP8 operands
 *    are cast with the reduced, shared scales);
 *  - P = 1 is the one-rank path through the collectives: bitwise everywhere;
 *  - DP x TP (2 x 2 = 4 ranks: two TP groups, two DP groups, amaxes over
 *    all four): each replica takes its own T tokens, every gradient is
 *    all-reduced over the replicas, and the reference is one rank over
 *    both replicas' 2T tokens: scales and column outputs bitwise, the rest
 *    (weight gradients included: their token sum is split) within 1e-5.
 * This is the TP building block; the trainer's split (train/tp.c) is
 * tested in test_tp_train.c.
 */
#include <pthread.h>

#include "check.h"

enum { K = 64, N = 128, T = 32, MAXP = 4, MAXD = 2 };

typedef struct tp_out {
    int rank, P;            /* TP rank and size (P = 0: the reference) */
    int d, D;               /* DP replica and count (D = 1: TP only) */
    f8_comm_group *g, *g_dp, *g_world; /* this rank's TP group, DP group, and all ranks */
    const float *x, *dy, *w1, *b1, *w2, *b2; /* full host tensors */
    int64_t tokens;         /* T, or the reference's D·T */
    float y1[MAXD * T * N], y2[MAXD * T * K], dx[MAXD * T * K], dw1[N * K], dw2[K * N], dgamma[K], dbeta[K];
    float scales[16];
    int n_scales;
    f8_status st;
    char err[256];
} tp_out;

#define TRY_RANK(call)                                                                                                 \
    do {                                                                                                               \
        f8_status s_ = (call);                                                                                         \
        if (s_ != F8_OK && o->st == F8_OK) {                                                                           \
            o->st = s_;                                                                                                \
            snprintf(o->err, sizeof o->err, "%s: %s", #call, f8_ctx_last_error(ctx));                                  \
        }                                                                                                              \
    } while (0)

static void *alloc_up(f8_ctx *ctx, const float *h, size_t n)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, n * 4, &p) != F8_OK) return NULL;
    if (h) f8_ctx_upload(ctx, p, h, n * 4);
    return p;
}

/* One rank (P = 0: the one-rank reference, whole modules, no comm). */
static void *tp_rank(void *arg)
{
    tp_out *o = (tp_out *)arg;
    const int P = o->P ? o->P : 1, r = o->rank;
    const int64_t n = N / P; /* this rank's slice of the intermediate dimension */
    char why[256];
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        o->st = F8_ERR_STATE;
        return NULL;
    }
    f8_comm *comm = NULL, *dp = NULL, *world = NULL;
    if (o->P) TRY_RANK(f8_comm_create_cpu(ctx, o->g, r, &comm));
    if (o->P && o->D > 1) { /* amaxes over every rank (TE: the DP x TP group), gradients over the replicas */
        TRY_RANK(f8_comm_create_cpu(ctx, o->g_dp, o->d, &dp));
        TRY_RANK(f8_comm_create_cpu(ctx, o->g_world, o->d * P + r, &world));
    }
    if (comm) TRY_RANK(f8_ctx_set_comm(ctx, world ? world : comm));
    const int64_t TT = o->tokens;
    const float *xin = o->x + (size_t)(o->d * T * K), *dyin = o->dy + (size_t)(o->d * T * K);
    f8_layernorm_linear_config c1 = f8_layernorm_linear_config_default(K, n);
    f8_linear_config c2 = f8_linear_config_default(n, K);
    c1.max_tokens = c2.max_tokens = TT;
    c2.bias = r == 0; /* the row-parallel bias is added once */
    f8_module *m1 = NULL, *m2 = NULL;
    TRY_RANK(f8_layernorm_linear_create(ctx, &c1, &m1));
    TRY_RANK(f8_linear_create(ctx, &c2, &m2));
    f8_saved *s1 = NULL, *s2 = NULL;
    if (o->st == F8_OK) TRY_RANK(f8_module_saved_create(m1, &s1));
    if (o->st == F8_OK) TRY_RANK(f8_module_saved_create(m2, &s2));
    /* this rank's slices of the full weights */
    float *hw2 = (float *)xmalloc(sizeof(float) * K * (size_t)n);
    for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < n; j++) hw2[i * n + j] = o->w2[i * N + r * n + j];
    f8_tensor v;
    if (o->st == F8_OK && f8_module_param(m1, F8_PARAM_WEIGHT, 0, &v) == F8_OK)
        TRY_RANK(f8_ctx_upload(ctx, v.data, o->w1 + r * n * K, sizeof(float) * (size_t)(n * K)));
    if (o->st == F8_OK && f8_module_param(m1, F8_PARAM_BIAS, 0, &v) == F8_OK)
        TRY_RANK(f8_ctx_upload(ctx, v.data, o->b1 + r * n, sizeof(float) * (size_t)n));
    if (o->st == F8_OK && f8_module_param(m2, F8_PARAM_WEIGHT, 0, &v) == F8_OK)
        TRY_RANK(f8_ctx_upload(ctx, v.data, hw2, sizeof(float) * K * (size_t)n));
    if (o->st == F8_OK && r == 0 && f8_module_param(m2, F8_PARAM_BIAS, 0, &v) == F8_OK)
        TRY_RANK(f8_ctx_upload(ctx, v.data, o->b2, sizeof(float) * K));
    free(hw2);
    float *x = (float *)alloc_up(ctx, xin, (size_t)(TT * K)), *dy = (float *)alloc_up(ctx, dyin, (size_t)(TT * K));
    float *y1 = (float *)alloc_up(ctx, NULL, (size_t)(TT * N)), *dy1 = (float *)alloc_up(ctx, NULL, (size_t)(TT * N));
    float *y2 = (float *)alloc_up(ctx, NULL, (size_t)(TT * K)), *dx = (float *)alloc_up(ctx, NULL, (size_t)(TT * K));
    f8_tensor tx = f8_tensor_make(x, F8_DTYPE_FP32, TT, K), ty1 = f8_tensor_make(y1, F8_DTYPE_FP32, TT, n);
    f8_tensor ty2 = f8_tensor_make(y2, F8_DTYPE_FP32, TT, K), tdy = f8_tensor_make(dy, F8_DTYPE_FP32, TT, K);
    f8_tensor tdy1 = f8_tensor_make(dy1, F8_DTYPE_FP32, TT, n), tdx = f8_tensor_make(dx, F8_DTYPE_FP32, TT, K);
    /* two steps: the first sets the (reduced) scales, the second uses them */
    for (int step = 0; step < 2 && o->st == F8_OK; step++) {
        TRY_RANK(f8_module_zero_grad(m1));
        TRY_RANK(f8_module_zero_grad(m2));
        TRY_RANK(f8_module_forward(m1, &tx, &ty1, F8_MICROBATCH_NONE, s1));
        TRY_RANK(f8_module_forward(m2, &ty1, &ty2, F8_MICROBATCH_NONE, s2));
        if (comm) TRY_RANK(f8_comm_all_reduce(comm, y2, y2, TT * K, F8_DTYPE_FP32, F8_REDUCE_SUM));
        TRY_RANK(f8_module_backward(m2, s2, &tdy, &tdy1));
        TRY_RANK(f8_module_backward(m1, s1, &tdy1, &tdx));
        f8_tensor dg, db;
        TRY_RANK(f8_module_param(m1, F8_PARAM_LN_WEIGHT, 1, &dg));
        TRY_RANK(f8_module_param(m1, F8_PARAM_LN_BIAS, 1, &db));
        if (comm && o->st == F8_OK) { /* every rank's share of the replicated input's gradients */
            TRY_RANK(f8_comm_all_reduce(comm, dx, dx, TT * K, F8_DTYPE_FP32, F8_REDUCE_SUM));
            TRY_RANK(f8_comm_all_reduce(comm, dg.data, dg.data, K, F8_DTYPE_FP32, F8_REDUCE_SUM));
            TRY_RANK(f8_comm_all_reduce(comm, db.data, db.data, K, F8_DTYPE_FP32, F8_REDUCE_SUM));
        }
        if (dp && o->st == F8_OK) { /* data parallel: every parameter's gradient summed over the replicas */
            const f8_param which[2][4] = {{F8_PARAM_WEIGHT, F8_PARAM_BIAS, F8_PARAM_LN_WEIGHT, F8_PARAM_LN_BIAS},
                                          {F8_PARAM_WEIGHT, F8_PARAM_BIAS, F8_PARAM_WEIGHT, F8_PARAM_WEIGHT}};
            for (int mi = 0; mi < 2; mi++)
                for (int k = 0; k < (mi ? 2 : 4); k++) {
                    f8_tensor gv;
                    if (f8_module_param(mi ? m2 : m1, which[mi][k], 1, &gv) != F8_OK) continue; /* no bias */
                    TRY_RANK(f8_comm_all_reduce(dp, gv.data, gv.data, gv.rows * gv.cols, F8_DTYPE_FP32, F8_REDUCE_SUM));
                }
        }
        TRY_RANK(f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        TRY_RANK(f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
        if (step == 0 && o->st == F8_OK) { /* the scales the second step will use */
            o->n_scales = 0;
            for (int d = 0; d < 2; d++)
                for (int i = 0; i < f8_ctx_slot_count(ctx, (f8_direction)d) && o->n_scales < 16; i++) {
                    f8_slot s = {d, i};
                    TRY_RANK(f8_slot_read(ctx, s, &o->scales[o->n_scales++], NULL, NULL));
                }
        }
        if (step == 1 && o->st == F8_OK) {
            f8_tensor w;
            TRY_RANK(f8_ctx_download(ctx, o->y1, y1, sizeof(float) * (size_t)(TT * n)));
            TRY_RANK(f8_ctx_download(ctx, o->y2, y2, sizeof(float) * (size_t)(TT * K)));
            TRY_RANK(f8_ctx_download(ctx, o->dx, dx, sizeof(float) * (size_t)(TT * K)));
            TRY_RANK(f8_ctx_download(ctx, o->dgamma, dg.data, sizeof o->dgamma));
            TRY_RANK(f8_ctx_download(ctx, o->dbeta, db.data, sizeof o->dbeta));
            TRY_RANK(f8_module_param(m1, F8_PARAM_WEIGHT, 1, &w));
            TRY_RANK(f8_ctx_download(ctx, o->dw1, w.data, sizeof(float) * (size_t)(n * K)));
            TRY_RANK(f8_module_param(m2, F8_PARAM_WEIGHT, 1, &w));
            TRY_RANK(f8_ctx_download(ctx, o->dw2, w.data, sizeof(float) * (size_t)(K * n)));
        }
    }
    if (o->st != F8_OK && o->g) f8_comm_group_abort(o->g);
    if (o->st != F8_OK && o->g_dp) f8_comm_group_abort(o->g_dp), f8_comm_group_abort(o->g_world);
    f8_saved_destroy(s1);
    f8_saved_destroy(s2);
    f8_module_destroy(m1);
    f8_module_destroy(m2);
    f8_ctx_free(ctx, x), f8_ctx_free(ctx, dy), f8_ctx_free(ctx, y1), f8_ctx_free(ctx, dy1), f8_ctx_free(ctx, y2),
        f8_ctx_free(ctx, dx);
    f8_comm_destroy(comm);
    f8_comm_destroy(dp);
    f8_comm_destroy(world);
    f8_ctx_destroy(ctx);
    return NULL;
}

static double rel(const float *a, const float *b, size_t n)
{
    double w = 0, s = 0;
    for (size_t i = 0; i < n; i++) s = fmax(s, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return s > 0 ? w / s : w;
}

static float x[MAXD * T * K], dy[MAXD * T * K], w1[N * K], b1[N], w2[K * N], b2[K];

/* P TP ranks in each of D replicas against ref (one rank over all D·T tokens). */
static void run_case(int P, int D, const tp_out *ref)
{
    static tp_out outs[MAXD * MAXP];
    f8_comm_group *g_tp[MAXD] = {NULL}, *g_dp[MAXP] = {NULL}, *g_world = NULL;
    char err[256];
    for (int d = 0; d < D; d++)
        if (f8_comm_group_create(P, &g_tp[d], err, sizeof err) != F8_OK) die(err, NULL);
    if (D > 1) {
        for (int r = 0; r < P; r++)
            if (f8_comm_group_create(D, &g_dp[r], err, sizeof err) != F8_OK) die(err, NULL);
        if (f8_comm_group_create(P * D, &g_world, err, sizeof err) != F8_OK) die(err, NULL);
    }
    pthread_t th[MAXD * MAXP];
    for (int d = 0; d < D; d++)
        for (int r = 0; r < P; r++) {
            tp_out *o = &outs[d * P + r];
            *o = (tp_out){.rank = r, .P = P, .d = d, .D = D, .g = g_tp[d], .g_dp = g_dp[r], .g_world = g_world,
                          .x = x, .dy = dy, .w1 = w1, .b1 = b1, .w2 = w2, .b2 = b2, .tokens = T};
            if (pthread_create(&th[d * P + r], NULL, tp_rank, o) != 0) die("pthread_create", NULL);
        }
    for (int k = 0; k < P * D; k++) pthread_join(th[k], NULL);
    for (int d = 0; d < D; d++) f8_comm_group_destroy(g_tp[d]);
    for (int r = 0; r < P && D > 1; r++) f8_comm_group_destroy(g_dp[r]);
    f8_comm_group_destroy(g_world);
    const int64_t n = N / P;
    double worst[6] = {0};
    for (int k = 0; k < P * D; k++) {
        const tp_out *o = &outs[k];
        const int r = o->rank, d = o->d;
        CHECK(o->st == F8_OK, "P=%d D=%d rank (%d, %d): %s", P, D, d, r, o->err);
        if (o->st != F8_OK) continue;
        CHECK(o->n_scales == ref->n_scales && memcmp(o->scales, ref->scales, sizeof(float) * (size_t)ref->n_scales) == 0,
              "P=%d D=%d rank (%d, %d): scales after the amax reduction differ from one rank's", P, D, d, r);
        int y1_same = 1, dw1_same = 1, dw2_same = 1;
        float dw1_ref[N * K], dw2_ref[K * N], dw2_mine[K * N];
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < n; j++) y1_same &= o->y1[t * n + j] == ref->y1[(d * T + t) * N + r * n + j];
        for (int64_t i = 0; i < n * K; i++) dw1_ref[i] = ref->dw1[r * n * K + i], dw1_same &= o->dw1[i] == dw1_ref[i];
        for (int64_t i = 0; i < K; i++)
            for (int64_t j = 0; j < n; j++) {
                dw2_ref[i * n + j] = ref->dw2[i * N + r * n + j], dw2_mine[i * n + j] = o->dw2[i * n + j];
                dw2_same &= dw2_mine[i * n + j] == dw2_ref[i * n + j];
            }
        CHECK(y1_same, "P=%d D=%d rank (%d, %d): column-parallel output not bitwise the one-rank columns", P, D, d, r);
        /* TP alone splits no wgrad reduction (bitwise); DP splits the tokens (a tolerance) */
        CHECK(D > 1 || (dw1_same && dw2_same), "P=%d rank %d: weight-gradient slices not bitwise", P, r);
        const double e[6] = {rel(o->y2, ref->y2 + d * T * K, T * K), rel(o->dx, ref->dx + d * T * K, T * K),
                             rel(o->dgamma, ref->dgamma, K), rel(o->dbeta, ref->dbeta, K),
                             rel(o->dw1, dw1_ref, (size_t)(n * K)), rel(dw2_mine, dw2_ref, (size_t)(K * n))};
        for (int j = 0; j < 6; j++) {
            worst[j] = fmax(worst[j], e[j]);
            CHECK(e[j] <= 1e-5, "P=%d D=%d rank (%d, %d): value %d (y, dx, dgamma, dbeta, dW1, dW2) %.3g relative "
                                "(> 1e-5)", P, D, d, r, j, e[j]);
            if (P == 1 && D == 1) CHECK(e[j] == 0, "P=1: value %d not bitwise (%g)", j, e[j]);
        }
        const tp_out *o0 = &outs[d * P];
        CHECK(memcmp(o->y2, o0->y2, sizeof(float) * T * K) == 0 && memcmp(o->dx, o0->dx, sizeof(float) * T * K) == 0,
              "P=%d D=%d rank (%d, %d): the all-reduced values differ from its TP rank 0's", P, D, d, r);
    }
    printf("  TP %d x DP %d: y %.2e, dx %.2e, dgamma %.2e, dbeta %.2e, dW1 %.2e, dW2 %.2e (max abs error / max abs)\n",
           P, D, worst[0], worst[1], worst[2], worst[3], worst[4], worst[5]);
}

int main(void)
{
    test_rng g = {42};
    for (int i = 0; i < MAXD * T * K; i++) x[i] = (float)rng_normal(&g), dy[i] = (float)(rng_normal(&g) * 1e-2);
    for (int i = 0; i < N * K; i++) w1[i] = (float)(rng_normal(&g) * 0.05), w2[i] = (float)(rng_normal(&g) * 0.05);
    for (int i = 0; i < N; i++) b1[i] = (float)(rng_normal(&g) * 0.1);
    for (int i = 0; i < K; i++) b2[i] = (float)(rng_normal(&g) * 0.1);
    static tp_out ref1, ref2;
    ref1 = (tp_out){.x = x, .dy = dy, .w1 = w1, .b1 = b1, .w2 = w2, .b2 = b2, .D = 1, .tokens = T};
    ref2 = ref1;
    ref2.tokens = MAXD * T; /* one rank over both replicas' tokens */
    tp_rank(&ref1);
    tp_rank(&ref2);
    CHECK(ref1.st == F8_OK && ref2.st == F8_OK, "reference: %s %s", ref1.err, ref2.err);
    for (int P = 1; P <= MAXP; P *= 2) run_case(P, 1, &ref1);
    run_case(2, 2, &ref2); /* DP x TP: 4 ranks */
    return test_finish("test_tp");
}
