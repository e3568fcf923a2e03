/* pack.c — `mpiddp pack`: converts an HDF5 file with one 2-D dataset per sample under /samples (rows x D,
 * any names, taken in sorted name order) and a 1-D /labels into a sharded dataset. Shards are contiguous
 * runs of samples balanced by rows (bytes), written round-robin by the ranks. */
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/status.h"
#include "io/shard.h"
#include "io/writer.h"

#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char **names;
    int64_t n, cap;
} name_list;

#if H5_VERSION_GE(1, 12, 0)
typedef H5L_info2_t link_info;
#define LINK_ITERATE H5Literate2
#else
typedef H5L_info_t link_info;
#define LINK_ITERATE H5Literate
#endif

static herr_t collect(hid_t g, const char *name, const link_info *info, void *arg)
{
    (void)g;
    (void)info;
    name_list *l = arg;
    if (l->n == l->cap) {
        int64_t nc = l->cap ? l->cap * 2 : 256;
        char **nv = realloc(l->names, (size_t)nc * sizeof *nv);
        if (!nv) return -1;
        l->names = nv;
        l->cap = nc;
    }
    l->names[l->n] = strdup(name);
    return l->names[l->n++] ? 0 : -1;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Refuses dataset d (obj: "dataset '/samples/x'[3]") when HDF5 would make its values up: a virtual dataset or external
 * storage (the files its data lives in may be missing or short) and storage never (fully) written read as fill values,
 * silently, as the shard validator says (io/shard_validate.c). Before any sample is allocated or written. */
static ddp_status own_storage(const char *input, const char *obj, hid_t d)
{
    hid_t sp = H5Dget_space(d);
    hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (sp >= 0) H5Sclose(sp);
    char detail[96] = "";
    switch (np < 0 ? DDP_H5_STORAGE_UNKNOWN : ddp_h5_storage(d, np, detail, sizeof detail)) {
    case DDP_H5_STORAGE_OK: return DDP_OK;
    case DDP_H5_STORAGE_VIRTUAL:
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: %s: virtual dataset (its data lives in other files, read as the fill value where "
                             "they are missing): not supported, store the values in the input file",
                             input, obj);
    case DDP_H5_STORAGE_EXTERNAL:
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: %s: external storage (its data lives in other files, read as zeros past their "
                             "end): not supported, store the values in the input file",
                             input, obj);
    case DDP_H5_STORAGE_UNWRITTEN:
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: %s: storage not (fully) written (%s): it would read as its fill value; write its "
                             "values",
                             input, obj, detail);
    default: return ddp_set_error(DDP_ERR_HDF5, "%s: %s: storage layout cannot be queried", input, obj);
    }
}

/* The NaN/Inf values a rank wrote (after the conversion to float32: a float64 beyond its range becomes +-inf). */
typedef struct {
    int64_t values, samples, first; /* first: the lowest sample index holding one, else INT64_MAX */
} nonfinite_count;

typedef struct {
    hid_t group;
    const char *input;
    char **names;
    int64_t first;
    int64_t dim;
    nonfinite_count *bad;
} pack_shard;

static ddp_status read_sample(void *arg, int64_t i, float *rows, int64_t nrows)
{
    pack_shard *p = arg;
    const char *nm = p->names[p->first + i];
    hid_t d = H5Dopen2(p->group, nm, H5P_DEFAULT);
    herr_t e = d < 0 ? -1 : H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows);
    if (d >= 0) H5Dclose(d);
    if (e < 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/samples/%s'[%lld]: cannot be read", p->input, nm,
                             (long long)(p->first + i));
    int64_t bad = 0;
    for (int64_t k = 0; k < nrows * p->dim; k++) bad += !isfinite(rows[k]);
    if (bad) {
        p->bad->values += bad, p->bad->samples++;
        if (p->first + i < p->bad->first) p->bad->first = p->first + i;
    }
    return DDP_OK;
}

