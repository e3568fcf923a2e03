/* backend_cpu_bf16.c — the CPU backend's --precision bf16 (issue #24): gemm and gemm16 on bf16 operands (nearest even)
 * accumulated in fp32 into the fp32 C, as the CUDA backend's cublasGemmEx does, through oneDNN or OpenBLAS, and the
 * parameters' bf16 copy AdamW refreshes (docs/transformer.md, "Precisions"); all else stays fp32 (backend_cpu.c). */
#include "mpi_ddp/backend/cpu/backend_cpu_bf16.h"
#include "mpi_ddp/backend/cpu/backend_cpu_dnnl.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/status.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DDP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DDP_CLONES
#endif

struct ddp_cpu_bf16 {
    int threads, onednn;
    size_t es;      /* bytes per rounded element: 2 (bf16, oneDNN) or 4 (fp32 holding a bf16 value, OpenBLAS) */
    const float *p; /* the registered parameters p[0, n), NULL before the first adamw */
    int64_t n;
    void *copy;    /* p rounded, es bytes per element */
    int valid;     /* the copy equals p rounded (no write since the last adamw) */
    void *scratch; /* operands rounded per call */
    size_t scratch_bytes;
    float *tmp; /* alpha != 1 or beta not 0 or 1: op(A) op(B) before the combination */
    size_t tmp_n;
    int64_t from_copy, converted;
    ddp_cpu_dnnl *dn;     /* oneDNN's bf16 matmuls (backend_cpu_dnnl.c), NULL on the OpenBLAS path */
    const int *cli_names; /* the owning backend's: its lines name --precision or cfg.precision (optname.h) */
};

/* ---------------------------------------------------------------- rounding (bf16_round.h) */
DDP_CLONES static void round_rows16(const float *x, int64_t rows, int64_t cols, int64_t ld, uint16_t *restrict y)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = ddp_bf16_bits(x[r * ld + c]);
}
DDP_CLONES static void round_rows32(const float *x, int64_t rows, int64_t cols, int64_t ld, float *restrict y)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = ddp_bf16_round(x[r * ld + c]);
}
/* bf16 rows widened to fp32, exactly (the OpenBLAS path's form of a bf16 operand) */
DDP_CLONES static void widen_rows32(const uint16_t *x, int64_t rows, int64_t cols, int64_t ld, float *restrict y)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = ddp_bf16_widen(x[r * ld + c]);
}

/* The fp32 update of backend_cpu.c's cpu_adamw, element for element, and the copy in the same pass. p, g, m, v and
 * q are distinct arrays and the arguments are read into a local, so the loop vectorises (with p read back through
 * memory after its store it stayed scalar: 4x the fp32 update's time). */
#define ADAMW_COPY(name, T, conv)                                                                                 \
    DDP_CLONES static void name(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, \
                                int64_t n, const ddp_adamw_args *a, T *restrict q)                                \
    {                                                                                                             \
        const ddp_adamw_args c = *a;                                                                              \
        for (int64_t i = 0; i < n; i++) {                                                                         \
            float pi = p[i], mi = m[i], vi = v[i];                                                                \
            ddp_adamw_elem(&pi, g[i], &mi, &vi, &c);                                                              \
            p[i] = pi, m[i] = mi, v[i] = vi;                                                                      \
            q[i] = conv(pi);                                                                                      \
        }                                                                                                         \
    }
ADAMW_COPY(adamw16, uint16_t, ddp_bf16_bits)
ADAMW_COPY(adamw32, float, ddp_bf16_round)

/* ---------------------------------------------------------------- which path */
static int probed, probe_onednn;
static char probe_note[320];
/* Once per process: which path, and the notice. Two paths, the same arithmetic (bf16 x bf16 products are exact in
 * fp32; only the order of the fp32 sums differs): oneDNN (built with it, DDP_HAVE_DNNL; a CPU with AVX-512; bf16 units
 * native, plain AVX-512 emulated, a notice says so), or OpenBLAS cblas_sgemm on operands rounded to bf16 and widened
 * back to fp32 (no oneDNN, an older ISA, oneDNN offering only its reference kernel, or MPIDDP_CPU_ONEDNN=0; a notice).
 */
