/*
 * plot.c — loss curves as SVG (plot.h is the manual).
 *
 * Design: one pass to find the ranges, then the SVG is printed straight to the
 * file: frame and ticks, one clipped group per run, the legend last so it sits
 * on top. Coordinates are printed with two decimals and nothing else varies,
 * so the bytes are a function of the logs. Ticks use the classic 1-2-5 rule;
 * labels get k/M/G suffixes once the axis reaches 10^4 (token counts).
 */
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MARGIN_L = 72, MARGIN_R = 24, MARGIN_T = 44, MARGIN_B = 56, TICKS = 6 };

static const char *const PALETTE[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};
#define NPALETTE ((int)(sizeof PALETTE / sizeof PALETTE[0]))

plot_config plot_config_default(void)
{
    plot_config c;
    c.title = "training loss";
    c.width = 800, c.height = 500;
    c.smooth = 0.9;
    c.raw_train = 1;
    c.x_tokens = 0;
    c.y_min = c.y_max = NAN;
    return c;
}

typedef struct {
    double lo, hi, step;
} axis;

/* Widen [lo, hi] to multiples of a 1-2-5 step giving about TICKS ticks. */
static axis axis_nice(double lo, double hi)
{
    if (!(hi > lo)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1.0;
        lo -= pad, hi += pad;
    }
    double raw = (hi - lo) / TICKS, mag = pow(10.0, floor(log10(raw))), r = raw / mag;
    double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
    axis a = {floor(lo / step + 1e-9) * step, ceil(hi / step - 1e-9) * step, step};
    return a;
}

static void tick_label(char *buf, size_t size, double v, const axis *a)
{
    double top = fmax(fabs(a->lo), fabs(a->hi)), unit = 1;
    const char *suffix = "";
    if (top >= 1e9) unit = 1e9, suffix = "G";
    else if (top >= 1e6) unit = 1e6, suffix = "M";
    else if (top >= 1e4) unit = 1e3, suffix = "k";
    int decimals = (int)ceil(-log10(a->step / unit) - 1e-9);
    if (decimals < 0) decimals = 0;
    if (fabs(v) < a->step * 1e-9) {
        snprintf(buf, size, "0"); /* not "-0" or "0.0G" */
        return;
    }
    snprintf(buf, size, "%.*f%s", decimals, v / unit, suffix);
}

static void xml_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else if (c == '\'') fputs("&apos;", f);
        else if (c < 0x20 && c != '\t') fputc('?', f); /* not allowed in XML 1.0 */
        else fputc(c, f);
    }
}

typedef struct {
    double x0, x1, y0, y1; /* data ranges */
    double l, t, w, h;     /* plot area in pixels */
} frame;

static double px(const frame *fr, double x) { return fr->l + (x - fr->x0) / (fr->x1 - fr->x0) * fr->w; }
static double py(const frame *fr, double y) { return fr->t + fr->h - (y - fr->y0) / (fr->y1 - fr->y0) * fr->h; }
static double row_x(const tlog_row *r, int tokens) { return tokens ? (double)r->tokens : (double)r->step; }

/* Debiased EMA of the finite train losses; NAN where the row has none. */
static void smooth_train(const plot_series *s, double a, double *out)
{
    double ema = 0, weight = 1;
    for (size_t i = 0; i < s->n; i++) {
        double v = s->rows[i].train_loss;
        if (!isfinite(v)) {
            out[i] = NAN;
            continue;
        }
        ema = a * ema + (1 - a) * v;
        weight *= a;
        out[i] = a > 0 ? ema / (1 - weight) : v;
    }
}

/* A polyline through the finite points, broken where a value is missing. */
static void path(FILE *f, const frame *fr, const plot_series *s, const double *y, int tokens, const char *style)
{
    int pen = 0, any = 0;
    for (size_t i = 0; i < s->n; i++) {
        double x = row_x(&s->rows[i], tokens);
        if (!isfinite(y[i]) || !isfinite(x)) {
            pen = 0;
            continue;
        }
        if (!any) fputs("<path d=\"", f);
        fprintf(f, "%s%.2f %.2f", pen ? " L" : any ? " M" : "M", px(fr, x), py(fr, y[i]));
        pen = any = 1;
    }
    if (any) fprintf(f, "\" fill=\"none\" %s/>\n", style);
}

