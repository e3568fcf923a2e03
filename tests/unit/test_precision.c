/* test_precision.c — the CUDA backend's gemm and gemm16 at --precision fp32, tf32 and bf16 (set_precision) against
 * a double reference within each precision's rounding bound, on a GPU (label gpu) and on the emulator (label emu). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "cuda_test.h"
#include "test_data.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The AdamW step the tests take (the first step's bias corrections). */
static const ddp_adamw_args ADAMW = {.lr = 0.01f,
                                     .beta1 = 0.9f,
                                     .beta2 = 0.999f,
                                     .eps = 1e-8f,
                                     .weight_decay = 0.01f,
                                     .bc1 = 0.1f,
                                     .bc2_sqrt = 0.0316227766f,
                                     .gscale = 1.0f};

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)

static ddp_backend *cpu, *gpu;
static int emulated;
static double worst[3]; /* per precision: the largest |c - ref| / T seen */

static float round_bits(float f, int drop) /* nearest even, dropping `drop` mantissa bits (finite inputs) */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t half = (1u << (drop - 1)) - 1u;
    u = (u + half + ((u >> drop) & 1u)) & ~((1u << drop) - 1u);
    memcpy(&f, &u, 4);
    return f;
}
static float *on_gpu(const float *h, size_t n)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, (n ? n : 1) * sizeof(float)));
    OK(gpu->upload(gpu, d, h, n * sizeof(float)));
    return d;
}

/* Every shape runs with the four transpositions, leading dimensions wider than the rows (the padding holds NaN,
 * so a stride mistake shows), alpha and beta not 1 and 0, and K from 0 to 1000, against a double-precision
 * reference of the unrounded inputs. The bound each precision must meet, per element of C = alpha op(A) op(B) +
 * beta C0, with S = |alpha| sum_k |a_k b_k| and T = S + |beta c0|:
 *     |c - ref| <= (2u + u^2) S + (K + 3) 2^-24 (1 + u)^2 T
 * where u is the relative rounding error of one input: 0 for fp32, 2^-11 for TF32 (10-bit mantissa, nearest
 * even; 2^-10 on a GPU, whose tensor cores may truncate), 2^-8 for bf16 (8-bit significand, nearest even). The
 * first term is the product of two rounded inputs (the products themselves are exact in fp32: at most 22 or 16
 * significant bits); the second the fp32 accumulation of K products, alpha, beta C0 and the final addition
 * (Higham's gamma_{K+3}, any summation order). So for a K-term dot product bf16 is within about 2^-7 of
 * sum |a_k b_k| plus K 2^-24 of it, TF32 within 2^-10 (2^-9 on a GPU) plus the same.
 * On the emulator the results are also exact: fp32 equals the CPU backend's sgemm bit for bit (the path that
 * existed before --precision), and tf32 and bf16 equal the CPU's sgemm of the inputs rounded on the host. And
 * the roundings must show: bf16's worst error exceeds TF32's, which exceeds fp32's. The CPU backend refuses
 * tf32 with one line (its bf16: test_cpu_bf16.c). Prints the worst error of each precision relative to T.
 * gemm_case: one gemm at every precision: ar x ac A (lda = ac + pad), br x bc B (ldb = bc + pad), C M x N (ldc = N +
 * pad). */
