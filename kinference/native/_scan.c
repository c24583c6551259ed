/* The body scan's run below the top level, in C: what
 * kinference.requests.scan_run.pure_run does in Python (its reference, with the same
 * signature), over a whole window instead of at most RUN_TOKENS events a step.
 *
 * run(data, pos, window, stack, max_depth, long_string_bytes) goes through data[pos:window]
 * while `stack` (the open brackets below the top-level object, a bytearray of '{' and '[')
 * is not empty, taking each string and bracket as the scan's usual path would: a string
 * whose closing quote (one not escaped: an even run of backslashes before it) lies in the
 * window and whose content is at most long_string_bytes is counted (strings + 1,
 * string_bytes + its bytes with the quotes); an opening bracket is pushed (brackets + 1)
 * unless the stack holds max_depth already; a closing one pops its match. It stops where
 * the usual path must decide - a string the window cuts or a long one, a bracket that
 * fails, the top level reached (the bracket that empties the stack taken) - and answers
 * (where to go on, strings, string_bytes, brackets): the counts it added. Nothing is taken
 * (pos, 0, 0, 0) where `data` gives no contiguous buffer. Bytes outside strings and
 * brackets are not looked at (the scan checks nothing else below the top level); the bytes
 * are never decoded. The GIL is held throughout; the stack is written back at the end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#define DEPTH_LIMIT 4096 /* a max_depth above this is refused (the scan's is 128) */

static const char run_doc[] =
    "run(data, pos, window, stack, max_depth, long_string_bytes, /)\n--\n\n"
    "The scan's strings and brackets below the top level from data[pos:window]; "
    "(after, strings, string_bytes, brackets). See kinference/native/_scan.pyi.";

typedef struct {
    const unsigned char *data;
    Py_ssize_t window;
    unsigned char *stack;
    Py_ssize_t depth;
    Py_ssize_t max_depth;
    Py_ssize_t long_bytes;
    Py_ssize_t strings;
    Py_ssize_t string_bytes;
    Py_ssize_t brackets;
} Run;

/* Past the string opening at `at` when it closes in the window and is not long; else at. */
static Py_ssize_t past_string(Run *run, Py_ssize_t at) {
    const unsigned char *data = run->data;
    Py_ssize_t from = at + 1;
    for (;;) {
        const unsigned char *found = memchr(data + from, '"', (size_t)(run->window - from));
        if (found == NULL) {
            return at;
        }
        Py_ssize_t close = found - data;
        if (close - at - 1 > run->long_bytes) {
            return at;
        }
        Py_ssize_t index = close - 1;
        while (index > at && data[index] == '\\') {
            index--;
        }
        if ((close - 1 - index) % 2 == 0) {
            run->strings++;
            run->string_bytes += close + 1 - at;
            return close + 1;
        }
        from = close + 1;
    }
}

/* Past a bracket that opens or closes as it should; else at. */
static Py_ssize_t past_bracket(Run *run, unsigned char byte, Py_ssize_t at) {
    if (byte == '}' || byte == ']') {
        if (run->stack[run->depth - 1] != (byte == '}' ? '{' : '[')) {
            return at;
        }
        run->depth--;
        return at + 1;
    }
    if (run->depth >= run->max_depth) {
        return at;
    }
    run->stack[run->depth++] = byte;
    run->brackets++;
    return at + 1;
}

static int structural(unsigned char byte) {
    return byte == '"' || byte == '{' || byte == '}' || byte == '[' || byte == ']';
}

static Py_ssize_t scan(Run *run, Py_ssize_t pos) {
    const unsigned char *data = run->data;
    while (run->depth > 0) {
        Py_ssize_t at = pos;
        while (at < run->window && !structural(data[at])) {
            at++;
        }
        if (at == run->window) {
            return at;
        }
        Py_ssize_t after =
            data[at] == '"' ? past_string(run, at) : past_bracket(run, data[at], at);
        if (after == at) {
            return at;
        }
        pos = after;
    }
    return pos;
}

static int size_arg(PyObject *arg, const char *name, Py_ssize_t *out) {
    Py_ssize_t value = PyLong_AsSsize_t(arg);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (value < 0) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0", name);
        return -1;
    }
    *out = value;
    return 0;
}

static PyObject *run(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "run() takes exactly 6 arguments");
        return NULL;
    }
    Py_ssize_t pos, window;
    Run state = {0};
    if (size_arg(args[1], "pos", &pos) || size_arg(args[2], "window", &window) ||
        size_arg(args[4], "max_depth", &state.max_depth) ||
        size_arg(args[5], "long_string_bytes", &state.long_bytes)) {
        return NULL;
    }
    PyObject *stack = args[3];
    if (!PyByteArray_CheckExact(stack)) {
        PyErr_SetString(PyExc_TypeError, "stack must be a bytearray");
        return NULL;
    }
    state.depth = PyByteArray_GET_SIZE(stack);
    if (state.max_depth > DEPTH_LIMIT || state.depth > state.max_depth) {
        PyErr_SetString(PyExc_ValueError, "the stack is deeper than max_depth allows");
        return NULL;
    }
    const char *held = PyByteArray_AS_STRING(stack);
    for (Py_ssize_t index = 0; index < state.depth; index++) {
        if (held[index] != '{' && held[index] != '[') {
            PyErr_SetString(PyExc_ValueError, "the stack holds only '{' and '['");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not a contiguous buffer: the scan's usual path takes it */
        return Py_BuildValue("(nnnn)", pos, (Py_ssize_t)0, (Py_ssize_t)0, (Py_ssize_t)0);
    }
    if (window > view.len || pos > window) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "expected pos <= window <= len(data)");
        return NULL;
    }
    unsigned char room[DEPTH_LIMIT];
    memcpy(room, held, (size_t)state.depth);
    state.data = view.buf;
    state.window = window;
    state.stack = room;
    Py_ssize_t after = scan(&state, pos);
    PyBuffer_Release(&view);
    if (state.depth != PyByteArray_GET_SIZE(stack)) {
        if (PyByteArray_Resize(stack, state.depth) < 0) {
            return NULL; /* e.g. a view of the stack is held: nothing was changed */
        }
    }
    memcpy(PyByteArray_AS_STRING(stack), room, (size_t)state.depth);
    return Py_BuildValue("(nnnn)", after, state.strings, state.string_bytes, state.brackets);
}

PyDoc_STRVAR(limit_counts_doc,
             "limit_counts(data, /) -> (brackets, colons)\n\n"
             "The bytes '{' and '[' and the bytes ':' anywhere in a contiguous buffer (strings\n"
             "included): the same counts as requests.fields.pure_limit_counts, in one pass.");

/* How many bytes of data[0:size] are `byte`: memchr from each to the next (a body has a
   few of them among thousands of bytes; a byte-by-byte loop took ~1 ns a byte). */
static Py_ssize_t count_byte(const char *data, Py_ssize_t size, int byte) {
    Py_ssize_t count = 0;
    const char *end = data + size;
    const char *at = data;
    while (at < end && (at = memchr(at, byte, (size_t)(end - at))) != NULL) {
        count++;
        at++;
    }
    return count;
}

static PyObject *limit_counts(PyObject *module, PyObject *data) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t brackets = count_byte(view.buf, view.len, '{') + count_byte(view.buf, view.len, '[');
    Py_ssize_t colons = count_byte(view.buf, view.len, ':');
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", brackets, colons);
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, run_doc},
    {"limit_counts", (PyCFunction)limit_counts, METH_O, limit_counts_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kinference.native._scan",
    .m_doc = "The body scan's run below the top level in C (kinference.requests.scan).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModuleDef_Init(&module_def); }
