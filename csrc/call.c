/* aionative.pread, preadinto and pwrite without a coroutine.
 *
 * An `async def pread` costs a coroutine per call (a frame allocated, run and freed) and a
 * Python-level engine lookup: together a third of the CPU of a page-cache read that completes
 * inline. These functions return a Call instead: an awaitable registered as a Coroutine (so
 * create_task() takes it) that does nothing until its first step, as a coroutine would. That
 * step finds the running loop's engine in C and calls its method directly:
 * - done inline: the step returns the result at once (am_send, no StopIteration);
 * - queued: the Call delegates to the engine future's iterator, and a CancelledError thrown
 *   into it abandons the operation (Engine.cancel) before it propagates, as await_op does;
 * - a smaller pread or preadinto that the spent budget refused (or the end of its run's
 *   slice, while others are parked) is read inline all the same, and the Call awaits the
 *   future its caller parks on (engine_read_or_park) like a queued one's (Engine.cancel finds
 *   nothing of it to abandon);
 * - a pread or preadinto of `turn_min` bytes or more, or a pwrite, that the spent budget
 *   refused yields once (a bare yield: the task runs again on the next iteration) and is
 *   retried: inline if the engine admits the retry; else a read is queued, and a pwrite waits
 *   in the queue of refused calls (the Python coroutine write_refused, as
 *   _kernelops.after_a_turn does);
 * - a pread or preadinto that Linux AIO refused with EINVAL (a file whose driver has no
 *   read_iter, such as procfs's /proc/self/maps or /proc/kallsyms, which pread(2) reads)
 *   delegates to the Python coroutine read_refused, which asks os.pread in a worker thread;
 * - the threads engine delegates to the Python coroutines configure() named.
 */
#include "engine.h"  /* Python.h first */
#include "call.h"
#include "inline.h"
#include "kaio.h"
#include "lazy.h"
#include "methods.h"
#include "module.h"
#include "submit.h"

#include <stddef.h>

enum {
    ST_NEW,   /* not started: args held */
    ST_TURN,  /* a large read or a pwrite yielded a turn: eng and args held */
    ST_WAIT,  /* delegating to `it` */
    ST_SETTLE,  /* cancelled: waiting, through `it`, until the kernel is done with the memory
                 * of the operation (Engine.cancel_wait), then `exc` is raised */
    ST_DONE,
};

typedef struct {
    PyObject_HEAD
    PyObject *args[3];  /* owned; fd, size / buffer / data, offset: until the read or write
                         * is handed to the engine */
    PyObject *eng;      /* owned; ST_TURN, and ST_WAIT on an engine future */
    PyObject *fut;      /* owned; ST_WAIT: the engine's future, abandoned on cancellation */
    PyObject *it;       /* owned; ST_WAIT: what the await delegates to (the future's iterator,
                         * or a Python coroutine); ST_SETTLE: the iterator of cancel_wait's
                         * future */
    PyObject *exc;      /* owned; ST_SETTLE: the CancelledError the call raises when settled */
    PyObject *weakrefs;
    uint8_t kind, state;
    uint8_t running;    /* inside a step, throw or close: argument conversions (__index__,
                         * __buffer__) and delegates run Python code that may touch the Call */
} call_t;

static PyTypeObject Call_Type;

/* Set by configure(): the Python coroutine functions of the slow paths, and turn_min. */
static PyObject *slow_fn[CALL_KINDS];  /* async def (fd, arg, offset): the whole call */
static PyObject *write_refused_fn;     /* async def (eng, fd, data, offset) */
static PyObject *read_refused_fn;      /* async def (fd, size or buffer, offset, into) */
static PyObject *cancelled_error, *str_throw, *str_close;
static Py_ssize_t turn_min = 64 << 10;

static const char *const call_names[CALL_KINDS] = {"pread", "preadinto", "pwrite"};

/* Done: everything it holds let go. The fields are cleared and the state set before any
 * reference is dropped: a __del__ run by a drop may touch the call (send, close), and must
 * find it done, not half cleared. */
