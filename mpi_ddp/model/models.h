/* models.h — the built-in models on a backend the caller gives (tests, benchmarks, eval; include/mpiddp.h uses the
 * context's shared one): the MLP (model_mlp.c), the Transformer encoder (model_transformer.c), either by its
 * configuration (models.c), their token-budget cost and their step timings. */
#ifndef DDP_MODELS_H
#define DDP_MODELS_H

#include "mpi_ddp/backend/backend.h"

/* The reference model on a given backend (ddp_refmodel_create picks the context's shared one). */
ddp_status ddp_refmodel_create_on(ddp_backend *be, int64_t dim, int64_t hidden, int64_t classes, int64_t max_batch_rows,
                                  int64_t max_batch_samples, ddp_model *out);
/* Cumulative seconds the reference model spent in forward and backward of train_step (for benchmarks). */
void ddp_refmodel_times(const ddp_model *m, double *fwd, double *bwd);
/* ddp_model_config_check, its lines naming the CLI's options (cli != 0: --heads 3) or ddp_model_config's fields
 * (cfg.model_config->heads = 3; the public ddp_model_config_check's), optname.h */
ddp_status ddp_model_config_check_as(const ddp_model_config *c, int cli);
/* The Transformer encoder (model_transformer.c) and any built-in model on a given backend (models.c). */
ddp_status ddp_transformer_create_on(ddp_backend *be, const ddp_model_config *c, ddp_model *out);
ddp_status ddp_model_create_on(ddp_backend *be, const ddp_model_config *c, ddp_model *out);
/* The configuration a built-in model was created with (ddp_model_create, ddp_model_create_on), a copy held by the
 * model; NULL for any other model (a caller's own, ddp_refmodel_create's). The trainer uses it where
 * cfg.model_config is NULL and refuses a cfg.model_config that contradicts it (train_config.c). */
const ddp_model_config *ddp_model_own_config(const ddp_model *m);
/* its halves: the Transformer's (model_transformer.c) and the MLP's, which models.c gives its config to after
 * ddp_refmodel_create_on (model_mlp.c) */
const ddp_model_config *ddp_transformer_own_config(const ddp_model *m);
const ddp_model_config *ddp_refmodel_own_config(const ddp_model *m);
void ddp_refmodel_keep_config(ddp_model *m, const ddp_model_config *c);
/* Token budgets: a sample's cost is rows + cost_sq x rows^2; 1/(2d + f) for the transformer (its attention
 * against its per-row work), 0 for the MLP. */
double ddp_model_cost_sq(const ddp_model_config *c);
/* Cumulative seconds of a transformer: forward, backward, attention, GEMMs (the last two on host backends). */
void ddp_transformer_times(const ddp_model *m, double t[4]);
/* 1 when a transformer stores its GEMM-only activations in bf16 (config precision bf16 on an able backend). */
int ddp_transformer_act16(const ddp_model *m);
/* 1 when that model keeps the q|k|v gradient in bf16 (txmodel.dqkv16) */
int ddp_transformer_dqkv16(const ddp_model *m);
/* 1 when that model keeps q|k|v in bf16 (txmodel.qkv16) */
int ddp_transformer_qkv16(const ddp_model *m);
/* 1 when that model's layernorm backward also writes the residual stream's gradient in bf16 (txmodel.dh16) */
int ddp_transformer_dh16(const ddp_model *m);
/* 1 when that model keeps linear1's output in bf16 and recomputes gelu' from it (txmodel.z16) */
int ddp_transformer_z16(const ddp_model *m);
/* 1 when that model's out projection writes the attention output's gradient in bf16 (txmodel.do16) */
int ddp_transformer_do16(const ddp_model *m);
/* 1 when that model's out projection and linear2 write their outputs in bf16 (txmodel.t16) */
int ddp_transformer_t16(const ddp_model *m);

#endif
