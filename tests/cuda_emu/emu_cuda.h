/* emu_cuda.h — a host emulation of the part of the CUDA runtime, cuBLAS and NCCL that mpiddp calls, so the
 * unchanged GPU sources (backend_cuda.cu compiled as C++, cuda_plugin.c as C) run on a machine without a
 * GPU (libmpiddp_cudaemu.so). It is built for finding bugs, not for speed:
 *  - device memory is a separate host allocation, filled with 0xFF (NaN) on cudaMalloc, tracked, so a
 *    missing upload or zeroing shows as wrong numbers and a host pointer where a device one belongs is
 *    rejected by cuBLAS and NCCL;
 *  - every stream (the legacy default stream too) is a worker thread with a FIFO queue: calls enqueue and
 *    return; streams are not ordered with each other unless an event orders them; the legacy stream is
 *    ordered with blocking streams only (as on a GPU); cudaMemset on device memory does not wait;
 *  - a kernel launch runs every block of the grid, the threads of a block as fibers (ucontext) so that
 *    __syncthreads, __syncwarp, the warp shuffles and __shared__ keep CUDA's meaning; kernels that never
 *    wait run their threads as a plain loop after the first block; launches over CUDA's limits fail as on a GPU;
 *  - cuBLAS runs column-major cblas calls on the handle's stream; NCCL runs over POSIX shared memory
 *    between the processes of one machine (sum in rank order: identical bits on every rank).
 * Knobs (read once): MPIDDP_EMU_DEVICES (visible devices, default 1), MPIDDP_EMU_JITTER_US (random delay
 * before each stream operation), MPIDDP_EMU_SEED, MPIDDP_EMU_FAIL=driver (every call fails like a driver
 * too old for the runtime) | stream_create:K | malloc_async:K (the K-th such call fails, out of memory),
 * MPIDDP_EMU_NCCL_FAULT=init:R | hang:R[:K] | error:R[:K] (rank R's init fails / its K-th allreduce never completes
 * until aborted / fails at once), MPIDDP_EMU_STATS=1 (launches, host synchronisations and copies printed when the
 * process exits). */
#ifndef DDP_CUDA_EMU_H
#define DDP_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ runtime */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
    cudaErrorUnknown = 999
} cudaError_t;

typedef struct ddp_emu_stream *cudaStream_t;
typedef struct ddp_emu_event *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

typedef struct dim3 {
    unsigned int x, y, z;
#ifdef __cplusplus
    dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
#endif
} dim3;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int maxThreadsPerBlock;
    int maxGridSize[3];
    int multiProcessorCount;
    int warpSize;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDriverGetVersion(int *v);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s); /* emu_memasync.c */
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* Kernel launch: fn(arg) for every thread of grid x block, in order on stream s (0: legacy stream); the
 * configuration is checked first (an error is returned, recorded for cudaGetLastError, and nothing runs).
 * free_arg(arg) runs after the launch executed (or at once on an error). */
cudaError_t ddp_emu_launch(const char *name, dim3 grid, dim3 block, size_t dyn_smem, cudaStream_t s, void (*fn)(void *),
                           void *arg, void (*free_arg)(void *));
/* Runs fn(arg) on the stream's worker, in stream order (the other emulated libraries use it). */
cudaError_t ddp_emu_enqueue(cudaStream_t s, void (*fn)(void *), void *arg, void (*free_arg)(void *));
/* Built-in variables of the running emulated thread (set by the scheduler of the worker thread). */
extern __thread dim3 ddp_emu_threadIdx, ddp_emu_blockIdx, ddp_emu_blockDim, ddp_emu_gridDim;
void ddp_emu_syncthreads(void);
/* __syncwarp: waits for every thread of the caller's warp (32 consecutive linear thread indices of the block; all of
 * them must arrive, as with a full mask). ddp_emu_shfl: the caller's 8 bytes v published, the warp synchronised,
 * the bytes lane src_lane of the warp published returned, the warp synchronised again. */
void ddp_emu_syncwarp(void);
uint64_t ddp_emu_shfl(uint64_t v, unsigned src_lane);
unsigned ddp_emu_lane(void);
void *ddp_emu_dynamic_smem(void);
/* A fault seen while a stream executed (the sticky error's text), or "". */
const char *ddp_emu_last_fault(void);
/* 1: this is the emulator. Checks whether p is inside a live device allocation of at least bytes. */
int ddp_emu_is_emulated(void);
int ddp_emu_is_device_ptr(const void *p, size_t bytes);
typedef struct {
    long long host_syncs, launches, memcpy_h2d, memcpy_d2h, memcpy_d2d, bytes_h2d, bytes_d2h;
} ddp_emu_counters;
void ddp_emu_stats(ddp_emu_counters *out);
void ddp_emu_reset_stats(void);
/* knob reading shared by the emulated libraries */
long ddp_emu_env_long(const char *name, long dflt);

/* ------------------------------------------------------------------ cuBLAS */
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
/* cublasGemmEx's types (library_types.h and cublas_api.h values): fp32 or bf16 A and B, fp32 C */
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum {
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef struct ddp_emu_blas *cublasHandle_t;
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc);
cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t t, int m, int n, const float *alpha, const float *A,
                           int lda, const float *x, int incx, const float *beta, float *y, int incy);
