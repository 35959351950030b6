/*
 * dp.c — ZeRO-1 data parallelism (dp.h).
 *
 * Design note. The parameters are laid end to end in one flat index space,
 * each starting at a multiple of ALIGN elements (256-byte aligned FP32, so
 * every piece suits the vector paths); the space is padded to a multiple of
 * ranks x ALIGN and cut into `size` equal shards. Rank r owns shard r:
 *   gflat  (N) FP32   every gradient, converted from its dtype
 *   gshard (S) FP32   reduce-scatter of gflat: the summed gradient of shard r
 *   pflat  (N) dtype  the parameters; shard r is what AdamW updates, then the
 *                     all-gather fills the rest, and each parameter is
 *                     copied back into the model. pflat is gflat's memory
 *                     (free once reduce-scattered; N x 4 bytes hold N of any
 *                     dtype), so DP adds N FP32 and S moments, not 2N.
 * Padding (between pieces, at the end) is never registered with the
 * optimizer nor copied back, so whatever the two uses leave there is inert.
 * The optimizer registers one piece per parameter that meets shard r (the
 * piece's weight decay is its parameter's), so it keeps moments for the
 * shard only, and takes its global norm over the ranks (f8_adamw_set_comm).
 * Buckets: by default one, reduced after the backward. With overlap, one
 * per transformer block plus one for the embeddings and head, each sharded
 * on its own (rank r owns slice r of every bucket) and reduce-scattered
 * from gpt's grads_ready as soon as the last microbatch's backward has
 * passed its block; on NCCL those run on the comm's stream alongside the
 * rest of the backward (f8_comm_set_async), and dp_step joins them
 * (f8_comm_wait) before the optimizer. Summation: CPU ranks add rank 0 + rank 1 + ... in FP32; the
 * one-rank trainer accumulates microbatch by microbatch in the modules, so
 * the two agree within rounding, not bit for bit (the test's tolerance).
 * The model parameters all have one dtype (FP32 or BF16): pflat moves it.
 *
 * FP8 primary weights (--fp8-weights, gpt_fp8_weight): their gradients are
 * reduce-scattered with the rest, but they sit in buckets of their own
 * (after the other parameters of the same bucket group), so their gather
 * moves codes: rank r keeps FP32 masters for its pieces only (master, S8
 * floats), AdamW updates those, each piece is cast into p8 (1 byte per
 * element, the flat layout of the FP8 buckets) with the weight slot's scale
 * (f8_module_quantize_weight_part: the slot's scale is the same on every
 * rank, since f8_ctx_update_weight_scales MAX-reduces the amaxes), the
 * FP8 buckets are all-gathered as bytes, and every rank writes the whole
 * weight's codes into its module (f8_module_write_weight_codes: scale_inv
 * and the transpose as f8_module_write_weight leaves them). Then the weight
 * scales are updated from the reduced amaxes of all the pieces: the same
 * codes and scales as one rank writing its masters, for the same masters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp.h"
#include "try.h"

#define ALIGN 64

typedef struct dp_param {
    f8_tensor p, g;
    int decay;
    int64_t n, off;  /* elements, offset in the flat space */
    int64_t layer;   /* gpt's block of the parameter, -1 for the embeddings and head */
    int fp8;         /* its FP8 weight index k (gpt_fp8_weight), or -1 */
    f8_module *mod;  /* its module and parameter (the table entry's) */
    f8_param which;
    int order;       /* its index in the parameter table, filtered (the checkpoint's names) */
    int bucket;
} dp_param;

/* A bucket: consecutive parameters reduced by one reduce-scatter, sharded on
 * its own (rank r owns [base + r·slice, base + (r+1)·slice) of it). */
typedef struct dp_bucket {
    int64_t base, size, slice; /* flat offset, elements (a multiple of ranks x ALIGN), size / ranks */
    int64_t gs_off;            /* where this rank's slice sits in gshard */
    int p0, p1;                /* its parameters [p0, p1) */
    int64_t layer;
    int fp8;                   /* FP8 weights only: gathered as codes from p8 */
    int64_t p8_off;            /* fp8: where the bucket's codes start in p8 */
} dp_bucket;

