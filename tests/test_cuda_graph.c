/*
 * test_cuda_graph.c — f8 graphs on the CUDA backend (stream capture, one
 * cudaGraphLaunch per replay): the tests of graph_tests.h. Reports itself
 * skipped without a GPU or in a CUDA=0 build.
 */
#include "graph_tests.h"

int main(void)
{
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = F8_BACKEND_CUDA;
    f8_ctx *probe = NULL;
    char why[256] = "";
    f8_status st = f8_ctx_create(&cfg, &probe, why, sizeof why);
    if (st == F8_ERR_NO_DEVICE) return test_skip("test_cuda_graph", why);
    if (st != F8_OK) {
        fprintf(stderr, "test_cuda_graph: f8_ctx_create(CUDA) -> %s: %s\n", f8_status_string(st), why);
        return 1;
    }
    f8_ctx_destroy(probe);
    test_edges(F8_BACKEND_CUDA);
    test_counts(F8_BACKEND_CUDA);
    test_replay_vs_eager(F8_BACKEND_CUDA, 1, "cuda fp8");
    test_replay_vs_eager(F8_BACKEND_CUDA, 0, "cuda bf16");
    test_noop_flag(F8_BACKEND_CUDA);
    test_refused(F8_BACKEND_CUDA);
    return test_finish("test_cuda_graph");
}
