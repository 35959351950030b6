/*
 * test_hostile.c — the hostile-input program on the CPU backend (the cases
 * and the harness are in hostile_cases.h; test_cuda_hostile.c runs the same
 * body on a CUDA ctx).
 */
#include "hostile_cases.h"

int main(void) { return hostile_main("test_hostile", F8_BACKEND_CPU); }
