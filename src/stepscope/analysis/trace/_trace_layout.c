/* The trace viewer's row layout, per track, in one pass over the events in start order.
 *
 * The compiled twin of trace_index._overlapping_rows (the same rows, by the same rule): each
 * event goes to the lowest row that is free when it starts and lies below every running event
 * that contains it, so nested events get their nesting depth and overlapping ones the lowest
 * free row. While a track's events nest, that row is how many events run around each: a stack
 * of their ends gives it in O(1). From a track's first event that does not nest, per row the
 * end of its last event is kept in two segment trees over the rows (one of minima, one of
 * maxima), set to the rows running then; O(n log rows). The GIL is released while it runs.
 *
 * And the order it starts from, by (track, start): the compiled twin of the sort in
 * trace_index.sorted_by_track_and_start. An XLine's events come from the file (nearly) in time
 * order and a track is one line or a few, so the composite keys in table order are a few
 * ascending runs: they are found in one pass and merged (a heap of runs, each run's stretch
 * below every other run's next key copied at once), O(n log runs) instead of a general sort.
 *
 * And the producer → consumer flows of trace_index._flows: each consumer to the first producer
 * of its type and id, by a hash join (O(n)) instead of a sort and a search per type.
 *
 * And a window query's pass over the per-track table (track_table.TrackTable._window_cells):
 * per track, its events in the window counted per (row, pixel column), the wide ones listed,
 * with no temporary as long as the events in view.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    Py_ssize_t n;
} Column;

/* A contiguous column of `size`-byte items. */
static int
get_sized(PyObject *obj, Column *col, Py_ssize_t size, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &col->view, flags) < 0) {
        return -1;
    }
    if (col->view.itemsize != size) {
        PyErr_Format(PyExc_TypeError, "%s must hold %zd-byte items", what, size);
        PyBuffer_Release(&col->view);
        col->view.obj = NULL;
        return -1;
    }
    col->n = col->view.len / size;
    return 0;
}

/* A contiguous column of int64 (writable when asked). */
static int
get_column(PyObject *obj, Column *col, int writable, const char *what)
{
    return get_sized(obj, col, 8, writable, what);
}

typedef struct {
    int64_t *lo;  /* minimum over a node's rows of when they free up (-1: unused) */
    int64_t *hi;  /* maximum of the same */
    Py_ssize_t cap;
} Trees;

static void
trees_reset(Trees *t, Py_ssize_t cap)
{
    t->cap = cap;
    for (Py_ssize_t i = 0; i < 2 * cap; i++) {
        t->lo[i] = -1;
        t->hi[i] = -1;
    }
}

/* Twice as many rows, the new ones unused; 0 when out of memory. */
static int
trees_grow(Trees *t)
{
    Py_ssize_t cap = t->cap, ncap = 2 * cap;
    int64_t *lo = malloc(sizeof(int64_t) * 2 * ncap);
    int64_t *hi = malloc(sizeof(int64_t) * 2 * ncap);
    if (!lo || !hi) {
        free(lo);
        free(hi);
        return 0;
    }
    for (Py_ssize_t i = 0; i < ncap; i++) {
        lo[ncap + i] = i < cap ? t->lo[cap + i] : -1;
        hi[ncap + i] = i < cap ? t->hi[cap + i] : -1;
    }
    for (Py_ssize_t j = ncap - 1; j > 0; j--) {
        int64_t a = lo[2 * j], b = lo[2 * j + 1];
        lo[j] = a < b ? a : b;
        a = hi[2 * j];
        b = hi[2 * j + 1];
        hi[j] = a > b ? a : b;
    }
    free(t->lo);
    free(t->hi);
    t->lo = lo;
    t->hi = hi;
    t->cap = ncap;
    return 1;
}

/* The lowest row >= k free at time s (its last event ended by then), or -1. */
static Py_ssize_t
first_free(const int64_t *tree, Py_ssize_t cap, Py_ssize_t k, int64_t s)
{
    if (k >= cap) {
        return -1;
    }
    Py_ssize_t i = k + cap;
    if (tree[i] <= s) {
        return k;
    }
    for (;;) {  /* up: to the first right sibling holding a free row */
        if (i <= 1) {
            return -1;
        }
        if (!(i & 1) && tree[i + 1] <= s) {
            i += 1;
            break;
        }
        i >>= 1;
    }
    while (i < cap) {  /* down: the lowest free row of that span */
        i = tree[2 * i] <= s ? 2 * i : 2 * i + 1;
    }
    return i - cap;
}

/* The row of one event (starting at s, ending at e as laid out) of a track whose earlier
 * events (in start order) are in the trees; it is entered there. -1 when out of memory. */
static Py_ssize_t
place(Trees *t, int64_t s, int64_t e)
{
    Py_ssize_t k, r, cap = t->cap;
    if (t->hi[1] < e) {
        k = 0;  /* nothing running contains this event */
    } else {
        Py_ssize_t j = 1;
        while (j < cap) {
            j = t->hi[2 * j + 1] >= e ? 2 * j + 1 : 2 * j;
        }
        k = j - cap + 1;  /* just below its lowest container */
    }
    for (;;) {
        cap = t->cap;
        r = (k < cap && t->lo[k + cap] <= s) ? k : first_free(t->lo, cap, k, s);
        if (r >= 0) {
            break;
        }
        if (!trees_grow(t)) {
            return -1;
        }
    }
    Py_ssize_t j = r + cap;
    t->lo[j] = t->hi[j] = e;
    for (j >>= 1; j; j >>= 1) {
        int64_t x = t->lo[2 * j], y = t->lo[2 * j + 1];
        t->lo[j] = x < y ? x : y;
        x = t->hi[2 * j];
        y = t->hi[2 * j + 1];
        t->hi[j] = x > y ? x : y;
    }
    return r;
}

/* The ends of a track's running events, outermost first (a stack while events nest). */
typedef struct {
    int64_t *end;
    Py_ssize_t n, cap;
} Ends;

/* 0 when out of memory. */
static int
ends_push(Ends *st, int64_t e)
{
    if (st->n == st->cap) {
        Py_ssize_t cap = st->cap ? 2 * st->cap : 64;
        int64_t *end = realloc(st->end, sizeof(int64_t) * (size_t)cap);
        if (!end) {
            return 0;
        }
        st->end = end;
        st->cap = cap;
    }
    st->end[st->n++] = e;
    return 1;
}

/* The trees as the stack's events leave them: row i running until end[i], the rest free
 * (an ended row's last end is at most any later start: free then as now). 0 when out of
 * memory. */
