/* model_mlp.c — the MLP of docs/model.md ("mlp": two gelu layers per row, mean pooling per sample, linear
 * head, softmax cross-entropy) on a compute backend, exposed through the public ddp_model interface.
 * Packed batches: GEMMs run over the concatenated rows; no padding rows are computed. */
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/model/model_common.h"
#include "mpi_ddp/model/models.h"

#include "io/sampler.h" /* ddp_mix64 */

#include <math.h>
#include <stdlib.h>

typedef struct {
    ddp_backend *be;
    int64_t D, H, C, maxR, maxB;
    ddp_param_table tab; /* the 6 tensors; tab.off: their element offsets in the flat buffer */
    float *z1, *a1, *z2; /* [maxR, H]; after a training forward z1/z2 hold gelu', then z2 dZ2 */
    float *p, *dp, *logits, *dlogits;
    ddp_model_io io;      /* the batch on the backend, the loss/prob/pred block */
    double t_fwd, t_bwd;  /* cumulative seconds in train_step's forward and backward (benchmarks): device
                           * timers on device backends, the host clock on host ones */
    int has_own;          /* created by ddp_model_create: */
    ddp_model_config own; /* its configuration (ddp_model_own_config) */
} refmodel;

void ddp_refmodel_times(const ddp_model *model, double *fwd, double *bwd)
{
    const refmodel *m = model->self;
    *fwd = m->t_fwd;
    *bwd = m->t_bwd;
}

enum { W1, B1, W2, B2, W3, B3 };

/* Tensor k: U(+-1/sqrt(fan_in)), each value keyed by its element index in the flat buffer. */
static void ref_fill(const void *self, int k, float *dst, uint64_t seed)
{
    const refmodel *m = self;
    int64_t lo = m->tab.off[k], hi = m->tab.off[k + 1];
    float bound = 1.0f / sqrtf((float)(k < W2 ? m->D : m->H));
    uint64_t key = ddp_mix64(seed ^ ddp_mix64(0xa11ce + (uint64_t)k));
    for (int64_t j = lo; j < hi; j++) {
        double u = ((ddp_mix64(key ^ (uint64_t)j) >> 11) + 0.5) * 0x1.0p-53;
        dst[j - lo] = (float)((2.0 * u - 1.0) * bound);
    }
}

static ddp_status ref_init(void *self, float *params, uint64_t seed)
{
    refmodel *m = self;
    return ddp_model_init_params(m->be, &m->tab, params, seed, ref_fill, m);
}

/* Checks the batch and moves it to the backend; s: the pointers the kernels use. */
static ddp_status stage(refmodel *m, const ddp_batch *b, ddp_staged *s)
{
    DDP_CHECK(ddp_model_io_check(&m->io, b));
    return ddp_model_io_stage(m->be, &m->io, b, s);
}

/* Rows per forward block: the hidden layers run block by block (whole samples per block, at least one) so
 * that a block's pre-activations stay in cache from the GEMM that writes them to the gelu that reads them. */
static int64_t block_rows(const refmodel *m)
{
    if (m->be->row_block_bytes <= 0) return INT64_MAX;
    return m->be->row_block_bytes / (m->H * (int64_t)sizeof(float));
}

static ddp_status forward(refmodel *m, const ddp_batch *b, const float *P, const ddp_staged *s, int want_grad)
{
    ddp_backend *be = m->be;
    const float *x = s->x;
    const int64_t *off = s->off;
    int64_t B = b->nsamples, D = m->D, H = m->H, C = m->C, blk = block_rows(m);
    const int64_t *hoff = b->offsets; /* host copy of off: block boundaries */
    for (int64_t s0 = 0, s1; s0 < B; s0 = s1) {
        for (s1 = s0 + 1; s1 < B && hoff[s1 + 1] - hoff[s0] <= blk; s1++) {}
        int64_t r0 = hoff[s0], n = hoff[s1] - r0;
        float *z1 = m->z1 + r0 * H, *a1 = m->a1 + r0 * H, *z2 = m->z2 + r0 * H;
        /* training keeps gelu' in place of each pre-activation (z1, z2); layer 2's activations are pooled
         * as they are computed, never stored */
        DDP_CHECK(be->gemm(be, 0, 1, n, H, D, 1.0f, x + r0 * D, D, P + m->tab.off[W1], D, 0.0f, z1, H));
        DDP_CHECK(be->bias_gelu(be, z1, P + m->tab.off[B1], a1, want_grad ? z1 : NULL, n, H));
        DDP_CHECK(be->gemm(be, 0, 1, n, H, H, 1.0f, a1, H, P + m->tab.off[W2], H, 0.0f, z2, H));
        /* offsets are absolute row indices: the pool reads rows off[s0] .. off[s1]-1 of the whole z2 */
        DDP_CHECK(be->bias_gelu_pool(be, m->z2, P + m->tab.off[B2], want_grad ? m->z2 : NULL, off + s0, s1 - s0, H,
                                     m->p + s0 * H));
    }
    DDP_CHECK(be->gemm(be, 0, 1, B, C, H, 1.0f, m->p, H, P + m->tab.off[W3], H, 0.0f, m->logits, C));
    DDP_CHECK(be->add_bias(be, m->logits, P + m->tab.off[B3], B, C));
    DDP_CHECK(be->softmax_xent(be, m->logits, s->lab, B, C, want_grad ? m->dlogits : NULL, m->io.loss, m->io.pred,
                               m->io.prob));
    return DDP_OK;
}

