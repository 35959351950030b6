/*
 * fp8w.c — the one-rank FP32 masters of f8_train --fp8-weights (fp8w.h).
 *
 * Design note. TE's fp8_model_init leaves the module holding only FP8 codes,
 * and the optimizer the FP32 masters: AdamW steps on the masters (the
 * modules' gradients stay in the param dtype), each master is written back
 * with f8_module_write_weight (cast with the weight slot's current scale,
 * amax recorded), and f8_ctx_update_weight_scales then moves those scales
 * for the next write, the order TE's Float8Tensor.copy_ triggers. All of it
 * is device work, so it sits inside the trainer's captured step: the
 * writes invalidate the cached transposes on the host, and the step's
 * first-microbatch forward (F8_MICROBATCH_FIRST, captured as such) remakes
 * them on every replay. The masters live in one allocation, weight k at
 * off[k].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8w.h"
#include "try.h"

struct fp8w {
    gpt *m;
    int n;           /* FP8 weights */
    int64_t *off;    /* (n + 1) where weight k's master starts; off[n] = total */
    int64_t *rows, *cols;
    float *master;   /* (total) FP32 backend */
};


/* Weight k's shape, from its table entry's gradient view (param dtype, the weight's shape). */
static f8_status shape_of(gpt *m, int k, int64_t *rows, int64_t *cols)
{
    const model_param *p = param_fp8(&m->params, k);
    if (!p) return F8_ERR_STATE;
    *rows = p->grad.rows, *cols = p->grad.cols;
    return F8_OK;
}

f8_status fp8w_create(gpt *m, fp8w **out)
{
    *out = NULL;
    fp8w *w = (fp8w *)calloc(1, sizeof *w);
    if (!w) return F8_ERR_OUT_OF_MEMORY;
    w->m = m;
    w->n = gpt_fp8_weight_count(m);
    w->off = (int64_t *)calloc((size_t)w->n + 1, sizeof *w->off);
    w->rows = (int64_t *)calloc((size_t)w->n + 1, sizeof *w->rows);
    w->cols = (int64_t *)calloc((size_t)w->n + 1, sizeof *w->cols);
    f8_status st = w->n > 0 && w->off && w->rows && w->cols ? F8_OK : F8_ERR_OUT_OF_MEMORY;
    for (int k = 0; st == F8_OK && k < w->n; k++) {
        st = shape_of(m, k, &w->rows[k], &w->cols[k]);
        w->off[k + 1] = w->off[k] + w->rows[k] * w->cols[k];
    }
    if (st == F8_OK) st = f8_ctx_alloc(m->ctx, (size_t)w->off[w->n] * 4, (void **)&w->master);
    float *host = st == F8_OK ? (float *)malloc((size_t)w->off[w->n] * 4) : NULL;
    if (st == F8_OK && !host) st = F8_ERR_OUT_OF_MEMORY;
    for (int k = 0; st == F8_OK && k < w->n; k++) st = gpt_fp8_master_init(m, k, host + w->off[k]);
    if (st == F8_OK) st = f8_ctx_upload(m->ctx, w->master, host, (size_t)w->off[w->n] * 4);
    free(host);
    if (st != F8_OK) {
        fp8w_destroy(w);
        return st;
    }
    *out = w;
    return F8_OK;
}

void fp8w_destroy(fp8w *w)
{
    if (!w) return;
    f8_ctx_free(w->m->ctx, w->master);
    free(w->off);
    free(w->rows);
    free(w->cols);
    free(w);
}

f8_tensor fp8w_master(const fp8w *w, int k)
{
    return f8_tensor_make(w->master + w->off[k], F8_DTYPE_FP32, w->rows[k], w->cols[k]);
}

f8_tensor fp8w_all(const fp8w *w) { return f8_tensor_make(w->master, F8_DTYPE_FP32, 1, w->off[w->n]); }

f8_status fp8w_write(fp8w *w)
{
    for (int k = 0; k < w->n; k++) {
        const model_param *p = param_fp8(&w->m->params, k);
        f8_tensor src = fp8w_master(w, k);
        if (!p) return F8_ERR_STATE;
        TRY(f8_module_write_weight(p->module, p->which, &src));
    }
    return f8_ctx_update_weight_scales(w->m->ctx);
}

f8_status fp8w_checkpoint_add(fp8w *w, f8_checkpoint *ck, const char *prefix)
{
    char name[256];
    for (int k = 0; k < w->n; k++) {
        snprintf(name, sizeof name, "%s.master.%d", prefix, k);
        f8_tensor v = fp8w_master(w, k);
        TRY(f8_checkpoint_add_tensor(ck, name, &v));
    }
    return F8_OK;
}

f8_status fp8w_checkpoint_restore(fp8w *w, const f8_checkpoint *ck, const char *prefix, char *err, size_t n)
{
    char name[256];
    for (int k = 0; k < w->n; k++) { /* all present before any is read in */
        snprintf(name, sizeof name, "%s.master.%d", prefix, k);
        if (!f8_checkpoint_has(ck, name)) {
            snprintf(err, n, "FP8 weights: the checkpoint has no master weight \"%s\"", name);
            return F8_ERR_SHAPE;
        }
    }
    for (int k = 0; k < w->n; k++) {
        snprintf(name, sizeof name, "%s.master.%d", prefix, k);
        f8_tensor v = fp8w_master(w, k);
        f8_status st = f8_checkpoint_read_tensor(ck, name, &v);
        if (st != F8_OK) {
            snprintf(err, n, "FP8 weights: master weight \"%s\": %s", name, f8_ctx_last_error(w->m->ctx));
            return st;
        }
    }
    return F8_OK;
}
