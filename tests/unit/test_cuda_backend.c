/* test_cuda_backend.c — the CUDA backend against the CPU backend (the reference twin): every op on the same
 * inputs, compared tensor by tensor (each element against its own magnitude, not the tensor's maximum),
 * except the GEMMs and layernorm's dx, whose summation orders differ on a GPU (cuBLAS, tree sums): those against
 * bounds derived from fp32 rounding in any order, and parameters after AdamW with an allowance of 1e-3 lr per step;
 * with shapes that run every loop of the kernels (H >= 200, more elements than one grid covers, many
 * segments, accumulation into non-zero gradients); then several whole train steps of the reference model
 * with AdamW, gradients, parameters, losses, predictions and probabilities per tensor, and an eval step;
 * the same for the Transformer encoder: each ddp_enc_ops op, then whole steps with dropout.
 * Runs on a GPU (label gpu) and on the host emulator (label emu, MPIDDP_CUDA_PLUGIN=libmpiddp_cudaemu.so).
 * Skips (exit 77) only where no NVIDIA device node exists and no plugin is named; where device nodes
 * exist, a plugin that fails to load or a failing device query is a failure, not a skip. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/backend/cuda_api.h"
#include "check.h"
#include "cuda_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call) CHECK((call) == DDP_OK, "%s: %s", #call, ddp_last_error())

static ddp_backend *cpu, *gpu;

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}
static float *rnd(int64_t n, uint64_t seed, float scale)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = frand(&seed) * scale;
    return x;
}
/* device copy of host data */
static void *dev(const void *h, size_t bytes)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, bytes));
    OK(gpu->upload(gpu, d, h, bytes));
    return d;
}
static float *host_of(const void *d, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    OK(gpu->download(gpu, h, d, (size_t)n * sizeof(float)));
    return h;
}
/* Each element against its own size: |g - c| <= tol * (|c| + 1e-3 rms(c)) + floor (the rms term keeps elements
 * that cancel to ~0 from failing on rounding; floor: an absolute allowance, 0 except for parameters after AdamW).
 * Prints the worst element. */
static double expect_close_floor(const char *what, const float *g, const float *c, int64_t n, double tol, double floor)
{
    double rms = 0;
    for (int64_t i = 0; i < n; i++) rms += (double)c[i] * c[i];
    rms = sqrt(rms / (double)(n ? n : 1));
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)g[i] - c[i]) / (fabs(c[i]) + 1e-3 * rms + floor / tol + 1e-30);
        if (!(e <= worst)) worst = e, at = i; /* NaN counts as worst */
    }
    CHECK(worst <= tol, "%s: element %lld: cuda %.9g vs cpu %.9g (relative %.3g > %.1g)", what, (long long)at,
          n ? g[at] : 0.0, n ? c[at] : 0.0, worst, tol);
    return worst;
}
static double expect_close(const char *what, const float *g, const float *c, int64_t n, double tol)
{
    return expect_close_floor(what, g, c, n, tol, 0.0);
}
/* |g - c| <= bound[i] for every element: bounds derived from the rounding of the two computations (their
 * summation orders differ: cuBLAS and the GPU's tree sums against the CPU's) */
static void expect_dev_bounded(const char *what, const void *d, const float *c, const double *bound, int64_t n)
{
    float *g = host_of(d, n);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double q = fabs((double)g[i] - c[i]) / (bound[i] + 1e-30);
        if (!(q <= worst)) worst = q, at = i;
    }
    CHECK(worst <= 1.0, "%s: element %lld: cuda %.9g vs cpu %.9g (%.3g x its bound %.3g)", what, (long long)at, n ? g[at] : 0.0,
          n ? c[at] : 0.0, worst, n ? bound[at] : 0.0);
    free(g);
}
static double expect_dev_close(const char *what, const void *d, const float *c, int64_t n, double tol)
{
    float *h = host_of(d, n);
    double worst = expect_close(what, h, c, n, tol);
    free(h);
    return worst;
}

static void test_gemm(void)
{
    const int64_t M = 203, N = 210, K = 67;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = ta ? M : K, ldb = tb ? K : N;
            float *A = rnd(M * K, 1 + ta, 1), *B = rnd(K * N, 3 + tb, 1), *C = rnd(M * N, 5, 1);
            void *dA = dev(A, (size_t)(M * K) * 4), *dB = dev(B, (size_t)(K * N) * 4), *dC = dev(C, (size_t)(M * N) * 4);
            /* each side is within gamma_{K+3} T of the exact result, T = |alpha| sum_k |a b| + |beta c0| (any
             * summation order), so they differ by at most 2 (K + 3) 2^-24 T */
            double *bound = malloc((size_t)(M * N) * sizeof(double));
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double S = 0;
                    for (int64_t k = 0; k < K; k++) S += fabs((double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]));
                    bound[i * N + j] = 2.0 * (K + 3) * 0x1p-24 * (0.5 * S + 0.75 * fabs(C[i * N + j]));
                }
            OK(cpu->gemm(cpu, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.75f, C, N));
            OK(gpu->gemm(gpu, ta, tb, M, N, K, 0.5f, dA, lda, dB, ldb, 0.75f, dC, N));
            char name[32];
            snprintf(name, sizeof name, "gemm(ta=%d, tb=%d)", ta, tb);
            expect_dev_bounded(name, dC, C, bound, M * N);
            gpu->release(gpu, dA), gpu->release(gpu, dB), gpu->release(gpu, dC);
            free(A), free(B), free(C), free(bound);
        }
}

/* Offsets of b packed samples: sample i has 1 row where i % every == at, else 1 + (frand + 1) * spread rows. */
static void pack_offsets(int64_t *o, int b, uint64_t seed, int every, int at, float spread)
{
    o[0] = 0;
    for (int i = 0; i < b; i++) o[i + 1] = o[i] + (i % every == at ? 1 : 1 + (int64_t)((frand(&seed) + 1) * spread));
}

