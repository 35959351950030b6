/*
 * modules/linear.c — f8_linear, TE's Linear: y = x·Wᵀ + b in FP8 or in the
 * parameter dtype, written once above the backend table.
 *
 * Design note. Data flow with FP8 on (spec §5.1), in row-major GEMM terms
 * D[m, n] = Σ_k A(m, k)·B(n, k), both operands K-contiguous ("TN"):
 *   forward   x ─cast(+transpose)→ X8 [T,K] (scratch), X8ᵀ [K,T] (saved)
 *             W ─cast+transpose→ workspace W8 [N,K], W8ᵀ [K,N] (per microbatch rule)
 *             y [T,N] = X8 · W8ᵀ          A = X8,   B = W8,   fast accumulation
 *   backward  dy ─cast+transpose+dbias→ G8 [T,N], G8ᵀ [N,T] (scratch), db += Σ dy
 *             dx [T,K] = G8 · W8          A = G8,   B = W8ᵀ,  split accumulation
 *             dW [N,K] = G8ᵀ · X8         A = G8ᵀ,  B = X8ᵀ,  split accumulation
 * Every GEMM takes each operand's own scale_inv: W8's private one (written with
 * its bytes), X8ᵀ's copy saved at forward time, G8's written by its cast.
 * With FP8 off the same products run in the parameter dtype with trans flags
 * (NN dgrad, NT wgrad) and the bias gradient is a GEMM against a ones vector.
 * Scratch (ctx->scratch, shared by all modules within one call) holds what
 * does not outlive a call; its first dbias_bytes belong to the backend's cast
 * for the bias-gradient partial sums.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics.h"
#include "qtensor.h"

enum { SLOT_INPUT = 0, SLOT_WEIGHT = 1, SLOT_OUTPUT = 2 };
enum { SLOT_GRAD_OUTPUT = 0, SLOT_GRAD_INPUT = 1 };

struct f8_linear {
    f8_ctx *ctx;
    f8_linear_config cfg;
    void *params;       /* one allocation: w, b, dw, db, ones */
    void *w;            /* (N, K) param dtype */
    void *b;            /* (N) or NULL */
    void *dw;           /* (N, K) */
    void *db;           /* (N) or NULL */
    void *ones;         /* (max_tokens) param dtype, FP8-off bias gradient */
    float *main_grad;   /* (N, K) caller's, with fuse_wgrad_accumulation */
    f8_qtensor *w8;     /* the weight workspace (FP8 on) */
    int w8_filled;      /* the workspace has been cast at least once */
    f8_slot fwd[3], bwd[2];
    size_t dbias_bytes; /* scratch prefix for the backend's dbias partials */
};

struct f8_linear_saved {
    f8_linear *owner;
    void *block;        /* FP8: scale_inv (256 B) then X8ᵀ (K, max_tokens) */
    float *x_scale_inv; /* (1) the scale_inv X8ᵀ was cast with */
    uint8_t *xt;        /* (K, T) */
    f8_tensor x;        /* FP8 off: the caller's x, by reference */
    int64_t tokens;
    f8_microbatch microbatch;
    int filled;         /* a forward filled it and no backward consumed it */
};

/* Room the backend's cast may need for bias-gradient partial sums of a
 * [rows, cols] tensor: one FP32 per column per 16-row tile at most. */
static size_t dbias_scratch_bytes(int64_t rows, int64_t cols)
{
    return f8i_align256((size_t)((rows + 15) / 16) * (size_t)cols * sizeof(float) + 256);
}

f8_linear_config f8_linear_config_default(int64_t in_features, int64_t out_features)
{
    f8_linear_config c;
    c.in_features = in_features;
    c.out_features = out_features;
    c.bias = 1;
    c.param_dtype = F8_DTYPE_FP32;
    c.fp8 = 1;
    c.fuse_wgrad_accumulation = 0;
    c.max_tokens = 4096;
    c.seed = 1;
    return c;
}

