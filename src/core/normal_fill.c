/*
 * normal_fill.c — the draws of f8_tensor_fill_normal (which module weights
 * are initialised with), on the host, over several threads.
 *
 * Value i is a Box-Muller normal (the cosine branch) from the splitmix64
 * outputs number 2i+1 and 2i+2 of the seed: the state before output j is
 * seed + j·golden, so any range of values can start on its own and the
 * threads' results are bit for bit the sequential loop's. One value costs
 * ~40 ns (a double log, sqrt and cos); a 1.3B GPT's 1.3·10⁹ values took
 * most of a minute on one core, so big fills are split over up to 16
 * threads (one per online core); a thread that cannot start runs inline.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "core/f8i.h"
#include "core/numerics.h"

#define GOLDEN 0x9E3779B97F4A7C15ull
#define MAX_THREADS 16

typedef struct fill_job {
    unsigned char *host;
    int es;
    int64_t i0, i1;
    double std;
    uint64_t seed;
} fill_job;

static void *fill_run(void *arg)
{
    const fill_job *j = (const fill_job *)arg;
    uint64_t s = j->seed + (uint64_t)(2 * j->i0) * GOLDEN; /* the state before output 2·i0 + 1 */
    for (int64_t i = j->i0; i < j->i1; i++) {
        double u[2]; /* two splitmix64 outputs as uniforms in (0, 1) */
        for (int k = 0; k < 2; k++) {
            const uint64_t z = f8i_mix64(s += GOLDEN);
            u[k] = ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        }
        const float v = (float)(j->std * sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
        if (j->es == 2) ((uint16_t *)j->host)[i] = f8i_bf16_from_float(v);
        else ((float *)j->host)[i] = v;
    }
    return NULL;
}

void f8i_normal_fill(void *host, size_t elem_size, int64_t n, double std, uint64_t seed)
{
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cores > MAX_THREADS ? MAX_THREADS : cores < 1 ? 1 : (int)cores;
    if (n < (int64_t)1 << 20) nt = 1; /* under ~40 ms: not worth a thread */
    fill_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 0; t < nt; t++) {
        jobs[t] = (fill_job){(unsigned char *)host, (int)elem_size, n * t / nt, n * (t + 1) / nt, std, seed};
        if (t > 0) started[t] = pthread_create(&tid[t], NULL, fill_run, &jobs[t]) == 0;
    }
    fill_run(&jobs[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else fill_run(&jobs[t]);
    }
}