typedef struct dp_piece {
    int param;       /* index into params */
    int64_t lo, hi;  /* flat range [lo, hi) inside this rank's shard */
    int64_t moff;    /* an FP8 weight's piece: where its masters start in master */
} dp_piece;

struct dp {
    gpt *model;
    f8_comm *comm;
    f8_ctx *ctx;
    int rank, size;
    f8_dtype dtype;
    dp_param *params;
    int n_params, cap;
    dp_piece *pieces;
    int n_pieces;
    dp_bucket *buckets;
    int n_buckets;
    int overlap;     /* one bucket per block, reduced from gpt's grads_ready */
    int64_t N, S;    /* flat elements, shard elements */
    float *gflat, *gshard;
    void *pflat;
    f8_adamw *opt;
    f8_adamw_moments moments; /* how opt keeps its moments (the checkpoint's streams) */
    int64_t align;   /* pieces start at multiples of it: ALIGN, or F8_ADAMW_FP8_BLOCK with FP8 moments */
    float *master;   /* (S8) FP32 masters of this rank's FP8 weight pieces, or NULL */
    int64_t S8;
    uint8_t *p8;     /* the FP8 buckets' codes, end to end (n8 bytes) */
    int64_t n8;
    int64_t gathered[2]; /* bytes handed to dp_step's all-gathers: high precision, FP8 codes */
};

static f8_status collect(void *user, const model_param *e)
{
    dp *d = (dp *)user;
    if (d->n_params == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        dp_param *t = (dp_param *)realloc(d->params, (size_t)cap * sizeof *t);
        if (!t) return F8_ERR_OUT_OF_MEMORY;
        d->params = t;
        d->cap = cap;
    }
    dp_param *q = &d->params[d->n_params++];
    q->p = e->value;
    q->g = e->grad;
    q->decay = (e->flags & PARAM_DECAY) != 0;
    q->n = e->value.rows * e->value.cols;
    q->layer = e->layer;
    q->fp8 = e->fp8;
    q->mod = e->module;
    q->which = e->which;
    q->order = d->n_params - 1;
    return F8_OK;
}

/* Within each bucket group (everything, or with overlap each block's run of
 * parameters) the high-precision parameters first, then the FP8 weights,
 * each in gpt's order: the FP8 weights get buckets of their own. */
static f8_status group_fp8_last(dp *d)
{
    dp_param *t = (dp_param *)malloc((size_t)d->n_params * sizeof *t);
    if (!t) return F8_ERR_OUT_OF_MEMORY;
    int n = 0;
    for (int i0 = 0, i1; i0 < d->n_params; i0 = i1) {
        for (i1 = i0 + 1; i1 < d->n_params && (!d->overlap || d->params[i1].layer == d->params[i0].layer); i1++) {}
        for (int pass = 0; pass < 2; pass++)
            for (int i = i0; i < i1; i++)
                if ((d->params[i].fp8 >= 0) == pass) t[n++] = d->params[i];
    }
    memcpy(d->params, t, (size_t)n * sizeof *t);
    free(t);
    return F8_OK;
}

/* FP8 weight k's module and parameter. */
static void fp8_weight(const dp *d, const dp_param *q, f8_module **mod, f8_param *which)
{
    (void)d;
    *mod = q->mod;
    *which = q->which;
}

/* This rank's masters: each FP8 weight piece from gpt_fp8_master_init (the
 * values the modules hold quantized, as one rank's fp8w.c starts). */
