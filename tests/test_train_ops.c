/*
 * test_train_ops.c — the CPU backend's embedding and cross-entropy against
 * host references: the embedding forward bit for bit, its backward against
 * FP64 sums (repeated and out-of-range tokens, T not a multiple of S, BF16);
 * cross-entropy against FP64 (loss and gradient), finite differences, padding
 * columns, ignored rows, in place; a whole small step (with AdamW) under graph
 * replay; launch and allocation counters; bad arguments (AdamW's too). AdamW's
 * numerics are in test_adamw.c.
 */
#include "train_ops_tests.h"

/* ---- embedding ------------------------------------------------------------ */

static void test_embedding_forward(f8_ctx *ctx, f8_dtype wdt, f8_dtype pdt, f8_dtype ydt)
{
    test_rng r = {11 + wdt * 3 + pdt * 5 + ydt};
    const int64_t V = 37, C = 13, S = 8, T = 2 * S + 5;
    int32_t tokens[2 * 8 + 5] = {3, 3, 0, 36, -1, 37, 1000, INT32_MIN, 3, 5, 7, 3, 36, 0, 2, 9, 3, 3, 11, -5, 4};
    void *wte_h = host_random(&r, wdt, (size_t)(V * C), 1.0, NULL);
    void *wpe_h = host_random(&r, pdt, (size_t)((S + 2) * C), 1.0, NULL);
    f8_tensor wte = dev_tensor(ctx, wte_h, wdt, V, C), wpe = dev_tensor(ctx, wpe_h, pdt, S + 2, C);
    f8_tensor y = dev_tensor(ctx, NULL, ydt, T, C);
    int32_t *tok = (int32_t *)dev_new(ctx, sizeof tokens);
    put(ctx, tok, tokens, sizeof tokens);
    CHECK_OK(ctx, f8_embedding_forward(ctx, tok, S, &wte, &wpe, &y));
    void *yh = dev_read(ctx, &y);
    int bad = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            float w = tokens[t] >= 0 && tokens[t] < V ? (float)host_get(wte_h, wdt, (size_t)(tokens[t] * C + c)) : 0.0f;
            float v = w + (float)host_get(wpe_h, pdt, (size_t)((t % S) * C + c));
            uint32_t want, got;
            if (ydt == F8_DTYPE_BF16) {
                want = f8_bf16_from_float(v);
                got = ((uint16_t *)yh)[t * C + c];
            } else {
                memcpy(&want, &v, 4);
                memcpy(&got, (float *)yh + t * C + c, 4);
            }
            bad += want != got;
        }
    CHECK(bad == 0, "embedding forward %s/%s->%s: %d elements differ from wte[tok] + wpe[t mod S]", f8_dtype_name(wdt),
          f8_dtype_name(pdt), f8_dtype_name(ydt), bad);
    free(wte_h), free(wpe_h), free(yh);
    f8_ctx_free(ctx, wte.data), f8_ctx_free(ctx, wpe.data), f8_ctx_free(ctx, y.data), f8_ctx_free(ctx, tok);
}

