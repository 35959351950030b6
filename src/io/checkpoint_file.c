/*
 * checkpoint_file.c — f8_checkpoint loaded from and saved to one
 * safetensors file (safetensors.c parses and writes the header).
 *
 * Design note. A loaded file is checked whole before any tensor byte is
 * read. The writer adds an XXH64 checksum of every tensor's bytes to the
 * metadata ("f8.xxh64.<name>"); the loader checks each one it finds, so a
 * flipped bit is refused with the tensor's name, while files without them
 * (older f8 files, other tools' safetensors) load as before. The writer lays the data out without gaps (the reference
 * implementation rejects them) and aligned: the header is padded to 8 bytes,
 * and tensors go by element size, largest first, so each starts at a
 * multiple of its element size; the JSON lists them by name.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint_table.h"

/* ---- loading ----------------------------------------------------------- */

/* Where the tensor bytes come from: memory, or a file descriptor. */
typedef struct source {
    const unsigned char *mem; /* the data region, or NULL */
    int fd;
    uint64_t base;            /* file offset of the data region */
} source;

/* Read exactly n bytes at off; 0 on success, else an errno (-1: end of file). */
static int pread_full(int fd, void *dst, size_t n, uint64_t off)
{
    unsigned char *p = (unsigned char *)dst;
    while (n) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno ? errno : EIO;
        if (k == 0) return -1;
        p += k;
        off += (uint64_t)k;
        n -= (size_t)k;
    }
    return 0;
}

static const char *read_error(int e) { return e == -1 ? "the file is shorter than when it was checked" : strerror(e); }

/* f8 files (format "f8" or an f8.format_version key) must carry a version
 * this library reads; other safetensors files load as plain tensors. */
static f8_status check_version(f8_ctx *ctx, const char *fn, const f8i_st_header *h, int *is_f8)
{
    const char *format = NULL, *version = NULL;
    for (size_t i = 0; i < h->n_meta; i++) {
        if (!strcmp(h->meta[i].key, KEY_FORMAT)) format = h->meta[i].value;
        if (!strcmp(h->meta[i].key, KEY_VERSION)) version = h->meta[i].value;
    }
    *is_f8 = (format && !strcmp(format, "f8")) || version;
    if (!*is_f8) return F8_OK;
    if (!version)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: an f8 checkpoint (\"format\": \"f8\") without "
                         "\"" KEY_VERSION "\" in its metadata", fn);
    size_t len = strlen(version), i = 0;
    while (i < len && version[i] >= '0' && version[i] <= '9') i++;
    if (!len || i != len || version[0] == '0')
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"" KEY_VERSION "\" is \"%.32s\", not a positive integer",
                         fn, version);
    /* Nine digits fit an int; anything longer is certainly newer. */
    if (len > 9 || atoi(version) > FORMAT_VERSION)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: format version %.32s is newer than this library reads (%d): "
                         "written by a newer f8", fn, version, FORMAT_VERSION);
    return F8_OK;
}

/* Make the checkpoint of a checked header, reading each tensor's bytes from
 * src. Takes the header's metadata; frees the header in all cases. */
