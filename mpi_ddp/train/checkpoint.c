/* checkpoint.c — checkpoint files; see checkpoint.h. */
#include "mpi_ddp/train/checkpoint.h"

#include "io/shard.h" /* ddp_h5_quiet */
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/train/ckpt_verify.h"
#include "mpi_ddp/train/lr_schedule.h"

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

#define CK(call, ...)                                        \
    do {                                                     \
        if ((call) < 0) DDP_FAIL(DDP_ERR_HDF5, __VA_ARGS__); \
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
        e = ddp_ckpt_write_dataset(g, s->name, s->ndim, dims, data + off, sizeof *data);
        off += n;
    }
    if (H5Gclose(g) < 0) e = -1;
    return e;
}

static ddp_status write_attrs(hid_t f, const char *tmp, const ddp_model *model, const ddp_ckpt_state *cs)
{
    ddp_status st = DDP_OK;
    CK(ddp_h5_attr_str(f, "format", "mpiddp-checkpoint"), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "version", 1), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "checksums", DDP_CKPT_CHECKSUMS), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "model", model->name ? model->name : ""), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "epoch", cs->epoch), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "optim_step_in_epoch", cs->optim_step_in_epoch), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "samples_in_epoch", cs->samples_in_epoch), "%s: writing attributes", tmp);
    if (cs->prev_epoch_steps >= 0)
        CK(ddp_h5_attr_i64(f, "prev_epoch_steps", cs->prev_epoch_steps), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "global_step", cs->global_step), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "optim_step", cs->optim_step), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "seed", (int64_t)cs->seed), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "world_size", cs->world_size), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_f64(f, "best_score", cs->best_score), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "monitor", cs->monitor), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "mode", cs->mode_max ? "max" : "min"), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "skipped_steps", cs->skipped_steps), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_f64(f, "weight_decay", cs->weight_decay), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_f64(f, "adamw_beta1", cs->beta1), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_f64(f, "adamw_beta2", cs->beta2), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_f64(f, "adamw_eps", cs->eps), "%s: writing attributes", tmp);
    if (cs->lr_schedule) {
        CK(ddp_h5_attr_str(f, "lr_schedule", cs->lr_schedule), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "lr_warmup_steps", cs->lr_warmup_steps), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "lr_start_step", cs->lr_start_step), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_i64(f, "lr_total_steps", cs->lr_total_steps), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_f64(f, "lr", cs->lr), "%s: writing attributes", tmp);
        CK(ddp_h5_attr_f64(f, "min_lr", cs->min_lr), "%s: writing attributes", tmp);
    }
    CK(ddp_h5_attr_i64(f, "bad_epochs", cs->bad_epochs), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "global_batch", cs->global_batch), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_i64(f, "global_batch_rows", cs->global_batch_rows), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "shuffle", cs->shuffle[0] ? cs->shuffle : "full"), "%s: writing attributes", tmp);
    if (cs->sampling[0]) CK(ddp_h5_attr_str(f, "sampling", cs->sampling), "%s: writing attributes", tmp);
    CK(ddp_h5_attr_str(f, "topk", cs->topk_json ? cs->topk_json : "[]"), "%s: writing attributes", tmp);
    if (cs->best_local) {
        hsize_t w = (hsize_t)cs->world_size;
        CK(ddp_ckpt_write_dataset(f, "best_local", 1, &w, cs->best_local, sizeof *cs->best_local),
           "%s: writing /best_local", tmp);
    }
    if (cs->best_local_es) {
        hsize_t w = (hsize_t)cs->world_size;
        CK(ddp_ckpt_write_dataset(f, "best_local_es", 1, &w, cs->best_local_es, sizeof *cs->best_local_es),
           "%s: writing /best_local_es", tmp);
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
done:
    return st;
}

/* The in-memory file's buffer, through HDF5's file image callbacks: the core driver allocates it here, and at
 * H5Fclose hands it to image_free, which keeps it — the closed file's exact bytes, with no copy (H5Fget_file_image
 * would copy, and in HDF5 1.10 leaves a stale superblock checksum in images of 1.8-format files). */
typedef struct {
    void *mem;
    size_t size; /* allocated */
    int closed;  /* the driver closed the file and left mem to us */
} mem_image;

