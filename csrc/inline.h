/* inline.c: the inline fast path (work the kernel can do without blocking, done inside the
 * call on the loop's thread) and the cooperative budget that bounds it. */
#ifndef AIONATIVE_INLINE_H
#define AIONATIVE_INLINE_H

#include "engine.h"

/* Larger reads always go to the kernel queue: one inline copy must stay well within a budget
 * (1 MiB from the page cache takes ~0.1 ms here). */
#define INLINE_MAX (1u << 20)
/* Larger writes go to the kernel queue: their copy outweighs the hand-off, and io_uring's
 * worker (or Linux AIO's io_submit, in one batch) keeps it off the loop's turns (1 MiB writes
 * done inline run slower than queued, with more loop lag: `python -m bench --workloads W5F`). */
#define WRITE_INLINE_MAX (64u << 10)

/* inline_allowed's `retry` for a read refused already, done now all the same (its caller
 * parks: see engine_park). */
#define INLINE_NOW 2
int inline_allowed(engine_t *e, int fd, int retry);
int inline_turn_spent(engine_t *e);
/* 1 if what the engine knows of `fd` now says its reads never go inline (O_DIRECT). */
int inline_fd_refuses(engine_t *e, int fd);
/* 0 if `fd` has a file position (pread/pwrite may use it), else -1 with OSError(ESPIPE) set. */
int inline_fd_positional(engine_t *e, int fd);
/* 1 if this iteration already found `fd` to have a position (no system call, no error). */
int inline_fd_known_positional(engine_t *e, int fd);
int inline_read(engine_t *e, int fd, char *buf, uint64_t len, int64_t off, int64_t eof,
                uint64_t *got);
int inline_empty_read(engine_t *e, int fd, int64_t off);
/* 1 if a write on `fd` may be done inline now, WRITE_LATER if it could be but the budget is
 * spent (the caller yields a turn and retries), 0 if it goes to the kernel queue, -1 on error. */
#define WRITE_LATER 2
int inline_write_allowed(engine_t *e, int fd, int retry);
int inline_write(engine_t *e, int fd, const char *buf, uint64_t len, int64_t off,
                 uint64_t *got);
int inline_empty_readinto(engine_t *e, int fd, int64_t off);
/* A whole small regular file, read inline: bytes (the descriptor is closed), an int (a
 * descriptor opened here that the caller reads and closes), False (this iteration's budget
 * is spent: yield, then try again) or None (nothing opened: use the kernel queue). */
PyObject *inline_read_file(engine_t *e, int dirfd, const char *path, int retry);
/* open(2) of `path` inline when the dentry cache holds it: the descriptor (int), False (budget
 * spent: yield, then try again) or None (use the kernel queue: not cached, an error, or a
 * flag that may write: O_CREAT, O_TRUNC, O_TMPFILE). Opened the way io_uring's openat opens:
 * O_NONBLOCK first, cleared afterwards unless `flags` has it. */
PyObject *inline_open(engine_t *e, int dirfd, const char *path, int flags, int retry);
/* inline_open's open alone, not bounded by the budget: the descriptor with O_NONBLOCK still
 * set (inline_clear_nonblock clears it), or -1 (use the kernel queue). */
int inline_open_fd(engine_t *e, int dirfd, const char *path, int flags);
/* Clear O_NONBLOCK on a descriptor an inline open opened: 0, or -1 with the error set. */
int inline_clear_nonblock(engine_t *e, int fd);
/* close(2) inline of a descriptor whose close cannot wait: a regular file, still linked,
 * opened read-only, on a local filesystem (no ->flush); whenever the fast path is on, even
 * with the budget spent. `rdonly_regular`: the caller opened it read-only (no F_GETFL). 1
 * closed, 0 not (use the queue), -1 error (the descriptor is closed all the same, as close(2)
 * leaves it). */
int inline_close(engine_t *e, int fd, int rdonly_regular);
/* The engine opened or closed descriptor `fd`: what fd_memo knew about the number is void. */
void inline_forget_fd(engine_t *e, int fd);
/* The loop has polled: a new iteration, whose inline budget and fd_memo start afresh. */
void inline_new_iteration(engine_t *e);
/* A read of `size` bytes at `off` on a descriptor opened here without O_DIRECT, inline or not
 * at all: bytes (all cached), False (the budget is spent), None (use the kernel queue).
 * `eof`: the file's size as fstat(2) gave it (see inline_read). */
PyObject *inline_read_known(engine_t *e, int fd, Py_ssize_t size, int64_t off, int64_t eof,
                            int retry);

#endif
