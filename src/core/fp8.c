/*
 * fp8.c — the public scalar numerics: dtype facts, status names and the FP8 and
 * BF16 conversions. The conversions are thin wrappers over numerics.h so that
 * the host API, the CPU backend and the CUDA kernels share one arithmetic.
 */
#include "f8.h"
#include "core/numerics.h"

const char *f8_status_string(f8_status status)
{
    switch (status) {
    case F8_OK: return "F8_OK";
    case F8_ERR_INVALID_ARGUMENT: return "F8_ERR_INVALID_ARGUMENT";
    case F8_ERR_SHAPE: return "F8_ERR_SHAPE";
    case F8_ERR_DTYPE: return "F8_ERR_DTYPE";
    case F8_ERR_STATE: return "F8_ERR_STATE";
    case F8_ERR_OUT_OF_MEMORY: return "F8_ERR_OUT_OF_MEMORY";
    case F8_ERR_NO_DEVICE: return "F8_ERR_NO_DEVICE";
    case F8_ERR_CUDA: return "F8_ERR_CUDA";
    case F8_ERR_CUBLAS: return "F8_ERR_CUBLAS";
    case F8_ERR_UNSUPPORTED: return "F8_ERR_UNSUPPORTED";
    case F8_ERR_IO: return "F8_ERR_IO";
    case F8_ERR_COMM: return "F8_ERR_COMM";
    }
    /* Not `default:`, so that -Wswitch names a code added without a name. */
    return "F8_ERR_UNKNOWN";
}

size_t f8_dtype_size(f8_dtype dtype)
{
    switch (dtype) {
    case F8_DTYPE_FP32: return 4;
    case F8_DTYPE_BF16: return 2;
    case F8_DTYPE_E4M3:
    case F8_DTYPE_E5M2: return 1;
    }
    return 0;
}

const char *f8_dtype_name(f8_dtype dtype)
{
    switch (dtype) {
    case F8_DTYPE_FP32: return "fp32";
    case F8_DTYPE_BF16: return "bf16";
    case F8_DTYPE_E4M3: return "e4m3";
    case F8_DTYPE_E5M2: return "e5m2";
    }
    return "unknown";
}

float f8_fp8_max(f8_dtype dtype)
{
    switch (dtype) {
    case F8_DTYPE_E4M3: return 448.0f;
    case F8_DTYPE_E5M2: return 57344.0f;
    case F8_DTYPE_FP32:
    case F8_DTYPE_BF16: break;
    }
    return 0.0f;
}

uint8_t f8_fp8_from_float(float x, f8_dtype dtype)
{
    if (dtype == F8_DTYPE_E4M3) return f8i_fp8_encode(x, 0);
    if (dtype == F8_DTYPE_E5M2) return f8i_fp8_encode(x, 1);
    return 0x7F; /* a NaN code in both formats */
}

float f8_fp8_to_float(uint8_t bits, f8_dtype dtype)
{
    if (dtype == F8_DTYPE_E4M3) return f8i_fp8_decode(bits, 0);
    if (dtype == F8_DTYPE_E5M2) return f8i_fp8_decode(bits, 1);
    return NAN;
}

uint16_t f8_bf16_from_float(float x) { return f8i_bf16_from_float(x); }

float f8_bf16_to_float(uint16_t bits) { return f8i_bf16_to_float(bits); }
