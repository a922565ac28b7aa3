/* aionative engine: what every unit of the engine shares. The operation slot, the counters, the
 * backend ops table and the two backends' state inside the engine struct; the constants the
 * units agree on; the fault-injection points and the process-wide resource counters; and the
 * few things engine.c (the Engine type) gives the others.
 *
 * One engine serves one asyncio event loop, on that loop's thread. Operations live in a slot
 * table that never moves (blocks of OP_BLOCK slots), so a slot index is a stable user_data for
 * the kernel. A slot owns everything the kernel may touch until its completion is reaped.
 *
 * The units, each with a header of what it gives the others: engine.c (the type, its life
 * cycle, fork), submit.c (slots, the queue, batching, starting and cancelling operations),
 * complete.c (completions, results, futures resolved), loop.c (the flush, the eventfd's
 * reader, parked callers), methods.c (the Python methods that start operations), stats.c
 * (counters and details), inline.c (the inline fast path and its budget), uring.c and kaio.c
 * (the kernel backends), lazy.c, call.c, lines.c, window.c and module.c.
 */
#ifndef AIONATIVE_ENGINE_H
#define AIONATIVE_ENGINE_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* PyWeakref_GetRef (3.13; PyWeakref_GetObject's borrowed result is deprecated there): 1 and a
 * strong reference in *obj while the referent lives, 0 and NULL once it is gone. */
#if PY_VERSION_HEX < 0x030D0000
static inline int aionative_weakref_getref(PyObject *ref, PyObject **obj)
{
    PyObject *o = PyWeakref_GetObject(ref);
    *obj = o && o != Py_None ? Py_NewRef(o) : NULL;
    return o ? *obj != NULL : -1;
}
#define PyWeakref_GetRef aionative_weakref_getref
#endif

/* The most one read/write system call transfers (MAX_RW_COUNT); larger operations are split. */
#define KERNEL_RW_MAX 0x7ffff000u

#define OP_BLOCK 256u
#define OP_NONE UINT32_MAX

/* O_DIRECT alignment used by the Linux AIO re-issue path: a multiple of every logical block
 * size up to 4 KiB, for memory address, length and offset alike. */
#define DIO_ALIGN 4096u

/* A buffered write of at least this many bytes is never copied into the page cache inside a
 * system call on the loop's thread, and starts at once rather than at the iteration's flush:
 * io_uring gets it with IOSQE_ASYNC (straight to an io-wq worker, which the kernel hashes by
 * inode, so writes to different files run in parallel), Linux AIO hands it to one of the
 * engine's writer threads (kaio.c). Below it the hand-off costs more than the copy (64 KiB
 * lands in ~10 us); `python -m bench --workloads W8 W5F` measures both sides. */
#define WRITE_ASYNC_MIN (256u << 10)
/* An open that creates or truncates a file goes to an io-wq worker in any case (io_uring does
 * not try O_CREAT or O_TRUNC without blocking): it is sent inside its call, and the engine's
 * first reaping callback of the loop's next iteration — ahead of the tasks the last iteration
 * made ready — waits up to this long for such opens (engine_wait_opens, backend_ops.wait_timed),
 * so that their tasks go on, and start their writes, before a CPU-bound task made ready beside
 * them holds the loop (Linux AIO: the same, for the opens its writer threads make). An open
 * takes tens of microseconds with an idle worker; the bound is what a slow filesystem, or
 * io-wq starting its first workers, may cost the loop once.
 * `python -m bench --workloads W8-tmpfs` measures writes gathered with CPU work. */
#define OPEN_WAIT_NS 2000000u
/* Linux AIO: the most writer threads an engine starts (one a large write or an open in
 * flight), and opener threads (one an open that would otherwise wait for the writers). */
#define KAIO_WRITERS 4
#define KAIO_OPENERS 2

enum op_kind {
    OP_READ,      /* result: a new bytes object the kernel reads into */
    OP_READINTO,  /* result: int; the caller's writable buffer */
    OP_WRITE,     /* result: int; the caller's buffer; short writes continue */
    OP_FSYNC,
    OP_FDATASYNC,
    /* path and descriptor operations (io_uring; openat on Linux AIO too: see engine_supports) */
    OP_OPENAT,    /* result: the new descriptor (in `done`) */
    OP_CLOSE,
    OP_STATX,     /* result: a tuple of the struct statx fields (`bounce` holds the struct) */
    OP_UNLINKAT,
    OP_RENAMEAT,
    OP_MKDIRAT,
    OP_SYMLINKAT,
    OP_LINKAT,
    OP_FALLOCATE,
    OP_FTRUNCATE,
    OP_KIND_COUNT
};

