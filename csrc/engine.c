/* The engine: operation slots, futures, batching and the life cycle shared by both kernel
 * backends. Everything here runs on the owning loop's thread with the GIL held, except the
 * blocking waits of a drain, which release it.
 */
#include "engine.h"
#include "inline.h"
#include "kaio.h"
#include "lazy.h"
#include "uring.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <linux/stat.h>
#include <sys/eventfd.h>
#include <unistd.h>

unsigned long engine_fork_generation;
PyObject *g_future_type;
static PyObject *g_invalid_state_error;
PyObject *g_str_loop;
static PyObject *g_kw_loop;           /* ("loop",) */
static PyObject *g_kw_context;        /* ("context",) */
static PyObject *g_str_flush, *g_str_set_result, *g_str_set_exception, *g_str_call_soon,
    *g_str_is_closed, *g_str_characters_written, *g_str_callbacks, *g_str_remove_done_callback,
    *g_str_add_done_callback, *g_str_call_exception_handler, *g_str_message, *g_str_exception;
static engine_t *g_engines;           /* list of live engines (for fork and counters) */
gcounters_t g_count;

#define MAX_RETRIES 16

/* Default wall time inline completions may take per loop iteration (see engine_t). */
#define DEFAULT_BUDGET_NS 150000u
/* While callers wait parked (see engine_park), a run of inline reads — one task's, between
 * two of its waits — may complete this many before its next read parks it in turn. */
#define PARK_SLICE 16u

/* ---------------------------------------------------------------- slots */

static int slots_grow(engine_t *e)
{
    op_t **blocks = PyMem_Realloc(e->blocks, (e->nblocks + 1) * sizeof(op_t *));
    if (!blocks)
        return -1;
    e->blocks = blocks;
    op_t *blk = PyMem_Calloc(OP_BLOCK, sizeof(op_t));
    if (!blk)
        return -1;
    uint32_t base = e->nblocks * OP_BLOCK;
    for (uint32_t i = 0; i < OP_BLOCK; i++)
        blk[i].next = (i + 1 < OP_BLOCK) ? base + i + 1 : e->free_head;
    e->blocks[e->nblocks++] = blk;
    e->free_head = base;
    return 0;
}

static uint32_t slot_alloc(engine_t *e)
{
    if (e->free_head == OP_NONE && slots_grow(e) < 0) {
        PyErr_NoMemory();
        return OP_NONE;
    }
    uint32_t idx = e->free_head;
    op_t *op = engine_slot(e, idx);
    e->free_head = op->next;
    memset(op, 0, sizeof *op);
    op->next = OP_NONE;
    op->direct_fd = -1;
    op->direct_slot = -1;
    e->live++;
    return idx;
}

static void slot_free(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    op->state = OPS_FREE;
    op->next = e->free_head;
    e->free_head = idx;
    e->live--;
}

/* ---------------------------------------------------------------- loop helpers */

PyObject *engine_loop(engine_t *e)
{
    PyObject *loop = NULL;
    if (e->loop_ref && PyWeakref_GetRef(e->loop_ref, &loop) < 0)
        PyErr_Clear();  /* not a weak reference: cannot happen, the engine made it */
    return loop;
}

int engine_loop_is(engine_t *e, PyObject *loop)
{
    PyObject *own = engine_loop(e);
    Py_XDECREF(own);
    return own && own == loop;
}

int engine_schedule_flush(engine_t *e)
{
    if (e->flush_scheduled)
        return 0;
    PyObject *loop = engine_loop(e);
    if (!loop) {
        PyErr_SetString(PyExc_RuntimeError, "aionative: the engine's event loop is gone");
        return -1;
    }
    /* A fresh bound method per batch: holding one would make the engine its own cycle. */
    PyObject *cb = PyObject_GetAttr((PyObject *)e, g_str_flush);
    if (!cb) {
        Py_DECREF(loop);
        return -1;
    }
    PyObject *h = PyObject_CallMethodOneArg(loop, g_str_call_soon, cb);
    Py_DECREF(cb);
    Py_DECREF(loop);
    if (!h)
        return -1;
    Py_DECREF(h);
    e->flush_scheduled = 1;
    e->st.flushes++;
    return 0;
}

static PyObject *engine_new_future(engine_t *e)
{
    PyObject *loop = engine_loop(e);
    if (!loop) {
        PyErr_SetString(PyExc_RuntimeError, "aionative: the engine's event loop is gone");
        return NULL;
    }
    PyObject *args[2] = {NULL, loop};
    PyObject *fut = PyObject_Vectorcall(g_future_type, args + 1,
                                        0 | PY_VECTORCALL_ARGUMENTS_OFFSET, g_kw_loop);
    Py_DECREF(loop);
    return fut;
}

/* ---------------------------------------------------------------- parked callers */

/* A small read the budget (or the run's slice, call.c) refused is done inline all the same,
 * and its caller waits a turn on a future instead of the kernel queue: the copy costs the loop
 * the same inside a flush's submission, and a parked caller comes back after one turn where a
 * queued one takes two, with a kernel round trip. Parked callers are handed their results
 * oldest first, release_n per flush, so a turn's inline work stays near one budget however
 * many tasks read: each released caller runs a slice of PARK_SLICE reads and parks again.
 * Released by the loop's flush, a caller's task runs inside it (future_resolve_collect): no
 * Handle is built and run for it. */
static PyObject *engine_park(engine_t *e, PyObject *res, int sliced)
{
    if (e->park_len == e->park_cap) {
        uint32_t cap = e->park_cap ? e->park_cap * 2 : 64;
        parked_t *ring = PyMem_Malloc((size_t)cap * sizeof *ring);
        if (!ring)
            return PyErr_NoMemory();
        for (uint32_t i = 0; i < e->park_len; i++)
            ring[i] = e->parked[(e->park_head + i) & (e->park_cap - 1)];
        PyMem_Free(e->parked);
        e->parked = ring;
        e->park_cap = cap;
        e->park_head = 0;
    }
    if (engine_schedule_flush(e) < 0)
        return NULL;
    PyObject *fut = engine_new_future(e);
    if (!fut)
        return NULL;
    parked_t *p = &e->parked[(e->park_head + e->park_len++) & (e->park_cap - 1)];
    p->fut = Py_NewRef(fut);
    p->res = Py_NewRef(res);
    e->st.parked++;
    e->st.slices_ended += sliced;
    return fut;
}

/* Take the oldest parked caller off the ring (the caller owns its references). */
static parked_t park_pop(engine_t *e)
{
    parked_t p = e->parked[e->park_head];
    e->park_head = (e->park_head + 1) & (e->park_cap - 1);
    e->park_len--;
    return p;
}

static int future_resolve(PyObject *fut, PyObject *value, int is_exc);
static int future_resolve_collect(engine_t *e, PyObject *fut, PyObject *value, int is_exc);

/* Hand the oldest parked caller its result (its wake-up collected inside a loop callback of
 * the engine, as for a completion); 1 if it took it (0: cancelled meanwhile). */
static int park_release_one(engine_t *e)
{
    parked_t p = park_pop(e);
    int given = e->collecting ? future_resolve_collect(e, p.fut, p.res, 0)
                              : future_resolve(p.fut, p.res, 0);
    Py_DECREF(p.fut);
    Py_DECREF(p.res);
    return given;
}

/* Hand up to release_n parked callers their results (those cancelled meanwhile are skipped);
 * any left wait for the next flush (if it cannot be scheduled, they are all handed theirs
 * now, and -1 returned with the error). release_n follows the budget: a turn that spent it
 * had more callers than it could give a slice, one that did not could take another. */
static int engine_release(engine_t *e)
{
    int spent = e->spent_since_release;
    e->spent_since_release = 0;
    if (spent)
        e->release_n -= e->release_n / 4 + (e->release_n > 1);
    else if (e->release_n < e->capacity)
        e->release_n++;
    for (uint32_t given = 0; e->park_len && given < e->release_n;)
        given += park_release_one(e);
    if (!e->park_len || engine_schedule_flush(e) == 0)
        return 0;
    /* No flush to hand the rest their results: they get them now (none waits forever). */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    while (e->park_len)
        park_release_one(e);
    PyErr_Restore(t, v, tb);
    return -1;
}

/* The engine is closing (or a forked child drops its copy): every parked caller gets its
 * result now, unless the loop can no longer run anything. */
static void engine_release_parked(engine_t *e)
{
    while (e->park_len) {
        parked_t p = park_pop(e);
        if (!e->drop_results)
            future_resolve(p.fut, p.res, 0);
        Py_DECREF(p.fut);
        Py_DECREF(p.res);
    }
    PyMem_Free(e->parked);
    e->parked = NULL;
    e->park_cap = e->park_head = 0;
}

/* ---------------------------------------------------------------- submission */

static void wait_push(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    op->state = OPS_WAITING;
    op->next = OP_NONE;
    if (e->wait_tail == OP_NONE)
        e->wait_head = idx;
    else
        engine_slot(e, e->wait_tail)->next = idx;
    e->wait_tail = idx;
    e->waiting++;
    e->st.queued++;
}

static uint32_t wait_pop(engine_t *e)
{
    uint32_t idx = e->wait_head;
    if (idx == OP_NONE)
        return idx;
    op_t *op = engine_slot(e, idx);
    e->wait_head = op->next;
    if (e->wait_head == OP_NONE)
        e->wait_tail = OP_NONE;
    op->next = OP_NONE;
    e->waiting--;
    return idx;
}

static void op_set_piece(op_t *op)
{
    uint64_t left = op->len - op->done;
    op->cur = left > KERNEL_RW_MAX ? KERNEL_RW_MAX : (uint32_t)left;
}

/* Give the slot's next piece to the kernel queue. 0, or -EBUSY when there is no room even
 * after pushing what is prepared (the caller queues it in user space). */
static int op_to_kernel(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    if (e->in_kernel >= e->capacity)
        return -EBUSY;
    op_set_piece(op);
    int rc = e->ops->prep(e, op, idx);
    if (rc == -EBUSY) {
        /* The submission queue is full: submit now rather than wait for the flush. */
        if (e->ops->submit(e) < 0)
            return -EBUSY;
        rc = e->ops->prep(e, op, idx);
    }
    if (rc < 0)
        return rc;
    op->state = OPS_KERNEL;
    e->in_kernel++;
    return 0;
}

/* Move waiting operations to the kernel while there is room. */
static void engine_fill(engine_t *e)
{
    while (e->waiting && e->in_kernel < e->capacity) {
        uint32_t idx = e->wait_head;
        if (op_to_kernel(e, idx) < 0)
            return;
        wait_pop(e);
        engine_slot(e, idx)->state = OPS_KERNEL;
    }
}

static void engine_pump(engine_t *e);

/* Every reap goes through here: it notes which accepted batches it covers. */
static int engine_reap(engine_t *e, int flags)
{
    e->reaped_batches = e->st.batches;
    return e->ops->reap(e, flags);
}

/* Operations prepared during a loop iteration reach the kernel in one system call, at the
 * iteration's flush. While the kernel holds operations that did not complete inside their
 * submission (`deep`: a device or a worker has them), that holds a whole iteration's worth
 * of reads back while the device may be idle: a device that answers a batch at once
 * (virtio-blk) then runs in lock step with the loop, its queue empty while the loop handles
 * the batch. So a read that brings the prepared operations to EARLY_SUBMIT sends them at once
 * (W2's O_DIRECT 4 KiB reads at depth 64: `python -m bench --workloads W2`), and so does a
 * read the kernel would hold alone: the device has nothing of ours, and a read kept for the
 * flush waits out one more loop iteration with it idle (W2 at depth 1, every read). Cached reads complete inside the
 * submission: not deep, at the flush and after a read sent early alike. Writes do not trigger
 * it: buffered ones go to kernel workers, where starting early gains nothing and the extra
 * system calls cost (W5). */
#define EARLY_SUBMIT 2

static PyObject *engine_leave(engine_t *e);
static void engine_send_settled(engine_t *e);

/* Whether an operation of this kind, enqueued now, is sent inside its call. */
static int engine_sends_early(engine_t *e, uint8_t kind)
{
    return e->deep && !e->busy && !e->waiting && (kind == OP_READ || kind == OP_READINTO) &&
           (e->ops->unaccepted(e) + 1 >= EARLY_SUBMIT || e->in_kernel == 0);
}

