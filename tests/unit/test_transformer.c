/* test_transformer.c — the Transformer encoder on the CPU backend: finite-difference checks of its ops and whole
 * model, packing, the attention methods' agreement, limits and init. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/model/models.h"
#include "mpiddp.h"
#include "test_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ddp_backend *g_be;
enum { D = 3, DM = 8, HEADS = 2, FF = 12, C = 3, NS = 4, R = 12 };
static const int64_t OFF[NS + 1] = {0, 1, 5, 11, 12};
static const int64_t LAB[NS] = {2, 0, 1, 1};
static const int64_t SEG[R] = {0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3};
static const int64_t SID[NS] = {11, 12, 13, 14};
static float X[R * D];

static ddp_packing packing(void)
{
    return (ddp_packing){.B = NS, .R = R, .off = OFF, .seg = SEG, .sid = SID, .hoff = OFF, .max_rows = 6};
}

/* ------------------------------------------------------------------ op-level checks */
/* objective of an op's output y[n]: sum_i w_i y_i with fixed weights */
static double objective(const float *y, const float *w, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)y[i] * w[i];
    return s;
}

static void check_fd(const char *what, double analytic, double fd)
{
    double tol = 2e-3 * fmax(1.0, fabs(analytic));
    if (!(fabs(analytic - fd) <= tol)) fail_msg("%s: analytic %.6g vs finite difference %.6g", what, analytic, fd);
}

static void test_layernorm_fd(void **state)
{
    (void)state;
    const ddp_enc_ops *E = g_be->enc;
    enum { n = 5, d = 7 };
    float x[n * d], w[d], b[d], y[n * d], mu[n], rs[n], wy[n * d], dx[n * d] = {0}, dw[d] = {0}, db[d] = {0};
    uint64_t s = 3;
    for (int i = 0; i < n * d; i++) x[i] = 2.0f * test_frand(&s), wy[i] = test_frand(&s);
    for (int i = 0; i < d; i++) w[i] = 1.0f + 0.5f * test_frand(&s), b[i] = test_frand(&s);
    assert_int_equal(E->layernorm_fwd(g_be, x, w, b, y, mu, rs, n, d), DDP_OK);
    assert_int_equal(E->layernorm_bwd(g_be, wy, x, w, mu, rs, dx, dw, db, n, d), DDP_OK);
    float *params[3] = {x, w, b}, *grads[3] = {dx, dw, db};
    int sizes[3] = {n * d, d, d};
    const float eps = 1e-2f;
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < sizes[t]; i++) {
            float keep = params[t][i];
            params[t][i] = keep + eps;
            E->layernorm_fwd(g_be, x, w, b, y, mu, rs, n, d);
            double up = objective(y, wy, n * d);
            params[t][i] = keep - eps;
            E->layernorm_fwd(g_be, x, w, b, y, mu, rs, n, d);
            double dn = objective(y, wy, n * d);
            params[t][i] = keep;
            check_fd(t == 0   ? "layernorm dx"
                     : t == 1 ? "layernorm dw"
                              : "layernorm db",
                     grads[t][i], (up - dn) / (2 * eps));
        }
}

static void attention_fd(const char *method, float p)
{
    setenv("MPIDDP_ATTENTION", method, 1);
    const ddp_enc_ops *E = g_be->enc;
    ddp_packing pk = packing();
    ddp_dropout dr = {.p = p, .key = 77};
    float qkv[R * 3 * DM], o[R * DM], lse[R * HEADS], wo[R * DM], dqkv[R * 3 * DM], ws[R * HEADS];
    uint64_t s = 5;
    for (int i = 0; i < R * 3 * DM; i++) qkv[i] = 1.5f * test_frand(&s);
    for (int i = 0; i < R * DM; i++) wo[i] = test_frand(&s);
    assert_int_equal(E->attention_fwd(g_be, qkv, 0, o, 0, lse, &pk, DM, HEADS, &dr), DDP_OK);
    assert_int_equal(E->attention_bwd(g_be, qkv, 0, o, 0, wo, 0, lse, dqkv, 0, ws, &pk, DM, HEADS, &dr), DDP_OK);
    const float eps = 1e-2f;
    for (int i = 0; i < R * 3 * DM; i++) {
        float keep = qkv[i];
        qkv[i] = keep + eps;
        E->attention_fwd(g_be, qkv, 0, o, 0, lse, &pk, DM, HEADS, &dr);
        double up = objective(o, wo, R * DM);
        qkv[i] = keep - eps;
        E->attention_fwd(g_be, qkv, 0, o, 0, lse, &pk, DM, HEADS, &dr);
        double dn = objective(o, wo, R * DM);
        qkv[i] = keep;
        char what[64];
        snprintf(what, sizeof what, "attention (%s, p=%.1f) dqkv[%d]", method, (double)p, i);
        check_fd(what, dqkv[i], (up - dn) / (2 * eps));
    }
    unsetenv("MPIDDP_ATTENTION");
}

