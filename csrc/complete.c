/* Completions: each piece's answer (the operation continues, is retried or is over), the
 * finished operation's result or error, and its future resolved. Inside a loop callback of the
 * engine (loop.c) a future's done callbacks are taken off it before it is resolved, for the
 * callback to call them itself. Everything here runs on the owning loop's thread with the GIL
 * held.
 */
#include "engine.h"
#include "complete.h"
#include "inline.h"
#include "kaio.h"
#include "submit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <linux/stat.h>
#include <sys/stat.h>
#include <unistd.h>

static PyObject *g_invalid_state_error;  /* asyncio.InvalidStateError */
static PyObject *g_kw_context;        /* ("context",) */
static PyObject *g_str_set_result, *g_str_set_exception, *g_str_characters_written,
    *g_str_callbacks, *g_str_remove_done_callback, *g_str_add_done_callback;

#define MAX_RETRIES 16

int complete_init(PyObject *asyncio)
{
    if (!(g_invalid_state_error = PyObject_GetAttrString(asyncio, "InvalidStateError")))
        return -1;
#define INTERN(var, s) if (!((var) = PyUnicode_InternFromString(s))) return -1
    INTERN(g_str_set_result, "set_result");
    INTERN(g_str_set_exception, "set_exception");
    INTERN(g_str_characters_written, "characters_written");
    INTERN(g_str_callbacks, "_callbacks");
    INTERN(g_str_remove_done_callback, "remove_done_callback");
    INTERN(g_str_add_done_callback, "add_done_callback");
#undef INTERN
    PyObject *context = PyUnicode_InternFromString("context");
    g_kw_context = context ? PyTuple_Pack(1, context) : NULL;
    Py_XDECREF(context);
    return g_kw_context ? 0 : -1;
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
int future_resolve(PyObject *fut, PyObject *value, int is_exc)
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
int future_resolve_collect(engine_t *e, PyObject *fut, PyObject *value, int is_exc)
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
void op_finish(engine_t *e, uint32_t idx, int err)
{
    op_t *op = engine_slot(e, idx);
    PyObject *fut = op->future;
    op->future = NULL;
    PyObject *settled = op->settled;
    op->settled = NULL;
    int was_pinned = op->bytes != NULL || op->view.obj != NULL || op->keep != NULL;
    if (op->awaited_open && op->awaited_open == e->open_gen)
        e->opens_out--;
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

/* Whether a close answered -ECANCELED left its descriptor open: the number still names the
 * file it named at submission (close_may_take_long kept its identity; without one, as a close
 * io-wq gave up on is the only -ECANCELED a local file's close gives). */
static int close_not_run(const op_t *op)
{
    struct stat st;
    if (!op->len)
        return 1;
    return fstat(op->fd, &st) == 0 && (uint64_t)st.st_ino == op->len &&
           (int64_t)st.st_dev == op->off;
}

void engine_complete(engine_t *e, uint32_t idx, int64_t res)
{
    op_t *op = engine_slot(e, idx);
    e->in_kernel--;
    op->state = OPS_WAITING;  /* between pieces: owned by the engine, not the kernel */
    e->st.completed++;
    int f = fault_hit(FP_COMPLETION);
    /* A close io-wq gave up before a worker ran it closed nothing (the engine never asks to
     * cancel a close: engine_abandon), and a caller who gave up counts the descriptor closed
     * all the same. It is submitted again, to run inside the submitting call: a worker that
     * could not be had once (a signal pending at its creation, the process's thread limit)
     * may not be had again. Past the retries, or with the engine closing, it is closed here.
     * Only while the number still names the file the close was for: a file's ->flush may answer
     * ECANCELED itself (a FUSE server) once the number is released, and it may name another
     * file by now. (An injected -ECANCELED stands for a close that did run: not that one.) */
    if (op->kind == OP_CLOSE && res == -ECANCELED && !f && close_not_run(op)) {
        if (op->retries < MAX_RETRIES && e->closed != 1) {
            op->retries++;
            e->st.retries++;
            op->oflags = 0;
            engine_enqueue(e, idx, 0);
            return;
        }
        e->st.syscalls++;
        res = close(op->fd) < 0 ? -errno : 0;
    }
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