static int
trees_from_ends(Trees *t, const Ends *st)
{
    trees_reset(t, 64);
    while (t->cap < st->n) {
        if (!trees_grow(t)) {
            return 0;
        }
    }
    Py_ssize_t cap = t->cap;
    for (Py_ssize_t i = 0; i < st->n; i++) {
        t->lo[cap + i] = t->hi[cap + i] = st->end[i];
    }
    for (Py_ssize_t j = cap - 1; j > 0; j--) {
        int64_t a = t->lo[2 * j], b = t->lo[2 * j + 1];
        t->lo[j] = a < b ? a : b;
        a = t->hi[2 * j];
        b = t->hi[2 * j + 1];
        t->hi[j] = a > b ? a : b;
    }
    return 1;
}

/* The row of a track's next event (in start order; stack->n = 0 and *nested = 1 before its
 * first): while the track's events nest (each inside the one running before it, once the
 * ended ones are off the stack), how many run around it: the trees' rule (the lowest row free
 * below none of its containers) in O(1); from the first that does not, by the trees, set to
 * the rows running then. -1 when out of memory. */
static Py_ssize_t
next_row(Trees *t, Ends *stack, int *nested, int64_t s, int64_t e)
{
    if (*nested) {
        while (stack->n && stack->end[stack->n - 1] <= s) {
            stack->n--;
        }
        if (!stack->n || stack->end[stack->n - 1] >= e) {
            return ends_push(stack, e) ? stack->n - 1 : -1;
        }
        *nested = 0;
        if (!trees_from_ends(t, stack)) {
            return -1;
        }
    }
    return place(t, s, e);
}

/* Rows of the events [a, b) of one track, given in start order. 0 when out of memory. */
static int
track_rows(const int64_t *start, const int64_t *end, Py_ssize_t a, Py_ssize_t b, Trees *t,
           Ends *stack, int64_t *out)
{
    int nested = 1;
    stack->n = 0;
    for (Py_ssize_t i = a; i < b; i++) {
        Py_ssize_t r = next_row(t, stack, &nested, start[i], end[i]);
        if (r < 0) {
            return 0;
        }
        out[i] = r;
    }
    return 1;
}

static PyObject *
rows(PyObject *self, PyObject *args)
{
    PyObject *start_o, *end_o, *off_o, *out_o;
    if (!PyArg_ParseTuple(args, "OOOO", &start_o, &end_o, &off_o, &out_o)) {
        return NULL;
    }
    Column start = {0}, end = {0}, off = {0}, out = {0};
    PyObject *result = NULL;
    if (get_column(start_o, &start, 0, "start") < 0 || get_column(end_o, &end, 0, "end") < 0
        || get_column(off_o, &off, 0, "offsets") < 0 || get_column(out_o, &out, 1, "out") < 0) {
        goto done;
    }
    Py_ssize_t n = start.n, tracks = off.n - 1;
    const int64_t *s = start.view.buf, *e = end.view.buf, *o = off.view.buf;
    if (end.n != n || out.n != n || tracks < 0) {
        PyErr_SetString(PyExc_ValueError, "start, end and out must be as long, with offsets");
        goto done;
    }
    for (Py_ssize_t t = 0; t < tracks; t++) {
        if (o[t] < 0 || o[t] > o[t + 1] || o[t + 1] > n) {
            PyErr_SetString(PyExc_ValueError, "offsets must rise within the events");
            goto done;
        }
    }
    Trees trees = {malloc(sizeof(int64_t) * 128), malloc(sizeof(int64_t) * 128), 64};
    Ends stack = {NULL, 0, 0};
    int ok = trees.lo && trees.hi;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; ok && t < tracks; t++) {
        ok = track_rows(s, e, (Py_ssize_t)o[t], (Py_ssize_t)o[t + 1], &trees, &stack,
                        out.view.buf);
    }
    Py_END_ALLOW_THREADS
    free(trees.lo);
    free(trees.hi);
    free(stack.end);
    if (!ok) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    if (start.view.obj) PyBuffer_Release(&start.view);
    if (end.view.obj) PyBuffer_Release(&end.view);
    if (off.view.obj) PyBuffer_Release(&off.view);
    if (out.view.obj) PyBuffer_Release(&out.view);
    return result;
}


/* The order's rows are int64 (wide) or int32. */
static inline int64_t
order_at(const void *order, int wide, Py_ssize_t i)
{
    return wide ? ((const int64_t *)order)[i] : ((const int32_t *)order)[i];
}

static inline void
order_put(void *order, int wide, Py_ssize_t i, int64_t row)
{
    if (wide) {
        ((int64_t *)order)[i] = row;
    } else {
        ((int32_t *)order)[i] = (int32_t)row;
    }
}

/* A column of table rows (an order): int64, or int32 where the rows fit. */
static int
get_order(PyObject *obj, Column *col)
{
    if (PyObject_GetBuffer(obj, &col->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE)
        < 0) {
        return -1;
    }
    if (col->view.itemsize != 8 && col->view.itemsize != 4) {
        PyErr_SetString(PyExc_TypeError, "order must hold 4- or 8-byte items");
        PyBuffer_Release(&col->view);
        col->view.obj = NULL;
        return -1;
    }
    col->n = col->view.len / col->view.itemsize;
    return 0;
}

/* Each event's row and, per block of events, the latest end, for events given by (track,
 * start) as composite keys (track << bits | start) with their table rows: the durations are
 * read through the rows, the starts from the keys, so that no start or end column as long as
 * the events is made (each costs its memory's first touch). */
