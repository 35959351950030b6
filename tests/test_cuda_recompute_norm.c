/*
 * test_cuda_recompute_norm.c — recompute_norm_output on the CUDA backend:
 * with and without it, bitwise the same results (recompute_tests.h). On the
 * GPU this also holds the norm kernels to their claim that the telemetry-
 * counting and the fit kernels give the same bits (the forward counts, the
 * recompute does not). Skipped without a usable GPU.
 */
#include "recompute_tests.h"

int main(void)
{
    char why[256] = "";
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = F8_BACKEND_CUDA;
    f8_ctx *probe = NULL;
    const f8_status st = f8_ctx_create(&cfg, &probe, why, sizeof why);
    if (st == F8_ERR_NO_DEVICE) return test_skip("test_cuda_recompute_norm", why);
    if (st != F8_OK) { /* a built CUDA backend that fails is a failure */
        fprintf(stderr, "test_cuda_recompute_norm: f8_ctx_create(CUDA) -> %s: %s\n", f8_status_string(st), why);
        return 1;
    }
    f8_ctx_destroy(probe);
    rc_run_all(F8_BACKEND_CUDA);
    return test_finish("test_cuda_recompute_norm");
}
