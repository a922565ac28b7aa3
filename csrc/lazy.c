/* A lazy `rb` file: what aionative._files.AsyncBufferedReader holds before its stack exists
 * (the descriptor, the position, the size), and the three calls that serve
 * `async with open(path, "rb") as f: data = await f.read()` without building it: the open
 * (Engine.open_lazy), the read to the end (LazyReader.read_rest) and the close
 * (LazyReader.close_now), each one call from Python into the inline fast path; and RbOpen,
 * what open(path, "rb") returns, whose `async with` / `await` makes the open call and whose
 * exit makes the close call, with no coroutine of their own when both run inline.
 *
 * The descriptor keeps the O_NONBLOCK of the inline open until the stack is built
 * (LazyReader.settle): the reads here are preadv2(RWF_NOWAIT), which it does not change, and
 * the descriptor reaches nobody else before then. The LazyReader never closes it: the file
 * object closes it (close, or its finaliser).
 */
#include "engine.h"  /* Python.h first: it defines _GNU_SOURCE */
#include "inline.h"
#include "compat.h"
#include "lazy.h"
#include "module.h"
#include "submit.h"

#include <fcntl.h>
#include <structmember.h>
#include <sys/stat.h>
#include <unistd.h>

#define FALLBACK_BUFSIZE 8192  /* io.DEFAULT_BUFFER_SIZE: st_blksize <= 1 */

typedef struct {
    PyObject_HEAD
    PyObject *eng;        /* the engine that opened it */
    PyObject *name;       /* the path, as given (str) */
    PyObject *loop;       /* open()'s loop= and executor= arguments */
    PyObject *executor;
    long long size;       /* st_size at the open */
    long long blksize;    /* the buffer size the stack will have */
    long long pos;        /* where the lazy reads have left the file position */
    int fd;
    char closed;          /* FileIO's closed: set by the first close, whatever close(2) says */
    char nonblock;        /* the inline open's O_NONBLOCK is still set */
} lazy_t;

static PyObject *str_lazy, *str_busy, *str_close, *get_engine_fn, *empty_tuple;
static PyTypeObject LazyReader_Type;  /* defined below the LazyReader methods */

/* ---------------------------------------------------------------- the engine */

static PyObject *last_engine;  /* a weak reference to the engine get_engine() last returned */

/* The running loop's engine (aionative._engine.get_engine()), without calling it while the
 * engine it last returned still serves the running loop on this thread. A new reference. */
PyObject *running_engine(void)
{
    PyObject *loop = running_loop_borrowed();
    if (loop && last_engine) {
        PyObject *obj = NULL;
        if (PyWeakref_GetRef(last_engine, &obj) < 0)
            return NULL;
        engine_t *e = (engine_t *)obj;
        if (e && !e->closed && engine_loop_is(e, loop) &&
                e->owner_thread == PyThread_get_thread_ident() &&
                e->fork_gen == engine_fork_generation)
            return obj;
        Py_XDECREF(obj);
    }
    if (!get_engine_fn) {
        PyErr_SetString(PyExc_RuntimeError, "aionative._core.configure() was not called");
        return NULL;
    }
    PyObject *eng = PyObject_CallNoArgs(get_engine_fn);
    if (eng && Py_TYPE(eng) == &Engine_Type) {
        PyObject *ref = PyWeakref_NewRef(eng, NULL);
        if (!ref) {
            Py_DECREF(eng);
            return NULL;
        }
        Py_XSETREF(last_engine, ref);
    }
    return eng;
}

/* The engine that opened the file while its loop runs and it is open; else the running
 * loop's (close_engine(), or the file used from another loop). A new reference. */
static PyObject *lazy_engine(lazy_t *z)
{
    engine_t *e = (engine_t *)z->eng;
    PyObject *loop = running_loop_borrowed();
    if (loop && !e->closed && engine_loop_is(e, loop))
        return Py_NewRef(z->eng);
    return running_engine();
}

static long long lazy_want(lazy_t *z)
{
    /* One byte more than the size: a short read proves the end of the file. */
    return (z->size > z->pos ? z->size - z->pos : 0) + 1;
}

/* What a read of `want` bytes at the position returned: the bytes to the end (the position
 * moves past them), or None when nothing was read inline or all of `want` was (the file grew:
 * the stack reads the rest). A new reference. */
