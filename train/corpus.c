/*
 * corpus.c — the embedded corpus (corpus.h says what it contains).
 *
 * Design: lines are built one at a time in a fixed buffer and copied out until
 * n bytes are written, so a shorter corpus is a prefix of a longer one. Every
 * draw is an integer from splitmix64 (no floating point), so the bytes are the
 * same on every platform. The "world" (who lives where, owns what) is drawn
 * from the seed before the first line and then restated throughout, which is
 * what gives the model something to memorise; the other tasks are computable
 * from the line itself (agreement, arithmetic, stacks, copying, recall).
 */
#include "corpus.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LINE_CAP = 1024, WORLD_SIZE = 12 };

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct { const char *sg, *pl; } noun;
typedef struct { const char *s3, *base, *past; } verb; /* 3rd person singular, base, past */
typedef struct { const char *name; int female; } person;

static const noun ANIMALS[] = {{"cat", "cats"},     {"dog", "dogs"},   {"bird", "birds"},   {"fox", "foxes"},
                               {"mouse", "mice"},   {"owl", "owls"},   {"horse", "horses"}, {"wolf", "wolves"},
                               {"goat", "goats"},   {"frog", "frogs"}};
static const noun HUMANS[] = {{"child", "children"}, {"man", "men"},       {"woman", "women"}, {"teacher", "teachers"},
                              {"farmer", "farmers"}, {"king", "kings"},    {"girl", "girls"},  {"boy", "boys"}};
static const noun THINGS[] = {{"ball", "balls"}, {"apple", "apples"}, {"book", "books"},   {"box", "boxes"},
                              {"egg", "eggs"},   {"hat", "hats"},     {"key", "keys"},     {"cake", "cakes"},
                              {"stone", "stones"}, {"umbrella", "umbrellas"}};
static const noun PLACES[] = {{"tree", "trees"},     {"house", "houses"},   {"river", "rivers"}, {"hill", "hills"},
                              {"table", "tables"},   {"bridge", "bridges"}, {"garden", "gardens"},
                              {"island", "islands"}};
static const verb SEE[] = {{"sees", "see", "saw"},          {"chases", "chase", "chased"},
                           {"likes", "like", "liked"},      {"finds", "find", "found"},
                           {"watches", "watch", "watched"}, {"follows", "follow", "followed"},
                           {"helps", "help", "helped"},     {"knows", "know", "knew"}};
static const verb HOLD[] = {{"carries", "carry", "carried"}, {"drops", "drop", "dropped"}, {"wants", "want", "wanted"},
                            {"holds", "hold", "held"},       {"throws", "throw", "threw"}, {"hides", "hide", "hid"},
                            {"takes", "take", "took"}};
static const verb REST[] = {{"sleeps", "sleep", "slept"}, {"runs", "run", "ran"},       {"sings", "sing", "sang"},
                            {"waits", "wait", "waited"},  {"jumps", "jump", "jumped"},  {"laughs", "laugh", "laughed"},
                            {"sits", "sit", "sat"}};
static const char *const ADJS[] = {"big",  "small", "red",    "old",   "happy", "quiet", "green",
                                   "angry", "tiny", "lazy", "clever", "brown", "young", "ugly"};
static const char *const PREPS[] = {"near", "under", "behind", "beside", "past"};
static const char *const SG_DETS[] = {"the", "a", "every", "this", "one"};
static const char *const PL_DETS[] = {"the", "some", "two", "three", "many", "these"};
static const person NAMES[] = {{"Alice", 1}, {"Bob", 0},   {"Carol", 1}, {"Dave", 0}, {"Eve", 1},  {"Frank", 0},
                               {"Grace", 1}, {"Hugo", 0},  {"Ivy", 1},   {"Jack", 0}, {"Kate", 1}, {"Leo", 0},
                               {"Mia", 1},   {"Noah", 0},  {"Olga", 1},  {"Paul", 0}};
static const char *const CITIES[] = {"Oslo", "Paris", "Rome",  "Cairo", "Lima", "Tokyo",
                                     "Delhi", "Quito", "Kyiv", "Dakar", "Hanoi", "Bern"};
static const char *const COLOURS[] = {"red", "blue", "green", "yellow", "purple", "orange", "black", "white"};
static const char *const ONES[] = {"zero",    "one",     "two",       "three",    "four",     "five",    "six",
                                   "seven",   "eight",   "nine",      "ten",      "eleven",   "twelve",  "thirteen",
                                   "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
static const char *const TENS[] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};

const char *corpus_person(int i) { return i >= 0 && i < (int)(sizeof NAMES / sizeof NAMES[0]) ? NAMES[i].name : NULL; }