static f8_status build(f8_ctx *ctx, const char *fn, f8i_st_header *h, const source *src, f8_checkpoint **out)
{
    int is_f8;
    f8_status st = check_version(ctx, fn, h, &is_f8);
    f8_checkpoint *ck = st == F8_OK ? f8i_checkpoint_alloc(ctx) : NULL;
    /* (+ 1 everywhere a count may be 0: malloc(0) may return NULL.) */
    if (st == F8_OK && (!ck || !(ck->entries = (entry **)malloc((h->n_tensors + 1) * sizeof *ck->entries))))
        st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    if (st == F8_OK) {
        ck->cap = h->n_tensors + 1;
        ck->is_f8 = is_f8;
    }
    /* The header's tensors are already sorted by name. */
    for (size_t i = 0; st == F8_OK && i < h->n_tensors; i++) {
        const f8i_st_tensor *t = &h->tensors[i];
        size_t bytes = (size_t)(t->end - t->begin);
        entry *e = f8i_ck_entry_new(t->name, t->dtype, t->ndim, t->shape, bytes);
        if (!e) {
            st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory for tensor \"%.64s\" (%zu bytes)", fn,
                           t->name, bytes);
            break;
        }
        ck->entries[ck->n++] = e; /* owned by ck now: freed with it on error */
        if (src->mem) {
            if (bytes) memcpy(e->data, src->mem + t->begin, bytes);
        } else {
            int err = pread_full(src->fd, e->data, bytes, src->base + t->begin);
            if (err) st = f8i_error(ctx, F8_ERR_IO, "%s: reading tensor \"%.64s\": %s", fn, t->name, read_error(err));
        }
        if (st == F8_OK) st = f8i_checkpoint_check_checksum(ctx, fn, h, e);
    }
    /* A checksum of a tensor the file does not hold: one was taken out. */
    for (size_t i = 0; st == F8_OK && i < h->n_meta; i++) {
        const char *k = h->meta[i].key;
        int found;
        if (strncmp(k, KEY_CHECKSUM, strlen(KEY_CHECKSUM)) == 0) {
            f8i_ck_entry_lower_bound(ck, k + strlen(KEY_CHECKSUM), &found);
            if (!found)
                st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: metadata has a checksum for tensor \"%.64s\", which "
                               "the file does not hold: the file is corrupt", fn, k + strlen(KEY_CHECKSUM));
        }
    }
    /* The metadata moves over as parsed (sorted, checked for duplicates),
     * less the checksums: they belong to the file, and a save writes new ones. */
    if (st == F8_OK) {
        size_t kept = 0;
        for (size_t i = 0; i < h->n_meta; i++) {
            if (strncmp(h->meta[i].key, KEY_CHECKSUM, strlen(KEY_CHECKSUM)) == 0) {
                free(h->meta[i].key);
                free(h->meta[i].value);
            } else
                h->meta[kept++] = h->meta[i];
        }
        ck->meta = h->meta;
        ck->n_meta = kept;
        ck->cap_meta = h->n_meta;
        h->meta = NULL;
        h->n_meta = 0;
    }
    f8i_st_header_free(h);
    if (st != F8_OK) {
        f8_checkpoint_destroy(ck);
        return st;
    }
    *out = ck;
    return F8_OK;
}

f8_status f8_checkpoint_load_memory(f8_ctx *ctx, const void *bytes, size_t size, f8_checkpoint **checkpoint)
{
    static const char fn[] = "f8_checkpoint_load_memory";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!checkpoint) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: checkpoint (the output) is NULL", fn);
    *checkpoint = NULL;
    if (!bytes && size) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    const unsigned char *b = (const unsigned char *)bytes;
    char err[256];
    uint64_t hlen;
    f8i_st_header h;
    if (f8i_st_header_length(b, size, &hlen, err, sizeof err) != F8_OK)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %s", fn, err);
    f8_status st = f8i_st_parse(b + 8, (size_t)hlen, size - 8 - hlen, &h, err, sizeof err);
    if (st != F8_OK) return f8i_error(ctx, st, "%s: %s", fn, err);
    source src = {b + 8 + hlen, -1, 0};
    return build(ctx, fn, &h, &src, checkpoint);
}

