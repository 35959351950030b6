/*
 * hostile_cases.h — the hostile-input program, one body for both backends
 * (test_hostile.c runs it on a CPU ctx, test_cuda_hostile.c on a CUDA one).
 *
 * Every public entry point of f8.h is called with what a careless or hostile
 * caller would pass: NULLs, bad enums, wrong shapes and dtypes, dimensions
 * whose products overflow ([2^62+1, 4], [2^32, 2^32]), SIZE_MAX sizes, and
 * state misuse (backward before forward or twice, the saved state of another
 * module, capture misuse). Each case is a row of a table: a call, the status
 * it must return and a word its message must contain. Around every call the
 * harness takes a snapshot of everything a caller can observe (an FNV-1a hash
 * per section: parameters, gradients, weight workspaces with their scale_inv
 * and transposes, every scaling slot, the user buffers, the memory reports,
 * the counters, and the optimizer, qtensor, checkpoint and capture state)
 * and asserts: the status; a fresh message (a known one is put in the ctx
 * first, and it must be replaced by a non-empty one naming the call or the
 * argument, never an internal f8i_ function); and an unchanged snapshot.
 *
 * The defects of issue 13 each have a case that failed on the old code:
 *  1 f8_ctx_alloc of SIZE_MAX returned F8_OK (rounding wrapped to 0);
 *  2 [2^62+1, ...] views were undefined behaviour, f8_tensor_zero of
 *    [2^62+1, 4] and zero/fill_normal of [2^32, 2^32] returned F8_OK;
 *  3 a failing create (in = out = 2^24) left slots registered (3 retries);
 *  4 add_module after "m.bias" exists added "m.weight" first;
 *  5 "expected [T, 0, 64]", and NULL outputs of f8_ctx_memory /
 *    f8_ctx_counters_read failed without a message.
 */
#ifndef F8_TESTS_HOSTILE_CASES_H
#define F8_TESTS_HOSTILE_CASES_H

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

/* ctx and memory */
static f8_status c_alloc_null(fx *f) { return f8_ctx_alloc(f->ctx, 16, NULL); }
static f8_status c_alloc_sizemax(fx *f) { void *p = &p; return f8_ctx_alloc(f->ctx, SIZE_MAX, &p); }
static f8_status c_alloc_wrap(fx *f) { void *p = NULL; return f8_ctx_alloc(f->ctx, SIZE_MAX - 254, &p); }
static f8_status c_alloc_2p62(fx *f) { void *p = NULL; return f8_ctx_alloc(f->ctx, ((size_t)1 << 62) + 1, &p); }
static f8_status c_alloc_nullctx(fx *f) { void *p = NULL; (void)f; return f8_ctx_alloc(NULL, 16, &p); }
static f8_status c_upload_null(fx *f) { return f8_ctx_upload(f->ctx, f->buf[B_X], NULL, 16); }
static f8_status c_upload_nulldst(fx *f) { float h[4] = {0}; return f8_ctx_upload(f->ctx, NULL, h, 16); }
static f8_status c_download_null(fx *f) { return f8_ctx_download(f->ctx, NULL, f->buf[B_X], 16); }
static f8_status c_copy_null(fx *f) { return f8_ctx_copy(f->ctx, f->buf[B_X], NULL, 16); }
static f8_status c_sync_null(fx *f) { (void)f; return f8_ctx_synchronize(NULL); }
static f8_status c_noop_null(fx *f) { (void)f; return f8_ctx_set_noop_flag(NULL, 1.0f); }
static f8_status c_wnoop_null(fx *f) { (void)f; return f8_ctx_set_weight_noop(NULL, 1); }
static f8_status c_memory_null(fx *f) { return f8_ctx_memory(f->ctx, NULL); }
static f8_status c_counters_null(fx *f) { return f8_ctx_counters_read(f->ctx, NULL); }
static f8_status c_module_memory_null(fx *f) { return f8_module_memory(f->lin, NULL); }

/* tensors */
static f8_status c_zero_null(fx *f) { return f8_tensor_zero(f->ctx, NULL); }
static f8_status c_zero_huge(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, 4); return f8_tensor_zero(f->ctx, &t); }
static f8_status c_zero_2p32(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32); return f8_tensor_zero(f->ctx, &t); }
static f8_status c_zero_neg(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_FP32, -1, 4); return f8_tensor_zero(f->ctx, &t); }
static f8_status c_zero_dtype(fx *f) { f8_tensor t = tview(f, B_X, (f8_dtype)9, 4, 4); return f8_tensor_zero(f->ctx, &t); }
static f8_status c_zero_nodata(fx *f) { f8_tensor t = f8_tensor_make(NULL, F8_DTYPE_FP32, 4, 4); (void)f; return f8_tensor_zero(f->ctx, &t); }
static f8_status c_fill_2p32(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32); return f8_tensor_fill_normal(f->ctx, &t, 1.0, 1); }
static f8_status c_fill_huge(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_BF16, 4, H_HUGE); return f8_tensor_fill_normal(f->ctx, &t, 1.0, 1); }
static f8_status c_fill_negstd(fx *f) { f8_tensor t = X32(f); return f8_tensor_fill_normal(f->ctx, &t, -1.0, 1); }
static f8_status c_fill_nanstd(fx *f) { f8_tensor t = X32(f); return f8_tensor_fill_normal(f->ctx, &t, NAN, 1); }
static f8_status c_fill_fp8(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_E4M3, 4, 4); t.scale_inv = (float *)f->buf[B_LOSS]; return f8_tensor_fill_normal(f->ctx, &t, 1.0, 1); }
static f8_status c_convert_shape(fx *f) { f8_tensor s = X32(f), d = tview(f, B_Y, F8_DTYPE_BF16, H_T, H_K - 1); return f8_tensor_convert(f->ctx, &s, &d); }
static f8_status c_convert_fp8dst(fx *f) { f8_tensor s = X32(f), d = tview(f, B_Y, F8_DTYPE_E5M2, H_T, H_K); d.scale_inv = (float *)f->buf[B_LOSS]; return f8_tensor_convert(f->ctx, &s, &d); }
static f8_status c_convert_nosinv(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_E4M3, 4, 4), d = tview(f, B_Y, F8_DTYPE_FP32, 4, 4); return f8_tensor_convert(f->ctx, &s, &d); }
static f8_status c_convert_huge(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, 1), d = tview(f, B_Y, F8_DTYPE_FP32, H_HUGE + 1, 1); return f8_tensor_convert(f->ctx, &s, &d); }
static f8_status c_add_dtype(fx *f) { f8_tensor s = X32(f), d = tview(f, B_Y, F8_DTYPE_BF16, H_T, H_K); return f8_tensor_add(f->ctx, &d, &s); }
static f8_status c_add_2p32(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32), d = s; d.data = f->buf[B_Y]; return f8_tensor_add(f->ctx, &d, &s); }
static f8_status c_add_null(fx *f) { f8_tensor d = Y32(f); return f8_tensor_add(f->ctx, &d, NULL); }

/* slots */
static f8_status c_slots_dir(fx *f) { f8_slot s[2]; return f8_ctx_slots_create(f->ctx, (f8_direction)5, 2, s); }
static f8_status c_slots_count0(fx *f) { f8_slot s[2]; return f8_ctx_slots_create(f->ctx, F8_DIR_FORWARD, 0, s); }
static f8_status c_slots_countneg(fx *f) { f8_slot s[2]; return f8_ctx_slots_create(f->ctx, F8_DIR_BACKWARD, -1, s); }
static f8_status c_slots_null(fx *f) { return f8_ctx_slots_create(f->ctx, F8_DIR_FORWARD, 2, NULL); }
static f8_status c_slot_read_unreg(fx *f) { float s; return f8_slot_read(f->ctx, f->unreg, &s, NULL, NULL); }
static f8_status c_slot_read_dir(fx *f) { f8_slot sl = {7, 0}; float s; return f8_slot_read(f->ctx, sl, &s, NULL, NULL); }
static f8_status c_slot_write_neg(fx *f) { f8_slot sl = {0, -1}; return f8_slot_write(f->ctx, sl, 2.0f, 0.5f, NULL); }
static f8_status c_update_dir(fx *f) { return f8_ctx_update_scales(f->ctx, (f8_direction)2); }

