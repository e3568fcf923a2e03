/* test_transformer16.c — the CPU backend's encoder ops that store bf16 (layernorm_fwd16, gelu_erf_fwd16) and the
 * fused residual_layernorm_fwd: exactly the bits of the fp32 and unfused ops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpiddp.h"
#include "test_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ddp_backend *g_be;

/* The optional ops that store bf16 (layernorm_fwd16, gelu_erf_fwd16) and residual_layernorm_fwd: the bits of the
 * fp32 ops, rounded to nearest even by this file's own rounding (not the backend's), at widths odd and even and
 * over 0, 1 and 12 packed rows. */
static uint16_t rne16(float f) /* bf16 bits of f, nearest even (finite f) */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static uint16_t trunc16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

enum { PR_MAX = 12 };
/* nrows packed rows in samples of 1, 2, 3, 4, 1, ... rows (ids 40, 41, ...) */
static ddp_packing packing_of(int64_t nrows, int64_t *off, int64_t *seg, int64_t *sid)
{
    int64_t B = 0, r = 0, mx = 0;
    off[0] = 0;
    while (r < nrows) {
        int64_t n = B % 4 + 1;
        if (r + n > nrows) n = nrows - r;
        for (int64_t i = 0; i < n; i++) seg[r + i] = B;
        sid[B] = 40 + B;
        r += n, mx = n > mx ? n : mx, off[++B] = r;
    }
    return (ddp_packing){.B = B, .R = nrows, .off = off, .seg = seg, .sid = sid, .hoff = off, .max_rows = mx};
}

/* y16 == the rounding of y32 (n values) bit for bit; returns how many of them truncation would get wrong */
static int equal_rounded(const char *what, const uint16_t *y16, const float *y32, int64_t n)
{
    int differs = 0;
    for (int64_t i = 0; i < n; i++) {
        if (y16[i] != rne16(y32[i]))
            fail_msg("%s: element %lld is 0x%04x, the rounding of %.9g is 0x%04x", what, (long long)i, y16[i],
                     (double)y32[i], rne16(y32[i]));
        differs += rne16(y32[i]) != trunc16(y32[i]);
    }
    return differs;
}

/* w, b of a layernorm of width d: the last two columns (d >= 4) have w = 0 and b at a tie of bf16's rounding
 * (1 + 2^-8 rounds down to 1, 1 + 3 2^-8 up to 1 + 2^-6: nearest even, not away from zero or truncated) */
static void ln_params(float *w, float *b, int64_t d, uint64_t *s)
{
    for (int64_t c = 0; c < d; c++) w[c] = 1.0f + 0.5f * test_frand(s), b[c] = test_frand(s);
    if (d >= 4) w[d - 2] = w[d - 1] = 0.0f, b[d - 2] = 1.0f + 0x1p-8f, b[d - 1] = -(1.0f + 3 * 0x1p-8f);
}

static void test_layernorm_fwd16(void **state)
{
    (void)state;
    const ddp_enc_ops *E = g_be->enc;
    assert_non_null(E->layernorm_fwd16);
    static const int64_t ds[] = {7, 8, 33, 64}, rs[] = {0, 1, PR_MAX};
    int differs = 0;
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        for (size_t j = 0; j < sizeof rs / sizeof rs[0]; j++) {
            int64_t d = ds[i], n = rs[j], G = 3; /* G guard elements after each output */
            float *x = malloc((size_t)(n * d + 1) * 4), *w = malloc((size_t)d * 4), *b = malloc((size_t)d * 4),
                  *y = malloc((size_t)(n * d + 1) * 4), mu[PR_MAX + 3], rsd[PR_MAX + 3], mu16[PR_MAX + 3],
                  rs16[PR_MAX + 3];
            uint16_t *y16 = malloc((size_t)(n * d + G) * 2);
            uint64_t s = 7 + (uint64_t)(i * 4 + j);
            for (int64_t k = 0; k < n * d; k++) x[k] = 3.0f * test_frand(&s) + 0.5f;
            ln_params(w, b, d, &s);
            for (int64_t k = 0; k < n * d + G; k++) y16[k] = 0xabcd;
            for (int k = 0; k < PR_MAX + 3; k++) mu16[k] = rs16[k] = -7.0f;
            assert_int_equal(E->layernorm_fwd(g_be, x, w, b, y, mu, rsd, n, d), DDP_OK);
            assert_int_equal(E->layernorm_fwd16(g_be, x, w, b, y16, mu16, rs16, n, d), DDP_OK);
            differs += equal_rounded("layernorm_fwd16", y16, y, n * d);
            assert_memory_equal(mu16, mu, (size_t)n * 4);
            assert_memory_equal(rs16, rsd, (size_t)n * 4);
            for (int64_t k = n * d; k < n * d + G; k++) assert_int_equal(y16[k], 0xabcd);
            assert_true(mu16[n] == -7.0f && rs16[n] == -7.0f);
            if (n && d >= 4) /* the ties: nearest even */
                for (int64_t r = 0; r < n; r++) {
                    assert_int_equal(y16[r * d + d - 2], 0x3f80);
                    assert_int_equal(y16[r * d + d - 1], 0xbf82);
                }
            free(x), free(w), free(b), free(y), free(y16);
        }
    assert_true(differs > 100); /* the check tells rounding from truncation */
}

