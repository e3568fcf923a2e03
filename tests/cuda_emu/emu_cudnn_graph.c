/* emu_cudnn_graph.c — the emulated cuDNN's operation graphs of matmul, pointwise, reduction and reshape operations
 * (the fused-attention backward the plugin builds; see emu_cudnn.h): their finalize rules, and an interpreter that runs
 * such a graph on the host, op by op over whole tensors, on the handle's emulated stream. */
#include "emu_cudnn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ddp_emu_enqueue_host(void *stream, void (*fn)(void *), void *arg, void (*free_arg)(void *));
int ddp_emu_is_device_ptr(const void *p, size_t bytes);
void ddp_emu__fault(const char *fmt, const char *name);

#define MAXT 64 /* tensors of one graph */

/* ------------------------------------------------------------------ finalize */
static desc *att(const desc *d, cudnnBackendAttributeName_t name)
{
    const attr *a = get(d, name);
    return a && a->n ? ((desc **)a->v)[0] : NULL;
}
static int broadcasts(const desc *b, const desc *y) /* each of b's dims 1 or y's */
{
    for (int i = 0; i < 4; i++)
        if (b->dim[i] != 1 && b->dim[i] != y->dim[i]) return 0;
    return 1;
}
static int batch_ok(const desc *a, const desc *c) /* a's batch dims 1 or c's */
{
    return (a->dim[0] == 1 || a->dim[0] == c->dim[0]) && (a->dim[1] == 1 || a->dim[1] == c->dim[1]);
}
static int binary(cudnnPointwiseMode_t m)
{
    return m == CUDNN_POINTWISE_MUL || m == CUDNN_POINTWISE_SUB || m == CUDNN_POINTWISE_CMP_LT ||
           m == CUDNN_POINTWISE_LOGICAL_AND || m == CUDNN_POINTWISE_BINARY_SELECT;
}

cudnnStatus_t emu_cudnn_op_fin(desc *d)
{
    switch (d->type) {
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: {
        const attr *m = get(d, CUDNN_ATTR_POINTWISE_MODE);
        if (!m || !get(d, CUDNN_ATTR_POINTWISE_MATH_PREC))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "pointwise: mode and math precision required");
        d->mode = *(const cudnnPointwiseMode_t *)m->v;
        if (!binary(d->mode) && d->mode != CUDNN_POINTWISE_EXP && d->mode != CUDNN_POINTWISE_IDENTITY &&
            d->mode != CUDNN_POINTWISE_GEN_INDEX)
            return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "pointwise: mode %d outside the emulated subset",
                                  (int)d->mode);
        const attr *ax = get(d, CUDNN_ATTR_POINTWISE_AXIS);
        d->axis = ax ? *(const int64_t *)ax->v : -1;
        if (d->mode == CUDNN_POINTWISE_GEN_INDEX && (d->axis < 0 || d->axis > 3))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "pointwise GEN_INDEX: axis %lld", (long long)d->axis);
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
        return get(d, CUDNN_ATTR_MATMUL_COMP_TYPE) ? CUDNN_STATUS_SUCCESS
                                                   : emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "matmul: compute type");
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: {
        const attr *o = get(d, CUDNN_ATTR_REDUCTION_OPERATOR);
        if (!o || *(const cudnnReduceTensorOp_t *)o->v != CUDNN_REDUCE_TENSOR_ADD)
            return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "reduction: the emulator adds");
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
        const desc *f = att(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
        const desc *x = att(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC), *y = att(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
        const desc *b = att(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC), *t = att(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
        if (!f || !x || !y) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "pointwise operation: mode, x and y");
        if (!!b != binary(f->mode) || !!t != (f->mode == CUDNN_POINTWISE_BINARY_SELECT))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "pointwise operation %d: wrong operands", (int)f->mode);
        if (!broadcasts(x, y) || (b && !broadcasts(b, y)) || (t && !broadcasts(t, y)))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "pointwise operation: operands do not broadcast to y");
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
        const desc *a = att(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC), *b = att(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
        const desc *c = att(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
        if (!a || !b || !c || !att(d, CUDNN_ATTR_OPERATION_MATMUL_DESC))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "matmul operation: a, b, c and the matmul");
        if (a->dim[3] != b->dim[2] || a->dim[2] != c->dim[2] || b->dim[3] != c->dim[3] || !batch_ok(a, c) ||
            !batch_ok(b, c))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "matmul operation: a [.,.,M,K] b [.,.,K,N] c [.,.,M,N]");
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
        const desc *x = att(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC), *y = att(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
        if (!x || !y || !att(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC) || !broadcasts(y, x))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM,
                                  "reduction operation: x, y (x's dims or 1) and the reduction");
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: { /* the emulator's reshapes are transposes: y = x's dims permuted
                                                        */
        const desc *x = att(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC), *y = att(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
        if (!x || !y) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "reshape operation: x and y");
        int used = 0;
        for (int i = 0; i < 4; i++) {
            int k = 0;
            while (k < 4 && ((used >> k & 1) || x->dim[k] != y->dim[i] || x->str[k] != y->str[i])) k++;
            if (k == 4) return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "reshape: not a permutation of x's dims");
            used |= 1 << k, d->perm[i] = k;
        }
        return CUDNN_STATUS_SUCCESS;
    }
    default: return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d", (int)d->type);
    }
}