static ddp_status scan_input(const char *input, hid_t f, hid_t *g, name_list *l, int64_t **rows, int64_t **labels,
                             int64_t *dim, int64_t *classes)
{
    if (H5Lexists(f, "samples", H5P_DEFAULT) <= 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: group '/samples': missing", input);
    *g = H5Gopen2(f, "samples", H5P_DEFAULT);
    if (*g < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: '/samples': not a group", input);
    hsize_t idx = 0;
    if (LINK_ITERATE(*g, H5_INDEX_NAME, H5_ITER_INC, &idx, collect, l) < 0)
        return ddp_set_error(DDP_ERR_HDF5, "%s: group '/samples': cannot be listed", input);
    if (l->n == 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: group '/samples': no samples", input);
    qsort(l->names, (size_t)l->n, sizeof *l->names, cmp_name);
    DDP_ALLOC(*rows, l->n);
    DDP_ALLOC(*labels, l->n);
    *dim = -1;
    for (int64_t i = 0; i < l->n; i++) {
        hid_t d = H5Dopen2(*g, l->names[i], H5P_DEFAULT);
        if (d < 0)
            return ddp_set_error(DDP_ERR_FORMAT, "%s: '/samples/%s'[%lld]: not a dataset", input, l->names[i],
                                 (long long)i);
        hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
        hsize_t dims[2] = {0, 0};
        int r = H5Sget_simple_extent_ndims(sp);
        H5T_class_t c = H5Tget_class(t);
        if (r == 2) H5Sget_simple_extent_dims(sp, dims, NULL);
        H5Tclose(t);
        H5Sclose(sp);
        ddp_status st = DDP_OK;
        if (c != H5T_FLOAT && c != H5T_INTEGER)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/samples/%s'[%lld]: wrong type (expected numbers)", input,
                               l->names[i], (long long)i);
        else if (r != 2)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/samples/%s'[%lld]: wrong rank %d (expected 2: rows x D)",
                               input, l->names[i], (long long)i, r);
        else if (dims[0] < 1)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/samples/%s'[%lld]: empty sample (0 rows)", input,
                               l->names[i], (long long)i);
        else if (dims[1] < 1)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/samples/%s'[%lld]: D=0 (no features per row)", input,
                               l->names[i], (long long)i);
        else if (*dim >= 0 && (int64_t)dims[1] != *dim)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/samples/%s'[%lld]: D=%llu differs from D=%lld", input,
                               l->names[i], (long long)i, (unsigned long long)dims[1], (long long)*dim);
        if (st == DDP_OK) {
            char obj[400];
            snprintf(obj, sizeof obj, "dataset '/samples/%.300s'[%lld]", l->names[i], (long long)i);
            st = own_storage(input, obj, d);
        }
        H5Dclose(d);
        if (st != DDP_OK) return st;
        if (*dim < 0) *dim = (int64_t)dims[1];
        (*rows)[i] = (int64_t)dims[0];
    }
    if (H5Lexists(f, "labels", H5P_DEFAULT) <= 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/labels': missing", input);
    hid_t ld = H5Dopen2(f, "labels", H5P_DEFAULT);
    if (ld < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: '/labels': not a dataset", input);
    hid_t sp = H5Dget_space(ld), t = H5Dget_type(ld);
    hssize_t np = H5Sget_simple_extent_npoints(sp);
    int r = H5Sget_simple_extent_ndims(sp);
    int isint = H5Tget_class(t) == H5T_INTEGER;
    H5Tclose(t);
    H5Sclose(sp);
    herr_t e = -1;
    ddp_status lst = isint && r == 1 && np == l->n ? own_storage(input, "dataset '/labels'", ld) : DDP_OK;
    if (isint && r == 1 && np == l->n && lst == DDP_OK)
        e = H5Dread(ld, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *labels);
    H5Dclose(ld);
    if (lst != DDP_OK) return lst;
    if (!isint) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/labels': wrong type (expected integer)", input);
    if (r != 1)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/labels': wrong rank %d (expected 1: one label per sample)",
                             input, r);
    if (np != l->n)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/labels': %lld values for %lld samples", input,
                             (long long)np, (long long)l->n);
    if (e < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/labels': cannot be read", input);
    int64_t mx = 0;
    for (int64_t i = 0; i < l->n; i++) {
        if ((*labels)[i] < 0)
            return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/labels'[%lld]: negative label %lld", input,
                                 (long long)i, (long long)(*labels)[i]);
        if ((*labels)[i] >= DDP_MAX_CLASSES) /* num_classes is at most 2^24 (mx + 1 must not wrap either) */
            return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/labels'[%lld]: label %lld: at most %lld classes", input,
                                 (long long)i, (long long)(*labels)[i], (long long)DDP_MAX_CLASSES);
        if ((*labels)[i] > mx) mx = (*labels)[i];
    }
    *classes = mx + 1 < 2 ? 2 : mx + 1;
    return DDP_OK;
}

