/* backend.h — the compute operations the reference model needs, as a table of functions with a CPU
 * implementation (OpenBLAS) and a CUDA one (cuBLAS + kernels). All matrices are row-major. */
#ifndef DDP_BACKEND_H
#define DDP_BACKEND_H

#include "ddp_math.h"
#include "mpiddp.h"

#include <stddef.h>

typedef struct ddp_backend ddp_backend;
struct ddp_backend {
    const char *name;   /* "cpu", "cuda" or "cuda-emu" (the CUDA backend on the host emulator) */
    int host_memory;    /* 1 when backend pointers are host pointers */
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
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                       int64_t ldc);
    /* a = gelu(z[r,:] + bias); with dgelu non-NULL also dgelu = gelu'(z[r,:] + bias), kept for the
     * backward pass instead of the pre-activation. a or dgelu may be z. */
    ddp_status (*bias_gelu)(ddp_backend *b, const float *z, const float *bias, float *a, float *dgelu, int64_t rows,
                            int64_t cols);
    /* out[s,:] = mean over the rows r of segment s (offsets[s] .. offsets[s+1]-1) of gelu(z[r,:] + bias):
     * the last hidden layer and mean pooling in one pass, its activations never stored; dgelu as above. */
    ddp_status (*bias_gelu_pool)(ddp_backend *b, const float *z, const float *bias, float *dgelu,
                                 const int64_t *offsets, int64_t nseg, int64_t cols, float *out);
    /* dz = da * dgelu (element-wise, dz may be da) and dbias[c] += sum_r dz[r,c]. */
    ddp_status (*gelu_backward)(ddp_backend *b, const float *da, const float *dgelu, float *dz, int64_t rows,
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
    ddp_status (*softmax_xent)(ddp_backend *b, const float *logits, const int64_t *labels, int64_t n,
                               int64_t c, float *dlogits, float *loss, int64_t *pred, float *prob);
    ddp_status (*adamw)(ddp_backend *b, float *p, const float *g, float *m, float *v, int64_t n,
                        const ddp_adamw_args *a);
    /* *out = sum x[i]^2 (double accumulation on the host side of the result). */
    ddp_status (*sumsq)(ddp_backend *b, const float *x, int64_t n, double *out);
    /* out[k] = sum of x[i]^2 over [off[k], off[k+1]) for k < n: every tensor's squared norm with one host
     * synchronisation; deterministic (the same bits on every rank and run). */
    ddp_status (*sumsq_many)(ddp_backend *b, const float *x, const int64_t *off, int n, double *out);
    void (*destroy)(ddp_backend *b);
};

ddp_status ddp_backend_cpu_create(int threads, ddp_backend **out);
/* The reference model on a given backend (ddp_refmodel_create picks the context's shared one). */
ddp_status ddp_refmodel_create_on(ddp_backend *be, int64_t dim, int64_t hidden, int64_t classes, int64_t max_batch_rows,
                                  int64_t max_batch_samples, ddp_model *out);
/* Cumulative seconds the reference model spent in forward and backward of train_step (for benchmarks). */
void ddp_refmodel_times(const ddp_model *m, double *fwd, double *bwd);
/* Available when built with CUDA; device is the CUDA ordinal. */
ddp_status ddp_backend_cuda_create(int device, ddp_backend **out);

#endif