static f8_status init_masters(dp *d)
{
    float *host = NULL;
    f8_status st = F8_OK;
    for (int k = 0; k < d->n_pieces && st == F8_OK; k++) {
        const dp_piece *pc = &d->pieces[k];
        const dp_param *q = &d->params[pc->param];
        if (q->fp8 < 0) continue;
        float *h = (float *)realloc(host, (size_t)q->n * 4);
        if (!h) st = F8_ERR_OUT_OF_MEMORY;
        else host = h, st = gpt_fp8_master_init(d->model, q->fp8, host);
        if (st == F8_OK)
            st = f8_ctx_upload(d->ctx, d->master + pc->moff, host + (pc->lo - q->off), (size_t)(pc->hi - pc->lo) * 4);
    }
    free(host);
    return st;
}

f8_status dp_comm_create(f8_ctx *ctx, f8_comm_group *g, const f8_comm_id *id, int rank, int world, f8_comm **comm,
                         char *err, size_t n)
{
    const int cpu = f8_ctx_backend(ctx) == F8_BACKEND_CPU;
    if (cpu != (g != NULL)) {
        snprintf(err, n, "%s", cpu ? "--gpus needs the CUDA backend" : "--ranks runs CPU ranks: use --backend cpu");
        return F8_ERR_INVALID_ARGUMENT;
    }
    f8_status st = cpu ? f8_comm_create_cpu(ctx, g, rank, comm) : f8_comm_create_nccl(ctx, id, rank, world, comm);
    if (st == F8_OK) st = f8_ctx_set_comm(ctx, *comm);
    if (st != F8_OK) snprintf(err, n, "rank %d of %d: %s", rank, world, f8_ctx_last_error(ctx));
    return st;
}

static size_t es(f8_dtype t) { return f8_dtype_size(t); }

