/* capi_misuse.h — what capi_misuse.c shares with its other case files (capi_misuse_comm.c). */
#ifndef CAPI_MISUSE_H
#define CAPI_MISUSE_H
#include "mpiddp.h"

extern int g_rank, g_failed;
extern const char *g_case;

/* st must be want, the error one non-empty line holding `has` (NULL: any) */
void expect(const char *what, ddp_status st, ddp_status want, const char *has);
/* a one-layer user model of the dataset's sizes */
ddp_model user_model(const ddp_dataset *tr);
/* a one-epoch configuration writing into WORK/name */
ddp_train_config base_cfg(const char *work, const char *name);
/* the cases finalize_twice and timeout */
int comm_cases(int argc, char **argv, const char *trd, const char *vad, const char *work);
#endif
