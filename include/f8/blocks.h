/*
 * f8/blocks.h — the training building blocks around the modules: embedding,
 * attention (with rotary embeddings and FP8 attention), cross-entropy and
 * AdamW.
 * Part of the public API; include f8.h, which includes every topic header.
 */
#ifndef F8_BLOCKS_H
#define F8_BLOCKS_H

#include "core.h"
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Training building blocks: embedding, attention, cross-entropy, AdamW      */
/* ------------------------------------------------------------------------ */

/* The pieces a GPT trainer needs around the modules, on both backends, all
 * asynchronous, allocation-free per call and graph-capturable. Token ids are
 * int32 in backend memory. A batch of B sequences of S tokens is flattened
 * to T = B·S rows, sequence-major (row b·S + s). */

/* Token + position embedding (GPT-2): y[t, :] = wte[tokens[t], :] + wpe[t mod S, :].
 * wte [V, C], wpe [>= S, C], y [T, C]: FP32 or BF16 (y may differ; sums in
 * FP32). A token outside [0, V) cannot be reported by the device: its row of
 * y is the position embedding alone, and backward ignores it. */
F8_API f8_status f8_embedding_forward(f8_ctx *ctx, const int32_t *tokens, int64_t seq_len, const f8_tensor *wte,
                                      const f8_tensor *wpe, f8_tensor *y);
/* dwte[tokens[t], :] += dy[t, :], dwpe[t mod S, :] += dy[t, :]; deterministic:
 * every sum is taken in the same order on every run. dwpe may be NULL.
 * dy [T, C], dwte [V, C], dwpe [>= S, C]: FP32 or BF16, not overlapping.
 * Each row's contributions are summed in FP32 and added to the gradient
 * once (BF16: one rounding), except on a CUDA ctx when more than ~2k of the
 * T tokens fall into one band of 256 vocabulary rows: that band's rows are
 * then added in a few pieces (positions in ascending chunks), each rounded.
 * Rows no token names are not written. T may be any count (a last, partial
 * sequence is fine). Allocates nothing. */
F8_API f8_status f8_embedding_backward(f8_ctx *ctx, const int32_t *tokens, int64_t seq_len, const f8_tensor *dy,
                                       f8_tensor *dwte, f8_tensor *dwpe);

