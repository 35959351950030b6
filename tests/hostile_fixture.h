/*
 * hostile_fixture.h — what the hostile-input cases run against (see
 * hostile_cases.h): the fixture (two ctxs, modules, a qtensor, attention,
 * optimizers, checkpoints and buffers, one training step behind them), the
 * snapshot of everything a caller can observe, and the case row (hcase).
 */
#ifndef F8_TESTS_HOSTILE_FIXTURE_H
#define F8_TESTS_HOSTILE_FIXTURE_H

#include <stdint.h>

#include "check.h"

/* Huge requests must come back as F8_ERR_OUT_OF_MEMORY under ASan too (its
 * default is to abort on an allocation it cannot serve). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

#define H_HISTORY 4
#define H_T 16   /* max_tokens of the modules */
#define H_K 64   /* in_features / hidden size */
#define H_N 32   /* out_features */
#define H_V 40   /* vocabulary (embedding, cross-entropy) */
#define H_C 32   /* attention channels: 2 heads of 16 */
#define H_SEQ 8
#define H_HUGE ((int64_t)1 << 62) /* + 1: rows whose product with any cols overflows */

enum { B_X, B_Y, B_DY, B_DX, B_QKV, B_AY, B_TOK, B_WTE, B_WPE, B_LOGITS, B_LOSS, B_P, B_G, B_COUNT };
static const size_t BUF_BYTES[B_COUNT] = {
    H_T * H_K * 4, H_T * H_K * 4, H_T * H_K * 4, H_T * H_K * 4, H_T * 3 * H_C * 4, H_T * H_C * 4, H_T * 4,
    H_V * H_C * 4, H_SEQ * H_C * 4, H_T * H_V * 4, H_T * 4, 8 * 8 * 4, 8 * 8 * 4};

typedef struct fx {
    f8_ctx *ctx, *other;                  /* other: a second ctx (objects of another ctx) */
    f8_module *lin, *lnl, *mlp, *nobias;  /* Linear 64->32, LNLinear 64->32, MLP 64/96, Linear without bias */
    f8_module *mods[4];
    f8_saved *s_used, *s_fresh, *s_lnl;   /* consumed by a backward / never filled / LNLinear's */
    f8_qtensor *q;                        /* [8, 16] E4M3, transpose never made */
    f8_attention *att, *att2;
    f8_attention_saved *att_s, *att2_s;   /* att_s: never filled; att2_s: of att2 */
    f8_adamw *opt, *opt_stepped;
    f8_checkpoint *ck, *ck_other;         /* ck holds "m.bias"; ck_other belongs to `other` */
    void *buf[B_COUNT];
    f8_slot unreg;                        /* a slot index past the registered ones */
    char note[512];                       /* a case's call of interest before its clean-up */
    int noted;                            /* (note() sets it; the harness checks note then) */
} fx;

/* Keep the message of the call a case is about, when the case must make
 * more calls after it (to leave capture mode). */
static f8_status note(fx *f, f8_status st)
{
    snprintf(f->note, sizeof f->note, "%s", f8_ctx_last_error(f->ctx));
    f->noted = 1;
    return st;
}

/* ---- the snapshot ---------------------------------------------------------- */

enum { S_PARAMS, S_GRADS, S_WS, S_SLOTS, S_BUFS, S_MEM, S_COUNTERS, S_MISC, S_COUNT };
static const char *const S_NAME[S_COUNT] = {"parameters", "gradients",     "weight workspaces", "scaling slots",
                                            "user buffers", "memory report", "counters",         "optimizer/qtensor/checkpoint"};

typedef struct snap {
    uint64_t h[S_COUNT];
    int ok; /* every read of the snapshot worked */
} snap;

static void fnv(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 0x100000001B3ull;
}

