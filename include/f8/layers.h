/*
 * f8/layers.h — modules (Linear, LayerNormLinear, LayerNormMLP) and FP8
 * primary weights; the training building blocks around them (embedding,
 * attention, cross-entropy, AdamW) are in f8/blocks.h, included here too.
 * Part of the public API; include f8.h, which includes every topic header.
 */
#ifndef F8_LAYERS_H
#define F8_LAYERS_H

#include "core.h"
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Modules: one interface for every layer                                    */
/* ------------------------------------------------------------------------ */

/* Every layer (Linear, LayerNormLinear, LayerNormMLP) is an f8_module: its
 * own config and create below, then the same calls for all of them (as a
 * torch.nn.Module has one interface whatever the layer). A module owns its
 * parameters (FP32 or BF16 master weights, or FP8 primary weights), their
 * gradients (or writes the weight gradient into a caller's main_grad), one
 * FP8 workspace per weight and its scaling slots. */

/* What one forward keeps for its backward: one per microbatch in flight,
 * made from (and usable only with) one module. */
typedef struct f8_saved f8_saved;

/* How the forward treats the FP8 weight workspace (TE's is_first_microbatch):
 *   NONE      cast the weight every forward (the workspace is refreshed);
 *   FIRST     cast into the cached workspace (data, transpose, scale_inv);
 *   NOT_FIRST reuse the workspace as it is: its data and private scale_inv are
 *             untouched and the weight slot's amax is not written; a workspace
 *             never filled is filled anyway. */
typedef enum f8_microbatch {
    F8_MICROBATCH_NONE = 0,
    F8_MICROBATCH_FIRST = 1,
    F8_MICROBATCH_NOT_FIRST = 2
} f8_microbatch;

/* The parameters a module may have, named as TE's state dicts name them
 * (f8_param_name). Linear and LayerNormLinear: WEIGHT [N, K], BIAS [1, N];
 * LayerNormLinear and LayerNormMLP: LN_WEIGHT (gamma) [1, K], LN_BIAS (beta,
 * LayerNorm only) [1, K]; LayerNormMLP: FC1_WEIGHT [F1, H] (F1 = ffn, 2·ffn
 * gated), FC1_BIAS [1, F1], FC2_WEIGHT [H, ffn], FC2_BIAS [1, H]. */
typedef enum f8_param {
    F8_PARAM_WEIGHT = 0,
    F8_PARAM_BIAS = 1,
    F8_PARAM_LN_WEIGHT = 2,
    F8_PARAM_LN_BIAS = 3,
    F8_PARAM_FC1_WEIGHT = 4,
    F8_PARAM_FC1_BIAS = 5,
    F8_PARAM_FC2_WEIGHT = 6,
    F8_PARAM_FC2_BIAS = 7
} f8_param;

/* "weight", "bias", "layer_norm_weight", "layer_norm_bias", "fc1_weight",
 * ...; "unknown" otherwise. Static string. */
F8_API const char *f8_param_name(f8_param which);

/* Free a module and all its memory. NULL is a no-op. Saved-state objects
 * made from it must be destroyed first. */
F8_API void f8_module_destroy(f8_module *module);

/* View of a parameter (grad = 0) or of its gradient (grad = 1), backend
 * memory owned by the module; write a parameter through it (f8_ctx_upload)
 * to load weights. F8_ERR_INVALID_ARGUMENT for a parameter this kind of
 * module does not have; F8_ERR_STATE for one this module was created without
 * (bias = 0, or beta of an RMSNorm). The view of an FP8 primary weight is
 * its FP8 data with its private scale_inv (read it; write it only through
 * f8_module_write_weight). With fuse_wgrad_accumulation a weight (not its
 * bias) has no gradient buffer of its own: its gradient view is the FP32
 * main_grad set by f8_module_set_main_grad, F8_ERR_STATE before one is set. */
F8_API f8_status f8_module_param(f8_module *module, f8_param which, int grad, f8_tensor *view);

/* Slot i of a direction. Linear, LayerNormLinear: forward 0 INPUT, 1 WEIGHT,
 * 2 OUTPUT; backward 0 GRAD_OUTPUT, 1 GRAD_INPUT. LayerNormMLP: forward
 * GEMM1_INPUT, GEMM1_WEIGHT, GEMM1_OUTPUT, GEMM2_INPUT, GEMM2_WEIGHT,
 * GEMM2_OUTPUT; backward GRAD_OUTPUT1, GRAD_INPUT1, GRAD_OUTPUT2,
 * GRAD_INPUT2 (TE's order). */
