/* cuda_twin.h — what test_cuda_backend.c and test_cuda_backend_enc.c share: the two backends, device copies, the
 * per-element comparisons of a CUDA result with the CPU twin's, one model on each backend, and their test cases. */
#ifndef DDP_TEST_CUDA_TWIN_H
#define DDP_TEST_CUDA_TWIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/model/models.h"
#include "test_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)

extern ddp_backend *cpu, *gpu; /* created by test_cuda_backend.c's group setup */

/* the test cases of test_cuda_backend_enc.c */
void test_enc_ops(void **state);
void test_pool_mean(void **state);
void test_attention_tiles(void **state);
void test_transformer_steps(void **state);

/* device copy of host data */
static inline void *dev(const void *h, size_t bytes)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, bytes));
    OK(gpu->upload(gpu, d, h, bytes));
    return d;
}
static inline float *host_of(const void *d, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    OK(gpu->download(gpu, h, d, (size_t)n * sizeof(float)));
    return h;
}
/* Each element against its own size: |g - c| <= tol * (|c| + 1e-3 rms(c)) + floor (the rms term keeps elements
 * that cancel to ~0 from failing on rounding; floor: an absolute allowance, 0 except for parameters after AdamW).
 * Fails with the worst element; returns its relative error. */
static inline double expect_close_floor(const char *what, const float *g, const float *c, int64_t n, double tol,
                                        double floor)
{
    double rms = 0;
    for (int64_t i = 0; i < n; i++) rms += (double)c[i] * c[i];
    rms = sqrt(rms / (double)(n ? n : 1));
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)g[i] - c[i]) / (fabs(c[i]) + 1e-3 * rms + floor / tol + 1e-30);
        if (!(e <= worst)) worst = e, at = i; /* NaN counts as worst */
    }
    if (!(worst <= tol))
        fail_msg("%s: element %lld: cuda %.9g vs cpu %.9g (relative %.3g > %.1g)", what, (long long)at, n ? g[at] : 0.0,
                 n ? c[at] : 0.0, worst, tol);
    return worst;
}
static inline double expect_close(const char *what, const float *g, const float *c, int64_t n, double tol)
{
    return expect_close_floor(what, g, c, n, tol, 0.0);
}
/* |g - c| <= bound[i] for every element: bounds derived from the rounding of the two computations (their
 * summation orders differ: cuBLAS and the GPU's tree sums against the CPU's) */
static inline void expect_dev_bounded(const char *what, const void *d, const float *c, const double *bound, int64_t n)
{
    float *g = host_of(d, n);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double q = fabs((double)g[i] - c[i]) / (bound[i] + 1e-30);
        if (!(q <= worst)) worst = q, at = i;
    }
    if (!(worst <= 1.0))
        fail_msg("%s: element %lld: cuda %.9g vs cpu %.9g (%.3g x its bound %.3g)", what, (long long)at,
                 n ? g[at] : 0.0, n ? c[at] : 0.0, worst, n ? bound[at] : 0.0);
    free(g);
}
static inline double expect_dev_close(const char *what, const void *d, const float *c, int64_t n, double tol)
{
    float *h = host_of(d, n);
    double worst = expect_close(what, h, c, n, tol);
    free(h);
    return worst;
}

/* One model on each backend with its parameters, gradients and AdamW moments (host memory for the CPU one,
 * device memory for the CUDA one), for the whole-step tests; every message starts with name. */
typedef struct {
    const char *name;
    ddp_model mc, mg;
    int64_t n;
    float *pc, *gc, *mmc, *vvc;
    void *pg, *gg, *mmg, *vvg;
} twin;

/* After both models are created: their buffers, and parameters from seed 3, identical to the bit. */
static inline void twin_init(twin *t)
{
    int64_t n = t->n = ddp_model_num_params(&t->mc);
    t->pc = calloc((size_t)n, 4), t->gc = calloc((size_t)n, 4), t->mmc = calloc((size_t)n, 4),
    t->vvc = calloc((size_t)n, 4);
    OK(gpu->alloc(gpu, &t->pg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &t->gg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &t->mmg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &t->vvg, (size_t)n * 4));
    OK(t->mc.init(t->mc.self, t->pc, 3));
    OK(t->mg.init(t->mg.self, t->pg, 3));
    float *h = host_of(t->pg, n);
    if (memcmp(t->pc, h, (size_t)n * 4) != 0) fail_msg("%sinit differs between CPU and CUDA", t->name);
    free(h);
}

