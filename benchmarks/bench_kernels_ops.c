/* bench_kernels_ops.c — bench_kernels' configurations and buffers, and its table of backend ops with their
 * FLOP and byte counts. */
#include "bench_kernels.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/core/ctx.h"

#include <math.h>
#include <string.h>

static uint64_t rng = 88172645463325252ULL;
static double urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1.0p-53;
}

void bk_make_config(config *c, const char *model, int64_t w, int64_t heads, int64_t lo, int64_t hi, int64_t rows)
{
    memset(c, 0, sizeof *c);
    c->model = model, c->w = w, c->f = 2 * w, c->heads = heads, c->lo = lo, c->hi = hi;
    int64_t cap = rows / lo + 2;
    c->hoff = calloc((size_t)cap + 1, sizeof *c->hoff);
    if (!c->hoff) CK(DDP_ERR_NOMEM);
    int64_t r = 0, b = 0;
    while (r < rows && b < cap) { /* lengths uniform in [lo, hi], packed until about `rows` */
        int64_t n = lo + (int64_t)(urand() * (double)(hi - lo + 1));
        if (n > hi) n = hi;
        c->hoff[++b] = (r += n);
        c->sum_n2 += (double)n * (double)n;
    }
    c->B = b, c->R = r;
    /* the parameter count the optimizer ops run over: the MLP (D 64, C 10), or one encoder layer */
    c->nparams = !strcmp(model, "mlp") ? w * 64 + w + w * w + w + 10 * w + 10 : 4 * w * w + 2 * w * c->f + 9 * w + c->f;
}

void bk_set_bf16(config *c, const ddp_backend *be, ddp_precision pr)
{
    c->bf16 = pr == DDP_PRECISION_BF16;
    c->o16 = c->bf16;
    c->qkv16 = c->bf16 && be->gemm_epi;
    c->dqkv16 = c->qkv16 && be->linear_bwd;
    c->z16 = c->qkv16 && be->enc->gelu_erf_fwd16z && be->enc->gelu_erf_bwd16z;
    c->do16 = c->z16 && c->dqkv16;
    c->t16 = c->z16 && be->enc->residual_layernorm_fwd16t;
}

static void fill_host(float *h, size_t n, uint64_t seed, float scale)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = scale * ((float)((s >> 40) & 0xffffff) * (1.0f / 16777216.0f) - 0.5f);
    }
}

