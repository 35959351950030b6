/*
 * data.c — datasets for the trainer (data.h is the manual).
 *
 * Design: every source becomes a list of segments, each a run of tokens of 1
 * byte (text, corpus), 2 bytes (llm.c's GPT-2 shards) or 4 (its Llama 3
 * shards; little-endian) inside a mapped
 * file or a generated buffer. The train/val split cuts that list, so a split
 * is a list of segments too, and a window never crosses a segment (a file's
 * end). Batch positions come from hashing (seed, step, micro, row) — no RNG
 * state — and a position is located by a linear walk over the segments: a few
 * hundred shards at most, far cheaper than the step it feeds. No allocation
 * after data_create.
 */
#include "data.h"
#include "try.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "corpus.h"

enum { HEADER_BYTES = DATA_SHARD_HEADER_INTS * 4 };

typedef struct {
    void *base;   /* the mapping (mapped) or a malloc'd buffer */
    size_t bytes;
    int mapped;
    char *name;
} data_file;

typedef struct {
    const uint8_t *p; /* first token */
    int64_t len;      /* tokens */
    int width;        /* bytes per token: 1, 2 or 4 */
    int file;         /* index into data_set.files, for messages */
    int64_t first;    /* index of p's token within its file, for messages */
} data_seg;

typedef struct {
    data_seg *v;
    int n, cap;
} seg_list;

struct data_set {
    data_source source;
    uint64_t sample_seed;
    int vocab;
    int shard_width;   /* SHARDS: 2 (GPT-2) or 4 (Llama 3), from the first shard; 0 before */
    data_file *files;
    int nfiles, cap_files;
    seg_list split[2]; /* DATA_SPLIT_TRAIN, DATA_SPLIT_VAL */
    char desc[256];
    char err[512];
};

/* train_fail (try.h) into the data set's own message buffer. */
static __attribute__((format(printf, 3, 4))) f8_status fail(data_set *ds, f8_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    train_failv(ds->err, sizeof ds->err, st, fmt, ap);
    va_end(ap);
    return st;
}

static f8_status seg_push(data_set *ds, seg_list *l, data_seg s)
{
    if (s.len <= 0) return F8_OK;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        data_seg *v = (data_seg *)realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return fail(ds, F8_ERR_OUT_OF_MEMORY, "out of memory for %d segments", cap);
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = s;
    return F8_OK;
}

/* Register a buffer or mapping so data_destroy releases it; on failure the
 * caller's buffer is released here. */
static f8_status file_push(data_set *ds, void *base, size_t bytes, int mapped, const char *name, int *index)
{
    char *copy = (char *)malloc(strlen(name) + 1);
    if (ds->nfiles == ds->cap_files && copy) {
        int cap = ds->cap_files ? 2 * ds->cap_files : 8;
        data_file *v = (data_file *)realloc(ds->files, (size_t)cap * sizeof *v);
        if (v) ds->files = v, ds->cap_files = cap;
    }
    if (!copy || ds->nfiles == ds->cap_files) {
        free(copy);
        if (mapped) munmap(base, bytes);
        else free(base);
        return fail(ds, F8_ERR_OUT_OF_MEMORY, "out of memory opening '%s'", name);
    }
    strcpy(copy, name);
    ds->files[ds->nfiles] = (data_file){base, bytes, mapped, copy};
    *index = ds->nfiles++;
    return F8_OK;
}

/* Map a whole regular, non-empty file read-only. */
static f8_status map_file(data_set *ds, const char *kind, const char *name, int *index)
{
    int fd = open(name, O_RDONLY);
    if (fd < 0) return fail(ds, F8_ERR_IO, "%s '%s': cannot open: %s", kind, name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fail(ds, F8_ERR_IO, "%s '%s': cannot stat: %s", kind, name, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fail(ds, F8_ERR_IO, "%s '%s': not a regular file", kind, name);
    }
    if (st.st_size == 0) {
        close(fd);
        return fail(ds, F8_ERR_IO, "%s '%s': the file is empty", kind, name);
    }
    size_t bytes = (size_t)st.st_size;
    void *base = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED) return fail(ds, F8_ERR_IO, "%s '%s': cannot map: %s", kind, name, strerror(e));
    return file_push(ds, base, bytes, 1, name, index);
}

static int64_t read_i32(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return u & 0x80000000u ? (int64_t)u - 4294967296LL : (int64_t)u;
}

