/* checkpoint.c — checkpoint files; see checkpoint.h. */
#include "mpi_ddp/train/checkpoint.h"

#include "io/shard.h" /* ddp_h5_quiet */
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CK(call, ...)                                                                              \
    do {                                                                                           \
        if ((call) < 0) DDP_FAIL(DDP_ERR_HDF5, __VA_ARGS__);                                        \
    } while (0)

static herr_t write_tensors(hid_t f, const char *group, const ddp_model *model, const float *data)
{
    hid_t g = H5Gcreate2(f, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return -1;
    herr_t e = 0;
    int64_t off = 0;
    for (int t = 0; t < model->ntensors && e >= 0; t++) {
        const ddp_tensor_spec *s = &model->tensors[t];
        hsize_t dims[4];
        int64_t n = 1;
        for (int d = 0; d < s->ndim; d++) {
            dims[d] = (hsize_t)s->shape[d];
            n *= s->shape[d];
        }
        hid_t sp = H5Screate_simple(s->ndim, dims, NULL);
        hid_t d = H5Dcreate2(g, s->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        e = d < 0 ? -1 : H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data + off);
        if (d >= 0) H5Dclose(d);
        H5Sclose(sp);
        off += n;
    }
    H5Gclose(g);
    return e;
}

ddp_status ddp_ckpt_write(const char *path, const ddp_model *model, const float *params, const float *m,
                          const float *v, const ddp_ckpt_state *cs)
{
    ddp_h5_quiet();
    char tmp[4200], dcopy[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    snprintf(dcopy, sizeof dcopy, "%s", path);
    ddp_status st = DDP_OK;
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot create checkpoint (directory missing, full or read-only?)", tmp);
    CK(ddp_h5_attr_str(f, "format", "mpiddp-checkpoint"), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "version", 1), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "model", model->name ? model->name : ""), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "epoch", cs->epoch), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "optim_step_in_epoch", cs->optim_step_in_epoch), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "samples_in_epoch", cs->samples_in_epoch), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "global_step", cs->global_step), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "optim_step", cs->optim_step), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "seed", (int64_t)cs->seed), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "world_size", cs->world_size), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_f64(f, "best_score", cs->best_score), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "monitor", cs->monitor), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "mode", cs->mode_max ? "max" : "min"), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "skipped_steps", cs->skipped_steps), "%s: writing attributes", tmp);
    if (cs->lr_schedule) {
        CK(ddp_h5_attr_str(f, "lr_schedule", cs->lr_schedule), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "lr_warmup_steps", cs->lr_warmup_steps), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "lr_total_steps", cs->lr_total_steps), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_f64(f, "lr", cs->lr), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_f64(f, "min_lr", cs->min_lr), "%s: writing attributes", tmp);
    }
    CK(ddp_h5_attr_i64(f, "bad_epochs", cs->bad_epochs), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "global_batch", cs->global_batch), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "global_batch_rows", cs->global_batch_rows), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "shuffle", cs->shuffle[0] ? cs->shuffle : "full"), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "topk", cs->topk_json ? cs->topk_json : "[]"), "%s: writing attributes", tmp);
    if (cs->best_local) {
        hsize_t w = (hsize_t)cs->world_size;
        hid_t sp = H5Screate_simple(1, &w, NULL);
        hid_t d = H5Dcreate2(f, "best_local", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        herr_t e2 = d < 0 ? -1 : H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, cs->best_local);
        if (d >= 0) H5Dclose(d);
        H5Sclose(sp);
        CK(e2, "%s: writing /best_local", tmp);
    }
    CK(ddp_h5_attr_str(f, "config", cs->config_json ? cs->config_json : "{}"), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "precision", ddp_precision_name(cs->precision)), "%s: writing attributes", tmp);
    if (cs->model_cfg) { /* the hyperparameters the shapes do not tell (eval and the PyTorch bridge read them) */
        const ddp_model_config *mc = cs->model_cfg;
        CK(ddp_h5_attr_i64(f, "model_hidden", mc->hidden), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "model_layers", mc->layers), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "model_heads", mc->heads), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "model_ff", mc->ff > 0 ? mc->ff : 2 * mc->hidden), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "model_max_positions", mc->max_positions), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "model_positions", mc->positions), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_f64(f, "model_dropout", mc->dropout), "%s: writing attributes", tmp);
    }
    CK(write_tensors(f, "params", model, params), "%s: writing /params (disk full?)", tmp);
    if (m && v) {
        hid_t g = H5Gcreate2(f, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CK(g, "%s: creating /optim", tmp);
        H5Gclose(g);
        CK(write_tensors(f, "optim/exp_avg", model, m), "%s: writing /optim/exp_avg (disk full?)", tmp);
        CK(write_tensors(f, "optim/exp_avg_sq", model, v), "%s: writing /optim/exp_avg_sq (disk full?)", tmp);
    }
    CK(H5Fflush(f, H5F_SCOPE_GLOBAL), "%s: flush failed (disk full?)", tmp);
    herr_t e = H5Fclose(f);
    f = -1;
    CK(e, "%s: close failed (disk full?)", tmp);
    DDP_TRY(ddp_fsync_path(tmp, 0));
    { /* test hook: die between writing the temporary file and the rename (atomicity test) */
        static int64_t writes;
        int64_t die_at = ddp_env_int("TEST_DIE_IN_SAVE", 0);
        if (die_at > 0 && ++writes == die_at) raise(SIGKILL);
    }
    if (rename(tmp, path) != 0) DDP_FAIL(DDP_ERR_IO, "%s: rename: %s", path, strerror(errno));
    DDP_TRY(ddp_fsync_path(dirname(dcopy), 1));
done:
    if (f >= 0) H5Fclose(f);
    if (st != DDP_OK) unlink(tmp);
    return st;
}

