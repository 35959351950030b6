/*
 * f8/comm.h — communicators: collectives across ranks (data and tensor parallelism).
 * Part of the public API; include f8.h, which includes every topic header.
 */
#ifndef F8_COMM_H
#define F8_COMM_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Communicators: collectives across ranks (data and tensor parallelism)     */
/* ------------------------------------------------------------------------ */

/* An f8_comm joins `size` ranks, each with its own ctx, for collectives over
 * backend memory of that ctx, issued on its stream like any other work (so
 * they are recorded by f8_graph_begin on either backend: a CUDA graph
 * captures the NCCL calls). Every rank must issue the same collectives in the
 * same order with the same count, dtype, op and root.
 *
 * Two transports, one set of semantics:
 *  - CPU: `size` in-process ranks, one host thread per rank, each with its
 *    own CPU ctx, joined by an f8_comm_group. Reductions add in a FIXED order,
 *    rank 0 + rank 1 + ... + rank size-1 (left to right, FP32), so results are
 *    bitwise reproducible and equal to the sum one rank computes in that order.
 *    This is the oracle the parallel code paths are tested against.
 *  - NCCL (CUDA ctx; a build with CUDA): one rank per GPU, any number of
 *    processes or nodes, joined by an f8_comm_id that rank 0 makes and the
 *    caller hands to the others (pipe, file, TCP). NCCL's reduction order
 *    depends on its algorithm and topology: deterministic run to run on the
 *    same machine and rank count, not the CPU order.
 * A collective that cannot complete because a CPU peer has left (destroyed
 * its comm, e.g. after an error) or whose ranks disagree fails with
 * F8_ERR_COMM on every waiting rank instead of hanging. */
typedef struct f8_comm f8_comm;
typedef struct f8_comm_group f8_comm_group;

typedef enum f8_reduce_op {
    F8_REDUCE_SUM = 0,
    F8_REDUCE_MAX = 1
} f8_reduce_op;

/* The rendezvous of `size` (1..1024) CPU ranks. Thread-safe: it is shared by
 * the ranks' threads; destroy it after every comm made from it. On error
 * *group is NULL and a message goes to `error` (when not NULL). */
F8_API f8_status f8_comm_group_create(int size, f8_comm_group **group, char *error, size_t error_size);
F8_API void f8_comm_group_destroy(f8_comm_group *group);
/* Break the group without a comm: every rank waiting in or entering a
 * collective fails with F8_ERR_COMM (a launcher calls it for a rank that
 * failed before it could join, so the others do not wait for it). */
F8_API void f8_comm_group_abort(f8_comm_group *group);

/* Rank `rank` of group, on a CPU ctx (F8_ERR_UNSUPPORTED for a CUDA ctx).
 * Each rank is taken once (F8_ERR_STATE for a rank already joined).
 * [out] *comm: owned by the caller; destroy it before its ctx. */
F8_API f8_status f8_comm_create_cpu(f8_ctx *ctx, f8_comm_group *group, int rank, f8_comm **comm);

/* The bootstrap token of an NCCL communicator (ncclUniqueId): made once by
 * rank 0 with f8_comm_id_create, copied as plain bytes to every other rank.
 * One id makes one communicator: make a new one for each. */
#define F8_COMM_ID_BYTES 128
typedef struct f8_comm_id {
    unsigned char bytes[F8_COMM_ID_BYTES];
} f8_comm_id;

/* F8_ERR_NO_DEVICE in a build without CUDA; F8_ERR_COMM if NCCL fails. */
F8_API f8_status f8_comm_id_create(f8_comm_id *id, char *error, size_t error_size);

/* Rank `rank` of `size` over NCCL on a CUDA ctx (ncclCommInitRank on the
 * ctx's device; blocks until all `size` ranks have joined with the same id).
 * F8_ERR_UNSUPPORTED for a CPU ctx, F8_ERR_NO_DEVICE without CUDA. */
F8_API f8_status f8_comm_create_nccl(f8_ctx *ctx, const f8_comm_id *id, int rank, int size, f8_comm **comm);

/* Leaves the group: CPU peers still waiting in (or later entering) a
 * collective fail with F8_ERR_COMM. Waits for the ctx's work first. */
F8_API void f8_comm_destroy(f8_comm *comm);
F8_API int f8_comm_rank(const f8_comm *comm);
F8_API int f8_comm_size(const f8_comm *comm);
F8_API f8_ctx *f8_comm_ctx(const f8_comm *comm);

