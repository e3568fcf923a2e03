/* emu_cublas.c — the emulated cuBLAS subset (see emu_cuda.h): a handle holds a stream; Sgemm and Sgemv
 * check their arguments as cuBLAS does (dimensions, leading dimensions, device pointers), take alpha and
 * beta at call time (host pointer mode) and queue a column-major cblas call on the handle's stream. */
#include "emu_cuda.h"

#include <cblas.h>
#include <stdlib.h>

struct ddp_emu_blas {
    cudaStream_t stream;
};

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    int n;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    return mode == CUBLAS_DEFAULT_MATH || mode == CUBLAS_PEDANTIC_MATH || mode == CUBLAS_TF32_TENSOR_OP_MATH
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_INVALID_VALUE;
}

typedef struct {
    int gemv, ta, tb, m, n, k, lda, ldb, ldc, incx, incy;
    float alpha, beta;
    const float *A, *B;
    float *C;
} blas_args;

static void run_blas(void *p)
{
    blas_args *a = p;
    if (a->gemv)
        cblas_sgemv(CblasColMajor, a->ta ? CblasTrans : CblasNoTrans, a->m, a->n, a->alpha, a->A, a->lda, a->B, a->incx, a->beta,
                    a->C, a->incy);
    else
        cblas_sgemm(CblasColMajor, a->ta ? CblasTrans : CblasNoTrans, a->tb ? CblasTrans : CblasNoTrans, a->m, a->n, a->k,
                    a->alpha, a->A, a->lda, a->B, a->ldb, a->beta, a->C, a->ldc);
}

static int dev(const void *p) { return p && ddp_emu_is_device_ptr(p, 1); }

static cublasStatus_t submit(cublasHandle_t h, blas_args *a)
{
    blas_args *c = malloc(sizeof *c);
    if (!c) return CUBLAS_STATUS_ALLOC_FAILED;
    *c = *a;
    return ddp_emu_enqueue(h->stream, run_blas, c, free) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                           const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int arow = ta == CUBLAS_OP_N ? m : k, brow = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (arow > 1 ? arow : 1) || ldb < (brow > 1 ? brow : 1) || ldc < (m > 1 ? m : 1) ||
        (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    if ((k && (!dev(A) || !dev(B))) || !dev(C)) return CUBLAS_STATUS_INVALID_VALUE; /* host memory given to the GPU */
    blas_args a = {0, ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, lda, ldb, ldc, 0, 0, *alpha, *beta, A, B, C};
    return submit(h, &a);
}

cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t t, int m, int n, const float *alpha, const float *A, int lda,
                           const float *x, int incx, const float *beta, float *y, int incy)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || !incx || !incy || (t != CUBLAS_OP_N && t != CUBLAS_OP_T) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    if (!dev(A) || !dev(x) || !dev(y)) return CUBLAS_STATUS_INVALID_VALUE;
    blas_args a = {1, t == CUBLAS_OP_T, 0, m, n, 0, lda, 0, 0, incx, incy, *alpha, *beta, A, x, y};
    return submit(h, &a);
}
