/*
 * fuzz_json.c — the libFuzzer target for f8's strict JSON reader
 * (src/io/json.h), which reads the safetensors header and config.json.
 *
 * The input is the text. The parser refuses it (a message beginning
 * "byte N " with N inside the text, no tree) or returns a tree whose every
 * property is checked: strings and keys valid UTF-8 of their stated length,
 * no key twice in an object, counts equal to the children walked, offsets
 * inside the text and increasing in preorder, integer numbers equal to
 * strtoll of their literal, the depth within the limit. The tree is then
 * written back as JSON and parsed again: the two trees must be equal (same
 * kinds, keys, strings, numbers' literals). A broken property aborts.
 *
 * tests/test_fuzz_json.c replays fuzz/corpus_json with the normal toolchain.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "f8.h"

#include "fuzz.h"

void f8_fuzz_teardown(void) {}

static void require(int cond)
{
    if (!cond) abort();
}

enum { DEPTH = 16 };

typedef struct out {
    char *p;
    size_t n, cap;
} out;

static void put(out *o, const void *s, size_t n)
{
    if (o->n + n + 1 > o->cap) {
        o->cap = 2 * (o->n + n + 1);
        o->p = (char *)realloc(o->p, o->cap);
        require(o->p != NULL);
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
}

static void put_string(out *o, const char *s, size_t n)
{
    put(o, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        char e[8];
        if (b == '"' || b == '\\') {
            e[0] = '\\', e[1] = (char)b;
            put(o, e, 2);
        } else if (b < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", b);
            put(o, e, 6);
        } else
            put(o, &s[i], 1);
    }
    put(o, "\"", 1);
}

/* Check v (at depth) and write it to o; returns the values in its subtree. */
static size_t walk(const f8_json *v, int depth, size_t size, size_t *last_offset, out *o)
{
    require(depth < DEPTH + 1 && v->offset < size);
    require(*last_offset == SIZE_MAX || v->offset > *last_offset);
    *last_offset = v->offset;
    size_t nodes = 1;
    switch (v->kind) {
    case F8_JSON_NULL: put(o, "null", 4); break;
    case F8_JSON_TRUE: put(o, "true", 4); break;
    case F8_JSON_FALSE: put(o, "false", 5); break;
    case F8_JSON_NUMBER:
        require(v->len > 0 && strlen(v->str) == v->len);
        if (v->is_int) {
            errno = 0;
            long long x = strtoll(v->str, NULL, 10);
            require(errno == 0 && x == v->i);
        }
        put(o, v->str, v->len);
        break;
    case F8_JSON_STRING:
        require(v->str[v->len] == 0 && f8_utf8_valid((const unsigned char *)v->str, v->len));
        put_string(o, v->str, v->len);
        break;
    case F8_JSON_ARRAY:
    case F8_JSON_OBJECT: {
        const int obj = v->kind == F8_JSON_OBJECT;
        require(depth < DEPTH);
        put(o, obj ? "{" : "[", 1);
        size_t k = 0;
        for (const f8_json *c = v->child; c; c = c->next, k++) {
            require((c->key != NULL) == obj);
            if (obj) {
                require(c->key[c->key_len] == 0 && f8_utf8_valid((const unsigned char *)c->key, c->key_len));
                require(c->key_offset < c->offset && c->key_offset > v->offset);
                for (const f8_json *d = v->child; d != c; d = d->next)
                    require(d->key_len != c->key_len || memcmp(d->key, c->key, c->key_len) != 0);
                if (strlen(c->key) == c->key_len) require(f8_json_get(v, c->key) == c);
            }
            if (k) put(o, ",", 1);
            if (obj) {
                put_string(o, c->key, c->key_len);
                put(o, ":", 1);
            }
            nodes += walk(c, depth + 1, size, last_offset, o);
        }
        require(k == v->count && (k == 0) == (v->child == NULL));
        put(o, obj ? "}" : "]", 1);
        break;
    }
    default: require(0);
    }
    return nodes;
}

/* Same tree: kinds, keys, strings and number literals. */
static void same(const f8_json *a, const f8_json *b)
{
    require(a->kind == b->kind && a->count == b->count && a->key_len == b->key_len);
    require(!a->key || memcmp(a->key, b->key, a->key_len) == 0);
    if (a->kind == F8_JSON_STRING || a->kind == F8_JSON_NUMBER)
        require(a->len == b->len && memcmp(a->str, b->str, a->len) == 0 && a->is_int == b->is_int && a->i == b->i);
    const f8_json *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next) same(x, y);
    require(!x && !y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "";
    f8_json *root = (f8_json *)err;
    f8_status st = f8_json_parse((const char *)data, size, DEPTH, &root, err, sizeof err);
    if (st != F8_OK) {
        size_t at = SIZE_MAX;
        require(st == F8_ERR_INVALID_ARGUMENT && root == NULL);
        require(sscanf(err, "byte %zu ", &at) == 1 && at <= size);
        return 0;
    }
    require(root != NULL);
    out o = {NULL, 0, 0};
    size_t last = SIZE_MAX;
    walk(root, 0, size, &last, &o);
    f8_json *again = NULL;
    st = f8_json_parse(o.p, o.n, DEPTH, &again, err, sizeof err);
    require(st == F8_OK && again != NULL);
    same(root, again);
    f8_json_free(again);
    f8_json_free(root);
    free(o.p);
    return 0;
}