static f8_status config_check(f8_ctx *ctx, const f8_linear_config *c)
{
    if (c->in_features < 1 || c->out_features < 1 || c->in_features > (1 << 24) || c->out_features > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_linear_create: in_features %lld and out_features %lld must be in [1, 2^24]",
                         (long long)c->in_features, (long long)c->out_features);
    if (c->max_tokens < 0 || c->max_tokens > (1 << 24))
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_linear_create: max_tokens %lld outside [0, 2^24]", (long long)c->max_tokens);
    if (c->param_dtype != F8_DTYPE_FP32 && c->param_dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "f8_linear_create: param_dtype must be fp32 or bf16, not %s",
                         f8_dtype_name(c->param_dtype));
    return F8_OK;
}

/* W ~ N(0, 0.02^2) from the seed (splitmix64 + Box-Muller), b = 0, uploaded. */
static f8_status init_params(f8_linear *l)
{
    const int64_t n = l->cfg.out_features * l->cfg.in_features;
    const size_t es = f8_dtype_size(l->cfg.param_dtype);
    unsigned char *host = (unsigned char *)malloc((size_t)n * es);
    if (!host) return f8i_error(l->ctx, F8_ERR_OUT_OF_MEMORY, "f8_linear_create: out of host memory for init");
    uint64_t s = l->cfg.seed;
    for (int64_t i = 0; i < n; i++) {
        double u[2];
        for (int j = 0; j < 2; j++) {
            uint64_t z = (s += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            u[j] = ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        }
        float v = (float)(0.02 * sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
        if (es == 2) ((uint16_t *)host)[i] = f8i_bf16_from_float(v);
        else ((float *)host)[i] = v;
    }
    f8_status st = l->ctx->be->upload(l->ctx, l->w, host, (size_t)n * es);
    free(host);
    return st;
}

f8_status f8_linear_create(f8_ctx *ctx, const f8_linear_config *config, f8_linear **out)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_create: linear (the output) is NULL");
    *out = NULL;
    if (!config) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_create: config is NULL");
    f8_status st = config_check(ctx, config);
    if (st != F8_OK) return st;

    f8_linear *l = (f8_linear *)calloc(1, sizeof *l);
    if (!l) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_linear_create: out of host memory");
    l->ctx = ctx;
    l->cfg = *config;
    const int64_t N = config->out_features, K = config->in_features, T = config->max_tokens;
    const size_t es = f8_dtype_size(config->param_dtype);
    const size_t wb = f8i_align256((size_t)(N * K) * es), bb = config->bias ? f8i_align256((size_t)N * es) : 0;
    const size_t ob = config->fp8 ? 0 : f8i_align256((size_t)(T ? T : 1) * es);
    st = ctx->be->alloc(ctx, 2 * wb + 2 * bb + ob, &l->params);
    if (st == F8_OK) {
        unsigned char *p = (unsigned char *)l->params;
        l->w = p;
        l->dw = p + wb;
        l->b = bb ? p + 2 * wb : NULL;
        l->db = bb ? p + 2 * wb + bb : NULL;
        l->ones = ob ? p + 2 * wb + 2 * bb : NULL;
        st = ctx->be->memset_zero(ctx, l->params, 2 * wb + 2 * bb);
    }
    if (st == F8_OK && l->ones) {
        /* The FP-off bias gradient is Σ_t dy(t, n) = ones · dy: keep a ones row. */
        float *host = (float *)malloc((size_t)(T ? T : 1) * sizeof(float));
        if (!host) st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_linear_create: out of host memory");
        for (int64_t i = 0; host && i < (T ? T : 1); i++) host[i] = 1.0f;
        if (st == F8_OK && es == 4) st = ctx->be->upload(ctx, l->ones, host, (size_t)(T ? T : 1) * 4);
        if (st == F8_OK && es == 2) {
            uint16_t one = f8i_bf16_from_float(1.0f);
            uint16_t *h16 = (uint16_t *)host; /* 2-byte values fit in the 4-byte buffer */
            for (int64_t i = 0; i < (T ? T : 1); i++) h16[i] = one;
            st = ctx->be->upload(ctx, l->ones, h16, (size_t)(T ? T : 1) * 2);
        }
        free(host);
    }
    if (st == F8_OK) st = init_params(l);
    if (st == F8_OK) st = f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 3, l->fwd);
    if (st == F8_OK) st = f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, 2, l->bwd);
    if (st == F8_OK && config->fp8) {
        st = f8_qtensor_create(ctx, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), N, K, &l->w8);
        if (st == F8_OK) st = f8i_qtensor_reserve_transpose(l->w8);
        /* forward: X8 + its scale_inv; backward: dbias partials, G8, G8ᵀ, scale_inv */
        l->dbias_bytes = dbias_scratch_bytes(T, N);
        size_t fwd = f8i_align256((size_t)(T * K)) + 256;
        size_t bwd = l->dbias_bytes + 2 * f8i_align256((size_t)(T * N)) + 256;
        if (st == F8_OK) st = f8i_scratch_reserve(ctx, fwd > bwd ? fwd : bwd);
    }
    if (st == F8_OK) st = ctx->be->synchronize(ctx);
    if (st != F8_OK) {
        f8_linear_destroy(l);
        return st;
    }
    *out = l;
    return F8_OK;
}

