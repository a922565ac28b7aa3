/* module.c: the module's helpers the other units share: done awaitables and the fast-path
 * method descriptor (FASTPATH_TYPE). */
#ifndef AIONATIVE_MODULE_H
#define AIONATIVE_MODULE_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stddef.h>

/* The await of an awaitable done at once, its value taken from *slot (None when
 * empty): am_send's form, and tp_iternext's (StopIteration carries the value). */
PySendResult done_send(PyObject **slot, PyObject **result);
PyObject *done_next(PyObject **slot);

/* A method descriptor with a C fast path that falls back on a Python function
 * (lines.c's LineStep, window.c's WindowReadinto). An instance holds `slow`; its type, made
 * by FASTPATH_TYPE, supplies the vectorcall `call`. As a class attribute it gives bound
 * methods; method calls skip that (Py_TPFLAGS_METHOD_DESCRIPTOR) and pass the instance as
 * the first argument. */
typedef struct {
    PyObject_HEAD
    PyObject *slow;
    vectorcallfunc vectorcall;
} fastpath_t;
PyObject *fastpath_new(PyTypeObject *type, PyObject *args, vectorcallfunc call);
PyObject *fastpath_get(PyObject *self, PyObject *obj, PyObject *type);
int fastpath_traverse(fastpath_t *f, visitproc visit, void *arg);
int fastpath_clear(fastpath_t *f);
void fastpath_dealloc(fastpath_t *f);
/* Defines `static PyTypeObject var` and its tp_new: var(slow) makes an instance whose calls
 * go to `call` (a vectorcallfunc taking the fastpath_t). */
#define FASTPATH_TYPE(var, name, doc, call)                                                \
static PyObject *var##_new(PyTypeObject *type, PyObject *args, PyObject *kw)               \
{                                                                                          \
    return fastpath_new(type, args, (vectorcallfunc)(call));                               \
}                                                                                          \
static PyTypeObject var = {                                                                \
    PyVarObject_HEAD_INIT(NULL, 0)                                                         \
    .tp_name = (name),                                                                     \
    .tp_doc = (doc),                                                                       \
    .tp_basicsize = sizeof(fastpath_t),                                                    \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |      \
                Py_TPFLAGS_METHOD_DESCRIPTOR,                                              \
    .tp_vectorcall_offset = offsetof(fastpath_t, vectorcall),                              \
    .tp_call = PyVectorcall_Call,                                                          \
    .tp_new = var##_new,                                                                   \
    .tp_descr_get = fastpath_get,                                                          \
    .tp_traverse = (traverseproc)fastpath_traverse,                                        \
    .tp_clear = (inquiry)fastpath_clear,                                                   \
    .tp_dealloc = (destructor)fastpath_dealloc,                                            \
}

#endif
