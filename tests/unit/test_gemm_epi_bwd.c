/* test_gemm_epi_bwd.c — gemm_epi in the backward pass (test cases of test_gemm_epi.c's main): linear_bwd against its
 * composition through gemm_epi and gemm, with dy and dx in bf16, and an encoder's train steps with the epilogues fused
 * against the unfused calls. */
#include "test_gemm_epi.h"

/* linear_bwd (dW += dy^T x, dbias += sum dy, dx = dy W from one rounding of dy) against its composition through
 * gemm_epi and gemm (linear_bwd removed from the op table): the same bits on the emulator, where the two see the same
 * bf16 operands; on a GPU, whose algorithms may differ with the scratch's offsets, within 1e-5 (relative L2) of each
 * other, fp32 accumulation of the same products. With x in bf16 or fp32, with and without a bias, at every
 * precision, and with cuBLASLt refusing (MPIDDP_EMU_LT_REFUSE=1). At bf16, dy handed over in bf16 (dy16: the
 * rounding linear_bwd would make) gives the same dW and dx as dy in fp32: the same bits on the emulator; its bias
 * gradient (linear_bwd's own: the composition refuses a bias of a bf16 dy) the sum of those bf16 values, the bits of
 * the fp32 dy's epilogue where cuBLASLt ran, else within the fp32 accumulation bound of that sum. */
static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
/* the case's results (dW, dbias, dx) through linear_bwd and through its composition; fused[] (NULL: freed) gets
 * linear_bwd's */
static void linear_bwd_case(int p, int64_t R, int64_t N, int64_t K, int dy16, int x16, int with_bias, uint64_t seed,
                            float *fused[3])
{
    size_t ndy = (size_t)(R * N), nx = (size_t)(R * K), nw = (size_t)(N * K);
    float *dy = test_rnd((int64_t)ndy, seed, 2.0f, -1.0f), *x = test_rnd((int64_t)nx, seed + 1, 2.0f, -1.0f),
          *W = test_rnd((int64_t)nw, seed + 2, 2.0f, -1.0f), *dW0 = test_rnd((int64_t)nw, seed + 3, 2.0f, -1.0f),
          *b0 = test_rnd(N, seed + 4, 2.0f, -1.0f);
    uint16_t *x16b = to_bits16(x, nx), *dy16b = to_bits16(dy, ndy);
    float *out[2][3];
    for (int way = 0; way < 2; way++) {
        float *dW = on_gpu(dW0, nw * 4), *db = on_gpu(b0, (size_t)N * 4), *dWt = on_gpu(W, nw * 4), *dx = NULL;
        void *dxin = x16 ? on_gpu(x16b, nx * 2) : on_gpu(x, nx * 4),
             *ddy = dy16 ? on_gpu(dy16b, ndy * 2) : on_gpu(dy, ndy * 4);
        OK(gpu->alloc(gpu, (void **)&dx, nx * 4));
        OK(gpu->set_precision(gpu, (ddp_precision)p));
        ddp_status (*own)(ddp_backend *, const void *, int, const void *, int, const float *, float *, float *, void *,
                          int, int64_t, int64_t, int64_t) = gpu->linear_bwd;
        if (way) gpu->linear_bwd = NULL; /* the composition */
        ddp_status st = ddp_linear_bwd(gpu, 1, ddy, dy16, dxin, x16, dWt, dW, with_bias ? db : NULL, dx, 0, R, N, K);
        gpu->linear_bwd = own;
        if (way && dy16 && with_bias) { /* refused with its line; linear_bwd's results stand for both */
            if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "bf16 dy"))
                fail_msg("the composition took a bias gradient of a bf16 dy (%d: %s)", (int)st, ddp_last_error());
            const size_t nk[3] = {nw, (size_t)N, nx};
            for (int k = 0; k < 3; k++) out[1][k] = malloc(nk[k] * 4), memcpy(out[1][k], out[0][k], nk[k] * 4);
            OK(gpu->download(gpu, out[1][1], db, (size_t)N * 4));
            if (memcmp(out[1][1], b0, (size_t)N * 4)) fail_msg("the refused composition wrote a bias gradient");
            memcpy(out[1][1], out[0][1], (size_t)N * 4);
            gpu->release(gpu, ddy), gpu->release(gpu, dW), gpu->release(gpu, db), gpu->release(gpu, dWt);
            gpu->release(gpu, dx), gpu->release(gpu, dxin);
            break;
        }
        OK(st);
        out[way][0] = malloc(nw * 4), out[way][1] = malloc((size_t)N * 4), out[way][2] = malloc(nx * 4);
        OK(gpu->download(gpu, out[way][0], dW, nw * 4));
        OK(gpu->download(gpu, out[way][1], db, (size_t)N * 4));
        OK(gpu->download(gpu, out[way][2], dx, nx * 4));
        gpu->release(gpu, ddy), gpu->release(gpu, dW), gpu->release(gpu, db), gpu->release(gpu, dWt);
        gpu->release(gpu, dx), gpu->release(gpu, dxin);
    }
    if (!with_bias && memcmp(out[0][1], b0, (size_t)N * 4) != 0) fail_msg("linear_bwd without a bias wrote one");
    size_t n[3] = {nw, (size_t)N, nx};
    static const char *what[3] = {"dW", "dbias", "dx"};
    for (int k = 0; k < 3; k++) {
        int same = memcmp(out[0][k], out[1][k], n[k] * 4) == 0;
        double d = rel_l2(out[0][k], out[1][k], n[k]);
        if (emulated ? !same : !(d <= 1e-5))
            fail_msg("%s linear_bwd %lldx%lldx%lld dy16 %d x16 %d bias %d: %s %s its composition's (relative L2 %.3g)",
                     ddp_precision_name((ddp_precision)p), (long long)R, (long long)N, (long long)K, dy16, x16,
                     with_bias, what[k], emulated ? "not the bits of" : "too far from", d);
        free(out[1][k]);
        if (fused)
            fused[k] = out[0][k];
        else
            free(out[0][k]);
    }
    free(dy), free(x), free(W), free(dW0), free(b0), free(x16b), free(dy16b);
}
/* the bias gradient g16 of linear_bwd_case's bf16 dy (seed's): b0 + the sum of the bf16 values, within the fp32
 * accumulation bound of a double reference; where cuBLASLt ran, the bits of g32, the fp32 dy's epilogue (which sums
 * the same bf16 values) */
