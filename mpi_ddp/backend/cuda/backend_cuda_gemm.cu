/* backend_cuda_gemm.cu — the CUDA backend's cuBLAS products: gemm, gemm16 and set_precision (fp32, or TF32 or bf16
 * operands with fp32 accumulation; the bf16 rounding kernel and the use of the weights' bf16 copy), gemm_epi (cuBLASLt
 * with a bias or bias-gradient epilogue), linear_bwd (both gradient products from one rounding of dy), colsum (a gemv
 * over the ones) and add_bias. Here, below their callers
 * (backend_cuda.cu, backend_cuda_enc.cu), colsum and add_bias close no call circle. */
#include "mpi_ddp/backend/cuda/backend_cuda_priv.h"

#include <stdint.h>

/* ------------------------------------------------------------------ kernels */
/* y (rows x cols, packed) = x (rows x cols, leading dimension ld) rounded to bf16, nearest even: blockIdx.x
 * walks a row's columns V at a time (consecutive threads, consecutive groups: float4 loads and 8-byte stores at
 * V = 4), blockIdx.y the rows in a grid stride (the grid's y is at most 65535); no division per element. */
template <int V> __global__ void k_to_bf16(const float *x, int64_t rows, int64_t cols, int64_t ld, __nv_bfloat16 *y)
{
    int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (c >= cols) return;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        float v[V];
        vld<V>(x + r * ld, c, v);
        vst_out<V>(y + r * cols, c, v);
    }
}

/* x[r, c] += bias[c]: blockIdx.x walks a row's columns, blockIdx.y the rows in a grid stride; no division */
__global__ void k_add_bias(float *x, const float *bias, int64_t rows, int64_t cols)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float bc = bias[c];
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) x[r * cols + c] += bc;
}

/* ------------------------------------------------------------------ helpers */
/* The rows x cols row-major matrix x (leading dimension ld) rounded to bf16 into y, packed (the GEMMs' operands,
 * the reference attention forward's o: backend_cuda_priv.h) */
ddp_status ddp_cuda_to_bf16(cuda_impl *c, const float *x, int64_t rows, int64_t cols, int64_t ld, __nv_bfloat16 *y)
{
    if (rows * cols == 0) return DDP_OK;
    const int v = cols % 4 == 0 && ld % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 7) == 0 ? 4 : 1;
    dim3 grid(blocks_for(cols / v, 256), (unsigned)(rows < 65535 ? rows : 65535));
    if (v == 4)
        DDP_LAUNCH(k_to_bf16<4>, grid, 256, 0, c->stream, x, rows, cols, ld, y);
    else
        DDP_LAUNCH(k_to_bf16<1>, grid, 256, 0, c->stream, x, rows, cols, ld, y);
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
                c->device, "the bf16 copies of the GEMM operands (bf16 precision)");
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

/* The operands of a GEMM as cuBLAS reads them (row-major, leading dimensions in elements). */
typedef struct {
    const void *a, *b;
    int64_t lda, ldb;
    cudaDataType type;
} gemm_in;

/* The bf16 operands of a GEMM, M, N > 0. An operand given in bf16 (a16, b16 non-NULL, leading dimension lda, ldb) is
 * cuBLAS's operand as it is; an fp32 one (A, B) inside the weights is read from their bf16 copy with its own leading
 * dimension, any other is rounded to bf16 into the scratch, packed (B's copy 16-byte aligned). */
