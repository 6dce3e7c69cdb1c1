/* The layout of Names and Records, shared by records.c (recording) and records_xplane.c
 * (writing them as XPlane bytes at stop). Private to the _fastpath extension. */
#ifndef STEPSCOPE_RECORDS_IMPL_H
#define STEPSCOPE_RECORDS_IMPL_H

#include "records.h"

/* Records per chunk: 8192 events (128 KiB), 4096 stats (96 KiB), 1024 long ends (16 KiB).
 * Chunks are allocated with the system allocator (large ones are mapped lazily) and never
 * moved while recording. */
#define EVENTS_PER_CHUNK 8192
#define STATS_PER_CHUNK 4096
#define LONGS_PER_CHUNK 1024

typedef struct {
    char **chunks;
    Py_ssize_t nchunks;
    Py_ssize_t capacity; /* room in `chunks` */
    Py_ssize_t n;        /* items */
} Chunks;

typedef struct {
    PyObject_HEAD
    PyObject *objects; /* list: id -> object */
    PyObject *ids;     /* dict: str -> id, for str names (by text) */
    PyObject **keys;   /* identity map for other objects: open addressing, NULL = empty; */
    int32_t *values;   /* the keys are held by `objects`, so their addresses stay theirs */
    Py_ssize_t capacity;
    Py_ssize_t used;
} NamesObject;

typedef struct {
    PyObject_HEAD
    NamesObject *names;
    Chunks events; /* EventRecord */
    Chunks stats;  /* StatRecord, in the order of their events */
    Chunks longs;  /* LongRecord, in the order of their events */
} RecordsObject;

/* Whether `obj` is a Records. */
int records_check(PyObject *obj);

static inline EventRecord *
event_at(const Chunks *c, Py_ssize_t i)
{
    return (EventRecord *)c->chunks[i / EVENTS_PER_CHUNK] + i % EVENTS_PER_CHUNK;
}

static inline StatRecord *
stat_at(const Chunks *c, Py_ssize_t i)
{
    return (StatRecord *)c->chunks[i / STATS_PER_CHUNK] + i % STATS_PER_CHUNK;
}

static inline LongRecord *
long_at(const Chunks *c, Py_ssize_t i)
{
    return (LongRecord *)c->chunks[i / LONGS_PER_CHUNK] + i % LONGS_PER_CHUNK;
}

/* The first stat row of event `event` (binary search; its stats are the rows from there
 * on whose `event` is it). */
static inline Py_ssize_t
first_stat_row(const RecordsObject *r, int64_t event)
{
    Py_ssize_t lo = 0, hi = r->stats.n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (stat_at(&r->stats, mid)->event < event) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The end of event `i` (record `ev`). */
static inline int64_t
event_end(const RecordsObject *r, Py_ssize_t i, const EventRecord *ev)
{
    if (ev->dur != DUR_FAR) {
        return (int64_t)((uint64_t)ev->start + ev->dur);
    }
    Py_ssize_t lo = 0, hi = r->longs.n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (long_at(&r->longs, mid)->event < i) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    /* Every DUR_FAR event has its LongRecord (records_append writes both or neither). */
    return lo < r->longs.n ? long_at(&r->longs, lo)->end : ev->start;
}

/* The encoder's functions (records_xplane.c), added to the module with the types. */
extern PyMethodDef records_xplane_methods[];

#endif
