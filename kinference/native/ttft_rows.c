/* The readings' small forms and the TTFT model's per-value helpers, in C: the same values
 * as kinference.routing.readings (`occupancy_of_row`, `peer_batch_of_rows`,
 * `most_seen_of_rows`, `unsure_of_row`), kinference.routing.doubt (`is_probe`, `unseen_wait`) and ttft_small (`_small_peers_or`),
 * operation for operation (see ttft.h).
 */
#include "ttft.h"

#include <errno.h>
#include <math.h>

/* Read through a volatile so that the compiler keeps libm's pow (CPython's `x ** 2`)
 * rather than folding pow(x, 2.0) into x * x. */
static volatile double SQUARE = 2.0;

/* `columns`: the table's inflight, running, inflight_at_reading. */
int occupancy_of_row(const Column columns[3], Py_ssize_t slot, const BatchRow *row,
                     double waiting, double prior_batch, double peer, double *sequences,
                     double *batch) {
    double inflight, running, at_reading;
    if (column_item(&columns[0], slot, &inflight) < 0 ||
        column_item(&columns[1], slot, &running) < 0 ||
        column_item(&columns[2], slot, &at_reading) < 0) {
        return -1;
    }
    double held = running + waiting + inflight - at_reading;
    int fresh = !Py_IS_NAN(held);
    *sequences = fresh ? py_max(held, 0.0) : inflight;
    double seen = row->seen, most = row->most, limit = row->limit, ceiling = row->ceiling;
    double full = Py_IS_NAN(most) || Py_IS_NAN(seen) ? seen : py_max(seen, most);
    if (!Py_IS_NAN(limit)) {
        *batch = py_max(Py_IS_NAN(full) ? limit : py_min(limit, full), 1.0);
        return 0;
    }
    if (!Py_IS_NAN(full)) {
        *batch = py_max(full, 1.0);
        return 0;
    }
    double floor = nan_max(most, row->floor);
    double guess = Py_IS_NAN(floor) ? prior_batch : py_max(BATCH_HEADROOM * floor, prior_batch);
    if (Py_IS_NAN(ceiling) && !(floor > peer)) { /* what it ran contradicts no peer */
        ceiling = peer;
    }
    if (!Py_IS_NAN(ceiling)) {
        ceiling = nan_max(ceiling, floor);
        guess = py_min(guess, ceiling);
    }
    if (fresh) {
        double took_all = waiting > 0 ? running : running + 1.0;
        guess = py_max(Py_IS_NAN(ceiling) ? took_all : py_min(took_all, ceiling), guess);
    }
    *batch = py_max(guess, 1.0);
    return 0;
}

double peer_batch_of_rows(const BatchRow *rows, Py_ssize_t count) {
    double total = 0.0;
    Py_ssize_t known_count = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        double known = nan_max(rows[i].seen, rows[i].ceiling);
        if (!Py_IS_NAN(known)) { /* a full reading (it wins), else a ceiling */
            known = Py_IS_NAN(rows[i].seen) ? known : rows[i].seen;
            total += nan_max(known, rows[i].most);
            known_count++;
        }
    }
    return known_count ? total / (double)known_count : Py_NAN;
}

double most_seen_of_rows(const BatchRow *rows, Py_ssize_t count) {
    double found = Py_NAN;
    for (Py_ssize_t i = 0; i < count; i++) {
        found = nan_max(found, nan_max(rows[i].most, rows[i].floor));
    }
    return found;
}

double unsure_of_row(const BatchRow *row, double peer, double pool) {
    double floor = nan_max(row->most, row->floor);
    double known = nan_max(nan_max(row->seen, row->limit), row->ceiling);
    if (!Py_IS_NAN(known) || (!Py_IS_NAN(peer) && !(floor > peer))) {
        return Py_NAN;
    }
    return nan_max(floor, pool);
}

int is_probe(double joined, double most, double limit) {
    return most >= MOST_SEEN_FOR_DOUBT && most < joined && joined <= most + 1.0 &&
           joined < limit;
}

