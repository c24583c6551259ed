/* The TTFT scorer's small-candidate form in C: `terms` computes what
 * kinference.routing.scorers.ttft_small.small_terms and TtftScorer._score_small compute on
 * Python floats (their pure reference), the same values bit for bit (ttft.h), reading the
 * worker table's and the rates' numpy arrays through the buffer protocol rather than
 * building Python floats of them. The GIL is held throughout.
 *
 * Arguments it does not take (a buffer that is not a 1-D float64 vector, slots not of
 * intp, lists of other than floats) answer NotImplemented before anything is computed,
 * and the caller runs the pure form; errors the pure form raises are raised alike
 * (IndexError beyond an array, ZeroDivisionError for a memory batch of 0, what the
 * table's clock raises). `pending.waited_prefill` and `WorkerTable.prefill_done` are
 * spelled here too (the clock read as often, in the same order).
 */
#include "ttft.h"

#include "ttft_args.h"

#include <math.h>
#include <stdint.h>

/* Rows of `out`: predicted, wait, prefill, slot_wait, unsure, sequences, score, probe. */
enum { PREDICTED, WAIT, PREFILL, SLOT_WAIT, UNSURE, SEQUENCES, SCORE, PROBE, ROWS };

/* The table's `clock()`, a float or an int as `clock() - since` takes it. */
static int now(const Terms *t, double *out) {
    PyObject *value = PyObject_CallNoArgs(t->clock);
    if (value == NULL) {
        return -1;
    }
    if (!PyFloat_Check(value) && !PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "the clock answered %.100s, not a number",
                     Py_TYPE(value)->tp_name);
        Py_DECREF(value);
        return -1;
    }
    *out = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* `WorkerTable.prefill_done(slot, per_token)`. */
static int prefill_done(const Terms *t, Py_ssize_t slot, double per_token, double *out) {
    double since, seconds, ended, pending;
    if (column_item(&t->columns[PREFILL_SINCE], slot, &since) < 0) {
        return -1;
    }
    if (Py_IS_NAN(since) || per_token <= 0.0) {
        *out = 0.0;
        return 0;
    }
    if (now(t, &seconds) < 0) {
        return -1;
    }
    double computed = (seconds - since) * 1000.0 / per_token;
    if (column_item(&t->columns[PREFILL_ENDED], slot, &ended) < 0 ||
        column_item(&t->columns[PENDING], slot, &pending) < 0) {
        return -1;
    }
    *out = py_min(py_max(computed - ended, 0.0), pending);
    return 0;
}

/* `pending.waited_prefill(table, slot, *queued, per_token=)`. */
static int waited(const Terms *t, Py_ssize_t slot, double *queued, double per_token) {
    double done;
    if (prefill_done(t, slot, per_token, &done) < 0) {
        return -1;
    }
    *queued = py_max(*queued - done, 0.0);
    return 0;
}

