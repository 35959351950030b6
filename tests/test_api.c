#include "f8.h"
/*
 * test_api.c — API manners. The line above is the first thing this file
 * compiles: the public header alone, under the Makefile's -std=c11 -Wall
 * -Wextra -Wpedantic -Werror, with no libc header before it, so this program
 * building at all proves f8.h is self-contained strict C11. (That is also why
 * this test does not use tests/check.h: it has its own small CHECK below.)
 * Then, on the CPU backend:
 *  - f8_status_string names every code, and unknown codes;
 *  - f8_ctx_create rejects NULL config/out, a bad backend and bad recipes with
 *    F8_ERR_INVALID_ARGUMENT and a message (truncated safely to error_size);
 *    F8_BACKEND_CUDA without a GPU or in a CUDA=0 build is F8_ERR_NO_DEVICE
 *    with a message, and a CPU ctx works afterwards;
 *  - destroy(NULL) of every object; ctx accessors; noop flag;
 *  - backend memory: alloc alignment, upload/copy/download round trip, NULLs;
 *  - f8_tensor_convert FP32<->BF16 bit for bit, shape and dtype errors;
 *  - f8_ctx_slots_create growth (past 16 and 1000 slots, both directions)
 *    keeps every earlier slot's state; unregistered slots are errors.
 */
#include "f8.h" /* twice: the include guard */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0, checks = 0;

#define CHECK(cond, ...)                                                                \
    do {                                                                                \
        checks++;                                                                       \
        if (!(cond)) {                                                                  \
            if (++failures <= 30) {                                                     \
                fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                                           \
                fprintf(stderr, "\n");                                                  \
            }                                                                           \
        }                                                                               \
    } while (0)

#define EXPECT(ctx, call, want)                                                                   \
    do {                                                                                          \
        f8_status st_ = (call);                                                                   \
        CHECK(st_ == (want), "%s -> %s, wanted %s (%s)", #call, f8_status_string(st_),            \
              f8_status_string(want), (ctx) ? f8_ctx_last_error(ctx) : "");                       \
    } while (0)

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* FP32 -> BF16 by nearest-value choice in double (ties to the even code);
 * NaN -> 0x7FC0 with the sign, as f8.h specifies. Shares no code with f8. */
static uint16_t bf16_oracle(float x)
{
    const uint32_t u = fbits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u; /* toward zero, away from zero */
    if (lo == u) return (uint16_t)(lo >> 16);
    const double ax = fabs((double)x), alo = fabs((double)bits_f(lo));
    const double ahi = (hi & 0x7FFFFFFFu) == 0x7F800000u ? ldexp(1.0, 128) : fabs((double)bits_f(hi));
    const double dlo = ax - alo, dhi = ahi - ax; /* both exact */
    if (dlo != dhi) return (uint16_t)((dlo < dhi ? lo : hi) >> 16);
    return (uint16_t)((((lo >> 16) & 1u) ? hi : lo) >> 16);
}

static f8_ctx *cpu_ctx(const f8_recipe *r)
{
    f8_ctx_config cfg = f8_ctx_config_default();
    if (r) cfg.recipe = *r;
    f8_ctx *ctx = NULL;
    char err[256] = "";
    f8_status st = f8_ctx_create(&cfg, &ctx, err, sizeof err);
    CHECK(st == F8_OK && ctx != NULL, "CPU ctx: %s (%s)", f8_status_string(st), err);
    return ctx;
}

/* A known message in the ctx buffer, so a later failure must replace it. */
static void sentinel(f8_ctx *ctx)
{
    EXPECT(ctx, f8_ctx_alloc(ctx, 4, NULL), F8_ERR_INVALID_ARGUMENT);
}

static int new_message(f8_ctx *ctx, const char *fn)
{
    const char *m = f8_ctx_last_error(ctx);
    return m && m[0] && strstr(m, "f8_ctx_alloc") == NULL && strstr(m, fn) != NULL;
}

/* ------------------------------------------------------------------------ */

static void test_status_strings(void)
{
    static const char *const names[] = {"F8_OK",          "F8_ERR_INVALID_ARGUMENT", "F8_ERR_SHAPE",
                                        "F8_ERR_DTYPE",   "F8_ERR_STATE",            "F8_ERR_OUT_OF_MEMORY",
                                        "F8_ERR_NO_DEVICE", "F8_ERR_CUDA",           "F8_ERR_CUBLAS",
                                        "F8_ERR_UNSUPPORTED", "F8_ERR_IO", "F8_ERR_COMM"};
    const f8_status codes[] = {F8_OK,        F8_ERR_INVALID_ARGUMENT, F8_ERR_SHAPE, F8_ERR_DTYPE,
                               F8_ERR_STATE, F8_ERR_OUT_OF_MEMORY,    F8_ERR_NO_DEVICE, F8_ERR_CUDA,
                               F8_ERR_CUBLAS, F8_ERR_UNSUPPORTED,     F8_ERR_IO, F8_ERR_COMM};
    for (int i = 0; i < 12; i++) {
        CHECK((int)codes[i] == i, "status %s has value %d", names[i], (int)codes[i]);
        const char *s = f8_status_string(codes[i]);
        CHECK(s && strcmp(s, names[i]) == 0, "f8_status_string(%d) = '%s', wanted '%s'", i, s ? s : "(null)", names[i]);
    }
    const int unknown[3] = {12, -1, 1000};
    for (int i = 0; i < 3; i++) {
        const char *s = f8_status_string((f8_status)unknown[i]);
        CHECK(s && strcmp(s, "F8_ERR_UNKNOWN") == 0, "f8_status_string(%d) = '%s'", unknown[i], s ? s : "(null)");
    }
}