/* Causal multi-head self-attention, as in GPT-2. qkv [T, 3C] holds per row
 * [q | k | v], each C = n_head · head_dim wide, head h in columns
 * h·head_dim .. (h+1)·head_dim - 1 of each third. For each sequence and head:
 *   y = softmax(q kᵀ / sqrt(head_dim) + causal mask) v      y [T, C]
 * dtype FP32 or BF16. On the GPU a BF16 call goes first to cuDNN's fused
 * attention (head_dim a multiple of 8 up to 128, 16-byte aligned views;
 * cuDNN 9 loaded at run time), then, where cuDNN declines or is absent, to
 * f8's flash-attention kernels (BF16, head_dim 64 or 128, aligned), and
 * every other case to a plain, correct and slow kernel. The caller keeps qkv
 * unchanged until backward; y is copied into the saved state, so y may change.
 *
 * Numerics (per row i, keys j <= i; c = 1/sqrtf(head_dim), c2 = c·log2 e):
 *   forward   s = q_i·k_j (FP32 sum), m = max_j s, p_j = exp2((s_j - m)·c2),
 *             l = Σ p_j, y_i = (Σ_j dt(p_j)·v_j)·(1/l), L_i = m + log2(l)/c2
 *   backward  P_ij = exp2((s_ij - L_i)·c2), dP_ij = dy_i·v_j, D_i = dy_i·y_i,
 *             dS_ij = dt(P_ij·(dP_ij - D_i)·c), dv_j = Σ_i dt(P_ij)·dy_i,
 *             dk_j = Σ_i dS_ij·q_i, dq_i = Σ_j dS_ij·k_j
 * where dt() rounds to the dtype; statistics and sums are FP32, each output
 * rounded to the dtype once. The GPU's fused kernels take m as a running
 * maximum over blocks of 64 keys (online softmax), so their p is rounded
 * relative to that maximum and rescaled in FP32; results agree with the CPU
 * backend to about one BF16 rounding. S = 1 is exact: y = v, dq = dk = 0
 * (CPU), dv = dy. Deterministic: the same inputs give bitwise the same
 * outputs on a ctx (no atomics on either backend).
 *
 * Memory: a saved state holds L (FP32, max_batch · n_head · max_seq) and a
 * copy of y (max_batch · max_seq · C elements of the dtype), as
 * F8_MEM_SAVED_ACTIVATIONS: O(T·C), never O(S²). Create reserves the ctx
 * scratch for one call at max_batch, max_seq: n_head · T + 2 · max_seq
 * floats (T = max_batch · max_seq). f8's kernels allocate nothing; the forward
 * is 1 kernel launch, the backward 2. The cuDNN path builds an execution plan
 * (and allocates its workspace, kept until the ctx is destroyed) the first
 * time it sees a shape; while a graph is being captured nothing is built or
 * allocated, and a shape without a plan runs f8's kernels instead. So run
 * every shape once eagerly before capturing it, or the captured step takes
 * the slower path.
 * Errors: create: F8_ERR_SHAPE for n_head or head_dim outside [1, 2^16],
 * C > 2^24, max_batch outside [1, 2^24], max_seq outside [1, 2^20],
 * max_batch · n_head >= 2^31 or a saved state over 2^40 bytes; F8_ERR_DTYPE
 * for a dtype not FP32/BF16;
 * F8_ERR_STATE while capturing a graph (saved_create too).
 *
 * FP8 (config.fp8 = 1: TE's fp8_dpa with its F16 backward, NVTE_FP8_DPA_BWD=0).
 * Create registers three forward scaling slots in the ctx (f8_attention_fp8_slots:
 * QKV, shared by q, k and v; S, the softmax output; O, the output), updated,
 * all-reduced and read like a module's, and checkpointed by
 * f8_checkpoint_add_attention / f8_checkpoint_restore_attention (below: a
 * module checkpoint does not hold them). The forward:
 *   q8 = e4m3(qkv · scale_qkv), its amax into QKV's accumulator, dq = 1/scale_qkv
 *   s  = FP32(Σ q8·k8)·dq·dk;  m, p, l, L as above;  P = p / l  (normalized)
 *   P8 = e4m3(P · scale_s),  O = FP32(Σ P8·v8)·descale_s·dv
 *   y  = dt(e4m3(O · scale_o) · descale_o)
 * with amax_s = max P (1 for any causal call) and amax_o = max |O| maxed into
 * S's and O's accumulators; scale and descale are the slots' (descale = their
 * scale_inv). The backward is the BF16 one above run on dt(q8·dq) (the
 * inputs the forward used), the saved y and L: gradients are BF16 and the
 * caller's qkv is not read after the forward. On the GPU the forward runs
 * cuDNN's FP8 flash attention where the loaded cuDNN is 9.19 or newer
 * (head_dim 64 or 128; 4 launches with the cast; cuDNN rounds P in its own
 * blocked order, so P8 and O8 codes may land a step from the formulas'),
 * else f8's FP8 kernel, the formulas above (2 launches with the cast;
 * correct, far slower than the BF16 attention). cuDNN 9.14's FP8 forward
 * is wrong at training shapes and never used. The
 * backward is a dequantize plus the BF16 backward. Memory: the saved state
 * adds the codes (T·3C bytes) and the reservation the backward's BF16 qkv
 * (T·3C·2 bytes).
 * Under F8_RECIPE_CURRENT the same chain with: scale_qkv from this qkv's
 * own amax (the amax pass before the cast, as every current-scaling cast);
 * scale_s the amax-1 scale (fp8_max·2^-margin, a power of two with
 * power_2_scales: P's amax is 1 in every causal call, so that is S's own
 * amax), written into the S slot by the forward; scale_o = scale_qkv and
 * descale_o = dq (P's rows are convex weights, so |O| <= max|v| <=
 * amax(qkv): known before the call too), so y carries O's E4M3 rounding as
 * under delayed scaling. O's amax is still recorded in the O slot, whose
 * scale is not read and left as it is. (TE's form leaves O in BF16; cuDNN
 * has no Hopper engine for that, this one runs on cuDNN as delayed
 * scaling's does.) One launch more (the amax pass).
 * Errors: create with fp8 = 1:
 * F8_ERR_DTYPE unless dtype is BF16, F8_ERR_UNSUPPORTED unless the ctx's
 * recipe is F8_RECIPE_DELAYED or F8_RECIPE_CURRENT (block and row-wise
 * scales have no fused FP8 attention here), F8_ERR_INVALID_ARGUMENT for fp8
 * or fp8_backward not 0 or 1, or fp8_backward without fp8; a refused create
 * registers nothing.
 *
 * FP8 backward (config.fp8_backward = 1, with fp8 = 1: TE's
 * NVTE_FP8_DPA_BWD=1). Create also registers three backward slots
 * (f8_attention_fp8_backward_slots: dO, dP, dQKV; their dtype the recipe's
 * backward format, E5M2 under HYBRID). The backward casts dy to dO8 with
 * dO's scale (current scaling: from dy's own amax), then, with the codes
 * q8, k8, v8 and dO8, per row i and key j <= i:
 *   D  = Σ dO8·O8 · descale_dO · descale_O   (O8 the forward's, kept in the
 *        saved state under delayed scaling; current scaling: y's BF16 O,
 *        the dequantized O8, with descale_O 1)
 *   P  = exp2((s - L)·c2) from the codes' s;  P8 = e4m3(P · scale_s)
 *   dS = P · (dO·v - D) · c;  dS8 = gd(dS · scale_dP)   (dP's amax: max |dS|)
 *   dq = Σ dS8·k8,  dk = Σ dS8·q8,  dv = Σ P8·dO8, each times its descales
 *   dqkv = dt(gd(x · scale_dqkv) · descale_dqkv) (delayed), dt(x) (current)
 * with dP's and dQKV's amaxes maxed into their slots (gd: the backward
 * format; dP's scale is the slot's, updated from its history under either
 * recipe, as TE's "DS for S, dP"). Exact formulas: src/nn/attention.h.
 * On the GPU it runs cuDNN's FP8 backward where the loaded cuDNN is 9.19
 * or newer, head_dim 128 and G = n_head (NVIDIA ships it at head_dim 128
 * only) and, under current scaling, where cuDNN has an engine for its
 * form (O and dQKV in BF16: none below Blackwell, so not on Hopper);
 * elsewhere the BF16 backward of the dequantized codes (numerics of the
 * F16 backward, no dP or dQKV amax recorded). Memory: under delayed
 * scaling the saved state adds O8 (T·C bytes); the reservation dO8 (T·C).
 *
 * GQA (config.n_kv_head = G < n_head, Llama's grouped-query attention; G = 1
 * is multi-query). qkv is then [T, (n_head + 2G)·head_dim]: per row
 * [q | k | v] with q n_head heads wide and k, v G heads each; query head h
 * reads key/value head h / (n_head / G). y stays [T, n_head·head_dim];
 * dqkv has qkv's layout, each dk, dv head the sum over the n_head / G query
 * heads that read it (on every path in one fixed order: deterministic).
 * Everything above holds with the wider qkv; G = n_head is the layout above.
 * With fp8 = 1 the codes have qkv's (wider) layout too; such a forward runs
 * f8's FP8 kernel on the GPU (cuDNN's FP8 forward is taken for G = n_head only).
 * Errors: F8_ERR_SHAPE when G does not divide n_head (or is negative). */