f8_status dp_create(f8_comm *comm, gpt *m, unsigned skip, int overlap, const f8_adamw_config *ac, dp **out, char *err,
                    size_t n)
{
    *out = NULL;
    dp *d = (dp *)calloc(1, sizeof *d);
    if (!d) return F8_ERR_OUT_OF_MEMORY;
    d->model = m;
    d->overlap = overlap != 0;
    d->comm = comm;
    d->ctx = f8_comm_ctx(comm);
    d->rank = f8_comm_rank(comm);
    d->size = f8_comm_size(comm);
    d->moments = ac->moments;
    /* FP8 moments are scaled per block of 128 elements of each registered
     * tensor: a piece that starts on a block boundary of its parameter has
     * the one-rank run's blocks, so the shards hold the one-rank moments */
    d->align = ac->moments == F8_ADAMW_MOMENTS_FP8 ? F8_ADAMW_FP8_BLOCK : ALIGN;
    f8_status st = param_each(&m->params, skip, collect, d);
    if (st == F8_OK && d->n_params == 0) st = F8_ERR_INVALID_ARGUMENT;
    if (st == F8_OK) st = group_fp8_last(d);
    const dp_param *first = d->params; /* the first high-precision parameter: its dtype is pflat's */
    while (st == F8_OK && first < d->params + d->n_params - 1 && first->fp8 >= 0) first++;
    if (st == F8_OK) {
        d->buckets = (dp_bucket *)calloc((size_t)d->n_params, sizeof *d->buckets);
        d->pieces = (dp_piece *)calloc((size_t)d->n_params, sizeof *d->pieces);
        if (!d->buckets || !d->pieces) st = F8_ERR_OUT_OF_MEMORY;
    }
    /* buckets: one for everything, or (overlap) a new one where the block changes */
    const int64_t unit = d->align * d->size;
    int64_t off = 0;
    for (int i = 0; st == F8_OK && i < d->n_params; i++) {
        const dp_param *q = &d->params[i];
        if (q->fp8 < 0 && q->p.dtype != first->p.dtype) {
            snprintf(err, n, "data parallel: parameters of mixed dtypes (%s and %s)", f8_dtype_name(first->p.dtype),
                     f8_dtype_name(q->p.dtype));
            st = F8_ERR_DTYPE;
        }
        if (i == 0 || (d->overlap && q->layer != q[-1].layer) || (q->fp8 >= 0) != (q[-1].fp8 >= 0)) {
            if (i > 0) off = (off + unit - 1) / unit * unit; /* close the previous bucket */
            dp_bucket *b = &d->buckets[d->n_buckets++];
            b->base = off, b->p0 = i, b->layer = q->layer, b->fp8 = q->fp8 >= 0;
        }
        dp_bucket *b = &d->buckets[d->n_buckets - 1];
        d->params[i].bucket = d->n_buckets - 1;
        b->p1 = i + 1;
        d->params[i].off = off;
        off += (d->params[i].n + d->align - 1) / d->align * d->align;
        b->size = (off - b->base + unit - 1) / unit * unit;
    }
    if (st == F8_OK) {
        d->dtype = first->p.dtype;
        for (int k = 0; k < d->n_buckets; k++) {
            dp_bucket *b = &d->buckets[k];
            b->slice = b->size / d->size;
            b->gs_off = d->S;
            d->S += b->slice;
            d->N = b->base + b->size;
            if (b->fp8) b->p8_off = d->n8, d->n8 += b->size;
        }
    }
    if (st == F8_OK) st = f8_ctx_alloc(d->ctx, (size_t)d->N * 4, (void **)&d->gflat);
    if (st == F8_OK) st = f8_ctx_alloc(d->ctx, (size_t)d->S * 4, (void **)&d->gshard);
    d->pflat = d->gflat; /* see the note: the two uses never overlap within a step */
    if (st == F8_OK) {
        f8_tensor z = f8_tensor_make(d->gflat, F8_DTYPE_FP32, 1, d->N);
        st = f8_tensor_zero(d->ctx, &z); /* defined bytes in the padding (it is never read as a value) */
    }
    if (st == F8_OK) st = f8_adamw_create(d->ctx, ac, &d->opt);
    if (st == F8_OK) st = f8_adamw_set_comm(d->opt, comm);
    for (int k = 0; st == F8_OK && k < d->n_buckets; k++) { /* this rank's pieces */
        const dp_bucket *b = &d->buckets[k];
        const int64_t s0 = b->base + d->rank * b->slice, s1 = s0 + b->slice;
        for (int i = b->p0; i < b->p1; i++) {
            const dp_param *q = &d->params[i];
            const int64_t lo = q->off > s0 ? q->off : s0, hi = q->off + q->n < s1 ? q->off + q->n : s1;
            if (lo >= hi) continue;
            dp_piece *pc = &d->pieces[d->n_pieces++];
            pc->param = i, pc->lo = lo, pc->hi = hi, pc->moff = d->S8;
            if (q->fp8 >= 0) d->S8 += hi - lo;
        }
    }
    if (st == F8_OK && d->S8) st = f8_ctx_alloc(d->ctx, (size_t)d->S8 * 4, (void **)&d->master);
    if (st == F8_OK && d->n8) st = f8_ctx_alloc(d->ctx, (size_t)d->n8, (void **)&d->p8);
    if (st == F8_OK && d->S8) st = init_masters(d);
    for (int k = 0; st == F8_OK && k < d->n_pieces; k++) { /* AdamW: the masters in place of FP8 weights */
        const dp_piece *pc = &d->pieces[k];
        const dp_param *q = &d->params[pc->param];
        const dp_bucket *b = &d->buckets[q->bucket];
        f8_tensor pv = q->fp8 >= 0
                         ? f8_tensor_make(d->master + pc->moff, F8_DTYPE_FP32, 1, pc->hi - pc->lo)
                         : f8_tensor_make((char *)d->pflat + (size_t)pc->lo * es(d->dtype), d->dtype, 1, pc->hi - pc->lo);
        f8_tensor gv = f8_tensor_make(d->gshard + b->gs_off + (pc->lo - (b->base + d->rank * b->slice)), F8_DTYPE_FP32, 1,
                                      pc->hi - pc->lo);
        st = f8_adamw_add_slice(d->opt, &pv, &gv, q->decay, pc->lo - q->off); /* FP8 moments round as one rank's */
    }
    if (st != F8_OK) {
        if (!err[0]) snprintf(err, n, "data parallel setup: %s", f8_ctx_last_error(d->ctx));
        dp_destroy(d);
        return st;
    }
    *out = d;
    return F8_OK;
}

