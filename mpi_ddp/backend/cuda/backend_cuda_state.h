/* backend_cuda_state.h — the CUDA plugin's shared state (backend_cuda_state.c): the launch counter; the error slot
 * ddp_set_error calls through is declared by status.h. C and C++. */
#ifndef DDP_BACKEND_CUDA_STATE_H
#define DDP_BACKEND_CUDA_STATE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel launches (DDP_LAUNCH) and cuBLAS compute calls (CUBLAS_COMPUTE) of the backend, for benchmarks and tests;
 * one host thread drives a backend. */
extern long long ddp_cuda_launches __attribute__((visibility("hidden")));
/* its value: the plugin's api.launches (cuda_plugin.c) */
long long ddp_cuda_backend_launches_impl(void);

#ifdef __cplusplus
}
#endif

#endif
