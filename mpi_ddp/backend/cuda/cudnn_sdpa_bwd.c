/* cudnn_sdpa_bwd.c — cuDNN's fused attention backward as the operation graph its flash engines take (matmul,
 * pointwise, reduction and reshape operations; docs/transformer.md), over the packed rows of one shape class. */
#include "mpi_ddp/backend/cuda/cudnn_sdpa_priv.h"

#include <stddef.h>

#define BWD_OPS 24 /* the graph's operations: 23 */

typedef struct {
    ddp_sdpa *s;
    sdpa_plan *p;
    cudnnStatus_t *r;
    int64_t uid; /* the next virtual tensor's */
    cudnnBackendDescriptor_t ops[BWD_OPS], mm;
    int nops;
} graph;

int64_t ddp_sdpa_rowsum_bytes(const ddp_sdpa_key *k) { return (k->B * k->H * k->S * 4 + 255) / 256 * 256; }

static cudnnBackendDescriptor_t virt(graph *g, cudnnDataType_t t, const int64_t dim[4], const int64_t str[4],
                                     cudnnBackendDescriptor_t ragged)
{
    return ddp_sdpa_tensor(g->s, g->p, g->uid++, t, dim, str, 16, ragged, SDPA_VIRTUAL, g->r);
}

/* an operation of type t with n (attribute, descriptor) pairs, finalized and added to the graph */
static void op(graph *g, cudnnBackendDescriptorType_t t, int n, const cudnnBackendAttributeName_t *a,
               const cudnnBackendDescriptor_t *d)
{
    cudnnBackendDescriptor_t o = ddp_sdpa_desc(g->s, g->p, t, g->r);
    for (int i = 0; i < n; i++)
        if (d[i]) ddp_sdpa_set(g->s, o, a[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[i], g->r);
    ddp_sdpa_fin(g->s, o, g->r);
    if (*g->r == CUDNN_STATUS_SUCCESS && g->nops == BWD_OPS)
        *g->r = CUDNN_STATUS_INTERNAL_ERROR; /* BWD_OPS too small */
    if (*g->r == CUDNN_STATUS_SUCCESS) g->ops[g->nops++] = o;
}

/* y = mode(x, b, t) elementwise (b and t broadcast, or NULL), computed in prec; axis: GEN_INDEX's */
static cudnnBackendDescriptor_t pw(graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                                   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                   cudnnBackendDescriptor_t y, int64_t axis)
{
    cudnnBackendDescriptor_t f = ddp_sdpa_desc(g->s, g->p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, g->r);
    ddp_sdpa_set(g->s, f, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, g->r);
    ddp_sdpa_set(g->s, f, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, g->r);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
        ddp_sdpa_set(g->s, f, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, g->r);
    ddp_sdpa_fin(g->s, f, g->r);
    const cudnnBackendAttributeName_t a[] = {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                             CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                             CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
                                             CUDNN_ATTR_OPERATION_POINTWISE_YDESC};
    const cudnnBackendDescriptor_t d[] = {f, x, b, t, y};
    op(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 5, a, d);
    return y;
}

/* c = a.b per sample and head (fp32 accumulation), its m, n and k rows bounded by the sequence lengths (or NULL) */
static void mm(graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
               cudnnBackendDescriptor_t m, cudnnBackendDescriptor_t n, cudnnBackendDescriptor_t k)
{
    const cudnnBackendAttributeName_t at[] = {CUDNN_ATTR_OPERATION_MATMUL_ADESC,
                                              CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                              CUDNN_ATTR_OPERATION_MATMUL_CDESC,
                                              CUDNN_ATTR_OPERATION_MATMUL_DESC,
                                              CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                                              CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                                              CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC};
    const cudnnBackendDescriptor_t d[] = {a, b, c, g->mm, m, n, k};
    op(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 7, at, d);
}

/* y: x's elements in y's dimensions and strides (a transpose), at y's type */
static cudnnBackendDescriptor_t reshape(graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    const cudnnBackendAttributeName_t a[] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
    const cudnnBackendDescriptor_t d[] = {x, y};
    op(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, a, d);
    return y;
}

/* The flash backward of one head (NVIDIA's frontend lowers its SDPA backward to the same graph), with P = exp(scale
 * Q.K^T - stats) masked past each sample's rows:
 *   rowsum = sum_d dO.O (fp32, kept: the workspace's start); dV = bf16(P)^T.dO; dS = scale P (dO.V^T - rowsum);
 *   dK = bf16(dS)^T.Q; dQ = dS.K, written by its matmul (no fp32 accumulator: the deterministic form on Hopper).
 * K and V enter transposed (dims [B,H,D,S], the same bytes). */
cudnnBackendDescriptor_t ddp_sdpa_bwd_graph(ddp_sdpa *s, sdpa_plan *p, cudnnStatus_t *r)
{
    const ddp_sdpa_key *k = &p->k;
    const int64_t B = k->B, H = k->H, S = k->S, D = k->D, d = H * D;
    const int64_t one[4] = {1, 1, 1, 1}, qdim[4] = {B, H, S, D}, qstr[4] = {S * 3 * d, D, 3 * d, 1};
    const int64_t ostr[4] = {S * d, D, d, 1}, sdim[4] = {B, H, S, 1}, rstr[4] = {H * S, S, 1, 1};
    const int64_t pdim[4] = {B, H, S, S}, pstr[4] = {H * S * S, S * S, S, 1}, ptstr[4] = {H * S * S, S * S, 1, S};
    const int64_t vstr[4] = {H * S * D, S * D, D, 1};
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_BFLOAT16, I = CUDNN_DATA_INT32,
                          BOOL = CUDNN_DATA_BOOLEAN;
    graph g = {.s = s, .p = p, .r = r, .uid = U_VIRTUAL};
    sdpa_io t;
    ddp_sdpa_io(s, p, 1, &t, r);
    cudnnBackendDescriptor_t q = t.q, kt = t.k, vt = t.v, o = t.o, st = t.st, sc = t.sc, sq = t.sq, skv = t.skv,
                             rq = t.rq;
    cudnnBackendDescriptor_t dout = ddp_sdpa_tensor(s, p, U_DO, BF, qdim, ostr, 16, t.ro, 0, r);
    cudnnBackendDescriptor_t one_t = ddp_sdpa_tensor(s, p, U_ONE, F, one, one, 4, NULL, SDPA_BY_VALUE, r);
    cudnnBackendDescriptor_t ninf = ddp_sdpa_tensor(s, p, U_NEG_INF, F, one, one, 4, NULL, SDPA_BY_VALUE, r);
    cudnnBackendDescriptor_t rowsum = ddp_sdpa_tensor(s, p, U_ROWSUM, F, sdim, rstr, 16, NULL, 0, r);
    cudnnBackendDescriptor_t dq = ddp_sdpa_tensor(s, p, U_DQ, BF, qdim, qstr, 16, rq, 0, r);
    cudnnBackendDescriptor_t dk = ddp_sdpa_tensor(s, p, U_DK, BF, qdim, qstr, 16, rq, 0, r);
    cudnnBackendDescriptor_t dv = ddp_sdpa_tensor(s, p, U_DV, BF, qdim, qstr, 16, rq, 0, r);
    cudnnDataType_t comp = F;
    g.mm = ddp_sdpa_desc(s, p, CUDNN_BACKEND_MATMUL_DESCRIPTOR, r);
    ddp_sdpa_set(s, g.mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, r);
    ddp_sdpa_fin(s, g.mm, r);

    /* rowsum = (sum_d dO.O) . 1 */
    cudnnBackendDescriptor_t red = ddp_sdpa_desc(s, p, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, r);
    cudnnReduceTensorOp_t add = CUDNN_REDUCE_TENSOR_ADD;
    ddp_sdpa_set(s, red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &add, r);
    ddp_sdpa_set(s, red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, r);
    ddp_sdpa_fin(s, red, r);
    cudnnBackendDescriptor_t dodo = pw(&g, CUDNN_POINTWISE_MUL, F, dout, o, NULL, virt(&g, F, qdim, vstr, NULL), 0);
    cudnnBackendDescriptor_t sum = virt(&g, F, sdim, rstr, NULL);
    const cudnnBackendAttributeName_t ra[] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                              CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                              CUDNN_ATTR_OPERATION_REDUCTION_DESC};
    const cudnnBackendDescriptor_t rd[] = {dodo, sum, red};
    op(&g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 3, ra, rd);
    pw(&g, CUDNN_POINTWISE_MUL, F, sum, one_t, NULL, rowsum, 0);

    /* P = exp(mask(scale Q.K^T) - stats), -inf past a sample's rows */
    cudnnBackendDescriptor_t s0 = virt(&g, F, pdim, pstr, NULL);
    mm(&g, q, kt, s0, sq, skv, NULL);
    cudnnBackendDescriptor_t s1 = pw(&g, CUDNN_POINTWISE_MUL, F, s0, sc, NULL, virt(&g, F, pdim, pstr, NULL), 0);
    cudnnBackendDescriptor_t row = pw(&g, CUDNN_POINTWISE_GEN_INDEX, I, s1, NULL, NULL, virt(&g, I, pdim, pstr, NULL),
                                      2);
    cudnnBackendDescriptor_t col = pw(&g, CUDNN_POINTWISE_GEN_INDEX, I, s1, NULL, NULL, virt(&g, I, pdim, pstr, NULL),
                                      3);
    cudnnBackendDescriptor_t rm = pw(&g, CUDNN_POINTWISE_CMP_LT, BOOL, row, sq, NULL, virt(&g, BOOL, pdim, pstr, NULL),
                                     0);
    cudnnBackendDescriptor_t cm = pw(&g, CUDNN_POINTWISE_CMP_LT, BOOL, col, skv, NULL, virt(&g, BOOL, pdim, pstr, NULL),
                                     0);
    cudnnBackendDescriptor_t in = pw(&g, CUDNN_POINTWISE_LOGICAL_AND, BOOL, rm, cm, NULL,
                                     virt(&g, BOOL, pdim, pstr, NULL), 0);
    cudnnBackendDescriptor_t s2 = pw(&g, CUDNN_POINTWISE_BINARY_SELECT, F, s1, ninf, in, virt(&g, F, pdim, pstr, NULL),
                                     0);
    cudnnBackendDescriptor_t s3 = pw(&g, CUDNN_POINTWISE_SUB, F, s2, st, NULL, virt(&g, F, pdim, pstr, NULL), 0);
    cudnnBackendDescriptor_t pr = pw(&g, CUDNN_POINTWISE_EXP, F, s3, NULL, NULL, virt(&g, F, pdim, pstr, NULL), 0);

    /* dV = bf16(P)^T.dO */
    mm(&g, reshape(&g, pr, virt(&g, BF, pdim, ptstr, NULL)), dout, dv, skv, NULL, sq);
    /* dS = scale P (dO.V^T - rowsum) */
    cudnnBackendDescriptor_t dp = virt(&g, F, pdim, pstr, NULL);
    mm(&g, dout, vt, dp, sq, skv, NULL);
    cudnnBackendDescriptor_t t1 = pw(&g, CUDNN_POINTWISE_SUB, F, dp, rowsum, NULL, virt(&g, F, pdim, pstr, NULL), 0);
    cudnnBackendDescriptor_t t2 = pw(&g, CUDNN_POINTWISE_MUL, F, t1, pr, NULL, virt(&g, F, pdim, pstr, NULL), 0);
    cudnnBackendDescriptor_t ds = pw(&g, CUDNN_POINTWISE_MUL, F, t2, sc, NULL, virt(&g, F, pdim, pstr, NULL), 0);
    /* dK = bf16(dS)^T.Q; dQ = dS.K (K: K^T's bytes in [B,H,S,D]) */
    mm(&g, reshape(&g, ds, virt(&g, BF, pdim, ptstr, NULL)), q, dk, skv, NULL, sq);
    mm(&g, ds, reshape(&g, kt, virt(&g, BF, qdim, qstr, rq)), dq, sq, NULL, skv);

    cudnnBackendDescriptor_t gr = ddp_sdpa_desc(s, p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, r);
    ddp_sdpa_set(s, gr, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g.nops, g.ops, r);
    ddp_sdpa_set(s, gr, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->h, r);
    ddp_sdpa_fin(s, gr, r);
    return *r == CUDNN_STATUS_SUCCESS ? gr : NULL;
}
