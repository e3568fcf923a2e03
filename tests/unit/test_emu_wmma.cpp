// test_emu_wmma.cpp — the emulator's warp matrix functions (tests/cuda_emu/emu_wmma.h) against host references: test
// cases of test_emu_runtime.c's main, in C++ of their own (C cannot include emu_wmma.h); see each test for what it
// checks.
#define DDP_CUDA_EMU_KERNELS 1
#include "emu_cuda.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

namespace wmma = nvcuda::wmma;

static float val(int i, int j, int salt)
{
    return (float)((i * 37 + j * 11 + salt) % 29 - 14) / 7.0f + 1e-3f * (float)j;
}

/* __float_to_tf32 rounds to nearest with ties away from zero (cvt.rna), unlike cuBLAS's tf32 (nearest even) */
extern "C" void test_wmma_tf32_rounding(void **state)
{
    (void)state;
    float one = 1.0f, half_ulp = ddp_emu_u2f(0x3f801000u); /* 1 + 2^-11: a tie between 1 and 1 + 2^-10 */
    if (!(wmma::__float_to_tf32(half_ulp) == ddp_emu_u2f(0x3f802000u))) fail_msg("tf32: a tie rounds away from zero");
    if (!(wmma::__float_to_tf32(-half_ulp) == -ddp_emu_u2f(0x3f802000u)))
        fail_msg("tf32: a negative tie rounds away from zero");
    if (!(wmma::__float_to_tf32(ddp_emu_u2f(0x3f800fffu)) == one)) fail_msg("tf32: below the tie rounds down");
    if (!(wmma::__float_to_tf32(ddp_emu_u2f(0x3f801001u)) == ddp_emu_u2f(0x3f802000u)))
        fail_msg("tf32: above the tie rounds up");
    if (!(ddp_emu_tf32(half_ulp) == one)) fail_msg("cuBLAS's tf32 (nearest even) differs on the tie");
    float inf = ddp_emu_u2f(0x7f800000u), nan = ddp_emu_u2f(0x7fc00001u);
    if (!(wmma::__float_to_tf32(inf) == inf)) fail_msg("tf32: Inf kept");
    if (!(wmma::__float_to_tf32(nan) != wmma::__float_to_tf32(nan))) fail_msg("tf32: NaN kept");
}

/* mma_sync of m16n16k8 tf32 and m16n16k16 bf16 tiles through every load/store layout equals a host reference with the
 * same rounding (exact products, fp32 sums in k order).
 * D = A B + C for tf32 (K 8: A row-major, B col-major, C loaded row-major and stored col-major) */
extern "C" void test_wmma_mma_tf32(void **state)
{
    (void)state;
    float A[16 * 8], B[8 * 16], C[16 * 16], Dm[16 * 16];
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 8; k++) A[i * 8 + k] = wmma::__float_to_tf32(val(i, k, 1) * 1.0001f);
    for (int k = 0; k < 8; k++)
        for (int j = 0; j < 16; j++) B[j * 8 + k] = wmma::__float_to_tf32(val(k, j, 2) * 0.9997f); /* col-major */
    for (int i = 0; i < 256; i++) C[i] = val(i / 16, i % 16, 3);
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> c;
    wmma::load_matrix_sync(a, A, 8);
    wmma::load_matrix_sync(b, B, 8);
    wmma::load_matrix_sync(c, C, 16, wmma::mem_row_major);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(Dm, c, 16, wmma::mem_col_major);
    bool ok = c.num_elements == 256;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = C[i * 16 + j];
            for (int k = 0; k < 8; k++) s += A[i * 8 + k] * B[j * 8 + k];
            ok = ok && Dm[j * 16 + i] == s;
        }
    if (!ok) fail_msg("tf32 mma_sync differs from the host reference");
    /* an unrounded operand: the tensor cores read its upper 19 bits */
    float x = ddp_emu_u2f(0x3f801fffu); /* 1 + (2^13 - 1) 2^-23 */
    for (int i = 0; i < 128; i++) A[i] = 0.0f, B[i] = 0.0f;
    A[0] = x, B[0] = 1.0f;
    wmma::load_matrix_sync(a, A, 8);
    wmma::load_matrix_sync(b, B, 8);
    wmma::fill_fragment(c, 0.0f);
    wmma::mma_sync(c, a, b, c);
    if (!(c.x[0] == 1.0f && c.x[1] == 0.0f)) fail_msg("an unrounded tf32 operand is not truncated to 19 bits");
}

