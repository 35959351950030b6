/*
 * f8/io.h — checkpoints (safetensors) and ONNX export.
 * Part of the public API; include f8.h, which includes every topic header.
 */
#ifndef F8_IO_H
#define F8_IO_H

#include "core.h"
#include "layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Checkpoints (safetensors)                                                 */
/* ------------------------------------------------------------------------ */

/* An f8_checkpoint is a set of named tensors and string metadata held in
 * host memory, saved to and loaded from one safetensors file: an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype
 * ("F32", "BF16", "F8_E4M3", "F8_E5M2", "I32", "I64", "U8"), shape (0 to 8
 * dimensions) and byte range, then the data. __metadata__ holds "format" =
 * "f8" and "f8.format_version" = "1", an integrity checksum of every
 * tensor's bytes ("f8.xxh64.<tensor name>" = XXH64, seed 0, as 16 lowercase
 * hex digits), plus the caller's pairs.
 *
 * Files written by f8 are canonical (the same checkpoint gives the same
 * bytes): the JSON lists tensors by name (byte order) and is padded with
 * spaces so the data starts at a multiple of 8; the data has no gaps and is
 * ordered by element size, largest first, then by name, so each tensor
 * starts at a multiple of its element size. Plain safetensors files of other
 * tools (no f8 metadata) load too, for f8_checkpoint_read_tensor, as long as
 * their dtypes are among the seven above.
 *
 * A module is stored under a name prefix ("blocks.3.mlp") as
 *   <prefix>.weight / .bias / .layer_norm_weight / .layer_norm_bias /
 *   .fc1_weight / .fc1_bias / .fc2_weight / .fc2_bias   (those it has)
 *   <prefix>.<weight>_scale_inv   the private scale_inv of an FP8 primary weight
 *   <prefix>.fp8.fwd.amax_history [L, n], .fp8.fwd.scale [n], .fp8.fwd.scale_inv [n]
 *   <prefix>.fp8.bwd.*            the same for its backward slots
 * with the recipe in the metadata ("<prefix>.fp8.recipe": format, margin,
 * history length, algorithm and, for a kind other than DELAYED,
 * "scaling=<f8_recipe_kind_name>"); restoring FP8 state written under another
 * recipe format or kind is refused (F8_ERR_INVALID_ARGUMENT). FP8 primary
 * weights are stored as F8_E4M3/F8_E5M2. Gradients and workspaces are not
 * stored: restoring marks the workspaces unfilled, so the next forward casts.
 * Restoring a module whose file has no fp8.* entries is legal: its slots
 * start fresh (history 0, scale 1). A history of another length is cut or
 * zero-padded at the end (TE's rule). An FP8 attention's slots are stored
 * the same way by f8_checkpoint_add_attention (with f8_attention). */

/* An empty checkpoint bound to ctx (whose memory the tensors come from and
 * go to). */
F8_API f8_status f8_checkpoint_create(f8_ctx *ctx, f8_checkpoint **checkpoint);
F8_API void f8_checkpoint_destroy(f8_checkpoint *checkpoint);

/* Parse a file (or bytes in memory) into a new checkpoint. The whole header
 * is checked before any tensor byte is read, as strictly as the reference
 * implementation: a file shorter than 8 bytes; a header length past the file
 * or over 100 MB; a header that is not one JSON object of tensor objects and
 * an optional "__metadata__" object of strings (only objects, arrays,
 * strings in valid UTF-8 without \u0000, and non-negative integers below
 * 2^63); a tensor without exactly "dtype", "shape" and "data_offsets"; an
 * unknown dtype; more than 8 dimensions or an element count that overflows;
 * data_offsets [begin, end] whose length is not count x element size; byte
 * ranges that overlap, leave a gap or leave bytes at the end of the file;
 * duplicate names or metadata keys; and, in an f8 file ("format" = "f8" or
 * an f8.format_version key), a version that is missing, not a positive
 * integer, or newer than 1; a tensor whose bytes do not match its
 * "f8.xxh64.<name>" checksum (the message names the tensor), a checksum that
 * is not 16 hex digits, or one for a tensor the file does not hold. Files
 * without checksums (f8 files written before they were added, safetensors
 * of other tools) load unchecked. Checksums are not kept as metadata of the
 * loaded checkpoint (f8_checkpoint_metadata does not return them). Those give F8_ERR_INVALID_ARGUMENT; a file that
 * cannot be opened or read (or is not a regular file) gives F8_ERR_IO; the
 * reason is in f8_ctx_last_error and *checkpoint is NULL. */
