/* kaio.c: the Linux AIO backend (io_submit with RWF_NOWAIT reads, their O_DIRECT detour, and
 * writer threads for large buffered writes). */
#ifndef AIONATIVE_KAIO_H
#define AIONATIVE_KAIO_H

#include "engine.h"

/* The most one Linux AIO O_DIRECT re-issue reads (kaio.c, direct_setup): a larger read goes in
 * pieces of this size, one after another, through one bounce buffer of this size. One piece of
 * the whole read would need a second buffer as large as the caller's (a 256 MiB read would hold
 * 512 MiB) and stop the loop for its copy-out (a fifth of a second for 256 MiB); the block
 * layer still splits each piece into requests the device takes at once. */
#define DETOUR_MAX (4u << 20)

extern const backend_ops kaio_ops;
/* Create the backend state in `e`. 0 or -errno, with a reason written. */
int kaio_create(engine_t *e, unsigned entries, char *why, size_t whylen);
void kaio_pool_drain(void);
void kaio_after_fork_child(void);
/* The operation lets go of its O_DIRECT descriptor of the detour (its reference to a cache
 * entry, or its own). A descriptor closed is kept open instead while its file has a lock on it:
 * closing any descriptor of a file drops the process's POSIX locks on it (kaio.c, maybe_locked). */
void kaio_direct_release(engine_t *e, op_t *op);

#endif
