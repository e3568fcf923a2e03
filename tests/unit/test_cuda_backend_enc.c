/* test_cuda_backend_enc.c — the Transformer encoder on the CUDA backend against its CPU twin: each ddp_enc_ops op,
 * attention across the tiled kernels' boundaries, whole steps with dropout (test cases of test_cuda_backend). */
#include "cuda_twin.h"

/* The Transformer encoder's ops (ddp_enc_ops), each against the CPU twin on the same packed batch: lengths
 * 1..40 with 1-row samples, d = 24 (heads of 6), dropout 0.1 where the op has one. */
void test_enc_ops(void **state)
{
    (void)state;
    enum { B = 12, d = 24, H = 4, F = 40 };
    int64_t o[B + 1];
    test_random_offsets(o, B, 5, 5, 2, 20);
    test_pack pk;
    test_pack_offsets(&pk, o, B, 100, 3);
    const int64_t R = pk.R, mx = pk.max_rows;
    ddp_packing pc = {.B = B, .R = R, .off = pk.off, .seg = pk.seg, .sid = pk.sid, .hoff = pk.off, .max_rows = mx};
    ddp_packing pg = pc;
    pg.off = dev(pk.off, sizeof o), pg.seg = dev(pk.seg, (size_t)R * 8), pg.sid = dev(pk.sid, (size_t)B * 8);
    pg.tile = dev(pk.tile, (size_t)(pk.T + 1) * 8), pg.tiles = pk.T;
    const ddp_enc_ops *C = cpu->enc, *G = gpu->enc;
    OK(ddp_backend_require_enc(gpu));
    ddp_dropout dr = {.p = 0.1f, .key = 4242};
    float *x = test_rnd(R * d, 1, 2, 0), *w = test_rnd(d, 2, 1, 0), *bb = test_rnd(d, 3, 1, 0),
          *qkv = test_rnd(R * 3 * d, 4, 1.5f, 0), *dout = test_rnd(R * d, 5, 1, 0), *z = test_rnd(R * F, 6, 2, 0),
          *bf = test_rnd(F, 7, 1, 0), *pos = test_rnd(mx * d, 8, 1, 0);
    void *xg = dev(x, (size_t)R * d * 4), *wg = dev(w, d * 4), *bg = dev(bb, d * 4),
         *qg = dev(qkv, (size_t)R * 3 * d * 4), *dog = dev(dout, (size_t)R * d * 4), *zg = dev(z, (size_t)R * F * 4),
         *bfg = dev(bf, F * 4), *posg = dev(pos, (size_t)mx * d * 4);
    float *y = calloc((size_t)R * 3 * d, 4), *y2 = calloc((size_t)R * 3 * d, 4), *mu = calloc((size_t)R * H, 4),
          *rs = calloc((size_t)R * H, 4), *acc = calloc((size_t)mx * d, 4), *acc2 = calloc((size_t)d, 4),
          *acc3 = calloc((size_t)F, 4);
    void *yg, *y2g, *mug, *rsg, *accg, *acc2g, *acc3g;
    OK(gpu->alloc(gpu, &yg, (size_t)R * 3 * d * 4));
    OK(gpu->alloc(gpu, &y2g, (size_t)R * 3 * d * 4));
    OK(gpu->alloc(gpu, &mug, (size_t)R * H * 4));
    OK(gpu->alloc(gpu, &rsg, (size_t)R * H * 4));
    OK(gpu->alloc(gpu, &accg, (size_t)mx * d * 4));
    OK(gpu->alloc(gpu, &acc2g, (size_t)d * 4));
    OK(gpu->alloc(gpu, &acc3g, (size_t)F * 4));
    /* embedding: h += bias + pos; backward: dbias, dpos */
    memcpy(y, x, (size_t)R * d * 4);
    OK(gpu->upload(gpu, yg, x, (size_t)R * d * 4));
    OK(C->embed_fwd(cpu, y, bb, pos, &pc, d));
    OK(G->embed_fwd(gpu, yg, bg, posg, &pg, d));
    expect_dev_close("embed_fwd", yg, y, R * d, 1e-6);
    OK(C->embed_bwd(cpu, x, acc2, acc, &pc, d));
    OK(G->embed_bwd(gpu, xg, acc2g, accg, &pg, d));
    expect_dev_close("embed_bwd dbias", acc2g, acc2, d, 1e-5);
    expect_dev_close("embed_bwd dpos", accg, acc, mx * d, 1e-5);
    /* layernorm forward and backward (dx accumulates onto dout's copy) */
    OK(C->layernorm_fwd(cpu, x, w, bb, y, mu, rs, R, d));
    OK(G->layernorm_fwd(gpu, xg, wg, bg, yg, mug, rsg, R, d));
    expect_dev_close("layernorm y", yg, y, R * d, 1e-5);
    expect_dev_close("layernorm rstd", rsg, rs, R, 1e-5);
    memcpy(y2, dout, (size_t)R * d * 4);
    OK(gpu->upload(gpu, y2g, dout, (size_t)R * d * 4));
    memset(acc, 0, (size_t)d * 4);
    OK(gpu->zero(gpu, accg, (size_t)d * 4));
    OK(C->layernorm_bwd(cpu, dout, x, w, mu, rs, y2, acc, acc2, R, d));
    OK(G->layernorm_bwd(gpu, dog, xg, wg, mug, rsg, y2g, accg, acc2g, R, d));
    { /* dx = dout + rstd (w dy - mean(w dy) - xhat mean(w dy xhat)): the GPU sums the two row means as a tree,
       * so each differs by at most 2 (d + 2) u of its sum of magnitudes; 8 u of every term for the rest */
        double *bound = malloc((size_t)(R * d) * sizeof(double));
        for (int64_t r = 0; r < R; r++) {
            double S1 = 0, S2 = 0;
            for (int64_t c = 0; c < d; c++) {
                double wd = fabs((double)w[c] * dout[r * d + c]);
                S1 += wd, S2 += wd * fabs((x[r * d + c] - mu[r]) * (double)rs[r]);
            }
            for (int64_t c = 0; c < d; c++) {
                double xh = fabs((x[r * d + c] - mu[r]) * (double)rs[r]);
                bound[r * d + c] = 0x1p-24 *
                                   (2.0 * (d + 2) * (S1 + xh * S2) / d * rs[r] +
                                    8.0 * (fabs(y2[r * d + c]) + fabs(dout[r * d + c]) +
                                           rs[r] * (fabs((double)w[c] * dout[r * d + c]) + (S1 + xh * S2) / d)));
            }
        }
        expect_dev_bounded("layernorm dx", y2g, y2, bound, R * d);
        free(bound);
    }
    expect_dev_close("layernorm dw", accg, acc, d, 1e-3);
    expect_dev_close("layernorm db", acc2g, acc2, d, 1e-3);
    /* attention, both CPU methods against the kernels, with and without dropout */
    const char *methods[2] = {"fused", "gemm"};
    for (int k = 0; k < 4; k++) {
        ddp_dropout dk = {.p = k < 2 ? 0.0f : 0.1f, .key = 99};
        setenv("MPIDDP_ATTENTION", methods[k % 2], 1);
        char what[96];
        OK(C->attention_fwd(cpu, qkv, 0, y, 0, mu, &pc, d, H, &dk));
        OK(G->attention_fwd(gpu, qg, 0, yg, 0, mug, &pg, d, H, &dk));
        snprintf(what, sizeof what, "attention (cpu %s, p %.1f) output", methods[k % 2], (double)dk.p);
        expect_dev_close(what, yg, y, R * d, 1e-3); /* sums of up to 40 terms, in another order */
        snprintf(what, sizeof what, "attention (cpu %s, p %.1f) lse", methods[k % 2], (double)dk.p);
        expect_dev_close(what, mug, mu, R * H, 1e-5);
        OK(C->attention_bwd(cpu, qkv, 0, y, 0, dout, 0, mu, y2, 0, rs, &pc, d, H, &dk));
        OK(G->attention_bwd(gpu, qg, 0, yg, 0, dog, 0, mug, y2g, 0, rsg, &pg, d, H, &dk));
        snprintf(what, sizeof what, "attention (cpu %s, p %.1f) dqkv", methods[k % 2], (double)dk.p);
        expect_dev_close(what, y2g, y2, R * 3 * d, 1e-3);
    }
    unsetenv("MPIDDP_ATTENTION");
    /* gelu (erf) with dropout, its backward with the bias gradient */
    memset(acc3, 0, (size_t)F * 4);
    OK(gpu->zero(gpu, acc3g, (size_t)F * 4));
    OK(C->gelu_erf_fwd(cpu, z, bf, y, y2, &pc, F, &dr));
    OK(G->gelu_erf_fwd(gpu, zg, bfg, yg, y2g, &pg, F, &dr));
    expect_dev_close("gelu_erf a", yg, y, R * F, 1e-5);
    expect_dev_close("gelu_erf dgelu", y2g, y2, R * F, 1e-5);
    OK(C->gelu_erf_bwd(cpu, z, y2, y, acc3, &pc, F, &dr));
    OK(G->gelu_erf_bwd(gpu, zg, y2g, yg, acc3g, &pg, F, &dr));
    expect_dev_close("gelu_erf dz", yg, y, R * F, 1e-5);
    expect_dev_close("gelu_erf dbias", acc3g, acc3, F, 1e-4);
    /* residual with dropout; its backward */
    OK(C->residual_fwd(cpu, y, x, dout, bb, &pc, d, &dr));
    OK(G->residual_fwd(gpu, yg, xg, dog, bg, &pg, d, &dr));
    expect_dev_close("residual_fwd", yg, y, R * d, 1e-6);
    memset(acc2, 0, (size_t)d * 4);
    OK(gpu->zero(gpu, acc2g, (size_t)d * 4));
    OK(C->residual_bwd(cpu, dout, y, acc2, &pc, d, &dr));
    OK(G->residual_bwd(gpu, dog, yg, acc2g, &pg, d, &dr));
    expect_dev_close("residual_bwd dt", yg, y, R * d, 1e-6);
    expect_dev_close("residual_bwd dbias", acc2g, acc2, d, 1e-4);
    /* mean pooling */
    OK(C->pool_mean_fwd(cpu, x, y, &pc, d));
    OK(G->pool_mean_fwd(gpu, xg, yg, &pg, d));
    expect_dev_close("pool_mean_fwd", yg, y, B * d, 1e-5);
    OK(C->pool_mean_bwd(cpu, dout, y, &pc, d));
    OK(G->pool_mean_bwd(gpu, dog, yg, &pg, d));
    expect_dev_close("pool_mean_bwd", yg, y, R * d, 1e-6);
    void *dv[] = {(void *)pg.off,
                  (void *)pg.seg,
                  (void *)pg.sid,
                  (void *)pg.tile,
                  xg,
                  wg,
                  bg,
                  qg,
                  dog,
                  zg,
                  bfg,
                  posg,
                  yg,
                  y2g,
                  mug,
                  rsg,
                  accg,
                  acc2g,
                  acc3g};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    test_pack_free(&pk);
    free(x), free(w), free(bb), free(qkv), free(dout), free(z), free(bf), free(pos);
    free(y), free(y2), free(mu), free(rs), free(acc), free(acc2), free(acc3);
}

