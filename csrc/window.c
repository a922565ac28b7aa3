/* WindowBase, the raw layer's window state in C, and WindowRaw.readinto's common case.
 *
 * WindowRaw (aionative/_raw.py), the raw file under every aionative.open stack, derives from
 * WindowBase: an io.RawIOBase (CPython's _io._RawIOBase, made its base when the module is
 * initialised) whose struct holds the window C reads — the bytes (`buf`), the file offset of
 * their first byte (`wstart`), the position (`pos`), the file's kind, whether the mode reads,
 * and whether close() has run — exposed to Python as members of those names.
 *
 * CPython's BufferedReader, under every binary read of an aionative.open file, calls its raw
 * layer's readinto with a memoryview of its buffer (or of the result). In Python that call
 * costs a frame, two memoryviews and two slices: as much as the rest of a 4 KiB read. The
 * class's readinto is instead a WindowReadinto: a method descriptor that, when the raw file
 * is a regular file open for reading and its window holds all the bytes asked for at the
 * position, copies them and moves the position. Anything else — a stream, a closed file, a
 * read the window does not cover, a buffer that is not a writable contiguous one — calls the
 * Python readinto, which raises the errors and takes the misses as before.
 */
#include "module.h"  /* Python.h first */
#include "window.h"

#include <stdalign.h>
#include <string.h>
#include <structmember.h>

#define KIND_REGULAR 0  /* _raw.REGULAR */

/* Every member is an object that is never NULL (T_OBJECT_EX: the interpreter's specialised
 * attribute access serves only those, and the raw layer's Python code reads them often). */
typedef struct {
    PyObject *buf;       /* the window's bytes (bytes or bytearray): file bytes
                            [wstart, wstart + len(buf)) of a regular file */
    PyObject *pos;       /* the file position (an int) */
    PyObject *wstart;    /* (an int) */
    PyObject *kind;      /* _raw.REGULAR or _raw.STREAM (an int) */
    PyObject *readable;  /* the mode reads (a bool) */
    PyObject *shut;      /* close() has run: IOBase's `closed`, mirrored by WindowRaw.close */
} window_t;

#define WINDOW_FIELDS 6  /* window_t is this many object pointers */
_Static_assert(sizeof(window_t) == WINDOW_FIELDS * sizeof(PyObject *), "window_t's fields");

/* The base's struct comes first; the window follows it, at an offset known only once the
 * base (a static type before Python 3.12, a heap type from 3.12) is at hand. */
static PyTypeObject *raw_base, *WindowBase_Type;
static Py_ssize_t window_offset;
#define WIN(o) ((window_t *)((char *)(o) + window_offset))

static PyObject *no_args;  /* () */

/* The base's tp_new is given no arguments (from 3.12 it is object's, which refuses any when
 * a subclass overrides tp_new): WindowRaw.__init__ takes them. */
static PyObject *wb_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *o = raw_base->tp_new(type, no_args, NULL);
    if (o) {
        window_t *w = WIN(o);
        w->buf = PyBytes_FromStringAndSize(NULL, 0);  /* (the empty bytes: no failure) */
        w->pos = PyLong_FromLong(0);                  /* (a small int: no failure) */
        w->wstart = PyLong_FromLong(0);
        w->kind = PyLong_FromLong(KIND_REGULAR);
        w->readable = Py_NewRef(Py_False);
        w->shut = Py_NewRef(Py_False);
    }
    return o;
}

static int wb_traverse(PyObject *o, visitproc visit, void *arg)
{
    PyObject **field = (PyObject **)WIN(o);
    for (int i = 0; i < WINDOW_FIELDS; i++)
        Py_VISIT(field[i]);
    return raw_base->tp_traverse(o, visit, arg);
}

/* The type whose tp_dealloc frees a WindowBase after its own part is released: the first of
 * _io._RawIOBase and its bases whose tp_dealloc is not the one every class statement's type
 * has (from Python 3.12, _RawIOBase is a heap type that has that one: calling it from here
 * would find this dealloc again). That is _io._IOBase's. */
static PyTypeObject *freeing_base;

