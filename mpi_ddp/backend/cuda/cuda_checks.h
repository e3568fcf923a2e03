/* cuda_checks.h — the check macros for the CUDA runtime, cuBLAS and NCCL (inside the plugin), with one message format:
 * "<lib> error in <call> (<file>:<line>): <text>". Include after cuda_compat.h and status.h. */
#ifndef DDP_CUDA_CHECKS_H
#define DDP_CUDA_CHECKS_H

#define DDP_CUDA_ERR_(call, e) \
    ddp_set_error(DDP_ERR_CUDA, "CUDA error in %s (%s:%d): %s", #call, __FILE__, __LINE__, cudaGetErrorString(e))
#define DDP_CUBLAS_ERR_(call, s) \
    ddp_set_error(DDP_ERR_CUDA, "cuBLAS error in %s (%s:%d): %s", #call, __FILE__, __LINE__, cublasGetStatusString(s))
#define DDP_NCCL_ERR_(call, r) \
    ddp_set_error(DDP_ERR_NCCL, "NCCL error in %s (%s:%d): %s", #call, __FILE__, __LINE__, ncclGetErrorString(r))

/* The one shape of every check: evaluate `call` once into ddp_r_; when `ok` (an expression of ddp_r_) is
 * false, return the ddp_status that `err` makes (DDP_CALL_CHECK_) or store it in `st` and jump to `done`
 * (DDP_CALL_TRY_). backend_cuda.cu's allocation checks use them too, with a longer message. */
#define DDP_CALL_CHECK_(T, call, ok, err) \
    do {                                  \
        T ddp_r_ = (call);                \
        if (!(ok)) return err;            \
    } while (0)
#define DDP_CALL_TRY_(T, call, ok, err) \
    do {                                \
        T ddp_r_ = (call);              \
        if (!(ok)) {                    \
            st = err;                   \
            goto done;                  \
        }                               \
    } while (0)

/* X_CHECK returns the ddp_status; X_TRY stores it in `st` and jumps to `done` (straight-line setup with one cleanup
 * path, as NCCL's NCCLCHECKGOTO). */
#define CUDA_CHECK(call) DDP_CALL_CHECK_(cudaError_t, call, ddp_r_ == cudaSuccess, DDP_CUDA_ERR_(call, ddp_r_))
#define CUDA_TRY(call) DDP_CALL_TRY_(cudaError_t, call, ddp_r_ == cudaSuccess, DDP_CUDA_ERR_(call, ddp_r_))
#define CUBLAS_CHECK(call) \
    DDP_CALL_CHECK_(cublasStatus_t, call, ddp_r_ == CUBLAS_STATUS_SUCCESS, DDP_CUBLAS_ERR_(call, ddp_r_))
#define CUBLAS_TRY(call) \
    DDP_CALL_TRY_(cublasStatus_t, call, ddp_r_ == CUBLAS_STATUS_SUCCESS, DDP_CUBLAS_ERR_(call, ddp_r_))
#define NCCL_CHECK(call) \
    DDP_CALL_CHECK_(ncclResult_t, call, ddp_r_ == ncclSuccess || ddp_r_ == ncclInProgress, DDP_NCCL_ERR_(call, ddp_r_))

/* A kernel launch: configuration errors come back through cudaGetLastError on a GPU and in the emulator. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

#endif