/* dwte/dwpe (start: random) += the sums of dy; FP64 reference. */
static void test_embedding_backward(f8_ctx *ctx, f8_dtype ddt, f8_dtype gdt, int64_t T, int with_dwpe)
{
    test_rng r = {101 + (uint64_t)T + ddt * 7 + gdt * 13};
    const int64_t V = 37, C = 13, S = 8;
    int32_t *tokens = (int32_t *)xmalloc((size_t)T * sizeof *tokens);
    for (int64_t t = 0; t < T; t++) {
        double u = rng_uniform(&r);
        tokens[t] = u < 0.4 ? 3 : u < 0.5 ? 36 : u < 0.55 ? -1 : u < 0.6 ? (int32_t)V : (int32_t)(rng_u64(&r) % 30);
    }
    double *dy_v = (double *)xmalloc((size_t)(T * C) * sizeof(double));
    double *w0 = (double *)xmalloc((size_t)(V * C) * sizeof(double));
    double *p0 = (double *)xmalloc((size_t)(S * C) * sizeof(double));
    void *dy_h = host_random(&r, ddt, (size_t)(T * C), 1.0, dy_v);
    void *w_h = host_random(&r, gdt, (size_t)(V * C), 1.0, w0);
    void *p_h = host_random(&r, gdt, (size_t)(S * C), 1.0, p0);
    f8_tensor dy = dev_tensor(ctx, dy_h, ddt, T, C), dw = dev_tensor(ctx, w_h, gdt, V, C), dp = dev_tensor(ctx, p_h, gdt, S, C);
    int32_t *tok = (int32_t *)dev_new(ctx, (size_t)T * sizeof *tokens);
    put(ctx, tok, tokens, (size_t)T * sizeof *tokens);
    CHECK_OK(ctx, f8_embedding_backward(ctx, tok, S, &dy, &dw, with_dwpe ? &dp : NULL));
    void *w1 = dev_read(ctx, &dw), *p1 = dev_read(ctx, &dp);

    /* reference: sums and sums of |.| (the bound's scale) */
    double *ref = (double *)calloc((size_t)(V * C), sizeof(double)), *mag = (double *)calloc((size_t)(V * C), sizeof(double));
    int *named = (int *)calloc((size_t)V, sizeof(int));
    for (int64_t t = 0; t < T; t++) {
        if (tokens[t] < 0 || tokens[t] >= V) continue;
        named[tokens[t]] = 1;
        for (int64_t c = 0; c < C; c++) {
            ref[tokens[t] * C + c] += dy_v[t * C + c];
            mag[tokens[t] * C + c] += fabs(dy_v[t * C + c]);
        }
    }
    const double eps = gdt == F8_DTYPE_BF16 ? 1.0 / 256 : 0.0;
    int bad = 0, touched = 0;
    for (int64_t v = 0; v < V; v++)
        for (int64_t c = 0; c < C; c++) {
            const size_t i = (size_t)(v * C + c);
            double got = host_get(w1, gdt, i), want = w0[i] + ref[i];
            if (!named[v]) {
                touched += memcmp((char *)w1 + i * f8_dtype_size(gdt), (char *)w_h + i * f8_dtype_size(gdt),
                                  f8_dtype_size(gdt)) != 0;
                continue;
            }
            double tol = 4e-7 * (fabs(w0[i]) + mag[i]) + eps * fabs(want) + 1e-30;
            if (fabs(got - want) > tol && bad++ < 3)
                fprintf(stderr, "dwte[%lld, %lld] = %.9g, want %.9g\n", (long long)v, (long long)c, got, want);
        }
    CHECK(bad == 0, "embedding backward dwte (dy %s, grad %s, T %lld): %d elements off", f8_dtype_name(ddt),
          f8_dtype_name(gdt), (long long)T, bad);
    CHECK(touched == 0, "embedding backward: %d elements of rows no token names changed", touched);
    bad = 0;
    for (int64_t s = 0; s < S; s++)
        for (int64_t c = 0; c < C; c++) {
            const size_t i = (size_t)(s * C + c);
            double sum = 0, m = 0;
            for (int64_t t = s; t < T; t += S) sum += dy_v[t * C + c], m += fabs(dy_v[t * C + c]);
            double got = host_get(p1, gdt, i), want = with_dwpe ? p0[i] + sum : p0[i];
            if (!with_dwpe || s >= T) bad += got != p0[i];
            else bad += fabs(got - want) > 4e-7 * (fabs(p0[i]) + m) + eps * fabs(want);
        }
    CHECK(bad == 0, "embedding backward dwpe (%s, T %lld, dwpe %s): %d elements off", f8_dtype_name(gdt), (long long)T,
          with_dwpe ? "on" : "NULL", bad);
    free(tokens), free(dy_v), free(w0), free(p0), free(dy_h), free(w_h), free(p_h), free(w1), free(p1);
    free(ref), free(mag), free(named);
    f8_ctx_free(ctx, dy.data), f8_ctx_free(ctx, dw.data), f8_ctx_free(ctx, dp.data), f8_ctx_free(ctx, tok);
}

/* ---- cross-entropy ---------------------------------------------------------- */

