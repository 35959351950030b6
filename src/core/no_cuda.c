/* no_cuda.c — linked instead of src/cuda/ in a build without CUDA (CUDA=0):
 * the CUDA backend is absent, and f8_ctx_create reports F8_ERR_NO_DEVICE.
 * There is then no CUDA ctx, so graph.c never reaches the graph stubs. */
#include "core/graph.h"

const f8i_backend *f8i_cuda_backend(void) { return NULL; }

f8_status f8i_cuda_graph_begin(f8_ctx *ctx)
{
    return f8i_error(ctx, F8_ERR_NO_DEVICE, "this build of f8 has no CUDA backend (built with CUDA=0)");
}

f8_status f8i_cuda_graph_end(f8_ctx *ctx, int keep, void **exec)
{
    (void)keep;
    *exec = NULL;
    return f8i_error(ctx, F8_ERR_NO_DEVICE, "this build of f8 has no CUDA backend (built with CUDA=0)");
}

f8_status f8i_cuda_graph_launch(f8_ctx *ctx, void *exec)
{
    (void)exec;
    return f8i_error(ctx, F8_ERR_NO_DEVICE, "this build of f8 has no CUDA backend (built with CUDA=0)");
}

void f8i_cuda_graph_destroy(void *exec) { (void)exec; }

void f8i_cuda_gemm_block_force_fallback(f8_ctx *ctx, int force)
{
    (void)ctx;
    (void)force;
}

int f8i_cuda_gemm_block_last_path(const f8_ctx *ctx)
{
    (void)ctx;
    return 0;
}

void f8i_cuda_attn_set_mode(f8_ctx *ctx, int mode)
{
    (void)ctx;
    (void)mode;
}

int f8i_cuda_attn_last_path(const f8_ctx *ctx)
{
    (void)ctx;
    return 0;
}

f8_status f8i_cuda_attn_takes(f8_ctx *ctx, f8_dtype dtype, int64_t batch, int64_t seq, int64_t n_head,
                              int64_t n_kv_head, int64_t head_dim, int backward, int *takes)
{
    (void)ctx, (void)dtype, (void)batch, (void)seq, (void)n_head, (void)n_kv_head, (void)head_dim, (void)backward;
    *takes = 0;
    return F8_OK;
}

const char *f8i_cuda_attn_info(f8_ctx *ctx, int *loaded)
{
    (void)ctx;
    if (loaded) *loaded = 0;
    return "this build of f8 has no CUDA backend (built with CUDA=0)";
}

int f8i_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes)
{
    (void)device;
    (void)free_bytes;
    (void)total_bytes;
    return -1;
}

int f8i_cuda_device_name(int device, char *name, size_t size)
{
    (void)device;
    (void)name;
    (void)size;
    return -1;
}
