/* test_cuda_norm16.c — the bf16 forms of layernorm and gelu (layernorm_fwd16, layernorm_bwd16, gelu_erf_fwd16,
 * gelu_erf_bwd16, gelu_erf_fwd16z, gelu_erf_bwd16z) and the fused residual_layernorm_fwd (and its form of a bf16
 * branch, residual_layernorm_fwd16t) against the GPU's own fp32 ops, bit for bit (test cases of test_cuda_norm). */
#include "test_cuda_norm.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ bf16 outputs and the fused residual + layernorm */
/* The "16" ops and residual_layernorm_fwd against the GPU's own fp32 ops, bit for bit: a bf16 output is the fp32 op's
 * output rounded to nearest even (bf16_rne below, written here independently of the backends), an fp32 one the same
 * bits. Each comparison is exact; test_bf16_self_check shows it rejects a value one bf16 ulp off. */
static uint16_t bf16_rne(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)0x7fff; /* not in these tests' data */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* the first element where the bf16 bits g differ from the rounding of the fp32 values c, or -1 */
static int64_t bf16_mismatch(const uint16_t *g, const float *c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (g[i] != bf16_rne(c[i])) return i;
    return -1;
}
/* the bf16 device output d [n] is the rounding of the fp32 host values c, every bit */
static void expect_bf16_of(const char *what, const void *d, const float *c, int64_t n)
{
    uint16_t *g = malloc((size_t)(n > 0 ? n : 1) * 2);
    OK(gpu->download(gpu, g, d, (size_t)n * 2));
    int64_t at = bf16_mismatch(g, c, n);
    if (!(at < 0))
        fail_msg("%s: element %lld: bf16 0x%04x, the fp32 op's %.9g rounds to 0x%04x", what, (long long)at,
                 at < 0 ? 0 : g[at], at < 0 ? 0.0 : c[at], at < 0 ? 0 : bf16_rne(c[at]));
    free(g);
}
/* the fp32 device buffer d [n] holds the bits of the host values c */
static void expect_same_bits(const char *what, const float *d, const float *c, int64_t n)
{
    float *g = down(d, n);
    int64_t at = -1;
    for (int64_t i = 0; i < n && at < 0; i++)
        if (memcmp(&g[i], &c[i], 4)) at = i;
    if (!(at < 0))
        fail_msg("%s: element %lld: %.9g, want the bits of %.9g", what, (long long)at, at < 0 ? 0.0 : g[at],
                 at < 0 ? 0.0 : c[at]);
    free(g);
}
/* a device buffer of n bf16 (+8 spare, for the misaligned cases) */
static uint16_t *dev16(int64_t n)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, (size_t)(n + 8) * 2));
    return d;
}

/* layernorm_fwd16 at y offset m16 bf16 elements (0: aligned, 4: 8-byte aligned only, 1: 2-byte: the scalar path):
 * y the rounding of layernorm_fwd's y, mean and rstd its bits */