static void bias_of16(int64_t R, int64_t N, uint64_t seed, const float *g16, const float *g32)
{
    float *dy = test_rnd(R * N, seed, 2.0f, -1.0f), *b0 = test_rnd(N, seed + 4, 2.0f, -1.0f);
    const char *refuse = getenv("MPIDDP_EMU_LT_REFUSE");
    for (int64_t c = 0; c < N; c++) {
        double ref = b0[c], S = fabs(b0[c]);
        for (int64_t r = 0; r < R; r++) {
            double v = round_bits(dy[r * N + c], 16);
            ref += v, S += fabs(v);
        }
        if (!(fabs(g16[c] - ref) <= (R + 3) * 0x1p-24 * S + 1e-30))
            fail_msg("bf16 linear_bwd %lldx%lld: the bias gradient of a bf16 dy %lld = %.9g, the sum of its values "
                     "%.9g",
                     (long long)R, (long long)N, (long long)c, (double)g16[c], ref);
    }
    if (emulated && !(refuse && *refuse == '1') && R > 1 && memcmp(g16, g32, (size_t)N * 4))
        fail_msg("bf16 linear_bwd %lldx%lld: the bias gradient of a bf16 dy is not the bits of the fp32 dy's epilogue",
                 (long long)R, (long long)N);
    free(dy), free(b0);
}
/* dx written in bf16 (dx16) at bf16: the rounding of the fp32 dx of the same call, bit for bit on the emulator (on a
 * GPU, whose cuBLASLt may choose another algorithm for a bf16 D, within 2^-8 relative L2, a rounding's size), with
 * dW and dbias the same bits. The composition refuses a bf16 dx with one line, and
 * so does linear_bwd at another precision. */