static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, uint64_t seed)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, lda = ac + pad, ldb = bc + pad,
            ldc = N + pad;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
    float *A = malloc((na ? na : 1) * 4), *B = malloc((nb ? nb : 1) * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4);
    float *Ar = malloc((na ? na : 1) * 4), *Br = malloc((nb ? nb : 1) * 4), *Cr = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = (int64_t)(i % (size_t)lda) < ac ? test_frand(&seed) : NAN;
    for (size_t i = 0; i < nb; i++) B[i] = (int64_t)(i % (size_t)ldb) < bc ? test_frand(&seed) * 4.0f : NAN;
    for (size_t i = 0; i < nc; i++) C0[i] = test_frand(&seed);
    const float alpha = 0.75f, beta = -0.5f;
    float *dA = on_gpu(A, na), *dB = on_gpu(B, nb), *dC = on_gpu(C0, nc);
    static const double us[3] = {0.0, 0x1p-11, 0x1p-8};
    static const int drop[3] = {0, 13, 16};
    for (int p = 0; p < 3; p++) {
        double u = p == 1 && !emulated ? 0x1p-10 : us[p];
        OK(gpu->set_precision(gpu, (ddp_precision)p));
        OK(gpu->upload(gpu, dC, C0, nc * 4));
        OK(gpu->gemm(gpu, ta, tb, M, N, K, alpha, dA, lda, dB, ldb, beta, dC, ldc));
        OK(gpu->download(gpu, C, dC, nc * 4));
        double bad = 0, rel = 0;
        int64_t at = -1;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double ref = 0, S = 0;
                for (int64_t k = 0; k < K; k++) {
                    double a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
                    ref += a * b, S += fabs(a * b);
                }
                double c0 = C0[i * ldc + j], T = fabs(alpha) * S + fabs(beta * c0);
                ref = alpha * ref + beta * c0;
                double err = fabs(C[i * ldc + j] - ref),
                       tol = (2 * u + u * u) * fabs(alpha) * S + (K + 3) * 0x1p-24 * (1 + u) * (1 + u) * T;
                if (!(err <= tol * (1 + 1e-12) + 1e-30) && at < 0) bad = err / (T + 1e-30), at = i * ldc + j;
                if (T > 0 && err / T > rel) rel = err / T;
            }
        if (!(at < 0))
            fail_msg("%s gemm ta %d tb %d %lldx%lldx%lld: element %lld off by %.3g of T, beyond the bound",
                     ddp_precision_name((ddp_precision)p), ta, tb, (long long)M, (long long)N, (long long)K,
                     (long long)at, bad);
        if (rel > worst[p]) worst[p] = rel;
        for (int64_t i = 0; i < M; i++) /* the padding of C is never written */
            for (int64_t j = N; j < ldc; j++)
                if (memcmp(&C[i * ldc + j], &C0[i * ldc + j], 4) != 0)
                    fail_msg("%s gemm wrote C's padding", ddp_precision_name((ddp_precision)p));
        if (!emulated) continue;
        /* the emulator's exact result: the CPU's sgemm of the inputs as the tensor cores see them */
        for (size_t i = 0; i < na; i++) Ar[i] = p && !isnan(A[i]) ? round_bits(A[i], drop[p]) : A[i];
        for (size_t i = 0; i < nb; i++) Br[i] = p && !isnan(B[i]) ? round_bits(B[i], drop[p]) : B[i];
        memcpy(Cr, C0, nc * 4);
        OK(cpu->gemm(cpu, ta, tb, M, N, K, alpha, Ar, lda, Br, ldb, beta, Cr, ldc));
        if (memcmp(C, Cr, nc * 4) != 0)
            fail_msg("%s gemm ta %d tb %d %lldx%lldx%lld: not bit-identical to the CPU's sgemm of the %s inputs",
                     ddp_precision_name((ddp_precision)p), ta, tb, (long long)M, (long long)N, (long long)K,
                     p ? "rounded" : "same");
    }
    gpu->release(gpu, dA), gpu->release(gpu, dB), gpu->release(gpu, dC);
    free(A), free(B), free(C0), free(C), free(Ar), free(Br), free(Cr);
}

/* The weights' bf16 copy at --precision bf16: adamw over the weights refreshes it in the same pass, and gemm reads an
 * operand lying inside the weights from it, as A or as B. Each product must be the bits of rounding the same values
 * per call (the operand copied outside the weights): after a step, after an upload into the weights (a checkpoint
 * read: the copy is stale then and must not be read), after the next step, and after a switch of precision. That
 * the copy, not a conversion, is what gemm reads shows through a write the backend does not watch: a gemm into
 * the weights (no op of a model writes them but the optimizer and uploads) leaves the copy as it was. */