/* As on a GPU: fp32 A and B with CUBLAS_COMPUTE_32F_FAST_TF32 (or CUBLAS_COMPUTE_32F under
 * CUBLAS_TF32_TENSOR_OP_MATH; cublasSgemm too) round A and B to TF32 first; bf16 A and B (CUBLAS_COMPUTE_32F)
 * are widened exactly. Then one fp32 cblas_sgemm: products of rounded operands, fp32 accumulation. */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);

/* ------------------------------------------------------------------ cuBLASLt (cublasLt.h subset) */
/* The matmul with the BIAS and BGRADB epilogues on fp32 or bf16 A and B, fp32 C = D, fp32 scale and bias: the
 * operands read as cublasGemmEx reads them, one cblas_sgemm, then the epilogue on the host. The algorithm the
 * heuristic returns assumes the alignments the preference promised (256 bytes unless told), and cublasLtMatmul
 * refuses a less aligned pointer (INVALID_VALUE), where a GPU's kernel would fault on a misaligned address. With
 * MPIDDP_EMU_LT_REFUSE=1 the heuristic finds no algorithm (NOT_SUPPORTED), as a GPU may for some layouts. */
typedef struct ddp_emu_lt *cublasLtHandle_t;
typedef struct ddp_emu_lt_desc *cublasLtMatmulDesc_t;
typedef struct ddp_emu_lt_layout *cublasLtMatrixLayout_t;
typedef struct ddp_emu_lt_pref *cublasLtMatmulPreference_t;
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *results, int *returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream);

/* ------------------------------------------------------------------ bf16 and TF32 (cuda_bf16.h subset) */
/* bfloat16: the upper 16 bits of a float. Conversions round to nearest even, as CUDA's: a NaN becomes the
 * canonical 0x7FFF, overflow becomes Inf, denormals round in the bf16 denormal range. */
typedef struct {
    uint16_t x;
} __nv_bfloat16;
static inline uint32_t ddp_emu_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float ddp_emu_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u = ddp_emu_f2u(f);
    __nv_bfloat16 h;
    h.x = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)0x7fff : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return h;
}
static inline float __bfloat162float(__nv_bfloat16 h) { return ddp_emu_u2f((uint32_t)h.x << 16); }
/* TF32, as tensor cores read an fp32 operand: the mantissa rounded to 10 bits, nearest even (NaN and Inf kept). */
static inline float ddp_emu_tf32(float f)
{
    uint32_t u = ddp_emu_f2u(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    return ddp_emu_u2f((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
}

/* ------------------------------------------------------------------ NCCL */
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;
typedef struct ddp_emu_comm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef struct {
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER \
    {                           \
        1                       \
    }
#define NCCL_VERSION_CODE 22800
ncclResult_t ncclGetVersion(int *v);
const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommCount(ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s);

#ifdef __cplusplus
}
#endif

/* ------------------------------------------------------------------ kernel-side names (backend_cuda.cu) */
#ifdef DDP_CUDA_EMU_KERNELS
#define threadIdx ddp_emu_threadIdx
#define blockIdx ddp_emu_blockIdx
#define blockDim ddp_emu_blockDim
#define gridDim ddp_emu_gridDim
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static __thread
#define __syncthreads() ddp_emu_syncthreads()
#define __syncwarp(...) ddp_emu_syncwarp()
#ifdef __cplusplus
#include "emu_intrinsics.h"
#include "emu_wmma.h" /* nvcuda::wmma, the tensor-core kernels' subset */
#endif
#endif

#ifdef __cplusplus
#include <new>
#include <tuple>
/* The threads of one stream never run in parallel: a plain read-modify-write is atomic here. */
static inline float atomicAdd(float *p, float v)
{
    float o = *p;
    *p = o + v;
    return o;
}
static inline double atomicAdd(double *p, double v)
{
    double o = *p;
    *p = o + v;
    return o;
}
static inline int atomicAdd(int *p, int v)
{
    int o = *p;
    *p = o + v;
    return o;
}
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    unsigned o = *p;
    *p = o + v;
    return o;
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    unsigned long long o = *p;
    *p = o + v;
    return o;
}
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}
template <class F> static void ddp_emu_call_(void *p) { (*(F *)p)(); }
template <class F> static void ddp_emu_free_(void *p) { delete (F *)p; }
template <class F>
static cudaError_t ddp_emu_launch_cpp(const char *name, dim3 g, dim3 b, size_t smem, cudaStream_t s, F f)
{
    F *p = new (std::nothrow) F(f);
    if (!p) return cudaErrorMemoryAllocation;
    return ddp_emu_launch(name, g, b, smem, s, ddp_emu_call_<F>, p, ddp_emu_free_<F>);
}
/* The arguments are evaluated and copied at the launch, as <<<>>> does (a lambda capturing `*a` would
 * dereference a pointer whose target may be gone when the stream runs the kernel). */
#define DDP_EMU_LAUNCH(k, grid, block, smem, stream, ...)             \
    ddp_emu_launch_cpp(#k, dim3(grid), dim3(block), (smem), (stream), \
                       [ddp_emu_args_ = std::make_tuple(__VA_ARGS__)]() { std::apply(k, ddp_emu_args_); })
#endif

#endif
