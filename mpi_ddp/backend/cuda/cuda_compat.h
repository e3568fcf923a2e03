/* cuda_compat.h — the one place that tells nvcc from the host emulator: the CUDA backend (the backend_cuda*.cu files,
 * through backend_cuda_priv.h) and cuda_plugin.c include it instead of the CUDA, cuBLAS and NCCL headers, which it
 * includes under nvcc (or a plain CUDA build of cuda_plugin.c); with DDP_CUDA_EMU it includes emu_cuda.h instead. */
#ifndef DDP_CUDA_COMPAT_H
#define DDP_CUDA_COMPAT_H

/* Called at every DDP_LAUNCH with its grid: the backend counts its launches and blocks (backend_cuda_priv.h defines
 * it first). */
#ifndef DDP_LAUNCH_NOTE_GRID
#define DDP_LAUNCH_NOTE_GRID(grid) ((void)0)
#endif

/* DDP_LAUNCH(kernel, grid, block, dyn_smem, stream, args...) is the only way kernels are launched:
 * `kernel<<<grid, block, dyn_smem, stream>>>(args...)` on a GPU, ddp_emu_launch over the grid on the host. A launch
 * reports configuration errors through cudaGetLastError in both cases. emu_cuda.h implements the same subset of CUDA
 * on the host (streams as worker threads, kernels as loops of fibers, cuBLAS over cblas, NCCL over shared memory), so
 * the same source runs on a machine without a GPU. */
#ifdef DDP_CUDA_EMU
#define DDP_CUDA_EMU_KERNELS 1
#include "emu_cuda.h"
#ifdef __cplusplus
#define DDP_LAUNCH(k, grid, block, smem, stream, ...) \
    (DDP_LAUNCH_NOTE_GRID(grid), (void)DDP_EMU_LAUNCH(k, grid, block, smem, stream, __VA_ARGS__))
#endif
#define DDP_CUDA_EMULATED 1
#else
#include <cuda_runtime_api.h>
#include <nccl.h>
#ifdef __CUDACC__
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h> /* nvcuda::wmma (backend_cuda_attn_tc.cu) */
#define DDP_LAUNCH(k, grid, block, smem, stream, ...) \
    (DDP_LAUNCH_NOTE_GRID(grid), k<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__))
#endif
#define DDP_CUDA_EMULATED 0
#endif

#endif