/* FP64 loss and gradient of one row of values x[0..vocab). */
static double ref_row(const double *x, int64_t vocab, int32_t y, double *grad, double scale)
{
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < vocab; c++) m = fmax(m, x[c]);
    for (int64_t c = 0; c < vocab; c++) s += exp(x[c] - m);
    for (int64_t c = 0; c < vocab && grad; c++) grad[c] = (exp(x[c] - m) / s - (c == y)) * scale;
    return m + log(s) - x[y];
}

static void test_cross_entropy(f8_ctx *ctx, f8_dtype xdt, f8_dtype ddt)
{
    test_rng r = {31 + xdt * 2 + ddt};
    const int64_t T = 9, V = 50, Vp = 56;
    const int32_t targets[9] = {4, -1, 49, 50, 0, 55, 17, INT32_MIN, 23};
    double *xv = (double *)xmalloc((size_t)(T * Vp) * sizeof(double));
    void *xh = host_random(&r, xdt, (size_t)(T * Vp), 2.0, xv);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < Vp; c++) {
            float v = c >= V ? 1e30f : t == 6 ? (float)(1000.0 + xv[t * Vp + c]) : (float)xv[t * Vp + c];
            if (xdt == F8_DTYPE_BF16) {
                ((uint16_t *)xh)[t * Vp + c] = f8_bf16_from_float(v);
                v = f8_bf16_to_float(((uint16_t *)xh)[t * Vp + c]);
            } else {
                ((float *)xh)[t * Vp + c] = v;
            }
            xv[t * Vp + c] = v;
        }
    int valid = 0;
    for (int t = 0; t < T; t++) valid += targets[t] >= 0 && targets[t] < V;
    const float scale = 1.0f / (float)valid;
    f8_tensor x = dev_tensor(ctx, xh, xdt, T, Vp), d = dev_tensor(ctx, NULL, ddt, T, Vp);
    int32_t *tg = (int32_t *)dev_new(ctx, sizeof targets);
    put(ctx, tg, targets, sizeof targets);
    float *loss = (float *)dev_new(ctx, T * sizeof(float)), *loss2 = (float *)dev_new(ctx, T * sizeof(float));
    CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, scale, loss, &d));
    CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, scale, loss2, NULL));
    float lh[9], lh2[9];
    get(ctx, lh, loss, sizeof lh);
    get(ctx, lh2, loss2, sizeof lh2);
    CHECK(memcmp(lh, lh2, sizeof lh) == 0, "cross-entropy: the losses depend on whether dlogits is given");
    void *dh = dev_read(ctx, &d);
    double grad[56];
    int bad_l = 0, bad_g = 0, bad_z = 0;
    for (int64_t t = 0; t < T; t++) {
        const int32_t y = targets[t];
        if (y < 0 || y >= V) {
            bad_l += lh[t] != 0.0f;
            for (int64_t c = 0; c < Vp; c++) bad_z += host_get(dh, ddt, (size_t)(t * Vp + c)) != 0.0;
            continue;
        }
        double want = ref_row(xv + t * Vp, V, y, grad, scale);
        if (fabs(lh[t] - want) > 2e-6 * (1 + fabs(want)) && bad_l++ < 3)
            fprintf(stderr, "loss[%lld] = %.9g, want %.9g\n", (long long)t, lh[t], want);
        for (int64_t c = 0; c < Vp; c++) {
            double g = host_get(dh, ddt, (size_t)(t * Vp + c));
            if (c >= V) {
                bad_z += g != 0.0;
                continue;
            }
            double tol = (ddt == F8_DTYPE_BF16 ? fabs(grad[c]) / 256 : 0) + 2e-6 * fabs(grad[c]) + 1e-7 * scale;
            if (fabs(g - grad[c]) > tol && bad_g++ < 3)
                fprintf(stderr, "dlogits[%lld, %lld] = %.9g, want %.9g\n", (long long)t, (long long)c, g, grad[c]);
        }
    }
    CHECK(bad_l == 0, "cross-entropy %s: %d losses off the FP64 reference", f8_dtype_name(xdt), bad_l);
    CHECK(bad_g == 0, "cross-entropy %s -> %s: %d gradients off the FP64 reference", f8_dtype_name(xdt),
          f8_dtype_name(ddt), bad_g);
    CHECK(bad_z == 0, "cross-entropy: %d padding-column or ignored-row gradients are not 0", bad_z);

    /* in place: the same bits as out of place */
    if (xdt == ddt) {
        CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, scale, loss2, &x));
        void *ih = dev_read(ctx, &x);
        get(ctx, lh2, loss2, sizeof lh2);
        CHECK(memcmp(ih, dh, (size_t)(T * Vp) * f8_dtype_size(xdt)) == 0, "cross-entropy in place differs (%s)",
              f8_dtype_name(xdt));
        CHECK(memcmp(lh, lh2, sizeof lh) == 0, "cross-entropy in place: losses differ");
        free(ih);
    }
    free(xv), free(xh), free(dh);
    f8_ctx_free(ctx, x.data), f8_ctx_free(ctx, d.data), f8_ctx_free(ctx, tg), f8_ctx_free(ctx, loss);
    f8_ctx_free(ctx, loss2);
}

