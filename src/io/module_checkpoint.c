/*
 * io/module_checkpoint.c — storing a module in an f8_checkpoint and restoring
 * it, and an FP8 attention's slots the same way (names and rules in f8.h,
 * "Checkpoints" and f8_checkpoint_add_attention).
 *
 * Design note. Restoring is all-or-nothing: every entry the module needs is
 * found, type-checked and converted into host buffers first; only then is
 * backend memory written (slots first, so a high-precision weight quantized
 * into an FP8 primary weight uses the restored scale). Workspaces are not
 * stored (TE does not either): restoring marks them unfilled, so the next
 * forward casts whatever its microbatch, and no cached FP8 copy can outlive
 * the weights it came from.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "core/numerics.h"
#include "modules/module.h"
#include "nn/attention.h"

#define NAME_MAX_LEN 512

static f8_status name_of(f8_ctx *ctx, char *out, const char *prefix, const char *field)
{
    int n = snprintf(out, NAME_MAX_LEN, "%s%s%s", prefix, prefix[0] ? "." : "", field);
    if (n < 0 || n >= NAME_MAX_LEN)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "checkpoint: name \"%s.%s\" is too long", prefix, field);
    return F8_OK;
}

static f8i_ck_dtype ck_dtype(f8_dtype dt)
{
    switch (dt) {
    case F8_DTYPE_BF16: return F8I_CK_BF16;
    case F8_DTYPE_E4M3: return F8I_CK_F8_E4M3;
    case F8_DTYPE_E5M2: return F8I_CK_F8_E5M2;
    default: return F8I_CK_F32;
    }
}

/* Download a [rows, cols] tensor of backend memory and store it. */
static f8_status put_backend(f8_checkpoint *ck, f8_ctx *ctx, const char *name, const void *src, f8_dtype dt, int ndim,
                             int64_t rows, int64_t cols)
{
    const size_t bytes = (size_t)(rows * cols) * f8_dtype_size(dt);
    unsigned char *host = (unsigned char *)malloc(bytes + 1);
    if (!host) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "checkpoint: out of host memory");
    f8_status st = bytes ? ctx->be->download(ctx, host, src, bytes) : F8_OK;
    int64_t shape[2] = {rows, cols};
    if (ndim == 1) shape[0] = rows * cols;
    if (st == F8_OK) st = f8i_checkpoint_put(ck, name, ck_dtype(dt), ndim, shape, host, bytes);
    free(host);
    return st;
}

static const char *format_name(f8_format f) { return f == F8_FORMAT_E4M3 ? "E4M3" : "HYBRID"; }

static f8_status put_slots(f8_checkpoint *ck, f8_ctx *ctx, const char *prefix, const char *dir, const f8_slot *slots,
                           int n)
{
    const int L = ctx->recipe.amax_history_len;
    float *h = (float *)malloc(((size_t)L + 2) * (size_t)n * sizeof(float));
    if (!h) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "checkpoint: out of host memory");
    float *scale = h + (size_t)L * n, *sinv = scale + n;
    f8_status st = f8i_slots_io(ctx, slots, n, h, scale, sinv, 0);
    char name[NAME_MAX_LEN], field[64];
    const char *parts[3] = {"amax_history", "scale", "scale_inv"};
    const float *data[3] = {h, scale, sinv};
    for (int i = 0; i < 3 && st == F8_OK; i++) {
        snprintf(field, sizeof field, "fp8.%s.%s", dir, parts[i]);
        st = name_of(ctx, name, prefix, field);
        int64_t shape[2] = {i ? n : L, n};
        if (st == F8_OK)
            st = f8i_checkpoint_put(ck, name, F8I_CK_F32, i ? 1 : 2, i ? shape + 1 : shape, data[i],
                                    (size_t)(i ? n : (int64_t)L * n) * sizeof(float));
    }
    free(h);
    return st;
}

/* What restore refuses is refused before anything is added, so f8 never
 * writes a checkpoint it will not read back: every slot's amaxes finite and
 * >= 0, its scale and scale_inv finite and > 0 (read_slots' rules). */
