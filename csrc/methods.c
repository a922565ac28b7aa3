/* The Engine's Python methods that start operations: their arguments (converted and checked
 * as the os module's functions do), the inline fast path tried first where a call has one
 * (reads, writes, cached opens and closes, whole small files), else a slot started on the
 * kernel queue; and the Engine's method table. Everything here runs on the owning loop's
 * thread with the GIL held.
 */
#include "engine.h"
#include "inline.h"
#include "lazy.h"
#include "loop.h"
#include "methods.h"
#include "stats.h"
#include "submit.h"
#include "uring.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <linux/stat.h>

/* While callers wait parked (see engine_park), a run of inline reads — one task's, between
 * two of its waits — may complete this many before its next read parks it in turn. */
#define PARK_SLICE 16u

/* ---------------------------------------------------------------- arguments */

static int parse_fd(PyObject *o, int *fd)
{
    int overflow;  /* os.* convert a descriptor to a C int: the same error, word for word */
    long v = PyLong_AsLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v > INT_MAX || v < INT_MIN) {
        PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to C int");
        return -1;
    }
    *fd = (int)v;
    return 0;
}

static int parse_offset(PyObject *o, int64_t *off)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0) {  /* io_uring would read -1 as "the current position"; pread(2) says EINVAL */
        errno = EINVAL;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    *off = v;
    return 0;
}

static int check_nargs(const char *name, Py_ssize_t n, Py_ssize_t want)
{
    if (n == want)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name, want, n);
    return -1;
}

/* ---------------------------------------------------------------- reads and writes */

/* Three arguments (fd, a size or buffer, an offset), or with `with_retry` an optional fourth:
 * `retry`, true when the call comes back after the spent budget refused it (see
 * inline_budget_ok). 0, or -1 with the error set. */
static int parse_nargs(const char *name, PyObject *const *args, Py_ssize_t n, int with_retry,
                       int *retry)
{
    if (!with_retry)
        return check_nargs(name, n, 3);
    if (n != 3 && n != 4) {
        PyErr_Format(PyExc_TypeError, "%s() takes 3 or 4 arguments (%zd given)", name, n);
        return -1;
    }
    if (n == 4 && (*retry = PyObject_IsTrue(args[3])) < 0)
        return -1;
    return 0;
}

static Py_ssize_t parse_size(PyObject *o)
{
    PyObject *size_obj = PyNumber_Index(o);
    if (!size_obj)
        return -1;
    Py_ssize_t size = PyLong_AsSsize_t(size_obj);
    Py_DECREF(size_obj);
    return size;
}

/* pread and read: `fast` tries the inline path first and then returns the bytes themselves. */
/* fast: PREAD_QUEUE (the kernel queue only), PREAD_INLINE (inline when the page cache holds
 * the data, else the queue), PREAD_PARK (as PREAD_INLINE, but a read the spent budget or the
 * run's slice refused is done inline all the same and its caller parks: engine_read_or_park),
 * PREAD_INLINE_ONLY (inline or not at all: False when the budget is spent, None when the data
 * is not all cached or the read may not run inline). */
enum { PREAD_QUEUE, PREAD_INLINE, PREAD_PARK, PREAD_INLINE_ONLY };

/* inline_allowed, and for PREAD_PARK: refused by the spent budget, or by the end of the run's
 * slice while callers are parked, the read is allowed all the same and *park set (2 when the
 * slice refused it). */
static int read_allowed(engine_t *e, int fd, int retry, int fast, int *park)
{
    if (fast != PREAD_PARK)
        return inline_allowed(e, fd, retry);
    int sliced = e->park_len && e->slice_used >= PARK_SLICE;
    int ok = sliced ? 0 : inline_allowed(e, fd, 0);
    if (ok || !(sliced || (e->budget_ns && e->budget_spent)))
        return ok;
    *park = 1 + sliced;
    return inline_allowed(e, fd, INLINE_NOW);
}

/* A PREAD_INLINE_ONLY read that did not go inline: refused by the spent budget (False: the
 * caller may yield and retry), or one that must go to the kernel queue whatever the budget
 * says (None), a direct read among them: it never goes inline, so a turn would only delay it. */
static int inline_refused_by_budget(engine_t *e, int fd, int ok)
{
    return ok == 0 && e->budget_ns && e->budget_spent && !inline_fd_refuses(e, fd);
}

/* A read done inline (`res`, a new reference or NULL): the result itself, or for a caller that
 * parks (read_allowed) the future a later flush resolves with it. */
static PyObject *read_done(engine_t *e, PyObject *res, int fast, int park)
{
    if (!park) {
        e->slice_used += fast == PREAD_PARK;
        return res;
    }
    PyObject *fut = res ? engine_park(e, res, park == 2) : NULL;
    Py_XDECREF(res);
    return fut;
}

