/* test_cuda_attn16.c — the attention's bf16 storage bit for bit (test cases of test_cuda_attn.c): o and dq|dk|dv
 * written in bf16 (o16, dqkv16) are the fp32 calls' rounded, and q|k|v and dO read in bf16 (qkv16, do16) give the bits
 * of the same values given in fp32, on every path the batch reaches; and inputs off 16-byte alignment the bits of
 * aligned ones. */
#include "test_cuda_attn.h"

#include <string.h>

/* o stored in bf16 (attention_fwd's o16: the model's o with bf16 activations) for the batch pg at the backend's
 * precision, given the fp32 call's o (gy), lse (gl): each value of o rounded once to bf16 (nearest even), the same lse;
 * and the backward from that o, the bits of the backward given the same rounded values in fp32; its dq|dk|dv in bf16
 * (attention_bwd's dqkv16), each that backward's value rounded once. */
void o16_case(const char *what, void *qg, void *dog, const ddp_packing *pg, int64_t d, int H, const ddp_dropout *dr,
              const float *gy, const float *gl)
{
    const int64_t R = pg->R, n = R * d;
    uint16_t *want = malloc((size_t)(n + 1) * 2), *got = malloc((size_t)(n + 1) * 2);
    float *yr = malloc((size_t)(n + 1) * 4);
    for (int64_t i = 0; i < n; i++) want[i] = ddp_bf16_bits(gy[i]), yr[i] = ddp_bf16_widen(want[i]);
    void *y16 = dev(NULL, (size_t)n * 2), *yrg = dev(yr, (size_t)n * 4), *lg = dev(NULL, (size_t)R * H * 4);
    void *dq16 = dev(NULL, (size_t)n * 3 * 4), *dqr = dev(NULL, (size_t)n * 3 * 4), *Dg = dev(NULL, (size_t)R * H * 4);
    OK(gpu->enc->attention_fwd(gpu, qg, 0, y16, 1, lg, pg, d, H, dr));
    OK(gpu->download(gpu, got, y16, (size_t)n * 2));
    float *l16 = down(lg, R * H);
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s o16: o[%lld] is bf16 0x%04x, want 0x%04x (the fp32 call's %g rounded)", what, (long long)i,
                     got[i], want[i], (double)gy[i]);
    if (memcmp(l16, gl, (size_t)(R * H) * 4)) fail_msg("%s o16: lse differs from the fp32 call's", what);
    OK(gpu->enc->attention_bwd(gpu, qg, 0, y16, 1, dog, 0, lg, dq16, 0, Dg, pg, d, H, dr));
    OK(gpu->enc->attention_bwd(gpu, qg, 0, yrg, 0, dog, 0, lg, dqr, 0, Dg, pg, d, H, dr));
    float *a = down(dq16, n * 3), *b = down(dqr, n * 3);
    for (int64_t i = 0; i < n * 3; i++)
        if (memcmp(&a[i], &b[i], 4))
            fail_msg("%s o16: dqkv[%lld] %g, from o given in fp32 %g", what, (long long)i, (double)a[i], (double)b[i]);
    uint16_t *g = malloc((size_t)(n * 3 + 1) * 2);
    void *g16 = dev(NULL, (size_t)n * 3 * 2);
    OK(gpu->enc->attention_bwd(gpu, qg, 0, y16, 1, dog, 0, lg, g16, 1, Dg, pg, d, H, dr));
    OK(gpu->download(gpu, g, g16, (size_t)n * 3 * 2));
    for (int64_t i = 0; i < n * 3; i++)
        if (g[i] != ddp_bf16_bits(b[i]))
            fail_msg("%s dqkv16: dqkv[%lld] is bf16 0x%04x, want 0x%04x (the fp32 call's %g rounded)", what,
                     (long long)i, g[i], ddp_bf16_bits(b[i]), (double)b[i]);
    free(g);
    void *dv[] = {y16, yrg, lg, dq16, dqr, Dg, g16};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    free(want), free(got), free(yr), free(l16), free(a), free(b);
}

