/* emu_cublas.c — the emulated cuBLAS subset (see emu_cuda.h): a handle holds a stream and a math mode; Sgemm,
 * GemmEx and Sgemv check their arguments as cuBLAS does (dimensions, leading dimensions, types, device
 * pointers), take alpha and beta at call time (host pointer mode) and queue a column-major cblas call on the
 * handle's stream. A GEMM whose inputs a GPU rounds (TF32 tensor cores) or converts (bf16) reads them, when
 * the stream runs it, into fp32 copies holding exactly the values the tensor cores multiply. */
#include "emu_cuda.h"

#include <cblas.h>
#include <stdlib.h>

struct ddp_emu_blas {
    cudaStream_t stream;
    cublasMath_t math;
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
    if (mode != CUBLAS_DEFAULT_MATH && mode != CUBLAS_PEDANTIC_MATH && mode != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

enum { IN_FP32, IN_TF32, IN_BF16 }; /* how a GEMM reads A and B */

typedef struct {
    int gemv, ta, tb, m, n, k, lda, ldb, ldc, incx, incy;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int in;              /* IN_*: IN_TF32 and IN_BF16 read A and B into ca, cb first */
    const void *rA, *rB; /* those inputs (fp32 or bf16) */
    float *ca, *cb;      /* their fp32 copies, packed (leading dimension = rows) */
} blas_args;

/* The rows x cols column-major matrix at src (leading dimension ld, fp32 or bf16) into dst, as the tensor
 * cores see it: TF32-rounded, or bf16 widened exactly. */
static void read_input(int in, const void *src, int rows, int cols, int ld, float *dst)
{
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++)
            dst[j * rows + i] = in == IN_BF16 ? __bfloat162float(((const __nv_bfloat16 *)src)[j * ld + i])
                                              : ddp_emu_tf32(((const float *)src)[j * ld + i]);
}

static void run_blas(void *p)
{
    blas_args *a = p;
    if (a->in != IN_FP32 && a->k) {
        int ar = a->ta ? a->k : a->m, ac = a->ta ? a->m : a->k, br = a->tb ? a->n : a->k, bc = a->tb ? a->k : a->n;
        read_input(a->in, a->rA, ar, ac, a->lda, a->ca);
        read_input(a->in, a->rB, br, bc, a->ldb, a->cb);
        a->A = a->ca, a->B = a->cb, a->lda = ar > 1 ? ar : 1, a->ldb = br > 1 ? br : 1;
    }
    if (a->gemv)
        cblas_sgemv(CblasColMajor, a->ta ? CblasTrans : CblasNoTrans, a->m, a->n, a->alpha, a->A, a->lda, a->B, a->incx,
                    a->beta, a->C, a->incy);
    else
        cblas_sgemm(CblasColMajor, a->ta ? CblasTrans : CblasNoTrans, a->tb ? CblasTrans : CblasNoTrans, a->m, a->n,
                    a->k, a->alpha, a->A, a->lda, a->B, a->ldb, a->beta, a->C, a->ldc);
}

static int dev(const void *p) { return p && ddp_emu_is_device_ptr(p, 1); }

static void free_blas(void *p)
{
    blas_args *a = p;
    free(a->ca);
    free(a->cb);
    free(a);
}

/* Queues the call; a rounded-input GEMM gets its copies' memory now (cuBLAS's workspace), filled when it runs. */
static cublasStatus_t submit(cublasHandle_t h, blas_args *a)
{
    blas_args *c = calloc(1, sizeof *c);
    if (!c) return CUBLAS_STATUS_ALLOC_FAILED;
    *c = *a;
    if (c->in != IN_FP32 && c->k) {
        c->rA = c->A, c->rB = c->B;
        c->ca = malloc((size_t)c->m * (size_t)c->k * sizeof(float));
        c->cb = malloc((size_t)c->k * (size_t)c->n * sizeof(float));
        if (!c->ca || !c->cb) {
            free_blas(c);
            return CUBLAS_STATUS_ALLOC_FAILED;
        }
    }
    return ddp_emu_enqueue(h->stream, run_blas, c, free_blas) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                             : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* cuBLAS's checks of a GEMM's sizes, leading dimensions and transposes (column-major). */
static int gemm_args_ok(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc)
{
    int arow = ta == CUBLAS_OP_N ? m : k, brow = tb == CUBLAS_OP_N ? k : n;
    return m >= 0 && n >= 0 && k >= 0 && lda >= (arow > 1 ? arow : 1) && ldb >= (brow > 1 ? brow : 1) &&
           ldc >= (m > 1 ? m : 1) && (ta == CUBLAS_OP_N || ta == CUBLAS_OP_T) &&
           (tb == CUBLAS_OP_N || tb == CUBLAS_OP_T);
}

/* A GEMM's arguments (column-major, as cuBLAS takes them) submitted to h's stream. */
static cublasStatus_t submit_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  int lda, int ldb, int ldc, float alpha, float beta, const void *A, const void *B,
                                  void *C, int in)
{
    blas_args a = {.ta = ta == CUBLAS_OP_T, .tb = tb == CUBLAS_OP_T, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb};
    a.ldc = ldc, a.alpha = alpha, a.beta = beta, a.A = A, a.B = B, a.C = C, a.in = in;
    return submit(h, &a);
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc) || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    if ((k && (!dev(A) || !dev(B))) || !dev(C)) return CUBLAS_STATUS_INVALID_VALUE; /* host memory given to the GPU */
    return submit_gemm(h, ta, tb, m, n, k, lda, ldb, ldc, *alpha, *beta, A, B, C,
                       h->math == CUBLAS_TF32_TENSOR_OP_MATH ? IN_TF32 : IN_FP32);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int bf16 = Atype == CUDA_R_16BF;
    if (Atype != Btype || (Atype != CUDA_R_32F && !bf16) || Ctype != CUDA_R_32F || algo != CUBLAS_GEMM_DEFAULT ||
        (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
         (bf16 || compute != CUBLAS_COMPUTE_32F_FAST_TF32)))
        return CUBLAS_STATUS_NOT_SUPPORTED; /* the combinations mpiddp uses, as cuBLAS's table allows them */
    if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc) || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    if ((k && (!dev(A) || !dev(B))) || !dev(C)) return CUBLAS_STATUS_INVALID_VALUE;
    int tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
               (compute == CUBLAS_COMPUTE_32F && h->math == CUBLAS_TF32_TENSOR_OP_MATH);
    return submit_gemm(h, ta, tb, m, n, k, lda, ldb, ldc, *(const float *)alpha, *(const float *)beta, A, B, C,
                       bf16   ? IN_BF16
                       : tf32 ? IN_TF32
                              : IN_FP32);
}

cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t t, int m, int n, const float *alpha, const float *A,
                           int lda, const float *x, int incx, const float *beta, float *y, int incy)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || !incx || !incy || (t != CUBLAS_OP_N && t != CUBLAS_OP_T) || !alpha ||
        !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    if (!dev(A) || !dev(x) || !dev(y)) return CUBLAS_STATUS_INVALID_VALUE;
    blas_args a = {1, t == CUBLAS_OP_T, 0,    m,    n,    0,   lda, 0, 0, incx, incy, *alpha, *beta, A, x,
                   y, IN_FP32,          NULL, NULL, NULL, NULL};
    return submit(h, &a);
}
