/* shard_validate.c — checks one shard against every rule of docs/dataset-format.md and fills its metadata and
 * statistics; HDF5 runs under a signal guard and a per-object alarm here, since a corrupt file can crash or hang it. */
#include "io/shard.h"

#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK ((int64_t)1 << 20) /* elements per validation read */

/* ------------------------------------------------------------------ validation helpers */
typedef struct {
    const char *path;
    hid_t file;
    unsigned long fileno; /* HDF5's number for the shard file: an object with another lives in another file */
} vctx;

#define BAD(...) return ddp_set_error(DDP_ERR_FORMAT, __VA_ARGS__)

/* What HDF5 is reading right now, for the message when a corrupt file makes HDF5 itself crash or hang. */
static char g_obj[96] = "the superblock";
void (*ddp_shard_progress)(const char *what);
static void reading(const char *kind, const char *name)
{
    snprintf(g_obj, sizeof g_obj, "%s '%s'", kind, name);
    if (ddp_shard_progress) ddp_shard_progress(g_obj);
}

static ddp_status attr_open(vctx *v, const char *name, hid_t *attr, hid_t *type)
{
    reading("attribute", name);
    htri_t ex = H5Aexists(v->file, name);
    if (ex < 0) return ddp_set_error(DDP_ERR_HDF5, "%s: attribute '%s': cannot be queried", v->path, name);
    if (ex == 0) BAD("%s: attribute '%s': missing", v->path, name);
    *attr = H5Aopen(v->file, name, H5P_DEFAULT);
    if (*attr < 0) return ddp_set_error(DDP_ERR_HDF5, "%s: attribute '%s': cannot be opened", v->path, name);
    *type = H5Aget_type(*attr);
    hid_t sp = H5Aget_space(*attr);
    hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (sp >= 0) H5Sclose(sp);
    if (*type < 0 || np != 1) {
        if (*type >= 0) H5Tclose(*type);
        H5Aclose(*attr);
        BAD("%s: attribute '%s': expected a single value, found %lld", v->path, name, (long long)np);
    }
    return DDP_OK;
}

static ddp_status attr_string(vctx *v, const char *name, char *buf, size_t n)
{
    hid_t a = -1, t = -1;
    DDP_CHECK(attr_open(v, name, &a, &t));
    ddp_status st = DDP_OK;
    if (H5Tget_class(t) != H5T_STRING) {
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: attribute '%s': expected a string", v->path, name);
    } else if (H5Tis_variable_str(t) > 0) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5Tget_cset(t));
        char *s = NULL;
        if (H5Aread(a, mt, &s) < 0)
            st = ddp_set_error(DDP_ERR_HDF5, "%s: attribute '%s': cannot be read", v->path, name);
        else
            snprintf(buf, n, "%s", s ? s : "");
        if (s) H5free_memory(s);
        H5Tclose(mt);
    } else {
        size_t sz = H5Tget_size(t);
        char *tmp = ddp_calloc(sz + 1, 1);
        hid_t mt = H5Tcopy(t);
        if (!tmp)
            st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
        else if (H5Aread(a, mt, tmp) < 0)
            st = ddp_set_error(DDP_ERR_HDF5, "%s: attribute '%s': cannot be read", v->path, name);
        else {
            size_t len = strnlen(tmp, sz);
            while (len && tmp[len - 1] == ' ') len--;
            snprintf(buf, n, "%.*s", (int)len, tmp);
        }
        H5Tclose(mt);
        free(tmp);
    }
    H5Tclose(t);
    H5Aclose(a);
    return st;
}

static ddp_status attr_int(vctx *v, const char *name, int64_t *out)
{
    hid_t a = -1, t = -1;
    DDP_CHECK(attr_open(v, name, &a, &t));
    ddp_status st = DDP_OK;
    if (H5Tget_class(t) != H5T_INTEGER)
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: attribute '%s': expected an integer", v->path, name);
    else if (H5Aread(a, H5T_NATIVE_INT64, out) < 0)
        st = ddp_set_error(DDP_ERR_HDF5, "%s: attribute '%s': cannot be read", v->path, name);
    H5Tclose(t);
    H5Aclose(a);
    return st;
}

