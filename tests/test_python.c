/*
 * test_python.c — the Python package (python/f8) against the C API.
 *
 * This program runs every module kind through the C API on the CPU backend
 * (two training steps: FIRST then NOT_FIRST, with the scale updates between)
 * and writes its inputs, outputs, gradients and final checkpoint to a
 * temporary directory with a manifest; then python/tests/run_cpu.py repeats
 * the same calls through the package and requires every output, gradient,
 * FP8 scaling value and checkpoint byte to be identical. The C struct sizes
 * travel in F8_ABI so the script can check its ctypes mirrors of f8.h.
 *
 * Python: $F8_PYTHON, else .venv/bin/python3 (`.ci/run` makes it, with
 * numpy), else the test skips; with F8_REQUIRE_PYTHON=1 it fails instead.
 * The library the script loads is this build's libf8.so (F8_LIBRARY); in a
 * sanitizer build it is preloaded with the ASan runtime (F8_ASAN_RT).
 */
#include <stddef.h>
#include <unistd.h>

#include "check.h"

#ifndef F8_LIBSO
#define F8_LIBSO "build/libf8.so"
#endif

static char dir[64];
static FILE *manifest;
static test_rng rng = {7};

typedef enum { LINEAR, LNL, MLP } kind;
static const char *const KIND_NAMES[] = {"linear", "layernorm_linear", "layernorm_mlp"};

static void write_file(const char *name, const char *ext, const void *data, size_t bytes)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) die(path, NULL);
}

/* Random values in dtype (BF16 rounded from FP32), host bytes. */
static void *random_host(f8_dtype dt, size_t n, double scale)
{
    unsigned char *h = (unsigned char *)xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        float v = (float)(rng_normal(&rng) * scale);
        if (dt == F8_DTYPE_BF16) {
            uint16_t b = f8_bf16_from_float(v);
            memcpy(h + 2 * i, &b, 2);
        } else {
            memcpy(h + 4 * i, &v, 4);
        }
    }
    return h;
}

static f8_module *create(f8_ctx *ctx, kind k, int64_t in, int64_t out, int fp8, f8_dtype dt, int64_t T, uint64_t seed)
{
    f8_module *m = NULL;
    f8_status st;
    if (k == LINEAR) {
        f8_linear_config c = f8_linear_config_default(in, out);
        c.fp8 = fp8, c.param_dtype = dt, c.max_tokens = T, c.seed = seed;
        st = f8_linear_create(ctx, &c, &m);
    } else if (k == LNL) {
        f8_layernorm_linear_config c = f8_layernorm_linear_config_default(in, out);
        c.fp8 = fp8, c.param_dtype = dt, c.max_tokens = T, c.seed = seed;
        st = f8_layernorm_linear_create(ctx, &c, &m);
    } else {
        f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(in, out);
        c.fp8 = fp8, c.param_dtype = dt, c.max_tokens = T, c.seed = seed;
        st = f8_layernorm_mlp_create(ctx, &c, &m);
    }
    if (st != F8_OK) die("module create", ctx);
    return m;
}

/* One case: two steps through the C API, every result written out. For the
 * MLP `out` is the ffn width (its output is `in` wide). */
static void module_case_r(const char *name, kind k, int64_t in, int64_t out, int fp8, f8_dtype dt, int64_t T,
                          f8_recipe_kind rk, int pow2)
{
    char why[256];
    f8_recipe r = f8_recipe_default();
    r.kind = rk;
    r.power_2_scales = pow2;
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, &r, why);
    if (!ctx) die(why, NULL);
    const uint64_t seed = 1000 + (uint64_t)k * 10 + (uint64_t)fp8;
    f8_module *m = create(ctx, k, in, out, fp8, dt, T, seed);
    const int64_t ny = k == MLP ? in : out;
    const size_t es = f8_dtype_size(dt);
    void *x = random_host(dt, (size_t)(T * in), 1.0), *dy = random_host(dt, (size_t)(T * ny), 0.1);
    void *y = xmalloc((size_t)(T * ny) * es), *dx = xmalloc((size_t)(T * in) * es);
    f8_tensor tx = f8_tensor_make(x, dt, T, in), tdy = f8_tensor_make(dy, dt, T, ny);
    f8_tensor ty = f8_tensor_make(y, dt, T, ny), tdx = f8_tensor_make(dx, dt, T, in);
    f8_saved *saved = NULL;
    CHECK_OK(ctx, f8_module_saved_create(m, &saved));
    write_file(name, "x", x, (size_t)(T * in) * es);
    write_file(name, "dy", dy, (size_t)(T * ny) * es);
    for (int step = 1; step <= 2; step++) {
        char ext[8];
        CHECK_OK(ctx, f8_module_forward(m, &tx, &ty, step == 1 ? F8_MICROBATCH_FIRST : F8_MICROBATCH_NOT_FIRST, saved));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        CHECK_OK(ctx, f8_module_backward(m, saved, &tdy, &tdx));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
        snprintf(ext, sizeof ext, "y%d", step);
        write_file(name, ext, y, (size_t)(T * ny) * es);
        snprintf(ext, sizeof ext, "dx%d", step);
        write_file(name, ext, dx, (size_t)(T * in) * es);
    }
    for (int p = F8_PARAM_WEIGHT; p <= F8_PARAM_FC2_BIAS; p++) {
        f8_tensor g;
        if (f8_module_param(m, (f8_param)p, 1, &g) != F8_OK) continue;
        char ext[64];
        snprintf(ext, sizeof ext, "grad.%s", f8_param_name((f8_param)p));
        write_file(name, ext, g.data, (size_t)(g.rows * g.cols) * f8_dtype_size(g.dtype));
    }
    f8_checkpoint *ck = NULL;
    char path[256];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    CHECK_OK(ctx, f8_checkpoint_add_module(ck, "m", m));
    CHECK_OK(ctx, f8_checkpoint_save(ck, path));
    fprintf(manifest, "%s %s %lld %lld %d %s %lld %llu %s %d\n", name, KIND_NAMES[k], (long long)in, (long long)out,
            fp8, f8_dtype_name(dt), (long long)T, (unsigned long long)seed, f8_recipe_kind_name(rk), pow2);
    f8_checkpoint_destroy(ck);
    f8_saved_destroy(saved);
    f8_module_destroy(m);
    f8_ctx_destroy(ctx);
    free(x), free(dy), free(y), free(dx);
}

