/* backend_cpu_bf16.h — the CPU backend's --precision bf16 (backend_cpu_bf16.c): gemm with operands rounded to bf16
 * (nearest even) and fp32 accumulation, through oneDNN's bf16 matmul where the library is built with it and the CPU
 * has AVX-512, else the same arithmetic through OpenBLAS sgemm of operands rounded to bf16 as fp32 values. */
#ifndef DDP_BACKEND_CPU_BF16_H
#define DDP_BACKEND_CPU_BF16_H

#include "mpi_ddp/backend/backend.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ddp_cpu_bf16 ddp_cpu_bf16;

/* NULL where bf16 GEMMs run on this CPU's bf16 units (AVX512-BF16 or AMX through oneDNN); otherwise one sentence
 * saying how they run instead (emulated by oneDNN on AVX-512, or OpenBLAS on rounded operands) and why, for the
 * CLI to print as a notice. MPIDDP_CPU_ONEDNN=0 in the environment turns the oneDNN path off. */
const char *ddp_cpu_bf16_notice(void);
/* 1 where the bf16 GEMMs go through oneDNN, 0 where through OpenBLAS (the fallback). */
int ddp_cpu_bf16_onednn(void);

/* The state of one CPU backend at --precision bf16: oneDNN primitives, the bf16 copy of the parameters, the
 * activations' scratch. threads: oneDNN's thread count (the backend's BLAS threads); cli_names: the backend's
 * (ddp_backend.cli_names, read when a line is worded). */
ddp_status ddp_cpu_bf16_create(int threads, const int *cli_names, ddp_cpu_bf16 **out);
void ddp_cpu_bf16_destroy(ddp_cpu_bf16 *s);
/* The backend's gemm (backend.h) at bf16, for M, N, K > 0 within int range. An operand lying inside the parameters
 * registered by the last ddp_cpu_bf16_adamw (and not written since) is read from their bf16 copy. */
ddp_status ddp_cpu_bf16_gemm(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                             int64_t ldc);
/* The backend's gemm16 (backend.h): as ddp_cpu_bf16_gemm with A (a16 = 1) and/or B (b16 = 1) given as bf16 bits
 * (ddp_bf16), which equals ddp_cpu_bf16_gemm on the fp32 values they were rounded from (bf16_round.h). */
ddp_status ddp_cpu_bf16_gemm16(ddp_cpu_bf16 *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb, float beta,
                               float *C, int64_t ldc);
/* The backend's adamw, bit for bit, fused with the refresh of the bf16 copy of p[0, n): registers p as the
 * parameters. */
ddp_status ddp_cpu_bf16_adamw(ddp_cpu_bf16 *s, float *p, const float *g, float *m, float *v, int64_t n,
                              const ddp_adamw_args *a);
/* bytes at dst were written (upload, zero): a copy overlapping them is stale until the next adamw. */
void ddp_cpu_bf16_written(ddp_cpu_bf16 *s, const void *dst, size_t bytes);
/* p is being freed: forget the parameters if they lie there. */
void ddp_cpu_bf16_released(ddp_cpu_bf16 *s, const void *p);
/* Test counters: GEMM operands read from the parameters' copy, and operands converted per call (rounded, or a bf16
 * operand widened on the OpenBLAS path; a bf16 operand read in place by oneDNN counts in neither). */
void ddp_cpu_bf16_counts(const ddp_cpu_bf16 *s, int64_t *from_copy, int64_t *converted);
/* The CPU backend's bf16 state (NULL when it computes in fp32): for tests. */
ddp_cpu_bf16 *ddp_backend_cpu_bf16(ddp_backend *b);

#endif
