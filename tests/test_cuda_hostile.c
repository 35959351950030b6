/*
 * test_cuda_hostile.c — the hostile-input program (hostile_cases.h) on a
 * CUDA ctx: the same calls, statuses, messages and state snapshots as
 * test_hostile.c. Without a GPU the program reports itself skipped.
 */
#include "hostile_cases.h"

int main(void) { return hostile_main("test_cuda_hostile", F8_BACKEND_CUDA); }
