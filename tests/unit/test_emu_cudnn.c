/* test_emu_cudnn.c — the emulated cuDNN backend API's SDPA (emu_cudnn.c) as the plugin drives it, forward and
 * backward against double references, engines, refusals (test case of test_emu_runtime.c's main); the operation graphs
 * it also runs: test_emu_cudnn_graph.c. */
#include "test_emu_cudnn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The emulated cuDNN backend API (emu_cudnn.c) driven as the plugin drives it: two packed samples (3 and 5 rows, ragged
 * offsets) of H = 2 heads of width D = 8, q|k|v in one row of 3HD; forward and backward against double-precision
 * references within the bf16 roundings, rows past a sample's length untouched, the engines' order and notes, refusals.
 */
static const int32_t c_len[CB] = {3, 5}, c_row0[CB + 1] = {0, 3, 8};

/* A finalized tensor of unique id uid; rag: its ragged offsets (or NULL); virtual, or by value */
cudnnBackendDescriptor_t cg_tensor(int64_t uid, cudnnDataType_t dt, const int64_t *dim, const int64_t *str,
                                   cudnnBackendDescriptor_t rag, bool virt, bool by_value)
{
    cudnnBackendDescriptor_t t;
    int64_t align = dt == CUDNN_DATA_BFLOAT16 ? 16 : 4;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    if (virt) CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
    if (by_value) CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
    if (rag) CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CD_DESC, 1, &rag));
    CK(cudnnBackendFinalize(t));
    return t;
}
static cudnnBackendDescriptor_t cd_tensor(int id, cudnnDataType_t dt, const int64_t *dim, const int64_t *str,
                                          cudnnBackendDescriptor_t rag)
{
    return cg_tensor(100 + id, dt, dim, str, rag, 0, id == TSC);
}

/* The problem's tensors for head width D, Q of type qt: packed rows, ragged by sample. */
static void cd_tensors(cudnnBackendDescriptor_t *t, int64_t D, cudnnDataType_t qt)
{
    int64_t hd = CH * D;
    const int64_t one[4] = {1, 1, 1, 1}, rag[4] = {CB + 1, 1, 1, 1}, seq[4] = {CB, 1, 1, 1};
    const int64_t dim[4] = {CB, CH, CS, D}, sdim[4] = {CB, CH, CS, 1};
    const int64_t qs[4] = {CS * 3 * hd, D, 3 * hd, 1}, os[4] = {CS * hd, D, hd, 1}, ss[4] = {CS * CH, 1, CH, 1};
    for (int i = TRQKV; i <= TRST; i++) t[i] = cd_tensor(i, CUDNN_DATA_INT32, rag, one, NULL);
    for (int i = TQ; i <= TDV; i++) {
        int packed = i == TQ || i == TK || i == TV || i == TDQ || i == TDK || i == TDV;
        if (i == TST)
            t[i] = cd_tensor(i, CUDNN_DATA_FLOAT, sdim, ss, t[TRST]);
        else
            t[i] = cd_tensor(i, i == TQ ? qt : CUDNN_DATA_BFLOAT16, dim, packed ? qs : os, t[packed ? TRQKV : TRO]);
    }
    t[TSC] = cd_tensor(TSC, CUDNN_DATA_FLOAT, one, one, NULL);
    t[TSQ] = cd_tensor(TSQ, CUDNN_DATA_INT32, seq, one, NULL);
    t[TSKV] = cd_tensor(TSKV, CUDNN_DATA_INT32, seq, one, NULL);
}
void cd_destroy(cudnnBackendDescriptor_t *d, int n)
{
    for (int i = 0; i < n; i++) CK(cudnnBackendDestroyDescriptor(d[i]));
}

/* The SDPA operation over t without tensor `skip` (-1: none): its Finalize status. */
static cudnnStatus_t cd_op(int bwd, cudnnBackendDescriptor_t *t, int skip, cudnnBackendDescriptor_t *op)
{
    static const struct {
        int id;
        cudnnBackendAttributeName_t name;
    } fwd[] = {{TQ, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC},
               {TK, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC},
               {TV, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC},
               {TO, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC},
               {TST, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC},
               {TSC, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC},
               {TSQ, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC},
               {TSKV, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC}},
      bwdl[] = {
          {TQ, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC},          {TK, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC},
          {TV, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC},          {TO, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC},
          {TST, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC},     {TDO, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC},
          {TDQ, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC},        {TDK, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC},
          {TDV, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC},        {TSC, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC},
          {TSQ, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC}, {TSKV, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC}};
    CK(cudnnBackendCreateDescriptor(
        bwd ? CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR : CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, op));
    for (int i = 0; i < (bwd ? 12 : 8); i++) {
        int id = bwd ? bwdl[i].id : fwd[i].id;
        if (id != skip) CK(cudnnBackendSetAttribute(*op, bwd ? bwdl[i].name : fwd[i].name, CD_DESC, 1, &t[id]));
    }
    return cudnnBackendFinalize(*op);
}

