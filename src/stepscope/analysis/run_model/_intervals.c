/* Interval nesting in one pass: the compiled twin of intervals.parents and intervals.self_times
 * (the same answers, by the same rule); the union of intervals, the twin of intervals.merged
 * (see merge below); and the call paths of nested calls, the twin of python_views._paths
 * (see paths below).
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
 * positions in that order; parent: a writable int32 or int64 column as long (int32 where every
 * position fits), or None; self: a writable int64 column as long, or None. Writes each
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
        (parent_o != Py_None && get_ints(parent_o, &parent, 4 | 8, 1, "parent") < 0) ||
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
    void *par = parent_o != Py_None ? parent.view.buf : NULL;
    const int par_size = parent.size;
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
            if (par != NULL) {
                if (par_size == 4) ((int32_t *)par)[i] = (int32_t)p;
                else ((int64_t *)par)[i] = p;
            }
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

/* A hash map of (node, name) pairs to a number, open addressing: a level's distinct pairs. */
typedef struct {
    int64_t *up, *name, *value; /* value -1: empty slot */
    Py_ssize_t cap, len;
} PairMap;

static inline uint64_t
pair_hash(int64_t a, int64_t b)
{
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)b + 0x632BE59BD9B4E019ULL);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 32);
}

static int
pairs_init(PairMap *m, Py_ssize_t cap)
{
    m->cap = cap;
    m->len = 0;
    m->up = malloc((size_t)cap * sizeof(int64_t));
    m->name = malloc((size_t)cap * sizeof(int64_t));
    m->value = malloc((size_t)cap * sizeof(int64_t));
    if (m->up == NULL || m->name == NULL || m->value == NULL) return -1;
    for (Py_ssize_t i = 0; i < cap; i++) m->value[i] = -1;
    return 0;
}

static void
pairs_free(PairMap *m)
{
    free(m->up);
    free(m->name);
    free(m->value);
    m->up = m->name = m->value = NULL;
}

/* The slot of (a, b): where it is, or the empty slot where it would go. */
static Py_ssize_t
pairs_slot(const PairMap *m, int64_t a, int64_t b)
{
    Py_ssize_t mask = m->cap - 1, at = (Py_ssize_t)(pair_hash(a, b) & (uint64_t)mask);
    while (m->value[at] >= 0 && (m->up[at] != a || m->name[at] != b)) at = (at + 1) & mask;
    return at;
}

/* (a, b) kept (numbered in order of first sight); -1 out of memory. */
static int
pairs_add(PairMap *m, int64_t a, int64_t b)
{
    if (2 * (m->len + 1) > m->cap) {
        PairMap bigger;
        if (pairs_init(&bigger, 2 * m->cap) < 0) {
            pairs_free(&bigger);
            return -1;
        }
        for (Py_ssize_t i = 0; i < m->cap; i++) {
            if (m->value[i] < 0) continue;
            Py_ssize_t at = pairs_slot(&bigger, m->up[i], m->name[i]);
            bigger.up[at] = m->up[i];
            bigger.name[at] = m->name[i];
            bigger.value[at] = m->value[i];
        }
        bigger.len = m->len;
        pairs_free(m);
        *m = bigger;
    }
    Py_ssize_t at = pairs_slot(m, a, b);
    if (m->value[at] < 0) {
        m->up[at] = a;
        m->name[at] = b;
        m->value[at] = m->len++;
    }
    return 0;
}

typedef struct {
    int64_t up, name;
    Py_ssize_t slot;
} PairRef;

static int
pair_cmp(const void *x, const void *y)
{
    const PairRef *a = x, *b = y;
    if (a->up != b->up) return a->up < b->up ? -1 : 1;
    if (a->name != b->name) return a->name < b->name ? -1 : 1;
    return 0;
}

/* paths(parent, name, node) -> (bytes, bytes)
 *
 * Items (calls) grouped by call path, a nesting level at a time, as python_views._paths does
 * it: parent holds each item's parent item (-1: a root; 4- or 8-byte integers), name its
 * name code (>= 0; integers of any width). Writes each item's node into node (4- or 8-byte,
 * writable) and gives each node's parent node (-1 at the roots) and name code, as int64 bytes.
 * Nodes are numbered a level at a time, the roots' first, and within a level by (parent node,
 * name): the NumPy twin's order. Its memory: 8 bytes an item (a depth and a place in the
 * level order, or a depth and the chain being walked), and a level's distinct paths. */
