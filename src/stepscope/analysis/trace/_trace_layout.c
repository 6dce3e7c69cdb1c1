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
 * And the producer → consumer flows of trace_index._flows (trace_index._stat_flows): each
 * consumer to the first producer of its type and id, by a hash join (O(n)) instead of a sort
 * and a search per type, read straight from the stat table (an event's stats are one run of its
 * rows): a hash table of the producers' stat rows (4 bytes a slot) is all it keeps, and the
 * pairs are written at their final type. Probes go in batches, each batch's slots prefetched:
 * the table is far larger than the caches.
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
#include <sys/mman.h>

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

/* A contiguous column of 4- or 8-byte integers (table rows, rows: int32 where they fit),
 * writable when asked; read and written through int_at and int_put. */
static int
get_ints(PyObject *obj, Column *col, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &col->view, flags) < 0) {
        return -1;
    }
    if (col->view.itemsize != 8 && col->view.itemsize != 4) {
        PyErr_Format(PyExc_TypeError, "%s must hold 4- or 8-byte items", what);
        PyBuffer_Release(&col->view);
        col->view.obj = NULL;
        return -1;
    }
    col->n = col->view.len / col->view.itemsize;
    return 0;
}

/* Item i of a column of 4- or 8-byte integers. */
static inline int64_t
int_at(const void *buf, Py_ssize_t size, Py_ssize_t i)
{
    return size == 4 ? (int64_t)((const int32_t *)buf)[i] : ((const int64_t *)buf)[i];
}

