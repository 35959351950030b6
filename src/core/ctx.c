/*
 * ctx.c — the context: backend choice, errors, backend memory, the noop flag
 * and the ctx-wide scratch.
 *
 * Design note: everything a step touches is either owned by an object made
 * at creation time or carved from ctx->scratch, which only grows while objects
 * are created (f8i_scratch_reserve). The step path therefore never allocates.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/f8i.h"
#include "core/numerics.h"
#include "core/ops.h"

f8_status f8i_error(f8_ctx *ctx, f8_status status, const char *fmt, ...)
{
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
        va_end(ap);
    }
    return status;
}

f8_ctx_config f8_ctx_config_default(void)
{
    f8_ctx_config c;
    c.backend = F8_BACKEND_CPU;
    c.device = 0;
    c.recipe = f8_recipe_default();
    c.attention_path = F8_ATTENTION_PATH_AUTO;
    c.attention_nondeterministic = 0;
    return c;
}

/* A recipe the update kernels can run; writes the reason into msg. */
static int recipe_ok(const f8_recipe *r, char *msg, size_t n)
{
    if (r->format != F8_FORMAT_E4M3 && r->format != F8_FORMAT_HYBRID) {
        snprintf(msg, n, "recipe.format %d is not E4M3 (0) or HYBRID (1); pure E5M2 is not a recipe", (int)r->format);
        return 0;
    }
    if (r->amax_history_len < 1 || r->amax_history_len > 65536) {
        snprintf(msg, n, "recipe.amax_history_len %d outside [1, 65536]", r->amax_history_len);
        return 0;
    }
    if (r->amax_compute_algo != F8_AMAX_MAX && r->amax_compute_algo != F8_AMAX_MOST_RECENT) {
        snprintf(msg, n, "recipe.amax_compute_algo %d is not MAX (0) or MOST_RECENT (1)", (int)r->amax_compute_algo);
        return 0;
    }
    if (r->margin < -126 || r->margin > 126) {
        snprintf(msg, n, "recipe.margin %d outside [-126, 126]", r->margin);
        return 0;
    }
    if ((int)r->kind < F8_RECIPE_DELAYED || r->kind > F8_RECIPE_ROWWISE_GW_HP) {
        snprintf(msg, n, "recipe.kind %d is not DELAYED (0), CURRENT (1), BLOCK (2), ROWWISE (3) or ROWWISE_GW_HP (4)",
                 (int)r->kind);
        return 0;
    }
    if (r->reduce_amax != 0 && r->reduce_amax != 1) {
        snprintf(msg, n, "recipe.reduce_amax is %d; it must be 0 or 1", r->reduce_amax);
        return 0;
    }
    if (r->power_2_scales != 0 && r->power_2_scales != 1) {
        snprintf(msg, n, "recipe.power_2_scales is %d; it must be 0 or 1", r->power_2_scales);
        return 0;
    }
    if (r->power_2_scales && r->kind == F8_RECIPE_DELAYED) {
        snprintf(msg, n, "recipe.power_2_scales needs kind CURRENT, BLOCK or ROWWISE (delayed scaling has no power-of-two option)");
        return 0;
    }
    return 1;
}

static f8_status create_fail(f8_status st, const char *text, char *error, size_t error_size)
{
    if (error && error_size) snprintf(error, error_size, "%s", text);
    return st;
}

