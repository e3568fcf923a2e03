/* transformer_pass.c — the Transformer encoder's forward and backward over a packed batch (docs/transformer.md) as
 * backend ops: GEMMs over all rows, attention per sample over its own rows, the fused element-wise ops of ddp_enc_ops.
 * Gradients accumulate into G; each layer's range goes to the gradient allreduce as soon as it is final. */
#include "mpi_ddp/model/model_transformer.h"
#include "mpi_ddp/core/status.h"

/* Times an op class on host backends (device work is asynchronous: no per-op host times there). */
#define TIMED(acc, call)                                           \
    do {                                                           \
        double t0_ = m->be->host_memory ? ddp_model_clock() : 0.0; \
        DDP_CHECK(call);                                           \
        if (m->be->host_memory) (acc) += ddp_model_clock() - t0_;  \
    } while (0)
/* Attention: on host backends as TIMED; in a train step on device backends between two device timers, read
 * when the step's results have been downloaded (model_transformer.c), while timers last. */
#define ATTN_TIMED(train, call)                                                                  \
    do {                                                                                         \
        int dev_ = (train) && !m->be->host_memory && m->be->mark && m->timers + 2 <= DDP_TIMERS; \
        if (dev_) DDP_CHECK(m->be->mark(m->be, m->timers));                                      \
        TIMED(m->t_attn, call);                                                                  \
        if (dev_) DDP_CHECK(m->be->mark(m->be, m->timers + 1));                                  \
        if (dev_) m->timers += 2;                                                                \
    } while (0)

/* y[R,N] = x[R,K] . W[N,K]^T (+ beta y) */
#define LINEAR(x, W, y, R, N, K, beta) TIMED(m->t_gemm, be->gemm(be, 0, 1, R, N, K, 1.0f, x, K, W, K, beta, y, N))
/* LINEAR of an activation x stored in bf16 when x16 */
#define LINEAR_X16(x, x16, W, y, R, N, K)                                                      \
    TIMED(m->t_gemm, (x16) ? be->gemm16(be, 0, 1, R, N, K, 1.0f, x, 1, K, W, 0, K, 0.0f, y, N) \
                           : be->gemm(be, 0, 1, R, N, K, 1.0f, x, K, W, K, 0.0f, y, N))
/* LINEAR of an activation x stored as the model keeps it: bf16 with bf16 activations (m->act16) */
#define LINEAR_ACT(x, W, y, R, N, K) LINEAR_X16(x, m->act16, W, y, R, N, K)

/* y[R,N] = x[R,K] . W[N,K]^T + bias, x stored as the model keeps it (act16: bf16), the bias in the GEMM's epilogue
 * where the backend fuses it (txmodel.fuse_epi); y16: y written in bf16 by that epilogue */
#define LINEAR_BIAS16(x, x16, W, bias, y, y16, R, N, K)                                                                \
    TIMED(m->t_gemm, ddp_gemm_epi(be, m->fuse_epi, DDP_EPI_BIAS | ((y16) ? DDP_EPI_C16 : 0), (float *)(bias), 0, 1, R, \
                                  N, K, 1.0f, x, x16, K, W, 0, K, 0.0f, y, N))
#define LINEAR_BIAS(x, x16, W, bias, y, R, N, K) LINEAR_BIAS16(x, x16, W, bias, y, 0, R, N, K)
enum { SITE_ATTN, SITE_RES1, SITE_FFN, SITE_RES2 };

/* The dropout of one site: keyed by (seed, optimizer step, layer, site); p = 0 in eval. */
static ddp_dropout drop_at(const txmodel *m, const ddp_batch *b, int train, int64_t layer, int site)
{
    ddp_dropout d = {.p = train ? m->dropout : 0.0f, .key = 0};
    if (d.p > 0.0f)
        d.key = ddp_hmix(m->seed ^ ddp_hmix((uint64_t)b->step * 0x2545f4914f6cdd1dULL ^
                                            ddp_hmix(0xd0 + (uint64_t)layer * 4 + (uint64_t)site)));
    return d;
}

