/*
 * safetensors.c — the safetensors header: a strict reader and a writer.
 *
 * Design note. A checkpoint file is untrusted input. The header's JSON is
 * read by f8's one strict JSON reader (io/json.h: UTF-8, escapes, no
 * duplicate keys, numbers that say whether they are integers) with the
 * nesting the format has (root -> tensor -> shape: depth 3), and the tree is
 * then held to exactly what the format allows and no more: one object of
 * tensor objects (and __metadata__, an object of strings), arrays of
 * non-negative integers, strings without NUL. After that, the header's
 * claims are checked against the data region as the reference
 * implementation does: the byte ranges must tile it exactly. Anything else
 * is an error naming the header byte, never a guess.
 *
 * The writer emits compact JSON with the same escaping rules, padded with
 * spaces to 8 bytes (so the data starts 8-byte aligned in the file).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "f8.h"
#include "io/safetensors.h"

static const char *const dtype_names[F8I_CK_DTYPE_COUNT] = {"F32", "BF16", "F8_E4M3", "F8_E5M2", "I32", "I64", "U8"};
static const size_t dtype_sizes[F8I_CK_DTYPE_COUNT] = {4, 2, 1, 1, 4, 8, 1};

const char *f8i_ck_dtype_name(f8i_ck_dtype dtype)
{
    return (unsigned)dtype < F8I_CK_DTYPE_COUNT ? dtype_names[dtype] : "?";
}

size_t f8i_ck_dtype_size(f8i_ck_dtype dtype)
{
    return (unsigned)dtype < F8I_CK_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

/* ---- reader ------------------------------------------------------------ */

typedef struct cursor {
    size_t at;    /* the header byte of the value being checked; SIZE_MAX: none */
    char *err;
    size_t err_size;
    f8_status st; /* first error */
} cursor;

/* Record the first error, prefixed with the header byte it was found at
 * (unless at is SIZE_MAX: the checks across tensors have no position). */
static int fail(cursor *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int fail(cursor *c, const char *fmt, ...)
{
    if (c->st != F8_OK) return 0;
    c->st = F8_ERR_INVALID_ARGUMENT;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->at == SIZE_MAX) snprintf(c->err, c->err_size, "%s", msg);
    else snprintf(c->err, c->err_size, "header byte %zu: %s", c->at, msg);
    return 0;
}

static int out_of_memory(cursor *c)
{
    if (c->st == F8_OK) {
        c->st = F8_ERR_OUT_OF_MEMORY;
        snprintf(c->err, c->err_size, "out of host memory while parsing the header");
    }
    return 0;
}

/* v must be of kind k; what names it in the message. */
static int want(cursor *c, const f8_json *v, f8_json_kind k, const char *what)
{
    c->at = v->offset;
    if (v->kind == k) return 1;
    return fail(c, "%s must be a%s %s, not %s %s", what, k == F8_JSON_ARRAY || k == F8_JSON_OBJECT ? "n" : "",
                f8_json_kind_name(k), v->kind == F8_JSON_ARRAY || v->kind == F8_JSON_OBJECT ? "an" : "a",
                f8_json_kind_name(v->kind));
}

/* A string usable as a C string (names and metadata are C strings). */
static char *c_string(cursor *c, const f8_json *v, const char *what)
{
    if (!want(c, v, F8_JSON_STRING, what)) return NULL;
    if (strlen(v->str) != v->len) {
        fail(c, "\\u0000 in %s (names and metadata are C strings)", what);
        return NULL;
    }
    char *s = (char *)malloc(v->len + 1);
    if (!s) {
        out_of_memory(c);
        return NULL;
    }
    memcpy(s, v->str, v->len + 1);
    return s;
}

/* A non-negative integer up to INT64_MAX. */
static int get_uint(cursor *c, const f8_json *v, uint64_t *out, const char *what)
{
    if (!want(c, v, F8_JSON_NUMBER, what)) return 0;
    if (v->str[0] == '-') return fail(c, "negative number %.32s (%s)", v->str, what);
    if (!v->is_int) {
        if (strpbrk(v->str, ".eE")) return fail(c, "number with a fraction or exponent %.32s (%s)", v->str, what);
        return fail(c, "number past 2^63 - 1 (%s)", what);
    }
    *out = (uint64_t)v->i;
    return 1;
}

