/* backend_cuda_enc.cu — the CUDA backend's Transformer encoder op table (ddp_cuda_enc_ops) and its element-wise
 * ops: embedding, bias + gelu + dropout, bias + dropout + residual and mean pooling, with their kernels. The table's
 * layernorm is backend_cuda_norm.cu, its attention backend_cuda_attn.cu. */
#include "mpi_ddp/backend/cuda/backend_cuda_priv.h"

#include <stdint.h>

#define EW_THREADS 128  /* most threads of a block */
#define EW_MIN_CHUNK 16 /* fewest rows of a bias-gradient chunk */
#define EW_MAX_CHUNKS 256

/* ------------------------------------------------------------------ kernels */
/* one block per row: h[r,:] += bias + pos[position of r, :] */
template <int V>
__global__ void k_embed_fwd(float *h, const float *bias, const float *pos, const int64_t *off, const int64_t *seg,
                            int64_t d)
{
    __shared__ int64_t prow;
    const int64_t r = blockIdx.x;
    if (threadIdx.x == 0) prow = pos ? r - off[seg[r]] : 0;
    __syncthreads();
    float *hr = h + r * d;
    const float *pr = pos ? pos + prow * d : NULL;
    for (int64_t c = (int64_t)threadIdx.x * V; c < d; c += (int64_t)blockDim.x * V) {
        float o[V], bv[V], pv[V];
        vld<V>(hr, c, o);
        vld<V>(bias, c, bv);
        if (pr) vld<V>(pr, c, pv);
        for (int j = 0; j < V; j++) o[j] += bv[j] + (pr ? pv[j] : 0.0f);
        vst<V>(hr, c, o);
    }
}

/* one block per position j, threads over columns: dpos[j, c] += sum over the samples s longer than j of
 * dh[off[s] + j, c], in sample order */
__global__ void k_embed_bwd_pos(const float *dh, float *dpos, const int64_t *off, int64_t B, int64_t d)
{
    const int64_t j = blockIdx.x;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (int64_t s = 0; s < B; s++)
            if (off[s + 1] - off[s] > j) acc += dh[(off[s] + j) * d + c];
        dpos[j * d + c] += acc;
    }
}

/* one block per row: a = drop(gelu_erf(z + bias)) as fp32 or bf16 (T) from an fp32 or bf16 (Z) z, dg =
 * gelu_erf'(z + bias) where dg is non-NULL; bias NULL: z alone (gelu_erf_fwd16z) */
template <int V, typename T, typename Z>
__global__ void k_gelu_erf_fwd(const Z *z, const float *bias, T *a, float *dg, const int64_t *off, const int64_t *seg,
                               const int64_t *sid, int64_t cols, ddp_dropout dr)
{
    const int64_t r = blockIdx.x;
    const int drop = dr.p > 0.0f;
    const uint64_t rk = block_rowkey(dr, off, seg, sid, r);
    const Z *zr = z + r * cols;
    T *ar = a + r * cols;
    float *gr = dg ? dg + r * cols : NULL;
    for (int64_t c = (int64_t)threadIdx.x * V; c < cols; c += (int64_t)blockDim.x * V) {
        float zv[V], bv[V] = {}, g[V], o[V];
        vld<V>(zr, c, zv);
        if (bias) vld<V>(bias, c, bv);
        for (int j = 0; j < V; j++)
            o[j] = ddp_drop_apply(drop, &dr, rk, (uint64_t)(c + j),
                                  ddp_gelu_erf_fwd(bias ? zv[j] + bv[j] : zv[j], gr ? &g[j] : NULL));
        if (gr) vst<V>(gr, c, g);
        vst_out<V>(ar, c, o);
    }
}

/* out = h + drop(t + bias), one block per row */
template <int V>
__global__ void k_residual_fwd(float *out, const float *h, const float *t, const float *bias, const int64_t *off,
                               const int64_t *seg, const int64_t *sid, int64_t d, ddp_dropout dr)
{
    const int64_t r = blockIdx.x;
    const int drop = dr.p > 0.0f;
    const uint64_t rk = block_rowkey(dr, off, seg, sid, r);
    for (int64_t c = (int64_t)threadIdx.x * V; c < d; c += (int64_t)blockDim.x * V) {
        float o[V];
        residual_elems<V>(h + r * d, t + r * d, bias, c, drop, dr, rk, o);
        vst<V>(out + r * d, c, o);
    }
}