/* Forward and backward; on device backends the forward and backward times come from timers (be->mark) read
 * after the results' download, so no host synchronisation is made for timing. */
static ddp_status ref_train_step(void *self, const ddp_batch *b, const float *P, float *G, ddp_forward_out *out,
                                 ddp_grad_ready_fn ready, void *ready_arg)
{
    refmodel *m = self;
    ddp_backend *be = m->be;
    ddp_staged s;
    int timers = !be->host_memory && be->mark;
    double t0 = ddp_model_clock();
    DDP_CHECK(stage(m, b, &s));
    if (timers) DDP_CHECK(be->mark(be, DDP_T_FWD0));
    DDP_CHECK(forward(m, b, P, &s, 1));
    if (timers) DDP_CHECK(be->mark(be, DDP_T_FWD1));
    const float *x = s.x;
    const int64_t *off = s.off;
    double t1 = ddp_model_clock();
    if (!timers) m->t_fwd += t1 - t0;
    int64_t R = b->nrows, B = b->nsamples, D = m->D, H = m->H, C = m->C;
    /* head */
    DDP_CHECK(be->gemm(be, 1, 0, C, H, B, 1.0f, m->dlogits, C, m->p, H, 1.0f, G + m->tab.off[W3], H));
    DDP_CHECK(be->colsum(be, m->dlogits, G + m->tab.off[B3], B, C, 1.0f));
    if (ready) ready(ready_arg, m->tab.off[W3], m->tab.off[6]);
    DDP_CHECK(be->gemm(be, 0, 0, B, H, C, 1.0f, m->dlogits, C, P + m->tab.off[W3], H, 0.0f, m->dp, H));
    /* pooling and layer 2: dZ2 in place of gelu'(z2), bias gradient in the same pass */
    DDP_CHECK(be->pool_gelu_backward(be, m->dp, off, B, m->z2, m->z2, R, H, G + m->tab.off[B2]));
    DDP_CHECK(be->gemm(be, 1, 0, H, H, R, 1.0f, m->z2, H, m->a1, H, 1.0f, G + m->tab.off[W2], H));
    if (ready) ready(ready_arg, m->tab.off[W2], m->tab.off[W3]);
    /* layer 1: dA1 -> dZ1 in a1 */
    DDP_CHECK(be->gemm(be, 0, 0, R, H, H, 1.0f, m->z2, H, P + m->tab.off[W2], H, 0.0f, m->a1, H));
    DDP_CHECK(be->gelu_backward(be, m->a1, m->z1, m->a1, R, H, G + m->tab.off[B1]));
    DDP_CHECK(be->gemm(be, 1, 0, H, D, R, 1.0f, m->a1, H, x, D, 1.0f, G + m->tab.off[W1], D));
    if (ready) ready(ready_arg, m->tab.off[W1], m->tab.off[W2]);
    if (timers) DDP_CHECK(be->mark(be, DDP_T_BWD1));
    DDP_CHECK(ddp_model_io_done(be, &m->io, 1)); /* the next batch's upload overlaps this one's compute */
    DDP_CHECK(ddp_model_io_collect(be, &m->io, b->nsamples, out));
    if (!timers) {
        m->t_bwd += ddp_model_clock() - t1;
        return DDP_OK;
    }
    DDP_CHECK(ddp_model_elapsed(be, DDP_T_FWD0, DDP_T_FWD1, &m->t_fwd));
    return ddp_model_elapsed(be, DDP_T_FWD1, DDP_T_BWD1, &m->t_bwd);
}