/* Central differences of the FP32 loss against dlogits (grad_scale 1). */
static void test_cross_entropy_fd(f8_ctx *ctx)
{
    test_rng r = {77};
    const int64_t T = 3, V = 20, Vp = 24;
    const int32_t targets[3] = {5, 0, 19};
    float xh[3 * 24];
    for (int i = 0; i < T * Vp; i++) xh[i] = (float)(1.5 * rng_normal(&r));
    f8_tensor x = dev_tensor(ctx, xh, F8_DTYPE_FP32, T, Vp), d = dev_tensor(ctx, NULL, F8_DTYPE_FP32, T, Vp);
    int32_t *tg = (int32_t *)dev_new(ctx, sizeof targets);
    put(ctx, tg, targets, sizeof targets);
    float *loss = (float *)dev_new(ctx, sizeof(float) * T);
    CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, 1.0f, loss, &d));
    float dh[3 * 24];
    get(ctx, dh, d.data, sizeof dh);
    double worst = 0;
    const float h = 1e-2f;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < V; c += 3) {
            float lp[3], lm[3], save = xh[t * Vp + c];
            xh[t * Vp + c] = save + h;
            put(ctx, x.data, xh, sizeof xh);
            CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, 1.0f, loss, NULL));
            get(ctx, lp, loss, sizeof lp);
            xh[t * Vp + c] = save - h;
            put(ctx, x.data, xh, sizeof xh);
            CHECK_OK(ctx, f8_cross_entropy(ctx, &x, V, tg, 1.0f, loss, NULL));
            get(ctx, lm, loss, sizeof lm);
            xh[t * Vp + c] = save;
            double fd = ((double)lp[t] - lm[t]) / (2.0 * h);
            worst = fmax(worst, fabs(fd - dh[t * Vp + c]));
        }
    CHECK(worst < 1e-3, "cross-entropy finite differences: worst |fd - dlogits| = %g", worst);
    f8_ctx_free(ctx, x.data), f8_ctx_free(ctx, d.data), f8_ctx_free(ctx, tg), f8_ctx_free(ctx, loss);
}

/* ---- a whole small step, eager and graphed; counters ---------------------------- */

typedef struct mini {
    f8_tensor wte, wpe, dwte, dwpe, x, logits;
    int32_t *tok, *tgt;
    float *loss;
    f8_adamw *opt;
} mini;