static void call_forget(call_t *c)
{
    PyObject *held[7] = {c->args[0], c->args[1], c->args[2], c->eng, c->fut, c->it, c->exc};
    c->args[0] = c->args[1] = c->args[2] = c->eng = c->fut = c->it = c->exc = NULL;
    c->state = ST_DONE;
    for (int i = 0; i < 7; i++)
        Py_XDECREF(held[i]);
}

/* ---------------------------------------------------------------- the steps */

static int call_aio_refused(call_t *c);
static PySendResult call_read_refused(call_t *c, PyObject **result);

/* Whether a read waiting on engine `c->eng`'s future keeps its arguments: Linux AIO may
 * refuse it with EINVAL (see call_aio_refused), and os.pread then needs them. */
static int call_keeps_args(call_t *c)
{
    return c->fut && c->kind != CALL_PWRITE && c->eng &&
           ((engine_t *)c->eng)->ops == &kaio_ops;
}

/* Delegate to `it` (a new reference) and take its first step. */
static PySendResult call_delegate(call_t *c, PyObject *it, PyObject **result)
{
    c->it = it;
    c->state = ST_WAIT;
    if (!call_keeps_args(c))
        for (int i = 0; i < 3; i++)
            Py_CLEAR(c->args[i]);
    PySendResult r = PyIter_Send(it, Py_None, result);
    if (r == PYGEN_ERROR && call_aio_refused(c))  /* (a future that failed already) */
        return call_read_refused(c, result);
    if (r != PYGEN_NEXT)
        call_forget(c);
    return r;
}

/* The caller's task is about to wait on a future: its run of inline reads ends (a turn needs
 * no reset: it follows a spent budget, which refuses every read until the flush resets it). */
static void call_run_ends(call_t *c)
{
    if (c->eng)
        ((engine_t *)c->eng)->slice_used = 0;
}

/* Await the engine future `fut` (a new reference). */
static PySendResult call_await(call_t *c, PyObject *fut, PyObject **result)
{
    call_run_ends(c);
    unaryfunc am_await = Py_TYPE(fut)->tp_as_async ? Py_TYPE(fut)->tp_as_async->am_await : NULL;
    PyObject *it = am_await ? am_await(fut) : NULL;
    if (!it) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "engine returned %.100s", Py_TYPE(fut)->tp_name);
        Py_DECREF(fut);
        call_forget(c);
        return PYGEN_ERROR;
    }
    c->fut = fut;
    return call_delegate(c, it, result);
}

/* What the engine method returned: the result (done inline), a future, or NULL. */
static PySendResult call_outcome(call_t *c, PyObject *res, PyObject **result)
{
    if (!res) {
        call_forget(c);
        return PYGEN_ERROR;
    }
    if (PyBytes_CheckExact(res) || PyLong_CheckExact(res)) {
        *result = res;
        call_forget(c);
        return PYGEN_RETURN;
    }
    return call_await(c, res, result);
}

static PySendResult call_slow(call_t *c, PyObject *fn, PyObject *const *args, size_t n,
                              PyObject **result)
{
    PyObject *coro = PyObject_Vectorcall(fn, args, n, NULL);
    if (!coro) {
        call_forget(c);
        return PYGEN_ERROR;
    }
    return call_delegate(c, coro, result);
}

/* A bare yield: the task runs again on the loop's next iteration, then call_after_turn. */
static PySendResult call_turn(call_t *c, PyObject *refused, PyObject **result)
{
    Py_DECREF(refused);
    c->state = ST_TURN;
    *result = Py_NewRef(Py_None);
    return PYGEN_NEXT;
}

/* A large pread or preadinto: inline (the bytes, or the count); refused by the spent budget
 * on the first step, a turn; else — or refused again on the retry after the turn — the
 * kernel queue. */
static PySendResult call_large_read(call_t *c, engine_t *e, int retry, PyObject **result)
{
    int into = c->kind == CALL_PREADINTO;
    PyObject *a[4] = {c->args[0], c->args[1], c->args[2], Py_True};
    PyObject *res = into ? Engine_readinto_inline(e, a, 3 + retry)
                         : Engine_read_inline(e, a, 3 + retry);
    if (res == Py_False && !retry)
        return call_turn(c, res, result);
    if (res && !(into ? PyLong_CheckExact(res) : PyBytes_CheckExact(res))) {
        Py_DECREF(res);  /* False or None: not done */
        res = into ? Engine_preadinto(e, c->args, 3) : Engine_pread(e, c->args, 3);
    }
    return call_outcome(c, res, result);
}

