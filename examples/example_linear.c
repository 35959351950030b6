/* One FP8 training step of a Linear layer on the CPU reference backend. */
#include <stdio.h>

#include "f8.h"

int main(void)
{
    f8_ctx_config cfg = f8_ctx_config_default(); /* CPU; F8_BACKEND_CUDA for a GPU */
    f8_ctx *ctx = NULL;
    char why[256];
    if (f8_ctx_create(&cfg, &ctx, why, sizeof why) != F8_OK) {
        fprintf(stderr, "no ctx: %s\n", why);
        return 1;
    }
    f8_linear_config lc = f8_linear_config_default(64, 32); /* in 64, out 32, FP8 on */
    lc.max_tokens = 16;
    f8_module *lin = NULL;
    f8_saved *saved = NULL;
    float x[16 * 64], y[16 * 32], dy[16 * 32];
    for (int i = 0; i < 16 * 64; i++) x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < 16 * 32; i++) dy[i] = 0.01f;

    void *xb = NULL, *yb = NULL, *dyb = NULL;
    f8_status st = f8_linear_create(ctx, &lc, &lin);
    if (st == F8_OK) st = f8_module_saved_create(lin, &saved);
    if (st == F8_OK) st = f8_ctx_alloc(ctx, sizeof x, &xb);
    if (st == F8_OK) st = f8_ctx_alloc(ctx, sizeof y, &yb);
    if (st == F8_OK) st = f8_ctx_alloc(ctx, sizeof dy, &dyb);
    if (st == F8_OK) st = f8_ctx_upload(ctx, xb, x, sizeof x);
    if (st == F8_OK) st = f8_ctx_upload(ctx, dyb, dy, sizeof dy);

    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, 16, 64);
    f8_tensor ty = f8_tensor_make(yb, F8_DTYPE_FP32, 16, 32);
    f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, 16, 32);
    if (st == F8_OK) st = f8_module_forward(lin, &tx, &ty, F8_MICROBATCH_NONE, saved);
    if (st == F8_OK) st = f8_ctx_update_scales(ctx, F8_DIR_FORWARD);   /* after the forwards */
    if (st == F8_OK) st = f8_module_backward(lin, saved, &tdy, NULL); /* grads accumulate in lin */
    if (st == F8_OK) st = f8_ctx_update_scales(ctx, F8_DIR_BACKWARD); /* after the backwards */
    if (st == F8_OK) st = f8_ctx_download(ctx, y, yb, sizeof y);
    if (st != F8_OK)
        fprintf(stderr, "%s: %s\n", f8_status_string(st), f8_ctx_last_error(ctx));
    else
        printf("y[0] = %f\n", y[0]);

    f8_ctx_free(ctx, xb);
    f8_ctx_free(ctx, yb);
    f8_ctx_free(ctx, dyb);
    f8_saved_destroy(saved);
    f8_module_destroy(lin);
    f8_ctx_destroy(ctx);
    return st == F8_OK ? 0 : 1;
}