/* q|k|v stored in bf16 (attention_fwd/_bwd's qkv16: the model's q|k|v at bf16 on the GPU) for the batch pg at the
 * backend's precision: o, lse and dq|dk|dv are the bits of the calls given the same values widened to fp32, on every
 * path (cuDNN and the tensor-core kernels read the bf16 values, the SIMT and reference kernels a widened copy). */
void qkv16_case(const char *what, const float *qkv, void *dog, const ddp_packing *pg, int64_t d, int H,
                const ddp_dropout *dr)
{
    const int64_t R = pg->R, n = R * 3 * d;
    uint16_t *q16 = malloc((size_t)(n + 1) * 2);
    float *qr = malloc((size_t)(n + 1) * 4);
    for (int64_t i = 0; i < n; i++) q16[i] = ddp_bf16_bits(qkv[i]), qr[i] = ddp_bf16_widen(q16[i]);
    void *q16g = dev(q16, (size_t)n * 2), *qrg = dev(qr, (size_t)n * 4), *y[2], *l[2], *g[2];
    void *Dg = dev(NULL, (size_t)R * H * 4);
    for (int k = 0; k < 2; k++) { /* k = 0: bf16 q|k|v, 1: the same values in fp32 */
        y[k] = dev(NULL, (size_t)R * d * 4), l[k] = dev(NULL, (size_t)R * H * 4), g[k] = dev(NULL, (size_t)n * 4);
        OK(gpu->enc->attention_fwd(gpu, k ? qrg : q16g, !k, y[k], 0, l[k], pg, d, H, dr));
        OK(gpu->enc->attention_bwd(gpu, k ? qrg : q16g, !k, y[k], 0, dog, 0, l[k], g[k], 0, Dg, pg, d, H, dr));
    }
    const char *names[3] = {"o", "lse", "dqkv"};
    void *const *bufs[3] = {y, l, g};
    const int64_t sz[3] = {R * d, R * H, n};
    for (int t = 0; t < 3; t++) {
        float *a = down(bufs[t][0], sz[t]), *b = down(bufs[t][1], sz[t]);
        for (int64_t i = 0; i < sz[t]; i++)
            if (memcmp(&a[i], &b[i], 4))
                fail_msg("%s qkv16: %s[%lld] %g from bf16 q|k|v, %g from the same values in fp32", what, names[t],
                         (long long)i, (double)a[i], (double)b[i]);
        free(a), free(b);
    }
    for (int k = 0; k < 2; k++) gpu->release(gpu, y[k]), gpu->release(gpu, l[k]), gpu->release(gpu, g[k]);
    gpu->release(gpu, q16g), gpu->release(gpu, qrg), gpu->release(gpu, Dg);
    free(q16), free(qr);
}

/* dO stored in bf16 (attention_bwd's do16: the model's dO at bf16 on the GPU, from the out projection's linear_bwd) for
 * the batch pg at the backend's precision: delta and dq|dk|dv are the bits of the call given the same values widened
 * to fp32, with o in fp32 and in bf16 (o16), dq|dk|dv in fp32 and in bf16 (dqkv16), on every path (cuDNN and the bf16
 * tensor-core kernels read the bf16 values, the others a widened copy). */
