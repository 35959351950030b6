/*
 * recompute_tests.h — recompute_norm_output (f8.h) against the saved norm
 * output, on one backend (the CPU in test_recompute_norm.c, CUDA in
 * test_cuda_recompute_norm.c): two modules, the same seed, the same inputs,
 * one on its own ctx with the flag and one without, must give bitwise the
 * same y, dx, parameter gradients, slot states (amax histories, scales,
 * scale_invs) and FP8 telemetry, with two microbatches in flight (forward,
 * forward, backward, backward in reverse) and a scale update between the
 * forwards and the backwards in one step (the saved scale makes that
 * legal). The saved state must shrink by exactly the norm output's bytes.
 */
#ifndef F8_TESTS_RECOMPUTE_TESTS_H
#define F8_TESTS_RECOMPUTE_TESTS_H

#include "device_buffers.h"

typedef struct rc_case {
    int mlp;            /* LayerNormMLP, else LayerNormLinear */
    f8_recipe_kind kind;
    int fp8;
    f8_dtype dtype;     /* params, x, dy, y, dx */
    f8_norm norm;
    int64_t T, H, N;    /* N: out_features (LNL) or ffn (MLP) */
} rc_case;

static f8_module *rc_module(f8_ctx *ctx, const rc_case *c, int recompute)
{
    f8_module *m = NULL;
    f8_status st;
    if (c->mlp) {
        f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(c->H, c->N);
        mc.param_dtype = c->dtype, mc.fp8 = c->fp8, mc.normalization = c->norm, mc.max_tokens = c->T, mc.seed = 5;
        mc.recompute_norm_output = recompute;
        st = f8_layernorm_mlp_create(ctx, &mc, &m);
    } else {
        f8_layernorm_linear_config lc = f8_layernorm_linear_config_default(c->H, c->N);
        lc.param_dtype = c->dtype, lc.fp8 = c->fp8, lc.normalization = c->norm, lc.max_tokens = c->T, lc.seed = 5;
        lc.recompute_norm_output = recompute;
        st = f8_layernorm_linear_create(ctx, &lc, &m);
    }
    CHECK(st == F8_OK, "create (recompute %d) -> %s: %s", recompute, f8_status_string(st), f8_ctx_last_error(ctx));
    return m;
}

/* Backend tensors of rows x cols in dtype, filled from N(0, sd) (x: rows
 * scaled by a per-row factor so that norms and amaxes differ by microbatch). */
static f8_tensor rc_tensor(f8_ctx *ctx, test_rng *r, f8_dtype dt, int64_t rows, int64_t cols, double sd)
{
    const size_t n = (size_t)(rows * cols), es = f8_dtype_size(dt);
    unsigned char *h = xmalloc(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        const float v = (float)(sd * rng_normal(r) + 0.1 * (double)(i % 7));
        if (dt == F8_DTYPE_BF16) ((uint16_t *)h)[i] = f8_bf16_from_float(v);
        else ((float *)h)[i] = v;
    }
    void *d = balloc(ctx, n * es);
    upload(ctx, d, h, n * es);
    free(h);
    return f8_tensor_make(d, dt, rows, cols);
}

/* Bytes of two backend regions on two ctxs equal? */
static int rc_same(f8_ctx *ca, const void *a, f8_ctx *cb, const void *b, size_t bytes)
{
    unsigned char *ha = xmalloc(bytes + 1), *hb = xmalloc(bytes + 1);
    CHECK_OK(ca, f8_ctx_download(ca, ha, a, bytes));
    CHECK_OK(cb, f8_ctx_download(cb, hb, b, bytes));
    const int same = memcmp(ha, hb, bytes) == 0;
    free(ha), free(hb);
    return same;
}

