/* test_cuda_norm.c — the CUDA backend's layernorm (backend_cuda_norm.cu) and element-wise encoder ops
 * (backend_cuda_enc.cu) against the CPU backend, across row widths that take every kernel path (d 4, 6, 64:
 * one partial block; 768: float4 path, row in registers; 770: scalar path; 1028/1030: rows longer than the
 * registers and the shared row buffer; 64 with misaligned pointers: the scalar fallback of a d % 4 == 0 row)
 * and row counts (R 1, 7, 300, 4097: one chunk, many chunks of the two-stage column sums), with and without
 * dropout; then determinism (two runs, the same bits) and the accumulate (+=) rule of dw/db/dbias/dx.
 * Tolerances, per element, in units of u = 2^-24 (fp32 rounding) times the sum of the magnitudes the result
 * is computed from:
 *   - element-wise results (embedding, gelu, dropout, residual, pooling backward, layernorm y, mean, rstd) are
 *     the same expressions on both sides (kern_enc.h; the forward statistics are summed in the CPU's order):
 *     8u x magnitude (a few roundings; the plugin compiles these kernels without FMA, so on a GPU they are
 *     usually the CPU's bits); gelu through erfc, 2 (x^2 + 36) u of gelu and of each term of gelu' (its
 *     exponent's rounding; gelu' cancels near x = -0.75), carried into gelu_erf_bwd; dropout masks are compared exactly
 *     (an element is zero on the GPU iff on the CPU, and the kept fraction is about 1 - p);
 *   - a sum of n fp32 terms in any order is within (n - 1) u sum|t| of the exact sum, so two sums in different
 *     orders (CPU: row order; GPU: chunks, then the chunk sums) differ by at most 2(n + 2) u sum|t|: dw, db,
 *     dbias (n = R), mean pooling (n = rows of the sample); layernorm dx, whose two row sums (n = d) run as a
 *     tree on the GPU, gets 2(d + 2) u (sum|dy w| + |xhat| sum|dy w xhat|) / d x rstd plus 8u for its own
 *     expression.
 * A self-check perturbs one result by 1e-3 relative and expects the comparison to reject it.
 * The bf16 forms (layernorm_fwd16, gelu_erf_fwd16) and the fused residual_layernorm_fwd are compared with the GPU's
 * own fp32 ops bit for bit: a bf16 output is the fp32 op's output rounded to nearest even, an fp32 one (out, y at
 * y16 = 0, mean, rstd, dgelu) the same bits; d from 4 to 1030 (past the shared row), R from 0, dropout 0 and 0.2,
 * dgelu NULL / own / z, out = h, outputs 16-, 8- and 2-byte aligned (vector and scalar stores).
 * Runs on the host emulator (label emu, MPIDDP_CUDA_PLUGIN=libmpiddp_cudaemu.so) or a GPU; exit 77 when neither. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda_api.h"
#include "check.h"
#include "cuda_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call) CHECK((call) == DDP_OK, "%s: %s", #call, ddp_last_error())
#define U (1.0 / 16777216.0) /* fp32 unit roundoff, 2^-24 */

