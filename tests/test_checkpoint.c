/*
 * test_checkpoint.c — f8_checkpoint and its safetensors files, on the CPU
 * backend, against expectations written here by hand:
 *  - round trips bit for bit for every dtype (f8_tensor dtypes through
 *    add_tensor/read_tensor, I32/I64/U8 through the internal put), odd and
 *    empty shapes, 0-D to 4-D; save -> load -> save gives the same bytes;
 *  - the file layout against hand-built bytes: the 8-byte length, the JSON,
 *    the space padding to 8, the data order (element size, then name) and
 *    each tensor aligned to its element size;
 *  - metadata: escapes, control bytes and Unicode both ways, \u escapes and
 *    surrogate pairs from a hand-written file, reserved keys;
 *  - a battery of malformed files (every truncation of a valid file, bad
 *    JSON, bad numbers, overlaps, gaps, wrong sizes, unknown dtypes,
 *    duplicates, huge header lengths, version "2"), all refused with
 *    F8_ERR_INVALID_ARGUMENT and no checkpoint; plain safetensors files of
 *    other tools load;
 *  - read_tensor's dtype/shape rules; a refused read leaves dst unchanged;
 *    both copies are refused while a graph is captured;
 *  - saving over an old file: a failed save gives F8_ERR_IO, leaves the old
 *    file as it was and no temporary behind; a save removes the temporaries
 *    of killed saves (dead pids) and nothing else;
 *  - integrity: every tensor's XXH64 in the metadata; a flipped bit refused
 *    naming the tensor (memory and file loads), bad or orphaned checksums
 *    refused, files without checksums loading as before.
 * Value checks on restore are in test_checkpoint_values.c.
 */
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"

static f8_ctx *g_ctx;
static char g_dir[64];

/* ---- helpers ------------------------------------------------------------ */

static void *balloc(size_t bytes)
{
    void *p = NULL;
    if (f8_ctx_alloc(g_ctx, bytes, &p) != F8_OK) die("f8_ctx_alloc", g_ctx);
    return p;
}

/* A backend tensor holding the given host bytes (uninitialised if NULL). */
static f8_tensor btensor(f8_dtype dt, int64_t rows, int64_t cols, const void *host)
{
    size_t bytes = (size_t)(rows * cols) * f8_dtype_size(dt);
    f8_tensor t = f8_tensor_make(balloc(bytes), dt, rows, cols);
    if (bytes && host && f8_ctx_upload(g_ctx, t.data, host, bytes) != F8_OK) die("upload", g_ctx);
    return t;
}

static void bfree(f8_tensor *t) { f8_ctx_free(g_ctx, t->data); }

static void download(void *host, const f8_tensor *t)
{
    size_t bytes = (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype);
    if (bytes && f8_ctx_download(g_ctx, host, t->data, bytes) != F8_OK) die("download", g_ctx);
}

static void random_bytes(test_rng *r, unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)rng_u64(r);
}

static void path_in_dir(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = (unsigned char *)xmalloc((size_t)n);
    *size = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void write_file(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) die("write_file", NULL);
    fclose(f);
}

/* A file made of an 8-byte length, the given JSON (unpadded) and data. */
static unsigned char *file_of(const char *json, const void *data, size_t data_len, size_t *size)
{
    size_t n = strlen(json);
    unsigned char *b = (unsigned char *)xmalloc(8 + n + data_len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    if (data_len) memcpy(b + 8 + n, data, data_len);
    *size = 8 + n + data_len;
    return b;
}

/* load_memory must give `want`; when it refuses, leave *ck NULL and say why. */
static void expect_refused(const unsigned char *b, size_t n, f8_status want, const char *what)
{
    f8_checkpoint *ck = (f8_checkpoint *)&ck; /* not NULL: the call must clear it */
    f8_status st = f8_checkpoint_load_memory(g_ctx, b, n, &ck);
    CHECK(st == want, "%s: got %s, wanted %s (%s)", what, f8_status_string(st), f8_status_string(want),
          f8_ctx_last_error(g_ctx));
    CHECK((ck == NULL) == (st != F8_OK), "%s: *checkpoint %s", what, ck ? "not NULL after an error" : "NULL");
    CHECK(st == F8_OK || f8_ctx_last_error(g_ctx)[0] != 0, "%s: no message", what);
    if (getenv("F8_TEST_VERBOSE") && st != F8_OK) printf("%-32s %s\n", what, f8_ctx_last_error(g_ctx));
    if (st == F8_OK) f8_checkpoint_destroy(ck);
}

static void expect_json_refused(const char *json, const void *data, size_t data_len, const char *what)
{
    size_t n;
    unsigned char *b = file_of(json, data, data_len, &n);
    expect_refused(b, n, F8_ERR_INVALID_ARGUMENT, what);
    free(b);
}

static f8_checkpoint *load_json(const char *json, const void *data, size_t data_len)
{
    size_t n;
    unsigned char *b = file_of(json, data, data_len, &n);
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_load_memory(g_ctx, b, n, &ck));
    free(b);
    return ck;
}

static int same_entry(const f8i_ck_entry *a, const f8i_ck_entry *b)
{
    if (!a || !b || strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim || a->bytes != b->bytes)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return a->bytes == 0 || !memcmp(a->data, b->data, a->bytes);
}

/* Every entry and metadata pair of a also in b, identical, and as many. */
static int same_checkpoint(const f8_checkpoint *a, const f8_checkpoint *b)
{
    if (f8i_checkpoint_count(a) != f8i_checkpoint_count(b)) return 0;
    for (size_t i = 0; i < f8i_checkpoint_count(a); i++) {
        const f8i_ck_entry *e = f8i_checkpoint_entry(a, i);
        if (!same_entry(e, f8i_checkpoint_find(b, e->name))) return 0;
    }
    if (f8i_checkpoint_meta_count(a) != f8i_checkpoint_meta_count(b)) return 0;
    for (size_t i = 0; i < f8i_checkpoint_meta_count(a); i++) {
        const char *k, *v, *w;
        f8i_checkpoint_meta_at(a, i, &k, &v);
        w = f8_checkpoint_metadata(b, k);
        if (!w || strcmp(v, w)) return 0;
    }
    return 1;
}

/* ---- round trips ----------------------------------------------------------- */

