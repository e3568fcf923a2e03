/* backend.h — the compute operations the reference model needs, as a table of functions with a CPU
 * implementation (OpenBLAS) and a CUDA one (cuBLAS + kernels). All matrices are row-major. */
#ifndef DDP_BACKEND_H
#define DDP_BACKEND_H

#include "mpi_ddp/backend/ddp_math.h"
#include "mpi_ddp/backend/kern_enc.h"
#include "mpiddp.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ddp_backend ddp_backend;
/* A bf16 value's bits (the top half of an fp32): activations stored in bf16 (gemm16, the "16" encoder ops). */
typedef uint16_t ddp_bf16;
/* One host -> device copy of stage (below). */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} ddp_copy;
typedef struct ddp_enc_ops ddp_enc_ops;

/* How a packed batch's rows belong to its samples, as the encoder ops read it. */
typedef struct {
    int64_t B, R;        /* samples, rows */
    const int64_t *off;  /* [B+1] row offsets, backend memory */
    const int64_t *seg;  /* [R] sample of each row, backend memory */
    const int64_t *sid;  /* [B] sample ids (dropout keys), backend memory */
    const int64_t *hoff; /* [B+1] the same offsets in host memory */
    int64_t max_rows;    /* longest sample of the batch */
    /* The batch's attention tiles (ddp_packing_tiles): tile[t] = s | j << 32 for the j-th DDP_ATT_TILE rows of
     * sample s, in sample order; backend memory, [tiles]. The CUDA attention kernels launch one block per tile and
     * head, so no block lands past its sample's end; the CPU backend does not read them. */
    const int64_t *tile;
    int64_t tiles;
} ddp_packing;

/* Rows of an attention tile: the query (or key) rows of one block of the CUDA attention kernels. */
#define DDP_ATT_TILE 64
/* Most tiles of a batch of R rows in B samples: sum of ceil(n_s / 64) <= floor(R / 64) + B. */
#define DDP_ATT_TILES_MAX(R, B) ((R) / DDP_ATT_TILE + (B))
/* The tiles of the B samples at host offsets hoff[0..B] into tile (NULL: only counted); returns their count. */
static inline int64_t ddp_packing_tiles(const int64_t *hoff, int64_t B, int64_t *tile)
{
    int64_t t = 0;
    for (int64_t s = 0; s < B; s++)
        for (int64_t j = 0; j * DDP_ATT_TILE < hoff[s + 1] - hoff[s]; j++, t++)
            if (tile) tile[t] = s | j << 32;
    return t;
}

