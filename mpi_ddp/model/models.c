/* models.c — the built-in models behind one config struct: defaults, names, and ddp_model_create, which
 * builds the MLP (model_mlp.c) or the Transformer encoder (model_transformer.c) on the device's backend
 * (what the two share is in model_common.c). */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/core/status.h"

void ddp_model_config_default(ddp_model_config *c)
{
    *c = (ddp_model_config){.kind = DDP_MODEL_MLP,
                            .hidden = 64,
                            .layers = 2,
                            .heads = 4,
                            .ff = 0,
                            .max_positions = 512,
                            .positions = 1,
                            .dropout = 0.0};
}

const char *ddp_model_kind_name(ddp_model_kind k)
{
    return k == DDP_MODEL_TRANSFORMER ? "transformer" : k == DDP_MODEL_MLP ? "mlp" : "?";
}

ddp_status ddp_model_create_on(ddp_backend *be, const ddp_model_config *c, ddp_model *out)
{
    switch (c->kind) {
    case DDP_MODEL_MLP:
        DDP_CHECK(
            ddp_refmodel_create_on(be, c->dim, c->hidden, c->classes, c->max_batch_rows, c->max_batch_samples, out));
        ddp_refmodel_keep_config(out, c);
        return DDP_OK;
    case DDP_MODEL_TRANSFORMER: return ddp_transformer_create_on(be, c, out);
    }
    return ddp_set_error(DDP_ERR_ARG, "unknown model kind %d", (int)c->kind);
}

ddp_status ddp_model_create(ddp_ctx *ctx, ddp_device dev, const ddp_model_config *c, ddp_model *out)
{
    DDP_CTX_ARG(ctx);
    DDP_NONNULL(c, "c");
    DDP_NONNULL(out, "out");
    ddp_backend *be;
    ddp_status st = ddp_ctx_backend(ctx, dev, &be);
    if (st == DDP_OK) st = ddp_model_create_on(be, c, out);
    return ddp_ctx_local_failure(ctx, st); /* not collective: an out-of-memory is this rank's alone */
}

const ddp_model_config *ddp_model_own_config(const ddp_model *m)
{
    if (!m) return NULL;
    const ddp_model_config *c = ddp_transformer_own_config(m);
    return c ? c : ddp_refmodel_own_config(m);
}

double ddp_model_cost_sq(const ddp_model_config *c)
{
    if (!c || c->kind != DDP_MODEL_TRANSFORMER) return 0.0;
    return 1.0 / (double)(2 * c->hidden + (c->ff > 0 ? c->ff : 2 * c->hidden));
}
