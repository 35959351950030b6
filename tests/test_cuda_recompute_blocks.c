/*
 * test_cuda_recompute_blocks.c — f8_train --recompute-blocks on the GPU:
 * the GPT and the Llama in BF16 with FP8 GEMMs under every recipe (delayed,
 * current, block), two microbatches a step, the step captured as one CUDA
 * graph (the GPU's default) and run eagerly, every block recomputed (on;
 * with current scaling the first 2 of 3, --recompute-blocks 2): every step's loss, then every
 * parameter and the whole FP8 scaling state (the checkpoint's bytes), bitwise
 * those of the same run without recompute; and a lower peak. cuDNN's
 * attention runs its deterministic backward (the default), so the runs repeat
 * bit for bit. Also with delayed scaling: FP8 primary weights (fp8w), and
 * FP8 attention with FP32 main grads (fp8att: --grad-dtype fp32), both
 * families. The CPU oracle's version of this test (test_recompute_blocks)
 * covers the compositions; this one the CUDA kernels, cuDNN and the graph.
 * Skipped without a usable GPU.
 */
#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"
#include "trainer_fd.h"

enum { STEPS = 4 };

int main(void)
{
    char why[256] = "";
    f8_ctx *probe = test_ctx(F8_BACKEND_CUDA, NULL, why);
    if (!probe) return test_skip("test_cuda_recompute_blocks", "no usable GPU or a CUDA=0 build");
    f8_ctx_destroy(probe);
    (void)fd_check_trainer; /* trainer_fd.h's finite differences are the CPU test's */
    /* the recipes, then delayed scaling with FP8 primary weights, and with FP8 attention and FP32 gradients */
    static const char *const recipes[5] = {"delayed", "current", "block", "delayed", "delayed"};
    static const char *const names[5] = {"delayed", "current", "block", "fp8w", "fp8att"};
    for (int llama = 0; llama <= 1; llama++)
        for (int r = 0; r < 5; r++)
            for (int graph = 1; graph >= 0; graph--) {
                train_options o = small_cuda_options(llama, recipes[r], graph);
                o.fp8_weights = r == 3;
                if (r == 4) o.fp8_attention = 1, o.grad_dtype = "fp32";
                double off[STEPS], on[STEPS];
                size_t peak_off, peak_on;
                trainer *a = run_steps(&o, STEPS, off, &peak_off);
                o.recompute_blocks = r == 1 ? 2 : TRAIN_RECOMPUTE_ALL; /* current scaling: the first 2 of 3 */
                trainer *b = run_steps(&o, STEPS, on, &peak_on);
                const char *what = llama ? "llama" : "gpt";
                CHECK(memcmp(off, on, sizeof off) == 0, "%s, %s, graph %d: losses with recompute differ (%.9g vs %.9g)",
                      what, names[r], graph, on[STEPS - 1], off[STEPS - 1]);
                CHECK(models_bitwise_equal(trainer_model(a), trainer_model(b)),
                      "%s, %s, graph %d: parameters or FP8 scaling state with recompute differ", what, names[r], graph);
                CHECK(peak_on < peak_off, "%s, %s: peak %zu with recompute, %zu without", what, names[r], peak_on,
                      peak_off);
                printf("  %-5s %-7s graph %d: bitwise; peak %zu -> %zu bytes\n", what, names[r], graph, peak_off,
                       peak_on);
                trainer_destroy(a);
                trainer_destroy(b);
            }
    return test_finish("test_cuda_recompute_blocks");
}
