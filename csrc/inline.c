/* The inline fast path: work the kernel can do without blocking, done inside the call on the
 * loop's thread instead of through the kernel queue, and the cooperative budget that bounds
 * it. Page-cache reads (preadv2 RWF_NOWAIT), whole small files (openat2 RESOLVE_CACHED,
 * fstat, the read, close), and buffered writes to local files (pwrite into the page cache,
 * watched for stalls). Whatever cannot be done this way goes to the queue unchanged.
 */
#include "engine.h"  /* Python.h first: it defines _GNU_SOURCE */
#include "inline.h"
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

/* A call the budget refused, retried after one turn of the loop, may still run inline while the
 * iteration's inline work is under this many budgets (see inline_budget_ok). */
#define RETRY_GRACE 4u

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Open this iteration's budget window at `now` if it is not open: 1 if it was opened, 0 if
 * it was open already, -1 on error. The flush it schedules runs on the next iteration, after
 * the loop has polled: it reopens the window, so the budget is per iteration however the loop
 * gets there. */
static int budget_window_open(engine_t *e, uint64_t now)
{
    if (e->window_start)
        return 0;
    if (engine_schedule_flush(e) < 0)
        return -1;
    e->window_start = now;
    return 1;
}

static void budget_mark_spent(engine_t *e)
{
    if (e->budget_spent)
        return;
    e->budget_spent = 1;
    e->spent_since_release = 1;
    e->st.budget_exhausted++;
}

/* 1 if this loop iteration's budget still allows inline work, 0 if not, -1 on error.
 *
 * `retry`: the caller was refused on an earlier iteration and has let the loop turn once
 * since (a bare yield: everything that was ready has run). It may still go inline while the
 * iteration's inline work is under RETRY_GRACE budgets; past that it waits in the queue of
 * refused calls like any other. Without this, every task but the first to run in an iteration
 * would be refused again, each of its calls deferred through a future: a bounded grace lets
 * each of them do its one call. */
static int inline_budget_ok(engine_t *e, int retry)
{
    if (!e->budget_ns)
        return 0;
    int follow = !retry && e->budget_spent && e->retry_follow;
    e->retry_follow = 0;
    if (retry)
        e->st.inline_retries++;
    else if (e->budget_spent && !follow)
        return 0;
    uint64_t now = mono_ns();
    int opened = budget_window_open(e, now);
    if (opened < 0)
        return -1;
    if (!opened && now - e->window_start >= e->budget_ns) {
        budget_mark_spent(e);
        if (!retry && !follow)
            return 0;
        if (now - e->window_start >= RETRY_GRACE * e->budget_ns) {
            if (retry)
                e->st.retries_refused++;
            return 0;
        }
        e->retry_follow = retry;
    }
    return 1;
}

/* 1 if this loop iteration's budget is spent, 0 if not (the iteration's window opened if it
 * was not: its flush reopens it next iteration), -1 on error. For work served from memory
 * (a file's read-ahead window, lines and bytes handed out without any I/O): its caller yields
 * a turn when the budget is spent, so a tight loop holds the event loop for about one budget,
 * as inline reads do. No retry grace: nothing waits to be admitted. */
int inline_turn_spent(engine_t *e)
{
    if (!e->budget_ns)
        return 0;
    if (e->budget_spent)
        return 1;
    uint64_t now = mono_ns();
    int opened = budget_window_open(e, now);
    if (opened)
        return opened < 0 ? -1 : 0;
    if (now - e->window_start < e->budget_ns)
        return 0;
    budget_mark_spent(e);
    return 1;
}

