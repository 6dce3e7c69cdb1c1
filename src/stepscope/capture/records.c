/* The recorder's compiled storage: Names, Records and Sink (see records.h for what each is).
 *
 * Part of the _fastpath extension. Everything here runs with the GIL held; what may run
 * Python code (interning a str subclass, str() of a stat key) is done before an event's
 * records are written, so that an event recorded meanwhile cannot interleave with them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

#include "records_impl.h"

/* Stats of one event converted on the stack before they are written; more use the heap. */
#define STACK_STATS 8

/* ---- chunked arrays -------------------------------------------------------------------- */

/* Event chunks freed by Records, kept for the next ones (at most POOL_CHUNKS, 32 MiB). Memory
 * fresh from the system costs a page fault at the first write of each page, and the kernel
 * zeroes it: on a virtual machine (where the host faults too) measured 5-10 us per 4 KiB
 * page, 20-40 ns per 16-byte event, as much as the Python tracer's hook itself. A program
 * profiled more than once (steps, the flight recorder, a profiler server) records into
 * memory it already has, as a tracer with one preallocated buffer does. The GIL guards the
 * pool; a build without one keeps no pool. */
#define EVENT_CHUNK_BYTES (EVENTS_PER_CHUNK * sizeof(EventRecord))
#ifdef Py_GIL_DISABLED
#define POOL_CHUNKS 0
#else
#define POOL_CHUNKS 256
#endif
static char *g_pool[POOL_CHUNKS > 0 ? POOL_CHUNKS : 1];
static int g_pool_n = 0;

static inline char *
chunk_alloc(size_t bytes)
{
    if (bytes == EVENT_CHUNK_BYTES && g_pool_n > 0) {
        return g_pool[--g_pool_n];
    }
    return PyMem_RawMalloc(bytes);
}

static inline void
chunk_release(char *chunk, size_t bytes)
{
    if (bytes == EVENT_CHUNK_BYTES && g_pool_n < POOL_CHUNKS) {
        g_pool[g_pool_n++] = chunk;
        return;
    }
    PyMem_RawFree(chunk);
}

/* A slot for one more item, or NULL (out of memory; nothing changed). */
static inline void * /* inline: per_chunk is a constant, its division a shift */
chunks_push(Chunks *c, size_t itemsize, Py_ssize_t per_chunk)
{
    if (c->n == c->nchunks * per_chunk) {
        if (c->nchunks == c->capacity) {
            Py_ssize_t capacity = c->capacity ? c->capacity * 2 : 16;
            char **grown = PyMem_RawRealloc(c->chunks, (size_t)capacity * sizeof(char *));
            if (grown == NULL) {
                return NULL;
            }
            c->chunks = grown;
            c->capacity = capacity;
        }
        char *chunk = chunk_alloc(itemsize * (size_t)per_chunk);
        if (chunk == NULL) {
            return NULL;
        }
        c->chunks[c->nchunks++] = chunk;
    }
    char *slot = c->chunks[c->n / per_chunk] + (size_t)(c->n % per_chunk) * itemsize;
    c->n++;
    return slot;
}

static void
chunks_free(Chunks *c, size_t chunk_bytes)
{
    for (Py_ssize_t i = 0; i < c->nchunks; i++) {
        chunk_release(c->chunks[i], chunk_bytes);
    }
    PyMem_RawFree(c->chunks);
    c->chunks = NULL;
    c->nchunks = c->capacity = c->n = 0;
}

/* All items as one bytes object. */
static PyObject *
chunks_bytes(Chunks *c, size_t itemsize, Py_ssize_t per_chunk)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)itemsize * c->n);
    if (out == NULL) {
        return NULL;
    }
    char *dst = PyBytes_AS_STRING(out);
    Py_ssize_t left = c->n;
    for (Py_ssize_t i = 0; left > 0; i++) {
        Py_ssize_t take = left < per_chunk ? left : per_chunk;
        memcpy(dst, c->chunks[i], itemsize * (size_t)take);
        dst += itemsize * (size_t)take;
        left -= take;
    }
    return out;
}

/* ---- Names ----------------------------------------------------------------------------- */

