/* Interval nesting in one pass: the compiled twin of intervals.parents and intervals.self_times
 * (the same answers, by the same rule).
 *
 * The NumPy twin sorts every interval by (group, start, the longer first), finds each one's
 * depth (how many earlier intervals of its group end after it starts) with a sort of the ends
 * and a search per interval, then each one's parent (the last earlier interval one level up,
 * kept when it ends after the child starts) a level at a time. Each of those steps holds one
 * or two columns as long as the intervals: several times the memory of the answer.
 *
 * Here one walk in that order keeps a min-heap of the ends of the group's earlier intervals
 * (those that end by an interval's start are popped: what is left is its depth) and, per depth,
 * the last interval seen there. Its memory is the answer and the deepest nesting (the heap and
 * the levels), O(n log depth) time. Intervals come in that order already where a table's
 * events do (a thread's events in time order, the parent first): the order is checked in one
 * pass, and only where it does not hold is a sort made (by the caller, who passes it in).
 * The GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    Py_ssize_t n;
    int size; /* bytes an item */
} Column;

static void
release(Column *c)
{
    if (c->view.obj != NULL) {
        PyBuffer_Release(&c->view);
        c->view.obj = NULL;
    }
}

/* A contiguous column of integers of one of the sizes in `sizes` (a mask of 1, 2, 4, 8). */
static int
get_ints(PyObject *obj, Column *col, int sizes, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &col->view, flags) < 0) {
        return -1;
    }
    Py_ssize_t size = col->view.itemsize;
    const char *f = col->view.format ? col->view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (!(f[0] != '\0' && f[1] == '\0' && strchr("bhilq", f[0]) != NULL) ||
        !((size == 1 && (sizes & 1)) || (size == 2 && (sizes & 2)) ||
          (size == 4 && (sizes & 4)) || (size == 8 && (sizes & 8)))) {
        PyErr_Format(PyExc_TypeError, "%s must hold signed integers of 1, 2, 4 or 8 bytes "
                     "as asked", what);
        release(col);
        return -1;
    }
    col->size = (int)size;
    col->n = col->view.len / size;
    return 0;
}

static inline int64_t
int_at(const void *buf, int size, Py_ssize_t i)
{
    switch (size) {
    case 1: return ((const int8_t *)buf)[i];
    case 2: return ((const int16_t *)buf)[i];
    case 4: return ((const int32_t *)buf)[i];
    default: return ((const int64_t *)buf)[i];
    }
}

/* A growable int64 array. */
typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} Grow;

static int
grow_to(Grow *g, Py_ssize_t need)
{
    if (need <= g->cap) return 0;
    Py_ssize_t cap = g->cap ? g->cap : 64;
    while (cap < need) cap *= 2;
    int64_t *data = realloc(g->data, (size_t)cap * sizeof(int64_t));
    if (data == NULL) return -1;
    g->data = data;
    g->cap = cap;
    return 0;
}

static void
heap_pop(Grow *h)
{
    int64_t *a = h->data;
    Py_ssize_t n = --h->len, i = 0;
    int64_t last = a[n];
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && a[c + 1] < a[c]) c++;
        if (a[c] >= last) break;
        a[i] = a[c];
        i = c;
    }
    if (n) a[i] = last;
}

static int
heap_push(Grow *h, int64_t v)
{
    if (grow_to(h, h->len + 1) < 0) return -1;
    int64_t *a = h->data;
    Py_ssize_t i = h->len++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (a[p] <= v) break;
        a[i] = a[p];
        i = p;
    }
    a[i] = v;
    return 0;
}

/* The nesting order: by group, then start, then the later end first (ties: as given). */
static int
in_nest_order(const Column *g, const int64_t *s, const int64_t *e, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++) {
        int64_t ga = int_at(g->view.buf, g->size, i - 1), gb = int_at(g->view.buf, g->size, i);
        if (ga != gb) {
            if (ga > gb) return 0;
            continue;
        }
        if (s[i - 1] != s[i]) {
            if (s[i - 1] > s[i]) return 0;
            continue;
        }
        int64_t ea = e[i - 1] > s[i - 1] ? e[i - 1] : s[i - 1];
        int64_t eb = e[i] > s[i] ? e[i] : s[i];
        if (ea < eb) return 0;
    }
    return 1;
}

/* nest(group, start, end, order, parent, self) -> bool
 *
 * group: integers of 1, 2, 4 or 8 bytes; start, end: int64; order: None (the intervals are in
 * nesting order: False is returned, nothing written, where they are not) or 4- or 8-byte
 * positions in that order; parent, self: writable int64 columns as long, or None. Writes each
 * interval's parent (-1: none) and its self time (its length less its children's, clipped to
 * it; never below 0), as intervals.parents and intervals.self_times give them. */
