/* cudnn_sdpa_desc.c — the cuDNN descriptors both attention graphs are built from (cudnn_sdpa.c's forward,
 * cudnn_sdpa_bwd.c's backward): each kept by its plan, attributes set and finalized with the build's first failure
 * carried along, tensors, and the tensors both graphs read over the packed rows. */
#include "mpi_ddp/backend/cuda/cudnn_sdpa_priv.h"

#include <stdbool.h>

cudnnBackendDescriptor_t ddp_sdpa_desc(ddp_sdpa *s, sdpa_plan *p, cudnnBackendDescriptorType_t t, cudnnStatus_t *r)
{
    cudnnBackendDescriptor_t d = NULL;
    if (*r == CUDNN_STATUS_SUCCESS && p->nd == SDPA_DESCS) *r = CUDNN_STATUS_INTERNAL_ERROR; /* SDPA_DESCS too small */
    if (*r != CUDNN_STATUS_SUCCESS) return NULL;
    *r = s->f.cudnnBackendCreateDescriptor(t, &d);
    if (*r == CUDNN_STATUS_SUCCESS) p->d[p->nd++] = d;
    return d;
}
void ddp_sdpa_set(ddp_sdpa *s, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                  int64_t count, const void *v, cudnnStatus_t *r)
{
    if (*r == CUDNN_STATUS_SUCCESS) *r = s->f.cudnnBackendSetAttribute(d, a, t, count, v);
}
void ddp_sdpa_fin(ddp_sdpa *s, cudnnBackendDescriptor_t d, cudnnStatus_t *r)
{
    if (*r == CUDNN_STATUS_SUCCESS) *r = s->f.cudnnBackendFinalize(d);
}

cudnnBackendDescriptor_t ddp_sdpa_tensor(ddp_sdpa *s, sdpa_plan *p, int64_t uid, cudnnDataType_t t,
                                         const int64_t dim[4], const int64_t str[4], int64_t align,
                                         cudnnBackendDescriptor_t ragged, int flags, cudnnStatus_t *r)
{
    cudnnBackendDescriptor_t d = ddp_sdpa_desc(s, p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, r);
    ddp_sdpa_set(s, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t, r);
    ddp_sdpa_set(s, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, r);
    ddp_sdpa_set(s, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, r);
    ddp_sdpa_set(s, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, r);
    ddp_sdpa_set(s, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, r);
    bool yes = true;
    if (flags & SDPA_BY_VALUE) ddp_sdpa_set(s, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, r);
    if (flags & SDPA_VIRTUAL) ddp_sdpa_set(s, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes, r);
    if (ragged) ddp_sdpa_set(s, d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ragged, r);
    ddp_sdpa_fin(s, d, r);
    return d;
}

void ddp_sdpa_io(ddp_sdpa *s, sdpa_plan *p, int kv_t, sdpa_io *t, cudnnStatus_t *r)
{
    const ddp_sdpa_key *k = &p->k;
    const int64_t B = k->B, H = k->H, S = k->S, D = k->D, d = H * D;
    const int64_t one[4] = {1, 1, 1, 1}, off_dim[4] = {B + 1, 1, 1, 1}, seq_dim[4] = {B, 1, 1, 1};
    const int64_t qdim[4] = {B, H, S, D}, qstr[4] = {S * 3 * d, D, 3 * d, 1}, ostr[4] = {S * d, D, d, 1};
    const int64_t tdim[4] = {B, H, D, S}, tstr[4] = {S * 3 * d, D, 1, 3 * d};
    const int64_t sdim[4] = {B, H, S, 1}, sstr[4] = {S * H, 1, H, 1};
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_BFLOAT16, I = CUDNN_DATA_INT32;
    t->rq = ddp_sdpa_tensor(s, p, U_OFF_QKV, I, off_dim, one, 4, NULL, 0, r);
    t->ro = ddp_sdpa_tensor(s, p, U_OFF_O, I, off_dim, one, 4, NULL, 0, r);
    t->rs = ddp_sdpa_tensor(s, p, U_OFF_ST, I, off_dim, one, 4, NULL, 0, r);
    t->q = ddp_sdpa_tensor(s, p, U_Q, BF, qdim, qstr, 16, t->rq, 0, r);
    t->k = ddp_sdpa_tensor(s, p, U_K, BF, kv_t ? tdim : qdim, kv_t ? tstr : qstr, 16, t->rq, 0, r);
    t->v = ddp_sdpa_tensor(s, p, U_V, BF, kv_t ? tdim : qdim, kv_t ? tstr : qstr, 16, t->rq, 0, r);
    t->o = ddp_sdpa_tensor(s, p, U_O, BF, qdim, ostr, 16, t->ro, 0, r);
    t->st = ddp_sdpa_tensor(s, p, U_ST, F, sdim, sstr, k->st_align, t->rs, 0, r);
    t->sc = ddp_sdpa_tensor(s, p, U_SCALE, F, one, one, 4, NULL, SDPA_BY_VALUE, r);
    /* the two sequence lengths are the same buffer, two tensors (as NVIDIA's code gives them) */
    t->sq = ddp_sdpa_tensor(s, p, U_SEQ_Q, I, seq_dim, one, 4, NULL, 0, r);
    t->skv = ddp_sdpa_tensor(s, p, U_SEQ_KV, I, seq_dim, one, 4, NULL, 0, r);
}
