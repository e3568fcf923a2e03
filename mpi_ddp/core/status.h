/* status.h — error reporting inside the library: ddp_set_error() records one line, and the CHECK
 * macros (modelled on NCCL's NCCLCHECK) turn MPI, HDF5, CUDA, cuBLAS and NCCL failures into a
 * ddp_status that propagates to the caller. Only app/ prints. */
#ifndef DDP_STATUS_H
#define DDP_STATUS_H

#include "mpiddp.h"

#if defined(__GNUC__)
#define DDP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DDP_PRINTF(a, b)
#endif

/* Records the message (printf-style) for ddp_last_error() and returns st. Inside the CUDA plugin the
 * same name calls back into the library that loaded it. */
#ifdef DDP_PLUGIN
extern ddp_status (*ddp_plugin_set_error)(ddp_status st, const char *fmt, ...);
#define ddp_set_error ddp_plugin_set_error
#else
ddp_status ddp_set_error(ddp_status st, const char *fmt, ...) DDP_PRINTF(2, 3);
#endif
/* Replaces the message without formatting (used to adopt another rank's message). */
void ddp_set_error_text(const char *msg);
/* How many error lines this thread has set so far (ddp_set_error, ddp_set_error_text): read before and after a call
 * into a user's callback, it tells whether the callback set a line of its own. */
unsigned long ddp_error_seq(void);

/* Marks the current error as held identically by every rank (see ddp_error_shared). */
void ddp_mark_error_shared(void);

/* A public function's pointer argument that may not be NULL: DDP_ERR_ARG, "FUNCTION: NAME is NULL" (NAME: the
 * argument's name in mpiddp.h). */
#define DDP_NONNULL(arg, name)                                                           \
    do {                                                                                 \
        if (!(arg)) return ddp_set_error(DDP_ERR_ARG, "%s: %s is NULL", __func__, name); \
    } while (0)
/* The same as a status (DDP_OK when arg is not NULL), for checks that ranks agree on. */
#define DDP_NONNULL_ST(arg, name) ((arg) ? DDP_OK : ddp_set_error(DDP_ERR_ARG, "%s: %s is NULL", __func__, name))

/* Propagate a ddp_status. */
#define DDP_CHECK(call)                        \
    do {                                       \
        ddp_status ddp_st_ = (call);           \
        if (ddp_st_ != DDP_OK) return ddp_st_; \
    } while (0)

/* Like DDP_CHECK but jumps to a cleanup label after storing the status in `st`. */
#define DDP_TRY(call)                \
    do {                             \
        st = (call);                 \
        if (st != DDP_OK) goto done; \
    } while (0)

#define DDP_FAIL(code, ...)                      \
    do {                                         \
        st = ddp_set_error((code), __VA_ARGS__); \
        goto done;                               \
    } while (0)

ddp_status ddp_mpi_error(int rc, const char *call, const char *file, int line);
#define MPI_CHECK(call)                                                             \
    do {                                                                            \
        int ddp_rc_ = (call);                                                       \
        if (ddp_rc_ != 0) return ddp_mpi_error(ddp_rc_, #call, __FILE__, __LINE__); \
    } while (0)
/* MPI_CHECK for functions that clean up: st = the error, goto done (as DDP_TRY). */
#define MPI_TRY(call)                                               \
    do {                                                            \
        int ddp_rc_ = (call);                                       \
        if (ddp_rc_ != 0) {                                         \
            st = ddp_mpi_error(ddp_rc_, #call, __FILE__, __LINE__); \
            goto done;                                              \
        }                                                           \
    } while (0)

/* Allocation helpers: zeroed, size-checked, and seen by the allocation-failure test hook: each call site
 * (file:line) can be made to fail once on one rank (MPIDDP_TEST_FAIL_ALLOC=dir/file.c:LINE, with
 * MPIDDP_TEST_FAIL_ALLOC_RANK, default 0), and MPIDDP_TEST_ALLOC_SITES=PREFIX lists the sites a run
 * reaches in PREFIX.r<rank> (docs/faults.md). A failed allocation is remembered per thread, so that the next
 * DDP_ERR_NOMEM message says how many bytes could not be allocated and where. */
void *ddp_calloc_at(size_t n, size_t size, const char *file, int line);
void *ddp_realloc_at(void *p, size_t n, size_t size, const char *file, int line);
#define ddp_calloc(n, size) ddp_calloc_at((n), (size), __FILE__, __LINE__)
/* Not zeroed: scratch that is written before it is read (the hot path). */
#define ddp_malloc(n, size) ddp_realloc_at(NULL, (n), (size), __FILE__, __LINE__)
#define ddp_realloc(p, n, size) ddp_realloc_at((p), (n), (size), __FILE__, __LINE__)
/* The hook's decision for an allocation of `bytes` at file:line (1: fail it); backends' allocations ask it too. */
int ddp_alloc_inject(const char *file, int line, size_t bytes);
/* The rank the hook acts on (set once MPI is up; before that no allocation is failed). */
void ddp_alloc_hook_rank(int rank);
#define DDP_ALLOC(ptr, n)                                                                        \
    do {                                                                                         \
        (ptr) = ddp_calloc((size_t)(n), sizeof *(ptr));                                          \
        if (!(ptr)) return ddp_set_error(DDP_ERR_NOMEM, "out of memory"); /* + bytes and site */ \
    } while (0)

#endif
