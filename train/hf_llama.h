/*
 * hf_llama.h — Hugging Face Llama checkpoints in and out of the trainer's
 * Llama (llama.h), beside hf.h's GPT-2: the same three doors,
 *   f8_train --init-from DIR               a LlamaForCausalLM to fine-tune
 *   f8_train eval-hf DIR --tokens FILE     its loss on tokens
 *   f8_train export-hf CHECKPOINT OUT_DIR  an f8_train Llama for transformers
 * (hf.c's commands dispatch here when config.json says "model_type": "llama"
 * or the checkpoint's train.family is llama).
 *
 * The layout is save_pretrained's: config.json, and model.safetensors or
 * model-0000k-of-0000n.safetensors with model.safetensors.index.json's
 * weight_map; F32 or BF16. The names (all [out, in], as nn.Linear stores them):
 *   model.embed_tokens.weight [V, C]            the embedding (the tied head's weight)
 *   model.layers.N.input_layernorm.weight [C]   -> qkv's RMSNorm
 *   model.layers.N.self_attn.{q,k,v}_proj.weight [H·hd | G·hd | G·hd, C]
 *                                               -> qkv's weight, rows stacked q, k, v
 *   model.layers.N.self_attn.o_proj.weight      -> proj's weight
 *   model.layers.N.post_attention_layernorm.weight  -> the MLP's RMSNorm
 *   model.layers.N.mlp.{gate,up}_proj.weight [F, C] -> fc1 [gate | up] (silu(gate)·up)
 *   model.layers.N.mlp.down_proj.weight [C, F]  -> fc2
 *   model.norm.weight [C]                       -> the head's RMSNorm
 *   lm_head.weight [V, C]                       untied: the head's weight; tied: absent or equal to
 *                                               embed_tokens
 * No permutation of q and k: transformers' Llama rotates with rotate_half
 * (element d pairs with d + hd/2 in each head), and so does f8_rope.
 *
 * Strict: what f8's Llama does not compute is refused naming the key and its
 * value (attention_bias, mlp_bias, hidden_act other than silu, rms_norm_eps
 * other than 1e-5, a rope_scaling other than none/default/llama3 with low 1,
 * high 4, original 8192, a head_dim other than hidden_size / heads, a
 * quantization_config, dropout), as is a tensor the model has no place for,
 * a tensor of another shape or dtype, a NaN or infinity, and an index whose
 * files or names do not match the shards'.
 */
#ifndef F8_TRAIN_HF_LLAMA_H
#define F8_TRAIN_HF_LLAMA_H

#include "gpt.h"

typedef struct hf_llama_config {
    int64_t layers, heads, kv_heads, channels, ffn, vocab, positions;
    int untied;                        /* tie_word_embeddings false (transformers' default for Llama) */
    double rope_theta, rope_factor;    /* rope_factor 0: no scaling */
} hf_llama_config;

/* 1 when path (a directory, or a .safetensors file with config.json beside
 * it) has a config.json whose "model_type" is "llama". */
int hf_llama_is(const char *path);

/* config.json, strictly (above): 0, or -1 with the file, key and value in err. */
int hf_llama_read_config(const char *path, hf_llama_config *c, char *err, size_t err_size);

/* The Llama fields and shape of a gpt_config from h (vocab, padded_vocab,
 * layers, heads, channels, llama, kv_heads, ffn, untied, rope_*, positions);
 * the rest of c is left as it is. */
void hf_llama_gpt_config(const hf_llama_config *h, gpt_config *c);

/* Load the checkpoint at path into m (a Llama of the same shape; m->c.vocab
 * == the file's). F8_OK, or a status with the reason in err; m's parameters
 * may be partly written on error. */
f8_status hf_llama_import(gpt *m, const char *path, char *err, size_t err_size);

/* Write m as dir/model.safetensors (FP32) and dir/config.json, creating dir. */
f8_status hf_llama_export(gpt *m, const char *dir, char *err, size_t err_size);

#endif /* F8_TRAIN_HF_LLAMA_H */
