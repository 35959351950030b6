/*
 * hf.h — Hugging Face GPT-2 checkpoints in and out of the trainer's model,
 * and the two commands built on them:
 *   f8_train eval-hf DIR --tokens FILE     loss of a GPT-2 checkpoint on tokens
 *   f8_train export-hf CHECKPOINT OUT_DIR  an f8_train checkpoint as a GPT-2
 * plus f8_train's --init-from (trainer.c).
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

/* `f8_train eval-hf ...` and `f8_train export-hf ...` (argv[1] is the
 * command). They print and return the exit code. */
int eval_hf_main(int argc, char **argv);
int export_hf_main(int argc, char **argv);

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

/* One FP32 tensor to write: name, 1 or 2 dims, data. */
typedef struct hf_out_tensor {
    char name[96];
    int64_t dims[2];
    int ndim;
    float *data;
} hf_out_tensor;
/* A safetensors file as transformers writes it: F32, metadata format "pt",
 * tensors sorted by name (t is reordered), header padded with spaces to a
 * multiple of 8. 0, or -1 with the reason in err. */
int hf_write_safetensors(const char *path, hf_out_tensor *t, size_t count, char *err, size_t n);

#endif /* F8_TRAIN_HF_H */