static void rc_compare_state(f8_ctx *ca, f8_module *a, f8_ctx *cb, f8_module *b, const rc_case *c, const char *d,
                             int step)
{
    static const f8_param lnl[] = {F8_PARAM_WEIGHT, F8_PARAM_BIAS, F8_PARAM_LN_WEIGHT, F8_PARAM_LN_BIAS};
    static const f8_param mlp[] = {F8_PARAM_FC1_WEIGHT, F8_PARAM_FC1_BIAS, F8_PARAM_FC2_WEIGHT, F8_PARAM_FC2_BIAS,
                                   F8_PARAM_LN_WEIGHT,  F8_PARAM_LN_BIAS};
    const f8_param *ps = c->mlp ? mlp : lnl;
    const int np = c->mlp ? 6 : 4;
    for (int i = 0; i < np; i++) {
        if (ps[i] == F8_PARAM_LN_BIAS && c->norm == F8_NORM_RMSNORM) continue; /* no beta */
        f8_tensor ga, gb;
        CHECK_OK(ca, f8_module_param(a, ps[i], 1, &ga));
        CHECK_OK(cb, f8_module_param(b, ps[i], 1, &gb));
        CHECK(rc_same(ca, ga.data, cb, gb.data, tensor_bytes(&ga)), "%s step %d: grad of %s differs", d, step,
              f8_param_name(ps[i]));
    }
    if (!c->fp8) return;
    const int L = f8_ctx_recipe(ca)->amax_history_len;
    float *ha = xmalloc((size_t)L * sizeof(float)), *hb = xmalloc((size_t)L * sizeof(float));
    for (int dir = 0; dir < 2; dir++) {
        const int n = dir == 0 ? (c->mlp ? 6 : 3) : (c->mlp ? 4 : 2);
        for (int i = 0; i < n; i++) {
            f8_slot sa, sb;
            float sca, scb, sia, sib;
            CHECK_OK(ca, f8_module_slot(a, (f8_direction)dir, i, &sa));
            CHECK_OK(cb, f8_module_slot(b, (f8_direction)dir, i, &sb));
            CHECK_OK(ca, f8_slot_read(ca, sa, &sca, &sia, ha));
            CHECK_OK(cb, f8_slot_read(cb, sb, &scb, &sib, hb));
            CHECK(sca == scb && sia == sib && memcmp(ha, hb, (size_t)L * sizeof(float)) == 0,
                  "%s step %d: slot %d of direction %d differs (scale %g / %g)", d, step, i, dir, (double)sca,
                  (double)scb);
        }
        f8_fp8_stats ta[6], tb[6];
        CHECK_OK(ca, f8_ctx_telemetry_read(ca, (f8_direction)dir, 0, n, ta));
        CHECK_OK(cb, f8_ctx_telemetry_read(cb, (f8_direction)dir, 0, n, tb));
        for (int i = 0; i < n; i++)
            CHECK(ta[i].count == tb[i].count && ta[i].saturated == tb[i].saturated && ta[i].flushed == tb[i].flushed &&
                      ta[i].amax == tb[i].amax,
                  "%s step %d: telemetry of slot %d dir %d: count %llu / %llu", d, step, i, dir,
                  (unsigned long long)ta[i].count, (unsigned long long)tb[i].count);
    }
    free(ha), free(hb);
}

