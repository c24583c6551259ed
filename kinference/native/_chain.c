/* The approximate prefix index's chained block hashes, in C: the same bits as
 * kinference.routing.chain.chain_tuple (its pure-Python reference); and the precise
 * mode's block identities from token ids (kinference.kvcache.blocks.identities).
 *
 * Block i of `data` (block_bytes bytes, zero-padded to whole 8-byte words, each word read
 * little-endian as struct "<Q") is h_i = fmix64(sum over k of w_k * LANES[k % 8]);
 * the chain is c_i = c_(i-1) * BASE + h_i (mod 2^64), with c_-1 = 0 and the model's seed
 * xor-ed into h_0; block i's hash is fmix64(c_i). A chain continues from a known hash:
 * fmix64 is invertible, so c_(same-1) = unmix(known[same - 1]).
 *
 * All arithmetic is on uint64_t (unsigned: wraps modulo 2^64, no undefined behaviour);
 * words are loaded with memcpy (no unaligned access) and byte-swapped where the machine is
 * not little-endian. The GIL is held throughout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define BASE UINT64_C(0x9E3779B97F4A7C15)
#define M1 UINT64_C(0xFF51AFD7ED558CCD)
#define M2 UINT64_C(0xC4CEB9FE1A85EC53)
#define M1_INVERSE UINT64_C(0x4F74430C22A54005)
#define M2_INVERSE UINT64_C(0x9CB4B2F8129337DB)

static const uint64_t LANES[8] = {
    UINT64_C(0x87C37B91114253D5), UINT64_C(0x4CF5AD432745937F),
    UINT64_C(0x52DCE729DA3ED7B5), UINT64_C(0x38495AB5D6E6E2AB),
    UINT64_C(0xA0761D6478BD642F), UINT64_C(0xE7037ED1A0B428DB),
    UINT64_C(0x8EBC6AF09C88C6E3), UINT64_C(0x589965CC75374CC3),
};

static inline uint64_t mix(uint64_t value) {
    value ^= value >> 33;
    value *= M1;
    value ^= value >> 33;
    value *= M2;
    return value ^ (value >> 33);
}

static inline uint64_t unmix(uint64_t value) {
    value ^= value >> 33;
    value *= M2_INVERSE;
    value ^= value >> 33;
    value *= M1_INVERSE;
    return value ^ (value >> 33);
}

/* Eight bytes as a little-endian unsigned integer, whatever the machine's byte order. */
static inline uint64_t load_le(const unsigned char *bytes) {
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t word;
    memcpy(&word, bytes, sizeof word);
    return word;
#else
    uint64_t word = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        word = (word << 8) | bytes[shift / 8];
    }
    return word;
#endif
}

/* h_i before the seed: one block's words mixed with the lanes, then fmix64. */
static uint64_t block_value(const unsigned char *block, Py_ssize_t block_bytes) {
    uint64_t sum = 0;
    Py_ssize_t whole = block_bytes / 8, word = 0;
    for (; word < whole; word++) {
        sum += load_le(block + 8 * word) * LANES[word % 8];
    }
    Py_ssize_t rest = block_bytes - 8 * whole;
    if (rest) {
        unsigned char padded[8] = {0};
        memcpy(padded, block + 8 * whole, (size_t)rest);
        sum += load_le(padded) * LANES[word % 8];
    }
    return mix(sum);
}

/* An index-like argument as a Py_ssize_t; ValueError (as the reference's range checks
 * raise) for one beyond Py_ssize_t, -1 with an exception set on failure. */
static int as_size(PyObject *object, const char *name, Py_ssize_t *out) {
    PyObject *index = PyNumber_Index(object);
    if (index == NULL) {
        return -1;
    }
    Py_ssize_t value = PyLong_AsSsize_t(index);
    Py_DECREF(index);
    if (value == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return -1;
        }
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s is out of range", name);
        return -1;
    }
    *out = value;
    return 0;
}

static PyObject *build(const unsigned char *data, Py_ssize_t block_bytes, Py_ssize_t count,
                       uint64_t seed, PyObject *known, Py_ssize_t same) {
    uint64_t chained = 0;
    if (same > 0) {
        uint64_t before = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(known, same - 1));
        if (before == (uint64_t)-1 && PyErr_Occurred()) {
            return NULL;
        }
        chained = unmix(before);
    }
    PyObject *hashes = PyTuple_New(count);
    if (hashes == NULL) {
        return NULL;
    }
    for (Py_ssize_t index = 0; index < same; index++) {
        PyObject *item = PyTuple_GET_ITEM(known, index);
        Py_INCREF(item);
        PyTuple_SET_ITEM(hashes, index, item);
    }
    for (Py_ssize_t index = same; index < count; index++) {
        uint64_t value = block_value(data + index * block_bytes, block_bytes);
        if (index == 0) {
            value ^= seed;
        }
        chained = chained * BASE + value;
        PyObject *item = PyLong_FromUnsignedLongLong(mix(chained));
        if (item == NULL) {
            Py_DECREF(hashes);
            return NULL;
        }
        PyTuple_SET_ITEM(hashes, index, item);
    }
    return hashes;
}

