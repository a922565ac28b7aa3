/* submit.c: operations on their way to the kernel. The slot table, the user-space queue,
 * handing pieces to the backend in batches (the pump, early sends), starting an operation and
 * abandoning one (cancel). */
#ifndef AIONATIVE_SUBMIT_H
#define AIONATIVE_SUBMIT_H

#include "engine.h"

/* A free slot, zeroed (OP_NONE with MemoryError when the table cannot grow). */
uint32_t slot_alloc(engine_t *e);
void slot_free(engine_t *e, uint32_t idx);
/* Move waiting operations to the kernel while there is room. */
void engine_fill(engine_t *e);
/* Every reap goes through here: it notes which accepted batches it covers. */
int engine_reap(engine_t *e, int flags);
/* Whether an operation of this kind, enqueued now, is sent inside its call (EARLY_SUBMIT). */
int engine_sends_early(engine_t *e, uint8_t kind);
/* Give the slot's next piece to the kernel queue, sent now if `early`; 1 if it waits for room
 * in user space instead. */
int engine_enqueue(engine_t *e, uint32_t idx, int early);
/* Submit everything prepared and everything waiting that fits. */
void engine_pump(engine_t *e);
/* Raises (RuntimeError) and returns 0 unless the engine may be used here and now. */
int engine_usable(engine_t *e);
/* Common tail of every operation: a future (a new reference), the slot queued, a flush
 * scheduled; NULL with the slot released on error. */
PyObject *engine_start(engine_t *e, uint32_t idx);
/* Engine.cancel and Engine.cancel_wait, which call.c also calls directly. */
PyObject *Engine_cancel(engine_t *e, PyObject *fut);
PyObject *Engine_cancel_wait(engine_t *e, PyObject *fut);

#endif