static PySendResult call_start(call_t *c, PyObject **result);

/* The retry after the turn: inline if the renewed budget (or its grace) admits it; else a
 * read goes to the kernel queue and a pwrite to the queue of refused calls. */
static PySendResult call_after_turn(call_t *c, PyObject **result)
{
    engine_t *e = (engine_t *)c->eng;
    if (e->closed) {
        /* The engine was closed during the turn (aionative.close_engine(): "the next operation
         * makes a new one"): start again on the loop's engine now. */
        Py_CLEAR(c->eng);
        c->state = ST_NEW;
        return call_start(c, result);
    }
    if (c->kind != CALL_PWRITE)
        return call_large_read(c, e, 1, result);
    PyObject *a[5] = {c->eng, c->args[0], c->args[1], c->args[2], Py_True};
    PyObject *res = Engine_write(e, a + 1, 4);
    if (res != Py_False)
        return call_outcome(c, res, result);
    Py_DECREF(res);
    return call_slow(c, write_refused_fn, a, 4, result);
}

static int is_large(PyObject *size)
{
    if (!PyLong_CheckExact(size))
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(size, &overflow);
    return overflow > 0 || v >= turn_min;
}

/* 1 for a buffer of turn_min bytes or more, else 0; -1 with the error set if asking for it
 * was interrupted (KeyboardInterrupt, SystemExit from an exporter's Python code). Asked for
 * here and again by the engine's call, as any exporter allows; one that refuses is the
 * engine's to report. */
static int is_large_buffer(PyObject *buf)
{
    Py_ssize_t len;
    if (PyByteArray_CheckExact(buf)) {
        len = PyByteArray_GET_SIZE(buf);
    } else {
        Py_buffer view;
        if (!PyObject_CheckBuffer(buf))
            return 0;
        if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return -1;
            PyErr_Clear();
            return 0;
        }
        len = view.len;
        PyBuffer_Release(&view);
    }
    return len >= turn_min;
}

/* os.pread and os.pwrite refuse a descriptor without a file position (a pipe, socket, tty,
 * eventfd) with ESPIPE once their arguments are converted: -1 with that error set, else 0.
 * Arguments the engine's own conversion will refuse are left to it, so its error comes first,
 * as os's does; a descriptor or offset given as an __index__ object other than an int is not
 * converted twice here (its __index__ may have effects) and goes unchecked. */
static int call_refuse_stream(call_t *c, engine_t *e)
{
    PyObject *fd_obj = c->args[0], *off_obj = c->args[2], *arg = c->args[1];
    if (!PyLong_Check(fd_obj) || !PyLong_Check(off_obj))
        return 0;
    int overflow;
    long long fd = PyLong_AsLongLongAndOverflow(fd_obj, &overflow);
    long long off = overflow ? -1 : PyLong_AsLongLongAndOverflow(off_obj, &overflow);
    if (overflow || fd < 0 || fd > INT_MAX || off < 0) {
        PyErr_Clear();
        return 0;
    }
    if (inline_fd_known_positional(e, (int)fd))  /* the common case: asked this iteration */
        return 0;
    if (c->kind == CALL_PREAD) {
        if (!PyLong_Check(arg) || PyLong_AsLongLong(arg) < 0) {
            PyErr_Clear();
            return 0;
        }
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(arg, &view, c->kind == CALL_PREADINTO ? PyBUF_WRITABLE
                                                                     : PyBUF_SIMPLE) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return -1;  /* KeyboardInterrupt, SystemExit from the exporter */
            PyErr_Clear();
            return 0;
        }
        PyBuffer_Release(&view);
    }
    return inline_fd_positional(e, (int)fd);
}