/* `early`: engine_sends_early's answer, asked by the caller (engine_start schedules no
 * flush for an operation sent now). Returns 1 if the operation waits for room in user space
 * instead, sent by neither. */
static int engine_enqueue(engine_t *e, uint32_t idx, int early)
{
    if (e->waiting || op_to_kernel(e, idx) < 0) {
        wait_push(e, idx);
        return 1;
    }
    if (early) {
        /* Sent, then settled as at a flush (engine_settle): a piece that completed inside
         * the submission (a partly cached read) sends its rest while the caller's number is
         * still its file. A submission the kernel refuses, or a read that completed, ends its
         * operation here (op_finish: a future resolved, a buffer released, a finalizer run),
         * and that Python code may close the engine: the close waits for engine_leave, as in
         * the loop's callbacks. */
        e->busy++;
        engine_send_settled(e);
        PyObject *r = engine_leave(e);
        if (!r)
            PyErr_WriteUnraisable((PyObject *)e);
        Py_XDECREF(r);
    }
    return 0;
}

/* Submit everything prepared and everything waiting that fits. */
static void engine_pump(engine_t *e)
{
    for (int round = 0; round < 64; round++) {
        engine_fill(e);
        int rc = e->ops->submit(e);
        if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) {
            /* The ring itself refuses work (e.g. EEXIST: wrong thread): fail those operations
             * rather than leave their futures pending forever. */
            e->ops->unprep(e, -rc);
            return;
        }
        if (rc < 0 || e->ops->unaccepted(e)) {
            /* Short of resources, or accepted in part: completions make room; try again on
             * the next iteration in any case so nothing waits on a wake-up that never comes. */
            if (engine_schedule_flush(e) < 0)
                PyErr_WriteUnraisable((PyObject *)e);
            return;
        }
        if (!e->waiting || e->in_kernel >= e->capacity)
            return;
    }
}

/* ---------------------------------------------------------------- completion */

static PyObject *make_oserror(int err, uint64_t written, PyObject *keep)
{
    PyObject *exc;
    if (keep && PyTuple_GET_ITEM(keep, 2) != Py_None) {
        /* OSError(errno, strerror, filename, winerror, filename2), as os.stat & co. raise */
        exc = PyObject_CallFunction(PyExc_OSError, "isOOO", err, strerror(err),
                                    PyTuple_GET_ITEM(keep, 2), Py_None,
                                    PyTuple_GET_ITEM(keep, 3));
    } else {
        exc = PyObject_CallFunction(PyExc_OSError, "is", err, strerror(err));
    }
    if (exc && written) {
        PyObject *n = PyLong_FromUnsignedLongLong(written);
        if (!n || PyObject_SetAttr(exc, g_str_characters_written, n) < 0) {
            Py_XDECREF(n);
            Py_DECREF(exc);
            return NULL;
        }
        Py_DECREF(n);
    }
    return exc;
}

/* The struct statx fields os.stat_result is built from (aionative/_kernelops.py). */
static PyObject *statx_tuple(const struct statx *x)
{
    return Py_BuildValue(
        "(IKIIIIIKLILILILIIKIIIKK)", (unsigned)x->stx_mode, (unsigned long long)x->stx_ino,
        x->stx_dev_major, x->stx_dev_minor, x->stx_nlink, x->stx_uid, x->stx_gid,
        (unsigned long long)x->stx_size, (long long)x->stx_atime.tv_sec, x->stx_atime.tv_nsec,
        (long long)x->stx_mtime.tv_sec, x->stx_mtime.tv_nsec, (long long)x->stx_ctime.tv_sec,
        x->stx_ctime.tv_nsec, (long long)x->stx_btime.tv_sec, x->stx_btime.tv_nsec,
        x->stx_blksize, (unsigned long long)x->stx_blocks, x->stx_rdev_major, x->stx_rdev_minor,
        x->stx_mask, (unsigned long long)x->stx_attributes,
        (unsigned long long)x->stx_attributes_mask);
}

/* Result value of a finished operation; *is_exc set when it is an exception instance. */
static PyObject *op_result(op_t *op, int err, int *is_exc)
{
    *is_exc = 0;
    int partial_ok = (op->kind == OP_READ || op->kind == OP_READINTO) && op->done > 0;
    if (err && !partial_ok) {
        *is_exc = 1;
        return make_oserror(err, op->kind == OP_WRITE ? op->done : 0, op->keep);
    }
    switch (op->kind) {
    case OP_READ: {
        PyObject *b = op->bytes;
        op->bytes = NULL;
        if (op->trim) {  /* pread_direct: the part asked for, out of the aligned range */
            uint64_t n = op->done > op->skip ? op->done - op->skip : 0;
            PyObject *r = PyBytes_FromStringAndSize(op->buf + op->skip,
                                                    (Py_ssize_t)(n < op->want ? n : op->want));
            Py_DECREF(b);
            return r;
        }
        if ((uint64_t)PyBytes_GET_SIZE(b) != op->done && _PyBytes_Resize(&b, (Py_ssize_t)op->done) < 0)
            return NULL;
        return b;
    }
    case OP_READINTO:
    case OP_WRITE:
    case OP_OPENAT:
        return PyLong_FromUnsignedLongLong(op->done);
    case OP_STATX:
        return statx_tuple(op->bounce);
    default:
        Py_RETURN_NONE;
    }
}

/* 1 if the future took the value, 0 if nobody will see it (cancelled meanwhile). */
static int future_resolve(PyObject *fut, PyObject *value, int is_exc)
{
    /* Not asked whether it is done first (a method call every operation): a done future
     * refuses the value with InvalidStateError, and only a cancelled one is done here. */
    PyObject *r = PyObject_CallMethodOneArg(fut, is_exc ? g_str_set_exception : g_str_set_result,
                                            value);
    if (r) {
        Py_DECREF(r);
        return 1;
    }
    if (PyErr_ExceptionMatches(g_invalid_state_error))
        PyErr_Clear();  /* cancelled by its awaiting task: nobody wants the result */
    else
        PyErr_WriteUnraisable(fut);
    return 0;
}

/* Give back to `fut` the callbacks of `taken` (its list before the engine began to take them
 * off) that it no longer holds: each that finds no unmatched entry with the same function and
 * context in what it holds now (compared by identity: remove_done_callback calls __eq__, which
 * may raise, and may have taken an entry off before raising). A done future schedules each at
 * once, as it would have. */
static void callbacks_give_back(PyObject *fut, PyObject *taken)
{
    PyObject *cur = PyObject_GetAttr(fut, g_str_callbacks);
    if (!cur)
        PyErr_WriteUnraisable(fut);
    Py_ssize_t ncur = cur && PyList_Check(cur) ? PyList_GET_SIZE(cur) : 0;
    char *used = ncur ? PyMem_Calloc((size_t)ncur, 1) : NULL;
    if (ncur && !used) {  /* (every one given back: some twice, none lost) */
        PyErr_NoMemory();
        PyErr_WriteUnraisable(fut);
        ncur = 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(taken); i++) {
        PyObject *ent = PyList_GET_ITEM(taken, i);
        int held = 0;
        for (Py_ssize_t j = 0; !held && j < ncur; j++) {
            PyObject *c = PyList_GET_ITEM(cur, j);
            held = !used[j] && PyTuple_Check(c) && PyTuple_GET_SIZE(c) == 2 &&
                   PyTuple_GET_ITEM(c, 0) == PyTuple_GET_ITEM(ent, 0) &&
                   PyTuple_GET_ITEM(c, 1) == PyTuple_GET_ITEM(ent, 1);
            used[j] |= (char)held;
        }
        if (held)
            continue;
        PyObject *args[3] = {fut, PyTuple_GET_ITEM(ent, 0), PyTuple_GET_ITEM(ent, 1)};
        PyObject *r = PyObject_VectorcallMethod(g_str_add_done_callback, args, 2, g_kw_context);
        if (!r)
            PyErr_WriteUnraisable(fut);
        Py_XDECREF(r);
    }
    PyMem_Free(used);
    Py_XDECREF(cur);
}

/* future_resolve for a future resolved in a loop callback of the engine (Engine_on_ready, the
 * loop's Engine_flush): its done callbacks (the awaiting task's wake-up, gather's, shield's)
 * are taken off it before it is resolved and kept in e->wake, and the callback calls them
 * itself once its reap is over (engine_run_wakeups) instead of the future scheduling each
 * with loop.call_soon. The tasks then run in the
 * iteration that polled their completions, not the next one: on asyncio's loop each
 * call_soon is a Handle built and run in Python, about half the user-space instructions of
 * an O_DIRECT read at depth 64 (`python -m bench.instructions`), and at depth 1 the next
 * read reaches the device one loop iteration (an epoll_wait and a pass of the loop) sooner.
 * The callbacks are called as the future would have had them called: in order, each in its
 * context, with the future as argument, after it is done. */
static int future_resolve_collect(engine_t *e, PyObject *fut, PyObject *value, int is_exc)
{
    PyObject *cbs = PyObject_GetAttr(fut, g_str_callbacks);  /* None, or [(fn, context), ...] */
    if (!cbs)
        PyErr_Clear();
    /* A list only this call holds is a copy already (_asyncio's C future builds a new one
     * on each ask, as a rule); any other is copied: it may be the future's own, which
     * remove_done_callback edits. (A done future holds none: they were scheduled when it
     * became done.) */
    PyObject *taken = NULL;
    if (cbs && PyList_CheckExact(cbs) && PyList_GET_SIZE(cbs))
        taken = Py_REFCNT(cbs) == 1 ? Py_NewRef(cbs)
                                    : PyList_GetSlice(cbs, 0, PyList_GET_SIZE(cbs));
    Py_XDECREF(cbs);
    Py_ssize_t n = taken ? PyList_GET_SIZE(taken) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ent = PyList_GET_ITEM(taken, i);
        if (!PyTuple_CheckExact(ent) || PyTuple_GET_SIZE(ent) != 2 ||
            !PyContext_CheckExact(PyTuple_GET_ITEM(ent, 1)))
            n = 0;  /* not asyncio's shape: left to the future */
    }
    PyObject *item = n && (e->wake || (e->wake = PyList_New(0)))
                         ? PyTuple_Pack(2, fut, taken) : NULL;
    Py_ssize_t removed = 0;
    for (; item && removed < n; removed++) {
        PyObject *r = PyObject_CallMethodOneArg(
            fut, g_str_remove_done_callback, PyTuple_GET_ITEM(PyList_GET_ITEM(taken, removed), 0));
        if (!r)
            break;
        Py_DECREF(r);
    }
    int delivered = 0;
    if (item && removed == n && PyList_Append(e->wake, item) == 0) {
        delivered = future_resolve(fut, value, is_exc);  /* pending: no callbacks left to call */
        if (!delivered) {
            /* It refused the value (done meanwhile: a callback's __eq__ cancelled it, say):
             * its callbacks go back to it, which schedules them. */
            PyList_SetSlice(e->wake, PyList_GET_SIZE(e->wake) - 1, PyList_GET_SIZE(e->wake),
                            NULL);
            callbacks_give_back(fut, taken);
        }
    } else {
        /* Something failed on the way (MemoryError, an __eq__ that raised): what was taken
         * off goes back, and the future calls its callbacks as any other. */
        if (PyErr_Occurred())
            PyErr_WriteUnraisable(fut);
        if (item)  /* some may be off the future */
            callbacks_give_back(fut, taken);
        delivered = future_resolve(fut, value, is_exc);
    }
    Py_XDECREF(item);
    Py_XDECREF(taken);
    return delivered;
}

/* The operation is over: the kernel holds nothing of it any more. Build its result, release
 * what it pinned, free the slot, then resolve the future (arbitrary code may run from the
 * releases and the resolution, so the slot is consistent before either). */
