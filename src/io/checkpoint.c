/*
 * checkpoint.c — f8_checkpoint: named host tensors and string metadata,
 * loaded from and saved to one safetensors file (safetensors.c parses and
 * writes the header).
 *
 * Design note. Every call either completes or changes nothing: a table grows
 * (reserve) before an entry is made, and an entry is filled before it is
 * linked in, so the one step that can fail comes before any visible change.
 * Entries live in their own allocations (the name inline, the bytes in a
 * malloc'd buffer), so pointers handed to module code stay valid as the
 * table grows; the table is kept sorted by name for binary search and for
 * the writer. A loaded file is checked whole before any tensor byte is
 * read. The writer adds an XXH64 checksum of every tensor's bytes to the
 * metadata ("f8.xxh64.<name>"); the loader checks each one it finds, so a
 * flipped bit is refused with the tensor's name, while files without them
 * (older f8 files, other tools' safetensors) load as before. The writer lays the data out without gaps (the reference
 * implementation rejects them) and aligned: the header is padded to 8 bytes,
 * and tensors go by element size, largest first, so each starts at a
 * multiple of its element size; the JSON lists them by name.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/safetensors.h"

typedef struct entry {
    f8i_ck_entry pub;    /* pub.name points at name[], pub.data at data */
    unsigned char *data; /* (max(bytes, 1)) */
    char name[];
} entry;

struct f8_checkpoint {
    f8_ctx *ctx;
    entry **entries;     /* (n) sorted by name */
    size_t n, cap;
    f8i_st_pair *meta;   /* (n_meta) sorted by key */
    size_t n_meta, cap_meta;
    int is_f8;
};

#define KEY_FORMAT "format"
#define KEY_VERSION "f8.format_version"
#define FORMAT_VERSION 1
#define KEY_CHECKSUM "f8.xxh64." /* + the tensor's name */

/* ---- checksums ---------------------------------------------------------- */

#define XXP1 0x9E3779B185EBCA87ull
#define XXP2 0xC2B2AE3D27D4EB4Full
#define XXP3 0x165667B19E3779F9ull
#define XXP4 0x85EBCA77C2B2AE63ull
#define XXP5 0x27D4EB2F165667C5ull

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t xx_round(uint64_t acc, uint64_t in) { return rotl64(acc + in * XXP2, 31) * XXP1; }
static uint64_t xx_merge(uint64_t h, uint64_t v) { return (h ^ xx_round(0, v)) * XXP1 + XXP4; }

uint64_t f8i_xxh64(const void *data, size_t n)
{
    const unsigned char *p = (const unsigned char *)data, *end = p + n;
    uint64_t h;
    if (n >= 32) {
        uint64_t v1 = XXP1 + XXP2, v2 = XXP2, v3 = 0, v4 = 0 - XXP1;
        for (; end - p >= 32; p += 32) {
            v1 = xx_round(v1, le64(p));
            v2 = xx_round(v2, le64(p + 8));
            v3 = xx_round(v3, le64(p + 16));
            v4 = xx_round(v4, le64(p + 24));
        }
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xx_merge(xx_merge(xx_merge(xx_merge(h, v1), v2), v3), v4);
    } else
        h = XXP5;
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8) h = rotl64(h ^ xx_round(0, le64(p)), 27) * XXP1 + XXP4;
    if (end - p >= 4) {
        uint64_t w = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        h = rotl64(h ^ w * XXP1, 23) * XXP2 + XXP3;
        p += 4;
    }
    for (; p < end; p++) h = rotl64(h ^ *p * XXP5, 11) * XXP1;
    h ^= h >> 33;
    h *= XXP2;
    h ^= h >> 29;
    h *= XXP3;
    return h ^ (h >> 32);
}

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
static size_t entry_lower_bound(const f8_checkpoint *ck, const char *name, int *found)
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
static entry *entry_new(const char *name, f8i_ck_dtype dtype, int ndim, const int64_t *shape, size_t bytes)
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
    if (!f8i_utf8_valid((const unsigned char *)name, strlen(name)))
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
    entry_lower_bound(ck, name, &found);
    if (found) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: a tensor named \"%.64s\" is already stored", fn, name);
    if (!f8i_grow((void **)&ck->entries, &ck->cap, ck->n, sizeof *ck->entries))
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    return F8_OK;
}

/* Link a filled entry in (room was reserved by put_check). */
static void put_link(f8_checkpoint *ck, entry *e)
{
    int found;
    size_t at = entry_lower_bound(ck, e->pub.name, &found);
    memmove(ck->entries + at + 1, ck->entries + at, (ck->n - at) * sizeof *ck->entries);
    ck->entries[at] = e;
    ck->n++;
}