/* The first step: the engine's inline attempt, or the start of a wait. */
static PySendResult call_start(call_t *c, PyObject **result)
{
    PyObject *eng = running_engine();
    if (!eng) {
        call_forget(c);
        return PYGEN_ERROR;
    }
    if (Py_TYPE(eng) != &Engine_Type) {  /* the threads engine: its Python path */
        Py_DECREF(eng);
        return call_slow(c, slow_fn[c->kind], c->args, 3, result);
    }
    engine_t *e = (engine_t *)eng;
    c->eng = eng;
    if (call_refuse_stream(c, e) < 0) {
        call_forget(c);
        return PYGEN_ERROR;
    }
    PyObject *res;
    int large;
    switch (c->kind) {
    case CALL_PREAD:
        if (is_large(c->args[1]))
            return call_large_read(c, e, 0, result);
        res = engine_read_or_park(e, c->args, 0);
        break;
    case CALL_PREADINTO:
        large = is_large_buffer(c->args[1]);
        if (large < 0) {
            call_forget(c);
            return PYGEN_ERROR;
        }
        if (large)
            return call_large_read(c, e, 0, result);
        res = engine_read_or_park(e, c->args, 1);
        break;
    default:
        res = Engine_write(e, c->args, 3);
        if (res == Py_False)
            return call_turn(c, res, result);
    }
    return call_outcome(c, res, result);
}

/* An error came out of the wait on the engine's future. A CancelledError (the task was
 * cancelled, or the future) cancels the operation, and the call ends only once the kernel
 * cannot touch the caller's memory any more: a request already running in the kernel (a read
 * the device is doing: ASYNC_CANCEL answers -EALREADY) lands in the buffer first, and the
 * caller, free to reuse the buffer the moment its await ends, would find it overwritten. So
 * the call waits on the future Engine.cancel_wait gives, then raises the CancelledError.
 * Cancellations that come meanwhile cancel only that wait: a new one follows, and the first
 * CancelledError is raised at the end. Any other error ends the call at once. */
static PySendResult call_settle_wait(call_t *c, PyObject **result);

static PySendResult call_settle(call_t *c, PyObject **result)
{
    if (!c->fut || !PyErr_ExceptionMatches(cancelled_error)) {
        call_forget(c);
        return PYGEN_ERROR;
    }
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb && v)
        PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    c->exc = v;
    return call_settle_wait(c, result);
}

/* 1 if a send into the settle wait left it waiting; else its outcome (the waiter resolved,
 * or cancelled: the first CancelledError stands either way) is dropped, and 0. */
static int settle_waiting(PySendResult r, PyObject **result)
{
    if (r == PYGEN_NEXT)
        return 1;
    if (r == PYGEN_RETURN)
        Py_DECREF(*result);
    else
        PyErr_Clear();
    return 0;
}

/* Wait (ST_SETTLE) while the kernel may still use the operation's memory, then raise `exc`. */
static PySendResult call_settle_wait(call_t *c, PyObject **result)
{
    for (;;) {
        PyObject *w = Engine_cancel_wait((engine_t *)c->eng, c->fut);
        if (!w) {
            call_forget(c);
            return PYGEN_ERROR;
        }
        if (w == Py_None) {
            Py_DECREF(w);
            break;
        }
        unaryfunc am_await = Py_TYPE(w)->tp_as_async ? Py_TYPE(w)->tp_as_async->am_await : NULL;
        PyObject *it = am_await ? am_await(w) : NULL;
        Py_DECREF(w);
        if (!it) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "cancel_wait() returned no awaitable");
            call_forget(c);
            return PYGEN_ERROR;
        }
        Py_XSETREF(c->it, it);
        c->state = ST_SETTLE;
        if (settle_waiting(PyIter_Send(c->it, Py_None, result), result))
            return PYGEN_NEXT;
    }
    PyObject *exc = c->exc;
    c->exc = NULL;
    call_forget(c);
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    *result = NULL;
    return PYGEN_ERROR;
}

/* 1, with ValueError set, while a step of this Call is running (as for a coroutine). */
static int call_busy(call_t *c)
{
    if (!c->running)
        return 0;
    PyErr_SetString(PyExc_ValueError, "coroutine already executing");
    return 1;
}

