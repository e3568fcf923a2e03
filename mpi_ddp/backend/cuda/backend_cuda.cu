/* backend_cuda.cu — the CUDA backend (in the plugin): its creation and op table, memory, copies, staging and timers
 * on its streams, and the MLP's kernels (bias + gelu, mean pooling, softmax cross-entropy, AdamW, sum of squares).
 * The GEMMs and column sums are backend_cuda_gemm.cu; the encoder's ops backend_cuda_enc.cu. */
#include "mpi_ddp/backend/cuda/backend_cuda_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUMSQ_BLOCKS 1024 /* blocks of k_sumsq: one partial sum each, added on the host in block order */

static long long g_host_syncs; /* cudaStreamSynchronize and cudaEventSynchronize calls of the backend (benchmarks) */
extern "C" long long ddp_cuda_backend_host_syncs_impl(void) { return g_host_syncs; }
static cudaError_t host_sync(cudaStream_t s)
{
    g_host_syncs++;
    return cudaStreamSynchronize(s);
}
/* A host wait for an event (cudaEventSynchronize), counted with the stream synchronisations, made only when the
 * event has not completed yet (cudaErrorNotReady is not an error: cleared, as cuda_plugin.c's stream_query does). */
static cudaError_t host_wait_event(cudaEvent_t e)
{
    cudaError_t q = cudaEventQuery(e);
    if (q != cudaErrorNotReady) return q;
    cudaGetLastError();
    g_host_syncs++;
    return cudaEventSynchronize(e);
}

/* ------------------------------------------------------------------ kernels */
__global__ void k_fill(float *x, float v, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

__global__ void k_bias_gelu(const float *z, const float *bias, float *a, float *dg, int64_t rows, int64_t cols)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    float g, v = z[i] + bias[i % cols];
    a[i] = ddp_gelu_fwd(v, dg ? &g : NULL);
    if (dg) dg[i] = g;
}

/* dz = dact * dg */
__global__ void k_mul(const float *dact, const float *dg, float *dz, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dz[i] = dact[i] * dg[i];
}

/* one block per segment, threads over columns: gelu(z + bias) pooled by mean, gelu' kept when dg */
__global__ void k_bias_gelu_pool(const float *z, const float *bias, float *dg, const int64_t *off, int64_t cols,
                                 float *out)
{
    int64_t s = blockIdx.x;
    int64_t lo = off[s], hi = off[s + 1];
    float inv = 1.0f / (float)(hi - lo);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float acc = 0.0f, g;
        for (int64_t r = lo; r < hi; r++) {
            acc += ddp_gelu_fwd(z[r * cols + c] + bias[c], dg ? &g : NULL);
            if (dg) dg[r * cols + c] = g;
        }
        out[s * cols + c] = acc * inv;
    }
}

__global__ void k_pool_gelu_backward(const float *dp, const int64_t *off, int64_t cols, const float *dg, float *dz)
{
    int64_t s = blockIdx.x;
    int64_t lo = off[s], hi = off[s + 1];
    float inv = 1.0f / (float)(hi - lo);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = dp[s * cols + c] * inv;
        for (int64_t r = lo; r < hi; r++) dz[r * cols + c] = d * dg[r * cols + c];
    }
}

__global__ void k_softmax_xent(const float *logits, const int64_t *labels, int64_t n, int64_t c, float *dlogits,
                               float *loss, int64_t *pred, float *prob)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    loss[r] = ddp_softmax_xent_row(logits + r * c, c, labels[r], 1.0f, dlogits ? dlogits + r * c : NULL,
                                   pred ? pred + r : NULL, prob ? prob + r : NULL);
}

/* The optimizer step; with w16, the weights' bf16 copy refreshed from the new values in the same pass. */
__global__ void k_adamw(float *p, const float *g, float *m, float *v, int64_t n, ddp_adamw_args a, __nv_bfloat16 *w16)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    ddp_adamw_elem(p + i, g[i], m + i, v + i, &a);
    if (w16) w16[i] = __float2bfloat16_rn(p[i]);
}

/* Per-block partial sums of x^2 in a fixed order (grid-stride, then a tree over the block): the host adds
 * the partials in block order, so the norm is the same bits on every rank and every run. */
