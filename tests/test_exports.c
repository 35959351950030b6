/*
 * test_exports.c — libf8.so's ABI is the one f8.h declares: the dynamic
 * symbols the library defines (`nm -D --defined-only`, binutils) are exactly
 * the functions the public headers mark F8_API, every one named f8_...; no
 * internal f8i_ symbol and nothing else leaks (the library is built with
 * -fvisibility=hidden). The headers are read as text: include/f8.h and the
 * topic headers under include/f8/.
 *
 * Run from the repository root by `make test`; F8_LIBSO is this build's
 * shared library.
 */
#include <ctype.h>
#include <glob.h>

#include "check.h"

#ifndef F8_LIBSO
#define F8_LIBSO "build/libf8.so"
#endif

enum { MAX_NAMES = 1024, NAME_LEN = 96 };

typedef struct names {
    char v[MAX_NAMES][NAME_LEN];
    int n;
} names;

static int has(const names *s, const char *x)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], x)) return 1;
    return 0;
}

static void add(names *s, const char *x, size_t len)
{
    CHECK(s->n < MAX_NAMES && len < NAME_LEN, "too many names or a name too long");
    if (s->n >= MAX_NAMES || len >= NAME_LEN) return;
    memcpy(s->v[s->n], x, len);
    s->v[s->n][len] = '\0';
    if (!has(s, s->v[s->n])) s->n++;
}

/* Every "F8_API <type> <name>(" of a header: the identifier before the '('. */
static void declared(const char *path, names *out)
{
    char *text = read_text_file(path);
    for (const char *p = text; (p = strstr(p, "F8_API ")) != NULL; p += 7) {
        if (p > text && p[-1] != '\n') continue; /* the macro's own definition and comments */
        const char *paren = strchr(p, '(');
        if (!paren) break;
        const char *e = paren, *b;
        while (e > p && isspace((unsigned char)e[-1])) e--;
        for (b = e; b > p && (isalnum((unsigned char)b[-1]) || b[-1] == '_'); b--) {}
        add(out, b, (size_t)(e - b));
    }
    free(text);
}

int main(void)
{
    static names decl, exported;
    declared("include/f8.h", &decl);
    glob_t g;
    if (glob("include/f8/*.h", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) declared(g.gl_pathv[i], &decl);
        globfree(&g);
    }
    CHECK(decl.n >= 150, "only %d F8_API declarations found in the headers", decl.n);

    FILE *nm = popen("nm -D --defined-only " F8_LIBSO, "r");
    if (!nm) die("popen nm", NULL);
    char line[512];
    while (fgets(line, sizeof line, nm)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3) continue;
        add(&exported, name, strlen(name));
    }
    int rc = pclose(nm);
    CHECK(rc == 0, "nm -D --defined-only %s failed (status %d)", F8_LIBSO, rc);
    CHECK(exported.n >= 150, "%s exports only %d symbols", F8_LIBSO, exported.n);

    for (int i = 0; i < exported.n; i++) {
        const char *s = exported.v[i];
        CHECK(!strncmp(s, "f8_", 3), "%s exports %s, which is not an f8_ symbol", F8_LIBSO, s);
        CHECK(has(&decl, s), "%s exports %s, which no public header declares F8_API", F8_LIBSO, s);
    }
    for (int i = 0; i < decl.n; i++)
        CHECK(has(&exported, decl.v[i]), "%s is declared F8_API but %s does not export it", decl.v[i], F8_LIBSO);
    /* a few the trainer and the Python package depend on, by name */
    const char *must[] = {"f8_ctx_create", "f8_module_forward", "f8_checkpoint_put_entry",
                          "f8_module_quantize_weight_part", "f8_status_string"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        CHECK(has(&exported, must[i]), "%s does not export %s", F8_LIBSO, must[i]);
    CHECK(!has(&exported, "f8i_checkpoint_put") && !has(&exported, "f8i_error"), "internal symbols are exported");
    printf("test_exports: %d symbols exported, %d declared F8_API\n", exported.n, decl.n);
    return test_finish("test_exports");
}
