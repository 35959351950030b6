/*
 * rope.c — f8_rope, rotary position embeddings on an attention's qkv rows:
 * the public entry points, the frequencies and the cos/sin table.
 *
 * Design note. The library has no separate QKV split or layout pass (the
 * attention kernels read q, k and v straight from the fused GEMM's rows), so
 * RoPE is one in-place pass over the q and k heads: a read and a write of
 * (n_head + n_kv_head)·head_dim of each row, v not touched. In place is
 * what a trainer wants: the linear's backward needs its input, not its
 * output, so nothing keeps the unrotated q and k. The backward is the
 * transpose, the same pass with sin negated (attention.h's f8i_rope_args).
 *
 * The table holds cos and sin for every (position, frequency): computed
 * once on the host in FP64 from FP32 angles, uploaded at create. Both
 * backends read the same FP32 values and apply them in the same order, so
 * they agree bit for bit and no transcendental runs per call.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "nn/attention.h"

struct f8_rope {
    f8_ctx *ctx;
    f8_rope_config cfg;
    float *table; /* backend memory: cos (max_seq, hd/2), then sin (max_seq, hd/2) */
};

f8_rope_config f8_rope_config_default(int64_t n_head, int64_t n_kv_head, int64_t head_dim, int64_t max_seq)
{
    f8_rope_config c;
    memset(&c, 0, sizeof c);
    c.n_head = n_head;
    c.n_kv_head = n_kv_head;
    c.head_dim = head_dim;
    c.max_seq = max_seq;
    c.theta = 10000.0;
    c.scaling = F8_ROPE_SCALING_NONE;
    c.factor = 8.0;
    c.low_freq_factor = 1.0;
    c.high_freq_factor = 4.0;
    c.original_max_position = 8192;
    return c;
}

/* The config's checks (blocks.h); a message only with a ctx. */
static f8_status config_check(f8_ctx *ctx, const f8_rope_config *c)
{
    const char *fn = "f8_rope_create";
    f8_status st = F8_OK;
    if (c->n_head < 1 || c->n_head > (1 << 16) || c->n_kv_head < 1 || c->n_head % c->n_kv_head != 0 ||
        c->head_dim < 2 || c->head_dim > (1 << 16) || c->head_dim % 2 != 0 || c->max_seq < 1 || c->max_seq > (1 << 24))
        st = F8_ERR_SHAPE;
    else if (!(isfinite(c->theta) && c->theta > 1.0))
        st = F8_ERR_INVALID_ARGUMENT;
    else if (c->scaling != F8_ROPE_SCALING_NONE && c->scaling != F8_ROPE_SCALING_LLAMA3)
        st = F8_ERR_INVALID_ARGUMENT;
    else if (c->scaling == F8_ROPE_SCALING_LLAMA3 &&
             !(isfinite(c->factor) && c->factor >= 1.0 && isfinite(c->low_freq_factor) && c->low_freq_factor > 0.0 &&
               isfinite(c->high_freq_factor) && c->high_freq_factor > c->low_freq_factor && c->original_max_position >= 1))
        st = F8_ERR_INVALID_ARGUMENT;
    if (st == F8_OK || !ctx) return st;
    if (st == F8_ERR_SHAPE)
        return f8i_error(ctx, st,
                         "%s: n_head %lld, n_kv_head %lld (must divide n_head), head_dim %lld (even, 2..2^16) and "
                         "max_seq %lld (1..2^24) out of range",
                         fn, (long long)c->n_head, (long long)c->n_kv_head, (long long)c->head_dim, (long long)c->max_seq);
    return f8i_error(ctx, st,
                     "%s: theta %g must be finite and > 1, scaling %d none (0) or llama3 (1); llama3 needs factor %g >= 1, "
                     "0 < low_freq_factor %g < high_freq_factor %g, original_max_position %lld >= 1",
                     fn, c->theta, (int)c->scaling, c->factor, c->low_freq_factor, c->high_freq_factor,
                     (long long)c->original_max_position);
}

/* ω_d (blocks.h), FP64. */
static void inv_freq_of(const f8_rope_config *c, double *w)
{
    const int64_t half = c->head_dim / 2;
    const double pi = 3.14159265358979323846;
    for (int64_t d = 0; d < half; d++) {
        double f = 1.0 / pow(c->theta, (double)(2 * d) / (double)c->head_dim);
        if (c->scaling == F8_ROPE_SCALING_LLAMA3) {
            const double L = (double)c->original_max_position, wavelen = 2.0 * pi / f;
            if (wavelen > L / c->low_freq_factor) {
                f = f / c->factor;
            } else if (wavelen >= L / c->high_freq_factor) { /* medium: between the two wavelengths */
                const double s = (L / wavelen - c->low_freq_factor) / (c->high_freq_factor - c->low_freq_factor);
                f = (1.0 - s) * f / c->factor + s * f;
            }
        }
        w[d] = f;
    }
}

