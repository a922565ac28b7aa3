/* The engine's turns of the event loop: the flush it schedules (loop.call_soon) and the
 * eventfd's reader, each of which submits what is prepared, reaps what completed and settles
 * it, then calls the done callbacks of the futures it resolved (collected by complete.c);
 * parked callers, whose results a flush hands out; and leaving a loop callback, when a close
 * asked for meanwhile is done. Everything here runs on the owning loop's thread with the GIL
 * held.
 */
#include "engine.h"
#include "compat.h"
#include "complete.h"
#include "inline.h"
#include "loop.h"
#include "submit.h"

#include <errno.h>
#include <unistd.h>

static PyObject *g_future_type;       /* asyncio.Future */
static PyObject *g_kw_loop;           /* ("loop",) */
static PyObject *g_kw_context;        /* ("context",) */
static PyObject *g_str_flush, *g_str_call_soon, *g_str_call_exception_handler, *g_str_message,
    *g_str_exception;

int loop_init(PyObject *asyncio)
{
    if (!(g_future_type = PyObject_GetAttrString(asyncio, "Future")))
        return -1;
#define INTERN(var, s) if (!((var) = PyUnicode_InternFromString(s))) return -1
    INTERN(g_str_flush, "_flush");
    INTERN(g_str_call_soon, "call_soon");
    INTERN(g_str_call_exception_handler, "call_exception_handler");
    INTERN(g_str_message, "message");
    INTERN(g_str_exception, "exception");
#undef INTERN
    PyObject *loop = PyUnicode_InternFromString("loop");
    g_kw_loop = loop ? PyTuple_Pack(1, loop) : NULL;
    Py_XDECREF(loop);
    PyObject *context = g_kw_loop ? PyUnicode_InternFromString("context") : NULL;
    g_kw_context = context ? PyTuple_Pack(1, context) : NULL;
    Py_XDECREF(context);
    return g_kw_context ? 0 : -1;
}

/* ---------------------------------------------------------------- asked of the loop */

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

int loop_probe_internals(PyObject *loop)
{
    return compat_probe_callbacks(g_future_type, loop);
}

PyObject *engine_new_future(engine_t *e)
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
PyObject *engine_park(engine_t *e, PyObject *res, int sliced)
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
void engine_release_parked(engine_t *e)
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

/* ---------------------------------------------------------------- loop callbacks */

static void eventfd_clear(engine_t *e)
{
    uint64_t v;
    e->st.syscalls++;
    while (read(e->efd, &v, sizeof v) < 0 && errno == EINTR)
        ;
}

/* Python code run by completions (finalizers, buffer releases) may ask to close the engine;
 * that waits until the outermost engine callback has returned. */
PyObject *engine_leave(engine_t *e)
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
 * the queue would get every future done on return and never yield.) */
void engine_send_settled(engine_t *e)
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
    if (!compat.take_callbacks)
        return 0;  /* the futures schedule their callbacks themselves (compat.h) */
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

/* Wait, up to OPEN_WAIT_NS in all, for the opens sent inside their calls (awaited_open): reaped
 * here, inside the loop's callback that reaps first in its iteration (the flush on asyncio's
 * loop, the eventfd's reader on uvloop, whose poll phase comes before the ready callbacks),
 * their tasks are woken together by that callback (engine_leave_waking), before the callbacks
 * the loop's last iteration made ready. (A task it wakes reaps what completes after that with
 * its own calls, and that task's wake-up waits for the loop's next iteration.) What does not
 * complete in time is reaped as any completion is. */
static void engine_wait_opens(engine_t *e)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t start = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, now = start;
    int rc = 0;
    while (e->opens_out && now - start < OPEN_WAIT_NS) {
        rc = e->ops->wait_timed(e, OPEN_WAIT_NS - (now - start));
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        if (rc < 0)  /* time up; a signal (its handler runs once the loop has control); a
                      * kernel before 5.11 (-EOPNOTSUPP: no bounded wait); an error */
            break;
    }
    if (e->opens_out) {  /* not answered in time: reaped as any completion is, not waited for */
        e->opens_out = 0;
        if (++e->open_gen == 0)
            e->open_gen = 1;
    }
    if (rc == -EOPNOTSUPP)
        return;
    e->st.open_waits++;
    e->st.open_wait_us += (uint64_t)(now - start) / 1000;
}

PyObject *Engine_on_ready(engine_t *e, PyObject *unused)
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
    if (collect && e->opens_out)
        engine_wait_opens(e);
    engine_pump(e);
    engine_settle(e, sent);
    return engine_leave_waking(e, collect);
}

/* The iteration's flush (`loop`: run by the loop as the callback engine_schedule_flush
 * scheduled, which calls the done callbacks of what it resolves itself, as Engine_on_ready
 * does; else called from code a task runs, where no other task may run). */
PyObject *engine_flush(engine_t *e, int loop)
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
    if (collect && e->opens_out)
        engine_wait_opens(e);
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

PyObject *Engine_flush(engine_t *e, PyObject *unused)
{
    return engine_flush(e, 1);
}

PyObject *Engine_send_now(engine_t *e, PyObject *unused)
{
    return engine_flush(e, 0);
}