/* the factors of dst = drop(src) * mul from column c: mul's fp32 values, or gelu_erf' of mul's bf16 values (the
 * pre-activation z of gelu_erf_fwd16z, whose backward recomputes gelu') */
template <int V> static __device__ inline void mul_factor(const float *p, int64_t c, float *m) { vld<V>(p, c, m); }
template <int V> static __device__ inline void mul_factor(const __nv_bfloat16 *p, int64_t c, float *m)
{
    float z[V];
    vld<V>(p, c, z);
    for (int j = 0; j < V; j++) ddp_gelu_erf_fwd(z[j], &m[j]);
}

/* dst = drop(src) * mul (src fp32 or bf16: S; mul NULL: drop(src); M bf16: mul_factor's gelu') and the bias
 * gradient's stage 1: block (x:
 * column tile of blockDim.x * V columns, y: chunk of `rows` rows) sums dst over its rows in row order; one chunk: added
 * into dbias at once, else written to part [gridDim.y, cols]. Row keys are computed blockDim.x rows at a time, one row
 * per thread, into shared memory. */
template <int V, typename T, typename M, typename S>
__global__ void k_drop_mul_part(const S *src, const M *mul, T *dst, float *dbias, float *part, const int64_t *off,
                                const int64_t *seg, const int64_t *sid, int64_t R, int64_t cols, int64_t rows,
                                ddp_dropout dr)
{
    __shared__ uint64_t keys[EW_THREADS];
    const int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    const int64_t lo = (int64_t)blockIdx.y * rows, hi = lo + rows < R ? lo + rows : R;
    const int drop = dr.p > 0.0f, in = c < cols;
    float acc[V];
    for (int j = 0; j < V; j++) acc[j] = 0.0f;
    for (int64_t r0 = lo; r0 < hi; r0 += blockDim.x) {
        const int64_t n = hi - r0 < (int64_t)blockDim.x ? hi - r0 : (int64_t)blockDim.x;
        __syncthreads(); /* the previous window's keys are used (barriers unconditional: see block_rowkey) */
        if (drop && (int64_t)threadIdx.x < n)
            keys[threadIdx.x] = ddp_drop_packedkey(&dr, off, seg, sid, r0 + threadIdx.x);
        __syncthreads();
        for (int64_t i = 0; in && i < n; i++) {
            const int64_t r = r0 + i;
            float v[V], m[V] = {}; /* = {}: the emulator's host compiler sees no link between mul and m */
            vld<V>(src + r * cols, c, v);
            if (mul) mul_factor<V>(mul + r * cols, c, m);
            for (int j = 0; j < V; j++) {
                v[j] = ddp_drop_apply(drop, &dr, drop ? keys[i] : 0, (uint64_t)(c + j), v[j]);
                if (mul) v[j] *= m[j];
                acc[j] += v[j];
            }
            vst_out<V>(dst + r * cols, c, v); /* fp32, or bf16 rounded (the sums keep the fp32 values) */
        }
    }
    if (!in) return;
    if (gridDim.y == 1) {
        float o[V];
        vld<V>(dbias, c, o);
        for (int j = 0; j < V; j++) o[j] += acc[j];
        vst<V>(dbias, c, o);
    } else {
        vst<V>(part + (int64_t)blockIdx.y * cols, c, acc);
    }
}

/* Mean pooling: a block per (sample, 32 x V columns). Its POOL_WARPS warps take every POOL_WARPS-th row of the
 * sample, each lane V adjacent columns (coalesced, float4 where aligned), so the rows are read in parallel; the
 * partial sums meet in shared memory and warp 0 adds them in warp order. A fixed order: runs are bitwise equal;
 * it differs from the CPU's single running sum by rounding only (docs/transformer.md states the bound). */
