/*
 * checkpoint.h — the inside of f8_checkpoint, for the module save/restore
 * code in src/modules/ and for the safetensors parser and writer.
 *
 * A checkpoint is a host-memory table of named tensors (f8i_ck_entry, kept
 * sorted by name) and of string metadata. Entries are individually
 * allocated, so a pointer from f8i_checkpoint_find stays valid while other
 * entries are added. Every tensor's bytes are host memory, little-endian as
 * stored in the file, in a buffer of their own (malloc-aligned).
 */
#ifndef F8_CHECKPOINT_H
#define F8_CHECKPOINT_H

#include "core/f8i.h"

/* Dtypes a checkpoint stores and its entries: the public f8_ck_dtype and
 * f8_ck_entry of f8.h (safetensors names "F32", "BF16", "F8_E4M3",
 * "F8_E5M2", "I32", "I64", "U8"; only the first four map to an f8_dtype),
 * under the names the library's code uses. */
typedef f8_ck_dtype f8i_ck_dtype;
#define F8I_CK_F32 F8_CK_F32
#define F8I_CK_BF16 F8_CK_BF16
#define F8I_CK_F8_E4M3 F8_CK_F8_E4M3
#define F8I_CK_F8_E5M2 F8_CK_F8_E5M2
#define F8I_CK_I32 F8_CK_I32
#define F8I_CK_I64 F8_CK_I64
#define F8I_CK_U8 F8_CK_U8
#define F8I_CK_DTYPE_COUNT (F8_CK_U8 + 1)

/* Most dimensions an entry may have. Files with more are rejected whole. */
#define F8I_CK_MAX_DIMS F8_CK_MAX_DIMS

typedef f8_ck_entry f8i_ck_entry;

/* Safetensors name of a dtype ("F32", ...); "?" for a bad value. */
const char *f8i_ck_dtype_name(f8i_ck_dtype dtype);
/* Bytes per element; 0 for a bad value. */
size_t f8i_ck_dtype_size(f8i_ck_dtype dtype);
/* f8_dtype -> checkpoint dtype. Returns 0 for a dtype f8 cannot store. */
int f8i_ck_dtype_from_f8(f8_dtype dtype, f8i_ck_dtype *out);
/* Checkpoint dtype -> f8_dtype. Returns 0 for I32/I64/U8 (no f8_dtype). */
int f8i_ck_dtype_to_f8(f8i_ck_dtype dtype, f8_dtype *out);

/* Add an entry, copying host_data (bytes must equal the element count of
 * shape × the element size; host_data may be NULL when bytes == 0). The name
 * must be valid UTF-8, not "__metadata__". A duplicate name, a bad dtype,
 * ndim or shape: F8_ERR_INVALID_ARGUMENT, nothing changed. */
f8_status f8i_checkpoint_put(f8_checkpoint *ck, const char *name, f8i_ck_dtype dtype, int ndim, const int64_t *shape,
                             const void *host_data, size_t bytes);

/* The entry of that name, or NULL. Valid until the checkpoint is destroyed. */
const f8i_ck_entry *f8i_checkpoint_find(const f8_checkpoint *ck, const char *name);

/* Entries in name order (byte-wise strcmp): i in [0, count). */
size_t f8i_checkpoint_count(const f8_checkpoint *ck);
const f8i_ck_entry *f8i_checkpoint_entry(const f8_checkpoint *ck, size_t i);

f8_ctx *f8i_checkpoint_ctx(const f8_checkpoint *ck);

/* 1 when the checkpoint is f8's own: made by f8_checkpoint_create, or loaded
 * from a file whose metadata says "format": "f8" or has f8.format_version.
 * 0 for a plain safetensors file of another tool (which loads all the same;
 * see f8.h). */
int f8i_checkpoint_is_f8(const f8_checkpoint *ck);

/* Metadata setter for internal use: as f8_checkpoint_set_metadata, but keys
 * starting with "f8." are allowed. "format" and "f8.format_version" stay
 * refused (F8_ERR_INVALID_ARGUMENT): the writer owns them. */
f8_status f8i_checkpoint_set_meta(f8_checkpoint *ck, const char *key, const char *value);

/* Metadata pairs in key order: i in [0, count). */
size_t f8i_checkpoint_meta_count(const f8_checkpoint *ck);
void f8i_checkpoint_meta_at(const f8_checkpoint *ck, size_t i, const char **key, const char **value);

/* What f8i_checkpoint_check_finite requires of every element of an entry
 * (f8.h's f8_ck_rule). */
typedef f8_ck_rule f8i_ck_rule;
#define F8I_CK_FINITE F8_CK_FINITE
#define F8I_CK_POSITIVE F8_CK_POSITIVE
#define F8I_CK_NONNEGATIVE F8_CK_NONNEGATIVE

/* Check the values of the entry `name` against rule, for the restore paths
 * (a checkpoint file is untrusted input: a NaN weight or a zero scale would
 * load silently and poison the run). F32, BF16, F8_E4M3 (0x7F/0xFF are NaN)
 * and F8_E5M2 (exponent all ones is inf/NaN) are read; I32, I64 and U8
 * entries always pass. F8_OK, or F8_ERR_INVALID_ARGUMENT with a message
 * on ck's ctx naming fn, the tensor, the element and its value, e.g.
 *   "f8_checkpoint_restore_adamw: tensor \"optimizer.v.3\": element 17 is
 *    nan (must be finite and >= 0)"
 * A missing entry is F8_ERR_INVALID_ARGUMENT too. Reads host bytes only. */
f8_status f8i_checkpoint_check_finite(const f8_checkpoint *ck, const char *fn, const char *name, f8i_ck_rule rule);

/* 64-bit XXH64 (seed 0) of n bytes: the per-tensor checksum of f8 files
 * (metadata "f8.xxh64.<tensor name>" = 16 lowercase hex digits). */
uint64_t f8i_xxh64(const void *data, size_t n);

/* The whole file f8_checkpoint_save would write, in one malloc'd buffer
 * (*bytes, *size; free() it). For tests and the fuzz target. */
f8_status f8i_checkpoint_serialize(const f8_checkpoint *ck, unsigned char **bytes, size_t *size);

#endif /* F8_CHECKPOINT_H */