/* bf16 (K 16: A col-major, B row-major, C loaded col-major and stored row-major) */
extern "C" void test_wmma_mma_bf16(void **state)
{
    (void)state;
    __nv_bfloat16 A[256], B[256];
    float C[256], Dm[256];
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) A[k * 16 + i] = __float2bfloat16_rn(val(i, k, 4) * 1.01f); /* col-major */
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 16; j++) B[k * 16 + j] = __float2bfloat16_rn(val(k, j, 5) * 0.99f);
    for (int i = 0; i < 256; i++) C[i] = val(i % 16, i / 16, 6); /* col-major: C(i, j) = val(i, j) */
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::load_matrix_sync(a, A, 16);
    wmma::load_matrix_sync(b, B, 16);
    wmma::load_matrix_sync(c, C, 16, wmma::mem_col_major);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(Dm, c, 16, wmma::mem_row_major);
    bool ok = true;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = C[j * 16 + i];
            for (int k = 0; k < 16; k++) s += __bfloat162float(A[k * 16 + i]) * __bfloat162float(B[k * 16 + j]);
            ok = ok && Dm[i * 16 + j] == s;
        }
    if (!ok) fail_msg("bf16 mma_sync differs from the host reference");
    /* element access over the whole tile: the same mapping for two fragments of one type */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> rows;
    float R[256];
    for (int i = 0; i < 256; i++) R[i] = (float)(i / 16);
    wmma::load_matrix_sync(rows, R, 16, wmma::mem_row_major);
    wmma::load_matrix_sync(c, Dm, 16, wmma::mem_row_major);
    for (int e = 0; e < c.num_elements; e++) c.x[e] *= (float)(1 + (int)rows.x[e]);
    wmma::store_matrix_sync(R, c, 16, wmma::mem_row_major);
    ok = true;
    for (int i = 0; i < 256; i++) ok = ok && R[i] == Dm[i] * (float)(1 + i / 16);
    if (!ok) fail_msg("a fragment of row indices does not tell its elements' rows");
}

/* the memo of lane 0's results (emu_wmma.h): a later lane with other inputs computes its own, one with the same
 * inputs gets lane 0's bits */
extern "C" void test_wmma_memo(void **state)
{
    (void)state;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a1, a2;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
    acc c, r1, r2, d0, d1, d2;
    for (int i = 0; i < 128; i++)
        a1.x[i] = wmma::__float_to_tf32(val(i, 1, 7)), a2.x[i] = wmma::__float_to_tf32(val(i, 2, 8)),
        b.x[i] = val(i, 3, 9);
    for (int i = 0; i < 256; i++) c.x[i] = val(i, 4, 10);
    const dim3 t0 = ddp_emu_threadIdx, b0 = ddp_emu_blockDim;
    ddp_emu_blockDim = dim3(64, 1, 1);
    ddp_emu_threadIdx = dim3(0), wmma::mma_sync(r1, a1, b, c);  /* lane 0 of warp 0 */
    ddp_emu_threadIdx = dim3(32), wmma::mma_sync(r2, a2, b, c); /* lane 0 of warp 1 */
    ddp_emu_threadIdx = dim3(0), wmma::mma_sync(d0, a1, b, c);
    ddp_emu_threadIdx = dim3(1), wmma::mma_sync(d1, a2, b, c); /* other inputs than lane 0's first call */
    ddp_emu_threadIdx = dim3(2), wmma::mma_sync(d2, a1, b, c); /* the same inputs */
    ddp_emu_threadIdx = t0, ddp_emu_blockDim = b0;
    if (!(!memcmp(r1.x, d0.x, sizeof r1.x) && !memcmp(r2.x, d1.x, sizeof r2.x) && !memcmp(r1.x, d2.x, sizeof r1.x) &&
          memcmp(r1.x, r2.x, sizeof r1.x)))
        fail_msg("the memo of lane 0's mma_sync results gives another lane a wrong result");
}