static PyObject *engine_pread(engine_t *e, PyObject *const *args, Py_ssize_t n,
                              const char *name, int fast)
{
    int fd, retry = 0;
    int64_t off;
    if (parse_nargs(name, args, n, fast == PREAD_INLINE_ONLY, &retry) < 0 ||
        parse_fd(args[0], &fd) < 0)
        return NULL;
    Py_ssize_t size = parse_size(args[1]);
    if ((size == -1 && PyErr_Occurred()) || parse_offset(args[2], &off) < 0)
        return NULL;
    if (size < 0) {  /* after every conversion, as os.pread checks it */
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    /* Checked after the conversions: __index__ is Python code. */
    if (!engine_usable(e))
        return NULL;
    if (fast && size == 0)
        return inline_empty_read(e, fd, off) < 0 ? NULL : PyBytes_FromStringAndSize(NULL, 0);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (!bytes)
        return NULL;
    uint64_t got = 0;
    int park = 0;
    int ok = fast && size <= INLINE_MAX ? read_allowed(e, fd, retry, fast, &park) : 0;
    if (ok > 0 &&
        inline_read(e, fd, PyBytes_AS_STRING(bytes), (uint64_t)size, off, -1, &got)) {
        if ((Py_ssize_t)got != size && _PyBytes_Resize(&bytes, (Py_ssize_t)got) < 0)
            return NULL;
        return read_done(e, bytes, fast, park);
    }
    if (fast == PREAD_INLINE_ONLY) {
        Py_DECREF(bytes);
        if (ok < 0)
            return NULL;
        return Py_NewRef(inline_refused_by_budget(e, fd, ok) ? Py_False : Py_None);
    }
    uint32_t idx = ok < 0 ? OP_NONE : slot_alloc(e);
    if (idx == OP_NONE) {
        Py_DECREF(bytes);
        return NULL;
    }
    op_t *op = engine_slot(e, idx);
    op->kind = OP_READ;
    op->fd = fd;
    op->bytes = bytes;
    op->buf = PyBytes_AS_STRING(bytes);
    op->len = (uint64_t)size;
    op->done = got;
    op->off = off;
    return engine_start(e, idx);
}

PyObject *Engine_pread(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_pread(e, args, n, "pread", PREAD_QUEUE);
}

/* A bytes object with `len` bytes (one DIO_ALIGN unit at least) of page-aligned room inside it,
 * at *aligned: one unit larger than that, so the room can start on a page boundary. NULL with
 * MemoryError for a length no allocation could hold. */
static PyObject *aligned_bytes(uint64_t len, char **aligned)
{
    const uint64_t unit = DIO_ALIGN;
    if (len < unit)
        len = unit;
    if (len > (uint64_t)PY_SSIZE_T_MAX - unit)
        return PyErr_NoMemory();
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(len + unit));
    if (bytes)
        *aligned = (char *)(((uintptr_t)PyBytes_AS_STRING(bytes) + unit - 1) &
                            ~(uintptr_t)(unit - 1));
    return bytes;
}

/* The slot of pread_direct or pwrite_direct: an operation on `fd` through `len` bytes at `buf`
 * inside `bytes` (taken over: held by the slot until its last completion is reaped), at
 * `off`. OP_NONE, with the error set and `bytes` released, if no slot could be had. */
static uint32_t aligned_slot(engine_t *e, int kind, int fd, PyObject *bytes, char *buf,
                             uint64_t len, int64_t off)
{
    uint32_t idx = slot_alloc(e);
    if (idx == OP_NONE) {
        Py_DECREF(bytes);
        return OP_NONE;
    }
    op_t *op = engine_slot(e, idx);
    op->kind = (uint8_t)kind;
    op->fd = fd;
    op->bytes = bytes;
    op->buf = buf;
    op->len = len;
    op->off = off;
    return idx;
}

/* An O_DIRECT read that asks the caller for no aligned memory: the kernel reads the
 * DIO_ALIGN-aligned range around [offset, offset + size) (one unit at least, so an empty read
 * still asks the file) into a bytes object the operation owns (aligned_bytes), and the result
 * is the part asked for, copied out when the completion is reaped. For files that have
 * positions (regular files, block devices): on a pipe the block read would consume data past
 * what was asked for (the file layer sends streams elsewhere). For the file layer's direct
 * reads (open(..., direct=True)), mapping a fresh buffer a read instead (mmap, the faults of
 * pinning it, munmap) costs several times this path's CPU for a 4 KiB read
 * (`python -m bench --workloads W3`). */
