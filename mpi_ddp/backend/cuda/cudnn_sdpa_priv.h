/* cudnn_sdpa_priv.h — private to cudnn_sdpa*.c: the loaded cuDNN, the plan cache, the tensors' unique ids, and the
 * descriptor helpers (cudnn_sdpa_desc.c) the forward (cudnn_sdpa.c) and backward (cudnn_sdpa_bwd.c) graphs share. */
#ifndef DDP_CUDNN_SDPA_PRIV_H
#define DDP_CUDNN_SDPA_PRIV_H

#include "mpi_ddp/backend/cuda/cudnn_sdpa.h"

#include <cudnn_graph.h>

#define SDPA_PLANS 64   /* shape classes kept (a few per epoch: docs/transformer.md) */
#define SDPA_DESCS 112  /* descriptors one plan owns (the backward: 79) */
#define SDPA_CONFIGS 16 /* engine configurations asked of the heuristics */

/* the entry points used, resolved by dlsym */
// clang-format off
#define SDPA_FNS(X)                                                                                   \
    X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate) X(cudnnDestroy) \
    X(cudnnSetStream)                                                                                 \
    X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute)      \
    X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)
// clang-format on
typedef struct {
#define SDPA_FN_FIELD(f) __typeof__(f) *f;
    SDPA_FNS(SDPA_FN_FIELD)
#undef SDPA_FN_FIELD
} sdpa_api;

typedef struct {
    ddp_sdpa_key k;
    int used, ok;
    cudnnBackendDescriptor_t plan, d[SDPA_DESCS]; /* the plan and every descriptor it was built from */
    int nd;
    int64_t ws,
        last; /* workspace bytes (the backward's: its row sums first, then cuDNN's); the call that last used it */
} sdpa_plan;

struct ddp_sdpa {
    void *lib;
    sdpa_api f;
    cudnnHandle_t h;
    sdpa_plan plans[SDPA_PLANS];
    int64_t calls;
    /* descriptors of evicted plans: their kernels may still be queued on the stream, so they are destroyed with the
     * handle, after the backend has synchronized its stream (cu_destroy) */
    cudnnBackendDescriptor_t *dead;
    int64_t ndead;
    ddp_sdpa_counts n;
    char version[1300], refusal[600], last[300];
};

/* the tensors' unique ids in the graphs and variant packs; the backward's virtual tensors count up from U_VIRTUAL */
enum {
    U_Q = 1,
    U_K,
    U_V,
    U_O,
    U_ST,
    U_SCALE,
    U_SEQ_Q,
    U_SEQ_KV,
    U_DO,
    U_DQ,
    U_DK,
    U_DV,
    U_OFF_QKV,
    U_OFF_O,
    U_OFF_ST,
    U_ONE,
    U_NEG_INF,
    U_ROWSUM,
    U_VIRTUAL = 100
};
enum { SDPA_BY_VALUE = 1, SDPA_VIRTUAL = 2 }; /* ddp_sdpa_tensor's flags */

/* cudnn_sdpa_desc.c. A descriptor of type t, kept by p (freed with it); *r the first failure of the build. */
cudnnBackendDescriptor_t ddp_sdpa_desc(ddp_sdpa *s, sdpa_plan *p, cudnnBackendDescriptorType_t t, cudnnStatus_t *r);
void ddp_sdpa_set(ddp_sdpa *s, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                  int64_t count, const void *v, cudnnStatus_t *r);
void ddp_sdpa_fin(ddp_sdpa *s, cudnnBackendDescriptor_t d, cudnnStatus_t *r);
/* A finalized tensor: 4 dims, strides, unique id uid, type t; ragged (or NULL) its ragged-offset tensor. */
cudnnBackendDescriptor_t ddp_sdpa_tensor(ddp_sdpa *s, sdpa_plan *p, int64_t uid, cudnnDataType_t t,
                                         const int64_t dim[4], const int64_t str[4], int64_t align,
                                         cudnnBackendDescriptor_t ragged, int flags, cudnnStatus_t *r);
/* The tensors both graphs read: the ragged offsets of q|k|v, o and the statistics; q, k and v (at kv_t k and v
 * transposed, [B,H,D,S] over the same bytes, as the backward's matmuls take them), o, the statistics, the scale, the
 * two sequence lengths. */
typedef struct {
    cudnnBackendDescriptor_t rq, ro, rs, q, k, v, o, st, sc, sq, skv;
} sdpa_io;
void ddp_sdpa_io(ddp_sdpa *s, sdpa_plan *p, int kv_t, sdpa_io *t, cudnnStatus_t *r);
/* cudnn_sdpa_bwd.c: the backward's operation graph of p->k (finalized), NULL on failure (*r) */
cudnnBackendDescriptor_t ddp_sdpa_bwd_graph(ddp_sdpa *s, sdpa_plan *p, cudnnStatus_t *r);
/* bytes of the backward's row sums (dO.O, fp32 [B,H,S]) at the workspace's start, a multiple of 256 */
int64_t ddp_sdpa_rowsum_bytes(const ddp_sdpa_key *k);

#endif
