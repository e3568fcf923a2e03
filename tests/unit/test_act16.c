/* test_act16.c — the Transformer encoder's bf16 activations and fused residual + layernorm (model_transformer.c,
 * transformer_pass.c): whole train and eval steps on the CPU backend and, where a device or the emulator is, CUDA. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/model/models.h"
#include "test_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)
enum { NB = 3, B = 10, D = 11, C = 3, HID = 16, HEADS = 2, FF = 24, LAYERS = 2 };

/* NB batches of B samples of 1..12 rows each, every one in its own buffers */
static test_batch bat[NB];
static int64_t max_rows;

static int make_batches(void **state)
{
    (void)state;
    uint64_t s = 777;
    for (int k = 0; k < NB; k++) {
        test_batch_make(&bat[k], &s, B, 12, C, D, 4.0, 50 * k, 3);
        max_rows = bat[k].b.nrows > max_rows ? bat[k].b.nrows : max_rows;
    }
    return 0;
}
static int free_batches(void **state)
{
    (void)state;
    for (int k = 0; k < NB; k++) test_batch_free(&bat[k]);
    return 0;
}

/* Counting wrappers around the backend's own entries (one backend under test at a time). */
static ddp_status (*real_alloc)(ddp_backend *, void **, size_t);
static ddp_status (*real_gemm16)(ddp_backend *, int, int, int64_t, int64_t, int64_t, float, const void *, int, int64_t,
                                 const void *, int, int64_t, float, float *, int64_t);
static ddp_status (*real_fused)(ddp_backend *, float *, const float *, const float *, const float *,
                                const ddp_packing *, int64_t, const ddp_dropout *, const float *, const float *, void *,
                                int, float *, float *);
static size_t alloc_bytes;
static long gemm16_calls, fused_calls;
static ddp_enc_ops ops_counting, ops_unfused, ops_no_dh16, ops_z16;
static double run_dropout = 0.1;          /* the models' dropout */
static const ddp_enc_ops *run_ops = NULL; /* non-NULL: run()'s op table instead of the one `fused` chooses */

static ddp_status count_alloc(ddp_backend *b, void **p, size_t bytes)
{
    alloc_bytes += bytes;
    return real_alloc(b, p, bytes);
}
static ddp_status count_gemm16(ddp_backend *b, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const void *A, int a16, int64_t lda, const void *Bm, int b16, int64_t ldb, float beta,
                               float *Cm, int64_t ldc)
{
    gemm16_calls++;
    return real_gemm16(b, ta, tb, M, N, K, alpha, A, a16, lda, Bm, b16, ldb, beta, Cm, ldc);
}
/* a GEMM with an epilogue (gemm_epi, the CUDA backend's) reading a bf16 operand counts as a gemm16 call */
static ddp_status (*real_gemm_epi)(ddp_backend *, int, float *, int, int, int64_t, int64_t, int64_t, float,
                                   const void *, int, int64_t, const void *, int, int64_t, float, void *, int64_t);
static long c16_calls; /* gemm_epi calls writing a bf16 C */
static ddp_status count_gemm_epi(ddp_backend *b, int epi, float *bias, int ta, int tb, int64_t M, int64_t N, int64_t K,
                                 float alpha, const void *A, int a16, int64_t lda, const void *Bm, int b16, int64_t ldb,
                                 float beta, void *Cm, int64_t ldc)
{
    gemm16_calls += a16 || b16;
    c16_calls += (epi & DDP_EPI_C16) != 0;
    return real_gemm_epi(b, epi, bias, ta, tb, M, N, K, alpha, A, a16, lda, Bm, b16, ldb, beta, Cm, ldc);
}
/* a linear layer's backward (linear_bwd) reads a bf16 operand in the weight-gradient GEMM (x16 or dy16) and in the
 * data-gradient GEMM (dy16): one gemm16 call each, as its composition makes them */
static ddp_status (*real_linear_bwd)(ddp_backend *, const void *, int, const void *, int, const float *, float *,
                                     float *, void *, int, int64_t, int64_t, int64_t);
