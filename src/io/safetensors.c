/*
 * safetensors.c — the safetensors header: a strict reader and a writer.
 *
 * Design note. A checkpoint file is untrusted input, so the reader is a
 * recursive-descent parser for exactly the JSON the format allows and no
 * more: one object of tensor objects (and __metadata__, an object of
 * strings), arrays of non-negative integers, strings. The grammar fixes the
 * nesting (root → tensor → shape: depth 3), so nothing recurses on input and
 * no depth counter is needed. Every byte read goes through the cursor's
 * bound; a string is measured first and decoded into one allocation of its
 * raw length (decoding never grows it); integers are checked for overflow
 * digit by digit. After parsing, the header's claims are checked against the
 * data region as the reference implementation does: the byte ranges must
 * tile it exactly. Anything else is an error naming the header byte, never a
 * guess.
 *
 * The writer emits compact JSON with the same escaping rules, padded with
 * spaces to 8 bytes (so the data starts 8-byte aligned in the file).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char b = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0; /* no overlongs */
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F; /* nothing past U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

int f8i_utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* ---- reader ------------------------------------------------------------ */

typedef struct cursor {
    const unsigned char *base, *p, *end;
    char *err;
    size_t err_size;
    f8_status st; /* first error */
} cursor;

/* Record the first error, prefixed with the header byte it was found at
 * (unless base is NULL: the checks after parsing have no position). */
static int fail(cursor *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int fail(cursor *c, const char *fmt, ...)
{
    if (c->st != F8_OK) return 0;
    c->st = F8_ERR_INVALID_ARGUMENT;
    int k = c->base ? snprintf(c->err, c->err_size, "header byte %zu: ", (size_t)(c->p - c->base)) : 0;
    if (k >= 0 && (size_t)k < c->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + k, c->err_size - (size_t)k, fmt, ap);
        va_end(ap);
    }
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

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* After whitespace, is the next byte ch? (Does not consume it.) */
static int peek(cursor *c, unsigned char ch)
{
    skip_ws(c);
    return c->p < c->end && *c->p == ch;
}

static int expect(cursor *c, unsigned char ch, const char *where)
{
    if (peek(c, ch)) {
        c->p++;
        return 1;
    }
    if (c->p == c->end) return fail(c, "expected '%c' %s, found the end of the header", ch, where);
    return fail(c, "expected '%c' %s, found byte 0x%02x", ch, where, *c->p);
}

static int hex4(const unsigned char *s, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char h = s[i];
        uint32_t d = (h >= '0' && h <= '9') ? (uint32_t)(h - '0')
                   : (h >= 'a' && h <= 'f') ? (uint32_t)(h - 'a' + 10)
                   : (h >= 'A' && h <= 'F') ? (uint32_t)(h - 'A' + 10) : 16u;
        if (d == 16) return 0;
        *v = *v * 16 + d;
    }
    return 1;
}

static size_t utf8_put(unsigned char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode one \uXXXX escape (or a surrogate pair) starting after "\u" at r,
 * with q the end of the string. Returns the bytes consumed, 0 on error. */
static size_t decode_u(cursor *c, const unsigned char *r, const unsigned char *q, uint32_t *cp)
{
    if (q - r < 4 || !hex4(r, cp)) return (size_t)fail(c, "\\u needs four hex digits");
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) return (size_t)fail(c, "unpaired low surrogate \\u%04X", (unsigned)*cp);
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        uint32_t lo;
        if (q - r < 10 || r[4] != '\\' || r[5] != 'u' || !hex4(r + 6, &lo) || lo < 0xDC00 || lo > 0xDFFF)
            return (size_t)fail(c, "high surrogate \\u%04X not followed by a low one", (unsigned)*cp);
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
        return 10;
    }
    if (*cp == 0) return (size_t)fail(c, "\\u0000 in a string (names and metadata are C strings)");
    return 4;
}

