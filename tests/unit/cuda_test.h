/* cuda_test.h — how the CUDA test programs (test_cuda_backend, test_cuda_norm, test_precision) start: the
 * usable devices, or why there are none. A machine without NVIDIA device nodes and without
 * MPIDDP_CUDA_PLUGIN (the host emulator) skips (exit 77); one that has either but no usable device fails. */
#ifndef DDP_TEST_CUDA_TEST_H
#define DDP_TEST_CUDA_TEST_H

#include "mpi_ddp/backend/cuda/cuda_api.h"

#include <stdio.h>
#include <stdlib.h>

/* The number of usable devices (> 0), or 0 with *exit_code set to 77 (skip) or 1 (fail), the reason printed. */
static inline int cuda_test_devices(int *exit_code)
{
    const char *plugin = getenv("MPIDDP_CUDA_PLUGIN");
    int ndev = ddp_cuda_device_count();
    if (ndev > 0) return ndev;
    if (!ddp_cuda_maybe_present()) { /* true when MPIDDP_CUDA_PLUGIN names a plugin */
        printf("SKIP: no NVIDIA device node and no MPIDDP_CUDA_PLUGIN: nothing to test here\n");
        *exit_code = 77;
    } else {
        fprintf(stderr, "FAIL: %s exist%s but no CUDA device is usable: %s\n",
                plugin && *plugin ? "MPIDDP_CUDA_PLUGIN" : "NVIDIA device nodes", plugin && *plugin ? "s" : "",
                ddp_cuda_device_why());
        *exit_code = 1;
    }
    return 0;
}

#endif