static f8_status slots_storable(f8_ctx *ctx, const char *fn, const char *prefix, const char *dir, const f8_slot *slots,
                                int n)
{
    const int L = ctx->recipe.amax_history_len;
    float *h = (float *)malloc(((size_t)L + 2) * (size_t)n * sizeof(float) + 1);
    if (!h) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    float *scale = h + (size_t)L * n, *sinv = scale + n;
    f8_status st = f8i_slots_io(ctx, slots, n, h, scale, sinv, 0);
    for (int i = 0; i < n && st == F8_OK; i++) {
        const char *what = NULL;
        float x = 0;
        for (int r = 0; r < L && !what; r++)
            if (!(h[(size_t)r * n + i] >= 0.0f) || isinf(h[(size_t)r * n + i])) what = "an amax", x = h[(size_t)r * n + i];
        if (!what && (!(scale[i] > 0.0f) || isinf(scale[i]))) what = "the scale", x = scale[i];
        if (!what && (!(sinv[i] > 0.0f) || isinf(sinv[i]))) what = "the scale_inv", x = sinv[i];
        if (what)
            st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"%s\" fp8.%s slot %d: %s is %g (a restore would refuse "
                                                         "it; nothing was added)", fn, prefix, dir, i, what, (double)x);
    }
    free(h);
    return st;
}

/* "<prefix>.fp8.recipe": what the stored slots were scaled under. */
static f8_status put_recipe(f8_checkpoint *ck, f8_ctx *ctx, const char *prefix)
{
    char name[NAME_MAX_LEN], value[200];
    int len = snprintf(value, sizeof value, "format=%s margin=%d amax_history_len=%d amax_compute_algo=%s",
                       format_name(ctx->recipe.format), ctx->recipe.margin, ctx->recipe.amax_history_len,
                       ctx->recipe.amax_compute_algo == F8_AMAX_MAX ? "max" : "most_recent");
    /* delayed scaling writes what it always wrote (a value without
     * "scaling=" reads as delayed) */
    if (ctx->recipe.kind != F8_RECIPE_DELAYED && len > 0 && (size_t)len < sizeof value)
        snprintf(value + len, sizeof value - (size_t)len, " scaling=%s power_2_scales=%d",
                 f8_recipe_kind_name(ctx->recipe.kind), ctx->recipe.power_2_scales);
    f8_status st = name_of(ctx, name, prefix, "fp8.recipe");
    return st == F8_OK ? f8_checkpoint_set_metadata(ck, name, value) : st;
}

static f8_status add_module(f8_checkpoint *ck, const char *prefix, const f8_module *m)
{
    f8_ctx *ctx = m->ctx;
    char name[NAME_MAX_LEN];
    f8_status st = F8_OK;
    for (int i = 0; i < m->n_weights && st == F8_OK; i++) {
        const f8i_weight *w = &m->w[i];
        f8_tensor v = f8i_weight_view(w, 0);
        st = name_of(ctx, name, prefix, m->weight_names[i]);
        if (st == F8_OK) st = put_backend(ck, ctx, name, v.data, v.dtype, 2, w->rows, w->cols);
        if (st == F8_OK && w->fp8_primary) {
            char field[64];
            snprintf(field, sizeof field, "%s_scale_inv", m->weight_names[i]);
            st = name_of(ctx, name, prefix, field);
            if (st == F8_OK) st = put_backend(ck, ctx, name, w->w8->scale_inv, F8_DTYPE_FP32, 1, 1, 1);
        }
        if (st == F8_OK && w->b) {
            st = name_of(ctx, name, prefix, m->bias_names[i]);
            if (st == F8_OK) st = put_backend(ck, ctx, name, w->b, w->dtype, 1, 1, w->rows);
        }
    }
    if (m->has_norm && st == F8_OK) {
        const f8i_norm *nm = &m->norm;
        st = name_of(ctx, name, prefix, "layer_norm_weight");
        if (st == F8_OK) st = put_backend(ck, ctx, name, nm->gamma, nm->dtype, 1, 1, nm->cols);
        if (st == F8_OK && nm->beta) {
            st = name_of(ctx, name, prefix, "layer_norm_bias");
            if (st == F8_OK) st = put_backend(ck, ctx, name, nm->beta, nm->dtype, 1, 1, nm->cols);
        }
    }
    if (m->fp8 && st == F8_OK) {
        st = put_slots(ck, ctx, prefix, "fwd", m->fwd, m->n_fwd);
        if (st == F8_OK) st = put_slots(ck, ctx, prefix, "bwd", m->bwd, m->n_bwd);
        if (st == F8_OK) st = put_recipe(ck, ctx, prefix);
    }
    return st;
}

/* ---- restore ------------------------------------------------------------ */

/* One tensor to write: host bytes in the destination's own format. */
typedef struct pending {
    void *dst;              /* backend memory */
    unsigned char *host;    /* owned */
    size_t bytes;
} pending;

