/*
 * saved_rebind.c — f8_module_saved_rebind: one saved-state object serves
 * the modules of several layers in turn.
 *
 * Design note. A trainer that recomputes each block's forward in the
 * backward (activation checkpointing) needs the saved state of one block at
 * a time, not of all of them: one object per module kind, handed from layer
 * to layer. The saved block's layout is its class's place_saved for the
 * creator's max_tokens, so it fits another module exactly when that module
 * lays out the same bytes for the same T (same class, shapes, FP8 flag,
 * recompute_norm and recipe, all on one ctx); the pointers into the block
 * are placed again from the new owner, so nothing of the old owner's view
 * remains. The memory stays accounted to the module that created it. Host
 * work only: legal while a graph is captured (the captured kernels keep the
 * pointers they were given, and replays run them in the same order).
 */
#include <string.h>

#include "modules/module.h"

f8_status f8_module_saved_rebind(f8_module *m, f8_saved *s)
{
    static const char fn[] = "f8_module_saved_rebind";
    if (!m) return F8_ERR_INVALID_ARGUMENT;
    if (!s) return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved is NULL", fn);
    if (s->owner == m) return F8_OK;
    const f8_module *o = s->owner;
    if (o->ctx != m->ctx)
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved belongs to a module of another ctx", fn);
    const int64_t T = o->max_tokens > 0 ? o->max_tokens : 1;
    f8i_layout lo = f8i_layout_at(NULL), lm = f8i_layout_at(NULL);
    unsigned char scratch[256];
    if (m->cls != o->cls || m->max_tokens != o->max_tokens || m->cls->saved_impl_size > sizeof scratch ||
        o->cls->place_saved(o, &lo, T, scratch) != m->cls->place_saved(m, &lm, T, scratch))
        return f8i_error(m->ctx, F8_ERR_INVALID_ARGUMENT, "%s: saved was made by a %s whose saved layout differs from "
                         "this %s's (class, shapes, max_tokens, FP8 and recompute_norm must match)", fn, o->cls->name,
                         m->cls->name);
    f8i_layout l = f8i_layout_at(s->block);
    if (s->block) m->cls->place_saved(m, &l, T, s->impl);
    s->owner = m;
    s->filled = 0; /* what the old owner's forward left is not this module's */
    s->tokens = 0;
    memset(&s->x, 0, sizeof s->x);
    return F8_OK;
}
