/* backend_cuda_gemm.cu — the CUDA backend's cuBLAS products: gemm, gemm16 and set_precision (fp32, or TF32 or bf16
 * operands with fp32 accumulation; the bf16 rounding kernel and the use of the weights' bf16 copy), and colsum (a gemv
 * over the ones). Here, below both its callers (backend_cuda.cu, backend_cuda_enc.cu), colsum closes no call circle. */
#include "mpi_ddp/backend/cuda/backend_cuda_priv.h"

#include <stdint.h>

/* ------------------------------------------------------------------ kernels */
/* y (rows x cols, packed) = x (rows x cols, leading dimension ld) rounded to bf16, nearest even: blockIdx.x
 * walks a row's columns (consecutive threads, consecutive floats), blockIdx.y the rows in a grid stride (the
 * grid's y is at most 65535); no division per element. */
__global__ void k_to_bf16(const float *x, int64_t rows, int64_t cols, int64_t ld, __nv_bfloat16 *y)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) y[r * cols + c] = __float2bfloat16_rn(x[r * ld + c]);
}

/* ------------------------------------------------------------------ helpers */
/* The rows x cols row-major matrix x (leading dimension ld) rounded to bf16 into y, packed. */
static ddp_status to_bf16(cuda_impl *c, const float *x, int64_t rows, int64_t cols, int64_t ld, __nv_bfloat16 *y)
{
    if (rows * cols == 0) return DDP_OK;
    dim3 grid(blocks_for(cols, 256), (unsigned)(rows < 65535 ? rows : 65535));
    DDP_LAUNCH(k_to_bf16, grid, 256, 0, c->stream, x, rows, cols, ld, y);
    LAUNCH_CHECK();
    return DDP_OK;
}

/* The bf16 copy of the rows x ld operand x when it lies inside the weights and their copy is current, else NULL. */
static const __nv_bfloat16 *weight_copy(const cuda_impl *c, const float *x, int64_t rows, int64_t ld)
{
    if (!c->w_valid || x < c->w_base || rows <= 0) return NULL;
    int64_t at = x - c->w_base;
    return at + (rows - 1) * ld < c->w_n ? c->w16 + at : NULL;
}

/* The bf16 scratch grown to at least `need` elements: by a larger gemm than any before (the first steps), in
 * stream order, no host wait. */
static ddp_status bf16_scratch(cuda_impl *c, size_t need)
{
    if (need <= c->bf16_cap) return DDP_OK;
    size_t cap = need + need / 4;
    if (c->bf16) CUDA_CHECK(cudaFreeAsync(c->bf16, c->stream));
    c->bf16 = NULL, c->bf16_cap = 0;
    ALLOC_CHECK(cudaMallocAsync((void **)&c->bf16, cap * sizeof(__nv_bfloat16), c->stream), cap * sizeof(__nv_bfloat16),
                c->device, "the bf16 copies of the GEMM operands (--precision bf16)");
    c->bf16_cap = cap;
    return DDP_OK;
}

/* DDP_ERR_ARG when a dimension exceeds cuBLAS's int */
static ddp_status check_dims(int64_t M, int64_t N, int64_t K)
{
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return ddp_set_error(DDP_ERR_ARG, "gemm dimensions exceed cuBLAS int range");
    return DDP_OK;
}

/* The bf16 GEMM, M, N > 0. An operand given in bf16 (a16, b16 non-NULL, leading dimension lda, ldb) is cuBLAS's
 * operand as it is; an fp32 one (A, B) inside the weights is read from their bf16 copy with its own leading
 * dimension, any other is rounded to bf16 into the scratch, packed (B's copy 16-byte aligned). Then bf16 x bf16
 * products accumulated in fp32 into the fp32 C. */