static PyObject *
table_rows(PyObject *self, PyObject *args)
{
    PyObject *key_o, *dur_o, *row_o, *off_o, *depth_o, *bend_o;
    int bits;
    Py_ssize_t block;
    if (!PyArg_ParseTuple(args, "OiOOOOOn", &key_o, &bits, &dur_o, &row_o, &off_o, &depth_o,
                          &bend_o, &block)) {
        return NULL;
    }
    Column key = {0}, dur = {0}, row = {0}, off = {0}, depth = {0}, bend = {0};
    PyObject *result = NULL;
    if (get_column(key_o, &key, 0, "key") < 0 || get_column(dur_o, &dur, 0, "dur") < 0
        || get_order(row_o, &row) < 0 || get_column(off_o, &off, 0, "offsets") < 0
        || get_sized(depth_o, &depth, 4, 1, "depth") < 0
        || get_column(bend_o, &bend, 1, "block_end") < 0) {
        goto done;
    }
    Py_ssize_t n = key.n, tracks = off.n - 1;
    if (bits < 1 || bits > 62 || block < 1 || row.n != n || depth.n != n || tracks < 0
        || bend.n != (n + block - 1) / block || n >= ((Py_ssize_t)1 << 31)) {
        PyErr_SetString(PyExc_ValueError, "table_rows: columns of mismatched lengths");
        goto done;
    }
    const int64_t *k = key.view.buf, *d = dur.view.buf, *o = off.view.buf;
    const void *rw = row.view.buf;
    int wide = row.view.itemsize == 8;
    for (Py_ssize_t t = 0; t < tracks; t++) {
        if (o[t] < 0 || o[t] > o[t + 1] || o[t + 1] > n) {
            PyErr_SetString(PyExc_ValueError, "offsets must rise within the events");
            goto done;
        }
    }
    int32_t *out = depth.view.buf;
    int64_t *be = bend.view.buf, mask = ((int64_t)1 << bits) - 1;
    Py_ssize_t m = dur.n;
    int status = 0;  /* 1: out of memory, 2: a row outside the durations */
    Trees trees = {malloc(sizeof(int64_t) * 128), malloc(sizeof(int64_t) * 128), 64};
    Ends stack = {NULL, 0, 0};
    if (!trees.lo || !trees.hi) {
        status = 1;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < bend.n; b++) {
        be[b] = INT64_MIN;
    }
    for (Py_ssize_t t = 0; !status && t < tracks; t++) {
        int nested = 1;
        stack.n = 0;
        for (Py_ssize_t i = o[t]; i < o[t + 1]; i++) {
            int64_t r = order_at(rw, wide, i);
            if (r < 0 || r >= m) {
                status = 2;
                break;
            }
            int64_t s = k[i] & mask, len = d[r] > 1 ? d[r] : 1, e = s + len;
            Py_ssize_t at = next_row(&trees, &stack, &nested, s, e);
            if (at < 0) {
                status = 1;
                break;
            }
            out[i] = (int32_t)at;
            if (e > be[i / block]) {
                be[i / block] = e;
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(trees.lo);
    free(trees.hi);
    free(stack.end);
    if (status == 1) {
        PyErr_NoMemory();
    } else if (status == 2) {
        PyErr_SetString(PyExc_ValueError, "table_rows: a row outside the durations");
    } else {
        result = Py_NewRef(Py_None);
    }
done:
    if (key.view.obj) PyBuffer_Release(&key.view);
    if (dur.view.obj) PyBuffer_Release(&dur.view);
    if (row.view.obj) PyBuffer_Release(&row.view);
    if (off.view.obj) PyBuffer_Release(&off.view);
    if (depth.view.obj) PyBuffer_Release(&depth.view);
    if (bend.view.obj) PyBuffer_Release(&bend.view);
    return result;
}

/* Per line its events, and the latest end (start + max(duration, 1)) of them all: the
 * track plan's pass over every event where each is drawn, in one go. */
static PyObject *
line_counts(PyObject *self, PyObject *args)
{
    PyObject *line_o, *start_o, *dur_o, *count_o;
    if (!PyArg_ParseTuple(args, "OOOO", &line_o, &start_o, &dur_o, &count_o)) {
        return NULL;
    }
    Column line = {0}, start = {0}, dur = {0}, count = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(line_o, &line.view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return NULL;
    }
    int size = (int)line.view.itemsize;
    if (size != 2 && size != 4) {
        PyErr_SetString(PyExc_TypeError, "line must hold 2- or 4-byte items");
        goto done;
    }
    line.n = line.view.len / size;
    if (get_column(start_o, &start, 0, "start") < 0 || get_column(dur_o, &dur, 0, "dur") < 0
        || get_column(count_o, &count, 1, "count") < 0) {
        goto done;
    }
    Py_ssize_t n = line.n, lines = count.n;
    if (start.n != n || dur.n != n) {
        PyErr_SetString(PyExc_ValueError, "line, start and dur must be as long");
        goto done;
    }
    const int64_t *s = start.view.buf, *d = dur.view.buf;
    int64_t *c = count.view.buf, latest = INT64_MIN;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t li = size == 2 ? ((const int16_t *)line.view.buf)[i]
                               : ((const int32_t *)line.view.buf)[i];
        if (li < 0 || li >= lines) {
            bad = 1;
            break;
        }
        c[li]++;
        int64_t e = s[i] + (d[i] > 1 ? d[i] : 1);
        if (e > latest) {
            latest = e;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "line_counts: a line outside the counts");
        goto done;
    }
    result = PyLong_FromLongLong(latest);
done:
    if (line.view.obj) PyBuffer_Release(&line.view);
    if (start.view.obj) PyBuffer_Release(&start.view);
    if (dur.view.obj) PyBuffer_Release(&dur.view);
    if (count.view.obj) PyBuffer_Release(&count.view);
    return result;
}


/* ---- the order by key: runs merged ------------------------------------------------------- */

typedef struct {
    Py_ssize_t pos, end;  /* the run's next event and its end (table rows) */
} Run;

/* (key, row) of a before (key, row) of b: equal keys in table order, as a stable sort. */
static inline int
run_before(const int64_t *key, Py_ssize_t a, Py_ssize_t b)
{
    return key[a] < key[b] || (key[a] == key[b] && a < b);
}

static void
heap_down(const int64_t *key, Run *heap, Py_ssize_t size, Py_ssize_t i)
{
    Run r = heap[i];
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= size) {
            break;
        }
        if (c + 1 < size && run_before(key, heap[c + 1].pos, heap[c].pos)) {
            c++;
        }
        if (!run_before(key, heap[c].pos, r.pos)) {
            break;
        }
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = r;
}

static void
heap_up(const int64_t *key, Run *heap, Py_ssize_t i)
{
    Run r = heap[i];
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!run_before(key, r.pos, heap[p].pos)) {
            break;
        }
        heap[i] = heap[p];
        i = p;
    }
    heap[i] = r;
}

static const int64_t *sort_key;  /* qsort's context (set with the GIL held: one at a time) */

static int
run_cmp(const void *a, const void *b)
{
    Py_ssize_t x = ((const Run *)a)->pos, y = ((const Run *)b)->pos;
    return run_before(sort_key, x, y) ? -1 : (x == y ? 0 : 1);
}

typedef struct {
    int64_t neg_end;
    int64_t row;
} Tied;

