/*
 * head.c — the LM head and cross-entropy of either model family (head.h),
 * moved out of gpt.c so that gpt.c and llama.c both call it and neither
 * calls the other's file back.
 */
#include "head.h"
#include "try.h"

static f8_tensor view(const gpt *m, void *base, int64_t index, int64_t rows, int64_t cols)
{
    return f8_tensor_make((unsigned char *)base + (size_t)(index * rows * cols) * f8_dtype_size(m->c.dtype), m->c.dtype,
                          rows, cols);
}

/* The LM head and cross-entropy over xf (all T_call rows), head_rows at a
 * time. More than one pass: each pass's head backward runs at once (its
 * dlogits would be overwritten by the next pass) into the residual
 * gradient's rows, and head_done tells gpt_backward so. The head's weight
 * gradient then sums the passes in order (deterministic; rounded per pass,
 * not once). Passes after the first reuse an FP8 head's weight cast. */
f8_status head_forward(gpt *m, const f8_tensor *xf, int train, float grad_scale, f8_microbatch mb)
{
    const gpt_config *c = &m->c;
    const int64_t T = xf->rows, C = c->channels, R = m->head_rows;
    const int chunked = T > R;
    m->head_done = 0;
    for (int64_t t0 = 0; t0 < T; t0 += R) {
        const int64_t n = T - t0 < R ? T - t0 : R;
        f8_tensor x = view(m, xf->data, 0, n, C), lg = view(m, m->logits, 0, n, c->padded_vocab);
        x.data = (unsigned char *)xf->data + (size_t)(t0 * C) * f8_dtype_size(m->c.dtype);
        const f8_microbatch hmb = t0 == 0 || mb == F8_MICROBATCH_NONE ? mb : F8_MICROBATCH_NOT_FIRST;
        TRY(f8_layernorm_linear_forward(m->head, &x, &lg, NULL, hmb, train ? m->head_s : NULL));
        TRY(f8_cross_entropy(m->ctx, &lg, c->vocab, m->targets + t0, grad_scale, m->losses + t0, train ? &lg : NULL));
        if (train && chunked) {
            f8_tensor d = view(m, m->dres, 0, n, C);
            d.data = (unsigned char *)m->dres + (size_t)(t0 * C) * f8_dtype_size(m->c.dtype);
            TRY(f8_layernorm_linear_backward(m->head, m->head_s, &lg, NULL, &d));
        }
    }
    m->head_done = train && chunked;
    return F8_OK;
}