static void weights_case(void)
{
    const int64_t M = 37, N = 29, K = 45, off = 133, nw = off + N * (K + 3) + 7; /* B: N x K at off, ld K + 3 */
    const int64_t ldw = K + 3;
    uint64_t seed = 99;
    float *W = malloc((size_t)nw * 4), *G = malloc((size_t)nw * 4), *X = malloc((size_t)(M * K) * 4);
    float *C1 = malloc((size_t)(M * N) * 4), *C2 = malloc((size_t)(M * N) * 4), *Z = calloc((size_t)nw, 4);
    for (int64_t i = 0; i < nw; i++) W[i] = test_frand(&seed), G[i] = test_frand(&seed);
    for (int64_t i = 0; i < M * K; i++) X[i] = test_frand(&seed);
    float *dW = on_gpu(W, (size_t)nw), *dG = on_gpu(G, (size_t)nw), *dM = on_gpu(Z, (size_t)nw),
          *dV = on_gpu(Z, (size_t)nw);
    float *dX = on_gpu(X, (size_t)(M * K)), *dB = on_gpu(Z, (size_t)nw), *dC = on_gpu(Z, (size_t)(M * N));
    ddp_adamw_args a = ADAMW;
    OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
    /* the product with B (or A) inside the weights against the same values copied to dB, outside them */
    for (int stage = 0; stage < 4; stage++) {
        if (stage == 0 || stage == 2) OK(gpu->adamw(gpu, dW, dG, dM, dV, nw, &a));
        if (stage == 1) { /* a checkpoint read */
            for (int64_t i = 0; i < nw; i++) W[i] = test_frand(&seed);
            OK(gpu->upload(gpu, dW, W, (size_t)nw * 4));
        }
        if (stage == 3) {
            OK(gpu->set_precision(gpu, DDP_PRECISION_FP32));
            OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
        }
        OK(gpu->download(gpu, W, dW, (size_t)nw * 4));
        OK(gpu->upload(gpu, dB, W, (size_t)nw * 4));
        for (int asA = 0; asA < 2; asA++) {
            if (asA) { /* C [N, M] = W_block [N, K] . X^T */
                OK(gpu->gemm(gpu, 0, 1, N, M, K, 1.0f, dW + off, ldw, dX, K, 0.0f, dC, M));
                OK(gpu->download(gpu, C1, dC, (size_t)(M * N) * 4));
                OK(gpu->gemm(gpu, 0, 1, N, M, K, 1.0f, dB + off, ldw, dX, K, 0.0f, dC, M));
            } else { /* C [M, N] = X . W_block^T, as a Linear layer's forward */
                OK(gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, dX, K, dW + off, ldw, 0.0f, dC, N));
                OK(gpu->download(gpu, C1, dC, (size_t)(M * N) * 4));
                OK(gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, dX, K, dB + off, ldw, 0.0f, dC, N));
            }
            OK(gpu->download(gpu, C2, dC, (size_t)(M * N) * 4));
            if (memcmp(C1, C2, (size_t)(M * N) * 4) != 0)
                fail_msg("bf16 gemm with the weights as %s at stage %d: not the bits of rounding per call",
                         asA ? "A" : "B", stage);
        }
    }
    /* a gemm writing into the weights is not watched: the copy from the last step is still read */
    OK(gpu->adamw(gpu, dW, dG, dM, dV, nw, &a));
    OK(gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, dX, K, dW + off, ldw, 0.0f, dC, N));
    OK(gpu->download(gpu, C1, dC, (size_t)(M * N) * 4));
    OK(gpu->gemm(gpu, 0, 0, N, K, 1, 0.0f, dX, 1, dX, K, 0.0f, dW + off, ldw)); /* B's block := 0 */
    OK(gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, dX, K, dW + off, ldw, 0.0f, dC, N));
    OK(gpu->download(gpu, C2, dC, (size_t)(M * N) * 4));
    if (memcmp(C1, C2, (size_t)(M * N) * 4) != 0)
        fail_msg("bf16 gemm did not read the weights' copy (it converted them again)");
    float *bufs[] = {dW, dG, dM, dV, dX, dB, dC};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gpu->release(gpu, bufs[i]);
    free(W), free(G), free(X), free(C1), free(C2), free(Z);
}

