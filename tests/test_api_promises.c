/*
 * test_api_promises.c — "on error the call changes nothing", and the
 * manual's other promises, at the places hostile calls found them broken
 * (issue 26, 1b); each case fails without its fix:
 *   - a sequence-parallel forward whose gather fails (F8_ERR_COMM, the group
 *     aborted) leaves its input slot's amax, scale and scale_inv as they
 *     were (the norm kernel records the amax before the gather);
 *   - f8_onnx_add_embedding with fp8_embedding refuses a NaN element (the row
 *     maximum skips NaN), naming it;
 *   - f8_checkpoint_add_attention / add_module refuse a NaN scale that the
 *     restore would refuse, adding nothing;
 *   - checkpoint add/restore of a NULL module, attention or optimizer: the
 *     status with a message on the checkpoint's ctx;
 *   - f8_module_forward with y over x, f8_module_set_main_grad with NULL;
 *   - f8_ctx_create with reduce_amax 7, and power_2_scales with BLOCK (the
 *     manual and the code agree: accepted, the block scales powers of two);
 *   - f8_ctx_enable_telemetry after slots exist, though already on.
 */
#include <unistd.h>

#include "check.h"

static f8_ctx *make_ctx(f8_recipe_kind kind)
{
    f8_ctx_config cc = f8_ctx_config_default();
    cc.recipe.kind = kind;
    cc.recipe.amax_history_len = 4;
    f8_ctx *ctx = NULL;
    char err[256];
    if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK) {
        fprintf(stderr, "ctx: %s\n", err);
        exit(1);
    }
    return ctx;
}

static int has(const f8_ctx *ctx, const char *words) { return strstr(f8_ctx_last_error((f8_ctx *)ctx), words) != NULL; }

/* The slot's column: history[4], scale, scale_inv. */
static void column(f8_ctx *ctx, f8_slot s, float col[6])
{
    CHECK_OK(ctx, f8_slot_read(ctx, s, &col[4], &col[5], col));
}

static void sp_comm_failure(void)
{
    enum { T = 8, K = 32, N = 16 };
    f8_ctx *ctx = make_ctx(F8_RECIPE_DELAYED);
    f8_comm_group *group = NULL;
    f8_comm *comm = NULL;
    char err[256];
    CHECK(f8_comm_group_create(2, &group, err, sizeof err) == F8_OK, "group: %s", err);
    CHECK_OK(ctx, f8_comm_create_cpu(ctx, group, 0, &comm));
    f8_layernorm_linear_config c = f8_layernorm_linear_config_default(K, N);
    c.max_tokens = T;
    f8_module *m = NULL;
    CHECK_OK(ctx, f8_layernorm_linear_create(ctx, &c, &m));
    CHECK_OK(ctx, f8_module_set_sequence_parallel(m, comm));
    f8_slot in;
    CHECK_OK(ctx, f8_module_slot(m, F8_DIR_FORWARD, 0, &in));
    float hist[4] = {0.0f, 1.0f, 0.0f, 2.0f}; /* row 0: this step's amax so far */
    CHECK_OK(ctx, f8_slot_write(ctx, in, 0.5f, 2.0f, hist));
    float before[6], after[6];
    column(ctx, in, before);
    /* this rank's T/2 rows, values up to 40: a recorded amax would show */
    float *x = NULL, *y = NULL;
    CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(T / 2 * K) * 4, (void **)&x));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(T * N) * 4, (void **)&y));
    float hx[T / 2 * K];
    for (int i = 0; i < T / 2 * K; i++) hx[i] = (float)((i * 37) % 81 - 40);
    CHECK_OK(ctx, f8_ctx_upload(ctx, x, hx, sizeof hx));
    f8_tensor tx = f8_tensor_make(x, F8_DTYPE_FP32, T / 2, K), ty = f8_tensor_make(y, F8_DTYPE_FP32, T, N);
    f8_comm_group_abort(group); /* the peer is gone */
    CHECK_STATUS(ctx, f8_module_forward(m, &tx, &ty, F8_MICROBATCH_NONE, NULL), F8_ERR_COMM);
    column(ctx, in, after);
    CHECK(memcmp(before, after, sizeof before) == 0,
          "the failed forward left its slot changed: amax %g -> %g, scale %g -> %g, scale_inv %g -> %g",
          (double)before[0], (double)after[0], (double)before[4], (double)after[4], (double)before[5], (double)after[5]);
    f8_ctx_free(ctx, x);
    f8_ctx_free(ctx, y);
    f8_module_destroy(m);
    f8_comm_destroy(comm);
    f8_comm_group_destroy(group);
    f8_ctx_destroy(ctx);
}

