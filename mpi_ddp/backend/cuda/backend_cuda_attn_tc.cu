/* backend_cuda_attn_tc.cu — the CUDA backend's packed attention on tensor cores (WMMA) for --precision tf32 and bf16,
 * heads up to TC_DMAX on sm_80 and later: the kernels, and the ops backend_cuda_attn.cu calls where
 * ddp_cuda_attention_tc says they apply. */
#include "mpi_ddp/backend/cuda/backend_cuda_priv.h"

#define TC_BQ DDP_ATT_TILE /* rows of a block (a tile): 4 warps of 16 */
#define TC_BK 32           /* rows of a streamed tile */
#define TC_THREADS 128
/* widest head of the tensor-core kernels: heads of 65..128 stay on the SIMT kernels, where dK/dV would hold 16 key
 * rows x 128 of K, V, dK and dV in fragments (over 255 registers) and stage over 48 KiB at tf32 */
#define TC_DMAX 64
static_assert(TC_BQ == 2 * TC_BK && TC_BQ == 16 * (TC_THREADS / 32) && TC_BK == 32,
              "a block's 64 rows: two staged tiles, 16 per warp; a tile's keys: 16 per half-warp");
#define TC_LOG2E 1.4426950408889634f /* the scores' scale times it: exponentials as exp2, one multiply folded */
#define TC_LN2 0.6931471805599453f
#ifdef __CUDACC__ /* the softmax loops (16 iterations) unrolled by 4, not 16: registers for the fragments */
#define TC_UNROLL4 _Pragma("unroll 4")
#else
#define TC_UNROLL4
#endif
enum { TC_TF32 = 0, TC_BF16 = 1 };
/* the form of an input the kernels stage (q|k|v, dO; tc_form): its elements bf16 (else fp32); its rows staged by
 * 16-byte groups */
enum { TC_IN16 = 1, TC_INV = 2 };

/* tf32 and bf16 WMMA exist from sm_80; the kernels are empty for older targets and never launched there */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TC_ARCH 1
namespace wmma = nvcuda::wmma;

/* the element stored in shared memory (st) and the fragments' precision (ft) */
template <int P> struct tc_t;
template <> struct tc_t<TC_TF32> {
    typedef float st;
    typedef wmma::precision::tf32 ft;
    enum { KK = 8 };
};
template <> struct tc_t<TC_BF16> {
    typedef __nv_bfloat16 st;
    typedef __nv_bfloat16 ft;
    enum { KK = 16 };
};
static __device__ inline void tc_put(float *p, float x) { *p = wmma::__float_to_tf32(x); }
static __device__ inline void tc_put(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }
/* 2^x by the special-function unit (ex2.approx.ftz: relative error below 2^-22, subnormal results flushed to 0), as
 * FlashAttention's exponentials; the emulator's exp2f is exact */