enum op_state {
    OPS_FREE,
    OPS_WAITING,  /* in the user-space queue: the kernel does not know it yet */
    OPS_KERNEL,   /* handed to the kernel (prepared or submitted); the kernel owns its memory */
};

typedef struct op {
    uint32_t next;          /* free list or user-space queue link */
    uint8_t kind;
    uint8_t state;
    uint8_t abandoned;      /* the awaiting side gave up; drop the result when reaped */
    uint8_t nowait;         /* kaio: this piece was submitted with RWF_NOWAIT */
    uint8_t no_nowait;      /* kaio: the file refused RWF_NOWAIT; submit plainly */
    uint8_t direct;         /* kaio: this piece is an O_DIRECT re-issue into `bounce` */
    uint8_t detour;         /* kaio: a piece came back EAGAIN; every further piece of the
                             * operation is an O_DIRECT re-issue too (no RWF_NOWAIT probe) */
    uint8_t retries;        /* transparent retries of -EINTR / -EAGAIN completions */
    uint8_t cancel_sent;    /* the kernel was asked to cancel it (close drains reads so) */
    uint8_t opened;         /* openat: the kernel returned a descriptor, in `done`; closed
                             * by op_finish if it is not delivered */
    int8_t direct_slot;     /* kaio: the engine's descriptor-cache entry `direct_fd` is from
                             * (holding a reference to it), -1 for a descriptor of its own */
    uint32_t kslot;         /* backend's index for the piece (kaio: its iocb) */
    uint32_t awaited_open;  /* openat sent inside its call, waited for by the loop's next
                             * reaping callback (OPEN_WAIT_NS): the engine's open_gen then, 0
                             * for none; counted in engine.opens_out while it is the current
                             * generation and the operation is not finished */
    int fd;
    PyObject *future;       /* owned; until resolved or dropped */
    PyObject *settled;      /* owned; set by Engine.cancel_wait: resolved with None once the
                             * abandoned operation's memory is the caller's again (op_finish) */
    PyObject *bytes;        /* owned; OP_READ's result object, written by the kernel until reaped */
    Py_buffer view;         /* held while view.obj != NULL: from submission until the last
                             * completion of the operation is reaped (pins the caller's buffer) */
    char *buf;              /* borrowed from `bytes` or `view`; base of the caller's memory;
                             * path operations: the first path (borrowed from `keep`) */
    char *buf2;             /* path operations: the second path (borrowed from `keep`) */
    PyObject *keep;         /* owned; path operations: (path, path2, filename, filename2), the
                             * bytes the kernel reads, kept until the completion is reaped */
    int fd2;                /* path operations: the second directory descriptor */
    int oflags;             /* path operations: open / at / rename / statx flags; close: 1
                             * when the release goes to an io-wq worker (close_may_take_long) */
    uint32_t mode;          /* openat / mkdirat mode, statx mask, fallocate mode */
    uint64_t len;           /* bytes requested in total; close: the file's inode number (0:
                             * not known), with `off` its identity (close_may_take_long) */
    uint64_t done;          /* bytes transferred so far (openat: the new descriptor) */
    int64_t off;            /* file offset of buf[0]; close: the file's device */
    uint32_t cur;           /* length of the piece now with the kernel */
    int direct_fd;          /* kaio: the O_DIRECT descriptor of the file the operation reads
                             * through from its first re-issue to its end (later pieces never
                             * look up the caller's descriptor number again); let go by
                             * kaio_direct_release */
    void *bounce;           /* kaio: owned aligned buffer of the O_DIRECT re-issues, kept from
                             * piece to piece, freed with the slot */
    uint64_t bounce_off;    /* kaio: file offset of bounce[0] for the piece now with the kernel */
    uint32_t bounce_len;    /* ... and the length that piece reads */
    uint32_t bounce_cap;    /* kaio: bytes allocated at `bounce` */
    uint8_t trim;           /* OP_READ of pread_direct: the kernel reads the aligned range at
                             * `buf` inside `bytes`; the result is `want` bytes from `skip` */
    uint32_t skip;          /* ... the offset asked for, from the range's start (< DIO_ALIGN) */
    uint64_t want;          /* ... the size asked for */
} op_t;