/* A JSON string, decoded to a malloc'd NUL-terminated UTF-8 string. */
static char *parse_string(cursor *c, const char *what)
{
    if (!peek(c, '"')) {
        if (c->p == c->end) fail(c, "expected a string (%s), found the end of the header", what);
        else fail(c, "expected a string (%s), found byte 0x%02x", what, *c->p);
        return NULL;
    }
    /* Measure: find the closing quote, stepping over escaped pairs. */
    const unsigned char *s = ++c->p, *q = s;
    while (q < c->end && *q != '"') {
        if (*q == '\\' && c->end - q < 2) break;
        q += *q == '\\' ? 2 : 1;
    }
    if (q >= c->end) {
        fail(c, "unterminated string (%s)", what);
        return NULL;
    }
    /* Decode: every escape is at least as long as what it decodes to. */
    unsigned char *out = (unsigned char *)malloc((size_t)(q - s) + 1);
    if (!out) {
        out_of_memory(c);
        return NULL;
    }
    size_t n = 0;
    for (const unsigned char *r = s; r < q;) {
        c->p = r; /* error positions point into the string */
        unsigned char b = *r;
        if (b < 0x20) {
            fail(c, "control byte 0x%02x in a string (%s)", b, what);
            break;
        }
        if (b >= 0x80) {
            size_t k = utf8_seq(r, (size_t)(q - r));
            if (!k) {
                fail(c, "invalid UTF-8 in a string (%s)", what);
                break;
            }
            memcpy(out + n, r, k);
            n += k;
            r += k;
            continue;
        }
        if (b != '\\') {
            out[n++] = b;
            r++;
            continue;
        }
        unsigned char e = r[1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            out[n++] = (unsigned char)decoded[simple - "\"\\/bfnrt"];
            r += 2;
        } else if (e == 'u') {
            uint32_t cp;
            size_t k = decode_u(c, r + 2, q, &cp);
            if (!k) break;
            n += utf8_put(out + n, cp);
            r += 2 + k;
        } else {
            fail(c, "unknown escape \\%c in a string (%s)", e >= 0x20 && e < 0x7F ? e : '?', what);
            break;
        }
    }
    if (c->st != F8_OK) {
        free(out);
        return NULL;
    }
    out[n] = 0;
    c->p = q + 1;
    return (char *)out;
}

/* A non-negative integer up to INT64_MAX, in JSON's form (no leading zeros,
 * no sign, fraction or exponent). */
static int parse_uint(cursor *c, uint64_t *v, const char *what)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == '-') return fail(c, "negative number (%s)", what);
    if (c->p == c->end || *c->p < '0' || *c->p > '9') return fail(c, "expected a non-negative integer (%s)", what);
    if (*c->p == '0' && c->end - c->p > 1 && c->p[1] >= '0' && c->p[1] <= '9')
        return fail(c, "number with a leading zero (%s)", what);
    *v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        uint64_t d = (uint64_t)(*c->p - '0');
        if (*v > ((uint64_t)INT64_MAX - d) / 10) return fail(c, "number past 2^63 - 1 (%s)", what);
        *v = *v * 10 + d;
        c->p++;
    }
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return fail(c, "number with a fraction or exponent (%s)", what);
    return 1;
}

/* After an element: ',' (more follow; returns 1) or `close` (returns 0). */
static int more(cursor *c, unsigned char close, const char *where, int *ok)
{
    if (peek(c, ',')) {
        c->p++;
        return 1;
    }
    *ok = expect(c, close, where);
    return 0;
}

static int parse_shape(cursor *c, f8i_st_tensor *t)
{
    if (!expect(c, '[', "to open a shape")) return 0;
    t->ndim = 0;
    if (peek(c, ']')) {
        c->p++;
        return 1;
    }
    int ok = 1;
    do {
        uint64_t d;
        if (t->ndim == F8I_CK_MAX_DIMS)
            return fail(c, "tensor \"%.64s\": more than %d dimensions", t->name, F8I_CK_MAX_DIMS);
        if (!parse_uint(c, &d, "a dimension")) return 0;
        t->shape[t->ndim++] = (int64_t)d;
    } while (more(c, ']', "after a dimension", &ok));
    return ok;
}

