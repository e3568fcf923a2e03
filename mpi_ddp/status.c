/* status.c — the per-thread last-error line and status names. */
#include "status.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char g_err[1024];
static _Thread_local int g_shared; /* every rank holds this same error */

int ddp_error_shared(void) { return g_shared; }
void ddp_mark_error_shared(void) { g_shared = 1; }

const char *ddp_last_error(void) { return g_err[0] ? g_err : "no error"; }

ddp_status ddp_set_error(ddp_status st, const char *fmt, ...)
{
    va_list ap;
    g_shared = 0;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    for (char *p = g_err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return st;
}

void ddp_set_error_text(const char *msg)
{
    g_shared = 0;
    snprintf(g_err, sizeof g_err, "%s", msg);
}

ddp_status ddp_mpi_error(int rc, const char *call, const char *file, int line)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "code %d", rc);
    return ddp_set_error(DDP_ERR_MPI, "MPI error in %s (%s:%d): %s", call, file, line, s);
}

void *ddp_calloc(size_t n, size_t size)
{
    if (n == 0 || size == 0) n = size = 1;
    if (n > SIZE_MAX / size) return NULL;
    return calloc(n, size);
}

const char *ddp_status_name(ddp_status st)
{
    static const char *names[] = {"ok", "bad argument", "I/O error", "format error", "MPI error",
                                  "HDF5 error", "CUDA error", "NCCL error", "out of memory",
                                  "rank mismatch", "error on another rank", "non-finite value",
                                  "internal error"};
    if ((unsigned)st < sizeof names / sizeof names[0]) return names[st];
    if (st == DDP_STOPPED) return "stopped on request";
    return "unknown status";
}