/* ------------------------------------------------------------------ gemm16: operands stored as bf16 */
/* gemm16 (operands stored as bf16) at bf16 equals gemm on the fp32 values the bf16 were rounded from, bit for bit on
 * the emulator and within 2 (K + 3) 2^-24 T on a GPU (cuBLAS picks its kernel by leading dimension and alignment):
 * all four transpositions, A, B or both in bf16 with odd leading dimensions, and an fp32 operand inside the weights
 * (read from their bf16 copy); at fp32 and tf32 it is refused with one line and writes nothing. */

/* x rounded to bf16 (nearest even): its bits */
static uint16_t bf16_bits(float x)
{
    uint32_t u;
    x = round_bits(x, 16);
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
/* the rows x cols fp32 matrix x (leading dimension ld) as bf16 with leading dimension ld16, padding NaN, on the GPU */
static uint16_t *bf16_on_gpu(const float *x, int64_t rows, int64_t cols, int64_t ld, int64_t ld16)
{
    size_t n = (size_t)(rows * ld16);
    uint16_t *h = malloc((n ? n : 1) * 2);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld16; c++) h[r * ld16 + c] = c < cols ? bf16_bits(x[r * ld + c]) : 0x7fc0;
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, (n ? n : 1) * 2));
    OK(gpu->upload(gpu, d, h, n * 2));
    free(h);
    return d;
}

/* gemm16 at bf16 with A, B or both given as bf16 (leading dimensions ac + pad16, bc + pad16: odd ones) against gemm
 * on the fp32 values they were rounded from: the same bits, C's padding untouched. At fp32 and tf32: DDP_ERR_ARG with
 * one line, C untouched. */
