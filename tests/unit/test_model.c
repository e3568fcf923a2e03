/* test_model.c — finite-difference gradient checks of the reference model on the CPU backend: each
 * layer's backward (gelu, segment mean pooling, softmax cross-entropy, the GEMM-based linear layers)
 * and every parameter of the whole model; plus packing: a batch's loss equals the sum of its samples
 * run one at a time (no padding rows influence anything). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mpi_ddp/backend.h"
#include "mpiddp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ddp_backend *g_be;
enum { D = 5, H = 7, C = 3, NS = 3 };
static const int64_t OFF[NS + 1] = {0, 2, 6, 7};
static const int64_t LAB[NS] = {2, 0, 1};
static float X[7 * D];

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static ddp_batch make_batch(void)
{
    static uint8_t pad[NS];
    static int64_t ids[NS];
    return (ddp_batch){.nsamples = NS, .nrows = 7, .dim = D, .offsets = OFF, .labels = LAB, .sample_ids = ids, .is_pad = pad, .x = X};
}

static double loss_of(ddp_model *m, const ddp_batch *b, const float *p)
{
    ddp_forward_out out = {0};
    assert_int_equal(m->eval_step(m->self, b, p, &out), DDP_OK);
    return out.loss_sum;
}

static void test_whole_model_fd(void **state)
{
    (void)state;
    ddp_model m;
    assert_int_equal(ddp_refmodel_create_on(g_be, D, H, C, 16, 4, &m), DDP_OK);
    int64_t n = ddp_model_num_params(&m);
    assert_int_equal(n, H * D + H + H * H + H + C * H + C);
    float *p = calloc((size_t)n, sizeof *p), *g = calloc((size_t)n, sizeof *g);
    assert_int_equal(m.init(m.self, p, 42), DDP_OK);
    uint64_t s = 9;
    for (int i = 0; i < 7 * D; i++) X[i] = 2.0f * frand(&s);
    ddp_batch b = make_batch();
    ddp_forward_out out = {0};
    assert_int_equal(m.train_step(m.self, &b, p, g, &out, NULL, NULL), DDP_OK);
    assert_int_equal(out.count, NS);
    assert_true(fabs(out.loss_sum - loss_of(&m, &b, p)) < 1e-6);
    int64_t off = 0;
    for (int t = 0; t < m.ntensors; t++) {
        int64_t k = 1;
        for (int d = 0; d < m.tensors[t].ndim; d++) k *= m.tensors[t].shape[d];
        double worst = 0;
        for (int64_t j = off; j < off + k; j++) {
            float keep = p[j];
            const float h = 1e-2f;
            p[j] = keep + h;
            double lp = loss_of(&m, &b, p);
            p[j] = keep - h;
            double lm = loss_of(&m, &b, p);
            p[j] = keep;
            double fd = (lp - lm) / (2 * h), err = fabs(fd - g[j]) / (1e-2 + fabs(fd));
            if (err > worst) worst = err;
        }
        print_message("  %-10s %3lld params, worst relative error %.2e\n", m.tensors[t].name, (long long)k, worst);
        assert_true(worst < 2e-2);
        off += k;
    }
    /* gradients accumulate (a second call adds the same amount) */
    float *g2 = malloc((size_t)n * sizeof *g2);
    memcpy(g2, g, (size_t)n * sizeof *g);
    assert_int_equal(m.train_step(m.self, &b, p, g2, &out, NULL, NULL), DDP_OK);
    for (int64_t j = 0; j < n; j++) assert_true(fabs(g2[j] - 2 * g[j]) <= 1e-5 * (1 + fabs(g[j])));
    free(g2);
    free(p);
    free(g);
    m.destroy(m.self);
}

