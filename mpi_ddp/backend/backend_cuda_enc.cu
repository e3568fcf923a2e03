/* backend_cuda_enc.cu — the CUDA backend's Transformer encoder ops (ddp_enc_ops in backend.h) other than
 * layernorm (backend_cuda_norm.cu) and attention (backend_cuda_attn.cu): embedding, bias + gelu + dropout,
 * bias + dropout + residual, mean pooling; their kernels, the cu_* ops that launch them on the backend's
 * stream, and the op table backend_cuda.cu installs (ddp_cuda_enc_ops). A translation unit of its own; the
 * backend's state, launch helpers and column sums come through backend_cuda_priv.h. Each kernel runs one
 * row body of kern_enc.h per thread, the code the CPU backend loops over, so the emulator tests run the
 * same arithmetic the GPU does. Column reductions (bias and position gradients) run one thread per column
 * in row order, or through ddp_cuda_colsum: deterministic, no atomics. Compiled for the host emulator too
 * (backend_cuda_enc_emu.cpp). */
#include "mpi_ddp/backend/backend_cuda_priv.h"

/* ------------------------------------------------------------------ kernels */
__global__ void k_embed_fwd(float *h, const float *bias, const float *pos, const int64_t *off, const int64_t *seg,
                            int64_t R, int64_t d)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * d) return;
    int64_t r = i / d, c = i % d;
    h[i] += bias[c] + (pos ? pos[(r - off[seg[r]]) * d + c] : 0.0f);
}

/* dpos[j, c] += sum over samples s longer than j of dh[off[s] + j, c], in sample order */
__global__ void k_embed_bwd_pos(const float *dh, float *dpos, const int64_t *off, int64_t B, int64_t maxlen, int64_t d)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= maxlen * d) return;
    int64_t j = i / d, c = i % d;
    float acc = 0.0f;
    for (int64_t s = 0; s < B; s++)
        if (off[s + 1] - off[s] > j) acc += dh[(off[s] + j) * d + c];
    dpos[i] += acc;
}

/* v, element i of a packed [R, cols] array, times its dropout multiplier (the unit is the column) */
static __device__ __host__ inline float elem_drop(const ddp_dropout &dr, const int64_t *off, const int64_t *seg,
                                                  const int64_t *sid, int64_t i, int64_t cols, float v)
{
    return ddp_drop_apply(dr.p > 0.0f, &dr, ddp_drop_packedkey(&dr, off, seg, sid, i / cols), (uint64_t)(i % cols), v);
}

__global__ void k_gelu_erf_fwd(const float *z, const float *bias, float *a, float *dg, const int64_t *off,
                               const int64_t *seg, const int64_t *sid, int64_t R, int64_t cols, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * cols) return;
    float g, v = ddp_gelu_erf_fwd(z[i] + bias[i % cols], dg ? &g : NULL);
    if (dg) dg[i] = g;
    a[i] = elem_drop(dr, off, seg, sid, i, cols, v);
}

/* dst = drop(src) * mul, or drop(src) when mul is NULL: the backward of gelu_erf (mul = gelu') and of the
 * residual's dropout */
__global__ void k_drop_mul(const float *src, const float *mul, float *dst, const int64_t *off, const int64_t *seg,
                           const int64_t *sid, int64_t R, int64_t cols, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * cols) return;
    float v = elem_drop(dr, off, seg, sid, i, cols, src[i]);
    dst[i] = mul ? v * mul[i] : v;
}

/* out = h + drop(t + bias) */
__global__ void k_residual_fwd(float *out, const float *h, const float *t, const float *bias, const int64_t *off,
                               const int64_t *seg, const int64_t *sid, int64_t R, int64_t d, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < R * d) out[i] = h[i] + elem_drop(dr, off, seg, sid, i, d, t[i] + bias[i % d]);
}

/* one block per sample, threads over columns, rows in order */
__global__ void k_pool_mean_fwd(const float *x, float *out, const int64_t *off, int64_t d)
{
    int64_t s = blockIdx.x, lo = off[s], hi = off[s + 1];
    float inv = 1.0f / (float)(hi - lo);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (int64_t r = lo; r < hi; r++) acc += x[r * d + c];
        out[s * d + c] = acc * inv;
    }
}

