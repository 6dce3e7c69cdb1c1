/* The recorder's compiled storage: fixed-size binary event records per thread.
 *
 * - Names: interns what events are named by (and stat keys and string stat values) to int32
 *   ids: a str by its text, any other object (a code object of the Python tracer) by
 *   identity. `objects[id]` is the object itself.
 * - Records: one thread's events, in chunks that are never moved or copied while recording:
 *   an EventRecord (16 bytes) per event and, for the few events with stats, their StatRecords
 *   in event order, each naming its event. Read back as NumPy columns (`columns`), or
 *   written as XPlane bytes straight from the chunks at stop (records_xplane.c). Event chunks
 *   a Records lets go of are kept for the next ones, up to 32 MiB (records.c).
 * - Sink: what a session's Trace events go to: the event cap's counter and, per thread, the
 *   Records that thread writes to (found through a thread-local cache).
 *
 * The Python tracer's hook (_pyhook.c) appends to Records through the capsule
 * `stepscope.capture._fastpath._records_api_v2` (a RecordsAPI).
 */
#ifndef STEPSCOPE_RECORDS_H
#define STEPSCOPE_RECORDS_H

#include <Python.h>
#include <stdint.h>

/* One event: 16 bytes. Its end is start + dur where 0 <= end - start < DUR_FAR; else dur is
 * DUR_FAR and a LongRecord holds the end. Its stats (FLAG_STATS set) are the StatRecords
 * whose `event` is its index. */
typedef struct {
    int64_t start;  /* ns since the epoch */
    uint32_t dur;   /* end - start in ns, or DUR_FAR */
    uint32_t name;  /* Names id, with FLAG_STATS */
} EventRecord;

#define DUR_FAR UINT32_MAX
#define FLAG_STATS 0x80000000u
#define NAME_MASK 0x7FFFFFFFu

/* The end of an event whose duration does not fit in `dur` (negative, or >= 4.29 s). */
typedef struct {
    int64_t event; /* index of the event in its Records */
    int64_t end;
} LongRecord;

/* One stat of an event: 24 bytes (events with stats are few). */
typedef struct {
    int64_t event; /* index of the event in its Records */
    int64_t value; /* the integer, the double's bits, or a Names id */
    int32_t key;   /* Names id of the stat's name */
    int32_t kind;  /* STAT_* below */
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

/* Named for its layout: a hook built against another layout finds no capsule (lists then). */
#define RECORDS_API_ATTR "_records_api_v2"
#define RECORDS_API_CAPSULE "stepscope.capture._fastpath._records_api_v2"

typedef struct {
    PyTypeObject *records_type;
    /* Append an event without stats named by `what` (interned); 0, or -1 with an exception. */
    int (*append)(PyObject *records, PyObject *what, long long start, long long end);
    /* The id `what` is interned as in `records`' Names (held there from now on), or -1 with
     * an exception. An id stays valid for every Records sharing those Names. */
    int32_t (*intern)(PyObject *records, PyObject *what);
    /* Append an event without stats named by an id from `intern`; 0, or -1 (out of memory). */
    int (*append_id)(PyObject *records, int32_t id, long long start, long long end);
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
