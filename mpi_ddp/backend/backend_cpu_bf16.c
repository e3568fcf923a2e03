/* backend_cpu_bf16.c — owns the CPU backend's --precision bf16 (issue #24): gemm with both operands rounded to bf16
 * (nearest even) and the products accumulated in fp32 into the fp32 C, as the CUDA backend's cublasGemmEx does;
 * everything else stays fp32 (backend_cpu.c).
 *
 * Two paths, the same arithmetic (bf16 x bf16 products are exact in fp32; only the order of the fp32 sums differs):
 *   oneDNN (built with it, DDP_HAVE_DNNL; a CPU with AVX-512): bf16 A and B, fp32 C, through matmul primitives with
 *     runtime dimensions and strides, created once per (transa, transb, beta 0 or 1) and reused for every shape.
 *     AVX512-BF16 / AMX do the products natively; on plain AVX-512 oneDNN emulates them (a notice says so).
 *   OpenBLAS (no oneDNN, an older ISA, oneDNN offering only its reference kernel, or MPIDDP_CPU_ONEDNN=0): the
 *     operands rounded to bf16 and widened back to fp32, then cblas_sgemm (a notice says so).
 * The parameters: adamw (one call over all of them) registers its p[0, n) and refreshes a rounded copy in the same
 * loop; gemm reads an operand lying inside that range from the copy (same offset and leading dimension) instead of
 * rounding it again. upload and zero into the range make the copy stale (until the next adamw), release forgets it.
 * Other operands (activations) are rounded per call into a scratch that grows to the largest GEMM. An operand that is
 * already bf16 (gemm16: an activation stored rounded by bf16_round.h, the rounding used here) is passed to oneDNN where
 * it lies, or widened exactly to fp32 for OpenBLAS: the same bits as its fp32 source rounded here. */
#include "mpi_ddp/backend/backend_cpu_bf16.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#ifdef DDP_HAVE_DNNL
#include <dnnl.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DDP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DDP_CLONES
#endif

struct ddp_cpu_bf16 {
    int threads, onednn;
    size_t es;            /* bytes per rounded element: 2 (bf16, oneDNN) or 4 (fp32 holding a bf16 value, OpenBLAS) */
    const float *p;       /* the registered parameters p[0, n), NULL before the first adamw */
    int64_t n;
    void *copy;           /* p rounded, es bytes per element */
    int valid;            /* the copy equals p rounded (no write since the last adamw) */
    void *scratch;        /* operands rounded per call */
    size_t scratch_bytes;
    float *tmp;           /* alpha != 1 or beta not 0 or 1: op(A) op(B) before the combination */
    size_t tmp_n;
    int64_t from_copy, converted;
#ifdef DDP_HAVE_DNNL
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_t prim[2][2][2]; /* [transa][transb][beta 1: accumulate into C] */
#endif
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

/* The fp32 update of backend_cpu.c's cpu_adamw, element for element, and the copy in the same pass. */
DDP_CLONES static void adamw16(float *p, const float *g, float *m, float *v, int64_t n, const ddp_adamw_args *a,
                               uint16_t *restrict q)
{
    for (int64_t i = 0; i < n; i++) {
        ddp_adamw_elem(p + i, g[i], m + i, v + i, a);
        q[i] = ddp_bf16_bits(p[i]);
    }
}
DDP_CLONES static void adamw32(float *p, const float *g, float *m, float *v, int64_t n, const ddp_adamw_args *a,
                               float *restrict q)
{
    for (int64_t i = 0; i < n; i++) {
        ddp_adamw_elem(p + i, g[i], m + i, v + i, a);
        q[i] = ddp_bf16_round(p[i]);
    }
}

/* ---------------------------------------------------------------- which path */
#ifdef DDP_HAVE_DNNL
/* The matmul of bf16 op(A)[M,K] and op(B)[K,N] into fp32 C[M,N], every dimension and stride given at execution
 * (the unit stride fixed: it picks the layout); acc: C += (a sum post-op) instead of C =. NULL where oneDNN has
 * only its reference kernel for it (slower than OpenBLAS) or fails. */
static dnnl_primitive_t make_prim(dnnl_engine_t eng, int ta, int tb, int acc)
{
    const int64_t R = DNNL_RUNTIME_DIM_VAL;
    dnnl_dims_t d = {R, R}, as = {ta ? 1 : R, ta ? R : 1}, bs = {tb ? 1 : R, tb ? R : 1}, cs = {R, 1};
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    const char *impl = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&a, 2, d, dnnl_bf16, as) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&b, 2, d, dnnl_bf16, bs) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&c, 2, d, dnnl_f32, cs) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success && dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && acc)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL) == dnnl_success &&
         dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
         strncmp(impl, "ref", 3) != 0 && dnnl_primitive_create(&prim, pd) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return prim; /* created last, so only when everything before it succeeded */
}
static void drop_prims(ddp_cpu_bf16 *s)
{
    for (int i = 0; i < 8; i++) {
        dnnl_primitive_t *p = &s->prim[i >> 2][(i >> 1) & 1][i & 1];
        if (*p) dnnl_primitive_destroy(*p);
        *p = NULL;
    }
}
/* oneDNN's engine, stream and the eight primitives; 0 (nothing kept) where any is missing. */
static int onednn_init(ddp_cpu_bf16 *s)
{
    if (dnnl_engine_create(&s->eng, dnnl_cpu, 0) != dnnl_success) return s->eng = NULL, 0;
    int ok = dnnl_stream_create(&s->strm, s->eng, dnnl_stream_default_flags) == dnnl_success;
    for (int i = 0; ok && i < 8; i++) ok = (s->prim[i >> 2][(i >> 1) & 1][i & 1] = make_prim(s->eng, i >> 2, (i >> 1) & 1, i & 1)) != NULL;
    if (ok) return 1;
    drop_prims(s);
    if (s->strm) dnnl_stream_destroy(s->strm);
    dnnl_engine_destroy(s->eng);
    s->strm = NULL, s->eng = NULL;
    return 0;
}
#endif

