/*
 * test_checkpoint_attention.c — an FP8 attention's scaling slots (QKV, S, O)
 * in an f8_checkpoint, on the CPU backend:
 *  - round trip: distinct histories, scales and scale_invs stored as F32
 *    [L, 3] and [3] with the recipe, then restored bit for bit through
 *    memory and through a file into an attention whose slots sit at other
 *    columns of the registry; a module's slots between them are untouched;
 *  - a history of another length is cut or zero-padded, as a module's;
 *  - a BF16 attention: add stores nothing (F8_OK), restore of nothing is
 *    F8_OK, restore of FP8 state is refused;
 *  - refusals leave the attention's slots and the checkpoint unchanged:
 *    nothing stored, a missing entry, another slot count or dtype, a zero
 *    scale, a NaN or negative amax, another recipe format or kind, another
 *    ctx's checkpoint, NULLs, a name already added, a graph being captured.
 */
#include "checkpoint_fixture.h"

enum { NS = 3, MAX_L = 8 };

/* One attention's slots on the host: per slot, hist [L], scale, scale_inv. */
typedef struct state {
    float v[NS][MAX_L + 2];
} state;

static f8_ctx *ctx_with(int history, f8_format format)
{
    f8_recipe r = f8_recipe_default();
    r.amax_history_len = history;
    r.format = format;
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, &r, why);
    if (!ctx) die(why, NULL);
    return ctx;
}

static f8_attention *attention_new(f8_ctx *ctx, int fp8)
{
    f8_attention_config c = f8_attention_config_default(2, 8, 2, 5);
    c.fp8 = fp8;
    f8_attention *a = NULL;
    if (f8_attention_create(ctx, &c, &a) != F8_OK) die("f8_attention_create", ctx);
    return a;
}

static state read_state(f8_ctx *ctx, const f8_attention *a)
{
    state s;
    memset(&s, 0, sizeof s);
    f8_slot sl[NS];
    const int L = f8_ctx_recipe(ctx)->amax_history_len;
    CHECK_OK(ctx, f8_attention_fp8_slots(a, sl));
    for (int k = 0; k < NS; k++) CHECK_OK(ctx, f8_slot_read(ctx, sl[k], &s.v[k][L], &s.v[k][L + 1], s.v[k]));
    return s;
}

/* Values no fresh slot has: amaxes >= 0 (row 0 a pending accumulator),
 * scales with a full mantissa, scale_inv their FP32 reciprocal. */
static state write_state(f8_ctx *ctx, f8_slot *sl, int n, uint64_t seed)
{
    test_rng r = {seed};
    const int L = f8_ctx_recipe(ctx)->amax_history_len;
    state s;
    memset(&s, 0, sizeof s);
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < L; i++) s.v[k][i] = (float)fabs(rng_normal(&r)) * 3.0f + 1e-3f * (float)i;
        s.v[k][L] = 448.0f / (1.0f + (float)fabs(rng_normal(&r)));
        s.v[k][L + 1] = 1.0f / s.v[k][L];
        CHECK_OK(ctx, f8_slot_write(ctx, sl[k], s.v[k][L], s.v[k][L + 1], s.v[k]));
    }
    return s;
}

static state randomize(f8_ctx *ctx, const f8_attention *a, uint64_t seed)
{
    f8_slot sl[NS];
    CHECK_OK(ctx, f8_attention_fp8_slots(a, sl));
    return write_state(ctx, sl, NS, seed);
}

/* The checkpoint's bytes loaded into ctx (a checkpoint is bound to its ctx). */
static f8_checkpoint *reload(const f8_checkpoint *ck, f8_ctx *ctx)
{
    unsigned char *b = NULL;
    size_t n = 0;
    f8_checkpoint *out = NULL;
    CHECK_OK(NULL, f8i_checkpoint_serialize(ck, &b, &n));
    CHECK_OK(ctx, f8_checkpoint_load_memory(ctx, b, n, &out));
    free(b);
    return out;
}

