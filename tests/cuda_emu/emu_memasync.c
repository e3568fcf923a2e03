/* emu_memasync.c — the stream-ordered allocator of the emulated runtime (cudaMallocAsync, cudaFreeAsync):
 * an allocation is usable at once (host memory is), and a free is an operation of its stream, run after
 * the work queued before it, so it neither waits for the device nor frees memory a queued kernel reads. */
#include "emu_cuda.h"

cudaError_t ddp_emu__free_now(void *p);
void ddp_emu__fault(const char *fmt, const char *name);

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s)
{
    (void)s; /* memory usable at once is usable in stream order */
    return cudaMalloc(p, bytes);
}

static void free_op(void *p)
{
    if (ddp_emu__free_now(p) != cudaSuccess) ddp_emu__fault("%s: not the start of a device allocation", "cudaFreeAsync");
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    if (!p) return cudaSuccess;
    if (!ddp_emu_is_device_ptr(p, 1)) return cudaErrorInvalidDevicePointer;
    return ddp_emu_enqueue(s, free_op, p, NULL);
}
