/* test_sampler.c — the counter-based sampler: the Feistel permutation is a bijection; the global order
 * is independent of world size (the union over ranks, position by position, is the 1-rank order);
 * padding duplicates are flagged; shard mode gives equal step counts over uneven shards and each rank
 * reads only its own shards; epochs and seeds change the order; the block shuffle's windows and read-ahead
 * runs; the token-budget plan and split; a batch or budget past the set sizes buffers for the set, not the request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "io/sampler.h"

#include <stdlib.h>
#include <string.h>

static void test_permute_bijection(void **state)
{
    (void)state;
    const int64_t ns[] = {1, 2, 3, 7, 64, 1000, 1001, 4097};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int64_t n = ns[k];
        char *seen = calloc((size_t)n, 1);
        for (int64_t i = 0; i < n; i++) {
            int64_t p = ddp_permute(i, n, 12345 + (uint64_t)k);
            assert_true(p >= 0 && p < n);
            assert_int_equal(seen[p], 0);
            seen[p] = 1;
        }
        free(seen);
    }
}

static void test_global_union_equals_one_rank(void **state)
{
    (void)state;
    const int64_t N = 1001, B = 8;
    ddp_sampler one;
    assert_int_equal(ddp_sampler_init(&one, DDP_SAMPLE_GLOBAL, N, 1, 0, 7, 0, B, NULL, 0, 0), DDP_OK);
    ddp_sampler_set_epoch(&one, 3);
    for (int W = 2; W <= 4; W++) {
        int64_t padded = (N + W - 1) / W * W;
        int64_t pads = 0, steps = -1;
        char *seen = calloc((size_t)N, 1);
        for (int r = 0; r < W; r++) {
            ddp_sampler s;
            assert_int_equal(ddp_sampler_init(&s, DDP_SAMPLE_GLOBAL, N, W, r, 7, 0, B, NULL, 0, 0), DDP_OK);
            ddp_sampler_set_epoch(&s, 3);
            if (steps < 0) steps = s.steps;
            assert_int_equal(s.steps, steps); /* every rank the same number of steps */
            for (int64_t j = 0; j < s.per_rank; j++) {
                uint8_t pad, pad1;
                int64_t idx = ddp_sampler_at(&s, j, &pad);
                int64_t p = j * W + r;
                int64_t ref = ddp_sampler_at(&one, p % N, &pad1);
                assert_int_equal(idx, ref); /* world-size independent order */
                assert_int_equal(pad, p >= N);
                if (pad)
                    pads++;
                else
                    seen[idx]++;
            }
        }
        assert_int_equal(pads, padded - N);
        for (int64_t i = 0; i < N; i++) assert_int_equal(seen[i], 1);
        free(seen);
    }
}

static void test_drop_last_and_batches(void **state)
{
    (void)state;
    ddp_sampler s;
    assert_int_equal(ddp_sampler_init(&s, DDP_SAMPLE_GLOBAL, 10, 4, 1, 1, 1, 3, NULL, 0, 0), DDP_OK);
    assert_int_equal(s.per_rank, 2);
    assert_int_equal(s.steps, 1);
    ddp_sampler_set_epoch(&s, 0);
    int64_t idx[3], cnt;
    uint8_t pad[3];
    assert_int_equal(ddp_sampler_batch(&s, 0, idx, pad, &cnt), DDP_OK);
    assert_int_equal(cnt, 2);
    assert_int_equal(pad[0] + pad[1], 0);
    assert_int_not_equal(ddp_sampler_batch(&s, 1, idx, pad, &cnt), DDP_OK);
    /* too few samples for the ranks with --drop-last */
    assert_int_not_equal(ddp_sampler_init(&s, DDP_SAMPLE_GLOBAL, 3, 4, 0, 1, 1, 3, NULL, 0, 0), DDP_OK);
}

