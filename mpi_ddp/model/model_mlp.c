/* model_mlp.c — the MLP of docs/model.md ("mlp": two gelu layers per row, mean pooling per sample, linear
 * head, softmax cross-entropy) on a compute backend, exposed through the public ddp_model interface.
 * Packed batches: GEMMs run over the concatenated rows; no padding rows are computed. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"

#include "io/sampler.h" /* ddp_mix64 */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    ddp_backend *be;
    int64_t D, H, C, maxR, maxB;
    ddp_tensor_spec spec[6];
    int64_t off[7];                 /* element offsets of the tensors in the flat buffer */
    float *z1, *a1, *z2;            /* [maxR, H]; after a training forward z1/z2 hold gelu', then z2 dZ2 */
    float *p, *dp, *logits, *dlogits;
    void *out;                      /* one block: loss [maxB], prob [maxB], pred [maxB] (one download) */
    float *loss, *prob;
    int64_t *pred;
    float *x_dev;                   /* device copy of the batch (non-host backends) */
    int64_t *off_dev, *lab_dev;
    void *h_out;                    /* host staging of `out`, same layout */
    double t_fwd, t_bwd;            /* cumulative seconds in train_step's forward and backward (benchmarks) */
} refmodel;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void ddp_refmodel_times(const ddp_model *model, double *fwd, double *bwd)
{
    const refmodel *m = model->self;
    *fwd = m->t_fwd;
    *bwd = m->t_bwd;
}

enum { W1, B1, W2, B2, W3, B3 };

static ddp_status ref_init(void *self, float *params, uint64_t seed)
{
    refmodel *m = self;
    int64_t fan_in[6] = {m->D, m->D, m->H, m->H, m->H, m->H};
    int64_t n = m->off[6];
    float *host = m->be->host_memory ? params : ddp_calloc((size_t)n, sizeof(float));
    if (!host) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    for (int t = 0; t < 6; t++) {
        float bound = 1.0f / sqrtf((float)fan_in[t]);
        uint64_t key = ddp_mix64(seed ^ ddp_mix64(0xa11ce + (uint64_t)t));
        for (int64_t j = m->off[t]; j < m->off[t + 1]; j++) {
            double u = ((ddp_mix64(key ^ (uint64_t)j) >> 11) + 0.5) * 0x1.0p-53;
            host[j] = (float)((2.0 * u - 1.0) * bound);
        }
    }
    ddp_status st = DDP_OK;
    if (!m->be->host_memory) {
        st = m->be->upload(m->be, params, host, (size_t)n * sizeof(float));
        free(host);
    }
    return st;
}

/* Moves the batch to the backend; returns the pointers the kernels use. */
static ddp_status stage(refmodel *m, const ddp_batch *b, const float **x, const int64_t **off, const int64_t **lab)
{
    if (b->nrows > m->maxR || b->nsamples > m->maxB)
        return ddp_set_error(DDP_ERR_ARG, "batch of %lld samples / %lld rows exceeds the model's workspace (%lld / %lld)",
                             (long long)b->nsamples, (long long)b->nrows, (long long)m->maxB, (long long)m->maxR);
    if (b->dim != m->D)
        return ddp_set_error(DDP_ERR_ARG, "batch has D=%lld, model expects D=%lld", (long long)b->dim, (long long)m->D);
    ddp_backend *be = m->be;
    if (be->host_memory) {
        *x = b->x;
        *off = b->offsets;
        *lab = b->labels;
        return DDP_OK;
    }
    /* no host synchronisation: the batch stays valid until the step's results are downloaded (collect) */
    DDP_CHECK(be->upload_async(be, m->x_dev, b->x, (size_t)(b->nrows * m->D) * sizeof(float)));
    DDP_CHECK(be->upload_async(be, m->off_dev, b->offsets, (size_t)(b->nsamples + 1) * sizeof(int64_t)));
    DDP_CHECK(be->upload_async(be, m->lab_dev, b->labels, (size_t)b->nsamples * sizeof(int64_t)));
    *x = m->x_dev;
    *off = m->off_dev;
    *lab = m->lab_dev;
    return DDP_OK;
}

/* Rows per forward block: the hidden layers run block by block (whole samples per block, at least one) so
 * that a block's pre-activations stay in cache from the GEMM that writes them to the gelu that reads them. */
static int64_t block_rows(const refmodel *m)
{
    if (m->be->row_block_bytes <= 0) return INT64_MAX;
    return m->be->row_block_bytes / (m->H * (int64_t)sizeof(float));
}