static ddp_status ref_eval_step(void *self, const ddp_batch *b, const float *P, ddp_forward_out *out)
{
    refmodel *m = self;
    ddp_staged s;
    DDP_CHECK(stage(m, b, &s));
    DDP_CHECK(forward(m, b, P, &s, 0));
    DDP_CHECK(ddp_model_io_done(m->be, &m->io, 0));
    return ddp_model_io_collect(m->be, &m->io, b->nsamples, out);
}

static ddp_status ref_prefetch(void *self, ddp_next_batch_fn next, void *arg)
{
    refmodel *m = self;
    ddp_model_io_set_next(&m->io, next, arg);
    return DDP_OK;
}

static void ref_destroy(void *self)
{
    refmodel *m = self;
    if (!m) return;
    ddp_backend *be = m->be;
    void *bufs[] = {m->z1, m->a1, m->z2, m->p, m->dp, m->logits, m->dlogits};
    ddp_model_release_all(be, bufs, sizeof bufs / sizeof bufs[0]);
    ddp_model_io_release(be, &m->io);
    ddp_param_table_free(&m->tab);
    free(m);
}

void ddp_refmodel_keep_config(ddp_model *model, const ddp_model_config *c)
{
    refmodel *m = model->self;
    m->own = *c;
    m->has_own = 1;
}

const ddp_model_config *ddp_refmodel_own_config(const ddp_model *model)
{
    const refmodel *m = model->destroy == ref_destroy ? model->self : NULL;
    return m && m->has_own ? &m->own : NULL;
}

#define BALLOC(ptr, count) DDP_MODEL_ALLOC(be, ptr, count)

ddp_status ddp_refmodel_create(ddp_ctx *ctx, ddp_device dev, int64_t D, int64_t H, int64_t C, int64_t maxR,
                               int64_t maxB, ddp_model *out)
{
    DDP_CTX_ARG(ctx);
    DDP_NONNULL(out, "out");
    ddp_backend *be;
    ddp_status st = ddp_ctx_backend(ctx, dev, &be);
    if (st == DDP_OK) st = ddp_refmodel_create_on(be, D, H, C, maxR, maxB, out);
    return ddp_ctx_local_failure(ctx, st); /* not collective: an out-of-memory is this rank's alone */
}

ddp_status ddp_refmodel_create_on(ddp_backend *be, int64_t D, int64_t H, int64_t C, int64_t maxR, int64_t maxB,
                                  ddp_model *out)
{
    if (D < 1 || H < 1 || C < 2)
        return ddp_set_error(DDP_ERR_ARG,
                             "reference model: need D, hidden >= 1 and classes >= 2 (got %lld, %lld, %lld)",
                             (long long)D, (long long)H, (long long)C);
    if (maxR < 1 || maxB < 1)
        return ddp_set_error(
            DDP_ERR_ARG,
            "reference model: the largest batch must hold >= 1 row and >= 1 sample (got %lld rows, %lld samples)",
            (long long)maxR, (long long)maxB);
    refmodel *m = ddp_calloc(1, sizeof *m);
    if (!m) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    ddp_status st = DDP_OK;
    m->be = be;
    m->D = D;
    m->H = H;
    m->C = C;
    m->maxR = maxR;
    m->maxB = maxB;
    static const char *names[6] = {"l1.weight", "l1.bias", "l2.weight", "l2.bias", "l3.weight", "l3.bias"};
    int64_t shapes[6][2] = {{H, D}, {H, 0}, {H, H}, {H, 0}, {C, H}, {C, 0}};
    DDP_TRY(ddp_param_table_alloc(&m->tab, 6));
    for (int t = 0; t < 6; t++) ddp_param_table_add(&m->tab, names[t], shapes[t][0], shapes[t][1]);
    DDP_TRY(be->reserve(be, maxR > maxB ? maxR : maxB));
    BALLOC(m->z1, maxR * H);
    BALLOC(m->a1, maxR * H);
    BALLOC(m->z2, maxR * H);
    BALLOC(m->p, maxB * H);
    BALLOC(m->dp, maxB * H);
    BALLOC(m->logits, maxB * C);
    BALLOC(m->dlogits, maxB * C);
    DDP_TRY(ddp_model_io_alloc(be, &m->io, D, maxR, maxB, 0));
    *out = (ddp_model){.name = "mlp",
                       .ntensors = 6,
                       .tensors = m->tab.spec,
                       .num_classes = (int)C,
                       .device = be->host_memory ? DDP_DEVICE_CPU : DDP_DEVICE_CUDA,
                       .self = m,
                       .init = ref_init,
                       .train_step = ref_train_step,
                       .eval_step = ref_eval_step,
                       .destroy = ref_destroy,
                       .prefetch = ref_prefetch};
    return DDP_OK;
done:
    ref_destroy(m);
    return st;
}
