/* Linux AIO backend: io_setup / io_submit / io_getevents, completions signalled on the engine's
 * eventfd through IOCB_FLAG_RESFD.
 *
 * Linux AIO is asynchronous only for O_DIRECT; a buffered read would run inside io_submit, on
 * the loop's thread. So buffered reads go with RWF_NOWAIT (4.14): a read that would block
 * completes with -EAGAIN, and is re-issued as an O_DIRECT read of the aligned superset through
 * a second, O_DIRECT descriptor of the same file, then copied out. Closing that descriptor
 * would drop the process's POSIX record locks on the file: see maybe_locked.
 *
 * Buffered writes have no such way round: io_submit copies them into the page cache on the
 * loop's thread. A write of WRITE_ASYNC_MIN or more is therefore done by one of the engine's
 * writer threads (up to KAIO_WRITERS, started when first needed, at nice +WRITER_NICE) with
 * pwrite(2) from the caller's pinned buffer; the thread signals the same eventfd, and the
 * reap finishes it like any completion. Smaller writes stay with io_submit: their copy is cheaper than a hand-off.
 *
 * Linux AIO has no open either. An open the engine is given (`openat`: _kernelops sends it
 * those that create or truncate) goes to the same threads, ahead of the writes they have
 * queued, so the loop's next iteration can wait for it (k_wait_timed, OPEN_WAIT_NS) and its
 * task start its write before the tasks made ready beside it, as on io_uring. An open that
 * finds no thread idle and the writers busy (each for as long as its write's copy: `python -m
 * bench --workloads W8-tmpfs`, CPU per file) starts one of up to KAIO_OPENERS opener threads,
 * which take only opens, at the loop thread's weight.
 *
 * fs.aio-max-nr is a system-wide budget, so contexts are small and kept in a process-wide
 * pool when an engine closes (io_destroy also waits for an RCU grace period: slow).
 */
#include "engine.h"
#include "complete.h"
#include "kaio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <linux/aio_abi.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

/* How much nicer than the thread that starts them the writer threads run (the threads
 * backend's WRITER_NICE too: see writer_main). */
#define WRITER_NICE 10

#define POOL_MAX 8

/* Contexts of engines that closed, for the next engine of this process. GIL-protected. */
static struct {
    aio_context_t ctx;
    unsigned nr;
} pool[POOL_MAX];
static int npool;

static int sys_io_setup(unsigned nr, aio_context_t *ctx)
{
    int f = fault_hit(FP_IO_SETUP);
    if (f)
        return f;
    return syscall(__NR_io_setup, nr, ctx) < 0 ? -errno : 0;
}

static void ctx_destroy(aio_context_t ctx)
{
    syscall(__NR_io_destroy, ctx);
    g_count.aio_contexts--;
}

static int ctx_take(unsigned nr, aio_context_t *ctx, char *why, size_t whylen)
{
    for (int i = npool - 1; i >= 0; i--) {
        if (pool[i].nr != nr)
            continue;
        *ctx = pool[i].ctx;
        pool[i] = pool[--npool];
        g_count.aio_pooled--;
        return 0;
    }
    *ctx = 0;
    int rc = sys_io_setup(nr, ctx);
    if (rc == 0) {
        g_count.aio_contexts++;
        return 0;
    }
    if (rc == -EAGAIN)
        snprintf(why, whylen, "io_setup: EAGAIN (fs.aio-max-nr exhausted system-wide)");
    else if (rc == -ENOSYS)
        snprintf(why, whylen, "io_setup: ENOSYS (kernel without AIO)");
    else if (rc == -EPERM)
        snprintf(why, whylen, "io_setup: EPERM (blocked by seccomp)");
    else
        snprintf(why, whylen, "io_setup: %s", strerror(-rc));
    return rc;
}

static void ctx_give_back(aio_context_t ctx, unsigned nr)
{
    if (npool < POOL_MAX) {
        pool[npool].ctx = ctx;
        pool[npool].nr = nr;
        npool++;
        g_count.aio_pooled++;
    } else {
        ctx_destroy(ctx);
    }
}

void kaio_pool_drain(void)
{
    while (npool > 0) {
        ctx_destroy(pool[--npool].ctx);
        g_count.aio_pooled--;
    }
}

static void parked_forget(void);

/* The completion ring the kernel maps into the process at the context's address (fs/aio.c,
 * struct aio_ring; unchanged since 2.6.x, and libaio's io_getevents makes the same check for
 * a zero timeout). Only read, to learn whether io_getevents would find anything: a reap after
 * a submission, or at a flush, mostly finds nothing, and that answer costs no system call.
 * Events are still taken by io_getevents. The kernel writes an event, then moves `tail`,
 * then signals the eventfd: a wake-up always finds it. */
struct aio_ring_header {
    unsigned id, nr, head, tail, magic, compat_features, incompat_features, header_length;
};

#define AIO_RING_MAGIC 0xa10a10a1u

static const void *ring_at(unsigned long ctx)
{
    const struct aio_ring_header *h = (const struct aio_ring_header *)ctx;
    return h && h->magic == AIO_RING_MAGIC && h->incompat_features == 0 &&
                   h->header_length == sizeof *h ? h : NULL;
}

