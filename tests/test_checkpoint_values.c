/*
 * test_checkpoint_values.c — restores refuse values no run can have, name the
 * tensor and element, and change nothing (CPU backend):
 *  - f8i_checkpoint_check_finite's three rules (finite; scales > 0; amaxes
 *    and second moments >= 0) on F32, BF16, E4M3 and E5M2 codes;
 *  - AdamW's restore refusing a NaN moment, a negative second moment, ...;
 *  - a module's restore refusing a NaN or infinite parameter, a zero or
 *    negative scale or scale_inv, a negative amax, a NaN FP8 weight code or
 *    a zero scale_inv of an FP8 primary weight, with the module unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/checkpoint.h"

static f8_ctx *g_ctx;

/* A CPU ctx's backend memory is host memory: a view of a host array. */
static f8_tensor host_tensor(float *host, int64_t rows, int64_t cols)
{
    return f8_tensor_make(host, F8_DTYPE_FP32, rows, cols);
}

static void test_values(void)
{
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    if (!ck) return;
    const float f_nan[2] = {1.0f, NAN}, f_inf[1] = {-INFINITY}, f_zero[2] = {1.0f, 0.0f}, f_negz[1] = {-0.0f},
                f_neg[2] = {2.0f, -1e-30f}, f_ok[2] = {1e-30f, 3e38f};
    const uint16_t b_nan[1] = {0x7FC1}, b_ninf[1] = {0xFF80}, b_ok[2] = {0x3F80, 0x0001}, b_neg[1] = {0x8001};
    const uint8_t e4_nan[2] = {0x7E, 0x7F}, e4_nnan[1] = {0xFF}, e4_negz[1] = {0x80}, e4_neg[1] = {0x81},
                  e5_inf[1] = {0x7C}, e5_ok[2] = {0x7B, 0x01}, e5_nan[1] = {0xFE}, e4_zero[1] = {0x00};
    const int32_t i32[2] = {-5, 0x7FC00000};
    struct {
        const char *name;
        f8i_ck_dtype dt;
        const void *data;
        int64_t count;
        int finite, nonneg, positive; /* 1: passes */
        const char *msg;              /* in the FINITE or first failing message */
    } cases[] = {
        {"f_nan", F8I_CK_F32, f_nan, 2, 0, 0, 0, "element 1 is nan"},
        {"f_inf", F8I_CK_F32, f_inf, 1, 0, 0, 0, "element 0 is -inf"},
        {"f_zero", F8I_CK_F32, f_zero, 2, 1, 1, 0, "element 1 is 0 (must be finite and > 0)"},
        {"f_negz", F8I_CK_F32, f_negz, 1, 1, 1, 0, "element 0 is -0"},
        {"f_neg", F8I_CK_F32, f_neg, 2, 1, 0, 0, "element 1 is -1e-30 (must be finite and >= 0)"},
        {"f_ok", F8I_CK_F32, f_ok, 2, 1, 1, 1, NULL},
        {"b_nan", F8I_CK_BF16, b_nan, 1, 0, 0, 0, "is nan"},
        {"b_ninf", F8I_CK_BF16, b_ninf, 1, 0, 0, 0, "is -inf"},
        {"b_ok", F8I_CK_BF16, b_ok, 2, 1, 1, 1, NULL},
        {"b_neg", F8I_CK_BF16, b_neg, 1, 1, 0, 0, ">= 0"},
        {"e4_nan", F8I_CK_F8_E4M3, e4_nan, 2, 0, 0, 0, "element 1 is nan"},
        {"e4_nnan", F8I_CK_F8_E4M3, e4_nnan, 1, 0, 0, 0, "is nan"},
        {"e4_negz", F8I_CK_F8_E4M3, e4_negz, 1, 1, 1, 0, "FP8 code 0x80"},
        {"e4_neg", F8I_CK_F8_E4M3, e4_neg, 1, 1, 0, 0, "FP8 code 0x81"},
        {"e4_zero", F8I_CK_F8_E4M3, e4_zero, 1, 1, 1, 0, "FP8 code 0x00"},
        {"e5_inf", F8I_CK_F8_E5M2, e5_inf, 1, 0, 0, 0, "is nan"},
        {"e5_ok", F8I_CK_F8_E5M2, e5_ok, 2, 1, 1, 1, NULL},
        {"e5_nan", F8I_CK_F8_E5M2, e5_nan, 1, 0, 0, 0, "is nan"},
        {"i32", F8I_CK_I32, i32, 2, 1, 1, 1, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t shape[1] = {cases[i].count};
        CHECK_OK(g_ctx, f8i_checkpoint_put(ck, cases[i].name, cases[i].dt, 1, shape, cases[i].data,
                                           (size_t)cases[i].count * f8i_ck_dtype_size(cases[i].dt)));
        const int want[3] = {cases[i].finite, cases[i].nonneg, cases[i].positive};
        const f8i_ck_rule rules[3] = {F8I_CK_FINITE, F8I_CK_NONNEGATIVE, F8I_CK_POSITIVE};
        int shown = 0;
        for (int r = 0; r < 3; r++) {
            f8_status st = f8i_checkpoint_check_finite(ck, "test", cases[i].name, rules[r]);
            CHECK(st == (want[r] ? F8_OK : F8_ERR_INVALID_ARGUMENT), "%s, rule %d: %s", cases[i].name, r,
                  f8_status_string(st));
            if (st != F8_OK && !shown++) {
                const char *m = f8_ctx_last_error(g_ctx);
                CHECK(strstr(m, "test: tensor \"") && strstr(m, cases[i].name) && strstr(m, cases[i].msg),
                      "%s: message '%s' lacks '%s'", cases[i].name, m, cases[i].msg);
            }
        }
    }
    CHECK_STATUS(g_ctx, f8i_checkpoint_check_finite(ck, "test", "missing", F8I_CK_FINITE), F8_ERR_INVALID_ARGUMENT);
    f8_checkpoint_destroy(ck);
}

/* AdamW's restore refuses non-finite moments and changes nothing. */
static void test_adamw_values(void)
{
    f8_adamw_config cfg = f8_adamw_config_default();
    f8_adamw *o = NULL;
    float w[6] = {1, 2, 3, 4, 5, 6}, g[6] = {0.5f, -0.5f, 1, -1, 2, -2};
    f8_tensor p = host_tensor(w, 2, 3), gr = host_tensor(g, 2, 3);
    CHECK_OK(g_ctx, f8_adamw_create(g_ctx, &cfg, &o));
    if (!o) return;
    CHECK_OK(g_ctx, f8_adamw_add(o, &p, &gr, 1));
    CHECK_OK(g_ctx, f8_adamw_step(o));
    f8_checkpoint *ck = NULL, *before = NULL, *after = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &before));
    CHECK_OK(g_ctx, f8_checkpoint_add_adamw(ck, "opt", o));
    CHECK_OK(g_ctx, f8_adamw_step(o)); /* the state now differs from ck's */
    CHECK_OK(g_ctx, f8_checkpoint_add_adamw(before, "opt", o));
    struct {
        const char *name;
        size_t at;
        float v;
        const char *msg;
    } cases[] = {
        {"opt.m.0", 4, NAN, "\"opt.m.0\": element 4 is nan"},
        {"opt.v.0", 1, -1e-9f, "\"opt.v.0\": element 1 is -1e-09"},
        {"opt.v.0", 0, INFINITY, "is inf"},
        {"opt.lr", 0, NAN, "\"opt.lr\""},
        {"opt.grad_norm", 0, -1.0f, "\"opt.grad_norm\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const f8i_ck_entry *e = f8i_checkpoint_find(ck, cases[i].name);
        CHECK(e != NULL, "no %s", cases[i].name);
        if (!e) continue;
        float keep;
        memcpy(&keep, e->data + 4 * cases[i].at, 4);
        memcpy((unsigned char *)e->data + 4 * cases[i].at, &cases[i].v, 4);
        CHECK_STATUS(g_ctx, f8_checkpoint_restore_adamw(ck, "opt", o), F8_ERR_INVALID_ARGUMENT);
        CHECK(strstr(f8_ctx_last_error(g_ctx), cases[i].msg), "%s: '%s'", cases[i].name, f8_ctx_last_error(g_ctx));
        memcpy((unsigned char *)e->data + 4 * cases[i].at, &keep, 4);
    }
    /* nothing changed: the state is still the one after the second step */
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &after));
    CHECK_OK(g_ctx, f8_checkpoint_add_adamw(after, "opt", o));
    unsigned char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(before, &x, &nx));
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(after, &y, &ny));
    CHECK(x && y && nx == ny && !memcmp(x, y, nx), "a refused restore changed the optimizer");
    CHECK_OK(g_ctx, f8_checkpoint_restore_adamw(ck, "opt", o)); /* and the intact one restores */
    free(x);
    free(y);
    f8_checkpoint_destroy(ck);
    f8_checkpoint_destroy(before);
    f8_checkpoint_destroy(after);
    f8_adamw_destroy(o);
}

