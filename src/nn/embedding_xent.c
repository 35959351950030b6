/*
 * embedding_xent.c — the public entry points of the token + position embedding
 * and of the softmax cross-entropy (f8.h, "Training building blocks").
 *
 * Design note. These are free functions: they own no memory and allocate
 * nothing, so they are safe anywhere in a step, eagerly or under capture. All
 * the checks happen here, on the host, from the views alone (token and target
 * ids are device data the host never reads: an id out of range is defined
 * behaviour, not an error). Then one op (f8i_op_*) carries an args struct of
 * pointers and scalars to the backend (src/nn/embed_xent_adamw.h has the contracts).
 */
#include <stdint.h>
#include <stdio.h>

#include "core/ops.h"
#include "nn/embed_xent_adamw.h"


/* A view that must be FP32 or BF16 with `cols` columns. */
static f8_status check_real(f8_ctx *ctx, const char *fn, const char *name, const f8_tensor *t, int64_t cols)
{
    char what[96];
    snprintf(what, sizeof what, "%s: %s", fn, name);
    F8I_TRY(f8i_check_tensor(ctx, t, what));
    if (!f8i_dtype_is_hp(t->dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: %s must be fp32 or bf16, not %s", fn, name, f8_dtype_name(t->dtype));
    if (cols >= 0 && t->cols != cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: %s has %lld columns, expected %lld (the channels of wte)", fn, name,
                         (long long)t->cols, (long long)cols);
    return F8_OK;
}

/* 1 when the byte ranges of two views overlap. */
static int overlaps(const f8_tensor *a, const f8_tensor *b)
{
    const uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
    const uintptr_t a1 = a0 + (uintptr_t)(a->rows * a->cols) * f8_dtype_size(a->dtype);
    const uintptr_t b1 = b0 + (uintptr_t)(b->rows * b->cols) * f8_dtype_size(b->dtype);
    return a0 < b1 && b0 < a1;
}

static f8_status check_seq(f8_ctx *ctx, const char *fn, const int32_t *tokens, int64_t T, int64_t seq_len)
{
    if (seq_len < 1) return f8i_error(ctx, F8_ERR_SHAPE, "%s: seq_len %lld must be >= 1", fn, (long long)seq_len);
    if (T > 0 && !tokens) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: tokens is NULL", fn);
    if (T > INT32_MAX) return f8i_error(ctx, F8_ERR_SHAPE, "%s: %lld tokens; at most 2^31 - 1", fn, (long long)T);
    return F8_OK;
}

f8_status f8_embedding_forward(f8_ctx *ctx, const int32_t *tokens, int64_t seq_len, const f8_tensor *wte,
                               const f8_tensor *wpe, f8_tensor *y)
{
    static const char fn[] = "f8_embedding_forward";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(check_real(ctx, fn, "wte", wte, -1));
    F8I_TRY(check_real(ctx, fn, "wpe", wpe, wte->cols));
    F8I_TRY(check_real(ctx, fn, "y", y, wte->cols));
    F8I_TRY(check_seq(ctx, fn, tokens, y->rows, seq_len));
    if (wpe->rows < seq_len)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: wpe has %lld rows, fewer than seq_len %lld", fn, (long long)wpe->rows,
                         (long long)seq_len);
    if (overlaps(y, wte) || overlaps(y, wpe))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: y overlaps wte or wpe", fn);
    if (y->rows == 0 || y->cols == 0) return F8_OK;
    f8i_embedding_fwd_args a = {tokens, y->rows, seq_len, wte->rows, wte->cols, wte->data, wte->dtype,
                                wpe->data, wpe->dtype, y->data, y->dtype};
    return f8i_op_embedding_fwd(ctx, &a);
}

f8_status f8_embedding_backward(f8_ctx *ctx, const int32_t *tokens, int64_t seq_len, const f8_tensor *dy,
                                f8_tensor *dwte, f8_tensor *dwpe)
{
    static const char fn[] = "f8_embedding_backward";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(check_real(ctx, fn, "dwte", dwte, -1));
    F8I_TRY(check_real(ctx, fn, "dy", dy, dwte->cols));
    if (dwpe) F8I_TRY(check_real(ctx, fn, "dwpe", dwpe, dwte->cols));
    F8I_TRY(check_seq(ctx, fn, tokens, dy->rows, seq_len));
    if (dwpe && dwpe->rows < seq_len)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: dwpe has %lld rows, fewer than seq_len %lld", fn,
                         (long long)dwpe->rows, (long long)seq_len);
    if (overlaps(dy, dwte) || (dwpe && (overlaps(dy, dwpe) || overlaps(dwte, dwpe))))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: dy, dwte and dwpe must not overlap", fn);
    if (dy->rows == 0 || dy->cols == 0) return F8_OK;
    f8i_embedding_bwd_args a = {tokens, dy->rows, seq_len, dwte->rows, dwte->cols, dy->data, dy->dtype,
                                dwte->data, dwte->dtype, dwpe ? dwpe->data : NULL,
                                dwpe ? dwpe->dtype : F8_DTYPE_FP32};
    return f8i_op_embedding_bwd(ctx, &a);
}

f8_status f8_cross_entropy(f8_ctx *ctx, const f8_tensor *logits, int64_t vocab, const int32_t *targets,
                           float grad_scale, float *losses, f8_tensor *dlogits)
{
    static const char fn[] = "f8_cross_entropy";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(check_real(ctx, fn, "logits", logits, -1));
    if (dlogits) F8I_TRY(check_real(ctx, fn, "dlogits", dlogits, logits->cols));
    const int64_t T = logits->rows;
    if (dlogits && dlogits->rows != T)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: dlogits [%lld, %lld] does not match logits [%lld, %lld]", fn,
                         (long long)dlogits->rows, (long long)dlogits->cols, (long long)T, (long long)logits->cols);
    if (vocab < 1 || vocab > logits->cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: vocab %lld must be in [1, %lld] (the columns of logits)", fn,
                         (long long)vocab, (long long)logits->cols);
    if (T > 0 && !targets) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: targets is NULL", fn);
    if (T > 0 && !losses) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: losses is NULL", fn);
    if (T > INT32_MAX) return f8i_error(ctx, F8_ERR_SHAPE, "%s: %lld rows; at most 2^31 - 1", fn, (long long)T);
    if (dlogits && overlaps(dlogits, logits) &&
        (dlogits->data != logits->data || dlogits->dtype != logits->dtype))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT,
                         "%s: dlogits overlaps logits without being the same tensor (in place needs the same data "
                         "pointer and dtype)", fn);
    if (T == 0) return F8_OK;
    f8i_cross_entropy_args a = {logits->data, logits->dtype, T, logits->cols, vocab, targets, grad_scale, losses,
                                dlogits ? dlogits->data : NULL, dlogits ? dlogits->dtype : F8_DTYPE_FP32};
    return f8i_op_cross_entropy(ctx, &a);
}
