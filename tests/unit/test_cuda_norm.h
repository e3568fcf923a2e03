/* test_cuda_norm.h — what test_cuda_norm.c and test_cuda_norm16.c share: the backends, device copies, packings of R
 * rows into samples, and test_cuda_norm16.c's test cases. */
#ifndef DDP_TEST_CUDA_NORM_H
#define DDP_TEST_CUDA_NORM_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "test_data.h"

#include <stdlib.h>

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)

extern ddp_backend *cpu, *gpu; /* created by test_cuda_norm.c's group setup */
extern const ddp_enc_ops *C, *G;

/* the test cases of test_cuda_norm16.c */
void test_bf16_self_check(void **state);
void test_layernorm16(void **state);
void test_gelu16(void **state);
void test_residual_layernorm(void **state);

static inline double *dzero(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
/* a device buffer of n floats (+1 spare, for the misaligned cases) holding h */
static inline float *dev(const float *h, int64_t n)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, (size_t)(n + 1) * sizeof(float)));
    if (h) OK(gpu->upload(gpu, d, h, (size_t)n * sizeof(float)));
    return d;
}
static inline float *down(const float *d, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    OK(gpu->download(gpu, h, d, (size_t)n * sizeof(float)));
    return h;
}

/* A packing of R rows into samples of 1 .. 13 rows (the last one cut): its layout, host (h) and device (g) views. */
typedef struct {
    test_pack t;
    ddp_packing h, g;
} packing;
static inline void pack_rows(packing *p, int64_t R)
{
    int64_t B = 0;
    for (int64_t r = 0; r < R; B++) r += 1 + (B * 7) % 13;
    int64_t *off = malloc((size_t)(B + 1) * 8);
    off[0] = 0;
    for (int64_t s = 0; s < B; s++) {
        int64_t n = 1 + (s * 7) % 13;
        off[s + 1] = off[s] + n < R ? off[s] + n : R;
    }
    test_pack_offsets(&p->t, off, B, 1000, 3);
    free(off);
    p->h = (ddp_packing){
        .B = B, .R = R, .off = p->t.off, .seg = p->t.seg, .sid = p->t.sid, .hoff = p->t.off, .max_rows = p->t.max_rows};
    p->g = p->h;
    void *o = NULL, *sg = NULL, *si = NULL;
    OK(gpu->alloc(gpu, &o, (size_t)(B + 1) * 8));
    OK(gpu->alloc(gpu, &sg, (size_t)R * 8));
    OK(gpu->alloc(gpu, &si, (size_t)B * 8));
    OK(gpu->upload(gpu, o, p->t.off, (size_t)(B + 1) * 8));
    OK(gpu->upload(gpu, sg, p->t.seg, (size_t)R * 8));
    OK(gpu->upload(gpu, si, p->t.sid, (size_t)B * 8));
    p->g.off = o, p->g.seg = sg, p->g.sid = si;
}
static inline void pack_free(packing *p)
{
    gpu->release(gpu, (void *)p->g.off), gpu->release(gpu, (void *)p->g.seg), gpu->release(gpu, (void *)p->g.sid);
    test_pack_free(&p->t);
}

#endif
