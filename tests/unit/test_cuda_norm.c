/* test_cuda_norm.c — the CUDA backend's layernorm (backend_cuda_norm.cu) and element-wise encoder ops
 * (backend_cuda_enc.cu) against the CPU backend within derived rounding bounds; their bf16 and fused forms are
 * test_cuda_norm16.c's (helpers: test_cuda_norm.h). */
#include "test_cuda_norm.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "cuda_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define U (1.0 / 16777216.0) /* fp32 unit roundoff, 2^-24 */

ddp_backend *cpu, *gpu;
const ddp_enc_ops *C, *G;

/* Tolerances, per element, in units of u = 2^-24 (fp32 rounding) times the sum of the magnitudes the result
 * is computed from:
 *   - element-wise results (embedding, gelu, dropout, residual, pooling backward, layernorm y, mean, rstd) are
 *     the same expressions on both sides (kern_enc.h; the forward statistics are summed in the CPU's order):
 *     8u x magnitude (a few roundings; the plugin compiles these kernels without FMA, so on a GPU they are
 *     usually the CPU's bits, and the layernorm's mean and rstd must be); gelu through erfc, 2 (x^2 + 36) u of
 *     gelu and of each term of gelu' (its exponent's rounding; gelu' cancels near x = -0.75), carried into
 *     gelu_erf_bwd; dropout masks are compared exactly (an element is zero on the GPU iff on the CPU, and the
 *     kept fraction is about 1 - p);
 *   - a sum of n fp32 terms in any order is within (n - 1) u sum|t| of the exact sum, so two sums in different
 *     orders (CPU: row order; GPU: chunks, then the chunk sums) differ by at most 2(n + 2) u sum|t|: dw, db,
 *     dbias (n = R), mean pooling (n = rows of the sample); layernorm dx, whose two row sums (n = d) run as a
 *     tree on the GPU, gets 2(d + 2) u (sum|dy w| + |xhat| sum|dy w xhat|) / d x rstd plus 8u for its own
 *     expression.
 * A self-check perturbs one result by 1e-3 relative and expects the comparison to reject it. */

/* the largest |g - c| / bound[i] (a NaN counts as largest), its element and its error */
static double worst_ratio(const float *g, const float *c, const double *bound, int64_t n, int64_t *at, double *werr)
{
    double worst = 0;
    *at = 0, *werr = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)g[i] - c[i]), q = e / (bound[i] + 1e-300);
        if (!(q <= worst)) worst = q, *at = i, *werr = e;
    }
    return worst;
}
/* |g - c| <= bound[i] for every i (bound: the derived tolerance of element i); with TEST_CUDA_NORM_VERBOSE set,
 * prints the largest error and its ratio to the bound; returns the ratio. */
static double expect_within(const char *what, const float *g, const float *c, const double *bound, int64_t n)
{
    int64_t at;
    double werr, worst = worst_ratio(g, c, bound, n, &at, &werr);
    if (!(worst <= 1.0))
        fail_msg("%s: element %lld: cuda %.9g vs cpu %.9g (error %.3g, %.3g x its bound %.3g)", what, (long long)at,
                 n ? g[at] : 0.0, n ? c[at] : 0.0, werr, worst, n ? bound[at] : 0.0);
    if (getenv("TEST_CUDA_NORM_VERBOSE")) printf("  %-34s max err %.3g (%.3f of bound)\n", what, werr, worst);
    return worst;
}
static double expect_dev_within(const char *what, const float *d, const float *c, const double *bound, int64_t n)
{
    float *h = down(d, n);
    double w = expect_within(what, h, c, bound, n);
    free(h);
    return w;
}
static double *scaled(const double *m, int64_t n, double k)
{
    double *b = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    for (int64_t i = 0; i < n; i++) b[i] = k * m[i] + 1e-30;
    return b;
}
static double worst_seen; /* the largest error-to-bound ratio of any check */
#define WITHIN(what, d, c, mag, n, k)                             \
    do {                                                          \
        double *b_ = scaled((mag), (n), (k));                     \
        double w_ = expect_dev_within((what), (d), (c), b_, (n)); \
        if (w_ > worst_seen) worst_seen = w_;                     \
        free(b_);                                                 \
    } while (0)