f8_status f8i_checkpoint_put(f8_checkpoint *ck, const char *name, f8i_ck_dtype dtype, int ndim, const int64_t *shape,
                             const void *host_data, size_t bytes)
{
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    f8_status st = put_check(ck, "f8i_checkpoint_put", name, dtype, ndim, shape, bytes);
    if (st != F8_OK) return st;
    if (bytes && !host_data) return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "f8i_checkpoint_put: host_data is NULL");
    entry *e = entry_new(name, dtype, ndim, shape, bytes);
    if (!e) return f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "f8i_checkpoint_put: out of host memory");
    if (bytes) memcpy(e->data, host_data, bytes);
    put_link(ck, e);
    return F8_OK;
}

const f8i_ck_entry *f8i_checkpoint_find(const f8_checkpoint *ck, const char *name)
{
    int found;
    if (!ck || !name) return NULL;
    size_t at = entry_lower_bound(ck, name, &found);
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
    if (!f8i_utf8_valid((const unsigned char *)key, strlen(key)) ||
        !f8i_utf8_valid((const unsigned char *)value, strlen(value)))
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

/* ---- values -------------------------------------------------------------- */

static const char *const rule_text[3] = {"must be finite", "must be finite and > 0", "must be finite and >= 0"};

f8_status f8i_checkpoint_check_finite(const f8_checkpoint *ck, const char *fn, const char *name, f8i_ck_rule rule)
{
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
    if (!e) return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "%s: no tensor \"%.64s\"", fn, name ? name : "(null)");
    if ((unsigned)rule > F8I_CK_NONNEGATIVE) rule = F8I_CK_FINITE;
    const size_t size = f8i_ck_dtype_size(e->dtype), count = size ? e->bytes / size : 0;
    for (size_t i = 0; i < count; i++) {
        const unsigned char *p = e->data + i * size;
        float v;
        int bad;
        if (e->dtype == F8I_CK_F32 || e->dtype == F8I_CK_BF16) {
            uint32_t u = e->dtype == F8I_CK_F32 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                                       (uint32_t)p[3] << 24
                                                 : ((uint32_t)p[0] | (uint32_t)p[1] << 8) << 16;
            memcpy(&v, &u, sizeof v);
            bad = !isfinite(v) || (rule == F8I_CK_POSITIVE && !(v > 0)) || (rule == F8I_CK_NONNEGATIVE && v < 0);
        } else if (e->dtype == F8I_CK_F8_E4M3 || e->dtype == F8I_CK_F8_E5M2) {
            /* the codes themselves: E4M3 has NaN at S.1111.111, E5M2 inf/NaN at S.11111.xx */
            const unsigned b = p[0], mag = b & 0x7Fu;
            const int nonfinite = e->dtype == F8I_CK_F8_E4M3 ? mag == 0x7F : (mag & 0x7C) == 0x7C;
            const int neg = (b & 0x80u) && mag;
            v = nonfinite ? NAN : neg ? -1.0f : mag ? 1.0f : 0.0f; /* sign and zero are what the rules need */
            bad = nonfinite || (rule == F8I_CK_POSITIVE && (neg || !mag)) || (rule == F8I_CK_NONNEGATIVE && neg);
            if (bad && !nonfinite)
                return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "%s: tensor \"%.64s\": element %zu (FP8 code 0x%02x) "
                                 "%s", fn, e->name, i, b, rule_text[rule]);
        } else
            return F8_OK; /* integers */
        if (bad)
            return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "%s: tensor \"%.64s\": element %zu is %g (%s)", fn,
                             e->name, i, (double)v, rule_text[rule]);
    }
    return F8_OK;
}

/* ---- lifetime ---------------------------------------------------------- */

static f8_checkpoint *checkpoint_alloc(f8_ctx *ctx)
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
    f8_checkpoint *ck = checkpoint_alloc(ctx);
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

/* ---- loading ----------------------------------------------------------- */

/* Where the tensor bytes come from: memory, or a file descriptor. */
typedef struct source {
    const unsigned char *mem; /* the data region, or NULL */
    int fd;
    uint64_t base;            /* file offset of the data region */
} source;