static inline void
int_put(void *buf, Py_ssize_t size, Py_ssize_t i, int64_t value)
{
    if (size == 4) {
        ((int32_t *)buf)[i] = (int32_t)value;
    } else {
        ((int64_t *)buf)[i] = value;
    }
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

/* 0 when out of memory. */
static int
grow_push(Grow *g, int64_t value)
{
    if (!grow_room(g, 1)) {
        return 0;
    }
    g->v[g->n++] = value;
    return 1;
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

/* The trees as the stack's events leave them: row i running until end[i], the rest free
 * (an ended row's last end is at most any later start: free then as now). 0 when out of
 * memory. */
static int
trees_from_ends(Trees *t, const Grow *st)
{
    trees_reset(t, 64);
    while ((size_t)t->cap < st->n) {
        if (!trees_grow(t)) {
            return 0;
        }
    }
    Py_ssize_t cap = t->cap;
    for (size_t i = 0; i < st->n; i++) {
        t->lo[cap + i] = t->hi[cap + i] = st->v[i];
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
next_row(Trees *t, Grow *stack, int *nested, int64_t s, int64_t e)
{
    if (*nested) {
        while (stack->n && stack->v[stack->n - 1] <= s) {
            stack->n--;
        }
        if (!stack->n || stack->v[stack->n - 1] >= e) {
            return grow_push(stack, e) ? (Py_ssize_t)stack->n - 1 : -1;
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
           Grow *stack, int64_t *out)
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
    Grow stack = {NULL, 0, 0};
    int ok = trees.lo && trees.hi;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; ok && t < tracks; t++) {
        ok = track_rows(s, e, (Py_ssize_t)o[t], (Py_ssize_t)o[t + 1], &trees, &stack,
                        out.view.buf);
    }
    Py_END_ALLOW_THREADS
    free(trees.lo);
    free(trees.hi);
    free(stack.v);
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



/* Where `origin` is given (not None), the keys are a table's own starts: read whole (mask: all
 * bits), each relative to origin (base); else composite keys, masked, base 0. */
static int
start_mode(PyObject *origin, int64_t *mask, int64_t *base)
{
    if (origin == Py_None) {
        return 0;
    }
    long long value = PyLong_AsLongLong(origin);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    *mask = -1;
    *base = (int64_t)value;
    return 0;
}

/* Runs of table rows in (track, start) order ("pieces"): piece k holds positions pos[k] to
 * pos[k + 1] (rising), table rows row[k] on. What stands for a column of every position's
 * table row where a table's lines' runs make the order (analysis/trace/track_order.py). */
typedef struct {
    Column pos, row;
    Py_ssize_t n;  /* pieces */
    Py_ssize_t k;  /* the piece last looked in: positions are mostly asked in order */
    int on;
} PieceMap;

static void
release_pieces(PieceMap *m)
{
    if (m->pos.view.obj) PyBuffer_Release(&m->pos.view);
    if (m->row.view.obj) PyBuffer_Release(&m->row.view);
}

/* `obj`: None (no pieces), or (pos, row) int64 columns, checked: positions rising from 0 to
 * n_pos, one more than rows, each piece's rows within 0..n_rows. */
static int
get_pieces(PyObject *obj, PieceMap *m, Py_ssize_t n_pos, Py_ssize_t n_rows)
{
    memset(m, 0, sizeof(*m));
    if (obj == Py_None) {
        return 0;
    }
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
        PyErr_SetString(PyExc_TypeError, "pieces must be None or (positions, rows)");
        return -1;
    }
    if (get_column(PyTuple_GET_ITEM(obj, 0), &m->pos, 0, "piece positions") < 0
        || get_column(PyTuple_GET_ITEM(obj, 1), &m->row, 0, "piece rows") < 0) {
        release_pieces(m);
        return -1;
    }
    const int64_t *pos = m->pos.view.buf, *row = m->row.view.buf;
    m->n = m->row.n;
    int bad = m->pos.n != m->n + 1 || pos[0] != 0 || pos[m->n] != n_pos;
    for (Py_ssize_t k = 0; !bad && k < m->n; k++) {
        bad = pos[k + 1] <= pos[k] || row[k] < 0 || row[k] > n_rows - (pos[k + 1] - pos[k]);
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "pieces out of range");
        release_pieces(m);
        return -1;
    }
    m->on = 1;
    return 0;
}

/* The table row of position p (0 <= p < the positions): in the piece last looked in, the
 * next, or one found by halving. */
static inline int64_t
piece_row(PieceMap *m, Py_ssize_t p)
{
    const int64_t *pos = m->pos.view.buf, *row = m->row.view.buf;
    Py_ssize_t k = m->k;
    if (p < pos[k] || p >= pos[k + 1]) {
        if (p >= pos[k + 1] && k + 2 <= m->n && p < pos[k + 2]) {
            k++;
        } else {
            Py_ssize_t lo = 0, hi = m->n;
            while (hi - lo > 1) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (pos[mid] <= p) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            k = lo;
        }
        m->k = k;
    }
    return row[k] + (p - pos[k]);
}

/* Each event's row and, per block of events, the latest end, for events given by (track,
 * start) as composite keys (track << bits | start) with their table rows: the durations are
 * read through the rows, the starts from the keys, so that no start or end column as long as
 * the events is made (each costs its memory's first touch). Where origin is given, key is the
 * table's own starts instead (read through the rows, each relative to origin); rows None:
 * position i is table row i (the table holds its events in that order). */
static PyObject *
table_rows(PyObject *self, PyObject *args)
{
    PyObject *key_o, *dur_o, *row_o, *off_o, *depth_o, *bend_o, *origin_o = Py_None;
    PyObject *pieces_o = Py_None;
    int bits;
    Py_ssize_t block;
    if (!PyArg_ParseTuple(args, "OiOOOOOn|OO", &key_o, &bits, &dur_o, &row_o, &off_o, &depth_o,
                          &bend_o, &block, &origin_o, &pieces_o)) {
        return NULL;
    }
    PieceMap pm = {0};
    int64_t mask = bits >= 1 && bits <= 62 ? ((int64_t)1 << bits) - 1 : 0, base = 0;
    if (start_mode(origin_o, &mask, &base) < 0) {
        return NULL;
    }
    const int identity = row_o == Py_None, by_start = origin_o != Py_None;
    Column key = {0}, dur = {0}, row = {0}, off = {0}, depth = {0}, bend = {0};
    PyObject *result = NULL;
    if (get_column(key_o, &key, 0, "key") < 0 || get_ints(dur_o, &dur, 0, "dur") < 0
        || (!identity && get_ints(row_o, &row, 0, "rows") < 0)
        || get_column(off_o, &off, 0, "offsets") < 0
        || get_sized(depth_o, &depth, 4, 1, "depth") < 0
        || get_column(bend_o, &bend, 1, "block_end") < 0) {
        goto done;
    }
    Py_ssize_t n = depth.n, tracks = off.n - 1;
    if (bits < 1 || bits > 62 || block < 1 || (!identity && row.n != n)
        || key.n != (by_start ? dur.n : n) || tracks < 0
        || bend.n != (n + block - 1) / block || n >= ((Py_ssize_t)1 << 31)) {
        PyErr_SetString(PyExc_ValueError, "table_rows: columns of mismatched lengths");
        goto done;
    }
    if ((!identity && pieces_o != Py_None) || get_pieces(pieces_o, &pm, n, dur.n) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "table_rows: rows or pieces, not both");
        }
        goto done;
    }
    const int64_t *k = key.view.buf, *o = off.view.buf;
    const void *rw = row.view.buf, *d = dur.view.buf;
    for (Py_ssize_t t = 0; t < tracks; t++) {
        if (o[t] < 0 || o[t] > o[t + 1] || o[t + 1] > n) {
            PyErr_SetString(PyExc_ValueError, "offsets must rise within the events");
            goto done;
        }
    }
    int32_t *out = depth.view.buf;
    int64_t *be = bend.view.buf;
    Py_ssize_t m = dur.n;
    int status = 0;  /* 1: out of memory, 2: a row outside the durations */
    Trees trees = {malloc(sizeof(int64_t) * 128), malloc(sizeof(int64_t) * 128), 64};
    Grow stack = {NULL, 0, 0};
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
            int64_t r = !identity ? int_at(rw, row.view.itemsize, i)
                : pm.on ? piece_row(&pm, i) : (int64_t)i;
            if (r < 0 || r >= m) {
                status = 2;
                break;
            }
            int64_t dr = int_at(d, dur.view.itemsize, r);
            int64_t s = (int64_t)((uint64_t)(k[by_start ? r : i] & mask) - (uint64_t)base);
            int64_t len = dr > 1 ? dr : 1, e = s + len;
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
    free(stack.v);
    if (status == 1) {
        PyErr_NoMemory();
    } else if (status == 2) {
        PyErr_SetString(PyExc_ValueError, "table_rows: a row outside the durations");
    } else {
        result = Py_NewRef(Py_None);
    }
done:
    release_pieces(&pm);
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
    if (get_column(start_o, &start, 0, "start") < 0 || get_ints(dur_o, &dur, 0, "dur") < 0
        || get_column(count_o, &count, 1, "count") < 0) {
        goto done;
    }
    Py_ssize_t n = line.n, lines = count.n;
    if (start.n != n || dur.n != n) {
        PyErr_SetString(PyExc_ValueError, "line, start and dur must be as long");
        goto done;
    }
    const int64_t *s = start.view.buf;
    const void *d = dur.view.buf;
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
        int64_t di = int_at(d, dur.view.itemsize, i);
        int64_t e = s[i] + (di > 1 ? di : 1);
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


/* The durations (as drawn: none negative) of the events before each of some positions in an
 * order, summed: the sum before its block (block_cum) plus its block's events before it, read
 * through the order (None: the durations' own order, or that of `pieces`): the coarse
 * overview's running sums, kept only per block. */
static PyObject *
sums_before(PyObject *self, PyObject *args)
{
    PyObject *dur_o, *order_o, *cum_o, *pos_o, *out_o, *pieces_o = Py_None;
    Py_ssize_t block;
    if (!PyArg_ParseTuple(args, "OOOnOO|O", &dur_o, &order_o, &cum_o, &block, &pos_o, &out_o,
                          &pieces_o)) {
        return NULL;
    }
    PieceMap pm = {0};
    Column dur = {0}, order = {0}, cum = {0}, pos = {0}, out = {0};
    PyObject *result = NULL;
    const int identity = order_o == Py_None;
    if (get_ints(dur_o, &dur, 0, "dur") < 0
        || (!identity && get_ints(order_o, &order, 0, "order") < 0)
        || get_column(cum_o, &cum, 0, "block_cum") < 0 || get_column(pos_o, &pos, 0, "pos") < 0
        || get_column(out_o, &out, 1, "out") < 0) {
        goto done;
    }
    Py_ssize_t m = dur.n, n = identity ? m : order.n;
    if ((!identity && pieces_o != Py_None) || get_pieces(pieces_o, &pm, m, m) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "sums_before: an order or pieces, not both");
        }
        goto done;
    }
    if (block < 1 || out.n != pos.n || cum.n != (n + block - 1) / block + 1) {
        PyErr_SetString(PyExc_ValueError, "sums_before: columns of mismatched lengths");
        goto done;
    }
    const void *d = dur.view.buf;
    const int64_t *c = cum.view.buf, *p = pos.view.buf;
    int64_t *o = out.view.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < pos.n && !bad; i++) {
        int64_t at = p[i];
        if (at < 0 || at > n) {
            bad = 1;
            break;
        }
        Py_ssize_t q = (Py_ssize_t)(at / block);
        int64_t sum = c[q];
        for (Py_ssize_t j = q * block; j < at; j++) {
            int64_t row = !identity ? int_at(order.view.buf, order.view.itemsize, j)
                : pm.on ? piece_row(&pm, j) : (int64_t)j;
            if (row < 0 || row >= m) {
                bad = 1;
                break;
            }
            int64_t dr = int_at(d, dur.view.itemsize, row);
            sum += dr > 0 ? dr : 0;
        }
        o[i] = sum;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "sums_before: a position or row out of range");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    release_pieces(&pm);
    if (dur.view.obj) PyBuffer_Release(&dur.view);
    if (order.view.obj) PyBuffer_Release(&order.view);
    if (cum.view.obj) PyBuffer_Release(&cum.view);
    if (pos.view.obj) PyBuffer_Release(&pos.view);
    if (out.view.obj) PyBuffer_Release(&out.view);
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
order_ties(const int64_t *sorted, const void *end, Py_ssize_t end_size, Py_ssize_t n,
           void *order, Py_ssize_t size)
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
                int64_t row = int_at(order, size, a + k), e = int_at(end, end_size, row);
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
                int_put(order, size, a + k, tied[k].row);
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
merge_runs(const int64_t *key, const void *end, Py_ssize_t end_size, Py_ssize_t n, Run *runs,
           Py_ssize_t n_runs, int64_t *order, int64_t *sorted)
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
    return order_ties(sorted, end, end_size, n, order, 8);
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
    if (get_column(key_o, &key, 0, "key") < 0 || get_ints(end_o, &end, 0, "end") < 0
        || get_ints(order_o, &order, 1, "order") < 0
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
        ok = order_ties(k, end.view.buf, end.view.itemsize, n, order.view.buf,
                        order.view.itemsize);
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
    ok = merge_runs(k, end.view.buf, end.view.itemsize, n, runs, n_runs, order.view.buf,
                    sorted.view.buf);
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


static inline uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* ---- producer → consumer flows, straight from the stat table ------------------------------- */

/* The stat table's columns as read here: name codes of 2 or 4 bytes (a narrowed table's read
 * as they are, not copied wider), kinds, event rows (int32, ascending: an event's stats are
 * one run of rows), values; and the name codes of the four flow stats (_p, _c, _pt, _ct;
 * INT32_MIN for one absent). */
typedef struct {
    const void *name;
    int name_size;
    const int8_t *kind;
    const int32_t *event;
    const int64_t *value;
    Py_ssize_t n;
    int32_t code[4];
    int k_int64, k_uint64;
} Stats;

enum { S_P = 0, S_C = 1, S_PT = 2, S_CT = 3 };

#define HOT static inline __attribute__((always_inline))

/* Row i's name code (ns: the name's item size, a constant where it is called in a loop). */
HOT int32_t
name_at(const Stats *s, Py_ssize_t i, int ns)
{
    return ns == 2 ? (int32_t)((const int16_t *)s->name)[i] : ((const int32_t *)s->name)[i];
}

HOT int
int_kind(const Stats *s, Py_ssize_t i)
{
    return s->kind[i] == s->k_int64 || s->kind[i] == s->k_uint64;
}

/* The value of the first integer stat `want` (S_P...) in the run of rows holding row k (its
 * event's): -1 where none (as the Python twin's lookup gives an absent type). */
static int64_t
run_first(const Stats *s, Py_ssize_t k, int want)
{
    int32_t e = s->event[k], code = s->code[want];
    Py_ssize_t a = k;
    while (a > 0 && s->event[a - 1] == e) {
        a--;
    }
    for (; a < s->n && s->event[a] == e; a++) {
        if (name_at(s, a, s->name_size) == code && int_kind(s, a)) {
            return s->value[a];
        }
    }
    return -1;
}

/* Which events count: keep[e], and not on a line that off[line[e]] leaves out (line and off
 * optional). */
typedef struct {
    const uint8_t *keep;
    Py_ssize_t n_keep;
    const void *line;
    int line_size;
    const uint8_t *off;
    Py_ssize_t n_off;
} Kept;

static inline int
kept(const Kept *k, int32_t e)
{
    if (!k->keep[e]) {
        return 0;
    }
    if (k->off) {
        int32_t l = k->line_size == 2 ? (int32_t)((const int16_t *)k->line)[e]
                                      : ((const int32_t *)k->line)[e];
        return l < 0 || l >= k->n_off || !k->off[l];
    }
    return 1;
}

/* The types (values of _pt, _ct: a few) numbered from 1 as first seen, up to 255; 0 for any
 * beyond those (a pair of such is checked by its producer's stats instead). A slot's code
 * beside it in the hash table: most probes then need nothing else but the id. */
typedef struct {
    int64_t type[255];
    int n;
    int64_t last;
    uint8_t last_code;
} Codes;

static inline uint8_t
code_of(Codes *c, int64_t t)
{
    if (c->last_code && t == c->last) {
        return c->last_code;
    }
    int i = 0;
    while (i < c->n && c->type[i] != t) {
        i++;
    }
    if (i == c->n) {
        if (c->n == 255) {
            return 0;
        }
        c->type[c->n++] = t;
    }
    c->last = t;
    c->last_code = (uint8_t)(i + 1);
    return c->last_code;
}

#define BATCH 64

/* `size` zeroed bytes for a table probed at random: on huge pages where the system gives them
 * (one TLB entry for 2 MB, not 4 kB: a probe then costs one cache miss, not a page walk
 * too). NULL where out of memory; freed by big_free. */
static void *
big_zeroed(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
}

static void
big_free(void *p, size_t size)
{
    if (p) {
        munmap(p, size);
    }
}

typedef struct {
    Py_ssize_t row;  /* the stat row of its _p or _c */
    int64_t id, type;
    size_t h;
    uint64_t check;  /* its slot's bits but the row: type code, exact, id or fingerprint */
    Py_ssize_t ref;  /* what its slot holds + 1 as a producer: its event row where exact */
} Pending;

/* The hash table of the producers: a slot (8 bytes) holds, in its low 32 bits, a producer's
 * stat row + 1 (0: empty), above them its type's code (8 bits), a bit for the exact form, and
 * 23 more bits of its hash: a probe reads the stat table only where all those agree (nearly
 * always the producer sought). In the exact form (a type with a code and an id in [0, 2**23):
 * tf.data's step-like ids) the slot holds the producer's event row + 1 and the id itself:
 * a probe then reads nothing else (the stat table's columns are too large for the TLB). */
typedef struct {
    const Stats *s;
    uint64_t *tab;
    size_t cap;
    Pending pend[BATCH];
    int n_pend;
} Join;

#define ROW_BITS 0xffffffffULL
#define EXACT (1ULL << 40)
#define EXACT_IDS (1LL << 23)

static inline int
same(const Join *jn, uint64_t slot, const Pending *p)
{
    if ((slot & ~ROW_BITS) != p->check) {
        return 0;
    }
    if (slot & EXACT) {
        return 1;
    }
    Py_ssize_t j = (Py_ssize_t)(slot & ROW_BITS) - 1;
    return jn->s->value[j] == p->id
           && ((p->check >> 32 & 0xff) || run_first(jn->s, j, S_PT) == p->type);
}

/* The pending producers put in the table (each (type, id) keeps its first: they come in table
 * order), their slots prefetched first. Returns 0 where more come than there is room for. */
static int
insert_batch(Join *jn, Py_ssize_t *room)
{
    for (int q = 0; q < jn->n_pend; q++) {
        __builtin_prefetch(&jn->tab[jn->pend[q].h], 1);
    }
    for (int q = 0; q < jn->n_pend; q++) {
        const Pending *p = &jn->pend[q];
        for (size_t h = p->h;; h = h + 1 == jn->cap ? 0 : h + 1) {
            uint64_t slot = jn->tab[h];
            if (!slot) {
                if (--*room < 0) {
                    return 0;
                }
                jn->tab[h] = p->check | (uint64_t)(p->ref + 1);
                break;
            }
            if (same(jn, slot, p)) {
                break;
            }
        }
    }
    jn->n_pend = 0;
    return 1;
}

/* Each pending consumer (in order) to its first producer, unless that is itself: the event
 * rows written at src, dst[*found] on (4- or 8-byte items). */
static void
match_batch(Join *jn, void *src, void *dst, int out_size, Py_ssize_t *found)
{
    const Stats *s = jn->s;
    for (int q = 0; q < jn->n_pend; q++) {
        __builtin_prefetch(&jn->tab[jn->pend[q].h]);
    }
    for (int q = 0; q < jn->n_pend; q++) {
        uint64_t slot = jn->tab[jn->pend[q].h];
        if (slot && (slot & ~ROW_BITS) == jn->pend[q].check && !(slot & EXACT)) {
            Py_ssize_t j = (Py_ssize_t)(slot & ROW_BITS) - 1;
            __builtin_prefetch(&s->value[j]);
            __builtin_prefetch(&s->event[j]);
        }
    }
    for (int q = 0; q < jn->n_pend; q++) {
        const Pending *p = &jn->pend[q];
        for (size_t h = p->h;; h = h + 1 == jn->cap ? 0 : h + 1) {
            uint64_t slot = jn->tab[h];
            if (!slot) {
                break;
            }
            if (same(jn, slot, p)) {
                int32_t from = slot & EXACT ? (int32_t)((slot & ROW_BITS) - 1)
                                            : s->event[(slot & ROW_BITS) - 1];
                int32_t to = s->event[p->row];
                if (from != to) {
                    if (out_size == 4) {
                        ((int32_t *)src)[*found] = from;
                        ((int32_t *)dst)[*found] = to;
                    } else {
                        ((int64_t *)src)[*found] = from;
                        ((int64_t *)dst)[*found] = to;
                    }
                    ++*found;
                }
                break;
            }
        }
    }
    jn->n_pend = 0;
}

static inline void
pend(Join *jn, Codes *codes, Py_ssize_t row, int64_t type)
{
    Pending *p = &jn->pend[jn->n_pend++];
    p->row = row;
    p->id = jn->s->value[row];
    p->type = type;
    uint8_t code = code_of(codes, type);
    uint64_t h = mix64((uint64_t)p->id ^ mix64((uint64_t)(code ? code : type)));
    p->h = (size_t)(((unsigned __int128)h * jn->cap) >> 64);
    int exact = code && p->id >= 0 && p->id < EXACT_IDS;
    p->check = ((uint64_t)code << 32)
               | (exact ? EXACT | ((uint64_t)p->id << 41) : (h & 0x7fffff) << 41);
    p->ref = exact ? (Py_ssize_t)jn->s->event[row] : row;
}

/* The producers (kept events' _p rows, each with its event's first _pt) put in the table, in
 * one pass over the rows; the kept consumers' stat rows (their _c) noted at notes[*n_notes]
 * on. 0 where more come than counted. */
HOT int
scan_rows(Join *jn, Codes *codes, const Kept *kp, void *notes, int notes_size,
          Py_ssize_t max_notes, Py_ssize_t *n_notes, Py_ssize_t *room, int ns)
{
    const Stats *s = jn->s;
    int32_t cp = s->code[S_P], cc = s->code[S_C];
    for (Py_ssize_t i = 0; i < s->n; i++) {
        int32_t c = name_at(s, i, ns);
        if ((c != cp && c != cc) || !int_kind(s, i)) {
            continue;
        }
        int32_t e = s->event[i];
        if (e < 0 || e >= kp->n_keep || !kept(kp, e)) {
            continue;
        }
        if (c == cp) {
            pend(jn, codes, i, run_first(s, i, S_PT));
            if (jn->n_pend == BATCH && !insert_batch(jn, room)) {
                return 0;
            }
        } else {
            if (*n_notes >= max_notes) {
                return 0;
            }
            if (notes_size == 4) {
                ((int32_t *)notes)[(*n_notes)++] = (int32_t)i;
            } else {
                ((int64_t *)notes)[(*n_notes)++] = i;
            }
        }
    }
    return insert_batch(jn, room);
}

/* How many integer _p and _c rows (cnt[0], cnt[1]); *by_event: whether the rows' events
 * ascend; *in_range (where they do): whether they lie in [0, n_events). Simple loops, one
 * column or two each: vectorized. */
HOT void
count_rows(const Stats *s, Py_ssize_t n_events, Py_ssize_t *cnt, int *by_event,
           int *in_range, int ns)
{
    const int32_t *ev = s->event;
    int32_t lo = s->n ? ev[0] : 0, down = 0;
    for (Py_ssize_t i = 1; i < s->n; i++) {
        down |= ev[i] < ev[i - 1];
        lo = ev[i] < lo ? ev[i] : lo;
    }
    int32_t hi = s->n ? ev[s->n - 1] : 0;  /* where they ascend, the last is the highest */
    int32_t cp = s->code[S_P], cc = s->code[S_C];
    int8_t k1 = (int8_t)s->k_int64, k2 = (int8_t)s->k_uint64;
    Py_ssize_t np_ = 0, nc = 0;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        int32_t c = name_at(s, i, ns);
        int ik = (s->kind[i] == k1) | (s->kind[i] == k2);
        np_ += (c == cp) & ik;
        nc += (c == cc) & ik;
    }
    cnt[0] = np_;
    cnt[1] = nc;
    *by_event = !down;
    *in_range = !s->n || (lo >= 0 && hi < n_events);
}

