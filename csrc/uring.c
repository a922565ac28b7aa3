/* io_uring backend: a ring set up with raw system calls (uring_abi.h is all we need), a
 * registered eventfd the loop watches, and the best setup flags the kernel accepts.
 */
#include "engine.h"
#include "complete.h"
#include "uring.h"
#include "uring_abi.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* user_data of the engine's own ASYNC_CANCEL requests (slot indexes are below OP_NONE). */
#define CANCEL_UD ((uint64_t)UINT64_MAX)

static const backend_ops uring_ops;  /* defined at the end */

/* TASKRUN_FLAG matters with DEFER_TASKRUN too: one GETEVENTS runs at most max(20,
 * min_complete) deferred items (6.10+); what is left sits on a retry list that does not signal
 * the eventfd again, and IORING_SQ_TASKRUN is the only way to learn it is there. */
#define DEFER_FLAGS (IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | \
                     IORING_SETUP_TASKRUN_FLAG)

/* Preference order. DEFER_TASKRUN (6.1) runs completion work only when we ask for events:
 * fewest interruptions for one thread driving one ring. COOP_TASKRUN (5.19) at least avoids
 * IPIs. CQSIZE keeps the completion queue larger than what can be in flight. */
static const unsigned setup_choices[] = {
    DEFER_FLAGS | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE,
    IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SUBMIT_ALL |
        IORING_SETUP_CQSIZE,
    IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE,
    IORING_SETUP_CQSIZE,
    0,
};

static int sys_setup(unsigned entries, struct io_uring_params *p)
{
    int f = fault_hit(FP_URING_SETUP);
    if (f)
        return f;
    int fd = (int)syscall(__NR_io_uring_setup, entries, p);
    return fd < 0 ? -errno : fd;
}

static int sys_enter(int fd, unsigned submit, unsigned min_complete, unsigned flags)
{
    /* Armed with errno 0: partial acceptance, the first entry only, of calls that submit. */
    int partial_mode = fault_count[FP_URING_ENTER] && !fault_errno[FP_URING_ENTER];
    int f = partial_mode && !submit ? 0 : fault_hit(FP_URING_ENTER);
    if (f == -1 && partial_mode)
        submit = 1;
    else if (f)
        return f;
    int rc = (int)syscall(__NR_io_uring_enter, fd, submit, min_complete, flags, NULL, 0);
    return rc < 0 ? -errno : rc;
}

/* A wait for `min_complete` completions of at most `ns` (IORING_ENTER_EXT_ARG, 5.11):
 * -ETIME when the time ran out first. */
static int sys_enter_timed(int fd, unsigned min_complete, int64_t ns)
{
    struct uring_timespec ts = {ns / 1000000000, ns % 1000000000};
    struct io_uring_getevents_arg arg = {0, 0, 0, (uint64_t)(uintptr_t)&ts};
    int rc = (int)syscall(__NR_io_uring_enter, fd, 0, min_complete,
                          IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg, sizeof arg);
    return rc < 0 ? -errno : rc;
}

static int sys_register(int fd, unsigned opcode, void *arg, unsigned nr)
{
    int rc = (int)syscall(__NR_io_uring_register, fd, opcode, arg, nr);
    return rc < 0 ? -errno : rc;
}

static const char *unavailable_reason(int err)
{
    switch (err) {
    case EPERM:
        return "io_uring_setup: EPERM (blocked by seccomp, e.g. Docker >= 25 / containerd 2, "
               "or kernel.io_uring_disabled)";
    case ENOSYS:
        return "io_uring_setup: ENOSYS (kernel without io_uring, gVisor or rootless Podman)";
    case EINVAL:
        return "io_uring_setup: EINVAL (kernel too old for any supported setup)";
    default:
        return NULL;
    }
}

/* Try the setup choices in order. Returns the ring fd or -errno; `p` holds the winner's
 * parameters. EINVAL means "not this combination"; anything else ends the search. */
