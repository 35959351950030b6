/*
 * modules/sequence.c — sequence parallelism for the norm modules
 * (LayerNormLinear, LayerNormMLP), Megatron's and TE's: with a group of P
 * ranks set, x and dx are this rank's T/P tokens; the norm runs on them and
 * its output, the first GEMM's input, is all-gathered along the tokens;
 * the backward reduce-scatters that GEMM's input gradient (each rank's
 * dgrad is a partial sum over its shard of the weight) before the norm
 * backward. The row-parallel side (reduce-scatter of the output, gather of
 * dy) stays with the caller, as the tensor-parallel sums do.
 *
 * Design note. The gather moves FP8 codes where the module runs FP8, so the
 * ranks must cast with one scale. Delayed scaling has that by construction:
 * the scale is the last step's, and the ctx's amax reduction (f8_ctx_set_comm)
 * keeps every rank's scales equal; the amax a rank records is its shard's,
 * and the MAX at the update is the whole tensor's. Current scaling computes
 * the scale from this tensor's amax, so the shards' amaxes are reduced (MAX,
 * one float) before the cast: the scale is then bitwise the one a single
 * rank derives from all the rows (a max is exact). Block scaling's column-
 * wise copy (wgrad's operand) has 1x128 tiles along the tokens, which
 * straddle the shards: there the norm output is gathered in the param dtype
 * and every rank casts the whole tensor, as one rank does. The saved state
 * keeps the gathered codes (wgrad's operand, all T rows): TE keeps the
 * shard and gathers again in the backward; one byte per element buys a
 * collective less.
 */
#include <string.h>

#include "modules/module.h"

/* rows·K elements of this rank at rank·rows·K of buf gathered in place. */
static f8_status gather(f8_module *m, void *buf, int64_t count, f8_dtype dtype)
{
    if (!m->sp) return F8_OK;
    unsigned char *mine = (unsigned char *)buf + (size_t)(f8_comm_rank(m->sp) * count) * f8_dtype_size(dtype);
    return f8_comm_all_gather(m->sp, mine, buf, count, dtype);
}

/* Current scaling over the group: amax[0] = max over the ranks of max|src|,
 * then the slot's scale, scale_inv and step amax from it, as
 * f8i_slot_prepare sets them from a whole tensor. amax: 2 floats (amax[1]
 * takes the per-rank scale the amax pass writes and is discarded). */
static f8_status group_scale(f8_module *m, f8_slot sl, const void *src, f8_dtype src_dtype, int64_t count,
                             f8_dtype out_dtype, float *amax)
{
    f8_ctx *ctx = m->ctx;
    f8i_amax_scale_args a;
    memset(&a, 0, sizeof a);
    a.src = src;
    a.src_dtype = src_dtype;
    a.count = count;
    a.scaled_max = f8i_scaled_max(ctx, out_dtype);
    a.pow2 = ctx->recipe.power_2_scales;
    a.scale = amax + 1;
    a.amax = amax;
    float *unused = NULL;
    f8_status st = f8i_op_memset_zero(ctx, amax, 2 * sizeof(float));
    if (st == F8_OK) st = f8i_op_amax_scale(ctx, &a);
    if (st == F8_OK) st = f8_comm_all_reduce(m->sp, amax, amax, 1, F8_DTYPE_FP32, F8_REDUCE_MAX);
    if (st == F8_OK) st = f8i_slot_prepare(ctx, sl, out_dtype, amax, F8_DTYPE_FP32, 1, NULL, 1, &unused);
    return st;
}

/* src [rows, cols] cast with the slot's scale as it stands (no amax pass) into out. */
static f8_status cast_with_scale(f8_module *m, f8_slot sl, const void *src, f8_dtype src_dtype, int64_t rows,
                                 int64_t cols, uint8_t *out, const f8i_qbuf *q)
{
    f8i_cast_args c = f8i_module_cast_args(m->ctx, sl, src, src_dtype, rows, cols, q);
    c.out = out;
    return f8i_op_cast(m->ctx, &c);
}

/* The slot's amax accumulator, scale and scale_inv copied to keep[3]
 * (restore 0) or back from it (restore 1): a failed collective must leave
 * nothing of its call in the slot (the norm kernel records the amax before
 * the gather). Three small copies, with a group only. */