static int parse_tensor(cursor *c, f8i_st_tensor *t)
{
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    int seen[3] = {0, 0, 0};
    if (!expect(c, '{', "to open a tensor's description")) return 0;
    int ok = 1;
    if (peek(c, '}')) c->p++;
    else do {
        char *key = parse_string(c, "a tensor field");
        if (!key) return 0;
        int f = 0;
        while (f < 3 && strcmp(key, fields[f])) f++;
        if (f == 3) {
            fail(c, "tensor \"%.64s\": unknown field \"%.32s\"", t->name, key);
            free(key);
            return 0;
        }
        free(key);
        if (seen[f]) return fail(c, "tensor \"%.64s\": field \"%s\" given twice", t->name, fields[f]);
        seen[f] = 1;
        if (!expect(c, ':', "after a field name")) return 0;
        if (f == 0) {
            char *s = parse_string(c, "a dtype");
            if (!s) return 0;
            int d = 0;
            while (d < F8I_CK_DTYPE_COUNT && strcmp(s, dtype_names[d])) d++;
            if (d == F8I_CK_DTYPE_COUNT) {
                fail(c, "tensor \"%.64s\": unknown dtype \"%.16s\" (f8 reads F32, BF16, F8_E4M3, F8_E5M2, I32, I64, "
                        "U8)", t->name, s);
                free(s);
                return 0;
            }
            free(s);
            t->dtype = (f8i_ck_dtype)d;
        } else if (f == 1) {
            if (!parse_shape(c, t)) return 0;
        } else {
            if (!expect(c, '[', "to open data_offsets") || !parse_uint(c, &t->begin, "a data offset") ||
                !expect(c, ',', "between the two data offsets") || !parse_uint(c, &t->end, "a data offset") ||
                !expect(c, ']', "after two data offsets"))
                return 0;
        }
    } while (more(c, '}', "after a tensor field", &ok));
    if (!ok) return 0;
    for (int f = 0; f < 3; f++)
        if (!seen[f]) return fail(c, "tensor \"%.64s\": no \"%s\"", t->name, fields[f]);
    return 1;
}

static int parse_metadata(cursor *c, f8i_st_header *h)
{
    if (!expect(c, '{', "to open __metadata__")) return 0;
    int ok = 1;
    if (peek(c, '}')) {
        c->p++;
        return 1;
    }
    do {
        if (h->n_meta == h->cap_meta) {
            size_t cap = h->cap_meta ? 2 * h->cap_meta : 8;
            f8i_st_pair *m = (f8i_st_pair *)realloc(h->meta, cap * sizeof *m);
            if (!m) return out_of_memory(c);
            h->meta = m;
            h->cap_meta = cap;
        }
        f8i_st_pair *m = &h->meta[h->n_meta];
        m->key = parse_string(c, "a metadata key");
        if (!m->key) return 0;
        m->value = NULL;
        h->n_meta++; /* freed with the header from here on (value may be NULL) */
        if (!expect(c, ':', "after a metadata key")) return 0;
        m->value = parse_string(c, "a metadata value (values are strings)");
        if (!m->value) return 0;
    } while (more(c, '}', "after a metadata pair", &ok));
    return ok;
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
    c->base = NULL; /* no byte position from here on */
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
    cursor c = {json, json, json + len, err, err_size, F8_OK};
    memset(h, 0, sizeof *h);
    int ok = expect(&c, '{', "to open the header (it must be a JSON object)");
    if (ok && peek(&c, '}')) c.p++;
    else while (ok) {
        char *key = parse_string(&c, "a tensor name");
        if (!key || !expect(&c, ':', "after a tensor name")) {
            free(key);
            break;
        }
        if (!strcmp(key, "__metadata__")) {
            free(key);
            if (h->has_meta) {
                fail(&c, "__metadata__ appears twice");
                break;
            }
            h->has_meta = 1;
            if (!parse_metadata(&c, h)) break;
        } else {
            if (h->n_tensors == h->cap_tensors) {
                size_t cap = h->cap_tensors ? 2 * h->cap_tensors : 16;
                f8i_st_tensor *t = (f8i_st_tensor *)realloc(h->tensors, cap * sizeof *t);
                if (!t) {
                    free(key);
                    out_of_memory(&c);
                    break;
                }
                h->tensors = t;
                h->cap_tensors = cap;
            }
            f8i_st_tensor *t = &h->tensors[h->n_tensors++];
            memset(t, 0, sizeof *t);
            t->name = key;
            if (!parse_tensor(&c, t)) break;
        }
        if (!more(&c, '}', "after a header entry", &ok)) break;
    }
    if (c.st == F8_OK) {
        skip_ws(&c);
        if (c.p != c.end) fail(&c, "bytes after the header object (only whitespace may follow it)");
    }
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