static void layernorm16_case(int64_t R, int64_t d, int64_t m16)
{
    char what[160];
    const int64_t n = R * d;
    float *x = test_rnd(n, 31 + d, 2.0f, 0.5f), *w = test_rnd(d, 32, 1.0f, 0.2f), *bb = test_rnd(d, 33, 1.0f, 0.0f);
    float *xg = dev(x, n), *wg = dev(w, d), *bg = dev(bb, d), *yg = dev(NULL, n), *mug = dev(NULL, R),
          *rsg = dev(NULL, R);
    float *mu2 = dev(NULL, R), *rs2 = dev(NULL, R);
    uint16_t *y16 = dev16(n);
    OK(G->layernorm_fwd(gpu, xg, wg, bg, yg, mug, rsg, R, d));
    OK(G->layernorm_fwd16(gpu, xg, wg, bg, y16 + m16, mu2, rs2, R, d));
    float *y = down(yg, n), *mu = down(mug, R), *rs = down(rsg, R);
    snprintf(what, sizeof what, "layernorm_fwd16 R %lld d %lld y at +%lld", (long long)R, (long long)d, (long long)m16);
    expect_bf16_of(what, y16 + m16, y, n);
    expect_same_bits("layernorm_fwd16 mean", mu2, mu, R);
    expect_same_bits("layernorm_fwd16 rstd", rs2, rs, R);
    free(x), free(w), free(bb), free(y), free(mu), free(rs);
    float *bufs[] = {xg, wg, bg, yg, mug, rsg, mu2, rs2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
    gpu->release(gpu, y16);
}

/* layernorm_bwd16 at dx16 offset m16 against layernorm_bwd from the same starting dx, dw, db (non-zero: they
 * accumulate): dx, dw, db the same bits, dx16 the rounding of dx after the add; on the GPU and on the CPU */
static void layernorm_bwd16_case(int64_t R, int64_t d, int64_t m16)
{
    char what[160];
    const int64_t n = R * d;
    float *x = test_rnd(n, 61 + d, 2.0f, 0.5f), *w = test_rnd(d, 62, 1.0f, 0.2f), *bb = test_rnd(d, 63, 1.0f, 0.0f),
          *dy = test_rnd(n, 64, 2.0f, -1.0f), *dx0 = test_rnd(n, 65, 1.0f, -0.5f), *dw0 = test_rnd(d, 66, 1.0f, 0.0f),
          *db0 = test_rnd(d, 67, 1.0f, 0.0f);
    float *xg = dev(x, n), *wg = dev(w, d), *bg = dev(bb, d), *yg = dev(NULL, n), *mug = dev(NULL, R),
          *rsg = dev(NULL, R), *dyg = dev(dy, n);
    float *dxg[2], *dwg[2], *dbg[2];
    for (int k = 0; k < 2; k++) dxg[k] = dev(dx0, n), dwg[k] = dev(dw0, d), dbg[k] = dev(db0, d);
    uint16_t *dx16 = dev16(n);
    OK(G->layernorm_fwd(gpu, xg, wg, bg, yg, mug, rsg, R, d));
    OK(G->layernorm_bwd(gpu, dyg, xg, wg, mug, rsg, dxg[0], dwg[0], dbg[0], R, d));
    OK(G->layernorm_bwd16(gpu, dyg, xg, wg, mug, rsg, dxg[1], (ddp_bf16 *)(dx16 + m16), dwg[1], dbg[1], R, d));
    float *dx = down(dxg[0], n), *dw = down(dwg[0], d), *db = down(dbg[0], d), *mu = down(mug, R), *rs = down(rsg, R);
    snprintf(what, sizeof what, "layernorm_bwd16 R %lld d %lld dx16 at +%lld", (long long)R, (long long)d,
             (long long)m16);
    expect_bf16_of(what, dx16 + m16, dx, n);
    expect_same_bits("layernorm_bwd16 dx", dxg[1], dx, n);
    expect_same_bits("layernorm_bwd16 dw", dwg[1], dw, d);
    expect_same_bits("layernorm_bwd16 db", dbg[1], db, d);
    /* the CPU's, from the GPU's statistics */
    float *cdx[2], *cdw[2], *cdb[2];
    uint16_t *c16 = malloc((size_t)(n > 0 ? n : 1) * 2);
    for (int k = 0; k < 2; k++) {
        cdx[k] = malloc((size_t)(n > 0 ? n : 1) * 4), cdw[k] = malloc((size_t)d * 4), cdb[k] = malloc((size_t)d * 4);
        memcpy(cdx[k], dx0, (size_t)n * 4), memcpy(cdw[k], dw0, (size_t)d * 4), memcpy(cdb[k], db0, (size_t)d * 4);
    }
    OK(C->layernorm_bwd(cpu, dy, x, w, mu, rs, cdx[0], cdw[0], cdb[0], R, d));
    OK(C->layernorm_bwd16(cpu, dy, x, w, mu, rs, cdx[1], (ddp_bf16 *)c16, cdw[1], cdb[1], R, d));
    int64_t at = bf16_mismatch(c16, cdx[0], n);
    if (!(at < 0) || memcmp(cdx[0], cdx[1], (size_t)n * 4) || memcmp(cdw[0], cdw[1], (size_t)d * 4) ||
        memcmp(cdb[0], cdb[1], (size_t)d * 4))
        fail_msg("cpu %s: not layernorm_bwd's bits and their rounding (first bf16 mismatch %lld)", what, (long long)at);
    for (int k = 0; k < 2; k++) free(cdx[k]), free(cdw[k]), free(cdb[k]);
    free(c16), free(x), free(w), free(bb), free(dy), free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db);
    free(mu), free(rs);
    float *bufs[] = {xg, wg, bg, yg, mug, rsg, dyg, dxg[0], dxg[1], dwg[0], dwg[1], dbg[0], dbg[1]};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
    gpu->release(gpu, dx16);
}