static void mini_make(f8_ctx *ctx, mini *s)
{
    test_rng r = {555};
    const int64_t V = 16, C = 8, T = 12;
    void *h = host_random(&r, F8_DTYPE_FP32, (size_t)(V * C), 0.5, NULL);
    s->wte = dev_tensor(ctx, h, F8_DTYPE_FP32, V, C);
    free(h);
    h = host_random(&r, F8_DTYPE_FP32, (size_t)(4 * C), 0.5, NULL);
    s->wpe = dev_tensor(ctx, h, F8_DTYPE_FP32, 4, C);
    free(h);
    s->dwte = dev_tensor(ctx, NULL, F8_DTYPE_FP32, V, C);
    s->dwpe = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 4, C);
    s->x = dev_tensor(ctx, NULL, F8_DTYPE_FP32, T, C);
    s->logits = s->x; /* the "logits" are the embeddings themselves (C columns, vocab 7) */
    int32_t tok[12] = {1, 2, 3, 1, 1, 15, 0, 7, 7, 2, -1, 16}, tgt[12] = {2, 3, 1, 1, 6, 0, 7, 2, 5, 4, 1, 0};
    s->tok = (int32_t *)dev_new(ctx, sizeof tok);
    s->tgt = (int32_t *)dev_new(ctx, sizeof tgt);
    s->loss = (float *)dev_new(ctx, T * sizeof(float));
    put(ctx, s->tok, tok, sizeof tok);
    put(ctx, s->tgt, tgt, sizeof tgt);
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.lr_max = 0.05f, cfg.warmup_steps = 1, cfg.total_steps = 5;
    if (f8_adamw_create(ctx, &cfg, &s->opt) != F8_OK) die("f8_adamw_create", ctx);
    if (f8_adamw_add(s->opt, &s->wte, &s->dwte, 1) != F8_OK || f8_adamw_add(s->opt, &s->wpe, &s->dwpe, 0) != F8_OK)
        die("f8_adamw_add", ctx);
}

static f8_status mini_step(f8_ctx *ctx, mini *s)
{
    f8_status st = f8_embedding_forward(ctx, s->tok, 4, &s->wte, &s->wpe, &s->x);
    if (st == F8_OK) st = f8_cross_entropy(ctx, &s->logits, 7, s->tgt, 1.0f / 12, s->loss, &s->x);
    if (st == F8_OK) st = f8_embedding_backward(ctx, s->tok, 4, &s->x, &s->dwte, &s->dwpe);
    if (st == F8_OK) st = f8_adamw_step(s->opt);
    return st;
}

static void mini_free(f8_ctx *ctx, mini *s)
{
    f8_adamw_destroy(s->opt);
    f8_ctx_free(ctx, s->wte.data), f8_ctx_free(ctx, s->wpe.data), f8_ctx_free(ctx, s->dwte.data);
    f8_ctx_free(ctx, s->dwpe.data), f8_ctx_free(ctx, s->x.data), f8_ctx_free(ctx, s->tok), f8_ctx_free(ctx, s->tgt);
    f8_ctx_free(ctx, s->loss);
}

static void test_graph_and_counters(f8_ctx *ctx)
{
    mini e, g;
    mini_make(ctx, &e);
    mini_make(ctx, &g);
    f8_ctx_counters c0, c1;
    CHECK_OK(ctx, f8_ctx_counters_read(ctx, &c0));
    for (int k = 0; k < 3; k++) CHECK_OK(ctx, mini_step(ctx, &e));
    CHECK_OK(ctx, f8_ctx_counters_read(ctx, &c1));
    CHECK(c1.allocations == c0.allocations, "steps allocated %llu times",
          (unsigned long long)(c1.allocations - c0.allocations));
    CHECK(c1.launches - c0.launches == 3 * 4, "3 steps counted %llu launches, want 12 (4 ops a step)",
          (unsigned long long)(c1.launches - c0.launches));

    /* the same steps captured before any eager step (the optimizer allocated everything at add) */
    f8_graph *graph = NULL;
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, mini_step(ctx, &g));
    CHECK_OK(ctx, f8_graph_end(ctx, &graph));
    CHECK_STATUS(ctx, f8_adamw_add(g.opt, &g.x, &g.x, 0), F8_ERR_STATE); /* frozen once a step is captured */
    for (int k = 0; k < 3 && graph; k++) CHECK_OK(ctx, f8_graph_replay(graph));
    f8_graph_destroy(graph);
    int64_t step = 0;
    CHECK_OK(ctx, f8_adamw_read(g.opt, &step, NULL, NULL));
    CHECK(step == 3, "graphed optimizer step counter %lld, want 3", (long long)step);
    void *a = dev_read(ctx, &e.wte), *b = dev_read(ctx, &g.wte);
    CHECK(memcmp(a, b, (size_t)(e.wte.rows * e.wte.cols) * 4) == 0, "three graph replays differ from three eager steps");
    free(a), free(b);
    mini_free(ctx, &e);
    mini_free(ctx, &g);
}

