/* `_ttft.terms`'s arguments taken apart: buffers held, lists copied, constants read.
 *
 * Positional: out (writable float64, C-contiguous, rows * len(slots)), slots (intp),
 * cached (float64, per candidate), waiting (float64, per slot), table (a WorkerTable),
 * per_token, base, service (float64 per slot, or None), constants (10 floats: `Constants`),
 * busy (float), prompt (float or int), memory, fits, footprint (lists of floats, or None),
 * clock (the table's), scoring (bool), pool (intp: the pool's ready slots, or None). What
 * is not of these types is
 * not taken (answer 0) rather than converted: the pure form then runs on it as it is.
 */
#include "ttft_args.h"

#include <string.h>

#define ARGS 17

int names_open(Names *names) {
    static const char *const attributes[COLUMNS] = {
        "inflight", "running", "inflight_at_reading", "pending_prefill", "batch",
        "running_max", "batch_limit", "batch_floor", "batch_ceiling", "prefill_since",
        "prefill_ended", "probing", "probe_late",
    };
    for (int i = 0; i < COLUMNS; i++) {
        names->columns[i] = PyUnicode_InternFromString(attributes[i]);
        if (names->columns[i] == NULL) {
            return -1;
        }
    }
    return 0;
}

static int native_format(const char *format, const char *codes) {
    if (format == NULL) {
        return 0;
    }
    if (*format == '@' || *format == '=') {
        format++;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    else if (*format == '<') {
        format++;
    }
#endif
    return format[0] != '\0' && format[1] == '\0' && strchr(codes, format[0]) != NULL;
}

int hold_vector(PyObject *object, Py_buffer *view, const char *codes, int flags) {
    if (PyObject_GetBuffer(object, view, flags | PyBUF_FORMAT | PyBUF_STRIDES) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError) &&
            !PyErr_ExceptionMatches(PyExc_BufferError)) {
            return -1;
        }
        PyErr_Clear();
        return 0;
    }
    int shaped = view->ndim == 1 || (flags & PyBUF_WRITABLE); /* out: rows x candidates */
    return shaped && view->itemsize == 8 && native_format(view->format, codes) ? 1 : 2;
}

/* A 1-D buffer of 8-byte items of `codes`: 1 held, 0 not such a buffer, -1 error. */
static int hold(Terms *t, PyObject *object, const char *codes, int flags) {
    int taken = hold_vector(object, &t->views[t->held], codes, flags);
    if (taken > 0) {
        t->held++; /* released by terms_close, taken or not */
    }
    return taken == 2 ? 0 : taken;
}

static int column(Terms *t, PyObject *object, Column *out) {
    int taken = hold(t, object, "d", PyBUF_SIMPLE);
    if (taken > 0) {
        Py_buffer *view = &t->views[t->held - 1];
        out->data = view->buf;
        out->size = view->shape[0];
        out->stride = view->strides[0];
    }
    return taken;
}

/* A list of exact floats copied to `into`: 1, or 0 (another type). */
static int floats(PyObject *object, double *into, Py_ssize_t *count, Py_ssize_t room) {
    if (!PyList_CheckExact(object) || PyList_GET_SIZE(object) > room) {
        return 0;
    }
    *count = PyList_GET_SIZE(object);
    for (Py_ssize_t i = 0; i < *count; i++) {
        PyObject *item = PyList_GET_ITEM(object, i);
        if (!PyFloat_CheckExact(item)) {
            return 0;
        }
        into[i] = PyFloat_AS_DOUBLE(item);
    }
    return 1;
}

static int constants(PyObject *object, Constants *c) {
    if (!PyTuple_CheckExact(object) || PyTuple_GET_SIZE(object) != 10) {
        return 0;
    }
    double *fields[10] = {&c->per_token, &c->base,  &c->service, &c->prior_batch, &c->full,
                          &c->weight,    &c->space, &c->queued,  &c->doubt,       &c->block};
    for (int i = 0; i < 10; i++) {
        PyObject *item = PyTuple_GET_ITEM(object, i);
        if (!PyFloat_CheckExact(item)) {
            return 0;
        }
        *fields[i] = PyFloat_AS_DOUBLE(item);
    }
    return 1;
}