static void gemm16_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, int64_t pad16, uint64_t seed)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, lda = ac + pad, ldb = bc + pad,
            ldc = N + pad;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
    float *A = malloc((na ? na : 1) * 4), *B = malloc((nb ? nb : 1) * 4), *C0 = malloc(nc * 4), *Cr = malloc(nc * 4);
    float *C = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = (int64_t)(i % (size_t)lda) < ac ? test_frand(&seed) : NAN;
    for (size_t i = 0; i < nb; i++) B[i] = (int64_t)(i % (size_t)ldb) < bc ? test_frand(&seed) * 4.0f : NAN;
    for (size_t i = 0; i < nc; i++) C0[i] = test_frand(&seed);
    const float alpha = 0.75f, beta = -0.5f;
    const int64_t lda16 = ac + pad16, ldb16 = bc + pad16;
    float *dA = on_gpu(A, na), *dB = on_gpu(B, nb), *dC = on_gpu(C0, nc);
    uint16_t *dA16 = bf16_on_gpu(A, ar, ac, lda, lda16), *dB16 = bf16_on_gpu(B, br, bc, ldb, ldb16);
    OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
    OK(gpu->gemm(gpu, ta, tb, M, N, K, alpha, dA, lda, dB, ldb, beta, dC, ldc));
    OK(gpu->download(gpu, Cr, dC, nc * 4));
    static const int ab[3][2] = {{1, 0}, {0, 1}, {1, 1}};
    for (int k = 0; k < 3; k++) {
        const int a16 = ab[k][0], b16 = ab[k][1];
        OK(gpu->upload(gpu, dC, C0, nc * 4));
        OK(gpu->gemm16(gpu, ta, tb, M, N, K, alpha, a16 ? (const void *)dA16 : dA, a16, a16 ? lda16 : lda,
                       b16 ? (const void *)dB16 : dB, b16, b16 ? ldb16 : ldb, beta, dC, ldc));
        OK(gpu->download(gpu, C, dC, nc * 4));
        if (emulated) {
            if (memcmp(C, Cr, nc * 4) != 0)
                fail_msg("gemm16 a16 %d b16 %d ta %d tb %d %lldx%lldx%lld (lda16 %lld, ldb16 %lld): not the bits "
                         "of the bf16 gemm of the fp32 operands",
                         a16, b16, ta, tb, (long long)M, (long long)N, (long long)K, (long long)lda16,
                         (long long)ldb16);
            continue;
        }
        /* On a GPU cuBLAS chooses its kernel by leading dimension and alignment (an odd lda16 rules out the
         * vector loads), so the two calls may sum the same exact products in another order: each is within
         * gamma_{K+3} T of the exact sum (T over the bf16 operands), so they differ by at most 2 (K + 3) 2^-24 T. */
        int64_t at = -1;
        double bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double S = 0;
                for (int64_t k = 0; k < K; k++) {
                    float a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
                    S += fabs((double)round_bits(a, 16) * round_bits(b, 16));
                }
                double T = fabs(alpha) * S + fabs(beta * C0[i * ldc + j]),
                       e = fabs((double)C[i * ldc + j] - Cr[i * ldc + j]);
                if (!(e <= 2.0 * (K + 3) * 0x1p-24 * T + 1e-30) && at < 0) at = i * ldc + j, bad = e / (T + 1e-30);
            }
        for (int64_t i = 0; i < M && at < 0; i++) /* C's padding untouched */
            for (int64_t j = N; j < ldc; j++)
                if (memcmp(&C[i * ldc + j], &C0[i * ldc + j], 4)) at = i * ldc + j, bad = -1;
        if (!(at < 0))
            fail_msg("gemm16 a16 %d b16 %d ta %d tb %d %lldx%lldx%lld (lda16 %lld, ldb16 %lld): element %lld off the "
                     "bf16 gemm of "
                     "the fp32 operands by %.3g of T (bound 2 (K + 3) 2^-24; -1: padding written)",
                     a16, b16, ta, tb, (long long)M, (long long)N, (long long)K, (long long)lda16, (long long)ldb16,
                     (long long)at, bad);
    }
    for (int p = 0; p < 2; p++) { /* fp32, tf32: refused, C as it was */
        OK(gpu->set_precision(gpu, (ddp_precision)p));
        OK(gpu->upload(gpu, dC, C0, nc * 4));
        ddp_status st = gpu->gemm16(gpu, ta, tb, M, N, K, alpha, dA16, 1, lda16, dB, 0, ldb, beta, dC, ldc);
        if (!(st == DDP_ERR_ARG && strstr(ddp_last_error(), "bf16") && !strchr(ddp_last_error(), '\n')))
            fail_msg("gemm16 at %s: status %d, %s", ddp_precision_name((ddp_precision)p), (int)st, ddp_last_error());
        OK(gpu->download(gpu, C, dC, nc * 4));
        if (memcmp(C, C0, nc * 4) != 0) fail_msg("gemm16 at %s wrote C", ddp_precision_name((ddp_precision)p));
    }
    gpu->release(gpu, dA), gpu->release(gpu, dB), gpu->release(gpu, dC), gpu->release(gpu, dA16),
        gpu->release(gpu, dB16);
    free(A), free(B), free(C0), free(Cr), free(C);
}

/* gemm16 with the fp32 operand inside the weights (their bf16 copy, weights_case) and the other a bf16 activation
 * (ld K + 2, odd): the bits of gemm on the fp32 activation; and it reads the copy, not a conversion (a write into the
 * weights the backend does not watch leaves the product as it was) */
