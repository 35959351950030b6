/*
 * checkpoint_entries.c — the public calls on a checkpoint's host-side entry
 * table (f8.h, "Entries"): the library's own f8i_checkpoint_* calls, whose
 * types are the public ones, under their public names, with NULL checks.
 */
#include "io/checkpoint.h"

size_t f8_ck_dtype_size(f8_ck_dtype dtype) { return f8i_ck_dtype_size(dtype); }

f8_status f8_checkpoint_put_entry(f8_checkpoint *ck, const char *name, f8_ck_dtype dtype, int ndim,
                                  const int64_t *shape, const void *data, size_t bytes)
{
    if (!ck) return F8_ERR_INVALID_ARGUMENT;
    return f8i_checkpoint_put(ck, name, dtype, ndim, shape, data, bytes);
}

const f8_ck_entry *f8_checkpoint_find_entry(const f8_checkpoint *ck, const char *name)
{
    return ck && name ? f8i_checkpoint_find(ck, name) : NULL;
}

size_t f8_checkpoint_entry_count(const f8_checkpoint *ck) { return ck ? f8i_checkpoint_count(ck) : 0; }

const f8_ck_entry *f8_checkpoint_entry_at(const f8_checkpoint *ck, size_t i)
{
    return ck && i < f8i_checkpoint_count(ck) ? f8i_checkpoint_entry(ck, i) : NULL;
}

size_t f8_checkpoint_metadata_count(const f8_checkpoint *ck) { return ck ? f8i_checkpoint_meta_count(ck) : 0; }

void f8_checkpoint_metadata_at(const f8_checkpoint *ck, size_t i, const char **key, const char **value)
{
    *key = *value = NULL;
    if (ck && i < f8i_checkpoint_meta_count(ck)) f8i_checkpoint_meta_at(ck, i, key, value);
}

f8_status f8_checkpoint_check_entry(const f8_checkpoint *ck, const char *fn, const char *name, f8_ck_rule rule)
{
    if (!ck || !name) return F8_ERR_INVALID_ARGUMENT;
    return f8i_checkpoint_check_finite(ck, fn ? fn : "f8_checkpoint_check_entry", name, rule);
}
