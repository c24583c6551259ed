/* `_ttft.signals`: what the engines' readings say at one Pick, for every slot at once, as
 * kinference.routing.readings.EngineReadings.engine_signals and .queue_now compute them
 * with numpy (their reference): fresh waiting and KV-cache use (NaN where unknown or
 * older than the staleness bound) and the queues carried forward, the same values bit
 * for bit (the same double operations in the same order; numpy's maximum as spelled
 * below). Eleven numpy calls are one call here: on a gateway whose caches the rest of
 * the request's path keeps cold, those calls cost ~0.1 ms a Pick.
 *
 * Arguments it does not take (a column that is not a C-contiguous float64 vector of the
 * table's size, an `out` that is not a writable one of three times that) answer
 * NotImplemented before anything is written, and the caller runs the numpy form.
 */
#include "ttft.h"

#include <string.h>

/* out, now, max_age, then the table's columns in this order. */
enum { SCRAPED_AT, WAITING, KV_USAGE, RUNNING_NOW, INFLIGHT_NOW, AT_READING_NOW, BATCH_NOW,
       SIGNAL_COLUMNS };

static int float64_vector(Py_buffer *view) {
    const char *format = view->format;
    if (format != NULL && (*format == '@' || *format == '=' || *format == '<')) {
        format++;
    }
    return view->ndim == 1 && view->itemsize == 8 && format != NULL && format[0] == 'd' &&
           format[1] == '\0';
}

/* 1: held; 0: not such a buffer (nothing held); -1: error. */
static int hold_vector(PyObject *object, Py_buffer *view, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, view, flags) < 0) {
        /* numpy refuses a strided or read-only array with ValueError */
        if (!PyErr_ExceptionMatches(PyExc_TypeError) &&
            !PyErr_ExceptionMatches(PyExc_BufferError) &&
            !PyErr_ExceptionMatches(PyExc_ValueError)) {
            return -1;
        }
        PyErr_Clear();
        return 0;
    }
    if (!float64_vector(view)) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* numpy's `maximum` of two doubles: the first when it is NaN or not smaller. */
static inline double np_maximum(double a, double b) { return a >= b || Py_IS_NAN(a) ? a : b; }

static void compute_signals(double *out, Py_ssize_t n, double now, double max_age,
                            const double *const c[SIGNAL_COLUMNS]) {
    double *waiting = out, *kv = out + n, *queue = out + 2 * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        int fresh = (now - c[SCRAPED_AT][i]) <= max_age; /* NaN compares false */
        double w = fresh ? c[WAITING][i] : Py_NAN;
        waiting[i] = w;
        kv[i] = fresh ? c[KV_USAGE][i] : Py_NAN;
        double since = c[INFLIGHT_NOW][i] - c[AT_READING_NOW][i];
        double held = c[RUNNING_NOW][i] + w + since;
        double carried = np_maximum(held - c[BATCH_NOW][i], 0.0);
        queue[i] = Py_IS_NAN(carried) ? w : carried;
    }
}

PyObject *ttft_signals(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 + SIGNAL_COLUMNS) {
        PyErr_Format(PyExc_TypeError, "signals takes %d arguments (%zd given)",
                     3 + SIGNAL_COLUMNS, nargs);
        return NULL;
    }
    if (!PyFloat_Check(args[1]) || !PyFloat_Check(args[2])) {
        return Py_NewRef(Py_NotImplemented);
    }
    double now = PyFloat_AS_DOUBLE(args[1]), max_age = PyFloat_AS_DOUBLE(args[2]);
    Py_buffer views[1 + SIGNAL_COLUMNS];
    const double *columns[SIGNAL_COLUMNS];
    int held = 0, taken = 1;
    for (; held < 1 + SIGNAL_COLUMNS; held++) {
        PyObject *object = held == 0 ? args[0] : args[2 + held];
        int got = hold_vector(object, &views[held], held == 0);
        if (got <= 0) {
            taken = got;
            break;
        }
    }
    Py_ssize_t n = 0;
    if (taken == 1) {
        n = views[1].shape[0];
        taken = views[0].shape[0] == 3 * n;
        for (int i = 0; i < SIGNAL_COLUMNS && taken; i++) {
            taken = views[1 + i].shape[0] == n;
            columns[i] = views[1 + i].buf;
        }
    }
    if (taken == 1) {
        compute_signals(views[0].buf, n, now, max_age, columns);
    }
    for (int i = 0; i < held; i++) {
        PyBuffer_Release(&views[i]);
    }
    if (taken < 0) {
        return NULL;
    }
    return Py_NewRef(taken ? Py_None : Py_NotImplemented);
}
