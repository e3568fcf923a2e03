/* cuda_api.h — the few CUDA facts the host code needs (device count, names, versions), with a stub
 * implementation for builds without the CUDA toolkit, so callers need no #ifdef. */
#ifndef DDP_CUDA_API_H
#define DDP_CUDA_API_H

#include "mpiddp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices; 0 when none, when the driver is missing, or without CUDA support. */
int ddp_cuda_device_count(void);
/* Writes "<name> (cc X.Y)" of device dev, or "" when unavailable. */
void ddp_cuda_device_name(int dev, char *buf, size_t n);
/* "runtime X.Y driver X.Y" or "not built". */
void ddp_cuda_version_string(char *buf, size_t n);
/* "X.Y.Z" or "not built". */
void ddp_nccl_version_string(char *buf, size_t n);
int ddp_cuda_built(void);
/* The compute stream (cudaStream_t) of a CUDA backend; NULL without CUDA. */
struct ddp_backend;
void *ddp_backend_cuda_stream(struct ddp_backend *b);

#ifdef __cplusplus
}
#endif
#endif