static void op_finish(engine_t *e, uint32_t idx, int err)
{
    op_t *op = engine_slot(e, idx);
    PyObject *fut = op->future;
    op->future = NULL;
    PyObject *settled = op->settled;
    op->settled = NULL;
    int was_pinned = op->bytes != NULL || op->view.obj != NULL || op->keep != NULL;
    int is_exc = 0;
    PyObject *value = NULL;
    if (fut && !op->abandoned && !e->drop_results) {
        value = op_result(op, err, &is_exc);
        if (!value) {   /* building the result failed (MemoryError): deliver that */
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyErr_NormalizeException(&t, &v, &tb);
            Py_XDECREF(t);
            Py_XDECREF(tb);
            value = v;
            is_exc = 1;
        }
    }
    /* A descriptor the kernel opened that nobody receives (cancelled, engine closing) is
     * closed, never leaked. */
    int opened_fd = op->opened && !is_exc ? (int)op->done : -1;
    PyObject *keep = op->keep;
    op->keep = NULL;
    PyObject *bytes = op->bytes;
    op->bytes = NULL;
    Py_buffer view = op->view;
    op->view.obj = NULL;
    if (was_pinned)
        e->pinned--;
    free(op->bounce);  /* posix_memalign()ed */
    op->bounce = NULL;
    if (op->direct_fd >= 0)
        kaio_direct_release(e, op);
    slot_free(e, idx);
    if (view.obj)
        PyBuffer_Release(&view);
    Py_XDECREF(bytes);
    Py_XDECREF(keep);
    int delivered = 0;
    if (value) {
        delivered = e->collecting ? future_resolve_collect(e, fut, value, is_exc)
                                  : future_resolve(fut, value, is_exc);
        Py_DECREF(value);
    }
    if (opened_fd >= 0 && !delivered)
        close(opened_fd);
    Py_XDECREF(fut);
    if (settled) {  /* the buffers are released above: the waiter's memory is its own again */
        if (!e->drop_results)
            e->collecting ? future_resolve_collect(e, settled, Py_None, 0)
                          : future_resolve(settled, Py_None, 0);
        Py_DECREF(settled);
    }
}

/* Whether a piece's answer may be followed by another piece (a retry or the rest). Not once the
 * kernel was asked to cancel the operation — a close's drain cancels reads, as a pipe read
 * might wait forever — except for a bounded read of a regular file in pieces, which a close
 * would otherwise cut to a short result that reads as the end of the file: a Linux AIO read on
 * its O_DIRECT detour, or one whose RWF_NOWAIT piece found only part of its range cached. And
 * never when nobody will receive the result (the loop is gone): the rest is not read. */
static int op_may_go_on(const engine_t *e, const op_t *op)
{
    if (!op->cancel_sent)
        return 1;
    if (e->drop_results)
        return 0;
    if (op->detour)
        return 1;
    struct stat st;
    return op->nowait && fstat(op->fd, &st) == 0 && S_ISREG(st.st_mode);
}

void engine_complete(engine_t *e, uint32_t idx, int64_t res)
{
    op_t *op = engine_slot(e, idx);
    e->in_kernel--;
    op->state = OPS_WAITING;  /* between pieces: owned by the engine, not the kernel */
    e->st.completed++;
    int f = fault_hit(FP_COMPLETION);
    if (f)
        res = f;
    else if (res > 1 && (op->kind <= OP_WRITE) && fault_hit(FP_SHORT))
        res /= 2;
    if (res >= 0 && op->kind == OP_OPENAT)
        inline_forget_fd(e, (int)res);
    else if (op->kind == OP_CLOSE)
        inline_forget_fd(e, op->fd);  /* not at submission: until now the number was the old file */
    if (op->abandoned || e->closed == 1) {
        if (res >= 0 && op->kind == OP_OPENAT) {
            op->done = (uint64_t)res;
            op->opened = 1;  /* closed by op_finish: nobody is waiting for it */
        }
        op_finish(e, idx, res < 0 ? (int)-res : 0);
        return;
    }
    /* Never again for close: Linux has released the descriptor even when it says EINTR.
     * An -ECANCELED nobody asked for is io-wq giving up before running the request (seen
     * under a signal storm: creating a worker thread fails while a signal is pending, see
     * docs/reliability.md): it never ran, so it is submitted again, like -EINTR. */
    if ((res == -EINTR || res == -EAGAIN || res == -ECANCELED) && op->retries < MAX_RETRIES &&
        op_may_go_on(e, op) && op->kind != OP_CLOSE) {
        op->retries++;
        e->st.retries++;
        engine_enqueue(e, idx, engine_sends_early(e, op->kind));
        return;
    }
    if (res < 0) {
        op_finish(e, idx, (int)-res);
        return;
    }
    op->retries = 0;
    op->done += (uint64_t)res;
    op->opened = op->kind == OP_OPENAT;
    int more = 0;
    switch (op->kind) {
    case OP_READ:
    case OP_READINTO:
        /* A full piece of a split read, or a short RWF_NOWAIT piece (the rest may merely be
         * uncached), continues; any other short read is the end of the file. */
        more = res > 0 && op->done < op->len && ((uint64_t)res == op->cur || op->nowait);
        break;
    case OP_WRITE:
        more = res > 0 && op->done < op->len;
        break;
    }
    if (more && op_may_go_on(e, op)) {
        /* Every further piece of an operation larger than KERNEL_RW_MAX is a split, also
         * after a short piece (a buffered write under memory pressure may stop early), and so
         * is the next O_DIRECT piece of a Linux AIO read on its detour (kaio.c, DETOUR_MAX);
         * any other continuation is a retry of a short transfer. */
        if (op->len > KERNEL_RW_MAX || op->detour)
            e->st.splits++;
        else
            e->st.retries++;
        engine_enqueue(e, idx, engine_sends_early(e, op->kind));
        return;
    }
    op_finish(e, idx, 0);
}

void engine_fail_unaccepted(engine_t *e, uint32_t idx, int err)
{
    e->in_kernel--;
    engine_slot(e, idx)->state = OPS_WAITING;
    op_finish(e, idx, err);
}

/* ---------------------------------------------------------------- starting operations */

static int engine_open(engine_t *e)
{
    if (e->closed || e->close_pending) {
        PyErr_SetString(PyExc_RuntimeError, "aionative: engine is closed");
        return 0;
    }
    return 1;
}

int engine_usable(engine_t *e)
{
    if (e->fork_gen != engine_fork_generation) {
        PyErr_SetString(PyExc_RuntimeError,
                        "aionative: this engine belongs to the parent process (fork); "
                        "use a new event loop in the child");
        return 0;
    }
    if (!engine_open(e))
        return 0;
    if (e->owner_thread != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "aionative: an engine is used only from its event loop's thread");
        return 0;
    }
    return 1;
}

/* Common tail of every operation: a future, a slot in the queue, a flush scheduled. On error
 * the slot is released (nothing reached the kernel). Returns a new reference to the future.
 * A read sent inside its call (engine_enqueue) leaves the flush nothing to do: none is
 * scheduled for it, which spares the loop an iteration (at depth 1 every read: the loop would
 * poll once more before waiting). What the send leaves behind gets one all the same: a
 * submission refused or taken in part (engine_pump), a read that must wait for room. */
static PyObject *engine_start(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    if (op->bytes || op->view.obj || op->keep)
        e->pinned++;
    PyObject *fut = engine_new_future(e);
    /* Creating the future and scheduling the flush run Python code, which may close us
     * (the thread cannot have changed: only the closed flags need a second look), and a
     * closed engine's ring is unmapped: whether the read goes early is asked once it is
     * known to be open. */
    int ok = fut && engine_open(e);
    /* A large write starts now (see WRITE_ASYNC_MIN): the caller's task may compute next. */
    int early = ok && (engine_sends_early(e, op->kind) ||
                       (op->kind == OP_WRITE && op->len >= WRITE_ASYNC_MIN && !e->busy &&
                        !e->waiting));
    if (ok && !early)
        ok = engine_schedule_flush(e) == 0 && engine_open(e);
    if (!ok) {
        Py_XDECREF(fut);
        op_finish(e, idx, 0);
        return NULL;
    }
    Py_INCREF(fut);
    op->future = fut;
    if (engine_enqueue(e, idx, early) && early && engine_schedule_flush(e) < 0)
        PyErr_WriteUnraisable((PyObject *)e);  /* queued already: reported, as engine_pump does */
    return fut;
}

static int parse_fd(PyObject *o, int *fd)
{
    int overflow;  /* os.* convert a descriptor to a C int: the same error, word for word */
    long v = PyLong_AsLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v > INT_MAX || v < INT_MIN) {
        PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to C int");
        return -1;
    }
    *fd = (int)v;
    return 0;
}

static int parse_offset(PyObject *o, int64_t *off)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0) {  /* io_uring would read -1 as "the current position"; pread(2) says EINVAL */
        errno = EINVAL;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    *off = v;
    return 0;
}

static int check_nargs(const char *name, Py_ssize_t n, Py_ssize_t want)
{
    if (n == want)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name, want, n);
    return -1;
}

/* ---------------------------------------------------------------- reads and writes */

/* Three arguments (fd, a size or buffer, an offset), or with `with_retry` an optional fourth:
 * `retry`, true when the call comes back after the spent budget refused it (see
 * inline_budget_ok). 0, or -1 with the error set. */
static int parse_nargs(const char *name, PyObject *const *args, Py_ssize_t n, int with_retry,
                       int *retry)
{
    if (!with_retry)
        return check_nargs(name, n, 3);
    if (n != 3 && n != 4) {
        PyErr_Format(PyExc_TypeError, "%s() takes 3 or 4 arguments (%zd given)", name, n);
        return -1;
    }
    if (n == 4 && (*retry = PyObject_IsTrue(args[3])) < 0)
        return -1;
    return 0;
}

static Py_ssize_t parse_size(PyObject *o)
{
    PyObject *size_obj = PyNumber_Index(o);
    if (!size_obj)
        return -1;
    Py_ssize_t size = PyLong_AsSsize_t(size_obj);
    Py_DECREF(size_obj);
    return size;
}

/* pread and read: `fast` tries the inline path first and then returns the bytes themselves. */
/* fast: PREAD_QUEUE (the kernel queue only), PREAD_INLINE (inline when the page cache holds
 * the data, else the queue), PREAD_PARK (as PREAD_INLINE, but a read the spent budget or the
 * run's slice refused is done inline all the same and its caller parks: engine_read_or_park),
 * PREAD_INLINE_ONLY (inline or not at all: False when the budget is spent, None when the data
 * is not all cached or the read may not run inline). */
enum { PREAD_QUEUE, PREAD_INLINE, PREAD_PARK, PREAD_INLINE_ONLY };

/* inline_allowed, and for PREAD_PARK: refused by the spent budget, or by the end of the run's
 * slice while callers are parked, the read is allowed all the same and *park set (2 when the
 * slice refused it). */
static int read_allowed(engine_t *e, int fd, int retry, int fast, int *park)
{
    if (fast != PREAD_PARK)
        return inline_allowed(e, fd, retry);
    int sliced = e->park_len && e->slice_used >= PARK_SLICE;
    int ok = sliced ? 0 : inline_allowed(e, fd, 0);
    if (ok || !(sliced || (e->budget_ns && e->budget_spent)))
        return ok;
    *park = 1 + sliced;
    return inline_allowed(e, fd, INLINE_NOW);
}

/* A PREAD_INLINE_ONLY read that did not go inline: refused by the spent budget (False: the
 * caller may yield and retry), or one that must go to the kernel queue whatever the budget
 * says (None), a direct read among them: it never goes inline, so a turn would only delay it. */
static int inline_refused_by_budget(engine_t *e, int fd, int ok)
{
    return ok == 0 && e->budget_ns && e->budget_spent && !inline_fd_refuses(e, fd);
}

/* A read done inline (`res`, a new reference or NULL): the result itself, or for a caller that
 * parks (read_allowed) the future a later flush resolves with it. */
static PyObject *read_done(engine_t *e, PyObject *res, int fast, int park)
{
    if (!park) {
        e->slice_used += fast == PREAD_PARK;
        return res;
    }
    PyObject *fut = res ? engine_park(e, res, park == 2) : NULL;
    Py_XDECREF(res);
    return fut;
}

