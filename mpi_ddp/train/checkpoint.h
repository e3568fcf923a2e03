/* checkpoint.h — HDF5 checkpoints (docs/run-directory.md): /params/<name> in PyTorch names and layouts, /optim/exp_avg
 * and /optim/exp_avg_sq per tensor, attributes for position, seed, world size, best scores and configuration; every
 * dataset carries a CRC-32 verified on load, and parameters and moments must be finite (ckpt_verify.h). */
#ifndef DDP_CHECKPOINT_H
#define DDP_CHECKPOINT_H

#include "mpiddp.h"

typedef struct {
    /* position, in units that do not depend on the world size or --accumulate (docs/run-directory.md) */
    int64_t epoch;               /* epoch the position refers to */
    int64_t optim_step_in_epoch; /* optimizer steps of that epoch done */
    int64_t samples_in_epoch;    /* positions of the epoch's global order consumed (the sample count, padding
                                    included, or the token-budget plan's next position); num_samples: the end */
    int64_t prev_epoch_steps;    /* optimizer steps epoch - 1 took, as trained (the summary of a resume that trains
                                    none); write: < 0 not written; read: -1 when absent (written before it was) */
    int64_t legacy_micro_batch;  /* read: -1, or the micro-batch index older checkpoints stored (step_in_epoch) */
    int64_t global_step;         /* optimizer steps done */
    int64_t optim_step;          /* AdamW t */
    uint64_t seed;
    int64_t world_size;
    double best_score;  /* best monitored value so far, the policy's view (NaN if none) */
    int64_t bad_epochs; /* early-stopping counter */
    char monitor[128];
    int mode_max;          /* --mode max; read: -1 when the checkpoint does not say */
    int64_t skipped_steps; /* steps skipped for a non-finite gradient (--skip-nonfinite) */
    /* the learning-rate schedule: name ("constant", "cosine", "linear"), warmup steps, the optimizer steps
     * [lr_start_step, lr_total_steps) it spans (the horizon; start 0 unless a resume restarted the decay), lr, min-lr.
     * write: lr_schedule may be NULL (none written); read: NULL when the file records none (written before mpiddp
     * recorded schedules), "?" for a name this version does not know; lr_start_step 0 when absent */
    const char *lr_schedule;
    int64_t lr_warmup_steps, lr_start_step, lr_total_steps;
    double lr, min_lr;
    const char *config_json;   /* write: configuration; read: NULL */
    int64_t global_batch;      /* samples per optimizer step over all ranks */
    int64_t global_batch_rows; /* token-budget runs: the global budget in rows (0: sample-count batches) */
    char shuffle[64];          /* the epoch order: "full", or "block:<MiB>:<window>" ("full" when absent) */
    char sampling[16];         /* --sampling: "global" or "shard" ("" when absent: written before it was recorded) */
    /* each rank's best local monitor value [world_size] for the save vote and for early stopping's (vote policies);
     * read: allocated, caller frees; best_local_es a copy of best_local when the file has none (older files) */
    double *best_local, *best_local_es;
    /* top-k list as JSON [[value, epoch, step, "path"], ...]; read: allocated, caller frees */
    char *topk_json;
    const ddp_model_config *model_cfg; /* write: a built-in model's hyperparameters (may be NULL); read: unused */
    double dropout;      /* read: the recorded --dropout (attribute "model_dropout"), NAN when absent; write: unused */
    double weight_decay; /* AdamW's decoupled weight decay (attribute "weight_decay"); read: NAN when absent */
    double beta1, beta2,
        eps; /* AdamW's (attributes "adamw_beta1", "adamw_beta2", "adamw_eps"); read: NAN when absent */
    /* the run's --precision (attribute "precision"); read: fp32 when absent (written before --precision) */
    ddp_precision precision;
    /* read: 1 when the file carries no checksums (written before they existed): its datasets were loaded
     * unverified (finiteness is still checked); the caller prints one notice. 0 when every dataset's
     * checksum matched. */
    int no_checksums;
} ddp_ckpt_state;

/* Host arrays in the model's flat layout; m/v may be NULL (written as zeros are not: omitted). Written to a temporary
 * name, fsynced and renamed, so readers never see partial files. */
ddp_status ddp_ckpt_write(const char *path, const ddp_model *model, const float *params, const float *m, const float *v,
                          const ddp_ckpt_state *st);
/* Shape of the reference model stored in a checkpoint: D, H, C from /params/l1.weight and l3.weight. */
ddp_status ddp_ckpt_peek_refmodel(const char *path, int64_t *dim, int64_t *hidden, int64_t *classes);
/* The built-in model a checkpoint holds: kind ("model" attribute: mlp, or transformer with its recorded
 * hyperparameters), D, width and classes from the parameter shapes; workspace limits are left 0. */
ddp_status ddp_ckpt_peek_model(const char *path, ddp_model_config *c);
/* Reads into host arrays (m, v may be NULL: the moments are then verified, not kept); shapes must match
 * model. A checksum mismatch, a non-finite value, a FIFO or directory: one line naming file and dataset.
 * mc (may be NULL): the run's model configuration, when a resume continues it; a Transformer's is checked first,
 * through the same open file: DDP_ERR_ARG with one line when the checkpoint's recorded --heads differs (the
 * parameter shapes do not depend on it, so the tensors would be loaded into other attention heads); no check for
 * another model kind, or a file that records no hyperparameters (whatever is wrong with it is the read's). cli: its
 * lines name the CLI's options (--heads), else ddp_model_config's fields (cfg.model_config->heads), optname.h. */
ddp_status ddp_ckpt_read(const char *path, const ddp_model *model, const ddp_model_config *mc, float *params, float *m,
                         float *v, ddp_ckpt_state *st, int cli);

#endif