static int ring_empty(engine_t *e)
{
    const struct aio_ring_header *h = e->b.aio.ring;
    if (!h || e->fork_gen != engine_fork_generation)  /* a child: the ring is the parent's */
        return 0;
    return __atomic_load_n(&h->head, __ATOMIC_RELAXED) ==
           __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE);
}

void kaio_after_fork_child(void)
{
    /* The parent's contexts live in the parent's memory map; the child has none of them. */
    g_count.aio_contexts -= npool;
    g_count.aio_pooled -= npool;
    npool = 0;
    parked_forget();
}

int kaio_create(engine_t *e, unsigned entries, char *why, size_t whylen)
{
    kaio_t *a = &e->b.aio;
    int rc = ctx_take(entries, (aio_context_t *)&a->ctx, why, whylen);
    if (rc < 0)
        return rc;
    e->ops = &kaio_ops;
    a->nr = entries;
    a->ring = ring_at(a->ctx);
    a->pending = PyMem_Calloc(entries, sizeof(struct iocb *));
    a->iocbs = PyMem_Calloc(entries, sizeof(struct iocb));
    a->events = PyMem_Calloc(entries, sizeof(struct io_event));
    a->free_iocbs = PyMem_Calloc(entries, sizeof(uint32_t));
    for (unsigned i = 0; i < DCACHE_SIZE; i++)
        a->dcache[i].fd = a->dcache[i].dfd = -1;
    if (!a->pending || !a->iocbs || !a->events || !a->free_iocbs) {
        kaio_ops.destroy(e);
        e->ops = NULL;
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    for (unsigned i = 0; i < entries; i++)
        a->free_iocbs[a->nfree_iocbs++] = entries - 1 - i;
    e->capacity = entries;
    return 0;
}

/* ---------------------------------------------------------------- O_DIRECT descriptors */

/* Closing any descriptor of a file drops every POSIX record lock (fcntl F_SETLK, lockf) this
 * process holds on it; OFD and flock() locks belong to their open file description and stay.
 * Whether the file behind `fd` may hold one of ours: whether any lock is there at all, as far
 * as this description sees — an open file description's lock (F_OFD_GETLK, 3.15) conflicts
 * with every lock on the file but that description's own OFD locks. One system call, no
 * answer to get wrong: the kernel names one conflicting lock only (the first of its list, not
 * the lowest range, so another owner's may hide ours), and /proc/locks, which lists them all,
 * prints pids in the namespace of the /proc mount, is not read in one snapshot (lines are
 * missed while other processes take and drop locks), and costs the loop time that grows with
 * the square of the system's locks. So a file anyone holds a lock on counts as locked. */
static int maybe_locked(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    return !(fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK);
}

/* Descriptors kept open because their file had a lock on it when they were let go. Each is
 * closed once the file has none (looked at whenever another is closed, and when an engine
 * closes), or taken up again by the next read of its file that takes the detour: no more per
 * file than its reads on the detour at once, whatever the lock's owner. Process-wide: a lock
 * outlives the engine whose read took the detour. */
typedef struct parked_fd {
    int fd;
    dev_t dev;
    ino_t ino;
} parked_fd;

static parked_fd *parked;
static unsigned nparked, parked_cap;

static void parked_sweep(void)
{
    unsigned kept = 0;
    for (unsigned i = 0; i < nparked; i++) {
        if (maybe_locked(parked[i].fd)) {
            parked[kept++] = parked[i];
        } else {
            close(parked[i].fd);
            g_count.direct_parked--;
        }
    }
    nparked = kept;
}

/* In a forked child, at once: the parent's parked descriptors are closed (the child holds no
 * POSIX lock to lose). Kept, they named numbers the child may close and reuse for another
 * file, which the file's next detour would then have read. close() is async-signal-safe. */
static void parked_forget(void)
{
    for (unsigned i = 0; i < nparked; i++)
        close(parked[i].fd);
    g_count.direct_parked -= nparked;
    nparked = 0;
}

/* A parked descriptor of this file, taken out of the list; -1 if there is none. */
static int parked_take(dev_t dev, ino_t ino)
{
    for (unsigned i = 0; i < nparked; i++) {
        if (parked[i].dev == dev && parked[i].ino == ino) {
            int fd = parked[i].fd;
            parked[i] = parked[--nparked];
            g_count.direct_parked--;
            g_count.direct_fds++;
            return fd;
        }
    }
    return -1;
}

/* Close an O_DIRECT descriptor of engine `e`'s, or park it while its file has a lock. A forked
 * child's inherited engine closes its descriptors plainly: POSIX locks are not inherited, so
 * the child has none to lose, and a number parked in the child would outlive the engine that
 * knew it (the child may close it and open another file under it). */
static void direct_close(const engine_t *e, int dfd)
{
    g_count.direct_fds--;
    if (e->fork_gen != engine_fork_generation) {
        close(dfd);
        return;
    }
    if (nparked)
        parked_sweep();
    struct stat st;
    if (!maybe_locked(dfd) || fstat(dfd, &st) < 0) {
        close(dfd);
        return;
    }
    g_count.direct_parked++;
    if (nparked == parked_cap) {
        unsigned cap = parked_cap ? 2 * parked_cap : 8;
        parked_fd *grown = realloc(parked, cap * sizeof *parked);
        if (!grown)
            return;  /* left open for the process's life: a lock is worth more than a number */
        parked = grown;
        parked_cap = cap;
    }
    parked[nparked++] = (parked_fd){dfd, st.st_dev, st.st_ino};
}

void kaio_direct_release(engine_t *e, op_t *op)
{
    kaio_t *a = &e->b.aio;
    if (op->direct_slot >= 0) {
        dcache_ent *d = &a->dcache[op->direct_slot];
        if (--d->refs == 0) {  /* the file's last read on the detour has ended */
            direct_close(e, d->dfd);
            d->fd = d->dfd = -1;
        }
    } else {
        direct_close(e, op->direct_fd);
    }
    op->direct_fd = -1;
    op->direct_slot = -1;
}

/* Give the op an O_DIRECT descriptor of the file behind its `fd` (op->direct_fd: a cache
 * entry's, or its own when every entry is in use): 0; -ESPIPE for a pipe or socket (pread(2)
 * refuses those); -1 when there is none to have: not a regular file, the filesystem or
 * permissions refuse it, or the file has a lock on it (closing the descriptor would drop
 * this process's POSIX locks: see maybe_locked). Keyed by (fd, dev, inode): a reused number
 * never reads another file. */
static int direct_open(engine_t *e, op_t *op)
{
    kaio_t *a = &e->b.aio;
    struct stat st;
    if (fstat(op->fd, &st) < 0)
        return -1;
    if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
        return -ESPIPE;
    if (!S_ISREG(st.st_mode))
        return -1;
    int slot = -1;
    for (int i = 0; i < DCACHE_SIZE; i++) {
        dcache_ent *d = &a->dcache[i];
        if (d->dfd >= 0 && d->fd == op->fd && d->dev == st.st_dev && d->ino == st.st_ino) {
            slot = i;
            goto found;
        }
        if (slot < 0 && d->dfd < 0)
            slot = i;  /* free: an entry is closed when its last read lets go */
    }
    if (maybe_locked(op->fd))
        return -1;
    int dfd = parked_take(st.st_dev, st.st_ino);
    if (dfd < 0) {
        char path[40];
        snprintf(path, sizeof path, "/proc/self/fd/%d", op->fd);
        dfd = fault_hit(FP_DIRECT_OPEN) ? -1 : open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (dfd < 0)
            return -1;
        g_count.direct_fds++;
    }
    if (slot < 0) {  /* every entry in use by a read: this one's own */
        op->direct_fd = dfd;
        op->direct_slot = -1;
        return 0;
    }
    dcache_ent *d = &a->dcache[slot];
    d->fd = op->fd;
    d->dfd = dfd;
    d->dev = st.st_dev;
    d->ino = st.st_ino;
found:
    a->dcache[slot].refs++;
    op->direct_fd = a->dcache[slot].dfd;
    op->direct_slot = (int8_t)slot;
    return 0;
}

/* Turn the op's current piece into an O_DIRECT read of the aligned superset, at most
 * DETOUR_MAX of it, ending on a block boundary so that the next piece starts on one. 0,
 * -ESPIPE (a stream: no positional reads), or -1 (no O_DIRECT to be had). The descriptor and
 * the buffer stay with the op until it ends (op_finish releases them): a further piece uses
 * them again, never the caller's descriptor number, which the caller may have closed and
 * reused since the read began. */
static int direct_setup(engine_t *e, op_t *op)
{
    uint64_t pos = (uint64_t)op->off + op->done;
    uint64_t cur = op->cur;
    if (cur > DETOUR_MAX)
        cur = ((pos + DETOUR_MAX) & ~(uint64_t)(DIO_ALIGN - 1)) - pos;
    uint64_t start = pos & ~(uint64_t)(DIO_ALIGN - 1);
    uint64_t end = (pos + cur + DIO_ALIGN - 1) & ~(uint64_t)(DIO_ALIGN - 1);
    if (op->direct_fd < 0) {  /* first: a pipe or a file without O_DIRECT needs no buffer */
        int rc = direct_open(e, op);
        if (rc < 0)
            return rc;
    }
    if (end - start > op->bounce_cap) {
        void *bounce = NULL;
        if (posix_memalign(&bounce, DIO_ALIGN, end - start) != 0)
            return -1;
        free(op->bounce);
        op->bounce = bounce;
        op->bounce_cap = (uint32_t)(end - start);
    }
    op->cur = (uint32_t)cur;
    op->direct = 1;
    op->bounce_off = start;
    op->bounce_len = (uint32_t)(end - start);
    return 0;
}

/* Bytes of the op's piece that the finished O_DIRECT read delivered, copied out (not into
 * the buffer of a read its caller has cancelled). */
static int64_t direct_finish(op_t *op, int64_t res)
{
    if (res >= 0) {
        uint64_t skip = (uint64_t)op->off + op->done - op->bounce_off;
        int64_t n = res - (int64_t)skip;
        if (n < 0)
            n = 0;
        if (n > op->cur)
            n = op->cur;
        if (!op->abandoned)
            memcpy(op->buf + op->done, (char *)op->bounce + skip, (size_t)n);
        res = n;
    }
    op->direct = 0;
    return res;
}

/* ---------------------------------------------------------------- backend operations */

/* ---------------------------------------------------------------- writer threads */

/* One large buffered write, or one open: what the thread needs, copied from the operation
 * (whose slot array may move while the thread runs), then its result. */
typedef struct kaio_job {
    struct kaio_job *next;
    uint32_t idx;
    int open;                 /* an openat(2): fd is the directory, buf the path */
    int fd;
    const char *buf;          /* the caller's buffer (or path), held by the operation until reaped */
    size_t len;
    int64_t off;
    int flags;                /* the open's flags and mode */
    unsigned mode;
    int64_t res;              /* bytes written or the new descriptor, or -errno */
} kaio_job;

/* An open as io_uring makes it: first with O_NONBLOCK, cleared again unless it was asked
 * for, so a FIFO without a peer does not hold the thread (_kernelops waits for one in a
 * worker, as open(2) would, on ENXIO); on EAGAIN (a lease to break) again without it. */
static int64_t job_open(const kaio_job *j)
{
    int flags = j->flags | O_NONBLOCK, fd;
    for (;;) {
        fd = openat(j->fd, j->buf, flags, (mode_t)j->mode);
        if (fd >= 0)
            break;
        if (errno == EAGAIN && flags != j->flags)
            flags = j->flags;
        else if (errno != EINTR)
            return -(int64_t)errno;
    }
    if (flags != j->flags) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    return fd;
}

/* A job is done: on the done list for the reap, which the eventfd wakes. Called with `wmu`
 * held: the engine cannot reap this job, close and destroy (which takes the lock to stop the
 * writers), and close the eventfd before the signal is made. */
static void job_done(engine_t *e, kaio_job *j)
{
    kaio_t *a = &e->b.aio;
    j->next = a->wdone;
    a->wdone = j;
    pthread_cond_broadcast(&a->wdone_cv);
    uint64_t one = 1;
    ssize_t w = write(e->efd, &one, sizeof one);
    (void)w;  /* EAGAIN only if the counter is near overflow: the loop is woken already */
}

/* The next job a thread may take off the queue: the head, which is an open while any is
 * queued (opens go ahead of the writes); an opener thread takes nothing else. Called with
 * `wmu` held. */
static kaio_job *job_next(kaio_t *a, int opener)
{
    kaio_job *j = a->wq_head;
    if (!j || (opener && !j->open))
        return NULL;
    a->wq_head = j->next;
    if (!a->wq_head)
        a->wq_tail = NULL;
    if (j == a->wq_opens)
        a->wq_opens = NULL;
    if (j->open)
        a->wq_nopens--;
    return j;
}

static void thread_main(engine_t *e, int opener)
{
    kaio_t *a = &e->b.aio;
    if (opener) {
        /* At the loop thread's own weight: the loop's next iteration waits for an open
         * (OPEN_WAIT_NS), and the writer threads beside it are busy copying. */
        pthread_setname_np(pthread_self(), "aionative-open");
    } else {
        /* A lower weight than the loop's thread (Linux nice values are per thread): ten
         * large writes keep every CPU busy copying, and the loop's thread, waking, would wait
         * for a CPU behind them. The loop's lag while they run is W8's lag column
         * (`python -m bench --workloads W8-tmpfs`). */
        pthread_setname_np(pthread_self(), "aionative-write");  /* (15 characters, the most) */
        errno = 0;
        int nice = getpriority(PRIO_PROCESS, 0);
        if (nice != -1 || errno == 0)
            (void)setpriority(PRIO_PROCESS, 0, nice + WRITER_NICE);
    }
    pthread_mutex_lock(&a->wmu);
    for (;;) {
        kaio_job *j;
        while (!(j = job_next(a, opener)) && !a->wstop) {
            a->widle++;
            a->widle_openers += (unsigned)opener;
            pthread_cond_wait(&a->wq_cv, &a->wmu);
            a->widle--;
            a->widle_openers -= (unsigned)opener;
        }
        if (!j)
            break;  /* stopping; the writer threads write what is left */
        pthread_mutex_unlock(&a->wmu);
        if (j->open) {
            j->res = job_open(j);
        } else {
            ssize_t n;
            do
                n = pwrite(j->fd, j->buf, j->len, (off_t)j->off);
            while (n < 0 && errno == EINTR);
            j->res = n < 0 ? -(int64_t)errno : (int64_t)n;
        }
        pthread_mutex_lock(&a->wmu);
        job_done(e, j);
    }
    pthread_mutex_unlock(&a->wmu);
}

static void *writer_main(void *arg)
{
    thread_main(arg, 0);
    return NULL;
}

static void *opener_main(void *arg)
{
    thread_main(arg, 1);
    return NULL;
}

/* Start one more thread, a writer or an opener, with every signal blocked (handlers run on
 * the loop's thread). Called with `wmu` held. */
static int writer_start(engine_t *e, int opener)
{
    kaio_t *a = &e->b.aio;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = fault_hit(FP_WRITER_START);
    rc = rc ? -rc : pthread_create(&a->writers[a->nwriters], NULL,
                                   opener ? opener_main : writer_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        a->nwriters++;
        a->nopeners += (unsigned)opener;
    }
    return rc;
}

static int writer_init(kaio_t *a)
{
    if (a->winit)
        return 0;
    pthread_condattr_t attr;
    if (pthread_mutex_init(&a->wmu, NULL) != 0)
        return -1;
    pthread_cond_init(&a->wq_cv, NULL);
    /* waited for with a deadline on the monotonic clock (k_wait_timed) */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&a->wdone_cv, &attr);
    pthread_condattr_destroy(&attr);
    a->winit = 1;
    return 0;
}

