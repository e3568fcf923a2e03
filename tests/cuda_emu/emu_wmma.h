/* emu_wmma.h — the subset of CUDA's warp matrix functions (nvcuda::wmma, <mma.h>) the tensor-core kernels use
 * (backend_cuda_attn_tc.cu), for the host emulator: included by emu_cuda.h in the kernel-side section, C++ only.
 * A fragment's layout across a warp's lanes is opaque in CUDA, so here every emulated thread holds the whole
 * tile, row-major by its logical (row, column): x[] has num_elements = the tile's size, and two fragments of the
 * same type map x[i] to the same element, as on a GPU. The warp-wide calls are then per-thread copies of the
 * same work (every lane of a warp passes the same arguments, as CUDA requires).
 * Arithmetic, as the tensor cores do it: the products of tf32 x tf32 and bf16 x bf16 are exact in fp32; they
 * are summed in fp32, k in order, onto the accumulator's element (a GPU's internal order and rounding of that
 * sum differ within the fp32 accumulation's error). A tf32 operand is read as its upper 19 bits (the hardware
 * ignores the low 13 mantissa bits): round it with __float_to_tf32 first (cvt.rna: nearest, ties away). */
#ifndef DDP_EMU_WMMA_H
#define DDP_EMU_WMMA_H

#include <stdint.h>
#include <string.h>

#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif

namespace nvcuda
{
namespace wmma
{

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision
{
struct tf32;
}
enum layout_t { mem_row_major, mem_col_major };

/* float to TF32 as cvt.rna.tf32.f32: 10 mantissa bits, to nearest, ties away from zero; Inf and NaN kept */
static inline float __float_to_tf32(float in)
{
    uint32_t u = ddp_emu_f2u(in);
    if ((u & 0x7f800000u) == 0x7f800000u) return in;
    return ddp_emu_u2f((u + 0x1000u) & ~0x1fffu);
}

/* the element types: what x[] holds and what a load reads */
template <class T> struct ddp_emu_elem {
    typedef T type;
    static float value(T v) { return (float)v; }
};
template <> struct ddp_emu_elem<precision::tf32> {
    typedef float type;
    static float value(float v) { return ddp_emu_u2f(ddp_emu_f2u(v) & ~0x1fffu); } /* the upper 19 bits */
};
template <> struct ddp_emu_elem<__nv_bfloat16> {
    typedef __nv_bfloat16 type;
    static float value(__nv_bfloat16 v) { return __bfloat162float(v); }
};

/* the logical shape of each use: matrix_a is M x K, matrix_b K x N, the accumulator M x N */
template <class Use, int M, int N, int K> struct ddp_emu_shape;
template <int M, int N, int K> struct ddp_emu_shape<matrix_a, M, N, K> {
    enum { rows = M, cols = K };
};
template <int M, int N, int K> struct ddp_emu_shape<matrix_b, M, N, K> {
    enum { rows = K, cols = N };
};
template <int M, int N, int K> struct ddp_emu_shape<accumulator, M, N, K> {
    enum { rows = M, cols = N };
};

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    typedef typename ddp_emu_elem<T>::type element_type;
    enum { rows = ddp_emu_shape<Use, M, N, K>::rows, cols = ddp_emu_shape<Use, M, N, K>::cols };
    enum { num_elements = rows * cols };
    element_type x[num_elements]; /* x[r * cols + c]: logical row r, column c */
};

template <class Use, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f,
                                 const typename fragment<Use, M, N, K, T, L>::element_type &v)
{
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

/* matrix_a and matrix_b: the layout is the fragment's; element (r, c) at p[r * ldm + c] (row_major) or
 * p[c * ldm + r] (col_major) */
template <class Use, int M, int N, int K, class T, class L>
static inline void ddp_emu_load(fragment<Use, M, N, K, T, L> &f,
                                const typename fragment<Use, M, N, K, T, L>::element_type *p, unsigned ldm, bool col)
{
    typedef fragment<Use, M, N, K, T, L> F;
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++) f.x[r * F::cols + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <class Use, int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f,
                                    const typename fragment<Use, M, N, K, T, row_major>::element_type *p, unsigned ldm)
{
    ddp_emu_load(f, p, ldm, false);
}
template <class Use, int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f,
                                    const typename fragment<Use, M, N, K, T, col_major>::element_type *p, unsigned ldm)
{
    ddp_emu_load(f, p, ldm, true);
}
/* the accumulator: the memory layout given at the call */
template <int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t layout)
{
    ddp_emu_load(f, p, ldm, layout == mem_col_major);
}
template <int M, int N, int K, class T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t layout)
{
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            (layout == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * N + c];
}

