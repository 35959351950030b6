/*
 * comm.c — the communicator API of f8.h: argument checks, then one
 * COLLECTIVE work op on the comm's ctx (so a CPU graph records it and a CUDA
 * graph captures the NCCL call); the backends' entries for that op hand it to
 * the comm's transport. Checks happen here, once, so a bad call issues
 * nothing and every transport may assume well-formed arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/ops.h"

/* Both backends run a collective the same way: its comm knows its transport.
 * Counted as one launch per collective (the CPU rule: one per op). */
static f8_status run_collective(f8_ctx *ctx, const f8i_collective_args *a)
{
    if (!a->comm || a->comm->ctx != ctx)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "collective: the comm belongs to another ctx");
    F8I_COUNT_LAUNCHES(ctx, 1);
    return a->comm->tr->run(a->comm, a);
}

f8_status f8i_cpu_collective(f8_ctx *ctx, const f8i_collective_args *a);
f8_status f8i_cuda_collective(f8_ctx *ctx, const f8i_collective_args *a);
f8_status f8i_cpu_collective(f8_ctx *ctx, const f8i_collective_args *a) { return run_collective(ctx, a); }
f8_status f8i_cuda_collective(f8_ctx *ctx, const f8i_collective_args *a) { return run_collective(ctx, a); }

f8_status f8_comm_create_nccl(f8_ctx *ctx, const f8_comm_id *id, int rank, int size, f8_comm **out)
{
    static const char fn[] = "f8_comm_create_nccl";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: comm (the output) is NULL", fn);
    *out = NULL;
    if (!id) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: id is NULL", fn);
    if (size < 1 || rank < 0 || rank >= size)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: rank %d of size %d (want 0 <= rank < size)", fn, rank, size);
    if (ctx->kind != F8_BACKEND_CUDA)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: NCCL needs a CUDA ctx; CPU ranks use f8_comm_create_cpu", fn);
    if (ctx->capturing) return f8i_error(ctx, F8_ERR_STATE, "%s: refused while capturing a graph", fn);
    f8_comm *c = (f8_comm *)calloc(1, sizeof *c);
    if (!c) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    c->ctx = ctx;
    c->rank = rank;
    c->size = size;
    f8_status st = f8i_comm_nccl_init(c, id);
    if (st != F8_OK) {
        free(c);
        return st;
    }
    *out = c;
    return F8_OK;
}

void f8_comm_destroy(f8_comm *comm)
{
    if (!comm) return;
    if (comm->ctx->comm == comm) comm->ctx->comm = NULL;
    (void)f8_ctx_synchronize(comm->ctx); /* the transport's work in flight reads its state */
    comm->tr->destroy(comm);
    free(comm);
}

int f8_comm_rank(const f8_comm *comm) { return comm ? comm->rank : -1; }
int f8_comm_size(const f8_comm *comm) { return comm ? comm->size : 0; }
f8_ctx *f8_comm_ctx(const f8_comm *comm) { return comm ? comm->ctx : NULL; }

static const char *const KIND_NAME[5] = {"f8_comm_all_reduce", "f8_comm_reduce_scatter", "f8_comm_all_gather",
                                         "f8_comm_broadcast", "f8_comm_wait"};

/* Check one call and issue it. */
static f8_status issue(f8_comm *comm, int kind, const void *src, void *dst, int64_t count, f8_dtype dtype, int op,
                       int root)
{
    if (!comm) return F8_ERR_INVALID_ARGUMENT;
    f8_ctx *ctx = comm->ctx;
    const char *fn = KIND_NAME[kind];
    if (count < 0) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: count %lld is negative", fn, (long long)count);
    const size_t es = f8_dtype_size(dtype);
    if (es == 0) return f8i_error(ctx, F8_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dtype);
    const int reduces = kind == F8I_COLL_ALL_REDUCE || kind == F8I_COLL_REDUCE_SCATTER;
    if (reduces && dtype != F8_DTYPE_FP32)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s: reductions take fp32, not %s (a fixed-order FP32 sum is the contract)",
                         fn, f8_dtype_name(dtype));
    if (reduces && op != F8_REDUCE_SUM && op != F8_REDUCE_MAX)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: op %d is not SUM (0) or MAX (1)", fn, op);
    if (kind == F8I_COLL_BROADCAST && (root < 0 || root >= comm->size))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: root %d outside [0, %d)", fn, root, comm->size);
    size_t bytes;
    if (!f8i_shape_bytes(count, comm->size, es, &bytes))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %lld elements x %d ranks is too large", fn,
                         (long long)count, comm->size);
    const int src_needed = kind != F8I_COLL_BROADCAST || comm->rank == root;
    if (count > 0 && ((!src && src_needed) || !dst))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: %s is NULL with count %lld", fn, dst ? "src" : "dst",
                         (long long)count);
    f8i_collective_args a;
    memset(&a, 0, sizeof a);
    a.comm = comm;
    a.kind = kind;
    a.op = op;
    a.src = src;
    a.dst = dst;
    a.count = count;
    a.dtype = dtype;
    a.root = root;
    a.async = comm->async;
    return f8i_op_collective(ctx, &a);
}

f8_status f8_comm_set_async(f8_comm *comm, int enabled)
{
    if (!comm) return F8_ERR_INVALID_ARGUMENT;
    comm->async = enabled != 0;
    return F8_OK;
}

f8_status f8_comm_wait(f8_comm *comm)
{
    if (!comm) return F8_ERR_INVALID_ARGUMENT;
    f8i_collective_args a;
    memset(&a, 0, sizeof a);
    a.comm = comm;
    a.kind = F8I_COLL_WAIT;
    a.dtype = F8_DTYPE_FP32;
    return f8i_op_collective(comm->ctx, &a);
}

f8_status f8_comm_all_reduce(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype, f8_reduce_op op)
{
    return issue(comm, F8I_COLL_ALL_REDUCE, src, dst, count, dtype, (int)op, 0);
}

f8_status f8_comm_reduce_scatter(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype)
{
    return issue(comm, F8I_COLL_REDUCE_SCATTER, src, dst, count, dtype, F8_REDUCE_SUM, 0);
}

f8_status f8_comm_all_gather(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype)
{
    return issue(comm, F8I_COLL_ALL_GATHER, src, dst, count, dtype, 0, 0);
}

f8_status f8_comm_broadcast(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype, int root)
{
    return issue(comm, F8I_COLL_BROADCAST, src, dst, count, dtype, 0, root);
}

f8_status f8_ctx_set_comm(f8_ctx *ctx, f8_comm *comm)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (comm && comm->ctx != ctx)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_ctx_set_comm: the comm was made on another ctx");
    if (ctx->capturing) return f8i_error(ctx, F8_ERR_STATE, "f8_ctx_set_comm: refused while capturing a graph");
    ctx->comm = comm;
    return F8_OK;
}