static f8_status keep_slot(f8_module *m, f8_slot sl, float *keep, int restore)
{
    f8_ctx *ctx = m->ctx;
    float *at[3] = {f8i_slot_amax(ctx, sl), f8i_slot_scale(ctx, sl), ctx->dir[sl.direction].scale_inv + sl.index};
    f8_status st = F8_OK;
    for (int i = 0; i < 3 && st == F8_OK; i++)
        st = restore ? f8i_op_copy(ctx, at[i], keep + i, sizeof(float)) : f8i_op_copy(ctx, keep + i, at[i], sizeof(float));
    return st;
}

static f8_status norm_input(f8_module *m, const f8_tensor *x, int slot, const f8i_qbuf *q, void *hp, float *mu,
                            float *rsigma, float *amax);

f8_status f8i_module_norm_input(f8_module *m, const f8_tensor *x, int slot, const f8i_qbuf *q, void *hp, float *mu,
                                float *rsigma, float *amax)
{
    if (!m->sp || !m->fp8) return norm_input(m, x, slot, q, hp, mu, rsigma, amax);
    f8_status st = keep_slot(m, m->fwd[slot], amax + 2, 0);
    if (st == F8_OK) st = norm_input(m, x, slot, q, hp, mu, rsigma, amax);
    if (st != F8_OK) (void)keep_slot(m, m->fwd[slot], amax + 2, 1); /* the first failure is the one reported */
    return st;
}

static f8_status norm_input(f8_module *m, const f8_tensor *x, int slot, const f8i_qbuf *q, void *hp, float *mu,
                            float *rsigma, float *amax)
{
    f8_ctx *ctx = m->ctx;
    const int64_t rows = x->rows, K = m->in_features, T = f8i_sp_tokens(m, rows), n = rows * K;
    const size_t off = (size_t)((m->sp ? f8_comm_rank(m->sp) : 0) * n); /* this rank's first element */
    const f8_dtype pdt = m->param_dtype;
    const size_t pes = f8_dtype_size(pdt);
    const f8_slot sl = m->fwd[slot];
    f8_status st;
    if (!m->fp8) {
        st = f8i_norm_forward(ctx, &m->norm, x, q->data + off * pes, pdt, NULL, NULL, mu, rsigma);
        return st == F8_OK ? gather(m, q->data, n, pdt) : st;
    }
    if (!hp) { /* delayed: the norm writes the codes with the shared scale */
        st = f8i_norm_forward(ctx, &m->norm, x, q->data + off, q->dtype, &sl, q->scale_inv, mu, rsigma);
        return st == F8_OK ? gather(m, q->data, n, q->dtype) : st;
    }
    if (!m->sp && m->q.fused_rows) { /* row-wise: the norm writes the codes and the column amaxes; the cast the
                                        column-wise copy */
        float *col_amax = f8i_module_col_amax(q);
        st = f8i_norm_forward_rows(ctx, &m->norm, x, q->data, q->dtype, sl, q->scale_inv, hp, col_amax, mu, rsigma);
        if (st == F8_OK)
            st = f8i_module_quantize_cols(m, hp, pdt, T, K, F8_DIR_FORWARD, slot, q, NULL, NULL, col_amax != NULL);
        return st;
    }
    if (!m->sp || !f8i_quantizer_casts_shards(&m->q)) { /* the whole tensor cast on every rank */
        unsigned char *h = (unsigned char *)hp;
        st = f8i_norm_forward(ctx, &m->norm, x, h + off * pes, pdt, NULL, NULL, mu, rsigma);
        if (st == F8_OK) st = gather(m, hp, n, pdt);
        if (st == F8_OK) st = f8i_module_quantize(m, hp, pdt, T, K, F8_DIR_FORWARD, slot, q, NULL, NULL);
        return st;
    }
    /* current scaling over the group: one scale, then the codes gathered */
    st = f8i_norm_forward(ctx, &m->norm, x, hp, pdt, NULL, NULL, mu, rsigma);
    if (st == F8_OK) st = group_scale(m, sl, hp, pdt, n, q->dtype, amax);
    if (st == F8_OK) st = cast_with_scale(m, sl, hp, pdt, rows, K, q->data + off, q);
    if (st == F8_OK) st = gather(m, q->data, n, q->dtype);
    return st;
}

