/* backend_cuda_norm.cu — the CUDA backend's layernorm (ddp_enc_ops.layernorm_fwd/_bwd in backend.h): its
 * kernels and the ops that launch them on the backend's stream, installed in the encoder's op table by
 * backend_cuda_enc.cu. Forward and input gradient run the row bodies of kern_enc.h (the CPU backend's
 * code) one thread per row; dw/db one thread per column in row order: deterministic, no atomics. Compiled
 * for the host emulator too (backend_cuda_norm_emu.cpp). */
#include "mpi_ddp/backend/backend_cuda_priv.h"

/* ------------------------------------------------------------------ kernels */
__global__ void k_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                                int64_t R, int64_t d)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < R) ddp_layernorm_row(x + r * d, w, b, y + r * d, &mean[r], &rstd[r], d);
}

__global__ void k_layernorm_bwd_dx(const float *dy, const float *x, const float *w, const float *mean, const float *rstd,
                                   float *dx, int64_t R, int64_t d)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < R) ddp_layernorm_row_bwd(dy + r * d, x + r * d, w, mean[r], rstd[r], dx + r * d, d);
}

__global__ void k_layernorm_bwd_dwdb(const float *dy, const float *x, const float *mean, const float *rstd, float *dw,
                                     float *db, int64_t R, int64_t d)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= d) return;
    float sw = 0.0f, sb = 0.0f;
    for (int64_t r = 0; r < R; r++) {
        float g = dy[r * d + c];
        sw += g * (x[r * d + c] - mean[r]) * rstd[r];
        sb += g;
    }
    dw[c] += sw;
    db[c] += sb;
}

/* ------------------------------------------------------------------ ops */
ddp_status ddp_cuda_layernorm_fwd(ddp_backend *b, const float *x, const float *w, const float *bias, float *y,
                                   float *mean, float *rstd, int64_t R, int64_t d)
{
    ENC_LAUNCH(k_layernorm_fwd, R, x, w, bias, y, mean, rstd, R, d);
    return DDP_OK;
}

ddp_status ddp_cuda_layernorm_bwd(ddp_backend *b, const float *dy, const float *x, const float *w, const float *mean,
                                   const float *rstd, float *dx, float *dw, float *db, int64_t R, int64_t d)
{
    ENC_LAUNCH(k_layernorm_bwd_dx, R, dy, x, w, mean, rstd, dx, R, d);
    if (R > 0) ENC_LAUNCH(k_layernorm_bwd_dwdb, d, dy, x, mean, rstd, dw, db, R, d);
    return DDP_OK;
}
