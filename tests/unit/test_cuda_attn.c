/* test_cuda_attn.c — the CUDA backend's attention on tensor cores (backend_cuda_attn_tc.cu, --precision tf32 and
 * bf16) and its SIMT kernels against the CPU twin, within bounds derived from the rounding (see bounds() below), and
 * main; cuDNN's fused SDPA: test_cuda_attn_cudnn.c; bf16 inputs and outputs bit for bit: test_cuda_attn16.c. */
#include "test_cuda_attn.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "cuda_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define U (1.0 / 16777216.0) /* fp32 unit roundoff, 2^-24 */
#define SAFETY 2.0

ddp_backend *cpu, *gpu;
int cudnn_mode; /* bits: 1 cuDNN runs the forward (o rounded to bf16), 2 also the backward (dout read, dq|dk|dv
                 * written as bf16); the bounds widen for either */
static double worst_seen[3]; /* the largest error-to-bound ratio: fp32, tf32, bf16 */

/* the largest |g - c| / (SAFETY bound), a NaN counting as largest; its element in *at */
static double worst_ratio(const float *g, const float *c, const double *bound, int64_t n, int64_t *at)
{
    double worst = 0;
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        double q = fabs((double)g[i] - c[i]) / (SAFETY * bound[i] + 1e-30);
        if (!(q <= worst)) worst = q, *at = i;
    }
    return worst;
}
static double expect_within(const char *what, const float *g, const float *c, const double *bound, int64_t n)
{
    int64_t at;
    double w = worst_ratio(g, c, bound, n, &at);
    if (!(w <= 1.0))
        fail_msg("%s: element %lld: cuda %.9g vs cpu %.9g, bound %.3g (%.3g x)", what, (long long)at, n ? g[at] : 0.0,
                 n ? c[at] : 0.0, n ? SAFETY * bound[at] : 0.0, w);
    return w;
}

/* Tolerance, per element, from the rounding (u_r: the unit roundoff of the operands the tensor cores read:
 * bf16 keeps 8 significant bits, u_r = 2^-9; tf32 11 bits, u_r = 2^-11; fp32 u = 2^-24 for the sums; fp32 path:
 * u_r = 0), first order in the relative errors, each bound the sum of the magnitudes it is computed from:
 *   s_ij = scale q_i.k_j: |ds| <= es_ij = (2 u_r + (dh + 2) u) scale sum_c |q_ic k_jc| + 16 u (1 + |s_ij|)
 *   O_i = sum_j P_ij m_ij v_j / l (m: dropout multiplier): every term's relative error is at most es_ij (its
 *     exponent) + max_j es_ij (l) + 2 u_r (P and v rounded) + (n + 8) u (fp32 sums of n terms):
 *     bound sum_j P_ij m_ij |v_jc| (es_ij + max_j es_ij + 2 u_r + (n + 8) u);
 *   lse_i: max_j es_ij + (n + 8) u (1 + |lse_i|);
 *   dP_ij = dO_i.v_j: (2 u_r + (dh + 2) u) sum_c |dO_ic v_jc|; delta_i = dO_i.O_i: sum_c |dO_ic| (O's bound);
 *   dS_ij = P_ij (m_ij dP_ij - delta_i) scale: scale P_ij (m_ij e(dP_ij) + e(delta_i) + |m dP - delta| (ep_ij +
 *     u_r + 4u)), ep_ij = es_ij + e(lse_i) the relative error of P recomputed from lse, u_r for dS rounded;
 *   dV_j = sum_i P m dO_i: sum_i P m |dO_ic| (ep_ij + 2 u_r + (n + 4) u); dK_j = sum_i dS_ij q_i and
 *     dQ_i = sum_j dS_ij k_j: sum (e(dS) |q| + |dS q| (2 u_r + (n + 4) u)).
 * A result passes when |gpu - cpu| <= 2 x its bound (the second-order terms and the CPU's own fp32 error). The
 * check can fail: an all-zero output and dqkv must exceed their bounds (self-check), as must the tf32 results
 * and bf16 results when judged against the fp32 bounds, and bf16's bits must differ from tf32's. */
/* The bounds above for one batch: bo [R, d], bl [R, H], bq [R, 3d] (dq | dk | dv), from the inputs, the
 * CPU's o and lse, u_r and the dropout. */