/* Open one file of the source into the segment list. */
static f8_status open_one(data_set *ds, const char *name, seg_list *out)
{
    int shard = ds->source == DATA_SOURCE_SHARDS, index;
    const char *kind = shard ? "shard" : "text";
    f8_status st = map_file(ds, kind, name, &index);
    if (st != F8_OK) return st;
    const uint8_t *base = (const uint8_t *)ds->files[index].base;
    size_t bytes = ds->files[index].bytes;
    if (!shard) return seg_push(ds, out, (data_seg){base, (int64_t)bytes, 1, index, 0});
    if (bytes < HEADER_BYTES)
        return fail(ds, F8_ERR_IO, "shard '%s': %zu bytes, too small for the %d-byte header (truncated?)", name, bytes,
                    HEADER_BYTES);
    int64_t magic = read_i32(base), version = read_i32(base + 4), count = read_i32(base + 8);
    const int llama3 = magic == DATA_SHARD_LLAMA3_MAGIC, width = llama3 ? 4 : 2;
    if (magic != DATA_SHARD_MAGIC && !llama3)
        return fail(ds, F8_ERR_IO, "shard '%s': bad magic %lld (expected %d, GPT-2, or %d, Llama 3): not an llm.c token "
                    "shard", name, (long long)magic, DATA_SHARD_MAGIC, DATA_SHARD_LLAMA3_MAGIC);
    const int64_t want_version = llama3 ? DATA_SHARD_LLAMA3_VERSION : DATA_SHARD_VERSION;
    if (version != want_version)
        return fail(ds, F8_ERR_IO, "shard '%s': %s version %lld is not supported (expected %lld)", name,
                    llama3 ? "Llama 3 shard" : "GPT-2 shard", (long long)version, (long long)want_version);
    if (count < 0) return fail(ds, F8_ERR_IO, "shard '%s': negative token count %lld", name, (long long)count);
    if (ds->shard_width && ds->shard_width != width)
        return fail(ds, F8_ERR_IO, "shard '%s' holds %s tokens, the shards before it %s: one kind per run", name,
                    llama3 ? "Llama 3 (uint32)" : "GPT-2 (uint16)", ds->shard_width == 4 ? "Llama 3's" : "GPT-2's");
    ds->shard_width = width;
    uint64_t want = (uint64_t)HEADER_BYTES + (uint64_t)width * (uint64_t)count;
    if (want != bytes)
        return fail(ds, F8_ERR_IO, "shard '%s': header says %lld tokens (%llu bytes) but the file has %zu bytes (%s)",
                    name, (long long)count, (unsigned long long)want, bytes,
                    want > bytes ? "truncated?" : "trailing data");
    return seg_push(ds, out, (data_seg){base + HEADER_BYTES, count, width, index, 0});
}

/* A comma-separated list of paths and glob patterns. */
static f8_status open_list(data_set *ds, const char *list, seg_list *out)
{
    int opened = 0;
    const char *at = list;
    while (*at) {
        const char *end = strchr(at, ',');
        size_t n = end ? (size_t)(end - at) : strlen(at);
        char item[4096];
        if (n >= sizeof item) return fail(ds, F8_ERR_INVALID_ARGUMENT, "path too long in '%s'", list);
        memcpy(item, at, n);
        item[n] = 0;
        at += n + (end ? 1 : 0);
        if (n == 0) continue;
        f8_status st = F8_OK;
        if (strpbrk(item, "*?[")) {
            glob_t g;
            int rc = glob(item, 0, NULL, &g);
            if (rc == GLOB_NOMATCH) return fail(ds, F8_ERR_INVALID_ARGUMENT, "no file matches '%s'", item);
            if (rc != 0) return fail(ds, F8_ERR_IO, "cannot expand '%s'", item);
            for (size_t i = 0; i < g.gl_pathc && st == F8_OK; i++) st = open_one(ds, g.gl_pathv[i], out), opened++;
            globfree(&g);
        } else {
            st = open_one(ds, item, out), opened++;
        }
        if (st != F8_OK) return st;
    }
    if (!opened) return fail(ds, F8_ERR_INVALID_ARGUMENT, "no path in '%s'", list);
    return F8_OK;
}

static int64_t list_tokens(const seg_list *l)
{
    int64_t n = 0;
    for (int i = 0; i < l->n; i++) n += l->v[i].len;
    return n;
}

