/* dataset_list.c — a dataset directory's shard files: every *.h5 that is not hidden, in lexicographic order (the
 * order of the global sample index). */
#include "io/dataset.h"

#include "mpi_ddp/core/status.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

ddp_status ddp_dataset_list(const char *dir, char ***names, int64_t *n)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) return ddp_set_error(DDP_ERR_IO, "%s: dataset directory: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return ddp_set_error(DDP_ERR_IO, "%s: dataset directory: not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) return ddp_set_error(DDP_ERR_IO, "%s: dataset directory: %s", dir, strerror(errno));
    int64_t cap = 16, cnt = 0;
    char **v = ddp_calloc((size_t)cap, sizeof *v);
    struct dirent *e;
    ddp_status st = DDP_OK;
    while (v && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".h5") != 0 || e->d_name[0] == '.') continue;
        if (len >= DDP_SHARD_NAME_MAX) {
            st = ddp_set_error(DDP_ERR_ARG, "%s/%s: shard file name too long", dir, e->d_name);
            break;
        }
        if (cnt == cap) {
            char **nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                st = ddp_set_error(DDP_ERR_NOMEM, "out of memory listing %s", dir);
                break;
            }
            v = nv;
        }
        if (!(v[cnt++] = strdup(e->d_name))) {
            st = ddp_set_error(DDP_ERR_NOMEM, "out of memory listing %s", dir);
            break;
        }
    }
    closedir(d);
    if (!v) return ddp_set_error(DDP_ERR_NOMEM, "out of memory listing %s", dir);
    if (st == DDP_OK && cnt == 0) st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset directory: no *.h5 shard files", dir);
    if (st != DDP_OK) {
        for (int64_t i = 0; i < cnt; i++) free(v[i]);
        free(v);
        return st;
    }
    qsort(v, (size_t)cnt, sizeof *v, cmp_str);
    *names = v;
    *n = cnt;
    return DDP_OK;
}
