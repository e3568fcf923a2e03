/* backend_cpu_enc.c — the CPU backend's Transformer encoder ops (ddp_enc_ops, backend.h): loops over kern_enc.h's row
 * bodies and their bf16-output "16" forms; the attention ops are backend_cpu_enc_attn.c's (docs/transformer.md, "How
 * the CPU and GPU compute it"). */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cpu/backend_cpu_attn.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/core/status.h"

#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DDP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DDP_CLONES
#endif
/* Row bodies shared by several ops: always inlined, so each is compiled inside each caller's ISA clone (a
 * plain static inline called from two clones stayed an out-of-line baseline function, and scalar). */
#if defined(__GNUC__)
#define DDP_ROW static inline __attribute__((always_inline))
#else
#define DDP_ROW static inline
#endif


static ddp_status cpu_embed_fwd(ddp_backend *b, float *h, const float *bias, const float *pos, const ddp_packing *pack,
                                int64_t d)
{
    (void)b;
    for (int64_t s = 0; s < pack->B; s++)
        for (int64_t r = pack->off[s]; r < pack->off[s + 1]; r++) {
            float *hr = h + r * d;
            const float *pr = pos ? pos + (r - pack->off[s]) * d : NULL;
            for (int64_t c = 0; c < d; c++) hr[c] += bias[c] + (pr ? pr[c] : 0.0f);
        }
    return DDP_OK;
}