/* Hash n bytes of backend memory. */
static void fnv_dev(fx *f, snap *s, uint64_t *h, const void *dev, size_t n)
{
    unsigned char *host = xmalloc(n);
    if (n && f8_ctx_download(f->ctx, host, dev, n) != F8_OK) s->ok = 0;
    fnv(h, host, n);
    fnv(h, &n, sizeof n);
    free(host);
}

static void fnv_view(fx *f, snap *s, uint64_t *h, const f8_tensor *v)
{
    fnv(h, &v->dtype, sizeof v->dtype);
    fnv(h, &v->rows, sizeof v->rows);
    fnv(h, &v->cols, sizeof v->cols);
    fnv_dev(f, s, h, v->data, (size_t)(v->rows * v->cols) * f8_dtype_size(v->dtype));
    if (v->scale_inv) fnv_dev(f, s, h, v->scale_inv, sizeof(float));
}

static void snap_qtensor(fx *f, snap *s, uint64_t *h, const f8_qtensor *q)
{
    f8_tensor v;
    if (f8_qtensor_data(q, &v) != F8_OK) s->ok = 0;
    else fnv_view(f, s, h, &v);
    const int valid = f8_qtensor_transpose_valid(q);
    fnv(h, &valid, sizeof valid);
    if (valid && f8_qtensor_transpose_data(q, &v) == F8_OK) fnv_view(f, s, h, &v);
}

static snap snapshot(fx *f)
{
    snap s;
    s.ok = 1;
    for (int i = 0; i < S_COUNT; i++) s.h[i] = 0xCBF29CE484222325ull;
    for (int m = 0; m < 4; m++) {
        const f8_module *mod = f->mods[m];
        for (int p = 0; p < 8; p++)
            for (int g = 0; g < 2; g++) {
                f8_tensor v;
                if (f8_module_param(f->mods[m], (f8_param)p, g, &v) == F8_OK) fnv_view(f, &s, &s.h[g ? S_GRADS : S_PARAMS], &v);
            }
        static const f8_param ws[3] = {F8_PARAM_WEIGHT, F8_PARAM_FC1_WEIGHT, F8_PARAM_FC2_WEIGHT};
        for (int w = 0; w < 3; w++) {
            const f8_qtensor *q = f8_module_weight_workspace(mod, ws[w]);
            if (q) snap_qtensor(f, &s, &s.h[S_WS], q);
        }
        f8_memory_report r;
        if (f8_module_memory(mod, &r) != F8_OK) s.ok = 0;
        fnv(&s.h[S_MEM], &r, sizeof r);
    }
    /* Every registered slot, both directions, and how many there are. */
    for (int dir = 0; dir < 2; dir++) {
        int32_t i = 0;
        for (;; i++) {
            float sc, si, hist[H_HISTORY];
            f8_slot sl = {dir, i};
            if (f8_slot_read(f->ctx, sl, &sc, &si, hist) != F8_OK) break;
            fnv(&s.h[S_SLOTS], &sc, sizeof sc);
            fnv(&s.h[S_SLOTS], &si, sizeof si);
            fnv(&s.h[S_SLOTS], hist, sizeof hist);
        }
        fnv(&s.h[S_SLOTS], &i, sizeof i);
    }
    for (int b = 0; b < B_COUNT; b++) fnv_dev(f, &s, &s.h[S_BUFS], f->buf[b], BUF_BYTES[b]);
    fnv_dev(f, &s, &s.h[S_BUFS], f8_ctx_noop_flag(f->ctx), sizeof(float));
    f8_memory_report r;
    f8_ctx_counters c;
    if (f8_ctx_memory(f->ctx, &r) != F8_OK || f8_ctx_counters_read(f->ctx, &c) != F8_OK) s.ok = 0;
    fnv(&s.h[S_MEM], &r, sizeof r);
    fnv(&s.h[S_COUNTERS], &c, sizeof c);
    snap_qtensor(f, &s, &s.h[S_MISC], f->q);
    f8_adamw *opts[2] = {f->opt, f->opt_stepped};
    for (int o = 0; o < 2; o++) {
        int64_t step = -1;
        float lr = -1, norm = -1;
        if (f8_adamw_read(opts[o], &step, &lr, &norm) != F8_OK) s.ok = 0;
        fnv(&s.h[S_MISC], &step, sizeof step);
        fnv(&s.h[S_MISC], &lr, sizeof lr);
        fnv(&s.h[S_MISC], &norm, sizeof norm);
    }
    static const char *const names[] = {"m.bias", "m.weight", "x", "lin.weight", "lin.bias", "opt.step", "t"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        const int has = f8_checkpoint_has(f->ck, names[n]);
        fnv(&s.h[S_MISC], &has, sizeof has);
    }
    const char *meta = f8_checkpoint_metadata(f->ck, "user");
    fnv(&s.h[S_MISC], meta ? meta : "(none)", strlen(meta ? meta : "(none)"));
    const int cap = f8_ctx_capturing(f->ctx);
    fnv(&s.h[S_MISC], &cap, sizeof cap);
    return s;
}