static void bounds(const float *qkv, const float *dout, const float *o, const float *lse, const int64_t *off,
                   const int64_t *sid, int B, int64_t d, int H, const ddp_dropout *dr, double ur, double *bo,
                   double *bl, double *bq)
{
    const int64_t dh = d / H, ld = 3 * d;
    const double scale = 1.0 / sqrt((double)dh);
    for (int s = 0; s < B; s++) {
        const int64_t lo = off[s], n = off[s + 1] - lo;
        if (!n) continue;
        double *es = malloc((size_t)(n * n) * 8), *pm = malloc((size_t)(n * n) * 8), *ms = malloc((size_t)(n * n) * 8);
        double *eds = malloc((size_t)(n * n) * 8), *dsv = malloc((size_t)(n * n) * 8), *esmax = calloc((size_t)n, 8);
        double *eD = calloc((size_t)n, 8);
        for (int h = 0; h < H; h++) {
            const float *q = qkv + lo * ld + h * dh, *k = q + d, *v = q + 2 * d, *dO = dout + lo * d + h * dh;
            for (int64_t i = 0; i < n; i++) {
                double li = lse[(lo + i) * H + h];
                uint64_t rk = ddp_drop_rowkey(dr->key, sid[s], i);
                esmax[i] = 0;
                for (int64_t j = 0; j < n; j++) {
                    double sa = 0, sv = 0;
                    for (int64_t c = 0; c < dh; c++)
                        sa += fabs((double)q[i * ld + c] * k[j * ld + c]), sv += (double)q[i * ld + c] * k[j * ld + c];
                    sa *= scale, sv *= scale;
                    es[i * n + j] = (2 * ur + (double)(dh + 2) * U) * sa + 16 * U * (1 + fabs(sv));
                    esmax[i] = es[i * n + j] > esmax[i] ? es[i * n + j] : esmax[i];
                    ms[i * n + j] = dr->p > 0 ? ddp_drop_scale(dr, rk, ddp_drop_attn_unit(h, j)) : 1.0;
                    pm[i * n + j] = exp(sv - li);
                }
                bl[(lo + i) * H + h] = esmax[i] + (double)(n + 8) * U * (1 + fabs(li));
                double D = 0, aD = 0;
                for (int64_t c = 0; c < dh; c++) {
                    double b = 0;
                    for (int64_t j = 0; j < n; j++)
                        b += pm[i * n + j] * ms[i * n + j] * fabs((double)v[j * ld + c]) *
                             (es[i * n + j] + esmax[i] + (2 + (cudnn_mode != 0)) * ur + (double)(n + 8) * U);
                    bo[(lo + i) * d + h * dh + c] = b;
                    D += (double)dO[i * d + c] * o[(lo + i) * d + h * dh + c],
                        aD += fabs((double)dO[i * d + c] * o[(lo + i) * d + h * dh + c]);
                }
                eD[i] = ((double)(dh + 2) * U + (cudnn_mode != 0) * ur) * aD; /* cuDNN: dout read as bf16 */
                for (int64_t c = 0; c < dh; c++)
                    eD[i] += fabs((double)dO[i * d + c]) * SAFETY * bo[(lo + i) * d + h * dh + c];
                for (int64_t j = 0; j < n; j++) {
                    double dp = 0, adp = 0, p = pm[i * n + j], m = ms[i * n + j];
                    for (int64_t c = 0; c < dh; c++)
                        dp += (double)dO[i * d + c] * v[j * ld + c], adp += fabs((double)dO[i * d + c] * v[j * ld + c]);
                    double ep = es[i * n + j] + SAFETY * bl[(lo + i) * H + h], t = m * dp - D;
                    dsv[i * n + j] = p * t * scale;
                    eds[i * n + j] = scale * p *
                                     (m * (2 * ur + (double)(dh + 2) * U) * adp + eD[i] + fabs(t) * (ep + ur + 4 * U));
                    es[i * n + j] = ep; /* from here: P's relative error */
                }
            }
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c < dh; c++) {
                    double bdq = 0, bdk = 0, bdv = 0, tail = (2 + (cudnn_mode != 0)) * ur + (double)(n + 4) * U;
                    for (int64_t x = 0; x < n; x++) {
                        bdq += eds[r * n + x] * fabs((double)k[x * ld + c]) +
                               fabs(dsv[r * n + x] * k[x * ld + c]) * tail;
                        bdk += eds[x * n + r] * fabs((double)q[x * ld + c]) +
                               fabs(dsv[x * n + r] * q[x * ld + c]) * tail;
                        bdv += pm[x * n + r] * ms[x * n + r] * fabs((double)dO[x * d + c]) * (es[x * n + r] + tail);
                    }
                    double *row = bq + (lo + r) * ld + h * dh + c;
                    row[0] = bdq, row[d] = bdk, row[2 * d] = bdv;
                }
        }
        free(es), free(pm), free(ms), free(eds), free(dsv), free(esmax), free(eD);
    }
}