/* Read exactly n bytes at off; 0 on success, else an errno (-1: end of file). */
static int pread_full(int fd, void *dst, size_t n, uint64_t off)
{
    unsigned char *p = (unsigned char *)dst;
    while (n) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno ? errno : EIO;
        if (k == 0) return -1;
        p += k;
        off += (uint64_t)k;
        n -= (size_t)k;
    }
    return 0;
}

static const char *read_error(int e) { return e == -1 ? "the file is shorter than when it was checked" : strerror(e); }

/* f8 files (format "f8" or an f8.format_version key) must carry a version
 * this library reads; other safetensors files load as plain tensors. */
static f8_status check_version(f8_ctx *ctx, const char *fn, const f8i_st_header *h, int *is_f8)
{
    const char *format = NULL, *version = NULL;
    for (size_t i = 0; i < h->n_meta; i++) {
        if (!strcmp(h->meta[i].key, KEY_FORMAT)) format = h->meta[i].value;
        if (!strcmp(h->meta[i].key, KEY_VERSION)) version = h->meta[i].value;
    }
    *is_f8 = (format && !strcmp(format, "f8")) || version;
    if (!*is_f8) return F8_OK;
    if (!version)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: an f8 checkpoint (\"format\": \"f8\") without "
                         "\"" KEY_VERSION "\" in its metadata", fn);
    size_t len = strlen(version), i = 0;
    while (i < len && version[i] >= '0' && version[i] <= '9') i++;
    if (!len || i != len || version[0] == '0')
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"" KEY_VERSION "\" is \"%.32s\", not a positive integer",
                         fn, version);
    /* Nine digits fit an int; anything longer is certainly newer. */
    if (len > 9 || atoi(version) > FORMAT_VERSION)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: format version %.32s is newer than this library reads (%d): "
                         "written by a newer f8", fn, version, FORMAT_VERSION);
    return F8_OK;
}

/* The header's checksum of tensor `name` (NULL when it has none); the
 * metadata is sorted by key, so a binary search that compares the key with
 * KEY_CHECKSUM + name without building the string. */
static const char *find_checksum(const f8i_st_header *h, const char *name)
{
    const size_t plen = strlen(KEY_CHECKSUM);
    size_t lo = 0, hi = h->n_meta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *k = h->meta[mid].key;
        int c = strncmp(k, KEY_CHECKSUM, plen);
        if (!c) c = strcmp(k + plen, name);
        if (!c) return h->meta[mid].value;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* A tensor's bytes against its checksum, if the file has one. */
static f8_status check_checksum(f8_ctx *ctx, const char *fn, const f8i_st_header *h, const entry *e)
{
    const char *want = find_checksum(h, e->pub.name);
    if (!want) return F8_OK;
    if (strlen(want) != 16 || strspn(want, "0123456789abcdef") != 16)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: metadata \"" KEY_CHECKSUM "%.64s\" = \"%.32s\" is not a "
                         "checksum (16 lowercase hex digits)", fn, e->pub.name, want);
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)f8i_xxh64(e->pub.data, e->pub.bytes));
    if (strcmp(got, want))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: tensor \"%.64s\": checksum mismatch (the file says %s, "
                         "its %zu bytes hash to %s): the file is corrupt", fn, e->pub.name, want, e->pub.bytes, got);
    return F8_OK;
}

/* Make the checkpoint of a checked header, reading each tensor's bytes from
 * src. Takes the header's metadata; frees the header in all cases. */
