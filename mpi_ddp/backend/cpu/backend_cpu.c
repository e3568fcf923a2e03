/* backend_cpu.c — the CPU backend: fp32 GEMMs (oneDNN's matmul for large enough products, backend_cpu_dnnl.c; else
 * OpenBLAS sgemm) and the element-wise loops of ddp_math.h. --precision bf16's gemm and gemm16 and the parameters'
 * bf16 copy are backend_cpu_bf16.c's, hooked in gemm, gemm16, adamw, upload, zero and release. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cpu/backend_cpu_bf16.h"
#include "mpi_ddp/backend/cpu/backend_cpu_dnnl.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

extern void openblas_set_num_threads(int num_threads);

/* The element-wise loops are compiled for AVX-512, AVX2 and the baseline, picked at load time (ifunc),
 * so one binary runs everywhere and uses the widest vectors the CPU has. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DDP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DDP_CLONES
#endif

typedef struct {
    int threads;
    ddp_cpu_bf16 *bf16; /* non-NULL while the precision is bf16 */
    ddp_cpu_dnnl *f32;  /* oneDNN's fp32 matmuls, created at the first GEMM that goes there */
    int f32_failed;     /* creating them failed: every fp32 GEMM stays on OpenBLAS */
} cpu_impl;
#define BF16(b) (((cpu_impl *)(b)->impl)->bf16)

ddp_cpu_bf16 *ddp_backend_cpu_bf16(ddp_backend *b) { return b && b->impl && !strcmp(b->name, "cpu") ? BF16(b) : NULL; }

