/*
 * test_train_data.c — the trainer's data side: the embedded corpus (bytes,
 * determinism, structure, entropies), the dataset loaders (llm.c shards good
 * and malformed, GPT-2's and Llama 3's, text files, the corpus) and the
 * stateless batch sampler. The CSV log, the progress line and the plot:
 * test_train_log.c. Files go to a fresh directory in /tmp.
 */
#include "check.h"
#include "tmp_files.h"

#include "f8train.h"

static void put_i32(uint8_t *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)u, p[1] = (uint8_t)(u >> 8), p[2] = (uint8_t)(u >> 16), p[3] = (uint8_t)(u >> 24);
}

/* An llm.c shard: header (magic, version, count) then `ntok` tokens of
 * token(i) = first + 7 i, cut or padded to `bytes` total when bytes > 0. */
static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count, int ntok, int first,
                        size_t bytes)
{
    size_t full = 1024 + 2 * (size_t)ntok;
    uint8_t *b = (uint8_t *)calloc(full + 64, 1);
    if (!b) die("malloc", NULL);
    put_i32(b, magic), put_i32(b + 4, version), put_i32(b + 8, count);
    for (int i = 0; i < ntok; i++) {
        int t = first + 7 * i;
        b[1024 + 2 * i] = (uint8_t)t, b[1024 + 2 * i + 1] = (uint8_t)(t >> 8);
    }
    write_bytes(path, b, bytes ? bytes : full);
    free(b);
}

/* --------------------------------------------------------------------------- corpus */

/* English number words, the test's own (the oracle for "42 is forty two."). */
static const char *const ones[20] = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                     "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                                     "seventeen", "eighteen", "nineteen"};
static const char *const tens[10] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
                                     "ninety"};

static int line_kind_ok(const char *s, int *kinds)
{
    int a, b, c;
    char op, eq;
    if (!strncmp(s, "brackets: ", 10)) {
        kinds[0]++;
        char stack[64];
        int d = 0;
        for (const char *p = s + 10; *p; p++) {
            const char *o = strchr("([{<", *p), *cl = strchr(")]}>", *p);
            if (o && d < 64) stack[d++] = ")]}>"[o - "([{<"];
            else if (cl) {
                if (d == 0 || stack[--d] != *p) return 0;
            } else return 0;
        }
        return d == 0;
    }
    if (!strncmp(s, "copy: ", 6) || !strncmp(s, "reverse: ", 9)) {
        kinds[1]++;
        int rev = s[0] == 'r';
        const char *w = strchr(s, ' ') + 1, *arrow = strstr(s, " -> ");
        if (!arrow) return 0;
        size_t n = (size_t)(arrow - w);
        const char *out = arrow + 4;
        if (strlen(out) != n) return 0;
        for (size_t i = 0; i < n; i++)
            if (out[i] != w[rev ? n - 1 - i : i]) return 0;
        return 1;
    }
    if (!strncmp(s, "sort:", 5)) {
        kinds[2]++;
        int in[16], out[16], ni = 0, no = 0, *dst = in, *cnt = &ni;
        for (const char *p = s + 5; *p; p++) {
            if (*p >= '0' && *p <= '9' && *cnt < 16) dst[(*cnt)++] = *p - '0';
            if (*p == '>') dst = out, cnt = &no;
        }
        if (ni != no) return 0;
        for (int i = 0; i + 1 < no; i++)
            if (out[i] > out[i + 1]) return 0;
        int hist[10] = {0};
        for (int i = 0; i < ni; i++) hist[in[i]]++, hist[out[i]]--;
        for (int i = 0; i < 10; i++)
            if (hist[i]) return 0;
        return 1;
    }
    if (!strncmp(s, "recall:", 7)) {
        kinds[3]++;
        int val[26];
        for (int i = 0; i < 26; i++) val[i] = -1;
        const char *q = strchr(s, '?');
        if (!q) return 0;
        for (const char *p = s + 7; p < q; p += 4)
            if (p[0] == ' ' && p[2] == '=') val[p[1] - 'a'] = p[3] - '0';
        for (const char *p = q + 1; *p; p += 4)
            if (p[0] != ' ' || p[2] != '=' || val[p[1] - 'a'] != p[3] - '0') return 0;
        return 1;
    }
    if (!strncmp(s, "count", 5)) {
        kinds[4]++;
        return 1;
    }
    int used = 0;
    if (sscanf(s, "%d is %n", &a, &used) == 1 && used > 0) { /* "42 is forty two." */
        kinds[4]++;
        char want[40];
        if (a < 20) snprintf(want, sizeof want, "%s.", ones[a]);
        else if (a % 10) snprintf(want, sizeof want, "%s %s.", tens[a / 10], ones[a % 10]);
        else snprintf(want, sizeof want, "%s.", tens[a / 10]);
        return !strcmp(s + used, want);
    }
    if (sscanf(s, "%d%c%d%c%d", &a, &op, &b, &eq, &c) == 5 && eq == '=') {
        kinds[5]++;
        /* every fact of the line */
        for (const char *p = s; p;) {
            if (sscanf(p, "%d%c%d=%d", &a, &op, &b, &c) != 4) return 0;
            int want = op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : -1;
            if (c != want) return 0;
            p = strstr(p, ", ");
            if (p) p += 2;
        }
        return 1;
    }
    if (strstr(s, " lives in ") || strstr(s, "Q: ") || strstr(s, " has a") || strstr(s, "'s ") ||
        strstr(s, " is a friend of ")) {
        kinds[6]++;
        return 1;
    }
    kinds[7]++; /* a story: a/an must agree with the next word */
    for (const char *p = s; (p = strstr(p, " a ")) != NULL; p += 3)
        if (strchr("aeiou", p[3])) return 0;
    for (const char *p = s; (p = strstr(p, " an ")) != NULL; p += 4)
        if (!strchr("aeiou", p[4])) return 0;
    return s[0] >= 'A' && s[0] <= 'Z' && s[strlen(s) - 1] == '.';
}