void f8_linear_destroy(f8_linear *l)
{
    if (!l) return;
    f8_qtensor_destroy(l->w8);
    if (l->params) l->ctx->be->free(l->ctx, l->params);
    free(l);
}

static f8_tensor param_view(const f8_linear *l, void *p, int64_t rows, int64_t cols)
{
    return f8_tensor_make(p, l->cfg.param_dtype, rows, cols);
}

static f8_status view_out(f8_linear *l, f8_tensor *v, const char *fn, void *p, int64_t rows, int64_t cols)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    if (!v) return f8i_error(l->ctx, F8_ERR_INVALID_ARGUMENT, "%s: the output view is NULL", fn);
    if (!p) return f8i_error(l->ctx, F8_ERR_STATE, "%s: this Linear was created without a bias", fn);
    *v = param_view(l, p, rows, cols);
    return F8_OK;
}

f8_status f8_linear_weight(f8_linear *l, f8_tensor *v)
{
    return view_out(l, v, "f8_linear_weight", l ? l->w : NULL, l ? l->cfg.out_features : 0, l ? l->cfg.in_features : 0);
}

f8_status f8_linear_bias(f8_linear *l, f8_tensor *v)
{
    return view_out(l, v, "f8_linear_bias", l ? l->b : NULL, 1, l ? l->cfg.out_features : 0);
}

f8_status f8_linear_weight_grad(f8_linear *l, f8_tensor *v)
{
    return view_out(l, v, "f8_linear_weight_grad", l ? l->dw : NULL, l ? l->cfg.out_features : 0,
                    l ? l->cfg.in_features : 0);
}

f8_status f8_linear_bias_grad(f8_linear *l, f8_tensor *v)
{
    return view_out(l, v, "f8_linear_bias_grad", l ? l->db : NULL, 1, l ? l->cfg.out_features : 0);
}

f8_status f8_linear_slot(const f8_linear *l, f8_direction direction, int i, f8_slot *slot)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    int n = direction == F8_DIR_FORWARD ? 3 : direction == F8_DIR_BACKWARD ? 2 : 0;
    if (!slot || i < 0 || i >= n)
        return f8i_error(l->ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_slot: no slot %d in direction %d (or slot is NULL)", i,
                         (int)direction);
    *slot = direction == F8_DIR_FORWARD ? l->fwd[i] : l->bwd[i];
    return F8_OK;
}

const f8_qtensor *f8_linear_weight_workspace(const f8_linear *l) { return l ? l->w8 : NULL; }

f8_status f8_linear_set_main_grad(f8_linear *l, float *main_grad)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    if (!l->cfg.fuse_wgrad_accumulation)
        return f8i_error(l->ctx, F8_ERR_STATE, "f8_linear_set_main_grad: the Linear was created without "
                                               "fuse_wgrad_accumulation");
    l->main_grad = main_grad;
    return F8_OK;
}

f8_status f8_linear_zero_grad(f8_linear *l)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    const size_t es = f8_dtype_size(l->cfg.param_dtype);
    f8_status st = l->ctx->be->memset_zero(l->ctx, l->dw, (size_t)(l->cfg.out_features * l->cfg.in_features) * es);
    if (st == F8_OK && l->db) st = l->ctx->be->memset_zero(l->ctx, l->db, (size_t)l->cfg.out_features * es);
    return st;
}