/* One candidate's terms (the loop body of `small_terms`). */
static int candidate(const Terms *t, Py_ssize_t i, const BatchRow *row, double peer,
                     double pool, double limit, double *out, Py_ssize_t n) {
    Py_ssize_t slot = t->slots[i];
    double waiting, sequences, batch, queued;
    if (column_item(&t->waiting, slot, &waiting) < 0 ||
        occupancy_of_row(t->columns, slot, row, waiting, t->c.prior_batch, peer, &sequences,
                         &batch) < 0 ||
        column_item(&t->columns[PENDING], slot, &queued) < 0) {
        return -1;
    }
    double per_token = t->per_token[i], service = t->service[i];
    double ahead = py_max(sequences + 1.0 - batch, 0.0);
    if (queued > 0.0 && waited(t, slot, &queued, per_token) < 0) {
        return -1;
    }
    double for_slot = ahead * service / batch;
    if (t->memory != NULL) { /* a place to run: slot and memory */
        if (i >= t->memory_count || i >= t->fits_count) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            return -1;
        }
        double fits = t->fits[i];
        if (fits == 0.0) {
            PyErr_SetString(PyExc_ZeroDivisionError, "float division by zero");
            return -1;
        }
        for_slot = py_max(for_slot, t->memory[i] * service / fits);
    }
    double cached;
    if (column_item(&t->cached, i, &cached) < 0) {
        return -1;
    }
    double waited_ms = for_slot + queued * per_token;
    double own = py_max(t->prompt - cached, 0.0) * per_token;
    double square;
    if (py_square(py_min(sequences / batch, 1.0), &square) < 0) {
        return -1;
    }
    double pressure = t->c.full * square + t->busy * py_min(sequences, batch);
    out[PREDICTED * n + i] = waited_ms + t->base[i] + own + pressure;
    out[WAIT * n + i] = waited_ms;
    out[PREFILL * n + i] = own;
    out[SEQUENCES * n + i] = sequences;
    out[SLOT_WAIT * n + i] = for_slot;
    double joined = sequences + 1.0, most = Py_NAN, unsure = 0.0;
    if (ahead == 0.0) {
        most = unsure_of_row(row, peer, pool);
    }
    int probe = is_probe(joined, most, limit);
    if (most >= MOST_SEEN_FOR_DOUBT && !(joined <= most) &&
        unseen_wait(joined, most, batch, service, &unsure) < 0) {
        return -1;
    }
    out[UNSURE * n + i] = unsure;
    out[PROBE * n + i] = probe ? 1.0 : 0.0;
    return 0;
}

/* `_score_small`'s `best / cost` per candidate, from the terms. */
static int score(const Terms *t, double *out, Py_ssize_t n) {
    double most = Py_NAN;
    int spread = 0; /* the shares follow the footprint */
    if (t->footprint != NULL && t->c.space > 0.0) {
        if (t->footprint_count == 0) {
            PyErr_SetString(PyExc_ValueError, "max() arg is an empty sequence");
            return -1;
        }
        most = t->footprint[0];
        for (Py_ssize_t i = 1; i < t->footprint_count; i++) {
            most = py_max(most, t->footprint[i]);
        }
        spread = most > 0.0;
    }
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "min() arg is an empty sequence");
        return -1;
    }
    if (spread && t->footprint_count != n) {
        PyErr_SetString(PyExc_ValueError, "zip() arguments differ in length");
        return -1;
    }
    double *costs = out + SCORE * n, best = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double share = spread ? t->c.weight + t->c.space * t->footprint[i] / most : t->c.weight;
        double service = t->service[i], own = out[PREFILL * n + i];
        double rate = service > 0.0 ? out[SEQUENCES * n + i] / service : 0.0;
        double cost = out[PREDICTED * n + i] + share * own + t->c.queued * out[SLOT_WAIT * n + i] +
                      t->c.doubt * out[UNSURE * n + i] + t->c.block * rate * own * own / 2.0;
        costs[i] = py_max(cost, 1.0);
        best = i == 0 ? costs[i] : py_min(best, costs[i]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        costs[i] = best / costs[i];
    }
    return 0;
}

/* `doubt.needed_probes` on the rows of `out`. */
static void needed_probes(double *out, Py_ssize_t n) {
    double safest = Py_HUGE_VAL;
    int any = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (out[PROBE * n + i] != 0.0) {
            any = 1;
        } else if (out[SLOT_WAIT * n + i] == 0.0 && out[UNSURE * n + i] == 0.0) {
            safest = py_min(safest, out[PREFILL * n + i]);
        }
    }
    for (Py_ssize_t i = 0; any && i < n; i++) {
        if (out[PROBE * n + i] == 0.0) {
            continue;
        }
        if (out[PREFILL * n + i] + PROBE_SAVING_MS <= safest) {
            out[UNSURE * n + i] = 0.0;
        } else {
            out[PROBE * n + i] = 0.0;
        }
    }
}

