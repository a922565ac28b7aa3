/* Operations on their way to the kernel: the slot table, the user-space queue of operations
 * waiting for kernel room, each piece handed to the backend, and the batching that sends them
 * (at the iteration's flush, or early from inside the call: EARLY_SUBMIT); starting an
 * operation (its future, its flush), and abandoning one its caller gave up (cancel). Everything
 * here runs on the owning loop's thread with the GIL held.
 */
#include <fcntl.h>

#include "engine.h"
#include "complete.h"
#include "loop.h"
#include "submit.h"

#include <errno.h>
#include <string.h>

/* ---------------------------------------------------------------- slots */

static int slots_grow(engine_t *e)
{
    op_t **blocks = PyMem_Realloc(e->blocks, (e->nblocks + 1) * sizeof(op_t *));
    if (!blocks)
        return -1;
    e->blocks = blocks;
    op_t *blk = PyMem_Calloc(OP_BLOCK, sizeof(op_t));
    if (!blk)
        return -1;
    uint32_t base = e->nblocks * OP_BLOCK;
    for (uint32_t i = 0; i < OP_BLOCK; i++)
        blk[i].next = (i + 1 < OP_BLOCK) ? base + i + 1 : e->free_head;
    e->blocks[e->nblocks++] = blk;
    e->free_head = base;
    return 0;
}

uint32_t slot_alloc(engine_t *e)
{
    if (e->free_head == OP_NONE && slots_grow(e) < 0) {
        PyErr_NoMemory();
        return OP_NONE;
    }
    uint32_t idx = e->free_head;
    op_t *op = engine_slot(e, idx);
    e->free_head = op->next;
    memset(op, 0, sizeof *op);
    op->next = OP_NONE;
    op->direct_fd = -1;
    op->direct_slot = -1;
    e->live++;
    return idx;
}

void slot_free(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    op->state = OPS_FREE;
    op->next = e->free_head;
    e->free_head = idx;
    e->live--;
}

/* ---------------------------------------------------------------- submission */

static void wait_push(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    op->state = OPS_WAITING;
    op->next = OP_NONE;
    if (e->wait_tail == OP_NONE)
        e->wait_head = idx;
    else
        engine_slot(e, e->wait_tail)->next = idx;
    e->wait_tail = idx;
    e->waiting++;
    e->st.queued++;
}

static uint32_t wait_pop(engine_t *e)
{
    uint32_t idx = e->wait_head;
    if (idx == OP_NONE)
        return idx;
    op_t *op = engine_slot(e, idx);
    e->wait_head = op->next;
    if (e->wait_head == OP_NONE)
        e->wait_tail = OP_NONE;
    op->next = OP_NONE;
    e->waiting--;
    return idx;
}

static void op_set_piece(op_t *op)
{
    uint64_t left = op->len - op->done;
    op->cur = left > KERNEL_RW_MAX ? KERNEL_RW_MAX : (uint32_t)left;
}

/* Give the slot's next piece to the kernel queue. 0, or -EBUSY when there is no room even
 * after pushing what is prepared (the caller queues it in user space). */
static int op_to_kernel(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    if (e->in_kernel >= e->capacity)
        return -EBUSY;
    op_set_piece(op);
    int rc = e->ops->prep(e, op, idx);
    if (rc == -EBUSY) {
        /* The submission queue is full: submit now rather than wait for the flush. */
        if (e->ops->submit(e) < 0)
            return -EBUSY;
        rc = e->ops->prep(e, op, idx);
    }
    if (rc < 0)
        return rc;
    op->state = OPS_KERNEL;
    e->in_kernel++;
    return 0;
}

/* Move waiting operations to the kernel while there is room. */
void engine_fill(engine_t *e)
{
    while (e->waiting && e->in_kernel < e->capacity) {
        uint32_t idx = e->wait_head;
        if (op_to_kernel(e, idx) < 0)
            return;
        wait_pop(e);
        engine_slot(e, idx)->state = OPS_KERNEL;
    }
}

/* Every reap goes through here: it notes which accepted batches it covers. */
int engine_reap(engine_t *e, int flags)
{
    e->reaped_batches = e->st.batches;
    return e->ops->reap(e, flags);
}

/* Operations prepared during a loop iteration reach the kernel in one system call, at the
 * iteration's flush. While the kernel holds operations that did not complete inside their
 * submission (`deep`: a device or a worker has them), that holds a whole iteration's worth
 * of reads back while the device may be idle: a device that answers a batch at once
 * (virtio-blk) then runs in lock step with the loop, its queue empty while the loop handles
 * the batch. So a read that brings the prepared operations to EARLY_SUBMIT sends them at once
 * (W2's O_DIRECT 4 KiB reads at depth 64: `python -m bench --workloads W2`), and so does a
 * read the kernel would hold alone: the device has nothing of ours, and a read kept for the
 * flush waits out one more loop iteration with it idle (W2 at depth 1, every read). Cached
 * reads complete inside the submission: not deep, at the flush and after a read sent early
 * alike. Writes do not trigger it: buffered ones go to kernel workers, where starting early
 * gains nothing and the extra system calls cost (W5). */
