/* stats.c: what an engine tells about itself: stats(), info(), fileno() and its
 * attributes. */
#ifndef AIONATIVE_STATS_H
#define AIONATIVE_STATS_H

#include "engine.h"

extern PyGetSetDef Engine_getset[];
PyObject *Engine_fileno(engine_t *e, PyObject *unused);
PyObject *Engine_stats(engine_t *e, PyObject *unused);
PyObject *Engine_info(engine_t *e, PyObject *unused);

#endif
