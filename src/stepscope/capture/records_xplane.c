/* A session's Records written as XPlane bytes at stop, straight from the chunks.
 *
 * Part of the _fastpath extension; recorder_to_xplane.py drives it, and its pure-Python twin
 * is the columns path there (Records.columns, then xplane_encoder), which gives the same
 * bytes. Three steps per plane:
 *
 * - line_order: a line's kept events (start within [keep_from, keep_until)) in the order
 *   they are written: by start, the longer first, then as recorded. Events are recorded as
 *   they end, so a line without nesting is in order already: a scan finds out (and then
 *   no order is made); events that nest are put in order as a tree in one pass; others
 *   by a radix sort on the start (stable, O(n)). Runs of equal starts are then ordered by
 *   end.
 * - first_uses: the distinct event names, stat keys and string (or object) stat values of
 *   the kept events, in order of first use over the lines (Python turns them into metadata
 *   ids, merging equal texts, and into the bytes of string values).
 * - encode_line: the line's `XLine.events` fields, written in one pass into one bytes
 *   object made large enough, then cut to size. Wire facts as in formats/xplane_encoder.py.
 *
 * No Python code runs here, and the GIL is held throughout: nothing appends to the records
 * meanwhile. Nothing is kept between calls but what Python passes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "records_impl.h"

#include "../formats/protobuf_wire.h" /* XStat value fields, varints */

/* Runs of equal starts up to this long are ordered by insertion, longer ones by qsort. */
#define SHORT_RUN 16

/* ---- ordering -------------------------------------------------------------------------- */

typedef struct {
    int64_t end;
    uint32_t index;
} EndIndex;