__global__ void k_sumsq(const float *x, int64_t n, double *part)
{
    __shared__ double sh[256];
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * (double)x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

/* ------------------------------------------------------------------ backend functions */
/* A write of `bytes` at p other than the optimizer's: the weights' bf16 copy is stale if they overlap. */
static void weights_written(cuda_impl *c, const void *p, size_t bytes)
{
    const char *lo = (const char *)c->w_base, *hi = lo + (size_t)c->w_n * sizeof(float), *q = (const char *)p;
    if (c->w_valid && q < hi && q + bytes > lo) c->w_valid = 0;
}

/* Zeroed on the backend stream, so the zeroing is ordered before every later use on that stream (a plain
 * cudaMemset would run on the legacy default stream, unordered with our non-blocking one). */
static ddp_status cu_alloc(ddp_backend *b, void **p, size_t bytes)
{
    *p = NULL;
    ALLOC_CHECK(cudaMalloc(p, bytes ? bytes : 1), bytes, cuda_of(b)->device,
                "a model buffer (parameters, gradients, AdamW moments or the batch workspace)");
    cuda_impl *c = cuda_of(b);
    cudaError_t e = cudaMemsetAsync(*p, 0, bytes ? bytes : 1, c->stream);
    /* The zeroing runs on the compute stream; the copy stream (stage) may write the buffer next, a batch's
     * destination: it waits for the zeroing, or the zeros could land over the batch. No host wait. */
    if (e == cudaSuccess) e = cudaEventRecord(c->zeroed, c->stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(c->copy, c->zeroed, 0);
    if (e != cudaSuccess) {
        cudaFree(*p);
        *p = NULL;
        return DDP_CUDA_ERR_(cudaMemsetAsync, e);
    }
    return DDP_OK;
}
static void cu_release(ddp_backend *b, void *p)
{
    cuda_impl *c = cuda_of(b);
    if (p && p == (void *)c->w_base) c->w_valid = 0, c->w_base = NULL, c->w_n = 0;
    if (p) cudaFree(p);
}
static ddp_status cu_upload(ddp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return DDP_OK;
    weights_written(cuda_of(b), dst, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_of(b)->stream));
    CUDA_CHECK(host_sync(cuda_of(b)->stream)); /* src is host memory the caller may reuse */
    return DDP_OK;
}
static ddp_status cu_upload_async(ddp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return DDP_OK;
    weights_written(cuda_of(b), dst, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_of(b)->stream));
    return DDP_OK;
}
static ddp_status cu_download(ddp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return DDP_OK;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_of(b)->stream));
    CUDA_CHECK(host_sync(cuda_of(b)->stream));
    return DDP_OK;
}
/* ------------------------------------------------------------------ staging: batches on the copy stream */
#define STAGE_ALIGN 256 /* each region's offset in a pinned slot */

static ddp_status cu_stage_reserve(ddp_backend *b, size_t bytes)
{
    cuda_impl *c = cuda_of(b);
    if (bytes <= c->pin_cap) return DDP_OK;
    for (int k = 0; k < 2; k++) { /* a larger model than before: the old slots' copies land, then they go */
        if (c->pin[k]) CUDA_CHECK(host_wait_event(c->copied[k]));
        if (c->pin[k]) CUDA_CHECK(cudaFreeHost(c->pin[k]));
        c->pin[k] = NULL;
    }
    c->pin_cap = 0;
    for (int k = 0; k < 2; k++)
        ALLOC_CHECK(cudaMallocHost(&c->pin[k], bytes), bytes, c->device,
                    "pinned host memory staging the batches' uploads");
    c->pin_cap = bytes;
    return DDP_OK;
}