/* `batch_rows` of `count` slots into `rows`. */
static int batch_rows(const Terms *t, const Py_ssize_t *slots, Py_ssize_t count,
                      BatchRow *rows) {
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t slot = slots[i];
        BatchRow *row = &rows[i];
        if (column_item(&t->columns[BATCH], slot, &row->seen) < 0 ||
            column_item(&t->columns[RUNNING_MAX], slot, &row->most) < 0 ||
            column_item(&t->columns[BATCH_LIMIT], slot, &row->limit) < 0 ||
            column_item(&t->columns[BATCH_FLOOR], slot, &row->floor) < 0 ||
            column_item(&t->columns[BATCH_CEILING], slot, &row->ceiling) < 0) {
            return -1;
        }
    }
    return 0;
}

/* `doubt.probe_limit` of the pool's ready slots (the candidates where none given). */
static int probe_limit(const Terms *t, double *out) {
    const Py_ssize_t *slots = t->pool != NULL ? t->pool : t->slots;
    Py_ssize_t count = t->pool != NULL ? t->pool_count : t->count;
    double limit = Py_HUGE_VAL, probing, late;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (column_item(&t->columns[PROBING], slots[i], &probing) < 0) {
            return -1;
        }
        if (probing > 0.0) {
            *out = 0.0;
            return 0;
        }
        if (column_item(&t->columns[PROBE_LATE], slots[i], &late) < 0) {
            return -1;
        }
        limit = late < limit ? late : limit;
    }
    *out = limit;
    return 0;
}

static int compute(Terms *t, double *out, int scoring) {
    Py_ssize_t n = t->count;
    if (peers_or(t->rates[0], t->slots, n, t->c.per_token, t->per_token) < 0 ||
        peers_or(t->rates[1], t->slots, n, t->c.base, t->base) < 0 ||
        peers_or(t->rates[2], t->slots, n, t->c.service, t->service) < 0) {
        return -1;
    }
    /* `batch_rows`: read once, before any candidate; then the pool's, its evidence */
    if (batch_rows(t, t->slots, n, t->rows) < 0 ||
        (t->pool != NULL && batch_rows(t, t->pool, t->pool_count, t->pool_rows) < 0)) {
        return -1;
    }
    Py_ssize_t known = t->pool != NULL ? t->pool_count : n;
    double pool = most_seen_of_rows(t->pool_rows, known);
    double peer = peer_batch_of_rows(t->pool_rows, known);
    double limit;
    if (probe_limit(t, &limit) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (candidate(t, i, &t->rows[i], peer, pool, limit, out, n) < 0) {
            return -1;
        }
    }
    needed_probes(out, n);
    return scoring ? score(t, out, n) : 0;
}

PyDoc_STRVAR(terms_doc, "See _ttft.pyi.");

static PyObject *terms(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Terms t;
    int taken = terms_open(&t, PyModule_GetState(module), args, nargs, ROWS);
    if (taken <= 0) {
        terms_close(&t);
        return taken < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    }
    int failed = compute(&t, t.out, t.scoring);
    terms_close(&t);
    return failed ? NULL : Py_NewRef(Py_None);
}

/* `MaxScorePicker.pick`'s constants (kinference.routing.plugins.pick). */
#define TIE 1e-9
#define HOME_TOLERANCE 0.1
#define CHOOSE_ARGS 25