static void linear_bwd_dx16_case(int64_t R, int64_t N, int64_t K, int dy16, int x16, int with_bias, uint64_t seed)
{
    size_t ndy = (size_t)(R * N), nx = (size_t)(R * K), nw = (size_t)(N * K);
    float *dy = test_rnd((int64_t)ndy, seed, 2.0f, -1.0f), *x = test_rnd((int64_t)nx, seed + 1, 2.0f, -1.0f),
          *W = test_rnd((int64_t)nw, seed + 2, 2.0f, -1.0f), *dW0 = test_rnd((int64_t)nw, seed + 3, 2.0f, -1.0f),
          *b0 = test_rnd(N, seed + 4, 2.0f, -1.0f);
    uint16_t *x16b = to_bits16(x, nx), *dy16b = to_bits16(dy, ndy);
    void *dxin = x16 ? on_gpu(x16b, nx * 2) : on_gpu(x, nx * 4),
         *ddy = dy16 ? on_gpu(dy16b, ndy * 2) : on_gpu(dy, ndy * 4);
    float *dWt = on_gpu(W, nw * 4), *res[2][3];
    OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
    for (int o16 = 0; o16 < 2; o16++) {
        float *dW = on_gpu(dW0, nw * 4), *db = on_gpu(b0, (size_t)N * 4);
        void *dx = NULL;
        OK(gpu->alloc(gpu, &dx, nx * 4 + 8));
        OK(gpu->zero(gpu, dx, nx * 4 + 8));
        OK(ddp_linear_bwd(gpu, 1, ddy, dy16, dxin, x16, dWt, dW, with_bias ? db : NULL, dx, o16, R, N, K));
        res[o16][0] = malloc(nw * 4 + 4), res[o16][1] = malloc((size_t)N * 4 + 4), res[o16][2] = malloc(nx * 4 + 4);
        OK(gpu->download(gpu, res[o16][0], dW, nw * 4));
        OK(gpu->download(gpu, res[o16][1], db, (size_t)N * 4));
        OK(gpu->download(gpu, res[o16][2], dx, nx * (o16 ? 2 : 4)));
        gpu->release(gpu, dW), gpu->release(gpu, db), gpu->release(gpu, dx);
    }
    float *w16 = malloc(nx * 4 + 4); /* the bf16 dx widened, and the fp32 dx rounded */
    int64_t bad = -1;
    for (size_t i = 0; i < nx; i++) {
        uint32_t u = (uint32_t)((uint16_t *)res[1][2])[i] << 16;
        memcpy(&w16[i], &u, 4);
        if (bad < 0 && memcmp(&w16[i], &(float){round_bits(res[0][2][i], 16)}, 4)) bad = (int64_t)i;
    }
    const double d = rel_l2(w16, res[0][2], nx);
    if (emulated ? bad >= 0 : !(d <= 0x1p-8))
        fail_msg(
            "bf16 linear_bwd %lldx%lldx%lld dy16 %d x16 %d bias %d: the bf16 dx is not the fp32 dx rounded (element "
            "%lld, relative L2 %.3g)",
            (long long)R, (long long)N, (long long)K, dy16, x16, with_bias, (long long)bad, d);
    for (int k = 0; k < 2; k++) {
        const size_t nk = k ? (size_t)N : nw;
        if (emulated ? memcmp(res[0][k], res[1][k], nk * 4) != 0 : !(rel_l2(res[1][k], res[0][k], nk) <= 1e-5))
            fail_msg("bf16 linear_bwd %lldx%lldx%lld: %s changed with a bf16 dx", (long long)R, (long long)N,
                     (long long)K, k ? "dbias" : "dW");
    }
    ddp_status (*own)(ddp_backend *, const void *, int, const void *, int, const float *, float *, float *, void *, int,
                      int64_t, int64_t, int64_t) = gpu->linear_bwd;
    gpu->linear_bwd = NULL; /* the composition: refused, one line */
    ddp_status st = ddp_linear_bwd(gpu, 1, ddy, dy16, dxin, x16, dWt, (float *)dxin, NULL, ddy, 1, R, N, K);
    gpu->linear_bwd = own;
    if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "bf16 dx") || strchr(ddp_last_error(), '\n'))
        fail_msg("the composition took a bf16 dx (%d: %s)", (int)st, ddp_last_error());
    OK(gpu->set_precision(gpu, DDP_PRECISION_TF32));
    st = gpu->linear_bwd(gpu, dy, 0, x, 0, W, dW0, NULL, x, 1, R, N, K); /* refused before any pointer is read */
    if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "bf16 dx needs bf16 precision"))
        fail_msg("linear_bwd at tf32 took a bf16 dx (%d: %s)", (int)st, ddp_last_error());
    for (int k = 0; k < 3; k++) free(res[0][k]), free(res[1][k]);
    free(w16), free(dy), free(x), free(W), free(dW0), free(b0), free(x16b), free(dy16b);
    gpu->release(gpu, dxin), gpu->release(gpu, ddy), gpu->release(gpu, dWt);
}
static void linear_bwd_cases(void)
{
    static const int64_t dx16_shapes[][3] = {{37, 96, 32}, {300, 24, 16}, {1, 3, 5}, {0, 4, 4}, {5, 8, 6}};
    for (size_t s = 0; s < sizeof dx16_shapes / sizeof *dx16_shapes; s++)
        for (int v = 0; v < 4; v++) /* dy16, x16 and the bias: four of their combinations */
            linear_bwd_dx16_case(dx16_shapes[s][0], dx16_shapes[s][1], dx16_shapes[s][2], v & 1, (v >> 1) & 1,
                                 v == 0 || v == 3 ? 0 : 1, 777 + 10 * s + (uint64_t)v);
    static const int64_t shapes[][3] = {{37, 96, 32}, {300, 24, 16}, {1, 3, 5}, {0, 4, 4}};
    uint64_t seed = 99;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t R = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        for (int p = 0; p < 3; p++)
            for (int bias = 0; bias < 2; bias++)
                for (int x16 = 0; x16 <= (p == 2); x16++) {
                    seed += 10;
                    float *f32[3], *f16[3];
                    const int both = p == 2; /* dy16 as well: the results of the same seed's fp32 dy */
                    linear_bwd_case(p, R, N, K, 0, x16, bias, seed, both ? f32 : NULL);
                    if (!both) continue;
                    linear_bwd_case(p, R, N, K, 1, x16, bias, seed, f16);
                    size_t n[3] = {(size_t)(N * K), (size_t)N, (size_t)(R * K)};
                    if (bias) bias_of16(R, N, seed, f16[1], f32[1]);
                    for (int k = 0; k < 3; k++) {
                        if (bias && k == 1) {
                            free(f16[k]), free(f32[k]);
                            continue;
                        }
                        double d = rel_l2(f16[k], f32[k], n[k]);
                        if (emulated ? memcmp(f16[k], f32[k], n[k] * 4) != 0 : !(d <= 1e-5))
                            fail_msg("bf16 linear_bwd %lldx%lldx%lld x16 %d: output %d from a bf16 dy %s from an fp32 "
                                     "dy (relative L2 %.3g)",
                                     (long long)R, (long long)N, (long long)K, x16, k,
                                     emulated ? "not the bits of that" : "too far from that", d);
                        free(f16[k]), free(f32[k]);
                    }
                }
    }
}
void test_linear_bwd(void **state)
{
    (void)state;
    linear_bwd_cases();
    if (!emulated) return;
    setenv("MPIDDP_EMU_LT_REFUSE", "1", 1);
    linear_bwd_cases();
    unsetenv("MPIDDP_EMU_LT_REFUSE");
}

