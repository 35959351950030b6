/*
 * modules/module.h — the module base every f8 module is built on.
 *
 * Design note. What Linear, LayerNormLinear and LayerNormMLP share lives
 * here once: the parameters (one or two weights with their biases, an
 * optional norm), gradients and main_grad, the scaling slots, the memory
 * report, the saved-state object, the argument checks of forward and
 * backward, the FP8 casts of inputs and gradients, and creation that is
 * all-or-nothing. A module file keeps only its own data flow: a class (its
 * name, its saved-state layout, its forward and backward) and a create that
 * fills the base spec. The public f8_module_* calls (f8.h) check arguments
 * here and then call the class.
 *
 * Memory a call needs beyond its inputs, outputs and saved state is the
 * module's per-call workspace: each module lays it out with one function
 * that measures (base NULL: the layout's size) and places (with a base),
 * at creation for the largest T (reserved in the ctx, shared by all
 * modules, since calls on one ctx do not overlap) and at each call for its T.
 */
#ifndef F8_MODULES_MODULE_H
#define F8_MODULES_MODULE_H

#include "core/ops.h"
#include "modules/norm.h"
#include "modules/weight.h"

typedef struct f8i_module_class f8i_module_class;

/* The inference data flow of a module as a short list of steps applied in
 * turn to one value, from x to y: what the ONNX exporter (io/onnx_modules.c)
 * maps to operators, so that the knowledge of a module's flow stays in its
 * file. */
typedef enum f8i_step_kind {
    F8I_STEP_NORM,     /* m->norm over the last axis (kind, eps, gain, beta) */
    F8I_STEP_QUANTIZE, /* FP8 cast through forward slot `arg` (the GEMM that follows reads it) */
    F8I_STEP_ROUND,    /* f8 stores the value in the param dtype (BF16: rounded) */
    F8I_STEP_GEMM,     /* x · W[arg]ᵀ + b[arg] (when it has one); FP8 after a QUANTIZE */
    F8I_STEP_ACT       /* activation `arg` (f8_activation; gated: x = [a | b]) */
} f8i_step_kind;

typedef struct f8i_step {
    f8i_step_kind kind;
    int arg;
} f8i_step;

enum { F8I_MAX_STEPS = 10 };

/* The base; each module struct embeds it as its first member. */
struct f8_module {
    const f8i_module_class *cls;
    f8_ctx *ctx;
    int fp8;
    f8_dtype param_dtype;
    int fuse_wgrad;
    int64_t in_features, out_features; /* x [T, in], y [T, out] */
    int64_t max_tokens;
    int n_weights;                     /* 1, or 2 (fc1, fc2) */
    f8i_weight w[2];
    const char *weight_names[2];       /* checkpoint names (TE's state-dict names) */
    const char *bias_names[2];
    int has_norm;
    f8i_norm norm;
    int recompute_norm;                /* config.recompute_norm_output: the saved state holds no norm
                                          output; backward re-runs the norm (f8i_module_norm_recompute) */
    int n_fwd, n_bwd;
    f8_slot fwd[6], bwd[4];
    size_t workspace_bytes;            /* the largest per-call workspace (reserved in the ctx) */
    size_t (*workspace)(const f8_module *m, int64_t T, int backward); /* the spec's, kept to re-measure */
    f8_comm *sp;                       /* f8_module_set_sequence_parallel: x and dx are this rank's
                                          tokens, the norm output is gathered (sequence.c); NULL: off */
    f8_memory_report mem;              /* its allocations, saved-state objects included */
    f8i_quantizer q;                   /* how its slots quantize: chosen from the recipe at creation */
};

/* What one forward leaves for its backward. The module's own pointers into
 * `block` (its class's saved layout) follow the struct, in `impl`. */
struct f8_saved {
    f8_module *owner;
    void *block;                       /* backend memory: the module's saved layout */
    void *impl;                        /* host: the module's pointers into block */
    f8_tensor x;                       /* the caller's x, by reference */
    int64_t tokens;
    f8_microbatch microbatch;
    int filled;                        /* a forward filled it and no backward consumed it */
};

