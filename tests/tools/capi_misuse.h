/* capi_misuse.h — what capi_misuse.c shares with its other case files (capi_misuse_comm.c, capi_misuse_io.c, _model.c,
 * _metrics.c). */
#ifndef CAPI_MISUSE_H
#define CAPI_MISUSE_H
#include "mpiddp.h"

extern int g_rank, g_failed;
extern const char *g_case;

/* st must be want, the error one non-empty line holding `has` (NULL: any) */
void expect(const char *what, ddp_status st, ddp_status want, const char *has);
/* expect, and the line names ddp_train_config's fields (has: "cfg.lr = -0.1"), never a CLI option (--lr) */
void expect_api(const char *what, ddp_status st, ddp_status want, const char *has);
/* expect_api, and the line is exactly `line` */
void expect_is(const char *what, ddp_status st, ddp_status want, const char *line);
/* ddp_train of a built-in model of configuration mc (epochs 1) into WORK/name, resume NULL or "auto" */
ddp_status train_builtin(ddp_ctx *ctx, const char *work, const char *name, const ddp_model_config *mc,
                         const char *resume, ddp_precision precision, ddp_dataset *tr, ddp_dataset *va);
/* a one-layer user model of the dataset's sizes */
ddp_model user_model(const ddp_dataset *tr);
/* a one-epoch configuration writing into WORK/name */
ddp_train_config base_cfg(const char *work, const char *name);
/* the cases finalize_twice and timeout */
int comm_cases(int argc, char **argv, const char *trd, const char *vad, const char *work);
/* the cases sampler, shard_cache, bf16_nomem, nonfinite_grad and nonfinite_val (capi_misuse_io.c) */
int is_io_case(const char *c);
int io_cases(int argc, char **argv, const char *trd, const char *vad, const char *work);
/* the case own_config (capi_misuse_model.c): a built-in model with cfg.model_config NULL or contradicting it */
int is_model_case(const char *c);
int model_cases(ddp_ctx *ctx, const char *trd, ddp_dataset *tr, ddp_dataset *va, const char *work);
/* the cases local_failure and own_metric (capi_misuse_metrics.c) */
int is_metrics_case(const char *c);
int metrics_cases(int argc, char **argv, const char *trd, const char *vad, const char *work);
/* set: the user model's eval_step also logs g_log_name (1 per sample; NaN for "model/nan") through its metrics */
extern const ddp_model *g_logger;
extern const char *g_log_name;
#endif