/* Every FP32 parameter and slot value of a module, concatenated (the state a
 * refused restore must leave as it was). */
static size_t module_state(f8_module *m, float *out, size_t cap)
{
    size_t n = 0;
    for (int p = 0; p < 8; p++) {
        f8_tensor v;
        if (f8_module_param(m, (f8_param)p, 0, &v) != F8_OK || v.dtype != F8_DTYPE_FP32) continue;
        size_t k = (size_t)(v.rows * v.cols);
        if (n + k > cap) break;
        memcpy(out + n, v.data, k * sizeof(float));
        n += k;
    }
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 3; i++) {
            f8_slot s;
            float scale = 0, sinv = 0;
            if (f8_module_slot(m, (f8_direction)d, i, &s) != F8_OK || n + 2 > cap) continue;
            f8_slot_read(g_ctx, s, &scale, &sinv, NULL);
            out[n++] = scale;
            out[n++] = sinv;
        }
    return n;
}

/* Tamper with one element of a stored tensor, try the restore, put it back. */
static void refused_restore(f8_checkpoint *ck, f8_module *m, const char *name, size_t at, const void *bad,
                            size_t size, const char *msg)
{
    static float before[8192], after[8192];
    const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
    CHECK(e != NULL, "no entry %s", name);
    if (!e) return;
    unsigned char keep[4];
    memcpy(keep, e->data + size * at, size);
    memcpy((unsigned char *)e->data + size * at, bad, size);
    size_t nb = module_state(m, before, 8192);
    CHECK_STATUS(g_ctx, f8_checkpoint_restore_module(ck, "m", m), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(g_ctx), name) && strstr(f8_ctx_last_error(g_ctx), msg), "%s: message '%s'", name,
          f8_ctx_last_error(g_ctx));
    size_t na = module_state(m, after, 8192);
    CHECK(na == nb && !memcmp(before, after, nb * sizeof(float)), "%s: a refused restore changed the module", name);
    memcpy((unsigned char *)e->data + size * at, keep, size);
}