/* "Alice lives in Oslo." and "Q: where does Alice live? A: Oslo." must name
 * the same city every time: the world is fixed per seed. */
static void check_world_consistent(const char *text)
{
    char city[16][16];
    memset(city, 0, sizeof city);
    int seen = 0, clashes = 0;
    for (int p = 0; p < 16; p++) {
        const char *name = corpus_person(p);
        CHECK(name != NULL, "the corpus names fewer than 16 people");
        if (!name) return;
        char pat1[48], pat2[64];
        snprintf(pat1, sizeof pat1, "%s lives in ", name);
        snprintf(pat2, sizeof pat2, "where does %s live? A: ", name);
        const char *pats[2] = {pat1, pat2};
        for (int k = 0; k < 2; k++)
            for (const char *at = text; (at = strstr(at, pats[k])) != NULL; at++) {
                if (at > text && at[-1] != ' ' && at[-1] != '\n') continue; /* "Alice's friend" etc. */
                char c[16] = {0};
                sscanf(at + strlen(pats[k]), "%15[A-Za-z]", c);
                if (!city[p][0]) strcpy(city[p], c);
                else clashes += strcmp(city[p], c) != 0;
                seen++;
            }
    }
    CHECK(seen > 100, "only %d statements of where people live", seen);
    CHECK(clashes == 0, "%d statements contradict the world", clashes);
}