/* Descriptor facts, learned once per loop iteration.
 *
 * Whether a read may go inline (not O_DIRECT) and whether a write may (write_eligible) are
 * learned by system calls: fcntl(F_GETFL), statx. Paid on every call, the fcntl alone was
 * a seventh of a cached 4 KiB read's cost (`python -m bench.instructions` counts it). The
 * kernel has no
 * cheaper way to tell that a number still names the same open file, so what was learned is
 * kept for the rest of the loop iteration (a new one begins when the loop polls), and
 * forgotten at once when the engine opens or closes that number (or is told: forget_fd, after
 * open(fd, direct=True) sets O_DIRECT). Only a number closed and opened again outside the
 * engine (os.close, os.open, os.dup2), or its flags changed by the caller's fcntl(F_SETFL),
 * within one iteration goes unseen until the next; and what that costs is time, never data:
 * until the iteration's budget is spent, reads and writes on it that the kernel would have let
 * wait for the device (a direct read, an O_SYNC or remote write) run on the loop's thread, and
 * still return what the file holds; an error is still reported by the kernel queue, exactly
 * as without the fast path. A verdict that a descriptor's reads may not go inline (O_DIRECT)
 * can outlast the iteration: it is learned without opening the budget's window, and a direct
 * read sent early schedules no flush, so the facts are renewed at the next wake-up or flush;
 * a number reused meanwhile for a buffered file has its reads queued, not inline: time
 * again. */
enum { MEMO_READ = 1, MEMO_READ_OK = 2, MEMO_WRITE = 4, MEMO_WRITE_OK = 8, MEMO_SEEK_OK = 16 };

/* `fd`'s entry, emptied when it held another number or another iteration's facts. */
static fd_memo_t *fd_memo(engine_t *e, int fd)
{
    fd_memo_t *m = &e->fd_memo[(unsigned)fd & (FD_MEMO_SIZE - 1)];
    if (m->fd != fd || m->gen != e->memo_gen) {
        m->fd = fd;
        m->gen = e->memo_gen;
        m->what = 0;
    }
    return m;
}

int inline_fd_refuses(engine_t *e, int fd)
{
    fd_memo_t *m = &e->fd_memo[(unsigned)fd & (FD_MEMO_SIZE - 1)];
    return m->fd == fd && m->gen == e->memo_gen &&
           (m->what & (MEMO_READ | MEMO_READ_OK)) == MEMO_READ;
}

/* pread(2) and pwrite(2) refuse a file opened without a position (FMODE_PREAD/PWRITE unset:
 * a pipe, FIFO, socket, tty, eventfd) with ESPIPE; io_uring's READ and WRITE instead ignore
 * the offset for such files (they would consume or produce stream data), and Linux AIO may run
 * them inside io_submit, on the loop's thread, for as long as the stream stays empty or full.
 * Told by the file's type (fstat): pipes, FIFOs, sockets and anonymous inodes (eventfd,
 * timerfd, signalfd: no type bits) have no position; regular files, directories and block
 * devices have one; a character device has one if lseek(2) accepts it (a tty does not, as
 * pread does not; /dev/zero does). Neither call reads the file or notifies a watcher. A
 * position found is remembered for the loop iteration (see fd_memo); no position is asked
 * again on every call, so a number reused for a file is never refused for its past. Any
 * other error (EBADF) is the operation's to report, as the queue reports it. */
static int fd_has_position(engine_t *e, int fd)
{
    struct stat st;
    e->st.syscalls++;
    if (fstat(fd, &st) < 0)
        return 1;
    switch (st.st_mode & S_IFMT) {
    case S_IFIFO:
    case S_IFSOCK:
    case 0:
        return 0;
    case S_IFCHR:
        e->st.syscalls++;
        return !(lseek(fd, 0, SEEK_CUR) < 0 && errno == ESPIPE);
    default:
        return 1;
    }
}

int inline_fd_positional(engine_t *e, int fd)
{
    fd_memo_t *m = fd_memo(e, fd);
    if (m->what & MEMO_SEEK_OK)
        return 0;
    if (fd_has_position(e, fd)) {
        m->what |= MEMO_SEEK_OK;
        return 0;
    }
    errno = ESPIPE;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
}