/* One batch of attention (samples of len[0..B) rows, heads of dh, H heads) on both backends: the CPU's fused
 * method and auto (gemm from 8 rows), without and with dropout: output, lse and dqkv within tolerance, the
 * worst relative errors printed. Then the kernels' determinism (a second run gives the same bits) and their
 * independence of the batch (sample `solo` alone gives the same bits as inside the batch). */
static void attn_case(const char *tag, const int64_t *len, int B, int64_t dh, int H, int solo)
{
    test_pack pk;
    test_pack_lengths(&pk, len, B, 7, 5);
    const int64_t d = dh * H, R = pk.R, *o = pk.off, *sid = pk.sid;
    ddp_packing pc = {.B = B, .R = R, .off = o, .seg = pk.seg, .sid = sid, .hoff = o, .max_rows = pk.max_rows}, pg = pc;
    pg.off = dev(o, (size_t)(B + 1) * 8), pg.seg = dev(pk.seg, (size_t)(R ? R : 1) * 8),
    pg.sid = dev(sid, (size_t)B * 8), pg.tile = dev(pk.tile, (size_t)(pk.T + 1) * 8), pg.tiles = pk.T;
    /* + 1: the host data covers the device copies' spare element (the same values otherwise) */
    float *qkv = test_rnd(R * 3 * d + 1, 31 + (uint64_t)dh, 1.5f, 0), *dout = test_rnd(R * d + 1, 32, 1, 0),
          *y = calloc((size_t)R * d + 1, 4), *lse = calloc((size_t)R * H + 1, 4),
          *dq = calloc((size_t)R * 3 * d + 1, 4), *D = calloc((size_t)R * H + 1, 4);
    void *qg = dev(qkv, (size_t)R * 3 * d * 4 + 4), *dog = dev(dout, (size_t)R * d * 4 + 4), *yg, *lg, *dqg, *Dg;
    OK(gpu->alloc(gpu, &yg, (size_t)R * d * 4 + 4));
    OK(gpu->alloc(gpu, &lg, (size_t)R * H * 4 + 4));
    OK(gpu->alloc(gpu, &dqg, (size_t)R * 3 * d * 4 + 4));
    OK(gpu->alloc(gpu, &Dg, (size_t)R * H * 4 + 4));
    const char *methods[2] = {"fused", "auto"};
    ddp_dropout dk = {0};
    for (int k = 0; k < 4; k++) {
        dk = (ddp_dropout){.p = k < 2 ? 0.0f : 0.2f, .key = 77};
        setenv("MPIDDP_ATTENTION", methods[k % 2], 1);
        char what[160];
        OK(cpu->enc->attention_fwd(cpu, qkv, 0, y, 0, lse, &pc, d, H, &dk));
        if (k % 2 == 0) /* the kernels once per dropout setting, against both CPU methods */
            OK(gpu->enc->attention_fwd(gpu, qg, 0, yg, 0, lg, &pg, d, H, &dk));
        snprintf(what, sizeof what, "attention %s dh %lld (cpu %s, p %.1f) output", tag, (long long)dh, methods[k % 2],
                 (double)dk.p);
        double eo = expect_dev_close(what, yg, y, R * d, 2e-3); /* sums of up to 300 terms, in another order */
        snprintf(what, sizeof what, "attention %s dh %lld (cpu %s, p %.1f) lse", tag, (long long)dh, methods[k % 2],
                 (double)dk.p);
        double el = expect_dev_close(what, lg, lse, R * H, 1e-5);
        OK(cpu->enc->attention_bwd(cpu, qkv, 0, y, 0, dout, 0, lse, dq, 0, D, &pc, d, H, &dk));
        if (k % 2 == 0) OK(gpu->enc->attention_bwd(gpu, qg, 0, yg, 0, dog, 0, lg, dqg, 0, Dg, &pg, d, H, &dk));
        snprintf(what, sizeof what, "attention %s dh %lld (cpu %s, p %.1f) dqkv", tag, (long long)dh, methods[k % 2],
                 (double)dk.p);
        double eg = expect_dev_close(what, dqg, dq, R * 3 * d, 5e-3);
        printf("attention %-6s dh %3lld H %d rows %4lld (cpu %-5s p %.1f): worst relative error output %.2g lse %.2g "
               "dqkv %.2g\n",
               tag, (long long)dh, H, (long long)R, methods[k % 2], (double)dk.p, eo, el, eg);
    }
    unsetenv("MPIDDP_ATTENTION");
    /* determinism: the same call again (dropout on), identical bits */
    float *y1 = host_of(yg, R * d), *l1 = host_of(lg, R * H), *g1 = host_of(dqg, R * 3 * d);
    OK(gpu->zero(gpu, dqg, (size_t)R * 3 * d * 4));
    OK(gpu->enc->attention_fwd(gpu, qg, 0, yg, 0, lg, &pg, d, H, &dk));
    OK(gpu->enc->attention_bwd(gpu, qg, 0, yg, 0, dog, 0, lg, dqg, 0, Dg, &pg, d, H, &dk));
    float *y2 = host_of(yg, R * d), *l2 = host_of(lg, R * H), *g2 = host_of(dqg, R * 3 * d);
    if (!(!memcmp(y1, y2, (size_t)R * d * 4) && !memcmp(l1, l2, (size_t)R * H * 4) &&
          !memcmp(g1, g2, (size_t)R * 3 * d * 4)))
        fail_msg("attention %s dh %lld: two runs differ", tag, (long long)dh);
    /* sample `solo` alone (its id kept): the same bits as in the batch */
    int64_t lo = o[solo], n = len[solo];
    test_pack t1;
    test_pack_lengths(&t1, &len[solo], 1, sid[solo], 0);
    ddp_packing p1 = {.B = 1,
                      .R = n,
                      .off = dev(t1.off, 16),
                      .seg = dev(t1.seg, (size_t)n * 8 + 8),
                      .sid = dev(t1.sid, 8),
                      .hoff = t1.off,
                      .max_rows = n,
                      .tile = dev(t1.tile, (size_t)(t1.T + 1) * 8),
                      .tiles = t1.T};
    void *q1 = dev(qkv + lo * 3 * d, (size_t)n * 3 * d * 4), *do1 = dev(dout + lo * d, (size_t)n * d * 4);
    OK(gpu->enc->attention_fwd(gpu, q1, 0, yg, 0, lg, &p1, d, H, &dk));
    OK(gpu->enc->attention_bwd(gpu, q1, 0, yg, 0, do1, 0, lg, dqg, 0, Dg, &p1, d, H, &dk));
    float *y3 = host_of(yg, n * d), *g3 = host_of(dqg, n * 3 * d);
    if (!(!memcmp(y3, y1 + lo * d, (size_t)n * d * 4) && !memcmp(g3, g1 + lo * 3 * d, (size_t)n * 3 * d * 4)))
        fail_msg("attention %s dh %lld: sample %d alone differs from the batch", tag, (long long)dh, solo);
    void *dv[] = {(void *)pg.off,
                  (void *)pg.seg,
                  (void *)pg.sid,
                  (void *)pg.tile,
                  (void *)p1.off,
                  (void *)p1.seg,
                  (void *)p1.sid,
                  (void *)p1.tile,
                  qg,
                  dog,
                  yg,
                  lg,
                  dqg,
                  Dg,
                  q1,
                  do1};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) gpu->release(gpu, dv[i]);
    test_pack_free(&pk), test_pack_free(&t1);
    free(qkv), free(dout), free(y), free(lse), free(dq), free(D);
    free(y1), free(l1), free(g1), free(y2), free(l2), free(g2), free(y3), free(g3);
}