/* A scalar attribute read as mem_type (HDF5 converts): missing or unreadable is a format error. */
static ddp_status read_attr(hid_t f, const char *path, const char *name, hid_t mem_type, void *v)
{
    hid_t a = H5Aexists(f, name) > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
    herr_t e = a < 0 ? -1 : H5Aread(a, mem_type, v);
    if (a >= 0) H5Aclose(a);
    if (e < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: checkpoint attribute '%s': missing or unreadable", path, name);
    return DDP_OK;
}

static ddp_status read_i64_attr(hid_t f, const char *path, const char *name, int64_t *v)
{
    return read_attr(f, path, name, H5T_NATIVE_INT64, v);
}

static ddp_status read_str_attr(hid_t f, const char *path, const char *name, char **out)
{
    hid_t a = H5Aexists(f, name) > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
    if (a < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: checkpoint attribute '%s': missing", path, name);
    hid_t t = H5Aget_type(a);
    size_t n = H5Tget_size(t);
    int fixed_string = H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) <= 0;
    char *buf = fixed_string ? ddp_calloc(n + 1, 1) : NULL;
    herr_t e = buf ? H5Aread(a, t, buf) : -1;
    H5Tclose(t);
    H5Aclose(a);
    if (fixed_string && !buf) return ddp_set_error(DDP_ERR_NOMEM, "%s: checkpoint attribute '%s': out of memory", path, name);
    if (e < 0) {
        free(buf);
        return ddp_set_error(DDP_ERR_FORMAT, "%s: checkpoint attribute '%s': unreadable", path, name);
    }
    *out = buf;
    return DDP_OK;
}

static ddp_status read_tensors(hid_t f, const char *path, const char *group, const ddp_model *model, float *out)
{
    int64_t off = 0;
    char name[512];
    for (int t = 0; t < model->ntensors; t++) {
        const ddp_tensor_spec *s = &model->tensors[t];
        snprintf(name, sizeof name, "%s/%s", group, s->name);
        hid_t d = H5Lexists(f, group, H5P_DEFAULT) > 0 && H5Lexists(f, name, H5P_DEFAULT) > 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
        if (d < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': missing", path, name);
        hid_t sp = H5Dget_space(d);
        hsize_t dims[4] = {0};
        int r = H5Sget_simple_extent_ndims(sp);
        if (r == s->ndim) H5Sget_simple_extent_dims(sp, dims, NULL);
        H5Sclose(sp);
        int64_t n = 1;
        int ok = r == s->ndim;
        for (int k = 0; k < s->ndim && ok; k++) {
            ok = (int64_t)dims[k] == s->shape[k];
            n *= s->shape[k];
        }
        if (!ok) {
            H5Dclose(d);
            return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': shape does not match the model", path, name);
        }
        herr_t e = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out + off);
        H5Dclose(d);
        if (e < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': cannot be read (truncated?)", path, name);
        off += n;
    }
    return DDP_OK;
}

ddp_status ddp_ckpt_read(const char *path, const ddp_model *model, float *params, float *m, float *v, ddp_ckpt_state *cs)
{
    ddp_h5_quiet();
    if (access(path, R_OK) != 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    if (!ddp_h5_is_hdf5(path)) return ddp_set_error(DDP_ERR_FORMAT, "%s: not an HDF5 file (or truncated)", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: cannot be opened by HDF5 (truncated?)", path);
    ddp_status st = DDP_OK;
    int64_t version = 0, seed = 0;
    memset(cs, 0, sizeof *cs);
    {
        char *fmt = NULL;
        DDP_TRY(read_str_attr(f, path, "format", &fmt));
        int ok = strcmp(fmt, "mpiddp-checkpoint") == 0;
        free(fmt);
        if (!ok) DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'format': not an mpiddp checkpoint", path);
    }
    DDP_TRY(read_i64_attr(f, path, "version", &version));
    if (version != 1) DDP_FAIL(DDP_ERR_FORMAT, "%s: checkpoint version %lld is not supported (expected 1)", path, (long long)version);
    DDP_TRY(read_i64_attr(f, path, "epoch", &cs->epoch));
    cs->legacy_micro_batch = -1;
    if (H5Aexists(f, "optim_step_in_epoch") > 0) {
        DDP_TRY(read_i64_attr(f, path, "optim_step_in_epoch", &cs->optim_step_in_epoch));
        DDP_TRY(read_i64_attr(f, path, "samples_in_epoch", &cs->samples_in_epoch));
        if (cs->optim_step_in_epoch < 0 || cs->samples_in_epoch < 0)
            DDP_FAIL(DDP_ERR_FORMAT, "%s: attributes 'optim_step_in_epoch'/'samples_in_epoch': negative position", path);
    } else { /* written before positions were world-size independent: a micro-batch index */
        DDP_TRY(read_i64_attr(f, path, "step_in_epoch", &cs->legacy_micro_batch));
        if (cs->legacy_micro_batch < 0) DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'step_in_epoch': negative position", path);
    }
    DDP_TRY(read_i64_attr(f, path, "global_step", &cs->global_step));
    DDP_TRY(read_i64_attr(f, path, "optim_step", &cs->optim_step));
    DDP_TRY(read_i64_attr(f, path, "seed", &seed));
    DDP_TRY(read_i64_attr(f, path, "world_size", &cs->world_size));
    cs->seed = (uint64_t)seed;
    DDP_TRY(read_i64_attr(f, path, "bad_epochs", &cs->bad_epochs));
    DDP_TRY(read_i64_attr(f, path, "global_batch", &cs->global_batch));
    cs->global_batch_rows = 0; /* absent in checkpoints of sample-count runs written before token budgets */
    if (H5Aexists(f, "global_batch_rows") > 0) DDP_TRY(read_i64_attr(f, path, "global_batch_rows", &cs->global_batch_rows));
    snprintf(cs->shuffle, sizeof cs->shuffle, "full");
    if (H5Aexists(f, "shuffle") > 0) {
        char *sh = NULL;
        DDP_TRY(read_str_attr(f, path, "shuffle", &sh));
        snprintf(cs->shuffle, sizeof cs->shuffle, "%s", sh);
        free(sh);
    }
    DDP_TRY(read_attr(f, path, "best_score", H5T_NATIVE_DOUBLE, &cs->best_score));
    {
        char *mon = NULL;
        DDP_TRY(read_str_attr(f, path, "monitor", &mon));
        snprintf(cs->monitor, sizeof cs->monitor, "%s", mon);
        free(mon);
    }
    cs->mode_max = -1;
    if (H5Aexists(f, "mode") > 0) {
        char *mode = NULL;
        DDP_TRY(read_str_attr(f, path, "mode", &mode));
        cs->mode_max = strcmp(mode, "max") == 0;
        free(mode);
    }
    if (H5Aexists(f, "skipped_steps") > 0) DDP_TRY(read_i64_attr(f, path, "skipped_steps", &cs->skipped_steps));
    cs->precision = DDP_PRECISION_FP32;
    if (H5Aexists(f, "precision") > 0) {
        char *prec = NULL;
        DDP_TRY(read_str_attr(f, path, "precision", &prec));
        for (int p = DDP_PRECISION_FP32; p <= DDP_PRECISION_BF16; p++)
            if (!strcmp(prec, ddp_precision_name((ddp_precision)p))) cs->precision = (ddp_precision)p;
        free(prec);
    }
    DDP_TRY(read_str_attr(f, path, "topk", &cs->topk_json));
    if (cs->world_size < 1 || cs->world_size > (1 << 24))
        DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'world_size': %lld out of range", path, (long long)cs->world_size);
    cs->best_local = ddp_calloc((size_t)cs->world_size, sizeof(double));
    if (!cs->best_local) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    for (int64_t r = 0; r < cs->world_size; r++) cs->best_local[r] = NAN;
    if (H5Lexists(f, "best_local", H5P_DEFAULT) > 0) {
        hid_t d = H5Dopen2(f, "best_local", H5P_DEFAULT);
        hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
        hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
        herr_t e = np == cs->world_size ? H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, cs->best_local) : -1;
        if (sp >= 0) H5Sclose(sp);
        if (d >= 0) H5Dclose(d);
        if (e < 0) DDP_FAIL(DDP_ERR_FORMAT, "%s: dataset '/best_local': unreadable or wrong length", path);
    }
    DDP_TRY(read_tensors(f, path, "params", model, params));
    if (m && v) {
        DDP_TRY(read_tensors(f, path, "optim/exp_avg", model, m));
        DDP_TRY(read_tensors(f, path, "optim/exp_avg_sq", model, v));
    }
done:
    H5Fclose(f);
    if (st != DDP_OK) {
        free(cs->best_local);
        free(cs->topk_json);
        cs->best_local = NULL;
        cs->topk_json = NULL;
    }
    return st;
}

static ddp_status dims2(hid_t f, const char *path, const char *name, hsize_t *dims)
{
    hid_t d = H5Lexists(f, "params", H5P_DEFAULT) > 0 && H5Lexists(f, name, H5P_DEFAULT) > 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    if (d < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': missing (not an mpiddp reference-model checkpoint?)", path, name);
    hid_t sp = H5Dget_space(d);
    int r = H5Sget_simple_extent_ndims(sp);
    if (r == 2) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(d);
    if (r != 2) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': wrong rank %d (expected 2)", path, name, r);
    return DDP_OK;
}

ddp_status ddp_ckpt_peek_refmodel(const char *path, int64_t *dim, int64_t *hidden, int64_t *classes)
{
    ddp_h5_quiet();
    if (access(path, R_OK) != 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    if (!ddp_h5_is_hdf5(path)) return ddp_set_error(DDP_ERR_FORMAT, "%s: not an HDF5 file (or truncated)", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: cannot be opened by HDF5 (truncated?)", path);
    hsize_t w1[2] = {0, 0}, w3[2] = {0, 0};
    ddp_status st = dims2(f, path, "params/l1.weight", w1);
    if (st == DDP_OK) st = dims2(f, path, "params/l3.weight", w3);
    H5Fclose(f);
    if (st != DDP_OK) return st;
    *hidden = (int64_t)w1[0];
    *dim = (int64_t)w1[1];
    *classes = (int64_t)w3[0];
    if ((int64_t)w3[1] != *hidden) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/params/l3.weight': shape does not match l1.weight", path);
    return DDP_OK;
}

static ddp_status peek_transformer(hid_t f, const char *path, ddp_model_config *c)
{
    hsize_t wi[2] = {0, 0}, wh[2] = {0, 0};
    int64_t v[6];
    static const char *names[6] = {"model_layers", "model_heads", "model_ff", "model_max_positions", "model_positions",
                                   "model_hidden"};
    DDP_CHECK(dims2(f, path, "params/inp.weight", wi));
    DDP_CHECK(dims2(f, path, "params/head.weight", wh));
    for (int k = 0; k < 6; k++) DDP_CHECK(read_i64_attr(f, path, names[k], &v[k]));
    DDP_CHECK(read_attr(f, path, "model_dropout", H5T_NATIVE_DOUBLE, &c->dropout));
    c->kind = DDP_MODEL_TRANSFORMER;
    c->hidden = (int64_t)wi[0];
    c->dim = (int64_t)wi[1];
    c->classes = (int64_t)wh[0];
    c->layers = (int)v[0], c->heads = (int)v[1], c->ff = v[2], c->max_positions = v[3], c->positions = (int)v[4];
    if (v[5] != c->hidden || (int64_t)wh[1] != c->hidden || c->layers < 1 || c->heads < 1 || c->hidden % c->heads)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: attributes 'model_*': inconsistent with /params/inp.weight and head.weight", path);
    return DDP_OK;
}

ddp_status ddp_ckpt_peek_model(const char *path, ddp_model_config *c)
{
    ddp_model_config_default(c);
    ddp_h5_quiet();
    if (access(path, R_OK) != 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    if (!ddp_h5_is_hdf5(path)) return ddp_set_error(DDP_ERR_FORMAT, "%s: not an HDF5 file (or truncated)", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: cannot be opened by HDF5 (truncated?)", path);
    char *kind = NULL;
    ddp_status st = H5Aexists(f, "model") > 0 ? read_str_attr(f, path, "model", &kind) : DDP_OK;
    int tx = st == DDP_OK && kind && !strcmp(kind, "transformer");
    if (st == DDP_OK && tx) st = peek_transformer(f, path, c);
    H5Fclose(f);
    free(kind);
    if (st != DDP_OK || tx) return st;
    c->kind = DDP_MODEL_MLP; /* "mlp", or "reference" in checkpoints of earlier versions */
    return ddp_ckpt_peek_refmodel(path, &c->dim, &c->hidden, &c->classes);
}