static f8_status write_svg(FILE *f, const plot_config *c, const plot_series *series, int n, double **smooth)
{
    int tokens = c->x_tokens != 0, any_val = 0;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int k = 0; k < n; k++) {
        const plot_series *s = &series[k];
        for (size_t i = 0; i < s->n; i++) {
            const tlog_row *r = &s->rows[i];
            double x = row_x(r, tokens), ys[3] = {smooth[k][i], r->val_loss, c->smooth > 0 ? NAN : r->train_loss};
            if (!isfinite(x)) continue;
            int used = 0;
            for (int j = 0; j < 3; j++)
                if (isfinite(ys[j])) ylo = fmin(ylo, ys[j]), yhi = fmax(yhi, ys[j]), used = 1;
            if (used || isfinite(r->train_loss)) xlo = fmin(xlo, x), xhi = fmax(xhi, x);
            any_val |= isfinite(r->val_loss);
        }
    }
    if (!(xlo <= xhi)) xlo = 0, xhi = 1;
    if (!(ylo <= yhi)) ylo = 0, yhi = 1;
    if (xlo >= 0 && xlo <= 0.1 * xhi) xlo = 0; /* long runs start at the origin */
    if (!isnan(c->y_min)) ylo = c->y_min;
    if (!isnan(c->y_max)) yhi = c->y_max;
    axis ax = axis_nice(xlo, xhi), ay = axis_nice(ylo, yhi);
    if (!isnan(c->y_min)) ay.lo = c->y_min; /* an explicit bound is kept as given */
    if (!isnan(c->y_max)) ay.hi = c->y_max;
    frame fr = {ax.lo, ax.hi, ay.lo, ay.hi, MARGIN_L, MARGIN_T, c->width - MARGIN_L - MARGIN_R,
                c->height - MARGIN_T - MARGIN_B};

    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            c->width, c->height, c->width, c->height);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", c->width, c->height);
    fprintf(f, "<defs><clipPath id=\"area\"><rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/></clipPath></defs>\n",
            fr.l, fr.t, fr.w, fr.h);
    if (c->title) {
        fprintf(f, "<text x=\"%.2f\" y=\"26\" text-anchor=\"middle\" font-size=\"16\">", fr.l + fr.w / 2);
        xml_text(f, c->title);
        fputs("</text>\n", f);
    }
    /* Grid, ticks and labels. */
    char label[64];
    for (int i = 0; i <= 1000; i++) {
        double v = ax.lo + i * ax.step;
        if (v > ax.hi + ax.step * 1e-6) break;
        double x = px(&fr, v);
        tick_label(label, sizeof label, v, &ax);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e6e6e6\"/>\n", x, fr.t, x, fr.t + fr.h);
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n", x, fr.t + fr.h + 18, label);
    }
    for (int i = 0; i <= 1000; i++) {
        double v = ay.lo + i * ay.step;
        if (v > ay.hi + ay.step * 1e-6) break;
        if (v < ay.lo - ay.step * 1e-6) continue;
        double y = py(&fr, v);
        tick_label(label, sizeof label, v, &ay);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e6e6e6\"/>\n", fr.l, y, fr.l + fr.w, y);
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", fr.l - 8, y + 4, label);
    }
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#333\"/>\n", fr.l,
            fr.t, fr.w, fr.h);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n", fr.l + fr.w / 2,
            (double)c->height - 14, tokens ? "tokens" : "step");
    fprintf(f, "<text transform=\"translate(18 %.2f) rotate(-90)\" text-anchor=\"middle\">loss (nats/token)</text>\n",
            fr.t + fr.h / 2);

    /* The curves, clipped to the plot area. */
    fputs("<g clip-path=\"url(#area)\">\n", f);
    for (int k = 0; k < n; k++) {
        const plot_series *s = &series[k];
        const char *col = PALETTE[k % NPALETTE];
        char style[160];
        double *raw = (double *)malloc((s->n ? s->n : 1) * sizeof *raw), *val = raw;
        if (!raw) return F8_ERR_OUT_OF_MEMORY;
        if (c->smooth > 0 && c->raw_train) {
            for (size_t i = 0; i < s->n; i++) raw[i] = s->rows[i].train_loss;
            snprintf(style, sizeof style, "stroke=\"%s\" stroke-opacity=\"0.25\" stroke-width=\"1\"", col);
            path(f, &fr, s, raw, tokens, style);
        }
        snprintf(style, sizeof style, "stroke=\"%s\" stroke-width=\"2\"", col);
        path(f, &fr, s, smooth[k], tokens, style);
        for (size_t i = 0; i < s->n; i++) val[i] = s->rows[i].val_loss;
        snprintf(style, sizeof style, "stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"", col);
        path(f, &fr, s, val, tokens, style);
        for (size_t i = 0; i < s->n; i++)
            if (isfinite(val[i]))
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n",
                        px(&fr, row_x(&s->rows[i], tokens)), py(&fr, val[i]), col);
        free(raw);
    }
    fputs("</g>\n", f);

    /* Legend, top right inside the plot area. */
    size_t longest = 16;
    for (int k = 0; k < n; k++)
        if (series[k].name && strlen(series[k].name) > longest) longest = strlen(series[k].name);
    if (longest > 60) longest = 60;
    int rows = n + 1 + any_val;
    double lw = 44 + 7.0 * (double)longest, lh = 8 + 18.0 * rows, lx = fr.l + fr.w - lw - 10, ly = fr.t + 10;
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#999\"/>\n",
            lx, ly, lw, lh);
    for (int r = 0; r < rows; r++) {
        double y = ly + 17 + 18.0 * r;
        const char *col = r < n ? PALETTE[r % NPALETTE] : "#555";
        const char *dash = r == n + 1 ? " stroke-dasharray=\"6 4\"" : "";
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", lx + 8,
                y - 4, lx + 32, y - 4, col, dash);
        if (r == n + 1) fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", lx + 20, y - 4, col);
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\">", lx + 38, y);
        if (r < n) xml_text(f, series[r].name ? series[r].name : "");
        else fputs(r == n ? (c->smooth > 0 ? "train (smoothed)" : "train") : "val", f);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    return F8_OK;
}