typedef struct {
    uint64_t s;
} crng;

static uint64_t crng_next(crng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) by multiply-shift (no modulo bias worth the name). */
static int below(crng *r, int n) { return (int)(((crng_next(r) >> 32) * (uint64_t)n) >> 32); }
static int chance(crng *r, int percent) { return below(r, 100) < percent; }
static int between(crng *r, int lo, int hi) { return lo + below(r, hi - lo + 1); }

/* The seed's world: person i is NAMES[name[i]], with fixed facts. */
typedef struct {
    int name[WORLD_SIZE], city[WORLD_SIZE], pet[WORLD_SIZE], colour[WORLD_SIZE], number[WORLD_SIZE],
        friend[WORLD_SIZE];
} world;

typedef struct {
    char s[LINE_CAP];
    int len;
} line;

typedef struct {
    crng r;
    world w;
    line l;
} gen;

static void put(line *l, const char *s)
{
    while (*s && l->len < LINE_CAP) l->s[l->len++] = *s++;
}

static void put_char(line *l, char c)
{
    if (l->len < LINE_CAP) l->s[l->len++] = c;
}

/* A word, with a space before it unless it starts the line. */
static void word(line *l, const char *s)
{
    if (l->len > 0 && l->s[l->len - 1] != ' ') put(l, " ");
    put(l, s);
}

static void number(line *l, int v)
{
    char tmp[16];
    int n = 0;
    do tmp[n++] = (char)('0' + v % 10), v /= 10;
    while (v > 0 && n < 15);
    while (n > 0) put_char(l, tmp[--n]);
}

static void number_words(line *l, int v)
{
    if (v < 20) {
        word(l, ONES[v]);
        return;
    }
    word(l, TENS[v / 10]);
    if (v % 10) word(l, ONES[v % 10]);
}

static int starts_with_vowel(const char *s) { return strchr("aeiou", s[0]) != NULL; }

/* "a"/"an" + optional adjective + noun, agreeing in number. */
static void noun_phrase_head(gen *g, const noun *tab, int count, int plural)
{
    const noun *nn = &tab[below(&g->r, count)];
    const char *adj = chance(&g->r, 30) ? ADJS[below(&g->r, COUNT(ADJS))] : NULL;
    const char *det = plural ? PL_DETS[below(&g->r, COUNT(PL_DETS))] : SG_DETS[below(&g->r, COUNT(SG_DETS))];
    const char *head = plural ? nn->pl : nn->sg;
    if (!strcmp(det, "a") && starts_with_vowel(adj ? adj : head)) det = "an";
    word(&g->l, det);
    if (adj) word(&g->l, adj);
    word(&g->l, head);
}

static void verb_phrase(gen *g, int plural, int depth, int past, int female);

/* A noun phrase; below depth 2 it may carry a prepositional phrase or a
 * relative clause whose verb agrees with this head (long-range agreement). */
static void noun_phrase(gen *g, const noun *tab, int count, int plural, int depth, int past)
{
    noun_phrase_head(g, tab, count, plural);
    if (depth >= 2 || !chance(&g->r, 25)) return;
    int animate = tab == ANIMALS || tab == HUMANS; /* only they take "that <verb>" */
    if (!animate || chance(&g->r, 50)) {
        word(&g->l, PREPS[below(&g->r, COUNT(PREPS))]);
        noun_phrase(g, PLACES, COUNT(PLACES), chance(&g->r, 40), depth + 1, past);
    } else {
        word(&g->l, "that");
        verb_phrase(g, plural, depth + 1, past, -1);
    }
}

static void animate_np(gen *g, int plural, int depth, int past)
{
    if (chance(&g->r, 50)) noun_phrase(g, ANIMALS, COUNT(ANIMALS), plural, depth, past);
    else noun_phrase(g, HUMANS, COUNT(HUMANS), plural, depth, past);
}

static const char *conjugate(const verb *v, int plural, int past) { return past ? v->past : plural ? v->base : v->s3; }

