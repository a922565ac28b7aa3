/* aionative._core: module initialisation, probes, counters and the fault-injection switch.
 * The engine lives in engine.c (the type, its life cycle), submit.c, complete.c, loop.c,
 * methods.c and stats.c (engine.h lists them), its inline fast path in inline.c; the kernel
 * interfaces in uring.c and kaio.c; the async-for step in lines.c; the file layer's raw read
 * from its window in window.c. */
#include "engine.h"
#include "call.h"
#include "compat.h"
#include "inline.h"
#include "kaio.h"
#include "lazy.h"
#include "lines.h"
#include "module.h"
#include "uring.h"
#include "window.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

int fault_errno[FP_COUNT];
int fault_count[FP_COUNT];
int fault_skip[FP_COUNT];

static PyObject *probe_io_uring(PyObject *m, PyObject *unused)
{
    char why[256] = "";
    unsigned flags = 0;
    int rc = uring_probe(&flags, why, sizeof why);
    if (rc < 0)
        return Py_BuildValue("(OIsi)", Py_False, 0u, why, -rc);
    return Py_BuildValue("(OIsi)", Py_True, flags, "", 0);
}

/* Take a context into the pool: the next engine uses it, nothing is wasted by probing. */
static PyObject *probe_linux_aio(PyObject *m, PyObject *unused)
{
    char why[256] = "";
    engine_t tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.fork_gen = engine_fork_generation;
    int rc = kaio_create(&tmp, 128, why, sizeof why);
    if (rc < 0)
        return Py_BuildValue("(Osi)", Py_False, why, -rc);
    kaio_ops.destroy(&tmp);
    return Py_BuildValue("(Osi)", Py_True, "", 0);
}

static PyObject *drain_aio_pool(PyObject *m, PyObject *unused)
{
    kaio_pool_drain();
    Py_RETURN_NONE;
}

static const char *const fault_names[FP_COUNT] = {
    [FP_URING_SETUP] = "io_uring_setup",
    [FP_URING_ENTER] = "io_uring_enter",
    [FP_IO_SETUP] = "io_setup",
    [FP_IO_SUBMIT] = "io_submit",
    [FP_COMPLETION] = "completion",
    [FP_SHORT] = "short",
    [FP_DIRECT_OPEN] = "direct_open",
    [FP_INLINE] = "inline",
    [FP_INLINE_WRITE] = "inline_write",
    [FP_WRITE_STALL] = "write_stall",
    [FP_CLOSE_UNRUN] = "close_unrun",
    [FP_WRITER_START] = "writer_start",
};

/* set_fault(point, errno, count, after=0): after `after` calls pass, the point's next `count`
 * calls fail with errno (count -1: until cleared). Test-only. */
static PyObject *set_fault(PyObject *m, PyObject *args)
{
    const char *name;
    int err, count, after = 0;
    if (!PyArg_ParseTuple(args, "sii|i:set_fault", &name, &err, &count, &after))
        return NULL;
    for (int i = 0; i < FP_COUNT; i++) {
        if (strcmp(name, fault_names[i]) == 0) {
            fault_errno[i] = err;
            fault_count[i] = count;
            fault_skip[i] = after;
            Py_RETURN_NONE;
        }
    }
    return PyErr_Format(PyExc_ValueError, "unknown fault point %R", PyTuple_GET_ITEM(args, 0));
}

static PyObject *clear_faults(PyObject *m, PyObject *unused)
{
    memset(fault_count, 0, sizeof fault_count);
    memset(fault_skip, 0, sizeof fault_skip);
    Py_RETURN_NONE;
}