/* Whether d's storage was all written: NULL, or what HDF5 says about it. A chunked dataset counts its chunks in the
 * chunk index (H5Dget_num_chunks: no chunk is read; H5Dget_space_status compares bytes, and a compressed dataset has
 * fewer than its extent); any other layout asks H5Dget_space_status. *failed: a query failed. */
static const char *unwritten(hid_t d, hid_t pl, H5D_layout_t lay, int *failed, char *buf, size_t len)
{
    *failed = 0;
#if H5_VERSION_GE(1, 10, 5)
    if (lay == H5D_CHUNKED) {
        hsize_t dims[H5S_MAX_RANK], cdims[H5S_MAX_RANK], total = 1, have = 0;
        hid_t sp = H5Dget_space(d);
        int r = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;
        if (r < 0 || H5Pget_chunk(pl, r, cdims) != r || H5Dget_num_chunks(d, sp, &have) < 0) *failed = 1;
        if (sp >= 0) H5Sclose(sp);
        for (int i = 0; !*failed && i < r; i++) /* an overflow saturates: no chunk index holds that many */
            if (__builtin_mul_overflow(total, cdims[i] ? (dims[i] + cdims[i] - 1) / cdims[i] : 1, &total))
                total = UINT64_MAX;
        if (*failed || have == total) return NULL;
        snprintf(buf, len, "H5Dget_num_chunks: %llu of %llu chunks", (unsigned long long)have,
                 (unsigned long long)total);
        return buf;
    }
#else /* no chunk count before HDF5 1.10.5: a chunked dataset is refused only when none of it was written */
    (void)pl, (void)buf, (void)len;
#endif
    H5D_space_status_t ss;
    if (H5Dget_space_status(d, &ss) < 0) return *failed = 1, NULL;
    if (ss == H5D_SPACE_STATUS_ALLOCATED || (lay == H5D_CHUNKED && ss == H5D_SPACE_STATUS_PART_ALLOCATED)) return NULL;
    return ss == H5D_SPACE_STATUS_PART_ALLOCATED ? "H5Dget_space_status: part allocated"
                                                 : "H5Dget_space_status: not allocated";
}

ddp_h5_storage_kind ddp_h5_storage(hid_t d, hssize_t npoints, char *detail, size_t len)
{
    hid_t pl = H5Dget_create_plist(d);
    if (pl < 0) return DDP_H5_STORAGE_UNKNOWN;
    H5D_layout_t lay = H5Pget_layout(pl);
    int ext = H5Pget_external_count(pl), failed = 0;
    const char *unw = NULL;
    if (lay >= 0 && lay != H5D_VIRTUAL && ext == 0 && npoints > 0) unw = unwritten(d, pl, lay, &failed, detail, len);
    H5Pclose(pl);
    if (lay < 0 || ext < 0 || failed) return DDP_H5_STORAGE_UNKNOWN;
    if (lay == H5D_VIRTUAL) return DDP_H5_STORAGE_VIRTUAL;
    if (ext != 0) return DDP_H5_STORAGE_EXTERNAL;
    if (unw && unw != detail) snprintf(detail, len, "%s", unw);
    return unw ? DDP_H5_STORAGE_UNWRITTEN : DDP_H5_STORAGE_OK;
}

/* A shard holds its own data: a virtual dataset (its mapped source files may be missing, and then HDF5 reads its fill
 * value), external raw storage (files the manifest's size and mtime do not cover) and storage never (fully) written,
 * e.g. by a writer that died after creating the dataset (read as the fill value), are refused. */