cudnnStatus_t cd_plan_of(const cd_ctx *c, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t *plan)
{
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan));
    CK(cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h));
    CK(cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CD_DESC, 1, &cfg));
    return cudnnBackendFinalize(*plan);
}

/* op's graph and heuristics (mode A): the engine configurations into cfg (*n, at most 2), then the plan of cfg[pick]
 * (its Finalize status). The graph and the heuristics are destroyed at once: what uses them keeps them. */
static cudnnStatus_t cd_plan(const cd_ctx *c, cudnnBackendDescriptor_t op, int pick, cudnnBackendDescriptor_t *cfg,
                             int64_t *n, cudnnBackendDescriptor_t *plan)
{
    cudnnBackendDescriptor_t g, heur;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    int64_t total = -1, engines = -1;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &op));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h));
    CK(cudnnBackendFinalize(g));
    CK(cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, n, &engines));
    assert_int_equal(engines, 2);
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CD_DESC, 1, &g));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CK(cudnnBackendFinalize(heur));
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CD_DESC, 0, &total, NULL));
    assert_true(total >= 1 && total <= 2);
    for (int i = 0; i < total; i++) CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CD_DESC, total, n, cfg));
    assert_int_equal(*n, total);
    cd_destroy(&heur, 1), cd_destroy(&g, 1);
    return cd_plan_of(c, cfg[pick], plan);
}

/* A configuration's engine: its global index, whether its notes say nondeterministic (and tensor cores). */
static int64_t cd_engine(cudnnBackendDescriptor_t cfg, int *nondet)
{
    cudnnBackendDescriptor_t e;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0, index = -1;
    int tc = 0;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e));
    CK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CD_DESC, 1, &n, &e));
    assert_int_equal(n, 1);
    CK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
    CK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
    *nondet = 0;
    for (int64_t i = 0; i < n; i++)
        tc |= notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE,
            *nondet |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    assert_true(tc);
    cd_destroy(&e, 1);
    return index;
}

/* plan over the context's pointers, without tensor `skip` (-1: none), with workspace ws; the pack destroyed at once */
static cudnnStatus_t cd_exec(const cd_ctx *c, cudnnBackendDescriptor_t plan, int skip, void *ws)
{
    cudnnBackendDescriptor_t pack;
    int64_t uid[NT];
    void *ptr[NT];
    int n = 0;
    for (int i = 0; i < NT; i++)
        if (i != skip) uid[n] = 100 + i, ptr[n++] = c->ptr[i];
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CK(cudnnBackendFinalize(pack));
    cudnnStatus_t s = cudnnBackendExecute(c->h, plan, pack);
    cd_destroy(&pack, 1);
    return s;
}