static void test_roundtrip(void)
{
    static const f8_dtype dts[4] = {F8_DTYPE_FP32, F8_DTYPE_BF16, F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    static const int64_t shapes[][2] = {{3, 5}, {1, 7}, {13, 1}, {1, 1}, {0, 4}, {4, 0}, {0, 0}, {17, 31}};
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    test_rng r = {42};
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    if (!ck) return;
    /* Host copies of everything stored, to compare with afterwards. */
    unsigned char *host[4][8];
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < n_shapes; s++) {
            size_t bytes = (size_t)(shapes[s][0] * shapes[s][1]) * f8_dtype_size(dts[d]);
            host[d][s] = (unsigned char *)xmalloc(bytes);
            random_bytes(&r, host[d][s], bytes); /* any bit pattern: NaNs, infs, subnormals */
            f8_tensor t = btensor(dts[d], shapes[s][0], shapes[s][1], host[d][s]);
            char name[64];
            snprintf(name, sizeof name, "t.%s.%lldx%lld", f8_dtype_name(dts[d]), (long long)shapes[s][0],
                     (long long)shapes[s][1]);
            CHECK_OK(g_ctx, f8_checkpoint_add_tensor(ck, name, &t));
            CHECK(f8_checkpoint_has(ck, name), "has %s", name);
            bfree(&t);
        }
    /* The other dtypes, and 0-D, 1-D, 3-D and 4-D shapes, through put. */
    int32_t i32[6] = {0, -1, INT32_MIN, INT32_MAX, 7, 12345};
    int64_t i64[3] = {INT64_MIN, -2, INT64_MAX};
    uint8_t u8[24];
    random_bytes(&r, u8, sizeof u8);
    float scalar = -0.0f;
    int64_t s1[1] = {3}, s3[3] = {2, 3, 4}, s4[4] = {1, 2, 3, 1}, s0[1] = {0};
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "i32", F8I_CK_I32, 4, s4, i32, sizeof i32));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "i64", F8I_CK_I64, 1, s1, i64, sizeof i64));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "u8", F8I_CK_U8, 3, s3, u8, sizeof u8));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "scalar", F8I_CK_F32, 0, NULL, &scalar, sizeof scalar));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "empty", F8I_CK_BF16, 1, s0, NULL, 0));
    CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, "step", "1000"));

    char path[128];
    path_in_dir(path, sizeof path, "roundtrip.safetensors");
    CHECK_OK(g_ctx, f8_checkpoint_save(ck, path));
    f8_checkpoint *back = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_load(g_ctx, path, &back));
    if (!back) goto out;
    CHECK(same_checkpoint(ck, back) && same_checkpoint(back, ck), "loaded checkpoint differs from the saved one");
    CHECK(f8i_checkpoint_is_f8(back), "an f8 file loads as f8");

    /* read_tensor gives the same bits, through backend memory. */
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < n_shapes; s++) {
            size_t bytes = (size_t)(shapes[s][0] * shapes[s][1]) * f8_dtype_size(dts[d]);
            unsigned char *got = (unsigned char *)xmalloc(bytes);
            f8_tensor t = btensor(dts[d], shapes[s][0], shapes[s][1], NULL);
            char name[64];
            snprintf(name, sizeof name, "t.%s.%lldx%lld", f8_dtype_name(dts[d]), (long long)shapes[s][0],
                     (long long)shapes[s][1]);
            CHECK_OK(g_ctx, f8_checkpoint_read_tensor(back, name, &t));
            download(got, &t);
            CHECK(bytes == 0 || !memcmp(got, host[d][s], bytes), "%s: bytes differ after the round trip", name);
            const f8i_ck_entry *e = f8i_checkpoint_find(back, name);
            CHECK(e && e->ndim == 2 && e->shape[0] == shapes[s][0] && e->shape[1] == shapes[s][1], "%s: shape", name);
            bfree(&t);
            free(got);
        }
    const f8i_ck_entry *e = f8i_checkpoint_find(back, "i64");
    CHECK(e && e->dtype == F8I_CK_I64 && e->ndim == 1 && e->shape[0] == 3 && !memcmp(e->data, i64, sizeof i64),
          "i64 entry");
    e = f8i_checkpoint_find(back, "scalar");
    CHECK(e && e->ndim == 0 && e->bytes == 4 && !memcmp(e->data, &scalar, 4), "0-D entry");
    e = f8i_checkpoint_find(back, "empty");
    CHECK(e && e->bytes == 0 && e->data != NULL, "empty entry has a non-NULL data pointer");

    /* The file is canonical: loaded and saved again, the same bytes; and the
     * in-memory image is the file. */
    size_t n1 = 0, n2 = 0, n3 = 0;
    unsigned char *b1 = read_file(path, &n1), *b2 = NULL, *b3 = NULL;
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(back, &b2, &n2));
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(ck, &b3, &n3));
    CHECK(b1 && b2 && n1 == n2 && !memcmp(b1, b2, n1), "save -> load -> serialize changes the bytes");
    CHECK(b3 && n1 == n3 && !memcmp(b1, b3, n1), "serialize differs from the saved file");
    free(b1);
    free(b2);
    free(b3);
    f8_checkpoint_destroy(back);
out:
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < n_shapes; s++) free(host[d][s]);
    f8_checkpoint_destroy(ck);

    /* An empty checkpoint is a valid file too. */
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    path_in_dir(path, sizeof path, "empty.safetensors");
    CHECK_OK(g_ctx, f8_checkpoint_save(ck, path));
    CHECK_OK(g_ctx, f8_checkpoint_load(g_ctx, path, &back));
    CHECK(back && f8i_checkpoint_count(back) == 0 && !strcmp(f8_checkpoint_metadata(back, "format"), "f8"),
          "empty checkpoint round trip");
    f8_checkpoint_destroy(back);
    f8_checkpoint_destroy(ck);
}

/* ---- layout ----------------------------------------------------------------- */

