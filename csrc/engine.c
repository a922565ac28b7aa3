/* The Engine type: its creation (the backend chosen by name), its close (a drain that waits
 * for the kernel to finish what it holds), deallocation and the GC, the fork rules, the
 * registry of live engines and the module-level functions over it. Everything here runs on
 * the owning loop's thread with the GIL held, except the blocking waits of a drain, which
 * release it.
 */
#include "engine.h"
#include "complete.h"
#include "kaio.h"
#include "lazy.h"
#include "loop.h"
#include "methods.h"
#include "stats.h"
#include "submit.h"
#include "uring.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Default wall time inline completions may take per loop iteration (see engine_t). */
#define DEFAULT_BUDGET_NS 150000u

unsigned long engine_fork_generation;
static PyObject *g_str_is_closed;
static engine_t *g_engines;           /* list of live engines (for fork and counters) */
gcounters_t g_count;
/* ---------------------------------------------------------------- the loop */

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

int engine_do_close(engine_t *e)
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

PyObject *Engine_close(engine_t *e, PyObject *unused)
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
    e->open_gen = 1;  /* an operation's awaited_open of 0: not awaited */
    e->owner_thread = PyThread_get_thread_ident();
    e->loop_ref = PyWeakref_NewRef(loop, NULL);
    if (!e->loop_ref || loop_probe_internals(loop) < 0)
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
    int rc = loop_init(asyncio) < 0 || complete_init(asyncio) < 0 ? -1 : 0;
    Py_DECREF(asyncio);
    if (rc < 0 || !(g_str_is_closed = PyUnicode_InternFromString("is_closed")))
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