static void test_roundtrip(void)
{
    f8_ctx *ctx = ctx_with(5, F8_FORMAT_HYBRID);
    f8_attention *a = attention_new(ctx, 1);
    f8_linear_config lc = f8_linear_config_default(8, 8);
    lc.fp8 = 1;
    f8_module *m = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &m));
    f8_attention *b = attention_new(ctx, 1); /* its slots after the module's */
    f8_slot ms[3];
    for (int k = 0; k < 3; k++) CHECK_OK(ctx, f8_module_slot(m, F8_DIR_FORWARD, k, &ms[k]));
    const state sm = write_state(ctx, ms, 3, 7), sa = randomize(ctx, a, 1);
    (void)randomize(ctx, b, 2);
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    CHECK_OK(ctx, f8_checkpoint_add_attention(ck, "h.0.attn", a));
    const f8i_ck_entry *h = f8i_checkpoint_find(ck, "h.0.attn.fp8.fwd.amax_history");
    const f8i_ck_entry *s = f8i_checkpoint_find(ck, "h.0.attn.fp8.fwd.scale");
    const f8i_ck_entry *si = f8i_checkpoint_find(ck, "h.0.attn.fp8.fwd.scale_inv");
    CHECK(h && h->dtype == F8I_CK_F32 && h->ndim == 2 && h->shape[0] == 5 && h->shape[1] == NS, "history entry");
    CHECK(s && si && s->ndim == 1 && s->shape[0] == NS && si->ndim == 1 && si->shape[0] == NS, "scale entries");
    CHECK(f8i_checkpoint_count(ck) == 3, "%zu entries, expected 3", f8i_checkpoint_count(ck));
    const char *recipe = f8_checkpoint_metadata(ck, "h.0.attn.fp8.recipe");
    CHECK(recipe && strstr(recipe, "format=HYBRID") && strstr(recipe, "amax_history_len=5"), "recipe '%s'",
          recipe ? recipe : "(none)");
    for (int k = 0; h && s && si && k < NS; k++) { /* row r, slot k at r·3 + k, as a module's */
        float v;
        memcpy(&v, s->data + 4 * k, 4);
        CHECK(memcmp(&v, &sa.v[k][5], 4) == 0, "stored scale %d", k);
        memcpy(&v, h->data + 4 * (2 * NS + k), 4);
        CHECK(memcmp(&v, &sa.v[k][2], 4) == 0, "stored history row 2 of slot %d", k);
    }
    /* through memory */
    f8_checkpoint *ck2 = reload(ck, ctx);
    CHECK_OK(ctx, f8_checkpoint_restore_attention(ck2, "h.0.attn", b));
    state sb = read_state(ctx, b);
    CHECK(memcmp(&sa, &sb, sizeof sa) == 0, "restored through memory: not bitwise the stored slots");
    /* through a file */
    char path[128];
    path_in_dir(path, sizeof path, "roundtrip.safetensors");
    CHECK_OK(ctx, f8_checkpoint_save(ck, path));
    f8_checkpoint *ck3 = NULL;
    (void)randomize(ctx, b, 3);
    CHECK_OK(ctx, f8_checkpoint_load(ctx, path, &ck3));
    CHECK_OK(ctx, f8_checkpoint_restore_attention(ck3, "h.0.attn", b));
    sb = read_state(ctx, b);
    CHECK(memcmp(&sa, &sb, sizeof sa) == 0, "restored through a file: not bitwise the stored slots");
    state after;
    memset(&after, 0, sizeof after);
    for (int k = 0; k < 3; k++) CHECK_OK(ctx, f8_slot_read(ctx, ms[k], &after.v[k][5], &after.v[k][6], after.v[k]));
    CHECK(memcmp(&sm, &after, sizeof sm) == 0, "the module's slots changed");
    f8_checkpoint_destroy(ck3);
    f8_checkpoint_destroy(ck2);
    f8_checkpoint_destroy(ck);
    f8_attention_destroy(b);
    f8_module_destroy(m);
    f8_attention_destroy(a);
    f8_ctx_destroy(ctx);
}