static void test_layout(void)
{
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    if (!ck) return;
    float w[2] = {1.0f, -2.0f};
    f8_tensor t = btensor(F8_DTYPE_FP32, 1, 2, w);
    CHECK_OK(g_ctx, f8_checkpoint_add_tensor(ck, "w", &t));
    bfree(&t);
    unsigned char *b = NULL;
    size_t n = 0;
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(ck, &b, &n));
    /* Hand-built: JSON, padded with spaces so that 8 + length is a multiple
     * of 8, then the two floats little-endian. */
    /* f8.xxh64.w is XXH64 of the 8 data bytes (xxhsum -H64 gives the same) */
    const char *json = "{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"1\","
                       "\"f8.xxh64.w\":\"54ba68ca061b22ef\"},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}}";
    size_t jl = strlen(json), hl = (jl + 7) / 8 * 8;
    unsigned char want[256];
    memset(want, ' ', sizeof want);
    for (int i = 0; i < 8; i++) want[i] = (unsigned char)(hl >> (8 * i));
    memcpy(want + 8, json, jl);
    static const unsigned char floats[8] = {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0};
    memcpy(want + 8 + hl, floats, 8);
    CHECK(n == 8 + hl + 8, "file size %zu, wanted %zu", n, 8 + hl + 8);
    CHECK(b && n == 8 + hl + 8 && !memcmp(b, want, n), "file bytes differ from the hand-built ones");
    char path[128];
    path_in_dir(path, sizeof path, "layout.safetensors");
    CHECK_OK(g_ctx, f8_checkpoint_save(ck, path));
    size_t fn = 0;
    unsigned char *fb = read_file(path, &fn);
    CHECK(fb && fn == n && b && !memcmp(fb, b, n), "saved file differs from the expected bytes");
    free(fb);
    free(b);
    f8_checkpoint_destroy(ck);

    /* Data order: element size first (I64, F32, BF16, U8), then name; no gaps;
     * each at a multiple of its element size. The JSON lists names sorted. */
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    unsigned char zeros[64] = {0};
    int64_t s3[1] = {3}, s1[1] = {1}, s2[2] = {1, 1};
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "a", F8I_CK_U8, 1, s3, zeros, 3));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "b", F8I_CK_F32, 2, s2, zeros, 4));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "c", F8I_CK_BF16, 1, s3, zeros, 6));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "d", F8I_CK_I64, 1, s1, zeros, 8));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "e", F8I_CK_F32, 1, s1, zeros, 4));
    CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, "k", "v"));
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(ck, &b, &n));
    const char *json2 = "{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"1\",\"k\":\"v\","
                        "\"f8.xxh64.a\":\"31886f2e7daf8ca4\",\"f8.xxh64.b\":\"3aefa6fd5cf2deb4\","
                        "\"f8.xxh64.c\":\"c0dcf27516acb324\",\"f8.xxh64.d\":\"34c96acdcadb1bbb\","
                        "\"f8.xxh64.e\":\"3aefa6fd5cf2deb4\"},"
                        "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[22,25]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[8,12]},"
                        "\"c\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
                        "\"d\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                        "\"e\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}";
    jl = strlen(json2);
    hl = (jl + 7) / 8 * 8;
    CHECK(b && n == 8 + hl + 25 && !memcmp(b + 8, json2, jl), "mixed-dtype header differs:\n%.*s", (int)jl,
          b ? (const char *)b + 8 : "");
    free(b);
    f8_checkpoint_destroy(ck);

    /* The data starts 8-aligned whatever the header length. */
    for (int len = 1; len <= 24; len++) {
        CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
        char name[32];
        memset(name, 'x', (size_t)len);
        name[len] = 0;
        CHECK_OK(g_ctx, f8i_checkpoint_put(ck, name, F8I_CK_U8, 1, s1, zeros, 1));
        CHECK_OK(g_ctx, f8i_checkpoint_serialize(ck, &b, &n));
        uint64_t h = 0;
        for (int i = 7; i >= 0; i--) h = (h << 8) | b[i];
        CHECK((8 + h) % 8 == 0 && n == 8 + h + 1 && b[8 + h - 1] != 0, "name of %d: header length %llu", len,
              (unsigned long long)h);
        free(b);
        f8_checkpoint_destroy(ck);
    }
}

/* ---- metadata ---------------------------------------------------------------- */

