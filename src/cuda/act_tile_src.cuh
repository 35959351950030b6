/*
 * act_tile_src.cuh — the activations' two tile sources for cast_tile.cuh's
 * cast_tile_kernel (act_fwd_src: the forward's codes and transposed codes;
 * act_bwd_src: the fused backward's dact + cast + transpose + dbias): a part
 * of act_kernels.cuh, included by it after the element helpers they use
 * (act_eval, load_piece, decode_piece, store_piece, store_codes), not on its
 * own; act_kernels.cuh's design note says how they work.
 */
#ifndef F8_CUDA_ACT_TILE_SRC_CUH
#define F8_CUDA_ACT_TILE_SRC_CUH

/* ------------------------------------------------------------------------ */
/* The forward's tile source (cast_tile.cuh): codes and transposed codes     */
/* ------------------------------------------------------------------------ */

/* The tile's values are v [rows, h] = act(x) (act(a)·b), computed as the
 * tile is loaded, with exactly act_fwd_kernel's arithmetic: the same codes.
 * VEC = 8 for BF16 x (16-byte loads), else 4. */
template <int ACT, int XBF16>
struct act_fwd_src {
    static constexpr int GATED = act_gated(ACT);
    static constexpr int VEC = XBF16 ? 8 : 4;
    static constexpr int AHEAD = GATED ? 1 : 2;
    static constexpr int FULL = XBF16; /* FULL kernels only for the BF16 x training uses */
    static constexpr int XW = VEC * (XBF16 ? 2 : 4) / 4; /* words */
    struct raw_t {
        uint32_t a[XW], b[GATED ? XW : 1];
    };
    const void *x; /* (rows, gated ? 2h : h) */
    int64_t h;     /* columns of v */
    int w_x;       /* access width (bytes) */
};

/* FULL: the piece lies inside x and takes one widest load (VEC * 2 or 4
 * bytes = 16). */
template <int FULL, int ACT, int XBF16>
static __device__ __forceinline__ void tile_load(const act_fwd_src<ACT, XBF16> &s,
                                                 typename act_fwd_src<ACT, XBF16>::raw_t &raw, tile_at at,
                                                 int64_t rows, int64_t cols)
{
    typedef act_fwd_src<ACT, XBF16> S;
    constexpr int XB = S::VEC * (XBF16 ? 2 : 4); /* bytes of a piece */
    const int64_t xpitch = S::GATED ? 2 * s.h : s.h;
    if constexpr (FULL) {
        const char *tile = (const char *)s.x + (at.row0 * xpitch + at.col0) * (XBF16 ? 2 : 4);
        const char *pa = tile + (int64_t)(at.r * (int)xpitch + at.c) * (XBF16 ? 2 : 4);
        load_bytes<XB>(raw.a, pa, 16);
        if constexpr (S::GATED) load_bytes<XB>(raw.b, pa + s.h * (XBF16 ? 2 : 4), 16);
        return;
    }
    const int64_t row = at.row0 + at.r, col = at.col0 + at.c;
    const int n = row >= rows || col >= cols ? 0 : col + S::VEC <= cols ? S::VEC : (int)(cols - col);
    load_piece<XBF16, S::VEC>(raw.a, s.x, row * xpitch + col, n, s.w_x);
    if constexpr (S::GATED) load_piece<XBF16, S::VEC>(raw.b, s.x, row * xpitch + s.h + col, n, s.w_x);
}

template <int FULL, int ACT, int XBF16>
static __device__ __forceinline__ void tile_values(const act_fwd_src<ACT, XBF16> &,
                                                   const typename act_fwd_src<ACT, XBF16>::raw_t &raw, int64_t,
                                                   float (&v)[act_fwd_src<ACT, XBF16>::VEC])
{
    typedef act_fwd_src<ACT, XBF16> S;
    float a[S::VEC];
    decode_piece<XBF16, S::VEC>(raw.a, a);
#pragma unroll
    for (int j = 0; j < S::VEC; ++j) act_eval<ACT>(a[j], &v[j], NULL);
    if constexpr (S::GATED) {
        float b[S::VEC];
        decode_piece<XBF16, S::VEC>(raw.b, b);
#pragma unroll
        for (int j = 0; j < S::VEC; ++j) v[j] = v[j] * b[j];
    }
}