void dp_destroy(dp *d)
{
    if (!d) return;
    f8_adamw_destroy(d->opt);
    f8_ctx_free(d->ctx, d->gflat);
    f8_ctx_free(d->ctx, d->gshard);
    f8_ctx_free(d->ctx, d->master);
    f8_ctx_free(d->ctx, d->p8);
    free(d->params);
    free(d->pieces);
    free(d->buckets);
    free(d);
}

f8_adamw *dp_optimizer(dp *d) { return d->opt; }


/* Bucket k's gradients into the flat FP32 space, then its reduce-scatter
 * (async under overlap: it runs while the backward goes on). */
static f8_status bucket_reduce(dp *d, int k)
{
    const dp_bucket *b = &d->buckets[k];
    for (int i = b->p0; i < b->p1; i++) {
        const dp_param *q = &d->params[i];
        f8_tensor src = f8_tensor_make(q->g.data, q->g.dtype, 1, q->n), dst = f8_tensor_make(d->gflat + q->off, F8_DTYPE_FP32, 1, q->n);
        TRY(f8_tensor_convert(d->ctx, &src, &dst));
    }
    TRY(f8_comm_set_async(d->comm, d->overlap));
    f8_status st = f8_comm_reduce_scatter(d->comm, d->gflat + b->base, d->gshard + b->gs_off, b->slice, F8_DTYPE_FP32);
    f8_comm_set_async(d->comm, 0);
    return st;
}

f8_status dp_grads_ready(void *user, int64_t layer)
{
    dp *d = (dp *)user;
    for (int k = 0; k < d->n_buckets; k++)
        if (d->buckets[k].layer == layer) TRY(bucket_reduce(d, k));
    return F8_OK;
}

int dp_overlap(const dp *d) { return d->overlap; }

/* This rank's FP8 weight pieces: masters cast into their place in p8. */
static f8_status quantize_pieces(dp *d)
{
    for (int k = 0; k < d->n_pieces; k++) {
        const dp_piece *pc = &d->pieces[k];
        const dp_param *q = &d->params[pc->param];
        if (q->fp8 < 0) continue;
        const dp_bucket *b = &d->buckets[q->bucket];
        f8_module *mod;
        f8_param which;
        fp8_weight(d, q, &mod, &which);
        f8_tensor src = f8_tensor_make(d->master + pc->moff, F8_DTYPE_FP32, 1, pc->hi - pc->lo);
        TRY(f8_module_quantize_weight_part(mod, which, &src, d->p8 + b->p8_off + (pc->lo - b->base)));
    }
    return F8_OK;
}

/* Bucket k's shards from every rank: parameters in their dtype, or FP8 codes. */
static f8_status bucket_gather(dp *d, const dp_bucket *b)
{
    const int fp8 = b->fp8;
    const f8_dtype t = fp8 ? d->params[b->p0].p.dtype : d->dtype; /* the FP8 view's dtype: E4M3 */
    const size_t e = es(t);
    char *base = fp8 ? (char *)d->p8 + b->p8_off : (char *)d->pflat + (size_t)b->base * e;
    d->gathered[fp8] += b->slice * d->size * (int64_t)e;
    return f8_comm_all_gather(d->comm, base + (size_t)(d->rank * b->slice) * e, base, b->slice, t);
}