/* ------------------------------------------------------------------ layernorm */
static void layernorm_case(int64_t R, int64_t d, int misalign)
{
    char what[160];
    const int64_t n = R * d, m = misalign; /* m: device pointers one float past alignment */
    float *x = test_rnd(n, 11 + d, 2.0f, 0.5f), *w = test_rnd(d, 12, 1.0f, 0.2f), *bb = test_rnd(d, 13, 1.0f, 0.0f);
    float *dy = test_rnd(n, 14, 1.0f, 0.0f), *dx = test_rnd(n, 15, 1.0f, 0.0f), *dw = test_rnd(d, 16, 1.0f, 0.0f),
          *db = test_rnd(d, 17, 1.0f, 0.0f);
    float *y = malloc((size_t)n * 4), *mu = malloc((size_t)R * 4), *rs = malloc((size_t)R * 4);
    float *xg = dev(NULL, n), *wg = dev(NULL, d), *bg = dev(NULL, d), *yg = dev(NULL, n), *mug = dev(NULL, R),
          *rsg = dev(NULL, R);
    float *dyg = dev(NULL, n), *dxg = dev(NULL, n), *dwg = dev(dw, d), *dbg = dev(db, d);
    OK(gpu->upload(gpu, xg + m, x, (size_t)n * 4));
    OK(gpu->upload(gpu, wg + m, w, (size_t)d * 4));
    OK(gpu->upload(gpu, bg + m, bb, (size_t)d * 4));
    OK(gpu->upload(gpu, dyg + m, dy, (size_t)n * 4));
    OK(gpu->upload(gpu, dxg + m, dx, (size_t)n * 4));
    OK(C->layernorm_fwd(cpu, x, w, bb, y, mu, rs, R, d));
    OK(G->layernorm_fwd(gpu, xg + m, wg + m, bg + m, yg + m, mug, rsg, R, d));
    /* magnitudes: y from |xhat w| + |b|; dx from its sums; dw, db from their terms */
    double *my = dzero(n), *mdx = dzero(n), *mdw = dzero(d), *mdb = dzero(d), *mmu = dzero(R), *mrs = dzero(R);
    for (int64_t r = 0; r < R; r++) {
        double sg = 0, sgx = 0, ag = 0, agx = 0;
        mmu[r] = fabs(mu[r]), mrs[r] = rs[r];
        for (int64_t c = 0; c < d; c++) {
            double xh = ((double)x[r * d + c] - mu[r]) * rs[r], g = (double)dy[r * d + c] * w[c];
            my[r * d + c] = fabs(xh * w[c]) + fabs(bb[c]);
            sg += g, sgx += g * xh, ag += fabs(g), agx += fabs(g * xh);
            mdw[c] += fabs(dy[r * d + c] * xh), mdb[c] += fabs(dy[r * d + c]);
        }
        for (int64_t c = 0; c < d; c++) {
            double xh = fabs(((double)x[r * d + c] - mu[r]) * rs[r]), g = fabs((double)dy[r * d + c] * w[c]);
            /* the sums' error (2(d + 2) u each, divided by d) and the expression's own roundings */
            mdx[r * d + c] = rs[r] *
                                 (2.0 * (d + 2) * (ag + xh * agx) / d + 8.0 * (g + fabs(sg) / d + xh * fabs(sgx) / d)) +
                             8.0 * fabs(dx[r * d + c]);
        }
    }
    snprintf(what, sizeof what, "layernorm y R %lld d %lld%s", (long long)R, (long long)d, m ? " misaligned" : "");
    WITHIN(what, yg + m, y, my, n, 8 * U);
    WITHIN("layernorm mean", mug, mu, mmu, R, 8 * U);
    WITHIN("layernorm rstd", rsg, rs, mrs, R, 8 * U);
    { /* the statistics are the CPU's additions in the CPU's order (16 lanes, one fold): the same bits */
        float *gm = down(mug, R), *gr = down(rsg, R);
        for (int64_t r = 0; r < R; r++)
            if (memcmp(&gm[r], &mu[r], 4) || memcmp(&gr[r], &rs[r], 4))
                fail_msg("layernorm R %lld d %lld row %lld: mean %.9g rstd %.9g, the CPU's %.9g %.9g", (long long)R,
                         (long long)d, (long long)r, gm[r], gr[r], mu[r], rs[r]);
        free(gm), free(gr);
    }
    /* backward twice: dx, dw and db accumulate (+=) onto their non-zero starting values */
    for (int k = 0; k < 2; k++) {
        OK(C->layernorm_bwd(cpu, dy, x, w, mu, rs, dx, dw, db, R, d));
        OK(G->layernorm_bwd(gpu, dyg + m, xg + m, wg + m, mug, rsg, dxg + m, dwg, dbg, R, d));
    }
    for (int64_t c = 0; c < d; c++) mdw[c] = 2 * mdw[c] + fabs(dw[c]), mdb[c] = 2 * mdb[c] + fabs(db[c]);
    for (int64_t i = 0; i < n; i++) mdx[i] *= 2;
    snprintf(what, sizeof what, "layernorm dx R %lld d %lld", (long long)R, (long long)d);
    WITHIN(what, dxg + m, dx, mdx, n, U);
    snprintf(what, sizeof what, "layernorm dw R %lld d %lld", (long long)R, (long long)d);
    WITHIN(what, dwg, dw, mdw, d, 2.0 * (2 * R + 2) * U);
    snprintf(what, sizeof what, "layernorm db R %lld d %lld", (long long)R, (long long)d);
    WITHIN(what, dbg, db, mdb, d, 2.0 * (2 * R + 2) * U);
    /* determinism: the same inputs again give the same bits (dw, db from zero; y) */
    float *dw1 = NULL, *dw2 = NULL, *y1 = down(yg + m, n);
    for (int k = 0; k < 2; k++) {
        OK(gpu->zero(gpu, dwg, (size_t)d * 4));
        OK(gpu->zero(gpu, dbg, (size_t)d * 4));
        OK(G->layernorm_fwd(gpu, xg + m, wg + m, bg + m, yg + m, mug, rsg, R, d));
        OK(G->layernorm_bwd(gpu, dyg + m, xg + m, wg + m, mug, rsg, dxg + m, dwg, dbg, R, d));
        float *a = down(dwg, d), *b = down(dbg, d);
        a = realloc(a, (size_t)2 * d * 4);
        memcpy(a + d, b, (size_t)d * 4);
        free(b);
        *(k ? &dw2 : &dw1) = a;
    }
    float *y2 = down(yg + m, n);
    if (memcmp(dw1, dw2, (size_t)2 * d * 4))
        fail_msg("layernorm dw/db R %lld d %lld: two runs differ", (long long)R, (long long)d);
    if (memcmp(y1, y2, (size_t)n * 4))
        fail_msg("layernorm y R %lld d %lld: two runs differ", (long long)R, (long long)d);
    free(dw1), free(dw2), free(y1), free(y2);
    free(x), free(w), free(bb), free(dy), free(dx), free(dw), free(db), free(y), free(mu), free(rs);
    free(my), free(mdx), free(mdw), free(mdb), free(mmu), free(mrs);
    float *bufs[] = {xg, wg, bg, yg, mug, rsg, dyg, dxg, dwg, dbg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
}

/* ------------------------------------------------------------------ element-wise */
/* dropout masks: zero on the GPU exactly where on the CPU; returns the number of zeros */
static int64_t expect_same_mask(const char *what, const float *d, const float *c, int64_t n)
{
    float *g = down(d, n);
    int64_t diff = 0, zeros = 0, at = -1;
    for (int64_t i = 0; i < n; i++) {
        zeros += c[i] == 0.0f;
        if ((g[i] == 0.0f) != (c[i] == 0.0f)) diff++, at = at < 0 ? i : at;
    }
    if (diff != 0)
        fail_msg("%s: %lld elements dropped on one side only (first %lld)", what, (long long)diff, (long long)at);
    free(g);
    return zeros;
}

static void elementwise_case(int64_t R, int64_t d, float p)
{
    char what[160];
    packing pk;
    pack_rows(&pk, R);
    const int64_t n = R * d, B = pk.h.B, mx = pk.h.max_rows;
    ddp_dropout dr = {p, 0x1234567ULL + (uint64_t)d};
    float *h = test_rnd(n, 21, 1.0f, 0.0f), *bias = test_rnd(d, 22, 1.0f, 0.0f),
          *pos = test_rnd(mx * d, 23, 1.0f, 0.0f);
    float *z = test_rnd(n, 24, 3.0f, 0.0f), *t = test_rnd(n, 25, 1.0f, 0.0f), *dact = test_rnd(n, 26, 1.0f, 0.0f);
    float *dbias = test_rnd(d, 27, 1.0f, 0.0f), *dp = test_rnd(B * d, 28, 1.0f, 0.0f);
    float *a = malloc((size_t)n * 4), *dg = malloc((size_t)n * 4), *out = malloc((size_t)n * 4),
          *dz = malloc((size_t)n * 4);
    float *pool = malloc((size_t)B * d * 4);
    float *hg = dev(h, n), *biasg = dev(bias, d), *posg = dev(pos, mx * d), *zg = dev(z, n), *tg = dev(t, n);
    float *dactg = dev(dact, n), *dbiasg = dev(dbias, d), *dpg = dev(dp, B * d), *ag = dev(NULL, n),
          *dgg = dev(NULL, n);
    float *outg = dev(NULL, n), *dzg = dev(NULL, n), *poolg = dev(NULL, B * d);
    double *mag = dzero(n), *mcol = dzero(d), *mpool = dzero(B * d);
    snprintf(what, sizeof what, " R %lld d %lld p %.1f", (long long)R, (long long)d, p);
    char nm[200];
#define NAME(s) (snprintf(nm, sizeof nm, "%s%s", (s), what), nm)
    /* embedding (positions, then none) */
    OK(C->embed_fwd(cpu, h, bias, pos, &pk.h, d));
    OK(G->embed_fwd(gpu, hg, biasg, posg, &pk.g, d));
    OK(C->embed_fwd(cpu, h, bias, NULL, &pk.h, d));
    OK(G->embed_fwd(gpu, hg, biasg, NULL, &pk.g, d));
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < d; c++)
            mag[r * d + c] = fabs(h[r * d + c]) + 2 * fabs(bias[c]) + fabs(pos[(r - pk.t.off[pk.t.seg[r]]) * d + c]);
    WITHIN(NAME("embed_fwd"), hg, h, mag, n, 8 * U);
    /* bias + gelu + dropout, gelu' kept */
    OK(C->gelu_erf_fwd(cpu, z, bias, a, dg, &pk.h, d, &dr));
    OK(G->gelu_erf_fwd(gpu, zg, biasg, ag, dgg, &pk.g, d, &dr));
    /* gelu through ddp_erfcf: erfc(w) = t exp(-w^2 + P(t)), so an FMA or a rounding in the exponent's argument
     * (about w^2 + 30 u in absolute terms) is a relative error of Phi; x Phi is then within (x^2 + 36) u of
     * itself on each side. gelu' = Phi + x phi cancels near x = -0.75: its bound is in the terms' sizes. */
    double *mdg = dzero(n);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < d; c++) {
            double x = (double)z[r * d + c] + bias[c], cdf = 0.5 * erfc(-x / sqrt(2.0)),
                   xphi = fabs(x * 0.3989422804014327 * exp(-0.5 * x * x));
            mag[r * d + c] = fabs(a[r * d + c]) * (x * x + 36) / 4 + 1e-6;
            mdg[r * d + c] = ((x * x + 36) * cdf + (x * x / 2 + 6) * xphi) / 4 + 1e-6;
        }
    WITHIN(NAME("gelu_erf_fwd a"), ag, a, mag, n, 8 * U);
    WITHIN(NAME("gelu_erf_fwd dgelu"), dgg, dg, mdg, n, 8 * U);
    int64_t zeros = expect_same_mask(NAME("gelu_erf_fwd mask"), ag, a, n);
    if (p > 0 && n >= 10000)
        if (!(fabs((double)zeros / n - p) < 0.02))
            fail_msg("%s: dropped %.4f of the elements, p %.2f", NAME("gelu mask"), (double)zeros / n, p);
    /* its backward: dz = drop(dact) * dgelu, dbias += column sums; twice (accumulates) */
    for (int k = 0; k < 2; k++) {
        OK(C->gelu_erf_bwd(cpu, dact, dg, dz, dbias, &pk.h, d, &dr));
        OK(G->gelu_erf_bwd(gpu, dactg, dgg, dzg, dbiasg, &pk.g, d, &dr));
    }
    /* dz = drop(dact) gelu' with each side's own gelu': the difference above, times |drop(dact)| = |dz / gelu'| */
    for (int64_t i = 0; i < n; i++) mag[i] = fabs(dz[i]) + (dg[i] != 0.0f ? fabs(dz[i] / dg[i]) * mdg[i] : 0.0);
    WITHIN(NAME("gelu_erf_bwd dz"), dzg, dz, mag, n, 8 * U);
    expect_same_mask(NAME("gelu_erf_bwd mask"), dzg, dz, n);
    memset(mcol, 0, (size_t)d * 8);
    for (int64_t i = 0; i < n; i++) /* twice: both passes, each carrying dz's own difference */
        mcol[i % d] += 2 * fabs(dz[i]) +
                       2 * (dg[i] != 0.0f ? fabs(dz[i] / dg[i]) * mdg[i] : 0.0) * 8.0 / (2.0 * (2 * R + 2));
    for (int64_t c = 0; c < d; c++) mcol[c] += fabs(dbias[c]);
    free(mdg);
    WITHIN(NAME("gelu_erf_bwd dbias"), dbiasg, dbias, mcol, d, 2.0 * (2 * R + 2) * U);
    /* residual forward (in place: out = h) and backward */
    OK(C->residual_fwd(cpu, out, h, t, bias, &pk.h, d, &dr));
    OK(G->residual_fwd(gpu, outg, hg, tg, biasg, &pk.g, d, &dr));
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < d; c++) mag[r * d + c] = fabs(h[r * d + c]) + 2 * (fabs(t[r * d + c]) + fabs(bias[c]));
    WITHIN(NAME("residual_fwd"), outg, out, mag, n, 8 * U);
    OK(C->residual_fwd(cpu, h, h, t, bias, &pk.h, d, &dr));
    OK(G->residual_fwd(gpu, hg, hg, tg, biasg, &pk.g, d, &dr));
    WITHIN(NAME("residual_fwd in place"), hg, h, mag, n, 8 * U);
    OK(C->residual_bwd(cpu, dact, dz, dbias, &pk.h, d, &dr));
    OK(G->residual_bwd(gpu, dactg, dzg, dbiasg, &pk.g, d, &dr));
    for (int64_t i = 0; i < n; i++) mag[i] = fabs(dz[i]);
    WITHIN(NAME("residual_bwd dt"), dzg, dz, mag, n, 8 * U);
    expect_same_mask(NAME("residual_bwd mask"), dzg, dz, n);
    for (int64_t i = 0; i < n; i++) mcol[i % d] += fabs(dz[i]);
    WITHIN(NAME("residual_bwd dbias"), dbiasg, dbias, mcol, d, 2.0 * (3 * R + 2) * U);
    /* determinism of the fused backward: dbias from zero twice, the same bits */
    float *r1 = NULL;
    for (int k = 0; k < 2; k++) {
        OK(gpu->zero(gpu, dbiasg, (size_t)d * 4));
        OK(G->gelu_erf_bwd(gpu, dactg, dgg, dzg, dbiasg, &pk.g, d, &dr));
        float *q = down(dbiasg, d);
        if (k && memcmp(q, r1, (size_t)d * 4)) fail_msg("%s: two runs differ", NAME("gelu_erf_bwd dbias"));
        free(r1);
        r1 = q;
    }
    free(r1);
    /* mean pooling and its backward, on the same input (the CPU's residual output) */
    if (n) OK(gpu->upload(gpu, outg, out, (size_t)n * 4));
    OK(C->pool_mean_fwd(cpu, out, pool, &pk.h, d));
    OK(G->pool_mean_fwd(gpu, outg, poolg, &pk.g, d));
    for (int64_t s = 0; s < B; s++) {
        int64_t lo = pk.t.off[s], hi = pk.t.off[s + 1];
        for (int64_t c = 0; c < d; c++) {
            double m = 0;
            for (int64_t r = lo; r < hi; r++) m += fabs(out[r * d + c]);
            mpool[s * d + c] = m / (double)(hi - lo) * 2.0 * (hi - lo + 2);
        }
    }
    WITHIN(NAME("pool_mean_fwd"), poolg, pool, mpool, B * d, U);
    OK(C->pool_mean_bwd(cpu, dp, dz, &pk.h, d));
    OK(G->pool_mean_bwd(gpu, dpg, dzg, &pk.g, d));
    for (int64_t i = 0; i < n; i++) mag[i] = fabs(dz[i]);
    WITHIN(NAME("pool_mean_bwd"), dzg, dz, mag, n, 8 * U);