F8_API f8_status f8_module_slot(const f8_module *module, f8_direction direction, int i, f8_slot *slot);

/* The FP8 workspace of a weight (WEIGHT, FC1_WEIGHT or FC2_WEIGHT), owned by
 * the module; NULL for anything else. */
F8_API const f8_qtensor *f8_module_weight_workspace(const f8_module *module, f8_param weight);

/* With fuse_wgrad_accumulation: the FP32 buffer, the weight's shape (backend
 * memory, owned by the caller, alive while used), that backward writes that
 * weight's gradient into: overwritten (beta 0) when the forward ran with
 * F8_MICROBATCH_FIRST, accumulated (beta 1) otherwise. Such a module holds
 * no param_dtype gradient of its weights (biases and norm parameters keep
 * theirs): f8_module_param's gradient view of a weight is this buffer.
 * Every weight of the module needs one before a backward. Without
 * fuse_wgrad_accumulation:
 * F8_ERR_STATE; main_grad NULL: F8_ERR_INVALID_ARGUMENT (it cannot be unset,
 * only replaced). */
F8_API f8_status f8_module_set_main_grad(f8_module *module, f8_param weight, float *main_grad);

/* Zero every parameter gradient of the module (not a main_grad: the
 * caller's, overwritten by a backward after an F8_MICROBATCH_FIRST forward). */
F8_API f8_status f8_module_zero_grad(f8_module *module);

/* A saved-state object for this module (FP8: what backward needs of the
 * forward in FP8, with the scale_invs it was cast with; FP8 off: those
 * tensors in param_dtype). Sized by config.max_tokens: all memory is
 * allocated here. */
F8_API f8_status f8_module_saved_create(f8_module *module, f8_saved **saved);
F8_API void f8_saved_destroy(f8_saved *saved); /* NULL is a no-op */

/* Hand a saved-state object to another module (activation recompute: one
 * object serves every layer's module of one kind in turn, and the backward
 * re-runs a layer's forward into it). The module must lay out the same saved
 * state as the object's current owner: the same kind, shapes, max_tokens, fp8,
 * recompute_norm_output, recompute_activation and recompute_input_cast, on
 * the same ctx (else F8_ERR_INVALID_ARGUMENT, nothing changed). Whatever
 * forward the object held is dropped (a backward
 * needs a new forward with it); from then on it belongs to `module` alone.
 * Its memory stays accounted to the module that created it, which must
 * outlive it. Host work only: legal while capturing a graph. Rebinding to the
 * current owner changes nothing. */
F8_API f8_status f8_module_saved_rebind(f8_module *module, f8_saved *saved);

/* Forward: y[T, out] = module(x[T, in]).
        * [in] x: FP32 or BF16 (FP8 off: must equal param_dtype), T <= max_tokens;
 *   kept unchanged by the caller until backward (FP8 off, and the norms,
 *   read it there).
 * [out] y: FP32 or BF16 [T, out], apart from x (any overlap:
 *   F8_ERR_INVALID_ARGUMENT; a GEMM's output must not alias its input).
 * [in,out] saved: NULL for inference (no backward); otherwise filled for
 *   f8_module_backward.
 * FP8 on: each GEMM input is cast through its INPUT slot (amax recorded, its
 * own scale_inv written by the same kernel), each weight workspace is handled
 * per `microbatch`, and the GEMMs are FP8 TN GEMMs with fast accumulation
 * whose operand scales are the operands' own scale_invs. T = 0 is legal and
 * writes nothing but the weight casts. A LayerNormLinear created with
 * return_layernorm_output needs f8_layernorm_linear_forward. */
F8_API f8_status f8_module_forward(f8_module *module, const f8_tensor *x, f8_tensor *y, f8_microbatch microbatch,
                                   f8_saved *saved);