static ddp_status bf16_operands(cuda_impl *c, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                                const __nv_bfloat16 *a16, int64_t lda, const float *B, const __nv_bfloat16 *b16,
                                int64_t ldb, gemm_in *in)
{
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda16 = lda, ldb16 = ldb;
    if (!a16 && (a16 = weight_copy(c, A, ar, lda)) == NULL) lda16 = ac > 1 ? ac : 1;
    if (!b16 && (b16 = weight_copy(c, B, br, ldb)) == NULL) ldb16 = bc > 1 ? bc : 1;
    size_t na = a16 ? 0 : ((size_t)(ar * ac) + 7) & ~(size_t)7;
    DDP_CHECK(bf16_scratch(c, na + (b16 ? 0 : (size_t)(br * bc))));
    if (!a16) {
        DDP_CHECK(ddp_cuda_to_bf16(c, A, ar, ac, lda, c->bf16));
        a16 = c->bf16;
    }
    if (!b16) {
        DDP_CHECK(ddp_cuda_to_bf16(c, B, br, bc, ldb, c->bf16 + na));
        b16 = c->bf16 + na;
    }
    *in = (gemm_in){a16, b16, lda16, ldb16, CUDA_R_16BF};
    return DDP_OK;
}

/* The bf16 GEMM, M, N > 0: bf16 x bf16 products accumulated in fp32 into the fp32 C. */
static ddp_status gemm_bf16(cuda_impl *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            const __nv_bfloat16 *a16, int64_t lda, const float *B, const __nv_bfloat16 *b16,
                            int64_t ldb, float beta, float *C, int64_t ldc)
{
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    gemm_in in;
    DDP_CHECK(bf16_operands(c, ta, tb, M, N, K, A, a16, lda, B, b16, ldb, &in));
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T */
    CUBLAS_COMPUTE(cublasGemmEx(c->blas, opb, opa, (int)N, (int)M, (int)K, &alpha, in.b, CUDA_R_16BF, (int)in.ldb, in.a,
                                CUDA_R_16BF, (int)in.lda, &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
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
        return ddp_set_error(DDP_ERR_ARG, "cuda gemm16: bf16 operands need bf16 precision (the backend computes in %s)",
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

/* ------------------------------------------------------------------ cuBLASLt epilogues */
/* cuBLASLt's workspace: what NVIDIA recommends for Hopper (32 MiB), allocated once with the backend */
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)

ddp_status ddp_cuda_lt_create(cuda_impl *c)
{
    CUBLAS_CHECK(cublasLtCreate(&c->lt));
    ALLOC_CHECK(cudaMalloc(&c->lt_ws, LT_WORKSPACE_BYTES), LT_WORKSPACE_BYTES, c->device, "the cuBLASLt workspace");
    c->lt_ws_bytes = LT_WORKSPACE_BYTES;
    return DDP_OK;
}

/* The alignment in bytes cuBLASLt may assume of p: the largest power of two dividing its address, at most 256. */
static uint32_t lt_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uintptr_t low = a & (~a + 1);
    return a == 0 || low >= 256 ? 256u : (uint32_t)low;
}

/* Column-major D = C = alpha op(A) op(B) + beta C (m x n, op(A) m x k; C of type ctype: fp32, or bf16 rounded from
 * the fp32 result) with cuBLASLt's epilogue: BIAS adds
 * vec[0..m) to every column, BGRADB writes vec[j] = sum over k of op(B)[., j] (j < n). *ran = 0 when cuBLASLt has no
 * algorithm for it; then nothing was queued. Descriptors are host objects, made per call as PyTorch does: the
 * heuristic depends on the shapes, and a packed batch's rows change per step. The preference states each operand's
 * real alignment: parameters and their gradients are packed back to back, so a tensor inside them may be aligned
 * to 4 bytes only, where cuBLASLt otherwise assumes 256. */
static ddp_status lt_matmul(cuda_impl *c, cublasLtEpilogue_t epi, void *vec, cublasOperation_t opa,
                            cublasOperation_t opb, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                            int64_t lda, const void *B, int64_t ldb, cudaDataType type, cublasComputeType_t compute,
                            float beta, void *C, cudaDataType ctype, int64_t ldc, int *ran)
{
    ddp_status st = DDP_OK;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    cublasStatus_t hs;
    int found = 0;
    int32_t vtype = CUDA_R_32F;
    uint64_t ws = c->lt_ws_bytes;
    uint32_t al_a = lt_align(A), al_b = lt_align(B), al_c = lt_align(C);
    *ran = 0;
    CUBLAS_TRY(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vtype, sizeof vtype));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&la, type, opa == CUBLAS_OP_N ? m : k, opa == CUBLAS_OP_N ? k : m, lda));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&lb, type, opb == CUBLAS_OP_N ? k : n, opb == CUBLAS_OP_N ? n : k, ldb));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&lc, ctype, m, n, ldc));
    CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, 4));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, 4));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, 4));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, 4));
    /* NOT_SUPPORTED: no algorithm for this epilogue, types, layout and alignment (the caller composes) */
    hs = cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, lc, lc, pref, 1, &h, &found);
    if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) {
        st = DDP_CUBLAS_ERR_(cublasLtMatmulAlgoGetHeuristic, hs);
        goto done;
    }
    if (hs == CUBLAS_STATUS_SUCCESS && found > 0 && h.state == CUBLAS_STATUS_SUCCESS) {
        DDP_LAUNCH_NOTE();
        hs = cublasLtMatmul(c->lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &h.algo, c->lt_ws, ws, c->stream);
        if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) { /* NOT_SUPPORTED queues nothing */
            st = DDP_CUBLAS_ERR_(cublasLtMatmul, hs);
            goto done;
        }
        *ran = hs == CUBLAS_STATUS_SUCCESS;
    }
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return st;
}