static long dx16_calls; /* linear_bwd calls writing a bf16 dx */
static ddp_status count_linear_bwd(ddp_backend *b, const void *dy, int dy16, const void *x, int x16, const float *W,
                                   float *dW, float *dbias, void *dx, int dx16, int64_t R, int64_t N, int64_t K)
{
    gemm16_calls += (x16 || dy16) + dy16;
    dx16_calls += dx16 != 0;
    return real_linear_bwd(b, dy, dy16, x, x16, W, dW, dbias, dx, dx16, R, N, K);
}
static ddp_status count_fused(ddp_backend *b, float *out, const float *h, const float *t, const float *tb,
                              const ddp_packing *pk, int64_t d, const ddp_dropout *dr, const float *w, const float *lb,
                              void *y, int y16, float *mu, float *rs)
{
    fused_calls++;
    return real_fused(b, out, h, t, tb, pk, d, dr, w, lb, y, y16, mu, rs);
}

typedef struct {
    float loss[NB + 1][B], prob[NB + 1][B];
    int64_t pred[NB + 1][B];
    float *grad;
    int64_t n;
    size_t bytes; /* allocated by the model's creation */
    int act16, dqkv16, qkv16, dh16, z16, do16, t16;
    long gemm16_per_step, fused_per_step, c16_per_step, dx16_per_step;
} result;

/* NB train steps (accumulating) and an eval step of a fresh model at precision prec; act16_env: the value of
 * MPIDDP_BF16_ACTIVATIONS; fused: the op table with (counted) or without the fused residual + layernorm. */
static void run(ddp_backend *be, ddp_precision prec, int act16_env, int fused, result *r)
{
    memset(r, 0, sizeof *r);
    const ddp_enc_ops *own = be->enc;
    be->enc = run_ops ? run_ops : fused ? &ops_counting : &ops_unfused;
    setenv("MPIDDP_BF16_ACTIVATIONS", act16_env ? "1" : "0", 1);
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER, c.dim = D, c.classes = C, c.hidden = HID, c.heads = HEADS, c.ff = FF,
    c.layers = LAYERS;
    c.max_positions = 16, c.dropout = run_dropout, c.max_batch_rows = max_rows, c.max_batch_samples = B,
    c.precision = prec;
    ddp_model m;
    alloc_bytes = 0;
    be->alloc = count_alloc;
    ddp_status st = ddp_model_create_on(be, &c, &m);
    be->alloc = real_alloc;
    r->bytes = alloc_bytes;
    unsetenv("MPIDDP_BF16_ACTIVATIONS");
    OK(st);
    OK(be->set_precision(be, prec));
    r->act16 = ddp_transformer_act16(&m), r->dqkv16 = ddp_transformer_dqkv16(&m), r->qkv16 = ddp_transformer_qkv16(&m);
    r->dh16 = ddp_transformer_dh16(&m), r->z16 = ddp_transformer_z16(&m), r->do16 = ddp_transformer_do16(&m);
    r->t16 = ddp_transformer_t16(&m);
    r->n = ddp_model_num_params(&m);
    void *p, *g;
    OK(be->alloc(be, &p, (size_t)r->n * 4));
    OK(be->alloc(be, &g, (size_t)r->n * 4));
    OK(m.init(m.self, p, 9));
    for (int k = 0; k <= NB; k++) {
        ddp_forward_out o = {.loss = r->loss[k], .prob = r->prob[k], .pred = r->pred[k]};
        long g0 = gemm16_calls, f0 = fused_calls, c0 = c16_calls, x0 = dx16_calls;
        if (k < NB)
            OK(m.train_step(m.self, &bat[k].b, p, g, &o, NULL, NULL));
        else
            OK(m.eval_step(m.self, &bat[0].b, p, &o));
        if (k == 0)
            r->gemm16_per_step = gemm16_calls - g0, r->fused_per_step = fused_calls - f0,
            r->c16_per_step = c16_calls - c0, r->dx16_per_step = dx16_calls - x0;
    }
    r->grad = malloc((size_t)r->n * 4);
    OK(be->download(be, r->grad, g, (size_t)r->n * 4));
    be->release(be, p);
    be->release(be, g);
    m.destroy(m.self);
    OK(be->set_precision(be, DDP_PRECISION_FP32));
    be->enc = own;
}

