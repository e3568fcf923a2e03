/* backend_cuda_attn.cu — the CUDA backend's packed attention (attention_fwd/_bwd of the encoder's op table): the fp32
 * FlashAttention-2-style SIMT kernels, the reference kernels for heads wider than ATT_DMAX, and the ops, which hand
 * tf32 and bf16 to the tensor-core kernels of backend_cuda_attn_tc.cu where those apply, and first to cuDNN
 * (backend_cuda_sdpa.cu) where attention_select chose it. */
#include "mpi_ddp/backend/cuda/backend_cuda_priv.h"

/* rows per block (a tile): query rows (forward, dQ) or key rows (dK/dV), one thread each */
#define ATT_BQ DDP_ATT_TILE
#define ATT_BK 32    /* rows per shared tile */
#define ATT_DMAX 128 /* widest head of the tiled kernels */
static_assert(ATT_BQ == 64 && ATT_BQ == 2 * ATT_BK, "a block's rows pass through two shared tiles");

#ifdef __CUDACC__
#define ATT_UNROLL _Pragma("unroll")
#else
#define ATT_UNROLL
#endif

/* ------------------------------------------------------------------ tiles */
/* Rows [0, ATT_BK) of src (row stride ld, dh columns) into the tile t [ATT_BK][DM], zero past `rows` rows and
 * past dh columns; consecutive threads take consecutive floats (float4s when vec) of a row. */