/* Queue a job for the threads, starting one more if none is idle: a writer, or for an open
 * that would otherwise wait for writes, an opener; opens go ahead of the writes queued
 * (behind the opens queued before them). 0 when no thread can be had. */
static int writer_queue(engine_t *e, kaio_job *j)
{
    kaio_t *a = &e->b.aio;
    pthread_mutex_lock(&a->wmu);
    unsigned writers = a->nwriters - a->nopeners;
    if (!j->open) {
        if (a->widle - a->widle_openers <= (a->wq_head != NULL) && writers < KAIO_WRITERS)
            writer_start(e, 0);
    } else if (a->widle <= a->wq_nopens) {  /* every idle thread has an open to take */
        if (writers < KAIO_WRITERS)
            writer_start(e, 0);
        else if (a->nopeners < KAIO_OPENERS)
            writer_start(e, 1);  /* the writers are all busy */
    }
    if (!a->nwriters) {
        pthread_mutex_unlock(&a->wmu);
        return 0;
    }
    kaio_job **at;
    if (j->open)
        at = a->wq_opens ? &a->wq_opens->next : &a->wq_head;
    else
        at = a->wq_tail ? &a->wq_tail->next : &a->wq_head;
    j->next = *at;
    *at = j;
    if (!j->next)
        a->wq_tail = j;
    if (j->open) {
        a->wq_opens = j;
        a->wq_nopens++;
    }
    if (!j->open && a->widle_openers)
        pthread_cond_broadcast(&a->wq_cv);  /* the one a signal wakes could be an opener */
    else
        pthread_cond_signal(&a->wq_cv);
    pthread_mutex_unlock(&a->wmu);
    a->wlive++;
    return 1;
}

