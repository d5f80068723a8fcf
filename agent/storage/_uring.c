/*
 * reservoir.agent.storage._uring: a small io_uring ring for the storage engine.
 *
 * One Ring owns an io_uring instance, an eventfd registered with it (so any event
 * loop can watch completions with add_reader) and a pool of page-aligned buffers,
 * one per slot, registered with io_uring_register_buffers so reads and writes use
 * READ_FIXED/WRITE_FIXED.  A request occupies one slot from preparation until its
 * completion is reaped; the slot's buffer is its bounce buffer, so the kernel never
 * touches memory owned by Python objects and O_DIRECT alignment always holds for
 * the buffer address.  Data is copied into the slot buffer when a write is
 * prepared and out of it (into a new bytes object or the caller's buffer) when a
 * read is reaped.  write_in_place skips the copy: the kernel reads the caller's
 * buffer itself (its address aligned as the descriptor needs), which the slot holds
 * (a buffer export, so it can be neither freed nor resized) until the completion
 * is reaped.
 *
 * An arena (Ring(arena=N)) is N more bytes of page-aligned memory registered with
 * the pool (the buffer index after the slots'); the Ring exports it through the
 * buffer protocol, so a caller can receive data straight into it, and
 * write_registered writes from it with WRITE_FIXED: no copy into a slot buffer.
 * The arena is unmapped only when the Ring is freed, which no export outlives.
 *
 * Conventions: helpers return 0 or -errno and name the failing syscall; only the
 * methods exposed to Python raise, as OSError(errno, "<strerror> (originated from
 * <syscall>)").  A Ring is used from one thread (the event loop's); methods raise
 * RuntimeError if called while another thread is inside a GIL-free section.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_ENTRIES 4096u
#define MAX_BUFSIZE (16u << 20)
#define MAX_IN_PLACE (1u << 30) /* largest write_in_place */
#define MAX_ARENA (1ull << 30)  /* largest arena: one registered buffer */
#define REAP_BATCH 64u

enum { OP_NONE, OP_READ, OP_WRITE, OP_OTHER };

typedef struct {
    PyObject *user; /* completion token handed back by reap(); NULL when free */
    Py_buffer held; /* the caller's buffer: a read's destination or an in-place
                       write's source; held.obj NULL if none */
    int op;
} Slot;

typedef struct {
    PyObject_HEAD
    struct io_uring ring;
    int ring_ok;        /* queue_init succeeded and queue_exit not yet called */
    int efd;            /* eventfd signalled on every completion, or -1 */
    int fixed;          /* pool registered with the ring */
    int busy;           /* a method is running without the GIL */
    int leak_pool;      /* I/O may still target the pool: never unmap it */
    unsigned entries;   /* slots == maximum requests in flight */
    size_t bufsize;     /* bytes per slot buffer */
    char *pool;
    size_t pool_len;
    char *arena;        /* registered after the slots' buffers, or NULL */
    size_t arena_len;
    int arena_fixed;    /* the arena is registered too */
    Slot *slots;
    unsigned *free_slots; /* stack of free slot indexes */
    unsigned nfree;
} RingObject;

/* ------------------------------------------------------------------ errors */

