/* backend_cpu_enc_attn.c — the CPU backend's attention ops (attention_fwd/_bwd of ddp_enc_ops): three exact methods,
 * fused, gemm (OpenBLAS) or tiled (backend_cpu_attn.c), picked per sample by attn_method() below; a sample at a time
 * where an output is bf16 (docs/transformer.md, "How the CPU and GPU compute it"). */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/backend/cpu/backend_cpu_attn.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DDP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DDP_CLONES
#endif

/* The method switch, read at every call (once per layer and pass) so tests and benchmarks can switch methods:
 * MPIDDP_ATTENTION=fused|gemm|tiled|auto; auto (default): tiled from MPIDDP_ATTENTION_TILED_MIN rows (24), gemm from
 * MPIDDP_ATTENTION_GEMM_MIN (8), fused below, the fastest measured per length (2-core Sapphire Rapids, d 128, dh 32
 * and 64). All three are exact (no padding rows or scores) and differ only in summation order, fixed by the sample. */
enum { ATT_FUSED, ATT_GEMM, ATT_TILED };
typedef struct {
    int64_t gemm_min, tiled_min; /* a sample of n rows: tiled if n >= tiled_min, else gemm if n >= gemm_min */
} attn_pick;
static attn_pick attn_method(void)
{
    const char *m = ddp_knob_str(DDP_KNOB_ATTENTION);
    if (m && !strcmp(m, "fused")) return (attn_pick){INT64_MAX, INT64_MAX};
    if (m && !strcmp(m, "gemm")) return (attn_pick){0, INT64_MAX};
    if (m && !strcmp(m, "tiled")) return (attn_pick){INT64_MAX, 0};
    return (attn_pick){ddp_knob_int(DDP_KNOB_ATTENTION_GEMM_MIN), ddp_knob_int(DDP_KNOB_ATTENTION_TILED_MIN)};
}
static int attn_which(attn_pick k, int64_t n)
{
    return n >= k.tiled_min ? ATT_TILED : n >= k.gemm_min ? ATT_GEMM : ATT_FUSED;
}

/* y += a x, and the backward's three updates of one (query, key) pair: restrict lets the compiler vectorise
 * (the pointers are distinct column blocks of distinct rows) */
static inline void axpy(float *restrict y, const float *restrict x, float a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
static inline void axpy3(float *restrict dq, float *restrict dk, float *restrict dv, const float *restrict k,
                         const float *restrict q, const float *restrict dout, float ds, float pw, int64_t n)
{
    for (int64_t c = 0; c < n; c++) {
        dq[c] += ds * k[c];
        dk[c] += ds * q[c];
        dv[c] += pw * dout[c];
    }
}
/* s1 += a1 x1 and s2 += a2 x2 (two score rows at once) */
static inline void axpy2(float *restrict s1, float *restrict s2, const float *restrict x1, const float *restrict x2,
                         float a1, float a2, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        s1[j] += a1 * x1[j];
        s2[j] += a2 * x2[j];
    }
}

/* n floats rounded to bf16 (bf16_round.h: the backend's one rounding) */
static void round_rows16(const float *x, ddp_bf16 *restrict y, int64_t n)
{
    for (int64_t c = 0; c < n; c++) y[c] = ddp_bf16_bits(x[c]);
}

/* ------------------------------------------------------------------ attention */
/* The fused method on the CPU: per sample and head, K and V are transposed once into [dh, n] scratch, then
 * each query row's scores, softmax and weighted sum run as loops vectorised over the sample's rows or the
 * head's columns; no n x n matrix, no library call per sample. (The CUDA kernels run kern_enc.h's one-pass
 * online softmax per row; both are exact, in other summation orders.) scratch holds 2 dh n + n floats. */