/* Whether a write goes to a writer thread: large, and not O_DIRECT (which Linux AIO does
 * asynchronously). 1: handed over; 0: io_submit it (also when no thread can be had). */
static int writer_take(engine_t *e, op_t *op, uint32_t idx)
{
    kaio_t *a = &e->b.aio;
    if (op->cur < WRITE_ASYNC_MIN)
        return 0;
    int fl = fcntl(op->fd, F_GETFL);
    if (fl < 0 || (fl & O_DIRECT))
        return 0;  /* (a bad descriptor: io_submit names the error) */
    if (writer_init(a) < 0)
        return 0;
    kaio_job *j = malloc(sizeof *j);
    if (!j)
        return 0;
    *j = (kaio_job){.idx = idx, .fd = op->fd, .buf = op->buf + op->done, .len = op->cur,
                    .off = op->off + (int64_t)op->done};
    if (!writer_queue(e, j)) {
        free(j);
        return 0;
    }
    e->st.async_writes++;
    return 1;
}

/* An open, to a writer thread; where no thread (or no memory for the job) can be had, made
 * here and finished by the next reap as a thread's would be. */
static int open_take(engine_t *e, op_t *op, uint32_t idx)
{
    kaio_t *a = &e->b.aio;
    kaio_job *j = writer_init(a) < 0 ? NULL : malloc(sizeof *j);
    if (!j)
        return -EBUSY;  /* (the flush tries again) */
    *j = (kaio_job){.idx = idx, .open = 1, .fd = op->fd, .buf = op->buf, .flags = op->oflags,
                    .mode = op->mode};
    e->st.submitted++;
    if (writer_queue(e, j))
        return 0;
    j->res = job_open(j);
    a->wlive++;
    pthread_mutex_lock(&a->wmu);
    job_done(e, j);
    pthread_mutex_unlock(&a->wmu);
    return 0;
}

