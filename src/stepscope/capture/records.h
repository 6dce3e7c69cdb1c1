/* The recorder's compiled storage: fixed-size binary event records per thread.
 *
 * - Names: interns what events are named by (and stat keys and string stat values) to int32
 *   ids: a str by its text, any other object (a code object of the Python tracer) by
 *   identity. `objects[id]` is the object itself.
 * - Records: one thread's events, in chunks that are never moved or copied while recording:
 *   an EventRecord per event and, for the few events with stats, their StatRecords in event
 *   order (an event's stats are the next `nstats` stat records). Read back as NumPy columns
 *   at stop (`columns`).
 * - Sink: what a session's Trace events go to: the event cap's counter and, per thread, the
 *   Records that thread writes to (found through a thread-local cache).
 *
 * The Python tracer's hook (_pyhook.c) appends to Records through the capsule
 * `stepscope.capture._fastpath._records_api` (a RecordsAPI).
 */
#ifndef STEPSCOPE_RECORDS_H
#define STEPSCOPE_RECORDS_H

#include <Python.h>
#include <stdint.h>

/* One event: 24 bytes (read back field by field by Records.columns). */
typedef struct {
    int32_t name;   /* Names id */
    int32_t nstats; /* how many stat records follow for this event */
    int64_t start;  /* ns since the epoch */
    int64_t end;
} EventRecord;

/* One stat of an event: 16 bytes. */
typedef struct {
    int32_t key;   /* Names id of the stat's name */
    int32_t kind;  /* STAT_* below */
    int64_t value; /* the integer, the double's bits, or a Names id */
} StatRecord;

/* Stat kinds; recorder_columns.py has the same numbers. */
enum {
    STAT_INT = 1,    /* int64 */
    STAT_UINT = 2,   /* an int above INT64_MAX, as uint64 bits */
    STAT_DOUBLE = 3, /* IEEE 754 bits */
    STAT_BOOL = 4,   /* 0 or 1 */
    STAT_STR = 5,    /* Names id of an interned str */
    STAT_OBJ = 6,    /* Names id of any other object (bytes, or written as its str()) */
};

#define RECORDS_API_CAPSULE "stepscope.capture._fastpath._records_api"

typedef struct {
    PyTypeObject *records_type;
    /* Append an event without stats named by `what` (interned); 0, or -1 with an exception. */
    int (*append)(PyObject *records, PyObject *what, long long start, long long end);
} RecordsAPI;

#ifndef STEPSCOPE_RECORDS_CLIENT
/* For _fastpath.c, which holds the types. */
typedef struct SinkObject SinkObject;
int records_add_types(PyObject *module);
/* The calling thread's Records of `sink` (borrowed), or NULL with an exception. */
PyObject *sink_thread_records(SinkObject *sink);
/* Count one offered event: 1 kept, 0 over the cap (drop it), -1 error. */
int sink_admit(SinkObject *sink);
int sink_check(PyObject *obj);
/* Append an event; stats given as parallel keys/values (n of them) or a dict (or NULL). */
int records_append(PyObject *records, PyObject *what, long long start, long long end,
                   PyObject *const *keys, PyObject *const *values, Py_ssize_t n,
                   PyObject *stats_dict);
#endif

#endif
