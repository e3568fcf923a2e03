/* backend_cuda_norm.cu — the CUDA backend's layernorm: the forward (y in fp32 or bf16, and fused with the residual:
 * residual_layernorm_fwd) and the backward, their kernels, and the ops the encoder's op table
 * (backend_cuda_enc.cu) holds. */
#include "mpi_ddp/backend/cuda/backend_cuda_priv.h"

#include <stdint.h>

#define LN_THREADS 128                /* most threads of a block */
#define LN_REG 8                      /* floats of a row a thread keeps in registers */
#define LN_MIN_CHUNK 16               /* fewest rows of a dw/db chunk */
#define LN_MAX_CHUNKS 1024            /* most chunks: the fused backward's blocks */
#define LN_CS_WARPS 8                 /* warps of a column-sum block (k_colpart_sum) */
#define LN_SMEM (LN_THREADS * LN_REG) /* longest row the forward stages in shared memory: the registers' columns */
#ifdef __CUDACC__                     /* the register array's loops unrolled, so v[] stays in registers */
#define LN_UNROLL _Pragma("unroll")
#else
#define LN_UNROLL
#endif

/* ------------------------------------------------------------------ device helpers */

/* The sum of every thread's a (and b) over the block, a tree in static shared memory; blockDim.x is a power of
 * two at most LN_THREADS. Every thread gets the sums. */
static __device__ inline void block_sum2(float *a, float *b, float (*sh)[LN_THREADS])
{
    unsigned t = threadIdx.x;
    sh[0][t] = *a;
    sh[1][t] = *b;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
        if (t < w) {
            sh[0][t] += sh[0][t + w];
            sh[1][t] += sh[1][t + w];
        }
        __syncthreads();
    }
    *a = sh[0][0];
    *b = sh[1][0];
    __syncthreads(); /* sh is free again */
}

/* ------------------------------------------------------------------ kernels */
/* The mean and rstd of row xr in the CPU's order (ddp_layernorm_stats of kern_enc.h: lane j of 16 sums the columns
 * j, j + 16, ... in turn, then the lanes fold in halves), with those 16 lanes as 16 threads: each runs its own chain
 * (consecutive threads read consecutive columns of the row staged in shared memory, sh, when d <= LN_SMEM, else of
 * memory), and thread 0 folds the 16 sums as ddp_ln_fold does. The same additions in the same order: the CPU's
 * bits (the plugin compiles this file without FMA contraction), d / 16 dependent adds a pass instead of d.
 * Returned to every thread; blockDim.x >= DDP_LN_LANES. */
static __device__ inline void row_stats(const float *xr, const float *sh, int64_t d, float *mean, float *rstd)
{
    __shared__ float lane[DDP_LN_LANES], st2[2];
    const float *x = d <= LN_SMEM ? sh : xr;
    const int j = (int)threadIdx.x;
    if (j < DDP_LN_LANES) {
        float l = 0.0f;
        for (int64_t c = j; c < d; c += DDP_LN_LANES) l += x[c];
        lane[j] = l;
    }
    __syncthreads();
    if (j == 0) st2[0] = ddp_ln_fold(lane) / (float)d;
    __syncthreads();
    const float mu = st2[0];
    if (j < DDP_LN_LANES) {
        float l = 0.0f;
        for (int64_t c = j; c < d; c += DDP_LN_LANES) l += (x[c] - mu) * (x[c] - mu);
        lane[j] = l;
    }
    __syncthreads();
    if (j == 0) st2[1] = 1.0f / sqrtf(ddp_ln_fold(lane) / (float)d + DDP_LN_EPS);
    __syncthreads();
    *mean = mu;
    *rstd = st2[1];
}

/* The end of a forward row, shared by k_layernorm_fwd and k_residual_layernorm_fwd: the row xr is in the thread's
 * registers v (its first LN_REG / V groups) and, when d <= LN_SMEM, staged in row (else read again from xr,
 * written by this block before the barrier here); y = (x - mean) * rstd * w + b as T (fp32, or bf16 rounded to
 * nearest even), mean[r], rstd[r]. */