static PyObject *
stat_flows(PyObject *self, PyObject *args)
{
    PyObject *o[10];
    Py_ssize_t producers;
    int k_int64, k_uint64;
    if (!PyArg_ParseTuple(args, "OOOOOOOOnOOii", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &producers, &o[8], &o[9], &k_int64, &k_uint64)) {
        return NULL;
    }
    /* name (int16 or int32), kind (int8), event (int32), value (int64), slot (int8 per name
     * code), keep (bool per event), line (int16 or int32 per event, or None), off (bool per
     * line, or None), then src and dst (int32 or int64, as long as the consumers) or None. */
    Column col[10];
    memset(col, 0, sizeof(col));
    PyObject *result = NULL;
    Join *jn = NULL;
    static const Py_ssize_t sizes[8] = {0, 1, 4, 8, 1, 1, 0, 1};
    static const char *names[10] = {"name", "kind", "event", "value", "slot", "keep", "line",
                                    "off", "src", "dst"};
    for (int g = 0; g < 10; g++) {
        PyObject *obj = o[g];
        if (obj == Py_None && g >= 6) {
            continue;
        }
        if (g == 0 || g == 6 || g >= 8) {  /* 2 or 4 bytes (4 or 8 for src, dst) */
            int w = g >= 8;
            if (PyObject_GetBuffer(obj, &col[g].view,
                                   PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (w ? PyBUF_WRITABLE : 0))
                < 0) {
                col[g].view.obj = NULL;
                goto done;
            }
            Py_ssize_t size = col[g].view.itemsize;
            if (w ? (size != 4 && size != 8) : (size != 2 && size != 4)) {
                PyErr_Format(PyExc_TypeError, "%s must hold %s-byte items", names[g],
                             w ? "4- or 8" : "2- or 4");
                goto done;
            }
            col[g].n = col[g].view.len / size;
        } else if (get_sized(obj, &col[g], sizes[g], 0, names[g]) < 0) {
            col[g].view.obj = NULL;
            goto done;
        }
    }
    Stats s = {col[0].view.buf, (int)col[0].view.itemsize, col[1].view.buf, col[2].view.buf,
               col[3].view.buf, col[0].n, {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN},
               k_int64, k_uint64};
    const int8_t *slot = col[4].view.buf;
    for (Py_ssize_t c = col[4].n - 1; c >= 0 && c <= INT32_MAX; c--) {
        if (slot[c] >= 0 && slot[c] < 4) {
            s.code[slot[c]] = (int32_t)c;  /* the lowest code where a stat has several */
        }
    }
    Py_ssize_t n = s.n, n_events = col[5].n;
    if (col[1].n != n || col[2].n != n || col[3].n != n) {
        PyErr_SetString(PyExc_ValueError, "name, kind, event and value must be as long");
        goto done;
    }
    if ((o[6] == Py_None) != (o[7] == Py_None)
        || (o[6] != Py_None && col[6].n != n_events)) {
        PyErr_SetString(PyExc_ValueError, "line must be given with off, one per event");
        goto done;
    }
    Kept kp = {col[5].view.buf, n_events, col[6].view.buf, (int)col[6].view.itemsize,
               col[7].view.buf, col[7].n};
    if (o[8] == Py_None) {
        /* Count: (producers, consumers), kept or not (a bound: most are); None where the
         * stats are not by event. */
        Py_ssize_t cnt[2] = {0, 0};
        int by_event = 1, in_range = 1;
        Py_BEGIN_ALLOW_THREADS
        if (s.name_size == 2) {
            count_rows(&s, n_events, cnt, &by_event, &in_range, 2);
        } else {
            count_rows(&s, n_events, cnt, &by_event, &in_range, 4);
        }
        Py_END_ALLOW_THREADS
        if (by_event && !in_range) {  /* (the range is known only where they ascend) */
            PyErr_SetString(PyExc_ValueError, "a stat's event row is outside the table");
            goto done;
        }
        result = by_event ? Py_BuildValue("nn", cnt[0], cnt[1]) : Py_NewRef(Py_None);
        goto done;
    }
    int out_size = (int)col[8].view.itemsize;
    if (o[9] == Py_None || col[9].view.itemsize != out_size || col[8].n != col[9].n) {
        PyErr_SetString(PyExc_ValueError, "src and dst must be alike");
        goto done;
    }
    if (producers < 0 || n >= (out_size == 4 ? (Py_ssize_t)INT32_MAX : (Py_ssize_t)UINT32_MAX)) {
        PyErr_SetString(PyExc_ValueError, "producers must be counted; too many stat rows");
        goto done;
    }
    jn = calloc(1, sizeof(Join));
    if (jn) {
        jn->s = &s;
        jn->cap = (size_t)producers + (size_t)producers / 2 + 1;  /* at most 2/3 full */
        jn->tab = big_zeroed(jn->cap * sizeof(uint64_t));
    }
    if (!jn || !jn->tab) {
        PyErr_NoMemory();
        goto done;
    }
    Codes codes;
    memset(&codes, 0, sizeof(codes));
    Py_ssize_t room = producers, found = 0, n_rows = 0, max_out = col[8].n;
    int ok = 1;
    void *src = col[8].view.buf, *dst = col[9].view.buf;
    Py_BEGIN_ALLOW_THREADS
    ok = s.name_size == 2
             ? scan_rows(jn, &codes, &kp, dst, out_size, max_out, &n_rows, &room, 2)
             : scan_rows(jn, &codes, &kp, dst, out_size, max_out, &n_rows, &room, 4);
    /* The consumers noted, in order: each to its first producer (written over the notes
     * already read: never ahead of them). */
    for (Py_ssize_t i = 0; ok && i < n_rows; i++) {
        Py_ssize_t k = out_size == 4 ? (Py_ssize_t)((int32_t *)dst)[i] : (Py_ssize_t)((int64_t *)dst)[i];
        pend(jn, &codes, k, run_first(&s, k, S_CT));
        if (jn->n_pend == BATCH) {
            match_batch(jn, src, dst, out_size, &found);
        }
    }
    if (ok) {
        match_batch(jn, src, dst, out_size, &found);
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "more producers or consumers than counted");
        goto done;
    }
    result = PyLong_FromSsize_t(found);
