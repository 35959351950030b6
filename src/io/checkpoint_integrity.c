/*
 * checkpoint_integrity.c — what guards an f8_checkpoint against damage:
 * XXH64 and the per-tensor checksums the loader checks, the value checks of
 * the restore paths (f8i_checkpoint_check_finite), and the removal of the
 * temporaries that killed saves left behind.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint_table.h"

/* ---- checksums ---------------------------------------------------------- */

#define XXP1 0x9E3779B185EBCA87ull
#define XXP2 0xC2B2AE3D27D4EB4Full
#define XXP3 0x165667B19E3779F9ull
#define XXP4 0x85EBCA77C2B2AE63ull
#define XXP5 0x27D4EB2F165667C5ull

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t xx_round(uint64_t acc, uint64_t in) { return rotl64(acc + in * XXP2, 31) * XXP1; }
static uint64_t xx_merge(uint64_t h, uint64_t v) { return (h ^ xx_round(0, v)) * XXP1 + XXP4; }

uint64_t f8i_xxh64(const void *data, size_t n)
{
    const unsigned char *p = (const unsigned char *)data, *end = p + n;
    uint64_t h;
    if (n >= 32) {
        uint64_t v1 = XXP1 + XXP2, v2 = XXP2, v3 = 0, v4 = 0 - XXP1;
        for (; end - p >= 32; p += 32) {
            v1 = xx_round(v1, le64(p));
            v2 = xx_round(v2, le64(p + 8));
            v3 = xx_round(v3, le64(p + 16));
            v4 = xx_round(v4, le64(p + 24));
        }
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xx_merge(xx_merge(xx_merge(xx_merge(h, v1), v2), v3), v4);
    } else
        h = XXP5;
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8) h = rotl64(h ^ xx_round(0, le64(p)), 27) * XXP1 + XXP4;
    if (end - p >= 4) {
        uint64_t w = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        h = rotl64(h ^ w * XXP1, 23) * XXP2 + XXP3;
        p += 4;
    }
    for (; p < end; p++) h = rotl64(h ^ *p * XXP5, 11) * XXP1;
    h ^= h >> 33;
    h *= XXP2;
    h ^= h >> 29;
    h *= XXP3;
    return h ^ (h >> 32);
}

/* The header's checksum of tensor `name` (NULL when it has none); the
 * metadata is sorted by key, so a binary search that compares the key with
 * KEY_CHECKSUM + name without building the string. */
static const char *find_checksum(const f8i_st_header *h, const char *name)
{
    const size_t plen = strlen(KEY_CHECKSUM);
    size_t lo = 0, hi = h->n_meta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *k = h->meta[mid].key;
        int c = strncmp(k, KEY_CHECKSUM, plen);
        if (!c) c = strcmp(k + plen, name);
        if (!c) return h->meta[mid].value;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* A tensor's bytes against its checksum, if the file has one. */
f8_status f8i_checkpoint_check_checksum(f8_ctx *ctx, const char *fn, const f8i_st_header *h, const entry *e)
{
    const char *want = find_checksum(h, e->pub.name);
    if (!want) return F8_OK;
    if (strlen(want) != 16 || strspn(want, "0123456789abcdef") != 16)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: metadata \"" KEY_CHECKSUM "%.64s\" = \"%.32s\" is not a "
                         "checksum (16 lowercase hex digits)", fn, e->pub.name, want);
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)f8i_xxh64(e->pub.data, e->pub.bytes));
    if (strcmp(got, want))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: tensor \"%.64s\": checksum mismatch (the file says %s, "
                         "its %zu bytes hash to %s): the file is corrupt", fn, e->pub.name, want, e->pub.bytes, got);
    return F8_OK;
}

/* ---- values -------------------------------------------------------------- */

static const char *const rule_text[3] = {"must be finite", "must be finite and > 0", "must be finite and >= 0"};

f8_status f8i_checkpoint_check_finite(const f8_checkpoint *ck, const char *fn, const char *name, f8i_ck_rule rule)
{
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
    if (!e) return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "%s: no tensor \"%.64s\"", fn, name ? name : "(null)");
    if ((unsigned)rule > F8I_CK_NONNEGATIVE) rule = F8I_CK_FINITE;
    const size_t size = f8i_ck_dtype_size(e->dtype), count = size ? e->bytes / size : 0;
    for (size_t i = 0; i < count; i++) {
        const unsigned char *p = e->data + i * size;
        float v;
        int bad;
        if (e->dtype == F8I_CK_F32 || e->dtype == F8I_CK_BF16) {
            uint32_t u = e->dtype == F8I_CK_F32 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                                       (uint32_t)p[3] << 24
                                                 : ((uint32_t)p[0] | (uint32_t)p[1] << 8) << 16;
            memcpy(&v, &u, sizeof v);
            bad = !isfinite(v) || (rule == F8I_CK_POSITIVE && !(v > 0)) || (rule == F8I_CK_NONNEGATIVE && v < 0);
        } else if (e->dtype == F8I_CK_F8_E4M3 || e->dtype == F8I_CK_F8_E5M2) {
            /* the codes themselves: E4M3 has NaN at S.1111.111, E5M2 inf/NaN at S.11111.xx */
            const unsigned b = p[0], mag = b & 0x7Fu;
            const int nonfinite = e->dtype == F8I_CK_F8_E4M3 ? mag == 0x7F : (mag & 0x7C) == 0x7C;
            const int neg = (b & 0x80u) && mag;
            v = nonfinite ? NAN : neg ? -1.0f : mag ? 1.0f : 0.0f; /* sign and zero are what the rules need */
            bad = nonfinite || (rule == F8I_CK_POSITIVE && (neg || !mag)) || (rule == F8I_CK_NONNEGATIVE && neg);
            if (bad && !nonfinite)
                return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "%s: tensor \"%.64s\": element %zu (FP8 code 0x%02x) "
                                 "%s", fn, e->name, i, b, rule_text[rule]);
        } else
            return F8_OK; /* integers */
        if (bad)
            return f8i_error(ck->ctx, F8_ERR_INVALID_ARGUMENT, "%s: tensor \"%.64s\": element %zu is %g (%s)", fn,
                             e->name, i, (double)v, rule_text[rule]);
    }
    return F8_OK;
}

/* ---- temporaries of killed saves --------------------------------------- */

/* Remove the "<path>.tmp.<pid>" files of saves that were killed: those next
 * to path, of the same base name, whose pid is no running process (kill(pid,
 * 0) fails with ESRCH). Other files, and the temporaries of live processes,
 * stay. Best effort: the save reports its own errors, not these. */
void f8i_checkpoint_remove_stale_temps(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) + (slash == path) : 1, blen = strlen(base);
    char *dir = (char *)malloc(dlen + 1);
    if (!dir) return;
    memcpy(dir, slash ? path : ".", dlen);
    dir[dlen] = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strncmp(n, base, blen) || strncmp(n + blen, ".tmp.", 5)) continue;
        const char *digits = n + blen + 5;
        size_t nd = strspn(digits, "0123456789");
        if (nd == 0 || nd > 9 || digits[nd] || digits[0] == '0') continue;
        long pid = strtol(digits, NULL, 10);
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char *full = (char *)malloc(dlen + strlen(n) + 2);
        if (!full) break;
        sprintf(full, "%s/%s", dir, n);
        unlink(full);
        free(full);
    }
    if (d) closedir(d);
    free(dir);
}