static int same(const result *a, const result *b)
{
    return a->grad && b->grad && a->n == b->n && !memcmp(a->loss, b->loss, sizeof a->loss) &&
           !memcmp(a->prob, b->prob, sizeof a->prob) && !memcmp(a->pred, b->pred, sizeof a->pred) &&
           !memcmp(a->grad, b->grad, (size_t)a->n * 4);
}

/* Within 2^-7 relative of each other (losses, probabilities, the gradient's L2 norm of the difference against its own):
 * a real GPU's cuBLASLt may choose another algorithm for the bf16-output GEMM of q|k|v than for its fp32 one, so
 * those products may differ in their last bits before the rounding (the emulator's do not) */
static int close_to(const result *a, const result *b)
{
    double dg = 0, g = 0;
    for (int k = 0; k <= NB; k++)
        for (int i = 0; i < B; i++)
            if (!(fabs(a->loss[k][i] - b->loss[k][i]) <= 0x1p-7 * fabs(b->loss[k][i]) &&
                  fabs(a->prob[k][i] - b->prob[k][i]) <= 0x1p-7))
                return 0;
    for (int64_t i = 0; i < a->n; i++) dg += pow(a->grad[i] - b->grad[i], 2), g += pow(b->grad[i], 2);
    return a->n == b->n && dg <= 0x1p-14 * g;
}

/* A bf16 model whose backend computes at fp32: the step fails with a line, nothing crashes. */
static void wrong_precision(ddp_backend *be)
{
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER, c.dim = D, c.classes = C, c.hidden = HID, c.heads = HEADS, c.ff = FF, c.layers = 1;
    c.max_positions = 16, c.max_batch_rows = max_rows, c.max_batch_samples = B, c.precision = DDP_PRECISION_BF16;
    ddp_model m;
    OK(ddp_model_create_on(be, &c, &m));
    OK(be->set_precision(be, DDP_PRECISION_FP32));
    int64_t n = ddp_model_num_params(&m);
    void *p, *g;
    OK(be->alloc(be, &p, (size_t)n * 4));
    OK(be->alloc(be, &g, (size_t)n * 4));
    OK(m.init(m.self, p, 9));
    float loss[B], prob[B];
    int64_t pred[B];
    ddp_forward_out o = {.loss = loss, .prob = prob, .pred = pred};
    ddp_status st = m.train_step(m.self, &bat[0].b, p, g, &o, NULL, NULL);
    const char *why = ddp_last_error();
    if (!(st == DDP_ERR_ARG && strstr(why, "bf16")))
        fail_msg("%s: a bf16 model at fp32 gave status %d: %s", be->name, (int)st, why);
    if (strchr(why, '\n')) fail_msg("%s: the error is more than one line: %s", be->name, why);
    be->release(be, p);
    be->release(be, g);
    m.destroy(m.self);
}

/* linear1's output in bf16 (z16): where the backend has gemm_epi, linear_bwd and the two ops, its bias epilogue writes
 * z in bf16, the GELU reads it, linear2's backward writes the GELU output's gradient in bf16 and the GELU backward
 * reads both, recomputing gelu' from z (gelu_erf_fwd16z, gelu_erf_bwd16z); with it the out projection's backward
 * writes the attention output's gradient dO in bf16, which the attention backward reads (do16), and the out
 * projection's and linear2's bias epilogues write their outputs in bf16, which the residual adds read
 * (residual_layernorm_fwd16t: t16). This rounds values nothing rounded before, so against the same steps without it
 * (base, dropout 0.1) the results differ, and within close_to: z, those outputs and gradients move by at most
 * u = 2^-8 of themselves, a = gelu(z) by at most about 1.13 u |z| before its own rounding, the size of the bf16
 * roundings the step already makes (docs/transformer.md, "bf16 activation storage"). The checks that make it mean
 * something: the flags, the memory (gelu' [R, f] fp32 per layer becomes z [R, f] bf16, and the gradient's [R, f]
 * buffer bf16 too: exactly (L + 1) x ((R f) - (R f + 1) / 2) x 4 bytes less, as the model allocates in floats; dO and
 * the branch keep their buffers), three more bf16-output GEMMs and two bf16 dx per layer (linear2's and the out
 * projection's), the same number of gemm16 calls, and not the same bits. */