static void test_gelu_erf_fwd16(void **state)
{
    (void)state;
    const ddp_enc_ops *E = g_be->enc;
    assert_non_null(E->gelu_erf_fwd16);
    static const int64_t cs[] = {7, 12}, rs[] = {0, 1, PR_MAX};
    static const float ps[] = {0.0f, 0.2f};
    int64_t off[PR_MAX + 1], seg[PR_MAX], sid[PR_MAX];
    int differs = 0, dropped = 0;
    for (size_t ci = 0; ci < 2; ci++)
        for (size_t ri = 0; ri < 3; ri++)
            for (int pi = 0; pi < 2; pi++)
                for (int mode = 0; mode < 3; mode++) { /* dgelu NULL, its own buffer, z itself */
                    int64_t cols = cs[ci], n = rs[ri], G = 3, nz = n * cols;
                    ddp_packing pk = packing_of(n, off, seg, sid);
                    ddp_dropout dr = {.p = ps[pi], .key = 77};
                    float *z = malloc((size_t)(nz + 1) * 4), *z2 = malloc((size_t)(nz + 1) * 4),
                          *bias = malloc((size_t)cols * 4), *a = malloc((size_t)(nz + 1) * 4),
                          *g = malloc((size_t)(nz + 1) * 4), *g2 = malloc((size_t)(nz + 1) * 4);
                    uint16_t *a16 = malloc((size_t)(nz + G) * 2);
                    uint64_t s = 100 + ci * 16 + ri * 4 + (uint64_t)pi * 2 + (uint64_t)mode;
                    for (int64_t k = 0; k < nz; k++) z[k] = z2[k] = 3.0f * test_frand(&s);
                    for (int64_t k = 0; k < cols; k++) bias[k] = test_frand(&s);
                    for (int64_t k = 0; k < nz + G; k++) a16[k] = 0xabcd;
                    float *gd = mode == 0 ? NULL : mode == 1 ? g : z, *gd2 = mode == 0 ? NULL : mode == 1 ? g2 : z2;
                    assert_int_equal(E->gelu_erf_fwd(g_be, z, bias, a, gd, &pk, cols, &dr), DDP_OK);
                    assert_int_equal(E->gelu_erf_fwd16(g_be, z2, bias, a16, gd2, &pk, cols, &dr), DDP_OK);
                    differs += equal_rounded("gelu_erf_fwd16", a16, a, nz);
                    if (mode)
                        assert_memory_equal(gd2, gd, (size_t)nz * 4); /* dgelu (mode 2: in z): the same fp32 bits */
                    for (int64_t k = nz; k < nz + G; k++) assert_int_equal(a16[k], 0xabcd);
                    for (int64_t k = 0; k < nz; k++) dropped += pi && a[k] == 0.0f && a16[k] == 0;
                    free(z), free(z2), free(bias), free(a), free(g), free(g2), free(a16);
                }
    assert_true(differs > 50);
    assert_true(dropped > 10); /* dropout 0.2 was on */
}

