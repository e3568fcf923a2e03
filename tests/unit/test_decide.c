/* test_decide.c — the checkpoint decision (decide.c) on one rank: the top-k list keeps the best files whatever
 * --early-stop-min-delta is (the worst kept entry is found by plain comparison when a full list makes room, and
 * when a lower --save-top-k trims it, NaN worst), min_delta gates early stopping's improvement only; a rank without
 * a local value (no validation sample: ddp_metrics_sync leaves a count of 0 out of the local row) abstains, and
 * when no rank has one the decision is an error, not a vote of zeros; a resume reads metrics.csv back whole. The vote
 * across ranks at np 2 and 4 runs in tests/sh/exact_validation.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mpi_ddp/train/decide.h"
#include "mpi_ddp/train/metrics.h"
#include "mpiddp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ddp_ctx *g_ctx;

/* one validation's rows: the global and this rank's, both holding val/loss = v (local: none when absent) */
static int decide_on(ddp_decider *d, double v, int absent, int64_t epoch, ddp_decision *out)
{
    ddp_metric_row g = {0}, l = {0};
    assert_int_equal(ddp_row_set(&g, "val/loss", v), DDP_OK);
    if (!absent) assert_int_equal(ddp_row_set(&l, "val/loss", v), DDP_OK);
    assert_int_equal(ddp_row_set(&l, "val/count", absent ? 0 : 5), DDP_OK);
    ddp_status st = ddp_decide(g_ctx, d, &g, &l, epoch, 10 * (epoch + 1), out);
    ddp_metric_row_free(&g);
    ddp_metric_row_free(&l);
    return st;
}

/* decides, and on a save commits the file "e<epoch>" as the trainer does */
static void step(ddp_decider *d, double v, int64_t epoch, ddp_decision *out)
{
    assert_int_equal(decide_on(d, v, 0, epoch, out), DDP_OK);
    if (out->save) {
        char path[32], removed[64];
        snprintf(path, sizeof path, "e%lld", (long long)epoch);
        ddp_decider_commit(d, out, epoch, 10 * (epoch + 1), path, removed, sizeof removed);
    }
}

/* the kept epochs, ascending, as a string ("0 2") */
static const char *kept(const ddp_decider *d)
{
    static char buf[256];
    int64_t e[DDP_TOPK_MAX];
    int n = d->ntopk;
    for (int i = 0; i < n; i++) e[i] = d->topk[i].epoch;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && e[j - 1] > e[j]; j--) {
            int64_t t = e[j];
            e[j] = e[j - 1];
            e[j - 1] = t;
        }
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%lld", i ? " " : "", (long long)e[i]);
    return buf;
}

/* the reviewer's run: val/loss 0.605385, 0.615343, 0.345856 with min_delta 0.05 and top-k 2 kept epochs 1 and 2 (the
 * search for the worst entry stopped at index 0: no kept value beat another by min_delta) */
static void test_full_list_replaces_the_worst(void **state)
{
    (void)state;
    for (int mode_max = 0; mode_max <= 1; mode_max++)
        for (int p = DDP_POLICY_REDUCED; p <= DDP_POLICY_RANK0; p++) {
            ddp_decider d;
            ddp_decider_init(&d, (ddp_policy)p, "val/loss", mode_max, 2, 0, 0.05);
            ddp_decision o;
            double s = mode_max ? -1 : 1; /* the same run, mirrored */
            step(&d, s * 0.605385, 0, &o);
            step(&d, s * 0.615343, 1, &o);
            assert_true(o.save); /* the list was not full */
            step(&d, s * 0.345856, 2, &o);
            assert_true(o.save);
            assert_string_equal(kept(&d), "0 2");
        }
}

/* min_delta belongs to early stopping: a value better than the worst kept by less than min_delta still enters the
 * list (Lightning's ModelCheckpoint has no min_delta), but does not reset the patience (EarlyStopping's) */
