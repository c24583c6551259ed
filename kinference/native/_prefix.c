/* The prefix index's block store in C: `PrefixStore`, the twin of
 * `kinference.routing.prefix_store.PyPrefixStore` (read that class for what each method
 * means; this one must answer alike in every case, tests/native/test_prefix.py).
 *
 * Per slot: its blocks in a doubly linked LRU list of nodes (least recent at `head`), each
 * with its touch number, found by an open-addressing table keyed by the block hash. Per
 * block (one table for the whole store): the slots holding it, in the order they took it,
 * as one tagged word when one slot holds it (the common case) or an array. The store holds
 * no Python object, so the garbage collector has nothing of it to walk.
 *
 * Block hashes are integers in [0, 2**64): `record` refuses others (ValueError) before it
 * changes anything; the reads take any other value as a block nobody holds. Slots are
 * integers in the C long long range. Every method refuses to run inside another (a key's
 * `__index__` calling back into the store: RuntimeError) so no pointer goes stale.
 *
 * This unit is the type (creation, deallocation, the size, the reads that take no lock)
 * and the module; the store's parts are the units that prefix.h lists. */

#include "prefix.h"

static PyObject *
Store_has(Store *self, PyObject *arg)
{
    long long number;
    if (kp_slot_arg(arg, &number) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    return PyBool_FromLong(kp_find_slot(self, number) >= 0);
}

static PyObject *
Store_footprint(Store *self, PyObject *slots)
{
    PyObject *seq = kp_as_tuple(slots); /* a slot's `__index__` may change a list */
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject *sizes = PyList_New(n);
    for (Py_ssize_t i = 0; sizes != NULL && i < n; i++) {
        long long number = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
        int64_t si = -1;
        if (number == -1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                Py_CLEAR(sizes);
                break;
            }
            PyErr_Clear();
        }
        else {
            si = kp_find_slot(self, number);
        }
        PyObject *size = PyFloat_FromDouble(si < 0 ? 0.0 : (double)self->slots[si].count);
        if (size == NULL) {
            Py_CLEAR(sizes);
            break;
        }
        PyList_SET_ITEM(sizes, i, size);
    }
    Py_DECREF(seq);
    return sizes;
}

static Py_ssize_t
Store_len(Store *self)
{
    return (Py_ssize_t)self->blocks.count;
}

static PyObject *
Store_sizeof(Store *self, PyObject *Py_UNUSED(ignored))
{
    size_t bytes = sizeof(Store) + (size_t)self->slots_cap * sizeof(Slot);
    bytes += kp_map_bytes(&self->directory) + kp_map_bytes(&self->blocks);
    for (uint32_t i = 0; i < self->nslots; i++) {
        const Slot *s = &self->slots[i];
        if (s->live) {
            bytes += kp_map_bytes(&s->table) + (size_t)s->capacity * sizeof(Node);
        }
    }
    for (size_t j = 0; self->blocks.b != NULL && j <= self->blocks.mask; j++) {
        uint64_t val = self->blocks.b[j].val;
        if (val != 0 && !(val & 1)) {
            bytes += sizeof(Holders) + ((Holders *)(uintptr_t)val)->cap * sizeof(uint32_t);
        }
    }
    return PyLong_FromSize_t(bytes);
}

static PyObject *
Store_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "PrefixStore() takes no arguments");
        return NULL;
    }
    Store *self = (Store *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    /* A seed per store: keys an outsider chose do not pile up in one run of buckets
     * (the same in every run would let a crafted prompt set do that). */
    uint64_t seed = (uint64_t)(uintptr_t)self ^ ((uint64_t)(uintptr_t)&seed << 17);
    seed = (seed ^ (seed >> 31)) * 0xBF58476D1CE4E5B9ULL;
    self->free_slot = NIL;
    self->blocks.seed = seed;
    self->directory.seed = seed >> 7;
    return (PyObject *)self;
}

static void
Store_dealloc(Store *self)
{
    for (uint32_t i = 0; i < self->nslots; i++) {
        if (self->slots[i].live) {
            kp_slot_clear(&self->slots[i]);
        }
    }
    for (size_t j = 0; self->blocks.b != NULL && j <= self->blocks.mask; j++) {
        uint64_t val = self->blocks.b[j].val;
        if (val != 0 && !(val & 1)) {
            PyMem_Free((Holders *)(uintptr_t)val);
        }
    }
    kp_map_free(&self->blocks);
    kp_map_free(&self->directory);
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Store_methods[] = {
    {"record", (PyCFunction)(void (*)(void))kp_store_record, METH_FASTCALL,
     "record(slot, hashes, bound): slot holds hashes, the earliest most recent; then trim."},
    {"trim", (PyCFunction)(void (*)(void))kp_store_trim, METH_FASTCALL,
     "trim(slot, bound): evict slot's least recent blocks until it holds at most bound."},
    {"match", (PyCFunction)kp_store_match, METH_O,
     "match(hashes): slot -> leading blocks held, for the holders of the first block."},
    {"held", (PyCFunction)(void (*)(void))kp_store_held, METH_FASTCALL,
     "held(slot, hashes, known): (leading blocks held, blocks recorded since the deepest)."},
    {"count", (PyCFunction)(void (*)(void))kp_store_count, METH_FASTCALL,
     "count(slot, hashes): how many of hashes (each occurrence) slot holds."},
    {"forget", (PyCFunction)kp_store_forget, METH_O, "forget(slot): drop all slot held."},
    {"has", (PyCFunction)Store_has, METH_O, "has(slot): whether slot recorded since forgotten."},
    {"footprint", (PyCFunction)Store_footprint, METH_O, "footprint(slots): blocks held each."},
    {"__sizeof__", (PyCFunction)Store_sizeof, METH_NOARGS, "Bytes allocated."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Store_as_sequence = {
    .sq_length = (lenfunc)Store_len,
};

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kinference.native._prefix.PrefixStore",
    .tp_basicsize = sizeof(Store),
    .tp_dealloc = (destructor)Store_dealloc,
    .tp_as_sequence = &Store_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The prefix index's block store (kinference.routing.prefix_store), in C.",
    .tp_methods = Store_methods,
    .tp_new = Store_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_prefix",
    .m_doc = "The prefix index's block store in C.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__prefix(void)
{
    if (PyType_Ready(&StoreType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "PrefixStore", (PyObject *)&StoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

