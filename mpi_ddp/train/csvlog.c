/* csvlog.c — metrics CSV files: header `epoch,step,` + one column per metric (+ `rank`), blank cells
 * where a metric is absent from a row. A metric first seen after the header was written widens the
 * header: the file is rewritten from the rows kept in memory (tmp + rename), as Lightning's CSVLogger does. */
#include "mpi_ddp/train/metrics.h"
#include "mpi_ddp/core/status.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int64_t epoch, step;
    ddp_metric_row vals;
} csv_row;

struct ddp_csv {
    char path[4096];
    int rank;
    ddp_metric_row cols; /* column names in order (vals unused) */
    int written_cols;    /* columns in the header on disk */
    csv_row *rows;
    int64_t nrows, cap;
    FILE *f;
};

const char *ddp_fmt_value(char *buf, size_t n, double v, int digits)
{
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (isinf(v))
        snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, "%.*g", digits, v);
    return buf;
}

static void put_value(FILE *f, double v)
{
    char b[40];
    fputs(ddp_fmt_value(b, sizeof b, v, 9), f);
}

static void put_row(ddp_csv *c, FILE *f, const csv_row *r)
{
    fprintf(f, "%lld,%lld", (long long)r->epoch, (long long)r->step);
    for (int k = 0; k < c->cols.n; k++) {
        fputc(',', f);
        for (int i = 0; i < r->vals.n; i++)
            if (strcmp(r->vals.names[i], c->cols.names[k]) == 0) put_value(f, r->vals.vals[i]);
    }
    if (c->rank >= 0) fprintf(f, ",%d", c->rank);
    fputc('\n', f);
}

static void put_header(ddp_csv *c, FILE *f)
{
    fputs("epoch,step", f);
    for (int k = 0; k < c->cols.n; k++) fprintf(f, ",%s", c->cols.names[k]);
    if (c->rank >= 0) fputs(",rank", f);
    fputc('\n', f);
}

static ddp_status add_row(ddp_csv *c, int64_t epoch, int64_t step, const ddp_metric_row *row)
{
    if (c->nrows == c->cap) {
        int64_t nc = c->cap ? c->cap * 2 : 64;
        csv_row *nr = ddp_realloc(c->rows, (size_t)nc * sizeof *nr, 1);
        if (!nr) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
        c->rows = nr;
        c->cap = nc;
    }
    csv_row *r = &c->rows[c->nrows++];
    memset(r, 0, sizeof *r);
    r->epoch = epoch;
    r->step = step;
    for (int i = 0; i < row->n; i++) {
        DDP_CHECK(ddp_row_set(&r->vals, row->names[i], row->vals[i]));
        DDP_CHECK(ddp_csv_add_column(c, row->names[i]));
    }
    return DDP_OK;
}

/* A whole row of an existing file: ended by a newline (a write cut short by a full disk or a kill is not),
 * with as many cells as the header and integer epoch and step. */
static int whole_row(char *line, int ncols, int64_t *epoch, int64_t *step)
{
    size_t n = strlen(line);
    if (n == 0 || line[n - 1] != '\n') return 0;
    line[strcspn(line, "\r\n")] = 0;
    int cells = 1;
    for (const char *p = line; *p; p++) cells += *p == ',';
    if (cells != ncols) return 0;
    char *end;
    errno = 0;
    *epoch = strtoll(line, &end, 10);
    if (end == line || *end != ',' || errno) return 0;
    const char *s = end + 1;
    *step = strtoll(s, &end, 10);
    return end != s && (*end == ',' || !*end) && !errno && *epoch >= 0 && *step >= 0;
}

/* Reads an existing metrics file back (resume), keeping the whole rows up to keep_step (a partial or
 * malformed row is dropped, never parsed). Lines of any length: a row of many metrics is not cut in two. */