static ddp_backend *cpu, *gpu;
static const ddp_enc_ops *C, *G;

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}
static float *rnd(int64_t n, uint64_t seed, float scale, float shift)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = frand(&seed) * scale + shift;
    return x;
}
static double *dzero(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
/* a device buffer of n floats (+1 spare, for the misaligned cases) holding h */
static float *dev(const float *h, int64_t n)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, (size_t)(n + 1) * sizeof(float)));
    if (h) OK(gpu->upload(gpu, d, h, (size_t)n * sizeof(float)));
    return d;
}
static float *down(const float *d, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    OK(gpu->download(gpu, h, d, (size_t)n * sizeof(float)));
    return h;
}

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
    CHECK(worst <= 1.0, "%s: element %lld: cuda %.9g vs cpu %.9g (error %.3g, %.3g x its bound %.3g)", what, (long long)at,
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
#define WITHIN(what, d, c, mag, n, k)                                                              \
    do {                                                                                           \
        double *b_ = scaled((mag), (n), (k));                                                      \
        double w_ = expect_dev_within((what), (d), (c), b_, (n));                                  \
        if (w_ > worst_seen) worst_seen = w_;                                                      \
        free(b_);                                                                                  \
    } while (0)

/* A packing of R rows into samples of 1 .. 13 rows (the last one cut), host and device copies. */
typedef struct {
    ddp_packing h, g;
    int64_t *off, *seg, *sid;
} packing;
static void pack_rows(packing *p, int64_t R)
{
    int64_t B = 0;
    for (int64_t r = 0; r < R; B++) r += 1 + (B * 7) % 13;
    p->off = malloc((size_t)(B + 1) * 8), p->seg = malloc((size_t)(R > 0 ? R : 1) * 8), p->sid = malloc((size_t)B * 8);
    int64_t mx = 0;
    p->off[0] = 0;
    for (int64_t s = 0; s < B; s++) {
        int64_t n = 1 + (s * 7) % 13;
        p->off[s + 1] = p->off[s] + n < R ? p->off[s] + n : R;
        p->sid[s] = 1000 + 3 * s;
        for (int64_t r = p->off[s]; r < p->off[s + 1]; r++) p->seg[r] = s;
        if (p->off[s + 1] - p->off[s] > mx) mx = p->off[s + 1] - p->off[s];
    }
    p->h = (ddp_packing){.B = B, .R = R, .off = p->off, .seg = p->seg, .sid = p->sid, .hoff = p->off, .max_rows = mx};
    p->g = p->h;
    void *o = NULL, *sg = NULL, *si = NULL;
    OK(gpu->alloc(gpu, &o, (size_t)(B + 1) * 8));
    OK(gpu->alloc(gpu, &sg, (size_t)R * 8));
    OK(gpu->alloc(gpu, &si, (size_t)B * 8));
    OK(gpu->upload(gpu, o, p->off, (size_t)(B + 1) * 8));
    OK(gpu->upload(gpu, sg, p->seg, (size_t)R * 8));
    OK(gpu->upload(gpu, si, p->sid, (size_t)B * 8));
    p->g.off = o, p->g.seg = sg, p->g.sid = si;
}
static void pack_free(packing *p)
{
    gpu->release(gpu, (void *)p->g.off), gpu->release(gpu, (void *)p->g.seg), gpu->release(gpu, (void *)p->g.sid);
    free(p->off), free(p->seg), free(p->sid);
}

/* ------------------------------------------------------------------ layernorm */
static void test_layernorm(int64_t R, int64_t d, int misalign)
{
    char what[160];
    const int64_t n = R * d, m = misalign; /* m: device pointers one float past alignment */
    float *x = rnd(n, 11 + d, 2.0f, 0.5f), *w = rnd(d, 12, 1.0f, 0.2f), *bb = rnd(d, 13, 1.0f, 0.0f);
    float *dy = rnd(n, 14, 1.0f, 0.0f), *dx = rnd(n, 15, 1.0f, 0.0f), *dw = rnd(d, 16, 1.0f, 0.0f), *db = rnd(d, 17, 1.0f, 0.0f);
    float *y = malloc((size_t)n * 4), *mu = malloc((size_t)R * 4), *rs = malloc((size_t)R * 4);
    float *xg = dev(NULL, n), *wg = dev(NULL, d), *bg = dev(NULL, d), *yg = dev(NULL, n), *mug = dev(NULL, R), *rsg = dev(NULL, R);
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
            mdx[r * d + c] = rs[r] * (2.0 * (d + 2) * (ag + xh * agx) / d + 8.0 * (g + fabs(sg) / d + xh * fabs(sgx) / d)) +
                             8.0 * fabs(dx[r * d + c]);
        }
    }
    snprintf(what, sizeof what, "layernorm y R %lld d %lld%s", (long long)R, (long long)d, m ? " misaligned" : "");
    WITHIN(what, yg + m, y, my, n, 8 * U);
    WITHIN("layernorm mean", mug, mu, mmu, R, 8 * U);
    WITHIN("layernorm rstd", rsg, rs, mrs, R, 8 * U);
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
    CHECK(!memcmp(dw1, dw2, (size_t)2 * d * 4), "layernorm dw/db R %lld d %lld: two runs differ", (long long)R, (long long)d);
    CHECK(!memcmp(y1, y2, (size_t)n * 4), "layernorm y R %lld d %lld: two runs differ", (long long)R, (long long)d);
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
    CHECK(diff == 0, "%s: %lld elements dropped on one side only (first %lld)", what, (long long)diff, (long long)at);
    free(g);
    return zeros;
}