F8_API f8_status f8_checkpoint_load(f8_ctx *ctx, const char *path, f8_checkpoint **checkpoint);
F8_API f8_status f8_checkpoint_load_memory(f8_ctx *ctx, const void *bytes, size_t size, f8_checkpoint **checkpoint);

/* Write the checkpoint to path: to "<path>.tmp.<pid>" first, flushed to
 * disk, then renamed over path, so a failed save leaves any old file intact
 * (and removes the temporary). A save that was killed leaves its temporary
 * behind; the next save to the same path removes every "<path>.tmp.<pid>"
 * whose pid is not a running process on this machine (a process of another
 * pid namespace writing into the same directory is not seen: give such
 * writers distinct paths). Every tensor's checksum is computed here. F8_ERR_IO with the system's reason when the
 * temporary cannot be created or written or the rename fails. The file
 * always says "format" = "f8", "f8.format_version" = "1", whatever the
 * checkpoint was loaded from. */
F8_API f8_status f8_checkpoint_save(const f8_checkpoint *checkpoint, const char *path);

/* Add a copy of a tensor in backend memory (synchronizes), stored with
 * shape [rows, cols]. FP8 tensors are stored as their codes; their scale_inv
 * is not (store it as its own tensor). name: valid UTF-8, not
 * "__metadata__", used once: F8_ERR_INVALID_ARGUMENT otherwise. While a graph
 * is being captured: F8_ERR_STATE (it reads back). */
F8_API f8_status f8_checkpoint_add_tensor(f8_checkpoint *checkpoint, const char *name, const f8_tensor *tensor);
/* Copy a stored tensor into dst (backend memory; synchronizes). The dtype
 * must be dst's (I32/I64/U8 entries fit no f8_tensor), and the stored shape
 * must fit dst [rows, cols]: [rows, cols] itself; [n] fits [1, n]; a scalar
 * (no dimensions) fits [1, 1]; 3 or more dimensions fit [product of all but
 * the last, last]. Missing name, other dtype or shape:
 * F8_ERR_INVALID_ARGUMENT / F8_ERR_DTYPE / F8_ERR_SHAPE, dst unchanged.
 * dst->scale_inv is neither read nor written. */
F8_API f8_status f8_checkpoint_read_tensor(const f8_checkpoint *checkpoint, const char *name, f8_tensor *dst);
/* 1 if a tensor of that name is stored. */
F8_API int f8_checkpoint_has(const f8_checkpoint *checkpoint, const char *name);

/* Metadata: key/value strings, valid UTF-8. "format" and keys starting with
 * "f8." are the library's: set refuses them (F8_ERR_INVALID_ARGUMENT), as
 * it does NULL or invalid strings. Setting a key again replaces its value.
 * get returns NULL when absent; the string is owned by the checkpoint and
 * valid until the key is set again or the checkpoint is destroyed. A new
 * checkpoint already has "format" = "f8" and "f8.format_version" = "1". */
F8_API f8_status f8_checkpoint_set_metadata(f8_checkpoint *checkpoint, const char *key, const char *value);
F8_API const char *f8_checkpoint_metadata(const f8_checkpoint *checkpoint, const char *key);

/* Store a module's parameters and scaling state under prefix (synchronizes).
 * All or nothing: a name already in the checkpoint is refused before any
 * entry is added. */
F8_API f8_status f8_checkpoint_add_module(f8_checkpoint *checkpoint, const char *prefix, f8_module *module);

/* Restore a module from the entries under prefix. Every entry is checked
 * (present, dtype, shape, recipe format) before anything is written: on any
 * error the module is unchanged. A module built with fp8_weights takes its
 * weight from an F8 entry with its scale_inv, or quantizes an FP32/BF16 one
 * (as f8_module_write_weight); a high-precision module takes FP32/BF16 entries
 * converted to its param_dtype, or dequantizes an F8 one. */
F8_API f8_status f8_checkpoint_restore_module(const f8_checkpoint *checkpoint, const char *prefix, f8_module *module);

