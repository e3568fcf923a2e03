/* runinfo.c — library versions and run.json (configuration, world size, hosts, versions, start time, and the
 * open-shard budgets, whose use is added at the end of the run). */
#include "mpi_ddp/train/runinfo.h"

#include "mpi_ddp/backend/cpu/backend_cpu_dnnl.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/core/status.h"
#include "io/shard_cache.h"
#include "mpi_ddp/train/plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char *openblas_get_config(void);

void ddp_versions_get(ddp_versions *v)
{
    memset(v, 0, sizeof *v);
    int len = 0;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        char *nl = strpbrk(lib, ",\n");
        if (nl) *nl = 0;
        snprintf(v->mpi, sizeof v->mpi, "%s", lib);
    }
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    snprintf(v->hdf5, sizeof v->hdf5, "%u.%u.%u", maj, min, rel);
    ddp_cuda_version_string(v->cuda, sizeof v->cuda);
    ddp_nccl_version_string(v->nccl, sizeof v->nccl);
    const char *b = openblas_get_config();
    snprintf(v->blas, sizeof v->blas, "%s", b ? b : "");
    ddp_cpu_dnnl_describe(v->onednn, sizeof v->onednn);
}

/* One key per name in run.json (JSON readers keep only the last of duplicates, silently). */
static void set_item(cJSON *o, const char *key, cJSON *v)
{
    if (cJSON_GetObjectItemCaseSensitive(o, key))
        cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
    else
        cJSON_AddItemToObject(o, key, v);
}

/* Drops all but the last of each duplicated key of an object parsed from text (cJSON keeps them all). */
static void dedupe(cJSON *o)
{
    cJSON *it = o ? o->child : NULL;
    while (it) {
        cJSON *next = it->next;
        for (cJSON *later = next; later && it->string; later = later->next)
            if (later->string && strcmp(later->string, it->string) == 0) {
                cJSON_Delete(cJSON_DetachItemViaPointer(o, it));
                break;
            }
        it = next;
    }
}

/* Replaces the file at path with text (len bytes) whole: written to path.tmp, fsynced, renamed over path, so a write
 * that fails part-way (a full disk, a quota) leaves the previous file as it was and no temporary. */
static ddp_status write_whole(const char *path, const char *text, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    ddp_status st = DDP_OK;
    for (size_t done = 0; done < len && st == DDP_OK;) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            st = ddp_set_error(DDP_ERR_IO, "%s: write failed: %s", tmp, n < 0 ? strerror(errno) : "no space written");
        else
            done += (size_t)n;
    }
    if (st == DDP_OK && fsync(fd) != 0) st = ddp_set_error(DDP_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == DDP_OK) st = ddp_set_error(DDP_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (st == DDP_OK && rename(tmp, path) != 0)
        st = ddp_set_error(DDP_ERR_IO, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
    if (st != DDP_OK) unlink(tmp);
    return st;
}

static cJSON *info_json(const ddp_dataset_info *i)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "samples", (double)i->num_samples);
    cJSON_AddNumberToObject(o, "rows", (double)i->num_rows);
    cJSON_AddNumberToObject(o, "dim", (double)i->dim);
    cJSON_AddNumberToObject(o, "classes", (double)i->num_classes);
    cJSON_AddNumberToObject(o, "shards", (double)i->num_shards);
    return o;
}

/* run.json's data_cache: the budgets of io/shard_cache.c (the largest over the ranks: they differ by what each had
 * open at start), from v = {max_open, fd_budget, map_budget, nofile, nofile_was, nofile_hard, max_map_count}. */
enum { NBUDGET = 7 };
static ddp_status cache_budgets(ddp_ctx *ctx, int64_t *v)
{
    ddp_shard_cache_info in;
    ddp_shard_cache_get(&in);
    int64_t mine[NBUDGET] = {in.max_open,   in.fd_budget,   in.map_budget,   in.nofile,
                             in.nofile_was, in.nofile_hard, in.max_map_count};
    MPI_CHECK(MPI_Reduce(mine, v, NBUDGET, MPI_INT64_T, MPI_MAX, 0, ctx->world));
    return DDP_OK;
}

static cJSON *cache_json(const int64_t *v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "state", "start");
    cJSON_AddNumberToObject(o, "open_files_limit", (double)v[3]);
    cJSON_AddNumberToObject(o, "open_files_limit_at_start", (double)v[4]);
    cJSON_AddBoolToObject(o, "open_files_limit_raised", v[3] > v[4]);
    cJSON_AddNumberToObject(o, "open_files_hard_limit", (double)v[5]);
    cJSON_AddNumberToObject(o, "max_map_count", (double)v[6]);
    cJSON_AddNumberToObject(o, "max_open_shards", (double)v[0]);
    cJSON_AddNumberToObject(o, "shard_fd_budget", (double)v[1]);
    cJSON_AddNumberToObject(o, "shard_map_budget", (double)v[2]);
    return o;
}