/* One case on `backend`: 3 steps of two microbatches in flight. */
static void rc_run(f8_backend backend, const rc_case *c)
{
    char d[160], why[256] = "";
    snprintf(d, sizeof d, "%s %s %s %s %s T=%lld H=%lld N=%lld", c->mlp ? "LayerNormMLP" : "LayerNormLinear",
             c->fp8 ? f8_recipe_kind_name(c->kind) : "fp8-off", f8_dtype_name(c->dtype),
             c->norm == F8_NORM_RMSNORM ? "rms" : "ln", backend == F8_BACKEND_CUDA ? "cuda" : "cpu", (long long)c->T,
             (long long)c->H, (long long)c->N);
    f8_recipe rec = f8_recipe_default();
    rec.kind = c->kind;
    rec.amax_history_len = 4;
    f8_ctx *ctx[2] = {test_ctx(backend, &rec, why), test_ctx(backend, &rec, why)};
    if (!ctx[0] || !ctx[1]) die(why, NULL);
    f8_module *m[2];
    f8_saved *s[2][2];
    for (int k = 0; k < 2; k++) {
        if (c->fp8) CHECK_OK(ctx[k], f8_ctx_enable_telemetry(ctx[k]));
        m[k] = rc_module(ctx[k], c, k);
        if (!m[k]) die("module", ctx[k]);
        for (int j = 0; j < 2; j++) CHECK_OK(ctx[k], f8_module_saved_create(m[k], &s[k][j]));
    }
    /* The saved state: smaller by the norm output, per saved object. */
    f8_memory_report ra, rb;
    CHECK_OK(ctx[0], f8_module_memory(m[0], &ra));
    CHECK_OK(ctx[1], f8_module_memory(m[1], &rb));
    const size_t ln = (size_t)(c->T * c->H) * (c->fp8 ? 1 : f8_dtype_size(c->dtype)), ln256 = (ln + 255) / 256 * 256;
    CHECK(ra.bytes[F8_MEM_SAVED_ACTIVATIONS] - rb.bytes[F8_MEM_SAVED_ACTIVATIONS] == 2 * ln256,
          "%s: saved %zu without, %zu with recompute: not 2 x %zu less", d, ra.bytes[F8_MEM_SAVED_ACTIVATIONS],
          rb.bytes[F8_MEM_SAVED_ACTIVATIONS], ln256);
    const int64_t out = c->mlp ? c->H : c->N;
    test_rng r = {77 + (uint64_t)c->T};
    for (int step = 0; step < 3; step++) {
        f8_tensor x[2][2], dy[2][2], y[2][2], dx[2][2];
        for (int j = 0; j < 2; j++) { /* the same values on both ctxs: draw once per j, re-seed for the other */
            test_rng rj = r;
            for (int k = 0; k < 2; k++) {
                rj = r;
                x[k][j] = rc_tensor(ctx[k], &rj, c->dtype, c->T, c->H, 1.0 + j + step);
                dy[k][j] = rc_tensor(ctx[k], &rj, c->dtype, c->T, out, 0.01 * (1 + j));
                y[k][j] = rc_tensor(ctx[k], &rj, c->dtype, c->T, out, 0.0);
                dx[k][j] = rc_tensor(ctx[k], &rj, c->dtype, c->T, c->H, 0.0);
            }
            r = rj;
        }
        for (int k = 0; k < 2; k++) {
            for (int j = 0; j < 2; j++)
                CHECK_OK(ctx[k], f8_module_forward(m[k], &x[k][j], &y[k][j],
                                                   j ? F8_MICROBATCH_NOT_FIRST : F8_MICROBATCH_FIRST, s[k][j]));
            /* step 1: the forward scales move before the backwards; the saved scale keeps the recompute's */
            if (step == 1 && c->fp8) {
                CHECK_OK(ctx[k], f8_ctx_update_scales(ctx[k], F8_DIR_FORWARD));
                /* and surely moves (the norm output's amax may repeat), not by a
                 * power of 2, which the FP8 codes and scale_inv absorb exactly */
                f8_slot in;
                float sc;
                CHECK_OK(ctx[k], f8_module_slot(m[k], F8_DIR_FORWARD, 0, &in));
                CHECK_OK(ctx[k], f8_slot_read(ctx[k], in, &sc, NULL, NULL));
                CHECK_OK(ctx[k], f8_slot_write(ctx[k], in, 0.75f * sc, 1.0f / (0.75f * sc), NULL));
            }
            for (int j = 1; j >= 0; j--) CHECK_OK(ctx[k], f8_module_backward(m[k], s[k][j], &dy[k][j], &dx[k][j]));
            if (step != 1 && c->fp8) CHECK_OK(ctx[k], f8_ctx_update_scales(ctx[k], F8_DIR_FORWARD));
            if (c->fp8) CHECK_OK(ctx[k], f8_ctx_update_scales(ctx[k], F8_DIR_BACKWARD));
        }
        for (int j = 0; j < 2; j++) {
            CHECK(rc_same(ctx[0], y[0][j].data, ctx[1], y[1][j].data, tensor_bytes(&y[0][j])), "%s step %d: y%d differs",
                  d, step, j);
            CHECK(rc_same(ctx[0], dx[0][j].data, ctx[1], dx[1][j].data, tensor_bytes(&dx[0][j])),
                  "%s step %d: dx%d differs", d, step, j);
        }
        rc_compare_state(ctx[0], m[0], ctx[1], m[1], c, d, step);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 2; j++) {
                f8_ctx_free(ctx[k], x[k][j].data), f8_ctx_free(ctx[k], dy[k][j].data);
                f8_ctx_free(ctx[k], y[k][j].data), f8_ctx_free(ctx[k], dx[k][j].data);
            }
    }
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 2; j++) f8_saved_destroy(s[k][j]);
        f8_module_destroy(m[k]);
        f8_ctx_destroy(ctx[k]);
    }
}

/* Every supported combination on one backend, at an aligned, an odd and a
 * wide shape (1536 columns: CUDA's fit norm kernel for BF16 x without
 * telemetry, i.e. the recompute's, against the counting one, the forward's). */
static void rc_run_all(f8_backend backend)
{
    static const f8_recipe_kind kinds[2] = {F8_RECIPE_DELAYED, F8_RECIPE_CURRENT};
    static const int64_t shapes[3][3] = {{32, 64, 96}, {37, 48, 80}, {64, 1536, 256}};
    for (int mlp = 0; mlp < 2; mlp++)
        for (int fp8 = 1; fp8 >= 0; fp8--)
            for (int k = 0; k < (fp8 ? 2 : 1); k++)
                for (int dt = 0; dt < 2; dt++)
                    for (int sh = 0; sh < 3; sh++) {
                        rc_case c = {mlp, kinds[k], fp8, dt ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                                     sh == 1 ? F8_NORM_RMSNORM : F8_NORM_LAYERNORM, shapes[sh][0], shapes[sh][1],
                                     shapes[sh][2]};
                        rc_run(backend, &c);
                    }
}

#endif /* F8_TESTS_RECOMPUTE_TESTS_H */
