/* window.c: WindowBase (the raw layer's window state) and WindowReadinto, WindowRaw.readinto's
 * window hit. */
#ifndef AIONATIVE_WINDOW_H
#define AIONATIVE_WINDOW_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

int window_module_init(PyObject *m);

#endif
