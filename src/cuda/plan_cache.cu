/*
 * plan_cache.cu — the CUDA backend's plan cache (plan_cache.cuh is the
 * manual).
 *
 * Design note. One hash table per ctx of heap-allocated entries, each one
 * allocation laid out [f8i_plan | key | body], chained per bucket: a lookup
 * hashes the key (FNV-1a, with the kind's address mixed in), walks one
 * short chain and compares kind, length and bytes. Entries never move, so
 * an owner may hold a plan pointer across later builds (the padded GEMM
 * holds two). The table doubles when it holds as many entries as buckets.
 * A few dozen to a few hundred plans per ctx are normal (shapes x modes x
 * alignment classes); every one is built once.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_state.cuh"
#include "plan_cache.cuh"

#define PC_BUCKETS0 64 /* buckets of a new table (a power of two) */
#define PC_ALIGN 16    /* the body's alignment inside an entry */

struct f8i_plan_cache {
    f8i_plan **buckets; /* (n_buckets) heads of the chains */
    size_t n_buckets, count;
};

static uint64_t key_hash(const f8i_plan_kind *kind, const void *key, size_t bytes)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)kind;
    const unsigned char *p = (const unsigned char *)key;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static unsigned char *entry_key(f8i_plan *p) { return (unsigned char *)(p + 1); }

static size_t body_offset(size_t key_bytes)
{
    return (sizeof(f8i_plan) + key_bytes + PC_ALIGN - 1) / PC_ALIGN * PC_ALIGN;
}

int f8i_cuda_capturing(f8_ctx *ctx)
{
    if (ctx->capturing) return 1;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(f8i_stream(ctx), &cs) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return cs != cudaStreamCaptureStatusNone;
}

f8_status f8i_plan_cache_create(f8_ctx *ctx)
{
    f8i_plan_cache *c = (f8i_plan_cache *)calloc(1, sizeof *c);
    if (c) c->buckets = (f8i_plan **)calloc(PC_BUCKETS0, sizeof *c->buckets);
    if (!c || !c->buckets) {
        free(c);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "plan cache: no host memory for its table");
    }
    c->n_buckets = PC_BUCKETS0;
    f8i_cuda(ctx)->plans = c;
    return F8_OK;
}

static void entry_free(f8_ctx *ctx, f8i_plan *p)
{
    if (p->kind->release) p->kind->release(ctx, p->body);
    if (p->buf) (void)cudaFree(p->buf);
    free(p);
}

void f8i_plan_cache_destroy(f8_ctx *ctx)
{
    if (!ctx || !ctx->be_state) return;
    f8i_plan_cache *c = f8i_cuda(ctx)->plans;
    if (!c) return;
    for (size_t b = 0; b < c->n_buckets; b++)
        for (f8i_plan *p = c->buckets[b], *next; p; p = next) {
            next = p->next;
            entry_free(ctx, p);
        }
    free(c->buckets);
    free(c);
    f8i_cuda(ctx)->plans = NULL;
    (void)cudaGetLastError();
}

static f8i_plan *lookup(const f8i_plan_cache *c, const f8i_plan_kind *kind, const void *key, size_t bytes, uint64_t h)
{
    for (f8i_plan *p = c->buckets[h & (c->n_buckets - 1)]; p; p = p->next)
        if (p->hash == h && p->kind == kind && p->key_bytes == bytes && memcmp(entry_key(p), key, bytes) == 0) return p;
    return NULL;
}

f8i_plan *f8i_plan_find(f8_ctx *ctx, const f8i_plan_kind *kind, const void *key, size_t key_bytes)
{
    const f8i_plan_cache *c = f8i_cuda(ctx)->plans;
    return c ? lookup(c, kind, key, key_bytes, key_hash(kind, key, key_bytes)) : NULL;
}