/* ---- Entries: the host-side table, for programs that reshape checkpoints --
 * (split a tensor into shards, merge shards, copy what they do not know).
 * An entry is a tensor's host bytes as stored in the file (little-endian),
 * with its safetensors dtype and shape; nothing here touches backend memory. */
typedef enum f8_ck_dtype {
    F8_CK_F32,
    F8_CK_BF16,
    F8_CK_F8_E4M3,
    F8_CK_F8_E5M2,
    F8_CK_I32,
    F8_CK_I64,
    F8_CK_U8
} f8_ck_dtype;
#define F8_CK_MAX_DIMS 8
typedef struct f8_ck_entry {
    const char *name;
    f8_ck_dtype dtype;
    int ndim;                     /* 0..F8_CK_MAX_DIMS; 0 = a scalar (1 element) */
    int64_t shape[F8_CK_MAX_DIMS];
    const unsigned char *data;    /* host bytes, little-endian as stored; never NULL */
    size_t bytes;                 /* element count x element size */
} f8_ck_entry;
/* Bytes per element; 0 for a bad value. */
F8_API size_t f8_ck_dtype_size(f8_ck_dtype dtype);
/* Add an entry, copying data (bytes must equal the element count of shape
 * x the element size; data may be NULL when bytes == 0). The name: valid
 * UTF-8, not "__metadata__", not yet used. Otherwise F8_ERR_INVALID_ARGUMENT,
 * nothing changed. */
F8_API f8_status f8_checkpoint_put_entry(f8_checkpoint *checkpoint, const char *name, f8_ck_dtype dtype, int ndim,
                                         const int64_t *shape, const void *data, size_t bytes);
/* The entry of that name, or NULL; valid until the checkpoint is destroyed
 * (adding entries does not move it). */
F8_API const f8_ck_entry *f8_checkpoint_find_entry(const f8_checkpoint *checkpoint, const char *name);
/* Entries in name order (byte-wise strcmp): i in [0, count); NULL past it. */
F8_API size_t f8_checkpoint_entry_count(const f8_checkpoint *checkpoint);
F8_API const f8_ck_entry *f8_checkpoint_entry_at(const f8_checkpoint *checkpoint, size_t i);
/* Metadata pairs in key order, the library's own ("format", "f8.*") too:
 * i in [0, count); past it *key = *value = NULL. */
F8_API size_t f8_checkpoint_metadata_count(const f8_checkpoint *checkpoint);
F8_API void f8_checkpoint_metadata_at(const f8_checkpoint *checkpoint, size_t i, const char **key, const char **value);
/* What f8_checkpoint_check_entry requires of every element. */
typedef enum f8_ck_rule {
    F8_CK_FINITE,     /* parameters, first moments: no NaN, no infinity */
    F8_CK_POSITIVE,   /* scales and scale_invs: finite and > 0 */
    F8_CK_NONNEGATIVE /* amax histories, second moments: finite and >= 0 (-0 counts as 0) */
} f8_ck_rule;
/* Check the values of the entry `name` against rule (a checkpoint file is
 * untrusted input: a NaN weight or a zero scale would load silently). F32,
 * BF16 and both FP8 formats are read; I32, I64 and U8 entries pass. F8_OK,
 * or F8_ERR_INVALID_ARGUMENT (a missing entry too) with a message on the
 * checkpoint's ctx naming fn, the tensor, the element and its value. */
F8_API f8_status f8_checkpoint_check_entry(const f8_checkpoint *checkpoint, const char *fn, const char *name,
                                           f8_ck_rule rule);

/* ------------------------------------------------------------------------ */
/* ONNX export                                                               */
/* ------------------------------------------------------------------------ */

