/* backend_cpu_attn.h — the CPU backend's tiled attention (backend_cpu_attn.c), called per sample by the
 * method switch of backend_cpu_enc.c. Private to the CPU backend. */
#ifndef DDP_BACKEND_CPU_ATTN_H
#define DDP_BACKEND_CPU_ATTN_H

#include "mpi_ddp/backend/backend.h"

/* Scratch floats for one sample of up to nmax rows at head size dh (any alignment: the kernels align it). */
size_t ddp_cpu_attn_tiled_scratch(int64_t nmax, int64_t dh);
/* Sample s's forward: o and lse of every head, from q|k|v rows [R, 3d] (as attention_fwd in backend.h). */
void ddp_cpu_attn_tiled_fwd(const float *qkv, float *o, float *lse, const ddp_packing *pack, int64_t s, int64_t d,
                            int heads, const ddp_dropout *dr, float *scratch);
/* Sample s's backward: its rows of dqkv from dout, the saved lse and D = rowsum(dout * o) per head. */
void ddp_cpu_attn_tiled_bwd(const float *qkv, const float *dout, const float *lse, const float *D, float *dqkv,
                            const ddp_packing *pack, int64_t s, int64_t d, int heads, const ddp_dropout *dr,
                            float *scratch);

#endif
