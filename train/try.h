/*
 * try.h — the trainer's error handling, in one place:
 *   TRY(call)    returns the call's f8_status from the enclosing function
 *                when it is not F8_OK (the message is already set: the
 *                callee's err, or f8_ctx_last_error);
 *   train_fail   fails with a message: writes it (printf-style) into the
 *                caller's err buffer and returns the status given, so a
 *                failure reads `return train_fail(err, n, F8_ERR_..., "...")`.
 * Every trainer function that can fail takes (char *err, size_t err_size)
 * or reports through the library's f8_ctx_last_error. (The library itself
 * has its own helpers under src/.)
 */
#ifndef F8_TRAIN_TRY_H
#define F8_TRAIN_TRY_H

#include <stdarg.h>
#include <stdio.h>

#include "f8.h"

#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        f8_status try_st_ = (call);                                                                                    \
        if (try_st_ != F8_OK) return try_st_;                                                                          \
    } while (0)

/* The message into err (err_size bytes; none kept when err is NULL or
 * err_size 0), then st. */
static inline f8_status train_failv(char *err, size_t err_size, f8_status st, const char *fmt, va_list ap)
{
    if (err && err_size) vsnprintf(err, err_size, fmt, ap);
    return st;
}

static inline __attribute__((format(printf, 4, 5))) f8_status train_fail(char *err, size_t err_size, f8_status st,
                                                                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    train_failv(err, err_size, st, fmt, ap);
    va_end(ap);
    return st;
}

#endif
