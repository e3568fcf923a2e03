/* test_cuda_backend.c — the CUDA backend against its CPU twin: the reference model's ops and whole train steps, the
 * error paths, and the group that also runs test_cuda_backend_enc.c's encoder tests (helpers: cuda_twin.h). */
#include "cuda_twin.h"
#include "cuda_test.h"

ddp_backend *cpu, *gpu;
static int ndev;

/* errors come back as statuses with a message, never a crash; host synchronisations are counted */
static void test_errors(void **state)
{
    (void)state;
    ddp_backend *bad = NULL;
    if (!(ddp_backend_cuda_create(ndev + 7, &bad) != DDP_OK && !bad))
        fail_msg("a backend on device %d must fail", ndev + 7);
    if (strstr(ddp_last_error(), "cudaSetDevice") == NULL) fail_msg("bad device error: %s", ddp_last_error());
    if (gpu->gemm(gpu, 0, 0, (int64_t)1 << 31, 1, 1, 1.0f, NULL, 1, NULL, 1, 0.0f, NULL, 1) == DDP_OK)
        fail_msg("a GEMM beyond cuBLAS's int range must be refused");
    char name[200];
    ddp_cuda_device_name(ndev + 7, name, sizeof name);
    if (strncmp(name, "unknown (", 9) != 0) fail_msg("name of a missing device: %s", name);
    long long syncs = ddp_cuda()->host_syncs();
    float one = 1.0f;
    void *d1 = dev(&one, sizeof one);
    if (!(ddp_cuda()->host_syncs() > syncs)) fail_msg("host synchronisations are not counted");
    gpu->release(gpu, d1);
}