static PyObject *engine_pread(engine_t *e, PyObject *const *args, Py_ssize_t n,
                              const char *name, int fast)
{
    int fd, retry = 0;
    int64_t off;
    if (parse_nargs(name, args, n, fast == PREAD_INLINE_ONLY, &retry) < 0 ||
        parse_fd(args[0], &fd) < 0)
        return NULL;
    Py_ssize_t size = parse_size(args[1]);
    if ((size == -1 && PyErr_Occurred()) || parse_offset(args[2], &off) < 0)
        return NULL;
    if (size < 0) {  /* after every conversion, as os.pread checks it */
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    /* Checked after the conversions: __index__ is Python code. */
    if (!engine_usable(e))
        return NULL;
    if (fast && size == 0)
        return inline_empty_read(e, fd, off) < 0 ? NULL : PyBytes_FromStringAndSize(NULL, 0);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (!bytes)
        return NULL;
    uint64_t got = 0;
    int park = 0;
    int ok = fast && size <= INLINE_MAX ? read_allowed(e, fd, retry, fast, &park) : 0;
    if (ok > 0 &&
        inline_read(e, fd, PyBytes_AS_STRING(bytes), (uint64_t)size, off, -1, &got)) {
        if ((Py_ssize_t)got != size && _PyBytes_Resize(&bytes, (Py_ssize_t)got) < 0)
            return NULL;
        return read_done(e, bytes, fast, park);
    }
    if (fast == PREAD_INLINE_ONLY) {
        Py_DECREF(bytes);
        if (ok < 0)
            return NULL;
        return Py_NewRef(inline_refused_by_budget(e, fd, ok) ? Py_False : Py_None);
    }
    uint32_t idx = ok < 0 ? OP_NONE : slot_alloc(e);
    if (idx == OP_NONE) {
        Py_DECREF(bytes);
        return NULL;
    }
    op_t *op = engine_slot(e, idx);
    op->kind = OP_READ;
    op->fd = fd;
    op->bytes = bytes;
    op->buf = PyBytes_AS_STRING(bytes);
    op->len = (uint64_t)size;
    op->done = got;
    op->off = off;
    return engine_start(e, idx);
}

PyObject *Engine_pread(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_pread(e, args, n, "pread", PREAD_QUEUE);
}

/* A bytes object with `len` bytes (one DIO_ALIGN unit at least) of page-aligned room inside it,
 * at *aligned: one unit larger than that, so the room can start on a page boundary. NULL with
 * MemoryError for a length no allocation could hold. */
static PyObject *aligned_bytes(uint64_t len, char **aligned)
{
    const uint64_t unit = DIO_ALIGN;
    if (len < unit)
        len = unit;
    if (len > (uint64_t)PY_SSIZE_T_MAX - unit)
        return PyErr_NoMemory();
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(len + unit));
    if (bytes)
        *aligned = (char *)(((uintptr_t)PyBytes_AS_STRING(bytes) + unit - 1) &
                            ~(uintptr_t)(unit - 1));
    return bytes;
}

/* The slot of pread_direct or pwrite_direct: an operation on `fd` through `len` bytes at `buf`
 * inside `bytes` (taken over: held by the slot until its last completion is reaped), at
 * `off`. OP_NONE, with the error set and `bytes` released, if no slot could be had. */
static uint32_t aligned_slot(engine_t *e, int kind, int fd, PyObject *bytes, char *buf,
                             uint64_t len, int64_t off)
{
    uint32_t idx = slot_alloc(e);
    if (idx == OP_NONE) {
        Py_DECREF(bytes);
        return OP_NONE;
    }
    op_t *op = engine_slot(e, idx);
    op->kind = (uint8_t)kind;
    op->fd = fd;
    op->bytes = bytes;
    op->buf = buf;
    op->len = len;
    op->off = off;
    return idx;
}

/* An O_DIRECT read that asks the caller for no aligned memory: the kernel reads the
 * DIO_ALIGN-aligned range around [offset, offset + size) (one unit at least, so an empty read
 * still asks the file) into a bytes object the operation owns (aligned_bytes), and the result
 * is the part asked for, copied out when the completion is reaped. For files that have
 * positions (regular files, block devices): on a pipe the block read would consume data past
 * what was asked for (the file layer sends streams elsewhere). The file layer's direct
 * reads (open(..., direct=True)) mapped a fresh buffer a read instead (mmap, the faults of
 * pinning it, munmap): several times this path's CPU for a 4 KiB read
 * (`python -m bench --workloads W3`). */
static PyObject *Engine_pread_direct(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    int fd;
    int64_t off;
    if (check_nargs("pread_direct", n, 3) < 0 || parse_fd(args[0], &fd) < 0)
        return NULL;
    Py_ssize_t size = parse_size(args[1]);
    if ((size == -1 && PyErr_Occurred()) || parse_offset(args[2], &off) < 0)
        return NULL;
    if (size < 0 || off < 0) {
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (!engine_usable(e))
        return NULL;
    const uint64_t unit = DIO_ALIGN;
    uint64_t start = (uint64_t)off & ~(unit - 1);
    uint64_t end = (uint64_t)off + (uint64_t)size;  /* both < 2**63: no overflow */
    uint64_t len = ((end + unit - 1) & ~(unit - 1)) - start;
    if (len < unit)
        len = unit;
    char *buf = NULL;
    PyObject *bytes = aligned_bytes(len, &buf);
    uint32_t idx = bytes ? aligned_slot(e, OP_READ, fd, bytes, buf, len, (int64_t)start)
                         : OP_NONE;
    if (idx == OP_NONE)
        return NULL;
    op_t *op = engine_slot(e, idx);
    op->trim = 1;
    op->skip = (uint32_t)((uint64_t)off - start);
    op->want = (uint64_t)size;
    return engine_start(e, idx);
}

/* An O_DIRECT write of `data` from aligned memory the operation owns: a copy of it
 * (aligned_bytes), so the caller's object needs no alignment and is not held. The offset and
 * the length must suit the descriptor (whole blocks: the kernel answers EINVAL otherwise); the
 * file layer sends only such writes here, and reads and rewrites partial blocks itself. */
static PyObject *Engine_pwrite_direct(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    int fd;
    int64_t off;
    if (check_nargs("pwrite_direct", n, 3) < 0 || parse_fd(args[0], &fd) < 0 ||
        parse_offset(args[2], &off) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (off < 0) {  /* io_uring would read -1 as "the file position" */
        PyBuffer_Release(&view);
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    /* Checked after the conversions: __index__ and __buffer__ may be Python code. */
    if (!engine_usable(e)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *buf = NULL;
    uint64_t len = (uint64_t)view.len;
    PyObject *bytes = aligned_bytes(len, &buf);
    if (bytes && len)
        memcpy(buf, view.buf, (size_t)len);
    PyBuffer_Release(&view);
    uint32_t idx = bytes ? aligned_slot(e, OP_WRITE, fd, bytes, buf, len, off) : OP_NONE;
    return idx == OP_NONE ? NULL : engine_start(e, idx);
}

PyObject *Engine_read(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_pread(e, args, n, "read", PREAD_INLINE);
}

PyObject *Engine_read_inline(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_pread(e, args, n, "read_inline", PREAD_INLINE_ONLY);
}

/* preadinto, readinto, pwrite and write: `fast` tries the inline path first and then returns
 * the count itself. A write may also return False: the iteration's budget is spent (yield,
 * then call again with retry=True). A read's `fast` is one of the PREAD_ modes, as pread's. */
static PyObject *engine_buffer_op(engine_t *e, PyObject *const *args, Py_ssize_t n,
                                  const char *name, int kind, int fast)
{
    int fd, retry = 0;
    int64_t off;
    int with_retry = kind == OP_WRITE ? fast : fast == PREAD_INLINE_ONLY;
    if (parse_nargs(name, args, n, with_retry, &retry) < 0 ||
        parse_fd(args[0], &fd) < 0 || parse_offset(args[2], &off) < 0)
        return NULL;
    Py_buffer view;
    int flags = kind == OP_READINTO ? PyBUF_WRITABLE : PyBUF_SIMPLE;
    if (PyObject_GetBuffer(args[1], &view, flags) < 0)
        return NULL;
    /* Checked after the conversions: __index__ and __buffer__ may be Python code. */
    if (!engine_usable(e)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (fast && view.len == 0 && kind == OP_READINTO) {
        /* os.preadv's empty read, not os.pread's (0 on a directory): see csrc/inline.c. */
        PyBuffer_Release(&view);
        return inline_empty_readinto(e, fd, off) < 0 ? NULL : PyLong_FromLong(0);
    }
    uint64_t got = 0;
    int ok = 0, park = 0;
    uint64_t most = kind == OP_WRITE ? WRITE_INLINE_MAX : INLINE_MAX;
    if (fast && view.len > 0 && (uint64_t)view.len <= most)
        ok = kind == OP_WRITE ? inline_write_allowed(e, fd, retry)
                              : read_allowed(e, fd, retry, fast, &park);
    if (ok == 1 && (kind == OP_WRITE
                   ? inline_write(e, fd, view.buf, (uint64_t)view.len, off, &got)
                   : inline_read(e, fd, view.buf, (uint64_t)view.len, off, -1, &got))) {
        PyBuffer_Release(&view);
        return read_done(e, PyLong_FromUnsignedLongLong(got), fast, park);
    }
    if (ok == WRITE_LATER && kind == OP_WRITE) {
        PyBuffer_Release(&view);
        Py_RETURN_FALSE;
    }
    if (kind == OP_READINTO && fast == PREAD_INLINE_ONLY) {  /* as read_inline's answers */
        PyBuffer_Release(&view);
        if (ok < 0)
            return NULL;
        return Py_NewRef(inline_refused_by_budget(e, fd, ok) ? Py_False : Py_None);
    }
    uint32_t idx = ok < 0 ? OP_NONE : slot_alloc(e);
    if (idx == OP_NONE) {
        PyBuffer_Release(&view);
        return NULL;
    }
    op_t *op = engine_slot(e, idx);
    op->view = view;
    op->kind = (uint8_t)kind;
    op->fd = fd;
    op->buf = op->view.buf;
    op->len = (uint64_t)op->view.len;
    op->done = got;
    op->off = off;
    return engine_start(e, idx);
}

PyObject *Engine_preadinto(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "preadinto", OP_READINTO, PREAD_QUEUE);
}

PyObject *Engine_readinto(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "readinto", OP_READINTO, PREAD_INLINE);
}

PyObject *Engine_readinto_inline(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "readinto_inline", OP_READINTO, PREAD_INLINE_ONLY);
}

PyObject *engine_read_or_park(engine_t *e, PyObject *const *args, int into)
{
    return into ? engine_buffer_op(e, args, 3, "readinto", OP_READINTO, PREAD_PARK)
                : engine_pread(e, args, 3, "read", PREAD_PARK);
}

static PyObject *Engine_pwrite(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "pwrite", OP_WRITE, 0);
}

PyObject *Engine_write(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "write", OP_WRITE, 1);
}

static PyObject *engine_sync_op(engine_t *e, PyObject *arg, int kind)
{
    int fd;
    if (parse_fd(arg, &fd) < 0 || !engine_usable(e))
        return NULL;
    uint32_t idx = slot_alloc(e);
    if (idx == OP_NONE)
        return NULL;
    op_t *op = engine_slot(e, idx);
    op->kind = (uint8_t)kind;
    op->fd = fd;
    return engine_start(e, idx);
}

static PyObject *Engine_fsync(engine_t *e, PyObject *arg)
{
    return engine_sync_op(e, arg, OP_FSYNC);
}

static PyObject *Engine_fdatasync(engine_t *e, PyObject *arg)
{
    return engine_sync_op(e, arg, OP_FDATASYNC);
}

/* ---------------------------------------------------------------- path operations */

static int path_arg(PyObject *o, const char *what)
{
    if (o == Py_None)
        return 0;
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes (os.fsencode()d)", what);
        return -1;
    }
    if ((size_t)PyBytes_GET_SIZE(o) != strlen(PyBytes_AS_STRING(o))) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        return -1;
    }
    return 0;
}

/* A slot for a path or descriptor operation the kernel runs (io_uring), or NULL with
 * NotImplementedError where this engine cannot (the caller then uses a thread). */
static op_t *path_op_new(engine_t *e, int kind, uint32_t *idx, PyObject *path, PyObject *path2,
                         PyObject *filename, PyObject *filename2)
{
    if (path_arg(path, "path") < 0 || path_arg(path2, "path2") < 0 || !engine_usable(e))
        return NULL;
    if (!engine_supports(e, kind)) {
        PyErr_SetString(PyExc_NotImplementedError, "operation not supported by this engine");
        return NULL;
    }
    PyObject *keep = PyTuple_Pack(4, path, path2, filename, filename2);
    if (!keep)
        return NULL;
    *idx = slot_alloc(e);
    if (*idx == OP_NONE) {
        Py_DECREF(keep);
        return NULL;
    }
    op_t *op = engine_slot(e, *idx);
    op->kind = (uint8_t)kind;
    op->keep = keep;
    op->buf = path != Py_None ? PyBytes_AS_STRING(path) : NULL;
    op->buf2 = path2 != Py_None ? PyBytes_AS_STRING(path2) : NULL;
    return op;
}