f8_status f8_linear_saved_create(f8_linear *l, f8_linear_saved **out)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(l->ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_saved_create: saved (the output) is NULL");
    *out = NULL;
    f8_linear_saved *s = (f8_linear_saved *)calloc(1, sizeof *s);
    if (!s) return f8i_error(l->ctx, F8_ERR_OUT_OF_MEMORY, "f8_linear_saved_create: out of host memory");
    s->owner = l;
    if (l->cfg.fp8) {
        size_t bytes = 256 + f8i_align256((size_t)(l->cfg.in_features * l->cfg.max_tokens));
        f8_status st = l->ctx->be->alloc(l->ctx, bytes, &s->block);
        if (st != F8_OK) {
            free(s);
            return st;
        }
        s->x_scale_inv = (float *)s->block;
        s->xt = (uint8_t *)s->block + 256;
    }
    *out = s;
    return F8_OK;
}

void f8_linear_saved_destroy(f8_linear_saved *s)
{
    if (!s) return;
    if (s->block) s->owner->ctx->be->free(s->owner->ctx, s->block);
    free(s);
}

/* Check an activation tensor [rows, cols]; FP8 off it must be in param dtype. */
static f8_status act_check(f8_linear *l, const f8_tensor *t, const char *name, int64_t rows, int64_t cols, int must_param)
{
    f8_status st = f8i_check_tensor(l->ctx, t, name);
    if (st != F8_OK) return st;
    if (t->dtype != F8_DTYPE_FP32 && t->dtype != F8_DTYPE_BF16)
        return f8i_error(l->ctx, F8_ERR_DTYPE, "%s must be fp32 or bf16, not %s", name, f8_dtype_name(t->dtype));
    if (must_param && t->dtype != l->cfg.param_dtype)
        return f8i_error(l->ctx, F8_ERR_DTYPE, "%s is %s but FP8 is off and the parameters are %s", name,
                         f8_dtype_name(t->dtype), f8_dtype_name(l->cfg.param_dtype));
    if ((rows >= 0 && t->rows != rows) || t->cols != cols)
        return f8i_error(l->ctx, F8_ERR_SHAPE, "%s is [%lld, %lld], expected [%s%lld, %lld]", name, (long long)t->rows,
                         (long long)t->cols, rows >= 0 ? "" : "T, ", (long long)(rows >= 0 ? rows : 0), (long long)cols);
    return F8_OK;
}

/* Fill the weight workspace (data, transpose, private scale_inv) when the
 * microbatch rule asks for it or it was never filled. In graph mode a filled
 * workspace is always cast, under the ctx noop flag, so the device decides. */
static f8_status weight_cast(f8_linear *l, f8_microbatch mb, int with_transpose)
{
    const float *noop = NULL;
    if (l->w8_filled && l->ctx->weight_noop) {
        noop = l->ctx->noop;
        with_transpose = 1; /* keep the cached transpose in step with the data */
    } else if (mb == F8_MICROBATCH_NOT_FIRST && l->w8_filled) {
        return F8_OK;
    }
    f8_tensor w = param_view(l, l->w, l->cfg.out_features, l->cfg.in_features);
    f8_status st = f8_qtensor_quantize(l->w8, &w, l->fwd[SLOT_WEIGHT], with_transpose, noop);
    if (st == F8_OK) l->w8_filled = 1;
    return st;
}

static f8i_gemm_args gemm_args(int64_t m, int64_t n, int64_t k)
{
    f8i_gemm_args g;
    memset(&g, 0, sizeof g);
    g.m = m;
    g.n = n;
    g.k = k;
    return g;
}

