/* no_cuda.c — linked instead of src/cuda/ in a build without CUDA (CUDA=0):
 * the CUDA backend is absent, and f8_ctx_create reports F8_ERR_NO_DEVICE. */
#include "backend.h"

const f8i_backend *f8i_cuda_backend(void) { return NULL; }
