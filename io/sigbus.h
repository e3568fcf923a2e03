/* sigbus.h — turns a SIGBUS inside a mapped shard (truncated or rewritten in place while mapped) into one line naming
 * the file, then _exit(1). The shard code registers each map and unregisters it before munmap; a SIGBUS outside every
 * registered map goes to the handler there before (or the default action), so real bugs still crash as before. */
#ifndef DDP_SIGBUS_H
#define DDP_SIGBUS_H

#include "mpiddp.h"

#include <stddef.h>
#include <stdint.h>

/* Records [addr, addr + len) as a read-only map of path (object obj, e.g. "features") whose first byte is
 * file byte file_off; fd stays open while registered (the handler fstat()s it for the current size).
 * *handle receives a value > 0 for ddp_sigbus_unregister. Installs the SIGBUS handler on first use.
 * Thread-safe. */
ddp_status ddp_sigbus_register(const void *addr, size_t len, const char *path, const char *obj, int64_t file_off,
                               int fd, int64_t *handle);
/* Forgets a registered map (call before munmap) and sets *handle to 0. Thread-safe; 0 is ignored. */
void ddp_sigbus_unregister(int64_t *handle);
/* Registered maps right now (tests). */
int64_t ddp_sigbus_count(void);

#endif