/* ---- the fixture ------------------------------------------------------------ */

#define SETUP(call)                                                               \
    do {                                                                          \
        if ((call) != F8_OK) die(#call, f->ctx);                                  \
    } while (0)

static f8_tensor tview(fx *f, int b, f8_dtype dt, int64_t rows, int64_t cols)
{
    return f8_tensor_make(f->buf[b], dt, rows, cols);
}

/* Everything the cases poke at, with one training step behind it so the
 * workspaces, slots and saved states hold real data. Returns 0, or the
 * create status of the ctx (F8_ERR_NO_DEVICE: skip). */
static f8_status fixture_create(fx *f, f8_backend backend, char *why)
{
    memset(f, 0, sizeof *f);
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = backend;
    cfg.recipe.amax_history_len = H_HISTORY;
    f8_status st = f8_ctx_create(&cfg, &f->ctx, why, 256);
    if (st != F8_OK) return st;
    SETUP(f8_ctx_create(&cfg, &f->other, why, 256));
    test_rng rng = {0x4057113ull};
    for (int b = 0; b < B_COUNT; b++) {
        SETUP(f8_ctx_alloc(f->ctx, BUF_BYTES[b], &f->buf[b]));
        float *h = xmalloc(BUF_BYTES[b]);
        for (size_t i = 0; i < BUF_BYTES[b] / 4; i++) h[i] = (float)(rng_normal(&rng) * 0.5);
        if (b == B_TOK)
            for (size_t i = 0; i < BUF_BYTES[b] / 4; i++) ((int32_t *)h)[i] = (int32_t)(i * 7 % H_V);
        SETUP(f8_ctx_upload(f->ctx, f->buf[b], h, BUF_BYTES[b]));
        free(h);
    }
    f8_linear_config lc = f8_linear_config_default(H_K, H_N);
    lc.max_tokens = H_T;
    SETUP(f8_linear_create(f->ctx, &lc, &f->lin));
    lc.bias = 0;
    SETUP(f8_linear_create(f->ctx, &lc, &f->nobias));
    f8_layernorm_linear_config nc = f8_layernorm_linear_config_default(H_K, H_N);
    nc.max_tokens = H_T;
    SETUP(f8_layernorm_linear_create(f->ctx, &nc, &f->lnl));
    f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(H_K, 96);
    mc.max_tokens = H_T;
    SETUP(f8_layernorm_mlp_create(f->ctx, &mc, &f->mlp));
    f->mods[0] = f->lin, f->mods[1] = f->lnl, f->mods[2] = f->mlp, f->mods[3] = f->nobias;
    SETUP(f8_module_saved_create(f->lin, &f->s_used));
    SETUP(f8_module_saved_create(f->lin, &f->s_fresh));
    SETUP(f8_module_saved_create(f->lnl, &f->s_lnl));
    /* One step of the Linear (forward, backward: s_used is consumed). */
    f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, H_T, H_K), y = tview(f, B_Y, F8_DTYPE_FP32, H_T, H_N);
    f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N), dx = tview(f, B_DX, F8_DTYPE_FP32, H_T, H_K);
    SETUP(f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_FIRST, f->s_used));
    SETUP(f8_ctx_update_scales(f->ctx, F8_DIR_FORWARD));
    SETUP(f8_module_backward(f->lin, f->s_used, &dy, &dx));
    SETUP(f8_ctx_update_scales(f->ctx, F8_DIR_BACKWARD));
    SETUP(f8_module_forward(f->lnl, &x, &y, F8_MICROBATCH_FIRST, f->s_lnl));
    SETUP(f8_qtensor_create(f->ctx, F8_DTYPE_E4M3, 8, 16, &f->q));
    f8_attention_config ac = f8_attention_config_default(2, 16, 2, H_SEQ);
    ac.dtype = F8_DTYPE_FP32;
    SETUP(f8_attention_create(f->ctx, &ac, &f->att));
    SETUP(f8_attention_create(f->ctx, &ac, &f->att2));
    SETUP(f8_attention_saved_create(f->att, &f->att_s));
    SETUP(f8_attention_saved_create(f->att2, &f->att2_s));
    f8_adamw_config oc = f8_adamw_config_default();
    SETUP(f8_adamw_create(f->ctx, &oc, &f->opt));
    SETUP(f8_adamw_create(f->ctx, &oc, &f->opt_stepped));
    f8_tensor p = tview(f, B_P, F8_DTYPE_FP32, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 8, 8);
    SETUP(f8_adamw_add(f->opt, &p, &g, 1));
    SETUP(f8_adamw_step(f->opt_stepped));
    SETUP(f8_checkpoint_create(f->ctx, &f->ck));
    SETUP(f8_checkpoint_create(f->other, &f->ck_other));
    f8_tensor small = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4);
    SETUP(f8_checkpoint_add_tensor(f->ck, "m.bias", &small));
    SETUP(f8_checkpoint_add_tensor(f->ck, "t", &small));
    SETUP(f8_checkpoint_set_metadata(f->ck, "user", "hostile"));
    SETUP(f8_ctx_synchronize(f->ctx));
    f->unreg.direction = F8_DIR_FORWARD;
    f->unreg.index = 100000;
    return F8_OK;
}