static void probe(void)
{
    if (probed) return;
    probed = 1;
    const char *why = NULL;
    if (ddp_cpu_dnnl_usable(1, &why)) {
        probe_onednn = 1;
        if (!ddp_cpu_dnnl_bf16_native())
            snprintf(probe_note, sizeof probe_note,
                     "--precision bf16 on the CPU: this CPU has no bf16 units (AVX512-BF16 "
                     "or AMX), oneDNN emulates the bf16 GEMMs on AVX-512 (the same "
                     "arithmetic, slower)");
        return;
    }
    snprintf(probe_note, sizeof probe_note,
             "--precision bf16 on the CPU: %s; the GEMM operands are rounded to bf16 and "
             "multiplied with OpenBLAS sgemm in fp32 (the same arithmetic as bf16 units, slower)",
             why);
}

const char *ddp_cpu_bf16_notice(void)
{
    probe();
    return probe_note[0] ? probe_note : NULL;
}
int ddp_cpu_bf16_onednn(void)
{
    probe();
    return probe_onednn;
}

/* ---------------------------------------------------------------- state */
ddp_status ddp_cpu_bf16_create(int threads, const int *cli_names, ddp_cpu_bf16 **out)
{
    ddp_cpu_bf16 *s;
    DDP_ALLOC(s, 1);
    s->cli_names = cli_names;
    s->threads = threads < 1 ? 1 : threads;
    s->onednn = ddp_cpu_bf16_onednn();
    s->es = sizeof(float);
    if (s->onednn) {
        ddp_status st = ddp_cpu_dnnl_create(1, s->threads, &s->dn);
        if (st != DDP_OK) {
            free(s);
            return st;
        }
        s->es = sizeof(uint16_t);
    }
    *out = s;
    return DDP_OK;
}

void ddp_cpu_bf16_destroy(ddp_cpu_bf16 *s)
{
    if (!s) return;
    ddp_cpu_dnnl_destroy(s->dn);
    free(s->copy);
    free(s->scratch);
    free(s->tmp);
    free(s);
}

static int overlaps(const ddp_cpu_bf16 *s, const void *x, size_t bytes)
{
    if (!s->p || !bytes) return 0;
    const char *lo = (const char *)s->p, *hi = lo + (size_t)s->n * sizeof(float), *a = x;
    return a < hi && a + bytes > lo;
}
void ddp_cpu_bf16_written(ddp_cpu_bf16 *s, const void *dst, size_t bytes)
{
    if (s && overlaps(s, dst, bytes)) s->valid = 0;
}
void ddp_cpu_bf16_released(ddp_cpu_bf16 *s, const void *p)
{
    if (!s || !s->p || p != (const void *)s->p) return;
    free(s->copy);
    s->copy = NULL, s->p = NULL, s->n = 0, s->valid = 0;
}
void ddp_cpu_bf16_counts(const ddp_cpu_bf16 *s, int64_t *from_copy, int64_t *converted)
{
    *from_copy = s ? s->from_copy : 0;
    *converted = s ? s->converted : 0;
}

ddp_status ddp_cpu_bf16_adamw(ddp_cpu_bf16 *s, float *p, const float *g, float *m, float *v, int64_t n,
                              const ddp_adamw_args *a)
{
    if (s->p != p || s->n != n || !s->copy) { /* new parameters: a copy of their size */
        free(s->copy);
        s->copy = NULL, s->p = NULL, s->n = 0, s->valid = 0;
        if (n > 0) {
            s->copy = ddp_calloc((size_t)n, s->es);
            if (!s->copy)
                return ddp_set_error(DDP_ERR_NOMEM, "out of memory: the bf16 copy of %lld parameters", (long long)n);
        }
        s->p = p, s->n = n;
    }
    if (s->es == sizeof(uint16_t))
        adamw16(p, g, m, v, n, a, s->copy);
    else
        adamw32(p, g, m, v, n, a, s->copy);
    s->valid = 1;
    return DDP_OK;
}

/* ---------------------------------------------------------------- gemm */
/* The rounded rows x cols operand x (leading dimension ld): inside the valid copy, the copy at x's offset (*ld_out
 * = ld); otherwise rounded into the scratch at byte offset at, packed (*ld_out = cols). */
static const void *operand(ddp_cpu_bf16 *s, const float *x, int64_t rows, int64_t cols, int64_t ld, size_t at,
                           int64_t *ld_out)
{
    if (s->valid && x >= s->p && x + (rows - 1) * ld + cols <= s->p + s->n) {
        s->from_copy++;
        *ld_out = ld;
        return (const char *)s->copy + (size_t)(x - s->p) * s->es;
    }
    s->converted++;
    void *y = (char *)s->scratch + at;
    if (s->es == sizeof(uint16_t))
        round_rows16(x, rows, cols, ld, y);
    else
        round_rows32(x, rows, cols, ld, y);
    *ld_out = cols;
    return y;
}

