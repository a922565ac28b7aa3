/* The part of the io_uring kernel ABI the engine uses, written out here instead of taken from
 * <linux/io_uring.h>, as liburing ships its own copy.
 *
 * Why: the uapi header a wheel is built against is the build image's, and manylinux images
 * carry old ones (manylinux_2_28: 4.18 headers, no io_uring at all; manylinux_2_34: 5.14, no
 * MKDIRAT/SYMLINKAT/LINKAT, no SETUP_SINGLE_ISSUER/DEFER_TASKRUN). The ABI itself never
 * changes once a kernel ships it, so the layouts and numbers below are valid on every kernel
 * that has the feature; what the running kernel has is decided at run time (io_uring_setup's
 * EINVAL for setup flags, IORING_REGISTER_PROBE for opcodes, the features word).
 *
 * tests/project/test_build.py compares every size, offset and constant here with the build host's
 * <linux/io_uring.h>, and builds the extension with that header (and openat2.h) made
 * unavailable.
 */
#ifndef AIONATIVE_URING_ABI_H
#define AIONATIVE_URING_ABI_H

#ifdef LINUX_IO_URING_H
#error "uring_abi.h replaces <linux/io_uring.h>: include one or the other"
#endif

#include <stdint.h>

/* System call numbers: one table for every architecture since 5.1 (alpha aside). */
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_io_uring_enter
#define __NR_io_uring_enter 426
#endif
#ifndef __NR_io_uring_register
#define __NR_io_uring_register 427
#endif

/* One submission queue entry: 64 bytes. Only the fields the engine fills are named; the op
 * flags word is one union in the kernel, each opcode reading it under its own name. */
struct io_uring_sqe {
    uint8_t opcode;
    uint8_t flags;        /* IOSQE_* */
    uint16_t ioprio;
    int32_t fd;
    uint64_t off;         /* also addr2: RENAMEAT/LINKAT's new path, STATX's result buffer */
    uint64_t addr;        /* buffer or path; FALLOCATE's length */
    uint32_t len;         /* length; mode, mask or new directory fd by opcode */
    union {
        int32_t rw_flags;         /* READ/WRITE: RWF_* (5.6) */
        uint32_t fsync_flags;     /* FSYNC: IORING_FSYNC_DATASYNC (5.1) */
        uint32_t cancel_flags;    /* ASYNC_CANCEL (5.5) */
        uint32_t open_flags;      /* OPENAT (5.6) */
        uint32_t statx_flags;     /* STATX (5.6) */
        uint32_t rename_flags;    /* RENAMEAT (5.11) */
        uint32_t unlink_flags;    /* UNLINKAT (5.11) */
        uint32_t hardlink_flags;  /* LINKAT (5.15) */
    };
    uint64_t user_data;
    uint16_t buf_index;
    uint16_t personality;
    int32_t splice_fd_in; /* also file_index */
    uint64_t addr3;
    uint64_t pad2;
};

/* IOSQE_* (sqe->flags) */
#define IOSQE_IO_LINK (1U << 2)  /* 5.3 */
#define IOSQE_ASYNC (1U << 4)    /* 5.6: no inline attempt, straight to an io-wq worker */

/* One completion queue entry: 16 bytes (rings without IORING_SETUP_CQE32). */
struct io_uring_cqe {
    uint64_t user_data;
    int32_t res;
    uint32_t flags;
};

struct io_sqring_offsets {
    uint32_t head, tail, ring_mask, ring_entries, flags, dropped, array, resv1;
    uint64_t user_addr;
};

struct io_cqring_offsets {
    uint32_t head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1;
    uint64_t user_addr;
};

struct io_uring_params {
    uint32_t sq_entries;
    uint32_t cq_entries;
    uint32_t flags;       /* IORING_SETUP_* */
    uint32_t sq_thread_cpu;
    uint32_t sq_thread_idle;
    uint32_t features;    /* IORING_FEAT_*, set by the kernel */
    uint32_t wq_fd;
    uint32_t resv[3];
    struct io_sqring_offsets sq_off;
    struct io_cqring_offsets cq_off;
};

struct io_uring_probe_op {
    uint8_t op;
    uint8_t resv;
    uint16_t flags;       /* IO_URING_OP_SUPPORTED */
    uint32_t resv2;
};

struct io_uring_probe {
    uint8_t last_op;
    uint8_t ops_len;
    uint16_t resv;
    uint32_t resv2[3];
    struct io_uring_probe_op ops[];
};

#define IO_URING_OP_SUPPORTED (1U << 0)

