/* manifest.h — the dataset manifest (issue #33): one binary file, DIR/mpiddp-manifest.bin by default, holding each
 * shard's name, size, mtime, the metadata training needs and inspect's statistics, so that start-up re-validates
 * only the shards that changed (docs/dataset-format.md#the-manifest). Format, checks and atomic write. */
#ifndef DDP_MANIFEST_H
#define DDP_MANIFEST_H

#include "io/shard.h"

#define DDP_MANIFEST_NAME "mpiddp-manifest.bin"
#define DDP_MANIFEST_MAGIC "MPIDDPMF"
/* 2: validation also refuses external links and unwritten storage, and maps only exact IEEE/STD types; a version-1
 * manifest may hold shards this validation refuses or reads otherwise, so it is not read (every shard is validated) */
#define DDP_MANIFEST_VERSION 2

/* One shard's record: all int64 (no padding), written as is (little-endian hosts). Also the record the ranks
 * gather at start-up. */
typedef struct {
    int64_t n, rows, dim, classes, max_rows;
    int64_t feat_off, off_off, lab_off, ids_off, lab_width, has_ids;
    int64_t file_bytes, mtime_ns;
    int64_t min_rows, sum_rows, hist[16]; /* rows per sample */
    int64_t nonfinite, nonfinite_samples; /* NaN/Inf feature values and samples holding them; -1: not scanned */
    int64_t ncc, cc_first;                /* (class, count) pairs of this shard in the pairs section */
    int64_t name_off, name_len;           /* in the names section (NUL-terminated there) */
} ddp_manifest_entry;

typedef struct {
    int64_t count;
    const ddp_manifest_entry *e; /* [count], sorted by name */
    const char *names;
    int64_t names_bytes;
    const int64_t *pairs; /* [npairs][2]: class, count */
    int64_t npairs;
} ddp_manifest;

/* Parses a manifest image of len bytes (kept by the caller; m points into it). 0 if valid, else -1 with why
 * ("checksum mismatch", "bad magic", ...) in why. */
int ddp_manifest_parse(const void *buf, int64_t len, ddp_manifest *m, char *why, size_t whylen);
/* Index of the entry named name, or -1. */
int64_t ddp_manifest_find(const ddp_manifest *m, const char *name);
const char *ddp_manifest_name(const ddp_manifest *m, int64_t i);
/* A manifest may be written to path (index --manifest): nothing is there, or an empty file, a manifest (its magic)
 * or a file named DDP_MANIFEST_NAME. Any other file, a shard or a checkpoint named by mistake, is refused
 * (DDP_ERR_ARG, one line), never replaced. */
ddp_status ddp_manifest_replaceable(const char *path);
/* Writes a manifest atomically (FILE.tmp.HOST.pidns-NS.PID beside FILE, NS: the inode of /proc/self/ns/pid, or
 * FILE.tmp.HOST.PID where /proc does not tell; fsync, rename, fsync of the directory): entries[count] (their cc_first,
 * name_off and name_len are filled here), names[count] sorted, pairs[npairs][2]. One-line errors. The temporary is
 * registered for the CLI's signal handler (fsutil.h) while it exists. */
ddp_status ddp_manifest_write(const char *path, ddp_manifest_entry *entries, char *const *names, int64_t count,
                              const int64_t *pairs, int64_t npairs);

/* 1 when name is a temporary of the manifest writer for the file named base: base.tmp.HOST.pidns-NS.PID,
 * base.tmp.HOST.PID (no namespace: pidns 0), or base.tmp.PID as mpiddp wrote it before temporaries named their host
 * (host then ""); host, pidns and pid filled when not NULL. */
int ddp_manifest_is_temporary(const char *name, const char *base, char *host, size_t hostlen, unsigned long long *pidns,
                              long *pid);
/* Removes the temporaries of path's writers that died (killed before their rename): those named with this host and
 * this PID namespace (or no namespace) whose PID no longer exists. Another live process's stay, and so do another
 * host's or another PID namespace's (a container of the same host name): they may be writing over a shared file
 * system, and their PID means nothing here. Returns how many of other hosts or namespaces (or without a host) stay,
 * the first of them in other (may be NULL). Best effort: a temporary is never read. */
int64_t ddp_manifest_remove_stale(const char *path, char *other, size_t otherlen);
/* The shard fields of an entry, and back (stats fields left as they are). */
void ddp_manifest_to_meta(const ddp_manifest_entry *e, const char *name, ddp_shard_meta *m);
void ddp_manifest_from_meta(const ddp_shard_meta *m, ddp_manifest_entry *e);

#endif