static void test_epoch_and_seed_change_order(void **state)
{
    (void)state;
    ddp_sampler a, b;
    ddp_sampler_init(&a, DDP_SAMPLE_GLOBAL, 500, 1, 0, 1, 0, 10, NULL, 0, 0);
    ddp_sampler_init(&b, DDP_SAMPLE_GLOBAL, 500, 1, 0, 2, 0, 10, NULL, 0, 0);
    int diff_epoch = 0, diff_seed = 0;
    uint8_t p;
    for (int64_t j = 0; j < 500; j++) {
        ddp_sampler_set_epoch(&a, 0);
        int64_t x0 = ddp_sampler_at(&a, j, &p);
        ddp_sampler_set_epoch(&a, 1);
        diff_epoch += x0 != ddp_sampler_at(&a, j, &p);
        ddp_sampler_set_epoch(&b, 0);
        diff_seed += x0 != ddp_sampler_at(&b, j, &p);
    }
    assert_true(diff_epoch > 400);
    assert_true(diff_seed > 400);
}

static void test_shard_mode_equal_steps(void **state)
{
    (void)state;
    const int64_t sizes[7] = {100, 7, 50, 3, 60, 10, 25};
    int64_t first[8] = {0};
    for (int i = 0; i < 7; i++) first[i + 1] = first[i] + sizes[i];
    const int W = 4;
    char *seen = calloc(255, 1);
    int64_t steps = -1, per = -1;
    for (int r = 0; r < W; r++) {
        ddp_sampler s;
        assert_int_equal(ddp_sampler_init(&s, DDP_SAMPLE_SHARD, 255, W, r, 3, 0, 16, sizes, 7, 0), DDP_OK);
        ddp_sampler_set_epoch(&s, 0);
        if (steps < 0) steps = s.steps, per = s.per_rank;
        assert_int_equal(s.steps, steps);
        assert_int_equal(s.per_rank, per);
        int owned_shards[7] = {0};
        for (int64_t j = 0; j < s.per_rank; j++) {
            uint8_t pad;
            int64_t idx = ddp_sampler_at(&s, j, &pad);
            int sh = 0;
            while (idx >= first[sh + 1]) sh++;
            owned_shards[sh] = 1;
            if (!pad) seen[idx]++;
        }
        int count = 0;
        for (int i = 0; i < 7; i++) count += owned_shards[i] * (int)sizes[i];
        assert_int_equal(count, s.my_count); /* reads exactly its own shards */
        ddp_sampler_free(&s);
    }
    assert_int_equal(per, 100); /* the largest shard alone sets the padded length */
    for (int i = 0; i < 255; i++) assert_int_equal(seen[i], 1);
    free(seen);
    /* more ranks than shards: a clear error, not a freeze */
    ddp_sampler s;
    assert_int_not_equal(ddp_sampler_init(&s, DDP_SAMPLE_SHARD, 10, 4, 0, 3, 0, 2, sizes, 2, 0), DDP_OK);
}

/* --shuffle block: each epoch's order is a permutation; blocks are runs of consecutive samples within a
 * shard of about the block size; every window of the order covers exactly the samples of at most `window`
 * blocks (so it is read as that many sequential runs of the files); the order does not depend on the world
 * size; epochs differ; the read-ahead runs are the next window's blocks. */