static void test_min_delta_gates_early_stopping_only(void **state)
{
    (void)state;
    ddp_decider d;
    ddp_decider_init(&d, DDP_POLICY_REDUCED, "val/loss", 0, 1, 2, 0.05);
    ddp_decision o;
    step(&d, 0.60, 0, &o);
    assert_true(o.save);
    assert_true(fabs(d.best - 0.60) < 1e-12);
    step(&d, 0.58, 1, &o); /* better by 0.02 < min_delta */
    assert_true(o.save);
    assert_false(o.stop);
    assert_string_equal(kept(&d), "1");
    assert_int_equal(d.bad_epochs, 1);
    assert_true(fabs(d.best - 0.60) < 1e-12);
    assert_non_null(strstr(o.note, "policy reduced: save"));
    step(&d, 0.57, 2, &o); /* 0.03 below the best of early stopping: the second epoch without improvement */
    assert_true(o.save && o.stop);
    assert_string_equal(kept(&d), "2");
    /* the votes: each rank's vote to save is its value beating its own best; early stopping's needs min_delta */
    ddp_decider_init(&d, DDP_POLICY_ALL, "val/loss", 0, 2, 2, 0.05);
    step(&d, 0.60, 0, &o);
    step(&d, 0.59, 1, &o);
    assert_true(o.save);
    assert_int_equal(d.bad_epochs, 1);
    step(&d, 0.58, 2, &o); /* the list is full: the worst (0.60) makes room */
    assert_true(o.save && o.stop);
    assert_string_equal(kept(&d), "1 2");
    assert_true(fabs(d.best_local - 0.58) < 1e-12);
    /* gains smaller than min_delta add up for the votes as for reduced: 1.00, 0.97, 0.94 ... at min_delta 0.05
     * improve every second epoch, so patience 3 never stops (every epoch's save moved the one best: it stopped) */
    static const double loss[] = {1.00, 0.97, 0.94, 0.91, 0.88, 0.85};
    for (int p = DDP_POLICY_REDUCED; p <= DDP_POLICY_MAJORITY; p++) {
        ddp_decider_init(&d, (ddp_policy)p, "val/loss", 0, 2, 3, 0.05);
        for (int e = 0; e < 6; e++) {
            step(&d, loss[e], e, &o);
            assert_false(o.stop);
            assert_int_equal(d.bad_epochs, e % 2);
        }
    }
}

/* a lower --save-top-k on resume drops the worst entries, never the best: values within min_delta of each other,
 * the best first; a NaN entry (none is saved, but a checkpoint could hold one) goes first */
static void test_trim_drops_the_worst(void **state)
{
    (void)state;
    for (int mode_max = 0; mode_max <= 1; mode_max++) {
        ddp_decider d;
        ddp_decider_init(&d, DDP_POLICY_REDUCED, "val/loss", mode_max, 1, 0, 0.05);
        double s = mode_max ? -1 : 1, v[] = {0.30, 0.31, NAN, 0.33};
        d.ntopk = 4;
        for (int i = 0; i < 4; i++) {
            d.topk[i].value = s * v[i];
            d.topk[i].epoch = d.topk[i].step = i;
            snprintf(d.topk[i].path, sizeof d.topk[i].path, "e%d", i);
        }
        char removed[64];
        const char *want[] = {"e2", "e3", "e1"};
        for (int k = 0; k < 3; k++) {
            assert_int_equal(ddp_decider_trim(&d, removed, sizeof removed), 1);
            assert_string_equal(removed, want[k]);
        }
        assert_int_equal(ddp_decider_trim(&d, removed, sizeof removed), 0);
        assert_string_equal(d.topk[0].path, "e0");
    }
}

/* a count of 0 (a rank holding padding only) gives no local value, not 0; the global value is the ranks' */
static void test_sync_leaves_out_no_samples(void **state)
{
    (void)state;
    ddp_metrics *m;
    assert_int_equal(ddp_metrics_create(g_ctx, &m), DDP_OK);
    assert_int_equal(ddp_log(m, "val/loss", 0.0, 0.0), DDP_OK);
    assert_int_equal(ddp_log(m, "train/loss", 3.0, 2.0), DDP_OK);
    ddp_metric_row g = {0}, l = {0};
    assert_int_equal(ddp_metrics_sync(m, &g, &l), DDP_OK);
    assert_int_equal(ddp_row_find(&l, "val/loss"), -1);
    assert_true(ddp_row_find(&g, "val/loss") >= 0);
    assert_true(fabs(l.vals[ddp_row_find(&l, "train/loss")] - 1.5) < 1e-12);
    ddp_metric_row_free(&g);
    ddp_metric_row_free(&l);
    ddp_metrics_destroy(m);
}

/* no rank with a value: the votes (and rank0 on rank 0's) have nothing to decide on, an error naming it, and the
 * rank's own best is left as it was; reduced decides on the global value */
