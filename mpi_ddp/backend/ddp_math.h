/* ddp_math.h — element-wise math of the reference model, written once for host and device: the CPU
 * backend and the CUDA kernels both call these, so the CPU tests exercise the GPU arithmetic. */
#ifndef DDP_MATH_H
#define DDP_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DDP_HD __host__ __device__
#else
#define DDP_HD
#endif

#define DDP_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define DDP_GELU_C 0.044715f

/* exp(x) for float, Cephes' polynomial (about 1 ulp) in branch-free arithmetic so the CPU loops vectorize
 * without -ffast-math or libmvec; the same code runs in the CUDA kernels. x is clamped to [-87, 87] (NaN
 * becomes -87: callers that must propagate NaN, like gelu, multiply by x). */
DDP_HD static inline float ddp_expf(float x)
{
    float v = fminf(fmaxf(x, -87.0f), 87.0f);
    float fx = v * 1.44269504088896341f + 0.5f;
    int n = (int)fx;
    n -= (float)n > fx; /* floor */
    float fn = (float)n;
    v = v - fn * 0.693359375f + fn * 2.12194440e-4f;
    float z = v * v;
    float y = ((((1.9875691500e-4f * v + 1.3981999507e-3f) * v + 8.3334519073e-3f) * v + 4.1665795894e-2f) * v +
               1.6666665459e-1f) *
                  v +
              5.0000001201e-1f;
    y = y * z + v + 1.0f;
    union {
        uint32_t u;
        float f;
    } p;
    p.u = (uint32_t)(n + 127) << 23; /* 2^n; n + 127 is in [1, 253] */
    return y * p.f;
}

/* gelu, tanh approximation (PyTorch approximate="tanh"): 0.5 x (1 + tanh(u)) = x * sigmoid(2u),
 * u = sqrt(2/pi) (x + 0.044715 x^3). ddp_gelu_fwd returns gelu(x) and, through *grad when grad is
 * non-NULL, its derivative: with s = sigmoid(2u), 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s), so
 * gelu'(x) = s + 2 x s (1 - s) du/dx. Training computes both in the forward pass (one exp, one division)
 * and keeps gelu' instead of the pre-activation, so the backward pass is a multiply. */
DDP_HD static inline float ddp_gelu_fwd(float x, float *grad)
{
    float x2 = x * x;
    float u = DDP_GELU_K * (x + DDP_GELU_C * x2 * x);
    float s = 1.0f / (1.0f + ddp_expf(-2.0f * u));
    if (grad) {
        float du = DDP_GELU_K * (1.0f + 3.0f * DDP_GELU_C * x2);
        *grad = s + 2.0f * x * s * (1.0f - s) * du;
    }
    return x * s;
}

DDP_HD static inline float ddp_gelu(float x) { return ddp_gelu_fwd(x, (float *)0); }

DDP_HD static inline float ddp_gelu_grad(float x)
{
    float g;
    ddp_gelu_fwd(x, &g);
    return g;
}

/* Whether x is a NaN, by its bits: the CPU loops are compiled with -ffinite-math-only, under which isnan() and
 * x != x may be folded to false. */
DDP_HD static inline int ddp_isnan_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7fffffffu) > 0x7f800000u;
}

/* Softmax cross-entropy of one row of c logits against label y. Returns the loss; writes the
 * gradient (softmax - onehot) * dscale into dz when dz is non-NULL, and the argmax and its
 * probability into pred/prob when non-NULL. The argmax is torch.argmax's: the first NaN where the row holds one
 * (its loss and probability are then NaN), else the first largest. */
DDP_HD static inline float ddp_softmax_xent_row(const float *z, int64_t c, int64_t y, float dscale, float *dz,
                                                int64_t *pred, float *prob)
{
    float mx = z[0];
    int64_t am = 0;
    for (int64_t j = 1; j < c && !ddp_isnan_bits(mx); j++)
        if (z[j] > mx || ddp_isnan_bits(z[j])) {
            mx = z[j];
            am = j;
        }
    float s = 0.0f;
    for (int64_t j = 0; j < c; j++) s += expf(z[j] - mx);
    float lse = mx + logf(s);
    if (dz)
        for (int64_t j = 0; j < c; j++) dz[j] = (expf(z[j] - lse) - (j == y ? 1.0f : 0.0f)) * dscale;
    if (pred) *pred = am;
    if (prob) *prob = 1.0f / s; /* exp(mx - lse) */
    return lse - z[y];
}

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float bc1;      /* 1 - beta1^t */
    float bc2_sqrt; /* sqrt(1 - beta2^t) */
    float gscale;   /* applied to each gradient: 1/global batch times the clip coefficient */
} ddp_adamw_args;

/* One AdamW element update with PyTorch's semantics (torch.optim.AdamW, single-tensor path). */
DDP_HD static inline void ddp_adamw_elem(float *p, float g, float *m, float *v, const ddp_adamw_args *a)
{
    g *= a->gscale;
    float pv = *p * (1.0f - a->lr * a->weight_decay);
    float mv = *m + (g - *m) * (1.0f - a->beta1);
    float vv = *v * a->beta2 + g * g * (1.0f - a->beta2);
    float denom = sqrtf(vv) / a->bc2_sqrt + a->eps;
    pv -= (a->lr / a->bc1) * (mv / denom);
    *p = pv;
    *m = mv;
    *v = vv;
}

#endif