template <int FULL, int ACT, int XBF16>
static __device__ __forceinline__ void tile_store(const act_fwd_src<ACT, XBF16> &,
                                                  const float (&)[act_fwd_src<ACT, XBF16>::VEC], tile_at, int64_t,
                                                  int64_t)
{
}

/* ------------------------------------------------------------------------ */
/* The fused backward's tile source (cast_tile.cuh)                          */
/* ------------------------------------------------------------------------ */

/* The tile's values are d [rows, cols_in]. VEC = 4 (16-byte FP32 loads,
 * 8-byte BF16 ones), whatever the dtypes. With x and dy both BF16 it was 8
 * (16-byte loads), and BF16 dy ran barely faster or slower than FP32 dy
 * (H200, 8192 x 16384, us: GELU 287 against 299, SwiGLU 639 against 576);
 * with 4 it runs GELU in 273 and SwiGLU in 568. The gated sources hold
 * three pieces per thread-row, so they load one micro-block ahead
 * (registers); the plain ones both.
 * The FULL kernel of a plain activation with BF16 x and dy (act_bwd_vec8)
 * takes V = 8 again, one micro-block ahead: there the 8 values cost one
 * 16-byte load of x and one of dy, one 8-byte store of codes, and halve
 * the per-thread setup and tail per value, where the generic kernel's
 * per-access overhead had made 8 no better. Its source is a type of its
 * own (V = 8: FULL == 2, only a FULL kernel); the V = 4 one keeps the
 * generic kernel and, for BF16 x, its own FULL kernel. */
template <int ACT, int XBF16, int DYBF16>
static __host__ __device__ constexpr int act_bwd_vec8()
{
    return XBF16 && DYBF16 && !act_gated(ACT);
}

template <int ACT, int XBF16, int DYBF16, int V = 4>
struct act_bwd_src {
    static constexpr int GATED = act_gated(ACT);
    static constexpr int VEC = V;
    static constexpr int AHEAD = GATED || V == 8 ? 1 : 2;
    /* FULL kernels only for the BF16 x training uses; V = 8 has nothing else */
    static constexpr int FULL = V == 8 ? 2 : XBF16;
    static_assert(V == 4 || act_bwd_vec8<ACT, XBF16, DYBF16>(), "V = 8 only where act_bwd_vec8");
    static constexpr int XW = VEC * (XBF16 ? 2 : 4) / 4, DW = VEC * (DYBF16 ? 2 : 4) / 4; /* words */
    struct raw_t {
        uint32_t a[XW], b[GATED ? XW : 1], dy[DW];
    };
    const void *x;  /* (rows, cols_in) */
    const void *dy; /* (rows, h) */
    int64_t h;      /* cols_in / 2 (gated) or cols_in */
    void *dx;       /* (rows, cols_in) FP32/BF16, or NULL */
    int dx_bf16;
    int w_x, w_dy, w_dx; /* access widths (bytes) */
};

/* FULL: the piece lies inside the matrix and in one half (h % VEC == 0
 * follows from cols % TC == 0), each input takes one widest load. */
