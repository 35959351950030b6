/*
 * scaling.c — the ctx's scaling slots: registration, host read/write and the
 * fused per-direction update.
 *
 * Design note: all slots of a ctx live in ONE buffer of backend memory, laid
 * out per direction as history [L, cap] (row 0 = the current step's
 * accumulators, contiguous, so a later multi-GPU all-reduce is one call per
 * direction), scale [cap], scale_inv [cap]. Slots are named by (direction,
 * column), never by pointer, because registering more slots may move the
 * buffer; kernels get pointers resolved at call time. Growth happens only when
 * objects are created, by a host round trip (download, re-lay, upload).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/f8i.h"
#include "core/ops.h"

static size_t dir_floats(int history_len, int cap) { return (size_t)cap * ((size_t)history_len + 2); }

f8_dtype f8_ctx_slot_dtype(const f8_ctx *ctx, f8_direction direction)
{
    if (direction == F8_DIR_BACKWARD && ctx && ctx->recipe.format == F8_FORMAT_HYBRID) return F8_DTYPE_E5M2;
    return F8_DTYPE_E4M3;
}

/* Point a direction's arrays into buf at `offset` floats. */
static void place_dir(f8i_scaling_dir *d, float *buf, size_t offset, int history_len)
{
    d->history = buf + offset;
    d->scale = d->history + (size_t)history_len * d->cap;
    d->scale_inv = d->scale + d->cap;
}

/* Host image of the whole buffer with capacities new_cap[2]: old contents
 * copied column by column, new columns initialised (scale 1, history 0). */
static f8_status regrow(f8_ctx *ctx, const int new_cap[2])
{
    const int L = ctx->recipe.amax_history_len;
    size_t old_total = dir_floats(L, ctx->dir[0].cap) + dir_floats(L, ctx->dir[1].cap);
    size_t new_total = dir_floats(L, new_cap[0]) + dir_floats(L, new_cap[1]);
    float *old_h = NULL, *new_h = (float *)calloc(new_total, sizeof(float));
    if (!new_h) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "scaling buffer: out of host memory (%zu floats)", new_total);
    f8_status st = F8_OK;
    if (old_total) {
        old_h = (float *)malloc(old_total * sizeof(float));
        if (!old_h) st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "scaling buffer: out of host memory");
        if (st == F8_OK) st = ctx->be->download(ctx, old_h, ctx->scaling_buf, old_total * sizeof(float));
    }
    size_t old_off = 0, new_off = 0;
    for (int d = 0; d < 2 && st == F8_OK; d++) {
        int oc = ctx->dir[d].cap, nc = new_cap[d];
        float *oh = old_h ? old_h + old_off : NULL, *nh = new_h + new_off;
        const int keep = oc < nc ? oc : nc; /* a rollback shrinks */
        for (int r = 0; r < L; r++)
            if (keep) memcpy(nh + (size_t)r * nc, oh + (size_t)r * oc, (size_t)keep * sizeof(float));
        for (int c = 0; c < nc; c++) {
            nh[(size_t)L * nc + c] = c < oc ? oh[(size_t)L * oc + c] : 1.0f;
            nh[(size_t)L * nc + nc + c] = c < oc ? oh[(size_t)L * oc + oc + c] : 1.0f;
        }
        old_off += dir_floats(L, oc);
        new_off += dir_floats(L, nc);
    }
    float *buf = NULL;
    if (st == F8_OK) st = f8i_alloc(ctx, F8_MEM_SCALING_STATE, NULL, new_total * sizeof(float), (void **)&buf);
    if (st == F8_OK) st = ctx->be->upload(ctx, buf, new_h, new_total * sizeof(float));
    if (st == F8_OK) {
        f8i_free(ctx, ctx->scaling_buf);
        ctx->scaling_buf = buf;
        ctx->dir[0].cap = new_cap[0];
        ctx->dir[1].cap = new_cap[1];
        place_dir(&ctx->dir[0], buf, 0, L);
        place_dir(&ctx->dir[1], buf, dir_floats(L, new_cap[0]), L);
    } else if (buf) {
        f8i_free(ctx, buf);
    }
    free(old_h);
    free(new_h);
    return st;
}

