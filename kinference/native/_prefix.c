/* The prefix index's block store in C: `PrefixStore`, the twin of
 * `kinference.routing.prefix_store.PyPrefixStore` (read that class for what each method
 * means; this one must answer alike in every case, tests/native/test_prefix_store.py).
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
 * `__index__` calling back into the store: RuntimeError) so no pointer goes stale. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NIL UINT32_MAX
#define MIN_BUCKETS 8
#define MIN_NODES 16
#define PREFETCH 8 /* blocks ahead whose bucket `record` loads early */

/* ---- an open-addressing map: uint64 key -> nonzero uint64 value (0: empty bucket) ---- */

typedef struct {
    uint64_t key;
    uint64_t val;
} Bucket;

typedef struct {
    Bucket *b;
    size_t mask; /* buckets - 1; buckets is a power of two, or b is NULL */
    size_t count;
    unsigned shift; /* 64 - log2(buckets): Fibonacci hashing takes the top bits */
    uint64_t seed;
} Map;

static inline size_t
home(const Map *m, uint64_t key)
{
    return (size_t)(((key ^ m->seed) * 0x9E3779B97F4A7C15ULL) >> m->shift);
}

static inline Bucket *
map_find(const Map *m, uint64_t key)
{
    if (m->b == NULL) {
        return NULL;
    }
    size_t i = home(m, key);
    for (;;) {
        Bucket *e = &m->b[i];
        if (e->val == 0) {
            return NULL;
        }
        if (e->key == key) {
            return e;
        }
        i = (i + 1) & m->mask;
    }
}

static int
map_resize(Map *m, size_t buckets)
{
    Bucket *old = m->b;
    size_t old_buckets = old == NULL ? 0 : m->mask + 1;
    Bucket *fresh = PyMem_Calloc(buckets, sizeof(Bucket));
    if (fresh == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    unsigned bits = 0;
    while (((size_t)1 << bits) < buckets) {
        bits++;
    }
    m->b = fresh;
    m->mask = buckets - 1;
    m->shift = 64 - bits;
    for (size_t j = 0; j < old_buckets; j++) {
        if (old[j].val != 0) {
            size_t i = home(m, old[j].key);
            while (fresh[i].val != 0) {
                i = (i + 1) & m->mask;
            }
            fresh[i] = old[j];
        }
    }
    PyMem_Free(old);
    return 0;
}

/* `key` must be absent. Keeps the load at most one half. */
static int
map_insert(Map *m, uint64_t key, uint64_t val)
{
    size_t buckets = m->b == NULL ? 0 : m->mask + 1;
    if ((m->count + 1) * 2 > buckets) {
        size_t grown = buckets < MIN_BUCKETS ? MIN_BUCKETS : buckets * 2;
        if (grown <= buckets || map_resize(m, grown) < 0) {
            if (!PyErr_Occurred()) {
                PyErr_NoMemory();
            }
            return -1;
        }
    }
    size_t i = home(m, key);
    while (m->b[i].val != 0) {
        i = (i + 1) & m->mask;
    }
    m->b[i].key = key;
    m->b[i].val = val;
    m->count++;
    return 0;
}

/* Backward-shift deletion: no tombstones, so probes stay short whatever was removed. */
static void
map_remove(Map *m, Bucket *e)
{
    size_t i = (size_t)(e - m->b), j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (m->b[j].val == 0) {
            break;
        }
        size_t k = home(m, m->b[j].key);
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            m->b[i] = m->b[j];
            i = j;
        }
    }
    m->b[i].val = 0;
    m->count--;
}

/* After removals: back to a load of at least 1/8 (a failed shrink keeps the old table). */
static void
map_shrink(Map *m)
{
    if (m->b == NULL) {
        return;
    }
    size_t buckets = m->mask + 1;
    if (m->count == 0) {
        PyMem_Free(m->b);
        m->b = NULL;
        m->mask = 0;
        return;
    }
    if (buckets <= MIN_BUCKETS || m->count * 8 >= buckets) {
        return;
    }
    size_t fit = MIN_BUCKETS;
    while (fit < m->count * 4) {
        fit *= 2;
    }
    if (map_resize(m, fit) < 0) {
        PyErr_Clear();
    }
}

