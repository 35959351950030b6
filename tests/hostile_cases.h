/*
 * hostile_cases.h — the hostile-input program, one body for both backends
 * (test_hostile.c runs it on a CPU ctx, test_cuda_hostile.c on a CUDA one).
 *
 * Every public entry point of f8.h is called with what a careless or hostile
 * caller would pass: NULLs, bad enums, wrong shapes and dtypes, dimensions
 * whose products overflow ([2^62+1, 4], [2^32, 2^32]), SIZE_MAX sizes, and
 * state misuse (backward before forward or twice, the saved state of another
 * module, capture misuse). Each case is a row of a table: a call, the status
 * it must return and a word its message must contain. Around every call the
 * harness takes a snapshot of everything a caller can observe (an FNV-1a hash
 * per section: parameters, gradients, weight workspaces with their scale_inv
 * and transposes, every scaling slot, the user buffers, the memory reports,
 * the counters, and the optimizer, qtensor, checkpoint and capture state)
 * and asserts: the status; a fresh message (a known one is put in the ctx
 * first, and it must be replaced by a non-empty one naming the call or the
 * argument, never an internal f8i_ function); and an unchanged snapshot.
 *
 * The defects of issue 13 each have a case that failed on the old code:
 *  1 f8_ctx_alloc of SIZE_MAX returned F8_OK (rounding wrapped to 0);
 *  2 [2^62+1, ...] views were undefined behaviour, f8_tensor_zero of
 *    [2^62+1, 4] and zero/fill_normal of [2^32, 2^32] returned F8_OK;
 *  3 a failing create (in = out = 2^24) left slots registered (3 retries);
 *  4 add_module after "m.bias" exists added "m.weight" first;
 *  5 "expected [T, 0, 64]", and NULL outputs of f8_ctx_memory /
 *    f8_ctx_counters_read failed without a message.
 *
 * The fixture and snapshot are in hostile_fixture.h, the cases in
 * hostile_ctx_cases.h and hostile_module_cases.h; this file is the harness.
 */
#ifndef F8_TESTS_HOSTILE_CASES_H
#define F8_TESTS_HOSTILE_CASES_H

#include "hostile_ctx_cases.h"
#include "hostile_module_cases.h"

/* ---- the harness ---------------------------------------------------------------- */

/* Put a known message in the ctx, so a failing call must replace it. */
static void sentinel(fx *f, char *copy, size_t n)
{
    f8_slot s;
    (void)f8_ctx_slots_create(f->ctx, (f8_direction)77, 1, &s);
    snprintf(copy, n, "%s", f8_ctx_last_error(f->ctx));
}

static void run_case(fx *f, const hcase *c)
{
    snap before = snapshot(f);
    char known[512], msg[512];
    sentinel(f, known, sizeof known);
    f->noted = 0;
    const f8_status st = c->call(f);
    snprintf(msg, sizeof msg, "%s", f->noted ? f->note : f8_ctx_last_error(f->ctx));
    snap after = snapshot(f);
    CHECK(st == c->want, "%s: %s, wanted %s (%s)", c->name, f8_status_string(st), f8_status_string(c->want), msg);
    if (c->needle) {
        CHECK(msg[0] && strcmp(msg, known) != 0, "%s: no fresh message (still '%s')", c->name, msg);
        CHECK(strstr(msg, c->needle) != NULL, "%s: message '%s' does not contain '%s'", c->name, msg, c->needle);
        CHECK(strstr(msg, "f8i_") == NULL, "%s: message '%s' names an internal function", c->name, msg);
    }
    CHECK(before.ok && after.ok, "%s: a snapshot read failed (%s)", c->name, f8_ctx_last_error(f->ctx));
    /* A create that fails may have allocated and freed (the counters count
     * what was done); everything else must be as it was. */
    const int counters_move = c->call == c_create_oom_retry || c->call == c_mlp_oom_retry;
    for (int i = 0; i < S_COUNT; i++)
        CHECK(before.h[i] == after.h[i] || (i == S_COUNTERS && counters_move), "%s: the %s changed", c->name, S_NAME[i]);
}