#define EARLY_SUBMIT 2

/* Whether an operation of this kind, enqueued now, is sent inside its call. */
int engine_sends_early(engine_t *e, uint8_t kind)
{
    return e->deep && !e->busy && !e->waiting && (kind == OP_READ || kind == OP_READINTO) &&
           (e->ops->unaccepted(e) + 1 >= EARLY_SUBMIT || e->in_kernel == 0);
}

/* `early`: engine_sends_early's answer, asked by the caller (engine_start schedules no
 * flush for an operation sent now). Returns 1 if the operation waits for room in user space
 * instead, sent by neither. */
int engine_enqueue(engine_t *e, uint32_t idx, int early)
{
    if (e->waiting || op_to_kernel(e, idx) < 0) {
        wait_push(e, idx);
        return 1;
    }
    if (early) {
        /* Sent, then settled as at a flush (engine_settle): a piece that completed inside
         * the submission (a partly cached read) sends its rest while the caller's number is
         * still its file. A submission the kernel refuses, or a read that completed, ends its
         * operation here (op_finish: a future resolved, a buffer released, a finalizer run),
         * and that Python code may close the engine: the close waits for engine_leave, as in
         * the loop's callbacks. */
        e->busy++;
        engine_send_settled(e);
        PyObject *r = engine_leave(e);
        if (!r)
            PyErr_WriteUnraisable((PyObject *)e);
        Py_XDECREF(r);
    }
    return 0;
}

/* Submit everything prepared and everything waiting that fits. */
void engine_pump(engine_t *e)
{
    for (int round = 0; round < 64; round++) {
        engine_fill(e);
        int rc = e->ops->submit(e);
        if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) {
            /* The ring itself refuses work (e.g. EEXIST: wrong thread): fail those operations
             * rather than leave their futures pending forever. */
            e->ops->unprep(e, -rc);
            return;
        }
        if (rc < 0 || e->ops->unaccepted(e)) {
            /* Short of resources, or accepted in part: completions make room; try again on
             * the next iteration in any case so nothing waits on a wake-up that never comes. */
            if (engine_schedule_flush(e) < 0)
                PyErr_WriteUnraisable((PyObject *)e);
            return;
        }
        if (!e->waiting || e->in_kernel >= e->capacity)
            return;
    }
}

/* ---------------------------------------------------------------- starting operations */

static int engine_open(engine_t *e)
{
    if (e->closed || e->close_pending) {
        PyErr_SetString(PyExc_RuntimeError, "aionative: engine is closed");
        return 0;
    }
    return 1;
}

int engine_usable(engine_t *e)
{
    if (e->fork_gen != engine_fork_generation) {
        PyErr_SetString(PyExc_RuntimeError,
                        "aionative: this engine belongs to the parent process (fork); "
                        "use a new event loop in the child");
        return 0;
    }
    if (!engine_open(e))
        return 0;
    if (e->owner_thread != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "aionative: an engine is used only from its event loop's thread");
        return 0;
    }
    return 1;
}

/* Common tail of every operation: a future, a slot in the queue, a flush scheduled. On error
 * the slot is released (nothing reached the kernel). Returns a new reference to the future.
 * A read sent inside its call (engine_enqueue) leaves the flush nothing to do: none is
 * scheduled for it, which spares the loop an iteration (at depth 1 every read: the loop would
 * poll once more before waiting). What the send leaves behind gets one all the same: a
 * submission refused or taken in part (engine_pump), a read that must wait for room. */
PyObject *engine_start(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    if (op->bytes || op->view.obj || op->keep)
        e->pinned++;
    PyObject *fut = engine_new_future(e);
    /* Creating the future and scheduling the flush run Python code, which may close us
     * (the thread cannot have changed: only the closed flags need a second look), and a
     * closed engine's ring is unmapped: whether the read goes early is asked once it is
     * known to be open. */
    int ok = fut && engine_open(e);
    /* A large write starts now (see WRITE_ASYNC_MIN): the caller's task may compute next. */
    int early = ok && (engine_sends_early(e, op->kind) ||
                       (op->kind == OP_WRITE && op->len >= WRITE_ASYNC_MIN && !e->busy &&
                        !e->waiting));
    /* An open that creates or truncates starts now too, and the flush scheduled for it waits
     * for it (OPEN_WAIT_NS). */
    int open_now = ok && !early && op->kind == OP_OPENAT && e->ops->wait_timed &&
                   (op->oflags & (O_CREAT | O_TRUNC)) && !e->busy && !e->waiting;
    if (open_now) {
        early = 1;
        op->awaited_open = e->open_gen;
        e->opens_out++;
    }
    if (ok && (!early || open_now))
        ok = engine_schedule_flush(e) == 0 && engine_open(e);
    if (!ok) {
        Py_XDECREF(fut);
        op_finish(e, idx, 0);
        return NULL;
    }
    Py_INCREF(fut);
    op->future = fut;
    if (engine_enqueue(e, idx, early)) {
        /* It waits for room in user space (no Python code ran: `op` is still its slot): a
         * later flush sends it, and none waits for it. */
        if (open_now) {
            op->awaited_open = 0;
            e->opens_out--;
        }
        if (early && engine_schedule_flush(e) < 0)
            PyErr_WriteUnraisable((PyObject *)e);  /* queued already: reported, as engine_pump does */
    }
    return fut;
}