static void
map_free(Map *m)
{
    PyMem_Free(m->b);
    m->b = NULL;
    m->mask = 0;
    m->count = 0;
}

/* ---- slots: an LRU list of nodes and the table finding them ---- */

typedef struct {
    uint64_t key;
    int64_t touch;
    uint32_t prev, next;
} Node;

typedef struct {
    long long number; /* the caller's slot */
    int live;         /* recorded since created or forgotten */
    int64_t touches;  /* blocks recorded on it so far */
    Map table;        /* block -> node index + 1 */
    Node *nodes;
    uint32_t capacity, used, free_head, count;
    uint32_t head, tail; /* least and most recent */
} Slot;

static void
unlink_node(Slot *s, uint32_t i)
{
    Node *n = &s->nodes[i];
    if (n->prev != NIL) {
        s->nodes[n->prev].next = n->next;
    }
    else {
        s->head = n->next;
    }
    if (n->next != NIL) {
        s->nodes[n->next].prev = n->prev;
    }
    else {
        s->tail = n->prev;
    }
}

static void
append_node(Slot *s, uint32_t i)
{
    Node *n = &s->nodes[i];
    n->prev = s->tail;
    n->next = NIL;
    if (s->tail != NIL) {
        s->nodes[s->tail].next = i;
    }
    else {
        s->head = i;
    }
    s->tail = i;
}