f8_status f8_ctx_create(const f8_ctx_config *config, f8_ctx **ctx, char *error, size_t error_size)
{
    char msg[512];
    if (!ctx) return create_fail(F8_ERR_INVALID_ARGUMENT, "f8_ctx_create: ctx (the output) is NULL", error, error_size);
    *ctx = NULL;
    if (!config) return create_fail(F8_ERR_INVALID_ARGUMENT, "f8_ctx_create: config is NULL", error, error_size);
    if (!recipe_ok(&config->recipe, msg, sizeof msg)) return create_fail(F8_ERR_INVALID_ARGUMENT, msg, error, error_size);
    if (config->attention_path != F8_ATTENTION_PATH_AUTO && config->attention_path != F8_ATTENTION_PATH_OWN) {
        snprintf(msg, sizeof msg, "f8_ctx_create: attention_path %d is not AUTO (0) or OWN (1)", (int)config->attention_path);
        return create_fail(F8_ERR_INVALID_ARGUMENT, msg, error, error_size);
    }
    if (config->attention_nondeterministic != 0 && config->attention_nondeterministic != 1) {
        snprintf(msg, sizeof msg, "f8_ctx_create: attention_nondeterministic is %d; it must be 0 or 1",
                 config->attention_nondeterministic);
        return create_fail(F8_ERR_INVALID_ARGUMENT, msg, error, error_size);
    }

    const f8i_backend *be = NULL;
    if (config->backend == F8_BACKEND_CPU) {
        be = f8i_cpu_backend();
    } else if (config->backend == F8_BACKEND_CUDA) {
        be = f8i_cuda_backend();
        if (!be)
            return create_fail(F8_ERR_NO_DEVICE, "f8_ctx_create: this build of f8 has no CUDA backend (built with CUDA=0)",
                               error, error_size);
        if (config->device < 0) return create_fail(F8_ERR_NO_DEVICE, "f8_ctx_create: device ordinal is negative", error, error_size);
    } else {
        snprintf(msg, sizeof msg, "f8_ctx_create: backend %d is not CPU (0) or CUDA (1)", (int)config->backend);
        return create_fail(F8_ERR_INVALID_ARGUMENT, msg, error, error_size);
    }

    f8_ctx *c = (f8_ctx *)calloc(1, sizeof *c);
    if (!c) return create_fail(F8_ERR_OUT_OF_MEMORY, "f8_ctx_create: out of host memory", error, error_size);
    c->be = be;
    c->kind = config->backend;
    c->device = config->backend == F8_BACKEND_CUDA ? config->device : 0;
    c->recipe = config->recipe;
    c->attn_path = config->attention_path;
    c->attn_nondet = config->attention_nondeterministic;

    f8_status st = be->state_create(c);
    if (st != F8_OK) {
        create_fail(st, c->error, error, error_size);
        free(c);
        return st;
    }
    st = f8i_alloc(c, F8_MEM_OTHER, NULL, sizeof(float), (void **)&c->noop);
    if (st == F8_OK) st = f8i_op_fill_f32(c, c->noop, 0.0f, 1);
    if (st == F8_OK) st = be->synchronize(c);
    if (st != F8_OK) {
        create_fail(st, c->error, error, error_size);
        f8_ctx_destroy(c);
        return st;
    }
    *ctx = c;
    return F8_OK;
}

void f8_ctx_destroy(f8_ctx *ctx)
{
    if (!ctx) return;
    if (ctx->be_state) ctx->be->synchronize(ctx);
    f8i_free(ctx, ctx->noop);
    f8i_free(ctx, ctx->scaling_buf);
    f8i_free(ctx, ctx->scratch);
    f8i_free(ctx, ctx->fp8_weight_cols_dev);
    f8i_free(ctx, ctx->tel_block);
    ctx->be->state_destroy(ctx);
    free(ctx->allocs);
    free(ctx->fp8_weight_cols);
    free(ctx);
}

const char *f8_ctx_last_error(const f8_ctx *ctx) { return ctx ? ctx->error : "ctx is NULL"; }

f8_backend f8_ctx_backend(const f8_ctx *ctx) { return ctx ? ctx->kind : F8_BACKEND_CPU; }

int f8_ctx_device(const f8_ctx *ctx) { return ctx ? ctx->device : 0; }

f8_status f8_ctx_device_name(const f8_ctx *ctx, char *name, size_t size)
{
    if (!ctx || !name || size == 0) return F8_ERR_INVALID_ARGUMENT;
    name[0] = '\0';
    if (ctx->kind != F8_BACKEND_CUDA) {
        snprintf(name, size, "CPU");
        return F8_OK;
    }
    return f8i_cuda_device_name(ctx->device, name, size) == 0 ? F8_OK : F8_ERR_NO_DEVICE;
}

f8_status f8_ctx_device_memory(const f8_ctx *ctx, size_t *free_bytes, size_t *total_bytes)
{
    size_t f = 0, t = 0;
    if (free_bytes) *free_bytes = 0;
    if (total_bytes) *total_bytes = 0;
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (ctx->kind == F8_BACKEND_CUDA) {
        if (f8i_cuda_device_memory(ctx->device, &f, &t) != 0) return F8_ERR_NO_DEVICE;
    } else {
        const long avail = sysconf(_SC_AVPHYS_PAGES), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (avail <= 0 || pages <= 0 || page <= 0) return F8_ERR_NO_DEVICE;
        f = (size_t)avail * (size_t)page;
        t = (size_t)pages * (size_t)page;
    }
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
    return F8_OK;
}

