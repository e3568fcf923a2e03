/* backend_cuda_enc.cuh — the CUDA backend's Transformer encoder ops (ddp_enc_ops in backend.h), included by
 * backend_cuda.cu (one translation unit: the same stream, cuBLAS handle and colsum). Each kernel runs one
 * row body of kern_enc.h per thread, the code the CPU backend loops over, so the emulator tests run the
 * same arithmetic the GPU does. Column reductions (layernorm dw/db, bias gradients, position gradients) run
 * one thread per column in row order, or through cu_colsum: deterministic, no atomics. Attention: one thread
 * per (query row, head) for the output and dq, one per (key row, head) for dk and dv, over the rows of the
 * thread's own sample only (offsets and the row -> sample map), with the online softmax of the CPU's fused
 * method. These are the reference kernels; faster ones (a warp per row, tiles in shared memory) must be
 * checked against them. */

static __device__ __host__ inline uint64_t row_dropkey(const ddp_dropout &dr, const int64_t *sid, int64_t s, int64_t pos)
{
    return dr.p > 0.0f ? ddp_drop_rowkey(dr.key, sid[s], pos) : 0;
}

__global__ void k_embed_fwd(float *h, const float *bias, const float *pos, const int64_t *off, const int64_t *seg,
                            int64_t R, int64_t d)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * d) return;
    int64_t r = i / d, c = i % d;
    h[i] += bias[c] + (pos ? pos[(r - off[seg[r]]) * d + c] : 0.0f);
}

/* dpos[j, c] += sum over samples s longer than j of dh[off[s] + j, c], in sample order */
__global__ void k_embed_bwd_pos(const float *dh, float *dpos, const int64_t *off, int64_t B, int64_t maxlen, int64_t d)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= maxlen * d) return;
    int64_t j = i / d, c = i % d;
    float acc = 0.0f;
    for (int64_t s = 0; s < B; s++)
        if (off[s + 1] - off[s] > j) acc += dh[(off[s] + j) * d + c];
    dpos[i] += acc;
}

__global__ void k_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                                int64_t R, int64_t d)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < R) ddp_layernorm_row(x + r * d, w, b, y + r * d, &mean[r], &rstd[r], d);
}

__global__ void k_layernorm_bwd_dx(const float *dy, const float *x, const float *w, const float *mean, const float *rstd,
                                   float *dx, int64_t R, int64_t d)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < R) ddp_layernorm_row_bwd(dy + r * d, x + r * d, w, mean[r], rstd[r], dx + r * d, d);
}

__global__ void k_layernorm_bwd_dwdb(const float *dy, const float *x, const float *mean, const float *rstd, float *dw,
                                     float *db, int64_t R, int64_t d)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= d) return;
    float sw = 0.0f, sb = 0.0f;
    for (int64_t r = 0; r < R; r++) {
        float g = dy[r * d + c];
        sw += g * (x[r * d + c] - mean[r]) * rstd[r];
        sb += g;
    }
    dw[c] += sw;
    db[c] += sb;
}

__global__ void k_attn_fwd(const float *qkv, float *o, float *lse, const int64_t *off, const int64_t *seg,
                           const int64_t *sid, int64_t R, int64_t d, int64_t H, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    int64_t r = i / H, h = i % H, s = seg[r], lo = off[s], n = off[s + 1] - lo, dh = d / H, ld = 3 * d;
    const float *base = qkv + lo * ld + h * dh;
    lse[i] = ddp_attn_row_fwd(qkv + r * ld + h * dh, base + d, base + 2 * d, ld, n, dh, 1.0f / sqrtf((float)dh),
                              o + r * d + h * dh, &dr, row_dropkey(dr, sid, s, r - lo), ddp_drop_attn_unit(h, 0));
}

/* D[r, h] = dO[r, head h] . O[r, head h] */
__global__ void k_attn_D(const float *dout, const float *o, float *D, int64_t R, int64_t d, int64_t H)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    int64_t r = i / H, h = i % H, dh = d / H;
    D[i] = ddp_dot(dout + r * d + h * dh, o + r * d + h * dh, dh);
}

__global__ void k_attn_bwd_q(const float *qkv, const float *dout, const float *lse, const float *D, float *dqkv,
                             const int64_t *off, const int64_t *seg, const int64_t *sid, int64_t R, int64_t d, int64_t H,
                             ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    int64_t r = i / H, h = i % H, s = seg[r], lo = off[s], n = off[s + 1] - lo, dh = d / H, ld = 3 * d;
    const float *base = qkv + lo * ld + h * dh;
    ddp_attn_row_bwd_q(qkv + r * ld + h * dh, base + d, base + 2 * d, ld, n, dh, 1.0f / sqrtf((float)dh),
                       dout + r * d + h * dh, lse[i], D[i], dqkv + r * ld + h * dh, &dr, row_dropkey(dr, sid, s, r - lo),
                       ddp_drop_attn_unit(h, 0));
}