static void onnx_embedding_nan(void)
{
    enum { V = 6, C = 8, S = 4 };
    f8_ctx *ctx = make_ctx(F8_RECIPE_DELAYED);
    static float wte[V * C], wpe[S * C];
    for (int i = 0; i < V * C; i++) wte[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < S * C; i++) wpe[i] = 0.25f;
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        wte[3 * C + 5] = bad[k];
        f8_onnx_config cfg = f8_onnx_config_default();
        cfg.fp8_embedding = 1;
        f8_onnx *g = NULL;
        CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
        CHECK_OK(ctx, f8_onnx_add_input(g, "tokens", F8_ONNX_INT64, "batch,seq"));
        f8_tensor a = f8_tensor_make(wte, F8_DTYPE_FP32, V, C), b = f8_tensor_make(wpe, F8_DTYPE_FP32, S, C);
        CHECK(f8_onnx_add_embedding(g, &a, &b, "tokens", "x") == F8_ERR_INVALID_ARGUMENT && has(ctx, "row 3, column 5"),
              "fp8_embedding with %g at row 3, column 5: %s", (double)bad[k], f8_ctx_last_error(ctx));
        f8_onnx_destroy(g);
    }
    f8_ctx_destroy(ctx);
}

static void checkpoint_nan_scale(void)
{
    f8_ctx *ctx = make_ctx(F8_RECIPE_DELAYED);
    f8_attention_config ac = f8_attention_config_default(2, 16, 1, 8);
    ac.fp8 = 1;
    f8_attention *att = NULL;
    CHECK_OK(ctx, f8_attention_create(ctx, &ac, &att));
    f8_slot s[3];
    CHECK_OK(ctx, f8_attention_fp8_slots(att, s));
    float hist[4] = {1, 1, 1, 1};
    CHECK_OK(ctx, f8_slot_write(ctx, s[1], NAN, 1.0f, hist));
    f8_checkpoint *ck = NULL;
    CHECK_OK(ctx, f8_checkpoint_create(ctx, &ck));
    CHECK(f8_checkpoint_add_attention(ck, "att", att) == F8_ERR_INVALID_ARGUMENT && has(ctx, "scale is nan"),
          "a NaN attention scale: %s", f8_ctx_last_error(ctx));
    CHECK(!f8_checkpoint_has(ck, "att.fp8.fwd.scale") && !f8_checkpoint_has(ck, "att.fp8.fwd.amax_history"),
          "nothing of the refused attention was added");
    CHECK_OK(ctx, f8_slot_write(ctx, s[1], 2.0f, 0.5f, hist));
    CHECK_OK(ctx, f8_checkpoint_add_attention(ck, "att", att));

    f8_linear_config lc = f8_linear_config_default(16, 16);
    f8_module *m = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &m));
    f8_slot ms;
    CHECK_OK(ctx, f8_module_slot(m, F8_DIR_BACKWARD, 0, &ms));
    hist[2] = -INFINITY;
    CHECK_OK(ctx, f8_slot_write(ctx, ms, 1.0f, 1.0f, hist));
    CHECK(f8_checkpoint_add_module(ck, "lin", m) == F8_ERR_INVALID_ARGUMENT && has(ctx, "lin.fp8.bwd.amax_history") &&
              has(ctx, "-inf"), "a -inf amax: %s", f8_ctx_last_error(ctx));
    CHECK(!f8_checkpoint_has(ck, "lin.weight"), "nothing of the refused module was added");
    hist[2] = 0;
    CHECK_OK(ctx, f8_slot_write(ctx, ms, 1.0f, 1.0f, hist));
    /* a NaN weight: restore_module refuses it, so add_module does */
    f8_tensor w;
    CHECK_OK(ctx, f8_module_param(m, F8_PARAM_WEIGHT, 0, &w));
    const float nan = NAN;
    CHECK_OK(ctx, f8_ctx_upload(ctx, (float *)w.data + 37, &nan, sizeof nan));
    CHECK(f8_checkpoint_add_module(ck, "lin", m) == F8_ERR_INVALID_ARGUMENT && has(ctx, "lin.weight") &&
              has(ctx, "element 37"), "a NaN weight: %s", f8_ctx_last_error(ctx));
    CHECK(!f8_checkpoint_has(ck, "lin.weight") && !f8_checkpoint_has(ck, "lin.bias"), "nothing of it was added");
    const float one = 1.0f;
    CHECK_OK(ctx, f8_ctx_upload(ctx, (float *)w.data + 37, &one, sizeof one));
    CHECK_OK(ctx, f8_checkpoint_add_module(ck, "lin", m));
    f8_checkpoint *back = NULL;
    char file[64];
    snprintf(file, sizeof file, "/tmp/f8_promises_%d.safetensors", (int)getpid());
    CHECK_OK(ctx, f8_checkpoint_save(ck, file));
    CHECK_OK(ctx, f8_checkpoint_load(ctx, file, &back));
    CHECK_OK(ctx, f8_checkpoint_restore_module(back, "lin", m)); /* what add stores, restore reads */
    CHECK_OK(ctx, f8_checkpoint_restore_attention(back, "att", att));
    f8_checkpoint_destroy(back);
    remove(file);

    /* NULL objects: the status, and the checkpoint's ctx says why */
    CHECK(f8_checkpoint_add_module(ck, "x", NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "module is NULL"), "add NULL module");
    CHECK(f8_checkpoint_restore_module(ck, "x", NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "module is NULL"),
          "restore NULL module");
    CHECK(f8_checkpoint_add_attention(ck, "x", NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "attention is NULL"),
          "add NULL attention");
    CHECK(f8_checkpoint_restore_attention(ck, "x", NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "attention is NULL"),
          "restore NULL attention");
    CHECK(f8_checkpoint_add_adamw(ck, "x", NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "optimizer is NULL"),
          "add NULL optimizer");
    CHECK(f8_checkpoint_restore_adamw(ck, "x", NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "optimizer is NULL"),
          "restore NULL optimizer");
    CHECK(f8_checkpoint_add_module(NULL, "x", NULL) == F8_ERR_INVALID_ARGUMENT, "both NULL");
    f8_checkpoint_destroy(ck);
    f8_module_destroy(m);
    f8_attention_destroy(att);
    f8_ctx_destroy(ctx);
}