/* Backward of the forward that filled `saved`.
 * [in] dy: FP32 or BF16 [T, out] (FP8 off: must equal param_dtype).
 * [out] dx: FP32 or BF16 [T, in], or NULL to skip the input gradient.
 * Every parameter gradient is accumulated (+=), the weight gradients into
 * main_grad per f8_module_set_main_grad. FP8 on: dy is cast with its
 * transpose (and the bias gradient) through GRAD_OUTPUT, dgrad uses the
 * weight workspace's transpose and its own scale_inv, wgrad the saved FP8
 * input transpose with the scale_inv it was cast with; both with split
 * accumulation. The saved state may be reused for another forward after. */
F8_API f8_status f8_module_backward(f8_module *module, f8_saved *saved, const f8_tensor *dy, f8_tensor *dx);

/* Residual connections fused into the module (a transformer block's
 * x + attn(x) and x + mlp(x), and their gradients), with no separate add
 * kernel and one rounding of each sum.
 *
 * f8_module_forward_add: y = module(x) + residual. The residual is added in
 * FP32 in the epilogue of the module's last GEMM (Linear's and
 * LayerNormLinear's GEMM, LayerNormMLP's fc2): y = alpha·Σ x·W + residual
 * + b, rounded once to y's dtype (f8_module_forward followed by
 * f8_tensor_add rounds a BF16 y twice). Everything else, and the saved
 * state, is as f8_module_forward.
 * [in] residual: [T, out] in y's dtype (FP32 or BF16). It may be y itself
 *   (the same view: then y += module(x)) or memory apart from y; it may be
 *   x. Block scaling (F8_RECIPE_BLOCK) copies a residual apart from y into
 *   y first, then accumulates (its GEMM has no separate addend).
 * Errors, with nothing written: F8_ERR_INVALID_ARGUMENT for a NULL residual
 * or one that overlaps y in part; F8_ERR_DTYPE for a dtype other than y's;
 * F8_ERR_SHAPE for a shape other than y's; and every f8_module_forward
 * error. A LayerNormLinear created with return_layernorm_output is refused,
 * as by f8_module_forward. With sequence parallelism y holds all T tokens,
 * so does the residual. */
F8_API f8_status f8_module_forward_add(f8_module *module, const f8_tensor *x, f8_tensor *y, const f8_tensor *residual,
                                       f8_microbatch microbatch, f8_saved *saved);

/* f8_module_backward_add: f8_module_backward with dx += the input gradient
 * (dx is read and written): FP32 math, one rounding of the sum. Linear: its
 * dgrad GEMM accumulates into dx; LayerNormLinear and LayerNormMLP: the norm
 * backward adds dx as it stores it. The parameter gradients are as
 * f8_module_backward's.
 * [in,out] dx: FP32 or BF16 [T, in] (sequence parallel: this rank's rows),
 *   required. LayerNormLinear and LayerNormMLP read dy before they write dx,
 *   so dx may be dy itself (the same bytes, in == out); a Linear reads dy
 *   while it writes dx, so there dx must not overlap dy.
 * Errors, with nothing written: F8_ERR_INVALID_ARGUMENT for a NULL dx, or a
 * dx overlapping dy other than as allowed above; every f8_module_backward
 * error. */
F8_API f8_status f8_module_backward_add(f8_module *module, f8_saved *saved, const f8_tensor *dy, f8_tensor *dx);

/* ------------------------------------------------------------------------ */
/* Linear: y = x · Wᵀ + b                                                    */
/* ------------------------------------------------------------------------ */

typedef struct f8_linear_config {
    int64_t in_features;    /* K, in [1, 2^24] */
    int64_t out_features;   /* N, in [1, 2^24] */
    int bias;               /* 1: learnable bias [N]; default 1 */
    f8_dtype param_dtype;   /* master weights: FP32 or BF16; default FP32 */
    int fp8;                /* 1: FP8 GEMMs (E4M3 forward, recipe format backward); default 1 */
    int fuse_wgrad_accumulation; /* 1: wgrad goes into the caller's FP32 main_grad; default 0 */
    int fp8_weights;        /* 1: FP8 primary weight (TE's fp8_model_init): W is kept only in
                               FP8, no copy in param_dtype; needs fp8; default 0. See
                               "FP8 primary weights" below */
    int64_t max_tokens;     /* largest T of any call (sizes workspaces and saved state); default 4096 */
    uint64_t seed;          /* weight init: N(0, 0.02^2) from this seed; bias 0; default 1 */
    int weight_transpose_per_call; /* 1: no cached FP8 weight transpose; each backward makes it in the
                               workspace (see "The weight transpose per call" below); default 0 */
    int recompute_input_cast; /* 1: the saved state keeps no FP8 copy of x; backward casts the caller's
                               x again (see "Recomputing the input cast" below); default 0 */
} f8_linear_config;
/* Flags (bias, fp8, ...) must be 0 or 1. */