typedef struct plan {
    pending item[16];
    int n;
    float *slot_host[2];    /* hist [L, n], scale [n], scale_inv [n] per direction, or NULL */
    float *quantize[2];     /* FP32 values for an FP8 primary weight (write through the cast) */
    uint8_t *codes[2];      /* FP8 codes for an FP8 primary weight stored in its own dtype */
    float code_sinv[2];
} plan;

static void plan_free(plan *p)
{
    for (int i = 0; i < p->n; i++) free(p->item[i].host);
    for (int i = 0; i < 2; i++) {
        free(p->slot_host[i]);
        free(p->quantize[i]);
        free(p->codes[i]);
    }
}

static f8_status find(const f8_checkpoint *ck, f8_ctx *ctx, const char *prefix, const char *field,
                      const f8i_ck_entry **e)
{
    char name[NAME_MAX_LEN];
    F8I_TRY(name_of(ctx, name, prefix, field));
    *e = f8i_checkpoint_find(ck, name);
    if (!*e) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "checkpoint: no tensor \"%s\"", name);
    return F8_OK;
}

static int64_t elements(const f8i_ck_entry *e)
{
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
    return n;
}

/* The value of element i of a stored FP32/BF16/FP8 entry as FP32 (FP8
 * dequantized with sinv). */
static float value_at(const f8i_ck_entry *e, int64_t i, float sinv)
{
    switch (e->dtype) {
    case F8I_CK_F32: {
        float v;
        memcpy(&v, e->data + 4 * i, 4);
        return v;
    }
    case F8I_CK_BF16: {
        uint16_t b;
        memcpy(&b, e->data + 2 * i, 2);
        return f8i_bf16_to_float(b);
    }
    case F8I_CK_F8_E4M3: return f8_fp8_to_float(e->data[i], F8_DTYPE_E4M3) * sinv;
    default: return f8_fp8_to_float(e->data[i], F8_DTYPE_E5M2) * sinv;
    }
}

static int is_fp8(f8i_ck_dtype d) { return d == F8I_CK_F8_E4M3 || d == F8I_CK_F8_E5M2; }

/* Check entry `field` is a real-valued tensor of `rows`x`cols` (ndim 2) or
 * `cols` elements (ndim 1); for FP8 entries also read its scale_inv. */
static f8_status check_values(const f8_checkpoint *ck, f8_ctx *ctx, const char *prefix, const char *field, int ndim,
                              int64_t rows, int64_t cols, const f8i_ck_entry **e, float *sinv)
{
    F8I_TRY(find(ck, ctx, prefix, field, e));
    const f8i_ck_entry *x = *e;
    if (x->dtype != F8I_CK_F32 && x->dtype != F8I_CK_BF16 && !is_fp8(x->dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "checkpoint: \"%s\" is not F32, BF16 or F8", x->name);
    F8I_TRY(f8i_checkpoint_check_finite(ck, "f8_checkpoint_restore_module", x->name, F8I_CK_FINITE));
    int ok = ndim == 2 ? (x->ndim == 2 && x->shape[0] == rows && x->shape[1] == cols)
                       : (elements(x) == cols && (x->ndim == 1 || (x->ndim == 2 && x->shape[0] == 1)));
    if (!ok)
        return f8i_error(ctx, F8_ERR_SHAPE, "checkpoint: \"%s\" has the wrong shape for this module (expected [%lld, %lld])",
                         x->name, (long long)(ndim == 2 ? rows : 1), (long long)cols);
    *sinv = 1.0f;
    if (is_fp8(x->dtype)) {
        char f2[96];
        const f8i_ck_entry *s = NULL;
        snprintf(f2, sizeof f2, "%s_scale_inv", field);
        F8I_TRY(find(ck, ctx, prefix, f2, &s));
        if (s->dtype != F8I_CK_F32 || elements(s) != 1)
            return f8i_error(ctx, F8_ERR_SHAPE, "checkpoint: \"%s\" must be one F32", s->name);
        F8I_TRY(f8i_checkpoint_check_finite(ck, "f8_checkpoint_restore_module", s->name, F8I_CK_POSITIVE));
        memcpy(sinv, s->data, 4);
    }
    return F8_OK;
}

/* Host image of n values of entry e in param dtype dt. */
static unsigned char *to_param(const f8i_ck_entry *e, float sinv, int64_t n, f8_dtype dt)
{
    unsigned char *h = (unsigned char *)malloc((size_t)n * f8_dtype_size(dt) + 1);
    if (!h) return NULL;
    for (int64_t i = 0; i < n; i++) {
        float v = value_at(e, i, sinv);
        if (dt == F8_DTYPE_BF16) {
            uint16_t b = f8i_bf16_from_float(v);
            memcpy(h + 2 * i, &b, 2);
        } else {
            memcpy(h + 4 * i, &v, 4);
        }
    }
    return h;
}

static f8_status add_item(plan *p, f8_ctx *ctx, void *dst, unsigned char *host, size_t bytes)
{
    if (!host) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "checkpoint restore: out of host memory");
    p->item[p->n].dst = dst;
    p->item[p->n].host = host;
    p->item[p->n].bytes = bytes;
    p->n++;
    return F8_OK;
}

