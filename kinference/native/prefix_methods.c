/* The methods that read and change the store: record, trim, match, held, count, forget
 * (their meaning: `kinference.routing.prefix_store.PyPrefixStore`). Each runs under the
 * store's `busy` flag: a key's `__index__` calling back into the store meets RuntimeError,
 * so no pointer into the store goes stale under a running call. */

#include "prefix.h"

static int
enter(Store *self)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "PrefixStore re-entered");
        return -1;
    }
    self->busy = 1;
    return 0;
}

#define NO_SLOT (-1)    /* a slot number with no live slot */
#define NOT_A_SLOT (-2) /* past the C range, or not an integer: never recorded */
#define SLOT_FAILED (-3) /* an exception set */

/* The live slot's index for `trim`, `held`, `count`, or one of the codes above: an
 * exception but OverflowError and TypeError (a slot's `__index__` raising, or calling back
 * into the store: RuntimeError) is the caller's to raise, not "never recorded". */
static int64_t
slot_to_read(Store *self, PyObject *o)
{
    long long number;
    if (kp_slot_arg(o, &number) == 0) {
        return kp_find_slot(self, number);
    }
    if (!PyErr_ExceptionMatches(PyExc_OverflowError) &&
        !PyErr_ExceptionMatches(PyExc_TypeError)) {
        return SLOT_FAILED;
    }
    PyErr_Clear();
    return NOT_A_SLOT;
}

PyObject *
kp_store_record(Store *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long number, bound;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record(slot, hashes, bound)");
        return NULL;
    }
    if (kp_slot_arg(args[0], &number) < 0 || kp_bound_arg(args[2], &bound) < 0 || enter(self) < 0) {
        return NULL;
    }
    PyObject *result = NULL, *tuple = kp_as_tuple(args[1]);
    uint64_t *keys = NULL;
    if (tuple == NULL) {
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    keys = PyMem_Malloc(kp_bytes(0, n ? (size_t)n : 1, sizeof(uint64_t)));
    if (keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = kp_key_of(PyTuple_GET_ITEM(tuple, i), &keys[i]);
        if (r <= 0) {
            if (r == 0) {
                PyErr_SetString(PyExc_ValueError, "block hashes are integers in [0, 2**64)");
            }
            goto done;
        }
    }
    int64_t si = kp_open_slot(self, number);
    if (si < 0) {
        goto done;
    }
    int failed = kp_record_keys(self, (uint32_t)si, keys, n);
    kp_trim_slot(self, (uint32_t)si, bound);
    if (!failed) {
        result = Py_NewRef(Py_None);
    }
done:
    PyMem_Free(keys);
    Py_XDECREF(tuple);
    self->busy = 0;
    return result;
}

PyObject *
kp_store_trim(Store *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long bound;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "trim(slot, bound)");
        return NULL;
    }
    if (kp_bound_arg(args[1], &bound) < 0 || enter(self) < 0) {
        return NULL;
    }
    int64_t si = slot_to_read(self, args[0]);
    if (si >= 0) {
        kp_trim_slot(self, (uint32_t)si, bound);
    }
    self->busy = 0;
    if (si == SLOT_FAILED) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Adds slot -> leading blocks held to `matched` for each holder of the first block. */
static int
match_into(Store *self, PyObject *tuple, PyObject *matched)
{
    uint64_t first;
    int r = PyTuple_GET_SIZE(tuple) == 0 ? 0 : kp_key_of(PyTuple_GET_ITEM(tuple, 0), &first);
    Bucket *e = r > 0 ? map_find(&self->blocks, first) : NULL;
    if (e == NULL) {
        return r < 0 ? -1 : 0;
    }
    uint32_t one = (uint32_t)(e->val >> 1), count = 1;
    const uint32_t *holders = &one;
    if (!(e->val & 1)) {
        Holders *h = (Holders *)(uintptr_t)e->val;
        holders = h->slot;
        count = h->n;
    }
    for (uint32_t i = 0; i < count; i++) {
        Py_ssize_t blocks = kp_longest(self, holders[i], tuple);
        PyObject *slot = blocks < 0 ? NULL : PyLong_FromLongLong(self->slots[holders[i]].number);
        PyObject *value = slot == NULL ? NULL : PyLong_FromSsize_t(blocks);
        r = value == NULL ? -1 : PyDict_SetItem(matched, slot, value);
        Py_XDECREF(slot);
        Py_XDECREF(value);
        if (r < 0) {
            return -1;
        }
    }
    return 0;
}