/* ------------------------------------------------------------------ the graph */
/* an operation's tensors: inputs first, its output last */
static int operands(const desc *op, const desc *t[8])
{
    static const cudnnBackendAttributeName_t pw[] = {
        CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
        CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_ATTR_OPERATION_POINTWISE_YDESC};
    static const cudnnBackendAttributeName_t mm[] = {CUDNN_ATTR_OPERATION_MATMUL_ADESC,
                                                     CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                                     CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                                                     CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                                                     CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
                                                     CUDNN_ATTR_OPERATION_MATMUL_CDESC};
    static const cudnnBackendAttributeName_t red[] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                                      CUDNN_ATTR_OPERATION_REDUCTION_YDESC};
    static const cudnnBackendAttributeName_t rs[] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
                                                     CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
    const cudnnBackendAttributeName_t *a = op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR   ? pw
                                           : op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR    ? mm
                                           : op->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ? red
                                                                                                      : rs;
    int n = a == pw ? 4 : a == mm ? 6 : 2;
    for (int i = 0; i < n; i++) t[i] = att(op, a[i]);
    return n;
}

typedef struct {
    int nt, nops;
    const desc *t[MAXT];
    const desc *op[64];
    int last[MAXT];    /* the last operation reading virtual tensor i (its buffer freed after it) */
    int bounded[MAXT]; /* bit k: tensor i's axis k holds values only below the sample's length (below: what ran) */
    const desc *len;   /* the sample lengths: rows of a ragged tensor past them do not exist */
} prog;

static int tindex(prog *g, const desc *t)
{
    for (int i = 0; i < g->nt; i++)
        if (g->t[i]->uid == t->uid) return g->t[i] == t ? i : -2;
    if (g->nt == MAXT) return -1;
    g->t[g->nt] = t;
    return g->nt++;
}

void emu_cudnn_prog_free(void *p) { free(p); }

/* A ragged tensor's row axis (its rows are the sample's): of the non-batch axes longer than 1, the one of the largest
 * stride */
static int row_axis(const desc *d)
{
    int ra = 2;
    for (int k = 1; k < 4; k++)
        if (d->dim[k] > 1 && (d->dim[ra] == 1 || d->str[k] > d->str[ra])) ra = k;
    return ra;
}

/* Which axes of op's output hold values only below the sample's length: a matmul's overridden M (axis 2) and N (3);
 * what an elementwise operation or a reduction keeps of its x; a reshape's permutation of x's; a real ragged tensor's
 * row axis. The interpreter computes only there: past it a value is never read by a bounded matmul, the only way to an
 * output (the interpreter's one shortcut, so that ragged batches cost what their rows do). */
static void bound_axes(prog *g, const desc *op, const desc **t, int n)
{
    int y = tindex(g, t[n - 1]), x = tindex(g, t[0]), bx = g->bounded[x];
    if (!t[0]->is_virtual && t[0]->ragged) bx = 1 << row_axis(t[0]);
    if (op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)
        g->bounded[y] = (t[2] ? 4 : 0) | (t[3] ? 8 : 0);
    else if (op->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)
        for (int k = 0; k < 4; k++) g->bounded[y] |= (bx >> op->perm[k] & 1) << k;
    else
        for (int k = 0; k < 4; k++) g->bounded[y] |= t[n - 1]->dim[k] == t[0]->dim[k] ? bx & (1 << k) : 0;
}