/* Parse "format=X ..." of the recipe metadata; 1 if it names the ctx's format. */
static int recipe_format_matches(const char *value, f8_format f)
{
    const char *k = strstr(value, "format=");
    if (!k) return 0;
    k += 7;
    const char *want = format_name(f);
    size_t n = strlen(want);
    return strncmp(k, want, n) == 0 && (k[n] == ' ' || k[n] == '\0');
}

/* The recipe kind a metadata value names ("scaling=X"; none: delayed), or
 * -1 for a name this build does not know. */
static int recipe_kind_of(const char *value)
{
    const char *k = strstr(value, "scaling=");
    if (!k) return F8_RECIPE_DELAYED;
    k += 8;
    for (int i = F8_RECIPE_DELAYED; i <= F8_RECIPE_ROWWISE_GW_HP; i++) {
        const char *want = f8_recipe_kind_name((f8_recipe_kind)i);
        size_t n = strlen(want);
        if (strncmp(k, want, n) == 0 && (k[n] == ' ' || k[n] == '\0')) return i;
    }
    return -1;
}

/* The stored recipe ("<prefix>.fp8.recipe", if any) must be the ctx's format and kind. */
static f8_status check_recipe(const f8_checkpoint *ck, f8_ctx *ctx, const char *prefix)
{
    char name[NAME_MAX_LEN];
    f8_status st = name_of(ctx, name, prefix, "fp8.recipe");
    const char *recipe = st == F8_OK ? f8_checkpoint_metadata(ck, name) : NULL;
    if (st == F8_OK && recipe && !recipe_format_matches(recipe, ctx->recipe.format))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "checkpoint: \"%s\" = \"%s\" does not match this ctx's recipe format %s",
                         name, recipe, format_name(ctx->recipe.format));
    if (st == F8_OK && recipe && recipe_kind_of(recipe) != (int)ctx->recipe.kind)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT,
                         "checkpoint: \"%s\" = \"%s\" was written under another scaling recipe than this ctx's "
                         "(%s scaling); create the ctx with that recipe kind to restore it",
                         name, recipe, f8_recipe_kind_name(ctx->recipe.kind));
    return st;
}

/* n slots of direction dir ("fwd"/"bwd") from the checkpoint into a new host
 * image *out: hist [L, n], scale [n], scale_inv [n] (f8i_slots_io's), every
 * entry checked first (fn names the caller in the errors). */
static f8_status read_slots(const f8_checkpoint *ck, f8_ctx *ctx, const char *fn, const char *prefix, const char *dir,
                            int n, float **out)
{
    const int L = ctx->recipe.amax_history_len;
    const f8i_ck_entry *e[3];
    const char *parts[3] = {"amax_history", "scale", "scale_inv"};
    f8_status st = F8_OK;
    for (int i = 0; i < 3 && st == F8_OK; i++) {
        char field[64];
        snprintf(field, sizeof field, "fp8.%s.%s", dir, parts[i]);
        st = find(ck, ctx, prefix, field, &e[i]);
        if (st != F8_OK) break;
        int ok = e[i]->dtype == F8I_CK_F32 &&
                 (i ? (e[i]->ndim == 1 && e[i]->shape[0] == n)
                    : (e[i]->ndim == 2 && e[i]->shape[1] == n && e[i]->shape[0] >= 1));
        if (!ok)
            st = f8i_error(ctx, F8_ERR_SHAPE, "checkpoint: \"%s\" is not F32 %s with %d slots", e[i]->name,
                           i ? "[n]" : "[L, n]", n);
        if (st == F8_OK) /* amaxes >= 0; scales and scale_invs > 0 */
            st = f8i_checkpoint_check_finite(ck, fn, e[i]->name, i ? F8I_CK_POSITIVE : F8I_CK_NONNEGATIVE);
    }
    if (st != F8_OK) return st;
    float *h = (float *)calloc(((size_t)L + 2) * (size_t)n + 1, sizeof(float));
    if (!h) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "checkpoint restore: out of host memory");
    /* TE's history-length rule: cut or zero-pad rows at the end */
    const int64_t Ls = e[0]->shape[0], rows = Ls < L ? Ls : L;
    memcpy(h, e[0]->data, (size_t)(rows * n) * sizeof(float));
    memcpy(h + (size_t)L * n, e[1]->data, (size_t)n * sizeof(float));
    memcpy(h + (size_t)L * n + n, e[2]->data, (size_t)n * sizeof(float));
    *out = h;
    return F8_OK;
}