typedef struct stats {
    uint64_t submitted;       /* operations (pieces) handed to the kernel */
    uint64_t completed;       /* completions reaped */
    uint64_t batches;         /* submission system calls that carried at least one operation */
    uint64_t syscalls;        /* every system call the engine made */
    uint64_t wakeups;         /* eventfd wake-ups handled */
    uint64_t queued;          /* operations that waited in user space for kernel room */
    uint64_t retries;         /* transparent re-submissions (-EINTR, -EAGAIN, short transfers) */
    uint64_t splits;          /* extra pieces of operations larger than KERNEL_RW_MAX, and
                               * of Linux AIO reads on the O_DIRECT detour */
    uint64_t nowait_eagain;   /* kaio: RWF_NOWAIT reads that would have blocked */
    uint64_t direct_reissues; /* kaio: O_DIRECT pieces: the re-issues of those, and the
                               * further pieces (and retries) of reads on that detour */
    uint64_t direct_refused;  /* kaio: O_DIRECT unavailable (or the file has a lock on it);
                               * read done blocking in io_submit */
    uint64_t nowait_unsupported; /* kaio: RWF_NOWAIT refused for the file; read done blocking */
    uint64_t cancels;         /* cancellation requests */
    uint64_t withdrawn;       /* of those, operations taken back from a submission the kernel
                               * had refused for the moment: it never saw them */
    uint64_t cq_overflow;     /* io_uring: CQ overflow flushes */
    uint64_t inline_hits;     /* reads completed inline from the page cache (RWF_NOWAIT) */
    uint64_t inline_misses;   /* inline attempts that went to the kernel queue after all */
    uint64_t budget_exhausted; /* loop iterations whose inline budget ran out */
    uint64_t inline_retries;  /* inline calls retried after a refusal and a turn of the loop */
    uint64_t retries_refused; /* of those, the ones past the grace too (they wait in a queue) */
    uint64_t inline_writes;   /* writes completed inline (pwrite into the page cache) */
    uint64_t write_stalls;    /* inline writes slower than WRITE_STALL_NS (then WRITE_CALM_NS
                               * of writes through the kernel queue) */
    uint64_t parked;          /* small reads done inline after a refusal, their callers parked */
    uint64_t slices_ended;    /* of those, refused by the end of a run's slice (PARK_SLICE),
                               * not by the spent budget */
    uint64_t flushes;         /* flushes scheduled: loop callbacks (each costs the loop an
                               * iteration it might otherwise not have run) */
    uint64_t woken;           /* futures whose done callbacks a wake-up or a flush called
                               * itself (future_resolve_collect), not loop.call_soon */
    uint64_t async_writes;    /* writes of WRITE_ASYNC_MIN or more sent off the loop's thread
                               * (io_uring: IOSQE_ASYNC; Linux AIO: a writer thread) */
    uint64_t async_closes;    /* io_uring closes sent to an io-wq worker (IOSQE_ASYNC): the
                               * release of a file that may take long (close_may_take_long) */
    uint64_t open_waits;      /* flushes that waited for opens sent inside their calls
                               * (OPEN_WAIT_NS) */
    uint64_t open_wait_us;    /* ... and the time they waited, in all */
} stats_t;

/* A parked caller: its read is done; it waits for a flush to hand it the result. */
typedef struct parked {
    PyObject *fut, *res;      /* owned */
} parked_t;

/* What the inline path learned about one descriptor number in one loop iteration: whether
 * its reads may go inline (not O_DIRECT), whether its writes may (write_eligible), whether it
 * has a file position (lseek). Each costs system calls (fcntl, statx, lseek) that would
 * otherwise be paid again on every read and write. */
typedef struct fd_memo {
    int fd;
    unsigned what;            /* MEMO_* bits */
    uint64_t gen;             /* the engine's memo_gen when learned; stale once it moves on */
} fd_memo_t;

#define FD_MEMO_SIZE 64       /* a power of two: indexed by the descriptor's low bits */

struct engine;

#define REAP_WAIT 1
#define REAP_AFTER_SUBMIT 2

