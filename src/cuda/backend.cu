/*
 * backend.cu — the CUDA backend table (f8i_cuda_backend), its per-ctx state
 * (stream, SM count, plan cache, GEMM op) and the memory entries.
 *
 * Design note. The kernels live in one file per family (cast, transpose,
 * scale_update, convert; GEMMs in gemm.cu); this file only wires them into
 * the table and owns what a CUDA ctx holds. Every CUDA status is checked and
 * turned into an f8_status with a message on the ctx (f8i_cuda_check); a failed
 * call also clears CUDA's per-thread "last error" so that the next launch check
 * does not report it again. No CUDA device, no driver or a bad ordinal gives
 * F8_ERR_NO_DEVICE from state_create, never a crash.
 *
 * Device and threads: state_create makes ctx->device current on the calling
 * thread. The entries that are not on the step path (state_create/destroy,
 * alloc, upload, download, synchronize) make it current again, so several
 * ctxs on different GPUs can share a host thread for setup; step-path entries
 * (casts, GEMMs, copy, memset, ...) launch on the ctx's stream and expect the
 * ctx's device to be current (a mismatch fails with a CUDA error rather than
 * running on the wrong GPU).
 *
 * alloc(0) returns a valid, distinct 256-byte-aligned pointer (a 1-byte
 * allocation), never NULL, so callers need no special case for empty tensors.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_state.cuh"

/* ------------------------------------------------------------------------ */
/* Kernel                                                                    */
/* ------------------------------------------------------------------------ */

/* Does nothing; state_create asks the runtime for its attributes to learn
 * whether this build's device code can run on the chosen GPU. Never launched. */
static __global__ void probe_kernel(void) {}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_check(f8_ctx *ctx, cudaError_t err, const char *what)
{
    if (err == cudaSuccess) return F8_OK;
    (void)cudaGetLastError(); /* clear the non-sticky error this call left */
    const f8_status st = err == cudaErrorMemoryAllocation ? F8_ERR_OUT_OF_MEMORY : F8_ERR_CUDA;
    return f8i_error(ctx, st, "%s: %s (%s)", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

f8_status f8i_cuda_launch_check(f8_ctx *ctx, const char *kernel)
{
    const cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) return F8_OK;
    return f8i_error(ctx, F8_ERR_CUDA, "launch of %s: %s (%s)", kernel, cudaGetErrorName(err),
                     cudaGetErrorString(err));
}

f8_status f8i_cuda_smem_optin(f8_ctx *ctx, const void *fn, const char *what)
{
    f8i_cuda_state *s = f8i_cuda(ctx);
    int free_slot = -1;
    for (int i = 0; i < F8I_SMEM_OPTINS; i++) {
        if (s->smem_done[i] == fn) return F8_OK;
        if (s->smem_done[i] == NULL && free_slot < 0) free_slot = i;
    }
    cudaFuncAttributes fa;
    f8_status st = f8i_cuda_check(ctx, cudaFuncGetAttributes(&fa, fn), what);
    if (st == F8_OK)
        st = f8i_cuda_check(ctx,
                            cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 s->smem_optin - (int)fa.sharedSizeBytes),
                            what);
    if (st == F8_OK && free_slot >= 0) s->smem_done[free_slot] = fn; /* a full table: set again next time */
    return st;
}

/* Make the ctx's device current (non-step entries). */
static f8_status use_device(f8_ctx *ctx)
{
    const f8i_cuda_state *s = f8i_cuda(ctx);
    if (s == NULL) return f8i_error(ctx, F8_ERR_STATE, "CUDA backend state is not created");
    return f8i_cuda_check(ctx, cudaSetDevice(s->device), "cudaSetDevice");
}

/* ------------------------------------------------------------------------ */
/* State                                                                     */
/* ------------------------------------------------------------------------ */