/* ------------------------------------------------------------------ warp shuffles and __syncwarp */
/* 3 warps a block: a butterfly sum over __shfl_xor_sync (every lane gets the warp's sum), a broadcast from lane 3,
 * an xor within 16-lane segments, an 8-byte value, and an exchange through shared memory that is wrong without
 * its __syncwarp (the emulator runs a lane until it waits). Then the block's __syncthreads still holds. */
enum { WARP_T = 96, WARP_G = 2, WARP_K = 6 };
__shared__ int warp_sh[WARP_T]; /* file scope: __shared__ is a per-worker static here */
static void k_warp(void *p)
{
    int *out = (int *)p;
    const int t = (int)threadIdx.x, lane = t % 32, g = (int)blockIdx.x * WARP_T + t, v = (int)blockIdx.x * 1000 + t;
    int s = v;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const double dv = __shfl_xor_sync(0xffffffffu, (double)v + 0.5, 1);
    warp_sh[t] = v;
    __syncwarp();
    const int next = warp_sh[(t & ~31) + (lane + 1) % 32];
    __syncthreads();
    int *o = out + g * WARP_K;
    o[0] = s, o[1] = __shfl_sync(0xffffffffu, v, 3), o[2] = __shfl_xor_sync(0xffffffffu, v, 8, 16);
    o[3] = dv == (double)(v ^ 1) + 0.5, o[4] = next, o[5] = warp_sh[WARP_T - 1 - t];
}

extern "C" void test_warp_shuffles(void **state)
{
    (void)state;
    const size_t bytes = WARP_T * WARP_G * WARP_K * sizeof(int);
    int *d = NULL, *h = (int *)malloc(bytes);
    assert_int_equal(cudaMalloc((void **)&d, bytes), cudaSuccess);
    assert_int_equal(ddp_emu_launch("k_warp", dim3(WARP_G), dim3(WARP_T), 0, NULL, k_warp, d, NULL), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int b = 0; b < WARP_G; b++)
        for (int t = 0; t < WARP_T; t++) {
            const int *o = h + (b * WARP_T + t) * WARP_K, w0 = t & ~31, lane = t % 32, base = b * 1000;
            int sum = 0;
            for (int l = 0; l < 32; l++) sum += base + w0 + l;
            const int want[WARP_K] = {
                sum, base + w0 + 3, base + (t ^ 8), 1, base + w0 + (lane + 1) % 32, base + WARP_T - 1 - t};
            for (int k = 0; k < WARP_K; k++)
                if (o[k] != want[k]) fail_msg("block %d thread %d value %d: %d, not %d", b, t, k, o[k], want[k]);
        }
    cudaFree(d);
    free(h);
}

/* a __syncwarp that one lane never reaches: the sticky launch failure, with its reason (a process of its own:
 * test_cuda_emu warp_divergent) */
static void k_warp_divergent(void *p)
{
    (void)p;
    if (threadIdx.x % 32 != 7) __syncwarp();
}
extern "C" void test_warp_divergent(void **state)
{
    (void)state;
    assert_int_equal(ddp_emu_launch("k_warp_divergent", dim3(1), dim3(64), 0, NULL, k_warp_divergent, NULL, NULL),
                     cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    if (!strstr(ddp_emu_last_fault(), "k_warp_divergent") || !strstr(ddp_emu_last_fault(), "every thread of the warp"))
        fail_msg("fault text: %s", ddp_emu_last_fault());
}
