/* A bounded cache of large blocks under Python's raw allocator (`kinference.heap`).
 *
 * Python serves every object over 512 bytes (a received 1 MiB gRPC message as `bytes`, a
 * rendered prompt as `str`) from its raw allocator, malloc. The picker fixes glibc's mmap
 * threshold at 256 KiB (`heap.fix_mmap_threshold`: RSS falls back after bursts), so each
 * such block is a fresh mapping that the kernel fills page by page as it is first written:
 * ~256 page faults a MiB, ~0.7 ms against ~0.1 ms with the pages already there. gRPC aio
 * joins each received message into one `bytes` on the event loop, so 16 pushes of 1 MiB
 * arriving together held the loop ~10 ms in faults (docs/benchmarks.md, h109).
 *
 * `install` wraps the raw allocator: a request of [min_bytes, max_bytes] gets a mapping of
 * its own, rounded up to a 64 KiB class; a freed one is kept (its pages stay filled) while
 * the kept blocks total at most `cap_bytes`, and the next request of its class takes it
 * back without a fault; past the cap it is unmapped as before. Everything else goes to the
 * allocator that was there. `release(idle_s)` unmaps the kept blocks nobody took back within
 * `idle_s` seconds of their free (`heap.return_idle_blocks`, from the picker's reaper), so a
 * burst's blocks do not stay mapped once the bursts stop. A block's address is its mapping's plus HEADER, and the live
 * blocks are in a hash table: `free` of any other pointer costs one mask test (and a table
 * look-up for the 1 in 256 heap pointers at that page offset). The raw domain may be
 * called without the GIL, so the cache's state is under a mutex (held across a fork, so a
 * forked child never inherits it locked). Never uninstalled: a block of ours must never
 * reach the previous allocator.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE ((uintptr_t)4096)
#define HEADER ((uintptr_t)64) /* the block's offset in its mapping */
#define STEP ((size_t)64 * 1024) /* class granularity */
#define GOLDEN 0x9E3779B97F4A7C15ull

typedef struct Kept { /* at the start of a kept block's mapping, inside HEADER */
    struct Kept *next;
    uint64_t kept_ns; /* CLOCK_MONOTONIC at its free: each class's list is newest first */
    size_t mapped;    /* its mapping's size */
} Kept;

static PyMemAllocatorEx previous;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int installed;
static size_t min_bytes, max_bytes, cap_bytes, kept_bytes;
static Kept **kept; /* per class (mapped size / STEP), LIFO */
static size_t n_classes;
static uintptr_t *keys; /* live mappings; 0 = empty slot */
static size_t *sizes;   /* their mapped sizes */
static size_t slots, used;
static unsigned long long hits, unmapped, released;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static size_t home(uintptr_t key) {
    return (size_t)(((key >> 12) * GOLDEN) >> 20) & (slots - 1);
}

static size_t find(uintptr_t key) { /* its slot, or `slots` when absent */
    for (size_t i = home(key);; i = (i + 1) & (slots - 1)) {
        if (keys[i] == key)
            return i;
        if (keys[i] == 0)
            return slots;
    }
}

static void put(uintptr_t key, size_t size) {
    size_t i = home(key);
    while (keys[i] != 0)
        i = (i + 1) & (slots - 1);
    keys[i] = key;
    sizes[i] = size;
    used++;
}

static int grow(void) { /* 0 when the table could not grow */
    uintptr_t *old_keys = keys;
    size_t *old_sizes = sizes, old_slots = slots;
    uintptr_t *new_keys = calloc(old_slots * 2, sizeof(uintptr_t));
    size_t *new_sizes = calloc(old_slots * 2, sizeof(size_t));
    if (new_keys == NULL || new_sizes == NULL) {
        free(new_keys);
        free(new_sizes);
        return 0;
    }
    keys = new_keys;
    sizes = new_sizes;
    slots = old_slots * 2;
    used = 0;
    for (size_t i = 0; i < old_slots; i++)
        if (old_keys[i] != 0)
            put(old_keys[i], old_sizes[i]);
    free(old_keys);
    free(old_sizes);
    return 1;
}