static f8_status build(f8_ctx *ctx, const char *fn, f8i_st_header *h, const source *src, f8_checkpoint **out)
{
    int is_f8;
    f8_status st = check_version(ctx, fn, h, &is_f8);
    f8_checkpoint *ck = st == F8_OK ? checkpoint_alloc(ctx) : NULL;
    /* (+ 1 everywhere a count may be 0: malloc(0) may return NULL.) */
    if (st == F8_OK && (!ck || !(ck->entries = (entry **)malloc((h->n_tensors + 1) * sizeof *ck->entries))))
        st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    if (st == F8_OK) {
        ck->cap = h->n_tensors + 1;
        ck->is_f8 = is_f8;
    }
    /* The header's tensors are already sorted by name. */
    for (size_t i = 0; st == F8_OK && i < h->n_tensors; i++) {
        const f8i_st_tensor *t = &h->tensors[i];
        size_t bytes = (size_t)(t->end - t->begin);
        entry *e = entry_new(t->name, t->dtype, t->ndim, t->shape, bytes);
        if (!e) {
            st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory for tensor \"%.64s\" (%zu bytes)", fn,
                           t->name, bytes);
            break;
        }
        ck->entries[ck->n++] = e; /* owned by ck now: freed with it on error */
        if (src->mem) {
            if (bytes) memcpy(e->data, src->mem + t->begin, bytes);
        } else {
            int err = pread_full(src->fd, e->data, bytes, src->base + t->begin);
            if (err) st = f8i_error(ctx, F8_ERR_IO, "%s: reading tensor \"%.64s\": %s", fn, t->name, read_error(err));
        }
        if (st == F8_OK) st = check_checksum(ctx, fn, h, e);
    }
    /* A checksum of a tensor the file does not hold: one was taken out. */
    for (size_t i = 0; st == F8_OK && i < h->n_meta; i++) {
        const char *k = h->meta[i].key;
        int found;
        if (strncmp(k, KEY_CHECKSUM, strlen(KEY_CHECKSUM)) == 0) {
            entry_lower_bound(ck, k + strlen(KEY_CHECKSUM), &found);
            if (!found)
                st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: metadata has a checksum for tensor \"%.64s\", which "
                               "the file does not hold: the file is corrupt", fn, k + strlen(KEY_CHECKSUM));
        }
    }
    /* The metadata moves over as parsed (sorted, checked for duplicates),
     * less the checksums: they belong to the file, and a save writes new ones. */
    if (st == F8_OK) {
        size_t kept = 0;
        for (size_t i = 0; i < h->n_meta; i++) {
            if (strncmp(h->meta[i].key, KEY_CHECKSUM, strlen(KEY_CHECKSUM)) == 0) {
                free(h->meta[i].key);
                free(h->meta[i].value);
            } else
                h->meta[kept++] = h->meta[i];
        }
        ck->meta = h->meta;
        ck->n_meta = kept;
        ck->cap_meta = h->n_meta;
        h->meta = NULL;
        h->n_meta = 0;
    }
    f8i_st_header_free(h);
    if (st != F8_OK) {
        f8_checkpoint_destroy(ck);
        return st;
    }
    *out = ck;
    return F8_OK;
}

f8_status f8_checkpoint_load_memory(f8_ctx *ctx, const void *bytes, size_t size, f8_checkpoint **checkpoint)
{
    static const char fn[] = "f8_checkpoint_load_memory";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!checkpoint) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: checkpoint (the output) is NULL", fn);
    *checkpoint = NULL;
    if (!bytes && size) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    const unsigned char *b = (const unsigned char *)bytes;
    char err[256];
    uint64_t hlen;
    f8i_st_header h;
    if (f8i_st_header_length(b, size, &hlen, err, sizeof err) != F8_OK)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %s", fn, err);
    f8_status st = f8i_st_parse(b + 8, (size_t)hlen, size - 8 - hlen, &h, err, sizeof err);
    if (st != F8_OK) return f8i_error(ctx, st, "%s: %s", fn, err);
    source src = {b + 8 + hlen, -1, 0};
    return build(ctx, fn, &h, &src, checkpoint);
}

f8_status f8_checkpoint_load(f8_ctx *ctx, const char *path, f8_checkpoint **checkpoint)
{
    static const char fn[] = "f8_checkpoint_load";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!checkpoint) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: checkpoint (the output) is NULL", fn);
    *checkpoint = NULL;
    if (!path) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: path is NULL", fn);
    /* O_NONBLOCK: a FIFO must not block the open; it is refused below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return f8i_error(ctx, F8_ERR_IO, "%s: cannot open %.200s: %s", fn, path, strerror(errno));
    struct stat sb;
    int serr = fstat(fd, &sb) != 0 ? errno : 0;
    if (serr || !S_ISREG(sb.st_mode)) {
        close(fd);
        return f8i_error(ctx, F8_ERR_IO, "%s: %.200s: %s", fn, path, serr ? strerror(serr) : "not a regular file");
    }
    uint64_t size = (uint64_t)sb.st_size, hlen = 0;
    unsigned char prefix[8] = {0};
    char err[256];
    f8i_st_header h;
    int rerr = size >= 8 ? pread_full(fd, prefix, 8, 0) : 0;
    f8_status st = F8_OK;
    if (rerr) st = f8i_error(ctx, F8_ERR_IO, "%s: reading %.200s: %s", fn, path, read_error(rerr));
    else if (f8i_st_header_length(prefix, size, &hlen, err, sizeof err) != F8_OK)
        st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %.200s: %s", fn, path, err);
    unsigned char *json = st == F8_OK ? (unsigned char *)malloc(hlen ? (size_t)hlen : 1) : NULL;
    if (st == F8_OK && !json) st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory for the header", fn);
    if (st == F8_OK && (rerr = pread_full(fd, json, (size_t)hlen, 8)) != 0)
        st = f8i_error(ctx, F8_ERR_IO, "%s: reading %.200s: %s", fn, path, read_error(rerr));
    if (st == F8_OK && (st = f8i_st_parse(json, (size_t)hlen, size - 8 - hlen, &h, err, sizeof err)) != F8_OK)
        f8i_error(ctx, st, "%s: %.200s: %s", fn, path, err);
    free(json);
    if (st == F8_OK) {
        source src = {NULL, fd, 8 + hlen};
        st = build(ctx, fn, &h, &src, checkpoint);
    }
    close(fd);
    return st;
}

/* ---- saving ------------------------------------------------------------ */