/* A history of 5 rows restored under 3 (cut) and 8 (zero rows added). */
static void test_history_length(void)
{
    f8_ctx *ctx = ctx_with(5, F8_FORMAT_HYBRID);
    f8_attention *a = attention_new(ctx, 1);
    const state sa = randomize(ctx, a, 11);
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    CHECK_OK(ctx, f8_checkpoint_add_attention(ck, "attn", a));
    const int lens[2] = {3, 8};
    for (int i = 0; i < 2; i++) {
        const int L = lens[i];
        f8_ctx *other = ctx_with(L, F8_FORMAT_HYBRID);
        f8_attention *b = attention_new(other, 1);
        f8_checkpoint *ck2 = reload(ck, other);
        CHECK_OK(other, f8_checkpoint_restore_attention(ck2, "attn", b));
        const state sb = read_state(other, b);
        for (int k = 0; k < NS; k++) {
            for (int r = 0; r < L; r++)
                CHECK(sb.v[k][r] == (r < 5 ? sa.v[k][r] : 0.0f), "L %d, slot %d, row %d: %g", L, k, r, (double)sb.v[k][r]);
            CHECK(sb.v[k][L] == sa.v[k][5] && sb.v[k][L + 1] == sa.v[k][6], "L %d, slot %d: scales", L, k);
        }
        f8_checkpoint_destroy(ck2);
        f8_attention_destroy(b);
        f8_ctx_destroy(other);
    }
    f8_checkpoint_destroy(ck);
    f8_attention_destroy(a);
    f8_ctx_destroy(ctx);
}

/* A copy of good's entries but `skip`, with the recipe (or `recipe`). */
static f8_checkpoint *variant(f8_ctx *ctx, const f8_checkpoint *good, const char *skip, const char *recipe)
{
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    for (size_t i = 0; i < f8i_checkpoint_count(good); i++) {
        const f8i_ck_entry *e = f8i_checkpoint_entry(good, i);
        if (!skip || strcmp(e->name, skip) != 0)
            CHECK_OK(ctx, f8i_checkpoint_put(ck, e->name, e->dtype, e->ndim, e->shape, e->data, e->bytes));
    }
    CHECK_OK(ctx, f8_checkpoint_set_metadata(ck, "p.fp8.recipe", recipe ? recipe : f8_checkpoint_metadata(good, "p.fp8.recipe")));
    return ck;
}

/* ck with entry `name` replaced. */
static void replace(f8_ctx *ctx, f8_checkpoint **ck, const char *name, f8i_ck_dtype dt, int ndim, int64_t d0, int64_t d1,
                    const void *data)
{
    f8_checkpoint *v = variant(ctx, *ck, name, NULL);
    const int64_t shape[2] = {d0, d1};
    const size_t n = (size_t)(ndim == 2 ? d0 * d1 : d0);
    CHECK_OK(ctx, f8i_checkpoint_put(v, name, dt, ndim, shape, data, n * f8i_ck_dtype_size(dt)));
    f8_checkpoint_destroy(*ck);
    *ck = v;
}