static PyObject *
paths(PyObject *self_mod, PyObject *args)
{
    PyObject *parent_o, *name_o, *node_o;
    if (!PyArg_ParseTuple(args, "OOO", &parent_o, &name_o, &node_o)) {
        return NULL;
    }
    Column parent = {0}, name = {0}, node = {0};
    PyObject *result = NULL;
    int32_t *depth = NULL, *stack = NULL, *order = NULL;
    Py_ssize_t *bounds = NULL;
    int64_t *out_up = NULL, *out_name = NULL;
    PairRef *refs = NULL;
    PairMap map = {0};
    Py_ssize_t made = 0, out_cap = 0;
    if (get_ints(parent_o, &parent, 4 | 8, 0, "parent") < 0 ||
        get_ints(name_o, &name, 1 | 2 | 4 | 8, 0, "name") < 0 ||
        get_ints(node_o, &node, 4 | 8, 1, "node") < 0) {
        goto done;
    }
    Py_ssize_t n = parent.n;
    if (name.n != n || node.n != n) {
        PyErr_SetString(PyExc_ValueError, "paths: columns of different lengths");
        goto done;
    }
    if (n > INT32_MAX) { /* a table's rows are fewer */
        PyErr_SetString(PyExc_ValueError, "paths: more than 2**31 items");
        goto done;
    }
    int bad = 0, nomem = 0;
    Py_ssize_t levels = 0;
    Py_BEGIN_ALLOW_THREADS
    depth = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    stack = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (depth == NULL || stack == NULL) nomem = 1;
    for (Py_ssize_t i = 0; i < n && !nomem && !bad; i++) {
        int64_t v = int_at(name.view.buf, name.size, i), p = int_at(parent.view.buf, parent.size, i);
        if (v < 0 || p < -1 || p >= n) bad = 1;
        depth[i] = -1;
    }
    /* Depths: up each chain to a root or a known depth, then back down it. */
    for (Py_ssize_t i = 0; i < n && !nomem && !bad; i++) {
        Py_ssize_t top = 0, at = i;
        while (at >= 0 && depth[at] < 0) {
            if (top == n) { /* a cycle: no item is its own ancestor */
                bad = 1;
                break;
            }
            stack[top++] = (int32_t)at;
            at = (Py_ssize_t)int_at(parent.view.buf, parent.size, at);
        }
        if (bad) break;
        int32_t d = at >= 0 ? depth[at] : -1;
        while (top) depth[stack[--top]] = ++d;
        if (d + 1 > levels) levels = d + 1;
    }
    free(stack);
    stack = NULL;
    /* The items by level, in item order within each (a counting sort). */
    if (!nomem && !bad) {
        bounds = calloc((size_t)levels + 1, sizeof(Py_ssize_t));
        order = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
        if (bounds == NULL || order == NULL) nomem = 1;
    }
    if (!nomem && !bad) {
        for (Py_ssize_t i = 0; i < n; i++) bounds[depth[i] + 1]++;
        for (Py_ssize_t l = 0; l < levels; l++) bounds[l + 1] += bounds[l];
        for (Py_ssize_t i = 0; i < n; i++) order[bounds[depth[i]]++] = (int32_t)i;
        for (Py_ssize_t l = levels; l > 0; l--) bounds[l] = bounds[l - 1];
        bounds[0] = 0;
    }
    free(depth);
    depth = NULL;
    if (!nomem && !bad && pairs_init(&map, 64) < 0) nomem = 1;
    for (Py_ssize_t l = 0; l < levels && !nomem && !bad; l++) {
        Py_ssize_t lo = bounds[l], hi = bounds[l + 1];
        map.len = 0;
        for (Py_ssize_t k = 0; k < map.cap; k++) map.value[k] = -1;
        for (Py_ssize_t k = lo; k < hi; k++) {
            Py_ssize_t i = order[k];
            int64_t up = l ? int_at(node.view.buf, node.size,
                                    (Py_ssize_t)int_at(parent.view.buf, parent.size, i)) : -1;
            if (pairs_add(&map, up, int_at(name.view.buf, name.size, i)) < 0) {
                nomem = 1;
                break;
            }
        }
        if (nomem) break;
        /* The level's paths in (parent node, name) order: their nodes, numbered on. */
        PairRef *r = realloc(refs, (size_t)(map.len ? map.len : 1) * sizeof(PairRef));
        if (r == NULL) {
            nomem = 1;
            break;
        }
        refs = r;
        Py_ssize_t m = 0;
        for (Py_ssize_t k = 0; k < map.cap; k++) {
            if (map.value[k] >= 0) {
                refs[m].up = map.up[k];
                refs[m].name = map.name[k];
                refs[m].slot = k;
                m++;
            }
        }
        qsort(refs, (size_t)m, sizeof(PairRef), pair_cmp);
        if (made + m > out_cap) {
            Py_ssize_t cap = out_cap ? out_cap : 64;
            while (cap < made + m) cap *= 2;
            int64_t *a = realloc(out_up, (size_t)cap * sizeof(int64_t));
            if (a == NULL) { nomem = 1; break; }
            out_up = a;
            int64_t *b = realloc(out_name, (size_t)cap * sizeof(int64_t));
            if (b == NULL) { nomem = 1; break; }
            out_name = b;
            out_cap = cap;
        }
        for (Py_ssize_t j = 0; j < m; j++) {
            out_up[made + j] = refs[j].up;
            out_name[made + j] = refs[j].name;
            map.value[refs[j].slot] = made + j;
        }
        for (Py_ssize_t k = lo; k < hi; k++) {
            Py_ssize_t i = order[k];
            int64_t up = l ? int_at(node.view.buf, node.size,
                                    (Py_ssize_t)int_at(parent.view.buf, parent.size, i)) : -1;
            int64_t v = map.value[pairs_slot(&map, up, int_at(name.view.buf, name.size, i))];
            if (node.size == 4) ((int32_t *)node.view.buf)[i] = (int32_t)v;
            else ((int64_t *)node.view.buf)[i] = v;
        }
        made += m;
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
    } else if (bad) {
        PyErr_SetString(PyExc_ValueError,
                        "paths: a name below 0, a parent out of range, or a cycle of parents");
    } else {
        result = Py_BuildValue("(y#y#)", (const char *)out_up, made * (Py_ssize_t)sizeof(int64_t),
                               (const char *)out_name, made * (Py_ssize_t)sizeof(int64_t));
    }
done:
    free(depth);
    free(stack);
    free(order);
    free(bounds);
    free(refs);
    free(out_up);
    free(out_name);
    pairs_free(&map);
    release(&parent);
    release(&name);
    release(&node);
    return result;
}

