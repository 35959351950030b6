/*
 * cpu/parallel.h — a pass of independent units over a few threads, for the
 * CPU reference ops whose loops are long enough to want them (attention.c).
 *
 * f8i_cpu_parallel_run calls fn(arg, u, w) once for every unit u in
 * [0, units), w being the worker that runs it (0 <= w < workers; worker 0 is
 * the calling thread). Units are claimed one at a time from a shared counter,
 * so which worker runs a unit is not fixed: a unit must write only what no
 * other unit of the pass touches, and keep per-worker state (scratch rows,
 * amax accumulators) indexed by w. Then the results do not depend on the
 * thread count. A thread that cannot be created claims nothing; the others
 * (at least the caller) run its units. It returns when every unit has run.
 */
#ifndef F8_CPU_PARALLEL_H
#define F8_CPU_PARALLEL_H

#include <stdint.h>

/* The most threads a pass uses (the calling one included). */
#define F8I_CPU_MAX_WORKERS 8

typedef void (*f8i_cpu_unit_fn)(void *arg, int64_t unit, int worker);

/* Workers for a pass of `units` units and about `work` multiply-adds in
 * all: 1 below ~4e6 (threads would not pay), else one per online core, at
 * most F8I_CPU_MAX_WORKERS and at most units (units >= 1). */
int f8i_cpu_workers(double work, int64_t units);

void f8i_cpu_parallel_run(f8i_cpu_unit_fn fn, void *arg, int64_t units, int workers);

#endif