int inline_fd_known_positional(engine_t *e, int fd)
{
    fd_memo_t *m = &e->fd_memo[(unsigned)fd & (FD_MEMO_SIZE - 1)];
    return m->fd == fd && m->gen == e->memo_gen && (m->what & MEMO_SEEK_OK);
}

void inline_forget_fd(engine_t *e, int fd)
{
    fd_memo_t *m = &e->fd_memo[(unsigned)fd & (FD_MEMO_SIZE - 1)];
    if (m->fd == fd)
        m->gen = 0;
}

void inline_new_iteration(engine_t *e)
{
    e->window_start = 0;
    e->budget_spent = 0;
    e->retry_follow = 0;
    e->memo_gen++;
}

/* 1 if a read on `fd` may be tried inline now, 0 if it goes to the kernel queue, -1 on error.
 * Not once the budget is spent (unless `retry` is INLINE_NOW: a read the budget refused whose
 * caller will park, see engine_park), and not on an O_DIRECT descriptor: RWF_NOWAIT keeps a
 * buffered read off the disk, but a direct read still waits for it. A descriptor whose flags
 * cannot be read goes to the kernel queue, which reports its error as before. */
int inline_allowed(engine_t *e, int fd, int retry)
{
    if (!e->budget_ns)
        return 0;
    /* The descriptor first: a direct read never goes inline, and asking the budget would
     * open its window, which schedules a flush (inline_budget_ok) the read does not need: at
     * depth 1, a read sent early (engine_start) would still cost the loop an iteration. */
    fd_memo_t *m = fd_memo(e, fd);
    if (!(m->what & MEMO_READ)) {
        e->st.syscalls++;
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0) {
            e->retry_follow = 0;  /* as a refusal by the budget: the call is not the retry's */
            return 0;  /* not open (or not now): nothing learned */
        }
        m->what |= MEMO_READ | (fl & O_DIRECT ? 0 : MEMO_READ_OK);
    }
    if (!(m->what & MEMO_READ_OK)) {
        e->retry_follow = 0;
        return 0;
    }
    return retry == INLINE_NOW && e->window_start ? 1 : inline_budget_ok(e, retry == 1);
}

/* Read buf[0..len) at `off` from the page cache without blocking. 1: the read is complete
 * (*got bytes, short only at end of file); 0: the rest must go to the kernel queue (*got
 * bytes are already in buf). Any failure, EAGAIN (not cached) or otherwise, means the kernel
 * queue: it waits for the data or reports the error exactly as without the fast path.
 *
 * A short read is the end of the file only if the next read returns 0: RWF_NOWAIT also stops
 * short where the page cache stops holding the file. Those stops fall on page boundaries
 * (the copy goes folio by folio, and folios are whole pages), so a short read that ends at
 * `eof` — the size the caller saw in fstat(2), -1 if none — inside a page ended at the
 * file's size as the read saw it: no second read is needed then. */
int inline_read(engine_t *e, int fd, char *buf, uint64_t len, int64_t off, int64_t eof,
                uint64_t *got)
{
    uint64_t done = 0;
    for (;;) {
        struct iovec iov = {buf + done, (size_t)(len - done)};  /* len <= INLINE_MAX */
        e->st.syscalls++;
        ssize_t n = fault_hit(FP_INLINE) ? -1 : preadv2(fd, &iov, 1, off + (int64_t)done,
                                                        RWF_NOWAIT);
        if (n < 0)
            break;
        done += (uint64_t)n;
        int64_t end = off + (int64_t)done;
        if (n == 0 || done == len || (end == eof && end % 4096 != 0)) {
            *got = done;
            e->st.inline_hits++;
            return 1;
        }
    }
    *got = done;
    e->st.inline_misses++;
    return 0;
}

