/*
 * cpu/parallel.c — parallel.h's pass over threads.
 *
 * Design note: units are claimed from an atomic counter rather than split
 * into fixed ranges, because attention's units (causal rows and keys) differ
 * in cost by up to S times; claiming one at a time keeps every thread busy
 * to the end, and costs one atomic add per unit, far below a unit's work.
 * Threads are created per pass and joined (no pool: no state outlives a
 * call, so nothing to create or destroy with the ctx).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "cpu/parallel.h"

typedef struct crew {
    f8i_cpu_unit_fn fn;
    void *arg;
    int64_t units;
    atomic_llong next; /* the next unit to claim */
} crew;

typedef struct member {
    crew *c;
    int worker;
} member;

static void *member_run(void *p)
{
    const member *m = (const member *)p;
    for (int64_t u; (u = (int64_t)atomic_fetch_add(&m->c->next, 1)) < m->c->units;) m->c->fn(m->c->arg, u, m->worker);
    return NULL;
}

int f8i_cpu_workers(double work, int64_t units)
{
    if (work < 4e6 || units < 2) return 1;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores > F8I_CPU_MAX_WORKERS ? F8I_CPU_MAX_WORKERS : cores < 1 ? 1 : (int)cores;
    return units < n ? (int)units : n;
}

void f8i_cpu_parallel_run(f8i_cpu_unit_fn fn, void *arg, int64_t units, int workers)
{
    crew c = {.fn = fn, .arg = arg, .units = units};
    member m[F8I_CPU_MAX_WORKERS];
    pthread_t tid[F8I_CPU_MAX_WORKERS];
    int started[F8I_CPU_MAX_WORKERS] = {0};
    workers = workers < 1 ? 1 : workers > F8I_CPU_MAX_WORKERS ? F8I_CPU_MAX_WORKERS : workers;
    atomic_init(&c.next, 0);
    for (int t = 0; t < workers; t++) {
        m[t] = (member){&c, t};
        if (t > 0) started[t] = pthread_create(&tid[t], NULL, member_run, &m[t]) == 0;
    }
    member_run(&m[0]);
    for (int t = 1; t < workers; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}
