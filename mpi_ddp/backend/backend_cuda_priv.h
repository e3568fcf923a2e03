/* backend_cuda_priv.h — what the CUDA backend's translation units share, private to the plugin:
 * backend_cuda.cu (memory, cuBLAS, the MLP's kernels, creation), backend_cuda_enc.cu (the Transformer
 * encoder's element-wise kernels and its op table), backend_cuda_norm.cu (layernorm) and backend_cuda_attn.cu
 * (attention). It owns the backend's state (cuda_impl), the headers all need (the CUDA ones
 * through cuda_compat.h, so the same source builds for nvcc and the host emulator, and the check macros of
 * cuda_checks.h), the launch helpers and the functions one file calls in another. C++ only. */
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
    ddp_precision precision; /* of gemm (set_precision): fp32 through cublasSgemm, tf32 and bf16 through cublasGemmEx */
    __nv_bfloat16 *bf16;     /* bf16: gemm's operands rounded to bf16, [bf16_cap], grown by the first larger gemm */
    size_t bf16_cap;
    float *ones;       /* [ones_len] ones for column sums through gemv, sized by reserve() */
    int64_t ones_len;
    double *dpart;     /* [SUMSQ_BLOCKS] per-block partial sums of sumsq */
    double *hpart;     /* host copy of dpart */
    float *colpart;    /* [DDP_COLPART_FLOATS] column partial sums (layernorm dw/db, bias gradients), stage 1 */
} cuda_impl;
#define DDP_COLPART_FLOATS (1 << 18)

static inline cuda_impl *cuda_of(ddp_backend *b) { return (cuda_impl *)b->impl; }
static inline unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* out = beta out + column sums of row-major x [rows, cols] (backend_cuda.cu: a cuBLAS gemv over the ones) */
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_colsum(ddp_backend *b, const float *x, float *out, int64_t rows,
                                                                 int64_t cols, float beta);
/* the encoder's op table (backend_cuda_enc.cu) */
__attribute__((visibility("hidden"))) const ddp_enc_ops *ddp_cuda_enc_ops(void);
/* its layernorm (backend_cuda_norm.cu) and attention (backend_cuda_attn.cu): the ddp_enc_ops entries */
#define DDP_CUDA_HIDDEN __attribute__((visibility("hidden")))
DDP_CUDA_HIDDEN ddp_status ddp_cuda_layernorm_fwd(ddp_backend *b, const float *x, const float *w, const float *bias,
                                                  float *y, float *mean, float *rstd, int64_t R, int64_t d);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_layernorm_bwd(ddp_backend *b, const float *dy, const float *x, const float *w,
                                                  const float *mean, const float *rstd, float *dx, float *dw, float *db,
                                                  int64_t R, int64_t d);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_fwd(ddp_backend *b, const float *qkv, float *o, float *lse,
                                                  const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_bwd(ddp_backend *b, const float *qkv, const float *o, const float *dout,
                                                  const float *lse, float *dqkv, float *delta, const ddp_packing *pack,
                                                  int64_t d, int heads, const ddp_dropout *dr);

/* V (1 or 4) consecutive floats of p from column c into o[0..V), and back: one float4 access when V is 4 (the
 * caller checked alignment), for the row-wise kernels of backend_cuda_enc.cu and backend_cuda_norm.cu. */
template <int V> static __device__ inline void vld(const float *p, int64_t c, float *o)
{
    if (V == 4) {
        float4 t = *(const float4 *)(p + c);
        o[0] = t.x, o[1] = t.y, o[2] = t.z, o[3] = t.w;
    } else {
        o[0] = p[c];
    }
}
template <int V> static __device__ inline void vst(float *p, int64_t c, const float *o)
{
    if (V == 4)
        *(float4 *)(p + c) = make_float4(o[0], o[1], o[2], o[3]);
    else
        p[c] = o[0];
}

/* Launches `kernel` over n threads (128 a block) on the backend's stream, when n > 0; in an op returning
 * ddp_status with the backend `b` in scope. */
#define ENC_LAUNCH(kernel, n, ...)                                                                 \
    do {                                                                                           \
        if ((n) > 0) {                                                                             \
            DDP_LAUNCH(kernel, blocks_for((n), 128), 128, 0, cuda_of(b)->stream, __VA_ARGS__);     \
            LAUNCH_CHECK();                                                                        \
        }                                                                                          \
    } while (0)

#endif