static void test_elementwise(int64_t R, int64_t d, float p)
{
    char what[160];
    packing pk;
    pack_rows(&pk, R);
    const int64_t n = R * d, B = pk.h.B, mx = pk.h.max_rows;
    ddp_dropout dr = {p, 0x1234567ULL + (uint64_t)d};
    float *h = rnd(n, 21, 1.0f, 0.0f), *bias = rnd(d, 22, 1.0f, 0.0f), *pos = rnd(mx * d, 23, 1.0f, 0.0f);
    float *z = rnd(n, 24, 3.0f, 0.0f), *t = rnd(n, 25, 1.0f, 0.0f), *dact = rnd(n, 26, 1.0f, 0.0f);
    float *dbias = rnd(d, 27, 1.0f, 0.0f), *dp = rnd(B * d, 28, 1.0f, 0.0f);
    float *a = malloc((size_t)n * 4), *dg = malloc((size_t)n * 4), *out = malloc((size_t)n * 4), *dz = malloc((size_t)n * 4);
    float *pool = malloc((size_t)B * d * 4);
    float *hg = dev(h, n), *biasg = dev(bias, d), *posg = dev(pos, mx * d), *zg = dev(z, n), *tg = dev(t, n);
    float *dactg = dev(dact, n), *dbiasg = dev(dbias, d), *dpg = dev(dp, B * d), *ag = dev(NULL, n), *dgg = dev(NULL, n);
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
            mag[r * d + c] = fabs(h[r * d + c]) + 2 * fabs(bias[c]) + fabs(pos[(r - pk.off[pk.seg[r]]) * d + c]);
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
            double x = (double)z[r * d + c] + bias[c], cdf = 0.5 * erfc(-x / sqrt(2.0)), xphi = fabs(x * 0.3989422804014327 * exp(-0.5 * x * x));
            mag[r * d + c] = fabs(a[r * d + c]) * (x * x + 36) / 4 + 1e-6;
            mdg[r * d + c] = ((x * x + 36) * cdf + (x * x / 2 + 6) * xphi) / 4 + 1e-6;
        }
    WITHIN(NAME("gelu_erf_fwd a"), ag, a, mag, n, 8 * U);
    WITHIN(NAME("gelu_erf_fwd dgelu"), dgg, dg, mdg, n, 8 * U);
    int64_t zeros = expect_same_mask(NAME("gelu_erf_fwd mask"), ag, a, n);
    if (p > 0 && n >= 10000)
        CHECK(fabs((double)zeros / n - p) < 0.02, "%s: dropped %.4f of the elements, p %.2f", NAME("gelu mask"), (double)zeros / n, p);
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
        mcol[i % d] += 2 * fabs(dz[i]) + 2 * (dg[i] != 0.0f ? fabs(dz[i] / dg[i]) * mdg[i] : 0.0) * 8.0 / (2.0 * (2 * R + 2));
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
        if (k) CHECK(!memcmp(q, r1, (size_t)d * 4), "%s: two runs differ", NAME("gelu_erf_bwd dbias"));
        free(r1);
        r1 = q;
    }
    free(r1);
    /* mean pooling and its backward, on the same input (the CPU's residual output) */
    if (n) OK(gpu->upload(gpu, outg, out, (size_t)n * 4));
    OK(C->pool_mean_fwd(cpu, out, pool, &pk.h, d));
    OK(G->pool_mean_fwd(gpu, outg, poolg, &pk.g, d));
    for (int64_t s = 0; s < B; s++) {
        int64_t lo = pk.off[s], hi = pk.off[s + 1];
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
    free(h), free(bias), free(pos), free(z), free(t), free(dact), free(dbias), free(dp), free(a), free(dg), free(out), free(dz), free(pool);
    free(mag), free(mcol), free(mpool);
    float *bufs[] = {hg, biasg, posg, zg, tg, dactg, dbiasg, dpg, ag, dgg, outg, dzg, poolg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
}

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
    CHECK(at < 0, "%s: element %lld: bf16 0x%04x, the fp32 op's %.9g rounds to 0x%04x", what, (long long)at,
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
    CHECK(at < 0, "%s: element %lld: %.9g, want the bits of %.9g", what, (long long)at, at < 0 ? 0.0 : g[at], at < 0 ? 0.0 : c[at]);
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
static void test_layernorm16(int64_t R, int64_t d, int64_t m16)
{
    char what[160];
    const int64_t n = R * d;
    float *x = rnd(n, 31 + d, 2.0f, 0.5f), *w = rnd(d, 32, 1.0f, 0.2f), *bb = rnd(d, 33, 1.0f, 0.0f);
    float *xg = dev(x, n), *wg = dev(w, d), *bg = dev(bb, d), *yg = dev(NULL, n), *mug = dev(NULL, R), *rsg = dev(NULL, R);
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

/* gelu_erf_fwd16: a the rounding of gelu_erf_fwd's a, with dgelu NULL, its own buffer, and z itself (the bits of
 * gelu_erf_fwd's dgelu) */
static void test_gelu16(int64_t R, int64_t cols, float p, int64_t m16)
{
    char what[160];
    packing pk;
    pack_rows(&pk, R);
    const int64_t n = R * cols;
    ddp_dropout dr = {p, 0x7654321ULL + (uint64_t)cols};
    float *z = rnd(n, 41, 3.0f, 0.0f), *bias = rnd(cols, 42, 1.0f, 0.0f);
    float *zg = dev(z, n), *biasg = dev(bias, cols), *ag = dev(NULL, n), *dgg = dev(NULL, n), *dg2 = dev(NULL, n);
    uint16_t *a16 = dev16(n);
    OK(G->gelu_erf_fwd(gpu, zg, biasg, ag, dgg, &pk.g, cols, &dr));
    float *a = down(ag, n), *dg = down(dgg, n);
    for (int mode = 0; mode < 3; mode++) { /* dgelu: NULL, its own buffer, z */
        OK(gpu->zero(gpu, a16, (size_t)(n + 8) * 2));
        float *dgo = mode == 0 ? NULL : mode == 1 ? dg2 : zg;
        OK(G->gelu_erf_fwd16(gpu, zg, biasg, a16 + m16, dgo, &pk.g, cols, &dr));
        snprintf(what, sizeof what, "gelu_erf_fwd16 R %lld cols %lld p %.1f dgelu %s a at +%lld", (long long)R,
                 (long long)cols, p, mode == 0 ? "NULL" : mode == 1 ? "own" : "= z", (long long)m16);
        expect_bf16_of(what, a16 + m16, a, n);
        if (dgo) expect_same_bits("gelu_erf_fwd16 dgelu", dgo, dg, n);
    }
    pack_free(&pk);
    free(z), free(bias), free(a), free(dg);
    float *bufs[] = {zg, biasg, ag, dgg, dg2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->release(gpu, bufs[i]);
    gpu->release(gpu, a16);
}

/* residual_layernorm_fwd against residual_fwd then layernorm_fwd on the GPU: out, y (fp32, or bf16 at y16 = 1), mean
 * and rstd the same bits; out in its own buffer, then in place (out = h) */
static void test_residual_layernorm(int64_t R, int64_t d, float p, int y16, int64_t m16)
{
    char what[200];
    packing pk;
    pack_rows(&pk, R);
    const int64_t n = R * d;
    ddp_dropout dr = {p, 0xabcdefULL + (uint64_t)d};
    float *h = rnd(n, 51 + d, 1.0f, 0.3f), *t = rnd(n, 52, 1.0f, 0.0f), *tb = rnd(d, 53, 0.5f, 0.0f);
    float *w = rnd(d, 54, 1.0f, 0.2f), *lb = rnd(d, 55, 1.0f, 0.0f);
    float *hg = dev(h, n), *tg = dev(t, n), *tbg = dev(tb, d), *wg = dev(w, d), *lbg = dev(lb, d), *outg = dev(NULL, n);
    float *yg = dev(NULL, n), *mug = dev(NULL, R), *rsg = dev(NULL, R), *y2 = dev(NULL, n), *mu2 = dev(NULL, R), *rs2 = dev(NULL, R);
    uint16_t *y16g = dev16(n);
    OK(G->residual_fwd(gpu, outg, hg, tg, tbg, &pk.g, d, &dr));
    OK(G->layernorm_fwd(gpu, outg, wg, lbg, yg, mug, rsg, R, d));
    float *out = down(outg, n), *y = down(yg, n), *mu = down(mug, R), *rs = down(rsg, R);
    void *yo = y16 ? (void *)(y16g + m16) : (void *)y2;
    for (int inplace = 0; inplace < 2; inplace++) {
        snprintf(what, sizeof what, "residual_layernorm_fwd R %lld d %lld p %.1f y%s%s", (long long)R, (long long)d, p,
                 y16 ? " bf16" : " fp32", inplace ? " out = h" : "");
        OK(gpu->zero(gpu, outg, (size_t)n * 4));
        OK(gpu->zero(gpu, y16 ? (void *)y16g : (void *)y2, (size_t)n * (y16 ? 2 : 4)));
        float *o = inplace ? hg : outg;
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
}

/* the exact comparisons reject one bf16 ulp (and one fp32 ulp) */
static void test_bf16_self_check(void)
{
    const float c[3] = {1.0f, -2.5f, 0.1f};
    uint16_t g[3] = {bf16_rne(c[0]), bf16_rne(c[1]), bf16_rne(c[2])};
    CHECK(bf16_mismatch(g, c, 3) < 0, "bf16_rne disagrees with itself");
    g[2]++;
    CHECK(bf16_mismatch(g, c, 3) == 2, "the bf16 comparison accepted an element one ulp off");
    CHECK(bf16_rne(1.00390625f) == 0x3f80 && bf16_rne(1.01171875f) == 0x3f82 && bf16_rne(0x1.010002p0f) == 0x3f81,
          "bf16_rne is not round to nearest even");
}

/* the comparison itself must reject a wrong result: one element off by 1e-3 relative */
static void test_self_check(void)
{
    float c[4] = {1.0f, -2.0f, 3.0f, 0.5f}, g[4];
    double m[4] = {1.0, 2.0, 3.0, 0.5};
    memcpy(g, c, sizeof c);
    g[2] *= 1.001f;
    double *b = scaled(m, 4, 8 * U);
    int64_t at;
    double e, w = worst_ratio(g, c, b, 4, &at, &e);
    CHECK(w > 1.0 && at == 2, "the comparison accepted an element off by 1e-3 (%.3g of its bound)", w);
    free(b);
}

int main(void)
{
    int exit_code;
    if (cuda_test_devices(&exit_code) == 0) return exit_code;
    OK(ddp_backend_cpu_create(1, &cpu));
    OK(ddp_backend_cuda_create(0, &gpu));
    if (failures) return 1;
    C = cpu->enc, G = gpu->enc;
    OK(gpu->reserve(gpu, 4097));
    test_self_check();
    test_bf16_self_check();
    const int64_t ds[] = {4, 6, 64, 768, 770}, Rs[] = {1, 7, 300, 4097};
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++)
        for (size_t j = 0; j < sizeof Rs / sizeof *Rs; j++) {
            test_layernorm(Rs[j], ds[i], 0);
            test_elementwise(Rs[j], ds[i], 0.0f);
            test_elementwise(Rs[j], ds[i], 0.1f);
        }
    /* rows past the registers and the shared row buffer (vector 1028, scalar 1030), misaligned pointers */
    test_layernorm(7, 1028, 0);
    test_layernorm(300, 1030, 0);
    test_layernorm(300, 64, 1);
    test_elementwise(7, 1028, 0.1f);
    /* rows wider than the column-partials scratch holds for two chunks: one chunk, straight into dw/db/dbias */
    test_layernorm(2, 131076, 0);
    test_elementwise(2, 262148, 0.1f);
    /* the bf16 outputs and the fused residual + layernorm: d through every path (partial block, float4, scalar,
     * past the registers and the shared row), R from 0, outputs 16-, 8- and 2-byte aligned */
    const int64_t ds16[] = {4, 6, 64, 768, 770, 1028, 1030}, Rs16[] = {0, 1, 7, 300};
    for (size_t i = 0; i < sizeof ds16 / sizeof *ds16; i++)
        for (size_t j = 0; j < sizeof Rs16 / sizeof *Rs16; j++) {
            const int64_t R = Rs16[j], d = ds16[i], m16 = (int64_t)((i + j) % 3 == 2 ? 1 : (i + j) % 3 == 1 ? 4 : 0);
            test_layernorm16(R, d, m16);
            test_gelu16(R, d, 0.0f, m16);
            test_gelu16(R, d, 0.2f, 0);
            for (int y16 = 0; y16 < 2; y16++) {
                test_residual_layernorm(R, d, 0.0f, y16, m16);
                test_residual_layernorm(R, d, 0.2f, y16, 0);
            }
        }
    test_layernorm16(3, 64, 1);
    test_layernorm16(3, 64, 4);
    test_gelu16(3, 64, 0.2f, 1);
    test_residual_layernorm(3, 64, 0.2f, 1, 1);
    printf("largest error: %.3f of its bound\n", worst_seen);
    gpu->destroy(gpu);
    cpu->destroy(cpu);
    return check_summary();
}