f8_status f8_checkpoint_load(f8_ctx *ctx, const char *path, f8_checkpoint **checkpoint)
{
    static const char fn[] = "f8_checkpoint_load";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!checkpoint) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: checkpoint (the output) is NULL", fn);
    *checkpoint = NULL;
    if (!path) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: path is NULL", fn);
    /* O_NONBLOCK: a FIFO must not block the open; it is refused below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return f8i_error(ctx, F8_ERR_IO, "%s: cannot open %.200s: %s", fn, path, strerror(errno));
    struct stat sb;
    int serr = fstat(fd, &sb) != 0 ? errno : 0;
    if (serr || !S_ISREG(sb.st_mode)) {
        close(fd);
        return f8i_error(ctx, F8_ERR_IO, "%s: %.200s: %s", fn, path, serr ? strerror(serr) : "not a regular file");
    }
    uint64_t size = (uint64_t)sb.st_size, hlen = 0;
    unsigned char prefix[8] = {0};
    char err[256];
    f8i_st_header h;
    int rerr = size >= 8 ? pread_full(fd, prefix, 8, 0) : 0;
    f8_status st = F8_OK;
    if (rerr) st = f8i_error(ctx, F8_ERR_IO, "%s: reading %.200s: %s", fn, path, read_error(rerr));
    else if (f8i_st_header_length(prefix, size, &hlen, err, sizeof err) != F8_OK)
        st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %.200s: %s", fn, path, err);
    unsigned char *json = st == F8_OK ? (unsigned char *)malloc(hlen ? (size_t)hlen : 1) : NULL;
    if (st == F8_OK && !json) st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory for the header", fn);
    if (st == F8_OK && (rerr = pread_full(fd, json, (size_t)hlen, 8)) != 0)
        st = f8i_error(ctx, F8_ERR_IO, "%s: reading %.200s: %s", fn, path, read_error(rerr));
    if (st == F8_OK && (st = f8i_st_parse(json, (size_t)hlen, size - 8 - hlen, &h, err, sizeof err)) != F8_OK)
        f8i_error(ctx, st, "%s: %.200s: %s", fn, path, err);
    free(json);
    if (st == F8_OK) {
        source src = {NULL, fd, 8 + hlen};
        st = build(ctx, fn, &h, &src, checkpoint);
    }
    close(fd);
    return st;
}

/* ---- saving ------------------------------------------------------------ */

static int cmp_data_order(const void *a, const void *b)
{
    const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
    size_t sx = f8i_ck_dtype_size(x->pub.dtype), sy = f8i_ck_dtype_size(y->pub.dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->pub.name, y->pub.name);
}

/* The file's layout: header bytes (length, JSON, padding), then the entries'
 * data in data order. */
typedef struct layout {
    unsigned char *header;
    size_t header_size;
    entry **order;  /* (n) data order */
    size_t total;   /* file size */
} layout;

static f8_status layout_make(const f8_checkpoint *ck, const char *fn, layout *l)
{
    size_t n = ck->n, nm = 0, names = 0;
    for (size_t i = 0; i < n; i++) names += strlen(KEY_CHECKSUM) + strlen(ck->entries[i]->pub.name) + 1;
    memset(l, 0, sizeof *l);
    l->order = (entry **)malloc((n + 1) * sizeof *l->order);
    uint64_t *begin = (uint64_t *)malloc((n + 1) * sizeof *begin);
    const f8i_ck_entry **pub = (const f8i_ck_entry **)malloc((n + 1) * sizeof *pub);
    const char **keys = (const char **)malloc((ck->n_meta + n + 2) * sizeof *keys);
    const char **values = (const char **)malloc((ck->n_meta + n + 2) * sizeof *values);
    char *sum_keys = (char *)malloc(names + 1), (*sums)[17] = (char (*)[17])malloc((n + 1) * sizeof *sums);
    f8_status st = F8_OK;
    if (!l->order || !begin || !pub || !keys || !values || !sum_keys || !sums) {
        st = f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        goto done;
    }
    /* Data offsets follow the data order; the JSON lists entries by name, so
     * begin[] is indexed by name order (the table's own). */
    if (n) memcpy(l->order, ck->entries, n * sizeof *l->order);
    if (n > 1) qsort(l->order, n, sizeof *l->order, cmp_data_order);
    for (size_t i = 0; i < n; i++) pub[i] = &ck->entries[i]->pub;
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        int found;
        size_t at = f8i_ck_entry_lower_bound(ck, l->order[i]->pub.name, &found);
        begin[at] = off;
        off += l->order[i]->pub.bytes;
    }
    char version[16];
    snprintf(version, sizeof version, "%d", FORMAT_VERSION);
    keys[nm] = KEY_FORMAT, values[nm++] = "f8";
    keys[nm] = KEY_VERSION, values[nm++] = version;
    /* The caller's pairs; checksums a loaded file brought are recomputed. */
    for (size_t i = 0; i < ck->n_meta; i++)
        if (strcmp(ck->meta[i].key, KEY_FORMAT) && strcmp(ck->meta[i].key, KEY_VERSION) &&
            strncmp(ck->meta[i].key, KEY_CHECKSUM, strlen(KEY_CHECKSUM)))
            keys[nm] = ck->meta[i].key, values[nm++] = ck->meta[i].value;
    char *k = sum_keys;
    for (size_t i = 0; i < n; i++) {
        const f8i_ck_entry *e = &ck->entries[i]->pub;
        keys[nm] = k;
        k += sprintf(k, "%s%s", KEY_CHECKSUM, e->name) + 1;
        snprintf(sums[i], sizeof sums[i], "%016llx", (unsigned long long)f8i_xxh64(e->data, e->bytes));
        values[nm++] = sums[i];
    }
    l->header = f8i_st_write_header(pub, begin, n, keys, values, nm, &l->header_size);
    if (!l->header) st = f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory for the header", fn);
    l->total = l->header_size + (size_t)off;