static PyObject *lazy_take(lazy_t *z, PyObject *res, long long want)
{
    if (!PyBytes_CheckExact(res) || PyBytes_GET_SIZE(res) == want)
        Py_RETURN_NONE;
    z->pos += PyBytes_GET_SIZE(res);
    return Py_NewRef(res);
}

/* ---------------------------------------------------------------- methods */

static PyObject *Lazy_engine(lazy_t *z, PyObject *unused)
{
    return lazy_engine(z);
}

static PyObject *Lazy_want(lazy_t *z, PyObject *unused)
{
    return PyLong_FromLongLong(lazy_want(z));
}

static PyObject *Lazy_take(lazy_t *z, PyObject *const *args, Py_ssize_t n)
{
    if (n != 2) {
        PyErr_Format(PyExc_TypeError, "take() takes exactly 2 arguments (%zd given)", n);
        return NULL;
    }
    long long want = PyLong_AsLongLong(args[1]);
    if (want == -1 && PyErr_Occurred())
        return NULL;
    return lazy_take(z, args[0], want);
}

/* read_rest(retry=False) -> bytes | False | None
 *
 * `retry`: an earlier read_rest() said False and the caller has let the loop turn once since;
 * the engine admits it past the renewed budget up to its grace (inline_budget_ok). */
static PyObject *Lazy_read_rest(lazy_t *z, PyObject *const *args, Py_ssize_t n)
{
    if (n > 1) {
        PyErr_Format(PyExc_TypeError, "read_rest() takes at most 1 argument (%zd given)", n);
        return NULL;
    }
    int retry = n ? PyObject_IsTrue(args[0]) : 0;
    if (retry < 0)
        return NULL;
    if (z->closed)
        Py_RETURN_NONE;
    PyObject *eng = lazy_engine(z);
    if (!eng)
        return NULL;
    long long want = lazy_want(z);
    PyObject *res;
    if (Py_TYPE(eng) == &Engine_Type) {
        engine_t *e = (engine_t *)eng;
        res = !engine_usable(e) ? NULL
              : inline_read_known(e, z->fd, (Py_ssize_t)want, z->pos, z->size, retry);
    } else if (retry) {
        res = Py_NewRef(Py_None);  /* another engine (the threads backend's) has no retry */
    } else {
        res = PyObject_CallMethod(eng, "read_inline", "iLL", z->fd, want, z->pos);
    }
    Py_DECREF(eng);
    if (!res || res == Py_False)
        return res;
    PyObject *got = lazy_take(z, res, want);
    Py_DECREF(res);
    return got;
}

/* close_now() -> bool: True if the descriptor is closed — inline now (the file is closed
 * then, whatever close(2) said, as FileIO's close), or before; False if it cannot be closed
 * inline, and nothing was done: the caller marks the file closed and closes the descriptor
 * through the engine (close_fd). */