static void test_metadata(void)
{
    f8_checkpoint *ck = NULL, *back = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    if (!ck) return;
    CHECK(!strcmp(f8_checkpoint_metadata(ck, "format"), "f8"), "a new checkpoint says format f8");
    CHECK(!strcmp(f8_checkpoint_metadata(ck, "f8.format_version"), "1"), "a new checkpoint says version 1");
    CHECK(f8_checkpoint_metadata(ck, "absent") == NULL, "absent key gives NULL");
    const char *keys[] = {"quote\"back\\slash", "ctl\n\t\r\b\f\x01\x1f", "unicode h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9D\x84\x9E",
                          "", "/slash"};
    const char *vals[] = {"v\"1\\", "line1\nline2\x7f", "\xE6\x97\xA5\xE6\x9C\xAC", "empty key", ""};
    for (int i = 0; i < 5; i++) CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, keys[i], vals[i]));
    CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, "replace", "old"));
    CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, "replace", "new"));
    CHECK(!strcmp(f8_checkpoint_metadata(ck, "replace"), "new"), "set replaces the value");
    /* Reserved keys and bad strings change nothing. */
    CHECK_STATUS(g_ctx, f8_checkpoint_set_metadata(ck, "f8.mine", "x"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_set_metadata(ck, "format", "pt"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_set_metadata(ck, "bad\xFF", "x"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_set_metadata(ck, "x", "over\xC0\x80long"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_set_metadata(ck, NULL, "x"), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_set_metadata(ck, "x", NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8i_checkpoint_set_meta(ck, "f8.format_version", "2"), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(g_ctx, f8i_checkpoint_set_meta(ck, "f8.internal", "yes"));
    CHECK(!strcmp(f8_checkpoint_metadata(ck, "format"), "f8") && f8_checkpoint_metadata(ck, "f8.mine") == NULL &&
              f8_checkpoint_metadata(ck, "x") == NULL && f8_checkpoint_metadata(ck, "bad\xFF") == NULL,
          "refused sets changed the metadata");
    CHECK(f8i_checkpoint_meta_count(ck) == 9, "9 pairs, got %zu", f8i_checkpoint_meta_count(ck));

    unsigned char *b = NULL;
    size_t n = 0;
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(ck, &b, &n));
    if (b) {
        /* The writer's escapes, as JSON spells them. */
        const char *hdr = (const char *)b + 8;
        size_t hn = n - 8;
        const char *want[] = {"\"quote\\\"back\\\\slash\":\"v\\\"1\\\\\"", "\"ctl\\n\\t\\r\\b\\f\\u0001\\u001f\"",
                              "\"line1\\nline2\x7f\"", "\"unicode h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9D\x84\x9E\"",
                              "\"\":\"empty key\"", "\"f8.internal\":\"yes\""};
        for (int i = 0; i < 6; i++) {
            size_t wl = strlen(want[i]);
            int found = 0;
            for (size_t j = 0; j + wl <= hn && !found; j++) found = !memcmp(hdr + j, want[i], wl);
            CHECK(found, "header lacks %s", want[i]);
        }
        CHECK_OK(g_ctx, f8_checkpoint_load_memory(g_ctx, b, n, &back));
        free(b);
    }
    CHECK(back && same_checkpoint(ck, back) && same_checkpoint(back, ck), "metadata round trip");
    for (int i = 0; back && i < 5; i++) {
        const char *v = f8_checkpoint_metadata(back, keys[i]);
        CHECK(v && !strcmp(v, vals[i]), "key %d: value after the round trip", i);
    }
    f8_checkpoint_destroy(back);
    f8_checkpoint_destroy(ck);

    /* JSON escapes written by another tool decode to UTF-8. */
    back = load_json("{\"__metadata__\":{\"k\\u00e9\":\"\\u00e9\\u2713\\ud834\\udd1e\\\"\\\\\\/\\b\\f\\n\\r\\t\","
                     "\"ws\" : \t\r\n \"a\"  }  ,\"t\\u0041\":{\"shape\":[],\"data_offsets\":[0,1],\"dtype\":\"U8\"}}",
                     "z", 1);
    if (back) {
        const char *v = f8_checkpoint_metadata(back, "k\xC3\xA9");
        CHECK(v && !strcmp(v, "\xC3\xA9\xE2\x9C\x93\xF0\x9D\x84\x9E\"\\/\b\f\n\r\t"), "\\u escapes decode");
        CHECK(f8_checkpoint_metadata(back, "ws") && !strcmp(f8_checkpoint_metadata(back, "ws"), "a"), "whitespace");
        const f8i_ck_entry *e = f8i_checkpoint_find(back, "tA");
        CHECK(e && e->ndim == 0 && e->bytes == 1 && e->data[0] == 'z', "escaped tensor name, 0-D U8");
        CHECK(!f8i_checkpoint_is_f8(back), "no f8 metadata: a foreign file");
        f8_checkpoint_destroy(back);
    }
}

/* ---- malformed files ----------------------------------------------------------- */

static void test_truncations(void)
{
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    if (!ck) return;
    float v[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[3] = {1, 2, 3};
    int64_t s23[2] = {2, 3}, s3[1] = {3};
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "v", F8I_CK_F32, 2, s23, v, sizeof v));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "h", F8I_CK_BF16, 1, s3, h, sizeof h));
    CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, "note", "truncate me"));
    unsigned char *b = NULL;
    size_t n = 0;
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(ck, &b, &n));
    f8_checkpoint_destroy(ck);
    if (!b) return;
    /* Every proper prefix removes something (no trailing bytes are allowed),
     * so every one is refused; the whole file loads. */
    int refused = 0;
    for (size_t len = 0; len < n; len++) {
        f8_checkpoint *c = NULL;
        unsigned char *copy = (unsigned char *)xmalloc(len); /* exact size: ASan sees any overread */
        memcpy(copy, b, len);
        f8_status st = f8_checkpoint_load_memory(g_ctx, copy, len, &c);
        refused += st == F8_ERR_INVALID_ARGUMENT && c == NULL;
        if (st == F8_OK) f8_checkpoint_destroy(c);
        free(copy);
    }
    CHECK(refused == (int)n, "%d of %zu truncations refused", refused, n);
    expect_refused(b, n, F8_OK, "the whole file");
    /* One byte more: trailing data. */
    unsigned char *longer = (unsigned char *)xmalloc(n + 1);
    memcpy(longer, b, n);
    longer[n] = 0;
    expect_refused(longer, n + 1, F8_ERR_INVALID_ARGUMENT, "a trailing byte");
    free(longer);
    /* The same through files, at a few cut points (and the whole). */
    char path[128];
    path_in_dir(path, sizeof path, "trunc.safetensors");
    size_t cuts[] = {0, 4, 8, 9, 40, n - 25, n - 1, n};
    for (int i = 0; i < 8; i++) {
        write_file(path, b, cuts[i]);
        f8_checkpoint *c = NULL;
        f8_status st = f8_checkpoint_load(g_ctx, path, &c);
        f8_status want = cuts[i] == n ? F8_OK : F8_ERR_INVALID_ARGUMENT;
        CHECK(st == want && (c != NULL) == (st == F8_OK), "file cut at %zu: %s (%s)", cuts[i], f8_status_string(st),
              f8_ctx_last_error(g_ctx));
        f8_checkpoint_destroy(c);
    }
    free(b);
}