struct f8i_module_class {
    const char *name;                  /* "Linear": for messages */
    const char *prefix;                /* "f8_linear": for messages of the module's own calls */
    int fc_names;                      /* parameters are FC1_* / FC2_* (else WEIGHT / BIAS) */
    size_t saved_impl_size;            /* host bytes of the module's saved pointers (at most 256) */
    /* Lay out what a forward keeps for backward, for T tokens, taking from
     * l and placing the pointers into impl: the saved block (T = max_tokens)
     * and an inference forward's workspace (its T) share this layout. */
    size_t (*place_saved)(const f8_module *m, f8i_layout *l, int64_t T, void *impl);
    /* Arguments are checked by the base: x [T, in] FP32/BF16 (param dtype
     * with FP8 off), y [T, out], T <= max_tokens, a valid microbatch, saved
     * NULL or the module's own. aux: the module's extra output (LayerNormLinear's
     * ln_out) or NULL. residual: NULL, or (checked) [T, out] in y's dtype, y
     * itself or apart from it: y = the module's output + residual, added in
     * the last GEMM's epilogue (f8_module_forward_add). */
    f8_status (*forward)(f8_module *m, const f8_tensor *x, f8_tensor *y, f8_tensor *aux, f8_microbatch mb,
                         f8_saved *saved, const f8_tensor *residual);
    /* Checked: saved filled by this module, dy [T, out], dx NULL or [T, in],
     * main_grads set when fused. aux: the gradient of aux, or NULL. dx_add
     * (dx set, checked): dx += the input gradient, in the op that stores it
     * (f8_module_backward_add). */
    f8_status (*backward)(f8_module *m, f8_saved *s, const f8_tensor *dy, const f8_tensor *aux, f8_tensor *dx,
                          int dx_add);
    /* The forward's data flow with FP8 on (fp8 = 1, the module has fp8) or
     * off: fills steps (at most F8I_MAX_STEPS), returns their count. */
    int (*describe)(const f8_module *m, int fp8, f8i_step *steps);
};

/* What a module's create passes to the base. */
typedef struct f8i_module_spec {
    const f8i_module_class *cls;
    const char *shape_names;           /* "in_features and out_features": checked in */
    int64_t shape[2], shape_max[2];    /* [1, shape_max] */
    int64_t in_features, out_features, max_tokens;
    f8_dtype param_dtype;
    int fp8, fp8_weights, fuse_wgrad, bias;
    int weight_transpose_per_call;     /* config.weight_transpose_per_call */
    uint64_t seed;
    int n_fwd, n_bwd;                  /* scaling slots */
    int n_weights;
    int64_t weight_shape[2][2];        /* [rows, cols] of each weight */
    int weight_slot[2];                /* its forward WEIGHT slot */
    uint64_t weight_seed[2];
    const char *weight_names[2], *bias_names[2];
    int has_norm;
    f8_norm normalization;
    float eps;
    int zero_centered_gamma;
    int recompute_norm;
    /* The per-call workspace's size at T, of the forward (its largest case)
     * or the backward: the base reserves the larger at max_tokens. */
    size_t (*workspace)(const f8_module *m, int64_t T, int backward);
    size_t module_bytes;               /* sizeof the module's struct (the base first) */
    size_t own_offset;                 /* where its own fields start, copied from own */
    const void *own;
    size_t own_bytes;
} f8i_module_spec;

/* Every public module config has these fields under the same names (as
 * TE's modules share their keyword arguments); these set their defaults and
 * copy them into a spec, so no module writes them out again. */
#define F8I_CONFIG_DEFAULTS(c)                                                                                      \
    ((c).bias = 1, (c).param_dtype = F8_DTYPE_FP32, (c).fp8 = 1, (c).fuse_wgrad_accumulation = 0,                  \
     (c).fp8_weights = 0, (c).max_tokens = 4096, (c).seed = 1, (c).weight_transpose_per_call = 0)
#define F8I_NORM_CONFIG_DEFAULTS(c)                                                                                 \
    (F8I_CONFIG_DEFAULTS(c), (c).normalization = F8_NORM_LAYERNORM, (c).eps = 1e-5f, (c).zero_centered_gamma = 0,     \
     (c).recompute_norm_output = 0)
#define F8I_SPEC_FROM_CONFIG(s, c)                                                                                  \
    ((s).max_tokens = (c)->max_tokens, (s).param_dtype = (c)->param_dtype, (s).fp8 = (c)->fp8,                    \
     (s).fp8_weights = (c)->fp8_weights, (s).fuse_wgrad = (c)->fuse_wgrad_accumulation, (s).bias = (c)->bias,      \
     (s).weight_transpose_per_call = (c)->weight_transpose_per_call)
#define F8I_SPEC_NORM_FROM_CONFIG(s, c)                                                                             \
    ((s).has_norm = 1, (s).normalization = (c)->normalization, (s).eps = (c)->eps,                                 \
     (s).zero_centered_gamma = (c)->zero_centered_gamma, (s).recompute_norm = (c)->recompute_norm_output)

/* A module with one weight [out, in] (Linear, LayerNormLinear): TE's 3
 * forward slots (INPUT, WEIGHT, OUTPUT) and 2 backward ones, the names
 * "weight" and "bias". */