ddp_status ddp_write_run_json(ddp_ctx *ctx, const char *path, const ddp_train_config *cfg, const char *extra,
                              const ddp_dataset_info *train, const ddp_dataset_info *val, const char *device_note,
                              const char *attention, const char *resumed_from)
{
    int W = ctx->topo.size;
    static const char *const paths[] = {"", "cpu", "own", "cudnn"};
    int att = 0;
    for (int k = 1; k < 4 && attention; k++) {
        size_t n = strlen(paths[k]);
        if (!strncmp(attention, paths[k], n) && attention[n] == ':') att = k;
    }
    int mine[5] = {ctx->topo.local_rank, ctx->topo.node_id, ctx->device, ctx->cuda_device, att};
    char *hosts = ctx->topo.rank == 0 ? ddp_calloc((size_t)W, 256) : NULL;
    int *facts = ctx->topo.rank == 0 ? ddp_calloc((size_t)W * 5, sizeof(int)) : NULL;
    if (ctx->topo.rank == 0 && (!hosts || !facts)) {
        free(hosts);
        free(facts);
        hosts = NULL;
        facts = NULL;
    }
    /* the rows each rank's activation buffers hold (the model's workspace: docs/sizing.md); 0 for a caller's model */
    int64_t arows = cfg->model_config ? cfg->model_config->max_batch_rows : 0, *arows_all = NULL;
    int64_t budgets[NBUDGET];
    ddp_status st = DDP_OK;
    int ok = ctx->topo.rank != 0 || hosts != NULL, all = 0;
    DDP_TRY(ddp_all_ok(ctx, ok, &all));
    if (!all) DDP_FAIL(DDP_ERR_NOMEM, "out of memory for run.json");
    MPI_TRY(MPI_Gather(ctx->topo.host, 256, MPI_CHAR, hosts, 256, MPI_CHAR, 0, ctx->world));
    MPI_TRY(MPI_Gather(mine, 5, MPI_INT, facts, 5, MPI_INT, 0, ctx->world));
    if (ctx->topo.rank == 0 && !(arows_all = ddp_calloc((size_t)W, sizeof *arows_all))) ok = 0;
    DDP_TRY(ddp_all_ok(ctx, ok, &all));
    if (!all) DDP_FAIL(DDP_ERR_NOMEM, "out of memory for run.json");
    MPI_TRY(MPI_Gather(&arows, 1, MPI_INT64_T, arows_all, 1, MPI_INT64_T, 0, ctx->world));
    DDP_TRY(cache_budgets(ctx, budgets));
    if (ctx->topo.rank == 0) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "mpiddp_version", MPIDDP_VERSION);
        char ts[64];
        time_t t = time(NULL);
        struct tm tmv;
        gmtime_r(&t, &tmv);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tmv);
        cJSON_AddStringToObject(root, "start_time", ts);
        cJSON_AddNumberToObject(root, "world_size", W);
        cJSON_AddNumberToObject(root, "num_nodes", ctx->topo.num_nodes);
        cJSON_AddStringToObject(root, "launcher", ctx->topo.launcher);
        cJSON_AddStringToObject(root, "job_id", ctx->topo.job_id);
        cJSON_AddItemToObject(root, "resumed_from",
                              resumed_from && *resumed_from ? cJSON_CreateString(resumed_from) : cJSON_CreateNull());
        cJSON_AddStringToObject(root, "device", device_note ? device_note : "");
        /* which attention rank 0's model runs and why (ranks[].attention: each rank's) */
        cJSON *ao = cJSON_AddObjectToObject(root, "attention");
        cJSON_AddStringToObject(ao, "path", paths[att]);
        cJSON_AddStringToObject(ao, "why", attention && att ? attention + strlen(paths[att]) + 2 : "");
        cJSON *ranks = cJSON_AddArrayToObject(root, "ranks");
        cJSON *hl = cJSON_AddArrayToObject(root, "hosts");
        for (int r = 0; r < W; r++) {
            const char *h = hosts + (size_t)r * 256;
            int seen = 0;
            for (int q = 0; q < r; q++) seen |= strcmp(hosts + (size_t)q * 256, h) == 0;
            if (!seen) cJSON_AddItemToArray(hl, cJSON_CreateString(h));
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "rank", r);
            cJSON_AddStringToObject(o, "host", h);
            cJSON_AddNumberToObject(o, "local_rank", facts[5 * r]);
            cJSON_AddNumberToObject(o, "node_id", facts[5 * r + 1]);
            cJSON_AddStringToObject(o, "device", facts[5 * r + 2] == DDP_DEVICE_CUDA ? "cuda" : "cpu");
            cJSON_AddNumberToObject(o, "cuda_device", facts[5 * r + 3]);
            cJSON_AddNumberToObject(o, "activation_rows", (double)arows_all[r]);
            cJSON_AddStringToObject(o, "attention", paths[facts[5 * r + 4]]);
            cJSON_AddItemToArray(ranks, o);
        }
        ddp_versions v;
        ddp_versions_get(&v);
        cJSON *ver = cJSON_AddObjectToObject(root, "versions");
        cJSON_AddStringToObject(ver, "mpiddp", MPIDDP_VERSION);
        cJSON_AddStringToObject(ver, "mpi", v.mpi);
        cJSON_AddStringToObject(ver, "hdf5", v.hdf5);
        cJSON_AddStringToObject(ver, "cuda", v.cuda);
        cJSON_AddStringToObject(ver, "nccl", v.nccl);
        cJSON_AddStringToObject(ver, "openblas", v.blas);
        cJSON_AddStringToObject(ver, "onednn", v.onednn);
        cJSON *c = extra ? cJSON_Parse(extra) : NULL;
        if (c && !cJSON_IsObject(c)) cJSON_Delete(c), c = NULL;
        if (!c) c = cJSON_CreateObject();
        dedupe(c);
        /* the effective values; a key the options already hold (epochs, lr, seed, ...) is set, not repeated */
        set_item(c, "epochs", cJSON_CreateNumber(cfg->epochs));
        if (cfg->batch_rows > 0) { /* token budgets: the step's size is the budget; --batch-size does not apply */
            set_item(c, "batch_rows", cJSON_CreateNumber((double)cfg->batch_rows));
            set_item(c, "global_batch_rows", cJSON_CreateNumber((double)cfg->batch_rows * W * cfg->accumulate));
            set_item(c, "batch_size", cJSON_CreateNull());
            set_item(c, "global_batch", cJSON_CreateNull());
            if (cJSON_GetObjectItemCaseSensitive(c, "batch-size")) set_item(c, "batch-size", cJSON_CreateNull());
        } else {
            set_item(c, "batch_size", cJSON_CreateNumber(cfg->batch_size));
            set_item(c, "global_batch", cJSON_CreateNumber((double)cfg->batch_size * W * cfg->accumulate));
        }
        set_item(c, "accumulate", cJSON_CreateNumber(cfg->accumulate));
        set_item(c, "lr", cJSON_CreateNumber(cfg->lr));
        set_item(c, "weight_decay", cJSON_CreateNumber(cfg->weight_decay));
        set_item(c, "grad_clip", cJSON_CreateNumber(cfg->grad_clip));
        set_item(c, "seed", cJSON_CreateNumber((double)cfg->seed));
        set_item(c, "sampling", cJSON_CreateString(cfg->sampling_shard ? "shard" : "global"));
        set_item(c, "drop_last", cJSON_CreateBool(cfg->drop_last));
        set_item(c, "bucket_mb", cJSON_CreateNumber(cfg->bucket_mb));
        set_item(c, "precision", cJSON_CreateString(ddp_precision_name(cfg->precision)));
        /* the activation buffers: each rank's rows (ranks[].activation_rows), planned or batch x longest sample */
        set_item(c, "buffer_plan", cJSON_CreateBool(cfg->model_config && ddp_plan_wanted(ctx->device)));
        cJSON_AddItemToObject(root, "config", c);
        if (train) cJSON_AddItemToObject(root, "train_data", info_json(train));
        if (val) cJSON_AddItemToObject(root, "val_data", info_json(val));
        cJSON_AddItemToObject(root, "data_cache", cache_json(budgets));
        char *text = cJSON_Print(root);
        cJSON_Delete(root);
        size_t len = text ? strlen(text) : 0;
        char *nl = text ? realloc(text, len + 2) : NULL;
        if (nl) text = nl, text[len++] = '\n', text[len] = 0;
        st = nl ? write_whole(path, text, len) : ddp_set_error(DDP_ERR_NOMEM, "out of memory for run.json");
        free(text);
    }
    st = ddp_agree_status(ctx, st);
