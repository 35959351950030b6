/*
 * hf.h — Hugging Face GPT-2 checkpoints in and out of the trainer's model,
 * and the two commands built on them:
 *   f8_train eval-hf DIR --tokens FILE     loss of a GPT-2 checkpoint on tokens
 *   f8_train export-hf CHECKPOINT OUT_DIR  an f8_train checkpoint as a GPT-2
 * plus f8_train's --init-from (trainer_setup.c).
 *
 * The layout is the one `transformers` writes (save_pretrained of a
 * GPT2LMHeadModel): model.safetensors with [transformer.]wte.weight [V, C],
 * wpe.weight [P, C], h.N.ln_1 / ln_2 / ln_f .weight/.bias [C],
 * h.N.attn.c_attn [C, 3C] (+ bias), h.N.attn.c_proj [C, C], h.N.mlp.c_fc
 * [C, 4C], h.N.mlp.c_proj [4C, C]: Conv1D weights are [in, out], so each is
 * transposed into f8's [out, in]. lm_head.weight is tied to wte (absent, or
 * equal). config.json (n_layer, n_head, n_embd, n_positions, vocab_size,
 * layer_norm_epsilon 1e-5, activation_function gelu_new) gives the shape.
 */
#ifndef F8_TRAIN_HF_H
#define F8_TRAIN_HF_H

#include "gpt.h"

typedef struct hf_config {
    int64_t layers, heads, channels, positions, vocab;
} hf_config;

/* The shape of the GPT-2 at path (a directory holding model.safetensors and
 * config.json, or the .safetensors file itself, config.json beside it).
 * config.json is read strictly (f8/io.h): n_layer, n_head, n_embd,
 * vocab_size and n_positions (or n_ctx) integers within f8_train's limits
 * (trainer.h), no fraction, no other kind. Without config.json the shape is
 * read off the tensors, heads = channels / 64. Returns 0, or -1 with the
 * reason in err naming the file, the key and the value (an unsupported
 * activation, eps or inner size, a missing file). */
int hf_read_config(const char *path, hf_config *c, char *err, size_t err_size);

/* Load the GPT-2 at path into m (same layers and channels; the model's
 * gpt_positions <= the file's: that many first rows of wpe, all of them when
 * m->c.positions is the file's; m->c.vocab == the file's vocab, the padded
 * head rows are zeroed). Parameters in FP32 or BF16 files, written in the
 * model's dtype; a NaN or infinite element is refused naming the tensor and
 * the element. Returns F8_OK, or a status with the reason in err. */
f8_status hf_import(gpt *m, const char *path, char *err, size_t err_size);

/* Write m as dir/model.safetensors (FP32, metadata format "pt") and
 * dir/config.json (n_positions = gpt_positions: every row of wpe, so an
 * import trained at a shorter seq goes out with the shape it came in with),
 * creating dir if needed. */
f8_status hf_export(gpt *m, const char *dir, char *err, size_t err_size);

/* The rows of wpe of an f8_train checkpoint's model: its train.positions
 * (written by hf_checkpoint_set_positions when the model has more positions
 * than its seq: an imported GPT-2 trained on shorter sequences), else seq.
 * -1 with the reason in err when the value is not an integer in
 * [seq, TRAIN_MAX_SEQ]. */
int64_t hf_checkpoint_positions(const f8_checkpoint *ck, int64_t seq, char *err, size_t err_size);
f8_status hf_checkpoint_set_positions(const gpt *m, f8_checkpoint *ck);

/* The model of an f8_train checkpoint from its train.* metadata, for the
 * exporters (batch 1): every size an integer within f8_train's limits,
 * channels a multiple of heads, padded_vocab the vocabulary rounded up to
 * 128, and the memory it needs within train_check_memory's bound (cuda 1:
 * the 1 TiB sanity bound only, what the exporters pass: the estimate counts
 * optimizer state they do not hold), all before anything is allocated. 0,
 * or -1 with the key and value in err. */
int hf_checkpoint_model(const f8_checkpoint *ck, int cuda, gpt_config *c, char *err, size_t err_size);


/* ---- the mapping and the file pieces, for the tests ---------------------------- */

/* Which module of the model an entry's parameter lives in. */
typedef enum { AT_QKV, AT_PROJ, AT_MLP, AT_HEAD } hf_part;

/* One GPT-2 tensor and the parameter it is. */
typedef struct hf_entry {
    const char *name; /* after "h.N." for block entries */
    hf_part where;
    f8_param which;
    int conv1d; /* stored [in, out]: transposed */
} hf_entry;

enum { HF_BLOCK_ENTRIES = 12, HF_FINAL_ENTRIES = 2 };
/* A block's tensors in GPT-2's order; the final norm's (ln_f). */
extern const hf_entry hf_block_entries[HF_BLOCK_ENTRIES];
extern const hf_entry hf_final_entries[HF_FINAL_ENTRIES];
/* The module of block l (l == layers: the head) that holds part p. */
f8_module *hf_module_of(gpt *m, int64_t l, hf_part p);

/* The JSON header of a safetensors file (NUL-terminated, malloc'd), or NULL. */

/* One tensor to write: name, 1 or 2 dims, FP32 data (written as F32, or as
 * BF16 rounded to nearest even when bf16 is set). */
typedef struct hf_out_tensor {
    char name[96];
    int64_t dims[2];
    int ndim;
    float *data;
    int bf16;
} hf_out_tensor;
/* A safetensors file as transformers writes it: F32 (or BF16), metadata format "pt",
 * tensors sorted by name (t is reordered), header padded with spaces to a
 * multiple of 8. 0, or -1 with the reason in err. */
int hf_write_safetensors(const char *path, hf_out_tensor *t, size_t count, char *err, size_t n);

/* ---- the pieces hf_llama.c shares ------------------------------------------------- */

/* A Hugging Face file being read: on a CPU ctx, so the tensors land in host memory. */
typedef struct hf_reader {
    f8_ctx *ctx;
    f8_checkpoint *ck;
    const char *prefix;   /* prepended to names: "transformer." or "" */
    uint16_t *bf16;       /* scratch for BF16 files (free it) */
} hf_reader;
/* Tensor prefix+name ([rows, cols], or [n] as [1, n]) into host FP32, from
 * F32 or BF16; a missing tensor, another dtype or a NaN / infinite element
 * is refused with the name (and the element). */
f8_status hf_read_f32(hf_reader *r, const char *name, int64_t rows, int64_t cols, float *out, char *err, size_t n);
/* Host FP32 [view's shape] into a parameter of m (weights through
 * f8_module_write_weight; mod NULL: a bare tensor), and back; stage is
 * backend memory of at least the view's FP32 bytes. */
f8_status hf_param_put(gpt *m, f8_module *mod, f8_param which, f8_tensor *view, const float *host, void *stage);
f8_status hf_param_get(gpt *m, const f8_tensor *view, float *host, void *stage);
/* A whole small file (NUL-terminated, malloc'd), at most limit bytes; NULL with the reason. */
char *hf_read_small(const char *path, size_t limit, size_t *len, char *err, size_t n);
/* config.json's integer key in [lo, hi] (absent and optional: *out untouched, 0). */
int hf_config_int(const char *path, const f8_json *root, const char *key, int64_t lo, int64_t hi, int optional,
                  int64_t *out, char *err, size_t n);

#endif /* F8_TRAIN_HF_H */
