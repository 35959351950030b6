/*
 * safetensors.h — parse and write the safetensors header (pure host code, no
 * ctx): the strict, fuzz-safe reader behind f8_checkpoint_load and the writer
 * behind f8_checkpoint_save. checkpoint.c owns the files and the tensor bytes.
 */
#ifndef F8_SAFETENSORS_H
#define F8_SAFETENSORS_H

#include "io/checkpoint.h"
#include "f8.h"

/* Largest header accepted (the reference implementation's limit). */
#define F8I_ST_MAX_HEADER 100000000u

/* One tensor as the header describes it; begin/end relative to the data. */
typedef struct f8i_st_tensor {
    char *name;
    f8i_ck_dtype dtype;
    int ndim;
    int64_t shape[F8I_CK_MAX_DIMS];
    uint64_t begin, end;
} f8i_st_tensor;

typedef struct f8i_st_pair {
    char *key;
    char *value;
} f8i_st_pair;

/* A parsed header: tensors sorted by name, metadata sorted by key. */
typedef struct f8i_st_header {
    f8i_st_tensor *tensors;
    size_t n_tensors, cap_tensors;
    f8i_st_pair *meta;
    size_t n_meta, cap_meta;
    int has_meta; /* the header had a __metadata__ object */
} f8i_st_header;

/* The header length of a file of file_size bytes from its first 8 bytes.
 * F8_ERR_INVALID_ARGUMENT (message in err) when the file is shorter than 8
 * bytes or the length exceeds F8I_ST_MAX_HEADER or file_size - 8. */
f8_status f8i_st_header_length(const unsigned char *prefix, uint64_t file_size, uint64_t *length, char *err,
                               size_t err_size);

/* Parse the len bytes of header JSON of a file whose data region (after the
 * header) has data_size bytes, and check everything the header claims:
 *   - the JSON is strict (f8/io.h) and one object; values are objects,
 *     arrays, strings and non-negative integers only, \u0000 refused in
 *     names and metadata;
 *   - each tensor is {"dtype", "shape", "data_offsets"}, each exactly once,
 *     no other key, a known dtype, at most F8I_CK_MAX_DIMS dims, an element
 *     count that fits int64 bytes, end - begin == count × element size;
 *   - the ranges tile [0, data_size) exactly: no overlap, no gap, no
 *     trailing byte (the reference implementation's rule);
 *   - names and metadata keys unique; metadata values strings.
 * F8_ERR_INVALID_ARGUMENT with the reason in err, or F8_ERR_OUT_OF_MEMORY;
 * on error *h is empty (nothing to free). */
f8_status f8i_st_parse(const unsigned char *json, size_t len, uint64_t data_size, f8i_st_header *h, char *err,
                       size_t err_size);
void f8i_st_header_free(f8i_st_header *h);

/* The file's first part: the 8-byte length, then the header JSON padded with
 * spaces so the data starts at a multiple of 8. entries[i] (in the order the
 * JSON lists them) has its data at begin[i]; meta_keys/meta_values are
 * written in order into __metadata__ (omitted when n_meta == 0). Returns a
 * malloc'd buffer of *size bytes, or NULL when out of memory. */
unsigned char *f8i_st_write_header(const f8i_ck_entry *const *entries, const uint64_t *begin, size_t n,
                                   const char *const *meta_keys, const char *const *meta_values, size_t n_meta,
                                   size_t *size);

#endif /* F8_SAFETENSORS_H */