/* An f8_onnx is an inference graph being built from f8 objects, written as
 * an ONNX model (protobuf, standard operators of the default domain only) for
 * ONNX Runtime, TensorRT and other tools. At export time the FP8 scales stop
 * being state the step updates and become constants of the graph, so the file
 * computes what f8_module_forward(..., F8_MICROBATCH_NONE, NULL) and the other
 * forwards compute at that moment:
 *
 *   FP8 cast of a GEMM input   QuantizeLinear(x, s_inv, 0 as float8e4m3fn,
 *                              saturate=1) -> DequantizeLinear(q, s_inv, 0),
 *                              s_inv = 1/scale of the module's INPUT slot now;
 *                              under F8_RECIPE_CURRENT computed in the graph
 *                              from x as the cast does (scale = scaled_max /
 *                              ReduceMax(|x|), kept when that is 0 or not
 *                              finite, FLT_MAX clamp, power-of-two option);
 *                              F8_RECIPE_BLOCK: one scale per 1x128 tile of x
 *                              (x flattened to [N, K], padded with zeros to
 *                              whole tiles, reshaped [N, tiles, 128]), the
 *                              codes formed as for ROWWISE below; its weights
 *                              one scale per 128x128 block (opset 21's blocked
 *                              DequantizeLinear, block_size 128 along axis 1
 *                              of Wᵀ, scales [in, ceil(out/128)]);
 *                              F8_RECIPE_ROWWISE: one scale per row of x
 *                              (ReduceMax over the last axis, fallback 1), the
 *                              codes formed as Mul(x, s) -> QuantizeLinear(.,
 *                              1) -> DequantizeLinear(., 1) -> Mul(., 1/s) (a
 *                              per-token scale is no per-axis input), and
 *                              each weight with one scale per output channel
 *                              (DequantizeLinear along axis 1 of Wᵀ)
 *   FP8 weight                 an FP8 initializer of 1 byte per weight, stored
 *                              transposed ([in, out]: MatMul reads it as it is),
 *                              DequantizeLinear with its own scale_inv: the codes
 *                              fp8(W · scale) a forward with F8_MICROBATCH_NONE
 *                              casts from the master weight with the weight
 *                              slot's scale now (current scaling: the scale
 *                              from the weight's amax now; an FP8 primary weight: its
 *                              codes and scale_inv as they are)
 *   GEMM                       MatMul (+ Add bias), FP32
 *   high-precision weight      FP32 or BF16 initializer (as the parameter is
 *                              held; BF16 through a Cast), [out, in], Transpose
 *   LayerNorm                  LayerNormalization(axis -1, eps), gain = gamma or
 *                              1 + gamma (zero_centered_gamma), folded at export
 *   RMSNorm                    x · 1/sqrt(ReduceMean(x²) + eps) · gain (decomposed;
 *                              RMSNormalization from opset 23)
 *   GELU                       Gelu(approximate="tanh"), f8's tanh form
 *   ReLU                       Max(x, 0)
 *   gated activations          fc1's output split in [a | b], act(a) · b
 *   values f8 stores in BF16   Cast to bfloat16 and back (round to nearest even)
 *
 * Numerics. f8 casts fp8(x · scale) with an FP32 product; QuantizeLinear
 * computes x / s_inv. With scale a power of two both are exact and the codes
 * are identical; otherwise the quotient may differ from the product in the
 * last FP32 bit, which changes the FP8 code only when x · scale lies within
 * that bit of a rounding boundary (measured by the tests: about 1 code in
 * 10^5 to 10^6). config.exact_cast = 1 writes Mul(x, scale) ->
 * QuantizeLinear(·, 1) -> DequantizeLinear(·, s_inv) instead: the same codes
 * as f8 always, at the price of a Q/DQ pair whose scales differ (some tools'
 * FP8 pattern matching expects them equal). GEMM sums, norm statistics and
 * transcendental functions differ from f8's in FP32 summation order and last
 * bits only.
 *
 * Values. Every graph value has a name: the graph's inputs, and the output
 * names given to the add_* calls below, each used once (a value is defined
 * once; a call whose output name exists is refused). Names are 1 to 128
 * characters of [A-Za-z0-9_./:-] and do not start with "_f8." (the names of
 * the values the exporter makes itself). Tensors are float32 in the graph
 * unless said otherwise; config.dtype says whether the f8 tensors they stand
 * for are FP32 or BF16 (BF16: each module, attention, embedding and add
 * output is rounded to BF16, as f8 stores it). A module applies to the last
 * axis of its input: [..., in_features] -> [..., out_features].
 *
 * Every call checks its arguments and changes nothing on error (a call that
 * fails half-way removes what it added); the message is in
 * f8_ctx_last_error of the graph's ctx. Building downloads what it needs
 * from backend memory (synchronizes) and keeps host copies: the objects may
 * change or go after the call. A weight met again (the same backend memory,
 * e.g. an embedding table tied to the LM head) is stored once.
 *
 * FP8 embedding table (config.fp8_embedding = 1; off by default). f8 keeps
 * the token embedding, and the LM head tied to it, in high precision
 * (BF16 or FP32), and so does the export by default: in a GPT-2 124M that
 * table is 31% of the parameters and, in BF16, 47% of an FP8 export's
 * bytes. With the option, f8_onnx_add_embedding stores wte as
 * E4M3 codes, 1 byte per element, with one FP32 scale per row (vocabulary
 * entry): s_r = 448 / max |wte[r, :]| (1 for a row of zeros), codes
 * fp8(wte[r, c] · s_r) by f8's encoder (round to nearest even, saturating),
 * DequantizeLinear(codes, 1/s, axis 0). The Gather of the embedding and the
 * MatMul of a module whose weight is the same memory (the tied LM head,
 * added after the embedding) both read that one dequantized table. This
 * is NOT f8's forward: f8 trains and runs with the table in high precision,
 * so the embedding output and the logits differ from f8's by what rounding
 * every table element to 3 mantissa bits gives (each element by up to 2^-4
 * of itself, the largest of its row by none). Measured on tests/test_onnx.c's
 * small GPT: the logits differ from f8's by 2.5% to 3.5% of their range
 * (max |difference| / max |f8's logits|; the test's bound is 6%), and match
 * f8's forward run with the rounded table as closely as the FP8 graph
 * matches f8 without the option; on barely trained 124M GPTs (fresh, or 2
 * steps) 3% to 10% of their small logits' range, depending on the input.
 * In a GPT-2 124M export the option takes the FP8 file from 0.66 to 0.51 of
 * the BF16 export's bytes. The embedding added after a module that already
 * stored wte in high precision is refused (F8_ERR_INVALID_ARGUMENT). */
