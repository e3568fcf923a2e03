/* test_emu.h — what the files of test_cuda_emu (the emulator's own semantics) share: the stream gate and sleep of
 * test_emu_runtime.c, which also holds main, and the test cases the other files define for it. */
#ifndef DDP_TEST_EMU_H
#define DDP_TEST_EMU_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "emu_cuda.h"
#include "test_data.h"

#include <semaphore.h>

/* Stream order made deterministic with a gate: a host operation that blocks a stream until the test opens it. A test
 * that fails with gates shut has them opened by its teardown (open_gates), so no stream stays blocked. */
extern sem_t gate;
cudaError_t shut_gate(cudaStream_t s);
void open_gate(void);
int open_gates(void **state);
void sleep_ms(int ms);

/* cuBLAS, cuBLASLt, bf16/TF32 rounding: test_emu_blas.c */
void test_blas(void **state);
void test_rounding(void **state);
void test_gemm_ex(void **state);
void test_cublaslt(void **state);
/* NCCL between forked ranks: test_emu_nccl.c */
void test_nccl_blocking(void **state);
void test_nccl_nonblocking(void **state);
void test_nccl_duplicate_device(void **state);
void test_nccl_init_fault(void **state);
void test_nccl_hang_abort(void **state);
/* cuDNN's SDPA and operation graphs: test_emu_cudnn.c, test_emu_cudnn_graph.c */
void test_cudnn_sdpa(void **state);
/* emu_wmma.h against host references: test_emu_wmma.cpp */
void test_wmma_tf32_rounding(void **state);
void test_wmma_mma_tf32(void **state);
void test_wmma_mma_bf16(void **state);
void test_wmma_memo(void **state);
void test_warp_shuffles(void **state);
void test_warp_divergent(void **state);

#endif
