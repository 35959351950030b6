/*
 * test_residual.c — the fused residual calls, f8_module_forward_add and
 * f8_module_backward_add, on the CPU backend, for Linear, LayerNormLinear
 * and LayerNormMLP, FP8 on and off, FP32 and BF16, with and without a bias,
 * the residual apart from y and y itself.
 *
 * The oracle is the plain call on the same module into an FP32 output: the
 * CPU backend's GEMM and norm backward store the FP32 value they computed,
 * so forward(x) into FP32 y is exactly the value the fused GEMM adds the
 * residual to (the same casts, scales and sums: no scale update runs
 * between the calls). Without a bias the fused result must then be, bit for
 * bit, that value plus the residual in FP32, rounded once to y's dtype (the
 * contract's formula); with one (added after the residual) it must be
 * within a few roundings of the FP64 sum. The backward likewise: dx must
 * be the plain call's FP32 dx plus the old dx, rounded once. Then the
 * in-place forms (residual == y; dx == dy for the norm modules), a Linear
 * refusing dx over dy, and a CPU graph recording both calls and replaying
 * them to the same bits. Bad arguments are hostile cases (test_hostile).
 */
#include <math.h>
#include <string.h>

#include "check.h"
#include "device_buffers.h"

enum { LIN = 0, LNL = 1, MLP = 2 };
static const char *KIND[3] = {"linear", "lnlinear", "mlp"};

typedef struct rcase {
    int kind, fp8, bias;
    f8_dtype dt;        /* parameters, x, y, dy and dx */
    int64_t T, in, out; /* MLP: out = in, ffn = 56 */
} rcase;

/* Backend tensor [rows, cols] of dt holding v (rounded to dt; v updated to what it holds). */
static f8_tensor make_tensor(f8_ctx *ctx, f8_dtype dt, int64_t rows, int64_t cols, float *v)
{
    f8_tensor t = f8_tensor_make(balloc(ctx, (size_t)(rows * cols) * f8_dtype_size(dt)), dt, rows, cols);
    const size_t n = (size_t)(rows * cols);
    void *raw = xmalloc(n * f8_dtype_size(dt) + 1);
    for (size_t i = 0; i < n; i++) {
        v[i] = round_dt(v[i], dt);
        if (dt == F8_DTYPE_BF16) ((uint16_t *)raw)[i] = f8_bf16_from_float(v[i]);
        else ((float *)raw)[i] = v[i];
    }
    upload(ctx, t.data, raw, tensor_bytes(&t));
    free(raw);
    return t;
}

static float *randv(test_rng *r, size_t n, double sd)
{
    float *v = xmalloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) v[i] = (float)(rng_normal(r) * sd);
    return v;
}

static f8_module *create(f8_ctx *ctx, const rcase *c)
{
    f8_module *m = NULL;
    f8_status st;
    if (c->kind == LIN) {
        f8_linear_config k = f8_linear_config_default(c->in, c->out);
        k.bias = c->bias, k.fp8 = c->fp8, k.param_dtype = c->dt, k.max_tokens = c->T;
        st = f8_linear_create(ctx, &k, &m);
    } else if (c->kind == LNL) {
        f8_layernorm_linear_config k = f8_layernorm_linear_config_default(c->in, c->out);
        k.bias = c->bias, k.fp8 = c->fp8, k.param_dtype = c->dt, k.max_tokens = c->T;
        st = f8_layernorm_linear_create(ctx, &k, &m);
    } else {
        f8_layernorm_mlp_config k = f8_layernorm_mlp_config_default(c->in, 56);
        k.bias = c->bias, k.fp8 = c->fp8, k.param_dtype = c->dt, k.max_tokens = c->T;
        st = f8_layernorm_mlp_create(ctx, &k, &m);
    }
    if (st != F8_OK) die("module create", ctx);
    return m;
}

/* A non-zero output bias (init is 0), so the bias's place in the sum shows. */
static float *set_bias(f8_ctx *ctx, f8_module *m, const rcase *c, test_rng *r)
{
    float *b = xmalloc((size_t)c->out * sizeof(float));
    for (int64_t j = 0; j < c->out; j++) b[j] = 0.0f;
    if (!c->bias) return b;
    f8_tensor v;
    CHECK_OK(ctx, f8_module_param(m, c->kind == MLP ? F8_PARAM_FC2_BIAS : F8_PARAM_BIAS, 0, &v));
    for (int64_t j = 0; j < c->out; j++) b[j] = (float)(rng_normal(r) * 0.1);
    f8_tensor t = make_tensor(ctx, v.dtype, 1, c->out, b);
    CHECK_OK(ctx, f8_ctx_copy(ctx, v.data, t.data, tensor_bytes(&t)));
    f8_ctx_free(ctx, t.data);
    return b;
}