typedef struct f8_onnx f8_onnx;

typedef struct f8_onnx_config {
    int opset;            /* ONNX opset of the default domain, 20 to 23; default 21 */
    int fp8;              /* 1: modules created with fp8 export FP8 GEMMs (Q/DQ); 0: every
                             GEMM in high precision from the master weights (a module
                             with FP8 primary weights: its dequantized codes); default 1 */
    int exact_cast;       /* 1: FP8 casts as Mul(x, scale) -> QuantizeLinear(·, 1): the
                             codes of f8 bit for bit (see above); default 0 */
    int fp8_embedding;    /* 1: the embedding table (wte) as FP8 per row, shared by a tied
                             LM head: the graph no longer computes f8's forward
                             (see "FP8 embedding table" above); default 0 */
    f8_dtype dtype;       /* FP32 (default) or BF16: what the f8 tensors between the
                             graph's operations hold */
    const char *name;     /* the graph's name; default "f8" */
} f8_onnx_config;

F8_API f8_onnx_config f8_onnx_config_default(void);

/* Element types of graph inputs and outputs (ONNX TensorProto numbers). */
typedef enum f8_onnx_type {
    F8_ONNX_FLOAT = 1,  /* float32 */
    F8_ONNX_INT64 = 7   /* token ids */
} f8_onnx_type;

/* Create an empty graph bound to ctx (whose backend memory the added objects
 * live in). Errors: F8_ERR_INVALID_ARGUMENT for an opset outside [20, 23],
 * flags other than 0/1, a dtype not FP32/BF16 or a bad name. */
F8_API f8_status f8_onnx_create(f8_ctx *ctx, const f8_onnx_config *config, f8_onnx **graph);
F8_API void f8_onnx_destroy(f8_onnx *graph);

/* A graph input. shape: comma-separated dimensions, each a positive integer
 * or a symbolic name ([A-Za-z_][A-Za-z0-9_]*, at most 64 characters) for a
 * dimension chosen at run time, 1 to 8 of them: "tokens,64", "batch,seq".
 * F8_ERR_INVALID_ARGUMENT for a bad or used name, type or shape. */
F8_API f8_status f8_onnx_add_input(f8_onnx *graph, const char *name, f8_onnx_type type, const char *shape);