f8_status dp_step(dp *d)
{
    const size_t e = es(d->dtype);
    if (d->overlap) TRY(f8_comm_wait(d->comm)); /* the buckets, reduced during the backward */
    else
        for (int k = 0; k < d->n_buckets; k++) TRY(bucket_reduce(d, k));
    for (int k = 0; k < d->n_pieces; k++) { /* the shard's current parameters (FP8 weights: the masters are) */
        const dp_piece *pc = &d->pieces[k];
        const dp_param *q = &d->params[pc->param];
        if (q->fp8 >= 0) continue;
        TRY(f8_ctx_copy(d->ctx, (char *)d->pflat + (size_t)pc->lo * e, (char *)q->p.data + (size_t)(pc->lo - q->off) * e,
                        (size_t)(pc->hi - pc->lo) * e));
    }
    TRY(f8_adamw_step(d->opt));
    if (d->S8 || d->n8) TRY(quantize_pieces(d));
    for (int k = 0; k < d->n_buckets; k++) TRY(bucket_gather(d, &d->buckets[k]));
    for (int i = 0; i < d->n_params; i++) {
        const dp_param *q = &d->params[i];
        if (q->fp8 < 0) {
            TRY(f8_ctx_copy(d->ctx, q->p.data, (char *)d->pflat + (size_t)q->off * e, (size_t)q->n * e));
            continue;
        }
        const dp_bucket *b = &d->buckets[q->bucket];
        f8_module *mod;
        f8_param which;
        fp8_weight(d, q, &mod, &which);
        TRY(f8_module_write_weight_codes(mod, which, d->p8 + b->p8_off + (q->off - b->base)));
    }
    /* TE's post-optimizer update, from the pieces' amaxes MAX-reduced over the ranks */
    return d->n8 ? f8_ctx_update_weight_scales(d->ctx) : F8_OK;
}

void dp_gathered_bytes(const dp *d, int64_t *hp, int64_t *fp8)
{
    *hp = d->gathered[0];
    *fp8 = d->gathered[1];
}

int64_t dp_fp8_code_bytes(const dp *d) { return d->n8; }

f8_tensor dp_masters(const dp *d) { return f8_tensor_make(d->master, F8_DTYPE_FP32, 1, d->S8); }

/* ---- checkpoints ------------------------------------------------------------ */

/* One stream of the optimizer state as the checkpoint holds it: a moment
 * (one value per element, in the moments' form), a per-block scale_inv of
 * FP8 moments (one per F8_ADAMW_FP8_BLOCK elements), or the FP8 weights'
 * masters (FP32 per element, by FP8 weight index). f8_checkpoint_add_adamw
 * names them (f8.h); each is gathered in the flat space divided by block. */
typedef struct dp_stream {
    const char *name;
    f8_dtype dtype;  /* how it is gathered */
    f8_ck_dtype ck;  /* how it is stored */
    int64_t block;   /* elements per stored value: 1, or F8_ADAMW_FP8_BLOCK */
    int master;      /* the FP8 weights' masters */
} dp_stream;

/* The streams of d's state (m and v first, the masters last): their count. */
static int streams_of(const dp *d, dp_stream out[5])
{
    int n = 0;
    if (d->moments == F8_ADAMW_MOMENTS_FP8) {
        out[n++] = (dp_stream){"m", F8_DTYPE_E4M3, F8_CK_F8_E4M3, 1, 0};
        out[n++] = (dp_stream){"v_sqrt", F8_DTYPE_E4M3, F8_CK_F8_E4M3, 1, 0};
        out[n++] = (dp_stream){"m_scale_inv", F8_DTYPE_FP32, F8_CK_F32, F8_ADAMW_FP8_BLOCK, 0};
        out[n++] = (dp_stream){"v_sqrt_scale_inv", F8_DTYPE_FP32, F8_CK_F32, F8_ADAMW_FP8_BLOCK, 0};
    } else {
        const int bf16 = d->moments == F8_ADAMW_MOMENTS_BF16;
        const f8_dtype t = bf16 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
        const f8_ck_dtype c = bf16 ? F8_CK_BF16 : F8_CK_F32;
        out[n++] = (dp_stream){"m", t, c, 1, 0};
        out[n++] = (dp_stream){"v", t, c, 1, 0};
    }
    if (d->n8) out[n++] = (dp_stream){"master", F8_DTYPE_FP32, F8_CK_F32, 1, 1};
    return n;
}