static int
tied_cmp(const void *a, const void *b)
{
    const Tied *x = a, *y = b;
    if (x->neg_end != y->neg_end) {
        return x->neg_end < y->neg_end ? -1 : 1;
    }
    return x->row < y->row ? -1 : (x->row > y->row);
}

/* Events of one key (sorted: the keys in order's order) put longer first (later end), then
 * by row. 0 when out of memory. */
static int
order_ties(const int64_t *sorted, const int64_t *end, Py_ssize_t n, void *order, int wide)
{
    /* Events starting together: the longer first, then by row (a few at a time, usually). */
    Tied *tied = NULL;
    Py_ssize_t cap = 0;
    for (Py_ssize_t a = 0; a < n;) {
        Py_ssize_t b = a + 1;
        while (b < n && sorted[b] == sorted[a]) {
            b++;
        }
        if (b - a > 1) {
            Py_ssize_t g = b - a;
            if (g > cap) {
                free(tied);
                cap = g > 64 ? g : 64;
                tied = malloc(sizeof(Tied) * (size_t)cap);
                if (!tied) {
                    return 0;
                }
            }
            for (Py_ssize_t k = 0; k < g; k++) {
                int64_t row = order_at(order, wide, a + k), e = end[row];
                tied[k].neg_end = -(e > 1 ? e : 1);  /* lengths too: as laid out */
                tied[k].row = row;
            }
            if (g <= 16) {
                for (Py_ssize_t k = 1; k < g; k++) {
                    Tied t = tied[k];
                    Py_ssize_t j = k;
                    while (j > 0 && tied_cmp(&t, &tied[j - 1]) < 0) {
                        tied[j] = tied[j - 1];
                        j--;
                    }
                    tied[j] = t;
                }
            } else {
                qsort(tied, (size_t)g, sizeof(Tied), tied_cmp);
            }
            for (Py_ssize_t k = 0; k < g; k++) {
                order_put(order, wide, a + k, tied[k].row);
            }
        }
        a = b;
    }
    free(tied);
    return 1;
}

/* The runs [starts[i], starts[i + 1]) merged into order (table rows) and sorted (keys); then
 * the events of one key put longer first (later end), then by row. 0 when out of memory. */
static int
merge_runs(const int64_t *key, const int64_t *end, Py_ssize_t n, Run *runs, Py_ssize_t n_runs,
           int64_t *order, int64_t *sorted)
{
    Run *heap = malloc(sizeof(Run) * (size_t)(n_runs ? n_runs : 1));
    if (!heap) {
        return 0;
    }
    Py_ssize_t size = 0, next = 0, o = 0;
    for (;;) {
        /* Every run starting before the heap's least next event joins the heap first. */
        while (next < n_runs && (size == 0 || run_before(key, runs[next].pos, heap[0].pos))) {
            heap[size] = runs[next++];
            heap_up(key, heap, size++);
        }
        if (size == 0) {
            break;
        }
        /* The least run's events before every other run's next (and the next run's first). */
        Py_ssize_t bound = -1;
        if (size > 1) {
            bound = heap[1].pos;
            if (size > 2 && run_before(key, heap[2].pos, bound)) {
                bound = heap[2].pos;
            }
        }
        if (next < n_runs && (bound < 0 || run_before(key, runs[next].pos, bound))) {
            bound = runs[next].pos;
        }
        Run *top = &heap[0];
        Py_ssize_t i = top->pos;
        do {
            order[o] = i;
            sorted[o++] = key[i++];
        } while (i < top->end && (bound < 0 || run_before(key, i, bound)));
        top->pos = i;
        if (i == top->end) {
            heap[0] = heap[--size];
        }
        if (size > 1) {
            heap_down(key, heap, size, 0);
        }
    }
    free(heap);
    return order_ties(sorted, end, n, order, 1);
}

static PyObject *
order_by_key(PyObject *self, PyObject *args)
{
    PyObject *key_o, *end_o, *order_o, *sorted_o;
    Py_ssize_t max_runs;
    if (!PyArg_ParseTuple(args, "OOOOn", &key_o, &end_o, &order_o, &sorted_o, &max_runs)) {
        return NULL;
    }
    Column key = {0}, end = {0}, order = {0}, sorted = {0};
    PyObject *result = NULL;
    Run *runs = NULL;
    int have_sorted = sorted_o != Py_None;
    if (get_column(key_o, &key, 0, "key") < 0 || get_column(end_o, &end, 0, "end") < 0
        || get_order(order_o, &order) < 0
        || (have_sorted && get_column(sorted_o, &sorted, 1, "sorted") < 0)) {
        goto done;
    }
    Py_ssize_t n = key.n;
    const int64_t *k = key.view.buf;
    if (end.n != n || order.n != n || (have_sorted && sorted.n != n)) {
        PyErr_SetString(PyExc_ValueError, "key, end, order and sorted must be as long");
        goto done;
    }
    Py_ssize_t n_runs = n > 0;
    for (Py_ssize_t i = 1; i < n && n_runs <= max_runs; i++) {
        n_runs += k[i] < k[i - 1];
    }
    if (n_runs > max_runs) {
        result = PyLong_FromSsize_t(-1);  /* too many runs: the caller sorts */
        goto done;
    }
    if (n_runs <= 1) {  /* in order already: the keys are their own sorted copy */
        int ok, wide = order.view.itemsize == 8;
        Py_BEGIN_ALLOW_THREADS
        if (wide) {
            int64_t *out = order.view.buf;
            for (Py_ssize_t i = 0; i < n; i++) {
                out[i] = i;
            }
        } else {
            int32_t *out = order.view.buf;
            for (Py_ssize_t i = 0; i < n; i++) {
                out[i] = (int32_t)i;
            }
        }
        ok = order_ties(k, end.view.buf, n, order.view.buf, wide);
        Py_END_ALLOW_THREADS
        if (!ok) {
            PyErr_NoMemory();
            goto done;
        }
        result = PyLong_FromSsize_t(n_runs);
        goto done;
    }
    if (!have_sorted || order.view.itemsize != 8) {
        result = PyLong_FromSsize_t(-2);  /* several runs: the caller gives sorted (int64) */
        goto done;
    }
    runs = malloc(sizeof(Run) * (size_t)(n_runs ? n_runs : 1));
    if (!runs) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t r = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == 0 || k[i] < k[i - 1]) {
            if (r) {
                runs[r - 1].end = i;
            }
            runs[r++].pos = i;
        }
    }
    if (r) {
        runs[r - 1].end = n;
    }
    sort_key = k;
    qsort(runs, (size_t)n_runs, sizeof(Run), run_cmp);
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = merge_runs(k, end.view.buf, n, runs, n_runs, order.view.buf, sorted.view.buf);
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyLong_FromSsize_t(n_runs);
done:
    free(runs);
    if (key.view.obj) PyBuffer_Release(&key.view);
    if (end.view.obj) PyBuffer_Release(&end.view);
    if (order.view.obj) PyBuffer_Release(&order.view);
    if (sorted.view.obj) PyBuffer_Release(&sorted.view);
    return result;
}