static PyObject *Engine_pread_direct(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    int fd;
    int64_t off;
    if (check_nargs("pread_direct", n, 3) < 0 || parse_fd(args[0], &fd) < 0)
        return NULL;
    Py_ssize_t size = parse_size(args[1]);
    if ((size == -1 && PyErr_Occurred()) || parse_offset(args[2], &off) < 0)
        return NULL;
    if (size < 0 || off < 0) {
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (!engine_usable(e))
        return NULL;
    const uint64_t unit = DIO_ALIGN;
    uint64_t start = (uint64_t)off & ~(unit - 1);
    uint64_t end = (uint64_t)off + (uint64_t)size;  /* both < 2**63: no overflow */
    uint64_t len = ((end + unit - 1) & ~(unit - 1)) - start;
    if (len < unit)
        len = unit;
    char *buf = NULL;
    PyObject *bytes = aligned_bytes(len, &buf);
    uint32_t idx = bytes ? aligned_slot(e, OP_READ, fd, bytes, buf, len, (int64_t)start)
                         : OP_NONE;
    if (idx == OP_NONE)
        return NULL;
    op_t *op = engine_slot(e, idx);
    op->trim = 1;
    op->skip = (uint32_t)((uint64_t)off - start);
    op->want = (uint64_t)size;
    return engine_start(e, idx);
}

/* An O_DIRECT write of `data` from aligned memory the operation owns: a copy of it
 * (aligned_bytes), so the caller's object needs no alignment and is not held. The offset and
 * the length must suit the descriptor (whole blocks: the kernel answers EINVAL otherwise); the
 * file layer sends only such writes here, and reads and rewrites partial blocks itself. */
static PyObject *Engine_pwrite_direct(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    int fd;
    int64_t off;
    if (check_nargs("pwrite_direct", n, 3) < 0 || parse_fd(args[0], &fd) < 0 ||
        parse_offset(args[2], &off) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (off < 0) {  /* io_uring would read -1 as "the file position" */
        PyBuffer_Release(&view);
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    /* Checked after the conversions: __index__ and __buffer__ may be Python code. */
    if (!engine_usable(e)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *buf = NULL;
    uint64_t len = (uint64_t)view.len;
    PyObject *bytes = aligned_bytes(len, &buf);
    if (bytes && len)
        memcpy(buf, view.buf, (size_t)len);
    PyBuffer_Release(&view);
    uint32_t idx = bytes ? aligned_slot(e, OP_WRITE, fd, bytes, buf, len, off) : OP_NONE;
    return idx == OP_NONE ? NULL : engine_start(e, idx);
}

static PyObject *Engine_read(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_pread(e, args, n, "read", PREAD_INLINE);
}

PyObject *Engine_read_inline(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_pread(e, args, n, "read_inline", PREAD_INLINE_ONLY);
}

/* preadinto, readinto, pwrite and write: `fast` tries the inline path first and then returns
 * the count itself. A write may also return False: the iteration's budget is spent (yield,
 * then call again with retry=True). A read's `fast` is one of the PREAD_ modes, as pread's. */
static PyObject *engine_buffer_op(engine_t *e, PyObject *const *args, Py_ssize_t n,
                                  const char *name, int kind, int fast)
{
    int fd, retry = 0;
    int64_t off;
    int with_retry = kind == OP_WRITE ? fast : fast == PREAD_INLINE_ONLY;
    if (parse_nargs(name, args, n, with_retry, &retry) < 0 ||
        parse_fd(args[0], &fd) < 0 || parse_offset(args[2], &off) < 0)
        return NULL;
    Py_buffer view;
    int flags = kind == OP_READINTO ? PyBUF_WRITABLE : PyBUF_SIMPLE;
    if (PyObject_GetBuffer(args[1], &view, flags) < 0)
        return NULL;
    /* Checked after the conversions: __index__ and __buffer__ may be Python code. */
    if (!engine_usable(e)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (fast && view.len == 0 && kind == OP_READINTO) {
        /* os.preadv's empty read, not os.pread's (0 on a directory): see csrc/inline.c. */
        PyBuffer_Release(&view);
        return inline_empty_readinto(e, fd, off) < 0 ? NULL : PyLong_FromLong(0);
    }
    uint64_t got = 0;
    int ok = 0, park = 0;
    uint64_t most = kind == OP_WRITE ? WRITE_INLINE_MAX : INLINE_MAX;
    if (fast && view.len > 0 && (uint64_t)view.len <= most)
        ok = kind == OP_WRITE ? inline_write_allowed(e, fd, retry)
                              : read_allowed(e, fd, retry, fast, &park);
    if (ok == 1 && (kind == OP_WRITE
                   ? inline_write(e, fd, view.buf, (uint64_t)view.len, off, &got)
                   : inline_read(e, fd, view.buf, (uint64_t)view.len, off, -1, &got))) {
        PyBuffer_Release(&view);
        return read_done(e, PyLong_FromUnsignedLongLong(got), fast, park);
    }
    if (ok == WRITE_LATER && kind == OP_WRITE) {
        PyBuffer_Release(&view);
        Py_RETURN_FALSE;
    }
    if (kind == OP_READINTO && fast == PREAD_INLINE_ONLY) {  /* as read_inline's answers */
        PyBuffer_Release(&view);
        if (ok < 0)
            return NULL;
        return Py_NewRef(inline_refused_by_budget(e, fd, ok) ? Py_False : Py_None);
    }
    uint32_t idx = ok < 0 ? OP_NONE : slot_alloc(e);
    if (idx == OP_NONE) {
        PyBuffer_Release(&view);
        return NULL;
    }
    op_t *op = engine_slot(e, idx);
    op->view = view;
    op->kind = (uint8_t)kind;
    op->fd = fd;
    op->buf = op->view.buf;
    op->len = (uint64_t)op->view.len;
    op->done = got;
    op->off = off;
    return engine_start(e, idx);
}

PyObject *Engine_preadinto(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "preadinto", OP_READINTO, PREAD_QUEUE);
}

static PyObject *Engine_readinto(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "readinto", OP_READINTO, PREAD_INLINE);
}

PyObject *Engine_readinto_inline(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "readinto_inline", OP_READINTO, PREAD_INLINE_ONLY);
}

PyObject *engine_read_or_park(engine_t *e, PyObject *const *args, int into)
{
    return into ? engine_buffer_op(e, args, 3, "readinto", OP_READINTO, PREAD_PARK)
                : engine_pread(e, args, 3, "read", PREAD_PARK);
}

static PyObject *Engine_pwrite(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "pwrite", OP_WRITE, 0);
}

PyObject *Engine_write(engine_t *e, PyObject *const *args, Py_ssize_t n)
{
    return engine_buffer_op(e, args, n, "write", OP_WRITE, 1);
}

static PyObject *engine_sync_op(engine_t *e, PyObject *arg, int kind)
{
    int fd;
    if (parse_fd(arg, &fd) < 0 || !engine_usable(e))
        return NULL;
    uint32_t idx = slot_alloc(e);
    if (idx == OP_NONE)
        return NULL;
    op_t *op = engine_slot(e, idx);
    op->kind = (uint8_t)kind;
    op->fd = fd;
    return engine_start(e, idx);
}

static PyObject *Engine_fsync(engine_t *e, PyObject *arg)
{
    return engine_sync_op(e, arg, OP_FSYNC);
}

static PyObject *Engine_fdatasync(engine_t *e, PyObject *arg)
{
    return engine_sync_op(e, arg, OP_FDATASYNC);
}

/* ---------------------------------------------------------------- path operations */

static int path_arg(PyObject *o, const char *what)
{
    if (o == Py_None)
        return 0;
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes (os.fsencode()d)", what);
        return -1;
    }
    if ((size_t)PyBytes_GET_SIZE(o) != strlen(PyBytes_AS_STRING(o))) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        return -1;
    }
    return 0;
}

