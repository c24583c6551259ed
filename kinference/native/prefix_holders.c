/* Per block, the slots holding it in the order they took it: one tagged word,
 * (index << 1) | 1, when one slot holds it (the common case), else a `Holders` array.
 * Recording, evicting and trimming change a slot's blocks and their holders together. */

#include "prefix.h"

static int
add_holder(Store *self, uint64_t key, uint32_t slot)
{
    Bucket *e = map_find(&self->blocks, key);
    if (e == NULL) {
        return kp_map_insert(&self->blocks, key, ((uint64_t)slot << 1) | 1);
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
        Holders *grown = h->cap > UINT32_MAX / 2
                             ? NULL
                             : PyMem_Realloc(h, kp_bytes(sizeof(Holders), (size_t)h->cap * 2,
                                                         sizeof(uint32_t)));
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

void
kp_drop_holder(Store *self, uint64_t key, uint32_t slot)
{
    Bucket *e = map_find(&self->blocks, key);
    if (e == NULL) {
        return;
    }
    if (e->val & 1) {
        if ((uint32_t)(e->val >> 1) == slot) {
            kp_map_remove(&self->blocks, e);
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
void
kp_evict(Store *self, uint32_t si, uint32_t i)
{
    Slot *s = &self->slots[si];
    uint64_t key = s->nodes[i].key;
    kp_map_remove(&s->table, map_find(&s->table, key));
    unlink_node(s, i);
    free_node(s, i);
    s->count--;
    kp_drop_holder(self, key, si);
}

void
kp_settle(Store *self, uint32_t si)
{
    Slot *s = &self->slots[si];
    kp_map_shrink(&s->table);
    kp_compact_nodes(s);
    kp_map_shrink(&self->blocks);
}

void
kp_trim_slot(Store *self, uint32_t si, long long bound)
{
    Slot *s = &self->slots[si];
    while (s->count > 0 && (long long)s->count > bound) {
        kp_evict(self, si, s->head);
    }
    kp_settle(self, si);
}

/* Slot `si` holds `keys`, the earliest most recent; -1 with MemoryError (the keys before
 * the failed one recorded, the store consistent). */
int
kp_record_keys(Store *self, uint32_t si, const uint64_t *keys, Py_ssize_t n)
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
        int64_t at = kp_new_node(s);
        if (at < 0 || kp_map_insert(&s->table, key, (uint64_t)at + 1) < 0) {
            if (at >= 0) {
                free_node(s, (uint32_t)at);
            }
            return -1;
        }
        if (add_holder(self, key, si) < 0) {
            kp_map_remove(&s->table, map_find(&s->table, key));
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