f8_status f8_ctx_slots_create(f8_ctx *ctx, f8_direction direction, int count, f8_slot *slots)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (direction != F8_DIR_FORWARD && direction != F8_DIR_BACKWARD)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create: direction %d is not FORWARD or BACKWARD",
                         (int)direction);
    if (count < 1 || count > (1 << 20))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create: count %d outside [1, 2^20]", count);
    if (!slots) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create: slots (the output) is NULL");
    f8i_scaling_dir *d = &ctx->dir[direction];
    if (d->count + count > d->cap) {
        int caps[2] = {ctx->dir[0].cap, ctx->dir[1].cap};
        int want = d->cap ? d->cap * 2 : 16;
        while (want < d->count + count) want *= 2;
        caps[direction] = want;
        F8I_TRY(regrow(ctx, caps));
    }
    for (int i = 0; i < count; i++) {
        slots[i].direction = (int32_t)direction;
        slots[i].index = d->count + i;
    }
    d->count += count;
    return F8_OK;
}

f8i_slot_mark f8i_slots_mark(const f8_ctx *ctx)
{
    f8i_slot_mark m = {{ctx->dir[0].count, ctx->dir[1].count}, {ctx->dir[0].cap, ctx->dir[1].cap}};
    return m;
}

void f8i_slots_rollback(f8_ctx *ctx, f8i_slot_mark mark)
{
    ctx->dir[0].count = mark.count[0];
    ctx->dir[1].count = mark.count[1];
    /* Give back growth too, so a failed create leaves the memory report as it
     * was. The shrink only copies what stays; should even that fail, the
     * larger buffer is kept (still consistent, just not smaller). */
    if (mark.cap[0] == 0 && mark.cap[1] == 0 && ctx->scaling_buf) {
        f8i_free(ctx, ctx->scaling_buf);
        ctx->scaling_buf = NULL;
        memset(ctx->dir, 0, sizeof ctx->dir);
    } else if (ctx->dir[0].cap != mark.cap[0] || ctx->dir[1].cap != mark.cap[1]) {
        (void)regrow(ctx, mark.cap);
    }
}

int f8i_slot_valid(const f8_ctx *ctx, f8_slot slot)
{
    if (slot.direction != F8_DIR_FORWARD && slot.direction != F8_DIR_BACKWARD) return 0;
    return slot.index >= 0 && slot.index < ctx->dir[slot.direction].count;
}

float *f8i_slot_amax(f8_ctx *ctx, f8_slot slot) { return ctx->dir[slot.direction].history + slot.index; }

float *f8i_slot_scale(f8_ctx *ctx, f8_slot slot) { return ctx->dir[slot.direction].scale + slot.index; }

float f8i_scaled_max(const f8_ctx *ctx, f8_dtype out_dtype)
{
    return ldexpf(f8_fp8_max(out_dtype), -ctx->recipe.margin);
}

f8_status f8i_slot_prepare(f8_ctx *ctx, f8_slot slot, f8_dtype out_dtype, const void *src, f8_dtype src_dtype,
                           int64_t count, const float *noop, int record, float **cast_amax)
{
    float *acc = f8i_slot_amax(ctx, slot);
    *cast_amax = record ? acc : NULL;
    if (!f8i_recipe_current(ctx)) return F8_OK;
    *cast_amax = NULL;
    f8i_amax_scale_args a;
    memset(&a, 0, sizeof a);
    a.src = src;
    a.src_dtype = src_dtype;
    a.count = count;
    a.scaled_max = f8i_scaled_max(ctx, out_dtype);
    a.pow2 = ctx->recipe.power_2_scales;
    a.scale = f8i_slot_scale(ctx, slot);
    a.scale_inv = ctx->dir[slot.direction].scale_inv + slot.index;
    a.amax = record ? acc : NULL;
    a.noop = noop;
    return f8i_op_amax_scale(ctx, &a);
}

