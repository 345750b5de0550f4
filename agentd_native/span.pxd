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

cdef bint _root_sampled(object trace_id) except -1


cdef class Span:
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

    @cython.locals(sink=object)
    cdef int _finish(self) except -1
