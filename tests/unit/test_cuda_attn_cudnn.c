/* test_cuda_attn_cudnn.c — cuDNN's fused SDPA in the CUDA backend (backend_cuda_sdpa.cu; test cases of
 * test_cuda_attn.c's main): where attention_select keeps the own kernels and why, cuDNN's attention against the CPU
 * twin within the bf16 bounds, and its plan cache (classes, hits, eviction, refusals). */
#include "test_cuda_attn.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"

#include <stdio.h>
#include <string.h>

/* 1 when the plugin was built without cuDNN's headers: nothing of cuDNN's to test (said once) */
static int no_cudnn_build(void)
{
    char v[400];
    ddp_cuda()->cudnn_version_string(v, sizeof v);
    if (!strstr(v, "built without cuDNN's headers")) return 0;
    printf("no cuDNN tests: %s\n", v);
    return 1;
}

/* attention_select on a fresh backend at precision prec, heads of d/H, dropout p: the name, why in why */
static const char *select_on(ddp_backend *b, ddp_precision prec, int64_t d, int H, float p, char *why, ddp_status *st)
{
    const char *name = "unset";
    *st = b->attention_select(b, prec, d, H, p, &name, why, 400);
    return name;
}
static void expect_own(ddp_precision prec, int64_t d, int H, float p, const char *attn, const char *because)
{
    ddp_backend *b = NULL;
    char why[400];
    ddp_status st;
    if (attn) setenv("MPIDDP_ATTENTION", attn, 1);
    OK(ddp_backend_cuda_create(0, &b));
    const char *name = select_on(b, prec, d, H, p, why, &st);
    if (st != DDP_OK || strcmp(name, "own") || !strstr(why, because))
        fail_msg("select(%s, d %lld, H %d, p %.1f): %s, \"%s\", want own because \"%s\"", attn ? attn : "auto",
                 (long long)d, H, (double)p, name, why, because);
    printf("own attention: %s\n", why);
    b->destroy(b);
    unsetenv("MPIDDP_ATTENTION");
}

/* Where attention_select keeps the own kernels, and says why: fp32, tf32, attention dropout, head widths cuDNN's
 * flash attention refuses, MPIDDP_ATTENTION=own (or a CPU method), no cuDNN library; MPIDDP_ATTENTION=cudnn where it
 * cannot be honoured is an error of one line. */
void test_cudnn_select(void **state)
{
    (void)state;
    expect_own(DDP_PRECISION_FP32, 128, 2, 0.0f, NULL, "precision fp32");
    expect_own(DDP_PRECISION_TF32, 128, 2, 0.0f, NULL, "precision tf32");
    expect_own(DDP_PRECISION_BF16, 128, 2, 0.1f, NULL, "attention dropout 0.1");
    expect_own(DDP_PRECISION_BF16, 24, 2, 0.0f, NULL, "head width 12");
    expect_own(DDP_PRECISION_BF16, 272, 1, 0.0f, NULL, "head width 272");
    expect_own(DDP_PRECISION_BF16, 128, 2, 0.0f, "own", "MPIDDP_ATTENTION=own");
    expect_own(DDP_PRECISION_BF16, 128, 2, 0.0f, "tiled", "MPIDDP_ATTENTION=tiled");
    if (no_cudnn_build()) {
        expect_own(DDP_PRECISION_BF16, 128, 2, 0.0f, NULL, "built without cuDNN's headers");
        return;
    }
    char v[400]; /* what mpiddp env prints: the cuDNN the plugin would load, or why none */
    ddp_cuda()->cudnn_version_string(v, sizeof v);
    printf("cudnn: %s\n", v);
    if (!strstr(v, "9.") || strstr(v, "unavailable")) fail_msg("cudnn_version_string: \"%s\"", v);
    setenv("MPIDDP_CUDNN_LIB", "libm.so.6", 1); /* a library, not cuDNN's */
    ddp_cuda()->cudnn_version_string(v, sizeof v);
    if (!strstr(v, "unavailable: libm.so.6 has no cudnnGetVersion")) fail_msg("cudnn_version_string: \"%s\"", v);
    expect_own(DDP_PRECISION_BF16, 128, 2, 0.0f, NULL, "libm.so.6 has no cudnnGetVersion");
    setenv("MPIDDP_CUDNN_LIB", "/nonexistent/libcudnn_graph.so.9", 1);
    ddp_cuda()->cudnn_version_string(v, sizeof v);
    if (!strstr(v, "unavailable: /nonexistent/libcudnn_graph.so.9")) fail_msg("cudnn_version_string: \"%s\"", v);
    expect_own(DDP_PRECISION_BF16, 128, 2, 0.0f, NULL, "/nonexistent/libcudnn_graph.so.9");
    ddp_backend *b = NULL;
    char why[400];
    ddp_status st;
    setenv("MPIDDP_ATTENTION", "cudnn", 1);
    OK(ddp_backend_cuda_create(0, &b));
    select_on(b, DDP_PRECISION_BF16, 128, 2, 0.0f, why, &st);
    if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "MPIDDP_ATTENTION=cudnn: cuDNN not loaded"))
        fail_msg("MPIDDP_ATTENTION=cudnn without cuDNN: status %d, \"%s\"", (int)st, ddp_last_error());
    unsetenv("MPIDDP_CUDNN_LIB");
    select_on(b, DDP_PRECISION_FP32, 128, 2, 0.0f, why, &st);
    if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "MPIDDP_ATTENTION=cudnn: precision fp32"))
        fail_msg("MPIDDP_ATTENTION=cudnn at fp32: status %d, \"%s\"", (int)st, ddp_last_error());
    b->destroy(b);
    unsetenv("MPIDDP_ATTENTION");
    if (ddp_cuda()->emulated) { /* the emulated cuDNN refuses on demand: the probe finds it */
        setenv("MPIDDP_EMU_CUDNN_REFUSE", "1", 1);
        expect_own(DDP_PRECISION_BF16, 128, 2, 0.0f, NULL, "cuDNN refused the forward attention");
        unsetenv("MPIDDP_EMU_CUDNN_REFUSE");
    }
}