f8_status f8_linear_forward(f8_linear *l, const f8_tensor *x, f8_tensor *y, f8_microbatch mb, f8_linear_saved *saved)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = l->ctx;
    const int64_t N = l->cfg.out_features, K = l->cfg.in_features;
    f8_status st = act_check(l, x, "f8_linear_forward: x", -1, K, !l->cfg.fp8);
    if (st != F8_OK) return st;
    const int64_t T = x->rows;
    if (T > l->cfg.max_tokens)
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_linear_forward: x has %lld tokens, more than config.max_tokens %lld",
                         (long long)T, (long long)l->cfg.max_tokens);
    st = act_check(l, y, "f8_linear_forward: y", T, N, 0);
    if (st != F8_OK) return st;
    if (mb != F8_MICROBATCH_NONE && mb != F8_MICROBATCH_FIRST && mb != F8_MICROBATCH_NOT_FIRST)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_forward: microbatch %d is not NONE, FIRST or NOT_FIRST",
                         (int)mb);
    if (saved && saved->owner != l)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_forward: saved belongs to another Linear");

    f8i_gemm_args g = gemm_args(T, N, K);
    g.d = y->data;
    g.d_dtype = y->dtype;
    g.bias = l->b;
    g.bias_dtype = l->cfg.param_dtype;
    if (!l->cfg.fp8) {
        g.a = x->data;
        g.a_dtype = x->dtype;
        g.b = l->w;
        g.b_dtype = l->cfg.param_dtype;
        st = ctx->be->gemm(ctx, &g);
        if (st == F8_OK && saved) saved->x = *x;
    } else {
        st = weight_cast(l, mb, saved != NULL);
        uint8_t *x8 = (uint8_t *)ctx->scratch;
        float *x_sinv = saved ? saved->x_scale_inv : (float *)(x8 + f8i_align256((size_t)(T * K)));
        f8i_cast_args c;
        memset(&c, 0, sizeof c);
        c.src = x->data;
        c.src_dtype = x->dtype;
        c.rows = T;
        c.cols = K;
        c.out_dtype = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD);
        c.out = x8;
        c.out_t = saved ? saved->xt : NULL;
        c.scale = f8i_slot_scale(ctx, l->fwd[SLOT_INPUT]);
        c.amax = f8i_slot_amax(ctx, l->fwd[SLOT_INPUT]);
        c.scale_inv = x_sinv;
        if (st == F8_OK) st = ctx->be->cast(ctx, &c);
        g.a = x8;
        g.a_dtype = c.out_dtype;
        g.a_scale_inv = x_sinv;
        g.b = l->w8->data;
        g.b_dtype = l->w8->dtype;
        g.b_scale_inv = l->w8->scale_inv;
        if (st == F8_OK) st = ctx->be->gemm(ctx, &g);
    }
    if (st == F8_OK && saved) {
        saved->tokens = T;
        saved->microbatch = mb;
        saved->filled = 1;
    }
    return st;
}

/* dW into the module's gradient (accumulate) or the caller's main_grad (beta
 * from the forward's microbatch rule, spec §4.3). */
static void wgrad_target(f8_linear *l, const f8_linear_saved *s, f8i_gemm_args *g)
{
    if (l->cfg.fuse_wgrad_accumulation) {
        g->d = l->main_grad;
        g->d_dtype = F8_DTYPE_FP32;
        g->accumulate = s->microbatch != F8_MICROBATCH_FIRST;
    } else {
        g->d = l->dw;
        g->d_dtype = l->cfg.param_dtype;
        g->accumulate = 1;
    }
}

static f8_status backward_fp8(f8_linear *l, f8_linear_saved *s, const f8_tensor *dy, f8_tensor *dx)
{
    f8_ctx *ctx = l->ctx;
    const int64_t T = s->tokens, N = l->cfg.out_features, K = l->cfg.in_features;
    unsigned char *p = (unsigned char *)ctx->scratch + l->dbias_bytes;
    uint8_t *g8 = p, *g8t = p + f8i_align256((size_t)(T * N));
    float *g_sinv = (float *)(g8t + f8i_align256((size_t)(T * N)));
    const f8_dtype gdt = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);

    f8i_cast_args c;
    memset(&c, 0, sizeof c);
    c.src = dy->data;
    c.src_dtype = dy->dtype;
    c.rows = T;
    c.cols = N;
    c.out_dtype = gdt;
    c.out = g8;
    c.out_t = g8t;
    c.scale = f8i_slot_scale(ctx, l->bwd[SLOT_GRAD_OUTPUT]);
    c.amax = f8i_slot_amax(ctx, l->bwd[SLOT_GRAD_OUTPUT]);
    c.scale_inv = g_sinv;
    c.dbias = l->db;
    c.dbias_dtype = l->cfg.param_dtype;
    c.dbias_accumulate = 1;
    f8_status st = ctx->be->cast(ctx, &c);

    if (st == F8_OK && dx) {
        st = f8_qtensor_transpose(l->w8, NULL); /* no-op when the forward cast made it */
        f8i_gemm_args g = gemm_args(T, K, N);
        g.a = g8;
        g.a_dtype = gdt;
        g.a_scale_inv = g_sinv;
        g.b = l->w8->t;
        g.b_dtype = l->w8->dtype;
        g.b_scale_inv = l->w8->scale_inv;
        g.d = dx->data;
        g.d_dtype = dx->dtype;
        g.split_accum = 1;
        if (st == F8_OK) st = ctx->be->gemm(ctx, &g);
    }
    if (st == F8_OK) {
        f8i_gemm_args g = gemm_args(N, K, T);
        g.a = g8t;
        g.a_dtype = gdt;
        g.a_scale_inv = g_sinv;
        g.b = s->xt;
        g.b_dtype = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD);
        g.b_scale_inv = s->x_scale_inv;
        g.split_accum = 1;
        wgrad_target(l, s, &g);
        st = ctx->be->gemm(ctx, &g);
    }
    return st;
}

