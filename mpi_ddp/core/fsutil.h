/* fsutil.h — small file-system and HDF5 helpers shared by the shard writer, checkpoints and the trainer:
 * durable writes (fsync of a file or directory), mkdir -p, scalar HDF5 attributes, and rank lists for
 * messages ("0,2-3"). */
#ifndef DDP_FSUTIL_H
#define DDP_FSUTIL_H

#include "mpiddp.h"

#include <hdf5.h>
#include <stddef.h>

ddp_status ddp_fsync_path(const char *path, int is_dir);
/* Creates dir and its parents; fails if it cannot be written. */
ddp_status ddp_mkdir_p(const char *dir);
/* ddp_mkdir_p that also records in made (when still "") the first directory of the path its own mkdir made (one
 * another process made at the same moment is not recorded). */
ddp_status ddp_mkdir_p_made(const char *dir, char *made, size_t len);
herr_t ddp_h5_attr_i64(hid_t obj, const char *name, int64_t v);
herr_t ddp_h5_attr_f64(hid_t obj, const char *name, double v);
/* Fixed-length, NUL-terminated string attribute (what C writers produce). */
herr_t ddp_h5_attr_str(hid_t obj, const char *name, const char *v);
/* A file about to be opened for reading: it must exist, be a regular file (a FIFO or device would block the
 * open; a directory would reach HDF5 as "not an HDF5 file") and open for reading. The error is one line,
 * "<path>: cannot open <what>: <cause>" (is a directory, not a regular file (a FIFO), Permission denied). */
ddp_status ddp_check_regular_file(const char *path, const char *what);
/* Writes len bytes to path (created or truncated), fsyncs and closes it; on any failure (No space left on
 * device, ...) removes path and returns DDP_ERR_IO: "<path>: <write|fsync|close>: <cause>". */
ddp_status ddp_write_file_durable(const char *path, const void *buf, size_t len);
/* All n bytes to or from fd, retried on EINTR and short counts: 0, or -1 (errno set; 0 at end of file). */
int ddp_write_all(int fd, const void *p, size_t n);
int ddp_read_all(int fd, void *p, size_t n);
/* The one temporary this process is writing that a fatal signal should take with it (a shard's or the manifest's,
 * before its rename); NULL: none. ddp_unlink_registered_temporary() is async-signal-safe: a handler calls it before the
 * signal's default action (app/stop_signals.c). */
void ddp_register_temporary(const char *path);
void ddp_unlink_registered_temporary(void);
/* An async-signal-safe function that ddp_unlink_registered_temporary() runs once it has removed the temporary: what a
 * dataset writer's run undoes when a fatal signal ends it (io/writer.c: its shards, its lock file, the --out it made);
 * NULL: none. */
void ddp_register_signal_cleanup(void (*fn)(void));
/* The ranks r < n with (flags[r] != 0) == want, as "0,2-3" ("none" when empty). */
void ddp_rank_list(const int *flags, int n, int want, char *buf, size_t len);

#endif