static int number(PyObject *object, double *out) {
    if (PyFloat_CheckExact(object)) {
        *out = PyFloat_AS_DOUBLE(object);
        return 1;
    }
    if (!PyLong_CheckExact(object)) {
        return 0;
    }
    *out = PyLong_AsDouble(object); /* as `int - float` converts it */
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear(); /* too large: the pure form raises it where it does */
        return 0;
    }
    return 1;
}

static int buffers(Terms *t, const Names *names, PyObject *const *args) {
    int taken = hold(t, args[0], "d", PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS);
    if (taken <= 0) {
        return taken;
    }
    t->out = t->views[0].buf;
    if ((taken = hold(t, args[1], "lqn", PyBUF_C_CONTIGUOUS)) <= 0) {
        return taken;
    }
    t->slots = t->views[1].buf;
    t->count = t->views[1].shape[0];
    if ((taken = column(t, args[2], &t->cached)) <= 0 ||
        (taken = column(t, args[3], &t->waiting)) <= 0) {
        return taken;
    }
    for (int i = 0; i < COLUMNS; i++) {
        PyObject *array = PyObject_GetAttr(t->table, names->columns[i]);
        if (array == NULL) {
            return -1;
        }
        taken = column(t, array, &t->columns[i]);
        Py_DECREF(array); /* the view holds it */
        if (taken <= 0) {
            return taken;
        }
    }
    t->pool = NULL, t->pool_count = 0;
    if (args[16] != Py_None) {
        if ((taken = hold(t, args[16], "lqn", PyBUF_C_CONTIGUOUS)) <= 0) {
            return taken;
        }
        t->pool = t->views[t->held - 1].buf;
        t->pool_count = t->views[t->held - 1].shape[0];
    }
    for (int i = 0; i < 3; i++) {
        t->rates[i] = NULL;
        if (args[5 + i] != Py_None) {
            if ((taken = column(t, args[5 + i], &t->rate_columns[i])) <= 0) {
                return taken;
            }
            t->rates[i] = &t->rate_columns[i];
        }
    }
    return 1;
}

static int lists(Terms *t, PyObject *const *args) {
    Py_ssize_t n = t->count, room = n + 1, p = t->pool_count; /* longer lists: pure form's */
    t->scratch = PyMem_Malloc(sizeof(double) * (size_t)(3 * n + 5 * n + 5 * p + 3 * room + 1));
    if (t->scratch == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->per_token = t->scratch, t->base = t->per_token + n, t->service = t->base + n;
    t->rows = (BatchRow *)(t->service + n);
    t->pool_rows = t->pool != NULL ? t->rows + n : t->rows;
    double *lists = t->service + n + 5 * n + 5 * p;
    t->memory = t->fits = t->footprint = NULL;
    if (args[11] != Py_None && args[12] != Py_None) {
        if (!floats(args[11], lists, &t->memory_count, room) ||
            !floats(args[12], lists + room, &t->fits_count, room)) {
            return 0;
        }
        t->memory = lists, t->fits = lists + room;
    }
    if (t->scoring && args[13] != Py_None) {
        if (!floats(args[13], lists + 2 * room, &t->footprint_count, room)) {
            return 0;
        }
        t->footprint = lists + 2 * room;
    }
    return 1;
}

int terms_open(Terms *t, const Names *names, PyObject *const *args, Py_ssize_t nargs,
               Py_ssize_t rows) {
    t->held = 0;
    t->scratch = NULL;
    if (nargs != ARGS) {
        PyErr_Format(PyExc_TypeError, "terms() takes %d arguments (%zd given)", ARGS, nargs);
        return -1;
    }
    t->table = args[4], t->clock = args[14];
    t->scoring = PyObject_IsTrue(args[15]);
    if (t->scoring < 0) {
        return -1;
    }
    int taken = buffers(t, names, args);
    if (taken <= 0) {
        return taken;
    }
    if (t->views[0].len < (Py_ssize_t)sizeof(double) * rows * t->count) {
        PyErr_SetString(PyExc_ValueError, "out is smaller than rows * len(slots)");
        return -1;
    }
    if (!constants(args[8], &t->c) || !number(args[9], &t->busy) ||
        !number(args[10], &t->prompt)) {
        return 0;
    }
    return lists(t, args);
}

void terms_close(Terms *t) {
    for (int i = 0; i < t->held; i++) {
        PyBuffer_Release(&t->views[i]);
    }
    t->held = 0;
    PyMem_Free(t->scratch);
    t->scratch = NULL;
}