static PyObject *
raise_errno(int err, const char *syscall)
{
    char msg[256];
    PyObject *args;

    snprintf(msg, sizeof msg, "%s (originated from %s)", strerror(err), syscall);
    args = Py_BuildValue("(is)", err, msg);
    if (args != NULL) {
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static int
check_usable(RingObject *self)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Ring is in use by another thread");
        return -1;
    }
    if (!self->ring_ok) {
        PyErr_SetString(PyExc_ValueError, "I/O operation on closed Ring");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ setup */

static int
setup_pool(RingObject *self)
{
    size_t i;

    self->pool_len = (size_t)self->entries * self->bufsize;
    self->pool = mmap(NULL, self->pool_len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (self->pool == MAP_FAILED) {
        self->pool = NULL;
        return -errno;
    }
    self->slots = calloc(self->entries, sizeof(Slot));
    self->free_slots = calloc(self->entries, sizeof(unsigned));
    if (self->slots == NULL || self->free_slots == NULL)
        return -ENOMEM;
    for (i = 0; i < self->entries; i++)
        self->free_slots[i] = self->entries - 1 - (unsigned)i;
    self->nfree = self->entries;
    if (self->arena_len > 0) {
        self->arena = mmap(NULL, self->arena_len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (self->arena == MAP_FAILED) {
            self->arena = NULL;
            return -errno;
        }
    }
    return 0;
}

/* Registration can fail (RLIMIT_MEMLOCK, old kernels): the pool then still
 * serves as aligned bounce buffers with plain READ/WRITE. */
static int
register_pool(RingObject *self)
{
    unsigned count = self->entries + (self->arena != NULL);
    struct iovec *iov = calloc(count, sizeof(struct iovec));
    unsigned i;
    int ret;

    if (iov == NULL)
        return -ENOMEM;
    for (i = 0; i < self->entries; i++) {
        iov[i].iov_base = self->pool + (size_t)i * self->bufsize;
        iov[i].iov_len = self->bufsize;
    }
    if (self->arena != NULL) {
        iov[self->entries].iov_base = self->arena;
        iov[self->entries].iov_len = self->arena_len;
    }
    ret = io_uring_register_buffers(&self->ring, iov, count);
    self->arena_fixed = ret == 0 && self->arena != NULL;
    if (ret < 0 && self->arena != NULL) /* too much to pin (RLIMIT_MEMLOCK): the slots */
        ret = io_uring_register_buffers(&self->ring, iov, self->entries);
    free(iov);
    self->fixed = ret == 0;
    return ret;
}

static int
ring_setup(RingObject *self, const char **syscall)
{
    struct io_uring_params p;
    int ret;

    memset(&p, 0, sizeof p);
    *syscall = "io_uring_setup";
    ret = io_uring_queue_init_params(self->entries, &self->ring, &p);
    if (ret < 0)
        return ret;
    self->ring_ok = 1;
    *syscall = "eventfd";
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0)
        return -errno;
    *syscall = "io_uring_register_eventfd";
    ret = io_uring_register_eventfd(&self->ring, self->efd);
    if (ret < 0)
        return ret;
    *syscall = "mmap";
    ret = setup_pool(self);
    if (ret < 0)
        return ret;
    (void)register_pool(self);
    return 0;
}

/* The object starts zeroed, and 0 is a valid descriptor (stdin): mark the eventfd
 * absent before anything can fail, or the dealloc of a Ring whose __init__ raised
 * (bad sizes, bad arguments) or never ran would close(0), and the next descriptor
 * the process opens (an event loop's epoll fd, say) would silently become fd 0. */
static PyObject *
Ring_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwds))
{
    RingObject *self = (RingObject *)type->tp_alloc(type, 0);

    if (self != NULL)
        self->efd = -1;
    return (PyObject *)self;
}

static int
Ring_init(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"entries", "bufsize", "arena", NULL};
    unsigned int entries = 64, bufsize = 128 * 1024;
    unsigned long long arena = 0;
    const char *syscall = "";
    int ret;

    if (self->ring_ok || self->pool != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Ring already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|IIK", kwlist, &entries, &bufsize, &arena))
        return -1;
    if (arena > MAX_ARENA || arena % 4096 != 0) {
        PyErr_SetString(PyExc_ValueError, "arena must be a multiple of 4096 up to 1 GiB");
        return -1;
    }
    if (entries < 1 || entries > MAX_ENTRIES || bufsize < 512 || bufsize > MAX_BUFSIZE ||
        bufsize % 4096 != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "entries must be 1..4096 and bufsize a multiple of 4096 up to 16 MiB");
        return -1;
    }
    self->entries = entries;
    self->bufsize = bufsize;
    self->arena_len = (size_t)arena;
    /* Registering the pool pins and accounts every page of it, which takes a
     * while for large pools; setup touches no Python object, so drop the GIL. */
    Py_BEGIN_ALLOW_THREADS
    ret = ring_setup(self, &syscall);
    Py_END_ALLOW_THREADS
    if (ret < 0) {
        raise_errno(-ret, syscall);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ completions */

static inline char *
slot_buf(RingObject *self, unsigned idx)
{
    return self->pool + (size_t)idx * self->bufsize;
}

static void
release_slot(RingObject *self, unsigned idx)
{
    Slot *s = &self->slots[idx];

    if (s->held.obj != NULL)
        PyBuffer_Release(&s->held);
    Py_CLEAR(s->user);
    s->op = OP_NONE;
    self->free_slots[self->nfree++] = idx;
}

/* The data a finished read produced: copied into the caller's buffer (None is
 * returned) or into a new bytes object. */
static PyObject *
read_result(RingObject *self, unsigned idx, int *res)
{
    Slot *s = &self->slots[idx];
    PyObject *data;

    if (s->op != OP_READ || *res <= 0)
        Py_RETURN_NONE;
    if (s->held.obj != NULL) {
        memcpy(s->held.buf, slot_buf(self, idx), (size_t)*res);
        Py_RETURN_NONE;
    }
    data = PyBytes_FromStringAndSize(slot_buf(self, idx), *res);
    if (data == NULL) {
        PyErr_Clear();
        *res = -ENOMEM;
        Py_RETURN_NONE;
    }
    return data;
}

/* Appends (user, res, data) to out (if not NULL) and frees the slot. */
static int
complete_cqe(RingObject *self, const struct io_uring_cqe *cqe, PyObject *out)
{
    unsigned idx = (unsigned)cqe->user_data;
    int res = cqe->res, ret = 0;
    PyObject *data, *item;

    if (idx >= self->entries || self->slots[idx].user == NULL)
        return 0; /* not ours: ignore */
    data = read_result(self, idx, &res);
    item = Py_BuildValue("(OiN)", self->slots[idx].user, res, data);
    if (item == NULL || (out != NULL && PyList_Append(out, item) < 0))
        ret = -1;
    Py_XDECREF(item);
    release_slot(self, idx);
    return ret;
}

static int
reap_cq(RingObject *self, PyObject *out)
{
    struct io_uring_cqe *cqes[REAP_BATCH];
    unsigned n, i;
    int ret = 0;

    while ((n = io_uring_peek_batch_cqe(&self->ring, cqes, REAP_BATCH)) > 0) {
        for (i = 0; i < n; i++)
            if (complete_cqe(self, cqes[i], out) < 0)
                ret = -1;
        io_uring_cq_advance(&self->ring, n);
    }
    return ret;
}

/* Waits until every slot is free again; completions go to out (may be NULL). */
static void
drain(RingObject *self, PyObject *out)
{
    struct io_uring_cqe *cqe;
    int ret;

    while (self->nfree < self->entries) {
        self->busy = 1;
        /* Blocks until the device finishes the I/O still in flight, which can take
         * as long as the disk needs: let other Python threads run meanwhile. */
        Py_BEGIN_ALLOW_THREADS
        ret = io_uring_submit_and_wait(&self->ring, 1);
        if (ret >= 0 || ret == -EINTR || ret == -EAGAIN || ret == -EBUSY)
            ret = io_uring_peek_cqe(&self->ring, &cqe);
        Py_END_ALLOW_THREADS
        self->busy = 0;
        if (ret < 0 && ret != -EAGAIN && ret != -EINTR) {
            self->leak_pool = 1; /* cannot know when the kernel is done */
            return;
        }
        if (reap_cq(self, out) < 0)
            PyErr_Clear();
    }
}

static void
teardown(RingObject *self, PyObject *out)
{
    if (self->ring_ok) {
        if (self->slots != NULL)
            drain(self, out);
        io_uring_queue_exit(&self->ring);
        self->ring_ok = 0;
    }
    if (self->efd >= 0) {
        close(self->efd);
        self->efd = -1;
    }
}

static void
Ring_dealloc(RingObject *self)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    teardown(self, NULL);
    if (self->slots != NULL) {
        for (unsigned i = 0; i < self->entries; i++)
            if (self->slots[i].user != NULL)
                release_slot(self, i);
    }
    free(self->slots);
    free(self->free_slots);
    if (self->pool != NULL && !self->leak_pool)
        munmap(self->pool, self->pool_len);
    if (self->arena != NULL && !self->leak_pool)
        munmap(self->arena, self->arena_len);
    PyErr_Restore(type, value, tb);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ----------------------------------------------------------- preparation */

static int
as_int(PyObject *obj, int *out)
{
    long v = PyLong_AsLong(obj);

    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "value does not fit in a C int");
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int
parse_fd_offset(PyObject *const *args, int *fd, unsigned long long *offset)
{
    long long off;

    if (as_int(args[0], fd) < 0)
        return -1;
    off = PyLong_AsLongLong(args[1]);
    if (off == -1 && PyErr_Occurred())
        return -1;
    if (off < 0) {
        PyErr_SetString(PyExc_ValueError, "negative offset");
        return -1;
    }
    *offset = (unsigned long long)off;
    return 0;
}

static int
check_nargs(Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char *name)
{
    if (nargs < lo || nargs > hi) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd to %zd arguments (%zd given)", name, lo,
                     hi, nargs);
        return -1;
    }
    return 0;
}