/* packed segments: 70 samples of 1..40 rows (1-row samples included) */
enum { NSEG = 70, COLS = 211 };
static int64_t off[NSEG + 1];
static void make_offsets(void) { pack_offsets(off, NSEG, 11, 9, 0, 19.5f); }

static void test_elementwise(void)
{
    int64_t R = off[NSEG], n = R * COLS;
    float *z = rnd(n, 21, 3), *bias = rnd(COLS, 22, 1), *a = malloc((size_t)n * 4), *dg = malloc((size_t)n * 4);
    void *dz = dev(z, (size_t)n * 4), *db = dev(bias, COLS * 4), *da, *ddg;
    OK(gpu->alloc(gpu, &da, (size_t)n * 4));
    OK(gpu->alloc(gpu, &ddg, (size_t)n * 4));
    /* bias + gelu, with and without gelu' */
    OK(cpu->bias_gelu(cpu, z, bias, a, dg, R, COLS));
    OK(gpu->bias_gelu(gpu, dz, db, da, ddg, R, COLS));
    expect_dev_close("bias_gelu a", da, a, n, 1e-5);
    expect_dev_close("bias_gelu gelu'", ddg, dg, n, 1e-5);
    OK(gpu->zero(gpu, da, (size_t)n * 4));
    OK(gpu->bias_gelu(gpu, dz, db, da, NULL, R, COLS));
    expect_dev_close("bias_gelu a (no gelu')", da, a, n, 1e-5);
    /* gelu backward: dz = da * dg, dbias += colsum (accumulating into a non-zero gradient) */
    float *up = rnd(n, 23, 1), *dbias = rnd(COLS, 24, 1), *out = malloc((size_t)n * 4);
    void *dup = dev(up, (size_t)n * 4), *ddbias = dev(dbias, COLS * 4), *dout;
    OK(gpu->alloc(gpu, &dout, (size_t)n * 4));
    OK(cpu->gelu_backward(cpu, up, dg, out, R, COLS, dbias));
    OK(gpu->gelu_backward(gpu, dup, ddg, dout, R, COLS, ddbias));
    expect_dev_close("gelu_backward dz", dout, out, n, 1e-5);
    expect_dev_close("gelu_backward dbias (accumulated)", ddbias, dbias, COLS, 1e-4);
    /* bias + gelu + mean pooling over segments, gelu' kept */
    float *p = malloc((size_t)NSEG * COLS * 4);
    void *doff = dev(off, sizeof off), *dp;
    OK(gpu->alloc(gpu, &dp, (size_t)NSEG * COLS * 4));
    float *dg2 = malloc((size_t)n * 4);
    OK(cpu->bias_gelu_pool(cpu, z, bias, dg2, off, NSEG, COLS, p));
    OK(gpu->bias_gelu_pool(gpu, dz, db, ddg, doff, NSEG, COLS, dp));
    expect_dev_close("bias_gelu_pool out", dp, p, NSEG * COLS, 1e-5);
    expect_dev_close("bias_gelu_pool gelu'", ddg, dg2, n, 1e-5);
    /* its backward, bias gradient accumulated */
    float *gp = rnd(NSEG * COLS, 25, 1), *dbias2 = rnd(COLS, 26, 1);
    void *dgp = dev(gp, (size_t)NSEG * COLS * 4), *ddbias2 = dev(dbias2, COLS * 4);
    OK(cpu->pool_gelu_backward(cpu, gp, off, NSEG, dg2, out, R, COLS, dbias2));
    OK(gpu->pool_gelu_backward(gpu, dgp, doff, NSEG, ddg, dout, R, COLS, ddbias2));
    expect_dev_close("pool_gelu_backward dz", dout, out, n, 1e-5);
    expect_dev_close("pool_gelu_backward dbias", ddbias2, dbias2, COLS, 1e-4);
    /* colsum with beta 0 and 1, add_bias */
    float *cs = rnd(COLS, 27, 1);
    void *dcs = dev(cs, COLS * 4);
    OK(cpu->colsum(cpu, z, cs, R, COLS, 1.0f));
    OK(gpu->colsum(gpu, dz, dcs, R, COLS, 1.0f));
    expect_dev_close("colsum beta=1", dcs, cs, COLS, 1e-4);
    OK(cpu->colsum(cpu, z, cs, R, COLS, 0.0f));
    OK(gpu->colsum(gpu, dz, dcs, R, COLS, 0.0f));
    expect_dev_close("colsum beta=0", dcs, cs, COLS, 1e-4);
    CHECK(gpu->colsum(gpu, dz, dcs, R + 100000, COLS, 0.0f) != DDP_OK, "colsum beyond the reserved rows must be an error");
    OK(cpu->add_bias(cpu, z, bias, R, COLS));
    OK(gpu->add_bias(gpu, dz, db, R, COLS));
    expect_dev_close("add_bias", dz, z, n, 1e-6);
    void *ptrs[] = {dz, db, da, ddg, dup, ddbias, dout, doff, dp, dgp, ddbias2, dcs};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) gpu->release(gpu, ptrs[i]);
    free(z), free(bias), free(a), free(dg), free(up), free(dbias), free(out), free(p), free(dg2), free(gp), free(dbias2), free(cs);
}

