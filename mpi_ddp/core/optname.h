/* optname.h — how a library message names a ddp_train_config setting: the CLI's option ("--lr 0.1") when the CLI runs
 * the library (ddp_ctx.cli_names), else the field a C-API program sets ("cfg.lr = 0.1"). */
#ifndef MPIDDP_CORE_OPTNAME_H
#define MPIDDP_CORE_OPTNAME_H

#include <stddef.h>

typedef enum {
    DDP_OPT_OUT,
    DDP_OPT_RESUME,
    DDP_OPT_OVERWRITE,
    DDP_OPT_EPOCHS,
    DDP_OPT_BATCH_SIZE,
    DDP_OPT_BATCH_ROWS,
    DDP_OPT_ACCUMULATE,
    DDP_OPT_SHUFFLE,
    DDP_OPT_SHUFFLE_BLOCK_MB,
    DDP_OPT_SHUFFLE_WINDOW,
    DDP_OPT_SAMPLING,
    DDP_OPT_DROP_LAST,
    DDP_OPT_LR,
    DDP_OPT_WEIGHT_DECAY,
    DDP_OPT_LR_SCHEDULE,
    DDP_OPT_WARMUP,
    DDP_OPT_MIN_LR,
    DDP_OPT_LR_HORIZON,
    DDP_OPT_GRAD_CLIP,
    DDP_OPT_SEED,
    DDP_OPT_LOG_EVERY,
    DDP_OPT_FAST_DEV_RUN,
    DDP_OPT_BUCKET_MB,
    DDP_OPT_COLLECTIVE_TIMEOUT,
    DDP_OPT_MONITOR,
    DDP_OPT_MODE,
    DDP_OPT_SAVE_TOP_K,
    DDP_OPT_CKPT_POLICY,
    DDP_OPT_CKPT_EVERY_STEPS,
    DDP_OPT_EARLY_STOP_PATIENCE,
    DDP_OPT_SKIP_NONFINITE,
    DDP_OPT_PRECISION,
    DDP_OPT_DROPOUT,
    DDP_OPT_MODEL, /* a built-in model's settings: ddp_model_config's fields, as cfg.model_config->FIELD */
    DDP_OPT_HIDDEN,
    DDP_OPT_LAYERS,
    DDP_OPT_HEADS,
    DDP_OPT_FF,
    DDP_OPT_MAX_POSITIONS,
    DDP_OPT_POSITIONS,
    DDP_OPT_COUNT
} ddp_opt;

/* "--lr" (cli != 0) or "cfg.lr". */
const char *ddp_opt_name(int cli, ddp_opt o);
/* The setting with a value, value in the CLI's spelling ("block:4:16", "shard", "max", "cosine", "bf16", "0.1", a
 * path; NULL for a switch such as --overwrite): "--sampling shard" or "cfg.sampling_shard = 1", "--lr 0.1" or
 * "cfg.lr = 0.1", "--monitor val/acc" or "cfg.monitor = "val/acc"", "--overwrite" or "cfg.overwrite = 1",
 * "--shuffle block:4:16" or "cfg.shuffle_block = 1, cfg.shuffle_block_mb = 4, cfg.shuffle_window = 16",
 * "--model mlp" or "cfg.model_config->kind = DDP_MODEL_MLP". Returns buf. */
const char *ddp_opt_set(char *buf, size_t len, int cli, ddp_opt o, const char *value);
/* The same with the value printed from fmt ("%g", "%lld", ...). */
const char *ddp_opt_fmt(char *buf, size_t len, int cli, ddp_opt o, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