const f8_recipe *f8_ctx_recipe(const f8_ctx *ctx) { return ctx ? &ctx->recipe : NULL; }

f8_status f8_ctx_set_stream(f8_ctx *ctx, void *stream)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (ctx->kind != F8_BACKEND_CUDA) return f8i_error(ctx, F8_ERR_UNSUPPORTED, "f8_ctx_set_stream: a CPU ctx has no stream");
    return ctx->be->set_stream(ctx, stream);
}

void *f8_ctx_stream(const f8_ctx *ctx) { return ctx ? ctx->be->get_stream(ctx) : NULL; }

f8_status f8_ctx_synchronize(f8_ctx *ctx)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    return ctx->be->synchronize(ctx);
}

f8_status f8_ctx_alloc(f8_ctx *ctx, size_t bytes, void **ptr)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!ptr) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_ctx_alloc: ptr (the output) is NULL");
    *ptr = NULL;
    size_t rounded;
    F8I_TRY(f8i_alloc_size(ctx, bytes, "f8_ctx_alloc", &rounded));
    /* A zero-byte request still gets a distinct, freeable pointer. */
    return f8i_alloc(ctx, F8_MEM_OTHER, NULL, bytes ? bytes : 1, ptr);
}

void f8_ctx_free(f8_ctx *ctx, void *ptr)
{
    if (ctx && ptr) f8i_free(ctx, ptr);
}

f8_status f8i_alloc_size(f8_ctx *ctx, size_t bytes, const char *who, size_t *rounded)
{
    if (bytes > F8I_MAX_BYTES)
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: %zu bytes is more than f8 allocates at once (2^62)", who, bytes);
    *rounded = f8i_align256(bytes ? bytes : 1); /* no wrap: bytes <= 2^62 */
    return F8_OK;
}

f8_status f8i_alloc(f8_ctx *ctx, f8_mem_category category, f8_memory_report *acct, size_t bytes, void **ptr)
{
    *ptr = NULL;
    size_t rounded;
    F8I_TRY(f8i_alloc_size(ctx, bytes, "backend allocation", &rounded));
    /* Live allocations are real memory, so the report's sums stay far below
     * SIZE_MAX; the check makes that a guarantee, not an observation. */
    if (bytes > SIZE_MAX - ctx->mem.total)
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "backend allocation of %zu bytes: the memory report would pass "
                                                    "SIZE_MAX", bytes);
    if (ctx->capturing) {
        if (ctx->capture_error == F8_OK) ctx->capture_error = F8_ERR_STATE; /* spoils the capture (graph.c) */
        return f8i_error(ctx, F8_ERR_STATE, "allocation of %zu bytes while capturing a graph: create objects and run "
                                            "one step eagerly before f8_graph_begin", bytes);
    }
    if (ctx->n_allocs == ctx->cap_allocs) {
        size_t cap = ctx->cap_allocs ? 2 * ctx->cap_allocs : 64;
        f8i_alloc_rec *t = (f8i_alloc_rec *)realloc(ctx->allocs, cap * sizeof *t);
        if (!t) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "allocation table: out of host memory");
        ctx->allocs = t;
        ctx->cap_allocs = cap;
    }
    F8I_TRY(ctx->be->alloc(ctx, bytes, ptr));
    f8i_alloc_rec r = {*ptr, bytes, (int)category, acct};
    ctx->allocs[ctx->n_allocs++] = r;
    ctx->counters.allocations++;
    ctx->mem.bytes[category] += bytes;
    ctx->mem.total += bytes;
    if (ctx->mem.total > ctx->counters.peak_bytes) ctx->counters.peak_bytes = ctx->mem.total;
    if (acct) {
        acct->bytes[category] += bytes;
        acct->total += bytes;
    }
    return F8_OK;
}