#undef NAME
    pack_free(&pk);
    free(h), free(bias), free(pos), free(z), free(t), free(dact), free(dbias), free(dp), free(a), free(dg), free(out),
        free(dz), free(pool);
    free(mag), free(mcol), free(mpool);
    float *bufs[] = {hg, biasg, posg, zg, tg, dactg, dbiasg, dpg, ag, dgg, outg, dzg, poolg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
}

/* the comparison itself must reject a wrong result: one element off by 1e-3 relative */
static void test_self_check(void **state)
{
    (void)state;
    float c[4] = {1.0f, -2.0f, 3.0f, 0.5f}, g[4];
    double m[4] = {1.0, 2.0, 3.0, 0.5};
    memcpy(g, c, sizeof c);
    g[2] *= 1.001f;
    double *b = scaled(m, 4, 8 * U);
    int64_t at;
    double e, w = worst_ratio(g, c, b, 4, &at, &e);
    if (!(w > 1.0 && at == 2)) fail_msg("the comparison accepted an element off by 1e-3 (%.3g of its bound)", w);
    free(b);
}

/* layernorm across row widths that take every kernel path (d 4, 6, 64: one partial block; 768: float4 path, row
 * in registers; 770: scalar path; 1024: the widest row of the one-pass backward; 1028/1030: rows longer than the
 * registers and the shared row buffer, the two-kernel backward; 64 with misaligned pointers: the scalar fallback of
 * a d % 4 == 0 row) and row counts (R 1, 7, 300, 4097: one chunk, many chunks of the two-stage column sums, a short
 * last chunk; 20000 at d 8: the chunk count capped at LN_MAX_CHUNKS, 20 rows a chunk); determinism and the
 * accumulate (+=) rule of dw/db/dx */