done:
    free(begin);
    free(pub);
    free(keys);
    free(values);
    free(sum_keys);
    free(sums);
    if (st != F8_OK) {
        free(l->order);
        l->order = NULL;
    }
    return st;
}

static void layout_free(layout *l)
{
    free(l->header);
    free(l->order);
}

f8_status f8i_checkpoint_serialize(const f8_checkpoint *ck, unsigned char **bytes, size_t *size)
{
    static const char fn[] = "f8i_checkpoint_serialize";
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    if (!bytes || !size) return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "%s: an output is NULL", fn);
    layout l;
    F8I_TRY(layout_make(ck, fn, &l));
    unsigned char *b = (unsigned char *)malloc(l.total);
    if (!b) {
        layout_free(&l);
        return f8i_error(ck->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory (%zu bytes)", fn, l.total);
    }
    memcpy(b, l.header, l.header_size);
    size_t off = l.header_size;
    for (size_t i = 0; i < ck->n; i++) {
        memcpy(b + off, l.order[i]->data, l.order[i]->pub.bytes);
        off += l.order[i]->pub.bytes;
    }
    layout_free(&l);
    *bytes = b;
    *size = off;
    return F8_OK;
}

static int write_full(int fd, const void *src, size_t n)
{
    const unsigned char *p = (const unsigned char *)src;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : EIO;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

f8_status f8_checkpoint_save(const f8_checkpoint *ck, const char *path)
{
    static const char fn[] = "f8_checkpoint_save";
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = ck->ctx;
    if (!path || !*path) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: path is NULL or empty", fn);
    layout l;
    F8I_TRY(layout_make(ck, fn, &l));
    size_t tlen = strlen(path) + 32;
    char *tmp = (char *)malloc(tlen);
    if (!tmp) {
        layout_free(&l);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    /* The temporary sits next to path, so the rename stays on one file
     * system and is atomic; the pid keeps two processes apart, and tells
     * which temporaries were left by a save that was killed. */
    f8i_checkpoint_remove_stale_temps(path);
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    const char *step = "creating";
    int err = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) err = errno;
    else {
        step = "writing";
        err = write_full(fd, l.header, l.header_size);
        for (size_t i = 0; !err && i < ck->n; i++) err = write_full(fd, l.order[i]->data, l.order[i]->pub.bytes);
        /* Flushed before the rename: a crash must not leave a renamed but
         * empty file in place of the old one. */
        if (!err && fsync(fd) != 0) err = errno;
        if (close(fd) != 0 && !err) err = errno;
        if (!err) {
            step = "renaming";
            if (rename(tmp, path) != 0) err = errno;
        }
        if (err) unlink(tmp);
    }
    f8_status st = F8_OK;
    if (err)
        st = f8i_error(ctx, F8_ERR_IO, "%s: %s %.200s: %s", fn, step, !strcmp(step, "renaming") ? path : tmp,
                       strerror(err));
    free(tmp);
    layout_free(&l);
    return st;
}
