/* cuda_stub.c — cuda_api.h and the CUDA backend constructor for builds without the CUDA toolkit. */
#include "backend.h"
#include "cuda_api.h"
#include "status.h"

#include <stdio.h>

int ddp_cuda_device_count(void) { return 0; }
void ddp_cuda_device_name(int dev, char *buf, size_t n) { (void)dev; if (n) buf[0] = 0; }
void ddp_cuda_version_string(char *buf, size_t n) { snprintf(buf, n, "not built"); }
void ddp_nccl_version_string(char *buf, size_t n) { snprintf(buf, n, "not built"); }
int ddp_cuda_built(void) { return 0; }
void *ddp_backend_cuda_stream(struct ddp_backend *b) { (void)b; return NULL; }

ddp_status ddp_backend_cuda_create(int device, ddp_backend **out)
{
    (void)device;
    *out = NULL;
    return ddp_set_error(DDP_ERR_ARG, "--device cuda: this mpiddp was built without CUDA (configure with -DMPIDDP_CUDA=ON)");
}