static ddp_status forward(refmodel *m, const ddp_batch *b, const float *P, const float *x, const int64_t *off,
                          const int64_t *lab, int want_grad)
{
    ddp_backend *be = m->be;
    int64_t B = b->nsamples, D = m->D, H = m->H, C = m->C, blk = block_rows(m);
    const int64_t *hoff = b->offsets; /* host copy of off: block boundaries */
    for (int64_t s0 = 0, s1; s0 < B; s0 = s1) {
        for (s1 = s0 + 1; s1 < B && hoff[s1 + 1] - hoff[s0] <= blk; s1++) {}
        int64_t r0 = hoff[s0], n = hoff[s1] - r0;
        float *z1 = m->z1 + r0 * H, *a1 = m->a1 + r0 * H, *z2 = m->z2 + r0 * H;
        /* training keeps gelu' in place of each pre-activation (z1, z2); layer 2's activations are pooled
         * as they are computed, never stored */
        DDP_CHECK(be->gemm(be, 0, 1, n, H, D, 1.0f, x + r0 * D, D, P + m->off[W1], D, 0.0f, z1, H));
        DDP_CHECK(be->bias_gelu(be, z1, P + m->off[B1], a1, want_grad ? z1 : NULL, n, H));
        DDP_CHECK(be->gemm(be, 0, 1, n, H, H, 1.0f, a1, H, P + m->off[W2], H, 0.0f, z2, H));
        /* offsets are absolute row indices: the pool reads rows off[s0] .. off[s1]-1 of the whole z2 */
        DDP_CHECK(be->bias_gelu_pool(be, m->z2, P + m->off[B2], want_grad ? m->z2 : NULL, off + s0, s1 - s0, H,
                                     m->p + s0 * H));
    }
    DDP_CHECK(be->gemm(be, 0, 1, B, C, H, 1.0f, m->p, H, P + m->off[W3], H, 0.0f, m->logits, C));
    DDP_CHECK(be->add_bias(be, m->logits, P + m->off[B3], B, C));
    DDP_CHECK(be->softmax_xent(be, m->logits, lab, B, C, want_grad ? m->dlogits : NULL, m->loss, m->pred, m->prob));
    return DDP_OK;
}

static ddp_status collect(refmodel *m, const ddp_batch *b, ddp_forward_out *out)
{
    return ddp_model_collect(m->be, m->out, m->h_out, m->maxB, b->nsamples, out);
}

static ddp_status ref_train_step(void *self, const ddp_batch *b, const float *P, float *G, ddp_forward_out *out,
                                 ddp_grad_ready_fn ready, void *ready_arg)
{
    refmodel *m = self;
    ddp_backend *be = m->be;
    const float *x = NULL;
    const int64_t *off = NULL, *lab = NULL;
    double t0 = now_s();
    DDP_CHECK(stage(m, b, &x, &off, &lab));
    DDP_CHECK(forward(m, b, P, x, off, lab, 1));
    if (!be->host_memory) DDP_CHECK(be->synchronize(be));
    double t1 = now_s();
    m->t_fwd += t1 - t0;
    int64_t R = b->nrows, B = b->nsamples, D = m->D, H = m->H, C = m->C;
    /* head */
    DDP_CHECK(be->gemm(be, 1, 0, C, H, B, 1.0f, m->dlogits, C, m->p, H, 1.0f, G + m->off[W3], H));
    DDP_CHECK(be->colsum(be, m->dlogits, G + m->off[B3], B, C, 1.0f));
    if (ready) ready(ready_arg, m->off[W3], m->off[6]);
    DDP_CHECK(be->gemm(be, 0, 0, B, H, C, 1.0f, m->dlogits, C, P + m->off[W3], H, 0.0f, m->dp, H));
    /* pooling and layer 2: dZ2 in place of gelu'(z2), bias gradient in the same pass */
    DDP_CHECK(be->pool_gelu_backward(be, m->dp, off, B, m->z2, m->z2, R, H, G + m->off[B2]));
    DDP_CHECK(be->gemm(be, 1, 0, H, H, R, 1.0f, m->z2, H, m->a1, H, 1.0f, G + m->off[W2], H));
    if (ready) ready(ready_arg, m->off[W2], m->off[W3]);
    /* layer 1: dA1 -> dZ1 in a1 */
    DDP_CHECK(be->gemm(be, 0, 0, R, H, H, 1.0f, m->z2, H, P + m->off[W2], H, 0.0f, m->a1, H));
    DDP_CHECK(be->gelu_backward(be, m->a1, m->z1, m->a1, R, H, G + m->off[B1]));
    DDP_CHECK(be->gemm(be, 1, 0, H, D, R, 1.0f, m->a1, H, x, D, 1.0f, G + m->off[W1], D));
    if (ready) ready(ready_arg, m->off[W1], m->off[W2]);
    ddp_status st = collect(m, b, out);
    m->t_bwd += now_s() - t1;
    return st;
}