static ddp_status dset_storage(vctx *v, const char *name, hid_t d, hssize_t npoints)
{
    char buf[96];
    switch (ddp_h5_storage(d, npoints, buf, sizeof buf)) {
    case DDP_H5_STORAGE_OK: return DDP_OK;
    case DDP_H5_STORAGE_VIRTUAL:
        BAD("%s: dataset '%s': virtual dataset (its data lives in other files): not supported, store it in the shard",
            v->path, name);
    case DDP_H5_STORAGE_EXTERNAL:
        BAD("%s: dataset '%s': external storage (its data lives in other files): not supported, store it in the shard",
            v->path, name);
    case DDP_H5_STORAGE_UNWRITTEN:
        BAD("%s: dataset '%s': storage not (fully) written (%s): the writer did not finish", v->path, name, buf);
    default: return ddp_set_error(DDP_ERR_HDF5, "%s: dataset '%s': storage layout cannot be queried", v->path, name);
    }
}

/* The manifest's limits (io/manifest.c entry_ok): features at most 2^50 values (so R and D too), an index array at
 * most 2^40 + 1 elements (2^40 samples). Larger extents are refused before any storage query or read: their sizes
 * would overflow int64 byte counts and allocations later, in messages that name no file. */
static ddp_status dset_limits(vctx *v, const char *name, int rank, const hsize_t *dims)
{
    const hsize_t big = (hsize_t)1 << 50, samples = (hsize_t)1 << 40;
    if (rank == 2 && (dims[0] > big || dims[1] > big || (dims[1] && dims[0] > big / dims[1])))
        BAD("%s: dataset '%s': %llu rows x %llu columns: more than the 2^50 values a shard may hold", v->path, name,
            (unsigned long long)dims[0], (unsigned long long)dims[1]);
    if (rank == 1 && dims[0] > samples + 1)
        BAD("%s: dataset '%s': %llu elements: more than a shard may hold (2^40 samples)", v->path, name,
            (unsigned long long)dims[0]);
    return DDP_OK;
}

/* Basic information on object name (links followed), for the HDF5 1.10 and 1.12+ API. */
static herr_t obj_info(hid_t loc, const char *name, H5O_info_t *info)
{
#if H5_VERSION_GE(1, 12, 0)
    return H5Oget_info_by_name3(loc, name, info, H5O_INFO_BASIC, H5P_DEFAULT);
#else
    return H5Oget_info_by_name2(loc, name, info, H5O_INFO_BASIC, H5P_DEFAULT);
#endif
}

/* what a dataset's file type is, for a "wrong type" message: "64-bit float", "32-bit big-endian float",
 * "16-bit unsigned integer", "string"... */
static const char *type_desc(hid_t t, char *buf, size_t n)
{
    H5T_class_t c = H5Tget_class(t);
    size_t bits = 8 * H5Tget_size(t);
    int be = bits > 8 && H5Tget_order(t) == H5T_ORDER_BE;
    if (c == H5T_FLOAT)
        snprintf(buf, n, "%zu-bit %sfloat", bits, be ? "big-endian " : "");
    else if (c == H5T_INTEGER)
        snprintf(buf, n, "%zu-bit %s%sinteger", bits, be ? "big-endian " : "",
                 H5Tget_sign(t) == H5T_SGN_NONE ? "unsigned " : "");
    else
        snprintf(buf, n, "%s",
                 c == H5T_STRING     ? "string"
                 : c == H5T_COMPOUND ? "compound"
                 : c == H5T_ENUM     ? "enum"
                 : c == H5T_ARRAY    ? "array"
                                     : "non-numeric");
    return buf;
}

/* the end of a "wrong type" message for a dataset of mpiddp's format: what it must be and how numpy writes it */
static const char *type_want(const char *name)
{
    if (strcmp(name, "features") == 0)
        return "expected 32-bit little-endian float: write it with numpy's .astype('<f4')";
    if (strcmp(name, "labels") == 0) return "expected 32- or 64-bit integer: write it with numpy's .astype('<i8')";
    return "expected 64-bit integer: write it with numpy's .astype('<i8')";
}