static void test_ctx_create(void)
{
    char err[256];
    f8_ctx *ctx;
    f8_ctx *const junk = (f8_ctx *)(void *)err; /* a non-NULL value create must clear */
    f8_ctx_config good = f8_ctx_config_default();

    err[0] = '\0';
    EXPECT(NULL, f8_ctx_create(NULL, &ctx, err, sizeof err), F8_ERR_INVALID_ARGUMENT);
    CHECK(err[0] != '\0', "NULL config: no message");
    err[0] = '\0';
    EXPECT(NULL, f8_ctx_create(&good, NULL, err, sizeof err), F8_ERR_INVALID_ARGUMENT);
    CHECK(err[0] != '\0', "NULL out: no message");

    /* Bad backends and recipes. */
    f8_ctx_config bad[7];
    for (int i = 0; i < 7; i++) bad[i] = good;
    bad[0].backend = (f8_backend)2;
    bad[1].backend = (f8_backend)-1;
    bad[2].recipe.format = (f8_format)5;
    bad[3].recipe.amax_history_len = 0;
    bad[4].recipe.amax_compute_algo = (f8_amax_algo)9;
    bad[5].recipe.amax_history_len = -3;
    bad[6].recipe.format = (f8_format)-1;
    for (int i = 0; i < 7; i++) {
        err[0] = '\0';
        ctx = junk;
        EXPECT(NULL, f8_ctx_create(&bad[i], &ctx, err, sizeof err), F8_ERR_INVALID_ARGUMENT);
        CHECK(ctx == NULL, "bad config %d: *ctx not cleared", i);
        CHECK(err[0] != '\0' && strlen(err) < sizeof err, "bad config %d: no message", i);
    }
    /* The message respects error_size, and NULL error is allowed. */
    char small[16];
    memset(small, 'Z', sizeof small);
    EXPECT(NULL, f8_ctx_create(&bad[3], &ctx, small, 8), F8_ERR_INVALID_ARGUMENT);
    CHECK(memchr(small, '\0', 8) != NULL, "message not terminated within error_size");
    CHECK(small[8] == 'Z' && small[15] == 'Z', "message written past error_size");
    EXPECT(NULL, f8_ctx_create(&bad[3], &ctx, NULL, 0), F8_ERR_INVALID_ARGUMENT);
    memset(small, 'Z', sizeof small);
    EXPECT(NULL, f8_ctx_create(&bad[3], &ctx, small, 0), F8_ERR_INVALID_ARGUMENT);
    CHECK(small[0] == 'Z', "error_size 0: the buffer was written");

    /* CUDA: F8_ERR_NO_DEVICE in a CUDA=0 build or without a GPU; a build
     * with a GPU gives a working ctx instead. A negative or absurd ordinal is
     * never a device. */
    f8_ctx_config cuda = good;
    cuda.backend = F8_BACKEND_CUDA;
    err[0] = '\0';
    ctx = junk;
    f8_status st = f8_ctx_create(&cuda, &ctx, err, sizeof err);
    CHECK(st == F8_ERR_NO_DEVICE || st == F8_OK, "CUDA ctx: %s (%s)", f8_status_string(st), err);
    if (st == F8_ERR_NO_DEVICE) {
        CHECK(ctx == NULL && err[0] != '\0', "CUDA NO_DEVICE: ctx %p, message '%s'", (void *)ctx, err);
        printf("test_api: CUDA ctx -> F8_ERR_NO_DEVICE (%s)\n", err);
    } else if (st == F8_OK) {
        CHECK(f8_ctx_backend(ctx) == F8_BACKEND_CUDA, "CUDA ctx reports backend %d", (int)f8_ctx_backend(ctx));
        f8_ctx_destroy(ctx);
    }
    const int ordinals[2] = {-1, 4096};
    for (int i = 0; i < 2; i++) {
        cuda.device = ordinals[i];
        err[0] = '\0';
        ctx = junk;
        EXPECT(NULL, f8_ctx_create(&cuda, &ctx, err, sizeof err), F8_ERR_NO_DEVICE);
        CHECK(ctx == NULL && err[0] != '\0', "CUDA device %d: ctx not cleared or no message", ordinals[i]);
    }

    /* A CPU ctx still works afterwards. */
    ctx = NULL;
    EXPECT(NULL, f8_ctx_create(&good, &ctx, NULL, 0), F8_OK);
    if (!ctx) return;
    CHECK(f8_ctx_backend(ctx) == F8_BACKEND_CPU, "CPU ctx reports backend %d", (int)f8_ctx_backend(ctx));
    CHECK(f8_ctx_stream(ctx) == NULL, "CPU ctx has a stream");
    EXPECT(ctx, f8_ctx_set_stream(ctx, NULL), F8_ERR_UNSUPPORTED);
    CHECK(new_message(ctx, "stream"), "set_stream message '%s'", f8_ctx_last_error(ctx));
    EXPECT(ctx, f8_ctx_synchronize(ctx), F8_OK);
    f8_slot s;
    EXPECT(ctx, f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 1, &s), F8_OK);
    EXPECT(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD), F8_OK);
    f8_ctx_destroy(ctx);
}