DDP_CLONES static void attn_fused_fwd(const float *qkv, float *o, float *lse, const ddp_packing *pack, int64_t s,
                                      int64_t d, int heads, const ddp_dropout *dr, float *scratch)
{
    int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, dh = d / heads, ld = 3 * d;
    float scale = 1.0f / sqrtf((float)dh), *Kt = scratch, *sr = scratch + dh * n;
    int drop = dr && dr->p > 0.0f;
    for (int h = 0; h < heads; h++) {
        const float *q = qkv + lo * ld + h * dh, *k = q + d, *v = q + 2 * d;
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < dh; c++) Kt[c * n + j] = k[j * ld + c];
        for (int64_t i = 0; i < n; i++) {
            const float *qi = q + i * ld;
            for (int64_t j = 0; j < n; j++) sr[j] = 0.0f;
            for (int64_t c = 0; c < dh; c++) axpy(sr, Kt + c * n, qi[c] * scale, n);
            float m = sr[0], l = 0.0f;
            for (int64_t j = 1; j < n; j++) m = sr[j] > m ? sr[j] : m;
            for (int64_t j = 0; j < n; j++) {
                sr[j] = ddp_expf(sr[j] - m);
                l += sr[j];
            }
            float inv = 1.0f / l;
            lse[(lo + i) * heads + h] = m + logf(l);
            uint64_t rk = ddp_drop_samplekey(dr, pack->sid, s, i);
            for (int64_t j = 0; j < n; j++)
                sr[j] *= drop ? inv * ddp_drop_scale(dr, rk, ddp_drop_attn_unit(h, j)) : inv;
            float *oi = o + (lo + i) * d + h * dh;
            for (int64_t c = 0; c < dh; c++) oi[c] = 0.0f;
            for (int64_t j = 0; j < n; j++) axpy(oi, v + j * ld, sr[j], dh);
        }
    }
}

/* scores of head h of sample s: S[i,j] = scale q_i . k_j, then P = exp(S - lse_i) when lse is given, else
 * softmax rows with lse written */
static void attn_probs(const float *qkv, const ddp_packing *pack, int64_t s, int64_t d, int heads, int h, float *S,
                       float *lse, int have_lse)
{
    int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, dh = d / heads, ld = 3 * d;
    const float *q = qkv + lo * ld + h * dh;
    float scale = 1.0f / sqrtf((float)dh);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)dh, scale, q, (int)ld, q + d, (int)ld,
                0.0f, S, (int)n);
    for (int64_t i = 0; i < n; i++) {
        float *Si = S + i * n;
        float *li = &lse[(lo + i) * heads + h];
        if (!have_lse) {
            float m = Si[0], l = 0.0f;
            for (int64_t j = 1; j < n; j++) m = Si[j] > m ? Si[j] : m;
            for (int64_t j = 0; j < n; j++) l += ddp_expf(Si[j] - m);
            *li = m + logf(l);
        }
        for (int64_t j = 0; j < n; j++) Si[j] = ddp_expf(Si[j] - *li);
    }
}

/* P := P * mask (the dropped attention weights) */
static void attn_drop(float *P, const ddp_packing *pack, int64_t s, int h, const ddp_dropout *dr)
{
    if (!dr || dr->p <= 0.0f) return;
    int64_t n = pack->off[s + 1] - pack->off[s];
    for (int64_t i = 0; i < n; i++) {
        uint64_t rk = ddp_drop_samplekey(dr, pack->sid, s, i);
        for (int64_t j = 0; j < n; j++) P[i * n + j] *= ddp_drop_scale(dr, rk, ddp_drop_attn_unit(h, j));
    }
}

static void attn_gemm_fwd(const float *qkv, float *o, float *lse, const ddp_packing *pack, int64_t s, int64_t d,
                          int heads, const ddp_dropout *dr, float *S)
{
    int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, dh = d / heads, ld = 3 * d;
    for (int h = 0; h < heads; h++) {
        attn_probs(qkv, pack, s, d, heads, h, S, lse, 0);
        attn_drop(S, pack, s, h, dr);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)dh, (int)n, 1.0f, S, (int)n,
                    qkv + lo * ld + 2 * d + h * dh, (int)ld, 0.0f, o + lo * d + h * dh, (int)d);
    }
}

/* The scratch of one pass over a batch whose longest sample has nmax rows: the gemm method's scores (gemm_n
 * n x n matrices: 1 forward, 3 backward), the fused method's transposed K (and V) and score rows, the tiled
 * method's blocks; whichever of them the batch uses is largest. Written before it is read. */
