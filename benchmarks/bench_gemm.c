/* bench_gemm.c — the transformer's GEMMs on the CPU, one thread by default: OpenBLAS cblas_sgemm beside oneDNN's matmul
 * in fp32 and in bf16 (bf16 A and B, fp32 C), on the same data in one process. */
#include <cblas.h>
#include <dnnl.h>
#include <dnnl_debug.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef BENCH_GEMM_OPENMP
#include <omp.h>
#endif

#include "bench_util.h"

#define MAXV 64   /* list lengths */
#define NCREATE 5 /* creation timings per shape */

typedef struct {
    char layer[16]; /* qkv, out, ff1x2, ..., attn-S */
    char pass[8];   /* fwd, dX, dW, S, O, dV */
    int ta, tb;
    int64_t M, N, K;
} shape_t;

enum { V_BLAS, V_F32, V_BF16, V_RT, V_RTBF, NV };
static const char *vname[NV] = {"openblas", "dnnl-f32", "dnnl-bf16", "dnnl-f32-rt", "dnnl-bf16-rt"};
static const int v_bf16[NV] = {0, 0, 1, 0, 1}, v_rt[NV] = {0, 0, 0, 1, 1};

typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    char impl[48];
    int ok;
} dvar_t;

static dnnl_engine_t eng;
static dnnl_stream_t strm;
static int failures;

/* one line per failed oneDNN call; 0 on success */
static int chk(dnnl_status_t s, const char *call, const shape_t *sh, const char *var)
{
    if (s == dnnl_success) return 0;
    failures++;
    if (sh)
        fprintf(stderr, "bench_gemm: %s failed for %s %s %s M=%lld N=%lld K=%lld (%s): %s\n", call, var, sh->layer,
                sh->pass, (long long)sh->M, (long long)sh->N, (long long)sh->K,
                sh->ta ? (sh->tb ? "tt" : "tn") : (sh->tb ? "nt" : "nn"), dnnl_status2str(s));
    else
        fprintf(stderr, "bench_gemm: %s failed: %s\n", call, dnnl_status2str(s));
    return -1;
}
#define CHK(call, sh, var) chk((call), #call, sh, var)

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void *xalloc(size_t bytes)
{
    size_t n = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    if (!p) {
        fprintf(stderr, "bench_gemm: out of memory allocating %zu bytes\n", bytes);
        exit(2);
    }
    return p;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* the memory descriptors of op(A)[M,K], op(B)[K,N], C[M,N] (rt: every dim and stride a runtime value) */
static int make_mds(const shape_t *s, dnnl_data_type_t dt, int rt, dnnl_memory_desc_t *a, dnnl_memory_desc_t *b,
                    dnnl_memory_desc_t *c, const char *var)
{
    const int64_t R = DNNL_RUNTIME_DIM_VAL;
    dnnl_dims_t ad = {s->M, s->K}, as = {s->ta ? 1 : s->K, s->ta ? s->M : 1};
    dnnl_dims_t bd = {s->K, s->N}, bs = {s->tb ? 1 : s->N, s->tb ? s->K : 1};
    dnnl_dims_t cd = {s->M, s->N}, cs = {s->N, 1};
    if (rt) { /* runtime dims, plain layouts by tag (strides follow the dims at execution) */
        ad[0] = ad[1] = bd[0] = bd[1] = cd[0] = cd[1] = R;
        if (CHK(dnnl_memory_desc_init_by_tag(a, 2, ad, dt, s->ta ? dnnl_ba : dnnl_ab), s, var)) return -1;
        if (CHK(dnnl_memory_desc_init_by_tag(b, 2, bd, dt, s->tb ? dnnl_ba : dnnl_ab), s, var)) return -1;
        if (CHK(dnnl_memory_desc_init_by_tag(c, 2, cd, dnnl_f32, dnnl_ab), s, var)) return -1;
        return 0;
    }
    if (CHK(dnnl_memory_desc_init_by_strides(a, 2, ad, dt, as), s, var)) return -1;
    if (CHK(dnnl_memory_desc_init_by_strides(b, 2, bd, dt, bs), s, var)) return -1;
    if (CHK(dnnl_memory_desc_init_by_strides(c, 2, cd, dnnl_f32, cs), s, var)) return -1;
    return 0;
}

/* create the matmul primitive (and its pd); *ms = creation time */
static int create_prim(const shape_t *s, dnnl_data_type_t dt, int rt, dnnl_primitive_t *prim, char *impl, size_t implsz,
                       double *ms, const char *var)
{
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    if (make_mds(s, dt, rt, &a, &b, &c, var)) return -1;
    double t0 = now_s();
    if (CHK(dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c), s, var)) return -1;
    if (CHK(dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL), s, var)) return -1;
    int rc = CHK(dnnl_primitive_create(prim, pd), s, var);
    double t1 = now_s();
    if (ms) *ms = 1e3 * (t1 - t0);
    if (!rc && impl) {
        const char *str = NULL;
        if (CHK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &str), s, var) || !str) str = "?";
        snprintf(impl, implsz, "%s", str);
    }
    CHK(dnnl_primitive_desc_destroy(pd), s, var);
    return rc;
}

