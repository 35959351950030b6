/*
 * test_train_log.c — the trainer's step log and its readers: the CSV log
 * (round trip, append, crash and resume, malformed files), the progress
 * line and the SVG plot of several logs. Files go to a fresh directory in
 * /tmp.
 */
#include "check.h"
#include "tmp_files.h"

#include "f8train.h"

/* --------------------------------------------------------------------------- log */

static int close_to(double a, double b) { return (isnan(a) && isnan(b)) || fabs(a - b) <= 1e-7 * fmax(1, fabs(b)); }

static tlog_row row_at(int64_t step, double loss)
{
    tlog_row r = tlog_row_empty();
    r.step = step, r.tokens = step * 4096;
    r.train_loss = loss, r.lr = 6e-4 * (double)step / 100.0, r.grad_norm = 1.0 / (double)(step + 1);
    r.ms_per_step = 45.678, r.tokens_per_s = 123456.7, r.mfu = (step % 2) ? 0.38212 : NAN;
    r.peak_mem_mib = (step % 3) ? 1234.5 : NAN;
    if (step % 5 == 0) r.val_loss = loss + 0.0123456789;
    return r;
}

static void test_log(void)
{
    const char *path = tmp_path("run.csv");
    char err[512];
    tlog *log = NULL;
    CHECK(tlog_create(path, 0, &log, err, sizeof err) == F8_OK, "create: %s", err);
    if (!log) return;
    tlog_row z = tlog_row_empty();
    CHECK(tlog_write(log, &z) == F8_OK, "write an empty row: %s", tlog_last_error(log));
    CHECK(tlog_write(log, NULL) == F8_ERR_INVALID_ARGUMENT, "NULL row accepted");
    tlog_destroy(log);
    /* append == 0 starts over: the header, then 10 rows. */
    log = NULL;
    CHECK(tlog_create(path, 0, &log, err, sizeof err) == F8_OK, "create: %s", err);
    for (int s = 1; s <= 10; s++) {
        tlog_row r = row_at(s, 10.0 / s);
        CHECK(tlog_write(log, &r) == F8_OK, "write: %s", tlog_last_error(log));
    }
    tlog_destroy(log);
    char *text = read_text(path, NULL);
    CHECK(text && !strncmp(text, TLOG_HEADER "\n", strlen(TLOG_HEADER) + 1), "header line");
    CHECK(text && strstr(text, "\n2,8192,5,,") != NULL, "row 2 with an empty val_loss: %s", text ? text : "");
    free(text);

    tlog_rows rows;
    CHECK(tlog_read(path, &rows, err, sizeof err) == F8_OK && rows.n == 10, "read: %s (%zu rows)", err, rows.n);
    int ok = 1;
    for (size_t i = 0; i < rows.n; i++) {
        tlog_row w = row_at((int64_t)i + 1, 10.0 / (double)(i + 1)), g = rows.rows[i];
        ok &= g.step == w.step && g.tokens == w.tokens && close_to(g.train_loss, w.train_loss) &&
              close_to(g.val_loss, w.val_loss) && close_to(g.lr, w.lr) && close_to(g.grad_norm, w.grad_norm) &&
              close_to(g.ms_per_step, w.ms_per_step) && close_to(g.tokens_per_s, w.tokens_per_s) &&
              close_to(g.mfu, w.mfu) && close_to(g.peak_mem_mib, w.peak_mem_mib);
    }
    CHECK(ok, "CSV round trip changed a value");
    tlog_rows_free(&rows);
    CHECK(rows.rows == NULL && rows.n == 0, "rows_free");

    /* A crash mid-row, then a resume from a checkpoint at step 6: the append
     * cuts the half row; the reader keeps the resumed run's 7.. and merges a
     * separate val row. */
    FILE *f = fopen(path, "ab");
    fputs("11,45056,0.9", f);
    fclose(f);
    CHECK(tlog_read(path, &rows, err, sizeof err) == F8_OK && rows.n == 10, "unfinished last line skipped: %s", err);
    tlog_rows_free(&rows);
    log = NULL;
    CHECK(tlog_create(path, 1, &log, err, sizeof err) == F8_OK, "append: %s", err);
    for (int s = 7; s <= 12; s++) {
        tlog_row r = row_at(s, 100.0 + s);
        r.val_loss = NAN;
        tlog_write(log, &r);
    }
    tlog_row v = tlog_row_empty();
    v.step = 12, v.tokens = 12 * 4096, v.val_loss = 3.25;
    tlog_write(log, &v);
    tlog_destroy(log);
    CHECK(tlog_read(path, &rows, err, sizeof err) == F8_OK && rows.n == 12, "resumed: %s (%zu rows)", err, rows.n);
    ok = rows.n == 12;
    for (size_t i = 0; ok && i < rows.n; i++) {
        double want = i < 6 ? 10.0 / (double)(i + 1) : 100.0 + (double)(i + 1);
        ok &= rows.rows[i].step == (int64_t)i + 1 && close_to(rows.rows[i].train_loss, want);
    }
    CHECK(ok, "resumed rows are not the new run's");
    CHECK(rows.n == 12 && rows.rows[11].val_loss == 3.25 && close_to(rows.rows[11].train_loss, 112.0),
          "val row merged into its step");
    CHECK(rows.n == 12 && isnan(rows.rows[9].val_loss), "the rolled-back step 10's val_loss survived");
    tlog_rows_free(&rows);

    /* Bad files. */
    const char *bad = tmp_path("bad.csv");
    write_bytes(bad, "step,train_loss\n1,2.5\nbanana,3\n2,2.0\n", 36);
    CHECK(tlog_read(bad, &rows, err, sizeof err) == F8_ERR_IO && strstr(err, "line 3"), "malformed row: %s", err);
    CHECK(rows.rows == NULL && rows.n == 0, "rows zeroed on error");
    write_bytes(bad, "tokens,loss\n1,2\n", 16);
    CHECK(tlog_read(bad, &rows, err, sizeof err) == F8_ERR_IO && strstr(err, "step"), "no step column: %s", err);
    CHECK(tlog_create(bad, 1, &log, err, sizeof err) == F8_ERR_IO && log == NULL && strstr(err, "header"),
          "append to a foreign CSV: %s", err);
    write_bytes(bad, "", 0);
    CHECK(tlog_read(bad, &rows, err, sizeof err) == F8_ERR_IO, "empty log read: %s", err);
    CHECK(tlog_read(tmp_path("missing.csv"), &rows, err, sizeof err) == F8_ERR_IO && strstr(err, "cannot open"),
          "missing log: %s", err);
    /* Numbers through parse.h: hex, trailing text and "infinity" spelled out
     * are not numbers; a diverged run's "inf"/"nan" losses are what they say. */
    static const char *const not_numbers[] = {"0x10", "2.5abc", "infinity", "1e", "+-1", "."};
    for (size_t i = 0; i < sizeof not_numbers / sizeof not_numbers[0]; i++) {
        char text[96];
        int len = snprintf(text, sizeof text, "step,train_loss\n1,2.5\n2,%s\n3,2.0\n", not_numbers[i]);
        write_bytes(bad, text, (size_t)len);
        CHECK(tlog_read(bad, &rows, err, sizeof err) == F8_ERR_IO && strstr(err, "line 3"), "'%s' read as a number: %s",
              not_numbers[i], err);
    }
    const char *special = "step,train_loss\n1, inf\n2,-inf \n3,nan\n4,-2.5e-1\n";
    write_bytes(bad, special, strlen(special));
    CHECK(tlog_read(bad, &rows, err, sizeof err) == F8_OK && rows.n == 4 && isinf(rows.rows[0].train_loss) &&
              rows.rows[1].train_loss < 0 && isinf(rows.rows[1].train_loss) && isnan(rows.rows[2].train_loss) &&
              rows.rows[3].train_loss == -0.25,
          "inf/nan/exponent rows: %s", err);
    tlog_rows_free(&rows);
    /* A reordered hand-written file with an extra column. */
    write_bytes(bad, "lr,note,step,train_loss\n0.001,a,5,2.5\n0.002,b,6,2.25", 52);
    CHECK(tlog_read(bad, &rows, err, sizeof err) == F8_OK && rows.n == 2 && rows.rows[1].step == 6 &&
              rows.rows[1].train_loss == 2.25 && rows.rows[0].lr == 0.001 && isnan(rows.rows[0].val_loss),
          "columns by name: %s", err);
    tlog_rows_free(&rows);
    /* Appending to an empty file writes the header. */
    write_bytes(bad, "", 0);
    CHECK(tlog_create(bad, 1, &log, err, sizeof err) == F8_OK, "append to empty: %s", err);
    tlog_destroy(log);
    text = read_text(bad, NULL);
    CHECK(text && !strcmp(text, TLOG_HEADER "\n"), "header for an empty file");
    free(text);
    tlog_destroy(NULL);
}