static void test_loss_optim(void)
{
    enum { N = 300, C = 13 };
    float *lg = rnd(N * C, 31, 4), *dl = malloc(N * C * 4), *loss = malloc(N * 4), *prob = malloc(N * 4);
    int64_t lab[N], pred[N], predg[N];
    for (int i = 0; i < N; i++) lab[i] = (i * 7) % C;
    void *dlg = dev(lg, N * C * 4), *dlab = dev(lab, sizeof lab), *ddl, *dloss, *dprob, *dpred;
    OK(gpu->alloc(gpu, &ddl, N * C * 4));
    OK(gpu->alloc(gpu, &dloss, N * 4));
    OK(gpu->alloc(gpu, &dprob, N * 4));
    OK(gpu->alloc(gpu, &dpred, sizeof pred));
    OK(cpu->softmax_xent(cpu, lg, lab, N, C, dl, loss, pred, prob));
    OK(gpu->softmax_xent(gpu, dlg, dlab, N, C, ddl, dloss, dpred, dprob));
    expect_dev_close("softmax_xent loss", dloss, loss, N, 1e-5);
    expect_dev_close("softmax_xent dlogits", ddl, dl, N * C, 1e-5);
    expect_dev_close("softmax_xent prob", dprob, prob, N, 1e-5);
    OK(gpu->download(gpu, predg, dpred, sizeof predg));
    CHECK(memcmp(pred, predg, sizeof pred) == 0, "softmax_xent predictions differ");
    /* AdamW over more elements than one grid of 256-thread blocks covers in one launch of k_sumsq */
    const int64_t n = 300001;
    float *p = rnd(n, 41, 1), *g = rnd(n, 42, 1), *m = rnd(n, 43, 0.1f), *v = rnd(n, 44, 0.1f);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    void *dpp = dev(p, (size_t)n * 4), *dgg = dev(g, (size_t)n * 4), *dm = dev(m, (size_t)n * 4), *dv = dev(v, (size_t)n * 4);
    ddp_adamw_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .bc1 = 0.19f,
                        .bc2_sqrt = sqrtf(0.002f), .gscale = 0.25f};
    OK(cpu->adamw(cpu, p, g, m, v, n, &a));
    OK(gpu->adamw(gpu, dpp, dgg, dm, dv, n, &a));
    expect_dev_close("adamw params", dpp, p, n, 1e-5);
    expect_dev_close("adamw exp_avg", dm, m, n, 1e-5);
    expect_dev_close("adamw exp_avg_sq", dv, v, n, 1e-5);
    double sc, sg, sg2;
    OK(cpu->sumsq(cpu, g, n, &sc));
    OK(gpu->sumsq(gpu, dgg, n, &sg));
    OK(gpu->sumsq(gpu, dgg, n, &sg2));
    CHECK(fabs(sc - sg) <= 1e-9 * sc, "sumsq differs: cpu %.17g cuda %.17g", sc, sg);
    CHECK(sg == sg2, "sumsq is not deterministic: %.17g then %.17g", sg, sg2);
    OK(gpu->sumsq(gpu, dgg, 0, &sg));
    CHECK(sg == 0.0, "sumsq of nothing is %g", sg);
    /* per-tensor norms in one pass: an empty tensor, a 1-element one, one larger than a grid's share */
    int64_t offs[5] = {0, 1, 1, 1000, n};
    double mc[4], mg[4], mg2[4];
    OK(cpu->sumsq_many(cpu, g, offs, 4, mc));
    OK(gpu->sumsq_many(gpu, dgg, offs, 4, mg));
    OK(gpu->sumsq_many(gpu, dgg, offs, 4, mg2));
    for (int k = 0; k < 4; k++) {
        CHECK(fabs(mc[k] - mg[k]) <= 1e-9 * mc[k], "sumsq_many tensor %d: cpu %.17g cuda %.17g", k, mc[k], mg[k]);
        CHECK(mg[k] == mg2[k], "sumsq_many tensor %d is not deterministic", k);
    }
    /* more tensors than the kernel has partial-sum slots: one tensor at a time */
    enum { T = 1500 };
    int64_t *to = malloc((T + 1) * sizeof *to);
    double *tc = malloc(T * sizeof *tc), *tg = malloc(T * sizeof *tg);
    for (int k = 0; k <= T; k++) to[k] = (int64_t)k * 200;
    OK(cpu->sumsq_many(cpu, g, to, T, tc));
    OK(gpu->sumsq_many(gpu, dgg, to, T, tg));
    int same = 1;
    for (int k = 0; k < T; k++) same &= fabs(tc[k] - tg[k]) <= 1e-9 * tc[k];
    CHECK(same, "sumsq_many over %d tensors differs from the CPU", T);
    free(to), free(tc), free(tg);
    void *ptrs[] = {dlg, dlab, ddl, dloss, dprob, dpred, dpp, dgg, dm, dv};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) gpu->release(gpu, ptrs[i]);
    free(lg), free(dl), free(loss), free(prob), free(p), free(g), free(m), free(v);
}

/* One model on each backend with its parameters, gradients and AdamW moments (host memory for the CPU one,
 * device memory for the CUDA one), for the whole-step tests; every message starts with name. */
typedef struct {
    const char *name;
    ddp_model mc, mg;
    int64_t n;
    float *pc, *gc, *mmc, *vvc;
    void *pg, *gg, *mmg, *vvg;
} twin;

/* After both models are created: their buffers, and parameters from seed 3, identical to the bit. */
static void twin_init(twin *t)
{
    int64_t n = t->n = ddp_model_num_params(&t->mc);
    t->pc = calloc((size_t)n, 4), t->gc = calloc((size_t)n, 4), t->mmc = calloc((size_t)n, 4), t->vvc = calloc((size_t)n, 4);
    OK(gpu->alloc(gpu, &t->pg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &t->gg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &t->mmg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &t->vvg, (size_t)n * 4));
    OK(t->mc.init(t->mc.self, t->pc, 3));
    OK(t->mg.init(t->mg.self, t->pg, 3));
    float *h = host_of(t->pg, n);
    CHECK(memcmp(t->pc, h, (size_t)n * 4) == 0, "%sinit differs between CPU and CUDA", t->name);
    free(h);
}

/* One step's gradients: they accumulate into the zeroed buffer over two micro-batches, as --accumulate 2
 * does; then the per-sample losses of the last one. */