/* `pick._mix`: splitmix64's finaliser. */
static uint64_t mix(uint64_t value) {
    value = (value ^ (value >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    value = (value ^ (value >> 27)) * UINT64_C(0x94D049BB133111EB);
    return value ^ (value >> 31);
}

/* `Pipeline._weighted_small` of the scores alone (row SCORE becomes the weighted totals),
 * then `MaxScorePicker.pick` on them: the index, or -1 where the pick is left to Python
 * (equal bests drawn at random; a cold prefix's near bests without its key or the ids). */
static Py_ssize_t pick(const Terms *t, double *out, double weight, int has_home, int home_ok,
                       uint64_t home, const uint64_t *ids, Py_ssize_t id_count) {
    Py_ssize_t n = t->count;
    double *totals = out + SCORE * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        double score = totals[i];
        totals[i] = weight * (Py_IS_NAN(score) ? 0.5 : py_min(py_max(score, 0.0), 1.0));
    }
    if (n == 1) {
        return 0;
    }
    double best = totals[0];
    for (Py_ssize_t i = 1; i < n; i++) {
        if (totals[i] > best) {
            best = totals[i];
        }
    }
    if (has_home) { /* `any(cached)`: a NaN is true, as a float's truth */
        for (Py_ssize_t i = 0; i < t->cached.size; i++) {
            if (*(const double *)(t->cached.data + i * t->cached.stride) != 0.0) {
                has_home = 0;
                break;
            }
        }
    }
    double floor = has_home ? best - py_max(fabs(best) * HOME_TOLERANCE, TIE) : best - TIE;
    Py_ssize_t first = -1, near = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (totals[i] >= floor) {
            first = near++ ? first : i;
        }
    }
    if (near == 1) {
        return first;
    }
    if (!has_home || !home_ok || ids == NULL) {
        return -1;
    }
    Py_ssize_t chosen = -1;
    uint64_t top = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t slot = t->slots[i];
        if (!(totals[i] >= floor)) {
            continue;
        }
        if (slot < 0 || slot >= id_count) {
            return -1;
        }
        uint64_t rank = mix(home ^ ids[slot]);
        if (chosen < 0 || rank > top) {
            chosen = i, top = rank;
        }
    }
    return chosen;
}

/* The saturation filter's check of the candidates (`SaturationFilter.levels_with_hits_of`,
 * any level above FREE): queues and KV-cache use per slot, the thresholds, and the cached
 * tokens from which a candidate's KV use is the request's own (`OWN_HIT_SHARE` of the
 * prompt). `on` 0: no check (queue None). */
typedef struct {
    int on, held;
    Py_buffer views[2];
    Column queue, kv;
    double depth, full, own;
} Guard;

static int guard_column(Guard *g, PyObject *object, Column *out) {
    int taken = hold_vector(object, &g->views[g->held], "d", PyBUF_SIMPLE);
    if (taken > 0) {
        g->held++; /* released by guard_close, taken or not */
    }
    if (taken == 1) {
        Py_buffer *view = &g->views[g->held - 1];
        out->data = view->buf, out->size = view->shape[0], out->stride = view->strides[0];
    }
    return taken == 2 ? 0 : taken;
}

/* args: queue, kv_usage (float64 per slot; queue None: no check), depth, full, own. */
static int guard_open(Guard *g, PyObject *const *args) {
    if (args[0] == Py_None) {
        return 1;
    }
    for (int i = 2; i < 5; i++) {
        if (!PyFloat_CheckExact(args[i])) {
            return 0;
        }
    }
    g->depth = PyFloat_AS_DOUBLE(args[2]), g->full = PyFloat_AS_DOUBLE(args[3]);
    g->own = PyFloat_AS_DOUBLE(args[4]);
    int taken = guard_column(g, args[0], &g->queue);
    if (taken > 0) {
        taken = guard_column(g, args[1], &g->kv);
    }
    g->on = taken > 0;
    return taken;
}

static void guard_close(Guard *g) {
    for (int i = 0; i < g->held; i++) {
        PyBuffer_Release(&g->views[i]);
    }
    g->held = 0;
}

/* 1 where a candidate is saturated, 0 none, -1 an error (an index out of range). */
static int any_saturated(const Terms *t, const Guard *g) {
    for (Py_ssize_t i = 0; i < t->count; i++) {
        Py_ssize_t slot = t->slots[i];
        double waiting, used, hit;
        if (column_item(&g->queue, slot, &waiting) < 0 || column_item(&t->cached, i, &hit) < 0) {
            return -1;
        }
        if (hit >= g->own) {
            used = Py_NAN;
        } else if (column_item(&g->kv, slot, &used) < 0) {
            return -1;
        }
        if (waiting >= g->depth || used >= g->full) {
            return 1;
        }
    }
    return 0;
}