/* gelu_erf_fwd16: a the rounding of gelu_erf_fwd's a, with dgelu NULL, its own buffer, and z itself (the bits of
 * gelu_erf_fwd's dgelu); gelu_erf_bwd16: dz the rounding of gelu_erf_bwd's, dbias the same bits */
static void gelu16_case(int64_t R, int64_t cols, float p, int64_t m16)
{
    char what[160];
    packing pk;
    pack_rows(&pk, R);
    const int64_t n = R * cols;
    ddp_dropout dr = {p, 0x7654321ULL + (uint64_t)cols};
    float *z = test_rnd(n, 41, 3.0f, 0.0f), *bias = test_rnd(cols, 42, 1.0f, 0.0f);
    float *zg = dev(z, n), *biasg = dev(bias, cols), *ag = dev(NULL, n), *dgg = dev(NULL, n), *dg2 = dev(NULL, n);
    uint16_t *a16 = dev16(n);
    OK(G->gelu_erf_fwd(gpu, zg, biasg, ag, dgg, &pk.g, cols, &dr));
    float *a = down(ag, n), *dg = down(dgg, n);
    for (int mode = 0; mode < 3; mode++) { /* dgelu: NULL, its own buffer, z */
        OK(gpu->zero(gpu, a16, (size_t)(n + 8) * 2));
        float *dgo = mode == 0 ? NULL : mode == 1 ? dg2 : zg;
        OK(G->gelu_erf_fwd16(gpu, zg, biasg, a16 + m16, dgo, &pk.g, cols, &dr));
        snprintf(what, sizeof what, "gelu_erf_fwd16 R %lld cols %lld p %.1f dgelu %s a at +%lld", (long long)R,
                 (long long)cols, p,
                 mode == 0   ? "NULL"
                 : mode == 1 ? "own"
                             : "= z",
                 (long long)m16);
        expect_bf16_of(what, a16 + m16, a, n);
        if (dgo) expect_same_bits("gelu_erf_fwd16 dgelu", dgo, dg, n);
    }
    float *dact = test_rnd(n, 43, 2.0f, -1.0f), *db0 = test_rnd(cols, 44, 1.0f, 0.0f);
    float *dactg = dev(dact, n), *dbg = dev(db0, cols), *db16g = dev(db0, cols);
    OK(G->gelu_erf_bwd(gpu, dactg, dgg, dg2, dbg, &pk.g, cols, &dr));
    OK(gpu->zero(gpu, a16, (size_t)(n + 8) * 2));
    OK(G->gelu_erf_bwd16(gpu, dactg, dgg, a16 + m16, db16g, &pk.g, cols, &dr));
    float *dz = down(dg2, n), *dbv = down(dbg, cols);
    snprintf(what, sizeof what, "gelu_erf_bwd16 R %lld cols %lld p %.1f dz at +%lld", (long long)R, (long long)cols, p,
             (long long)m16);
    expect_bf16_of(what, a16 + m16, dz, n);
    expect_same_bits("gelu_erf_bwd16 dbias", db16g, dbv, cols);
    free(dact), free(db0), free(dz), free(dbv);
    gpu->release(gpu, dactg), gpu->release(gpu, dbg), gpu->release(gpu, db16g);
    pack_free(&pk);
    free(z), free(bias), free(a), free(dg);
    float *bufs[] = {zg, biasg, ag, dgg, dg2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
    gpu->release(gpu, a16);
}

/* n bf16 values at offset m16 of a device buffer: x's roundings, x replaced by those values widened (exactly) */
static uint16_t *dev16_of(float *x, int64_t n, int64_t m16)
{
    uint16_t *h = malloc((size_t)(n > 0 ? n : 1) * 2), *d = dev16(n);
    for (int64_t i = 0; i < n; i++) {
        h[i] = bf16_rne(x[i]);
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&x[i], &u, 4);
    }
    if (n > 0) OK(gpu->upload(gpu, d + m16, h, (size_t)n * 2));
    free(h);
    return d;
}