/* ---- producer → consumer flows: a hash join ----------------------------------------------- */

static inline uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static PyObject *
match_flows(PyObject *self, PyObject *args)
{
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7])) {
        return NULL;
    }
    static const char *names[8] = {"p_rows", "p_ids", "p_types", "c_rows", "c_ids",
                                   "c_types", "src", "dst"};
    Column col[8];
    memset(col, 0, sizeof(col));
    PyObject *result = NULL;
    int64_t *slot = NULL;
    int got = 0;
    for (; got < 8; got++) {
        if (get_column(o[got], &col[got], got >= 6, names[got]) < 0) {
            goto done;
        }
    }
    Py_ssize_t np_ = col[0].n, nc = col[3].n;
    if (col[1].n != np_ || col[2].n != np_ || col[4].n != nc || col[5].n != nc
        || col[6].n != nc || col[7].n != nc) {
        PyErr_SetString(PyExc_ValueError,
                        "producers' and consumers' columns (and src, dst) must be as long");
        goto done;
    }
    size_t cap = 16;
    while (cap < 2 * (size_t)np_) {
        cap <<= 1;
    }
    slot = malloc(sizeof(int64_t) * cap);
    if (!slot) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *prow = col[0].view.buf, *pid = col[1].view.buf, *pty = col[2].view.buf;
    const int64_t *crow = col[3].view.buf, *cid = col[4].view.buf, *cty = col[5].view.buf;
    int64_t *src = col[6].view.buf, *dst = col[7].view.buf;
    Py_ssize_t found = 0;
    Py_BEGIN_ALLOW_THREADS
    memset(slot, 0xff, sizeof(int64_t) * cap);  /* -1: empty */
    size_t m = cap - 1;
    /* Each (type, id) keeps its first producer (in the order given: table order). */
    for (Py_ssize_t i = 0; i < np_; i++) {
        size_t h = mix64((uint64_t)pid[i] ^ mix64((uint64_t)pty[i])) & m;
        for (;; h = (h + 1) & m) {
            int64_t j = slot[h];
            if (j < 0) {
                slot[h] = i;
                break;
            }
            if (pid[j] == pid[i] && pty[j] == pty[i]) {
                break;
            }
        }
    }
    /* Each consumer, in order, to that first producer (not to itself). */
    for (Py_ssize_t i = 0; i < nc; i++) {
        size_t h = mix64((uint64_t)cid[i] ^ mix64((uint64_t)cty[i])) & m;
        for (;; h = (h + 1) & m) {
            int64_t j = slot[h];
            if (j < 0) {
                break;
            }
            if (pid[j] == cid[i] && pty[j] == cty[i]) {
                if (prow[j] != crow[i]) {
                    src[found] = prow[j];
                    dst[found++] = crow[i];
                }
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(found);
done:
    free(slot);
    for (int k = 0; k < got; k++) {
        PyBuffer_Release(&col[k].view);
    }
    return result;
}


/* ---- integer side stats, by stat ----------------------------------------------------------- */

/* The slot (-1: none) of stat row i: its name's, where its value is an integer (names of
 * 2 or 4 bytes each: a table's narrowed codes are read as they are, not copied wider). */
static inline int
int_slot(const void *name, int name_size, const int8_t *kind, const int8_t *slot,
         Py_ssize_t n_slot, Py_ssize_t i, int k_int64, int k_uint64)
{
    int32_t c = name_size == 2 ? (int32_t)((const int16_t *)name)[i]
                               : ((const int32_t *)name)[i];
    if (c < 0 || c >= n_slot || (kind[i] != k_int64 && kind[i] != k_uint64)) {
        return -1;
    }
    return slot[c];
}

static PyObject *
int_stats(PyObject *self, PyObject *args)
{
    PyObject *o[7];
    int k_int64, k_uint64;
    if (!PyArg_ParseTuple(args, "OOOOOOOii", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &k_int64, &k_uint64)) {
        return NULL;
    }
    /* name (int16 or int32), kind (int8), event (int32), value (int64), slot (int8, per
     * name code), offsets (int64, one more than slots), then out events and values (int64)
     * or None. */
    static const Py_ssize_t sizes[5] = {4, 1, 4, 8, 1};
    static const char *names[5] = {"name", "kind", "event", "value", "slot"};
    Column col[8];
    memset(col, 0, sizeof(col));
    PyObject *result = NULL;
    int got = 0;
    int name_size = 4;
    if (PyObject_GetBuffer(o[0], &col[0].view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        goto done;
    }
    got = 1;
    name_size = (int)col[0].view.itemsize;
    if (name_size != 2 && name_size != 4) {
        PyErr_SetString(PyExc_TypeError, "name must hold 2- or 4-byte items");
        goto done;
    }
    col[0].n = col[0].view.len / name_size;
    for (; got < 5; got++) {
        if (get_sized(o[got], &col[got], sizes[got], 0, names[got]) < 0) {
            goto done;
        }
    }
    int fill = o[6] != Py_None;
    if (get_column(o[5], &col[5], !fill, "offsets") < 0) {
        goto done;
    }
    got = 6;
    Py_ssize_t n = col[0].n, k = col[5].n - 1;
    if (col[1].n != n || col[2].n != n || col[3].n != n || k < 0 || k > 127) {
        PyErr_SetString(PyExc_ValueError, "name, kind, event and value must be as long");
        goto done;
    }
    const void *name = col[0].view.buf;
    const int32_t *event = col[2].view.buf;
    const int8_t *kind = col[1].view.buf, *slot = col[4].view.buf;
    const int64_t *value = col[3].view.buf;
    int64_t *off = col[5].view.buf;
    Py_ssize_t n_slot = col[4].n;
    if (!fill) {  /* count: offsets[1 + s] = rows of slot s */
        for (Py_ssize_t s = 0; s <= k; s++) {
            off[s] = 0;
        }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int s = int_slot(name, name_size, kind, slot, n_slot, i, k_int64, k_uint64);
            if (s >= 0 && s < k) {
                off[s + 1]++;
            }
        }
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *pair = o[6];
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "out must be (events, values)");
        goto done;
    }
    if (get_column(PyTuple_GET_ITEM(pair, 0), &col[6], 1, "events") < 0) {
        goto done;
    }
    got = 7;
    if (get_column(PyTuple_GET_ITEM(pair, 1), &col[7], 1, "values") < 0) {
        goto done;
    }
    got = 8;
    if (col[6].n != off[k] || col[7].n != off[k] || off[0] != 0) {
        PyErr_SetString(PyExc_ValueError, "events and values must hold every row counted");
        goto done;
    }
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
    if (!at) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < k; s++) {
        at[s] = off[s];
    }
    int ok = 1;
    int64_t *out_e = col[6].view.buf, *out_v = col[7].view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int s = int_slot(name, name_size, kind, slot, n_slot, i, k_int64, k_uint64);
        if (s >= 0 && s < k) {
            if (at[s] >= off[s + 1]) {
                ok = 0;  /* more rows than counted: the columns changed */
                break;
            }
            out_e[at[s]] = event[i];
            out_v[at[s]++] = value[i];
        }
    }
    Py_END_ALLOW_THREADS
    free(at);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "more stat rows than counted");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int j = 0; j < got; j++) {
        if (col[j].view.obj) PyBuffer_Release(&col[j].view);
    }
    return result;
}