static ddp_status load_existing(ddp_csv *c, int64_t keep_step, int drop_val)
{
    FILE *f = fopen(c->path, "r");
    if (!f) return DDP_OK;
    ddp_status st = DDP_OK;
    char *line = NULL;
    size_t cap = 0;
    ddp_metric_row hdr = {0}, row = {0};
    errno = 0;
    ssize_t got = getline(&line, &cap, f);
    if (got > 0) {
        int whole = line[got - 1] == '\n', ntok = 0;
        line[strcspn(line, "\r\n")] = 0;
        for (char *save = NULL, *tok = strtok_r(line, ",", &save); tok; tok = strtok_r(NULL, ",", &save), ntok++)
            if (st == DDP_OK) st = ddp_row_set(&hdr, tok, 0);
        int ours = ntok == hdr.n && hdr.n >= 2 && !strcmp(hdr.names[0], "epoch") && !strcmp(hdr.names[1], "step");
        if (st == DDP_OK && whole && !ours) /* not a header this file's writer wrote: its rows cannot be told apart,
                                               and the rewrite would drop every one of them */
            st = ddp_set_error(DDP_ERR_FORMAT,
                               "%s: its first line is not a metrics header (epoch,step,NAME...; each name once), so "
                               "the resume cannot keep its rows: restore that line, or move the file away",
                               c->path);
        if (!whole) ddp_row_clear(&hdr); /* a first write cut short: no row to keep, no column to take */
        /* the file's columns stay, in its order, even one blank in every row (a rank with no validation sample) */
        for (int k = 2; k < hdr.n && st == DDP_OK; k++)
            if (strcmp(hdr.names[k], "rank") != 0) st = ddp_csv_add_column(c, hdr.names[k]);
    }
    for (int64_t lineno = 2; st == DDP_OK && hdr.n >= 2 && (errno = 0, getline(&line, &cap, f) > 0); lineno++) {
        ddp_row_clear(&row);
        int64_t epoch = 0, step = 0;
        if (!whole_row(line, hdr.n, &epoch, &step)) continue;
        char *p = line, bad[96] = "";
        int val = 0, badk = -1;
        for (int k = 0; k < hdr.n && p; k++) {
            char *comma = strchr(p, ',');
            if (comma) *comma = 0;
            val |= k >= 2 && *p && !strncmp(hdr.names[k], "val/", 4);
            if (k >= 2 && *p && strcmp(hdr.names[k], "rank") != 0 && st == DDP_OK) {
                char *end;
                double v = strtod(p, &end);
                if (*end && badk < 0) badk = k, snprintf(bad, sizeof bad, "%.80s", p);
                st = ddp_row_set(&row, hdr.names[k], v);
            }
            p = comma ? comma + 1 : NULL;
        }
        int keep = step < keep_step || (step == keep_step && !(drop_val && val));
        if (keep && badk >= 0 &&
            st == DDP_OK) /* a cell of the user's (text): written back as a number it would change */
            st = ddp_set_error(DDP_ERR_FORMAT,
                               "%s: line %lld, column '%s': '%s' is not a number, so the resume cannot keep that row "
                               "as it is: remove the cell, or move the file away",
                               c->path, (long long)lineno, hdr.names[badk], bad);
        if (keep && st == DDP_OK) st = add_row(c, epoch, step, &row);
    }
    /* a failed read must not pass for the end of the file: the rewrite would drop the rows not read */
    if (st == DDP_OK && (ferror(f) || errno == ENOMEM))
        st = ddp_set_error(errno == ENOMEM ? DDP_ERR_NOMEM : DDP_ERR_IO, "%s: cannot read it back for the resume: %s",
                           c->path, strerror(errno ? errno : EIO));
    free(line);
    ddp_metric_row_free(&hdr);
    ddp_metric_row_free(&row);
    fclose(f);
    return st;
}

/* Writes the header and every row kept to path.tmp, renames it over path and reopens path for appending.
 * On failure the old file is untouched and path.tmp removed. */
static ddp_status rewrite(ddp_csv *c)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", c->path);
    FILE *f = fopen(tmp, "w");
    if (!f) return ddp_set_error(DDP_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    put_header(c, f);
    for (int64_t i = 0; i < c->nrows; i++) put_row(c, f, &c->rows[i]);
    int bad = fflush(f) != 0 || ferror(f), e = errno;
    if (fclose(f) != 0 && !bad) bad = 1, e = errno;
    if (!bad && rename(tmp, c->path) != 0) bad = 1, e = errno;
    if (bad) {
        unlink(tmp);
        return ddp_set_error(DDP_ERR_IO, "%s: write failed: %s", c->path, strerror(e));
    }
    if (c->f) fclose(c->f);
    c->f = fopen(c->path, "a");
    if (!c->f) return ddp_set_error(DDP_ERR_IO, "%s: cannot reopen: %s", c->path, strerror(errno));
    c->written_cols = c->cols.n;
    return DDP_OK;
}

ddp_status ddp_csv_open(const char *path, int rank, const char *const *first, int nfirst, int64_t keep_upto_step,
                        int drop_val_at_keep, ddp_csv **out)
{
    ddp_csv *c = ddp_calloc(1, sizeof *c);
    if (!c) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    snprintf(c->path, sizeof c->path, "%s", path);
    c->rank = rank;
    ddp_status st = DDP_OK;
    for (int i = 0; i < nfirst && st == DDP_OK; i++) st = ddp_row_set(&c->cols, first[i], 0);
    if (st == DDP_OK && keep_upto_step >= 0) st = load_existing(c, keep_upto_step, drop_val_at_keep);
    if (st != DDP_OK) {
        ddp_csv_close(c);
        return st;
    }
    st = rewrite(c); /* a resume rewrites the kept rows through a temporary file: a full disk loses none */
    if (st != DDP_OK) {
        ddp_csv_close(c);
        return st;
    }
    *out = c;
    return DDP_OK;
}

ddp_status ddp_csv_add_column(ddp_csv *c, const char *name)
{
    return ddp_row_find(&c->cols, name) >= 0 ? DDP_OK : ddp_row_set(&c->cols, name, 0);
}

ddp_status ddp_csv_write(ddp_csv *c, int64_t epoch, int64_t step, const ddp_metric_row *row)
{
    DDP_CHECK(add_row(c, epoch, step, row));
    csv_row *r = &c->rows[c->nrows - 1];
    if (c->cols.n != c->written_cols) return rewrite(c); /* widen: rewrite everything */
    put_row(c, c->f, r);
    if (fflush(c->f) != 0 || ferror(c->f))
        return ddp_set_error(DDP_ERR_IO, "%s: write failed: %s", c->path, strerror(errno));
    return DDP_OK;
}

void ddp_csv_close(ddp_csv *c)
{
    if (!c) return;
    if (c->f) fclose(c->f);
    for (int64_t i = 0; i < c->nrows; i++) ddp_metric_row_free(&c->rows[i].vals);
    free(c->rows);
    ddp_metric_row_free(&c->cols);
    free(c);
}