/* openat(dirfd, path, flags, mode, filename) -> Future[int] */
static PyObject *Engine_openat(engine_t *e, PyObject *args)
{
    int dirfd, flags;
    unsigned mode;
    PyObject *path, *filename;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "iOiIO:openat", &dirfd, &path, &flags, &mode, &filename))
        return NULL;
    op_t *op = path_op_new(e, OP_OPENAT, &idx, path, Py_None, filename, Py_None);
    if (!op)
        return NULL;
    op->fd = dirfd;
    op->oflags = flags;
    op->mode = mode;
    return engine_start(e, idx);
}

/* statx(dirfd, path, flags, mask, filename) -> Future[tuple] */
static PyObject *Engine_statx(engine_t *e, PyObject *args)
{
    int dirfd, flags;
    unsigned mask;
    PyObject *path, *filename;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "iOiIO:statx", &dirfd, &path, &flags, &mask, &filename))
        return NULL;
    struct statx *buf = calloc(1, sizeof *buf);
    if (!buf)
        return PyErr_NoMemory();
    op_t *op = path_op_new(e, OP_STATX, &idx, path, Py_None, filename, Py_None);
    if (!op) {
        free(buf);
        return NULL;
    }
    op->fd = dirfd;
    op->oflags = flags;
    op->mode = mask;
    op->bounce = buf;  /* the kernel writes it; freed with the slot */
    return engine_start(e, idx);
}

/* unlinkat(dirfd, path, flags, filename) / mkdirat(dirfd, path, mode, filename) */
static PyObject *engine_one_path(engine_t *e, PyObject *args, int kind, const char *fmt)
{
    int dirfd, arg;
    PyObject *path, *filename;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, fmt, &dirfd, &path, &arg, &filename))
        return NULL;
    op_t *op = path_op_new(e, kind, &idx, path, Py_None, filename, Py_None);
    if (!op)
        return NULL;
    op->fd = dirfd;
    op->oflags = arg;
    op->mode = (uint32_t)arg;
    return engine_start(e, idx);
}

static PyObject *Engine_unlinkat(engine_t *e, PyObject *args)
{
    return engine_one_path(e, args, OP_UNLINKAT, "iOiO:unlinkat");
}

static PyObject *Engine_mkdirat(engine_t *e, PyObject *args)
{
    return engine_one_path(e, args, OP_MKDIRAT, "iOiO:mkdirat");
}

/* renameat / linkat(olddirfd, oldpath, newdirfd, newpath, flags, filename, filename2) */
static PyObject *engine_two_paths(engine_t *e, PyObject *args, int kind, const char *fmt)
{
    int olddirfd, newdirfd, flags;
    PyObject *oldpath, *newpath, *filename, *filename2;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, fmt, &olddirfd, &oldpath, &newdirfd, &newpath, &flags,
                          &filename, &filename2))
        return NULL;
    op_t *op = path_op_new(e, kind, &idx, oldpath, newpath, filename, filename2);
    if (!op)
        return NULL;
    op->fd = olddirfd;
    op->fd2 = newdirfd;
    op->oflags = flags;
    return engine_start(e, idx);
}

static PyObject *Engine_renameat(engine_t *e, PyObject *args)
{
    return engine_two_paths(e, args, OP_RENAMEAT, "iOiOiOO:renameat");
}

static PyObject *Engine_linkat(engine_t *e, PyObject *args)
{
    return engine_two_paths(e, args, OP_LINKAT, "iOiOiOO:linkat");
}

/* symlinkat(target, newdirfd, linkpath, filename, filename2) */
static PyObject *Engine_symlinkat(engine_t *e, PyObject *args)
{
    int newdirfd;
    PyObject *target, *linkpath, *filename, *filename2;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "OiOOO:symlinkat", &target, &newdirfd, &linkpath, &filename,
                          &filename2))
        return NULL;
    op_t *op = path_op_new(e, OP_SYMLINKAT, &idx, target, linkpath, filename, filename2);
    if (!op)
        return NULL;
    op->fd2 = newdirfd;
    return engine_start(e, idx);
}

/* close(fd) -> Future[None] */
static PyObject *Engine_close_fd(engine_t *e, PyObject *arg)
{
    int fd;
    uint32_t idx;
    if (parse_fd(arg, &fd) < 0)
        return NULL;
    op_t *op = path_op_new(e, OP_CLOSE, &idx, Py_None, Py_None, Py_None, Py_None);
    if (!op)
        return NULL;
    op->fd = fd;
    return engine_start(e, idx);
}

/* read_file(dirfd, path: bytes[, retry]) -> bytes | int | False | None (see inline_read_file) */
static PyObject *Engine_read_file(engine_t *e, PyObject *args)
{
    int dirfd, retry = 0;
    const char *path;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "iy#|p:read_file", &dirfd, &path, &len, &retry) ||
        !engine_usable(e))
        return NULL;
    if ((size_t)len != strlen(path))
        Py_RETURN_NONE;  /* an embedded NUL: the queue's openat raises what os.open does */
    return inline_read_file(e, dirfd, path, retry);
}

/* open_cached(dirfd, path: bytes, flags[, retry]) -> int | False | None (see inline_open) */
static PyObject *Engine_open_cached(engine_t *e, PyObject *args)
{
    int dirfd, flags, retry = 0;
    const char *path;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "iy#i|p:open_cached", &dirfd, &path, &len, &flags, &retry) ||
        !engine_usable(e))
        return NULL;
    if ((size_t)len != strlen(path))
        Py_RETURN_NONE;  /* an embedded NUL: the queue's openat raises what os.open does */
    return inline_open(e, dirfd, path, flags, retry);
}

/* close_cached(fd) -> bool (see inline_close) */
static PyObject *Engine_close_cached(engine_t *e, PyObject *arg)
{
    int fd;
    if (parse_fd(arg, &fd) < 0 || !engine_usable(e))
        return NULL;
    int r = inline_close(e, fd, 0);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* forget_fd(fd) -> None: the caller changed what `fd` is (fcntl F_SETFL) behind the engine's
 * back; what the inline path learned of it this iteration is void (see inline_forget_fd). */
static PyObject *Engine_forget_fd(engine_t *e, PyObject *arg)
{
    int fd;
    if (parse_fd(arg, &fd) < 0)
        return NULL;
    inline_forget_fd(e, fd);
    Py_RETURN_NONE;
}

/* fallocate(fd, mode, offset, length) / ftruncate(fd, length) -> Future[None] */
static PyObject *Engine_fallocate(engine_t *e, PyObject *args)
{
    int fd;
    unsigned mode;
    long long offset, length;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "iILL:fallocate", &fd, &mode, &offset, &length))
        return NULL;
    if (offset < 0 || length <= 0) {
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    op_t *op = path_op_new(e, OP_FALLOCATE, &idx, Py_None, Py_None, Py_None, Py_None);
    if (!op)
        return NULL;
    op->fd = fd;
    op->mode = mode;
    op->off = offset;
    op->len = (uint64_t)length;
    return engine_start(e, idx);
}

static PyObject *Engine_ftruncate(engine_t *e, PyObject *args)
{
    int fd;
    long long length;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "iL:ftruncate", &fd, &length))
        return NULL;
    if (length < 0) {
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    op_t *op = path_op_new(e, OP_FTRUNCATE, &idx, Py_None, Py_None, Py_None, Py_None);
    if (!op)
        return NULL;
    op->fd = fd;
    op->off = length;
    return engine_start(e, idx);
}

static const struct { const char *name; int kind; } op_names[] = {
    {"pread", OP_READ}, {"pwrite", OP_WRITE}, {"fsync", OP_FSYNC},
    {"openat", OP_OPENAT}, {"close", OP_CLOSE}, {"statx", OP_STATX},
    {"unlinkat", OP_UNLINKAT}, {"renameat", OP_RENAMEAT}, {"mkdirat", OP_MKDIRAT},
    {"symlinkat", OP_SYMLINKAT}, {"linkat", OP_LINKAT}, {"fallocate", OP_FALLOCATE},
    {"ftruncate", OP_FTRUNCATE},
};

/* supports(name) -> bool: whether the kernel runs this operation for this engine */
static PyObject *Engine_supports(engine_t *e, PyObject *name)
{
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return NULL;
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
        if (strcmp(s, op_names[i].name) == 0)
            return PyBool_FromLong(engine_supports(e, op_names[i].kind));
    return PyErr_Format(PyExc_ValueError, "unknown operation %R", name);
}

/* ---------------------------------------------------------------- cancellation */

static PyObject *engine_flush(engine_t *e, int loop);

static uint32_t engine_find(engine_t *e, PyObject *fut)
{
    for (uint32_t b = 0; b < e->nblocks; b++)
        for (uint32_t i = 0; i < OP_BLOCK; i++)
            if (e->blocks[b][i].state != OPS_FREE && e->blocks[b][i].future == fut)
                return b * OP_BLOCK + i;
    return OP_NONE;
}

static void wait_remove(engine_t *e, uint32_t idx)
{
    uint32_t prev = OP_NONE;
    for (uint32_t cur = e->wait_head; cur != OP_NONE; prev = cur, cur = engine_slot(e, cur)->next) {
        if (cur != idx)
            continue;
        uint32_t next = engine_slot(e, cur)->next;
        if (prev == OP_NONE)
            e->wait_head = next;
        else
            engine_slot(e, prev)->next = next;
        if (e->wait_tail == idx)
            e->wait_tail = prev;
        e->waiting--;
        return;
    }
}

/* Abandon an operation: its awaiting task gave up. A queued one ends now; one with the kernel
 * is asked to stop and ends when its completion is reaped (its memory stays pinned till then). */
static void engine_abandon(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    if (op->abandoned)
        return;
    op->abandoned = 1;
    e->st.cancels++;
    if (op->state == OPS_WAITING) {
        wait_remove(e, idx);
        op_finish(e, idx, ECANCELED);
    } else if (op->state == OPS_KERNEL && !op->cancel_sent) {
        op->cancel_sent = 1;
        /* A piece the kernel has not taken yet names its descriptor by number, and the caller
         * may close that number as soon as this returns: it is taken back, never submitted. */
        if (e->ops->withdraw(e, idx)) {
            e->st.withdrawn++;
            engine_fail_unaccepted(e, idx, ECANCELED);
        } else {
            e->ops->cancel(e, idx);
        }
    }
}

/* The slot of `fut`'s operation, OP_NONE if this engine holds none (closed, or a forked
 * child's copy of its parent's). */
static uint32_t engine_op_of(engine_t *e, PyObject *fut)
{
    if (e->fork_gen != engine_fork_generation || e->closed)
        return OP_NONE;
    return engine_find(e, fut);
}

/* Abandon slot idx's operation; the cancel request goes out now, not with the iteration's
 * batch. 0, or -1 with the error set. */
