/*
 * test_graph.c — f8 graphs on the CPU backend (recorded ops, replayed in
 * order): the tests of graph_tests.h, which test_cuda_graph.c runs on the GPU.
 */
#include "graph_tests.h"

int main(void)
{
    test_edges(F8_BACKEND_CPU);
    test_counts(F8_BACKEND_CPU);
    test_replay_vs_eager(F8_BACKEND_CPU, 1, "cpu fp8");
    test_replay_vs_eager(F8_BACKEND_CPU, 0, "cpu bf16");
    test_noop_flag(F8_BACKEND_CPU);
    test_refused(F8_BACKEND_CPU);
    return test_finish("test_graph");
}
