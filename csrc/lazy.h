/* lazy.c: LazyReader, the state of an `rb` file before its stack exists, and its open. */
#ifndef AIONATIVE_LAZY_H
#define AIONATIVE_LAZY_H

#include "engine.h"

PyObject *lazy_open(engine_t *e, PyObject *const *args, Py_ssize_t n);
int lazy_module_init(PyObject *m);
/* configure()'s part (module.c): get_engine, the lazy file's class and the coroutine function
 * of its other outcomes; each NULL: unchanged. */
void lazy_configure(PyObject *get_engine, PyObject *cls, PyObject *rest);
/* The running loop's engine, as aionative._engine.get_engine() returns it (which it calls
 * only when the engine it last returned no longer serves this loop and thread). New ref. */
PyObject *running_engine(void);

#endif