/* y = layernorm(x) into an activation stored as y16 says (bf16 or fp32) */
static ddp_status norm(txmodel *m, const float *x, const float *w, const float *lb, void *y, int y16, float *mu,
                       float *rs)
{
    ddp_backend *be = m->be;
    int64_t R = m->pack.R, d = m->d;
    if (y16) return m->E->layernorm_fwd16(be, x, w, lb, y, mu, rs, R, d);
    return m->E->layernorm_fwd(be, x, w, lb, y, mu, rs, R, d);
}

/* out = h + drop(branch + tb), then y = layernorm(out): in one pass where the backend fuses them; at t16 the branch
 * is bf16 with tb added by its GEMM's epilogue */
static ddp_status residual_norm(txmodel *m, float *out, const float *h, const float *tb, const ddp_dropout *dr,
                                const float *w, const float *lb, void *y, int y16, float *mu, float *rs)
{
    const ddp_enc_ops *E = m->E;
    if (m->t16)
        return E->residual_layernorm_fwd16t(m->be, out, h, (const ddp_bf16 *)m->branch, &m->pack, m->d, dr, w, lb, y,
                                            y16, mu, rs);
    if (E->residual_layernorm_fwd)
        return E->residual_layernorm_fwd(m->be, out, h, m->branch, tb, &m->pack, m->d, dr, w, lb, y, y16, mu, rs);
    DDP_CHECK(E->residual_fwd(m->be, out, h, m->branch, tb, &m->pack, m->d, dr));
    return norm(m, out, w, lb, y, y16, mu, rs);
}