/* oneDNN's thread count is OpenMP's (libdnnl's runtime): set through the libgomp that libdnnl loaded, where any
 * (looked up once; the library itself is not built with OpenMP). */
static void set_omp_threads(int threads)
{
    static int looked;
    static void (*set)(int);
    if (!looked) *(void **)&set = dlsym(RTLD_DEFAULT, "omp_set_num_threads"), looked = 1;
    if (set) set(threads < 1 ? 1 : threads);
}

static int probed, probe_onednn;
static char probe_note[320];
/* Once per process: which path, and the notice. */
static void probe(void)
{
    if (probed) return;
    probed = 1;
    int off = ddp_env_int("CPU_ONEDNN", 1) == 0; /* MPIDDP_CPU_ONEDNN=0 */
    const char *why = NULL, *tail = "the GEMM operands are rounded to bf16 and multiplied with OpenBLAS sgemm in fp32 "
                                    "(the same arithmetic as bf16 units, slower)";
#ifdef DDP_HAVE_DNNL
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    int avx512 = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
    int units = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    if (off) why = "MPIDDP_CPU_ONEDNN=0";
    else if (!avx512) why = "this CPU has no AVX-512 (oneDNN's bf16 matmul needs it)";
    else {
        ddp_cpu_bf16 t = {0};
        if (!onednn_init(&t)) why = "oneDNN offers no optimised bf16 matmul here";
        else {
            drop_prims(&t);
            dnnl_stream_destroy(t.strm);
            dnnl_engine_destroy(t.eng);
            probe_onednn = 1;
            if (!units)
                snprintf(probe_note, sizeof probe_note, "--precision bf16 on the CPU: this CPU has no bf16 units (AVX512-BF16 "
                                                        "or AMX), oneDNN emulates the bf16 GEMMs on AVX-512 (the same "
                                                        "arithmetic, slower)");
            return;
        }
    }
#else
    (void)off;
    why = "this build has no oneDNN (libdnnl-dev)";
#endif
    snprintf(probe_note, sizeof probe_note, "--precision bf16 on the CPU: %s; %s", why, tail);
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
ddp_status ddp_cpu_bf16_create(int threads, ddp_cpu_bf16 **out)
{
    ddp_cpu_bf16 *s;
    DDP_ALLOC(s, 1);
    s->threads = threads < 1 ? 1 : threads;
    s->onednn = ddp_cpu_bf16_onednn();
    s->es = sizeof(float);
#ifdef DDP_HAVE_DNNL
    if (s->onednn) {
        set_omp_threads(s->threads);
        if (!onednn_init(s)) {
            free(s);
            return ddp_set_error(DDP_ERR_INTERNAL, "oneDNN: creating the bf16 matmul primitives failed");
        }
        s->es = sizeof(uint16_t);
    }
#endif
    *out = s;
    return DDP_OK;
}

void ddp_cpu_bf16_destroy(ddp_cpu_bf16 *s)
{
    if (!s) return;
#ifdef DDP_HAVE_DNNL
    drop_prims(s);
    if (s->strm) dnnl_stream_destroy(s->strm);
    if (s->eng) dnnl_engine_destroy(s->eng);
#endif
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
            if (!s->copy) return ddp_set_error(DDP_ERR_NOMEM, "out of memory: the bf16 copy of %lld parameters", (long long)n);
        }
        s->p = p, s->n = n;
    }
    if (s->es == sizeof(uint16_t)) adamw16(p, g, m, v, n, a, s->copy);
    else adamw32(p, g, m, v, n, a, s->copy);
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
    if (s->es == sizeof(uint16_t)) round_rows16(x, rows, cols, ld, y);
    else round_rows32(x, rows, cols, ld, y);
    *ld_out = cols;
    return y;
}