typedef struct f8_attention f8_attention;
typedef struct f8_attention_saved f8_attention_saved;

typedef struct f8_attention_config {
    int64_t n_head;     /* >= 1 */
    int64_t head_dim;   /* >= 1 */
    int64_t max_batch;  /* largest B of any call; sizes the saved state */
    int64_t max_seq;    /* largest S */
    f8_dtype dtype;     /* qkv, y and their gradients: FP32 or BF16; default BF16 */
    int output_kept;    /* 1: the caller keeps each forward's y, unchanged, until its backward (as it
                           keeps qkv): the saved state then holds no copy of y (T·C elements less) and the
                           forward writes none; default 0 (the saved state copies y) */
    int fp8;            /* 1: FP8 attention (TE's fp8_dpa, with its F16 backward): see "FP8" above;
                           needs dtype BF16 and a ctx with F8_RECIPE_DELAYED or F8_RECIPE_CURRENT; default 0 */
    int64_t n_kv_head;  /* key/value heads (grouped-query attention, see "GQA" above): divides n_head;
                           1 is multi-query; 0 (or n_head, the default) is multi-head */
    int fp8_backward;   /* 1 (needs fp8 = 1): the backward in FP8 too (TE's NVTE_FP8_DPA_BWD=1): see
                           "FP8 backward" above; default 0 (on Hopper cuDNN's FP8 backward is no faster
                           than BF16: it is there for TE parity and for its numerics) */
} f8_attention_config;

/* The given sizes, dtype BF16, multi-head (n_kv_head = n_head). */
F8_API f8_attention_config f8_attention_config_default(int64_t n_head, int64_t head_dim, int64_t max_batch,
                                                       int64_t max_seq);
