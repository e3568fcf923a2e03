/* cuda_checks.h — the check macros for the CUDA runtime, cuBLAS and NCCL (inside the plugin), with one
 * message format: "<lib> error in <call> (<file>:<line>): <text>". X_CHECK returns the ddp_status;
 * X_TRY stores it in `st` and jumps to `done` (straight-line setup with one cleanup path, as NCCL's
 * NCCLCHECKGOTO). Include after cuda_compat.h and status.h. */
#ifndef DDP_CUDA_CHECKS_H
#define DDP_CUDA_CHECKS_H

#define DDP_CUDA_ERR_(call, e)                                                                     \
    ddp_set_error(DDP_ERR_CUDA, "CUDA error in %s (%s:%d): %s", #call, __FILE__, __LINE__, cudaGetErrorString(e))
#define DDP_CUBLAS_ERR_(call, s)                                                                   \
    ddp_set_error(DDP_ERR_CUDA, "cuBLAS error in %s (%s:%d): %s", #call, __FILE__, __LINE__, cublasGetStatusString(s))
#define DDP_NCCL_ERR_(call, r)                                                                     \
    ddp_set_error(DDP_ERR_NCCL, "NCCL error in %s (%s:%d): %s", #call, __FILE__, __LINE__, ncclGetErrorString(r))

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return DDP_CUDA_ERR_(call, e_);                                     \
    } while (0)
#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            st = DDP_CUDA_ERR_(call, e_);                                                          \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) return DDP_CUBLAS_ERR_(call, s_);                         \
    } while (0)
#define CUBLAS_TRY(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            st = DDP_CUBLAS_ERR_(call, s_);                                                        \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
#define NCCL_CHECK(call)                                                                           \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess && r_ != ncclInProgress) return DDP_NCCL_ERR_(call, r_);             \
    } while (0)

/* A kernel launch: configuration errors come back through cudaGetLastError on a GPU and in the emulator. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

#endif