static f8_status plan_slots(const f8_checkpoint *ck, f8_ctx *ctx, const char *prefix, const f8_module *m, plan *p)
{
    const int L = ctx->recipe.amax_history_len;
    const char *dirs[2] = {"fwd", "bwd"};
    const int counts[2] = {m->n_fwd, m->n_bwd};
    char name[NAME_MAX_LEN];
    f8_status st = F8_OK;
    int present = 0;
    for (int d = 0; d < 2; d++) {
        char field[64];
        snprintf(field, sizeof field, "fp8.%s.amax_history", dirs[d]);
        F8I_TRY(name_of(ctx, name, prefix, field));
        present += f8i_checkpoint_find(ck, name) != NULL;
    }
    if (!present) {
        /* no FP8 state: the slots start fresh */
        for (int d = 0; d < 2; d++) {
            int n = counts[d];
            p->slot_host[d] = (float *)calloc(((size_t)L + 2) * (size_t)n + 1, sizeof(float));
            if (!p->slot_host[d]) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "checkpoint restore: out of host memory");
            for (int j = 0; j < 2 * n; j++) p->slot_host[d][(size_t)L * n + j] = 1.0f;
        }
        return F8_OK;
    }
    st = check_recipe(ck, ctx, prefix);
    for (int d = 0; d < 2 && st == F8_OK; d++)
        st = read_slots(ck, ctx, "f8_checkpoint_restore_module", prefix, dirs[d], counts[d], &p->slot_host[d]);
    return st;
}