static int ring_setup(unsigned entries, struct io_uring_params *p, const unsigned *choices,
                      size_t nchoices)
{
    int rc = -EINVAL;
    for (size_t i = 0; i < nchoices; i++) {
        memset(p, 0, sizeof *p);
        p->flags = choices[i];
        p->cq_entries = entries * 8;
        rc = sys_setup(entries, p);
        if (rc >= 0 || rc != -EINVAL)
            return rc;
    }
    return rc;
}

static void ring_unmap(uring_t *r)
{
    if (r->sqes)
        munmap(r->sqes, r->sqes_len);
    if (r->cq_map && r->cq_map != r->sq_map)
        munmap(r->cq_map, r->cq_map_len);
    if (r->sq_map)
        munmap(r->sq_map, r->sq_map_len);
    r->sqes = r->cq_map = r->sq_map = NULL;
}

static int ring_map(uring_t *r, struct io_uring_params *p)
{
    r->sq_map_len = p->sq_off.array + p->sq_entries * sizeof(unsigned);
    r->cq_map_len = p->cq_off.cqes + p->cq_entries * sizeof(struct io_uring_cqe);
    int single = (p->features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single && r->cq_map_len > r->sq_map_len)
        r->sq_map_len = r->cq_map_len;
    void *sq = mmap(NULL, r->sq_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                    IORING_OFF_SQ_RING);
    if (sq == MAP_FAILED)
        return -errno;
    r->sq_map = sq;
    if (single) {
        r->cq_map = sq;
        r->cq_map_len = r->sq_map_len;
    } else {
        void *cq = mmap(NULL, r->cq_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                        r->fd, IORING_OFF_CQ_RING);
        if (cq == MAP_FAILED)
            return -errno;
        r->cq_map = cq;
    }
    r->sqes_len = p->sq_entries * sizeof(struct io_uring_sqe);
    void *sqes = mmap(NULL, r->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                      IORING_OFF_SQES);
    if (sqes == MAP_FAILED)
        return -errno;
    r->sqes = sqes;
    char *s = r->sq_map, *c = r->cq_map;
    r->sq_head = (unsigned *)(s + p->sq_off.head);
    r->sq_tail = (unsigned *)(s + p->sq_off.tail);
    r->sq_mask = (unsigned *)(s + p->sq_off.ring_mask);
    r->sq_flags = (unsigned *)(s + p->sq_off.flags);
    r->sq_array = (unsigned *)(s + p->sq_off.array);
    r->cq_head = (unsigned *)(c + p->cq_off.head);
    r->cq_tail = (unsigned *)(c + p->cq_off.tail);
    r->cq_mask = (unsigned *)(c + p->cq_off.ring_mask);
    r->cqes = c + p->cq_off.cqes;
    r->sq_local_tail = *r->sq_tail;
    return 0;
}

/* Which opcodes the kernel has (5.6+); without the probe, only READ/WRITE/FSYNC are used. */
static void probe_opcodes(uring_t *r)
{
    size_t n = 256;
    struct io_uring_probe *p = calloc(1, sizeof *p + n * sizeof(struct io_uring_probe_op));
    if (!p)
        return;
    if (sys_register(r->fd, IORING_REGISTER_PROBE, p, (unsigned)n) >= 0) {
        for (unsigned i = 0; i < p->ops_len && i < 256; i++)
            if (p->ops[i].flags & IO_URING_OP_SUPPORTED)
                r->opmask[p->ops[i].op / 64] |= 1ull << (p->ops[i].op % 64);
    }
    free(p);
}

static const int kind_opcode[OP_KIND_COUNT] = {
    [OP_OPENAT] = IORING_OP_OPENAT,     [OP_CLOSE] = IORING_OP_CLOSE,
    [OP_STATX] = IORING_OP_STATX,       [OP_UNLINKAT] = IORING_OP_UNLINKAT,
    [OP_RENAMEAT] = IORING_OP_RENAMEAT, [OP_MKDIRAT] = IORING_OP_MKDIRAT,
    [OP_SYMLINKAT] = IORING_OP_SYMLINKAT, [OP_LINKAT] = IORING_OP_LINKAT,
    [OP_FALLOCATE] = IORING_OP_FALLOCATE, [OP_FTRUNCATE] = IORING_OP_FTRUNCATE,
};

