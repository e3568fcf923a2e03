/* test_math.c — the element-wise math shared by the CPU backend and the CUDA kernels (ddp_math.h):
 * gelu's derivative and softmax cross-entropy's gradient against central differences, and one AdamW
 * element update against the textbook formula in double precision; the encoder's exact gelu (kern_enc.h)
 * against libm in double, and the dropout mask's rate, scale and independence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mpi_ddp/backend/ddp_math.h"
#include "mpi_ddp/backend/kern_enc.h"

#include <math.h>

static void test_gelu_values(void **state)
{
    (void)state;
    /* reference values of 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) computed in double */
    for (double x = -6.0; x <= 6.0; x += 0.25) {
        double ref = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        assert_true(fabs(ddp_gelu((float)x) - ref) <= 1e-6 * (1.0 + fabs(ref)));
    }
}

static void test_expf(void **state)
{
    (void)state;
    double worst = 0;
    for (double x = -87.0; x <= 87.0; x += 0.01) {
        double ref = exp((float)x), got = ddp_expf((float)x);
        double rel = fabs(got - ref) / ref;
        if (rel > worst) worst = rel;
    }
    print_message("  ddp_expf worst relative error on [-87, 87]: %.2e\n", worst);
    assert_true(worst < 5e-7);
    assert_true(isnan(ddp_gelu(NAN)) && isnan(ddp_gelu_grad(NAN))); /* a NaN activation stays NaN: training stops */
    assert_true(fabsf(ddp_gelu(-200.0f)) < 1e-30f && ddp_gelu(200.0f) == 200.0f); /* saturated ends, no NaN */
    assert_true(isfinite(ddp_gelu_grad(-200.0f)) && isfinite(ddp_gelu_grad(200.0f)));
}

static void test_gelu_grad_fd(void **state)
{
    (void)state;
    for (double x = -6.0; x <= 6.0; x += 0.1) {
        double h = 1e-3;
        double fd = (ddp_gelu((float)(x + h)) - ddp_gelu((float)(x - h))) / (2 * h);
        assert_true(fabs(fd - ddp_gelu_grad((float)x)) < 2e-3);
    }
}

static void test_softmax_xent_grad_fd(void **state)
{
    (void)state;
    float z[5] = {0.3f, -1.2f, 2.0f, 0.0f, 0.7f}, dz[5];
    int64_t pred;
    float prob;
    for (int64_t y = 0; y < 5; y++) {
        float loss = ddp_softmax_xent_row(z, 5, y, 1.0f, dz, &pred, &prob);
        assert_int_equal(pred, 2);
        double se = 0;
        for (int j = 0; j < 5; j++) se += exp(z[j]);
        assert_true(fabs(prob - exp(2.0) / se) < 1e-6);
        assert_true(fabs(loss - (log(se) - z[y])) < 1e-5);
        for (int j = 0; j < 5; j++) {
            float zp[5], zm[5];
            for (int k = 0; k < 5; k++) zp[k] = zm[k] = z[k];
            zp[j] += 1e-3f;
            zm[j] -= 1e-3f;
            double fd = (ddp_softmax_xent_row(zp, 5, y, 1, NULL, NULL, NULL) -
                         ddp_softmax_xent_row(zm, 5, y, 1, NULL, NULL, NULL)) /
                        2e-3;
            assert_true(fabs(fd - dz[j]) < 1e-3);
        }
    }
}

/* the prediction of a row holding NaN is torch.argmax's, the first NaN, on every backend (the CPU one is compiled with
 * -ffinite-math-only: a test by comparison would be folded away); the loss is NaN */
static void test_softmax_xent_nan_argmax(void **state)
{
    (void)state;
    float nan = nanf(""), rows[4][4] = {
                              {1.0f, nan, 3.0f, 2.0f},
                              {nan, 5.0f, nan, 0.0f},
                              {1.0f, 2.0f, 3.0f, nan},
                              {1.0f, 4.0f, 4.0f, 2.0f},
                          };
    int64_t want[4] = {1, 0, 3, 1}, pred;
    float prob;
    for (int r = 0; r < 4; r++) {
        float loss = ddp_softmax_xent_row(rows[r], 4, 0, 1.0f, NULL, &pred, &prob);
        assert_int_equal(pred, want[r]);
        assert_int_equal(ddp_isnan_bits(loss), r < 3);
    }
    assert_false(ddp_isnan_bits(INFINITY));
    assert_true(ddp_isnan_bits(-nan));
}