void bk_bufs_create(bufs *q, ddp_backend *be, const config *c)
{
    memset(q, 0, sizeof *q);
    q->be = be;
    int64_t R = c->R, wmax = 3 * c->w > c->f ? 3 * c->w : c->f;
    if (wmax < 64) wmax = 64;
    /* activations R x wmax; at least wmax x wmax, as the weight-gradient GEMMs (dWqkv: 3w x w) write into Y0 too: a
     * batch of fewer rows than the width (--rows below d) wrote past the buffer */
    size_t act = (size_t)((R > wmax ? R : wmax) * wmax), wts = (size_t)(wmax * wmax),
           vec = (size_t)(R * (c->heads > 1 ? c->heads : 1) + wmax);
    size_t sizes[NBUF] = {act,
                          act,
                          act,
                          act,
                          act,
                          wts,
                          (size_t)wmax,
                          vec,
                          vec,
                          vec,
                          (size_t)c->nparams,
                          (size_t)c->nparams,
                          (size_t)c->nparams,
                          (size_t)c->nparams};
    size_t hmax = 0;
    for (int k = 0; k < NBUF; k++) hmax = sizes[k] > hmax ? sizes[k] : hmax;
    float *h = malloc(hmax * sizeof *h);
    if (!h) CK(DDP_ERR_NOMEM);
    for (int k = 0; k < NBUF; k++) {
        q->n[k] = sizes[k];
        void *p;
        CK(be->alloc(be, &p, sizes[k] * sizeof(float)));
        q->f[k] = p;
        /* positive values for the buffers read as variances / rstd / lse-free inputs; small ones elsewhere */
        fill_host(h, sizes[k], (uint64_t)k + 1, k == PV ? 0.01f : 1.0f);
        if (k == PV)
            for (size_t i = 0; i < sizes[k]; i++) h[i] = fabsf(h[i]) + 1e-4f;
        if (k == VEC1) /* rstd of layernorm */
            for (size_t i = 0; i < sizes[k]; i++) h[i] = 1.0f + fabsf(h[i]);
        CK(be->upload(be, p, h, sizes[k] * sizeof(float)));
        if (k == X0 || k == X1) { /* the same values rounded to bf16, packed (h's first half holds them) */
            ddp_bf16 *h16 = (ddp_bf16 *)h;
            for (size_t i = 0; i < sizes[k]; i++) h16[i] = ddp_bf16_bits(h[i]); /* h16[i] overlaps h[i / 2] only */
            CK(be->alloc(be, &p, sizes[k] * sizeof(ddp_bf16)));
            q->h16[k == X1] = p;
            CK(be->upload(be, p, h16, sizes[k] * sizeof(ddp_bf16)));
        }
    }
    free(h);
    int64_t B = c->B;
    int64_t *lab = malloc((size_t)(B + R + 1) * sizeof *lab),
            *seg = malloc((size_t)(R + DDP_ATT_TILES_MAX(R, B) + 1) * sizeof *seg);
    if (!lab || !seg) CK(DDP_ERR_NOMEM);
    for (int64_t i = 0; i < B; i++) lab[i] = i % 10;
    for (int64_t s = 0; s < B; s++)
        for (int64_t r = c->hoff[s]; r < c->hoff[s + 1]; r++) seg[r] = s;
    const int64_t T = ddp_packing_tiles(c->hoff, B, seg + R); /* the attention tiles after the row map, as the model */
    void *p;
    CK(be->alloc(be, &p, (size_t)B * 8));
    q->lab = p;
    CK(be->upload(be, q->lab, lab, (size_t)B * 8));
    for (int64_t i = 0; i < B; i++) lab[i] = 1000 + i;
    CK(be->alloc(be, &p, (size_t)B * 8));
    q->sid = p;
    CK(be->upload(be, q->sid, lab, (size_t)B * 8));
    CK(be->alloc(be, &p, (size_t)(B + 1) * 8));
    q->off = p;
    CK(be->upload(be, q->off, c->hoff, (size_t)(B + 1) * 8));
    CK(be->alloc(be, &p, (size_t)(R + T) * 8));
    q->seg = p;
    CK(be->upload(be, q->seg, seg, (size_t)(R + T) * 8));
    free(lab), free(seg);
    int64_t mx = 0;
    for (int64_t s = 0; s < B; s++) mx = c->hoff[s + 1] - c->hoff[s] > mx ? c->hoff[s + 1] - c->hoff[s] : mx;
    q->pk = (ddp_packing){.B = B,
                          .R = R,
                          .off = q->off,
                          .seg = q->seg,
                          .sid = q->sid,
                          .hoff = c->hoff,
                          .max_rows = mx,
                          .tile = q->seg + R,
                          .tiles = T};
    CK(be->reserve(be, R > B ? R : B));
}

void bk_bufs_free(bufs *q)
{
    for (int k = 0; k < NBUF; k++) q->be->release(q->be, q->f[k]);
    q->be->release(q->be, q->h16[0]), q->be->release(q->be, q->h16[1]);
    q->be->release(q->be, q->lab), q->be->release(q->be, q->sid), q->be->release(q->be, q->off),
        q->be->release(q->be, q->seg);
}


static ddp_adamw_args adamw_args = {.lr = 1e-3f,
                                    .beta1 = 0.9f,
                                    .beta2 = 0.999f,
                                    .eps = 1e-8f,
                                    .weight_decay = 0.01f,
                                    .bc1 = 0.1f,
                                    .bc2_sqrt = 0.0447f,
                                    .gscale = 0.01f};

/* The op table: index i of a configuration. Returns 0 past the end. Fills d (counts) and, when q is given,
 * runs the op once on q. Counts: a GEMM moves A, B and C once (C twice when accumulated) and does 2MNK
 * FLOPs; element-wise ops move each operand once; FLOPs of element-wise work are nominal (gelu ~ 20 per
 * element with its derivative, layernorm ~ 8 per element forward, 12 backward, AdamW 16 per parameter). */