/* Opens dataset name and checks class, size, rank; dims receives the shape. */
static ddp_status dset_open(vctx *v, const char *name, H5T_class_t cls, int rank, hid_t *d, hsize_t *dims,
                            size_t *elsize, int optional, int *present)
{
    if (present) *present = 0;
    reading("dataset", name);
    htri_t ex = H5Lexists(v->file, name, H5P_DEFAULT);
    if (ex <= 0) {
        if (optional) return DDP_OK;
        BAD("%s: dataset '%s': missing", v->path, name);
    }
    /* an external link (or a soft link through one) names an object of another file: what its H5Dget_offset gives
     * is an offset in that file, not in the shard that is mapped */
    H5L_info_t link;
    if (H5Lget_info(v->file, name, &link, H5P_DEFAULT) < 0)
        return ddp_set_error(DDP_ERR_HDF5, "%s: dataset '%s': its link cannot be queried", v->path, name);
    if (link.type != H5L_TYPE_HARD && link.type != H5L_TYPE_SOFT)
        BAD("%s: dataset '%s': %s link (its data lives in other files): not supported, store it in the shard", v->path,
            name, link.type == H5L_TYPE_EXTERNAL ? "an external" : "a user-defined");
    H5O_info_t info;
    if (obj_info(v->file, name, &info) < 0 || info.type != H5O_TYPE_DATASET)
        BAD("%s: '%s': not a dataset", v->path, name);
    if (info.fileno != v->fileno)
        BAD("%s: dataset '%s': a link into another file (its data lives in other files): not supported, store it in "
            "the shard",
            v->path, name);
    *d = H5Dopen2(v->file, name, H5P_DEFAULT);
    if (*d < 0) return ddp_set_error(DDP_ERR_HDF5, "%s: dataset '%s': cannot be opened", v->path, name);
    hid_t t = H5Dget_type(*d), sp = H5Dget_space(*d);
    H5T_class_t c = H5Tget_class(t);
    *elsize = H5Tget_size(t);
    int r = H5Sget_simple_extent_ndims(sp);
    hssize_t npoints = H5Sget_simple_extent_npoints(sp);
    ddp_status st = DDP_OK;
    char found[64];
    if (c != cls)
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '%s': wrong type (%s; %s)", v->path, name,
                           type_desc(t, found, sizeof found), type_want(name));
    else if (r != rank)
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '%s': wrong rank %d (expected %d)", v->path, name, r, rank);
    else if (H5Sget_simple_extent_dims(sp, dims, NULL) < 0)
        st = ddp_set_error(DDP_ERR_HDF5, "%s: dataset '%s': its extent cannot be read", v->path, name);
    else
        st = dset_limits(v, name, rank, dims);
    H5Tclose(t);
    H5Sclose(sp);
    if (st == DDP_OK) st = dset_storage(v, name, *d, npoints);
    if (st != DDP_OK) {
        H5Dclose(*d);
        *d = -1;
        return st;
    }
    if (present) *present = 1;
    return DDP_OK;
}

static int is_le(hid_t d)
{
    hid_t t = H5Dget_type(d);
    int le = H5Tget_order(t) == H5T_ORDER_LE;
    H5Tclose(t);
    return le;
}

static const char *dset_type_desc(hid_t d, char *buf, size_t n)
{
    hid_t t = H5Dget_type(d);
    type_desc(t, buf, n);
    H5Tclose(t);
    return buf;
}

/* 1 when d's file type is exactly want (H5Tequal: class, size, order, sign, precision, offset, and for floats the
 * exponent and mantissa layout and bias): only such an array is memory-mapped as the C type; any other is read
 * through HDF5, which converts it. */