#define POOL_WARPS 8
template <int V> __global__ void k_pool_mean_fwd(const float *x, float *out, const int64_t *off, int64_t d)
{
    __shared__ float part[POOL_WARPS][32 * V];
    const int64_t s = blockIdx.x, lo = off[s], hi = off[s + 1];
    const int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5;
    const int64_t c = ((int64_t)blockIdx.y * 32 + lane) * V;
    float acc[V];
    for (int j = 0; j < V; j++) acc[j] = 0.0f;
    if (c < d)
        for (int64_t r = lo + w; r < hi; r += POOL_WARPS) {
            float v[V];
            vld<V>(x + r * d, c, v);
            for (int j = 0; j < V; j++) acc[j] += v[j];
        }
    for (int j = 0; j < V; j++) part[w][lane * V + j] = acc[j];
    __syncthreads();
    if (w == 0 && c < d) {
        const float inv = 1.0f / (float)(hi - lo);
        float o[V];
        for (int j = 0; j < V; j++) {
            float t = part[0][lane * V + j];
            for (int k = 1; k < POOL_WARPS; k++) t += part[k][lane * V + j];
            o[j] = t * inv;
        }
        vst<V>(out + s * d, c, o);
    }
}

/* one block per row: dx[r,:] = dp[s,:] / rows(s), s the row's sample */
template <int V>
__global__ void k_pool_mean_bwd(const float *dp, float *dx, const int64_t *off, const int64_t *seg, int64_t d)
{
    __shared__ int64_t srow;
    __shared__ float inv;
    const int64_t r = blockIdx.x;
    if (threadIdx.x == 0) {
        srow = seg[r];
        inv = 1.0f / (float)(off[srow + 1] - off[srow]);
    }
    __syncthreads();
    for (int64_t c = (int64_t)threadIdx.x * V; c < d; c += (int64_t)blockDim.x * V) {
        float o[V];
        vld<V>(dp + srow * d, c, o);
        for (int j = 0; j < V; j++) o[j] *= inv;
        vst<V>(dx + r * d, c, o);
    }
}

/* ------------------------------------------------------------------ ops */
/* the smallest multiple of 32 in [32, EW_THREADS] covering n groups */
static unsigned row_threads(int64_t n) { return n >= EW_THREADS ? EW_THREADS : (unsigned)((n + 31) / 32 * 32); }

/* Launches k4 (v = 4) or k1 one block per row of pack->R rows, threads over cols columns. */
#define ROWS_LAUNCH(k4, k1, v, cols, ...)                                                                       \
    do {                                                                                                        \
        if (pack->R > 0 && (cols) > 0) {                                                                        \
            if ((v) == 4)                                                                                       \
                DDP_LAUNCH(k4, (unsigned)pack->R, row_threads((cols) / 4), 0, cuda_of(b)->stream, __VA_ARGS__); \
            else                                                                                                \
                DDP_LAUNCH(k1, (unsigned)pack->R, row_threads(cols), 0, cuda_of(b)->stream, __VA_ARGS__);       \
            LAUNCH_CHECK();                                                                                     \
        }                                                                                                       \
    } while (0)
/* Launches kern<4> or kern<1> (v) as ROWS_LAUNCH. */
#define ROW_LAUNCH(kern, v, cols, ...) ROWS_LAUNCH(kern<4>, kern<1>, v, cols, __VA_ARGS__)

static ddp_status cu_embed_fwd(ddp_backend *b, float *h, const float *bias, const float *pos, const ddp_packing *pack,
                               int64_t d)
{
    ROW_LAUNCH(k_embed_fwd, vec_width(d, h, bias, pos, NULL), d, h, bias, pos, pack->off, pack->seg, d);
    return DDP_OK;
}

static ddp_status cu_embed_bwd(ddp_backend *b, const float *dh, float *dbias, float *dpos, const ddp_packing *pack,
                               int64_t d)
{
    if (dpos && pack->max_rows > 0 && d > 0) {
        DDP_LAUNCH(k_embed_bwd_pos, (unsigned)pack->max_rows, row_threads(d), 0, cuda_of(b)->stream, dh, dpos,
                   pack->off, pack->B, d);
        LAUNCH_CHECK();
    }
    return ddp_cuda_colsum(b, dh, dbias, pack->R, d, 1.0f);
}

template <typename T, typename Z>
static ddp_status gelu_erf_fwd(ddp_backend *b, const Z *z, const float *bias, T *a, float *dgelu,
                               const ddp_packing *pack, int64_t cols, const ddp_dropout *dr, int v)
{
    typedef void (*kernel_t)(const Z *, const float *, T *, float *, const int64_t *, const int64_t *, const int64_t *,
                             int64_t, ddp_dropout);
    static const kernel_t k4 = k_gelu_erf_fwd<4, T, Z>, k1 = k_gelu_erf_fwd<1, T, Z>; /* names without a comma */
    ROWS_LAUNCH(k4, k1, v, cols, z, bias, a, dgelu, pack->off, pack->seg, pack->sid, cols, *dr);
    return DDP_OK;
}