/* Finish the writes the threads have done; returns how many. */
static int writer_reap(engine_t *e)
{
    kaio_t *a = &e->b.aio;
    if (!a->wlive)
        return 0;
    pthread_mutex_lock(&a->wmu);
    kaio_job *j = a->wdone, *fifo = NULL;
    a->wdone = NULL;
    pthread_mutex_unlock(&a->wmu);
    int n = 0;
    while (j) {  /* oldest first */
        kaio_job *next = j->next;
        j->next = fifo;
        fifo = j;
        j = next;
    }
    while (fifo) {
        kaio_job *next = fifo->next;
        uint32_t idx = fifo->idx;
        int64_t res = fifo->res;
        free(fifo);
        fifo = next;
        a->wlive--;
        n++;
        engine_complete(e, idx, res);  /* may run Python code, which may queue more */
    }
    return n;
}

/* Stop and join the writers (each first writes what is queued). Not in a forked child: the
 * threads are the parent's, and the lock may have been held at the fork. */
static void writer_stop(engine_t *e)
{
    kaio_t *a = &e->b.aio;
    if (!a->winit)
        return;
    if (e->fork_gen == engine_fork_generation) {
        pthread_mutex_lock(&a->wmu);
        a->wstop = 1;
        pthread_cond_broadcast(&a->wq_cv);
        pthread_mutex_unlock(&a->wmu);
        Py_BEGIN_ALLOW_THREADS
        for (unsigned i = 0; i < a->nwriters; i++)
            pthread_join(a->writers[i], NULL);
        Py_END_ALLOW_THREADS
        for (kaio_job *j = a->wdone, *next; j; j = next) {
            next = j->next;
            if (j->open && j->res >= 0)
                close((int)j->res);  /* nobody is left to be given it */
            free(j);
        }
        pthread_mutex_destroy(&a->wmu);
        pthread_cond_destroy(&a->wq_cv);
        pthread_cond_destroy(&a->wdone_cv);
    }
    a->wdone = a->wq_head = a->wq_tail = a->wq_opens = NULL;
    a->nwriters = a->nopeners = a->widle = a->widle_openers = a->wlive = a->wq_nopens = 0;
    a->winit = a->wstop = 0;
}