/* cuDNN chosen on gpu (fails the test where it cannot be: no cuDNN, or cuDNN refusing the probe's graphs) */
static void choose_cudnn(int bwd)
{
    char why[400];
    ddp_status st;
    setenv("MPIDDP_ATTENTION", "cudnn", 1);
    if (!bwd && ddp_cuda()->emulated) /* a cuDNN that refuses the backward graph (at the probe) */
        setenv("MPIDDP_EMU_CUDNN_REFUSE", "bwd", 1);
    else
        unsetenv("MPIDDP_EMU_CUDNN_REFUSE");
    const char *name = select_on(gpu, DDP_PRECISION_BF16, 128, 2, 0.0f, why, &st);
    unsetenv("MPIDDP_ATTENTION");
    unsetenv("MPIDDP_EMU_CUDNN_REFUSE");
    if (st != DDP_OK || strcmp(name, "cudnn")) fail_msg("cuDNN not chosen: %s", ddp_last_error());
    printf("cudnn attention: %s\n", why);
    cudnn_mode = strstr(why, "forward and backward") ? 3 : 1;
    if (ddp_cuda()->emulated && cudnn_mode != (bwd ? 3 : 1))
        fail_msg("the emulated cuDNN %s the backward: %s", bwd ? "refused" : "took", why);
    if (ddp_cuda()->emulated && bwd && !strstr(why, "backward engine 1, no nondeterministic note"))
        fail_msg("the emulated cuDNN lists an engine (1) without the nondeterministic note after one with it: %s", why);
    if (ddp_cuda()->emulated && !bwd && !strstr(why, "the backward on the own kernels (cuDNN refused the backward"))
        fail_msg("the emulator refusing the backward graph: %s", why);
}

/* cuDNN's fused attention against the CPU twin within the bf16 bounds (outputs, dout and the gradients also rounded to
 * bf16), two runs bitwise, a sample alone as in its batch: ragged batches of 1 to 512 rows, heads of 64 and 128 */