static int
check_length(RingObject *self, Py_ssize_t length)
{
    if (length < 0 || (size_t)length > self->bufsize) {
        PyErr_Format(PyExc_ValueError, "length must be 0..%zu", self->bufsize);
        return -1;
    }
    return 0;
}

/* Takes a free slot and an SQE; nothing may fail after this succeeds. */
static int
claim(RingObject *self, unsigned *idx, struct io_uring_sqe **sqe)
{
    if (check_usable(self) < 0)
        return -1;
    if (self->nfree == 0) {
        raise_errno(EBUSY, "io_uring_get_sqe");
        return -1;
    }
    *sqe = io_uring_get_sqe(&self->ring);
    if (*sqe == NULL) {
        raise_errno(EBUSY, "io_uring_get_sqe");
        return -1;
    }
    *idx = self->free_slots[--self->nfree];
    return 0;
}

static void
fill_slot(RingObject *self, struct io_uring_sqe *sqe, unsigned idx, int op, PyObject *user)
{
    Slot *s = &self->slots[idx];

    Py_INCREF(user);
    s->user = user;
    s->op = op;
    io_uring_sqe_set_data64(sqe, idx);
}

static PyObject *
Ring_read(RingObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct io_uring_sqe *sqe;
    unsigned long long offset;
    Py_buffer dest = {0};
    Py_ssize_t length;
    unsigned idx;
    int fd;

    if (check_nargs(nargs, 4, 5, "read") < 0 || parse_fd_offset(args, &fd, &offset) < 0)
        return NULL;
    length = PyLong_AsSsize_t(args[2]);
    if ((length == -1 && PyErr_Occurred()) || check_length(self, length) < 0)
        return NULL;
    if (nargs == 5 && args[4] != Py_None) {
        if (PyObject_GetBuffer(args[4], &dest, PyBUF_WRITABLE) < 0)
            return NULL;
        if (dest.len != length) {
            PyBuffer_Release(&dest);
            PyErr_SetString(PyExc_ValueError, "dest must be exactly length bytes");
            return NULL;
        }
    }
    if (claim(self, &idx, &sqe) < 0) {
        if (dest.obj != NULL)
            PyBuffer_Release(&dest);
        return NULL;
    }
    if (self->fixed)
        io_uring_prep_read_fixed(sqe, fd, slot_buf(self, idx), (unsigned)length, offset,
                                 (int)idx);
    else
        io_uring_prep_read(sqe, fd, slot_buf(self, idx), (unsigned)length, offset);
    self->slots[idx].held = dest; /* ownership moves to the slot */
    fill_slot(self, sqe, idx, OP_READ, args[3]);
    Py_RETURN_NONE;
}

