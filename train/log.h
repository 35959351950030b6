/*
 * log.h — the trainer's per-step CSV log, its reader (for plots), and the
 * one-line progress report printed to the terminal.
 *
 * The CSV has one header line and then one row per logged step:
 *   step,tokens,train_loss,val_loss,lr,grad_norm,ms_per_step,tokens_per_s,mfu,peak_mem_mib
 * A field is empty where its value is NAN (val_loss on steps without an
 * evaluation, mfu when the peak is unknown). Losses, lr and grad_norm are
 * written with 9 significant digits (FP32 round-trips), ms_per_step with 3
 * decimals, tokens_per_s with 1, mfu (a fraction of peak, 0.382 for 38.2%)
 * with 5, peak_mem_mib (MiB of backend memory f8 allocated at its high point,
 * f8_ctx_counters.peak_bytes) with 1. Every row is flushed as it is written, so a crash loses at most the
 * row being written.
 *
 * Resumed runs append to the same file. Reading gives the last word to the
 * latest rows: a row whose step is below the previous row's drops the earlier
 * rows of later steps (the part of the old run the checkpoint rolled back),
 * and rows of the same step merge (a later non-empty field wins), so a
 * trainer may also log the validation loss as a row of its own.
 */
#ifndef F8_TRAIN_LOG_H
#define F8_TRAIN_LOG_H

#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "f8.h"

#define TLOG_HEADER "step,tokens,train_loss,val_loss,lr,grad_norm,ms_per_step,tokens_per_s,mfu,peak_mem_mib"

typedef struct tlog_row {
    int64_t step;        /* optimizer steps done (>= 0) */
    int64_t tokens;      /* training tokens consumed so far */
    double train_loss;   /* mean cross-entropy, nats/token; NAN: not measured */
    double val_loss;     /* NAN: not evaluated at this step */
    double lr;           /* learning rate used by this step */
    double grad_norm;    /* global L2 norm of the gradients (before clipping) */
    double ms_per_step;  /* wall time of the step */
    double tokens_per_s; /* training throughput */
    double mfu;          /* model FLOPs utilisation, fraction of peak; NAN: unknown */
    double peak_mem_mib; /* peak backend memory of f8's allocations so far, MiB; NAN: unknown */
} tlog_row;

/* step 0, tokens 0, every double NAN. */
tlog_row tlog_row_empty(void);

typedef struct tlog tlog;

/* Open a CSV log for writing. append == 0: create or truncate, write the
 * header. append != 0: keep an existing file's rows (its first line must be
 * TLOG_HEADER; an unfinished last line, left by a crash, is cut off); a
 * missing or empty file gets the header. [out] *log (tlog_destroy). On error
 * *log is NULL and a message goes to `error` (when not NULL). Errors:
 * F8_ERR_INVALID_ARGUMENT (NULL path or log), F8_ERR_IO (cannot open, write or
 * truncate; a different header), F8_ERR_OUT_OF_MEMORY. */
f8_status tlog_create(const char *path, int append, tlog **log, char *error, size_t error_size);

/* Append one row and flush it. Errors: F8_ERR_INVALID_ARGUMENT,
 * F8_ERR_IO (the write failed: disk full...); details in tlog_last_error. */
f8_status tlog_write(tlog *log, const tlog_row *row);

/* Message of the last failing call ("" if none). Owned by log. */
const char *tlog_last_error(const tlog *log);

/* Close the file. NULL is a no-op. */
void tlog_destroy(tlog *log);

/* The rows of a log, as read back. */
typedef struct tlog_rows {
    tlog_row *rows; /* n rows, steps strictly increasing; owned (tlog_rows_free) */
    size_t n;
} tlog_rows;

/* Read a CSV log written by tlog_write (or by hand). Columns are found by
 * their header names in any order; unknown columns are ignored; a missing
 * column reads as NAN (0 for tokens); "step" is required. Rows are resolved as
 * the file comment above says. An unfinished last line (no '\n') is skipped;
 * any other malformed line is an error naming its line number. [out] *rows
 * (tlog_rows_free; zeroed on error). Errors: F8_ERR_INVALID_ARGUMENT,
 * F8_ERR_IO (cannot read; no header; malformed row), F8_ERR_OUT_OF_MEMORY. */
f8_status tlog_read(const char *path, tlog_rows *rows, char *error, size_t error_size);

/* Free what tlog_read allocated and zero *rows. NULL is a no-op. */
void tlog_rows_free(tlog_rows *rows);

/* Format the progress line into buf (always NUL-terminated when size > 0):
 *   "step 120/1000 | loss 2.345 | val 2.401 | 123.4K tok/s | 45.6 ms/step | MFU 38.2% | ETA 1m23s"
 * The loss, val and MFU parts appear only for non-NAN values; "/total" and
 * ETA only when total_steps > 0. eta_s < 0 or NAN derives the ETA from the
 * row: (total_steps - step) * ms_per_step. Returns the length the full line
 * has (as snprintf does; >= size means it was cut). */
int tlog_progress(char *buf, size_t size, const tlog_row *row, int64_t total_steps, double eta_s);

/* The trainer's clock: seconds on CLOCK_MONOTONIC (steps' times, startup's parts). */
double tlog_now_s(void);

/* Print text to f as a terminal shows it safely: control bytes other than
 * '\n' and '\t' (a byte-level model samples any byte: '\r', escape
 * sequences) as \xNN; other bytes as they are. */
void tlog_print_text(FILE *f, const char *text);

#endif /* F8_TRAIN_LOG_H */