/* ---- a window's cells, per track ----------------------------------------------------------
 *
 * The compiled twin of TrackTable._window_cells_numpy: per track, its events in a window in
 * start order, those at least a pixel wide listed and the others counted (and their durations
 * summed) per (row, pixel column), in one pass over them and no column as long as they are.
 * The pixel columns' edges among the events are found in the keys first (a column's events
 * then read only their row and duration).
 */

/* Item i of a column of 4- or 8-byte integers. */
static inline int64_t
int_at(const void *buf, Py_ssize_t size, Py_ssize_t i)
{
    return size == 4 ? (int64_t)((const int32_t *)buf)[i] : ((const int64_t *)buf)[i];
}

/* A growable buffer of int64 records. */
typedef struct {
    int64_t *v;
    size_t n, cap;
} Grow;

static int
grow_room(Grow *g, size_t more)
{
    if (g->n + more <= g->cap) {
        return 1;
    }
    size_t cap = g->cap ? g->cap : 1024;
    while (cap < g->n + more) {
        cap *= 2;
    }
    int64_t *v = realloc(g->v, sizeof(int64_t) * cap);
    if (!v) {
        return 0;
    }
    g->v = v;
    g->cap = cap;
    return 1;
}

/* One track's per-row sums of the pixel column being counted. */
typedef struct {
    int64_t *cnt, *cov, *touched;
    Py_ssize_t n_touched;
    int64_t rows;       /* the track's rows */
    Py_ssize_t n_dur;   /* the duration column's length (table rows) */
    uint64_t width;
    int64_t span;       /* < 0: nothing is a pixel wide */
    Grow wide;          /* positions of the events at least a pixel wide, in order */
} Sums;

enum { SEG_OK, SEG_BAD, SEG_OOM };

/* Events at positions lo..hi-1 counted (or listed as wide): one instantiation per width of
 * the table rows and the rows columns (4 or 8 bytes), read as they are. */
#define COUNT_SEGMENT(NAME, ET, DT)                                                          \
    static int NAME(const ET *ev_row, const DT *depth, const int64_t *dur, Py_ssize_t lo,    \
                    Py_ssize_t hi, Sums *s)                                                  \
    {                                                                                        \
        Py_ssize_t nt = s->n_touched;                                                        \
        int64_t *cnt = s->cnt, *cov = s->cov, *touched = s->touched;                         \
        const uint64_t n_dur = (uint64_t)s->n_dur, rows = (uint64_t)s->rows;                 \
        const uint64_t uw = s->width;                                                        \
        const int64_t span = s->span;                                                        \
        int rc = SEG_OK;                                                                     \
        /* A run of events on one row summed in registers (a row's sums in memory would    \
         * make each event wait for the previous one's store). */                            \
        int64_t run_row = -1, run_cnt = 0, run_cov = 0;                                      \
        for (Py_ssize_t p = lo; p < hi; p++) {                                               \
            uint64_t e = (uint64_t)(int64_t)ev_row[p], r = (uint64_t)(int64_t)depth[p];      \
            if (e >= n_dur || r >= rows) {                                                   \
                rc = SEG_BAD;                                                                \
                break;                                                                       \
            }                                                                                \
            int64_t d = dur[e];                                                              \
            /* As NumPy's int64 product (wrapping). */                                       \
            if (span >= 0 && (int64_t)((uint64_t)d * uw) >= span) {                          \
                if (!grow_room(&s->wide, 1)) {                                               \
                    rc = SEG_OOM;                                                            \
                    break;                                                                   \
                }                                                                            \
                s->wide.v[s->wide.n++] = p;                                                  \
                continue;                                                                    \
            }                                                                                \
            if ((int64_t)r != run_row) {                                                     \
                if (run_row >= 0) {                                                          \
                    if (!cnt[run_row]) {                                                     \
                        touched[nt++] = run_row;                                             \
                    }                                                                        \
                    cnt[run_row] += run_cnt;                                                 \
                    cov[run_row] += run_cov;                                                 \
                }                                                                            \
                run_row = (int64_t)r;                                                        \
                run_cnt = 0;                                                                 \
                run_cov = 0;                                                                 \
            }                                                                                \
            run_cnt += 1;                                                                    \
            run_cov += d;                                                                    \
        }                                                                                    \
        if (run_row >= 0) {                                                                  \
            if (!cnt[run_row]) {                                                             \
                touched[nt++] = run_row;                                                     \
            }                                                                                \
            cnt[run_row] += run_cnt;                                                         \
            cov[run_row] += run_cov;                                                         \
        }                                                                                    \
        s->n_touched = nt;                                                                   \
        return rc;                                                                           \
    }

COUNT_SEGMENT(count_64_32, int64_t, int32_t)
COUNT_SEGMENT(count_64_64, int64_t, int64_t)
COUNT_SEGMENT(count_32_32, int32_t, int32_t)
COUNT_SEGMENT(count_32_64, int32_t, int64_t)