static void module_calls(void)
{
    f8_ctx *ctx = make_ctx(F8_RECIPE_DELAYED);
    f8_linear_config lc = f8_linear_config_default(16, 16);
    lc.fuse_wgrad_accumulation = 1;
    f8_module *m = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &m));
    float *buf = NULL;
    CHECK_OK(ctx, f8_ctx_alloc(ctx, 64 * 16 * 4, (void **)&buf));
    static float zeros[64 * 16];
    CHECK_OK(ctx, f8_ctx_upload(ctx, buf, zeros, sizeof zeros));
    f8_tensor x = f8_tensor_make(buf, F8_DTYPE_FP32, 4, 16);
    f8_tensor same = x, part = f8_tensor_make(buf + 32, F8_DTYPE_FP32, 4, 16), apart = f8_tensor_make(buf + 64, F8_DTYPE_FP32, 4, 16);
    CHECK(f8_module_forward(m, &x, &same, F8_MICROBATCH_NONE, NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "overlaps"),
          "y is x: %s", f8_ctx_last_error(ctx));
    CHECK(f8_module_forward(m, &x, &part, F8_MICROBATCH_NONE, NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "overlaps"),
          "y over half of x: %s", f8_ctx_last_error(ctx));
    CHECK_OK(ctx, f8_module_forward(m, &x, &apart, F8_MICROBATCH_NONE, NULL));
    CHECK(f8_module_set_main_grad(m, F8_PARAM_WEIGHT, NULL) == F8_ERR_INVALID_ARGUMENT && has(ctx, "NULL"),
          "main_grad NULL: %s", f8_ctx_last_error(ctx));
    CHECK_OK(ctx, f8_module_set_main_grad(m, F8_PARAM_WEIGHT, buf + 128));
    f8_module_destroy(m);
    f8_ctx_free(ctx, buf);

    /* telemetry after slots exist, already on or not */
    f8_ctx *fresh = make_ctx(F8_RECIPE_DELAYED);
    CHECK_OK(fresh, f8_ctx_enable_telemetry(fresh));
    CHECK_OK(fresh, f8_ctx_enable_telemetry(fresh)); /* again before slots: still fine */
    CHECK_OK(fresh, f8_linear_create(fresh, &lc, &m));
    CHECK_STATUS(fresh, f8_ctx_enable_telemetry(fresh), F8_ERR_STATE);
    CHECK(f8_ctx_telemetry_enabled(fresh) == 1, "still on");
    f8_module_destroy(m);
    f8_ctx_destroy(fresh);
    f8_ctx_destroy(ctx);
}

static void recipes(void)
{
    char err[256] = "";
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *ctx = NULL;
    cc.recipe.reduce_amax = 7;
    CHECK(f8_ctx_create(&cc, &ctx, err, sizeof err) == F8_ERR_INVALID_ARGUMENT && !ctx && strstr(err, "reduce_amax is 7"),
          "reduce_amax 7: %s", err);
    cc.recipe.reduce_amax = 0;
    CHECK(f8_ctx_create(&cc, &ctx, err, sizeof err) == F8_OK, "reduce_amax 0: %s", err);
    f8_ctx_destroy(ctx);
    ctx = NULL;
    /* power_2_scales: CURRENT and BLOCK (the manual says so now), not DELAYED */
    const f8_recipe_kind kinds[3] = {F8_RECIPE_DELAYED, F8_RECIPE_CURRENT, F8_RECIPE_BLOCK};
    for (int k = 0; k < 3; k++) {
        cc = f8_ctx_config_default();
        cc.recipe.kind = kinds[k];
        cc.recipe.power_2_scales = 1;
        f8_status st = f8_ctx_create(&cc, &ctx, err, sizeof err);
        CHECK((st == F8_OK) == (k > 0), "power_2_scales with %s: %s", f8_recipe_kind_name(kinds[k]), err);
        f8_ctx_destroy(ctx);
        ctx = NULL;
    }
}

int main(void)
{
    sp_comm_failure();
    onnx_embedding_nan();
    checkpoint_nan_scale();
    module_calls();
    recipes();
    return test_finish("test_api_promises");
}