static void test_corpus(void)
{
    const size_t n = (size_t)1 << 20;
    uint8_t *a = (uint8_t *)xmalloc(n), *b = (uint8_t *)xmalloc(n), *c = (uint8_t *)xmalloc(n);
    corpus_generate(7, a, n);
    corpus_generate(7, b, n);
    CHECK(!memcmp(a, b, n), "same seed, different bytes");
    corpus_generate(7, c, 1000);
    CHECK(!memcmp(a, c, 1000), "a shorter corpus is not a prefix of a longer one");
    corpus_generate(8, c, n);
    CHECK(memcmp(a, c, n) != 0, "seeds 7 and 8 give the same corpus");
    corpus_generate(7, c, 0); /* writes nothing, must not crash */

    size_t odd = 0;
    for (size_t i = 0; i < n; i++) odd += !(a[i] == '\n' || (a[i] >= 32 && a[i] < 127));
    CHECK(odd == 0, "%zu bytes are neither printable ASCII nor newline", odd);

    /* Every line well-formed for its kind; every kind present. */
    char *text = (char *)xmalloc(n + 1);
    memcpy(text, a, n);
    text[n] = 0;
    char *last_nl = strrchr(text, '\n');
    if (last_nl) last_nl[1] = 0; /* drop the cut last line */
    int kinds[8] = {0}, bad = 0, lines = 0;
    char *copy = (char *)xmalloc(n + 1);
    strcpy(copy, text);
    for (char *line = copy, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        *nl = 0;
        lines++;
        if (!line_kind_ok(line, kinds)) {
            if (bad++ < 5) fprintf(stderr, "bad corpus line: %s\n", line);
        }
    }
    CHECK(bad == 0, "%d of %d corpus lines are malformed", bad, lines);
    for (int k = 0; k < 8; k++) CHECK(kinds[k] > lines / 40, "line kind %d appears %d times in %d lines", k, kinds[k], lines);
    check_world_consistent(text);
    free(copy), free(text);

    /* Structure: knowing the previous bytes must help a lot. */
    double h[5];
    for (int o = 0; o < 5; o++) CHECK(corpus_entropy(a, n, o, &h[o]) == F8_OK, "corpus_entropy order %d", o);
    printf("  corpus entropy (nats/byte): unigram %.3f, orders 1-4: %.3f %.3f %.3f %.3f\n", h[0], h[1], h[2], h[3],
           h[4]);
    CHECK(fabs(h[0] - corpus_unigram_entropy(a, n)) < 1e-12, "order 0 != unigram");
    CHECK(h[0] > 2.5 && h[0] < 4.5, "unigram entropy %.3f nats is not English-like", h[0]);
    CHECK(h[1] < 0.75 * h[0], "bigram conditional %.3f is not well below unigram %.3f", h[1], h[0]);
    CHECK(h[3] < 0.40 * h[0], "order-3 conditional %.3f is not far below unigram %.3f", h[3], h[0]);
    for (int o = 1; o < 5; o++) CHECK(h[o] < h[o - 1], "entropy does not fall from order %d to %d", o - 1, o);

    /* The estimator on inputs with known answers. */
    uint8_t ab[1000];
    for (int i = 0; i < 1000; i++) ab[i] = (uint8_t)("ab"[i % 2]);
    double e;
    CHECK(corpus_entropy(ab, 1000, 0, &e) == F8_OK && fabs(e - log(2.0)) < 1e-12, "abab unigram %.6f", e);
    CHECK(corpus_entropy(ab, 1000, 1, &e) == F8_OK && fabs(e) < 1e-12, "abab order-1 %.6f", e);
    test_rng r = {3};
    /* Fair coin flips: every order's conditional entropy is ln 2 (the plug-in
     * bias, 2^order / 2n, is negligible at n = 2^18). */
    for (size_t i = 0; i < (size_t)1 << 18; i++) c[i] = (uint8_t)(rng_u64(&r) >> 63 ? 'a' : 'b');
    for (int o = 0; o <= 7; o++)
        CHECK(corpus_entropy(c, (size_t)1 << 18, o, &e) == F8_OK && fabs(e - log(2.0)) < 2e-3, "coin order %d: %.5f",
              o, e);
    /* Order 1 (a table) against order 1 by hand on a short corpus prefix. */
    {
        static size_t pair[256][256], ctx[256];
        const size_t m = 20000;
        for (size_t t = 0; t + 1 < m; t++) pair[a[t]][a[t + 1]]++, ctx[a[t]]++;
        double want = 0;
        for (int i = 0; i < 256; i++)
            for (int j = 0; j < 256; j++)
                if (pair[i][j]) want -= (double)pair[i][j] / (double)(m - 1) * log((double)pair[i][j] / (double)ctx[i]);
        CHECK(corpus_entropy(a, m, 1, &e) == F8_OK && fabs(e - want) < 1e-12, "order 1 %.9f, by hand %.9f", e, want);
    }
    for (size_t i = 0; i < n; i++) c[i] = (uint8_t)rng_u64(&r);
    CHECK(fabs(corpus_unigram_entropy(c, n) - log(256.0)) < 2e-3, "uniform bytes: %.5f", corpus_unigram_entropy(c, n));
    CHECK(corpus_entropy(a, n, 8, &e) == F8_ERR_INVALID_ARGUMENT, "order 8 accepted");
    CHECK(corpus_entropy(a, n, -1, &e) == F8_ERR_INVALID_ARGUMENT, "order -1 accepted");
    CHECK(corpus_entropy(a, n, 1, NULL) == F8_ERR_INVALID_ARGUMENT, "NULL out accepted");
    CHECK(corpus_entropy(NULL, 0, 2, &e) == F8_OK && e == 0.0, "empty buffer");
    CHECK(corpus_unigram_entropy(NULL, 0) == 0.0, "empty unigram");
    free(a), free(b), free(c);
}

/* --------------------------------------------------------------------------- loaders */

/* The expected error: status, and the message names the file and the fault. */
static void expect_create_error(const data_config *cfg, f8_status want, const char *what, const char *phrase)
{
    char err[512];
    data_set *ds = (data_set *)&err; /* must be reset to NULL */
    f8_status st = data_create(cfg, &ds, err, sizeof err);
    CHECK(st == want, "%s: status %s, wanted %s (%s)", what, f8_status_string(st), f8_status_string(want), err);
    CHECK(ds == NULL, "%s: *ds not NULL on error", what);
    CHECK(strstr(err, phrase) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err, phrase);
    if (cfg->path && cfg->source != DATA_SOURCE_CORPUS && want == F8_ERR_IO) {
        const char *slash = strrchr(cfg->path, '/');
        CHECK(strstr(err, slash ? slash + 1 : cfg->path) != NULL, "%s: message \"%s\" lacks the file name", what, err);
    }
    data_destroy(ds);
}