/* A read of nothing, inline, reporting what the standard library's call reports. The kernel
 * queue (and preadv2 RWF_NOWAIT) would skip the file's read method for an empty request and
 * say 0 where these do not:
 * - read (os.pread): one pread(2) of 0 bytes, which asks the read method: EISDIR on a
 *   directory, EBADF on a write-only descriptor, ESPIPE, ...;
 * - readinto (os.preadv): one preadv(2) of one empty iovec, as os.preadv makes it: the access
 *   mode (EBADF), the offset (EINVAL) and seekability (ESPIPE) are checked, but a vectored
 *   read of nothing returns 0 before the read method is asked (0 on a directory). */
static int empty_read(engine_t *e, int fd, int64_t off, int vectored)
{
    char byte;
    struct iovec iov = {&byte, 0};
    e->st.syscalls++;
    if ((vectored ? preadv(fd, &iov, 1, off) : pread(fd, &byte, 0, off)) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    e->st.inline_hits++;
    return 0;
}

int inline_empty_read(engine_t *e, int fd, int64_t off)
{
    return empty_read(e, fd, off, 0);
}

int inline_empty_readinto(engine_t *e, int fd, int64_t off)
{
    return empty_read(e, fd, off, 1);
}

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x00004000U  /* Linux 6.8 */
#endif

/* stx_mnt_id (5.8) is the u64 at byte 144 of struct statx on every kernel; a build host's
 * older headers call those bytes spare, so it is read by its offset. */
_Static_assert(sizeof(struct statx) == 256, "struct statx is the kernel's 256 bytes");
static uint64_t statx_mnt_id(const struct statx *sx)
{
    uint64_t id;
    memcpy(&id, (const char *)sx + 144, sizeof id);
    return id;
}

/* Filesystems whose close(2) of a file opened read-only never waits: no ->flush method
 * (io_uring sends a close to a worker when the file has one: NFS, FUSE, CIFS, overlayfs). */
static int local_fs(engine_t *e, int fd)
{
    static const long known[] = {EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, BTRFS_SUPER_MAGIC,
                                 TMPFS_MAGIC, F2FS_SUPER_MAGIC, RAMFS_MAGIC};
    struct statfs sf;
    e->st.syscalls++;
    if (fstatfs(fd, &sf) < 0)
        return 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if ((long)sf.f_type == known[i])
            return 1;
    return 0;
}

/* statx of a descriptor for `mask` and the mount's unique id (Linux 6.8; without it, no id).
 * Never waits for a remote server (AT_STATX_DONT_SYNC): a remote file is not local_mount's. */
static int fd_statx(engine_t *e, int fd, unsigned mask, struct statx *sx)
{
    e->st.syscalls++;
    return statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, mask | STATX_MNT_ID_UNIQUE, sx);
}

/* local_fs for the descriptor fd_statx described, asked only for a mount not found local
 * before: the mount's filesystem never changes, and its unique id is never reused. */
static int local_mount(engine_t *e, int fd, const struct statx *sx)
{
    int unique = (sx->stx_mask & STATX_MNT_ID_UNIQUE) != 0;
    if (unique && statx_mnt_id(sx) == e->local_mnt)
        return 1;
    if (!local_fs(e, fd))
        return 0;
    if (unique)
        e->local_mnt = statx_mnt_id(sx);
    return 1;
}

/* Buffered writes.
 *
 * No filesystem here takes RWF_NOWAIT on a buffered write (ext4 and tmpfs say EOPNOTSUPP), so
 * io_uring hands every one to an io-wq worker and Linux AIO copies it inside io_submit. A
 * write to the page cache of a local file costs a few microseconds, and the hand-off costs
 * more: on this machine ~150 µs of CPU and two cross-CPU wake-ups per write at depth 1. So
 * such writes are done inline, like cached reads, under the same budget. Unlike a RWF_NOWAIT
 * read, a plain write can sleep: dirty-page throttling, a partial page read from the disk, a
 * journal or inode lock. Each is timed; one slower than WRITE_STALL_NS, in which the thread
 * slept (its voluntary context switches went up since the iteration's first write: not a
 * preemption or a virtual CPU the host did not run, nor a wait to take the GIL back), sends
 * every write to the kernel queue for WRITE_CALM_NS, where a sleep is a worker's, not the
 * loop's. */

