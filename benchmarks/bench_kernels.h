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
    size_t n[NBUF]; /* floats */
    int64_t *lab, *off, *seg, *sid;
    ddp_packing pk;
} bufs;

typedef struct {
    const char *model; /* "mlp" or "enc" */
    int64_t w;         /* H or d */
    int64_t f, heads, lo, hi, R, B, nparams;
    int64_t *hoff; /* host offsets [B+1] */
    double sum_n2;
} config;

/* One op: runs it on q; `out` names the buffer it writes (compared by --check), its length in floats. */
typedef struct {
    const char *name;
    char shape[96];
    double flops, bytes;
    int out;
    size_t out_n;
} opdesc;

/* A configuration: model "mlp" or "enc", width w (H or d), heads, sample lengths lo..hi, about `rows` rows. */
void bk_make_config(config *c, const char *model, int64_t w, int64_t heads, int64_t lo, int64_t hi, int64_t rows);
void bk_bufs_create(bufs *q, ddp_backend *be, const config *c);
void bk_bufs_free(bufs *q);
/* The op table: index i of a configuration. Returns 0 past the end. Fills d and, when q is given, runs the op once. */
int bk_op_at(const config *c, int i, opdesc *d, bufs *q);

#endif