/* Hold out the last `fraction` of the tokens of `all` as the val split. */
static f8_status split_tail(data_set *ds, const seg_list *all, double fraction)
{
    int64_t total = list_tokens(all), keep = total - (int64_t)(fraction * (double)total), at = 0;
    for (int i = 0; i < all->n; i++) {
        data_seg s = all->v[i];
        int64_t cut = keep - at; /* tokens of s that stay in train */
        at += s.len;
        if (cut >= s.len) cut = s.len;
        if (cut < 0) cut = 0;
        data_seg tail = {s.p + (size_t)cut * (size_t)s.width, s.len - cut, s.width, s.file, s.first + cut};
        s.len = cut;
        f8_status st = seg_push(ds, &ds->split[DATA_SPLIT_TRAIN], s);
        if (st == F8_OK) st = seg_push(ds, &ds->split[DATA_SPLIT_VAL], tail);
        if (st != F8_OK) return st;
    }
    return F8_OK;
}

data_config data_config_default(void)
{
    data_config c;
    memset(&c, 0, sizeof c);
    c.source = DATA_SOURCE_CORPUS;
    c.val_fraction = 0.1;
    c.corpus_seed = 1;
    c.corpus_bytes = (size_t)8 << 20;
    c.sample_seed = 1;
    return c;
}

static f8_status create(data_set *ds, const data_config *c)
{
    int text = c->source == DATA_SOURCE_TEXT, shards = c->source == DATA_SOURCE_SHARDS;
    if (c->source != DATA_SOURCE_CORPUS && !text && !shards)
        return fail(ds, F8_ERR_INVALID_ARGUMENT, "unknown data source %d", (int)c->source);
    if (!(c->val_fraction >= 0.0 && c->val_fraction < 1.0))
        return fail(ds, F8_ERR_INVALID_ARGUMENT, "val_fraction %g is outside [0, 1)", c->val_fraction);
    if (c->vocab_size < 0) return fail(ds, F8_ERR_INVALID_ARGUMENT, "vocab_size %d is negative", c->vocab_size);
    ds->source = c->source;
    ds->sample_seed = c->sample_seed;
    ds->vocab = c->vocab_size ? c->vocab_size : shards ? DATA_GPT2_VOCAB : 256;
    seg_list all = {NULL, 0, 0}, val = {NULL, 0, 0};
    f8_status st = F8_OK;
    if (c->source == DATA_SOURCE_CORPUS) {
        if (c->corpus_bytes == 0) return fail(ds, F8_ERR_INVALID_ARGUMENT, "corpus_bytes is 0");
        uint8_t *buf = (uint8_t *)malloc(c->corpus_bytes);
        if (!buf) return fail(ds, F8_ERR_OUT_OF_MEMORY, "out of memory for a %zu-byte corpus", c->corpus_bytes);
        corpus_generate(c->corpus_seed, buf, c->corpus_bytes);
        int index;
        st = file_push(ds, buf, c->corpus_bytes, 0, "corpus", &index);
        if (st == F8_OK) st = seg_push(ds, &all, (data_seg){buf, (int64_t)c->corpus_bytes, 1, index, 0});
    } else {
        if (!c->path || !*c->path)
            return fail(ds, F8_ERR_INVALID_ARGUMENT, "the %s source needs a path", text ? "text" : "shards");
        st = open_list(ds, c->path, &all);
        if (st == F8_OK && c->val_path) st = open_list(ds, c->val_path, &val);
    }
    if (st == F8_OK && c->val_path && c->source != DATA_SOURCE_CORPUS) {
        ds->split[DATA_SPLIT_TRAIN] = all, ds->split[DATA_SPLIT_VAL] = val;
        all.v = val.v = NULL;
    } else if (st == F8_OK) {
        st = split_tail(ds, &all, c->val_fraction);
    }
    free(all.v), free(val.v);
    if (st != F8_OK) return st;
    if (shards && !c->vocab_size && ds->shard_width == 4) ds->vocab = DATA_LLAMA3_VOCAB;
    long long ntr = (long long)list_tokens(&ds->split[DATA_SPLIT_TRAIN]);
    long long nva = (long long)list_tokens(&ds->split[DATA_SPLIT_VAL]);
    if (c->source == DATA_SOURCE_CORPUS)
        snprintf(ds->desc, sizeof ds->desc, "corpus seed %llu: %lld train + %lld val bytes",
                 (unsigned long long)c->corpus_seed, ntr, nva);
    else
        snprintf(ds->desc, sizeof ds->desc, "%s '%s'%s%s%s (%d file%s): %lld train + %lld val %s",
                 text ? "text" : "shards", c->path, c->val_path ? ", val '" : "", c->val_path ? c->val_path : "",
                 c->val_path ? "'" : "", ds->nfiles, ds->nfiles == 1 ? "" : "s", ntr, nva, text ? "bytes" : "tokens");
    return F8_OK;
}