/* The operations in an order that runs each after the producers of its inputs; the tensors by unique id. */
cudnnStatus_t emu_cudnn_graph_fin(desc *d)
{
    const attr *ops = get(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    prog *g = calloc(1, sizeof *g);
    if (!g) return emu_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
    d->prog = g;
    int made[MAXT] = {0}, done[64] = {0};
    for (int64_t i = 0; i < ops->n; i++) {
        const desc *op = ((desc **)ops->v)[i], *t[8];
        if (is_sdpa(op->type))
            return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "operation graph: an SDPA operation goes alone");
        if (op->type != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR &&
            op->type != CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR &&
            op->type != CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR &&
            op->type != CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: descriptor type %d is no operation",
                                  (int)op->type);
        int n = operands(op, t);
        for (int k = 0; k < n; k++) {
            if (!t[k]) continue;
            int x = tindex(g, t[k]);
            if (x < 0 || (t[k]->ragged && tindex(g, t[k]->ragged) < 0))
                return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM,
                                      "operation graph: unique id %lld names two tensors "
                                      "(or more than %d tensors)",
                                      (long long)t[k]->uid, MAXT);
            if (k == n - 1 && made[x]++)
                return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: tensor %lld written twice",
                                      (long long)t[k]->uid);
        }
        if (!g->len && op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)
            g->len = att(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC);
    }
    for (int pass = 0; pass < 2; pass++) /* a virtual tensor read but never written; then the emulator's limits */
        for (int64_t i = 0; i < ops->n; i++) {
            const desc *op = ((desc **)ops->v)[i], *t[8];
            int n = operands(op, t);
            for (int k = 0; pass == 0 && k < n - 1; k++)
                if (t[k] && t[k]->is_virtual && !made[tindex(g, t[k])])
                    return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM,
                                          "operation graph: virtual tensor %lld read, never "
                                          "written",
                                          (long long)t[k]->uid);
            if (pass == 1 && !g->len)
                return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "operation graph: the emulator needs the lengths "
                                                                  "(a matmul's M override)");
            for (int k = 0; pass == 1 && k < n; k++) /* the lengths are per sample: each operand has theirs, or 1 */
                if (t[k] && t[k]->dim[0] != 1 && t[k]->dim[0] != g->len->dim[0])
                    return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM,
                                          "operation graph: tensor %lld has %lld samples, "
                                          "the lengths %lld",
                                          (long long)t[k]->uid, (long long)t[k]->dim[0], (long long)g->len->dim[0]);
        }
    int ready[MAXT] = {0};
    for (int progress = 1; progress && g->nops < ops->n;) { /* Kahn's order, by passes */
        progress = 0;
        for (int64_t i = 0; i < ops->n; i++) {
            const desc *op = ((desc **)ops->v)[i], *t[8];
            int n = operands(op, t), ok = !done[i];
            for (int k = 0; k < n - 1 && ok; k++) ok = !t[k] || !made[tindex(g, t[k])] || ready[tindex(g, t[k])];
            if (!ok) continue;
            done[i] = progress = 1;
            ready[tindex(g, t[n - 1])] = 1;
            for (int k = 0; k < n - 1; k++)
                if (t[k]) g->last[tindex(g, t[k])] = g->nops;
            g->op[g->nops++] = op;
            bound_axes(g, op, t, n);
        }
    }
    if (g->nops < ops->n) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: a cycle");
    d->graph = d, d->bwd = 1;
    return CUDNN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ the interpreter */
typedef struct {
    const desc *d;
    char *p;            /* a real tensor's memory (device), or val */
    float val;          /* a by-value tensor's value, copied at Execute (as cuDNN passes it to its kernels) */
    float *v;           /* a virtual tensor's values, at its strides (batch by stride, ragged offsets ignored) */
    const int32_t *rag; /* a real tensor's ragged offsets */
    int ra;             /* its row axis: the non-batch axis longer than 1 of the largest stride */
} gten;

typedef struct {
    const prog *g;
    gten t[MAXT];
    const int32_t *len;
} gjob;