static void cd_setup(cd_ctx *c)
{
    static const int32_t rag[3][CB + 1] = {{0, 3 * CQKV, 8 * CQKV}, {0, 3 * CHD, 8 * CHD}, {0, 3 * CH, 8 * CH}};
    size_t bytes[NT] = {
        [TQ] = sizeof c->qkv,  [TO] = sizeof c->dout, [TST] = CR * CH * sizeof(float), [TDO] = sizeof c->dout,
        [TDQ] = sizeof c->qkv, [TSQ] = sizeof c_len,  [TSKV] = sizeof c_len,           [TRQKV] = sizeof rag[0],
        [TRO] = sizeof rag[0], [TRST] = sizeof rag[0]};
    uint64_t seed = 77;
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NT; i++)
        if (bytes[i]) assert_int_equal(cudaMalloc(&c->ptr[i], bytes[i]), cudaSuccess);
    assert_int_equal(cudaMalloc(&c->ws, CB * CH * CS * sizeof(float)), cudaSuccess);
    c->ptr[TK] = (uint16_t *)c->ptr[TQ] + CHD, c->ptr[TV] = (uint16_t *)c->ptr[TQ] + 2 * CHD;
    c->ptr[TDK] = (uint16_t *)c->ptr[TDQ] + CHD, c->ptr[TDV] = (uint16_t *)c->ptr[TDQ] + 2 * CHD;
    c->scale = 1.0f / sqrtf((float)CD), c->ptr[TSC] = &c->scale;
    for (int i = 0; i < CR * CQKV; i++) c->qkv[i] = __float2bfloat16_rn(test_frand(&seed)).x;
    for (int i = 0; i < CR * CHD; i++) c->dout[i] = __float2bfloat16_rn(test_frand(&seed)).x;
    cudaMemcpy(c->ptr[TQ], c->qkv, sizeof c->qkv, cudaMemcpyHostToDevice);
    cudaMemcpy(c->ptr[TDO], c->dout, sizeof c->dout, cudaMemcpyHostToDevice);
    for (int i = 0; i < 3; i++) cudaMemcpy(c->ptr[TRQKV + i], rag[i], sizeof rag[i], cudaMemcpyHostToDevice);
    assert_int_equal(cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking), cudaSuccess);
    CK(cudnnCreate(&c->h));
    CK(cudnnSetStream(c->h, c->s));
    cd_tensors(c->t, CD, CUDNN_DATA_BFLOAT16);
}

static void cd_teardown(cd_ctx *c)
{
    cd_destroy(c->t, NT);
    CK(cudnnDestroy(c->h));
    for (int i = 0; i < NT; i++)
        if (i != TK && i != TV && i != TDK && i != TDV && i != TSC) cudaFree(c->ptr[i]);
    cudaFree(c->ws);
    cudaStreamDestroy(c->s);
}