static int k_prep(engine_t *e, op_t *op, uint32_t idx)
{
    kaio_t *a = &e->b.aio;
    if (op->kind == OP_WRITE && writer_take(e, op, idx))
        return 0;
    if (op->kind == OP_OPENAT)
        return open_take(e, op, idx);
    if (!a->nfree_iocbs)
        return -EBUSY;
    uint32_t k = a->free_iocbs[--a->nfree_iocbs];
    struct iocb *cb = &((struct iocb *)a->iocbs)[k];
    memset(cb, 0, sizeof *cb);
    cb->aio_data = idx;
    cb->aio_fildes = (uint32_t)op->fd;
    cb->aio_flags = IOCB_FLAG_RESFD;
    cb->aio_resfd = (uint32_t)e->efd;
    op->kslot = k;
    op->nowait = 0;
    switch (op->kind) {
    case OP_READ:
    case OP_READINTO:
        cb->aio_lio_opcode = IOCB_CMD_PREAD;
        if (op->detour && !op->direct) {  /* the next piece of a read that took the detour */
            if (direct_setup(e, op) == 0)
                e->st.direct_reissues++;
            else
                op->detour = 0;  /* no O_DIRECT now (out of memory): probe with RWF_NOWAIT */
        }
        if (op->direct) {
            cb->aio_fildes = (uint32_t)op->direct_fd;
            cb->aio_buf = (uint64_t)(uintptr_t)op->bounce;
            cb->aio_nbytes = op->bounce_len;
            cb->aio_offset = (int64_t)op->bounce_off;
            break;
        }
        cb->aio_buf = (uint64_t)(uintptr_t)(op->buf + op->done);
        cb->aio_nbytes = op->cur;
        cb->aio_offset = op->off + (int64_t)op->done;
        if (!op->no_nowait) {
            cb->aio_rw_flags = RWF_NOWAIT;
            op->nowait = 1;
        }
        break;
    case OP_WRITE:
        /* ext4 and tmpfs refuse RWF_NOWAIT on buffered writes: a small one is copied into
         * the page cache inside io_submit (a large one went to a writer thread above). */
        cb->aio_lio_opcode = IOCB_CMD_PWRITE;
        cb->aio_buf = (uint64_t)(uintptr_t)(op->buf + op->done);
        cb->aio_nbytes = op->cur;
        cb->aio_offset = op->off + (int64_t)op->done;
        break;
    case OP_FSYNC:
        cb->aio_lio_opcode = IOCB_CMD_FSYNC;
        break;
    case OP_FDATASYNC:
        cb->aio_lio_opcode = IOCB_CMD_FDSYNC;
        break;
    }
    a->pending[a->npending++] = cb;
    e->st.submitted++;
    return 0;
}

static void iocb_release(kaio_t *a, op_t *op)
{
    a->free_iocbs[a->nfree_iocbs++] = op->kslot;
}

/* Re-prepare a piece the kernel turned back, within the same in-kernel budget. */
static void k_reprep(engine_t *e, op_t *op, uint32_t idx)
{
    iocb_release(&e->b.aio, op);
    k_prep(e, op, idx);  /* cannot fail: an iocb was just released */
}

/* A piece that never reached the kernel or came back from it: give the engine its result,
 * or take a detour (O_DIRECT, or a plain blocking read) and keep it with the kernel. */