static void twin_gradients(twin *t, const ddp_batch *b, int step, ddp_forward_out *oc, ddp_forward_out *og)
{
    OK(cpu->zero(cpu, t->gc, (size_t)t->n * 4));
    OK(gpu->zero(gpu, t->gg, (size_t)t->n * 4));
    for (int micro = 0; micro < 2; micro++) {
        OK(t->mc.train_step(t->mc.self, b, t->pc, t->gc, oc, NULL, NULL));
        OK(t->mg.train_step(t->mg.self, b, t->pg, t->gg, og, NULL, NULL));
    }
    char what[128];
    snprintf(what, sizeof what, "%sstep %d losses", t->name, step);
    expect_close(what, og->loss, oc->loss, b->nsamples, 1e-4);
}

/* The gradients per tensor, by name. */
static void twin_expect_gradients(twin *t, int step)
{
    char what[128];
    float *hg = host_of(t->gg, t->n);
    for (int k = 0, lo = 0; k < t->mc.ntensors; k++) {
        const ddp_tensor_spec *ts = &t->mc.tensors[k];
        int64_t len = ts->shape[0] * (ts->ndim > 1 ? ts->shape[1] : 1);
        snprintf(what, sizeof what, "%sstep %d gradient %s", t->name, step, ts->name);
        expect_close(what, hg + lo, t->gc + lo, len, 2e-3);
        lo += (int)len;
    }
    free(hg);
}

/* AdamW on both (the gradients of two micro-batches of `samples` each), then the parameters within tol. */
static void twin_adamw(twin *t, int step, int samples, double tol)
{
    ddp_adamw_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                        .bc1 = 1.0f - powf(0.9f, (float)step), .bc2_sqrt = sqrtf(1.0f - powf(0.999f, (float)step)),
                        .gscale = 1.0f / (2 * samples)};
    OK(cpu->adamw(cpu, t->pc, t->gc, t->mmc, t->vvc, t->n, &a));
    OK(gpu->adamw(gpu, t->pg, t->gg, t->mmg, t->vvg, t->n, &a));
    char what[128];
    snprintf(what, sizeof what, "%sstep %d parameters", t->name, step);
    /* AdamW moves every parameter by about lr per step whatever the gradient's size, so a gradient near zero,
     * whose rounding differs between the CPU's and cuBLAS's summation orders, can move a small parameter by a
     * different fraction of lr: an absolute allowance of 1e-3 lr per step (a wrong update is off by ~lr) */
    float *h = host_of(t->pg, t->n);
    expect_close_floor(what, h, t->pc, t->n, tol, 1e-3 * a.lr * step);
    free(h);
}

/* An eval step on both: the loss sum and every prediction. */
static void twin_eval(twin *t, const ddp_batch *b, ddp_forward_out *oc, ddp_forward_out *og)
{
    OK(t->mc.eval_step(t->mc.self, b, t->pc, oc));
    OK(t->mg.eval_step(t->mg.self, b, t->pg, og));
    CHECK(fabs(oc->loss_sum - og->loss_sum) <= 1e-4 * fabs(oc->loss_sum), "%seval loss differs: %g vs %g", t->name,
          oc->loss_sum, og->loss_sum);
    for (int i = 0; i < b->nsamples; i++)
        CHECK(oc->pred[i] == og->pred[i], "%seval prediction %d differs", t->name, i);
}

static void twin_close(twin *t)
{
    t->mc.destroy(t->mc.self);
    t->mg.destroy(t->mg.self);
    gpu->release(gpu, t->pg), gpu->release(gpu, t->gg), gpu->release(gpu, t->mmg), gpu->release(gpu, t->vvg);
    free(t->pc), free(t->gc), free(t->mmc), free(t->vvc);
}

/* Three train steps of the reference model (H 200) on both backends with AdamW in between, then eval. */
static void test_model_steps(void)
{
    enum { D = 37, H = 200, C = 7, B = 64 };
    int64_t o[B + 1];
    pack_offsets(o, B, 1, 10, 3, 24);
    int64_t R = o[B], lab[B], ids[B];
    for (int i = 0; i < B; i++) lab[i] = (i * 5) % C, ids[i] = i;
    float *x = rnd(R * D, 77, 2);
    twin t = {.name = ""};
    OK(ddp_refmodel_create_on(cpu, D, H, C, R, B, &t.mc));
    OK(ddp_refmodel_create_on(gpu, D, H, C, R, B, &t.mg));
    twin_init(&t);
    uint8_t pad[B] = {0};
    ddp_batch b = {.nsamples = B, .nrows = R, .dim = D, .offsets = o, .labels = lab, .sample_ids = ids, .is_pad = pad, .x = x};
    float lc[B], lg[B], prc[B], prg[B];
    int64_t pdc[B], pdg[B];
    ddp_forward_out oc = {.loss = lc, .prob = prc, .pred = pdc}, og = {.loss = lg, .prob = prg, .pred = pdg};
    for (int step = 1; step <= 3; step++) {
        twin_gradients(&t, &b, step, &oc, &og);
        char what[64];
        snprintf(what, sizeof what, "step %d probabilities", step);
        expect_close(what, prg, prc, B, 1e-4);
        for (int i = 0; i < B; i++) CHECK(pdc[i] == pdg[i], "step %d prediction %d differs", step, i);
        twin_expect_gradients(&t, step);
        twin_adamw(&t, step, B, 1e-4);
    }
    twin_eval(&t, &b, &oc, &og);
    expect_close("eval probabilities", prg, prc, B, 1e-4);
    twin_close(&t);
    free(x);
}

/* The Transformer encoder's ops (ddp_enc_ops), each against the CPU twin on the same packed batch: lengths
 * 1..40 with 1-row samples, d = 24 (heads of 6), dropout 0.1 where the op has one. */