/* Declare the value `name` (an input or an output of an add_* call) a graph
 * output, with shape as for inputs, or NULL for the rank the graph knows
 * (its last dimension stated, the others unnamed). F8_ERR_INVALID_ARGUMENT
 * for an unknown value, one already an output, a bad shape, or NULL where
 * the rank is not known; F8_ERR_SHAPE for a rank or last dimension known to
 * differ. */
F8_API f8_status f8_onnx_add_output(f8_onnx *graph, const char *name, const char *shape);

/* y = module(x) for any f8_module (Linear, LayerNormLinear, LayerNormMLP),
 * from the module's data flow, parameters and scaling state now. x: a float
 * value whose last dimension is in_features (F8_ERR_SHAPE when known to
 * differ); y: a new name. FP8 GEMMs when the module has fp8 and config.fp8
 * is 1. F8_ERR_INVALID_ARGUMENT for a module of another ctx. */
F8_API f8_status f8_onnx_add_module(f8_onnx *graph, f8_module *module, const char *x, const char *y);

/* y = causal self-attention(qkv) as f8_attention_forward computes it (its
 * n_head, n_kv_head, head_dim and dtype): qkv is a float value [batch, seq,
 * (n_head + 2·n_kv_head)·head_dim] (rank 3), y [batch, seq, C]. Grouped-query
 * attention (n_kv_head < n_head): q head h reads key/value head
 * h / (n_head / n_kv_head), the k and v heads repeated with Expand. Per head,
 * s = q·kᵀ, masked above the diagonal, p = exp((s - max s) · c) with
 * c = 1/sqrt(head_dim), y = (p · v) · (1 / Σ p); BF16 attention rounds p and
 * y to BF16 as f8 does. */
F8_API f8_status f8_onnx_add_attention(f8_onnx *graph, const f8_attention *attention, const char *qkv, const char *y);

/* y = qkv with RoPE applied to its q and k heads (f8_rope_forward): qkv and
 * y are float values [batch, seq, (n_head + 2·n_kv_head)·head_dim], the
 * rope's shape; position = the index along seq (seq <= the rope's max_seq
 * at run time). The rope's cos and sin tables are initializers [max_seq,
 * head_dim/2] (stored once per graph); per q and k head, the halves
 * x1 = x[:hd/2], x2 = x[hd/2:] become x1·cos - x2·sin and x2·cos + x1·sin
 * (Slice, Mul, Sub, Add, Concat), rounded to BF16 with config.dtype BF16;
 * v passes unchanged. F8_ERR_INVALID_ARGUMENT for a rope of another ctx,
 * F8_ERR_SHAPE for a qkv known to have another rank or width. */
F8_API f8_status f8_onnx_add_rope(f8_onnx *graph, const f8_rope *rope, const char *qkv, const char *y);

/* y = wte[tokens] + wpe[position] (f8_embedding_forward), position = the
 * index along tokens' last axis. tokens: an int64 value [..., seq], with
 * seq <= wpe rows at run time; y [..., seq, C]. wte [V, C], wpe [S, C]:
 * FP32 or BF16 views of backend memory of the graph's ctx. A token outside
 * [0, V) is an error of the runtime (f8 gives the position row alone). With
 * config.fp8_embedding, wte is stored as per-row FP8 (above; not f8's
 * values); F8_ERR_INVALID_ARGUMENT for a non-finite wte element then, or a
 * wte already stored in high precision by an earlier call. */
F8_API f8_status f8_onnx_add_embedding(f8_onnx *graph, const f8_tensor *wte, const f8_tensor *wpe, const char *tokens,
                                       const char *y);

/* y = a + b (f8_tensor_add: a residual connection); same last dimension. */
F8_API f8_status f8_onnx_add_add(f8_onnx *graph, const char *a, const char *b, const char *y);

/* y = x[..., begin:end] along the last axis, 0 <= begin < end (e.g. the
 * real vocabulary of padded logits). F8_ERR_SHAPE when end is past a known
 * last dimension. */
F8_API f8_status f8_onnx_add_slice(f8_onnx *graph, const char *x, int64_t begin, int64_t end, const char *y);

/* The model as protobuf bytes. buf NULL: *size receives the size needed.
 * Otherwise the model is written when capacity >= that size (else
 * F8_ERR_INVALID_ARGUMENT and *size the size needed). Needs at least one
 * input and one output. */