ddp_status ddp_tx_forward(txmodel *m, const ddp_batch *b, const float *P, const float *x, const int64_t *lab, int train)
{
    ddp_backend *be = m->be;
    const ddp_enc_ops *E = m->E;
    const ddp_packing *pack = &m->pack;
    int64_t R = pack->R, B = pack->B, d = m->d, f = m->f, H = m->heads;
    double t0 = ddp_model_clock();
    int timers = train && !be->host_memory && be->mark; /* device timers, read after the results' download */
    m->timers = DDP_T_ATTN0;
    if (timers) DDP_CHECK(be->mark(be, DDP_T_FWD0));
    float *h = m->L > 0 ? m->lay[0].h : m->hL;
    LINEAR(x, P + m->inp_w, h, R, d, m->D, 0.0f);
    DDP_CHECK(E->embed_fwd(be, h, P + m->inp_b, m->pos_w >= 0 ? P + m->pos_w : NULL, pack, d));
    /* Each residual add is followed by a layernorm of its result (norm2, the next layer's norm1, the final norm):
     * residual_norm fuses the two where the backend can. */
    if (m->L > 0)
        DDP_CHECK(norm(m, h, P + m->lay[0].p[T_N1_W], P + m->lay[0].p[T_N1_B], m->lay[0].y1, m->act16, m->lay[0].mu1,
                       m->lay[0].rs1));
    else
        DDP_CHECK(norm(m, h, P + m->nf_w, P + m->nf_b, m->yf, 0, m->muf, m->rsf));
    for (int64_t l = 0; l < m->L; l++) {
        tx_layer *y = &m->lay[l], *yn = l + 1 < m->L ? &m->lay[l + 1] : NULL;
        const int64_t *w = y->p;
        ddp_dropout drop_attn = drop_at(m, b, train, l, SITE_ATTN), drop_res1 = drop_at(m, b, train, l, SITE_RES1),
                    drop_ffn = drop_at(m, b, train, l, SITE_FFN), drop_res2 = drop_at(m, b, train, l, SITE_RES2);
        LINEAR_BIAS16(y->y1, m->act16, P + w[T_QKV_W], P + w[T_QKV_B], y->qkv, m->qkv16, R, 3 * d, d);
        ATTN_TIMED(train, E->attention_fwd(be, y->qkv, m->qkv16, y->o, m->o16, y->lse, pack, d, (int)H, &drop_attn));
        if (m->t16) /* the out projection's output in bf16, its bias added by the epilogue */
            LINEAR_BIAS16(y->o, m->o16, P + w[T_OUT_W], P + w[T_OUT_B], m->branch, 1, R, d, d);
        else
            LINEAR_X16(y->o, m->o16, P + w[T_OUT_W], m->branch, R, d, d);
        DDP_CHECK(residual_norm(m, y->hmid, y->h, P + w[T_OUT_B], &drop_res1, P + w[T_N2_W], P + w[T_N2_B], y->y2,
                                m->act16, y->mu2, y->rs2));
        if (m->z16) { /* z = linear1's output + bias, rounded to bf16 by the epilogue; the GELU reads it */
            LINEAR_BIAS16(y->y2, 1, P + w[T_L1_W], P + w[T_L1_B], y->dg, 1, R, f, d);
            DDP_CHECK(E->gelu_erf_fwd16z(be, (const ddp_bf16 *)y->dg, (ddp_bf16 *)y->a2, pack, f, &drop_ffn));
        } else if (m->act16) {
            LINEAR_ACT(y->y2, P + w[T_L1_W], y->dg, R, f, d);
            DDP_CHECK(E->gelu_erf_fwd16(be, y->dg, P + w[T_L1_B], (ddp_bf16 *)y->a2, train ? y->dg : NULL, pack, f,
                                        &drop_ffn));
        } else {
            LINEAR_ACT(y->y2, P + w[T_L1_W], y->dg, R, f, d);
            DDP_CHECK(E->gelu_erf_fwd(be, y->dg, P + w[T_L1_B], y->a2, train ? y->dg : NULL, pack, f, &drop_ffn));
        }
        if (m->t16) /* linear2's output likewise */
            LINEAR_BIAS16(y->a2, m->act16, P + w[T_L2_W], P + w[T_L2_B], m->branch, 1, R, d, f);
        else
            LINEAR_ACT(y->a2, P + w[T_L2_W], m->branch, R, d, f);
        if (yn)
            DDP_CHECK(residual_norm(m, yn->h, y->hmid, P + w[T_L2_B], &drop_res2, P + yn->p[T_N1_W], P + yn->p[T_N1_B],
                                    yn->y1, m->act16, yn->mu1, yn->rs1));
        else
            DDP_CHECK(residual_norm(m, m->hL, y->hmid, P + w[T_L2_B], &drop_res2, P + m->nf_w, P + m->nf_b, m->yf, 0,
                                    m->muf, m->rsf));
    }
    DDP_CHECK(E->pool_mean_fwd(be, m->yf, m->p, pack, d));
    LINEAR_BIAS(m->p, 0, P + m->head_w, P + m->head_b, m->logits, B, m->C, d);
    DDP_CHECK(
        be->softmax_xent(be, m->logits, lab, B, m->C, train ? m->dlogits : NULL, m->io.loss, m->io.pred, m->io.prob));
    if (timers)
        DDP_CHECK(be->mark(be, DDP_T_FWD1));
    else if (be->host_memory || !be->mark)
        m->t_fwd += ddp_model_clock() - t0; /* device: train steps' timers */
    return DDP_OK;
}

/* dW[N,K] += dy[R,N]^T . x[R,K] */
#define WGRAD(dy, x, dW, R, N, K) TIMED(m->t_gemm, be->gemm(be, 1, 0, N, K, R, 1.0f, dy, N, x, K, 1.0f, dW, K))
/* A linear layer's backward: dW[N,K] += dy[R,N]^T . x[R,K] (x stored as the model keeps it: x16), dbias[N] += sum_r dy
 * unless dbias is NULL, dx[R,K] = dy[R,N] . W[N,K]; one rounding of dy for both products where the backend fuses
 * (none where dy is bf16 already: LINEAR_BWD16; dx written in bf16 where dx16: LINEAR_BWD16X) */
