/* An open-addressing map from uint64 keys to nonzero uint64 values (0 marks an empty
 * bucket): linear probing from a Fibonacci-hashed home (`home` in prefix.h, seeded per
 * map), a load of at most one half, backward-shift deletion (no tombstones). */

#include "prefix.h"

/* -1, and the map as it was, where the new table cannot be allocated. Sets no exception:
 * a shrink after a failed insert must not replace (or clear) the MemoryError pending. */
static int
map_resize(Map *m, size_t buckets)
{
    Bucket *old = m->b;
    size_t old_buckets = old == NULL ? 0 : m->mask + 1;
    Bucket *fresh = PyMem_Calloc(buckets, sizeof(Bucket));
    if (fresh == NULL) {
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
int
kp_map_insert(Map *m, uint64_t key, uint64_t val)
{
    size_t buckets = m->b == NULL ? 0 : m->mask + 1;
    if ((m->count + 1) * 2 > buckets) {
        size_t grown = buckets < MIN_BUCKETS ? MIN_BUCKETS : buckets * 2;
        if (grown <= buckets || map_resize(m, grown) < 0) {
            PyErr_NoMemory();
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
void
kp_map_remove(Map *m, Bucket *e)
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
void
kp_map_shrink(Map *m)
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
    (void)map_resize(m, fit);
}

void
kp_map_free(Map *m)
{
    PyMem_Free(m->b);
    m->b = NULL;
    m->mask = 0;
    m->count = 0;
}

size_t
kp_map_bytes(const Map *m)
{
    return m->b == NULL ? 0 : (m->mask + 1) * sizeof(Bucket);
}
