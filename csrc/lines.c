/* The step of `async for line in f` when the file's window is known to hold the next line.
 *
 * An `async def __anext__` costs a coroutine (allocated, run, freed) per line, as much again
 * as the builtin's readline itself. A file's __anext__ is instead a LineStep: a method
 * descriptor called without a Python frame. While the file's LineGate has budget (lines whose
 * ends the window holds, granted by the Python slow path after checking the window), it calls
 * the synchronous file's readline and returns the gate itself as an awaitable that is already
 * done: awaiting it gives the line. Otherwise it calls the slow path (a coroutine: the lock,
 * fetches, end of file). Any other call on the file sets the budget to 0.
 *
 * The gate's `room` does the same for read(n) on a read-only binary file: the bytes the
 * window holds past the position, less one buffer (a BufferedReader takes at most a buffer
 * more from its raw file than it hands out), granted by the slow read. A read of up to
 * `room` bytes calls the synchronous file's read without the lock or a fetch (the Python
 * read's first lines: a read must stay a coroutine function). A line step ends the room and
 * a read the line budget: each moves the position by an amount the other's count does not
 * know.
 */
#include "module.h"  /* Python.h first */
#include "lines.h"

#include <structmember.h>

typedef struct {
    PyObject_HEAD
    Py_ssize_t budget;  /* readline() calls the window is known to satisfy */
    Py_ssize_t room;    /* bytes read(n) calls may take without the window running out */
    PyObject *readline; /* the synchronous file's bound readline */
    PyObject *read;     /* … and its bound read (None if not given) */
    PyObject *value;    /* the line of the step not awaited yet, or NULL */
} gate_t;

static PyObject *gate_attr;  /* "_gate" */

/* --- LineGate: the per-file budget, and the awaitable of a step done inline ------------ */

static PyObject *gate_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *readline, *read = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:LineGate", &readline, &read))
        return NULL;
    gate_t *g = (gate_t *)type->tp_alloc(type, 0);
    if (g) {
        g->readline = Py_NewRef(readline);
        g->read = Py_NewRef(read);
    }
    return (PyObject *)g;
}

static int gate_traverse(gate_t *g, visitproc visit, void *arg)
{
    Py_VISIT(g->readline);
    Py_VISIT(g->read);
    Py_VISIT(g->value);
    return 0;
}

static int gate_clear(gate_t *g)
{
    Py_CLEAR(g->readline);
    Py_CLEAR(g->read);
    Py_CLEAR(g->value);
    return 0;
}

static void gate_dealloc(gate_t *g)
{
    PyObject_GC_UnTrack(g);
    gate_clear(g);
    Py_TYPE(g)->tp_free(g);
}

static PyObject *gate_await(gate_t *g)
{
    return Py_NewRef(g);
}

/* The await of a step: done at once, its value the line (None if there is none pending). */
static PySendResult gate_send(gate_t *g, PyObject *arg, PyObject **result)
{
    return done_send(&g->value, result);
}

/* For callers that iterate instead of sending: StopIteration carries the line. */
static PyObject *gate_next(gate_t *g)
{
    return done_next(&g->value);
}

static PyMemberDef gate_members[] = {
    {"budget", T_PYSSIZET, offsetof(gate_t, budget), 0,
     "readline() calls the window is known to satisfy (0: take the slow path)"},
    {"room", T_PYSSIZET, offsetof(gate_t, room), 0,
     "bytes read(n) calls may take from the window (0: take the slow path)"},
    {"readline", T_OBJECT, offsetof(gate_t, readline), READONLY,
     "the synchronous file's readline"},
    {"read", T_OBJECT, offsetof(gate_t, read), READONLY, "the synchronous file's read"},
    {NULL},
};

static PyAsyncMethods gate_async = {
    .am_await = (unaryfunc)gate_await,
    .am_send = (sendfunc)gate_send,
};

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aionative._core.LineGate",
    .tp_doc = "LineGate(readline, read=None): a file's async-for and read budgets, and the "
              "awaitable of a line step done inline",
    .tp_basicsize = sizeof(gate_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = gate_new,
    .tp_traverse = (traverseproc)gate_traverse,
    .tp_clear = (inquiry)gate_clear,
    .tp_dealloc = (destructor)gate_dealloc,
    .tp_as_async = &gate_async,
    .tp_iternext = (iternextfunc)gate_next,
    .tp_members = gate_members,
};

/* --- LineStep: a file class's __anext__ -------------------------------------------------- */

static PyObject *step_call_file(fastpath_t *s, PyObject *file)
{
    PyObject *obj = PyObject_GetAttr(file, gate_attr);
    if (!obj)
        return NULL;
    if (Py_IS_TYPE(obj, &GateType)) {
        gate_t *g = (gate_t *)obj;
        if (g->budget > 0 && !g->value) {
            g->budget--;
            g->room = 0;
            PyObject *line = PyObject_CallNoArgs(g->readline);
            if (!line) {
                g->budget = 0;
                Py_DECREF(obj);
                return NULL;
            }
            int nonempty = PyObject_IsTrue(line);
            if (nonempty > 0) {
                g->value = line;
                return obj;  /* the gate, holding the line: awaiting it gives the line */
            }
            Py_DECREF(line);
            g->budget = 0;   /* end of file (or an error): the slow path says so */
            if (nonempty < 0) {
                Py_DECREF(obj);
                return NULL;
            }
        }
    }
    Py_DECREF(obj);
    return PyObject_CallOneArg(s->slow, file);
}

static PyObject *step_vectorcall(fastpath_t *s, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 1 || (kwnames && PyTuple_GET_SIZE(kwnames)))
        return PyErr_Format(PyExc_TypeError, "__anext__() takes no arguments");
    return step_call_file(s, args[0]);
}

FASTPATH_TYPE(StepType, "aionative._core.LineStep",
              "LineStep(slow): a file class's __anext__; the line from the file's LineGate "
              "when its budget allows, else slow(file)",
              step_vectorcall);

int lines_module_init(PyObject *m)
{
    gate_attr = PyUnicode_InternFromString("_gate");
    if (!gate_attr || PyType_Ready(&GateType) < 0 || PyType_Ready(&StepType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "LineGate", (PyObject *)&GateType) < 0 ||
        PyModule_AddObjectRef(m, "LineStep", (PyObject *)&StepType) < 0)
        return -1;
    return 0;
}