/* A slot for a path or descriptor operation the kernel runs (io_uring), or NULL with
 * NotImplementedError where this engine cannot (the caller then uses a thread). */
static op_t *path_op_new(engine_t *e, int kind, uint32_t *idx, PyObject *path, PyObject *path2,
                         PyObject *filename, PyObject *filename2)
{
    if (path_arg(path, "path") < 0 || path_arg(path2, "path2") < 0 || !engine_usable(e))
        return NULL;
    if (!engine_supports(e, kind, -1)) {
        PyErr_SetString(PyExc_NotImplementedError, "operation not supported by this engine");
        return NULL;
    }
    PyObject *keep = PyTuple_Pack(4, path, path2, filename, filename2);
    if (!keep)
        return NULL;
    *idx = slot_alloc(e);
    if (*idx == OP_NONE) {
        Py_DECREF(keep);
        return NULL;
    }
    op_t *op = engine_slot(e, *idx);
    op->kind = (uint8_t)kind;
    op->keep = keep;
    op->buf = path != Py_None ? PyBytes_AS_STRING(path) : NULL;
    op->buf2 = path2 != Py_None ? PyBytes_AS_STRING(path2) : NULL;
    return op;
}

/* openat(dirfd, path, flags, mode, filename) -> Future[int] */
static PyObject *Engine_openat(engine_t *e, PyObject *args)
{
    int dirfd, flags;
    unsigned mode;
    PyObject *path, *filename;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "iOiIO:openat", &dirfd, &path, &flags, &mode, &filename))
        return NULL;
    op_t *op = path_op_new(e, OP_OPENAT, &idx, path, Py_None, filename, Py_None);
    if (!op)
        return NULL;
    op->fd = dirfd;
    op->oflags = flags;
    op->mode = mode;
    return engine_start(e, idx);
}

