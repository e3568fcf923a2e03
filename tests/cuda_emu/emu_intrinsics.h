/* emu_intrinsics.h — the device-side built-ins the kernels use that the host compiler lacks (vector types,
 * fast-math intrinsics), for the host emulator: included by emu_cuda.h in the kernel-side section, C++ only.
 * Each one computes what CUDA documents (the fast-math ones to within their documented error: here, the
 * exact host function). Warp-level intrinsics (__shfl_*_sync) are not emulated: the kernels exchange data
 * through __shared__ and __syncthreads, whose semantics the fiber scheduler keeps. */
#ifndef DDP_EMU_INTRINSICS_H
#define DDP_EMU_INTRINSICS_H

#include <math.h>

struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
/* glibc declares __expf itself: the kernels' names are mapped onto ddp_emu_* ones */
static inline float ddp_emu_expf(float x) { return expf(x); }
static inline float ddp_emu_fdividef(float x, float y) { return x / y; }
#define __expf ddp_emu_expf
#define __fdividef ddp_emu_fdividef
template <class T> static inline T __ldg(const T *p) { return *p; }

#endif
