/* shard.h — one shard file: validation of every docs/dataset-format.md rule (rank 0 at start-up), and the runtime
 * handle through which a rank maps (or, for chunked/filtered files, reads) the samples it needs. */
#ifndef DDP_SHARD_H
#define DDP_SHARD_H

#include "mpiddp.h"

#include <hdf5.h>
#include <stdint.h>

#define DDP_SHARD_NAME_MAX 256
#define DDP_MAX_CLASSES ((int64_t)1 << 24) /* num_classes: class counts and confusion matrices are sized by it */

/* How a shard's features will be read: the madvise advice given to its map. */
enum { DDP_ACCESS_NORMAL = 0, DDP_ACCESS_RANDOM = 1, DDP_ACCESS_SEQUENTIAL = 2 };

/* Plain data, broadcast byte-for-byte from rank 0. File offsets are -1 where the object is not a
 * contiguous, allocated, unfiltered little-endian array that can be memory-mapped. */
typedef struct {
    char name[DDP_SHARD_NAME_MAX]; /* file name inside the dataset directory */
    int64_t n, rows, dim, classes;
    int64_t first;    /* global index of the shard's first sample */
    int64_t max_rows; /* longest sample */
    int64_t feat_off, off_off, lab_off, ids_off;
    int32_t lab_width; /* 4 or 8 when lab_off >= 0 */
    int32_t has_ids;
    int64_t file_bytes;
} ddp_shard_meta;

typedef struct {
    int64_t min_rows, max_rows, sum_rows;
    int64_t hist[16];      /* sample row counts in power-of-two bins: [1],[2-3],[4-7],... */
    int64_t *class_counts; /* [classes], allocated by the caller (or NULL) */
    int64_t classes_cap;
} ddp_shard_stats;

/* Opens path with HDF5 and checks every rule of docs/dataset-format.md. On failure returns DDP_ERR_FORMAT (or
 * DDP_ERR_IO) with "FILE: OBJECT[INDEX]: problem". stats may be NULL; it is accumulated into. */
ddp_status ddp_shard_validate(const char *path, const char *name, ddp_shard_meta *m, ddp_shard_stats *stats);

/* Whether dataset d's npoints values all live, written, in its own file (the rule every shard dataset follows, and
 * pack's input samples too): a virtual dataset or external storage may lack its source files, and storage never
 * (fully) written reads as the fill value, silently. UNWRITTEN fills detail with what HDF5 says ("H5Dget_num_chunks:
 * 0 of 4 chunks"); UNKNOWN: a query failed. */
typedef enum {
    DDP_H5_STORAGE_OK,
    DDP_H5_STORAGE_UNKNOWN,
    DDP_H5_STORAGE_VIRTUAL,
    DDP_H5_STORAGE_EXTERNAL,
    DDP_H5_STORAGE_UNWRITTEN
} ddp_h5_storage_kind;
ddp_h5_storage_kind ddp_h5_storage(hid_t d, hssize_t npoints, char *detail, size_t len);

/* Called with "attribute 'format'" etc. before each HDF5 read during validation (the isolated scan in
 * dataset.c reports it to its parent), NULL by default. */
extern void (*ddp_shard_progress)(const char *what);
/* 1 after a corrupt file crashed or hung HDF5 during validation: the process must not call HDF5 again
 * and should leave with _exit (HDF5's exit handlers could hang on the file too). */
int ddp_hdf5_poisoned(void);

/* Runtime handle of one shard on one rank, opened on first use. */
typedef struct {
    ddp_shard_meta meta;
    int opened;
    int access_hint; /* DDP_ACCESS_*: madvise advice for the features map */
    int fd;
    void *maps[4];
    size_t map_lens[4];
    int64_t sigbus[4];      /* handles of the maps in io/sigbus.c's table (0: none) */
    const float *features;  /* mapped, or NULL for the HDF5 read path */
    const int64_t *offsets; /* mapped or owned */
    const void *labels;     /* mapped (width lab_width) or owned int64 */
    int32_t lab_width;
    const int64_t *ids; /* mapped, owned, or NULL (ids = global index) */
    void *owned[3];
    hid_t h5file, h5features; /* HDF5 read path for features */
    const char *dir;          /* the dataset directory (set by ddp_shard_open; for messages) */
} ddp_shard;

ddp_status ddp_shard_open(ddp_shard *s, const char *dir);
void ddp_shard_close(ddp_shard *s);
/* Closes what ddp_shard_close does but keeps the index arrays read through HDF5 (owned), so that reopening the
 * shard (io/shard_cache.c) maps its features again without calling HDF5, which a worker thread must not. */
void ddp_shard_release_handles(ddp_shard *s);
/* Sample i's rows [*lo, *hi) of the shard, from its offsets: the values validation saw unless the file changed
 * in place since (a manifest trusts a shard whose size and mtime it recorded). A sample of no rows, more than the
 * shard's longest or outside its rows is one line naming file, object and index (DDP_ERR_FORMAT), never read. */
ddp_status ddp_shard_rows(const ddp_shard *s, int64_t i, int64_t *lo, int64_t *hi);
/* Sample i (local to the shard): rows and label, both checked as ddp_shard_rows does (a label outside
 * [0, classes) is refused the same way); rows points into the map or into scratch. */
ddp_status ddp_shard_sample(ddp_shard *s, int64_t i, float *scratch, const float **rows, int64_t *nrows, int64_t *label,
                            int64_t *sample_id);
/* Hint the kernel to read sample i's rows ahead (mapped shards only). */
void ddp_shard_prefetch(ddp_shard *s, int64_t i);
/* The same for the rows of samples [i, j) of the shard: one sequential run of the file. */
void ddp_shard_prefetch_range(ddp_shard *s, int64_t i, int64_t j);
/* The page-aligned mapped bytes holding the rows of samples [i, j): 1, or 0 when the shard is not mapped. */
int ddp_shard_range(ddp_shard *s, int64_t i, int64_t j, void **addr, size_t *len);

/* Process-wide I/O counters, for tests and benchmarks. */
typedef struct {
    int64_t h5_opens;  /* H5Fopen calls made by io/ in this process */
    int64_t validated; /* shard files validated for this process (in a child by default) */
    int64_t shards_mapped;
    int64_t hdf5_reads; /* per-sample H5Dread fallbacks */
    int64_t ahead_runs; /* --shuffle block: block-long runs of a shard file advised for read-ahead (WILLNEED) */
} ddp_io_counters;
ddp_io_counters *ddp_io_counters_get(void);

/* 1 when path is an HDF5 file HDF5 can open (H5Fis_accessible, or H5Fis_hdf5 before 1.12). */
int ddp_h5_is_hdf5(const char *path);
/* Silences HDF5's own error stack printing (our messages replace it). */
void ddp_h5_quiet(void);

#endif