static void z16_steps(ddp_backend *be, const result *base)
{
    const char *nm = be->name;
    const int want = be->gemm_epi && be->linear_bwd && be->enc->gelu_erf_fwd16z && be->enc->gelu_erf_bwd16z;
    result z;
    run_ops = &ops_z16;
    run(be, DDP_PRECISION_BF16, 1, 1, &z);
    run_ops = NULL;
    const int want_t = want && be->enc->residual_layernorm_fwd16t;
    if (z.z16 != want || base->z16 != 0 || z.do16 != want || base->do16 != 0 || z.t16 != want_t || base->t16 != 0)
        fail_msg("%s: linear1's output in bf16 %d, dO %d, the branches %d (%d, %d, %d without their ops), want %d, %d, "
                 "%d and 0",
                 nm, z.z16, z.do16, z.t16, base->z16, base->do16, base->t16, want, want, want_t);
    if (!want) {
        if (!same(&z, base)) fail_msg("%s: without linear1's bf16 output the steps changed", nm);
        free(z.grad);
        return;
    }
    const size_t Rf = (size_t)max_rows * FF, saved = (size_t)(LAYERS + 1) * (Rf - (Rf + 1) / 2) * 4;
    if (base->bytes - z.bytes != saved)
        fail_msg("%s: linear1's bf16 output saves %zu bytes, want %zu", nm, base->bytes - z.bytes, saved);
    if (z.c16_per_step != base->c16_per_step + (want_t ? 3 : 1) * LAYERS ||
        z.gemm16_per_step != base->gemm16_per_step || z.dx16_per_step != 2 * LAYERS || base->dx16_per_step != 0)
        fail_msg("%s: %ld bf16-output GEMMs, %ld gemm16 calls and %ld bf16 dx per step (%ld without), want %ld, %ld, "
                 "%d and 0",
                 nm, z.c16_per_step, z.gemm16_per_step, z.dx16_per_step, base->dx16_per_step,
                 base->c16_per_step + (want_t ? 3 : 1) * LAYERS, base->gemm16_per_step, 2 * LAYERS);
    if (same(&z, base)) fail_msg("%s: linear1's bf16 output gave the bits of the fp32 one: it was not rounded", nm);
    if (!close_to(&z, base)) fail_msg("%s: linear1's bf16 output moved the steps by more than 2^-7", nm);
    double dg = 0, g = 0;
    for (int64_t i = 0; i < z.n; i++) dg += pow(z.grad[i] - base->grad[i], 2), g += pow(base->grad[i], 2);
    printf("%s: linear1's output, dO and the branches in bf16: %zu bytes less, the gradient moved by %.3g (relative "
           "L2)\n",
           nm, saved, sqrt(dg / g));
    free(z.grad);
}

/* At --precision bf16 a model created for bf16 keeps the activations only GEMMs read (norm1 and norm2 outputs,
 * the GELU output) in bf16. Those are exactly what the bf16 GEMMs would round them to, so three train steps (with
 * dropout, gradients accumulated) and an eval step give the same bits as the same model keeping them in fp32
 * (MPIDDP_BF16_ACTIVATIONS=0), with and without the fused residual_layernorm_fwd (removed from a copy of the
 * backend's op table); at fp32 the fused and unfused passes agree bit for bit too. The checks that make these
 * comparisons mean something: the bf16 model really stores bf16 (its activation allocations are smaller by
 * exactly L x rows x (2d + f) x 2 bytes, computed here from the configuration), the GEMMs really read them
 * (gemm16 calls counted per step, with gemm_epi and linear_bwd calls reading a bf16 operand), the fused op really runs
 * (counted), and bf16 differs from fp32. The attention output is bf16 at bf16 with either storage (L x rows x d x 2
 * bytes fewer than fp32, and its two GEMMs read it as bf16). A bf16 model on a backend left at fp32 fails its step with
 * one line instead of computing garbage. */