static const int64_t ds[] = {4, 6, 64, 768, 770}, Rs[] = {1, 7, 300, 4097};
static void test_layernorm(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++)
        for (size_t j = 0; j < sizeof Rs / sizeof *Rs; j++) layernorm_case(Rs[j], ds[i], 0);
    /* rows past the registers and the shared row buffer (vector 1028, scalar 1030), misaligned pointers */
    layernorm_case(7, 1028, 0);
    layernorm_case(300, 1030, 0);
    layernorm_case(40, 1024, 0);
    layernorm_case(20000, 8, 0);
    layernorm_case(300, 64, 1);
    /* rows wider than the column-partials scratch holds for two chunks: 17 rows (two chunks by count) in one chunk,
     * straight into dw/db */
    layernorm_case(17, DDP_COLPART_FLOATS / 4 + 4, 0);
}

/* the element-wise encoder ops at the same widths and row counts, with and without dropout */
static void test_elementwise(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++)
        for (size_t j = 0; j < sizeof Rs / sizeof *Rs; j++) {
            elementwise_case(Rs[j], ds[i], 0.0f);
            elementwise_case(Rs[j], ds[i], 0.1f);
        }
    elementwise_case(7, 1028, 0.1f);
    elementwise_case(2, 262148, 0.1f); /* one chunk, straight into dbias */
}

static int setup(void **state)
{
    (void)state;
    OK(ddp_backend_cpu_create(1, &cpu));
    OK(ddp_backend_cuda_create(0, &gpu));
    OK(gpu->reserve(gpu, 4097));
    C = cpu->enc, G = gpu->enc;
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    printf("largest error: %.3f of its bound\n", worst_seen);
    gpu->destroy(gpu);
    cpu->destroy(cpu);
    return 0;
}

int main(void)
{
    int exit_code;
    if (cuda_test_devices(&exit_code) == 0) return exit_code;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_check),         cmocka_unit_test(test_bf16_self_check),
        cmocka_unit_test(test_layernorm),          cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_layernorm16),        cmocka_unit_test(test_gelu16),
        cmocka_unit_test(test_residual_layernorm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