static void *img_realloc(void *p, size_t n, H5FD_file_image_op_t op, void *u)
{
    (void)op;
    mem_image *im = u;
    void *q = realloc(p, n ? n : 1);
    if (q && (p == im->mem || !im->mem)) im->mem = q, im->size = n;
    return q;
}
static void *img_malloc(size_t n, H5FD_file_image_op_t op, void *u) { return img_realloc(NULL, n, op, u); }
static void *img_memcpy(void *d, const void *s, size_t n, H5FD_file_image_op_t op, void *u)
{
    (void)op, (void)u;
    return memcpy(d, s, n);
}
static herr_t img_free(void *p, H5FD_file_image_op_t op, void *u)
{
    mem_image *im = u;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && p == im->mem)
        im->closed = 1; /* ours now */
    else {
        if (p == im->mem) im->mem = NULL;
        free(p);
    }
    return 0;
}
static void *img_udata_copy(void *u) { return u; } /* every copy of the property list shares one mem_image */
static herr_t img_udata_free(void *u)
{
    (void)u;
    return 0;
}

/* The closed file's length: the end-of-file address of its superblock (version 2 or 3, 8-byte offsets, as the
 * libver bounds below make it; File Format Specification §II.A). The buffer may extend past it. */
static int64_t image_eof(const mem_image *im)
{
    const unsigned char *b = im->mem;
    if (!b || im->size < 48 || memcmp(b, "\211HDF\r\n\032\n", 8) != 0 || (b[8] != 2 && b[8] != 3) || b[9] != 8)
        return -1;
    uint64_t eof = 0;
    for (int k = 7; k >= 0; k--) eof = eof << 8 | b[28 + k];
    return eof <= im->size ? (int64_t)eof : -1;
}

/* The whole checkpoint as an HDF5 file in memory (the core driver without a backing store): HDF5 never touches
 * the disk, so a full disk is our write()'s error and no HDF5 file stays open after it. The 1.8 format (object
 * header v2, superblock v2) gives the metadata HDF5's own checksums. Rank 0 holds the image once (the file's
 * size, about 12 bytes per parameter) while it is written. *im is allocated: the caller frees im->mem and im. */
static ddp_status build_image(const char *tmp, const ddp_model *model, const float *params, const float *m,
                              const float *v, const ddp_ckpt_state *cs, mem_image **imp, size_t *len)
{
    ddp_status st = DDP_OK;
    /* the buffer grows by realloc (mremap for large blocks: no copy) as datasets are written; a single allocation
     * of the whole size up front would make the driver zero it all first (a second pass over fresh pages) */
    size_t incr = (size_t)8 << 20;
    mem_image *im = ddp_calloc(1, sizeof *im);
    if (!im) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    H5FD_file_image_callbacks_t cb = {img_malloc,     img_memcpy,     img_realloc, img_free,
                                      img_udata_copy, img_udata_free, im};
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    if (fapl < 0 || H5Pset_fapl_core(fapl, incr, 0) < 0 ||
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0 || H5Pset_file_image_callbacks(fapl, &cb) < 0)
        DDP_FAIL(DDP_ERR_HDF5, "%s: HDF5 file access properties", tmp);
    f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) DDP_FAIL(DDP_ERR_HDF5, "%s: cannot create the checkpoint in memory (out of memory?)", tmp);
    DDP_TRY(write_attrs(f, tmp, model, cs));
    CK(write_tensors(f, "params", model, params), "%s: writing /params (out of memory?)", tmp);
    if (m && v) {
        hid_t g = H5Gcreate2(f, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CK(g, "%s: creating /optim", tmp);
        CK(H5Gclose(g), "%s: creating /optim", tmp);
        CK(write_tensors(f, "optim/exp_avg", model, m), "%s: writing /optim/exp_avg (out of memory?)", tmp);
        CK(write_tensors(f, "optim/exp_avg_sq", model, v), "%s: writing /optim/exp_avg_sq (out of memory?)", tmp);
    }
done:
    if (f >= 0 && H5Fclose(f) < 0 && st == DDP_OK)
        st = ddp_set_error(DDP_ERR_HDF5, "%s: HDF5 close of the in-memory file", tmp);
    if (fapl >= 0 && H5Pclose(fapl) < 0 && st == DDP_OK)
        st = ddp_set_error(DDP_ERR_HDF5, "%s: HDF5 property list close", tmp);
    int64_t eof = st == DDP_OK && im->closed ? image_eof(im) : -1;
    if (st == DDP_OK && eof < 0)
        st = ddp_set_error(DDP_ERR_HDF5, "%s: the in-memory HDF5 file is not a complete image", tmp);
    if (st == DDP_OK) {
        *imp = im;
        *len = (size_t)eof;
    } else if (im->closed || f < 0) { /* HDF5 holds no pointer to im */
        free(im->mem);
        free(im);
    } /* else: HDF5 may still hold the file and im; leave both to it */
    return st;
}