/* merge(group, start, end, order, seg_group, seg_start, seg_end) -> int
 *
 * The union of each group's intervals as disjoint segments, as intervals.merged gives them:
 * order holds the positions (4- or 8-byte) of the intervals that are not empty (end > start)
 * by (group, start); a segment begins where an interval of a new group, or one starting
 * after every earlier one of its group ended, comes. Gives the number of segments; where
 * seg_group, seg_start and seg_end (writable int64 columns at least that long) are given,
 * writes the segments' group, start and end there (else only counts: the caller sizes them). */
static PyObject *
merge(PyObject *self_mod, PyObject *args)
{
    PyObject *group_o, *start_o, *end_o, *order_o, *g_o, *s_o, *e_o;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &group_o, &start_o, &end_o, &order_o, &g_o, &s_o,
                          &e_o)) {
        return NULL;
    }
    Column group = {0}, start = {0}, end = {0}, order = {0}, og = {0}, os = {0}, oe = {0};
    PyObject *result = NULL;
    int write = g_o != Py_None;
    if (get_ints(group_o, &group, 1 | 2 | 4 | 8, 0, "group") < 0 ||
        get_ints(start_o, &start, 8, 0, "start") < 0 || get_ints(end_o, &end, 8, 0, "end") < 0 ||
        get_ints(order_o, &order, 4 | 8, 0, "order") < 0 ||
        (write && (get_ints(g_o, &og, 8, 1, "seg_group") < 0 ||
                   get_ints(s_o, &os, 8, 1, "seg_start") < 0 ||
                   get_ints(e_o, &oe, 8, 1, "seg_end") < 0))) {
        goto done;
    }
    Py_ssize_t n = start.n, m = order.n;
    if (group.n != n || end.n != n || m > n ||
        (write && (os.n != og.n || oe.n != og.n))) {
        PyErr_SetString(PyExc_ValueError, "merge: columns of mismatched lengths");
        goto done;
    }
    const int64_t *s = start.view.buf, *e = end.view.buf;
    int64_t *sg = write ? og.view.buf : NULL, *ss = write ? os.view.buf : NULL;
    int64_t *se = write ? oe.view.buf : NULL;
    Py_ssize_t cap = write ? og.n : 0, count = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t g_prev = 0, reach = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = int_at(order.view.buf, order.size, k);
        if (i < 0 || i >= n) {
            bad = 1;
            break;
        }
        int64_t g = int_at(group.view.buf, group.size, (Py_ssize_t)i);
        if (k == 0 || g != g_prev || s[i] > reach) {
            if (write) {
                if (count >= cap) {
                    bad = 2;
                    break;
                }
                sg[count] = g;
                ss[count] = s[i];
            }
            count++;
            g_prev = g;
            reach = e[i];
        } else if (e[i] > reach) {
            reach = e[i];
        }
        if (write) se[count - 1] = reach;
    }
    Py_END_ALLOW_THREADS
    if (bad == 1) {
        PyErr_SetString(PyExc_ValueError, "merge: an order position out of range");
    } else if (bad == 2) {
        PyErr_SetString(PyExc_ValueError, "merge: more segments than the columns hold");
    } else {
        result = PyLong_FromSsize_t(count);
    }
done:
    release(&group);
    release(&start);
    release(&end);
    release(&order);
    release(&og);
    release(&os);
    release(&oe);
    return result;
}

static PyMethodDef methods[] = {
    {"nest", nest, METH_VARARGS,
     "nest(group, start, end, order, parent, self) -> bool: each interval's parent and self "
     "time in one walk in nesting order (False, nothing written, where order is None and the "
     "intervals are not in that order)."},
    {"merge", merge, METH_VARARGS,
     "merge(group, start, end, order, seg_group, seg_start, seg_end) -> int: the union of "
     "each group's intervals as disjoint segments (counted only where seg_group is None)."},
    {"paths", paths, METH_VARARGS,
     "paths(parent, name, node) -> (bytes, bytes): items grouped by call path a level at a "
     "time (each item's node written; each node's parent node and name as int64 bytes)."},
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