int engine_supports(engine_t *e, int kind, int open_flags)
{
    if (e->ops != &uring_ops)  /* Linux AIO: opens are its writer threads' (kaio.c) */
        return kind <= OP_FDATASYNC ||
               (kind == OP_OPENAT && (open_flags < 0 || (open_flags & (O_CREAT | O_TRUNC))));
    if (kind < OP_OPENAT || kind >= OP_KIND_COUNT)
        return kind <= OP_FDATASYNC;
    int op = kind_opcode[kind];
    return (e->b.ring.opmask[op / 64] >> (op % 64)) & 1;
}

/* SQE fields of the path and descriptor operations. */
static void prep_path_op(engine_t *e, struct io_uring_sqe *sqe, op_t *op)
{
    sqe->opcode = (uint8_t)kind_opcode[op->kind];
    sqe->addr = (uint64_t)(uintptr_t)op->buf;
    switch (op->kind) {
    case OP_OPENAT:
        sqe->len = op->mode;
        sqe->open_flags = (uint32_t)op->oflags;
        break;
    case OP_STATX:
        sqe->len = op->mode;  /* the mask */
        sqe->statx_flags = (uint32_t)op->oflags;
        sqe->off = (uint64_t)(uintptr_t)op->bounce;
        break;
    case OP_UNLINKAT:
        sqe->unlink_flags = (uint32_t)op->oflags;
        break;
    case OP_RENAMEAT:
    case OP_LINKAT:
        sqe->len = (uint32_t)op->fd2;
        sqe->off = (uint64_t)(uintptr_t)op->buf2;
        sqe->rename_flags = (uint32_t)op->oflags;  /* hardlink_flags shares the field */
        break;
    case OP_MKDIRAT:
        sqe->len = op->mode;
        break;
    case OP_SYMLINKAT:
        sqe->fd = op->fd2;
        sqe->off = (uint64_t)(uintptr_t)op->buf2;
        break;
    case OP_FALLOCATE:
        sqe->off = (uint64_t)op->off;
        sqe->addr = op->len;  /* the length travels in addr */
        sqe->len = op->mode;
        break;
    case OP_FTRUNCATE:
        sqe->off = (uint64_t)op->off;
        sqe->addr = 0;
        break;
    default: {  /* OP_CLOSE */
        sqe->addr = 0;
        if (op->oflags) {  /* the release in a worker, not on the loop's thread */
            sqe->flags |= IOSQE_ASYNC;
            e->st.async_closes++;
        }
        int f = fault_hit(FP_CLOSE_UNRUN);
        if (f) {
            sqe->opcode = IORING_OP_NOP;
            sqe->rw_flags = IORING_NOP_INJECT_RESULT;
            sqe->len = (uint32_t)f;  /* -errno */
        }
        break;
    }
    }
}

int uring_probe(unsigned *flags_out, char *why, size_t whylen)
{
    struct io_uring_params p;
    int fd = ring_setup(4, &p, setup_choices, sizeof setup_choices / sizeof setup_choices[0]);
    if (fd < 0) {
        const char *r = unavailable_reason(-fd);
        snprintf(why, whylen, "%s", r ? r : strerror(-fd));
        return fd;
    }
    close(fd);
    if (!(p.features & IORING_FEAT_RW_CUR_POS)) {
        snprintf(why, whylen, "kernel older than 5.6 (no IORING_OP_READ/WRITE)");
        return -EINVAL;
    }
    *flags_out = p.flags;
    return 0;
}

