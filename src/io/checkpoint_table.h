/*
 * io/checkpoint_table.h — the table behind f8_checkpoint, shared by its three
 * files (module code uses checkpoint.h only):
 *   checkpoint.c            the table: entries, metadata, lifetime, tensors in
 *                           backend memory
 *   checkpoint_file.c       loading it from and saving it to a safetensors file
 *   checkpoint_integrity.c  XXH64 and the per-tensor checksums, the value checks
 *                           of the restore paths, temporaries of killed saves
 */
#ifndef F8_IO_CHECKPOINT_TABLE_H
#define F8_IO_CHECKPOINT_TABLE_H

#include "io/checkpoint.h"
#include "io/safetensors.h"

typedef struct entry {
    f8i_ck_entry pub;    /* pub.name points at name[], pub.data at data */
    unsigned char *data; /* (max(bytes, 1)) */
    char name[];
} entry;

struct f8_checkpoint {
    f8_ctx *ctx;
    entry **entries;     /* (n) sorted by name */
    size_t n, cap;
    f8i_st_pair *meta;   /* (n_meta) sorted by key */
    size_t n_meta, cap_meta;
    int is_f8;
};

#define KEY_FORMAT "format"
#define KEY_VERSION "f8.format_version"
#define FORMAT_VERSION 1
#define KEY_CHECKSUM "f8.xxh64." /* + the tensor's name */

/* A checkpoint of ctx with empty tables and no metadata, or NULL. */
f8_checkpoint *f8i_checkpoint_alloc(f8_ctx *ctx);
/* Index of the first entry whose name is >= name; *found when equal. */
size_t f8i_ck_entry_lower_bound(const f8_checkpoint *ck, const char *name, int *found);
/* A new unlinked entry with uninitialised bytes, or NULL (out of memory). */
entry *f8i_ck_entry_new(const char *name, f8i_ck_dtype dtype, int ndim, const int64_t *shape, size_t bytes);

/* A loaded tensor's bytes against its checksum in the file's header h, if
 * the header has one: F8_OK, or F8_ERR_INVALID_ARGUMENT naming fn and e. */
f8_status f8i_checkpoint_check_checksum(f8_ctx *ctx, const char *fn, const f8i_st_header *h, const entry *e);
/* Remove the temporaries that killed saves of path left next to it. */
void f8i_checkpoint_remove_stale_temps(const char *path);

#endif