static ddp_status grow(const ddp_cpu_bf16 *s, void **buf, size_t *have, size_t need, const char *what)
{
    if (need <= *have) return DDP_OK;
    free(*buf);
    *have = 0;
    *buf = ddp_calloc(need, 1);
    char o[64];
    if (!*buf)
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory: %zu bytes for %s (%s)", need, what,
                             ddp_opt_set(o, sizeof o, s->cli_names && *s->cli_names, DDP_OPT_PRECISION, "bf16"));
    *have = need;
    return DDP_OK;
}

/* C = alpha op(A) op(B) + beta C from the rounded operands a, b (leading dimensions la, lb) through the primitives:
 * alpha 1 with beta 0 or 1 directly (beta 1: the sum post-op), any other through a temporary. */
static ddp_status onednn_gemm(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                              const void *a, int64_t la, const void *b, int64_t lb, float beta, float *C, int64_t ldc)
{
    if (alpha == 1.0f && (beta == 0.0f || beta == 1.0f))
        return ddp_cpu_dnnl_matmul(s->dn, ta, tb, beta == 1.0f, M, N, K, a, la, b, lb, C, ldc);
    /* any other alpha, beta: the product in fp32, then C = alpha T + beta C (beta 0: C's old values never read) */
    size_t bytes = s->tmp_n * sizeof(float);
    DDP_CHECK(grow(s, (void **)&s->tmp, &bytes, (size_t)(M * N) * sizeof(float), "a bf16 GEMM's product"));
    s->tmp_n = bytes / sizeof(float);
    DDP_CHECK(ddp_cpu_dnnl_matmul(s->dn, ta, tb, 0, M, N, K, a, la, b, lb, s->tmp, N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            C[i * ldc + j] = beta == 0.0f ? alpha * s->tmp[i * N + j]
                                          : alpha * s->tmp[i * N + j] + beta * C[i * ldc + j];
    return DDP_OK;
}

/* An operand already in bf16 (gemm16): on oneDNN's path read where it lies (*ld_out = ld, no copy); on OpenBLAS's
 * widened into the scratch at byte offset at, packed (*ld_out = cols), counted as converted. */
static const void *operand16(ddp_cpu_bf16 *s, const uint16_t *x, int64_t rows, int64_t cols, int64_t ld, size_t at,
                             int64_t *ld_out)
{
    if (s->es == sizeof(uint16_t)) {
        *ld_out = ld;
        return x;
    }
    s->converted++;
    float *y = (float *)((char *)s->scratch + at);
    widen_rows32(x, rows, cols, ld, y);
    *ld_out = cols;
    return y;
}

/* C = alpha op(A) op(B) + beta C with A, B given as fp32 (x16 0, through operand()) or bf16 (x16 1, operand16()). */
static ddp_status gemm_any(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                           int a16, int64_t lda, const void *B, int b16, int64_t ldb, float beta, float *C, int64_t ldc)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int direct = s->es == sizeof(uint16_t); /* a bf16 operand needs no scratch on oneDNN's path */
    size_t na = a16 && direct ? 0 : (size_t)(ar * ac) * s->es, nb = b16 && direct ? 0 : (size_t)(br * bc) * s->es;
    na = (na + 63) & ~(size_t)63; /* B's scratch copy 64-byte aligned */
    DDP_CHECK(grow(s, &s->scratch, &s->scratch_bytes, na + nb, "the GEMM operands rounded to bf16"));
    int64_t la, lb;
    const void *a = a16 ? operand16(s, A, ar, ac, lda, 0, &la) : operand(s, A, ar, ac, lda, 0, &la);
    const void *b = b16 ? operand16(s, B, br, bc, ldb, na, &lb) : operand(s, B, br, bc, ldb, na, &lb);
    if (s->onednn) return onednn_gemm(s, ta, tb, M, N, K, alpha, a, la, b, lb, beta, C, ldc);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, a, (int)la, b, (int)lb, beta, C, (int)ldc);
    return DDP_OK;
}

ddp_status ddp_cpu_bf16_gemm(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                             int64_t ldc)
{
    return gemm_any(s, ta, tb, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, C, ldc);
}

ddp_status ddp_cpu_bf16_gemm16(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb, float beta,
                               float *C, int64_t ldc)
{
    return gemm_any(s, ta, tb, M, N, K, alpha, A, a16 != 0, lda, B, b16 != 0, ldb, beta, C, ldc);
}
