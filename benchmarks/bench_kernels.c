/* bench_kernels.c — each backend op alone (ddp_backend, ddp_enc_ops) at the shapes the models run, as llm.c's dev/cuda
 * keeps its kernels: time, GB/s, GFLOP/s, the fraction of a roofline, and the op's time bound on an H100. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/comm/comm.h"
#include "mpiddp.h"
#include "bench_kernels.h"
#include "bench_util.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define H100_FP32 67e12
#define H100_TF32 494.7e12 /* dense tensor-core peaks (SXM datasheet) */
#define H100_BF16 989.4e12
#define H100_HBM 3.35e12

static double gemm_peak(ddp_backend *be)
{
    int64_t n = 1024;
    void *a, *b, *c;
    CK(be->alloc(be, &a, (size_t)(n * n) * 4));
    CK(be->alloc(be, &b, (size_t)(n * n) * 4));
    CK(be->alloc(be, &c, (size_t)(n * n) * 4));
    double best = 1e30;
    for (int k = 0; k < 6; k++) {
        double t0 = now_s();
        CK(be->gemm(be, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n));
        CK(be->synchronize(be));
        double t = now_s() - t0;
        if (k && t < best) best = t;
    }
    be->release(be, a), be->release(be, b), be->release(be, c);
    return 2.0 * (double)n * n * n / best / 1e9;
}