static data_config shards_config(const char *path)
{
    data_config c = data_config_default();
    c.source = DATA_SOURCE_SHARDS;
    c.path = path;
    return c;
}

/* Each row must be S+1 consecutive tokens of the 7i sequences (inputs, then
 * targets one further), from a window inside [lo, hi) of the stream. */
static int rows_consecutive(const int32_t *x, const int32_t *y, int B, int S)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) {
            if (y[b * S + t] != x[b * S + t] + 7) return 0;
            if (t > 0 && x[b * S + t] != x[b * S + t - 1] + 7) return 0;
        }
    return 1;
}

static void test_shards(void)
{
    enum { N = 5000, N2 = 1000, B = 8, S = 32 };
    const char *good = tmp_path("good_000.bin"), *good2 = tmp_path("good_001.bin"), *val = tmp_path("val.bin");
    write_shard(good, DATA_SHARD_MAGIC, 1, N, N, 0, 0);
    write_shard(good2, DATA_SHARD_MAGIC, 1, N2, N2, 40000, 0); /* tokens 40000 .. 46993 */
    write_shard(val, DATA_SHARD_MAGIC, 1, 1000, 1000, 3, 0);

    char err[512];
    data_config c = shards_config(good);
    data_set *ds = NULL;
    CHECK(data_create(&c, &ds, err, sizeof err) == F8_OK, "good shard: %s", err);
    if (!ds) return;
    CHECK(data_vocab_size(ds) == DATA_GPT2_VOCAB, "vocab %d", data_vocab_size(ds));
    CHECK(data_tokens(ds, DATA_SPLIT_TRAIN) == N - N / 10 && data_tokens(ds, DATA_SPLIT_VAL) == N / 10,
          "split %lld + %lld", (long long)data_tokens(ds, DATA_SPLIT_TRAIN), (long long)data_tokens(ds, DATA_SPLIT_VAL));
    CHECK(data_windows(ds, DATA_SPLIT_TRAIN, S) == N - N / 10 - S, "train windows %lld",
          (long long)data_windows(ds, DATA_SPLIT_TRAIN, S));
    CHECK(data_windows(ds, DATA_SPLIT_VAL, S) == (N / 10 - 1) / S, "val windows");
    int32_t x[B * S], y[B * S], x2[B * S], y2[B * S];
    int32_t lo = INT32_MAX, hi = 0;
    int ok = 1;
    for (int step = 0; step < 200; step++) {
        ok &= data_train_batch(ds, step, step % 3, B, S, x, y) == F8_OK && rows_consecutive(x, y, B, S);
        for (int b = 0; b < B; b++) {
            lo = x[b * S] < lo ? x[b * S] : lo;
            hi = x[b * S] > hi ? x[b * S] : hi;
        }
    }
    CHECK(ok, "train rows are not consecutive tokens with targets shifted by one");
    /* Starts cover the train split and stay inside it: window start i = x/7. */
    CHECK(lo / 7 < 100 && hi / 7 > N - N / 10 - S - 100 && hi / 7 <= N - N / 10 - S - 1, "train starts in [%d, %d]",
          lo / 7, hi / 7);
    ok = 1;
    for (int i = 0; i < data_val_batches(ds, B, S); i++) {
        ok &= data_val_batch(ds, i, B, S, x, y) == F8_OK && rows_consecutive(x, y, B, S);
        for (int b = 0; b < B; b++) {
            int64_t w = ((int64_t)i * B + b) % data_windows(ds, DATA_SPLIT_VAL, S);
            ok &= x[b * S] == 7 * (N - N / 10 + w * S);
        }
    }
    CHECK(ok, "val batches are not the tail's windows in order");
    double h;
    CHECK(data_unigram_entropy(ds, DATA_SPLIT_TRAIN, 0, &h) == F8_OK && fabs(h - log(N - N / 10.0)) < 1e-9,
          "unigram of distinct tokens %.6f", h);
    CHECK(data_unigram_entropy(ds, DATA_SPLIT_TRAIN, 100, &h) == F8_OK && fabs(h - log(100.0)) < 1e-9,
          "unigram of 100 tokens %.6f", h);
    /* Argument errors are reported, not crashed on. */
    CHECK(data_train_batch(ds, 0, 0, 0, S, x, y) == F8_ERR_INVALID_ARGUMENT, "B=0 accepted");
    CHECK(data_train_batch(ds, -1, 0, B, S, x, y) == F8_ERR_INVALID_ARGUMENT, "step -1 accepted");
    CHECK(data_train_batch(ds, 0, 0, B, S, NULL, y) == F8_ERR_INVALID_ARGUMENT, "NULL x accepted");
    CHECK(data_train_batch(ds, 0, 0, 1, N, x2, y2) == F8_ERR_SHAPE && strstr(data_last_error(ds), "no window"),
          "a window longer than the data: %s", data_last_error(ds));
    data_destroy(ds);

    /* Two shards (list and glob), windows never cross the file boundary. */
    const char *lists[2] = {NULL, NULL};
    char list[400], pattern[200];
    snprintf(list, sizeof list, "%s,%s", good, good2);
    snprintf(pattern, sizeof pattern, "%s/good_*.bin", tmp_dir);
    lists[0] = list, lists[1] = pattern;
    for (int k = 0; k < 2; k++) {
        c = shards_config(lists[k]);
        c.val_path = val;
        ds = NULL;
        CHECK(data_create(&c, &ds, err, sizeof err) == F8_OK, "%s: %s", lists[k], err);
        if (!ds) continue;
        CHECK(data_tokens(ds, DATA_SPLIT_TRAIN) == N + N2 && data_tokens(ds, DATA_SPLIT_VAL) == 1000, "two shards + val");
        ok = 1;
        int second = 0;
        for (int step = 0; step < 100; step++) {
            ok &= data_train_batch(ds, step, 0, B, S, x, y) == F8_OK && rows_consecutive(x, y, B, S);
            for (int b = 0; b < B; b++) second += x[b * S] >= 40000;
        }
        CHECK(ok, "two shards: rows not consecutive (a window crossed files?)");
        /* windows are drawn uniformly: (N2 - S) / (N + N2 - 2 S) = 16.3% of the rows */
        CHECK(second > 80 && second < 190, "%d of 800 rows from the second shard", second);
        CHECK(data_val_batch(ds, 0, B, S, x, y) == F8_OK && x[0] == 3 && rows_consecutive(x, y, B, S),
              "val from the val shard");
        data_destroy(ds);
    }

    /* A token past the vocabulary is an error at batch time, not a crash later. */
    const char *big = tmp_path("big_token.bin");
    write_shard(big, DATA_SHARD_MAGIC, 1, N, N, 20000, 0); /* tokens reach 20000 + 7*4999 = 54993 */
    c = shards_config(big);
    c.val_fraction = 0;
    ds = NULL;
    CHECK(data_create(&c, &ds, err, sizeof err) == F8_OK, "big tokens open: %s", err);
    f8_status st = F8_OK;
    for (int step = 0; step < 50 && st == F8_OK; step++) st = data_train_batch(ds, step, 0, B, S, x, y);
    CHECK(st == F8_ERR_IO && strstr(data_last_error(ds), "outside the vocabulary"), "token >= vocab: %s: %s",
          f8_status_string(st), data_last_error(ds));
    CHECK(data_val_batch(ds, 0, B, S, x, y) == F8_ERR_SHAPE && strstr(data_last_error(ds), "empty"),
          "val_fraction 0: %s", data_last_error(ds));
    data_destroy(ds);

    /* Malformed shards. */
    const char *p;
    p = tmp_path("bad_magic.bin"), write_shard(p, 12345, 1, 100, 100, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "bad magic", "bad magic 12345");
    p = tmp_path("bad_version.bin"), write_shard(p, DATA_SHARD_MAGIC, 2, 100, 100, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "bad version", "version 2");
    p = tmp_path("truncated.bin"), write_shard(p, DATA_SHARD_MAGIC, 1, 100, 100, 0, 1024 + 150), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "truncated", "truncated");
    p = tmp_path("count_too_big.bin"), write_shard(p, DATA_SHARD_MAGIC, 1, 1 << 30, 100, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "count larger than the file", "header says 1073741824 tokens");
    p = tmp_path("trailing.bin"), write_shard(p, DATA_SHARD_MAGIC, 1, 50, 100, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "trailing bytes", "trailing data");
    p = tmp_path("negative.bin"), write_shard(p, DATA_SHARD_MAGIC, 1, -5, 100, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "negative count", "negative token count");
    p = tmp_path("short_header.bin"), write_shard(p, DATA_SHARD_MAGIC, 1, 100, 100, 0, 500), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "cut header", "too small for the 1024-byte header");
    p = tmp_path("empty.bin"), write_bytes(p, "", 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "empty file", "empty");
    p = tmp_path("missing.bin"), c = shards_config(p); /* never written */
    expect_create_error(&c, F8_ERR_IO, "missing file", "No such file");
    c = shards_config(tmp_dir);
    expect_create_error(&c, F8_ERR_IO, "a directory", "not a regular file");
    snprintf(list, sizeof list, "%s,%s", good, p); /* a good shard, then the missing one */
    c = shards_config(list);
    expect_create_error(&c, F8_ERR_IO, "missing second shard", "missing.bin");
    snprintf(pattern, sizeof pattern, "%s/nothing_*.bin", tmp_dir);
    c = shards_config(pattern);
    expect_create_error(&c, F8_ERR_INVALID_ARGUMENT, "glob without match", "no file matches");
    c = shards_config(NULL);
    expect_create_error(&c, F8_ERR_INVALID_ARGUMENT, "no path", "needs a path");
    c = shards_config(good);
    c.val_fraction = 1.0;
    expect_create_error(&c, F8_ERR_INVALID_ARGUMENT, "val_fraction 1", "val_fraction");
    CHECK(data_create(NULL, &ds, err, sizeof err) == F8_ERR_INVALID_ARGUMENT && ds == NULL, "NULL config");
    data_destroy(NULL);
}