/* The blocks the own kernels launched for a forward (fwd) and a backward (bwd) over the batch pk: a block per tile of
 * TEST_ATT_TILE rows and head in each tiled kernel (one forward, two backward) and the delta pass's ceil(R H / 128),
 * none past a sample's end; a thread per row and head in the reference kernels (dh > 128). Where cuDNN ran a
 * direction, its conversions count instead, unchecked. The tiles also as ddp_packing_tiles finds them. */
_Static_assert(TEST_ATT_TILE == DDP_ATT_TILE, "test_data.h's tiles are the backend's");
static void expect_blocks(const test_pack *pk, int64_t dh, int H, float p, long long fwd, long long bwd)
{
    int64_t *t = calloc((size_t)(DDP_ATT_TILES_MAX(pk->R, pk->B) + 1), 8);
    if (ddp_packing_tiles(pk->off, pk->B, t) != pk->T || memcmp(t, pk->tile, (size_t)pk->T * 8))
        fail_msg("ddp_packing_tiles: not the %lld tiles of test_pack", (long long)pk->T);
    free(t);
    const long long rh = (pk->R * H + 127) / 128, th = pk->T * H;
    const long long want_f = dh <= 128 ? th : rh, want_b = dh <= 128 ? 2 * th + rh : 2 * rh;
    if ((!(cudnn_mode & 1) || p > 0.0f) && fwd != want_f)
        fail_msg("attention forward dh %lld H %d: %lld blocks, want %lld (%lld tiles)", (long long)dh, H, fwd, want_f,
                 (long long)pk->T);
    if ((!(cudnn_mode & 2) || p > 0.0f) && bwd != want_b)
        fail_msg("attention backward dh %lld H %d: %lld blocks, want %lld (%lld tiles)", (long long)dh, H, bwd, want_b,
                 (long long)pk->T);
}

/* One batch on both backends at precision prec: output, lse and dqkv within the bounds of the header; with
 * `self` the checks that must fail (zeros; tf32 against the fp32 bounds) and tf32 differing from fp32. */
static int tc_device; /* device 0 runs tf32/bf16 attention on tensor cores (sm_80+; the emulator says 9.0) */