/* female: the subject's gender when it is a named person (his/her), else -1. */
static void verb_phrase(gen *g, int plural, int depth, int past, int female)
{
    int kind = below(&g->r, 100);
    if (kind < 35) {
        word(&g->l, conjugate(&REST[below(&g->r, COUNT(REST))], plural, past));
    } else if (kind < 65) {
        word(&g->l, conjugate(&SEE[below(&g->r, COUNT(SEE))], plural, past));
        animate_np(g, chance(&g->r, 40), depth + 1, past);
    } else if (kind < 90) {
        word(&g->l, conjugate(&HOLD[below(&g->r, COUNT(HOLD))], plural, past));
        if (female >= 0 && chance(&g->r, 50)) {
            const noun *t = &THINGS[below(&g->r, COUNT(THINGS))];
            word(&g->l, female ? "her" : "his");
            word(&g->l, chance(&g->r, 40) ? t->pl : t->sg);
        } else {
            noun_phrase(g, THINGS, COUNT(THINGS), chance(&g->r, 40), depth + 1, past);
        }
    } else {
        word(&g->l, past ? (plural ? "were" : "was") : (plural ? "are" : "is"));
        word(&g->l, ADJS[below(&g->r, COUNT(ADJS))]);
    }
    if (depth == 0 && chance(&g->r, 20)) {
        word(&g->l, PREPS[below(&g->r, COUNT(PREPS))]);
        noun_phrase(g, PLACES, COUNT(PLACES), chance(&g->r, 40), 2, past);
    }
}

/* 1-3 sentences in one tense; a named subject may come back as he/she. */
static void story(gen *g)
{
    int past = chance(&g->r, 50), who = -1, sentences = between(&g->r, 1, 3);
    for (int s = 0; s < sentences; s++) {
        if (s > 0) put(&g->l, " ");
        int start = g->l.len;
        if (s > 0 && past && chance(&g->r, 30)) word(&g->l, "then");
        int plural = 0, female = -1;
        if (who >= 0 && chance(&g->r, 60)) {
            female = NAMES[who].female;
            word(&g->l, female ? "she" : "he");
        } else if (chance(&g->r, 25)) {
            who = below(&g->r, COUNT(NAMES));
            female = NAMES[who].female;
            word(&g->l, NAMES[who].name);
        } else {
            plural = chance(&g->r, 40);
            animate_np(g, plural, 0, past);
        }
        verb_phrase(g, plural, 0, past, female);
        put(&g->l, ".");
        if (start < g->l.len && g->l.s[start] >= 'a' && g->l.s[start] <= 'z') g->l.s[start] -= 'a' - 'A';
    }
}

static void a_pet(line *l, int pet)
{
    word(l, starts_with_vowel(ANIMALS[pet].sg) ? "an" : "a");
    word(l, ANIMALS[pet].sg);
}

/* Statements and questions about the seed's world, 1-3 a line. */
static void facts(gen *g)
{
    const world *w = &g->w;
    line *l = &g->l;
    int items = between(&g->r, 1, 3);
    for (int i = 0; i < items; i++) {
        int p = below(&g->r, WORLD_SIZE);
        const char *name = NAMES[w->name[p]].name;
        if (i > 0) put(l, " ");
        if (chance(&g->r, 50)) {
            switch (below(&g->r, 5)) {
            case 0: word(l, name), word(l, "lives in"), word(l, CITIES[w->city[p]]); break;
            case 1: word(l, name), word(l, "has"), a_pet(l, w->pet[p]); break;
            case 2: word(l, name), put(l, "'s favourite colour is"), word(l, COLOURS[w->colour[p]]); break;
            case 3: word(l, name), put(l, "'s number is "), number(l, w->number[p]); break;
            default: word(l, name), word(l, "is a friend of"), word(l, NAMES[w->name[w->friend[p]]].name); break;
            }
            put(l, ".");
            continue;
        }
        word(l, "Q:");
        switch (below(&g->r, 6)) {
        case 0: word(l, "where does"), word(l, name), word(l, "live? A:"), word(l, CITIES[w->city[p]]); break;
        case 1: word(l, "what pet does"), word(l, name), word(l, "have? A:"), a_pet(l, w->pet[p]); break;
        case 2: word(l, "what colour does"), word(l, name), word(l, "like? A:"), word(l, COLOURS[w->colour[p]]); break;
        case 3: word(l, "what is"), word(l, name), put(l, "'s number? A: "), number(l, w->number[p]); break;
        case 4: word(l, "who is"), word(l, name), put(l, "'s friend? A:"), word(l, NAMES[w->name[w->friend[p]]].name); break;
        default: /* two hops: the friend's city */
            word(l, "where does"), word(l, name), put(l, "'s friend live? A:");
            word(l, CITIES[w->city[w->friend[p]]]);
            break;
        }
        put(l, ".");
    }
}