/* An llm.c Llama 3 shard: header (magic, version, count) then `ntok` uint32
 * tokens token(i) = first + 7 i (last: `last` when not 0), cut or padded to
 * `bytes` total when bytes > 0. */
static void write_shard32(const char *path, int32_t magic, int32_t version, int32_t count, int ntok, uint32_t first,
                          uint32_t last, size_t bytes)
{
    const size_t full = 1024 + 4 * (size_t)ntok;
    uint8_t *b = (uint8_t *)calloc(full + 64, 1);
    if (!b) die("malloc", NULL);
    put_i32(b, magic), put_i32(b + 4, version), put_i32(b + 8, count);
    for (int i = 0; i < ntok; i++) put_i32(b + 1024 + 4 * i, (int32_t)(i == ntok - 1 && last ? last : first + 7u * (uint32_t)i));
    write_bytes(path, b, bytes ? bytes : full);
    free(b);
}

/* llm.c's Llama 3 shards (magic 20240801, version 7, uint32 tokens): ids
 * past 65535 read whole, the vocabulary 128256, the same strictness as the
 * GPT-2 shards' (every malformed header refused with the file's name), ids
 * past the vocabulary (0xFFFFFFFF included) reported at batch time, and one
 * kind of shard per run. */
static void test_llama3_shards(void)
{
    enum { N = 3000, B = 4, S = 32 };
    const char *good = tmp_path("llama_000.bin"), *gpt2 = tmp_path("gpt2_for_mix.bin");
    write_shard32(good, DATA_SHARD_LLAMA3_MAGIC, 7, N, N, 100000, 0, 0); /* ids 100000 .. 120993 */
    write_shard(gpt2, DATA_SHARD_MAGIC, 1, N, N, 0, 0);
    char err[512];
    data_config c = shards_config(good);
    data_set *ds = NULL;
    CHECK(data_create(&c, &ds, err, sizeof err) == F8_OK, "Llama 3 shard: %s", err);
    if (!ds) return;
    CHECK(data_vocab_size(ds) == DATA_LLAMA3_VOCAB, "Llama 3 vocab %d", data_vocab_size(ds));
    CHECK(data_tokens(ds, DATA_SPLIT_TRAIN) == N - N / 10, "Llama 3 train tokens %lld", (long long)data_tokens(ds, DATA_SPLIT_TRAIN));
    int32_t x[B * S], y[B * S];
    int ok = 1;
    for (int step = 0; step < 50; step++) {
        ok &= data_train_batch(ds, step, 0, B, S, x, y) == F8_OK && rows_consecutive(x, y, B, S);
        for (int b = 0; b < B * S; b++) ok &= x[b] >= 100000 && (x[b] - 100000) % 7 == 0;
    }
    CHECK(ok, "Llama 3 rows: consecutive uint32 ids past 65535");
    CHECK(data_val_batch(ds, 0, B, S, x, y) == F8_OK && x[0] == 100000 + 7 * (N - N / 10), "Llama 3 val starts at the tail");
    data_destroy(ds);

    /* ids past the vocabulary: 128256 itself, and 0xFFFFFFFF (no negative id reaches a lookup) */
    const uint32_t bad_ids[2] = {DATA_LLAMA3_VOCAB, 0xFFFFFFFFu};
    for (int k = 0; k < 2; k++) {
        const char *p = tmp_path(k ? "llama_ffff.bin" : "llama_vocab.bin");
        write_shard32(p, DATA_SHARD_LLAMA3_MAGIC, 7, 40, 40, 5, bad_ids[k], 0);
        c = shards_config(p);
        c.val_fraction = 0;
        ds = NULL;
        CHECK(data_create(&c, &ds, err, sizeof err) == F8_OK, "open: %s", err);
        f8_status st = data_train_batch(ds, 0, 0, 1, 39, x, y);
        CHECK(st == F8_ERR_IO && strstr(data_last_error(ds), "outside the vocabulary"), "id %u: %s: %s", bad_ids[k],
              f8_status_string(st), data_last_error(ds));
        data_destroy(ds);
    }
    /* a larger vocabulary than Llama 3's, given: ids up to it pass */
    c = shards_config(tmp_path("llama_vocab.bin"));
    c.val_fraction = 0;
    c.vocab_size = 200000;
    ds = NULL;
    CHECK(data_create(&c, &ds, err, sizeof err) == F8_OK && data_vocab_size(ds) == 200000 &&
              data_train_batch(ds, 0, 0, 1, 39, x, y) == F8_OK && y[38] == (int32_t)DATA_LLAMA3_VOCAB,
          "vocab_size 200000: %s", err);
    data_destroy(ds);

    /* malformed Llama 3 shards, and the two kinds mixed */
    const char *p;
    p = tmp_path("llama_v1.bin"), write_shard32(p, DATA_SHARD_LLAMA3_MAGIC, 1, 100, 100, 0, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "Llama 3 magic, version 1", "Llama 3 shard version 1");
    p = tmp_path("gpt2_v7.bin"), write_shard(p, DATA_SHARD_MAGIC, 7, 100, 100, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "GPT-2 magic, version 7", "GPT-2 shard version 7");
    p = tmp_path("llama_trunc.bin"), write_shard32(p, DATA_SHARD_LLAMA3_MAGIC, 7, 100, 100, 0, 0, 1024 + 2 * 100),
    c = shards_config(p); /* a GPT-2-sized body: half the bytes */
    expect_create_error(&c, F8_ERR_IO, "Llama 3 truncated", "truncated");
    p = tmp_path("llama_trail.bin"), write_shard32(p, DATA_SHARD_LLAMA3_MAGIC, 7, 50, 100, 0, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "Llama 3 trailing", "trailing data");
    p = tmp_path("llama_neg.bin"), write_shard32(p, DATA_SHARD_LLAMA3_MAGIC, 7, -1, 100, 0, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "Llama 3 negative count", "negative token count");
    p = tmp_path("llama_huge.bin"), write_shard32(p, DATA_SHARD_LLAMA3_MAGIC, 7, 0x7FFFFFFF, 10, 0, 0, 0), c = shards_config(p);
    expect_create_error(&c, F8_ERR_IO, "Llama 3 count past the file", "header says 2147483647 tokens");
    char list[400];
    snprintf(list, sizeof list, "%s,%s", good, gpt2);
    c = shards_config(list);
    expect_create_error(&c, F8_ERR_IO, "Llama 3 then GPT-2", "one kind per run");
    snprintf(list, sizeof list, "%s,%s", gpt2, good);
    c = shards_config(list);
    expect_create_error(&c, F8_ERR_IO, "GPT-2 then Llama 3", "one kind per run");
}