f8_status plot_write_svg(const char *path, const plot_config *config, const plot_series *series, int n,
                         char *error, size_t error_size)
{
    if (error && error_size) error[0] = 0;
    plot_config c = config ? *config : plot_config_default();
    const char *bad = !path ? "path is NULL"
                      : !series || n < 1 ? "no series"
                      : c.width < 200 || c.height < 200 ? "width and height must be >= 200"
                      : !(c.smooth >= 0 && c.smooth < 1) ? "smooth must be in [0, 1)"
                      : !isnan(c.y_min) && !isnan(c.y_max) && !(c.y_max > c.y_min) ? "y_max must exceed y_min"
                      : NULL;
    for (int k = 0; !bad && k < n; k++)
        if (series[k].n && !series[k].rows) bad = "a series has rows == NULL";
    if (bad) {
        if (error && error_size) snprintf(error, error_size, "plot_write_svg: %s", bad);
        return F8_ERR_INVALID_ARGUMENT;
    }
    double **smooth = (double **)calloc((size_t)n, sizeof *smooth);
    f8_status st = smooth ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    for (int k = 0; st == F8_OK && k < n; k++) {
        smooth[k] = (double *)malloc((series[k].n ? series[k].n : 1) * sizeof **smooth);
        if (!smooth[k]) st = F8_ERR_OUT_OF_MEMORY;
        else smooth_train(&series[k], c.smooth, smooth[k]);
    }
    FILE *f = NULL;
    if (st == F8_OK && !(f = fopen(path, "wb"))) {
        if (error && error_size) snprintf(error, error_size, "plot '%s': cannot open for writing", path);
        st = F8_ERR_IO;
    }
    if (st == F8_OK) st = write_svg(f, &c, series, n, smooth);
    int bad_write = f && ferror(f);
    if (f && fclose(f) != 0) bad_write = 1;
    if (bad_write && st == F8_OK) {
        if (error && error_size) snprintf(error, error_size, "plot '%s': write failed", path);
        st = F8_ERR_IO;
    }
    if (st == F8_ERR_OUT_OF_MEMORY && error && error_size) snprintf(error, error_size, "plot: out of memory");
    for (int k = 0; smooth && k < n; k++) free(smooth[k]);
    free(smooth);
    return st;
}

f8_status plot_logs_svg(const char *svg_path, const plot_config *config, const char *const *csv_paths,
                        const char *const *names, int n, char *error, size_t error_size)
{
    if (error && error_size) error[0] = 0;
    if (!csv_paths || n < 1) {
        if (error && error_size) snprintf(error, error_size, "plot_logs_svg: no logs");
        return F8_ERR_INVALID_ARGUMENT;
    }
    tlog_rows *logs = (tlog_rows *)calloc((size_t)n, sizeof *logs);
    plot_series *series = (plot_series *)calloc((size_t)n, sizeof *series);
    char(*base)[128] = (char(*)[128])calloc((size_t)n, sizeof *base);
    f8_status st = logs && series && base ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    if (st != F8_OK && error && error_size) snprintf(error, error_size, "plot: out of memory");
    for (int k = 0; st == F8_OK && k < n; k++) {
        st = tlog_read(csv_paths[k], &logs[k], error, error_size);
        if (st != F8_OK) break;
        const char *name = names ? names[k] : NULL;
        if (!name && csv_paths[k]) {
            const char *slash = strrchr(csv_paths[k], '/'), *file = slash ? slash + 1 : csv_paths[k];
            size_t len = strlen(file);
            if (len >= 4 && !strcmp(file + len - 4, ".csv")) len -= 4;
            if (len > sizeof base[k] - 1) len = sizeof base[k] - 1;
            memcpy(base[k], file, len);
            base[k][len] = 0;
            name = base[k];
        }
        series[k] = (plot_series){name, logs[k].rows, logs[k].n};
    }
    if (st == F8_OK) st = plot_write_svg(svg_path, config, series, n, error, error_size);
    for (int k = 0; logs && k < n; k++) tlog_rows_free(&logs[k]);
    free(logs), free(series), free(base);
    return st;
}
