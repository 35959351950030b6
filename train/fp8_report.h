/*
 * fp8_report.h — f8_train's FP8 telemetry (--fp8-report): per step, every
 * slot's amax, scale and saturated / flushed fractions (f8_ctx_telemetry_read)
 * to a CSV beside the loss log; at the end, the worst tensors of the run and
 * a plot of the worst fractions per step.
 *
 * The CSV has one header line and one row per (step, slot that cast
 * anything in the step):
 *   step,tensor,amax,scale,count,saturated,flushed
 * with saturated and flushed as fractions of count. Tensor names follow the
 * model: blocks.<l>.<qkv|proj|mlp>.<slot> (input, weight, grad_output,
 * fc1_input, ...), head.<slot>.
 */
#ifndef F8_TRAIN_FP8_REPORT_H
#define F8_TRAIN_FP8_REPORT_H

#include <stdio.h>

#include "gpt.h"

typedef struct fp8_report fp8_report;

/* Name the slots of m's modules; csv_path may be NULL or "" (no CSV). The
 * ctx must have telemetry on. */
f8_status fp8_report_create(f8_ctx *ctx, const gpt *m, const char *csv_path, int append, fp8_report **r, char *err,
                            size_t n);
void fp8_report_destroy(fp8_report *r);

/* Read the last step's snapshot (after the step's loss download), write its
 * CSV rows and add it to the run's totals. */
f8_status fp8_report_step(fp8_report *r, int64_t step);

/* The `top` worst tensors of the run by saturated and by flushed fraction,
 * with their last amax and scale. */
void fp8_report_print(const fp8_report *r, FILE *out, int top);

/* An SVG of the worst saturated and flushed percentage of any tensor per
 * step (the plot of the loss logs, reused). */
f8_status fp8_report_plot(const fp8_report *r, const char *svg_path, char *err, size_t n);

#endif /* F8_TRAIN_FP8_REPORT_H */