void f8i_free(f8_ctx *ctx, void *ptr)
{
    if (!ptr) return;
    for (size_t i = ctx->n_allocs; i-- > 0;) {
        f8i_alloc_rec *r = &ctx->allocs[i];
        if (r->ptr != ptr) continue;
        ctx->mem.bytes[r->category] -= r->bytes;
        ctx->mem.total -= r->bytes;
        if (r->acct) {
            r->acct->bytes[r->category] -= r->bytes;
            r->acct->total -= r->bytes;
        }
        ctx->allocs[i] = ctx->allocs[--ctx->n_allocs];
        break;
    }
    ctx->counters.frees++;
    ctx->be->free(ctx, ptr);
}

const char *f8_mem_category_name(f8_mem_category c)
{
    static const char *const names[F8_MEM_COUNT] = {"parameters", "gradients", "workspace_data", "workspace_transpose",
                                                     "saved_activations", "scaling_state", "scratch", "other"};
    return (unsigned)c < F8_MEM_COUNT ? names[c] : "unknown";
}

/* The ctx's last error is not part of its observable state: the read-only
 * calls still report why they failed. */
f8_status f8_ctx_memory(const f8_ctx *ctx, f8_memory_report *report)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!report) return f8i_error((f8_ctx *)ctx, F8_ERR_INVALID_ARGUMENT, "f8_ctx_memory: report (the output) is NULL");
    *report = ctx->mem;
    return F8_OK;
}

f8_status f8_ctx_counters_read(const f8_ctx *ctx, f8_ctx_counters *counters)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!counters)
        return f8i_error((f8_ctx *)ctx, F8_ERR_INVALID_ARGUMENT, "f8_ctx_counters_read: counters (the output) is NULL");
    *counters = ctx->counters;
    return F8_OK;
}

/* Shared NULL checks of the three copy calls. */
static f8_status copy_args_ok(f8_ctx *ctx, const char *fn, const void *dst, const void *src, size_t bytes)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (bytes && (!dst || !src))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %s is NULL with %zu bytes to copy", fn, dst ? "src" : "dst",
                         bytes);
    return F8_OK;
}

f8_status f8_ctx_upload(f8_ctx *ctx, void *dst, const void *host_src, size_t bytes)
{
    f8_status st = copy_args_ok(ctx, "f8_ctx_upload", dst, host_src, bytes);
    if (st != F8_OK || !bytes) return st;
    return ctx->be->upload(ctx, dst, host_src, bytes);
}

f8_status f8_ctx_download(f8_ctx *ctx, void *host_dst, const void *src, size_t bytes)
{
    f8_status st = copy_args_ok(ctx, "f8_ctx_download", host_dst, src, bytes);
    if (st != F8_OK || !bytes) return st;
    return ctx->be->download(ctx, host_dst, src, bytes);
}

f8_status f8_ctx_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    f8_status st = copy_args_ok(ctx, "f8_ctx_copy", dst, src, bytes);
    if (st != F8_OK || !bytes) return st;
    return f8i_op_copy(ctx, dst, src, bytes);
}

float *f8_ctx_noop_flag(f8_ctx *ctx) { return ctx ? ctx->noop : NULL; }

f8_status f8_ctx_set_noop_flag(f8_ctx *ctx, float value)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    return f8i_op_fill_f32(ctx, ctx->noop, value, 1);
}

f8_status f8_ctx_set_weight_noop(f8_ctx *ctx, int enabled)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    ctx->weight_noop = enabled != 0;
    return F8_OK;
}

f8_status f8_ctx_set_gemm_tune(f8_ctx *ctx, int enabled)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    ctx->gemm_tune = enabled != 0;
    return F8_OK;
}

f8_status f8i_scratch_reserve(f8_ctx *ctx, size_t bytes)
{
    if (bytes <= ctx->scratch_bytes) return F8_OK;
    F8I_TRY(ctx->be->synchronize(ctx)); /* work in flight may still read the old scratch */
    void *p = NULL;
    F8I_TRY(f8i_alloc(ctx, F8_MEM_SCRATCH, NULL, bytes, &p));
    f8i_free(ctx, ctx->scratch);
    ctx->scratch = p;
    ctx->scratch_bytes = bytes;
    return F8_OK;
}