static void k_result(engine_t *e, uint32_t idx, int64_t res)
{
    op_t *op = engine_slot(e, idx);
    if (op->direct) {
        /* The filesystem refused this O_DIRECT read: read plainly, if anyone is waiting (the
         * plain read blocks in io_submit, and names the caller's descriptor number). */
        if (res == -EINVAL && !op->abandoned && !e->drop_results) {
            direct_finish(op, res);
            e->st.direct_refused++;
            op->detour = 0;
            op->no_nowait = 1;
            k_reprep(e, op, idx);
            return;
        }
        res = direct_finish(op, res);
    } else if (op->nowait && res == -EAGAIN && (op->abandoned || e->drop_results)) {
        res = -ECANCELED;  /* nobody will read the result: no detour */
    } else if (op->nowait && res == -EAGAIN) {
        e->st.nowait_eagain++;
        int rc = direct_setup(e, op);
        if (rc == -ESPIPE) {
            res = rc;  /* an empty pipe: pread(2) says ESPIPE; never block in io_submit */
        } else {
            if (rc == 0) {
                e->st.direct_reissues++;
                op->detour = 1;
            } else {
                e->st.direct_refused++;
                op->no_nowait = 1;
            }
            k_reprep(e, op, idx);
            return;
        }
    } else if (op->nowait && res == -EOPNOTSUPP) {
        e->st.nowait_unsupported++;
        op->no_nowait = 1;
        k_reprep(e, op, idx);
        return;
    }
    if (res == -EINVAL && op->kind != OP_FSYNC && op->kind != OP_FDATASYNC) {
        /* AIO says EINVAL for a file without read_iter/write_iter; pread(2) says EISDIR for
         * a directory. Error path only, so the fstat costs nothing in the common case. */
        struct stat st;
        if (fstat(op->fd, &st) == 0 && S_ISDIR(st.st_mode))
            res = -EISDIR;
    }
    iocb_release(&e->b.aio, op);
    engine_complete(e, idx, res);
}

static int k_submit(engine_t *e)
{
    kaio_t *a = &e->b.aio;
    while (a->npending) {
        long n;
        int f = fault_hit(FP_IO_SUBMIT);
        int partial = f && !fault_errno[FP_IO_SUBMIT];  /* armed with errno 0: the first iocb */
        e->st.syscalls++;
        if (f && !partial) {
            n = -1;
            errno = -f;
        } else {
            long nr = partial ? 1L : (long)a->npending;
            Py_BEGIN_ALLOW_THREADS
            n = syscall(__NR_io_submit, (aio_context_t)a->ctx, nr, a->pending);
            Py_END_ALLOW_THREADS
        }
        if (n > 0) {
            e->st.batches++;
            a->npending -= (unsigned)n;
            memmove(a->pending, a->pending + n, a->npending * sizeof(void *));
            continue;
        }
        int err = n == 0 ? EAGAIN : errno;
        if (err == EINTR)
            continue;
        if (err == EAGAIN)
            return -EAGAIN;
        /* io_submit names the first iocb's own error: that piece ends here, the rest go on. */
        struct iocb *cb = a->pending[0];
        a->npending--;
        memmove(a->pending, a->pending + 1, a->npending * sizeof(void *));
        k_result(e, (uint32_t)cb->aio_data, -err);
    }
    return 0;
}

/* A waiting reap while writer threads hold writes: wait for one of theirs, or (while AIO
 * holds pieces too) look at both every millisecond. Returns 1 when a writer's job was
 * finished, 0 when io_getevents should wait as usual (no writer work left). */
static int writer_wait(engine_t *e)
{
    kaio_t *a = &e->b.aio;
    while (a->wlive) {
        if (writer_reap(e))
            return 1;
        unsigned in_aio = a->nr - a->nfree_iocbs - a->npending;
        if (in_aio == 0) {
            Py_BEGIN_ALLOW_THREADS
            pthread_mutex_lock(&a->wmu);
            while (!a->wdone)
                pthread_cond_wait(&a->wdone_cv, &a->wmu);
            pthread_mutex_unlock(&a->wmu);
            Py_END_ALLOW_THREADS
            continue;
        }
        struct timespec ms = {0, 1000000};
        long n;
        e->st.syscalls++;
        Py_BEGIN_ALLOW_THREADS
        n = syscall(__NR_io_getevents, (aio_context_t)a->ctx, 1L, (long)a->nr, a->events, &ms);
        Py_END_ALLOW_THREADS
        if (n > 0) {
            struct io_event *ev = a->events;
            struct { uint32_t idx; int64_t res; } got[n];
            for (long i = 0; i < n; i++) {
                got[i].idx = (uint32_t)ev[i].data;
                got[i].res = (int64_t)ev[i].res;
            }
            for (long i = 0; i < n; i++)
                k_result(e, got[i].idx, got[i].res);
            return 1;
        }
    }
    return 0;
}

/* Wait up to `ns` for a writer thread's job (engine_wait_opens: the opens sent inside their
 * calls), and finish what is done: how many, or -ETIME. AIO's own completions wait for the
 * reap as usual. */
