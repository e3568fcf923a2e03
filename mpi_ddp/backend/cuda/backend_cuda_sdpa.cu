/* backend_cuda_sdpa.cu — the CUDA backend's attention through cuDNN (cudnn_sdpa.c): the choice between cuDNN and the
 * own kernels (MPIDDP_ATTENTION), and what feeds cuDNN the packed batch: sequence lengths and ragged offsets from the
 * packing, q|k|v, o and dout rounded to bf16 (each copied where the model keeps it in bf16), o and the
 * gradients back to fp32 (copied as they are where the model keeps them in bf16) by the widening pass
 * (ddp_cuda_widen) that also gives the own kernels their fp32 copy of a bf16 q|k|v. */
#include "mpi_ddp/backend/cuda/backend_cuda_priv.h"
#include "mpi_ddp/backend/cuda/cudnn_sdpa.h"
extern "C" {
#include "mpi_ddp/core/settings.h"
}

#include <stdio.h>
#include <string.h>

/* The operands a call gives cuDNN in bf16: q|k|v, and for the backward o and dout (k of them), each rounded from
 * fp32 or (x16) copied as it is */
struct sdpa_rounds {
    const void *x[3];
    __nv_bfloat16 *y[3];
    int64_t n[3];
    int vec[3]; /* x 16-byte aligned: float4 loads (8-byte aligned at x16: four bf16 in one load) */
    int x16[3];
    int k;
};
/* One launch feeds a call: the last block writes seq[b] = rows of sample b and the ragged offsets (in elements) of
 * q|k|v (3d per row), o (d) and the statistics (H) at b = 0 .. Bc (the Bc - B entries past the batch are empty
 * samples); the others round r's fp32 operands to bf16 (nearest even) and copy its bf16 ones (x16), four elements per
 * thread. */
__global__ void k_sdpa_feed(const int64_t *off, int64_t B, int64_t Bc, int64_t d, int64_t H, int32_t *seq, int32_t *oq,
                            int32_t *oo, int32_t *os, sdpa_rounds r)
{
    if (blockIdx.x == gridDim.x - 1) {
        for (int64_t b = threadIdx.x; b <= Bc; b += blockDim.x) {
            int64_t lo = off[b < B ? b : B];
            if (b < Bc) seq[b] = (int32_t)(b < B ? off[b + 1] - lo : 0);
            oq[b] = (int32_t)(lo * 3 * d), oo[b] = (int32_t)(lo * d), os[b] = (int32_t)(lo * H);
        }
        return;
    }
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    for (int a = 0; a < r.k; a++) {
        if (r.x16[a]) {
            const __nv_bfloat16 *x = (const __nv_bfloat16 *)r.x[a];
            if (r.vec[a] && i + 4 <= r.n[a])
                *(ddp_bf16x4 *)(r.y[a] + i) = *(const ddp_bf16x4 *)(x + i);
            else
                for (int64_t e = i; e < i + 4 && e < r.n[a]; e++) r.y[a][e] = x[e];
        } else if (r.vec[a] && i + 4 <= r.n[a]) {
            float v[4];
            vld<4>((const float *)r.x[a], i, v);
            vst_out<4>(r.y[a], i, v);
        } else {
            for (int64_t e = i; e < i + 4 && e < r.n[a]; e++)
                r.y[a][e] = __float2bfloat16_rn(((const float *)r.x[a])[e]);
        }
    }
}
/* y = float(x) over n elements, four per thread */
__global__ void k_sdpa_widen(const __nv_bfloat16 *x, float *y, int64_t n)
{
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 4 <= n && ((uintptr_t)x & 7) == 0 && ((uintptr_t)y & 15) == 0) { /* one 8-byte load, one float4 store */
        const ddp_bf16x4 t = *(const ddp_bf16x4 *)(x + i);
        float4 o;
        o.x = __bfloat162float(t.v[0]), o.y = __bfloat162float(t.v[1]);
        o.z = __bfloat162float(t.v[2]), o.w = __bfloat162float(t.v[3]);
        *(float4 *)(y + i) = o;
        return;
    }
    for (int64_t e = i; e < i + 4 && e < n; e++) y[e] = __bfloat162float(x[e]);
}

ddp_status ddp_cuda_widen(cuda_impl *c, const __nv_bfloat16 *x, float *y, int64_t n)
{
    if (n <= 0) return DDP_OK;
    DDP_LAUNCH(k_sdpa_widen, blocks_for((n + 3) / 4, 256), 256, 0, c->stream, x, y, n);
    LAUNCH_CHECK();
    return DDP_OK;
}

#ifdef DDP_HAVE_CUDNN