static void test_module_values(void)
{
    for (int primary = 0; primary < 2; primary++) {
        f8_linear_config lc = f8_linear_config_default(24, 16);
        lc.max_tokens = 8;
        lc.fp8_weights = primary;
        f8_module *m = NULL;
        f8_checkpoint *ck = NULL;
        CHECK_OK(g_ctx, f8_linear_create(g_ctx, &lc, &m));
        CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
        if (!m || !ck) return;
        CHECK_OK(g_ctx, f8_checkpoint_add_module(ck, "m", m));
        const float nan = NAN, inf = INFINITY, zero = 0.0f, neg = -1.0f;
        const uint8_t e4_nan = 0x7F;
        if (!primary) {
            refused_restore(ck, m, "m.weight", 5, &nan, 4, "element 5 is nan");
            refused_restore(ck, m, "m.bias", 0, &inf, 4, "element 0 is inf");
        } else {
            refused_restore(ck, m, "m.weight", 7, &e4_nan, 1, "element 7 is nan");
            refused_restore(ck, m, "m.weight_scale_inv", 0, &zero, 4, "> 0");
        }
        refused_restore(ck, m, "m.fp8.fwd.scale", 1, &zero, 4, "> 0");
        refused_restore(ck, m, "m.fp8.bwd.scale_inv", 0, &neg, 4, "> 0");
        refused_restore(ck, m, "m.fp8.fwd.amax_history", 2, &neg, 4, ">= 0");
        refused_restore(ck, m, "m.fp8.bwd.amax_history", 0, &nan, 4, "is nan");
        CHECK_OK(g_ctx, f8_checkpoint_restore_module(ck, "m", m)); /* the intact file restores */
        f8_checkpoint_destroy(ck);
        f8_module_destroy(m);
    }
}

int main(void)
{
    char why[256] = "";
    g_ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!g_ctx) {
        fprintf(stderr, "CPU ctx: %s\n", why);
        return 1;
    }
    test_values();
    test_adamw_values();
    test_module_values();
    f8_ctx_destroy(g_ctx);
    return test_finish("test_checkpoint_values");
}
