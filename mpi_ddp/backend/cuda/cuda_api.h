/* cuda_api.h — the GPU side of mpiddp lives in a plugin, libmpiddp_cuda.so (CUDA backend, cuBLAS, NCCL),
 * loaded with dlopen on first use. CPU runs never load CUDA (no ~100 MiB of relocated CUDA libraries per
 * rank, no CUDA needed on CPU nodes); a build without the toolkit simply has no plugin. */
#ifndef DDP_CUDA_API_H
#define DDP_CUDA_API_H

#include "mpiddp.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ddp_backend;
typedef ddp_status (*ddp_set_error_fn)(ddp_status st, const char *fmt, ...);

/* The plugin ABI's version. 3: ddp_backend.set_precision; 4: its stage* and timer entries, launches,
 * compute_capability; 5: cudnn_version_string, ddp_backend.attention_select; 6: blocks. */
#define DDP_CUDA_API_VERSION 6
#define DDP_NCCL_ID_BYTES 128
/* The backend's column-partials scratch (layernorm dw/db chunks, bias gradients), in floats: 8 MiB, 1024 chunks of
 * a 1024-wide row. Tests size their widest cases past it. */
#define DDP_COLPART_FLOATS (1 << 21)

/* What the plugin exports (ddp_cuda_plugin_api). Streams, events and communicators are opaque. The same
 * table comes from the real plugin (libmpiddp_cuda.so) and from the host emulator (libmpiddp_cudaemu.so). */
typedef struct {
    int version;
    int emulated; /* 1: the host emulator, which needs no NVIDIA device nodes */
    /* Visible devices; on a CUDA error -1, with the CUDA error text in err (e.g. driver too old). */
    int (*device_count)(char *err, size_t n);
    void (*device_name)(int dev, char *buf, size_t n);
    int (*compute_capability)(int dev); /* 10 major + minor (90: sm_90), -1 on a CUDA error */
    void (*version_string)(char *buf, size_t n);
    void (*nccl_version_string)(char *buf, size_t n);
    /* the cuDNN the plugin would load for attention, or why none ("unavailable: ...") */
    void (*cudnn_version_string)(char *buf, size_t n);
    ddp_status (*backend_create)(int dev, struct ddp_backend **out);
    void *(*backend_stream)(struct ddp_backend *b);
    ddp_status (*nccl_unique_id)(void *id /* DDP_NCCL_ID_BYTES */);
    /* Starts a non-blocking communicator init (ncclCommInitRankConfig, blocking = 0) on device dev; poll
     * it with nccl_poll. *comm is set even when the start fails, and must then be aborted. */
    ddp_status (*nccl_init_start)(void **comm, int nranks, const void *id, int rank, int dev);
    /* The communicator's asynchronous state (ncclCommGetAsyncError): DDP_OK with *busy = 1 while an init or
     * an enqueue is in progress, DDP_OK with *busy = 0 when idle and healthy, else the NCCL error. */
    ddp_status (*nccl_poll)(void *comm, int *busy);
    void (*nccl_abort)(void *comm);   /* ncclCommAbort: pending operations return, the stream drains */
    void (*nccl_destroy)(void *comm); /* ncclCommDestroy of a healthy communicator */
    /* Enqueues an in-place float sum on stream; with a non-blocking communicator it may still be in
     * progress when it returns (nccl_poll says when). */
    ddp_status (*nccl_allreduce_sum)(void *comm, float *buf, int64_t count, void *stream);
    ddp_status (*stream_create)(void **stream);
    void (*stream_destroy)(void *stream);
    /* *done = 1 when everything queued on the stream has run (cudaStreamQuery). */
    ddp_status (*stream_query)(void *stream, int *done);
    ddp_status (*event_create)(void **event);
    void (*event_destroy)(void *event);
    /* `to` waits for all work queued on `from` so far (event record + stream wait). */
    ddp_status (*stream_wait)(void *event, void *from, void *to);
    /* Host synchronisations the backend made so far (cudaStreamSynchronize, cudaEventSynchronize), for benchmarks
     * and tests. */
    long long (*host_syncs)(void);
    /* Kernel launches and cuBLAS compute calls the backend made so far, for benchmarks and tests. */
    long long (*launches)(void);
    /* Blocks of the backend's kernel launches so far (the product of each grid), for tests. */
    long long (*blocks)(void);
} ddp_cuda_api;

/* Plugin entry point. */
typedef const ddp_cuda_api *(*ddp_cuda_plugin_fn)(ddp_set_error_fn set_error);
const ddp_cuda_api *ddp_cuda_plugin_api(ddp_set_error_fn set_error);

/* The loaded plugin, or NULL (then ddp_cuda_why() says why). Thread-safe after the first call. The plugin
 * file is $MPIDDP_CUDA_PLUGIN when set (the real one or the emulator), else libmpiddp_cuda.so. */
const ddp_cuda_api *ddp_cuda(void);
const char *ddp_cuda_why(void);
/* Why ddp_cuda_device_count() returned 0: "" when it did not, else a one-line reason. */
const char *ddp_cuda_device_why(void);

/* Conveniences over ddp_cuda(): 0 devices / "not available" when there is no plugin. They do not load
 * the plugin on a machine without NVIDIA device nodes unless MPIDDP_CUDA_PLUGIN names one (see
 * ddp_cuda_maybe_present). */
int ddp_cuda_maybe_present(void);
int ddp_cuda_loaded(void);
int ddp_cuda_device_count(void);
void ddp_cuda_device_name(int dev, char *buf, size_t n);
void ddp_cuda_version_string(char *buf, size_t n);
void ddp_nccl_version_string(char *buf, size_t n);
int ddp_cuda_built(void);
/* Coverage builds (MPIDDP_COVERAGE): writes the gcov counters of this process and of the plugin before an
 * MPI_Abort ends it; otherwise does nothing. */
void ddp_coverage_flush(void);
void *ddp_backend_cuda_stream(struct ddp_backend *b);

#ifdef __cplusplus
}
#endif
#endif
