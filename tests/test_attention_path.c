/*
 * test_attention_path.c — the attention path as configuration: the ctx
 * config's attention_path and attention_nondeterministic (defaults, the
 * values create refuses) and f8_attention_query_path (its argument checks;
 * on a CPU ctx every call is OWN). On a GPU, for each config (AUTO, OWN,
 * AUTO with the non-deterministic backward) and each case (BF16 head_dim 64,
 * which cuDNN takes where it is installed; FP32, which it never takes), the
 * query's answer is compared with the path the forward and the backward then
 * take (the backend's last_path record), and OWN must never take cuDNN.
 * Without a GPU the GPU half reports itself skipped.
 */
#include "check.h"
#include "core/backend.h"
#include "device_buffers.h"

static f8_ctx *make_ctx(f8_backend backend, f8_attention_path path, int nondet, char *why, size_t n)
{
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = backend;
    cfg.attention_path = path;
    cfg.attention_nondeterministic = nondet;
    f8_ctx *ctx = NULL;
    if (f8_ctx_create(&cfg, &ctx, why, n) != F8_OK) return NULL;
    return ctx;
}

static void config_checks(void)
{
    const f8_ctx_config d = f8_ctx_config_default();
    CHECK(d.attention_path == F8_ATTENTION_PATH_AUTO && d.attention_nondeterministic == 0,
          "defaults: attention_path %d, attention_nondeterministic %d", (int)d.attention_path, d.attention_nondeterministic);
    static const struct {
        int path, nondet;
    } bad[] = {{F8_ATTENTION_PATH_CUDNN, 0}, {-1, 0}, {7, 0}, {F8_ATTENTION_PATH_AUTO, 2}, {F8_ATTENTION_PATH_OWN, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f8_ctx_config cfg = f8_ctx_config_default();
        cfg.attention_path = (f8_attention_path)bad[i].path;
        cfg.attention_nondeterministic = bad[i].nondet;
        f8_ctx *ctx = (f8_ctx *)&cfg; /* must come back NULL */
        char why[256] = "";
        const f8_status st = f8_ctx_create(&cfg, &ctx, why, sizeof why);
        CHECK(st == F8_ERR_INVALID_ARGUMENT && ctx == NULL && strstr(why, "attention") != NULL,
              "attention_path %d, nondeterministic %d: %s (%s)", bad[i].path, bad[i].nondet, f8_status_string(st), why);
        if (st == F8_OK) f8_ctx_destroy(ctx);
    }
    char why[256] = "";
    f8_ctx *ctx = make_ctx(F8_BACKEND_CPU, F8_ATTENTION_PATH_OWN, 1, why, sizeof why);
    CHECK(ctx != NULL, "a CPU ctx with OWN and nondeterministic 1: %s", why);
    f8_ctx_destroy(ctx);
}

static void cpu_query_checks(void)
{
    char why[256] = "";
    f8_ctx *ctx = make_ctx(F8_BACKEND_CPU, F8_ATTENTION_PATH_AUTO, 0, why, sizeof why);
    if (!ctx) die(why, NULL);
    f8_attention_config cfg = f8_attention_config_default(2, 64, 2, 16);
    f8_attention *a = NULL;
    CHECK_OK(ctx, f8_attention_create(ctx, &cfg, &a));
    if (!a) die("f8_attention_create", ctx);
    for (int bwd = 0; bwd < 2; bwd++) {
        f8_attention_path p = F8_ATTENTION_PATH_CUDNN;
        CHECK_OK(ctx, f8_attention_query_path(a, 2, 16, bwd, &p));
        CHECK(p == F8_ATTENTION_PATH_OWN, "CPU ctx, backward %d: path %d, expected OWN", bwd, (int)p);
        CHECK_OK(ctx, f8_attention_query_path(a, 1, 1, bwd, &p));
        CHECK(p == F8_ATTENTION_PATH_OWN, "CPU ctx B1 S1, backward %d: path %d, expected OWN", bwd, (int)p);
    }
    f8_attention_path p = F8_ATTENTION_PATH_CUDNN;
    CHECK_STATUS(ctx, f8_attention_query_path(a, 0, 16, 0, &p), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_attention_query_path(a, 3, 16, 0, &p), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_attention_query_path(a, 2, 0, 0, &p), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_attention_query_path(a, 2, 17, 1, &p), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_attention_query_path(a, 2, 16, 2, &p), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_attention_query_path(a, 2, 16, 0, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_attention_query_path(NULL, 2, 16, 0, &p), F8_ERR_INVALID_ARGUMENT);
    CHECK(p == F8_ATTENTION_PATH_CUDNN, "a refused query wrote its output (%d)", (int)p);
    f8_attention_destroy(a);
    f8_ctx_destroy(ctx);
}

/* One attention on a GPU ctx: the query's answers against the paths the
 * forward and backward take. Returns 1 when the forward ran on cuDNN. */
static int gpu_case(f8_ctx *ctx, const char *cfg_name, f8_dtype dt, int64_t hd, int own)
{
    const int64_t B = 2, S = 64, nh = 2, C = nh * hd, T = B * S;
    const size_t es = f8_dtype_size(dt);
    f8_attention_config cfg = f8_attention_config_default(nh, hd, B, S);
    cfg.dtype = dt;
    f8_attention *a = NULL;
    f8_attention_saved *sv = NULL;
    CHECK_OK(ctx, f8_attention_create(ctx, &cfg, &a));
    CHECK_OK(ctx, f8_attention_saved_create(a, &sv));
    if (!a || !sv) die("attention create", ctx);
    f8_tensor q = f8_tensor_make(balloc(ctx, (size_t)(T * 3 * C) * es), dt, T, 3 * C);
    f8_tensor y = f8_tensor_make(balloc(ctx, (size_t)(T * C) * es), dt, T, C);
    f8_tensor g = f8_tensor_make(balloc(ctx, (size_t)(T * 3 * C) * es), dt, T, 3 * C);
    void *zero = calloc((size_t)(T * 3 * C), es);
    upload(ctx, q.data, zero, (size_t)(T * 3 * C) * es);
    free(zero);
    f8_attention_path qf = F8_ATTENTION_PATH_AUTO, qb = F8_ATTENTION_PATH_AUTO;
    CHECK_OK(ctx, f8_attention_query_path(a, B, S, 0, &qf));
    CHECK_OK(ctx, f8_attention_query_path(a, B, S, 1, &qb));
    CHECK_OK(ctx, f8_attention_forward(a, &q, B, S, &y, sv));
    const int pf = f8i_cuda_attn_last_path(ctx);
    CHECK_OK(ctx, f8_attention_backward(a, sv, &y, &g));
    const int pb = f8i_cuda_attn_last_path(ctx);
    printf("  %-12s %s hd%lld: query fwd %s bwd %s, ran fwd %s bwd %s\n", cfg_name, f8_dtype_name(dt), (long long)hd,
           qf == F8_ATTENTION_PATH_CUDNN ? "cuDNN" : "own", qb == F8_ATTENTION_PATH_CUDNN ? "cuDNN" : "own",
           pf == F8I_ATTN_PATH_CUDNN ? "cuDNN" : "own", pb == F8I_ATTN_PATH_CUDNN ? "cuDNN" : "own");
    CHECK((qf == F8_ATTENTION_PATH_CUDNN) == (pf == F8I_ATTN_PATH_CUDNN) && pf != F8I_ATTN_PATH_NONE,
          "%s %s hd%lld forward: query %d, ran %d (%s)", cfg_name, f8_dtype_name(dt), (long long)hd, (int)qf, pf,
          f8i_cuda_attn_info(ctx, NULL));
    CHECK((qb == F8_ATTENTION_PATH_CUDNN) == (pb == F8I_ATTN_PATH_CUDNN) && pb != F8I_ATTN_PATH_NONE,
          "%s %s hd%lld backward: query %d, ran %d (%s)", cfg_name, f8_dtype_name(dt), (long long)hd, (int)qb, pb,
          f8i_cuda_attn_info(ctx, NULL));
    CHECK(!own || (pf == F8I_ATTN_PATH_OWN && pb == F8I_ATTN_PATH_OWN), "%s: a call took cuDNN", cfg_name);
    CHECK(dt == F8_DTYPE_BF16 || (qf == F8_ATTENTION_PATH_OWN && qb == F8_ATTENTION_PATH_OWN),
          "%s FP32: the query says cuDNN", cfg_name);
    f8_ctx_free(ctx, q.data);
    f8_ctx_free(ctx, y.data);
    f8_ctx_free(ctx, g.data);
    f8_attention_saved_destroy(sv);
    f8_attention_destroy(a);
    return pf == F8I_ATTN_PATH_CUDNN;
}

static int gpu_checks(void)
{
    static const struct {
        const char *name;
        f8_attention_path path;
        int nondet;
    } cfgs[] = {{"AUTO", F8_ATTENTION_PATH_AUTO, 0}, {"OWN", F8_ATTENTION_PATH_OWN, 0}, {"AUTO-nondet", F8_ATTENTION_PATH_AUTO, 1}};
    int cudnn_ran = 0;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        char why[256] = "";
        f8_ctx *ctx = make_ctx(F8_BACKEND_CUDA, cfgs[i].path, cfgs[i].nondet, why, sizeof why);
        if (!ctx) {
            printf("test_attention_path: SKIP the GPU half (%s)\n", why);
            return 0;
        }
        cudnn_ran |= gpu_case(ctx, cfgs[i].name, F8_DTYPE_BF16, 64, cfgs[i].path == F8_ATTENTION_PATH_OWN);
        gpu_case(ctx, cfgs[i].name, F8_DTYPE_FP32, 64, cfgs[i].path == F8_ATTENTION_PATH_OWN);
        f8_ctx_destroy(ctx);
    }
    const char *req = getenv("F8_REQUIRE_CUDNN");
    CHECK(cudnn_ran || !req || strcmp(req, "0") == 0, "F8_REQUIRE_CUDNN is set but cuDNN took no call");
    return 1;
}

int main(void)
{
    config_checks();
    cpu_query_checks();
    gpu_checks();
    return test_finish("test_attention_path");
}