static void arithmetic(gen *g)
{
    line *l = &g->l;
    int items = between(&g->r, 1, 4);
    for (int i = 0; i < items; i++) {
        int op = below(&g->r, 4), a, b, c;
        char sym;
        if (op <= 1) a = between(&g->r, 0, 99), b = between(&g->r, 0, 99), c = a + b, sym = '+';
        else if (op == 2) a = between(&g->r, 0, 99), b = between(&g->r, 0, a), c = a - b, sym = '-';
        else a = between(&g->r, 0, 12), b = between(&g->r, 0, 12), c = a * b, sym = '*';
        if (i > 0) put(l, ", ");
        number(l, a), put_char(l, sym), number(l, b), put_char(l, '='), number(l, c);
    }
}

static void counting(gen *g)
{
    line *l = &g->l;
    int kind = below(&g->r, 5);
    if (kind == 0) {
        int v = between(&g->r, 0, 80), n = between(&g->r, 4, 10);
        put(l, "count:");
        for (int i = 0; i < n; i++) put(l, " "), number(l, v + i);
    } else if (kind == 1) {
        int k = between(&g->r, 2, 10), v = k * below(&g->r, 10), n = between(&g->r, 4, 8);
        put(l, "count by "), number(l, k), put(l, ":");
        for (int i = 0; i < n; i++) put(l, " "), number(l, v + i * k);
    } else if (kind == 2) {
        int v = between(&g->r, 5, 60), n = between(&g->r, 4, 8);
        put(l, "count down:");
        for (int i = 0; i < n && v - i >= 0; i++) put(l, " "), number(l, v - i);
    } else if (kind == 3) {
        int v = between(&g->r, 0, 90), n = between(&g->r, 3, 6);
        put(l, "count in words:");
        for (int i = 0; i < n && v + i <= 99; i++) number_words(l, v + i);
    } else {
        int v = between(&g->r, 0, 99);
        number(l, v), put(l, " is"), number_words(l, v), put(l, ".");
    }
}

static void copying(gen *g)
{
    char s[16];
    int n = between(&g->r, 3, 9), rev = chance(&g->r, 50);
    for (int i = 0; i < n; i++) s[i] = (char)('a' + below(&g->r, 26));
    put(&g->l, rev ? "reverse: " : "copy: ");
    for (int i = 0; i < n; i++) put_char(&g->l, s[i]);
    put(&g->l, " -> ");
    for (int i = 0; i < n; i++) put_char(&g->l, s[rev ? n - 1 - i : i]);
}

/* A random balanced sequence of 1-12 pairs, at most 6 deep. */
static void brackets(gen *g)
{
    static const char open[] = "([{<", close[] = ")]}>";
    char stack[8];
    int depth = 0, left = between(&g->r, 1, 12);
    put(&g->l, "brackets: ");
    while (left > 0 || depth > 0) {
        char c;
        if (left > 0 && (depth == 0 || (depth < 6 && chance(&g->r, 50)))) {
            int t = below(&g->r, 4);
            stack[depth++] = close[t], c = open[t], left--;
        } else {
            c = stack[--depth];
        }
        put_char(&g->l, c);
    }
}

/* In-context key-value recall: "recall: k=3 q=7 m=1 ? q=7". */
static void recall(gen *g)
{
    char keys[8];
    int val[8], n = between(&g->r, 3, 8), queries = between(&g->r, 1, 2);
    put(&g->l, "recall:");
    for (int i = 0; i < n; i++) {
        int dup;
        do {
            keys[i] = (char)('a' + below(&g->r, 26));
            dup = 0;
            for (int j = 0; j < i; j++) dup |= keys[j] == keys[i];
        } while (dup);
        val[i] = below(&g->r, 10);
        char kv[5] = {' ', keys[i], '=', (char)('0' + val[i]), 0};
        put(&g->l, kv);
    }
    put(&g->l, " ?");
    for (int q = 0; q < queries; q++) {
        int i = below(&g->r, n);
        char kv[5] = {' ', keys[i], '=', (char)('0' + val[i]), 0};
        put(&g->l, kv);
    }
}

static void sorting(gen *g)
{
    int d[8], n = between(&g->r, 3, 7), count[10] = {0};
    for (int i = 0; i < n; i++) d[i] = below(&g->r, 10), count[d[i]]++;
    put(&g->l, "sort:");
    for (int i = 0; i < n; i++) put(&g->l, " "), number(&g->l, d[i]);
    put(&g->l, " ->");
    for (int v = 0; v < 10; v++)
        for (int k = 0; k < count[v]; k++) put(&g->l, " "), number(&g->l, v);
}

