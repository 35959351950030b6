/*
 * fuzz_checkpoint.c — the libFuzzer target for f8_checkpoint_load_memory.
 *
 * Any input either is refused (F8_ERR_INVALID_ARGUMENT, no checkpoint) or
 * loads; a loaded checkpoint must then behave: every tensor f8 can view reads
 * back through backend memory bit for bit, a wrong shape is refused and
 * leaves dst unchanged, metadata lookups find every pair, and the checkpoint
 * written out again loads again to the same tensors and writes the same bytes
 * (the writer is canonical). A broken property aborts, which the fuzzer
 * records as a crash; ASan/UBSan/LSan catch the rest.
 *
 * Also built by the normal toolchain: fuzz/replay_main.c and
 * tests/test_fuzz_replay.c run it over fuzz/corpus.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"

#include "fuzz.h"

/* One CPU ctx for the whole run (a fuzz target may keep state; the library
 * may not). */
static f8_ctx *fuzz_ctx_slot;

static f8_ctx *fuzz_ctx(void)
{
    if (!fuzz_ctx_slot) {
        f8_ctx_config cfg = f8_ctx_config_default();
        cfg.backend = F8_BACKEND_CPU;
        if (f8_ctx_create(&cfg, &fuzz_ctx_slot, NULL, 0) != F8_OK) abort();
    }
    return fuzz_ctx_slot;
}

void f8_fuzz_teardown(void)
{
    f8_ctx_destroy(fuzz_ctx_slot);
    fuzz_ctx_slot = NULL;
}

static void require(int cond)
{
    if (!cond) abort();
}

/* The [rows, cols] view read_tensor accepts for an entry. */
static void natural_view(const f8i_ck_entry *e, int64_t *rows, int64_t *cols)
{
    *rows = 1;
    *cols = e->ndim ? e->shape[e->ndim - 1] : 1;
    for (int d = 0; d + 1 < e->ndim; d++) *rows *= e->shape[d];
}

static void exercise_tensor(f8_ctx *ctx, const f8_checkpoint *ck, const f8i_ck_entry *e)
{
    f8_dtype dt;
    require(f8_checkpoint_has(ck, e->name) && f8i_checkpoint_find(ck, e->name) == e);
    if (!f8i_ck_dtype_to_f8(e->dtype, &dt)) {
        f8_tensor t = f8_tensor_make(NULL, F8_DTYPE_FP32, 0, 0);
        require(f8_checkpoint_read_tensor(ck, e->name, &t) == F8_ERR_DTYPE);
        return;
    }
    int64_t rows, cols;
    natural_view(e, &rows, &cols);
    require((size_t)(rows * cols) * f8_dtype_size(dt) == e->bytes);
    void *buf = NULL;
    unsigned char *host = (unsigned char *)malloc(e->bytes + 1);
    require(host && f8_ctx_alloc(ctx, e->bytes + 1, &buf) == F8_OK);
    float sinv = 1.0f;
    f8_tensor t = f8_tensor_make(buf, dt, rows, cols);
    t.scale_inv = &sinv;
    require(f8_checkpoint_read_tensor(ck, e->name, &t) == F8_OK);
    require(f8_ctx_download(ctx, host, buf, e->bytes) == F8_OK);
    require(e->bytes == 0 || !memcmp(host, e->data, e->bytes));
    /* A view one row longer is refused and writes nothing. */
    memset(host, 0xA5, e->bytes + 1);
    require(f8_ctx_upload(ctx, buf, host, e->bytes + 1) == F8_OK);
    t.rows = rows + 1;
    require(f8_checkpoint_read_tensor(ck, e->name, &t) == F8_ERR_SHAPE);
    unsigned char after[64];
    size_t n = e->bytes + 1 < sizeof after ? e->bytes + 1 : sizeof after;
    require(f8_ctx_download(ctx, after, buf, n) == F8_OK);
    for (size_t i = 0; i < n; i++) require(after[i] == 0xA5);
    require(sinv == 1.0f);
    f8_ctx_free(ctx, buf);
    free(host);
}

/* Every tensor of a in b, identical. */
static int same_tensors(const f8_checkpoint *a, const f8_checkpoint *b)
{
    if (f8i_checkpoint_count(a) != f8i_checkpoint_count(b)) return 0;
    for (size_t i = 0; i < f8i_checkpoint_count(a); i++) {
        const f8i_ck_entry *x = f8i_checkpoint_entry(a, i), *y = f8i_checkpoint_find(b, x->name);
        if (!y || x->dtype != y->dtype || x->ndim != y->ndim || x->bytes != y->bytes) return 0;
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d]) return 0;
        if (x->bytes && memcmp(x->data, y->data, x->bytes)) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    f8_ctx *ctx = fuzz_ctx();
    f8_checkpoint *ck = (f8_checkpoint *)&ck;
    f8_status st = f8_checkpoint_load_memory(ctx, data, size, &ck);
    if (st != F8_OK) {
        require(st == F8_ERR_INVALID_ARGUMENT && ck == NULL && f8_ctx_last_error(ctx)[0]);
        return 0;
    }
    for (size_t i = 0; i < f8i_checkpoint_count(ck); i++) exercise_tensor(ctx, ck, f8i_checkpoint_entry(ck, i));
    const char *prev = NULL;
    for (size_t i = 0; i < f8i_checkpoint_meta_count(ck); i++) {
        const char *k, *v;
        f8i_checkpoint_meta_at(ck, i, &k, &v);
        require(k && v && f8_checkpoint_metadata(ck, k) == v && (!prev || strcmp(prev, k) < 0));
        prev = k;
    }

    /* Written out, it loads to the same tensors, as an f8 file, and writes
     * the same bytes again. */
    unsigned char *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    f8_checkpoint *again = NULL;
    require(f8i_checkpoint_serialize(ck, &b1, &n1) == F8_OK);
    require(f8_checkpoint_load_memory(ctx, b1, n1, &again) == F8_OK);
    require(same_tensors(ck, again) && f8i_checkpoint_is_f8(again));
    for (size_t i = 0; i < f8i_checkpoint_meta_count(ck); i++) {
        const char *k, *v, *w;
        f8i_checkpoint_meta_at(ck, i, &k, &v);
        w = f8_checkpoint_metadata(again, k);
        require(w && (!strcmp(v, w) || !strcmp(k, "format") || !strcmp(k, "f8.format_version")));
    }
    require(f8i_checkpoint_serialize(again, &b2, &n2) == F8_OK);
    require(n1 == n2 && !memcmp(b1, b2, n1));
    free(b1);
    free(b2);
    f8_checkpoint_destroy(again);
    f8_checkpoint_destroy(ck);
    return 0;
}
