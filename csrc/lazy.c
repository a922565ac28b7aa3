/* A lazy `rb` file: what aionative._files.AsyncBufferedReader holds before its stack exists
 * (the descriptor, the position, the size), and the three calls that serve
 * `async with open(path, "rb") as f: data = await f.read()` without building it: the open
 * (Engine.open_lazy), the read to the end (LazyReader.read_rest) and the close
 * (LazyReader.close_now), each one call from Python into the inline fast path.
 *
 * The descriptor keeps the O_NONBLOCK of the inline open until the stack is built
 * (LazyReader.settle): the reads here are preadv2(RWF_NOWAIT), which it does not change, and
 * the descriptor reaches nobody else before then. The LazyReader never closes it: the file
 * object closes it (close, or its finaliser).
 */
#include "engine.h"  /* Python.h first: it defines _GNU_SOURCE */

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

static PyObject *str_lazy, *get_engine_fn, *empty_tuple;

/* ---------------------------------------------------------------- the engine */

/* The engine that opened the file while its loop runs and it is open; else the running
 * loop's (aionative._engine.get_engine(): close_engine(), or the file used from another
 * loop). A new reference. */
static PyObject *lazy_engine(lazy_t *z)
{
    engine_t *e = (engine_t *)z->eng;
    PyObject *loop = running_loop_borrowed();
    if (loop && !e->closed && e->loop_ref && PyWeakref_GetObject(e->loop_ref) == loop)
        return Py_NewRef(z->eng);
    if (!get_engine_fn) {
        PyObject *mod = PyImport_ImportModule("aionative._engine");
        if (!mod)
            return NULL;
        get_engine_fn = PyObject_GetAttrString(mod, "get_engine");
        Py_DECREF(mod);
        if (!get_engine_fn)
            return NULL;
    }
    return PyObject_CallNoArgs(get_engine_fn);
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

PyTypeObject LazyReader_Type = {
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

int lazy_module_init(PyObject *m)
{
    if (!(str_lazy = PyUnicode_InternFromString("_lazy")) ||
        !(empty_tuple = PyTuple_New(0)) || PyType_Ready(&LazyReader_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "LazyReader", (PyObject *)&LazyReader_Type);
}