typedef struct backend_ops {
    const char *name;
    /* Put `op`'s current piece in the kernel's submission queue. 0, or -EBUSY when full. */
    int (*prep)(struct engine *e, op_t *op, uint32_t idx);
    /* Hand prepared entries to the kernel. Returns 0 or -errno (fatal for the engine). */
    int (*submit)(struct engine *e);
    /* Reap every available completion through engine_complete(). Flags: REAP_WAIT blocks for
     * one; REAP_AFTER_SUBMIT says the backend's submit ran just before (nothing between). */
    int (*reap)(struct engine *e, int flags);
    /* Prepared pieces the kernel has not accepted yet. */
    unsigned (*unaccepted)(struct engine *e);
    /* Whether completions may wait to be reaped (checked after the eventfd is cleared, and by
     * a flush that would otherwise skip its reap; NULL: the backend's eventfd is cleared
     * before reaping instead, see Engine_on_ready). */
    int (*pending)(struct engine *e);
    /* Take back every unaccepted piece, finishing its operation with `err`. */
    void (*unprep)(struct engine *e, int err);
    /* Take an operation's piece back from the submission queue if the kernel has not
     * accepted it (its submission was refused for the moment): 1, and the kernel never sees
     * it; 0 when the kernel has it. */
    int (*withdraw)(struct engine *e, uint32_t idx);
    /* Ask the kernel to cancel an operation; best effort. */
    void (*cancel)(struct engine *e, uint32_t idx);
    /* Free kernel objects. Called with nothing in flight, or from a forked child. */
    void (*destroy)(struct engine *e);
    /* Add backend details to the info dict. */
    int (*info)(struct engine *e, PyObject *dict);
    /* Wait up to `ns` for at least one completion, releasing the GIL, and reap what came
     * (engine_complete): how many were reaped, or -errno (-ETIME: none in time). NULL: the
     * backend cannot bound a wait. */
    int (*wait_timed)(struct engine *e, int64_t ns);
} backend_ops;

typedef struct uring {
    int fd;
    unsigned flags;           /* setup flags obtained */
    unsigned features;
    unsigned sq_entries, cq_entries;
    void *sq_map, *cq_map;    /* mmap()ed rings (cq_map == sq_map with FEAT_SINGLE_MMAP) */
    size_t sq_map_len, cq_map_len;
    void *sqes;               /* struct io_uring_sqe[sq_entries] */
    size_t sqes_len;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_flags, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    void *cqes;
    unsigned sq_local_tail;   /* entries prepared up to here; published at submit */
    int events_ran;           /* DEFER_TASKRUN: the last submit also ran all completion work,
                               * so a reap right after it (REAP_AFTER_SUBMIT) need not enter
                               * again: later work finds the kernel's list empty and signals
                               * the eventfd. Any other reap enters. */
    uint64_t opmask[4];       /* opcodes the kernel supports (IORING_REGISTER_PROBE) */
} uring_t;

/* O_DIRECT descriptors shared by the reads on the detour at the same time (concurrent cold
 * reads of one file open it once). Only while some read holds one: when the file's last lets
 * go, it is closed, so none keeps a file its caller closed and deleted (and its space). */
typedef struct dcache_ent {
    int fd;                   /* the caller's descriptor number it was opened through */
    int dfd;                  /* our O_DIRECT descriptor of that file; -1: a free entry */
    dev_t dev;
    ino_t ino;
    unsigned refs;            /* operations reading through it; at 0 the entry is closed */
} dcache_ent;

#define DCACHE_SIZE 16