static PyTypeObject NamesType;

static PyObject *
Names_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (!PyArg_ParseTuple(args, ":Names")) {
        return NULL;
    }
    NamesObject *self = (NamesObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->objects = PyList_New(0);
    self->ids = PyDict_New();
    if (self->objects == NULL || self->ids == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
Names_traverse(NamesObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->objects);
    Py_VISIT(self->ids);
    return 0;
}

static int
Names_clear(NamesObject *self)
{
    PyMem_Free(self->keys);
    PyMem_Free(self->values);
    self->keys = NULL;
    self->values = NULL;
    self->capacity = self->used = 0;
    Py_CLEAR(self->ids);
    Py_CLEAR(self->objects);
    return 0;
}

static void
Names_dealloc(NamesObject *self)
{
    PyObject_GC_UnTrack(self);
    Names_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A new id for `obj` (held from now on), or -1. */
static int32_t
names_keep(NamesObject *self, PyObject *obj)
{
    if (self->objects == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Names was cleared");
        return -1;
    }
    Py_ssize_t id = PyList_GET_SIZE(self->objects);
    if (id >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many distinct names in one session");
        return -1;
    }
    if (PyList_Append(self->objects, obj) < 0) {
        return -1;
    }
    return (int32_t)id;
}

static inline size_t
identity_slot(PyObject *obj, Py_ssize_t capacity)
{
    uint64_t h = (uint64_t)(uintptr_t)obj >> 4;
    h *= 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 20) & (size_t)(capacity - 1);
}

static int
identity_grow(NamesObject *self)
{
    Py_ssize_t capacity = self->capacity ? self->capacity * 2 : 256;
    PyObject **keys = PyMem_Calloc((size_t)capacity, sizeof(PyObject *));
    int32_t *values = PyMem_Malloc((size_t)capacity * sizeof(int32_t));
    if (keys == NULL || values == NULL) {
        PyMem_Free(keys);
        PyMem_Free(values);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->capacity; i++) {
        PyObject *key = self->keys[i];
        if (key != NULL) {
            size_t slot = identity_slot(key, capacity);
            while (keys[slot] != NULL) {
                slot = (slot + 1) & (size_t)(capacity - 1);
            }
            keys[slot] = key;
            values[slot] = self->values[i];
        }
    }
    PyMem_Free(self->keys);
    PyMem_Free(self->values);
    self->keys = keys;
    self->values = values;
    self->capacity = capacity;
    return 0;
}

/* The id of a str, by its text (an exact str: comparing runs no Python code). */
static int32_t
names_intern_str(NamesObject *self, PyObject *text)
{
    PyObject *found = PyDict_GetItemWithError(self->ids, text);
    if (found != NULL) {
        return (int32_t)PyLong_AsLong(found);
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    int32_t id = names_keep(self, text);
    if (id < 0) {
        return -1;
    }
    PyObject *py_id = PyLong_FromLong(id);
    if (py_id == NULL || PyDict_SetItem(self->ids, text, py_id) < 0) {
        Py_XDECREF(py_id);
        return -1;
    }
    Py_DECREF(py_id);
    return id;
}

/* The id of a name: a str by its text, any other object by identity. */
static int32_t
names_intern(NamesObject *self, PyObject *obj)
{
    if (PyUnicode_CheckExact(obj)) {
        return names_intern_str(self, obj);
    }
    if (PyUnicode_Check(obj)) { /* a str subclass: by its text, as a plain str */
        PyObject *text = PyUnicode_FromObject(obj);
        if (text == NULL) {
            return -1;
        }
        int32_t id = names_intern_str(self, text);
        Py_DECREF(text);
        return id;
    }
    if (self->capacity > 0) {
        size_t slot = identity_slot(obj, self->capacity);
        while (self->keys[slot] != NULL) {
            if (self->keys[slot] == obj) {
                return self->values[slot];
            }
            slot = (slot + 1) & (size_t)(self->capacity - 1);
        }
    }
    if ((self->used + 1) * 2 > self->capacity && identity_grow(self) < 0) {
        return -1;
    }
    int32_t id = names_keep(self, obj);
    if (id < 0) {
        return -1;
    }
    size_t slot = identity_slot(obj, self->capacity);
    while (self->keys[slot] != NULL) {
        slot = (slot + 1) & (size_t)(self->capacity - 1);
    }
    self->keys[slot] = obj;
    self->values[slot] = id;
    self->used++;
    return id;
}

static PyObject *
Names_intern(NamesObject *self, PyObject *obj)
{
    if (self->objects == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Names was cleared");
        return NULL;
    }
    int32_t id = names_intern(self, obj);
    return id < 0 ? NULL : PyLong_FromLong(id);
}

static PyObject *
Names_keep(NamesObject *self, PyObject *obj)
{
    int32_t id = names_keep(self, obj);
    return id < 0 ? NULL : PyLong_FromLong(id);
}

static PyObject *
Names_get_objects(NamesObject *self, void *Py_UNUSED(closure))
{
    PyObject *objects = self->objects != NULL ? self->objects : Py_None;
    Py_INCREF(objects);
    return objects;
}

static Py_ssize_t
Names_len(NamesObject *self)
{
    return self->objects != NULL ? PyList_GET_SIZE(self->objects) : 0;
}

static PyMethodDef Names_methods[] = {
    {"intern", (PyCFunction)Names_intern, METH_O,
     "The id of a name: a str by its text, any other object by identity."},
    {"keep", (PyCFunction)Names_keep, METH_O,
     "A new id for an object (a stat value kept as it is, not shared with equal ones)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Names_getset[] = {
    {"objects", (getter)Names_get_objects, NULL,
     "The list of named objects, by id (read it; do not change it).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Names_as_sequence = {.sq_length = (lenfunc)Names_len};

static PyTypeObject NamesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.capture._fastpath.Names",
    .tp_basicsize = sizeof(NamesObject),
    .tp_dealloc = (destructor)Names_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Names(): interns event names, stat keys and stat values to int32 ids.",
    .tp_traverse = (traverseproc)Names_traverse,
    .tp_clear = (inquiry)Names_clear,
    .tp_methods = Names_methods,
    .tp_getset = Names_getset,
    .tp_as_sequence = &Names_as_sequence,
    .tp_new = Names_new,
};

/* ---- Records --------------------------------------------------------------------------- */

static PyTypeObject RecordsType;

int
records_check(PyObject *obj)
{
    return PyObject_TypeCheck(obj, &RecordsType);
}

static PyObject *
Records_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"names", NULL};
    PyObject *names;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!:Records", keywords, &NamesType,
                                     &names)) {
        return NULL;
    }
    RecordsObject *self = (RecordsObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(names);
    self->names = (NamesObject *)names;
    return (PyObject *)self;
}

static void
Records_dealloc(RecordsObject *self)
{
    chunks_free(&self->events, EVENT_CHUNK_BYTES);
    chunks_free(&self->stats, STATS_PER_CHUNK * sizeof(StatRecord));
    chunks_free(&self->longs, LONGS_PER_CHUNK * sizeof(LongRecord));
    Py_XDECREF(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The id of a stat key: its text (str() of what is not a str). May run Python code. */
static int32_t
key_id(NamesObject *names, PyObject *key)
{
    if (PyUnicode_Check(key)) {
        return names_intern(names, key);
    }
    PyObject *text = PyObject_Str(key);
    if (text == NULL) {
        return -1;
    }
    int32_t id = names_intern(names, text);
    Py_DECREF(text);
    return id;
}

/* One stat as a record. Runs no Python code but for a key that is not an exact str. */
static int
stat_record(NamesObject *names, PyObject *key, PyObject *value, StatRecord *out)
{
    out->key = key_id(names, key);
    if (out->key < 0) {
        return -1;
    }
    if (PyBool_Check(value)) {
        out->kind = STAT_BOOL;
        out->value = value == Py_True;
    } else if (PyLong_Check(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow == 0) {
            out->kind = STAT_INT;
            out->value = v;
        } else {
            unsigned long long u = overflow > 0 ? PyLong_AsUnsignedLongLong(value) : 0;
            if (overflow > 0 && !(u == (unsigned long long)-1 && PyErr_Occurred())) {
                out->kind = STAT_UINT;
                memcpy(&out->value, &u, sizeof u);
            } else { /* beyond 64 bits: written as its text, kept as the object */
                PyErr_Clear();
                out->kind = STAT_OBJ;
                if ((out->value = names_keep(names, value)) < 0) {
                    return -1;
                }
            }
        }
    } else if (PyFloat_Check(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        out->kind = STAT_DOUBLE;
        memcpy(&out->value, &d, sizeof d);
    } else if (PyUnicode_CheckExact(value)) {
        out->kind = STAT_STR;
        if ((out->value = names_intern_str(names, value)) < 0) {
            return -1;
        }
    } else {
        out->kind = STAT_OBJ;
        if ((out->value = names_keep(names, value)) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Write one event and its stats (converted already): all of its records, or none (-1, out
 * of memory). Runs no Python code. */
static int
records_write(RecordsObject *self, int32_t name, long long start, long long end,
              const StatRecord *stats, Py_ssize_t nstats)
{
    int64_t index = self->events.n;
    Py_ssize_t stats_before = self->stats.n, longs_before = self->longs.n;
    int ok = 1;
    for (Py_ssize_t i = 0; i < nstats && ok; i++) {
        StatRecord *slot = chunks_push(&self->stats, sizeof(StatRecord), STATS_PER_CHUNK);
        if (slot == NULL) {
            ok = 0;
        } else {
            *slot = stats[i];
            slot->event = index;
        }
    }
    /* The duration in 32 bits where it fits (nearly always), else the end on the side. */
    uint32_t dur = DUR_FAR;
    if (end >= start && (uint64_t)end - (uint64_t)start < DUR_FAR) {
        dur = (uint32_t)((uint64_t)end - (uint64_t)start);
    } else if (ok) {
        LongRecord *slot = chunks_push(&self->longs, sizeof(LongRecord), LONGS_PER_CHUNK);
        if (slot == NULL) {
            ok = 0;
        } else {
            slot->event = index;
            slot->end = end;
        }
    }
    EventRecord *event = ok ? chunks_push(&self->events, sizeof(EventRecord),
                                          EVENTS_PER_CHUNK)
                            : NULL;
    if (event == NULL) {
        self->stats.n = stats_before;
        self->longs.n = longs_before;
        PyErr_NoMemory();
        return -1;
    }
    event->start = start;
    event->dur = dur;
    event->name = (uint32_t)name | (nstats > 0 ? FLAG_STATS : 0);
    return 0;
}

int
records_append(PyObject *records, PyObject *what, long long start, long long end,
               PyObject *const *keys, PyObject *const *values, Py_ssize_t n,
               PyObject *stats_dict)
{
    RecordsObject *self = (RecordsObject *)records;
    NamesObject *names = self->names;
    if (names->objects == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Names was cleared");
        return -1;
    }
    int32_t name = names_intern(names, what);
    if (name < 0) {
        return -1;
    }
    if (stats_dict != NULL) {
        n = PyDict_GET_SIZE(stats_dict);
    }
    StatRecord on_stack[STACK_STATS];
    StatRecord *stats = on_stack;
    if (n > STACK_STATS) {
        stats = PyMem_Malloc((size_t)n * sizeof(StatRecord));
        if (stats == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    int rc = 0;
    Py_ssize_t got = 0;
    if (stats_dict != NULL) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (got < n && PyDict_Next(stats_dict, &pos, &key, &value)) {
            /* str() of a key may change the dict: hold what we read. */
            Py_INCREF(key);
            Py_INCREF(value);
            rc = stat_record(names, key, value, &stats[got]);
            Py_DECREF(key);
            Py_DECREF(value);
            if (rc < 0) {
                break;
            }
            got++;
        }
    } else {
        for (; got < n; got++) {
            if ((rc = stat_record(names, keys[got], values[got], &stats[got])) < 0) {
                break;
            }
        }
    }
    if (rc == 0) {
        rc = records_write(self, name, start, end, stats, got);
    }
    if (stats != on_stack) {
        PyMem_Free(stats);
    }
    return rc;
}

static int
records_append_plain(PyObject *records, PyObject *what, long long start, long long end)
{
    return records_append(records, what, start, end, NULL, NULL, 0, NULL);
}

static int32_t
records_intern(PyObject *records, PyObject *what)
{
    NamesObject *names = ((RecordsObject *)records)->names;
    if (names->objects == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Names was cleared");
        return -1;
    }
    return names_intern(names, what);
}

/* The Python tracer's path: one event record, named by an id it interned before. */
static int
records_append_id(PyObject *records, int32_t id, long long start, long long end)
{
    RecordsObject *self = (RecordsObject *)records;
    if (end < start || (uint64_t)end - (uint64_t)start >= DUR_FAR) {
        return records_write(self, id, start, end, NULL, 0); /* its end on the side */
    }
    EventRecord *event = chunks_push(&self->events, sizeof(EventRecord), EVENTS_PER_CHUNK);
    if (event == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    event->start = start;
    event->dur = (uint32_t)((uint64_t)end - (uint64_t)start);
    event->name = (uint32_t)id;
    return 0;
}

static PyObject *
Records_add(RecordsObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"name", "start_ns", "end_ns", "stats", NULL};
    PyObject *what, *stats = Py_None;
    long long start, end;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLL|O:add", keywords, &what, &start,
                                     &end, &stats)) {
        return NULL;
    }
    if (stats != Py_None && !PyDict_Check(stats)) {
        PyErr_SetString(PyExc_TypeError, "stats must be a dict or None");
        return NULL;
    }
    if (records_append((PyObject *)self, what, start, end, NULL, NULL, 0,
                       stats == Py_None ? NULL : stats) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Records_dump(RecordsObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *events = chunks_bytes(&self->events, sizeof(EventRecord), EVENTS_PER_CHUNK);
    if (events == NULL) {
        return NULL;
    }
    PyObject *stats = chunks_bytes(&self->stats, sizeof(StatRecord), STATS_PER_CHUNK);
    if (stats == NULL) {
        Py_DECREF(events);
        return NULL;
    }
    return Py_BuildValue("(NN)", events, stats);
}

/* Every event's fields as columns: name (int32), start, end (int64), nstats (int32); and
 * every stat's key, kind (int32) and value (int64). */
static PyObject *
Records_columns(RecordsObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t n = self->events.n, ns = self->stats.n;
    PyObject *cols[7] = {
        PyBytes_FromStringAndSize(NULL, 4 * n), PyBytes_FromStringAndSize(NULL, 8 * n),
        PyBytes_FromStringAndSize(NULL, 8 * n), PyBytes_FromStringAndSize(NULL, 4 * n),
        PyBytes_FromStringAndSize(NULL, 4 * ns), PyBytes_FromStringAndSize(NULL, 4 * ns),
        PyBytes_FromStringAndSize(NULL, 8 * ns),
    };
    for (int i = 0; i < 7; i++) {
        if (cols[i] == NULL) {
            for (int j = 0; j < 7; j++) {
                Py_XDECREF(cols[j]);
            }
            return NULL;
        }
    }
    int32_t *name = (int32_t *)PyBytes_AS_STRING(cols[0]);
    int64_t *start = (int64_t *)PyBytes_AS_STRING(cols[1]);
    int64_t *end = (int64_t *)PyBytes_AS_STRING(cols[2]);
    int32_t *nstats = (int32_t *)PyBytes_AS_STRING(cols[3]);
    int32_t *key = (int32_t *)PyBytes_AS_STRING(cols[4]);
    int32_t *kind = (int32_t *)PyBytes_AS_STRING(cols[5]);
    int64_t *value = (int64_t *)PyBytes_AS_STRING(cols[6]);
    Py_ssize_t row = 0, far = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const EventRecord *ev = event_at(&self->events, i);
        name[i] = (int32_t)(ev->name & NAME_MASK);
        start[i] = ev->start;
        if (ev->dur != DUR_FAR) {
            end[i] = (int64_t)((uint64_t)ev->start + ev->dur);
        } else {
            while (far < self->longs.n && long_at(&self->longs, far)->event < i) {
                far++;
            }
            end[i] = far < self->longs.n ? long_at(&self->longs, far)->end : ev->start;
        }
        int32_t count = 0;
        while (row < ns && stat_at(&self->stats, row)->event == i) {
            const StatRecord *st = stat_at(&self->stats, row);
            key[row] = st->key;
            kind[row] = st->kind;
            value[row] = st->value;
            row++;
            count++;
        }
        nstats[i] = count;
    }
    return Py_BuildValue("(NNNNNNN)", cols[0], cols[1], cols[2], cols[3], cols[4], cols[5],
                         cols[6]);
}

static PyObject *
Records_clear(RecordsObject *self, PyObject *Py_UNUSED(ignored))
{
    chunks_free(&self->events, EVENT_CHUNK_BYTES);
    chunks_free(&self->stats, STATS_PER_CHUNK * sizeof(StatRecord));
    chunks_free(&self->longs, LONGS_PER_CHUNK * sizeof(LongRecord));
    Py_RETURN_NONE;
}

static PyObject *
Records_extend(RecordsObject *self, PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, &RecordsType)) {
        PyErr_SetString(PyExc_TypeError, "extend takes Records");
        return NULL;
    }
    RecordsObject *other = (RecordsObject *)arg;
    if (other->names != self->names) {
        PyErr_SetString(PyExc_ValueError, "extend: the Records name by different Names");
        return NULL;
    }
    if (other == self) {
        PyErr_SetString(PyExc_ValueError, "extend: a Records cannot extend itself");
        return NULL;
    }
    Py_ssize_t n = other->events.n, row = 0;
    StatRecord on_stack[STACK_STATS];
    StatRecord *stats = on_stack;
    Py_ssize_t room = STACK_STATS;
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        const EventRecord *ev = event_at(&other->events, i);
        Py_ssize_t first = row;
        while (row < other->stats.n && stat_at(&other->stats, row)->event == i) {
            row++;
        }
        if (row - first > room) {
            if (stats != on_stack) {
                PyMem_Free(stats);
            }
            room = row - first;
            stats = PyMem_Malloc((size_t)room * sizeof(StatRecord));
            if (stats == NULL) {
                PyErr_NoMemory();
                return NULL;
            }
        }
        for (Py_ssize_t k = first; k < row; k++) {
            stats[k - first] = *stat_at(&other->stats, k);
        }
        rc = records_write(self, (int32_t)(ev->name & NAME_MASK), ev->start,
                           event_end(other, i, ev), stats, row - first);
    }
    if (stats != on_stack) {
        PyMem_Free(stats);
    }
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Records_span(RecordsObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->events.n == 0) {
        Py_RETURN_NONE;
    }
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t i = 0; i < self->events.n; i++) {
        const EventRecord *ev = event_at(&self->events, i);
        int64_t end = event_end(self, i, ev);
        lo = ev->start < lo ? ev->start : lo;
        hi = end > hi ? end : hi;
    }
    return Py_BuildValue("(LL)", (long long)lo, (long long)hi);
}

static PyObject *
Records_get_names(RecordsObject *self, void *Py_UNUSED(closure))
{
    Py_INCREF(self->names);
    return (PyObject *)self->names;
}

static PyObject *
Records_get_nbytes(RecordsObject *self, void *Py_UNUSED(closure))
{
    size_t bytes = (size_t)self->events.nchunks * EVENTS_PER_CHUNK * sizeof(EventRecord) +
                   (size_t)self->stats.nchunks * STATS_PER_CHUNK * sizeof(StatRecord) +
                   (size_t)self->longs.nchunks * LONGS_PER_CHUNK * sizeof(LongRecord);
    return PyLong_FromSize_t(bytes);
}

static Py_ssize_t
Records_len(RecordsObject *self)
{
    return self->events.n;
}

static PyMethodDef Records_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Records_add, METH_VARARGS | METH_KEYWORDS,
     "add(name, start_ns, end_ns, stats=None): append one event."},
    {"dump", (PyCFunction)Records_dump, METH_NOARGS,
     "(events, stats): the records as bytes, EventRecords then StatRecords, in order."},
    {"columns", (PyCFunction)Records_columns, METH_NOARGS,
     "(name, start, end, nstats, stat key, stat kind, stat value): each field of every "
     "event or stat as the bytes of a contiguous array (int32 or int64)."},
    {"clear", (PyCFunction)Records_clear, METH_NOARGS, "Forget every record."},
    {"extend", (PyCFunction)Records_extend, METH_O,
     "extend(other): append a copy of every event of another Records of the same Names."},
    {"span", (PyCFunction)Records_span, METH_NOARGS,
     "(earliest start, latest end) of the events, or None when there are none."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Records_getset[] = {
    {"names", (getter)Records_get_names, NULL, "The Names the records' ids refer to.", NULL},
    {"nbytes", (getter)Records_get_nbytes, NULL, "Bytes of memory the records hold.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Records_as_sequence = {.sq_length = (lenfunc)Records_len};

static PyTypeObject RecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.capture._fastpath.Records",
    .tp_basicsize = sizeof(RecordsObject),
    .tp_dealloc = (destructor)Records_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records(names): one thread's events as fixed-size binary records.",
    .tp_methods = Records_methods,
    .tp_getset = Records_getset,
    .tp_as_sequence = &Records_as_sequence,
    .tp_new = Records_new,
};

/* ---- Sink ------------------------------------------------------------------------------ */

struct SinkObject {
    PyObject_HEAD
    PyObject *counter;     /* the recorder's itertools.count: one next() per offered event */
    long long max_events;  /* events are kept while next(counter) < max_events */
    PyObject *new_records; /* () -> the calling thread's Records, made on its first event */
    PyObject *held;        /* list of every Records handed out: the cache's are borrowed */
    uint64_t serial;       /* never reused: tells this sink's cache entries from others' */
};

static PyTypeObject SinkType;
static uint64_t g_next_serial = 1;
/* The Records the calling thread last wrote to through a sink, and that sink's serial. */
static _Thread_local uint64_t tl_serial = 0;
static _Thread_local PyObject *tl_records = NULL;

static PyObject *
Sink_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"counter", "max_events", "new_records", NULL};
    PyObject *counter, *new_records;
    long long max_events;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLO:Sink", keywords, &counter,
                                     &max_events, &new_records)) {
        return NULL;
    }
    if (Py_TYPE(counter)->tp_iternext == NULL || !PyCallable_Check(new_records)) {
        PyErr_SetString(PyExc_TypeError, "Sink needs an iterator and a callable");
        return NULL;
    }
    SinkObject *self = (SinkObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->held = PyList_New(0);
    if (self->held == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(counter);
    self->counter = counter;
    Py_INCREF(new_records);
    self->new_records = new_records;
    self->max_events = max_events;
    self->serial = g_next_serial++;
    return (PyObject *)self;
}

static int
Sink_traverse(SinkObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->counter);
    Py_VISIT(self->new_records);
    Py_VISIT(self->held);
    return 0;
}

static int
Sink_clear(SinkObject *self)
{
    self->serial = 0; /* no thread's cache matches a cleared sink */
    Py_CLEAR(self->counter);
    Py_CLEAR(self->new_records);
    Py_CLEAR(self->held);
    return 0;
}

static void
Sink_dealloc(SinkObject *self)
{
    PyObject_GC_UnTrack(self);
    Sink_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

int
sink_check(PyObject *obj)
{
    return PyObject_TypeCheck(obj, &SinkType);
}

int
sink_admit(SinkObject *self)
{
    if (self->counter == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the sink was cleared");
        return -1;
    }
    PyObject *index = Py_TYPE(self->counter)->tp_iternext(self->counter);
    if (index == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "the recorder's event counter is exhausted");
        }
        return -1;
    }
    long long n = PyLong_AsLongLong(index);
    Py_DECREF(index);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    return n < self->max_events;
}

