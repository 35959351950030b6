/*
 * nccl.c — the NCCL transport (built only with CUDA; no_nccl.c otherwise).
 *
 * Design note. One NCCL communicator per f8_comm, made with ncclCommInitRank
 * on the ctx's device from the id rank 0 made (the caller moves the 128
 * bytes: a pipe from the launcher, a file, TCP). Every collective goes on the
 * ctx's current stream, so it is ordered with the step's kernels and a CUDA
 * graph capture of the stream records it (NCCL supports stream capture).
 * Collectives that move bytes without arithmetic (all-gather, broadcast) go
 * as ncclUint8 for FP8, so FP8 weights travel as one byte each. NCCL errors
 * become F8_ERR_COMM with NCCL's own message.
 *
 * Async collectives (f8_comm_set_async) go on the comm's own stream: an
 * event recorded on the ctx stream makes that stream wait for the work
 * before (fork); f8_comm_wait records an event on it and makes the ctx
 * stream wait (join). Under stream capture this is CUDA's fork/join pattern:
 * the side stream joins the capture at the fork and leaves it at the join.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/comm.h"

_Static_assert(sizeof(ncclUniqueId) == F8_COMM_ID_BYTES, "f8_comm_id holds an ncclUniqueId");

static f8_status nccl_check(f8_ctx *ctx, ncclResult_t r, ncclComm_t nc, const char *what)
{
    if (r == ncclSuccess) return F8_OK;
    const char *last = nc ? ncclGetLastError(nc) : NULL;
    return f8i_error(ctx, F8_ERR_COMM, "%s: %s%s%s", what, ncclGetErrorString(r), last && last[0] ? ": " : "",
                     last ? last : "");
}

f8_status f8_comm_id_create(f8_comm_id *id, char *error, size_t error_size)
{
    if (!id) {
        if (error && error_size) snprintf(error, error_size, "f8_comm_id_create: id is NULL");
        return F8_ERR_INVALID_ARGUMENT;
    }
    ncclUniqueId u;
    const ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        if (error && error_size) snprintf(error, error_size, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        return F8_ERR_COMM;
    }
    memcpy(id->bytes, &u, sizeof u);
    return F8_OK;
}

static ncclDataType_t nccl_type(f8_dtype t)
{
    switch (t) {
    case F8_DTYPE_FP32: return ncclFloat32;
    case F8_DTYPE_BF16: return ncclBfloat16;
    default: return ncclUint8; /* FP8: bytes */
    }
}

typedef struct nccl_state {
    ncclComm_t nc;
    cudaStream_t side;     /* async collectives */
    cudaEvent_t fork, join;
    int pending;           /* async work issued since the last join */
} nccl_state;

static f8_status cuda_ok(f8_ctx *ctx, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return F8_OK;
    (void)cudaGetLastError();
    return f8i_error(ctx, F8_ERR_CUDA, "NCCL transport: %s: %s", what, cudaGetErrorString(e));
}

static f8_status nccl_run(f8_comm *c, const f8i_collective_args *a)
{
    nccl_state *ns = (nccl_state *)c->state;
    ncclComm_t nc = ns->nc;
    f8_ctx *ctx = c->ctx;
    if (cudaSetDevice(ctx->device) != cudaSuccess)
        return f8i_error(ctx, F8_ERR_CUDA, "NCCL collective: cudaSetDevice(%d) failed", ctx->device);
    cudaStream_t s = (cudaStream_t)f8_ctx_stream(ctx);
    /* join: later ctx work after the side stream's. Also before a collective
     * on the ctx stream: two of one communicator's collectives must not run
     * concurrently (each rank could start a different one: a deadlock). */
    if ((a->kind == F8I_COLL_WAIT || !a->async) && ns->pending) {
        F8I_TRY(cuda_ok(ctx, cudaEventRecord(ns->join, ns->side), "cudaEventRecord(join)"));
        F8I_TRY(cuda_ok(ctx, cudaStreamWaitEvent(s, ns->join, 0), "cudaStreamWaitEvent(join)"));
        ns->pending = 0;
    }
    if (a->kind == F8I_COLL_WAIT) return F8_OK;
    if (a->async) { /* fork: the side stream starts after the ctx's work so far */
        F8I_TRY(cuda_ok(ctx, cudaEventRecord(ns->fork, s), "cudaEventRecord(fork)"));
        F8I_TRY(cuda_ok(ctx, cudaStreamWaitEvent(ns->side, ns->fork, 0), "cudaStreamWaitEvent(fork)"));
        s = ns->side;
        ns->pending = 1;
    }
    const ncclDataType_t t = nccl_type(a->dtype);
    const size_t n = (size_t)a->count;
    const ncclRedOp_t op = a->op == F8_REDUCE_MAX ? ncclMax : ncclSum;
    ncclResult_t r = ncclSuccess;
    switch (a->kind) {
    case F8I_COLL_ALL_REDUCE: r = ncclAllReduce(a->src, a->dst, n, t, op, nc, s); break;
    case F8I_COLL_REDUCE_SCATTER: r = ncclReduceScatter(a->src, a->dst, n, t, ncclSum, nc, s); break;
    case F8I_COLL_ALL_GATHER: r = ncclAllGather(a->src, a->dst, n, t, nc, s); break;
    default: r = ncclBroadcast(a->src, a->dst, n, t, a->root, nc, s); break;
    }
    return nccl_check(ctx, r, nc, "NCCL collective");
}

static void nccl_destroy(f8_comm *c)
{
    nccl_state *ns = (nccl_state *)c->state;
    if (!ns) return;
    if (ns->side) (void)cudaStreamSynchronize(ns->side);
    if (ns->nc) (void)ncclCommDestroy(ns->nc);
    if (ns->fork) (void)cudaEventDestroy(ns->fork);
    if (ns->join) (void)cudaEventDestroy(ns->join);
    if (ns->side) (void)cudaStreamDestroy(ns->side);
    free(ns);
}

static const f8i_comm_transport NCCL_TRANSPORT = {"nccl", nccl_run, nccl_destroy};

f8_status f8i_comm_nccl_init(f8_comm *c, const f8_comm_id *id)
{
    f8_ctx *ctx = c->ctx;
    if (cudaSetDevice(ctx->device) != cudaSuccess)
        return f8i_error(ctx, F8_ERR_CUDA, "f8_comm_create_nccl: cudaSetDevice(%d) failed", ctx->device);
    nccl_state *ns = (nccl_state *)calloc(1, sizeof *ns);
    if (!ns) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_comm_create_nccl: out of host memory");
    c->state = ns;
    f8_status st = cuda_ok(ctx, cudaStreamCreateWithFlags(&ns->side, cudaStreamNonBlocking), "cudaStreamCreate");
    if (st == F8_OK) st = cuda_ok(ctx, cudaEventCreateWithFlags(&ns->fork, cudaEventDisableTiming), "cudaEventCreate");
    if (st == F8_OK) st = cuda_ok(ctx, cudaEventCreateWithFlags(&ns->join, cudaEventDisableTiming), "cudaEventCreate");
    ncclUniqueId u;
    memcpy(&u, id->bytes, sizeof u);
    if (st == F8_OK)
        st = nccl_check(ctx, ncclCommInitRank(&ns->nc, c->size, u, c->rank), NULL, "f8_comm_create_nccl: ncclCommInitRank");
    if (st != F8_OK) {
        nccl_destroy(c);
        c->state = NULL;
        return st;
    }
    c->tr = &NCCL_TRANSPORT;
    return F8_OK;
}