void attn_case(const int64_t *len, int B, int64_t dh, int H, ddp_precision prec, float p, int self)
{
    static const double urs[3] = {0.0, 1.0 / 2048, 1.0 / 512};
    static const char *names[3] = {"fp32", "tf32", "bf16"};
    test_pack pk;
    test_pack_lengths(&pk, len, B, 11, 3);
    int64_t d = dh * H, R = pk.R;
    const int64_t *o = pk.off, *sid = pk.sid;
    ddp_packing pc = {.B = B, .R = R, .off = o, .seg = pk.seg, .sid = sid, .hoff = o, .max_rows = pk.max_rows}, pg = pc;
    pg.off = dev(o, (size_t)(B + 1) * 8), pg.seg = dev(pk.seg, (size_t)R * 8), pg.sid = dev(sid, (size_t)B * 8);
    pg.tile = dev(pk.tile, (size_t)pk.T * 8), pg.tiles = pk.T;
    uint64_t seed = 1234 + (uint64_t)dh * 7 + (uint64_t)H;
    float *qkv = malloc((size_t)(R * 3 * d + 1) * 4), *dout = malloc((size_t)(R * d + 1) * 4);
    for (int64_t i = 0; i < R * 3 * d; i++) qkv[i] = 1.5f * test_frand(&seed);
    for (int64_t i = 0; i < R * d; i++) dout[i] = test_frand(&seed);
    float *y = calloc((size_t)(R * d + 1), 4), *lse = calloc((size_t)(R * H + 1), 4),
          *dq = calloc((size_t)(R * 3 * d + 1), 4);
    float *D = calloc((size_t)(R * H + 1), 4);
    void *qg = dev(qkv, (size_t)R * 3 * d * 4), *dog = dev(dout, (size_t)R * d * 4), *yg = dev(NULL, (size_t)R * d * 4);
    void *lg = dev(NULL, (size_t)R * H * 4), *dqg = dev(NULL, (size_t)R * 3 * d * 4),
         *Dg = dev(NULL, (size_t)R * H * 4);
    const ddp_dropout dr = {.p = p, .key = 0x5eed + (uint64_t)dh};
    OK(cpu->enc->attention_fwd(cpu, qkv, 0, y, 0, lse, &pc, d, H, &dr));
    OK(cpu->enc->attention_bwd(cpu, qkv, 0, y, 0, dout, 0, lse, dq, 0, D, &pc, d, H, &dr));
    OK(ddp_backend_set_precision(gpu, prec));
    const long long b0 = ddp_cuda()->blocks();
    OK(gpu->enc->attention_fwd(gpu, qg, 0, yg, 0, lg, &pg, d, H, &dr));
    const long long b1 = ddp_cuda()->blocks();
    OK(gpu->enc->attention_bwd(gpu, qg, 0, yg, 0, dog, 0, lg, dqg, 0, Dg, &pg, d, H, &dr));
    expect_blocks(&pk, dh, H, p, b1 - b0, ddp_cuda()->blocks() - b1);
    if (dh <= 128 && (!(cudnn_mode & 1) || p > 0.0f)) { /* a tile map not of the batch: one line, nothing launched */
        ddp_packing bad = pg;
        bad.tiles--;
        const long long b2 = ddp_cuda()->blocks();
        ddp_status st = gpu->enc->attention_fwd(gpu, qg, 0, yg, 0, lg, &bad, d, H, &dr);
        if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "tile map") || ddp_cuda()->blocks() != b2)
            fail_msg("attention with %lld of %lld tiles: status %d, \"%s\"", (long long)bad.tiles, (long long)pk.T,
                     (int)st, ddp_last_error());
    }
    float *gy = down(yg, R * d), *gl = down(lg, R * H), *gq = down(dqg, R * 3 * d);
    double *bo = calloc((size_t)(R * d + 1), 8), *bl = calloc((size_t)(R * H + 1), 8),
           *bq = calloc((size_t)(R * 3 * d + 1), 8);
    bounds(qkv, dout, y, lse, o, sid, B, d, H, &dr, dh > 64 && !cudnn_mode ? 0.0 : urs[prec], bo, bl,
           bq); /* > 64: SIMT */
    char what[160];
    snprintf(what, sizeof what, "attention %s dh %lld H %d p %.1f", names[prec], (long long)dh, H, (double)p);
    char w1[200], w2[200], w3[200];
    snprintf(w1, sizeof w1, "%s output", what), snprintf(w2, sizeof w2, "%s lse", what),
        snprintf(w3, sizeof w3, "%s dqkv", what);
    double eo = expect_within(w1, gy, y, bo, R * d), el = expect_within(w2, gl, lse, bl, R * H);
    double eg = expect_within(w3, gq, dq, bq, R * 3 * d), wst = eo > el ? eo : el;
    wst = eg > wst ? eg : wst;
    if (wst > worst_seen[prec]) worst_seen[prec] = wst;
    printf("%-36s rows %4lld: error / bound: output %.3f lse %.3f dqkv %.3f\n", what, (long long)R, eo, el, eg);
    if (cudnn_mode) { /* cuDNN ran: its outputs are bf16 values (the own kernels' are fp32) */
        for (int64_t i = 0; i < (cudnn_mode & 2 ? R * 3 * d : R * d); i++) {
            uint32_t u;
            memcpy(&u, i < R * d ? &gy[i] : &gq[i - R * d], 4);
            if (u & 0xffffu)
                fail_msg("%s: %s element %lld is not a bf16 value: cuDNN did not run", what, i < R * d ? "o" : "dqkv",
                         (long long)(i < R * d ? i : i - R * d));
        }
    }
    /* determinism: the same call again, identical bits */
    OK(gpu->enc->attention_fwd(gpu, qg, 0, yg, 0, lg, &pg, d, H, &dr));
    OK(gpu->enc->attention_bwd(gpu, qg, 0, yg, 0, dog, 0, lg, dqg, 0, Dg, &pg, d, H, &dr));
    float *gy2 = down(yg, R * d), *gq2 = down(dqg, R * 3 * d);
    if (!(!memcmp(gy, gy2, (size_t)R * d * 4) && !memcmp(gq, gq2, (size_t)R * 3 * d * 4)))
        fail_msg("%s: two runs differ", what);
    o16_case(what, qg, dog, &pg, d, H, &dr, gy, gl);
    qkv16_case(what, qkv, dog, &pg, d, H, &dr);
    do16_case(what, qg, dout, &pg, d, H, &dr);
    if (!cudnn_mode && prec != DDP_PRECISION_FP32 && dh <= 64)
        unaligned_case(what, qkv, dout, &pg, d, H, &dr, gy, gl, gq);
    /* sample B/2 alone (its id kept): the same bits as inside the batch */
    const int solo = B / 2;
    int64_t lo = o[solo], n = len[solo];
    test_pack t1;
    test_pack_lengths(&t1, &len[solo], 1, sid[solo], 0);
    ddp_packing p1 = {.B = 1,
                      .R = n,
                      .off = dev(t1.off, 16),
                      .seg = dev(t1.seg, (size_t)n * 8),
                      .sid = dev(t1.sid, 8),
                      .hoff = t1.off,
                      .max_rows = n,
                      .tile = dev(t1.tile, (size_t)t1.T * 8),
                      .tiles = t1.T};
    void *q1 = dev(qkv + lo * 3 * d, (size_t)n * 3 * d * 4), *do1 = dev(dout + lo * d, (size_t)n * d * 4);
    OK(gpu->enc->attention_fwd(gpu, q1, 0, yg, 0, lg, &p1, d, H, &dr));
    OK(gpu->enc->attention_bwd(gpu, q1, 0, yg, 0, do1, 0, lg, dqg, 0, Dg, &p1, d, H, &dr));
    float *y3 = down(yg, n * d), *g3 = down(dqg, n * 3 * d);
    if (!(!memcmp(y3, gy + lo * d, (size_t)n * d * 4) && !memcmp(g3, gq + lo * 3 * d, (size_t)n * 3 * d * 4)))
        fail_msg("%s: sample %d alone differs from the batch", what, solo);
    void *d1[] = {(void *)p1.off, (void *)p1.seg, (void *)p1.sid, (void *)p1.tile, q1, do1};
    for (size_t i = 0; i < sizeof d1 / sizeof d1[0]; i++) gpu->release(gpu, d1[i]);
    test_pack_free(&t1);
    free(y3), free(g3);
    if (self) {
        int64_t at;
        float *zero = calloc((size_t)(R * 3 * d + 1), 4);
        if (!(worst_ratio(zero, y, bo, R * d, &at) > 1.0)) fail_msg("%s: a zero output passes the output bound", what);
        if (!(worst_ratio(zero, dq, bq, R * 3 * d, &at) > 1.0)) fail_msg("%s: a zero dqkv passes the dqkv bound", what);
        free(zero);
        if (prec != DDP_PRECISION_FP32 && dh <= 64) {
            /* the same inputs at fp32 (and bf16's at tf32): on a device with tensor cores (sm_80+, and the emulator)
             * other bits, and results beyond the fp32 bounds, which the tensor cores' rounding exceeds; on an older
             * device the SIMT kernels' fp32 bits */
            double *fo = calloc((size_t)(R * d + 1), 8), *fl = calloc((size_t)(R * H + 1), 8),
                   *fq = calloc((size_t)(R * 3 * d + 1), 8);
            bounds(qkv, dout, y, lse, o, sid, B, d, H, &dr, 0.0, fo, fl, fq);
            OK(ddp_backend_set_precision(gpu, DDP_PRECISION_FP32));
            OK(gpu->enc->attention_fwd(gpu, qg, 0, yg, 0, lg, &pg, d, H, &dr));
            float *fy = down(yg, R * d);
            if (tc_device) {
                if (!(worst_ratio(gy, y, fo, R * d, &at) > 1.0 && worst_ratio(gq, dq, fq, R * 3 * d, &at) > 1.0))
                    fail_msg("%s: results within the fp32 bounds: did the tensor cores run?", what);
                if (memcmp(fy, gy, (size_t)R * d * 4) == 0)
                    fail_msg("%s: the fp32 and %s outputs have the same bits", what, names[prec]);
                if (prec == DDP_PRECISION_BF16) {
                    OK(ddp_backend_set_precision(gpu, DDP_PRECISION_TF32));
                    OK(gpu->enc->attention_fwd(gpu, qg, 0, yg, 0, lg, &pg, d, H, &dr));
                    float *ty = down(yg, R * d);
                    if (memcmp(ty, gy, (size_t)R * d * 4) == 0)
                        fail_msg("%s: the tf32 and bf16 outputs have the same bits", what);
                    free(ty);
                }
            } else {
                if (memcmp(fy, gy, (size_t)R * d * 4) != 0)
                    fail_msg("%s: no tensor cores here, yet not the fp32 kernels' bits", what);
            }
            free(fy), free(fo), free(fl), free(fq);
        }
    }
    OK(ddp_backend_set_precision(gpu, DDP_PRECISION_FP32));
    void *dv[] = {(void *)pg.off, (void *)pg.seg, (void *)pg.sid, (void *)pg.tile, qg, dog, yg, lg, dqg, Dg};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    test_pack_free(&pk);
    free(qkv), free(dout), free(y), free(lse), free(dq), free(D);
    free(gy), free(gl), free(gq), free(gy2), free(gq2), free(bo), free(bl), free(bq);
}