void test_cudnn_attention(void **state)
{
    (void)state;
    static const int64_t wide[] = {1, 512, 7, 64, 65, 300, 1, 128};
    if (no_cudnn_build()) return;
    choose_cudnn(0); /* a cuDNN that refuses the backward graph: cuDNN's forward, the own backward */
    attn_case(wide, 8, 64, 2, DDP_PRECISION_BF16, 0.0f, 0);
    gpu->destroy(gpu);
    gpu = NULL;
    OK(ddp_backend_cuda_create(0, &gpu));
    choose_cudnn(1); /* both directions where cuDNN takes the backward graph (the emulator does) */
    /* 12 samples in a class of 16 (four of length 0), heads of 16 as test_gemm_epi's model has them */
    static const int64_t twelve[] = {5, 9, 3, 7, 1, 2, 9, 8, 4, 6, 9, 2};
    attn_case(twelve, 12, 16, 2, DDP_PRECISION_BF16, 0.0f, 0);
    attn_case(wide, 8, 64, 2, DDP_PRECISION_BF16, 0.0f, 0);
    attn_case(wide, 8, 128, 2, DDP_PRECISION_BF16, 0.0f, 0);
    attn_case(small, 4, 64, 1, DDP_PRECISION_BF16, 0.0f, 0);
    /* dropout > 0 reaches the own kernels even on a backend that chose cuDNN */
    cudnn_mode = 0;
    attn_case(small, 4, 64, 1, DDP_PRECISION_BF16, 0.2f, 0);
    gpu->destroy(gpu); /* a fresh backend: the own kernels until the next select */
    gpu = NULL;
    OK(ddp_backend_cuda_create(0, &gpu));
}

/* One forward attention on gpu (zeroed inputs) over samples of len[0..B) rows, d columns, H heads */
static void one_forward(const int64_t *len, int B, int64_t d, int H)
{
    test_pack pk;
    test_pack_lengths(&pk, len, B, 5, 1);
    const int64_t R = pk.R;
    ddp_packing pg = {.B = B, .R = R, .hoff = pk.off, .max_rows = pk.max_rows, .tiles = pk.T};
    pg.off = dev(pk.off, (size_t)(B + 1) * 8), pg.seg = dev(pk.seg, (size_t)R * 8), pg.sid = dev(pk.sid, (size_t)B * 8);
    pg.tile = dev(pk.tile, (size_t)pk.T * 8);
    void *q = dev(NULL, (size_t)R * 3 * d * 4), *o = dev(NULL, (size_t)R * d * 4), *l = dev(NULL, (size_t)R * H * 4);
    const ddp_dropout dr = {.p = 0.0f, .key = 1};
    OK(ddp_backend_set_precision(gpu, DDP_PRECISION_BF16));
    OK(gpu->enc->attention_fwd(gpu, q, 0, o, 0, l, &pg, d, H, &dr));
    void *dv[] = {(void *)pg.off, (void *)pg.seg, (void *)pg.sid, (void *)pg.tile, q, o, l};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    test_pack_free(&pk);
}

/* The plan cache over an "epoch" of 40 batches of 1 to 16 samples of 1 to 300 rows: one plan per shape class
 * (samples up to a power of two, rows up to a multiple of 64) and direction, every other call served from the cache;
 * prints the hit rate and the build time. On the emulator, a class cuDNN refuses runs on the own kernels. */