/* An inline write that took longer than this slept in the kernel (dirty-page throttling, a
 * page read from the disk, a journal or inode lock): writes then go to the kernel queue for
 * WRITE_CALM_NS (see inline_write). */
#define WRITE_STALL_NS 1000000u
#define WRITE_CALM_NS 1000000000u
/* Taking the GIL back after an inline write took longer than this: another thread had it (the
 * loop's thread slept meanwhile). */
#define GIL_WAIT_NS 50000u

/* The loop thread's voluntary context switches (it slept) so far; -1 if unknown. */
static long thread_sleeps(engine_t *e)
{
    struct rusage ru;
    e->st.syscalls++;
    return getrusage(RUSAGE_THREAD, &ru) < 0 ? -1 : ru.ru_nvcsw;
}

/* Whether a write to `fd` could be done inline: not where it waits for the device (O_DIRECT,
 * O_SYNC, O_DSYNC), not on a descriptor that cannot write (the queue reports EBADF), and only
 * to a regular file of a local filesystem: a pipe, a device or a network filesystem's write
 * may wait. */
static int write_eligible(engine_t *e, int fd)
{
    fd_memo_t *m = fd_memo(e, fd);
    if (m->what & MEMO_WRITE)
        return (m->what & MEMO_WRITE_OK) != 0;
    e->st.syscalls++;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return 0;  /* not open (or not now): nothing learned */
    struct statx sx;
    int ok = !(fl & (O_DIRECT | O_DSYNC | O_SYNC)) && (fl & O_ACCMODE) != O_RDONLY &&
             fd_statx(e, fd, STATX_TYPE, &sx) == 0 && S_ISREG(sx.stx_mode) &&
             local_mount(e, fd, &sx);
    m->what |= MEMO_WRITE | (ok ? MEMO_WRITE_OK : 0);
    return ok;
}

int inline_write_allowed(engine_t *e, int fd, int retry)
{
    if (e->write_calm_at) {
        if (mono_ns() < e->write_calm_at)
            return 0;
        e->write_calm_at = 0;
    }
    int ok = inline_budget_ok(e, retry);
    if (ok < 0)
        return ok;
    /* Refused by the budget: worth a turn only if it could be done inline then. */
    if (ok == 0)
        return e->budget_ns && e->budget_spent && write_eligible(e, fd) ? WRITE_LATER : 0;
    return write_eligible(e, fd);
}

/* Write buf[0..len) at `off` on the loop's thread. 1: all of it is written; 0: the rest must
 * go to the kernel queue (*got bytes are written): an error or a write that made no progress,
 * which the queue meets again and reports exactly as without the fast path. */
int inline_write(engine_t *e, int fd, const char *buf, uint64_t len, int64_t off, uint64_t *got)
{
    if (e->sleeps_window != e->window_start) {  /* the iteration's first write */
        e->sleeps_window = e->window_start;
        e->sleeps_at_start = thread_sleeps(e);
    }
    uint64_t t0, t1, done = 0;
    int slept;
    /* Decided here, with the GIL: the fault counters are shared by every engine. */
    int stop = fault_hit(FP_INLINE_WRITE) != 0;
    int fail = stop && fault_errno[FP_INLINE_WRITE];  /* as if it failed before writing */
    /* Without the GIL, as os.pwrite: a write that sleeps (a frozen filesystem sleeps until it
     * thaws) stops the loop, not the process's other threads. Timed in here, so that taking
     * the GIL back is not counted as the kernel's. */
    Py_BEGIN_ALLOW_THREADS
    t0 = mono_ns();
    while (done < len && !fail) {
        size_t want = (size_t)(len - done);  /* len <= WRITE_INLINE_MAX */
        if (stop)
            want /= 2;  /* half of it, then it stops */
        e->st.syscalls++;
        ssize_t n = want ? pwrite(fd, buf + done, want, off + (int64_t)done) : 0;
        if (n > 0)
            done += (uint64_t)n;
        if (n <= 0 || stop)
            break;
    }
    t1 = mono_ns();
    slept = t1 - t0 > WRITE_STALL_NS && thread_sleeps(e) != e->sleeps_at_start;
    Py_END_ALLOW_THREADS
    /* Taking the GIL back waited for another thread (a forced switch, which any Python code
     * of the loop meets once a switch interval): not the write's sleep, and the queue would
     * not avoid it. The thread slept meanwhile: a new baseline, so that the next write's test
     * does not count that sleep as its own. */
    if (mono_ns() - t1 > GIL_WAIT_NS)
        e->sleeps_at_start = thread_sleeps(e);
    if (slept || fault_hit(FP_WRITE_STALL)) {
        e->write_calm_at = t1 + WRITE_CALM_NS;
        e->st.write_stalls++;
    }
    *got = done;
    if (done == len) {
        e->st.inline_writes++;
        return 1;
    }
    e->st.inline_misses++;
    return 0;
}