static PyObject *
nest(PyObject *self_mod, PyObject *args)
{
    PyObject *group_o, *start_o, *end_o, *order_o, *parent_o, *self_o;
    if (!PyArg_ParseTuple(args, "OOOOOO", &group_o, &start_o, &end_o, &order_o, &parent_o,
                          &self_o)) {
        return NULL;
    }
    Column group = {0}, start = {0}, end = {0}, order = {0}, parent = {0}, own = {0};
    PyObject *result = NULL;
    Grow heap = {0}, level = {0};
    if (get_ints(group_o, &group, 1 | 2 | 4 | 8, 0, "group") < 0 ||
        get_ints(start_o, &start, 8, 0, "start") < 0 || get_ints(end_o, &end, 8, 0, "end") < 0 ||
        (order_o != Py_None && get_ints(order_o, &order, 4 | 8, 0, "order") < 0) ||
        (parent_o != Py_None && get_ints(parent_o, &parent, 8, 1, "parent") < 0) ||
        (self_o != Py_None && get_ints(self_o, &own, 8, 1, "self") < 0)) {
        goto done;
    }
    Py_ssize_t n = start.n;
    if (group.n != n || end.n != n || (order_o != Py_None && order.n != n) ||
        (parent_o != Py_None && parent.n != n) || (self_o != Py_None && own.n != n)) {
        PyErr_SetString(PyExc_ValueError, "nest: columns of different lengths");
        goto done;
    }
    const int64_t *s = start.view.buf, *e = end.view.buf;
    int64_t *par = parent_o != Py_None ? parent.view.buf : NULL;
    int64_t *slf = self_o != Py_None ? own.view.buf : NULL;
    const void *ord = order_o != Py_None ? order.view.buf : NULL;
    int in_order = 1, bad = 0, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    if (ord == NULL) {
        in_order = in_nest_order(&group, s, e, n);
    } else {
        for (Py_ssize_t k = 0; k < n; k++) {
            int64_t i = int_at(ord, order.size, k);
            if (i < 0 || i >= n) {
                bad = 1;
                break;
            }
        }
    }
    if (in_order && !bad) {
        if (slf != NULL) {
            for (Py_ssize_t i = 0; i < n; i++) slf[i] = e[i] > s[i] ? e[i] - s[i] : 0;
        }
        int64_t g_prev = 0;
        Py_ssize_t levels_used = 0; /* levels set in this group: reset at the next */
        for (Py_ssize_t k = 0; k < n; k++) {
            Py_ssize_t i = ord ? (Py_ssize_t)int_at(ord, order.size, k) : k;
            int64_t g = int_at(group.view.buf, group.size, i);
            if (k == 0 || g != g_prev) {
                heap.len = 0;
                for (Py_ssize_t d = 0; d < levels_used; d++) level.data[d] = -1;
                levels_used = 0;
                g_prev = g;
            }
            int64_t si = s[i], ei = e[i] > si ? e[i] : si;
            while (heap.len && heap.data[0] <= si) heap_pop(&heap);
            Py_ssize_t depth = heap.len;
            int64_t p = -1;
            if (depth >= 1 && depth - 1 < levels_used && level.data[depth - 1] >= 0) {
                int64_t j = level.data[depth - 1];
                int64_t ej = e[j] > s[j] ? e[j] : s[j];
                if (ej > si) p = j;
            }
            if (par != NULL) par[i] = p;
            if (slf != NULL && p >= 0) {
                int64_t cut = (e[i] < e[p] ? e[i] : e[p]) - si;
                if (cut > 0) slf[p] -= cut;
            }
            if (depth >= levels_used) {
                if (grow_to(&level, depth + 1) < 0) {
                    nomem = 1;
                    break;
                }
                for (Py_ssize_t d = levels_used; d <= depth; d++) level.data[d] = -1;
                levels_used = depth + 1;
            }
            level.data[depth] = (int64_t)i;
            if (heap_push(&heap, ei) < 0) {
                nomem = 1;
                break;
            }
        }
        if (slf != NULL && !nomem) {
            for (Py_ssize_t i = 0; i < n; i++) {
                if (slf[i] < 0) slf[i] = 0;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
    } else if (bad) {
        PyErr_SetString(PyExc_ValueError, "nest: an order position out of range");
    } else {
        result = PyBool_FromLong(in_order);
    }
done:
    free(heap.data);
    free(level.data);
    release(&group);
    release(&start);
    release(&end);
    release(&order);
    release(&parent);
    release(&own);
    return result;
}

static PyMethodDef methods[] = {
    {"nest", nest, METH_VARARGS,
     "nest(group, start, end, order, parent, self) -> bool: each interval's parent and self "
     "time in one walk in nesting order (False, nothing written, where order is None and the "
     "intervals are not in that order)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_intervals",
    "Interval nesting in one pass (the compiled twin of intervals.parents and self_times).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__intervals(void)
{
    return PyModule_Create(&module);
}
