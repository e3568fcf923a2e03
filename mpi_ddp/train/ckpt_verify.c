/* ckpt_verify.c — checkpoint datasets with checksums, read back verified; see ckpt_verify.h. */
#include "mpi_ddp/train/ckpt_verify.h"

#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

uint32_t ddp_ckpt_crc32(const void *data, int64_t n, size_t elem)
{
    const unsigned char *p = data;
    uLong c = crc32(0L, Z_NULL, 0);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    unsigned char t[4096];
    int64_t per = (int64_t)(sizeof t / elem);
    for (int64_t i = 0; i < n; i += per) {
        int64_t k = n - i < per ? n - i : per;
        for (int64_t j = 0; j < k; j++)
            for (size_t b = 0; b < elem; b++) t[(size_t)j * elem + b] = p[(size_t)(i + j) * elem + elem - 1 - b];
        c = crc32(c, t, (uInt)((size_t)k * elem));
    }
#else
    size_t bytes = (size_t)n * elem;
    for (size_t o = 0; o < bytes;) { /* zlib takes at most 4 GiB - 1 per call */
        size_t k = bytes - o < ((size_t)1 << 30) ? bytes - o : ((size_t)1 << 30);
        c = crc32(c, p + o, (uInt)k);
        o += k;
    }
#endif
    return (uint32_t)c;
}

herr_t ddp_ckpt_write_dataset(hid_t loc, const char *name, int ndim, const hsize_t *dims, const void *data, size_t elem)
{
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= (int64_t)dims[k];
    uint32_t crc = ddp_ckpt_crc32(data, n, elem);
    hid_t sp = H5Screate_simple(ndim, dims, NULL), asp = H5Screate(H5S_SCALAR);
    hid_t d = sp < 0 ? -1
                     : H5Dcreate2(loc, name, elem == 8 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                                  H5P_DEFAULT);
    herr_t e = d < 0
                   ? -1
                   : H5Dwrite(d, elem == 8 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    hid_t a = e < 0 || asp < 0 ? -1 : H5Acreate2(d, DDP_CKPT_CHECKSUMS, H5T_STD_U32LE, asp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_UINT32, &crc) < 0) e = -1;
    if (a >= 0 && H5Aclose(a) < 0) e = -1;
    if (d >= 0 && H5Dclose(d) < 0) e = -1;
    if (asp >= 0 && H5Sclose(asp) < 0) e = -1;
    if (sp >= 0 && H5Sclose(sp) < 0) e = -1;
    return e;
}

ddp_status ddp_ckpt_verify_crc(hid_t d, const char *path, const char *name, int sums, const void *buf, int64_t n,
                               size_t elem)
{
    if (!sums) return DDP_OK;
    htri_t ex = H5Aexists(d, DDP_CKPT_CHECKSUMS);
    if (ex < 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': checksum attribute unreadable (%s)", path, name,
                             ddp_ckpt_h5_cause());
    if (ex == 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': checksum attribute '" DDP_CKPT_CHECKSUMS "' missing",
                             path, name);
    uint32_t want = 0;
    hid_t a = ex > 0 ? H5Aopen(d, DDP_CKPT_CHECKSUMS, H5P_DEFAULT) : -1;
    herr_t e = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_UINT32, &want);
    if (a >= 0 && H5Aclose(a) < 0) e = -1;
    if (e < 0)
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: dataset '/%s': checksum attribute '" DDP_CKPT_CHECKSUMS "' unreadable", path, name);
    uint32_t got = ddp_ckpt_crc32(buf, n, elem);
    if (got != want)
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: dataset '/%s': checksum mismatch (stored crc32 %08x, data %08x): the file is corrupt",
                             path, name, (unsigned)want, (unsigned)got);
    return DDP_OK;
}

static herr_t find_checksum(unsigned n, const H5E_error2_t *e, void *found)
{
    (void)n;
    if (e->desc && strstr(e->desc, "checksum")) *(int *)found = 1; /* "incorrect metadata checksum ..." */
    return 0;
}

const char *ddp_ckpt_h5_cause(void)
{
    int found = 0;
    if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, find_checksum, &found) < 0) found = 0;
    return found ? "HDF5 metadata checksum mismatch: the file is corrupt" : "truncated or corrupt file";
}