static int type_is(hid_t d, hid_t want)
{
    hid_t t = H5Dget_type(d);
    int eq = t >= 0 && H5Tequal(t, want) > 0;
    if (t >= 0) H5Tclose(t);
    return eq;
}

/* File offset of a contiguous, allocated, unfiltered dataset holding `bytes` whose elements (`align`
 * bytes) land aligned in memory (mmap windows are page-aligned), or -1. */
static int64_t mappable_offset(hid_t d, int64_t bytes, int64_t file_bytes, int64_t align)
{
    hid_t pl = H5Dget_create_plist(d);
    if (pl < 0) return -1;
    int ok = H5Pget_layout(pl) == H5D_CONTIGUOUS && H5Pget_nfilters(pl) == 0 && H5Pget_external_count(pl) == 0;
    H5Pclose(pl);
    if (!ok) return -1;
    haddr_t a = H5Dget_offset(d);
    if (a == HADDR_UNDEF) return -1;
    if ((int64_t)a < 0 || (int64_t)a + bytes > file_bytes || (int64_t)a % align != 0) return -1;
    if ((int64_t)H5Dget_storage_size(d) < bytes) return -1;
    return (int64_t)a;
}

/* Reads elements [lo, lo+cnt) of a 1-D dataset as int64. */
static ddp_status read_i64(vctx *v, hid_t d, const char *name, int64_t lo, int64_t cnt, int64_t *buf)
{
    hid_t fs = H5Dget_space(d);
    hsize_t start = (hsize_t)lo, count = (hsize_t)cnt;
    hid_t ms = H5Screate_simple(1, &count, NULL);
    herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (e >= 0) e = H5Dread(d, H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    if (e < 0)
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: dataset '%s'[%lld..%lld]: cannot be read (truncated or corrupt file?)", v->path, name,
                             (long long)lo, (long long)(lo + cnt - 1));
    return DDP_OK;
}

static int bin_of(int64_t rows)
{
    int b = 0;
    while (rows > 1 && b < 15) {
        rows >>= 1;
        b++;
    }
    return b;
}