f8_status f8i_check_tensor(f8_ctx *ctx, const f8_tensor *t, const char *name)
{
    if (!t) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s is NULL", name);
    if (t->rows < 0 || t->cols < 0)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s has a negative shape [%lld, %lld]", name, (long long)t->rows,
                         (long long)t->cols);
    if (f8_dtype_size(t->dtype) == 0) return f8i_error(ctx, F8_ERR_DTYPE, "%s has unknown dtype %d", name, (int)t->dtype);
    size_t bytes;
    if (!f8i_shape_bytes(t->rows, t->cols, f8_dtype_size(t->dtype), &bytes))
        return f8i_error(ctx, F8_ERR_SHAPE, "%s [%lld, %lld] of %s is too large: more than 2^62 bytes", name,
                         (long long)t->rows, (long long)t->cols, f8_dtype_name(t->dtype));
    if (bytes > 0 && !t->data) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s->data is NULL", name);
    if (f8i_dtype_is_fp8(t->dtype) && !t->scale_inv)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s is FP8 (%s) but its scale_inv is NULL", name,
                         f8_dtype_name(t->dtype));
    return F8_OK;
}

f8_status f8_tensor_convert(f8_ctx *ctx, const f8_tensor *src, f8_tensor *dst)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(f8i_check_tensor(ctx, src, "f8_tensor_convert: src"));
    F8I_TRY(f8i_check_tensor(ctx, dst, "f8_tensor_convert: dst"));
    if (src->rows != dst->rows || src->cols != dst->cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_tensor_convert: src [%lld, %lld] and dst [%lld, %lld] differ",
                         (long long)src->rows, (long long)src->cols, (long long)dst->rows, (long long)dst->cols);
    if (!f8i_dtype_is_hp(dst->dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "f8_tensor_convert: dst must be fp32 or bf16, not %s", f8_dtype_name(dst->dtype));
    const int64_t n = f8i_tensor_elems(src);
    if (n == 0) return F8_OK;
    return f8i_op_convert(ctx, src->data, src->dtype, src->scale_inv, dst->data, dst->dtype, n);
}

f8_status f8_tensor_add(f8_ctx *ctx, f8_tensor *dst, const f8_tensor *src)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(f8i_check_tensor(ctx, dst, "f8_tensor_add: dst"));
    F8I_TRY(f8i_check_tensor(ctx, src, "f8_tensor_add: src"));
    if (dst->dtype != src->dtype || !f8i_dtype_is_hp(dst->dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "f8_tensor_add: dst %s and src %s must both be fp32 or both bf16",
                         f8_dtype_name(dst->dtype), f8_dtype_name(src->dtype));
    if (dst->rows != src->rows || dst->cols != src->cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_tensor_add: dst [%lld, %lld] and src [%lld, %lld] differ",
                         (long long)dst->rows, (long long)dst->cols, (long long)src->rows, (long long)src->cols);
    const int64_t n = f8i_tensor_elems(dst);
    return n ? f8i_op_add(ctx, dst->data, src->data, dst->dtype, n) : F8_OK;
}

f8_status f8_tensor_zero(f8_ctx *ctx, f8_tensor *t)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(f8i_check_tensor(ctx, t, "f8_tensor_zero: t"));
    const size_t bytes = f8i_tensor_bytes(t);
    return bytes ? f8i_op_memset_zero(ctx, t->data, bytes) : F8_OK;
}

f8_status f8_tensor_fill_normal(f8_ctx *ctx, f8_tensor *t, double std, uint64_t seed)
{
    static const char fn[] = "f8_tensor_fill_normal";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(f8i_check_tensor(ctx, t, "f8_tensor_fill_normal: t"));
    if (!f8i_dtype_is_hp(t->dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: t must be fp32 or bf16, not %s", fn, f8_dtype_name(t->dtype));
    if (!(std >= 0.0) || !isfinite(std))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: std %g must be finite and >= 0", fn, std);
    if (ctx->capturing)
        return f8i_capture_spoil(ctx, f8i_error(ctx, F8_ERR_STATE, "%s: refused while capturing a graph (it uploads); "
                                                                   "the capture is spoiled", fn));
    const int64_t n = f8i_tensor_elems(t);
    const size_t es = f8_dtype_size(t->dtype);
    if (n == 0) return F8_OK;
    unsigned char *host = (unsigned char *)malloc(f8i_tensor_bytes(t));
    if (!host) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld values", fn, (long long)n);
    f8i_normal_fill(host, es, n, std, seed);
    const f8_status st = ctx->be->upload(ctx, t->data, host, f8i_tensor_bytes(t));
    free(host);
    return st;
}