/* statx(dirfd, path, flags, mask, filename) -> Future[tuple] */
static PyObject *Engine_statx(engine_t *e, PyObject *args)
{
    int dirfd, flags;
    unsigned mask;
    PyObject *path, *filename;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "iOiIO:statx", &dirfd, &path, &flags, &mask, &filename))
        return NULL;
    struct statx *buf = calloc(1, sizeof *buf);
    if (!buf)
        return PyErr_NoMemory();
    op_t *op = path_op_new(e, OP_STATX, &idx, path, Py_None, filename, Py_None);
    if (!op) {
        free(buf);
        return NULL;
    }
    op->fd = dirfd;
    op->oflags = flags;
    op->mode = mask;
    op->bounce = buf;  /* the kernel writes it; freed with the slot */
    return engine_start(e, idx);
}

/* unlinkat(dirfd, path, flags, filename) / mkdirat(dirfd, path, mode, filename) */
static PyObject *engine_one_path(engine_t *e, PyObject *args, int kind, const char *fmt)
{
    int dirfd, arg;
    PyObject *path, *filename;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, fmt, &dirfd, &path, &arg, &filename))
        return NULL;
    op_t *op = path_op_new(e, kind, &idx, path, Py_None, filename, Py_None);
    if (!op)
        return NULL;
    op->fd = dirfd;
    op->oflags = arg;
    op->mode = (uint32_t)arg;
    return engine_start(e, idx);
}

static PyObject *Engine_unlinkat(engine_t *e, PyObject *args)
{
    return engine_one_path(e, args, OP_UNLINKAT, "iOiO:unlinkat");
}

static PyObject *Engine_mkdirat(engine_t *e, PyObject *args)
{
    return engine_one_path(e, args, OP_MKDIRAT, "iOiO:mkdirat");
}

/* renameat / linkat(olddirfd, oldpath, newdirfd, newpath, flags, filename, filename2) */
static PyObject *engine_two_paths(engine_t *e, PyObject *args, int kind, const char *fmt)
{
    int olddirfd, newdirfd, flags;
    PyObject *oldpath, *newpath, *filename, *filename2;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, fmt, &olddirfd, &oldpath, &newdirfd, &newpath, &flags,
                          &filename, &filename2))
        return NULL;
    op_t *op = path_op_new(e, kind, &idx, oldpath, newpath, filename, filename2);
    if (!op)
        return NULL;
    op->fd = olddirfd;
    op->fd2 = newdirfd;
    op->oflags = flags;
    return engine_start(e, idx);
}

static PyObject *Engine_renameat(engine_t *e, PyObject *args)
{
    return engine_two_paths(e, args, OP_RENAMEAT, "iOiOiOO:renameat");
}

static PyObject *Engine_linkat(engine_t *e, PyObject *args)
{
    return engine_two_paths(e, args, OP_LINKAT, "iOiOiOO:linkat");
}

/* symlinkat(target, newdirfd, linkpath, filename, filename2) */
static PyObject *Engine_symlinkat(engine_t *e, PyObject *args)
{
    int newdirfd;
    PyObject *target, *linkpath, *filename, *filename2;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "OiOOO:symlinkat", &target, &newdirfd, &linkpath, &filename,
                          &filename2))
        return NULL;
    op_t *op = path_op_new(e, OP_SYMLINKAT, &idx, target, linkpath, filename, filename2);
    if (!op)
        return NULL;
    op->fd2 = newdirfd;
    return engine_start(e, idx);
}

/* Whether the release of the file op->fd names may take long. io_uring closes inside the
 * io_uring_enter that submits the close, and the last reference's release (fput's task work)
 * runs before that call returns: on the loop's thread. A release can be long work: ext4 starts
 * writing back all the dirty data of a file that was truncated and then written (auto_da_alloc:
 * milliseconds for 64 MiB), the last close of an unlinked file frees its blocks, the inode's
 * eviction drops its cached pages; a device's release may wait (a serial line's for its
 * output to drain). What a regular file's release does is bounded by its size and blocks, so a
 * file below WRITE_ASYNC_MIN of either closes inline as before (a hand-off to a worker costs
 * it more than its release); any other closes in an io-wq worker, which runs the release
 * itself. AT_STATX_DONT_SYNC: a local filesystem answers from the inode in memory, and so does
 * a network one that honours the flag (9p ignores it and asks its server). A failed statx
 * (EBADF) leaves the close inline, to report what close(2) says. The file's identity is kept
 * for an -ECANCELED answer (engine_complete: was the descriptor released?). */
static int close_may_take_long(engine_t *e, op_t *op)
{
    struct statx sx;
    if (op->fd < 0)
        return 0;
    e->st.syscalls++;
    if (statx(op->fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC,
              STATX_TYPE | STATX_SIZE | STATX_BLOCKS | STATX_INO, &sx) < 0)
        return 0;
    op->len = sx.stx_ino;
    op->off = (int64_t)makedev(sx.stx_dev_major, sx.stx_dev_minor);
    return !S_ISREG(sx.stx_mode) || sx.stx_size >= WRITE_ASYNC_MIN ||
           sx.stx_blocks >= WRITE_ASYNC_MIN / 512;
}

