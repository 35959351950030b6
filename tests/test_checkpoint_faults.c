/*
 * test_checkpoint_faults.c — f8_checkpoint's files gone wrong, on the CPU
 * backend, against expectations written here by hand:
 *  - a battery of malformed files (every truncation of a valid file, bad
 *    JSON, bad numbers, overlaps, gaps, wrong sizes, unknown dtypes,
 *    duplicates, huge header lengths, version "2"), all refused with
 *    F8_ERR_INVALID_ARGUMENT and no checkpoint; plain safetensors files of
 *    other tools load;
 *  - saving over an old file: a failed save gives F8_ERR_IO, leaves the old
 *    file as it was and no temporary behind; a save removes the temporaries
 *    of killed saves (dead pids) and nothing else;
 *  - integrity: every tensor's XXH64 in the metadata; a flipped bit refused
 *    naming the tensor (memory and file loads), bad or orphaned checksums
 *    refused, files without checksums loading as before.
 * Round trips, layout, metadata and read_tensor are in test_checkpoint.c; the
 * shared helpers in checkpoint_fixture.h.
 */
#include <sys/wait.h>
#include <sys/stat.h>

#include "checkpoint_fixture.h"

/* ---- helpers ------------------------------------------------------------ */

static void write_file(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) die("write_file", NULL);
    fclose(f);
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

int main(void)
{
    static void (*const tests[])(void) = {test_truncations, test_malformed, test_save_failures, test_stale_temps,
                                          test_checksums};
    return checkpoint_test_run("test_checkpoint_faults", tests, (int)(sizeof tests / sizeof *tests));
}