F8_API f8_status f8_attention_create(f8_ctx *ctx, const f8_attention_config *config, f8_attention **attention);
F8_API void f8_attention_destroy(f8_attention *attention);
/* What one forward keeps for its backward (L and, unless output_kept, a copy
 * of y, allocated here). Any number may be in flight; each holds the last forward written
 * into it. */
F8_API f8_status f8_attention_saved_create(f8_attention *attention, f8_attention_saved **saved);
F8_API void f8_attention_saved_destroy(f8_attention_saved *saved);
/* qkv [B·S, 3C] (GQA: [B·S, (n_head + 2·n_kv_head)·head_dim]) and y [B·S, C] in the config dtype, 0 <= batch <= max_batch,
 * 0 <= seq <= max_seq (zero tokens: nothing is issued); y must not overlap
 * qkv. saved may be NULL (inference: y is bitwise the same); otherwise it
 * records this call (L, the copy of y, and the qkv pointer) for the
 * backward. F8_ERR_SHAPE / F8_ERR_DTYPE for a tensor that does not match,
 * F8_ERR_INVALID_ARGUMENT for NULLs, overlap or a saved state of another
 * attention. */
F8_API f8_status f8_attention_forward(f8_attention *attention, const f8_tensor *qkv, int64_t batch, int64_t seq,
                                      f8_tensor *y, f8_attention_saved *saved);
/* The backward of the forward recorded in saved (same B, S; reads that
 * forward's qkv, which must be unchanged): dy [B·S, C], dqkv in qkv's shape, in the
 * config dtype; dqkv is overwritten (dq, dk, dv in qkv's layout) and must
 * overlap neither qkv nor dy. saved is not consumed: it may be used again.
 * F8_ERR_STATE if no forward was recorded in saved. */
F8_API f8_status f8_attention_backward(f8_attention *attention, f8_attention_saved *saved, const f8_tensor *dy,
                                       f8_tensor *dqkv);
/* The forward scaling slots of an attention created with fp8 = 1: [out]
 * slots[0] QKV (q, k and v share it), slots[1] S (the softmax output),
 * slots[2] O (the output), in the ctx registry with the modules' (read,
 * write and update them as any slot). F8_ERR_STATE for fp8 = 0. */
F8_API f8_status f8_attention_fp8_slots(const f8_attention *attention, f8_slot slots[3]);
/* The backward scaling slots of an attention created with fp8_backward = 1:
 * [out] slots[0] dO, slots[1] dP (dS, the softmax's gradient), slots[2]
 * dQKV (dq, dk and dv share it). F8_ERR_STATE for fp8_backward = 0. */
F8_API f8_status f8_attention_fp8_backward_slots(const f8_attention *attention, f8_slot slots[3]);
/* [out] *path: the implementation a forward (backward = 0) or backward
 * (backward = 1) of this attention at (batch, seq) takes on its ctx, for
 * 16-byte aligned tensors: F8_ATTENTION_PATH_CUDNN or F8_ATTENTION_PATH_OWN
 * (a CPU ctx, FP32, a head_dim cuDNN does not take, config attention_path
 * OWN, no cuDNN, a plan cuDNN refused; an FP8 forward takes CUDNN only
 * where the loaded cuDNN is 9.19 or newer and head_dim is 64 or 128: older
 * cuDNN's FP8 forward is wrong at training shapes; an FP8 attention's
 * backward is the BF16 one and answers as such, unless fp8_backward: then
 * CUDNN where cuDNN's FP8 backward takes it, as above).
 * Outside a graph capture the answer is final: it loads cuDNN and builds the
 * call's plan as the call itself would (asking is warming up). While a graph
 * is captured nothing is built: a shape not built before reports OWN, as the
 * captured call runs. F8_ERR_SHAPE for batch or seq outside [1, max];
 * F8_ERR_OUT_OF_MEMORY when the call's cuDNN plan cannot be allocated (the
 * call would fail the same way: a plan is never quietly replaced). */
F8_API f8_status f8_attention_query_path(f8_attention *attention, int64_t batch, int64_t seq, int backward,
                                         f8_attention_path *path);
