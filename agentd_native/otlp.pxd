# C declarations for otlp.py (Cython pure Python mode).  Keep in step with the
# .py: every name declared here must exist there with the same meaning, except
# the C-only helpers at the end, whose bodies live here: they are called only
# under `if _COMPILED:` and write into the encoder's buffer or take the queue's lock.
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.pythread cimport (
    NOWAIT_LOCK,
    WAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_free_lock,
    PyThread_release_lock,
    PyThread_type_lock,
)
from libc.string cimport memcpy, memmove

from agentd_native.span cimport Span

cdef extern from *:
    """
    /* An int as 16 unsigned big-endian bytes at p (OverflowError: < 0 or past 128 bits),
       as Cython converts its own large integer types. */
    static int __agentd_be128(PyObject *v, unsigned char *p) {
        if (!PyLong_Check(v)) {
            PyErr_Format(PyExc_TypeError, "a trace id must be an int, not %.200s",
                         Py_TYPE(v)->tp_name);
            return -1;
        }
    #if PY_VERSION_HEX >= 0x030d00A6
        Py_ssize_t n = PyLong_AsNativeBytes(v, p, 16, Py_ASNATIVEBYTES_BIG_ENDIAN
            | Py_ASNATIVEBYTES_UNSIGNED_BUFFER | Py_ASNATIVEBYTES_REJECT_NEGATIVE);
        if (n < 0) return -1;
        if (n > 16) {
            PyErr_SetString(PyExc_OverflowError, "a trace id past 128 bits");
            return -1;
        }
        return 0;
    #else
        return _PyLong_AsByteArray((PyLongObject *)v, p, 16, 0, 0);
    #endif
    }
    """
    int _be128 "__agentd_be128" (object v, unsigned char *p) except -1

cdef bint _COMPILED
cdef dict _KIND
cdef list _SMALL
cdef list _TAG
cdef list _SPAN_HEADS
cdef list _NO_PARTS
cdef Py_ssize_t _CACHE_MAX
cdef object _INT64_MIN, _INT64_END, _U64_END, _U128_END, _DOUBLE, _TIMES_FLAGS, _ID, _IDS

cdef int _check_record(object trace_id, object span_id, object parent_id, object start_ns,
                       object end_ns) except -1

cpdef bytes _varint(object n)
@cython.locals(n=Py_ssize_t)
cpdef bytes _len(int field, bytes payload)
cpdef bytes _str(int field, object text)
cpdef bytes _any(object value)
cpdef bytes _kv(int field, bytes key, bytes value)
cpdef bytes _attributes(int field, object attrs)


cdef class SpanEncoder:
    cdef bytes _resource
    cdef bytes _scope
    cdef object _secrets_of
    cdef tuple _secrets
    cdef dict _keys
    cdef dict _values
    cdef Py_ssize_t _nvalues
    cdef dict _heads
    cdef bytearray _buf  # the output: spans written from _n on, up to _cap (its length)
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap
    cdef Py_ssize_t _front
    cdef list _parts
    cdef dict _traces
    cdef public Py_ssize_t pending

    @cython.locals(mark=Py_ssize_t)
    cpdef add(self, object record)

    @cython.locals(parts=list)
    cpdef bytes take(self)

    cpdef bytes request(self, object records)

    @cython.locals(secrets=tuple)
    cdef _begin(self)

    cdef object _scrub(self, object text)  # not `str`: a str subclass (an enum) stays one

    @cython.locals(key=bytes)
    cdef bytes _key(self, object k)

    cdef bytes _value(self, object v)

    @cython.locals(sp=Span, tid=bytes, heads=dict, head=bytes, out=list, start=Py_ssize_t,
                   values=dict, by_value=dict, kv=bytes, val=bytes, inner=bytes,
                   n=Py_ssize_t, status=bytes, body=bytes)
    cdef int _span(self, object rec, dict traces, list parts) except -1

    @cython.locals(head=bytes, heads=dict)
    cdef bytes _head(self, object name, object kind)

    @cython.locals(kv=bytes)
    cdef bytes _cached_kv(self, object k, object v)


cdef class SpanQueue:
    cdef readonly SpanEncoder encoder
    cdef readonly object ready
    cdef readonly Py_ssize_t batch
    cdef readonly Py_ssize_t max_queue
    cdef public Py_ssize_t waiting
    cdef public bint armed
    cdef object _wake
    cdef object _dropped
    cdef object _running_loop
    cdef object _lock  # the interpreted twin's (None here)
    cdef PyThread_type_lock _clock  # the compiled twin's

    cdef int _hold(self) except -1
    cdef int _let_go(self) except -1

    @cython.locals(enc=SpanEncoder, failed=object, full=bint, n=Py_ssize_t, loop=object)
    cpdef put(self, object record)

    @cython.locals(enc=SpanEncoder, n=Py_ssize_t, body=bytes)
    cpdef tuple pop(self, bint partial)