/* Collective, after a pack that succeeded on every rank: the notice when the shards hold NaN or Inf. */
static ddp_status nonfinite_notice(ddp_ctx *ctx, const char *input, char *const *names, nonfinite_count *c,
                                   char *notice, size_t len)
{
    int64_t sum[2] = {c->values, c->samples};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_INT64_T, MPI_SUM, ctx->world));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &c->first, 1, MPI_INT64_T, MPI_MIN, ctx->world));
    if (sum[0])
        snprintf(notice, len,
                 "%lld non-finite feature value(s) (NaN or Inf as float32: a float64 beyond its range becomes Inf) in "
                 "%lld sample(s) of %s, the first dataset '/samples/%.300s'[%lld]",
                 (long long)sum[0], (long long)sum[1], input, names[c->first], (long long)c->first);
    return DDP_OK;
}

ddp_status ddp_pack(ddp_ctx *ctx, const char *input, const char *out, int64_t shards, int64_t want_classes,
                    char *notice, size_t notice_len)
{
    ddp_h5_quiet();
    notice[0] = 0;
    nonfinite_count bad = {0, 0, INT64_MAX};
    ddp_status st = DDP_OK;
    if (shards < 1) st = ddp_set_error(DDP_ERR_ARG, "--shards %lld: must be >= 1", (long long)shards);
    hid_t f = -1, g = -1;
    name_list l = {0};
    int64_t *rows = NULL, *labels = NULL, dim = 0, classes = 0, written = 0;
    if (st == DDP_OK) st = ddp_check_regular_file(input, "--input"); /* HDF5 would wait on a FIFO for ever */
    if (st == DDP_OK && !ddp_h5_is_hdf5(input))
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: missing or not an HDF5 file", input);
    if (st == DDP_OK) {
        f = H5Fopen(input, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (f < 0) st = ddp_set_error(DDP_ERR_FORMAT, "%s: cannot be opened by HDF5", input);
    }
    if (st == DDP_OK) st = scan_input(input, f, &g, &l, &rows, &labels, &dim, &classes);
    if (st == DDP_OK && want_classes > 0) { /* a split may lack the top class: the class count is the user's */
        if (want_classes < classes)
            st = ddp_set_error(DDP_ERR_ARG, "%s: dataset '/labels' holds label %lld, not below --classes %lld", input,
                               (long long)classes - 1, (long long)want_classes);
        else
            classes = want_classes;
    }
    if (st == DDP_OK && shards > l.n)
        st = ddp_set_error(DDP_ERR_ARG, "--shards %lld: more shards than the %lld samples", (long long)shards,
                           (long long)l.n);
    if (st == DDP_OK && ctx->topo.rank == 0) st = ddp_prepare_out_dir(out);
    st = ddp_agree_status(ctx, st);
    /* contiguous split balanced by rows: shard k ends where cumulative rows pass (k+1)/S of the total */
    int64_t total = 0;
    for (int64_t i = 0; i < l.n && st == DDP_OK; i++) total += rows[i];
    int64_t lo = 0;
    for (int64_t k = 0; k < shards && st == DDP_OK; k++) {
        int64_t hi = lo, acc = 0, target = (k + 1) * total / shards, before = 0;
        for (int64_t i = 0; i < lo; i++) before += rows[i];
        acc = before;
        while (hi < l.n && (acc < target || hi == lo) && l.n - hi > shards - k - 1) acc += rows[hi++];
        if (k == shards - 1) hi = l.n;
        if (k % ctx->topo.size == ctx->topo.rank) {
            int64_t n = hi - lo;
            int64_t *off = ddp_calloc((size_t)n + 1, sizeof *off), *ids = ddp_calloc((size_t)n, sizeof *ids);
            if (!off || !ids) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
            for (int64_t i = 0; i < n && st == DDP_OK; i++) {
                off[i + 1] = off[i] + rows[lo + i];
                ids[i] = lo + i;
            }
            char name[64], path[4200];
            ddp_shard_name(name, sizeof name, k, shards);
            snprintf(path, sizeof path, "%s/%s", out, name);
            pack_shard ps = {.group = g, .input = input, .names = l.names, .first = lo, .dim = dim, .bad = &bad};
            if (st == DDP_OK) st = ddp_shard_write(path, dim, classes, n, off, labels + lo, ids, read_sample, &ps);
            if (st == DDP_OK) written++;
            free(off);
            free(ids);
        }
        lo = hi;
    }
    st = ddp_agree_status(ctx, st);
    if (st == DDP_OK) st = nonfinite_notice(ctx, input, l.names, &bad, notice, notice_len);
    for (int64_t i = 0; i < l.n; i++) free(l.names[i]);
    free(l.names);
    free(rows);
    free(labels);
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    return ddp_out_finish(ctx, out, shards, written, st); /* all shards, or none (no partial dataset) */
}