static int64_t
new_node(Slot *s)
{
    if (s->free_head != NIL) {
        uint32_t i = s->free_head;
        s->free_head = s->nodes[i].next;
        return i;
    }
    if (s->used == s->capacity) {
        uint32_t grown = s->capacity < MIN_NODES ? MIN_NODES : s->capacity * 2;
        if (grown <= s->capacity || grown >= NIL) {
            PyErr_NoMemory();
            return -1;
        }
        Node *nodes = PyMem_Realloc(s->nodes, (size_t)grown * sizeof(Node));
        if (nodes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->nodes = nodes;
        s->capacity = grown;
    }
    return s->used++;
}

static void
free_node(Slot *s, uint32_t i)
{
    s->nodes[i].next = s->free_head;
    s->free_head = i;
}

/* After evictions: the nodes, in LRU order, into an array a quarter full at least. */
static void
compact_nodes(Slot *s)
{
    if (s->capacity <= 4 * MIN_NODES || (size_t)s->count * 4 >= s->capacity) {
        return;
    }
    uint32_t fit = MIN_NODES;
    while (fit < s->count * 2) {
        fit *= 2;
    }
    Node *fresh = PyMem_Malloc((size_t)fit * sizeof(Node));
    if (fresh == NULL) {
        return; /* kept as it is */
    }
    uint32_t at = 0;
    for (uint32_t i = s->head; i != NIL; i = s->nodes[i].next) {
        fresh[at] = s->nodes[i];
        fresh[at].prev = at == 0 ? NIL : at - 1;
        fresh[at].next = at + 1 == s->count ? NIL : at + 1;
        s->nodes[i].touch = at; /* the old node's new index, for the table below */
        at++;
    }
    Map *t = &s->table;
    for (size_t j = 0; t->b != NULL && j <= t->mask; j++) {
        if (t->b[j].val != 0) {
            t->b[j].val = (uint64_t)s->nodes[t->b[j].val - 1].touch + 1;
        }
    }
    PyMem_Free(s->nodes);
    s->nodes = fresh;
    s->capacity = fit;
    s->used = s->count;
    s->free_head = NIL;
    s->head = s->count ? 0 : NIL;
    s->tail = s->count ? s->count - 1 : NIL;
}

static void
slot_clear(Slot *s)
{
    map_free(&s->table);
    PyMem_Free(s->nodes);
    s->nodes = NULL;
    s->capacity = s->used = s->count = 0;
    s->free_head = s->head = s->tail = NIL;
    s->touches = 0;
    s->live = 0;
}

/* ---- the store ---- */

typedef struct {
    uint32_t n, cap;
    uint32_t slot[];
} Holders;

typedef struct {
    PyObject_HEAD
    Slot *slots; /* by index; forgotten ones are free for reuse */
    uint32_t nslots, slots_cap, free_slot;
    Map directory; /* slot number -> index + 1 */
    Map blocks;    /* block -> holders: (index << 1) | 1 for one, else a Holders * */
    int busy;
} Store;

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

/* The slot's index, or -1 (none live). */
static int64_t
find_slot(Store *self, long long number)
{
    Bucket *e = map_find(&self->directory, (uint64_t)number);
    return e == NULL ? -1 : (int64_t)(e->val - 1);
}

static int64_t
open_slot(Store *self, long long number)
{
    int64_t found = find_slot(self, number);
    if (found >= 0) {
        return found;
    }
    uint32_t i;
    if (self->free_slot != NIL) {
        i = self->free_slot;
    }
    else {
        if (self->nslots == self->slots_cap) {
            uint32_t grown = self->slots_cap < 8 ? 8 : self->slots_cap * 2;
            Slot *slots = grown >= NIL ? NULL
                                       : PyMem_Realloc(self->slots, (size_t)grown * sizeof(Slot));
            if (slots == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            self->slots = slots;
            self->slots_cap = grown;
        }
        i = self->nslots;
    }
    if (map_insert(&self->directory, (uint64_t)number, (uint64_t)i + 1) < 0) {
        return -1;
    }
    if (i == self->free_slot) {
        self->free_slot = (uint32_t)self->slots[i].number; /* the free list's link */
    }
    else {
        self->nslots++;
    }
    Slot *s = &self->slots[i];
    memset(s, 0, sizeof(Slot));
    s->number = number;
    s->live = 1;
    s->free_head = s->head = s->tail = NIL;
    return i;
}

static int
add_holder(Store *self, uint64_t key, uint32_t slot)
{
    Bucket *e = map_find(&self->blocks, key);
    if (e == NULL) {
        return map_insert(&self->blocks, key, ((uint64_t)slot << 1) | 1);
    }
    if (e->val & 1) {
        Holders *h = PyMem_Malloc(sizeof(Holders) + 4 * sizeof(uint32_t));
        if (h == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        h->n = 2;
        h->cap = 4;
        h->slot[0] = (uint32_t)(e->val >> 1);
        h->slot[1] = slot;
        e->val = (uint64_t)(uintptr_t)h;
        return 0;
    }
    Holders *h = (Holders *)(uintptr_t)e->val;
    if (h->n == h->cap) {
        Holders *grown = PyMem_Realloc(h, sizeof(Holders) + (size_t)h->cap * 2 * sizeof(uint32_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        h = grown;
        h->cap *= 2;
        e->val = (uint64_t)(uintptr_t)h;
    }
    h->slot[h->n++] = slot;
    return 0;
}

static void
drop_holder(Store *self, uint64_t key, uint32_t slot)
{
    Bucket *e = map_find(&self->blocks, key);
    if (e == NULL) {
        return;
    }
    if (e->val & 1) {
        if ((uint32_t)(e->val >> 1) == slot) {
            map_remove(&self->blocks, e);
        }
        return;
    }
    Holders *h = (Holders *)(uintptr_t)e->val;
    uint32_t i = 0;
    while (i < h->n && h->slot[i] != slot) {
        i++;
    }
    if (i == h->n) {
        return;
    }
    memmove(&h->slot[i], &h->slot[i + 1], (size_t)(h->n - i - 1) * sizeof(uint32_t));
    if (--h->n == 1) {
        e->val = ((uint64_t)h->slot[0] << 1) | 1;
        PyMem_Free(h);
    }
}

/* Unlinks and frees node `i` of slot `si`, and the slot from the block's holders. */
static void
evict(Store *self, uint32_t si, uint32_t i)
{
    Slot *s = &self->slots[si];
    uint64_t key = s->nodes[i].key;
    map_remove(&s->table, map_find(&s->table, key));
    unlink_node(s, i);
    free_node(s, i);
    s->count--;
    drop_holder(self, key, si);
}

static void
settle(Store *self, uint32_t si)
{
    Slot *s = &self->slots[si];
    map_shrink(&s->table);
    compact_nodes(s);
    map_shrink(&self->blocks);
}

static void
trim_slot(Store *self, uint32_t si, long long bound)
{
    Slot *s = &self->slots[si];
    while (s->count > 0 && (long long)s->count > bound) {
        evict(self, si, s->head);
    }
    settle(self, si);
}

/* A Python int's value as a block hash: 1, or 0 when it is not in [0, 2**64) (or not an
 * integer at all), or -1 with an exception. `__index__` of a non-int may run Python code. */
static int
key_of(PyObject *o, uint64_t *out)
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
        int r = key_of(index, out);
        Py_DECREF(index);
        return r;
    }
#if PY_VERSION_HEX < 0x030C0000
    /* CPython 3.11's layout (longintrepr.h, included by Python.h): the sign and digit
     * count in ob_size, PyLong_SHIFT bits a digit. Three calls a key less than below. */
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
#elif PY_VERSION_HEX >= 0x030D0000
    int flags = Py_ASNATIVEBYTES_NATIVE_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER |
                Py_ASNATIVEBYTES_REJECT_NEGATIVE;
    Py_ssize_t need = PyLong_AsNativeBytes(o, out, sizeof(*out), flags);
    if (need < 0) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) { /* negative */
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    return need <= (Py_ssize_t)sizeof(*out);
#else
    if (_PyLong_Sign(o) < 0) {
        return 0;
    }
    size_t bits = _PyLong_NumBits(o);
    if (bits == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (bits > 64) {
        return 0;
    }
    *out = PyLong_AsUnsignedLongLongMask(o);
    return 1;
#endif
}

/* The sequence as a tuple (a new reference): items that no caller's code can change. */
static PyObject *
as_tuple(PyObject *hashes)
{
    if (PyTuple_CheckExact(hashes)) {
        Py_INCREF(hashes);
        return hashes;
    }
    return PySequence_Tuple(hashes);
}

static int
slot_arg(PyObject *o, long long *out)
{
    *out = PyLong_AsLongLong(o);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A bound past the C range is as good as infinite (or as none). */
static int
bound_arg(PyObject *o, long long *out)
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
static int
holds_item(Store *self, uint32_t si, PyObject *tuple, Py_ssize_t i)
{
    uint64_t key;
    int r = key_of(PyTuple_GET_ITEM(tuple, i), &key);
    if (r <= 0) {
        return r;
    }
    return map_find(&self->slots[si].table, key) != NULL;
}

/* The binary search of `PyPrefixStore._longest`, probe for probe. */
static Py_ssize_t
longest(Store *self, uint32_t si, PyObject *tuple)
{
    Py_ssize_t lo = 1, hi = PyTuple_GET_SIZE(tuple);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi + 1) / 2;
        int r = holds_item(self, si, tuple, mid - 1);
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

static int
record_keys(Store *self, uint32_t si, const uint64_t *keys, Py_ssize_t n)
{
    Slot *s = &self->slots[si];
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        uint64_t key = keys[i];
        int64_t touch = ++s->touches;
#if defined(__GNUC__)
        if (i >= PREFETCH && s->table.b != NULL) { /* a table past the cache's size */
            __builtin_prefetch(&s->table.b[home(&s->table, keys[i - PREFETCH])]);
        }
#endif
        Bucket *e = map_find(&s->table, key);
        if (e != NULL) {
            uint32_t at = (uint32_t)(e->val - 1);
            unlink_node(s, at);
            append_node(s, at);
            s->nodes[at].touch = touch;
            continue;
        }
        int64_t at = new_node(s);
        if (at < 0 || map_insert(&s->table, key, (uint64_t)at + 1) < 0) {
            if (at >= 0) {
                free_node(s, (uint32_t)at);
            }
            return -1;
        }
        if (add_holder(self, key, si) < 0) {
            map_remove(&s->table, map_find(&s->table, key));
            free_node(s, (uint32_t)at);
            return -1;
        }
        s->nodes[at].key = key;
        s->nodes[at].touch = touch;
        append_node(s, (uint32_t)at);
        s->count++;
    }
    return 0;
}

static PyObject *
Store_record(Store *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long number, bound;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record(slot, hashes, bound)");
        return NULL;
    }
    if (slot_arg(args[0], &number) < 0 || bound_arg(args[2], &bound) < 0 || enter(self) < 0) {
        return NULL;
    }
    PyObject *result = NULL, *tuple = as_tuple(args[1]);
    uint64_t *keys = NULL;
    if (tuple == NULL) {
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    keys = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    if (keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = key_of(PyTuple_GET_ITEM(tuple, i), &keys[i]);
        if (r <= 0) {
            if (r == 0) {
                PyErr_SetString(PyExc_ValueError, "block hashes are integers in [0, 2**64)");
            }
            goto done;
        }
    }
    int64_t si = open_slot(self, number);
    if (si < 0) {
        goto done;
    }
    int failed = record_keys(self, (uint32_t)si, keys, n);
    trim_slot(self, (uint32_t)si, bound);
    if (!failed) {
        result = Py_NewRef(Py_None);
    }
done:
    PyMem_Free(keys);
    Py_XDECREF(tuple);
    self->busy = 0;
    return result;
}

static PyObject *
Store_trim(Store *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long number, bound;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "trim(slot, bound)");
        return NULL;
    }
    if (bound_arg(args[1], &bound) < 0 || enter(self) < 0) {
        return NULL;
    }
    int64_t si = slot_arg(args[0], &number) < 0 ? (PyErr_Clear(), -1) : find_slot(self, number);
    if (si >= 0) {
        trim_slot(self, (uint32_t)si, bound);
    }
    self->busy = 0;
    Py_RETURN_NONE;
}

/* Adds slot -> leading blocks held to `matched` for each holder of the first block. */
static int
match_into(Store *self, PyObject *tuple, PyObject *matched)
{
    uint64_t first;
    int r = PyTuple_GET_SIZE(tuple) == 0 ? 0 : key_of(PyTuple_GET_ITEM(tuple, 0), &first);
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
        Py_ssize_t blocks = longest(self, holders[i], tuple);
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

static PyObject *
Store_match(Store *self, PyObject *hashes)
{
    if (enter(self) < 0) {
        return NULL;
    }
    PyObject *matched = PyDict_New(), *tuple = matched == NULL ? NULL : as_tuple(hashes);
    if (tuple == NULL || match_into(self, tuple, matched) < 0) {
        Py_CLEAR(matched);
    }
    Py_XDECREF(tuple);
    self->busy = 0;
    return matched;
}

static PyObject *
held_tuple(Store *self, int64_t si, PyObject *tuple, Py_ssize_t known)
{
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    int r = si < 0 || n == 0 ? 0 : holds_item(self, (uint32_t)si, tuple, 0);
    if (r <= 0) {
        return r < 0 ? NULL : Py_BuildValue("(iO)", 0, Py_None);
    }
    Py_ssize_t blocks = known > 0 && known <= n ? known : longest(self, (uint32_t)si, tuple);
    uint64_t key;
    r = blocks < 0 ? -1 : key_of(PyTuple_GET_ITEM(tuple, blocks - 1), &key);
    Slot *s = &self->slots[si];
    Bucket *e = r > 0 ? map_find(&s->table, key) : NULL;
    if (e == NULL) {
        if (r >= 0) {
            PyErr_SetString(PyExc_KeyError, "the deepest held block is not held");
        }
        return NULL;
    }
    long long age = (long long)(s->touches - s->nodes[e->val - 1].touch);
    return Py_BuildValue("(nL)", blocks, age);
}

static PyObject *
Store_held(Store *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long number;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "held(slot, hashes, known)");
        return NULL;
    }
    Py_ssize_t known = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if ((known == -1 && PyErr_Occurred()) || enter(self) < 0) {
        return NULL;
    }
    PyObject *held = NULL, *tuple = NULL;
    if (slot_arg(args[0], &number) < 0) { /* not a slot in the C range: never recorded */
        PyErr_Clear();
        held = Py_BuildValue("(iO)", 0, Py_None);
    }
    else if ((tuple = as_tuple(args[1])) != NULL) {
        held = held_tuple(self, find_slot(self, number), tuple, known);
        Py_DECREF(tuple);
    }
    self->busy = 0;
    return held;
}

static PyObject *
Store_drop(Store *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long number;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "drop(slot, hashes, start)");
        return NULL;
    }
    Py_ssize_t start = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if ((start == -1 && PyErr_Occurred()) || enter(self) < 0) {
        return NULL;
    }
    PyObject *result = NULL, *tuple = as_tuple(args[1]);
    /* A slot past the C range was never recorded: it holds nothing. */
    int64_t si = slot_arg(args[0], &number) < 0 ? (PyErr_Clear(), -1) : find_slot(self, number);
    Py_ssize_t held = 0;
    if (tuple == NULL) {
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; si >= 0 && i < n; i++) {
        int r = holds_item(self, (uint32_t)si, tuple, i);
        if (r < 0) {
            goto done;
        }
        held += r;
    }
    for (Py_ssize_t i = start < 0 ? 0 : start; si >= 0 && i < n; i++) {
        uint64_t key;
        int r = key_of(PyTuple_GET_ITEM(tuple, i), &key);
        if (r < 0) {
            goto done;
        }
        Bucket *e = r ? map_find(&self->slots[si].table, key) : NULL;
        if (e != NULL) {
            evict(self, (uint32_t)si, (uint32_t)(e->val - 1));
        }
    }
    if (si >= 0) {
        settle(self, (uint32_t)si);
    }
    result = PyLong_FromSsize_t(held);
