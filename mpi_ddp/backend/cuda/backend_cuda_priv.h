/* backend_cuda_priv.h — what the CUDA backend's .cu files share, private to the plugin: the backend's state
 * (cuda_impl), the check and launch macros, the device helpers of the row-wise and attention kernels, and the
 * functions one .cu file calls in another, each declared with the file that defines it. C++ only. */
#ifndef DDP_BACKEND_CUDA_PRIV_H
#define DDP_BACKEND_CUDA_PRIV_H

extern "C" {
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/core/status.h"
}
#include "mpi_ddp/backend/cuda/backend_cuda_state.h"

/* Every launch and cuBLAS compute call counts (ddp_cuda_launches, backend_cuda_state.c); a kernel launch also its
 * blocks (ddp_cuda_blocks). */
#define DDP_LAUNCH_NOTE() ((void)++ddp_cuda_launches)
#define DDP_LAUNCH_NOTE_GRID(grid) ddp_cuda_note_grid(dim3(grid))
#include "mpi_ddp/backend/cuda/cuda_compat.h"
#include "mpi_ddp/backend/cuda/cuda_checks.h"
static inline void ddp_cuda_note_grid(dim3 g)
{
    ++ddp_cuda_launches;
    ddp_cuda_blocks += (long long)g.x * g.y * g.z;
}
/* A failed allocation in the one-line format of cuda_checks.h, with its size, device and purpose (backend_cuda.cu,
 * backend_cuda_gemm.cu). */
#define DDP_ALLOC_ERR_(call, e, bytes, dev, what)                                                                      \
    ddp_set_error(DDP_ERR_CUDA, "CUDA error in %s (%s:%d): %s: %llu bytes (%.1f MiB) on cuda:%d for %s", #call,        \
                  __FILE__, __LINE__, cudaGetErrorString(e), (unsigned long long)(bytes), (double)(bytes) / 1048576.0, \
                  (dev), (what))
#define ALLOC_CHECK(call, bytes, dev, what) \
    DDP_CALL_CHECK_(cudaError_t, call, ddp_r_ == cudaSuccess, DDP_ALLOC_ERR_(call, ddp_r_, bytes, dev, what))
#define ALLOC_TRY(call, bytes, dev, what) \
    DDP_CALL_TRY_(cudaError_t, call, ddp_r_ == cudaSuccess, DDP_ALLOC_ERR_(call, ddp_r_, bytes, dev, what))
/* A cuBLAS call that queues work on the stream (a GEMM, a GEMV): checked as CUBLAS_CHECK, and counted. */
#define CUBLAS_COMPUTE(call) \
    do {                     \
        DDP_LAUNCH_NOTE();   \
        CUBLAS_CHECK(call);  \
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
    /* cuBLASLt (gemm_epi at tf32 and bf16): its handle and the workspace of its matmuls, sized once at creation */
    cublasLtHandle_t lt;
    void *lt_ws;
    size_t lt_ws_bytes;
    /* cuDNN's attention (backend_cuda_sdpa.cu): attention_select's choice, the library (NULL: not loaded, sdpa_why
     * says why), the bf16 operands of a call and the plans' workspace, grown in stream order */
    int attn_cudnn; /* bits: 1 the forward, 2 the backward runs on cuDNN */
    int sdpa_tried;
    struct ddp_sdpa *sdpa;
    char sdpa_why[300];
    void *sdpa_buf, *sdpa_ws;
    int64_t sdpa_rows, sdpa_d, sdpa_b; /* what sdpa_buf holds: rows (+ padding) of width d, samples */
    size_t sdpa_ws_cap;
    void *o32; /* the reference attention kernels' fp32 output (dh > 128) before its rounding to bf16: o at o16,
                * dq|dk|dv at dqkv16; [o32_cap] bytes, grown */
    size_t o32_cap;
    void *f32; /* fp32 scratch of one call: q|k|v widened for the SIMT and reference attention kernels and the tf32
                * tensor-core ones (qkv16), a bf16-output bias epilogue's product where cuBLASLt has no algorithm;
                * [f32_cap] bytes, grown */
    size_t f32_cap;
    float *ones;           /* [ones_len] ones for column sums through gemv, sized by reserve() */
    __nv_bfloat16 *ones16; /* [ones_len] bf16 ones (the same allocation) for column sums of bf16 values */
    int64_t ones_len;
    double *dpart;  /* [SUMSQ_BLOCKS] per-block partial sums of sumsq */
    double *hpart;  /* host copy of dpart */
    float *colpart; /* [DDP_COLPART_FLOATS] column partial sums (layernorm dw/db, bias gradients), stage 1 */
    /* staging (ddp_backend.stage*): batches uploaded on their own stream from two pinned slots */
    cudaStream_t copy; /* non-blocking: the batches' host -> device copies */
    void *pin[2];      /* pinned host slots, [pin_cap] each */
    size_t pin_cap;
    cudaEvent_t copied[2];         /* on copy: set's last stage has landed (and its pinned slot is free) */
    cudaEvent_t freed[2];          /* on stream: the last compute work reading set's device buffers */
    cudaEvent_t zeroed;            /* on stream: the zeroing of the last buffer alloc returned (copy waits for it) */
    cudaEvent_t timer[DDP_TIMERS]; /* mark/elapsed, created on first use */
} cuda_impl;