static void test_malformed(void)
{
    static const unsigned char d4[4] = {1, 2, 3, 4};
    static const unsigned char d8[8] = {0};
    /* A valid one first, so the refusals below are about their one change. */
    f8_checkpoint *ok = load_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d4, 4);
    CHECK(ok && f8i_checkpoint_count(ok) == 1, "baseline file loads");
    f8_checkpoint_destroy(ok);

    struct { const char *json; size_t data; const char *what; } bad[] = {
        {"", 0, "empty header"},
        {"   ", 0, "whitespace only"},
        {"[]", 0, "an array"},
        {"\"s\"", 0, "a string"},
        {"{", 0, "unclosed object"},
        {"{\"a\"}", 0, "key without value"},
        {"{\"a\":1}", 0, "tensor as a number"},
        {"{\"a\":null}", 0, "null"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, "trailing comma"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "garbage after the object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}{}", 4, "two objects"},
        {"{'a':{}}", 0, "single quotes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", 4, "trailing comma in an array"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "negative dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, "fractional dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 4, "exponent dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, "dim as a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, "shape not an array"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}", 4, "three offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4, "one offset"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4, "offset past 2^64"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "no data_offsets"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "no dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "no shape"},
        {"{\"a\":{}}", 0, "empty tensor object"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "field twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4, "unknown field"},
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "unknown dtype F16"},
        {"{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "lower-case dtype"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,4],\"data_offsets\":[0,4]}}", 4, "9 dims"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "size mismatch"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before begin"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 4, "out of range"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 8, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "same range twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}", 4, "empty tensor inside another"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}", 6, "gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing data"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate names"},
        {"{\"a\\u0062\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"ab\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate names via an escape"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", 0, "shape overflow"},
        {"{\"a\":{\"dtype\":\"I64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", 0, "bytes overflow"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}", 0,
         "overflow before a zero dim"},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\\u0000 in a name"},
        {"{\"\\ud834\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "lone high surrogate"},
        {"{\"\\udd1e\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "lone low surrogate"},
        {"{\"\\ud834\\u0041\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "bad surrogate pair"},
        {"{\"\\u12\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "short \\u"},
        {"{\"\\x41\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown escape"},
        {"{\"\xFF\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "byte 0xFF"},
        {"{\"\xC0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "overlong UTF-8"},
        {"{\"\xED\xA0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "UTF-8 surrogate"},
        {"{\"\xF4\x90\x80\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "past U+10FFFF"},
        {"{\"\xE2\x9C\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "cut UTF-8 sequence"},
        {"{\"a\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "raw newline in a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "unterminated root"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "metadata value a number"},
        {"{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "metadata value an object"},
        {"{\"__metadata__\":[]}", 0, "metadata an array"},
        {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "duplicate metadata key"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ twice"},
        {"{\"__metadata__\":{\"format\":\"f8\"}}", 0, "format f8 without a version"},
        {"{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"2\"}}", 0, "version 2"},
        {"{\"__metadata__\":{\"f8.format_version\":\"2\"}}", 0, "version 2 without format"},
        {"{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"0\"}}", 0, "version 0"},
        {"{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"01\"}}", 0, "version 01"},
        {"{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"1.0\"}}", 0, "version 1.0"},
        {"{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"\"}}", 0, "empty version"},
        {"{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"99999999999999999999\"}}", 0, "huge version"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_json_refused(bad[i].json, d8, bad[i].data, bad[i].what);

    /* A version-2 file says so. */
    expect_json_refused("{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"2\"}}", NULL, 0, "version 2");
    CHECK(strstr(f8_ctx_last_error(g_ctx), "newer") != NULL, "version 2 message: %s", f8_ctx_last_error(g_ctx));

    /* A NUL byte in the header (outside a string). */
    {
        const char json[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}";
        size_t n;
        unsigned char *b = file_of(json, NULL, 0, &n);
        b[8 + 5] = 0; /* the '{' of the tensor */
        expect_refused(b, n, F8_ERR_INVALID_ARGUMENT, "NUL byte");
        free(b);
    }

    /* Header lengths: past the file, past 100 MB, 2^63, 2^64 - 1. */
    {
        unsigned char b[16] = {0};
        memcpy(b + 8, "{}      ", 8);
        static const uint64_t lens[] = {9, 100000001ull, 1ull << 63, ~0ull, 16};
        for (int i = 0; i < 5; i++) {
            for (int k = 0; k < 8; k++) b[k] = (unsigned char)(lens[i] >> (8 * k));
            expect_refused(b, 16, F8_ERR_INVALID_ARGUMENT, "header length");
        }
        for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)8 >> (8 * k));
        expect_refused(b, 16, F8_OK, "\"{}\" padded with spaces");
        expect_refused(b, 7, F8_ERR_INVALID_ARGUMENT, "7 bytes");
        expect_refused(NULL, 0, F8_ERR_INVALID_ARGUMENT, "0 bytes");
    }
    /* A 100 MB header length in a file that is big enough is still refused. */
    {
        size_t big = 100000001ull + 8;
        unsigned char *b = (unsigned char *)calloc(big, 1);
        if (b) {
            uint64_t len = 100000001ull;
            for (int k = 0; k < 8; k++) b[k] = (unsigned char)(len >> (8 * k));
            expect_refused(b, big, F8_ERR_INVALID_ARGUMENT, "header over 100 MB");
            free(b);
        }
    }

    /* Foreign safetensors files load as plain tensors. */
    f8_checkpoint *ck = load_json("{\"__metadata__\":{\"format\":\"pt\"},"
                                  "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d4, 4);
    CHECK(ck && !f8i_checkpoint_is_f8(ck) && f8_checkpoint_has(ck, "w") &&
              !strcmp(f8_checkpoint_metadata(ck, "format"), "pt"), "a \"pt\" file loads, not as f8");
    if (ck) {
        /* Saved again it becomes an f8 file. */
        unsigned char *b = NULL;
        size_t n = 0;
        f8_checkpoint *again = NULL;
        CHECK_OK(g_ctx, f8i_checkpoint_serialize(ck, &b, &n));
        CHECK_OK(g_ctx, f8_checkpoint_load_memory(g_ctx, b, n, &again));
        CHECK(again && f8i_checkpoint_is_f8(again) && !strcmp(f8_checkpoint_metadata(again, "format"), "f8"),
              "a foreign checkpoint saves as f8");
        f8_checkpoint_destroy(again);
        free(b);
    }
    f8_checkpoint_destroy(ck);
    ck = load_json("{}", NULL, 0);
    CHECK(ck && f8i_checkpoint_count(ck) == 0 && !f8i_checkpoint_is_f8(ck), "\"{}\" loads (empty, foreign)");
    f8_checkpoint_destroy(ck);
    ck = load_json("{\"__metadata__\":{\"f8.format_version\":\"1\"}}", NULL, 0);
    CHECK(ck && f8i_checkpoint_is_f8(ck), "a version key alone makes an f8 file");
    f8_checkpoint_destroy(ck);

    /* Files that cannot be read. */
    char path[128];
    path_in_dir(path, sizeof path, "does-not-exist");
    f8_checkpoint *c = (f8_checkpoint *)&c;
    CHECK_STATUS(g_ctx, f8_checkpoint_load(g_ctx, path, &c), F8_ERR_IO);
    CHECK(c == NULL, "missing file: *checkpoint cleared");
    CHECK_STATUS(g_ctx, f8_checkpoint_load(g_ctx, g_dir, &c), F8_ERR_IO);
    char fifo[128];
    path_in_dir(fifo, sizeof fifo, "fifo");
    if (mkfifo(fifo, 0600) == 0) { /* refused, without blocking on the open */
        CHECK_STATUS(g_ctx, f8_checkpoint_load(g_ctx, fifo, &c), F8_ERR_IO);
        unlink(fifo);
    }
    CHECK_STATUS(g_ctx, f8_checkpoint_load(g_ctx, NULL, &c), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_load(g_ctx, path, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_checkpoint_load(NULL, path, &c), F8_ERR_INVALID_ARGUMENT);
}

/* ---- read_tensor, add_tensor ------------------------------------------------- */

static void test_read_rules(void)
{
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    if (!ck) return;
    float v6[6] = {1, 2, 3, 4, 5, 6}, v24[24];
    for (int i = 0; i < 24; i++) v24[i] = (float)i;
    int64_t s6[1] = {6}, s16[2] = {1, 6}, s23[2] = {2, 3}, s234[3] = {2, 3, 4};
    int32_t i6[6] = {0};
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "vec", F8I_CK_F32, 1, s6, v6, sizeof v6));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "row", F8I_CK_F32, 2, s16, v6, sizeof v6));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "mat", F8I_CK_F32, 2, s23, v6, sizeof v6));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "cube", F8I_CK_F32, 3, s234, v24, sizeof v24));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "one", F8I_CK_F32, 0, NULL, v6, 4));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "ints", F8I_CK_I32, 1, s6, i6, sizeof i6));

    struct { const char *name; f8_dtype dt; int64_t rows, cols; f8_status want; } cases[] = {
        {"vec", F8_DTYPE_FP32, 1, 6, F8_OK},
        {"row", F8_DTYPE_FP32, 1, 6, F8_OK},
        {"mat", F8_DTYPE_FP32, 2, 3, F8_OK},
        {"cube", F8_DTYPE_FP32, 6, 4, F8_OK},
        {"one", F8_DTYPE_FP32, 1, 1, F8_OK},
        {"vec", F8_DTYPE_FP32, 6, 1, F8_ERR_SHAPE},
        {"vec", F8_DTYPE_FP32, 2, 3, F8_ERR_SHAPE},
        {"row", F8_DTYPE_FP32, 6, 1, F8_ERR_SHAPE},
        {"mat", F8_DTYPE_FP32, 3, 2, F8_ERR_SHAPE},
        {"mat", F8_DTYPE_FP32, 1, 6, F8_ERR_SHAPE},
        {"mat", F8_DTYPE_FP32, 2, 4, F8_ERR_SHAPE},
        {"cube", F8_DTYPE_FP32, 2, 12, F8_ERR_SHAPE},
        {"one", F8_DTYPE_FP32, 1, 2, F8_ERR_SHAPE},
        {"mat", F8_DTYPE_BF16, 2, 3, F8_ERR_DTYPE},
        {"mat", F8_DTYPE_E4M3, 2, 3, F8_ERR_DTYPE},
        {"ints", F8_DTYPE_FP32, 1, 6, F8_ERR_DTYPE},
        {"absent", F8_DTYPE_FP32, 1, 6, F8_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = (size_t)(cases[i].rows * cases[i].cols);
        float sentinel[24], got[24];
        for (size_t k = 0; k < 24; k++) sentinel[k] = -100.0f - (float)k;
        f8_tensor t = btensor(F8_DTYPE_FP32, 1, 24, sentinel); /* room for any case */
        t.dtype = cases[i].dt;
        t.rows = cases[i].rows;
        t.cols = cases[i].cols;
        float sinv = 1.0f;
        t.scale_inv = &sinv; /* never touched */
        f8_status st = f8_checkpoint_read_tensor(ck, cases[i].name, &t);
        CHECK(st == cases[i].want, "read %s into %s [%lld, %lld]: %s, wanted %s (%s)", cases[i].name,
              f8_dtype_name(cases[i].dt), (long long)cases[i].rows, (long long)cases[i].cols, f8_status_string(st),
              f8_status_string(cases[i].want), f8_ctx_last_error(g_ctx));
        t.dtype = F8_DTYPE_FP32;
        t.rows = 1;
        t.cols = 24;
        download(got, &t);
        const float *want = cases[i].want != F8_OK ? sentinel : !strcmp(cases[i].name, "cube") ? v24 : v6;
        CHECK(!memcmp(got, want, (cases[i].want == F8_OK ? n : 24) * sizeof(float)) &&
                  !memcmp(got + n, sentinel + n, (24 - n) * sizeof(float)),
              "read %s: dst %s", cases[i].name, cases[i].want == F8_OK ? "wrong" : "changed by a refused read");
        CHECK(sinv == 1.0f, "scale_inv touched");
        bfree(&t);
    }
    /* Bad views and names. */
    f8_tensor t = btensor(F8_DTYPE_FP32, 1, 6, v6);
    f8_tensor neg = t;
    neg.rows = -1;
    CHECK_STATUS(g_ctx, f8_checkpoint_read_tensor(ck, "vec", &neg), F8_ERR_SHAPE);
    CHECK_STATUS(g_ctx, f8_checkpoint_read_tensor(ck, "vec", NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_read_tensor(ck, NULL, &t), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_checkpoint_read_tensor(NULL, "vec", &t), F8_ERR_INVALID_ARGUMENT);
    f8_tensor nodata = t;
    nodata.data = NULL;
    CHECK_STATUS(g_ctx, f8_checkpoint_read_tensor(ck, "vec", &nodata), F8_ERR_INVALID_ARGUMENT);
    f8_tensor baddt = t;
    baddt.dtype = (f8_dtype)9;
    CHECK_STATUS(g_ctx, f8_checkpoint_read_tensor(ck, "vec", &baddt), F8_ERR_DTYPE);

    /* add_tensor: a name once; refusals change nothing. */
    size_t count = f8i_checkpoint_count(ck);
    float other[6] = {9, 9, 9, 9, 9, 9};
    f8_tensor o = btensor(F8_DTYPE_FP32, 1, 6, other);
    CHECK_STATUS(g_ctx, f8_checkpoint_add_tensor(ck, "vec", &o), F8_ERR_INVALID_ARGUMENT);
    const f8i_ck_entry *e = f8i_checkpoint_find(ck, "vec");
    CHECK(e && e->ndim == 1 && !memcmp(e->data, v6, sizeof v6), "duplicate add changed the entry");
    CHECK_STATUS(g_ctx, f8_checkpoint_add_tensor(ck, "__metadata__", &o), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_add_tensor(ck, NULL, &o), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_add_tensor(ck, "bad\xC3", &o), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_add_tensor(ck, "neg", &neg), F8_ERR_SHAPE);
    CHECK_STATUS(g_ctx, f8_checkpoint_add_tensor(ck, "null", NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_checkpoint_add_tensor(NULL, "x", &o), F8_ERR_INVALID_ARGUMENT);
    int64_t s5[1] = {5};
    CHECK_STATUS(g_ctx, f8i_checkpoint_put(ck, "short", F8I_CK_F32, 1, s5, v6, sizeof v6), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8i_checkpoint_put(ck, "vec", F8I_CK_F32, 1, s6, v6, sizeof v6), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8i_checkpoint_put(ck, "dt", (f8i_ck_dtype)77, 1, s6, v6, sizeof v6), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8i_checkpoint_put(ck, "nd", F8I_CK_F32, 9, s6, v6, sizeof v6), F8_ERR_INVALID_ARGUMENT);
    CHECK(f8i_checkpoint_count(ck) == count && !f8_checkpoint_has(ck, "neg") && !f8_checkpoint_has(ck, "short"),
          "refused adds changed the checkpoint");
    /* Entry pointers survive growth of the table. */
    const f8i_ck_entry *before = f8i_checkpoint_find(ck, "mat");
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof name, "grow%03d", i);
        CHECK_OK(g_ctx, f8_checkpoint_add_tensor(ck, name, &o));
    }
    CHECK(f8i_checkpoint_find(ck, "mat") == before && before->shape[0] == 2, "entry pointer moved");
    for (size_t i = 1; i < f8i_checkpoint_count(ck); i++)
        CHECK(strcmp(f8i_checkpoint_entry(ck, i - 1)->name, f8i_checkpoint_entry(ck, i)->name) < 0, "entry order");
    CHECK(f8i_checkpoint_ctx(ck) == g_ctx, "ctx");
    /* While capturing a graph, host copies are refused and spoil the capture. */
    count = f8i_checkpoint_count(ck);
    CHECK_OK(g_ctx, f8_graph_begin(g_ctx));
    CHECK_STATUS(g_ctx, f8_checkpoint_add_tensor(ck, "captured", &o), F8_ERR_STATE);
    CHECK_STATUS(g_ctx, f8_checkpoint_read_tensor(ck, "vec", &t), F8_ERR_STATE);
    f8_graph *g = NULL;
    CHECK_STATUS(g_ctx, f8_graph_end(g_ctx, &g), F8_ERR_STATE);
    f8_graph_destroy(g);
    CHECK(f8i_checkpoint_count(ck) == count && !f8_checkpoint_has(ck, "captured"), "a refused add while capturing");
    bfree(&o);
    bfree(&t);
    f8_checkpoint_destroy(ck);
    f8_checkpoint_destroy(NULL);
    CHECK_STATUS(NULL, f8_checkpoint_create(NULL, &ck), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_create(g_ctx, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK(f8_checkpoint_has(NULL, "x") == 0 && f8_checkpoint_metadata(NULL, "x") == NULL, "NULL checkpoint queries");
}

/* ---- saving -------------------------------------------------------------------- */

static void test_save_failures(void)
{
    f8_checkpoint *a = NULL, *b = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &a));
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &b));
    if (!a || !b) return;
    float x = 1.0f, y = 2.0f;
    CHECK_OK(g_ctx, f8i_checkpoint_put(a, "x", F8I_CK_F32, 0, NULL, &x, 4));
    CHECK_OK(g_ctx, f8i_checkpoint_put(b, "y", F8I_CK_F32, 0, NULL, &y, 4));

    char path[128], tmp[192], dir[128];
    path_in_dir(path, sizeof path, "old.safetensors");
    CHECK_OK(g_ctx, f8_checkpoint_save(a, path));
    size_t n_old = 0, n_now = 0;
    unsigned char *old = read_file(path, &n_old);

    /* A directory where the temporary would go: creating it fails. */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(mkdir(tmp, 0755) == 0, "mkdir %s", tmp);
    CHECK_STATUS(g_ctx, f8_checkpoint_save(b, path), F8_ERR_IO);
    CHECK(strstr(f8_ctx_last_error(g_ctx), "Is a directory") != NULL, "errno text in: %s", f8_ctx_last_error(g_ctx));
    rmdir(tmp);
    unsigned char *now = read_file(path, &n_now);
    CHECK(old && now && n_old == n_now && !memcmp(old, now, n_old), "a failed save changed the old file");
    free(now);

    /* The target is a non-empty directory: the rename fails; the temporary goes. */
    path_in_dir(dir, sizeof dir, "adir");
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    char inner[192];
    snprintf(inner, sizeof inner, "%s/keep", dir);
    write_file(inner, "k", 1);
    CHECK_STATUS(g_ctx, f8_checkpoint_save(b, dir), F8_ERR_IO);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
    CHECK(access(tmp, F_OK) != 0, "the temporary %s was left behind", tmp);
    CHECK(access(inner, F_OK) == 0, "the directory's content changed");
    unlink(inner);
    rmdir(dir);

    /* A directory that does not exist. */
    path_in_dir(dir, sizeof dir, "no-such-dir/x.safetensors");
    CHECK_STATUS(g_ctx, f8_checkpoint_save(b, dir), F8_ERR_IO);
    CHECK_STATUS(g_ctx, f8_checkpoint_save(b, ""), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_checkpoint_save(b, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_checkpoint_save(NULL, path), F8_ERR_INVALID_ARGUMENT);

    /* A successful save replaces the old file. */
    CHECK_OK(g_ctx, f8_checkpoint_save(b, path));
    f8_checkpoint *back = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_load(g_ctx, path, &back));
    CHECK(back && f8_checkpoint_has(back, "y") && !f8_checkpoint_has(back, "x"), "the new save replaced the file");
    f8_checkpoint_destroy(back);
    free(old);
    f8_checkpoint_destroy(a);
    f8_checkpoint_destroy(b);
}

