/* status.c — the per-thread last-error line and status names. */
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/settings.h"

#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char g_err[1024];
static _Thread_local int g_shared;         /* every rank holds this same error */
static _Thread_local size_t g_nomem_bytes; /* the last failed allocation of this thread, 0: none */
static _Thread_local char g_nomem_site[96];
static _Thread_local unsigned long g_err_seq; /* error lines set on this thread (ddp_error_seq) */

int ddp_error_shared(void) { return g_shared; }
void ddp_mark_error_shared(void) { g_shared = 1; }

const char *ddp_last_error(void) { return g_err[0] ? g_err : "no error"; }
unsigned long ddp_error_seq(void) { return g_err_seq; }

ddp_status ddp_set_error(ddp_status st, const char *fmt, ...)
{
    va_list ap;
    g_shared = 0;
    g_err_seq++;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    for (char *p = g_err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    if (st == DDP_ERR_NOMEM && g_nomem_bytes) { /* say what could not be allocated, once */
        size_t len = strlen(g_err);
        if (!strstr(g_err, "bytes"))
            snprintf(g_err + len, sizeof g_err - len, " (%zu bytes at %s)", g_nomem_bytes, g_nomem_site);
        g_nomem_bytes = 0;
    }
    return st;
}

void ddp_set_error_text(const char *msg)
{
    g_shared = 0;
    g_err_seq++;
    snprintf(g_err, sizeof g_err, "%s", msg);
}

ddp_status ddp_mpi_error(int rc, const char *call, const char *file, int line)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "code %d", rc);
    return ddp_set_error(DDP_ERR_MPI, "MPI error in %s (%s:%d): %s", call, file, line, s);
}

/* --- allocations and the allocation-failure test hook (status.h) --- */
static pthread_mutex_t g_hook_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_hook_rank = -1, g_hook_on = -1, g_hook_done;
static char g_fail_site[128], g_sites_path[4200];
static char (*g_seen)[96];
static int g_nseen;

/* "dir/file.c:LINE" from __FILE__ (which may be absolute) */
static void site_name(char *out, size_t len, const char *file, int line)
{
    const char *last = strrchr(file, '/'), *b = file;
    if (last)
        for (const char *q = file; q < last; q++)
            if (*q == '/') b = q + 1;
    snprintf(out, len, "%s:%d", b, line);
}

void ddp_alloc_hook_rank(int rank)
{
    pthread_mutex_lock(&g_hook_mu);
    g_hook_rank = rank;
    const char *fail = ddp_knob_str(DDP_KNOB_TEST_FAIL_ALLOC), *list = ddp_knob_str(DDP_KNOB_TEST_ALLOC_SITES);
    g_hook_on = 0;
    if (fail && ddp_knob_int(DDP_KNOB_TEST_FAIL_ALLOC_RANK) == rank) {
        snprintf(g_fail_site, sizeof g_fail_site, "%s", fail);
        g_hook_on = 1;
    }
    if (list && *list) {
        snprintf(g_sites_path, sizeof g_sites_path, "%s.r%d", list, rank);
        g_hook_on = 1;
    }
    pthread_mutex_unlock(&g_hook_mu);
}

int ddp_alloc_inject(const char *file, int line, size_t bytes)
{
    if (g_hook_on <= 0) return 0;
    char site[96];
    site_name(site, sizeof site, file, line);
    int fail = 0;
    pthread_mutex_lock(&g_hook_mu);
    if (g_sites_path[0]) { /* list each site once, in the order first reached */
        int seen = 0;
        for (int i = 0; i < g_nseen && !seen; i++) seen = strcmp(g_seen[i], site) == 0;
        if (!seen && g_nseen < 1024) {
            if (!g_seen) g_seen = calloc(1024, sizeof *g_seen);
            if (g_seen) {
                snprintf(g_seen[g_nseen++], sizeof g_seen[0], "%s", site);
                FILE *f = fopen(g_sites_path, "a");
                if (f) {
                    fprintf(f, "%s\n", site);
                    fclose(f);
                }
            }
        }
    }
    if (g_fail_site[0] && !g_hook_done && strcmp(site, g_fail_site) == 0) fail = g_hook_done = 1;
    pthread_mutex_unlock(&g_hook_mu);
    if (fail) {
        g_nomem_bytes = bytes ? bytes : 1;
        snprintf(g_nomem_site, sizeof g_nomem_site, "%s", site);
    }
    return fail;
}

static void *nomem(size_t bytes, const char *file, int line)
{
    g_nomem_bytes = bytes ? bytes : 1;
    site_name(g_nomem_site, sizeof g_nomem_site, file, line);
    return NULL;
}

void *ddp_calloc_at(size_t n, size_t size, const char *file, int line)
{
    if (n == 0 || size == 0) n = size = 1;
    if (n > SIZE_MAX / size) return nomem(SIZE_MAX, file, line);
    if (ddp_alloc_inject(file, line, n * size)) return NULL;
    void *p = calloc(n, size);
    return p ? p : nomem(n * size, file, line);
}

void *ddp_realloc_at(void *p, size_t n, size_t size, const char *file, int line)
{
    if (n == 0 || size == 0) n = size = 1;
    if (n > SIZE_MAX / size) return nomem(SIZE_MAX, file, line);
    if (ddp_alloc_inject(file, line, n * size)) return NULL;
    void *q = realloc(p, n * size);
    return q ? q : nomem(n * size, file, line);
}

const char *ddp_status_name(ddp_status st)
{
    static const char *names[] = {"ok",
                                  "bad argument",
                                  "I/O error",
                                  "format error",
                                  "MPI error",
                                  "HDF5 error",
                                  "CUDA error",
                                  "NCCL error",
                                  "out of memory",
                                  "rank mismatch",
                                  "error on another rank",
                                  "non-finite value",
                                  "internal error",
                                  "run directory busy"};
    if ((unsigned)st < sizeof names / sizeof names[0]) return names[st];
    if (st == DDP_STOPPED) return "stopped on request";
    return "unknown status";
}
