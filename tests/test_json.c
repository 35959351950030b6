/*
 * test_json.c — the strict JSON reader (src/io/json.h) against RFC 8259 and
 * RFC 3629: what it accepts with the values the RFCs give (decoded escapes
 * and surrogate pairs, integers exactly at the int64 limits, doubles), what
 * it refuses with the byte the message names, duplicate keys, the depth
 * limit, and a deep or wide hostile text refused or read in bounded time.
 */
#include "check.h"
#include "f8.h"

static f8_json *parse(const char *text, int depth, char *err, size_t n)
{
    f8_json *root = NULL;
    f8_status st = f8_json_parse(text, strlen(text), depth, &root, err, n);
    CHECK((st == F8_OK) == (root != NULL), "'%s': status %s with root %p", text, f8_status_string(st), (void *)root);
    return root;
}

static void accepts(void)
{
    char err[256];
    f8_json *r = parse(" {\"a\": [1, -0, 2.5e1, true, false, null, \"x\"], \"b\": {}, \"c\": []}\r\n", 0, err,
                        sizeof err);
    CHECK(r && r->kind == F8_JSON_OBJECT && r->count == 3, "object of 3: %s", err);
    if (!r) return;
    const f8_json *a = f8_json_get(r, "a"), *b = f8_json_get(r, "b"), *c = f8_json_get(r, "c");
    CHECK(a && a->kind == F8_JSON_ARRAY && a->count == 7, "a is an array of 7");
    CHECK(b && b->kind == F8_JSON_OBJECT && b->count == 0 && !b->child, "b is an empty object");
    CHECK(c && c->kind == F8_JSON_ARRAY && c->count == 0 && !c->child, "c is an empty array");
    CHECK(!f8_json_get(r, "d") && !f8_json_get(a, "a"), "absent key, lookup in an array");
    const f8_json_kind kinds[7] = {F8_JSON_NUMBER, F8_JSON_NUMBER, F8_JSON_NUMBER, F8_JSON_TRUE,
                                    F8_JSON_FALSE, F8_JSON_NULL, F8_JSON_STRING};
    int k = 0;
    for (const f8_json *e = a ? a->child : NULL; e; e = e->next, k++)
        CHECK(k < 7 && e->kind == kinds[k] && !e->key, "element %d is a %s", k, f8_json_kind_name(e->kind));
    CHECK(k == 7, "7 elements walked, %d", k);
    const f8_json *e0 = a->child, *e1 = e0->next, *e2 = e1->next;
    CHECK(e0->is_int && e0->i == 1 && e0->num == 1.0, "1");
    CHECK(e1->is_int && e1->i == 0 && e1->num == 0.0 && signbit(e1->num), "-0 is the integer 0 (double -0.0)");
    CHECK(!e2->is_int && e2->num == 25.0 && !strcmp(e2->str, "2.5e1"), "2.5e1 is 25, not an integer");
    CHECK(a->offset == 7 && e0->offset == 8 && b->offset == 52, "offsets %zu %zu %zu", a->offset, e0->offset,
          b->offset);
    f8_json_free(r);

    /* integers at the int64 limits, one past them, fractions and exponents */
    struct {
        const char *text;
        int is_int;
        int64_t i;
        double num;
    } nums[] = {
        {"9223372036854775807", 1, INT64_MAX, 9223372036854775807.0},
        {"-9223372036854775808", 1, INT64_MIN, -9223372036854775808.0},
        {"9223372036854775808", 0, 0, 9223372036854775808.0},
        {"-9223372036854775809", 0, 0, -9223372036854775809.0},
        {"1.5", 0, 0, 1.5},
        {"1.0", 0, 0, 1.0},
        {"1e3", 0, 0, 1000.0},
        {"1E-2", 0, 0, 0.01},
        {"-0.0", 0, 0, -0.0},
        {"1e400", 0, 0, HUGE_VAL},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        r = parse(nums[i].text, 0, err, sizeof err);
        CHECK(r && r->kind == F8_JSON_NUMBER && r->is_int == nums[i].is_int && (!r->is_int || r->i == nums[i].i) &&
                  r->num == nums[i].num && r->len == strlen(nums[i].text),
              "%s: is_int %d i %lld num %.17g (%s)", nums[i].text, r ? r->is_int : -1, r ? (long long)r->i : 0,
              r ? r->num : 0.0, err);
        f8_json_free(r);
    }

    /* escapes: named ones, \u BMP, a surrogate pair, \u0000 (kept, with len) */
    r = parse("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\", \"\\ud83d\\ude00\", \"a\\u0000b\", \"\xc3\xa9\"]", 0,
              err, sizeof err);
    CHECK(r && r->count == 5, "5 strings: %s", err);
    if (r) {
        const f8_json *s = r->child;
        CHECK(s->len == 8 && !memcmp(s->str, "\"\\/\b\f\n\r\t", 9), "named escapes");
        s = s->next;
        CHECK(s->len == 5 && !strcmp(s->str, "\xc3\xa9\xe2\x82\xac"), "U+00E9 U+20AC as UTF-8");
        s = s->next;
        CHECK(s->len == 4 && !strcmp(s->str, "\xf0\x9f\x98\x80"), "U+1F600 from its surrogate pair");
        s = s->next;
        CHECK(s->len == 3 && !memcmp(s->str, "a\0b", 4) && strlen(s->str) == 1, "\\u0000 kept, len 3");
        s = s->next;
        CHECK(s->len == 2 && !strcmp(s->str, "\xc3\xa9"), "raw UTF-8 kept");
    }
    f8_json_free(r);

    /* keys decode too, and a key holding NUL is not found by a C string */
    r = parse("{\"n\\u0061me\": 1, \"k\\u0000x\": 2}", 0, err, sizeof err);
    CHECK(r && f8_json_get(r, "name") && f8_json_get(r, "name")->i == 1, "escaped key found: %s", err);
    CHECK(r && !f8_json_get(r, "k") && r->child->next->key_len == 3, "a key with NUL is not a C string");
    f8_json_free(r);

    /* a string key inside another key's value is a value, not a key */
    r = parse("{\"model_type\": \"\\\"n_layer\\\": 99\", \"n_layer\": 2}", 0, err, sizeof err);
    CHECK(r && f8_json_get(r, "n_layer")->i == 2, "the key, not the text in a value");
    f8_json_free(r);
}