/* out[c] += the column sums of the rows x cols bf16 x: one GEMM with the bf16 ones, the values widened exactly and
 * summed in fp32 (in cuBLAS's order) */
static ddp_status colsum16(cuda_impl *c, const __nv_bfloat16 *x, float *out, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0) return DDP_OK;
    if (rows > c->ones_len)
        return ddp_set_error(DDP_ERR_ARG,
                             "cuda colsum of bf16 values over %lld rows: the backend reserved %lld (reserve() at model "
                             "creation)",
                             (long long)rows, (long long)c->ones_len);
    DDP_CHECK(check_dims(cols, 1, rows));
    const float one = 1.0f;
    /* x row-major [rows, cols] is column-major [cols, rows]: out = x_cm . ones16 + out */
    CUBLAS_COMPUTE(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)cols, 1, (int)rows, &one, x, CUDA_R_16BF,
                                (int)cols, c->ones16, CUDA_R_16BF, (int)rows, &one, out, CUDA_R_32F, (int)cols,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return DDP_OK;
}

/* bias[0..n) += colpart[0..n): a bias gradient that cuBLASLt's BGRADB wrote, added to the accumulating one */
static ddp_status add_colpart(cuda_impl *c, float *bias, int64_t n)
{
    DDP_LAUNCH(k_add_bias, dim3(blocks_for(n, 256), 1), 256, 0, c->stream, bias, c->colpart, (int64_t)1, n);
    LAUNCH_CHECK();
    return DDP_OK;
}

/* C = alpha op(A) op(B) + beta C on operands as cuBLAS reads them (in), M, N, K > 0, then the epilogue epi: none (0;
 * with DDP_EPI_C16 and beta 0: C is bf16, the fp32 result rounded once, through cuBLASLt's default epilogue),
 * DDP_EPI_BIAS (with DDP_EPI_C16 likewise) or DDP_EPI_BGRAD (A32: the fp32 A its
 * unfused column sums read; NULL: A is bf16, summed as it is by colsum16). An epilogue runs in cuBLASLt, the
 * bias gradient landing in colpart (BGRADB writes, it does not add) and added to bias by one short launch; where
 * cuBLASLt has no algorithm, or the bias gradient is wider than colpart, the same operands through cublasGemmEx,
 * then the bias add or the column sums: the unfused calls' bits. */
