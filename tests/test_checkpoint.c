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
 *  - read_tensor's dtype/shape rules; a refused read leaves dst unchanged;
 *    both copies are refused while a graph is captured.
 * Malformed files, failed saves and checksums are in test_checkpoint_faults.c,
 * value checks on restore in test_checkpoint_values.c; the shared helpers in
 * checkpoint_fixture.h.
 */
#include "checkpoint_fixture.h"

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

int main(void)
{
    static void (*const tests[])(void) = {test_roundtrip, test_layout, test_metadata, test_read_rules};
    return checkpoint_test_run("test_checkpoint", tests, (int)(sizeof tests / sizeof *tests));
}