int uring_create(engine_t *e, unsigned entries, unsigned force_flags, int use_force_flags,
                 char *why, size_t whylen)
{
    uring_t *r = &e->b.ring;
    struct io_uring_params p;
    r->fd = use_force_flags
                ? ring_setup(entries, &p, &force_flags, 1)
                : ring_setup(entries, &p, setup_choices,
                             sizeof setup_choices / sizeof setup_choices[0]);
    if (r->fd < 0) {
        int err = -r->fd;
        const char *reason = unavailable_reason(err);
        snprintf(why, whylen, "%s", reason ? reason : "io_uring_setup failed");
        r->fd = -1;
        return -err;
    }
    g_count.rings++;
    e->ops = &uring_ops;
    r->flags = p.flags;
    r->features = p.features;
    r->sq_entries = p.sq_entries;
    r->cq_entries = p.cq_entries;
    int rc = ring_map(r, &p);
    if (rc == 0 && !(p.features & IORING_FEAT_RW_CUR_POS))
        rc = -EINVAL;
    if (rc == 0)
        rc = sys_register(r->fd, IORING_REGISTER_EVENTFD, &e->efd, 1);
    if (rc == 0)
        probe_opcodes(r);
    if (rc < 0) {
        snprintf(why, whylen, "io_uring ring set-up (mmap / register eventfd) failed");
        uring_ops.destroy(e);
        e->ops = NULL;
        return rc;
    }
    /* Keep the CQ roomier than what may be in flight, with space for cancel requests. */
    e->capacity = r->cq_entries / 2;
    return 0;
}

/* The entry at position `i` of the submission ring. */
static struct io_uring_sqe *sqe_at(uring_t *r, unsigned i)
{
    return &((struct io_uring_sqe *)r->sqes)[r->sq_array[i & *r->sq_mask]];
}

static struct io_uring_sqe *sqe_get(uring_t *r)
{
    unsigned head = __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    if (r->sq_local_tail - head >= r->sq_entries)
        return NULL;
    unsigned i = r->sq_local_tail & *r->sq_mask;
    struct io_uring_sqe *sqe = &((struct io_uring_sqe *)r->sqes)[i];
    memset(sqe, 0, sizeof *sqe);
    r->sq_array[i] = i;
    r->sq_local_tail++;
    return sqe;
}

static int u_prep(engine_t *e, op_t *op, uint32_t idx)
{
    struct io_uring_sqe *sqe = sqe_get(&e->b.ring);
    if (!sqe)
        return -EBUSY;
    sqe->fd = op->fd;
    sqe->user_data = idx;
    switch (op->kind) {
    case OP_READ:
    case OP_READINTO:
    case OP_WRITE:
        sqe->opcode = op->kind == OP_WRITE ? IORING_OP_WRITE : IORING_OP_READ;
        sqe->addr = (uint64_t)(uintptr_t)(op->buf + op->done);
        sqe->len = op->cur;
        sqe->off = (uint64_t)op->off + op->done;
        if (op->kind == OP_WRITE && op->cur >= WRITE_ASYNC_MIN) {
            /* No non-blocking attempt inside io_uring_enter: a filesystem that takes buffered
             * writes without blocking would copy all of it there, on the loop's thread. */
            sqe->flags |= IOSQE_ASYNC;
            e->st.async_writes++;
        }
        break;
    case OP_FSYNC:
    case OP_FDATASYNC:
        sqe->opcode = IORING_OP_FSYNC;
        sqe->fsync_flags = op->kind == OP_FDATASYNC ? IORING_FSYNC_DATASYNC : 0;
        break;
    default:
        prep_path_op(e, sqe, op);
        break;
    }
    e->st.submitted++;
    return 0;
}

static int u_submit(engine_t *e)
{
    uring_t *r = &e->b.ring;
    r->events_ran = 0;
    __atomic_store_n(r->sq_tail, r->sq_local_tail, __ATOMIC_RELEASE);
    unsigned n = r->sq_local_tail - __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    if (n == 0)
        return 0;
    /* With DEFER_TASKRUN the same call also runs pending completion work (see u_reap for
     * what it may leave behind). */
    int defer = (r->flags & IORING_SETUP_DEFER_TASKRUN) != 0;
    int rc;
    do {
        e->st.syscalls++;
        rc = sys_enter(r->fd, n, 0, defer ? IORING_ENTER_GETEVENTS : 0);
    } while (rc == -EINTR);
    if (rc > 0)
        e->st.batches++;
    if (rc >= 0 && defer &&
        !(__atomic_load_n(r->sq_flags, __ATOMIC_ACQUIRE) & IORING_SQ_TASKRUN))
        r->events_ran = 1;
    return rc < 0 ? rc : 0;
}

/* Ask the kernel for completions: run deferred completion work, flush an overflowed CQ, or
 * (wait) block for one, releasing the GIL. */
