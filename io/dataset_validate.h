/* dataset_validate.h — validates a rank's list of shards, by default in a forked child that survives HDF5 crashing
 * or hanging, for the start-up survey (dataset_scan.c). */
#ifndef DDP_DATASET_VALIDATE_H
#define DDP_DATASET_VALIDATE_H

#include "io/manifest.h"
#include "mpi_ddp/core/status.h"

#include <stdint.h>

/* What validating a list gave: each valid shard's entry and class pairs, or the first failure in list order. */
typedef struct {
    ddp_manifest_entry *entries; /* [nshards], by global index */
    int64_t nshards;
    int64_t *pairs, npairs, cap; /* this rank's class pairs; entries[k].cc_first indexes them here */
    int64_t started, validated;  /* last shard started, shards validated */
    int done;                    /* 'R' seen */
    ddp_status status;
    int64_t fail; /* failing shard, or INT64_MAX */
    char msg[1024];
} ddp_shard_checks;

/* Validates shards todo[0..nt) of names (in dir) into v (fork isolation unless MPIDDP_VALIDATE_FORK=0). A failure
 * that is not a shard's (fork, pipe) leaves v->fail = -1. */
void ddp_validate_shards(ddp_shard_checks *v, const char *dir, char *const *names, const int64_t *todo, int64_t nt,
                         int flags);

#endif