int ddp_ckpt_path_exists(hid_t f, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s", name);
    for (char *s = p;; s++) {
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        htri_t e = H5Lexists(f, p, H5P_DEFAULT);
        if (e <= 0) return e < 0 ? -1 : 0;
        if (!c) return 1;
        *s = c;
    }
}

/* The first value that is NaN or infinite; with posinf, +Inf is allowed: AdamW's second moment v = b2 v + (1 - b2) g^2
 * overflows to +Inf in float where a finite gradient exceeds about 1.8e19, as PyTorch's does (the element's update is 0
 * from then on), and a run that trained on is resumed and evaluated from its checkpoints like any other. */
static int64_t first_nonfinite(const float *x, int64_t n, int posinf)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) && !(posinf && x[i] > 0)) return i;
    return -1;
}

/* Every tensor of the model was read from group: a group holding more (a Transformer of more --layers resumed with
 * fewer) would lose them silently, training and saving a truncated model; the first one the model lacks is named. */
static ddp_status extra_tensor(hid_t f, const char *path, const char *group, const ddp_model *model, int cli)
{
    H5G_info_t info;
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    herr_t e = g < 0 ? -1 : H5Gget_info(g, &info);
    ddp_status st = DDP_OK;
    if (e < 0) st = ddp_set_error(DDP_ERR_FORMAT, "%s: group '/%s': unreadable (%s)", path, group, ddp_ckpt_h5_cause());
    for (hsize_t i = 0; st == DDP_OK && info.nlinks > (hsize_t)model->ntensors && i < info.nlinks; i++) {
        char name[512] = "";
        int known = 0;
        if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) < 0)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: group '/%s': unreadable (%s)", path, group, ddp_ckpt_h5_cause());
        for (int t = 0; t < model->ntensors && !known; t++) known = !strcmp(name, model->tensors[t].name);
        /* the option that leaves it out: a layer past --layers, or the learned positions of --positions none */
        const char *hint = !strncmp(name, "enc.layers.", 11) ? ddp_opt_name(cli, DDP_OPT_LAYERS)
                           : !strcmp(name, "pos.weight")     ? ddp_opt_name(cli, DDP_OPT_POSITIONS)
                                                             : NULL;
        if (st == DDP_OK && !known)
            st = ddp_set_error(DDP_ERR_FORMAT,
                               "%s: dataset '/%s/%s': not a tensor of the %s model this run builds (%lld in the file, "
                               "%d in the model%s%s%s)",
                               path, group, name, model->name ? model->name : "", (long long)info.nlinks,
                               model->ntensors, hint ? ": another " : "", hint ? hint : "", hint ? "?" : "");
    }
    if (g >= 0 && H5Gclose(g) < 0 && st == DDP_OK)
        st = ddp_set_error(DDP_ERR_HDF5, "%s: group '/%s': close failed", path, group);
    return st;
}