static ddp_status cu_stage(ddp_backend *b, int set, const ddp_copy *cp, int n)
{
    cuda_impl *c = cuda_of(b); /* set: 0 or 1 (the callers' alternation) */
    size_t need = 0;
    for (int i = 0; i < n; i++) need += (cp[i].bytes + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
    if (need > c->pin_cap)
        return ddp_set_error(DDP_ERR_ARG,
                             "cuda stage: %zu bytes, the staging slots hold %zu (stage_reserve at model creation)",
                             need, c->pin_cap);
    /* the slot's last copy: usually landed long ago (its batch's results were downloaded since), then no wait */
    CUDA_CHECK(host_wait_event(c->copied[set]));
    CUDA_CHECK(cudaStreamWaitEvent(c->copy, c->freed[set], 0)); /* the set's previous batch is computed */
    char *slot = (char *)c->pin[set];
    for (int i = 0; i < n; i++) {
        if (!cp[i].bytes) continue;
        memcpy(slot, cp[i].src, cp[i].bytes);
        CUDA_CHECK(cudaMemcpyAsync(cp[i].dst, slot, cp[i].bytes, cudaMemcpyHostToDevice, c->copy));
        slot += (cp[i].bytes + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
    }
    CUDA_CHECK(cudaEventRecord(c->copied[set], c->copy));
    return DDP_OK;
}

static ddp_status cu_stage_acquire(ddp_backend *b, int set)
{
    cuda_impl *c = cuda_of(b);
    CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->copied[set], 0));
    return DDP_OK;
}

static ddp_status cu_stage_release(ddp_backend *b, int set)
{
    cuda_impl *c = cuda_of(b);
    CUDA_CHECK(cudaEventRecord(c->freed[set], c->stream));
    return DDP_OK;
}

/* ------------------------------------------------------------------ timers: events on the compute stream */
static ddp_status cu_mark(ddp_backend *b, int k)
{
    cuda_impl *c = cuda_of(b);
    if (k < 0 || k >= DDP_TIMERS) return ddp_set_error(DDP_ERR_ARG, "cuda mark: timer %d (0 .. %d)", k, DDP_TIMERS - 1);
    if (!c->timer[k]) CUDA_CHECK(cudaEventCreate(&c->timer[k]));
    CUDA_CHECK(cudaEventRecord(c->timer[k], c->stream));
    return DDP_OK;
}

static ddp_status cu_elapsed(ddp_backend *b, int k0, int k1, double *sec)
{
    cuda_impl *c = cuda_of(b);
    *sec = 0.0;
    if (k0 < 0 || k1 < 0 || k0 >= DDP_TIMERS || k1 >= DDP_TIMERS || !c->timer[k0] || !c->timer[k1])
        return ddp_set_error(DDP_ERR_ARG, "cuda elapsed: timers %d and %d were never marked", k0, k1);
    CUDA_CHECK(host_wait_event(c->timer[k1]));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, c->timer[k0], c->timer[k1]));
    *sec = 1e-3 * (double)ms;
    return DDP_OK;
}

static ddp_status cu_zero(ddp_backend *b, void *p, size_t bytes)
{
    if (!bytes) return DDP_OK;
    weights_written(cuda_of(b), p, bytes);
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_of(b)->stream));
    return DDP_OK;
}
static ddp_status cu_sync(ddp_backend *b)
{
    CUDA_CHECK(host_sync(cuda_of(b)->stream));
    return DDP_OK;
}

static ddp_status cu_bias_gelu(ddp_backend *b, const float *z, const float *bias, float *a, float *dg, int64_t rows,
                               int64_t cols)
{
    if (rows * cols == 0) return DDP_OK;
    DDP_LAUNCH(k_bias_gelu, blocks_for(rows * cols, 256), 256, 0, cuda_of(b)->stream, z, bias, a, dg, rows, cols);
    LAUNCH_CHECK();
    return DDP_OK;
}

/* Sizes the reduction scratch once, when a model is created: cudaFree in the middle of backward would
 * stall the rank behind the gradient buckets in flight. */