static f8_status backward_hp(f8_linear *l, f8_linear_saved *s, const f8_tensor *dy, f8_tensor *dx)
{
    f8_ctx *ctx = l->ctx;
    const int64_t T = s->tokens, N = l->cfg.out_features, K = l->cfg.in_features;
    const f8_dtype pdt = l->cfg.param_dtype;
    f8_status st = F8_OK;
    if (dx) { /* dx[T,K] = dy[T,N] · W[N,K]: B(k, n) = W stored [N,K] */
        f8i_gemm_args g = gemm_args(T, K, N);
        g.a = dy->data;
        g.a_dtype = pdt;
        g.b = l->w;
        g.b_dtype = pdt;
        g.b_trans = 1;
        g.d = dx->data;
        g.d_dtype = dx->dtype;
        st = ctx->be->gemm(ctx, &g);
    }
    if (st == F8_OK) { /* dW[N,K] = dyᵀ · x: A(n, t) = dy stored [T,N], B(k, t) = x stored [T,K] */
        f8i_gemm_args g = gemm_args(N, K, T);
        g.a = dy->data;
        g.a_dtype = pdt;
        g.a_trans = 1;
        g.b = s->x.data;
        g.b_dtype = pdt;
        g.b_trans = 1;
        wgrad_target(l, s, &g);
        st = ctx->be->gemm(ctx, &g);
    }
    if (st == F8_OK && l->db) { /* db[1,N] += ones[1,T] · dy: B(n, t) = dy stored [T,N] */
        f8i_gemm_args g = gemm_args(1, N, T);
        g.a = l->ones;
        g.a_dtype = pdt;
        g.b = dy->data;
        g.b_dtype = pdt;
        g.b_trans = 1;
        g.d = l->db;
        g.d_dtype = pdt;
        g.accumulate = 1;
        st = ctx->be->gemm(ctx, &g);
    }
    return st;
}

f8_status f8_linear_backward(f8_linear *l, f8_linear_saved *s, const f8_tensor *dy, f8_tensor *dx)
{
    if (!l) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = l->ctx;
    if (!s) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_backward: saved is NULL");
    if (s->owner != l) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_linear_backward: saved belongs to another Linear");
    if (!s->filled)
        return f8i_error(ctx, F8_ERR_STATE, "f8_linear_backward: saved holds no forward (never filled, or already consumed "
                                            "by a backward)");
    const int64_t T = s->tokens, N = l->cfg.out_features, K = l->cfg.in_features;
    f8_status st = act_check(l, dy, "f8_linear_backward: dy", T, N, !l->cfg.fp8);
    if (st == F8_OK && dx) st = act_check(l, dx, "f8_linear_backward: dx", T, K, 0);
    if (st != F8_OK) return st;
    if (l->cfg.fuse_wgrad_accumulation && !l->main_grad)
        return f8i_error(ctx, F8_ERR_STATE, "f8_linear_backward: fuse_wgrad_accumulation is on but no main_grad was set "
                                            "(f8_linear_set_main_grad)");
    st = l->cfg.fp8 ? backward_fp8(l, s, dy, dx) : backward_hp(l, s, dy, dx);
    if (st == F8_OK) s->filled = 0;
    return st;
}
