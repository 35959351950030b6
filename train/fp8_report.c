/*
 * fp8_report.c — f8_train's FP8 telemetry log, summary and plot
 * (fp8_report.h). One read of the snapshot per direction per step, after the
 * step has synchronized for its losses: no sync of its own on the step path.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp8_report.h"
#include "plot.h"

typedef struct slot_total {
    uint64_t count, saturated, flushed;
    float amax, scale; /* the last step's */
} slot_total;

struct fp8_report {
    f8_ctx *ctx;
    int n[2];               /* slots per direction (at most F8_TELEMETRY_MAX_SLOTS) */
    char *(names[2]);       /* n[d] names of 64 chars */
    slot_total *tot[2];
    f8_fp8_stats *buf;
    FILE *csv;
    tlog_row *worst_sat, *worst_flush; /* per step: the worst percentage in train_loss */
    size_t n_rows, cap_rows;
};

enum { NAME_LEN = 64 };

static const char *const LINEAR_FWD[] = {"input", "weight", "output"};
static const char *const LINEAR_BWD[] = {"grad_output", "grad_input"};
static const char *const MLP_FWD[] = {"fc1_input", "fc1_weight", "fc1_output", "fc2_input", "fc2_weight", "fc2_output"};
static const char *const MLP_BWD[] = {"fc2_grad_output", "fc2_grad_input", "fc1_grad_output", "fc1_grad_input"};

static void name_module(fp8_report *r, f8_module *m, const char *prefix, int mlp)
{
    for (int d = 0; d < 2; d++) {
        const int count = mlp ? (d ? 4 : 6) : (d ? 2 : 3);
        for (int i = 0; i < count; i++) {
            f8_slot s;
            if (!m || f8_module_slot(m, (f8_direction)d, i, &s) != F8_OK || s.index >= r->n[d]) continue;
            const char *what = mlp ? (d ? MLP_BWD[i] : MLP_FWD[i]) : (d ? LINEAR_BWD[i] : LINEAR_FWD[i]);
            snprintf(r->names[d] + (size_t)s.index * NAME_LEN, NAME_LEN, "%s.%s", prefix, what);
        }
    }
}

f8_status fp8_report_create(f8_ctx *ctx, const gpt *m, const char *csv_path, int append, fp8_report **out, char *err,
                            size_t n)
{
    *out = NULL;
    if (!f8_ctx_telemetry_enabled(ctx)) {
        snprintf(err, n, "FP8 telemetry is off on this ctx");
        return F8_ERR_STATE;
    }
    fp8_report *r = (fp8_report *)calloc(1, sizeof *r);
    if (!r) return F8_ERR_OUT_OF_MEMORY;
    r->ctx = ctx;
    int most = 1;
    for (int d = 0; d < 2; d++) {
        int c = f8_ctx_slot_count(ctx, (f8_direction)d);
        r->n[d] = c < F8_TELEMETRY_MAX_SLOTS ? c : F8_TELEMETRY_MAX_SLOTS;
        r->names[d] = (char *)calloc((size_t)r->n[d] + 1, NAME_LEN);
        r->tot[d] = (slot_total *)calloc((size_t)r->n[d] + 1, sizeof(slot_total));
        if (r->n[d] > most) most = r->n[d];
    }
    r->buf = (f8_fp8_stats *)calloc((size_t)most, sizeof *r->buf);
    if (!r->names[0] || !r->names[1] || !r->tot[0] || !r->tot[1] || !r->buf) {
        fp8_report_destroy(r);
        return F8_ERR_OUT_OF_MEMORY;
    }
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < r->n[d]; i++)
            snprintf(r->names[d] + (size_t)i * NAME_LEN, NAME_LEN, "slot.%s.%d", d ? "bwd" : "fwd", i);
    char prefix[48];
    for (int64_t l = 0; l < m->c.layers; l++) {
        snprintf(prefix, sizeof prefix, "blocks.%lld.qkv", (long long)l);
        name_module(r, m->blocks[l].qkv, prefix, 0);
        snprintf(prefix, sizeof prefix, "blocks.%lld.proj", (long long)l);
        name_module(r, m->blocks[l].proj, prefix, 0);
        snprintf(prefix, sizeof prefix, "blocks.%lld.mlp", (long long)l);
        name_module(r, m->blocks[l].mlp, prefix, 1);
        f8_slot as[3]; /* FP8 attention's QKV, S and O slots (forward) */
        static const char *const what[3] = {"qkv", "s", "o"};
        if (m->c.fp8_attention && m->blocks[l].att && f8_attention_fp8_slots(m->blocks[l].att, as) == F8_OK)
            for (int k = 0; k < 3; k++)
                if (as[k].index < r->n[as[k].direction])
                    snprintf(r->names[as[k].direction] + (size_t)as[k].index * NAME_LEN, NAME_LEN, "blocks.%lld.attn.%s",
                             (long long)l, what[k]);
    }
    name_module(r, m->head, "head", 0);
    if (csv_path && csv_path[0]) {
        r->csv = fopen(csv_path, append ? "a" : "w");
        if (!r->csv) {
            snprintf(err, n, "cannot open '%s' for the FP8 telemetry log", csv_path);
            fp8_report_destroy(r);
            return F8_ERR_IO;
        }
        if (!append || ftell(r->csv) == 0) fprintf(r->csv, "step,tensor,amax,scale,count,saturated,flushed\n");
    }
    *out = r;
    return F8_OK;
}