static ddp_status cu_reserve(ddp_backend *b, int64_t rows)
{
    cuda_impl *c = cuda_of(b);
    if (rows <= c->ones_len) return DDP_OK;
    /* rows fp32 ones, then (16-byte aligned) rows bf16 ones: pairs of them, filled as floats of their bits */
    const int64_t n32 = (rows + 3) & ~(int64_t)3, n16 = ((rows + 1) / 2 + 3) & ~(int64_t)3;
    const uint32_t pair_bits = 0x3F803F80u; /* two bf16 1.0 */
    float pair;
    memcpy(&pair, &pair_bits, sizeof pair);
    float *ones = NULL;
    ALLOC_CHECK(cudaMalloc((void **)&ones, (size_t)(n32 + n16) * sizeof(float)), (size_t)(n32 + n16) * sizeof(float),
                c->device, "the column-sum vectors of the largest batch's rows");
    DDP_LAUNCH(k_fill, blocks_for(rows, 256), 256, 0, c->stream, ones, 1.0f, rows);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        DDP_LAUNCH(k_fill, blocks_for(n16, 256), 256, 0, c->stream, ones + n32, pair, n16);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) {
        cudaFree(ones);
        return DDP_CUDA_ERR_(k_fill, e);
    }
    if (c->ones) CUDA_CHECK(cudaFree(c->ones)); /* only before training: cudaFree waits for the device */
    c->ones = ones;
    c->ones16 = (__nv_bfloat16 *)(ones + n32);
    c->ones_len = rows;
    return DDP_OK;
}

static ddp_status cu_bias_gelu_pool(ddp_backend *b, const float *z, const float *bias, float *dg, const int64_t *off,
                                    int64_t nseg, int64_t cols, float *out)
{
    if (!nseg) return DDP_OK;
    DDP_LAUNCH(k_bias_gelu_pool, (unsigned)nseg, 128, 0, cuda_of(b)->stream, z, bias, dg, off, cols, out);
    LAUNCH_CHECK();
    return DDP_OK;
}

static ddp_status cu_gelu_backward(ddp_backend *b, const float *dact, const float *dg, float *dz, int64_t rows,
                                   int64_t cols, float *dbias)
{
    if (rows * cols == 0) return DDP_OK;
    DDP_LAUNCH(k_mul, blocks_for(rows * cols, 256), 256, 0, cuda_of(b)->stream, dact, dg, dz, rows * cols);
    LAUNCH_CHECK();
    return ddp_cuda_colsum(b, dz, dbias, rows, cols, 1.0f);
}

static ddp_status cu_pool_gelu_backward(ddp_backend *b, const float *dp, const int64_t *off, int64_t nseg,
                                        const float *dg, float *dz, int64_t rows, int64_t cols, float *dbias)
{
    if (!nseg) return DDP_OK;
    DDP_LAUNCH(k_pool_gelu_backward, (unsigned)nseg, 128, 0, cuda_of(b)->stream, dp, off, cols, dg, dz);
    LAUNCH_CHECK();
    return ddp_cuda_colsum(b, dz, dbias, rows, cols, 1.0f);
}

static ddp_status cu_softmax_xent(ddp_backend *b, const float *logits, const int64_t *labels, int64_t n, int64_t c,
                                  float *dlogits, float *loss, int64_t *pred, float *prob)
{
    if (!n) return DDP_OK;
    DDP_LAUNCH(k_softmax_xent, blocks_for(n, 128), 128, 0, cuda_of(b)->stream, logits, labels, n, c, dlogits, loss,
               pred, prob);
    LAUNCH_CHECK();
    return DDP_OK;
}

static ddp_status cu_adamw(ddp_backend *b, float *p, const float *g, float *m, float *v, int64_t n,
                           const ddp_adamw_args *a)
{
    if (!n) return DDP_OK;
    cuda_impl *c = cuda_of(b);
    __nv_bfloat16 *w16 = NULL;
    if (c->precision == DDP_PRECISION_BF16) { /* these are the weights: their bf16 copy is refreshed in the same pass */
        if (n > c->w16_cap) {                 /* the first step only, in stream order */
            if (c->w16) CUDA_CHECK(cudaFreeAsync(c->w16, c->stream));
            c->w16 = NULL, c->w16_cap = 0, c->w_valid = 0;
            ALLOC_CHECK(cudaMallocAsync((void **)&c->w16, (size_t)n * sizeof(__nv_bfloat16), c->stream),
                        (size_t)n * sizeof(__nv_bfloat16), c->device, "the bf16 copy of the weights (bf16 precision)");
            c->w16_cap = n;
        }
        w16 = c->w16;
    }
    DDP_LAUNCH(k_adamw, blocks_for(n, 256), 256, 0, c->stream, p, g, m, v, n, *a, w16);
    LAUNCH_CHECK();
    c->w_base = p, c->w_n = n, c->w_valid = w16 != NULL;
    return DDP_OK;
}