/* The tiled attention kernels (64-row blocks, 32-row shared tiles) across their boundaries: lengths 1, 31..33,
 * 63..65, 131 (2 x 64 + 3) and a long 300, every compiled head width (dh 8, 16 -> 16; 32; 64; 100 -> 128) and
 * one past the widest (160: the reference kernels); a batch of 0-3-row samples, the first one empty. */
void test_attention_tiles(void **state)
{
    (void)state;
    static const int64_t lens[] = {1, 63, 64, 65, 131, 31, 32, 33, 300, 2};
    static const int64_t tiny[] = {0, 1, 2, 0, 1, 3, 1, 0};
    static const struct {
        int64_t dh;
        int H;
    } shapes[] = {{8, 3}, {16, 2}, {32, 2}, {64, 1}, {100, 1}, {160, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        attn_case("tiles", lens, (int)(sizeof lens / sizeof lens[0]), shapes[i].dh, shapes[i].H, 8);
    attn_case("tiny", tiny, (int)(sizeof tiny / sizeof tiny[0]), 16, 4, 5);
    attn_case("tiny", tiny, (int)(sizeof tiny / sizeof tiny[0]), 6, 2, 2);
}

/* Two training steps of the Transformer encoder (dropout 0.1, accumulate 2) on both backends, AdamW in
 * between, then eval: losses, every gradient tensor, parameters and predictions. */
void test_transformer_steps(void **state)
{
    (void)state;
    enum { D = 13, B = 16 };
    int64_t o[B + 1], lab[B], ids[B];
    test_random_offsets(o, B, 2, 7, 3, 20);
    for (int i = 0; i < B; i++) lab[i] = (i * 5) % 3, ids[i] = 500 + i;
    int64_t R = o[B];
    float *x = test_rnd(R * D, 78, 2, 0);
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER, c.dim = D, c.classes = 3, c.hidden = 24, c.heads = 4, c.ff = 40, c.layers = 2;
    c.max_positions = 64, c.dropout = 0.1, c.max_batch_rows = R, c.max_batch_samples = B;
    twin t = {.name = "transformer "};
    OK(ddp_model_create_on(cpu, &c, &t.mc));
    OK(ddp_model_create_on(gpu, &c, &t.mg));
    twin_init(&t);
    uint8_t pad[B] = {0};
    float lc[B], lg[B], prc[B], prg[B];
    int64_t pdc[B], pdg[B];
    ddp_forward_out oc = {.loss = lc, .prob = prc, .pred = pdc}, og = {.loss = lg, .prob = prg, .pred = pdg};
    for (int step = 1; step <= 2; step++) {
        ddp_batch b = {.nsamples = B,
                       .nrows = R,
                       .dim = D,
                       .offsets = o,
                       .labels = lab,
                       .sample_ids = ids,
                       .is_pad = pad,
                       .x = x,
                       .step = step};
        twin_gradients(&t, &b, step, &oc, &og);
        twin_expect_gradients(&t, step);
        twin_adamw(&t, step, B, 1e-3); /* AdamW's first steps amplify the rounding of tiny gradients */
        /* the next step starts both backends from the same state, so its gradients are compared on equal inputs */
        OK(gpu->upload(gpu, t.pg, t.pc, (size_t)t.n * 4));
        OK(gpu->upload(gpu, t.mmg, t.mmc, (size_t)t.n * 4));
        OK(gpu->upload(gpu, t.vvg, t.vvc, (size_t)t.n * 4));
    }
    ddp_batch b = {
        .nsamples = B, .nrows = R, .dim = D, .offsets = o, .labels = lab, .sample_ids = ids, .is_pad = pad, .x = x};
    twin_eval(&t, &b, &oc, &og);
    twin_close(&t);
    free(x);
}

/* Mean pooling on widths that take both of the kernel's paths (float4 and scalar) and several column blocks, over
 * samples of 1 to 70 rows (more than the kernel's 8 row-parallel warps): within the bound of two fp32 sums of the
 * same n terms in different orders (docs/transformer.md), and bitwise equal across two runs (one fixed order). */
void test_pool_mean(void **state)
{
    (void)state;
    enum { B = 9 };
    const int64_t widths[] = {264, 130, 1};
    int64_t o[B + 1];
    test_random_offsets(o, B, 11, 4, 1, 35); /* every fourth sample one row long */
    test_pack pk;
    test_pack_offsets(&pk, o, B, 0, 1);
    ddp_packing pc = {
        .B = B, .R = pk.R, .off = pk.off, .seg = pk.seg, .sid = pk.sid, .hoff = pk.off, .max_rows = pk.max_rows};
    ddp_packing pg = pc;
    pg.off = dev(pk.off, sizeof o);
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
        const int64_t d = widths[k], R = pk.R;
        float *x = test_rnd(R * d, 20 + k, 3, 0.5f), *y = calloc((size_t)(B * d), 4);
        void *xg = dev(x, (size_t)(R * d) * 4), *yg, *y2g;
        OK(gpu->alloc(gpu, &yg, (size_t)(B * d) * 4));
        OK(gpu->alloc(gpu, &y2g, (size_t)(B * d) * 4));
        OK(cpu->enc->pool_mean_fwd(cpu, x, y, &pc, d));
        OK(gpu->enc->pool_mean_fwd(gpu, xg, yg, &pg, d));
        OK(gpu->enc->pool_mean_fwd(gpu, xg, y2g, &pg, d));
        float *a = host_of(yg, B * d), *b2 = host_of(y2g, B * d);
        for (int64_t q = 0; q < B; q++) /* two fp32 sums of n terms: 2 (n + 2) u sum|x| / n apart, + the scaling */
            for (int64_t c = 0; c < d; c++) {
                int64_t n = o[q + 1] - o[q];
                double mag = 0;
                for (int64_t r = o[q]; r < o[q + 1]; r++) mag += fabs(x[r * d + c]);
                double bound = (2.0 * (double)(n + 2) * mag / (double)n + 2.0 * fabs(y[q * d + c])) / 16777216.0;
                if (!(fabs((double)a[q * d + c] - y[q * d + c]) <= bound))
                    fail_msg(
                        "pool_mean_fwd d %lld sample %lld (%lld rows) column %lld: cuda %.9g vs cpu %.9g, bound %.3g",
                        (long long)d, (long long)q, (long long)n, (long long)c, a[q * d + c], y[q * d + c], bound);
            }
        assert_memory_equal(a, b2, (size_t)(B * d) * 4);
        free(a), free(b2), free(x), free(y);
        gpu->release(gpu, xg), gpu->release(gpu, yg), gpu->release(gpu, y2g);
    }
    gpu->release(gpu, (void *)pg.off);
    test_pack_free(&pk);
}
