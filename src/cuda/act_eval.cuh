/*
 * act_eval.cuh — the activations' elementwise arithmetic on the GPU
 * (act_eval: f and f' of each f8_activation) and the facts the kernels
 * share about them (act_gated), in one place so that every kernel that
 * evaluates an activation gets the same bits: the activation kernels
 * (act_kernels.cuh) and the row-wise cast's column pass, which codes the
 * activation forward's column-wise copy by computing act(x) again instead
 * of reading back a stored copy of it (rowwise_cast.cu). Both are built
 * with the same -fmad=false, so the same source gives the same results.
 */
#ifndef F8_CUDA_ACT_EVAL_CUH
#define F8_CUDA_ACT_EVAL_CUH

#include "f8.h"

#define GELU_K 0.79788456f  /* sqrt(2/pi), as f8.h writes it */
#define GELU_C 0.044715f
#define QGELU_K 1.702f

static __host__ __device__ constexpr int act_gated(int act)
{
    return act == F8_ACT_GEGLU || act == F8_ACT_REGLU || act == F8_ACT_SWIGLU;
}

/* 2^z and 1/y on the special-function unit: ex2.approx (2 ulp) and
 * rcp.approx (1 ulp), both flushing subnormal results to 0; 2^z is +inf
 * for large z and 1/inf is 0, which the formulas below rely on. */
static __device__ __forceinline__ float exp2_sfu(float z)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(z));
    return r;
}

static __device__ __forceinline__ float rcp_sfu(float y)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
    return r;
}

#define LOG2E 1.44269504f

/* σ(a·x) = 1 / (1 + 2^(-a·log2(e)·x)), nl = -a·log2(e). */
static __device__ __forceinline__ float sigmoid_scaled(float x, float nl) { return rcp_sfu(1.0f + exp2_sfu(nl * x)); }

/* f = act(x) and/or df = act'(x) (pass NULL for the one not wanted; the gated
 * ones: the function applied to a). With t = tanh(u), u = k(x + c·x³):
 *   gelu  = 0.5x(1 + t)          gelu'  = 0.5(1 + t) + 0.5x(1 - t²)·k(1 + 3c·x²)
 *   relu  = max(x, 0)            relu'  = [x > 0]            (0 at the kink)
 *   silu  = x·s, s = σ(x)        silu'  = s + x·s(1 - s)
 *   qgelu = x·s, s = σ(1.702x)   qgelu' = s + 1.702x·s(1 - s)
 *   srelu = max(x, 0)²           srelu' = 2·max(x, 0)
 * tanh(u) for GELU is 2σ(2u) - 1, σ(a) = 1/(1 + 2^(-a·log2(e))), on the
 * special-function unit (exp2_sfu, rcp_sfu) instead of tanhf, whose
 * polynomial and IEEE steps ran the GELU forward at 56% of copy bandwidth,
 * bound by its arithmetic; σ is within a few ulps. u is computed exactly as
 * the CPU oracle does, and t, rounded to FP32 like any tanhf, then goes
 * through the oracle's own formulas: where t → -1 the oracle's 1 + t cancels
 * and is quantised to steps of 2^-24, and only the same FP32 t reproduces
 * that (an exact x·σ(2u) disagreed with it in 3% of BF16 codes; matching
 * costs the GELU forward 69% of copy bandwidth against 83%). SiLU and
 * QGELU use σ directly, as the oracle does (1/(1 + expf(-x))). For large
 * negative x, 2^z overflows to inf and 1/(1 + inf) = 0, as libm's forms give.
 * Every act(0) is 0, so the zeros padding a piece add nothing. */
template <int ACT>
static __device__ __forceinline__ void act_eval(float x, float *f, float *df)
{
    if constexpr (ACT == F8_ACT_GELU || ACT == F8_ACT_GEGLU) {
        const float x2 = x * x;
        const float u = GELU_K * (x + GELU_C * (x2 * x));
        const float t = __fmaf_rn(2.0f, sigmoid_scaled(u, -2.0f * LOG2E), -1.0f); /* 2σ(2u) - 1, one rounding */
        if (f) *f = 0.5f * x * (1.0f + t);
        /* 0.5(1 + t) as one fma: halving is exact and commutes with the
         * rounding, so the bits are those of 0.5f * (1.0f + t) (checked for
         * every FP32 t), one instruction fewer. */
        if (df) *df = __fmaf_rn(0.5f, t, 0.5f) + 0.5f * x * (1.0f - t * t) * (GELU_K * (1.0f + 3.0f * GELU_C * x2));
    } else if constexpr (ACT == F8_ACT_RELU || ACT == F8_ACT_REGLU) {
        if (f) *f = x > 0.0f ? x : 0.0f;
        if (df) *df = x > 0.0f ? 1.0f : 0.0f;
    } else if constexpr (ACT == F8_ACT_SWIGLU) {
        const float s = sigmoid_scaled(x, -LOG2E);
        if (f) *f = x * s;
        if (df) *df = s + x * s * (1.0f - s);
    } else if constexpr (ACT == F8_ACT_QGELU) {
        const float s = sigmoid_scaled(x, -QGELU_K * LOG2E);
        if (f) *f = x * s;
        if (df) *df = s + QGELU_K * x * s * (1.0f - s);
    } else {
        static_assert(ACT == F8_ACT_SRELU, "an f8_activation");
        const float p = x > 0.0f ? x : 0.0f;
        if (f) *f = p * p;
        if (df) *df = x > 0.0f ? 2.0f * x : 0.0f;
    }
}

#endif /* F8_CUDA_ACT_EVAL_CUH */
