/* What an engine tells about itself: Engine.stats() (its counters and gauges), info() (the
 * backend's details), fileno(), and its attributes (inline_budget_us the one that can be set).
 */
#include "engine.h"
#include "stats.h"

#include <stddef.h>

/* ---------------------------------------------------------------- introspection */

PyObject *Engine_fileno(engine_t *e, PyObject *unused)
{
    return PyLong_FromLong(e->efd);
}

#define STAT(name) {#name, offsetof(stats_t, name)}
static const struct { const char *name; size_t off; } stat_fields[] = {
    STAT(submitted), STAT(completed), STAT(batches), STAT(syscalls), STAT(wakeups),
    STAT(queued), STAT(retries), STAT(splits), STAT(nowait_eagain), STAT(direct_reissues),
    STAT(direct_refused), STAT(nowait_unsupported), STAT(cancels), STAT(withdrawn), STAT(cq_overflow),
    STAT(inline_hits), STAT(inline_misses), STAT(budget_exhausted), STAT(inline_retries),
    STAT(retries_refused), STAT(inline_writes), STAT(write_stalls), STAT(parked), STAT(slices_ended),
    STAT(flushes), STAT(woken), STAT(async_writes), STAT(async_closes), STAT(open_waits),
    STAT(open_wait_us),
};

static int dict_set_ull(PyObject *d, const char *k, unsigned long long v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

PyObject *Engine_stats(engine_t *e, PyObject *unused)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    for (size_t i = 0; i < sizeof stat_fields / sizeof stat_fields[0]; i++) {
        uint64_t v = *(uint64_t *)((char *)&e->st + stat_fields[i].off);
        if (dict_set_ull(d, stat_fields[i].name, v) < 0)
            goto fail;
    }
    if (dict_set_ull(d, "in_flight", e->live) < 0 || dict_set_ull(d, "in_kernel", e->in_kernel) < 0 ||
        dict_set_ull(d, "waiting", e->waiting) < 0 || dict_set_ull(d, "pinned", e->pinned) < 0 ||
        dict_set_ull(d, "capacity", e->capacity) < 0 || dict_set_ull(d, "parked_now", e->park_len) < 0)
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

PyObject *Engine_info(engine_t *e, PyObject *unused)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    PyObject *name = PyUnicode_FromString(e->ops ? e->ops->name : "?");
    if (!name || PyDict_SetItemString(d, "backend", name) < 0 ||
        dict_set_ull(d, "capacity", e->capacity) < 0 || (e->ops && e->ops->info(e, d) < 0)) {
        Py_XDECREF(name);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(name);
    return d;
}

static PyObject *Engine_get_backend(engine_t *e, void *c)
{
    return PyUnicode_FromString(e->ops ? e->ops->name : "?");
}

static PyObject *Engine_get_closed(engine_t *e, void *c)
{
    return PyBool_FromLong(e->closed != 0);
}

static PyObject *Engine_get_forked(engine_t *e, void *c)
{
    return PyBool_FromLong(e->fork_gen != engine_fork_generation);
}

static PyObject *Engine_get_inline_budget(engine_t *e, void *c)
{
    return PyFloat_FromDouble((double)e->budget_ns / 1000.0);
}

static int Engine_set_inline_budget(engine_t *e, PyObject *v, void *c)
{
    double us = v ? PyFloat_AsDouble(v) : -1.0;
    if (us == -1.0 && PyErr_Occurred())
        return -1;
    if (!(us >= 0.0 && us <= 1e9)) {
        PyErr_SetString(PyExc_ValueError, "inline_budget_us must be between 0 and 1e9");
        return -1;
    }
    e->budget_ns = (uint64_t)(us * 1000.0);
    return 0;
}

static PyObject *Engine_get_in_flight(engine_t *e, void *c)
{
    return PyLong_FromUnsignedLong(e->live);
}

static PyObject *Engine_get_loop(engine_t *e, void *c)
{
    PyObject *loop = engine_loop(e);
    return loop ? loop : Py_NewRef(Py_None);
}

PyGetSetDef Engine_getset[] = {
    {"backend", (getter)Engine_get_backend, NULL, NULL, NULL},
    {"closed", (getter)Engine_get_closed, NULL, NULL, NULL},
    {"forked", (getter)Engine_get_forked, NULL, NULL, NULL},
    {"in_flight", (getter)Engine_get_in_flight, NULL, NULL, NULL},
    {"inline_budget_us", (getter)Engine_get_inline_budget, (setter)Engine_set_inline_budget,
     "wall time (µs) reads completed inline may take per loop iteration; 0 turns the inline "
     "fast path off", NULL},
    {"loop", (getter)Engine_get_loop, NULL, NULL, NULL},
    {NULL},
};