static int engine_cancel_slot(engine_t *e, uint32_t idx)
{
    engine_abandon(e, idx);
    if (e->in_kernel) {
        PyObject *r = engine_flush(e, 0);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

PyObject *Engine_cancel(engine_t *e, PyObject *fut)
{
    uint32_t idx = engine_op_of(e, fut);
    if (idx == OP_NONE)
        Py_RETURN_FALSE;
    if (engine_cancel_slot(e, idx) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

/* cancel_wait(future) -> Future | None: cancel (abandon) the operation, and while the kernel
 * may still read or write its memory, a future resolved with None once it cannot: the
 * completion of a request that was already running (ASYNC_CANCEL answers -EALREADY for a read
 * the device is doing) has been reaped and the caller's buffer released. None when nothing
 * is left with the kernel (the operation had not been submitted, or is over). */
PyObject *Engine_cancel_wait(engine_t *e, PyObject *fut)
{
    uint32_t idx = engine_op_of(e, fut);
    if (idx == OP_NONE)
        Py_RETURN_NONE;
    if (engine_cancel_slot(e, idx) < 0)
        return NULL;
    op_t *op = engine_slot(e, idx);
    if (op->state == OPS_FREE || op->future != fut)  /* finished by its cancellation */
        Py_RETURN_NONE;
    if (op->settled) {
        PyObject *done = PyObject_CallMethod(op->settled, "done", NULL);
        if (!done)
            return NULL;
        int was_done = done == Py_True;
        Py_DECREF(done);
        if (!was_done)
            return Py_NewRef(op->settled);
        Py_CLEAR(op->settled);  /* its waiter was cancelled: a new one waits on */
    }
    op->settled = engine_new_future(e);
    return Py_XNewRef(op->settled);
}

/* turn_spent() -> bool: see inline_turn_spent. */
static PyObject *Engine_turn_spent(engine_t *e, PyObject *unused)
{
    if (e->closed || e->fork_gen != engine_fork_generation)
        Py_RETURN_FALSE;
    int spent = inline_turn_spent(e);
    if (spent < 0)
        return NULL;
    return PyBool_FromLong(spent);
}

/* ---------------------------------------------------------------- loop callbacks */

static void eventfd_clear(engine_t *e)
{
    uint64_t v;
    e->st.syscalls++;
    while (read(e->efd, &v, sizeof v) < 0 && errno == EINTR)
        ;
}

static int engine_do_close(engine_t *e);

/* Python code run by completions (finalizers, buffer releases) may ask to close the engine;
 * that waits until the outermost engine callback has returned. */
static PyObject *engine_leave(engine_t *e)
{
    if (--e->busy == 0 && e->close_pending) {
        e->close_pending = 0;
        if (engine_do_close(e) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static int engine_callback_ok(engine_t *e)
{
    if (e->fork_gen != engine_fork_generation || e->closed || e->close_pending)
        return 0;
    if (e->owner_thread != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "aionative: the engine's loop is running on another thread than the "
                        "one that created the engine");
        return -1;
    }
    return 1;
}

/* A piece a reap sent back to the kernel (the rest of a partly cached RWF_NOWAIT read, a
 * retry) names the caller's descriptor by number again. The kernel looked the number up
 * when the operation was submitted; once this call returns to the loop, the caller may close
 * it and open() may reuse it, and a piece sent after that would read another file into the
 * same result. So pieces that complete inside their submission (Linux AIO's RWF_NOWAIT
 * reads, a cached read) are reaped, and what they need next decided, before the callback
 * returns: reap and submit again while the last round prepared anything (`sent`: the
 * submission count before it), a few rounds at most. A piece that goes to a device is
 * reaped later, but Linux AIO's next piece then goes through the engine's own O_DIRECT
 * descriptor, found while the number was still the caller's. A read sent early from inside
 * its call (EARLY_SUBMIT, when deep) is settled there, before the call returns. Not covered:
 * the later pieces of an operation over KERNEL_RW_MAX, which name the number again after a
 * device's piece. */
#define SETTLE_ROUNDS 8

static void engine_settle(engine_t *e, uint64_t sent)
{
    for (int round = 0; round < SETTLE_ROUNDS && e->st.submitted != sent; round++) {
        sent = e->st.submitted;
        engine_reap(e, REAP_AFTER_SUBMIT);
        engine_pump(e);
    }
}

/* Submit what is prepared, reap what completed inside its submission, and settle that: a
 * flush, and a read sent early from inside its call. When the kernel has accepted nothing
 * since the last reap began and says nothing is pending, there is nothing a reap could find
 * that the eventfd will not announce: no reap (a read sent early leaves the iteration's flush
 * nothing to ask). What is left with the kernel then says whether the engine is deep: a read
 * answered inside the call (cached) leaves the device nothing of ours, and the next read
 * waits for the flush. (Left deep after an early read, a task reading cached data through
 * the queue got every future done on return and never yielded.) */
static void engine_send_settled(engine_t *e)
{
    engine_pump(e);
    if (e->st.batches != e->reaped_batches || (e->ops->pending && e->ops->pending(e))) {
        uint64_t sent = e->st.submitted;
        engine_reap(e, REAP_AFTER_SUBMIT);
        engine_pump(e);
        engine_settle(e, sent);
    }
    e->deep = e->in_kernel > 0;
}

/* loop.call_soon(fn, fut, context=ctx): how the future would have called a callback. */
static void wakeup_schedule(engine_t *e, PyObject *fn, PyObject *fut, PyObject *ctx)
{
    PyObject *loop = engine_loop(e);
    PyObject *args[4] = {loop, fn, fut, ctx};
    PyObject *h = loop ? PyObject_VectorcallMethod(g_str_call_soon, args, 3, g_kw_context)
                       : NULL;
    if (!h)
        PyErr_WriteUnraisable(fn);
    Py_XDECREF(h);
    Py_XDECREF(loop);
}

/* Schedule the callbacks of `wake` from future `i`'s callback `j` on (the exception set, if
 * any, is kept). */
static void wakeups_schedule_rest(engine_t *e, PyObject *wake, Py_ssize_t i, Py_ssize_t j)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    for (; i < PyList_GET_SIZE(wake); i++, j = 0) {
        PyObject *item = PyList_GET_ITEM(wake, i);
        PyObject *fut = PyTuple_GET_ITEM(item, 0), *cbs = PyTuple_GET_ITEM(item, 1);
        for (; j < PyList_GET_SIZE(cbs); j++) {
            PyObject *ent = PyList_GET_ITEM(cbs, j);
            wakeup_schedule(e, PyTuple_GET_ITEM(ent, 0), fut, PyTuple_GET_ITEM(ent, 1));
        }
    }
    PyErr_Restore(t, v, tb);
}

/* A callback raised (not SystemExit or KeyboardInterrupt): to the loop's exception handler,
 * in the words of asyncio's Handle._run (no "handle": there is none). -1, with the exception
 * set, if the handler raised SystemExit or KeyboardInterrupt, which propagate from there too. */
static int wakeup_report(engine_t *e, PyObject *fn, PyObject *fut)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb && v)
        PyException_SetTraceback(v, tb);
    PyObject *loop = engine_loop(e);
    PyObject *msg = PyUnicode_FromFormat("Exception in callback %R(%R)", fn, fut);
    if (!msg) {  /* a repr that raised */
        PyErr_Clear();
        msg = PyUnicode_FromString("Exception in callback");
    }
    PyObject *ctx = msg && v ? PyDict_New() : NULL;
    PyObject *r = NULL;
    if (ctx && loop && PyDict_SetItem(ctx, g_str_message, msg) == 0 &&
        PyDict_SetItem(ctx, g_str_exception, v) == 0)
        r = PyObject_CallMethodOneArg(loop, g_str_call_exception_handler, ctx);
    int rc = 0;
    if (!r && (PyErr_ExceptionMatches(PyExc_SystemExit) ||
               PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)))
        rc = -1;
    else if (!r)
        PyErr_WriteUnraisable(fn);
    Py_XDECREF(r);
    Py_XDECREF(ctx);
    Py_XDECREF(msg);
    Py_XDECREF(loop);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    return rc;
}

/* Call the done callbacks a loop callback of the engine took off the futures it resolved
 * (future_resolve_collect), as the loop would have: in order, each in its context, an
 * exception to the loop's exception handler. SystemExit and KeyboardInterrupt (from a
 * callback, or from the handler) propagate, as from any callback, once the callbacks not yet
 * called are scheduled (none is lost). */
static int engine_run_wakeups(engine_t *e, PyObject *wake)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(wake); i++) {
        PyObject *item = PyList_GET_ITEM(wake, i);
        PyObject *fut = PyTuple_GET_ITEM(item, 0), *cbs = PyTuple_GET_ITEM(item, 1);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(cbs); j++) {
            PyObject *ent = PyList_GET_ITEM(cbs, j);
            PyObject *fn = PyTuple_GET_ITEM(ent, 0), *ctx = PyTuple_GET_ITEM(ent, 1);
            if (PyContext_Enter(ctx) < 0) {  /* (the context is running: the loop's turn) */
                PyErr_Clear();
                wakeup_schedule(e, fn, fut, ctx);
                continue;
            }
            PyObject *r = PyObject_CallOneArg(fn, fut);
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            if (PyContext_Exit(ctx) < 0)
                PyErr_WriteUnraisable(ctx);
            PyErr_Restore(t, v, tb);
            if (r) {
                Py_DECREF(r);
            } else if (PyErr_ExceptionMatches(PyExc_SystemExit) ||
                       PyErr_ExceptionMatches(PyExc_KeyboardInterrupt) ||
                       wakeup_report(e, fn, fut) < 0) {
                wakeups_schedule_rest(e, wake, i, j + 1);
                return -1;
            }
        }
    }
    return 0;
}

/* Start collecting the done callbacks of the futures a loop callback of the engine resolves
 * (future_resolve_collect); 1 if this call does (a reap's Python code may call one from
 * inside another: the outer one runs what both collect). */
static int engine_collect(engine_t *e)
{
    int collect = !e->collecting;
    e->collecting = 1;
    return collect;
}

/* engine_leave for a loop callback that collected (`collect`: engine_collect's answer), then
 * the callbacks collected called (engine_run_wakeups), or scheduled if the leave failed. */
static PyObject *engine_leave_waking(engine_t *e, int collect)
{
    PyObject *wake = NULL;
    if (collect) {
        e->collecting = 0;
        wake = e->wake;
        e->wake = NULL;
    }
    PyObject *r = engine_leave(e);
    if (wake) {
        e->st.woken += (uint64_t)PyList_GET_SIZE(wake);
        if (!r)
            wakeups_schedule_rest(e, wake, 0, 0);
        else if (engine_run_wakeups(e, wake) < 0)
            Py_CLEAR(r);
        Py_DECREF(wake);
    }
    return r;
}

static PyObject *Engine_on_ready(engine_t *e, PyObject *unused)
{
    int ok = engine_callback_ok(e);
    if (ok <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_None);
    uint64_t sent = e->st.submitted;
    e->busy++;
    e->st.wakeups++;
    int collect = engine_collect(e);
    inline_new_iteration(e);  /* the loop has polled */
    if (e->ops->pending) {
        /* io_uring: running completion work posts completions, which signals the eventfd
         * again (DEFER_TASKRUN: once for the work, once for its completions). Cleared after
         * the reap, that second signal makes no second wake-up for nothing; a completion
         * that came in between is still pending() (the kernel marks it before signalling). */
        engine_reap(e, 0);
        eventfd_clear(e);
        if (e->ops->pending(e))
            engine_reap(e, 0);
    } else {
        eventfd_clear(e);  /* Linux AIO: a signal per completion, the ring read by io_getevents */
        engine_reap(e, 0);
    }
    engine_pump(e);
    engine_settle(e, sent);
    return engine_leave_waking(e, collect);
}

/* The iteration's flush (`loop`: run by the loop as the callback engine_schedule_flush
 * scheduled, which calls the done callbacks of what it resolves itself, as Engine_on_ready
 * does; else called from code a task runs, where no other task may run). */
static PyObject *engine_flush(engine_t *e, int loop)
{
    e->flush_scheduled = 0;
    /* Scheduled on the previous iteration: the loop has polled since. */
    inline_new_iteration(e);
    e->slice_used = 0;
    int ok = engine_callback_ok(e);
    if (ok <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_None);
    e->busy++;
    int collect = loop && engine_collect(e);
    /* The next flush could not be scheduled (the release's call_soon failed): every parked
     * caller was released and is woken all the same, and what waits to be sent is sent now
     * (no flush would send it); the error is the flush's, unless a wake-up raises one of its
     * own (SystemExit, KeyboardInterrupt), which goes first. */
    PyObject *t = NULL, *v = NULL, *tb = NULL;
    int failed = e->park_len && engine_release(e) < 0;
    if (failed)
        PyErr_Fetch(&t, &v, &tb);
    if (!e->in_kernel && !e->waiting)
        e->deep = 0;  /* nothing to submit or reap */
    else
        /* Cached buffered reads complete inside the submitting call: reap them now rather
         * than after an eventfd round trip through the loop's selector. */
        engine_send_settled(e);
    PyObject *r = engine_leave_waking(e, collect);
    if (!failed)
        return r;
    if (r) {
        Py_DECREF(r);
        PyErr_Restore(t, v, tb);
        return NULL;
    }
    PyObject *t2, *v2, *tb2;
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_Restore(t, v, tb);
    PyErr_WriteUnraisable((PyObject *)e);
    PyErr_Restore(t2, v2, tb2);
    return NULL;
}

static PyObject *Engine_flush(engine_t *e, PyObject *unused)
{
    return engine_flush(e, 1);
}

