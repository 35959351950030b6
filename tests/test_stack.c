/*
 * test_stack.c — the workspace system on the CPU backend (graphs are the
 * CPU's recorded replays): see stack_tests.h.
 */
#include "block_tests.h"
#include "checkpoint_tests.h"
#include "recipe_tests.h"
#include "stack_tests.h"

int main(void)
{
    char why[256] = "";
    f8_ctx *a = test_ctx(F8_BACKEND_CPU, NULL, why), *b = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!a || !b) die(why, NULL);
    test_write_weight(a);
    test_fp8_weights_vs_hp(a);
    test_memory(a);
    run_checkpoint_tests(a, "cpu");
    test_launch_counts(a, 1);
    for (int fp8 = 0; fp8 <= 1; fp8++)
        for (int fw = 0; fw <= fp8; fw++)
            for (int inside = 0; inside <= 1; inside++) test_graph_vs_eager(a, b, fp8, fw, inside);
    f8_ctx_destroy(a);
    f8_ctx_destroy(b);
    run_recipe_tests(F8_BACKEND_CPU, "cpu"); /* current scaling */
    run_block_tests(F8_BACKEND_CPU);          /* block scaling (CUDA: test_cuda_stack.c) */
    run_rowwise_tests(F8_BACKEND_CPU);        /* row-wise scaling (CUDA: test_cuda_stack.c) */
    return test_finish("test_stack");
}