static inline cuda_impl *cuda_of(ddp_backend *b) { return (cuda_impl *)b->impl; }
static inline unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }
/* 4 (float4 groups) where cols % 4 == 0 and every pointer is 16-byte aligned (NULL counts as aligned), else 1 */
static inline int vec_width(int64_t cols, const void *p0, const void *p1, const void *p2, const void *p3)
{
    uintptr_t a = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3;
    return cols % 4 == 0 && (a & 15) == 0 ? 4 : 1;
}

/* Calls between the plugin's files go down only (tests/py/layers.py checks it): cuda_plugin.c -> backend_cuda.cu ->
 * backend_cuda_enc.cu -> backend_cuda_norm.cu, backend_cuda_attn.cu -> backend_cuda_attn_tc.cu, backend_cuda_sdpa.cu
 * (-> cudnn_sdpa.c); backend_cuda_gemm.cu under backend_cuda.cu and backend_cuda_enc.cu; every file ->
 * backend_cuda_state.c, which calls none. */
/* out = beta out + column sums of row-major x [rows, cols] (backend_cuda_gemm.cu: a cuBLAS gemv over the ones) */
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_colsum(ddp_backend *b, const float *x, float *out,
                                                                 int64_t rows, int64_t cols, float beta);
/* x[r,:] += bias (backend_cuda_gemm.cu, below gemm_epi which adds with it) */
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_add_bias(ddp_backend *b, float *x, const float *bias,
                                                                   int64_t rows, int64_t cols);
/* ddp_backend.gemm_epi (backend_cuda_gemm.cu): cuBLASLt's BIAS (fp32 or bf16 output) and BGRADB epilogues; its
 * handle and workspace */
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_gemm_epi(ddp_backend *b, int epi, float *bias, int ta, int tb,
                                                                   int64_t M, int64_t N, int64_t K, float alpha,
                                                                   const void *A, int a16, int64_t lda, const void *B,
                                                                   int b16, int64_t ldb, float beta, void *C,
                                                                   int64_t ldc);
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_lt_create(cuda_impl *c);
/* Stage 2 of the column sums (layernorm dγ/dβ, bias gradients; backend_cuda_norm.cu): dw[c] += the sum of the
 * nchunks partials pw[k, c] in a fixed order (and db from pb, unless pb is NULL) */
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_colpart_sum(cuda_impl *c, const float *pw, const float *pb,
                                                                      float *dw, float *db, int64_t nchunks, int64_t d);
/* ddp_backend.linear_bwd (backend_cuda_gemm.cu) */
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_linear_bwd(ddp_backend *b, const void *dy, int dy16,
                                                                     const void *x, int x16, const float *W, float *dW,
                                                                     float *dbias, void *dx, int dx16, int64_t R,
                                                                     int64_t N, int64_t K);