/* gelu_erf_fwd16z and gelu_erf_bwd16z on a bf16 z and (the backward) a bf16 dact, at offset m16 like the outputs,
 * against gelu_erf_fwd and gelu_erf_bwd of their fp32 widenings (exact) with a zero bias: a and dz the roundings of
 * their a and dz, dbias the same bits (gelu' recomputed from z is the dgelu gelu_erf_fwd kept) */
static void gelu16z_case(int64_t R, int64_t cols, float p, int64_t m16)
{
    char what[160];
    packing pk;
    pack_rows(&pk, R);
    const int64_t n = R * cols;
    ddp_dropout dr = {p, 0x1234567ULL + (uint64_t)cols};
    float *z = test_rnd(n, 45, 3.0f, 0.0f), *zero = calloc((size_t)cols + 1, sizeof(float));
    uint16_t *z16 = dev16_of(z, n, m16), *out16 = dev16(n);
    float *zg = dev(z, n), *biasg = dev(zero, cols), *ag = dev(NULL, n), *dgg = dev(NULL, n), *dzg = dev(NULL, n);
    OK(G->gelu_erf_fwd(gpu, zg, biasg, ag, dgg, &pk.g, cols, &dr));
    OK(gpu->zero(gpu, out16, (size_t)(n + 8) * 2));
    OK(G->gelu_erf_fwd16z(gpu, (const ddp_bf16 *)(z16 + m16), (ddp_bf16 *)(out16 + m16), &pk.g, cols, &dr));
    float *a = down(ag, n);
    snprintf(what, sizeof what, "gelu_erf_fwd16z R %lld cols %lld p %.1f at +%lld", (long long)R, (long long)cols, p,
             (long long)m16);
    expect_bf16_of(what, out16 + m16, a, n);
    float *dact = test_rnd(n, 46, 2.0f, -1.0f), *db0 = test_rnd(cols, 47, 1.0f, 0.0f);
    uint16_t *dact16 = dev16_of(dact, n, m16);
    float *dactg = dev(dact, n), *dbg = dev(db0, cols), *db16g = dev(db0, cols);
    OK(G->gelu_erf_bwd(gpu, dactg, dgg, dzg, dbg, &pk.g, cols, &dr));
    OK(gpu->zero(gpu, out16, (size_t)(n + 8) * 2));
    OK(G->gelu_erf_bwd16z(gpu, (const ddp_bf16 *)(dact16 + m16), (const ddp_bf16 *)(z16 + m16),
                          (ddp_bf16 *)(out16 + m16), db16g, &pk.g, cols, &dr));
    float *dz = down(dzg, n), *dbv = down(dbg, cols);
    snprintf(what, sizeof what, "gelu_erf_bwd16z R %lld cols %lld p %.1f at +%lld", (long long)R, (long long)cols, p,
             (long long)m16);
    expect_bf16_of(what, out16 + m16, dz, n);
    expect_same_bits("gelu_erf_bwd16z dbias", db16g, dbv, cols);
    free(z), free(zero), free(a), free(dact), free(db0), free(dz), free(dbv);
    float *bufs[] = {zg, biasg, ag, dgg, dzg, dactg, dbg, db16g};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
    gpu->release(gpu, z16), gpu->release(gpu, out16), gpu->release(gpu, dact16);
    pack_free(&pk);
}