/* Checkpoint an attention's FP8 scaling state under prefix ("model.h.3.attn")
 * / restore it (synchronizes; F8_ERR_STATE while capturing, as
 * f8_checkpoint_add_tensor). An attention has no parameters: what it stores
 * is its three slots, laid out as a module's forward slots ("Checkpoints"):
 *   <prefix>.fp8.fwd.amax_history (F32 [L, 3]), .fp8.fwd.scale and
 *   .fp8.fwd.scale_inv (F32 [3]), in f8_attention_fp8_slots' order (QKV, S, O),
 * with the recipe in the metadata ("<prefix>.fp8.recipe"); with fp8_backward
 * also its backward slots as a module's backward slots (.fp8.bwd.*, in
 * f8_attention_fp8_backward_slots' order, same rules). With fp8 = 0
 * there is nothing to store: add adds nothing and returns F8_OK, so a
 * model may call it for every attention. Add refuses a name already in
 * the checkpoint before adding anything (F8_ERR_INVALID_ARGUMENT).
 * Restore checks every entry (present; F32 of 3 slots, else F8_ERR_SHAPE;
 * amaxes finite and >= 0, scales and scale_invs finite and > 0; the recipe
 * format the ctx's) before it writes, and changes nothing on an error.
 * F8_ERR_INVALID_ARGUMENT also when the checkpoint and the attention
 * disagree on fp8: state stored under prefix and an attention with fp8 = 0
 * (it would be dropped), or fp8 = 1 and none stored (a checkpoint of a BF16
 * attention, or one written before attentions were stored: create the
 * attention as the checkpoint's was). fp8 = 0 and none stored: F8_OK,
 * nothing to do. A history of another length is cut or zero-padded at the
 * end, as a module's (TE's rule: its attention keeps its FP8 state as its
 * modules do). */
F8_API f8_status f8_checkpoint_add_attention(f8_checkpoint *checkpoint, const char *prefix,
                                             const f8_attention *attention);
F8_API f8_status f8_checkpoint_restore_attention(const f8_checkpoint *checkpoint, const char *prefix,
                                                 f8_attention *attention);

/* Rotary position embeddings (RoPE, as Llama and Hugging Face's
 * LlamaRotaryEmbedding: the "rotate half" pairing), applied in place to the
 * q and k heads of an attention's qkv rows [T, (n_head + 2·n_kv_head)·head_dim]
 * (f8_attention's layout, GQA included) before f8_attention_forward; v is
 * untouched. Row t is position p = t mod seq. For each q and k head and
 * d < head_dim/2, with θ = p·ω_d:
 *   x[d]         <- x[d]·cos θ - x[d + head_dim/2]·sin θ
 *   x[d + hd/2]  <- x[d + hd/2]·cos θ + x[d]·sin θ
 * The backward applies the transpose (the rotation by -θ) to the q and k
 * heads of dqkv in place, after f8_attention_backward.
 *
 * Frequencies (f8_rope_inv_freq): ω_d = theta^(-2d/head_dim). With
 * scaling F8_ROPE_SCALING_LLAMA3 (Llama 3.1's rope_scaling "llama3"), with
 * λ_d = 2π/ω_d, L = original_max_position, lo = low_freq_factor,
 * hi = high_freq_factor: λ_d < L/hi keeps ω_d; λ_d > L/lo gives ω_d/factor;
 * between, with s = (L/λ_d - lo)/(hi - lo): (1 - s)·ω_d/factor + s·ω_d.
 * Computed in FP64 and rounded to FP32 ω; θ = FP32(p·ω) (one FP32 product,
 * as transformers takes it); cos θ and sin θ in FP64 rounded to FP32, kept
 * in a table of max_seq · head_dim FP32 (F8_MEM_OTHER) made at create. Each
 * output is FP32 (two products, then the sum: no fused multiply-add) rounded
 * once to the dtype, so the CPU and CUDA backends agree bit for bit.
 * Asynchronous, allocation-free per call, graph-capturable; 1 launch.
 *
 * Errors: create: F8_ERR_SHAPE for n_head, n_kv_head (must divide n_head)
 * or max_seq < 1, head_dim odd or < 2 or > 2^16, T·width past 2^40;
 * F8_ERR_INVALID_ARGUMENT for theta not finite and > 1, scaling unknown,
 * LLAMA3 with factor < 1, low_freq_factor <= 0, high_freq_factor <=
 * low_freq_factor or original_max_position < 1 (NaNs included); F8_ERR_STATE
 * while capturing. forward/backward: F8_ERR_SHAPE for seq outside
 * [1, max_seq] or qkv not [T, (n_head + 2·n_kv_head)·head_dim]; F8_ERR_DTYPE
 * unless FP32 or BF16; nothing is changed on an error. */
typedef struct f8_rope f8_rope;