static const int64_t lens[] = {17, 1, 150, 0, 33, 64, 65, 2};
const int64_t small[4] = {1, 40, 2, 33};

/* Forward (output, lse) and backward (dq, dk, dv) against the CPU twin (ddp_cpu_enc_ops, fp32) across the head widths
 * of every instantiation (dh 8 -> 16, 16, 24 -> 32, 32, 40 -> 64, 64; dh 6 and 12, whose rows are no whole 16-byte
 * groups of bf16, 6 not of fp32 either: the tensor-core kernels' staging element by element where they read them), 1 to
 * 4 heads, a batch of samples of 0, 1, 2, 17, 33, 64, 65 and 150 rows (one and several 64-row blocks and 32-row tiles,
 * partial ones), with and without dropout; determinism (a second run gives the same bits, a sample alone the same bits
 * as in its batch); and
 * --precision fp32 against a tight fp32 bound (the SIMT path unchanged), its bits differing from tf32's and bf16's
 * (the tensor-core path did run) on a device that has tensor cores for them (sm_80+, and the emulator), equal to
 * them on an older one (where tf32 and bf16 attention fall back to the SIMT kernels). */
static void test_head_widths(void **state)
{
    (void)state;
    static const struct {
        int64_t dh;
        int H;
        const int64_t *len;
        int B;
    } shapes[] = {{8, 3, small, 4},  {16, 4, lens, 8}, {24, 2, lens, 8}, {32, 1, small, 4},
                  {40, 2, small, 4}, {64, 2, lens, 8}, {6, 2, small, 4}, {12, 3, small, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        for (int pr = DDP_PRECISION_TF32; pr <= DDP_PRECISION_BF16; pr++)
            for (int k = 0; k < 2; k++)
                attn_case(shapes[i].len, shapes[i].B, shapes[i].dh, shapes[i].H, (ddp_precision)pr, k ? 0.2f : 0.0f,
                          k == 0);
        attn_case(shapes[i].len, shapes[i].B, shapes[i].dh, shapes[i].H, DDP_PRECISION_FP32, 0.2f, 0);
    }
}

/* dh 80 at bf16 and tf32: past the tensor-core widths, the SIMT kernels; dh 160: past the SIMT kernels' 128, the
 * reference kernels (whose bf16 o goes through an fp32 scratch and a rounding pass: o16_case) */
static void test_past_tensor_core_widths(void **state)
{
    (void)state;
    attn_case(small, 4, 80, 1, DDP_PRECISION_BF16, 0.2f, 0);
    attn_case(small, 4, 80, 2, DDP_PRECISION_TF32, 0.0f, 0);
    attn_case(small, 4, 160, 1, DDP_PRECISION_BF16, 0.2f, 0);
    attn_case(small, 4, 160, 2, DDP_PRECISION_BF16, 0.0f, 0);
}

static int setup(void **state)
{
    (void)state;
    int cc = ddp_cuda()->compute_capability(0);
    tc_device = cc >= 80;
    printf("device 0: compute capability %d.%d: %s\n", cc / 10, cc % 10,
           tc_device ? "tf32 and bf16 attention on tensor cores"
                     : "no tf32/bf16 tensor cores: attention on the SIMT kernels");
    OK(ddp_backend_cpu_create(1, &cpu));
    OK(ddp_backend_cuda_create(0, &gpu));
    return 0;
}

int main(void)
{
    int exit_code;
    if (cuda_test_devices(&exit_code) == 0) return exit_code;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_head_widths),
                                       cmocka_unit_test(test_past_tensor_core_widths),
                                       cmocka_unit_test(test_cudnn_select), cmocka_unit_test(test_cudnn_attention),
                                       cmocka_unit_test(test_cudnn_plan_cache)};
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    printf("largest error / bound: fp32 %.3f, tf32 %.3f, bf16 %.3f\n", worst_seen[0], worst_seen[1], worst_seen[2]);
    if (gpu) gpu->destroy(gpu);
    if (cpu) cpu->destroy(cpu);
    return rc;
}
