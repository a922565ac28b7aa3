/* lines.c: LineGate and LineStep, the inline step of `async for` over a file. */
#ifndef AIONATIVE_LINES_H
#define AIONATIVE_LINES_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

int lines_module_init(PyObject *m);

#endif
