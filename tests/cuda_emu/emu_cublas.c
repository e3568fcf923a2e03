/* emu_cublas.c — the emulated cuBLAS and cuBLASLt subsets (see emu_cuda.h): a handle holds a stream and a math mode;
 * Sgemm, GemmEx, Sgemv and cublasLtMatmul check their arguments as cuBLAS does (dimensions, leading dimensions, types,
 * device pointers), take alpha and beta at call time (host pointer mode) and queue a column-major cblas call on the
 * stream, cublasLtMatmul's epilogue after it (and with a bf16 D, beta 0, the fp32 result rounded into D). A GEMM whose
 * inputs a GPU rounds (TF32 tensor cores) or converts (bf16) reads them, when the stream runs it, into fp32 copies
 * holding exactly the values the tensor cores multiply. */
#include "emu_cuda.h"

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    int epi;             /* cublasLtMatmul: CUBLASLT_EPILOGUE_*, applied to C after the product; 0 otherwise */
    float *vec;          /* its bias (added to C's rows) or bias gradient (written: op(B) summed over k) */
    __nv_bfloat16 *d16;  /* cublasLtMatmul with a bf16 D (beta 0): C is fp32 scratch (ldc = m), rounded into d16 */
    int ld16;            /* d16's leading dimension */
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
    if (a->epi == CUBLASLT_EPILOGUE_BIAS)
        for (int64_t j = 0; j < a->n; j++)
            for (int64_t i = 0; i < a->m; i++) a->C[j * a->ldc + i] += a->vec[i];
    if (a->epi == CUBLASLT_EPILOGUE_BGRADB) /* over op(B) as the tensor cores read it */
        for (int64_t j = 0; j < a->n; j++) {
            float s = 0.0f;
            for (int64_t q = 0; q < a->k; q++) s += a->tb ? a->B[q * a->ldb + j] : a->B[j * a->ldb + q];
            a->vec[j] = s;
        }
    if (a->d16) /* the fp32 result rounded once, to nearest even */
        for (int64_t j = 0; j < a->n; j++)
            for (int64_t i = 0; i < a->m; i++) a->d16[j * a->ld16 + i] = __float2bfloat16_rn(a->C[j * a->ldc + i]);
}

static int dev(const void *p) { return p && ddp_emu_is_device_ptr(p, 1); }

static void free_blas(void *p)
{
    blas_args *a = p;
    free(a->ca);
    free(a->cb);
    if (a->d16) free(a->C);
    free(a);
}

