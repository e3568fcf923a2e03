/* test_data.h — the test programs' shared data: the 64-bit LCG every test draws from (its float and array
 * forms) and packed batches (variable-length samples in one batch: offsets, each row's sample, sample ids). */
#ifndef DDP_TEST_DATA_H
#define DDP_TEST_DATA_H

#include "mpiddp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* One step of the LCG (Knuth's MMIX constants): the new state. */
static inline uint64_t test_lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s;
}

/* Uniform in [-1, 1): the top 24 bits of the next state, in float. */
static inline float test_frand(uint64_t *s)
{
    return (float)((test_lcg(s) >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Uniform in [-w/2, w/2): the top 24 bits of the next state, in double, then rounded to float. */
static inline float test_drand(uint64_t *s, double w)
{
    return (float)((double)(test_lcg(s) >> 40) / (double)(1ULL << 24) * w - w / 2);
}

/* n values test_frand * scale + shift from a stream seeded with seed (malloc'd, at least one element). */
static inline float *test_rnd(int64_t n, uint64_t seed, float scale, float shift)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = test_frand(&seed) * scale + shift;
    return x;
}

/* Offsets o[0..b] of b packed samples: sample i has 1 row where i % every == at, else 1 + (test_frand + 1) * spread. */
static inline void test_random_offsets(int64_t *o, int b, uint64_t seed, int every, int at, float spread)
{
    o[0] = 0;
    for (int i = 0; i < b; i++)
        o[i + 1] = o[i] + (i % every == at ? 1 : 1 + (int64_t)((test_frand(&seed) + 1) * spread));
}

/* A packed batch's layout in host memory: sample s in rows [off[s], off[s + 1]), seg[r] the sample of row r, sid[s]
 * its id (dropout keys); max_rows the longest sample; tile[0..T) the attention tiles of TEST_ATT_TILE rows (s | j << 32
 * for the j-th of sample s; ddp_packing.tile, computed here independently). The arrays are malloc'd (at least one
 * element each). */
#define TEST_ATT_TILE 64 /* DDP_ATT_TILE (test_cuda_attn.c asserts it) */
typedef struct {
    int64_t B, R, max_rows, T;
    int64_t *off, *seg, *sid, *tile;
} test_pack;

/* The layout of the B samples at the offsets off[0..B] (copied), ids sid0 + sid_step * s. */
static inline void test_pack_offsets(test_pack *p, const int64_t *off, int64_t B, int64_t sid0, int64_t sid_step)
{
    p->B = B, p->R = off[B], p->max_rows = 0;
    p->off = malloc((size_t)(B + 1) * sizeof(int64_t));
    p->seg = malloc((size_t)(p->R > 0 ? p->R : 1) * sizeof(int64_t));
    p->sid = malloc((size_t)(B > 0 ? B : 1) * sizeof(int64_t));
    p->tile = calloc((size_t)(p->R / TEST_ATT_TILE + B + 1), sizeof(int64_t));
    p->off[0] = off[0], p->T = 0;
    for (int64_t s = 0; s < B; s++) {
        p->off[s + 1] = off[s + 1], p->sid[s] = sid0 + sid_step * s;
        p->max_rows = off[s + 1] - off[s] > p->max_rows ? off[s + 1] - off[s] : p->max_rows;
        for (int64_t r = off[s]; r < off[s + 1]; r++) p->seg[r] = s;
        for (int64_t j = 0; j < (off[s + 1] - off[s] + TEST_ATT_TILE - 1) / TEST_ATT_TILE; j++)
            p->tile[p->T++] = s + j * ((int64_t)1 << 32);
    }
}

/* The layout of B samples of len[0..B) rows, packed in order, ids sid0 + sid_step * s. */
static inline void test_pack_lengths(test_pack *p, const int64_t *len, int64_t B, int64_t sid0, int64_t sid_step)
{
    int64_t *o = malloc((size_t)(B + 1) * sizeof(int64_t));
    o[0] = 0;
    for (int64_t s = 0; s < B; s++) o[s + 1] = o[s] + len[s];
    test_pack_offsets(p, o, B, sid0, sid_step);
    free(o);
}

static inline void test_pack_free(test_pack *p)
{
    free(p->off), free(p->seg), free(p->sid), free(p->tile);
    p->off = p->seg = p->sid = p->tile = NULL;
}

/* A packed batch of host data for ddp_model's steps (ddp_batch b points into the arrays). */
typedef struct {
    int64_t *off, *lab, *ids;
    uint8_t *pad;
    float *x;
    ddp_batch b;
} test_batch;

/* n samples drawn from the stream *s: for each sample one draw gives its rows, 1 + (s >> 33) % max_len, and its
 * label, (s >> 20) % classes; ids id0 + i; then the rows x[rows, dim], test_drand(s, w) each; no padding. */
static inline void test_batch_make(test_batch *t, uint64_t *s, int64_t n, int64_t max_len, int64_t classes, int64_t dim,
                                   double w, int64_t id0, int64_t step)
{
    t->off = malloc((size_t)(n + 1) * sizeof(int64_t));
    t->lab = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    t->ids = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    t->pad = calloc((size_t)(n > 0 ? n : 1), 1);
    t->off[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = test_lcg(s);
        t->off[i + 1] = t->off[i] + 1 + (int64_t)((v >> 33) % (uint64_t)max_len);
        t->lab[i] = (int64_t)((v >> 20) % (uint64_t)classes);
        t->ids[i] = id0 + i;
    }
    int64_t R = t->off[n];
    t->x = malloc((size_t)(R * dim > 0 ? R * dim : 1) * sizeof(float));
    for (int64_t j = 0; j < R * dim; j++) t->x[j] = test_drand(s, w);
    t->b = (ddp_batch){.nsamples = n,
                       .nrows = R,
                       .dim = dim,
                       .offsets = t->off,
                       .labels = t->lab,
                       .sample_ids = t->ids,
                       .is_pad = t->pad,
                       .x = t->x,
                       .step = step};
}

static inline void test_batch_free(test_batch *t)
{
    free(t->off), free(t->lab), free(t->ids), free(t->pad), free(t->x);
    t->off = t->lab = t->ids = NULL, t->pad = NULL, t->x = NULL;
}

#ifdef DDP_MATH_H /* programs that include the backend (ddp_adamw_args) */
/* AdamW's arguments for optimizer step t (from 1) with PyTorch's bias corrections 1 - beta^t. */
static inline ddp_adamw_args test_adamw_step(double lr, double wd, int t, float gscale)
{
    ddp_adamw_args a = {.lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = (float)wd};
    a.bc1 = (float)(1 - pow(0.9, t)), a.bc2_sqrt = (float)sqrt(1 - pow(0.999, t)), a.gscale = gscale;
    return a;
}
#endif

#endif
