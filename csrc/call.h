/* call.c: Call, what aionative.pread, preadinto and pwrite return. */
#ifndef AIONATIVE_CALL_H
#define AIONATIVE_CALL_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

enum { CALL_PREAD, CALL_PREADINTO, CALL_PWRITE, CALL_KINDS };

int call_module_init(PyObject *m);
/* configure()'s part (module.c): the calls' Python paths, each NULL for unchanged, and the
 * size from which a refused pread waits a turn (negative: unchanged). */
void call_configure(PyObject *const paths[CALL_KINDS], PyObject *write_refused,
                    PyObject *read_refused, PyObject *cancelled, Py_ssize_t turn_min);

#endif