static ddp_status cu_gelu_erf_fwd(ddp_backend *b, const float *z, const float *bias, float *a, float *dgelu,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    return gelu_erf_fwd(b, z, bias, a, dgelu, pack, cols, dr, vec_width(cols, z, bias, a, dgelu));
}

/* a in bf16: 4 wide where the fp32 pointers are 16-byte aligned and a 8-byte */
static ddp_status cu_gelu_erf_fwd16(ddp_backend *b, const float *z, const float *bias, ddp_bf16 *a, float *dgelu,
                                    const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    const int v = vec_width(cols, z, bias, dgelu, NULL) == 4 && ((uintptr_t)a & 7) == 0 ? 4 : 1;
    return gelu_erf_fwd(b, z, bias, (__nv_bfloat16 *)a, dgelu, pack, cols, dr, v);
}

/* z and a in bf16 (z with its bias added by the GEMM's epilogue), no dgelu: 4 wide where both are 8-byte aligned */
static ddp_status cu_gelu_erf_fwd16z(ddp_backend *b, const ddp_bf16 *z, ddp_bf16 *a, const ddp_packing *pack,
                                     int64_t cols, const ddp_dropout *dr)
{
    const int v = cols % 4 == 0 && (((uintptr_t)z | (uintptr_t)a) & 7) == 0 ? 4 : 1;
    return gelu_erf_fwd(b, (const __nv_bfloat16 *)z, (const float *)NULL, (__nv_bfloat16 *)a, NULL, pack, cols, dr, v);
}

/* dst = drop(src) * mul (T: fp32, or bf16 rounded to nearest even) and dbias += its column sums (of the fp32
 * values): k_drop_mul_part over row chunks (as many as the scratch holds, each of at least EW_MIN_CHUNK rows; the
 * chunking depends on (R, cols) only), then the chunks' sum in a fixed order (ddp_cuda_colpart_sum). v: 4 or 1 columns
 * a thread. */
template <typename T, typename M, typename S>
static ddp_status drop_mul_colsum(ddp_backend *b, const S *src, const M *mul, T *dst, float *dbias,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr, int v)
{
    typedef void (*kernel_t)(const S *, const M *, T *, float *, float *, const int64_t *, const int64_t *,
                             const int64_t *, int64_t, int64_t, int64_t, ddp_dropout);
    static const kernel_t k4 = k_drop_mul_part<4, T, M, S>, k1 = k_drop_mul_part<1, T, M, S>; /* names, no comma */
    const int64_t R = pack->R;
    if (R <= 0 || cols <= 0) return DDP_OK;
    cuda_impl *ci = cuda_of(b);
    int64_t nch = (R + EW_MIN_CHUNK - 1) / EW_MIN_CHUNK, cap = DDP_COLPART_FLOATS / cols;
    if (nch > cap) nch = cap;
    if (nch > EW_MAX_CHUNKS) nch = EW_MAX_CHUNKS;
    if (nch < 1) nch = 1;
    const int64_t rows = (R + nch - 1) / nch;
    nch = (R + rows - 1) / rows;
    dim3 grid(blocks_for(cols / v, EW_THREADS), (unsigned)nch);
    if (v == 4)
        DDP_LAUNCH(k4, grid, EW_THREADS, 0, ci->stream, src, mul, dst, dbias, ci->colpart, pack->off, pack->seg,
                   pack->sid, R, cols, rows, *dr);
    else
        DDP_LAUNCH(k1, grid, EW_THREADS, 0, ci->stream, src, mul, dst, dbias, ci->colpart, pack->off, pack->seg,
                   pack->sid, R, cols, rows, *dr);
    LAUNCH_CHECK();
    return nch > 1 ? ddp_cuda_colpart_sum(ci, ci->colpart, NULL, dbias, NULL, nch, cols) : DDP_OK;
}

static ddp_status cu_gelu_erf_bwd(ddp_backend *b, const float *dact, const float *dgelu, float *dz, float *dbias,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    return drop_mul_colsum(b, dact, dgelu, dz, dbias, pack, cols, dr, vec_width(cols, dact, dgelu, dz, dbias));
}