/* mmap offsets of the rings */
#define IORING_OFF_SQ_RING 0ULL
#define IORING_OFF_CQ_RING 0x8000000ULL
#define IORING_OFF_SQES 0x10000000ULL

/* IORING_SETUP_* (io_uring_params.flags); the kernel answers EINVAL for one it lacks. */
#define IORING_SETUP_CQSIZE (1U << 3)         /* 5.5 */
#define IORING_SETUP_SUBMIT_ALL (1U << 7)     /* 5.18 */
#define IORING_SETUP_COOP_TASKRUN (1U << 8)   /* 5.19 */
#define IORING_SETUP_TASKRUN_FLAG (1U << 9)   /* 5.19 */
#define IORING_SETUP_SINGLE_ISSUER (1U << 12) /* 6.0 */
#define IORING_SETUP_DEFER_TASKRUN (1U << 13) /* 6.1 */

/* IORING_FEAT_* (io_uring_params.features) */
#define IORING_FEAT_SINGLE_MMAP (1U << 0)     /* 5.4 */
#define IORING_FEAT_NODROP (1U << 1)          /* 5.5 */
#define IORING_FEAT_RW_CUR_POS (1U << 3)      /* 5.6 */
#define IORING_FEAT_EXT_ARG (1U << 8)         /* 5.11 */

/* The SQ ring's flags word */
#define IORING_SQ_CQ_OVERFLOW (1U << 1)       /* 5.8 */
#define IORING_SQ_TASKRUN (1U << 2)           /* 5.19 */

/* io_uring_enter flags */
#define IORING_ENTER_GETEVENTS (1U << 0)
#define IORING_ENTER_EXT_ARG (1U << 3)        /* 5.11: the argument is io_uring_getevents_arg */

/* io_uring_enter's argument with IORING_ENTER_EXT_ARG: a wait's timeout (`ts` points to a
 * struct __kernel_timespec) */
struct io_uring_getevents_arg {
    uint64_t sigmask;
    uint32_t sigmask_sz;
    uint32_t pad;
    uint64_t ts;
};

struct uring_timespec {   /* struct __kernel_timespec */
    int64_t tv_sec;
    long long tv_nsec;
};

/* io_uring_register opcodes */
#define IORING_REGISTER_EVENTFD 4             /* 5.2 */
#define IORING_REGISTER_PROBE 8               /* 5.6 */

/* IORING_OP_FSYNC's flags */
#define IORING_FSYNC_DATASYNC (1U << 0)

/* IORING_OP_NOP's flags (in rw_flags): answer sqe->len as the result (6.11; a test's fault) */
#define IORING_NOP_INJECT_RESULT (1U << 0)

/* Opcodes, with the kernel that added each; the probe says which the running kernel has. */
enum {
    IORING_OP_NOP = 0,            /* 5.1 */
    IORING_OP_FSYNC = 3,          /* 5.1 */
    IORING_OP_ASYNC_CANCEL = 14,  /* 5.5 */
    IORING_OP_FALLOCATE = 17,     /* 5.6 */
    IORING_OP_OPENAT = 18,        /* 5.6 */
    IORING_OP_CLOSE = 19,         /* 5.6 */
    IORING_OP_STATX = 21,         /* 5.6 */
    IORING_OP_READ = 22,          /* 5.6 */
    IORING_OP_WRITE = 23,         /* 5.6 */
    IORING_OP_RENAMEAT = 35,      /* 5.11 */
    IORING_OP_UNLINKAT = 36,      /* 5.11 */
    IORING_OP_MKDIRAT = 37,       /* 5.15 */
    IORING_OP_SYMLINKAT = 38,     /* 5.15 */
    IORING_OP_LINKAT = 39,        /* 5.15 */
    IORING_OP_FTRUNCATE = 55,     /* 6.9 */
};

_Static_assert(sizeof(struct io_uring_sqe) == 64, "io_uring_sqe is 64 bytes");
_Static_assert(sizeof(struct io_uring_cqe) == 16, "io_uring_cqe is 16 bytes");
_Static_assert(sizeof(struct io_uring_params) == 120, "io_uring_params is 120 bytes");
_Static_assert(sizeof(struct io_uring_probe) == 16, "io_uring_probe's header is 16 bytes");
_Static_assert(sizeof(struct io_uring_getevents_arg) == 24, "io_uring_getevents_arg is 24 bytes");
_Static_assert(sizeof(struct uring_timespec) == 16, "__kernel_timespec is 16 bytes");

#endif
