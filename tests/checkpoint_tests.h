/*
 * checkpoint_tests.h — modules in checkpoints: bit-exact round trip of
 * parameters and scaling state, resume = uninterrupted training, loading
 * without FP8 state, FP8 primary weights stored as F8_E4M3, cross loading
 * between FP8 and high-precision weights, and bad files or mismatched
 * modules leaving the module unchanged. Run on one ctx (CPU or CUDA).
 */
#ifndef F8_TESTS_CHECKPOINT_TESTS_H
#define F8_TESTS_CHECKPOINT_TESTS_H

#include <unistd.h>

#include "io/checkpoint.h"
#include "stack.h"

/* Master w's checkpoint entry (the inverse of stack_weight_index): v, the
 * gradient view of its weight; name, "optimizer.master.<w>"; returned, an
 * FP32 tensor of the weight's shape on the stack's staging buffer. */
static f8_tensor master_entry(stack *s, int w, f8_tensor *v, char name[32])
{
    stack_param(s, w == 0 ? 0 : w == 1 ? 2 : w == 2 ? 6 : 8, 1, v);
    snprintf(name, 32, "optimizer.master.%d", w);
    return f8_tensor_make(s->stage, F8_DTYPE_FP32, v->rows, v->cols);
}

static f8_status stack_save(stack *s, const char *path)
{
    f8_checkpoint *ck = NULL;
    f8_status st = f8_checkpoint_create(s->ctx, &ck);
    if (st == F8_OK) st = f8_checkpoint_add_module(ck, "blocks.0.proj", s->lin);
    if (st == F8_OK) st = f8_checkpoint_add_module(ck, "blocks.0.qkv", s->lnl);
    if (st == F8_OK) st = f8_checkpoint_add_module(ck, "blocks.0.mlp", s->mlp);
    for (int w = 0; w < 4 && st == F8_OK; w++) {
        if (!s->master[w]) continue;
        /* the optimizer's FP32 masters travel as the caller's own tensors */
        f8_tensor v;
        char name[32];
        f8_tensor m = master_entry(s, w, &v, name);
        st = f8_ctx_upload(s->ctx, s->stage, s->master[w], tensor_bytes(&v));
        if (st == F8_OK) st = f8_checkpoint_add_tensor(ck, name, &m);
    }
    if (st == F8_OK) st = f8_checkpoint_save(ck, path);
    f8_checkpoint_destroy(ck);
    return st;
}

static f8_status stack_load(stack *s, const char *path)
{
    f8_checkpoint *ck = NULL;
    f8_status st = f8_checkpoint_load(s->ctx, path, &ck);
    if (st == F8_OK) st = f8_checkpoint_restore_module(ck, "blocks.0.proj", s->lin);
    if (st == F8_OK) st = f8_checkpoint_restore_module(ck, "blocks.0.qkv", s->lnl);
    if (st == F8_OK) st = f8_checkpoint_restore_module(ck, "blocks.0.mlp", s->mlp);
    for (int w = 0; w < 4 && st == F8_OK; w++) {
        if (!s->master[w]) continue;
        f8_tensor v;
        char name[32];
        f8_tensor m = master_entry(s, w, &v, name);
        st = f8_checkpoint_read_tensor(ck, name, &m);
        if (st == F8_OK) st = f8_ctx_download(s->ctx, s->master[w], s->stage, tensor_bytes(&v));
    }
    f8_checkpoint_destroy(ck);
    return st;
}