F8_API f8_status f8_onnx_serialize(const f8_onnx *graph, void *buf, size_t capacity, size_t *size);

/* Write the model to path: to "<path>.tmp.<pid>" first, then renamed over
 * path (F8_ERR_IO with the system's reason), as f8_checkpoint_save. */
F8_API f8_status f8_onnx_save(const f8_onnx *graph, const char *path);

/* ------------------------------------------------------------------------ */
/* JSON: one strict reader (RFC 8259)                                        */
/* ------------------------------------------------------------------------ */

/* The reader f8 uses for every JSON file it reads from elsewhere (the
 * safetensors header, Hugging Face's config.json), public so that programs
 * (f8_train) read theirs the same way. Pure host code, no ctx.
 *
 * Strict means: the text is valid UTF-8 (RFC 3629: no overlongs, surrogates
 * or code points past U+10FFFF, no byte-order mark); one value with only
 * whitespace (space, tab, CR, LF) around it; strings without raw control
 * bytes, with the escapes \" \\ \/ \b \f \n \r \t \uXXXX, a \u surrogate
 * only as a high-low pair; numbers in JSON's form (no leading zeros, '+',
 * NaN, Infinity or hex); arrays and objects nested at most max_depth deep;
 * no key twice in one object (compared after decoding escapes). Anything else
 * is an error naming the byte, line and column, never a guess.
 *
 * The result is a tree held in one allocation (free it with f8_json_free):
 * an array or object's children are reached by child / next, an object's
 * member carries its key; lookups are by key (f8_json_get). */

/* Nesting the parser accepts when the caller gives max_depth <= 0: every
 * file f8 reads nests far less (a safetensors header 3, config.json 2-3). */
#define F8_JSON_DEPTH 64

typedef enum f8_json_kind {
    F8_JSON_NULL,
    F8_JSON_FALSE,
    F8_JSON_TRUE,
    F8_JSON_NUMBER,
    F8_JSON_STRING,
    F8_JSON_ARRAY,
    F8_JSON_OBJECT,
} f8_json_kind;

typedef struct f8_json f8_json;
struct f8_json {
    f8_json_kind kind;
    size_t offset;       /* the value's first byte in the text */
    const char *key;     /* an object's member: its key, decoded, NUL-terminated; else NULL */
    size_t key_len;      /* bytes of key (a \u0000 escape makes strlen(key) shorter) */
    size_t key_offset;   /* an object's member: its key's first byte in the text */
    const f8_json *child; /* array / object: the first element or member; NULL when empty */
    const f8_json *next;  /* the next element or member of the same parent; NULL for the last */
    size_t count;        /* array / object: elements or members */
    /* STRING: the decoded bytes, NUL-terminated (len of them; a \u0000 makes
     * strlen shorter). NUMBER: the literal as written (len bytes). */
    const char *str;
    size_t len;
    /* NUMBER: is_int when the literal has no fraction or exponent and fits
     * int64 (then i holds it exactly); num is the nearest double (±HUGE_VAL
     * past the range of double). */
    int is_int;
    int64_t i;
    double num;
};

/* Parse text[0, len). max_depth: arrays and objects nested deeper than
 * this are refused (<= 0: F8_JSON_DEPTH). Returns F8_OK with *root set (free
 * it with f8_json_free), F8_ERR_INVALID_ARGUMENT with the reason and its
 * place in err ("byte 12 (line 2, column 3): ..."), or F8_ERR_OUT_OF_MEMORY;
 * on error *root is NULL. */
F8_API f8_status f8_json_parse(const char *text, size_t len, int max_depth, f8_json **root, char *err, size_t err_size);
F8_API void f8_json_free(f8_json *root);

/* The member of object obj with this key (a C string: keys holding a NUL
 * are never found), or NULL when obj is not an object or has none. */
F8_API const f8_json *f8_json_get(const f8_json *obj, const char *key);

/* The name of a kind ("null", "number", "object", ...), for messages. */
F8_API const char *f8_json_kind_name(f8_json_kind kind);

/* 1 when s[0, n) is valid UTF-8 (RFC 3629: no overlongs, surrogates or
 * code points past U+10FFFF). */
F8_API int f8_utf8_valid(const unsigned char *s, size_t n);


#ifdef __cplusplus
}
#endif

#endif /* F8_IO_H */