/* The shape class of a batch: samples and rows (the longest sample, at least 64) up to powers of two. With ragged
 * offsets and sequence lengths both are bounds only, and each new class costs a plan (a kernel compile), so few. */
static ddp_sdpa_key class_of(const ddp_packing *pack, int64_t d, int heads, const float *lse, int bwd)
{
    ddp_sdpa_key k = {bwd, 1, 64, heads, d / heads, 16};
    while (k.B < pack->B) k.B *= 2;
    while (k.S < pack->max_rows) k.S *= 2;
    uintptr_t a = (uintptr_t)lse;
    k.st_align = a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : 4;
    return k;
}

/* The bf16 areas of c->sdpa_buf hold rows rows of width d each plus SDPA_PAD rows: a kernel may read (never use) rows
 * past a batch's end, which must hold finite values, and do; the buffer is zeroed when it grows. */
#define SDPA_PAD 64
static ddp_status scratch(cuda_impl *c, int64_t R, int64_t d, int64_t B)
{
    if (R <= c->sdpa_rows && d <= c->sdpa_d && B <= c->sdpa_b) return DDP_OK;
    const int64_t rows = R > c->sdpa_rows ? R + R / 4 : c->sdpa_rows, w = d > c->sdpa_d ? d : c->sdpa_d,
                  nb = B > c->sdpa_b ? B : c->sdpa_b;
    size_t bytes = (size_t)(8 * (rows + SDPA_PAD) * w) * sizeof(__nv_bfloat16) + (size_t)(4 * (nb + 1)) * 4;
    if (c->sdpa_buf) CUDA_CHECK(cudaFreeAsync(c->sdpa_buf, c->stream));
    c->sdpa_buf = NULL, c->sdpa_rows = c->sdpa_d = c->sdpa_b = 0;
    ALLOC_CHECK(cudaMallocAsync(&c->sdpa_buf, bytes, c->stream), bytes, c->device, "cuDNN attention's bf16 operands");
    CUDA_CHECK(cudaMemsetAsync(c->sdpa_buf, 0, bytes, c->stream));
    c->sdpa_rows = rows, c->sdpa_d = w, c->sdpa_b = nb;
    return DDP_OK;
}

/* The scratch of one call, carved from c->sdpa_buf: bf16 q|k|v, dq|dk|dv, o and dout, then the int32 lengths and
 * offsets; one launch fills the lengths and offsets and rounds qkv (copies it at qkv16), and for the backward o unless
 * o16 and dout (copies it at do16), into it; o stored in bf16 (o16) is copied. *ok = 0 when the batch's offsets would
 * not fit cuDNN's int32 (the own kernels take it). */
static ddp_status feed(cuda_impl *c, const ddp_packing *pack, const ddp_sdpa_key *k, int64_t d, const void *qkv,
                       int qkv16, const void *o, int o16, const void *dout, int do16, ddp_sdpa_ptrs *p, int *ok)
{
    const int64_t R = pack->R, n3 = R * 3 * d;
    *ok = (R + SDPA_PAD) * 3 * d < INT32_MAX;
    if (!*ok) return DDP_OK;
    DDP_CHECK(scratch(c, R, d, k->B));
    const int64_t a3 = (c->sdpa_rows + SDPA_PAD) * 3 * c->sdpa_d, a1 = a3 / 3; /* elements of each area */
    __nv_bfloat16 *h = (__nv_bfloat16 *)c->sdpa_buf;
    p->qkv = h, p->dqkv = h + a3, p->o = h + 2 * a3, p->dout = h + 2 * a3 + a1;
    int32_t *i = (int32_t *)(h + 2 * a3 + 2 * a1);
    p->seq = i, p->off_qkv = i + k->B + 1, p->off_o = i + 2 * (k->B + 1), p->off_st = i + 3 * (k->B + 1);
    p->ws = c->sdpa_ws;
    p->scale = 1.0f / sqrtf((float)k->D);
    sdpa_rounds r = {{qkv, o16 ? NULL : o, dout},
                     {(__nv_bfloat16 *)p->qkv, (__nv_bfloat16 *)p->o, (__nv_bfloat16 *)p->dout},
                     {n3, o16 ? 0 : R * d, R * d},
                     {0, 0, 0},
                     {qkv16, 0, do16},
                     k->bwd ? 3 : 1};
    for (int a = 0; a < r.k; a++) r.vec[a] = (uintptr_t)r.x[a] % (r.x16[a] ? 8 : 16) == 0;
    DDP_LAUNCH(k_sdpa_feed, blocks_for((n3 + 3) / 4, 256) + 1, 256, 0, c->stream, pack->off, pack->B, k->B, d, k->H,
               p->seq, p->off_qkv, p->off_o, p->off_st, r);
    LAUNCH_CHECK();
    if (k->bwd && o16)
        CUDA_CHECK(
            cudaMemcpyAsync(p->o, o, (size_t)(R * d) * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice, c->stream));
    return DDP_OK;
}