typedef enum f8_rope_scaling {
    F8_ROPE_SCALING_NONE = 0,   /* ω_d as given by theta */
    F8_ROPE_SCALING_LLAMA3 = 1  /* Llama 3.1's "llama3" frequency scaling */
} f8_rope_scaling;

typedef struct f8_rope_config {
    int64_t n_head, n_kv_head, head_dim; /* the attention's; n_kv_head divides n_head */
    int64_t max_seq;                     /* largest seq of any call: the table's rows */
    double theta;                        /* rope_theta: 10000 (Llama 2), 500000 (Llama 3) */
    f8_rope_scaling scaling;
    double factor, low_freq_factor, high_freq_factor; /* LLAMA3: e.g. 32, 1, 4 (Llama 3.2) */
    int64_t original_max_position;       /* LLAMA3: e.g. 8192 */
} f8_rope_config;

/* The given shape, theta 10000, no scaling (the LLAMA3 fields 8, 1, 4, 8192: Llama 3.1's, used only when scaling is set). */
F8_API f8_rope_config f8_rope_config_default(int64_t n_head, int64_t n_kv_head, int64_t head_dim, int64_t max_seq);
/* [out] inv_freq[head_dim/2]: ω_d of config in FP64 (before the FP32 rounding); the config checks as create's. */
F8_API f8_status f8_rope_inv_freq(const f8_rope_config *config, double *inv_freq);
F8_API f8_status f8_rope_create(f8_ctx *ctx, const f8_rope_config *config, f8_rope **rope);
F8_API void f8_rope_destroy(f8_rope *rope);
F8_API f8_status f8_rope_forward(f8_rope *rope, f8_tensor *qkv, int64_t seq);
F8_API f8_status f8_rope_backward(f8_rope *rope, f8_tensor *dqkv, int64_t seq);

/* Softmax cross-entropy of logits [T, Vp] (FP32 or BF16) against targets [T]
 * (int32 backend), over the first `vocab` columns (the rest are padding:
 * no probability, zero gradient). A target outside [0, vocab) marks an
 * ignored row (loss 0, zero gradient). Writes losses [T] (FP32 backend
 * memory, -log p(target)) and, if dlogits is not NULL, dlogits [T, Vp] =
 * (softmax - onehot(target)) · grad_scale (dlogits may be logits itself).
 * Per row, in FP32: m = max x, s = Σ exp(x - m), loss = log s - (x_target - m),
 * dlogits = (exp(x - m) / s - onehot) · grad_scale (a CUDA ctx may use the
 * fast exponential and multiply by 1/s: within 1e-5 relative of these, the
 * same bits every run). dlogits is FP32 or BF16;
 * in place it must be the same pointer and dtype (any other overlap:
 * F8_ERR_INVALID_ARGUMENT). 1 <= vocab <= Vp (F8_ERR_SHAPE). */
F8_API f8_status f8_cross_entropy(f8_ctx *ctx, const f8_tensor *logits, int64_t vocab, const int32_t *targets,
                                  float grad_scale, float *losses, f8_tensor *dlogits);

/* AdamW (decoupled weight decay) over a set of parameters, with global
 * gradient-norm clipping and a warmup + cosine learning-rate schedule, all
 * computed on the device from a device step counter, so a whole step can be
 * one graph replay:
 *   lr(step)  = lr_max · (step + 1) / warmup_steps                  step < warmup_steps
 *             = lr_min + (lr_max - lr_min) · (1 + cos(π · p)) / 2
 *                 p = (step - warmup) / (total - warmup), clamped to 1
 *   norm      = sqrt(Σ over every grad of g²)  (FP32, fixed order: deterministic)
 *   c         = grad_clip > 0 && norm > grad_clip ? grad_clip / norm : 1
 *   g' = c·g; m = β1 m + (1-β1) g'; v = β2 v + (1-β2) g'²
 *   p -= lr · (m / (1-β1^t) / (sqrt(v / (1-β2^t)) + eps) + wd · p)   (wd only for params added with decay)
 * with t = step + 1; then step += 1. Params FP32 or BF16 (BF16 rounded to
 * nearest even). The moments are kept in the precision the config's
 * `moments` field selects (f8_adamw_moments below): each step loads them,
 * runs the lines above in FP32 (in that order, no fused multiply-add), updates
 * the parameter with the step's FP32 m and v, and only then rounds m and v
 * into their storage. Both backends give the same bits, for every choice. */
typedef struct f8_adamw f8_adamw;