/* got against the one-rounding formula want = round(ref + add): bit for bit
 * (exact), or (with a bias after the addend) within a few roundings of the
 * FP64 sum ref + add, whose magnitude bound mag says. */
static void check_sum(const char *desc, const char *what, const float *got, const float *ref, const float *add,
                      const float *bias, size_t n, int64_t cols, f8_dtype dt, int exact)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        const float want = round_dt(ref[i] + add[i], dt);
        int ok;
        if (exact) {
            ok = memcmp(&got[i], &want, sizeof want) == 0 || (got[i] == 0.0f && want == 0.0f);
        } else {
            const double mag = fabs((double)ref[i]) + fabs((double)add[i]) + fabs((double)bias[i % (size_t)cols]);
            const double tol = mag * (dt == F8_DTYPE_BF16 ? 0x1p-7 : 0x1p-21) + 1e-30;
            ok = fabs((double)got[i] - ((double)ref[i] + (double)add[i])) <= tol;
        }
        if (!ok && bad++ == 0) first = i;
    }
    CHECK(bad == 0, "%s %s: %zu of %zu elements off the one-rounding sum; first [%zu]: got %.9g, ref %.9g + %.9g", desc,
          what, bad, n, first, (double)got[first], (double)ref[first], (double)add[first]);
}

static void run_case(f8_ctx *ctx, const rcase *c, test_rng *r)
{
    char desc[160];
    snprintf(desc, sizeof desc, "%s T%lld in%lld out%lld fp8 %d %s bias %d", KIND[c->kind], (long long)c->T,
             (long long)c->in, (long long)c->out, c->fp8, f8_dtype_name(c->dt), c->bias);
    const int64_t T = c->T, K = c->in, N = c->out;
    const size_t nx = (size_t)(T * K), ny = (size_t)(T * N);
    f8_module *m = create(ctx, c);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(m, &s));
    float *bias = set_bias(ctx, m, c, r);
    float *hx = randv(r, nx, 1.0), *hr = randv(r, ny, 0.1), *hdy = randv(r, ny, 1.0), *hold = randv(r, nx, 0.1);
    float *zero = randv(r, ny > nx ? ny : nx, 0.0);
    f8_tensor x = make_tensor(ctx, c->dt, T, K, hx), res = make_tensor(ctx, c->dt, T, N, hr);
    f8_tensor dy = make_tensor(ctx, c->dt, T, N, hdy), dxo = make_tensor(ctx, c->dt, T, K, hold);
    f8_tensor y32 = make_tensor(ctx, F8_DTYPE_FP32, T, N, zero), y = make_tensor(ctx, c->dt, T, N, zero);
    f8_tensor dx32 = make_tensor(ctx, F8_DTYPE_FP32, T, K, zero);
    const f8_microbatch mb = F8_MICROBATCH_NONE;

    /* forward: plain into FP32, then fused, apart and in place */
    CHECK_OK(ctx, f8_module_forward(m, &x, &y32, mb, NULL));
    float *ref = to_host(ctx, &y32);
    CHECK_OK(ctx, f8_module_forward_add(m, &x, &y, &res, mb, s));
    float *got = to_host(ctx, &y);
    check_sum(desc, "forward_add y", got, ref, hr, bias, ny, N, c->dt, !c->bias);
    free(got);
    CHECK_OK(ctx, f8_ctx_copy(ctx, y.data, res.data, tensor_bytes(&y))); /* y = residual, then y += module(x) */
    CHECK_OK(ctx, f8_module_forward_add(m, &x, &y, &y, mb, NULL));
    got = to_host(ctx, &y);
    check_sum(desc, "forward_add in place", got, ref, hr, bias, ny, N, c->dt, !c->bias);
    free(got);

    /* backward: plain into FP32 (consumes s), forward again, then fused */
    CHECK_OK(ctx, f8_module_backward(m, s, &dy, &dx32));
    float *dref = to_host(ctx, &dx32);
    CHECK_OK(ctx, f8_module_forward(m, &x, &y, mb, s));
    CHECK_OK(ctx, f8_module_backward_add(m, s, &dy, &dxo));
    got = to_host(ctx, &dxo);
    check_sum(desc, "backward_add dx", got, dref, hold, bias, nx, K, c->dt, 1);
    free(got);
    if (c->kind == MLP) { /* dx is dy itself: read before the norm backward adds into it */
        CHECK_OK(ctx, f8_module_forward(m, &x, &y, mb, s));
        CHECK_OK(ctx, f8_module_backward_add(m, s, &dy, &dy));
        got = to_host(ctx, &dy);
        check_sum(desc, "backward_add dx = dy", got, dref, hdy, bias, nx, K, c->dt, 1);
        free(got);
    }
    if (c->kind == LIN) { /* dgrad reads dy while it writes dx: refused, and saved stays filled */
        f8_tensor over = f8_tensor_make(dy.data, c->dt, T, K); /* never touched: refused first */
        CHECK_OK(ctx, f8_module_forward(m, &x, &y, mb, s));
        CHECK_STATUS(ctx, f8_module_backward_add(m, s, &dy, &over), F8_ERR_INVALID_ARGUMENT);
        CHECK(strstr(f8_ctx_last_error(ctx), "a Linear reads dy") != NULL, "%s: refusal message '%s'", desc,
              f8_ctx_last_error(ctx));
        CHECK_OK(ctx, f8_module_backward(m, s, &dy, NULL));
    }

    f8_tensor *all[] = {&x, &res, &dy, &dxo, &y32, &y, &dx32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) f8_ctx_free(ctx, all[i]->data);
    free(hx), free(hr), free(hdy), free(hold), free(zero), free(ref), free(dref), free(bias);
    f8_saved_destroy(s);
    f8_module_destroy(m);
}