static PyObject *fault_points(PyObject *m, PyObject *unused)
{
    PyObject *t = PyTuple_New(FP_COUNT);
    for (int i = 0; t && i < FP_COUNT; i++) {
        PyObject *s = PyUnicode_FromString(fault_names[i]);
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

/* How many bytes of p[0..n) equal c: 32 one-byte counters per block, which the compiler
 * turns into vector compares (a block is short enough that no counter overflows). */
static Py_ssize_t count_u8(const unsigned char *p, Py_ssize_t n, unsigned char c)
{
    Py_ssize_t total = 0;
    while (n > 0) {
        Py_ssize_t m = n < 255 * 32 ? n : 255 * 32, k = 0;
        unsigned char acc[32] = {0};
        for (; k + 32 <= m; k += 32)
            for (int j = 0; j < 32; j++)
                acc[j] += p[k + j] == c;
        for (int j = 0; j < 32; j++)
            total += acc[j];
        for (; k < m; k++)
            total += p[k] == c;
        p += m;
        n -= m;
    }
    return total;
}

/* count_byte(buffer, byte, start, stop) -> int: buffer[start:stop].count(byte) (the slice
 * bounds clipped as a slice's are), without bytes.count's one-byte-a-step loop. */
static PyObject *count_byte(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "count_byte() takes 4 arguments (%zd given)", nargs);
    Py_ssize_t start = PyNumber_AsSsize_t(args[2], NULL), stop;
    long c = PyLong_AsLong(args[1]);
    if ((start == -1 || c == -1) && PyErr_Occurred())
        return NULL;
    stop = PyNumber_AsSsize_t(args[3], NULL);
    if (stop == -1 && PyErr_Occurred())
        return NULL;
    if (c < 0 || c > 255)
        return PyErr_Format(PyExc_ValueError, "byte must be in range(0, 256)");
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PySlice_AdjustIndices(view.len, &start, &stop, 1);
    Py_ssize_t n = stop > start ? count_u8((const unsigned char *)view.buf + start,
                                           stop - start, (unsigned char)c) : 0;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(n);
}

/* ---------------------------------------------------------------- done awaitables */

/* The await of an awaitable that is done at once (LineGate's step, lazy.c's Ready): its value
 * is taken from *slot (None when empty). am_send's form: no StopIteration. */
PySendResult done_send(PyObject **slot, PyObject **result)
{
    PyObject *v = *slot;
    *slot = NULL;
    *result = v ? v : Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

/* The same for callers that iterate instead of sending: StopIteration carries the value (as
 * its only argument, even if it is a tuple or an exception). */
PyObject *done_next(PyObject **slot)
{
    PyObject *v = *slot;
    *slot = NULL;
    if (!v)
        v = Py_NewRef(Py_None);
    PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, v);
    Py_DECREF(v);
    if (exc) {
        PyErr_SetObject(PyExc_StopIteration, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* ---------------------------------------------------------------- fast-path descriptors */

/* The method descriptor of module.h's FASTPATH_TYPE (LineStep, WindowReadinto). */
PyObject *fastpath_new(PyTypeObject *type, PyObject *args, vectorcallfunc call)
{
    PyObject *slow;
    if (!PyArg_UnpackTuple(args, type->tp_name, 1, 1, &slow))
        return NULL;
    fastpath_t *f = (fastpath_t *)type->tp_alloc(type, 0);
    if (f) {
        f->slow = Py_NewRef(slow);
        f->vectorcall = call;
    }
    return (PyObject *)f;
}

PyObject *fastpath_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (!obj || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

int fastpath_traverse(fastpath_t *f, visitproc visit, void *arg)
{
    Py_VISIT(f->slow);
    return 0;
}

int fastpath_clear(fastpath_t *f)
{
    Py_CLEAR(f->slow);
    return 0;
}

void fastpath_dealloc(fastpath_t *f)
{
    PyObject_GC_UnTrack(f);
    fastpath_clear(f);
    Py_TYPE(f)->tp_free(f);
}

/* turn_spent() -> bool: the running loop's engine's turn_spent(), its lookup in C (the file
 * layer asks it after every run of lines or bytes served from a window). */
static PyObject *turn_spent(PyObject *m, PyObject *unused)
{
    PyObject *eng = running_engine();
    if (!eng)
        return NULL;
    PyObject *r;
    if (Py_TYPE(eng) == &Engine_Type) {
        engine_t *e = (engine_t *)eng;
        int spent = e->closed || e->fork_gen != engine_fork_generation ? 0 : inline_turn_spent(e);
        r = spent < 0 ? NULL : PyBool_FromLong(spent);
    } else {
        r = PyObject_CallMethod(eng, "turn_spent", NULL);
    }
    Py_DECREF(eng);
    return r;
}

/* configure(*, get_engine, pread, preadinto, pwrite, write_refused, read_refused,
 *           cancelled_error, turn_min, rb_class, rb_rest, internals): the one call by which
 * the Python side tells the extension what it needs of it (aionative._configure makes it when
 * aionative is imported; set_turn_min again with turn_min alone). Each keyword left out
 * keeps what it was. */
static PyObject *configure(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"get_engine", "pread", "preadinto", "pwrite", "write_refused",
                             "read_refused", "cancelled_error", "turn_min", "rb_class",
                             "rb_rest", "internals", NULL};
    PyObject *get_engine = NULL, *paths[CALL_KINDS] = {NULL}, *write_refused = NULL;
    PyObject *read_refused = NULL, *cancelled = NULL, *rb_class = NULL, *rb_rest = NULL;
    Py_ssize_t tm = -1;
    int internals = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOOOOOnOOp:configure", kwlist, &get_engine,
                                     &paths[CALL_PREAD], &paths[CALL_PREADINTO],
                                     &paths[CALL_PWRITE], &write_refused, &read_refused,
                                     &cancelled, &tm, &rb_class, &rb_rest, &internals))
        return NULL;
    if (rb_class && !PyType_Check(rb_class)) {
        PyErr_SetString(PyExc_TypeError, "configure(): rb_class must be a type");
        return NULL;
    }
    call_configure(paths, write_refused, read_refused, cancelled, tm);
    lazy_configure(get_engine, rb_class, rb_rest);
    if (internals >= 0)
        compat_allow(internals);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(*, get_engine, pread, preadinto, pwrite, write_refused, read_refused, "
     "cancelled_error, turn_min, rb_class, rb_rest, internals): what the extension needs of "
     "the Python side, and whether it may use CPython's and asyncio's internals"},
    {"internals", compat_internals, METH_NOARGS,
     "internals() -> dict: which CPython/asyncio internals the engine uses, and what each "
     "probe found"},
    {"turn_spent", turn_spent, METH_NOARGS,
     "turn_spent() -> bool: whether the running loop's engine has spent this iteration's "
     "budget"},
    {"running_loop", compat_running_loop, METH_NOARGS,
     "running_loop() -> loop | None: asyncio.get_running_loop() without its getpid(2) on "
     "Python 3.11; None: ask asyncio"},
    {"count_byte", (PyCFunction)(void (*)(void))count_byte, METH_FASTCALL,
     "count_byte(buffer, byte, start, stop) -> int: buffer[start:stop].count(byte)"},
    {"probe_io_uring", probe_io_uring, METH_NOARGS,
     "probe_io_uring() -> (available, setup_flags, reason, errno)"},
    {"probe_linux_aio", probe_linux_aio, METH_NOARGS, "probe_linux_aio() -> (available, reason, errno)"},
    {"drain_aio_pool", drain_aio_pool, METH_NOARGS, "io_destroy the pooled AIO contexts"},
    {"forget_inherited", engine_forget_inherited, METH_NOARGS,
     "in a forked child: release the parent's engines without touching the kernel"},
    {"debug_counters", engine_counters, METH_NOARGS, "process-wide resource counters"},
    {"set_fault", set_fault, METH_VARARGS, "arm a fault-injection point (tests)"},
    {"clear_faults", clear_faults, METH_NOARGS, "disarm every fault-injection point"},
    {"fault_points", fault_points, METH_NOARGS, "names of the fault-injection points"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aionative._core",
    .m_doc = "Native engine of aionative: io_uring and Linux AIO completions on an eventfd.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (compat_init() < 0 || engine_module_init(m) < 0 || lines_module_init(m) < 0 ||
        call_module_init(m) < 0 || window_module_init(m) < 0 ||
        PyModule_AddIntConstant(m, "KERNEL_RW_MAX", KERNEL_RW_MAX) < 0 ||
        PyModule_AddIntConstant(m, "DETOUR_MAX", DETOUR_MAX) < 0 ||
#ifdef AIONATIVE_DEBUG
        PyModule_AddIntConstant(m, "DEBUG", 1) < 0
#else
        PyModule_AddIntConstant(m, "DEBUG", 0) < 0
#endif
    ) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