static ddp_status cpu_embed_bwd(ddp_backend *b, const float *dh, float *dbias, float *dpos, const ddp_packing *pack,
                                int64_t d)
{
    (void)b;
    for (int64_t s = 0; s < pack->B; s++)
        for (int64_t r = pack->off[s]; r < pack->off[s + 1]; r++) {
            const float *g = dh + r * d;
            float *dp = dpos ? dpos + (r - pack->off[s]) * d : NULL;
            for (int64_t c = 0; c < d; c++) dbias[c] += g[c];
            if (dp)
                for (int64_t c = 0; c < d; c++) dp[c] += g[c];
        }
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_layernorm_fwd(ddp_backend *b, const float *x, const float *w, const float *bias,
                                               float *y, float *mean, float *rstd, int64_t R, int64_t d)
{
    (void)b;
    for (int64_t r = 0; r < R; r++) ddp_layernorm_row(x + r * d, w, bias, y + r * d, &mean[r], &rstd[r], d);
    return DDP_OK;
}

/* n floats rounded to bf16. The "16" ops (layernorm_fwd16, gelu_erf_fwd16, residual_layernorm_fwd with y16) run the
 * fp32 ops' row bodies into a row of scratch and store it rounded by bf16_round.h, the rounding backend_cpu_bf16.c
 * applies to GEMM operands. */
DDP_ROW void round_row16(const float *x, ddp_bf16 *restrict y, int64_t n)
{
    for (int64_t c = 0; c < n; c++) y[c] = ddp_bf16_bits(x[c]);
}

/* A row of n floats of scratch for the "16" ops (written before it is read). */
static ddp_status row_scratch(int64_t n, const char *op, float **row)
{
    *row = ddp_malloc((size_t)(n > 0 ? n : 1), sizeof **row);
    if (!*row) return ddp_set_error(DDP_ERR_NOMEM, "out of memory: a row of %lld floats for %s", (long long)n, op);
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_layernorm_fwd16(ddp_backend *b, const float *x, const float *w, const float *bias,
                                                 ddp_bf16 *y, float *mean, float *rstd, int64_t R, int64_t d)
{
    (void)b;
    float *row;
    DDP_CHECK(row_scratch(d, "layernorm_fwd16", &row));
    for (int64_t r = 0; r < R; r++) {
        ddp_layernorm_row(x + r * d, w, bias, row, &mean[r], &rstd[r], d);
        round_row16(row, y + r * d, d);
    }
    free(row);
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_layernorm_bwd(ddp_backend *b, const float *dy, const float *x, const float *w,
                                               const float *mean, const float *rstd, float *dx, float *dw, float *db,
                                               int64_t R, int64_t d)
{
    (void)b;
    for (int64_t r = 0; r < R; r++) {
        const float *dyr = dy + r * d, *xr = x + r * d;
        float mu = mean[r], rs = rstd[r];
        ddp_layernorm_row_bwd(dyr, xr, w, mu, rs, dx + r * d, d);
        for (int64_t c = 0; c < d; c++) {
            dw[c] += dyr[c] * (xr[c] - mu) * rs;
            db[c] += dyr[c];
        }
    }
    return DDP_OK;
}

/* layernorm_bwd, then dx's rows rounded into dx16 */
static ddp_status cpu_layernorm_bwd16(ddp_backend *b, const float *dy, const float *x, const float *w,
                                      const float *mean, const float *rstd, float *dx, ddp_bf16 *dx16, float *dw,
                                      float *db, int64_t R, int64_t d)
{
    DDP_CHECK(cpu_layernorm_bwd(b, dy, x, w, mean, rstd, dx, dw, db, R, d));
    for (int64_t r = 0; r < R; r++) round_row16(dx + r * d, dx16 + r * d, d);
    return DDP_OK;
}

/* ------------------------------------------------------------------ element-wise */
/* One row of gelu_erf_fwd: ar = drop(gelu_erf(zr + bias)), gr = gelu_erf'(zr + bias) when non-NULL (gr may be zr:
 * element by element, so still vectorisable); rk: the row's dropout key. */
DDP_ROW void gelu_erf_row(const float *zr, const float *bias, float *ar, float *gr, int64_t cols, int drop,
                          const ddp_dropout *dr, uint64_t rk)
{
    if (gr) {
        for (int64_t c = 0; c < cols; c++) {
            float g, v = ddp_gelu_erf_fwd(zr[c] + bias[c], &g);
            gr[c] = g;
            ar[c] = v;
        }
    } else {
        for (int64_t c = 0; c < cols; c++) ar[c] = ddp_gelu_erf_fwd(zr[c] + bias[c], NULL);
    }
    if (drop)
        for (int64_t c = 0; c < cols; c++) ar[c] *= ddp_drop_scale(dr, rk, (uint64_t)c);
}

DDP_CLONES static ddp_status cpu_gelu_erf_fwd(ddp_backend *b, const float *z, const float *bias, float *a, float *dgelu,
                                              const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    (void)b;
    int drop = dr && dr->p > 0.0f;
    for (int64_t r = 0; r < pack->R; r++) {
        uint64_t rk = drop ? ddp_drop_packedkey(dr, pack->off, pack->seg, pack->sid, r) : 0;
        gelu_erf_row(z + r * cols, bias, a + r * cols, dgelu ? dgelu + r * cols : NULL, cols, drop, dr, rk);
    }
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_gelu_erf_fwd16(ddp_backend *b, const float *z, const float *bias, ddp_bf16 *a,
                                                float *dgelu, const ddp_packing *pack, int64_t cols,
                                                const ddp_dropout *dr)
{
    (void)b;
    int drop = dr && dr->p > 0.0f;
    float *row;
    DDP_CHECK(row_scratch(cols, "gelu_erf_fwd16", &row));
    for (int64_t r = 0; r < pack->R; r++) {
        uint64_t rk = drop ? ddp_drop_packedkey(dr, pack->off, pack->seg, pack->sid, r) : 0;
        gelu_erf_row(z + r * cols, bias, row, dgelu ? dgelu + r * cols : NULL, cols, drop, dr, rk);
        round_row16(row, a + r * cols, cols);
    }
    free(row);
    return DDP_OK;
}

/* dst = drop(src) * mul (mul NULL: drop(src)), dbias += dst: the backward of gelu_erf (mul = gelu') and of the
 * residual's dropout, as the CUDA backend's k_drop_mul_part; with dst16, dst is stored there rounded to bf16 instead
 * (dbias sums the fp32 values) */
static inline void drop_mul_rows(const float *src, const float *mul, float *dst, ddp_bf16 *dst16, float *dbias,
                                 const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    int drop = dr && dr->p > 0.0f;
    for (int64_t r = 0; r < pack->R; r++) {
        const float *sr = src + r * cols, *mr = mul ? mul + r * cols : NULL;
        float *dstr = dst16 ? NULL : dst + r * cols;
        ddp_bf16 *d16 = dst16 ? dst16 + r * cols : NULL;
        uint64_t rk = ddp_drop_packedkey(dr, pack->off, pack->seg, pack->sid, r);
        for (int64_t c = 0; c < cols; c++) {
            float v = ddp_drop_apply(drop, dr, rk, (uint64_t)c, sr[c]);
            if (mr) v *= mr[c];
            if (d16)
                d16[c] = ddp_bf16_bits(v);
            else
                dstr[c] = v;
            dbias[c] += v;
        }
    }
}

DDP_CLONES static ddp_status cpu_gelu_erf_bwd(ddp_backend *b, const float *dact, const float *dgelu, float *dz,
                                              float *dbias, const ddp_packing *pack, int64_t cols,
                                              const ddp_dropout *dr)
{
    (void)b;
    drop_mul_rows(dact, dgelu, dz, NULL, dbias, pack, cols, dr);
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_gelu_erf_bwd16(ddp_backend *b, const float *dact, const float *dgelu, ddp_bf16 *dz,
                                                float *dbias, const ddp_packing *pack, int64_t cols,
                                                const ddp_dropout *dr)
{
    (void)b;
    drop_mul_rows(dact, dgelu, NULL, dz, dbias, pack, cols, dr);
    return DDP_OK;
}

/* One row of residual_fwd: orow = hr + drop(tr + bias) (orow may be hr); rk: the row's dropout key. */
DDP_ROW void residual_row(float *orow, const float *hr, const float *tr, const float *bias, int64_t d, int drop,
                          const ddp_dropout *dr, uint64_t rk)
{
    for (int64_t c = 0; c < d; c++) orow[c] = hr[c] + ddp_drop_apply(drop, dr, rk, (uint64_t)c, tr[c] + bias[c]);
}

DDP_CLONES static ddp_status cpu_residual_fwd(ddp_backend *b, float *out, const float *h, const float *t,
                                              const float *bias, const ddp_packing *pack, int64_t d,
                                              const ddp_dropout *dr)
{
    (void)b;
    int drop = dr && dr->p > 0.0f;
    for (int64_t r = 0; r < pack->R; r++) {
        uint64_t rk = ddp_drop_packedkey(dr, pack->off, pack->seg, pack->sid, r);
        residual_row(out + r * d, h + r * d, t + r * d, bias, d, drop, dr, rk);
    }
    return DDP_OK;
}

/* residual_fwd and layernorm_fwd (or layernorm_fwd16: y16) of each row while it is in cache: the bodies of both ops */
DDP_CLONES static ddp_status cpu_residual_layernorm_fwd(ddp_backend *b, float *out, const float *h, const float *t,
                                                        const float *tbias, const ddp_packing *pack, int64_t d,
                                                        const ddp_dropout *dr, const float *w, const float *lbias,
                                                        void *y, int y16, float *mean, float *rstd)
{
    (void)b;
    int drop = dr && dr->p > 0.0f;
    float *row = NULL;
    if (y16) DDP_CHECK(row_scratch(d, "residual_layernorm_fwd", &row));
    for (int64_t r = 0; r < pack->R; r++) {
        uint64_t rk = ddp_drop_packedkey(dr, pack->off, pack->seg, pack->sid, r);
        float *orow = out + r * d;
        residual_row(orow, h + r * d, t + r * d, tbias, d, drop, dr, rk);
        if (y16) {
            ddp_layernorm_row(orow, w, lbias, row, &mean[r], &rstd[r], d);
            round_row16(row, (ddp_bf16 *)y + r * d, d);
        } else {
            ddp_layernorm_row(orow, w, lbias, (float *)y + r * d, &mean[r], &rstd[r], d);
        }
    }
    free(row);
    return DDP_OK;
}

DDP_CLONES static ddp_status cpu_residual_bwd(ddp_backend *b, const float *dh, float *dt, float *dbias,
                                              const ddp_packing *pack, int64_t d, const ddp_dropout *dr)
{
    (void)b;
    drop_mul_rows(dh, NULL, dt, NULL, dbias, pack, d, dr);
    return DDP_OK;
}

static ddp_status cpu_pool_mean_fwd(ddp_backend *b, const float *x, float *out, const ddp_packing *pack, int64_t d)
{
    (void)b;
    for (int64_t s = 0; s < pack->B; s++) {
        float *o = out + s * d;
        memset(o, 0, (size_t)d * sizeof *o);
        for (int64_t r = pack->off[s]; r < pack->off[s + 1]; r++)
            for (int64_t c = 0; c < d; c++) o[c] += x[r * d + c];
        float inv = 1.0f / (float)(pack->off[s + 1] - pack->off[s]);
        for (int64_t c = 0; c < d; c++) o[c] *= inv;
    }
    return DDP_OK;
}

static ddp_status cpu_pool_mean_bwd(ddp_backend *b, const float *dp, float *dx, const ddp_packing *pack, int64_t d)
{
    (void)b;
    for (int64_t s = 0; s < pack->B; s++) {
        float inv = 1.0f / (float)(pack->off[s + 1] - pack->off[s]);
        for (int64_t r = pack->off[s]; r < pack->off[s + 1]; r++)
            for (int64_t c = 0; c < d; c++) dx[r * d + c] = dp[s * d + c] * inv;
    }
    return DDP_OK;
}

static const ddp_enc_ops cpu_enc = {
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .attention_fwd = ddp_cpu_attention_fwd,
    .attention_bwd = ddp_cpu_attention_bwd,
    .gelu_erf_fwd = cpu_gelu_erf_fwd,
    .gelu_erf_bwd = cpu_gelu_erf_bwd,
    .residual_fwd = cpu_residual_fwd,
    .residual_bwd = cpu_residual_bwd,
    .pool_mean_fwd = cpu_pool_mean_fwd,
    .pool_mean_bwd = cpu_pool_mean_bwd,
    .layernorm_fwd16 = cpu_layernorm_fwd16,
    .gelu_erf_fwd16 = cpu_gelu_erf_fwd16,
    .residual_layernorm_fwd = cpu_residual_layernorm_fwd,
    .gelu_erf_bwd16 = cpu_gelu_erf_bwd16,
    .layernorm_bwd16 = cpu_layernorm_bwd16,
};

const ddp_enc_ops *ddp_cpu_enc_ops(void) { return &cpu_enc; }

ddp_status ddp_backend_require_enc(const ddp_backend *b)
{
    if (!b->enc) return ddp_set_error(DDP_ERR_ARG, "backend %s has no Transformer encoder ops", b->name);
#define DDP_REQ(op) \
    if (!b->enc->op) return ddp_set_error(DDP_ERR_ARG, "backend %s lacks enc.%s", b->name, #op);
    DDP_ENC_OPS(DDP_REQ)
#undef DDP_REQ
    return DDP_OK;
}