static int k_wait_timed(engine_t *e, int64_t ns)
{
    kaio_t *a = &e->b.aio;
    if (!a->wlive || !a->winit)
        return -ETIME;  /* nothing the threads hold: nothing to wait for */
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)(ns / 1000000000);
    deadline.tv_nsec += (long)(ns % 1000000000);
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&a->wmu);
    while (!a->wdone && rc == 0)
        rc = pthread_cond_timedwait(&a->wdone_cv, &a->wmu, &deadline);
    pthread_mutex_unlock(&a->wmu);
    Py_END_ALLOW_THREADS
    int n = writer_reap(e);
    return n ? n : (rc == ETIMEDOUT ? -ETIME : 0);
}

static int k_reap(engine_t *e, int flags)
{
    int wait = flags & REAP_WAIT;
    kaio_t *a = &e->b.aio;
    struct io_event *ev = a->events;
    if (writer_reap(e) || (wait && writer_wait(e)))
        wait = 0;
    for (;;) {
        struct timespec zero = {0, 0};
        long n;
        if (!wait && ring_empty(e))
            return 0;
        e->st.syscalls++;
        if (wait) {
            Py_BEGIN_ALLOW_THREADS
            n = syscall(__NR_io_getevents, (aio_context_t)a->ctx, 1L, (long)a->nr, ev, NULL);
            Py_END_ALLOW_THREADS
        } else {
            n = syscall(__NR_io_getevents, (aio_context_t)a->ctx, 0L, (long)a->nr, ev, &zero);
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        /* Copy out first: handling may run Python code (finalizers) that reaps again. */
        struct { uint32_t idx; int64_t res; } got[n > 0 ? n : 1];
        for (long i = 0; i < n; i++) {
            got[i].idx = (uint32_t)ev[i].data;
            got[i].res = (int64_t)ev[i].res;
        }
        for (long i = 0; i < n; i++)
            k_result(e, got[i].idx, got[i].res);
        if (n < (long)a->nr)
            return 0;
        wait = 0;
    }
}

static unsigned k_unaccepted(engine_t *e)
{
    return e->b.aio.npending;
}

static void k_unprep(engine_t *e, int err)
{
    kaio_t *a = &e->b.aio;
    while (a->npending) {
        struct iocb *cb = a->pending[--a->npending];
        op_t *op = engine_slot(e, (uint32_t)cb->aio_data);
        iocb_release(a, op);
        engine_fail_unaccepted(e, (uint32_t)cb->aio_data, err);
    }
}

static int k_withdraw(engine_t *e, uint32_t idx)
{
    kaio_t *a = &e->b.aio;
    for (unsigned i = 0; i < a->npending; i++) {
        if ((uint32_t)((struct iocb *)a->pending[i])->aio_data != idx)
            continue;
        a->npending--;
        memmove(a->pending + i, a->pending + i + 1, (a->npending - i) * sizeof(void *));
        iocb_release(a, engine_slot(e, idx));
        return 1;
    }
    return 0;
}

static void k_cancel(engine_t *e, uint32_t idx)
{
    /* io_cancel is not supported for file I/O: the piece completes on its own, and its
     * result is dropped or delivered as the engine decides. */
}

static void k_destroy(engine_t *e)
{
    kaio_t *a = &e->b.aio;
    writer_stop(e);
    if (nparked)  /* every cache entry is closed by now: its reads have all been released */
        parked_sweep();
    if (a->ctx) {
        if (e->fork_gen == engine_fork_generation)
            ctx_give_back((aio_context_t)a->ctx, a->nr);
        else
            g_count.aio_contexts--;  /* the parent's: it lives on in the parent only */
        a->ctx = 0;
        a->ring = NULL;
    }
    PyMem_Free(a->pending);
    PyMem_Free(a->iocbs);
    PyMem_Free(a->events);
    PyMem_Free(a->free_iocbs);
    a->pending = a->iocbs = a->events = NULL;
    a->free_iocbs = NULL;
}

static int k_info(engine_t *e, PyObject *d)
{
    kaio_t *a = &e->b.aio;
    PyObject *v = Py_BuildValue("{sIsOsisOsIsIsI}", "aio_nr", a->nr, "nowait_reads",
                                Py_True, "pooled_contexts", npool, "ring_peek",
                                a->ring ? Py_True : Py_False, "large_writes_from",
                                WRITE_ASYNC_MIN, "writer_threads", a->nwriters - a->nopeners,
                                "open_threads", a->nopeners);
    if (!v)
        return -1;
    int rc = PyDict_Update(d, v);
    Py_DECREF(v);
    return rc;
}

const backend_ops kaio_ops = {
    .name = "linux_aio",
    .prep = k_prep,
    .submit = k_submit,
    .reap = k_reap,
    .unaccepted = k_unaccepted,
    .unprep = k_unprep,
    .withdraw = k_withdraw,
    .cancel = k_cancel,
    .destroy = k_destroy,
    .info = k_info,
    .wait_timed = k_wait_timed,
};