struct ddp_backend {
    const char *name;        /* "cpu", "cuda" or "cuda-emu" (the CUDA backend on the host emulator) */
    int host_memory;         /* 1 when backend pointers are host pointers */
    int cli_names;           /* messages name the CLI's options (--heads), else ddp_model_config's fields: the ctx's
                              * cli_names, set by ddp_ctx_backend (optname.h) */
    int64_t row_block_bytes; /* the model's forward runs in blocks of rows of about this many bytes per
                              * activation (cache blocking); 0: the whole batch at once */
    void *impl;
    ddp_status (*alloc)(ddp_backend *b, void **p, size_t bytes); /* zeroed */
    void (*release)(ddp_backend *b, void *p);
    ddp_status (*upload)(ddp_backend *b, void *dst, const void *src, size_t bytes);
    /* Queued on the backend's stream without waiting: src must stay valid and unchanged until the next
     * download or synchronize on this backend (which wait for it). */
    ddp_status (*upload_async)(ddp_backend *b, void *dst, const void *src, size_t bytes);
    ddp_status (*download)(ddp_backend *b, void *dst, const void *src, size_t bytes);
    ddp_status (*zero)(ddp_backend *b, void *p, size_t bytes);
    ddp_status (*synchronize)(ddp_backend *b);
    /* Sizes the scratch of the reductions (colsum) for up to `rows` rows. Called when a model is created,
     * never during a step: colsum over more rows than reserved is an error. */
    ddp_status (*reserve)(ddp_backend *b, int64_t rows);
    /* C[M,N] = alpha * op(A) * op(B) + beta * C; op(A) is [M,K], op(B) is [K,N]. */
    ddp_status (*gemm)(ddp_backend *b, int transa, int transb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
    /* a = gelu(z[r,:] + bias); with dgelu non-NULL also dgelu = gelu'(z[r,:] + bias), kept for the
     * backward pass instead of the pre-activation. a or dgelu may be z. */
    ddp_status (*bias_gelu)(ddp_backend *b, const float *z, const float *bias, float *a, float *dgelu, int64_t rows,
                            int64_t cols);
    /* out[s,:] = mean over the rows r of segment s (offsets[s] .. offsets[s+1]-1) of gelu(z[r,:] + bias):
     * the last hidden layer and mean pooling in one pass, its activations never stored; dgelu as above. */
    ddp_status (*bias_gelu_pool)(ddp_backend *b, const float *z, const float *bias, float *dgelu,
                                 const int64_t *offsets, int64_t nseg, int64_t cols, float *out);
    /* dz = dact * dgelu (element-wise, dz may be dact) and dbias[c] += sum_r dz[r,c]. */
    ddp_status (*gelu_backward)(ddp_backend *b, const float *dact, const float *dgelu, float *dz, int64_t rows,
                                int64_t cols, float *dbias);
    /* The backward of bias_gelu_pool: dz[r,:] = dp[s,:] / rows(s) * dgelu[r,:] for every row r of segment
     * s, and dbias[c] += sum_r dz[r,c]; rows = offsets[nseg] (known to the caller without reading offsets). */
    ddp_status (*pool_gelu_backward)(ddp_backend *b, const float *dp, const int64_t *offsets, int64_t nseg,
                                     const float *dgelu, float *dz, int64_t rows, int64_t cols, float *dbias);
    /* out[c] = beta * out[c] + sum_r x[r,c]. */
    ddp_status (*colsum)(ddp_backend *b, const float *x, float *out, int64_t rows, int64_t cols, float beta);
    /* x[r,:] += bias. */
    ddp_status (*add_bias)(ddp_backend *b, float *x, const float *bias, int64_t rows, int64_t cols);
    /* Per row: loss[r], and optionally dlogits (softmax - onehot), pred, prob. */
    ddp_status (*softmax_xent)(ddp_backend *b, const float *logits, const int64_t *labels, int64_t n, int64_t c,
                               float *dlogits, float *loss, int64_t *pred, float *prob);
    ddp_status (*adamw)(ddp_backend *b, float *p, const float *g, float *m, float *v, int64_t n,
                        const ddp_adamw_args *a);
    /* *out = sum x[i]^2 (double accumulation on the host side of the result). */
    ddp_status (*sumsq)(ddp_backend *b, const float *x, int64_t n, double *out);
    /* out[k] = sum of x[i]^2 over [off[k], off[k+1]) for k < n: every tensor's squared norm with one host
     * synchronisation; deterministic (the same bits on every rank and run). */
    ddp_status (*sumsq_many)(ddp_backend *b, const float *x, const int64_t *off, int n, double *out);
    void (*destroy)(ddp_backend *b);
    const ddp_enc_ops *enc; /* the Transformer encoder's ops (below); NULL when the backend lacks them */
    /* The arithmetic of gemm from now on (ddp_precision, mpiddp.h); the other ops stay fp32. DDP_ERR_ARG with one
     * line where the backend lacks it (the CPU backend: fp32 or bf16, backend_cpu_bf16.c). New backends start at fp32.
     */
    ddp_status (*set_precision)(ddp_backend *b, ddp_precision p);
    /* Optional (NULL on host backends): a batch's uploads through pinned host staging on a copy stream, so that
     * one batch's copy runs while another computes. Two staging sets, 0 and 1, each with its own pinned slot:
     * stage_reserve sizes the slots (at model creation, never per step); stage copies the n regions' host data
     * into set's slot at once (the sources may be reused when it returns; it waits on the host only for the
     * copy that last used that slot, when that copy has not finished), then queues the copies to their device
     * destinations on the copy stream after the compute stream's last stage_release(set); stage_acquire makes
     * the compute stream wait for set's last stage (no host wait); stage_release marks that the compute work
     * queued so far is the last to read set's device destinations. */
    ddp_status (*stage_reserve)(ddp_backend *b, size_t bytes);
    ddp_status (*stage)(ddp_backend *b, int set, const ddp_copy *cp, int n);
    ddp_status (*stage_acquire)(ddp_backend *b, int set);
    ddp_status (*stage_release)(ddp_backend *b, int set);
    /* Optional (NULL on host backends): device-side timing. mark records timer k (0 <= k < DDP_TIMERS) on the
     * compute stream; elapsed gives the seconds between two recorded timers, waiting on the host for the later one
     * (read them after a step's results were downloaded, when the wait costs nothing). */
    ddp_status (*mark)(ddp_backend *b, int k);
    ddp_status (*elapsed)(ddp_backend *b, int k0, int k1, double *sec);
    /* Optional (NULL: the backend stores no bf16 activations): gemm at DDP_PRECISION_BF16 where A (a16 = 1) and/or
     * B (b16 = 1) is stored as bf16 (ddp_bf16, row-major with lda/ldb in elements); an fp32 operand is read as gemm
     * reads it. The results are gemm's on the fp32 values those bf16 were rounded from: a bf16 GEMM rounds its
     * operands to exactly those bf16. At another precision: DDP_ERR_ARG with one line. */
    ddp_status (*gemm16)(ddp_backend *b, int transa, int transb, int64_t M, int64_t N, int64_t K, float alpha,
                         const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb, float beta, float *C,
                         int64_t ldc);
    /* Optional (NULL: the caller composes it, as ddp_gemm_epi does): gemm16's product followed by an epilogue fused
     * into the GEMM where the backend can (cuBLASLt on the GPU):
     *   DDP_EPI_BIAS  (beta 0, C packed: ldc = N):  C[r,:] = (op(A) op(B))[r,:] + bias, as gemm then add_bias;
     *   DDP_EPI_BGRAD (transa 1, alpha 1, the weight-gradient form C += A^T B, A fp32 and packed: lda = M): also
     *                 bias[c] += sum_r A[r,c], as gemm then colsum with beta 1; the sum may run over A as
     *                 the GEMM reads it (bf16 at bf16).
     * C is fp32 (float), or with DDP_EPI_C16 added to DDP_EPI_BIAS at DDP_PRECISION_BF16 bf16 (ddp_bf16): the fp32
     * result of DDP_EPI_BIAS rounded once to nearest even. */
    ddp_status (*gemm_epi)(ddp_backend *b, int epi, float *bias, int transa, int transb, int64_t M, int64_t N,
                           int64_t K, float alpha, const void *A, int a16, int64_t lda, const void *B, int b16,
                           int64_t ldb, float beta, void *C, int64_t ldc);
    /* Optional (NULL: the caller composes it, as ddp_linear_bwd does): the backward of y = x W^T (+ bias) over R rows,
     * dW[N,K] += dy[R,N]^T x[R,K] (x stored in bf16 when x16), dbias[N] += sum_r dy[r,:] unless dbias is NULL (as
     * gemm_epi's DDP_EPI_BGRAD), and dx[R,K] = dy[R,N] W[N,K]: at bf16 one rounding of dy serves both products.
     * dy16: dy is stored in bf16 already (no rounding), at DDP_PRECISION_BF16; the bias gradient then sums those bf16
     * values, as the epilogue does. dx16: dx is written in bf16 (ddp_bf16: the fp32 product rounded once to nearest
     * even; DDP_PRECISION_BF16 only), else fp32. */
    ddp_status (*linear_bwd)(ddp_backend *b, const void *dy, int dy16, const void *x, int x16, const float *W,
                             float *dW, float *dbias, void *dx, int dx16, int64_t R, int64_t N, int64_t K);
    /* Optional (NULL: the encoder's own attention): chooses, once per model, the attention that the encoder's
     * attention_fwd/_bwd run for heads of d/heads columns at precision `prec` with attention dropout p
     * (MPIDDP_ATTENTION): *name "cudnn" or "own", the reason in why; DDP_ERR_ARG when MPIDDP_ATTENTION=cudnn cannot
     * be honoured. A call at another precision than the backend's then runs the own kernels. */
    ddp_status (*attention_select)(ddp_backend *b, ddp_precision prec, int64_t d, int heads, float p, const char **name,
                                   char *why, size_t n);
    /* Optional: the chosen attention's plan cache so far: plans built, calls served from the cache, shape classes
     * refused (their calls ran the own kernels), microseconds spent building plans */
    void (*attention_counts)(ddp_backend *b, int64_t out[4]);
};
#define DDP_TIMERS 256
enum { DDP_EPI_BIAS = 1, DDP_EPI_BGRAD = 2, DDP_EPI_C16 = 4 };

/* The ops of the Transformer encoder (model_transformer.c), on top of gemm, colsum, add_bias,
 * softmax_xent and adamw above. Row bodies are in kern_enc.h. Shapes: R rows, d model width, f FFN width;
 * qkv is [R, 3d] (q | k | v, head h at columns h*dh .. (h+1)*dh of each third). Outputs marked "+=" accumulate;
 * the others are written. A dropout with p = 0 is the identity. */
struct ddp_enc_ops {
    /* h[r,:] += bias + pos[r - off[seg[r]], :]  (pos NULL: no positions) */
    ddp_status (*embed_fwd)(ddp_backend *b, float *h, const float *bias, const float *pos, const ddp_packing *pack,
                            int64_t d);
    /* dbias += sum_r dh[r,:];  dpos[j,:] += sum of dh over the rows at position j (dpos NULL: skipped) */
    ddp_status (*embed_bwd)(ddp_backend *b, const float *dh, float *dbias, float *dpos, const ddp_packing *pack,
                            int64_t d);
    /* y = layernorm(x) * w + b per row; mean[r], rstd[r] kept for the backward pass */
    ddp_status (*layernorm_fwd)(ddp_backend *b, const float *x, const float *w, const float *bias, float *y,
                                float *mean, float *rstd, int64_t R, int64_t d);
    /* dx += d(loss)/dx;  dw += sum_r dy*xhat;  db += sum_r dy */
    ddp_status (*layernorm_bwd)(ddp_backend *b, const float *dy, const float *x, const float *w, const float *mean,
                                const float *rstd, float *dx, float *dw, float *db, int64_t R, int64_t d);
    /* o[r, head h] = sum_j drop(softmax_j(q_r . k_j / sqrt(dh))) v_j over the rows j of r's sample;
     * lse[r*heads + h] = log-sum-exp of the scaled scores, kept for the backward pass. o16: o is stored in bf16
     * (ddp_bf16, each value the fp32 result rounded once, nearest even), else in fp32. qkv16: q|k|v [R, 3d] are
     * stored in bf16, read as the fp32 values they widen to (both directions) */
    ddp_status (*attention_fwd)(ddp_backend *b, const void *qkv, int qkv16, void *o, int o16, float *lse,
                                const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr);
    /* dqkv (written: fp32, or at dqkv16 each value rounded once to bf16, nearest even) from dout (stored in bf16 at
     * do16, read as the fp32 values it widens to: the bits of those values given in fp32); o as the forward stored it
     * (o16); delta is backend scratch of R*heads floats: rowsum(dout * o) per head */
    ddp_status (*attention_bwd)(ddp_backend *b, const void *qkv, int qkv16, const void *o, int o16, const void *dout,
                                int do16, const float *lse, void *dqkv, int dqkv16, float *delta,
                                const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr);
    /* a = drop(gelu_erf(z + bias)); dgelu = gelu_erf'(z + bias) when non-NULL (may be z) */
    ddp_status (*gelu_erf_fwd)(ddp_backend *b, const float *z, const float *bias, float *a, float *dgelu,
                               const ddp_packing *pack, int64_t cols, const ddp_dropout *dr);
    /* dz = drop(dact) * dgelu (dz may be dact);  dbias += sum_r dz */
    ddp_status (*gelu_erf_bwd)(ddp_backend *b, const float *dact, const float *dgelu, float *dz, float *dbias,
                               const ddp_packing *pack, int64_t cols, const ddp_dropout *dr);
    /* out = h + drop(t + bias)  (out may be h) */
    ddp_status (*residual_fwd)(ddp_backend *b, float *out, const float *h, const float *t, const float *bias,
                               const ddp_packing *pack, int64_t d, const ddp_dropout *dr);
    /* dt = drop(dh), the mask of residual_fwd;  dbias += sum_r dt */
    ddp_status (*residual_bwd)(ddp_backend *b, const float *dh, float *dt, float *dbias, const ddp_packing *pack,
                               int64_t d, const ddp_dropout *dr);
    /* out[s,:] = mean of x over the rows of sample s */
    ddp_status (*pool_mean_fwd)(ddp_backend *b, const float *x, float *out, const ddp_packing *pack, int64_t d);
    /* dx[r,:] = dp[s,:] / rows(s) for every row r of sample s (written) */
    ddp_status (*pool_mean_bwd)(ddp_backend *b, const float *dp, float *dx, const ddp_packing *pack, int64_t d);
    /* Optional ops (NULL: the model composes the required ones above). The "16" forms write their output as bf16
     * (ddp_bf16, the fp32 result rounded to nearest even), for activations that only GEMMs read (gemm16). */
    /* layernorm_fwd with y in bf16 */
    ddp_status (*layernorm_fwd16)(ddp_backend *b, const float *x, const float *w, const float *bias, ddp_bf16 *y,
                                  float *mean, float *rstd, int64_t R, int64_t d);
    /* gelu_erf_fwd with a in bf16 (dgelu stays fp32; it may not alias z's bf16 output, it may be z) */
    ddp_status (*gelu_erf_fwd16)(ddp_backend *b, const float *z, const float *bias, ddp_bf16 *a, float *dgelu,
                                 const ddp_packing *pack, int64_t cols, const ddp_dropout *dr);
    /* residual_fwd then layernorm_fwd of its output in one pass over each row, the same bits as the two ops:
     * out = h + drop(t + tbias) (out may be h); y = layernorm(out) * w + lbias, as fp32 (y16 = 0) or as bf16
     * (y16 = 1, ddp_bf16 *); mean[r], rstd[r] kept */
    ddp_status (*residual_layernorm_fwd)(ddp_backend *b, float *out, const float *h, const float *t, const float *tbias,
                                         const ddp_packing *pack, int64_t d, const ddp_dropout *dr, const float *w,
                                         const float *lbias, void *y, int y16, float *mean, float *rstd);
    /* gelu_erf_bwd with dz in bf16 (its own buffer: not dact); dbias sums the fp32 values */
    ddp_status (*gelu_erf_bwd16)(ddp_backend *b, const float *dact, const float *dgelu, ddp_bf16 *dz, float *dbias,
                                 const ddp_packing *pack, int64_t cols, const ddp_dropout *dr);
    /* layernorm_bwd, and dx16 = each value of dx after the add, rounded (a copy for the GEMMs that read dx next) */
    ddp_status (*layernorm_bwd16)(ddp_backend *b, const float *dy, const float *x, const float *w, const float *mean,
                                  const float *rstd, float *dx, ddp_bf16 *dx16, float *dw, float *db, int64_t R,
                                  int64_t d);
    /* gelu_erf_fwd16 of a z stored in bf16 with its bias already added (by the GEMM's bias epilogue) and no dgelu:
     * the backward recomputes gelu' from z (gelu_erf_bwd16z) */
    ddp_status (*gelu_erf_fwd16z)(ddp_backend *b, const ddp_bf16 *z, ddp_bf16 *a, const ddp_packing *pack, int64_t cols,
                                  const ddp_dropout *dr);
    /* gelu_erf_bwd16 with dact in bf16 and dgelu = gelu_erf'(z), z the bf16 input of gelu_erf_fwd16z */
    ddp_status (*gelu_erf_bwd16z)(ddp_backend *b, const ddp_bf16 *dact, const ddp_bf16 *z, ddp_bf16 *dz, float *dbias,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr);
    /* Optional: residual_layernorm_fwd of a branch t stored in bf16 with its bias already added (a bias epilogue
     * wrote it): out = h + drop(t); the bits of residual_layernorm_fwd given t widened and a zero tbias */
    ddp_status (*residual_layernorm_fwd16t)(ddp_backend *b, float *out, const float *h, const ddp_bf16 *t,
                                            const ddp_packing *pack, int64_t d, const ddp_dropout *dr, const float *w,
                                            const float *lbias, void *y, int y16, float *mean, float *rstd);
};

/* The names of the encoder ops, in table order: ddp_backend_require() checks a backend has them all. */
// clang-format off
#define DDP_ENC_OPS(X)                                                                                  \
    X(embed_fwd) X(embed_bwd) X(layernorm_fwd) X(layernorm_bwd) X(attention_fwd) X(attention_bwd)      \
    X(gelu_erf_fwd) X(gelu_erf_bwd) X(residual_fwd) X(residual_bwd) X(pool_mean_fwd) X(pool_mean_bwd)
// clang-format on
/* DDP_ERR_ARG naming the backend and the first missing encoder op, else DDP_OK. */
ddp_status ddp_backend_require_enc(const ddp_backend *b);
const ddp_enc_ops *ddp_cpu_enc_ops(void);

ddp_status ddp_backend_cpu_create(int threads, ddp_backend **out);
/* Available when built with CUDA; device is the CUDA ordinal. */
ddp_status ddp_backend_cuda_create(int device, ddp_backend **out);

#ifndef DDP_PLUGIN
/* A backend allocation through the allocation-failure test hook (status.h): the call site may be made to fail
 * as a device out of memory would. */
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/status.h"
static inline ddp_status ddp_backend_alloc_at(ddp_backend *be, void **p, size_t bytes, const char *file, int line)
{
    if (ddp_alloc_inject(file, line, bytes))
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory on the %s device: %zu bytes (test hook)", be->name, bytes);
    return be->alloc(be, p, bytes);
}
#define DDP_BE_ALLOC(be, pp, bytes) ddp_backend_alloc_at((be), (pp), (bytes), __FILE__, __LINE__)
/* The refusal of precision p by a backend that computes in `computes` only: "--precision tf32 needs --device cuda
 * (...)", or to a C-API program "cfg.precision = DDP_PRECISION_TF32 needs model.device = DDP_DEVICE_CUDA (...)". */
static inline ddp_status ddp_backend_needs_cuda(const ddp_backend *be, ddp_precision p, const char *computes)
{
    char o[96];
    ddp_opt_set(o, sizeof o, be->cli_names, DDP_OPT_PRECISION, ddp_precision_name(p));
    return ddp_set_error(DDP_ERR_ARG, "%s needs %s (the %s backend computes in %s)", o,
                         be->cli_names ? "--device cuda" : "model.device = DDP_DEVICE_CUDA", be->name, computes);
}
/* be->set_precision; a backend without one computes in fp32 only. */
static inline ddp_status ddp_backend_set_precision(ddp_backend *be, ddp_precision p)
{
    if (be->set_precision) return be->set_precision(be, p);
    if (p == DDP_PRECISION_FP32) return DDP_OK;
    return ddp_backend_needs_cuda(be, p, "fp32");
}
/* gemm_epi when fuse is set and the backend has it, else its composition: gemm (gemm16 with a bf16 operand), then
 * add_bias (DDP_EPI_BIAS) or colsum of A with beta 1 (DDP_EPI_BGRAD), the bits of the unfused calls. A bf16 C
 * (DDP_EPI_C16) needs the backend's gemm_epi. */
static inline ddp_status ddp_gemm_epi(ddp_backend *be, int fuse, int epi, float *bias, int ta, int tb, int64_t M,
                                      int64_t N, int64_t K, float alpha, const void *A, int a16, int64_t lda,
                                      const void *B, int b16, int64_t ldb, float beta, void *C, int64_t ldc)
{
    if (fuse && be->gemm_epi)
        return be->gemm_epi(be, epi, bias, ta, tb, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta, C, ldc);
    if (epi & DDP_EPI_C16)
        return ddp_set_error(DDP_ERR_ARG, "gemm_epi: a bf16 output needs the backend's fused gemm_epi");
    if (a16 || b16)
        DDP_CHECK(be->gemm16(be, ta, tb, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta, (float *)C, ldc));
    else
        DDP_CHECK(
            be->gemm(be, ta, tb, M, N, K, alpha, (const float *)A, lda, (const float *)B, ldb, beta, (float *)C, ldc));
    if (epi == DDP_EPI_BIAS) return be->add_bias(be, (float *)C, bias, M, N);
    return be->colsum(be, (const float *)A, bias, K, M, 1.0f);
}
/* linear_bwd when fuse is set and the backend has it, else its composition: the weight gradient (with the bias
 * gradient through ddp_gemm_epi when dbias is not NULL), then the data gradient; a bf16 operand (dy16, x16) through
 * gemm16. A bf16 dx (dx16) needs the backend's linear_bwd. */
static inline ddp_status ddp_linear_bwd(ddp_backend *be, int fuse, const void *dy, int dy16, const void *x, int x16,
                                        const float *W, float *dW, float *dbias, void *dx, int dx16, int64_t R,
                                        int64_t N, int64_t K)
{
    if (fuse && be->linear_bwd) return be->linear_bwd(be, dy, dy16, x, x16, W, dW, dbias, dx, dx16, R, N, K);
    if (dbias && dy16) /* colsum sums fp32: the bias gradient of a bf16 dy needs the backend's linear_bwd */
        return ddp_set_error(DDP_ERR_ARG, "linear_bwd: a bias gradient of a bf16 dy needs a fused linear_bwd");
    if (dx16) /* gemm and gemm16 write fp32 */
        return ddp_set_error(DDP_ERR_ARG, "linear_bwd: a bf16 dx needs a fused linear_bwd");
    if (dbias)
        DDP_CHECK(ddp_gemm_epi(be, fuse, DDP_EPI_BGRAD, dbias, 1, 0, N, K, R, 1.0f, dy, 0, N, x, x16, K, 1.0f, dW, K));
    else if (x16 || dy16)
        DDP_CHECK(be->gemm16(be, 1, 0, N, K, R, 1.0f, dy, dy16, N, x, x16, K, 1.0f, dW, K));
    else
        DDP_CHECK(be->gemm(be, 1, 0, N, K, R, 1.0f, (const float *)dy, N, (const float *)x, K, 1.0f, dW, K));
    if (dy16) return be->gemm16(be, 0, 0, R, K, N, 1.0f, dy, 1, N, W, 0, K, 0.0f, (float *)dx, K);
    return be->gemm(be, 0, 0, R, K, N, 1.0f, (const float *)dy, N, W, K, 0.0f, (float *)dx, K);
}
#endif

#endif