static double memcpy_peak(void)
{
    size_t n = (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    memset(a, 1, n), memset(b, 2, n);
    double best = 1e30;
    for (int k = 0; k < 6; k++) {
        double t0 = now_s();
        memcpy(b, a, n);
        double t = now_s() - t0;
        if (k && t < best) best = t;
        a[k] = b[n - 1 - (size_t)k]; /* keep the copies */
    }
    free(a), free(b);
    return 2.0 * (double)n / best / 1e9; /* read + write */
}

/* The ops: the ddp_backend table of mpi_ddp/backend/backend.h and the encoder's ddp_enc_ops. Per op the shape, the
 * bytes it moves and the FLOPs it does per call (analytic counts, above), its best time of N, GB/s and GFLOP/s, and its
 * fraction of a roofline: max(FLOPs / peak, bytes / bandwidth) over the time. The roofline is --peak-gflops /
 * --peak-gbs; by default on the CPU it is measured in this process (the best sgemm rate of a 1024^3 product through
 * the backend, and a 64 MiB memcpy counted as bytes read + written), on CUDA it is the H100 SXM's dense peak at
 * --precision and its HBM3 bandwidth, 3.35 TB/s. Every row also gives the op's time bound on an H100 from the same
 * counts (the dense peak of --precision: fp32 67, TF32 495, bf16 989 TFLOP/s), so a GPU run fills in the distance of
 * each kernel from it. --precision sets the backend's arithmetic (set_precision: the GEMMs and, on CUDA, attention's
 * tensor cores).
 *   bench_kernels [--device cpu|cuda] [--preset issue|tiny|tx] [--rows R] [--reps N] [--peak-gflops G] [--peak-gbs B]
 *                 [--check] [--csv FILE] [--only SUBSTRING] [--config SUBSTRING] [--inner N]
 *                 [--precision fp32|tf32|bf16] [--lens-out FILE]
 * --only runs the ops whose name holds SUBSTRING, --config the configurations whose name does ("d 512"); --inner
 * sets the calls timed together on a device (10; 1 on the host): benchmarks/profile_gpu.sh runs --reps 1 --inner 1,
 * so that each op launches its kernels twice (warm-up and one timed call) under the profiler.
 * --lens-out writes each encoder configuration's name, d, heads and sample lengths, one line each, tab-separated:
 * benchmarks/peers/torch_attn.py times PyTorch's attention on the same batches.
 * Presets: issue = the MLP at H 256 and the encoder at d 256 (4 heads) and d 512 (8 heads), ff 2d, lengths 16-512
 * packed into about R rows (default 4096); tiny = H 16, d 32, lengths 2-12, ~R rows (default 64; correctness); tx =
 * run_tx.sh's CPU encoder shapes: d 128 (4 heads) at lengths 16-256 and 4-64, d 256 (4 heads) at 16-256. --check runs
 * each op once on the chosen device and on the CPU backend from the same inputs and compares the outputs by their max
 * relative difference (bf16 outputs widened); exit 1 when a check fails. At --precision bf16 the attention rows read
 * and write the storage the encoder's step uses on the backend (bk_set_bf16: o, and with gemm_epi q|k|v and their
 * gradient, in bf16), and rows of the bf16 step's own forms follow: residual_layernorm_fwd16, layernorm_bwd16 and,
 * where the backend has them, gelu_erf_fwd16z / bwd16z and linear1's bf16-output GEMM (not checked: the CPU lacks
 * them).
 * --device cuda on the host emulator:
 * MPIDDP_CUDA_PLUGIN=<build>/libmpiddp_cudaemu.so. */
int main(int argc, char **argv)
{
    ddp_ctx *ctx;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) return 1;
    const char *device = "cpu", *preset = "issue", *csv = NULL, *only = NULL, *prec = "fp32", *lens_out = NULL,
               *only_cf = NULL;
    int64_t rows = 0, reps = 5, inner_dev = 10; /* rows 0: the preset's (tiny 64, else 4096) */
    double peak_gf = 0, peak_gbs = 0;
    int check = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: bench_kernels [--device cpu|cuda] [--preset issue|tiny|tx] [--rows R] [--reps N] "
                   "[--peak-gflops G] "
                   "[--peak-gbs B] [--check] [--csv FILE] [--only SUBSTRING] [--config SUBSTRING] [--inner N] "
                   "[--precision fp32|tf32|bf16] [--lens-out FILE]\n"
                   "  each backend op alone, best of N: shape, bytes and FLOPs per call, time, GB/s, GFLOP/s, fraction "
                   "of the\n"
                   "  roofline max(FLOPs/peak, bytes/bandwidth) (CPU default: sgemm and memcpy measured here; CUDA: "
                   "H100 fp32),\n"
                   "  and the op's bound on an H100 (fp32 67 TFLOP/s, 3.35 TB/s)\n");
            ddp_finalize(ctx);
            return 0;
        } else if (!strcmp(a, "--check"))
            check = 1;
        else if (!v) {
            fprintf(stderr, "bench_kernels: %s needs a value\n", a);
            return 2;
        } else if (!strcmp(a, "--device"))
            device = v, i++;
        else if (!strcmp(a, "--preset"))
            preset = v, i++;
        else if (!strcmp(a, "--rows")) {
            if (bench_int("bench_kernels", a, v, 1, 1 << 24, &rows, 1)) return 2;
            i++;
        } else if (!strcmp(a, "--reps")) {
            if (bench_int("bench_kernels", a, v, 1, 1000000, &reps, 1)) return 2;
            i++;
        } else if (!strcmp(a, "--peak-gflops") || !strcmp(a, "--peak-gbs")) {
            if (bench_num("bench_kernels", a, v, 0, 1e9, !strcmp(a, "--peak-gbs") ? &peak_gbs : &peak_gf, 1)) return 2;
            i++;
        } else if (!strcmp(a, "--csv"))
            csv = v, i++;
        else if (!strcmp(a, "--lens-out"))
            lens_out = v, i++;
        else if (!strcmp(a, "--only"))
            only = v, i++;
        else if (!strcmp(a, "--config"))
            only_cf = v, i++;
        else if (!strcmp(a, "--inner")) {
            if (bench_int("bench_kernels", a, v, 1, 1000, &inner_dev, 1)) return 2;
            i++;
        } else if (!strcmp(a, "--precision"))
            prec = v, i++;
        else {
            fprintf(stderr, "bench_kernels: unknown option %s\n", a);
            return 2;
        }
    }
    int tiny = !strcmp(preset, "tiny"), txp = !strcmp(preset, "tx");
    if (!tiny && !txp && strcmp(preset, "issue")) {
        fprintf(stderr, "bench_kernels: --preset issue|tiny|tx\n");
        return 2;
    }
    if (bench_choice("bench_kernels", "--device", device, "cpu|cuda", 1)) return 2;
    if (!rows) rows = tiny ? 64 : 4096;
    ddp_device dev = !strcmp(device, "cuda") ? DDP_DEVICE_CUDA : DDP_DEVICE_CPU;
    char why[256] = "";
    if (dev == DDP_DEVICE_CUDA && ddp_select_device(ctx, DDP_DEVICE_CUDA, NULL, why) != DDP_OK) {
        fprintf(stderr, "bench_kernels: --device cuda: %s %s\n", why, ddp_last_error());
        return 1;
    }
    ddp_backend *be, *cpu = NULL;
    CK(ddp_ctx_backend(ctx, dev, &be));
    if (check) CK(ddp_ctx_backend(ctx, DDP_DEVICE_CPU, &cpu));
    ddp_precision pr = !strcmp(prec, "bf16")   ? DDP_PRECISION_BF16
                       : !strcmp(prec, "tf32") ? DDP_PRECISION_TF32
                                               : DDP_PRECISION_FP32;
    if (strcmp(prec, ddp_precision_name(pr))) {
        fprintf(stderr, "bench_kernels: --precision %s: expected fp32|tf32|bf16\n", prec);
        return 2;
    }
    CK(ddp_backend_set_precision(be, pr));
    /* the H100's compute peak for the GEMMs and attention at this precision; the CPU check's tolerance: fp32 ops
     * agree to float rounding, tf32/bf16 GEMMs round their inputs (2^-11, 2^-8 each) and sum K products of them */
    const double h100_peak = pr == DDP_PRECISION_BF16 ? H100_BF16 : pr == DDP_PRECISION_TF32 ? H100_TF32 : H100_FP32;
    const double check_tol = pr == DDP_PRECISION_BF16 ? 3e-2 : pr == DDP_PRECISION_TF32 ? 4e-3 : 1e-4;
    const char *roof = "given";
    if (peak_gf <= 0 || peak_gbs <= 0) {
        if (be->host_memory) {
            if (peak_gf <= 0) peak_gf = gemm_peak(be);
            if (peak_gbs <= 0) peak_gbs = memcpy_peak();
            roof = "measured here: sgemm 1024^3 via the backend, memcpy 64 MiB (read + write)";
        } else {
            if (peak_gf <= 0) peak_gf = h100_peak / 1e9;
            if (peak_gbs <= 0) peak_gbs = H100_HBM / 1e9;
            roof = "H100 SXM dense peak of --precision and HBM3 (datasheet)";
        }
    }
    printf("# bench_kernels: backend %s, --precision %s, best of %lld; roofline %.1f GFLOP/s, %.1f GB/s (%s)\n",
           be->name, prec, (long long)reps, peak_gf, peak_gbs, roof);
    if (be->attention_select) { /* the attention a model would run (MPIDDP_ATTENTION): cuDNN's at bf16 where it applies
                                 */
        const char *path = "own";
        char why[400] = "";
        CK(be->attention_select(be, pr, 128, 2, 0.0f, &path, why, sizeof why));
        printf("# attention: %s: %s\n", path, why);
    }
    config cf[3];
    int ncf;
    if (tiny) {
        bk_make_config(&cf[0], "mlp", 16, 1, 2, 12, rows);
        bk_make_config(&cf[1], "enc", 32, 4, 2, 12, rows);
        ncf = 2;
    } else if (txp) { /* benchmarks/run_tx.sh's CPU configurations: 4 heads, lengths 16-256 and 4-64 */
        bk_make_config(&cf[0], "enc", 128, 4, 16, 256, rows);
        bk_make_config(&cf[1], "enc", 128, 4, 4, 64, rows);
        bk_make_config(&cf[2], "enc", 256, 4, 16, 256, rows);
        ncf = 3;
    } else {
        bk_make_config(&cf[0], "mlp", 256, 1, 4, 64, rows);
        bk_make_config(&cf[1], "enc", 256, 4, 16, 512, rows);
        bk_make_config(&cf[2], "enc", 512, 8, 16, 512, rows);
        ncf = 3;
    }
    FILE *lf = lens_out ? fopen(lens_out, "w") : NULL;
    if (lens_out && !lf) {
        fprintf(stderr, "bench_kernels: cannot write %s\n", lens_out);
        return 2;
    }
    FILE *f = csv ? fopen(csv, "w") : NULL;
    if (csv && !f) {
        if (lf) fclose(lf);
        fprintf(stderr, "bench_kernels: cannot write %s\n", csv);
        return 1;
    }
    if (f)
        fprintf(f, "device,config,op,shape,flops,bytes,time_us,gflops,gbs,bound,roofline_frac,peak_gflops,peak_gbs,"
                   "h100_bound_us,h100_bound\n");
    printf("\n| config | op | shape | MFLOP/call | MB/call | time us | GFLOP/s | GB/s | bound | of roofline | H100 "
           "bound us |%s\n",
           check ? " check (max rel diff vs cpu) |" : "");
    printf("|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|%s\n", check ? "---:|" : "");
    int failed = 0, ran = 0, nops = 0;
    for (int k = 0; k < ncf; k++) {
        config *c = &cf[k];
        bk_set_bf16(c, be, pr);
        char cname[96];
        if (!strcmp(c->model, "mlp"))
            snprintf(cname, sizeof cname, "MLP H %lld, %lld rows", (long long)c->w, (long long)c->R);
        else
            snprintf(cname, sizeof cname, "enc d %lld h %lld, %lld rows (%lld-%lld)", (long long)c->w,
                     (long long)c->heads, (long long)c->R, (long long)c->lo, (long long)c->hi);
        if (only_cf && !strstr(cname, only_cf)) {
            free(c->hoff);
            continue;
        }
        ran++;
        if (lf && strcmp(c->model, "mlp")) {
            fprintf(lf, "%s\t%lld\t%lld\t", cname, (long long)c->w, (long long)c->heads);
            for (int64_t b = 0; b < c->B; b++)
                fprintf(lf, b ? ",%lld" : "%lld", (long long)(c->hoff[b + 1] - c->hoff[b]));
            fputc('\n', lf);
        }
        bufs q, qc;
        bk_bufs_create(&q, be, c);
        if (check) bk_bufs_create(&qc, cpu, c);
        opdesc d;
        for (int i = 0; bk_op_at(c, i, &d, NULL); i++) {
            if (only && !strstr(d.name, only)) continue;
            nops++;
            char chk[64] = "";
            if (check && d.out >= 0 && !d.nocheck) { /* the same inputs: a fresh output buffer on both, one call each */
                float *h = calloc(d.out_n, sizeof *h), *hc = calloc(d.out_n, sizeof *hc);
                const size_t nb = d.out_n * (d.out16 ? 2 : 4);
                CK(be->upload(be, q.f[d.out], h, nb));
                CK(cpu->upload(cpu, qc.f[d.out], h, nb));
                bk_op_at(c, i, &d, &q);
                bk_op_at(c, i, &d, &qc);
                CK(be->synchronize(be));
                CK(be->download(be, h, q.f[d.out], nb));
                CK(cpu->download(cpu, hc, qc.f[d.out], nb));
                if (d.out16) /* bf16 outputs: widened in place, from the last value down */
                    for (size_t j = d.out_n; j-- > 0;)
                        h[j] = ddp_bf16_widen(((uint16_t *)h)[j]), hc[j] = ddp_bf16_widen(((uint16_t *)hc)[j]);
                double mx = 0, scale = 0;
                for (size_t j = 0; j < d.out_n; j++) scale = fabs(hc[j]) > scale ? fabs(hc[j]) : scale;
                for (size_t j = 0; j < d.out_n; j++) {
                    double e = fabs((double)h[j] - hc[j]) / (scale > 0 ? scale : 1.0);
                    if (e > mx || e != e) mx = e;
                }
                int bad = !(mx <= check_tol);
                failed |= bad;
                snprintf(chk, sizeof chk, " %.1e%s |", mx, bad ? " FAIL" : "");
                free(h), free(hc);
            } else if (check) {
                snprintf(chk, sizeof chk, " – |");
            }
            bk_op_at(c, i, &d, &q); /* warm */
            CK(be->synchronize(be));
            int inner = be->host_memory ? 1 : (int)inner_dev;
            double best = 1e30;
            for (int64_t r = 0; r < reps; r++) {
                double t0 = now_s();
                for (int j = 0; j < inner; j++) bk_op_at(c, i, &d, &q);
                CK(be->synchronize(be));
                double t = (now_s() - t0) / inner;
                if (t < best) best = t;
            }
            double gfs = d.flops / best / 1e9, gbs = d.bytes / best / 1e9;
            double tc = d.flops / (peak_gf * 1e9), tm = d.bytes / (peak_gbs * 1e9);
            const char *bound = tc >= tm ? "compute" : "memory";
            double frac = (tc > tm ? tc : tm) / best;
            double hc = d.flops / h100_peak, hm = d.bytes / H100_HBM, hb = (hc > hm ? hc : hm) * 1e6;
            printf("| %s | %s | %s | %.3f | %.3f | %.1f | %.1f | %.2f | %s | %.2f | %.2f |%s\n", cname, d.name, d.shape,
                   d.flops / 1e6, d.bytes / 1e6, best * 1e6, gfs, gbs, bound, frac, hb, chk);
            if (f)
                fprintf(f, "%s,\"%s\",%s,\"%s\",%.0f,%.0f,%.3f,%.3f,%.3f,%s,%.4f,%.1f,%.1f,%.4f,%s\n", be->name, cname,
                        d.name, d.shape, d.flops, d.bytes, best * 1e6, gfs, gbs, bound, frac, peak_gf, peak_gbs, hb,
                        hc >= hm ? "compute" : "memory");
        }
        bk_bufs_free(&q);
        if (check) bk_bufs_free(&qc);
        free(c->hoff);
    }
    if (f) fclose(f);
    if (!ran) {
        fprintf(stderr, "bench_kernels: --config %s: no configuration of --preset %s is named so\n", only_cf, preset);
        failed = 2;
    } else if (!nops) { /* nothing timed, nothing checked: not a pass */
        fprintf(stderr, "bench_kernels: --only %s: no op is named so\n", only);
        failed = 2;
    }
    if (lf && fclose(lf) != 0) {
        fprintf(stderr, "bench_kernels: cannot write %s\n", lens_out);
        failed = 1;
    }
    if (check)
        printf("\nbench_kernels: check against the cpu backend: %s (max relative difference <= %g)\n",
               failed ? "FAILED" : "ok", check_tol);
    ddp_finalize(ctx);
    return failed == 2 ? 2 : failed ? 1 : 0;
}
