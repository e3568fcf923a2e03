/* backend_cpu_dnnl.c — the CPU backend's oneDNN matmuls (issue #24): the probe, and per operand type an engine, a
 * stream and eight shape-agnostic primitives; at the transformer's shapes fp32 runs 1.08-1.17x OpenBLAS's sgemm and
 * bf16 about 2x (benchmarks/RESULTS.md, "CPU GEMMs"). Without oneDNN (no DDP_HAVE_DNNL) only the probe, saying no. */
#include "mpi_ddp/backend/cpu/backend_cpu_dnnl.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DDP_HAVE_DNNL
#include <dnnl.h>
#endif

/* Products of fewer multiply-adds than this stay on OpenBLAS in fp32: oneDNN's per-call cost (memory objects, the
 * execution) is a few microseconds, OpenBLAS's less. 2^20 multiply-adds take ~20 us at this core's fp32 rate. */
#define DNNL_FP32_MIN_MNK ((int64_t)1 << 20)

#ifdef DDP_HAVE_DNNL
/* One operand type's state: eight matmul primitives [transa][transb][accumulate] whose dimensions and strides are all
 * given at execution, so batches of any size reuse them (no primitive per shape, no cache to miss). */
struct ddp_cpu_dnnl {
    int threads;
    dnnl_data_type_t type;
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_t prim[2][2][2]; /* [transa][transb][acc: C += through a sum post-op] */
};

/* The matmul of op(A)[M,K] and op(B)[K,N] of the given type into fp32 C[M,N], every dimension and stride given at
 * execution (the unit stride fixed: it picks the layout); acc: C += (a sum post-op) instead of C =. NULL where
 * oneDNN has only its reference kernel for it (slower than OpenBLAS) or fails. */
static dnnl_primitive_t make_prim(dnnl_engine_t eng, dnnl_data_type_t type, int ta, int tb, int acc)
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
    int ok = dnnl_memory_desc_init_by_strides(&a, 2, d, type, as) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&b, 2, d, type, bs) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&c, 2, d, dnnl_f32, cs) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success;
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

static void drop(ddp_cpu_dnnl *s)
{
    for (int i = 0; i < 8; i++) {
        dnnl_primitive_t *p = &s->prim[i >> 2][(i >> 1) & 1][i & 1];
        if (*p) dnnl_primitive_destroy(*p);
        *p = NULL;
    }
    if (s->strm) dnnl_stream_destroy(s->strm);
    if (s->eng) dnnl_engine_destroy(s->eng);
    s->strm = NULL, s->eng = NULL;
}

/* oneDNN's thread count is OpenMP's (libdnnl's runtime): set through the libgomp that libdnnl loaded, where any
 * (looked up once; the library itself is not built with OpenMP). OpenMP's count is per calling thread. */
static void set_omp_threads(int threads)
{
    static int looked;
    static void (*set)(int);
    if (!looked) *(void **)&set = dlsym(RTLD_DEFAULT, "omp_set_num_threads"), looked = 1;
    if (set) set(threads < 1 ? 1 : threads);
}

/* The engine, stream and the eight primitives; 0 (nothing kept) where any is missing. */
static int init(ddp_cpu_dnnl *s, int bf16)
{
    s->type = bf16 ? dnnl_bf16 : dnnl_f32;
    if (dnnl_engine_create(&s->eng, dnnl_cpu, 0) != dnnl_success) return s->eng = NULL, 0;
    int ok = dnnl_stream_create(&s->strm, s->eng, dnnl_stream_default_flags) == dnnl_success;
    for (int i = 0; ok && i < 8; i++)
        ok = (s->prim[i >> 2][(i >> 1) & 1][i & 1] = make_prim(s->eng, s->type, i >> 2, (i >> 1) & 1, i & 1)) != NULL;
    if (!ok) drop(s);
    return ok;
}
#endif

static int probed[2], usable[2], native;
static int64_t executed[2]; /* matmuls per type (tests) */
static const char *why_not[2];
/* Once per process and type. */
static void probe(int bf16)
{
    if (probed[bf16]) return;
    probed[bf16] = 1;
    if (ddp_knob_int(DDP_KNOB_CPU_ONEDNN) == 0) {
        why_not[bf16] = "MPIDDP_CPU_ONEDNN=0";
        return;
    }
    if (!bf16 && ddp_knob_int(DDP_KNOB_CPU_ONEDNN_FP32) == 0) {
        why_not[bf16] = "MPIDDP_CPU_ONEDNN_FP32=0";
        return;
    }
#ifdef DDP_HAVE_DNNL
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    native = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    if ((isa & dnnl_cpu_isa_avx512_core) != dnnl_cpu_isa_avx512_core) {
        why_not[bf16] = "this CPU has no AVX-512 (oneDNN's matmuls need it here)";
        return;
    }
    ddp_cpu_dnnl t = {0};
    if (!init(&t, bf16)) {
        why_not[bf16] = bf16 ? "oneDNN offers no optimised bf16 matmul here"
                             : "oneDNN offers no optimised fp32 matmul here";
        return;
    }
    drop(&t);
    usable[bf16] = 1;
#else
    why_not[bf16] = "this build has no oneDNN (libdnnl-dev)";
#endif
}