static ddp_status attn_scratch(attn_pick k, int64_t nmax, int64_t dh, int64_t gemm_n, float **S)
{
    size_t need = (size_t)(nmax >= k.gemm_min ? gemm_n * nmax * nmax : 0), tn = ddp_cpu_attn_tiled_scratch(nmax, dh);
    if ((size_t)((2 * dh + 2) * nmax) > need) need = (size_t)((2 * dh + 2) * nmax);
    if (nmax >= k.tiled_min && tn > need) need = tn;
    *S = ddp_malloc(need, sizeof **S);
    if (!*S) return ddp_set_error(DDP_ERR_NOMEM, "out of memory for attention scratch (%zu floats)", need);
    return DDP_OK;
}

/* The fp32 rows the methods read (q|k|v, w = 3d; dO, w = d): x itself, or where it is bf16 (x16) *own = its R x w
 * values widened (free *own after use). NULL with the error set when out of memory. */
static const float *widen32(const void *x, int x16, int64_t R, int64_t w, const char *what, float **own)
{
    *own = NULL;
    if (!x16) return x;
    const int64_t n = R * w;
    if (!(*own = ddp_malloc((size_t)(n > 0 ? n : 1), sizeof **own))) {
        ddp_set_error(DDP_ERR_NOMEM, "out of memory for attention's fp32 %s (%lld rows)", what, (long long)R);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) (*own)[i] = ddp_bf16_widen(((const ddp_bf16 *)x)[i]);
    return *own;
}

/* The buffers of one pass: *qkv the fp32 q|k|v (*q32 its widened copy where it is bf16), *x32 the fp32 rows of one
 * sample for a bf16 output (nx floats a row; none at nx 0), *S the methods' scratch (attn_scratch); on an error all
 * three are freed (NULL) and it is set */
static ddp_status attn_buffers(attn_pick k, const ddp_packing *pack, int64_t d, int64_t dh, const void *qkv16v,
                               int qkv16, int64_t nx, int64_t gemm_n, const float **qkv, float **q32, float **x32,
                               float **S)
{
    const int64_t nmax = pack->max_rows;
    *x32 = *S = NULL;
    *qkv = widen32(qkv16v, qkv16, pack->R, 3 * d, "q|k|v", q32);
    ddp_status st = qkv16 && !*qkv ? DDP_ERR_NOMEM : DDP_OK;
    if (st == DDP_OK && nx && !(*x32 = ddp_malloc((size_t)(nmax * nx > 0 ? nmax * nx : 1), sizeof **x32)))
        st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for attention's fp32 rows (%lld x %lld)", (long long)nmax,
                           (long long)nx);
    if (st == DDP_OK) st = attn_scratch(k, nmax, dh, gemm_n, S);
    if (st == DDP_OK) return DDP_OK;
    free(*x32), free(*q32);
    *x32 = *q32 = NULL;
    return st;
}

/* Sample s of pack as a batch of its own (its rows from 0, its sample id): the same bits as inside the batch */
static ddp_packing sample_alone(const ddp_packing *pack, int64_t s, int64_t off1[2])
{
    off1[0] = 0, off1[1] = pack->off[s + 1] - pack->off[s];
    return (ddp_packing){
        .B = 1, .R = off1[1], .off = off1, .hoff = off1, .sid = pack->sid ? pack->sid + s : NULL, .max_rows = off1[1]};
}

/* With o16 each sample runs alone (sample_alone) into o32, max_rows x d floats, rounded to bf16 into its rows of o. */
ddp_status ddp_cpu_attention_fwd(ddp_backend *b, const void *qkv16v, int qkv16, void *o, int o16, float *lse,
                                 const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    (void)b;
    attn_pick k = attn_method();
    int64_t dh = d / heads;
    float *S = NULL, *o32 = NULL, *q32 = NULL;
    const float *qkv;
    ddp_status st = attn_buffers(k, pack, d, dh, qkv16v, qkv16, o16 ? d : 0, 1, &qkv, &q32, &o32, &S);
    if (st != DDP_OK) return st;
    for (int64_t s = 0; s < pack->B; s++) {
        int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, off1[2];
        const ddp_packing one = sample_alone(pack, s, off1), *ps = o16 ? &one : pack;
        const float *qs = o16 ? qkv + lo * 3 * d : qkv;
        float *os = o16 ? o32 : (float *)o, *ls = o16 ? lse + lo * heads : lse;
        int64_t si = o16 ? 0 : s;
        int w = attn_which(k, n);
        if (w == ATT_TILED)
            ddp_cpu_attn_tiled_fwd(qs, os, ls, ps, si, d, heads, dr, S);
        else if (w == ATT_GEMM)
            attn_gemm_fwd(qs, os, ls, ps, si, d, heads, dr, S);
        else
            attn_fused_fwd(qs, os, ls, ps, si, d, heads, dr, S);
        if (o16) round_rows16(o32, (ddp_bf16 *)o + lo * d, n * d);
    }
    free(S);
    free(o32);
    free(q32);
    return DDP_OK;
}