/* ------------------------------------------------------------------ validation */
static ddp_status validate_open(vctx *v, const char *name, ddp_shard_meta *m, ddp_shard_stats *stats, hid_t *ds)
{
    const char *path = v->path;
    struct stat sb;
    if (stat(path, &sb) != 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return ddp_set_error(DDP_ERR_IO, "%s: not a regular file", path);
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->file_bytes = (int64_t)sb.st_size;
    m->feat_off = m->off_off = m->lab_off = m->ids_off = -1;
    /* the real cause first (permission denied...), before HDF5 guesses; O_NONBLOCK: a FIFO put there since the stat
     * does not block */
    int probe = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (probe < 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    close(probe);
    if (!ddp_h5_is_hdf5(path)) BAD("%s: not an HDF5 file (or truncated)", path);
    v->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ddp_io_counters_get()->h5_opens++;
    if (v->file < 0) BAD("%s: not an HDF5 file (or truncated): cannot be opened", path);
    H5O_info_t root;
    if (obj_info(v->file, "/", &root) < 0) BAD("%s: the root group cannot be read (corrupt file?)", path);
    v->fileno = root.fileno;

    char fmt[128];
    int64_t version, classes;
    DDP_CHECK(attr_string(v, "format", fmt, sizeof fmt));
    if (strcmp(fmt, "mpiddp-shard") != 0) BAD("%s: attribute 'format': \"%s\" is not \"mpiddp-shard\"", path, fmt);
    DDP_CHECK(attr_int(v, "version", &version));
    if (version != 1) BAD("%s: attribute 'version': %lld is not supported (expected 1)", path, (long long)version);
    DDP_CHECK(attr_int(v, "num_classes", &classes));
    if (classes < 2 || classes > DDP_MAX_CLASSES)
        BAD("%s: attribute 'num_classes': %lld, must be in [2, %lld]", path, (long long)classes,
            (long long)DDP_MAX_CLASSES);
    m->classes = classes;

    hsize_t fd[2], od[1], ld[1], id[1];
    size_t fs, os, ls, is2;
    DDP_CHECK(dset_open(v, "features", H5T_FLOAT, 2, &ds[0], fd, &fs, 0, NULL));
    char found[64];
    if (fs != 4 || !is_le(ds[0]))
        BAD("%s: dataset 'features': wrong type (%s; %s)", path, dset_type_desc(ds[0], found, sizeof found),
            type_want("features"));
    if (fd[1] < 1) BAD("%s: dataset 'features': dimension D is 0", path);
    m->rows = (int64_t)fd[0];
    m->dim = (int64_t)fd[1];
    DDP_CHECK(dset_open(v, "offsets", H5T_INTEGER, 1, &ds[1], od, &os, 0, NULL));
    if (os != 8)
        BAD("%s: dataset 'offsets': wrong type (%s; %s)", path, dset_type_desc(ds[1], found, sizeof found),
            type_want("offsets"));
    if (od[0] < 2) {
        /* one sample written as np.cumsum(rows): offsets [R] beside one label, not a shard of no samples */
        int64_t first = 0;
        hsize_t l1[1] = {0};
        size_t lsz = 0;
        if (od[0] == 1 && read_i64(v, ds[1], "offsets", 0, 1, &first) == DDP_OK && first != 0 &&
            dset_open(v, "labels", H5T_INTEGER, 1, &ds[2], l1, &lsz, 0, NULL) == DDP_OK && l1[0] == 1)
            BAD("%s: dataset 'offsets': 1 values for 1 labels: offsets needs N+1 values, 0 first (write "
                "np.concatenate([[0], np.cumsum(rows)]))",
                path);
        BAD("%s: dataset 'offsets': length %llu, needs N+1 >= 2 (no samples)", path, (unsigned long long)od[0]);
    }
    m->n = (int64_t)od[0] - 1;
    DDP_CHECK(dset_open(v, "labels", H5T_INTEGER, 1, &ds[2], ld, &ls, 0, NULL));
    if (ls != 4 && ls != 8)
        BAD("%s: dataset 'labels': wrong type (%s; %s)", path, dset_type_desc(ds[2], found, sizeof found),
            type_want("labels"));
    int64_t off0 = 0; /* np.cumsum(rows) without the leading 0: offsets is one short, not labels */
    if ((int64_t)ld[0] == m->n + 1 && read_i64(v, ds[1], "offsets", 0, 1, &off0) == DDP_OK && off0 != 0)
        BAD("%s: dataset 'offsets': %llu values for %llu labels: offsets needs N+1 values, 0 first (write "
            "np.concatenate([[0], np.cumsum(rows)]))",
            path, (unsigned long long)od[0], (unsigned long long)ld[0]);
    if ((int64_t)ld[0] != m->n)
        BAD("%s: dataset 'labels': length %llu differs from N=%lld (offsets length - 1)", path,
            (unsigned long long)ld[0], (long long)m->n);
    int have_ids = 0;
    DDP_CHECK(dset_open(v, "sample_ids", H5T_INTEGER, 1, &ds[3], id, &is2, 1, &have_ids));
    if (have_ids) {
        if (is2 != 8)
            BAD("%s: dataset 'sample_ids': wrong type (%s; %s)", path, dset_type_desc(ds[3], found, sizeof found),
                type_want("sample_ids"));
        if ((int64_t)id[0] != m->n)
            BAD("%s: dataset 'sample_ids': length %llu differs from N=%lld", path, (unsigned long long)id[0],
                (long long)m->n);
        m->has_ids = 1;
    }

    /* offsets: 0, strictly increasing, ending at R */
    int64_t *buf = ddp_calloc((size_t)BLOCK + 1, sizeof *buf);
    if (!buf) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    ddp_status st = DDP_OK;
    int64_t prev = 0;
    for (int64_t lo = 0; lo <= m->n && st == DDP_OK; lo += BLOCK) {
        int64_t cnt = m->n + 1 - lo < BLOCK ? m->n + 1 - lo : BLOCK;
        st = read_i64(v, ds[1], "offsets", lo, cnt, buf);
        for (int64_t k = 0; k < cnt && st == DDP_OK; k++) {
            int64_t i = lo + k, x = buf[k];
            if (i == 0) {
                if (x != 0)
                    st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset 'offsets'[0]: %lld, must be 0", path, (long long)x);
            } else if (x == prev) {
                st = ddp_set_error(
                    DDP_ERR_FORMAT,
                    "%s: dataset 'offsets'[%lld]: empty sample %lld (offsets[%lld] = offsets[%lld] = %lld)", path,
                    (long long)i, (long long)(i - 1), (long long)(i - 1), (long long)i, (long long)x);
            } else if (x < prev) {
                st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset 'offsets'[%lld]: decreasing (%lld after %lld)", path,
                                   (long long)i, (long long)x, (long long)prev);
            } else if (x > m->rows) {
                st = ddp_set_error(DDP_ERR_FORMAT,
                                   "%s: dataset 'offsets'[%lld]: %lld out of range (features has %lld rows)", path,
                                   (long long)i, (long long)x, (long long)m->rows);
            } else {
                int64_t r = x - prev;
                if (r > m->max_rows) m->max_rows = r;
                if (stats) {
                    if (stats->min_rows == 0 || r < stats->min_rows) stats->min_rows = r;
                    if (r > stats->max_rows) stats->max_rows = r;
                    stats->sum_rows += r;
                    stats->hist[bin_of(r)]++;
                }
            }
            prev = x;
        }
    }
    if (st == DDP_OK && prev != m->rows)
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset 'offsets'[%lld]: %lld, must equal the %lld rows of 'features'",
                           path, (long long)m->n, (long long)prev, (long long)m->rows);
    /* labels in [0, classes) */
    for (int64_t lo = 0; lo < m->n && st == DDP_OK; lo += BLOCK) {
        int64_t cnt = m->n - lo < BLOCK ? m->n - lo : BLOCK;
        st = read_i64(v, ds[2], "labels", lo, cnt, buf);
        for (int64_t k = 0; k < cnt && st == DDP_OK; k++) {
            if (buf[k] < 0 || buf[k] >= classes)
                st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset 'labels'[%lld]: %lld out of range [0, %lld)", path,
                                   (long long)(lo + k), (long long)buf[k], (long long)classes);
            else if (stats && stats->class_counts && buf[k] < stats->classes_cap)
                stats->class_counts[buf[k]]++;
        }
    }
    if (st == DDP_OK && have_ids) /* readable end to end */
        for (int64_t lo = 0; lo < m->n && st == DDP_OK; lo += BLOCK) {
            int64_t cnt = m->n - lo < BLOCK ? m->n - lo : BLOCK;
            st = read_i64(v, ds[3], "sample_ids", lo, cnt, buf);
        }
    free(buf);
    if (st != DDP_OK) return st;

    /* features readable: check its last row (catches truncation behind a valid header) */
    reading("dataset", "features");
    {
        hid_t fsp = H5Dget_space(ds[0]);
        hsize_t start[2] = {(hsize_t)m->rows - 1, 0}, count[2] = {1, (hsize_t)m->dim};
        float *row = ddp_calloc((size_t)m->dim, sizeof *row);
        if (!row) {
            H5Sclose(fsp);
            return ddp_set_error(DDP_ERR_NOMEM, "%s: dataset 'features': out of memory for one row", path);
        }
        hid_t ms = H5Screate_simple(2, count, NULL);
        herr_t e = row ? H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) : -1;
        if (e >= 0) e = H5Dread(ds[0], H5T_NATIVE_FLOAT, ms, fsp, H5P_DEFAULT, row);
        H5Sclose(ms);
        H5Sclose(fsp);
        free(row);
        if (e < 0)
            BAD("%s: dataset 'features'[%lld]: cannot be read (truncated or corrupt file?)", path,
                (long long)m->rows - 1);
    }

    if (type_is(ds[0], H5T_IEEE_F32LE)) m->feat_off = mappable_offset(ds[0], m->rows * m->dim * 4, m->file_bytes, 4);
    if (type_is(ds[1], H5T_STD_I64LE)) m->off_off = mappable_offset(ds[1], (m->n + 1) * 8, m->file_bytes, 8);
    if (type_is(ds[2], ls == 4 ? H5T_STD_I32LE : H5T_STD_I64LE)) {
        m->lab_off = mappable_offset(ds[2], m->n * (int64_t)ls, m->file_bytes, (int64_t)ls);
        m->lab_width = (int32_t)ls;
    }
    if (have_ids && type_is(ds[3], H5T_STD_I64LE)) m->ids_off = mappable_offset(ds[3], m->n * 8, m->file_bytes, 8);
    return DDP_OK;
}

