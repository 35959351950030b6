/*
 * cuda_state.cuh — what a CUDA ctx holds (ctx->be_state) and the functions the
 * CUDA backend's files call across each other. Only src/cuda/ includes this.
 */
#ifndef F8_CUDA_STATE_CUH
#define F8_CUDA_STATE_CUH

#include <cuda_runtime.h>

#include "core/f8i.h"
#include "nn/attention.h"
#include "nn/embed_xent_adamw.h"
#include "plan_cache.cuh"

typedef struct f8i_gemm_cache f8i_gemm_cache; /* owned by gemm.cu */
typedef struct f8i_attn_cudnn f8i_attn_cudnn; /* owned by attention_cudnn.cu */

#define F8I_SMEM_OPTINS 64 /* kernels whose shared-memory opt-in a ctx remembers */

typedef struct f8i_cuda_state {
    int device;
    int sm_count;
    int smem_optin;            /* shared memory a block may opt in to (bytes) */
    cudaStream_t own_stream;   /* created with the ctx (non-blocking) */
    cudaStream_t stream;       /* in use: own_stream or the caller's */
    f8i_plan_cache *plans;     /* every op's cached plans (plan_cache.cuh) */
    f8i_gemm_cache *gemm;      /* the GEMM op: cuBLASLt handle and its workspace */
    int gemm_block_force_fallback; /* test hook (f8i_cuda_gemm_block_force_fallback) */
    int gemm_block_last_path;  /* test hook: 0 none yet, 1 fallback kernel, 2 cuBLASLt */
    const void *smem_done[F8I_SMEM_OPTINS]; /* kernels already opted in (f8i_cuda_smem_optin) */
    unsigned int *amax_ticket; /* (1) device, 0 between launches: amax_scale.cu's last-block ticket */
    float *amax_partials;      /* (F8I_AMAX_MAX_BLOCKS) device: its per-block partial amaxes */
    float *rwt_colmax;         /* (F8I_RWT_SCRATCH_COLS) device, 0 at rest (but pending maxima, below): */
                               /* rowwise_cast.cu's column amaxes */
    unsigned int *rwt_tickets; /* (F8I_RWT_TICKETS) device, 0 at rest: its codes pass's stripe tickets */
    float *rwt_pending;        /* the col_amax whose maxima a fused kernel left in rwt_colmax, or NULL */
    int64_t rwt_pending_cols;  /* ... and their count (f8i_cuda_col_amax_target) */
    f8i_attn_cudnn *attn_cudnn; /* cuDNN library, handle and attention plans (lazily created) */
    int attn_mode;             /* F8I_ATTN_* (backend.h): F8_ATTN, read once, or a test's choice */
    int attn_mode_set;         /* attn_mode is valid */
    int attn_last_path;        /* F8I_ATTN_PATH_* of the last attention call */
} f8i_cuda_state;

#define F8I_AMAX_MAX_BLOCKS 1024 /* most blocks an amax_scale launch uses */
/* The row-wise cast's column scratch (1 MiB) and tickets: casts of up to
 * this many columns take them, wider ones zero and finish scale_inv_t with
 * kernels of their own (rowwise_cast.cu). A stripe is 64 columns or more. */
#define F8I_RWT_SCRATCH_COLS ((int64_t)1 << 18)
#define F8I_RWT_TICKETS (F8I_RWT_SCRATCH_COLS / 64)

static inline f8i_cuda_state *f8i_cuda(const f8_ctx *ctx) { return (f8i_cuda_state *)ctx->be_state; }
static inline cudaStream_t f8i_stream(const f8_ctx *ctx) { return f8i_cuda(ctx)->stream; }

/* Map a CUDA error to F8_ERR_CUDA with a message naming `what` (F8_OK if
 * err == cudaSuccess). */
f8_status f8i_cuda_check(f8_ctx *ctx, cudaError_t err, const char *what);
/* After a launch: cudaGetLastError() through f8i_cuda_check. */
f8_status f8i_cuda_launch_check(f8_ctx *ctx, const char *kernel);
/* Let kernel `fn` launch with more than 48 KB of shared memory: its
 * MaxDynamicSharedMemorySize set to all the device allows beside its static
 * arrays, once per kernel and ctx (a host call per launch otherwise). Always
 * the same value, so ctxs sharing the process never lower it for each other.
 * Legal while a stream is captured. `what` names the caller in messages. */
f8_status f8i_cuda_smem_optin(f8_ctx *ctx, const void *fn, const char *what);

