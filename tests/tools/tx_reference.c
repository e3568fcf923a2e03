/* tx_reference.c — `tx_reference OUT.h5 [--dropout P]`: runs the Transformer encoder (CPU backend) on a
 * packed batch with lengths 1..64 (1-row samples included, d = 24 not a power of two) and writes its
 * configuration, batch, initial parameters, per-sample losses, summed gradients and the parameters after
 * two AdamW steps, tensor by tensor under their state_dict names, for tests/py/torch_transformer.py. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/comm/comm.h"
#include "mpiddp.h"
#include "tests/unit/test_data.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIE(...)                      \
    do {                              \
        fprintf(stderr, __VA_ARGS__); \
        fputc('\n', stderr);          \
        exit(1);                      \
    } while (0)

static void put(hid_t f, const char *name, hid_t mt, hid_t ft, int rank, hsize_t d0, hsize_t d1, const void *data)
{
    hsize_t dims[2] = {d0, d1};
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (sp < 0 || lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0) DIE("hdf5: %s", name);
    hid_t d = H5Dcreate2(f, name, ft, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) DIE("hdf5: cannot write %s", name);
    H5Dclose(d);
    H5Pclose(lcpl);
    H5Sclose(sp);
}

static void put_tensors(hid_t f, const char *group, const ddp_model *m, const float *flat)
{
    int64_t k = 0;
    for (int t = 0; t < m->ntensors; t++) {
        const ddp_tensor_spec *s = &m->tensors[t];
        char name[256];
        snprintf(name, sizeof name, "%s/%s", group, s->name);
        put(f, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, s->ndim, (hsize_t)s->shape[0], (hsize_t)s->shape[1], flat + k);
        k += s->shape[0] * (s->ndim == 2 ? s->shape[1] : 1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) DIE("usage: tx_reference OUT.h5 [--dropout P] [--positions 0|1]");
    double dropout = 0.0;
    int positions = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dropout"))
            dropout = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--positions"))
            positions = atoi(argv[i + 1]);
        else
            DIE("unknown option %s", argv[i]);
    }
    ddp_ctx *ctx;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) DIE("%s", ddp_last_error());
    enum { D = 5, B = 8 };
    const int64_t lens[B] = {1, 64, 7, 1, 33, 12, 2, 50};
    int64_t off[B + 1] = {0}, lab[B], ids[B], idx[B];
    for (int s = 0; s < B; s++) {
        off[s + 1] = off[s] + lens[s];
        lab[s] = (s * 7 + 1) % 3;
        ids[s] = 1000 + 17 * s;
        idx[s] = s;
    }
    int64_t R = off[B];
    float *x = malloc((size_t)(R * D) * sizeof *x);
    uint64_t r = 99;
    for (int64_t i = 0; i < R * D; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((r >> 40) & 0xffffff) / 16777216.0f * 4.0f - 2.0f;
    }
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER;
    c.dim = D, c.classes = 3, c.hidden = 24, c.layers = 2, c.heads = 4, c.ff = 40, c.max_positions = 64;
    c.positions = positions, c.dropout = dropout, c.max_batch_rows = R, c.max_batch_samples = B;
    ddp_model m;
    if (ddp_model_create(ctx, DDP_DEVICE_CPU, &c, &m) != DDP_OK) DIE("%s", ddp_last_error());
    int64_t n = ddp_model_num_params(&m);
    float *p0 = calloc((size_t)n, 4), *p1 = calloc((size_t)n, 4), *g = calloc((size_t)n, 4), *mm = calloc((size_t)n, 4),
          *vv = calloc((size_t)n, 4), losses[B];
    if (m.init(m.self, p0, 5) != DDP_OK) DIE("%s", ddp_last_error());
    memcpy(p1, p0, (size_t)n * 4);
    uint8_t pad[B] = {0};
    ddp_batch b = {.nsamples = B,
                   .nrows = R,
                   .dim = D,
                   .offsets = off,
                   .labels = lab,
                   .sample_ids = ids,
                   .indices = idx,
                   .is_pad = pad,
                   .x = x,
                   .step = 3};
    ddp_forward_out o = {.loss = losses};
    if (m.train_step(m.self, &b, p0, g, &o, NULL, NULL) != DDP_OK) DIE("%s", ddp_last_error());
    ddp_backend *be;
    if (ddp_ctx_backend(ctx, DDP_DEVICE_CPU, &be) != DDP_OK) DIE("%s", ddp_last_error());
    double lr = 1e-2, wd = 0.01;
    for (int t = 1; t <= 2; t++) { /* two steps with the batch-averaged gradient */
        ddp_adamw_args a = test_adamw_step(lr, wd, t, 1.0f / B);
        if (be->adamw(be, p1, g, mm, vv, n, &a) != DDP_OK) DIE("%s", ddp_last_error());
    }
    hid_t f = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) DIE("cannot create %s", argv[1]);
    put(f, "x", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 2, (hsize_t)R, D, x);
    put(f, "offsets", H5T_NATIVE_INT64, H5T_STD_I64LE, 1, B + 1, 0, off);
    put(f, "labels", H5T_NATIVE_INT64, H5T_STD_I64LE, 1, B, 0, lab);
    put(f, "losses", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 1, B, 0, losses);
    put_tensors(f, "params0", &m, p0);
    put_tensors(f, "grad_sum", &m, g);
    put_tensors(f, "params2", &m, p1);
    int64_t cfg[8] = {c.dim, c.hidden, c.layers, c.heads, c.ff, c.max_positions, c.classes, c.positions};
    put(f, "config", H5T_NATIVE_INT64, H5T_STD_I64LE, 1, 8, 0, cfg);
    double hp[3] = {lr, wd, dropout};
    put(f, "lr_wd_dropout", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 1, 3, 0, hp);
    H5Fclose(f);
    free(p0), free(p1), free(g), free(mm), free(vv), free(x);
    m.destroy(m.self);
    ddp_finalize(ctx);
    return 0;
}
