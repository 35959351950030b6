/*
 * log.c — CSV training log, its reader, the progress line (log.h is the
 * manual).
 *
 * Design: the writer is a FILE* flushed per row (a row is ~100 bytes; one
 * write syscall a step is nothing next to a step). Appending after a crash
 * first cuts an unfinished last line so the file stays parseable. The reader
 * slurps the file (logs are small) and resolves resumed runs by step number,
 * so the plot shows one curve per run whatever restarts happened.
 */
#include "log.h"
#include "parse.h"
#include "try.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { NCOLS = 10 };
static const char *const COLUMNS[NCOLS] = {"step",        "tokens",       "train_loss", "val_loss",    "lr",
                                           "grad_norm",   "ms_per_step",  "tokens_per_s", "mfu", "peak_mem_mib"};

struct tlog {
    FILE *f;
    char err[512];
};

/* The whole file, NUL-terminated. *buf NULL with 0 bytes for a missing file
 * when missing_ok. */
static f8_status slurp(const char *path, int missing_ok, char **buf, size_t *n, char *error, size_t error_size)
{
    *buf = NULL, *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (missing_ok && errno == ENOENT) return F8_OK;
        return train_fail(error, error_size, F8_ERR_IO, "log '%s': cannot open: %s", path, strerror(errno));
    }
    size_t cap = 4096, len = 0;
    char *b = (char *)malloc(cap);
    while (b) {
        len += fread(b + len, 1, cap - 1 - len, f);
        if (len < cap - 1) break;
        char *grown = (char *)realloc(b, 2 * cap);
        if (!grown) free(b);
        b = grown, cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b) {
        return train_fail(error, error_size, F8_ERR_OUT_OF_MEMORY, "log '%s': out of memory", path);
    }
    if (bad) {
        free(b);
        return train_fail(error, error_size, F8_ERR_IO, "log '%s': read error", path);
    }
    b[len] = 0;
    *buf = b, *n = len;
    return F8_OK;
}

/* Does the text up to the first '\n' (without a '\r') equal the header? */
static int is_header(const char *s, size_t n)
{
    size_t h = strlen(TLOG_HEADER);
    return n >= h && !memcmp(s, TLOG_HEADER, h) && (n == h || s[h] == '\n' || s[h] == '\r');
}

f8_status tlog_create(const char *path, int append, tlog **log, char *error, size_t error_size)
{
    if (error && error_size) error[0] = 0;
    if (!log) return F8_ERR_INVALID_ARGUMENT;
    *log = NULL;
    if (!path) {
        return train_fail(error, error_size, F8_ERR_INVALID_ARGUMENT, "tlog_create: path is NULL");
    }
    int need_header = 1;
    if (append) {
        char *old;
        size_t n;
        f8_status st = slurp(path, 1, &old, &n, error, error_size);
        if (st != F8_OK) return st;
        size_t keep = n;
        while (keep > 0 && old[keep - 1] != '\n') keep--; /* an unfinished last line */
        if (keep > 0 && !is_header(old, keep)) {
            free(old);
            return train_fail(error, error_size, F8_ERR_IO,
                "log '%s': its first line is not the header \"%s\"", path, TLOG_HEADER);
        }
        free(old);
        if (keep < n && truncate(path, (off_t)keep) != 0) {
            return train_fail(error, error_size, F8_ERR_IO,
                "log '%s': cannot cut its unfinished last line: %s", path, strerror(errno));
        }
        need_header = keep == 0;
    }
    tlog *l = (tlog *)calloc(1, sizeof *l);
    if (!l) {
        return train_fail(error, error_size, F8_ERR_OUT_OF_MEMORY, "out of memory");
    }
    l->f = fopen(path, append ? "ab" : "wb");
    if (!l->f) {
        free(l);
        return train_fail(error, error_size, F8_ERR_IO, "log '%s': cannot open for writing: %s", path, strerror(errno));
    }
    if (need_header && (fprintf(l->f, "%s\n", TLOG_HEADER) < 0 || fflush(l->f) != 0)) {
        const int e = errno;
        tlog_destroy(l);
        return train_fail(error, error_size, F8_ERR_IO, "log '%s': cannot write the header: %s", path, strerror(e));
    }
    *log = l;
    return F8_OK;
}

/* A value or an empty field for NAN. */
static const char *field(char *buf, size_t size, const char *fmt, double v)
{
    if (isnan(v)) return "";
    snprintf(buf, size, fmt, v);
    return buf;
}