void do16_case(const char *what, void *qg, const float *dout, const ddp_packing *pg, int64_t d, int H,
               const ddp_dropout *dr)
{
    const int64_t R = pg->R, n = R * d;
    uint16_t *g16 = malloc((size_t)(n + 1) * 2);
    float *gr = malloc((size_t)(n + 1) * 4);
    for (int64_t i = 0; i < n; i++) g16[i] = ddp_bf16_bits(dout[i]), gr[i] = ddp_bf16_widen(g16[i]);
    void *g16g = dev(g16, (size_t)n * 2), *grg = dev(gr, (size_t)n * 4), *y = dev(NULL, (size_t)n * 4);
    void *lg = dev(NULL, (size_t)R * H * 4), *dq[2], *D[2];
    for (int k = 0; k < 2; k++) dq[k] = dev(NULL, (size_t)n * 3 * 4), D[k] = dev(NULL, (size_t)R * H * 4);
    for (int o16 = 0; o16 < 2; o16++) { /* o16 = 1 also writes dq|dk|dv in bf16 */
        OK(gpu->enc->attention_fwd(gpu, qg, 0, y, o16, lg, pg, d, H, dr));
        for (int k = 0; k < 2; k++) /* k = 0: bf16 dO, 1: the same values in fp32 */
            OK(gpu->enc->attention_bwd(gpu, qg, 0, y, o16, k ? grg : g16g, !k, lg, dq[k], o16, D[k], pg, d, H, dr));
        const size_t es[2] = {o16 ? 2 : 4, 4}; /* bytes a value: dq|dk|dv, delta */
        const int64_t sz[2] = {n * 3, R * H};
        void *const *bufs[2] = {dq, D};
        for (int t = 0; t < 2; t++) {
            unsigned char *a = malloc((size_t)sz[t] * es[t] + 1), *b = malloc((size_t)sz[t] * es[t] + 1);
            OK(gpu->download(gpu, a, bufs[t][0], (size_t)sz[t] * es[t]));
            OK(gpu->download(gpu, b, bufs[t][1], (size_t)sz[t] * es[t]));
            for (int64_t i = 0; i < sz[t]; i++)
                if (memcmp(a + i * es[t], b + i * es[t], es[t]))
                    fail_msg("%s do16 (o16 %d): %s[%lld]: bf16 dO and the same values in fp32 give different bits",
                             what, o16, t ? "delta" : "dqkv", (long long)i);
            free(a), free(b);
        }
    }
    void *dv[] = {g16g, grg, y, lg, dq[0], dq[1], D[0], D[1]};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    free(g16), free(gr);
}

/* q|k|v and dO in fp32 each 4 bytes past a 16-byte boundary (the own kernels then stage them element by element:
 * backend_cuda_attn_tc.cu's tc_form) for the batch pg at the backend's precision: o, lse and dq|dk|dv are the bits of
 * the aligned calls' (gy, gl, gq, from the same values). */
void unaligned_case(const char *what, const float *qkv, const float *dout, const ddp_packing *pg, int64_t d, int H,
                    const ddp_dropout *dr, const float *gy, const float *gl, const float *gq)
{
    const int64_t R = pg->R;
    char *qm = dev(NULL, (size_t)(R * 3 * d + 4) * 4), *dm = dev(NULL, (size_t)(R * d + 4) * 4);
    if (R > 0) {
        OK(gpu->upload(gpu, qm + 4, qkv, (size_t)(R * 3 * d) * 4));
        OK(gpu->upload(gpu, dm + 4, dout, (size_t)(R * d) * 4));
    }
    void *y = dev(NULL, (size_t)R * d * 4), *lg = dev(NULL, (size_t)R * H * 4), *g = dev(NULL, (size_t)R * 3 * d * 4);
    void *Dg = dev(NULL, (size_t)R * H * 4);
    OK(gpu->enc->attention_fwd(gpu, qm + 4, 0, y, 0, lg, pg, d, H, dr));
    OK(gpu->enc->attention_bwd(gpu, qm + 4, 0, y, 0, dm + 4, 0, lg, g, 0, Dg, pg, d, H, dr));
    float *a = down(y, R * d), *b = down(g, R * 3 * d), *l = down(lg, R * H);
    if (memcmp(l, gl, (size_t)(R * H) * 4)) fail_msg("%s unaligned: lse differs from the aligned call's", what);
    for (int64_t i = 0; i < R * d; i++)
        if (memcmp(&a[i], &gy[i], 4))
            fail_msg("%s unaligned: o[%lld] %g, aligned %g", what, (long long)i, (double)a[i], (double)gy[i]);
    for (int64_t i = 0; i < R * 3 * d; i++)
        if (memcmp(&b[i], &gq[i], 4))
            fail_msg("%s unaligned: dqkv[%lld] %g, aligned %g", what, (long long)i, (double)b[i], (double)gq[i]);
    void *dv[] = {qm, dm, y, lg, g, Dg};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    free(a), free(b), free(l);
}