void fp8_report_destroy(fp8_report *r)
{
    if (!r) return;
    if (r->csv) fclose(r->csv);
    for (int d = 0; d < 2; d++) {
        free(r->names[d]);
        free(r->tot[d]);
    }
    free(r->buf);
    free(r->worst_sat);
    free(r->worst_flush);
    free(r);
}

f8_status fp8_report_step(fp8_report *r, int64_t step)
{
    double wsat = 0, wflush = 0;
    for (int d = 0; d < 2; d++) {
        if (r->n[d] == 0) continue;
        f8_status st = f8_ctx_telemetry_read(r->ctx, (f8_direction)d, 0, r->n[d], r->buf);
        if (st != F8_OK) return st;
        for (int i = 0; i < r->n[d]; i++) {
            const f8_fp8_stats *s = &r->buf[i];
            /* a slot whose values were quantized uncounted (FP8 attention's S
             * and O) still has its amax and scale to show */
            if (s->count == 0 && !(s->amax > 0.0f)) continue;
            slot_total *t = &r->tot[d][i];
            t->count += s->count;
            t->saturated += s->saturated;
            t->flushed += s->flushed;
            t->amax = s->amax;
            t->scale = s->scale;
            const double fs = s->count ? (double)s->saturated / (double)s->count : 0.0,
                         ff = s->count ? (double)s->flushed / (double)s->count : 0.0;
            if (fs > wsat) wsat = fs;
            if (ff > wflush) wflush = ff;
            if (r->csv)
                fprintf(r->csv, "%lld,%s,%.9g,%.9g,%llu,%.6g,%.6g\n", (long long)step,
                        r->names[d] + (size_t)i * NAME_LEN, s->amax, s->scale, (unsigned long long)s->count, fs, ff);
        }
    }
    if (r->csv) fflush(r->csv);
    if (r->n_rows == r->cap_rows) {
        size_t c = r->cap_rows ? 2 * r->cap_rows : 256;
        tlog_row *a = (tlog_row *)realloc(r->worst_sat, c * sizeof *a);
        if (a) r->worst_sat = a;
        tlog_row *b = a ? (tlog_row *)realloc(r->worst_flush, c * sizeof *b) : NULL;
        if (b) r->worst_flush = b;
        if (!a || !b) return F8_ERR_OUT_OF_MEMORY;
        r->cap_rows = c;
    }
    tlog_row a = tlog_row_empty(), b = tlog_row_empty();
    a.step = b.step = step;
    a.train_loss = 100.0 * wsat;
    b.train_loss = 100.0 * wflush;
    r->worst_sat[r->n_rows] = a;
    r->worst_flush[r->n_rows] = b;
    r->n_rows++;
    return F8_OK;
}

typedef struct ranked {
    int d, i;
    double frac;
} ranked;

static int by_frac(const void *x, const void *y)
{
    const ranked *a = (const ranked *)x, *b = (const ranked *)y;
    if (a->frac != b->frac) return a->frac < b->frac ? 1 : -1;
    return a->d != b->d ? a->d - b->d : a->i - b->i;
}

void fp8_report_print(const fp8_report *r, FILE *out, int top)
{
    const int total = r->n[0] + r->n[1];
    ranked *k = (ranked *)calloc((size_t)total + 1, sizeof *k);
    if (!k) return;
    for (int what = 0; what < 2; what++) {
        int m = 0;
        for (int d = 0; d < 2; d++)
            for (int i = 0; i < r->n[d]; i++) {
                const slot_total *t = &r->tot[d][i];
                if (!t->count) continue;
                k[m].d = d;
                k[m].i = i;
                k[m].frac = (double)(what ? t->flushed : t->saturated) / (double)t->count;
                m++;
            }
        qsort(k, (size_t)m, sizeof *k, by_frac);
        fprintf(out, "FP8 telemetry: the %d tensors with the most %s values over the run (of %d that cast)\n",
                top < m ? top : m, what ? "flushed-to-zero" : "saturated", m);
        for (int j = 0; j < m && j < top; j++) {
            const slot_total *t = &r->tot[k[j].d][k[j].i];
            fprintf(out, "  %-28s %s %9.4f%%  (%llu of %llu)  last amax %-10.4g scale %.4g\n",
                    r->names[k[j].d] + (size_t)k[j].i * NAME_LEN, what ? "flushed" : "saturated", 100.0 * k[j].frac,
                    (unsigned long long)(what ? t->flushed : t->saturated), (unsigned long long)t->count, t->amax,
                    t->scale);
        }
    }
    free(k);
}

f8_status fp8_report_plot(const fp8_report *r, const char *svg_path, char *err, size_t n)
{
    if (r->n_rows == 0) return F8_OK;
    plot_series s[2] = {{"worst saturated %", r->worst_sat, r->n_rows}, {"worst flushed %", r->worst_flush, r->n_rows}};
    plot_config pc = plot_config_default();
    pc.title = "FP8 telemetry: worst tensor per step (% of its values)";
    pc.smooth = 0;
    pc.y_min = 0;
    return plot_write_svg(svg_path, &pc, s, 2, err, n);
}