static ddp_status cu_sumsq(ddp_backend *b, const float *x, int64_t n, double *out)
{
    cuda_impl *c = cuda_of(b);
    *out = 0.0;
    if (!n) return DDP_OK;
    unsigned nb = blocks_for(n, 256);
    if (nb > SUMSQ_BLOCKS) nb = SUMSQ_BLOCKS;
    DDP_LAUNCH(k_sumsq, nb, 256, 0, c->stream, x, n, c->dpart);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpyAsync(c->hpart, c->dpart, nb * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(host_sync(c->stream));
    double s = 0.0;
    for (unsigned k = 0; k < nb; k++) s += c->hpart[k];
    *out = s;
    return DDP_OK;
}

/* One launch of k_sumsq per tensor, each into its own slice of the partial sums, then one download: the
 * tensors share SUMSQ_BLOCKS blocks (at least one each); beyond that many tensors, one tensor at a time. */
static ddp_status cu_sumsq_many(ddp_backend *b, const float *x, const int64_t *off, int n, double *out)
{
    cuda_impl *c = cuda_of(b);
    if (n > SUMSQ_BLOCKS) {
        for (int k = 0; k < n; k++) DDP_CHECK(cu_sumsq(b, x + off[k], off[k + 1] - off[k], &out[k]));
        return DDP_OK;
    }
    unsigned per = SUMSQ_BLOCKS / (unsigned)(n > 0 ? n : 1), used = 0, nbk[SUMSQ_BLOCKS];
    for (int k = 0; k < n; k++) {
        int64_t len = off[k + 1] - off[k];
        unsigned nb = len ? blocks_for(len, 256) : 0;
        if (nb > per) nb = per;
        nbk[k] = nb;
        if (nb) {
            DDP_LAUNCH(k_sumsq, nb, 256, 0, c->stream, x + off[k], len, c->dpart + used);
            LAUNCH_CHECK();
        }
        used += nb;
    }
    if (used) CUDA_CHECK(cudaMemcpyAsync(c->hpart, c->dpart, used * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(host_sync(c->stream));
    for (int k = 0, at = 0; k < n; k++) {
        double s = 0.0;
        for (unsigned j = 0; j < nbk[k]; j++) s += c->hpart[at++];
        out[k] = s;
    }
    return DDP_OK;
}

static void cu_destroy(ddp_backend *b)
{
    if (!b) return;
    cuda_impl *c = cuda_of(b);
    if (c) {
        if (c->stream) cudaStreamSynchronize(c->stream);
        if (c->copy) cudaStreamSynchronize(c->copy);
        for (int k = 0; k < 2; k++) {
            if (c->pin[k]) cudaFreeHost(c->pin[k]);
            if (c->copied[k]) cudaEventDestroy(c->copied[k]);
            if (c->freed[k]) cudaEventDestroy(c->freed[k]);
        }
        if (c->zeroed) cudaEventDestroy(c->zeroed);
        for (int k = 0; k < DDP_TIMERS; k++)
            if (c->timer[k]) cudaEventDestroy(c->timer[k]);
        if (c->copy) cudaStreamDestroy(c->copy);
        if (c->ones) cudaFree(c->ones);
        if (c->bf16) cudaFree(c->bf16);
        if (c->w16) cudaFree(c->w16);
        if (c->dpart) cudaFree(c->dpart);
        if (c->colpart) cudaFree(c->colpart);
        if (c->hpart) cudaFreeHost(c->hpart);
        if (c->blas) cublasDestroy(c->blas);
        if (c->lt) cublasLtDestroy(c->lt);
        if (c->lt_ws) cudaFree(c->lt_ws);
        if (c->o32) cudaFree(c->o32);
        if (c->f32) cudaFree(c->f32);
        ddp_cuda_sdpa_destroy(c); /* backend_cuda_sdpa.cu */
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    free(b);
}

extern "C" ddp_status ddp_cuda_backend_create_impl(int device, ddp_backend **out)
{
    *out = NULL;
    ddp_status st = DDP_OK;
    ddp_backend *b = (ddp_backend *)calloc(1, sizeof *b);
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory creating the CUDA backend");
    }
    b->name = DDP_CUDA_EMULATED ? "cuda-emu" : "cuda";
    b->host_memory = 0;
    b->impl = c;
    b->alloc = cu_alloc;
    b->release = cu_release;
    b->upload = cu_upload;
    b->upload_async = cu_upload_async;
    b->download = cu_download;
    b->zero = cu_zero;
    b->synchronize = cu_sync;
    b->reserve = cu_reserve;
    b->gemm = ddp_cuda_gemm; /* backend_cuda_gemm.cu */
    b->gemm16 = ddp_cuda_gemm16;
    b->bias_gelu = cu_bias_gelu;
    b->gelu_backward = cu_gelu_backward;
    b->bias_gelu_pool = cu_bias_gelu_pool;
    b->pool_gelu_backward = cu_pool_gelu_backward;
    b->colsum = ddp_cuda_colsum;     /* backend_cuda_gemm.cu */
    b->add_bias = ddp_cuda_add_bias; /* backend_cuda_gemm.cu */
    b->gemm_epi = ddp_cuda_gemm_epi;
    b->linear_bwd = ddp_cuda_linear_bwd;
    b->attention_select = ddp_cuda_attention_select; /* backend_cuda_sdpa.cu */
    b->attention_counts = ddp_cuda_attention_counts;
    b->softmax_xent = cu_softmax_xent;
    b->adamw = cu_adamw;
    b->sumsq = cu_sumsq;
    b->sumsq_many = cu_sumsq_many;
    b->destroy = cu_destroy;
    b->enc = ddp_cuda_enc_ops(); /* backend_cuda_enc.cu */
    b->set_precision = ddp_cuda_set_precision;
    b->stage_reserve = cu_stage_reserve;
    b->stage = cu_stage;
    b->stage_acquire = cu_stage_acquire;
    b->stage_release = cu_stage_release;
    b->mark = cu_mark;
    b->elapsed = cu_elapsed;
    c->device = device;
    CUDA_TRY(cudaSetDevice(device));
    CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
    for (int k = 0; k < 2; k++) {
        CUDA_TRY(cudaEventCreateWithFlags(&c->copied[k], cudaEventDisableTiming));
        CUDA_TRY(cudaEventCreateWithFlags(&c->freed[k], cudaEventDisableTiming));
    }
    CUDA_TRY(cudaEventCreateWithFlags(&c->zeroed, cudaEventDisableTiming));
    ALLOC_TRY(cudaMalloc((void **)&c->dpart, SUMSQ_BLOCKS * sizeof(double)), SUMSQ_BLOCKS * sizeof(double), device,
              "the gradient-norm partial sums");
    ALLOC_TRY(cudaMalloc((void **)&c->colpart, DDP_COLPART_FLOATS * sizeof(float)), DDP_COLPART_FLOATS * sizeof(float),
              device, "the column partial sums of layernorm and bias gradients");
    ALLOC_TRY(cudaMallocHost((void **)&c->hpart, SUMSQ_BLOCKS * sizeof(double)), SUMSQ_BLOCKS * sizeof(double), device,
              "pinned host memory for the gradient-norm partial sums");
    CUBLAS_TRY(cublasCreate(&c->blas));
    CUBLAS_TRY(cublasSetStream(c->blas, c->stream));
    /* exact fp32 GEMMs (no TF32) so GPU results track the CPU reference; --precision tf32 and bf16 ask cublasGemmEx
     * for their compute type explicitly, which the math mode does not override (cublas_api.h) */
    CUBLAS_TRY(cublasSetMathMode(c->blas, CUBLAS_PEDANTIC_MATH));
    DDP_TRY(ddp_cuda_lt_create(c)); /* backend_cuda_gemm.cu */
    *out = b;
    return DDP_OK;
done:
    cu_destroy(b);
    return st;
}

/* CUDA stream of a CUDA backend, for the gradient-sync stream to wait on. */
extern "C" void *ddp_cuda_backend_stream_impl(ddp_backend *b) { return (void *)cuda_of(b)->stream; }
