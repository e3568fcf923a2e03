/* emu_intrinsics.h — the device-side built-ins the kernels use that the host compiler lacks (vector types,
 * fast-math intrinsics), for the host emulator: included by emu_cuda.h in the kernel-side section, C++ only.
 * Each one computes what CUDA documents (the fast-math ones to within their documented error: here, the
 * exact host function). The warp shuffles (__shfl_sync, __shfl_xor_sync) go through ddp_emu_shfl, a warp
 * barrier of the fiber scheduler (emu_launch.c); every lane of the warp must take part (a full mask). */
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
/* value v of lane `src` (within segments of `width` lanes) */
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    (void)mask;
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    const unsigned lane = ddp_emu_lane(), seg = lane & ~(unsigned)(width - 1);
    b = ddp_emu_shfl(b, seg + ((unsigned)src & (unsigned)(width - 1)));
    memcpy(&v, &b, sizeof v);
    return v;
}
/* value v of lane (lane ^ m), where that lane is in the caller's segment of `width` lanes, else the caller's own */
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
    const unsigned lane = ddp_emu_lane(), src = lane ^ (unsigned)m;
    return __shfl_sync(mask, v, (int)((src & ~(unsigned)(width - 1)) == (lane & ~(unsigned)(width - 1)) ? src : lane),
                       32);
}

#endif
