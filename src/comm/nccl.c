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
 */
#include <stdio.h>
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

static f8_status nccl_run(f8_comm *c, const f8i_collective_args *a)
{
    ncclComm_t nc = (ncclComm_t)c->state;
    f8_ctx *ctx = c->ctx;
    if (cudaSetDevice(ctx->device) != cudaSuccess)
        return f8i_error(ctx, F8_ERR_CUDA, "NCCL collective: cudaSetDevice(%d) failed", ctx->device);
    cudaStream_t s = (cudaStream_t)f8_ctx_stream(ctx);
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
    if (c->state) (void)ncclCommDestroy((ncclComm_t)c->state);
}

static const f8i_comm_transport NCCL_TRANSPORT = {"nccl", nccl_run, nccl_destroy};

f8_status f8i_comm_nccl_init(f8_comm *c, const f8_comm_id *id)
{
    f8_ctx *ctx = c->ctx;
    if (cudaSetDevice(ctx->device) != cudaSuccess)
        return f8i_error(ctx, F8_ERR_CUDA, "f8_comm_create_nccl: cudaSetDevice(%d) failed", ctx->device);
    ncclUniqueId u;
    memcpy(&u, id->bytes, sizeof u);
    ncclComm_t nc = NULL;
    f8_status st = nccl_check(ctx, ncclCommInitRank(&nc, c->size, u, c->rank), NULL, "f8_comm_create_nccl: ncclCommInitRank");
    if (st != F8_OK) return st;
    c->tr = &NCCL_TRANSPORT;
    c->state = nc;
    return F8_OK;
}