cpdef bytes encode_request(object records, object resource, object scope)


# ---------------------------------------------------------------- C-only writers

cdef inline int _reserve(SpanEncoder e, Py_ssize_t need) except -1:
    """Room for `need` more bytes after `e._n`."""
    cdef Py_ssize_t cap
    if e._n + need > e._cap:
        cap = e._cap * 2
        if cap < e._n + need:
            cap = e._n + need
        if cap < 4096:
            cap = 4096
        PyByteArray_Resize(e._buf, cap)
        e._cap = cap
    return 0


cdef inline unsigned char *_base(SpanEncoder e):
    return <unsigned char *>PyByteArray_AS_STRING(e._buf)


cdef inline int _varint_size(unsigned long long v) noexcept nogil:
    cdef int n = 1
    while v > 0x7F:
        v >>= 7
        n += 1
    return n


cdef inline unsigned char *_put_varint(unsigned char *p, unsigned long long v) noexcept nogil:
    while v > 0x7F:
        p[0] = <unsigned char>((v & 0x7F) | 0x80)
        p += 1
        v >>= 7
    p[0] = <unsigned char>v
    return p + 1


cdef inline unsigned char *_put_be64(unsigned char *p, unsigned long long v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <unsigned char>(v >> (56 - 8 * i))
    return p + 8


cdef inline unsigned long long _get_be64(const unsigned char *p) noexcept nogil:
    cdef unsigned long long v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v


cdef inline unsigned char *_put_le64(unsigned char *p, unsigned long long v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <unsigned char>(v >> (8 * i))
    return p + 8


cdef inline unsigned char *_put_bytes(unsigned char *p, bytes b) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    memcpy(p, PyBytes_AS_STRING(b), n)
    return p + n


cdef inline int _put(SpanEncoder e, bytes b) except -1:
    """Copy `b` to the buffer."""
    _reserve(e, PyBytes_GET_SIZE(b))
    _put_bytes(_base(e) + e._n, b)
    e._n += PyBytes_GET_SIZE(b)
    return 0


cdef inline Py_ssize_t _open_span(SpanEncoder e, unsigned long long hi, unsigned long long lo,
                                  unsigned long long sid, unsigned long long pid, bytes head,
                                  unsigned long long t0, unsigned long long t1) except -1:
    """Begin a span: 3 bytes for its tag and length (`_close_span` fills them),
    then trace_id, span_id, parent_span_id when not 0, name and kind, the times
    and the flags, as the interpreted twin orders them. Returns where it starts."""
    cdef Py_ssize_t start = e._n
    _reserve(e, 3 + 18 + 20 + PyBytes_GET_SIZE(head) + 21)
    cdef unsigned char *p = _base(e) + start + 3
    p[0] = 0x0A  # trace_id = 1, 16 bytes, big-endian
    p[1] = 16
    p = _put_be64(_put_be64(p + 2, hi), lo)
    p[0] = 0x12  # span_id = 2, 8 bytes, big-endian
    p[1] = 8
    p = _put_be64(p + 2, sid)
    if pid:  # parent_span_id = 4
        p[0] = 0x22
        p[1] = 8
        p = _put_be64(p + 2, pid)
    p = _put_bytes(p, head)
    p[0] = 0x39  # start_time_unix_nano = 7, fixed64
    p = _put_le64(p + 1, t0)
    p[0] = 0x41  # end_time_unix_nano = 8, fixed64
    p = _put_le64(p + 1, t1)
    p[0] = 0x85  # flags = 16, fixed32: sampled
    p[1] = 0x01
    p[2] = 0x01
    p[3] = 0
    p[4] = 0
    p[5] = 0
    e._n = (p + 6) - _base(e)
    return start


cdef inline Py_ssize_t _open_record(SpanEncoder e, object trace_id, object span_id,
                                    object parent_id, bytes head, object start_ns,
                                    object end_ns) except -1:
    """`_open_span` of a tuple's Python integers (a bad one raises before
    anything is written)."""
    cdef unsigned char tid[16]
    _be128(trace_id, tid)
    cdef unsigned long long sid = span_id
    cdef unsigned long long pid = 0
    if parent_id:
        pid = parent_id
    cdef unsigned long long t0 = start_ns
    cdef unsigned long long t1 = end_ns
    return _open_span(e, _get_be64(tid), _get_be64(tid + 8), sid, pid, head, t0, t1)


cdef inline int _close_span(SpanEncoder e, Py_ssize_t start) except -1:
    """End the span begun at `start`: its tag and length before its body (the
    body moved if the length does not take 2 bytes)."""
    cdef Py_ssize_t body = e._n - start - 3
    cdef int head = 1 + _varint_size(<unsigned long long>body)
    cdef unsigned char *p
    if head > 3:
        _reserve(e, head - 3)
    p = _base(e) + start
    if head != 3:
        memmove(p + head, p + 3, body)
        e._n += head - 3
    p[0] = 0x12  # spans = 2
    _put_varint(p + 1, <unsigned long long>body)
    return 0


cdef inline bint _put_int_kv(SpanEncoder e, bytes key, object v) except -1:
    """An int64 attribute (`KeyValue` field 9 of a Span, `int_value = 3`)
    written in place; False (nothing written) when `v` is out of the int64 range."""
    cdef int overflow = 0
    cdef long long x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow:
        return False
    cdef unsigned long long u = <unsigned long long>x  # negative: ten bytes, as protobuf
    cdef int vsize = _varint_size(u)
    cdef Py_ssize_t inner = PyBytes_GET_SIZE(key) + 3 + vsize  # key, value tag, len, 0x18
    _reserve(e, 1 + _varint_size(<unsigned long long>inner) + inner)
    cdef unsigned char *p = _base(e) + e._n
    p[0] = 0x4A  # attributes = 9
    p = _put_varint(p + 1, <unsigned long long>inner)
    p = _put_bytes(p, key)
    p[0] = 0x12  # value = 2 (AnyValue)
    p[1] = <unsigned char>(1 + vsize)
    p[2] = 0x18  # int_value = 3
    p = _put_varint(p + 3, u)
    e._n = p - _base(e)
    return True


cdef inline bytes _finish(SpanEncoder e, Py_ssize_t front):
    """The request: its two headers written just before the spans (which start
    at `front`), then one copy out of the buffer."""
    cdef Py_ssize_t spans = e._n - front
    cdef Py_ssize_t n2 = PyBytes_GET_SIZE(e._scope) + spans  # ScopeSpans
    cdef Py_ssize_t n1 = PyBytes_GET_SIZE(e._resource) + 1 + _varint_size(n2) + n2  # ResourceSpans
    cdef Py_ssize_t begin = (front - PyBytes_GET_SIZE(e._scope) - 1 - _varint_size(n2)
                             - PyBytes_GET_SIZE(e._resource) - 1 - _varint_size(n1))
    cdef unsigned char *p = _base(e) + begin
    p[0] = 0x0A  # resource_spans = 1
    p = _put_varint(p + 1, <unsigned long long>n1)
    p = _put_bytes(p, e._resource)
    p[0] = 0x12  # scope_spans = 2
    p = _put_varint(p + 1, <unsigned long long>n2)
    _put_bytes(p, e._scope)
    out = PyBytes_FromStringAndSize(<char *>_base(e) + begin, e._n - begin)
    if e._cap > (1 << 20):  # a rare huge batch: do not keep its buffer
        e._buf = bytearray()
        e._cap = 0
    e._n = 0
    return out


# ---------------------------------------------------------------- SpanQueue's C lock

cdef inline int _new_lock(SpanQueue q) except -1:
    _free_lock(q)  # `__init__` called again
    q._clock = PyThread_allocate_lock()
    if q._clock == NULL:
        raise MemoryError("a lock for the span queue")
    return 0


cdef inline void _free_lock(SpanQueue q) noexcept:
    if q._clock != NULL:
        PyThread_free_lock(q._clock)
        q._clock = NULL


cdef inline int _acquire(SpanQueue q) except -1:
    """Take the queue's lock: at once when free (the GIL held throughout), else
    waited for without the GIL (its holder may need the GIL to finish)."""
    if q._clock == NULL:
        raise RuntimeError("SpanQueue.__init__ was not called")
    if not PyThread_acquire_lock(q._clock, NOWAIT_LOCK):
        with nogil:
            PyThread_acquire_lock(q._clock, WAIT_LOCK)
    return 0


cdef inline void _release(SpanQueue q) noexcept:
    PyThread_release_lock(q._clock)