int ddp_cpu_dnnl_usable(int bf16, const char **why)
{
    bf16 = bf16 != 0;
    probe(bf16);
    if (why) *why = usable[bf16] ? NULL : why_not[bf16];
    return usable[bf16];
}

int ddp_cpu_dnnl_bf16_native(void)
{
    probe(1);
    return native;
}

int ddp_cpu_dnnl_fp32_wanted(int64_t M, int64_t N, int64_t K, float alpha, float beta)
{
    return alpha == 1.0f && (beta == 0.0f || beta == 1.0f) &&
           (double)M * (double)N * (double)K >= (double)DNNL_FP32_MIN_MNK && ddp_cpu_dnnl_usable(0, NULL);
}

void ddp_cpu_dnnl_describe(char *buf, size_t n)
{
    if (!n) return;
    buf[0] = 0;
#ifdef DDP_HAVE_DNNL
    const dnnl_version_t *ver = dnnl_version();
    const char *why32 = NULL, *why16 = NULL;
    int f32 = ddp_cpu_dnnl_usable(0, &why32), b16 = ddp_cpu_dnnl_usable(1, &why16);
    const char *b16s = ddp_cpu_dnnl_bf16_native() ? "bf16 GEMMs (bf16 units)" : "bf16 GEMMs (emulated on AVX-512)";
    if (f32 && b16)
        snprintf(buf, n, "%d.%d.%d: fp32 GEMMs of >= 2^20 multiply-adds, %s", ver->major, ver->minor, ver->patch, b16s);
    else if (f32)
        snprintf(buf, n, "%d.%d.%d: fp32 GEMMs of >= 2^20 multiply-adds; bf16 unused (%s)", ver->major, ver->minor,
                 ver->patch, why16 ? why16 : "");
    else if (b16)
        snprintf(buf, n, "%d.%d.%d: %s; fp32 unused (%s)", ver->major, ver->minor, ver->patch, b16s,
                 why32 ? why32 : "");
    else
        snprintf(buf, n, "%d.%d.%d: unused (%s)", ver->major, ver->minor, ver->patch, why32 ? why32 : "");
#endif
}

int64_t ddp_cpu_dnnl_matmuls(int bf16) { return executed[bf16 != 0]; }

ddp_status ddp_cpu_dnnl_create(int bf16, int threads, ddp_cpu_dnnl **out)
{
    *out = NULL;
    const char *why = NULL;
    if (!ddp_cpu_dnnl_usable(bf16, &why))
        return ddp_set_error(DDP_ERR_ARG, "oneDNN %s matmuls are not available: %s", bf16 ? "bf16" : "fp32", why);
#ifdef DDP_HAVE_DNNL
    ddp_cpu_dnnl *s;
    DDP_ALLOC(s, 1);
    s->threads = threads < 1 ? 1 : threads;
    set_omp_threads(s->threads);
    if (!init(s, bf16 != 0)) {
        free(s);
        return ddp_set_error(DDP_ERR_INTERNAL, "oneDNN: creating the %s matmul primitives failed",
                             bf16 ? "bf16" : "fp32");
    }
    *out = s;
    return DDP_OK;
#else
    (void)threads;
    return ddp_set_error(DDP_ERR_INTERNAL, "oneDNN: not built in");
#endif
}

void ddp_cpu_dnnl_destroy(ddp_cpu_dnnl *s)
{
#ifdef DDP_HAVE_DNNL
    if (!s) return;
    drop(s);
    free(s);
#else
    (void)s;
#endif
}

ddp_status ddp_cpu_dnnl_matmul(ddp_cpu_dnnl *s, int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const void *A,
                               int64_t lda, const void *B, int64_t ldb, float *C, int64_t ldc)
{
#ifdef DDP_HAVE_DNNL
    ta = ta != 0, tb = tb != 0, acc = acc != 0;
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_dims_t as = {ta ? 1 : lda, ta ? lda : 1}, bs = {tb ? 1 : ldb, tb ? ldb : 1}, cs = {ldc, 1};
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&amd, 2, ad, s->type, as);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&bmd, 2, bd, s->type, bs);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs);
    if (st == dnnl_success) st = dnnl_memory_create(&ma, &amd, s->eng, (void *)A);
    if (st == dnnl_success) st = dnnl_memory_create(&mb, &bmd, s->eng, (void *)B);
    if (st == dnnl_success) st = dnnl_memory_create(&mc, &cmd, s->eng, C);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
        set_omp_threads(s->threads);
        st = dnnl_primitive_execute(s->prim[ta][tb][acc], s->strm, 3, args);
        if (st == dnnl_success) st = dnnl_stream_wait(s->strm);
        if (st == dnnl_success) executed[s->type == dnnl_bf16]++;
    }
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (st != dnnl_success)
        return ddp_set_error(
            DDP_ERR_INTERNAL, "oneDNN %s matmul %lldx%lldx%lld (transa %d, transb %d) failed: status %d",
            s->type == dnnl_bf16 ? "bf16" : "fp32", (long long)M, (long long)N, (long long)K, ta, tb, (int)st);
    return DDP_OK;
#else
    (void)s, (void)ta, (void)tb, (void)acc, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C,
        (void)ldc;
    return ddp_set_error(DDP_ERR_INTERNAL, "oneDNN: not built in");
#endif
}