/* Clear the O_NONBLOCK an inline open set (io_uring opens inline with it and clears it the
 * same way). 0, or -1 with the error set. */
int inline_clear_nonblock(engine_t *e, int fd)
{
    e->st.syscalls++;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        return 0;
    e->st.syscalls++;
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* Give the caller a descriptor opened here, as the kernel queue's openat would have: with
 * O_NONBLOCK cleared unless the caller asked for it. */
static PyObject *handoff(engine_t *e, int fd, int keep_nonblock)
{
    if (!keep_nonblock && inline_clear_nonblock(e, fd) < 0) {
        close(fd);
        return NULL;
    }
    PyObject *r = PyLong_FromLong(fd);
    if (!r)
        close(fd);
    return r;
}

/* openat2(2)'s argument (5.6) and RESOLVE_CACHED (5.12), written out: a build image's
 * headers may predate them; the running kernel answers ENOSYS or EINVAL if it does. */
struct openat2_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};
#ifndef RESOLVE_CACHED
#define RESOLVE_CACHED 0x20
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

/* openat2(RESOLVE_CACHED) with O_NONBLOCK, the way io_uring first tries an openat inline:
 * the open completes only if every path component is in the dentry cache, and a FIFO or a
 * device cannot make it wait. -1 (errno set) when it cannot be done that way. */
static int cached_open(engine_t *e, int dirfd, const char *path, int flags)
{
    struct openat2_how how = {.flags = (uint64_t)(unsigned)flags | O_CLOEXEC | O_NONBLOCK,
                           .resolve = RESOLVE_CACHED};
    e->st.syscalls++;
    int fd = fault_hit(FP_INLINE) ? -1 : (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    if (fd < 0)
        e->st.inline_misses++;
    else
        inline_forget_fd(e, fd);
    return fd;
}

/* Whether an open may be tried inline: the fast path is on, and the flags cannot write (the
 * kernel refuses RESOLVE_CACHED for O_CREAT, O_TRUNC and O_TMPFILE: the queue opens them). */
static int open_may_be_inline(engine_t *e, int flags)
{
    return e->budget_ns && !(flags & (O_CREAT | O_TRUNC)) && (flags & O_TMPFILE) != O_TMPFILE;
}

/* An open done inline with O_NONBLOCK still set: the descriptor, or -1 when the queue must
 * open (not cached, an error, no openat2, flags that may write, or the fast path off). */
int inline_open_fd(engine_t *e, int dirfd, const char *path, int flags)
{
    if (!open_may_be_inline(e, flags))
        return -1;
    int fd = cached_open(e, dirfd, path, flags);
    if (fd >= 0)
        e->st.inline_hits++;
    return fd;
}

PyObject *inline_open(engine_t *e, int dirfd, const char *path, int flags, int retry)
{
    if (!open_may_be_inline(e, flags))  /* before the budget: it is not consulted for these */
        Py_RETURN_NONE;
    int ok = inline_budget_ok(e, retry);
    if (ok <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_False);
    int fd = inline_open_fd(e, dirfd, path, flags);
    if (fd < 0)
        Py_RETURN_NONE;
    return handoff(e, fd, flags & O_NONBLOCK);
}

/* `rdonly_regular`: the caller opened `fd` read-only on a regular file (a lazy file). */
int inline_close(engine_t *e, int fd, int rdonly_regular)
{
    /* Not bounded by the budget (only turned off with the fast path): a close that cannot
     * wait costs a few system calls, less than queueing it — and on Linux AIO, which has no
     * close, queueing it means a worker thread. */
    if (!e->budget_ns)
        return 0;
    /* The last close of an unlinked file frees it: not inline. */
    struct statx sx;
    if (!rdonly_regular)
        e->st.syscalls++;
    int fl = fault_hit(FP_INLINE) ? -1 : rdonly_regular ? O_RDONLY : fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) != O_RDONLY ||
        fd_statx(e, fd, STATX_TYPE | STATX_NLINK, &sx) < 0 || !S_ISREG(sx.stx_mode) ||
        sx.stx_nlink == 0 || !local_mount(e, fd, &sx))
        return 0;
    e->st.syscalls++;
    e->st.inline_hits++;
    inline_forget_fd(e, fd);
    /* Linux frees the descriptor whatever close(2) returns: an error is reported, not retried. */
    if (close(fd) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 1;
}