template <int V, typename T>
static __device__ inline void ln_row_finish(const float *v, const float *xr, const float *row, const float *w,
                                            const float *b, T *yr, float *mean, float *rstd, int64_t r, int64_t d)
{
    const int64_t step = (int64_t)blockDim.x * V, c0 = (int64_t)threadIdx.x * V;
    const int64_t cr = c0 + (LN_REG / V) * step; /* first column past the registers */
    float mu, rs;
    __syncthreads(); /* rows of up to LN_SMEM columns are all in registers, now staged */
    row_stats(xr, row, d, &mu, &rs);
    LN_UNROLL
    for (int k = 0; k < LN_REG / V; k++) {
        int64_t c = c0 + k * step;
        if (c < d) {
            float wv[V], bv[V], o[V];
            vld<V>(w, c, wv);
            vld<V>(b, c, bv);
            for (int j = 0; j < V; j++) o[j] = (v[k * V + j] - mu) * rs * wv[j] + bv[j];
            vst_out<V>(yr, c, o);
        }
    }
    for (int64_t c = cr; c < d; c += step) {
        float u[V], wv[V], bv[V], o[V];
        vld<V>(xr, c, u);
        vld<V>(w, c, wv);
        vld<V>(b, c, bv);
        for (int j = 0; j < V; j++) o[j] = (u[j] - mu) * rs * wv[j] + bv[j];
        vst_out<V>(yr, c, o);
    }
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

/* one block per row: y = (x - mean) * rstd * w + b, y fp32 or bf16 (T) */
template <int V, typename T>
__global__ void k_layernorm_fwd(const float *x, const float *w, const float *b, T *y, float *mean, float *rstd,
                                int64_t d)
{
    __shared__ float4 row4[LN_SMEM / 4]; /* float4: 16-byte aligned for the vector stores */
    float *row = (float *)row4;
    const int64_t r = blockIdx.x, step = (int64_t)blockDim.x * V, c0 = (int64_t)threadIdx.x * V;
    const float *xr = x + r * d;
    float v[LN_REG];
    LN_UNROLL
    for (int k = 0; k < LN_REG / V; k++)
        if (c0 + k * step < d) {
            vld<V>(xr, c0 + k * step, &v[k * V]);
            if (d <= LN_SMEM) vst<V>(row, c0 + k * step, &v[k * V]);
        }
    ln_row_finish<V, T>(v, xr, row, w, b, y + r * d, mean, rstd, r, d);
}

/* one block per row: out = h + drop(t + tb) (residual_elems, as k_residual_fwd), written, kept in registers and
 * staged as k_layernorm_fwd keeps x, then y = layernorm(out) * w + lb; out may be h (each column is read, then
 * written, by one thread). t of S: fp32, or bf16 with its bias added by a GEMM's epilogue (tb unused) */
template <int V, typename T, typename S>
__global__ void k_residual_layernorm_fwd(float *out, const float *h, const S *t, const float *tb, const int64_t *off,
                                         const int64_t *seg, const int64_t *sid, int64_t d, ddp_dropout dr,
                                         const float *w, const float *lb, T *y, float *mean, float *rstd)
{
    __shared__ float4 row4[LN_SMEM / 4];
    float *row = (float *)row4;
    const int64_t r = blockIdx.x, step = (int64_t)blockDim.x * V, c0 = (int64_t)threadIdx.x * V;
    const int64_t cr = c0 + (LN_REG / V) * step;
    const int drop = dr.p > 0.0f;
    const uint64_t rk = block_rowkey(dr, off, seg, sid, r);
    const float *hr = h + r * d;
    const S *tr = t + r * d;
    float *outr = out + r * d, v[LN_REG];
    LN_UNROLL
    for (int k = 0; k < LN_REG / V; k++)
        if (c0 + k * step < d) {
            residual_elems<V>(hr, tr, tb, c0 + k * step, drop, dr, rk, &v[k * V]);
            vst<V>(outr, c0 + k * step, &v[k * V]);
            if (d <= LN_SMEM) vst<V>(row, c0 + k * step, &v[k * V]);
        }
    for (int64_t c = cr; c < d; c += step) {
        float o[V];
        residual_elems<V>(hr, tr, tb, c, drop, dr, rk, o);
        vst<V>(outr, c, o);
    }
    ln_row_finish<V, T>(v, outr, row, w, lb, y + r * d, mean, rstd, r, d);
}

/* V values of dx rounded into dx16 from column c: one 8-byte store where aligned, else one at a time (so dx16's
 * alignment does not choose the kernel's width, and dx keeps layernorm_bwd's bits) */
template <int V> static __device__ inline void st_dx16(__nv_bfloat16 *p, int64_t c, const float *o)
{
    if (V == 4 && ((uintptr_t)(p + c) & 7) == 0)
        vst_out<4>(p, c, o);
    else
        for (int j = 0; j < V; j++) p[c + j] = __float2bfloat16_rn(o[j]);
}

/* The end of a backward row for the thread's columns in registers (g = dy w and xhat, LN_REG / V groups from c0 in
 * steps of step): the two row sums over the block, turned into means (returned for columns past the registers),
 * then dx += rstd (g - mean(g) - xhat mean(g xhat)), and the sum rounded into dx16r where it is non-NULL. */
template <int V>
static __device__ inline void ln_dx_regs(const float *g, const float *xh, float *sg, float *sgx, float rs, float *dxr,
                                         __nv_bfloat16 *dx16r, int64_t c0, int64_t step, int64_t d,
                                         float (*sh)[LN_THREADS])
{
    block_sum2(sg, sgx, sh);
    *sg /= (float)d;
    *sgx /= (float)d;
    LN_UNROLL
    for (int k = 0; k < LN_REG / V; k++) {
        int64_t c = c0 + k * step;
        if (c < d) {
            float o[V];
            vld<V>(dxr, c, o);
            for (int j = 0; j < V; j++) o[j] += rs * (g[k * V + j] - *sg - xh[k * V + j] * *sgx);
            vst<V>(dxr, c, o);
            if (dx16r) st_dx16<V>(dx16r, c, o);
        }
    }
}

/* one block per row: dx += rstd (dy w - mean(dy w) - xhat mean(dy w xhat)), rounded into dx16 too unless NULL */
template <int V>
__global__ void k_layernorm_bwd_dx(const float *dy, const float *x, const float *w, const float *mean,
                                   const float *rstd, float *dx, __nv_bfloat16 *dx16, int64_t d)
{
    __shared__ float sh[2][LN_THREADS];
    const int64_t r = blockIdx.x, step = (int64_t)blockDim.x * V, c0 = (int64_t)threadIdx.x * V;
    const int64_t cr = c0 + (LN_REG / V) * step;
    const float *dyr = dy + r * d, *xr = x + r * d;
    float *dxr = dx + r * d;
    __nv_bfloat16 *dx16r = dx16 ? dx16 + r * d : nullptr;
    const float mu = mean[r], rs = rstd[r];
    float g[LN_REG], xh[LN_REG], sg = 0.0f, sgx = 0.0f;
    LN_UNROLL
    for (int k = 0; k < LN_REG / V; k++) {
        int64_t c = c0 + k * step;
        if (c < d) {
            float wv[V];
            vld<V>(dyr, c, &g[k * V]);
            vld<V>(xr, c, &xh[k * V]);
            vld<V>(w, c, wv);
            for (int j = 0; j < V; j++) {
                g[k * V + j] *= wv[j];
                xh[k * V + j] = (xh[k * V + j] - mu) * rs;
                sg += g[k * V + j];
                sgx += g[k * V + j] * xh[k * V + j];
            }
        }
    }
    for (int64_t c = cr; c < d; c += step) {
        float u[V], xv[V], wv[V];
        vld<V>(dyr, c, u);
        vld<V>(xr, c, xv);
        vld<V>(w, c, wv);
        for (int j = 0; j < V; j++) {
            float gj = u[j] * wv[j];
            sg += gj;
            sgx += gj * ((xv[j] - mu) * rs);
        }
    }
    ln_dx_regs<V>(g, xh, &sg, &sgx, rs, dxr, dx16r, c0, step, d, sh);
    for (int64_t c = cr; c < d; c += step) {
        float u[V], xv[V], wv[V], o[V];
        vld<V>(dyr, c, u);
        vld<V>(xr, c, xv);
        vld<V>(w, c, wv);
        vld<V>(dxr, c, o);
        for (int j = 0; j < V; j++) o[j] += rs * (u[j] * wv[j] - sg - (xv[j] - mu) * rs * sgx);
        vst<V>(dxr, c, o);
        if (dx16r) st_dx16<V>(dx16r, c, o);
    }
}

/* The backward of rows of at most LN_SMEM columns in one pass: block x owns the chunk of `rows` rows from x * rows
 * and walks them in order; per row, dx += as k_layernorm_bwd_dx (the same expressions, sums and tree), while each
 * thread adds its columns' dy (x - mean) rstd and dy, the CPU's terms, over the chunk's rows in registers. dy and x
 * are read once for dx and dw/db instead of twice. One chunk: added into dw/db at once; else written to the
 * partials pw/pb [gridDim.x, d], summed in chunk order by k_colpart_sum. */
template <int V>
__global__ void k_layernorm_bwd(const float *dy, const float *x, const float *w, const float *mean, const float *rstd,
                                float *dx, __nv_bfloat16 *dx16, float *dw, float *db, float *pw, float *pb, int64_t R,
                                int64_t d, int64_t rows)
{
    __shared__ float sh[2][LN_THREADS];
    const int64_t step = (int64_t)blockDim.x * V, c0 = (int64_t)threadIdx.x * V;
    const int64_t lo = (int64_t)blockIdx.x * rows, hi = lo + rows < R ? lo + rows : R;
    float wv[LN_REG], sw[LN_REG], sb[LN_REG];
    LN_UNROLL
    for (int k = 0; k < LN_REG / V; k++) {
        for (int j = 0; j < V; j++) wv[k * V + j] = sw[k * V + j] = sb[k * V + j] = 0.0f;
        if (c0 + k * step < d) vld<V>(w, c0 + k * step, &wv[k * V]);
    }
    for (int64_t r = lo; r < hi; r++) {
        const float *dyr = dy + r * d, *xr = x + r * d;
        float *dxr = dx + r * d;
        const float mu = mean[r], rs = rstd[r];
        /* = {}: the emulator's host compiler does not see that c < d guards both loops */
        float g[LN_REG] = {}, xh[LN_REG] = {}, sg = 0.0f, sgx = 0.0f;
        LN_UNROLL
        for (int k = 0; k < LN_REG / V; k++) {
            int64_t c = c0 + k * step;
            if (c < d) {
                float u[V], xv[V];
                vld<V>(dyr, c, u);
                vld<V>(xr, c, xv);
                for (int j = 0; j < V; j++) {
                    const int e = k * V + j;
                    sw[e] += u[j] * (xv[j] - mu) * rs;
                    sb[e] += u[j];
                    g[e] = u[j] * wv[e];
                    xh[e] = (xv[j] - mu) * rs;
                    sg += g[e];
                    sgx += g[e] * xh[e];
                }
            }
        }
        ln_dx_regs<V>(g, xh, &sg, &sgx, rs, dxr, dx16 ? dx16 + r * d : nullptr, c0, step, d, sh);
    }
    LN_UNROLL
    for (int k = 0; k < LN_REG / V; k++) {
        int64_t c = c0 + k * step;
        if (c >= d) continue;
        if (gridDim.x == 1) {
            float ow[V], ob[V];
            vld<V>(dw, c, ow);
            vld<V>(db, c, ob);
            for (int j = 0; j < V; j++) ow[j] += sw[k * V + j], ob[j] += sb[k * V + j];
            vst<V>(dw, c, ow);
            vst<V>(db, c, ob);
        } else {
            vst<V>(pw + (int64_t)blockIdx.x * d, c, &sw[k * V]);
            vst<V>(pb + (int64_t)blockIdx.x * d, c, &sb[k * V]);
        }
    }
}

/* Rows wider than LN_SMEM, stage 1 of dw/db after k_layernorm_bwd_dx: block (x: column tile of blockDim.x * V
 * columns, y: chunk of `rows` rows) sums the same terms over its rows in row order. One chunk: added into dw/db at
 * once; else written to the partials pw/pb [gridDim.y, d]. */
template <int V>
__global__ void k_layernorm_dwdb_part(const float *dy, const float *x, const float *mean, const float *rstd, float *dw,
                                      float *db, float *pw, float *pb, int64_t R, int64_t d, int64_t rows)
{
    const int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (c >= d) return;
    const int64_t lo = (int64_t)blockIdx.y * rows, hi = lo + rows < R ? lo + rows : R;
    float sw[V], sb[V];
    for (int j = 0; j < V; j++) sw[j] = sb[j] = 0.0f;
    for (int64_t r = lo; r < hi; r++) {
        float g[V], xv[V];
        const float mu = mean[r], rs = rstd[r];
        vld<V>(dy + r * d, c, g);
        vld<V>(x + r * d, c, xv);
        for (int j = 0; j < V; j++) {
            sw[j] += g[j] * (xv[j] - mu) * rs;
            sb[j] += g[j];
        }
    }
    if (gridDim.y == 1) {
        float ow[V], ob[V];
        vld<V>(dw, c, ow);
        vld<V>(db, c, ob);
        for (int j = 0; j < V; j++) ow[j] += sw[j], ob[j] += sb[j];
        vst<V>(dw, c, ow);
        vst<V>(db, c, ob);
    } else {
        vst<V>(pw + (int64_t)blockIdx.y * d, c, sw);
        vst<V>(pb + (int64_t)blockIdx.y * d, c, sb);
    }
}

/* Stage 2 (ddp_cuda_colpart_sum): a block per 32 columns, LN_CS_WARPS warps; warp w sums the chunks w,
 * w + LN_CS_WARPS, ... of its lane's column in turn (a warp reads 32 consecutive floats of a chunk), then warp 0 adds
 * the warps' sums in warp order into dw (and db, unless pb is NULL). A fixed order: the same bits on every run. */
__global__ void k_colpart_sum(const float *pw, const float *pb, float *dw, float *db, int64_t nchunks, int64_t d)
{
    __shared__ float sh[2][LN_CS_WARPS][32];
    const int lane = (int)threadIdx.x % 32, wp = (int)threadIdx.x / 32;
    const int64_t c = (int64_t)blockIdx.x * 32 + lane;
    float sw = 0.0f, sb = 0.0f;
    if (c < d)
        for (int64_t k = wp; k < nchunks; k += LN_CS_WARPS) {
            sw += pw[k * d + c];
            if (pb) sb += pb[k * d + c];
        }
    sh[0][wp][lane] = sw;
    sh[1][wp][lane] = sb;
    __syncthreads();
    if (wp == 0 && c < d) {
        for (int k = 1; k < LN_CS_WARPS; k++) sw += sh[0][k][lane], sb += sh[1][k][lane];
        dw[c] += sw;
        if (pb) db[c] += sb;
    }
}

/* ------------------------------------------------------------------ ops */
ddp_status ddp_cuda_colpart_sum(cuda_impl *c, const float *pw, const float *pb, float *dw, float *db, int64_t nchunks,
                                int64_t d)
{
    DDP_LAUNCH(k_colpart_sum, blocks_for(d, 32), 32 * LN_CS_WARPS, 0, c->stream, pw, pb, dw, db, nchunks, d);
    LAUNCH_CHECK();
    return DDP_OK;
}

/* the smallest power of two in [32, LN_THREADS] covering n groups */
static unsigned row_threads(int64_t n)
{
    unsigned t = 32;
    while (t < LN_THREADS && (int64_t)t < n) t *= 2;
    return t;
}

/* 4 where d % 4 == 0, the fp32 rows and vectors are 16-byte aligned and y (the output: y16 = 1, bf16) 8-byte */
static int fwd_width(int64_t d, const void *a, const void *b, const void *c, const void *y, int y16)
{
    if (!y16) return vec_width(d, a, b, c, y);
    return vec_width(d, a, b, c, NULL) == 4 && ((uintptr_t)y & 7) == 0 ? 4 : 1;
}

template <typename T>
static ddp_status ln_fwd(ddp_backend *b, const float *x, const float *w, const float *bias, T *y, float *mean,
                         float *rstd, int64_t R, int64_t d, int v)
{
    typedef void (*kernel_t)(const float *, const float *, const float *, T *, float *, float *, int64_t);
    static const kernel_t k4 = k_layernorm_fwd<4, T>, k1 = k_layernorm_fwd<1, T>; /* names without a comma to launch */
    if (R <= 0 || d <= 0) return DDP_OK;
    cudaStream_t s = cuda_of(b)->stream;
    if (v == 4)
        DDP_LAUNCH(k4, (unsigned)R, row_threads(d / 4), 0, s, x, w, bias, y, mean, rstd, d);
    else
        DDP_LAUNCH(k1, (unsigned)R, row_threads(d), 0, s, x, w, bias, y, mean, rstd, d);
    LAUNCH_CHECK();
    return DDP_OK;
}

ddp_status ddp_cuda_layernorm_fwd(ddp_backend *b, const float *x, const float *w, const float *bias, float *y,
                                  float *mean, float *rstd, int64_t R, int64_t d)
{
    return ln_fwd(b, x, w, bias, y, mean, rstd, R, d, fwd_width(d, x, w, bias, y, 0));
}

ddp_status ddp_cuda_layernorm_fwd16(ddp_backend *b, const float *x, const float *w, const float *bias, ddp_bf16 *y,
                                    float *mean, float *rstd, int64_t R, int64_t d)
{
    return ln_fwd(b, x, w, bias, (__nv_bfloat16 *)y, mean, rstd, R, d, fwd_width(d, x, w, bias, y, 1));
}

template <typename T, typename S>
static ddp_status res_ln_fwd(ddp_backend *b, float *out, const float *h, const S *t, const float *tb,
                             const ddp_packing *pack, int64_t d, const ddp_dropout *dr, const float *w, const float *lb,
                             T *y, float *mean, float *rstd, int v)
{
    typedef void (*kernel_t)(float *, const float *, const S *, const float *, const int64_t *, const int64_t *,
                             const int64_t *, int64_t, ddp_dropout, const float *, const float *, T *, float *,
                             float *);
    static const kernel_t k4 = k_residual_layernorm_fwd<4, T, S>, k1 = k_residual_layernorm_fwd<1, T, S>;
    if (pack->R <= 0 || d <= 0) return DDP_OK;
    cudaStream_t s = cuda_of(b)->stream;
    if (v == 4)
        DDP_LAUNCH(k4, (unsigned)pack->R, row_threads(d / 4), 0, s, out, h, t, tb, pack->off, pack->seg, pack->sid, d,
                   *dr, w, lb, y, mean, rstd);
    else
        DDP_LAUNCH(k1, (unsigned)pack->R, row_threads(d), 0, s, out, h, t, tb, pack->off, pack->seg, pack->sid, d, *dr,
                   w, lb, y, mean, rstd);
    LAUNCH_CHECK();
    return DDP_OK;
}

ddp_status ddp_cuda_residual_layernorm_fwd(ddp_backend *b, float *out, const float *h, const float *t,
                                           const float *tbias, const ddp_packing *pack, int64_t d,
                                           const ddp_dropout *dr, const float *w, const float *lbias, void *y, int y16,
                                           float *mean, float *rstd)
{
    const int v = vec_width(d, out, h, t, tbias) == 4 && fwd_width(d, w, lbias, NULL, y, y16) == 4 ? 4 : 1;
    if (y16) return res_ln_fwd(b, out, h, t, tbias, pack, d, dr, w, lbias, (__nv_bfloat16 *)y, mean, rstd, v);
    return res_ln_fwd(b, out, h, t, tbias, pack, d, dr, w, lbias, (float *)y, mean, rstd, v);
}

/* the same with t in bf16, its bias added (residual_layernorm_fwd16t): four values of t in one 8-byte load where the
 * row allows */
ddp_status ddp_cuda_residual_layernorm_fwd16t(ddp_backend *b, float *out, const float *h, const ddp_bf16 *t16,
                                              const ddp_packing *pack, int64_t d, const ddp_dropout *dr, const float *w,
                                              const float *lbias, void *y, int y16, float *mean, float *rstd)
{
    const __nv_bfloat16 *t = (const __nv_bfloat16 *)t16;
    const int v = vec_width(d, out, h, NULL, NULL) == 4 && ((uintptr_t)t & 7) == 0 &&
                          fwd_width(d, w, lbias, NULL, y, y16) == 4
                      ? 4
                      : 1;
    if (y16) return res_ln_fwd(b, out, h, t, NULL, pack, d, dr, w, lbias, (__nv_bfloat16 *)y, mean, rstd, v);
    return res_ln_fwd(b, out, h, t, NULL, pack, d, dr, w, lbias, (float *)y, mean, rstd, v);
}

/* layernorm_bwd, with dx's rounding into dx16 where it is non-NULL (layernorm_bwd16) */
static ddp_status ln_bwd(ddp_backend *b, const float *dy, const float *x, const float *w, const float *mean,
                         const float *rstd, float *dx, __nv_bfloat16 *dx16, float *dw, float *db, int64_t R, int64_t d)
{
    if (R <= 0 || d <= 0) return DDP_OK;
    cuda_impl *ci = cuda_of(b);
    const int v = vec_width(d, dy, x, w, dx) == 4 && vec_width(d, dw, db, ci->colpart, ci->colpart) == 4 ? 4 : 1;
    /* chunks: as many as the scratch holds for both partials, each of at least LN_MIN_CHUNK rows */
    int64_t nch = (R + LN_MIN_CHUNK - 1) / LN_MIN_CHUNK, cap = DDP_COLPART_FLOATS / (2 * d);
    if (nch > cap) nch = cap;
    if (nch > LN_MAX_CHUNKS) nch = LN_MAX_CHUNKS;
    if (nch < 1) nch = 1;
    const int64_t rows = (R + nch - 1) / nch;
    nch = (R + rows - 1) / rows;
    float *pw = ci->colpart, *pb = ci->colpart + nch * d;
    if (d <= LN_SMEM) { /* one pass: dx and the chunks' dw/db partials */
        if (v == 4)
            DDP_LAUNCH(k_layernorm_bwd<4>, (unsigned)nch, row_threads(d / 4), 0, ci->stream, dy, x, w, mean, rstd, dx,
                       dx16, dw, db, pw, pb, R, d, rows);
        else
            DDP_LAUNCH(k_layernorm_bwd<1>, (unsigned)nch, row_threads(d), 0, ci->stream, dy, x, w, mean, rstd, dx, dx16,
                       dw, db, pw, pb, R, d, rows);
        LAUNCH_CHECK();
    } else { /* rows past the registers: dx by a block per row, then the partials by column tiles */
        if (v == 4)
            DDP_LAUNCH(k_layernorm_bwd_dx<4>, (unsigned)R, row_threads(d / 4), 0, ci->stream, dy, x, w, mean, rstd, dx,
                       dx16, d);
        else
            DDP_LAUNCH(k_layernorm_bwd_dx<1>, (unsigned)R, row_threads(d), 0, ci->stream, dy, x, w, mean, rstd, dx,
                       dx16, d);
        LAUNCH_CHECK();
        const unsigned nt = 128;
        dim3 grid(blocks_for(d / v, (int)nt), (unsigned)nch);
        if (v == 4)
            DDP_LAUNCH(k_layernorm_dwdb_part<4>, grid, nt, 0, ci->stream, dy, x, mean, rstd, dw, db, pw, pb, R, d,
                       rows);
        else
            DDP_LAUNCH(k_layernorm_dwdb_part<1>, grid, nt, 0, ci->stream, dy, x, mean, rstd, dw, db, pw, pb, R, d,
                       rows);
        LAUNCH_CHECK();
    }
    return nch > 1 ? ddp_cuda_colpart_sum(ci, pw, pb, dw, db, nch, d) : DDP_OK;
}

ddp_status ddp_cuda_layernorm_bwd(ddp_backend *b, const float *dy, const float *x, const float *w, const float *mean,
                                  const float *rstd, float *dx, float *dw, float *db, int64_t R, int64_t d)
{
    return ln_bwd(b, dy, x, w, mean, rstd, dx, NULL, dw, db, R, d);
}

ddp_status ddp_cuda_layernorm_bwd16(ddp_backend *b, const float *dy, const float *x, const float *w, const float *mean,
                                    const float *rstd, float *dx, ddp_bf16 *dx16, float *dw, float *db, int64_t R,
                                    int64_t d)
{
    return ln_bwd(b, dy, x, w, mean, rstd, dx, (__nv_bfloat16 *)dx16, dw, db, R, d);
}