done: /* a failed agreement or gather jumps here: every rank has the error already */
    free(hosts);
    free(facts);
    free(arows_all);
    return st;
}

/* The hit rate of one dataset's batch lookups, and how many shards it may hold open at once (cap: the largest over
 * the ranks). */
static void hits_json(cJSON *o, const char *key, ddp_dataset *ds, const int64_t *hm, int64_t cap)
{
    cJSON *d = cJSON_AddObjectToObject(o, key);
    const char *limit = "";
    (void)ddp_shard_cache_capacity(ds, &limit);
    cJSON_AddNumberToObject(d, "capacity", (double)cap);
    cJSON_AddStringToObject(d, "limited_by", limit);
    cJSON_AddNumberToObject(d, "hits", (double)hm[0]);
    cJSON_AddNumberToObject(d, "misses", (double)hm[1]);
    cJSON_AddNumberToObject(d, "hit_rate", hm[0] + hm[1] > 0 ? (double)hm[0] / (double)(hm[0] + hm[1]) : 0.0);
}

/* Rank 0, local: sets root[key] = v (taking v) in the run.json at path, rewritten through path.tmp and a rename
 * (write_whole, like the first write); why names the figures for an error. */
static ddp_status rewrite_key(const char *path, const char *key, cJSON *v, const char *why)
{
    ddp_status st = DDP_OK;
    FILE *f = fopen(path, "re");
    char *text = NULL, *out = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = ddp_malloc((size_t)n + 1, 1)))
        text[fread(text, 1, (size_t)n, f)] = 0;
    if (f) fclose(f);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root && f && n >= 0 && !text) { /* the allocation failed: say so, and how much (ddp_malloc's hook) */
        cJSON_Delete(v);
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory for run.json (%ld bytes)", n + 1);
    }
    if (!root) {
        cJSON_Delete(v);
        return ddp_set_error(DDP_ERR_IO, "%s: cannot read it back to add %s", path, why);
    }
    set_item(root, key, v);
    out = cJSON_Print(root);
    cJSON_Delete(root);
    size_t len = out ? strlen(out) : 0;
    char *nl = out ? realloc(out, len + 2) : NULL;
    if (nl) out = nl, out[len++] = '\n', out[len] = 0;
    st = nl ? write_whole(path, out, len) : ddp_set_error(DDP_ERR_NOMEM, "out of memory for run.json");
    free(out);
    return st;
}