static void test_residual_layernorm_fwd(void **state)
{
    (void)state;
    const ddp_enc_ops *E = g_be->enc;
    assert_non_null(E->residual_layernorm_fwd);
    static const int64_t ds[] = {7, 8, 33}, rs[] = {0, 1, PR_MAX};
    static const float ps[] = {0.0f, 0.2f};
    int64_t off[PR_MAX + 1], seg[PR_MAX], sid[PR_MAX];
    int differs = 0, dropped = 0;
    for (size_t di = 0; di < 3; di++)
        for (size_t ri = 0; ri < 3; ri++)
            for (int pi = 0; pi < 2; pi++)
                for (int alias = 0; alias < 2; alias++)
                    for (int y16 = 0; y16 < 2; y16++) {
                        int64_t d = ds[di], n = rs[ri], nx = n * d, G = 3;
                        ddp_packing pk = packing_of(n, off, seg, sid);
                        ddp_dropout dr = {.p = ps[pi], .key = 5};
                        float *h = malloc((size_t)(nx + 1) * 4), *h2 = malloc((size_t)(nx + 1) * 4),
                              *t = malloc((size_t)(nx + 1) * 4), *tb = malloc((size_t)d * 4),
                              *w = malloc((size_t)d * 4), *lb = malloc((size_t)d * 4),
                              *o = malloc((size_t)(nx + 1) * 4), *o2 = malloc((size_t)(nx + 1) * 4),
                              *y = malloc((size_t)(nx + 1) * 4), *y2 = malloc((size_t)(nx + G) * 4), mu[PR_MAX + 1],
                              rsd[PR_MAX + 1], mu2[PR_MAX + 1], rs2[PR_MAX + 1];
                        uint16_t *yb = malloc((size_t)(nx + G) * 2);
                        uint64_t s = 300 + di * 32 + ri * 8 + (uint64_t)pi * 4 + (uint64_t)alias * 2 + (uint64_t)y16;
                        for (int64_t k = 0; k < nx; k++) h[k] = h2[k] = 2.0f * test_frand(&s), t[k] = test_frand(&s);
                        for (int64_t k = 0; k < d; k++) tb[k] = 0.5f * test_frand(&s);
                        ln_params(w, lb, d, &s);
                        for (int64_t k = 0; k < nx + G; k++) y2[k] = -9.0f, yb[k] = 0xabcd;
                        for (int k = 0; k <= PR_MAX; k++) mu2[k] = rs2[k] = -7.0f;
                        /* the two ops in sequence */
                        assert_int_equal(E->residual_fwd(g_be, o, h, t, tb, &pk, d, &dr), DDP_OK);
                        assert_int_equal(E->layernorm_fwd(g_be, o, w, lb, y, mu, rsd, n, d), DDP_OK);
                        /* fused, out aliasing h or not */
                        float *out = alias ? h2 : o2;
                        assert_int_equal(E->residual_layernorm_fwd(g_be, out, h2, t, tb, &pk, d, &dr, w, lb,
                                                                   y16 ? (void *)yb : (void *)y2, y16, mu2, rs2),
                                         DDP_OK);
                        assert_memory_equal(out, o, (size_t)nx * 4);
                        if (!alias) assert_memory_equal(h2, h, (size_t)nx * 4); /* h is not written */
                        if (y16) {
                            differs += equal_rounded("residual_layernorm_fwd y16", yb, y, nx);
                            for (int64_t k = nx; k < nx + G; k++) assert_int_equal(yb[k], 0xabcd);
                        } else {
                            assert_memory_equal(y2, y, (size_t)nx * 4);
                            for (int64_t k = nx; k < nx + G; k++) assert_true(y2[k] == -9.0f);
                        }
                        assert_memory_equal(mu2, mu, (size_t)n * 4);
                        assert_memory_equal(rs2, rsd, (size_t)n * 4);
                        assert_true(mu2[n] == -7.0f && rs2[n] == -7.0f);
                        for (int64_t k = 0; k < nx; k++) dropped += pi && o[k] == h[k];
                        free(h), free(h2), free(t), free(tb), free(w), free(lb), free(o), free(o2), free(y), free(y2),
                            free(yb);
                    }
    assert_true(differs > 50);
    assert_true(dropped > 10); /* dropout 0.2 was on */
}

/* layernorm_fwd16 and gelu_erf_fwd16 store exactly the fp32 ops' outputs rounded to bf16 (nearest even, ties
 * included); residual_layernorm_fwd gives exactly the bits of residual_fwd then layernorm_fwd (out aliasing h or
 * not, y in fp32 or bf16), with dropout off and on, at widths odd and even over 0, 1 and 12 rows. */
int main(void)
{
    if (ddp_backend_cpu_create(1, &g_be) != DDP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_fwd16),
        cmocka_unit_test(test_gelu_erf_fwd16),
        cmocka_unit_test(test_residual_layernorm_fwd),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    g_be->destroy(g_be);
    return rc;
}
