/* complete.c: completions. Each piece's answer (continue, retry, finish), the finished
 * operation's result and what it pinned released, and its future resolved; inside a loop
 * callback of the engine, the future's done callbacks collected for the callback to call. */
#ifndef AIONATIVE_COMPLETE_H
#define AIONATIVE_COMPLETE_H

#include "engine.h"

/* asyncio's InvalidStateError and the names complete.c asks for. 0, or -1 with the error set. */
int complete_init(PyObject *asyncio);
/* Backends report each completion here; it continues, retries or finishes the operation. */
void engine_complete(engine_t *e, uint32_t idx, int64_t res);
/* A piece the kernel never accepted ends its operation with `err` (no retry). */
void engine_fail_unaccepted(engine_t *e, uint32_t idx, int err);
/* The operation is over (the kernel holds nothing of it): its result to its future, what it
 * pinned released, its slot freed. `err`: 0 or the errno it ends with. */
void op_finish(engine_t *e, uint32_t idx, int err);
/* Resolve `fut` with `value` (an exception instance if `is_exc`): 1 if it took it, 0 if nobody
 * will see it (cancelled meanwhile). */
int future_resolve(PyObject *fut, PyObject *value, int is_exc);
/* The same from inside a loop callback of the engine (e->collecting): the future's done
 * callbacks go to e->wake, for the callback to call them itself (loop.c). */
int future_resolve_collect(engine_t *e, PyObject *fut, PyObject *value, int is_exc);

#endif
