/* bf16_round.h — the CPU backend's one rounding of fp32 to bf16 (nearest even, NaN kept a quiet NaN) and the exact
 * widening back: backend_cpu_bf16.c rounds GEMM operands with it, backend_cpu_enc.c and backend_cpu_enc_attn.c the
 * activations their "16" ops store (ddp_bf16, backend.h), so an activation stored rounded and one rounded at GEMM time
 * are the same bits. */
#ifndef DDP_BF16_ROUND_H
#define DDP_BF16_ROUND_H

#include <stdint.h>
#include <string.h>

/* f rounded to bf16, nearest even, as the top 16 bits of an fp32 (the low 16 are 0) */
static inline uint32_t ddp_bf16_rne(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) & 0xffff0000u : r; /* NaN stays a (quiet) NaN */
}
/* f rounded to bf16: its bits (a ddp_bf16) */
static inline uint16_t ddp_bf16_bits(float f) { return (uint16_t)(ddp_bf16_rne(f) >> 16); }
/* f rounded to bf16, as the fp32 of that value */
static inline float ddp_bf16_round(float f)
{
    uint32_t u = ddp_bf16_rne(f);
    memcpy(&f, &u, 4);
    return f;
}
/* the fp32 of bf16 bits h (exact) */
static inline float ddp_bf16_widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
