/*
 * fuzz_onnx.c — the libFuzzer target for the ONNX exporter's inputs: the
 * names and shape strings a caller hands to f8_onnx_add_input/add_output and
 * the builder calls on them (add_add, add_slice, add_module).
 *
 * The input is split at '\n' into fields: [0] an input name, [1] its shape,
 * [2] an output name, [3] the output's shape ("-" = NULL), [4] a slice range
 * "begin:end". Every call must either succeed or fail with a status and a
 * message and leave the serialized size as it was; whenever the graph is
 * complete, serializing must write exactly the measured number of bytes, the
 * bytes must walk as well-formed protobuf (every tag's wire type known,
 * every length inside its message) and saving to memory twice must give the
 * same bytes. A broken property aborts.
 *
 * Also built by the normal toolchain: tests/test_onnx.c replays
 * fuzz/corpus_onnx through it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "f8.h"

#include "fuzz.h"

static f8_ctx *onnx_ctx_slot;
static f8_module *onnx_lin_slot;

void f8_fuzz_teardown(void)
{
    f8_module_destroy(onnx_lin_slot);
    f8_ctx_destroy(onnx_ctx_slot);
    onnx_lin_slot = NULL;
    onnx_ctx_slot = NULL;
}

static void need(int cond)
{
    if (!cond) abort();
}

static uint64_t pb_varint(const uint8_t *b, size_t n, size_t *i, int *ok)
{
    uint64_t v = 0;
    for (int s = 0; s < 70; s += 7) {
        if (*i >= n) break;
        const uint8_t c = b[(*i)++];
        v |= (uint64_t)(c & 0x7F) << s;
        if (!(c & 0x80)) return v;
    }
    *ok = 0;
    return 0;
}

/* Well-formed protobuf: descend into length-delimited fields that parse as
 * messages (strings and raw data may not: then only their length counts). */
static int pb_walk(const uint8_t *b, size_t n, int depth)
{
    size_t i = 0;
    int ok = 1;
    while (i < n && ok) {
        const uint64_t key = pb_varint(b, n, &i, &ok), wire = key & 7;
        if (!ok || (key >> 3) == 0) return 0;
        if (wire == 0) pb_varint(b, n, &i, &ok);
        else if (wire == 5) i += 4;
        else if (wire == 2) {
            const uint64_t len = pb_varint(b, n, &i, &ok);
            if (!ok || len > n - i) return 0;
            if (depth < 6) (void)pb_walk(b + i, (size_t)len, depth + 1);
            i += (size_t)len;
        } else {
            return 0;
        }
    }
    return ok && i == n;
}

static size_t measured(f8_onnx *g)
{
    size_t s = 0;
    return f8_onnx_serialize(g, NULL, 0, &s) == F8_OK ? s : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!onnx_ctx_slot) {
        f8_ctx_config cfg = f8_ctx_config_default();
        need(f8_ctx_create(&cfg, &onnx_ctx_slot, NULL, 0) == F8_OK);
        f8_linear_config lc = f8_linear_config_default(8, 4);
        lc.max_tokens = 2;
        need(f8_linear_create(onnx_ctx_slot, &lc, &onnx_lin_slot) == F8_OK);
    }
    f8_ctx *ctx = onnx_ctx_slot;
    char *f[5] = {NULL, NULL, NULL, NULL, NULL};
    char *buf = (char *)malloc(size + 1);
    need(buf != NULL);
    memcpy(buf, data, size);
    buf[size] = '\0';
    f[0] = buf;
    for (int k = 1; k < 5 && f[k - 1]; k++) {
        char *nl = strchr(f[k - 1], '\n');
        if (nl) *nl = '\0', f[k] = nl + 1;
    }
    f8_onnx_config cfg = f8_onnx_config_default();
    f8_onnx *g = NULL;
    need(f8_onnx_create(ctx, &cfg, &g) == F8_OK);
    const f8_onnx_type type = size && (data[0] & 1) ? F8_ONNX_INT64 : F8_ONNX_FLOAT;
    f8_status st = f8_onnx_add_input(g, f[0], type, f[1]);
    need(st == F8_OK || (st == F8_ERR_INVALID_ARGUMENT && f8_ctx_last_error(ctx)[0]));
    const char *y = f[2] ? f[2] : "y";
    /* calls on the input: each succeeds or changes nothing */
    size_t before = measured(g);
    if (f8_onnx_add_add(g, f[0], f[0], y) != F8_OK) need(measured(g) == before);
    before = measured(g);
    long long b0 = 0, e0 = 0;
    if (f[4] && sscanf(f[4], "%lld:%lld", &b0, &e0) == 2 && f8_onnx_add_slice(g, f[0], b0, e0, "s") != F8_OK)
        need(measured(g) == before);
    before = measured(g);
    if (f8_onnx_add_module(g, onnx_lin_slot, f[0], "m") != F8_OK) need(measured(g) == before);
    before = measured(g);
    const char *shape = f[3] && strcmp(f[3], "-") ? f[3] : NULL;
    if (f8_onnx_add_output(g, y, shape) != F8_OK && f8_onnx_add_output(g, "m", shape) != F8_OK)
        need(measured(g) == before);
    size_t n = 0;
    if (f8_onnx_serialize(g, NULL, 0, &n) == F8_OK) {
        uint8_t *a = (uint8_t *)malloc(n + 1), *b = (uint8_t *)malloc(n + 1);
        need(a && b);
        size_t n2 = 0;
        need(f8_onnx_serialize(g, a, n, &n2) == F8_OK && n2 == n);
        need(f8_onnx_serialize(g, b, n, &n2) == F8_OK && memcmp(a, b, n) == 0);
        need(pb_walk(a, n, 0));
        free(a);
        free(b);
    }
    f8_onnx_destroy(g);
    free(buf);
    return 0;
}