/* Longer (later end) first, then as recorded. */
static int
end_index_cmp(const void *a, const void *b)
{
    const EndIndex *x = a, *y = b;
    if (x->end != y->end) {
        return x->end > y->end ? -1 : 1;
    }
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Bits needed for values up to `v`. */
static int
bits_of(uint64_t v)
{
    int bits = 0;
    while (bits < 64 && (v >> bits) != 0) {
        bits++;
    }
    return bits;
}

/* Stable LSD radix sort of (key, idx) by key, 8 bits a pass (256 buckets: few enough
 * places written at once for the caches and the TLB), over the bits the keys' range spans.
 * Where that range and the indices fit in 64 bits together, each pair is one uint64 (key
 * offset above, index below) and only those move. 0, or -1 (out of memory). */
static int
radix_sort(int64_t *key, uint32_t *idx, Py_ssize_t m)
{
    int64_t lo = key[0], hi = key[0];
    for (Py_ssize_t k = 1; k < m; k++) {
        lo = key[k] < lo ? key[k] : lo;
        hi = key[k] > hi ? key[k] : hi;
    }
    int key_bits = bits_of((uint64_t)hi - (uint64_t)lo);
    if (key_bits == 0) {
        return 0;
    }
    int idx_bits = bits_of(idx[m - 1]); /* gathered in index order: the last is largest */
    int packed = key_bits + idx_bits <= 64;
    int shift0 = packed ? idx_bits : 0;
    uint64_t *u = (uint64_t *)key; /* offsets from the smallest: the same order, unsigned */
    for (Py_ssize_t k = 0; k < m; k++) {
        uint64_t off = (uint64_t)key[k] - (uint64_t)lo;
        u[k] = packed ? (off << idx_bits) | idx[k] : off;
    }
    uint64_t *u2 = PyMem_RawMalloc((size_t)m * sizeof(uint64_t));
    uint32_t *idx2 = packed ? NULL : PyMem_RawMalloc((size_t)m * sizeof(uint32_t));
    if (u2 == NULL || (!packed && idx2 == NULL)) {
        PyMem_RawFree(u2);
        PyMem_RawFree(idx2);
        return -1;
    }
    Py_ssize_t count[256];
    uint64_t *src_u = u, *dst_u = u2;
    uint32_t *src_i = idx, *dst_i = idx2;
    for (int shift = shift0; shift < shift0 + key_bits; shift += 8) {
        memset(count, 0, sizeof count);
        for (Py_ssize_t k = 0; k < m; k++) {
            count[(src_u[k] >> shift) & 0xFF]++;
        }
        Py_ssize_t sum = 0;
        for (int d = 0; d < 256; d++) {
            Py_ssize_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        if (packed) {
            for (Py_ssize_t k = 0; k < m; k++) {
                dst_u[count[(src_u[k] >> shift) & 0xFF]++] = src_u[k];
            }
        } else {
            for (Py_ssize_t k = 0; k < m; k++) {
                Py_ssize_t at = count[(src_u[k] >> shift) & 0xFF]++;
                dst_u[at] = src_u[k];
                dst_i[at] = src_i[k];
            }
            uint32_t *ti = src_i;
            src_i = dst_i;
            dst_i = ti;
        }
        uint64_t *tu = src_u;
        src_u = dst_u;
        dst_u = tu;
    }
    uint64_t index_mask = idx_bits >= 64 ? UINT64_MAX : ((uint64_t)1 << idx_bits) - 1;
    for (Py_ssize_t k = 0; k < m; k++) {
        uint64_t v = src_u[k];
        if (packed) {
            idx[k] = (uint32_t)(v & index_mask);
            v >>= idx_bits;
        } else if (src_i != idx) {
            idx[k] = src_i[k];
        }
        key[k] = (int64_t)(v + (uint64_t)lo);
    }
    PyMem_RawFree(u2);
    PyMem_RawFree(idx2);
    return 0;
}

/* Events that nest, recorded as they end (a Trace, a call), come children first: each
 * event follows its descendants. In one pass, each event takes the subtrees already built
 * that began at or after it (its descendants) behind it; the subtrees left, in the order
 * they began, make the order by start. Only where the events do nest is the result
 * ordered, which the caller checks. Writes the order into (idx2, key2); 0, or -1 (out of
 * memory). */
static int
tree_order(const int64_t *key, const uint32_t *idx, Py_ssize_t m, int64_t *key2,
           uint32_t *idx2)
{
    const uint32_t none = UINT32_MAX;
    uint32_t *next = PyMem_RawMalloc((size_t)m * sizeof(uint32_t));
    uint32_t *head = PyMem_RawMalloc((size_t)m * sizeof(uint32_t)); /* the subtrees: a stack */
    uint32_t *tail = PyMem_RawMalloc((size_t)m * sizeof(uint32_t));
    if (next == NULL || head == NULL || tail == NULL) {
        PyMem_RawFree(next);
        PyMem_RawFree(head);
        PyMem_RawFree(tail);
        return -1;
    }
    Py_ssize_t top = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t was = top;
        while (top > 0 && key[head[top - 1]] >= key[k]) {
            top--;
        }
        next[k] = none;
        uint32_t last = (uint32_t)k;
        if (top < was) { /* k, then the subtrees it took, in the order they began */
            next[k] = head[top];
            for (Py_ssize_t j = top; j + 1 < was; j++) {
                next[tail[j]] = head[j + 1];
            }
            last = tail[was - 1];
        }
        head[top] = (uint32_t)k;
        tail[top] = last;
        top++;
    }
    Py_ssize_t out = 0;
    for (Py_ssize_t j = 0; j < top; j++) {
        for (uint32_t p = head[j]; p != none; p = next[p]) {
            key2[out] = key[p];
            idx2[out++] = idx[p];
        }
    }
    PyMem_RawFree(next);
    PyMem_RawFree(head);
    PyMem_RawFree(tail);
    return 0;
}

/* Order (key, idx), gathered in index order, by key: as a tree where the events nest,
 * else by radix sort. 0, or -1 (out of memory). */
static int
sort_by_start(int64_t *key, uint32_t *idx, Py_ssize_t m)
{
    int64_t *key2 = PyMem_RawMalloc((size_t)m * sizeof(int64_t));
    uint32_t *idx2 = PyMem_RawMalloc((size_t)m * sizeof(uint32_t));
    int rc = key2 != NULL && idx2 != NULL ? tree_order(key, idx, m, key2, idx2) : -1;
    if (rc == 0) {
        Py_ssize_t k = 1;
        while (k < m && key2[k - 1] <= key2[k]) {
            k++;
        }
        if (k >= m) { /* they nest */
            memcpy(key, key2, (size_t)m * sizeof(int64_t));
            memcpy(idx, idx2, (size_t)m * sizeof(uint32_t));
        }
        PyMem_RawFree(key2);
        PyMem_RawFree(idx2);
        return k >= m ? 0 : radix_sort(key, idx, m);
    }
    PyMem_RawFree(key2);
    PyMem_RawFree(idx2);
    return -1;
}

/* Order each run of equal starts (in recorded order now) by end, the later first. */
static int
order_ties(RecordsObject *r, const int64_t *key, uint32_t *idx, Py_ssize_t m)
{
    EndIndex small[SHORT_RUN];
    for (Py_ssize_t a = 0; a < m;) {
        Py_ssize_t b = a + 1;
        while (b < m && key[b] == key[a]) {
            b++;
        }
        Py_ssize_t len = b - a;
        if (len > 1) {
            EndIndex *run = len <= SHORT_RUN
                                ? small
                                : PyMem_RawMalloc((size_t)len * sizeof(EndIndex));
            if (run == NULL) {
                return -1;
            }
            int sorted = 1;
            for (Py_ssize_t k = 0; k < len; k++) {
                uint32_t i = idx[a + k];
                run[k].index = i;
                run[k].end = event_end(r, i, event_at(&r->events, i));
                if (k > 0 && end_index_cmp(&run[k - 1], &run[k]) > 0) {
                    sorted = 0;
                }
            }
            if (!sorted) {
                if (len <= SHORT_RUN) {
                    for (Py_ssize_t k = 1; k < len; k++) {
                        EndIndex x = run[k];
                        Py_ssize_t j = k;
                        for (; j > 0 && end_index_cmp(&run[j - 1], &x) > 0; j--) {
                            run[j] = run[j - 1];
                        }
                        run[j] = x;
                    }
                } else {
                    qsort(run, (size_t)len, sizeof(EndIndex), end_index_cmp);
                }
                for (Py_ssize_t k = 0; k < len; k++) {
                    idx[a + k] = run[k].index;
                }
            }
            if (run != small) {
                PyMem_RawFree(run);
            }
        }
        a = b;
    }
    return 0;
}

static PyObject *
line_order(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *obj, *from_obj, *until_obj;
    if (!PyArg_ParseTuple(args, "OOO:line_order", &obj, &from_obj, &until_obj)) {
        return NULL;
    }
    /* None: no bound (so INT64_MIN and INT64_MAX are kept too). */
    long long keep_from = LLONG_MIN, keep_until = LLONG_MAX;
    int bounded_until = until_obj != Py_None;
    if ((from_obj != Py_None && (keep_from = PyLong_AsLongLong(from_obj)) == -1 &&
         PyErr_Occurred()) ||
        (bounded_until && (keep_until = PyLong_AsLongLong(until_obj)) == -1 &&
         PyErr_Occurred())) {
        return NULL;
    }
    if (!records_check(obj)) {
        PyErr_SetString(PyExc_TypeError, "line_order takes Records");
        return NULL;
    }
    RecordsObject *r = (RecordsObject *)obj;
    Py_ssize_t n = r->events.n;
    if ((uint64_t)n >= UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "line_order: over 4 billion events on one line");
        return NULL;
    }
    /* A scan first: how many are kept, and whether they are in order already (recorded as
     * they end, events that do not nest are). */
    Py_ssize_t m = 0;
    int in_order = 1;
    int64_t last_start = 0, last_end = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const EventRecord *ev = event_at(&r->events, i);
        if (ev->start < keep_from || (bounded_until && ev->start >= keep_until)) {
            continue;
        }
        if (m > 0 && in_order &&
            (ev->start < last_start ||
             (ev->start == last_start && event_end(r, i, ev) > last_end))) {
            in_order = 0;
        }
        last_start = ev->start;
        last_end = event_end(r, i, ev);
        m++;
    }
    if (in_order && m == n) {
        Py_RETURN_NONE; /* every event, as recorded */
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, m * (Py_ssize_t)sizeof(uint32_t));
    int64_t *key = in_order ? NULL : PyMem_RawMalloc((size_t)(m ? m : 1) * sizeof(int64_t));
    if (out == NULL || (!in_order && key == NULL)) {
        Py_XDECREF(out);
        PyMem_RawFree(key);
        return PyErr_NoMemory();
    }
    uint32_t *idx = (uint32_t *)PyBytes_AS_STRING(out);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t start = event_at(&r->events, i)->start;
        if (start >= keep_from && (start < keep_until || !bounded_until)) {
            if (key != NULL) {
                key[k] = start;
            }
            idx[k++] = (uint32_t)i;
        }
    }
    if (in_order) {
        return out;
    }
    /* The GIL stays held: nothing may append to the records meanwhile. */
    int rc = sort_by_start(key, idx, m);
    if (rc == 0) {
        rc = order_ties(r, key, idx, m);
    }
    PyMem_RawFree(key);
    if (rc < 0) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
}