PyDoc_STRVAR(choose_doc, "See _ttft.pyi.");

static PyObject *choose(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != CHOOSE_ARGS) {
        PyErr_Format(PyExc_TypeError, "choose() takes %d arguments (%zd given)", CHOOSE_ARGS,
                     nargs);
        return NULL;
    }
    if (!PyFloat_CheckExact(args[17]) || (args[18] != Py_None && !PyLong_CheckExact(args[18]))) {
        return Py_NewRef(Py_NotImplemented);
    }
    double weight = PyFloat_AS_DOUBLE(args[17]);
    int has_home = args[18] != Py_None, home_ok = 0;
    uint64_t home = 0;
    if (has_home) {
        home = PyLong_AsUnsignedLongLong(args[18]);
        if (home == (uint64_t)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                return NULL;
            }
            PyErr_Clear(); /* negative or past 64 bits: Python ranks the near bests */
        } else {
            home_ok = 1;
        }
    }
    Py_buffer ids;
    int have_ids = 0;
    if (args[19] != Py_None) { /* the candidates' endpoint ids, per slot (uint64) */
        have_ids = hold_vector(args[19], &ids, "LQ", PyBUF_C_CONTIGUOUS);
        if (have_ids < 0) {
            return NULL;
        }
        if (have_ids == 2) { /* not such a vector: Python ranks the near bests */
            PyBuffer_Release(&ids);
            have_ids = 0;
        }
    }
    Terms t;
    int taken = terms_open(&t, PyModule_GetState(module), args, 17, ROWS);
    if (taken > 0 && !t.scoring) {
        taken = 0; /* the choice needs the scores */
    }
    Guard guard = {0};
    if (taken > 0) {
        taken = guard_open(&guard, args + 20);
    }
    PyObject *answer = NULL;
    int saturated = 0;
    if (taken > 0 && guard.on && (saturated = any_saturated(&t, &guard)) < 0) {
        taken = -1;
    }
    if (taken < 0) {
        answer = NULL;
    } else if (taken == 0) {
        answer = Py_NewRef(Py_NotImplemented);
    } else if (saturated) {
        answer = PyLong_FromLong(-2);
    } else if (compute(&t, t.out, 1) == 0) {
        Py_ssize_t index = pick(&t, t.out, weight, has_home, home_ok, home,
                                have_ids ? (const uint64_t *)ids.buf : NULL,
                                have_ids ? ids.shape[0] : 0);
        answer = PyLong_FromSsize_t(index);
    }
    terms_close(&t);
    guard_close(&guard);
    if (have_ids) {
        PyBuffer_Release(&ids);
    }
    return answer;
}

static PyMethodDef methods[] = {
    {"terms", (PyCFunction)(void (*)(void))terms, METH_FASTCALL, terms_doc},
    {"choose", (PyCFunction)(void (*)(void))choose, METH_FASTCALL, choose_doc},
    {"signals", (PyCFunction)(void (*)(void))ttft_signals, METH_FASTCALL, terms_doc},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) { return names_open(PyModule_GetState(module)); }

static int traverse(PyObject *module, visitproc visit, void *arg) {
    Names *names = PyModule_GetState(module);
    for (int i = 0; i < COLUMNS; i++) {
        Py_VISIT(names->columns[i]);
    }
    return 0;
}

static int clear(PyObject *module) {
    Names *names = PyModule_GetState(module);
    for (int i = 0; i < COLUMNS; i++) {
        Py_CLEAR(names->columns[i]);
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kinference.native._ttft",
    .m_doc = "The TTFT scorer's small-candidate form in C (routing.scorers.ttft_small).",
    .m_size = sizeof(Names),
    .m_methods = methods,
    .m_slots = slots,
    .m_traverse = traverse,
    .m_clear = clear,
};

PyMODINIT_FUNC PyInit__ttft(void) { return PyModuleDef_Init(&module_def); }
