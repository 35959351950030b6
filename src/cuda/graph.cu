/*
 * graph.cu — the CUDA side of f8 graphs (graph.h): stream capture, the
 * instantiated graph and its launch. graph.c owns the rest (the capture
 * table, spoiling, the f8_graph object).
 *
 * Design note. The capture is the CUDA stream's own: between begin and end
 * every backend op launches as usual on the ctx stream, which records instead
 * of running. Relaxed mode, because some launchers ask the runtime things
 * (function attributes, occupancy) that the global mode forbids while any
 * stream captures; f8 never synchronizes inside a capture (graph.c refuses
 * those calls before they reach CUDA). end instantiates and uploads the
 * graph, so the first replay costs no more than the next. A capture that
 * recorded no work is kept as "no executable graph" (replay issues nothing)
 * rather than instantiating an empty one. No kernels here.
 */
#include "cuda_state.cuh"
#include "core/graph.h"

f8_status f8i_cuda_graph_begin(f8_ctx *ctx)
{
    f8i_cuda_state *s = f8i_cuda(ctx);
    F8I_TRY(f8i_cuda_check(ctx, cudaSetDevice(s->device), "f8_graph_begin: cudaSetDevice"));
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    F8I_TRY(f8i_cuda_check(ctx, cudaStreamIsCapturing(s->stream, &cs), "f8_graph_begin: cudaStreamIsCapturing"));
    if (cs != cudaStreamCaptureStatusNone)
        return f8i_error(ctx, F8_ERR_STATE, "f8_graph_begin: the ctx stream is already being captured (outside f8)");
    return f8i_cuda_check(ctx, cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeRelaxed),
                          "f8_graph_begin: cudaStreamBeginCapture");
}

f8_status f8i_cuda_graph_end(f8_ctx *ctx, int keep, void **exec)
{
    *exec = NULL;
    cudaStream_t stream = f8i_stream(ctx);
    cudaGraph_t g = NULL;
    cudaError_t err = cudaStreamEndCapture(stream, &g);
    if (!keep || err != cudaSuccess) {
        if (g != NULL) (void)cudaGraphDestroy(g);
        if (!keep) { /* abandoned: the caller reports why; an invalidated capture is expected then */
            (void)cudaGetLastError();
            return F8_OK;
        }
        return f8i_cuda_check(ctx, err, "f8_graph_end: cudaStreamEndCapture");
    }
    size_t nodes = 0;
    err = cudaGraphGetNodes(g, NULL, &nodes);
    cudaGraphExec_t x = NULL;
    if (err == cudaSuccess && nodes > 0) {
        err = cudaGraphInstantiate(&x, g, 0);
        if (err == cudaSuccess) err = cudaGraphUpload(x, stream);
    }
    (void)cudaGraphDestroy(g); /* the executable graph keeps what it needs */
    if (err != cudaSuccess) {
        if (x != NULL) (void)cudaGraphExecDestroy(x);
        return f8i_cuda_check(ctx, err, "f8_graph_end: cudaGraphInstantiate/cudaGraphUpload");
    }
    *exec = (void *)x;
    return F8_OK;
}

f8_status f8i_cuda_graph_launch(f8_ctx *ctx, void *exec)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_check(ctx, cudaGraphLaunch((cudaGraphExec_t)exec, f8i_stream(ctx)),
                          "f8_graph_replay: cudaGraphLaunch");
}

void f8i_cuda_graph_destroy(void *exec)
{
    if (exec != NULL && cudaGraphExecDestroy((cudaGraphExec_t)exec) != cudaSuccess) (void)cudaGetLastError();
}