/* Two accumulated train steps of a 2-layer encoder at prec, with fused epilogues (MPIDDP_CUBLASLT=1) or not: the
 * gradient and the launches (kernels and cuBLAS calls) per step. */
static float *model_steps(ddp_precision prec, int fuse, double dropout, long long *launches, int64_t *n)
{
    enum { NB = 2, B = 12, D = 11, C = 3 };
    test_batch bat[NB];
    int64_t max_rows = 0;
    uint64_t s = 12345;
    for (int k = 0; k < NB; k++) {
        test_batch_make(&bat[k], &s, B, 9, C, D, 2.0, 100 * k, 1);
        max_rows = bat[k].b.nrows > max_rows ? bat[k].b.nrows : max_rows;
    }
    setenv("MPIDDP_CUBLASLT", fuse ? "1" : "0", 1);
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER, c.dim = D, c.classes = C, c.hidden = 32, c.heads = 2, c.ff = 48, c.layers = 2;
    c.max_positions = 16, c.dropout = dropout, c.max_batch_rows = max_rows, c.max_batch_samples = B;
    c.precision = prec;
    ddp_model m;
    OK(ddp_model_create_on(gpu, &c, &m));
    unsetenv("MPIDDP_CUBLASLT");
    OK(gpu->set_precision(gpu, prec));
    *n = ddp_model_num_params(&m);
    void *p, *g;
    OK(gpu->alloc(gpu, &p, (size_t)*n * 4));
    OK(gpu->alloc(gpu, &g, (size_t)*n * 4));
    OK(m.init(m.self, p, 9));
    long long l0 = ddp_cuda()->launches();
    for (int k = 0; k < NB; k++) {
        float loss[B], prob[B];
        int64_t pred[B];
        ddp_forward_out o = {.loss = loss, .prob = prob, .pred = pred};
        OK(m.train_step(m.self, &bat[k].b, p, g, &o, NULL, NULL));
    }
    *launches = (ddp_cuda()->launches() - l0) / NB;
    float *grad = malloc((size_t)*n * 4);
    OK(gpu->download(gpu, grad, g, (size_t)*n * 4));
    /* the key third of every in_proj bias gradient is the exact 0 (transformer_pass.c), written after the epilogue */
    int64_t off = 0, keys = 0;
    for (int t = 0; t < m.ntensors; t++) {
        int64_t cnt = m.tensors[t].shape[0] * (m.tensors[t].ndim == 2 ? m.tensors[t].shape[1] : 1);
        if (strstr(m.tensors[t].name, "in_proj_bias")) {
            for (int64_t k = cnt / 3; k < 2 * cnt / 3; k++)
                if (grad[off + k] != 0.0f)
                    fail_msg("%s[%lld] = %g, not 0", m.tensors[t].name, (long long)k, (double)grad[off + k]);
            keys++;
        }
        off += cnt;
    }
    if (keys != 2) fail_msg("%lld in_proj biases found, want 2", (long long)keys);
    gpu->release(gpu, p), gpu->release(gpu, g);
    m.destroy(m.self);
    for (int k = 0; k < NB; k++) test_batch_free(&bat[k]);
    return grad;
}