/* Calls that have no ctx to report to: the pure helpers and f8_ctx_create. */
static void test_pure_and_create(f8_backend backend)
{
    CHECK(strcmp(f8_status_string((f8_status)99), "F8_ERR_UNKNOWN") == 0, "status string of 99");
    CHECK(f8_dtype_size((f8_dtype)7) == 0 && strcmp(f8_dtype_name((f8_dtype)-2), "unknown") == 0, "unknown dtype");
    CHECK(f8_fp8_max(F8_DTYPE_BF16) == 0.0f && f8_fp8_from_float(1.0f, F8_DTYPE_FP32) == 0x7F, "fp8 of a non-FP8 dtype");
    CHECK(isnan(f8_fp8_to_float(0x38, (f8_dtype)9)), "fp8_to_float of dtype 9");
    CHECK(strcmp(f8_mem_category_name((f8_mem_category)-1), "unknown") == 0, "mem category -1");
    CHECK(strcmp(f8_param_name((f8_param)8), "unknown") == 0 && f8_activation_gated((f8_activation)-1) == 0, "enums");
    CHECK(f8_scale_from_amax(NAN, 2.0f, 448.0f, 0) == 2.0f, "scale_from_amax NaN keeps the scale");
    CHECK(f8_ctx_last_error(NULL) != NULL && f8_ctx_recipe(NULL) == NULL && f8_ctx_stream(NULL) == NULL &&
              f8_ctx_noop_flag(NULL) == NULL && f8_ctx_capturing(NULL) == 0 && f8_module_weight_workspace(NULL, 0) == NULL &&
              f8_qtensor_transpose_valid(NULL) == 0 && f8_checkpoint_has(NULL, "x") == 0,
          "accessors of NULL");
    f8_module_destroy(NULL), f8_saved_destroy(NULL), f8_qtensor_destroy(NULL), f8_graph_destroy(NULL);
    f8_attention_destroy(NULL), f8_attention_saved_destroy(NULL), f8_adamw_destroy(NULL), f8_checkpoint_destroy(NULL);
    f8_ctx_destroy(NULL);

    struct {
        const char *name;
        int what;
        f8_status want;
        const char *needle;
    } bad[] = {
        {"NULL config", 0, F8_ERR_INVALID_ARGUMENT, "config"},    {"backend 5", 1, F8_ERR_INVALID_ARGUMENT, "backend"},
        {"history 0", 2, F8_ERR_INVALID_ARGUMENT, "amax_history_len"}, {"format 2", 3, F8_ERR_INVALID_ARGUMENT, "format"},
        {"margin 1000", 4, F8_ERR_INVALID_ARGUMENT, "margin"},    {"algo -1", 5, F8_ERR_INVALID_ARGUMENT, "amax_compute_algo"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f8_ctx_config cfg = f8_ctx_config_default();
        cfg.backend = backend;
        if (bad[i].what == 1) cfg.backend = (f8_backend)5;
        if (bad[i].what == 2) cfg.recipe.amax_history_len = 0;
        if (bad[i].what == 3) cfg.recipe.format = (f8_format)2;
        if (bad[i].what == 4) cfg.recipe.margin = 1000;
        if (bad[i].what == 5) cfg.recipe.amax_compute_algo = (f8_amax_algo)-1;
        f8_ctx *ctx = (f8_ctx *)&cfg;
        char why[256] = "";
        f8_status st = f8_ctx_create(bad[i].what ? &cfg : NULL, &ctx, why, sizeof why);
        CHECK(st == bad[i].want && ctx == NULL, "ctx_create %s: %s", bad[i].name, f8_status_string(st));
        CHECK(strstr(why, bad[i].needle) != NULL, "ctx_create %s: message '%s'", bad[i].name, why);
        if (st == F8_OK) f8_ctx_destroy(ctx);
    }
    char tiny[4] = "xyz";
    f8_ctx_config cfg = f8_ctx_config_default();
    CHECK(f8_ctx_create(&cfg, NULL, tiny, sizeof tiny) == F8_ERR_INVALID_ARGUMENT && strlen(tiny) == 3,
          "ctx_create NULL out: message truncated to the buffer");
}

/* The whole program, on one backend. */
static int hostile_main(const char *name, f8_backend backend)
{
    char why[256] = "";
    fx f;
    f8_status st = fixture_create(&f, backend, why);
    if (st == F8_ERR_NO_DEVICE) return test_skip(name, why);
    if (st != F8_OK) {
        fprintf(stderr, "%s: no ctx: %s (%s)\n", name, f8_status_string(st), why);
        return 1;
    }
    test_pure_and_create(backend);
    const size_t n_ctx = sizeof CTX_CASES / sizeof CTX_CASES[0], n_module = sizeof MODULE_CASES / sizeof MODULE_CASES[0];
    for (size_t i = 0; i < n_ctx; i++) run_case(&f, &CTX_CASES[i]);
    for (size_t i = 0; i < n_module; i++) run_case(&f, &MODULE_CASES[i]);
    /* The fixture still works after all of it: one more Linear step. */
    f8_tensor x = X32(&f), y = Y32(&f), dy = tview(&f, B_DY, F8_DTYPE_FP32, H_T, H_N);
    CHECK_OK(f.ctx, f8_module_forward(f.lin, &x, &y, F8_MICROBATCH_NOT_FIRST, f.s_used));
    CHECK_OK(f.ctx, f8_module_backward(f.lin, f.s_used, &dy, NULL));
    printf("%s: %zu hostile calls, each with its status, message and a snapshot of %d sections\n", name,
           n_ctx + n_module, S_COUNT);
    fixture_destroy(&f);
    return test_finish(name);
}

#endif /* F8_TESTS_HOSTILE_CASES_H */
