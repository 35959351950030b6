/*
 * cpu/rope.c — the reference rotary embedding (attention.h's f8i_rope_args):
 * per row, per q and k head, per pair, the FP32 formula in its documented
 * order, each output rounded once to the dtype. The build has
 * -ffp-contract=off, so no product is fused into a sum: the CUDA kernel's
 * explicit __fmul_rn/__fadd_rn give the same bits.
 */
#include "core/numerics.h"
#include "nn/attention.h"

f8_status f8i_cpu_rope(f8_ctx *ctx, const f8i_rope_args *a)
{
    const int64_t hd = a->head_dim, half = hd / 2, heads = a->n_head + a->n_kv_head;
    const int64_t ld = (a->n_head + 2 * a->n_kv_head) * hd;
    const float *cos_t = a->table, *sin_t = a->table + a->table_rows * half;
    F8I_COUNT_LAUNCHES(ctx, 1);
    for (int64_t t = 0; t < a->rows; t++) {
        const int64_t p = t % a->seq;
        for (int64_t h = 0; h < heads; h++) {
            const int64_t o = t * ld + h * hd;
            for (int64_t d = 0; d < half; d++) {
                const float c = cos_t[p * half + d], s = a->inverse ? -sin_t[p * half + d] : sin_t[p * half + d];
                float x1, x2;
                if (a->dtype == F8_DTYPE_BF16) {
                    uint16_t *x = (uint16_t *)a->qkv;
                    x1 = f8i_bf16_to_float(x[o + d]), x2 = f8i_bf16_to_float(x[o + d + half]);
                    x[o + d] = f8i_bf16_from_float(x1 * c - x2 * s);
                    x[o + d + half] = f8i_bf16_from_float(x2 * c + x1 * s);
                } else {
                    float *x = (float *)a->qkv;
                    x1 = x[o + d], x2 = x[o + d + half];
                    x[o + d] = x1 * c - x2 * s;
                    x[o + d + half] = x2 * c + x1 * s;
                }
            }
        }
    }
    return F8_OK;
}