static int parse_tensor(cursor *c, const f8_json *desc, f8i_st_tensor *t)
{
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    if (!want(c, desc, F8_JSON_OBJECT, "a tensor's description")) return 0;
    for (const f8_json *m = desc->child; m; m = m->next) {
        int f = 0;
        while (f < 3 && strcmp(m->key, fields[f])) f++;
        c->at = m->offset;
        if (f == 3 || strlen(m->key) != m->key_len)
            return fail(c, "tensor \"%.64s\": unknown field \"%.32s\"", t->name, m->key);
    }
    c->at = desc->offset;
    for (int f = 0; f < 3; f++)
        if (!f8_json_get(desc, fields[f])) return fail(c, "tensor \"%.64s\": no \"%s\"", t->name, fields[f]);
    const f8_json *dtype = f8_json_get(desc, "dtype"), *shape = f8_json_get(desc, "shape"),
                   *offsets = f8_json_get(desc, "data_offsets");
    if (!want(c, dtype, F8_JSON_STRING, "a dtype")) return 0;
    int d = 0;
    while (d < F8I_CK_DTYPE_COUNT && strcmp(dtype->str, dtype_names[d])) d++;
    if (d == F8I_CK_DTYPE_COUNT || strlen(dtype->str) != dtype->len)
        return fail(c, "tensor \"%.64s\": unknown dtype \"%.16s\" (f8 reads F32, BF16, F8_E4M3, F8_E5M2, I32, I64, U8)",
                    t->name, dtype->str);
    t->dtype = (f8i_ck_dtype)d;
    if (!want(c, shape, F8_JSON_ARRAY, "a shape")) return 0;
    if (shape->count > F8I_CK_MAX_DIMS)
        return fail(c, "tensor \"%.64s\": more than %d dimensions", t->name, F8I_CK_MAX_DIMS);
    t->ndim = 0;
    for (const f8_json *e = shape->child; e; e = e->next) {
        uint64_t v;
        if (!get_uint(c, e, &v, "a dimension")) return 0;
        t->shape[t->ndim++] = (int64_t)v;
    }
    if (!want(c, offsets, F8_JSON_ARRAY, "data_offsets")) return 0;
    if (offsets->count != 2) return fail(c, "tensor \"%.64s\": data_offsets holds %zu numbers, not 2", t->name,
                                         offsets->count);
    return get_uint(c, offsets->child, &t->begin, "a data offset") &&
           get_uint(c, offsets->child->next, &t->end, "a data offset");
}

static int parse_metadata(cursor *c, const f8_json *obj, f8i_st_header *h)
{
    if (!want(c, obj, F8_JSON_OBJECT, "__metadata__")) return 0;
    h->meta = (f8i_st_pair *)calloc(obj->count + 1, sizeof *h->meta);
    if (!h->meta) return out_of_memory(c);
    h->cap_meta = obj->count + 1;
    for (const f8_json *m = obj->child; m; m = m->next) {
        f8i_st_pair *p = &h->meta[h->n_meta];
        c->at = m->offset;
        if (strlen(m->key) != m->key_len) return fail(c, "\\u0000 in a metadata key (keys are C strings)");
        if (!(p->key = (char *)malloc(m->key_len + 1))) return out_of_memory(c);
        memcpy(p->key, m->key, m->key_len + 1);
        h->n_meta++; /* freed with the header from here on (value may be NULL) */
        if (!(p->value = c_string(c, m, "a metadata value (values are strings)"))) return 0;
    }
    return 1;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const f8i_st_tensor *)a)->name, ((const f8i_st_tensor *)b)->name);
}

static int cmp_pair_key(const void *a, const void *b)
{
    return strcmp(((const f8i_st_pair *)a)->key, ((const f8i_st_pair *)b)->key);
}