/* Values of stream s for elements [lo, hi) of the flat space (lo a multiple
 * of s's block, as every piece and parameter start is). */
static int64_t stream_count(const dp_stream *s, int64_t lo, int64_t hi) { return (hi - lo + s->block - 1) / s->block; }

/* This rank's piece k of stream s (from its shard checkpoint, or the
 * masters) into gflat at its place in the stream's flat space. */
static f8_status piece_to_flat(dp *d, const f8_checkpoint *mine, const dp_stream *s, int k)
{
    const dp_piece *pc = &d->pieces[k];
    const size_t e = es(s->dtype);
    char *at = (char *)d->gflat + (size_t)(pc->lo / s->block) * e;
    if (s->master && d->params[pc->param].fp8 < 0) return F8_OK;
    if (s->master) return f8_ctx_copy(d->ctx, at, d->master + pc->moff, (size_t)(pc->hi - pc->lo) * 4);
    char name[64];
    snprintf(name, sizeof name, "shard.%s.%d", s->name, k);
    const f8_ck_entry *en = f8_checkpoint_find_entry(mine, name);
    if (!en || en->bytes != (size_t)stream_count(s, pc->lo, pc->hi) * e) return F8_ERR_STATE;
    return f8_ctx_upload(d->ctx, at, en->data, en->bytes);
}

f8_status dp_checkpoint_add(dp *d, f8_checkpoint *ck, const char *prefix)
{
    f8_checkpoint *mine = NULL;
    char *host = (char *)malloc((size_t)d->N * 4 + 4);
    f8_status st = host ? f8_checkpoint_create(d->ctx, &mine) : F8_ERR_OUT_OF_MEMORY;
    if (st == F8_OK) st = f8_checkpoint_add_adamw(mine, "shard", d->opt);
    char name[256];
    dp_stream ss[5];
    const int ns = streams_of(d, ss);
    /* every stream: the shards into gflat, gathered (whole buckets), stored per parameter */
    for (int w = 0; w < ns && st == F8_OK; w++) {
        const dp_stream *s = &ss[w];
        const size_t e = es(s->dtype);
        for (int k = 0; k < d->n_pieces && st == F8_OK; k++) st = piece_to_flat(d, mine, s, k);
        for (int k = 0; k < d->n_buckets && st == F8_OK; k++) {
            const dp_bucket *b = &d->buckets[k];
            char *base = (char *)d->gflat + (size_t)(b->base / s->block) * e;
            const int64_t slice = b->slice / s->block;
            st = f8_comm_all_gather(d->comm, base + (size_t)(d->rank * slice) * e, base, slice, s->dtype);
        }
        if (st == F8_OK) st = f8_ctx_download(d->ctx, host, d->gflat, (size_t)(d->N / s->block) * e);
        for (int i = 0; i < d->n_params && st == F8_OK; i++) {
            const dp_param *q = &d->params[i];
            if (s->master && q->fp8 < 0) continue;
            const int64_t count = stream_count(s, 0, q->n), shape[2] = {q->p.rows, q->p.cols};
            snprintf(name, sizeof name, "%s.%s.%d", prefix, s->name, s->master ? q->fp8 : q->order);
            st = f8_checkpoint_put_entry(ck, name, s->ck, s->block > 1 ? 1 : 2, s->block > 1 ? &count : shape,
                                         host + (size_t)(q->off / s->block) * e, (size_t)count * e);
        }
    }
    if (st == F8_OK) st = param_optimizer_scalars_copy(mine, "shard", ck, prefix, NULL, 0); /* the same on every rank */
    snprintf(name, sizeof name, "%s.moments", prefix); /* as f8_checkpoint_add_adamw records it */
    if (st == F8_OK) st = f8_checkpoint_set_metadata(ck, name, f8_adamw_moments_name(d->moments));
    f8_checkpoint_destroy(mine);
    free(host);
    return st;
}

