# C declarations for span.py (Cython pure Python mode).  Keep in step with
# the .py: every name declared here must exist there with the same meaning,
# except the C-only helpers at the end, whose bodies live here: they are called
# only under `if _COMPILED:` (ids, the clock, the traceparent's hex, the context
# variable through CPython's C API).
cimport cython
from cpython.contextvars cimport PyContextVar_Get, PyContextVar_Reset, PyContextVar_Set
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from cpython.unicode cimport PyUnicode_DecodeASCII
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

cdef bint _COMPILED
cdef object _U64
cdef object _sink
cdef bint _parent_based
cdef int _sampler
cdef object _bound
cdef object _random_bits
cdef tuple _cancelled
cdef object _time_ns
cdef unsigned long long _rng

cdef dict _meta_heads
cdef object _get, _set, _reset

cdef bint _root_sampled(object low) except -1
cdef unsigned long long _span_id() except? 0
cdef long long _now() except? -1
cdef object _current()
cdef object _enter(object span)
cdef int _leave(object token) except -1
cdef object _join(object hi, object lo)


cdef class Span:
    cdef object _headers
    cdef unsigned long long _hi  # the trace id's high and low 64 bits
    cdef unsigned long long _lo
    cdef unsigned long long _pid
    cdef unsigned long long _sid
    cdef object _tail
    cdef object _token
    cdef object _tp
    cdef public dict attrs
    cdef public long long end_ns
    cdef public object error
    cdef public object kind
    cdef public object name
    cdef public bint sampled
    cdef public long long start_ns
    cdef public object tracestate

    @cython.locals(up=Span)
    cdef int _init(self, object name, object parent, object kind, dict attrs,
                   object trace_id) except -1

    cpdef tuple record(self)

    cdef int _exit(self, object exc) except -1

    @cython.locals(sink=object)
    cdef int _finish(self) except -1

    @cython.locals(out=list)
    cdef list _w3c(self)

    @cython.locals(tail=bytes)
    cdef bytes _meta_tail(self)


@cython.locals(span=Span)
cdef Span _span(object name, object parent, object kind, dict attrs)

cpdef Span child(object name, object kind, dict attrs)

@cython.locals(span=Span)
cpdef Span served(object name, object parent, object tracestate, dict attrs)


cdef class Steps:
    cdef Span _cur
    cdef object _up
    cdef object _token

    @cython.locals(cur=Span)
    cpdef next(self, object step)

    @cython.locals(cur=Span)
    cpdef close(self, object exc)


@cython.locals(cur=Span)
cpdef list headers()

@cython.locals(head=object, cur=Span)
cpdef bytes meta(bytes meta_json, object head_of)


# ---------------------------------------------------------------- C-only helpers

cdef inline int _seed(unsigned long long seed) except -1:
    global _rng
    _rng = seed
    return 0


cdef inline unsigned long long _next_id() noexcept:
    """SplitMix64 (Steele, Lea and Flood): a span id, never 0."""
    global _rng
    cdef unsigned long long z = 0
    while z == 0:
        _rng += 0x9E3779B97F4A7C15ULL
        z = _rng
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
        z = z ^ (z >> 31)
    return z


cdef inline long long _clock_ns() noexcept:
    """The wall clock in nanoseconds since the epoch, as `time.time_ns()`."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef inline object _cv_get(object var):
    """The variable's value (its default when unset)."""
    cdef PyObject *value = NULL
    PyContextVar_Get(var, NULL, &value)
    if value is NULL:
        return None
    out = <object>value
    Py_XDECREF(value)
    return out


cdef inline object _cv_set(object var, object value):
    return PyContextVar_Set(var, value)


cdef inline int _cv_reset(object var, object token) except -1:
    return PyContextVar_Reset(var, token)


cdef inline char *_hex16(char *p, unsigned long long v) noexcept:
    """16 lowercase hex digits of `v` at p."""
    cdef int i
    cdef int d
    for i in range(15, -1, -1):
        d = v & 15
        p[i] = (48 + d) if d < 10 else (87 + d)
        v >>= 4
    return p + 16


cdef inline str _hex_traceparent(unsigned long long hi, unsigned long long lo,
                                 unsigned long long sid, bint sampled):
    """`00-<trace id>-<span id>-<flags>`, written in C."""
    cdef char buf[55]
    cdef char *p = buf
    p[0] = 48
    p[1] = 48
    p[2] = 45
    p = _hex16(_hex16(p + 3, hi), lo)
    p[0] = 45
    p = _hex16(p + 1, sid)
    p[0] = 45
    p[1] = 48
    p[2] = 49 if sampled else 48
    return PyUnicode_DecodeASCII(buf, 55, NULL)