static void test_attention_fd(void **state)
{
    (void)state;
    attention_fd("fused", 0.0f);
    attention_fd("gemm", 0.0f);
    attention_fd("tiled", 0.0f);
    attention_fd("fused", 0.3f);
    attention_fd("gemm", 0.3f);
    attention_fd("tiled", 0.3f);
}

/* the CPU methods compute the same attention (to float rounding) */
static void test_attention_methods_agree(void **state)
{
    (void)state;
    const ddp_enc_ops *E = g_be->enc;
    ddp_packing pk = packing();
    ddp_dropout dr = {.p = 0.2f, .key = 9};
    float qkv[R * 3 * DM], o[3][R * DM], lse[3][R * HEADS], dout[R * DM], dq[3][R * 3 * DM], ws[R * HEADS];
    uint64_t s = 8;
    for (int i = 0; i < R * 3 * DM; i++) qkv[i] = 2.0f * test_frand(&s);
    for (int i = 0; i < R * DM; i++) dout[i] = test_frand(&s);
    const char *methods[3] = {"fused", "gemm", "tiled"};
    for (int k = 0; k < 3; k++) {
        setenv("MPIDDP_ATTENTION", methods[k], 1);
        assert_int_equal(E->attention_fwd(g_be, qkv, 0, o[k], 0, lse[k], &pk, DM, HEADS, &dr), DDP_OK);
        assert_int_equal(E->attention_bwd(g_be, qkv, 0, o[k], 0, dout, 0, lse[k], dq[k], 0, ws, &pk, DM, HEADS, &dr),
                         DDP_OK);
    }
    unsetenv("MPIDDP_ATTENTION");
    for (int k = 1; k < 3; k++) {
        for (int i = 0; i < R * DM; i++) assert_true(fabsf(o[0][i] - o[k][i]) < 1e-5f);
        for (int i = 0; i < R * HEADS; i++) assert_true(fabsf(lse[0][i] - lse[k][i]) < 1e-5f);
        for (int i = 0; i < R * 3 * DM; i++) assert_true(fabsf(dq[0][i] - dq[k][i]) < 1e-4f);
    }
}

/* o stored in bf16 (o16, the model's with bf16 activations), every CPU method, with and without dropout: each value
 * the fp32 call's rounded once (nearest even), the same lse; the backward from it the bits of the backward given the
 * same rounded values in fp32; the backward's dq|dk|dv in bf16 (dqkv16): each the fp32 gradient rounded once; q|k|v
 * read in bf16 (qkv16): the bits of the same values given in fp32 */
