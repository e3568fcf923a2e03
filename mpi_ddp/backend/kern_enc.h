/* kern_enc.h — the per-row bodies of the Transformer encoder's ops (docs/transformer.md), written once for host and
 * device: layernorm, exact (erf) gelu, the counter-based dropout mask, and attention of one query (or key) row over
 * the packed rows [lo, lo + n) of its own sample. backend_cpu_enc.c loops over them; the CUDA kernels call them too. */
#ifndef DDP_KERN_ENC_H
#define DDP_KERN_ENC_H

#include "mpi_ddp/backend/ddp_math.h"

#define DDP_LN_EPS 1e-5f

/* splitmix64's finaliser: the mixing function of every counter-based key (same as io/sampler.c). */
DDP_HD static inline uint64_t ddp_hmix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* Dropout of one op: p = 0 disables it. key = f(seed, optimizer step, site) is computed by the model, so a
 * mask depends on (seed, step, site, sample id, row of the sample, unit) only: never on world size, batch
 * composition or resume point. */
typedef struct {
    float p;
    uint64_t key;
} ddp_dropout;

/* The key of one row: sample id and row within the sample. */
DDP_HD static inline uint64_t ddp_drop_rowkey(uint64_t key, int64_t sample_id, int64_t row)
{
    return ddp_hmix(key ^ ddp_hmix((uint64_t)sample_id * 0x9e3779b97f4a7c15ULL ^ ddp_hmix((uint64_t)row + 0x51)));
}

/* The key of row pos of sample s (sid: the batch's sample ids); 0 when dropout is off. */
DDP_HD static inline uint64_t ddp_drop_samplekey(const ddp_dropout *d, const int64_t *sid, int64_t s, int64_t pos)
{
    return d && d->p > 0.0f ? ddp_drop_rowkey(d->key, sid[s], pos) : 0;
}

/* The key of packed row r (sample seg[r], position r - off[seg[r]]): the element-wise ops' masks, per row on
 * the CPU and per element on the GPU. 0 when dropout is off (seg, off and sid are not read then). */
DDP_HD static inline uint64_t ddp_drop_packedkey(const ddp_dropout *d, const int64_t *off, const int64_t *seg,
                                                 const int64_t *sid, int64_t r)
{
    return d && d->p > 0.0f ? ddp_drop_samplekey(d, sid, seg[r], r - off[seg[r]]) : 0;
}

/* The multiplier of one unit: 0 (dropped) or 1/(1-p) (kept). */
DDP_HD static inline float ddp_drop_scale(const ddp_dropout *d, uint64_t rowkey, uint64_t unit)
{
    uint64_t h = ddp_hmix(rowkey ^ (unit * 0xd6e8feb86659fd93ULL));
    float u = (float)(h >> 40) * (1.0f / 16777216.0f); /* [0, 1), 24 bits */
    return u < d->p ? 0.0f : 1.0f / (1.0f - d->p);
}

/* v times the multiplier of one unit when on (dropout is on: a flag the caller hoists out of its loop). */
DDP_HD static inline float ddp_drop_apply(int on, const ddp_dropout *d, uint64_t rowkey, uint64_t unit, float v)
{
    return on ? v * ddp_drop_scale(d, rowkey, unit) : v;
}

/* The dropout unit of an attention weight: head h, key row j of the query row's sample (the one definition every
 * attention path uses; the element-wise ops' unit is the column). */
DDP_HD static inline uint64_t ddp_drop_attn_unit(int64_t h, int64_t j) { return ((uint64_t)h << 32) + (uint64_t)j; }

/* erfc(x) with a relative error below 1.2e-7 everywhere (the Chebyshev fit of Numerical Recipes, 6.2), in
 * branch-free arithmetic over ddp_expf so the CPU loops vectorize (libm's erff does not) and the CUDA
 * kernels compute the same values. */