static f8_status slot_check(f8_ctx *ctx, f8_slot slot, const char *fn)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!f8i_slot_valid(ctx, slot))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: slot (direction %d, index %d) is not registered on this ctx",
                         fn, (int)slot.direction, (int)slot.index);
    return F8_OK;
}

/* The slot's column as a host array: history[L], scale, scale_inv. Downloads
 * the direction's block (a test and checkpoint path, not a step path). */
static f8_status column_io(f8_ctx *ctx, f8_slot slot, float *col, int write)
{
    const int L = ctx->recipe.amax_history_len;
    f8i_scaling_dir *d = &ctx->dir[slot.direction];
    size_t n = dir_floats(L, d->cap);
    float *h = (float *)malloc(n * sizeof(float));
    if (!h) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "slot access: out of host memory");
    f8_status st = ctx->be->download(ctx, h, d->history, n * sizeof(float));
    for (int r = 0; r < L + 2 && st == F8_OK; r++) {
        float *cell = h + (size_t)r * d->cap + slot.index;
        if (write) *cell = col[r];
        else col[r] = *cell;
    }
    if (st == F8_OK && write) st = ctx->be->upload(ctx, d->history, h, n * sizeof(float));
    free(h);
    return st;
}

f8_status f8i_slots_io(f8_ctx *ctx, const f8_slot *slots, int n, float *hist, float *scale, float *scale_inv, int write)
{
    if (n == 0) return F8_OK;
    const int L = ctx->recipe.amax_history_len;
    f8i_scaling_dir *d = &ctx->dir[slots[0].direction];
    size_t total = dir_floats(L, d->cap);
    float *h = (float *)malloc(total * sizeof(float));
    if (!h) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "slot access: out of host memory");
    f8_status st = ctx->be->download(ctx, h, d->history, total * sizeof(float));
    for (int j = 0; j < n && st == F8_OK; j++) {
        const int c = slots[j].index;
        for (int r = 0; r < L; r++) {
            float *cell = h + (size_t)r * d->cap + c;
            if (write) *cell = hist[(size_t)r * n + j];
            else hist[(size_t)r * n + j] = *cell;
        }
        float *sc = h + (size_t)L * d->cap + c, *si = sc + d->cap;
        if (write) {
            *sc = scale[j];
            *si = scale_inv[j];
        } else {
            scale[j] = *sc;
            scale_inv[j] = *si;
        }
    }
    if (st == F8_OK && write) st = ctx->be->upload(ctx, d->history, h, total * sizeof(float));
    free(h);
    return st;
}

f8_status f8_slot_read(f8_ctx *ctx, f8_slot slot, float *scale, float *scale_inv, float *amax_history)
{
    F8I_TRY(slot_check(ctx, slot, "f8_slot_read"));
    const int L = ctx->recipe.amax_history_len;
    float *col = (float *)malloc(((size_t)L + 2) * sizeof(float));
    if (!col) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_slot_read: out of host memory");
    f8_status st = column_io(ctx, slot, col, 0);
    if (st == F8_OK) {
        if (amax_history) memcpy(amax_history, col, (size_t)L * sizeof(float));
        if (scale) *scale = col[L];
        if (scale_inv) *scale_inv = col[L + 1];
    }
    free(col);
    return st;
}

f8_status f8_slot_write(f8_ctx *ctx, f8_slot slot, float scale, float scale_inv, const float *amax_history)
{
    F8I_TRY(slot_check(ctx, slot, "f8_slot_write"));
    const int L = ctx->recipe.amax_history_len;
    float *col = (float *)malloc(((size_t)L + 2) * sizeof(float));
    if (!col) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_slot_write: out of host memory");
    f8_status st = column_io(ctx, slot, col, 0);
    if (st == F8_OK) {
        if (amax_history) memcpy(col, amax_history, (size_t)L * sizeof(float));
        col[L] = scale;
        col[L + 1] = scale_inv;
        st = column_io(ctx, slot, col, 1);
    }
    free(col);
    return st;
}

