/*
 * test_fused_grad_memory.c — a module made with fuse_wgrad_accumulation holds
 * no param_dtype gradient of its GEMM weights (their gradient is the caller's
 * FP32 main_grad): against the same module made without it, the gradient
 * bytes it holds, and the ctx's total, drop by exactly the weights' elements
 * times the param dtype's size (2 bytes an element with BF16 parameters), and
 * nothing else changes. The biases' and norm parameters' gradients stay.
 * Oracle: the weights' element counts from the configs (shapes chosen so
 * every buffer is a multiple of the 256-byte allocation granule).
 */
#include "check.h"

enum { KIND_LINEAR, KIND_LN_LINEAR, KIND_LN_MLP, KIND_COUNT };
static const char *const kind_names[KIND_COUNT] = {"Linear", "LayerNormLinear", "LayerNormMLP"};

enum { IN = 64, OUT = 128, FFN = 256 };

/* GEMM weight elements of a kind: W [OUT, IN], or fc1 [FFN, IN] + fc2 [IN, FFN]. */
static int64_t weight_elements(int kind) { return kind == KIND_LN_MLP ? 2 * (int64_t)FFN * IN : (int64_t)OUT * IN; }

static f8_module *make(f8_ctx *ctx, int kind, f8_dtype dt, int fp8, int bias, int fused)
{
    f8_module *m = NULL;
    f8_status st;
    if (kind == KIND_LINEAR) {
        f8_linear_config c = f8_linear_config_default(IN, OUT);
        c.param_dtype = dt, c.fp8 = fp8, c.bias = bias, c.fuse_wgrad_accumulation = fused, c.max_tokens = 32;
        st = f8_linear_create(ctx, &c, &m);
    } else if (kind == KIND_LN_LINEAR) {
        f8_layernorm_linear_config c = f8_layernorm_linear_config_default(IN, OUT);
        c.param_dtype = dt, c.fp8 = fp8, c.bias = bias, c.fuse_wgrad_accumulation = fused, c.max_tokens = 32;
        st = f8_layernorm_linear_create(ctx, &c, &m);
    } else {
        f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(IN, FFN);
        c.param_dtype = dt, c.fp8 = fp8, c.bias = bias, c.fuse_wgrad_accumulation = fused, c.max_tokens = 32;
        st = f8_layernorm_mlp_create(ctx, &c, &m);
    }
    CHECK(st == F8_OK, "%s create: %s", kind_names[kind], f8_ctx_last_error(ctx));
    return st == F8_OK ? m : NULL;
}

/* What a module holds (its own report) and what its ctx holds with it, on a
 * fresh ctx (the ctx's scaling buffer and scratch grow with the first
 * modules and keep their size: a ctx of its own measures each alike). */
static void held(int kind, f8_dtype dt, int fp8, int bias, int fused, f8_memory_report *mod, f8_memory_report *all)
{
    memset(mod, 0, sizeof *mod), memset(all, 0, sizeof *all);
    f8_ctx_config cc = f8_ctx_config_default();
    f8_ctx *ctx = NULL;
    char err[256];
    if (f8_ctx_create(&cc, &ctx, err, sizeof err) != F8_OK) {
        fprintf(stderr, "ctx: %s\n", err);
        exit(1);
    }
    f8_module *m = make(ctx, kind, dt, fp8, bias, fused);
    if (m) {
        CHECK_OK(ctx, f8_module_memory(m, mod));
        CHECK_OK(ctx, f8_ctx_memory(ctx, all));
    }
    f8_module_destroy(m);
    f8_ctx_destroy(ctx);
}

static void compare(int kind, f8_dtype dt, int fp8, int bias)
{
    f8_memory_report m0, a0, m1, a1;
    held(kind, dt, fp8, bias, 0, &m0, &a0);
    held(kind, dt, fp8, bias, 1, &m1, &a1);
    const size_t drop = (size_t)weight_elements(kind) * f8_dtype_size(dt);
    const char *what = kind_names[kind];
    CHECK(m0.bytes[F8_MEM_GRADIENTS] - m1.bytes[F8_MEM_GRADIENTS] == drop && m1.bytes[F8_MEM_GRADIENTS] < m0.bytes[F8_MEM_GRADIENTS],
          "%s %s fp8 %d bias %d: gradients %zu -> %zu bytes, expected a drop of %zu", what, f8_dtype_name(dt), fp8, bias,
          m0.bytes[F8_MEM_GRADIENTS], m1.bytes[F8_MEM_GRADIENTS], drop);
    CHECK(m0.total - m1.total == drop && a0.total - a1.total == drop,
          "%s %s fp8 %d bias %d: module total drops %zu, ctx total %zu, expected %zu", what, f8_dtype_name(dt), fp8,
          bias, m0.total - m1.total, a0.total - a1.total, drop);
    int others = 1;
    for (int k = 0; k < F8_MEM_COUNT; k++)
        if (k != F8_MEM_GRADIENTS) others &= m0.bytes[k] == m1.bytes[k] && a0.bytes[k] == a1.bytes[k];
    CHECK(others, "%s %s fp8 %d bias %d: another category changed with fuse_wgrad_accumulation", what,
          f8_dtype_name(dt), fp8, bias);
    /* what stays: the biases' and the norm's gradients (a Linear without a bias holds none) */
    if (kind == KIND_LINEAR && !bias)
        CHECK(m1.bytes[F8_MEM_GRADIENTS] == 0, "fused Linear without a bias holds %zu gradient bytes",
              m1.bytes[F8_MEM_GRADIENTS]);
    else
        CHECK(m1.bytes[F8_MEM_GRADIENTS] > 0, "%s %s bias %d: the bias and norm gradients are gone", what,
              f8_dtype_name(dt), bias);
}

int main(void)
{
    const f8_dtype dts[2] = {F8_DTYPE_BF16, F8_DTYPE_FP32};
    for (int kind = 0; kind < KIND_COUNT; kind++)
        for (int d = 0; d < 2; d++)
            for (int fp8 = 0; fp8 <= 1; fp8++)
                for (int bias = 0; bias <= 1; bias++) compare(kind, dts[d], fp8, bias);
    return test_finish("test_fused_grad_memory");
}