void f8i_spec_single_weight(f8i_module_spec *s, const f8i_module_class *cls, int64_t in, int64_t out, uint64_t seed);

/* The checks every create starts with (ctx, the output, the config); *out
 * is set to NULL. */
f8_status f8i_create_check(f8_ctx *ctx, const char *fn, const void *config, f8_module **out);

/* Allocate the module's struct (its own fields copied in), check what
 * every module config shares (fn names the create call) and create the
 * base: slots, norm, weights and the workspace reservation. All-or-nothing:
 * on failure everything is released and the ctx's slot registry is as
 * before; on success *out is the module. */
f8_status f8i_module_create(f8_ctx *ctx, const f8i_module_spec *spec, const char *fn, f8_module **out);

/* Sequence parallel (sequence.c): the group's size (1 without), and the
 * tokens T of a call whose x holds `rows` of them (this rank's share). */
static inline int64_t f8i_sp_size(const f8_module *m) { return m->sp ? f8_comm_size(m->sp) : 1; }
static inline int64_t f8i_sp_tokens(const f8_module *m, int64_t rows) { return rows * f8i_sp_size(m); }

/* The workspace of this call: the ctx reservation (at least workspace_bytes). */
static inline f8i_layout f8i_module_workspace(const f8_module *m) { return f8i_layout_at(m->ctx->scratch); }

/* An FP8 cast through one of the module's slots: src [rows, cols] →
 * data [rows, cols] (may be NULL), data_t [cols, rows] (or NULL), its own
 * scale_inv; amax into the slot. With dbias (a weight with a bias, backward
 * only): that bias gradient += column sums of src, using `reduce` as the
 * backend's workspace (f8i_reduce_workspace_bytes(rows, cols)).
 * Under F8_RECIPE_BLOCK the cast is the block cast (1x128 tiles): scale_inv
 * is data's grid [rows, ceil(cols/128)] and scale_inv_t data_t's own
 * [cols, ceil(rows/128)] (quantized from src, not transposed); otherwise
 * (TENSOR) both codes share one scalar, which scale_inv_t points at too.
 * mode is the module's activation quantizer's (m->q.act). */
typedef struct f8i_qbuf {
    uint8_t *data, *data_t;
    float *scale_inv;
    f8_dtype dtype;
    float *scale_inv_t;
    f8i_scaling_mode mode;
} f8i_qbuf;

/* q [rows, cols] as a GEMM operand. */
static inline f8i_operand f8i_qbuf_operand(const f8i_qbuf *q, int64_t rows, int64_t cols)
{
    f8i_operand o = {q->data, q->data_t, q->dtype, q->mode, q->scale_inv, q->scale_inv_t, rows, cols};
    return o;
}

/* Take the scale_inv of an FP8 [rows, cols] tensor from a layout: `bytes`
 * (the recipe's one scalar, as the layout had it) or, under block scaling,
 * a grid large enough for either orientation's 1x128 tiles. */
float *f8i_take_sinv(const f8_module *m, f8i_layout *l, int64_t rows, int64_t cols, size_t bytes);

/* Place (or measure, l's base NULL) the norm's saved state for T tokens of
 * m's in_features: keep_ln 0 (recompute_norm training) puts the scale in
 * ln_sinv's place and no ln, so the state is smaller by exactly ln's bytes. */
void f8i_norm_saved_place(const f8_module *m, f8i_layout *l, int64_t T, int keep_ln, f8i_norm_saved *s);
f8_status f8i_module_quantize(f8_module *m, const void *src, f8_dtype src_dtype, int64_t rows, int64_t cols,
                              f8_direction dir, int slot, const f8i_qbuf *out, f8i_weight *dbias_of, void *reduce);
/* What f8i_module_quantize adds after a kernel that fused the row-wise
 * codes (m->q.fused_rows; they, each row's scale_inv, the amax and the
 * telemetry are that kernel's): out's column-wise copy (out->data_t, with
 * out->scale_inv_t) and dbias from the high-precision src; nothing when
 * neither is asked for. col_amax_in: the kernel also left src's column
 * amaxes in out->scale_inv_t (its col_amax, backend.h's F8I_ROW_FUSED,
 * given f8i_module_col_amax(out)), so the cast only codes the
 * copy (core/rowwise.h's col_amax_in); 0 where that was NULL. */
f8_status f8i_module_quantize_cols(f8_module *m, const void *src, f8_dtype src_dtype, int64_t rows, int64_t cols,
                                   f8_direction dir, int slot, const f8i_qbuf *out, f8i_weight *dbias_of,
                                   void *reduce, int col_amax_in);
