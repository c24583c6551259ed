/* The internals of `kinference.native._prefix` (the prefix index's block store in C),
 * shared by its units; nothing here is part of any interface outside the extension.
 *
 *   prefix_map.c      an open-addressing map, uint64 key -> nonzero uint64 value
 *   prefix_slots.c    the slots by number, and each one's blocks in an LRU list
 *   prefix_holders.c  per block, the slots holding it; recording and evicting
 *   prefix_keys.c     Python arguments as block hashes, slots and bounds
 *   prefix_methods.c  the methods that read and change the store
 *   _prefix.c         the type (creation, deallocation, size) and the module
 *
 * Every function shared between units is named `kp_...`; the rest stay `static`. The GIL
 * is held throughout: nothing here releases it. */

#ifndef KINFERENCE_PREFIX_H
#define KINFERENCE_PREFIX_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The kp_ functions are the extension's own: hidden from the dynamic linker, so calls to
 * them are direct (no PLT) and the compiler may inline them inside their unit (a default-
 * visibility function under -fPIC could be interposed, which forbids both). */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#define NIL UINT32_MAX
#define MIN_BUCKETS 8
#define MIN_NODES 16
#define PREFETCH 8 /* blocks ahead whose bucket `record` loads early */
#define MAX_WALK 4096 /* nodes `held` walks for an age (prefix_store.MAX_WALK) */

/* Bytes for `n` items of `size` after `head` bytes, or SIZE_MAX (which every PyMem call
 * refuses, returning NULL) where that is past what PyMem allocates: no product wraps. */
static inline size_t
kp_bytes(size_t head, size_t n, size_t size)
{
    size_t limit = (size_t)PY_SSIZE_T_MAX - head;
    return n > limit / size ? SIZE_MAX : head + n * size;
}

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

int kp_map_insert(Map *m, uint64_t key, uint64_t val);
void kp_map_remove(Map *m, Bucket *e);
void kp_map_shrink(Map *m);
void kp_map_free(Map *m);
size_t kp_map_bytes(const Map *m);

/* ---- a slot: an LRU list of nodes and the table finding them ---- */

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

static inline void
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

static inline void
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

static inline void
free_node(Slot *s, uint32_t i)
{
    s->nodes[i].next = s->free_head;
    s->free_head = i;
}

int64_t kp_new_node(Slot *s);
void kp_compact_nodes(Slot *s);
void kp_slot_clear(Slot *s);

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

int64_t kp_find_slot(Store *self, long long number);
int64_t kp_open_slot(Store *self, long long number);
void kp_drop_holder(Store *self, uint64_t key, uint32_t slot);
void kp_evict(Store *self, uint32_t si, uint32_t i);
void kp_settle(Store *self, uint32_t si);
void kp_trim_slot(Store *self, uint32_t si, long long bound);
int kp_record_keys(Store *self, uint32_t si, const uint64_t *keys, Py_ssize_t n);

/* ---- Python arguments, and a tuple's hashes looked up in a slot (prefix_keys.c) ---- */

int kp_key_of(PyObject *o, uint64_t *out);
PyObject *kp_as_tuple(PyObject *hashes);
int kp_slot_arg(PyObject *o, long long *out);
int kp_bound_arg(PyObject *o, long long *out);
int kp_holds_item(Store *self, uint32_t si, PyObject *tuple, Py_ssize_t i);
Py_ssize_t kp_longest(Store *self, uint32_t si, PyObject *tuple);

/* ---- the methods (prefix_methods.c) ---- */

PyObject *kp_store_record(Store *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *kp_store_trim(Store *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *kp_store_match(Store *self, PyObject *hashes);
PyObject *kp_store_held(Store *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *kp_store_count(Store *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *kp_store_forget(Store *self, PyObject *arg);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