static ddp_status cu_gelu_erf_bwd16(ddp_backend *b, const float *dact, const float *dgelu, ddp_bf16 *dz, float *dbias,
                                    const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    const int v = vec_width(cols, dact, dgelu, dbias, NULL) == 4 && ((uintptr_t)dz & 7) == 0 ? 4 : 1;
    return drop_mul_colsum(b, dact, dgelu, (__nv_bfloat16 *)dz, dbias, pack, cols, dr, v);
}

/* dz = drop(dact) * gelu_erf'(z) in bf16 from a bf16 dact, z the bf16 pre-activation of gelu_erf_fwd16z; dbias sums
 * the fp32 values */
static ddp_status cu_gelu_erf_bwd16z(ddp_backend *b, const ddp_bf16 *dact, const ddp_bf16 *z, ddp_bf16 *dz,
                                     float *dbias, const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    const int v = vec_width(cols, dbias, NULL, NULL, NULL) == 4 &&
                          (((uintptr_t)dact | (uintptr_t)z | (uintptr_t)dz) & 7) == 0
                      ? 4
                      : 1;
    return drop_mul_colsum(b, (const __nv_bfloat16 *)dact, (const __nv_bfloat16 *)z, (__nv_bfloat16 *)dz, dbias, pack,
                           cols, dr, v);
}

static ddp_status cu_residual_fwd(ddp_backend *b, float *out, const float *h, const float *t, const float *bias,
                                  const ddp_packing *pack, int64_t d, const ddp_dropout *dr)
{
    const int v = vec_width(d, out, h, t, bias);
    ROW_LAUNCH(k_residual_fwd, v, d, out, h, t, bias, pack->off, pack->seg, pack->sid, d, *dr);
    return DDP_OK;
}

static ddp_status cu_residual_bwd(ddp_backend *b, const float *dh, float *dt, float *dbias, const ddp_packing *pack,
                                  int64_t d, const ddp_dropout *dr)
{
    return drop_mul_colsum(b, dh, (const float *)NULL, dt, dbias, pack, d, dr, vec_width(d, dh, dt, dbias, NULL));
}

static ddp_status cu_pool_mean_fwd(ddp_backend *b, const float *x, float *out, const ddp_packing *pack, int64_t d)
{
    if (pack->B > 0 && d > 0) {
        const int v = vec_width(d, x, out, NULL, NULL);
        const dim3 grid((unsigned)pack->B, (unsigned)((d / v + 31) / 32));
        if (v == 4)
            DDP_LAUNCH(k_pool_mean_fwd<4>, grid, 32 * POOL_WARPS, 0, cuda_of(b)->stream, x, out, pack->off, d);
        else
            DDP_LAUNCH(k_pool_mean_fwd<1>, grid, 32 * POOL_WARPS, 0, cuda_of(b)->stream, x, out, pack->off, d);
        LAUNCH_CHECK();
    }
    return DDP_OK;
}

static ddp_status cu_pool_mean_bwd(ddp_backend *b, const float *dp, float *dx, const ddp_packing *pack, int64_t d)
{
    ROW_LAUNCH(k_pool_mean_bwd, vec_width(d, dp, dx, NULL, NULL), d, dp, dx, pack->off, pack->seg, d);
    return DDP_OK;
}

static const ddp_enc_ops cu_enc = {
    cu_embed_fwd,
    cu_embed_bwd,
    ddp_cuda_layernorm_fwd,
    ddp_cuda_layernorm_bwd,
    ddp_cuda_attention_fwd,
    ddp_cuda_attention_bwd,
    cu_gelu_erf_fwd,
    cu_gelu_erf_bwd,
    cu_residual_fwd,
    cu_residual_bwd,
    cu_pool_mean_fwd,
    cu_pool_mean_bwd,
    ddp_cuda_layernorm_fwd16,
    cu_gelu_erf_fwd16,
    ddp_cuda_residual_layernorm_fwd,
    cu_gelu_erf_bwd16,
    ddp_cuda_layernorm_bwd16,
    cu_gelu_erf_fwd16z,
    cu_gelu_erf_bwd16z,
    ddp_cuda_residual_layernorm_fwd16t,
};

const ddp_enc_ops *ddp_cuda_enc_ops(void) { return &cu_enc; }
