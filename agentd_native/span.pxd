# C declarations for span.py (Cython pure Python mode).  Keep in step with
# the .py: every name declared here must exist there with the same meaning.
cimport cython

cdef object _U64
cdef object _sink
cdef bint _parent_based
cdef int _sampler
cdef object _bound
cdef object _random_bits
cdef tuple _cancelled
cdef object _time_ns

cdef dict _meta_heads
cdef object _get, _set, _reset

cdef bint _root_sampled(object trace_id) except -1


cdef class Span:
    cdef object _headers
    cdef object _tail
    cdef object _token
    cdef object _tp
    cdef public dict attrs
    cdef public long long end_ns
    cdef public object error
    cdef public object kind
    cdef public object name
    cdef public object parent_id
    cdef public bint sampled
    cdef public object span_id
    cdef public long long start_ns
    cdef public object trace_id
    cdef public object tracestate

    @cython.locals(up=Span)
    cdef int _init(self, object name, object parent, object kind, dict attrs,
                   object trace_id) except -1

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


cdef class Steps:
    cdef Span _cur

    @cython.locals(cur=Span)
    cpdef next(self, object step)

    @cython.locals(cur=Span)
    cpdef close(self, object exc)


@cython.locals(cur=Span)
cpdef list headers()

@cython.locals(head=object, cur=Span)
cpdef bytes meta(bytes meta_json, object head_of)
