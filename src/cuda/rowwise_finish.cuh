/*
 * rowwise_finish.cuh — kernel 3 of the row-wise cast's column path: the
 * stripe tickets by which kernel 2's last block of each stripe writes
 * scale_inv_t (rwt_fin, rwt_last_block, rwt_finish_col), and for casts
 * past the ctx's column scratch the small finishing and zeroing kernels
 * (rwt_finish_kernel, rwt_zero_kernel). A part of rowwise_cast.cu,
 * included by it after the helpers it uses, not on its own; why the path is
 * built so: rowwise_cast.cu's design note.
 */
#ifndef F8_CUDA_ROWWISE_FINISH_CUH
#define F8_CUDA_ROWWISE_FINISH_CUH

/* Kernel 3 folded into kernel 2 (rwt_finish): the amaxes kernel 2 reads
 * (fin.amaxes: the ctx's column-amax scratch, or scale_inv_t itself) may be
 * replaced by scale_inv_t = 1 / s only once every block of the stripe has
 * read them, so each block takes a ticket of its stripe after its codes (a
 * barrier, then one fenced atomicAdd), and the block that draws the last
 * one writes the stripe's scale_inv_t from the scales it already holds,
 * zeroes the scratch (fin.zero: what it was at rest) and puts the ticket
 * back to 0. fin.tickets NULL: the finish kernel runs after instead. */
typedef struct rwt_fin {
    const float *amaxes; /* [cols] the column amaxes kernel 2 codes from */
    float *zero;         /* amaxes, when they are the scratch (zeroed by the last block), or NULL */
    unsigned *tickets;   /* [stripes] 0 at rest, or NULL */
} rwt_fin;

/* Whether this block drew its stripe's last ticket (uniform over the block). */
static __device__ __forceinline__ bool rwt_last_block(const rwt_fin &fin, int64_t stripe, unsigned blocks)
{
    __shared__ unsigned last;
    __syncthreads(); /* every thread's reads of the amaxes are done */
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(fin.tickets + stripe, 1u) == blocks - 1;
        if (last) fin.tickets[stripe] = 0;
    }
    __syncthreads();
    return last;
}

/* The last block's share: column c's scale_inv_t from its scale s. */
static __device__ __forceinline__ void rwt_finish_col(const f8i_rowwise_cast_args &p, const rwt_fin &fin, int64_t c,
                                                      float s)
{
    if (c >= p.cols) return;
    p.scale_inv_t[c] = 1.0f / s;
    if (fin.zero != NULL) fin.zero[c] = 0.0f;
}

/* Kernel 3 (with out_t): scale_inv_t from the amaxes kernel 2 has read.
 * Grid ceil(cols / 256). */
static __global__ void rwt_finish_kernel(f8i_rowwise_cast_args p)
{
    if (noop_set(p.noop)) return;
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c < p.cols) p.scale_inv_t[c] = 1.0f / f8i_current_scale(p.scale_inv_t[c], 1.0f, p.scaled_max, p.pow2);
}

/* Kernel 0, without out or before rowwise_colmax_kernel: scale_inv_t = 0,
 * the start of the amaxes' atomicMax. */
static __global__ void rwt_zero_kernel(f8i_rowwise_cast_args p)
{
    if (noop_set(p.noop)) return;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.cols) p.scale_inv_t[i] = 0.0f;
}

#endif /* F8_CUDA_ROWWISE_FINISH_CUH */