/* A CPU graph records (kind, args) copies: the addend pointer and the
 * dx_accumulate flag must travel with them. Eager and replayed bits agree. */
static void test_graph(f8_ctx *ctx, test_rng *r)
{
    const rcase c = {MLP, 1, 1, F8_DTYPE_BF16, 16, 32, 32};
    const size_t n = (size_t)(c.T * c.in);
    f8_module *m = create(ctx, &c);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(m, &s));
    float *hx = randv(r, n, 1.0), *hr = randv(r, n, 0.1), *hdy = randv(r, n, 1.0), *hold = randv(r, n, 0.1);
    f8_tensor x = make_tensor(ctx, c.dt, c.T, c.in, hx), res = make_tensor(ctx, c.dt, c.T, c.in, hr);
    f8_tensor dy = make_tensor(ctx, c.dt, c.T, c.in, hdy), y = make_tensor(ctx, c.dt, c.T, c.in, hr);
    f8_tensor dx = make_tensor(ctx, c.dt, c.T, c.in, hold);
    CHECK_OK(ctx, f8_module_forward_add(m, &x, &y, &res, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward_add(m, s, &dy, &dx));
    float *ey = to_host(ctx, &y), *edx = to_host(ctx, &dx);
    f8_tensor y2 = make_tensor(ctx, c.dt, c.T, c.in, hx), dx2 = make_tensor(ctx, c.dt, c.T, c.in, hold);
    f8_graph *g = NULL;
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, f8_module_forward_add(m, &x, &y2, &res, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward_add(m, s, &dy, &dx2));
    CHECK_OK(ctx, f8_graph_end(ctx, &g));
    CHECK_OK(ctx, f8_graph_replay(g));
    float *gy = to_host(ctx, &y2), *gdx = to_host(ctx, &dx2);
    CHECK(memcmp(ey, gy, n * sizeof(float)) == 0, "graph: replayed forward_add differs from eager");
    CHECK(memcmp(edx, gdx, n * sizeof(float)) == 0, "graph: replayed backward_add differs from eager");
    f8_graph_destroy(g);
    f8_tensor *all[] = {&x, &res, &dy, &y, &dx, &y2, &dx2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) f8_ctx_free(ctx, all[i]->data);
    free(hx), free(hr), free(hdy), free(hold), free(ey), free(edx), free(gy), free(gdx);
    f8_saved_destroy(s);
    f8_module_destroy(m);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "test_residual: %s\n", why);
        return 1;
    }
    test_rng r = {0x2E51D0Aull};
    static const f8_dtype dts[2] = {F8_DTYPE_FP32, F8_DTYPE_BF16};
    for (int kind = 0; kind < 3; kind++)
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int d = 0; d < 2; d++)
                for (int bias = 0; bias < 2; bias++) {
                    /* odd shapes (the padded GEMM path's on a GPU); MLP: out = in */
                    rcase c = {kind, fp8, bias, dts[d], 13, 40, kind == MLP ? 40 : 24};
                    run_case(ctx, &c, &r);
                    c.T = 32, c.in = 64, c.out = kind == MLP ? 64 : 48;
                    run_case(ctx, &c, &r);
                }
    test_graph(ctx, &r);
    f8_ctx_destroy(ctx);
    return test_finish("test_residual");
}
