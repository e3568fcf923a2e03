/* evaluate.h — exact evaluation over a dataset: per-rank loss sums and a confusion matrix with padding
 * duplicates excluded, their reduction, accuracy and macro-F1, and predictions gathered to rank 0 with
 * exactly one row per sample. Shared by the trainer's validation and `mpiddp eval`. */
#ifndef DDP_EVALUATE_H
#define DDP_EVALUATE_H

#include "io/loader.h"
#include "mpi_ddp/core/ctx.h"

typedef struct {
    int64_t C;
    double loss_sum;
    int64_t count;
    int64_t *conf; /* [C*C] rows = label, columns = prediction */
    int collect;   /* keep per-sample predictions */
    int64_t n, cap;
    int64_t *idx, *ids, *labels, *preds;
    float *probs;
    /* per-batch scratch */
    int64_t *b_pred;
    float *b_prob, *b_loss;
} ddp_eval_acc;

ddp_status ddp_eval_acc_init(ddp_eval_acc *a, int64_t classes, int64_t batch, int collect);
void ddp_eval_acc_free(ddp_eval_acc *a);
void ddp_eval_acc_reset(ddp_eval_acc *a);
/* Called before each batch (index `batch`); sets *stop to end the pass there. May be collective when every rank
 * calls it at the same batches (the trainer agrees stop requests this way). */
typedef ddp_status (*ddp_eval_poll)(void *arg, int64_t batch, int *stop);
/* The status of a model's callback fn ("train_step", "eval_step") that returned st; seq: ddp_error_seq() before the
 * call, where: when it was called ("at step 3"). A failure that set no error line of its own gets one naming the
 * model, the callback, st and where; DDP_STOPPED, which only ddp_train returns (after saving last.h5), is
 * DDP_ERR_ARG, with a line that says so. */
ddp_status ddp_model_callback_status(const ddp_model *m, const char *fn, ddp_status st, unsigned long seq,
                                     const char *where);
/* Runs `steps` batches of an epoch already started on the loader (collective-free unless poll is); poll may
 * be NULL. */
ddp_status ddp_eval_run(ddp_model *m, const float *params, ddp_loader *ld, int64_t steps, ddp_eval_acc *a,
                        ddp_eval_poll poll, void *arg);
void ddp_confusion_metrics(const int64_t *conf, int64_t C, double *acc, double *macro_f1);
/* Sums the confusion matrices over ranks in place (collective). */
ddp_status ddp_eval_reduce_confusion(ddp_ctx *ctx, ddp_eval_acc *a);
/* Gathers every rank's predictions to rank 0 sorted by global index (collective; int64 counts: messages of
 * at most 2^27 elements, so any number of predictions fits MPI's int counts). */
ddp_status ddp_eval_gather(ddp_ctx *ctx, ddp_eval_acc *a, ddp_eval_acc *all);

#endif
