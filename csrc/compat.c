/* The engine's uses of CPython and asyncio internals, each gated by a run-time probe, with the
 * public-API path beside it (compat.h says which, and why each is worth it). */
#include "compat.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

compat_t compat = {
    .allowed = 1,
    .take_callbacks = 0,  /* until the first engine's probe */
#if PY_VERSION_HEX < 0x030C0000
    .loop_holder = 1,     /* until the first answer is checked against asyncio's */
#else
    .loop_holder = 0,
#endif
};

static const char *callbacks_why = "not probed yet (no engine made)";
static int callbacks_probed;

void compat_allow(int allowed)
{
    compat.allowed = allowed;
    if (!allowed)
        compat.take_callbacks = compat.loop_holder = 0;
}

/* ---------------------------------------------------------------- the futures' callbacks */

static PyObject *noop(PyObject *m, PyObject *fut)
{
    Py_RETURN_NONE;
}

static PyMethodDef noop_def = {"noop", noop, METH_O, NULL};

/* The engine relies on: `fut._callbacks` of a pending future is a list of (function, Context)
 * in the order they were added, and remove_done_callback(fn) takes them off and says how
 * many. future_resolve_collect checks each future's list again, and leaves any other shape to
 * the future; this probe turns the whole path off where the first future says otherwise. */
static const char *probe_callbacks(PyObject *future_type, PyObject *loop)
{
    static PyObject *kw_loop;
    if (!kw_loop && !(kw_loop = Py_BuildValue("(s)", "loop")))
        return "out of memory";
    PyObject *args[2] = {NULL, loop};
    PyObject *fut = PyObject_Vectorcall(future_type, args + 1,
                                        0 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw_loop);
    PyObject *fn = fut ? PyCFunction_New(&noop_def, NULL) : NULL;
    PyObject *cbs = NULL, *after = NULL, *n = NULL;
    const char *why = NULL;
    if (!fn)
        why = "no future could be made";
    else if (!(n = PyObject_CallMethod(fut, "add_done_callback", "O", fn)))
        why = "add_done_callback failed";
    else if (!(cbs = PyObject_GetAttrString(fut, "_callbacks")))
        why = "futures have no _callbacks";
    else if (!PyList_Check(cbs) || PyList_GET_SIZE(cbs) != 1 ||
             !PyTuple_CheckExact(PyList_GET_ITEM(cbs, 0)) ||
             PyTuple_GET_SIZE(PyList_GET_ITEM(cbs, 0)) != 2 ||
             PyTuple_GET_ITEM(PyList_GET_ITEM(cbs, 0), 0) != fn ||
             !PyContext_CheckExact(PyTuple_GET_ITEM(PyList_GET_ITEM(cbs, 0), 1)))
        why = "_callbacks is not a list of (function, context)";
    else {
        Py_SETREF(n, PyObject_CallMethod(fut, "remove_done_callback", "O", fn));
        if (!n || !PyLong_Check(n) || PyLong_AsLong(n) != 1)
            why = "remove_done_callback did not take the callback off";
        else if (!(after = PyObject_GetAttrString(fut, "_callbacks")) ||
                 (after != Py_None && (!PyList_Check(after) || PyList_GET_SIZE(after) != 0)))
            why = "_callbacks still holds a removed callback";
    }
    if (PyErr_Occurred())
        PyErr_Clear();
    if (fut) {
        PyObject *r = PyObject_CallMethod(fut, "cancel", NULL);
        Py_XDECREF(r);
        if (!r)
            PyErr_Clear();
    }
    Py_XDECREF(after);
    Py_XDECREF(cbs);
    Py_XDECREF(n);
    Py_XDECREF(fn);
    Py_XDECREF(fut);
    return why;
}

int compat_probe_callbacks(PyObject *future_type, PyObject *loop)
{
    if (callbacks_probed || !compat.allowed)
        return 0;
    callbacks_probed = 1;
    const char *why = probe_callbacks(future_type, loop);
    compat.take_callbacks = why == NULL && compat.allowed;
    callbacks_why = why ? why : "as expected";
    return 0;
}

/* ---------------------------------------------------------------- the running loop */

#if PY_VERSION_HEX < 0x030C0000
/* CPython 3.11's asyncio keeps the running loop in the thread state's dict, in a holder that
 * also records the pid that set it, and asyncio.get_running_loop() compares that pid with
 * getpid(2) on every call: a system call, a quarter of a microsecond here, paid by every
 * operation (3.12 dropped the check). running_loop_borrowed() gives the same answer with the
 * pid read once per process (again in a forked child), or NULL whenever it cannot tell, and
 * the caller then asks asyncio. The first answer is checked against asyncio's own, and the
 * holder's size against the layout below: a CPython whose holder differs turns this off. */