/* qtensor */
static f8_status c_q_create_dtype(fx *f) { f8_qtensor *q = NULL; return f8_qtensor_create(f->ctx, F8_DTYPE_FP32, 4, 4, &q); }
static f8_status c_q_create_2p32(fx *f) { f8_qtensor *q = NULL; return f8_qtensor_create(f->ctx, F8_DTYPE_E4M3, (int64_t)1 << 32, (int64_t)1 << 32, &q); }
static f8_status c_q_create_huge(fx *f) { f8_qtensor *q = NULL; return f8_qtensor_create(f->ctx, F8_DTYPE_E5M2, H_HUGE + 1, 1, &q); }
static f8_status c_q_create_neg(fx *f) { f8_qtensor *q = NULL; return f8_qtensor_create(f->ctx, F8_DTYPE_E4M3, 4, -4, &q); }
static f8_status c_q_create_null(fx *f) { return f8_qtensor_create(f->ctx, F8_DTYPE_E4M3, 4, 4, NULL); }
static f8_status c_q_quant_shape(fx *f) { f8_slot sl = {0, 0}; f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, 16, 8); return f8_qtensor_quantize(f->q, &s, sl, 1, NULL); }
static f8_status c_q_quant_unreg(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, 8, 16); return f8_qtensor_quantize(f->q, &s, f->unreg, 1, NULL); }
static f8_status c_q_quant_fp8(fx *f) { f8_slot sl = {0, 0}; f8_tensor s = tview(f, B_X, F8_DTYPE_E4M3, 8, 16); s.scale_inv = (float *)f->buf[B_LOSS]; return f8_qtensor_quantize(f->q, &s, sl, 0, NULL); }
static f8_status c_q_quant_huge(fx *f) { f8_slot sl = {0, 0}; f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, 16); return f8_qtensor_quantize(f->q, &s, sl, 0, NULL); }
static f8_status c_q_tinto_shape(fx *f) { f8_tensor d = tview(f, B_Y, F8_DTYPE_E4M3, 8, 16); return f8_qtensor_transpose_into(f->q, &d); }
static f8_status c_q_tinto_dtype(fx *f) { f8_tensor d = tview(f, B_Y, F8_DTYPE_E5M2, 16, 8); return f8_qtensor_transpose_into(f->q, &d); }
static f8_status c_q_tinto_null(fx *f) { return f8_qtensor_transpose_into(f->q, NULL); }
static f8_status c_q_deq_dtype(fx *f) { f8_tensor d = tview(f, B_Y, F8_DTYPE_E4M3, 8, 16); d.scale_inv = (float *)f->buf[B_LOSS]; return f8_qtensor_dequantize(f->q, &d); }
static f8_status c_q_deq_huge(fx *f) { f8_tensor d = tview(f, B_Y, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32); return f8_qtensor_dequantize(f->q, &d); }
static f8_status c_q_data_null(fx *f) { return f8_qtensor_data(f->q, NULL); }
static f8_status c_q_tdata_invalid(fx *f) { f8_tensor v; return f8_qtensor_transpose_data(f->q, &v); }
static f8_status c_q_upload_null(fx *f) { return f8_qtensor_upload(f->q, NULL, 1.0f); }
static f8_status c_q_transpose_nullq(fx *f) { (void)f; return f8_qtensor_transpose(NULL, NULL); }