static PyObject *
Ring_write(RingObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct io_uring_sqe *sqe;
    unsigned long long offset;
    Py_buffer data;
    unsigned idx;
    int fd;

    if (check_nargs(nargs, 4, 4, "write") < 0 || parse_fd_offset(args, &fd, &offset) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (check_length(self, data.len) < 0 || claim(self, &idx, &sqe) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    memcpy(slot_buf(self, idx), data.buf, (size_t)data.len);
    if (self->fixed)
        io_uring_prep_write_fixed(sqe, fd, slot_buf(self, idx), (unsigned)data.len, offset,
                                  (int)idx);
    else
        io_uring_prep_write(sqe, fd, slot_buf(self, idx), (unsigned)data.len, offset);
    PyBuffer_Release(&data);
    fill_slot(self, sqe, idx, OP_WRITE, args[3]);
    Py_RETURN_NONE;
}

/* Queues a write straight from the caller's buffer and returns True, or returns
 * False (nothing queued) when the buffer's address is not a multiple of align (the
 * caller then writes through a slot buffer, as O_DIRECT needs aligned memory). */
static PyObject *
Ring_write_in_place(RingObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct io_uring_sqe *sqe;
    unsigned long long offset;
    Py_buffer data;
    Py_ssize_t align;
    unsigned idx;
    int fd;

    if (check_nargs(nargs, 5, 5, "write_in_place") < 0 || parse_fd_offset(args, &fd, &offset) < 0)
        return NULL;
    align = PyLong_AsSsize_t(args[4]);
    if (align == -1 && PyErr_Occurred())
        return NULL;
    if (align < 1 || (align & (align - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "align must be a power of two");
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if ((uintptr_t)data.buf & (uintptr_t)(align - 1)) {
        PyBuffer_Release(&data);
        Py_RETURN_FALSE;
    }
    if ((size_t)data.len > MAX_IN_PLACE) {
        PyBuffer_Release(&data);
        PyErr_Format(PyExc_ValueError, "write_in_place: length must be 0..%u", MAX_IN_PLACE);
        return NULL;
    }
    if (claim(self, &idx, &sqe) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    io_uring_prep_write(sqe, fd, data.buf, (unsigned)data.len, offset);
    self->slots[idx].held = data; /* released when the completion is reaped */
    fill_slot(self, sqe, idx, OP_WRITE, args[3]);
    Py_RETURN_TRUE;
}

/* Whether [buf, buf + len) lies in the registered arena. */
static int
in_arena(RingObject *self, const char *buf, Py_ssize_t len)
{
    size_t at;

    if (!self->arena_fixed || buf < self->arena || len < 0 ||
        (size_t)len > self->arena_len)
        return 0;
    at = (size_t)(buf - self->arena);
    return at <= self->arena_len - (size_t)len;
}

/* Queues a write straight from data in the arena (WRITE_FIXED, held until reaped)
 * and returns True, or returns False (nothing queued) when data is not wholly in
 * the registered arena. */
static PyObject *
Ring_write_registered(RingObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct io_uring_sqe *sqe;
    unsigned long long offset;
    Py_buffer data;
    unsigned idx;
    int fd;

    if (check_nargs(nargs, 4, 4, "write_registered") < 0 ||
        parse_fd_offset(args, &fd, &offset) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (!in_arena(self, data.buf, data.len) || data.len == 0) {
        PyBuffer_Release(&data);
        Py_RETURN_FALSE;
    }
    if (claim(self, &idx, &sqe) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    io_uring_prep_write_fixed(sqe, fd, data.buf, (unsigned)data.len, offset, (int)self->entries);
    self->slots[idx].held = data; /* released when the completion is reaped */
    fill_slot(self, sqe, idx, OP_WRITE, args[3]);
    Py_RETURN_TRUE;
}

static PyObject *
Ring_registered(RingObject *self, PyObject *arg)
{
    Py_buffer data;
    int inside;

    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    inside = in_arena(self, data.buf, data.len);
    PyBuffer_Release(&data);
    return PyBool_FromLong(inside);
}

/* The buffer protocol: the arena, writable; the export holds the Ring. */
static int
Ring_getbuffer(RingObject *self, Py_buffer *view, int flags)
{
    if (self->arena == NULL) {
        PyErr_SetString(PyExc_BufferError, "Ring has no arena");
        view->obj = NULL;
        return -1;
    }
    return PyBuffer_FillInfo(view, (PyObject *)self, self->arena, (Py_ssize_t)self->arena_len,
                             0, flags);
}

static PyBufferProcs Ring_as_buffer = {
    .bf_getbuffer = (getbufferproc)Ring_getbuffer,
};

static PyObject *
Ring_fsync(RingObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct io_uring_sqe *sqe;
    unsigned idx;
    int fd, datasync = 1;

    if (check_nargs(nargs, 2, 3, "fsync") < 0)
        return NULL;
    if (as_int(args[0], &fd) < 0)
        return NULL;
    if (nargs == 3 && (datasync = PyObject_IsTrue(args[2])) < 0)
        return NULL;
    if (claim(self, &idx, &sqe) < 0)
        return NULL;
    io_uring_prep_fsync(sqe, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
    fill_slot(self, sqe, idx, OP_OTHER, args[1]);
    Py_RETURN_NONE;
}

static PyObject *
Ring_fallocate(RingObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct io_uring_sqe *sqe;
    unsigned long long offset;
    long long length;
    unsigned idx;
    int fd, mode;

    if (check_nargs(nargs, 5, 5, "fallocate") < 0)
        return NULL;
    if (as_int(args[0], &mode) < 0 || parse_fd_offset(args + 1, &fd, &offset) < 0)
        return NULL;
    length = PyLong_AsLongLong(args[3]);
    if (length == -1 && PyErr_Occurred())
        return NULL;
    if (claim(self, &idx, &sqe) < 0)
        return NULL;
    io_uring_prep_fallocate(sqe, fd, mode, (off_t)offset, (off_t)length);
    fill_slot(self, sqe, idx, OP_OTHER, args[4]);
    Py_RETURN_NONE;
}

static PyObject *
Ring_sync_file_range(RingObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct io_uring_sqe *sqe;
    unsigned long long offset;
    long long length;
    unsigned idx;
    int fd, flags;

    if (check_nargs(nargs, 5, 5, "sync_file_range") < 0)
        return NULL;
    if (parse_fd_offset(args, &fd, &offset) < 0)
        return NULL;
    length = PyLong_AsLongLong(args[2]);
    if (length == -1 && PyErr_Occurred())
        return NULL;
    if (length < 0 || length > UINT_MAX) {
        PyErr_SetString(PyExc_ValueError, "sync_file_range: length out of range");
        return NULL;
    }
    if (as_int(args[3], &flags) < 0)
        return NULL;
    if (claim(self, &idx, &sqe) < 0)
        return NULL;
    io_uring_prep_sync_file_range(sqe, fd, (unsigned)length, (off_t)offset, flags);
    fill_slot(self, sqe, idx, OP_OTHER, args[4]);
    Py_RETURN_NONE;
}

/* -------------------------------------------------------- submit and reap */

static PyObject *
Ring_submit(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    int ret;

    if (check_usable(self) < 0)
        return NULL;
    if (io_uring_sq_ready(&self->ring) == 0)
        return PyLong_FromLong(0);
    self->busy = 1;
    /* io_uring_enter issues the requests inline where it can: buffered reads and
     * writes copy page-cache data and may wait on filesystem locks, so other
     * threads get the GIL meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    ret = io_uring_submit(&self->ring);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (ret < 0)
        return raise_errno(-ret, "io_uring_enter");
    return PyLong_FromLong(ret);
}

static PyObject *
Ring_reap(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    uint64_t count;
    PyObject *out;

    if (check_usable(self) < 0)
        return NULL;
    /* Clear the eventfd before looking at the CQ, so a completion posted after
     * this point signals it again.  EAGAIN just means it was not signalled. */
    if (read(self->efd, &count, sizeof count) < 0 && errno != EAGAIN)
        return raise_errno(errno, "read");
    out = PyList_New(0);
    if (out != NULL && reap_cq(self, out) < 0)
        Py_CLEAR(out);
    return out;
}

static PyObject *
Ring_close(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out;

    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Ring is in use by another thread");
        return NULL;
    }
    out = PyList_New(0);
    if (out == NULL)
        return NULL;
    teardown(self, out);
    return out;
}

static PyObject *
Ring_fileno(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (check_usable(self) < 0)
        return NULL;
    return PyLong_FromLong(self->efd);
}

static PyObject *
Ring_get_inflight(RingObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(self->entries - self->nfree);
}

static PyObject *
Ring_get_fixed(RingObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->fixed);
}

static PyObject *
Ring_get_closed(RingObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(!self->ring_ok);
}

static PyObject *
Ring_get_entries(RingObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(self->entries);
}

static PyObject *
Ring_get_arena_fixed(RingObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->arena_fixed);
}

static PyObject *
Ring_get_bufsize(RingObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(self->bufsize);
}

static PyMethodDef Ring_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Ring_read, METH_FASTCALL,
     "read(fd, offset, length, user, dest=None): queue a read of length <= bufsize."},
    {"write", (PyCFunction)(void (*)(void))Ring_write, METH_FASTCALL,
     "write(fd, offset, data, user): copy data to a slot buffer and queue a write."},
    {"write_in_place", (PyCFunction)(void (*)(void))Ring_write_in_place, METH_FASTCALL,
     "write_in_place(fd, offset, data, user, align): queue a write from data itself (held "
     "until reaped); False, nothing queued, if data's address is not a multiple of align."},
    {"write_registered", (PyCFunction)(void (*)(void))Ring_write_registered, METH_FASTCALL,
     "write_registered(fd, offset, data, user): queue a WRITE_FIXED from data in the arena "
     "(held until reaped); False, nothing queued, if data is not wholly in it."},
    {"registered", (PyCFunction)Ring_registered, METH_O,
     "registered(data): whether data lies wholly in the registered arena."},
    {"fsync", (PyCFunction)(void (*)(void))Ring_fsync, METH_FASTCALL,
     "fsync(fd, user, datasync=True): queue an fsync/fdatasync."},
    {"fallocate", (PyCFunction)(void (*)(void))Ring_fallocate, METH_FASTCALL,
     "fallocate(mode, fd, offset, length, user): queue an fallocate."},
    {"sync_file_range", (PyCFunction)(void (*)(void))Ring_sync_file_range, METH_FASTCALL,
     "sync_file_range(fd, offset, length, flags, user): queue a sync_file_range."},
    {"submit", (PyCFunction)Ring_submit, METH_NOARGS, "Submit queued requests."},
    {"reap", (PyCFunction)Ring_reap, METH_NOARGS,
     "Clear the eventfd and return [(user, res, data)] for every completion."},
    {"close", (PyCFunction)Ring_close, METH_NOARGS,
     "Wait for requests in flight, tear the ring down, return their completions."},
    {"fileno", (PyCFunction)Ring_fileno, METH_NOARGS, "The completion eventfd."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ring_getset[] = {
    {"inflight", (getter)Ring_get_inflight, NULL, "Slots in use.", NULL},
    {"fixed", (getter)Ring_get_fixed, NULL, "Buffers registered (READ/WRITE_FIXED).", NULL},
    {"closed", (getter)Ring_get_closed, NULL, "close() was called.", NULL},
    {"entries", (getter)Ring_get_entries, NULL, "Maximum requests in flight.", NULL},
    {"bufsize", (getter)Ring_get_bufsize, NULL, "Largest read or write.", NULL},
    {"arena_fixed", (getter)Ring_get_arena_fixed, NULL, "The arena is registered.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "reservoir.agent.storage._uring.Ring",
    .tp_basicsize = sizeof(RingObject),
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ring(entries=64, bufsize=131072, arena=0): io_uring with a registered buffer "
              "pool (and arena, exported as the Ring's buffer).",
    .tp_methods = Ring_methods,
    .tp_getset = Ring_getset,
    .tp_as_buffer = &Ring_as_buffer,
    .tp_init = (initproc)Ring_init,
    .tp_new = Ring_new,
};

/* ------------------------------------------------------------------ module */

static PyObject *
probe(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    struct io_uring ring;
    int ret = io_uring_queue_init(2, &ring, 0);

    if (ret < 0)
        return raise_errno(-ret, "io_uring_setup");
    io_uring_queue_exit(&ring);
    Py_RETURN_NONE;
}

/* One copy from the page cache straight into a new bytes object, or None when the
 * cache does not hold the whole range (preadv2 with RWF_NOWAIT never blocks).  The
 * GIL is released around the copy, which can take a while for a large read. */
static PyObject *
pread_nowait(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    unsigned long long offset;
    Py_ssize_t length;
    PyObject *bytes;
    struct iovec iov;
    ssize_t got;
    int fd;

    if (check_nargs(nargs, 3, 3, "pread_nowait") < 0 || parse_fd_offset(args, &fd, &offset) < 0)
        return NULL;
    length = PyLong_AsSsize_t(args[2]);
    if (length == -1 && PyErr_Occurred())
        return NULL;
    if (length <= 0) {
        PyErr_SetString(PyExc_ValueError, "pread_nowait: length must be positive");
        return NULL;
    }
    bytes = PyBytes_FromStringAndSize(NULL, length);
    if (bytes == NULL)
        return NULL;
    iov.iov_base = PyBytes_AS_STRING(bytes);
    iov.iov_len = (size_t)length;
    Py_BEGIN_ALLOW_THREADS
    got = preadv2(fd, &iov, 1, (off_t)offset, RWF_NOWAIT);
    Py_END_ALLOW_THREADS
    if (got == length)
        return bytes;
    Py_DECREF(bytes);
    if (got >= 0 || errno == EAGAIN)
        Py_RETURN_NONE;
    return raise_errno(errno, "preadv2");
}

static PyMethodDef module_methods[] = {
    {"probe", probe, METH_NOARGS, "Raise OSError unless io_uring works here."},
    {"pread_nowait", (PyCFunction)(void (*)(void))pread_nowait, METH_FASTCALL,
     "pread_nowait(fd, offset, length): the bytes if the page cache holds them all, else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef uring_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_uring",
    .m_doc = "io_uring ring with an eventfd and registered buffers (liburing).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__uring(void)
{
    PyObject *m;

    if (PyType_Ready(&RingType) < 0)
        return NULL;
    m = PyModule_Create(&uring_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RingType);
    if (PyModule_AddObject(m, "Ring", (PyObject *)&RingType) < 0) {
        Py_DECREF(&RingType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
