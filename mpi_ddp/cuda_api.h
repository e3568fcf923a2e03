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

#define DDP_CUDA_API_VERSION 1
#define DDP_NCCL_ID_BYTES 128

/* What the plugin exports (ddp_cuda_plugin_api). Streams, events and communicators are opaque. */
typedef struct {
    int version;
    int (*device_count)(void);
    void (*device_name)(int dev, char *buf, size_t n);
    void (*version_string)(char *buf, size_t n);
    void (*nccl_version_string)(char *buf, size_t n);
    ddp_status (*backend_create)(int dev, struct ddp_backend **out);
    void *(*backend_stream)(struct ddp_backend *b);
    ddp_status (*nccl_unique_id)(void *id /* DDP_NCCL_ID_BYTES */);
    ddp_status (*nccl_init)(void **comm, int nranks, const void *id, int rank, int dev);
    void (*nccl_destroy)(void *comm);
    ddp_status (*nccl_allreduce_sum)(void *comm, float *buf, int64_t count, void *stream);
    ddp_status (*stream_create)(void **stream);
    void (*stream_destroy)(void *stream);
    ddp_status (*event_create)(void **event);
    void (*event_destroy)(void *event);
    /* `to` waits for all work queued on `from` so far (event record + stream wait). */
    ddp_status (*stream_wait)(void *event, void *from, void *to);
    ddp_status (*stream_sync)(void *stream);
} ddp_cuda_api;

/* Plugin entry point. */
typedef const ddp_cuda_api *(*ddp_cuda_plugin_fn)(ddp_set_error_fn set_error);
const ddp_cuda_api *ddp_cuda_plugin_api(ddp_set_error_fn set_error);

/* The loaded plugin, or NULL (then ddp_cuda_why() says why). Thread-safe after the first call. */
const ddp_cuda_api *ddp_cuda(void);
const char *ddp_cuda_why(void);

/* Conveniences over ddp_cuda(): 0 devices / "not available" when there is no plugin. They do not load
 * the plugin on a machine without NVIDIA device nodes (see ddp_cuda_maybe_present). */
int ddp_cuda_maybe_present(void);
int ddp_cuda_loaded(void);
int ddp_cuda_device_count(void);
void ddp_cuda_device_name(int dev, char *buf, size_t n);
void ddp_cuda_version_string(char *buf, size_t n);
void ddp_nccl_version_string(char *buf, size_t n);
int ddp_cuda_built(void);
void *ddp_backend_cuda_stream(struct ddp_backend *b);

#ifdef __cplusplus
}
#endif
#endif