/* The collectives. Pointers are backend memory of the comm's ctx; counts are
 * elements per rank, >= 0. Reductions take FP32 (SUM and MAX; MAX ignores
 * NaN as amax does: fmaxf); all_gather and broadcast move any dtype's bytes
 * (FP8 moves one byte per element). Asynchronous, ordered on the stream.
 *  all_reduce:     dst[i] = src_0[i] op src_1[i] op ... (count each; dst may be src)
 *  reduce_scatter: dst[i] = Σ_r src_r[rank·count + i]    (src: size·count, dst: count)
 *  all_gather:     dst[r·count + i] = src_r[i]            (src: count, dst: size·count;
 *                  in place when src == dst + rank·count)
 *  broadcast:      dst[i] = src_root[i]                   (src is read on root only;
 *                  dst may be src)
 * Errors (nothing issued): F8_ERR_INVALID_ARGUMENT for NULL pointers with
 * count > 0, a negative count or a bad root or op; F8_ERR_DTYPE for a
 * reduction of a dtype other than FP32; F8_ERR_COMM when the ranks' calls
 * disagree or a peer has left (CPU: detected when the collective runs). */
F8_API f8_status f8_comm_all_reduce(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype,
                                    f8_reduce_op op);
F8_API f8_status f8_comm_reduce_scatter(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype);
F8_API f8_status f8_comm_all_gather(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype);
F8_API f8_status f8_comm_broadcast(f8_comm *comm, const void *src, void *dst, int64_t count, f8_dtype dtype, int root);

/* Overlap (gradient buckets reduced while the backward goes on): with async
 * on, the collectives this comm issues next run, on NCCL, on the comm's own
 * stream: each starts after the ctx's work issued before it and runs
 * concurrently with the ctx's later work, which must leave its buffers
 * alone; f8_comm_wait orders the ctx's later work after every async
 * collective issued before it (call it before reading their results, and
 * before a graph capture ends). The flag is read when a collective is
 * issued (a recorded graph keeps it). CPU ranks complete each collective in
 * order, so async changes nothing there and wait is a no-op. Local calls:
 * no rank waits for another in f8_comm_wait. */
F8_API f8_status f8_comm_set_async(f8_comm *comm, int enabled);
F8_API f8_status f8_comm_wait(f8_comm *comm);

/* The ctx's amax-reduction group (TE's amax_reduction_group): with a comm
 * set, f8_ctx_update_scales first all-reduces (MAX) the direction's current
 * amaxes (history row 0 of every slot, one collective per direction), so
 * every rank computes the same scales. comm must be made on this ctx; NULL
 * unsets. Every rank must have the same slots in the same order. */
F8_API f8_status f8_ctx_set_comm(f8_ctx *ctx, f8_comm *comm);

/* Sequence parallelism (Megatron's, TE's sequence_parallel=True) for a
 * column-parallel LayerNormLinear or LayerNormMLP over the tensor-parallel
 * group `group` of P ranks (NULL: off, the default). With it, a forward's
 * x and a backward's dx are this rank's share of the T tokens, rows
 * rank·T/P .. (rank+1)·T/P - 1, while y and dy stay [T, out]:
 *   forward   ln_r = norm(x_r);  ln = all-gather(ln_0 .. ln_{P-1})  [T, in];
 *             y = ln · Wᵀ (+ b, then the MLP's activation and fc2)
 *   backward  dln = dy-side dgrad [T, in] (this rank's partial sum);
 *             dln_r = reduce-scatter(dln) (FP32, rank 0 + 1 + ... on CPU ranks);
 *             dx, dgamma, dbeta from dln_r and x_r (gamma and beta see only
 *             x_r: the caller sums their gradients over the group)
 * The gather moves FP8 codes when the module runs FP8 (delayed scaling: the
 * shared last-step scale; current scaling: the amax is reduced (MAX) over
 * the group before the cast, so one scale serves all ranks), and the param
 * dtype under block scaling, whose column-wise tiles span the shards (each
 * rank then casts the whole tensor). The amaxes a rank records are its own
 * tensors': set the ctx's amax-reduction group (f8_ctx_set_comm) to a
 * group that contains `group`, so every rank keeps the same scales.
 * Every rank of `group` must make the same calls with the same T. The
 * row-parallel side (reduce-scatter of a Linear's or fc2's partial output,
 * all-gather of its dy) is the caller's. config.max_tokens bounds T (all
 * ranks' tokens). Call it before a forward, not between a forward and its
 * backward. The per-call workspace grows (reduce-scatter buffers).
 * Errors: F8_ERR_INVALID_ARGUMENT for a Linear (no norm) or a group made on
 * another ctx; F8_ERR_UNSUPPORTED (nothing changed) for a module created
 * with recompute_norm_output and a non-NULL group; a LayerNormLinear with
 * return_layernorm_output then fails its forward with F8_ERR_UNSUPPORTED. */
F8_API f8_status f8_module_set_sequence_parallel(f8_module *module, f8_comm *group);

#ifdef __cplusplus
}
#endif

#endif /* F8_COMM_H */