__global__ void k_pool_mean_bwd(const float *dp, float *dx, const int64_t *off, const int64_t *seg, int64_t R, int64_t d)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * d) return;
    int64_t r = i / d, c = i % d, s = seg[r];
    dx[i] = dp[s * d + c] / (float)(off[s + 1] - off[s]);
}

/* ------------------------------------------------------------------ ops */

static ddp_status cu_embed_fwd(ddp_backend *b, float *h, const float *bias, const float *pos, const ddp_packing *pack,
                               int64_t d)
{
    ENC_LAUNCH(k_embed_fwd, pack->R * d, h, bias, pos, pack->off, pack->seg, pack->R, d);
    return DDP_OK;
}

static ddp_status cu_embed_bwd(ddp_backend *b, const float *dh, float *dbias, float *dpos, const ddp_packing *pack,
                               int64_t d)
{
    if (dpos) ENC_LAUNCH(k_embed_bwd_pos, pack->max_rows * d, dh, dpos, pack->off, pack->B, pack->max_rows, d);
    return ddp_cuda_colsum(b, dh, dbias, pack->R, d, 1.0f);
}

static ddp_status cu_gelu_erf_fwd(ddp_backend *b, const float *z, const float *bias, float *a, float *dgelu,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_gelu_erf_fwd, pack->R * cols, z, bias, a, dgelu, pack->off, pack->seg, pack->sid, pack->R, cols, *dr);
    return DDP_OK;
}

/* dst = drop(src) * mul (k_drop_mul), dbias += column sums of dst */
static ddp_status drop_mul_colsum(ddp_backend *b, const float *src, const float *mul, float *dst, float *dbias,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_drop_mul, pack->R * cols, src, mul, dst, pack->off, pack->seg, pack->sid, pack->R, cols, *dr);
    return ddp_cuda_colsum(b, dst, dbias, pack->R, cols, 1.0f);
}

static ddp_status cu_gelu_erf_bwd(ddp_backend *b, const float *dact, const float *dgelu, float *dz, float *dbias,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    return drop_mul_colsum(b, dact, dgelu, dz, dbias, pack, cols, dr);
}

static ddp_status cu_residual_fwd(ddp_backend *b, float *out, const float *h, const float *t, const float *bias,
                                  const ddp_packing *pack, int64_t d, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_residual_fwd, pack->R * d, out, h, t, bias, pack->off, pack->seg, pack->sid, pack->R, d, *dr);
    return DDP_OK;
}

static ddp_status cu_residual_bwd(ddp_backend *b, const float *dh, float *dt, float *dbias, const ddp_packing *pack,
                                  int64_t d, const ddp_dropout *dr)
{
    return drop_mul_colsum(b, dh, NULL, dt, dbias, pack, d, dr);
}

static ddp_status cu_pool_mean_fwd(ddp_backend *b, const float *x, float *out, const ddp_packing *pack, int64_t d)
{
    if (pack->B > 0) {
        DDP_LAUNCH(k_pool_mean_fwd, (unsigned)pack->B, 128, 0, cuda_of(b)->stream, x, out, pack->off, d);
        LAUNCH_CHECK();
    }
    return DDP_OK;
}

static ddp_status cu_pool_mean_bwd(ddp_backend *b, const float *dp, float *dx, const ddp_packing *pack, int64_t d)
{
    ENC_LAUNCH(k_pool_mean_bwd, pack->R * d, dp, dx, pack->off, pack->seg, pack->R, d);
    return DDP_OK;
}

static const ddp_enc_ops cu_enc = {
    cu_embed_fwd,  cu_embed_bwd,    ddp_cuda_layernorm_fwd, ddp_cuda_layernorm_bwd, ddp_cuda_attention_fwd, ddp_cuda_attention_bwd,
    cu_gelu_erf_fwd, cu_gelu_erf_bwd, cu_residual_fwd, cu_residual_bwd, cu_pool_mean_fwd, cu_pool_mean_bwd,
};

const ddp_enc_ops *ddp_cuda_enc_ops(void) { return &cu_enc; }