static void test_gemm(void **state)
{
    (void)state;
    const int64_t M = 203, N = 210, K = 67;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = ta ? M : K, ldb = tb ? K : N;
            float *A = test_rnd(M * K, 1 + ta, 1, 0), *B = test_rnd(K * N, 3 + tb, 1, 0), *C = test_rnd(M * N, 5, 1, 0);
            void *dA = dev(A, (size_t)(M * K) * 4), *dB = dev(B, (size_t)(K * N) * 4),
                 *dC = dev(C, (size_t)(M * N) * 4);
            /* each side is within gamma_{K+3} T of the exact result, T = |alpha| sum_k |a b| + |beta c0| (any
             * summation order), so they differ by at most 2 (K + 3) 2^-24 T */
            double *bound = malloc((size_t)(M * N) * sizeof(double));
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double S = 0;
                    for (int64_t k = 0; k < K; k++)
                        S += fabs((double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                                  (tb ? B[j * ldb + k] : B[k * ldb + j]));
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

/* packed segments: 70 samples of 1..40 rows (1-row samples included) */
enum { NSEG = 70, COLS = 211 };
static int64_t off[NSEG + 1];
static void make_offsets(void) { test_random_offsets(off, NSEG, 11, 9, 0, 19.5f); }

/* A bias gradient accumulated on both backends (init + the column sums of terms[rows x cols], the CPU's terms), checked
 * against the rounding of two fp32 sums in different orders, (rows + 1) u sum |terms| each, plus the terms' own
 * allowed difference term_tol (a relative bound per element fails where a column cancels to near zero). */
static void expect_colsum(const char *what, const void *d, const float *c, const float *terms, const float *init,
                          int64_t rows, int64_t cols, double term_tol)
{
    double *bound = calloc((size_t)cols, sizeof *bound);
    for (int64_t j = 0; j < cols; j++) {
        double mag = 0;
        for (int64_t r = 0; r < rows; r++) mag += fabs((double)terms[r * cols + j]);
        bound[j] = mag * (term_tol + 2.0 * (double)(rows + 1) * 0x1p-24) + fabs((double)init[j]) * 0x1p-23;
    }
    expect_dev_bounded(what, d, c, bound, cols);
    free(bound);
}

static void test_elementwise(void **state)
{
    (void)state;
    int64_t R = off[NSEG], n = R * COLS;
    float *z = test_rnd(n, 21, 3, 0), *bias = test_rnd(COLS, 22, 1, 0), *a = malloc((size_t)n * 4),
          *dg = malloc((size_t)n * 4);
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
    float *up = test_rnd(n, 23, 1, 0), *dbias = test_rnd(COLS, 24, 1, 0), *out = malloc((size_t)n * 4);
    void *dup = dev(up, (size_t)n * 4), *ddbias = dev(dbias, COLS * 4), *dout;
    OK(gpu->alloc(gpu, &dout, (size_t)n * 4));
    float *init = malloc(COLS * 4);
    memcpy(init, dbias, COLS * 4);
    OK(cpu->gelu_backward(cpu, up, dg, out, R, COLS, dbias));
    OK(gpu->gelu_backward(gpu, dup, ddg, dout, R, COLS, ddbias));
    expect_dev_close("gelu_backward dz", dout, out, n, 1e-5);
    expect_colsum("gelu_backward dbias (accumulated)", ddbias, dbias, out, init, R, COLS, 1e-5);
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
    float *gp = test_rnd(NSEG * COLS, 25, 1, 0), *dbias2 = test_rnd(COLS, 26, 1, 0);
    void *dgp = dev(gp, (size_t)NSEG * COLS * 4), *ddbias2 = dev(dbias2, COLS * 4);
    memcpy(init, dbias2, COLS * 4);
    OK(cpu->pool_gelu_backward(cpu, gp, off, NSEG, dg2, out, R, COLS, dbias2));
    OK(gpu->pool_gelu_backward(gpu, dgp, doff, NSEG, ddg, dout, R, COLS, ddbias2));
    expect_dev_close("pool_gelu_backward dz", dout, out, n, 1e-5);
    expect_colsum("pool_gelu_backward dbias (accumulated)", ddbias2, dbias2, out, init, R, COLS, 1e-5);
    /* colsum with beta 0 and 1, add_bias */
    float *cs = test_rnd(COLS, 27, 1, 0);
    void *dcs = dev(cs, COLS * 4);
    memcpy(init, cs, COLS * 4);
    OK(cpu->colsum(cpu, z, cs, R, COLS, 1.0f));
    OK(gpu->colsum(gpu, dz, dcs, R, COLS, 1.0f));
    expect_colsum("colsum beta=1", dcs, cs, z, init, R, COLS, 0.0);
    memset(init, 0, COLS * 4);
    OK(cpu->colsum(cpu, z, cs, R, COLS, 0.0f));
    OK(gpu->colsum(gpu, dz, dcs, R, COLS, 0.0f));
    expect_colsum("colsum beta=0", dcs, cs, z, init, R, COLS, 0.0);
    if (gpu->colsum(gpu, dz, dcs, R + 100000, COLS, 0.0f) == DDP_OK)
        fail_msg("colsum beyond the reserved rows must be an error");
    OK(cpu->add_bias(cpu, z, bias, R, COLS));
    OK(gpu->add_bias(gpu, dz, db, R, COLS));
    expect_dev_close("add_bias", dz, z, n, 1e-6);
    void *ptrs[] = {dz, db, da, ddg, dup, ddbias, dout, doff, dp, dgp, ddbias2, dcs};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) gpu->release(gpu, ptrs[i]);
    free(z), free(bias), free(a), free(dg), free(up), free(dbias), free(out), free(p), free(dg2), free(gp),
        free(dbias2), free(cs), free(init);
}

static void test_loss_optim(void **state)
{
    (void)state;
    enum { N = 300, C = 13 };
    float *lg = test_rnd(N * C, 31, 4, 0), *dl = malloc(N * C * 4), *loss = malloc(N * 4), *prob = malloc(N * 4);
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
    if (memcmp(pred, predg, sizeof pred) != 0) fail_msg("softmax_xent predictions differ");
    /* a row holding NaN predicts its first NaN (torch.argmax) on both backends, the CPU one built with
     * -ffinite-math-only */
    float nanrows[3 * C];
    memcpy(nanrows, lg, sizeof nanrows);
    nanrows[4] = nanrows[C] = nanrows[2 * C + 7] = nanrows[2 * C + 9] = nanf("");
    int64_t npred[3], npredg[3];
    void *dnan = dev(nanrows, sizeof nanrows);
    OK(cpu->softmax_xent(cpu, nanrows, lab, 3, C, NULL, loss, npred, prob));
    OK(gpu->softmax_xent(gpu, dnan, dlab, 3, C, NULL, dloss, dpred, dprob));
    OK(gpu->download(gpu, npredg, dpred, sizeof npredg));
    for (int r = 0; r < 3; r++) {
        assert_int_equal(npred[r], r == 0 ? 4 : r == 1 ? 0 : 7);
        assert_int_equal(npredg[r], npred[r]);
    }
    gpu->release(gpu, dnan);
    /* AdamW over more elements than one grid of 256-thread blocks covers in one launch of k_sumsq */
    const int64_t n = 300001;
    float *p = test_rnd(n, 41, 1, 0), *g = test_rnd(n, 42, 1, 0), *m = test_rnd(n, 43, 0.1f, 0),
          *v = test_rnd(n, 44, 0.1f, 0);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    void *dpp = dev(p, (size_t)n * 4), *dgg = dev(g, (size_t)n * 4), *dm = dev(m, (size_t)n * 4),
         *dv = dev(v, (size_t)n * 4);
    ddp_adamw_args a = {.lr = 1e-2f,
                        .beta1 = 0.9f,
                        .beta2 = 0.999f,
                        .eps = 1e-8f,
                        .weight_decay = 0.01f,
                        .bc1 = 0.19f,
                        .bc2_sqrt = sqrtf(0.002f),
                        .gscale = 0.25f};
    OK(cpu->adamw(cpu, p, g, m, v, n, &a));
    OK(gpu->adamw(gpu, dpp, dgg, dm, dv, n, &a));
    expect_dev_close("adamw params", dpp, p, n, 1e-5);
    expect_dev_close("adamw exp_avg", dm, m, n, 1e-5);
    expect_dev_close("adamw exp_avg_sq", dv, v, n, 1e-5);
    double sc, sg, sg2;
    OK(cpu->sumsq(cpu, g, n, &sc));
    OK(gpu->sumsq(gpu, dgg, n, &sg));
    OK(gpu->sumsq(gpu, dgg, n, &sg2));
    if (!(fabs(sc - sg) <= 1e-9 * sc)) fail_msg("sumsq differs: cpu %.17g cuda %.17g", sc, sg);
    if (sg != sg2) fail_msg("sumsq is not deterministic: %.17g then %.17g", sg, sg2);
    OK(gpu->sumsq(gpu, dgg, 0, &sg));
    if (sg != 0.0) fail_msg("sumsq of nothing is %g", sg);
    /* per-tensor norms in one pass: an empty tensor, a 1-element one, one larger than a grid's share */
    int64_t offs[5] = {0, 1, 1, 1000, n};
    double mc[4], mg[4], mg2[4];
    OK(cpu->sumsq_many(cpu, g, offs, 4, mc));
    OK(gpu->sumsq_many(gpu, dgg, offs, 4, mg));
    OK(gpu->sumsq_many(gpu, dgg, offs, 4, mg2));
    for (int k = 0; k < 4; k++) {
        if (!(fabs(mc[k] - mg[k]) <= 1e-9 * mc[k]))
            fail_msg("sumsq_many tensor %d: cpu %.17g cuda %.17g", k, mc[k], mg[k]);
        if (mg[k] != mg2[k]) fail_msg("sumsq_many tensor %d is not deterministic", k);
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
    if (!same) fail_msg("sumsq_many over %d tensors differs from the CPU", T);
    free(to), free(tc), free(tg);
    void *ptrs[] = {dlg, dlab, ddl, dloss, dprob, dpred, dpp, dgg, dm, dv};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) gpu->release(gpu, ptrs[i]);
    free(lg), free(dl), free(loss), free(prob), free(p), free(g), free(m), free(v);
}

/* Three train steps of the reference model (H 200) on both backends with AdamW in between, then eval. */
static void test_model_steps(void **state)
{
    (void)state;
    enum { D = 37, H = 200, C = 7, B = 64 };
    int64_t o[B + 1];
    test_random_offsets(o, B, 1, 10, 3, 24);
    int64_t R = o[B], lab[B], ids[B];
    for (int i = 0; i < B; i++) lab[i] = (i * 5) % C, ids[i] = i;
    float *x = test_rnd(R * D, 77, 2, 0);
    twin t = {.name = ""};
    OK(ddp_refmodel_create_on(cpu, D, H, C, R, B, &t.mc));
    OK(ddp_refmodel_create_on(gpu, D, H, C, R, B, &t.mg));
    twin_init(&t);
    uint8_t pad[B] = {0};
    ddp_batch b = {
        .nsamples = B, .nrows = R, .dim = D, .offsets = o, .labels = lab, .sample_ids = ids, .is_pad = pad, .x = x};
    float lc[B], lg[B], prc[B], prg[B];
    int64_t pdc[B], pdg[B];
    ddp_forward_out oc = {.loss = lc, .prob = prc, .pred = pdc}, og = {.loss = lg, .prob = prg, .pred = pdg};
    for (int step = 1; step <= 3; step++) {
        twin_gradients(&t, &b, step, &oc, &og);
        char what[64];
        snprintf(what, sizeof what, "step %d probabilities", step);
        expect_close(what, prg, prc, B, 1e-4);
        for (int i = 0; i < B; i++)
            if (pdc[i] != pdg[i]) fail_msg("step %d prediction %d differs", step, i);
        twin_expect_gradients(&t, step);
        twin_adamw(&t, step, B, 1e-4);
    }
    twin_eval(&t, &b, &oc, &og);
    expect_close("eval probabilities", prg, prc, B, 1e-4);
    twin_close(&t);
    free(x);
}

static int setup(void **state)
{
    (void)state;
    /* The twin runs every fp32 GEMM on OpenBLAS (whose sums the emulator's GEMM repeats), so the whole-step checks
     * compare the CUDA kernels, not two GEMM libraries: AdamW's first steps turn another summation order of tiny
     * gradients into parameter differences near 1e-3 (test_cpu_gemm holds oneDNN's fp32 GEMM to OpenBLAS's). */
    setenv("MPIDDP_CPU_ONEDNN_FP32", "0", 0);
    OK(ddp_backend_cpu_create(1, &cpu));
    OK(ddp_backend_cuda_create(0, &gpu));
    make_offsets();
    OK(gpu->reserve(gpu, off[NSEG]));
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    return 0;
}

/* Every op on the same inputs as the CPU twin, compared tensor by tensor (each element against its own magnitude,
 * cuda_twin.h), except the GEMMs and layernorm's dx, whose summation orders differ on a GPU (cuBLAS, tree sums): those
 * against bounds from fp32 rounding in any order; shapes that run every loop of the kernels (H >= 200, more elements
 * than one grid covers, many segments, accumulation into non-zero gradients). On a GPU (label gpu) and the emulator
 * (label emu); skips (77) only where no NVIDIA device node exists and no plugin is named (cuda_test.h). */
int main(void)
{
    int exit_code;
    ndev = cuda_test_devices(&exit_code);
    if (ndev == 0) return exit_code;
    printf("plugin: %s; %d device(s); %s\n", ddp_cuda()->emulated ? "host emulator" : "CUDA", ndev, ddp_cuda_why());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_loss_optim),
        cmocka_unit_test(test_enc_ops),
        cmocka_unit_test(test_pool_mean), /* mean pooling across widths and lengths */
        cmocka_unit_test(test_attention_tiles),
        cmocka_unit_test(test_transformer_steps),
        cmocka_unit_test(test_model_steps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
