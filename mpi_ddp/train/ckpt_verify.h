/* ckpt_verify.h — what makes a loaded checkpoint trustworthy (docs/run-directory.md), for checkpoint.c: a CRC-32
 * (zlib's polynomial, as Python's zlib.crc32) of each dataset's little-endian bytes in its uint32 attribute "crc32",
 * compared after reading; parameters and optimizer state checked finite; the root attribute "checksums" = "crc32". */
#ifndef DDP_CKPT_VERIFY_H
#define DDP_CKPT_VERIFY_H

#include "mpiddp.h"

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#define DDP_CKPT_CHECKSUMS "crc32" /* the root attribute "checksums" and each dataset's attribute name */

/* CRC-32 of n elements of elem bytes (4 or 8), over their little-endian bytes whatever the host's order. */
uint32_t ddp_ckpt_crc32(const void *data, int64_t n, size_t elem);
/* Creates dataset `name` under loc (float32 when elem is 4, float64 when 8), writes data and its checksum. */
herr_t ddp_ckpt_write_dataset(hid_t loc, const char *name, int ndim, const hsize_t *dims, const void *data,
                              size_t elem);
/* For dataset `name` just read into buf (n elements of elem bytes): its stored checksum must match (when
 * sums). DDP_ERR_FORMAT naming path and dataset otherwise. */
ddp_status ddp_ckpt_verify_crc(hid_t d, const char *path, const char *name, int sums, const void *buf, int64_t n,
                               size_t elem);
/* Why the HDF5 call that just failed failed, from its error stack: a metadata checksum, or "truncated or corrupt". */
const char *ddp_ckpt_h5_cause(void);
/* 1 when every component of an HDF5 path exists, 0 when one is missing, -1 when HDF5 cannot tell (corrupt). */
int ddp_ckpt_path_exists(hid_t f, const char *name);
/* Reads group/<tensor> for the model's tensors into out (its flat layout), checking shape, checksum (when
 * sums) and finiteness; out NULL: verifies only, and a missing group is no error. A mismatch names the model
 * settings that shape the tensors: the CLI's options (cli != 0) or ddp_model_config's fields (optname.h). */
ddp_status ddp_ckpt_read_tensors(hid_t f, const char *path, int sums, const char *group, const ddp_model *model,
                                 float *out, int cli);
/* Reads the per-rank dataset `name` of W doubles into out (verified against its checksum when sums); *found is 1
 * when the file holds it, out untouched when not. */
ddp_status ddp_ckpt_read_per_rank(hid_t f, const char *path, const char *name, int sums, int64_t W, double *out,
                                  int *found);

#endif