/* The backward pass of the fused method: probabilities recomputed from the saved log-sum-exp, dq per query row;
 * dk and dv accumulated row by row. scratch: 2 dh n + 2 n floats. */
DDP_CLONES static void attn_fused_bwd(const float *qkv, const float *dout, const float *lse, const float *D,
                                      float *dqkv, const ddp_packing *pack, int64_t s, int64_t d, int heads,
                                      const ddp_dropout *dr, float *scratch)
{
    int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, dh = d / heads, ld = 3 * d;
    float scale = 1.0f / sqrtf((float)dh), *Kt = scratch, *Vt = scratch + dh * n, *pr = Vt + dh * n, *dp = pr + n;
    int drop = dr && dr->p > 0.0f;
    for (int h = 0; h < heads; h++) {
        const float *q = qkv + lo * ld + h * dh, *k = q + d, *v = q + 2 * d;
        float *dq = dqkv + lo * ld + h * dh, *dk = dq + d, *dv = dq + 2 * d;
        for (int64_t j = 0; j < n; j++) {
            for (int64_t c = 0; c < dh; c++) {
                Kt[c * n + j] = k[j * ld + c];
                Vt[c * n + j] = v[j * ld + c];
                dk[j * ld + c] = dv[j * ld + c] = 0.0f;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            const float *qi = q + i * ld, *doi = dout + (lo + i) * d + h * dh;
            float li = lse[(lo + i) * heads + h], Di = D[(lo + i) * heads + h];
            for (int64_t j = 0; j < n; j++) pr[j] = dp[j] = 0.0f;
            for (int64_t c = 0; c < dh; c++) axpy2(pr, dp, Kt + c * n, Vt + c * n, qi[c] * scale, doi[c], n);
            uint64_t rk = ddp_drop_samplekey(dr, pack->sid, s, i);
            for (int64_t j = 0; j < n; j++) {
                float p = ddp_expf(pr[j] - li), ms = drop ? ddp_drop_scale(dr, rk, ddp_drop_attn_unit(h, j)) : 1.0f;
                pr[j] = p * ms;                        /* the dropped weight, for dv */
                dp[j] = p * (dp[j] * ms - Di) * scale; /* ds, for dq and dk */
            }
            float *dqi = dq + i * ld;
            for (int64_t c = 0; c < dh; c++) dqi[c] = 0.0f;
            for (int64_t j = 0; j < n; j++) axpy3(dqi, dk + j * ld, dv + j * ld, k + j * ld, qi, doi, dp[j], pr[j], dh);
        }
    }
}

static void attn_gemm_bwd(const float *qkv, const float *dout, float *lse, const float *D, float *dqkv,
                          const ddp_packing *pack, int64_t s, int64_t d, int heads, const ddp_dropout *dr, float *S)
{
    int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, dh = d / heads, ld = 3 * d;
    float scale = 1.0f / sqrtf((float)dh);
    float *Pd = S + n * n, *dP = Pd + n * n;
    int drop = dr && dr->p > 0.0f;
    for (int h = 0; h < heads; h++) {
        const float *q = qkv + lo * ld + h * dh, *k = q + d, *v = q + 2 * d, *dO = dout + lo * d + h * dh;
        float *dq = dqkv + lo * ld + h * dh, *dk = dq + d, *dv = dq + 2 * d;
        attn_probs(qkv, pack, s, d, heads, h, S, lse, 1);
        if (drop) {
            memcpy(Pd, S, (size_t)(n * n) * sizeof *Pd);
            attn_drop(Pd, pack, s, h, dr);
        }
        const float *Pu = drop ? Pd : S;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)dh, (int)n, 1.0f, Pu, (int)n, dO, (int)d,
                    0.0f, dv, (int)ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)dh, 1.0f, dO, (int)d, v, (int)ld,
                    0.0f, dP, (int)n);
        for (int64_t i = 0; i < n; i++) {
            float Di = D[(lo + i) * heads + h];
            uint64_t rk = ddp_drop_samplekey(dr, pack->sid, s, i);
            for (int64_t j = 0; j < n; j++) {
                float dp = dP[i * n + j];
                if (drop) dp *= ddp_drop_scale(dr, rk, ddp_drop_attn_unit(h, j));
                dP[i * n + j] = S[i * n + j] * (dp - Di) * scale;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)dh, (int)n, 1.0f, dP, (int)n, k, (int)ld,
                    0.0f, dq, (int)ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)dh, (int)n, 1.0f, dP, (int)n, q, (int)ld,
                    0.0f, dk, (int)ld);
    }
}