/* the variant's primitive and memory objects over the given buffers (concrete descriptors even for rt) */
static int setup_var(dvar_t *v, const shape_t *s, dnnl_data_type_t dt, int rt, void *A, void *B, float *C,
                     const char *var)
{
    dnnl_memory_desc_t a, b, c;
    memset(v, 0, sizeof *v);
    if (create_prim(s, dt, rt, &v->prim, v->impl, sizeof v->impl, NULL, var)) return -1;
    if (make_mds(s, dt, 0, &a, &b, &c, var)) return -1;
    if (CHK(dnnl_memory_create(&v->a, &a, eng, A), s, var)) return -1;
    if (CHK(dnnl_memory_create(&v->b, &b, eng, B), s, var)) return -1;
    if (CHK(dnnl_memory_create(&v->c, &c, eng, C), s, var)) return -1;
    v->ok = 1;
    return 0;
}

static void free_var(dvar_t *v)
{
    if (v->prim) dnnl_primitive_destroy(v->prim);
    if (v->a) dnnl_memory_destroy(v->a);
    if (v->b) dnnl_memory_destroy(v->b);
    if (v->c) dnnl_memory_destroy(v->c);
    memset(v, 0, sizeof *v);
}

static int exec_var(dvar_t *v, const shape_t *s, const char *var)
{
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, v->a}, {DNNL_ARG_WEIGHTS, v->b}, {DNNL_ARG_DST, v->c}};
    if (CHK(dnnl_primitive_execute(v->prim, strm, 3, args), s, var) || CHK(dnnl_stream_wait(strm), s, var)) {
        v->ok = 0;
        return -1;
    }
    return 0;
}

static void run_blas(const shape_t *s, const float *A, const float *B, float *C)
{
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, (int)s->M,
                (int)s->N, (int)s->K, 1.0f, A, s->ta ? (int)s->M : (int)s->K, B, s->tb ? (int)s->K : (int)s->N, 0.0f, C,
                (int)s->N);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

static double rel_err(const float *x, const float *ref, size_t n)
{
    double m = 0, r = max_abs(ref, n);
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i] - (double)ref[i]));
    return r > 0 ? m / r : m;
}

typedef struct {
    double gf[NV];     /* GFLOP/s (NAN: not measured) */
    double err[NV];    /* vs OpenBLAS */
    double create[NV]; /* ms, cache off */
    double cached_f32; /* ms, cache hit */
    int inner;
    char impl[NV][48];
} result_t;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* creation time (ms) of the primitive, fixed dims or shape-agnostic (rt): oneDNN primitive descriptor + primitive with
 * the primitive cache off, median of NCREATE (what a new batch shape costs without a cache); cached: the same with the
 * cache on and the shape already in it. A shape-agnostic primitive is created once per transpose pattern. */