static int u_getevents(engine_t *e, unsigned min_complete)
{
    uring_t *r = &e->b.ring;
    int rc;
    do {
        e->st.syscalls++;
        if (min_complete) {
            Py_BEGIN_ALLOW_THREADS
            rc = sys_enter(r->fd, 0, min_complete, IORING_ENTER_GETEVENTS);
            Py_END_ALLOW_THREADS
        } else {
            rc = sys_enter(r->fd, 0, 0, IORING_ENTER_GETEVENTS);
        }
    } while (rc == -EINTR);
    /* EAGAIN / EBUSY: the kernel is short of memory for overflow entries; reaping frees it. */
    return (rc == -EAGAIN || rc == -EBUSY) ? 0 : rc;
}

static unsigned cq_drain(engine_t *e)
{
    uring_t *r = &e->b.ring;
    unsigned n = 0;
    for (;;) {
        unsigned head = *r->cq_head;  /* re-read: a handler may have reaped meanwhile */
        unsigned tail = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE);
        if (head == tail)
            break;
        struct io_uring_cqe *cqe = &((struct io_uring_cqe *)r->cqes)[head & *r->cq_mask];
        uint64_t ud = cqe->user_data;
        int32_t res = cqe->res;
        head++;
        /* Publish before handling: the handler may run Python code, and the slot is ours. */
        __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
        n++;
        if (ud != CANCEL_UD)
            engine_complete(e, (uint32_t)ud, res);
    }
    return n;
}

static int u_reap(engine_t *e, int flags)
{
    uring_t *r = &e->b.ring;
    int wait = flags & REAP_WAIT;
    int skip = (flags & REAP_AFTER_SUBMIT) && r->events_ran;
    r->events_ran = 0;
    if ((r->flags & IORING_SETUP_DEFER_TASKRUN) && !skip) {
        int rc = u_getevents(e, 0);
        if (rc < 0)
            return rc;
    }
    unsigned got = cq_drain(e);
    /* Enter again while the kernel says completion work is pending (TASKRUN: GETEVENTS runs
     * at most ~20 deferred items a call) or completions wait in its overflow list, but only
     * while that makes progress: the TASKRUN flag can stay set with nothing left to run, and
     * looping on the flag alone spins the loop thread forever (seen under sustained hot
     * reads). Bounded as well; what is left is reaped on the next wake-up or flush. */
    for (int round = 0; round < 256; round++) {
        unsigned sqf = __atomic_load_n(r->sq_flags, __ATOMIC_ACQUIRE);
        if (sqf & IORING_SQ_CQ_OVERFLOW)
            e->st.cq_overflow++;
        int block = wait && !got;
        if (!(sqf & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN)) && !block)
            break;
        int rc = u_getevents(e, block ? 1 : 0);
        if (rc < 0)
            return rc;
        unsigned more = cq_drain(e);
        got += more;
        if (!more && !block)
            break;
    }
    return 0;
}

static int u_wait_timed(engine_t *e, int64_t ns)
{
    uring_t *r = &e->b.ring;
    if (!(r->features & IORING_FEAT_EXT_ARG))  /* before 5.11: no bounded wait */
        return -EOPNOTSUPP;
    int rc;
    e->st.syscalls++;
    Py_BEGIN_ALLOW_THREADS
    rc = sys_enter_timed(r->fd, 1, ns);
    Py_END_ALLOW_THREADS
    if (rc < 0 && rc != -ETIME && rc != -EINTR)
        return rc;
    unsigned got = cq_drain(e);
    return got ? (int)got : (rc < 0 ? rc : 0);
}

static unsigned u_unaccepted(engine_t *e)
{
    uring_t *r = &e->b.ring;
    return r->sq_local_tail - __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
}

static int u_pending(engine_t *e)
{
    uring_t *r = &e->b.ring;
    return *r->cq_head != __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE) ||
           (__atomic_load_n(r->sq_flags, __ATOMIC_ACQUIRE) &
            (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW));
}