/* Saves remove "<path>.tmp.<pid>" of dead pids only, of the same path only. */
static void test_stale_temps(void)
{
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    if (!ck) return;
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid that is surely not running now */
    char path[128], names[6][192];
    path_in_dir(path, sizeof path, "stale.safetensors");
    snprintf(names[0], sizeof names[0], "%s.tmp.%ld", path, (long)child);        /* stale: removed */
    snprintf(names[1], sizeof names[1], "%s.tmp.%ld", path, (long)getppid());    /* a live process's: kept */
    snprintf(names[2], sizeof names[2], "%s.tmp.x%ld", path, (long)child);       /* not a pid: kept */
    snprintf(names[3], sizeof names[3], "%s/other.safetensors.tmp.%ld", g_dir, (long)child); /* other base: kept */
    snprintf(names[4], sizeof names[4], "%s.tmp.%ld.bak", path, (long)child);    /* more after the pid: kept */
    snprintf(names[5], sizeof names[5], "%s.tmp.0%ld", path, (long)child);       /* leading zero: kept */
    for (int i = 0; i < 6; i++) write_file(names[i], "partial", 7);
    CHECK_OK(g_ctx, f8_checkpoint_save(ck, path));
    CHECK(access(names[0], F_OK) != 0, "the stale temporary %s is still there", names[0]);
    for (int i = 1; i < 6; i++) CHECK(access(names[i], F_OK) == 0, "%s was removed", names[i]);
    for (int i = 1; i < 6; i++) unlink(names[i]);
    unlink(path);
    f8_checkpoint_destroy(ck);
}