static void test_no_value_anywhere(void **state)
{
    (void)state;
    for (int p = DDP_POLICY_RANK0; p <= DDP_POLICY_MAJORITY; p++) {
        ddp_decider d;
        ddp_decider_init(&d, (ddp_policy)p, "val/loss", 0, 1, 0, 0.0);
        ddp_decision o;
        assert_int_equal(decide_on(&d, 0.5, 1, 0, &o), DDP_ERR_ARG);
        assert_non_null(strstr(ddp_last_error(), "val/loss has no value on"));
        assert_non_null(strstr(ddp_last_error(), "validation sample, so policy"));
        assert_true(isnan(d.best_local));
        assert_int_equal(d.ntopk, 0);
    }
    ddp_decider d;
    ddp_decider_init(&d, DDP_POLICY_REDUCED, "val/loss", 0, 1, 0, 0.0);
    ddp_decision o;
    assert_int_equal(decide_on(&d, 0.5, 1, 0, &o), DDP_OK);
    assert_true(o.save);
    /* a monitor in the global row but not in a rank's own, which evaluated samples (a metric logged on rank 0
     * alone), is "never logged on every rank", not a rank without samples */
    ddp_decider_init(&d, DDP_POLICY_ALL, "val/loss", 0, 2, 0, 0);
    ddp_metric_row gg = {0}, ll = {0};
    assert_int_equal(ddp_row_set(&gg, "val/loss", 0.5), DDP_OK);
    assert_int_equal(ddp_row_set(&ll, "val/count", 5), DDP_OK);
    assert_int_equal(ddp_decide(g_ctx, &d, &gg, &ll, 0, 10, &o), DDP_ERR_ARG);
    assert_non_null(
        strstr(ddp_last_error(), "was never logged on every rank (policy all reads each rank's own value)"));
    ddp_metric_row_free(&gg);
    ddp_metric_row_free(&ll);
    /* a monitor missing from the global row is still "never logged" */
    ddp_metric_row g = {0}, l = {0};
    assert_int_equal(ddp_decide(g_ctx, &d, &g, &l, 1, 20, &o), DDP_ERR_ARG);
    assert_non_null(strstr(ddp_last_error(), "was never logged"));
}

/* D3: the value formatter writes nan and inf, never printf's -nan */
static void test_fmt_value(void **state)
{
    (void)state;
    char b[40];
    assert_string_equal(ddp_fmt_value(b, sizeof b, -NAN, 9), "nan");
    assert_string_equal(ddp_fmt_value(b, sizeof b, NAN, 7), "nan");
    assert_string_equal(ddp_fmt_value(b, sizeof b, -INFINITY, 9), "-inf");
    assert_string_equal(ddp_fmt_value(b, sizeof b, 0.123456789012, 6), "0.123457");
}

/* a resume reads metrics.csv back whole, however long its lines: a row of 3000 metrics (over 100 KiB) is kept,
 * not cut at a buffer's end and dropped by the rewrite */
static void test_csv_long_rows(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_decide.XXXXXX", path[64], name[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    static const char *const first[] = {"lr"};
    enum { M = 3000 };
    ddp_metric_row r = {0};
    for (int i = 0; i < M; i++) {
        snprintf(name, sizeof name, "val/a_metric_with_a_long_name_%04d", i);
        assert_int_equal(ddp_row_set(&r, name, i + 0.5), DDP_OK);
    }
    ddp_csv *c = NULL;
    assert_int_equal(ddp_csv_open(path, -1, first, 1, -1, 0, &c), DDP_OK);
    assert_int_equal(ddp_csv_write(c, 0, 1, &r), DDP_OK);
    assert_int_equal(ddp_csv_write(c, 0, 2, &r), DDP_OK);
    ddp_csv_close(c);
    assert_int_equal(ddp_csv_open(path, -1, first, 1, 2, 0, &c), DDP_OK); /* a resume at step 2 keeps both rows */
    ddp_csv_close(c);
    ddp_metric_row_free(&r);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int lines = 0, c1 = 0, ch;
    while ((ch = fgetc(f)) != EOF) {
        lines += ch == '\n';
        c1 += ch == ',' && lines == 2; /* commas of the second row */
    }
    fclose(f);
    assert_int_equal(lines, 3);
    assert_int_equal(c1, M + 2); /* epoch, step, lr (empty) and the M metrics */
    remove(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (ddp_init(&argc, &argv, &g_ctx) != DDP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_list_replaces_the_worst),
        cmocka_unit_test(test_min_delta_gates_early_stopping_only),
        cmocka_unit_test(test_trim_drops_the_worst),
        cmocka_unit_test(test_sync_leaves_out_no_samples),
        cmocka_unit_test(test_no_value_anywhere),
        cmocka_unit_test(test_fmt_value),
        cmocka_unit_test(test_csv_long_rows),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ddp_finalize(g_ctx);
    return rc;
}