F8_API f8_linear_config f8_linear_config_default(int64_t in_features, int64_t out_features);

/* Create a Linear: parameters W [N, K] and b [N] in param_dtype, their
 * gradients (zero), one FP8 weight workspace [N, K] with its transpose, and
 * 3 forward + 2 backward scaling slots. All memory is allocated here;
 * forward and backward allocate nothing. A create that fails leaves the ctx
 * as it was (no slots registered, no memory held). */
F8_API f8_status f8_linear_create(f8_ctx *ctx, const f8_linear_config *config, f8_module **module);

/* ------------------------------------------------------------------------ */
/* Norms and activations shared by the fused modules                         */
/* ------------------------------------------------------------------------ */

typedef enum f8_norm {
    F8_NORM_LAYERNORM = 0, /* y = (x - mean) · rsigma · g + beta, rsigma = 1/sqrt(var_biased + eps) */
    F8_NORM_RMSNORM = 1    /* y = x · rsigma · g, rsigma = 1/sqrt(mean(x²) + eps) */
} f8_norm;
/* g = gamma, or 1 + gamma with zero_centered_gamma. Statistics in FP32. */

typedef enum f8_activation {
    F8_ACT_GELU = 0,   /* 0.5x(1 + tanh(0.79788456(x + 0.044715x³))) */
    F8_ACT_RELU = 1,   /* max(x, 0) */
    F8_ACT_GEGLU = 2,  /* gelu(a)·b   (gated: fc1 output [a | b], each ffn wide) */
    F8_ACT_REGLU = 3,  /* relu(a)·b   (gated) */
    F8_ACT_SWIGLU = 4, /* silu(a)·b = a·sigmoid(a)·b (gated) */
    F8_ACT_QGELU = 5,  /* x·sigmoid(1.702x) */
    F8_ACT_SRELU = 6   /* max(x, 0)² */
} f8_activation;

/* 1 for the gated activations (GEGLU, REGLU, SWIGLU), whose fc1 has 2·ffn
 * output features; 0 otherwise (and for unknown values). */
F8_API int f8_activation_gated(f8_activation act);

/* ------------------------------------------------------------------------ */
/* LayerNormLinear: y = norm(x) · Wᵀ + b                                     */
/* ------------------------------------------------------------------------ */

typedef struct f8_layernorm_linear_config {
    int64_t in_features;      /* K, in [1, 2^24] */
    int64_t out_features;     /* N, in [1, 2^24] */
    int bias;                 /* default 1 */
    f8_norm normalization;    /* default F8_NORM_LAYERNORM */
    float eps;                /* default 1e-5 */
    int zero_centered_gamma;  /* default 0 (gamma initialised to 1; with it, to 0) */
    int return_layernorm_output; /* 1: forward also returns norm(x) in high precision; default 0 */
    f8_dtype param_dtype;     /* FP32 or BF16; default FP32 */
    int fp8;                  /* default 1 */
    int fuse_wgrad_accumulation; /* default 0 */
    int fp8_weights;          /* FP8 primary weight W (as f8_linear_config); default 0 */
    int64_t max_tokens;       /* default 4096 */
    uint64_t seed;            /* W ~ N(0, 0.02²); default 1 */
    int recompute_norm_output; /* 1: backward re-runs the norm instead of saving its output
                                  (see "Recomputing the norm output" below); default 0 */
    int weight_transpose_per_call; /* as f8_linear_config's; default 0 */
} f8_layernorm_linear_config;

F8_API f8_layernorm_linear_config f8_layernorm_linear_config_default(int64_t in_features, int64_t out_features);

/* Create: parameters (W, b, gamma, beta), their gradients (zero), one FP8
 * weight workspace, 3 forward + 2 backward slots (as Linear). With FP8 the
 * norm kernel writes the GEMM input in FP8 directly (slot INPUT, amax of its
 * output) unless return_layernorm_output, where the norm output is high
 * precision and cast separately. All memory is allocated here. */