static int
count_segment(const void *ev_row, Py_ssize_t esize, const void *depth, Py_ssize_t dsize,
              const int64_t *dur, Py_ssize_t lo, Py_ssize_t hi, Sums *s)
{
    if (esize == 8) {
        return dsize == 4 ? count_64_32(ev_row, depth, dur, lo, hi, s)
                          : count_64_64(ev_row, depth, dur, lo, hi, s);
    }
    return dsize == 4 ? count_32_32(ev_row, depth, dur, lo, hi, s)
                      : count_32_64(ev_row, depth, dur, lo, hi, s);
}

/* The column's per-row sums flushed into `cells` as (row, column, count, covered) records,
 * the sums cleared. */
static int
flush_column(Grow *cells, Sums *s, int64_t col)
{
    if (!grow_room(cells, 4 * (size_t)s->n_touched)) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < s->n_touched; k++) {
        int64_t r = s->touched[k], *c = cells->v + cells->n;
        c[0] = r;
        c[1] = col;
        c[2] = s->cnt[r];
        c[3] = s->cov[r];
        cells->n += 4;
        s->cnt[r] = 0;
        s->cov[r] = 0;
    }
    s->n_touched = 0;
    return 1;
}

/* The first position in lo..hi-1 whose key is >= needle (hi if none), keys ascending there:
 * whole blocks of keys skipped by their last, then a scan (sequential reads: a column of
 * few events costs few, of many one read per block). */
static Py_ssize_t
edge_after(const int64_t *key, Py_ssize_t lo, Py_ssize_t hi, int64_t needle)
{
    enum { STRIDE = 128 };
    while (hi - lo > STRIDE && key[lo + STRIDE - 1] < needle) {
        lo += STRIDE;
    }
    while (lo < hi && key[lo] < needle) {
        lo++;
    }
    return lo;
}

/* Records of (row, key) pairs in `src` (stride `stride`, row at 0) into `dst` by row (a stable
 * counting sort; `by_row`: rows + 1 slots). */
static void
by_row_into(const int64_t *src, size_t m, size_t stride, int64_t rows, int64_t *by_row,
            int64_t *dst, size_t out_stride, int64_t track, const void *depth, Py_ssize_t dsize)
{
    memset(by_row, 0, sizeof(int64_t) * ((size_t)rows + 1));
    for (size_t q = 0; q < m; q++) {
        int64_t r = depth ? int_at(depth, dsize, src[q]) : src[stride * q];
        by_row[r + 1]++;
    }
    for (int64_t r = 0; r < rows; r++) {
        by_row[r + 1] += by_row[r];
    }
    for (size_t q = 0; q < m; q++) {
        const int64_t *rec = src + stride * q;
        int64_t r = depth ? int_at(depth, dsize, rec[0]) : rec[0];
        int64_t *out = dst + out_stride * by_row[r]++;
        out[0] = track;
        for (size_t k = 0; k < stride; k++) {
            out[1 + k] = rec[k];
        }
    }
}

enum { WC_KEY, WC_DEPTH, WC_EV_ROW, WC_DUR, WC_IDS, WC_A, WC_B, WC_ROWS, WC_BEFORE,
       WC_BEFORE_OFF, WC_INNER, WC_N };

static PyObject *
window_cells(PyObject *self, PyObject *args)
{
    PyObject *o[WC_N];
    int bits;
    long long w_, span_;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOiLL", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &bits, &w_, &span_)) {
        return NULL;
    }
    static const char *names[WC_N] = {"key", "depth", "ev_row", "duration", "ids", "a", "b",
                                      "rows", "before", "before_off", "inner"};
    Column col[WC_N];
    memset(col, 0, sizeof(col));
    PyObject *result = NULL;
    Grow wide = {0}, cells = {0}, out_cells = {0};
    Sums s;
    memset(&s, 0, sizeof(s));
    int64_t *by_row = NULL;
    int got = 0;
    for (; got < WC_N; got++) {
        if (got == WC_DEPTH || got == WC_EV_ROW) {  /* 4- or 8-byte integers, read as they are */
            if (PyObject_GetBuffer(o[got], &col[got].view,
                                   PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
                goto done;
            }
            Py_ssize_t size = col[got].view.itemsize;
            col[got].n = col[got].view.len / size;
            if (size != 4 && size != 8) {
                PyErr_Format(PyExc_TypeError, "%s must hold 4- or 8-byte items", names[got]);
                got++;
                goto done;
            }
        } else if (get_column(o[got], &col[got], 0, names[got]) < 0) {
            goto done;
        }
    }
    Py_ssize_t n = col[WC_KEY].n, k_tracks = col[WC_IDS].n, w = (Py_ssize_t)w_;
    if (col[WC_DEPTH].n != n || col[WC_EV_ROW].n != n || col[WC_A].n != k_tracks
        || col[WC_B].n != k_tracks || col[WC_ROWS].n != k_tracks
        || col[WC_BEFORE_OFF].n != k_tracks + 1 || w < 1 || col[WC_INNER].n != w - 1
        || bits < 1 || bits > 62) {
        PyErr_SetString(PyExc_ValueError, "window_cells: columns of unexpected lengths");
        goto done;
    }
    const int64_t *key = col[WC_KEY].view.buf, *dur = col[WC_DUR].view.buf;
    const void *depth = col[WC_DEPTH].view.buf, *ev_row = col[WC_EV_ROW].view.buf;
    Py_ssize_t dsize = col[WC_DEPTH].view.itemsize, esize = col[WC_EV_ROW].view.itemsize;
    const int64_t *ids = col[WC_IDS].view.buf, *a = col[WC_A].view.buf;
    const int64_t *b = col[WC_B].view.buf, *rows = col[WC_ROWS].view.buf;
    const int64_t *before = col[WC_BEFORE].view.buf, *before_off = col[WC_BEFORE_OFF].view.buf;
    const int64_t *inner = col[WC_INNER].view.buf;
    Py_ssize_t n_before = col[WC_BEFORE].n;
    int64_t max_rows = 1;
    for (Py_ssize_t i = 0; i < k_tracks; i++) {
        if (rows[i] < 0 || a[i] < 0 || b[i] > n || before_off[i] < 0 || ids[i] < 0
            || before_off[i] > before_off[i + 1] || before_off[i + 1] > n_before
            || ids[i] >= (INT64_C(1) << (62 - bits))) {
            PyErr_SetString(PyExc_ValueError, "window_cells: a track out of range");
            goto done;
        }
        max_rows = rows[i] > max_rows ? rows[i] : max_rows;
    }
    for (Py_ssize_t j = 0; j < n_before; j++) {
        if (before[j] < 0 || before[j] >= n) {
            PyErr_SetString(PyExc_ValueError, "window_cells: a position out of range");
            goto done;
        }
    }
    s.cnt = calloc((size_t)max_rows, sizeof(int64_t));
    s.cov = calloc((size_t)max_rows, sizeof(int64_t));
    s.touched = malloc(sizeof(int64_t) * (size_t)max_rows);
    by_row = malloc(sizeof(int64_t) * ((size_t)max_rows + 1));
    if (!s.cnt || !s.cov || !s.touched || !by_row) {
        PyErr_NoMemory();
        goto done;
    }
    s.n_dur = col[WC_DUR].n;
    s.width = (uint64_t)w;
    s.span = (int64_t)span_;
    int rc = SEG_OK;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < k_tracks && rc == SEG_OK; i++) {
        s.rows = rows[i];
        s.n_touched = 0;
        s.wide.n = 0;
        cells.n = 0;
        /* Column 0: the events running at the window's start, then those starting in it
         * before the first inner edge; each later column its run of the events. */
        for (Py_ssize_t j = before_off[i]; j < before_off[i + 1] && rc == SEG_OK; j++) {
            rc = count_segment(ev_row, esize, depth, dsize, dur, before[j], before[j] + 1, &s);
        }
        const int64_t base = ids[i] << bits;
        Py_ssize_t pos = a[i], end_all = b[i] > a[i] ? b[i] : a[i];
        for (Py_ssize_t c = 0; c < w && rc == SEG_OK; c++) {
            Py_ssize_t end = c < w - 1 ? edge_after(key, pos, end_all, base | inner[c]) : end_all;
            rc = count_segment(ev_row, esize, depth, dsize, dur, pos, end, &s);
            if (rc == SEG_OK && s.n_touched && !flush_column(&cells, &s, c)) {
                rc = SEG_OOM;
            }
            pos = end;
            if (pos >= end_all) {
                break;  /* no events left: the rest of the columns are empty */
            }
        }
        if (rc != SEG_OK) {
            break;
        }
        /* The track's cells by row (each row's in column order already), its wide events by
         * row (each row's in position, so start, order). */
        size_t m = cells.n / 4, mw = s.wide.n;
        if (!grow_room(&out_cells, 5 * m) || !grow_room(&wide, 2 * mw)) {
            rc = SEG_OOM;
            break;
        }
        by_row_into(cells.v, m, 4, s.rows, by_row, out_cells.v + out_cells.n, 5, ids[i],
                    NULL, 0);
        out_cells.n += 5 * m;
        by_row_into(s.wide.v, mw, 1, s.rows, by_row, wide.v + wide.n, 2, ids[i], depth,
                    dsize);
        wide.n += 2 * mw;
    }
    Py_END_ALLOW_THREADS
    if (rc == SEG_OOM) {
        PyErr_NoMemory();
        goto done;
    }
    if (rc == SEG_BAD) {
        PyErr_SetString(PyExc_ValueError, "window_cells: a table row or row out of range");
        goto done;
    }
    /* (y# of a NULL buffer would be None, not empty bytes.) */
    result = Py_BuildValue("(y#y#)", wide.v ? (const char *)wide.v : "",
                           (Py_ssize_t)(wide.n * 8),
                           out_cells.v ? (const char *)out_cells.v : "",
                           (Py_ssize_t)(out_cells.n * 8));
