/* aionative._core: module initialisation, probes, counters and the fault-injection switch.
 * The engine lives in engine.c; the kernel interfaces in uring.c and kaio.c. */
#include "engine.h"

#include <errno.h>
#include <string.h>

static PyObject *probe_io_uring(PyObject *m, PyObject *unused)
{
    char why[256] = "";
    unsigned flags = 0;
    int rc = uring_probe(&flags, why, sizeof why);
    if (rc < 0)
        return Py_BuildValue("(OIs)", Py_False, 0u, why);
    return Py_BuildValue("(OIs)", Py_True, flags, "");
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
        return Py_BuildValue("(Os)", Py_False, why);
    kaio_ops.destroy(&tmp);
    return Py_BuildValue("(Os)", Py_True, "");
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

static PyMethodDef module_methods[] = {
    {"probe_io_uring", probe_io_uring, METH_NOARGS,
     "probe_io_uring() -> (available, setup_flags, reason)"},
    {"probe_linux_aio", probe_linux_aio, METH_NOARGS, "probe_linux_aio() -> (available, reason)"},
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
    if (engine_module_init(m) < 0 ||
        PyModule_AddIntConstant(m, "KERNEL_RW_MAX", KERNEL_RW_MAX) < 0 ||
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
