/*
 * adamw_moments_study.c — which FP8 form keeps AdamW's second moment usable:
 * a host-only experiment kept for the record (not linked into the library).
 *
 * Every variant runs the same AdamW (FP32 arithmetic, the update with the
 * step's FP32 moments, then the moments stored in their form) on two noisy
 * problems whose gradients span many orders of magnitude inside one block of
 * 128 elements (that is what breaks a narrow format), and prints the final
 * noise-free loss relative to FP32 moments.
 *   m: FP32, BF16, or E4M3 with a power-of-two scale per block of 128;
 *   v: FP32, BF16, E4M3(v), E5M2(v), E4M3(sqrt v), each FP8 one per block.
 * Build: cc -O2 -ffp-contract=off -Isrc dev/adamw_moments_study.c -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/numerics.h"

#define B 128
enum { F32, BF16, E4M3, E5M2, SQRT_E4M3 };
static const char *NAMES[] = {"fp32", "bf16", "e4m3", "e5m2", "sqrt-e4m3"};

/* Round x[0..n) in place to the form: what the next step would decode. */
static void store(float *x, int n, int form)
{
    if (form == F32) return;
    if (form == BF16) {
        for (int i = 0; i < n; i++) x[i] = f8i_bf16_to_float(f8i_bf16_from_float(x[i]));
        return;
    }
    for (int b0 = 0; b0 < n; b0 += B) {
        int nb = n - b0 < B ? n - b0 : B;
        float amax = 0;
        for (int i = 0; i < nb; i++) {
            float y = form == SQRT_E4M3 ? sqrtf(x[b0 + i]) : fabsf(x[b0 + i]);
            amax = fmaxf(amax, y);
        }
        const int e5 = form == E5M2;
        float s = f8i_current_scale(amax, 1.0f, e5 ? 57344.0f : 448.0f, 1), si = 1.0f / s;
        for (int i = 0; i < nb; i++) {
            float y = form == SQRT_E4M3 ? sqrtf(x[b0 + i]) : x[b0 + i];
            float d = f8i_fp8_decode(f8i_fp8_encode(y * s, e5), e5) * si;
            x[b0 + i] = form == SQRT_E4M3 ? d * d : d;
        }
    }
}

typedef struct rng { unsigned long long s; } rng;
static double unif(rng *r)
{
    unsigned long long z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}
static double gauss(rng *r) { double u = unif(r) + 1e-300; return sqrt(-2 * log(u)) * cos(6.283185307179586 * unif(r)); }

#define N 4096
#define D 256
#define S 2048

/* problem 0: noisy quadratic, curvature log-uniform over 1e-4..1e2 (shuffled);
 * problem 1: logistic regression, feature scales log-uniform over 1e-2..1e1. */
static double run(int problem, int mform, int vform, float beta2, int steps, float lr)
{
    static float p[N], m[N], v[N], h[N], X[S * D];
    static int y[S];
    rng r = {42};
    const int n = problem ? D : N;
    if (problem == 0) {
        for (int i = 0; i < n; i++) h[i] = (float)pow(10, -4 + 6 * unif(&r)), p[i] = (float)gauss(&r);
    } else {
        float w[D];
        for (int j = 0; j < D; j++) h[j] = (float)pow(10, -2 + 3 * unif(&r)), w[j] = (float)(gauss(&r) / h[j] / 4), p[j] = 0;
        for (int k = 0; k < S; k++) {
            double z = 0;
            for (int j = 0; j < D; j++) X[k * D + j] = (float)(gauss(&r) * h[j]), z += X[k * D + j] * w[j];
            y[k] = unif(&r) < 1 / (1 + exp(-z));
        }
    }
    memset(m, 0, sizeof m), memset(v, 0, sizeof v);
    const float b1 = 0.9f, eps = 1e-8f;
    float g[N];
    for (int t = 1; t <= steps; t++) {
        if (problem == 0) {
            for (int i = 0; i < n; i++) g[i] = h[i] * p[i] + 0.1f * sqrtf(h[i]) * (float)gauss(&r);
        } else {
            memset(g, 0, sizeof g);
            for (int b = 0; b < 32; b++) {
                int k = (int)(unif(&r) * S);
                double z = 0;
                for (int j = 0; j < D; j++) z += X[k * D + j] * p[j];
                float e = (float)(1 / (1 + exp(-z)) - y[k]) / 32;
                for (int j = 0; j < D; j++) g[j] += e * X[k * D + j];
            }
        }
        const float bc1 = (float)(1 - pow(b1, t)), bc2 = (float)(1 - pow(beta2, t));
        for (int i = 0; i < n; i++) {
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = beta2 * v[i] + (1 - beta2) * (g[i] * g[i]);
            p[i] -= lr * ((m[i] / bc1) / (sqrtf(v[i] / bc2) + eps));
        }
        store(m, n, mform), store(v, n, vform);
    }
    double loss = 0;
    if (problem == 0) {
        for (int i = 0; i < n; i++) loss += 0.5 * h[i] * p[i] * p[i];
    } else {
        for (int k = 0; k < S; k++) {
            double z = 0;
            for (int j = 0; j < D; j++) z += X[k * D + j] * p[j];
            loss += (y[k] ? log1p(exp(-z)) : log1p(exp(z))) / S;
        }
    }
    return loss;
}

int main(void)
{
    const float beta2s[2] = {0.95f, 0.999f};
    const int combos[][2] = {{F32, F32}, {BF16, BF16}, {E4M3, E4M3}, {E4M3, E5M2}, {E4M3, SQRT_E4M3}, {E4M3, F32}};
    for (int pr = 0; pr < 2; pr++)
        for (int bi = 0; bi < 2; bi++) {
            const int steps = pr ? 3000 : 2000;
            const float lr = pr ? 3e-3f : 1e-2f;
            double base = run(pr, F32, F32, beta2s[bi], steps, lr);
            printf("%s beta2 %.3f: fp32 moments loss %.6g\n", pr ? "logistic" : "quadratic", beta2s[bi], base);
            for (size_t c = 1; c < sizeof combos / sizeof combos[0]; c++) {
                double l = run(pr, combos[c][0], combos[c][1], beta2s[bi], steps, lr);
                printf("   m %-5s v %-9s loss %.6g  (%+.2f%%)\n", NAMES[combos[c][0]], NAMES[combos[c][1]], l,
                       100 * (l - base) / base);
            }
        }
    return 0;
}