/* -1 with an error set when interrupted (a loop the pure form also runs, interruptibly). */
int unseen_wait(double joined, double most, double batch, double service, double *out) {
    if (!(most >= MOST_SEEN_FOR_DOUBT) || joined <= most) {
        *out = 0.0;
        return 0;
    }
    double total = 0.0, size = batch - most + 1.0, candidate = most;
    for (int step = 0; step < MAX_DOUBT_STEPS; step++) {
        if (!(candidate < joined && candidate <= batch)) {
            break;
        }
        total += (joined - candidate) / candidate;
        candidate += 1.0;
    }
    *out = service * total / py_max(size, 1.0);
    return 0;
}

/* float.__pow__(value, 2): its special cases, then libm's pow; OverflowError as there. */
int py_square(double value, double *out) {
    if (Py_IS_NAN(value)) {
        *out = value;
        return 0;
    }
    if (Py_IS_INFINITY(value)) {
        *out = fabs(value);
        return 0;
    }
    if (value == 0.0) {
        *out = 0.0;
        return 0;
    }
    if (value < 0.0) {
        value = -value;
    }
    if (value == 1.0) {
        *out = 1.0;
        return 0;
    }
    errno = 0;
    double result = pow(value, SQUARE);
    if (errno == 0 && (result == HUGE_VAL || result == -HUGE_VAL)) { /* _Py_ADJUST_ERANGE1 */
        errno = ERANGE;
    } else if (errno == ERANGE && result == 0.0) {
        errno = 0;
    }
    if (errno != 0) {
        PyErr_SetFromErrno(errno == ERANGE ? PyExc_OverflowError : PyExc_ValueError);
        return -1;
    }
    *out = result;
    return 0;
}

/* `sum(values) / len(values)` by Python's own sum (its rounding differs by version). */
static int python_mean(const double *values, Py_ssize_t count, double *out) {
    PyObject *list = PyList_New(count);
    if (list == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyFloat_FromDouble(values[i]);
        if (item == NULL) {
            Py_DECREF(list);
            return -1;
        }
        PyList_SET_ITEM(list, i, item);
    }
    PyObject *sum = PyDict_GetItemString(PyEval_GetBuiltins(), "sum"); /* borrowed */
    PyObject *total = sum == NULL ? NULL : PyObject_CallOneArg(sum, list);
    Py_DECREF(list);
    if (total == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "no builtin sum");
        }
        return -1;
    }
    double value = PyFloat_AsDouble(total);
    Py_DECREF(total);
    if (value == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    *out = value / (double)count;
    return 0;
}

/* `_small_peers_or`: the slots' learned values (`learned` NULL: none learned), NaN ones
 * (and slots beyond the array) as the others' mean, or `prior` where none is learned. */
int peers_or(const Column *learned, const Py_ssize_t *slots, Py_ssize_t count, double prior,
             double *out) {
    if (learned == NULL) {
        for (Py_ssize_t i = 0; i < count; i++) {
            out[i] = prior;
        }
        return 0;
    }
    double total = 0.0; /* NaN exactly when Python's sum(values) is, whatever its version */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (slots[i] < learned->size) {
            if (column_item(learned, slots[i], &out[i]) < 0) {
                return -1;
            }
        } else {
            out[i] = Py_NAN;
        }
        total += out[i];
    }
    if (!Py_IS_NAN(total)) {
        return 0;
    }
    double *known = PyMem_Malloc(sizeof(double) * (size_t)(count ? count : 1));
    if (known == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t found = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!Py_IS_NAN(out[i])) {
            known[found++] = out[i];
        }
    }
    double fill = prior;
    if (found == count || (found && python_mean(known, found, &fill) < 0)) {
        PyMem_Free(known);
        return found == count ? 0 : -1;
    }
    PyMem_Free(known);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (Py_IS_NAN(out[i])) {
            out[i] = fill;
        }
    }
    return 0;
}
