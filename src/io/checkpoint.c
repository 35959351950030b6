/*
 * checkpoint.c — f8_checkpoint: named host tensors and string metadata
 * (checkpoint_file.c loads and saves it as one safetensors file;
 * checkpoint_integrity.c holds its checksums and value checks).
 *
 * Design note. Every call either completes or changes nothing: a table grows
 * (reserve) before an entry is made, and an entry is filled before it is
 * linked in, so the one step that can fail comes before any visible change.
 * Entries live in their own allocations (the name inline, the bytes in a
 * malloc'd buffer), so pointers handed to module code stay valid as the
 * table grows; the table is kept sorted by name for binary search and for
 * the writer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint_table.h"

int f8i_ck_dtype_from_f8(f8_dtype dtype, f8i_ck_dtype *out)
{
    switch (dtype) {
    case F8_DTYPE_FP32: *out = F8I_CK_F32; return 1;
    case F8_DTYPE_BF16: *out = F8I_CK_BF16; return 1;
    case F8_DTYPE_E4M3: *out = F8I_CK_F8_E4M3; return 1;
    case F8_DTYPE_E5M2: *out = F8I_CK_F8_E5M2; return 1;
    }
    return 0;
}

int f8i_ck_dtype_to_f8(f8i_ck_dtype dtype, f8_dtype *out)
{
    switch (dtype) {
    case F8I_CK_F32: *out = F8_DTYPE_FP32; return 1;
    case F8I_CK_BF16: *out = F8_DTYPE_BF16; return 1;
    case F8I_CK_F8_E4M3: *out = F8_DTYPE_E4M3; return 1;
    case F8I_CK_F8_E5M2: *out = F8_DTYPE_E5M2; return 1;
    default: return 0;
    }
}

/* ---- the tables -------------------------------------------------------- */

/* Index of the first entry whose name is >= name; *found when equal. */
size_t f8i_ck_entry_lower_bound(const f8_checkpoint *ck, const char *name, int *found)
{
    size_t lo = 0, hi = ck->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ck->entries[mid]->pub.name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < ck->n && !strcmp(ck->entries[lo]->pub.name, name);
    return lo;
}

static size_t meta_lower_bound(const f8_checkpoint *ck, const char *key, int *found)
{
    size_t lo = 0, hi = ck->n_meta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ck->meta[mid].key, key) < 0) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < ck->n_meta && !strcmp(ck->meta[lo].key, key);
    return lo;
}


static void entry_free(entry *e)
{
    if (e) free(e->data);
    free(e);
}

/* A new unlinked entry with uninitialised bytes, or NULL (out of memory). */
entry *f8i_ck_entry_new(const char *name, f8i_ck_dtype dtype, int ndim, const int64_t *shape, size_t bytes)
{
    size_t len = strlen(name);
    entry *e = (entry *)malloc(sizeof *e + len + 1);
    if (!e) return NULL;
    e->data = (unsigned char *)malloc(bytes ? bytes : 1);
    if (!e->data) {
        free(e);
        return NULL;
    }
    memcpy(e->name, name, len + 1);
    memset(&e->pub, 0, sizeof e->pub);
    e->pub.name = e->name;
    e->pub.dtype = dtype;
    e->pub.ndim = ndim;
    for (int d = 0; d < ndim; d++) e->pub.shape[d] = shape[d];
    e->pub.data = e->data;
    e->pub.bytes = bytes;
    return e;
}

/* Bytes of a shape's elements; 0 with *ok = 0 if it is not a valid shape. */
static size_t shape_bytes(f8i_ck_dtype dtype, int ndim, const int64_t *shape, int *ok)
{
    uint64_t count = 1, size = f8i_ck_dtype_size(dtype);
    *ok = size && ndim >= 0 && ndim <= F8I_CK_MAX_DIMS && (ndim == 0 || shape);
    for (int d = 0; *ok && d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] && count > (uint64_t)INT64_MAX / (uint64_t)shape[d])) *ok = 0;
        else count *= (uint64_t)shape[d];
    }
    if (*ok && (count > (uint64_t)INT64_MAX / size || count * size > SIZE_MAX)) *ok = 0;
    return *ok ? (size_t)(count * size) : 0;
}