done:
    free(wide.v);
    free(cells.v);
    free(out_cells.v);
    free(s.wide.v);
    free(s.cnt);
    free(s.cov);
    free(s.touched);
    free(by_row);
    for (int j = 0; j < got; j++) {
        if (col[j].view.obj) PyBuffer_Release(&col[j].view);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "rows(start, end, offsets, out): each event's row, per track (events offsets[t] to "
     "offsets[t+1], in start order), written into out (int64)."},
    {"table_rows", table_rows, METH_VARARGS,
     "table_rows(key, bits, dur, rows, offsets, depth, block_end, block): for events by "
     "(track, start) (key: track << bits | start, int64; rows: their table rows, int64 or "
     "int32; dur: "
     "the table's durations, int64), each one's row written into depth (int32) and per block "
     "of events the latest end (start + max(dur, 1)) into block_end (int64)."},
    {"line_counts", line_counts, METH_VARARGS,
     "line_counts(line, start, dur, count): per line (int16 or int32 codes) its events "
     "added into count (int64, one per line); returns the latest start + max(dur, 1)."},
    {"order_by_key", order_by_key, METH_VARARGS,
     "order_by_key(key, end, order, sorted, max_runs): the rows of key (int64) in key order "
     "(equal keys: the later end, or longer length, first (at least 1), then by row) into order "
     "(int64; int32 too where key is in order already), the keys so into sorted; "
     "the ascending runs of key merged. Returns how many runs, or -1 (nothing written) "
     "where there are more than max_runs. sorted None: where key is one run (in order "
     "already: its own sorted copy) order is written, else -2 (nothing written)."},
    {"match_flows", match_flows, METH_VARARGS,
     "match_flows(p_rows, p_ids, p_types, c_rows, c_ids, c_types, src, dst): each consumer "
     "(in order) to the first producer of its type and id, unless that is itself: the pairs "
     "written into src and dst (int64, as long as the consumers); returns how many."},
    {"int_stats", int_stats, METH_VARARGS,
     "int_stats(name, kind, event, value, slot, offsets, out, k_int64, k_uint64): the integer "
     "stat rows whose name's slot is s >= 0, by slot in row order. out None: offsets[1 + s] "
     "gets how many (offsets[0] 0); out (events, values): written at offsets[s] on."},
    {"window_cells", window_cells, METH_VARARGS,
     "window_cells(key, depth, ev_row, duration, ids, a, b, rows, before, before_off, inner, "
     "bits, width, span): per track ids[i] (rows[i] rows), its events at positions "
     "before[before_off[i]:before_off[i+1]] then a[i] to b[i] (start order), each event's "
     "pixel column how many of inner (the inner column boundaries) are at or before its "
     "start: those a pixel wide (duration * width >= span; span < 0: none) listed, the others "
     "counted and their durations summed per (row, column). Returns (wide, cells) as bytes "
     "of int64 records: (track, position) by track, row, position; (track, row, column, "
     "count, covered) by track, row, column."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_trace_layout",
                                    "The trace viewer's row layout (compiled twin).", -1,
                                    methods};

PyMODINIT_FUNC
PyInit__trace_layout(void)
{
    return PyModule_Create(&module);
}