/* 1 if the error set is Linux AIO's EINVAL for this read's file (cleared: the read goes to
 * read_refused), else 0 with the error left as it was. io_submit refuses a file whose driver
 * has no read_iter (procfs's seq files) with EINVAL, where pread(2) reads it; the engine has
 * already made a directory's EINVAL the EISDIR pread(2) gives. Arguments pread(2) refuses
 * with EINVAL (a negative offset) are refused by the engine's call itself, before any
 * future: they never get here. */
static int call_aio_refused(call_t *c)
{
    if (!call_keeps_args(c) || !c->args[0] || !read_refused_fn ||
        !PyErr_ExceptionMatches(PyExc_OSError))
        return 0;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    int refused = 0;
    if (v && PyObject_TypeCheck(v, (PyTypeObject *)PyExc_OSError)) {
        PyObject *en = ((PyOSErrorObject *)v)->myerrno;
        refused = en && PyLong_CheckExact(en) && PyLong_AsLong(en) == EINVAL;
    }
    if (refused) {  /* the future's own outcome (the task throws it in), not one thrown by hand */
        PyObject *done = PyObject_CallMethod(c->fut, "done", NULL);
        refused = done == Py_True;
        Py_XDECREF(done);
        PyErr_Clear();
    }
    if (refused) {
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        return 1;
    }
    PyErr_Restore(t, v, tb);
    return 0;
}

/* The read Linux AIO refused: os.pread's answer, from read_refused (a worker thread). */
static PySendResult call_read_refused(call_t *c, PyObject **result)
{
    PyObject *a[4] = {c->args[0], c->args[1], c->args[2],
                      c->kind == CALL_PREADINTO ? Py_True : Py_False};
    Py_CLEAR(c->it);
    Py_CLEAR(c->fut);  /* (the arguments are let go once the coroutine holds them) */
    return call_slow(c, read_refused_fn, a, 4, result);
}

static PySendResult call_step(call_t *c, PyObject *arg, PyObject **result)
{
    switch (c->state) {
    case ST_WAIT: {
        PySendResult r = PyIter_Send(c->it, arg, result);
        if (r == PYGEN_ERROR && call_aio_refused(c))
            return call_read_refused(c, result);
        if (r == PYGEN_ERROR)
            return call_settle(c, result);
        if (r != PYGEN_NEXT)
            call_forget(c);
        return r;
    }
    case ST_SETTLE:
        if (settle_waiting(PyIter_Send(c->it, arg, result), result))
            return PYGEN_NEXT;
        return call_settle_wait(c, result);  /* (asked again: done, or a new waiter) */
    case ST_DONE:
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return PYGEN_ERROR;
    case ST_TURN:  /* (what is sent to a bare yield is ignored) */
        return call_after_turn(c, result);
    default:
        if (arg != Py_None) {
            PyErr_SetString(PyExc_TypeError,
                            "can't send non-None value to a just-started coroutine");
            return PYGEN_ERROR;
        }
        return call_start(c, result);
    }
}

static PySendResult Call_send(call_t *c, PyObject *arg, PyObject **result)
{
    if (call_busy(c))
        return PYGEN_ERROR;
    c->running = 1;
    PySendResult r = call_step(c, arg, result);
    c->running = 0;
    return r;
}

/* ---------------------------------------------------------------- the coroutine protocol */

/* StopIteration(value) for a finished step taken through next() or send(). */
static PyObject *call_stop(PySendResult r, PyObject *value)
{
    if (r != PYGEN_RETURN)
        return r == PYGEN_NEXT ? value : NULL;
    return done_next(&value);
}

static PyObject *Call_send_method(call_t *c, PyObject *arg)
{
    PyObject *value = NULL;
    PySendResult r = Call_send(c, arg, &value);
    return call_stop(r, value);
}

static PyObject *Call_next(call_t *c)
{
    return Call_send_method(c, Py_None);
}

/* The exception throw(typ[, val[, tb]]) raises, built as a coroutine's throw() builds it (a
 * new reference), or NULL with the TypeError a coroutine raises for arguments naming none. */