f8_status data_create(const data_config *config, data_set **ds, char *error, size_t error_size)
{
    if (error && error_size) error[0] = 0;
    if (!ds) return F8_ERR_INVALID_ARGUMENT;
    *ds = NULL;
    if (!config) {
        if (error && error_size) snprintf(error, error_size, "data_create: config is NULL");
        return F8_ERR_INVALID_ARGUMENT;
    }
    data_set *d = (data_set *)calloc(1, sizeof *d);
    if (!d) {
        if (error && error_size) snprintf(error, error_size, "out of memory");
        return F8_ERR_OUT_OF_MEMORY;
    }
    f8_status st = create(d, config);
    if (st != F8_OK) {
        if (error && error_size) snprintf(error, error_size, "%s", d->err);
        data_destroy(d);
        return st;
    }
    *ds = d;
    return F8_OK;
}

void data_destroy(data_set *ds)
{
    if (!ds) return;
    for (int i = 0; i < ds->nfiles; i++) {
        if (ds->files[i].mapped) munmap(ds->files[i].base, ds->files[i].bytes);
        else free(ds->files[i].base);
        free(ds->files[i].name);
    }
    free(ds->files);
    free(ds->split[0].v), free(ds->split[1].v);
    free(ds);
}

const char *data_last_error(const data_set *ds) { return ds ? ds->err : ""; }
int data_vocab_size(const data_set *ds) { return ds ? ds->vocab : 0; }
const char *data_describe(const data_set *ds) { return ds ? ds->desc : ""; }

static int split_ok(const data_set *ds, data_split split)
{
    return ds && (split == DATA_SPLIT_TRAIN || split == DATA_SPLIT_VAL);
}

int64_t data_tokens(const data_set *ds, data_split split)
{
    return split_ok(ds, split) ? list_tokens(&ds->split[split]) : 0;
}

/* Windows of S+1 tokens a segment offers: at every position (train) or at
 * every S-th position (val). */
static int64_t seg_windows(const data_seg *s, data_split split, int S)
{
    if (s->len < (int64_t)S + 1) return 0;
    return split == DATA_SPLIT_TRAIN ? s->len - S : (s->len - 1) / S;
}

int64_t data_windows(const data_set *ds, data_split split, int S)
{
    if (!split_ok(ds, split) || S < 1) return 0;
    int64_t n = 0;
    for (int i = 0; i < ds->split[split].n; i++) n += seg_windows(&ds->split[split].v[i], split, S);
    return n;
}

int64_t data_val_batches(const data_set *ds, int B, int S)
{
    if (B < 1) return 0;
    int64_t w = data_windows(ds, DATA_SPLIT_VAL, S);
    return (w + B - 1) / B;
}

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int32_t token_at(const data_seg *s, int64_t i)
{
    const uint8_t *p = s->p + (size_t)i * (size_t)s->width;
    if (s->width == 1) return (int32_t)p[0];
    if (s->width == 2) return (int32_t)(p[0] | p[1] << 8);
    const uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return u > (uint32_t)INT32_MAX ? INT32_MAX : (int32_t)u; /* past any vocabulary: reported, never used */
}

/* Copy window `w` (counted as seg_windows counts) of a split into one row. */
static f8_status copy_window(data_set *ds, data_split split, int64_t w, int S, int32_t *x, int32_t *y)
{
    const seg_list *l = &ds->split[split];
    for (int i = 0; i < l->n; i++) {
        const data_seg *s = &l->v[i];
        int64_t n = seg_windows(s, split, S);
        if (w >= n) {
            w -= n;
            continue;
        }
        int64_t start = split == DATA_SPLIT_TRAIN ? w : w * S;
        for (int t = 0; t <= S; t++) {
            int32_t tok = token_at(s, start + t);
            if (tok >= ds->vocab)
                return fail(ds, F8_ERR_IO, "%s '%s': token %d at position %lld is outside the vocabulary (%d)",
                            s->width >= 2 ? "shard" : "text", ds->files[s->file].name, (int)tok,
                            (long long)(s->first + start + t), ds->vocab);
            if (t < S) x[t] = tok;
            if (t > 0) y[t - 1] = tok;
        }
        return F8_OK;
    }
    return fail(ds, F8_ERR_STATE, "window past the end of the split (internal error)");
}