static void test_attention_o16(void **state)
{
    (void)state;
    const ddp_enc_ops *E = g_be->enc;
    ddp_packing pk = packing();
    float qkv[R * 3 * DM], o[R * DM], orr[R * DM], lse[R * HEADS], l16[R * HEADS], dout[R * DM];
    float dq[R * 3 * DM], dq16[R * 3 * DM], ws[R * HEADS];
    ddp_bf16 o16[R * DM], g16[R * 3 * DM], q16[R * 3 * DM];
    float qr[R * 3 * DM];
    uint64_t s = 12;
    for (int i = 0; i < R * 3 * DM; i++) qkv[i] = 2.0f * test_frand(&s);
    for (int i = 0; i < R * DM; i++) dout[i] = test_frand(&s);
    const char *methods[3] = {"fused", "gemm", "tiled"};
    for (int k = 0; k < 6; k++) {
        ddp_dropout dr = {.p = k < 3 ? 0.0f : 0.2f, .key = 9};
        setenv("MPIDDP_ATTENTION", methods[k % 3], 1);
        assert_int_equal(E->attention_fwd(g_be, qkv, 0, o, 0, lse, &pk, DM, HEADS, &dr), DDP_OK);
        assert_int_equal(E->attention_fwd(g_be, qkv, 0, o16, 1, l16, &pk, DM, HEADS, &dr), DDP_OK);
        for (int i = 0; i < R * DM; i++) {
            if (o16[i] != ddp_bf16_bits(o[i]))
                fail_msg("%s p %.1f: o16[%d] 0x%04x, want %g rounded", methods[k % 3], (double)dr.p, i, o16[i],
                         (double)o[i]);
            orr[i] = ddp_bf16_widen(o16[i]);
        }
        assert_memory_equal(l16, lse, sizeof lse);
        assert_int_equal(E->attention_bwd(g_be, qkv, 0, o16, 1, dout, 0, lse, dq16, 0, ws, &pk, DM, HEADS, &dr),
                         DDP_OK);
        assert_int_equal(E->attention_bwd(g_be, qkv, 0, orr, 0, dout, 0, lse, dq, 0, ws, &pk, DM, HEADS, &dr), DDP_OK);
        assert_memory_equal(dq16, dq, sizeof dq);
        assert_int_equal(E->attention_bwd(g_be, qkv, 0, o16, 1, dout, 0, lse, g16, 1, ws, &pk, DM, HEADS, &dr), DDP_OK);
        for (int i = 0; i < R * 3 * DM; i++)
            if (g16[i] != ddp_bf16_bits(dq[i]))
                fail_msg("%s p %.1f: dqkv16[%d] 0x%04x, want %g rounded", methods[k % 3], (double)dr.p, i, g16[i],
                         (double)dq[i]);
        /* q|k|v given in bf16 (qkv16): the bits of the same values given in fp32 */
        for (int i = 0; i < R * 3 * DM; i++) q16[i] = ddp_bf16_bits(qkv[i]), qr[i] = ddp_bf16_widen(q16[i]);
        assert_int_equal(E->attention_fwd(g_be, q16, 1, o, 0, lse, &pk, DM, HEADS, &dr), DDP_OK);
        assert_int_equal(E->attention_fwd(g_be, qr, 0, orr, 0, l16, &pk, DM, HEADS, &dr), DDP_OK);
        assert_memory_equal(o, orr, sizeof o);
        assert_memory_equal(lse, l16, sizeof lse);
        assert_int_equal(E->attention_bwd(g_be, q16, 1, o, 0, dout, 0, lse, dq16, 0, ws, &pk, DM, HEADS, &dr), DDP_OK);
        assert_int_equal(E->attention_bwd(g_be, qr, 0, o, 0, dout, 0, lse, dq, 0, ws, &pk, DM, HEADS, &dr), DDP_OK);
        assert_memory_equal(dq16, dq, sizeof dq);
        /* dO given in bf16 (do16): delta and dq|dk|dv the bits of the same values given in fp32 */
        for (int i = 0; i < R * DM; i++) o16[i] = ddp_bf16_bits(dout[i]), orr[i] = ddp_bf16_widen(o16[i]);
        assert_int_equal(E->attention_bwd(g_be, qkv, 0, o, 0, o16, 1, lse, dq16, 0, ws, &pk, DM, HEADS, &dr), DDP_OK);
        memcpy(l16, ws, sizeof l16);
        assert_int_equal(E->attention_bwd(g_be, qkv, 0, o, 0, orr, 0, lse, dq, 0, ws, &pk, DM, HEADS, &dr), DDP_OK);
        assert_memory_equal(dq16, dq, sizeof dq);
        assert_memory_equal(l16, ws, sizeof l16);
    }
    unsetenv("MPIDDP_ATTENTION");
}

/* the tiled method (backend_cpu_attn.c: tiles of 32 query rows, keys and dh padded to 32, micro-kernel rows of 4)
 * against fused at lengths 1, 2, around every tile edge and long, dh 8..64, with and without dropout; each
 * sample's result alone equals its result inside the batch, bit for bit */