/* Every slot of the stack's modules: history, scale, scale_inv, as bytes. */
static unsigned char *stack_slots(stack *s, size_t *bytes)
{
    const int L = f8_ctx_recipe(s->ctx)->amax_history_len, per = (L + 2) * 4;
    const int n = 3 + 2 + 3 + 2 + 6 + 4;
    unsigned char *out = (unsigned char *)xmalloc((size_t)n * per), *p = out;
    for (int d = 0; d < 2; d++) {
        int counts[3] = {d ? 2 : 3, d ? 2 : 3, d ? 4 : 6};
        for (int m = 0; m < 3; m++)
            for (int i = 0; i < counts[m]; i++) {
                f8_slot sl;
                if (m == 0) f8_module_slot(s->lin, (f8_direction)d, i, &sl);
                else if (m == 1) f8_module_slot(s->lnl, (f8_direction)d, i, &sl);
                else f8_module_slot(s->mlp, (f8_direction)d, i, &sl);
                float *f = (float *)p;
                if (f8_slot_read(s->ctx, sl, f + L, f + L + 1, f) != F8_OK) die("slot read", s->ctx);
                p += per;
            }
    }
    *bytes = (size_t)n * per;
    return out;
}

static void stack_train(stack *s, int from, int steps)
{
    for (int step = from; step < from + steps; step++) {
        stack_zero_grad(s);
        for (int mb = 0; mb < 2; mb++) {
            stack_data(s, step, mb);
            if (stack_fwd_bwd(s, mb ? F8_MICROBATCH_NOT_FIRST : F8_MICROBATCH_FIRST) != F8_OK) die("step", s->ctx);
        }
        if (stack_update_scales(s) != F8_OK) die("update", s->ctx);
        stack_sgd(s, 0.01f);
    }
}

static int same_bytes(const unsigned char *a, size_t na, const unsigned char *b, size_t nb)
{
    return na == nb && memcmp(a, b, na) == 0;
}

/* Save after 2 steps; a fresh stack (other seed) restored from the file is
 * bitwise the original (parameters and every slot), and both continue
 * bitwise alike for 2 more steps. */
static void test_checkpoint_resume(f8_ctx *ctx, int fp8, int fp8_weights, const char *path)
{
    stack_cfg c = small_cfg(fp8, fp8_weights), c2 = c;
    c2.seed = 99;
    stack A, B;
    stack_create(&A, ctx, &c);
    stack_create(&B, ctx, &c2);
    stack_train(&A, 0, 2);
    CHECK_OK(ctx, stack_save(&A, path));
    CHECK_OK(ctx, stack_load(&B, path));
    stack_zero_grad(&A);
    stack_zero_grad(&B);
    size_t na, nb, sa, sb;
    unsigned char *pa = stack_snapshot(&A, &na), *pb = stack_snapshot(&B, &nb);
    /* y is not state; compare parameters and (zero) gradients only */
    const size_t ny = (size_t)(c.T * c.H) * 4;
    CHECK(na == nb && memcmp(pa, pb, na - ny) == 0, "restored parameters differ (fp8 %d, fp8_weights %d)", fp8,
          fp8_weights);
    unsigned char *ka = stack_slots(&A, &sa), *kb = stack_slots(&B, &sb);
    CHECK(same_bytes(ka, sa, kb, sb), "restored scaling state differs (fp8 %d, fp8_weights %d)", fp8, fp8_weights);
    free(pa);
    free(pb);
    free(ka);
    free(kb);
    stack_train(&A, 2, 2);
    stack_train(&B, 2, 2);
    pa = stack_snapshot(&A, &na);
    pb = stack_snapshot(&B, &nb);
    CHECK(same_bytes(pa, na, pb, nb), "resumed training differs from uninterrupted (fp8 %d, fp8_weights %d)", fp8,
          fp8_weights);
    free(pa);
    free(pb);
    if (fp8_weights) {
        /* the FP8 primary weight is stored in its FP8 dtype with its scale_inv */
        f8_checkpoint *ck = NULL;
        CHECK_OK(ctx, f8_checkpoint_load(ctx, path, &ck));
        const f8i_ck_entry *e = ck ? f8i_checkpoint_find(ck, "blocks.0.mlp.fc1_weight") : NULL;
        CHECK(e && e->dtype == F8I_CK_F8_E4M3, "FP8 primary weight stored as F8_E4M3");
        CHECK(ck && f8_checkpoint_has(ck, "blocks.0.mlp.fc1_weight_scale_inv"), "its scale_inv is stored");
        CHECK(ck && f8_checkpoint_metadata(ck, "f8.format_version") != NULL, "format version in __metadata__");
        f8_checkpoint_destroy(ck);
    }
    stack_destroy(&A);
    stack_destroy(&B);
}

