/*
 * comm_cpu.c — in-process CPU ranks: the oracle every parallel code path is
 * tested against, without GPUs.
 *
 * Design note. The ranks are host threads of one process, each with its own
 * CPU ctx, so every rank can read every other rank's (host) backend memory.
 * A collective is two barriers of the shared group: at the first, each rank
 * has posted its call (kind, counts, pointers); between them each rank
 * computes ITS OWN result from all ranks' sources into a private buffer;
 * after the second (nobody reads sources any more) it copies that buffer to
 * its destination. So in-place calls are safe, and no rank writes memory
 * another rank may still read. Reductions add rank 0 + rank 1 + ... in that
 * order, left to right in FP32: every rank gets the same bits, and they equal
 * a sum one rank computes in the same order.
 *
 * Failure instead of a hang: a rank that leaves (destroys its comm, e.g.
 * after an error), a local failure inside a collective and ranks whose calls
 * disagree all mark the group broken; every rank waiting at a barrier, or
 * arriving at one later, returns F8_ERR_COMM saying why.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

typedef struct post {
    f8i_collective_args a;
} post;

struct f8_comm_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size;
    int arrived;            /* ranks at the current barrier */
    unsigned long long gen; /* barriers completed */
    int broken;             /* 1: every later collective fails */
    char why[256];          /* the reason, for the message */
    unsigned char *joined;  /* (size) */
    post *posts;            /* (size) each rank's current call */
};

typedef struct cpu_state {
    f8_comm_group *g;
    unsigned char *tmp;     /* this rank's result before it is copied out */
    size_t tmp_bytes;
} cpu_state;

f8_status f8_comm_group_create(int size, f8_comm_group **out, char *error, size_t error_size)
{
    if (!out) {
        if (error && error_size) snprintf(error, error_size, "f8_comm_group_create: group (the output) is NULL");
        return F8_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (size < 1 || size > 1024) {
        if (error && error_size) snprintf(error, error_size, "f8_comm_group_create: size %d outside [1, 1024]", size);
        return F8_ERR_INVALID_ARGUMENT;
    }
    f8_comm_group *g = (f8_comm_group *)calloc(1, sizeof *g);
    if (g) {
        g->joined = (unsigned char *)calloc((size_t)size, 1);
        g->posts = (post *)calloc((size_t)size, sizeof *g->posts);
    }
    if (!g || !g->joined || !g->posts || pthread_mutex_init(&g->mu, NULL) != 0) {
        if (g) free(g->joined), free(g->posts);
        free(g);
        if (error && error_size) snprintf(error, error_size, "f8_comm_group_create: out of host memory");
        return F8_ERR_OUT_OF_MEMORY;
    }
    if (pthread_cond_init(&g->cv, NULL) != 0) {
        pthread_mutex_destroy(&g->mu);
        free(g->joined), free(g->posts), free(g);
        if (error && error_size) snprintf(error, error_size, "f8_comm_group_create: pthread_cond_init failed");
        return F8_ERR_OUT_OF_MEMORY;
    }
    g->size = size;
    *out = g;
    return F8_OK;
}

void f8_comm_group_destroy(f8_comm_group *g)
{
    if (!g) return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->joined);
    free(g->posts);
    free(g);
}

/* Mark the group broken (lock held) and wake every waiter. */
static void break_locked(f8_comm_group *g, const char *why)
{
    if (!g->broken) snprintf(g->why, sizeof g->why, "%s", why);
    g->broken = 1;
    pthread_cond_broadcast(&g->cv);
}

void f8_comm_group_abort(f8_comm_group *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    break_locked(g, "the group was aborted (a rank failed before it joined)");
    pthread_mutex_unlock(&g->mu);
}

static f8_status fail(f8_comm *c, const char *why)
{
    cpu_state *s = (cpu_state *)c->state;
    pthread_mutex_lock(&s->g->mu);
    break_locked(s->g, why);
    pthread_mutex_unlock(&s->g->mu);
    return f8i_error(c->ctx, F8_ERR_COMM, "CPU comm rank %d: %s", c->rank, why);
}

/* Wait until every rank has arrived; with `a`, post this rank's call first. */
static f8_status barrier(f8_comm *c, const f8i_collective_args *a)
{
    f8_comm_group *g = ((cpu_state *)c->state)->g;
    pthread_mutex_lock(&g->mu);
    int ok = !g->broken;
    if (ok) {
        if (a) g->posts[c->rank].a = *a;
        const unsigned long long mine = g->gen;
        if (++g->arrived == g->size) {
            g->arrived = 0;
            g->gen++;
            pthread_cond_broadcast(&g->cv);
        } else {
            while (g->gen == mine && !g->broken) pthread_cond_wait(&g->cv, &g->mu);
            ok = g->gen != mine;
        }
    }
    char why[256];
    if (!ok) snprintf(why, sizeof why, "%s", g->why);
    pthread_mutex_unlock(&g->mu);
    if (!ok) return f8i_error(c->ctx, F8_ERR_COMM, "CPU comm rank %d: collective abandoned: %s", c->rank, why);
    return F8_OK;
}