static void test_enc_ops(void)
{
    enum { B = 12, d = 24, H = 4, F = 40 };
    int64_t o[B + 1], sid[B];
    pack_offsets(o, B, 5, 5, 2, 20);
    for (int i = 0; i < B; i++) sid[i] = 100 + 3 * i;
    int64_t R = o[B], mx = 0, *seg = malloc((size_t)R * sizeof *seg);
    for (int i = 0; i < B; i++) {
        mx = o[i + 1] - o[i] > mx ? o[i + 1] - o[i] : mx;
        for (int64_t r = o[i]; r < o[i + 1]; r++) seg[r] = i;
    }
    ddp_packing pc = {.B = B, .R = R, .off = o, .seg = seg, .sid = sid, .hoff = o, .max_rows = mx};
    ddp_packing pg = pc;
    pg.off = dev(o, sizeof o), pg.seg = dev(seg, (size_t)R * 8), pg.sid = dev(sid, sizeof sid);
    const ddp_enc_ops *C = cpu->enc, *G = gpu->enc;
    OK(ddp_backend_require_enc(gpu));
    ddp_dropout dr = {.p = 0.1f, .key = 4242};
    float *x = rnd(R * d, 1, 2), *w = rnd(d, 2, 1), *bb = rnd(d, 3, 1), *qkv = rnd(R * 3 * d, 4, 1.5f), *dout = rnd(R * d, 5, 1),
          *z = rnd(R * F, 6, 2), *bf = rnd(F, 7, 1), *pos = rnd(mx * d, 8, 1);
    void *xg = dev(x, (size_t)R * d * 4), *wg = dev(w, d * 4), *bg = dev(bb, d * 4), *qg = dev(qkv, (size_t)R * 3 * d * 4),
         *dog = dev(dout, (size_t)R * d * 4), *zg = dev(z, (size_t)R * F * 4), *bfg = dev(bf, F * 4), *posg = dev(pos, (size_t)mx * d * 4);
    float *y = calloc((size_t)R * 3 * d, 4), *y2 = calloc((size_t)R * 3 * d, 4), *mu = calloc((size_t)R * H, 4),
          *rs = calloc((size_t)R * H, 4), *acc = calloc((size_t)mx * d, 4), *acc2 = calloc((size_t)d, 4), *acc3 = calloc((size_t)F, 4);
    void *yg, *y2g, *mug, *rsg, *accg, *acc2g, *acc3g;
    OK(gpu->alloc(gpu, &yg, (size_t)R * 3 * d * 4));
    OK(gpu->alloc(gpu, &y2g, (size_t)R * 3 * d * 4));
    OK(gpu->alloc(gpu, &mug, (size_t)R * H * 4));
    OK(gpu->alloc(gpu, &rsg, (size_t)R * H * 4));
    OK(gpu->alloc(gpu, &accg, (size_t)mx * d * 4));
    OK(gpu->alloc(gpu, &acc2g, (size_t)d * 4));
    OK(gpu->alloc(gpu, &acc3g, (size_t)F * 4));
    /* embedding: h += bias + pos; backward: dbias, dpos */
    memcpy(y, x, (size_t)R * d * 4);
    OK(gpu->upload(gpu, yg, x, (size_t)R * d * 4));
    OK(C->embed_fwd(cpu, y, bb, pos, &pc, d));
    OK(G->embed_fwd(gpu, yg, bg, posg, &pg, d));
    expect_dev_close("embed_fwd", yg, y, R * d, 1e-6);
    OK(C->embed_bwd(cpu, x, acc2, acc, &pc, d));
    OK(G->embed_bwd(gpu, xg, acc2g, accg, &pg, d));
    expect_dev_close("embed_bwd dbias", acc2g, acc2, d, 1e-5);
    expect_dev_close("embed_bwd dpos", accg, acc, mx * d, 1e-5);
    /* layernorm forward and backward (dx accumulates onto dout's copy) */
    OK(C->layernorm_fwd(cpu, x, w, bb, y, mu, rs, R, d));
    OK(G->layernorm_fwd(gpu, xg, wg, bg, yg, mug, rsg, R, d));
    expect_dev_close("layernorm y", yg, y, R * d, 1e-5);
    expect_dev_close("layernorm rstd", rsg, rs, R, 1e-5);
    memcpy(y2, dout, (size_t)R * d * 4);
    OK(gpu->upload(gpu, y2g, dout, (size_t)R * d * 4));
    memset(acc, 0, (size_t)d * 4);
    OK(gpu->zero(gpu, accg, (size_t)d * 4));
    OK(C->layernorm_bwd(cpu, dout, x, w, mu, rs, y2, acc, acc2, R, d));
    OK(G->layernorm_bwd(gpu, dog, xg, wg, mug, rsg, y2g, accg, acc2g, R, d));
    {   /* dx = dout + rstd (w dy - mean(w dy) - xhat mean(w dy xhat)): the GPU sums the two row means as a tree,
         * so each differs by at most 2 (d + 2) u of its sum of magnitudes; 8 u of every term for the rest */
        double *bound = malloc((size_t)(R * d) * sizeof(double));
        for (int64_t r = 0; r < R; r++) {
            double S1 = 0, S2 = 0;
            for (int64_t c = 0; c < d; c++) {
                double wd = fabs((double)w[c] * dout[r * d + c]);
                S1 += wd, S2 += wd * fabs((x[r * d + c] - mu[r]) * (double)rs[r]);
            }
            for (int64_t c = 0; c < d; c++) {
                double xh = fabs((x[r * d + c] - mu[r]) * (double)rs[r]);
                bound[r * d + c] = 0x1p-24 * (2.0 * (d + 2) * (S1 + xh * S2) / d * rs[r] +
                                               8.0 * (fabs(y2[r * d + c]) + fabs(dout[r * d + c]) +
                                                      rs[r] * (fabs((double)w[c] * dout[r * d + c]) + (S1 + xh * S2) / d)));
            }
        }
        expect_dev_bounded("layernorm dx", y2g, y2, bound, R * d);
        free(bound);
    }
    expect_dev_close("layernorm dw", accg, acc, d, 1e-3);
    expect_dev_close("layernorm db", acc2g, acc2, d, 1e-3);
    /* attention, both CPU methods against the kernels, with and without dropout */
    const char *methods[2] = {"fused", "gemm"};
    for (int k = 0; k < 4; k++) {
        ddp_dropout dk = {.p = k < 2 ? 0.0f : 0.1f, .key = 99};
        setenv("MPIDDP_ATTENTION", methods[k % 2], 1);
        char what[96];
        OK(C->attention_fwd(cpu, qkv, y, mu, &pc, d, H, &dk));
        OK(G->attention_fwd(gpu, qg, yg, mug, &pg, d, H, &dk));
        snprintf(what, sizeof what, "attention (cpu %s, p %.1f) output", methods[k % 2], (double)dk.p);
        expect_dev_close(what, yg, y, R * d, 1e-3); /* sums of up to 40 terms, in another order */
        snprintf(what, sizeof what, "attention (cpu %s, p %.1f) lse", methods[k % 2], (double)dk.p);
        expect_dev_close(what, mug, mu, R * H, 1e-5);
        OK(C->attention_bwd(cpu, qkv, y, dout, mu, y2, rs, &pc, d, H, &dk));
        OK(G->attention_bwd(gpu, qg, yg, dog, mug, y2g, rsg, &pg, d, H, &dk));
        snprintf(what, sizeof what, "attention (cpu %s, p %.1f) dqkv", methods[k % 2], (double)dk.p);
        expect_dev_close(what, y2g, y2, R * 3 * d, 1e-3);
    }
    unsetenv("MPIDDP_ATTENTION");
    /* gelu (erf) with dropout, its backward with the bias gradient */
    memset(acc3, 0, (size_t)F * 4);
    OK(gpu->zero(gpu, acc3g, (size_t)F * 4));
    OK(C->gelu_erf_fwd(cpu, z, bf, y, y2, &pc, F, &dr));
    OK(G->gelu_erf_fwd(gpu, zg, bfg, yg, y2g, &pg, F, &dr));
    expect_dev_close("gelu_erf a", yg, y, R * F, 1e-5);
    expect_dev_close("gelu_erf dgelu", y2g, y2, R * F, 1e-5);
    OK(C->gelu_erf_bwd(cpu, z, y2, y, acc3, &pc, F, &dr));
    OK(G->gelu_erf_bwd(gpu, zg, y2g, yg, acc3g, &pg, F, &dr));
    expect_dev_close("gelu_erf dz", yg, y, R * F, 1e-5);
    expect_dev_close("gelu_erf dbias", acc3g, acc3, F, 1e-4);
    /* residual with dropout; its backward */
    OK(C->residual_fwd(cpu, y, x, dout, bb, &pc, d, &dr));
    OK(G->residual_fwd(gpu, yg, xg, dog, bg, &pg, d, &dr));
    expect_dev_close("residual_fwd", yg, y, R * d, 1e-6);
    memset(acc2, 0, (size_t)d * 4);
    OK(gpu->zero(gpu, acc2g, (size_t)d * 4));
    OK(C->residual_bwd(cpu, dout, y, acc2, &pc, d, &dr));
    OK(G->residual_bwd(gpu, dog, yg, acc2g, &pg, d, &dr));
    expect_dev_close("residual_bwd dt", yg, y, R * d, 1e-6);
    expect_dev_close("residual_bwd dbias", acc2g, acc2, d, 1e-4);
    /* mean pooling */
    OK(C->pool_mean_fwd(cpu, x, y, &pc, d));
    OK(G->pool_mean_fwd(gpu, xg, yg, &pg, d));
    expect_dev_close("pool_mean_fwd", yg, y, B * d, 1e-5);
    OK(C->pool_mean_bwd(cpu, dout, y, &pc, d));
    OK(G->pool_mean_bwd(gpu, dog, yg, &pg, d));
    expect_dev_close("pool_mean_bwd", yg, y, R * d, 1e-6);
    void *dv[] = {(void *)pg.off, (void *)pg.seg, (void *)pg.sid, xg, wg, bg, qg, dog, zg, bfg, posg, yg, y2g, mug, rsg, accg, acc2g, acc3g};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    free(seg), free(x), free(w), free(bb), free(qkv), free(dout), free(z), free(bf), free(pos);
    free(y), free(y2), free(mu), free(rs), free(acc), free(acc2), free(acc3);
}