static __device__ inline float tc_ex2(float x)
{
#ifdef __CUDA_ARCH__
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

static __device__ inline void tc_put(__nv_bfloat16 *p, __nv_bfloat16 x) { *p = x; } /* its own bf16 rounding */
/* (for the tf32 kernels' bf16 branch of tc_stage16, compiled but never taken) */
static __device__ inline void tc_put(float *p, __nv_bfloat16 x) { tc_put(p, __bfloat162float(x)); }
static __device__ inline float tc_get(float x) { return x; }
static __device__ inline float tc_get(__nv_bfloat16 x) { return __bfloat162float(x); }
/* 16 bytes of S (4 fp32 or 8 bf16) and the same elements as T, for one load and one store per thread */
template <class S> struct alignas(16) tc_in {
    S v[16 / sizeof(S)];
};
template <class T, class S> struct alignas(sizeof(T) * 16 / sizeof(S)) tc_st {
    T v[16 / sizeof(S)];
};
/* nrows rows of src (fp32 or bf16; row stride ld; zero past `rows` rows and dh columns) into t [nrows][DM], rounded
 * (a bf16 value is its own bf16 and tf32 rounding). With vec (tc_stage16 says when), each thread moves whole 16-byte
 * groups: one 16-byte load and one store of 8 or 16 bytes, where the element loop below takes 4 or 8 loads. */
template <int DM, class T, class S>
static __device__ inline void tc_stage(T *t, const S *src, int64_t ld, int64_t rows, int nrows, int dh, bool vec)
{
    const int VW = 16 / sizeof(S), G = DM / VW; /* elements a group, groups a row */
    static_assert(DM % (16 / sizeof(S)) == 0, "a tile row is whole 16-byte groups");
    if (vec) {
        for (int e = threadIdx.x; e < nrows * G; e += blockDim.x) {
            const int r = e / G, c = e % G * VW;
            tc_st<T, S> o;
            if (r < rows && c < dh) {
                const tc_in<S> x = *(const tc_in<S> *)(src + r * ld + c);
                for (int j = 0; j < VW; j++) tc_put(o.v + j, x.v[j]); /* bf16 to bf16: a copy */
            } else {
                for (int j = 0; j < VW; j++) tc_put(o.v + j, 0.0f);
            }
            *(tc_st<T, S> *)(t + r * DM + c) = o;
        }
        return;
    }
    for (int e = threadIdx.x; e < nrows * DM; e += blockDim.x) {
        int r = e / DM, c = e % DM;
        tc_put(t + e, r < rows && c < dh ? tc_get(src[r * ld + c]) : 0.0f);
    }
}
/* tc_stage of the rows from element `at` of x (q|k|v or dO) in the form xf (tc_form): fp32, or bf16 (a uniform
 * branch), which the bf16 kernels read only: the tf32 ones are given fp32 (backend_cuda_attn.cu's own_qkv, own_dout),
 * and keep their registers */
template <int DM, class T>
static __device__ inline void tc_stage16(T *t, const void *x, int xf, int64_t at, int64_t ld, int64_t rows, int nrows,
                                         int dh)
{
    if (sizeof(T) == 2 && (xf & TC_IN16))
        tc_stage<DM>(t, (const __nv_bfloat16 *)x + at, ld, rows, nrows, dh, (xf & TC_INV) != 0);
    else
        tc_stage<DM>(t, (const float *)x + at, ld, rows, nrows, dh, (xf & TC_INV) != 0);
}

/* The warp's accumulator fragments f[DM / 16] (its 16 rows x DM) to dst (row stride ld), rows < `rows` and
 * columns < dh, each row times mul[row] (mul NULL: 1), through its own 16 x 16 staging tile stg (__syncwarp). */
template <int DM, class F, class O>
static __device__ inline void tc_out(O *dst, int64_t ld, const F (&f)[DM / 16], float *stg, int64_t rows, int dh,
                                     const float *mul)
{
    const int lane = threadIdx.x % 32;
    for (int t = 0; t < DM / 16; t++) {
        wmma::store_matrix_sync(stg, f[t], 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int r = e / 16, c = t * 16 + e % 16;
            const float v = stg[e] * (mul ? mul[r] : 1.0f);
            if (r < rows && c < dh) vst_out<1>(dst + r * ld, c, &v);
        }
        __syncwarp();
    }
}

#define TC_TYPES(P)                                                                           \
    typedef typename tc_t<P>::st T;                                                           \
    typedef typename tc_t<P>::ft FT;                                                          \
    const int KK = tc_t<P>::KK;                                                               \
    typedef wmma::fragment<wmma::matrix_a, 16, 16, tc_t<P>::KK, FT, wmma::row_major> frag_a;  \
    typedef wmma::fragment<wmma::matrix_b, 16, 16, tc_t<P>::KK, FT, wmma::row_major> frag_b;  \
    typedef wmma::fragment<wmma::matrix_b, 16, 16, tc_t<P>::KK, FT, wmma::col_major> frag_bt; \
    typedef wmma::fragment<wmma::accumulator, 16, 16, tc_t<P>::KK, float> frag_c
#else
#define TC_ARCH 0
#endif

/* ------------------------------------------------------------------ forward */
/* Budget (ptxas, CUDA 13.0; T = 4 bytes for tf32, 2 for bf16): static shared memory 2 x 32 x DM x T + 9.5 KiB
 * (+ 4 KiB of bf16 P), 13 824 to 26 112 bytes; 56 to 128 registers at sm_80, 56 to 130 at sm_90, no spills. o is
 * written fp32, or bf16 at o16 (a uniform branch in the epilogue only). */
template <int P, int DM>
__global__ void __launch_bounds__(TC_THREADS)
    k_tc_fwd(const void *qkv, int qkvf, void *o, int o16, float *lse, const int64_t *tile, const int64_t *off,
             const int64_t *sid, int64_t d, int64_t H, ddp_dropout dr)
{
#if TC_ARCH
    TC_TYPES(P);
    __shared__ __align__(32) T kv[2 * TC_BK * DM];    /* K tile | V tile; first the block's 64 Q rows */
    __shared__ __align__(32) float sc[TC_BQ * TC_BK]; /* scores [64][32]; P over them (tf32), the output's staging */
    __shared__ __align__(32) T pb[P == TC_TF32 ? 1 : TC_BQ * TC_BK]; /* P (bf16) */
    __shared__ __align__(32) float rowmap[256];                      /* element (r, c) = r */
    __shared__ float corr[TC_BQ], inv[TC_BQ];
    T *pp = P == TC_TF32 ? (T *)sc : pb;
    const ddp_attn_blk k = ddp_attn_block(tile, off, d, H);
    /* lanes l and l + 16 of warp w share row w * 16 + l: the first takes keys 0..15 of a tile, the second 16..31 */
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, row = w * 16 + lane % 16, j1 = lane / 16 * 16;
    const int64_t base = k.lo * k.ld + k.h * k.dh; /* q|k|v's element of the block's first row and head */
    tc_stage16<DM>(kv, qkv, qkvf, base + k.r0 * k.ld, k.ld, k.n - k.r0, TC_BQ, k.dh);
    for (int e = threadIdx.x; e < 256; e += TC_THREADS) rowmap[e] = (float)(e / 16);
    __syncthreads();
    frag_a qf[DM / KK], pa;
    frag_bt kb;
    frag_b vb;
    frag_c of[DM / 16], sf, rm;
    for (int c = 0; c < DM / KK; c++) wmma::load_matrix_sync(qf[c], kv + w * 16 * DM + c * KK, DM);
    for (int t = 0; t < DM / 16; t++) wmma::fill_fragment(of[t], 0.0f);
    wmma::load_matrix_sync(rm, rowmap, 16, wmma::mem_row_major);
    __syncthreads();
    const int64_t i = k.r0 + row; /* the lane's query row of the tile */
    const int on = dr.p > 0.0f;
    const uint64_t rk = on && i < k.n ? ddp_drop_samplekey(&dr, sid, k.s, i) : 0, u0 = ddp_drop_attn_unit(k.h, 0);
    const float sl2 = k.scale * TC_LOG2E;
    float m = -1e30f, l = 0.0f; /* in log2 units; below any finite score, never an infinity (fast-math builds) */
    for (int64_t j0 = 0; j0 < k.n; j0 += TC_BK) {
        tc_stage16<DM>(kv, qkv, qkvf, base + j0 * k.ld + d, k.ld, k.n - j0, TC_BK, k.dh);
        tc_stage16<DM>(kv + TC_BK * DM, qkv, qkvf, base + j0 * k.ld + 2 * d, k.ld, k.n - j0, TC_BK, k.dh);
        __syncthreads();
        for (int t = 0; t < TC_BK / 16; t++) { /* S = Q K^T, the warp's 16 rows x 16 keys at a time */
            wmma::fill_fragment(sf, 0.0f);
            for (int c = 0; c < DM / KK; c++) {
                wmma::load_matrix_sync(kb, kv + t * 16 * DM + c * KK, DM);
                wmma::mma_sync(sf, qf[c], kb, sf);
            }
            wmma::store_matrix_sync(sc + w * 16 * TC_BK + t * 16, sf, TC_BK, wmma::mem_row_major);
        }
        __syncwarp(); /* the warp's own rows of scores */
        { /* the row's online softmax on its two lanes, each over its 16 keys: their maxima and sums meet through one
           * shuffle each (both lanes then hold the same m, l), exp2 of the scores times scale * log2 e */
            const float *sr = sc + row * TC_BK;
            const int jn = k.n - j0 < TC_BK ? (int)(k.n - j0) : TC_BK;
            float mt = m, s = 0.0f;
            TC_UNROLL4
            for (int j = j1; j < j1 + 16; j++)
                if (j < jn) mt = fmaxf(mt, sr[j] * sl2);
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
            const float cr = tc_ex2(m - mt); /* first tile: 0, and l, O are 0 anyway */
            m = mt;
            TC_UNROLL4
            for (int j = j1; j < j1 + 16; j++) {
                float e = j < jn ? tc_ex2(sr[j] * sl2 - m) : 0.0f;
                s += e;
                tc_put(pp + row * TC_BK + j, on && j < jn ? e * ddp_drop_scale(&dr, rk, u0 + (uint64_t)(j0 + j)) : e);
            }
            const float so = __shfl_xor_sync(0xffffffffu, s, 16);
            l = l * cr + (j1 ? so + s : s + so); /* keys 0..15 first on both lanes: the same bits */
            if (lane < 16) corr[row] = cr;
        }
        __syncwarp();                       /* P and corr of the warp's rows */
        for (int t = 0; t < DM / 16; t++) { /* O = corr O + P V */
            for (int e = 0; e < of[t].num_elements; e++) of[t].x[e] *= corr[w * 16 + (int)rm.x[e]];
            for (int c = 0; c < TC_BK / KK; c++) {
                wmma::load_matrix_sync(pa, pp + w * 16 * TC_BK + c * KK, TC_BK);
                wmma::load_matrix_sync(vb, kv + TC_BK * DM + c * KK * DM + t * 16, DM);
                wmma::mma_sync(of[t], pa, vb, of[t]);
            }
        }
        __syncthreads();
    }
    if (lane < 16) {
        if (i < k.n) lse[(k.lo + i) * H + k.h] = (m + log2f(l)) * TC_LN2; /* natural log, as cuDNN's statistics */
        inv[row] = 1.0f / l;
    }
    __syncwarp();
    const int64_t at = (k.lo + k.r0 + w * 16) * d + k.h * k.dh; /* o is fp32, or bf16 at o16 */
    if (o16)
        tc_out<DM>((__nv_bfloat16 *)o + at, d, of, sc + w * 16 * TC_BK, k.n - k.r0 - w * 16, k.dh, inv + w * 16);
    else
        tc_out<DM>((float *)o + at, d, of, sc + w * 16 * TC_BK, k.n - k.r0 - w * 16, k.dh, inv + w * 16);
#else
    __trap(); /* never launched below sm_80 (tc_device_ok): a wrong launch fails loudly */
#endif
}

/* ------------------------------------------------------------------ backward */
/* dK, dV of the block's 64 key rows over the sample's query rows in order (tiles of 32).
 * Budget (ptxas, CUDA 13.0; T as k_tc_fwd's): static shared memory 2 x 32 x DM x T + 16.5 KiB (+ 8 KiB of
 * bf16 P and dS), 20 992 to 33 280 bytes; 64 to 255 registers; tf32 at DM 64 spills (255 registers; spill stores 40
 * bytes at sm_80, 36 at sm_90); bf16 at DM 64 held to 128 registers (4 blocks an SM, no spills), where the compiler
 * would take 168 otherwise. */
template <int P, int DM>
__global__ void __launch_bounds__(TC_THREADS, P == TC_BF16 && DM == 64 ? 4 : 0)
    k_tc_bwd_kv(const void *qkv, int qkvf, const void *dout, int dof, const float *lse, const float *D, void *dqkv,
                int dqkv16, const int64_t *tile, const int64_t *off, const int64_t *sid, int64_t d, int64_t H,
                ddp_dropout dr)
{
#if TC_ARCH
    TC_TYPES(P);
    __shared__ __align__(32) T qd[2 * TC_BK * DM];     /* Q tile | dO tile; first the block's K rows, then V rows */
    __shared__ __align__(32) float st[TC_BQ * TC_BK];  /* S^T [64 keys][32 queries]; drop(P)^T over it (tf32) */
    __shared__ __align__(32) float dpt[TC_BQ * TC_BK]; /* dP^T; dS^T over it (tf32) */
    __shared__ __align__(32) T pmb[P == TC_TF32 ? 1 : TC_BQ * TC_BK], dsb[P == TC_TF32 ? 1 : TC_BQ * TC_BK];
    __shared__ float ls[TC_BK], Ds[TC_BK];
    __shared__ uint64_t rks[TC_BK];
    T *pm = P == TC_TF32 ? (T *)st : pmb, *dsp = P == TC_TF32 ? (T *)dpt : dsb;
    const ddp_attn_blk k = ddp_attn_block(tile, off, d, H);
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t base = k.lo * k.ld + k.h * k.dh; /* q|k|v's element of the block's first row and head */
    /* dO's block's first row and head (its elements 2 or 4 bytes: dof) */
    const void *dob = (const char *)dout + (k.lo * d + k.h * k.dh) * (dof & TC_IN16 ? 2 : 4);
    frag_a kf[DM / KK], vf[DM / KK], pa;
    frag_b bb;
    frag_bt bt;
    frag_c dk[DM / 16], dv[DM / 16], sf;
    tc_stage16<DM>(qd, qkv, qkvf, base + k.r0 * k.ld + d, k.ld, k.n - k.r0, TC_BQ, k.dh);
    __syncthreads();
    for (int c = 0; c < DM / KK; c++) wmma::load_matrix_sync(kf[c], qd + w * 16 * DM + c * KK, DM);
    __syncthreads();
    tc_stage16<DM>(qd, qkv, qkvf, base + k.r0 * k.ld + 2 * d, k.ld, k.n - k.r0, TC_BQ, k.dh);
    __syncthreads();
    for (int c = 0; c < DM / KK; c++) wmma::load_matrix_sync(vf[c], qd + w * 16 * DM + c * KK, DM);
    for (int t = 0; t < DM / 16; t++) wmma::fill_fragment(dk[t], 0.0f), wmma::fill_fragment(dv[t], 0.0f);
    __syncthreads();
    const int on = dr.p > 0.0f;
    const float sl2 = k.scale * TC_LOG2E;
    for (int64_t i0 = 0; i0 < k.n; i0 += TC_BK) {
        tc_stage16<DM>(qd, qkv, qkvf, base + i0 * k.ld, k.ld, k.n - i0, TC_BK, k.dh);
        tc_stage16<DM>(qd + TC_BK * DM, dob, dof, i0 * d, d, k.n - i0, TC_BK, k.dh);
        const int in = k.n - i0 < TC_BK ? (int)(k.n - i0) : TC_BK;
        if ((int)threadIdx.x < in) {
            int64_t r = k.lo + i0 + threadIdx.x;
            ls[threadIdx.x] = lse[r * H + k.h] * TC_LOG2E, Ds[threadIdx.x] = D[r * H + k.h];
            rks[threadIdx.x] = on ? ddp_drop_samplekey(&dr, sid, k.s, i0 + threadIdx.x) : 0;
        }
        __syncthreads();
        for (int t = 0; t < TC_BK / 16; t++) { /* S^T = K Q^T and dP^T = V dO^T, 16 keys x 16 queries at a time */
            wmma::fill_fragment(sf, 0.0f);
            for (int c = 0; c < DM / KK; c++) {
                wmma::load_matrix_sync(bt, qd + t * 16 * DM + c * KK, DM);
                wmma::mma_sync(sf, kf[c], bt, sf);
            }
            wmma::store_matrix_sync(st + w * 16 * TC_BK + t * 16, sf, TC_BK, wmma::mem_row_major);
            wmma::fill_fragment(sf, 0.0f);
            for (int c = 0; c < DM / KK; c++) {
                wmma::load_matrix_sync(bt, qd + TC_BK * DM + t * 16 * DM + c * KK, DM);
                wmma::mma_sync(sf, vf[c], bt, sf);
            }
            wmma::store_matrix_sync(dpt + w * 16 * TC_BK + t * 16, sf, TC_BK, wmma::mem_row_major);
        }
        __syncwarp(); /* the warp's own rows of S^T and dP^T */
        TC_UNROLL4
        for (int e = lane; e < 16 * TC_BK; e += 32) { /* the warp's 16 key rows x the tile's query rows */
            const int r = w * 16 + e / TC_BK, c = e % TC_BK, x = r * TC_BK + c;
            float pmv = 0.0f, dsv = 0.0f;
            if (c < in) { /* past the sample: no lse to read, zero weights */
                float p = tc_ex2(st[x] * sl2 - ls[c]);
                float ms = on ? ddp_drop_scale(&dr, rks[c], ddp_drop_attn_unit(k.h, k.r0 + r)) : 1.0f;
                dsv = p * (dpt[x] * ms - Ds[c]) * k.scale, pmv = p * ms;
            }
            tc_put(pm + x, pmv);
            tc_put(dsp + x, dsv);
        }
        __syncwarp();                     /* the warp's rows of drop(P)^T and dS^T */
        for (int t = 0; t < DM / 16; t++) /* dV += drop(P)^T dO, dK += dS^T Q */
            for (int c = 0; c < TC_BK / KK; c++) {
                wmma::load_matrix_sync(pa, pm + w * 16 * TC_BK + c * KK, TC_BK);
                wmma::load_matrix_sync(bb, qd + TC_BK * DM + c * KK * DM + t * 16, DM);
                wmma::mma_sync(dv[t], pa, bb, dv[t]);
                wmma::load_matrix_sync(pa, dsp + w * 16 * TC_BK + c * KK, TC_BK);
                wmma::load_matrix_sync(bb, qd + c * KK * DM + t * 16, DM);
                wmma::mma_sync(dk[t], pa, bb, dk[t]);
            }
        __syncthreads();
    }
    const int64_t at = (k.lo + k.r0 + w * 16) * k.ld + k.h * k.dh, rows = k.n - k.r0 - w * 16; /* dqkv16: bf16 */
    if (dqkv16) {
        tc_out<DM>((__nv_bfloat16 *)dqkv + at + d, k.ld, dk, st + w * 16 * TC_BK, rows, k.dh, (const float *)0);
        tc_out<DM>((__nv_bfloat16 *)dqkv + at + 2 * d, k.ld, dv, st + w * 16 * TC_BK, rows, k.dh, (const float *)0);
    } else {
        tc_out<DM>((float *)dqkv + at + d, k.ld, dk, st + w * 16 * TC_BK, rows, k.dh, (const float *)0);
        tc_out<DM>((float *)dqkv + at + 2 * d, k.ld, dv, st + w * 16 * TC_BK, rows, k.dh, (const float *)0);
    }
#else
    __trap(); /* never launched below sm_80 (tc_device_ok): a wrong launch fails loudly */
#endif
}

/* dQ of the block's 64 query rows over the sample's key rows in order (tiles of 32).
 * Budget (ptxas, CUDA 13.0; T as k_tc_fwd's): static shared memory 2 x 32 x DM x T + 17 KiB (+ 4 KiB of bf16
 * dS), 21 504 to 33 792 bytes (tf32, DM 64: the most of the three kernels); 54 to 168 registers, no spills (but
 * tf32 at DM 64 on sm_80: 4 bytes). */
template <int P, int DM>
__global__ void __launch_bounds__(TC_THREADS)
    k_tc_bwd_q(const void *qkv, int qkvf, const void *dout, int dof, const float *lse, const float *D, void *dqkv,
               int dqkv16, const int64_t *tile, const int64_t *off, const int64_t *sid, int64_t d, int64_t H,
               ddp_dropout dr)
{
#if TC_ARCH
    TC_TYPES(P);
    __shared__ __align__(32) T kv[2 * TC_BK * DM];     /* K tile | V tile; first the block's Q rows, then dO rows */
    __shared__ __align__(32) float sc[TC_BQ * TC_BK];  /* S [64 queries][32 keys]; the output's staging */
    __shared__ __align__(32) float dps[TC_BQ * TC_BK]; /* dP; dS over it (tf32) */
    __shared__ __align__(32) T dsb[P == TC_TF32 ? 1 : TC_BQ * TC_BK];
    __shared__ float ls[TC_BQ], Ds[TC_BQ];
    __shared__ uint64_t rks[TC_BQ];
    T *dsp = P == TC_TF32 ? (T *)dps : dsb;
    const ddp_attn_blk k = ddp_attn_block(tile, off, d, H);
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t base = k.lo * k.ld + k.h * k.dh; /* q|k|v's element of the block's first row and head */
    const int on = dr.p > 0.0f;
    const float sl2 = k.scale * TC_LOG2E;
    frag_a qf[DM / KK], df[DM / KK], pa;
    frag_b bb;
    frag_bt bt;
    frag_c dq[DM / 16], sf;
    tc_stage16<DM>(kv, qkv, qkvf, base + k.r0 * k.ld, k.ld, k.n - k.r0, TC_BQ, k.dh);
    if (threadIdx.x < TC_BQ) { /* the rows' lse, delta and dropout keys (0 past the sample: finite, unused) */
        const int64_t i = k.r0 + threadIdx.x, r = k.lo + i;
        ls[threadIdx.x] = i < k.n ? lse[r * H + k.h] * TC_LOG2E : 0.0f;
        Ds[threadIdx.x] = i < k.n ? D[r * H + k.h] : 0.0f;
        rks[threadIdx.x] = on && i < k.n ? ddp_drop_samplekey(&dr, sid, k.s, i) : 0;
    }
    __syncthreads();
    for (int c = 0; c < DM / KK; c++) wmma::load_matrix_sync(qf[c], kv + w * 16 * DM + c * KK, DM);
    __syncthreads();
    tc_stage16<DM>(kv, dout, dof, (k.lo + k.r0) * d + k.h * k.dh, d, k.n - k.r0, TC_BQ, k.dh);
    __syncthreads();
    for (int c = 0; c < DM / KK; c++) wmma::load_matrix_sync(df[c], kv + w * 16 * DM + c * KK, DM);
    for (int t = 0; t < DM / 16; t++) wmma::fill_fragment(dq[t], 0.0f);
    __syncthreads();
    const uint64_t u0 = ddp_drop_attn_unit(k.h, 0);
    for (int64_t j0 = 0; j0 < k.n; j0 += TC_BK) {
        tc_stage16<DM>(kv, qkv, qkvf, base + j0 * k.ld + d, k.ld, k.n - j0, TC_BK, k.dh);
        tc_stage16<DM>(kv + TC_BK * DM, qkv, qkvf, base + j0 * k.ld + 2 * d, k.ld, k.n - j0, TC_BK, k.dh);
        __syncthreads();
        for (int t = 0; t < TC_BK / 16; t++) { /* S = Q K^T and dP = dO V^T */
            wmma::fill_fragment(sf, 0.0f);
            for (int c = 0; c < DM / KK; c++) {
                wmma::load_matrix_sync(bt, kv + t * 16 * DM + c * KK, DM);
                wmma::mma_sync(sf, qf[c], bt, sf);
            }
            wmma::store_matrix_sync(sc + w * 16 * TC_BK + t * 16, sf, TC_BK, wmma::mem_row_major);
            wmma::fill_fragment(sf, 0.0f);
            for (int c = 0; c < DM / KK; c++) {
                wmma::load_matrix_sync(bt, kv + TC_BK * DM + t * 16 * DM + c * KK, DM);
                wmma::mma_sync(sf, df[c], bt, sf);
            }
            wmma::store_matrix_sync(dps + w * 16 * TC_BK + t * 16, sf, TC_BK, wmma::mem_row_major);
        }
        __syncwarp(); /* the warp's own rows of S and dP */
        const int jn = k.n - j0 < TC_BK ? (int)(k.n - j0) : TC_BK;
        TC_UNROLL4
        for (int e = lane; e < 16 * TC_BK; e += 32) { /* the warp's 16 query rows x the tile's keys */
            const int r = w * 16 + e / TC_BK, c = e % TC_BK, x = r * TC_BK + c;
            float dsv = 0.0f;
            if (c < jn) {
                float p = tc_ex2(sc[x] * sl2 - ls[r]), dp = dps[x];
                if (on) dp *= ddp_drop_scale(&dr, rks[r], u0 + (uint64_t)(j0 + c));
                dsv = p * (dp - Ds[r]) * k.scale;
            }
            tc_put(dsp + x, dsv);
        }
        __syncwarp();                     /* the warp's rows of dS */
        for (int t = 0; t < DM / 16; t++) /* dQ += dS K */
            for (int c = 0; c < TC_BK / KK; c++) {
                wmma::load_matrix_sync(pa, dsp + w * 16 * TC_BK + c * KK, TC_BK);
                wmma::load_matrix_sync(bb, kv + c * KK * DM + t * 16, DM);
                wmma::mma_sync(dq[t], pa, bb, dq[t]);
            }
        __syncthreads();
    }
    const int64_t at = (k.lo + k.r0 + w * 16) * k.ld + k.h * k.dh, rows = k.n - k.r0 - w * 16; /* dqkv16: bf16 */
    if (dqkv16)
        tc_out<DM>((__nv_bfloat16 *)dqkv + at, k.ld, dq, sc + w * 16 * TC_BK, rows, k.dh, (const float *)0);
    else
        tc_out<DM>((float *)dqkv + at, k.ld, dq, sc + w * 16 * TC_BK, rows, k.dh, (const float *)0);
#else
    __trap(); /* never launched below sm_80 (tc_device_ok): a wrong launch fails loudly */
#endif
}

/* ------------------------------------------------------------------ ops */
/* 1: the device has tensor cores for tf32 and bf16 WMMA (sm_80 and later), asked once per device */
static ddp_status tc_device_ok(ddp_backend *b, int *ok)
{
    static int known[64]; /* 0: not asked yet, 1: no, 2: yes */
    const int dev = cuda_of(b)->device;
    if (dev < 0 || dev >= 64) return *ok = 0, DDP_OK;
    if (!known[dev]) {
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
        int ok8 = p.major >= 8;
#if !DDP_CUDA_EMULATED
        if (ok8) { /* and the code the driver loads for it is sm_80 code, not an older target's PTX compiled at load
                    * time (a build for MPIDDP_CUDA_ARCHITECTURES below 80 only), whose bodies are empty */
            cudaFuncAttributes fa;
            CUDA_CHECK(cudaFuncGetAttributes(&fa, k_tc_fwd<TC_TF32, 16>));
            ok8 = fa.ptxVersion >= 80;
        }
#endif
        known[dev] = ok8 ? 2 : 1;
    }
    *ok = known[dev] == 2;
    return DDP_OK;
}

ddp_status ddp_cuda_attention_tc(ddp_backend *b, int64_t dh, int *use)
{
    *use = 0;
    if (cuda_of(b)->precision == DDP_PRECISION_FP32 || dh > TC_DMAX) return DDP_OK;
    return tc_device_ok(b, use);
}

/* the form the kernels stage x in (TC_IN16, TC_INV): by 16-byte groups where dh is a multiple of one (8 bf16 or 4
 * fp32; then so are d, the row strides and every tile's first element, so each group is whole and aligned) and x is
 * 16-byte aligned. Tested here once per launch: a test of each tile's pointer and stride in the kernels took the
 * tf32 forward at DM 64 from 130 registers to 168 and a spill (ptxas, sm_90). */
static int tc_form(const void *x, int x16, int64_t dh)
{
    return (x16 ? TC_IN16 : 0) | (dh % (x16 ? 8 : 4) == 0 && ((uintptr_t)x & 15) == 0 ? TC_INV : 0);
}

template <int P, int DM>
static ddp_status tc_fwd(ddp_backend *b, const void *qkv, int qkv16, void *o, int o16, float *lse,
                         const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    static void (*const kernel)(const void *, int, void *, int, float *, const int64_t *, const int64_t *,
                                const int64_t *, int64_t, int64_t, ddp_dropout) = k_tc_fwd<P, DM>;
    DDP_LAUNCH(kernel, ddp_attn_grid(pack, heads), TC_THREADS, 0, cuda_of(b)->stream, qkv,
               tc_form(qkv, qkv16, d / heads), o, o16, lse, pack->tile, pack->off, pack->sid, d, (int64_t)heads, *dr);
    LAUNCH_CHECK();
    return DDP_OK;
}

template <int P, int DM>
static ddp_status tc_bwd(ddp_backend *b, const void *qkv, int qkv16, const void *dout, int do16, const float *lse,
                         void *dqkv, int dqkv16, const float *delta, const ddp_packing *pack, int64_t d, int heads,
                         const ddp_dropout *dr)
{
    typedef void (*kernel_t)(const void *, int, const void *, int, const float *, const float *, void *, int,
                             const int64_t *, const int64_t *, const int64_t *, int64_t, int64_t, ddp_dropout);
    static const kernel_t kv = k_tc_bwd_kv<P, DM>, q = k_tc_bwd_q<P, DM>; /* a name without a comma to launch */
    cudaStream_t s = cuda_of(b)->stream;
    const int qf = tc_form(qkv, qkv16, d / heads), df = tc_form(dout, do16, d / heads);
    DDP_LAUNCH(kv, ddp_attn_grid(pack, heads), TC_THREADS, 0, s, qkv, qf, dout, df, lse, delta, dqkv, dqkv16,
               pack->tile, pack->off, pack->sid, d, (int64_t)heads, *dr);
    LAUNCH_CHECK();
    DDP_LAUNCH(q, ddp_attn_grid(pack, heads), TC_THREADS, 0, s, qkv, qf, dout, df, lse, delta, dqkv, dqkv16, pack->tile,
               pack->off, pack->sid, d, (int64_t)heads, *dr);
    LAUNCH_CHECK();
    return DDP_OK;
}

/* the width's and precision's instantiation (dh <= TC_DMAX, precision tf32 or bf16: ddp_cuda_attention_tc) */
#define TC_PICK(fn, ...)                                                                       \
    do {                                                                                       \
        const int bf = cuda_of(b)->precision == DDP_PRECISION_BF16, dh = (int)(d / heads);     \
        if (dh <= 16) return bf ? fn<TC_BF16, 16>(__VA_ARGS__) : fn<TC_TF32, 16>(__VA_ARGS__); \
        if (dh <= 32) return bf ? fn<TC_BF16, 32>(__VA_ARGS__) : fn<TC_TF32, 32>(__VA_ARGS__); \
        return bf ? fn<TC_BF16, 64>(__VA_ARGS__) : fn<TC_TF32, 64>(__VA_ARGS__);               \
    } while (0)

ddp_status ddp_cuda_attention_tc_fwd(ddp_backend *b, const void *qkv, int qkv16, void *o, int o16, float *lse,
                                     const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    TC_PICK(tc_fwd, b, qkv, qkv16, o, o16, lse, pack, d, heads, dr);
}

ddp_status ddp_cuda_attention_tc_bwd(ddp_backend *b, const void *qkv, int qkv16, const void *dout, int do16,
                                     const float *lse, void *dqkv, int dqkv16, const float *delta,
                                     const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    TC_PICK(tc_bwd, b, qkv, qkv16, dout, do16, lse, dqkv, dqkv16, delta, pack, d, heads, dr);
}
