/*
 * parse.c — strict numbers for f8_train (parse.h is the manual).
 *
 * Integers are parsed digit by digit with an overflow check, so no libc
 * locale or errno state is involved; reals are screened to the characters a
 * decimal number may hold before strtod sees them (strtod alone accepts
 * leading spaces, "inf", "nan" and hex floats).
 */
#include "parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value as given, cut to keep messages short. */
#define SHOWN "'%.40s%s'"
#define SHOW(s) (s), strlen(s) > 40 ? "..." : ""

int parse_int(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err, size_t n)
{
    if (!s) s = "";
    const char *p = s;
    int neg = *p == '-';
    p += neg;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int digits = 0, over = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (limit - d) / 10) over = 1;
        else v = v * 10 + d;
    }
    if (!digits || *p) {
        snprintf(err, n, "%s = " SHOWN " is not an integer", what, SHOW(s));
        return -1;
    }
    int64_t x = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    if (over || x < lo || x > hi) {
        snprintf(err, n, "%s = " SHOWN " is outside [%lld, %lld]", what, SHOW(s), (long long)lo, (long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

int parse_real(const char *what, const char *s, double lo, double hi, double *out, char *err, size_t n)
{
    if (!s) s = "";
    int ok = *s != 0 && strspn(s, "0123456789+-.eE") == strlen(s) && (s[0] == '-' || s[0] == '.' ||
                                                                        (s[0] >= '0' && s[0] <= '9'));
    char *end = NULL;
    double v = ok ? strtod(s, &end) : 0.0;
    if (!ok || *end || !isfinite(v)) {
        snprintf(err, n, "%s = " SHOWN " is not a %snumber", what, SHOW(s), ok && !*end ? "finite " : "");
        return -1;
    }
    if (!(v >= lo && v <= hi)) {
        snprintf(err, n, "%s = " SHOWN " is outside [%g, %g]", what, SHOW(s), lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}
