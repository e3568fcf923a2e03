/* cudnn_sdpa.h — cuDNN's fused attention for the CUDA backend (cudnn_sdpa.c): cuDNN loaded with dlopen, SDPA forward
 * and backward graphs over packed rows (ragged offsets), their execution plans cached per shape class. Plain C: no
 * CUDA or cuDNN type crosses it, so the .cu files that feed it need no cuDNN header. */
#ifndef DDP_CUDNN_SDPA_H
#define DDP_CUDNN_SDPA_H

#include "mpi_ddp/core/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_sdpa ddp_sdpa;

/* A shape class: B samples (a power of two), S rows each at most (a multiple of 64), H heads of width D; the qkv
 * rows' stride is 3*H*D, o's H*D, the statistics' H. st_align: the statistics pointer's alignment (4, 8 or 16). */
typedef struct {
    int bwd;
    int64_t B, S, H, D, st_align;
} ddp_sdpa_key;

/* The device pointers of one call (bf16 unless marked): q|k|v rows [R, 3HD] and their gradients, o and do [R, HD],
 * the statistics (fp32 log-sum-exp, [R, H]), the sequence lengths [B] and the ragged offsets [B+1] of q|k|v, o and
 * the statistics (int32, elements), the workspace. */
typedef struct {
    void *qkv, *o, *dout, *dqkv;
    float *stats;
    int32_t *seq, *off_qkv, *off_o, *off_st;
    void *ws;
    float scale;
} ddp_sdpa_ptrs;

/* What the cache did: plans built and their total build time, calls served by a cached plan, shape classes cuDNN
 * refused (their calls run the own kernels), the global index of the last backward engine and whether it is
 * deterministic. */
typedef struct {
    int64_t built, hits, refused, build_us, bwd_engine;
    int bwd_deterministic;
} ddp_sdpa_counts;

/* Loads cuDNN ($MPIDDP_CUDNN_LIB, else libcudnn_graph.so.9 from the directory configure found, else from the loader's
 * path) and makes a handle on `stream` (a cudaStream_t). Where cuDNN cannot be loaded *out is NULL, why says so, and
 * the status is DDP_OK: a missing cuDNN is a fact, not an error. */
ddp_status ddp_sdpa_create(void *stream, ddp_sdpa **out, char *why, size_t n);
void ddp_sdpa_destroy(ddp_sdpa *s);
/* "9.19.0 (<library>)" of the cuDNN ddp_sdpa_create would load, or "unavailable: <why>" (mpiddp env) */
void ddp_sdpa_describe(char *buf, size_t n);
/* "cuDNN 9.19.0 (<library>)" */
const char *ddp_sdpa_version(const ddp_sdpa *s);
/* The plan of k, built on first use: *ok = 0 when cuDNN refused the class (why in ddp_sdpa_refusal), else *ws the
 * workspace its execution needs. Errors other than a refusal are returned. */
ddp_status ddp_sdpa_prepare(ddp_sdpa *s, const ddp_sdpa_key *k, int *ok, int64_t *ws);
/* Queues k's plan (prepared) on the stream over p. */
ddp_status ddp_sdpa_run(ddp_sdpa *s, const ddp_sdpa_key *k, const ddp_sdpa_ptrs *p);
const char *ddp_sdpa_refusal(const ddp_sdpa *s);
void ddp_sdpa_counts_get(const ddp_sdpa *s, ddp_sdpa_counts *c);

#ifdef __cplusplus
}
#endif
#endif