/* One batch of attention (samples of len[0..B) rows, heads of dh, H heads) on both backends: the CPU's fused
 * method and auto (gemm from 8 rows), without and with dropout: output, lse and dqkv within tolerance, the
 * worst relative errors printed. Then the kernels' determinism (a second run gives the same bits) and their
 * independence of the batch (sample `solo` alone gives the same bits as inside the batch). */
static void attn_case(const char *tag, const int64_t *len, int B, int64_t dh, int H, int solo)
{
    int64_t d = dh * H, R = 0, mx = 0, *o = malloc((size_t)(B + 1) * 8), *sid = malloc((size_t)B * 8);
    o[0] = 0;
    for (int i = 0; i < B; i++) o[i + 1] = o[i] + len[i], mx = len[i] > mx ? len[i] : mx, sid[i] = 7 + 5 * i;
    R = o[B];
    int64_t *seg = malloc((size_t)(R ? R : 1) * 8);
    for (int i = 0; i < B; i++)
        for (int64_t r = o[i]; r < o[i + 1]; r++) seg[r] = i;
    ddp_packing pc = {.B = B, .R = R, .off = o, .seg = seg, .sid = sid, .hoff = o, .max_rows = mx}, pg = pc;
    pg.off = dev(o, (size_t)(B + 1) * 8), pg.seg = dev(seg, (size_t)(R ? R : 1) * 8), pg.sid = dev(sid, (size_t)B * 8);
    float *qkv = rnd(R * 3 * d, 31 + (uint64_t)dh, 1.5f), *dout = rnd(R * d, 32, 1), *y = calloc((size_t)R * d + 1, 4),
          *lse = calloc((size_t)R * H + 1, 4), *dq = calloc((size_t)R * 3 * d + 1, 4), *D = calloc((size_t)R * H + 1, 4);
    void *qg = dev(qkv, (size_t)R * 3 * d * 4 + 4), *dog = dev(dout, (size_t)R * d * 4 + 4), *yg, *lg, *dqg, *Dg;
    OK(gpu->alloc(gpu, &yg, (size_t)R * d * 4 + 4));
    OK(gpu->alloc(gpu, &lg, (size_t)R * H * 4 + 4));
    OK(gpu->alloc(gpu, &dqg, (size_t)R * 3 * d * 4 + 4));
    OK(gpu->alloc(gpu, &Dg, (size_t)R * H * 4 + 4));
    const char *methods[2] = {"fused", "auto"};
    ddp_dropout dk = {0};
    for (int k = 0; k < 4; k++) {
        dk = (ddp_dropout){.p = k < 2 ? 0.0f : 0.2f, .key = 77};
        setenv("MPIDDP_ATTENTION", methods[k % 2], 1);
        char what[160];
        OK(cpu->enc->attention_fwd(cpu, qkv, y, lse, &pc, d, H, &dk));
        if (k % 2 == 0) /* the kernels once per dropout setting, against both CPU methods */
            OK(gpu->enc->attention_fwd(gpu, qg, yg, lg, &pg, d, H, &dk));
        snprintf(what, sizeof what, "attention %s dh %lld (cpu %s, p %.1f) output", tag, (long long)dh, methods[k % 2],
                 (double)dk.p);
        double eo = expect_dev_close(what, yg, y, R * d, 2e-3); /* sums of up to 300 terms, in another order */
        snprintf(what, sizeof what, "attention %s dh %lld (cpu %s, p %.1f) lse", tag, (long long)dh, methods[k % 2],
                 (double)dk.p);
        double el = expect_dev_close(what, lg, lse, R * H, 1e-5);
        OK(cpu->enc->attention_bwd(cpu, qkv, y, dout, lse, dq, D, &pc, d, H, &dk));
        if (k % 2 == 0) OK(gpu->enc->attention_bwd(gpu, qg, yg, dog, lg, dqg, Dg, &pg, d, H, &dk));
        snprintf(what, sizeof what, "attention %s dh %lld (cpu %s, p %.1f) dqkv", tag, (long long)dh, methods[k % 2],
                 (double)dk.p);
        double eg = expect_dev_close(what, dqg, dq, R * 3 * d, 5e-3);
        printf("attention %-6s dh %3lld H %d rows %4lld (cpu %-5s p %.1f): worst relative error output %.2g lse %.2g "
               "dqkv %.2g\n", tag, (long long)dh, H, (long long)R, methods[k % 2], (double)dk.p, eo, el, eg);
    }
    unsetenv("MPIDDP_ATTENTION");
    /* determinism: the same call again (dropout on), identical bits */
    float *y1 = host_of(yg, R * d), *l1 = host_of(lg, R * H), *g1 = host_of(dqg, R * 3 * d);
    OK(gpu->zero(gpu, dqg, (size_t)R * 3 * d * 4));
    OK(gpu->enc->attention_fwd(gpu, qg, yg, lg, &pg, d, H, &dk));
    OK(gpu->enc->attention_bwd(gpu, qg, yg, dog, lg, dqg, Dg, &pg, d, H, &dk));
    float *y2 = host_of(yg, R * d), *l2 = host_of(lg, R * H), *g2 = host_of(dqg, R * 3 * d);
    CHECK(!memcmp(y1, y2, (size_t)R * d * 4) && !memcmp(l1, l2, (size_t)R * H * 4) && !memcmp(g1, g2, (size_t)R * 3 * d * 4),
          "attention %s dh %lld: two runs differ", tag, (long long)dh);
    /* sample `solo` alone (its id kept): the same bits as in the batch */
    int64_t lo = o[solo], n = len[solo], o1[2] = {0, n}, *seg1 = calloc((size_t)n + 1, 8);
    ddp_packing p1 = {.B = 1, .R = n, .off = dev(o1, sizeof o1), .seg = dev(seg1, (size_t)n * 8 + 8),
                      .sid = dev(&sid[solo], 8), .hoff = o1, .max_rows = n};
    void *q1 = dev(qkv + lo * 3 * d, (size_t)n * 3 * d * 4), *do1 = dev(dout + lo * d, (size_t)n * d * 4);
    OK(gpu->enc->attention_fwd(gpu, q1, yg, lg, &p1, d, H, &dk));
    OK(gpu->enc->attention_bwd(gpu, q1, yg, do1, lg, dqg, Dg, &p1, d, H, &dk));
    float *y3 = host_of(yg, n * d), *g3 = host_of(dqg, n * 3 * d);
    CHECK(!memcmp(y3, y1 + lo * d, (size_t)n * d * 4) && !memcmp(g3, g1 + lo * 3 * d, (size_t)n * 3 * d * 4),
          "attention %s dh %lld: sample %d alone differs from the batch", tag, (long long)dh, solo);
    void *dv[] = {(void *)pg.off, (void *)pg.seg, (void *)pg.sid, (void *)p1.off, (void *)p1.seg, (void *)p1.sid,
                  qg, dog, yg, lg, dqg, Dg, q1, do1};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    free(o), free(sid), free(seg), free(seg1), free(qkv), free(dout), free(y), free(lse), free(dq), free(D);
    free(y1), free(l1), free(g1), free(y2), free(l2), free(g2), free(y3), free(g3);
}