static ddp_status epi_run(ddp_backend *b, int epi, float *bias, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          float alpha, const gemm_in *in, cublasComputeType_t compute, const float *A32, float beta,
                          void *Cv, int64_t ldc)
{
    cuda_impl *c = cuda_of(b);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int c16 = (epi & DDP_EPI_C16) != 0;
    epi &= ~DDP_EPI_C16;
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T: the bias runs along C^T's rows (N of
     * them), the bias gradient sums the second operand (A) over k into C^T's columns (M) */
    int ran = 0;
    if (epi == DDP_EPI_BIAS || (epi == DDP_EPI_BGRAD && M <= DDP_COLPART_FLOATS) || (epi == 0 && c16))
        DDP_CHECK(lt_matmul(c,
                            epi == DDP_EPI_BIAS    ? CUBLASLT_EPILOGUE_BIAS
                            : epi == DDP_EPI_BGRAD ? CUBLASLT_EPILOGUE_BGRADB
                                                   : CUBLASLT_EPILOGUE_DEFAULT,
                            epi == DDP_EPI_BIAS ? (void *)bias : (void *)c->colpart, opb, opa, N, M, K, alpha, in->b,
                            in->ldb, in->a, in->lda, in->type, compute, beta, Cv, c16 ? CUDA_R_16BF : CUDA_R_32F, ldc,
                            &ran));
    if (ran) return epi == DDP_EPI_BGRAD ? add_colpart(c, bias, M) : DDP_OK;
    /* a bf16 C without cuBLASLt: the fp32 product and bias add in the f32 scratch, then one rounding pass */
    float *C = (float *)Cv;
    if (c16) {
        DDP_CHECK(ddp_cuda_grow(c, &c->f32, &c->f32_cap, (size_t)(M * N) * sizeof(float), "a bf16 GEMM's fp32 result"));
        C = (float *)c->f32;
    }
    CUBLAS_COMPUTE(cublasGemmEx(c->blas, opb, opa, (int)N, (int)M, (int)K, &alpha, in->b, in->type, (int)in->ldb, in->a,
                                in->type, (int)in->lda, &beta, C, CUDA_R_32F, (int)ldc, compute, CUBLAS_GEMM_DEFAULT));
    if (c16) {
        if (epi == DDP_EPI_BIAS) DDP_CHECK(ddp_cuda_add_bias(b, C, bias, M, N));
        return ddp_cuda_to_bf16(c, C, M, N, N, (__nv_bfloat16 *)Cv);
    }
    if (epi == DDP_EPI_BIAS) return ddp_cuda_add_bias(b, C, bias, M, N);
    if (epi == DDP_EPI_BGRAD && A32) return ddp_cuda_colsum(b, A32, bias, K, M, 1.0f);
    if (epi == DDP_EPI_BGRAD) return colsum16(c, (const __nv_bfloat16 *)in->a, bias, K, M);
    return DDP_OK;
}