/* module creation */
static f8_status c_lin_create_nullcfg(fx *f) { f8_module *m = NULL; return f8_linear_create(f->ctx, NULL, &m); }
static f8_status c_lin_create_nullout(fx *f) { f8_linear_config c = f8_linear_config_default(4, 4); return f8_linear_create(f->ctx, &c, NULL); }
static f8_status c_lin_create_in0(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(0, 4); return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_big(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, ((int64_t)1 << 24) + 1); return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_tokens(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.max_tokens = -1; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_pdtype(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.param_dtype = F8_DTYPE_E4M3; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_fp8flag(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.fp8 = 7; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_biasflag(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.bias = -3; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_fp8w(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.fp8 = 0, c.fp8_weights = 1; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lnl_create_norm(fx *f) { f8_module *m = NULL; f8_layernorm_linear_config c = f8_layernorm_linear_config_default(4, 4); c.normalization = (f8_norm)3; return f8_layernorm_linear_create(f->ctx, &c, &m); }
static f8_status c_lnl_create_eps(fx *f) { f8_module *m = NULL; f8_layernorm_linear_config c = f8_layernorm_linear_config_default(4, 4); c.eps = NAN; return f8_layernorm_linear_create(f->ctx, &c, &m); }
static f8_status c_lnl_create_ret(fx *f) { f8_module *m = NULL; f8_layernorm_linear_config c = f8_layernorm_linear_config_default(4, 4); c.return_layernorm_output = 2; return f8_layernorm_linear_create(f->ctx, &c, &m); }
static f8_status c_mlp_create_act(fx *f) { f8_module *m = NULL; f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(4, 4); c.activation = (f8_activation)7; return f8_layernorm_mlp_create(f->ctx, &c, &m); }
static f8_status c_mlp_create_ffn(fx *f) { f8_module *m = NULL; f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(4, ((int64_t)1 << 23) + 1); return f8_layernorm_mlp_create(f->ctx, &c, &m); }
static f8_status c_mlp_create_zc(fx *f) { f8_module *m = NULL; f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(4, 4); c.zero_centered_gamma = 5; return f8_layernorm_mlp_create(f->ctx, &c, &m); }

/* module calls */
static f8_status c_param_which(fx *f) { f8_tensor v; return f8_module_param(f->lin, F8_PARAM_FC1_WEIGHT, 0, &v); }
static f8_status c_param_enum(fx *f) { f8_tensor v; return f8_module_param(f->lin, (f8_param)99, 0, &v); }
static f8_status c_param_grad2(fx *f) { f8_tensor v; return f8_module_param(f->lin, F8_PARAM_WEIGHT, 2, &v); }
static f8_status c_param_null(fx *f) { return f8_module_param(f->lin, F8_PARAM_WEIGHT, 0, NULL); }
static f8_status c_param_nobias(fx *f) { f8_tensor v; return f8_module_param(f->nobias, F8_PARAM_BIAS, 0, &v); }
static f8_status c_slot_dir(fx *f) { f8_slot s; return f8_module_slot(f->lin, (f8_direction)3, 0, &s); }
static f8_status c_slot_index(fx *f) { f8_slot s; return f8_module_slot(f->lin, F8_DIR_BACKWARD, 2, &s); }
static f8_status c_slot_nullout(fx *f) { return f8_module_slot(f->mlp, F8_DIR_FORWARD, 0, NULL); }
static f8_status c_main_grad_unfused(fx *f) { return f8_module_set_main_grad(f->lin, F8_PARAM_WEIGHT, (float *)f->buf[B_P]); }
static f8_status c_main_grad_bias(fx *f) { return f8_module_set_main_grad(f->lin, F8_PARAM_BIAS, (float *)f->buf[B_P]); }
static f8_status c_zero_grad_null(fx *f) { (void)f; return f8_module_zero_grad(NULL); }
static f8_status c_saved_create_null(fx *f) { return f8_module_saved_create(f->lin, NULL); }
static f8_status c_write_weight_shape(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, H_K, H_N); return f8_module_write_weight(f->lin, F8_PARAM_WEIGHT, &s); }
static f8_status c_write_weight_bias(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, 1, H_N); return f8_module_write_weight(f->lin, F8_PARAM_BIAS, &s); }
static f8_status c_write_weight_huge(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, H_K); return f8_module_write_weight(f->lin, F8_PARAM_WEIGHT, &s); }
static f8_status c_fwd_x_null(fx *f) { f8_tensor y = Y32(f); return f8_module_forward(f->lin, NULL, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_x_cols(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, 16, 63), y = Y32(f); return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_x_huge(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, H_K), y = Y32(f); return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_x_2p32(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32), y = Y32(f); return f8_module_forward(f->mlp, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_tokens(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, H_T + 1, 4), y = Y32(f); x.cols = H_K; x.rows = H_T + 1; y.rows = H_T + 1; return f8_module_forward(f->lnl, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_x_fp8(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_E4M3, H_T, H_K), y = Y32(f); x.scale_inv = (float *)f->buf[B_LOSS]; return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_y_shape(fx *f) { f8_tensor x = X32(f), y = tview(f, B_Y, F8_DTYPE_FP32, H_T - 1, H_N); return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_mb(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_module_forward(f->lin, &x, &y, (f8_microbatch)3, NULL); }
static f8_status c_fwd_other_saved(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, f->s_lnl); }
static f8_status c_fwd_nullmod(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_module_forward(NULL, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_bwd_before_fwd(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward(f->lin, f->s_fresh, &dy, NULL); }
static f8_status c_bwd_twice(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward(f->lin, f->s_used, &dy, NULL); }
static f8_status c_bwd_other_saved(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward(f->lin, f->s_lnl, &dy, NULL); }
static f8_status c_bwd_null_saved(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward(f->lnl, NULL, &dy, NULL); }
static f8_status c_bwd_dy_shape(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N + 1); return f8_module_backward(f->lnl, f->s_lnl, &dy, NULL); }
static f8_status c_bwd_dy_huge(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_HUGE + 1, H_N); return f8_module_backward(f->lnl, f->s_lnl, &dy, NULL); }
static f8_status c_bwd_dx_shape(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N), dx = tview(f, B_DX, F8_DTYPE_BF16, H_T, H_K + 1); return f8_module_backward(f->lnl, f->s_lnl, &dy, &dx); }
static f8_status c_lnl_fwd_on_linear(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_layernorm_linear_forward(f->lin, &x, &y, NULL, F8_MICROBATCH_NONE, NULL); }
static f8_status c_lnl_fwd_lnout(fx *f) { f8_tensor x = X32(f), y = Y32(f), ln = tview(f, B_DX, F8_DTYPE_FP32, H_T, H_K); return f8_layernorm_linear_forward(f->lnl, &x, &y, &ln, F8_MICROBATCH_NONE, NULL); }
static f8_status c_lnl_bwd_on_mlp(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_K); return f8_layernorm_linear_backward(f->mlp, f->s_lnl, &dy, NULL, NULL); }
static f8_status c_update_wscales_null(fx *f) { (void)f; return f8_ctx_update_weight_scales(NULL); }

/* graphs (each leaves the ctx out of capture mode) */
static f8_status c_graph_end_nobegin(fx *f)
{
    f8_graph *g = (f8_graph *)f; /* a stale value end must clear */
    f8_status st = f8_graph_end(f->ctx, &g);
    CHECK(g == NULL, "f8_graph_end without begin left *graph set");
    return st;
}
static f8_status c_graph_begin_twice(fx *f)
{
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    f8_status st = note(f, f8_graph_begin(f->ctx));
    f8_graph *g = NULL;
    CHECK_OK(f->ctx, f8_graph_end(f->ctx, &g)); /* the first capture is intact: an empty graph */
    f8_graph_destroy(g);
    return st;
}
/* A call refused during a capture; the capture is then spoiled. */
static f8_status during_capture(fx *f, f8_status (*call)(fx *f))
{
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    f8_status st = note(f, call(f));
    f8_graph *g = (f8_graph *)f;
    f8_status end = f8_graph_end(f->ctx, &g);
    CHECK(end == F8_ERR_STATE && g == NULL, "end after a refused call (%s): %s, graph %p", f->note,
          f8_status_string(end), (void *)g);
    f8_graph_destroy(g);
    return st;
}
static f8_status u_upload(fx *f) { float h[4] = {1, 2, 3, 4}; return f8_ctx_upload(f->ctx, f->buf[B_X], h, sizeof h); }
static f8_status u_download(fx *f) { float h[4]; return f8_ctx_download(f->ctx, h, f->buf[B_X], sizeof h); }
static f8_status u_alloc(fx *f) { void *p = NULL; return f8_ctx_alloc(f->ctx, 64, &p); }
static f8_status u_create(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(8, 8); return f8_linear_create(f->ctx, &c, &m); }
static f8_status u_fill(fx *f) { f8_tensor t = X32(f); return f8_tensor_fill_normal(f->ctx, &t, 1.0, 3); }
static f8_status u_slot_read(fx *f) { f8_slot sl = {0, 0}; float s; return f8_slot_read(f->ctx, sl, &s, NULL, NULL); }
static f8_status u_ck_add(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "x", &t); }
static f8_status u_att_saved(fx *f) { f8_attention_saved *s = NULL; return f8_attention_saved_create(f->att, &s); }
static f8_status c_cap_upload(fx *f) { return during_capture(f, u_upload); }
static f8_status c_cap_download(fx *f) { return during_capture(f, u_download); }
static f8_status c_cap_alloc(fx *f) { return during_capture(f, u_alloc); }
static f8_status c_cap_create(fx *f) { return during_capture(f, u_create); }
static f8_status c_cap_fill(fx *f) { return during_capture(f, u_fill); }
static f8_status c_cap_slot_read(fx *f) { return during_capture(f, u_slot_read); }
static f8_status c_cap_ck_add(fx *f) { return during_capture(f, u_ck_add); }
static f8_status c_cap_att_saved(fx *f) { return during_capture(f, u_att_saved); }
static f8_status c_cap_end_spoiled(fx *f)
{
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    CHECK(u_upload(f) == F8_ERR_STATE, "upload while capturing was not refused");
    f8_graph *g = NULL;
    return f8_graph_end(f->ctx, &g);
}
static f8_status c_cap_end_null(fx *f)
{
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    return f8_graph_end(f->ctx, NULL);
}
static f8_status c_cap_replay(fx *f)
{
    f8_graph *g0 = NULL, *g1 = (f8_graph *)f;
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    CHECK_OK(f->ctx, f8_graph_end(f->ctx, &g0));
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    f8_status st = note(f, f8_graph_replay(g0));
    CHECK(f8_graph_end(f->ctx, &g1) == F8_ERR_STATE && g1 == NULL, "replay while capturing did not spoil the capture");
    f8_graph_destroy(g0);
    return st;
}
static f8_status c_replay_null(fx *f) { (void)f; return f8_graph_replay(NULL); }
static f8_status c_begin_null(fx *f) { (void)f; return f8_graph_begin(NULL); }

/* checkpoints */
static f8_status c_ck_create_null(fx *f) { return f8_checkpoint_create(f->ctx, NULL); }
static f8_status c_ck_add_noname(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, NULL, &t); }
static f8_status c_ck_add_meta(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "__metadata__", &t); }
static f8_status c_ck_add_dup(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "t", &t); }
static f8_status c_ck_add_utf8(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "bad\xff", &t); }
static f8_status c_ck_add_huge(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32); return f8_checkpoint_add_tensor(f->ck, "x", &t); }
static f8_status c_ck_add_dtype(fx *f) { f8_tensor t = tview(f, B_LOSS, (f8_dtype)-1, 1, 4); return f8_checkpoint_add_tensor(f->ck, "x", &t); }
static f8_status c_ck_add_nodata(fx *f) { f8_tensor t = f8_tensor_make(NULL, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "x", &t); }
static f8_status c_ck_read_missing(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_read_tensor(f->ck, "nope", &t); }
static f8_status c_ck_read_dtype(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_BF16, 1, 4); return f8_checkpoint_read_tensor(f->ck, "t", &t); }
static f8_status c_ck_read_shape(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 2, 2); return f8_checkpoint_read_tensor(f->ck, "t", &t); }
static f8_status c_ck_read_huge(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, H_HUGE + 1, 4); return f8_checkpoint_read_tensor(f->ck, "t", &t); }
static f8_status c_ck_meta_format(fx *f) { return f8_checkpoint_set_metadata(f->ck, "format", "pt"); }
static f8_status c_ck_meta_f8(fx *f) { return f8_checkpoint_set_metadata(f->ck, "f8.format_version", "9"); }
static f8_status c_ck_meta_null(fx *f) { return f8_checkpoint_set_metadata(f->ck, "user", NULL); }
static f8_status c_ck_meta_utf8(fx *f) { return f8_checkpoint_set_metadata(f->ck, "user", "\xc3"); }
static f8_status c_ck_load_missing(fx *f) { f8_checkpoint *c = (f8_checkpoint *)f; f8_status st = f8_checkpoint_load(f->ctx, "/nonexistent-f8/x.safetensors", &c); CHECK(c == NULL, "failed load left *checkpoint set"); return st; }
static f8_status c_ck_load_null(fx *f) { f8_checkpoint *c = NULL; return f8_checkpoint_load(f->ctx, NULL, &c); }
static f8_status c_ck_load_garbage(fx *f) { static const char junk[] = "\x05\0\0\0\0\0\0\0{\"a\":"; f8_checkpoint *c = NULL; return f8_checkpoint_load_memory(f->ctx, junk, sizeof junk - 1, &c); }
static f8_status c_ck_load_short(fx *f) { f8_checkpoint *c = NULL; return f8_checkpoint_load_memory(f->ctx, "abc", 3, &c); }
static f8_status c_ck_save_dir(fx *f) { return f8_checkpoint_save(f->ck, "/nonexistent-f8/dir/x.safetensors"); }
static f8_status c_ck_add_module_clash(fx *f) { return f8_checkpoint_add_module(f->ck, "m", f->lin); }
static f8_status c_ck_add_module_ctx(fx *f) { return f8_checkpoint_add_module(f->ck_other, "lin", f->lin); }
static f8_status c_ck_add_module_null(fx *f) { return f8_checkpoint_add_module(f->ck, NULL, f->lin); }
static f8_status c_ck_restore_missing(fx *f) { return f8_checkpoint_restore_module(f->ck, "m", f->lin); }
static f8_status c_ck_add_adamw_null(fx *f) { return f8_checkpoint_add_adamw(f->ck, NULL, f->opt); }
static f8_status c_ck_add_adamw_ctx(fx *f) { return f8_checkpoint_add_adamw(f->ck_other, "opt", f->opt); }
static f8_status c_ck_restore_adamw(fx *f) { return f8_checkpoint_restore_adamw(f->ck, "opt", f->opt); }