/* Checks of put; on success the table has room for one more entry. */
static f8_status put_check(f8_checkpoint *ck, const char *fn, const char *name, f8i_ck_dtype dtype, int ndim,
                           const int64_t *shape, size_t bytes)
{
    f8_ctx *ctx = ck->ctx;
    int ok, found;
    if (!name) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: name is NULL", fn);
    if (!f8_utf8_valid((const unsigned char *)name, strlen(name)))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: name is not valid UTF-8", fn);
    if (!strcmp(name, "__metadata__"))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"__metadata__\" is not a tensor name", fn);
    size_t want = shape_bytes(dtype, ndim, shape, &ok);
    if (!ok)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"%.64s\": bad dtype (%d), ndim (%d) or shape", fn, name,
                         (int)dtype, ndim);
    if (want != bytes)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"%.64s\": %zu bytes given, the shape needs %zu", fn, name,
                         bytes, want);
    f8i_ck_entry_lower_bound(ck, name, &found);
    if (found) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: a tensor named \"%.64s\" is already stored", fn, name);
    if (!f8i_grow((void **)&ck->entries, &ck->cap, ck->n, sizeof *ck->entries))
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    return F8_OK;
}

/* Link a filled entry in (room was reserved by put_check). */
static void put_link(f8_checkpoint *ck, entry *e)
{
    int found;
    size_t at = f8i_ck_entry_lower_bound(ck, e->pub.name, &found);
    memmove(ck->entries + at + 1, ck->entries + at, (ck->n - at) * sizeof *ck->entries);
    ck->entries[at] = e;
    ck->n++;
}

f8_status f8i_checkpoint_put(f8_checkpoint *ck, const char *name, f8i_ck_dtype dtype, int ndim, const int64_t *shape,
                             const void *host_data, size_t bytes)
{
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(put_check(ck, "f8i_checkpoint_put", name, dtype, ndim, shape, bytes));
    if (bytes && !host_data) return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "f8i_checkpoint_put: host_data is NULL");
    entry *e = f8i_ck_entry_new(name, dtype, ndim, shape, bytes);
    if (!e) return f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "f8i_checkpoint_put: out of host memory");
    if (bytes) memcpy(e->data, host_data, bytes);
    put_link(ck, e);
    return F8_OK;
}

const f8i_ck_entry *f8i_checkpoint_find(const f8_checkpoint *ck, const char *name)
{
    int found;
    if (!ck || !name) return NULL;
    size_t at = f8i_ck_entry_lower_bound(ck, name, &found);
    return found ? &ck->entries[at]->pub : NULL;
}

size_t f8i_checkpoint_count(const f8_checkpoint *ck) { return ck ? ck->n : 0; }

const f8i_ck_entry *f8i_checkpoint_entry(const f8_checkpoint *ck, size_t i)
{
    return ck && i < ck->n ? &ck->entries[i]->pub : NULL;
}

f8_ctx *f8i_checkpoint_ctx(const f8_checkpoint *ck) { return ck ? ck->ctx : NULL; }

int f8i_checkpoint_is_f8(const f8_checkpoint *ck) { return ck ? ck->is_f8 : 0; }

size_t f8i_checkpoint_meta_count(const f8_checkpoint *ck) { return ck ? ck->n_meta : 0; }

void f8i_checkpoint_meta_at(const f8_checkpoint *ck, size_t i, const char **key, const char **value)
{
    int ok = ck && i < ck->n_meta;
    if (key) *key = ok ? ck->meta[i].key : NULL;
    if (value) *value = ok ? ck->meta[i].value : NULL;
}

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = (char *)malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Insert or replace a pair; no checks on the key. Both strings are copied
 * before anything changes, so running out of memory changes nothing. */