/* The fused update of every slot of a direction (callers narrow it). */
static f8i_scale_update_args update_args(f8_ctx *ctx, f8_direction direction)
{
    f8i_scaling_dir *d = &ctx->dir[direction];
    f8i_scale_update_args a;
    a.history = d->history;
    a.ld = d->cap;
    a.history_len = ctx->recipe.amax_history_len;
    a.count = d->count;
    a.scale = d->scale;
    a.scale_inv = d->scale_inv;
    a.scaled_max = f8i_scaled_max(ctx, f8_ctx_slot_dtype(ctx, direction));
    a.algo = ctx->recipe.amax_compute_algo;
    a.cols = NULL;
    return a;
}

f8_status f8_ctx_update_scales(f8_ctx *ctx, f8_direction direction)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (direction != F8_DIR_FORWARD && direction != F8_DIR_BACKWARD)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_ctx_update_scales: direction %d is not FORWARD or BACKWARD",
                         (int)direction);
    if (ctx->dir[direction].count == 0) return F8_OK;
    if (ctx->comm) { /* every rank's amaxes: history row 0 is contiguous across the direction's slots */
        float *row0 = ctx->dir[direction].history;
        F8I_TRY(f8_comm_all_reduce(ctx->comm, row0, row0, ctx->dir[direction].count, F8_DTYPE_FP32, F8_REDUCE_MAX));
    }
    f8i_scale_update_args a = update_args(ctx, direction);
    if (ctx->telemetry) { /* the step's counters, amaxes and scales, before the update moves them */
        const f8i_scaling_dir *d = &ctx->dir[direction];
        f8i_telemetry_snap_args t = {d->history, d->scale, f8i_tel_live(ctx, direction),
                                     f8i_tel_snap_f(ctx, direction), f8i_tel_snap_c(ctx, direction),
                                     d->count < F8_TELEMETRY_MAX_SLOTS ? d->count : F8_TELEMETRY_MAX_SLOTS};
        F8I_TRY(f8i_op_telemetry_snap(ctx, &t));
    }
    return f8i_op_scale_update(ctx, &a);
}

f8_status f8_ctx_enable_telemetry(f8_ctx *ctx)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    /* the manual's rule holds whether or not it is on already: after slots exist, F8_ERR_STATE */
    if (ctx->dir[0].count || ctx->dir[1].count)
        return f8i_error(ctx, F8_ERR_STATE, "f8_ctx_enable_telemetry: the ctx already has scaling slots (modules); "
                                            "turn telemetry on before creating any");
    if (ctx->telemetry) return F8_OK;
    void *block = NULL;
    f8_status st = f8i_alloc(ctx, F8_MEM_SCALING_STATE, NULL, F8I_TEL_BYTES, &block);
    if (st == F8_OK) st = f8i_op_memset_zero(ctx, block, F8I_TEL_BYTES);
    if (st == F8_OK) st = ctx->be->synchronize(ctx);
    if (st != F8_OK) {
        f8i_free(ctx, block);
        return st;
    }
    ctx->tel_block = block;
    ctx->telemetry = 1;
    return F8_OK;
}

int f8_ctx_telemetry_enabled(const f8_ctx *ctx) { return ctx ? ctx->telemetry : 0; }

int f8_ctx_slot_count(const f8_ctx *ctx, f8_direction direction)
{
    if (!ctx || (direction != F8_DIR_FORWARD && direction != F8_DIR_BACKWARD)) return 0;
    return ctx->dir[direction].count;
}