/* How the Adam moments are stored between steps (bytes per parameter: m + v
 * + per-block scales; the FP32 master parameter is not counted):
 *   F8_ADAMW_MOMENTS_FP32  m, v FP32: exact.                         8 B
 *   F8_ADAMW_MOMENTS_BF16  m, v BF16, round to nearest even.          4 B
 *   F8_ADAMW_MOMENTS_FP8   per block of F8_ADAMW_FP8_BLOCK consecutive 2 + 8/128 = 2.0625 B
 *                          elements of a tensor (the last block may be short):
 *       m: E4M3 codes of m·sm, sm = 2^floor(log2(448 / amax|m|));
 *       v: E4M3 codes of sqrt(v)·sv, sv = 2^floor(log2(448 / amax sqrt(v)));
 *       each block keeps scale_inv = 1/s (FP32, exact) for m and for sqrt(v).
 *       amax over the block's new FP32 values (NaN ignored); a block of zeros
 *       keeps s = 1; s = 448/amax rounded down to a power of two (FLT_MAX's
 *       when that overflows), so x·s and code·scale_inv are exact. Encoding is
 *       stochastic rounding: with lo and hi the E4M3 values around |x·s|,
 *       the code of hi when |x·s| - lo > u·(hi - lo), else lo's (a value on
 *       a code is that code); u = (r >> 8)·2^-24 with r the top 32 bits of
 *       mix64((2·i + k) XOR mix64(t)), i the element's index in its
 *       parameter (f8_adamw_add_slice's first + its offset), t the step
 *       (1-based), k 0 for m and 1 for sqrt(v), mix64 splitmix64's output
 *       function. Loading: m = code·scale_inv, v = (code·scale_inv)² (FP32).
 *       0 codes and scale_invs before any step.
 * Why sqrt(v) in E4M3: v spans the square of the gradients' range, and a v
 * rounded to 0 under a nonzero m makes an update of m/eps. Storing sqrt(v)
 * halves the range in binades, so a block of 128 holds about 2^35 of v's
 * range (E4M3 with subnormals) against E5M2's 2^32 and E4M3-of-v's 2^18, at E5M2's
 * precision for v (3 mantissa bits on sqrt(v)). dev/adamw_moments_study.c
 * and docs/ARCHITECTURE.md have the comparison.
 * Why stochastic rounding for FP8: round to nearest keeps a moment where it
 * is when one step would move it by less than half its storage spacing
 * (FP8: 2^-5 to 2^-4 of m or sqrt(v)): at β2 = 0.95 sqrt(v) decays 2.5% a
 * step, so a v rounded to nearest never decays and the steps shrink (a 50M
 * model ended 4-10% above FP32 moments' loss); rounded stochastically a
 * moment moves in expectation as in FP32. BF16 rounds to nearest (its
 * spacing, 2^-9 to 2^-8, stalls only β2 >= 0.99's v).
 * tests/test_adamw_moments.c states the losses reached against FP32 moments
 * on small problems (BF16 within 1%, FP8 within 3%); whether a model trains
 * as well is a measurement, not a promise. */
typedef enum f8_adamw_moments {
    F8_ADAMW_MOMENTS_FP32 = 0,
    F8_ADAMW_MOMENTS_BF16 = 1,
    F8_ADAMW_MOMENTS_FP8 = 2
} f8_adamw_moments;

#define F8_ADAMW_FP8_BLOCK 128

/* "fp32", "bf16", "fp8" (the checkpoint metadata's values); NULL for another value. */
F8_API const char *f8_adamw_moments_name(f8_adamw_moments moments);

typedef struct f8_adamw_config {
    float lr_max;        /* default 6e-4 */
    float lr_min;        /* default 6e-5 */
    int64_t warmup_steps; /* default 0 (no warmup) */
    int64_t total_steps; /* cosine ends here; default 0 = constant lr_max after warmup */
    float beta1, beta2, eps; /* 0.9, 0.95, 1e-8 */
    float weight_decay;  /* default 0.1 */
    float grad_clip;     /* default 1.0; 0 = no clipping */
    f8_adamw_moments moments; /* default F8_ADAMW_MOMENTS_FP32 */
} f8_adamw_config;

F8_API f8_adamw_config f8_adamw_config_default(void);
/* Errors: F8_ERR_INVALID_ARGUMENT for a negative or non-finite lr, eps,
 * weight_decay or grad_clip, a beta outside [0, 1), negative step counts, or
 * total_steps neither 0 nor greater than warmup_steps, or an unknown
 * moments value. The device state
 * (F8_MEM_OTHER) is allocated here. */