static float as_type(cudnnDataType_t t, float v)
{
    return t == CUDNN_DATA_BFLOAT16  ? emu_bf16_to_f(emu_f_to_bf16(v))
           : t == CUDNN_DATA_BOOLEAN ? (float)(v != 0.0f)
                                     : v;
}

/* element idx of t (dims of 1 broadcast); *absent: a row of a ragged tensor past its sample's length */
static int64_t at(const gjob *j, const gten *t, const int64_t idx[4], int *absent)
{
    const desc *d = t->d;
    int64_t i[4];
    for (int k = 0; k < 4; k++) i[k] = d->dim[k] == 1 ? 0 : idx[k];
    *absent = t->rag && i[t->ra] >= j->len[i[0]];
    return (t->rag ? t->rag[i[0]] : i[0] * d->str[0]) + i[1] * d->str[1] + i[2] * d->str[2] + i[3] * d->str[3];
}
static float rd(const gjob *j, int x, const int64_t idx[4])
{
    const gten *t = &j->t[x];
    int absent;
    int64_t o = at(j, t, idx, &absent);
    if (t->v) return t->v[o];
    if (absent) return 0.0f; /* the flash engines never read it */
    switch (t->d->dt) {
    case CUDNN_DATA_BFLOAT16: return emu_bf16_to_f(((const uint16_t *)t->p)[o]);
    case CUDNN_DATA_INT32: return (float)((const int32_t *)t->p)[o];
    default: return ((const float *)t->p)[o];
    }
}
static int wr(const gjob *j, int x, const int64_t idx[4], float v)
{
    const gten *t = &j->t[x];
    int absent;
    int64_t o = at(j, t, idx, &absent);
    if (t->v) return t->v[o] = as_type(t->d->dt, v), 1;
    if (absent) return ddp_emu__fault("cuDNN graph: %s", "a write past a sample's rows (a missing override?)"), 0;
    if (t->d->dt == CUDNN_DATA_BFLOAT16)
        ((uint16_t *)t->p)[o] = emu_f_to_bf16(v);
    else
        ((float *)t->p)[o] = v;
    return 1;
}

/* every index of dims dm, axes whose bit bm holds below the sample's length */
#define LIM(j, dm, bm, k, b) (((bm) >> (k)&1) && (j)->len[b] < (dm)[k] ? (j)->len[b] : (dm)[k])
#define EACH(j, dm, bm, i)                                         \
    for (i[0] = 0; i[0] < (dm)[0]; i[0]++)                         \
        for (i[1] = 0; i[1] < (dm)[1]; i[1]++)                     \
            for (i[2] = 0; i[2] < LIM(j, dm, bm, 2, i[0]); i[2]++) \
                for (i[3] = 0; i[3] < LIM(j, dm, bm, 3, i[0]); i[3]++)

static int tix(const gjob *j, const desc *t) { return t ? tindex((prog *)j->g, t) : -1; }

static int run_pointwise(gjob *j, const desc *op)
{
    const desc *f = att(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), *t[8];
    operands(op, t);
    int x = tix(j, t[0]), b = tix(j, t[1]), s = tix(j, t[2]), y = tix(j, t[3]);
    int64_t i[4];
    EACH(j, t[3]->dim, j->g->bounded[y], i)
    {
        float a = rd(j, x, i), c = b >= 0 ? rd(j, b, i) : 0.0f, v;
        switch (f->mode) {
        case CUDNN_POINTWISE_MUL: v = a * c; break;
        case CUDNN_POINTWISE_SUB: v = a - c; break;
        case CUDNN_POINTWISE_EXP: v = expf(a); break;
        case CUDNN_POINTWISE_GEN_INDEX: v = (float)i[f->axis]; break;
        case CUDNN_POINTWISE_CMP_LT: v = a < c; break;
        case CUDNN_POINTWISE_LOGICAL_AND: v = a != 0.0f && c != 0.0f; break;
        case CUDNN_POINTWISE_BINARY_SELECT: v = rd(j, s, i) != 0.0f ? a : c; break;
        default: v = a; /* IDENTITY */
        }
        if (!wr(j, y, i, v)) return 0;
    }
    return 1;
}

