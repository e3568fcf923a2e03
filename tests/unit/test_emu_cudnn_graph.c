/* test_emu_cudnn_graph.c — the emulated cuDNN's operation graphs of matmul, pointwise, reduction and reshape
 * operations (the plugin's attention backward), run by its interpreter against a double reference, and their
 * finalize rules; called by test_emu_cudnn.c's test case. */
#include "test_emu_cudnn.h"

#include <math.h>

/* an operation of type t over n (attribute, descriptor) pairs: its Finalize status */
static cudnnStatus_t cg_op(cudnnBackendDescriptorType_t type, int n, const cudnnBackendAttributeName_t *a,
                           const cudnnBackendDescriptor_t *d, cudnnBackendDescriptor_t *op)
{
    CK(cudnnBackendCreateDescriptor(type, op));
    for (int i = 0; i < n; i++) CK(cudnnBackendSetAttribute(*op, a[i], CD_DESC, 1, &d[i]));
    return cudnnBackendFinalize(*op);
}
static cudnnBackendDescriptor_t cg_pwdesc(cudnnPointwiseMode_t mode)
{
    cudnnBackendDescriptor_t f;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &f));
    CK(cudnnBackendSetAttribute(f, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    CK(cudnnBackendSetAttribute(f, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    CK(cudnnBackendFinalize(f));
    return f;
}

/* S = A.B over the rows below the length (2 of 3), Y = scale S, R = rowsum(Y), Z = S^T (a reshape, then IDENTITY),
 * run by the interpreter against a double reference; the finalize rules: mismatched matmul, a reshape that is no
 * transpose, a pointwise MUL without b, a virtual tensor read but never written */
void cd_graph(cd_ctx *c)
{
    enum { GA = 1, GB, GS, GY, GR, GZ, GL, GSC, GST, GX };
    const int64_t ad[4] = {1, 1, 3, 2}, as[4] = {6, 6, 2, 1}, bd[4] = {1, 1, 2, 3}, bs[4] = {6, 6, 3, 1};
    const int64_t sd[4] = {1, 1, 3, 3}, ss[4] = {9, 9, 3, 1}, tsd[4] = {9, 9, 1, 3}, rd[4] = {1, 1, 3, 1},
                  rs[4] = {3, 3, 1, 1}, one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t A = cg_tensor(GA, CUDNN_DATA_FLOAT, ad, as, NULL, 0, 0),
                             B = cg_tensor(GB, CUDNN_DATA_FLOAT, bd, bs, NULL, 0, 0);
    cudnnBackendDescriptor_t S = cg_tensor(GS, CUDNN_DATA_FLOAT, sd, ss, NULL, 1, 0),
                             Y = cg_tensor(GY, CUDNN_DATA_FLOAT, sd, ss, NULL, 0, 0);
    cudnnBackendDescriptor_t R = cg_tensor(GR, CUDNN_DATA_FLOAT, rd, rs, NULL, 0, 0),
                             Z = cg_tensor(GZ, CUDNN_DATA_FLOAT, sd, ss, NULL, 0, 0);
    cudnnBackendDescriptor_t L = cg_tensor(GL, CUDNN_DATA_INT32, one, one, NULL, 0, 0),
                             SC = cg_tensor(GSC, CUDNN_DATA_FLOAT, one, one, NULL, 0, 1);
    cudnnBackendDescriptor_t ST = cg_tensor(GST, CUDNN_DATA_FLOAT, sd, tsd, NULL, 1, 0),
                             X = cg_tensor(GX, CUDNN_DATA_FLOAT, sd, ss, NULL, 1, 0);
    cudnnBackendDescriptor_t mmd, red, mul = cg_pwdesc(CUDNN_POINTWISE_MUL), idn = cg_pwdesc(CUDNN_POINTWISE_IDENTITY);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnReduceTensorOp_t add = CUDNN_REDUCE_TENSOR_ADD;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mmd));
    CK(cudnnBackendSetAttribute(mmd, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CK(cudnnBackendFinalize(mmd));
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &red));
    CK(cudnnBackendSetAttribute(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &add));
    CK(cudnnBackendSetAttribute(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CK(cudnnBackendFinalize(red));
    const cudnnBackendAttributeName_t mma[] = {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                               CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC,
                                               CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC};
    const cudnnBackendAttributeName_t pwa[] = {
        CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
        CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC};
    const cudnnBackendAttributeName_t ra[] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                              CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                              CUDNN_ATTR_OPERATION_REDUCTION_DESC};
    const cudnnBackendAttributeName_t sa[] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
    cudnnBackendDescriptor_t ops[5], bad, g;
    CK(cg_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 5, mma, (cudnnBackendDescriptor_t[]){A, B, S, mmd, L},
             &ops[0]));
    CK(cg_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 4, pwa, (cudnnBackendDescriptor_t[]){mul, S, Y, SC},
             &ops[1]));
    CK(cg_op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 3, ra, (cudnnBackendDescriptor_t[]){Y, R, red}, &ops[2]));
    CK(cg_op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, sa, (cudnnBackendDescriptor_t[]){S, ST}, &ops[3]));
    CK(cg_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 3, pwa, (cudnnBackendDescriptor_t[]){idn, ST, Z}, &ops[4]));
    /* the refusals */
    assert_int_equal(
        cg_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 4, mma, (cudnnBackendDescriptor_t[]){A, A, S, mmd}, &bad),
        CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&bad, 1);
    assert_int_equal(
        cg_op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, sa, (cudnnBackendDescriptor_t[]){A, ST}, &bad),
        CUDNN_STATUS_NOT_SUPPORTED);
    cd_destroy(&bad, 1);
    assert_int_equal(
        cg_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 3, pwa, (cudnnBackendDescriptor_t[]){mul, S, Y}, &bad),
        CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&bad, 1);
    CK(cg_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 4, pwa, (cudnnBackendDescriptor_t[]){mul, X, Y, SC}, &bad));
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &bad)); /* X: never written */
    assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&g, 1), cd_destroy(&bad, 1);
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &mul)); /* a mode, no operation */
    assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&g, 1);
    { /* tensors of 2 samples, lengths of 1 */
        const int64_t a2[4] = {2, 1, 3, 2}, b2[4] = {2, 1, 2, 3}, s2[4] = {2, 1, 3, 3};
        cudnnBackendDescriptor_t A2 = cg_tensor(GX + 1, CUDNN_DATA_FLOAT, a2, as, NULL, 0, 0),
                                 B2 = cg_tensor(GX + 2, CUDNN_DATA_FLOAT, b2, bs, NULL, 0, 0),
                                 S2 = cg_tensor(GX + 3, CUDNN_DATA_FLOAT, s2, ss, NULL, 1, 0);
        CK(cg_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 5, mma, (cudnnBackendDescriptor_t[]){A2, B2, S2, mmd, L},
                 &bad));
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
        CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &bad));
        assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
        cudnnBackendDescriptor_t gone[] = {g, bad, A2, B2, S2};
        cd_destroy(gone, 5);
    }
    /* the graph, its operations given out of order, run by engine 1 */
    cudnnBackendDescriptor_t order[5] = {ops[4], ops[2], ops[3], ops[1], ops[0]}, heur, cfg[2], plan, pack;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    int64_t n = 0;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 5, order));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h));
    CK(cudnnBackendFinalize(g));
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CD_DESC, 1, &g));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CK(cudnnBackendFinalize(heur));
    for (int i = 0; i < 2; i++) CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CD_DESC, 2, &n, cfg));
    assert_int_equal(n, 2);
    CK(cd_plan_of(c, cfg[1], &plan));
    float ha[6], hb[6], poison = -7.0f, hy[9], hr[3], hz[9], scale = 0.5f;
    int32_t len = 2;
    uint64_t seed = 5;
    for (int i = 0; i < 6; i++) ha[i] = test_frand(&seed), hb[i] = test_frand(&seed);
    void *d[6];
    size_t bytes[6] = {sizeof ha, sizeof hb, sizeof hy, sizeof hr, sizeof hz, sizeof len};
    for (int i = 0; i < 6; i++) assert_int_equal(cudaMalloc(&d[i], bytes[i]), cudaSuccess);
    for (int i = 0; i < 9; i++) hy[i] = hz[i] = poison;
    for (int i = 0; i < 3; i++) hr[i] = poison;
    const void *src[6] = {ha, hb, hy, hr, hz, &len};
    for (int i = 0; i < 6; i++) cudaMemcpy(d[i], src[i], bytes[i], cudaMemcpyHostToDevice);
    int64_t uid[7] = {GA, GB, GY, GR, GZ, GL, GSC};
    void *ptr[7] = {d[0], d[1], d[2], d[3], d[4], d[5], &scale};
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 6, uid)); /* no scale */
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 6, ptr));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &c->ws));
    CK(cudnnBackendFinalize(pack));
    assert_int_equal(cudnnBackendExecute(c->h, plan, pack), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&pack, 1);
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 7, uid));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 7, ptr));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &c->ws));
    CK(cudnnBackendFinalize(pack));
    CK(cudnnBackendExecute(c->h, plan, pack));
    scale = 99.0f; /* a value by value is read at Execute, not when the stream runs the work */
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    scale = 0.5f;
    cudaMemcpy(hy, d[2], sizeof hy, cudaMemcpyDeviceToHost);
    cudaMemcpy(hr, d[3], sizeof hr, cudaMemcpyDeviceToHost);
    cudaMemcpy(hz, d[4], sizeof hz, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 3; i++) {
        double rsum = 0.0;
        for (int j = 0; j < 3; j++) {
            double s = ha[i * 2] * hb[j] + ha[i * 2 + 1] * hb[3 + j]; /* S[i][j] */
            rsum += scale * s;
            if (i < len && fabs(hy[i * 3 + j] - scale * s) > 1e-6)
                fail_msg("Y[%d][%d] %g, want %g", i, j, hy[i * 3 + j], scale * s);
            if (i >= len && hy[i * 3 + j] != poison) fail_msg("Y[%d][%d]: a row past the length written", i, j);
            /* Z = S^T: row j of Z is column j of S, below the length in its columns */
            if (i < len && fabs(hz[j * 3 + i] - s) > 1e-6) fail_msg("Z[%d][%d] %g, want %g", j, i, hz[j * 3 + i], s);
        }
        if (i < len && fabs(hr[i] - rsum) > 1e-5) fail_msg("R[%d] %g, want %g", i, hr[i], rsum);
        if (i >= len && hr[i] != poison) fail_msg("R[%d]: a row past the length written", i);
    }
    for (int i = 0; i < 6; i++) cudaFree(d[i]);
    cd_destroy(&pack, 1), cd_destroy(&plan, 1), cd_destroy(cfg, 2), cd_destroy(&heur, 1), cd_destroy(&g, 1);
    cd_destroy(ops, 5);
    cudnnBackendDescriptor_t all[] = {A, B, S, Y, R, Z, L, SC, ST, X, mmd, red, mul, idn};
    cd_destroy(all, (int)(sizeof all / sizeof all[0]));
}