static PyObject *thrown_exception(PyObject *const *args, Py_ssize_t n)
{
    PyObject *typ = args[0], *val = n > 1 ? args[1] : Py_None, *tb = n > 2 ? args[2] : Py_None;
    if (tb != Py_None && !PyTraceBack_Check(tb)) {
        PyErr_SetString(PyExc_TypeError, "throw() third argument must be a traceback object");
        return NULL;
    }
    if (PyExceptionInstance_Check(typ)) {
        if (val != Py_None) {
            PyErr_SetString(PyExc_TypeError,
                            "instance exception may not have a separate value");
            return NULL;
        }
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    } else if (PyExceptionClass_Check(typ)) {
        PyErr_SetObject(typ, val == Py_None ? NULL : val);
    } else {
        PyErr_Format(PyExc_TypeError, "exceptions must be classes or instances deriving from "
                     "BaseException, not %s", Py_TYPE(typ)->tp_name);
        return NULL;
    }
    PyObject *t, *v, *old;
    PyErr_Fetch(&t, &v, &old);
    PyErr_NormalizeException(&t, &v, &old);
    Py_XDECREF(t);
    Py_XDECREF(old);
    if (v && tb != Py_None)
        PyException_SetTraceback(v, tb);
    return v;  /* NULL: the exception's constructor raised, and that error is set */
}

/* throw(): into the wait; a CancelledError coming back out of the engine's future cancels
 * the operation and waits until the kernel is done with its memory (call_settle). Before the start
 * or during a turn nothing runs for the call. The three-argument form is deprecated from 3.12
 * on, with the warning a coroutine gives; the future's iterator is always thrown the one
 * exception, so it does not warn a second time. */
static PyObject *Call_throw(call_t *c, PyObject *const *args, Py_ssize_t n)
{
    if (n < 1 || n > 3) {
        PyErr_Format(PyExc_TypeError, "throw expected 1 to 3 arguments, got %zd", n);
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (n > 1 && PyErr_WarnEx(PyExc_DeprecationWarning,
                              "the (type, exc, tb) signature of throw() is deprecated, "
                              "use the single-arg signature instead.", 1) < 0)
        return NULL;
#endif
    if (call_busy(c))
        return NULL;
    PyObject *result = NULL;
    if (c->state == ST_SETTLE) {  /* whatever is thrown now (valid or not), the wait goes on */
        c->running = 1;
        PySendResult r = call_settle_wait(c, &result);
        c->running = 0;
        return r == PYGEN_NEXT ? result : NULL;
    }
    PyObject *exc = thrown_exception(args, n);
    if (!exc) {  /* the call is finished, as a failed throw finishes it (the operation goes on) */
        call_forget(c);
        return NULL;
    }
    if (c->state != ST_WAIT) {
        call_forget(c);
        PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
        return NULL;
    }
    c->running = 1;
    PyObject *res = PyObject_CallMethodOneArg(c->it, str_throw, exc);
    Py_DECREF(exc);
    if (!res) {
        /* (the task throws a failed future's error in: Linux AIO's refusal goes to
         * read_refused) */
        PySendResult r = call_aio_refused(c) ? call_read_refused(c, &result)
                                             : call_settle(c, &result);
        c->running = 0;
        return call_stop(r, result);
    }
    c->running = 0;
    return res;
}

static PyObject *Call_close(call_t *c, PyObject *unused)
{
    if (call_busy(c))
        return NULL;
    PyObject *it = c->it;
    c->it = NULL;
    call_forget(c);
    if (!it)
        Py_RETURN_NONE;
    c->running = 1;
    PyObject *res = PyObject_CallMethodNoArgs(it, str_close);
    c->running = 0;
    Py_DECREF(it);
    return res;
}

static PyObject *Call_self(PyObject *c)
{
    return Py_NewRef(c);
}

/* ---------------------------------------------------------------- the type */

static int Call_traverse(call_t *c, visitproc visit, void *arg)
{
    for (int i = 0; i < 3; i++)
        Py_VISIT(c->args[i]);
    Py_VISIT(c->eng);
    Py_VISIT(c->fut);
    Py_VISIT(c->it);
    Py_VISIT(c->exc);
    return 0;
}

static int Call_clear(call_t *c)
{
    call_forget(c);
    return 0;
}

/* A call never awaited warns as a coroutine never awaited does (it did nothing). */
static void Call_finalize(call_t *c)
{
    if (c->state != ST_NEW)
        return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "coroutine '%s' was never awaited",
                         call_names[c->kind]) < 0)
        PyErr_WriteUnraisable((PyObject *)c);
    PyErr_Restore(t, v, tb);
}