static int run_reduction(gjob *j, const desc *op)
{
    const desc *t[8];
    operands(op, t);
    int x = tix(j, t[0]), y = tix(j, t[1]);
    const int64_t *yd = t[1]->dim;
    float *acc = calloc((size_t)(yd[0] * yd[1] * yd[2] * yd[3]), sizeof *acc);
    if (!acc) return ddp_emu__fault("cuDNN graph: %s", "out of host memory"), 0;
    int64_t i[4], ok = 1;
    EACH(j, t[0]->dim, j->g->bounded[x], i)
    acc[((i[0] % yd[0] * yd[1] + i[1] % yd[1]) * yd[2] + i[2] % yd[2]) * yd[3] + i[3] % yd[3]] += rd(j, x, i);
    EACH(j, yd, j->g->bounded[y], i)
    ok = ok && wr(j, y, i, acc[((i[0] * yd[1] + i[1]) * yd[2] + i[2]) * yd[3] + i[3]]);
    free(acc);
    return (int)ok;
}

static int64_t bound(const gjob *j, const desc *over, int64_t b, int64_t full)
{
    if (!over) return full;
    int64_t n = j->len[b]; /* the graph's length tensor (the emulator's lengths are the plugin's single buffer) */
    return n < full ? n : full;
}

static int run_matmul(gjob *j, const desc *op)
{
    const desc *t[8];
    operands(op, t);
    int a = tix(j, t[0]), b = tix(j, t[1]), c = tix(j, t[5]);
    const int64_t M = t[5]->dim[2], N = t[5]->dim[3], K = t[0]->dim[3];
    float *A = malloc((size_t)(M * K + K * N) * sizeof *A), *Bm = A + M * K;
    if (!A) return ddp_emu__fault("cuDNN graph: %s", "out of host memory"), 0;
    int64_t i[4];
    for (i[0] = 0; i[0] < t[5]->dim[0]; i[0]++)
        for (i[1] = 0; i[1] < t[5]->dim[1]; i[1]++) {
            int64_t m = bound(j, t[2], i[0], M), n = bound(j, t[3], i[0], N), k = bound(j, t[4], i[0], K);
            for (i[2] = 0; i[2] < m; i[2]++)
                for (i[3] = 0; i[3] < k; i[3]++) A[i[2] * k + i[3]] = rd(j, a, i);
            for (i[2] = 0; i[2] < k; i[2]++)
                for (i[3] = 0; i[3] < n; i[3]++) Bm[i[2] * n + i[3]] = rd(j, b, i);
            for (int64_t r = 0; r < m; r++)
                for (int64_t q = 0; q < n; q++) {
                    float s = 0.0f;
                    for (int64_t x = 0; x < k; x++) s += A[r * k + x] * Bm[x * n + q];
                    const int64_t o[4] = {i[0], i[1], r, q};
                    if (!wr(j, c, o, s)) return free(A), 0;
                }
        }
    free(A);
    return 1;
}

static int run_reshape(gjob *j, const desc *op)
{
    const desc *t[8];
    operands(op, t);
    int x = tix(j, t[0]), y = tix(j, t[1]);
    int64_t i[4], xi[4];
    EACH(j, t[1]->dim, j->g->bounded[y], i)
    {
        for (int k = 0; k < 4; k++) xi[op->perm[k]] = i[k];
        if (!wr(j, y, i, rd(j, x, xi))) return 0;
    }
    return 1;
}

/* Whether every real tensor's elements (a ragged one's rows below its sample's length) lie in one device allocation,
 * with the lengths and ragged offsets (else the fault a GPU raises). */
static int spans_ok(const gjob *j)
{
    const prog *g = j->g;
    const int64_t B = g->len->dim[0];
    if (!ddp_emu_is_device_ptr(j->len, (size_t)B * sizeof(int32_t))) return 0;
    for (int x = 0; x < g->nt; x++) {
        const gten *t = &j->t[x];
        const desc *d = t->d;
        if (d->is_virtual || d->by_value) continue;
        if (t->rag && !ddp_emu_is_device_ptr(t->rag, (size_t)(d->dim[0] + 1) * sizeof(int32_t))) return 0;
        const int64_t es = d->dt == CUDNN_DATA_BFLOAT16 ? 2 : 4;
        for (int64_t b = 0; b < (t->rag ? d->dim[0] : 1); b++) {
            int64_t lo = t->rag ? t->rag[b] : 0, hi = lo, empty = 0;
            for (int k = t->rag ? 1 : 0; k < 4; k++) {
                int64_t n = t->rag && k == t->ra && j->len[b] < d->dim[k] ? j->len[b] : d->dim[k];
                empty |= n <= 0;
                hi += n > 0 ? (n - 1) * d->str[k] : 0;
            }
            if (!empty && (lo < 0 || !ddp_emu_is_device_ptr(t->p + lo * es, (size_t)(hi - lo + 1) * (size_t)es)))
                return 0;
        }
    }
    return 1;
}