/* residual_layernorm_fwd against residual_fwd then layernorm_fwd on the GPU: out, y (fp32, or bf16 at y16 = 1), mean
 * and rstd the same bits; out in its own buffer, then in place (out = h). t16: residual_layernorm_fwd16t of a bf16 t
 * (at its own offset: 8-byte aligned where y is 16-byte aligned, 2-byte where y is 8-byte, else 16) against those ops
 * given its widened values and a zero bias */
static void residual_layernorm_case(int64_t R, int64_t d, float p, int y16, int64_t m16, int t16)
{
    char what[200];
    packing pk;
    pack_rows(&pk, R);
    const int64_t n = R * d, mt = m16 == 0 ? 4 : m16 == 4 ? 1 : 0;
    ddp_dropout dr = {p, 0xabcdefULL + (uint64_t)d};
    float *h = test_rnd(n, 51 + d, 1.0f, 0.3f), *t = test_rnd(n, 52, 1.0f, 0.0f), *tb = test_rnd(d, 53, 0.5f, 0.0f);
    float *w = test_rnd(d, 54, 1.0f, 0.2f), *lb = test_rnd(d, 55, 1.0f, 0.0f);
    uint16_t *t16g = t16 ? dev16_of(t, n, mt) : NULL; /* t becomes the widened bf16 values */
    if (t16) memset(tb, 0, (size_t)d * sizeof *tb);
    float *hg = dev(h, n), *tg = dev(t, n), *tbg = dev(tb, d), *wg = dev(w, d), *lbg = dev(lb, d), *outg = dev(NULL, n);
    float *yg = dev(NULL, n), *mug = dev(NULL, R), *rsg = dev(NULL, R), *y2 = dev(NULL, n), *mu2 = dev(NULL, R),
          *rs2 = dev(NULL, R);
    uint16_t *y16g = dev16(n);
    OK(G->residual_fwd(gpu, outg, hg, tg, tbg, &pk.g, d, &dr));
    OK(G->layernorm_fwd(gpu, outg, wg, lbg, yg, mug, rsg, R, d));
    float *out = down(outg, n), *y = down(yg, n), *mu = down(mug, R), *rs = down(rsg, R);
    void *yo = y16 ? (void *)(y16g + m16) : (void *)y2;
    for (int inplace = 0; inplace < 2; inplace++) {
        snprintf(what, sizeof what, "residual_layernorm_fwd%s R %lld d %lld p %.1f y%s%s", t16 ? "16t" : "",
                 (long long)R, (long long)d, p, y16 ? " bf16" : " fp32", inplace ? " out = h" : "");
        OK(gpu->zero(gpu, outg, (size_t)n * 4));
        OK(gpu->zero(gpu, y16 ? (void *)y16g : (void *)y2, (size_t)n * (y16 ? 2 : 4)));
        float *o = inplace ? hg : outg;
        if (t16)
            OK(G->residual_layernorm_fwd16t(gpu, o, hg, (const ddp_bf16 *)(t16g + mt), &pk.g, d, &dr, wg, lbg, yo, y16,
                                            mu2, rs2));
        else
            OK(G->residual_layernorm_fwd(gpu, o, hg, tg, tbg, &pk.g, d, &dr, wg, lbg, yo, y16, mu2, rs2));
        char nm[240];
#define NAME(s) (snprintf(nm, sizeof nm, "%s %s", what, (s)), nm)
        expect_same_bits(NAME("out"), o, out, n);
        if (y16)
            expect_bf16_of(NAME("y"), yo, y, n);
        else
            expect_same_bits(NAME("y"), yo, y, n);
        expect_same_bits(NAME("mean"), mu2, mu, R);
        expect_same_bits(NAME("rstd"), rs2, rs, R);
#undef NAME
    }
    pack_free(&pk);
    free(h), free(t), free(tb), free(w), free(lb), free(out), free(y), free(mu), free(rs);
    float *bufs[] = {hg, tg, tbg, wg, lbg, outg, yg, mug, rsg, y2, mu2, rs2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
    gpu->release(gpu, y16g);
    if (t16g) gpu->release(gpu, t16g);
}

/* the exact comparisons reject one bf16 ulp (and one fp32 ulp) */
void test_bf16_self_check(void **state)
{
    (void)state;
    const float c[3] = {1.0f, -2.5f, 0.1f};
    uint16_t g[3] = {bf16_rne(c[0]), bf16_rne(c[1]), bf16_rne(c[2])};
    if (!(bf16_mismatch(g, c, 3) < 0)) fail_msg("bf16_rne disagrees with itself");
    g[2]++;
    if (bf16_mismatch(g, c, 3) != 2) fail_msg("the bf16 comparison accepted an element one ulp off");
    if (!(bf16_rne(1.00390625f) == 0x3f80 && bf16_rne(1.01171875f) == 0x3f82 && bf16_rne(0x1.010002p0f) == 0x3f81))
        fail_msg("bf16_rne is not round to nearest even");
}

/* the bf16 outputs and the fused residual + layernorm: d through every path (partial block, float4, scalar, past the
 * registers and the shared row), R from 0, outputs 16-, 8- and 2-byte aligned (m16 0, 4, 1 bf16 elements) */
static const int64_t ds16[] = {4, 6, 64, 768, 770, 1028, 1030}, Rs16[] = {0, 1, 7, 300};
static int64_t m16_of(size_t i, size_t j) { return (int64_t)((i + j) % 3 == 2 ? 1 : (i + j) % 3 == 1 ? 4 : 0); }
void test_layernorm16(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ds16 / sizeof *ds16; i++)
        for (size_t j = 0; j < sizeof Rs16 / sizeof *Rs16; j++) {
            layernorm16_case(Rs16[j], ds16[i], m16_of(i, j));
            layernorm_bwd16_case(Rs16[j], ds16[i], m16_of(i, j));
        }
    layernorm16_case(3, 64, 1);
    layernorm16_case(3, 64, 4);
    layernorm_bwd16_case(3, 64, 1);
    layernorm_bwd16_case(3, 64, 4);
}
void test_gelu16(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ds16 / sizeof *ds16; i++)
        for (size_t j = 0; j < sizeof Rs16 / sizeof *Rs16; j++) {
            gelu16_case(Rs16[j], ds16[i], 0.0f, m16_of(i, j));
            gelu16_case(Rs16[j], ds16[i], 0.2f, 0);
            gelu16z_case(Rs16[j], ds16[i], 0.0f, m16_of(i, j));
            gelu16z_case(Rs16[j], ds16[i], 0.2f, 0);
        }
    gelu16_case(3, 64, 0.2f, 1);
    gelu16z_case(3, 64, 0.2f, 1);
    gelu16z_case(3, 64, 0.2f, 4);
}
void test_residual_layernorm(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ds16 / sizeof *ds16; i++)
        for (size_t j = 0; j < sizeof Rs16 / sizeof *Rs16; j++)
            for (int y16 = 0; y16 < 2; y16++)
                for (int t16 = 0; t16 < 2; t16++) {
                    residual_layernorm_case(Rs16[j], ds16[i], 0.0f, y16, m16_of(i, j), t16);
                    residual_layernorm_case(Rs16[j], ds16[i], 0.2f, y16, 0, t16);
                }
    residual_layernorm_case(3, 64, 0.2f, 1, 1, 0);
    residual_layernorm_case(3, 64, 0.2f, 1, 1, 1);
    residual_layernorm_case(3, 64, 0.2f, 0, 4, 1);
}