f8_status f8_rope_inv_freq(const f8_rope_config *config, double *inv_freq)
{
    if (!config || !inv_freq) return F8_ERR_INVALID_ARGUMENT;
    const f8_status st = config_check(NULL, config);
    if (st != F8_OK) return st;
    inv_freq_of(config, inv_freq);
    return F8_OK;
}

f8_status f8_rope_create(f8_ctx *ctx, const f8_rope_config *config, f8_rope **out)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_rope_create: rope (the output) is NULL");
    *out = NULL;
    if (!config) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_rope_create: config is NULL");
    if (ctx->capturing) {
        if (ctx->capture_error == F8_OK) ctx->capture_error = F8_ERR_STATE;
        return f8i_error(ctx, F8_ERR_STATE, "f8_rope_create: not allowed while capturing a graph");
    }
    f8_status st = config_check(ctx, config);
    if (st != F8_OK) return st;
    const int64_t half = config->head_dim / 2, n = config->max_seq * half;
    double *w = (double *)malloc((size_t)half * sizeof *w);
    float *host = (float *)malloc((size_t)(2 * n) * sizeof *host);
    f8_rope *r = (f8_rope *)calloc(1, sizeof *r);
    if (!w || !host || !r) {
        free(w), free(host), free(r);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_rope_create: out of host memory");
    }
    inv_freq_of(config, w);
    for (int64_t p = 0; p < config->max_seq; p++) {
        for (int64_t d = 0; d < half; d++) {
            const float angle = (float)p * (float)w[d]; /* one FP32 product, as transformers */
            host[p * half + d] = (float)cos((double)angle);
            host[n + p * half + d] = (float)sin((double)angle);
        }
    }
    free(w);
    const size_t bytes = (size_t)(2 * n) * sizeof(float);
    st = f8i_alloc(ctx, F8_MEM_OTHER, NULL, bytes, (void **)&r->table);
    if (st == F8_OK) st = ctx->be->upload(ctx, r->table, host, bytes);
    free(host);
    if (st != F8_OK) {
        f8i_free(ctx, r->table);
        free(r);
        return st;
    }
    r->ctx = ctx;
    r->cfg = *config;
    *out = r;
    return F8_OK;
}

void f8_rope_destroy(f8_rope *r)
{
    if (!r) return;
    f8i_free(r->ctx, r->table);
    free(r);
}

static f8_status apply(f8_rope *r, f8_tensor *x, int64_t seq, int inverse, const char *fn)
{
    if (!r) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = r->ctx;
    const f8_rope_config *c = &r->cfg;
    f8_status st = f8i_check_tensor(ctx, x, fn);
    if (st != F8_OK) return st;
    if (x->dtype != F8_DTYPE_FP32 && x->dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: the tensor is %s, not fp32 or bf16", fn, f8_dtype_name(x->dtype));
    const int64_t width = (c->n_head + 2 * c->n_kv_head) * c->head_dim;
    if (x->cols != width)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: the tensor has %lld columns, not (n_head %lld + 2·n_kv_head %lld)·head_dim %lld",
                         fn, (long long)x->cols, (long long)c->n_head, (long long)c->n_kv_head, (long long)c->head_dim);
    if (seq < 1 || seq > c->max_seq)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s: seq %lld outside [1, max_seq %lld]", fn, (long long)seq,
                         (long long)c->max_seq);
    if (x->rows == 0) return F8_OK;
    f8i_rope_args a;
    memset(&a, 0, sizeof a); /* recorded byte for byte while capturing */
    a.qkv = x->data;
    a.dtype = x->dtype;
    a.rows = x->rows;
    a.seq = seq;
    a.n_head = c->n_head;
    a.n_kv_head = c->n_kv_head;
    a.head_dim = c->head_dim;
    a.table = r->table;
    a.table_rows = c->max_seq;
    a.inverse = inverse;
    return f8i_op_rope(ctx, &a);
}

f8_status f8_rope_forward(f8_rope *r, f8_tensor *qkv, int64_t seq) { return apply(r, qkv, seq, 0, "f8_rope_forward: qkv"); }
f8_status f8_rope_backward(f8_rope *r, f8_tensor *dqkv, int64_t seq)
{
    return apply(r, dqkv, seq, 1, "f8_rope_backward: dqkv");
}

/* For the ONNX exporter (nn/attention.h): the config, the ctx, the cos/sin table in backend memory. */
const f8_rope_config *f8i_rope_config(const f8_rope *r) { return &r->cfg; }
f8_ctx *f8i_rope_ctx(const f8_rope *r) { return r->ctx; }
const float *f8i_rope_table(const f8_rope *r) { return r->table; }
