/*
 * test_cuda_stack.c — the workspace system on the GPU: see stack_tests.h.
 * The eager run and the graphed run use two CUDA ctxs (bitwise equality is
 * a same-backend property). Skipped (77) without a GPU.
 */
#include "checkpoint_tests.h"
#include "recipe_tests.h"
#include "stack_tests.h"

int main(void)
{
    f8_ctx *pair[2], *b = NULL;
    int rc = test_ctx_pair("test_cuda_stack", NULL, pair);
    if (rc) return rc;
    char why[256] = "";
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = F8_BACKEND_CUDA;
    if (f8_ctx_create(&cfg, &b, why, sizeof why) != F8_OK) die(why, NULL);
    f8_ctx *a = pair[1];
    test_write_weight(a);
    test_fp8_weights_vs_hp(a);
    test_memory(a);
    run_checkpoint_tests(a, "cuda");
    test_launch_counts(a, 0);
    for (int fp8 = 0; fp8 <= 1; fp8++)
        for (int fw = 0; fw <= fp8; fw++)
            for (int inside = 0; inside <= 1; inside++) test_graph_vs_eager(a, b, fp8, fw, inside);
    f8_ctx_destroy(pair[0]);
    f8_ctx_destroy(a);
    f8_ctx_destroy(b);
    run_recipe_tests(F8_BACKEND_CUDA, "cuda"); /* current scaling */
    return test_finish("test_cuda_stack");
}