PyObject *
sink_thread_records(SinkObject *self)
{
    if (self->serial != 0 && tl_serial == self->serial) {
        return tl_records;
    }
    if (self->new_records == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the sink was cleared");
        return NULL;
    }
    PyObject *records = PyObject_CallNoArgs(self->new_records);
    if (records == NULL) {
        return NULL;
    }
    if (!PyObject_TypeCheck(records, &RecordsType)) {
        PyErr_Format(PyExc_TypeError, "new_records() must return Records, not %.100s",
                     Py_TYPE(records)->tp_name);
        Py_DECREF(records);
        return NULL;
    }
    if (self->held == NULL || PyList_Append(self->held, records) < 0) {
        Py_DECREF(records);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "the sink was cleared");
        }
        return NULL;
    }
    Py_DECREF(records); /* `held` keeps it as long as this sink lives */
    tl_serial = self->serial;
    tl_records = records;
    return records;
}

static PyObject *
Sink_add(SinkObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "add(name, start_ns, end_ns, stats)");
        return NULL;
    }
    PyObject *stats = args[3];
    if (stats != Py_None && !PyDict_Check(stats)) {
        PyErr_SetString(PyExc_TypeError, "stats must be a dict or None");
        return NULL;
    }
    long long start = PyLong_AsLongLong(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long end = PyLong_AsLongLong(args[2]);
    if (end == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int kept = sink_admit(self);
    if (kept <= 0) {
        return kept < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    }
    PyObject *records = sink_thread_records(self);
    if (records == NULL ||
        records_append(records, args[0], start, end, NULL, NULL, 0,
                       stats == Py_None ? NULL : stats) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Sink_get_counter(SinkObject *self, void *Py_UNUSED(closure))
{
    PyObject *counter = self->counter != NULL ? self->counter : Py_None;
    Py_INCREF(counter);
    return counter;
}

static int
Sink_set_counter(SinkObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL || Py_TYPE(value)->tp_iternext == NULL) {
        PyErr_SetString(PyExc_TypeError, "the counter must be an iterator");
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(self->counter, value);
    return 0;
}

static PyMethodDef Sink_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Sink_add, METH_FASTCALL,
     "add(name, start_ns, end_ns, stats): count one event and, under the cap, record it on "
     "the calling thread's Records."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Sink_getset[] = {
    {"counter", (getter)Sink_get_counter, (setter)Sink_set_counter,
     "The event cap's counter (an itertools.count).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SinkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.capture._fastpath.Sink",
    .tp_basicsize = sizeof(SinkObject),
    .tp_dealloc = (destructor)Sink_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Sink(counter, max_events, new_records): where a session's events go.",
    .tp_traverse = (traverseproc)Sink_traverse,
    .tp_clear = (inquiry)Sink_clear,
    .tp_methods = Sink_methods,
    .tp_getset = Sink_getset,
    .tp_new = Sink_new,
};

/* ---- module ---------------------------------------------------------------------------- */

static RecordsAPI g_api = {&RecordsType, records_append_plain, records_intern,
                           records_append_id};

static int
add_type(PyObject *module, PyTypeObject *type, const char *name)
{
    if (PyType_Ready(type) < 0) {
        return -1;
    }
    Py_INCREF(type);
    if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

int
records_add_types(PyObject *module)
{
    if (add_type(module, &NamesType, "Names") < 0 ||
        add_type(module, &RecordsType, "Records") < 0 ||
        add_type(module, &SinkType, "Sink") < 0 ||
        PyModule_AddFunctions(module, records_xplane_methods) < 0 ||
        PyModule_AddIntConstant(module, "EVENT_RECORD_BYTES", sizeof(EventRecord)) < 0 ||
        PyModule_AddIntConstant(module, "CHUNK_BYTES",
                                EVENTS_PER_CHUNK * sizeof(EventRecord) +
                                    STATS_PER_CHUNK * sizeof(StatRecord) +
                                    LONGS_PER_CHUNK * sizeof(LongRecord)) < 0) {
        return -1;
    }
    PyObject *capsule = PyCapsule_New(&g_api, RECORDS_API_CAPSULE, NULL);
    if (capsule == NULL) {
        return -1;
    }
    if (PyModule_AddObject(module, RECORDS_API_ATTR, capsule) < 0) {
        Py_DECREF(capsule);
        return -1;
    }
    return 0;
}