void test_cudnn_plan_cache(void **state)
{
    (void)state;
    if (no_cudnn_build()) return;
    choose_cudnn(1);
    const int dirs = cudnn_mode == 3 ? 2 : 1; /* the directions cuDNN runs */
    int64_t c0[4], c1[4];
    gpu->attention_counts(gpu, c0);
    uint64_t seed = 99;
    int64_t classes[80][2], nc = 0, calls = 0;
    const int64_t d = 128, H = 2;
    for (int it = 0; it < 40; it++) {
        int64_t B = 1 + (int64_t)((test_frand(&seed) + 1.0f) / 2.0f * 16), len[16], mx = 0;
        if (B > 16) B = 16;
        for (int64_t s = 0; s < B; s++) {
            len[s] = 1 + (int64_t)((test_frand(&seed) + 1.0f) / 2.0f * 300);
            mx = len[s] > mx ? len[s] : mx;
        }
        int64_t Bc = 1, Sc = 64, seen = 0;
        while (Bc < B) Bc *= 2;
        while (Sc < mx) Sc *= 2;
        for (int64_t k = 0; k < nc; k++) seen |= classes[k][0] == Bc && classes[k][1] == Sc;
        if (!seen && !(Bc == 1 && Sc == 64)) classes[nc][0] = Bc, classes[nc][1] = Sc, nc++; /* 1 x 64: the probe's */
        test_pack pk;
        test_pack_lengths(&pk, len, B, 5, 1);
        int64_t R = pk.R;
        ddp_packing pg = {.B = B, .R = R, .hoff = pk.off, .max_rows = pk.max_rows, .tiles = pk.T};
        pg.off = dev(pk.off, (size_t)(B + 1) * 8), pg.seg = dev(pk.seg, (size_t)R * 8),
        pg.sid = dev(pk.sid, (size_t)B * 8), pg.tile = dev(pk.tile, (size_t)pk.T * 8);
        void *q = dev(NULL, (size_t)R * 3 * d * 4), *o = dev(NULL, (size_t)R * d * 4),
             *l = dev(NULL, (size_t)R * H * 4);
        void *dq = dev(NULL, (size_t)R * 3 * d * 4), *D = dev(NULL, (size_t)R * H * 4);
        const ddp_dropout dr = {.p = 0.0f, .key = 1};
        OK(ddp_backend_set_precision(gpu, DDP_PRECISION_BF16));
        OK(gpu->enc->attention_fwd(gpu, q, 0, o, 0, l, &pg, d, (int)H, &dr));
        OK(gpu->enc->attention_bwd(gpu, q, 0, o, 0, o, 0, l, dq, 0, D, &pg, d, (int)H, &dr));
        calls += dirs;
        void *dv[] = {(void *)pg.off, (void *)pg.seg, (void *)pg.sid, (void *)pg.tile, q, o, l, dq, D};
        for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
        test_pack_free(&pk);
    }
    OK(gpu->synchronize(gpu));
    gpu->attention_counts(gpu, c1);
    int64_t built = c1[0] - c0[0], hits = c1[1] - c0[1];
    printf("cuDNN plan cache over 40 batches: %lld classes, %lld plans built (%.1f ms each), %lld of %lld calls from "
           "the cache (%.0f%%)\n",
           (long long)nc, (long long)built, built ? (double)(c1[3] - c0[3]) / 1000.0 / (double)built : 0.0,
           (long long)hits, (long long)calls, 100.0 * (double)hits / (double)calls);
    if (built != dirs * nc || hits != calls - built || c1[2] != c0[2])
        fail_msg("plan cache: %lld built for %lld classes x %d directions, %lld hits of %lld calls, %lld refused",
                 (long long)built, (long long)nc, dirs, (long long)hits, (long long)calls, (long long)(c1[2] - c0[2]));
    if (ddp_cuda()->emulated) { /* more classes than the cache keeps (64): the least recently used plan goes */
        int64_t e0[4], e1[4], e2[4];
        const int64_t len2[1] = {2};
        for (int pass = 0; pass < 2; pass++) {
            gpu->attention_counts(gpu, e0);
            for (int H = 1; H <= 9; H++)
                for (int64_t dh = 8; dh <= 64; dh += 8) one_forward(len2, 1, dh * H, H);
            gpu->attention_counts(gpu, e1);
            one_forward(len2, 1, 8, 1);      /* the loop's first class: evicted, built again */
            one_forward(len2, 1, 64 * 9, 9); /* its last: still there */
            gpu->attention_counts(gpu, e2);
            /* 72 classes in order through 64 slots: each misses (LRU) but one found cached, in pass 0 the probe's (2
             * heads of 64), in pass 1 the first, which the end of pass 0 rebuilt */
            if (e1[0] - e0[0] != 71 || e2[0] - e1[0] != 1 || e2[1] - e1[1] != 1)
                fail_msg("plan eviction, pass %d: %lld of 72 classes built, then %lld built and %lld hits (want 1, 1)",
                         pass, (long long)(e1[0] - e0[0]), (long long)(e2[0] - e1[0]), (long long)(e2[1] - e1[1]));
        }
    }
    if (ddp_cuda()->emulated) { /* a class cuDNN refuses: the own kernels take its calls, counted once */
        setenv("MPIDDP_EMU_CUDNN_REFUSE", "1", 1);
        cudnn_mode = 0;
        attn_case(small, 4, 64, 1, DDP_PRECISION_BF16, 0.0f, 0); /* one head: classes not seen so far */
        unsetenv("MPIDDP_EMU_CUDNN_REFUSE");
        int64_t c2[4];
        gpu->attention_counts(gpu, c2);
        if (c2[2] - c1[2] != 4) /* the batch's and its sample alone's, forward and backward */
            fail_msg("refused classes: %lld, want 4", (long long)(c2[2] - c1[2]));
    }
    cudnn_mode = 0;
    gpu->destroy(gpu);
    gpu = NULL;
    OK(ddp_backend_cuda_create(0, &gpu));
}