ddp_status ddp_cuda_gemm_epi(ddp_backend *b, int epi, float *bias, int ta, int tb, int64_t M, int64_t N, int64_t K,
                             float alpha, const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb,
                             float beta, void *Cv, int64_t ldc)
{
    cuda_impl *c = cuda_of(b);
    const int bias_epi = (epi & ~DDP_EPI_C16) == DDP_EPI_BIAS;
    if (!(bias_epi && beta == 0.0f && ldc == N) && !(epi == DDP_EPI_BGRAD && ta && !a16 && lda == M && alpha == 1.0f))
        return ddp_set_error(DDP_ERR_ARG,
                             "cuda gemm_epi: epilogue %d with transa %d, a16 %d, lda %lld, ldc %lld, alpha %g, beta %g "
                             "(bias: beta 0 and a packed C; bias gradient: transa 1, alpha 1 and a packed fp32 A; a "
                             "bf16 C: the bias epilogue only)",
                             epi, ta, a16, (long long)lda, (long long)ldc, (double)alpha, (double)beta);
    if ((a16 || b16 || (epi & DDP_EPI_C16)) && c->precision != DDP_PRECISION_BF16)
        return ddp_set_error(DDP_ERR_ARG,
                             "cuda gemm_epi: bf16 operands or output need bf16 precision (the backend computes "
                             "in %s)",
                             c->precision == DDP_PRECISION_TF32 ? "tf32" : "fp32");
    float *C = (float *)Cv;
    if (M <= 0 || (N <= 0 && (epi & DDP_EPI_C16))) return DDP_OK;
    if ((epi & DDP_EPI_C16) && K <= 0) { /* an empty product: the bias, rounded */
        DDP_CHECK(ddp_cuda_grow(c, &c->f32, &c->f32_cap, (size_t)(M * N) * sizeof(float), "a bf16 GEMM's fp32 result"));
        CUDA_CHECK(cudaMemsetAsync(c->f32, 0, (size_t)(M * N) * sizeof(float), c->stream));
        DDP_CHECK(ddp_cuda_add_bias(b, (float *)c->f32, bias, M, N));
        return ddp_cuda_to_bf16(c, (const float *)c->f32, M, N, N, (__nv_bfloat16 *)Cv);
    }
    if (N > 0 && K > 0 && c->precision != DDP_PRECISION_FP32) { /* a bf16 C (at bf16 only) always here */
        DDP_CHECK(check_dims(M, N, K));
        gemm_in in = {A, B, lda, ldb, CUDA_R_32F};
        cublasComputeType_t compute = CUBLAS_COMPUTE_32F_FAST_TF32;
        if (c->precision == DDP_PRECISION_BF16) {
            DDP_CHECK(bf16_operands(c, ta, tb, M, N, K, a16 ? NULL : (const float *)A,
                                    a16 ? (const __nv_bfloat16 *)A : NULL, lda, b16 ? NULL : (const float *)B,
                                    b16 ? (const __nv_bfloat16 *)B : NULL, ldb, &in));
            compute = CUBLAS_COMPUTE_32F;
        }
        return epi_run(b, epi, bias, ta, tb, M, N, K, alpha, &in, compute, (const float *)A, beta, C, ldc);
    }
    /* fp32 (the pedantic reference) and empty products: the unfused calls */
    if (a16 || b16)
        DDP_CHECK(ddp_cuda_gemm16(b, ta, tb, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta, C, ldc));
    else
        DDP_CHECK(ddp_cuda_gemm(b, ta, tb, M, N, K, alpha, (const float *)A, lda, (const float *)B, ldb, beta, C, ldc));
    if (epi == DDP_EPI_BIAS) return ddp_cuda_add_bias(b, C, bias, M, N);
    return ddp_cuda_colsum(b, (const float *)A, bias, K, M, 1.0f);
}