template <int DM>
static __device__ inline void att_load(float4 *t, const float *src, int64_t ld, int64_t rows, int dh, int vec)
{
    if (vec) {
        for (int e = threadIdx.x; e < ATT_BK * DM / 4; e += blockDim.x) {
            int r = e / (DM / 4), c = e % (DM / 4) * 4;
            t[e] = r < rows && c < dh ? *(const float4 *)(src + r * ld + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
        float *f = (float *)t;
        for (int e = threadIdx.x; e < ATT_BK * DM; e += blockDim.x) {
            int r = e / DM, c = e % DM;
            f[e] = r < rows && c < dh ? src[r * ld + c] : 0.0f;
        }
    }
}

/* The tile t's first `rows` rows (dh columns) to dst (row stride ld), fp32 or rounded to bf16 (vst_out); the access
 * pattern of att_load. */
template <int DM, class T>
static __device__ inline void att_store(T *dst, int64_t ld, const float4 *t, int64_t rows, int dh, int vec)
{
    const float *f = (const float *)t;
    if (vec) {
        for (int e = threadIdx.x; e < ATT_BK * DM / 4; e += blockDim.x) {
            int r = e / (DM / 4), c = e % (DM / 4) * 4;
            if (r < rows && c < dh) vst_out<4>(dst + r * ld, c, f + 4 * e);
        }
    } else {
        for (int e = threadIdx.x; e < ATT_BK * DM; e += blockDim.x) {
            int r = e / DM, c = e % DM;
            if (r < rows && c < dh) vst_out<1>(dst + r * ld, c, f + e);
        }
    }
}

/* This thread's row (row threadIdx.x of the block's 64) of the two tiles a (rows 0..31) and b (32..63). */
template <int DM> static __device__ inline float *att_own(float4 *a, float4 *b)
{
    return (float *)(threadIdx.x < ATT_BK ? a : b) + (threadIdx.x % ATT_BK) * DM;
}

/* Row threadIdx.x of the 64 rows at src (zero past `rows`) into x, through the tiles a and b. */
template <int DM>
static __device__ inline void att_rows_in(float (&x)[DM], float4 *a, float4 *b, const float *src, int64_t ld,
                                          int64_t rows, int dh, int vec)
{
    att_load<DM>(a, src, ld, rows, dh, vec);
    att_load<DM>(b, src + ATT_BK * ld, ld, rows - ATT_BK, dh, vec);
    __syncthreads();
    const float *own = att_own<DM>(a, b);
    ATT_UNROLL
    for (int c = 0; c < DM; c++) x[c] = own[c];
    __syncthreads();
}

/* x * mul of every thread to row threadIdx.x of the 64 rows at dst (the first `rows` only), through a and b; T is
 * float or __nv_bfloat16 (att_store). */
template <int DM, class T>
static __device__ inline void att_rows_out(const float (&x)[DM], float mul, float4 *a, float4 *b, T *dst, int64_t ld,
                                           int64_t rows, int dh, int vec)
{
    float *own = att_own<DM>(a, b);
    ATT_UNROLL
    for (int c = 0; c < DM; c++) own[c] = x[c] * mul;
    __syncthreads();
    att_store<DM, T>(dst, ld, a, rows, dh, vec);
    att_store<DM, T>(dst + ATT_BK * ld, ld, b, rows - ATT_BK, dh, vec);
    __syncthreads();
}

template <int DM> static __device__ inline float att_dot(const float (&x)[DM], const float *y)
{
    float s = 0.0f;
    ATT_UNROLL
    for (int c = 0; c < DM; c++) s += x[c] * y[c];
    return s;
}


/* ------------------------------------------------------------------ tiled kernels */
/* The forward: a block per (sample, tile of 64 query rows, head), thread t owning query row t.
 * Budget (ptxas sm_80, CUDA 13.0): static shared memory 2 x 32 x DM floats of K and V tiles (4, 8, 16, 32 KiB) plus
 * 8 KiB of scores; q and the accumulator keep 2 x DM floats a thread: 75, 94 and 166 registers at DM 16, 32 and 64,
 * and at DM 128 beyond the 255 registers, so they spill (160 bytes of spill stores). o is [R, d] of T (fp32, or bf16:
 * attention_fwd's o16). */
template <int DM, class T>
__global__ void __launch_bounds__(ATT_BQ)
    k_flash_fwd(const float *qkv, T *o, float *lse, const int64_t *tile, const int64_t *off, const int64_t *sid,
                int64_t d, int64_t H, int vec, ddp_dropout dr)
{
    __shared__ float4 ks[ATT_BK * DM / 4], vs[ATT_BK * DM / 4];
    __shared__ float sc[ATT_BK][ATT_BQ]; /* a key tile's scores, a column per thread (no bank conflicts) */
    const ddp_attn_blk k = ddp_attn_block(tile, off, d, H);
    const float *base = qkv + k.lo * k.ld + k.h * k.dh; /* q of the sample's first row, head h */
    const int64_t i = k.r0 + threadIdx.x;
    float q[DM], acc[DM];
    att_rows_in<DM>(q, ks, vs, base + k.r0 * k.ld, k.ld, k.n - k.r0, k.dh, vec);
    ATT_UNROLL
    for (int c = 0; c < DM; c++) acc[c] = 0.0f;
    const int on = dr.p > 0.0f;
    const uint64_t rk = on && i < k.n ? ddp_drop_samplekey(&dr, sid, k.s, i) : 0, u0 = ddp_drop_attn_unit(k.h, 0);
    const float *kf = (const float *)ks, *vf = (const float *)vs;
    float m = -1e30f, l = 0.0f; /* below any finite score; never an infinity (fast-math builds) */
    for (int64_t j0 = 0; j0 < k.n; j0 += ATT_BK) {
        att_load<DM>(ks, base + j0 * k.ld + d, k.ld, k.n - j0, k.dh, vec);
        att_load<DM>(vs, base + j0 * k.ld + 2 * d, k.ld, k.n - j0, k.dh, vec);
        __syncthreads();
        const int jn = k.n - j0 < ATT_BK ? (int)(k.n - j0) : ATT_BK;
        float mt = m;
        for (int j = 0; j < jn; j++) {
            float sj = att_dot<DM>(q, kf + j * DM) * k.scale;
            sc[j][threadIdx.x] = sj;
            mt = fmaxf(mt, sj);
        }
        const float corr = ddp_expf(m - mt); /* first tile: ~0, and l, acc are 0 anyway */
        l *= corr;
        m = mt;
        ATT_UNROLL
        for (int c = 0; c < DM; c++) acc[c] *= corr;
        for (int j = 0; j < jn; j++) {
            float e = ddp_expf(sc[j][threadIdx.x] - m);
            l += e;
            if (on) e *= ddp_drop_scale(&dr, rk, u0 + (uint64_t)(j0 + j));
            ATT_UNROLL
            for (int c = 0; c < DM; c++) acc[c] += e * vf[j * DM + c];
        }
        __syncthreads();
    }
    if (i < k.n) lse[(k.lo + i) * H + k.h] = m + logf(l);
    att_rows_out<DM, T>(acc, i < k.n ? 1.0f / l : 0.0f, ks, vs, o + (k.lo + k.r0) * d + k.h * k.dh, d, k.n - k.r0, k.dh,
                        vec);
}

/* dK, dV of the block's 64 key rows: dv_j = sum_i drop(P_ij) dO_i, dk_j = scale sum_i dS_ij q_i over the
 * sample's query rows i in order, dS_ij = P_ij (drop(dO_i . v_j) - D_i).
 * Budget (ptxas sm_80, CUDA 13.0): static shared memory 2 x 32 x DM floats of Q and dO tiles plus 512 bytes of
 * per-row values (lse, delta, dropout keys); k, v, dk and dv keep 4 x DM floats a thread: 117 and 211 registers at
 * DM 16 and 32, from DM 64 the 255 registers and spills (spill stores:
 * 628 bytes at DM 64, 3216 at 128). dqkv is [R, 3d] of T (fp32, or bf16: attention_bwd's dqkv16). */
template <int DM, class T>
__global__ void __launch_bounds__(ATT_BQ)
    k_flash_bwd_kv(const float *qkv, const float *dout, const float *lse, const float *D, T *dqkv, const int64_t *tile,
                   const int64_t *off, const int64_t *sid, int64_t d, int64_t H, int vec, ddp_dropout dr)
{
    __shared__ float4 qs[ATT_BK * DM / 4], ds[ATT_BK * DM / 4];
    __shared__ float ls[ATT_BK], Ds[ATT_BK];
    __shared__ uint64_t rks[ATT_BK];
    const ddp_attn_blk k = ddp_attn_block(tile, off, d, H);
    const float *base = qkv + k.lo * k.ld + k.h * k.dh, *dob = dout + k.lo * d + k.h * k.dh;
    const int64_t j = k.r0 + threadIdx.x;
    float kr[DM], vr[DM], dk[DM], dv[DM];
    att_rows_in<DM>(kr, qs, ds, base + k.r0 * k.ld + d, k.ld, k.n - k.r0, k.dh, vec);
    att_rows_in<DM>(vr, qs, ds, base + k.r0 * k.ld + 2 * d, k.ld, k.n - k.r0, k.dh, vec);
    ATT_UNROLL
    for (int c = 0; c < DM; c++) dk[c] = dv[c] = 0.0f;
    const int on = dr.p > 0.0f;
    const uint64_t unit = ddp_drop_attn_unit(k.h, j);
    const float *qf = (const float *)qs, *df = (const float *)ds;
    for (int64_t i0 = 0; i0 < k.n; i0 += ATT_BK) {
        att_load<DM>(qs, base + i0 * k.ld, k.ld, k.n - i0, k.dh, vec);
        att_load<DM>(ds, dob + i0 * d, d, k.n - i0, k.dh, vec);
        const int in = k.n - i0 < ATT_BK ? (int)(k.n - i0) : ATT_BK;
        if ((int)threadIdx.x < in) {
            int64_t r = k.lo + i0 + threadIdx.x;
            ls[threadIdx.x] = lse[r * H + k.h], Ds[threadIdx.x] = D[r * H + k.h];
            rks[threadIdx.x] = on ? ddp_drop_samplekey(&dr, sid, k.s, i0 + threadIdx.x) : 0;
        }
        __syncthreads();
        for (int ii = 0; ii < in; ii++) {
            const float *qi = qf + ii * DM, *doi = df + ii * DM;
            float p = ddp_expf(att_dot<DM>(kr, qi) * k.scale - ls[ii]);
            float ms = on ? ddp_drop_scale(&dr, rks[ii], unit) : 1.0f;
            float dp = att_dot<DM>(vr, doi) * ms;
            float dsv = p * (dp - Ds[ii]) * k.scale, pm = p * ms;
            ATT_UNROLL
            for (int c = 0; c < DM; c++) {
                dv[c] += pm * doi[c];
                dk[c] += dsv * qi[c];
            }
        }
        __syncthreads();
    }
    T *out = dqkv + (k.lo + k.r0) * k.ld + k.h * k.dh;
    att_rows_out<DM, T>(dk, 1.0f, qs, ds, out + d, k.ld, k.n - k.r0, k.dh, vec);
    att_rows_out<DM, T>(dv, 1.0f, qs, ds, out + 2 * d, k.ld, k.n - k.r0, k.dh, vec);
}

/* dQ of the block's 64 query rows: dq_i = scale sum_j dS_ij k_j over the sample's key rows j in order.
 * Budget (ptxas sm_80, CUDA 13.0): static shared memory 2 x 32 x DM floats of K and V tiles; q, dO and dq keep
 * 3 x DM floats a thread: 93 and 156 registers at DM 16 and 32, from DM 64 the 255 registers and spills (spill
 * stores: 96 bytes at DM 64, 1448 at 128). dqkv of T as k_flash_bwd_kv's. */
template <int DM, class T>
__global__ void __launch_bounds__(ATT_BQ)
    k_flash_bwd_q(const float *qkv, const float *dout, const float *lse, const float *D, T *dqkv, const int64_t *tile,
                  const int64_t *off, const int64_t *sid, int64_t d, int64_t H, int vec, ddp_dropout dr)
{
    __shared__ float4 ks[ATT_BK * DM / 4], vs[ATT_BK * DM / 4];
    const ddp_attn_blk k = ddp_attn_block(tile, off, d, H);
    const float *base = qkv + k.lo * k.ld + k.h * k.dh;
    const int64_t i = k.r0 + threadIdx.x;
    float q[DM], dor[DM], dq[DM];
    att_rows_in<DM>(q, ks, vs, base + k.r0 * k.ld, k.ld, k.n - k.r0, k.dh, vec);
    att_rows_in<DM>(dor, ks, vs, dout + (k.lo + k.r0) * d + k.h * k.dh, d, k.n - k.r0, k.dh, vec);
    ATT_UNROLL
    for (int c = 0; c < DM; c++) dq[c] = 0.0f;
    const int on = dr.p > 0.0f;
    const uint64_t rk = on && i < k.n ? ddp_drop_samplekey(&dr, sid, k.s, i) : 0, u0 = ddp_drop_attn_unit(k.h, 0);
    const float li = i < k.n ? lse[(k.lo + i) * H + k.h] : 0.0f, Di = i < k.n ? D[(k.lo + i) * H + k.h] : 0.0f;
    const float *kf = (const float *)ks, *vf = (const float *)vs;
    for (int64_t j0 = 0; j0 < k.n; j0 += ATT_BK) {
        att_load<DM>(ks, base + j0 * k.ld + d, k.ld, k.n - j0, k.dh, vec);
        att_load<DM>(vs, base + j0 * k.ld + 2 * d, k.ld, k.n - j0, k.dh, vec);
        __syncthreads();
        const int jn = k.n - j0 < ATT_BK ? (int)(k.n - j0) : ATT_BK;
        for (int j = 0; j < jn; j++) {
            const float *kj = kf + j * DM;
            float p = ddp_expf(att_dot<DM>(q, kj) * k.scale - li);
            float dp = att_dot<DM>(dor, vf + j * DM);
            if (on) dp *= ddp_drop_scale(&dr, rk, u0 + (uint64_t)(j0 + j));
            float dsv = p * (dp - Di) * k.scale;
            ATT_UNROLL
            for (int c = 0; c < DM; c++) dq[c] += dsv * kj[c];
        }
        __syncthreads();
    }
    att_rows_out<DM, T>(dq, 1.0f, ks, vs, dqkv + (k.lo + k.r0) * k.ld + k.h * k.dh, k.ld, k.n - k.r0, k.dh, vec);
}

/* ------------------------------------------------------------------ reference kernels (dh > ATT_DMAX) */
/* Where thread i of an attention kernel works: row r and head h (i = r H + h), the row's sample s, its first
 * row lo and length n; offsets into qkv (ld = 3d) of this row's and the sample's first row's head h, and
 * into the [R, d] o/dout arrays of this row's head h. */
struct attn_at {
    int64_t r, h, s, lo, n, dh, ld, row, first, orow;
    float scale;
};
static __device__ __host__ inline attn_at attn_locate(int64_t i, const int64_t *off, const int64_t *seg, int64_t d,
                                                      int64_t H)
{
    attn_at a;
    a.r = i / H, a.h = i % H, a.s = seg[a.r], a.lo = off[a.s], a.n = off[a.s + 1] - a.lo, a.dh = d / H, a.ld = 3 * d;
    a.row = a.r * a.ld + a.h * a.dh, a.first = a.lo * a.ld + a.h * a.dh, a.orow = a.r * d + a.h * a.dh;
    a.scale = 1.0f / sqrtf((float)a.dh);
    return a;
}

__global__ void k_attn_fwd(const float *qkv, float *o, float *lse, const int64_t *off, const int64_t *seg,
                           const int64_t *sid, int64_t R, int64_t d, int64_t H, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    attn_at a = attn_locate(i, off, seg, d, H);
    lse[i] = ddp_attn_row_fwd(qkv + a.row, qkv + a.first + d, qkv + a.first + 2 * d, a.ld, a.n, a.dh, a.scale,
                              o + a.orow, &dr, ddp_drop_samplekey(&dr, sid, a.s, a.r - a.lo),
                              ddp_drop_attn_unit(a.h, 0));
}

static __device__ inline float att_widen(float x) { return x; }
static __device__ inline float att_widen(__nv_bfloat16 x) { return __bfloat162float(x); }

/* D[r, h] = dO[r, head h] . O[r, head h], dO of G and O of T (fp32, or bf16 widened: do16, o16), in ddp_dot's order
 * (the tiled path's too) */
template <class G, class T>
__global__ void k_attn_D(const G *dout, const T *o, float *D, int64_t R, int64_t d, int64_t H)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    int64_t r = i / H, h = i % H, dh = d / H;
    const G *g = dout + r * d + h * dh;
    const T *x = o + r * d + h * dh;
    float s = 0.0f;
    for (int64_t c = 0; c < dh; c++) s += att_widen(g[c]) * att_widen(x[c]);
    D[i] = s;
}

/* Thread (r, h) writes row r's gradients of head h: dq as a query row, over the sample's key rows, and dk, dv
 * as a key row, over its query rows. The two halves read only the forward's values, so one launch does both. */
__global__ void k_attn_bwd(const float *qkv, const float *dout, const float *lse, const float *D, float *dqkv,
                           const int64_t *off, const int64_t *seg, const int64_t *sid, int64_t R, int64_t d, int64_t H,
                           ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    attn_at a = attn_locate(i, off, seg, d, H);
    ddp_attn_row_bwd_q(qkv + a.row, qkv + a.first + d, qkv + a.first + 2 * d, a.ld, a.n, a.dh, a.scale, dout + a.orow,
                       lse[i], D[i], dqkv + a.row, &dr, ddp_drop_samplekey(&dr, sid, a.s, a.r - a.lo),
                       ddp_drop_attn_unit(a.h, 0));
    ddp_attn_row_bwd_kv(qkv + a.first, qkv + a.row + d, qkv + a.row + 2 * d, a.ld, a.n, a.dh, a.scale,
                        dout + a.lo * d + a.h * a.dh, d, lse + a.lo * H + a.h, D + a.lo * H + a.h, H, dqkv + a.row + d,
                        dqkv + a.row + 2 * d, &dr, dr.p > 0.0f ? sid[a.s] : 0, ddp_drop_attn_unit(a.h, a.r - a.lo));
}

/* ------------------------------------------------------------------ ops */
/* float4 accesses in the tiled kernels when every row of every head starts 16-byte aligned (dh % 4 == 0 and the
 * buffers aligned). */
static int att_vec(int64_t dh, const void *a, const void *b, const void *c)
{
    return dh % 4 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

/* The tiled kernels' grid needs the batch's tile map (ddp_packing.tile), which the model stages with the batch. */
static ddp_status tiles_check(const ddp_packing *pack)
{
    if (pack->tile && pack->tiles == ddp_packing_tiles(pack->hoff, pack->B, NULL)) return DDP_OK;
    return ddp_set_error(DDP_ERR_ARG, "attention: the packing's tile map is missing or not of its batch (%lld tiles)",
                         (long long)pack->tiles);
}

template <int DM>
static ddp_status att_fwd(ddp_backend *b, const float *qkv, void *o, int o16, float *lse, const ddp_packing *pack,
                          int64_t d, int heads, const ddp_dropout *dr)
{
    /* float4 loads of qkv; the stores of o are 16 (fp32) or 8 (bf16) bytes wide */
    int vec = att_vec(d / heads, qkv, qkv, qkv) && (uintptr_t)o % (o16 ? 8 : 16) == 0;
    cudaStream_t st = cuda_of(b)->stream;
    if (o16) {
        static const auto kernel = k_flash_fwd<DM, __nv_bfloat16>; /* a name without a comma */
        DDP_LAUNCH(kernel, ddp_attn_grid(pack, heads), ATT_BQ, 0, st, qkv, (__nv_bfloat16 *)o, lse, pack->tile,
                   pack->off, pack->sid, d, (int64_t)heads, vec, *dr);
    } else {
        static const auto kernel = k_flash_fwd<DM, float>;
        DDP_LAUNCH(kernel, ddp_attn_grid(pack, heads), ATT_BQ, 0, st, qkv, (float *)o, lse, pack->tile, pack->off,
                   pack->sid, d, (int64_t)heads, vec, *dr);
    }
    LAUNCH_CHECK();
    return DDP_OK;
}

/* The reference forward (dh > ATT_DMAX): its row body accumulates in the output, so at o16 it writes fp32 rows into
 * the backend's o32 scratch (grown in stream order), rounded into o after */
static ddp_status ref_fwd(ddp_backend *b, const float *qkv, void *o, int o16, float *lse, const ddp_packing *pack,
                          int64_t d, int heads, const ddp_dropout *dr)
{
    cuda_impl *c = cuda_of(b);
    const size_t n = (size_t)(pack->R * d);
    float *o32 = (float *)o;
    if (o16) {
        DDP_CHECK(ddp_cuda_grow(c, &c->o32, &c->o32_cap, n * sizeof(float), "attention's fp32 output"));
        o32 = (float *)c->o32;
    }
    ENC_LAUNCH(k_attn_fwd, pack->R * heads, qkv, o32, lse, pack->off, pack->seg, pack->sid, pack->R, d, (int64_t)heads,
               *dr);
    return o16 ? ddp_cuda_to_bf16(c, o32, pack->R, d, d, (__nv_bfloat16 *)o) : DDP_OK;
}

template <int DM, class T>
static ddp_status att_bwd_t(ddp_backend *b, const float *qkv, const float *dout, const float *lse, T *dqkv,
                            const float *delta, const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    /* float4 loads of qkv and dout; the stores of dqkv are 16 (fp32) or 8 (bf16) bytes wide */
    int vec = att_vec(d / heads, qkv, dout, dout) && (uintptr_t)dqkv % (sizeof(T) == 4 ? 16 : 8) == 0;
    cudaStream_t st = cuda_of(b)->stream;
    static const auto kv = k_flash_bwd_kv<DM, T>, q = k_flash_bwd_q<DM, T>; /* names without a comma */
    DDP_LAUNCH(kv, ddp_attn_grid(pack, heads), ATT_BQ, 0, st, qkv, dout, lse, delta, dqkv, pack->tile, pack->off,
               pack->sid, d, (int64_t)heads, vec, *dr);
    LAUNCH_CHECK();
    DDP_LAUNCH(q, ddp_attn_grid(pack, heads), ATT_BQ, 0, st, qkv, dout, lse, delta, dqkv, pack->tile, pack->off,
               pack->sid, d, (int64_t)heads, vec, *dr);
    LAUNCH_CHECK();
    return DDP_OK;
}

template <int DM>
static ddp_status att_bwd(ddp_backend *b, const float *qkv, const float *dout, const float *lse, void *dqkv, int dqkv16,
                          const float *delta, const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    if (dqkv16) return att_bwd_t<DM>(b, qkv, dout, lse, (__nv_bfloat16 *)dqkv, delta, pack, d, heads, dr);
    return att_bwd_t<DM>(b, qkv, dout, lse, (float *)dqkv, delta, pack, d, heads, dr);
}

/* The reference backward (dh > ATT_DMAX): its row bodies accumulate dk and dv in the output, so at dqkv16 it writes
 * fp32 rows into the backend's o32 scratch (3d floats a row) and one pass rounds them into dqkv */
static ddp_status ref_bwd(ddp_backend *b, const float *qkv, const float *dout, const float *lse, const float *delta,
                          void *dqkv, int dqkv16, const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    cuda_impl *c = cuda_of(b);
    float *g32 = (float *)dqkv;
    if (dqkv16) {
        DDP_CHECK(ddp_cuda_grow(c, &c->o32, &c->o32_cap, (size_t)(pack->R * 3 * d) * sizeof(float),
                                "attention's fp32 gradients"));
        g32 = (float *)c->o32;
    }
    ENC_LAUNCH(k_attn_bwd, pack->R * heads, qkv, dout, lse, delta, g32, pack->off, pack->seg, pack->sid, pack->R, d,
               (int64_t)heads, *dr);
    return dqkv16 ? ddp_cuda_to_bf16(c, g32, pack->R, 3 * d, 3 * d, (__nv_bfloat16 *)dqkv) : DDP_OK;
}

/* The q|k|v the own kernels read (*q, *q16): as given where they are fp32 or the bf16 tensor-core kernels run (tc
 * at bf16), else the bf16 values widened into the backend's f32 scratch (one launch) for the SIMT, reference and tf32
 * tensor-core kernels. cuDNN reads the bf16 values as they are. */
static ddp_status own_qkv(ddp_backend *b, int tc, const void *qkv, int qkv16, const ddp_packing *pack, int64_t d,
                          const void **q, int *q16)
{
    cuda_impl *c = cuda_of(b);
    const int64_t n = pack->R * 3 * d;
    *q = qkv, *q16 = qkv16;
    if (!qkv16 || (tc && c->precision == DDP_PRECISION_BF16)) return DDP_OK;
    DDP_CHECK(ddp_cuda_grow(c, &c->f32, &c->f32_cap, (size_t)n * sizeof(float), "attention's fp32 q|k|v"));
    *q = c->f32, *q16 = 0;
    return ddp_cuda_widen(c, (const __nv_bfloat16 *)qkv, (float *)c->f32, n);
}

/* delta = rowsum(dO * O) per head (k_attn_D) for dO of G and O of T */
template <class G, class T>
static ddp_status attn_D(ddp_backend *b, const void *dout, const void *o, float *delta, int64_t R, int64_t d, int64_t H)
{
    static void (*const k)(const G *, const T *, float *, int64_t, int64_t, int64_t) = k_attn_D<G, T>;
    ENC_LAUNCH(k, R * H, (const G *)dout, (const T *)o, delta, R, d, H);
    return DDP_OK;
}

/* dO as the own kernels read it (*g, *g16), as own_qkv gives q|k|v: a bf16 dO (do16) widened for all but the bf16
 * tensor-core kernels, into the f32 scratch past q|k|v's R x 3d floats (grown here, before own_qkv, which keeps it) */
static ddp_status own_dout(ddp_backend *b, int tc, const void *dout, int do16, const ddp_packing *pack, int64_t d,
                           const void **g, int *g16)
{
    cuda_impl *c = cuda_of(b);
    const int64_t n = pack->R * d, at = pack->R * 3 * d;
    *g = dout, *g16 = do16;
    if (!do16 || (tc && c->precision == DDP_PRECISION_BF16)) return DDP_OK;
    DDP_CHECK(ddp_cuda_grow(c, &c->f32, &c->f32_cap, (size_t)(at + n) * sizeof(float), "attention's fp32 dO"));
    *g = (float *)c->f32 + at, *g16 = 0;
    return ddp_cuda_widen(c, (const __nv_bfloat16 *)dout, (float *)c->f32 + at, n);
}

ddp_status ddp_cuda_attention_fwd(ddp_backend *b, const void *qkv16v, int qkv16, void *o, int o16, float *lse,
                                  const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    int64_t dh = d / heads;
    int tc = 0, ran = 0;
    const void *q;
    int q16;
    if (pack->R <= 0 || pack->max_rows <= 0) return DDP_OK;
    if (dr->p == 0.0f) /* cuDNN if chosen */
        DDP_CHECK(ddp_cuda_sdpa_fwd(b, qkv16v, qkv16, o, o16, lse, pack, d, heads, &ran));
    if (ran) return DDP_OK;
    if (dh <= ATT_DMAX) DDP_CHECK(tiles_check(pack));
    DDP_CHECK(ddp_cuda_attention_tc(b, dh, &tc));
    DDP_CHECK(own_qkv(b, tc, qkv16v, qkv16, pack, d, &q, &q16));
    if (tc) return ddp_cuda_attention_tc_fwd(b, q, q16, o, o16, lse, pack, d, heads, dr); /* --precision tf32, bf16 */
    const float *qkv = (const float *)q;
    if (dh <= 16) return att_fwd<16>(b, qkv, o, o16, lse, pack, d, heads, dr);
    if (dh <= 32) return att_fwd<32>(b, qkv, o, o16, lse, pack, d, heads, dr);
    if (dh <= 64) return att_fwd<64>(b, qkv, o, o16, lse, pack, d, heads, dr);
    if (dh <= ATT_DMAX) return att_fwd<ATT_DMAX>(b, qkv, o, o16, lse, pack, d, heads, dr);
    return ref_fwd(b, qkv, o, o16, lse, pack, d, heads, dr);
}

ddp_status ddp_cuda_attention_bwd(ddp_backend *b, const void *qkv16v, int qkv16, const void *o, int o16,
                                  const void *dout16v, int do16, const float *lse, void *dqkv, int dqkv16, float *delta,
                                  const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    int64_t n = pack->R * heads, H = heads, dh = d / heads;
    if (n <= 0 || pack->max_rows <= 0) return DDP_OK;
    int tc = 0, ran = 0, q16, g16;
    const void *q, *g;
    if (dr->p == 0.0f)
        DDP_CHECK(ddp_cuda_sdpa_bwd(b, qkv16v, qkv16, o, o16, dout16v, do16, lse, dqkv, dqkv16, pack, d, heads, &ran));
    if (ran) return DDP_OK;
    if (dh <= ATT_DMAX) DDP_CHECK(tiles_check(pack));
    typedef ddp_status (*attn_D_t)(ddp_backend *, const void *, const void *, float *, int64_t, int64_t, int64_t);
    static const attn_D_t D_of[2][2] = {{attn_D<float, float>, attn_D<float, __nv_bfloat16>},
                                        {attn_D<__nv_bfloat16, float>, attn_D<__nv_bfloat16, __nv_bfloat16>}};
    DDP_CHECK(D_of[do16 != 0][o16 != 0](b, dout16v, o, delta, pack->R, d, H));
    DDP_CHECK(ddp_cuda_attention_tc(b, dh, &tc));
    DDP_CHECK(own_dout(b, tc, dout16v, do16, pack, d, &g, &g16));
    DDP_CHECK(own_qkv(b, tc, qkv16v, qkv16, pack, d, &q, &q16));
    if (tc) return ddp_cuda_attention_tc_bwd(b, q, q16, g, g16, lse, dqkv, dqkv16, delta, pack, d, heads, dr);
    const float *qkv = (const float *)q, *dout = (const float *)g;
    if (dh <= 16) return att_bwd<16>(b, qkv, dout, lse, dqkv, dqkv16, delta, pack, d, heads, dr);
    if (dh <= 32) return att_bwd<32>(b, qkv, dout, lse, dqkv, dqkv16, delta, pack, d, heads, dr);
    if (dh <= 64) return att_bwd<64>(b, qkv, dout, lse, dqkv, dqkv16, delta, pack, d, heads, dr);
    if (dh <= ATT_DMAX) return att_bwd<ATT_DMAX>(b, qkv, dout, lse, dqkv, dqkv16, delta, pack, d, heads, dr);
    return ref_bwd(b, qkv, dout, lse, delta, dqkv, dqkv16, pack, d, heads, dr);
}