static f8_status check_batch(data_set *ds, data_split split, int B, int S, const int32_t *x, const int32_t *y,
                             int64_t *windows)
{
    const char *name = split == DATA_SPLIT_TRAIN ? "train" : "validation";
    if (!x || !y) return fail(ds, F8_ERR_INVALID_ARGUMENT, "%s batch: x or y is NULL", name);
    if (B < 1 || S < 1) return fail(ds, F8_ERR_INVALID_ARGUMENT, "%s batch: B=%d, S=%d must be >= 1", name, B, S);
    *windows = data_windows(ds, split, S);
    if (*windows == 0) {
        int64_t longest = 0;
        for (int i = 0; i < ds->split[split].n; i++)
            if (ds->split[split].v[i].len > longest) longest = ds->split[split].v[i].len;
        if (ds->split[split].n == 0)
            return fail(ds, F8_ERR_SHAPE, "the %s split is empty%s", name,
                        split == DATA_SPLIT_VAL ? " (val_fraction 0 and no val_path?)" : "");
        return fail(ds, F8_ERR_SHAPE, "the %s split has no window of S+1 = %d tokens (its longest file part has %lld)",
                    name, S + 1, (long long)longest);
    }
    return F8_OK;
}

f8_status data_train_batch(data_set *ds, int64_t step, int micro, int B, int S, int32_t *x, int32_t *y)
{
    if (!ds) return F8_ERR_INVALID_ARGUMENT;
    if (step < 0 || micro < 0)
        return fail(ds, F8_ERR_INVALID_ARGUMENT, "train batch: step %lld and micro %d must be >= 0", (long long)step,
                    micro);
    int64_t windows;
    f8_status st = check_batch(ds, DATA_SPLIT_TRAIN, B, S, x, y, &windows);
    if (st != F8_OK) return st;
    uint64_t h = mix(mix(mix(ds->sample_seed) ^ (uint64_t)step) ^ (uint64_t)micro);
    for (int b = 0; b < B && st == F8_OK; b++) {
        uint64_t w = mix(h ^ (uint64_t)b) % (uint64_t)windows;
        st = copy_window(ds, DATA_SPLIT_TRAIN, (int64_t)w, S, x + (size_t)b * S, y + (size_t)b * S);
    }
    return st;
}

f8_status data_val_batch(data_set *ds, int64_t index, int B, int S, int32_t *x, int32_t *y)
{
    if (!ds) return F8_ERR_INVALID_ARGUMENT;
    if (index < 0) return fail(ds, F8_ERR_INVALID_ARGUMENT, "validation batch: index %lld < 0", (long long)index);
    int64_t windows;
    f8_status st = check_batch(ds, DATA_SPLIT_VAL, B, S, x, y, &windows);
    if (st != F8_OK) return st;
    for (int b = 0; b < B && st == F8_OK; b++) {
        int64_t w = (int64_t)(((uint64_t)index * (uint64_t)B + (uint64_t)b) % (uint64_t)windows);
        st = copy_window(ds, DATA_SPLIT_VAL, w, S, x + (size_t)b * S, y + (size_t)b * S);
    }
    return st;
}

f8_status data_unigram_entropy(data_set *ds, data_split split, int64_t max_tokens, double *nats)
{
    if (!ds) return F8_ERR_INVALID_ARGUMENT;
    if (!split_ok(ds, split) || !nats || max_tokens < 0)
        return fail(ds, F8_ERR_INVALID_ARGUMENT, "unigram entropy: bad split, NULL nats or negative max_tokens");
    uint64_t *count = (uint64_t *)calloc((size_t)ds->vocab, sizeof *count);
    if (!count) return fail(ds, F8_ERR_OUT_OF_MEMORY, "out of memory for %d counts", ds->vocab);
    const seg_list *l = &ds->split[split];
    int64_t total = 0;
    for (int i = 0; i < l->n && (max_tokens == 0 || total < max_tokens); i++) {
        const data_seg *s = &l->v[i];
        for (int64_t t = 0; t < s->len && (max_tokens == 0 || total < max_tokens); t++, total++) {
            int32_t tok = token_at(s, t);
            if (tok >= ds->vocab) {
                free(count);
                return fail(ds, F8_ERR_IO, "'%s': token %d at position %lld is outside the vocabulary (%d)",
                            ds->files[s->file].name, (int)tok, (long long)(s->first + t), ds->vocab);
            }
            count[tok]++;
        }
    }
    double h = 0.0;
    for (int v = 0; v < ds->vocab; v++)
        if (count[v]) h -= (double)count[v] / (double)total * log((double)count[v] / (double)total);
    free(count);
    *nats = h;
    return F8_OK;
}