/* the GEMMs (backend_cuda_gemm.cu): ddp_backend.gemm, .gemm16 and .set_precision */
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_gemm(ddp_backend *b, int ta, int tb, int64_t M, int64_t N,
                                                               int64_t K, float alpha, const float *A, int64_t lda,
                                                               const float *B, int64_t ldb, float beta, float *C,
                                                               int64_t ldc);
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_gemm16(ddp_backend *b, int ta, int tb, int64_t M, int64_t N,
                                                                 int64_t K, float alpha, const void *A, int a16,
                                                                 int64_t lda, const void *B, int b16, int64_t ldb,
                                                                 float beta, float *C, int64_t ldc);
__attribute__((visibility("hidden"))) ddp_status ddp_cuda_set_precision(ddp_backend *b, ddp_precision p);
/* the encoder's op table (backend_cuda_enc.cu) */
__attribute__((visibility("hidden"))) const ddp_enc_ops *ddp_cuda_enc_ops(void);
/* its layernorm (backend_cuda_norm.cu) and attention (backend_cuda_attn.cu): the ddp_enc_ops entries */
#define DDP_CUDA_HIDDEN __attribute__((visibility("hidden")))
DDP_CUDA_HIDDEN ddp_status ddp_cuda_layernorm_fwd(ddp_backend *b, const float *x, const float *w, const float *bias,
                                                  float *y, float *mean, float *rstd, int64_t R, int64_t d);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_layernorm_fwd16(ddp_backend *b, const float *x, const float *w, const float *bias,
                                                    ddp_bf16 *y, float *mean, float *rstd, int64_t R, int64_t d);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_residual_layernorm_fwd(ddp_backend *b, float *out, const float *h, const float *t,
                                                           const float *tbias, const ddp_packing *pack, int64_t d,
                                                           const ddp_dropout *dr, const float *w, const float *lbias,
                                                           void *y, int y16, float *mean, float *rstd);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_residual_layernorm_fwd16t(ddp_backend *b, float *out, const float *h,
                                                              const ddp_bf16 *t, const ddp_packing *pack, int64_t d,
                                                              const ddp_dropout *dr, const float *w, const float *lbias,
                                                              void *y, int y16, float *mean, float *rstd);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_layernorm_bwd(ddp_backend *b, const float *dy, const float *x, const float *w,
                                                  const float *mean, const float *rstd, float *dx, float *dw, float *db,
                                                  int64_t R, int64_t d);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_layernorm_bwd16(ddp_backend *b, const float *dy, const float *x, const float *w,
                                                    const float *mean, const float *rstd, float *dx, ddp_bf16 *dx16,
                                                    float *dw, float *db, int64_t R, int64_t d);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_fwd(ddp_backend *b, const void *qkv, int qkv16, void *o, int o16,
                                                  float *lse, const ddp_packing *pack, int64_t d, int heads,
                                                  const ddp_dropout *dr);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_bwd(ddp_backend *b, const void *qkv, int qkv16, const void *o, int o16,
                                                  const void *dout, int do16, const float *lse, void *dqkv, int dqkv16,
                                                  float *delta, const ddp_packing *pack, int64_t d, int heads,
                                                  const ddp_dropout *dr);
/* attention on tensor cores (backend_cuda_attn_tc.cu): *use = 1 when it covers this backend's precision (tf32,
 * bf16), device (sm_80+) and head width dh; then the forward, and the backward after delta is computed */
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_tc(ddp_backend *b, int64_t dh, int *use);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_tc_fwd(ddp_backend *b, const void *qkv, int qkv16, void *o, int o16,
                                                     float *lse, const ddp_packing *pack, int64_t d, int heads,
                                                     const ddp_dropout *dr);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_tc_bwd(ddp_backend *b, const void *qkv, int qkv16, const void *dout,
                                                     int do16, const float *lse, void *dqkv, int dqkv16,
                                                     const float *delta, const ddp_packing *pack, int64_t d, int heads,
                                                     const ddp_dropout *dr);