/* training blocks */
#define TOKS(f) ((const int32_t *)(f)->buf[B_TOK])
static f8_status c_emb_tokens(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, NULL, H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_seq0(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, TOKS(f), 0, &wte, &wpe, &y); }
static f8_status c_emb_wpe(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ + 1, &wte, &wpe, &y); }
static f8_status c_emb_cols(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C - 1); return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_overlap(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_WTE, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_fp8(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_E4M3, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); wte.scale_inv = (float *)f->buf[B_LOSS]; return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_huge(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_HUGE + 1, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_bwd_null(fx *f) { f8_tensor dy = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_backward(f->ctx, TOKS(f), H_SEQ, &dy, NULL, NULL); }
static f8_status c_emb_bwd_huge(fx *f) { f8_tensor dy = tview(f, B_AY, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32), dwte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, (int64_t)1 << 32); return f8_embedding_backward(f->ctx, TOKS(f), H_SEQ, &dy, &dwte, NULL); }
static f8_status c_emb_bwd_overlap(fx *f) { f8_tensor dy = tview(f, B_WTE, F8_DTYPE_FP32, H_T, H_C), dwte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C); return f8_embedding_backward(f->ctx, TOKS(f), H_SEQ, &dy, &dwte, NULL); }
static f8_status c_att_create_heads(fx *f) { f8_attention *a = NULL; f8_attention_config c = f8_attention_config_default(0, 16, 1, 8); return f8_attention_create(f->ctx, &c, &a); }
static f8_status c_att_create_dtype(fx *f) { f8_attention *a = NULL; f8_attention_config c = f8_attention_config_default(2, 16, 1, 8); c.dtype = F8_DTYPE_E4M3; return f8_attention_create(f->ctx, &c, &a); }
static f8_status c_att_create_batch(fx *f) { f8_attention *a = NULL; f8_attention_config c = f8_attention_config_default(2, 16, ((int64_t)1 << 24) + 1, 8); return f8_attention_create(f->ctx, &c, &a); }
static f8_status c_att_create_null(fx *f) { f8_attention *a = NULL; return f8_attention_create(f->ctx, NULL, &a); }
static f8_status c_att_saved_null(fx *f) { return f8_attention_saved_create(f->att, NULL); }
static f8_status c_att_fwd_batch(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, 3 * H_SEQ, 3 * H_C), y = tview(f, B_AY, F8_DTYPE_FP32, 3 * H_SEQ, H_C); return f8_attention_forward(f->att, &q, 3, H_SEQ, &y, NULL); }
static f8_status c_att_fwd_cols(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C - 1), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, NULL); }
static f8_status c_att_fwd_dtype(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_BF16, H_T, 3 * H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, NULL); }
static f8_status c_att_fwd_other(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, f->att2_s); }
static f8_status c_att_fwd_overlap(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C), y = tview(f, B_QKV, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, NULL); }
static f8_status c_att_fwd_huge(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, NULL); }
static f8_status c_att_bwd_unfilled(fx *f) { f8_tensor dy = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C), d = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C); return f8_attention_backward(f->att, f->att_s, &dy, &d); }
static f8_status c_att_bwd_other(fx *f) { f8_tensor dy = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C), d = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C); return f8_attention_backward(f->att, f->att2_s, &dy, &d); }
static f8_status c_ce_vocab0(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V); return f8_cross_entropy(f->ctx, &l, 0, TOKS(f), 1.0f, (float *)f->buf[B_LOSS], NULL); }
static f8_status c_ce_vocab_big(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V); return f8_cross_entropy(f->ctx, &l, H_V + 1, TOKS(f), 1.0f, (float *)f->buf[B_LOSS], NULL); }
static f8_status c_ce_targets(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V); return f8_cross_entropy(f->ctx, &l, H_V, NULL, 1.0f, (float *)f->buf[B_LOSS], NULL); }
static f8_status c_ce_losses(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V); return f8_cross_entropy(f->ctx, &l, H_V, TOKS(f), 1.0f, NULL, NULL); }
static f8_status c_ce_overlap(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V), d = tview(f, B_LOGITS, F8_DTYPE_BF16, H_T, H_V); return f8_cross_entropy(f->ctx, &l, H_V, TOKS(f), 1.0f, (float *)f->buf[B_LOSS], &d); }
static f8_status c_ce_huge(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_HUGE + 1, H_V); return f8_cross_entropy(f->ctx, &l, H_V, TOKS(f), 1.0f, (float *)f->buf[B_LOSS], NULL); }
static f8_status c_opt_create_lr(fx *f) { f8_adamw *o = NULL; f8_adamw_config c = f8_adamw_config_default(); c.lr_max = -1; return f8_adamw_create(f->ctx, &c, &o); }
static f8_status c_opt_create_beta(fx *f) { f8_adamw *o = NULL; f8_adamw_config c = f8_adamw_config_default(); c.beta2 = 1.0f; return f8_adamw_create(f->ctx, &c, &o); }
static f8_status c_opt_create_eps(fx *f) { f8_adamw *o = NULL; f8_adamw_config c = f8_adamw_config_default(); c.eps = NAN; return f8_adamw_create(f->ctx, &c, &o); }
static f8_status c_opt_create_steps(fx *f) { f8_adamw *o = NULL; f8_adamw_config c = f8_adamw_config_default(); c.warmup_steps = 10, c.total_steps = 5; return f8_adamw_create(f->ctx, &c, &o); }
static f8_status c_opt_create_null(fx *f) { f8_adamw_config c = f8_adamw_config_default(); return f8_adamw_create(f->ctx, &c, NULL); }
static f8_status c_opt_add_shape(fx *f) { f8_tensor p = tview(f, B_P, F8_DTYPE_FP32, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 4, 16); return f8_adamw_add(f->opt, &p, &g, 1); }
static f8_status c_opt_add_dtype(fx *f) { f8_tensor p = tview(f, B_P, F8_DTYPE_E4M3, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 8, 8); p.scale_inv = (float *)f->buf[B_LOSS]; return f8_adamw_add(f->opt, &p, &g, 1); }
static f8_status c_opt_add_twice(fx *f) { f8_tensor p = tview(f, B_P, F8_DTYPE_FP32, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 8, 8); return f8_adamw_add(f->opt, &p, &g, 0); }
static f8_status c_opt_add_stepped(fx *f) { f8_tensor p = tview(f, B_P, F8_DTYPE_FP32, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 8, 8); return f8_adamw_add(f->opt_stepped, &p, &g, 0); }
static f8_status c_opt_add_huge(fx *f) { f8_tensor p = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, 8), g = p; g.data = f->buf[B_Y]; return f8_adamw_add(f->opt, &p, &g, 1); }
static f8_status c_opt_add_moments(fx *f) { f8_tensor p = tview(f, B_X, F8_DTYPE_BF16, (int64_t)1 << 61, 1), g = p; g.data = f->buf[B_Y]; return f8_adamw_add(f->opt, &p, &g, 1); }
static f8_status c_opt_step_null(fx *f) { (void)f; return f8_adamw_step(NULL); }
static f8_status c_opt_read_null(fx *f) { (void)f; int64_t s; return f8_adamw_read(NULL, &s, NULL, NULL); }

