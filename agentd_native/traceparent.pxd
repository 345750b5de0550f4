# C declarations for traceparent.py (Cython pure Python mode).  Keep in step with
# the .py: every name declared here must exist there with the same meaning.
cimport cython

cdef extern from *:
    """
    #define __agentd_ucs1(s) (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND ? \\
        (const unsigned char *)PyUnicode_1BYTE_DATA(s) : (const unsigned char *)0)
    """
    const unsigned char *_ucs1 "__agentd_ucs1" (str s)

cdef bint _COMPILED
cdef str _OWS

cdef long _digit(long c) noexcept

@cython.locals(p="const unsigned char *", i=Py_ssize_t, d=long, hi="unsigned long long",
               lo="unsigned long long", span="unsigned long long",
               flags="unsigned long long", trace_id=object, parent_id=object)
cdef object _fast(str value)

cpdef object parse_traceparent(object value)