static void run_graph(void *arg)
{
    gjob *j = arg;
    const prog *g = j->g;
    int ok = spans_ok(j);
    if (!ok) ddp_emu__fault("cuDNN graph: %s", "a tensor outside its allocation");
    for (int o = 0; o < g->nops && ok; o++) {
        const desc *op = g->op[o], *t[8];
        int out = tix(j, t[operands(op, t) - 1]);
        if (j->t[out].d->is_virtual) { /* a virtual output's buffer, zeroed: what an override leaves out stays 0 */
            const int64_t *dm = j->t[out].d->dim, *st = j->t[out].d->str;
            int64_t span = 1 + (dm[0] - 1) * st[0] + (dm[1] - 1) * st[1] + (dm[2] - 1) * st[2] + (dm[3] - 1) * st[3];
            if (!(j->t[out].v = calloc((size_t)span, sizeof(float))))
                ok = 0, ddp_emu__fault("cuDNN graph: %s", "out of host memory");
        }
        ok = ok && (op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR   ? run_pointwise(j, op)
                    : op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR    ? run_matmul(j, op)
                    : op->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ? run_reduction(j, op)
                                                                               : run_reshape(j, op));
        for (int x = 0; x < g->nt; x++)
            if (j->t[x].v && g->last[x] == o) free(j->t[x].v), j->t[x].v = NULL;
    }
    for (int x = 0; x < g->nt; x++) free(j->t[x].v), j->t[x].v = NULL;
}

/* The variant pack's pointer of every real tensor (device memory at its alignment, or a host value by value). */
cudnnStatus_t emu_cudnn_graph_execute(cudnnHandle_t h, const desc *plan, const desc *v)
{
    const prog *g = plan->graph->prog;
    const attr *ids = get(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *ptrs = get(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    gjob *j = calloc(1, sizeof *j);
    if (!j) return emu_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
    j->g = g;
    for (int x = 0; x < g->nt; x++) {
        const desc *d = j->t[x].d = g->t[x];
        if (d->is_virtual) continue;
        int64_t k = 0;
        while (ids && k < ids->n && ((const int64_t *)ids->v)[k] != d->uid) k++;
        char *p = ids && k < ids->n ? ((char **)ptrs->v)[k] : NULL;
        if (!p || (d->by_value && d->dt != CUDNN_DATA_FLOAT) ||
            (!d->by_value && (!ddp_emu_is_device_ptr(p, 1) || (uintptr_t)p % (uintptr_t)d->align))) {
            free(j);
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "variant pack: unique id %lld needs %s", (long long)d->uid,
                                  d->by_value ? "an fp32 value" : "aligned device memory");
        }
        j->t[x].p = p, j->t[x].ra = row_axis(d);
        if (d->by_value) memcpy(&j->t[x].val, p, sizeof(float)), j->t[x].p = (char *)&j->t[x].val;
    }
    for (int x = 0; x < g->nt; x++) { /* ragged offsets and the lengths, now that every pointer is known */
        const desc *d = g->t[x];
        if (d->ragged && !d->is_virtual) j->t[x].rag = (const int32_t *)j->t[tindex((prog *)g, d->ragged)].p;
        if (d == g->len) j->len = (const int32_t *)j->t[x].p; /* finalize made sure there is one */
    }
    if (ddp_emu_enqueue_host((void *)h->stream, run_graph, j, free) != 0)
        return emu_cudnn_fail(CUDNN_STATUS_EXECUTION_FAILED, "Execute: the stream refused the work");
    return CUDNN_STATUS_SUCCESS;
}