DDP_HD static inline float ddp_erfcf(float x)
{
    float z = fabsf(x), t = 1.0f / (1.0f + 0.5f * z);
    float p =
        -1.26551223f +
        t * (1.00002368f +
             t * (0.37409196f +
                  t * (0.09678418f +
                       t * (-0.18628806f +
                            t * (0.27886807f +
                                 t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
    float r = t * ddp_expf(-z * z + p);
    return x >= 0.0f ? r : 2.0f - r;
}

/* Exact gelu, x Φ(x) with Φ(x) = erfc(-x/√2)/2 (accurate in relative terms on both tails), and its
 * derivative Φ(x) + x φ(x). */
DDP_HD static inline float ddp_gelu_erf_fwd(float x, float *grad)
{
    float cdf = 0.5f * ddp_erfcf(-x * 0.70710678118654752f);
    if (grad) *grad = cdf + x * 0.39894228040143268f * ddp_expf(-0.5f * x * x);
    return x * cdf;
}

/* The layernorm's row sums, one order for host and device: lane j of DDP_LN_LANES sums the columns j, j + 16,
 * j + 32, ... in turn, then the lanes fold in halves (8, 4, 2, 1). 16 independent chains vectorise on the CPU (one
 * sequential chain cost about 2d dependent adds per row, half the forward's time) and stay in registers on the GPU
 * (constant lane indices only). */
#define DDP_LN_LANES 16
DDP_HD static inline float ddp_ln_fold(float *l)
{
    for (int w = DDP_LN_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) l[j] += l[j + w];
    return l[0];
}
/* mean and 1/sqrt(var + eps) of one row of d values, summed in that order */
DDP_HD static inline void ddp_layernorm_stats(const float *x, int64_t d, float *mean, float *rstd)
{
    float l[DDP_LN_LANES];
    int64_t c0, full = d / DDP_LN_LANES * DDP_LN_LANES;
    for (int j = 0; j < DDP_LN_LANES; j++) l[j] = 0.0f;
    for (c0 = 0; c0 < full; c0 += DDP_LN_LANES)
        for (int j = 0; j < DDP_LN_LANES; j++) l[j] += x[c0 + j];
    for (int j = 0; j < DDP_LN_LANES; j++)
        if (full + j < d) l[j] += x[full + j];
    float mu = ddp_ln_fold(l) / (float)d;
    for (int j = 0; j < DDP_LN_LANES; j++) l[j] = 0.0f;
    for (c0 = 0; c0 < full; c0 += DDP_LN_LANES)
        for (int j = 0; j < DDP_LN_LANES; j++) l[j] += (x[c0 + j] - mu) * (x[c0 + j] - mu);
    for (int j = 0; j < DDP_LN_LANES; j++)
        if (full + j < d) l[j] += (x[full + j] - mu) * (x[full + j] - mu);
    *mean = mu;
    *rstd = 1.0f / sqrtf(ddp_ln_fold(l) / (float)d + DDP_LN_EPS);
}

/* y = (x - mean) * rstd * w + b over one row of d values; mean and 1/sqrt(var + eps) returned. */
DDP_HD static inline void ddp_layernorm_row(const float *x, const float *w, const float *b, float *y, float *mean,
                                            float *rstd, int64_t d)
{
    float mu, rs;
    ddp_layernorm_stats(x, d, &mu, &rs);
    for (int64_t c = 0; c < d; c++) y[c] = (x[c] - mu) * rs * w[c] + b[c];
    *mean = mu;
    *rstd = rs;
}

/* dx += the input gradient of one layernorm row (dw, db are reduced over rows by the caller). */
DDP_HD static inline void ddp_layernorm_row_bwd(const float *dy, const float *x, const float *w, float mean, float rstd,
                                                float *dx, int64_t d)
{
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t c = 0; c < d; c++) {
        float g = dy[c] * w[c];
        sg += g;
        sgx += g * (x[c] - mean) * rstd;
    }
    sg /= (float)d;
    sgx /= (float)d;
    for (int64_t c = 0; c < d; c++) dx[c] += rstd * (dy[c] * w[c] - sg - (x[c] - mean) * rstd * sgx);
}

DDP_HD static inline float ddp_dot(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Attention of query row i (position qi in its sample) for one head over the sample's n rows, whose
 * q/k/v vectors are q + j*ld, k + j*ld, v + j*ld (ld = 3d in the packed qkv buffer). Online softmax in one
 * pass; o[0..dh) = sum_j drop(P_ij) v_j, returns log-sum-exp of the scaled scores. */
DDP_HD static inline float ddp_attn_row_fwd(const float *qi, const float *k, const float *v, int64_t ld, int64_t n,
                                            int64_t dh, float scale, float *o, const ddp_dropout *dr, uint64_t rowkey,
                                            uint64_t unit0)
{
    float m = -1e30f, l = 0.0f; /* below any finite score; never an infinity (fast-math builds) */
    for (int64_t c = 0; c < dh; c++) o[c] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float s = ddp_dot(qi, k + j * ld, dh) * scale;
        if (s > m) {
            float corr = ddp_expf(m - s); /* first row: clamped to ~0, and l, o are 0 anyway */
            l *= corr;
            for (int64_t c = 0; c < dh; c++) o[c] *= corr;
            m = s;
        }
        float e = ddp_expf(s - m);
        l += e;
        float w = dr->p > 0.0f ? e * ddp_drop_scale(dr, rowkey, unit0 + (uint64_t)j) : e;
        const float *vj = v + j * ld;
        for (int64_t c = 0; c < dh; c++) o[c] += w * vj[c];
    }
    float inv = 1.0f / l;
    for (int64_t c = 0; c < dh; c++) o[c] *= inv;
    return m + logf(l);
}

/* dq_i of one query row: dS_ij = P_ij (dP_ij - D_i), dP_ij = drop(dO_i · v_j), D_i = dO_i · O_i;
 * dq = scale sum_j dS_ij k_j (written, not accumulated). */
DDP_HD static inline void ddp_attn_row_bwd_q(const float *qi, const float *k, const float *v, int64_t ld, int64_t n,
                                             int64_t dh, float scale, const float *doi, float lse, float Di, float *dq,
                                             const ddp_dropout *dr, uint64_t rowkey, uint64_t unit0)
{
    for (int64_t c = 0; c < dh; c++) dq[c] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float p = ddp_expf(ddp_dot(qi, k + j * ld, dh) * scale - lse);
        float dp = ddp_dot(doi, v + j * ld, dh);
        if (dr->p > 0.0f) dp *= ddp_drop_scale(dr, rowkey, unit0 + (uint64_t)j);
        float ds = p * (dp - Di) * scale;
        const float *kj = k + j * ld;
        for (int64_t c = 0; c < dh; c++) dq[c] += ds * kj[c];
    }
}

/* dk_j and dv_j of one key row j (position j in the sample) over the sample's n query rows: q + i*ld,
 * dO rows dout + i*ldo, lse and D of row i at lse[i*hs], D[i*hs]; sid is the sample id (the query rows'
 * dropout keys, used only when dropout is on). Written, not accumulated. */
DDP_HD static inline void ddp_attn_row_bwd_kv(const float *q, const float *kj, const float *vj, int64_t ld, int64_t n,
                                              int64_t dh, float scale, const float *dout, int64_t ldo, const float *lse,
                                              const float *D, int64_t hs, float *dk, float *dv, const ddp_dropout *dr,
                                              int64_t sid, uint64_t unit)
{
    for (int64_t c = 0; c < dh; c++) dk[c] = dv[c] = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float *qi = q + i * ld, *doi = dout + i * ldo;
        float p = ddp_expf(ddp_dot(qi, kj, dh) * scale - lse[i * hs]);
        float ms = dr->p > 0.0f ? ddp_drop_scale(dr, ddp_drop_rowkey(dr->key, sid, i), unit) : 1.0f;
        float dp = ddp_dot(doi, vj, dh) * ms;
        float ds = p * (dp - D[i * hs]) * scale, pm = p * ms;
        for (int64_t c = 0; c < dh; c++) {
            dv[c] += pm * doi[c];
            dk[c] += ds * qi[c];
        }
    }
}

#endif
