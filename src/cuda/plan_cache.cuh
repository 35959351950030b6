/*
 * plan_cache.cuh — the CUDA backend's one plan cache: every plan an op
 * builds once per shape and keeps for the ctx's life (cuBLASLt matmul plans
 * of every scaling mode, cuDNN attention graphs) lives here, under one
 * lookup, one lifetime and one rule under graph capture.
 *
 * The manual.
 *
 * A kind (f8i_plan_kind, a static const per op path) says what its plans
 * are: the size of the owner's plan struct (the body), how to build one for
 * a key, how to release what a body holds, and whether a build may run while
 * the ctx's stream is captured. A key is plain bytes chosen by the owner (a
 * struct with no padding, every byte set: keys are compared with memcmp);
 * the kind is part of the match, so two kinds never see each other's plans.
 *
 *   f8i_plan *p;
 *   F8I_TRY(f8i_plan_get(ctx, &my_kind, &key, sizeof key, &call_args, &p));
 *   my_body *b = (my_body *)p->body;   // built now if the key is new
 *   ... run b with p->buf (p->buf_bytes of device memory, the plan's own) ...
 *
 * Lifetime. A plan is built the first time its key is seen and kept until
 * the ctx is destroyed (f8i_plan_cache_destroy: each body's release, its
 * buffer freed, in no particular order; a captured graph may point at a
 * plan's buffer, so nothing is evicted). The returned pointers (plan, body,
 * buf) stay valid as long: other plans built later never move them.
 *
 * Build. kind->build fills the zeroed body from the owner's call arguments
 * (arg) and sets *buf_bytes to the device buffer the plan needs of its own
 * (0: none; a cuDNN graph's workspace and saved statistics, say); the cache
 * allocates it after the build. A path that cannot take the key is not an
 * error: the owner records that in the body (a refusal, kept like any plan,
 * so it is answered once). An error status from build discards the entry:
 * nothing is kept and a later call builds again.
 *
 * Workspaces, one formula. A plan's device buffer is its own: buf_bytes as
 * its build asked, allocated for it alone. An op whose plans run one at a
 * time on the ctx's stream and share one scratch (cuBLASLt's workspace and
 * the block GEMM's relaid scale grids: gemm.cu's f8i_gemm_op_workspace)
 * owns that scratch as the op's, sized once by its formula, never lent to
 * another op.
 *
 * Capture, one rule: a plan is built before or at capture, never silently
 * replaced by another path. While the ctx's stream is captured:
 *  - a key already built (or refused) is answered as outside a capture;
 *  - a new key of a kind with capture_build (host-only builds: cuBLASLt's
 *    descriptors and heuristic) is built there, as eagerly;
 *  - a new key of any other kind (cuDNN: the finalize of its runtime-fused
 *    engines compiles and loads kernels, and its buffer needs a cudaMalloc,
 *    which f8 never does while capturing), or a build that asks for a
 *    device buffer, is F8_ERR_STATE with a message naming the shape and
 *    saying to run one eager step of it before f8_graph_begin; the capture
 *    is spoiled (f8_graph_end fails) and nothing else ran in its place.
 * Allocation failures are errors with a message (F8_ERR_OUT_OF_MEMORY: host
 * memory for the entry, device memory for its buffer), never a NULL plan.
 *
 * Only src/cuda/ includes this. Not thread-safe (a ctx is one thread's).
 */
#ifndef F8_CUDA_PLAN_CACHE_CUH
#define F8_CUDA_PLAN_CACHE_CUH

#include <stddef.h>
#include <stdint.h>

#include "core/f8i.h"

typedef struct f8i_plan_kind {
    const char *name;  /* in messages: "gemm", "block gemm", "attention (cuDNN)" */
    size_t body_bytes; /* the owner's plan struct, zeroed before build */
    int capture_build; /* 1: build may run while the stream is captured (it allocates no device memory) */
    /* Fill body for arg's key; *buf_bytes = the device buffer it needs (0 on entry). */
    f8_status (*build)(f8_ctx *ctx, void *body, const void *arg, size_t *buf_bytes);
    /* Release what body holds (not body, not the buffer); safe on a half-built body. */
    void (*release)(f8_ctx *ctx, void *body);
    /* The key's shape in words for messages (may be NULL). */
    void (*describe)(const void *arg, char *out, size_t size);
} f8i_plan_kind;

typedef struct f8i_plan {
    const f8i_plan_kind *kind;
    void *body;          /* (kind->body_bytes) host, the owner's */
    void *buf;           /* (buf_bytes) device, the plan's own, or NULL */
    size_t buf_bytes;
    struct f8i_plan *next; /* the cache's hash chain */
    uint64_t hash;
    size_t key_bytes;    /* the key follows the struct, then the body */
} f8i_plan;

typedef struct f8i_plan_cache f8i_plan_cache; /* owned by plan_cache.cu, in f8i_cuda_state */

/* The ctx's cache (host memory only): made with the CUDA state, destroyed
 * with it, before the libraries its plans came from (cuDNN, cuBLASLt). */
f8_status f8i_plan_cache_create(f8_ctx *ctx);
void f8i_plan_cache_destroy(f8_ctx *ctx);

/* *out = the plan of (kind, key[0, key_bytes)), built now from arg if new
 * (the capture rule above). On an error *out is NULL and the ctx holds the
 * message. */
f8_status f8i_plan_get(f8_ctx *ctx, const f8i_plan_kind *kind, const void *key, size_t key_bytes, const void *arg,
                       f8i_plan **out);

/* The plan of (kind, key) if it was built, else NULL; builds nothing. */
f8i_plan *f8i_plan_find(f8_ctx *ctx, const f8i_plan_kind *kind, const void *key, size_t key_bytes);

/* fn(body, user) for every plan of kind (for counts and descriptions). */
void f8i_plan_each(f8_ctx *ctx, const f8i_plan_kind *kind, void (*fn)(void *body, void *user), void *user);

/* Is the ctx's stream being captured (f8_graph_begin, or a caller's own
 * capture of the stream)? An unknown answer counts as yes. */
int f8i_cuda_capturing(f8_ctx *ctx);

#endif /* F8_CUDA_PLAN_CACHE_CUH */