static void test_text_and_corpus(void)
{
    enum { B = 4, S = 16 };
    char text[3000];
    for (int i = 0; i < 3000; i++) text[i] = (char)(32 + (i * 31 + i / 7) % 95);
    const char *path = tmp_path("input.txt");
    write_bytes(path, text, sizeof text);
    data_config c = data_config_default();
    c.source = DATA_SOURCE_TEXT;
    c.path = path;
    c.val_fraction = 0.25;
    data_set *ds = NULL;
    char err[512];
    CHECK(data_create(&c, &ds, err, sizeof err) == F8_OK, "text: %s", err);
    if (!ds) return;
    CHECK(data_vocab_size(ds) == 256, "text vocab");
    CHECK(data_tokens(ds, DATA_SPLIT_TRAIN) == 2250 && data_tokens(ds, DATA_SPLIT_VAL) == 750, "text split");
    int32_t x[B * S], y[B * S];
    int ok = 1;
    for (int step = 0; step < 50; step++) {
        ok &= data_train_batch(ds, step, 0, B, S, x, y) == F8_OK;
        for (int b = 0; b < B; b++) {
            /* find the window: its first S+1 bytes must match somewhere in the train part */
            int found = 0;
            for (int at = 0; at + S < 2250 && !found; at++) {
                found = 1;
                for (int t = 0; t < S && found; t++)
                    found = x[b * S + t] == (uint8_t)text[at + t] && y[b * S + t] == (uint8_t)text[at + t + 1];
            }
            ok &= found;
        }
    }
    CHECK(ok, "text rows are not windows of the train bytes");
    CHECK(data_val_batch(ds, 1, B, S, x, y) == F8_OK && x[0] == (uint8_t)text[2250 + B * S] &&
              y[S - 1] == (uint8_t)text[2250 + B * S + S],
          "text val batch 1");
    data_destroy(ds);

    c.path = tmp_path("missing.txt");
    expect_create_error(&c, F8_ERR_IO, "missing text", "cannot open");
    c.path = tmp_path("empty.txt");
    write_bytes(c.path, "", 0);
    expect_create_error(&c, F8_ERR_IO, "empty text", "empty");

    /* The corpus source: its bytes are corpus_generate's. */
    c = data_config_default();
    c.corpus_bytes = (size_t)1 << 18;
    c.corpus_seed = 5;
    ds = NULL;
    CHECK(data_create(&c, &ds, err, sizeof err) == F8_OK, "corpus: %s", err);
    if (!ds) return;
    uint8_t *bytes = (uint8_t *)xmalloc(c.corpus_bytes);
    corpus_generate(5, bytes, c.corpus_bytes);
    int64_t ntrain = data_tokens(ds, DATA_SPLIT_TRAIN);
    CHECK(ntrain + data_tokens(ds, DATA_SPLIT_VAL) == (int64_t)c.corpus_bytes && ntrain == (int64_t)(c.corpus_bytes * 9 / 10) + 1,
          "corpus split %lld", (long long)ntrain);
    double h;
    CHECK(data_unigram_entropy(ds, DATA_SPLIT_TRAIN, 0, &h) == F8_OK &&
              fabs(h - corpus_unigram_entropy(bytes, (size_t)ntrain)) < 1e-12,
          "dataset unigram %.6f", h);
    CHECK(data_val_batch(ds, 0, B, S, x, y) == F8_OK && x[0] == bytes[ntrain] && x[S - 1] == bytes[ntrain + S - 1],
          "corpus val batch starts the val split");
    CHECK(strstr(data_describe(ds), "corpus seed 5") != NULL, "describe: %s", data_describe(ds));
    free(bytes);
    data_destroy(ds);
}