static ddp_status cpu_alloc(ddp_backend *b, void **p, size_t bytes)
{
    (void)b;
    *p = ddp_calloc(bytes, 1);
    if (!*p) return ddp_set_error(DDP_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
    return DDP_OK;
}
static void cpu_release(ddp_backend *b, void *p)
{
    ddp_cpu_bf16_released(BF16(b), p);
    free(p);
}
static ddp_status cpu_copy(ddp_backend *b, void *dst, const void *src, size_t bytes)
{
    (void)b;
    if (bytes) memmove(dst, src, bytes);
    return DDP_OK;
}
static ddp_status cpu_upload(ddp_backend *b, void *dst, const void *src, size_t bytes)
{
    ddp_cpu_bf16_written(BF16(b), dst, bytes); /* the parameters' bf16 copy is stale */
    return cpu_copy(b, dst, src, bytes);
}
static ddp_status cpu_zero(ddp_backend *b, void *p, size_t bytes)
{
    ddp_cpu_bf16_written(BF16(b), p, bytes);
    if (bytes) memset(p, 0, bytes);
    return DDP_OK;
}
static ddp_status cpu_sync(ddp_backend *b)
{
    (void)b;
    return DDP_OK;
}

static ddp_status cpu_gemm(ddp_backend *b, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                           int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return DDP_OK;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return ddp_set_error(DDP_ERR_ARG, "gemm dimensions %lld x %lld x %lld exceed BLAS int range", (long long)M,
                             (long long)N, (long long)K);
    if (K <= 0) { /* C = beta*C */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return DDP_OK;
    }
    if (lda < (ta ? M : K) || ldb < (tb ? K : N) || ldc < N)
        return ddp_set_error(DDP_ERR_ARG,
                             "gemm leading dimensions %lld, %lld, %lld below the rows' lengths (%lld x %lld x %lld)",
                             (long long)lda, (long long)ldb, (long long)ldc, (long long)M, (long long)N, (long long)K);
    if (BF16(b)) return ddp_cpu_bf16_gemm(BF16(b), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    cpu_impl *c = b->impl;
    if (!c->f32_failed && ddp_cpu_dnnl_fp32_wanted(M, N, K, alpha, beta)) {
        /* a failed creation (memory, oneDNN's code generation) leaves OpenBLAS, which computes the same products */
        if (!c->f32 && ddp_cpu_dnnl_create(0, c->threads, &c->f32) != DDP_OK) c->f32_failed = 1;
        if (c->f32) return ddp_cpu_dnnl_matmul(c->f32, ta, tb, beta == 1.0f, M, N, K, A, lda, B, ldb, C, ldc);
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return DDP_OK;
}

/* gemm with bf16 operands (backend.h): --precision bf16 only, through backend_cpu_bf16.c; the edge cases as cpu_gemm.
 */
static ddp_status cpu_gemm16(ddp_backend *b, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb, float beta,
                             float *C, int64_t ldc)
{
    if (!BF16(b))
        return ddp_set_error(
            DDP_ERR_ARG, "gemm16 (bf16 activations) needs bf16 precision (the %s backend computes in fp32)", b->name);
    if (M <= 0 || N <= 0 || K <= 0 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) /* nothing read from A, B */
        return cpu_gemm(b, ta, tb, M, N, K, alpha, NULL, lda, NULL, ldb, beta, C, ldc);
    return ddp_cpu_bf16_gemm16(BF16(b), ta, tb, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta, C, ldc);
}

DDP_CLONES static ddp_status cpu_bias_gelu(ddp_backend *b, const float *z, const float *bias, float *a, float *dgelu,
                                           int64_t rows, int64_t cols)
{
    (void)b;
    for (int64_t r = 0; r < rows; r++) {
        const float *zr = z + r * cols;
        float *ar = a + r * cols;
        if (dgelu) {
            float *gr = dgelu + r * cols;
            for (int64_t c = 0; c < cols; c++) {
                float g, v = zr[c] + bias[c];
                ar[c] = ddp_gelu_fwd(v, &g);
                gr[c] = g;
            }
        } else {
            for (int64_t c = 0; c < cols; c++) ar[c] = ddp_gelu(zr[c] + bias[c]);
        }
    }
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_bias_gelu_pool(ddp_backend *b, const float *z, const float *bias, float *dgelu,
                                                const int64_t *off, int64_t nseg, int64_t cols, float *out)
{
    (void)b;
    for (int64_t s = 0; s < nseg; s++) {
        float *restrict o = out + s * cols;
        memset(o, 0, (size_t)cols * sizeof *o);
        for (int64_t r = off[s]; r < off[s + 1]; r++) {
            const float *zr = z + r * cols;
            if (dgelu) {
                float *gr = dgelu + r * cols;
                for (int64_t c = 0; c < cols; c++) {
                    float g;
                    o[c] += ddp_gelu_fwd(zr[c] + bias[c], &g);
                    gr[c] = g;
                }
            } else {
                for (int64_t c = 0; c < cols; c++) o[c] += ddp_gelu(zr[c] + bias[c]);
            }
        }
        float inv = 1.0f / (float)(off[s + 1] - off[s]);
        for (int64_t c = 0; c < cols; c++) o[c] *= inv;
    }
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_gelu_backward(ddp_backend *b, const float *dact, const float *dgelu, float *dz,
                                               int64_t rows, int64_t cols, float *dbias)
{
    (void)b;
    float *restrict db = dbias;
    for (int64_t r = 0; r < rows; r++) {
        const float *dact_r = dact + r * cols, *gr = dgelu + r * cols;
        float *dzr = dz + r * cols;
        for (int64_t c = 0; c < cols; c++) {
            float v = dact_r[c] * gr[c];
            dzr[c] = v;
            db[c] += v;
        }
    }
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_pool_gelu_backward(ddp_backend *b, const float *dp, const int64_t *off, int64_t nseg,
                                                    const float *dgelu, float *dz, int64_t rows, int64_t cols,
                                                    float *dbias)
{
    (void)b;
    (void)rows;
    float *restrict db = dbias;
    for (int64_t s = 0; s < nseg; s++) {
        float inv = 1.0f / (float)(off[s + 1] - off[s]);
        const float *dps = dp + s * cols;
        for (int64_t r = off[s]; r < off[s + 1]; r++) {
            const float *gr = dgelu + r * cols;
            float *dzr = dz + r * cols;
            for (int64_t c = 0; c < cols; c++) {
                float v = dps[c] * inv * gr[c];
                dzr[c] = v;
                db[c] += v;
            }
        }
    }
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_colsum(ddp_backend *b, const float *x, float *out, int64_t rows, int64_t cols,
                                        float beta)
{
    (void)b;
    for (int64_t c = 0; c < cols; c++) out[c] = beta == 0.0f ? 0.0f : beta * out[c];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) out[c] += x[r * cols + c];
    return DDP_OK;
}

static ddp_status cpu_add_bias(ddp_backend *b, float *x, const float *bias, int64_t rows, int64_t cols)
{
    (void)b;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) x[r * cols + c] += bias[c];
    return DDP_OK;
}

static ddp_status cpu_softmax_xent(ddp_backend *b, const float *logits, const int64_t *labels, int64_t n, int64_t c,
                                   float *dlogits, float *loss, int64_t *pred, float *prob)
{
    (void)b;
    for (int64_t r = 0; r < n; r++)
        loss[r] = ddp_softmax_xent_row(logits + r * c, c, labels[r], 1.0f, dlogits ? dlogits + r * c : NULL,
                                       pred ? pred + r : NULL, prob ? prob + r : NULL);
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_adamw(ddp_backend *b, float *p, const float *g, float *m, float *v, int64_t n,
                                       const ddp_adamw_args *a)
{
    if (BF16(b)) return ddp_cpu_bf16_adamw(BF16(b), p, g, m, v, n, a); /* fused with the bf16 copy's refresh */
    for (int64_t i = 0; i < n; i++) ddp_adamw_elem(p + i, g[i], m + i, v + i, a);
    return DDP_OK;
}

static ddp_status cpu_sumsq(ddp_backend *b, const float *x, int64_t n, double *out)
{
    (void)b;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    *out = s;
    return DDP_OK;
}

static ddp_status cpu_sumsq_many(ddp_backend *b, const float *x, const int64_t *off, int n, double *out)
{
    for (int k = 0; k < n; k++) DDP_CHECK(cpu_sumsq(b, x + off[k], off[k + 1] - off[k], &out[k]));
    return DDP_OK;
}

static void cpu_destroy(ddp_backend *b)
{
    if (b->impl) ddp_cpu_bf16_destroy(BF16(b)), ddp_cpu_dnnl_destroy(((cpu_impl *)b->impl)->f32);
    free(b->impl);
    free(b);
}

const char *ddp_precision_name(ddp_precision p)
{
    return p == DDP_PRECISION_FP32 ? "fp32" : p == DDP_PRECISION_TF32 ? "tf32" : p == DDP_PRECISION_BF16 ? "bf16" : "?";
}

/* fp32 (OpenBLAS sgemm) or bf16 (backend_cpu_bf16.c; its state lives while the precision is bf16). TF32 is a
 * tensor-core format: refused. */
static ddp_status cpu_set_precision(ddp_backend *b, ddp_precision p)
{
    cpu_impl *c = b->impl;
    if (p == DDP_PRECISION_FP32 || p == DDP_PRECISION_BF16) {
        if (p == DDP_PRECISION_FP32 && c->bf16) ddp_cpu_bf16_destroy(c->bf16), c->bf16 = NULL;
        if (p == DDP_PRECISION_BF16 && !c->bf16) DDP_CHECK(ddp_cpu_bf16_create(c->threads, &b->cli_names, &c->bf16));
        return DDP_OK;
    }
    return ddp_backend_needs_cuda(b, p, "fp32 or bf16");
}

static ddp_status cpu_reserve(ddp_backend *b, int64_t rows)
{
    (void)b, (void)rows; /* the CPU reductions need no scratch */
    return DDP_OK;
}

/* Forward blocks of about 2 MiB per activation keep a block's pre-activations in cache between
 * the GEMM and the gelu (MPIDDP_ROW_BLOCK_KB overrides; 0 turns blocking off). */
static int64_t cpu_row_block_bytes(void)
{
    int64_t kb = ddp_knob_int(DDP_KNOB_ROW_BLOCK_KB);
    return kb > 0 ? (int64_t)kb * 1024 : 0;
}

ddp_status ddp_backend_cpu_create(int threads, ddp_backend **out)
{
    ddp_backend *b;
    cpu_impl *c = ddp_calloc(1, sizeof *c);
    if (!c) return ddp_set_error(DDP_ERR_NOMEM, "out of memory creating the CPU backend");
    b = ddp_calloc(1, sizeof *b);
    if (!b) {
        free(c);
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    c->threads = threads < 1 ? 1 : threads;
    openblas_set_num_threads(threads < 1 ? 1 : threads);
    *b = (ddp_backend){.name = "cpu",
                       .impl = c,
                       .host_memory = 1,
                       .row_block_bytes = cpu_row_block_bytes(),
                       .alloc = cpu_alloc,
                       .release = cpu_release,
                       .upload = cpu_upload,
                       .upload_async = cpu_upload,
                       .download = cpu_copy,
                       .zero = cpu_zero,
                       .synchronize = cpu_sync,
                       .reserve = cpu_reserve,
                       .gemm = cpu_gemm,
                       .gemm16 = cpu_gemm16,
                       .bias_gelu = cpu_bias_gelu,
                       .gelu_backward = cpu_gelu_backward,
                       .bias_gelu_pool = cpu_bias_gelu_pool,
                       .pool_gelu_backward = cpu_pool_gelu_backward,
                       .colsum = cpu_colsum,
                       .add_bias = cpu_add_bias,
                       .softmax_xent = cpu_softmax_xent,
                       .adamw = cpu_adamw,
                       .sumsq = cpu_sumsq,
                       .sumsq_many = cpu_sumsq_many,
                       .destroy = cpu_destroy,
                       .enc = ddp_cpu_enc_ops(),
                       .set_precision = cpu_set_precision};
    *out = b;
    return DDP_OK;
}