static int cmp_data_order(const void *a, const void *b)
{
    const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
    size_t sx = f8i_ck_dtype_size(x->pub.dtype), sy = f8i_ck_dtype_size(y->pub.dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->pub.name, y->pub.name);
}

/* The file's layout: header bytes (length, JSON, padding), then the entries'
 * data in data order. */
typedef struct layout {
    unsigned char *header;
    size_t header_size;
    entry **order;  /* (n) data order */
    size_t total;   /* file size */
} layout;

static f8_status layout_make(const f8_checkpoint *ck, const char *fn, layout *l)
{
    size_t n = ck->n, nm = 0, names = 0;
    for (size_t i = 0; i < n; i++) names += strlen(KEY_CHECKSUM) + strlen(ck->entries[i]->pub.name) + 1;
    memset(l, 0, sizeof *l);
    l->order = (entry **)malloc((n + 1) * sizeof *l->order);
    uint64_t *begin = (uint64_t *)malloc((n + 1) * sizeof *begin);
    const f8i_ck_entry **pub = (const f8i_ck_entry **)malloc((n + 1) * sizeof *pub);
    const char **keys = (const char **)malloc((ck->n_meta + n + 2) * sizeof *keys);
    const char **values = (const char **)malloc((ck->n_meta + n + 2) * sizeof *values);
    char *sum_keys = (char *)malloc(names + 1), (*sums)[17] = (char (*)[17])malloc((n + 1) * sizeof *sums);
    f8_status st = F8_OK;
    if (!l->order || !begin || !pub || !keys || !values || !sum_keys || !sums) {
        st = f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        goto done;
    }
    /* Data offsets follow the data order; the JSON lists entries by name, so
     * begin[] is indexed by name order (the table's own). */
    if (n) memcpy(l->order, ck->entries, n * sizeof *l->order);
    if (n > 1) qsort(l->order, n, sizeof *l->order, cmp_data_order);
    for (size_t i = 0; i < n; i++) pub[i] = &ck->entries[i]->pub;
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        int found;
        size_t at = entry_lower_bound(ck, l->order[i]->pub.name, &found);
        begin[at] = off;
        off += l->order[i]->pub.bytes;
    }
    char version[16];
    snprintf(version, sizeof version, "%d", FORMAT_VERSION);
    keys[nm] = KEY_FORMAT, values[nm++] = "f8";
    keys[nm] = KEY_VERSION, values[nm++] = version;
    /* The caller's pairs; checksums a loaded file brought are recomputed. */
    for (size_t i = 0; i < ck->n_meta; i++)
        if (strcmp(ck->meta[i].key, KEY_FORMAT) && strcmp(ck->meta[i].key, KEY_VERSION) &&
            strncmp(ck->meta[i].key, KEY_CHECKSUM, strlen(KEY_CHECKSUM)))
            keys[nm] = ck->meta[i].key, values[nm++] = ck->meta[i].value;
    char *k = sum_keys;
    for (size_t i = 0; i < n; i++) {
        const f8i_ck_entry *e = &ck->entries[i]->pub;
        keys[nm] = k;
        k += sprintf(k, "%s%s", KEY_CHECKSUM, e->name) + 1;
        snprintf(sums[i], sizeof sums[i], "%016llx", (unsigned long long)f8i_xxh64(e->data, e->bytes));
        values[nm++] = sums[i];
    }
    l->header = f8i_st_write_header(pub, begin, n, keys, values, nm, &l->header_size);
    if (!l->header) st = f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory for the header", fn);
    l->total = l->header_size + (size_t)off;
done:
    free(begin);
    free(pub);
    free(keys);
    free(values);
    free(sum_keys);
    free(sums);
    if (st != F8_OK) {
        free(l->order);
        l->order = NULL;
    }
    return st;
}