typedef struct {
    PyObject_HEAD
    PyObject *rl_loop;
    pid_t rl_pid;
} loop_holder_t;

static PyObject *holder_key, *get_running_loop;
static PyTypeObject *holder_type;
static pid_t self_pid;
static const char *holder_why = "not checked yet (no loop seen)";

/* The last answer, and the thread-state dict it was found in at which version: 3.11's dicts
 * take a new version, unique in the process, on every change, and asyncio sets a running
 * loop by storing a new holder. An unchanged dict holds the same holder, which holds the loop
 * (borrowed here). The lookup it saves was a twentieth of a hot read's instructions. */
static PyObject *memo_dict, *memo_loop;
static uint64_t memo_version;

static void refresh_pid(void)
{
    self_pid = getpid();
    memo_dict = NULL;  /* a forked child: the holder's pid is no longer ours */
}

/* The first holder seen: its type's size and asyncio's answer agree with the layout. */
static int holder_checks(PyObject *h, loop_holder_t *rl)
{
    PyObject *asked = NULL;
    if (Py_TYPE(h)->tp_basicsize != (Py_ssize_t)sizeof(loop_holder_t))
        holder_why = "the holder's size differs from its 3.11 layout";
    else if (!(asked = PyObject_CallNoArgs(get_running_loop)))
        holder_why = "asyncio.get_running_loop() failed where a holder was found";
    else if (asked != rl->rl_loop)
        holder_why = "the holder's loop is not asyncio.get_running_loop()'s";
    else
        holder_why = "as expected";
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_XDECREF(asked);
    if (asked == rl->rl_loop && asked)
        return 1;
    compat.loop_holder = 0;
    return 0;
}

PyObject *running_loop_borrowed(void)
{
    if (!compat.loop_holder)
        return NULL;
    PyObject *d = PyThreadState_GetDict();
    if (d && d == memo_dict && ((PyDictObject *)d)->ma_version_tag == memo_version)
        return memo_loop;
    memo_dict = NULL;
    PyObject *h = d ? PyDict_GetItemWithError(d, holder_key) : NULL;
    if (!h) {
        PyErr_Clear();  /* (a str key: never) */
        return NULL;
    }
    loop_holder_t *rl = (loop_holder_t *)h;
    if (Py_TYPE(h) != holder_type) {
        if (holder_type || strcmp(Py_TYPE(h)->tp_name, "_RunningLoopHolder") != 0)
            return NULL;
        if (rl->rl_pid != self_pid || !rl->rl_loop || rl->rl_loop == Py_None)
            return NULL;  /* (checked once a loop runs) */
        if (!holder_checks(h, rl))
            return NULL;
        holder_type = Py_TYPE(h);
    }
    if (rl->rl_pid != self_pid || !rl->rl_loop || rl->rl_loop == Py_None)
        return NULL;
    memo_dict = d;
    memo_version = ((PyDictObject *)d)->ma_version_tag;
    memo_loop = rl->rl_loop;
    return rl->rl_loop;
}

static int running_loop_init(void)
{
    refresh_pid();
    if (pthread_atfork(NULL, NULL, refresh_pid) != 0)
        return -1;
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    if (!asyncio)
        return -1;
    get_running_loop = PyObject_GetAttrString(asyncio, "get_running_loop");
    Py_DECREF(asyncio);
    holder_key = PyUnicode_InternFromString("__asyncio_running_event_loop__");
    return holder_key && get_running_loop ? 0 : -1;
}
#else
static const char *holder_why = "not used: asyncio.get_running_loop() makes no system call";

PyObject *running_loop_borrowed(void)
{
    return NULL;  /* asyncio.get_running_loop() makes no system call here: use it */
}

static int running_loop_init(void)
{
    return 0;
}
#endif

int compat_init(void)
{
    return running_loop_init();
}

PyObject *compat_running_loop(PyObject *m, PyObject *unused)
{
    PyObject *loop = running_loop_borrowed();
    return Py_NewRef(loop ? loop : Py_None);  /* None: no loop runs, or ask asyncio */
}

PyObject *compat_internals(PyObject *m, PyObject *unused)
{
    return Py_BuildValue("{s:O,s:O,s:s,s:O,s:s}",
                         "allowed", compat.allowed ? Py_True : Py_False,
                         "take_callbacks", compat.take_callbacks ? Py_True : Py_False,
                         "take_callbacks_probe", compat.allowed ? callbacks_why : "turned off",
                         "loop_holder", compat.loop_holder ? Py_True : Py_False,
                         "loop_holder_probe", compat.allowed ? holder_why : "turned off");
}