F8_API f8_status f8_layernorm_linear_create(f8_ctx *ctx, const f8_layernorm_linear_config *config, f8_module **module);

/* f8_module_forward with the norm output: [out] ln_out [T, K] FP32 or BF16,
 * norm(x), required with return_layernorm_output and NULL otherwise (then
 * this is f8_module_forward). F8_ERR_INVALID_ARGUMENT on another kind of
 * module. */
F8_API f8_status f8_layernorm_linear_forward(f8_module *module, const f8_tensor *x, f8_tensor *y, f8_tensor *ln_out,
                                             f8_microbatch microbatch, f8_saved *saved);

/* f8_module_backward with [in] dln_out [T, K], the gradient reaching the
 * returned norm output (return_layernorm_output only; NULL = zero). */
F8_API f8_status f8_layernorm_linear_backward(f8_module *module, f8_saved *saved, const f8_tensor *dy,
                                              const f8_tensor *dln_out, f8_tensor *dx);

/* ------------------------------------------------------------------------ */
/* LayerNormMLP: y = fc2(act(fc1(norm(x))))                                 */
/* ------------------------------------------------------------------------ */

typedef struct f8_layernorm_mlp_config {
    int64_t hidden_size;      /* H, in [1, 2^24] */
    int64_t ffn_hidden_size;  /* F, in [1, 2^23] */
    int bias;                 /* fc1 and fc2 biases; default 1 */
    f8_norm normalization;    /* default F8_NORM_LAYERNORM */
    float eps;                /* default 1e-5 */
    int zero_centered_gamma;  /* default 0 */
    f8_activation activation; /* default F8_ACT_GELU */
    f8_dtype param_dtype;     /* FP32 or BF16; default FP32 */
    int fp8;                  /* default 1 */
    int fuse_wgrad_accumulation; /* default 0 */
    int fp8_weights;          /* FP8 primary fc1 and fc2 weights (as f8_linear_config); default 0 */
    int64_t max_tokens;       /* default 4096 */
    uint64_t seed;            /* default 1 */
    int recompute_norm_output; /* as f8_layernorm_linear_config's; default 0 */
    int recompute_activation; /* 1: backward makes the activation output (fc2's input) again from the
                                 saved pre-activation instead of saving it (see "Recomputing the
                                 activation output" below); default 0 */
    int weight_transpose_per_call; /* as f8_linear_config's (fc1 and fc2); default 0 */
} f8_layernorm_mlp_config;

F8_API f8_layernorm_mlp_config f8_layernorm_mlp_config_default(int64_t hidden_size, int64_t ffn_hidden_size);

/* Create: gamma, beta, fc1 [F1, H] (+bias), fc2 [H, F] (+bias), gradients,
 * two FP8 weight workspaces (fc1, fc2), 6 forward + 4 backward slots. With
 * FP8 the norm writes fc1's FP8 input (GEMM1_INPUT) and the activation writes
 * fc2's FP8 input (GEMM2_INPUT), amax fused. microbatch applies to both
 * weights. In backward with FP8 the two dgrad GEMMs' outputs (the gradients
 * reaching the activation and the norm) are in param_dtype, as TE keeps them
 * in the activation dtype: BF16 parameters round them to BF16 once. */
F8_API f8_status f8_layernorm_mlp_create(f8_ctx *ctx, const f8_layernorm_mlp_config *config, f8_module **module);