static void test_block_shuffle(void **state)
{
    (void)state;
    enum { N = 997, D = 4, NSH = 3, WIN = 3 };
    int32_t lens[N];
    for (int i = 0; i < N; i++) lens[i] = 1 + (int32_t)((i * 7919) % 13);
    const int64_t first[NSH + 1] = {0, 300, 640, N};
    int64_t *prev = calloc(N, sizeof *prev);
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        ddp_sampler s;
        assert_int_equal(ddp_sampler_init(&s, DDP_SAMPLE_GLOBAL, N, 1, 0, 42, 0, 5, NULL, 0, 0), DDP_OK);
        assert_int_equal(ddp_sampler_set_blocks(&s, lens, D, first, NSH, 512.0, WIN), DDP_OK);
        assert_int_equal(ddp_sampler_set_epoch(&s, epoch), DDP_OK);
        /* blocks: consecutive, inside one shard, about 512 bytes (the last of a shard may be shorter) */
        for (int64_t b = 0; b < s.nblocks; b++) {
            int64_t lo = s.blk_first[b], hi = s.blk_first[b + 1], k = 0;
            while (first[k + 1] <= lo) k++;
            assert_true(hi <= first[k + 1] && hi > lo);
            double bytes = 0;
            for (int64_t i = lo; i < hi; i++) bytes += lens[i] * D * 4.0;
            assert_true(bytes - lens[hi - 1] * D * 4.0 < 512.0); /* it closed at the first sample reaching 512 */
        }
        char seen[N];
        memset(seen, 0, sizeof seen);
        int64_t *order = calloc(N, sizeof *order), same = 0;
        for (int64_t p = 0; p < N; p++) {
            order[p] = ddp_sampler_order(&s, p);
            assert_true(order[p] >= 0 && order[p] < N && !seen[order[p]]);
            seen[order[p]] = 1;
            same += epoch > 0 && order[p] == prev[p];
        }
        assert_true(same < N / 10); /* another epoch, another order */
        /* windows: the positions of window w are exactly the samples of its <= WIN blocks */
        int64_t runs[2 * WIN], nwin = 0;
        for (int64_t p = 0; p < N;) {
            int64_t k = ddp_sampler_window_runs(&s, p, 0, runs, WIN), m = 0;
            assert_true(k >= 1 && k <= WIN);
            for (int64_t i = 0; i < k; i++) m += runs[2 * i + 1] - runs[2 * i];
            for (int64_t q = p; q < p + m; q++) {
                int inside = 0;
                for (int64_t i = 0; i < k; i++) inside |= order[q] >= runs[2 * i] && order[q] < runs[2 * i + 1];
                assert_true(inside);
            }
            if (p + m < N) { /* the read-ahead of window w is window w + 1 */
                int64_t next[2 * WIN], k2 = ddp_sampler_window_runs(&s, p, 1, next, WIN),
                                       k3 = ddp_sampler_window_runs(&s, p + m, 0, runs, WIN);
                assert_int_equal(k2, k3);
                assert_memory_equal(next, runs, (size_t)(2 * k2) * sizeof *runs);
            }
            p += m;
            nwin++;
        }
        assert_true(nwin > 10);
        /* world-size independence: rank r of W takes positions r, r + W, ... of the same order */
        for (int W = 2; W <= 4; W++)
            for (int r = 0; r < W; r++) {
                ddp_sampler t;
                assert_int_equal(ddp_sampler_init(&t, DDP_SAMPLE_GLOBAL, N, W, r, 42, 0, 5, NULL, 0, 0), DDP_OK);
                assert_int_equal(ddp_sampler_set_blocks(&t, lens, D, first, NSH, 512.0, WIN), DDP_OK);
                assert_int_equal(ddp_sampler_set_epoch(&t, epoch), DDP_OK);
                for (int64_t j = 0; j * W + r < N; j++) {
                    uint8_t pad;
                    assert_int_equal(ddp_sampler_at(&t, j, &pad), order[j * W + r]);
                }
                ddp_sampler_free(&t);
            }
        memcpy(prev, order, N * sizeof *order);
        free(order);
        ddp_sampler_free(&s);
    }
    free(prev);
    ddp_sampler s;
    assert_int_equal(ddp_sampler_init(&s, DDP_SAMPLE_SHARD, N, 2, 0, 1, 0, 5, (const int64_t[]){300, 340, 357}, 3, 0),
                     DDP_OK);
    assert_int_equal(ddp_sampler_set_blocks(&s, lens, D, first, NSH, 512.0, WIN), DDP_ERR_ARG);
    ddp_sampler_free(&s);
}

/* token budgets: steps fit the global budget (at least one sample), the epoch's samples once each, the split
 * over W x acc bins is a partition of the step, and the per-bin cost stays within one sample of the mean */