static PyObject *Engine_send_now(engine_t *e, PyObject *unused)
{
    return engine_flush(e, 0);
}

/* ---------------------------------------------------------------- life cycle */

/* Release every slot without touching the kernel: a forked child's copy of the parent's engine
 * (the kernel writes only into the parent's memory), or memory the kernel no longer owns.
 * Parked callers get their reads, which are done, unless the loop can no longer run them. */
static void engine_release_all(engine_t *e)
{
    engine_release_parked(e);
    e->drop_results = 1;
    for (uint32_t b = 0; b < e->nblocks; b++)
        for (uint32_t i = 0; i < OP_BLOCK; i++)
            if (e->blocks[b][i].state != OPS_FREE)
                op_finish(e, b * OP_BLOCK + i, ECANCELED);
    e->in_kernel = e->waiting = 0;
    e->wait_head = e->wait_tail = OP_NONE;
}

static void engine_unlink(engine_t *e)
{
    if (e->gprev)
        e->gprev->gnext = e->gnext;
    else if (g_engines == e)
        g_engines = e->gnext;
    if (e->gnext)
        e->gnext->gprev = e->gprev;
    e->gprev = e->gnext = NULL;
}

/* Take the eventfd off the loop before closing it, whoever closes the engine: a reader left on
 * the closed number is a stale registration the next engine's eventfd (the same, lowest free
 * number) inherits — asyncio only swaps the callback and never polls the new descriptor, and
 * libuv aborts when it re-arms the closed one. Only in the engine's own process: a forked
 * child shares the parent's epoll instance, and removing it there removes the parent's. Errors
 * are the loop's business (closed, shutting down): ignored. */
static void engine_unwatch(engine_t *e)
{
    PyObject *loop = e->efd >= 0 && e->fork_gen == engine_fork_generation ? engine_loop(e) : NULL;
    if (!loop)
        return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *r = PyObject_CallMethod(loop, "remove_reader", "i", e->efd);
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_Restore(t, v, tb);
    Py_DECREF(loop);
}

static void engine_close_fds(engine_t *e)
{
    if (e->efd >= 0) {
        close(e->efd);
        e->efd = -1;
        g_count.eventfds--;
    }
}

/* Wait for everything the kernel holds. Reads are cancelled (nothing is lost by that; a pipe
 * read might otherwise wait forever); writes and syncs run to completion. */
static int engine_drain(engine_t *e)
{
    int refusals = 0;
    while (e->in_kernel > 0 || e->waiting > 0) {
        engine_fill(e);
        for (uint32_t b = 0; b < e->nblocks; b++)
            for (uint32_t i = 0; i < OP_BLOCK; i++) {
                op_t *op = &e->blocks[b][i];
                if (op->state == OPS_KERNEL && !op->cancel_sent &&
                    (op->kind == OP_READ || op->kind == OP_READINTO)) {
                    op->cancel_sent = 1;
                    e->ops->cancel(e, b * OP_BLOCK + i);
                }
            }
        int rc = e->ops->submit(e);
        if (rc < 0 && rc != -EAGAIN && rc != -EBUSY)
            e->ops->unprep(e, -rc);
        else if (rc < 0 && ++refusals > 1000)  /* ~1 s of the kernel refusing work */
            e->ops->unprep(e, -rc);
        else if (rc < 0)
            usleep(1000);
        /* Wait only for pieces the kernel accepted: the rest would never complete. */
        if (e->in_kernel > e->ops->unaccepted(e) && (rc = engine_reap(e, REAP_WAIT)) < 0)
            return rc;
    }
    return 0;
}

static int engine_do_close(engine_t *e)
{
    if (e->closed)
        return 0;
    if (e->busy) {
        e->close_pending = 1;
        return 0;
    }
    PyObject *loop = engine_loop(e);
    if (!loop) {
        e->drop_results = 1;
    } else {
        PyObject *c = PyObject_CallMethodNoArgs(loop, g_str_is_closed);
        if (!c)
            PyErr_Clear();
        if (!c || c == Py_True)
            e->drop_results = 1;
        Py_XDECREF(c);
        Py_DECREF(loop);
    }
    if (e->fork_gen == engine_fork_generation) {
        if (e->live && e->owner_thread != PyThread_get_thread_ident()) {
            /* A single-issuer ring can only be waited on from its own thread, and futures are
             * resolved only there. The caller keeps the engine (and the memory the kernel may
             * still write) alive rather than free it. */
            PyErr_SetString(PyExc_RuntimeError,
                            "aionative: an engine with operations in flight must be closed "
                            "from its event loop's thread");
            return -1;
        }
        e->closed = 2;  /* closing: completions finish their operations */
        int rc = engine_drain(e);
        if (rc < 0) {
            e->closed = 0;
            errno = -rc;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
    }
    e->closed = 1;
    engine_release_all(e);
    e->ops->destroy(e);
    engine_unwatch(e);
    engine_close_fds(e);
    return 0;
}

static PyObject *Engine_close(engine_t *e, PyObject *unused)
{
    if (engine_do_close(e) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static void Engine_dealloc(engine_t *e)
{
    PyObject_GC_UnTrack(e);
    if (!e->closed && e->ops) {
        if (engine_do_close(e) < 0) {
            /* Leaked on purpose: see engine_do_close. */
            PyErr_WriteUnraisable((PyObject *)e);
            engine_unlink(e);
            return;
        }
    }
    engine_unlink(e);
    for (uint32_t b = 0; b < e->nblocks; b++)
        PyMem_Free(e->blocks[b]);
    PyMem_Free(e->blocks);
    if (e->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)e);
    Py_CLEAR(e->loop_ref);
    if (e->ops)
        g_count.engines--;
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* Futures are visited so a cycle engine -> future -> task -> coroutine -> engine (tasks
 * suspended on a closed loop) can be collected; freeing then drains the kernel first. The
 * caller's buffers are never visited: the collector must not clear what the kernel writes. */
static int Engine_traverse(engine_t *e, visitproc visit, void *arg)
{
    Py_VISIT(e->loop_ref);
    for (uint32_t b = 0; b < e->nblocks; b++)
        for (uint32_t i = 0; i < OP_BLOCK; i++)
            if (e->blocks[b][i].state != OPS_FREE) {
                Py_VISIT(e->blocks[b][i].future);
                Py_VISIT(e->blocks[b][i].settled);
            }
    for (uint32_t i = 0; i < e->park_len; i++)
        Py_VISIT(e->parked[(e->park_head + i) & (e->park_cap - 1)].fut);
    return 0;
}

static int Engine_clear(engine_t *e)
{
    /* Futures and buffers stay with their slots until the kernel lets go of them. */
    return 0;
}

/* Engine(backend, loop, entries=0, uring_flags=-1) */
static PyObject *Engine_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"backend", "loop", "entries", "uring_flags", NULL};
    const char *backend;
    PyObject *loop;
    unsigned entries = 0;
    long long uflags = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|IL:Engine", kwlist, &backend, &loop,
                                     &entries, &uflags))
        return NULL;
    engine_t *e = (engine_t *)type->tp_alloc(type, 0);
    if (!e)
        return NULL;
    e->efd = -1;
    e->free_head = e->wait_head = e->wait_tail = OP_NONE;
    e->fork_gen = engine_fork_generation;
    e->budget_ns = DEFAULT_BUDGET_NS;
    e->release_n = 8;
    e->memo_gen = 1;  /* fd_memo's zeroed entries are of generation 0: stale */
    e->owner_thread = PyThread_get_thread_ident();
    e->loop_ref = PyWeakref_NewRef(loop, NULL);
    if (!e->loop_ref)
        goto fail;
    e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    g_count.eventfds++;
    char why[256] = "";
    int rc;
    if (strcmp(backend, "io_uring") == 0) {
        rc = uring_create(e, entries ? entries : 256, (unsigned)uflags, uflags >= 0, why,
                          sizeof why);
    } else if (strcmp(backend, "linux_aio") == 0) {
        rc = kaio_create(e, entries ? entries : 128, why, sizeof why);
    } else {
        PyErr_Format(PyExc_ValueError, "unknown native backend '%s'", backend);
        goto fail;
    }
    if (rc < 0) {
        errno = -rc;
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "iss", -rc, strerror(-rc), why);
        if (exc) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        goto fail;
    }
    g_count.engines++;
    e->gnext = g_engines;
    if (g_engines)
        g_engines->gprev = e;
    g_engines = e;
    return (PyObject *)e;
fail:
    engine_close_fds(e);
    Py_DECREF(e);
    return NULL;
}

/* ---------------------------------------------------------------- introspection */

static PyObject *Engine_fileno(engine_t *e, PyObject *unused)
{
    return PyLong_FromLong(e->efd);
}

#define STAT(name) {#name, offsetof(stats_t, name)}
static const struct { const char *name; size_t off; } stat_fields[] = {
    STAT(submitted), STAT(completed), STAT(batches), STAT(syscalls), STAT(wakeups),
    STAT(queued), STAT(retries), STAT(splits), STAT(nowait_eagain), STAT(direct_reissues),
    STAT(direct_refused), STAT(nowait_unsupported), STAT(cancels), STAT(withdrawn), STAT(cq_overflow),
    STAT(inline_hits), STAT(inline_misses), STAT(budget_exhausted), STAT(inline_retries),
    STAT(retries_refused), STAT(inline_writes), STAT(write_stalls), STAT(parked), STAT(slices_ended),
    STAT(flushes), STAT(woken), STAT(async_writes),
};