static f8_status meta_put(f8_checkpoint *ck, const char *fn, const char *key, const char *value)
{
    int found;
    size_t at = meta_lower_bound(ck, key, &found);
    char *v = dup_string(value), *k = found ? NULL : dup_string(key);
    if (!v || (!found && (!k || !f8i_grow((void **)&ck->meta, &ck->cap_meta, ck->n_meta, sizeof *ck->meta)))) {
        free(v);
        free(k);
        return f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    if (found) {
        free(ck->meta[at].value);
        ck->meta[at].value = v;
        return F8_OK;
    }
    memmove(ck->meta + at + 1, ck->meta + at, (ck->n_meta - at) * sizeof *ck->meta);
    ck->meta[at].key = k;
    ck->meta[at].value = v;
    ck->n_meta++;
    return F8_OK;
}

static f8_status set_meta(f8_checkpoint *ck, const char *fn, const char *key, const char *value, int internal)
{
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = ck->ctx;
    if (!key || !value) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, key ? "value" : "key");
    if (!f8_utf8_valid((const unsigned char *)key, strlen(key)) ||
        !f8_utf8_valid((const unsigned char *)value, strlen(value)))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: key and value must be valid UTF-8", fn);
    if (!strcmp(key, KEY_FORMAT) || !strcmp(key, KEY_VERSION) || (!internal && !strncmp(key, "f8.", 3)))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: key \"%.64s\" is reserved for the library", fn, key);
    return meta_put(ck, fn, key, value);
}

f8_status f8i_checkpoint_set_meta(f8_checkpoint *ck, const char *key, const char *value)
{
    return set_meta(ck, "f8i_checkpoint_set_meta", key, value, 1);
}

f8_status f8_checkpoint_set_metadata(f8_checkpoint *ck, const char *key, const char *value)
{
    return set_meta(ck, "f8_checkpoint_set_metadata", key, value, 0);
}

const char *f8_checkpoint_metadata(const f8_checkpoint *ck, const char *key)
{
    int found;
    if (!ck || !key) return NULL;
    size_t at = meta_lower_bound(ck, key, &found);
    return found ? ck->meta[at].value : NULL;
}

/* ---- lifetime ---------------------------------------------------------- */

f8_checkpoint *f8i_checkpoint_alloc(f8_ctx *ctx)
{
    f8_checkpoint *ck = (f8_checkpoint *)calloc(1, sizeof *ck);
    if (ck) ck->ctx = ctx;
    return ck;
}

void f8_checkpoint_destroy(f8_checkpoint *ck)
{
    if (!ck) return;
    for (size_t i = 0; i < ck->n; i++) entry_free(ck->entries[i]);
    for (size_t i = 0; i < ck->n_meta; i++) {
        free(ck->meta[i].key);
        free(ck->meta[i].value);
    }
    free(ck->entries);
    free(ck->meta);
    free(ck);
}

f8_status f8_checkpoint_create(f8_ctx *ctx, f8_checkpoint **checkpoint)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!checkpoint) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_create: checkpoint (the output) is NULL");
    *checkpoint = NULL;
    f8_checkpoint *ck = f8i_checkpoint_alloc(ctx);
    if (!ck) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_checkpoint_create: out of host memory");
    ck->is_f8 = 1;
    char version[16];
    snprintf(version, sizeof version, "%d", FORMAT_VERSION);
    f8_status st = meta_put(ck, "f8_checkpoint_create", KEY_FORMAT, "f8");
    if (st == F8_OK) st = meta_put(ck, "f8_checkpoint_create", KEY_VERSION, version);
    if (st != F8_OK) {
        f8_checkpoint_destroy(ck);
        return st;
    }
    *checkpoint = ck;
    return F8_OK;
}

/* ---- tensors in backend memory ----------------------------------------- */