/* HDF5 1.10 can crash or loop forever on some corrupt files (found by tests/fuzz). Validation therefore
 * runs under a guard: SIGSEGV/SIGBUS/SIGFPE, or SIGALRM after MPIDDP_VALIDATE_TIMEOUT seconds (default
 * 120), jump back here and become a one-line error. HDF5's state is then unusable: the process must exit
 * without calling HDF5 again (ddp_hdf5_poisoned). */
static sigjmp_buf g_jmp;
static volatile sig_atomic_t g_guard, g_poisoned;

int ddp_hdf5_poisoned(void) { return g_poisoned; }

static void guard_handler(int sig)
{
    if (g_guard) siglongjmp(g_jmp, sig);
    signal(sig, SIG_DFL);
    raise(sig);
}

ddp_status ddp_shard_validate(const char *path, const char *name, ddp_shard_meta *m, ddp_shard_stats *stats)
{
    if (g_poisoned)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: not validated: HDF5 is unusable after an earlier corrupt file", path);
    ddp_h5_quiet();
    vctx v = {.path = path, .file = -1};
    hid_t ds[4] = {-1, -1, -1, -1};
    snprintf(g_obj, sizeof g_obj, "the file structure");
    if (ddp_shard_progress) ddp_shard_progress(g_obj);
    const int sigs[4] = {SIGSEGV, SIGBUS, SIGFPE, SIGALRM};
    struct sigaction sa, old[4];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = guard_handler;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &sa, &old[i]);
    int64_t secs = ddp_knob_int(DDP_KNOB_VALIDATE_TIMEOUT);
    struct itimerval tv = {{0, 0}, {(time_t)(secs > 0 ? secs : 0), 0}}, off = {{0, 0}, {0, 0}};
    volatile ddp_status st = DDP_OK;
    int sig = sigsetjmp(g_jmp, 1);
    if (sig == 0) {
        setitimer(ITIMER_REAL, &tv, NULL);
        g_guard = 1;
        st = validate_open(&v, name, m, stats, ds);
        g_guard = 0;
        setitimer(ITIMER_REAL, &off, NULL);
        for (int i = 0; i < 4; i++)
            if (ds[i] >= 0) H5Dclose(ds[i]);
        if (v.file >= 0) H5Fclose(v.file);
    } else {
        g_guard = 0;
        g_poisoned = 1;
        setitimer(ITIMER_REAL, &off, NULL);
        if (sig == SIGALRM)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: %s: HDF5 did not finish reading it in %lld s (corrupt file?)", path,
                               g_obj, (long long)secs);
        else
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: %s: HDF5 crashed reading it (signal %d; corrupt file?)", path,
                               g_obj, sig);
    }
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &old[i], NULL);
    return st;
}