/* The tiled attention kernels (64-row blocks, 32-row shared tiles) across their boundaries: lengths 1, 31..33,
 * 63..65, 131 (2 x 64 + 3) and a long 300, every compiled head width (dh 8, 16 -> 16; 32; 64; 100 -> 128) and
 * one past the widest (160: the reference kernels); a batch of 0-3-row samples, the first one empty. */
static void test_attention_tiles(void)
{
    static const int64_t lens[] = {1, 63, 64, 65, 131, 31, 32, 33, 300, 2};
    static const int64_t tiny[] = {0, 1, 2, 0, 1, 3, 1, 0};
    static const struct {
        int64_t dh;
        int H;
    } shapes[] = {{8, 3}, {16, 2}, {32, 2}, {64, 1}, {100, 1}, {160, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        attn_case("tiles", lens, (int)(sizeof lens / sizeof lens[0]), shapes[i].dh, shapes[i].H, 8);
    attn_case("tiny", tiny, (int)(sizeof tiny / sizeof tiny[0]), 16, 4, 5);
    attn_case("tiny", tiny, (int)(sizeof tiny / sizeof tiny[0]), 6, 2, 2);
}

/* Two training steps of the Transformer encoder (dropout 0.1, accumulate 2) on both backends, AdamW in
 * between, then eval: losses, every gradient tensor, parameters and predictions. */
static void test_transformer_steps(void)
{
    enum { D = 13, B = 16 };
    int64_t o[B + 1], lab[B], ids[B];
    pack_offsets(o, B, 2, 7, 3, 20);
    for (int i = 0; i < B; i++) lab[i] = (i * 5) % 3, ids[i] = 500 + i;
    int64_t R = o[B];
    float *x = rnd(R * D, 78, 2);
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER, c.dim = D, c.classes = 3, c.hidden = 24, c.heads = 4, c.ff = 40, c.layers = 2;
    c.max_positions = 64, c.dropout = 0.1, c.max_batch_rows = R, c.max_batch_samples = B;
    twin t = {.name = "transformer "};
    OK(ddp_model_create_on(cpu, &c, &t.mc));
    OK(ddp_model_create_on(gpu, &c, &t.mg));
    if (failures) return;
    twin_init(&t);
    uint8_t pad[B] = {0};
    float lc[B], lg[B], prc[B], prg[B];
    int64_t pdc[B], pdg[B];
    ddp_forward_out oc = {.loss = lc, .prob = prc, .pred = pdc}, og = {.loss = lg, .prob = prg, .pred = pdg};
    for (int step = 1; step <= 2; step++) {
        ddp_batch b = {.nsamples = B, .nrows = R, .dim = D, .offsets = o, .labels = lab, .sample_ids = ids, .is_pad = pad,
                       .x = x, .step = step};
        twin_gradients(&t, &b, step, &oc, &og);
        twin_expect_gradients(&t, step);
        twin_adamw(&t, step, B, 1e-3); /* AdamW's first steps amplify the rounding of tiny gradients */
        /* the next step starts both backends from the same state, so its gradients are compared on equal inputs */
        OK(gpu->upload(gpu, t.pg, t.pc, (size_t)t.n * 4));
        OK(gpu->upload(gpu, t.mmg, t.mmc, (size_t)t.n * 4));
        OK(gpu->upload(gpu, t.vvg, t.vvc, (size_t)t.n * 4));
    }
    ddp_batch b = {.nsamples = B, .nrows = R, .dim = D, .offsets = o, .labels = lab, .sample_ids = ids, .is_pad = pad, .x = x};
    twin_eval(&t, &b, &oc, &og);
    twin_close(&t);
    free(x);
}

int main(void)
{
    int exit_code, ndev = cuda_test_devices(&exit_code);
    if (ndev == 0) return exit_code;
    printf("plugin: %s; %d device(s); %s\n", ddp_cuda()->emulated ? "host emulator" : "CUDA", ndev, ddp_cuda_why());
    /* The twin runs every fp32 GEMM on OpenBLAS (whose sums the emulator's GEMM repeats), so the whole-step checks
     * compare the CUDA kernels, not two GEMM libraries: AdamW's first steps turn another summation order of tiny
     * gradients into parameter differences near 1e-3 (test_cpu_gemm holds oneDNN's fp32 GEMM to OpenBLAS's). */
    setenv("MPIDDP_CPU_ONEDNN_FP32", "0", 0);
    OK(ddp_backend_cpu_create(1, &cpu));
    OK(ddp_backend_cuda_create(0, &gpu));
    if (failures) return 1;
    make_offsets();
    OK(gpu->reserve(gpu, off[NSEG]));
    /* errors come back as statuses with a message, never a crash */
    ddp_backend *bad = NULL;
    CHECK(ddp_backend_cuda_create(ndev + 7, &bad) != DDP_OK && !bad, "a backend on device %d must fail", ndev + 7);
    CHECK(strstr(ddp_last_error(), "cudaSetDevice") != NULL, "bad device error: %s", ddp_last_error());
    CHECK(gpu->gemm(gpu, 0, 0, (int64_t)1 << 31, 1, 1, 1.0f, NULL, 1, NULL, 1, 0.0f, NULL, 1) != DDP_OK,
          "a GEMM beyond cuBLAS's int range must be refused");
    char name[200];
    ddp_cuda_device_name(ndev + 7, name, sizeof name);
    CHECK(strncmp(name, "unknown (", 9) == 0, "name of a missing device: %s", name);
    long long syncs = ddp_cuda()->host_syncs();
    float one = 1.0f;
    void *d1 = dev(&one, sizeof one);
    CHECK(ddp_cuda()->host_syncs() > syncs, "host synchronisations are not counted");
    gpu->release(gpu, d1);
    test_gemm();
    test_elementwise();
    test_loss_optim();
    test_enc_ops();
    test_attention_tiles();
    test_transformer_steps();
    test_model_steps();
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    return check_summary();
}