typedef struct kaio {
    unsigned long ctx;        /* aio_context_t, from the process-wide pool */
    unsigned nr;              /* its size */
    const void *ring;         /* the completion ring's header at ctx (kaio.c, ring_empty), or
                               * NULL if it does not look like one */
    void **pending;           /* struct iocb *[nr]: prepared, not yet accepted by io_submit */
    unsigned npending;
    void *iocbs;              /* struct iocb[nr]: one per in-flight slot (slot-indexed lazily) */
    void *events;             /* struct io_event[nr] */
    uint32_t *free_iocbs;     /* stack of free iocb indexes */
    unsigned nfree_iocbs;
    dcache_ent dcache[DCACHE_SIZE];
    /* Writer threads (kaio.c, writer_*): Linux AIO copies a buffered write into the page
     * cache inside io_submit, on the loop's thread, so large ones are written by these. The
     * queue and the done list are shared under `wmu`; `wlive` (jobs not yet reaped) is the
     * loop thread's own. */
    struct kaio_job *wq_head, *wq_tail, *wdone;
    struct kaio_job *wq_opens;  /* the last open in the queue (opens go ahead of writes) */
    pthread_mutex_t wmu;
    pthread_cond_t wq_cv;     /* a job was queued, or the writers must stop */
    pthread_cond_t wdone_cv;  /* a job is done (a reap waiting for it) */
    pthread_t writers[KAIO_WRITERS + KAIO_OPENERS];
    unsigned nwriters, widle, wlive;
    unsigned nopeners;        /* of the nwriters threads, those that take only opens */
    unsigned widle_openers;   /* of the widle threads, the openers */
    unsigned wq_nopens;       /* opens in the queue */
    int wstop, winit;
} kaio_t;

typedef struct engine {
    PyObject_HEAD
    const backend_ops *ops;
    int efd;                  /* eventfd the kernel signals on completion */
    int closed;               /* 0 open, 2 draining, 1 closed */
    int drop_results;         /* the loop is gone or closed: futures cannot be resolved */
    int busy;                 /* depth of engine callbacks on the stack (reap / flush) */
    int close_pending;        /* close() asked for while busy: done when the outermost returns */
    unsigned long fork_gen;   /* engine_fork_generation at creation: a child never touches it */
    unsigned long owner_thread;
    PyObject *loop_ref;       /* owned weakref to the event loop (no cycle through the loop) */
    PyObject *weakrefs;       /* the registry holds engines weakly: the loop's reader keeps
                               * an engine alive exactly as long as the loop is open */
    int flush_scheduled;
    int collecting;           /* a loop callback (Engine_on_ready, the loop's flush) is reaping:
                               * the futures it resolves hand their done callbacks to `wake`
                               * (complete.c, future_resolve_collect) */
    PyObject *wake;           /* owned; a list of (future, callbacks) while collecting, made
                               * at the first; NULL otherwise */
    int deep;                 /* the last flush or early submission left operations with the
                               * kernel (a device or a worker has them): submit every
                               * EARLY_SUBMIT, and a read it would hold alone (engine_enqueue) */
    uint64_t reaped_batches;  /* st.batches when the last reap began: every batch the kernel
                               * accepted before it has been reaped (engine_send_settled) */
    /* Cooperative budget of the inline fast path: reads that complete inside the call never
     * return to the loop, so they may run for `budget_ns` of wall time per loop iteration.
     * `window_start` is when the first of them ran (0: none since the last iteration began);
     * a flush is scheduled then, and the flush (next iteration) reopens the window. */
    uint64_t budget_ns;       /* 0: the fast path is off */
    uint64_t window_start;
    int budget_spent;
    int retry_follow;         /* a retry was just admitted past the budget: the same task's
                               * next call may follow it (see inline_budget_ok) */
    /* Parked callers, oldest first: a ring of park_cap (a power of two, or 0) entries from
     * park_head. Each flush hands out up to release_n of them (engine_release). */
    parked_t *parked;
    uint32_t park_cap, park_head, park_len;
    uint32_t release_n;
    uint32_t slice_used;      /* inline reads of the current run (read_done; a run ends when
                               * its caller awaits a future: call.c, or the flush) */
    int spent_since_release;  /* a budget ran out since the last engine_release */
    uint64_t write_calm_at;   /* after a write stall: writes go to the kernel queue until
                               * this time (CLOCK_MONOTONIC ns); 0: no stall */
    /* What the inline path found out about descriptors (fd_memo in inline.c): valid for one
     * loop iteration (memo_gen), forgotten when the engine opens or closes the number. */
    fd_memo_t fd_memo[FD_MEMO_SIZE];
    uint64_t memo_gen;
    uint64_t sleeps_window;   /* the window_start whose sleeps_at_start is known */
    long sleeps_at_start;     /* the loop thread's voluntary context switches then */
    uint64_t local_mnt;       /* the unique id (statx STATX_MNT_ID_UNIQUE) of the mount an
                               * inline close last found local (local_fs), 0 for none: a
                               * mount's filesystem never changes and its id is never reused */
    unsigned capacity;        /* most operations with the kernel at once */
    /* slot table */
    op_t **blocks;
    uint32_t nblocks;
    uint32_t free_head;
    uint32_t wait_head, wait_tail; /* user-space queue of OPS_WAITING slots */
    uint32_t in_kernel;       /* slots in OPS_KERNEL */
    uint32_t waiting;         /* slots in OPS_WAITING */
    uint32_t live;            /* slots not free */
    uint32_t pinned;          /* Py_buffer views and read bytes the kernel may write */
    uint32_t opens_out;       /* opens sent inside their call, not finished (awaited_open) */
    uint32_t open_gen;        /* the generation of awaited opens (never 0): a wait that runs
                               * out of time gives up on the opens left, moving to the next */
    stats_t st;
    union {
        uring_t ring;
        kaio_t aio;
    } b;
    struct engine *gprev, *gnext;  /* all engines of the process (GIL-protected) */
} engine_t;