/* Queues the call; a rounded-input GEMM gets its copies' memory now (cuBLAS's workspace), filled when it runs. */
static cublasStatus_t submit(cublasHandle_t h, blas_args *a)
{
    blas_args *c = calloc(1, sizeof *c);
    if (!c) return CUBLAS_STATUS_ALLOC_FAILED;
    *c = *a;
    if (c->d16 && !(c->C = calloc((size_t)c->m * (size_t)c->n, sizeof(float)))) {
        free(c);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
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
    blas_args a = {.gemv = 1, .ta = t == CUBLAS_OP_T, .m = m, .n = n, .lda = lda, .incx = incx, .incy = incy};
    a.alpha = *alpha, a.beta = *beta, a.A = A, a.B = x, a.C = y, a.in = IN_FP32;
    return submit(h, &a);
}

/* ------------------------------------------------------------------ cuBLASLt */
struct ddp_emu_lt {
    int unused;
};
struct ddp_emu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType scale;
    int32_t opa, opb, vtype;
    uint32_t epi;
    void *vec;
};
struct ddp_emu_lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct ddp_emu_lt_pref {
    uint64_t ws;
    uint32_t align[4]; /* the least alignment in bytes of A, B, C and D the caller promises */
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    int n;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType scale)
{
    *d = calloc(1, sizeof **d);
    if (!*d) return CUBLAS_STATUS_ALLOC_FAILED;
    **d = (struct ddp_emu_lt_desc){compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, -1, CUBLASLT_EPILOGUE_DEFAULT, NULL};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
/* the attribute's size must be its type's, as cuBLASLt checks */
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    void *dst = attr == CUBLASLT_MATMUL_DESC_TRANSA           ? (void *)&d->opa
                : attr == CUBLASLT_MATMUL_DESC_TRANSB         ? (void *)&d->opb
                : attr == CUBLASLT_MATMUL_DESC_EPILOGUE       ? (void *)&d->epi
                : attr == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE ? (void *)&d->vtype
                : attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER   ? (void *)&d->vec
                                                              : NULL;
    size_t want = attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER ? sizeof(void *) : 4;
    if (!d || !dst || !buf || size != want) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    if (ld < (int64_t)(rows > 1 ? rows : 1) || rows > INT32_MAX || cols > INT32_MAX) return CUBLAS_STATUS_INVALID_VALUE;
    *l = calloc(1, sizeof **l);
    if (!*l) return CUBLAS_STATUS_ALLOC_FAILED;
    **l = (struct ddp_emu_lt_layout){type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = calloc(1, sizeof **p);
    if (!*p) return CUBLAS_STATUS_ALLOC_FAILED;
    for (int i = 0; i < 4; i++) (*p)->align[i] = 256;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size)
{
    if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == sizeof p->ws) {
        memcpy(&p->ws, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    }
    int i = (int)attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
    if (i < 0 || i > 3 || size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&p->align[i], buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

/* The problem a descriptor and its layouts describe, as cuBLASLt validates it: INVALID_VALUE for shapes that do not
 * fit together, NOT_SUPPORTED for types and epilogues outside the subset (a GPU would look for an algorithm). */
static cublasStatus_t lt_problem(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                 cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, int *m, int *n, int *k)
{
    if (!d || !a || !b || !c || !dd) return CUBLAS_STATUS_INVALID_VALUE;
    int ta = d->opa == CUBLAS_OP_T, tb = d->opb == CUBLAS_OP_T;
    *m = (int)c->rows, *n = (int)c->cols, *k = (int)(ta ? a->rows : a->cols);
    if ((uint64_t)*m != (ta ? a->cols : a->rows) || (uint64_t)*k != (tb ? b->cols : b->rows) ||
        (uint64_t)*n != (tb ? b->rows : b->cols) || c->rows != dd->rows || c->cols != dd->cols || c->ld != dd->ld)
        return CUBLAS_STATUS_INVALID_VALUE;
    int bf16 = a->type == CUDA_R_16BF;
    if (a->type != b->type || (a->type != CUDA_R_32F && !bf16) || c->type != dd->type ||
        (c->type != CUDA_R_32F && (c->type != CUDA_R_16BF || d->epi == CUBLASLT_EPILOGUE_BGRADB)) ||
        d->scale != CUDA_R_32F ||
        (d->compute != CUBLAS_COMPUTE_32F && (bf16 || d->compute != CUBLAS_COMPUTE_32F_FAST_TF32)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && d->epi != CUBLASLT_EPILOGUE_BIAS && d->epi != CUBLASLT_EPILOGUE_BGRADB)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && (!d->vec || (d->vtype != -1 && d->vtype != CUDA_R_32F)))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *results, int *returned)
{
    int m, n, k;
    if (!h || !p || requested < 1 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    cublasStatus_t s = lt_problem(d, a, b, c, dd, &m, &n, &k);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (ddp_emu_env_long("MPIDDP_EMU_LT_REFUSE", 0) > 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(results, 0, sizeof *results);
    results[0].algo.data[0] = 1; /* cublasLtMatmul takes only this emulator's algorithm, */
    for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = p->align[i] ? p->align[i] : 1; /* at these alignments */
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream)
{
    int m, n, k;
    (void)ws, (void)ws_bytes;
    if (!h || !alpha || !beta || !algo || algo->data[0] != 1) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = lt_problem(d, la, lb, lc, ld, &m, &n, &k);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (C != D) return CUBLAS_STATUS_NOT_SUPPORTED; /* mpiddp writes in place: the emulator has only that */
    const void *ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptr[i] % algo->data[1 + i] != 0) return CUBLAS_STATUS_INVALID_VALUE; /* a misaligned address */
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    if ((k && (!dev(A) || !dev(B))) || !dev(D) || (d->epi != CUBLASLT_EPILOGUE_DEFAULT && !dev(d->vec)))
        return CUBLAS_STATUS_INVALID_VALUE;
    int bf16 = la->type == CUDA_R_16BF, tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    blas_args a = {.ta = d->opa == CUBLAS_OP_T, .tb = d->opb == CUBLAS_OP_T, .m = m, .n = n, .k = k};
    a.lda = (int)la->ld, a.ldb = (int)lb->ld, a.ldc = (int)lc->ld, a.alpha = *(const float *)alpha;
    a.beta = *(const float *)beta, a.A = A, a.B = B, a.C = D, a.in = bf16 ? IN_BF16 : tf32 ? IN_TF32 : IN_FP32;
    a.epi = (int)d->epi, a.vec = d->vec;
    if (ld->type == CUDA_R_16BF) { /* the emulator's bf16 D: beta 0 only (mpiddp's), through an fp32 result */
        if (a.beta != 0.0f) return CUBLAS_STATUS_NOT_SUPPORTED;
        a.d16 = D, a.ld16 = a.ldc, a.ldc = m;
    }
    struct ddp_emu_blas one = {.stream = stream};
    return submit(&one, &a);
}
