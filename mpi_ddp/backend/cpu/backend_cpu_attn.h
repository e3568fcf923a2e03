/* backend_cpu_attn.h — the CPU backend's attention ops (backend_cpu_enc_attn.c, in its encoder op table) and its tiled
 * attention (backend_cpu_attn.c), called per sample by their method switch. Private to the CPU backend. */
#ifndef DDP_BACKEND_CPU_ATTN_H
#define DDP_BACKEND_CPU_ATTN_H

#include "mpi_ddp/backend/backend.h"

/* ddp_enc_ops.attention_fwd and attention_bwd (backend.h) */
ddp_status ddp_cpu_attention_fwd(ddp_backend *b, const void *qkv, int qkv16, void *o, int o16, float *lse,
                                 const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr);
ddp_status ddp_cpu_attention_bwd(ddp_backend *b, const void *qkv, int qkv16, const void *o, int o16, const void *dout,
                                 int do16, const float *lse, void *dqkv, int dqkv16, float *delta,
                                 const ddp_packing *pack, int64_t d, int heads, const ddp_dropout *dr);
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