static void take_out(size_t i) { /* linear probing's deletion: later entries shift back */
    size_t j = i;
    for (;;) {
        j = (j + 1) & (slots - 1);
        if (keys[j] == 0)
            break;
        size_t k = home(keys[j]);
        int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            keys[i] = keys[j];
            sizes[i] = sizes[j];
            i = j;
        }
    }
    keys[i] = 0;
    used--;
}

static size_t mapped_of(const void *p) { /* the mapped size of our block `p`, else 0 */
    if (p == NULL || ((uintptr_t)p & (PAGE - 1)) != HEADER)
        return 0;
    pthread_mutex_lock(&lock);
    size_t i = find((uintptr_t)p - HEADER), size = i < slots ? sizes[i] : 0;
    pthread_mutex_unlock(&lock);
    return size;
}

static void *block_malloc(void *ctx, size_t n) {
    (void)ctx;
    if (n < min_bytes || n > max_bytes)
        return previous.malloc(previous.ctx, n);
    size_t mapped = (n + HEADER + STEP - 1) / STEP * STEP, cls = mapped / STEP;
    pthread_mutex_lock(&lock);
    void *map = kept[cls];
    if (map != NULL) {
        kept[cls] = kept[cls]->next;
        kept_bytes -= mapped;
        hits++;
    }
    pthread_mutex_unlock(&lock);
    if (map == NULL) {
        map = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
            return previous.malloc(previous.ctx, n);
    }
    pthread_mutex_lock(&lock);
    int room = (used + 1) * 2 <= slots || grow();
    if (room)
        put((uintptr_t)map, mapped);
    pthread_mutex_unlock(&lock);
    if (!room) {
        munmap(map, mapped);
        return previous.malloc(previous.ctx, n);
    }
    return (char *)map + HEADER;
}

static void *block_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    return previous.calloc(previous.ctx, nelem, elsize); /* fresh pages are zero anyway */
}

static void block_free(void *ctx, void *p) {
    (void)ctx;
    if (p == NULL || ((uintptr_t)p & (PAGE - 1)) != HEADER) {
        previous.free(previous.ctx, p);
        return;
    }
    uintptr_t map = (uintptr_t)p - HEADER;
    pthread_mutex_lock(&lock);
    size_t i = find(map);
    if (i == slots) {
        pthread_mutex_unlock(&lock);
        previous.free(previous.ctx, p);
        return;
    }
    size_t mapped = sizes[i];
    take_out(i);
    int keep = kept_bytes + mapped <= cap_bytes;
    if (keep) {
        Kept *block = (Kept *)map;
        block->next = kept[mapped / STEP];
        block->kept_ns = now_ns(); /* under the lock: the list stays ordered */
        block->mapped = mapped;
        kept[mapped / STEP] = block;
        kept_bytes += mapped;
    } else {
        unmapped++;
    }
    pthread_mutex_unlock(&lock);
    if (!keep)
        munmap((void *)map, mapped);
}

static void *block_realloc(void *ctx, void *p, size_t n) {
    size_t mapped = mapped_of(p);
    if (mapped == 0)
        return previous.realloc(previous.ctx, p, n);
    if (n >= min_bytes && n <= max_bytes && (n + HEADER + STEP - 1) / STEP * STEP == mapped)
        return p; /* the same class: it fits where it is */
    void *moved = block_malloc(ctx, n ? n : 1);
    if (moved == NULL)
        return NULL;
    size_t held = mapped - HEADER;
    memcpy(moved, p, n < held ? n : held);
    block_free(ctx, p);
    return moved;
}

static void before_fork(void) { pthread_mutex_lock(&lock); }

static void after_fork(void) { pthread_mutex_unlock(&lock); }

