/* test_model.c — the reference model on the CPU backend: finite-difference gradient checks of each layer's backward
 * and of every parameter of the whole model, and packing (a batch's loss is the sum of its samples run one by one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/model/models.h"
#include "mpiddp.h"
#include "test_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ddp_backend *g_be;
enum { D = 5, H = 7, C = 3, NS = 3 };
static const int64_t OFF[NS + 1] = {0, 2, 6, 7};
static const int64_t LAB[NS] = {2, 0, 1};
static float X[7 * D];

static ddp_batch make_batch(void)
{
    static uint8_t pad[NS];
    static int64_t ids[NS];
    return (ddp_batch){
        .nsamples = NS, .nrows = 7, .dim = D, .offsets = OFF, .labels = LAB, .sample_ids = ids, .is_pad = pad, .x = X};
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
    for (int i = 0; i < 7 * D; i++) X[i] = 2.0f * test_frand(&s);
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

/* cache blocking: a forward run block by block (here one sample per block) computes what the whole batch
 * at once does — losses, gradients, predictions */
static void test_row_blocks(void **state)
{
    (void)state;
    ddp_backend *whole, *blocked;
    assert_int_equal(ddp_backend_cpu_create(1, &whole), DDP_OK);
    assert_int_equal(ddp_backend_cpu_create(1, &blocked), DDP_OK);
    whole->row_block_bytes = 0;
    blocked->row_block_bytes = 1; /* below one row: every block is a single sample */
    ddp_model mw, mb;
    assert_int_equal(ddp_refmodel_create_on(whole, D, H, C, 16, 4, &mw), DDP_OK);
    assert_int_equal(ddp_refmodel_create_on(blocked, D, H, C, 16, 4, &mb), DDP_OK);
    int64_t n = ddp_model_num_params(&mw);
    float *p = calloc((size_t)n, sizeof *p), *gw = calloc((size_t)n, sizeof *gw), *gb = calloc((size_t)n, sizeof *gb);
    assert_int_equal(mw.init(mw.self, p, 5), DDP_OK);
    uint64_t s = 17;
    for (int i = 0; i < 7 * D; i++) X[i] = 2.0f * test_frand(&s);
    ddp_batch b = make_batch();
    float lw[NS], lb[NS];
    int64_t pw[NS], pb[NS];
    ddp_forward_out ow = {.loss = lw, .pred = pw}, ob = {.loss = lb, .pred = pb};
    assert_int_equal(mw.train_step(mw.self, &b, p, gw, &ow, NULL, NULL), DDP_OK);
    assert_int_equal(mb.train_step(mb.self, &b, p, gb, &ob, NULL, NULL), DDP_OK);
    for (int i = 0; i < NS; i++) {
        assert_true(fabsf(lw[i] - lb[i]) <= 1e-6f * (1 + fabsf(lw[i])));
        assert_int_equal(pw[i], pb[i]);
    }
    for (int64_t j = 0; j < n; j++) assert_true(fabsf(gw[j] - gb[j]) <= 1e-6f * (1 + fabsf(gw[j])));
    assert_true(fabs(loss_of(&mw, &b, p) - loss_of(&mb, &b, p)) < 1e-6);
    free(p), free(gw), free(gb);
    mw.destroy(mw.self);
    mb.destroy(mb.self);
    whole->destroy(whole);
    blocked->destroy(blocked);
}