/* defect 3: a create that fails, three times in a row */
static f8_status c_create_oom_retry(fx *f)
{
    f8_linear_config c = f8_linear_config_default((int64_t)1 << 24, (int64_t)1 << 24);
    f8_status st = F8_OK;
    for (int i = 0; i < 3; i++) {
        f8_module *m = (f8_module *)f;
        st = f8_linear_create(f->ctx, &c, &m);
        CHECK(m == NULL, "failed create left *module set");
    }
    return st;
}
static f8_status c_mlp_oom_retry(fx *f)
{
    f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default((int64_t)1 << 24, (int64_t)1 << 23);
    c.fp8_weights = 1;
    f8_status st = F8_OK;
    for (int i = 0; i < 3; i++) {
        f8_module *m = NULL;
        st = f8_layernorm_mlp_create(f->ctx, &c, &m);
    }
    return st;
}

static const hcase CASES[] = {
    /* ctx and memory; defect 1 */
    {"alloc NULL out", c_alloc_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_alloc"},
    {"alloc SIZE_MAX (defect 1)", c_alloc_sizemax, F8_ERR_OUT_OF_MEMORY, "f8_ctx_alloc"},
    {"alloc SIZE_MAX-254 (defect 1)", c_alloc_wrap, F8_ERR_OUT_OF_MEMORY, "f8_ctx_alloc"},
    {"alloc 2^62+1", c_alloc_2p62, F8_ERR_OUT_OF_MEMORY, "f8_ctx_alloc"},
    {"alloc NULL ctx", c_alloc_nullctx, F8_ERR_INVALID_ARGUMENT, NULL},
    {"upload NULL src", c_upload_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_upload"},
    {"upload NULL dst", c_upload_nulldst, F8_ERR_INVALID_ARGUMENT, "f8_ctx_upload"},
    {"download NULL dst", c_download_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_download"},
    {"copy NULL src", c_copy_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_copy"},
    {"synchronize NULL", c_sync_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"set_noop_flag NULL", c_noop_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"set_weight_noop NULL", c_wnoop_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"memory NULL report (defect 5)", c_memory_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_memory"},
    {"counters NULL (defect 5)", c_counters_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_counters_read"},
    {"module_memory NULL", c_module_memory_null, F8_ERR_INVALID_ARGUMENT, "f8_module_memory"},
    /* tensors; defect 2 */
    {"zero NULL", c_zero_null, F8_ERR_INVALID_ARGUMENT, "f8_tensor_zero"},
    {"zero [2^62+1, 4] (defect 2)", c_zero_huge, F8_ERR_SHAPE, "f8_tensor_zero"},
    {"zero [2^32, 2^32] (defect 2)", c_zero_2p32, F8_ERR_SHAPE, "f8_tensor_zero"},
    {"zero negative", c_zero_neg, F8_ERR_SHAPE, "f8_tensor_zero"},
    {"zero dtype 9", c_zero_dtype, F8_ERR_DTYPE, "f8_tensor_zero"},
    {"zero NULL data", c_zero_nodata, F8_ERR_INVALID_ARGUMENT, "f8_tensor_zero"},
    {"fill_normal [2^32, 2^32] (defect 2)", c_fill_2p32, F8_ERR_SHAPE, "f8_tensor_fill_normal"},
    {"fill_normal [4, 2^62] bf16", c_fill_huge, F8_ERR_SHAPE, "f8_tensor_fill_normal"},
    {"fill_normal std -1", c_fill_negstd, F8_ERR_INVALID_ARGUMENT, "f8_tensor_fill_normal"},
    {"fill_normal std NaN", c_fill_nanstd, F8_ERR_INVALID_ARGUMENT, "f8_tensor_fill_normal"},
    {"fill_normal e4m3", c_fill_fp8, F8_ERR_DTYPE, "f8_tensor_fill_normal"},
    {"convert shapes differ", c_convert_shape, F8_ERR_SHAPE, "f8_tensor_convert"},
    {"convert to e5m2", c_convert_fp8dst, F8_ERR_DTYPE, "f8_tensor_convert"},
    {"convert e4m3 without scale_inv", c_convert_nosinv, F8_ERR_INVALID_ARGUMENT, "f8_tensor_convert"},
    {"convert [2^62+1, 1]", c_convert_huge, F8_ERR_SHAPE, "f8_tensor_convert"},
    {"add dtypes differ", c_add_dtype, F8_ERR_DTYPE, "f8_tensor_add"},
    {"add [2^32, 2^32]", c_add_2p32, F8_ERR_SHAPE, "f8_tensor_add"},
    {"add NULL src", c_add_null, F8_ERR_INVALID_ARGUMENT, "f8_tensor_add"},
    /* slots */
    {"slots_create direction 5", c_slots_dir, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create"},
    {"slots_create count 0", c_slots_count0, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create"},
    {"slots_create count -1", c_slots_countneg, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create"},
    {"slots_create NULL out", c_slots_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create"},
    {"slot_read unregistered", c_slot_read_unreg, F8_ERR_INVALID_ARGUMENT, "f8_slot_read"},
    {"slot_read direction 7", c_slot_read_dir, F8_ERR_INVALID_ARGUMENT, "f8_slot_read"},
    {"slot_write index -1", c_slot_write_neg, F8_ERR_INVALID_ARGUMENT, "f8_slot_write"},
    {"update_scales direction 2", c_update_dir, F8_ERR_INVALID_ARGUMENT, "f8_ctx_update_scales"},
    /* qtensor */
    {"qtensor_create fp32", c_q_create_dtype, F8_ERR_DTYPE, "f8_qtensor_create"},
    {"qtensor_create [2^32, 2^32]", c_q_create_2p32, F8_ERR_SHAPE, "f8_qtensor_create"},
    {"qtensor_create [2^62+1, 1]", c_q_create_huge, F8_ERR_SHAPE, "f8_qtensor_create"},
    {"qtensor_create negative", c_q_create_neg, F8_ERR_SHAPE, "f8_qtensor_create"},
    {"qtensor_create NULL out", c_q_create_null, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_create"},
    {"quantize shape", c_q_quant_shape, F8_ERR_SHAPE, "f8_qtensor_quantize"},
    {"quantize unregistered slot", c_q_quant_unreg, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_quantize"},
    {"quantize e4m3 src", c_q_quant_fp8, F8_ERR_DTYPE, "f8_qtensor_quantize"},
    {"quantize [2^62+1, 16]", c_q_quant_huge, F8_ERR_SHAPE, "f8_qtensor_quantize"},
    {"transpose_into shape", c_q_tinto_shape, F8_ERR_SHAPE, "f8_qtensor_transpose_into"},
    {"transpose_into dtype", c_q_tinto_dtype, F8_ERR_DTYPE, "f8_qtensor_transpose_into"},
    {"transpose_into NULL", c_q_tinto_null, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_transpose_into"},
    {"dequantize to e4m3", c_q_deq_dtype, F8_ERR_DTYPE, "f8_qtensor_dequantize"},
    {"dequantize [2^32, 2^32]", c_q_deq_huge, F8_ERR_SHAPE, "f8_qtensor_dequantize"},
    {"qtensor_data NULL", c_q_data_null, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_data"},
    {"transpose_data before a transpose", c_q_tdata_invalid, F8_ERR_STATE, "f8_qtensor_transpose_data"},
    {"qtensor_upload NULL codes", c_q_upload_null, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_upload"},
    {"qtensor_transpose NULL", c_q_transpose_nullq, F8_ERR_INVALID_ARGUMENT, NULL},
    /* module creation; defect 3 */
    {"linear_create NULL config", c_lin_create_nullcfg, F8_ERR_INVALID_ARGUMENT, "f8_linear_create"},
    {"linear_create NULL out", c_lin_create_nullout, F8_ERR_INVALID_ARGUMENT, "f8_linear_create"},
    {"linear_create in 0", c_lin_create_in0, F8_ERR_SHAPE, "f8_linear_create"},
    {"linear_create out 2^24+1", c_lin_create_big, F8_ERR_SHAPE, "f8_linear_create"},
    {"linear_create max_tokens -1", c_lin_create_tokens, F8_ERR_SHAPE, "max_tokens"},
    {"linear_create param e4m3", c_lin_create_pdtype, F8_ERR_DTYPE, "param_dtype"},
    {"linear_create fp8 = 7", c_lin_create_fp8flag, F8_ERR_INVALID_ARGUMENT, "config.fp8"},
    {"linear_create bias = -3", c_lin_create_biasflag, F8_ERR_INVALID_ARGUMENT, "config.bias"},
    {"linear_create fp8_weights without fp8", c_lin_create_fp8w, F8_ERR_INVALID_ARGUMENT, "fp8_weights"},
    {"layernorm_linear_create norm 3", c_lnl_create_norm, F8_ERR_INVALID_ARGUMENT, "normalization"},
    {"layernorm_linear_create eps NaN", c_lnl_create_eps, F8_ERR_INVALID_ARGUMENT, "eps"},
    {"layernorm_linear_create return_layernorm_output 2", c_lnl_create_ret, F8_ERR_INVALID_ARGUMENT, "return_layernorm_output"},
    {"layernorm_mlp_create activation 7", c_mlp_create_act, F8_ERR_INVALID_ARGUMENT, "activation"},
    {"layernorm_mlp_create ffn 2^23+1", c_mlp_create_ffn, F8_ERR_SHAPE, "f8_layernorm_mlp_create"},
    {"layernorm_mlp_create zero_centered_gamma 5", c_mlp_create_zc, F8_ERR_INVALID_ARGUMENT, "zero_centered_gamma"},
    {"linear_create 2^24 x 2^24, 3 times (defect 3)", c_create_oom_retry, F8_ERR_OUT_OF_MEMORY, ""},
    {"layernorm_mlp_create 2^24 x 2^23, 3 times (defect 3)", c_mlp_oom_retry, F8_ERR_OUT_OF_MEMORY, ""},
    /* module calls; defect 5 */
    {"param fc1_weight of a Linear", c_param_which, F8_ERR_INVALID_ARGUMENT, "f8_module_param"},
    {"param 99", c_param_enum, F8_ERR_INVALID_ARGUMENT, "f8_module_param"},
    {"param grad 2", c_param_grad2, F8_ERR_INVALID_ARGUMENT, "f8_module_param"},
    {"param NULL view", c_param_null, F8_ERR_INVALID_ARGUMENT, "f8_module_param"},
    {"param bias of a bias-less Linear", c_param_nobias, F8_ERR_STATE, "f8_module_param"},
    {"module_slot direction 3", c_slot_dir, F8_ERR_INVALID_ARGUMENT, "f8_module_slot"},
    {"module_slot backward 2", c_slot_index, F8_ERR_INVALID_ARGUMENT, "f8_module_slot"},
    {"module_slot NULL out", c_slot_nullout, F8_ERR_INVALID_ARGUMENT, "f8_module_slot"},
    {"set_main_grad unfused", c_main_grad_unfused, F8_ERR_STATE, "f8_module_set_main_grad"},
    {"set_main_grad bias", c_main_grad_bias, F8_ERR_INVALID_ARGUMENT, "f8_module_set_main_grad"},
    {"zero_grad NULL", c_zero_grad_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"saved_create NULL out", c_saved_create_null, F8_ERR_INVALID_ARGUMENT, "f8_module_saved_create"},
    {"write_weight transposed shape", c_write_weight_shape, F8_ERR_SHAPE, "f8_module_write_weight"},
    {"write_weight bias", c_write_weight_bias, F8_ERR_INVALID_ARGUMENT, "f8_module_write_weight"},
    {"write_weight [2^62+1, 64]", c_write_weight_huge, F8_ERR_SHAPE, "f8_module_write_weight"},
    {"forward NULL x", c_fwd_x_null, F8_ERR_INVALID_ARGUMENT, "f8_module_forward: x"},
    {"forward x [16, 63] (defect 5)", c_fwd_x_cols, F8_ERR_SHAPE, "expected [T, 64]"},
    {"forward x [2^62+1, 64] (defect 2)", c_fwd_x_huge, F8_ERR_SHAPE, "f8_module_forward: x"},
    {"forward x [2^32, 2^32]", c_fwd_x_2p32, F8_ERR_SHAPE, "f8_module_forward: x"},
    {"forward T > max_tokens", c_fwd_tokens, F8_ERR_SHAPE, "max_tokens"},
    {"forward x e4m3", c_fwd_x_fp8, F8_ERR_DTYPE, "f8_module_forward: x"},
    {"forward y rows", c_fwd_y_shape, F8_ERR_SHAPE, "f8_module_forward: y"},
    {"forward microbatch 3", c_fwd_mb, F8_ERR_INVALID_ARGUMENT, "microbatch"},
    {"forward saved of another module", c_fwd_other_saved, F8_ERR_INVALID_ARGUMENT, "another module"},
    {"forward NULL module", c_fwd_nullmod, F8_ERR_INVALID_ARGUMENT, NULL},
    {"backward before forward", c_bwd_before_fwd, F8_ERR_STATE, "f8_module_backward"},
    {"backward twice", c_bwd_twice, F8_ERR_STATE, "f8_module_backward"},
    {"backward saved of another module", c_bwd_other_saved, F8_ERR_INVALID_ARGUMENT, "another module"},
    {"backward NULL saved", c_bwd_null_saved, F8_ERR_INVALID_ARGUMENT, "saved"},
    {"backward dy cols", c_bwd_dy_shape, F8_ERR_SHAPE, "f8_module_backward: dy"},
    {"backward dy [2^62+1, 32]", c_bwd_dy_huge, F8_ERR_SHAPE, "f8_module_backward: dy"},
    {"backward dx cols", c_bwd_dx_shape, F8_ERR_SHAPE, "f8_module_backward: dx"},
    {"layernorm_linear_forward on a Linear", c_lnl_fwd_on_linear, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_forward"},
    {"layernorm_linear_forward ln_out unasked", c_lnl_fwd_lnout, F8_ERR_INVALID_ARGUMENT, "ln_out"},
    {"layernorm_linear_backward on an MLP", c_lnl_bwd_on_mlp, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_backward"},
    {"update_weight_scales NULL", c_update_wscales_null, F8_ERR_INVALID_ARGUMENT, NULL},
    /* graphs */
    {"graph_end without begin", c_graph_end_nobegin, F8_ERR_STATE, "f8_graph_end"},
    {"graph_begin twice", c_graph_begin_twice, F8_ERR_STATE, "f8_graph_begin"},
    {"upload while capturing", c_cap_upload, F8_ERR_STATE, "captur"},
    {"download while capturing", c_cap_download, F8_ERR_STATE, "captur"},
    {"alloc while capturing", c_cap_alloc, F8_ERR_STATE, "captur"},
    {"linear_create while capturing", c_cap_create, F8_ERR_STATE, "captur"},
    {"fill_normal while capturing", c_cap_fill, F8_ERR_STATE, "f8_tensor_fill_normal"},
    {"slot_read while capturing", c_cap_slot_read, F8_ERR_STATE, "captur"},
    {"checkpoint_add_tensor while capturing", c_cap_ck_add, F8_ERR_STATE, "captur"},
    {"attention_saved_create while capturing", c_cap_att_saved, F8_ERR_STATE, "f8_attention_saved_create"},
    {"graph_end of a spoiled capture", c_cap_end_spoiled, F8_ERR_STATE, "spoiled"},
    {"graph_end NULL out", c_cap_end_null, F8_ERR_INVALID_ARGUMENT, "f8_graph_end"},
    {"graph_replay while capturing", c_cap_replay, F8_ERR_STATE, "f8_graph_replay"},
    {"graph_replay NULL", c_replay_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"graph_begin NULL", c_begin_null, F8_ERR_INVALID_ARGUMENT, NULL},
    /* checkpoints; defect 4 */
    {"checkpoint_create NULL out", c_ck_create_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_create"},
    {"add_tensor NULL name", c_ck_add_noname, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"add_tensor __metadata__", c_ck_add_meta, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"add_tensor duplicate", c_ck_add_dup, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"add_tensor invalid UTF-8 name", c_ck_add_utf8, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"add_tensor [2^32, 2^32]", c_ck_add_huge, F8_ERR_SHAPE, "f8_checkpoint_add_tensor"},
    {"add_tensor dtype -1", c_ck_add_dtype, F8_ERR_DTYPE, "f8_checkpoint_add_tensor"},
    {"add_tensor NULL data", c_ck_add_nodata, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"read_tensor missing", c_ck_read_missing, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_read_tensor"},
    {"read_tensor dtype", c_ck_read_dtype, F8_ERR_DTYPE, "f8_checkpoint_read_tensor"},
    {"read_tensor shape", c_ck_read_shape, F8_ERR_SHAPE, "f8_checkpoint_read_tensor"},
    {"read_tensor [2^62+1, 4]", c_ck_read_huge, F8_ERR_SHAPE, "f8_checkpoint_read_tensor"},
    {"set_metadata format", c_ck_meta_format, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_set_metadata"},
    {"set_metadata f8.*", c_ck_meta_f8, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_set_metadata"},
    {"set_metadata NULL value", c_ck_meta_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_set_metadata"},
    {"set_metadata invalid UTF-8", c_ck_meta_utf8, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_set_metadata"},
    {"load missing file", c_ck_load_missing, F8_ERR_IO, "f8_checkpoint_load"},
    {"load NULL path", c_ck_load_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_load"},
    {"load_memory truncated JSON", c_ck_load_garbage, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_load"},
    {"load_memory 3 bytes", c_ck_load_short, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_load"},
    {"save into a missing directory", c_ck_save_dir, F8_ERR_IO, "f8_checkpoint_save"},
    {"add_module after m.bias (defect 4)", c_ck_add_module_clash, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_module"},
    {"add_module other ctx", c_ck_add_module_ctx, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_module"},
    {"add_module NULL prefix", c_ck_add_module_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_module"},
    {"restore_module incomplete", c_ck_restore_missing, F8_ERR_INVALID_ARGUMENT, "m.weight"},
    {"add_adamw NULL prefix", c_ck_add_adamw_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_adamw"},
    {"add_adamw other ctx", c_ck_add_adamw_ctx, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_adamw"},
    {"restore_adamw missing", c_ck_restore_adamw, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_restore_adamw"},
    /* training blocks */
    {"embedding_forward NULL tokens", c_emb_tokens, F8_ERR_INVALID_ARGUMENT, "f8_embedding_forward"},
    {"embedding_forward seq_len 0", c_emb_seq0, F8_ERR_SHAPE, "f8_embedding_forward"},
    {"embedding_forward wpe too short", c_emb_wpe, F8_ERR_SHAPE, "f8_embedding_forward"},
    {"embedding_forward y cols", c_emb_cols, F8_ERR_SHAPE, "f8_embedding_forward"},
    {"embedding_forward y overlaps wte", c_emb_overlap, F8_ERR_INVALID_ARGUMENT, "f8_embedding_forward"},
    {"embedding_forward wte e4m3", c_emb_fp8, F8_ERR_DTYPE, "f8_embedding_forward"},
    {"embedding_forward wte [2^62+1, 32]", c_emb_huge, F8_ERR_SHAPE, "f8_embedding_forward"},
    {"embedding_backward NULL dwte", c_emb_bwd_null, F8_ERR_INVALID_ARGUMENT, "f8_embedding_backward"},
    {"embedding_backward [2^32, 2^32]", c_emb_bwd_huge, F8_ERR_SHAPE, "f8_embedding_backward"},
    {"embedding_backward dy overlaps dwte", c_emb_bwd_overlap, F8_ERR_INVALID_ARGUMENT, "f8_embedding_backward"},
    {"attention_create n_head 0", c_att_create_heads, F8_ERR_SHAPE, "f8_attention_create"},
    {"attention_create e4m3", c_att_create_dtype, F8_ERR_DTYPE, "f8_attention_create"},
    {"attention_create max_batch 2^24+1", c_att_create_batch, F8_ERR_SHAPE, "f8_attention_create"},
    {"attention_create NULL config", c_att_create_null, F8_ERR_INVALID_ARGUMENT, "f8_attention_create"},
    {"attention_saved_create NULL out", c_att_saved_null, F8_ERR_INVALID_ARGUMENT, "f8_attention_saved_create"},
    {"attention_forward batch 3", c_att_fwd_batch, F8_ERR_SHAPE, "f8_attention_forward"},
    {"attention_forward qkv cols", c_att_fwd_cols, F8_ERR_SHAPE, "f8_attention_forward: qkv"},
    {"attention_forward qkv bf16", c_att_fwd_dtype, F8_ERR_DTYPE, "f8_attention_forward: qkv"},
    {"attention_forward saved of another attention", c_att_fwd_other, F8_ERR_INVALID_ARGUMENT, "f8_attention_forward"},
    {"attention_forward y overlaps qkv", c_att_fwd_overlap, F8_ERR_INVALID_ARGUMENT, "f8_attention_forward"},
    {"attention_forward qkv [2^32, 2^32]", c_att_fwd_huge, F8_ERR_SHAPE, "f8_attention_forward: qkv"},
    {"attention_backward before forward", c_att_bwd_unfilled, F8_ERR_STATE, "f8_attention_backward"},
    {"attention_backward saved of another attention", c_att_bwd_other, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward"},
    {"cross_entropy vocab 0", c_ce_vocab0, F8_ERR_SHAPE, "f8_cross_entropy"},
    {"cross_entropy vocab > cols", c_ce_vocab_big, F8_ERR_SHAPE, "f8_cross_entropy"},
    {"cross_entropy NULL targets", c_ce_targets, F8_ERR_INVALID_ARGUMENT, "f8_cross_entropy"},
    {"cross_entropy NULL losses", c_ce_losses, F8_ERR_INVALID_ARGUMENT, "f8_cross_entropy"},
    {"cross_entropy dlogits aliases logits as bf16", c_ce_overlap, F8_ERR_INVALID_ARGUMENT, "f8_cross_entropy"},
    {"cross_entropy logits [2^62+1, 40]", c_ce_huge, F8_ERR_SHAPE, "f8_cross_entropy"},
    {"adamw_create lr -1", c_opt_create_lr, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_create beta2 1", c_opt_create_beta, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_create eps NaN", c_opt_create_eps, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_create total < warmup", c_opt_create_steps, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_create NULL out", c_opt_create_null, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_add shapes differ", c_opt_add_shape, F8_ERR_SHAPE, "f8_adamw_add"},
    {"adamw_add e4m3 param", c_opt_add_dtype, F8_ERR_DTYPE, "f8_adamw_add"},
    {"adamw_add twice", c_opt_add_twice, F8_ERR_INVALID_ARGUMENT, "f8_adamw_add"},
    {"adamw_add after a step", c_opt_add_stepped, F8_ERR_STATE, "f8_adamw_add"},
    {"adamw_add [2^62+1, 8]", c_opt_add_huge, F8_ERR_SHAPE, "f8_adamw_add"},
    {"adamw_add bf16 [2^61, 1]: moments past 2^62 bytes", c_opt_add_moments, F8_ERR_OUT_OF_MEMORY, "f8_adamw_add"},
    {"adamw_step NULL", c_opt_step_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"adamw_read NULL", c_opt_read_null, F8_ERR_INVALID_ARGUMENT, NULL},
};

/* ---- the harness ---------------------------------------------------------------- */

/* Put a known message in the ctx, so a failing call must replace it. */
static void sentinel(fx *f, char *copy, size_t n)
{
    f8_slot s;
    (void)f8_ctx_slots_create(f->ctx, (f8_direction)77, 1, &s);
    snprintf(copy, n, "%s", f8_ctx_last_error(f->ctx));
}

static void run_case(fx *f, const hcase *c)
{
    snap before = snapshot(f);
    char known[512], msg[512];
    sentinel(f, known, sizeof known);
    f->noted = 0;
    const f8_status st = c->call(f);
    snprintf(msg, sizeof msg, "%s", f->noted ? f->note : f8_ctx_last_error(f->ctx));
    snap after = snapshot(f);
    CHECK(st == c->want, "%s: %s, wanted %s (%s)", c->name, f8_status_string(st), f8_status_string(c->want), msg);
    if (c->needle) {
        CHECK(msg[0] && strcmp(msg, known) != 0, "%s: no fresh message (still '%s')", c->name, msg);
        CHECK(strstr(msg, c->needle) != NULL, "%s: message '%s' does not contain '%s'", c->name, msg, c->needle);
        CHECK(strstr(msg, "f8i_") == NULL, "%s: message '%s' names an internal function", c->name, msg);
    }
    CHECK(before.ok && after.ok, "%s: a snapshot read failed (%s)", c->name, f8_ctx_last_error(f->ctx));
    /* A create that fails may have allocated and freed (the counters count
     * what was done); everything else must be as it was. */
    const int counters_move = c->call == c_create_oom_retry || c->call == c_mlp_oom_retry;
    for (int i = 0; i < S_COUNT; i++)
        CHECK(before.h[i] == after.h[i] || (i == S_COUNTERS && counters_move), "%s: the %s changed", c->name, S_NAME[i]);
}

/* Calls that have no ctx to report to: the pure helpers and f8_ctx_create. */
static void test_pure_and_create(f8_backend backend)
{
    CHECK(strcmp(f8_status_string((f8_status)99), "F8_ERR_UNKNOWN") == 0, "status string of 99");
    CHECK(f8_dtype_size((f8_dtype)7) == 0 && strcmp(f8_dtype_name((f8_dtype)-2), "unknown") == 0, "unknown dtype");
    CHECK(f8_fp8_max(F8_DTYPE_BF16) == 0.0f && f8_fp8_from_float(1.0f, F8_DTYPE_FP32) == 0x7F, "fp8 of a non-FP8 dtype");
    CHECK(isnan(f8_fp8_to_float(0x38, (f8_dtype)9)), "fp8_to_float of dtype 9");
    CHECK(strcmp(f8_mem_category_name((f8_mem_category)-1), "unknown") == 0, "mem category -1");
    CHECK(strcmp(f8_param_name((f8_param)8), "unknown") == 0 && f8_activation_gated((f8_activation)-1) == 0, "enums");
    CHECK(f8_scale_from_amax(NAN, 2.0f, 448.0f, 0) == 2.0f, "scale_from_amax NaN keeps the scale");
    CHECK(f8_ctx_last_error(NULL) != NULL && f8_ctx_recipe(NULL) == NULL && f8_ctx_stream(NULL) == NULL &&
              f8_ctx_noop_flag(NULL) == NULL && f8_ctx_capturing(NULL) == 0 && f8_module_weight_workspace(NULL, 0) == NULL &&
              f8_qtensor_transpose_valid(NULL) == 0 && f8_checkpoint_has(NULL, "x") == 0,
          "accessors of NULL");
    f8_module_destroy(NULL), f8_saved_destroy(NULL), f8_qtensor_destroy(NULL), f8_graph_destroy(NULL);
    f8_attention_destroy(NULL), f8_attention_saved_destroy(NULL), f8_adamw_destroy(NULL), f8_checkpoint_destroy(NULL);
    f8_ctx_destroy(NULL);

    struct {
        const char *name;
        int what;
        f8_status want;
        const char *needle;
    } bad[] = {
        {"NULL config", 0, F8_ERR_INVALID_ARGUMENT, "config"},    {"backend 5", 1, F8_ERR_INVALID_ARGUMENT, "backend"},
        {"history 0", 2, F8_ERR_INVALID_ARGUMENT, "amax_history_len"}, {"format 2", 3, F8_ERR_INVALID_ARGUMENT, "format"},
        {"margin 1000", 4, F8_ERR_INVALID_ARGUMENT, "margin"},    {"algo -1", 5, F8_ERR_INVALID_ARGUMENT, "amax_compute_algo"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f8_ctx_config cfg = f8_ctx_config_default();
        cfg.backend = backend;
        if (bad[i].what == 1) cfg.backend = (f8_backend)5;
        if (bad[i].what == 2) cfg.recipe.amax_history_len = 0;
        if (bad[i].what == 3) cfg.recipe.format = (f8_format)2;
        if (bad[i].what == 4) cfg.recipe.margin = 1000;
        if (bad[i].what == 5) cfg.recipe.amax_compute_algo = (f8_amax_algo)-1;
        f8_ctx *ctx = (f8_ctx *)&cfg;
        char why[256] = "";
        f8_status st = f8_ctx_create(bad[i].what ? &cfg : NULL, &ctx, why, sizeof why);
        CHECK(st == bad[i].want && ctx == NULL, "ctx_create %s: %s", bad[i].name, f8_status_string(st));
        CHECK(strstr(why, bad[i].needle) != NULL, "ctx_create %s: message '%s'", bad[i].name, why);
        if (st == F8_OK) f8_ctx_destroy(ctx);
    }
    char tiny[4] = "xyz";
    f8_ctx_config cfg = f8_ctx_config_default();
    CHECK(f8_ctx_create(&cfg, NULL, tiny, sizeof tiny) == F8_ERR_INVALID_ARGUMENT && strlen(tiny) == 3,
          "ctx_create NULL out: message truncated to the buffer");
}

/* The whole program, on one backend. */
static int hostile_main(const char *name, f8_backend backend)
{
    char why[256] = "";
    fx f;
    f8_status st = fixture_create(&f, backend, why);
    if (st == F8_ERR_NO_DEVICE) return test_skip(name, why);
    if (st != F8_OK) {
        fprintf(stderr, "%s: no ctx: %s (%s)\n", name, f8_status_string(st), why);
        return 1;
    }
    test_pure_and_create(backend);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&f, &CASES[i]);
    /* The fixture still works after all of it: one more Linear step. */
    f8_tensor x = X32(&f), y = Y32(&f), dy = tview(&f, B_DY, F8_DTYPE_FP32, H_T, H_N);
    CHECK_OK(f.ctx, f8_module_forward(f.lin, &x, &y, F8_MICROBATCH_NOT_FIRST, f.s_used));
    CHECK_OK(f.ctx, f8_module_backward(f.lin, f.s_used, &dy, NULL));
    printf("%s: %zu hostile calls, each with its status, message and a snapshot of %d sections\n", name,
           sizeof CASES / sizeof CASES[0], S_COUNT);
    fixture_destroy(&f);
    return test_finish(name);
}

#endif /* F8_TESTS_HOSTILE_CASES_H */