static PyObject *install(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t low, high, cap;
    if (!PyArg_ParseTuple(args, "nnn:install", &low, &high, &cap))
        return NULL;
    if (low < (Py_ssize_t)PAGE || high < low || cap < 0) {
        PyErr_SetString(PyExc_ValueError, "install(min_bytes >= 4096, max_bytes >= min, cap >= 0)");
        return NULL;
    }
    if (installed)
        Py_RETURN_FALSE;
    n_classes = ((size_t)high + HEADER + STEP - 1) / STEP + 1;
    kept = calloc(n_classes, sizeof(Kept *));
    slots = 1024;
    keys = calloc(slots, sizeof(uintptr_t));
    sizes = calloc(slots, sizeof(size_t));
    if (kept == NULL || keys == NULL || sizes == NULL) {
        free(kept);
        free(keys);
        free(sizes);
        return PyErr_NoMemory();
    }
    if (pthread_atfork(before_fork, after_fork, after_fork) != 0) {
        free(kept);
        free(keys);
        free(sizes);
        return PyErr_NoMemory();
    }
    min_bytes = (size_t)low;
    max_bytes = (size_t)high;
    cap_bytes = (size_t)cap;
    PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &previous);
    PyMemAllocatorEx mine = {NULL, block_malloc, block_calloc, block_realloc, block_free};
    PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &mine);
    installed = 1;
    Py_RETURN_TRUE;
}

static Kept *idle_of(size_t cls, uint64_t before) {
    /* Unlinks and returns class `cls`'s blocks kept at `before` or earlier: the list is
     * newest first, so they are its tail from the first such block on. Under the lock. */
    Kept **at = &kept[cls];
    while (*at != NULL && (*at)->kept_ns > before)
        at = &(*at)->next;
    Kept *idle = *at;
    *at = NULL;
    return idle;
}

static PyObject *release(PyObject *self, PyObject *args) {
    (void)self;
    double idle_s;
    if (!PyArg_ParseTuple(args, "d:release", &idle_s))
        return NULL;
    if (!(idle_s >= 0.0)) {
        PyErr_SetString(PyExc_ValueError, "release(idle_s >= 0)");
        return NULL;
    }
    if (!installed)
        return PyLong_FromLong(0);
    uint64_t now = now_ns(), idle_ns = idle_s >= 1e9 ? UINT64_MAX : (uint64_t)(idle_s * 1e9);
    uint64_t before = idle_ns > now ? 0 : now - idle_ns;
    size_t bytes = 0;
    Kept *idle = NULL;
    pthread_mutex_lock(&lock);
    for (size_t cls = 0; cls < n_classes; cls++) {
        Kept *tail = idle_of(cls, before);
        while (tail != NULL) { /* onto `idle`, unmapped once the lock is let go */
            Kept *next = tail->next;
            tail->next = idle;
            idle = tail;
            bytes += tail->mapped;
            released++;
            tail = next;
        }
    }
    kept_bytes -= bytes;
    pthread_mutex_unlock(&lock);
    while (idle != NULL) {
        Kept *next = idle->next;
        munmap(idle, idle->mapped);
        idle = next;
    }
    return PyLong_FromSize_t(bytes);
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    pthread_mutex_lock(&lock);
    unsigned long long h = hits, u = unmapped, r = released;
    size_t k = kept_bytes, live = used;
    pthread_mutex_unlock(&lock);
    return Py_BuildValue("{s:K,s:K,s:K,s:n,s:n}", "reused", h, "unmapped", u, "released", r,
                         "kept_bytes", (Py_ssize_t)k, "live_blocks", (Py_ssize_t)live);
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(min_bytes, max_bytes, cap_bytes) -> bool: wrap the raw allocator (once)."},
    {"release", release, METH_VARARGS,
     "release(idle_s) -> int: unmap the blocks kept over idle_s seconds; the bytes unmapped."},
    {"stats", stats, METH_NOARGS,
     "stats() -> dict: reused, unmapped, released, kept_bytes, live_blocks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_blocks", NULL, -1, methods};

PyMODINIT_FUNC PyInit__blocks(void) { return PyModule_Create(&module); }