/* close(fd) -> Future[None] */
static PyObject *Engine_close_fd(engine_t *e, PyObject *arg)
{
    int fd;
    uint32_t idx;
    if (parse_fd(arg, &fd) < 0)
        return NULL;
    op_t *op = path_op_new(e, OP_CLOSE, &idx, Py_None, Py_None, Py_None, Py_None);
    if (!op)
        return NULL;
    op->fd = fd;
    op->oflags = close_may_take_long(e, op);
    return engine_start(e, idx);
}

/* read_file(dirfd, path: bytes[, retry]) -> bytes | int | False | None (see inline_read_file) */
static PyObject *Engine_read_file(engine_t *e, PyObject *args)
{
    int dirfd, retry = 0;
    const char *path;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "iy#|p:read_file", &dirfd, &path, &len, &retry) ||
        !engine_usable(e))
        return NULL;
    if ((size_t)len != strlen(path))
        Py_RETURN_NONE;  /* an embedded NUL: the queue's openat raises what os.open does */
    return inline_read_file(e, dirfd, path, retry);
}

/* open_cached(dirfd, path: bytes, flags[, retry]) -> int | False | None (see inline_open) */
static PyObject *Engine_open_cached(engine_t *e, PyObject *args)
{
    int dirfd, flags, retry = 0;
    const char *path;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "iy#i|p:open_cached", &dirfd, &path, &len, &flags, &retry) ||
        !engine_usable(e))
        return NULL;
    if ((size_t)len != strlen(path))
        Py_RETURN_NONE;  /* an embedded NUL: the queue's openat raises what os.open does */
    return inline_open(e, dirfd, path, flags, retry);
}

/* close_cached(fd) -> bool (see inline_close) */
static PyObject *Engine_close_cached(engine_t *e, PyObject *arg)
{
    int fd;
    if (parse_fd(arg, &fd) < 0 || !engine_usable(e))
        return NULL;
    int r = inline_close(e, fd, 0);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* forget_fd(fd) -> None: the caller changed what `fd` is (fcntl F_SETFL) behind the engine's
 * back; what the inline path learned of it this iteration is void (see inline_forget_fd). */
static PyObject *Engine_forget_fd(engine_t *e, PyObject *arg)
{
    int fd;
    if (parse_fd(arg, &fd) < 0)
        return NULL;
    inline_forget_fd(e, fd);
    Py_RETURN_NONE;
}

/* fallocate(fd, mode, offset, length) / ftruncate(fd, length) -> Future[None] */
static PyObject *Engine_fallocate(engine_t *e, PyObject *args)
{
    int fd;
    unsigned mode;
    long long offset, length;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "iILL:fallocate", &fd, &mode, &offset, &length))
        return NULL;
    if (offset < 0 || length <= 0) {
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    op_t *op = path_op_new(e, OP_FALLOCATE, &idx, Py_None, Py_None, Py_None, Py_None);
    if (!op)
        return NULL;
    op->fd = fd;
    op->mode = mode;
    op->off = offset;
    op->len = (uint64_t)length;
    return engine_start(e, idx);
}

static PyObject *Engine_ftruncate(engine_t *e, PyObject *args)
{
    int fd;
    long long length;
    uint32_t idx;
    if (!PyArg_ParseTuple(args, "iL:ftruncate", &fd, &length))
        return NULL;
    if (length < 0) {
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    op_t *op = path_op_new(e, OP_FTRUNCATE, &idx, Py_None, Py_None, Py_None, Py_None);
    if (!op)
        return NULL;
    op->fd = fd;
    op->off = length;
    return engine_start(e, idx);
}

static const struct { const char *name; int kind; } op_names[] = {
    {"pread", OP_READ}, {"pwrite", OP_WRITE}, {"fsync", OP_FSYNC},
    {"openat", OP_OPENAT}, {"close", OP_CLOSE}, {"statx", OP_STATX},
    {"unlinkat", OP_UNLINKAT}, {"renameat", OP_RENAMEAT}, {"mkdirat", OP_MKDIRAT},
    {"symlinkat", OP_SYMLINKAT}, {"linkat", OP_LINKAT}, {"fallocate", OP_FALLOCATE},
    {"ftruncate", OP_FTRUNCATE},
};

/* supports(name, flags=0) -> bool: whether this engine runs the operation itself (the kernel,
 * or Linux AIO's writer threads for an open) rather than leaving it to a thread of the caller.
 * `flags` are an open's: Linux AIO takes only an open that creates or truncates (O_CREAT,
 * O_TRUNC), which the loop's next iteration waits for so that its task starts its write
 * before the tasks made ready beside it (kaio.c). Any other open would gain nothing in those
 * threads, and could wait there behind the large writes they hold. */
static PyObject *Engine_supports(engine_t *e, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "supports() takes 1 or 2 arguments (%zd given)",
                            nargs);
    const char *s = PyUnicode_AsUTF8(args[0]);
    if (!s)
        return NULL;
    long flags = nargs > 1 ? PyLong_AsLong(args[1]) : 0;
    if (flags == -1 && PyErr_Occurred())
        return NULL;
    if (flags < INT_MIN || flags > INT_MAX)
        return PyErr_Format(PyExc_OverflowError, "flags out of range");
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
        if (strcmp(s, op_names[i].name) == 0)
            return PyBool_FromLong(engine_supports(e, op_names[i].kind, (int)flags));
    return PyErr_Format(PyExc_ValueError, "unknown operation %R", args[0]);
}