#define LINEAR_BWD16X(dy, dy16, x, x16, W, dW, dbias, dx, dx16, R, N, K) \
    TIMED(m->t_gemm, ddp_linear_bwd(be, m->fuse_epi, dy, dy16, x, x16, W, dW, dbias, dx, dx16, R, N, K))
#define LINEAR_BWD16(dy, dy16, x, x16, W, dW, dbias, dx, R, N, K) \
    LINEAR_BWD16X(dy, dy16, x, x16, W, dW, dbias, dx, 0, R, N, K)
#define LINEAR_BWD(dy, x, x16, W, dW, dbias, dx, R, N, K) LINEAR_BWD16(dy, 0, x, x16, W, dW, dbias, dx, R, N, K)

/* dh += the backward of a layernorm of x from m->dy (its weight's gradients into gw, gb); with dh's bf16 rounding into
 * dqkv's buffer where a linear backward reads dh next (copy16, at dh16) */
static ddp_status norm_bwd(txmodel *m, const float *x, const float *w, const float *mu, const float *rs, float *gw,
                           float *gb, int copy16)
{
    if (m->dh16 && copy16)
        return m->E->layernorm_bwd16(m->be, m->dy, x, w, mu, rs, m->dh, (ddp_bf16 *)m->dqkv, gw, gb, m->pack.R, m->d);
    return m->E->layernorm_bwd(m->be, m->dy, x, w, mu, rs, m->dh, gw, gb, m->pack.R, m->d);
}