/* The plan of k and its workspace; *ok = 0 when cuDNN refused the class */
static ddp_status plan(cuda_impl *c, const ddp_sdpa_key *k, int *ok)
{
    int64_t ws = 0;
    DDP_CHECK(ddp_sdpa_prepare(c->sdpa, k, ok, &ws));
    if (*ok) DDP_CHECK(ddp_cuda_grow(c, &c->sdpa_ws, &c->sdpa_ws_cap, (size_t)ws, "cuDNN attention's workspace"));
    return DDP_OK;
}

/* One call on cuDNN: the forward (o_in NULL: out = o [R, d]) or the backward (o_in, bf16 at o16, and dout given,
 * bf16 at do16: out = dq|dk|dv [R, 3d]); out16: out in bf16 (cuDNN's values copied as they are), else widened to fp32.
 * *ran = 0 when the own kernels take it (that direction not chosen, not bf16, a head width cuDNN does not take, a class
 * it refused, offsets beyond int32). */
static ddp_status sdpa_call(ddp_backend *b, const void *qkv, int qkv16, const void *o_in, int o16, const void *dout,
                            int do16, const float *lse, void *out, int out16, const ddp_packing *pack, int64_t d,
                            int heads, int *ran)
{
    cuda_impl *c = cuda_of(b);
    const int64_t dh = d / heads;
    const int bwd = o_in != NULL;
    ddp_sdpa_key k;
    ddp_sdpa_ptrs p;
    int ok = (c->attn_cudnn & (bwd ? 2 : 1)) && c->precision == DDP_PRECISION_BF16 && dh % 8 == 0 && dh <= 128;
    *ran = 0;
    if (!ok) return DDP_OK;
    k = class_of(pack, d, heads, lse, bwd);
    DDP_CHECK(plan(c, &k, &ok));
    if (ok) DDP_CHECK(feed(c, pack, &k, d, qkv, qkv16, o_in, o16, dout, do16, &p, &ok));
    if (!ok) return DDP_OK;
    p.stats = (float *)lse;
    DDP_LAUNCH_NOTE();
    DDP_CHECK(ddp_sdpa_run(c->sdpa, &k, &p));
    const void *res = bwd ? p.dqkv : p.o;
    const int64_t n = pack->R * (bwd ? 3 : 1) * d;
    if (out16) /* cuDNN's bf16 values are the model's: the area past the batch stays cuDNN's */
        CUDA_CHECK(cudaMemcpyAsync(out, res, (size_t)n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice, c->stream));
    else
        DDP_CHECK(ddp_cuda_widen(c, (const __nv_bfloat16 *)res, (float *)out, n));
    *ran = 1;
    return DDP_OK;
}
#endif

ddp_status ddp_cuda_sdpa_fwd(ddp_backend *b, const void *qkv, int qkv16, void *o, int o16, float *lse,
                             const ddp_packing *pack, int64_t d, int heads, int *ran)
{
#ifdef DDP_HAVE_CUDNN
    return sdpa_call(b, qkv, qkv16, NULL, o16, NULL, 0, lse, o, o16, pack, d, heads, ran);
#else
    (void)b, (void)qkv, (void)qkv16, (void)o, (void)o16, (void)lse, (void)pack, (void)d, (void)heads;
    *ran = 0;
    return DDP_OK;
#endif
}

ddp_status ddp_cuda_sdpa_bwd(ddp_backend *b, const void *qkv, int qkv16, const void *o, int o16, const void *dout,
                             int do16, const float *lse, void *dqkv, int dqkv16, const ddp_packing *pack, int64_t d,
                             int heads, int *ran)
{
#ifdef DDP_HAVE_CUDNN
    return sdpa_call(b, qkv, qkv16, o, o16, dout, do16, lse, dqkv, dqkv16, pack, d, heads, ran);
#else
    (void)b, (void)qkv, (void)qkv16, (void)o, (void)o16, (void)dout, (void)do16, (void)lse, (void)dqkv, (void)dqkv16,
        (void)pack, (void)d, (void)heads;
    *ran = 0;
    return DDP_OK;
#endif
}

/* ddp_backend.attention_select: MPIDDP_ATTENTION=cudnn demands cuDNN, own (or a CPU method's name) the own kernels,
 * auto or unset cuDNN where it applies: bf16, no attention dropout, heads of a multiple of 8 up to 128, cuDNN loaded
 * and accepting a probe of the forward graph (the first seconds on a new GPU say whether it does). The backward is
 * cuDNN's where it accepts that graph too, else the own kernels', which read the same statistics. */