/* Every lane of a warp makes the same mma_sync calls with the same fragments, and the scheduler runs a block's
 * threads one after another between barriers (lane 0 of a warp first): lane 0's results are kept, in call
 * order, and a later lane whose inputs are byte for byte those of its own call of the same rank takes the kept
 * result instead of recomputing it (any difference: it computes). Speed only; per worker thread (96 KiB of
 * thread-local storage), up to 32 calls between barriers (the kernels' most; later calls just compute). */
enum { DDP_EMU_MEMO_CALLS = 32, DDP_EMU_MEMO_KEY = 2048, DDP_EMU_MEMO_OUT = 1024 };
struct ddp_emu_memo {
    unsigned last;  /* linear index of the thread that called last, + 1 (0: none yet) */
    int idx, count; /* this thread's next call; the calls lane 0 of the warp kept */
    unsigned char key[DDP_EMU_MEMO_CALLS][DDP_EMU_MEMO_KEY], out[DDP_EMU_MEMO_CALLS][DDP_EMU_MEMO_OUT];
};
static __thread ddp_emu_memo ddp_emu_memo_;
/* the slot of this call (its inputs' bytes in key, klen of them), or -1; *keep: lane 0 stores its result there */
static inline int ddp_emu_memo_slot(const void *const *in, const size_t *len, int nin, int *keep)
{
    ddp_emu_memo &m = ddp_emu_memo_;
    const unsigned t = ddp_emu_threadIdx.x +
                       ddp_emu_blockDim.x * (ddp_emu_threadIdx.y + ddp_emu_blockDim.y * ddp_emu_threadIdx.z);
    *keep = 0;
    if (t + 1 != m.last) m.last = t + 1, m.idx = 0, m.count = t % 32 ? m.count : 0;
    const int i = m.idx++;
    if (i >= DDP_EMU_MEMO_CALLS) return -1;
    size_t at = 0;
    if (t % 32 == 0) { /* lane 0: remember the inputs; the result follows */
        for (int k = 0; k < nin; k++) memcpy(m.key[i] + at, in[k], len[k]), at += len[k];
        m.count = i + 1, *keep = 1;
        return i;
    }
    if (i >= m.count) return -1;
    for (int k = 0; k < nin; k++) {
        if (memcmp(m.key[i] + at, in[k], len[k])) return -1;
        at += len[k];
    }
    return i;
}

/* d = a b + c: each element's K exact products summed in fp32 in order onto c's element (d may be c) */
template <int M, int N, int K, class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c)
{
    static_assert(sizeof a.x + sizeof b.x + sizeof c.x <= DDP_EMU_MEMO_KEY && sizeof d.x <= DDP_EMU_MEMO_OUT, "memo");
    const void *in[3] = {a.x, b.x, c.x};
    const size_t len[3] = {sizeof a.x, sizeof b.x, sizeof c.x};
    int keep, slot = ddp_emu_memo_slot(in, len, 3, &keep);
    if (slot >= 0 && !keep) {
        memcpy(d.x, ddp_emu_memo_.out[slot], sizeof d.x);
        return;
    }
    float av[M * K], bv[K * N], out[M * N];
    for (int i = 0; i < M * K; i++) av[i] = ddp_emu_elem<T>::value(a.x[i]);
    for (int i = 0; i < K * N; i++) bv[i] = ddp_emu_elem<T>::value(b.x[i]);
    for (int i = 0; i < M * N; i++) out[i] = c.x[i];
    for (int i = 0; i < M; i++) /* k outermost per row: each element still sums its products in k order */
        for (int k = 0; k < K; k++)
            for (int j = 0; j < N; j++) out[i * N + j] += av[i * K + k] * bv[k * N + j];
    for (int i = 0; i < M * N; i++) d.x[i] = out[i];
    if (keep) memcpy(ddp_emu_memo_.out[slot], d.x, sizeof d.x);
}

} // namespace wmma
} // namespace nvcuda

#endif
