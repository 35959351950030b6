/*
 * test_train_layers.c — the trainer's files stay layered: no two units of
 * train/ (x.c with x.h) include or call each other both ways. A unit
 * depends on another when one of its files includes the other's header
 * ("y.h") or its .c calls a function the other's .c defines (a non-static
 * definition at the start of a line). train/f8train.h, the umbrella, is no
 * unit. Reads the sources as text; run from the repository root.
 */
#include <ctype.h>
#include <glob.h>

#include "check.h"

enum { MAX_UNITS = 64, MAX_DEFS = 2048 };

static char units[MAX_UNITS][32];
static int n_units;
static char def_name[MAX_DEFS][64];
static int def_unit[MAX_DEFS], n_defs;
static unsigned char dep[MAX_UNITS][MAX_UNITS];

static int unit_of(const char *name, size_t len)
{
    for (int i = 0; i < n_units; i++)
        if (strlen(units[i]) == len && !strncmp(units[i], name, len)) return i;
    return -1;
}

/* The unit of "train/x.c" or "train/x.h". */
static int path_unit(const char *path, int add)
{
    const char *b = path + strlen("train/");
    const size_t len = strlen(b) - 2;
    int u = unit_of(b, len);
    if (u < 0 && add && n_units < MAX_UNITS) {
        snprintf(units[n_units], sizeof units[0], "%.*s", (int)len, b);
        u = n_units++;
    }
    return u;
}

static int is_id(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Non-static functions defined in a .c: "type name(" at the start of a line. */
static void scan_defs(const char *text, int u)
{
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!isalpha((unsigned char)*l) || !strncmp(l, "static", 6) || !strncmp(l, "typedef", 7)) continue;
        const char *paren = strchr(l, '('), *nl = strchr(l, '\n');
        if (!paren || (nl && paren > nl)) continue;
        const char *b = paren;
        while (b > l && is_id(b[-1])) b--;
        if (b == l || b == paren || n_defs == MAX_DEFS) continue; /* no type before it: not a definition */
        snprintf(def_name[n_defs], sizeof def_name[0], "%.*s", (int)(paren - b), b);
        def_unit[n_defs++] = u;
    }
}

static void scan_deps(const char *text, int u, int is_c)
{
    for (const char *p = text; (p = strstr(p, "#include \"")) != NULL; p++) {
        const char *name = p + 10, *dot = strchr(name, '.');
        const int v = dot ? unit_of(name, (size_t)(dot - name)) : -1;
        if (v >= 0 && v != u) dep[u][v] = 1;
    }
    if (!is_c) return;
    for (const char *p = text; *p; p++) {
        if (!is_id(*p) || (p > text && is_id(p[-1]))) continue;
        const char *e = p;
        while (is_id(*e)) e++;
        if (*e == '(')
            for (int i = 0; i < n_defs; i++)
                if (def_unit[i] != u && strlen(def_name[i]) == (size_t)(e - p) &&
                    !strncmp(def_name[i], p, (size_t)(e - p)))
                    dep[u][def_unit[i]] = 1;
        p = e - 1;
    }
}

int main(void)
{
    glob_t g;
    CHECK(glob("train/*.[ch]", 0, NULL, &g) == 0, "no train/ sources (run from the repository root)");
    if (g.gl_pathc == 0) return test_finish("test_train_layers");
    for (size_t i = 0; i < g.gl_pathc; i++)
        if (strcmp(g.gl_pathv[i], "train/f8train.h")) path_unit(g.gl_pathv[i], 1);
    char **texts = (char **)xmalloc(g.gl_pathc * sizeof *texts);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        texts[i] = read_text_file(g.gl_pathv[i]);
        const size_t n = strlen(g.gl_pathv[i]);
        if (g.gl_pathv[i][n - 1] == 'c') scan_defs(texts[i], path_unit(g.gl_pathv[i], 0));
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const int u = path_unit(g.gl_pathv[i], 0);
        if (u >= 0) scan_deps(texts[i], u, g.gl_pathv[i][strlen(g.gl_pathv[i]) - 1] == 'c');
        free(texts[i]);
    }
    free(texts);
    globfree(&g);
    int edges = 0;
    for (int a = 0; a < n_units; a++)
        for (int b = 0; b < n_units; b++) {
            edges += dep[a][b];
            if (a < b) CHECK(!(dep[a][b] && dep[b][a]), "train/%s and train/%s depend on each other", units[a], units[b]);
        }
    CHECK(n_units >= 15 && n_defs >= 100 && edges >= 30, "%d units, %d functions, %d dependencies: the scan found too "
          "little", n_units, n_defs, edges);
    printf("test_train_layers: %d units, %d functions, %d dependencies\n", n_units, n_defs, edges);
    return test_finish("test_train_layers");
}