/* D_i = dO_i . O_i per head, O in fp32 or (o16) bf16 widened, summed in order */
static void attn_delta(const float *dout, const void *o, int o16, float *delta, int64_t R, int64_t d, int heads)
{
    const float *x = o;
    const ddp_bf16 *x16 = o;
    int64_t dh = d / heads;
    for (int64_t r = 0; r < R; r++)
        for (int h = 0; h < heads; h++) {
            const int64_t at = r * d + h * dh;
            float s = 0.0f;
            for (int64_t c = 0; c < dh; c++) s += dout[at + c] * (o16 ? ddp_bf16_widen(x16[at + c]) : x[at + c]);
            delta[r * heads + h] = s;
        }
}

/* With dqkv16 each sample runs alone (sample_alone) into g32, max_rows x 3d floats, rounded to bf16 into its rows of
 * dqkv. */
ddp_status ddp_cpu_attention_bwd(ddp_backend *b, const void *qkv16v, int qkv16, const void *ov, int o16,
                                 const void *dout16v, int do16, const float *lse, void *dqkv, int dqkv16, float *delta,
                                 const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr)
{
    (void)b;
    attn_pick k = attn_method();
    int64_t dh = d / heads;
    float *S = NULL, *g32 = NULL, *q32 = NULL, *do32 = NULL;
    const float *qkv, *dout = widen32(dout16v, do16, pack->R, d, "dO", &do32);
    if (do16 && !dout) return DDP_ERR_NOMEM;
    attn_delta(dout, ov, o16, delta, pack->R, d, heads);
    ddp_status st = attn_buffers(k, pack, d, dh, qkv16v, qkv16, dqkv16 ? 3 * d : 0, 3, &qkv, &q32, &g32, &S);
    if (st != DDP_OK) {
        free(do32);
        return st;
    }
    for (int64_t s = 0; s < pack->B; s++) {
        int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, off1[2];
        const ddp_packing one = sample_alone(pack, s, off1), *ps = dqkv16 ? &one : pack;
        const int64_t at = dqkv16 ? lo : 0, si = dqkv16 ? 0 : s;
        const float *qs = qkv + at * 3 * d, *dos = dout + at * d, *ls = lse + at * heads, *Ds = delta + at * heads;
        float *gs = dqkv16 ? g32 : (float *)dqkv;
        int w = attn_which(k, n);
        if (w == ATT_TILED)
            ddp_cpu_attn_tiled_bwd(qs, dos, ls, Ds, gs, ps, si, d, heads, dr, S);
        else if (w == ATT_GEMM)
            attn_gemm_bwd(qs, dos, (float *)ls, Ds, gs, ps, si, d, heads, dr, S);
        else
            attn_fused_bwd(qs, dos, ls, Ds, gs, ps, si, d, heads, dr, S);
        if (dqkv16) round_rows16(g32, (ddp_bf16 *)dqkv + lo * 3 * d, n * 3 * d);
    }
    free(S);
    free(g32);
    free(q32);
    free(do32);
    return DDP_OK;
}