/* "[64, 16]": a shape for a message, from HDF5's dims or the model's int64 shape ("unreadable" for rank < 0) */
static void shape_text(char *buf, size_t n, int rank, const hsize_t *dims, const int64_t *shape)
{
    if (rank < 0 || rank > 4) {
        snprintf(buf, n, rank < 0 ? "unreadable" : "%d dimensions", rank);
        return;
    }
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int k = 0; k < rank && k < 4 && len < n; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", k ? ", " : "",
                                dims ? (long long)dims[k] : (long long)shape[k]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

ddp_status ddp_ckpt_read_tensors(hid_t f, const char *path, int sums, const char *group, const ddp_model *model,
                                 float *out, int cli)
{
    ddp_status st = DDP_OK;
    float *scratch = NULL;
    int64_t off = 0;
    char name[512];
    if (!out) { /* verify only: one tensor at a time */
        int ex = ddp_ckpt_path_exists(f, group);
        if (ex <= 0)
            return ex < 0 ? ddp_set_error(DDP_ERR_FORMAT, "%s: group '/%s': unreadable (%s)", path, group,
                                          ddp_ckpt_h5_cause())
                          : DDP_OK;
        int64_t most = 1;
        for (int t = 0; t < model->ntensors; t++) {
            int64_t n = 1;
            for (int k = 0; k < model->tensors[t].ndim; k++) n *= model->tensors[t].shape[k];
            most = n > most ? n : most;
        }
        scratch = ddp_malloc((size_t)most, sizeof *scratch);
        if (!scratch) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    }
    for (int t = 0; t < model->ntensors; t++) {
        const ddp_tensor_spec *s = &model->tensors[t];
        snprintf(name, sizeof name, "%s/%s", group, s->name);
        int ex = ddp_ckpt_path_exists(f, name);
        if (ex == 0) DDP_FAIL(DDP_ERR_FORMAT, "%s: dataset '/%s': missing", path, name);
        hid_t d = ex > 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
        if (d < 0) DDP_FAIL(DDP_ERR_FORMAT, "%s: dataset '/%s': unreadable (%s)", path, name, ddp_ckpt_h5_cause());
        hid_t sp = H5Dget_space(d);
        hsize_t dims[4] = {0};
        int r = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
        if (r > 0 && r <= 4 && H5Sget_simple_extent_dims(sp, dims, NULL) < 0) r = -1;
        if (sp >= 0 && H5Sclose(sp) < 0) r = -1;
        int64_t n = 1;
        int ok = r == s->ndim;
        for (int k = 0; k < s->ndim && ok; k++) {
            ok = (int64_t)dims[k] == s->shape[k];
            n *= s->shape[k];
        }
        float *dst = out ? out + off : scratch;
        herr_t e = ok ? H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) : 0;
        const char *why = e < 0 ? ddp_ckpt_h5_cause() : NULL;
        st = ok && e >= 0 ? ddp_ckpt_verify_crc(d, path, name, sums, dst, n, sizeof *dst) : DDP_OK;
        if (H5Dclose(d) < 0 && st == DDP_OK && ok && e >= 0)
            st = ddp_set_error(DDP_ERR_HDF5, "%s: dataset '/%s': close failed", path, name);
        if (!ok) {
            char have[96] = "", want[96] = "";
            shape_text(have, sizeof have, r, dims, NULL);
            shape_text(want, sizeof want, s->ndim, NULL, s->shape);
            /* the options that set the shapes of this model's tensors: a Transformer's FFN and position table too */
            const char *kind = model->name ? model->name : "";
            char opts[200] = "another model configuration"; /* a model of the caller's own */
            if (!strcmp(kind, "transformer"))
                snprintf(opts, sizeof opts, "another %s, %s, %s", ddp_opt_name(cli, DDP_OPT_HIDDEN),
                         ddp_opt_name(cli, DDP_OPT_FF), ddp_opt_name(cli, DDP_OPT_MAX_POSITIONS));
            else if (!strcmp(kind, "mlp"))
                snprintf(opts, sizeof opts, "another %s", ddp_opt_name(cli, DDP_OPT_HIDDEN));
            DDP_FAIL(DDP_ERR_FORMAT,
                     "%s: dataset '/%s': shape does not match the model: %s in the checkpoint, %s in this run's model "
                     "(%s, D or number of classes: resume with the model %s and data it was trained with)",
                     path, name, have, want, opts, cli ? "options" : "configuration");
        }
        if (e < 0) DDP_FAIL(DDP_ERR_FORMAT, "%s: dataset '/%s': cannot be read (%s)", path, name, why);
        if (st != DDP_OK) goto done;
        int64_t bad = first_nonfinite(dst, n, !strcmp(group, "optim/exp_avg_sq"));
        if (bad >= 0)
            DDP_FAIL(DDP_ERR_FORMAT, "%s: dataset '/%s': non-finite value %g at index %lld", path, name,
                     (double)dst[bad], (long long)bad);
        off += n;
    }
    st = extra_tensor(f, path, group, model, cli);
done:
    free(scratch);
    return st;
}

ddp_status ddp_ckpt_read_per_rank(hid_t f, const char *path, const char *name, int sums, int64_t W, double *out,
                                  int *found)
{
    int have = ddp_ckpt_path_exists(f, name);
    if (have < 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': unreadable (%s)", path, name, ddp_ckpt_h5_cause());
    *found = have > 0;
    if (!have) return DDP_OK;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    herr_t e = np == W ? H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) : -1;
    ddp_status st = e < 0 ? DDP_OK : ddp_ckpt_verify_crc(d, path, name, sums, out, W, sizeof(double));
    if (sp >= 0 && H5Sclose(sp) < 0) e = -1;
    if (d >= 0 && H5Dclose(d) < 0) e = -1;
    if (st == DDP_OK && e < 0)
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': unreadable or wrong length", path, name);
    return st;
}