/* layer-level checks on the backend ops themselves */
static void test_layers_fd(void **state)
{
    (void)state;
    ddp_backend *be;
    assert_int_equal(ddp_backend_cpu_create(1, &be), DDP_OK);
    /* layer 2 + mean pooling: L = sum(w * mean_r gelu(z[r] + bias)) -> dz, dbias by central differences */
    enum { PC = 2 };
    float z[7 * PC], bz[PC] = {0.3f, -0.4f}, pooled[NS * PC], pooled2[NS * PC],
                     w[NS * PC] = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f};
    float dg[7 * PC], dzp[7 * PC], dbp[PC] = {0.125f, -0.5f}; /* dbias accumulates onto what is there */
    uint64_t s = 3;
    for (int i = 0; i < 7 * PC; i++) z[i] = test_frand(&s) * 2;
    be->bias_gelu_pool(be, z, bz, NULL, OFF, NS, PC, pooled);
    be->bias_gelu_pool(be, z, bz, dg, OFF, NS, PC, pooled2);
    assert_memory_equal(pooled, pooled2, sizeof pooled); /* keeping gelu' does not change the forward */
    for (int sg = 0; sg < NS; sg++)                      /* against a plain per-row mean of ddp_gelu */
        for (int c = 0; c < PC; c++) {
            double ref = 0;
            for (int64_t r = OFF[sg]; r < OFF[sg + 1]; r++) ref += ddp_gelu(z[r * PC + c] + bz[c]);
            assert_true(fabs(ref / (double)(OFF[sg + 1] - OFF[sg]) - pooled[sg * PC + c]) < 1e-6);
        }
    be->pool_gelu_backward(be, w, OFF, NS, dg, dzp, 7, PC, dbp);
    double dcol[PC] = {0, 0}; /* dL/dbias = the column sums of dz, added onto dbias */
    for (int i = 0; i < 7 * PC; i++) dcol[i % PC] += dzp[i];
    assert_true(fabs(0.125 + dcol[0] - dbp[0]) < 1e-6 && fabs(-0.5 + dcol[1] - dbp[1]) < 1e-6);
    for (int i = 0; i < 7 * PC + PC; i++) { /* every z, then every bias */
        float *t = i < 7 * PC ? &z[i] : &bz[i - 7 * PC], keep = *t;
        double l[2];
        for (int k = 0; k < 2; k++) {
            *t = keep + (k ? -1e-2f : 1e-2f);
            be->bias_gelu_pool(be, z, bz, NULL, OFF, NS, PC, pooled);
            l[k] = 0;
            for (int j = 0; j < NS * PC; j++) l[k] += w[j] * pooled[j];
        }
        *t = keep;
        double want = i < 7 * PC ? dzp[i] : dcol[i - 7 * PC];
        assert_true(fabs((l[0] - l[1]) / 2e-2 - want) < 2e-4);
    }
    /* linear layer through gemm: Z = X W^T; L = sum(V * Z); dW = V^T X */
    float x[4 * 3], wt[2 * 3], v[4 * 2], zl[4 * 2], dw[2 * 3];
    for (int i = 0; i < 12; i++) x[i] = test_frand(&s);
    for (int i = 0; i < 6; i++) wt[i] = test_frand(&s);
    for (int i = 0; i < 8; i++) v[i] = test_frand(&s);
    be->gemm(be, 1, 0, 2, 3, 4, 1.0f, v, 2, x, 3, 0.0f, dw, 3);
    for (int i = 0; i < 6; i++) {
        double l[2];
        float keep = wt[i];
        for (int k = 0; k < 2; k++) {
            wt[i] = keep + (k ? -1e-2f : 1e-2f);
            be->gemm(be, 0, 1, 4, 2, 3, 1.0f, x, 3, wt, 3, 0.0f, zl, 2);
            l[k] = 0;
            for (int j = 0; j < 8; j++) l[k] += v[j] * zl[j];
        }
        wt[i] = keep;
        assert_true(fabs((l[0] - l[1]) / 2e-2 - dw[i]) < 1e-4);
    }
    /* bias + gelu forward and its backward: L = sum(up * gelu(zz + bias)); gelu' kept in place of zz */
    float zz[6], bias[3] = {0.1f, -0.2f, 0.3f}, act[6], act2[6], up[6], dz[6], db[3] = {0};
    for (int i = 0; i < 6; i++) zz[i] = test_frand(&s) * 3, up[i] = test_frand(&s);
    float z0[6];
    memcpy(z0, zz, sizeof zz);
    be->bias_gelu(be, zz, bias, act2, NULL, 2, 3);
    assert_memory_equal(zz, z0, sizeof zz); /* without dgelu the input is left alone */
    be->bias_gelu(be, zz, bias, act, zz, 2, 3);
    assert_memory_equal(act, act2, sizeof act);
    be->gelu_backward(be, up, zz, dz, 2, 3, db);
    for (int i = 0; i < 6; i++) {
        float v = z0[i] + bias[i % 3];
        assert_true(fabs(act[i] - ddp_gelu(v)) < 1e-7);
        double fd = (ddp_gelu(v + 1e-3f) - ddp_gelu(v - 1e-3f)) / 2e-3 * up[i];
        assert_true(fabs(fd - dz[i]) < 2e-3);
    }
    for (int c = 0; c < 3; c++) assert_true(fabs(db[c] - (dz[c] + dz[3 + c])) < 1e-6);
    be->destroy(be);
}

/* The checks: each layer's backward (bias + gelu, gelu + mean pooling, softmax cross-entropy, the GEMM-based linear
 * layers) and every parameter of the whole model against finite differences; packing: a batch's loss equals the sum
 * of its samples run one at a time (no padding rows influence anything). */
int main(void)
{
    if (ddp_backend_cpu_create(1, &g_be) != DDP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_model_fd),
        cmocka_unit_test(test_packing_equals_one_by_one),
        cmocka_unit_test(test_row_blocks),
        cmocka_unit_test(test_layers_fd),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    g_be->destroy(g_be);
    return rc;
}