f8_status f8_ctx_telemetry_read(f8_ctx *ctx, f8_direction direction, int first, int count, f8_fp8_stats *stats)
{
    static const char fn[] = "f8_ctx_telemetry_read";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!ctx->telemetry) return f8i_error(ctx, F8_ERR_STATE, "%s: telemetry is off (f8_ctx_enable_telemetry)", fn);
    if (direction != F8_DIR_FORWARD && direction != F8_DIR_BACKWARD)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: direction %d is not FORWARD or BACKWARD", fn,
                         (int)direction);
    const int have = ctx->dir[direction].count;
    if (first < 0 || count < 0 || first > have - count || first + count > F8_TELEMETRY_MAX_SLOTS)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT,
                         "%s: slots [%d, %d + %d) outside the %d registered (at most %d are counted)", fn, first, first,
                         count, have, F8_TELEMETRY_MAX_SLOTS);
    if (count == 0) return F8_OK;
    if (!stats) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: stats (the output) is NULL", fn);
    uint64_t *c = (uint64_t *)malloc((size_t)count * 3 * sizeof *c);
    float *f = (float *)malloc((size_t)count * 2 * sizeof *f);
    f8_status st = c && f ? F8_OK : f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    if (st == F8_OK)
        st = ctx->be->download(ctx, c, f8i_tel_snap_c(ctx, direction) + (size_t)first * 3, (size_t)count * 3 * sizeof *c);
    if (st == F8_OK)
        st = ctx->be->download(ctx, f, f8i_tel_snap_f(ctx, direction) + (size_t)first * 2, (size_t)count * 2 * sizeof *f);
    for (int j = 0; j < count && st == F8_OK; j++) {
        stats[j].amax = f[2 * j];
        stats[j].scale = f[2 * j + 1];
        stats[j].count = c[3 * j];
        stats[j].saturated = c[3 * j + 1];
        stats[j].flushed = c[3 * j + 2];
    }
    free(c);
    free(f);
    return st;
}

f8_status f8i_register_fp8_weight_slots(f8_ctx *ctx, const f8_slot *slots, int n)
{
    int total = ctx->n_fp8_weight_slots + n;
    int32_t *host = (int32_t *)realloc(ctx->fp8_weight_cols, (size_t)total * sizeof *host);
    if (!host) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "FP8 weight slots: out of host memory");
    ctx->fp8_weight_cols = host;
    for (int i = 0; i < n; i++) host[ctx->n_fp8_weight_slots + i] = slots[i].index;
    /* The device copy is rebuilt at each registration (creation time only). */
    void *dev = NULL;
    f8_status st = f8i_alloc(ctx, F8_MEM_SCALING_STATE, NULL, (size_t)total * sizeof *host, &dev);
    if (st == F8_OK) st = ctx->be->upload(ctx, dev, host, (size_t)total * sizeof *host);
    if (st != F8_OK) {
        f8i_free(ctx, dev);
        return st;
    }
    f8i_free(ctx, ctx->fp8_weight_cols_dev);
    ctx->fp8_weight_cols_dev = (int32_t *)dev;
    ctx->n_fp8_weight_slots = total;
    return F8_OK;
}

f8_status f8_ctx_update_weight_scales(f8_ctx *ctx)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (ctx->n_fp8_weight_slots == 0) return F8_OK;
    if (ctx->comm) {
        /* TE reduces these too (§2.4): a data-parallel rank that cast only its
         * shard of a weight holds that shard's amax, and the MAX over the ranks
         * is the weight's, so every rank gets the same scale. All of row 0 goes
         * (it is contiguous): the other forward slots hold 0 there after the
         * step's update, or values their own update reduces again (MAX twice
         * is MAX once). */
        float *row0 = ctx->dir[F8_DIR_FORWARD].history;
        F8I_TRY(f8_comm_all_reduce(ctx->comm, row0, row0, ctx->dir[F8_DIR_FORWARD].count, F8_DTYPE_FP32,
                                          F8_REDUCE_MAX));
    }
    f8i_scale_update_args a = update_args(ctx, F8_DIR_FORWARD);
    a.count = ctx->n_fp8_weight_slots;
    a.cols = ctx->fp8_weight_cols_dev;
    return f8i_op_scale_update(ctx, &a);
}
