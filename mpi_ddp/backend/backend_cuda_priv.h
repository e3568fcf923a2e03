/* backend_cuda_priv.h — what the CUDA backend's two translation units share, private to the plugin:
 * backend_cuda.cu (memory, cuBLAS, the MLP's kernels, creation) and backend_cuda_enc.cu (the Transformer
 * encoder's kernels and ops). It owns the backend's state (cuda_impl), the headers both need (the CUDA ones
 * through cuda_compat.h, so the same source builds for nvcc and the host emulator, and the check macros of
 * cuda_checks.h), the launch-size helper and the two functions one file calls in the other. C++ only. */
#ifndef DDP_BACKEND_CUDA_PRIV_H
#define DDP_BACKEND_CUDA_PRIV_H

extern "C" {
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda_api.h"
#include "mpi_ddp/core/status.h"
}

#include "mpi_ddp/backend/cuda_compat.h"
#include "mpi_ddp/backend/cuda_checks.h"

typedef struct {
    int device;
    cudaStream_t stream; /* non-blocking: every op of the backend runs on it */
    cublasHandle_t blas;
    float *ones;       /* [ones_len] ones for column sums through gemv, sized by reserve() */
    int64_t ones_len;
    double *dpart;     /* [SUMSQ_BLOCKS] per-block partial sums of sumsq */
    double *hpart;     /* host copy of dpart */
} cuda_impl;

static inline cuda_impl *cuda_of(ddp_backend *b) { return (cuda_impl *)b->impl; }
static inline unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* out = beta out + column sums of row-major x [rows, cols] (backend_cuda.cu: a cuBLAS gemv over the ones) */
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_colsum(ddp_backend *b, const float *x, float *out, int64_t rows,
                                                                 int64_t cols, float beta);
/* the encoder's op table (backend_cuda_enc.cu) */
__attribute__((visibility("hidden"))) const ddp_enc_ops *ddp_cuda_enc_ops(void);

#endif