static void test_budget_plan(void **state)
{
    (void)state;
    enum { N = 1000 };
    int32_t lens[N];
    int64_t maxl = 0;
    for (int i = 0; i < N; i++) lens[i] = 1 + (int32_t)((i * 104729) % 64), maxl = lens[i] > maxl ? lens[i] : maxl;
    for (int W = 1; W <= 4; W *= 2)
        for (int acc = 1; acc <= 2; acc++) {
            int64_t count[N] = {0}, idx[4096];
            uint8_t pad[4096];
            ddp_sampler s[4];
            for (int r = 0; r < W; r++) {
                assert_int_equal(ddp_sampler_init(&s[r], DDP_SAMPLE_GLOBAL, N, W, r, 7, 0, 1, NULL, 0, 0), DDP_OK);
                assert_int_equal(ddp_sampler_set_budget(&s[r], 1024 / W / acc, acc, lens, maxl, 0.0), DDP_OK);
                assert_int_equal(ddp_sampler_set_epoch(&s[r], 1), DDP_OK);
                assert_int_equal(s[r].steps, s[0].steps);
            }
            for (int64_t k = 0; k < s[0].steps; k++) {
                int64_t rows = 0;
                for (int r = 0; r < W; r++) {
                    int64_t n;
                    assert_int_equal(ddp_sampler_batch(&s[r], k, idx, pad, &n), DDP_OK);
                    int64_t brows = 0;
                    for (int64_t i = 0; i < n; i++) count[idx[i]]++, brows += lens[idx[i]], assert_int_equal(pad[i], 0);
                    assert_true(brows <= s[r].max_rows);
                    rows += brows;
                }
                (void)rows;
            }
            for (int i = 0; i < N; i++) assert_int_equal(count[i], 1);
            for (int64_t os = 0; os < s[0].nplan; os++) { /* greedy: the next sample would not have fit */
                int64_t rows = 0;
                for (int64_t p = s[0].plan[os]; p < s[0].plan[os + 1]; p++) rows += lens[ddp_sampler_order(&s[0], p)];
                assert_true(rows <= 1024 || s[0].plan[os + 1] - s[0].plan[os] == 1);
                if (os + 1 < s[0].nplan) assert_true(rows + lens[ddp_sampler_order(&s[0], s[0].plan[os + 1])] > 1024);
            }
            for (int r = 0; r < W; r++) ddp_sampler_free(&s[r]);
        }
    ddp_sampler s;
    assert_int_equal(ddp_sampler_init(&s, DDP_SAMPLE_GLOBAL, N, 2, 0, 7, 0, 1, NULL, 0, 0), DDP_OK);
    assert_int_equal(ddp_sampler_set_budget(&s, maxl - 1, 1, lens, maxl, 0.0), DDP_ERR_ARG);
    ddp_sampler_free(&s);
}

/* token budgets with the transformer's cost (rows + rows^2 / (2d + f)) on an adversarial mix: one-row samples
 * with a 128-row sample every 200. Balancing by cost alone packs a bin of short samples far past the rows a
 * rank's buffers hold (rows_per_rank + longest sample); every bin must stay within them, in rows and samples,
 * and the bins must still partition each step. */
static void test_budget_capacity(void **state)
{
    (void)state;
    enum { N = 3000, LONG = 128 };
    static int32_t lens[N];
    for (int i = 0; i < N; i++) lens[i] = i % 200 == 100 ? LONG : 1;
    static int64_t idx[4096];
    static uint8_t pad[4096];
    for (int W = 1; W <= 4; W *= 2)
        for (int acc = 1; acc <= 2; acc++) {
            static int64_t count[N];
            memset(count, 0, sizeof count);
            ddp_sampler s[4];
            for (int r = 0; r < W; r++) {
                assert_int_equal(ddp_sampler_init(&s[r], DDP_SAMPLE_GLOBAL, N, W, r, 3, 0, 1, NULL, 0, 0), DDP_OK);
                assert_int_equal(ddp_sampler_set_budget(&s[r], 1024 / W / acc, acc, lens, LONG, 1.0 / 32.0), DDP_OK);
                assert_int_equal(ddp_sampler_set_epoch(&s[r], 0), DDP_OK);
                assert_true(s[r].max_rows <= 4096);
            }
            double worst = 0;
            for (int64_t k = 0; k < s[0].steps; k++)
                for (int r = 0; r < W; r++) {
                    int64_t n, brows = 0;
                    assert_int_equal(ddp_sampler_batch(&s[r], k, idx, pad, &n), DDP_OK);
                    assert_true(n <= s[r].max_samples);
                    for (int64_t i = 0; i < n; i++) count[idx[i]]++, brows += lens[idx[i]];
                    if ((double)brows / (double)s[r].max_rows > worst) worst = (double)brows / (double)s[r].max_rows;
                    assert_true(brows <= s[r].max_rows);
                }
            for (int i = 0; i < N; i++) assert_int_equal(count[i], 1);
            print_message("budget capacity W %d acc %d: fullest bin %.2f of its rows\n", W, acc, worst);
            for (int r = 0; r < W; r++) ddp_sampler_free(&s[r]);
        }
}