f8_status tlog_write(tlog *log, const tlog_row *r)
{
    if (!log) return F8_ERR_INVALID_ARGUMENT;
    if (!r) {
        snprintf(log->err, sizeof log->err, "tlog_write: row is NULL");
        return F8_ERR_INVALID_ARGUMENT;
    }
    char f[8][40];
    int rc = fprintf(log->f, "%lld,%lld,%s,%s,%s,%s,%s,%s,%s,%s\n", (long long)r->step, (long long)r->tokens,
                     field(f[0], 40, "%.9g", r->train_loss), field(f[1], 40, "%.9g", r->val_loss),
                     field(f[2], 40, "%.9g", r->lr), field(f[3], 40, "%.9g", r->grad_norm),
                     field(f[4], 40, "%.3f", r->ms_per_step), field(f[5], 40, "%.1f", r->tokens_per_s),
                     field(f[6], 40, "%.5f", r->mfu), field(f[7], 40, "%.1f", r->peak_mem_mib));
    if (rc < 0 || fflush(log->f) != 0) {
        snprintf(log->err, sizeof log->err, "log write failed: %s", strerror(errno));
        return F8_ERR_IO;
    }
    return F8_OK;
}

const char *tlog_last_error(const tlog *log) { return log ? log->err : ""; }

void tlog_destroy(tlog *log)
{
    if (!log) return;
    if (log->f) fclose(log->f);
    free(log);
}

tlog_row tlog_row_empty(void)
{
    tlog_row r;
    r.step = 0, r.tokens = 0;
    r.train_loss = r.val_loss = r.lr = r.grad_norm = r.ms_per_step = r.tokens_per_s = r.mfu = r.peak_mem_mib = NAN;
    return r;
}

void tlog_rows_free(tlog_rows *rows)
{
    if (!rows) return;
    free(rows->rows);
    rows->rows = NULL, rows->n = 0;
}

/* Split a line (modified in place) at commas; returns the field count. */
static int split_fields(char *line, char **fields, int max)
{
    int n = 0;
    for (char *at = line;;) {
        char *comma = strchr(at, ',');
        if (n < max) fields[n] = at;
        n++;
        if (!comma) break;
        *comma = 0, at = comma + 1;
    }
    return n;
}

/* A number filling the whole field (spaces around allowed; parse.h's strict
 * rules inside); empty -> NAN, and the words printf writes for a diverged
 * run's loss ("inf", "-inf", "nan", "-nan") as such. */