ddp_status ddp_run_json_data_cache(ddp_ctx *ctx, const char *path, ddp_dataset *train, ddp_dataset *val)
{
    ddp_shard_cache_info in;
    ddp_shard_cache_get(&in);
    int64_t sum[8] = {0}, tot[8], budgets[NBUDGET], maxp[5];
    int64_t peak[5] = {in.peak_open, in.peak_fds, in.peak_maps, ddp_shard_cache_capacity(train, NULL),
                       ddp_shard_cache_capacity(val, NULL)};
    ddp_shard_cache_dataset_stats(train, &sum[0], &sum[1]);
    ddp_shard_cache_dataset_stats(val, &sum[2], &sum[3]);
    sum[4] = in.opens, sum[5] = in.evictions, sum[6] = in.ahead_opens, sum[7] = in.overshoots;
    MPI_CHECK(MPI_Reduce(sum, tot, 8, MPI_INT64_T, MPI_SUM, 0, ctx->world));
    MPI_CHECK(MPI_Reduce(peak, maxp, 5, MPI_INT64_T, MPI_MAX, 0, ctx->world));
    DDP_CHECK(cache_budgets(ctx, budgets));
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) {
        cJSON *o = cache_json(budgets);
        set_item(o, "state", cJSON_CreateString("end"));
        cJSON_AddNumberToObject(o, "peak_open_shards", (double)maxp[0]);
        cJSON_AddNumberToObject(o, "peak_shard_fds", (double)maxp[1]);
        cJSON_AddNumberToObject(o, "peak_shard_maps", (double)maxp[2]);
        cJSON_AddNumberToObject(o, "opens", (double)tot[4]);
        cJSON_AddNumberToObject(o, "read_ahead_opens", (double)tot[6]);
        cJSON_AddNumberToObject(o, "evictions", (double)tot[5]);
        cJSON_AddNumberToObject(o, "over_budget_opens", (double)tot[7]);
        hits_json(o, "train", train, tot, maxp[3]);
        hits_json(o, "val", val, tot + 2, maxp[4]);
        st = rewrite_key(path, "data_cache", o, "the data cache's figures");
    }
    return ddp_agree_status(ctx, st);
}

ddp_status ddp_run_json_lr_schedule(ddp_ctx *ctx, const char *path, const char *schedule, double lr, double min_lr,
                                    int64_t warmup, int64_t start, int64_t total, const char *horizon)
{
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "schedule", schedule);
        cJSON_AddNumberToObject(o, "lr", lr);
        cJSON_AddNumberToObject(o, "min_lr", min_lr);
        cJSON_AddNumberToObject(o, "warmup_steps", (double)warmup);
        cJSON_AddNumberToObject(o, "start_step", (double)start);
        cJSON_AddNumberToObject(o, "total_steps", (double)total);
        cJSON_AddStringToObject(o, "horizon", horizon);
        st = rewrite_key(path, "lr_schedule", o, "the learning-rate schedule");
    }
    return ddp_agree_status(ctx, st);
}