/* the sequence lengths of queries and keys (the stream idle) */
static void cd_seq(const cd_ctx *c, const int32_t *nq, const int32_t *nkv)
{
    assert_int_equal(cudaMemcpy(c->ptr[TSQ], nq, sizeof c_len, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(c->ptr[TSKV], nkv, sizeof c_len, cudaMemcpyHostToDevice), cudaSuccess);
}
/* O and the stats back to 0xFF bytes, in stream order */
static void cd_poison(const cd_ctx *c, int id, size_t bytes)
{
    assert_int_equal(cudaMemsetAsync(c->ptr[id], 0xff, bytes, c->s), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
}

static double cd_in(const cd_ctx *c, int r, int part, int h, int d)
{
    __nv_bfloat16 x = {c->qkv[r * CQKV + part * CHD + h * CD + d]};
    return __bfloat162float(x);
}
static double cd_dout(const cd_ctx *c, int r, int h, int d)
{
    __nv_bfloat16 x = {c->dout[r * CHD + h * CD + d]};
    return __bfloat162float(x);
}

/* Query i of sample b, head h, over keys [0, nkv), in double: p[j], o[d], bound[d] = sum_j p_j |v_jd|; the lse. */
static double cd_ref_row(const cd_ctx *c, int b, int h, int i, int nkv, double *p, double *o, double *bound)
{
    int r0 = c_row0[b];
    double m = -INFINITY, l = 0.0;
    for (int j = 0; j < nkv; j++) {
        double s = 0.0;
        for (int d = 0; d < CD; d++) s += cd_in(c, r0 + i, 0, h, d) * cd_in(c, r0 + j, 1, h, d);
        p[j] = s * c->scale, m = fmax(m, p[j]);
    }
    for (int j = 0; j < nkv; j++) l += exp(p[j] - m);
    double lse = m + log(l);
    for (int d = 0; d < CD; d++) o[d] = bound[d] = 0.0;
    for (int j = 0; j < nkv; j++) {
        p[j] = exp(p[j] - lse);
        for (int d = 0; d < CD; d++)
            o[d] += p[j] * cd_in(c, r0 + j, 2, h, d), bound[d] += p[j] * fabs(cd_in(c, r0 + j, 2, h, d));
    }
    return lse;
}

static void cd_near(const char *what, int r, int h, int d, double got, double want, double bound)
{
    if (!(fabs(got - want) <= 0x1p-6 * bound + 1e-6))
        fail_msg("%s row %d head %d [%d] = %.7g, want %.7g (bound %.3g)", what, r, h, d, got, want, bound);
}

/* O and the stats of queries [0, nq) of each sample over nkv keys; the sample's later rows still 0xFF */
static void cd_check_fwd(const cd_ctx *c, const int32_t *nq, const int32_t *nkv)
{
    uint16_t o[CR * CHD];
    uint32_t st[CR * CH];
    double p[CS], ref[CD], bound[CD];
    cudaMemcpy(o, c->ptr[TO], sizeof o, cudaMemcpyDeviceToHost);
    cudaMemcpy(st, c->ptr[TST], sizeof st, cudaMemcpyDeviceToHost);
    for (int b = 0; b < CB; b++)
        for (int h = 0; h < CH; h++)
            for (int i = 0; i < c_len[b]; i++) {
                int r = c_row0[b] + i;
                if (i >= nq[b]) {
                    for (int d = 0; d < CD; d++)
                        if (o[r * CHD + h * CD + d] != 0xffff) fail_msg("O row %d past its length was written", r);
                    if (st[r * CH + h] != 0xffffffffu) fail_msg("stats row %d past its length was written", r);
                    continue;
                }
                double lse = cd_ref_row(c, b, h, i, nkv[b], p, ref, bound);
                for (int d = 0; d < CD; d++) {
                    __nv_bfloat16 x = {o[r * CHD + h * CD + d]};
                    cd_near("O", r, h, d, __bfloat162float(x), ref[d], 0.5 * bound[d]); /* 2^-7 of the bound */
                }
                float got;
                memcpy(&got, &st[r * CH + h], sizeof got);
                if (!(fabs(got - lse) <= 1e-5 * (1.0 + fabs(lse))))
                    fail_msg("stats row %d: %.9g, want %.9g", r, got, lse);
            }
}

static void cd_forward(cd_ctx *c)
{
    cudnnBackendDescriptor_t op, cfg[2], plan;
    int64_t n = 0, ws = -1;
    int nondet = -1;
    uint16_t o1[CR * CHD], o2[CR * CHD];
    const int32_t nq[CB] = {3, 2}, nkv[CB] = {3, 4};
    CK(cd_op(0, c->t, -1, &op));
    CK(cd_plan(c, op, 0, cfg, &n, &plan));
    assert_int_equal(n, 1);
    assert_int_equal(cd_engine(cfg[0], &nondet), 0);
    assert_false(nondet);
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
    assert_int_equal(ws, 0);
    cd_seq(c, c_len, c_len);
    cd_poison(c, TO, sizeof o1), cd_poison(c, TST, CR * CH * sizeof(float));
    /* queued: nothing is written while the stream waits */
    sem_init(&gate, 0, 0);
    assert_int_equal(shut_gate(c->s), cudaSuccess);
    CK(cd_exec(c, plan, -1, NULL));
    sleep_ms(20);
    cudaMemcpy(o1, c->ptr[TO], sizeof o1, cudaMemcpyDeviceToHost);
    if (o1[0] != 0xffff) fail_msg("the attention ran before its stream reached it");
    open_gate();
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cd_check_fwd(c, c_len, c_len);
    /* bitwise repeatable */
    cudaMemcpy(o1, c->ptr[TO], sizeof o1, cudaMemcpyDeviceToHost);
    CK(cd_exec(c, plan, -1, NULL));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cudaMemcpy(o2, c->ptr[TO], sizeof o2, cudaMemcpyDeviceToHost);
    if (memcmp(o1, o2, sizeof o1)) fail_msg("the forward is not bitwise repeatable");
    /* sample 1 shortened to 2 queries over 4 keys: its rows 2..4 stay as they were */
    cd_poison(c, TO, sizeof o1), cd_poison(c, TST, CR * CH * sizeof(float));
    cd_seq(c, nq, nkv);
    CK(cd_exec(c, plan, -1, NULL));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cd_check_fwd(c, nq, nkv);
    cd_seq(c, c_len, c_len); /* the full forward again: the backward's O and stats */
    CK(cd_exec(c, plan, -1, NULL));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cd_destroy(&plan, 1), cd_destroy(cfg, 1), cd_destroy(&op, 1);
}

/* dQ, dK, dV of sample b, head h against the double-precision backward (bounds: sums of magnitudes, O's rounding in
 * dO.O included) */
static void cd_check_bwd_bh(const cd_ctx *c, const uint16_t *g, int b, int h)
{
    int n = c_len[b], r0 = c_row0[b];
    double P[CS][CS], dS[CS][CS], A[CS], o[CD], vb[CD];
    for (int i = 0; i < n; i++) {
        cd_ref_row(c, b, h, i, n, P[i], o, vb);
        double dl = 0.0;
        A[i] = 0.0;
        for (int d = 0; d < CD; d++) {
            dl += cd_dout(c, r0 + i, h, d) * o[d];
            A[i] += fabs(cd_dout(c, r0 + i, h, d)) * vb[d]; /* bounds dO.O's error from O's rounding */
        }
        for (int j = 0; j < n; j++) {
            double dp = 0.0;
            for (int d = 0; d < CD; d++) dp += cd_dout(c, r0 + i, h, d) * cd_in(c, r0 + j, 2, h, d);
            dS[i][j] = P[i][j] * (dp - dl);
        }
    }
    for (int x = 0; x < n; x++)
        for (int d = 0; d < CD; d++) {
            double dq = 0, dqb = 0, dk = 0, dkb = 0, dv = 0, dvb = 0;
            for (int y = 0; y < n; y++) {
                double kv = cd_in(c, r0 + y, 1, h, d), qv = cd_in(c, r0 + y, 0, h, d), dov = cd_dout(c, r0 + y, h, d);
                dq += dS[x][y] * kv;
                dqb += (fabs(dS[x][y]) + P[x][y] * A[x]) * fabs(kv);
                dk += dS[y][x] * qv;
                dkb += (fabs(dS[y][x]) + P[y][x] * A[y]) * fabs(qv);
                dv += P[y][x] * dov;
                dvb += P[y][x] * fabs(dov);
            }
            const uint16_t *row = g + (r0 + x) * CQKV + h * CD + d;
            __nv_bfloat16 gq = {row[0]}, gk = {row[CHD]}, gv = {row[2 * CHD]};
            cd_near("dQ", r0 + x, h, d, __bfloat162float(gq), c->scale * dq, c->scale * dqb);
            cd_near("dK", r0 + x, h, d, __bfloat162float(gk), c->scale * dk, c->scale * dkb);
            cd_near("dV", r0 + x, h, d, __bfloat162float(gv), dv, dvb);
        }
}

static void cd_backward(cd_ctx *c)
{
    cudnnBackendDescriptor_t op, cfg[2], plan, plan0;
    int64_t n = 0, ws = -1;
    int nondet = -1;
    uint16_t g1[CR * CQKV], g0[CR * CQKV];
    CK(cd_op(1, c->t, -1, &op));
    { /* as cuDNN 9.19: the backward operation finalizes, a graph of it does not (unless MPIDDP_EMU_CUDNN_BWD=1) */
        cudnnBackendDescriptor_t g;
        unsetenv("MPIDDP_EMU_CUDNN_BWD");
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
        CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &op));
        CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h));
        assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
        cd_destroy(&g, 1);
        setenv("MPIDDP_EMU_CUDNN_BWD", "1", 1);
    }
    CK(cd_plan(c, op, 1, cfg, &n, &plan));
    assert_int_equal(n, 2); /* the nondeterministic engine 0 first, then the deterministic engine 1 */
    assert_int_equal(cd_engine(cfg[0], &nondet), 0);
    assert_true(nondet);
    assert_int_equal(cd_engine(cfg[1], &nondet), 1);
    assert_false(nondet);
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
    assert_int_equal(ws, CB * CH * CS * sizeof(float));
    assert_int_equal(cd_exec(c, plan, -1, NULL), CUDNN_STATUS_BAD_PARAM); /* without the workspace */
    cd_poison(c, TDQ, sizeof g1);
    CK(cd_exec(c, plan, -1, c->ws));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cudaMemcpy(g1, c->ptr[TDQ], sizeof g1, cudaMemcpyDeviceToHost);
    for (int b = 0; b < CB; b++)
        for (int h = 0; h < CH; h++) cd_check_bwd_bh(c, g1, b, h);
    /* engine 0 computes the same bits here */
    CK(cd_plan_of(c, cfg[0], &plan0));
    cd_poison(c, TDQ, sizeof g0);
    CK(cd_exec(c, plan0, -1, c->ws));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cudaMemcpy(g0, c->ptr[TDQ], sizeof g0, cudaMemcpyDeviceToHost);
    if (memcmp(g0, g1, sizeof g0)) fail_msg("the two backward engines differ");
    cd_destroy(&plan0, 1), cd_destroy(&plan, 1), cd_destroy(cfg, 2), cd_destroy(&op, 1);
}