static ddp_status gemm_bf16(cuda_impl *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            const __nv_bfloat16 *a16, int64_t lda, const float *B, const __nv_bfloat16 *b16,
                            int64_t ldb, float beta, float *C, int64_t ldc)
{
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda16 = lda, ldb16 = ldb;
    if (!a16 && (a16 = weight_copy(c, A, ar, lda)) == NULL) lda16 = ac > 1 ? ac : 1;
    if (!b16 && (b16 = weight_copy(c, B, br, ldb)) == NULL) ldb16 = bc > 1 ? bc : 1;
    size_t na = a16 ? 0 : ((size_t)(ar * ac) + 7) & ~(size_t)7;
    DDP_CHECK(bf16_scratch(c, na + (b16 ? 0 : (size_t)(br * bc))));
    if (!a16) {
        DDP_CHECK(to_bf16(c, A, ar, ac, lda, c->bf16));
        a16 = c->bf16;
    }
    if (!b16) {
        DDP_CHECK(to_bf16(c, B, br, bc, ldb, c->bf16 + na));
        b16 = c->bf16 + na;
    }
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T */
    CUBLAS_COMPUTE(cublasGemmEx(c->blas, opb, opa, (int)N, (int)M, (int)K, &alpha, b16, CUDA_R_16BF, (int)ldb16, a16,
                                CUDA_R_16BF, (int)lda16, &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    return DDP_OK;
}

/* ------------------------------------------------------------------ ops */
ddp_status ddp_cuda_gemm(ddp_backend *b, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return DDP_OK;
    DDP_CHECK(check_dims(M, N, K));
    cuda_impl *c = cuda_of(b);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T */
    if (c->precision == DDP_PRECISION_FP32) { /* exact fp32 (pedantic math): the reference */
        CUBLAS_COMPUTE(cublasSgemm(c->blas, opb, opa, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, A, (int)lda, &beta,
                                   C, (int)ldc));
        return DDP_OK;
    }
    if (c->precision == DDP_PRECISION_TF32) { /* tensor cores read A and B as TF32; fp32 accumulation and C */
        CUBLAS_COMPUTE(cublasGemmEx(c->blas, opb, opa, (int)N, (int)M, (int)K, &alpha, B, CUDA_R_32F, (int)ldb, A,
                                    CUDA_R_32F, (int)lda, &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F_FAST_TF32,
                                    CUBLAS_GEMM_DEFAULT));
        return DDP_OK;
    }
    return gemm_bf16(c, ta, tb, M, N, K, alpha, A, NULL, lda, B, NULL, ldb, beta, C, ldc);
}

ddp_status ddp_cuda_gemm16(ddp_backend *b, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                           int a16, int64_t lda, const void *B, int b16, int64_t ldb, float beta, float *C, int64_t ldc)
{
    cuda_impl *c = cuda_of(b);
    if (c->precision != DDP_PRECISION_BF16)
        return ddp_set_error(DDP_ERR_ARG,
                             "cuda gemm16: bf16 operands need --precision bf16 (the backend computes in %s)",
                             c->precision == DDP_PRECISION_TF32 ? "tf32" : "fp32");
    if (M <= 0 || N <= 0) return DDP_OK;
    DDP_CHECK(check_dims(M, N, K));
    return gemm_bf16(c, ta, tb, M, N, K, alpha, a16 ? NULL : (const float *)A, a16 ? (const __nv_bfloat16 *)A : NULL,
                     lda, b16 ? NULL : (const float *)B, b16 ? (const __nv_bfloat16 *)B : NULL, ldb, beta, C, ldc);
}

ddp_status ddp_cuda_set_precision(ddp_backend *b, ddp_precision p)
{
    if (p != DDP_PRECISION_FP32 && p != DDP_PRECISION_TF32 && p != DDP_PRECISION_BF16)
        return ddp_set_error(DDP_ERR_ARG, "the CUDA backend has no precision %d (fp32, tf32 or bf16)", (int)p);
    if (cuda_of(b)->precision != p) cuda_of(b)->w_valid = 0; /* the copy is refreshed only at bf16 */
    cuda_of(b)->precision = p;
    return DDP_OK;
}

/* ------------------------------------------------------------------ column sums */
/* through the backend's ones vector, sized by reserve() (backend_cuda.cu) */
ddp_status ddp_cuda_colsum(ddp_backend *b, const float *x, float *out, int64_t rows, int64_t cols, float beta)
{
    cuda_impl *c = cuda_of(b);
    if (rows > c->ones_len)
        return ddp_set_error(DDP_ERR_ARG,
                             "cuda colsum over %lld rows: the backend reserved %lld (reserve() at model creation)",
                             (long long)rows, (long long)c->ones_len);
    if (rows <= 0 || cols <= 0) return DDP_OK;
    float one = 1.0f;
    /* x row-major [rows, cols] is column-major [cols, rows]; out = x_cm * ones */
    CUBLAS_COMPUTE(
        cublasSgemv(c->blas, CUBLAS_OP_N, (int)cols, (int)rows, &one, x, (int)cols, c->ones, 1, &beta, out, 1));
    return DDP_OK;
}