/* Recomputing the norm output (recompute_norm_output = 1, LayerNormLinear
 * and LayerNormMLP). A training forward normally keeps the norm output, the
 * first GEMM's input (T·H bytes in FP8, T·H·size(param_dtype) with FP8
 * off), in the saved state for that GEMM's wgrad. With the flag the saved
 * state keeps x by reference (as always: the norm backward reads it), the
 * statistics mu and rsigma and, with FP8, the one float the cast scaled by;
 * the backward runs the norm forward again from x and gamma/beta into the
 * per-call workspace, with that scale, and continues as without the flag.
 * f8_module_memory's saved activations shrink by the norm output's bytes
 * per saved-state object (124M GPT, T = 65536, H = 768, FP8: 48 MiB per
 * module, two modules a layer); the ctx workspace, shared by all modules,
 * grows by at most one FP8 norm output (LayerNormMLP's backward; with
 * current scaling and ffn < hidden also its param_dtype staging); each
 * backward costs one more norm forward (and with current scaling one more
 * cast).
 * Results are bit for bit those without the flag: the same kernel on the
 * same inputs, the same scale (saved at the forward, so scale updates, or
 * another microbatch's current-scaling amax, between a forward and its
 * backward change nothing) and so the same codes and scale_inv. The
 * recompute records nothing: no amax, no FP8 telemetry counts. Delayed and
 * current scaling, and FP8 off, are supported. Refused at create with
 * F8_ERR_UNSUPPORTED: block scaling (F8_RECIPE_BLOCK; it saves a column-
 * wise copy quantized from the high-precision output) and
 * return_layernorm_output; f8_module_set_sequence_parallel refuses such a
 * module with F8_ERR_UNSUPPORTED (the norm output is gathered over the
 * group). Flag values other than 0 or 1: F8_ERR_INVALID_ARGUMENT. */

/* Recomputing the activation output (LayerNormMLP, recompute_activation =
 * 1). A training forward normally keeps act(h1), fc2's input, for fc2's
 * wgrad: with FP8 its codes transposed (T·F bytes), with FP8 off in
 * param_dtype. It also keeps h1, fc1's output before the activation, for the
 * activation's backward, so act(h1) is one elementwise pass away: with the
 * flag the saved state keeps no act(h1), only (FP8) the one float its cast
 * scaled by, and the backward runs the activation forward again from h1
 * into the per-call workspace (the buffers of the activation backward's
 * output, written only after fc2's wgrad has read it), with that scale.
 * f8_module_memory's saved activations shrink by T·F bytes per saved-state
 * object with FP8 (1.3B GPT, T = 8192, F = 8192: 64 MiB a layer), T·F·
 * size(param_dtype) without; the workspace does not grow with FP8 (FP8 off:
 * the training forward's activation output moves into it). Each backward
 * costs one more activation forward (and with current scaling one more
 * cast): a read of h1 and a write of the codes, no GEMM.
 * Results are bit for bit those without the flag: the same kernel on the
 * same h1 with the same scale (saved at the forward), so the same codes;
 * fc2's wgrad reads them with the forward's saved scale_inv. The recompute
 * records nothing: no amax, no FP8 telemetry counts. Delayed and current
 * scaling, and FP8 off, are supported; block and row-wise scaling
 * (F8_RECIPE_BLOCK, F8_RECIPE_ROWWISE*: their column-wise copy is quantized
 * from the high-precision output) are refused at create with
 * F8_ERR_UNSUPPORTED. Flag values other than 0 or 1: F8_ERR_INVALID_ARGUMENT. */

/* Recomputing the input cast (Linear, recompute_input_cast = 1). With FP8 a
 * training forward keeps X8ᵀ, x's codes transposed, for the wgrad: T·K bytes
 * per saved-state object. With the flag it keeps only the one float x's cast
 * scaled by, and the backward casts x again (the same cast, that scale) into
 * the per-call workspace just before the wgrad: so the caller must keep x
 * unchanged until the backward with FP8 too (as FP8 off always needs; the
 * trainer's x, the attention output, is kept for the attention's backward
 * anyway). The workspace grows by T·K·2 bytes (X8 and X8ᵀ); the backward by
 * one cast. Bit for bit the results without the flag; records no amax and
 * no telemetry. Delayed and current scaling; block and row-wise scaling
 * refuse it at create (F8_ERR_UNSUPPORTED); FP8 off ignores it. Values
 * other than 0 or 1: F8_ERR_INVALID_ARGUMENT. */

/* The weight transpose per call (weight_transpose_per_call = 1, every
 * module). With FP8 and per-tensor scaling a module keeps, beside each
 * weight's FP8 codes W8 (the forward's operand, cast once a step by the
 * microbatch rule), their transpose W8ᵀ (the dgrad's: Hopper's FP8 GEMM
 * takes only K-contiguous operands), made at the first backward and cached
 * with W8: rows·cols bytes a weight (1.3B GPT: 1.13 GiB). With the flag
 * none is cached: each backward transposes W8's codes into the per-call
 * workspace (which grows by the largest weight's rows·cols bytes, shared by
 * all modules) right before the dgrad, with W8's scale_inv. The codes are
 * W8's moved, so results are bit for bit those without the flag; the cost
 * is one transpose of 1-byte codes per weight per backward (a read and a
 * write of rows·cols bytes). f8_module_memory's workspace transposes fall
 * to 0. Block and row-wise scaling quantize W8ᵀ on its own (not a
 * transpose), so they refuse the flag at create (F8_ERR_UNSUPPORTED); FP8
 * off ignores it. Values other than 0 or 1: F8_ERR_INVALID_ARGUMENT. */