static PyObject *Lazy_close_now(lazy_t *z, PyObject *unused)
{
    if (z->closed)
        Py_RETURN_TRUE;
    PyObject *eng = lazy_engine(z);
    if (!eng)
        return NULL;
    int r = 0;
    if (Py_TYPE(eng) == &Engine_Type) {
        engine_t *e = (engine_t *)eng;
        r = engine_usable(e) ? inline_close(e, z->fd, 1) : -1;
    }
    Py_DECREF(eng);
    if (r != 0)
        z->closed = 1;
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* settle(): clear the inline open's O_NONBLOCK before the descriptor goes to the stack */
static PyObject *Lazy_settle(lazy_t *z, PyObject *unused)
{
    if (z->nonblock && !z->closed) {
        z->nonblock = 0;
        if (fcntl(z->fd, F_SETFL, 0) < 0)  /* opened O_RDONLY | O_NONBLOCK: no other flag */
            return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- the open */

/* Engine.open_lazy(path: str, cls, loop, executor) -> cls | (fd, path) | None. */
PyObject *lazy_open(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    if (n != 4) {
        PyErr_Format(PyExc_TypeError, "open_lazy() takes exactly 4 arguments (%zd given)", n);
        return NULL;
    }
    PyObject *path = args[0], *cls = args[1];
    if (!PyUnicode_Check(path) || !PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "open_lazy(path: str, cls: type, loop, executor)");
        return NULL;
    }
    if (!engine_usable(e))
        return NULL;
    PyObject *encoded = PyUnicode_EncodeFSDefault(path);  /* os.fsencode */
    if (!encoded)
        return NULL;
    const char *p = PyBytes_AS_STRING(encoded);
    if (strlen(p) != (size_t)PyBytes_GET_SIZE(encoded)) {
        Py_DECREF(encoded);
        Py_RETURN_NONE;  /* an embedded NUL: the queue's openat raises what os.open does */
    }
    /* Not bounded by the budget: an open and an fstat cannot wait, and cost less than
     * deferring them; the read that follows is bounded. */
    int fd = inline_open_fd(e, AT_FDCWD, p, O_RDONLY | O_CLOEXEC);
    Py_DECREF(encoded);
    if (fd < 0)
        Py_RETURN_NONE;
    struct stat st;
    e->st.syscalls++;
    if (fstat(fd, &st) < 0) {  /* as FileIO's fstat at open: the error, nothing left open */
        PyErr_SetFromErrno(PyExc_OSError);
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {  /* a directory, FIFO or device: the caller's way */
        if (inline_clear_nonblock(e, fd) < 0) {
            close(fd);
            return NULL;
        }
        PyObject *r = Py_BuildValue("(iO)", fd, path);
        if (!r)
            close(fd);
        return r;
    }
    lazy_t *z = PyObject_GC_New(lazy_t, &LazyReader_Type);
    if (!z) {
        close(fd);
        return NULL;
    }
    z->eng = Py_NewRef((PyObject *)e);
    z->name = Py_NewRef(path);
    z->loop = Py_NewRef(args[2]);
    z->executor = Py_NewRef(args[3]);
    z->size = (long long)st.st_size;
    z->blksize = st.st_blksize > 1 ? (long long)st.st_blksize : FALLBACK_BUFSIZE;
    z->pos = 0;
    z->fd = fd;
    z->closed = 0;
    z->nonblock = 1;
    PyObject_GC_Track(z);
    /* cls.__new__(cls), then its _lazy: the file object owns the descriptor from here. */
    PyTypeObject *type = (PyTypeObject *)cls;
    PyObject *f = type->tp_new(type, empty_tuple, NULL);
    if (!f || PyObject_SetAttr(f, str_lazy, (PyObject *)z) < 0) {
        Py_XDECREF(f);  /* (a finaliser would close the descriptor only if _lazy was set) */
        close(fd);
        f = NULL;
    }
    Py_DECREF(z);
    return f;
}

/* ---------------------------------------------------------------- the type */

static int Lazy_traverse(lazy_t *z, visitproc visit, void *arg)
{
    Py_VISIT(z->eng);
    Py_VISIT(z->name);
    Py_VISIT(z->loop);
    Py_VISIT(z->executor);
    return 0;
}

static int Lazy_clear(lazy_t *z)
{
    Py_CLEAR(z->eng);
    Py_CLEAR(z->name);
    Py_CLEAR(z->loop);
    Py_CLEAR(z->executor);
    return 0;
}

static void Lazy_dealloc(lazy_t *z)
{
    PyObject_GC_UnTrack(z);
    Lazy_clear(z);
    PyObject_GC_Del(z);
}

static PyObject *Lazy_repr(lazy_t *z)
{
    return PyUnicode_FromFormat("<LazyReader fd=%d name=%R pos=%lld size=%lld%s>", z->fd,
                                z->name ? z->name : Py_None, z->pos, z->size,
                                z->closed ? " closed" : "");
}

static PyMethodDef Lazy_methods[] = {
    {"engine", (PyCFunction)Lazy_engine, METH_NOARGS,
     "engine() -> the engine that opened the file while its loop runs and it is open, else "
     "the running loop's"},
    {"want", (PyCFunction)Lazy_want, METH_NOARGS,
     "want() -> what a read to the end asks for: one byte more than the size left"},
    {"take", (PyCFunction)(void (*)(void))Lazy_take, METH_FASTCALL,
     "take(res, want) -> bytes | None: what read_inline(fd, want, pos) returned, as read_rest "
     "returns it (the position moves past the bytes)"},
    {"read_rest", (PyCFunction)(void (*)(void))Lazy_read_rest, METH_FASTCALL,
     "read_rest(retry=False) -> bytes | False | None: the bytes from the position to the "
     "end, read inline; False when the budget is spent; None when the stack must read them "
     "(not cached, too large, the file grew, or closed). retry: said False before and the "
     "loop has turned once since (admitted past the renewed budget up to the grace)"},
    {"close_now", (PyCFunction)Lazy_close_now, METH_NOARGS,
     "close_now() -> bool: True if the descriptor is closed (inline now: the file is closed, "
     "or before); False if it cannot be closed inline (nothing done: the caller closes it "
     "through the engine)"},
    {"settle", (PyCFunction)Lazy_settle, METH_NOARGS,
     "settle(): clear the inline open's O_NONBLOCK (before the stack is built over fd)"},
    {NULL},
};

static PyMemberDef Lazy_members[] = {
    {"fd", T_INT, offsetof(lazy_t, fd), READONLY, NULL},
    {"name", T_OBJECT, offsetof(lazy_t, name), READONLY, NULL},
    {"size", T_LONGLONG, offsetof(lazy_t, size), READONLY, NULL},
    {"blksize", T_LONGLONG, offsetof(lazy_t, blksize), READONLY, NULL},
    {"loop", T_OBJECT, offsetof(lazy_t, loop), READONLY, NULL},
    {"executor", T_OBJECT, offsetof(lazy_t, executor), READONLY, NULL},
    {"pos", T_LONGLONG, offsetof(lazy_t, pos), 0, NULL},
    {"closed", T_BOOL, offsetof(lazy_t, closed), 0, NULL},
    {NULL},
};

static PyTypeObject LazyReader_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aionative._core.LazyReader",
    .tp_doc = "A lazy rb file's state before its stack exists (made by Engine.open_lazy).",
    .tp_basicsize = sizeof(lazy_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)Lazy_dealloc,
    .tp_traverse = (traverseproc)Lazy_traverse,
    .tp_clear = (inquiry)Lazy_clear,
    .tp_repr = (reprfunc)Lazy_repr,
    .tp_methods = Lazy_methods,
    .tp_members = Lazy_members,
};

/* ---------------------------------------------------------------- ready */

/* An awaitable whose await returns `value` at once, without suspending: what RbOpen's
 * __aenter__, __aexit__ and __await__ return when the engine did the work inline. Its own
 * iterator; the first step ends it (done_send / done_next, as LineGate's step). */
typedef struct {
    PyObject_HEAD
    PyObject *value;  /* NULL once taken */
} ready_t;

static PyTypeObject Ready_Type;

static PyObject *ready_new(PyObject *value)
{
    ready_t *r = PyObject_New(ready_t, &Ready_Type);
    if (r)
        r->value = Py_NewRef(value);
    return (PyObject *)r;
}

static void Ready_dealloc(ready_t *r)
{
    Py_XDECREF(r->value);
    PyObject_Free(r);
}

static PyObject *Ready_self(PyObject *r)
{
    return Py_NewRef(r);
}

static PySendResult Ready_send(ready_t *r, PyObject *arg, PyObject **result)
{
    return done_send(&r->value, result);
}

static PyObject *Ready_next(ready_t *r)
{
    return done_next(&r->value);
}

static PyAsyncMethods Ready_async = {
    .am_await = Ready_self,
    .am_send = (sendfunc)Ready_send,
};

static PyTypeObject Ready_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aionative._core.Ready",
    .tp_doc = "An awaitable that returns its value at once (RbOpen's, when done inline).",
    .tp_basicsize = sizeof(ready_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Ready_dealloc,
    .tp_as_async = &Ready_async,
    .tp_iter = Ready_self,
    .tp_iternext = (iternextfunc)Ready_next,
};

/* ---------------------------------------------------------------- RbOpen */

/* What open(path, "rb") returns with every other argument at its default: aiofiles'
 * AiofilesContextManager for that case (registered as one). `await` / `async with` open the
 * file once (again: the same file): a regular file the dentry cache holds opens lazily inline
 * (lazy_open); anything else goes to the Python coroutine configure() named, which builds the
 * file object and stores it in _obj. The exit closes a lazy file inline (close_now), else
 * awaits its close(). */
typedef struct {
    PyObject_HEAD
    PyObject *file;       /* open()'s file, loop and executor, until the open (then NULL) */
    PyObject *loop;
    PyObject *executor;
    PyObject *obj;        /* the file once opened; NULL again after the exit */
} rbopen_t;

static PyTypeObject RbOpen_Type;
static PyObject *rb_cls, *rb_rest;  /* set by configure(): AsyncBufferedReader, its way */

/* rb_open(file, loop, executor) -> RbOpen */
static PyObject *rb_open(PyObject *mod, PyObject *const *args, Py_ssize_t n)
{
    if (n != 3) {
        PyErr_Format(PyExc_TypeError, "rb_open() takes exactly 3 arguments (%zd given)", n);
        return NULL;
    }
    if (!rb_cls) {
        PyErr_SetString(PyExc_RuntimeError, "aionative._core.configure() was not called");
        return NULL;
    }
    rbopen_t *cm = PyObject_GC_New(rbopen_t, &RbOpen_Type);
    if (!cm)
        return NULL;
    cm->file = Py_NewRef(args[0]);
    cm->loop = Py_NewRef(args[1]);
    cm->executor = Py_NewRef(args[2]);
    cm->obj = NULL;
    PyObject_GC_Track(cm);
    return (PyObject *)cm;
}

/* configure()'s part (module.c): get_engine (aionative._engine.get_engine), the file class a
 * lazy open makes, and the coroutine function rest(cm, got, file, loop, executor) for every
 * other outcome (`got`: lazy_open's (fd, path) or None), which sets cm._obj to the file it
 * returns. Each NULL: unchanged. */
void lazy_configure(PyObject *get_engine, PyObject *cls, PyObject *rest)
{
    if (get_engine)
        Py_XSETREF(get_engine_fn, Py_NewRef(get_engine));
    if (cls)
        Py_XSETREF(rb_cls, Py_NewRef(cls));
    if (rest)
        Py_XSETREF(rb_rest, Py_NewRef(rest));
}

/* The open, for __aenter__ (an awaitable) and __await__ (its iterator). */
static PyObject *rb_enter(rbopen_t *cm, int iterator)
{
    if (cm->obj && cm->obj != Py_None)  /* (_obj set to None from Python: no file) */
        return ready_new(cm->obj);
    if (!cm->file) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return NULL;
    }
    PyObject *file = cm->file, *loop = cm->loop, *executor = cm->executor;  /* owned here */
    cm->file = cm->loop = cm->executor = NULL;
    PyObject *res = NULL, *got = NULL;
    PyObject *path = PyUnicode_CheckExact(file) ? Py_NewRef(file) : PyOS_FSPath(file);
    if (!path)
        goto done;
    if (PyUnicode_CheckExact(path)) {  /* (a bytes path-like: open_file's way) */
        PyObject *eng = running_engine();
        if (!eng)
            goto done;
        if (Py_TYPE(eng) == &Engine_Type) {  /* (the threads backend: open_file's way) */
            PyObject *a[4] = {path, rb_cls, loop, executor};
            got = lazy_open((engine_t *)eng, a, 4);
        }
        Py_DECREF(eng);
        if (!got && PyErr_Occurred())
            goto done;
    }
    if (got && Py_TYPE(got) == (PyTypeObject *)rb_cls) {
        cm->obj = got;
        got = NULL;
        res = ready_new(cm->obj);
        goto done;
    }
    PyObject *a[5] = {(PyObject *)cm, got ? got : Py_None, file, loop, executor};
    PyObject *coro = PyObject_Vectorcall(rb_rest, a, 5, NULL);
    if (!coro && got && PyTuple_CheckExact(got))
        close(PyLong_AsLong(PyTuple_GET_ITEM(got, 0)));  /* the descriptor lazy_open opened */
    if (!coro || !iterator) {
        res = coro;
    } else {
        unaryfunc await = Py_TYPE(coro)->tp_as_async ? Py_TYPE(coro)->tp_as_async->am_await
                                                     : NULL;
        res = await ? await(coro) : PyErr_Format(PyExc_TypeError, "%R is not awaitable", coro);
        Py_DECREF(coro);
    }
done:
    Py_XDECREF(got);
    Py_XDECREF(path);
    Py_DECREF(file);
    Py_DECREF(loop);
    Py_DECREF(executor);
    return res;
}

static PyObject *RbOpen_await(rbopen_t *cm)
{
    return rb_enter(cm, 1);
}

static PyObject *RbOpen_aenter(rbopen_t *cm, PyObject *unused)
{
    return rb_enter(cm, 0);
}

/* __aexit__(exc_type, exc, tb): a lazy file no other call is using closes inline now;
 * otherwise the file's close() coroutine. */
static PyObject *RbOpen_aexit(rbopen_t *cm, PyObject *const *args, Py_ssize_t n)
{
    if (n != 3) {
        PyErr_Format(PyExc_TypeError, "__aexit__() takes exactly 3 arguments (%zd given)", n);
        return NULL;
    }
    PyObject *obj = cm->obj;  /* owned here */
    cm->obj = NULL;
    if (!obj || obj == Py_None) {
        Py_XDECREF(obj);
        return ready_new(Py_None);
    }
    PyObject *res = NULL;
    PyObject *lazy = PyObject_GetAttr(obj, str_lazy);
    if (!lazy)
        goto done;
    int closed = 0;
    if (Py_TYPE(lazy) == &LazyReader_Type) {
        PyObject *busy = PyObject_GetAttr(obj, str_busy);
        int b = busy ? PyObject_IsTrue(busy) : -1;
        Py_XDECREF(busy);
        PyObject *r = b ? NULL : Lazy_close_now((lazy_t *)lazy, NULL);
        closed = r == Py_True;
        Py_XDECREF(r);
        if (b < 0 || (!b && !r)) {
            Py_DECREF(lazy);
            goto done;
        }
    }
    Py_DECREF(lazy);
    res = closed ? ready_new(Py_None) : PyObject_CallMethodNoArgs(obj, str_close);
done:
    Py_DECREF(obj);
    return res;
}

/* close(): forget the arguments of an open never awaited (nothing was opened). */
static PyObject *RbOpen_close(rbopen_t *cm, PyObject *unused)
{
    Py_CLEAR(cm->file);
    Py_CLEAR(cm->loop);
    Py_CLEAR(cm->executor);
    Py_RETURN_NONE;
}

static int RbOpen_traverse(rbopen_t *cm, visitproc visit, void *arg)
{
    Py_VISIT(cm->file);
    Py_VISIT(cm->loop);
    Py_VISIT(cm->executor);
    Py_VISIT(cm->obj);
    return 0;
}

static int RbOpen_clear(rbopen_t *cm)
{
    RbOpen_close(cm, NULL);
    Py_CLEAR(cm->obj);
    return 0;
}

static void RbOpen_dealloc(rbopen_t *cm)
{
    PyObject_GC_UnTrack(cm);
    RbOpen_clear(cm);
    PyObject_GC_Del(cm);
}

static PyMethodDef RbOpen_methods[] = {
    {"__aenter__", (PyCFunction)RbOpen_aenter, METH_NOARGS,
     "the file, opened on the first entry or await (inline when it can be)"},
    {"__aexit__", (PyCFunction)(void (*)(void))RbOpen_aexit, METH_FASTCALL,
     "close the file (inline when it is lazy and idle)"},
    {"close", (PyCFunction)RbOpen_close, METH_NOARGS,
     "close(): forget an open never awaited (nothing was opened)"},
    {NULL},
};

static PyMemberDef RbOpen_members[] = {
    {"_obj", T_OBJECT, offsetof(rbopen_t, obj), 0, "the file once opened"},
    {NULL},
};

static PyAsyncMethods RbOpen_async = {.am_await = (unaryfunc)RbOpen_await};

static PyTypeObject RbOpen_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aionative._core.RbOpen",
    .tp_doc = "What open(path, \"rb\") returns (an AiofilesContextManager): await it or use "
              "it with async with.",
    .tp_basicsize = sizeof(rbopen_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)RbOpen_dealloc,
    .tp_traverse = (traverseproc)RbOpen_traverse,
    .tp_clear = (inquiry)RbOpen_clear,
    .tp_as_async = &RbOpen_async,
    .tp_methods = RbOpen_methods,
    .tp_members = RbOpen_members,
};

static PyMethodDef lazy_functions[] = {
    {"rb_open", (PyCFunction)(void (*)(void))rb_open, METH_FASTCALL,
     "rb_open(file, loop, executor) -> RbOpen: what open(file, \"rb\") returns"},
    {NULL},
};

int lazy_module_init(PyObject *m)
{
    if (!(str_lazy = PyUnicode_InternFromString("_lazy")) ||
        !(str_busy = PyUnicode_InternFromString("_busy")) ||
        !(str_close = PyUnicode_InternFromString("close")) ||
        !(empty_tuple = PyTuple_New(0)) || PyType_Ready(&LazyReader_Type) < 0 ||
        PyType_Ready(&Ready_Type) < 0 || PyType_Ready(&RbOpen_Type) < 0 ||
        PyModule_AddFunctions(m, lazy_functions) < 0 ||
        PyModule_AddObjectRef(m, "RbOpen", (PyObject *)&RbOpen_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "LazyReader", (PyObject *)&LazyReader_Type);
}