static float relerr(float a, float b) { return fabsf(a - b) / fmaxf(1.0f, fabsf(a)); }
static void test_attention_tiled_agree(void **state)
{
    (void)state;
    const ddp_enc_ops *E = g_be->enc;
    enum { NB = 13, HT = 2 };
    static const int64_t lens[NB] = {1, 2, 3, 4, 5, 31, 32, 33, 63, 64, 65, 100, 300};
    int64_t off[NB + 1] = {0}, seg[1024], sid[NB];
    for (int k = 0; k < NB; k++) {
        off[k + 1] = off[k] + lens[k], sid[k] = 100 + k;
        for (int64_t r = off[k]; r < off[k + 1]; r++) seg[r] = k;
    }
    int64_t Rt = off[NB];
    ddp_packing pk = {.B = NB, .R = Rt, .off = off, .seg = seg, .sid = sid, .hoff = off, .max_rows = 300};
    static const int dhs[5] = {8, 16, 24, 32, 64};
    for (int di = 0; di < 5; di++)
        for (int pd = 0; pd < 2; pd++) {
            int64_t dm = (int64_t)dhs[di] * HT;
            ddp_dropout dr = {.p = pd ? 0.2f : 0.0f, .key = 21};
            size_t nq = (size_t)(Rt * 3 * dm), no = (size_t)(Rt * dm), nl = (size_t)(Rt * HT);
            float *qkv = malloc(nq * sizeof *qkv), *dout = malloc(no * sizeof *dout), *ws = malloc(nl * sizeof *ws);
            float *o[2], *lse[2], *dq[2];
            for (int k = 0; k < 2; k++)
                o[k] = malloc(no * sizeof *o[k]), lse[k] = malloc(nl * sizeof *lse[k]),
                dq[k] = malloc(nq * sizeof *dq[k]);
            uint64_t s = 31 + (uint64_t)di;
            for (size_t i = 0; i < nq; i++) qkv[i] = 1.5f * test_frand(&s);
            for (size_t i = 0; i < no; i++) dout[i] = test_frand(&s);
            const char *methods[2] = {"fused", "tiled"};
            for (int k = 0; k < 2; k++) {
                setenv("MPIDDP_ATTENTION", methods[k], 1);
                assert_int_equal(E->attention_fwd(g_be, qkv, 0, o[k], 0, lse[k], &pk, dm, HT, &dr), DDP_OK);
                assert_int_equal(
                    E->attention_bwd(g_be, qkv, 0, o[k], 0, dout, 0, lse[k], dq[k], 0, ws, &pk, dm, HT, &dr), DDP_OK);
            }
            for (size_t i = 0; i < no; i++)
                if (!(relerr(o[0][i], o[1][i]) < 1e-5f))
                    fail_msg("tiled o[%zu] dh %d p %.1f: %g vs %g", i, dhs[di], (double)dr.p, (double)o[1][i],
                             (double)o[0][i]);
            for (size_t i = 0; i < nl; i++) assert_true(relerr(lse[0][i], lse[1][i]) < 1e-5f);
            for (size_t i = 0; i < nq; i++)
                if (!(relerr(dq[0][i], dq[1][i]) < 1e-4f))
                    fail_msg("tiled dqkv[%zu] dh %d p %.1f: %g vs %g", i, dhs[di], (double)dr.p, (double)dq[1][i],
                             (double)dq[0][i]);
            /* sample 11 alone (its rows moved to the front of a one-sample batch): the same bits */
            int64_t k1 = 11, n1 = lens[k1], off1[2] = {0, n1}, seg1[100] = {0};
            ddp_packing p1 = {.B = 1, .R = n1, .off = off1, .seg = seg1, .sid = &sid[k1], .hoff = off1, .max_rows = n1};
            float *o1 = malloc((size_t)(n1 * dm) * sizeof *o1), *l1 = malloc((size_t)(n1 * HT) * sizeof *l1);
            float *q1 = malloc((size_t)(n1 * 3 * dm) * sizeof *q1);
            assert_int_equal(E->attention_fwd(g_be, qkv + off[k1] * 3 * dm, 0, o1, 0, l1, &p1, dm, HT, &dr), DDP_OK);
            assert_int_equal(E->attention_bwd(g_be, qkv + off[k1] * 3 * dm, 0, o1, 0, dout + off[k1] * dm, 0, l1, q1, 0,
                                              ws, &p1, dm, HT, &dr),
                             DDP_OK);
            assert_memory_equal(o1, o[1] + off[k1] * dm, (size_t)(n1 * dm) * sizeof *o1);
            assert_memory_equal(l1, lse[1] + off[k1] * HT, (size_t)(n1 * HT) * sizeof *l1);
            assert_memory_equal(q1, dq[1] + off[k1] * 3 * dm, (size_t)(n1 * 3 * dm) * sizeof *q1);
            unsetenv("MPIDDP_ATTENTION");
            free(o1), free(l1), free(q1), free(qkv), free(dout), free(ws);
            for (int k = 0; k < 2; k++) free(o[k]), free(lse[k]), free(dq[k]);
        }
}