done:
    if (jn) {
        big_free(jn->tab, jn->cap * sizeof(uint64_t));
        free(jn);
    }
    for (int k = 0; k < 10; k++) {
        if (col[k].view.obj) {
            PyBuffer_Release(&col[k].view);
        }
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

/* One track's per-row sums of the pixel column being counted. */
typedef struct {
    int64_t *cnt, *cov, *touched;
    Py_ssize_t n_touched;
    int64_t rows;       /* the track's rows */
    Py_ssize_t n_dur;   /* the duration column's length (table rows) */
    Py_ssize_t dur_size; /* its items' bytes: 4 or 8 */
    uint64_t width;
    int64_t span;       /* < 0: nothing is a pixel wide */
    Grow wide;          /* positions of the events at least a pixel wide, in order */
    PieceMap *pieces;   /* without a table row column: the rows of the pieces, else NULL */
    /* Per block of `block` positions (block_sums), its events' per-row counts and summed
     * durations (entries off[k] to off[k + 1]) and its longest duration (-1: none kept);
     * block 0: none given. */
    Py_ssize_t block;
    const int64_t *b_off, *b_max, *b_rc, *b_cov;  /* b_rc: row << 32 | count */
} Sums;

enum { SEG_OK, SEG_BAD, SEG_OOM };

/* Events at positions lo..hi-1 counted (or listed as wide): one instantiation per width of
 * the table rows and the rows columns (4 or 8 bytes), read as they are. */
#define COUNT_SEGMENT(NAME, ET, DT)                                                          \
    static int NAME(const ET *ev_row, const DT *depth, const void *dur, Py_ssize_t lo,       \
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
            uint64_t e = ev_row ? (uint64_t)(int64_t)ev_row[p]                               \
                : s->pieces ? (uint64_t)piece_row(s->pieces, p) : (uint64_t)p;               \
            uint64_t r = (uint64_t)(int64_t)depth[p];                                        \
            if (e >= n_dur || r >= rows) {                                                   \
                rc = SEG_BAD;                                                                \
                break;                                                                       \
            }                                                                                \
            int64_t d = int_at(dur, s->dur_size, (Py_ssize_t)e);                             \
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
count_events(const void *ev_row, Py_ssize_t esize, const void *depth, Py_ssize_t dsize,
             const void *dur, Py_ssize_t lo, Py_ssize_t hi, Sums *s)
{
    if (lo >= hi) {
        return SEG_OK;
    }
    if (esize == 8) {
        return dsize == 4 ? count_64_32(ev_row, depth, dur, lo, hi, s)
                          : count_64_64(ev_row, depth, dur, lo, hi, s);
    }
    return dsize == 4 ? count_32_32(ev_row, depth, dur, lo, hi, s)
                      : count_32_64(ev_row, depth, dur, lo, hi, s);
}

/* Whether block k's sums may stand for its events: kept, and none of them a pixel wide (its
 * longest duration times the width, without overflow, below the span). */
static inline int
block_narrow(const Sums *s, Py_ssize_t k)
{
    int64_t m = s->b_max[k];
    if (m < 0) {
        return 0;
    }
    if (s->span < 0) {
        return 1;
    }
    return (uint64_t)m <= (uint64_t)INT64_MAX / s->width
        && (int64_t)((uint64_t)m * s->width) < s->span;
}

/* Events at positions lo..hi-1 counted, as count_events, but each whole block among them that
 * block_narrow allows added from its sums (a few entries instead of `block` events: a wide
 * window's columns hold thousands). The sums are the same integers the events add up to. */
static int
count_segment(const void *ev_row, Py_ssize_t esize, const void *depth, Py_ssize_t dsize,
              const void *dur, Py_ssize_t lo, Py_ssize_t hi, Sums *s)
{
    const Py_ssize_t B = s->block;
    if (!B || hi - lo < B) {
        return count_events(ev_row, esize, depth, dsize, dur, lo, hi, s);
    }
    Py_ssize_t first = (lo + B - 1) / B, last = hi / B;  /* whole blocks first..last-1 */
    int rc = count_events(ev_row, esize, depth, dsize, dur, lo, first * B, s);
    Py_ssize_t from = first * B;  /* events from here not yet counted */
    for (Py_ssize_t k = first; k < last && rc == SEG_OK; k++) {
        if (!block_narrow(s, k)) {
            continue;
        }
        rc = count_events(ev_row, esize, depth, dsize, dur, from, k * B, s);
        for (int64_t q = s->b_off[k]; q < s->b_off[k + 1] && rc == SEG_OK; q++) {
            int64_t r = s->b_rc[q] >> 32;
            if (r < 0 || r >= s->rows) {
                rc = SEG_BAD;
                break;
            }
            if (!s->cnt[r]) {
                s->touched[s->n_touched++] = r;
            }
            s->cnt[r] += s->b_rc[q] & 0xffffffff;
            s->cov[r] += s->b_cov[q];
        }
        from = (k + 1) * B;
    }
    if (rc == SEG_OK) {
        rc = count_events(ev_row, esize, depth, dsize, dur, from, hi, s);
    }
    return rc;
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

/* As edge_after, the keys (the table's own starts, n_key of them) read through the positions'
 * table rows (those of `pieces` where rows is NULL); -1 for a row outside the keys. */
static Py_ssize_t
edge_after_rows(const int64_t *key, Py_ssize_t n_key, const void *rows, Py_ssize_t rsize,
                PieceMap *pieces, Py_ssize_t lo, Py_ssize_t hi, int64_t needle)
{
    enum { STRIDE = 128 };
    int64_t r;
    while (hi - lo > STRIDE) {
        r = rows ? int_at(rows, rsize, lo + STRIDE - 1) : piece_row(pieces, lo + STRIDE - 1);
        if (r < 0 || r >= n_key) {
            return -1;
        }
        if (key[r] >= needle) {
            break;
        }
        lo += STRIDE;
    }
    while (lo < hi) {
        r = rows ? int_at(rows, rsize, lo) : piece_row(pieces, lo);
        if (r < 0 || r >= n_key) {
            return -1;
        }
        if (key[r] >= needle) {
            break;
        }
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

/* ---- per-block sums of the per-track table ------------------------------------------------
 *
 * Per block of `block` positions in (track, start) order: its events' count and summed
 * durations per row, and its longest duration, so that a window's pass (window_cells) adds a
 * whole block inside one pixel column in a few steps. A block is left without sums (longest
 * -1: its events are read one by one) where it holds more than BLOCK_ROWS rows, a negative
 * duration, a row out of range or a table row outside the durations. Written into the
 * caller's columns, sized for BLOCK_ROWS entries a block: memory never touched costs none,
 * and nothing is copied.
 */
enum { BLOCK_ROWS = 16 };

static PyObject *
block_sums(PyObject *self, PyObject *args)
{
    PyObject *depth_o, *row_o, *dur_o, *pieces_o = Py_None, *out_o[4];
    Py_ssize_t block;
    if (!PyArg_ParseTuple(args, "OOOnOOOO|O", &depth_o, &row_o, &dur_o, &block, &out_o[0],
                          &out_o[1], &out_o[2], &out_o[3], &pieces_o)) {
        return NULL;
    }
    const int identity = row_o == Py_None;
    Column depth = {0}, row = {0}, dur = {0}, out[4];
    memset(out, 0, sizeof(out));
    PieceMap pm = {0};
    PyObject *result = NULL;
    static const char *names[4] = {"off", "longest", "rc", "cov"};
    if (get_ints(depth_o, &depth, 0, "depth") < 0
        || (!identity && get_ints(row_o, &row, 0, "rows") < 0)
        || get_ints(dur_o, &dur, 0, "duration") < 0) {
        goto done;
    }
    for (int j = 0; j < 4; j++) {
        if (get_column(out_o[j], &out[j], 1, names[j]) < 0) {
            goto done;
        }
    }
    Py_ssize_t n = depth.n;
    Py_ssize_t n_blocks = block >= 1 ? (n + block - 1) / block : 0;
    if (block < 1 || block > (1 << 30) || (!identity && row.n != n)
        || (identity && pieces_o == Py_None && n > dur.n) || out[0].n != n_blocks + 1
        || out[1].n != n_blocks || out[2].n < n_blocks * BLOCK_ROWS
        || out[3].n < n_blocks * BLOCK_ROWS) {
        PyErr_SetString(PyExc_ValueError, "block_sums: columns of unexpected lengths");
        goto done;
    }
    if ((!identity && pieces_o != Py_None) || get_pieces(pieces_o, &pm, n, dur.n) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "block_sums: table rows or pieces, not both");
        }
        goto done;
    }
    int64_t *off = out[0].view.buf, *longest = out[1].view.buf, *rc = out[2].view.buf;
    int64_t *cov = out[3].view.buf;
    Py_ssize_t m = 0;  /* entries written */
    Py_BEGIN_ALLOW_THREADS
    off[0] = 0;
    for (Py_ssize_t k = 0; k < n_blocks; k++) {
        int64_t rk[BLOCK_ROWS], ck[BLOCK_ROWS], vk[BLOCK_ROWS], most = 0;
        int nd = 0, ok = 1, at = 0;
        Py_ssize_t end = (k + 1) * block < n ? (k + 1) * block : n;
        for (Py_ssize_t p = k * block; p < end; p++) {
            int64_t e = !identity ? int_at(row.view.buf, row.view.itemsize, p)
                : pm.on ? piece_row(&pm, p) : (int64_t)p;
            int64_t r = int_at(depth.view.buf, depth.view.itemsize, p);
            if (e < 0 || e >= dur.n || r < 0 || r > INT32_MAX) {
                ok = 0;
                break;
            }
            int64_t d = int_at(dur.view.buf, dur.view.itemsize, e);
            if (d < 0) {
                ok = 0;
                break;
            }
            if (nd == 0 || rk[at] != r) {  /* events run on one row: the last row first */
                for (at = 0; at < nd && rk[at] != r; at++) {
                }
                if (at == nd) {
                    if (nd == BLOCK_ROWS) {
                        ok = 0;
                        break;
                    }
                    rk[nd] = r;
                    ck[nd] = 0;
                    vk[nd++] = 0;
                }
            }
            ck[at]++;
            vk[at] = (int64_t)((uint64_t)vk[at] + (uint64_t)d);  /* as the events' sums */
            most = d > most ? d : most;
        }
        for (int q = 0; ok && q < nd; q++) {
            rc[m] = rk[q] << 32 | ck[q];
            cov[m++] = vk[q];
        }
        longest[k] = ok ? most : -1;
        off[k + 1] = (int64_t)m;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(m);
done:
    release_pieces(&pm);
    for (int j = 0; j < 4; j++) {
        if (out[j].view.obj) PyBuffer_Release(&out[j].view);
    }
    if (depth.view.obj) PyBuffer_Release(&depth.view);
    if (row.view.obj) PyBuffer_Release(&row.view);
    if (dur.view.obj) PyBuffer_Release(&dur.view);
    return result;
}

/* `obj`: (block, off, longest, rc, cov) as block_sums made them for `n` positions, checked
 * (lengths, offsets rising within the entries) into cols; 0, or -1 with an exception. */
static int
get_block_sums(PyObject *obj, Column *cols, Py_ssize_t *block, Py_ssize_t n)
{
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 5) {
        PyErr_SetString(PyExc_TypeError, "sums must be None or (block, off, longest, rc, cov)");
        return -1;
    }
    *block = PyLong_AsSsize_t(PyTuple_GET_ITEM(obj, 0));
    if (*block == -1 && PyErr_Occurred()) {
        return -1;
    }
    static const char *names[4] = {"sums' offsets", "sums' longest", "sums' rows",
                                   "sums' durations"};
    for (int j = 0; j < 4; j++) {
        if (get_column(PyTuple_GET_ITEM(obj, j + 1), &cols[j], 0, names[j]) < 0) {
            return -1;
        }
    }
    const int64_t *off = cols[0].view.buf;
    Py_ssize_t nb = *block >= 1 ? (n + *block - 1) / *block : -1;
    int bad = nb < 0 || cols[0].n != nb + 1 || cols[1].n != nb || cols[2].n != cols[3].n
        || off[0] != 0 || off[nb] != cols[2].n;
    for (Py_ssize_t k = 0; !bad && k < nb; k++) {
        bad = off[k + 1] < off[k];
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "window_cells: block sums of unexpected lengths");
        return -1;
    }
    return 0;
}

enum { WC_KEY, WC_DEPTH, WC_EV_ROW, WC_DUR, WC_IDS, WC_A, WC_B, WC_ROWS, WC_BEFORE,
       WC_BEFORE_OFF, WC_INNER, WC_N };

static PyObject *
window_cells(PyObject *self, PyObject *args)
{
    PyObject *o[WC_N];
    int bits;
    long long w_, span_;
    PyObject *origin_o = Py_None, *pieces_o = Py_None, *sums_o = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOiLL|OOO", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &bits, &w_, &span_,
                          &origin_o, &pieces_o, &sums_o)) {
        return NULL;
    }
    Column bs[4];  /* block_sums' off, longest, rc, cov */
    memset(bs, 0, sizeof(bs));
    Py_ssize_t sums_block = 0;
    PieceMap pm = {0};
    int64_t unused_mask = 0, origin = 0;
    const int by_start = origin_o != Py_None, identity = o[WC_EV_ROW] == Py_None;
    if (start_mode(origin_o, &unused_mask, &origin) < 0) {
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
        if (got == WC_EV_ROW && identity) {
            continue;  /* position p is table row p */
        }
        if (got == WC_DEPTH || got == WC_EV_ROW || got == WC_DUR) {
            /* 4- or 8-byte integers, read as they are */
            if (get_ints(o[got], &col[got], 0, names[got]) < 0) {
                goto done;
            }
        } else if (get_column(o[got], &col[got], 0, names[got]) < 0) {
            goto done;
        }
    }
    Py_ssize_t n = col[WC_DEPTH].n, k_tracks = col[WC_IDS].n, w = (Py_ssize_t)w_;
    if (col[WC_KEY].n != (by_start ? col[WC_DUR].n : n)
        || (!identity && col[WC_EV_ROW].n != n)
        || (identity && pieces_o == Py_None && n > col[WC_DUR].n) || col[WC_A].n != k_tracks
        || col[WC_B].n != k_tracks || col[WC_ROWS].n != k_tracks
        || col[WC_BEFORE_OFF].n != k_tracks + 1 || w < 1 || col[WC_INNER].n != w - 1
        || bits < 1 || bits > 62) {
        PyErr_SetString(PyExc_ValueError, "window_cells: columns of unexpected lengths");
        goto done;
    }
    if ((!identity && pieces_o != Py_None)
        || get_pieces(pieces_o, &pm, n, col[WC_DUR].n) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "window_cells: table rows or pieces, not both");
        }
        goto done;
    }
    const int64_t *key = col[WC_KEY].view.buf;
    const void *dur = col[WC_DUR].view.buf;
    const void *depth = col[WC_DEPTH].view.buf, *ev_row = col[WC_EV_ROW].view.buf;
    Py_ssize_t dsize = col[WC_DEPTH].view.itemsize;
    Py_ssize_t esize = identity ? 8 : col[WC_EV_ROW].view.itemsize;
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
    if (sums_o != Py_None && get_block_sums(sums_o, bs, &sums_block, n) < 0) {
        goto done;
    }
    s.block = sums_block;
    s.b_off = bs[0].view.buf;
    s.b_max = bs[1].view.buf;
    s.b_rc = bs[2].view.buf;
    s.b_cov = bs[3].view.buf;
    s.n_dur = col[WC_DUR].n;
    s.pieces = pm.on ? &pm : NULL;
    s.dur_size = col[WC_DUR].view.itemsize;
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
        /* The keys: the track in the high bits, or (by_start) the table's own starts. An inner
         * edge is below 1 << bits, so OR and + agree on the composite keys. */
        const uint64_t base = by_start ? (uint64_t)origin : (uint64_t)ids[i] << bits;
        Py_ssize_t pos = a[i], end_all = b[i] > a[i] ? b[i] : a[i];
        for (Py_ssize_t c = 0; c < w && rc == SEG_OK; c++) {
            const int64_t needle = (int64_t)(base + (uint64_t)inner[c]);
            Py_ssize_t end = c == w - 1 ? end_all
                : by_start && (!identity || pm.on)
                ? edge_after_rows(key, col[WC_KEY].n, identity ? NULL : ev_row, esize, &pm,
                                  pos, end_all, needle)
                : edge_after(key, pos, end_all, needle);
            if (end < 0) {
                rc = SEG_BAD;
                break;
            }
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
    release_pieces(&pm);
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
    for (int j = 0; j < 4; j++) {
        if (bs[j].view.obj) PyBuffer_Release(&bs[j].view);
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
     "the table's durations, int32 or int64), each one's row written into depth (int32) and "
     "per block "
     "of events the latest end (start + max(dur, 1)) into block_end (int64). rows None: "
     "position i is table row i; origin (optional) given: key is the table's own starts "
     "(int64), read through the rows, relative to origin."},
    {"line_counts", line_counts, METH_VARARGS,
     "line_counts(line, start, dur, count): per line (int16 or int32 codes; dur int32 or "
     "int64) its events "
     "added into count (int64, one per line); returns the latest start + max(dur, 1)."},
    {"sums_before", sums_before, METH_VARARGS,
     "sums_before(dur, order, block_cum, block, pos, out): per position in order (int32 or "
     "int64 rows into dur, int32 or int64), the durations (none negative) before it summed: "
     "block_cum[pos // "
     "block] plus its block's events before it; written into out (int64). order None: "
     "the durations' own order."},
    {"order_by_key", order_by_key, METH_VARARGS,
     "order_by_key(key, end, order, sorted, max_runs): the rows of key (int64) in key order "
     "(end: int64, or int32 durations) "
     "(equal keys: the later end, or longer length, first (at least 1), then by row) into order "
     "(int64; int32 too where key is in order already), the keys so into sorted; "
     "the ascending runs of key merged. Returns how many runs, or -1 (nothing written) "
     "where there are more than max_runs. sorted None: where key is one run (in order "
     "already: its own sorted copy) order is written, else -2 (nothing written)."},
    {"block_sums", block_sums, METH_VARARGS,
     "block_sums(depth, rows, duration, block, off, longest, rc, cov, pieces=None): per "
     "block of `block` positions (depth: each position's row; rows: its table row into "
     "duration, or None: the position, or its piece's), the events' count and summed "
     "durations per row and the longest duration, written into the int64 columns off "
     "(blocks + 1), longest (blocks) and rc, cov (16 a block at least): block k's entries "
     "are off[k] to off[k + 1], each rc = row << 32 | count with its durations' sum in "
     "cov; longest -1: the block has no sums (more than 16 rows, a negative duration or a "
     "row out of range). Returns how many entries. For window_cells' `sums`."},
    {"window_cells", window_cells, METH_VARARGS,
     "window_cells(key, depth, ev_row, duration, ids, a, b, rows, before, before_off, inner, "
     "bits, width, span): per track ids[i] (rows[i] rows), its events at positions "
     "before[before_off[i]:before_off[i+1]] then a[i] to b[i] (start order), each event's "
     "pixel column how many of inner (the inner column boundaries) are at or before its "
     "start: those a pixel wide (duration * width >= span; span < 0: none) listed, the others "
     "counted and their durations (int32 or int64) summed per (row, column). Returns (wide, "
     "cells) as bytes "
     "of int64 records: (track, position) by track, row, position; (track, row, column, "
     "count, covered) by track, row, column. ev_row None: position p is table row p; "
     "origin (optional) given: key is the table's own starts (int64), read through ev_row, "
     "relative to origin. sums (optional): (block, *block_sums(...)) of these positions: a "
     "whole block in one column with none of its events a pixel wide is added from them."},
    {"stat_flows", stat_flows, METH_VARARGS,
     "stat_flows(name, kind, event, value, slot, keep, line, off, producers, src, dst, "
     "k_int64, k_uint64): the producer -> consumer flows of the stat table (slot per name "
     "code: 0 _p, 1 _c, 2 _pt, 3 _ct, -1 none; events kept: keep[e] and not off[line[e]]). "
     "src None: (producers, consumers) kept, or None where the stats are not by event. "
     "Else each consumer (in table order) to the first producer of its type and id unless "
     "itself, written into src and dst; returns how many."},
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
