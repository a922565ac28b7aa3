/* compat.c: every use the engine makes of a CPython or asyncio internal, each behind a flag
 * that a run-time probe sets, with a public-API path beside it:
 *
 * - take_callbacks: a loop callback of the engine takes the done callbacks off the futures it
 *   resolves (asyncio.Future's `_callbacks`, then `remove_done_callback`) and calls them
 *   itself once its reap is over (complete.c, future_resolve_collect), instead of the future
 *   scheduling each with loop.call_soon. Off: the futures schedule them (the public path).
 * - loop_holder: on CPython 3.11, the running loop is read from `_asyncio`'s holder in the
 *   thread state's dict (its layout, and the dict's version tag), not asked of asyncio.
 *   Off, or on 3.12+: running_loop_borrowed() answers NULL and callers ask asyncio.
 *
 * - the raw layer's base: window.c's WindowBase extends `_io._RawIOBase` (io.RawIOBase's C
 *   base, a name private to the io module) by its struct. Not built (a Python whose
 *   _RawIOBase cannot be extended), or not used (aionative._compat.INTERNALS false): the raw
 *   layer keeps its state in Python and its readinto takes the Python path.
 *
 * configure(internals=False) (the environment's AIONATIVE_INTERNALS=0) turns the first two
 * off, and the raw layer does not take the third: the test suite runs once that way, so the
 * public paths are tested too. */
#ifndef AIONATIVE_COMPAT_H
#define AIONATIVE_COMPAT_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

typedef struct {
    int allowed;         /* configure(internals=...): may the internals be used at all */
    int take_callbacks;  /* the futures' callbacks are taken and called by the engine */
    int loop_holder;     /* 3.11: the running loop is read from asyncio's holder */
} compat_t;

extern compat_t compat;

/* Module initialisation: the holder's key, the fork hook. */
int compat_init(void);
/* Turn the internals off (0) for good, or let the probes decide (1). */
void compat_allow(int allowed);
/* Once a process, with the first engine's loop and its future type: whether asyncio's futures
 * still keep their callbacks as the engine takes them (sets compat.take_callbacks). */
int compat_probe_callbacks(PyObject *future_type, PyObject *loop);
/* The running loop (borrowed), or NULL when it cannot tell (the caller asks asyncio). */
PyObject *running_loop_borrowed(void);
/* running_loop() and internals(), the module's functions. */
PyObject *compat_running_loop(PyObject *m, PyObject *unused);
PyObject *compat_internals(PyObject *m, PyObject *unused);

#endif