static void cuda_state_destroy(f8_ctx *ctx)
{
    f8i_cuda_state *s = f8i_cuda(ctx);
    if (s == NULL) return;
    /* Best effort: nothing here can report an error. */
    (void)cudaSetDevice(s->device);
    if (s->stream != NULL && s->stream != s->own_stream) (void)cudaStreamSynchronize(s->stream);
    if (s->own_stream != NULL) (void)cudaStreamSynchronize(s->own_stream);
    f8i_plan_cache_destroy(ctx); /* first: cuDNN's plans need its library loaded */
    f8i_cuda_attn_cudnn_destroy(ctx);
    if (s->gemm != NULL) f8i_cuda_gemm_destroy(ctx);
    if (s->amax_ticket != NULL) (void)cudaFree(s->amax_ticket);
    if (s->amax_partials != NULL) (void)cudaFree(s->amax_partials);
    if (s->rwt_colmax != NULL) (void)cudaFree(s->rwt_colmax);
    if (s->rwt_tickets != NULL) (void)cudaFree(s->rwt_tickets);
    if (s->own_stream != NULL) (void)cudaStreamDestroy(s->own_stream);
    free(s);
    ctx->be_state = NULL;
    (void)cudaGetLastError();
}

static f8_status cuda_state_create(f8_ctx *ctx)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return f8i_error(ctx, F8_ERR_NO_DEVICE, "no usable CUDA device: cudaGetDeviceCount failed: %s (%s)",
                         cudaGetErrorName(err), cudaGetErrorString(err));
    }
    if (ctx->device < 0 || ctx->device >= n)
        return f8i_error(ctx, F8_ERR_NO_DEVICE, "CUDA device %d requested, %d device(s) present", ctx->device, n);
    err = cudaSetDevice(ctx->device);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return f8i_error(ctx, F8_ERR_NO_DEVICE, "cudaSetDevice(%d) failed: %s (%s)", ctx->device,
                         cudaGetErrorName(err), cudaGetErrorString(err));
    }
    cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, probe_kernel);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        int major = 0, minor = 0;
        (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->device);
        (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx->device);
        (void)cudaGetLastError();
        return f8i_error(ctx, F8_ERR_NO_DEVICE,
                         "CUDA device %d (compute capability %d.%d) cannot run this build's kernels "
                         "(rebuild with SM=<its sm>): %s",
                         ctx->device, major, minor, cudaGetErrorString(err));
    }

    f8i_cuda_state *s = (f8i_cuda_state *)calloc(1, sizeof *s);
    if (s == NULL) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "CUDA backend state: out of host memory");
    s->device = ctx->device;
    ctx->be_state = s;

    f8_status st = f8i_cuda_check(
        ctx, cudaDeviceGetAttribute(&s->sm_count, cudaDevAttrMultiProcessorCount, ctx->device),
        "cudaDeviceGetAttribute(MultiProcessorCount)");
    if (st == F8_OK)
        st = f8i_cuda_check(ctx,
                            cudaDeviceGetAttribute(&s->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device),
                            "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
    if (st == F8_OK)
        st = f8i_cuda_check(ctx, cudaStreamCreateWithFlags(&s->own_stream, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags");
    if (st == F8_OK) {
        s->stream = s->own_stream;
        st = f8i_plan_cache_create(ctx);
    }
    if (st == F8_OK) st = f8i_cuda_gemm_create(ctx);
    /* current scaling's ticket (must start at 0) and partials; backend-internal
     * like the cuBLASLt workspace, so not in the memory report */
    if (st == F8_OK)
        st = f8i_cuda_check(ctx, cudaMalloc((void **)&s->amax_ticket, sizeof(unsigned int)), "cudaMalloc(amax ticket)");
    if (st == F8_OK)
        st = f8i_cuda_check(ctx, cudaMalloc((void **)&s->amax_partials, F8I_AMAX_MAX_BLOCKS * sizeof(float)),
                            "cudaMalloc(amax partials)");
    if (st == F8_OK)
        st = f8i_cuda_check(ctx, cudaMemsetAsync(s->amax_ticket, 0, sizeof(unsigned int), s->own_stream),
                            "cudaMemsetAsync(amax ticket)");
    /* the row-wise cast's column scratch and tickets, zero at rest (its kernels put them back) */
    if (st == F8_OK)
        st = f8i_cuda_check(ctx, cudaMalloc((void **)&s->rwt_colmax, F8I_RWT_SCRATCH_COLS * sizeof(float)),
                            "cudaMalloc(row-wise column scratch)");
    if (st == F8_OK)
        st = f8i_cuda_check(ctx, cudaMalloc((void **)&s->rwt_tickets, F8I_RWT_TICKETS * sizeof(unsigned int)),
                            "cudaMalloc(row-wise tickets)");
    if (st == F8_OK)
        st = f8i_cuda_check(ctx, cudaMemsetAsync(s->rwt_colmax, 0, F8I_RWT_SCRATCH_COLS * sizeof(float), s->own_stream),
                            "cudaMemsetAsync(row-wise column scratch)");
    if (st == F8_OK)
        st = f8i_cuda_check(ctx, cudaMemsetAsync(s->rwt_tickets, 0, F8I_RWT_TICKETS * sizeof(unsigned int), s->own_stream),
                            "cudaMemsetAsync(row-wise tickets)");
    if (st == F8_OK) st = f8i_cuda_check(ctx, cudaStreamSynchronize(s->own_stream), "cudaStreamSynchronize");
    if (st != F8_OK) cuda_state_destroy(ctx); /* keeps the error message */
    return st;
}

static f8_status cuda_set_stream(f8_ctx *ctx, void *stream)
{
    f8i_cuda_state *s = f8i_cuda(ctx);
    F8I_TRY(f8i_cuda_rwt_settle(ctx)); /* on the stream they were written on */
    s->stream = stream != NULL ? (cudaStream_t)stream : s->own_stream;
    return F8_OK;
}

static void *cuda_get_stream(const f8_ctx *ctx)
{
    const f8i_cuda_state *s = f8i_cuda(ctx);
    return s != NULL ? (void *)s->stream : NULL;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

static f8_status cuda_alloc(f8_ctx *ctx, size_t bytes, void **ptr)
{
    *ptr = NULL;
    size_t rounded; /* cudaMalloc rounds itself; the check is the shared one */
    F8I_TRY(f8i_alloc_size(ctx, bytes, "cudaMalloc", &rounded));
    F8I_TRY(use_device(ctx));
    void *p = NULL;
    const cudaError_t err = cudaMalloc(&p, bytes != 0 ? bytes : 1);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return f8i_error(ctx, err == cudaErrorMemoryAllocation ? F8_ERR_OUT_OF_MEMORY : F8_ERR_CUDA,
                         "cudaMalloc of %zu bytes on device %d: %s (%s)", bytes, f8i_cuda(ctx)->device,
                         cudaGetErrorName(err), cudaGetErrorString(err));
    }
    *ptr = p;
    return F8_OK;
}

static void cuda_free(f8_ctx *ctx, void *ptr)
{
    if (ptr == NULL) return;
    const f8i_cuda_state *s = f8i_cuda(ctx);
    if (s != NULL) (void)cudaSetDevice(s->device);
    /* pending column maxima may lie in this allocation: out of the scratch first (best effort; cudaFree waits) */
    if (s != NULL && f8i_cuda_rwt_settle(ctx) != F8_OK) (void)cudaGetLastError();
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

/* upload/download: ordered after the stream's earlier work, and synchronous.
 * Not step work, so not counted in f8_ctx_counters.launches (nor on the CPU). */
static f8_status sync_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *what)
{
    F8I_TRY(use_device(ctx));
    cudaStream_t stream = f8i_stream(ctx);
    if (bytes != 0) F8I_TRY(f8i_cuda_check(ctx, cudaMemcpyAsync(dst, src, bytes, kind, stream), what));
    return f8i_cuda_check(ctx, cudaStreamSynchronize(stream), what);
}

static f8_status cuda_upload(f8_ctx *ctx, void *dst, const void *host_src, size_t bytes)
{
    return sync_copy(ctx, dst, host_src, bytes, cudaMemcpyHostToDevice, "upload (host to device)");
}

static f8_status cuda_download(f8_ctx *ctx, void *host_dst, const void *src, size_t bytes)
{
    F8I_TRY(f8i_cuda_rwt_settle(ctx)); /* pending column maxima where their caller looks for them */
    return sync_copy(ctx, host_dst, src, bytes, cudaMemcpyDeviceToHost, "download (device to host)");
}

static f8_status cuda_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_check(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, f8i_stream(ctx)),
                          "copy: cudaMemcpyAsync");
}