static void test_backend(ddp_backend *be)
{
    real_alloc = be->alloc;
    real_gemm16 = be->gemm16;
    real_fused = be->enc->residual_layernorm_fwd;
    if (!(be->gemm16 && be->enc->layernorm_fwd16 && be->enc->gelu_erf_fwd16 && be->enc->residual_layernorm_fwd &&
          be->enc->gelu_erf_bwd16))
        fail_msg("%s: the backend lacks gemm16 or the bf16 / fused encoder ops", be->name);
    if (real_gemm16) be->gemm16 = count_gemm16;
    real_gemm_epi = be->gemm_epi;
    if (real_gemm_epi) be->gemm_epi = count_gemm_epi;
    real_linear_bwd = be->linear_bwd;
    if (real_linear_bwd) be->linear_bwd = count_linear_bwd;
    ops_counting = *be->enc;
    ops_counting.residual_layernorm_fwd = count_fused;
    ops_z16 = ops_counting; /* with linear1's output in bf16 where the backend has its ops (below) */
    ops_counting.gelu_erf_fwd16z = NULL, ops_counting.gelu_erf_bwd16z = NULL; /* the storage-only changes first */
    ops_counting.residual_layernorm_fwd16t = NULL;
    ops_unfused = ops_counting;
    ops_unfused.residual_layernorm_fwd = NULL;

    result r16f, r16u, r32sf, r32su, f32f, f32u;
    run(be, DDP_PRECISION_BF16, 1, 1, &r16f);  /* bf16 activations, fused */
    run(be, DDP_PRECISION_BF16, 1, 0, &r16u);  /* bf16 activations, unfused */
    run(be, DDP_PRECISION_BF16, 0, 1, &r32sf); /* bf16 GEMMs, fp32 activations, fused */
    run(be, DDP_PRECISION_BF16, 0, 0, &r32su); /* bf16 GEMMs, fp32 activations, unfused */
    run(be, DDP_PRECISION_FP32, 1, 1, &f32f);  /* fp32 (the variable changes nothing there) */
    run(be, DDP_PRECISION_FP32, 1, 0, &f32u);
    const char *nm = be->name;
    if (!(r16f.act16 == 1 && r16u.act16 == 1)) fail_msg("%s: a bf16 model does not store bf16 activations", nm);
    if (!(r32sf.act16 == 0 && f32f.act16 == 0))
        fail_msg("%s: MPIDDP_BF16_ACTIVATIONS=0 or fp32 stored bf16 activations", nm);
    /* the q|k|v gradient in bf16 where the backend fuses linear_bwd (its bias gradient sums the bf16 values), with
     * bf16 activations only */
    if (!(r16f.dqkv16 == (be->linear_bwd != NULL) && r32sf.dqkv16 == 0 && f32f.dqkv16 == 0))
        fail_msg("%s: q|k|v gradient in bf16 %d, %d with fp32 activations, %d at fp32; want %d, 0, 0", nm, r16f.dqkv16,
                 r32sf.dqkv16, f32f.dqkv16, be->linear_bwd != NULL);
    /* q|k|v in bf16 where the backend's gemm_epi writes them (its bias epilogue with a bf16 output) */
    if (!(r16f.qkv16 == (be->gemm_epi != NULL) && r32sf.qkv16 == 0 && f32f.qkv16 == 0))
        fail_msg("%s: q|k|v in bf16 %d, %d with fp32 activations, %d at fp32; want %d, 0, 0", nm, r16f.qkv16,
                 r32sf.qkv16, f32f.qkv16, be->gemm_epi != NULL);
    if (r16f.c16_per_step != (r16f.qkv16 ? LAYERS : 0) || r32sf.c16_per_step != 0)
        fail_msg("%s: %ld and %ld bf16-output GEMMs per step, want %d and 0", nm, r16f.c16_per_step, r32sf.c16_per_step,
                 r16f.qkv16 ? LAYERS : 0);
    /* the memory: y1, y2 (rows x d each) and a2 (rows x f) per layer at 2 bytes instead of 4; the q|k|v gradient's
     * buffer (rows x 3d floats) as rows x max(3d, f) bf16 (shared with linear1's bf16 output gradient); q|k|v (rows x
     * 3d per layer) in bf16 */
    size_t want = (size_t)LAYERS * (size_t)max_rows * (2 * HID + FF) * 2;
    if (r16f.dqkv16)
        want += (size_t)max_rows * 3 * HID * 4 - ((size_t)max_rows * (3 * HID > FF ? 3 * HID : FF) + 1) / 2 * 4;
    if (r16f.qkv16)
        want += (size_t)LAYERS * ((size_t)max_rows * 3 * HID * 4 - ((size_t)max_rows * 3 * HID + 1) / 2 * 4);
    if (!(r32sf.bytes - r16f.bytes == want))
        fail_msg("%s: bf16 activations save %zu bytes, want %zu", nm, r32sf.bytes - r16f.bytes, want);
    size_t want_o = (size_t)LAYERS * (size_t)max_rows * HID * 2; /* o: rows x d per layer in bf16 */
    if (f32f.bytes - r32sf.bytes != want_o)
        fail_msg("%s: fp32 model %zu bytes, bf16-GEMM model with fp32 activations %zu: want %zu less", nm, f32f.bytes,
                 r32sf.bytes, want_o);
    /* the GEMMs read them: 4 per layer forward (o's too), 4 per layer backward (weight gradients), and linear1's data
     * gradient from the bf16 output gradient the gelu backward wrote (gelu_erf_bwd16), and the in projection's data
     * gradient from the bf16 q|k|v gradient (dqkv16); with fp32 activations o's two */
    const long want16 = (9 + r16f.dqkv16) * LAYERS;
    if (!(r16f.gemm16_per_step == want16))
        fail_msg("%s: %ld gemm16 calls per step, want %ld", nm, r16f.gemm16_per_step, want16);
    if (!(r32sf.gemm16_per_step == 2 * LAYERS && f32f.gemm16_per_step == 0))
        fail_msg("%s: %ld gemm16 calls per step with fp32 activations at bf16, want %d (o's); %ld at fp32, want 0", nm,
                 r32sf.gemm16_per_step, 2 * LAYERS, f32f.gemm16_per_step);
    /* every residual add is fused with the layernorm after it: 2 per layer */
    if (!(r16f.fused_per_step == 2 * LAYERS && f32f.fused_per_step == 2 * LAYERS))
        fail_msg("%s: %ld and %ld fused calls, want %d", nm, r16f.fused_per_step, f32f.fused_per_step, 2 * LAYERS);
    if (r16u.fused_per_step != 0) fail_msg("%s: the unfused table ran the fused op", nm);
    /* q|k|v from a bf16-output GEMM: the same bits on the emulator, within close_to on a GPU (said when it differs) */
    const int gpu_qkv16 = r16f.qkv16 && !ddp_cuda()->emulated;
    for (int u = 0; u < 2; u++) {
        const result *r = u ? &r16u : &r16f;
        if (same(r, &r32su)) continue;
        if (!(gpu_qkv16 && close_to(r, &r32su)))
            fail_msg("%s: bf16 activations, %s: not the bits of fp32 activations, unfused", nm,
                     u ? "unfused" : "fused");
        printf("%s: bf16 activations, %s: within 2^-7 of fp32 activations, not the same bits (q|k|v's bf16-output "
               "GEMM)\n",
               nm, u ? "unfused" : "fused");
    }
    if (!same(&r32sf, &r32su))
        fail_msg("%s: at bf16 the fused residual + layernorm is not the bits of the two ops", nm);
    if (!same(&f32f, &f32u)) fail_msg("%s: at fp32 the fused residual + layernorm is not the bits of the two ops", nm);
    if (same(&r16f, &f32f)) fail_msg("%s: bf16 gave the bits of fp32: the bf16 GEMMs did not run", nm);
    if (r16f.dh16) fail_msg("%s: with dropout the layernorm backward wrote a bf16 dh", nm);
    /* Without dropout the layernorm backward also writes dh's bf16 rounding for the linear backward that reads dh
     * next (dh16, where the q|k|v gradient is bf16): the bits of the same steps without it (layernorm_bwd16 removed
     * from a copy of the table; within close_to on a GPU, whose cuBLASLt may choose by the operands' addresses), no
     * more memory (the copy lives in the q|k|v gradient's buffer), and the out projection's and linear2's backward
     * reading a bf16 dy: one gemm16 call more each per layer */
    ops_no_dh16 = ops_counting;
    ops_no_dh16.layernorm_bwd16 = NULL;
    result h16, h32;
    run_dropout = 0.0;
    run(be, DDP_PRECISION_BF16, 1, 1, &h16);
    run_ops = &ops_no_dh16;
    run(be, DDP_PRECISION_BF16, 1, 1, &h32);
    run_ops = NULL, run_dropout = 0.1;
    if (!(h16.dh16 == h16.dqkv16 && h32.dh16 == 0))
        fail_msg("%s: dh in bf16 %d (q|k|v gradient in bf16 %d), %d without layernorm_bwd16", nm, h16.dh16, h16.dqkv16,
                 h32.dh16);
    if (h16.bytes != h32.bytes) fail_msg("%s: dh in bf16 took %zu bytes, without it %zu", nm, h16.bytes, h32.bytes);
    if (h16.gemm16_per_step != h32.gemm16_per_step + (h16.dh16 ? 2 * LAYERS : 0))
        fail_msg("%s: %ld gemm16 calls per step with dh in bf16, %ld without", nm, h16.gemm16_per_step,
                 h32.gemm16_per_step);
    if (!same(&h16, &h32)) {
        if (!(h16.dh16 && !ddp_cuda()->emulated && close_to(&h16, &h32)))
            fail_msg("%s: dh in bf16 is not the bits of the same steps without it", nm);
        printf("%s: dh in bf16: within 2^-7 of the steps without it, not the same bits\n", nm);
    }
    if (same(&h16, &r16f)) fail_msg("%s: the steps without dropout gave the bits of those with it", nm);
    free(h16.grad), free(h32.grad);
    z16_steps(be, &r16f);
    int finite = 1;
    for (int k = 0; k <= NB; k++)
        for (int i = 0; i < B; i++) finite &= r16f.loss[k][i] == r16f.loss[k][i] && r16f.loss[k][i] > 0.0f;
    if (!finite) fail_msg("%s: non-finite or non-positive losses at bf16", nm);
    result *all[] = {&r16f, &r16u, &r32sf, &r32su, &f32f, &f32u};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->grad);
    be->gemm16 = real_gemm16;
    be->gemm_epi = real_gemm_epi;
    be->linear_bwd = real_linear_bwd;
    wrong_precision(be);
    printf("%s: bf16 activations save %zu of %zu bytes; %ld gemm16 and %ld fused calls per step\n", nm,
           r32sf.bytes - r16f.bytes, r32sf.bytes, r16f.gemm16_per_step, r16f.fused_per_step);
}

static void test_cpu(void **state)
{
    (void)state;
    ddp_backend *cpu = NULL;
    OK(ddp_backend_cpu_create(1, &cpu));
    test_backend(cpu);
    cpu->destroy(cpu);
}

static void test_cuda(void **state)
{
    (void)state;
    if (!getenv("MPIDDP_CUDA_PLUGIN") && !ddp_cuda_maybe_present()) {
        printf("no CUDA device or emulator: the CUDA backend is not tested here (test_act16_emu does)\n");
        skip();
    }
    ddp_backend *gpu = NULL; /* a device, or the emulator: it must work */
    OK(ddp_backend_cuda_create(0, &gpu));
    test_backend(gpu);
    gpu->destroy(gpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cpu), cmocka_unit_test(test_cuda)};
    return cmocka_run_group_tests(tests, make_batches, free_batches);
}