/* ---- first uses ------------------------------------------------------------------------ */

typedef struct {
    int32_t *ids;
    Py_ssize_t n, capacity;
    uint8_t *seen; /* by Names id */
} FirstUses;

static int
first_use(FirstUses *f, int64_t id, Py_ssize_t nnames)
{
    if (id < 0 || id >= nnames) {
        PyErr_SetString(PyExc_ValueError, "first_uses: a Names id out of range");
        return -1;
    }
    if (f->seen[id]) {
        return 0;
    }
    f->seen[id] = 1;
    if (f->n == f->capacity) {
        Py_ssize_t capacity = f->capacity ? f->capacity * 2 : 64;
        int32_t *grown = PyMem_RawRealloc(f->ids, (size_t)capacity * sizeof(int32_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        f->ids = grown;
        f->capacity = capacity;
    }
    f->ids[f->n++] = (int32_t)id;
    return 0;
}

/* The order of one line: its buffer as uint32 indices, each checked against the records;
 * None is every event as recorded (view->buf NULL, view->len for all of them). */
static int
get_order(PyObject *obj, RecordsObject *r, Py_buffer *view)
{
    if (obj == Py_None) {
        memset(view, 0, sizeof *view);
        view->len = r->events.n * (Py_ssize_t)sizeof(uint32_t);
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    if (view->len % (Py_ssize_t)sizeof(uint32_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "an order holds uint32 indices");
        PyBuffer_Release(view);
        return -1;
    }
    const uint32_t *idx = view->buf;
    Py_ssize_t m = view->len / (Py_ssize_t)sizeof(uint32_t);
    for (Py_ssize_t k = 0; k < m; k++) {
        if ((Py_ssize_t)idx[k] >= r->events.n) {
            PyErr_SetString(PyExc_ValueError, "an order names an event the records lack");
            PyBuffer_Release(view);
            return -1;
        }
    }
    return 0;
}

static inline uint32_t
order_at(const uint32_t *idx, Py_ssize_t k)
{
    return idx != NULL ? idx[k] : (uint32_t)k;
}

static void
release_order(Py_buffer *view)
{
    if (view->buf != NULL) {
        PyBuffer_Release(view);
    }
}

static PyObject *
first_uses(PyObject *Py_UNUSED(module), PyObject *lines)
{
    if (!PyList_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "first_uses takes a list of (Records, order)");
        return NULL;
    }
    Py_ssize_t nnames = -1;
    for (Py_ssize_t l = 0; l < PyList_GET_SIZE(lines); l++) {
        PyObject *item = PyList_GET_ITEM(lines, l);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !records_check(PyTuple_GET_ITEM(item, 0))) {
            PyErr_SetString(PyExc_TypeError, "first_uses takes a list of (Records, order)");
            return NULL;
        }
        NamesObject *names = ((RecordsObject *)PyTuple_GET_ITEM(item, 0))->names;
        Py_ssize_t size = names->objects != NULL ? PyList_GET_SIZE(names->objects) : 0;
        if (nnames >= 0 && size != nnames) {
            PyErr_SetString(PyExc_ValueError, "first_uses: lines of different Names");
            return NULL;
        }
        nnames = size;
    }
    nnames = nnames < 0 ? 0 : nnames;
    FirstUses f[3] = {{0}}; /* names, stat keys, string values */
    PyObject *result = NULL;
    for (int k = 0; k < 3; k++) {
        f[k].seen = PyMem_RawCalloc((size_t)(nnames ? nnames : 1), 1);
        if (f[k].seen == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    for (Py_ssize_t l = 0; l < PyList_GET_SIZE(lines); l++) {
        PyObject *item = PyList_GET_ITEM(lines, l);
        RecordsObject *r = (RecordsObject *)PyTuple_GET_ITEM(item, 0);
        Py_buffer view;
        if (get_order(PyTuple_GET_ITEM(item, 1), r, &view) < 0) {
            goto done;
        }
        const uint32_t *idx = view.buf;
        Py_ssize_t m = view.len / (Py_ssize_t)sizeof(uint32_t);
        int rc = 0;
        for (Py_ssize_t k = 0; k < m && rc == 0; k++) {
            uint32_t i = order_at(idx, k);
            const EventRecord *ev = event_at(&r->events, i);
            rc = first_use(&f[0], ev->name & NAME_MASK, nnames);
            if (ev->name & FLAG_STATS) {
                for (Py_ssize_t row = first_stat_row(r, i);
                     rc == 0 && row < r->stats.n && stat_at(&r->stats, row)->event == i;
                     row++) {
                    const StatRecord *st = stat_at(&r->stats, row);
                    rc = first_use(&f[1], st->key, nnames);
                    if (rc == 0 && (st->kind == STAT_STR || st->kind == STAT_OBJ)) {
                        rc = first_use(&f[2], st->value, nnames);
                    }
                }
            }
        }
        release_order(&view);
        if (rc < 0) {
            goto done;
        }
    }
    result = PyTuple_New(3);
    for (int k = 0; result != NULL && k < 3; k++) {
        PyObject *ids = PyBytes_FromStringAndSize(f[k].n ? (const char *)f[k].ids : "",
                                                  f[k].n * (Py_ssize_t)sizeof(int32_t));
        if (ids == NULL) {
            Py_CLEAR(result);
        } else {
            PyTuple_SET_ITEM(result, k, ids);
        }
    }
done:
    for (int k = 0; k < 3; k++) {
        PyMem_RawFree(f[k].ids);
        PyMem_RawFree(f[k].seen);
    }
    return result;
}

/* ---- encoding -------------------------------------------------------------------------- */

/* The most bytes an event without stats takes: tag, length, three varint fields. */
#define PLAIN_EVENT_MAX (2 + 3 * 11)
/* The most bytes a stat takes but for its string: tag, length, metadata id, value (with a
 * string's length), and what its event's length may take beyond one byte. */
#define STAT_MAX (1 + 10 + 11 + 1 + 10 + 10 + 10)

/* What encode_line was given, checked. */
typedef struct {
    RecordsObject *r;
    uint64_t timestamp_ns;
    const int64_t *md_name, *md_key, *blob_of_value, *blob_begin;
    Py_ssize_t n_md_name, n_md_key, n_blob_of_value, nblobs;
    const int8_t *blob_field;
    const char *blobs;
} Encoding;

/* The XStat value field of a stat and, for a string, its blob; -1 where the stat does not
 * fit what encode_line was given. */
static inline int
stat_field(const Encoding *e, const StatRecord *st, int64_t *blob)
{
    switch (st->kind) {
    case STAT_INT:
    case STAT_BOOL:
        return INT64_VALUE;
    case STAT_UINT:
        return UINT64_VALUE;
    case STAT_DOUBLE:
        return DOUBLE_VALUE;
    case STAT_STR:
    case STAT_OBJ:
        if (st->value < 0 || st->value >= e->n_blob_of_value) {
            return -1;
        }
        *blob = e->blob_of_value[st->value];
        if (*blob < 0 || *blob >= e->nblobs) {
            return -1;
        }
        return e->blob_field[*blob];
    default:
        return -1;
    }
}

/* The size of one stat's XStat message, or 0 where it does not fit what was given. */
static inline size_t
stat_size(const Encoding *e, const StatRecord *st)
{
    int64_t blob = -1;
    int field = stat_field(e, st, &blob);
    if (field < 0 || st->key < 0 || st->key >= e->n_md_key) {
        return 0;
    }
    size_t size = 1 + varint_size((uint64_t)e->md_key[st->key]) + 1;
    if (field == DOUBLE_VALUE) {
        return size + 8;
    }
    if (blob >= 0) {
        uint64_t len = (uint64_t)(e->blob_begin[blob + 1] - e->blob_begin[blob]);
        return size + varint_size(len) + len;
    }
    return size + varint_size((uint64_t)st->value);
}

/* Offset and duration in ps, as the columns path computes them (int64, wrapping). */
static inline void
event_times(const Encoding *e, uint32_t i, const EventRecord *ev, uint64_t *off,
            uint64_t *dur)
{
    uint64_t end = (uint64_t)event_end(e->r, i, ev);
    *off = ((uint64_t)ev->start - e->timestamp_ns) * 1000u;
    *dur = (end - (uint64_t)ev->start) * 1000u;
}

/* The size of one event's XEvent message (its body); 0 with an exception where a stat or
 * name does not fit what was given. `first_row` gets its first stat row. */
static size_t
event_size(const Encoding *e, uint32_t i, const EventRecord *ev, Py_ssize_t *first_row)
{
    uint32_t name = ev->name & NAME_MASK;
    if ((Py_ssize_t)name >= e->n_md_name) {
        PyErr_SetString(PyExc_ValueError, "encode_line: an event name without metadata");
        return 0;
    }
    uint64_t off, dur;
    event_times(e, i, ev, &off, &dur);
    int64_t md = e->md_name[name];
    size_t body = (md != 0 ? 1 + varint_size((uint64_t)md) : 0) + 1 + varint_size(off) +
                  (dur != 0 ? 1 + varint_size(dur) : 0);
    *first_row = -1;
    if (ev->name & FLAG_STATS) {
        const RecordsObject *r = e->r;
        Py_ssize_t row = first_stat_row(r, i);
        *first_row = row;
        for (; row < r->stats.n && stat_at(&r->stats, row)->event == i; row++) {
            size_t st = stat_size(e, stat_at(&r->stats, row));
            if (st == 0) {
                PyErr_SetString(PyExc_ValueError, "encode_line: a stat without metadata");
                return 0;
            }
            body += 1 + varint_size(st) + st;
        }
    }
    return body;
}

static char *
write_event(const Encoding *e, uint32_t i, const EventRecord *ev, size_t body,
            Py_ssize_t row, char *out)
{
    uint64_t off, dur;
    event_times(e, i, ev, &off, &dur);
    int64_t md = e->md_name[ev->name & NAME_MASK];
    *out++ = (4 << 3) | 2; /* XLine.events */
    out = put_varint(out, body);
    if (md != 0) {
        *out++ = (1 << 3) | 0; /* metadata_id */
        out = put_varint(out, (uint64_t)md);
    }
    *out++ = (2 << 3) | 0; /* offset_ps: in a oneof, written even when 0 */
    out = put_varint(out, off);
    if (dur != 0) {
        *out++ = (3 << 3) | 0; /* duration_ps */
        out = put_varint(out, dur);
    }
    if (row < 0) {
        return out;
    }
    const RecordsObject *r = e->r;
    for (; row < r->stats.n && stat_at(&r->stats, row)->event == i; row++) {
        const StatRecord *st = stat_at(&r->stats, row);
        int64_t blob = -1;
        int field = stat_field(e, st, &blob);
        *out++ = (4 << 3) | 2; /* XEvent.stats */
        out = put_varint(out, stat_size(e, st));
        *out++ = (1 << 3) | 0; /* XStat.metadata_id */
        out = put_varint(out, (uint64_t)e->md_key[st->key]);
        if (field == DOUBLE_VALUE) {
            *out++ = (char)((field << 3) | 1);
            uint64_t bits = (uint64_t)st->value;
            for (int k = 0; k < 8; k++) {
                *out++ = (char)(bits >> (8 * k));
            }
        } else if (blob >= 0) {
            int64_t len = e->blob_begin[blob + 1] - e->blob_begin[blob];
            *out++ = (char)((field << 3) | 2);
            out = put_varint(out, (uint64_t)len);
            memcpy(out, e->blobs + e->blob_begin[blob], (size_t)len);
            out += len;
        } else {
            *out++ = (char)((field << 3) | 0);
            out = put_varint(out, (uint64_t)st->value);
        }
    }
    return out;
}

/* A contiguous buffer of `itemsize`-byte items. */
static int
get_items(PyObject *obj, Py_ssize_t itemsize, Py_buffer *view, Py_ssize_t *n, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    if (view->itemsize != itemsize || view->len % itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "encode_line: %s must hold %zd-byte items", what,
                     itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    *n = view->len / itemsize;
    return 0;
}

static PyObject *
encode_line(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *obj, *order_obj, *objs[6];
    long long timestamp_ns;
    if (!PyArg_ParseTuple(args, "OOLOOOOOO:encode_line", &obj, &order_obj, &timestamp_ns,
                          &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5])) {
        return NULL;
    }
    if (!records_check(obj)) {
        PyErr_SetString(PyExc_TypeError, "encode_line takes Records");
        return NULL;
    }
    static const char *what[6] = {"md_name", "md_key", "blob_of_value", "blob_field",
                                  "blob_begin", "blobs"};
    static const Py_ssize_t itemsize[6] = {8, 8, 8, 1, 8, 1};
    Py_buffer views[6], order;
    Py_ssize_t counts[6];
    int got = 0;
    PyObject *result = NULL;
    Encoding e = {.r = (RecordsObject *)obj, .timestamp_ns = (uint64_t)timestamp_ns};
    if (get_order(order_obj, e.r, &order) < 0) {
        return NULL;
    }
    for (; got < 6; got++) {
        if (get_items(objs[got], itemsize[got], &views[got], &counts[got], what[got]) < 0) {
            goto done;
        }
    }
    e.md_name = views[0].buf;
    e.n_md_name = counts[0];
    e.md_key = views[1].buf;
    e.n_md_key = counts[1];
    e.blob_of_value = views[2].buf;
    e.n_blob_of_value = counts[2];
    e.blob_field = views[3].buf;
    e.blob_begin = views[4].buf;
    e.nblobs = counts[4] - 1;
    e.blobs = views[5].buf;
    if (e.nblobs < 0 || counts[3] != e.nblobs) {
        PyErr_SetString(PyExc_ValueError, "encode_line: blob_field and blob_begin disagree");
        goto done;
    }
    for (Py_ssize_t b = 0; b < e.nblobs; b++) {
        if (e.blob_begin[b] < 0 || e.blob_begin[b] > e.blob_begin[b + 1] ||
            e.blob_begin[b + 1] > counts[5] ||
            (e.blob_field[b] != STR_VALUE && e.blob_field[b] != BYTES_VALUE)) {
            PyErr_SetString(PyExc_ValueError, "encode_line: bad blobs");
            goto done;
        }
    }
    const uint32_t *idx = order.buf;
    Py_ssize_t m = order.len / (Py_ssize_t)sizeof(uint32_t);
    /* Room for the events at most: an event without stats takes at most PLAIN_EVENT_MAX
     * bytes; stats at most STAT_MAX each, and their strings. Written in one pass, then the
     * bytes object is cut to what was written (a large block shrinks in place). */
    size_t bound = (size_t)m * PLAIN_EVENT_MAX;
    for (Py_ssize_t row = 0; row < e.r->stats.n; row++) {
        const StatRecord *st = stat_at(&e.r->stats, row);
        int64_t blob = -1;
        bound += STAT_MAX;
        if (stat_field(&e, st, &blob) >= 0 && blob >= 0) {
            bound += (size_t)(e.blob_begin[blob + 1] - e.blob_begin[blob]);
        }
    }
    if (bound > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound);
    if (result == NULL) {
        goto done;
    }
    char *begin = PyBytes_AS_STRING(result), *out = begin;
    for (Py_ssize_t k = 0; k < m; k++) {
        uint32_t i = order_at(idx, k);
        const EventRecord *ev = event_at(&e.r->events, i);
        uint32_t name = ev->name & NAME_MASK;
        if ((Py_ssize_t)name >= e.n_md_name) {
            PyErr_SetString(PyExc_ValueError, "encode_line: an event name without metadata");
            Py_CLEAR(result);
            goto done;
        }
        if (ev->name & FLAG_STATS) { /* sized first: its length may take several bytes */
            Py_ssize_t row;
            size_t body = event_size(&e, i, ev, &row);
            if (body == 0) {
                Py_CLEAR(result);
                goto done;
            }
            out = write_event(&e, i, ev, body, row, out);
            continue;
        }
        /* Without stats the body is under 128 bytes: its length is one byte, set after. */
        uint64_t off, dur;
        event_times(&e, i, ev, &off, &dur);
        int64_t md = e.md_name[name];
        *out++ = (4 << 3) | 2; /* XLine.events */
        char *length = out++;
        if (md != 0) {
            *out++ = (1 << 3) | 0; /* metadata_id */
            out = put_varint(out, (uint64_t)md);
        }
        *out++ = (2 << 3) | 0; /* offset_ps: in a oneof, written even when 0 */
        out = put_varint(out, off);
        if (dur != 0) {
            *out++ = (3 << 3) | 0; /* duration_ps */
            out = put_varint(out, dur);
        }
        *length = (char)(out - length - 1);
    }
    if (_PyBytes_Resize(&result, out - begin) < 0) {
        goto done;
    }
done:
    for (int i = 0; i < got; i++) {
        PyBuffer_Release(&views[i]);
    }
    release_order(&order);
    return result;
}

PyMethodDef records_xplane_methods[] = {
    {"line_order", line_order, METH_VARARGS,
     "line_order(records, keep_from_ns, keep_until_ns) -> bytes or None: the indices "
     "(uint32) of the events whose start is in [keep_from_ns, keep_until_ns) (None: no "
     "bound), by start, the longer first, then as recorded; None when that is every event "
     "as recorded."},
    {"first_uses", first_uses, METH_O,
     "first_uses([(records, order or None), ...]) -> (names, stat keys, string values): the Names "
     "ids each kind of the ordered events uses, in order of first use (bytes of int32)."},
    {"encode_line", encode_line, METH_VARARGS,
     "encode_line(records, order, timestamp_ns, md_name, md_key, blob_of_value, blob_field, "
     "blob_begin, blobs) -> bytes: the XLine.events fields of the ordered events. md_name "
     "and md_key (int64, by Names id) are metadata ids; blob_of_value (int64, by Names id, "
     "-1 for none) picks a string value's blob, blob_field (int8) its XStat field, "
     "blob_begin (int64, one more than blobs) where it lies in blobs."},
    {NULL, NULL, 0, NULL},
};