f8_status f8i_module_norm_keep_scale(f8_module *m, int slot, float *saved_scale)
{
    if (!m->fp8) return F8_OK;
    return f8i_op_copy(m->ctx, saved_scale, f8i_slot_scale(m->ctx, m->fwd[slot]), sizeof(float));
}

/* The forward's casts (f8i_module_norm_input without a group) with the
 * saved scale in place of the slot's: delayed scaling's fused norm, current
 * scaling's norm into hp and then the cast, whose kernel the forward ran
 * after its amax pass (that pass, which set the scale, is not repeated). */
f8_status f8i_module_norm_recompute(f8_module *m, const f8_saved *sv, const float *scale, const f8i_qbuf *q,
                                    void *hp)
{
    f8_ctx *ctx = m->ctx;
    const int64_t T = sv->tokens, K = m->in_features;
    if (!m->fp8) return f8i_norm_forward_scaled(ctx, &m->norm, &sv->x, q->data, m->param_dtype, NULL, NULL);
    if (!hp) return f8i_norm_forward_scaled(ctx, &m->norm, &sv->x, q->data, q->dtype, scale, q->scale_inv);
    F8I_TRY(f8i_norm_forward_scaled(ctx, &m->norm, &sv->x, hp, m->param_dtype, NULL, NULL));
    /* the forward's cast args (slot 0 is both modules' norm INPUT), with the saved scale and no
     * telemetry: the forward counted these codes */
    f8i_cast_args c = f8i_module_cast_args(ctx, m->fwd[0], hp, m->param_dtype, T, K, q);
    c.scale = scale;
    c.stats = NULL;
    return f8i_op_cast(ctx, &c);
}

f8_status f8i_module_norm_backward(f8_module *m, const f8_saved *sv, const void *dln, f8_dtype dln_dtype,
                                   const float *mu, const float *rsigma, f8_tensor *dx, int dx_add, void *reduce,
                                   float *stage, float *local)
{
    f8_ctx *ctx = m->ctx;
    f8_status st = F8_OK;
    if (m->sp) { /* Σ over the ranks of their dgrad, this rank's rows: rank 0 + 1 + ... in FP32 */
        const int64_t K = m->in_features;
        if (dln_dtype != F8_DTYPE_FP32) {
            st = f8i_op_convert(ctx, dln, dln_dtype, NULL, stage, F8_DTYPE_FP32, sv->tokens * K);
            dln = stage;
        }
        if (st == F8_OK) st = f8_comm_reduce_scatter(m->sp, dln, local, sv->x.rows * K, F8_DTYPE_FP32);
        dln = local;
        dln_dtype = F8_DTYPE_FP32;
    }
    if (st == F8_OK)
        st = f8i_norm_backward(ctx, &m->norm, dln, dln_dtype, &sv->x, mu, rsigma, dx ? dx->data : NULL,
                               dx ? dx->dtype : F8_DTYPE_FP32, dx_add, reduce);
    return st;
}

f8_status f8_module_set_sequence_parallel(f8_module *m, f8_comm *group)
{
    static const char fn[] = "f8_module_set_sequence_parallel";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!m->has_norm)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: a %s has no norm (only LayerNormLinear and LayerNormMLP "
                                                          "gather their normalised input; a row-parallel Linear's "
                                                          "reduce-scatter is the caller's)", fn, m->cls->name);
    if (group && f8_comm_ctx(group) != m->ctx)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: the group was made on another ctx", fn);
    if (group && m->recompute_norm) /* the gathered output would have to be gathered again in backward */
        return f8i_error(m->ctx, F8_ERR_UNSUPPORTED, "%s: the %s was created with recompute_norm_output, which "
                                                     "sequence parallelism does not support", fn, m->cls->name);
    f8_comm *old = m->sp;
    const size_t old_bytes = m->workspace_bytes;
    m->sp = group; /* the layouts grow by the reduce-scatter's buffers and the group amax */
    const size_t f = m->workspace(m, m->max_tokens, 0), b = m->workspace(m, m->max_tokens, 1);
    m->workspace_bytes = f > b ? f : b;
    f8_status st = f8i_scratch_reserve(m->ctx, m->workspace_bytes);
    if (st != F8_OK) m->sp = old, m->workspace_bytes = old_bytes;
    return st;
}