/* gemm.cu */
f8_status f8i_cuda_gemm_create(f8_ctx *ctx);   /* fills f8i_cuda(ctx)->gemm */
void f8i_cuda_gemm_destroy(f8_ctx *ctx);
f8_status f8i_cuda_gemm(f8_ctx *ctx, const f8i_gemm_args *args);
/* The GEMM op's one workspace, allocated with the ctx and used by nothing
 * but the GEMM op (its per-tensor, block and row-wise paths run one at a
 * time on the ctx's stream), sized by one formula: cuBLASLt's scratch
 * (32 MiB, cuBLAS's advice for sm_90; every plan's algorithm is chosen to
 * fit it), then the block path's relaid scale grids (a 1x128 grid is 1/32
 * of its FP8 operand's bytes: 32 MiB holds those of operand pairs up to
 * ~1 GB). The padded odd shapes use the caller's f8i_gemm_args.workspace. */
#define F8I_GEMM_LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define F8I_GEMM_BLOCK_SCALE_BYTES ((size_t)32 << 20)
#define F8I_GEMM_OP_WORKSPACE_BYTES (F8I_GEMM_LT_WORKSPACE_BYTES + F8I_GEMM_BLOCK_SCALE_BYTES)
/* The cuBLASLt handle (a cublasLtHandle_t) and the cuBLASLt part of the
 * op's workspace (workspace_bytes); the block path's part (scales). */
f8_status f8i_cuda_gemm_lt(f8_ctx *ctx, void **handle, void **workspace, size_t *workspace_bytes);
f8_status f8i_cuda_gemm_block_scales(f8_ctx *ctx, void **scales);
/* gemm_kernels.cu: the GEMM's own kernels, launched on the ctx stream.
 * fallback: all of args on CUDA cores (FP32 sums of exactly decoded codes).
 * bias: D[m, n] = (overwrite ? 0 : D) + bias[n]. pad: dst [dst_rows,
 * dst_cols] = src [rows, cols] bytes with zeros beyond (dst 16-byte aligned,
 * dst_cols % 16 == 0). slice: below. */
typedef struct f8i_gemm_slice_args {
    void *d;              /* D [m, cols], leading dimension ldd: D = dp (+ D if accumulate) (+ bias) */
    f8_dtype d_dtype;
    int64_t ldd;
    const void *dp;       /* [m, ldp] FP32 or BF16: the padded GEMM's output */
    f8_dtype dp_dtype;
    int64_t ldp;
    const void *bias;     /* [cols] or NULL */
    f8_dtype bias_dtype;
    int64_t m, cols;
    int accumulate;
} f8i_gemm_slice_args;
f8_status f8i_cuda_gemm_fallback(f8_ctx *ctx, const f8i_gemm_args *args);
f8_status f8i_cuda_gemm_bias(f8_ctx *ctx, const f8i_gemm_args *args, int overwrite);
f8_status f8i_cuda_gemm_pad(f8_ctx *ctx, const uint8_t *src, int64_t rows, int64_t cols, uint8_t *dst,
                           int64_t dst_rows, int64_t dst_cols);
f8_status f8i_cuda_gemm_slice(f8_ctx *ctx, const f8i_gemm_slice_args *args);

/* The backend's implementation of each op of F8I_OP_LIST (backend.cu's
 * table points at them): f8i_cuda_<name>(ctx, const args *) for the ops with
 * an args parameter; the simple ops keep their fields as parameters (other
 * kernels files call them directly) and backend.cu unpacks their args. */

/* cast.cu, transpose.cu, scale_update.cu, convert.cu */
f8_status f8i_cuda_cast(f8_ctx *ctx, const f8i_cast_args *args);
f8_status f8i_cuda_transpose_u8(f8_ctx *ctx, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols,
                                const float *noop);
f8_status f8i_cuda_scale_update(f8_ctx *ctx, const f8i_scale_update_args *args);
f8_status f8i_cuda_amax_scale(f8_ctx *ctx, const f8i_amax_scale_args *args); /* amax_scale.cu */
f8_status f8i_cuda_telemetry_snap(f8_ctx *ctx, const f8i_telemetry_snap_args *args);
/* Block scaling: block_cast.cu, gemm_block.cu. */
f8_status f8i_cuda_cast_block(f8_ctx *ctx, const f8i_cast_args *args); /* cast.cu's block modes */
f8_status f8i_cuda_gemm_block(f8_ctx *ctx, const f8i_gemm_args *args); /* gemm.cu's block modes */
/* Row-wise scaling: rowwise_cast.cu, gemm_rowwise.cu (plans in the ctx's plan cache). */
f8_status f8i_cuda_gemm_rowwise_op(f8_ctx *ctx, const f8i_gemm_args *args); /* gemm.cu's mode ROW */
/* Where a fused norm or activation (F8I_ROW_FUSED) puts the cols column
 * maxima it was asked to take into col_amax, starting from 0: the ctx's
 * column scratch, zero at rest, where it holds them (no zeroing launch),
 * marked pending for col_amax; else col_amax itself, zeroed by a small
 * kernel. The column-only cast of that scale_inv_t (col_amax_in) reads
 * pending maxima from the scratch, whose last blocks zero it again; any
 * other row-wise cast, fused producer, download, synchronize or stream
 * change first moves them into col_amax (f8i_cuda_rwt_settle), so they are
 * where the contract says whenever anything else could look. */
