/* optname.c — one table of ddp_train_config's settings: the CLI's option and the C API's field, and how each spells a
 * value, so that a library message names what its reader sets (optname.h). */
#include "mpi_ddp/core/optname.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { NUM, STR, FLAG, ENUM, SWITCH };

typedef struct {
    const char *cli, *field; /* "--lr", "cfg.lr" */
    int kind;                /* NUM: as is; STR: quoted; FLAG: 1 when the CLI's value starts with aux, else 0;
                                ENUM: aux + the value in capitals; SWITCH: "= 1", the CLI's option takes no value */
    const char *aux;
    const char *sub[2]; /* FLAG: the fields of the values after the CLI's "aux:" ("block:4:16": mb, window) */
} opt_row;

static const opt_row ROWS[DDP_OPT_COUNT] = {
    [DDP_OPT_OUT] = {"--out", "cfg.out_dir", STR, NULL},
    [DDP_OPT_RESUME] = {"--resume", "cfg.resume", STR, NULL},
    [DDP_OPT_OVERWRITE] = {"--overwrite", "cfg.overwrite", SWITCH, NULL},
    [DDP_OPT_EPOCHS] = {"--epochs", "cfg.epochs", NUM, NULL},
    [DDP_OPT_BATCH_SIZE] = {"--batch-size", "cfg.batch_size", NUM, NULL},
    [DDP_OPT_BATCH_ROWS] = {"--batch-rows", "cfg.batch_rows", NUM, NULL},
    [DDP_OPT_ACCUMULATE] = {"--accumulate", "cfg.accumulate", NUM, NULL},
    [DDP_OPT_SHUFFLE] =
        {"--shuffle", "cfg.shuffle_block", FLAG, "block", {"cfg.shuffle_block_mb", "cfg.shuffle_window"}},
    [DDP_OPT_SHUFFLE_BLOCK_MB] = {"--shuffle-block-mb", "cfg.shuffle_block_mb", NUM, NULL},
    [DDP_OPT_SHUFFLE_WINDOW] = {"--shuffle-window", "cfg.shuffle_window", NUM, NULL},
    [DDP_OPT_SAMPLING] = {"--sampling", "cfg.sampling_shard", FLAG, "shard"},
    [DDP_OPT_DROP_LAST] = {"--drop-last", "cfg.drop_last", SWITCH, NULL},
    [DDP_OPT_LR] = {"--lr", "cfg.lr", NUM, NULL},
    [DDP_OPT_WEIGHT_DECAY] = {"--weight-decay", "cfg.weight_decay", NUM, NULL},
    [DDP_OPT_LR_SCHEDULE] = {"--lr-schedule", "cfg.lr_schedule", ENUM, "DDP_LR_"},
    [DDP_OPT_WARMUP] = {"--warmup-steps", "cfg.warmup", NUM, NULL},
    [DDP_OPT_MIN_LR] = {"--min-lr", "cfg.min_lr", NUM, NULL},
    [DDP_OPT_LR_HORIZON] = {"--lr-horizon", "cfg.lr_horizon", ENUM, "DDP_LR_HORIZON_"},
    [DDP_OPT_GRAD_CLIP] = {"--grad-clip", "cfg.grad_clip", NUM, NULL},
    [DDP_OPT_SEED] = {"--seed", "cfg.seed", NUM, NULL},
    [DDP_OPT_LOG_EVERY] = {"--log-every", "cfg.log_every", NUM, NULL},
    [DDP_OPT_FAST_DEV_RUN] = {"--fast-dev-run", "cfg.fast_dev_run", NUM, NULL},
    [DDP_OPT_BUCKET_MB] = {"--bucket-mb", "cfg.bucket_mb", NUM, NULL},
    [DDP_OPT_COLLECTIVE_TIMEOUT] = {"--collective-timeout", "cfg.collective_timeout", NUM, NULL},
    [DDP_OPT_MONITOR] = {"--monitor", "cfg.monitor", STR, NULL},
    [DDP_OPT_MODE] = {"--mode", "cfg.mode_max", FLAG, "max"},
    [DDP_OPT_SAVE_TOP_K] = {"--save-top-k", "cfg.save_top_k", NUM, NULL},
    [DDP_OPT_CKPT_POLICY] = {"--ckpt-policy", "cfg.ckpt_policy", NUM, NULL},
    [DDP_OPT_CKPT_EVERY_STEPS] = {"--ckpt-every-steps", "cfg.ckpt_every_steps", NUM, NULL},
    [DDP_OPT_EARLY_STOP_PATIENCE] = {"--early-stop-patience", "cfg.early_stop_patience", NUM, NULL},
    [DDP_OPT_SKIP_NONFINITE] = {"--skip-nonfinite", "cfg.skip_nonfinite", SWITCH, NULL},
    [DDP_OPT_PRECISION] = {"--precision", "cfg.precision", ENUM, "DDP_PRECISION_"},
    [DDP_OPT_DROPOUT] = {"--dropout", "cfg.model_config->dropout", NUM, NULL},
    [DDP_OPT_MODEL] = {"--model", "cfg.model_config->kind", ENUM, "DDP_MODEL_"},
    [DDP_OPT_HIDDEN] = {"--hidden", "cfg.model_config->hidden", NUM, NULL},
    [DDP_OPT_LAYERS] = {"--layers", "cfg.model_config->layers", NUM, NULL},
    [DDP_OPT_HEADS] = {"--heads", "cfg.model_config->heads", NUM, NULL},
    [DDP_OPT_FF] = {"--ff", "cfg.model_config->ff", NUM, NULL},
    [DDP_OPT_MAX_POSITIONS] = {"--max-positions", "cfg.model_config->max_positions", NUM, NULL},
    [DDP_OPT_POSITIONS] = {"--positions", "cfg.model_config->positions", FLAG, "learned"},
};

