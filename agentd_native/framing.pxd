# C declarations for framing.py (Cython pure Python mode).  Keep in step with
# the .py: every name declared here must exist there with the same meaning.
cimport cython

cdef extern from *:
    """
    #define __agentd_bytes_from(p, n) PyBytes_FromStringAndSize((const char *)(p), (n))
    #define __agentd_bytes_ptr(b) ((const unsigned char *)PyBytes_AS_STRING(b))
    """
    bytes _bytes_from "__agentd_bytes_from" (const unsigned char *v, Py_ssize_t n)
    const unsigned char *_bytes_ptr "__agentd_bytes_ptr" (object b)

cdef bint _COMPILED

cdef bytes _slice(bytes buf, Py_ssize_t start, Py_ssize_t end)

cpdef object _check_max(object max_frame)

@cython.locals(size=Py_ssize_t)
cpdef bytes encode_frame(object body, object max_frame=*)


cdef class FrameDecoder:
    cdef readonly long long max_frame
    cdef list _chunks
    cdef Py_ssize_t _pending
    cdef long long _need
    cdef object _error

    @cython.locals(n=Py_ssize_t, pos=Py_ssize_t, take="long long", frames=list, head=bytes)
    cpdef list feed(self, object data)

    @cython.locals(p="const unsigned char *", need="long long", size="long long",
                   end="long long")
    cdef int _parse(self, bytes data, Py_ssize_t pos, Py_ssize_t n, list frames) except -1
