/*
 * fuzz.h — what every fuzz target defines and what the replay driver
 * (fuzz/replay.c) offers, so the targets build as separate objects: for
 * libFuzzer (tools/fuzz.sh), for the gcc replay program (replay_main.c) and
 * for the tests that replay the committed corpora (tests/test_fuzz_*.c,
 * tests/test_onnx.c).
 */
#ifndef F8_FUZZ_H
#define F8_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* The target: one input. A broken property aborts. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Frees what the target keeps between inputs (a context, a temporary file). */
void f8_fuzz_teardown(void);

/* Replay path (a file, or every regular file of a directory, not recursive)
 * through LLVMFuzzerTestOneInput; adds the number of files run to *files.
 * Returns 0, or -1 if something could not be read. */
int f8_fuzz_replay(const char *path, int *files);

#endif