static int cmp_tensor_range(const void *a, const void *b)
{
    const f8i_st_tensor *x = *(const f8i_st_tensor *const *)a, *y = *(const f8i_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* What the header claims, against itself and the data region. */
static int check_claims(cursor *c, f8i_st_header *h, uint64_t data_size)
{
    c->at = SIZE_MAX; /* no byte position from here on */
    for (size_t i = 0; i < h->n_tensors; i++) {
        const f8i_st_tensor *t = &h->tensors[i];
        uint64_t count = 1, size = f8i_ck_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            uint64_t dim = (uint64_t)t->shape[d];
            if (dim && count > (uint64_t)INT64_MAX / dim)
                return fail(c, "tensor \"%.64s\": the shape's element count overflows", t->name);
            count *= dim;
        }
        if (count > (uint64_t)INT64_MAX / size)
            return fail(c, "tensor \"%.64s\": the shape's byte count overflows", t->name);
        if (t->end < t->begin)
            return fail(c, "tensor \"%.64s\": data_offsets [%llu, %llu] end before they begin", t->name,
                        (unsigned long long)t->begin, (unsigned long long)t->end);
        if (t->end - t->begin != count * size)
            return fail(c, "tensor \"%.64s\": data_offsets [%llu, %llu] hold %llu bytes, but %s of %llu elements "
                           "needs %llu", t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                        (unsigned long long)(t->end - t->begin), dtype_names[t->dtype], (unsigned long long)count,
                        (unsigned long long)(count * size));
        if (t->end > data_size)
            return fail(c, "tensor \"%.64s\": data_offsets [%llu, %llu] run past the data (%llu bytes)", t->name,
                        (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_size);
    }
    if (h->n_tensors > 1) qsort(h->tensors, h->n_tensors, sizeof *h->tensors, cmp_tensor_name);
    for (size_t i = 1; i < h->n_tensors; i++)
        if (!strcmp(h->tensors[i - 1].name, h->tensors[i].name))
            return fail(c, "tensor \"%.64s\" appears twice", h->tensors[i].name);
    if (h->n_meta > 1) qsort(h->meta, h->n_meta, sizeof *h->meta, cmp_pair_key);
    for (size_t i = 1; i < h->n_meta; i++)
        if (!strcmp(h->meta[i - 1].key, h->meta[i].key))
            return fail(c, "metadata key \"%.64s\" appears twice", h->meta[i].key);

    /* The ranges, in file order, must tile [0, data_size). Sorting by (begin,
     * end) puts an empty tensor before a non-empty one at the same offset,
     * so empty tensors may sit at any boundary but not inside a range. */
    const f8i_st_tensor **by_range = (const f8i_st_tensor **)malloc((h->n_tensors + 1) * sizeof *by_range);
    if (!by_range) return out_of_memory(c);
    for (size_t i = 0; i < h->n_tensors; i++) by_range[i] = &h->tensors[i];
    if (h->n_tensors > 1) qsort(by_range, h->n_tensors, sizeof *by_range, cmp_tensor_range);
    uint64_t pos = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < h->n_tensors && c->st == F8_OK; i++) {
        const f8i_st_tensor *t = by_range[i];
        if (t->begin < pos)
            fail(c, "tensor \"%.64s\" (bytes [%llu, %llu)) overlaps tensor \"%.64s\"", t->name,
                 (unsigned long long)t->begin, (unsigned long long)t->end, prev);
        else if (t->begin > pos)
            fail(c, "bytes [%llu, %llu) of the data belong to no tensor (gaps are not allowed)",
                 (unsigned long long)pos, (unsigned long long)t->begin);
        pos = t->end;
        prev = t->name;
    }
    free(by_range);
    if (c->st == F8_OK && pos != data_size)
        fail(c, "the last %llu bytes of the data belong to no tensor (trailing bytes are not allowed)",
             (unsigned long long)(data_size - pos));
    return c->st == F8_OK;
}

f8_status f8i_st_header_length(const unsigned char *prefix, uint64_t file_size, uint64_t *length, char *err,
                               size_t err_size)
{
    if (file_size < 8) {
        snprintf(err, err_size, "%llu bytes, fewer than the 8 of the header length", (unsigned long long)file_size);
        return F8_ERR_INVALID_ARGUMENT;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | prefix[i];
    if (n > F8I_ST_MAX_HEADER || n > file_size - 8) {
        snprintf(err, err_size, "header length %llu exceeds %s (%llu bytes)", (unsigned long long)n,
                 n > F8I_ST_MAX_HEADER ? "the 100 MB limit" : "the rest of the file",
                 (unsigned long long)(n > F8I_ST_MAX_HEADER ? F8I_ST_MAX_HEADER : file_size - 8));
        return F8_ERR_INVALID_ARGUMENT;
    }
    *length = n;
    return F8_OK;
}

void f8i_st_header_free(f8i_st_header *h)
{
    for (size_t i = 0; i < h->n_tensors; i++) free(h->tensors[i].name);
    for (size_t i = 0; i < h->n_meta; i++) {
        free(h->meta[i].key);
        free(h->meta[i].value);
    }
    free(h->tensors);
    free(h->meta);
    memset(h, 0, sizeof *h);
}

f8_status f8i_st_parse(const unsigned char *json, size_t len, uint64_t data_size, f8i_st_header *h, char *err,
                       size_t err_size)
{
    cursor c = {SIZE_MAX, err, err_size, F8_OK};
    memset(h, 0, sizeof *h);
    /* the grammar nests three deep: root -> tensor -> shape */
    f8_json *root = NULL;
    char why[400];
    f8_status st = f8_json_parse((const char *)json, len, 3, &root, why, sizeof why);
    if (st != F8_OK) {
        snprintf(err, err_size, "header %s", why);
        return st;
    }
    if (want(&c, root, F8_JSON_OBJECT, "the header")) {
        h->tensors = (f8i_st_tensor *)calloc(root->count + 1, sizeof *h->tensors);
        h->cap_tensors = root->count + 1;
        if (!h->tensors) out_of_memory(&c);
    }
    for (const f8_json *e = c.st == F8_OK ? root->child : NULL; e && c.st == F8_OK; e = e->next) {
        c.at = e->offset;
        if (strlen(e->key) != e->key_len) {
            fail(&c, "\\u0000 in a tensor name (names are C strings)");
        } else if (!strcmp(e->key, "__metadata__")) {
            h->has_meta = 1;
            parse_metadata(&c, e, h);
        } else {
            f8i_st_tensor *t = &h->tensors[h->n_tensors];
            if (!(t->name = (char *)malloc(e->key_len + 1))) {
                out_of_memory(&c);
                break;
            }
            memcpy(t->name, e->key, e->key_len + 1);
            h->n_tensors++;
            parse_tensor(&c, e, t);
        }
    }
    f8_json_free(root);
    if (c.st == F8_OK) check_claims(&c, h, data_size);
    if (c.st != F8_OK) f8i_st_header_free(h);
    return c.st;
}

/* ---- writer ------------------------------------------------------------ */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const void *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char *p = (unsigned char *)realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void put_lit(buf *b, const char *s) { put(b, s, strlen(s)); }

static void put_u64(buf *b, uint64_t v)
{
    char s[24];
    int k = snprintf(s, sizeof s, "%llu", (unsigned long long)v);
    put(b, s, (size_t)k);
}

/* A JSON string: '"' and '\' escaped, control bytes as \n-style or \u00XX,
 * everything else (UTF-8 included) as is. */
static void put_string(buf *b, const char *s)
{
    put(b, "\"", 1);
    for (const unsigned char *r = (const unsigned char *)s; *r; r++) {
        char e[8];
        const char *named = *r == '"' ? "\\\"" : *r == '\\' ? "\\\\" : *r == '\n' ? "\\n" : *r == '\t' ? "\\t"
                          : *r == '\r' ? "\\r" : *r == '\b' ? "\\b" : *r == '\f' ? "\\f" : NULL;
        if (named) put_lit(b, named);
        else if (*r < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", *r);
            put_lit(b, e);
        } else
            put(b, r, 1);
    }
    put(b, "\"", 1);
}

unsigned char *f8i_st_write_header(const f8i_ck_entry *const *entries, const uint64_t *begin, size_t n,
                                   const char *const *meta_keys, const char *const *meta_values, size_t n_meta,
                                   size_t *size)
{
    buf b = {NULL, 0, 0, 0};
    put(&b, "\0\0\0\0\0\0\0\0", 8); /* the length, filled in below */
    /* __metadata__ first, as the reference writer does. */
    put_lit(&b, "{");
    if (n_meta) {
        put_lit(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < n_meta; i++) {
            if (i) put_lit(&b, ",");
            put_string(&b, meta_keys[i]);
            put_lit(&b, ":");
            put_string(&b, meta_values[i]);
        }
        put_lit(&b, "}");
    }
    for (size_t i = 0; i < n; i++) {
        const f8i_ck_entry *e = entries[i];
        if (i || n_meta) put_lit(&b, ",");
        put_string(&b, e->name);
        put_lit(&b, ":{\"dtype\":\"");
        put_lit(&b, f8i_ck_dtype_name(e->dtype));
        put_lit(&b, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) put_lit(&b, ",");
            put_u64(&b, (uint64_t)e->shape[d]);
        }
        put_lit(&b, "],\"data_offsets\":[");
        put_u64(&b, begin[i]);
        put_lit(&b, ",");
        put_u64(&b, begin[i] + e->bytes);
        put_lit(&b, "]}");
    }
    put_lit(&b, "}");
    while (!b.oom && b.n % 8) put_lit(&b, " ");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    uint64_t len = b.n - 8;
    for (int i = 0; i < 8; i++) b.p[i] = (unsigned char)(len >> (8 * i));
    *size = b.n;
    return b.p;
}