done:
    Py_XDECREF(tuple);
    self->busy = 0;
    return result;
}

static PyObject *
Store_forget(Store *self, PyObject *arg)
{
    long long number;
    if (slot_arg(arg, &number) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        PyErr_Clear(); /* past the C range: never recorded */
        Py_RETURN_NONE;
    }
    if (enter(self) < 0) {
        return NULL;
    }
    int64_t si = find_slot(self, number);
    if (si >= 0) {
        Slot *s = &self->slots[si];
        for (uint32_t i = s->head; i != NIL; i = s->nodes[i].next) {
            drop_holder(self, s->nodes[i].key, (uint32_t)si);
        }
        slot_clear(s);
        map_remove(&self->directory, map_find(&self->directory, (uint64_t)number));
        map_shrink(&self->directory);
        map_shrink(&self->blocks);
        s->number = self->free_slot; /* the free list's link */
        self->free_slot = (uint32_t)si;
    }
    self->busy = 0;
    Py_RETURN_NONE;
}

static PyObject *
Store_has(Store *self, PyObject *arg)
{
    long long number;
    if (slot_arg(arg, &number) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    return PyBool_FromLong(find_slot(self, number) >= 0);
}

static PyObject *
Store_footprint(Store *self, PyObject *slots)
{
    PyObject *seq = as_tuple(slots); /* a slot's `__index__` may change a list */
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
            si = find_slot(self, number);
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

static size_t
map_bytes(const Map *m)
{
    return m->b == NULL ? 0 : (m->mask + 1) * sizeof(Bucket);
}

static PyObject *
Store_sizeof(Store *self, PyObject *Py_UNUSED(ignored))
{
    size_t bytes = sizeof(Store) + (size_t)self->slots_cap * sizeof(Slot);
    bytes += map_bytes(&self->directory) + map_bytes(&self->blocks);
    for (uint32_t i = 0; i < self->nslots; i++) {
        const Slot *s = &self->slots[i];
        if (s->live) {
            bytes += map_bytes(&s->table) + (size_t)s->capacity * sizeof(Node);
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
            slot_clear(&self->slots[i]);
        }
    }
    for (size_t j = 0; self->blocks.b != NULL && j <= self->blocks.mask; j++) {
        uint64_t val = self->blocks.b[j].val;
        if (val != 0 && !(val & 1)) {
            PyMem_Free((Holders *)(uintptr_t)val);
        }
    }
    map_free(&self->blocks);
    map_free(&self->directory);
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Store_methods[] = {
    {"record", (PyCFunction)(void (*)(void))Store_record, METH_FASTCALL,
     "record(slot, hashes, bound): slot holds hashes, the earliest most recent; then trim."},
    {"trim", (PyCFunction)(void (*)(void))Store_trim, METH_FASTCALL,
     "trim(slot, bound): evict slot's least recent blocks until it holds at most bound."},
    {"match", (PyCFunction)Store_match, METH_O,
     "match(hashes): slot -> leading blocks held, for the holders of the first block."},
    {"held", (PyCFunction)(void (*)(void))Store_held, METH_FASTCALL,
     "held(slot, hashes, known): (leading blocks held, blocks recorded since the deepest)."},
    {"drop", (PyCFunction)(void (*)(void))Store_drop, METH_FASTCALL,
     "drop(slot, hashes, start): hashes[start:] leave slot; returns how many it held."},
    {"forget", (PyCFunction)Store_forget, METH_O, "forget(slot): drop all slot held."},
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
