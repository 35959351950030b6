/*
 * test_cuda_memory_savings.c — the savings that change no bits, on the GPU:
 * --recompute-act (LayerNormMLP's activation output made again from h1 by
 * the fused activation kernel, or under current scaling the activation and
 * the cast), --recompute-proj-input (Linear's input cast again from the
 * kept x) and --weight-transpose-per-call (the dgrad's W8ᵀ transposed into
 * the workspace by each backward), each alone and all three together, the
 * GPT (GELU) and the Llama (SwiGLU) in BF16 with FP8 GEMMs under delayed and
 * current scaling, two microbatches a step, the step captured as one CUDA
 * graph (the GPU's default) and, with all three, also run eagerly: every
 * step's loss, then every parameter and the whole FP8 scaling state (the
 * checkpoint's bytes), bitwise those of the run without; and a lower peak.
 * cuDNN's attention runs its deterministic backward (the default), so runs
 * repeat bit for bit. The CPU oracle's version (test_memory_savings) covers
 * the compositions, FP8 off and the gradients; this one the CUDA kernels
 * (the activation's tile kernel writing the codes transposed with a saved
 * scale and no amax; the cast of a kept input; the codes' transpose) and
 * the graph. Skipped without a usable GPU.
 */
#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"
#include "trainer_fixture.h"
#include "trainer_fd.h"

enum { STEPS = 4 };

/* which: bit 0 --recompute-act, bit 1 --recompute-proj-input, bit 2 --weight-transpose-per-call */
static void same_as_off(int llama, const char *recipe, int graph, int which)
{
    static const char *const names[8] = {"", "act", "proj", "", "wt", "", "", "all three"};
    train_options o = small_cuda_options(llama, recipe, graph);
    double off[STEPS], on[STEPS];
    size_t peak_off, peak_on;
    trainer *a = run_steps(&o, STEPS, off, &peak_off);
    o.recompute_act = which & 1;
    o.recompute_proj_input = (which >> 1) & 1;
    o.weight_transpose_per_call = (which >> 2) & 1 ? TRAIN_RECOMPUTE_ALL : 0;
    trainer *b = run_steps(&o, STEPS, on, &peak_on);
    const char *what = llama ? "llama" : "gpt";
    CHECK(memcmp(off, on, sizeof off) == 0, "%s, %s, graph %d, %s: losses differ (%.9g vs %.9g)", what, recipe, graph,
          names[which], on[STEPS - 1], off[STEPS - 1]);
    CHECK(models_bitwise_equal(trainer_model(a), trainer_model(b)),
          "%s, %s, graph %d, %s: parameters or FP8 scaling state differ", what, recipe, graph, names[which]);
    CHECK(peak_on < peak_off, "%s, %s, %s: peak %zu with, %zu without", what, recipe, names[which], peak_on, peak_off);
    printf("  %-5s %-7s graph %d %-9s: bitwise; peak %zu -> %zu bytes\n", what, recipe, graph, names[which], peak_off,
           peak_on);
    trainer_destroy(a);
    trainer_destroy(b);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *probe = test_ctx(F8_BACKEND_CUDA, NULL, why);
    if (!probe) return test_skip("test_cuda_memory_savings", "no usable GPU or a CUDA=0 build");
    f8_ctx_destroy(probe);
    (void)fd_check_trainer; /* trainer_fd.h's finite differences are the CPU tests' */
    static const char *const recipes[2] = {"delayed", "current"};
    for (int llama = 0; llama <= 1; llama++)
        for (int r = 0; r < 2; r++) {
            for (int which = 1; which <= 4; which <<= 1) same_as_off(llama, recipes[r], 1, which);
            same_as_off(llama, recipes[r], 1, 7);
            same_as_off(llama, recipes[r], 0, 7);
        }
    return test_finish("test_cuda_memory_savings");
}