/* turn_spent() -> bool: see inline_turn_spent. */
static PyObject *Engine_turn_spent(engine_t *e, PyObject *unused)
{
    if (e->closed || e->fork_gen != engine_fork_generation)
        Py_RETURN_FALSE;
    int spent = inline_turn_spent(e);
    if (spent < 0)
        return NULL;
    return PyBool_FromLong(spent);
}

PyMethodDef Engine_methods[] = {
    {"pread", (PyCFunction)(void (*)(void))Engine_pread, METH_FASTCALL,
     "pread(fd, size, offset) -> Future[bytes]"},
    {"preadinto", (PyCFunction)(void (*)(void))Engine_preadinto, METH_FASTCALL,
     "preadinto(fd, buffer, offset) -> Future[int]"},
    {"pread_direct", (PyCFunction)(void (*)(void))Engine_pread_direct, METH_FASTCALL,
     "pread_direct(fd, size, offset) -> Future[bytes]: an O_DIRECT read of the aligned range "
     "around [offset, offset + size) into the engine's own aligned memory; the part asked for "
     "(regular files and block devices only)"},
    {"pwrite_direct", (PyCFunction)(void (*)(void))Engine_pwrite_direct, METH_FASTCALL,
     "pwrite_direct(fd, data, offset) -> Future[int]: an O_DIRECT write of a copy of data "
     "made in the engine's own aligned memory (offset and length: whole blocks)"},
    {"read", (PyCFunction)(void (*)(void))Engine_read, METH_FASTCALL,
     "read(fd, size, offset) -> bytes | Future[bytes]: pread, completed inline (the bytes "
     "themselves) when the page cache holds the data and the iteration's budget allows"},
    {"read_inline", (PyCFunction)(void (*)(void))Engine_read_inline, METH_FASTCALL,
     "read_inline(fd, size, offset, retry=False) -> bytes | False | None: read's inline part "
     "alone: the bytes when the page cache holds them all, False when the iteration's budget "
     "is spent (yield, then try again with retry=True: allowed past the budget, up to a "
     "grace), None when the read must go to the kernel queue (nothing submitted)"},
    {"readinto", (PyCFunction)(void (*)(void))Engine_readinto, METH_FASTCALL,
     "readinto(fd, buffer, offset) -> int | Future[int]: preadinto, completed inline when it "
     "can be (see read)"},
    {"readinto_inline", (PyCFunction)(void (*)(void))Engine_readinto_inline, METH_FASTCALL,
     "readinto_inline(fd, buffer, offset, retry=False) -> int | False | None: readinto's "
     "inline part alone (see read_inline)"},
    {"pwrite", (PyCFunction)(void (*)(void))Engine_pwrite, METH_FASTCALL,
     "pwrite(fd, data, offset) -> Future[int]; short writes continue until all is written"},
    {"write", (PyCFunction)(void (*)(void))Engine_write, METH_FASTCALL,
     "write(fd, data, offset, retry=False) -> int | False | Future[int]: pwrite, done inline "
     "(the count) when it is at most 64 KiB to a local regular file and the iteration's "
     "budget allows; False when only the spent budget stood in the way (yield, then try "
     "again with retry=True); else the kernel queue's future"},
    {"fsync", (PyCFunction)Engine_fsync, METH_O, "fsync(fd) -> Future[None]"},
    {"fdatasync", (PyCFunction)Engine_fdatasync, METH_O, "fdatasync(fd) -> Future[None]"},
    {"openat", (PyCFunction)Engine_openat, METH_VARARGS,
     "openat(dirfd, path: bytes, flags, mode, filename) -> Future[int]"},
    {"close_fd", (PyCFunction)Engine_close_fd, METH_O, "close_fd(fd) -> Future[None]"},
    {"read_file", (PyCFunction)Engine_read_file, METH_VARARGS,
     "read_file(dirfd, path: bytes, retry=False) -> bytes | int | False | None: a whole "
     "small file read inline when the dentry and page caches hold it (bytes); else a "
     "descriptor opened inline for the caller to read and close (int), False when the "
     "iteration's budget is spent (yield, then try again with retry=True), or None (nothing "
     "opened)"},
    {"open_cached", (PyCFunction)Engine_open_cached, METH_VARARGS,
     "open_cached(dirfd, path: bytes, flags, retry=False) -> int | False | None: open(2) "
     "inline when the dentry cache holds every component of the path (int: the descriptor), "
     "False when the iteration's budget is spent (yield, then try again with retry=True), "
     "None to use the kernel queue (not cached, an error, or O_CREAT/O_TRUNC/O_TMPFILE)"},
    {"open_lazy", (PyCFunction)(void (*)(void))lazy_open, METH_FASTCALL,  /* csrc/lazy.c */
     "open_lazy(path: str, cls, loop, executor) -> cls | (fd, path) | None: open(path, 'rb')'s "
     "open inline, not bounded by the budget, then fstat(2): a regular file gives a lazy "
     "instance of cls (its _lazy a LazyReader), anything else (fd, path) with O_NONBLOCK "
     "cleared; None: nothing opened (use the kernel queue)"},
    {"close_cached", (PyCFunction)Engine_close_cached, METH_O,
     "close_cached(fd) -> bool: close(2) inline when it cannot wait (a linked regular file "
     "opened read-only on a local filesystem) and the fast path is on (not bounded by the "
     "budget); False: use close_fd"},
    {"forget_fd", (PyCFunction)Engine_forget_fd, METH_O,
     "forget_fd(fd) -> None: the descriptor's flags changed (fcntl F_SETFL): what the inline "
     "path learned of it this loop iteration is void"},
    {"statx", (PyCFunction)Engine_statx, METH_VARARGS,
     "statx(dirfd, path: bytes, flags, mask, filename) -> Future[tuple]"},
    {"unlinkat", (PyCFunction)Engine_unlinkat, METH_VARARGS,
     "unlinkat(dirfd, path: bytes, flags, filename) -> Future[None]"},
    {"mkdirat", (PyCFunction)Engine_mkdirat, METH_VARARGS,
     "mkdirat(dirfd, path: bytes, mode, filename) -> Future[None]"},
    {"renameat", (PyCFunction)Engine_renameat, METH_VARARGS,
     "renameat(olddirfd, old: bytes, newdirfd, new: bytes, flags, filename, filename2)"},
    {"linkat", (PyCFunction)Engine_linkat, METH_VARARGS,
     "linkat(olddirfd, old: bytes, newdirfd, new: bytes, flags, filename, filename2)"},
    {"symlinkat", (PyCFunction)Engine_symlinkat, METH_VARARGS,
     "symlinkat(target: bytes, newdirfd, linkpath: bytes, filename, filename2)"},
    {"fallocate", (PyCFunction)Engine_fallocate, METH_VARARGS,
     "fallocate(fd, mode, offset, length) -> Future[None]"},
    {"ftruncate", (PyCFunction)Engine_ftruncate, METH_VARARGS,
     "ftruncate(fd, length) -> Future[None]"},
    {"supports", (PyCFunction)(void (*)(void))Engine_supports, METH_FASTCALL,
     "supports(name, flags=0) -> bool: this engine runs the operation itself (for openat: "
     "an open with these flags)"},
    {"cancel", (PyCFunction)Engine_cancel, METH_O,
     "cancel(future) -> bool: abandon the operation whose future this is (False if this engine "
     "holds none); a close still runs, its result dropped"},
    {"turn_spent", (PyCFunction)Engine_turn_spent, METH_NOARGS,
     "turn_spent() -> bool: whether this loop iteration's budget is spent (work served from "
     "memory yields a turn then)"},
    {"cancel_wait", (PyCFunction)Engine_cancel_wait, METH_O,
     "cancel_wait(future) -> Future | None: cancel the operation; a future resolved when the "
     "kernel is done with its memory, or None if it is already"},
    {"fileno", (PyCFunction)Engine_fileno, METH_NOARGS, "the eventfd the loop watches"},
    {"_on_ready", (PyCFunction)Engine_on_ready, METH_NOARGS, "eventfd reader callback"},
    {"_flush", (PyCFunction)Engine_flush, METH_NOARGS,
     "submit the iteration's batch (the loop's callback: it wakes the tasks it completes)"},
    {"_send_now", (PyCFunction)Engine_send_now, METH_NOARGS,
     "submit what is prepared now, from code a task runs (completions' callbacks scheduled)"},
    {"close", (PyCFunction)Engine_close, METH_NOARGS,
     "wait for the kernel to finish every operation, then free the engine's resources"},
    {"stats", (PyCFunction)Engine_stats, METH_NOARGS, "counters"},
    {"info", (PyCFunction)Engine_info, METH_NOARGS, "backend details"},
    {NULL},
};