/* the encoder's exact gelu against libm's erfc in double: erfc to 1.5e-6 relative on [-4, 4] (float's exp of
 * a rounded -x^2: about 2|x|^2 ulp), gelu and its derivative to 1e-6 max(1, |x|) absolute on [-12, 12] */
static void test_gelu_erf(void **state)
{
    (void)state;
    double worst = 0, worst_abs = 0;
    for (double x = -12.0; x <= 12.0; x += 1.0 / 1024) {
        if (fabs(x) <= 4.0) {
            double ec = erfc(x), e = fabs(ddp_erfcf((float)x) - ec) / ec;
            worst = e > worst ? e : worst;
        }
        double cdf = 0.5 * erfc(-x / sqrt(2.0));
        float g;
        float y = ddp_gelu_erf_fwd((float)x, &g);
        double want_g = cdf + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
        double e = fmax(fabs(y - x * cdf), fabs(g - want_g)) / fmax(1.0, fabs(x));
        worst_abs = e > worst_abs ? e : worst_abs;
    }
    print_message("  erfc relative error on [-4, 4]: %.2e; gelu_erf and its derivative: %.2e\n", worst, worst_abs);
    assert_true(worst < 1.5e-6);
    assert_true(worst_abs < 1e-6);
}

/* dropout masks: the drop rate is p, kept units are scaled by 1/(1-p), and a key, row or unit change
 * gives another mask */
static void test_dropout_mask(void **state)
{
    (void)state;
    ddp_dropout d = {.p = 0.3f, .key = 12345};
    int dropped = 0, n = 200000, same_other_key = 0;
    ddp_dropout d2 = {.p = 0.3f, .key = 12346};
    for (int i = 0; i < n; i++) {
        uint64_t rk = ddp_drop_rowkey(d.key, i / 100, i % 100), rk2 = ddp_drop_rowkey(d2.key, i / 100, i % 100);
        float s = ddp_drop_scale(&d, rk, (uint64_t)(i % 7)), s2 = ddp_drop_scale(&d2, rk2, (uint64_t)(i % 7));
        assert_true(s == 0.0f || fabsf(s - 1.0f / 0.7f) < 1e-6f);
        dropped += s == 0.0f;
        same_other_key += (s == 0.0f) == (s2 == 0.0f);
    }
    assert_true(fabs((double)dropped / n - 0.3) < 0.005);
    assert_true(fabs((double)same_other_key / n - 0.58) < 0.01); /* independent masks agree 0.7^2 + 0.3^2 */
}

static void test_adamw_formula(void **state)
{
    (void)state;
    double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    float p = 0.5f, m = 0, v = 0;
    double P = 0.5, M = 0, V = 0;
    const double grads[4] = {0.3, -0.1, 0.02, 1.5};
    for (int t = 1; t <= 4; t++) {
        double g = grads[t - 1];
        ddp_adamw_args a = {.lr = (float)lr,
                            .beta1 = (float)b1,
                            .beta2 = (float)b2,
                            .eps = (float)eps,
                            .weight_decay = (float)wd,
                            .bc1 = (float)(1 - pow(b1, t)),
                            .bc2_sqrt = (float)sqrt(1 - pow(b2, t)),
                            .gscale = 0.5f};
        ddp_adamw_elem(&p, (float)(2 * g), &m, &v, &a); /* gscale halves it back to g */
        P *= 1 - lr * wd;
        M = b1 * M + (1 - b1) * g;
        V = b2 * V + (1 - b2) * g * g;
        P -= lr * (M / (1 - pow(b1, t))) / (sqrt(V / (1 - pow(b2, t))) + eps);
        assert_true(fabs(p - P) < 1e-6);
        assert_true(fabs(m - M) < 1e-6);
        assert_true(fabs(v - V) < 1e-7);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu_values),
        cmocka_unit_test(test_expf),
        cmocka_unit_test(test_gelu_grad_fd),
        cmocka_unit_test(test_softmax_xent_grad_fd),
        cmocka_unit_test(test_softmax_xent_nan_argmax),
        cmocka_unit_test(test_adamw_formula),
        cmocka_unit_test(test_gelu_erf),
        cmocka_unit_test(test_dropout_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