static void test_gelu_erf_fd(void **state)
{
    (void)state;
    const ddp_enc_ops *E = g_be->enc;
    ddp_packing pk = packing();
    ddp_dropout dr = {.p = 0.25f, .key = 3};
    float z[R * FF], bias[FF], a[R * FF], dg[R * FF], wa[R * FF], dz[R * FF], db[FF] = {0};
    uint64_t s = 12;
    for (int i = 0; i < R * FF; i++) z[i] = 3.0f * test_frand(&s), wa[i] = test_frand(&s);
    for (int i = 0; i < FF; i++) bias[i] = test_frand(&s);
    assert_int_equal(E->gelu_erf_fwd(g_be, z, bias, a, dg, &pk, FF, &dr), DDP_OK);
    assert_int_equal(E->gelu_erf_bwd(g_be, wa, dg, dz, db, &pk, FF, &dr), DDP_OK);
    int dropped = 0;
    for (int i = 0; i < R * FF; i++) dropped += a[i] == 0.0f;
    assert_true(dropped > 0 && dropped < R * FF / 2); /* p = 0.25 of 144 units */
    const float eps = 1e-2f;
    for (int i = 0; i < R * FF; i++) {
        float keep = z[i];
        z[i] = keep + eps;
        E->gelu_erf_fwd(g_be, z, bias, a, NULL, &pk, FF, &dr);
        double up = objective(a, wa, R * FF);
        z[i] = keep - eps;
        E->gelu_erf_fwd(g_be, z, bias, a, NULL, &pk, FF, &dr);
        double dn = objective(a, wa, R * FF);
        z[i] = keep;
        check_fd("gelu_erf dz", dz[i], (up - dn) / (2 * eps));
    }
}

/* ------------------------------------------------------------------ bf16 outputs and the fused residual + layernorm */
/* ------------------------------------------------------------------ whole model */
static ddp_model make_model(double dropout, int positions, int64_t maxR, int64_t maxB)
{
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER;
    c.dim = D, c.classes = C, c.hidden = DM, c.heads = HEADS, c.ff = FF, c.layers = 2, c.max_positions = 8;
    c.dropout = dropout, c.positions = positions, c.max_batch_rows = maxR, c.max_batch_samples = maxB;
    ddp_model m;
    assert_int_equal(ddp_transformer_create_on(g_be, &c, &m), DDP_OK);
    return m;
}

static ddp_batch make_batch(void)
{
    static uint8_t pad[NS];
    return (ddp_batch){.nsamples = NS,
                       .nrows = R,
                       .dim = D,
                       .offsets = OFF,
                       .labels = LAB,
                       .sample_ids = SID,
                       .is_pad = pad,
                       .x = X,
                       .step = 4};
}

/* the training loss (dropout on when the model has it) */
static double train_loss(ddp_model *m, const ddp_batch *b, const float *p, float *scratch_g)
{
    ddp_forward_out out = {0};
    assert_int_equal(m->train_step(m->self, b, p, scratch_g, &out, NULL, NULL), DDP_OK);
    return out.loss_sum;
}