/* The view's own checks (scale_inv is neither read nor written here). */
static f8_status check_view(f8_ctx *ctx, const char *fn, const f8_tensor *t, f8i_ck_dtype *dtype, size_t *bytes)
{
    if (!t) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: the tensor is NULL", fn);
    if (!f8i_ck_dtype_from_f8(t->dtype, dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)t->dtype);
    if (t->rows < 0 || t->cols < 0 || (t->rows && t->cols > INT64_MAX / t->rows / (int64_t)f8_dtype_size(t->dtype)))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: bad shape [%lld, %lld]", fn, (long long)t->rows, (long long)t->cols);
    *bytes = (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype);
    if (*bytes && !t->data) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: the tensor's data is NULL", fn);
    return F8_OK; /* while capturing a graph, the backend's upload/download refuse (F8_ERR_STATE) */
}

f8_status f8_checkpoint_add_tensor(f8_checkpoint *ck, const char *name, const f8_tensor *tensor)
{
    static const char fn[] = "f8_checkpoint_add_tensor";
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    f8i_ck_dtype dtype;
    size_t bytes;
    F8I_TRY(check_view(ck->ctx, fn, tensor, &dtype, &bytes));
    int64_t shape[2] = {tensor->rows, tensor->cols};
    F8I_TRY(put_check(ck, fn, name, dtype, 2, shape, bytes));
    entry *e = f8i_ck_entry_new(name, dtype, 2, shape, bytes);
    if (!e) return f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory (%zu bytes)", fn, bytes);
    /* Straight into the entry's buffer: one host copy, not two. */
    f8_status st = F8_OK;
    if (bytes) st = ck->ctx->be->download(ck->ctx, e->data, tensor->data, bytes);
    if (st != F8_OK) {
        entry_free(e);
        return st;
    }
    put_link(ck, e);
    return F8_OK;
}

/* Does a stored shape fit a [rows, cols] view? Scalars fit [1, 1], [n] fits
 * [1, n], [r, c] only itself, and more dimensions fit [product of all but the
 * last, last] (leading dimensions flattened into rows, as f8 does). */
static int shape_fits(const f8i_ck_entry *e, int64_t rows, int64_t cols)
{
    if (e->ndim == 0) return rows == 1 && cols == 1;
    if (e->ndim == 1) return rows == 1 && cols == e->shape[0];
    int64_t lead = 1;
    for (int d = 0; d < e->ndim - 1; d++) lead *= e->shape[d]; /* no overflow: the count fits int64 */
    return rows == lead && cols == e->shape[e->ndim - 1];
}

static void shape_string(const f8i_ck_entry *e, char *s, size_t n)
{
    size_t k = (size_t)snprintf(s, n, "[");
    for (int d = 0; d < e->ndim && k < n; d++)
        k += (size_t)snprintf(s + k, n - k, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
    if (k < n) snprintf(s + k, n - k, "]");
}

f8_status f8_checkpoint_read_tensor(const f8_checkpoint *ck, const char *name, f8_tensor *dst)
{
    static const char fn[] = "f8_checkpoint_read_tensor";
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = ck->ctx;
    if (!name) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: name is NULL", fn);
    f8i_ck_dtype dtype;
    size_t bytes;
    F8I_TRY(check_view(ctx, fn, dst, &dtype, &bytes));
    const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
    if (!e) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: no tensor named \"%.64s\"", fn, name);
    if (e->dtype != dtype)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: \"%.64s\" is stored as %s, dst is %s", fn, name,
                         f8i_ck_dtype_name(e->dtype), f8_dtype_name(dst->dtype));
    if (!shape_fits(e, dst->rows, dst->cols)) {
        char s[160];
        shape_string(e, s, sizeof s);
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: \"%.64s\" is stored with shape %s, dst is [%lld, %lld]", fn, name, s,
                         (long long)dst->rows, (long long)dst->cols);
    }
    return bytes ? ctx->be->upload(ctx, dst->data, e->data, bytes) : F8_OK;
}

int f8_checkpoint_has(const f8_checkpoint *ck, const char *name) { return f8i_checkpoint_find(ck, name) != NULL; }
