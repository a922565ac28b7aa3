/* uring.c: the io_uring backend (a ring set up with raw system calls, see uring_abi.h). */
#ifndef AIONATIVE_URING_H
#define AIONATIVE_URING_H

#include "engine.h"

/* Create the backend state in `e`. 0 or -errno, with a reason written. */
int uring_create(engine_t *e, unsigned entries, unsigned force_flags, int use_force_flags,
                 char *why, size_t whylen);
/* Whether io_uring can be used, and the best setup flags the kernel accepts: 0 or -errno, with
 * a reason written. */
int uring_probe(unsigned *flags_out, char *why, size_t whylen);
/* Whether the engine runs operations of `kind` itself: the kernel does (io_uring, by its
 * probe), or for an open on Linux AIO its writer threads, and there only one whose
 * `open_flags` create or truncate (-1: any open it can make; see Engine.supports). */
int engine_supports(engine_t *e, int kind, int open_flags);

#endif
