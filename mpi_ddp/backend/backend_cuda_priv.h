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

/* Kernel launches (DDP_LAUNCH) and cuBLAS compute calls (CUBLAS_COMPUTE) of the backend, for benchmarks and tests
 * (ddp_cuda_backend_launches_impl, backend_cuda.cu); one host thread drives a backend. */
extern long long ddp_cuda_launches __attribute__((visibility("hidden")));
#define DDP_LAUNCH_NOTE() ((void)++ddp_cuda_launches)
#include "mpi_ddp/backend/cuda_compat.h"
#include "mpi_ddp/backend/cuda_checks.h"
/* A cuBLAS call that queues work on the stream (a GEMM, a GEMV): checked as CUBLAS_CHECK, and counted. */
#define CUBLAS_COMPUTE(call)                                                                       \
    do {                                                                                           \
        DDP_LAUNCH_NOTE();                                                                         \
        CUBLAS_CHECK(call);                                                                        \
    } while (0)

typedef struct {
    int device;
    cudaStream_t stream; /* non-blocking: every op of the backend runs on it */
    cublasHandle_t blas;
    ddp_precision precision; /* of gemm (set_precision): fp32 through cublasSgemm, tf32 and bf16 through cublasGemmEx */
    __nv_bfloat16 *bf16;     /* bf16: gemm's activation operands rounded to bf16, [bf16_cap], grown in stream order
                              * (cudaMallocAsync/cudaFreeAsync) by the first larger gemm: no host wait */
    size_t bf16_cap;
    /* bf16: the weights' bf16 copy. adamw over [w_base, w_base + w_n) also writes w16 (the copy refreshed by the
     * optimizer step, in the same pass); gemm reads an operand lying inside that range from w16 instead of
     * converting it. Any other write into the range (upload, zero: a checkpoint or the initial broadcast)
     * clears w_valid, and gemm converts again until the next step. */
    __nv_bfloat16 *w16;
    const float *w_base;
    int64_t w_n, w16_cap;
    int w_valid;
    float *ones;       /* [ones_len] ones for column sums through gemv, sized by reserve() */
    int64_t ones_len;
    double *dpart;     /* [SUMSQ_BLOCKS] per-block partial sums of sumsq */
    double *hpart;     /* host copy of dpart */
    float *colpart;    /* [DDP_COLPART_FLOATS] column partial sums (layernorm dw/db, bias gradients), stage 1 */
    /* staging (ddp_backend.stage*): batches uploaded on their own stream from two pinned slots */
    cudaStream_t copy;          /* non-blocking: the batches' host -> device copies */
    void *pin[2];               /* pinned host slots, [pin_cap] each */
    size_t pin_cap;
    cudaEvent_t copied[2];      /* on copy: set's last stage has landed (and its pinned slot is free) */
    cudaEvent_t freed[2];       /* on stream: the last compute work reading set's device buffers */
    cudaEvent_t timer[DDP_TIMERS]; /* mark/elapsed, created on first use */
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
/* attention on tensor cores (backend_cuda_attn_tc.cu): *use = 1 when it covers this backend's precision (tf32,
 * bf16), device (sm_80+) and head width dh; then the forward, and the backward after delta is computed */
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_tc(ddp_backend *b, int64_t dh, int *use);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_tc_fwd(ddp_backend *b, const float *qkv, float *o, float *lse,
                                                     const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_tc_bwd(ddp_backend *b, const float *qkv, const float *dout, const float *lse,
                                                     float *dqkv, const float *delta, const ddp_packing *pack, int64_t d,
                                                     int heads, const ddp_dropout *dr);

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

/* Where a block of the attention kernels (backend_cuda_attn.cu, backend_cuda_attn_tc.cu) works, from its grid
 * position (sample, tile of `rows` rows, head): sample s (rows lo .. lo + n of the batch), head h of width dh,
 * first row r0 of its tile (query or key rows), q|k|v's row stride ld = 3d, the softmax scale 1/sqrt(dh). */
struct ddp_attn_blk {
    int64_t s, h, lo, n, r0, ld;
    int dh;
    float scale;
};
static __device__ inline ddp_attn_blk ddp_attn_block(const int64_t *off, int64_t d, int64_t H, int rows)
{
    ddp_attn_blk k;
    k.s = blockIdx.x, k.r0 = (int64_t)blockIdx.y * rows, k.h = blockIdx.z;
    k.lo = off[k.s], k.n = off[k.s + 1] - k.lo, k.ld = 3 * d, k.dh = (int)(d / H);
    k.scale = 1.0f / sqrtf((float)k.dh);
    return k;
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
