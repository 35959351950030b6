/*
 * f8.h — the whole public API of f8, a C11 library for training transformers in
 * FP8 on NVIDIA GPUs (with a complete CPU reference backend).
 *
 * This header is the manual. It is pure C11: no CUDA or C++ headers.
 *
 * Conventions used throughout:
 *  - Every fallible function returns f8_status; F8_OK is 0. On any error the
 *    call changes nothing, and f8_ctx_last_error() holds a sentence naming the
 *    argument and shape at fault. The library never exits, aborts or prints.
 *  - "Backend memory" is host memory for a CPU ctx and device memory for a CUDA
 *    ctx. Every data pointer handed to f8 (tensor data, scale_inv, noop flags,
 *    main_grad) is backend memory of the ctx it is used with. f8_ctx_alloc and
 *    friends move bytes in and out of it.
 *  - Matrices are row-major 2-D: a [rows, cols] tensor stores element (r, c) at
 *    r * cols + c. Callers flatten leading dimensions into rows.
 *  - Work on a CUDA ctx is asynchronous on the ctx's stream unless a function
 *    says it synchronizes. Host reads of results go through f8_ctx_download
 *    (which synchronizes).
 *  - destroy(NULL) is a no-op. A ctx must outlive every object made from it.
 *  - A ctx and the objects made from it are not thread-safe: use one ctx per
 *    host thread (or lock around it).
 *
 * The one rule: scale belongs to the recipe, scale_inv belongs to the data. An
 * FP8 tensor carries its own scale_inv, written by the same kernel that writes
 * its bytes; every dequantize and GEMM reads the operand's own scale_inv.
 */
#ifndef F8_H
#define F8_H

/* The API by topic (each header holds the contracts of its calls): */
#include "f8/core.h"   /* status, dtypes and FP8 numerics, recipes, ctx, tensors, slots, telemetry,
                          quantized tensors, memory, graphs */
#include "f8/comm.h"   /* communicators */
#include "f8/layers.h" /* modules, FP8 primary weights */
#include "f8/blocks.h" /* embedding, attention, rotary embeddings, cross-entropy, AdamW */
#include "f8/io.h"     /* checkpoints, ONNX export */

#endif /* F8_H */