/* A checkpoint of one high-precision Linear's parameters only (no fp8.*
 * entries): restoring is legal and the slots start fresh. Also cross loads
 * into an FP8-primary Linear (quantized with its slot scale, oracle on the
 * host) and back (dequantized exactly). */
static void test_checkpoint_fresh_and_cross(f8_ctx *ctx)
{
    f8_linear_config lc = f8_linear_config_default(32, 48);
    lc.max_tokens = 16;
    f8_module *hp = NULL, *p8 = NULL, *back = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &hp));
    lc.fp8_weights = 1;
    lc.seed = 7;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &p8));
    lc.fp8_weights = 0;
    lc.seed = 8;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &back));
    if (!hp || !p8 || !back) return;
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    f8_tensor w, b;
    f8_module_param(hp, F8_PARAM_WEIGHT, 0, &w);
    f8_module_param(hp, F8_PARAM_BIAS, 0, &b);
    CHECK_OK(ctx, f8_checkpoint_add_tensor(ck, "l.weight", &w));
    CHECK_OK(ctx, f8_checkpoint_add_tensor(ck, "l.bias", &b));
    /* dirty p8's slots, then restore: fresh state */
    f8_slot ws;
    f8_module_slot(p8, F8_DIR_FORWARD, 1, &ws);
    float hist[1024] = {5.0f, 6.0f};
    CHECK_OK(ctx, f8_slot_write(ctx, ws, 2.0f, 0.5f, hist));
    CHECK_OK(ctx, f8_checkpoint_restore_module(ck, "l", p8));
    float sc, si;
    f8_slot_read(ctx, ws, &sc, &si, hist);
    CHECK(sc == 1.0f && si == 1.0f && hist[1] == 0.0f, "no FP8 state in the file: slots start fresh");
    /* the restored FP8 weight = fp8(w · 1) on the host */
    const int n = 32 * 48;
    float *wh = (float *)xmalloc(n * 4);
    uint8_t *codes = (uint8_t *)xmalloc(n);
    f8_ctx_download(ctx, wh, w.data, n * 4);
    f8_tensor v8;
    f8_module_param(p8, F8_PARAM_WEIGHT, 0, &v8);
    f8_ctx_download(ctx, codes, v8.data, n);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += codes[i] != f8_fp8_from_float(wh[i], F8_DTYPE_E4M3);
    CHECK(bad == 0, "high-precision entry into an FP8 primary weight: %d codes differ", bad);
    /* and back: an FP8 entry into a high-precision Linear is dequantized */
    f8_checkpoint *ck2 = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck2));
    CHECK_OK(ctx, f8_checkpoint_add_module(ck2, "q", p8));
    CHECK_OK(ctx, f8_checkpoint_restore_module(ck2, "q", back));
    f8_tensor wb;
    f8_module_param(back, F8_PARAM_WEIGHT, 0, &wb);
    f8_ctx_download(ctx, wh, wb.data, n * 4);
    bad = 0;
    for (int i = 0; i < n; i++) bad += wh[i] != f8_fp8_to_float(codes[i], F8_DTYPE_E4M3);
    CHECK(bad == 0, "FP8 entry into a high-precision weight: %d values differ from the dequantized codes", bad);
    free(wh);
    free(codes);
    f8_checkpoint_destroy(ck);
    f8_checkpoint_destroy(ck2);
    f8_module_destroy(hp);
    f8_module_destroy(p8);
    f8_module_destroy(back);
}

