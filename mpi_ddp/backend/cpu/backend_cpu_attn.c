/* backend_cpu_attn.c — the CPU backend's `tiled` attention (MPIDDP_ATTENTION=tiled), per sample and head: packed
 * blocks, query-row tiles whose scores stay in cache, one register-blocked micro-kernel (mk) for all products. Sums run
 * in an order fixed by (n, dh) only, so a sample's result is independent of its batch (docs/transformer.md). */
#include "mpi_ddp/backend/cpu/backend_cpu_attn.h"
#include "mpi_ddp/core/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* x86-64 with GCC: one clone per ISA level, picked at load time. Levels v3/v4 (not bare avx2/avx512f) so the
 * clones have FMA; fp-contract=fast (this file only: -std=c11 turns contraction off) lets a += b c become one FMA.
 * The micro-kernel is always_inline so it is compiled inside each clone. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DDP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#pragma GCC optimize("fp-contract=fast")
#else
#define DDP_CLONES
#endif
#if defined(__GNUC__)
#define DDP_INLINE static inline __attribute__((always_inline))
#else
#define DDP_INLINE static inline
#endif

enum { TR = 4, TW = 32, TQ = 32, TQB = 64 }; /* micro-kernel rows x columns; query rows per tile (forward, backward) */

static inline int64_t rup(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The one micro-kernel of every product here (TR rows x TW columns of accumulators, fixed widths the compiler
 * vectorises under DDP_CLONES): C[r][j] (+)= sum_t A[r*ars + t*ats] B[t*ldb + j] for r < TR, j < TW, t < K; stored for
 * r < rows, j < cols. A may be read up to TR rows and B TW columns (callers pad with zeros). With GCC/Clang the TR x TW
 * accumulators are 8 vectors of 16 floats (vector extensions: zmm in the v4 clone, ymm pairs in v3, xmm in the
 * default), kept in registers; elsewhere plain loops of the same order. */
#if defined(__GNUC__)
typedef float vf16 __attribute__((vector_size(64)));
#define VL(v, p) memcpy(&(v), (p), sizeof(v)) /* unaligned load */
DDP_INLINE void mk(float *restrict C, int64_t ldc, int rows, int64_t cols, int accum, const float *restrict A,
                   int64_t ars, int64_t ats, const float *restrict B, int64_t ldb, int64_t K)
{
    vf16 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
    for (int64_t t = 0; t < K; t++) {
        const float *restrict b = B + t * ldb, *restrict a = A + t * ats;
        vf16 b0, b1;
        VL(b0, b), VL(b1, b + 16);
        float a0 = a[0], a1 = a[ars], a2 = a[2 * ars], a3 = a[3 * ars];
        c00 += a0 * b0, c01 += a0 * b1, c10 += a1 * b0, c11 += a1 * b1;
        c20 += a2 * b0, c21 += a2 * b1, c30 += a3 * b0, c31 += a3 * b1;
    }
    vf16 acc[TR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
    for (int r = 0; r < rows; r++) {
        float *restrict cr = C + r * ldc;
        const float *v = (const float *)acc[r];
        if (cols >= TW)
            for (int j = 0; j < TW; j++) cr[j] = (accum ? cr[j] : 0.0f) + v[j];
        else
            for (int64_t j = 0; j < cols; j++) cr[j] = (accum ? cr[j] : 0.0f) + v[j];
    }
}
#else
DDP_INLINE void mk(float *restrict C, int64_t ldc, int rows, int64_t cols, int accum, const float *restrict A,
                   int64_t ars, int64_t ats, const float *restrict B, int64_t ldb, int64_t K)
{
    float acc[TR][TW] = {{0}};
    for (int64_t t = 0; t < K; t++) {
        const float *restrict b = B + t * ldb;
        for (int r = 0; r < TR; r++) {
            float a = A[r * ars + t * ats];
            for (int j = 0; j < TW; j++) acc[r][j] += a * b[j];
        }
    }
    for (int r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols && j < TW; j++) C[r * ldc + j] = (accum ? C[r * ldc + j] : 0.0f) + acc[r][j];
}
#endif

/* pack rows [0, n) of dh columns (row stride ld) into dst [np x dhp] (transposed: dst [dhp x np]), zero padded.
 * The transpose runs in bands of TB source rows: per column, TB loads from rows already in L1 and one contiguous
 * run of stores. (Storing each source row down a column instead touched dh lines np floats apart, which for np a
 * multiple of 256 fall into a few L1 sets: 12-16% of the attention's time in a profile at d 128, 4 heads.) */
enum { TB = 16 };
DDP_INLINE void pack_rows(float *restrict dst, const float *restrict src, int64_t ld, int64_t n, int64_t dh, int64_t np,
                          int64_t dhp, int trans)
{
    if (!trans) {
        for (int64_t j = 0; j < n; j++) {
            memcpy(dst + j * dhp, src + j * ld, (size_t)dh * sizeof *dst);
            memset(dst + j * dhp + dh, 0, (size_t)(dhp - dh) * sizeof *dst);
        }
        memset(dst + n * dhp, 0, (size_t)((np - n) * dhp) * sizeof *dst);
        return;
    }
    for (int64_t j0 = 0; j0 < n; j0 += TB) {
        int64_t m = n - j0 < TB ? n - j0 : TB;
        for (int64_t c = 0; c < dh; c++) {
            float *restrict d = dst + c * np + j0;
            const float *restrict s = src + j0 * ld + c;
            for (int64_t j = 0; j < m; j++) d[j] = s[j * ld];
        }
    }
    for (int64_t c = 0; c < dh; c++) memset(dst + c * np + n, 0, (size_t)(np - n) * sizeof *dst);
    memset(dst + dh * np, 0, (size_t)((dhp - dh) * np) * sizeof *dst);
}

/* The TW lanes of a row's max or sum folded in halves: a fixed tree (the same order for every row and batch) of
 * log2(TW) vector steps, where a lane-by-lane chain cost TW dependent adds per score row (~100 cycles, as much as
 * the products of a 40-row sample's row at dh 32). */
DDP_INLINE float fold_max(float *lane)
{
    for (int w = TW / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) lane[j] = lane[j + w] > lane[j] ? lane[j + w] : lane[j];
    return lane[0];
}
DDP_INLINE float fold_sum(float *lane)
{
    for (int w = TW / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) lane[j] += lane[j + w];
    return lane[0];
}

/* S[TQ x np] = Qp[i0 .. i0+m) Kt (row blocks of TR, column blocks of TW) */
DDP_INLINE void scores(float *S, const float *Qp, const float *Kt, int64_t i0, int64_t m, int64_t np, int64_t dh,
                       int64_t dhp)
{
    for (int64_t r0 = 0; r0 < m; r0 += TR)
        for (int64_t j0 = 0; j0 < np; j0 += TW)
            mk(S + r0 * np + j0, np, TR, TW, 0, Qp + (i0 + r0) * dhp, dhp, 1, Kt + j0, np, dh);
}

/* the backward's 7 packed blocks and 2 score tiles (the forward uses 3 and 1), plus 64-byte alignment */
size_t ddp_cpu_attn_tiled_scratch(int64_t nmax, int64_t dh)
{
    int64_t np = rup(nmax, TW), dhp = rup(dh, TW);
    return (size_t)(7 * np * dhp + 2 * TQB * np + 16);
}
static inline float *aligned(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* Sample s, per head: Q, K, V packed once into zero-padded [np x dhp] / [dhp x np] blocks (np, dhp: n, dh rounded up
 * to TW), then each tile of TQ query rows runs scores -> softmax (lse saved) -> dropout -> P V on a TQ x np score tile
 * that stays in L1/L2. A tile holds all of the sample's keys, so the softmax is exact in one pass (no running
 * rescale). */
DDP_CLONES void ddp_cpu_attn_tiled_fwd(const float *qkv, float *o, float *lse, const ddp_packing *pack, int64_t s,
                                       int64_t d, int heads, const ddp_dropout *dr, float *scratch)
{
    float *W = aligned(scratch);
    int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, dh = d / heads, ld = 3 * d, np = rup(n, TW),
            dhp = rup(dh, TW);
    float scale = 1.0f / sqrtf((float)dh), *Qp = W, *Kt = Qp + np * dhp, *Vp = Kt + np * dhp, *S = Vp + np * dhp;
    int drop = dr && dr->p > 0.0f;
    for (int h = 0; h < heads; h++) {
        const float *q = qkv + lo * ld + h * dh;
        pack_rows(Qp, q, ld, n, dh, np, dhp, 0);
        pack_rows(Kt, q + d, ld, n, dh, np, dhp, 1);
        pack_rows(Vp, q + 2 * d, ld, n, dh, np, dhp, 0);
        for (int64_t i0 = 0; i0 < n; i0 += TQ) {
            int64_t m = n - i0 < TQ ? n - i0 : TQ, mr = rup(m, TR);
            scores(S, Qp, Kt, i0, mr, np, dh, dhp);
            for (int64_t r = 0; r < mr; r++) {
                float *restrict Sr = S + r * np;
                if (r >= m) { /* padding rows of the last tile: zero weights */
                    memset(Sr, 0, (size_t)np * sizeof *Sr);
                    continue;
                }
                /* max and sum in TW lanes (a fixed order, and vectorised without reassociation); Sr is 0 past n */
                float lane[TW], mx = Sr[0], l;
                for (int j = 0; j < TW; j++) lane[j] = Sr[0];
                for (int64_t j0 = 0; j0 < n - TW + 1; j0 += TW)
                    for (int j = 0; j < TW; j++) lane[j] = Sr[j0 + j] > lane[j] ? Sr[j0 + j] : lane[j];
                for (int64_t j = n / TW * TW; j < n; j++) mx = Sr[j] > mx ? Sr[j] : mx;
                float lm = fold_max(lane);
                mx = lm > mx ? lm : mx;
                for (int64_t j = 0; j < n; j++) Sr[j] = ddp_expf((Sr[j] - mx) * scale);
                for (int64_t j = n; j < np; j++) Sr[j] = 0.0f;
                for (int j = 0; j < TW; j++) lane[j] = 0.0f;
                for (int64_t j0 = 0; j0 < np; j0 += TW)
                    for (int j = 0; j < TW; j++) lane[j] += Sr[j0 + j];
                l = fold_sum(lane);
                float inv = 1.0f / l;
                lse[(lo + i0 + r) * heads + h] = mx * scale + logf(l);
                if (drop) {
                    uint64_t rk = ddp_drop_samplekey(dr, pack->sid, s, i0 + r);
                    for (int64_t j = 0; j < n; j++) Sr[j] *= inv * ddp_drop_scale(dr, rk, ddp_drop_attn_unit(h, j));
                } else {
                    for (int64_t j = 0; j < n; j++) Sr[j] *= inv;
                }
            }
            /* O[i0 .. i0+m) = P Vp */
            for (int64_t r0 = 0; r0 < mr; r0 += TR)
                for (int64_t c0 = 0; c0 < dh; c0 += TW)
                    mk(o + (lo + i0 + r0) * d + h * dh + c0, d, (int)(m - r0 < TR ? m - r0 : TR), dh - c0, 0,
                       S + r0 * np, np, 1, Vp + c0, dhp, n);
        }
    }
}

/* Sample s, per head: Q, K, V and dO packed as in the forward; per tile of TQB query rows P = exp(S - lse) is
 * recomputed from the saved lse, then dP = dO V^T, dS = P (drop(dP) - D) scale, dQ = dS K per tile, and dV += drop(P)^T
 * dO, dK += dS^T Q into per-sample accumulators. */
DDP_CLONES void ddp_cpu_attn_tiled_bwd(const float *qkv, const float *dout, const float *lse, const float *D,
                                       float *dqkv, const ddp_packing *pack, int64_t s, int64_t d, int heads,
                                       const ddp_dropout *dr, float *scratch)
{
    float *W = aligned(scratch);
    int64_t lo = pack->off[s], n = pack->off[s + 1] - lo, dh = d / heads, ld = 3 * d, np = rup(n, TW),
            dhp = rup(dh, TW);
    int64_t blk = np * dhp;
    float scale = 1.0f / sqrtf((float)dh);
    float *Qp = W, *Kt = Qp + blk, *Kp = Kt + blk, *Vt = Kp + blk, *dOp = Vt + blk, *dKp = dOp + blk, *dVp = dKp + blk;
    float *P = dVp + blk, *dS = P + TQB * np;
    int drop = dr && dr->p > 0.0f;
    for (int h = 0; h < heads; h++) {
        const float *q = qkv + lo * ld + h * dh;
        float *dq = dqkv + lo * ld + h * dh;
        pack_rows(Qp, q, ld, n, dh, np, dhp, 0);
        pack_rows(Kt, q + d, ld, n, dh, np, dhp, 1);
        pack_rows(Kp, q + d, ld, n, dh, np, dhp, 0);
        pack_rows(Vt, q + 2 * d, ld, n, dh, np, dhp, 1);
        pack_rows(dOp, dout + lo * d + h * dh, d, n, dh, np, dhp, 0);
        memset(dKp, 0, (size_t)(2 * blk) * sizeof *dKp);
        for (int64_t i0 = 0; i0 < n; i0 += TQB) {
            int64_t m = n - i0 < TQB ? n - i0 : TQB, mr = rup(m, TR);
            scores(P, Qp, Kt, i0, mr, np, dh, dhp);   /* S */
            scores(dS, dOp, Vt, i0, mr, np, dh, dhp); /* dP = dO V^T */
            for (int64_t r = 0; r < mr; r++) {
                float *restrict Pr = P + r * np, *restrict dSr = dS + r * np;
                if (r >= m) {
                    memset(Pr, 0, (size_t)np * sizeof *Pr);
                    memset(dSr, 0, (size_t)np * sizeof *dSr);
                    continue;
                }
                float li = lse[(lo + i0 + r) * heads + h], Di = D[(lo + i0 + r) * heads + h];
                if (drop) {
                    uint64_t rk = ddp_drop_samplekey(dr, pack->sid, s, i0 + r);
                    for (int64_t j = 0; j < n; j++) {
                        float p = ddp_expf(Pr[j] * scale - li), ms = ddp_drop_scale(dr, rk, ddp_drop_attn_unit(h, j));
                        Pr[j] = p * ms;
                        dSr[j] = p * (dSr[j] * ms - Di) * scale;
                    }
                } else {
                    for (int64_t j = 0; j < n; j++) {
                        float p = ddp_expf(Pr[j] * scale - li);
                        Pr[j] = p;
                        dSr[j] = p * (dSr[j] - Di) * scale;
                    }
                }
                for (int64_t j = n; j < np; j++) Pr[j] = dSr[j] = 0.0f;
            }
            /* dQ[i0 .. i0+m) = dS K */
            for (int64_t r0 = 0; r0 < mr; r0 += TR)
                for (int64_t c0 = 0; c0 < dh; c0 += TW)
                    mk(dq + (i0 + r0) * ld + c0, ld, (int)(m - r0 < TR ? m - r0 : TR), dh - c0, 0, dS + r0 * np, np, 1,
                       Kp + c0, dhp, n);
            /* dV += drop(P)^T dO, dK += dS^T Q over this tile's m query rows */
            for (int64_t j0 = 0; j0 < n; j0 += TR)
                for (int64_t c0 = 0; c0 < dhp; c0 += TW) {
                    mk(dVp + j0 * dhp + c0, dhp, TR, TW, 1, P + j0, 1, np, dOp + i0 * dhp + c0, dhp, m);
                    mk(dKp + j0 * dhp + c0, dhp, TR, TW, 1, dS + j0, 1, np, Qp + i0 * dhp + c0, dhp, m);
                }
        }
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < dh; c++) {
                dq[j * ld + d + c] = dKp[j * dhp + c];
                dq[j * ld + 2 * d + c] = dVp[j * dhp + c];
            }
    }
}