/* ------------------------------------------------------------------------ */
/* FP8 primary weights (TE's fp8_model_init)                                 */
/* ------------------------------------------------------------------------ */

/* A module created with config.fp8_weights = 1 keeps each weight only as an
 * FP8 tensor (its workspace is the parameter): 1 byte per element plus the
 * transpose, no master copy. It is initialised by quantizing the usual
 * N(0, 0.02²) init with the weight slot's scale (1 at creation). Its gradient
 * is still kept in param_dtype (or main_grad), for an optimizer that holds
 * the FP32 master weights itself and writes them back after each step:
 *
 *   optimizer step on your master copy;
 *   f8_module_write_weight(m, F8_PARAM_WEIGHT, &master)  (every FP8 weight);
 *   f8_ctx_update_weight_scales(ctx);
 *
 * The param view of such a weight is the FP8 data with its private
 * scale_inv (read it; write only through f8_module_write_weight). The microbatch
 * argument then only decides main_grad accumulation and whether the forward
 * fills the transpose (FIRST) or backward makes it lazily; in graph mode
 * (f8_ctx_set_weight_noop) every forward re-makes the transpose under the
 * ctx noop flag, so a captured graph stays right after weight writes. */

/* Write new weight values. src: FP32 or BF16, the weight's shape.
 *   FP8 primary weight: data = fp8(src · weight-slot scale), the slot's amax
 *     is recorded, the private scale_inv = 1/scale (same kernel), and the
 *     cached transpose becomes invalid.
 *   Master weight in param_dtype: src is converted into it; the workspace is
 *     re-cast by the next forward whatever its microbatch (it is marked
 *     unfilled), so no forward uses values older than the write.
 * Asynchronous on the ctx stream. weight: WEIGHT, FC1_WEIGHT or FC2_WEIGHT. */
F8_API f8_status f8_module_write_weight(f8_module *module, f8_param weight, const f8_tensor *src);

/* An FP8 primary weight written by parts, for a data-parallel trainer whose
 * ranks each keep the master values of one shard of the weight (ZeRO; TE
 * casts a master-weight shard the same way): each rank casts its part (src
 * [1, n], FP32 or BF16, n <= the weight's elements) into codes (n bytes)
 * with the weight slot's scale, recording the part's amax; the ranks
 * all-gather the codes (1 byte per element); every rank writes the whole
 * weight's codes in, with scale_inv = 1/scale; then
 * f8_ctx_update_weight_scales (it reduces the amaxes over the ctx's comm).
 * F8_ERR_STATE for a weight that is not FP8 primary, F8_ERR_UNSUPPORTED
 * under current scaling (a part cannot be cast with the whole weight's
 * amax), F8_ERR_SHAPE for more values than the weight has. Asynchronous,
 * capturable. */
F8_API f8_status f8_module_quantize_weight_part(f8_module *module, f8_param weight, const f8_tensor *src, void *codes);
F8_API f8_status f8_module_write_weight_codes(f8_module *module, f8_param weight, const void *codes);

/* The post-optimizer scale update of TE (§2.4 of the spec): the fused
 * delayed-scaling update of f8_ctx_update_scales, over the forward slots of
 * the modules created with fp8_weights only (all their forward slots, as TE
 * does; slots whose accumulator is 0 keep their scale and do not roll).
 * With a comm (f8_ctx_set_comm) the forward amaxes are first MAX-reduced
 * over its ranks, as TE does, so ranks that each wrote a part of a weight
 * get the same scale: a collective then, every rank calls it. Nothing runs
 * when the ctx has no such module. Asynchronous. */
F8_API f8_status f8_ctx_update_weight_scales(f8_ctx *ctx);

#ifdef __cplusplus
}
#endif

#include "blocks.h" /* before f8/blocks.h existed, its declarations were here */

#endif /* F8_LAYERS_H */