static ddp_status grow(void **buf, size_t *have, size_t need, const char *what)
{
    if (need <= *have) return DDP_OK;
    free(*buf);
    *have = 0;
    *buf = ddp_calloc(need, 1);
    if (!*buf) return ddp_set_error(DDP_ERR_NOMEM, "out of memory: %zu bytes for %s (--precision bf16)", need, what);
    *have = need;
    return DDP_OK;
}

#ifdef DDP_HAVE_DNNL
/* C = op(A) op(B) (acc 0) or C += op(A) op(B) (acc 1), rounded operands a, b as laid out by operand(). */
static ddp_status dnnl_mm(ddp_cpu_bf16 *s, int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const void *a,
                          int64_t lda, const void *b, int64_t ldb, float *C, int64_t ldc)
{
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_dims_t as = {ta ? 1 : lda, ta ? lda : 1}, bs = {tb ? 1 : ldb, tb ? ldb : 1}, cs = {ldc, 1};
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs);
    if (st == dnnl_success) st = dnnl_memory_create(&ma, &amd, s->eng, (void *)a);
    if (st == dnnl_success) st = dnnl_memory_create(&mb, &bmd, s->eng, (void *)b);
    if (st == dnnl_success) st = dnnl_memory_create(&mc, &cmd, s->eng, C);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
        set_omp_threads(s->threads); /* OpenMP's thread count is per calling thread */
        st = dnnl_primitive_execute(s->prim[ta][tb][acc], s->strm, 3, args);
        if (st == dnnl_success) st = dnnl_stream_wait(s->strm);
    }
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (st != dnnl_success)
        return ddp_set_error(DDP_ERR_INTERNAL, "oneDNN bf16 matmul %lldx%lldx%lld (transa %d, transb %d) failed: status %d",
                             (long long)M, (long long)N, (long long)K, ta, tb, (int)st);
    return DDP_OK;
}

/* C = alpha op(A) op(B) + beta C from the rounded operands a, b (leading dimensions la, lb) through the primitives:
 * alpha 1 with beta 0 or 1 directly (beta 1: the sum post-op), any other through a temporary. */
static ddp_status onednn_gemm(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *a,
                            int64_t la, const void *b, int64_t lb, float beta, float *C, int64_t ldc)
{
    if (alpha == 1.0f && (beta == 0.0f || beta == 1.0f))
        return dnnl_mm(s, ta, tb, beta == 1.0f, M, N, K, a, la, b, lb, C, ldc);
    /* any other alpha, beta: the product in fp32, then C = alpha T + beta C (beta 0: C's old values never read) */
    size_t bytes = s->tmp_n * sizeof(float);
    DDP_CHECK(grow((void **)&s->tmp, &bytes, (size_t)(M * N) * sizeof(float), "a bf16 GEMM's product"));
    s->tmp_n = bytes / sizeof(float);
    DDP_CHECK(dnnl_mm(s, ta, tb, 0, M, N, K, a, la, b, lb, s->tmp, N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            C[i * ldc + j] = beta == 0.0f ? alpha * s->tmp[i * N + j] : alpha * s->tmp[i * N + j] + beta * C[i * ldc + j];
    return DDP_OK;
}
#endif

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
    DDP_CHECK(grow(&s->scratch, &s->scratch_bytes, na + nb, "the GEMM operands rounded to bf16"));
    int64_t la, lb;
    const void *a = a16 ? operand16(s, A, ar, ac, lda, 0, &la) : operand(s, A, ar, ac, lda, 0, &la);
    const void *b = b16 ? operand16(s, B, br, bc, ldb, na, &lb) : operand(s, B, br, bc, ldb, na, &lb);
#ifdef DDP_HAVE_DNNL
    if (s->onednn) return onednn_gemm(s, ta, tb, M, N, K, alpha, a, la, b, lb, beta, C, ldc);
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha,
                a, (int)la, b, (int)lb, beta, C, (int)ldc);
    return DDP_OK;
}

ddp_status ddp_cpu_bf16_gemm(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    return gemm_any(s, ta, tb, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, C, ldc);
}

ddp_status ddp_cpu_bf16_gemm16(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb, float beta,
                               float *C, int64_t ldc)
{
    return gemm_any(s, ta, tb, M, N, K, alpha, A, a16 != 0, lda, B, b16 != 0, ldb, beta, C, ldc);
}