static void gemm16_weights_case(void)
{
    const int64_t M = 19, N = 23, K = 41, off = 57, ldw = K + 2, nw = off + N * ldw + 5, ldx = K + 2;
    uint64_t seed = 7;
    float *W = malloc((size_t)nw * 4), *G = malloc((size_t)nw * 4), *X = malloc((size_t)(M * K) * 4),
          *Z = calloc((size_t)nw, 4);
    float *C1 = malloc((size_t)(M * N) * 4), *C2 = malloc((size_t)(M * N) * 4);
    for (int64_t i = 0; i < nw; i++) W[i] = test_frand(&seed), G[i] = test_frand(&seed);
    for (int64_t i = 0; i < M * K; i++) X[i] = test_frand(&seed);
    float *dW = on_gpu(W, (size_t)nw), *dG = on_gpu(G, (size_t)nw), *dM = on_gpu(Z, (size_t)nw),
          *dV = on_gpu(Z, (size_t)nw);
    float *dX = on_gpu(X, (size_t)(M * K)), *dC = on_gpu(Z, (size_t)(M * N));
    uint16_t *dX16 = bf16_on_gpu(X, M, K, K, ldx);
    ddp_adamw_args a = ADAMW;
    OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
    OK(gpu->adamw(gpu, dW, dG, dM, dV, nw, &a)); /* the weights' bf16 copy is current */
    for (int asA = 0; asA < 2; asA++) {
        for (int stale = 0; stale < 2; stale++) {
            if (stale) /* B's block := 0 through a gemm (unwatched): the copy still holds the step's values */
                OK(gpu->gemm(gpu, 0, 0, N, K, 1, 0.0f, dX, 1, dX, K, 0.0f, dW + off, ldw));
            if (!stale && asA) { /* C [N, M] = W_block [N, K] . X^T */
                OK(gpu->gemm(gpu, 0, 1, N, M, K, 1.0f, dW + off, ldw, dX, K, 0.0f, dC, M));
                OK(gpu->download(gpu, C1, dC, (size_t)(M * N) * 4));
            } else if (!stale) { /* C [M, N] = X . W_block^T */
                OK(gpu->gemm(gpu, 0, 1, M, N, K, 1.0f, dX, K, dW + off, ldw, 0.0f, dC, N));
                OK(gpu->download(gpu, C1, dC, (size_t)(M * N) * 4));
            }
            OK(gpu->zero(gpu, dC, (size_t)(M * N) * 4));
            if (asA)
                OK(gpu->gemm16(gpu, 0, 1, N, M, K, 1.0f, dW + off, 0, ldw, dX16, 1, ldx, 0.0f, dC, M));
            else
                OK(gpu->gemm16(gpu, 0, 1, M, N, K, 1.0f, dX16, 1, ldx, dW + off, 0, ldw, 0.0f, dC, N));
            OK(gpu->download(gpu, C2, dC, (size_t)(M * N) * 4));
            if (memcmp(C1, C2, (size_t)(M * N) * 4) != 0)
                fail_msg("gemm16 with the weights as %s (fp32, their bf16 copy)%s: not the bits of gemm",
                         asA ? "A" : "B", stale ? " after an unwatched write: it converted them again" : "");
        }
        OK(gpu->upload(gpu, dW, W, (size_t)nw * 4)); /* a checkpoint read: the copy is stale, then refreshed */
        OK(gpu->adamw(gpu, dW, dG, dM, dV, nw, &a));
    }
    float *bufs[] = {dW, dG, dM, dV, dX, dC};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gpu->release(gpu, bufs[i]);
    gpu->release(gpu, dX16);
    free(W), free(G), free(X), free(Z), free(C1), free(C2);
}

/* the CPU backend computes in fp32 or bf16 (test_cpu_bf16.c): tf32 is one line naming the option; an unknown
 * precision is refused */
static void test_refused_precisions(void **state)
{
    (void)state;
    OK(ddp_backend_set_precision(cpu, DDP_PRECISION_FP32));
    if (!(ddp_backend_set_precision(cpu, DDP_PRECISION_TF32) == DDP_ERR_ARG &&
          !strcmp(ddp_last_error(), "cfg.precision = DDP_PRECISION_TF32 needs model.device = DDP_DEVICE_CUDA (the cpu "
                                    "backend computes in fp32 or bf16)")))
        fail_msg("cpu tf32 (C API): %s", ddp_last_error());
    cpu->cli_names = 1; /* the CLI's ctx: its options */
    if (!(ddp_backend_set_precision(cpu, DDP_PRECISION_TF32) == DDP_ERR_ARG &&
          !strcmp(ddp_last_error(), "--precision tf32 needs --device cuda (the cpu backend computes in fp32 or bf16)")))
        fail_msg("cpu tf32: %s", ddp_last_error());
    cpu->cli_names = 0;
    if (!(gpu->set_precision(gpu, (ddp_precision)3) == DDP_ERR_ARG && strstr(ddp_last_error(), "no precision 3")))
        fail_msg("an unknown precision: %s", ddp_last_error());
}

