/* The trace viewer's row layout, per track, in one pass over the events in start order.
 *
 * The compiled twin of trace_index._overlapping_rows (the same rows, by the same rule): each
 * event goes to the lowest row that is free when it starts and lies below every running event
 * that contains it, so nested events get their nesting depth and overlapping ones the lowest
 * free row. Per row the end of its last event is kept in two segment trees over the rows (one
 * of minima, one of maxima); O(n log rows). The GIL is released while it runs.
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

/* A contiguous column of int64 (writable when asked). */
static int
get_column(PyObject *obj, Column *col, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &col->view, flags) < 0) {
        return -1;
    }
    if (col->view.itemsize != 8) {
        PyErr_Format(PyExc_TypeError, "%s must hold 8-byte integers", what);
        PyBuffer_Release(&col->view);
        col->view.obj = NULL;
        return -1;
    }
    col->n = col->view.len / 8;
    return 0;
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

/* Rows of the events [a, b) of one track, given in start order. 0 when out of memory. */
static int
track_rows(const int64_t *start, const int64_t *end, Py_ssize_t a, Py_ssize_t b, Trees *t,
           int64_t *out)
{
    trees_reset(t, 64);
    for (Py_ssize_t i = a; i < b; i++) {
        int64_t s = start[i], e = end[i];
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
                return 0;
            }
        }
        out[i] = r;
        Py_ssize_t j = r + cap;
        t->lo[j] = t->hi[j] = e;
        for (j >>= 1; j; j >>= 1) {
            int64_t x = t->lo[2 * j], y = t->lo[2 * j + 1];
            t->lo[j] = x < y ? x : y;
            x = t->hi[2 * j];
            y = t->hi[2 * j + 1];
            t->hi[j] = x > y ? x : y;
        }
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
    int ok = trees.lo && trees.hi;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; ok && t < tracks; t++) {
        ok = track_rows(s, e, (Py_ssize_t)o[t], (Py_ssize_t)o[t + 1], &trees, out.view.buf);
    }
    Py_END_ALLOW_THREADS
    free(trees.lo);
    free(trees.hi);
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

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "rows(start, end, offsets, out): each event's row, per track (events offsets[t] to "
     "offsets[t+1], in start order), written into out (int64)."},
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
