/* test_cuda_attn.h — what test_cuda_attn.c, test_cuda_attn_cudnn.c and test_cuda_attn16.c share: the backends, device
 * copies, test_cuda_attn.c's batch case, and the checks of the other two, which test_cuda_attn.c runs. */
#ifndef DDP_TEST_CUDA_ATTN_H
#define DDP_TEST_CUDA_ATTN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "test_data.h"

#include <stdlib.h>

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)

extern ddp_backend *cpu, *gpu; /* created by test_cuda_attn.c's group setup */

/* a device buffer of `bytes` holding h (h NULL: uninitialised) */
static inline void *dev(const void *h, size_t bytes)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, bytes ? bytes : 4));
    if (h && bytes) OK(gpu->upload(gpu, d, h, bytes));
    return d;
}
static inline float *down(const void *d, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * 4);
    OK(gpu->download(gpu, h, d, (size_t)n * 4));
    return h;
}

/* test_cuda_attn.c: one batch on both backends at precision prec, against the CPU within the rounding's bounds; the
 * bounds widen where cuDNN runs (cudnn_mode: 1 the forward, 3 also the backward); a batch of 4 samples */
extern int cudnn_mode;
extern const int64_t small[4];
void attn_case(const int64_t *len, int B, int64_t dh, int H, ddp_precision prec, float p, int self);
/* the test cases of test_cuda_attn_cudnn.c: attention_select, cuDNN's fused attention, its plan cache */
void test_cudnn_select(void **state);
void test_cudnn_attention(void **state);
void test_cudnn_plan_cache(void **state);

/* test_cuda_attn16.c: for the batch pg (device q|k|v qg, fp32 host copy qkv, dout dog) at the backend's precision,
 * given the fp32 call's o (gy) and lse (gl): o and dq|dk|dv written in bf16, and q|k|v read in bf16, each the bits
 * of the fp32 calls rounded or given the same values */
void o16_case(const char *what, void *qg, void *dog, const ddp_packing *pg, int64_t d, int H, const ddp_dropout *dr,
              const float *gy, const float *gl);
void qkv16_case(const char *what, const float *qkv, void *dog, const ddp_packing *pg, int64_t d, int H,
                const ddp_dropout *dr);
/* dout read in bf16 (attention_bwd's do16), given its fp32 host copy: the bits of the same values given in fp32 */
void do16_case(const char *what, void *qg, const float *dout, const ddp_packing *pg, int64_t d, int H,
               const ddp_dropout *dr);
/* q|k|v and dO (fp32 host copies) read from 4 bytes past 16-byte alignment: the aligned calls' o (gy), lse (gl) and
 * dqkv (gq) */
void unaligned_case(const char *what, const float *qkv, const float *dout, const ddp_packing *pg, int64_t d, int H,
                    const ddp_dropout *dr, const float *gy, const float *gl, const float *gq);

#endif
