/*
 * test_cuda_rope_gqa.c — RoPE and grouped-query attention on the GPU against
 * the CPU backend (the oracle, itself checked against FP64 in
 * test_rope_gqa.c), on the same inputs:
 *  - RoPE forward and backward bit for bit (both backends apply the same
 *    FP32 table in the same order, no fused multiply-add), FP32 and BF16,
 *    Llama 3's scaling, head_dim 64 and 128, rows past one sequence;
 *  - the composite a Llama layer runs (RoPE, GQA attention; its backward)
 *    at G = 1 (multi-query), 2, 4 and nh, on every path: f8's generic
 *    kernels (FP32, odd head_dim), f8's fused BF16 kernels (head_dim 64,
 *    128; F8I_ATTN_OWN) and cuDNN (F8I_ATTN_AUTO: K and V with G heads,
 *    dK and dV summed over the group in the graph), the path each call took
 *    checked; S = 1, 7, 129 (one past a 128-row block), 257;
 *  - a second run bitwise the first (determinism: the group sums take one
 *    fixed order on every path).
 * Tolerances as test_cuda_attention.c's, per element |gpu - cpu| <=
 * t·(rms(cpu) + |cpu|): FP32 1e-4; BF16 y 2e-2, dqkv 5e-2 (cuDNN rounds each
 * query head's dK, dV to BF16 before the group sum: one more 2^-9).
 * Without a GPU (or in a CUDA=0 build) the program reports itself skipped;
 * where cuDNN cannot be loaded its half is skipped unless F8_REQUIRE_CUDNN=1.
 */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "rope_gqa_rig.h"

enum { CPU = 0, GPU = 1 };
static f8_ctx *g_ctx[2];