/* --batch-size 10000000 (or a --batch-rows budget) on a 37-sample set: max_samples / max_rows (the loader's, the
 * model's and evaluation's buffers) are what a rank's batch can hold, and the batches are those of a batch equal to
 * the rank's share */
static void test_batch_past_the_set(void **state)
{
    (void)state;
    enum { N = 37 };
    int32_t lens[N];
    int64_t total = 0;
    for (int i = 0; i < N; i++) total += lens[i] = 4 + i % 5;
    for (int W = 1; W <= 4; W++)
        for (int r = 0; r < W; r++) {
            int64_t share = (N + W - 1) / W;
            ddp_sampler big, exact;
            assert_int_equal(ddp_sampler_init(&big, DDP_SAMPLE_SEQUENTIAL, N, W, r, 0, 0, 10000000, NULL, 0, 0),
                             DDP_OK);
            assert_int_equal(ddp_sampler_init(&exact, DDP_SAMPLE_SEQUENTIAL, N, W, r, 0, 0, share, NULL, 0, 0), DDP_OK);
            assert_int_equal(big.max_samples, share);
            assert_int_equal(big.steps, 1);
            assert_int_equal(exact.steps, 1);
            assert_int_equal(ddp_sampler_set_epoch(&big, 0), DDP_OK);
            assert_int_equal(ddp_sampler_set_epoch(&exact, 0), DDP_OK);
            int64_t ib[N], ie[N], nb = 0, ne = 0;
            uint8_t pb[N], pe[N];
            assert_int_equal(ddp_sampler_batch(&big, 0, ib, pb, &nb), DDP_OK);
            assert_int_equal(ddp_sampler_batch(&exact, 0, ie, pe, &ne), DDP_OK);
            assert_int_equal(nb, ne);
            assert_memory_equal(ib, ie, (size_t)nb * sizeof *ib);
            assert_memory_equal(pb, pe, (size_t)nb);
            ddp_sampler_free(&big), ddp_sampler_free(&exact);
            ddp_sampler gl; /* the training orders too */
            assert_int_equal(ddp_sampler_init(&gl, DDP_SAMPLE_GLOBAL, N, W, r, 7, 0, 10000000, NULL, 0, 0), DDP_OK);
            assert_int_equal(gl.max_samples, share);
            ddp_sampler_free(&gl);
            ddp_sampler bud; /* a budget past the set's rows: buffers for the set's rows and samples */
            assert_int_equal(ddp_sampler_init(&bud, DDP_SAMPLE_SEQUENTIAL, N, W, r, 0, 0, 1, NULL, 0, 0), DDP_OK);
            assert_int_equal(ddp_sampler_set_budget(&bud, 1000000000000LL, 1, lens, 8, 0.0), DDP_OK);
            assert_int_equal(bud.max_rows, total);
            assert_int_equal(bud.max_samples, N);
            ddp_sampler_free(&bud);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_permute_bijection),
        cmocka_unit_test(test_global_union_equals_one_rank),
        cmocka_unit_test(test_drop_last_and_batches),
        cmocka_unit_test(test_epoch_and_seed_change_order),
        cmocka_unit_test(test_shard_mode_equal_steps),
        cmocka_unit_test(test_block_shuffle),
        cmocka_unit_test(test_budget_plan),
        cmocka_unit_test(test_budget_capacity),
        cmocka_unit_test(test_batch_past_the_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