__global__ void k_attn_bwd_kv(const float *qkv, const float *dout, const float *lse, const float *D, float *dqkv,
                              const int64_t *off, const int64_t *seg, const int64_t *sid, int64_t R, int64_t d, int64_t H,
                              ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    int64_t r = i / H, h = i % H, s = seg[r], lo = off[s], n = off[s + 1] - lo, dh = d / H, ld = 3 * d;
    const float *row = qkv + r * ld + h * dh;
    float *drow = dqkv + r * ld + h * dh;
    ddp_attn_row_bwd_kv(qkv + lo * ld + h * dh, row + d, row + 2 * d, ld, n, dh, 1.0f / sqrtf((float)dh),
                        dout + lo * d + h * dh, d, lse + lo * H + h, D + lo * H + h, H, drow + d, drow + 2 * d, &dr,
                        dr.p > 0.0f ? sid[s] : 0, ddp_drop_attn_unit(h, r - lo));
}

__global__ void k_gelu_erf_fwd(const float *z, const float *bias, float *a, float *dg, const int64_t *off,
                               const int64_t *seg, const int64_t *sid, int64_t R, int64_t cols, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * cols) return;
    int64_t r = i / cols, c = i % cols;
    float g, v = ddp_gelu_erf_fwd(z[i] + bias[c], dg ? &g : NULL);
    if (dg) dg[i] = g;
    if (dr.p > 0.0f) v *= ddp_drop_scale(&dr, row_dropkey(dr, sid, seg[r], r - off[seg[r]]), (uint64_t)c);
    a[i] = v;
}

/* dz = drop(dact) * dg */
__global__ void k_gelu_erf_bwd(const float *dact, const float *dg, float *dz, const int64_t *off, const int64_t *seg,
                               const int64_t *sid, int64_t R, int64_t cols, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * cols) return;
    int64_t r = i / cols, c = i % cols;
    float v = dact[i];
    if (dr.p > 0.0f) v *= ddp_drop_scale(&dr, row_dropkey(dr, sid, seg[r], r - off[seg[r]]), (uint64_t)c);
    dz[i] = v * dg[i];
}

/* out = h + drop(t + bias) */
__global__ void k_residual_fwd(float *out, const float *h, const float *t, const float *bias, const int64_t *off,
                               const int64_t *seg, const int64_t *sid, int64_t R, int64_t d, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * d) return;
    int64_t r = i / d, c = i % d;
    float v = t[i] + bias[c];
    if (dr.p > 0.0f) v *= ddp_drop_scale(&dr, row_dropkey(dr, sid, seg[r], r - off[seg[r]]), (uint64_t)c);
    out[i] = h[i] + v;
}

/* dt = drop(dh) */
__global__ void k_drop(const float *dh, float *dt, const int64_t *off, const int64_t *seg, const int64_t *sid, int64_t R,
                       int64_t d, ddp_dropout dr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * d) return;
    int64_t r = i / d, c = i % d;
    float v = dh[i];
    if (dr.p > 0.0f) v *= ddp_drop_scale(&dr, row_dropkey(dr, sid, seg[r], r - off[seg[r]]), (uint64_t)c);
    dt[i] = v;
}

/* one block per sample, threads over columns, rows in order */
__global__ void k_pool_mean_fwd(const float *x, float *out, const int64_t *off, int64_t d)
{
    int64_t s = blockIdx.x, lo = off[s], hi = off[s + 1];
    float inv = 1.0f / (float)(hi - lo);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (int64_t r = lo; r < hi; r++) acc += x[r * d + c];
        out[s * d + c] = acc * inv;
    }
}

__global__ void k_pool_mean_bwd(const float *dp, float *dx, const int64_t *off, const int64_t *seg, int64_t R, int64_t d)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * d) return;
    int64_t r = i / d, c = i % d, s = seg[r];
    dx[i] = dp[s * d + c] / (float)(off[s + 1] - off[s]);
}

/* ------------------------------------------------------------------ ops */
#define ENC_LAUNCH(kernel, n, ...)                                                                 \
    do {                                                                                           \
        if ((n) > 0) {                                                                             \
            DDP_LAUNCH(kernel, blocks_for((n), 128), 128, 0, cuda_of(b)->stream, __VA_ARGS__);           \
            LAUNCH_CHECK();                                                                        \
        }                                                                                          \
    } while (0)

static ddp_status cu_embed_fwd(ddp_backend *b, float *h, const float *bias, const float *pos, const ddp_packing *pack,
                               int64_t d)
{
    ENC_LAUNCH(k_embed_fwd, pack->R * d, h, bias, pos, pack->off, pack->seg, pack->R, d);
    return DDP_OK;
}

static ddp_status cu_embed_bwd(ddp_backend *b, const float *dh, float *dbias, float *dpos, const ddp_packing *pack,
                               int64_t d)
{
    if (dpos) ENC_LAUNCH(k_embed_bwd_pos, pack->max_rows * d, dh, dpos, pack->off, pack->B, pack->max_rows, d);
    return cu_colsum(b, dh, dbias, pack->R, d, 1.0f);
}