static void world_draw(world *w, crng *r)
{
    int order[COUNT(NAMES)];
    for (int i = 0; i < COUNT(NAMES); i++) order[i] = i;
    for (int i = COUNT(NAMES) - 1; i > 0; i--) {
        int j = below(r, i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (int p = 0; p < WORLD_SIZE; p++) {
        w->name[p] = order[p];
        w->city[p] = below(r, COUNT(CITIES));
        w->pet[p] = below(r, COUNT(ANIMALS));
        w->colour[p] = below(r, COUNT(COLOURS));
        w->number[p] = between(r, 1, 99);
        w->friend[p] = (p + between(r, 1, WORLD_SIZE - 1)) % WORLD_SIZE; /* never oneself */
    }
}

void corpus_generate(uint64_t seed, uint8_t *buf, size_t n)
{
    gen g;
    g.r.s = seed ^ 0x5EEDC0DE5EEDC0DEull;
    world_draw(&g.w, &g.r);
    size_t at = 0;
    while (at < n) {
        g.l.len = 0;
        int kind = below(&g.r, 100);
        if (kind < 36) story(&g);
        else if (kind < 48) facts(&g);
        else if (kind < 60) arithmetic(&g);
        else if (kind < 68) counting(&g);
        else if (kind < 76) copying(&g);
        else if (kind < 84) brackets(&g);
        else if (kind < 92) recall(&g);
        else sorting(&g);
        if (g.l.len >= LINE_CAP) g.l.len = LINE_CAP - 1;
        g.l.s[g.l.len++] = '\n';
        size_t take = (size_t)g.l.len < n - at ? (size_t)g.l.len : n - at;
        memcpy(buf + at, g.l.s, take);
        at += take;
    }
}

const char *corpus_describe(void)
{
    return "stories (agreement, a/an, he/she), world facts and Q&A, arithmetic, counting, copy/reverse, "
           "brackets, key-value recall, sorting";
}

double corpus_unigram_entropy(const uint8_t *buf, size_t n)
{
    if (!buf || n == 0) return 0.0;
    size_t count[256] = {0};
    for (size_t i = 0; i < n; i++) count[buf[i]]++;
    double h = 0.0;
    for (int b = 0; b < 256; b++)
        if (count[b]) h -= (double)count[b] / (double)n * log((double)count[b] / (double)n);
    return h;
}

static int key_compare(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

f8_status corpus_entropy(const uint8_t *buf, size_t n, int order, double *nats)
{
    if (!nats || order < 0 || order > 7 || (!buf && n > 0)) return F8_ERR_INVALID_ARGUMENT;
    if (order == 0) {
        *nats = corpus_unigram_entropy(buf, n);
        return F8_OK;
    }
    *nats = 0.0;
    if (n <= (size_t)order) return F8_OK;
    if (order == 1) { /* a 256 x 256 table beats sorting */
        size_t *pair = (size_t *)calloc(256 * 256, sizeof *pair), ctx[256] = {0};
        if (!pair) return F8_ERR_OUT_OF_MEMORY;
        for (size_t t = 0; t + 1 < n; t++) pair[buf[t] << 8 | buf[t + 1]]++, ctx[buf[t]]++;
        double sum = 0.0;
        for (int i = 0; i < 256 * 256; i++)
            if (pair[i]) sum -= (double)pair[i] * log((double)pair[i]);
        for (int i = 0; i < 256; i++)
            if (ctx[i]) sum += (double)ctx[i] * log((double)ctx[i]);
        free(pair);
        *nats = sum / (double)(n - 1);
        return F8_OK;
    }
    /* Key = the context's bytes then the next byte: sorting groups each
     * context's continuations together. */
    size_t m = n - (size_t)order;
    uint64_t *keys = (uint64_t *)malloc(m * sizeof *keys);
    if (!keys) return F8_ERR_OUT_OF_MEMORY;
    for (size_t t = 0; t < m; t++) {
        uint64_t k = 0;
        for (int j = 0; j <= order; j++) k = k << 8 | buf[t + (size_t)j];
        keys[t] = k;
    }
    qsort(keys, m, sizeof *keys, key_compare);
    /* sum over contexts of  c(ctx) ln c(ctx) - sum_x c(ctx,x) ln c(ctx,x) */
    double sum = 0.0, clogc = 0.0;
    size_t ctx_total = 0;
    for (size_t i = 0; i < m;) {
        size_t j = i;
        while (j < m && keys[j] == keys[i]) j++;
        double c = (double)(j - i);
        clogc += c * log(c);
        ctx_total += j - i;
        if (j == m || keys[j] >> 8 != keys[i] >> 8) {
            sum += (double)ctx_total * log((double)ctx_total) - clogc;
            clogc = 0.0, ctx_total = 0;
        }
        i = j;
    }
    free(keys);
    *nats = sum / (double)m;
    return F8_OK;
}