static void refuses(void)
{
    struct {
        const char *text;
        size_t byte; /* where the message must point */
        const char *words;
    } bad[] = {
        {"", 0, "end of the text"},
        {"  ", 2, "end of the text"},
        {"{\"a\":1,\"a\":2}", 7, "appears twice"},
        {"{\"a\":1,\"b\":{\"x\":0,\"x\":1},\"a\":2}", 18, "\"x\" appears twice"},
        {"{\"\\u0061\":1,\"a\":2}", 12, "\"a\" appears twice"},
        {"{\"a\":1,}", 7, "expected a key"},
        {"[1,]", 3, "does not begin"},
        {"[1 2]", 3, "expected ','"},
        {"{\"a\" 1}", 5, "expected ':'"},
        {"{1:2}", 1, "expected a key"},
        {"01", 0, "leading zero"},
        {"-01", 0, "leading zero"},
        {"+1", 0, "'+' does not begin"},
        {"1.", 0, "decimal point"},
        {".5", 0, "'.' does not begin"},
        {"1e", 0, "exponent"},
        {"1e+", 0, "exponent"},
        {"-", 0, "digit after its sign"},
        {"NaN", 0, "NaN, Infinity"},
        {"Infinity", 0, "does not begin"},
        {"-Infinity", 0, "digit after its sign"},
        {"0x10", 1, "more after the value"},
        {"tru", 0, "not a JSON value"},
        {"nul", 0, "not a JSON value"},
        {"truex", 4, "more after the value"},
        {"{} {}", 3, "more after the value"},
        {"\"abc", 0, "never ends"},
        {"\"abc\\", 0, "never ends"},
        {"\"a\tb\"", 2, "control byte 0x09"},
        {"\"a\nb\"", 2, "control byte 0x0a"},
        {"\"\\x\"", 1, "unknown escape \\x"},
        {"\"\\u12\"", 1, "four hex digits"},
        {"\"\\u12G4\"", 1, "four hex digits"},
        {"\"\\udc00\"", 1, "unpaired low surrogate"},
        {"\"\\ud800\"", 1, "not followed by a low"},
        {"\"\\ud800\\u0041\"", 1, "not followed by a low"},
        {"\"\\ud800x\"", 1, "not followed by a low"},
        {"\"\xc0\xaf\"", 1, "invalid UTF-8"},         /* overlong '/' */
        {"\"\xed\xa0\x80\"", 1, "invalid UTF-8"},     /* a raw surrogate */
        {"\"\xf4\x90\x80\x80\"", 1, "invalid UTF-8"}, /* past U+10FFFF */
        {"\"\xe2\x82\"", 1, "invalid UTF-8"},         /* cut short */
        {"\"\xff\"", 1, "invalid UTF-8"},
        {"\xef\xbb\xbf{}", 0, "byte-order mark"},
        {"\xc3\xa9", 0, "byte 0xc3 does not begin"},
        {"[\"\xc3\xa9\", x]", 7, "'x' does not begin"},
        {"{\"a\":\n  [1,\n   }", 15, "line 3, column 4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "", want[32];
        f8_json *r = (f8_json *)&err; /* must be set to NULL */
        f8_status st = f8_json_parse(bad[i].text, strlen(bad[i].text), 0, &r, err, sizeof err);
        snprintf(want, sizeof want, "byte %zu ", bad[i].byte);
        CHECK(st == F8_ERR_INVALID_ARGUMENT && r == NULL && strncmp(err, want, strlen(want)) == 0 &&
                  strstr(err, bad[i].words),
              "case %zu '%s': %s, message '%s' (wanted '%s...%s')", i, bad[i].text, f8_status_string(st), err, want,
              bad[i].words);
    }
    /* bytes after a NUL are still text: the length counts, not the NUL */
    char err[256];
    f8_json *r = NULL;
    CHECK(f8_json_parse("[1]\0[2]", 7, 0, &r, err, sizeof err) == F8_ERR_INVALID_ARGUMENT && !r &&
              strstr(err, "byte 3 "), "a NUL inside the length: %s", err);
    /* NULL text with a length */
    CHECK(f8_json_parse(NULL, 4, 0, &r, err, sizeof err) == F8_ERR_INVALID_ARGUMENT && !r, "NULL text");
    CHECK(f8_json_parse(NULL, 0, 0, &r, err, sizeof err) == F8_ERR_INVALID_ARGUMENT && !r, "no text at all");
}

static void limits(void)
{
    char err[256];
    /* depth: [[...]] of exactly max_depth opens parses, one more does not */
    enum { D = 5 };
    char text[64];
    memset(text, '[', D);
    memset(text + D, ']', D);
    text[2 * D] = 0;
    f8_json *r = parse(text, D, err, sizeof err);
    CHECK(r != NULL, "depth %d at the limit %d: %s", D, D, err);
    f8_json_free(r);
    r = parse(text, D - 1, err, sizeof err);
    CHECK(!r && strstr(err, "byte 4 ") && strstr(err, "deeper than 4"), "depth %d past %d: %s", D, D - 1, err);
    /* the default limit holds a hostile 100000-deep text off the stack */
    const size_t deep = 100000;
    char *big = (char *)malloc(2 * deep + 1);
    memset(big, '[', deep);
    memset(big + deep, ']', deep);
    big[2 * deep] = 0;
    r = parse(big, 0, err, sizeof err);
    CHECK(!r && strstr(err, "deeper than 64"), "100000 deep: %s", err);
    free(big);

    /* a wide object: 200000 distinct keys read, then one duplicate refused
     * (sorted, not compared pairwise) */
    const int keys = 200000;
    big = (char *)malloc((size_t)keys * 16 + 64);
    size_t n = 0;
    big[n++] = '{';
    for (int i = 0; i < keys; i++) n += (size_t)sprintf(big + n, "%s\"k%d\":%d", i ? "," : "", i, i);
    big[n++] = '}';
    big[n] = 0;
    r = parse(big, 0, err, sizeof err);
    CHECK(r && r->count == (size_t)keys && f8_json_get(r, "k123456") && f8_json_get(r, "k123456")->i == 123456,
          "%d keys: %s", keys, err);
    f8_json_free(r);
    n--;
    n += (size_t)sprintf(big + n, ",\"k77\":0}");
    r = parse(big, 0, err, sizeof err);
    CHECK(!r && strstr(err, "\"k77\" appears twice"), "a duplicate among %d keys: %s", keys, err);
    free(big);
}

int main(void)
{
    accepts();
    refuses();
    limits();
    return test_finish("test_json");
}