static int parse_double(const char *s, double *v)
{
    char buf[64], err[8];
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ') n--;
    if (n == 0) return *v = NAN, 1;
    if (n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    const char *word = buf + (buf[0] == '-');
    if (!strcmp(word, "inf") || !strcmp(word, "nan")) {
        *v = word[0] == 'n' ? NAN : buf[0] == '-' ? -INFINITY : INFINITY;
        return 1;
    }
    return parse_real("log", buf, -HUGE_VAL, HUGE_VAL, v, err, sizeof err) == 0;
}

static void merge(tlog_row *into, const tlog_row *r)
{
    into->tokens = r->tokens;
    const double *src[8] = {&r->train_loss, &r->val_loss,     &r->lr,  &r->grad_norm,
                            &r->ms_per_step, &r->tokens_per_s, &r->mfu, &r->peak_mem_mib};
    double *dst[8] = {&into->train_loss,  &into->val_loss,     &into->lr,  &into->grad_norm,
                      &into->ms_per_step, &into->tokens_per_s, &into->mfu, &into->peak_mem_mib};
    for (int i = 0; i < 8; i++)
        if (!isnan(*src[i])) *dst[i] = *src[i];
}

f8_status tlog_read(const char *path, tlog_rows *out, char *error, size_t error_size)
{
    if (error && error_size) error[0] = 0;
    if (!out) return F8_ERR_INVALID_ARGUMENT;
    out->rows = NULL, out->n = 0;
    if (!path) {
        return train_fail(error, error_size, F8_ERR_INVALID_ARGUMENT, "tlog_read: path is NULL");
    }
    char *text;
    size_t len;
    f8_status st = slurp(path, 0, &text, &len, error, error_size);
    if (st != F8_OK) return st;
    size_t cap = 256, n = 0;
    tlog_row *rows = (tlog_row *)malloc(cap * sizeof *rows);
    int col[NCOLS], ncols = 0, lineno = 0;
    char *fields[64];
    st = rows ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    if (!rows) st = train_fail(error, error_size, st, "log '%s': out of memory", path);
    for (char *at = text; st == F8_OK && *at;) {
        char *nl = strchr(at, '\n'), *line = at;
        int last_unfinished = nl == NULL;
        if (nl) *nl = 0, at = nl + 1;
        else at += strlen(at);
        lineno++;
        size_t ll = strlen(line);
        if (ll > 0 && line[ll - 1] == '\r') line[--ll] = 0;
        if (lineno == 1) {
            int nf = split_fields(line, fields, 64);
            for (int c = 0; c < NCOLS; c++) {
                col[c] = -1;
                for (int j = 0; j < nf && j < 64; j++)
                    if (!strcmp(fields[j], COLUMNS[c])) col[c] = j;
            }
            ncols = nf;
            if (col[0] < 0) {
                st = train_fail(error, error_size, F8_ERR_IO,
                    "log '%s': line 1 is not a header with a \"step\" column", path);
            }
            continue;
        }
        if (ll == 0) continue;
        int nf = split_fields(line, fields, 64), ok = nf == ncols && nf <= 64;
        tlog_row r = tlog_row_empty();
        double v[NCOLS];
        for (int c = 0; ok && c < NCOLS; c++) {
            v[c] = NAN;
            if (col[c] >= 0) ok = parse_double(fields[col[c]], &v[c]);
        }
        /* step: an integer; tokens: an integer or empty */
        ok = ok && !isnan(v[0]) && v[0] >= 0 && v[0] == floor(v[0]) && (isnan(v[1]) || v[1] == floor(v[1]));
        if (!ok) {
            if (last_unfinished) break; /* a crash mid-row: not an error */
            st = train_fail(error, error_size, F8_ERR_IO,
                "log '%s': line %d is not a row of %d fields with an integer step", path, lineno,
                ncols);
            break;
        }
        r.step = (int64_t)v[0], r.tokens = isnan(v[1]) ? 0 : (int64_t)v[1];
        r.train_loss = v[2], r.val_loss = v[3], r.lr = v[4], r.grad_norm = v[5];
        r.ms_per_step = v[6], r.tokens_per_s = v[7], r.mfu = v[8], r.peak_mem_mib = v[9];
        while (n > 0 && rows[n - 1].step > r.step) n--; /* a resumed run rewrote these steps */
        if (n > 0 && rows[n - 1].step == r.step) {
            merge(&rows[n - 1], &r);
            continue;
        }
        if (n == cap) {
            tlog_row *grown = (tlog_row *)realloc(rows, 2 * cap * sizeof *rows);
            if (!grown) {
                st = train_fail(error, error_size, F8_ERR_OUT_OF_MEMORY, "log '%s': out of memory", path);
                break;
            }
            rows = grown, cap *= 2;
        }
        rows[n++] = r;
    }
    if (st == F8_OK && lineno == 0) {
        st = train_fail(error, error_size, F8_ERR_IO, "log '%s': empty file, no header", path);
    }
    free(text);
    if (st != F8_OK) {
        free(rows);
        return st;
    }
    out->rows = rows, out->n = n;
    return F8_OK;
}

typedef struct {
    char *s;
    size_t size;
    int len; /* the length the text would have */
} sbuf;

static void add(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t at = (size_t)b->len < b->size ? (size_t)b->len : b->size;
    int n = vsnprintf(b->s ? b->s + at : NULL, b->s ? b->size - at : 0, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += n;
}

int tlog_progress(char *buf, size_t size, const tlog_row *row, int64_t total_steps, double eta_s)
{
    sbuf b = {size ? buf : NULL, size, 0};
    if (buf && size) buf[0] = 0;
    if (!row) return 0;
    add(&b, "step %lld", (long long)row->step);
    if (total_steps > 0) add(&b, "/%lld", (long long)total_steps);
    if (!isnan(row->train_loss)) add(&b, " | loss %.3f", row->train_loss);
    if (!isnan(row->val_loss)) add(&b, " | val %.3f", row->val_loss);
    double t = row->tokens_per_s;
    if (!isnan(t)) {
        if (t < 1e3) add(&b, " | %.0f tok/s", t);
        else if (t < 1e6) add(&b, " | %.1fK tok/s", t / 1e3);
        else if (t < 1e9) add(&b, " | %.1fM tok/s", t / 1e6);
        else add(&b, " | %.2fG tok/s", t / 1e9);
    }
    if (!isnan(row->ms_per_step)) add(&b, " | %.1f ms/step", row->ms_per_step);
    if (!isnan(row->mfu)) add(&b, " | MFU %.1f%%", 100.0 * row->mfu);
    if (total_steps > 0) {
        double eta = eta_s;
        if (isnan(eta) || eta < 0) eta = (double)(total_steps - row->step) * row->ms_per_step / 1000.0;
        if (!isnan(eta) && eta >= 0 && eta < 1e9) {
            long long s = (long long)(eta + 0.5);
            if (s < 60) add(&b, " | ETA %llds", s);
            else if (s < 3600) add(&b, " | ETA %lldm%02llds", s / 60, s % 60);
            else if (s < 86400) add(&b, " | ETA %lldh%02lldm", s / 3600, s % 3600 / 60);
            else add(&b, " | ETA %lldd%02lldh", s / 86400, s % 86400 / 3600);
        }
    }
    return b.len;
}

void tlog_print_text(FILE *f, const char *text)
{
    for (const unsigned char *c = (const unsigned char *)text; c && *c; c++) {
        if ((*c < 0x20 && *c != '\n' && *c != '\t') || *c == 0x7F) fprintf(f, "\\x%02x", *c);
        else fputc(*c, f);
    }
}

double tlog_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