ddp_status ddp_tx_backward(txmodel *m, const ddp_batch *b, const float *P, float *G, const float *x,
                           ddp_grad_ready_fn ready, void *ready_arg)
{
    ddp_backend *be = m->be;
    const ddp_enc_ops *E = m->E;
    const ddp_packing *pack = &m->pack;
    int64_t R = pack->R, B = pack->B, d = m->d, f = m->f, C = m->C, H = m->heads;
    double t0 = ddp_model_clock();
    /* head, pooling and the final norm */
    LINEAR_BWD(m->dlogits, m->p, 0, P + m->head_w, G + m->head_w, G + m->head_b, m->dp, B, C, d);
    DDP_CHECK(E->pool_mean_bwd(be, m->dp, m->dy, pack, d));
    DDP_CHECK(be->zero(be, m->dh, (size_t)(R * d) * sizeof(float)));
    DDP_CHECK(norm_bwd(m, m->hL, P + m->nf_w, m->muf, m->rsf, G + m->nf_w, G + m->nf_b, m->L > 0));
    if (ready) ready(ready_arg, m->nf_w, m->total);
    /* dh: the gradient of the residual stream, flowing down through the layers */
    for (int64_t l = m->L - 1; l >= 0; l--) {
        tx_layer *y = &m->lay[l];
        const int64_t *w = y->p;
        ddp_dropout drop_attn = drop_at(m, b, 1, l, SITE_ATTN), drop_res1 = drop_at(m, b, 1, l, SITE_RES1),
                    drop_ffn = drop_at(m, b, 1, l, SITE_FFN), drop_res2 = drop_at(m, b, 1, l, SITE_RES2);
        /* Without dropout a residual branch's gradient is dh itself: with fused epilogues the branch's GEMMs read dh
         * (at dh16 its bf16 rounding, which the layernorm backward wrote), and its bias gradient comes from the weight
         * gradient's epilogue instead of a copy of dh that sums it */
        const void *t2 = m->dh16 ? (const void *)m->dqkv : m->dh, *t1 = t2;
        int t2_16 = m->dh16, t1_16 = m->dh16;
        float *b2 = G + w[T_L2_B], *b1 = G + w[T_OUT_B];
        /* FFN block: h_next = hmid + drop2(linear2(drop(gelu(linear1(norm2(hmid)))))) */
        if (!(m->fuse_epi && drop_res2.p == 0.0f)) {
            DDP_CHECK(E->residual_bwd(be, m->dh, m->branch, b2, pack, d, &drop_res2));
            t2 = m->branch, t2_16 = 0, b2 = NULL;
        }
        /* at z16 linear2's data gradient (the GELU output's) is written in bf16, the GELU backward's input */
        LINEAR_BWD16X(t2, t2_16, y->a2, m->act16, P + w[T_L2_W], G + w[T_L2_W], b2, m->dffn, m->z16, R, d, f);
        if (m->dz16) {  /* linear1's output gradient written in bf16 by the gelu backward: the rounding its two products
                         * read, without a pass of its own */
            if (m->z16) /* gelu' recomputed from the bf16 z */
                DDP_CHECK(E->gelu_erf_bwd16z(be, (const ddp_bf16 *)m->dffn, (const ddp_bf16 *)y->dg, m->dz16,
                                             G + w[T_L1_B], pack, f, &drop_ffn));
            else
                DDP_CHECK(E->gelu_erf_bwd16(be, m->dffn, y->dg, m->dz16, G + w[T_L1_B], pack, f, &drop_ffn));
            LINEAR_BWD16(m->dz16, 1, y->y2, m->act16, P + w[T_L1_W], G + w[T_L1_W], NULL, m->dy, R, f, d);
        } else {
            DDP_CHECK(E->gelu_erf_bwd(be, m->dffn, y->dg, m->dffn, G + w[T_L1_B], pack, f, &drop_ffn));
            LINEAR_BWD(m->dffn, y->y2, m->act16, P + w[T_L1_W], G + w[T_L1_W], NULL, m->dy, R, f, d);
        }
        DDP_CHECK(norm_bwd(m, y->hmid, P + w[T_N2_W], y->mu2, y->rs2, G + w[T_N2_W], G + w[T_N2_B], 1));
        /* attention block: hmid = h + drop1(out_proj(attention(in_proj(norm1(h))))) */
        if (!(m->fuse_epi && drop_res1.p == 0.0f)) {
            DDP_CHECK(E->residual_bwd(be, m->dh, m->branch, b1, pack, d, &drop_res1));
            t1 = m->branch, t1_16 = 0, b1 = NULL;
        }
        /* at do16 the out projection's data gradient dO is written in bf16, the attention backward's input */
        LINEAR_BWD16X(t1, t1_16, y->o, m->o16, P + w[T_OUT_W], G + w[T_OUT_W], b1, m->dy, m->do16, R, d, d);
        ATTN_TIMED(1, E->attention_bwd(be, y->qkv, m->qkv16, y->o, m->o16, m->dy, m->do16, y->lse, m->dqkv, m->dqkv16,
                                       m->attn_delta, pack, d, (int)H, &drop_attn));
        LINEAR_BWD16(m->dqkv, m->dqkv16, y->y1, m->act16, P + w[T_QKV_W], G + w[T_QKV_W], G + w[T_QKV_B], m->dy, R,
                     3 * d, d);
        /* The key bias adds q.b_k to every score of a row, which softmax ignores: its gradient is exactly 0.
         * Summed, it is rounding noise that depends on the batch's packing, and AdamW would turn that noise
         * into +-lr steps that differ between world sizes. It is written as the exact 0 instead. */
        DDP_CHECK(be->zero(be, G + w[T_QKV_B] + d, (size_t)d * sizeof(float)));
        DDP_CHECK(norm_bwd(m, y->h, P + w[T_N1_W], y->mu1, y->rs1, G + w[T_N1_W], G + w[T_N1_B], l > 0));
        if (ready) ready(ready_arg, y->lo, y->hi);
    }
    /* input projection and positions */
    WGRAD(m->dh, x, G + m->inp_w, R, d, m->D);
    DDP_CHECK(E->embed_bwd(be, m->dh, G + m->inp_b, m->pos_w >= 0 ? G + m->pos_w : NULL, pack, d));
    if (ready) ready(ready_arg, 0, m->body_lo);
    if (!be->host_memory && be->mark)
        DDP_CHECK(be->mark(be, DDP_T_BWD1));
    else
        m->t_bwd += ddp_model_clock() - t0;
    return DDP_OK;
}