/* The whole-parameter entry "<prefix>.<stream>.<index>" of q, checked. */
static const f8_ck_entry *whole(const f8_checkpoint *ck, const char *prefix, const dp_stream *s, const dp_param *q,
                                char *err, size_t n)
{
    char name[256];
    snprintf(name, sizeof name, "%s.%s.%d", prefix, s->name, s->master ? q->fp8 : q->order);
    const f8_ck_entry *e = f8_checkpoint_find_entry(ck, name);
    const int64_t count = stream_count(s, 0, q->n);
    if (!e || e->dtype != s->ck || e->bytes != (size_t)count * es(s->dtype)) {
        train_fail(err, n, F8_ERR_SHAPE, "%s: \"%s\" is missing or not %s of %lld elements",
                   s->master ? "FP8 weights' masters" : "optimizer state", name, f8_dtype_name(s->dtype),
                   (long long)count);
        return NULL;
    }
    return e;
}

f8_status dp_checkpoint_restore(dp *d, const f8_checkpoint *ck, const char *prefix, char *err, size_t n)
{
    char name[256], shard[64];
    /* the moments' form first: a checkpoint without the record holds FP32 moments */
    snprintf(name, sizeof name, "%s.moments", prefix);
    const char *form = f8_checkpoint_metadata(ck, name), *want = f8_adamw_moments_name(d->moments);
    if (!form) form = "fp32";
    if (strcmp(form, want) != 0)
        return train_fail(err, n, F8_ERR_DTYPE, "optimizer state: the checkpoint keeps %s AdamW moments, this run %s "
                          "(--adam-moments)", form, want);
    f8_checkpoint *mine = NULL;
    f8_status st = f8_checkpoint_create(d->ctx, &mine);
    dp_stream ss[5];
    const int ns = streams_of(d, ss);
    /* every parameter's state must be there, whole; this rank takes its pieces */
    for (int w = 0; w < ns && st == F8_OK; w++)
        for (int k = 0; k < d->n_pieces && st == F8_OK; k++) {
            const dp_stream *s = &ss[w];
            const dp_piece *pc = &d->pieces[k];
            const dp_param *q = &d->params[pc->param];
            if (s->master && q->fp8 < 0) continue;
            const f8_ck_entry *e = whole(ck, prefix, s, q, err, n);
            if (!e) st = F8_ERR_SHAPE;
            if (st != F8_OK) break;
            const int64_t count = stream_count(s, pc->lo, pc->hi), shape[2] = {1, count};
            const size_t el = es(s->dtype);
            snprintf(shard, sizeof shard, "shard.%s.%d", s->name, k);
            st = f8_checkpoint_put_entry(mine, shard, s->ck, s->block > 1 ? 1 : 2, s->block > 1 ? &count : shape,
                                         e->data + (size_t)((pc->lo - q->off) / s->block) * el, (size_t)count * el);
        }
    if (st == F8_OK) st = param_optimizer_scalars_copy(ck, prefix, mine, "shard", err, n);
    if (st == F8_OK) st = f8_checkpoint_set_metadata(mine, "shard.moments", want);
    /* a checkpoint of a larger model: one more parameter than this one has */
    snprintf(name, sizeof name, "%s.m.%d", prefix, d->n_params);
    if (st == F8_OK && f8_checkpoint_find_entry(ck, name))
        st = train_fail(err, n, F8_ERR_SHAPE, "optimizer state: \"%s\": more parameters than the model has", name);
    if (st == F8_OK) st = f8_checkpoint_restore_adamw(mine, "shard", d->opt);
    for (int k = 0; k < d->n_pieces && st == F8_OK; k++) { /* the masters last: nothing written before every check */
        const dp_piece *pc = &d->pieces[k];
        snprintf(shard, sizeof shard, "shard.master.%d", k);
        const f8_ck_entry *e = d->params[pc->param].fp8 >= 0 ? f8_checkpoint_find_entry(mine, shard) : NULL;
        if (e) st = f8_ctx_upload(d->ctx, d->master + pc->moff, e->data, e->bytes);
    }
    f8_checkpoint_destroy(mine);
    return st;
}
