/* loop.c: the engine's turns of the event loop. The flush it schedules and the eventfd's
 * reader (submit, reap, settle, then the collected wake-ups), parked callers, and leaving a
 * loop callback (a close asked for meanwhile). */
#ifndef AIONATIVE_LOOP_H
#define AIONATIVE_LOOP_H

#include "engine.h"

/* asyncio.Future and the names loop.c asks for. 0, or -1 with the error set. */
int loop_init(PyObject *asyncio);
/* Schedule the iteration's flush (loop.call_soon) unless it is: 0, or -1 with the error set. */
int engine_schedule_flush(engine_t *e);
/* A new future of the engine's loop, or NULL with the error set. */
PyObject *engine_new_future(engine_t *e);
/* Park the caller of a read done inline (`res`): a future a later flush resolves with it.
 * `sliced`: the run's slice refused it, not the spent budget. */
PyObject *engine_park(engine_t *e, PyObject *res, int sliced);
/* The engine is closing (or a forked child drops its copy): every parked caller gets its
 * result now, unless the loop can no longer run anything. */
void engine_release_parked(engine_t *e);
/* Leave an engine callback (e->busy was raised): a close asked for meanwhile is done. */
PyObject *engine_leave(engine_t *e);
/* Submit what is prepared, reap what completed inside its submission, and settle that. */
void engine_send_settled(engine_t *e);
/* The iteration's flush; `loop`: run by the loop (it calls the wake-ups it collects itself). */
PyObject *engine_flush(engine_t *e, int loop);
/* Engine._on_ready, Engine._flush and Engine._send_now. */
PyObject *Engine_on_ready(engine_t *e, PyObject *unused);
PyObject *Engine_flush(engine_t *e, PyObject *unused);
PyObject *Engine_send_now(engine_t *e, PyObject *unused);

/* Once a process, at the first engine: compat_probe_callbacks with asyncio's Future. */
int loop_probe_internals(PyObject *loop);

#endif