int bk_op_at(const config *c, int i, opdesc *d, bufs *q)
{
    ddp_backend *be = q ? q->be : NULL;
    const ddp_enc_ops *E = be ? be->enc : NULL;
    float **F = q ? q->f : NULL;
    int64_t R = c->R, B = c->B, w = c->w, f = c->f, heads = c->heads, C = 10, D = 64;
    double r = (double)R, W = (double)w, Ff = (double)f, n = (double)c->nparams, b = (double)B;
    memset(d, 0, sizeof *d);
#define GEMM(nm, ta, tb, M, N, K, beta, A, lda, Bm, ldb, Cm, ldc)                       \
    do {                                                                                \
        d->name = nm;                                                                   \
        snprintf(d->shape, sizeof d->shape, "%s[%lld x %lld x %lld]",                   \
                 ta   ? "T"                                                             \
                 : tb ? "NT"                                                            \
                      : "N",                                                            \
                 (long long)(M), (long long)(N), (long long)(K));                       \
        d->flops = 2.0 * (double)(M) * (double)(N) * (double)(K);                       \
        d->bytes = 4.0 * ((double)(M) * (double)(K) + (double)(K) * (double)(N) +       \
                          (double)(M) * (double)(N) * ((beta) != 0.0f ? 2.0 : 1.0));    \
        d->out = Y0, d->out_n = (size_t)((M) * (N));                                    \
        if (q) CK(be->gemm(be, ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, beta, Cm, ldc)); \
    } while (0)
#define SHAPE(...) snprintf(d->shape, sizeof d->shape, __VA_ARGS__)
    if (!strcmp(c->model, "mlp")) {
        switch (i) {
        case 0:
            GEMM("gemm x.W1^T", 0, 1, R, w, D, 0.0f, q ? F[X0] : 0, D, q ? F[W0] : 0, D, q ? F[Y0] : 0, w);
            return 1;
        case 1:
            GEMM("gemm a1.W2^T", 0, 1, R, w, w, 0.0f, q ? F[X0] : 0, w, q ? F[W0] : 0, w, q ? F[Y0] : 0, w);
            return 1;
        case 2:
            GEMM("gemm dW2 += dz^T.a1", 1, 0, w, w, R, 1.0f, q ? F[X0] : 0, w, q ? F[X1] : 0, w, q ? F[Y0] : 0, w);
            return 1;
        case 3:
            GEMM("gemm da1 = dz.W2", 0, 0, R, w, w, 0.0f, q ? F[X0] : 0, w, q ? F[W0] : 0, w, q ? F[Y0] : 0, w);
            return 1;
        case 4:
            d->name = "bias_gelu", d->flops = 20 * r * W, d->bytes = 4 * (3 * r * W + W), d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld] + dgelu", (long long)R, (long long)w);
            if (q) CK(be->bias_gelu(be, F[X0], F[BIAS], F[Y0], F[Y1], R, w));
            return 1;
        case 5:
            d->name = "bias_gelu_pool", d->flops = 21 * r * W, d->bytes = 4 * (2 * r * W + b * W + W), d->out = Y0,
            d->out_n = (size_t)(B * w);
            SHAPE("[%lld x %lld] -> %lld segments", (long long)R, (long long)w, (long long)B);
            if (q) CK(be->bias_gelu_pool(be, F[X0], F[BIAS], F[Y1], q->off, B, w, F[Y0]));
            return 1;
        case 6:
            d->name = "gelu_backward", d->flops = 2 * r * W, d->bytes = 4 * (3 * r * W + 2 * W), d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld]", (long long)R, (long long)w);
            if (q) CK(be->gelu_backward(be, F[X0], F[X1], F[Y0], R, w, F[VEC2]));
            return 1;
        case 7:
            d->name = "pool_gelu_backward", d->flops = 3 * r * W, d->bytes = 4 * (2 * r * W + b * W + 2 * W),
            d->out = Y0, d->out_n = (size_t)(R * w);
            SHAPE("%lld segments -> [%lld x %lld]", (long long)B, (long long)R, (long long)w);
            if (q) CK(be->pool_gelu_backward(be, F[X0], q->off, B, F[X1], F[Y0], R, w, F[VEC2]));
            return 1;
        case 8:
            d->name = "colsum", d->flops = r * W, d->bytes = 4 * (r * W + W), d->out = VEC2, d->out_n = (size_t)w;
            SHAPE("[%lld x %lld]", (long long)R, (long long)w);
            if (q) CK(be->colsum(be, F[X0], F[VEC2], R, w, 0.0f));
            return 1;
        case 9:
            d->name = "add_bias", d->flops = r * W, d->bytes = 4 * (2 * r * W + W), d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld]", (long long)R, (long long)w);
            if (q) CK(be->add_bias(be, F[Y0], F[BIAS], R, w));
            return 1;
        case 10:
            d->name = "softmax_xent", d->flops = 6 * b * C, d->bytes = 4 * (2 * b * C + 2 * b) + 16 * b, d->out = Y0,
            d->out_n = (size_t)(B * C);
            SHAPE("[%lld x %lld]", (long long)B, (long long)C);
            if (q) CK(be->softmax_xent(be, F[X0], q->lab, B, C, F[Y0], F[VEC2], (int64_t *)F[VEC0], F[VEC1]));
            return 1;
        default: break;
        }
        i -= 11;
    } else {
        const ddp_dropout nodrop = {0};
        int64_t d3 = 3 * w;
        double n2 = c->sum_n2;
        /* attention's operands as the step stores them at the precision (bk_set_bf16): their bytes per value, the
         * q|k|v read (bf16 from h16[0]) and the shape's note */
        const double bq = c->qkv16 ? 2 : 4, bo = c->o16 ? 2 : 4, bdq = c->dqkv16 ? 2 : 4, bdo = c->do16 ? 2 : 4;
        const void *qkv = q ? (c->qkv16 ? (const void *)q->h16[0] : (const void *)F[X0]) : NULL;
        const char *st16 = c->do16     ? ", bf16 q|k|v, o, dO, dq|dk|dv"
                           : c->dqkv16 ? ", bf16 q|k|v, o, dq|dk|dv"
                           : c->o16    ? ", bf16 o"
                                       : "";
        /* the bf16 step's own forms (index 20 on, at bf16): which of them this backend has */
        int rows16[6], n16 = 0;
        if (c->bf16) {
            rows16[n16++] = 20, rows16[n16++] = 21;
            if (c->z16) rows16[n16++] = 22, rows16[n16++] = 23;
            if (c->qkv16) rows16[n16++] = 24;
            if (c->t16) rows16[n16++] = 25;
        }
        if (i >= 20 && i < 20 + n16)
            i = rows16[i - 20];
        else if (i >= 20)
            i += 6 - n16; /* past them: the optimizer's ops below */
        switch (i) {
        case 0:
            GEMM("gemm qkv = y.Wqkv^T", 0, 1, R, d3, w, 0.0f, q ? F[X0] : 0, w, q ? F[W0] : 0, w, q ? F[Y0] : 0, d3);
            return 1;
        case 1:
            GEMM("gemm out = o.Wo^T", 0, 1, R, w, w, 0.0f, q ? F[X0] : 0, w, q ? F[W0] : 0, w, q ? F[Y0] : 0, w);
            return 1;
        case 2:
            GEMM("gemm ff1 = y.W1^T", 0, 1, R, f, w, 0.0f, q ? F[X0] : 0, w, q ? F[W0] : 0, w, q ? F[Y0] : 0, f);
            return 1;
        case 3:
            GEMM("gemm ff2 = a.W2^T", 0, 1, R, w, f, 0.0f, q ? F[X0] : 0, f, q ? F[W0] : 0, f, q ? F[Y0] : 0, w);
            return 1;
        case 4:
            GEMM("gemm dWqkv += dqkv^T.y", 1, 0, d3, w, R, 1.0f, q ? F[X0] : 0, d3, q ? F[X1] : 0, w, q ? F[Y0] : 0, w);
            return 1;
        case 5:
            GEMM("gemm da = dt.W2", 0, 0, R, f, w, 0.0f, q ? F[X0] : 0, w, q ? F[W0] : 0, f, q ? F[Y0] : 0, f);
            return 1;
        case 6:
            d->name = "embed_fwd", d->flops = 2 * r * W, d->bytes = 4 * 3 * r * W, d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld] + pos", (long long)R, (long long)w);
            if (q) CK(E->embed_fwd(be, F[Y0], F[BIAS], F[W0], &q->pk, w));
            return 1;
        case 7:
            d->name = "embed_bwd", d->flops = 2 * r * W, d->bytes = 4 * 3 * r * W, d->out = Y1,
            d->out_n = (size_t)(c->hi * w);
            SHAPE("[%lld x %lld] -> bias, pos", (long long)R, (long long)w);
            if (q) CK(E->embed_bwd(be, F[X0], F[VEC2], F[Y1], &q->pk, w));
            return 1;
        case 8:
            d->name = "layernorm_fwd", d->flops = 8 * r * W, d->bytes = 4 * (2 * r * W + 2 * r + 2 * W), d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld]", (long long)R, (long long)w);
            if (q) CK(E->layernorm_fwd(be, F[X0], F[BIAS], F[BIAS], F[Y0], F[VEC0], F[VEC1], R, w));
            return 1;
        case 9:
            d->name = "layernorm_bwd", d->flops = 14 * r * W, d->bytes = 4 * (4 * r * W + 2 * r + 3 * W), d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld]", (long long)R, (long long)w);
            if (q) CK(E->layernorm_bwd(be, F[X0], F[X1], F[BIAS], F[VEC0], F[VEC1], F[Y0], F[VEC2], F[VEC2] + w, R, w));
            return 1;
        case 10:
            /* S = QK^T (2 dh n^2 per head) and PV (the same), softmax ~ 5 per score; reads qkv, writes o, lse */
            d->name = "attention_fwd", d->flops = 4 * W * n2 + 5 * (double)heads * n2,
            d->bytes = bq * 3 * r * W + bo * r * W + 4 * r * (double)heads, d->out = Y0, d->out_n = (size_t)(R * w),
            d->out16 = c->o16;
            SHAPE("R %lld, %lld samples %lld-%lld, d %lld, %lld heads%s", (long long)R, (long long)B, (long long)c->lo,
                  (long long)c->hi, (long long)w, (long long)heads, st16);
            if (q) CK(E->attention_fwd(be, qkv, c->qkv16, F[Y0], c->o16, F[VEC0], &q->pk, w, (int)heads, &nodrop));
            return 1;
        case 11:
            /* recompute S, then dV, dP, dQ, dK: 5 products of 2 dh n^2 per head (the algorithm's FLOPs, 2.5x the
             * forward, as FlashAttention's papers and PyTorch's SDPA benchmarks count them, so the rates compare).
             * The deterministic two-pass GPU kernels execute 7 such products (S and dP again in the dQ pass):
             * their hardware rate is 1.4x the rate shown. Reads qkv, o, dout, lse, writes dqkv */
            d->name = "attention_bwd", d->flops = 10 * W * n2 + 6 * (double)heads * n2,
            d->bytes = bq * 3 * r * W + bo * r * W + bdo * r * W + 4 * r * (double)heads + bdq * 3 * r * W, d->out = Y1,
            d->out_n = (size_t)(R * d3), d->out16 = c->dqkv16;
            SHAPE("R %lld, %lld samples %lld-%lld, d %lld, %lld heads%s", (long long)R, (long long)B, (long long)c->lo,
                  (long long)c->hi, (long long)w, (long long)heads, st16);
            if (q) {
                /* the forward's o and lse for these q, k, v (attention_bwd reads them); dO as the model stores it (bf16
                 * from h16[1] at do16) */
                const void *dO = c->do16 ? (const void *)q->h16[1] : (const void *)F[X1];
                CK(E->attention_fwd(be, qkv, c->qkv16, F[Y0], c->o16, F[VEC0], &q->pk, w, (int)heads, &nodrop));
                CK(E->attention_bwd(be, qkv, c->qkv16, F[Y0], c->o16, dO, c->do16, F[VEC0], F[Y1], c->dqkv16, F[VEC2],
                                    &q->pk, w, (int)heads, &nodrop));
            }
            return 1;
        case 12:
            d->name = "gelu_erf_fwd", d->flops = 25 * r * Ff, d->bytes = 4 * (3 * r * Ff + Ff), d->out = Y0,
            d->out_n = (size_t)(R * f);
            SHAPE("[%lld x %lld] + dgelu", (long long)R, (long long)f);
            if (q) CK(E->gelu_erf_fwd(be, F[X0], F[BIAS], F[Y0], F[Y1], &q->pk, f, &nodrop));
            return 1;
        case 13:
            d->name = "gelu_erf_bwd", d->flops = 2 * r * Ff, d->bytes = 4 * (3 * r * Ff + 2 * Ff), d->out = Y0,
            d->out_n = (size_t)(R * f);
            SHAPE("[%lld x %lld]", (long long)R, (long long)f);
            if (q) CK(E->gelu_erf_bwd(be, F[X0], F[X1], F[Y0], F[VEC2], &q->pk, f, &nodrop));
            return 1;
        case 14:
            d->name = "residual_fwd", d->flops = 2 * r * W, d->bytes = 4 * (3 * r * W + W), d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld]", (long long)R, (long long)w);
            if (q) CK(E->residual_fwd(be, F[Y0], F[X0], F[X1], F[BIAS], &q->pk, w, &nodrop));
            return 1;
        case 15:
            d->name = "residual_bwd", d->flops = r * W, d->bytes = 4 * (2 * r * W + 2 * W), d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld]", (long long)R, (long long)w);
            if (q) CK(E->residual_bwd(be, F[X0], F[Y0], F[VEC2], &q->pk, w, &nodrop));
            return 1;
        case 16:
            d->name = "pool_mean_fwd", d->flops = r * W, d->bytes = 4 * (r * W + b * W), d->out = Y0,
            d->out_n = (size_t)(B * w);
            SHAPE("[%lld x %lld] -> %lld samples", (long long)R, (long long)w, (long long)B);
            if (q) CK(E->pool_mean_fwd(be, F[X0], F[Y0], &q->pk, w));
            return 1;
        case 17:
            d->name = "pool_mean_bwd", d->flops = r * W, d->bytes = 4 * (r * W + b * W), d->out = Y0,
            d->out_n = (size_t)(R * w);
            SHAPE("%lld samples -> [%lld x %lld]", (long long)B, (long long)R, (long long)w);
            if (q) CK(E->pool_mean_bwd(be, F[X0], F[Y0], &q->pk, w));
            return 1;
        case 18:
            d->name = "add_bias", d->flops = r * 3 * W, d->bytes = 4 * (2 * r * 3 * W + 3 * W), d->out = Y0,
            d->out_n = (size_t)(R * d3);
            SHAPE("[%lld x %lld]", (long long)R, (long long)d3);
            if (q) CK(be->add_bias(be, F[Y0], F[BIAS], R, d3));
            return 1;
        case 19:
            d->name = "colsum", d->flops = r * 3 * W, d->bytes = 4 * (r * 3 * W + 3 * W), d->out = VEC2,
            d->out_n = (size_t)d3;
            SHAPE("[%lld x %lld]", (long long)R, (long long)d3);
            if (q) CK(be->colsum(be, F[X0], F[VEC2], R, d3, 0.0f));
            return 1;
        case 20: /* the bf16 step's residual add and the layernorm after it, y in bf16 (txmodel.act16) */
            d->name = "residual_layernorm_fwd16", d->flops = 10 * r * W, d->bytes = 4 * 3 * r * W + 2 * r * W + 8 * r,
            d->out = Y1, d->out_n = (size_t)(R * w), d->out16 = 1;
            SHAPE("[%lld x %lld], bf16 y", (long long)R, (long long)w);
            if (q)
                CK(E->residual_layernorm_fwd(be, F[Y0], F[X0], F[X1], F[BIAS], &q->pk, w, &nodrop, F[BIAS], F[BIAS],
                                             F[Y1], 1, F[VEC0], F[VEC1]));
            return 1;
        case 21: /* without dropout: dh and its bf16 copy for the next linear backward (txmodel.dh16) */
            d->name = "layernorm_bwd16", d->flops = 14 * r * W, d->bytes = 4 * (4 * r * W + 2 * r + 3 * W) + 2 * r * W,
            d->out = Y0, d->out_n = (size_t)(R * w);
            SHAPE("[%lld x %lld] + bf16 dx", (long long)R, (long long)w);
            if (q)
                CK(E->layernorm_bwd16(be, F[X0], F[X1], F[BIAS], F[VEC0], F[VEC1], F[Y0], (ddp_bf16 *)F[Y1], F[VEC2],
                                      F[VEC2] + w, R, w));
            return 1;
        case 22: /* the GELU of linear1's bf16 output (txmodel.z16); not on the CPU backend */
            d->name = "gelu_erf_fwd16z", d->flops = 25 * r * Ff, d->bytes = 2 * 2 * r * Ff, d->out = Y0,
            d->out_n = (size_t)(R * f), d->out16 = 1, d->nocheck = 1;
            SHAPE("[%lld x %lld], bf16 z and a", (long long)R, (long long)f);
            if (q) CK(E->gelu_erf_fwd16z(be, q->h16[0], (ddp_bf16 *)F[Y0], &q->pk, f, &nodrop));
            return 1;
        case 23: /* its backward from linear2's bf16 data gradient, gelu' recomputed from the bf16 z */
            d->name = "gelu_erf_bwd16z", d->flops = 27 * r * Ff, d->bytes = 3 * 2 * r * Ff + 8 * Ff, d->out = Y0,
            d->out_n = (size_t)(R * f), d->out16 = 1, d->nocheck = 1;
            SHAPE("[%lld x %lld], bf16 da, z and dz", (long long)R, (long long)f);
            if (q) CK(E->gelu_erf_bwd16z(be, q->h16[0], q->h16[1], (ddp_bf16 *)F[Y0], F[VEC2], &q->pk, f, &nodrop));
            return 1;
        case 24: /* linear1 as the bf16 step runs it: bf16 operands, the bias epilogue writing bf16 (gemm_epi) */
            d->name = "gemm ff1 = y.W1^T + b1";
            SHAPE("NT[%lld x %lld x %lld], bf16 in and out", (long long)R, (long long)f, (long long)w);
            d->flops = 2 * r * Ff * W, d->bytes = 2 * (r * W + W * Ff + r * Ff) + 4 * Ff, d->out = Y0,
            d->out_n = (size_t)(R * f), d->out16 = 1, d->nocheck = 1;
            if (q)
                CK(be->gemm_epi(be, DDP_EPI_BIAS | DDP_EPI_C16, F[BIAS], 0, 1, R, f, w, 1.0f, q->h16[0], 1, w,
                                q->h16[1], 1, w, 0.0f, F[Y0], f));
            return 1;
        case 25: /* the residual add of a bf16 branch with its bias added (txmodel.t16), y in bf16; not on the CPU */
            d->name = "residual_layernorm_fwd16t", d->flops = 9 * r * W,
            d->bytes = 4 * 2 * r * W + 2 * 2 * r * W + 8 * r, d->out = Y1, d->out_n = (size_t)(R * w), d->out16 = 1,
            d->nocheck = 1;
            SHAPE("[%lld x %lld], bf16 t and y", (long long)R, (long long)w);
            if (q)
                CK(E->residual_layernorm_fwd16t(be, F[Y0], F[X0], q->h16[1], &q->pk, w, &nodrop, F[BIAS], F[BIAS],
                                                F[Y1], 1, F[VEC0], F[VEC1]));
            return 1;
        default: break;
        }
        i -= 26;
    }
    switch (i) { /* the optimizer's ops over the parameters (the MLP's, or one encoder layer's) */
    case 0:
        d->name = "adamw", d->flops = 16 * n, d->bytes = 4 * 7 * n, d->out = PA, d->out_n = (size_t)c->nparams;
        SHAPE("%lld params", (long long)c->nparams);
        if (q) CK(be->adamw(be, F[PA], F[PG], F[PM], F[PV], c->nparams, &adamw_args));
        return 1;
    case 1: {
        d->name = "sumsq", d->flops = 2 * n, d->bytes = 4 * n, d->out = -1;
        SHAPE("%lld params", (long long)c->nparams);
        double s;
        if (q) CK(be->sumsq(be, F[PG], c->nparams, &s));
        return 1;
    }
    default: return 0;
    }
#undef GEMM
#undef SHAPE
}