static void layout_free(layout *l)
{
    free(l->header);
    free(l->order);
}

f8_status f8i_checkpoint_serialize(const f8_checkpoint *ck, unsigned char **bytes, size_t *size)
{
    static const char fn[] = "f8i_checkpoint_serialize";
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    if (!bytes || !size) return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "%s: an output is NULL", fn);
    layout l;
    f8_status st = layout_make(ck, fn, &l);
    if (st != F8_OK) return st;
    unsigned char *b = (unsigned char *)malloc(l.total);
    if (!b) {
        layout_free(&l);
        return f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory (%zu bytes)", fn, l.total);
    }
    memcpy(b, l.header, l.header_size);
    size_t off = l.header_size;
    for (size_t i = 0; i < ck->n; i++) {
        memcpy(b + off, l.order[i]->data, l.order[i]->pub.bytes);
        off += l.order[i]->pub.bytes;
    }
    layout_free(&l);
    *bytes = b;
    *size = off;
    return F8_OK;
}

static int write_full(int fd, const void *src, size_t n)
{
    const unsigned char *p = (const unsigned char *)src;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : EIO;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Remove the "<path>.tmp.<pid>" files of saves that were killed: those next
 * to path, of the same base name, whose pid is no running process (kill(pid,
 * 0) fails with ESRCH). Other files, and the temporaries of live processes,
 * stay. Best effort: the save reports its own errors, not these. */
static void remove_stale_temps(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) + (slash == path) : 1, blen = strlen(base);
    char *dir = (char *)malloc(dlen + 1);
    if (!dir) return;
    memcpy(dir, slash ? path : ".", dlen);
    dir[dlen] = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strncmp(n, base, blen) || strncmp(n + blen, ".tmp.", 5)) continue;
        const char *digits = n + blen + 5;
        size_t nd = strspn(digits, "0123456789");
        if (nd == 0 || nd > 9 || digits[nd] || digits[0] == '0') continue;
        long pid = strtol(digits, NULL, 10);
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char *full = (char *)malloc(dlen + strlen(n) + 2);
        if (!full) break;
        sprintf(full, "%s/%s", dir, n);
        unlink(full);
        free(full);
    }
    if (d) closedir(d);
    free(dir);
}

f8_status f8_checkpoint_save(const f8_checkpoint *ck, const char *path)
{
    static const char fn[] = "f8_checkpoint_save";
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = ck->ctx;
    if (!path || !*path) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: path is NULL or empty", fn);
    layout l;
    f8_status st = layout_make(ck, fn, &l);
    if (st != F8_OK) return st;
    size_t tlen = strlen(path) + 32;
    char *tmp = (char *)malloc(tlen);
    if (!tmp) {
        layout_free(&l);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    /* The temporary sits next to path, so the rename stays on one file
     * system and is atomic; the pid keeps two processes apart, and tells
     * which temporaries were left by a save that was killed. */
    remove_stale_temps(path);
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    const char *step = "creating";
    int err = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) err = errno;
    else {
        step = "writing";
        err = write_full(fd, l.header, l.header_size);
        for (size_t i = 0; !err && i < ck->n; i++) err = write_full(fd, l.order[i]->data, l.order[i]->pub.bytes);
        /* Flushed before the rename: a crash must not leave a renamed but
         * empty file in place of the old one. */
        if (!err && fsync(fd) != 0) err = errno;
        if (close(fd) != 0 && !err) err = errno;
        if (!err) {
            step = "renaming";
            if (rename(tmp, path) != 0) err = errno;
        }
        if (err) unlink(tmp);
    }
    if (err)
        st = f8i_error(ctx, F8_ERR_IO, "%s: %s %.200s: %s", fn, step, !strcmp(step, "renaming") ? path : tmp,
                       strerror(err));
    free(tmp);
    layout_free(&l);
    return st;
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
    f8_status st = check_view(ck->ctx, fn, tensor, &dtype, &bytes);
    if (st != F8_OK) return st;
    int64_t shape[2] = {tensor->rows, tensor->cols};
    st = put_check(ck, fn, name, dtype, 2, shape, bytes);
    if (st != F8_OK) return st;
    entry *e = entry_new(name, dtype, 2, shape, bytes);
    if (!e) return f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory (%zu bytes)", fn, bytes);
    /* Straight into the entry's buffer: one host copy, not two. */
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
    f8_status st = check_view(ctx, fn, dst, &dtype, &bytes);
    if (st != F8_OK) return st;
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