/* One step's gradients: they accumulate into the zeroed buffer over two micro-batches, as --accumulate 2
 * does; then the per-sample losses of the last one. */
static inline void twin_gradients(twin *t, const ddp_batch *b, int step, ddp_forward_out *oc, ddp_forward_out *og)
{
    OK(cpu->zero(cpu, t->gc, (size_t)t->n * 4));
    OK(gpu->zero(gpu, t->gg, (size_t)t->n * 4));
    for (int micro = 0; micro < 2; micro++) {
        OK(t->mc.train_step(t->mc.self, b, t->pc, t->gc, oc, NULL, NULL));
        OK(t->mg.train_step(t->mg.self, b, t->pg, t->gg, og, NULL, NULL));
    }
    char what[128];
    snprintf(what, sizeof what, "%sstep %d losses", t->name, step);
    expect_close(what, og->loss, oc->loss, b->nsamples, 1e-4);
}

/* The gradients per tensor, by name. */
static inline void twin_expect_gradients(twin *t, int step)
{
    char what[128];
    float *hg = host_of(t->gg, t->n);
    for (int k = 0, lo = 0; k < t->mc.ntensors; k++) {
        const ddp_tensor_spec *ts = &t->mc.tensors[k];
        int64_t len = ts->shape[0] * (ts->ndim > 1 ? ts->shape[1] : 1);
        snprintf(what, sizeof what, "%sstep %d gradient %s", t->name, step, ts->name);
        expect_close(what, hg + lo, t->gc + lo, len, 2e-3);
        lo += (int)len;
    }
    free(hg);
}

/* AdamW on both (the gradients of two micro-batches of `samples` each), then the parameters within tol. */
static inline void twin_adamw(twin *t, int step, int samples, double tol)
{
    ddp_adamw_args a = {.lr = 1e-2f,
                        .beta1 = 0.9f,
                        .beta2 = 0.999f,
                        .eps = 1e-8f,
                        .weight_decay = 0.01f,
                        .bc1 = 1.0f - powf(0.9f, (float)step),
                        .bc2_sqrt = sqrtf(1.0f - powf(0.999f, (float)step)),
                        .gscale = 1.0f / (2 * samples)};
    OK(cpu->adamw(cpu, t->pc, t->gc, t->mmc, t->vvc, t->n, &a));
    OK(gpu->adamw(gpu, t->pg, t->gg, t->mmg, t->vvg, t->n, &a));
    char what[128];
    snprintf(what, sizeof what, "%sstep %d parameters", t->name, step);
    /* AdamW moves every parameter by about lr per step whatever the gradient's size, so a gradient near zero,
     * whose rounding differs between the CPU's and cuBLAS's summation orders, can move a small parameter by a
     * different fraction of lr: an absolute allowance of 1e-3 lr per step (a wrong update is off by ~lr) */
    float *h = host_of(t->pg, t->n);
    expect_close_floor(what, h, t->pc, t->n, tol, 1e-3 * a.lr * step);
    free(h);
}

/* An eval step on both: the loss sum and every prediction. */
static inline void twin_eval(twin *t, const ddp_batch *b, ddp_forward_out *oc, ddp_forward_out *og)
{
    OK(t->mc.eval_step(t->mc.self, b, t->pc, oc));
    OK(t->mg.eval_step(t->mg.self, b, t->pg, og));
    if (!(fabs(oc->loss_sum - og->loss_sum) <= 1e-4 * fabs(oc->loss_sum)))
        fail_msg("%seval loss differs: %g vs %g", t->name, oc->loss_sum, og->loss_sum);
    for (int i = 0; i < b->nsamples; i++)
        if (oc->pred[i] != og->pred[i]) fail_msg("%seval prediction %d differs", t->name, i);
}

static inline void twin_close(twin *t)
{
    t->mc.destroy(t->mc.self);
    t->mg.destroy(t->mg.self);
    gpu->release(gpu, t->pg), gpu->release(gpu, t->gg), gpu->release(gpu, t->mmg), gpu->release(gpu, t->vvg);
    free(t->pc), free(t->gc), free(t->mmc), free(t->vvc);
}

#endif