/* Bad inputs: a module of another shape, a missing entry, a truncated file,
 * a recipe of another format: each a clear status, the module unchanged. */
static void test_checkpoint_bad(f8_ctx *ctx, const char *path)
{
    stack_cfg c = small_cfg(1, 0);
    stack A;
    stack_create(&A, ctx, &c);
    stack_train(&A, 0, 1);
    CHECK_OK(ctx, stack_save(&A, path));
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_load(ctx, path, &ck));
    if (!ck) {
        stack_destroy(&A);
        return;
    }
    /* another shape */
    f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(c.H, c.F + 16);
    mc.max_tokens = c.T;
    f8_module *other = NULL;
    CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &mc, &other));
    f8_tensor g;
    f8_module_param(other, F8_PARAM_LN_WEIGHT, 0, &g);
    float before[64], after[64];
    f8_ctx_download(ctx, before, g.data, sizeof before);
    CHECK_STATUS(ctx, f8_checkpoint_restore_module(ck, "blocks.0.mlp", other), F8_ERR_SHAPE);
    f8_ctx_download(ctx, after, g.data, sizeof after);
    CHECK(memcmp(before, after, sizeof before) == 0, "a failed restore changed the module");
    /* a missing entry (wrong prefix), an RMSNorm module against a LayerNorm file */
    CHECK_STATUS(ctx, f8_checkpoint_restore_module(ck, "blocks.1.mlp", other), F8_ERR_INVALID_ARGUMENT);
    mc = f8_layernorm_mlp_config_default(c.H, c.F);
    mc.max_tokens = c.T;
    mc.normalization = F8_NORM_RMSNORM;
    f8_module *rms = NULL;
    CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &mc, &rms));
    CHECK_STATUS(ctx, f8_checkpoint_restore_module(ck, "blocks.0.mlp", rms), F8_ERR_INVALID_ARGUMENT);
    f8_module_destroy(rms);
    f8_module_destroy(other);
    f8_checkpoint_destroy(ck);
    /* a recipe of another format in a ctx: E4M3 everywhere */
    f8_recipe r = f8_recipe_default();
    r.format = F8_FORMAT_E4M3;
    char why[256];
    f8_ctx *e4 = test_ctx(f8_ctx_backend(ctx), &r, why);
    if (e4) {
        f8_checkpoint *ck4 = NULL;
        CHECK_OK(e4, f8_checkpoint_load(e4, path, &ck4));
        f8_linear_config lc = f8_linear_config_default(c.H, c.H);
        lc.max_tokens = c.T;
        f8_module *l4 = NULL;
        CHECK_OK(e4, f8_linear_create(e4, &lc, &l4));
        CHECK_STATUS(e4, f8_checkpoint_restore_module(ck4, "blocks.0.proj", l4), F8_ERR_INVALID_ARGUMENT);
        f8_module_destroy(l4);
        f8_checkpoint_destroy(ck4);
        f8_ctx_destroy(e4);
    }
    /* a truncated file */
    FILE *f = fopen(path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        CHECK(truncate(path, size / 2) == 0, "truncate");
        f8_checkpoint *bad = NULL;
        f8_status st = f8_checkpoint_load(ctx, path, &bad);
        CHECK(st != F8_OK && bad == NULL, "a truncated file is refused: %s", f8_status_string(st));
    }
    remove(path);
    stack_destroy(&A);
}

static void run_checkpoint_tests(f8_ctx *ctx, const char *tag)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/f8_test_ckpt_%s_%d.safetensors", tag, (int)getpid());
    for (int fp8 = 0; fp8 <= 1; fp8++)
        for (int fw = 0; fw <= fp8; fw++) test_checkpoint_resume(ctx, fp8, fw, path);
    test_checkpoint_fresh_and_cross(ctx);
    test_checkpoint_bad(ctx, path);
    remove(path);
}

#endif /* F8_TESTS_CHECKPOINT_TESTS_H */