static void u_unprep(engine_t *e, int err)
{
    uring_t *r = &e->b.ring;
    unsigned head = __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    unsigned tail = r->sq_local_tail;
    r->sq_local_tail = head;
    __atomic_store_n(r->sq_tail, head, __ATOMIC_RELEASE);
    for (unsigned i = head; i != tail; i++) {
        struct io_uring_sqe *sqe = sqe_at(r, i);
        if (sqe->user_data != CANCEL_UD)
            engine_fail_unaccepted(e, (uint32_t)sqe->user_data, err);
    }
}

/* The entries between the kernel's head and our tail are ours until an io_uring_enter reads
 * them (no SQPOLL): one is taken out by moving the later ones up a place, each keeping its
 * ring index (sq_array[i] == i, see sqe_get). */
static int u_withdraw(engine_t *e, uint32_t idx)
{
    uring_t *r = &e->b.ring;
    unsigned head = __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    for (unsigned i = head; i != r->sq_local_tail; i++) {
        if (sqe_at(r, i)->user_data != idx)
            continue;
        for (unsigned j = i; j + 1 != r->sq_local_tail; j++)
            *sqe_at(r, j) = *sqe_at(r, j + 1);
        r->sq_local_tail--;
        unsigned published = __atomic_load_n(r->sq_tail, __ATOMIC_RELAXED);
        if (published - head > r->sq_local_tail - head)
            __atomic_store_n(r->sq_tail, r->sq_local_tail, __ATOMIC_RELEASE);
        return 1;
    }
    return 0;
}

static void u_cancel(engine_t *e, uint32_t idx)
{
    uring_t *r = &e->b.ring;
    struct io_uring_sqe *sqe = sqe_get(r);
    if (!sqe) {
        u_submit(e);
        sqe = sqe_get(r);
        if (!sqe)
            return;  /* best effort: the operation completes on its own */
    }
    sqe->opcode = IORING_OP_ASYNC_CANCEL;
    sqe->fd = -1;
    sqe->addr = idx;
    sqe->user_data = CANCEL_UD;
}

static void u_destroy(engine_t *e)
{
    uring_t *r = &e->b.ring;
    ring_unmap(r);
    if (r->fd >= 0) {
        close(r->fd);
        r->fd = -1;
        g_count.rings--;
    }
}

static int u_info(engine_t *e, PyObject *d)
{
    uring_t *r = &e->b.ring;
    static const struct { unsigned bit; const char *name; } names[] = {
        {IORING_SETUP_SINGLE_ISSUER, "SINGLE_ISSUER"},
        {IORING_SETUP_DEFER_TASKRUN, "DEFER_TASKRUN"},
        {IORING_SETUP_COOP_TASKRUN, "COOP_TASKRUN"},
        {IORING_SETUP_TASKRUN_FLAG, "TASKRUN_FLAG"},
        {IORING_SETUP_SUBMIT_ALL, "SUBMIT_ALL"},
        {IORING_SETUP_CQSIZE, "CQSIZE"},
    };
    PyObject *flags = PyList_New(0);
    if (!flags)
        return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(r->flags & names[i].bit))
            continue;
        PyObject *s = PyUnicode_FromString(names[i].name);
        if (!s || PyList_Append(flags, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(flags);
            return -1;
        }
        Py_DECREF(s);
    }
    int rc = PyDict_SetItemString(d, "setup_flags", flags);
    Py_DECREF(flags);
    if (rc < 0)
        return -1;
    PyObject *v = Py_BuildValue("{sIsIsIsIsI}", "sq_entries", r->sq_entries, "cq_entries",
                                r->cq_entries, "features", r->features, "flags_value", r->flags,
                                "large_writes_from", WRITE_ASYNC_MIN);
    if (!v)
        return -1;
    rc = PyDict_Update(d, v);
    Py_DECREF(v);
    return rc;
}

static const backend_ops uring_ops = {
    .name = "io_uring",
    .prep = u_prep,
    .submit = u_submit,
    .reap = u_reap,
    .unaccepted = u_unaccepted,
    .pending = u_pending,
    .unprep = u_unprep,
    .withdraw = u_withdraw,
    .cancel = u_cancel,
    .destroy = u_destroy,
    .info = u_info,
    .wait_timed = u_wait_timed,
};
