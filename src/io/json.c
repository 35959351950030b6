/*
 * json.c — the strict JSON reader of json.h.
 *
 * Design note. Two passes of one recursive-descent parser over the text.
 * The first validates everything but duplicate keys and counts the values;
 * the second, over text now known to be good, builds the tree into one
 * allocation sized from that count: the nodes in preorder (an array or
 * object's first child is the node after it), then every decoded string,
 * key and number literal, each NUL-terminated (decoding never grows a
 * string, so the text's length bounds them). Duplicate keys are found in
 * the second pass, when an object closes, by sorting its members' keys: a
 * hostile object of n keys costs n log n, not n². Recursion is bounded by
 * max_depth, so the stack is too; every byte read goes through the cursor's
 * bound.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "f8.h"

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

int f8_utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

static const char *const KIND_NAMES[] = {"null", "false", "true", "number", "string", "array", "object"};

const char *f8_json_kind_name(f8_json_kind kind)
{
    return (unsigned)kind <= F8_JSON_OBJECT ? KIND_NAMES[kind] : "?";
}

typedef struct parser {
    const unsigned char *base, *p, *end;
    int max_depth;
    /* the second pass only: where nodes and strings go, and the scratch
     * for sorting an object's members */
    f8_json *nodes;
    size_t n_nodes;
    char *strings;
    size_t n_strings;
    const f8_json **scratch;
    char *err;
    size_t err_size;
    f8_status st; /* the first error */
    char what[16]; /* found()'s words */
} parser;