static void fixture_destroy(fx *f)
{
    f8_checkpoint_destroy(f->ck);
    f8_checkpoint_destroy(f->ck_other);
    f8_adamw_destroy(f->opt);
    f8_adamw_destroy(f->opt_stepped);
    f8_attention_saved_destroy(f->att_s);
    f8_attention_saved_destroy(f->att2_s);
    f8_attention_destroy(f->att);
    f8_attention_destroy(f->att2);
    f8_qtensor_destroy(f->q);
    f8_saved_destroy(f->s_used);
    f8_saved_destroy(f->s_fresh);
    f8_saved_destroy(f->s_lnl);
    for (int m = 0; m < 4; m++) f8_module_destroy(f->mods[m]);
    for (int b = 0; b < B_COUNT; b++) f8_ctx_free(f->ctx, f->buf[b]);
    f8_ctx_destroy(f->other);
    f8_ctx_destroy(f->ctx);
}

/* ---- the cases ---------------------------------------------------------------- */

typedef struct hcase {
    const char *name;
    f8_status (*call)(fx *f);
    f8_status want;
    const char *needle; /* the message must contain it; NULL: no ctx to hold one */
} hcase;

#define X32(f) tview(f, B_X, F8_DTYPE_FP32, H_T, H_K)
#define Y32(f) tview(f, B_Y, F8_DTYPE_FP32, H_T, H_N)

#endif /* F8_TESTS_HOSTILE_FIXTURE_H */