f8_status f8i_cuda_col_amax_target(f8_ctx *ctx, float *col_amax, int64_t cols, float **target);
f8_status f8i_cuda_rwt_settle(f8_ctx *ctx);
f8_status f8i_cuda_convert(f8_ctx *ctx, const void *src, f8_dtype src_dtype, const float *scale_inv, void *dst,
                           f8_dtype dst_dtype, int64_t count);
f8_status f8i_cuda_reciprocal(f8_ctx *ctx, const float *src, float *dst, const float *noop);
f8_status f8i_cuda_add(f8_ctx *ctx, void *dst, const void *src, f8_dtype dtype, int64_t count);
f8_status f8i_cuda_fill_f32(f8_ctx *ctx, float *dst, float value, int64_t count);

/* norm_fwd.cu, norm_bwd.cu, act.cu (act_kernels.cuh): the fused modules' norms and activations (backend.h) */
f8_status f8i_cuda_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *args);
f8_status f8i_cuda_norm_bwd(f8_ctx *ctx, const f8i_norm_bwd_args *args);
f8_status f8i_cuda_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *args);
f8_status f8i_cuda_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *args);

/* attention_cudnn.cu: the cuDNN path attention.cu asks first. *ran = 1 when
 * cuDNN took the call; 0 (with F8_OK) when f8's kernels must run it: cuDNN
 * absent or refusing the shape, or the mode. A shape cuDNN would be asked
 * for, first seen while capturing, is F8_ERR_STATE (plan_cache.cuh's rule). */
f8_status f8i_cudnn_attn_fwd(f8_ctx *ctx, const f8i_attn_fwd_args *args, int *ran);
f8_status f8i_cudnn_attn_bwd(f8_ctx *ctx, const f8i_attn_bwd_args *args, int *ran);
void f8i_cuda_attn_cudnn_destroy(f8_ctx *ctx); /* handle and library (after the plan cache) */
/* cuDNN's FP8 attention (attention_cudnn_fp8.cu) on attention_cudnn.cu's
 * library and handle: f8i_cudnn_attn_handle loads them if new (not while
 * capturing) and points the handle at the ctx's stream; NULL (and *st
 * F8_OK) where cuDNN is absent or the ctx's mode is f8's kernels only. */
struct dn_api;
const struct dn_api *f8i_cudnn_attn_handle(f8_ctx *ctx, void **handle, size_t *version, f8_status *st);
f8_status f8i_cudnn_fp8_attn_fwd(f8_ctx *ctx, const f8i_attn_fwd_args *args, int *ran);
f8_status f8i_cudnn_fp8_attn_bwd(f8_ctx *ctx, const f8i_attn_bwd_args *args, int *ran);
f8_status f8i_cudnn_fp8_attn_takes(f8_ctx *ctx, int64_t batch, int64_t seq, int64_t n_head, int64_t n_kv_head,
                                  int64_t head_dim, int backward, int *takes);
void f8i_cudnn_fp8_attn_info(f8_ctx *ctx, char *out, size_t size);

/* attention.cu; embedding.cu (embedding), cross_entropy.cu, adamw.cu */
f8_status f8i_cuda_attn_fwd(f8_ctx *ctx, const f8i_attn_fwd_args *args);
f8_status f8i_cuda_attn_bwd(f8_ctx *ctx, const f8i_attn_bwd_args *args);
f8_status f8i_cuda_rope(f8_ctx *ctx, const f8i_rope_args *args); /* rope.cu */
f8_status f8i_cuda_embedding_fwd(f8_ctx *ctx, const f8i_embedding_fwd_args *args);
f8_status f8i_cuda_embedding_bwd(f8_ctx *ctx, const f8i_embedding_bwd_args *args);
f8_status f8i_cuda_cross_entropy(f8_ctx *ctx, const f8i_cross_entropy_args *args);
f8_status f8i_cuda_adamw_step(f8_ctx *ctx, const f8i_adamw_step_args *args);

/* src/comm/comm.c (C): a collective goes to its comm's transport (NCCL). */
extern "C" f8_status f8i_cuda_collective(f8_ctx *ctx, const f8i_collective_args *args);

#endif /* F8_CUDA_STATE_CUH */