static void test_refusals(void)
{
    f8_ctx *ctx = ctx_with(4, F8_FORMAT_HYBRID), *other = ctx_with(4, F8_FORMAT_HYBRID);
    f8_attention *a = attention_new(ctx, 1), *b = attention_new(ctx, 1);
    const state sa = randomize(ctx, a, 21), sb = randomize(ctx, b, 22);
    f8_checkpoint *good = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &good));
    CHECK_OK(ctx, f8_checkpoint_add_attention(good, "p", a));
    float hist5[4 * 4], sc[NS], bad[NS];
    memset(hist5, 0, sizeof hist5);
    for (int k = 0; k < NS; k++) sc[k] = 2.0f;
    uint16_t bf[NS] = {0x3F80, 0x3F80, 0x3F80};
    struct {
        const char *what;
        f8_status want;
    } cases[] = {{"nothing under the prefix", F8_ERR_INVALID_ARGUMENT}, {"no scale_inv", F8_ERR_INVALID_ARGUMENT},
                 {"4 slots of history", F8_ERR_SHAPE},        {"a BF16 scale", F8_ERR_SHAPE},
                 {"a zero scale", F8_ERR_INVALID_ARGUMENT},   {"a NaN amax", F8_ERR_INVALID_ARGUMENT},
                 {"a negative amax", F8_ERR_INVALID_ARGUMENT}, {"an E4M3 recipe", F8_ERR_INVALID_ARGUMENT},
                 {"a current-scaling recipe", F8_ERR_INVALID_ARGUMENT}, {"another ctx's checkpoint", F8_ERR_INVALID_ARGUMENT}};
    for (int c = 0; c < (int)(sizeof cases / sizeof *cases); c++) {
        f8_checkpoint *ck = variant(ctx, good, NULL, NULL);
        const char *prefix = c == 0 ? "q" : "p";
        if (c == 1) {
            f8_checkpoint_destroy(ck);
            ck = variant(ctx, good, "p.fp8.fwd.scale_inv", NULL);
        } else if (c == 2) {
            replace(ctx, &ck, "p.fp8.fwd.amax_history", F8I_CK_F32, 2, 4, 4, hist5);
        } else if (c == 3) {
            replace(ctx, &ck, "p.fp8.fwd.scale", F8I_CK_BF16, 1, NS, 0, bf);
        } else if (c >= 4 && c <= 6) {
            memcpy(bad, sc, sizeof bad);
            bad[c - 4] = c == 4 ? 0.0f : c == 5 ? NAN : -1.0f;
            const f8i_ck_entry *h = f8i_checkpoint_find(good, "p.fp8.fwd.amax_history");
            float hist[4 * NS];
            memcpy(hist, h->data, sizeof hist);
            hist[NS + c - 4] = bad[c - 4];
            if (c == 4) replace(ctx, &ck, "p.fp8.fwd.scale", F8I_CK_F32, 1, NS, 0, bad);
            else replace(ctx, &ck, "p.fp8.fwd.amax_history", F8I_CK_F32, 2, 4, NS, hist);
        } else if (c == 7 || c == 8) {
            f8_checkpoint_destroy(ck);
            ck = variant(ctx, good, NULL, c == 7 ? "format=E4M3 margin=0 amax_history_len=4 amax_compute_algo=max"
                                                 : "format=HYBRID margin=0 amax_history_len=4 amax_compute_algo=max "
                                                   "scaling=current power_2_scales=0");
        } else if (c == 9) {
            f8_checkpoint_destroy(ck);
            ck = reload(good, other);
        }
        const f8_status st = f8_checkpoint_restore_attention(ck, prefix, b);
        CHECK(st == cases[c].want, "%s: %s, expected %s (%s)", cases[c].what, f8_status_string(st),
              f8_status_string(cases[c].want), f8_ctx_last_error(ctx));
        CHECK(st == F8_OK || f8_ctx_last_error(ctx)[0], "%s: no message", cases[c].what);
        const state now = read_state(ctx, b);
        CHECK(memcmp(&now, &sb, sizeof sb) == 0, "%s: the refused restore changed the slots", cases[c].what);
        f8_checkpoint_destroy(ck);
    }
    CHECK_STATUS(ctx, f8_checkpoint_restore_attention(NULL, "p", b), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_checkpoint_restore_attention(good, NULL, b), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_checkpoint_restore_attention(good, "p", NULL), F8_ERR_INVALID_ARGUMENT);

    /* adding: a name already there (all of them, or one), NULLs, another ctx */
    const size_t count = f8i_checkpoint_count(good);
    (void)randomize(ctx, a, 23);
    CHECK_STATUS(ctx, f8_checkpoint_add_attention(good, "p", a), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(ctx), "p.fp8.fwd.amax_history"), "message: %s", f8_ctx_last_error(ctx));
    f8_tensor one = f8_tensor_make(sc, F8_DTYPE_FP32, 1, 1);
    CHECK_OK(ctx, f8_checkpoint_add_tensor(good, "r.fp8.fwd.scale_inv", &one));
    CHECK_STATUS(ctx, f8_checkpoint_add_attention(good, "r", a), F8_ERR_INVALID_ARGUMENT);
    CHECK(f8i_checkpoint_count(good) == count + 1 && !f8_checkpoint_has(good, "r.fp8.fwd.scale") &&
              !f8_checkpoint_metadata(good, "r.fp8.recipe"), "a refused add added entries");
    CHECK_OK(ctx, f8_checkpoint_restore_attention(good, "p", b)); /* still the first add's values */
    const state first = read_state(ctx, b);
    CHECK(memcmp(&first, &sa, sizeof sa) == 0, "a refused add changed what was stored");
    CHECK_STATUS(ctx, f8_checkpoint_add_attention(NULL, "s", a), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_checkpoint_add_attention(good, NULL, a), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_checkpoint_add_attention(good, "s", NULL), F8_ERR_INVALID_ARGUMENT);
    f8_checkpoint *foreign = NULL;
    CHECK_OK(other, f8_checkpoint_create(other, &foreign));
    CHECK_STATUS(ctx, f8_checkpoint_add_attention(foreign, "s", a), F8_ERR_INVALID_ARGUMENT);
    CHECK(f8i_checkpoint_count(foreign) == 0, "added to another ctx's checkpoint");

    /* while capturing: host copies are refused (and spoil the capture) */
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_STATUS(ctx, f8_checkpoint_add_attention(good, "s", a), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_checkpoint_restore_attention(good, "p", b), F8_ERR_STATE);
    f8_graph *g = NULL;
    CHECK_STATUS(ctx, f8_graph_end(ctx, &g), F8_ERR_STATE);
    f8_graph_destroy(g);
    CHECK(!f8_checkpoint_has(good, "s.fp8.fwd.amax_history"), "added while capturing");
    const state last = read_state(ctx, b);
    CHECK(memcmp(&last, &sa, sizeof sa) == 0, "restored while capturing");
    f8_checkpoint_destroy(foreign);
    f8_checkpoint_destroy(good);
    f8_attention_destroy(b);
    f8_attention_destroy(a);
    f8_ctx_destroy(other);
    f8_ctx_destroy(ctx);
}