/* ---- integrity ------------------------------------------------------------------ */

static void test_checksums(void)
{
    f8_checkpoint *ck = NULL, *back = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_create(g_ctx, &ck));
    if (!ck) return;
    float a[4] = {1, 2, 3, 4};
    uint16_t b[3] = {0x3F80, 0x4000, 0xC040};
    int64_t s4[1] = {4}, s3[1] = {3};
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "a", F8I_CK_F32, 1, s4, a, sizeof a));
    CHECK_OK(g_ctx, f8i_checkpoint_put(ck, "b", F8I_CK_BF16, 1, s3, b, sizeof b));
    unsigned char *bytes = NULL;
    size_t n = 0;
    CHECK_OK(g_ctx, f8i_checkpoint_serialize(ck, &bytes, &n));
    if (!bytes) return;
    /* the writer's checksums are XXH64 of the bytes; not kept as metadata */
    char want[17];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)f8i_xxh64(a, sizeof a));
    CHECK(strstr((const char *)bytes + 8, "\"f8.xxh64.a\":\"") && strstr((const char *)bytes + 8, want),
          "no checksum of \"a\" (%s) in the header", want);
    CHECK(f8i_xxh64("", 0) == 0xEF46DB3751D8E999ull && f8i_xxh64("abc", 3) == 0x44BC2CF5AD770999ull,
          "XXH64 reference values");
    CHECK_OK(g_ctx, f8_checkpoint_load_memory(g_ctx, bytes, n, &back));
    CHECK(back && !f8_checkpoint_metadata(back, "f8.xxh64.a") && f8i_checkpoint_meta_count(back) == 2,
          "checksums kept as metadata");
    f8_checkpoint_destroy(back);
    back = NULL;
    /* every single-bit flip in the data region is refused, naming the tensor */
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | bytes[i];
    int refused = 0, named = 0, flips = 0;
    for (size_t at = 8 + (size_t)hl; at < n; at++)
        for (int bit = 0; bit < 8; bit++, flips++) {
            bytes[at] ^= (unsigned char)(1u << bit);
            f8_status st = f8_checkpoint_load_memory(g_ctx, bytes, n, &back);
            refused += st == F8_ERR_INVALID_ARGUMENT && back == NULL;
            named += strstr(f8_ctx_last_error(g_ctx), at < 8 + hl + 16 ? "tensor \"a\": checksum mismatch"
                                                                       : "tensor \"b\": checksum mismatch") != NULL;
            f8_checkpoint_destroy(back);
            back = NULL;
            bytes[at] ^= (unsigned char)(1u << bit);
        }
    CHECK(refused == flips && named == flips, "%d of %d bit flips refused, %d named the tensor", refused, flips, named);
    /* through a file too (the pread path) */
    char path[128];
    path_in_dir(path, sizeof path, "flipped.safetensors");
    bytes[n - 1] ^= 1;
    write_file(path, bytes, n);
    bytes[n - 1] ^= 1;
    CHECK_STATUS(g_ctx, f8_checkpoint_load(g_ctx, path, &back), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(g_ctx), "\"b\": checksum mismatch"), "file load: %s", f8_ctx_last_error(g_ctx));
    unlink(path);
    free(bytes);
    f8_checkpoint_destroy(ck);

    /* hand-written files: no checksums (an older f8 file) loads; a right one
     * loads; a wrong, malformed or orphaned one is refused */
    const char *head = "{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"1\"%s},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    char extra[160], json[512];
    struct {
        const char *extra, *error;
    } cases[] = {
        {"", NULL},
        {",\"f8.xxh64.a\":\"%s\"", NULL},
        {",\"f8.xxh64.a\":\"0000000000000000\"", "checksum mismatch"},
        {",\"f8.xxh64.a\":\"%.15s\"", "not a checksum"},
        {",\"f8.xxh64.a\":\"%sX\"", "not a checksum"},
        {",\"f8.xxh64.a\":\"%s\",\"f8.xxh64.gone\":\"%s\"", "does not hold"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(extra, sizeof extra, cases[i].extra, want, want);
        snprintf(json, sizeof json, head, extra);
        size_t fn = 0;
        unsigned char *file = file_of(json, a, sizeof a, &fn);
        f8_status st = f8_checkpoint_load_memory(g_ctx, file, fn, &back);
        if (cases[i].error)
            CHECK(st == F8_ERR_INVALID_ARGUMENT && !back && strstr(f8_ctx_last_error(g_ctx), cases[i].error),
                  "case %zu: %s: %s", i, f8_status_string(st), f8_ctx_last_error(g_ctx));
        else
            CHECK(st == F8_OK && back && f8_checkpoint_has(back, "a"), "case %zu: %s", i, f8_ctx_last_error(g_ctx));
        f8_checkpoint_destroy(back);
        back = NULL;
        free(file);
    }
}

/* f8i_checkpoint_check_finite's rules on every float dtype's codes. */
/* Remove the files the test made (names it knows). */
static void cleanup_dir(void)
{
    const char *names[] = {"roundtrip.safetensors", "empty.safetensors", "layout.safetensors", "trunc.safetensors",
                           "old.safetensors"};
    char path[128];
    for (int i = 0; i < 5; i++) {
        path_in_dir(path, sizeof path, names[i]);
        unlink(path);
    }
    if (rmdir(g_dir) != 0) fprintf(stderr, "note: %s not removed\n", g_dir);
}

int main(void)
{
    char why[256] = "";
    g_ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!g_ctx) {
        fprintf(stderr, "CPU ctx: %s\n", why);
        return 1;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/f8_test_checkpoint.XXXXXX");
    if (!mkdtemp(g_dir)) die("mkdtemp", NULL);
    test_roundtrip();
    test_layout();
    test_metadata();
    test_truncations();
    test_malformed();
    test_read_rules();
    test_save_failures();
    test_stale_temps();
    test_checksums();
    cleanup_dir();
    f8_ctx_destroy(g_ctx);
    return test_finish("test_checkpoint");
}