/* Double the buckets (a failed grow keeps the old table: chains get longer). */
static void grow(f8i_plan_cache *c)
{
    const size_t n = c->n_buckets * 2;
    f8i_plan **nb = (f8i_plan **)calloc(n, sizeof *nb);
    if (!nb) return;
    for (size_t b = 0; b < c->n_buckets; b++)
        for (f8i_plan *p = c->buckets[b], *next; p; p = next) {
            next = p->next;
            p->next = nb[p->hash & (n - 1)];
            nb[p->hash & (n - 1)] = p;
        }
    free(c->buckets);
    c->buckets = nb;
    c->n_buckets = n;
}

/* "kind (shape)" for messages. */
static void name_of(const f8i_plan_kind *kind, const void *arg, char *out, size_t size)
{
    char shape[160] = "";
    if (kind->describe) kind->describe(arg, shape, sizeof shape);
    snprintf(out, size, "%s%s%s%s", kind->name, shape[0] ? " (" : "", shape, shape[0] ? ")" : "");
}

static f8_status capture_refusal(f8_ctx *ctx, const f8i_plan_kind *kind, const void *arg, const char *why)
{
    char who[256];
    name_of(kind, arg, who, sizeof who);
    return f8i_capture_spoil(ctx, f8i_error(ctx, F8_ERR_STATE,
                                            "%s: a new plan is needed while a graph is captured, and %s; run one "
                                            "eager step of this shape before f8_graph_begin",
                                            who, why));
}

f8_status f8i_plan_get(f8_ctx *ctx, const f8i_plan_kind *kind, const void *key, size_t key_bytes, const void *arg,
                       f8i_plan **out)
{
    *out = NULL;
    f8i_plan_cache *c = f8i_cuda(ctx)->plans;
    if (!c) return f8i_error(ctx, F8_ERR_STATE, "%s: the CUDA state has no plan cache", kind->name);
    const uint64_t h = key_hash(kind, key, key_bytes);
    f8i_plan *p = lookup(c, kind, key, key_bytes, h);
    if (p) {
        *out = p;
        return F8_OK;
    }
    const int capturing = f8i_cuda_capturing(ctx);
    if (capturing && !kind->capture_build)
        return capture_refusal(ctx, kind, arg, "building one calls into a library that may not run during a capture");

    const size_t off = body_offset(key_bytes);
    p = (f8i_plan *)calloc(1, off + kind->body_bytes);
    if (!p) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: no host memory for a plan", kind->name);
    p->kind = kind;
    p->body = (unsigned char *)p + off;
    p->hash = h;
    p->key_bytes = key_bytes;
    memcpy(entry_key(p), key, key_bytes);
    size_t buf_bytes = 0;
    f8_status st = kind->build(ctx, p->body, arg, &buf_bytes);
    if (st == F8_OK && buf_bytes > 0 && capturing)
        st = capture_refusal(ctx, kind, arg, "it needs device memory of its own");
    if (st == F8_OK && buf_bytes > 0) {
        const cudaError_t err = cudaMalloc(&p->buf, buf_bytes);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            p->buf = NULL;
            char who[256];
            name_of(kind, arg, who, sizeof who);
            st = f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: cudaMalloc of the plan's %zu-byte buffer failed: %s", who,
                           buf_bytes, cudaGetErrorString(err));
        }
        p->buf_bytes = buf_bytes;
    }
    if (st != F8_OK) {
        entry_free(ctx, p);
        return st;
    }
    if (c->count >= c->n_buckets) grow(c);
    f8i_plan **head = &c->buckets[h & (c->n_buckets - 1)];
    p->next = *head;
    *head = p;
    c->count++;
    *out = p;
    return F8_OK;
}

void f8i_plan_each(f8_ctx *ctx, const f8i_plan_kind *kind, void (*fn)(void *body, void *user), void *user)
{
    const f8i_plan_cache *c = f8i_cuda(ctx)->plans;
    if (!c) return;
    for (size_t b = 0; b < c->n_buckets; b++)
        for (f8i_plan *p = c->buckets[b]; p; p = p->next)
            if (p->kind == kind) fn(p->body, user);
}