F8_API f8_status f8_adamw_create(f8_ctx *ctx, const f8_adamw_config *config, f8_adamw **adamw);
F8_API void f8_adamw_destroy(f8_adamw *adamw);
/* Register a parameter and its gradient (same shape; views must stay valid
 * while the optimizer is used). decay != 0 applies weight decay to it.
 * Param and grad are FP32 or BF16, independently. Allocates its moments
 * (the bytes per parameter above, F8_MEM_OTHER) and rebuilds the device list of parameters,
 * so every step, the first included, may be captured in a graph. Refused with
 * F8_ERR_STATE once a step has been issued (eagerly or into a graph); a
 * parameter registered twice is F8_ERR_INVALID_ARGUMENT. */
F8_API f8_status f8_adamw_add(f8_adamw *adamw, const f8_tensor *param, const f8_tensor *grad, int decay);
/* As f8_adamw_add, for a slice of a larger parameter (a data-parallel shard):
 * param and grad are its elements [first, first + n). FP8 moments draw each
 * element's rounding bits from its index in the whole parameter, so the
 * slice rounds as the whole parameter's registration would (first 0 is
 * f8_adamw_add). first < 0 is F8_ERR_INVALID_ARGUMENT. */
F8_API f8_status f8_adamw_add_slice(f8_adamw *adamw, const f8_tensor *param, const f8_tensor *grad, int decay,
                                    int64_t first);
/* One update of every registered parameter (asynchronous; CUDA: three
 * launches however many parameters). */
F8_API f8_status f8_adamw_step(f8_adamw *adamw);
/* Host copies of the device state after the last step (synchronizes); any
 * output may be NULL: steps done, the lr used by the last step, the
 * gradient norm before clipping of the last step (0, 0, 0 before any step). */
F8_API f8_status f8_adamw_read(f8_adamw *adamw, int64_t *step, float *lr, float *grad_norm);
/* Sharded optimizer (ZeRO-1): the registered tensors are this rank's shard of
 * the model, and the norm that clipping uses is global: with a comm set, a
 * step computes Σ g² over its own tensors, all-reduces it (SUM) over comm,
 * and then takes norm = sqrt of that (FP32) and updates as above. Three ops
 * instead of one, all on the stream (graph-capturable). comm must be made on
 * the optimizer's ctx and outlive the optimizer's steps (and any graph that
 * recorded them); NULL unsets. Refused (F8_ERR_STATE) while capturing. Every
 * rank must step together (the all-reduce is a collective). */
F8_API f8_status f8_adamw_set_comm(f8_adamw *adamw, f8_comm *comm);
/* Checkpoint the optimizer (moments and step) under prefix / restore it
 * (same parameter shapes registered in the same order). Entries, with i the
 * registration order: <prefix>.m.<i> and <prefix>.v.<i> (the parameter's
 * shape; F32 or BF16 as the moments are kept; with FP8 moments instead
 * <prefix>.m.<i> and <prefix>.v_sqrt.<i>, F8_E4M3 codes of m and sqrt(v),
 * plus <prefix>.m_scale_inv.<i> and <prefix>.v_sqrt_scale_inv.<i>, F32
 * [blocks]), <prefix>.step (I64 [1]), <prefix>.lr and <prefix>.grad_norm (F32
 * [1], what f8_adamw_read returns), and the metadata "<prefix>.moments" =
 * f8_adamw_moments_name (a checkpoint without it holds FP32 moments).
 * Parameters are not stored: add them as tensors. Restoring checks every
 * entry first (a missing one, another dtype or shape, more parameters stored
 * than registered, a NaN or infinite moment, lr or grad_norm, or a negative
 * second moment, scale_inv, lr or grad_norm (F8_ERR_INVALID_ARGUMENT naming
 * the tensor and element); moments kept in another form than the optimizer's
 * config.moments: F8_ERR_DTYPE naming both, not converted) change nothing)
 * and then continues the run bit for bit. Adding refuses a name already in
 * the checkpoint before adding anything. */
F8_API f8_status f8_checkpoint_add_adamw(f8_checkpoint *checkpoint, const char *prefix, f8_adamw *adamw);
F8_API f8_status f8_checkpoint_restore_adamw(const f8_checkpoint *checkpoint, const char *prefix, f8_adamw *adamw);

#ifdef __cplusplus
}
#endif

#endif /* F8_BLOCKS_H */