static void whole_model_fd(double dropout)
{
    ddp_model m = make_model(dropout, 1, R, NS);
    int64_t n = ddp_model_num_params(&m);
    float *p = calloc((size_t)n, sizeof *p), *g = calloc((size_t)n, sizeof *g), *junk = calloc((size_t)n, sizeof *junk);
    assert_int_equal(m.init(m.self, p, 42), DDP_OK);
    uint64_t s = 9;
    for (int i = 0; i < R * D; i++) X[i] = 2.0f * test_frand(&s);
    for (int64_t i = 0; i < n; i++) p[i] += 0.1f * test_frand(&s); /* break the zero biases and unit norms */
    ddp_batch b = make_batch();
    train_loss(&m, &b, p, g);
    int64_t off = 0;
    for (int t = 0; t < m.ntensors; t++) {
        int64_t cnt = m.tensors[t].shape[0] * (m.tensors[t].ndim == 2 ? m.tensors[t].shape[1] : 1);
        for (int64_t k = 0; k < cnt; k += 1 + cnt / 7) { /* about 7 elements of every tensor */
            int64_t i = off + k;
            float keep = p[i];
            const float eps = 1e-2f;
            p[i] = keep + eps;
            double up = train_loss(&m, &b, p, junk);
            p[i] = keep - eps;
            double dn = train_loss(&m, &b, p, junk);
            p[i] = keep;
            char what[160];
            snprintf(what, sizeof what, "dropout %.1f: %s[%lld]", dropout, m.tensors[t].name, (long long)k);
            check_fd(what, g[i], (up - dn) / (2 * eps));
        }
        off += cnt;
    }
    assert_int_equal(off, n);
    free(p), free(g), free(junk);
    m.destroy(m.self);
}

static void test_whole_model_fd(void **state)
{
    (void)state;
    whole_model_fd(0.0);
    whole_model_fd(0.1);
}

/* attention never crosses samples and dropout masks depend only on (sample id, row): a batch's loss and
 * gradients are the sums of its samples' run one by one */
static void test_packing_equals_one_by_one(void **state)
{
    (void)state;
    ddp_model m = make_model(0.2, 1, R, NS);
    int64_t n = ddp_model_num_params(&m);
    float *p = calloc((size_t)n, sizeof *p), *g = calloc((size_t)n, sizeof *g), *g1 = calloc((size_t)n, sizeof *g1);
    assert_int_equal(m.init(m.self, p, 7), DDP_OK);
    uint64_t s = 1;
    for (int i = 0; i < R * D; i++) X[i] = 2.0f * test_frand(&s);
    ddp_batch b = make_batch();
    double whole = train_loss(&m, &b, p, g), sum = 0.0;
    for (int k = 0; k < NS; k++) {
        int64_t off1[2] = {0, OFF[k + 1] - OFF[k]};
        uint8_t pad = 0;
        ddp_batch one = {.nsamples = 1,
                         .nrows = off1[1],
                         .dim = D,
                         .offsets = off1,
                         .labels = &LAB[k],
                         .sample_ids = &SID[k],
                         .is_pad = &pad,
                         .x = X + OFF[k] * D,
                         .step = 4};
        sum += train_loss(&m, &one, p, g1);
    }
    assert_true(fabs(whole - sum) < 1e-5 * fmax(1.0, fabs(whole)));
    for (int64_t i = 0; i < n; i++) assert_true(fabsf(g[i] - g1[i]) < 1e-4f * fmaxf(1.0f, fabsf(g[i])));
    /* a different step draws different masks */
    b.step = 5;
    double other = train_loss(&m, &b, p, g1);
    assert_true(fabs(other - whole) > 1e-6);
    free(p), free(g), free(g1);
    m.destroy(m.self);
}

