# C declarations for sse.py (Cython pure Python mode).  Keep in step with the
# .py: every name declared here must exist there with the same meaning.
cimport cython

cdef extern from "<string.h>":
    const char *_memchr "memchr" (const char *s, int c, size_t n) nogil

cdef bint _COMPILED
cdef Py_ssize_t _RETRY_DIGITS
cdef object _BOUND_MAX

@cython.locals(p="const char *", q="const char *")
cdef Py_ssize_t _find(bytes buf, int byte, Py_ssize_t start, Py_ssize_t end)


cdef class SSEEvent:
    cdef readonly str event
    cdef readonly str data
    cdef readonly str id


@cython.locals(ev=SSEEvent)
cdef SSEEvent _make_event(str event, str data, str id_)


cdef class SSEParser:
    cdef readonly str last_event_id
    cdef readonly object retry
    cdef readonly Py_ssize_t max_event
    cdef readonly long long retry_min
    cdef readonly long long retry_max
    cdef list _chunks
    cdef Py_ssize_t _pending
    cdef Py_ssize_t _size
    cdef object _failed
    cdef bint _skip_lf
    cdef bint _bom
    cdef str _data
    cdef list _data_more
    cdef str _event
    cdef str _id

    @cython.locals(n=Py_ssize_t, buf=bytes, p="const char *", pos=Py_ssize_t,
                   events=list, first=str, data_more=list, text=str, event_type=str, id_buf=str,
                   last_id=str, retry=object, lf=Py_ssize_t, cr=Py_ssize_t,
                   eol=Py_ssize_t, nxt=Py_ssize_t, colon=Py_ssize_t,
                   name_end=Py_ssize_t, vs=Py_ssize_t, nl=Py_ssize_t, value=bytes,
                   size=Py_ssize_t, max_event=Py_ssize_t, ms="long long")
    cpdef list feed(self, object data)

    cdef int _fail(self, Py_ssize_t size, list events, str last_id) except -1

    cpdef list close(self)
