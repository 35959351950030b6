/*
 * parse.h — the one number parser of f8_train: every number read from the
 * command line, a checkpoint's metadata or a CSV log goes through it.
 *
 * Strict on purpose: the whole string must be the number (no spaces, no
 * '+', no hex or octal, no trailing text), and it must lie in [lo, hi];
 * otherwise the call fails with a message naming `what` (the option or
 * metadata key) and the value as given, e.g.
 *   "train.layers = '1000000' is outside [1, 1024]"
 *   "--steps = 'abc' is not an integer"
 * (atoll would have read 0 from "abc" and 1 from "1e23".)
 */
#ifndef F8_TRAIN_PARSE_H
#define F8_TRAIN_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* A decimal integer: an optional '-', then digits. Returns 0 and sets *out,
 * or -1 with the reason in err (*out unchanged). */
int parse_int(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err, size_t err_size);

/* A finite decimal real ("3e-4", "-0.5", ".5"; not "inf", "nan" or hex).
 * Returns 0 and sets *out, or -1 with the reason in err (*out unchanged). */
int parse_real(const char *what, const char *s, double lo, double hi, double *out, char *err, size_t err_size);

#endif /* F8_TRAIN_PARSE_H */