static ddp_status ref_eval_step(void *self, const ddp_batch *b, const float *P, ddp_forward_out *out)
{
    refmodel *m = self;
    const float *x = NULL;
    const int64_t *off = NULL, *lab = NULL;
    DDP_CHECK(stage(m, b, &x, &off, &lab));
    DDP_CHECK(forward(m, b, P, x, off, lab, 0));
    return collect(m, b, out);
}

static void ref_destroy(void *self)
{
    refmodel *m = self;
    if (!m) return;
    ddp_backend *be = m->be;
    void *dev[] = {m->z1, m->a1, m->z2, m->p, m->dp, m->logits, m->dlogits, m->out, m->x_dev, m->off_dev, m->lab_dev};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) be->release(be, dev[i]);
    free(m->h_out);
    free(m);
}

int64_t ddp_model_num_params(const ddp_model *m)
{
    int64_t n = 0;
    for (int t = 0; t < m->ntensors; t++) {
        int64_t k = 1;
        for (int d = 0; d < m->tensors[t].ndim; d++) k *= m->tensors[t].shape[d];
        n += k;
    }
    return n;
}

#define BALLOC(ptr, count)                                                                         \
    do {                                                                                           \
        void *p_;                                                                                  \
        DDP_TRY(DDP_BE_ALLOC(be, &p_, (size_t)(count) * sizeof *(ptr)));                              \
        (ptr) = p_;                                                                                \
    } while (0)

ddp_status ddp_refmodel_create(ddp_ctx *ctx, ddp_device dev, int64_t D, int64_t H, int64_t C, int64_t maxR,
                               int64_t maxB, ddp_model *out)
{
    ddp_backend *be;
    DDP_CHECK(ddp_ctx_backend(ctx, dev, &be));
    return ddp_refmodel_create_on(be, D, H, C, maxR, maxB, out);
}

ddp_status ddp_refmodel_create_on(ddp_backend *be, int64_t D, int64_t H, int64_t C, int64_t maxR, int64_t maxB, ddp_model *out)
{
    if (D < 1 || H < 1 || C < 2)
        return ddp_set_error(DDP_ERR_ARG, "reference model: need D, hidden >= 1 and classes >= 2 (got %lld, %lld, %lld)",
                             (long long)D, (long long)H, (long long)C);
    if (maxR < 1 || maxB < 1)
        return ddp_set_error(DDP_ERR_ARG, "reference model: the largest batch must hold >= 1 row and >= 1 sample (got %lld rows, %lld samples)",
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
    for (int t = 0; t < 6; t++) {
        m->spec[t].name = names[t];
        m->spec[t].ndim = shapes[t][1] ? 2 : 1;
        m->spec[t].shape[0] = shapes[t][0];
        m->spec[t].shape[1] = shapes[t][1];
        m->off[t + 1] = m->off[t] + shapes[t][0] * (shapes[t][1] ? shapes[t][1] : 1);
    }
    DDP_TRY(be->reserve(be, maxR > maxB ? maxR : maxB));
    BALLOC(m->z1, maxR * H);
    BALLOC(m->a1, maxR * H);
    BALLOC(m->z2, maxR * H);
    BALLOC(m->p, maxB * H);
    BALLOC(m->dp, maxB * H);
    BALLOC(m->logits, maxB * C);
    BALLOC(m->dlogits, maxB * C);
    DDP_TRY(DDP_BE_ALLOC(be, &m->out, (size_t)maxB * (2 * sizeof(float) + sizeof(int64_t))));
    m->loss = m->out;
    m->prob = m->loss + maxB;
    m->pred = (int64_t *)(m->prob + maxB); /* 8 * maxB bytes in: aligned */
    if (!be->host_memory) {
        BALLOC(m->x_dev, maxR * D);
        BALLOC(m->off_dev, maxB + 1);
        BALLOC(m->lab_dev, maxB);
        m->h_out = ddp_calloc((size_t)maxB, 2 * sizeof(float) + sizeof(int64_t));
        if (!m->h_out) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    }
    *out = (ddp_model){.name = "mlp",
                       .ntensors = 6,
                       .tensors = m->spec,
                       .num_classes = (int)C,
                       .device = be->host_memory ? DDP_DEVICE_CPU : DDP_DEVICE_CUDA,
                       .self = m,
                       .init = ref_init,
                       .train_step = ref_train_step,
                       .eval_step = ref_eval_step,
                       .destroy = ref_destroy};
    return DDP_OK;
done:
    ref_destroy(m);
    return st;
}