PyObject *inline_read_file(engine_t *e, int dirfd, const char *path, int retry)
{
    if (!e->budget_ns)
        Py_RETURN_NONE;
    int ok = inline_budget_ok(e, retry);
    if (ok <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_False);
    int fd = cached_open(e, dirfd, path, O_RDONLY | O_NOCTTY);
    if (fd < 0)
        Py_RETURN_NONE;  /* not cached, an error, or no openat2 (< 5.6): the queue decides */
    struct statx sx;
    if (fd_statx(e, fd, STATX_TYPE | STATX_SIZE, &sx) < 0 || !S_ISREG(sx.stx_mode) ||
        sx.stx_size >= INLINE_MAX || !local_mount(e, fd, &sx))
        return handoff(e, fd, 0);
    int64_t size = (int64_t)sx.stx_size;
    /* One byte more than the size: a short read proves the end of the file. */
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size + 1);
    if (!bytes) {
        close(fd);
        return NULL;
    }
    uint64_t got = 0;
    if (!inline_read(e, fd, PyBytes_AS_STRING(bytes), (uint64_t)size + 1, 0, size, &got) ||
        got > (uint64_t)size) {
        Py_DECREF(bytes);  /* not all cached, or the file grew: the caller reads it */
        return handoff(e, fd, 0);
    }
    e->st.syscalls++;
    close(fd);
    if (_PyBytes_Resize(&bytes, (Py_ssize_t)got) < 0)
        return NULL;
    return bytes;
}

/* A lazy file's read to the end (csrc/lazy.c): `size` bytes at `off` when the page cache holds
 * them all (bytes), False when the iteration's budget is spent, None when the read must go to
 * the kernel queue. The descriptor was opened here without O_DIRECT: no fcntl(F_GETFL). */
PyObject *inline_read_known(engine_t *e, int fd, Py_ssize_t size, int64_t off, int64_t eof,
                            int retry)
{
    if (!e->budget_ns || size > INLINE_MAX)
        Py_RETURN_NONE;
    int ok = inline_budget_ok(e, retry);
    if (ok <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_False);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (!bytes)
        return NULL;
    uint64_t got = 0;
    if (!inline_read(e, fd, PyBytes_AS_STRING(bytes), (uint64_t)size, off, eof, &got)) {
        Py_DECREF(bytes);
        Py_RETURN_NONE;
    }
    if ((Py_ssize_t)got != size && _PyBytes_Resize(&bytes, (Py_ssize_t)got) < 0)
        return NULL;
    return bytes;
}