/* ---------------------------------------------------------------- cancellation */

static uint32_t engine_find(engine_t *e, PyObject *fut)
{
    for (uint32_t b = 0; b < e->nblocks; b++)
        for (uint32_t i = 0; i < OP_BLOCK; i++)
            if (e->blocks[b][i].state != OPS_FREE && e->blocks[b][i].future == fut)
                return b * OP_BLOCK + i;
    return OP_NONE;
}

static void wait_remove(engine_t *e, uint32_t idx)
{
    uint32_t prev = OP_NONE;
    for (uint32_t cur = e->wait_head; cur != OP_NONE; prev = cur, cur = engine_slot(e, cur)->next) {
        if (cur != idx)
            continue;
        uint32_t next = engine_slot(e, cur)->next;
        if (prev == OP_NONE)
            e->wait_head = next;
        else
            engine_slot(e, prev)->next = next;
        if (e->wait_tail == idx)
            e->wait_tail = prev;
        e->waiting--;
        return;
    }
}

/* Abandon an operation: its awaiting task gave up. A queued one ends now; one with the kernel
 * is asked to stop and ends when its completion is reaped (its memory stays pinned till then). */
static void engine_abandon(engine_t *e, uint32_t idx)
{
    op_t *op = engine_slot(e, idx);
    if (op->abandoned)
        return;
    op->abandoned = 1;
    e->st.cancels++;
    /* A close is never stopped: its caller counts the descriptor closed (os.close's promise,
     * whatever happens), and one taken back, or cancelled in io-wq before a worker ran it,
     * would leave it open. It runs; its result is dropped. */
    if (op->kind == OP_CLOSE)
        return;
    if (op->state == OPS_WAITING) {
        wait_remove(e, idx);
        op_finish(e, idx, ECANCELED);
    } else if (op->state == OPS_KERNEL && !op->cancel_sent) {
        op->cancel_sent = 1;
        /* A piece the kernel has not taken yet names its descriptor by number, and the caller
         * may close that number as soon as this returns: it is taken back, never submitted. */
        if (e->ops->withdraw(e, idx)) {
            e->st.withdrawn++;
            engine_fail_unaccepted(e, idx, ECANCELED);
        } else {
            e->ops->cancel(e, idx);
        }
    }
}

/* The slot of `fut`'s operation, OP_NONE if this engine holds none (closed, or a forked
 * child's copy of its parent's). */
static uint32_t engine_op_of(engine_t *e, PyObject *fut)
{
    if (e->fork_gen != engine_fork_generation || e->closed)
        return OP_NONE;
    return engine_find(e, fut);
}

/* Abandon slot idx's operation; the cancel request goes out now, not with the iteration's
 * batch. 0, or -1 with the error set. */
static int engine_cancel_slot(engine_t *e, uint32_t idx)
{
    engine_abandon(e, idx);
    if (e->in_kernel) {
        PyObject *r = engine_flush(e, 0);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

PyObject *Engine_cancel(engine_t *e, PyObject *fut)
{
    uint32_t idx = engine_op_of(e, fut);
    if (idx == OP_NONE)
        Py_RETURN_FALSE;
    if (engine_cancel_slot(e, idx) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

/* cancel_wait(future) -> Future | None: cancel (abandon) the operation, and while the kernel
 * may still read or write its memory, a future resolved with None once it cannot: the
 * completion of a request that was already running (ASYNC_CANCEL answers -EALREADY for a read
 * the device is doing) has been reaped and the caller's buffer released. None when nothing
 * is left with the kernel (the operation had not been submitted, or is over). */
PyObject *Engine_cancel_wait(engine_t *e, PyObject *fut)
{
    uint32_t idx = engine_op_of(e, fut);
    if (idx == OP_NONE)
        Py_RETURN_NONE;
    if (engine_cancel_slot(e, idx) < 0)
        return NULL;
    op_t *op = engine_slot(e, idx);
    if (op->state == OPS_FREE || op->future != fut)  /* finished by its cancellation */
        Py_RETURN_NONE;
    if (op->settled) {
        PyObject *done = PyObject_CallMethod(op->settled, "done", NULL);
        if (!done)
            return NULL;
        int was_done = done == Py_True;
        Py_DECREF(done);
        if (!was_done)
            return Py_NewRef(op->settled);
        Py_CLEAR(op->settled);  /* its waiter was cancelled: a new one waits on */
    }
    op->settled = engine_new_future(e);
    return Py_XNewRef(op->settled);
}
