/*
 * plot.h — loss curves of one or more runs as a self-contained SVG file.
 *
 * Each run (series) gets one colour: its train loss as a solid line
 * (smoothed, with the raw values drawn faintly behind), its validation loss
 * as a dashed line with a dot on every evaluated step. Axes are labelled with
 * "nice" ticks (1, 2, 5 x 10^k); a legend names the runs. The y range is
 * taken from the smoothed train and the val curves, so a first step at
 * ln(vocab) does not flatten everything else; the raw curve is clipped to the
 * plot area. The output depends only on the inputs (fixed number formats, no
 * date), so the same logs give the same bytes.
 */
#ifndef F8_TRAIN_PLOT_H
#define F8_TRAIN_PLOT_H

#include <stddef.h>

#include "f8.h"
#include "log.h"

typedef struct plot_series {
    const char *name;     /* legend text (XML-escaped on output) */
    const tlog_row *rows; /* n rows, steps increasing (as tlog_read gives) */
    size_t n;
} plot_series;

typedef struct plot_config {
    const char *title;  /* NULL: no title. Default "training loss" */
    int width, height;  /* pixels, each >= 200; default 800 x 500 */
    double smooth;      /* EMA weight in [0, 1) for the train curve (debiased,
                           as TensorBoard's); 0: none. Default 0.9 */
    int raw_train;      /* also draw the unsmoothed train loss faintly (only
                           when smooth > 0); default 1 */
    int x_tokens;       /* x axis: 0 = step (default), 1 = tokens */
    double y_min, y_max; /* NAN (default): from the data */
} plot_config;

plot_config plot_config_default(void);

/* Write the SVG of n series (n >= 1) to `path`. Rows with NAN or infinite
 * values are left out of their curve. Errors: F8_ERR_INVALID_ARGUMENT (NULL
 * path or series, n < 1, a bad config), F8_ERR_IO (cannot write); the message
 * goes to `error` when not NULL. */
f8_status plot_write_svg(const char *path, const plot_config *config, const plot_series *series, int n,
                         char *error, size_t error_size);

/* Read n CSV logs (tlog_read) and plot them: names[i] labels csv_paths[i];
 * names NULL (or a NULL entry) uses the file name without directory and
 * ".csv". Errors: those of tlog_read and plot_write_svg. */
f8_status plot_logs_svg(const char *svg_path, const plot_config *config, const char *const *csv_paths,
                        const char *const *names, int n, char *error, size_t error_size);

#endif /* F8_TRAIN_PLOT_H */
