/* bench_kernels.h — bench_kernels' configurations, buffers and op table (bench_kernels_ops.c), shared with its
 * driver (bench_kernels.c). */
#ifndef BENCH_KERNELS_H
#define BENCH_KERNELS_H

#include "mpi_ddp/backend/backend.h"
#include "mpiddp.h"

#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                        \
    do {                                                                                \
        if ((call) != DDP_OK) {                                                         \
            fprintf(stderr, "bench_kernels: %s failed: %s\n", #call, ddp_last_error()); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

/* One configuration's buffers on one backend. */
enum { X0, X1, X2, Y0, Y1, W0, BIAS, VEC0, VEC1, VEC2, PA, PG, PM, PV, NBUF };
typedef struct {
    ddp_backend *be;
    float *f[NBUF];
    size_t n[NBUF];   /* floats */
    ddp_bf16 *h16[2]; /* X0's and X1's values rounded to bf16, n[X0] and n[X1] of them: the bf16 rows' inputs */
    int64_t *lab, *off, *seg, *sid;
    ddp_packing pk;
} bufs;

typedef struct {
    const char *model; /* "mlp" or "enc" */
    int64_t w;         /* H or d */
    int64_t f, heads, lo, hi, R, B, nparams;
    int64_t *hoff; /* host offsets [B+1] */
    double sum_n2;
    /* at --precision bf16, the storage the encoder's step uses on the backend (model_transformer.c): o16 the attention
     * output in bf16; qkv16 (a backend with gemm_epi) q|k|v and, with linear_bwd, their gradient; z16 also the z16
     * ops: linear1's output; do16 (z16 with linear_bwd) the attention output's gradient; t16 (z16 with
     * residual_layernorm_fwd16t) the out projection's and linear2's outputs. bk_set_bf16 sets them. */
    int bf16, o16, qkv16, dqkv16, z16, do16, t16;
} config;

/* One op: runs it on q; `out` names the buffer it writes (compared by --check; -1: none), its length in floats, or in
 * bf16 values where out16; nocheck: the CPU backend lacks the op. */
typedef struct {
    const char *name;
    char shape[96];
    double flops, bytes;
    int out, out16, nocheck;
    size_t out_n;
} opdesc;

/* A configuration: model "mlp" or "enc", width w (H or d), heads, sample lengths lo..hi, about `rows` rows. */
void bk_make_config(config *c, const char *model, int64_t w, int64_t heads, int64_t lo, int64_t hi, int64_t rows);
/* The bf16 storage flags of c for backend be at precision pr (all 0 but at bf16). */
void bk_set_bf16(config *c, const ddp_backend *be, ddp_precision pr);
void bk_bufs_create(bufs *q, ddp_backend *be, const config *c);
void bk_bufs_free(bufs *q);
/* The op table: index i of a configuration. Returns 0 past the end. Fills d and, when q is given, runs the op once. */
int bk_op_at(const config *c, int i, opdesc *d, bufs *q);

#endif
