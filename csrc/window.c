/* WindowRaw.readinto's common case in C: the file layer's raw read, served from its window.
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

#include <string.h>

static PyObject *s_kind, *s_closed, *s_readable, *s_pos, *s_wstart, *s_buf;

/* The attribute as a C integer; -1 (no error set) if it is not an int that fits. */
static Py_ssize_t int_attr(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v)
        return -2;
    Py_ssize_t r = PyLong_CheckExact(v) ? PyLong_AsSsize_t(v) : -1;
    Py_DECREF(v);
    if (r == -1 && PyErr_Occurred())
        PyErr_Clear();
    return r < -1 ? -1 : r;
}

/* The raw file's state the copy needs; 0 when the Python path must take the call (-1: an
 * error is set). */
static int window_state(PyObject *raw, Py_ssize_t *pos, Py_ssize_t *wstart)
{
    Py_ssize_t kind = int_attr(raw, s_kind);
    if (kind != 0)  /* REGULAR */
        return kind == -2 ? -1 : 0;
    PyObject *flag = PyObject_GetAttr(raw, s_closed);
    if (!flag)
        return -1;
    int closed = flag != Py_False;
    Py_DECREF(flag);
    if (closed)
        return 0;
    if (!(flag = PyObject_GetAttr(raw, s_readable)))
        return -1;
    int readable = flag == Py_True;
    Py_DECREF(flag);
    if (!readable)
        return 0;
    *pos = int_attr(raw, s_pos);
    *wstart = int_attr(raw, s_wstart);
    if (*pos == -2 || *wstart == -2)
        return -1;
    return *pos >= 0 && *wstart >= 0 && *pos >= *wstart;
}

/* The copy, or 0 when the Python path must take the call (-1: an error is set). The caller's
 * buffer is taken first: exporting it may run Python code (a __buffer__ method), which could
 * change the window; nothing runs between reading the window and copying from it. */
static Py_ssize_t window_copy(PyObject *raw, PyObject *b)
{
    Py_buffer view;
    if (PyObject_GetBuffer(b, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();  /* the Python path raises what FileIO would */
        return 0;
    }
    Py_ssize_t pos = 0, wstart = 0, got = 0;
    int ok = view.len > 0 ? window_state(raw, &pos, &wstart) : 0;
    PyObject *buf = ok > 0 ? PyObject_GetAttr(raw, s_buf) : NULL;
    if (ok > 0 && !buf)
        ok = -1;
    if (buf) {
        const char *src = NULL;
        Py_ssize_t have = 0;
        if (PyBytes_CheckExact(buf)) {
            src = PyBytes_AS_STRING(buf);
            have = PyBytes_GET_SIZE(buf);
        } else if (PyByteArray_CheckExact(buf)) {
            src = PyByteArray_AS_STRING(buf);
            have = PyByteArray_GET_SIZE(buf);
        }
        if (src && view.len <= have - (pos - wstart)) {
            memcpy(view.buf, src + (pos - wstart), (size_t)view.len);
            got = view.len;
        }
        Py_DECREF(buf);
    }
    PyBuffer_Release(&view);
    if (ok < 0)
        return -1;
    if (!got)
        return 0;
    PyObject *npos = PyLong_FromSsize_t(pos + got);
    if (!npos || PyObject_SetAttr(raw, s_pos, npos) < 0) {
        Py_XDECREF(npos);
        return -1;
    }
    Py_DECREF(npos);
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

int window_module_init(PyObject *m)
{
    if (!(s_kind = PyUnicode_InternFromString("kind")) ||
        !(s_closed = PyUnicode_InternFromString("closed")) ||
        !(s_readable = PyUnicode_InternFromString("_readable")) ||
        !(s_pos = PyUnicode_InternFromString("pos")) ||
        !(s_wstart = PyUnicode_InternFromString("wstart")) ||
        !(s_buf = PyUnicode_InternFromString("buf")) || PyType_Ready(&WreadType) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "WindowReadinto", (PyObject *)&WreadType);
}
