/* methods.c: the Engine's Python methods that start operations, and the Engine's method
 * table. */
#ifndef AIONATIVE_METHODS_H
#define AIONATIVE_METHODS_H

#include "engine.h"

extern PyMethodDef Engine_methods[];
/* Engine methods that call.c calls without a method lookup (the Python methods of the same
 * names: results, errors and arguments as there). */
PyObject *Engine_read_inline(engine_t *e, PyObject *const *args, Py_ssize_t n);
PyObject *Engine_pread(engine_t *e, PyObject *const *args, Py_ssize_t n);
PyObject *Engine_readinto_inline(engine_t *e, PyObject *const *args, Py_ssize_t n);
PyObject *Engine_preadinto(engine_t *e, PyObject *const *args, Py_ssize_t n);
PyObject *Engine_write(engine_t *e, PyObject *const *args, Py_ssize_t n);
/* The Call's small pread / preadinto: as Engine_read / Engine_readinto (inline, else the
 * kernel queue), but a read the spent budget or the run's slice refused is done inline all the
 * same and its caller parks: a future a later flush resolves (see engine_park). */
PyObject *engine_read_or_park(engine_t *e, PyObject *const *args, int into);

#endif