static f8_status restore_module(const f8_checkpoint *ck, const char *prefix, f8_module *m)
{
    f8_ctx *ctx = m->ctx;
    if (!ck || !prefix) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "checkpoint restore: checkpoint or prefix is NULL");
    if (f8i_checkpoint_ctx(ck) != ctx)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "checkpoint restore: the checkpoint belongs to another ctx");
    plan p;
    memset(&p, 0, sizeof p);
    f8_status st = F8_OK;
    for (int i = 0; i < m->n_weights && st == F8_OK; i++) {
        const f8i_weight *w = &m->w[i];
        const f8i_ck_entry *e = NULL;
        float sinv = 1.0f;
        const int64_t n = w->rows * w->cols;
        st = check_values(ck, ctx, prefix, m->weight_names[i], 2, w->rows, w->cols, &e, &sinv);
        if (st != F8_OK) break;
        if (w->fp8_primary && e->dtype == ck_dtype(w->w8->dtype)) {
            p.codes[i] = (uint8_t *)malloc((size_t)n + 1);
            if (!p.codes[i]) st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "checkpoint restore: out of host memory");
            else memcpy(p.codes[i], e->data, (size_t)n);
            p.code_sinv[i] = sinv;
        } else if (w->fp8_primary) {
            p.quantize[i] = (float *)to_param(e, sinv, n, F8_DTYPE_FP32);
            if (!p.quantize[i]) st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "checkpoint restore: out of host memory");
        } else {
            st = add_item(&p, ctx, w->w, to_param(e, sinv, n, w->dtype), (size_t)n * f8_dtype_size(w->dtype));
        }
        char name[NAME_MAX_LEN];
        if (st == F8_OK) st = name_of(ctx, name, prefix, m->bias_names[i]);
        if (st == F8_OK && !w->b && f8i_checkpoint_find(ck, name))
            st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "checkpoint: \"%s\" is stored but this module has no bias", name);
        if (st == F8_OK && w->b) {
            st = check_values(ck, ctx, prefix, m->bias_names[i], 1, 1, w->rows, &e, &sinv);
            if (st == F8_OK)
                st = add_item(&p, ctx, w->b, to_param(e, sinv, w->rows, w->dtype), (size_t)w->rows * f8_dtype_size(w->dtype));
        }
    }
    if (m->has_norm && st == F8_OK) {
        const f8i_norm *nm = &m->norm;
        const f8i_ck_entry *e = NULL;
        float sinv = 1.0f;
        const size_t bytes = (size_t)nm->cols * f8_dtype_size(nm->dtype);
        st = check_values(ck, ctx, prefix, "layer_norm_weight", 1, 1, nm->cols, &e, &sinv);
        if (st == F8_OK) st = add_item(&p, ctx, nm->gamma, to_param(e, sinv, nm->cols, nm->dtype), bytes);
        char name[NAME_MAX_LEN];
        if (st == F8_OK) st = name_of(ctx, name, prefix, "layer_norm_bias");
        if (st == F8_OK && !nm->beta && f8i_checkpoint_find(ck, name))
            st = f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "checkpoint: \"%s\" is stored but this module is an RMSNorm", name);
        if (st == F8_OK && nm->beta) {
            st = check_values(ck, ctx, prefix, "layer_norm_bias", 1, 1, nm->cols, &e, &sinv);
            if (st == F8_OK) st = add_item(&p, ctx, nm->beta, to_param(e, sinv, nm->cols, nm->dtype), bytes);
        }
    }
    if (st == F8_OK) st = plan_slots(ck, ctx, prefix, m, &p);

    /* Everything is checked and converted: write. */
    const int L = ctx->recipe.amax_history_len;
    for (int d = 0; d < 2 && st == F8_OK; d++) {
        const int n = d ? m->n_bwd : m->n_fwd;
        float *h = p.slot_host[d];
        st = f8i_slots_io(ctx, d ? m->bwd : m->fwd, n, h, h + (size_t)L * n, h + (size_t)L * n + n, 1);
    }
    for (int i = 0; i < p.n && st == F8_OK; i++) st = ctx->be->upload(ctx, p.item[i].dst, p.item[i].host, p.item[i].bytes);
    for (int i = 0; i < m->n_weights && st == F8_OK; i++) {
        f8i_weight *w = &m->w[i];
        if (p.codes[i]) st = f8_qtensor_upload(w->w8, p.codes[i], p.code_sinv[i]);
        if (p.quantize[i]) {
            void *tmp = NULL;
            const size_t bytes = (size_t)(w->rows * w->cols) * sizeof(float);
            st = f8i_alloc(ctx, F8_MEM_OTHER, NULL, bytes ? bytes : 1, &tmp);
            if (st == F8_OK) st = ctx->be->upload(ctx, tmp, p.quantize[i], bytes);
            f8_tensor src = f8_tensor_make(tmp, F8_DTYPE_FP32, w->rows, w->cols);
            if (st == F8_OK) st = f8i_weight_write(ctx, w, &src, "checkpoint restore");
            if (st == F8_OK) st = ctx->be->synchronize(ctx);
            f8i_free(ctx, tmp);
        }
        if (!w->fp8_primary) w->w8_filled = 0;
    }
    plan_free(&p);
    return st;
}

/* ---- public entry points ------------------------------------------------ */

/* None of the n names prefix.fields[i] is in the checkpoint yet (fn adds
 * the object `what`). */
static f8_status names_free(const f8_checkpoint *ck, f8_ctx *ctx, const char *fn, const char *what, const char *prefix,
                            const char *const *fields, int n)
{
    char name[NAME_MAX_LEN];
    for (int i = 0; i < n; i++) {
        F8I_TRY(name_of(ctx, name, prefix, fields[i]));
        if (f8i_checkpoint_find(ck, name))
            return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"%s\" is already in the checkpoint (nothing of the %s "
                                                           "was added)", fn, name, what);
    }
    return F8_OK;
}

/* The names add_module would write, checked before anything is added so a
 * collision leaves the checkpoint unchanged. */
static f8_status check_free(const f8_checkpoint *ck, const char *prefix, const f8_module *m)
{
    const char *fields[16];
    char extra[2][64];
    int n = 0;
    for (int i = 0; i < m->n_weights; i++) {
        fields[n++] = m->weight_names[i];
        if (m->w[i].fp8_primary) {
            snprintf(extra[i], sizeof extra[i], "%s_scale_inv", m->weight_names[i]);
            fields[n++] = extra[i];
        }
        if (m->w[i].b) fields[n++] = m->bias_names[i];
    }
    if (m->has_norm) fields[n++] = "layer_norm_weight";
    if (m->has_norm && m->norm.beta) fields[n++] = "layer_norm_bias";
    if (m->fp8) {
        static const char *const slots[] = {"fp8.fwd.amax_history", "fp8.fwd.scale", "fp8.fwd.scale_inv",
                                            "fp8.bwd.amax_history", "fp8.bwd.scale", "fp8.bwd.scale_inv"};
        for (int i = 0; i < 6; i++) fields[n++] = slots[i];
    }
    return names_free(ck, m->ctx, "f8_checkpoint_add_module", m->cls->name, prefix, fields, n);
}

