/* test_gemm_epi.h — what test_gemm_epi.c (the epilogues, and main) and test_gemm_epi_bwd.c (linear_bwd, an encoder's
 * steps) share: the backend, rounding, device copies, and test_gemm_epi_bwd.c's test cases. */
#ifndef DDP_TEST_GEMM_EPI_H
#define DDP_TEST_GEMM_EPI_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/model/models.h"
#include "cuda_test.h"
#include "test_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)
extern ddp_backend *gpu; /* created by test_gemm_epi.c's group setup */
extern int emulated;     /* the CUDA plugin is the emulator */

/* the test cases of test_gemm_epi_bwd.c */
void test_linear_bwd(void **state);
void test_model_steps(void **state);

static inline float round_bits(float f, int drop) /* nearest even, dropping `drop` mantissa bits (finite inputs) */
{
    if (!drop || isnan(f)) return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + ((1u << (drop - 1)) - 1u) + ((u >> drop) & 1u)) & ~((1u << drop) - 1u);
    memcpy(&f, &u, 4);
    return f;
}
static inline void *on_gpu(const void *h, size_t bytes)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, bytes ? bytes : 4));
    OK(gpu->upload(gpu, d, h, bytes));
    return d;
}
/* x as bf16 bits (nearest even), the form of an activation the model stores in bf16 */
static inline uint16_t *to_bits16(const float *x, size_t n)
{
    uint16_t *y = malloc((n ? n : 1) * 2);
    for (size_t i = 0; i < n; i++) {
        float r = round_bits(x[i], 16);
        uint32_t u;
        memcpy(&u, &r, 4);
        y[i] = (uint16_t)(u >> 16);
    }
    return y;
}

#endif