static void test_null_handling(void)
{
    f8_ctx_destroy(NULL);
    f8_qtensor_destroy(NULL);
    f8_module_destroy(NULL);
    f8_saved_destroy(NULL);
    CHECK(f8_ctx_last_error(NULL) != NULL, "last_error(NULL) is NULL");
    CHECK(f8_ctx_recipe(NULL) == NULL, "recipe(NULL)");
    CHECK(f8_ctx_noop_flag(NULL) == NULL, "noop_flag(NULL)");
    void *p = NULL;
    f8_slot s = {0, 0};
    EXPECT(NULL, f8_ctx_alloc(NULL, 8, &p), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_ctx_upload(NULL, &p, &p, 1), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_ctx_download(NULL, &p, &p, 1), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_ctx_copy(NULL, &p, &p, 1), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_ctx_synchronize(NULL), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_ctx_set_noop_flag(NULL, 1.0f), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_ctx_set_stream(NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_ctx_slots_create(NULL, F8_DIR_FORWARD, 1, &s), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_ctx_update_scales(NULL, F8_DIR_FORWARD), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_slot_read(NULL, s, NULL, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_slot_write(NULL, s, 1.0f, 1.0f, NULL), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_tensor_convert(NULL, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    f8_linear_config lc = f8_linear_config_default(4, 4);
    f8_module *lin = NULL;
    EXPECT(NULL, f8_linear_create(NULL, &lc, &lin), F8_ERR_INVALID_ARGUMENT);
    CHECK(f8_module_weight_workspace(NULL, F8_PARAM_WEIGHT) == NULL, "workspace(NULL)");
}

static void test_memory(void)
{
    f8_ctx *ctx = cpu_ctx(NULL);
    if (!ctx) return;
    enum { B = 1000 };
    unsigned char host[B], back[B];
    for (int i = 0; i < B; i++) host[i] = (unsigned char)(i * 131 + 7);
    void *a = NULL, *b = NULL, *z = NULL;
    EXPECT(ctx, f8_ctx_alloc(ctx, B, &a), F8_OK);
    EXPECT(ctx, f8_ctx_alloc(ctx, B, &b), F8_OK);
    CHECK(a && b && a != b, "alloc pointers");
    CHECK(((uintptr_t)a & 255u) == 0 && ((uintptr_t)b & 255u) == 0, "alloc not 256-byte aligned");
    EXPECT(ctx, f8_ctx_alloc(ctx, 0, &z), F8_OK);
    CHECK(z != NULL, "alloc(0) gave NULL");
    f8_ctx_free(ctx, z);
    f8_ctx_free(ctx, NULL);
    if (!a || !b) return;
    EXPECT(ctx, f8_ctx_upload(ctx, a, host, B), F8_OK);
    EXPECT(ctx, f8_ctx_copy(ctx, b, a, B), F8_OK);
    memset(back, 0, B);
    EXPECT(ctx, f8_ctx_download(ctx, back, b, B), F8_OK);
    CHECK(memcmp(back, host, B) == 0, "upload/copy/download round trip");
    /* Partial copies at an offset. */
    EXPECT(ctx, f8_ctx_copy(ctx, (unsigned char *)b + 3, (unsigned char *)a + 500, 17), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, back, b, B), F8_OK);
    CHECK(memcmp(back + 3, host + 500, 17) == 0 && memcmp(back + 20, host + 20, B - 20) == 0 && back[2] == host[2],
          "offset copy");
    /* NULL pointers: errors with a message when bytes > 0, fine with 0 bytes. */
    sentinel(ctx);
    EXPECT(ctx, f8_ctx_upload(ctx, NULL, host, 4), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_ctx_upload"), "upload message '%s'", f8_ctx_last_error(ctx));
    sentinel(ctx);
    EXPECT(ctx, f8_ctx_download(ctx, back, NULL, 4), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_ctx_download"), "download message '%s'", f8_ctx_last_error(ctx));
    sentinel(ctx);
    EXPECT(ctx, f8_ctx_copy(ctx, a, NULL, 4), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_ctx_copy"), "copy message '%s'", f8_ctx_last_error(ctx));
    EXPECT(ctx, f8_ctx_upload(ctx, NULL, NULL, 0), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, NULL, NULL, 0), F8_OK);
    EXPECT(ctx, f8_ctx_copy(ctx, NULL, NULL, 0), F8_OK);
    EXPECT(ctx, f8_ctx_alloc(ctx, 8, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(ctx), "f8_ctx_alloc") != NULL, "alloc message '%s'", f8_ctx_last_error(ctx));
    EXPECT(ctx, f8_ctx_download(ctx, back, b, B), F8_OK);
    CHECK(back[0] == host[0], "failed calls changed memory");

    /* The noop flag: 0 after creation, set and read back. */
    float *flag = f8_ctx_noop_flag(ctx), fv = -1.0f;
    CHECK(flag != NULL, "noop flag NULL");
    if (flag) {
        EXPECT(ctx, f8_ctx_download(ctx, &fv, flag, sizeof fv), F8_OK);
        CHECK(fv == 0.0f, "noop flag starts at %g", (double)fv);
        EXPECT(ctx, f8_ctx_set_noop_flag(ctx, 1.0f), F8_OK);
        EXPECT(ctx, f8_ctx_download(ctx, &fv, flag, sizeof fv), F8_OK);
        CHECK(fv == 1.0f, "noop flag set to %g", (double)fv);
    }
    /* The high-water mark: it rises with the total and stays when memory is freed. */
    f8_memory_report rep;
    f8_ctx_counters c0, c1;
    EXPECT(ctx, f8_ctx_memory(ctx, &rep), F8_OK);
    EXPECT(ctx, f8_ctx_counters_read(ctx, &c0), F8_OK);
    CHECK(c0.peak_bytes >= rep.total, "peak %llu below the total %zu", (unsigned long long)c0.peak_bytes, rep.total);
    f8_ctx_free(ctx, b);
    b = NULL;
    void *big = NULL;
    EXPECT(ctx, f8_ctx_alloc(ctx, 3 * B, &big), F8_OK);
    EXPECT(ctx, f8_ctx_counters_read(ctx, &c1), F8_OK);
    CHECK(c1.peak_bytes == (c0.peak_bytes > rep.total - B + 3 * B ? c0.peak_bytes : rep.total - B + 3 * B),
          "peak %llu after freeing %d bytes and allocating %d (total was %zu)", (unsigned long long)c1.peak_bytes, B,
          3 * B, rep.total);
    f8_ctx_free(ctx, big);
    EXPECT(ctx, f8_ctx_counters_read(ctx, &c0), F8_OK);
    CHECK(c0.peak_bytes == c1.peak_bytes, "a free lowered the peak");
    f8_ctx_free(ctx, a);
    f8_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------ */

static void test_convert(void)
{
    f8_ctx *ctx = cpu_ctx(NULL);
    if (!ctx) return;
    enum { R = 7, C = 33, N = R * C };
    float x[N], back[N];
    uint16_t h[N], hb[N];
    /* specials, ties, subnormals, then a spread of bit patterns */
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
                                0x7F800001u, 0x00000001u, 0x807FFFFFu, 0x3F808000u, 0x3F818000u, 0x3F808001u,
                                0x7F7FFFFFu, 0xFF7F8000u, 0x7F7F7FFFu, 0x00008000u, 0x3F800000u};
    const int ns = (int)(sizeof special / sizeof special[0]);
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = i < ns ? bits_f(special[i]) : bits_f((uint32_t)(s >> 32));
    }
    float *f32 = NULL, *f32b = NULL;
    uint16_t *b16 = NULL, *b16b = NULL;
    EXPECT(ctx, f8_ctx_alloc(ctx, sizeof x, (void **)&f32), F8_OK);
    EXPECT(ctx, f8_ctx_alloc(ctx, sizeof x, (void **)&f32b), F8_OK);
    EXPECT(ctx, f8_ctx_alloc(ctx, sizeof h, (void **)&b16), F8_OK);
    EXPECT(ctx, f8_ctx_alloc(ctx, sizeof h, (void **)&b16b), F8_OK);
    if (!f32 || !f32b || !b16 || !b16b) return;
    EXPECT(ctx, f8_ctx_upload(ctx, f32, x, sizeof x), F8_OK);
    f8_tensor tf = f8_tensor_make(f32, F8_DTYPE_FP32, R, C), tfb = f8_tensor_make(f32b, F8_DTYPE_FP32, R, C);
    f8_tensor tb = f8_tensor_make(b16, F8_DTYPE_BF16, R, C), tbb = f8_tensor_make(b16b, F8_DTYPE_BF16, R, C);

    EXPECT(ctx, f8_tensor_convert(ctx, &tf, &tb), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, h, b16, sizeof h), F8_OK);
    int bad = 0;
    int bad_oracle = 0;
    for (int i = 0; i < N; i++) {
        bad += h[i] != f8_bf16_from_float(x[i]);
        bad_oracle += h[i] != bf16_oracle(x[i]);
    }
    CHECK(bad == 0, "FP32->BF16: %d of %d differ from f8_bf16_from_float", bad, N);
    CHECK(bad_oracle == 0, "FP32->BF16: %d of %d differ from the nearest-even oracle", bad_oracle, N);
    /* BF16 -> FP32 is exact: the bits shifted up. */
    EXPECT(ctx, f8_tensor_convert(ctx, &tb, &tf), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, back, f32, sizeof back), F8_OK);
    bad = 0;
    for (int i = 0; i < N; i++) bad += fbits(back[i]) != ((uint32_t)h[i] << 16);
    CHECK(bad == 0, "BF16->FP32: %d differ", bad);
    /* Equal dtypes copy. */
    EXPECT(ctx, f8_tensor_convert(ctx, &tb, &tbb), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, hb, b16b, sizeof hb), F8_OK);
    CHECK(memcmp(h, hb, sizeof h) == 0, "BF16->BF16 copy");
    EXPECT(ctx, f8_tensor_convert(ctx, &tf, &tfb), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, x, f32b, sizeof x), F8_OK);
    CHECK(memcmp(x, back, sizeof x) == 0, "FP32->FP32 copy");

    /* Errors: shape mismatch (same count, transposed), FP8 dst; nothing written. */
    f8_tensor tbt = f8_tensor_make(b16b, F8_DTYPE_BF16, C, R);
    f8_tensor t8 = f8_tensor_make(b16b, F8_DTYPE_E4M3, R, C);
    t8.scale_inv = f32;
    memset(hb, 0x5A, sizeof hb);
    EXPECT(ctx, f8_ctx_upload(ctx, b16b, hb, sizeof hb), F8_OK);
    sentinel(ctx);
    EXPECT(ctx, f8_tensor_convert(ctx, &tf, &tbt), F8_ERR_SHAPE);
    CHECK(new_message(ctx, "f8_tensor_convert"), "convert shape message '%s'", f8_ctx_last_error(ctx));
    sentinel(ctx);
    EXPECT(ctx, f8_tensor_convert(ctx, &tf, &t8), F8_ERR_DTYPE);
    CHECK(new_message(ctx, "f8_tensor_convert"), "convert dtype message '%s'", f8_ctx_last_error(ctx));
    sentinel(ctx);
    EXPECT(ctx, f8_tensor_convert(ctx, NULL, &tbb), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_tensor_convert"), "convert NULL message '%s'", f8_ctx_last_error(ctx));
    uint16_t after[N];
    EXPECT(ctx, f8_ctx_download(ctx, after, b16b, sizeof after), F8_OK);
    CHECK(memcmp(after, hb, sizeof hb) == 0, "a failed convert wrote dst");
    f8_tensor empty_a = f8_tensor_make(NULL, F8_DTYPE_FP32, 0, 9), empty_b = f8_tensor_make(NULL, F8_DTYPE_BF16, 0, 9);
    EXPECT(ctx, f8_tensor_convert(ctx, &empty_a, &empty_b), F8_OK);

    f8_ctx_free(ctx, f32);
    f8_ctx_free(ctx, f32b);
    f8_ctx_free(ctx, b16);
    f8_ctx_free(ctx, b16b);
    f8_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------ */

/* A distinct state per (direction, index). */
static void slot_value(int d, int i, int L, float *h, float *scale, float *scale_inv)
{
    for (int r = 0; r < L; r++) h[r] = (float)(d * 100000 + i * 10 + r) + 0.5f;
    *scale = (float)(i + 2) * (d ? -1.0f : 1.0f);
    *scale_inv = 1.0f / (float)(i + 3);
}

static void check_slots(f8_ctx *ctx, const f8_slot *slots, int d, int n, int L, const char *when)
{
    float h[8], want[8], sc, si, wsc, wsi;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        CHECK(slots[i].direction == d && slots[i].index == i, "slot %d: (%d, %d)", i, (int)slots[i].direction,
              (int)slots[i].index);
        f8_status st = f8_slot_read(ctx, slots[i], &sc, &si, h);
        slot_value(d, i, L, want, &wsc, &wsi);
        if (st != F8_OK || memcmp(h, want, (size_t)L * sizeof(float)) != 0 || fbits(sc) != fbits(wsc) ||
            fbits(si) != fbits(wsi))
            bad++;
    }
    CHECK(bad == 0, "%s: %d of %d direction-%d slots lost their state", when, bad, n, d);
}

static void test_slots(void)
{
    enum { L = 6 };
    f8_recipe r = f8_recipe_default();
    r.amax_history_len = L;
    f8_ctx *ctx = cpu_ctx(&r);
    if (!ctx) return;
    static f8_slot slots[2][1200];
    int count[2] = {0, 0};
    /* Steps of growth: within the first 16, past 16, past 1000; the two
     * directions interleaved so each regrow must keep the other's state. */
    const int steps[][2] = {{3, 0}, {10, 2}, {4, 15}, {1, 1}, {20, 7}, {1000, 0}, {0, 1100}, {5, 5}};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        for (int d = 0; d < 2; d++) {
            const int n = steps[k][d];
            if (!n) continue;
            EXPECT(ctx, f8_ctx_slots_create(ctx, (f8_direction)d, n, &slots[d][count[d]]), F8_OK);
            /* New slots: scale 1, scale_inv 1, history 0. */
            int fresh_bad = 0;
            for (int i = count[d]; i < count[d] + n; i++) {
                float h[L], sc = 0, si = 0;
                EXPECT(ctx, f8_slot_read(ctx, slots[d][i], &sc, &si, h), F8_OK);
                int ok = sc == 1.0f && si == 1.0f;
                for (int q = 0; q < L; q++) ok = ok && fbits(h[q]) == 0;
                fresh_bad += !ok;
                float wh[L], wsc, wsi;
                slot_value(d, i, L, wh, &wsc, &wsi);
                EXPECT(ctx, f8_slot_write(ctx, slots[d][i], wsc, wsi, wh), F8_OK);
            }
            CHECK(fresh_bad == 0, "step %zu: %d new direction-%d slots not initialised", k, fresh_bad, d);
            count[d] += n;
            char when[64];
            snprintf(when, sizeof when, "after growth step %zu", k);
            check_slots(ctx, slots[0], 0, count[0], L, when);
            check_slots(ctx, slots[1], 1, count[1], L, when);
        }
    }
    /* f8_slot_write with a NULL history keeps it and sets the pair as given. */
    float h[L], sc, si, wh[L], wsc, wsi;
    EXPECT(ctx, f8_slot_write(ctx, slots[1][7], 3.0f, 123.0f, NULL), F8_OK);
    EXPECT(ctx, f8_slot_read(ctx, slots[1][7], &sc, &si, h), F8_OK);
    slot_value(1, 7, L, wh, &wsc, &wsi);
    CHECK(sc == 3.0f && si == 123.0f && memcmp(h, wh, sizeof h) == 0, "slot_write with NULL history");
    EXPECT(ctx, f8_slot_read(ctx, slots[1][8], NULL, NULL, NULL), F8_OK);

    /* Bad requests and unregistered slots. */
    f8_slot s1;
    sentinel(ctx);
    EXPECT(ctx, f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 0, &s1), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_ctx_slots_create"), "count 0 message '%s'", f8_ctx_last_error(ctx));
    sentinel(ctx);
    EXPECT(ctx, f8_ctx_slots_create(ctx, F8_DIR_FORWARD, -4, &s1), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_ctx_slots_create"), "negative count message '%s'", f8_ctx_last_error(ctx));
    sentinel(ctx);
    EXPECT(ctx, f8_ctx_slots_create(ctx, (f8_direction)2, 1, &s1), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_ctx_slots_create"), "bad direction message '%s'", f8_ctx_last_error(ctx));
    sentinel(ctx);
    EXPECT(ctx, f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, 1, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_ctx_slots_create"), "NULL slots message '%s'", f8_ctx_last_error(ctx));
    sentinel(ctx);
    EXPECT(ctx, f8_ctx_update_scales(ctx, (f8_direction)7), F8_ERR_INVALID_ARGUMENT);
    CHECK(new_message(ctx, "f8_ctx_update_scales"), "update message '%s'", f8_ctx_last_error(ctx));
    /* index -1, one past each direction's last, directions 2 and -1 */
    f8_slot u[5] = {{F8_DIR_FORWARD, -1}, {F8_DIR_FORWARD, 0}, {F8_DIR_BACKWARD, 0}, {2, 0}, {-1, 0}};
    u[1].index = count[0];
    u[2].index = count[1];
    for (int i = 0; i < 5; i++) {
        sentinel(ctx);
        EXPECT(ctx, f8_slot_read(ctx, u[i], &sc, &si, h), F8_ERR_INVALID_ARGUMENT);
        CHECK(new_message(ctx, "f8_slot_read"), "slot_read (%d, %d) message '%s'", (int)u[i].direction,
              (int)u[i].index, f8_ctx_last_error(ctx));
        sentinel(ctx);
        EXPECT(ctx, f8_slot_write(ctx, u[i], 5.0f, 0.2f, h), F8_ERR_INVALID_ARGUMENT);
        CHECK(new_message(ctx, "f8_slot_write"), "slot_write (%d, %d) message '%s'", (int)u[i].direction,
              (int)u[i].index, f8_ctx_last_error(ctx));
    }
    /* Nothing registered moved. */
    EXPECT(ctx, f8_slot_write(ctx, slots[1][7], wsc, wsi, wh), F8_OK);
    check_slots(ctx, slots[0], 0, count[0], L, "after the failed calls");
    check_slots(ctx, slots[1], 1, count[1], L, "after the failed calls");
    f8_ctx_destroy(ctx);
}

/* Value i of f8_tensor_fill_normal(seed) as f8.h specifies it, straight
 * from the index: splitmix64's state before its output j is seed + j·golden. */
static float normal_spec(uint64_t seed, int64_t i, double sd)
{
    double u[2];
    for (int k = 0; k < 2; k++) {
        uint64_t z = seed + (uint64_t)(2 * i + k + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        u[k] = ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    }
    return (float)(sd * sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

/* f8_tensor_fill_normal: the moments of N(0, std²) (statistical bounds of
 * many standard errors), repeatable bits, BF16 = the FP32 draws rounded by
 * the independent bf16_oracle, the very draws a module's weight init takes,
 * and bad input refused with the memory unchanged. */
static void test_fill_normal(void)
{
    f8_ctx *ctx = cpu_ctx(NULL);
    if (!ctx) return;
    enum { R = 256, C = 256, N = R * C };
    const double sd = 0.5;
    float *a = NULL, *b = NULL;
    uint16_t *h16 = NULL;
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    uint16_t *z = malloc(sizeof(uint16_t) * N);
    EXPECT(ctx, f8_ctx_alloc(ctx, sizeof(float) * N, (void **)&a), F8_OK);
    EXPECT(ctx, f8_ctx_alloc(ctx, sizeof(float) * N, (void **)&b), F8_OK);
    EXPECT(ctx, f8_ctx_alloc(ctx, sizeof(uint16_t) * N, (void **)&h16), F8_OK);
    if (!a || !b || !h16 || !x || !y || !z) return;
    f8_tensor ta = f8_tensor_make(a, F8_DTYPE_FP32, R, C), tb = f8_tensor_make(b, F8_DTYPE_FP32, R, C);
    f8_tensor th = f8_tensor_make(h16, F8_DTYPE_BF16, R, C);
    EXPECT(ctx, f8_tensor_fill_normal(ctx, &ta, sd, 7), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, x, a, sizeof(float) * N), F8_OK);
    double m1 = 0, m2 = 0, m4 = 0;
    int within = 0, finite = 1;
    for (int i = 0; i < N; i++) {
        const double v = x[i];
        finite &= isfinite(v) != 0;
        m1 += v, m2 += v * v, m4 += v * v * v * v;
        within += fabs(v) <= sd;
    }
    m1 /= N, m2 /= N, m4 /= N;
    /* standard errors: mean sd/sqrt(N); E[v²] sd²·sqrt(2/N); the 1-sigma fraction sqrt(p(1-p)/N) */
    CHECK(finite, "fill_normal: a value is not finite");
    CHECK(fabs(m1) < 6 * sd / sqrt(N), "fill_normal: mean %g", m1);
    CHECK(fabs(m2 / (sd * sd) - 1) < 6 * sqrt(2.0 / N), "fill_normal: E[v^2]/sd^2 = %g", m2 / (sd * sd));
    CHECK(fabs(m4 / (m2 * m2) - 3) < 0.15, "fill_normal: kurtosis %g, wanted 3", m4 / (m2 * m2));
    CHECK(fabs((double)within / N - 0.682689) < 6 * sqrt(0.2166 / N), "fill_normal: %g within one sd",
          (double)within / N);
    /* the same seed gives the same bits; another seed other values */
    EXPECT(ctx, f8_tensor_fill_normal(ctx, &tb, sd, 7), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, y, b, sizeof(float) * N), F8_OK);
    CHECK(memcmp(x, y, sizeof(float) * N) == 0, "fill_normal: seed 7 twice differs");
    EXPECT(ctx, f8_tensor_fill_normal(ctx, &tb, sd, 8), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, y, b, sizeof(float) * N), F8_OK);
    int same = 0;
    for (int i = 0; i < N; i++) same += x[i] == y[i];
    CHECK(same < 16, "fill_normal: seeds 7 and 8 share %d of %d values", same, N);
    /* BF16: the FP32 draws rounded to nearest even */
    EXPECT(ctx, f8_tensor_fill_normal(ctx, &th, sd, 7), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, z, h16, sizeof(uint16_t) * N), F8_OK);
    int bad16 = 0;
    for (int i = 0; i < N; i++) bad16 += z[i] != bf16_oracle(x[i]);
    CHECK(bad16 == 0, "fill_normal: %d BF16 values are not the FP32 draws rounded", bad16);
    /* a fill big enough to be split over threads: every value the spec's
     * (value i from splitmix64 outputs 2i+1 and 2i+2 of the seed, computed
     * here one by one), so the split changes no bit */
    {
        const int64_t big = 3 * ((int64_t)1 << 20) + 7;
        float *g = NULL, *hg = malloc(sizeof(float) * (size_t)big);
        EXPECT(ctx, f8_ctx_alloc(ctx, sizeof(float) * (size_t)big, (void **)&g), F8_OK);
        if (g && hg) {
            f8_tensor tg = f8_tensor_make(g, F8_DTYPE_FP32, 1, big);
            EXPECT(ctx, f8_tensor_fill_normal(ctx, &tg, sd, 7), F8_OK);
            EXPECT(ctx, f8_ctx_download(ctx, hg, g, sizeof(float) * (size_t)big), F8_OK);
            int64_t off = 0;
            for (int64_t i = 0; i < big; i++) off += hg[i] != normal_spec(7, i, sd);
            CHECK(off == 0, "fill_normal: %lld of %lld values of a threaded fill differ from the spec", (long long)off,
                  (long long)big);
            CHECK(memcmp(hg, x, sizeof(float) * N) == 0, "fill_normal: the first values depend on the fill's size");
        }
        f8_ctx_free(ctx, g);
        free(hg);
    }
    /* std 0: zeros */
    EXPECT(ctx, f8_tensor_fill_normal(ctx, &tb, 0.0, 7), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, y, b, sizeof(float) * N), F8_OK);
    int nonzero = 0;
    for (int i = 0; i < N; i++) nonzero += y[i] != 0.0f;
    CHECK(nonzero == 0, "fill_normal: std 0 left %d non-zero values", nonzero);
    /* a module's weight init is these draws: std 0.02 and the config's seed */
    f8_linear_config lc = f8_linear_config_default(48, 40);
    lc.seed = 1234;
    f8_module *lin = NULL;
    EXPECT(ctx, f8_linear_create(ctx, &lc, &lin), F8_OK);
    f8_tensor w;
    if (lin && f8_module_param(lin, F8_PARAM_WEIGHT, 0, &w) == F8_OK && w.dtype == F8_DTYPE_FP32) {
        f8_tensor tw = f8_tensor_make(b, F8_DTYPE_FP32, w.rows, w.cols);
        EXPECT(ctx, f8_tensor_fill_normal(ctx, &tw, 0.02, lc.seed), F8_OK);
        const size_t bytes = sizeof(float) * (size_t)(w.rows * w.cols);
        EXPECT(ctx, f8_ctx_download(ctx, x, w.data, bytes), F8_OK);
        EXPECT(ctx, f8_ctx_download(ctx, y, b, bytes), F8_OK);
        CHECK(memcmp(x, y, bytes) == 0, "fill_normal: f8_module's initial weight is not fill_normal(0.02, seed)");
    } else {
        CHECK(0, "fill_normal: no FP32 f8_module weight to compare (%s)", f8_ctx_last_error(ctx));
    }
    f8_module_destroy(lin);
    /* bad input: a status, nothing written */
    EXPECT(ctx, f8_tensor_fill_normal(ctx, &ta, sd, 7), F8_OK);
    EXPECT(ctx, f8_ctx_download(ctx, x, a, sizeof(float) * N), F8_OK);
    const double bad_std[] = {-1.0, NAN, INFINITY};
    for (int k = 0; k < 3; k++) EXPECT(ctx, f8_tensor_fill_normal(ctx, &ta, bad_std[k], 9), F8_ERR_INVALID_ARGUMENT);
    f8_tensor t8 = f8_tensor_make(a, F8_DTYPE_E4M3, R, C);
    t8.scale_inv = b;
    EXPECT(ctx, f8_tensor_fill_normal(ctx, &t8, sd, 9), F8_ERR_DTYPE);
    EXPECT(ctx, f8_tensor_fill_normal(ctx, NULL, sd, 9), F8_ERR_INVALID_ARGUMENT);
    EXPECT(NULL, f8_tensor_fill_normal(NULL, &ta, sd, 9), F8_ERR_INVALID_ARGUMENT);
    EXPECT(ctx, f8_ctx_download(ctx, y, a, sizeof(float) * N), F8_OK);
    CHECK(memcmp(x, y, sizeof(float) * N) == 0, "fill_normal: a refused call changed the tensor");
    f8_ctx_free(ctx, a), f8_ctx_free(ctx, b), f8_ctx_free(ctx, h16);
    free(x), free(y), free(z);
    f8_ctx_destroy(ctx);
}

int main(void)
{
    test_status_strings();
    test_ctx_create();
    test_null_handling();
    test_memory();
    test_convert();
    test_slots();
    test_fill_normal();
    printf("test_api: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