/* ---- bad arguments: clear status, nothing changed -------------------------------- */

static void test_bad_args(f8_ctx *ctx)
{
    float wh[6 * 4], ph[3 * 4], yh[5 * 4], sentinel[5 * 4];
    for (int i = 0; i < 24; i++) wh[i] = (float)i;
    for (int i = 0; i < 12; i++) ph[i] = (float)-i;
    for (int i = 0; i < 20; i++) yh[i] = sentinel[i] = 123.0f;
    f8_tensor wte = dev_tensor(ctx, wh, F8_DTYPE_FP32, 6, 4), wpe = dev_tensor(ctx, ph, F8_DTYPE_FP32, 3, 4);
    f8_tensor y = dev_tensor(ctx, yh, F8_DTYPE_FP32, 5, 4);
    int32_t tk[5] = {0, 1, 2, 3, 4};
    int32_t *tok = (int32_t *)dev_new(ctx, sizeof tk);
    put(ctx, tok, tk, sizeof tk);
    f8_tensor bad = wte;
    bad.dtype = F8_DTYPE_E4M3;
    float one = 1.0f, *sinv = (float *)dev_new(ctx, 4);
    put(ctx, sinv, &one, 4);
    bad.scale_inv = sinv;
    CHECK_STATUS(NULL, f8_embedding_forward(NULL, tok, 3, &wte, &wpe, &y), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, NULL, 3, &wte, &wpe, &y), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 3, NULL, &wpe, &y), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 3, &bad, &wpe, &y), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 0, &wte, &wpe, &y), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 4, &wte, &wpe, &y), F8_ERR_SHAPE); /* wpe has 3 rows */
    CHECK(strstr(f8_ctx_last_error(ctx), "wpe") != NULL, "message names wpe: %s", f8_ctx_last_error(ctx));
    f8_tensor narrow = y;
    narrow.cols = 3, narrow.rows = 6;
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 3, &wte, &wpe, &narrow), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_embedding_forward(ctx, tok, 3, &wte, &wpe, &wte), F8_ERR_INVALID_ARGUMENT); /* y aliases wte */
    float back[20];
    get(ctx, back, y.data, sizeof back);
    CHECK(memcmp(back, sentinel, sizeof back) == 0, "a failed embedding call wrote y");

    /* backward */
    f8_tensor dy = dev_tensor(ctx, NULL, F8_DTYPE_FP32, 5, 4);
    CHECK_STATUS(ctx, f8_embedding_backward(ctx, tok, 3, &dy, &dy, NULL), F8_ERR_INVALID_ARGUMENT); /* overlap */
    CHECK_STATUS(ctx, f8_embedding_backward(ctx, tok, 3, &dy, &bad, NULL), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_embedding_backward(ctx, tok, 5, &dy, &wte, &wpe), F8_ERR_SHAPE); /* dwpe 3 rows < 5 */
    CHECK_STATUS(ctx, f8_embedding_backward(ctx, NULL, 3, &dy, &wte, NULL), F8_ERR_INVALID_ARGUMENT);
    float wback[24];
    get(ctx, wback, wte.data, sizeof wback);
    CHECK(memcmp(wback, wh, sizeof wh) == 0, "a failed embedding backward wrote dwte");

    /* cross-entropy */
    float *loss = (float *)dev_new(ctx, 6 * sizeof(float));
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 0, tok, 1, loss, NULL), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 5, tok, 1, loss, NULL), F8_ERR_SHAPE); /* vocab > cols */
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 4, NULL, 1, loss, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 4, tok, 1, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &bad, 4, tok, 1, loss, NULL), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 4, tok, 1, loss, &y), F8_ERR_SHAPE); /* rows differ */
    f8_tensor shifted = f8_tensor_make((float *)wte.data + 4, F8_DTYPE_FP32, 5, 4);
    f8_tensor first5 = f8_tensor_make(wte.data, F8_DTYPE_FP32, 5, 4);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &first5, 4, tok, 1, loss, &shifted), F8_ERR_INVALID_ARGUMENT);
    f8_tensor as_bf16 = f8_tensor_make(wte.data, F8_DTYPE_BF16, 6, 4);
    CHECK_STATUS(ctx, f8_cross_entropy(ctx, &wte, 4, tok, 1, loss, &as_bf16), F8_ERR_INVALID_ARGUMENT);
    get(ctx, wback, wte.data, sizeof wback);
    CHECK(memcmp(wback, wh, sizeof wh) == 0, "a failed cross-entropy wrote its logits");

    /* AdamW */
    f8_adamw *o = NULL;
    f8_adamw_config cfg = f8_adamw_config_default();
    CHECK_STATUS(ctx, f8_adamw_create(ctx, NULL, &o), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &cfg, NULL), F8_ERR_INVALID_ARGUMENT);
    f8_adamw_config c2 = cfg;
    c2.beta1 = 1.0f;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &c2, &o), F8_ERR_INVALID_ARGUMENT);
    CHECK(o == NULL, "a failed create left an object");
    c2 = cfg, c2.warmup_steps = 5, c2.total_steps = 5;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &c2, &o), F8_ERR_INVALID_ARGUMENT);
    c2 = cfg, c2.lr_max = NAN;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &c2, &o), F8_ERR_INVALID_ARGUMENT);
    c2 = cfg, c2.grad_clip = -1;
    CHECK_STATUS(ctx, f8_adamw_create(ctx, &c2, &o), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(ctx, f8_adamw_create(ctx, &cfg, &o));
    f8_ctx_counters k0, k1;
    f8_ctx_counters_read(ctx, &k0);
    CHECK_STATUS(ctx, f8_adamw_add(o, &wte, &y, 1), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_adamw_add(o, &bad, &bad, 1), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_adamw_add(o, NULL, &wte, 1), F8_ERR_INVALID_ARGUMENT);
    f8_ctx_counters_read(ctx, &k1);
    CHECK(k1.allocations == k0.allocations, "failed adds allocated");
    CHECK_OK(ctx, f8_adamw_add(o, &wte, &wte, 1)); /* (grad = param is legal if odd) */
    CHECK_STATUS(ctx, f8_adamw_add(o, &wte, &wpe, 1), F8_ERR_SHAPE);
    f8_tensor wte2 = wte;
    CHECK_STATUS(ctx, f8_adamw_add(o, &wte2, &wte, 1), F8_ERR_INVALID_ARGUMENT); /* registered twice */
    CHECK_OK(ctx, f8_adamw_step(o));
    CHECK_STATUS(ctx, f8_adamw_add(o, &wpe, &wpe, 1), F8_ERR_STATE);
    CHECK(strstr(f8_ctx_last_error(ctx), "stepped") != NULL, "message: %s", f8_ctx_last_error(ctx));
    CHECK_STATUS(NULL, f8_adamw_step(NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_adamw_read(NULL, NULL, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    f8_adamw_destroy(o);
    f8_adamw_destroy(NULL);

    f8_ctx_free(ctx, wte.data), f8_ctx_free(ctx, wpe.data), f8_ctx_free(ctx, y.data), f8_ctx_free(ctx, dy.data);
    f8_ctx_free(ctx, tok), f8_ctx_free(ctx, sinv), f8_ctx_free(ctx, loss);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "cannot create a CPU ctx: %s\n", why);
        return 1;
    }
    const f8_dtype d2[2] = {F8_DTYPE_FP32, F8_DTYPE_BF16};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++) test_embedding_forward(ctx, d2[a], d2[b], d2[c]);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            test_embedding_backward(ctx, d2[a], d2[b], 21, 1);  /* T = 2S + 5 */
            test_embedding_backward(ctx, d2[a], d2[b], 5, 1);   /* T < S */
            test_embedding_backward(ctx, d2[a], d2[b], 300, 0); /* no dwpe, a hot token */
        }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) test_cross_entropy(ctx, d2[a], d2[b]);
    test_cross_entropy_fd(ctx);
    test_graph_and_counters(ctx);
    test_bad_args(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_train_ops");
}