static inline op_t *engine_slot(engine_t *e, uint32_t idx)
{
    return &e->blocks[idx / OP_BLOCK][idx % OP_BLOCK];
}

/* Fault injection: a test-only mechanism compiled into every build (one load per call site).
 * A point armed with (errno, count, after) lets `after` calls pass, then makes the next
 * `count` calls fail with -errno. io_uring_enter and io_submit armed with errno 0 accept only
 * the first entry of each of those calls instead (partial acceptance). */
enum fault_point {
    FP_URING_SETUP,
    FP_URING_ENTER,
    FP_IO_SETUP,
    FP_IO_SUBMIT,
    FP_COMPLETION,     /* the next completions carry -errno instead of their result */
    FP_SHORT,          /* the next read/write completions transfer half of what they did */
    FP_DIRECT_OPEN,    /* kaio: opening the O_DIRECT descriptor fails */
    FP_INLINE,         /* the inline RWF_NOWAIT read fails with -errno (EAGAIN: a cache miss) */
    FP_INLINE_WRITE,   /* the inline write stops: after half of the data (armed with errno 0)
                        * or before writing (armed with an errno); the queue does the rest */
    FP_WRITE_STALL,    /* the inline write counts as a stall (slower than WRITE_STALL_NS) */
    FP_CLOSE_UNRUN,    /* io_uring: a close goes as a NOP answering -errno, the descriptor left
                        * open (ECANCELED: io-wq giving up on the close before a worker ran it) */
    FP_WRITER_START,   /* kaio: starting a writer thread fails (pthread_create's -errno) */
    FP_COUNT
};
extern int fault_errno[FP_COUNT];
extern int fault_count[FP_COUNT];
extern int fault_skip[FP_COUNT];   /* calls that pass before the point starts failing */
static inline int fault_hit(enum fault_point p)
{
    if (__builtin_expect(fault_count[p] == 0, 1))
        return 0;
    if (fault_skip[p] > 0) {
        fault_skip[p]--;
        return 0;
    }
    if (fault_count[p] > 0)
        fault_count[p]--;
    /* nonzero whenever the point fires, even armed with errno 0 (FP_SHORT ignores it) */
    return fault_errno[p] ? -fault_errno[p] : -1;
}

/* Process-wide resource counters (read by tests: every one returns to its start). */
typedef struct gcounters {
    long engines, rings, eventfds, aio_contexts, aio_pooled, direct_fds, direct_parked;
} gcounters_t;
extern gcounters_t g_count;

/* engine.c: the Engine type */
extern PyTypeObject Engine_Type;
extern unsigned long engine_fork_generation;
int engine_module_init(PyObject *m);
/* The engine's event loop (a new reference), or NULL when it is gone. */
PyObject *engine_loop(engine_t *e);
/* Whether `loop` is the engine's event loop (no reference kept). */
int engine_loop_is(engine_t *e, PyObject *loop);
/* Close the engine: wait for the kernel to finish what it holds (reads are cancelled), then
 * free its resources; while an engine callback is on the stack (busy), done when the outermost
 * returns (engine_leave). 0, or -1 with the error set. */
int engine_do_close(engine_t *e);
PyObject *Engine_close(engine_t *e, PyObject *unused);
PyObject *engine_forget_inherited(PyObject *m, PyObject *unused);
PyObject *engine_counters(PyObject *m, PyObject *unused);

#endif