/* The sampler is a pure function of (seed, step, micro). */
static void test_sampler(void)
{
    enum { B = 6, S = 24 };
    data_config c = data_config_default();
    c.corpus_bytes = 100000;
    data_set *a = NULL, *b = NULL;
    char err[512];
    CHECK(data_create(&c, &a, err, sizeof err) == F8_OK, "%s", err);
    CHECK(data_create(&c, &b, err, sizeof err) == F8_OK, "%s", err);
    if (!a || !b) return;
    int32_t x1[B * S], y1[B * S], x2[B * S], y2[B * S];
    int same = 1, shifted = 1;
    for (int step = 0; step < 20; step++) {
        CHECK(data_train_batch(a, step, 1, B, S, x1, y1) == F8_OK, "batch");
        /* b is used out of order, and with other calls in between */
        data_train_batch(b, 1000 - step, 0, B, S, x2, y2);
        data_val_batch(b, step, B, S, x2, y2);
        data_train_batch(b, step, 1, B, S, x2, y2);
        same &= !memcmp(x1, x2, sizeof x1) && !memcmp(y1, y2, sizeof y1);
        /* targets are the inputs shifted by one: y[t] == x[t+1] */
        for (int r = 0; r < B; r++)
            for (int t = 0; t + 1 < S; t++) shifted &= y1[r * S + t] == x1[r * S + t + 1];
    }
    CHECK(same, "the same (seed, step, micro) gave different batches");
    CHECK(shifted, "targets are not the inputs shifted by one");
    data_train_batch(a, 3, 0, B, S, x1, y1);
    data_train_batch(a, 4, 0, B, S, x2, y2);
    CHECK(memcmp(x1, x2, sizeof x1) != 0, "steps 3 and 4 gave the same batch");
    data_train_batch(a, 3, 1, B, S, x2, y2);
    CHECK(memcmp(x1, x2, sizeof x1) != 0, "micro 0 and 1 gave the same batch");
    data_destroy(b);
    c.sample_seed = 2;
    b = NULL;
    data_create(&c, &b, err, sizeof err);
    data_train_batch(b, 3, 0, B, S, x2, y2);
    CHECK(memcmp(x1, x2, sizeof x1) != 0, "sample seeds 1 and 2 gave the same batch");
    data_val_batch(a, 2, B, S, x1, y1);
    data_val_batch(b, 2, B, S, x2, y2);
    CHECK(!memcmp(x1, x2, sizeof x1), "validation batches depend on the sample seed");
    data_destroy(a), data_destroy(b);
}

int main(void)
{
    tmp_dir_create("f8_test_train_data");
    test_corpus();
    test_shards();
    test_llama3_shards();
    test_text_and_corpus();
    test_sampler();
    tmp_dir_remove();
    return test_finish("test_train_data");
}