/* Calls freed, kept for the next ones (as CPython keeps lists and tuples): a Call lives for
 * one await, and the allocator's round trip was a twentieth of a hot read's instructions. */
#define CALL_FREE_MAX 64
static call_t *call_free[CALL_FREE_MAX];
static int call_nfree;

static void Call_dealloc(call_t *c)
{
    if (c->state == ST_NEW && PyObject_CallFinalizerFromDealloc((PyObject *)c) < 0)
        return;  /* resurrected by the warning's handler */
    PyObject_GC_UnTrack(c);
    if (c->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)c);
    if (c->state != ST_DONE)  /* (done: call_forget has cleared it) */
        call_forget(c);
    /* Not one finalized (never awaited, or collected in a cycle): the mark stays with the
     * memory, and a Call made in it would not warn. */
#ifndef AIONATIVE_DEBUG  /* (a debug build frees every Call: ASan sees a dangling one) */
    if (call_nfree < CALL_FREE_MAX && !PyObject_GC_IsFinalized((PyObject *)c)) {
        call_free[call_nfree++] = c;
        return;
    }
#endif
    PyObject_GC_Del(c);
}

static PyObject *Call_name(call_t *c, void *unused)
{
    return PyUnicode_FromString(call_names[c->kind]);
}

static PyObject *Call_running(call_t *c, void *unused)
{
    return PyBool_FromLong(c->running);
}

static PyObject *Call_suspended(call_t *c, void *unused)
{
    return PyBool_FromLong(!c->running && (c->state == ST_TURN || c->state == ST_WAIT ||
                                           c->state == ST_SETTLE));
}

static PyObject *Call_await_of(call_t *c, void *unused)
{
    return Py_NewRef(c->it ? c->it : Py_None);
}

static PyObject *Call_repr(call_t *c)
{
    return PyUnicode_FromFormat("<aionative.%s call at %p>", call_names[c->kind], c);
}

static PyMethodDef Call_methods[] = {
    {"send", (PyCFunction)Call_send_method, METH_O, "send(value): the next step"},
    {"throw", (PyCFunction)(void (*)(void))Call_throw, METH_FASTCALL,
     "throw(exc): raise exc at the await (a cancellation cancels the engine's operation and "
     "waits until the kernel is done with its memory)"},
    {"close", (PyCFunction)Call_close, METH_NOARGS, "close(): stop waiting"},
    {NULL},
};

static PyGetSetDef Call_getset[] = {
    {"__name__", (getter)Call_name, NULL, "the function's name", NULL},
    {"__qualname__", (getter)Call_name, NULL, "the function's name", NULL},
    {"cr_running", (getter)Call_running, NULL, "inside a step", NULL},
    {"cr_suspended", (getter)Call_suspended, NULL, "waiting (a turn, or the engine)", NULL},
    {"cr_await", (getter)Call_await_of, NULL, "what the await waits on, or None", NULL},
    {NULL},
};

static PyAsyncMethods Call_async = {
    .am_await = Call_self,
    .am_send = (sendfunc)Call_send,
};

static PyTypeObject Call_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aionative._core.Call",
    .tp_doc = "What aionative.pread, preadinto and pwrite return: a coroutine-like awaitable "
              "that does the call on its first step.",
    .tp_basicsize = sizeof(call_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)Call_dealloc,
    .tp_finalize = (destructor)Call_finalize,
    .tp_weaklistoffset = offsetof(call_t, weakrefs),
    .tp_repr = (reprfunc)Call_repr,
    .tp_traverse = (traverseproc)Call_traverse,
    .tp_clear = (inquiry)Call_clear,
    .tp_as_async = &Call_async,
    .tp_iter = Call_self,
    .tp_iternext = (iternextfunc)Call_next,
    .tp_methods = Call_methods,
    .tp_getset = Call_getset,
};

/* ---------------------------------------------------------------- the functions */

