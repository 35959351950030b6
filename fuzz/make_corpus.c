/*
 * make_corpus.c — writes the seed corpus of the checkpoint fuzz target into
 * a directory (tools/fuzz.sh corpus DIR; fuzz/corpus holds its output):
 * valid f8 files made through the library (every dtype, 0-D to 4-D shapes,
 * empty tensors, escaped and Unicode metadata, per-tensor checksums), an f8
 * file from before checksums and one with a wrong checksum, plain safetensors as other
 * tools write them (spaces after ':' and ',', no f8 metadata), and a few
 * invalid files one step from valid ones. Small on purpose: libFuzzer
 * mutates better from small seeds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"

static const char *g_dir;

static void put_file(const char *name, const void *b, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
        fprintf(stderr, "make_corpus: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void put_checkpoint(const char *name, const f8_checkpoint *ck)
{
    unsigned char *b = NULL;
    size_t n = 0;
    if (f8i_checkpoint_serialize(ck, &b, &n) != F8_OK) exit(1);
    put_file(name, b, n);
    free(b);
}

/* 8-byte length + JSON + data. */
static void put_json(const char *name, const char *json, const void *data, size_t data_len)
{
    size_t n = strlen(json);
    unsigned char *b = (unsigned char *)malloc(8 + n + data_len);
    if (!b) exit(1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((unsigned long long)n >> (8 * i));
    memcpy(b + 8, json, n);
    if (data_len) memcpy(b + 8 + n, data, data_len);
    put_file(name, b, 8 + n + data_len);
    free(b);
}

static void check(f8_status st, f8_ctx *ctx)
{
    if (st != F8_OK) {
        fprintf(stderr, "make_corpus: %s\n", f8_ctx_last_error(ctx));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    f8_ctx_config cfg = f8_ctx_config_default();
    f8_ctx *ctx = NULL;
    if (f8_ctx_create(&cfg, &ctx, NULL, 0) != F8_OK) return 1;
    f8_checkpoint *ck = NULL;
    unsigned char bytes[96];
    for (int i = 0; i < 96; i++) bytes[i] = (unsigned char)(i * 37 + 11);

    check(f8_checkpoint_create(ctx, &ck), ctx);
    put_checkpoint("valid-empty", ck);
    f8_checkpoint_destroy(ck);

    /* Every dtype and rank, an empty tensor, metadata with escapes. */
    check(f8_checkpoint_create(ctx, &ck), ctx);
    int64_t s0[1] = {0}, s1[1] = {3}, s2[2] = {2, 3}, s3[3] = {2, 1, 3}, s4[4] = {1, 2, 1, 2};
    check(f8i_checkpoint_put(ck, "blocks.0.fc1_weight", F8I_CK_F32, 2, s2, bytes, 24), ctx);
    check(f8i_checkpoint_put(ck, "blocks.0.fc1_bias", F8I_CK_BF16, 1, s1, bytes, 6), ctx);
    check(f8i_checkpoint_put(ck, "blocks.0.weight", F8I_CK_F8_E4M3, 2, s2, bytes, 6), ctx);
    check(f8i_checkpoint_put(ck, "blocks.0.weight_scale_inv", F8I_CK_F32, 0, NULL, bytes, 4), ctx);
    check(f8i_checkpoint_put(ck, "g", F8I_CK_F8_E5M2, 3, s3, bytes, 6), ctx);
    check(f8i_checkpoint_put(ck, "i", F8I_CK_I32, 4, s4, bytes, 16), ctx);
    check(f8i_checkpoint_put(ck, "l", F8I_CK_I64, 1, s1, bytes, 24), ctx);
    check(f8i_checkpoint_put(ck, "u", F8I_CK_U8, 1, s1, bytes, 3), ctx);
    check(f8i_checkpoint_put(ck, "zero", F8I_CK_F32, 1, s0, NULL, 0), ctx);
    check(f8_checkpoint_set_metadata(ck, "note", "tab\there \"quoted\" \\ \xC3\xA9 \xF0\x9D\x84\x9E \x01"), ctx);
    check(f8i_checkpoint_set_meta(ck, "blocks.0.fp8.recipe", "{\"format\":\"HYBRID\",\"margin\":0}"), ctx);
    put_checkpoint("valid-mixed", ck);
    f8_checkpoint_destroy(ck);

    /* One module's worth: weight, bias and its scaling state. */
    check(f8_checkpoint_create(ctx, &ck), ctx);
    int64_t h[2] = {4, 3}, n3[1] = {3};
    check(f8i_checkpoint_put(ck, "l.weight", F8I_CK_F32, 2, s2, bytes, 24), ctx);
    check(f8i_checkpoint_put(ck, "l.bias", F8I_CK_F32, 1, s1, bytes, 12), ctx);
    check(f8i_checkpoint_put(ck, "l.fp8.fwd.amax_history", F8I_CK_F32, 2, h, bytes, 48), ctx);
    check(f8i_checkpoint_put(ck, "l.fp8.fwd.scale", F8I_CK_F32, 1, n3, bytes, 12), ctx);
    check(f8i_checkpoint_put(ck, "l.fp8.fwd.scale_inv", F8I_CK_F32, 1, n3, bytes, 12), ctx);
    put_checkpoint("valid-module", ck);
    f8_checkpoint_destroy(ck);

    /* An f8 file from before the per-tensor checksums (loads unchecked), and
     * one whose checksum does not match its bytes. */
    put_json("legacy-f8", "{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"1\"},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", bytes, 8);
    put_json("bad-checksum", "{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"1\","
             "\"f8.xxh64.a\":\"0123456789abcdef\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}", bytes, 8);

    /* As other tools write them. */
    put_json("foreign-spaces", "{\"__metadata__\": {\"format\": \"pt\"}, \"a\": {\"dtype\": \"F32\", \"shape\": [2], "
             "\"data_offsets\": [0, 8]}, \"b\": {\"dtype\": \"BF16\", \"shape\": [1, 2], \"data_offsets\": [8, 12]}}",
             bytes, 12);
    put_json("foreign-plain", "{\"w\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]}}   ", bytes, 4);
    put_json("foreign-escapes", "{\"\\u00e9\\ud834\\udd1e\\n\":{\"data_offsets\":[0,2],\"shape\":[],\"dtype\":\"BF16\"},"
             "\"__metadata__\":{\"k\\\"\":\"\\/\\b\\f\\r\\t\\\\\"}}", bytes, 2);
    put_json("foreign-empty", "{}", NULL, 0);

    /* One step from valid. */
    put_json("bad-overlap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", bytes, 6);
    put_json("bad-gap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", bytes, 5);
    put_json("bad-dtype", "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", bytes, 4);
    put_json("bad-size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", bytes, 8);
    put_json("bad-version", "{\"__metadata__\":{\"format\":\"f8\",\"f8.format_version\":\"2\"}}", NULL, 0);
    put_json("bad-duplicate", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", bytes, 2);
    put_json("bad-utf8", "{\"\xC0\xAF\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", bytes, 1);
    put_json("bad-number", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e3],\"data_offsets\":[0,1]}}", bytes, 1);
    {
        unsigned char huge[16] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, '{', '}'};
        put_file("bad-header-length", huge, sizeof huge);
    }
    f8_ctx_destroy(ctx);
    return 0;
}