static f8_status cuda_memset_zero(f8_ctx *ctx, void *dst, size_t bytes)
{
    if (bytes == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_check(ctx, cudaMemsetAsync(dst, 0, bytes, f8i_stream(ctx)), "memset_zero: cudaMemsetAsync");
}

static f8_status cuda_synchronize(f8_ctx *ctx)
{
    F8I_TRY(use_device(ctx));
    F8I_TRY(f8i_cuda_rwt_settle(ctx));
    return f8i_cuda_check(ctx, cudaStreamSynchronize(f8i_stream(ctx)), "cudaStreamSynchronize");
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

/* One entry per kind. The ops with an args parameter pass it on typed; the
 * simple ops unpack theirs into the fields their functions take. */
#define THUNK_ARGS(n, T) \
    static f8_status run_##n(f8_ctx *ctx, const void *args) { return f8i_cuda_##n(ctx, (const T *)args); }
#define THUNK_FIELDS(n, T)
#define THUNK(K, n, T, W) THUNK_##W(n, T)
F8I_OP_LIST(THUNK)
#undef THUNK
#undef THUNK_FIELDS
#undef THUNK_ARGS

static f8_status run_copy(f8_ctx *ctx, const void *args)
{
    const f8i_copy_args *a = (const f8i_copy_args *)args;
    return cuda_copy(ctx, a->dst, a->src, a->bytes);
}
static f8_status run_memset_zero(f8_ctx *ctx, const void *args)
{
    const f8i_memset_zero_args *a = (const f8i_memset_zero_args *)args;
    return cuda_memset_zero(ctx, a->dst, a->bytes);
}
static f8_status run_fill_f32(f8_ctx *ctx, const void *args)
{
    const f8i_fill_f32_args *a = (const f8i_fill_f32_args *)args;
    return f8i_cuda_fill_f32(ctx, a->dst, a->value, a->count);
}
static f8_status run_convert(f8_ctx *ctx, const void *args)
{
    const f8i_convert_args *a = (const f8i_convert_args *)args;
    return f8i_cuda_convert(ctx, a->src, a->src_dtype, a->scale_inv, a->dst, a->dst_dtype, a->count);
}
static f8_status run_transpose_u8(f8_ctx *ctx, const void *args)
{
    const f8i_transpose_u8_args *a = (const f8i_transpose_u8_args *)args;
    return f8i_cuda_transpose_u8(ctx, a->src, a->dst, a->rows, a->cols, a->noop);
}
static f8_status run_reciprocal(f8_ctx *ctx, const void *args)
{
    const f8i_reciprocal_args *a = (const f8i_reciprocal_args *)args;
    return f8i_cuda_reciprocal(ctx, a->src, a->dst, a->noop);
}
static f8_status run_add(f8_ctx *ctx, const void *args)
{
    const f8i_add_args *a = (const f8i_add_args *)args;
    return f8i_cuda_add(ctx, a->dst, a->src, a->dtype, a->count);
}

/* Positional (C++ has no array designators): F8I_OP_LIST's order is the
 * kinds' order, so entry k is kind k. */
#define ENTRY(K, n, T, W) run_##n,
static const f8i_op_fn cuda_ops[] = {F8I_OP_LIST(ENTRY)};
#undef ENTRY
static_assert(sizeof cuda_ops / sizeof cuda_ops[0] == F8I_OP_COUNT, "one entry per op kind");

static f8_status cuda_run(f8_ctx *ctx, f8i_op_kind kind, const void *args)
{
    if ((unsigned)kind >= F8I_OP_COUNT)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "cuda backend: unknown op kind %d", (int)kind);
    return cuda_ops[kind](ctx, args);
}

static const f8i_backend cuda_backend = {
    "cuda",
    /* host ops */
    cuda_alloc,
    cuda_free,
    cuda_upload,
    cuda_download,
    cuda_synchronize,
    /* every work op */
    cuda_run,
    /* state */
    cuda_state_create,
    cuda_state_destroy,
    cuda_set_stream,
    cuda_get_stream,
};

const f8i_backend *f8i_cuda_backend(void) { return &cuda_backend; }

int f8i_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes)
{
    int was = 0;
    if (cudaGetDevice(&was) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    const cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    (void)cudaSetDevice(was); /* the caller's device as it was */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

int f8i_cuda_device_name(int device, char *name, size_t size)
{
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the ctx's next check */
        return -1;
    }
    snprintf(name, size, "%s", p.name);
    return 0;
}