/* The col_amax a fused row-wise kernel (F8I_ROW_FUSED) is given for the
 * f8i_module_quantize_cols of out after it: out's scale_inv_t where the cast
 * makes the column-wise copy (with or without dbias: the cast sums it in
 * its own order either way); NULL otherwise. */
float *f8i_module_col_amax(const f8i_qbuf *out);
/* The per-tensor cast of src [rows, cols] into out's codes (no transpose,
 * no amax, no dbias) with slot sl's scale as it stands: the args every
 * module cast starts from (f8i_module_quantize adds the transpose and the
 * quantizer's scaling, f8i_quantizer_cast_scaling, and dbias; sequence
 * parallel moves out to this rank's rows). */
f8i_cast_args f8i_module_cast_args(f8_ctx *ctx, f8_slot sl, const void *src, f8_dtype src_dtype, int64_t rows,
                                   int64_t cols, const f8i_qbuf *out);

/* The module-specific forward and backward with an extra output (aux):
 * checked as f8_module_forward/backward, and that m is of class cls. */
f8_status f8i_module_forward_aux(f8_module *m, const f8i_module_class *cls, const f8_tensor *x, f8_tensor *y,
                                 f8_tensor *aux, f8_microbatch mb, f8_saved *saved, const char *fn);
f8_status f8i_module_backward_aux(f8_module *m, const f8i_module_class *cls, f8_saved *s, const f8_tensor *dy,
                                  const f8_tensor *aux, f8_tensor *dx, const char *fn);

/* Take an FP8 buffer of [rows, cols] codes (with transpose if t) and its
 * scale_inv from a layout; dtype from the direction's recipe format. */
f8i_qbuf f8i_take_qbuf(f8_module *m, f8i_layout *l, f8_direction dir, int64_t rows, int64_t cols, int t);

/* The GEMM input of a norm module, ln = norm(x) [T, K] with x this rank's
 * T/P rows (P = f8i_sp_size; P = 1 without sequence parallel), into q:
 * FP8 codes (q->data, and q->data_t when the block cast writes the
 * column-wise copy) with q->scale_inv, or with FP8 off the param dtype in
 * q->data. slot: the forward INPUT slot. hp: [T, K] param dtype staging of
 * the unfused casts (current, block), else NULL. mu, rsigma: x's rows.
 * amax: F8I_SP_AMAX_FLOATS floats of workspace with a group (current
 * scaling's group amax, and the slot's state kept across the collectives).
 * With a group, rank r's rows are r·T/P.. of ln and the rest come from the
 * other ranks (all-gather): FP8 codes under delayed and current scaling (one
 * scale for the group), the param dtype before the cast under block
 * scaling. A collective that fails (F8_ERR_COMM) leaves the slot as it was:
 * no amax of the failed call reaches the next scale update. */
#define F8I_SP_AMAX_FLOATS 5
f8_status f8i_module_norm_input(f8_module *m, const f8_tensor *x, int slot, const f8i_qbuf *q, void *hp, float *mu,
                                float *rsigma, float *amax);

/* recompute_norm: the norm output of the forward that filled sv, again,
 * from sv's x and the norm's parameters (with the same kernels, so the same
 * bits), into q (FP8 codes with q->scale_inv, or the param dtype in
 * q->data with FP8 off). scale: the FP8 cast's scale as the forward saved
 * it. hp: [T, K] param dtype staging for the unfused cast (current
 * scaling), else NULL. Records no amax and no telemetry, writes no slot and
 * nothing of sv. */
f8_status f8i_module_norm_recompute(f8_module *m, const f8_saved *sv, const float *scale, const f8i_qbuf *q,
                                    void *hp);

/* The forward's half of it: after f8i_module_norm_input, keep the scale
 * the INPUT slot cast with (a device copy of one float) in saved. No-op
 * with FP8 off. */
f8_status f8i_module_norm_keep_scale(f8_module *m, int slot, float *saved_scale);

/* The norm backward from dln [T, K] (FP32 or BF16), the input gradient of
 * the module's first GEMM: with a group, dln is each rank's partial sum and
 * is reduce-scattered (FP32, in rank order) to this rank's rows first,
 * through stage (FP32 [T, K], used when dln is not FP32) and local (FP32
 * [T/P, K]). dx: NULL or [T/P, K], overwritten or (dx_add) added to;
 * gamma/beta gradients accumulate. */
f8_status f8i_module_norm_backward(f8_module *m, const f8_saved *sv, const void *dln, f8_dtype dln_dtype,
                                   const float *mu, const float *rsigma, f8_tensor *dx, int dx_add, void *reduce,
                                   float *stage, float *local);

#endif /* F8_MODULES_MODULE_H */