static ddp_status cu_layernorm_fwd(ddp_backend *b, const float *x, const float *w, const float *bias, float *y,
                                   float *mean, float *rstd, int64_t R, int64_t d)
{
    ENC_LAUNCH(k_layernorm_fwd, R, x, w, bias, y, mean, rstd, R, d);
    return DDP_OK;
}

static ddp_status cu_layernorm_bwd(ddp_backend *b, const float *dy, const float *x, const float *w, const float *mean,
                                   const float *rstd, float *dx, float *dw, float *db, int64_t R, int64_t d)
{
    ENC_LAUNCH(k_layernorm_bwd_dx, R, dy, x, w, mean, rstd, dx, R, d);
    if (R > 0) ENC_LAUNCH(k_layernorm_bwd_dwdb, d, dy, x, mean, rstd, dw, db, R, d);
    return DDP_OK;
}

static ddp_status cu_attention_fwd(ddp_backend *b, const float *qkv, float *o, float *lse, const ddp_packing *pack,
                                   int64_t d, int heads, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_attn_fwd, pack->R * heads, qkv, o, lse, pack->off, pack->seg, pack->sid, pack->R, d, (int64_t)heads, *dr);
    return DDP_OK;
}

static ddp_status cu_attention_bwd(ddp_backend *b, const float *qkv, const float *o, const float *dout, const float *lse,
                                   float *dqkv, float *delta, const ddp_packing *pack, int64_t d, int heads,
                                   const ddp_dropout *dr)
{
    int64_t n = pack->R * heads, H = heads;
    ENC_LAUNCH(k_attn_D, n, dout, o, delta, pack->R, d, H);
    ENC_LAUNCH(k_attn_bwd_q, n, qkv, dout, lse, delta, dqkv, pack->off, pack->seg, pack->sid, pack->R, d, H, *dr);
    ENC_LAUNCH(k_attn_bwd_kv, n, qkv, dout, lse, delta, dqkv, pack->off, pack->seg, pack->sid, pack->R, d, H, *dr);
    return DDP_OK;
}

static ddp_status cu_gelu_erf_fwd(ddp_backend *b, const float *z, const float *bias, float *a, float *dgelu,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_gelu_erf_fwd, pack->R * cols, z, bias, a, dgelu, pack->off, pack->seg, pack->sid, pack->R, cols, *dr);
    return DDP_OK;
}

static ddp_status cu_gelu_erf_bwd(ddp_backend *b, const float *dact, const float *dgelu, float *dz, float *dbias,
                                  const ddp_packing *pack, int64_t cols, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_gelu_erf_bwd, pack->R * cols, dact, dgelu, dz, pack->off, pack->seg, pack->sid, pack->R, cols, *dr);
    return cu_colsum(b, dz, dbias, pack->R, cols, 1.0f);
}

static ddp_status cu_residual_fwd(ddp_backend *b, float *out, const float *h, const float *t, const float *bias,
                                  const ddp_packing *pack, int64_t d, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_residual_fwd, pack->R * d, out, h, t, bias, pack->off, pack->seg, pack->sid, pack->R, d, *dr);
    return DDP_OK;
}

static ddp_status cu_residual_bwd(ddp_backend *b, const float *dh, float *dt, float *dbias, const ddp_packing *pack,
                                  int64_t d, const ddp_dropout *dr)
{
    ENC_LAUNCH(k_drop, pack->R * d, dh, dt, pack->off, pack->seg, pack->sid, pack->R, d, *dr);
    return cu_colsum(b, dt, dbias, pack->R, d, 1.0f);
}

static ddp_status cu_pool_mean_fwd(ddp_backend *b, const float *x, float *out, const ddp_packing *pack, int64_t d)
{
    if (pack->B > 0) {
        DDP_LAUNCH(k_pool_mean_fwd, (unsigned)pack->B, 128, 0, cuda_of(b)->stream, x, out, pack->off, d);
        LAUNCH_CHECK();
    }
    return DDP_OK;
}

static ddp_status cu_pool_mean_bwd(ddp_backend *b, const float *dp, float *dx, const ddp_packing *pack, int64_t d)
{
    ENC_LAUNCH(k_pool_mean_bwd, pack->R * d, dp, dx, pack->off, pack->seg, pack->R, d);
    return DDP_OK;
}

static const ddp_enc_ops cu_enc = {
    cu_embed_fwd,  cu_embed_bwd,    cu_layernorm_fwd, cu_layernorm_bwd, cu_attention_fwd, cu_attention_bwd,
    cu_gelu_erf_fwd, cu_gelu_erf_bwd, cu_residual_fwd, cu_residual_bwd, cu_pool_mean_fwd, cu_pool_mean_bwd,
};