/* cuDNN's fused attention (backend_cuda_sdpa.cu, over cudnn_sdpa.c): *ran = 0 when the own kernels must run instead
 * (attention_select chose them, or cuDNN refused this batch's shape class) */
DDP_CUDA_HIDDEN ddp_status ddp_cuda_sdpa_fwd(ddp_backend *b, const void *qkv, int qkv16, void *o, int o16, float *lse,
                                             const ddp_packing *pack, int64_t d, int heads, int *ran);
DDP_CUDA_HIDDEN ddp_status ddp_cuda_sdpa_bwd(ddp_backend *b, const void *qkv, int qkv16, const void *o, int o16,
                                             const void *dout, int do16, const float *lse, void *dqkv, int dqkv16,
                                             const ddp_packing *pack, int64_t d, int heads, int *ran);
/* y = float(x) over n bf16 values, one launch (backend_cuda_sdpa.cu) */
DDP_CUDA_HIDDEN ddp_status ddp_cuda_widen(cuda_impl *c, const __nv_bfloat16 *x, float *y, int64_t n);
/* x (rows x cols, leading dimension ld) rounded to bf16 (nearest even) into y, packed: one launch (gemm.cu) */
DDP_CUDA_HIDDEN ddp_status ddp_cuda_to_bf16(cuda_impl *c, const float *x, int64_t rows, int64_t cols, int64_t ld,
                                            __nv_bfloat16 *y);
/* Grows *p to `need` bytes in stream order (cudaFreeAsync, cudaMallocAsync: no host wait), a quarter over */
static inline ddp_status ddp_cuda_grow(cuda_impl *c, void **p, size_t *cap, size_t need, const char *what)
{
    if (need <= *cap) return DDP_OK;
    size_t bytes = need + need / 4;
    if (*p) CUDA_CHECK(cudaFreeAsync(*p, c->stream));
    *p = NULL, *cap = 0;
    ALLOC_CHECK(cudaMallocAsync(p, bytes, c->stream), bytes, c->device, what);
    *cap = bytes;
    return DDP_OK;
}
DDP_CUDA_HIDDEN ddp_status ddp_cuda_attention_select(ddp_backend *b, ddp_precision prec, int64_t d, int heads, float p,
                                                     const char **name, char *why, size_t n);
DDP_CUDA_HIDDEN void ddp_cuda_attention_counts(ddp_backend *b, int64_t out[4]);
DDP_CUDA_HIDDEN void ddp_cuda_sdpa_destroy(cuda_impl *c);

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

/* V results o[0..V) stored from column c of an output row: fp32 as vst does; bf16 (the encoder's "16" ops) rounded to
 * nearest even, one 8-byte store when V is 4 (the caller checked p is 8-byte aligned and c % 4 == 0). */
struct alignas(8) ddp_bf16x4 {
    __nv_bfloat16 v[4];
};
/* V consecutive bf16 values of p from column c widened into o[0..V): one 8-byte load when V is 4 (the caller checked p
 * is 8-byte aligned and c % 4 == 0) */
template <int V> static __device__ inline void vld(const __nv_bfloat16 *p, int64_t c, float *o)
{
    if (V == 4) {
        const ddp_bf16x4 t = *(const ddp_bf16x4 *)(p + c);
        for (int j = 0; j < 4; j++) o[j] = __bfloat162float(t.v[j]);
    } else {
        o[0] = __bfloat162float(p[c]);
    }
}
template <int V> static __device__ inline void vst_out(float *p, int64_t c, const float *o) { vst<V>(p, c, o); }
template <int V> static __device__ inline void vst_out(__nv_bfloat16 *p, int64_t c, const float *o)
{
    if (V == 4) {
        ddp_bf16x4 t;
        for (int j = 0; j < 4; j++) t.v[j] = __float2bfloat16_rn(o[j]);
        *(ddp_bf16x4 *)(p + c) = t;
    } else {
        p[c] = __float2bfloat16_rn(o[0]);
    }
}

/* The dropout key of packed row r, computed by thread 0 and shared with the block (0 when dropout is off; the
 * barrier is unconditional, so every launch of a kernel synchronises alike). */
