/*
 * f8/layers.h — modules (Linear, LayerNormLinear, LayerNormMLP), FP8
 * primary weights and the training building blocks (embedding, attention,
 * cross-entropy, AdamW).
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
 * Under F8_RECIPE_CURRENT (TE's Float8CurrentScaling form of fp8_dpa) the
 * same chain with: scale_qkv from this qkv's own amax (the amax pass before
 * the cast, as every current-scaling cast); scale_s the amax-1 scale
 * (fp8_max·2^-margin, a power of two with power_2_scales: P's amax is 1 in
 * every causal call, so that is S's own amax), written into the S slot by
 * the forward; O not quantized: y = dt(O) (TE has cuDNN write O in high
 * precision under current scaling), its amax still recorded in the O slot,
 * whose scale is left as it is. One launch more (the amax pass).
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
 *        saved state under delayed scaling; current scaling: the BF16 O)
 *   P  = exp2((s - L)·c2) from the codes' s;  P8 = e4m3(P · scale_s)
 *   dS = P · (dO·v - D) · c;  dS8 = gd(dS · scale_dP)   (dP's amax: max |dS|)
 *   dq = Σ dS8·k8,  dk = Σ dS8·q8,  dv = Σ P8·dO8, each times its descales
 *   dqkv = dt(gd(x · scale_dqkv) · descale_dqkv) (delayed), dt(x) (current)
 * with dP's and dQKV's amaxes maxed into their slots (gd: the backward
 * format; dP's scale is the slot's, updated from its history under either
 * recipe, as TE's "DS for S, dP"). Exact formulas: src/nn/attention.h.
 * On the GPU it runs cuDNN's FP8 backward where the loaded cuDNN is 9.19
 * or newer, head_dim 128 and G = n_head (NVIDIA ships it at head_dim 128
 * only); elsewhere the BF16 backward of the dequantized codes (numerics of
 * the F16 backward, no dP or dQKV amax recorded). Memory: under delayed
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
 *       cvt.rn.satfinite (f8_fp8_from_float). Loading: m = code·scale_inv,
 *       v = (code·scale_inv)² (FP32). 0 codes and scale_invs before any step.
 * Why sqrt(v) in E4M3: v spans the square of the gradients' range, and a v
 * rounded to 0 under a nonzero m makes an update of m/eps. Storing sqrt(v)
 * halves the range in binades, so a block of 128 holds about 2^35 of v's
 * range (E4M3 with subnormals) against E5M2's 2^32 and E4M3-of-v's 2^18, at E5M2's
 * precision for v (3 mantissa bits on sqrt(v)). dev/adamw_moments_study.c
 * and docs/ARCHITECTURE.md have the comparison.
 * Round to nearest keeps a moment where it is when one step would move it by
 * less than half its storage spacing (BF16: 2^-9 to 2^-8 relative; FP8:
 * 2^-5 to 2^-4 of m or sqrt(v) in a block's top binade): e.g. with β2 = 0.999
 * a v of either form stops decaying. tests/test_adamw_moments.c states the
 * losses reached against FP32 moments on small problems (BF16 within 1%, FP8
 * within 8%); whether a model trains as well is a measurement, not a promise. */
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

#endif /* F8_LAYERS_H */