/* refusals at operation finalize: fp32 Q, head width 12, O missing; the attribute rules */
static void cd_refuse_ops(cd_ctx *c)
{
    cudnnBackendDescriptor_t t[NT], op, raw;
    int64_t uid = 1;
    cd_tensors(t, CD, CUDNN_DATA_FLOAT);
    assert_int_equal(cd_op(0, t, -1, &op), CUDNN_STATUS_NOT_SUPPORTED);
    cd_destroy(&op, 1), cd_destroy(t, NT);
    cd_tensors(t, 12, CUDNN_DATA_BFLOAT16);
    assert_int_equal(cd_op(1, t, -1, &op), CUDNN_STATUS_NOT_SUPPORTED);
    cd_destroy(&op, 1), cd_destroy(t, NT);
    assert_int_equal(cd_op(0, c->t, TO, &op), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&op, 1);
    assert_int_equal(cudnnBackendSetAttribute(c->t[TQ], CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                     CUDNN_STATUS_NOT_INITIALIZED); /* finalized */
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &raw));
    assert_int_equal(cudnnBackendSetAttribute(raw, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_DOUBLE, 1, &uid),
                     CUDNN_STATUS_BAD_PARAM);
    CK(cudnnBackendSetAttribute(raw, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    assert_int_equal(cudnnBackendFinalize(raw), CUDNN_STATUS_BAD_PARAM); /* no type, dimensions, ... */
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, &op));
    assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CD_DESC, 1, &raw),
                     CUDNN_STATUS_BAD_PARAM); /* not finalized */
    cd_destroy(&op, 1), cd_destroy(&raw, 1);
}