static void test_progress(void)
{
    tlog_row r = tlog_row_empty();
    r.step = 120, r.train_loss = 2.345, r.val_loss = 2.401, r.tokens_per_s = 123.4e3, r.ms_per_step = 45.6;
    r.mfu = 0.382;
    char buf[200];
    const char *want = "step 120/1000 | loss 2.345 | val 2.401 | 123.4K tok/s | 45.6 ms/step | MFU 38.2% | ETA 1m23s";
    int n = tlog_progress(buf, sizeof buf, &r, 1000, 83);
    CHECK(!strcmp(buf, want) && n == (int)strlen(want), "progress \"%s\"", buf);
    r.val_loss = NAN, r.mfu = NAN;
    tlog_progress(buf, sizeof buf, &r, 1000, -1); /* ETA from ms/step: 880 * 45.6 ms = 40.128 s */
    CHECK(!strcmp(buf, "step 120/1000 | loss 2.345 | 123.4K tok/s | 45.6 ms/step | ETA 40s"), "progress \"%s\"", buf);
    r.tokens_per_s = 2.5e6;
    tlog_progress(buf, sizeof buf, &r, 0, NAN);
    CHECK(!strcmp(buf, "step 120 | loss 2.345 | 2.5M tok/s | 45.6 ms/step"), "progress \"%s\"", buf);
    tlog_progress(buf, sizeof buf, &r, 1000, 7300);
    CHECK(strstr(buf, "ETA 2h01m") != NULL, "hours: \"%s\"", buf);
    char tiny[10];
    n = tlog_progress(tiny, sizeof tiny, &r, 1000, 83);
    CHECK(strlen(tiny) == 9 && n > 9 && !strncmp(tiny, "step 120/", 9), "cut line \"%s\" (%d)", tiny, n);
}