static double create_median(const shape_t *s, dnnl_data_type_t dt, int rt, double *cached, const char *var)
{
    double t[NCREATE];
    if (CHK(dnnl_set_primitive_cache_capacity(0), s, var)) return NAN;
    for (int i = 0; i < NCREATE; i++) {
        dnnl_primitive_t p = NULL;
        if (create_prim(s, dt, rt, &p, NULL, 0, &t[i], var)) return NAN;
        dnnl_primitive_destroy(p);
    }
    if (CHK(dnnl_set_primitive_cache_capacity(1024), s, var)) return NAN;
    if (cached) {
        double c[NCREATE];
        for (int i = 0; i <= NCREATE; i++) { /* the first fills the cache */
            dnnl_primitive_t p = NULL;
            double ms;
            if (create_prim(s, dt, rt, &p, NULL, 0, &ms, var)) return NAN;
            if (i) c[i - 1] = ms;
            dnnl_primitive_destroy(p);
        }
        *cached = median(c, NCREATE);
    }
    return median(t, NCREATE);
}

/* One shape, timed for the variants of vname: OpenBLAS, oneDNN fp32 and bf16 with fixed dims, and oneDNN fp32 and bf16
 * with shape-agnostic primitives (every dim and stride DNNL_RUNTIME_DIM_VAL: one primitive per transpose pattern serves
 * every batch). Per repeat the variants run interleaved, one after the other, so load changes hit all alike; each
 * repeat is `inner` calls, inner chosen so that OpenBLAS's repeat lasts >= 1 ms; GFLOP/s = 2·M·N·K / median time.
 * Inputs are uniform in [-1, 1]; the bf16 copies are rounded to nearest even once, outside the timing, as a trainer
 * keeping bf16 weights and activations would. err = max|C - C_openblas| / max|C_openblas| (normwise). */
static void bench_shape(const shape_t *s, int reps, int warmup, result_t *res)
{
    size_t na = (size_t)(s->M * s->K), nb = (size_t)(s->K * s->N), nc = (size_t)(s->M * s->N);
    float *A = xalloc(na * 4), *B = xalloc(nb * 4), *Cref = xalloc(nc * 4);
    float *C[NV];
    uint16_t *Ah = xalloc(na * 2), *Bh = xalloc(nb * 2);
    for (size_t i = 0; i < na; i++) Ah[i] = to_bf16(A[i] = urand());
    for (size_t i = 0; i < nb; i++) Bh[i] = to_bf16(B[i] = urand());
    for (int v = 0; v < NV; v++) C[v] = xalloc(nc * 4);
    for (int v = 0; v < NV; v++) res->gf[v] = res->err[v] = res->create[v] = NAN;
    res->cached_f32 = NAN;
    dvar_t dv[NV];
    memset(dv, 0, sizeof dv);
    snprintf(res->impl[V_BLAS], sizeof res->impl[V_BLAS], "cblas_sgemm");
    for (int v = V_F32; v < NV; v++) {
        setup_var(&dv[v], s, v_bf16[v] ? dnnl_bf16 : dnnl_f32, v_rt[v], v_bf16[v] ? (void *)Ah : (void *)A,
                  v_bf16[v] ? (void *)Bh : (void *)B, C[v], vname[v]);
        snprintf(res->impl[v], sizeof res->impl[v], "%s", dv[v].ok ? dv[v].impl : "-");
        if (dv[v].ok && !strncmp(dv[v].impl, "ref:", 4)) { /* the reference C++ loops: far too slow to time */
            fprintf(stderr, "bench_gemm: %s %s %s: oneDNN picked %s; not timed\n", vname[v], s->layer, s->pass,
                    dv[v].impl);
            free_var(&dv[v]);
        }
    }

    /* correctness: one call each from zeroed outputs */
    memset(Cref, 0, nc * 4);
    run_blas(s, A, B, Cref);
    for (int v = V_F32; v < NV; v++) {
        if (!dv[v].ok) continue;
        memset(C[v], 0, nc * 4);
        if (exec_var(&dv[v], s, vname[v])) continue;
        res->err[v] = rel_err(C[v], Cref, nc);
    }

    /* inner calls per repeat: OpenBLAS's repeat >= 1 ms */
    double t0 = now_s();
    run_blas(s, A, B, C[V_BLAS]);
    double one = now_s() - t0;
    int inner = one >= 1e-3 ? 1 : (int)fmin(1e5, ceil(1e-3 / fmax(one, 1e-8)));
    res->inner = inner;

    double *t[NV];
    for (int v = 0; v < NV; v++) t[v] = xalloc((size_t)reps * sizeof(double));
    for (int r = -warmup; r < reps; r++) {
        for (int v = 0; v < NV; v++) {
            if (v != V_BLAS && !dv[v].ok) continue;
            double s0 = now_s();
            for (int i = 0; i < inner; i++) {
                if (v == V_BLAS)
                    run_blas(s, A, B, C[V_BLAS]);
                else if (exec_var(&dv[v], s, vname[v]))
                    break;
            }
            if (r >= 0) t[v][r] = (now_s() - s0) / inner;
        }
    }
    double flop = 2.0 * (double)s->M * (double)s->N * (double)s->K;
    for (int v = 0; v < NV; v++)
        if (v == V_BLAS || dv[v].ok) res->gf[v] = flop / median(t[v], reps) / 1e9;

    /* creation: fixed dims (cache off, and cached), shape-agnostic */
    for (int v = V_F32; v < NV; v++)
        if (dv[v].ok)
            res->create[v] = create_median(s, v_bf16[v] ? dnnl_bf16 : dnnl_f32, v_rt[v],
                                           v == V_F32 ? &res->cached_f32 : NULL, vname[v]);

    for (int v = 0; v < NV; v++) {
        free(t[v]);
        free(C[v]);
        free_var(&dv[v]);
    }
    free(A);
    free(B);
    free(Cref);
    free(Ah);
    free(Bh);
}