ddp_status ddp_ckpt_write(const char *path, const ddp_model *model, const float *params, const float *m, const float *v,
                          const ddp_ckpt_state *cs)
{
    ddp_h5_quiet();
    char tmp[4200], dcopy[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    snprintf(dcopy, sizeof dcopy, "%s", path);
    mem_image *img = NULL;
    size_t len = 0;
    ddp_status st = build_image(tmp, model, params, m, v, cs, &img, &len);
    if (st != DDP_OK) return st;                     /* nothing on disk yet */
    st = ddp_write_file_durable(tmp, img->mem, len); /* removes tmp when it fails */
    free(img->mem);
    free(img);
    if (st != DDP_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", ddp_last_error());
        return ddp_set_error(DDP_ERR_IO, "%s: checkpoint not saved: %s", path, why);
    }
    { /* test hook: die between writing the temporary file and the rename (atomicity test) */
        static int64_t writes;
        int64_t die_at = ddp_knob_int(DDP_KNOB_TEST_DIE_IN_SAVE);
        if (die_at > 0 && ++writes == die_at) raise(SIGKILL);
    }
    if (rename(tmp, path) != 0) DDP_FAIL(DDP_ERR_IO, "%s: rename: %s", path, strerror(errno));
    DDP_TRY(ddp_fsync_path(dirname(dcopy), 1));
done:
    if (st != DDP_OK) unlink(tmp);
    return st;
}

/* A scalar attribute read as mem_type (HDF5 converts): missing or unreadable is a format error. */
static ddp_status read_attr(hid_t f, const char *path, const char *name, hid_t mem_type, void *v)
{
    htri_t ex = H5Aexists(f, name);
    if (ex < 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: checkpoint attribute '%s': unreadable (%s)", path, name,
                             ddp_ckpt_h5_cause());
    hid_t a = ex > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
    herr_t e = a < 0 ? -1 : H5Aread(a, mem_type, v);
    if (a >= 0 && H5Aclose(a) < 0) e = -1;
    if (e < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: checkpoint attribute '%s': missing or unreadable", path, name);
    return DDP_OK;
}

static ddp_status read_i64_attr(hid_t f, const char *path, const char *name, int64_t *v)
{
    return read_attr(f, path, name, H5T_NATIVE_INT64, v);
}

static ddp_status read_str_attr(hid_t f, const char *path, const char *name, char **out)
{
    htri_t ex = H5Aexists(f, name);
    if (ex < 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: checkpoint attribute '%s': unreadable (%s)", path, name,
                             ddp_ckpt_h5_cause());
    hid_t a = ex > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
    if (a < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: checkpoint attribute '%s': missing", path, name);
    hid_t t = H5Aget_type(a);
    size_t n = t < 0 ? 0 : H5Tget_size(t);
    int fixed_string = n > 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) == 0;
    char *buf = fixed_string ? ddp_calloc(n + 1, 1) : NULL;
    herr_t e = buf ? H5Aread(a, t, buf) : -1;
    if (t >= 0 && H5Tclose(t) < 0) e = -1;
    if (H5Aclose(a) < 0) e = -1;
    if (fixed_string && !buf)
        return ddp_set_error(DDP_ERR_NOMEM, "%s: checkpoint attribute '%s': out of memory", path, name);
    if (e < 0) {
        free(buf);
        return ddp_set_error(DDP_ERR_FORMAT, "%s: checkpoint attribute '%s': unreadable", path, name);
    }
    *out = buf;
    return DDP_OK;
}

/* Opens a checkpoint for reading: a regular file (a FIFO would block, a directory deserves its own words) that
 * HDF5 recognises. */
static ddp_status open_ckpt(const char *path, hid_t *f)
{
    ddp_h5_quiet();
    *f = -1;
    DDP_CHECK(ddp_check_regular_file(path, "checkpoint"));
    if (!ddp_h5_is_hdf5(path)) return ddp_set_error(DDP_ERR_FORMAT, "%s: not an HDF5 file (or truncated)", path);
    *f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (*f < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: cannot be opened by HDF5 (truncated?)", path);
    return DDP_OK;
}

/* Closes f, keeping the first error. */
static ddp_status close_ckpt(hid_t f, const char *path, ddp_status st)
{
    if (f >= 0 && H5Fclose(f) < 0 && st == DDP_OK) return ddp_set_error(DDP_ERR_HDF5, "%s: HDF5 close failed", path);
    return st;
}

static ddp_status check_heads(hid_t f, const char *path, const ddp_model_config *mc, int cli);

ddp_status ddp_ckpt_read(const char *path, const ddp_model *model, const ddp_model_config *mc, float *params, float *m,
                         float *v, ddp_ckpt_state *cs, int cli)
{
    hid_t f;
    DDP_CHECK(open_ckpt(path, &f));
    memset(cs, 0, sizeof *cs);
    ddp_status st = check_heads(f, path, mc, cli); /* before anything else is read */
    int64_t version = 0, seed = 0;
    if (st != DDP_OK) goto done;
    {
        char *fmt = NULL;
        DDP_TRY(read_str_attr(f, path, "format", &fmt));
        int ok = strcmp(fmt, "mpiddp-checkpoint") == 0;
        free(fmt);
        if (!ok) DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'format': not an mpiddp checkpoint", path);
    }
    DDP_TRY(read_i64_attr(f, path, "version", &version));
    if (version != 1)
        DDP_FAIL(DDP_ERR_FORMAT, "%s: checkpoint version %lld is not supported (expected 1)", path, (long long)version);
    htri_t sums = H5Aexists(f, "checksums");
    if (sums < 0) DDP_FAIL(DDP_ERR_FORMAT, "%s: checkpoint attribute 'checksums': unreadable", path);
    if (sums > 0) {
        char *kind = NULL;
        DDP_TRY(read_str_attr(f, path, "checksums", &kind));
        int ok = strcmp(kind, DDP_CKPT_CHECKSUMS) == 0;
        free(kind);
        if (!ok)
            DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'checksums': unknown kind (expected " DDP_CKPT_CHECKSUMS ")", path);
    }
    cs->no_checksums = !sums; /* written before checksums: loaded unverified (finiteness still checked) */
    DDP_TRY(read_i64_attr(f, path, "epoch", &cs->epoch));
    cs->legacy_micro_batch = -1;
    if (H5Aexists(f, "optim_step_in_epoch") > 0) {
        DDP_TRY(read_i64_attr(f, path, "optim_step_in_epoch", &cs->optim_step_in_epoch));
        DDP_TRY(read_i64_attr(f, path, "samples_in_epoch", &cs->samples_in_epoch));
        if (cs->optim_step_in_epoch < 0 || cs->samples_in_epoch < 0)
            DDP_FAIL(DDP_ERR_FORMAT, "%s: attributes 'optim_step_in_epoch'/'samples_in_epoch': negative position",
                     path);
    } else { /* written before positions were world-size independent: a micro-batch index */
        DDP_TRY(read_i64_attr(f, path, "step_in_epoch", &cs->legacy_micro_batch));
        if (cs->legacy_micro_batch < 0)
            DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'step_in_epoch': negative position", path);
    }
    cs->prev_epoch_steps = -1; /* absent in checkpoints of epoch 0 and in those written before it was recorded */
    if (H5Aexists(f, "prev_epoch_steps") > 0)
        DDP_TRY(read_i64_attr(f, path, "prev_epoch_steps", &cs->prev_epoch_steps));
    DDP_TRY(read_i64_attr(f, path, "global_step", &cs->global_step));
    DDP_TRY(read_i64_attr(f, path, "optim_step", &cs->optim_step));
    /* the steps of an epoch before this position, and of this epoch: within the run's steps (a resume at an epoch's
     * end carries them into its summary and next checkpoint) */
    if (cs->prev_epoch_steps != -1 && (cs->prev_epoch_steps < 0 || cs->prev_epoch_steps > cs->global_step))
        DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'prev_epoch_steps': %lld out of range (0 to global_step %lld)", path,
                 (long long)cs->prev_epoch_steps, (long long)cs->global_step);
    if (cs->optim_step_in_epoch > cs->global_step)
        DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'optim_step_in_epoch': %lld out of range (0 to global_step %lld)", path,
                 (long long)cs->optim_step_in_epoch, (long long)cs->global_step);
    DDP_TRY(read_i64_attr(f, path, "seed", &seed));
    DDP_TRY(read_i64_attr(f, path, "world_size", &cs->world_size));
    cs->seed = (uint64_t)seed;
    DDP_TRY(read_i64_attr(f, path, "bad_epochs", &cs->bad_epochs));
    DDP_TRY(read_i64_attr(f, path, "global_batch", &cs->global_batch));
    cs->global_batch_rows = 0; /* absent in checkpoints of sample-count runs written before token budgets */
    if (H5Aexists(f, "global_batch_rows") > 0)
        DDP_TRY(read_i64_attr(f, path, "global_batch_rows", &cs->global_batch_rows));
    snprintf(cs->shuffle, sizeof cs->shuffle, "full");
    if (H5Aexists(f, "shuffle") > 0) {
        char *sh = NULL;
        DDP_TRY(read_str_attr(f, path, "shuffle", &sh));
        snprintf(cs->shuffle, sizeof cs->shuffle, "%s", sh);
        free(sh);
    }
    cs->sampling[0] = 0;
    if (H5Aexists(f, "sampling") > 0) {
        char *sa = NULL;
        DDP_TRY(read_str_attr(f, path, "sampling", &sa));
        snprintf(cs->sampling, sizeof cs->sampling, "%s", sa);
        free(sa);
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
    cs->weight_decay = NAN; /* absent in checkpoints written before it was recorded */
    if (H5Aexists(f, "weight_decay") > 0) {
        DDP_TRY(read_attr(f, path, "weight_decay", H5T_NATIVE_DOUBLE, &cs->weight_decay));
        if (!(cs->weight_decay >= 0 && isfinite(cs->weight_decay))) /* as ddp_train_config_check */
            DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'weight_decay': %g is not a number >= 0", path, cs->weight_decay);
    }
    const char *adamw[3] = {"adamw_beta1", "adamw_beta2", "adamw_eps"}; /* absent: written before they were recorded */
    double *adamw_v[3] = {&cs->beta1, &cs->beta2, &cs->eps};
    for (int k = 0; k < 3; k++) {
        *adamw_v[k] = NAN;
        if (H5Aexists(f, adamw[k]) <= 0) continue;
        DDP_TRY(read_attr(f, path, adamw[k], H5T_NATIVE_DOUBLE, adamw_v[k]));
        double x = *adamw_v[k]; /* what ddp_train_config_check accepts: a resume's notice compares them */
        if (k < 2 ? !(x >= 0 && x < 1) : !(x > 0 && isfinite(x)))
            DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute '%s': %g is not %s", path, adamw[k], x,
                     k < 2 ? "in [0, 1)" : "a positive number");
    }
    cs->dropout = NAN; /* recorded with a built-in model's hyperparameters */
    if (H5Aexists(f, "model_dropout") > 0) {
        DDP_TRY(read_attr(f, path, "model_dropout", H5T_NATIVE_DOUBLE, &cs->dropout));
        if (!(cs->dropout >= 0 && cs->dropout < 1)) /* as the model's configuration check */
            DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'model_dropout': %g is not in [0, 1)", path, cs->dropout);
    }
    cs->precision = DDP_PRECISION_FP32;
    if (H5Aexists(f, "precision") > 0) {
        char *prec = NULL;
        DDP_TRY(read_str_attr(f, path, "precision", &prec));
        for (int p = DDP_PRECISION_FP32; p <= DDP_PRECISION_BF16; p++)
            if (!strcmp(prec, ddp_precision_name((ddp_precision)p))) cs->precision = (ddp_precision)p;
        free(prec);
    }
    if (H5Aexists(f, "lr_schedule") > 0) { /* recorded since learning-rate schedules exist */
        char *name = NULL;
        DDP_TRY(read_str_attr(f, path, "lr_schedule", &name));
        int id = ddp_lr_schedule_id(name);
        free(name);
        cs->lr_schedule = id < 0 ? "?" : ddp_lr_schedule_name(id);
        DDP_TRY(read_i64_attr(f, path, "lr_warmup_steps", &cs->lr_warmup_steps));
        DDP_TRY(read_i64_attr(f, path, "lr_total_steps", &cs->lr_total_steps));
        if (H5Aexists(f, "lr_start_step") > 0) DDP_TRY(read_i64_attr(f, path, "lr_start_step", &cs->lr_start_step));
        DDP_TRY(read_attr(f, path, "lr", H5T_NATIVE_DOUBLE, &cs->lr));
        DDP_TRY(read_attr(f, path, "min_lr", H5T_NATIVE_DOUBLE, &cs->min_lr));
        if (cs->lr_warmup_steps < 0 || cs->lr_start_step < 0 || cs->lr_total_steps < cs->lr_start_step)
            DDP_FAIL(DDP_ERR_FORMAT, "%s: attributes 'lr_warmup_steps'/'lr_start_step'/'lr_total_steps': out of range",
                     path);
    }
    DDP_TRY(read_str_attr(f, path, "topk", &cs->topk_json));
    if (cs->world_size < 1 || cs->world_size > (1 << 24))
        DDP_FAIL(DDP_ERR_FORMAT, "%s: attribute 'world_size': %lld out of range", path, (long long)cs->world_size);
    cs->best_local = ddp_calloc((size_t)cs->world_size, sizeof(double));
    cs->best_local_es = ddp_calloc((size_t)cs->world_size, sizeof(double));
    if (!cs->best_local || !cs->best_local_es) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    for (int64_t r = 0; r < cs->world_size; r++) cs->best_local[r] = NAN;
    int found = 0;
    DDP_TRY(ddp_ckpt_read_per_rank(f, path, "best_local", sums > 0, cs->world_size, cs->best_local, &found));
    DDP_TRY(ddp_ckpt_read_per_rank(f, path, "best_local_es", sums > 0, cs->world_size, cs->best_local_es, &found));
    if (!found) memcpy(cs->best_local_es, cs->best_local, (size_t)cs->world_size * sizeof(double)); /* older file */
    if (H5Aexists(f, "model") > 0) { /* another built-in model: say so, before a tensor of it is found missing */
        char *kind = NULL;
        DDP_TRY(read_str_attr(f, path, "model", &kind));
        const char *saved = !strcmp(kind, "reference") ? "mlp" : kind, *mine = model->name ? model->name : "";
        int builtin = (!strcmp(saved, "mlp") || !strcmp(saved, "transformer")) &&
                      (!strcmp(mine, "mlp") || !strcmp(mine, "transformer"));
        char o[2][96];
        if (builtin && strcmp(saved, mine) != 0)
            st = ddp_set_error(DDP_ERR_ARG, "%s holds a%s %s model (%s), not the %s this run builds (%s)", path,
                               saved[0] == 'm' ? "n" : "", saved, ddp_opt_set(o[0], 96, cli, DDP_OPT_MODEL, saved),
                               mine, ddp_opt_set(o[1], 96, cli, DDP_OPT_MODEL, mine));
        free(kind);
        if (st != DDP_OK) goto done;
    }
    DDP_TRY(ddp_ckpt_read_tensors(f, path, sums > 0, "params", model, params, cli));
    /* without m and v (eval) the moments are still verified: a corrupt file is refused whoever reads it */
    DDP_TRY(ddp_ckpt_read_tensors(f, path, sums > 0, "optim/exp_avg", model, m && v ? m : NULL, cli));
    DDP_TRY(ddp_ckpt_read_tensors(f, path, sums > 0, "optim/exp_avg_sq", model, m && v ? v : NULL, cli));
done:
    st = close_ckpt(f, path, st);
    if (st != DDP_OK) {
        free(cs->best_local);
        free(cs->best_local_es);
        free(cs->topk_json);
        cs->best_local = cs->best_local_es = NULL;
        cs->topk_json = NULL;
    }
    return st;
}

static ddp_status dims2(hid_t f, const char *path, const char *name, hsize_t *dims)
{
    int ex = ddp_ckpt_path_exists(f, name);
    hid_t d = ex > 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    if (ex == 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': missing (not an mpiddp reference-model checkpoint?)",
                             path, name);
    if (d < 0)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': unreadable (%s)", path, name, ddp_ckpt_h5_cause());
    hid_t sp = H5Dget_space(d);
    int r = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    if (r == 2 && H5Sget_simple_extent_dims(sp, dims, NULL) < 0) r = -1;
    if (sp >= 0 && H5Sclose(sp) < 0) r = -1;
    if (H5Dclose(d) < 0) r = -1;
    if (r < 0) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': unreadable (corrupt file)", path, name);
    if (r != 2) return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/%s': wrong rank %d (expected 2)", path, name, r);
    return DDP_OK;
}

ddp_status ddp_ckpt_peek_refmodel(const char *path, int64_t *dim, int64_t *hidden, int64_t *classes)
{
    hid_t f;
    DDP_CHECK(open_ckpt(path, &f));
    hsize_t w1[2] = {0, 0}, w3[2] = {0, 0};
    ddp_status st = dims2(f, path, "params/l1.weight", w1);
    if (st == DDP_OK) st = dims2(f, path, "params/l3.weight", w3);
    st = close_ckpt(f, path, st);
    if (st != DDP_OK) return st;
    *hidden = (int64_t)w1[0];
    *dim = (int64_t)w1[1];
    *classes = (int64_t)w3[0];
    if ((int64_t)w3[1] != *hidden)
        return ddp_set_error(DDP_ERR_FORMAT, "%s: dataset '/params/l3.weight': shape does not match l1.weight", path);
    return DDP_OK;
}

static ddp_status peek_transformer(hid_t f, const char *path, ddp_model_config *c)
{
    hsize_t wi[2] = {0, 0}, wh[2] = {0, 0};
    int64_t v[6];
    static const char *names[6] = {"model_layers",        "model_heads",     "model_ff",
                                   "model_max_positions", "model_positions", "model_hidden"};
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
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: attributes 'model_*': inconsistent with /params/inp.weight and head.weight", path);
    return DDP_OK;
}

ddp_status ddp_ckpt_peek_model(const char *path, ddp_model_config *c)
{
    ddp_model_config_default(c);
    hid_t f;
    DDP_CHECK(open_ckpt(path, &f));
    char *kind = NULL;
    ddp_status st = H5Aexists(f, "model") > 0 ? read_str_attr(f, path, "model", &kind) : DDP_OK;
    int tx = st == DDP_OK && kind && !strcmp(kind, "transformer");
    if (st == DDP_OK && tx) st = peek_transformer(f, path, c);
    st = close_ckpt(f, path, st);
    free(kind);
    if (st != DDP_OK || tx) return st;
    c->kind = DDP_MODEL_MLP; /* "mlp", or "reference" in checkpoints of earlier versions */
    return ddp_ckpt_peek_refmodel(path, &c->dim, &c->hidden, &c->classes);
}

/* ddp_ckpt_read's check of a resumed Transformer's --heads, in its open file f (ddp_ckpt_peek_model's reading). */
static ddp_status check_heads(hid_t f, const char *path, const ddp_model_config *mc, int cli)
{
    ddp_model_config saved;
    if (!mc || mc->kind != DDP_MODEL_TRANSFORMER) return DDP_OK;
    ddp_model_config_default(&saved);
    /* a file peek cannot read (no recorded hyperparameters: a model built through the library) is the read's;
     * out of memory is this check's own failure (else it would be skipped silently) */
    char *kind = NULL;
    ddp_status st = H5Aexists(f, "model") > 0 ? read_str_attr(f, path, "model", &kind) : DDP_OK;
    int tx = st == DDP_OK && kind && !strcmp(kind, "transformer");
    free(kind);
    if (st == DDP_OK && tx) st = peek_transformer(f, path, &saved);
    if (st == DDP_ERR_NOMEM) return st;
    if (st != DDP_OK || !tx) return DDP_OK;
    if (saved.heads == mc->heads) return DDP_OK;
    char a[96], b[96];
    return ddp_set_error(DDP_ERR_ARG,
                         "%s: saved with %s; this run uses %s (the same tensors would be split into other attention "
                         "heads): resume with %s",
                         path, ddp_opt_fmt(a, sizeof a, cli, DDP_OPT_HEADS, "%d", saved.heads),
                         ddp_opt_fmt(b, sizeof b, cli, DDP_OPT_HEADS, "%d", mc->heads), a);
}