/* Called by the subclass's dealloc (subtype_dealloc) once the finaliser, IOBase's, which
 * closes the file, has run. A heap type's dealloc releases its instance's reference to its
 * type: _IOBase's does from 3.12, where it is a heap type; before that, this one does. */
static void wb_dealloc(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject **field = (PyObject **)WIN(o);
    for (int i = 0; i < WINDOW_FIELDS; i++)
        Py_CLEAR(field[i]);
    freeing_base->tp_dealloc(o);
    if (!(freeing_base->tp_flags & Py_TPFLAGS_HEAPTYPE))
        Py_DECREF(tp);
}

static int find_freeing_base(void)
{
    PyObject *probe = PyObject_CallFunction((PyObject *)&PyType_Type, "s(O){}",
                                            "WindowBaseProbe", (PyObject *)&PyBaseObject_Type);
    if (!probe)
        return -1;
    destructor class_dealloc = ((PyTypeObject *)probe)->tp_dealloc;
    Py_DECREF(probe);
    freeing_base = raw_base;
    while (freeing_base && freeing_base->tp_dealloc == class_dealloc)
        freeing_base = freeing_base->tp_base;
    if (!freeing_base || !freeing_base->tp_dealloc) {
        PyErr_SetString(PyExc_TypeError, "_io._RawIOBase has no dealloc WindowBase can chain to");
        return -1;
    }
    return 0;
}

static PyMemberDef wb_members[] = {  /* offsets from window_t's: window_offset is added */
    {"buf", T_OBJECT_EX, offsetof(window_t, buf), 0,
     "the window: file bytes [wstart, wstart + len(buf)) of a regular file; a stream's "
     "unread bytes from buf[rpos:]"},
    {"pos", T_OBJECT_EX, offsetof(window_t, pos), 0, "the file position"},
    {"wstart", T_OBJECT_EX, offsetof(window_t, wstart), 0, "the file offset of buf[0]"},
    {"kind", T_OBJECT_EX, offsetof(window_t, kind), 0, "REGULAR or STREAM"},
    {"_readable", T_OBJECT_EX, offsetof(window_t, readable), 0, "the mode reads"},
    {"_shut", T_OBJECT_EX, offsetof(window_t, shut), 0, "close() has run"},
    {NULL},
};

/* An exact int member as a C integer; -1 when it is anything else (or negative). */
static Py_ssize_t int_field(PyObject *v)
{
    if (!v || !PyLong_CheckExact(v))
        return -1;
    Py_ssize_t r = PyLong_AsSsize_t(v);
    if (r == -1 && PyErr_Occurred())
        PyErr_Clear();  /* (past Py_ssize_t: the Python path) */
    return r;
}

/* The raw file's window, when the copy may serve the read: a regular file open for reading,
 * not closed, its position at or past the window's start; NULL when the Python path must. */
static window_t *window_state(PyObject *raw, Py_ssize_t *pos, Py_ssize_t *wstart)
{
    if (!WindowBase_Type || !PyObject_TypeCheck(raw, WindowBase_Type))
        return NULL;
    window_t *w = WIN(raw);
    if (int_field(w->kind) != KIND_REGULAR || w->shut != Py_False || w->readable != Py_True ||
            !w->buf)  /* (a member deleted from Python: the Python path raises) */
        return NULL;
    *pos = int_field(w->pos);
    *wstart = int_field(w->wstart);
    return *pos >= 0 && *wstart >= 0 && *pos >= *wstart ? w : NULL;
}

/* The copy, or 0 when the Python path must take the call. The caller's buffer is taken
 * first: exporting it may run Python code (a __buffer__ method), which could change the
 * window; nothing runs between reading the window and copying from it. */
