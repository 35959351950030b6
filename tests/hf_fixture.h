/*
 * hf_fixture.h — what the Hugging Face tests share (test_hf.c, test_hf_doors.c,
 * test_hf_llama.c): the known values their files are written with, the
 * tensor spec they list, and running this build's f8_train (F8_TRAIN) as a
 * subprocess.
 */
#ifndef F8_TESTS_HF_FIXTURE_H
#define F8_TESTS_HF_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>

/* Value i of tensor k: distinct per tensor and element, exact in FP32. */
static inline float val(int k, int64_t i) { return (float)((k * 7919 + i * 31) % 2001 - 1000) / 1024.0f; }

typedef struct spec {
    char name[96];
    int64_t r, c; /* c = 0: 1-D [r] */
} spec;

#ifdef F8_TRAIN
/* Run f8_train with args (a shell fragment); its exit status, output in *out. */
static inline int run(const char *args, char *out, size_t n)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", F8_TRAIN, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
#endif

#endif /* F8_TESTS_HF_FIXTURE_H */