static __device__ inline uint64_t block_rowkey(const ddp_dropout &dr, const int64_t *off, const int64_t *seg,
                                               const int64_t *sid, int64_t r)
{
    __shared__ uint64_t key;
    if (threadIdx.x == 0) key = ddp_drop_packedkey(&dr, off, seg, sid, r);
    __syncthreads();
    return key;
}
/* o[0..V) = h + drop(t + bias) from column c of the row hr, tr with row key rk: the one expression of residual_fwd
 * (backend_cuda_enc.cu) and residual_layernorm_fwd (backend_cuda_norm.cu), so both give the same bits. */
template <int V>
static __device__ inline void residual_elems(const float *hr, const float *tr, const float *bias, int64_t c, int drop,
                                             const ddp_dropout &dr, uint64_t rk, float *o)
{
    float hv[V], tv[V], bv[V];
    vld<V>(hr, c, hv);
    vld<V>(tr, c, tv);
    vld<V>(bias, c, bv);
    for (int j = 0; j < V; j++) o[j] = hv[j] + ddp_drop_apply(drop, &dr, rk, (uint64_t)(c + j), tv[j] + bv[j]);
}
/* residual_elems of a bf16 t whose bias a GEMM's epilogue added: t + 0.0f for the bias, the fp32 form's arithmetic
 * with a zero bias (the add is kept: it turns -0 into +0 as that form does) */
template <int V>
static __device__ inline void residual_elems(const float *hr, const __nv_bfloat16 *tr, const float *bias, int64_t c,
                                             int drop, const ddp_dropout &dr, uint64_t rk, float *o)
{
    float hv[V], tv[V], bv[V];
    (void)bias;
    vld<V>(hr, c, hv);
    vld<V>(tr, c, tv);
    for (int j = 0; j < V; j++) bv[j] = 0.0f;
    for (int j = 0; j < V; j++) o[j] = hv[j] + ddp_drop_apply(drop, &dr, rk, (uint64_t)(c + j), tv[j] + bv[j]);
}

/* Where a block of the attention kernels (backend_cuda_attn.cu, backend_cuda_attn_tc.cu) works, from its grid
 * position (tile of the batch, head; ddp_attn_grid): sample s (rows lo .. lo + n of the batch), head h of width dh,
 * first row r0 of its tile of DDP_ATT_TILE query (or key) rows, q|k|v's row stride ld = 3d, the softmax scale
 * 1/sqrt(dh). */
struct ddp_attn_blk {
    int64_t s, h, lo, n, r0, ld;
    int dh;
    float scale;
};
static __device__ inline ddp_attn_blk ddp_attn_block(const int64_t *tile, const int64_t *off, int64_t d, int64_t H)
{
    ddp_attn_blk k;
    const int64_t e = tile[blockIdx.x];
    k.s = e & 0xffffffff, k.r0 = (e >> 32) * DDP_ATT_TILE, k.h = blockIdx.y;
    k.lo = off[k.s], k.n = off[k.s + 1] - k.lo, k.ld = 3 * d, k.dh = (int)(d / H);
    k.scale = 1.0f / sqrtf((float)k.dh);
    return k;
}
/* The attention kernels' grid: a block per tile of the batch and head (x: tiles, at most 2^31 - 1; y: heads). */
static inline dim3 ddp_attn_grid(const ddp_packing *pack, int heads)
{
    return dim3((unsigned)pack->tiles, (unsigned)heads);
}

/* Launches `kernel` over n threads (128 a block) on the backend's stream, when n > 0; in an op returning
 * ddp_status with the backend `b` in scope. */
#define ENC_LAUNCH(kernel, n, ...)                                                             \
    do {                                                                                       \
        if ((n) > 0) {                                                                         \
            DDP_LAUNCH(kernel, blocks_for((n), 128), 128, 0, cuda_of(b)->stream, __VA_ARGS__); \
            LAUNCH_CHECK();                                                                    \
        }                                                                                      \
    } while (0)

#endif
