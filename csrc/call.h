/* call.c: Call, what aionative.pread, preadinto and pwrite return. */
#ifndef AIONATIVE_CALL_H
#define AIONATIVE_CALL_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

int call_module_init(PyObject *m);

#endif