static void module_case(const char *name, kind k, int64_t in, int64_t out, int fp8, f8_dtype dt, int64_t T)
{
    module_case_r(name, k, in, out, fp8, dt, T, F8_RECIPE_DELAYED, 0);
}

static const char *python(void)
{
    const char *p = getenv("F8_PYTHON");
    if (p && *p) return p;
    return access(".venv/bin/python3", X_OK) == 0 ? ".venv/bin/python3" : NULL;
}

int main(void)
{
    const char *py = python();
    const int require = getenv("F8_REQUIRE_PYTHON") && !strcmp(getenv("F8_REQUIRE_PYTHON"), "1");
    if (!py && !require) return test_skip("test_python", "no Python with numpy: set F8_PYTHON or make .venv (see .ci/run)");
    CHECK(py != NULL, "F8_REQUIRE_PYTHON=1 but there is no Python: set F8_PYTHON or make .venv");
    CHECK(access(F8_LIBSO, R_OK) == 0, "%s is missing (make builds it)", F8_LIBSO);
    if (!py || test_failures) return test_finish("test_python");
    snprintf(dir, sizeof dir, "/tmp/f8_python_XXXXXX");
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    manifest = fopen(path, "w");
    if (!manifest) die(path, NULL);
    /* odd sizes on purpose: the CPU backend takes any shape */
    module_case("linear_fp8", LINEAR, 48, 40, 1, F8_DTYPE_FP32, 24);
    module_case("linear_fp32", LINEAR, 33, 17, 0, F8_DTYPE_FP32, 7);
    module_case("linear_fp8_bf16", LINEAR, 32, 48, 1, F8_DTYPE_BF16, 16);
    module_case("lnl_fp8", LNL, 64, 96, 1, F8_DTYPE_FP32, 32);
    module_case("lnl_bf16", LNL, 40, 24, 0, F8_DTYPE_BF16, 9);
    module_case("mlp_fp8", MLP, 64, 128, 1, F8_DTYPE_FP32, 16);
    module_case("mlp_fp32", MLP, 24, 40, 0, F8_DTYPE_FP32, 5);
    /* the other recipes, through f8.Recipe(scaling=...) */
    module_case_r("lnl_fp8_current", LNL, 64, 96, 1, F8_DTYPE_FP32, 32, F8_RECIPE_CURRENT, 0);
    module_case_r("mlp_fp8_current_pow2_bf16", MLP, 64, 128, 1, F8_DTYPE_BF16, 16, F8_RECIPE_CURRENT, 1);
    module_case_r("linear_fp8_block", LINEAR, 160, 136, 1, F8_DTYPE_FP32, 24, F8_RECIPE_BLOCK, 0);
    module_case_r("mlp_fp8_block_pow2", MLP, 64, 200, 1, F8_DTYPE_FP32, 16, F8_RECIPE_BLOCK, 1);
    module_case_r("lnl_fp8_rowwise_pow2", LNL, 64, 96, 1, F8_DTYPE_FP32, 32, F8_RECIPE_ROWWISE, 1);
    module_case_r("mlp_fp8_rowwise_bf16", MLP, 64, 136, 1, F8_DTYPE_BF16, 16, F8_RECIPE_ROWWISE, 0);
    module_case_r("mlp_fp8_rowwise_gw_hp", MLP, 64, 136, 1, F8_DTYPE_FP32, 16, F8_RECIPE_ROWWISE_GW_HP, 1);
    fclose(manifest);

    char abi[512], cmd[1024];
    snprintf(abi, sizeof abi,
             "f8_tensor=%zu,f8_recipe=%zu,f8_ctx_config=%zu,f8_slot=%zu,f8_linear_config=%zu,"
             "f8_layernorm_linear_config=%zu,f8_layernorm_mlp_config=%zu",
             sizeof(f8_tensor), sizeof(f8_recipe), sizeof(f8_ctx_config), sizeof(f8_slot), sizeof(f8_linear_config),
             sizeof(f8_layernorm_linear_config), sizeof(f8_layernorm_mlp_config));
    const char *preload = "";
#ifdef F8_ASAN_RT
    preload = "LD_PRELOAD=" F8_ASAN_RT " ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0 ";
#endif
    snprintf(cmd, sizeof cmd, "%sF8_LIBRARY=%s F8_ABI=%s '%s' python/tests/run_cpu.py '%s'", preload, F8_LIBSO, abi, py,
             dir);
    fflush(stdout);
    const int rc = system(cmd);
    CHECK(rc == 0, "python/tests/run_cpu.py failed (exit %d); files kept in %s", rc, dir);
    if (rc == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cannot remove %s", dir);
    }
    return test_finish("test_python");
}