/* --------------------------------------------------------------------------- plot */

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
    return n;
}

static void test_plot(void)
{
    const char *fp8 = tmp_path("fp8.csv"), *bf16 = tmp_path("bf16.csv");
    char err[512];
    for (int k = 0; k < 2; k++) {
        tlog *log = NULL;
        CHECK(tlog_create(k ? bf16 : fp8, 0, &log, err, sizeof err) == F8_OK, "%s", err);
        if (!log) return;
        test_rng r = {(uint64_t)k + 10};
        for (int s = 0; s <= 300; s++) {
            tlog_row row = tlog_row_empty();
            row.step = s, row.tokens = (int64_t)s * 65536;
            row.train_loss = 3.0 + 7.8 * exp(-s / 40.0) + 0.2 * rng_uniform(&r) + 0.01 * k;
            if (s % 50 == 0) row.val_loss = 3.05 + 7.8 * exp(-s / 40.0);
            tlog_write(log, &row);
        }
        tlog_destroy(log);
    }
    const char *csvs[2] = {fp8, bf16};
    const char *svg = tmp_path("loss.svg"), *svg2 = tmp_path("loss2.svg");
    plot_config cfg = plot_config_default();
    CHECK(plot_logs_svg(svg, &cfg, csvs, NULL, 2, err, sizeof err) == F8_OK, "plot: %s", err);
    CHECK(plot_logs_svg(svg2, &cfg, csvs, NULL, 2, err, sizeof err) == F8_OK, "plot again: %s", err);
    size_t n1 = 0, n2 = 0;
    char *a = read_text(svg, &n1), *b = read_text(svg2, &n2);
    CHECK(a && b && n1 == n2 && !memcmp(a, b, n1), "the same logs gave different SVG bytes");
    if (a) {
        CHECK(!strncmp(a, "<svg ", 5), "does not start with <svg");
        CHECK(n1 > 8 && !strcmp(a + n1 - 7, "</svg>\n"), "does not end with </svg>");
        CHECK(strstr(a, ">fp8<") && strstr(a, ">bf16<"), "run names missing from the legend");
        CHECK(count(a, "<text") == count(a, "</text>") && count(a, "<g") == count(a, "</g>"), "unbalanced tags");
        CHECK(count(a, "<path") >= 6, "%d paths: want raw, smoothed and val for 2 runs", count(a, "<path"));
        CHECK(count(a, "<circle") == 2 * 7 + 1, "%d val dots", count(a, "<circle"));
        CHECK(strstr(a, ">step<") && strstr(a, "loss (nats/token)"), "axis labels");
        CHECK(count(a, "<") == count(a, ">"), "stray angle brackets");
    }
    free(a), free(b);

    /* Names are escaped; a tokens axis gets k/M suffixes. */
    tlog_rows rows;
    CHECK(tlog_read(fp8, &rows, err, sizeof err) == F8_OK, "%s", err);
    plot_series s[2] = {{"FP8 <e4m3> & \"hybrid\"", rows.rows, rows.n}, {"empty run", NULL, 0}};
    cfg.x_tokens = 1;
    cfg.title = "a < b";
    CHECK(plot_write_svg(svg, &cfg, s, 2, err, sizeof err) == F8_OK, "%s", err);
    a = read_text(svg, NULL);
    CHECK(a && strstr(a, "FP8 &lt;e4m3&gt; &amp; &quot;hybrid&quot;") && strstr(a, "a &lt; b"), "escaping");
    CHECK(a && strstr(a, "M<") && strstr(a, ">tokens<"), "tokens axis with M labels");
    free(a);
    cfg.smooth = 1.0;
    CHECK(plot_write_svg(svg, &cfg, s, 2, err, sizeof err) == F8_ERR_INVALID_ARGUMENT, "smooth 1 accepted");
    cfg = plot_config_default();
    CHECK(plot_write_svg(svg, &cfg, s, 0, err, sizeof err) == F8_ERR_INVALID_ARGUMENT, "no series accepted");
    CHECK(plot_write_svg(tmp_dir, &cfg, s, 1, err, sizeof err) == F8_ERR_IO, "writing to a directory: %s", err);
    const char *missing[1] = {tmp_path("none.csv")};
    CHECK(plot_logs_svg(svg, &cfg, missing, NULL, 1, err, sizeof err) == F8_ERR_IO && strstr(err, "none.csv"),
          "missing log: %s", err);
    tlog_rows_free(&rows);
}

int main(void)
{
    tmp_dir_create("f8_test_train_log");
    test_log();
    test_progress();
    test_plot();
    tmp_dir_remove();
    return test_finish("test_train_log");
}
