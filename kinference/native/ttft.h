/* The TTFT scorer's small-candidate form in C (`_ttft`): what its units share.
 *
 * Every value is the one the pure form (kinference.routing.scorers.ttft_small) computes:
 * the same IEEE double operations in the same order (setup.py compiles with
 * -ffp-contract=off, so no fused multiply-add rounds differently), Python's `max(a, b)`
 * and `min(a, b)` as `py_max`/`py_min` (the first unless the second compares larger or
 * smaller: NaN and -0.0 behave as there), `readings._fmax` as `nan_max`, and `x ** 2`
 * through libm's pow with float.__pow__'s special cases and errors (`py_square`).
 */
#ifndef KINFERENCE_TTFT_H
#define KINFERENCE_TTFT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* `readings.BATCH_HEADROOM`, `doubt.MOST_SEEN_FOR_DOUBT`, `doubt.MAX_DOUBT_STEPS`,
 * `doubt.PROBE_SAVING_MS` (a change there shows in the parity tests,
 * tests/native/test_ttft.py). */
#define BATCH_HEADROOM 2.0
#define MOST_SEEN_FOR_DOUBT 2.0
#define MAX_DOUBT_STEPS 4096
#define PROBE_SAVING_MS 20.0

/* A read-only float64 vector: a 1-D buffer, any stride. */
typedef struct {
    const char *data;
    Py_ssize_t size;
    Py_ssize_t stride;
} Column;

/* A slot's batch, running_max, batch_limit, batch_floor, batch_ceiling (`BatchRow`). */
typedef struct {
    double seen, most, limit, floor, ceiling;
} BatchRow;

static inline double py_max(double a, double b) { return b > a ? b : a; }
static inline double py_min(double a, double b) { return b < a ? b : a; }

static inline double nan_max(double a, double b) {
    if (Py_IS_NAN(a)) {
        return b;
    }
    return Py_IS_NAN(b) || a >= b ? a : b;
}

/* `array.item(slot)`: numpy's indexing (a negative slot counts from the end), IndexError
 * beyond; -1 with the error set. */
static inline int column_item(const Column *column, Py_ssize_t slot, double *out) {
    Py_ssize_t at = slot < 0 ? slot + column->size : slot;
    if (at < 0 || at >= column->size) {
        PyErr_Format(PyExc_IndexError, "index %zd is out of bounds for axis 0 with size %zd",
                     slot, column->size);
        return -1;
    }
    *out = *(const double *)(column->data + at * column->stride);
    return 0;
}

/* ttft_rows.c: the readings' small forms (kinference.routing.readings). */
int occupancy_of_row(const Column columns[3], Py_ssize_t slot, const BatchRow *row,
                     double waiting, double prior_batch, double peer, double *sequences,
                     double *batch);
double peer_batch_of_rows(const BatchRow *rows, Py_ssize_t count);
double most_seen_of_rows(const BatchRow *rows, Py_ssize_t count);
double unsure_of_row(const BatchRow *row, double peer, double pool);
int is_probe(double joined, double most, double limit);
int unseen_wait(double joined, double most, double batch, double service, double *out);
int py_square(double value, double *out);
int peers_or(const Column *learned, const Py_ssize_t *slots, Py_ssize_t count, double prior,
             double *out);

/* ttft_signals.c: `_ttft.signals` (the readings' per-slot signals at one Pick). */
PyObject *ttft_signals(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