/* fp8 = 0: nothing to store; FP8 state is not dropped into it. */
static void test_bf16(void)
{
    f8_ctx *ctx = ctx_with(4, F8_FORMAT_HYBRID);
    f8_attention *bf = attention_new(ctx, 0), *a = attention_new(ctx, 1);
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    CHECK_OK(ctx, f8_checkpoint_add_attention(ck, "bf", bf));
    CHECK(f8i_checkpoint_count(ck) == 0 && f8i_checkpoint_meta_count(ck) == 2, "a BF16 attention stored something");
    CHECK_OK(ctx, f8_checkpoint_restore_attention(ck, "bf", bf));
    /* a BF16 attention's checkpoint into an FP8 one: no state, refused */
    const state sa = randomize(ctx, a, 31);
    CHECK_STATUS(ctx, f8_checkpoint_restore_attention(ck, "bf", a), F8_ERR_INVALID_ARGUMENT);
    const state now = read_state(ctx, a);
    CHECK(memcmp(&now, &sa, sizeof sa) == 0, "a refused restore changed the slots");
    CHECK_OK(ctx, f8_checkpoint_add_attention(ck, "fp8", a));
    CHECK_STATUS(ctx, f8_checkpoint_restore_attention(ck, "fp8", bf), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(ctx), "fp8 = 0"), "message: %s", f8_ctx_last_error(ctx));
    f8_checkpoint_destroy(ck);
    f8_attention_destroy(a);
    f8_attention_destroy(bf);
    f8_ctx_destroy(ctx);
}

int main(void)
{
    static void (*const tests[])(void) = {test_roundtrip, test_history_length, test_refusals, test_bf16};
    return checkpoint_test_run("test_checkpoint_attention", tests, (int)(sizeof tests / sizeof *tests));
}