static int check(Py_ssize_t length, Py_ssize_t block_bytes, Py_ssize_t count, PyObject *known,
                 Py_ssize_t same) {
    if (block_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "block_bytes must be at least 1");
        return -1;
    }
    if (count < 0 || count > length / block_bytes) {
        PyErr_SetString(PyExc_ValueError, "count must be within the data's whole blocks");
        return -1;
    }
    if (!PyTuple_Check(known)) {
        PyErr_SetString(PyExc_TypeError, "known must be a tuple");
        return -1;
    }
    if (same < 0 || same > count || same > PyTuple_GET_SIZE(known)) {
        PyErr_SetString(PyExc_ValueError, "same must be within count and the known hashes");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(hashes_doc,
             "hashes(data, block_bytes, count, seed, known, same, /)\n--\n\n"
             "The chained hashes of blocks 0..count - 1 of data: known[:same], then the\n"
             "chain continued from known[same - 1] (seed, taken modulo 2**64, xor-ed into\n"
             "block 0's value when same is 0). The same bits as\n"
             "kinference.routing.chain.chain_tuple.");

static PyObject *hashes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "hashes expected 6 arguments, got %zd", nargs);
        return NULL;
    }
    Py_ssize_t block_bytes, count, same;
    if (as_size(args[1], "block_bytes", &block_bytes) < 0 ||
        as_size(args[2], "count", &count) < 0 || as_size(args[5], "same", &same) < 0) {
        return NULL;
    }
    if (!PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "seed must be an int");
        return NULL;
    }
    uint64_t seed = PyLong_AsUnsignedLongLongMask(args[3]);
    if (seed == (uint64_t)-1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (check(view.len, block_bytes, count, args[4], same) == 0) {
        result = build((const unsigned char *)view.buf, block_bytes, count, seed, args[4], same);
    }
    PyBuffer_Release(&view);
    return result;
}

/* A block of token ids' content hash: fmix64 of the sum over its positions k of
 * fmix64(token_k * lanes[k] + 1). */
static uint64_t content(const unsigned char *tokens, Py_ssize_t block_size,
                        const uint64_t *lanes) {
    uint64_t sum = 0;
    for (Py_ssize_t position = 0; position < block_size; position++) {
        uint32_t token;
        memcpy(&token, tokens + 4 * position, sizeof token);
        sum += mix((uint64_t)token * lanes[position] + 1);
    }
    return mix(sum);
}

PyDoc_STRVAR(identities_doc,
             "identities(tokens, block_size, first, /)\n--\n\n"
             "The identities of every full block of tokens (a buffer of native uint32\n"
             "token ids): id_i = id_(i-1) * B + content_i mod 2**64, id_-1 = first\n"
             "(modulo 2**64). The same bits as kinference.kvcache.blocks.identities.");

static PyObject *identities(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "identities expected 3 arguments, got %zd", nargs);
        return NULL;
    }
    Py_ssize_t block_size;
    if (as_size(args[1], "block_size", &block_size) < 0) {
        return NULL;
    }
    if (block_size < 1) {
        PyErr_SetString(PyExc_ValueError, "block_size must be at least 1");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (view.len % 4) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "tokens must be whole 4-byte token ids");
        return NULL;
    }
    const unsigned char *tokens = view.buf;
    Py_ssize_t count = view.len / 4 / block_size;
    PyObject *result = PyList_New(count);
    if (result == NULL || count == 0) {
        PyBuffer_Release(&view);
        return result;
    }
    uint64_t chained = 0;
    uint64_t *lanes = NULL;
    if (!PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "first must be an int");
        goto failed;
    }
    chained = PyLong_AsUnsignedLongLongMask(args[2]);
    if (chained == (uint64_t)-1 && PyErr_Occurred()) {
        goto failed;
    }
    /* One odd constant per position in a block: fmix64((k + 1) * B) | 1. */
    lanes = PyMem_Malloc((size_t)block_size * sizeof *lanes);
    if (lanes == NULL) {
        PyErr_NoMemory();
        goto failed;
    }
    for (Py_ssize_t position = 0; position < block_size; position++) {
        lanes[position] = mix((uint64_t)(position + 1) * BASE) | 1;
    }
    for (Py_ssize_t index = 0; index < count; index++) {
        chained = chained * BASE + content(tokens + 4 * index * block_size, block_size, lanes);
        PyObject *item = PyLong_FromUnsignedLongLong(chained);
        if (item == NULL) {
            goto failed;
        }
        PyList_SET_ITEM(result, index, item);
    }
    PyMem_Free(lanes);
    PyBuffer_Release(&view);
    return result;
failed:
    PyMem_Free(lanes);
    PyBuffer_Release(&view);
    Py_DECREF(result);
    return NULL;
}

static PyMethodDef methods[] = {
    {"hashes", (PyCFunction)(void (*)(void))hashes, METH_FASTCALL, hashes_doc},
    {"identities", (PyCFunction)(void (*)(void))identities, METH_FASTCALL, identities_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kinference.native._chain",
    .m_doc = "Chained block hashes in C (kinference.routing.chain, kinference.kvcache.blocks).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__chain(void) { return PyModuleDef_Init(&module_def); }