static void test_gemm(void **state)
{
    (void)state;
    static const int64_t shapes[][4] = {
        {203, 210, 67, 0}, {64, 48, 1000, 3}, {5, 7, 0, 2}, {1, 1, 1, 0}, {33, 17, 129, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) /* the bf16 scratch grows at the second shape */
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], 17 + s * 4 + ta * 2 + tb);
}

static void test_weights_copy(void **state)
{
    (void)state;
    weights_case();
}

/* gemm16: every transposition, bf16 leading dimensions odd (pad16 2, 3) or packed, the scratch grown again */
static void test_gemm16(void **state)
{
    (void)state;
    static const int64_t shapes16[][5] = {{37, 29, 45, 2, 2}, {8, 5, 16, 0, 0}, {64, 48, 300, 3, 3}, {1, 1, 1, 0, 0}};
    for (size_t s = 0; s < sizeof shapes16 / sizeof shapes16[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                gemm16_case(ta, tb, shapes16[s][0], shapes16[s][1], shapes16[s][2], shapes16[s][3], shapes16[s][4],
                            41 + s * 4 + ta * 2 + tb);
}

static void test_gemm16_weights(void **state)
{
    (void)state;
    gemm16_weights_case();
}

/* empty products do nothing; dimensions past cuBLAS's int are refused before anything runs */
static void test_limits(void **state)
{
    (void)state;
    OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
    OK(gpu->gemm16(gpu, 0, 0, 0, 5, 3, 1.0f, NULL, 1, 3, NULL, 0, 5, 0.0f, NULL, 5));
    if (!(gpu->gemm16(gpu, 0, 0, (int64_t)1 << 31, 1, 1, 1.0f, NULL, 1, 1, NULL, 1, 1, 0.0f, NULL, 1) == DDP_ERR_ARG &&
          strstr(ddp_last_error(), "int range")))
        fail_msg("gemm16 past int: %s", ddp_last_error());
    OK(gpu->set_precision(gpu, DDP_PRECISION_FP32));
    if (!(gpu->gemm(gpu, 0, 0, 1, (int64_t)1 << 31, 1, 1.0f, NULL, 1, NULL, 1, 0.0f, NULL, 1) == DDP_ERR_ARG &&
          strstr(ddp_last_error(), "int range")))
        fail_msg("gemm past int: %s", ddp_last_error());
}

/* after test_gemm: the roundings show, bf16's worst error above TF32's above fp32's */
static void test_roundings_show(void **state)
{
    (void)state;
    printf("worst |c - ref| / (|alpha| sum|a b| + |beta c0|): fp32 %.3g, tf32 %.3g, bf16 %.3g\n", worst[0], worst[1],
           worst[2]);
    if (!(worst[2] > worst[1] && worst[1] > worst[0]))
        fail_msg("the roundings do not show: fp32 %.3g, tf32 %.3g, bf16 %.3g", worst[0], worst[1], worst[2]);
    if (!(worst[2] > 0x1p-12 && worst[1] > 0x1p-15))
        fail_msg("bf16 (%.3g) or tf32 (%.3g) looks like fp32", worst[2], worst[1]);
}

static int setup(void **state)
{
    (void)state;
    emulated = ddp_cuda()->emulated;
    OK(ddp_backend_cpu_create(1, &cpu));
    OK(ddp_backend_cuda_create(0, &gpu));
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    gpu->destroy(gpu);
    cpu->destroy(cpu);
    return 0;
}

int main(void)
{
    int exit_code, ndev = cuda_test_devices(&exit_code);
    if (ndev == 0) return exit_code;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_precisions), cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_weights_copy),       cmocka_unit_test(test_gemm16),
        cmocka_unit_test(test_gemm16_weights),     cmocka_unit_test(test_limits),
        cmocka_unit_test(test_roundings_show),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
