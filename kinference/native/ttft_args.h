/* `_ttft.terms`'s arguments as C sees them (ttft_args.c takes them apart). */
#ifndef KINFERENCE_TTFT_ARGS_H
#define KINFERENCE_TTFT_ARGS_H

#include "ttft.h"

/* The worker table's arrays `terms` reads, in this order (`occupancy_of_row` takes the
 * first three). */
enum {
    INFLIGHT, RUNNING, AT_READING, PENDING, BATCH, RUNNING_MAX, BATCH_LIMIT, BATCH_FLOOR,
    BATCH_CEILING, PREFILL_SINCE, PREFILL_ENDED, PROBING, PROBE_LATE, COLUMNS
};

/* The module's state: the names it looks up, made once. */
typedef struct {
    PyObject *columns[COLUMNS];  /* the table's attribute names, as in the enum */
} Names;

/* The scorer's settings: its priors and weights (`TtftScorer`, `constants`). */
typedef struct {
    double per_token, base, service, prior_batch, full, weight, space, queued, doubt, block;
} Constants;

/* 1 out + 1 slots + cached + waiting + the table's + 3 rates + the pool's slots. */
#define VIEWS (4 + COLUMNS + 3 + 1)

typedef struct {
    Py_buffer views[VIEWS];
    int held;                 /* views acquired so far */
    double *out;
    const Py_ssize_t *slots;  /* intp */
    Py_ssize_t count;
    const Py_ssize_t *pool;   /* intp, the pool's ready slots; NULL: None (`slots`) */
    Py_ssize_t pool_count;
    Column cached, waiting, columns[COLUMNS];
    Column rate_columns[3];
    const Column *rates[3];   /* per_token, base, service; NULL: nothing learned */
    Constants c;
    double busy, prompt;
    double *memory, *fits, *footprint;  /* NULL: None (memory: either of the two) */
    Py_ssize_t memory_count, fits_count, footprint_count;
    PyObject *table, *clock;  /* borrowed */
    int scoring;
    double *per_token, *base, *service;  /* per candidate, `peers_or` */
    BatchRow *rows, *pool_rows;  /* pool_rows: `rows` where `pool` is NULL */
    double *scratch;  /* one allocation: the above and the lists' copies */
} Terms;

int names_open(Names *names);
/* A 1-D buffer of 8-byte items of the struct codes `codes` (`flags` added to the request;
 * PyBUF_WRITABLE takes any shape): 1 held and such, 2 held but not such (release it), 0
 * not a buffer (nothing held), -1 an error. */
int hold_vector(PyObject *object, Py_buffer *view, const char *codes, int flags);
/* 1: taken; 0: not taken (NotImplemented, nothing computed); -1: an error is set. */
int terms_open(Terms *t, const Names *names, PyObject *const *args, Py_ssize_t nargs,
               Py_ssize_t rows);
void terms_close(Terms *t);

#endif