static void test_packing_equals_one_by_one(void **state)
{
    (void)state;
    ddp_model m;
    assert_int_equal(ddp_refmodel_create_on(g_be, D, H, C, 16, 4, &m), DDP_OK);
    int64_t n = ddp_model_num_params(&m);
    float *p = calloc((size_t)n, sizeof *p);
    m.init(m.self, p, 1);
    ddp_batch b = make_batch();
    double packed = loss_of(&m, &b, p), single = 0;
    for (int s = 0; s < NS; s++) {
        int64_t off1[2] = {0, OFF[s + 1] - OFF[s]};
        ddp_batch one = b;
        one.nsamples = 1;
        one.nrows = off1[1];
        one.offsets = off1;
        one.labels = &LAB[s];
        one.x = X + OFF[s] * D;
        single += loss_of(&m, &one, p);
    }
    assert_true(fabs(packed - single) < 1e-5);
    free(p);
    m.destroy(m.self);
}

/* layer-level checks on the backend ops themselves */
static void test_layers_fd(void **state)
{
    (void)state;
    ddp_backend *be;
    assert_int_equal(ddp_backend_cpu_create(1, &be), DDP_OK);
    /* segment mean: L = sum(w * mean) -> dA[r] = w / rows(s) */
    float a[7 * 2], pooled[NS * 2], w[NS * 2] = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f}, da[7 * 2];
    uint64_t s = 3;
    for (int i = 0; i < 14; i++) a[i] = frand(&s);
    be->segment_mean_backward(be, w, OFF, NS, 2, da);
    for (int i = 0; i < 14; i++) {
        float keep = a[i];
        double l[2];
        for (int k = 0; k < 2; k++) {
            a[i] = keep + (k ? -1e-2f : 1e-2f);
            be->segment_mean(be, a, OFF, NS, 2, pooled);
            l[k] = 0;
            for (int j = 0; j < NS * 2; j++) l[k] += w[j] * pooled[j];
        }
        a[i] = keep;
        assert_true(fabs((l[0] - l[1]) / 2e-2 - da[i]) < 1e-4);
    }
    /* linear layer through gemm: Z = X W^T; L = sum(V * Z); dW = V^T X */
    float x[4 * 3], wt[2 * 3], v[4 * 2], z[4 * 2], dw[2 * 3];
    for (int i = 0; i < 12; i++) x[i] = frand(&s);
    for (int i = 0; i < 6; i++) wt[i] = frand(&s);
    for (int i = 0; i < 8; i++) v[i] = frand(&s);
    be->gemm(be, 1, 0, 2, 3, 4, 1.0f, v, 2, x, 3, 0.0f, dw, 3);
    for (int i = 0; i < 6; i++) {
        double l[2];
        float keep = wt[i];
        for (int k = 0; k < 2; k++) {
            wt[i] = keep + (k ? -1e-2f : 1e-2f);
            be->gemm(be, 0, 1, 4, 2, 3, 1.0f, x, 3, wt, 3, 0.0f, z, 2);
            l[k] = 0;
            for (int j = 0; j < 8; j++) l[k] += v[j] * z[j];
        }
        wt[i] = keep;
        assert_true(fabs((l[0] - l[1]) / 2e-2 - dw[i]) < 1e-4);
    }
    /* bias + gelu forward and its backward */
    float zz[6], bias[3] = {0.1f, -0.2f, 0.3f}, act[6], up[6], dz[6];
    for (int i = 0; i < 6; i++) zz[i] = frand(&s) * 3, up[i] = frand(&s);
    float z0[6];
    memcpy(z0, zz, sizeof zz);
    be->bias_gelu(be, zz, bias, act, 2, 3);
    be->gelu_backward(be, up, zz, dz, 6);
    for (int i = 0; i < 6; i++) {
        double fd = (ddp_gelu(zz[i] + 1e-3f) - ddp_gelu(zz[i] - 1e-3f)) / 2e-3 * up[i];
        assert_true(fabs(fd - dz[i]) < 2e-3);
        assert_true(fabs(zz[i] - (z0[i] + bias[i % 3])) < 1e-6);
    }
    be->destroy(be);
}

int main(void)
{
    if (ddp_backend_cpu_create(1, &g_be) != DDP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_model_fd),
        cmocka_unit_test(test_packing_equals_one_by_one),
        cmocka_unit_test(test_layers_fd),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    g_be->destroy(g_be);
    return rc;
}