/* a pack without a tensor's pointer; MPIDDP_EMU_CUDNN_REFUSE=1 and =bwd at plan finalize */
static void cd_refuse_plans(cd_ctx *c)
{
    cudnnBackendDescriptor_t fwd, bwd, cfg[2], plan;
    int64_t n = 0;
    CK(cd_op(0, c->t, -1, &fwd));
    CK(cd_op(1, c->t, -1, &bwd));
    CK(cd_plan(c, fwd, 0, cfg, &n, &plan));
    assert_int_equal(cd_exec(c, plan, TSKV, NULL), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cd_exec(c, plan, TRO, NULL), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&plan, 1), cd_destroy(cfg, (int)n);
    static const struct {
        const char *v;
        cudnnStatus_t fwd, bwd;
    } env[] = {{"1", CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_NOT_SUPPORTED},
               {"bwd", CUDNN_STATUS_SUCCESS, CUDNN_STATUS_NOT_SUPPORTED},
               {NULL, CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS}};
    for (int i = 0; i < 3; i++) {
        cudnnStatus_t s[2];
        char msg[2][256] = {"", ""};
        if (env[i].v) setenv("MPIDDP_EMU_CUDNN_REFUSE", env[i].v, 1);
        for (int k = 0; k < 2; k++) {
            s[k] = cd_plan(c, k ? bwd : fwd, 0, cfg, &n, &plan);
            cudnnGetLastErrorString(msg[k], sizeof msg[k]);
            cd_destroy(&plan, 1), cd_destroy(cfg, (int)n);
        }
        unsetenv("MPIDDP_EMU_CUDNN_REFUSE");
        for (int k = 0; k < 2; k++) {
            if (s[k] != (k ? env[i].bwd : env[i].fwd))
                fail_msg("MPIDDP_EMU_CUDNN_REFUSE=%s, %s plan: %s", env[i].v ? env[i].v : "(unset)", k ? "bwd" : "fwd",
                         cudnnGetErrorString(s[k]));
            if (s[k] != CUDNN_STATUS_SUCCESS && !strstr(msg[k], "MPIDDP_EMU_CUDNN_REFUSE"))
                fail_msg("the refusal said: %s", msg[k]);
        }
    }
    unsetenv("MPIDDP_EMU_CUDNN_REFUSE");
    cd_destroy(&fwd, 1), cd_destroy(&bwd, 1);
}


void test_cudnn_sdpa(void **state)
{
    (void)state;
    static cd_ctx c;
    assert_int_equal(cudnnGetVersion(), 91900);
    assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED");
    cd_setup(&c);
    cd_forward(&c);
    cd_backward(&c);
    cd_refuse_ops(&c);
    cd_refuse_plans(&c);
    cd_graph(&c);
    cd_teardown(&c);
    unsetenv("MPIDDP_EMU_CUDNN_BWD");
}
