/* The slots: the directory from a caller's slot number to its `Slot` (forgotten ones
 * reused through a free list linked by their `number`), and each slot's blocks: nodes in
 * one array, linked in LRU order (least recent at `head`), each with its block and touch
 * number, freed nodes in a free list through `next`. The table finding a block's node is
 * the slot's `table` (prefix_map.c); `unlink_node`, `append_node` and `free_node` are
 * inline in prefix.h (the record's hot loop). */

#include "prefix.h"

/* The slot's index, or -1 (none live). */
int64_t
kp_find_slot(Store *self, long long number)
{
    Bucket *e = map_find(&self->directory, (uint64_t)number);
    return e == NULL ? -1 : (int64_t)(e->val - 1);
}

/* The slot's index, a new one if none is live; -1 with MemoryError. */
int64_t
kp_open_slot(Store *self, long long number)
{
    int64_t found = kp_find_slot(self, number);
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
                                       : PyMem_Realloc(self->slots, kp_bytes(0, grown, sizeof(Slot)));
            if (slots == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            self->slots = slots;
            self->slots_cap = grown;
        }
        i = self->nslots;
    }
    if (kp_map_insert(&self->directory, (uint64_t)number, (uint64_t)i + 1) < 0) {
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
    /* The store's secret seed here too: a slot's table is keyed by hashes an outsider's
     * prompts choose, as the blocks' table is. */
    s->table.seed = self->blocks.seed ^ UINT64_C(0x94D049BB133111EB);
    return i;
}

/* A free node's index, or -1 with MemoryError. */
int64_t
kp_new_node(Slot *s)
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
        Node *nodes = PyMem_Realloc(s->nodes, kp_bytes(0, grown, sizeof(Node)));
        if (nodes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->nodes = nodes;
        s->capacity = grown;
    }
    return s->used++;
}

/* After evictions: the nodes, in LRU order, into an array a quarter full at least. */
void
kp_compact_nodes(Slot *s)
{
    if (s->capacity <= 4 * MIN_NODES || (size_t)s->count * 4 >= s->capacity) {
        return;
    }
    uint32_t fit = MIN_NODES;
    while (fit < s->count * 2) {
        fit *= 2;
    }
    Node *fresh = PyMem_Malloc(kp_bytes(0, fit, sizeof(Node)));
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

void
kp_slot_clear(Slot *s)
{
    kp_map_free(&s->table);
    PyMem_Free(s->nodes);
    s->nodes = NULL;
    s->capacity = s->used = s->count = 0;
    s->free_head = s->head = s->tail = NIL;
    s->touches = 0;
    s->live = 0;
}