static int dict_set_ull(PyObject *d, const char *k, unsigned long long v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static PyObject *Engine_stats(engine_t *e, PyObject *unused)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    for (size_t i = 0; i < sizeof stat_fields / sizeof stat_fields[0]; i++) {
        uint64_t v = *(uint64_t *)((char *)&e->st + stat_fields[i].off);
        if (dict_set_ull(d, stat_fields[i].name, v) < 0)
            goto fail;
    }
    if (dict_set_ull(d, "in_flight", e->live) < 0 || dict_set_ull(d, "in_kernel", e->in_kernel) < 0 ||
        dict_set_ull(d, "waiting", e->waiting) < 0 || dict_set_ull(d, "pinned", e->pinned) < 0 ||
        dict_set_ull(d, "capacity", e->capacity) < 0 || dict_set_ull(d, "parked_now", e->park_len) < 0)
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *Engine_info(engine_t *e, PyObject *unused)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    PyObject *name = PyUnicode_FromString(e->ops ? e->ops->name : "?");
    if (!name || PyDict_SetItemString(d, "backend", name) < 0 ||
        dict_set_ull(d, "capacity", e->capacity) < 0 || (e->ops && e->ops->info(e, d) < 0)) {
        Py_XDECREF(name);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(name);
    return d;
}

static PyObject *Engine_get_backend(engine_t *e, void *c)
{
    return PyUnicode_FromString(e->ops ? e->ops->name : "?");
}

static PyObject *Engine_get_closed(engine_t *e, void *c)
{
    return PyBool_FromLong(e->closed != 0);
}

static PyObject *Engine_get_forked(engine_t *e, void *c)
{
    return PyBool_FromLong(e->fork_gen != engine_fork_generation);
}

static PyObject *Engine_get_inline_budget(engine_t *e, void *c)
{
    return PyFloat_FromDouble((double)e->budget_ns / 1000.0);
}

static int Engine_set_inline_budget(engine_t *e, PyObject *v, void *c)
{
    double us = v ? PyFloat_AsDouble(v) : -1.0;
    if (us == -1.0 && PyErr_Occurred())
        return -1;
    if (!(us >= 0.0 && us <= 1e9)) {
        PyErr_SetString(PyExc_ValueError, "inline_budget_us must be between 0 and 1e9");
        return -1;
    }
    e->budget_ns = (uint64_t)(us * 1000.0);
    return 0;
}

static PyObject *Engine_get_in_flight(engine_t *e, void *c)
{
    return PyLong_FromUnsignedLong(e->live);
}

static PyObject *Engine_get_loop(engine_t *e, void *c)
{
    PyObject *loop = engine_loop(e);
    return loop ? loop : Py_NewRef(Py_None);
}

static PyMethodDef Engine_methods[] = {
    {"pread", (PyCFunction)(void (*)(void))Engine_pread, METH_FASTCALL,
     "pread(fd, size, offset) -> Future[bytes]"},
    {"preadinto", (PyCFunction)(void (*)(void))Engine_preadinto, METH_FASTCALL,
     "preadinto(fd, buffer, offset) -> Future[int]"},
    {"pread_direct", (PyCFunction)(void (*)(void))Engine_pread_direct, METH_FASTCALL,
     "pread_direct(fd, size, offset) -> Future[bytes]: an O_DIRECT read of the aligned range "
     "around [offset, offset + size) into the engine's own aligned memory; the part asked for "
     "(regular files and block devices only)"},
    {"pwrite_direct", (PyCFunction)(void (*)(void))Engine_pwrite_direct, METH_FASTCALL,
     "pwrite_direct(fd, data, offset) -> Future[int]: an O_DIRECT write of a copy of data "
     "made in the engine's own aligned memory (offset and length: whole blocks)"},
    {"read", (PyCFunction)(void (*)(void))Engine_read, METH_FASTCALL,
     "read(fd, size, offset) -> bytes | Future[bytes]: pread, completed inline (the bytes "
     "themselves) when the page cache holds the data and the iteration's budget allows"},
    {"read_inline", (PyCFunction)(void (*)(void))Engine_read_inline, METH_FASTCALL,
     "read_inline(fd, size, offset, retry=False) -> bytes | False | None: read's inline part "
     "alone: the bytes when the page cache holds them all, False when the iteration's budget "
     "is spent (yield, then try again with retry=True: allowed past the budget, up to a "
     "grace), None when the read must go to the kernel queue (nothing submitted)"},
    {"readinto", (PyCFunction)(void (*)(void))Engine_readinto, METH_FASTCALL,
     "readinto(fd, buffer, offset) -> int | Future[int]: preadinto, completed inline when it "
     "can be (see read)"},
    {"readinto_inline", (PyCFunction)(void (*)(void))Engine_readinto_inline, METH_FASTCALL,
     "readinto_inline(fd, buffer, offset, retry=False) -> int | False | None: readinto's "
     "inline part alone (see read_inline)"},
    {"pwrite", (PyCFunction)(void (*)(void))Engine_pwrite, METH_FASTCALL,
     "pwrite(fd, data, offset) -> Future[int]; short writes continue until all is written"},
    {"write", (PyCFunction)(void (*)(void))Engine_write, METH_FASTCALL,
     "write(fd, data, offset, retry=False) -> int | False | Future[int]: pwrite, done inline "
     "(the count) when it is at most 64 KiB to a local regular file and the iteration's "
     "budget allows; False when only the spent budget stood in the way (yield, then try "
     "again with retry=True); else the kernel queue's future"},
    {"fsync", (PyCFunction)Engine_fsync, METH_O, "fsync(fd) -> Future[None]"},
    {"fdatasync", (PyCFunction)Engine_fdatasync, METH_O, "fdatasync(fd) -> Future[None]"},
    {"openat", (PyCFunction)Engine_openat, METH_VARARGS,
     "openat(dirfd, path: bytes, flags, mode, filename) -> Future[int]"},
    {"close_fd", (PyCFunction)Engine_close_fd, METH_O, "close_fd(fd) -> Future[None]"},
    {"read_file", (PyCFunction)Engine_read_file, METH_VARARGS,
     "read_file(dirfd, path: bytes, retry=False) -> bytes | int | False | None: a whole "
     "small file read inline when the dentry and page caches hold it (bytes); else a "
     "descriptor opened inline for the caller to read and close (int), False when the "
     "iteration's budget is spent (yield, then try again with retry=True), or None (nothing "
     "opened)"},
    {"open_cached", (PyCFunction)Engine_open_cached, METH_VARARGS,
     "open_cached(dirfd, path: bytes, flags, retry=False) -> int | False | None: open(2) "
     "inline when the dentry cache holds every component of the path (int: the descriptor), "
     "False when the iteration's budget is spent (yield, then try again with retry=True), "
     "None to use the kernel queue (not cached, an error, or O_CREAT/O_TRUNC/O_TMPFILE)"},
    {"open_lazy", (PyCFunction)(void (*)(void))lazy_open, METH_FASTCALL,  /* csrc/lazy.c */
     "open_lazy(path: str, cls, loop, executor) -> cls | (fd, path) | None: open(path, 'rb')'s "
     "open inline, not bounded by the budget, then fstat(2): a regular file gives a lazy "
     "instance of cls (its _lazy a LazyReader), anything else (fd, path) with O_NONBLOCK "
     "cleared; None: nothing opened (use the kernel queue)"},
    {"close_cached", (PyCFunction)Engine_close_cached, METH_O,
     "close_cached(fd) -> bool: close(2) inline when it cannot wait (a linked regular file "
     "opened read-only on a local filesystem) and the fast path is on (not bounded by the "
     "budget); False: use close_fd"},
    {"forget_fd", (PyCFunction)Engine_forget_fd, METH_O,
     "forget_fd(fd) -> None: the descriptor's flags changed (fcntl F_SETFL): what the inline "
     "path learned of it this loop iteration is void"},
    {"statx", (PyCFunction)Engine_statx, METH_VARARGS,
     "statx(dirfd, path: bytes, flags, mask, filename) -> Future[tuple]"},
    {"unlinkat", (PyCFunction)Engine_unlinkat, METH_VARARGS,
     "unlinkat(dirfd, path: bytes, flags, filename) -> Future[None]"},
    {"mkdirat", (PyCFunction)Engine_mkdirat, METH_VARARGS,
     "mkdirat(dirfd, path: bytes, mode, filename) -> Future[None]"},
    {"renameat", (PyCFunction)Engine_renameat, METH_VARARGS,
     "renameat(olddirfd, old: bytes, newdirfd, new: bytes, flags, filename, filename2)"},
    {"linkat", (PyCFunction)Engine_linkat, METH_VARARGS,
     "linkat(olddirfd, old: bytes, newdirfd, new: bytes, flags, filename, filename2)"},
    {"symlinkat", (PyCFunction)Engine_symlinkat, METH_VARARGS,
     "symlinkat(target: bytes, newdirfd, linkpath: bytes, filename, filename2)"},
    {"fallocate", (PyCFunction)Engine_fallocate, METH_VARARGS,
     "fallocate(fd, mode, offset, length) -> Future[None]"},
    {"ftruncate", (PyCFunction)Engine_ftruncate, METH_VARARGS,
     "ftruncate(fd, length) -> Future[None]"},
    {"supports", (PyCFunction)Engine_supports, METH_O,
     "supports(name) -> bool: the kernel runs this operation for this engine"},
    {"cancel", (PyCFunction)Engine_cancel, METH_O,
     "cancel(future) -> bool: abandon the operation whose future this is"},
    {"turn_spent", (PyCFunction)Engine_turn_spent, METH_NOARGS,
     "turn_spent() -> bool: whether this loop iteration's budget is spent (work served from "
     "memory yields a turn then)"},
    {"cancel_wait", (PyCFunction)Engine_cancel_wait, METH_O,
     "cancel_wait(future) -> Future | None: cancel the operation; a future resolved when the "
     "kernel is done with its memory, or None if it is already"},
    {"fileno", (PyCFunction)Engine_fileno, METH_NOARGS, "the eventfd the loop watches"},
    {"_on_ready", (PyCFunction)Engine_on_ready, METH_NOARGS, "eventfd reader callback"},
    {"_flush", (PyCFunction)Engine_flush, METH_NOARGS,
     "submit the iteration's batch (the loop's callback: it wakes the tasks it completes)"},
    {"_send_now", (PyCFunction)Engine_send_now, METH_NOARGS,
     "submit what is prepared now, from code a task runs (completions' callbacks scheduled)"},
    {"close", (PyCFunction)Engine_close, METH_NOARGS,
     "wait for the kernel to finish every operation, then free the engine's resources"},
    {"stats", (PyCFunction)Engine_stats, METH_NOARGS, "counters"},
    {"info", (PyCFunction)Engine_info, METH_NOARGS, "backend details"},
    {NULL},
};

static PyGetSetDef Engine_getset[] = {
    {"backend", (getter)Engine_get_backend, NULL, NULL, NULL},
    {"closed", (getter)Engine_get_closed, NULL, NULL, NULL},
    {"forked", (getter)Engine_get_forked, NULL, NULL, NULL},
    {"in_flight", (getter)Engine_get_in_flight, NULL, NULL, NULL},
    {"inline_budget_us", (getter)Engine_get_inline_budget, (setter)Engine_set_inline_budget,
     "wall time (µs) reads completed inline may take per loop iteration; 0 turns the inline "
     "fast path off", NULL},
    {"loop", (getter)Engine_get_loop, NULL, NULL, NULL},
    {NULL},
};

PyTypeObject Engine_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aionative._core.Engine",
    .tp_basicsize = sizeof(engine_t),
    .tp_weaklistoffset = offsetof(engine_t, weakrefs),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One event loop's native I/O engine (io_uring or Linux AIO).",
    .tp_new = Engine_new,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_traverse = (traverseproc)Engine_traverse,
    .tp_clear = (inquiry)Engine_clear,
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
};

/* ---------------------------------------------------------------- module-level */

static void atfork_child(void)
{
    /* Only plain stores here: the child may hold no lock and must not call into Python. */
    engine_fork_generation++;
    kaio_after_fork_child();
}

/* Free a forked child's inherited engines without touching the parent's kernel objects. */
PyObject *engine_forget_inherited(PyObject *m, PyObject *unused)
{
    for (engine_t *e = g_engines; e; e = e->gnext) {
        if (e->fork_gen == engine_fork_generation || e->closed == 1)
            continue;
        e->closed = 1;
        e->drop_results = 1;  /* the parent's loop, and its futures: never touched here */
        engine_release_all(e);
        e->ops->destroy(e);
        engine_close_fds(e);
    }
    Py_RETURN_NONE;
}

PyObject *engine_counters(PyObject *m, PyObject *unused)
{
    long ops = 0, pinned = 0, inkernel = 0;
    for (engine_t *e = g_engines; e; e = e->gnext) {
        ops += e->live;
        pinned += e->pinned;
        inkernel += e->in_kernel;
    }
    return Py_BuildValue("{sl,sl,sl,sl,sl,sl,sl,sl,sl,sl,sl}", "engines", g_count.engines,
                         "rings", g_count.rings, "eventfds", g_count.eventfds, "aio_contexts",
                         g_count.aio_contexts, "aio_pooled", g_count.aio_pooled, "direct_fds",
                         g_count.direct_fds, "direct_parked", g_count.direct_parked,
                         "live_ops", ops, "pinned_buffers", pinned,
                         "in_kernel", inkernel, "fork_generation",
                         (long)engine_fork_generation);
}

int engine_module_init(PyObject *m)
{
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    if (!asyncio)
        return -1;
    g_future_type = PyObject_GetAttrString(asyncio, "Future");
    g_invalid_state_error = g_future_type ? PyObject_GetAttrString(asyncio, "InvalidStateError")
                                          : NULL;
    Py_DECREF(asyncio);
    if (!g_invalid_state_error)
        return -1;
#define INTERN(var, s) if (!((var) = PyUnicode_InternFromString(s))) return -1
    INTERN(g_str_loop, "loop");
    INTERN(g_str_flush, "_flush");
    INTERN(g_str_set_result, "set_result");
    INTERN(g_str_set_exception, "set_exception");
    INTERN(g_str_call_soon, "call_soon");
    INTERN(g_str_is_closed, "is_closed");
    INTERN(g_str_characters_written, "characters_written");
    INTERN(g_str_callbacks, "_callbacks");
    INTERN(g_str_remove_done_callback, "remove_done_callback");
    INTERN(g_str_call_exception_handler, "call_exception_handler");
    INTERN(g_str_message, "message");
    INTERN(g_str_exception, "exception");
    INTERN(g_str_add_done_callback, "add_done_callback");
#undef INTERN
    g_kw_loop = PyTuple_Pack(1, g_str_loop);
    if (!g_kw_loop)
        return -1;
    PyObject *context = PyUnicode_InternFromString("context");
    g_kw_context = context ? PyTuple_Pack(1, context) : NULL;
    Py_XDECREF(context);
    if (!g_kw_context)
        return -1;
    if (PyType_Ready(&Engine_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Engine", (PyObject *)&Engine_Type) < 0 ||
        lazy_module_init(m) < 0)
        return -1;
    if (pthread_atfork(NULL, NULL, atfork_child) != 0)
        return -1;
    return 0;
}