static void test_limits_and_init(void **state)
{
    (void)state;
    ddp_model m = make_model(0.0, 1, R, NS);
    int64_t n = ddp_model_num_params(&m);
    /* inp, pos, 2 x (in_proj, out_proj, linear1, linear2, 2 norms), final norm, head */
    int64_t want = DM * D + DM + 8 * DM +
                   2 * (3 * DM * DM + 3 * DM + DM * DM + DM + FF * DM + FF + DM * FF + DM + 4 * DM) + 2 * DM + C * DM +
                   C;
    assert_int_equal(n, want);
    assert_string_equal(m.tensors[2].name, "pos.weight");
    assert_string_equal(m.tensors[3].name, "enc.layers.0.self_attn.in_proj_weight");
    float *p = calloc((size_t)n, sizeof *p);
    assert_int_equal(m.init(m.self, p, 1), DDP_OK);
    /* norm weights 1, in_proj/out_proj biases 0, in_proj within the xavier bound */
    int64_t off = 0;
    for (int t = 0; t < m.ntensors; t++) {
        const char *nm = m.tensors[t].name;
        int64_t cnt = m.tensors[t].shape[0] * (m.tensors[t].ndim == 2 ? m.tensors[t].shape[1] : 1);
        for (int64_t k = 0; k < cnt; k++) {
            float v = p[off + k];
            if (strstr(nm, "norm") && strstr(nm, "weight")) assert_true(v == 1.0f);
            if (strstr(nm, "in_proj_bias") || strstr(nm, "out_proj.bias") || (strstr(nm, "norm") && strstr(nm, "bias")))
                assert_true(v == 0.0f);
            if (strstr(nm, "in_proj_weight")) assert_true(fabsf(v) <= sqrtf(6.0f / (4 * DM)));
        }
        off += cnt;
    }
    /* a sample longer than max_positions (8) is an error naming it */
    float x[9 * D] = {0};
    int64_t off9[2] = {0, 9}, lab = 0, sid = 5, idx = 33;
    uint8_t pad = 0;
    ddp_batch b = {.nsamples = 1,
                   .nrows = 9,
                   .dim = D,
                   .offsets = off9,
                   .labels = &lab,
                   .sample_ids = &sid,
                   .indices = &idx,
                   .is_pad = &pad,
                   .x = x};
    ddp_forward_out out = {0};
    /* named as the caller set it: ddp_model_config's field (C API), the CLI's option (ctx->cli_names) */
    assert_int_equal(m.eval_step(m.self, &b, p, &out), DDP_ERR_ARG);
    assert_non_null(
        strstr(ddp_last_error(), "sample 33 (id 5) has 9 rows, more than cfg.model_config->max_positions = 8"));
    g_be->cli_names = 1;
    assert_int_equal(m.eval_step(m.self, &b, p, &out), DDP_ERR_ARG);
    assert_non_null(strstr(ddp_last_error(), "sample 33 (id 5) has 9 rows, more than --max-positions 8"));
    g_be->cli_names = 0;
    free(p);
    m.destroy(m.self);
    /* heads must divide d */
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER, c.dim = D, c.classes = C, c.hidden = 10, c.heads = 4, c.max_batch_rows = 4,
    c.max_batch_samples = 2;
    assert_int_equal(ddp_transformer_create_on(g_be, &c, &m), DDP_ERR_ARG);
    assert_string_equal(ddp_last_error(),
                        "transformer: cfg.model_config->heads = 4 must divide cfg.model_config->hidden = 10");
    g_be->cli_names = 1;
    assert_int_equal(ddp_transformer_create_on(g_be, &c, &m), DDP_ERR_ARG);
    assert_string_equal(ddp_last_error(), "transformer: --heads 4 must divide --hidden 10");
    g_be->cli_names = 0;
}

/* The checks: central differences of the layernorm, attention (the three CPU methods, with and without dropout) and
 * FFN ops and of every parameter tensor of the whole model (dropout 0 and 0.1); packing (a batch's loss is the sum of
 * its samples run one at a time, with dropout on: masks depend on sample id and row, never on the batch); the
 * attention methods agree (tiled against fused at lengths around its tile sizes, dh 8..64); --max-positions is
 * enforced; init follows PyTorch's defaults (the bf16-storing and fused ops: test_transformer16.c). */
int main(void)
{
    if (ddp_backend_cpu_create(1, &g_be) != DDP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_fd),
        cmocka_unit_test(test_attention_fd),
        cmocka_unit_test(test_attention_methods_agree),
        cmocka_unit_test(test_attention_o16),
        cmocka_unit_test(test_attention_tiled_agree),
        cmocka_unit_test(test_gelu_erf_fd),
        cmocka_unit_test(test_whole_model_fd),
        cmocka_unit_test(test_packing_equals_one_by_one),
        cmocka_unit_test(test_limits_and_init),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    g_be->destroy(g_be);
    return rc;
}