/* Record the first error, at the byte `at`, with its line and column. */
static int fail_at(parser *c, const unsigned char *at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail_at(parser *c, const unsigned char *at, const char *fmt, ...)
{
    if (c->st != F8_OK) return 0;
    c->st = F8_ERR_INVALID_ARGUMENT;
    size_t line = 1, col = 1;
    for (const unsigned char *q = c->base; q < at; q++) {
        if (*q == '\n') line++, col = 1;
        else if ((*q & 0xC0) != 0x80) col++; /* characters, not bytes */
    }
    int k = snprintf(c->err, c->err_size, "byte %zu (line %zu, column %zu): ", (size_t)(at - c->base), line, col);
    if (k >= 0 && (size_t)k < c->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + k, c->err_size - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return 0;
}

/* What stands at c->p, for a message. */
static const char *found(parser *c)
{
    if (c->p == c->end) return "the end of the text";
    if (*c->p >= 0x20 && *c->p < 0x7F) snprintf(c->what, sizeof c->what, "'%c'", *c->p);
    else snprintf(c->what, sizeof c->what, "byte 0x%02x", *c->p);
    return c->what;
}

static void skip_ws(parser *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
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

static size_t utf8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at c->p (its opening quote): validated, and in the second pass
 * decoded into the string area (*out, *out_len). */
static int parse_string(parser *c, const char **out, size_t *out_len)
{
    const unsigned char *open = c->p++;
    char *o = c->strings ? c->strings + c->n_strings : NULL;
    size_t n = 0;
    for (;;) {
        if (c->p == c->end) return fail_at(c, open, "a string that never ends");
        const unsigned char *r = c->p;
        unsigned char b = *r;
        if (b == '"') break;
        if (b < 0x20) return fail_at(c, r, "raw control byte 0x%02x in a string (write it as an escape)", b);
        if (b >= 0x80) {
            size_t k = utf8_seq(r, (size_t)(c->end - r));
            if (!k) return fail_at(c, r, "invalid UTF-8 in a string");
            if (o) memcpy(o + n, r, k);
            n += k;
            c->p += k;
            continue;
        }
        if (b != '\\') {
            if (o) o[n] = (char)b;
            n++;
            c->p++;
            continue;
        }
        if (c->end - r < 2) return fail_at(c, open, "a string that never ends");
        const char *simple = strchr("\"\\/bfnrt", r[1]);
        if (r[1] && simple) {
            if (o) o[n] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            n++;
            c->p += 2;
            continue;
        }
        if (r[1] != 'u')
            return fail_at(c, r, "unknown escape \\%c", r[1] >= 0x20 && r[1] < 0x7F ? r[1] : '?');
        uint32_t cp, lo;
        if (c->end - r < 6 || !hex4(r + 2, &cp)) return fail_at(c, r, "\\u needs four hex digits");
        size_t used = 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return fail_at(c, r, "unpaired low surrogate \\u%04X", (unsigned)cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (c->end - r < 12 || r[6] != '\\' || r[7] != 'u' || !hex4(r + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return fail_at(c, r, "high surrogate \\u%04X not followed by a low one", (unsigned)cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            used = 12;
        }
        char tmp[4];
        size_t k = utf8_put(o ? o + n : tmp, cp);
        n += k;
        c->p += used;
    }
    c->p++; /* the closing quote */
    if (o) {
        o[n] = 0;
        *out = o;
        *out_len = n;
        c->n_strings += n + 1;
    }
    return 1;
}

static int digit(const parser *c) { return c->p < c->end && *c->p >= '0' && *c->p <= '9'; }

/* A number at c->p: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(parser *c, f8_json *v)
{
    const unsigned char *s = c->p;
    int integral = 1;
    if (*c->p == '-') c->p++;
    if (!digit(c)) return fail_at(c, s, "a number needs a digit after its sign");
    if (*c->p == '0' && c->end - c->p > 1 && c->p[1] >= '0' && c->p[1] <= '9')
        return fail_at(c, s, "a number with a leading zero");
    while (digit(c)) c->p++;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        integral = 0;
        if (!digit(c)) return fail_at(c, s, "a number needs a digit after its decimal point");
        while (digit(c)) c->p++;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        integral = 0;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (!digit(c)) return fail_at(c, s, "a number needs a digit in its exponent");
        while (digit(c)) c->p++;
    }
    if (!v) return 1;
    const size_t len = (size_t)(c->p - s);
    char *lit = c->strings + c->n_strings;
    memcpy(lit, s, len);
    lit[len] = 0;
    c->n_strings += len + 1;
    v->str = lit;
    v->len = len;
    v->num = strtod(lit, NULL);
    if (integral) {
        /* exactly, digit by digit: the negative range is one larger */
        const int neg = lit[0] == '-';
        uint64_t m = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        v->is_int = 1;
        for (const char *d = lit + neg; *d; d++) {
            uint64_t x = (uint64_t)(*d - '0');
            if (m > (limit - x) / 10) {
                v->is_int = 0;
                break;
            }
            m = m * 10 + x;
        }
        if (v->is_int) v->i = neg ? (m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m) : (int64_t)m;
    }
    return 1;
}

static int literal(parser *c, const char *word)
{
    const size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return fail_at(c, c->p, "not a JSON value");
    c->p += n;
    return 1;
}

static int cmp_key(const void *a, const void *b)
{
    const f8_json *x = *(const f8_json *const *)a, *y = *(const f8_json *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int r = memcmp(x->key, y->key, n);
    if (r) return r;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len ? 1 : (x->offset < y->offset ? -1 : 1);
}

/* The second pass, as an object closes: no key twice. */
static int check_duplicates(parser *c, const f8_json *obj)
{
    size_t k = 0;
    for (const f8_json *m = obj->child; m; m = m->next) c->scratch[k++] = m;
    if (k < 2) return 1;
    qsort(c->scratch, k, sizeof *c->scratch, cmp_key);
    for (size_t i = 1; i < k; i++) {
        const f8_json *a = c->scratch[i - 1], *b = c->scratch[i];
        if (a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0) {
            const f8_json *later = a->offset > b->offset ? a : b;
            return fail_at(c, c->base + later->key_offset, "key \"%.64s\" appears twice in one object", later->key);
        }
    }
    return 1;
}

static int parse_value(parser *c, int depth, const char *key, size_t key_len, size_t key_offset);

/* An array or object at c->p; v is its node (NULL in the first pass). */
static int parse_container(parser *c, f8_json *v, int depth)
{
    const unsigned char *open = c->p;
    const int obj = *c->p == '{';
    const unsigned char close = obj ? '}' : ']';
    if (depth >= c->max_depth)
        return fail_at(c, open, "nesting deeper than %d arrays and objects", c->max_depth);
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 1;
    }
    f8_json *last = NULL;
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        skip_ws(c);
        const size_t key_offset = (size_t)(c->p - c->base);
        if (obj) {
            if (c->p == c->end || *c->p != '"')
                return fail_at(c, c->p, "expected a key (a string) in an object, found %s", found(c));
            if (!parse_string(c, &key, &key_len)) return 0;
            skip_ws(c);
            if (c->p == c->end || *c->p != ':')
                return fail_at(c, c->p, "expected ':' after the key, found %s", found(c));
            c->p++;
        }
        size_t index = c->n_nodes;
        if (!parse_value(c, depth + 1, key, key_len, key_offset)) return 0;
        if (v) {
            f8_json *child = &c->nodes[index];
            if (last) last->next = child;
            else v->child = child;
            last = child;
        }
        if (v) v->count++;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == close) {
            c->p++;
            break;
        }
        return fail_at(c, c->p, "expected ',' or '%c' in the %s opened at byte %zu, found %s", close,
                       obj ? "object" : "array", (size_t)(open - c->base), found(c));
    }
    return v && obj ? check_duplicates(c, v) : 1;
}

static int parse_value(parser *c, int depth, const char *key, size_t key_len, size_t key_offset)
{
    skip_ws(c);
    if (c->p == c->end) return fail_at(c, c->p, "expected a value, found the end of the text");
    f8_json *v = NULL;
    if (c->nodes) {
        v = &c->nodes[c->n_nodes];
        memset(v, 0, sizeof *v);
        v->offset = (size_t)(c->p - c->base);
        v->key = key;
        v->key_len = key_len;
        v->key_offset = key_offset;
    }
    c->n_nodes++;
    switch (*c->p) {
    case '{':
    case '[':
        if (v) v->kind = *c->p == '{' ? F8_JSON_OBJECT : F8_JSON_ARRAY;
        return parse_container(c, v, depth);
    case '"': {
        const char *s = NULL;
        size_t n = 0;
        if (!parse_string(c, &s, &n)) return 0;
        if (v) v->kind = F8_JSON_STRING, v->str = s, v->len = n;
        return 1;
    }
    case 't':
        if (v) v->kind = F8_JSON_TRUE;
        return literal(c, "true");
    case 'f':
        if (v) v->kind = F8_JSON_FALSE;
        return literal(c, "false");
    case 'n':
        if (v) v->kind = F8_JSON_NULL;
        return literal(c, "null");
    default:
        if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) {
            if (v) v->kind = F8_JSON_NUMBER;
            return parse_number(c, v);
        }
        if (*c->p >= 0x20 && *c->p < 0x7F)
            return fail_at(c, c->p, "'%c' does not begin a JSON value (NaN, Infinity, '+' and bare words are not JSON)",
                           *c->p);
        return fail_at(c, c->p, "byte 0x%02x does not begin a JSON value", *c->p);
    }
}

/* One pass over the whole text: one value, whitespace around it. */
static int parse_text(parser *c)
{
    c->p = c->base;
    if (c->end - c->p >= 3 && c->p[0] == 0xEF && c->p[1] == 0xBB && c->p[2] == 0xBF)
        return fail_at(c, c->p, "a byte-order mark (JSON text has none)");
    if (!parse_value(c, 0, NULL, 0, 0)) return 0;
    skip_ws(c);
    if (c->p != c->end) return fail_at(c, c->p, "more after the value (only whitespace may follow it)");
    return 1;
}

f8_status f8_json_parse(const char *text, size_t len, int max_depth, f8_json **root, char *err, size_t err_size)
{
    *root = NULL;
    if (err_size) err[0] = 0;
    parser c;
    memset(&c, 0, sizeof c);
    c.base = (const unsigned char *)text;
    c.end = c.base + len;
    c.max_depth = max_depth > 0 ? max_depth : F8_JSON_DEPTH;
    c.err = err;
    c.err_size = err_size;
    c.st = F8_OK;
    if (!text && len) return fail_at(&c, c.base, "no text"), c.st;
    if (!parse_text(&c)) return c.st;

    /* Second pass: nodes, then strings (each string's decoded bytes plus
     * its NUL; keys and values together take at most len + 2 per node). */
    const size_t nodes = c.n_nodes;
    if (nodes > (SIZE_MAX - len) / (sizeof(f8_json) + 2)) {
        snprintf(err, err_size, "out of host memory for a JSON tree of %zu values", nodes);
        return F8_ERR_OUT_OF_MEMORY;
    }
    const size_t bytes = nodes * sizeof(f8_json) + len + 2 * nodes + 1;
    f8_json *mem = (f8_json *)malloc(bytes);
    c.scratch = (const f8_json **)malloc(nodes * sizeof *c.scratch);
    if (!mem || !c.scratch) {
        free(mem);
        free(c.scratch);
        snprintf(err, err_size, "out of host memory for a JSON tree of %zu values (%zu bytes)", nodes, bytes);
        return F8_ERR_OUT_OF_MEMORY;
    }
    c.nodes = mem;
    c.n_nodes = 0;
    c.strings = (char *)(mem + nodes);
    c.n_strings = 0;
    int ok = parse_text(&c);
    free(c.scratch);
    if (!ok) {
        free(mem);
        return c.st;
    }
    *root = mem;
    return F8_OK;
}

void f8_json_free(f8_json *root) { free(root); }

const f8_json *f8_json_get(const f8_json *obj, const char *key)
{
    if (!obj || obj->kind != F8_JSON_OBJECT) return NULL;
    const size_t n = strlen(key);
    for (const f8_json *m = obj->child; m; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0) return m;
    return NULL;
}