static int parse_list(const char *arg, int *out, const char *opt)
{
    int n = 0;
    const char *p = arg;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v <= 0 || v > 1 << 20 || n == MAXV || (*end && *end != ',')) {
            fprintf(stderr, "bench_gemm: %s: bad list '%s' (positive integers, comma-separated)\n", opt, arg);
            exit(2);
        }
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (!n) {
        fprintf(stderr, "bench_gemm: %s: empty list (positive integers, comma-separated)\n", opt);
        exit(2);
    }
    return n;
}

static int parse_int(const char *arg, const char *opt, int lo)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end || errno || v < lo || v > 1 << 24) {
        fprintf(stderr, "bench_gemm: %s: bad value '%s' (integer >= %d)\n", opt, arg, lo);
        exit(2);
    }
    return (int)v;
}

static void fmt(char *buf, size_t n, double v, const char *f)
{
    if (isnan(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, f, v);
}

static void csv_num(FILE *f, double v, const char *fm)
{
    if (!isnan(v)) fprintf(f, fm, v);
}

/*   bench_gemm [--rows R] [--dims 128,256,512] [--ff 2,4] [--attn-n 16,32,64,128,256] [--attn-dh 32,64]
 *              [--reps N] [--warmup W] [--threads T] [--csv FILE] [--no-attn] [--no-linear]
 * Shapes (row-major C[M,N] = op(A)[M,K] · op(B)[K,N], as mpi_ddp/model/transformer_pass.c calls the backend):
 *   per d in --dims and per linear layer (in -> out): qkv (d -> 3d), out-proj (d -> d), ff1 (d -> f·d) and
 *   ff2 (f·d -> d) for f in --ff, each as
 *     fwd  Y  = X · Wᵀ     (nt: M R, N out, K in)      W stored [out, in]
 *     dX   dX = dY · W     (nn: M R, N in,  K out)
 *     dW   dW = dYᵀ · X    (tn: M out, N in, K R)      beta 0 here; mpiddp accumulates with beta 1
 *   attention per sample and head (n in --attn-n, dh in --attn-dh; contiguous operands, mpiddp's are strided
 *   inside the qkv rows):
 *     S  = Q · Kᵀ    (nt: n, n, dh)   also dP = dO · Vᵀ
 *     O  = P · V     (nn: n, dh, n)   also dQ = dS · K
 *     dV = Pᵀ · dO   (tn: n, dh, n)   also dK = dSᵀ · Q
 * Output: '#' lines (CPU, versions, ISA), a table on stdout, the same rows as CSV (--csv FILE, header line): per
 * variant GFLOP/s, err and creation ms (bench_shape, create_median). Any oneDNN call that fails prints one line naming
 * the call, the shape and the status; that variant of that shape is then reported as '-' (empty in the CSV) and the
 * run goes on; the exit status is 1 if any failed. */
int main(int argc, char **argv)
{
    int rows = 2048, reps = 10, warmup = 2, threads = 1, attn = 1, linear = 1;
    int dims[MAXV], ffm[MAXV], an[MAXV], adh[MAXV];
    int ndims = parse_list("128,256,512", dims, "--dims"), nff = parse_list("2,4", ffm, "--ff");
    int nan_ = parse_list("16,32,64,128,256", an, "--attn-n"), ndh = parse_list("32,64", adh, "--attn-dh");
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(o, "--no-attn"))
            attn = 0;
        else if (!strcmp(o, "--no-linear"))
            linear = 0;
        else if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            printf("bench_gemm [--rows R] [--dims 128,256,512] [--ff 2,4] [--attn-n 16,32,64,128,256] "
                   "[--attn-dh 32,64]\n           [--reps N] [--warmup W] [--threads T] [--csv FILE] [--no-attn] "
                   "[--no-linear]\n");
            return 0;
        } else if (!has) {
            fprintf(stderr, "bench_gemm: %s: missing value or unknown option (--help)\n", o);
            return 2;
        } else if (!strcmp(o, "--rows"))
            rows = parse_int(argv[++i], o, 1);
        else if (!strcmp(o, "--reps"))
            reps = parse_int(argv[++i], o, 1);
        else if (!strcmp(o, "--warmup"))
            warmup = parse_int(argv[++i], o, 0);
        else if (!strcmp(o, "--threads"))
            threads = parse_int(argv[++i], o, 1);
        else if (!strcmp(o, "--csv"))
            csv = argv[++i];
        else if (!strcmp(o, "--dims"))
            ndims = parse_list(argv[++i], dims, o);
        else if (!strcmp(o, "--ff"))
            nff = parse_list(argv[++i], ffm, o);
        else if (!strcmp(o, "--attn-n"))
            nan_ = parse_list(argv[++i], an, o);
        else if (!strcmp(o, "--attn-dh"))
            ndh = parse_list(argv[++i], adh, o);
        else {
            fprintf(stderr, "bench_gemm: unknown option %s (--help)\n", o);
            return 2;
        }
    }

    openblas_set_num_threads(threads);