const char *ddp_opt_name(int cli, ddp_opt o)
{
    if ((unsigned)o >= DDP_OPT_COUNT) return "?";
    return cli ? ROWS[o].cli : ROWS[o].field;
}

const char *ddp_opt_set(char *buf, size_t len, int cli, ddp_opt o, const char *value)
{
    if (!len) return buf;
    if ((unsigned)o >= DDP_OPT_COUNT) {
        snprintf(buf, len, "?");
        return buf;
    }
    const opt_row *r = &ROWS[o];
    if (cli) {
        snprintf(buf, len, "%s%s%s", r->cli, value ? " " : "", value ? value : "");
        return buf;
    }
    const char *v = value ? value : "";
    switch (r->kind) {
    case STR: snprintf(buf, len, "%s = \"%s\"", r->field, v); break;
    case FLAG: { /* "block:4:16": cfg.shuffle_block = 1, cfg.shuffle_block_mb = 4, cfg.shuffle_window = 16 */
        size_t n = strlen(r->aux);
        int on = !strncmp(v, r->aux, n);
        int k = snprintf(buf, len, "%s = %d", r->field, on);
        const char *p = on && v[n] == ':' ? v + n + 1 : NULL;
        for (int i = 0; p && i < 2 && r->sub[i] && k >= 0 && (size_t)k < len; i++) {
            size_t w = strcspn(p, ":");
            k += snprintf(buf + k, len - (size_t)k, ", %s = %.*s", r->sub[i], (int)w, p);
            p = p[w] == ':' ? p + w + 1 : NULL;
        }
        break;
    }
    case SWITCH: snprintf(buf, len, "%s = 1", r->field); break;
    case ENUM: {
        char up[48];
        size_t i = 0;
        for (; v[i] && i + 1 < sizeof up; i++) up[i] = (char)toupper((unsigned char)v[i]);
        up[i] = 0;
        snprintf(buf, len, "%s = %s%s", r->field, r->aux, up);
        break;
    }
    default: snprintf(buf, len, "%s = %s", r->field, v);
    }
    return buf;
}

const char *ddp_opt_fmt(char *buf, size_t len, int cli, ddp_opt o, const char *fmt, ...)
{
    char v[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    return ddp_opt_set(buf, len, cli, o, v);
}