static Py_ssize_t window_copy(PyObject *raw, PyObject *b)
{
    Py_buffer view;
    if (PyObject_GetBuffer(b, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();  /* the Python path raises what FileIO would */
        return 0;
    }
    Py_ssize_t pos = 0, wstart = 0, got = 0;
    window_t *w = view.len > 0 ? window_state(raw, &pos, &wstart) : NULL;
    if (w) {
        const char *src = NULL;
        Py_ssize_t have = 0;
        if (PyBytes_CheckExact(w->buf)) {
            src = PyBytes_AS_STRING(w->buf);
            have = PyBytes_GET_SIZE(w->buf);
        } else if (PyByteArray_CheckExact(w->buf)) {
            src = PyByteArray_AS_STRING(w->buf);
            have = PyByteArray_GET_SIZE(w->buf);
        }
        if (src && view.len <= have - (pos - wstart)) {
            PyObject *npos = PyLong_FromSsize_t(pos + view.len);
            if (!npos) {
                PyBuffer_Release(&view);
                return -1;
            }
            memcpy(view.buf, src + (pos - wstart), (size_t)view.len);
            got = view.len;
            Py_SETREF(w->pos, npos);
        }
    }
    PyBuffer_Release(&view);
    return got;
}

static PyObject *wread_vectorcall(fastpath_t *w, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n == 2 && !kwnames) {
        Py_ssize_t got = window_copy(args[0], args[1]);
        if (got < 0)
            return NULL;
        if (got > 0)
            return PyLong_FromSsize_t(got);
    }
    return PyObject_Vectorcall(w->slow, args, nargsf, kwnames);
}

FASTPATH_TYPE(WreadType, "aionative._core.WindowReadinto",
              "WindowReadinto(slow): WindowRaw.readinto; copies from the window when it holds "
              "everything asked for at the position of a regular file, else slow(raw, b)",
              wread_vectorcall);

/* WindowBase: a subclass of _io._RawIOBase, with window_t after the base's struct. */
static int window_base_init(PyObject *m)
{
    /* _io, part of every CPython, holds the C base of io.RawIOBase. */
    PyObject *io = PyImport_ImportModule("_io");
    if (!io)
        return -1;
    raw_base = (PyTypeObject *)PyObject_GetAttrString(io, "_RawIOBase");
    Py_DECREF(io);
    if (!raw_base)
        return -1;
    if (!PyType_Check(raw_base) || !raw_base->tp_new || !raw_base->tp_traverse ||
            raw_base->tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "_io._RawIOBase is not the type WindowBase extends");
        return -1;
    }
    if (find_freeing_base() < 0)
        return -1;
    window_offset = (raw_base->tp_basicsize + (Py_ssize_t)alignof(window_t) - 1) &
                    ~((Py_ssize_t)alignof(window_t) - 1);
    static int offsets_added;  /* (once: the offsets stay added) */
    if (!offsets_added)
        for (PyMemberDef *d = wb_members; d->name; d++)
            d->offset += window_offset;
    offsets_added = 1;
    Py_CLEAR(WindowBase_Type);
    PyType_Slot slots[] = {
        {Py_tp_doc, "The raw layer's window state (WindowRaw's base): the members C reads."},
        {Py_tp_new, wb_new},
        {Py_tp_traverse, wb_traverse},
        {Py_tp_dealloc, wb_dealloc},
        {Py_tp_members, wb_members},
        {0, NULL},
    };
    PyType_Spec spec = {
        .name = "aionative._core.WindowBase",
        .basicsize = (int)(window_offset + (Py_ssize_t)sizeof(window_t)),
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
        .slots = slots,
    };
    WindowBase_Type = (PyTypeObject *)PyType_FromSpecWithBases(&spec, (PyObject *)raw_base);
    if (!WindowBase_Type)
        return -1;
    return PyModule_AddObjectRef(m, "WindowBase", (PyObject *)WindowBase_Type);
}

int window_module_init(PyObject *m)
{
    if (!no_args && !(no_args = PyTuple_New(0)))
        return -1;
    if (PyType_Ready(&WreadType) < 0 ||
        PyModule_AddObjectRef(m, "WindowReadinto", (PyObject *)&WreadType) < 0)
        return -1;
    /* A Python whose _io._RawIOBase cannot be extended has no WindowBase: the raw layer then
     * keeps its state in Python (tests/engine/test_internals.py's canary says so loudly). */
    if (window_base_init(m) < 0) {
        PyErr_Clear();
        Py_CLEAR(WindowBase_Type);
    }
    return 0;
}