template <int FULL, int ACT, int XBF16, int DYBF16, int V>
static __device__ __forceinline__ void tile_load(const act_bwd_src<ACT, XBF16, DYBF16, V> &s,
                                                 typename act_bwd_src<ACT, XBF16, DYBF16, V>::raw_t &raw, tile_at at,
                                                 int64_t rows, int64_t cols)
{
    typedef act_bwd_src<ACT, XBF16, DYBF16, V> S;
    constexpr int VEC = S::VEC, XES = XBF16 ? 2 : 4, DES = DYBF16 ? 2 : 4;
    const int64_t h = s.h;
    if constexpr (FULL) {
        /* Column c of d reads x and dy at column c mod h of the half. */
        const int64_t col = at.col0 + at.c;
        const bool second = S::GATED && col >= h;
        const int64_t ca = second ? col - h : col;
        const char *xa = (const char *)s.x + (at.row0 * cols + ca) * XES + (int64_t)(at.r * (int)cols) * XES;
        load_bytes<VEC * XES>(raw.a, xa, 16);
        if constexpr (S::GATED) {
            if (second) {
#pragma unroll
                for (int k = 0; k < S::XW; ++k) raw.b[k] = 0;
            } else {
                load_bytes<VEC * XES>(raw.b, xa + h * XES, 16);
            }
        }
        const char *dya = (const char *)s.dy + (at.row0 * h + ca) * DES + (int64_t)(at.r * (int)h) * DES;
        load_bytes<VEC * DES>(raw.dy, dya, 16);
        return;
    }
    const int64_t row = at.row0 + at.r, col = at.col0 + at.c;
    const bool second = S::GATED && col >= h; /* d_b columns: no b needed */
    if (row < rows && (col + VEC <= h || (second && col + VEC <= cols))) {
        const int64_t ca = second ? col - h : col;
        load_piece<XBF16, VEC>(raw.a, s.x, row * cols + ca, VEC, s.w_x);
        if constexpr (S::GATED) {
            if (second) {
#pragma unroll
                for (int k = 0; k < S::XW; ++k) raw.b[k] = 0;
            } else {
                load_piece<XBF16, VEC>(raw.b, s.x, row * cols + h + ca, VEC, s.w_x);
            }
        }
        load_piece<DYBF16, VEC>(raw.dy, s.dy, row * h + ca, VEC, s.w_dy);
        return;
    }
    /* An edge or a piece straddling the halves: element by element. */
#pragma unroll
    for (int k = 0; k < S::XW; ++k) raw.a[k] = raw.b[S::GATED ? k : 0] = 0;
#pragma unroll
    for (int k = 0; k < S::DW; ++k) raw.dy[k] = 0;
    if (row >= rows) return;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        const int64_t c = col + j;
        if (c < cols) {
            const int64_t ca = c < h ? c : c - h;
            put_elem<XBF16>(raw.a, j, s.x, row * cols + ca);
            if (S::GATED && c < h) put_elem<XBF16>(raw.b, j, s.x, row * cols + h + ca);
            put_elem<DYBF16>(raw.dy, j, s.dy, row * h + ca);
        }
    }
}

/* plain: d = act'(x)·dy; gated: d_a = act'(a)·b·dy (c < h), d_b = act(a)·dy.
 * FULL: a piece lies in one half, so the choice is made once for it. */
template <int FULL, int ACT, int XBF16, int DYBF16, int V>
static __device__ __forceinline__ void tile_values(const act_bwd_src<ACT, XBF16, DYBF16, V> &s,
                                                   const typename act_bwd_src<ACT, XBF16, DYBF16, V>::raw_t &raw,
                                                   int64_t col, float (&v)[V])
{
    typedef act_bwd_src<ACT, XBF16, DYBF16, V> S;
    constexpr int VEC = S::VEC;
    float a[VEC], dy[VEC];
    decode_piece<XBF16, VEC>(raw.a, a);
    decode_piece<DYBF16, VEC>(raw.dy, dy);
    if constexpr (S::GATED) {
        float b[VEC];
        decode_piece<XBF16, VEC>(raw.b, b);
        const bool first = col < s.h;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            float g;
            if (FULL ? first : col + j < s.h) {
                act_eval<ACT>(a[j], NULL, &g);
                v[j] = g * b[j] * dy[j];
            } else {
                act_eval<ACT>(a[j], &g, NULL);
                v[j] = g * dy[j];
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            float g;
            act_eval<ACT>(a[j], NULL, &g);
            v[j] = g * dy[j];
        }
    }
}

/* dx, when asked for: d as FP32/BF16. The FULL kernel runs only without dx
 * (training never asks for it with the codes). */
template <int FULL, int ACT, int XBF16, int DYBF16, int V>
static __device__ __forceinline__ void tile_store(const act_bwd_src<ACT, XBF16, DYBF16, V> &s, const float (&v)[V],
                                                  tile_at at, int64_t rows, int64_t cols)
{
    constexpr int VEC = V;
    if constexpr (FULL) return;
    const int64_t row = at.row0 + at.r, col = at.col0 + at.c;
    if (s.dx == NULL || row >= rows || col >= cols) return;
    const int n = col + VEC <= cols ? VEC : (int)(cols - col);
    store_piece<VEC>(s.dx, s.dx_bf16, row * cols + col, v, n, s.w_dx);
}

#endif /* F8_CUDA_ACT_TILE_SRC_CUH */