#ifdef BENCH_GEMM_OPENMP
    omp_set_num_threads(threads);
    int dnnl_threads = omp_get_max_threads();
#else
    int dnnl_threads = -1; /* oneDNN's runtime default (OMP_NUM_THREADS) */
#endif
    if (CHK(dnnl_engine_create(&eng, dnnl_cpu, 0), NULL, "") ||
        CHK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags), NULL, "")) {
        fprintf(stderr, "bench_gemm: no oneDNN CPU engine; nothing measured\n");
        return 1;
    }

    /* the shapes */
    shape_t sh[4096];
    int ns = 0;
    if (linear)
        for (int di = 0; di < ndims; di++) {
            int64_t d = dims[di];
            struct {
                char name[16];
                int64_t in, out;
            } L[2 + 2 * MAXV];
            int nl = 0;
            snprintf(L[nl].name, sizeof L[nl].name, "qkv");
            L[nl].in = d, L[nl++].out = 3 * d;
            snprintf(L[nl].name, sizeof L[nl].name, "out");
            L[nl].in = d, L[nl++].out = d;
            for (int f = 0; f < nff; f++) {
                snprintf(L[nl].name, sizeof L[nl].name, "ff1x%d", ffm[f]);
                L[nl].in = d, L[nl++].out = ffm[f] * d;
                snprintf(L[nl].name, sizeof L[nl].name, "ff2x%d", ffm[f]);
                L[nl].in = ffm[f] * d, L[nl++].out = d;
            }
            for (int l = 0; l < nl && ns + 3 <= (int)(sizeof sh / sizeof *sh); l++) {
                shape_t fw = {"", "fwd", 0, 1, rows, L[l].out, L[l].in};
                shape_t dx = {"", "dX", 0, 0, rows, L[l].in, L[l].out};
                shape_t dw = {"", "dW", 1, 0, L[l].out, L[l].in, rows};
                shape_t *p[3] = {&fw, &dx, &dw};
                for (int k = 0; k < 3; k++) {
                    memcpy(p[k]->layer, L[l].name, sizeof p[k]->layer); /* both 16 bytes */
                    sh[ns++] = *p[k];
                }
            }
        }
    if (attn)
        for (int hi = 0; hi < ndh; hi++)
            for (int ni = 0; ni < nan_ && ns + 3 <= (int)(sizeof sh / sizeof *sh); ni++) {
                int64_t n = an[ni], dh = adh[hi];
                shape_t S = {"attn", "S", 0, 1, n, n, dh}, O = {"attn", "O", 0, 0, n, dh, n},
                        dV = {"attn", "dV", 1, 0, n, dh, n};
                sh[ns++] = S, sh[ns++] = O, sh[ns++] = dV;
            }

    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    const dnnl_version_t *ver = dnnl_version();
    printf("# bench_gemm: C = op(A)·op(B), fp32 C; %d thread(s) (OpenBLAS; oneDNN %d); median of %d repeats after %d "
           "warmup\n",
           threads, dnnl_threads, reps, warmup);
    printf("# CPU: %s; avx512_bf16 %s, amx_bf16 %s\n", cpu, bench_cpu_has_flag("avx512_bf16") > 0 ? "yes" : "no",
           bench_cpu_has_flag("amx_bf16") > 0 ? "yes" : "no");
    printf("# OpenBLAS: %s (core %s)\n", openblas_get_config(), openblas_get_corename());
    printf("# oneDNN %d.%d.%d (%s), cpu runtime %s, effective ISA %s\n", ver->major, ver->minor, ver->patch, ver->hash,
           ver->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
           : ver->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
           : ver->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                                                  : "threadpool",
           dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
    printf("# GFLOP/s = 2MNK/t; err = max|C - C_openblas| / max|C_openblas|; create: oneDNN pd + primitive, ms (cache "
           "off; cached = cache hit); rt = shape-agnostic primitive (runtime dims)\n");
    printf("#%-6s %-4s %2s %5s %5s %5s %8s %8s %8s %8s %8s %6s %6s %8s %8s %8s %8s %7s %7s %7s %7s %7s  %-21s %-21s "
           "%-9s %s\n",
           "layer", "pass", "op", "M", "N", "K", "openblas", "dnnl-f32", "dnnlbf16", "f32-rt", "bf16-rt", "f32/ob",
           "bf16/ob", "err-f32", "err-bf16", "err-f32rt", "err-bfrt", "create", "cached", "cr-bf16", "cr-rt", "cr-bfrt",
           "impl-f32", "impl-bf16", "impl-rt", "impl-bf16-rt");
    printf("#%-6s %-4s %2s %5s %5s %5s %8s %8s %8s %8s %8s %6s %6s %8s %8s %8s %8s %7s %7s %7s %7s %7s\n", "", "", "",
           "", "", "", "GFLOP/s", "GFLOP/s", "GFLOP/s", "GFLOP/s", "GFLOP/s", "x", "x", "", "", "", "", "ms", "ms",
           "ms", "ms", "ms");
    fflush(stdout);

    FILE *cf = NULL;
    if (csv) {
        cf = fopen(csv, "w");
        if (!cf) {
            fprintf(stderr, "bench_gemm: cannot write %s: %s\n", csv, strerror(errno));
            return 2;
        }
        fprintf(
            cf,
            "layer,pass,op,M,N,K,threads,inner,openblas_gflops,dnnl_f32_gflops,dnnl_bf16_gflops,dnnl_f32_rt_gflops,"
            "dnnl_bf16_rt_gflops,err_f32,err_bf16,err_f32_rt,err_bf16_rt,create_f32_ms,cached_f32_ms,create_bf16_ms,"
            "create_f32_rt_ms,create_bf16_rt_ms,impl_f32,impl_bf16,impl_f32_rt,impl_bf16_rt\n");
    }
    for (int i = 0; i < ns; i++) {
        const shape_t *s = &sh[i];
        result_t r;
        memset(&r, 0, sizeof r);
        bench_shape(s, reps, warmup, &r);
        const char *op = s->ta ? (s->tb ? "tt" : "tn") : (s->tb ? "nt" : "nn");
        char g[NV][16], e[NV][16], c[NV][16], q1[16], q2[16], cached[16];
        for (int v = 0; v < NV; v++) {
            fmt(g[v], sizeof g[v], r.gf[v], "%.1f");
            fmt(e[v], sizeof e[v], r.err[v], "%.1e");
            fmt(c[v], sizeof c[v], r.create[v], "%.3f");
        }
        fmt(q1, sizeof q1, r.gf[V_F32] / r.gf[V_BLAS], "%.2f");
        fmt(q2, sizeof q2, r.gf[V_BF16] / r.gf[V_BLAS], "%.2f");
        fmt(cached, sizeof cached, r.cached_f32, "%.3f");
        printf(" %-6s %-4s %2s %5lld %5lld %5lld %8s %8s %8s %8s %8s %6s %6s %8s %8s %8s %8s %7s %7s %7s %7s %7s  "
               "%-21s %-21s "
               "%-9s %s\n",
               s->layer, s->pass, op, (long long)s->M, (long long)s->N, (long long)s->K, g[V_BLAS], g[V_F32], g[V_BF16],
               g[V_RT], g[V_RTBF], q1, q2, e[V_F32], e[V_BF16], e[V_RT], e[V_RTBF], c[V_F32], cached, c[V_BF16],
               c[V_RT], c[V_RTBF], r.impl[V_F32], r.impl[V_BF16], r.impl[V_RT], r.impl[V_RTBF]);
        fflush(stdout);
        if (cf) {
            fprintf(cf, "%s,%s,%s,%lld,%lld,%lld,%d,%d", s->layer, s->pass, op, (long long)s->M, (long long)s->N,
                    (long long)s->K, threads, r.inner);
            for (int v = 0; v < NV; v++) {
                fputc(',', cf);
                csv_num(cf, r.gf[v], "%.3f");
            }
            for (int v = V_F32; v < NV; v++) {
                fputc(',', cf);
                csv_num(cf, r.err[v], "%.3e");
            }
            fputc(',', cf);
            csv_num(cf, r.create[V_F32], "%.4f");
            fputc(',', cf);
            csv_num(cf, r.cached_f32, "%.4f");
            for (int v = V_BF16; v < NV; v++) {
                fputc(',', cf);
                csv_num(cf, r.create[v], "%.4f");
            }
            for (int v = V_F32; v < NV; v++) fprintf(cf, ",%s", r.impl[v]);
            fputc('\n', cf);
        }
    }
    if (cf && fclose(cf)) {
        fprintf(stderr, "bench_gemm: writing %s failed: %s\n", csv, strerror(errno));
        failures++;
    }
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    if (failures) fprintf(stderr, "bench_gemm: %d oneDNN call(s) failed (see above); those cells are '-'\n", failures);
    return failures ? 1 : 0;
}