/* A NULL object: the checkpoint's ctx (when there is one) says so. */
static f8_status null_object(const f8_checkpoint *ck, const char *fn, const char *what)
{
    f8_ctx *ctx = ck ? f8i_checkpoint_ctx(ck) : NULL;
    return ctx ? f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what) : F8_ERR_INVALID_ARGUMENT;
}

f8_status f8_checkpoint_add_module(f8_checkpoint *ck, const char *prefix, f8_module *m)
{
    if (!m) return null_object(ck, "f8_checkpoint_add_module", "module");
    if (!ck || !prefix)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_module: checkpoint or prefix is NULL");
    if (f8i_checkpoint_ctx(ck) != m->ctx)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_module: the checkpoint belongs to another "
                                                          "ctx");
    F8I_TRY(check_free(ck, prefix, m));
    /* Into a scratch checkpoint first, held to restore_module's value rules
     * (parameters finite, amaxes >= 0, scales > 0), then moved: a module
     * restore would refuse adds nothing (each tensor is downloaded once;
     * the move is a host copy). */
    f8_checkpoint *tmp = NULL;
    f8_status st = f8_checkpoint_create(m->ctx, &tmp);
    if (st == F8_OK) st = add_module(tmp, prefix, m);
    const size_t n = tmp ? f8i_checkpoint_count(tmp) : 0;
    for (size_t i = 0; i < n && st == F8_OK; i++) {
        const char *name = f8i_checkpoint_entry(tmp, i)->name;
        const size_t len = strlen(name);
        const int amax = len >= 13 && !strcmp(name + len - 13, ".amax_history");
        const int scale = (len >= 6 && !strcmp(name + len - 6, ".scale")) || (len >= 9 && !strcmp(name + len - 9, "scale_inv"));
        st = f8i_checkpoint_check_finite(tmp, "f8_checkpoint_add_module (a restore would refuse it; nothing was added)",
                                         name, amax ? F8I_CK_NONNEGATIVE : scale ? F8I_CK_POSITIVE : F8I_CK_FINITE);
    }
    for (size_t i = 0; i < n && st == F8_OK; i++) {
        const f8i_ck_entry *e = f8i_checkpoint_entry(tmp, i);
        st = f8i_checkpoint_put(ck, e->name, e->dtype, e->ndim, e->shape, e->data, e->bytes);
    }
    char key[NAME_MAX_LEN]; /* the one metadata add_module writes: "<prefix>.fp8.recipe" */
    if (st == F8_OK) st = name_of(m->ctx, key, prefix, "fp8.recipe");
    const char *recipe = st == F8_OK ? f8_checkpoint_metadata(tmp, key) : NULL;
    if (recipe) st = f8_checkpoint_set_metadata(ck, key, recipe);
    f8_checkpoint_destroy(tmp);
    return st;
}

f8_status f8_checkpoint_restore_module(const f8_checkpoint *ck, const char *prefix, f8_module *m)
{
    if (!m) return null_object(ck, "f8_checkpoint_restore_module", "module");
    return restore_module(ck, prefix, m);
}

/* ---- an attention's FP8 slots ------------------------------------------- */

/* Its three forward slots are stored as a module's forward slots are, so
 * whatever reads a module's by name (the trainer's value rules, the
 * history-length rule) reads them alike. */
static const char *const ATT_FIELDS[3] = {"fp8.fwd.amax_history", "fp8.fwd.scale", "fp8.fwd.scale_inv"};
/* With fp8_backward, its three backward slots as a module's backward slots. */
static const char *const ATT_BWD_FIELDS[3] = {"fp8.bwd.amax_history", "fp8.bwd.scale", "fp8.bwd.scale_inv"};

/* The checks both entry points share: arguments, and the checkpoint's ctx. */
static f8_status att_args(const f8_checkpoint *ck, const char *prefix, f8_ctx *ctx, const char *fn)
{
    if (!ck || !prefix) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: checkpoint or prefix is NULL", fn);
    if (f8i_checkpoint_ctx(ck) != ctx)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: the checkpoint belongs to another ctx", fn);
    return F8_OK;
}

