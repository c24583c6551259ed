/* Python arguments as the store's C values: block hashes (uint64; a non-hash is no block),
 * slots and bounds (long long), sequences as tuples; and the lookups of a tuple's hashes
 * in a slot, which convert them one at a time. Converting a non-int runs its `__index__`:
 * Python code, which the store's `busy` flag keeps from changing the store meanwhile. */

#include "prefix.h"

/* Public calls only from CPython 3.12 on (no _PyLong_*): where `unsigned long` has 64
 * bits (LP64) its conversion, which reads the digits in one loop with an overflow check;
 * elsewhere the `unsigned long long` one (through a byte array, slower). Either raises
 * OverflowError out of range. On 3.11 the digits are read in place instead (below). */
#if ULONG_MAX >= UINT64_MAX
typedef unsigned long Wide;
#define as_wide PyLong_AsUnsignedLong
#else
typedef unsigned long long Wide;
#define as_wide PyLong_AsUnsignedLongLong
#endif

/* A Python int's value as a block hash: 1, or 0 when it is not in [0, 2**64) (or not an
 * integer at all), or -1 with an exception. `__index__` of a non-int may run Python code. */
int
kp_key_of(PyObject *o, uint64_t *out)
{
    if (!PyLong_Check(o)) {
        PyObject *index = PyNumber_Index(o);
        if (index == NULL) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                return 0;
            }
            return -1;
        }
        int r = kp_key_of(index, out);
        Py_DECREF(index);
        return r;
    }
#if PY_VERSION_HEX < 0x030C0000
    /* CPython 3.11 only, whose layout is final (longintrepr.h, included by Python.h): the
     * sign and digit count in ob_size, PyLong_SHIFT bits a digit. The public call costs
     * ~6 ns a key more here (a 270-key record +1.6 us, a match +0.1 us), while on 3.12 and
     * 3.13 it is the faster: docs/benchmarks.md, h73. */
    Py_ssize_t size = Py_SIZE(o);
    if (size < 0) {
        return 0;
    }
    const digit *digits = ((PyLongObject *)o)->ob_digit;
    uint64_t value = 0;
    for (Py_ssize_t i = size - 1; i >= 0; i--) {
        if (value >> (64 - PyLong_SHIFT)) {
            return 0; /* past 2**64 */
        }
        value = (value << PyLong_SHIFT) | digits[i];
    }
    *out = value;
    return 1;
#else
    Wide value = as_wide(o);
    if (value == (Wide)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) { /* negative, or past 2**64 */
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    *out = (uint64_t)value;
    return 1;
#endif
}

/* The sequence as a tuple (a new reference): items that no caller's code can change. */
PyObject *
kp_as_tuple(PyObject *hashes)
{
    if (PyTuple_CheckExact(hashes)) {
        Py_INCREF(hashes);
        return hashes;
    }
    return PySequence_Tuple(hashes);
}

int
kp_slot_arg(PyObject *o, long long *out)
{
    *out = PyLong_AsLongLong(o);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A bound past the C range is as good as infinite (or as none). */
int
kp_bound_arg(PyObject *o, long long *out)
{
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (*out == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        *out = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    }
    return 0;
}

/* 1 if slot `si` holds item `i` of `tuple`, 0 if not, -1 on error. */
int
kp_holds_item(Store *self, uint32_t si, PyObject *tuple, Py_ssize_t i)
{
    uint64_t key;
    int r = kp_key_of(PyTuple_GET_ITEM(tuple, i), &key);
    if (r <= 0) {
        return r;
    }
    return map_find(&self->slots[si].table, key) != NULL;
}

/* The binary search of `PyPrefixStore._longest`, probe for probe. */
Py_ssize_t
kp_longest(Store *self, uint32_t si, PyObject *tuple)
{
    Py_ssize_t lo = 1, hi = PyTuple_GET_SIZE(tuple);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi + 1) / 2;
        int r = kp_holds_item(self, si, tuple, mid - 1);
        if (r < 0) {
            return -1;
        }
        if (r) {
            lo = mid;
        }
        else {
            hi = mid - 1;
        }
    }
    return lo;
}