PyObject *
kp_store_match(Store *self, PyObject *hashes)
{
    if (enter(self) < 0) {
        return NULL;
    }
    PyObject *matched = PyDict_New(), *tuple = matched == NULL ? NULL : kp_as_tuple(hashes);
    if (tuple == NULL || match_into(self, tuple, matched) < 0) {
        Py_CLEAR(matched);
    }
    Py_XDECREF(tuple);
    self->busy = 0;
    return matched;
}

/* Node `x`'s age: the distinct blocks more recent than it, walked from the most recent
 * end, at most MAX_WALK; past that the blocks recorded since, at most the slot's blocks - 1
 * (`kinference.routing.prefix_store.MAX_WALK`). */
static long long
age_of(const Slot *s, uint32_t x)
{
    uint32_t i = s->tail;
    for (long long rank = 0; rank < MAX_WALK && i != NIL; rank++, i = s->nodes[i].prev) {
        if (i == x) {
            return rank;
        }
    }
    long long since = (long long)(s->touches - s->nodes[x].touch);
    long long most = (long long)s->count - 1;
    return since < most ? since : most;
}

static PyObject *
held_tuple(Store *self, int64_t si, PyObject *tuple, Py_ssize_t known)
{
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    int r = si < 0 || n == 0 ? 0 : kp_holds_item(self, (uint32_t)si, tuple, 0);
    if (r <= 0) {
        return r < 0 ? NULL : Py_BuildValue("(iO)", 0, Py_None);
    }
    Py_ssize_t blocks = known > 0 && known <= n ? known : kp_longest(self, (uint32_t)si, tuple);
    uint64_t key;
    r = blocks < 0 ? -1 : kp_key_of(PyTuple_GET_ITEM(tuple, blocks - 1), &key);
    Slot *s = &self->slots[si];
    Bucket *e = r > 0 ? map_find(&s->table, key) : NULL;
    if (e == NULL) {
        if (r >= 0) {
            PyErr_SetString(PyExc_KeyError, "the deepest held block is not held");
        }
        return NULL;
    }
    return Py_BuildValue("(nL)", blocks, age_of(s, (uint32_t)(e->val - 1)));
}

PyObject *
kp_store_held(Store *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "held(slot, hashes, known)");
        return NULL;
    }
    Py_ssize_t known = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if ((known == -1 && PyErr_Occurred()) || enter(self) < 0) {
        return NULL;
    }
    PyObject *held = NULL, *tuple = NULL;
    int64_t si = slot_to_read(self, args[0]);
    if (si == NOT_A_SLOT) {
        held = Py_BuildValue("(iO)", 0, Py_None);
    }
    else if (si != SLOT_FAILED && (tuple = kp_as_tuple(args[1])) != NULL) {
        held = held_tuple(self, si, tuple, known);
        Py_DECREF(tuple);
    }
    self->busy = 0;
    return held;
}

PyObject *
kp_store_count(Store *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "count(slot, hashes)");
        return NULL;
    }
    if (enter(self) < 0) {
        return NULL;
    }
    /* The slot before the hashes: its conversion runs no code with an exception pending. */
    int64_t si = slot_to_read(self, args[0]);
    PyObject *result = NULL, *tuple = si == SLOT_FAILED ? NULL : kp_as_tuple(args[1]);
    Py_ssize_t held = 0;
    if (tuple == NULL) {
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; si >= 0 && i < n; i++) {
        int r = kp_holds_item(self, (uint32_t)si, tuple, i);
        if (r < 0) {
            goto done;
        }
        held += r;
    }
    result = PyLong_FromSsize_t(held);
done:
    Py_XDECREF(tuple);
    self->busy = 0;
    return result;
}

PyObject *
kp_store_forget(Store *self, PyObject *arg)
{
    long long number;
    if (kp_slot_arg(arg, &number) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        PyErr_Clear(); /* past the C range: never recorded */
        Py_RETURN_NONE;
    }
    if (enter(self) < 0) {
        return NULL;
    }
    int64_t si = kp_find_slot(self, number);
    if (si >= 0) {
        Slot *s = &self->slots[si];
        for (uint32_t i = s->head; i != NIL; i = s->nodes[i].next) {
            kp_drop_holder(self, s->nodes[i].key, (uint32_t)si);
        }
        kp_slot_clear(s);
        kp_map_remove(&self->directory, map_find(&self->directory, (uint64_t)number));
        kp_map_shrink(&self->directory);
        kp_map_shrink(&self->blocks);
        s->number = self->free_slot; /* the free list's link */
        self->free_slot = (uint32_t)si;
    }
    self->busy = 0;
    Py_RETURN_NONE;
}