f8_status f8_checkpoint_add_attention(f8_checkpoint *ck, const char *prefix, const f8_attention *a)
{
    if (!a) return null_object(ck, "f8_checkpoint_add_attention", "attention");
    f8_ctx *ctx = f8i_attention_ctx(a);
    const char *fn = "f8_checkpoint_add_attention";
    f8_status st = att_args(ck, prefix, ctx, fn);
    if (st != F8_OK || !f8i_attention_config(a)->fp8) return st; /* BF16: no state to store */
    f8_slot slots[3], bslots[3];
    const int bwd = f8i_attention_config(a)->fp8_backward;
    st = names_free(ck, ctx, fn, "attention", prefix, ATT_FIELDS, 3);
    if (st == F8_OK && bwd) st = names_free(ck, ctx, fn, "attention", prefix, ATT_BWD_FIELDS, 3);
    if (st == F8_OK) st = f8_attention_fp8_slots(a, slots);
    if (st == F8_OK && bwd) st = f8_attention_fp8_backward_slots(a, bslots);
    if (st == F8_OK) st = slots_storable(ctx, fn, prefix, "fwd", slots, 3);
    if (st == F8_OK && bwd) st = slots_storable(ctx, fn, prefix, "bwd", bslots, 3);
    if (st == F8_OK) st = put_slots(ck, ctx, prefix, "fwd", slots, 3);
    if (st == F8_OK && bwd) st = put_slots(ck, ctx, prefix, "bwd", bslots, 3);
    return st == F8_OK ? put_recipe(ck, ctx, prefix) : st;
}

f8_status f8_checkpoint_restore_attention(const f8_checkpoint *ck, const char *prefix, f8_attention *a)
{
    if (!a) return null_object(ck, "f8_checkpoint_restore_attention", "attention");
    f8_ctx *ctx = f8i_attention_ctx(a);
    const char *fn = "f8_checkpoint_restore_attention";
    char name[NAME_MAX_LEN];
    F8I_TRY(att_args(ck, prefix, ctx, fn));
    F8I_TRY(name_of(ctx, name, prefix, ATT_FIELDS[0]));
    const int stored = f8i_checkpoint_find(ck, name) != NULL, fp8 = f8i_attention_config(a)->fp8;
    /* a mismatch either way would lose state or invent it: refused */
    if (stored && !fp8)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: \"%s\" holds FP8 attention state but this attention was "
                                                       "created with fp8 = 0 (create it with fp8 = 1)", fn, name);
    if (!stored && fp8)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: no tensor \"%s\": the checkpoint holds no FP8 state for "
                                                       "this fp8 = 1 attention (a BF16 attention's checkpoint?)", fn, name);
    if (!fp8) return F8_OK;
    /* the backward slots (fp8_backward) follow the same rule */
    const int bwd = f8i_attention_config(a)->fp8_backward;
    F8I_TRY(name_of(ctx, name, prefix, ATT_BWD_FIELDS[0]));
    const int bwd_stored = f8i_checkpoint_find(ck, name) != NULL;
    if (bwd_stored != bwd)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %s \"%s\" but this attention was created with fp8_backward = %d "
                                                       "(create it as the checkpoint's was)", fn,
                         bwd_stored ? "the checkpoint holds" : "no tensor", name, bwd);
    f8_slot slots[3], bslots[3];
    float *h = NULL, *hb = NULL;
    const int L = ctx->recipe.amax_history_len;
    f8_status st = f8_attention_fp8_slots(a, slots);
    if (st == F8_OK && bwd) st = f8_attention_fp8_backward_slots(a, bslots);
    if (st == F8_OK) st = check_recipe(ck, ctx, prefix);
    if (st == F8_OK) st = read_slots(ck, ctx, fn, prefix, "fwd", 3, &h);
    if (st == F8_OK && bwd) st = read_slots(ck, ctx, fn, prefix, "bwd", 3, &hb);
    /* every entry read and checked before anything is written */
    if (st == F8_OK) st = f8i_slots_io(ctx, slots, 3, h, h + (size_t)L * 3, h + (size_t)L * 3 + 3, 1);
    if (st == F8_OK && bwd) st = f8i_slots_io(ctx, bslots, 3, hb, hb + (size_t)L * 3, hb + (size_t)L * 3 + 3, 1);
    free(h), free(hb);
    return st;
}
