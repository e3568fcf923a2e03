/* backend_cpu_dnnl.h — the CPU backend's oneDNN matmuls (backend_cpu_dnnl.c), private to it: per operand type (fp32 or
 * bf16; C always fp32) eight primitives with runtime dimensions and strides, created once and reused for every shape,
 * for backend_cpu.c's fp32 GEMMs where oneDNN beats OpenBLAS and for backend_cpu_bf16.c's bf16 GEMMs. */
#ifndef DDP_BACKEND_CPU_DNNL_H
#define DDP_BACKEND_CPU_DNNL_H

#include "mpi_ddp/backend/backend.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ddp_cpu_dnnl ddp_cpu_dnnl;

/* 1 where oneDNN matmuls with operands of this type (bf16 1: bf16, 0: fp32) run optimised kernels here: the library
 * is built with oneDNN, the CPU has AVX-512 and oneDNN offers more than its reference kernel. Otherwise 0 and, when
 * why is non-NULL, *why says why in a few words. Probed once per process and type. MPIDDP_CPU_ONEDNN=0 turns both
 * types off, MPIDDP_CPU_ONEDNN_FP32=0 the fp32 type only. */
int ddp_cpu_dnnl_usable(int bf16, const char **why);
/* 1 where the CPU has bf16 units (AVX512-BF16 or AMX) that oneDNN uses; 0 where it would emulate them. */
int ddp_cpu_dnnl_bf16_native(void);

/* The engine, stream and primitives for one operand type; threads: OpenMP's thread count for oneDNN. Fails (no
 * state) where ddp_cpu_dnnl_usable says 0. */
ddp_status ddp_cpu_dnnl_create(int bf16, int threads, ddp_cpu_dnnl **out);
void ddp_cpu_dnnl_destroy(ddp_cpu_dnnl *s);

/* C[M,N] = op(A) op(B) (acc 0) or C += op(A) op(B) (acc 1), op(A) [M,K], op(B) [K,N]; A and B row-major of the state's
 * type with leading dimensions lda, ldb (ta, tb: transposed), C fp32 with ldc. M, N, K > 0. */
ddp_status ddp_cpu_dnnl_matmul(ddp_cpu_dnnl *s, int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const void *A,
                               int64_t lda, const void *B, int64_t ldb, float *C, int64_t ldc);

/* The fp32 gemm's switch (backend_cpu.c): 1 where a product of M x N x K should go to oneDNN rather than OpenBLAS
 * (ddp_cpu_dnnl_usable(0), alpha 1, beta 0 or 1, and enough work that the primitive's per-call cost is amortised). */
int ddp_cpu_dnnl_fp32_wanted(int64_t M, int64_t N, int64_t K, float alpha, float beta);
/* For run.json: "" without oneDNN in the build, else its version and what it runs here, e.g. "2.6.3: fp32 GEMMs of
 * >= 2^20 multiply-adds, bf16 GEMMs (bf16 units)", a type left out with its reason ("...; fp32 unused (<why>)"), or
 * "2.6.3: unused (<why>)". */
void ddp_cpu_dnnl_describe(char *buf, size_t n);
/* Test counter: matmuls executed so far in this process with operands of this type (bf16 1, fp32 0). */
int64_t ddp_cpu_dnnl_matmuls(int bf16);

#endif