/* Bytes of this rank's result. */
static size_t result_bytes(const f8_comm *c, const f8i_collective_args *a)
{
    const size_t n = (size_t)a->count * f8_dtype_size(a->dtype);
    return a->kind == F8I_COLL_ALL_GATHER ? n * (size_t)c->size : n;
}

static f8_status cpu_run(f8_comm *c, const f8i_collective_args *a)
{
    if (a->kind == F8I_COLL_WAIT) return F8_OK; /* every collective here completed in order */
    cpu_state *s = (cpu_state *)c->state;
    f8_comm_group *g = s->g;
    const size_t bytes = result_bytes(c, a);
    if (bytes > s->tmp_bytes) { /* grows to the largest call once, then stays */
        unsigned char *t = (unsigned char *)realloc(s->tmp, bytes);
        if (!t) return fail(c, "out of host memory for a collective's result");
        s->tmp = t;
        s->tmp_bytes = bytes;
    }
    F8I_TRY(barrier(c, a));
    /* Every rank checks every post alike, so they agree on the verdict. */
    for (int r = 1; r < c->size; r++) {
        const f8i_collective_args *p = &g->posts[r].a, *q = &g->posts[0].a;
        if (p->kind != q->kind || p->count != q->count || p->dtype != q->dtype || p->op != q->op || p->root != q->root) {
            char why[256];
            snprintf(why, sizeof why, "the ranks' calls disagree: rank 0 issued kind %d of %lld x %s (op %d, root %d), "
                                      "rank %d kind %d of %lld x %s (op %d, root %d)", (int)q->kind,
                     (long long)q->count, f8_dtype_name(q->dtype), (int)q->op, (int)q->root, r, (int)p->kind,
                     (long long)p->count, f8_dtype_name(p->dtype), (int)p->op, (int)p->root);
            return fail(c, why);
        }
    }
    const int64_t n = a->count;
    const size_t es = f8_dtype_size(a->dtype);
    if (a->kind == F8I_COLL_ALL_REDUCE || a->kind == F8I_COLL_REDUCE_SCATTER) {
        const int64_t off = a->kind == F8I_COLL_REDUCE_SCATTER ? (int64_t)c->rank * n : 0;
        float *out = (float *)s->tmp;
        for (int64_t i = 0; i < n; i++) {
            float acc = ((const float *)g->posts[0].a.src)[off + i];
            for (int r = 1; r < c->size; r++) {
                const float v = ((const float *)g->posts[r].a.src)[off + i];
                acc = a->op == F8_REDUCE_MAX ? fmaxf(acc, v) : acc + v;
            }
            out[i] = acc;
        }
    } else if (a->kind == F8I_COLL_ALL_GATHER) {
        for (int r = 0; r < c->size && n > 0; r++)
            memcpy(s->tmp + (size_t)r * (size_t)n * es, g->posts[r].a.src, (size_t)n * es);
    } else if (n > 0) {
        memcpy(s->tmp, g->posts[a->root].a.src, (size_t)n * es);
    }
    F8I_TRY(barrier(c, NULL));
    if (bytes) memcpy(a->dst, s->tmp, bytes);
    return F8_OK;
}

static void cpu_destroy(f8_comm *c)
{
    cpu_state *s = (cpu_state *)c->state;
    char why[64];
    snprintf(why, sizeof why, "rank %d has left the group", c->rank);
    pthread_mutex_lock(&s->g->mu);
    break_locked(s->g, why);
    pthread_mutex_unlock(&s->g->mu);
    free(s->tmp);
    free(s);
}

static const f8i_comm_transport CPU_TRANSPORT = {"cpu", cpu_run, cpu_destroy};

f8_status f8_comm_create_cpu(f8_ctx *ctx, f8_comm_group *g, int rank, f8_comm **out)
{
    static const char fn[] = "f8_comm_create_cpu";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: comm (the output) is NULL", fn);
    *out = NULL;
    if (!g) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: group is NULL", fn);
    if (ctx->kind != F8_BACKEND_CPU)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: in-process ranks need a CPU ctx (a CUDA ctx uses NCCL)", fn);
    if (rank < 0 || rank >= g->size)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: rank %d outside [0, %d)", fn, rank, g->size);
    f8_comm *c = (f8_comm *)calloc(1, sizeof *c);
    cpu_state *s = (cpu_state *)calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    pthread_mutex_lock(&g->mu);
    const int taken = g->joined[rank];
    g->joined[rank] = 1;
    pthread_mutex_unlock(&g->mu);
    if (taken) {
        free(c);
        free(s);
        return f8i_error(ctx, F8_ERR_STATE, "%s: rank %d of this group is already taken", fn, rank);
    }
    s->g = g;
    c->ctx = ctx;
    c->rank = rank;
    c->size = g->size;
    c->tr = &CPU_TRANSPORT;
    c->state = s;
    *out = c;
    return F8_OK;
}