/* The encoder's steps with the epilogues fused (the qkv and head biases in the forward GEMMs, the bias gradients of
 * qkv, out_proj, linear2 and the head in the weight-gradient GEMMs, no residual-gradient copy without dropout)
 * against the unfused calls, at tf32 and bf16, with dropout 0 and 0.1: the same gradient within the operands'
 * rounding (relative L2 distance under 2%: a bias gradient now sums the gradient as the GEMM reads it), fewer
 * launches (printed for docs/architecture.md); on the emulator at bf16 the bits differ, so the fused path ran. */
void test_model_steps(void **state)
{
    (void)state;
    for (int p = 1; p <= 2; p++)
        for (int dr = 0; dr < 2; dr++) {
            long long lf, lu;
            int64_t n;
            float *gf = model_steps((ddp_precision)p, 1, dr ? 0.1 : 0.0, &lf, &n);
            float *gu = model_steps((ddp_precision)p, 0, dr ? 0.1 : 0.0, &lu, &n);
            double num = 0, den = 0;
            for (int64_t i = 0; i < n; i++) {
                if (!isfinite(gf[i])) fail_msg("fused gradient %lld is not finite", (long long)i);
                num += ((double)gf[i] - gu[i]) * ((double)gf[i] - gu[i]), den += (double)gu[i] * gu[i];
            }
            const char *pn = ddp_precision_name((ddp_precision)p);
            printf("%s dropout %s: %lld launches per step fused, %lld unfused; relative gradient distance %.2g\n", pn,
                   dr ? "0.1" : "0", lf, lu, sqrt(num / den));
            if (!(den > 0 && sqrt(num / den) < 0.02))
                fail_msg("%s dropout %d: fused and unfused gradients %.3g apart", pn, dr, sqrt(num / (den + 1e-300)));
            if (!(lf < lu)) fail_msg("%s: %lld launches fused, %lld unfused", pn, lf, lu);
            if (emulated && p == 2 && num == 0) fail_msg("%s: the fused step gave the unfused bits", pn);
            free(gf), free(gu);
        }
}
