/*
 * graph.h — the CUDA side of f8 graphs, called by graph.c for a CUDA ctx.
 * Implemented in cuda/graph.cu; src/no_cuda.c has stubs (a CUDA=0 build has
 * no CUDA ctx, so they are never reached). Included from C and CUDA.
 */
#ifndef F8_GRAPH_H
#define F8_GRAPH_H

#include "core/f8i.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Put the ctx's stream into capture mode (cudaStreamBeginCapture, relaxed). */
f8_status f8i_cuda_graph_begin(f8_ctx *ctx);

/* End the capture of the ctx stream. keep != 0:
 * instantiate it into *exec (NULL for a graph with no work) and upload it to
 * the device; keep == 0: discard it (*exec NULL), for a spoiled capture or a
 * ctx being destroyed. Either way the stream leaves capture mode. set_stream
 * is refused while capturing, so the stream is the one begin captured. */
f8_status f8i_cuda_graph_end(f8_ctx *ctx, int keep, void **exec);

/* cudaGraphLaunch of exec on the ctx's current stream (counted: 1 launch). */
f8_status f8i_cuda_graph_launch(f8_ctx *ctx, void *exec);

/* cudaGraphExecDestroy; NULL is a no-op. */
void f8i_cuda_graph_destroy(void *exec);

#ifdef __cplusplus
}
#endif

#endif /* F8_GRAPH_H */