/* Worst |g - c| / (t·(rms(c) + |c|)) over n: <= 1 passes. */
static double worst_ratio(const float *g, const float *c, size_t n, double t)
{
    double ss = 0, worst = 0;
    for (size_t i = 0; i < n; i++) ss += (double)c[i] * c[i];
    const double rms = sqrt(ss / (double)(n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        const double r = fabs((double)g[i] - c[i]) / (t * (rms + fabs((double)c[i])) + 1e-30);
        if (!(r <= worst)) worst = r; /* NaN sticks */
    }
    return worst;
}

static void test_rope_bitwise(f8_dtype dt, int64_t hd)
{
    const lshape sh = {3, 37, 8, 2, hd};
    const int64_t T = ls_T(sh), W = ls_W(sh);
    const size_t n = (size_t)(T * W);
    f8_rope_config c = f8_rope_config_default(sh.nh, sh.G, hd, sh.S);
    c.theta = 500000.0, c.scaling = F8_ROPE_SCALING_LLAMA3, c.factor = 32.0;
    test_rng r = {11 + (uint64_t)hd};
    float *x = rig_rand(&r, n, 2.0, dt), *out[2][2];
    for (int be = 0; be < 2; be++) {
        f8_rope *rope = NULL;
        CHECK_OK(g_ctx[be], f8_rope_create(g_ctx[be], &c, &rope));
        f8_tensor t = rig_put(g_ctx[be], x, T, W, dt);
        out[be][0] = (float *)xmalloc(n * sizeof(float)), out[be][1] = (float *)xmalloc(n * sizeof(float));
        CHECK_OK(g_ctx[be], f8_rope_forward(rope, &t, sh.S));
        rig_get(g_ctx[be], &t, out[be][0]);
        CHECK_OK(g_ctx[be], f8_rope_backward(rope, &t, sh.S));
        rig_get(g_ctx[be], &t, out[be][1]);
        f8_ctx_free(g_ctx[be], t.data);
        f8_rope_destroy(rope);
    }
    CHECK(memcmp(out[GPU][0], out[CPU][0], n * sizeof(float)) == 0, "%s hd%lld rope forward: GPU bitwise the CPU",
          f8_dtype_name(dt), (long long)hd);
    CHECK(memcmp(out[GPU][1], out[CPU][1], n * sizeof(float)) == 0, "%s hd%lld rope backward: GPU bitwise the CPU",
          f8_dtype_name(dt), (long long)hd);
    free(x);
    for (int be = 0; be < 2; be++) free(out[be][0]), free(out[be][1]);
}

/* One shape on both backends under the GPU's attention mode; want_path: the path the GPU must report (0: any). */
static void test_composite(lshape sh, f8_dtype dt, int mode, int want_path)
{
    const size_t nq = (size_t)(ls_T(sh) * ls_W(sh)), ny = (size_t)(ls_T(sh) * ls_C(sh));
    f8_rope_config c = f8_rope_config_default(sh.nh, sh.G, sh.hd, sh.S);
    c.theta = 500000.0, c.scaling = F8_ROPE_SCALING_LLAMA3, c.factor = 32.0;
    test_rng r = {1000 + (uint64_t)(sh.S * 31 + sh.G * 7 + sh.hd)};
    float *qkv = rig_rand(&r, nq, 1.0, dt), *dy = rig_rand(&r, ny, 1.0, dt);
    float *y[3], *g[3];
    for (int k = 0; k < 3; k++) y[k] = (float *)xmalloc(ny * sizeof(float)), g[k] = (float *)xmalloc(nq * sizeof(float));
    f8i_cuda_attn_set_mode(g_ctx[GPU], mode);
    rig_run(g_ctx[CPU], sh, dt, &c, qkv, dy, NULL, y[0], g[0]);
    rig_run(g_ctx[GPU], sh, dt, &c, qkv, dy, NULL, y[1], g[1]);
    const int path = f8i_cuda_attn_last_path(g_ctx[GPU]);
    rig_run(g_ctx[GPU], sh, dt, &c, qkv, dy, NULL, y[2], g[2]);
    const double ty = dt == F8_DTYPE_FP32 ? 1e-4 : 2e-2, tg = dt == F8_DTYPE_FP32 ? 1e-4 : 5e-2;
    const double ey = worst_ratio(y[1], y[0], ny, ty), eg = worst_ratio(g[1], g[0], nq, tg);
    const char *mname = mode == F8I_ATTN_OWN ? "own" : "auto";
    CHECK(ey <= 1.0, "%s %s B%lld S%lld nh%lld G%lld hd%lld: y worst ratio %.3g", f8_dtype_name(dt), mname, (long long)sh.B,
          (long long)sh.S, (long long)sh.nh, (long long)sh.G, (long long)sh.hd, ey);
    CHECK(eg <= 1.0, "%s %s B%lld S%lld nh%lld G%lld hd%lld: dqkv worst ratio %.3g", f8_dtype_name(dt), mname, (long long)sh.B,
          (long long)sh.S, (long long)sh.nh, (long long)sh.G, (long long)sh.hd, eg);
    CHECK(memcmp(y[1], y[2], ny * sizeof(float)) == 0 && memcmp(g[1], g[2], nq * sizeof(float)) == 0,
          "%s %s S%lld G%lld hd%lld: a second run is bitwise the first", f8_dtype_name(dt), mname, (long long)sh.S,
          (long long)sh.G, (long long)sh.hd);
    if (want_path)
        CHECK(path == want_path, "%s %s S%lld G%lld hd%lld: path %d, wanted %d (%s)", f8_dtype_name(dt), mname, (long long)sh.S,
              (long long)sh.G, (long long)sh.hd, path, want_path, f8i_cuda_attn_info(g_ctx[GPU], NULL));
    free(qkv), free(dy);
    for (int k = 0; k < 3; k++) free(y[k]), free(g[k]);
}

int main(void)
{
    const int rc = test_ctx_pair("test_cuda_rope_gqa", NULL, g_ctx);
    if (rc) return rc;
    for (int hd = 64; hd <= 128; hd += 64) {
        test_rope_bitwise(F8_DTYPE_FP32, hd);
        test_rope_bitwise(F8_DTYPE_BF16, hd);
    }
    static const int64_t seqs[] = {1, 7, 129, 257}, groups[] = {1, 2, 4, 8};
    /* generic kernels: FP32 and an odd head_dim */
    for (size_t s = 0; s < 3; s++)
        for (size_t k = 0; k < 4; k++) {
            test_composite((lshape){2, seqs[s], 8, groups[k], 6}, F8_DTYPE_FP32, F8I_ATTN_OWN, F8I_ATTN_PATH_OWN);
            test_composite((lshape){1, seqs[s], 8, groups[k], 64}, F8_DTYPE_FP32, F8I_ATTN_OWN, F8I_ATTN_PATH_OWN);
        }
    /* fused BF16 kernels, then cuDNN where it loads */
    int loaded = 0;
    f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_AUTO);
    (void)f8i_cuda_attn_info(g_ctx[GPU], &loaded);
    for (int pass = 0; pass < 2; pass++) {
        for (int hd = 64; hd <= 128; hd += 64)
            for (size_t s = 0; s < 4; s++)
                for (size_t k = 0; k < 4; k++)
                    test_composite((lshape){2, seqs[s], 8, groups[k], hd}, F8_DTYPE_BF16, pass ? F8I_ATTN_AUTO : F8I_ATTN_OWN,
                                   pass ? F8I_ATTN_PATH_CUDNN : F8I_ATTN_PATH_OWN);
        if (pass == 0) {
            /* cuDNN loads on the first eager BF16 call of the default mode */
            f8_attention_path p = F8_ATTENTION_PATH_OWN;
            f8_attention_config cfg = f8_attention_config_default(8, 64, 1, 8);
            cfg.n_kv_head = 2;
            f8_attention *a = NULL;
            f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_AUTO);
            CHECK_OK(g_ctx[GPU], f8_attention_create(g_ctx[GPU], &cfg, &a));
            CHECK_OK(g_ctx[GPU], f8_attention_query_path(a, 1, 8, 0, &p));
            f8_attention_destroy(a);
            (void)f8i_cuda_attn_info(g_ctx[GPU], &loaded);
            if (!loaded) {
                const char *req = getenv("F8_REQUIRE_CUDNN");
                CHECK(!(req && strcmp(req, "1") == 0), "cuDNN required but not loaded: %s",
                      f8i_cuda_attn_info(g_ctx[GPU], NULL));
                printf("test_cuda_rope_gqa: cuDNN half skipped: %s\n", f8i_cuda_attn_info(g_ctx[GPU], NULL));
                break;
            }
        }
    }
    f8i_cuda_attn_set_mode(g_ctx[GPU], -1);
    f8_ctx_destroy(g_ctx[CPU]);
    f8_ctx_destroy(g_ctx[GPU]);
    return test_finish("test_cuda_rope_gqa");
}
