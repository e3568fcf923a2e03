/* backend_cuda_attn.cu — the CUDA backend's packed attention (ddp_enc_ops.attention_fwd/_bwd in backend.h):
 * its kernels and the ops that launch them on the backend's stream, installed in the encoder's op table by
 * backend_cuda_enc.cu. One thread per (row, head), for the output, and for the backward dq as a query row
 * and dk, dv as a key row, over the rows of the thread's own sample only (offsets and the row -> sample
 * map), with the online softmax of the CPU's fused method (kern_enc.h): deterministic, no atomics. Compiled
 * for the host emulator too (backend_cuda_attn_emu.cpp). */
#include "mpi_ddp/backend/backend_cuda_priv.h"

/* ------------------------------------------------------------------ kernels */
/* Where thread i of an attention kernel works: row r and head h (i = r H + h), the row's sample s, its first
 * row lo and length n; offsets into qkv (ld = 3d) of this row's and the sample's first row's head h, and
 * into the [R, d] o/dout arrays of this row's head h. */
struct attn_at {
    int64_t r, h, s, lo, n, dh, ld, row, first, orow;
    float scale;
};
static __device__ __host__ inline attn_at attn_locate(int64_t i, const int64_t *off, const int64_t *seg, int64_t d, int64_t H)
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
    lse[i] = ddp_attn_row_fwd(qkv + a.row, qkv + a.first + d, qkv + a.first + 2 * d, a.ld, a.n, a.dh, a.scale, o + a.orow,
                              &dr, ddp_drop_samplekey(&dr, sid, a.s, a.r - a.lo), ddp_drop_attn_unit(a.h, 0));
}

/* D[r, h] = dO[r, head h] . O[r, head h] */
__global__ void k_attn_D(const float *dout, const float *o, float *D, int64_t R, int64_t d, int64_t H)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    int64_t r = i / H, h = i % H, dh = d / H;
    D[i] = ddp_dot(dout + r * d + h * dh, o + r * d + h * dh, dh);
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
ddp_status ddp_cuda_attention_fwd(ddp_backend *b, const float *qkv, float *o, float *lse, const ddp_packing *pack,
                                   int64_t d, int heads, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_attn_fwd, pack->R * heads, qkv, o, lse, pack->off, pack->seg, pack->sid, pack->R, d, (int64_t)heads, *dr);
    return DDP_OK;
}

ddp_status ddp_cuda_attention_bwd(ddp_backend *b, const float *qkv, const float *o, const float *dout, const float *lse,
                                   float *dqkv, float *delta, const ddp_packing *pack, int64_t d, int heads,
                                   const ddp_dropout *dr)
{
    int64_t n = pack->R * heads, H = heads;
    ENC_LAUNCH(k_attn_D, n, dout, o, delta, pack->R, d, H);
    ENC_LAUNCH(k_attn_bwd, n, qkv, dout, lse, delta, dqkv, pack->off, pack->seg, pack->sid, pack->R, d, H, *dr);
    return DDP_OK;
}