/* ------------------------------------------------------------------ a linear layer's backward */
ddp_status ddp_cuda_linear_bwd(ddp_backend *b, const void *dy, int dy16, const void *x, int x16, const float *W,
                               float *dW, float *dbias, void *dxv, int dx16, int64_t R, int64_t N, int64_t K)
{
    cuda_impl *c = cuda_of(b);
    float *dx = (float *)dxv;
    if (dbias && dy16 && c->precision != DDP_PRECISION_BF16)
        return ddp_set_error(DDP_ERR_ARG, "cuda linear_bwd: a bf16 dy needs bf16 precision");
    if (dx16 && c->precision != DDP_PRECISION_BF16)
        return ddp_set_error(DDP_ERR_ARG, "cuda linear_bwd: a bf16 dx needs bf16 precision");
    if (c->precision != DDP_PRECISION_BF16 || R <= 0 || N <= 0 || K <= 0) { /* nothing to convert: the two products */
        if (dbias && dy16) DDP_CHECK(colsum16(c, (const __nv_bfloat16 *)dy, dbias, R, N));
        if (dbias && !dy16)
            DDP_CHECK(
                ddp_cuda_gemm_epi(b, DDP_EPI_BGRAD, dbias, 1, 0, N, K, R, 1.0f, dy, 0, N, x, x16, K, 1.0f, dW, K));
        else if (x16 || dy16) /* gemm16 refuses them at another precision, with its line */
            DDP_CHECK(ddp_cuda_gemm16(b, 1, 0, N, K, R, 1.0f, dy, dy16, N, x, x16, K, 1.0f, dW, K));
        else
            DDP_CHECK(ddp_cuda_gemm(b, 1, 0, N, K, R, 1.0f, (const float *)dy, N, (const float *)x, K, 1.0f, dW, K));
        if (dx16) return DDP_OK; /* at bf16 here: R or K is 0, dx empty (N 0 is no layer: cuBLAS refused its ld) */
        if (dy16) return ddp_cuda_gemm16(b, 0, 0, R, K, N, 1.0f, dy, 1, N, W, 0, K, 0.0f, dx, K);
        return ddp_cuda_gemm(b, 0, 0, R, K, N, 1.0f, (const float *)dy, N, W, K, 0.0f, dx, K);
    }
    DDP_CHECK(check_dims(R, N, K));
    /* the scratch holds dy's rounding (read by both products) unless dy is bf16 already, x's when it is fp32, W's
     * when its copy is stale */
    const __nv_bfloat16 *w16 = weight_copy(c, W, N, K);
    size_t ndy = dy16 ? 0 : ((size_t)(R * N) + 7) & ~(size_t)7, nx = x16 ? 0 : ((size_t)(R * K) + 7) & ~(size_t)7;
    DDP_CHECK(bf16_scratch(c, ndy + nx + (w16 ? 0 : (size_t)(N * K))));
    const __nv_bfloat16 *dyb = dy16 ? (const __nv_bfloat16 *)dy : c->bf16,
                        *xb = x16 ? (const __nv_bfloat16 *)x : c->bf16 + ndy;
    if (!dy16) DDP_CHECK(ddp_cuda_to_bf16(c, (const float *)dy, R, N, N, c->bf16));
    if (!x16) DDP_CHECK(ddp_cuda_to_bf16(c, (const float *)x, R, K, K, c->bf16 + ndy));
    if (!w16) {
        DDP_CHECK(ddp_cuda_to_bf16(c, W, N, K, K, c->bf16 + ndy + nx));
        w16 = c->bf16 + ndy + nx;
    }
    /* dW[N,K] += dy^T x with the bias gradient in its epilogue, then dx[R,K] = dy W, from the same rounding of dy; the
     * bias gradient sums dy as the GEMM reads it (bf16), or where cuBLASLt cannot, the fp32 dy (the bf16 one at dy16)
     */
    gemm_in wg = {dyb, xb, N, K, CUDA_R_16BF}, dg = {dyb, w16, N, K, CUDA_R_16BF};
    DDP_CHECK(epi_run(b, dbias ? DDP_EPI_BGRAD : 0, dbias, 1, 0, N, K, R, 1.0f, &wg, CUBLAS_COMPUTE_32F,
                      dy16 ? NULL : (const float *)dy, 1.0f, dW, K));
    return epi_run(b, dx16 ? DDP_EPI_C16 : 0, NULL, 0, 0, R, K, N, 1.0f, &dg, CUBLAS_COMPUTE_32F, NULL, 0.0f, dx, K);
}

/* ------------------------------------------------------------------ column sums and bias adds */
ddp_status ddp_cuda_add_bias(ddp_backend *b, float *x, const float *bias, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0) return DDP_OK;
    dim3 grid(blocks_for(cols, 256), (unsigned)(rows < 65535 ? rows : 65535));
    DDP_LAUNCH(k_add_bias, grid, 256, 0, cuda_of(b)->stream, x, bias, rows, cols);
    LAUNCH_CHECK();
    return DDP_OK;
}

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