ddp_status ddp_cuda_attention_select(ddp_backend *b, ddp_precision prec, int64_t d, int heads, float p,
                                     const char **name, char *why, size_t n)
{
    cuda_impl *c = cuda_of(b);
    const char *m = ddp_knob_str(DDP_KNOB_ATTENTION);
    const int want = m && !strcmp(m, "cudnn") ? 2 : !m || !strcmp(m, "auto") ? 1 : 0;
    const int64_t dh = d / heads;
    char reason[700] = "", bwd[700] = "";
    c->attn_cudnn = 0;
    if (!want)
        snprintf(reason, sizeof reason, "MPIDDP_ATTENTION=%s", m);
    else if (prec != DDP_PRECISION_BF16)
        snprintf(reason, sizeof reason, "precision %s: cuDNN's fused attention runs at bf16 only",
                 prec == DDP_PRECISION_TF32 ? "tf32" : "fp32");
    else if (p > 0.0f)
        snprintf(reason, sizeof reason,
                 "attention dropout %g: cuDNN's mask is not the counter-based one that keeps results independent of "
                 "packing and world size",
                 (double)p);
    else if (dh % 8 || dh > 128)
        snprintf(reason, sizeof reason, "head width %lld: cuDNN's flash attention takes multiples of 8 up to 128",
                 (long long)dh);
#ifdef DDP_HAVE_CUDNN
    else {
        if (!c->sdpa && !c->sdpa_tried) {
            c->sdpa_tried = 1;
            DDP_CHECK(ddp_sdpa_create((void *)c->stream, &c->sdpa, c->sdpa_why, sizeof c->sdpa_why));
        }
        if (!c->sdpa) snprintf(reason, sizeof reason, "%s", c->sdpa_why);
        for (int dir = 0; c->sdpa && dir < 2; dir++) { /* a probe per direction: one sample of 64 rows */
            ddp_sdpa_key k = {dir, 1, 64, heads, dh, 16};
            int ok = 0;
            DDP_CHECK(plan(c, &k, &ok));
            if (ok) c->attn_cudnn |= 1 << dir;
            if (!ok) snprintf(dir ? bwd : reason, sizeof reason, "%s", ddp_sdpa_refusal(c->sdpa));
            if (!ok) break;
        }
    }
#else
    else
        snprintf(reason, sizeof reason, "built without cuDNN's headers");
#endif
    if (!*reason) {
#ifdef DDP_HAVE_CUDNN
        ddp_sdpa_counts k;
        ddp_sdpa_counts_get(c->sdpa, &k);
        if (c->attn_cudnn & 2)
            snprintf(why, n, "%s: fused SDPA at bf16, forward and backward (backward engine %lld%s)",
                     ddp_sdpa_version(c->sdpa), (long long)k.bwd_engine,
                     k.bwd_deterministic ? ", no nondeterministic note" : ", nondeterministic");
        else
            snprintf(why, n, "%s: fused SDPA forward at bf16; the backward on the own kernels (%s)",
                     ddp_sdpa_version(c->sdpa), bwd);
#endif
        *name = "cudnn";
        return DDP_OK;
    }
    *name = "own";
    snprintf(why, n, "%s", reason);
    if (want == 2) return ddp_set_error(DDP_ERR_ARG, "MPIDDP_ATTENTION=cudnn: %s", reason);
    return DDP_OK;
}

/* ddp_backend.attention_counts: plans built, cache hits, classes refused, microseconds building (cuDNN's) */
void ddp_cuda_attention_counts(ddp_backend *b, int64_t out[4])
{
    memset(out, 0, 4 * sizeof *out);
#ifdef DDP_HAVE_CUDNN
    cuda_impl *c = cuda_of(b);
    if (!c->sdpa) return;
    ddp_sdpa_counts k;
    ddp_sdpa_counts_get(c->sdpa, &k);
    out[0] = k.built, out[1] = k.hits, out[2] = k.refused, out[3] = k.build_us;
#else
    (void)b;
#endif
}

void ddp_cuda_sdpa_destroy(cuda_impl *c)
{
#ifdef DDP_HAVE_CUDNN
    ddp_sdpa_destroy(c->sdpa);
    c->sdpa = NULL;
#endif
    if (c->sdpa_buf) cudaFree(c->sdpa_buf);
    if (c->sdpa_ws) cudaFree(c->sdpa_ws);
    c->sdpa_buf = c->sdpa_ws = NULL;
    c->sdpa_rows = c->sdpa_d = c->sdpa_b = 0;
}