static PyObject *call_new(int kind, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments", call_names[kind]);
        return NULL;
    }
    if (n != 3) {
        PyErr_Format(PyExc_TypeError, "%s expected 3 arguments, got %zd",  /* as os.pread's */
                     call_names[kind], n);
        return NULL;
    }
    if (!slow_fn[kind]) {
        PyErr_SetString(PyExc_RuntimeError, "aionative._core.configure() was not called");
        return NULL;
    }
    call_t *c;
    if (call_nfree) {
        c = call_free[--call_nfree];
        PyObject_Init((PyObject *)c, &Call_Type);
    } else if (!(c = PyObject_GC_New(call_t, &Call_Type))) {
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        c->args[i] = Py_NewRef(args[i]);
    c->eng = c->fut = c->it = c->exc = c->weakrefs = NULL;
    c->kind = (uint8_t)kind;
    c->state = ST_NEW;
    c->running = 0;
    PyObject_GC_Track(c);
    return (PyObject *)c;
}

static PyObject *call_pread(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    return call_new(CALL_PREAD, args, n, kw);
}

static PyObject *call_preadinto(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    return call_new(CALL_PREADINTO, args, n, kw);
}

static PyObject *call_pwrite(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    return call_new(CALL_PWRITE, args, n, kw);
}

/* configure()'s part: the Python paths of the calls (each NULL: unchanged), and turn_min
 * (negative: unchanged). */
void call_configure(PyObject *const paths[CALL_KINDS], PyObject *write_refused,
                    PyObject *read_refused, PyObject *cancelled, Py_ssize_t tm)
{
    for (int i = 0; i < CALL_KINDS; i++)
        if (paths[i])
            Py_XSETREF(slow_fn[i], Py_NewRef(paths[i]));
    if (write_refused)
        Py_XSETREF(write_refused_fn, Py_NewRef(write_refused));
    if (read_refused)
        Py_XSETREF(read_refused_fn, Py_NewRef(read_refused));
    if (cancelled)
        Py_XSETREF(cancelled_error, Py_NewRef(cancelled));
    if (tm >= 0)
        turn_min = tm;
}

/* The docstrings of aionative.pread, preadinto and pwrite (with their signatures). */
#define AWAITED "\n\nReturns a coroutine (a Call): the call starts when it is first awaited."

static PyMethodDef call_functions[] = {
    {"pread", (PyCFunction)(void (*)(void))call_pread, METH_FASTCALL | METH_KEYWORDS,
     "pread($module, fd, size, offset, /)\n--\n\n"
     "Read up to ``size`` bytes at ``offset`` (like ``os.pread``, but never blocking the loop)."
     "\n\nReads larger than the kernel's per-call limit are split; a short result means end "
     "of file. A read the page cache can serve completes inline, within the loop's cooperative "
     "budget; one of ``TURN_MIN`` bytes or more that finds the budget spent waits a turn of "
     "the loop and is retried inline rather than queued." AWAITED},
    {"preadinto", (PyCFunction)(void (*)(void))call_preadinto, METH_FASTCALL | METH_KEYWORDS,
     "preadinto($module, fd, buffer, offset, /)\n--\n\n"
     "Read into a writable buffer at ``offset``; returns the number of bytes read.\n\n"
     "The buffer stays exported (a bytearray cannot be resized) until the kernel is done with "
     "it, even if the awaiting task is cancelled." AWAITED},
    {"pwrite", (PyCFunction)(void (*)(void))call_pwrite, METH_FASTCALL | METH_KEYWORDS,
     "pwrite($module, fd, data, offset, /)\n--\n\n"
     "Write all of ``data`` at ``offset``; short writes continue until everything is written."
     "\n\nOn an error after part was written, the ``OSError`` carries "
     "``characters_written``. A write to a local regular file is copied into the page cache "
     "inline, within the loop's cooperative budget; one that finds the budget spent waits a "
     "turn of the loop." AWAITED},
    {NULL},
};

int call_module_init(PyObject *m)
{
    if (!(str_throw = PyUnicode_InternFromString("throw")) ||
        !(str_close = PyUnicode_InternFromString("close")) ||
        PyType_Ready(&Call_Type) < 0 || PyModule_AddFunctions(m, call_functions) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Call", (PyObject *)&Call_Type);
}
