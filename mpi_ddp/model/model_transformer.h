/* model_transformer.h — the Transformer encoder model's private state, shared by model_transformer.c
 * (parameters, init, buffers, staging) and transformer_pass.c (forward and backward passes). */
#ifndef DDP_MODEL_TRANSFORMER_H
#define DDP_MODEL_TRANSFORMER_H

#include "mpi_ddp/model/model_common.h"

/* Parameter tensors of one layer, in PyTorch's state_dict order. */
enum {
    T_QKV_W,
    T_QKV_B,
    T_OUT_W,
    T_OUT_B,
    T_L1_W,
    T_L1_B,
    T_L2_W,
    T_L2_B,
    T_N1_W,
    T_N1_B,
    T_N2_W,
    T_N2_B,
    T_PER_LAYER
};

typedef struct {
    int64_t p[T_PER_LAYER]; /* element offsets of the layer's tensors in the flat parameter buffer */
    int64_t lo, hi;         /* the layer's element range (one gradient-ready call) */
    /* saved activations of a training forward, [maxR, ...] */
    float *h; /* layer input (residual stream) [R, d] */
    /* y1, y2 and a2 are read by GEMMs only: with bf16 activations (txmodel.act16) they hold ddp_bf16 values, half
     * the size; o too at bf16 (txmodel.o16) */
    float *y1, *mu1, *rs1; /* norm1 output and row statistics */
    float *qkv;            /* [R, 3d]: bf16 at qkv16 */
    float *o, *lse;        /* attention output [R, d] (heads concatenated), log-sum-exp [R, heads] */
    float *hmid;           /* residual stream after the attention block */
    float *y2, *mu2, *rs2; /* norm2 */
    float *dg, *a2;        /* gelu' of linear1's output [R, f] (at z16: that output itself, in bf16); dropped gelu
                            * output [R, f] */
} tx_layer;

typedef struct {
    ddp_backend *be;
    const ddp_enc_ops *E;
    int64_t D, d, f, C, P, L, heads, maxR, maxB;
    int positions;
    int act16;  /* 1: y1, y2, a2 stored in bf16 (model config precision bf16, backend able) */
    int o16;    /* 1: the attention output o in bf16 (precision bf16) */
    int dqkv16; /* 1: the q|k|v gradient in bf16 (act16 with a fused linear_bwd, whose bias gradient sums bf16) */
    int qkv16;  /* 1: q|k|v in bf16, written by the in projection's bias epilogue (act16 with fused epilogues) */
    int dh16;   /* 1: the layernorm backward writes dh's bf16 rounding into dqkv's buffer (dqkv16, no dropout) */
    int z16;    /* 1: linear1's output (bias added) in bf16 from its epilogue, gelu' recomputed from it, and the GELU
                 * output's gradient in bf16 (act16, fused epilogues and linear_bwd, gelu_erf_fwd16z / bwd16z) */
    int do16;   /* 1: the attention output's gradient dO in bf16, written by the out projection's linear_bwd (z16) */
    int t16;    /* 1: the out projection's and linear2's outputs in bf16 with their biases, from their epilogues, read
                 * by residual_layernorm_fwd16t (z16 with that op and the fused residual_layernorm_fwd) */
    char attention[400]; /* "cudnn: <why>" or "own: <why>" (attention_select), "cpu: <method>" */
    int fuse_epi; /* 1: bias adds and bias gradients in the GEMMs' epilogues (tf32, bf16: gemm_epi, MPIDDP_CUBLASLT) */
    float dropout;
    uint64_t seed;
    ddp_param_table tab;                                            /* the tensors; tab.off: their element offsets */
    int64_t inp_w, inp_b, pos_w, nf_w, nf_b, head_w, head_b, total; /* offsets; pos_w -1 without positions */
    int64_t body_lo; /* first element of layer 0 (inp and pos are [0, body_lo)) */
    tx_layer *lay;
    float *hL, *yf, *muf, *rsf; /* final residual stream and final norm */
    float *p, *dp, *logits, *dlogits;
    float *branch;         /* [R,d] a residual branch's linear output before bias and dropout (forward),
                              then its gradient (backward) */
    float *dh, *dy, *dqkv; /* backward: residual-stream, block-input and q|k|v gradients (dqkv bf16 at dqkv16; at
                            * dh16 it also holds dh's bf16 copy from a layernorm backward to the next linear one) */
    float *dffn;           /* [R,f] gradient of the feed-forward hidden activations (bf16 at z16) */
    void *dz16;            /* [R,f] bf16: linear1's output gradient for its two products (act16 with gelu_erf_bwd16,
                            * else NULL); inside dqkv (free until the attention block's backward) where it fits
                            * (dqkv16, or f <= 6d), else in dz16_own */
    float *dz16_own;
    float *attn_delta; /* [R,heads] attention backward's rowsum(dO * O) per head */
    ddp_model_io io;   /* the batch on the backend (with its packing), the loss/prob/pred block */
    ddp_packing pack;
    double t_fwd, t_bwd, t_attn, t_gemm; /* cumulative seconds: the host clock per op class on host backends;
                                          * device timers of train steps (no t_gemm) on device backends */
    int timers;           /* device timers marked in this train step (DDP_T_ATTN0 + 2 per timed attention) */
    ddp_model_config own; /* the configuration it was created with (ddp_model_own_config) */
} txmodel;

ddp_status ddp_tx_forward(txmodel *m, const ddp_batch *b, const float *P, const float *x, const int64_t *lab,
                          int train);
ddp_status ddp_tx_backward(txmodel *m, const ddp_batch *b, const float *P, float *G, const float *x,
                           ddp_grad_ready_fn ready, void *ready_arg);

#endif
