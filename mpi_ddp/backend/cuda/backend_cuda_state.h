/* backend_cuda_state.h — the CUDA plugin's shared state (backend_cuda_state.c): the launch and block counters; the
 * error slot ddp_set_error calls through is declared by status.h. C and C++. */
#ifndef DDP_BACKEND_CUDA_STATE_H
#define DDP_BACKEND_CUDA_STATE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel launches (DDP_LAUNCH) and cuBLAS compute calls (CUBLAS_COMPUTE) of the backend, for benchmarks and tests;
 * one host thread drives a backend. */
extern long long ddp_cuda_launches __attribute__((visibility("hidden")));
/* Blocks of the kernel launches so far (the grids' products). */
extern long long ddp_cuda_blocks __attribute__((visibility("hidden")));
/* their values: the plugin's api.launches and api.blocks (cuda_plugin.c) */
long long ddp_cuda_backend_launches_impl(void);
long long ddp_cuda_backend_blocks_impl(void);

#ifdef __cplusplus
}
#endif

#endif
