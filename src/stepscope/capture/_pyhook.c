/* stepscope's compiled Python-tracer hook.
 *
 * The Python tracer records every Python and C function call on every thread. A profile
 * function written in Python costs two extra Python calls per traced call, which slows a
 * call-heavy program down many times; this module is the same hook as a C Py_tracefunc.
 *
 * - HookState: what the hooks of one tracer share: the recorder's event counter and cap,
 *   the `active` flag the tracer clears on stop, and a cache of C-function names.
 * - ThreadHook: one thread's hook: where its events go and a stack of the calls still open.
 *   It records what the pure-Python hook in python_tracer.py records: (code, start_ns,
 *   end_ns) for Python functions and (name, start_ns, end_ns) for C functions, named by
 *   python_tracer._c_name. Given the thread's Records (records.h, from _fastpath), each
 *   finished call becomes one 16-byte record there at once, its code object or name interned
 *   (once: the hook keeps each name's id in a small cache of its own). Given a list instead, finished calls are held in a compact C array while the tracer is
 *   active and become tuples in the list on flush(): building three Python objects per
 *   call would cost the traced program more than the rest of the hook.
 * - install(hook): make a ThreadHook the calling thread's profile function.
 *
 * This module is optional: python_tracer.py falls back to its pure-Python hook.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The frame-evaluation hook (PEP 523) of the Python-only mode, where it is cheaper than a
 * profile function: 3.10 and 3.11. There a profile function makes the interpreter run every
 * instruction through its tracing path, unspecialised (3.11), which alone slows a call-heavy
 * program about 4x; a frame-evaluation function leaves the instructions alone and only costs
 * a C call per Python frame. From 3.12 on, sys.monitoring is the cheap hook (python_tracer.py). */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define STEPSCOPE_FRAME_HOOK 311
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
typedef struct _PyInterpreterFrame EvalFrame;
#define EVAL_FRAME_CODE(frame) ((PyObject *)(frame)->f_code)
#elif PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030B0000
#define STEPSCOPE_FRAME_HOOK 310
typedef PyFrameObject EvalFrame;
#define EVAL_FRAME_CODE(frame) ((PyObject *)(frame)->f_code)
#endif
#if defined(STEPSCOPE_FRAME_HOOK) && defined(__linux__)
#include <pthread.h> /* pthread_getattr_np: where the thread's stack ends */
#endif
#if PY_VERSION_HEX >= 0x030C0000
/* sys.monitoring's PY_* events call back into C functions of this module. */
#define STEPSCOPE_MONITORING 1
#endif
#if defined(STEPSCOPE_FRAME_HOOK) || defined(STEPSCOPE_MONITORING)
/* Hooks that are not per thread find the calling thread's ThreadHook themselves. */
#define STEPSCOPE_THREAD_LOOKUP 1
#endif

/* Rare paths kept out of the per-call ones (Py_NO_INLINE is 3.11+). */
#if defined(__GNUC__) || defined(__clang__)
#define HOOK_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define HOOK_NOINLINE __declspec(noinline)
#else
#define HOOK_NOINLINE
#endif

#define STEPSCOPE_RECORDS_CLIENT
#include "records.h"

/* Slots in each tracer's C-function name cache; a power of two. */
#define NAME_CACHE_SIZE 1024
/* Open calls a new thread's stack has room for before it first grows. */
#define INITIAL_STACK 64
/* _fastpath's Records API, or NULL where _fastpath was not built (then only lists). */
static RecordsAPI *g_records = NULL;

/* Recorded events per block of a thread's held events (blocks are chained, never moved). */
#define CHUNK_EVENTS 4096

/* time.time_ns(): the rest of the profile is timed with it. */
static inline long long
realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec;
}

/* The hooks read the clock twice per call, and clock_gettime costs as much as the rest of a
 * hook (a fifth of a traced fib's time where measured). Where the CPU has a time-stamp
 * counter, they read it instead and map it onto time.time_ns's clock: linearly from an
 * anchor, with the slope measured from a (counter, clock) pair taken when the module loaded
 * to the anchor. Every few milliseconds of counter (at the first read after), the mapping is
 * re-anchored on a fresh pair: the offset found then is taken up over the next interval (at
 * most a tenth of it), so the mapping never goes back and calls nest as they ran; between
 * anchors only the slope's error accrues (well under a microsecond over an interval once the
 * baseline is a few seconds long). The interpreter lock serialises every read. Where the
 * counter misbehaves (goes back, or is found a millisecond off), the hooks use clock_gettime
 * from then on. STEPSCOPE_NO_TSC=1 turns the counter off. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define STEPSCOPE_TSC 1
#endif

#ifdef STEPSCOPE_TSC
static int g_tsc = 0;             /* 1 once calibrated, 0 before, -1 given up */
static uint64_t g_tsc_base;       /* a (counter, ns) pair from module load: the slope's base */
static long long g_ns_base;
static uint64_t g_tsc_anchor;     /* ns = anchor_ns + delta * mult >> 32 + correction(delta) */
static long long g_ns_anchor;
static uint64_t g_mult;           /* ns per tick, 32.32 fixed point, base to latest anchor */
static long long g_correction;    /* ns taken up over the interval after the anchor */
static __int128 g_correction_mult; /* the same per tick (32.32), while delta < interval */
static uint64_t g_reanchor_ticks; /* about REANCHOR_NS in ticks: the interval */
#define REANCHOR_NS 4000000LL
#define TSC_GIVE_UP_NS 1000000LL
#define PAIR_MAX_NS 5000LL           /* a (counter, clock) pair read further apart is retried */
static uint64_t g_pair_max_ticks = 0; /* the same in ticks, once calibrated */

static inline long long
tsc_map(uint64_t tsc)
{
    /* Another core's counter may be a few ticks behind the anchor's: no going back. */
    uint64_t delta = tsc > g_tsc_anchor ? tsc - g_tsc_anchor : 0;
    long long ns = g_ns_anchor + (long long)(((unsigned __int128)delta * g_mult) >> 32);
    if (delta >= g_reanchor_ticks) {
        return ns + g_correction;
    }
    return ns + (long long)(((__int128)delta * g_correction_mult) >> 32);
}

/* The clock and the counter read together; 0 when something (a preemption) came between. */
static int
tsc_pair(uint64_t *tsc, long long *ns, uint64_t max_ticks)
{
    uint64_t before = __rdtsc();
    *ns = realtime_ns();
    uint64_t after = __rdtsc();
    if (after < before || (max_ticks != 0 && after - before > max_ticks)) {
        return 0;
    }
    *tsc = before + (after - before) / 2;
    return 1;
}

/* The closest of a few pairs (the base, at module load). */
static void
tsc_best_pair(uint64_t *tsc, long long *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 16; i++) {
        uint64_t before = __rdtsc();
        long long real = realtime_ns();
        uint64_t after = __rdtsc();
        if (after >= before && after - before < best) {
            best = after - before;
            *tsc = before + (after - before) / 2;
            *ns = real;
        }
    }
}

/* Measure the slope from the base pair (waiting up to 2 ms for a usable baseline). */
static void
tsc_calibrate(void)
{
    long long ns = 0;
    uint64_t tsc = 0;
    int ok = 0;
    for (int tries = 0; tries < 100000 && !ok; tries++) {
        uint64_t before = __rdtsc();
        long long real = realtime_ns();
        uint64_t after = __rdtsc();
        /* A pair read within a thousandth of the baseline (2 us of 2 ms at worst). */
        if (after >= before && real - g_ns_base >= 2000000LL && after > g_tsc_base &&
            (after - before) * 1000 < after - g_tsc_base) {
            tsc = before + (after - before) / 2;
            ns = real;
            ok = 1;
        }
    }
    if (!ok || tsc <= g_tsc_base || ns <= g_ns_base) {
        g_tsc = -1;
        return;
    }
    g_mult = (uint64_t)(((unsigned __int128)(ns - g_ns_base) << 32) / (tsc - g_tsc_base));
    if (g_mult == 0) {
        g_tsc = -1;
        return;
    }
    g_tsc_anchor = tsc;
    g_ns_anchor = ns;
    g_correction = 0;
    g_correction_mult = 0;
    g_reanchor_ticks = (uint64_t)(((unsigned __int128)REANCHOR_NS << 32) / g_mult);
    g_pair_max_ticks = (uint64_t)(((unsigned __int128)PAIR_MAX_NS << 32) / g_mult);
    g_tsc = 1;
}

static void
tsc_reanchor(void)
{
    uint64_t tsc;
    long long real;
    if (!tsc_pair(&tsc, &real, g_pair_max_ticks)) {
        return; /* interrupted: the next read tries again */
    }
    long long mapped = tsc_map(tsc);
    long long behind = real - mapped;
    if (tsc < g_tsc_anchor || behind > TSC_GIVE_UP_NS || behind < -TSC_GIVE_UP_NS) {
        g_tsc = -1; /* from now on the real clock; never below what was handed out */
        g_ns_anchor = mapped;
        return;
    }
    g_mult = (uint64_t)(((unsigned __int128)(real - g_ns_base) << 32) / (tsc - g_tsc_base));
    /* Take up the offset over the next interval, at most a tenth of it. */
    long long most = REANCHOR_NS / 10;
    g_correction = behind > most ? most : behind < -most ? -most : behind;
    g_correction_mult = ((__int128)g_correction << 32) / (__int128)g_reanchor_ticks;
    g_tsc_anchor = tsc;
    g_ns_anchor = mapped;
}
#endif

static inline long long
now_ns(void)
{
#ifdef STEPSCOPE_TSC
    if (g_tsc > 0) {
        uint64_t tsc = __rdtsc();
        if (tsc > g_tsc_anchor && tsc - g_tsc_anchor > g_reanchor_ticks) {
            tsc_reanchor();
            if (g_tsc < 0) {
                long long real = realtime_ns();
                return real > g_ns_anchor ? real : g_ns_anchor;
            }
            tsc = __rdtsc();
        }
        return tsc_map(tsc);
    }
    if (g_tsc < 0) {
        long long real = realtime_ns();
        return real > g_ns_anchor ? real : g_ns_anchor;
    }
#endif
    return realtime_ns();
}

/* ---- HookState ------------------------------------------------------------------------- */

/* One cached C-function name. The name _c_name gives a builtin function depends only on its
 * method definition, its __module__, and the type of its __self__ (and __self__ itself when
 * that is a type), so those are the key. The objects are held so that their addresses cannot
 * be reused by others while cached. */
typedef struct {
    PyMethodDef *ml;
    const char *ml_name; /* guards against a freed method definition's address being reused */
    PyObject *module;
    PyObject *owner_type; /* __self__ if it is a type, else type(__self__); NULL for none */
    PyObject *self_type;  /* type(__self__); NULL when __self__ is NULL or a module */
    PyObject *name;       /* NULL: empty slot */
} NameEntry;

/* itertools.count as CPython 3.10-3.13 lay it out. The recorder's event counter is one; read
 * in place (once checked against its repr, see count_fast) counting an event makes no int. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t cnt; /* the next value; PY_SSIZE_T_MAX once it went past (then long_cnt) */
    PyObject *long_cnt;
    PyObject *long_step;
} CountLayout;

typedef struct {
    PyObject_HEAD
    PyObject *counter;    /* the recorder's itertools.count: one next() per offered event */
    CountLayout *fast;    /* the counter, where its fields can be read in place; else NULL */
    long long max_events; /* events are kept while next(counter) < max_events */
    PyObject *namer;      /* python_tracer._c_name, asked on a cache miss */
    int active;           /* cleared by the tracer on stop; hooks then remove themselves */
    int c_calls;          /* record C functions' calls too (else Python functions only) */
    NameEntry *names;     /* NAME_CACHE_SIZE slots */
} HookState;

static PyTypeObject HookStateType;

/* `counter` as a CountLayout if it is an itertools.count laid out as we expect (its size,
 * and its repr showing the value we read); else NULL (next() is called instead). */
static CountLayout *
count_fast(PyObject *counter)
{
#if PY_VERSION_HEX < 0x030E0000
    PyTypeObject *type = Py_TYPE(counter);
    if (strcmp(type->tp_name, "itertools.count") != 0 ||
        type->tp_basicsize != (Py_ssize_t)sizeof(CountLayout)) {
        return NULL;
    }
    CountLayout *count = (CountLayout *)counter;
    if (count->cnt == PY_SSIZE_T_MAX || count->long_cnt != NULL) {
        return NULL;
    }
    PyObject *repr = PyObject_Repr(counter);
    if (repr == NULL) {
        return NULL;
    }
    PyObject *expected = PyUnicode_FromFormat("count(%zd)", count->cnt);
    int same = expected != NULL ? PyUnicode_Compare(repr, expected) == 0 : 0;
    Py_DECREF(repr);
    Py_XDECREF(expected);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return same ? count : NULL;
#else
    (void)counter;
    return NULL;
#endif
}

static PyObject *
HookState_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"counter", "max_events", "namer", "c_calls", NULL};
    PyObject *counter, *namer;
    long long max_events;
    int c_calls = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLO|p:HookState", keywords, &counter,
                                     &max_events, &namer, &c_calls)) {
        return NULL;
    }
    if (Py_TYPE(counter)->tp_iternext == NULL) {
        PyErr_SetString(PyExc_TypeError, "HookState counter must be an iterator");
        return NULL;
    }
    if (!PyCallable_Check(namer)) {
        PyErr_SetString(PyExc_TypeError, "HookState namer must be callable");
        return NULL;
    }
#ifdef STEPSCOPE_TSC
    if (g_tsc == 0) {
        tsc_calibrate();
    }
#endif
    HookState *self = (HookState *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->names = PyMem_Calloc(NAME_CACHE_SIZE, sizeof(NameEntry));
    if (self->names == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    Py_INCREF(counter);
    self->counter = counter;
    self->fast = count_fast(counter);
    if (self->fast == NULL && PyErr_Occurred()) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(namer);
    self->namer = namer;
    self->max_events = max_events;
    self->active = 1;
    self->c_calls = c_calls;
    return (PyObject *)self;
}

static void
name_entry_clear(NameEntry *entry)
{
    Py_CLEAR(entry->module);
    Py_CLEAR(entry->owner_type);
    Py_CLEAR(entry->self_type);
    Py_CLEAR(entry->name);
    entry->ml = NULL;
    entry->ml_name = NULL;
}

static int
HookState_traverse(HookState *self, visitproc visit, void *arg)
{
    Py_VISIT(self->counter);
    Py_VISIT(self->namer);
    if (self->names != NULL) {
        for (int i = 0; i < NAME_CACHE_SIZE; i++) {
            Py_VISIT(self->names[i].module);
            Py_VISIT(self->names[i].owner_type);
            Py_VISIT(self->names[i].self_type);
        }
    }
    return 0;
}

static int
HookState_clear(HookState *self)
{
    self->fast = NULL;
    Py_CLEAR(self->counter);
    Py_CLEAR(self->namer);
    if (self->names != NULL) {
        for (int i = 0; i < NAME_CACHE_SIZE; i++) {
            name_entry_clear(&self->names[i]);
        }
    }
    return 0;
}

static void
HookState_dealloc(HookState *self)
{
    PyObject_GC_UnTrack(self);
    HookState_clear(self);
    PyMem_Free(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
HookState_get_active(HookState *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->active);
}

static int
HookState_set_active(HookState *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete active");
        return -1;
    }
    int truth = PyObject_IsTrue(value);
    if (truth < 0) {
        return -1;
    }
    self->active = truth;
    return 0;
}

static PyGetSetDef HookState_getset[] = {
    {"active", (getter)HookState_get_active, (setter)HookState_set_active,
     "Whether the hooks record; once False, each hook removes itself on its next event.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HookStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.capture._pyhook.HookState",
    .tp_basicsize = sizeof(HookState),
    .tp_dealloc = (destructor)HookState_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "HookState(counter, max_events, namer, c_calls=True): what one tracer's thread "
              "hooks share.",
    .tp_traverse = (traverseproc)HookState_traverse,
    .tp_clear = (inquiry)HookState_clear,
    .tp_getset = HookState_getset,
    .tp_new = HookState_new,
};

static inline size_t
name_slot(PyMethodDef *ml, PyObject *module, PyObject *owner_type, PyObject *self_type)
{
    /* Objects are at least 16-byte aligned: drop the low bits before mixing. */
    uint64_t h = (uint64_t)(uintptr_t)ml >> 3;
    h = h * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)(uintptr_t)module >> 4);
    h = h * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)(uintptr_t)owner_type >> 4);
    h = h * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)(uintptr_t)self_type >> 4);
    h ^= h >> 29;
    return (size_t)(h & (NAME_CACHE_SIZE - 1));
}

/* The event name of a C callable (new reference): _c_name(func), cached for builtins. */
static PyObject *
c_name(HookState *state, PyObject *func)
{
    if (!PyCFunction_Check(func)) {
        return PyObject_CallOneArg(state->namer, func);
    }
    PyCFunctionObject *cf = (PyCFunctionObject *)func;
    PyObject *self_obj = cf->m_self;
    PyObject *owner_type = NULL, *self_type = NULL;
    if (self_obj != NULL && !PyModule_Check(self_obj)) {
        self_type = (PyObject *)Py_TYPE(self_obj);
        owner_type = PyType_Check(self_obj) ? self_obj : self_type;
    }
    PyObject *module = cf->m_module;
    NameEntry *entry = &state->names[name_slot(cf->m_ml, module, owner_type, self_type)];
    if (entry->name != NULL && entry->ml == cf->m_ml && entry->ml_name == cf->m_ml->ml_name &&
        entry->module == module && entry->owner_type == owner_type &&
        entry->self_type == self_type) {
        Py_INCREF(entry->name);
        return entry->name;
    }
    PyObject *name = PyObject_CallOneArg(state->namer, func);
    if (name == NULL || !PyUnicode_CheckExact(name)) {
        return name;
    }
    /* Fill the slot before letting go of the old one: freeing it may run other code. */
    NameEntry old = *entry;
    entry->ml = cf->m_ml;
    entry->ml_name = cf->m_ml->ml_name;
    Py_XINCREF(module);
    entry->module = module;
    Py_XINCREF(owner_type);
    entry->owner_type = owner_type;
    Py_XINCREF(self_type);
    entry->self_type = self_type;
    Py_INCREF(name);
    entry->name = name;
    name_entry_clear(&old);
    return name;
}

/* ---- ThreadHook ------------------------------------------------------------------------ */

/* What a name (code object, C function's name) is interned as in the thread's Records: a
 * direct-mapped cache in front of Names.intern, which would otherwise be asked (through the
 * type checks and probing of a general interning) on every call. Each slot holds its key, so
 * that its address names the same object for as long as it is cached. */
#define ID_CACHE_SIZE 512
typedef struct {
    PyObject *key; /* owned; NULL: empty */
    int32_t id;
} IdSlot;

typedef struct {
    long long start;
    PyObject *what; /* owned: the code object of a Python call, the callable of a C call */
} OpenCall;

/* A recorded event not yet in the events list: the tuple (what, start, end) to be. */
typedef struct {
    PyObject *what; /* owned: the code object, or the C function's name */
    long long start;
    long long end;
} DoneCall;

/* A block of held events. Blocks are chained rather than one array grown: growing a large
 * array copies it, which the traced program would wait for. */
typedef struct DoneChunk {
    struct DoneChunk *next;
    Py_ssize_t n;
    DoneCall calls[CHUNK_EVENTS];
} DoneChunk;

typedef struct {
    PyObject_HEAD
    HookState *state;
    PyObject *events;  /* the thread's ThreadBuffer.events list, or NULL */
    PyObject *records; /* or the thread's Records: events are appended there at once */
    OpenCall *stack;
    Py_ssize_t depth;
    Py_ssize_t capacity;
    DoneChunk *first; /* admitted events, oldest first, waiting for flush() */
    DoneChunk *last;
    IdSlot *ids;      /* with records: ID_CACHE_SIZE slots, made on the first event */
} ThreadHook;

static PyTypeObject ThreadHookType;

static PyObject *
ThreadHook_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"state", "events", NULL};
    PyObject *state, *events;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O:ThreadHook", keywords,
                                     &HookStateType, &state, &events)) {
        return NULL;
    }
    int is_records = g_records != NULL && PyObject_TypeCheck(events, g_records->records_type);
    if (!is_records && !PyList_Check(events)) {
        PyErr_Format(PyExc_TypeError, "ThreadHook events must be a list or Records, not %.100s",
                     Py_TYPE(events)->tp_name);
        return NULL;
    }
    ThreadHook *self = (ThreadHook *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(state);
    self->state = (HookState *)state;
    Py_INCREF(events);
    if (is_records) {
        self->events = NULL;
        self->records = events;
    } else {
        self->events = events;
        self->records = NULL;
    }
    self->stack = NULL;
    self->depth = 0;
    self->capacity = 0;
    self->first = self->last = NULL;
    self->ids = NULL;
    return (PyObject *)self;
}

/* Free an array of open calls that is no longer any hook's stack. */
static void
free_calls(OpenCall *calls, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(calls[i].what);
    }
    PyMem_Free(calls);
}

/* Free a chain of held events that is no longer any hook's, from its `skip`th event on. */
static void
free_chunks(DoneChunk *chunk, Py_ssize_t skip)
{
    while (chunk != NULL) {
        for (Py_ssize_t i = skip; i < chunk->n; i++) {
            Py_DECREF(chunk->calls[i].what);
        }
        DoneChunk *next = chunk->next;
        PyMem_Free(chunk);
        chunk = next;
        skip = 0;
    }
}

/* The event tuple (what, start, end); steals the reference to `what`. */
static PyObject *
event_tuple(PyObject *what, long long start, long long end)
{
    PyObject *py_start = PyLong_FromLongLong(start);
    PyObject *py_end = PyLong_FromLongLong(end);
    PyObject *event = NULL;
    if (py_start != NULL && py_end != NULL) {
        event = PyTuple_New(3);
    }
    if (event == NULL) {
        Py_DECREF(what);
        Py_XDECREF(py_start);
        Py_XDECREF(py_end);
        return NULL;
    }
    int tracked = PyObject_GC_IsTracked(what);
    PyTuple_SET_ITEM(event, 0, what);
    PyTuple_SET_ITEM(event, 1, py_start);
    PyTuple_SET_ITEM(event, 2, py_end);
    if (!tracked) {
        /* Nothing in it can form a cycle: what the collector does to such a tuple on its
         * first pass, done now so that a million events do not slow every collection. */
        PyObject_GC_UnTrack(event);
    }
    return event;
}

/* Append the recorded events to the events list, oldest first. */
static int
flush_done(ThreadHook *self)
{
    /* Detach them first: building tuples may start a collection, whose finalizers may call
     * functions, recorded by this very hook, or let other threads run and flush it. */
    DoneChunk *chunk = self->first;
    self->first = self->last = NULL;
    if (self->events == NULL) { /* cleared, or Records (which hold nothing back) */
        free_chunks(chunk, 0);
        return 0;
    }
    while (chunk != NULL) {
        for (Py_ssize_t i = 0; i < chunk->n; i++) {
            DoneCall *call = &chunk->calls[i];
            PyObject *event = event_tuple(call->what, call->start, call->end);
            if (event == NULL || PyList_Append(self->events, event) < 0) {
                Py_XDECREF(event);
                free_chunks(chunk, i + 1);
                return -1;
            }
            Py_DECREF(event);
        }
        DoneChunk *next = chunk->next;
        PyMem_Free(chunk);
        chunk = next;
    }
    return 0;
}

/* Let go of the id cache (its keys are names, which hold no references back). */
static void
free_ids(IdSlot *ids)
{
    if (ids == NULL) {
        return;
    }
    for (int i = 0; i < ID_CACHE_SIZE; i++) {
        Py_XDECREF(ids[i].key);
    }
    PyMem_Free(ids);
}

/* The Records id of `name` (borrowed), or -1 with an exception. */
static inline int32_t
name_id(ThreadHook *self, PyObject *name)
{
    if (self->ids == NULL) {
        self->ids = PyMem_Calloc(ID_CACHE_SIZE, sizeof(IdSlot));
        if (self->ids == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    /* Objects are 16-byte aligned: mix the bits above. */
    uint64_t h = ((uint64_t)(uintptr_t)name >> 4) * 0x9E3779B97F4A7C15ULL;
    IdSlot *slot = &self->ids[(h >> 32) & (ID_CACHE_SIZE - 1)];
    if (slot->key == name) {
        return slot->id;
    }
    int32_t id = g_records->intern(self->records, name);
    if (id < 0) {
        return -1;
    }
    PyObject *old = slot->key;
    Py_INCREF(name);
    slot->key = name;
    slot->id = id;
    Py_XDECREF(old); /* a name: freeing it runs no code of ours */
    return id;
}

static int
ThreadHook_traverse(ThreadHook *self, visitproc visit, void *arg)
{
    Py_VISIT(self->state);
    Py_VISIT(self->events);
    Py_VISIT(self->records);
    for (Py_ssize_t i = 0; i < self->depth; i++) {
        Py_VISIT(self->stack[i].what);
    }
    for (DoneChunk *chunk = self->first; chunk != NULL; chunk = chunk->next) {
        for (Py_ssize_t i = 0; i < chunk->n; i++) {
            Py_VISIT(chunk->calls[i].what);
        }
    }
    if (self->ids != NULL) {
        for (int i = 0; i < ID_CACHE_SIZE; i++) {
            Py_VISIT(self->ids[i].key);
        }
    }
    return 0;
}

static int
ThreadHook_clear(ThreadHook *self)
{
    OpenCall *calls = self->stack;
    Py_ssize_t n = self->depth;
    self->stack = NULL;
    self->depth = self->capacity = 0;
    free_calls(calls, n);
    DoneChunk *chunks = self->first;
    self->first = self->last = NULL;
    free_chunks(chunks, 0);
    IdSlot *ids = self->ids;
    self->ids = NULL;
    free_ids(ids);
    Py_CLEAR(self->state);
    Py_CLEAR(self->events);
    Py_CLEAR(self->records);
    return 0;
}

static void
ThreadHook_dealloc(ThreadHook *self)
{
    PyObject_GC_UnTrack(self);
    if (self->first != NULL && self->events != NULL) {
        /* Events recorded after the tracer's last flush still belong in the buffer. */
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *exc = PyErr_GetRaisedException();
#else
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
#endif
        if (flush_done(self) < 0) {
            PyErr_WriteUnraisable((PyObject *)self);
        }
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(exc);
#else
        PyErr_Restore(type, value, traceback);
#endif
    }
    ThreadHook_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Make room for one more open call (out of line: rare). */
static HOOK_NOINLINE int
grow_stack(ThreadHook *self)
{
    Py_ssize_t capacity = self->capacity ? self->capacity * 2 : INITIAL_STACK;
    OpenCall *stack = PyMem_Realloc(self->stack, (size_t)capacity * sizeof(OpenCall));
    if (stack == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->stack = stack;
    self->capacity = capacity;
    return 0;
}

/* Open a call; steals the reference to `what`. */
static inline int
push_call(ThreadHook *self, PyObject *what)
{
    if (self->depth == self->capacity && grow_stack(self) < 0) {
        Py_DECREF(what);
        return -1;
    }
    OpenCall *top = &self->stack[self->depth];
    top->what = what;
    top->start = now_ns();
    self->depth++;
    return 0;
}

/* Count one offered event on the recorder's counter: 1 keep it, 0 over the cap, -1 error. */
static inline int
admit(HookState *state)
{
    long long n;
    if (state->fast != NULL && state->fast->cnt < PY_SSIZE_T_MAX - 1) {
        n = state->fast->cnt++; /* what next(counter) returns, without making the int */
    } else {
        PyObject *index = Py_TYPE(state->counter)->tp_iternext(state->counter);
        if (index == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_RuntimeError, "the recorder's event counter is exhausted");
            }
            return -1;
        }
        n = PyLong_AsLongLong(index);
        Py_DECREF(index);
        if (n == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    return n < state->max_events;
}

/* Record a finished call held until flush() (no Records); steals the reference to `name`. */
static HOOK_NOINLINE int
hold_call(ThreadHook *self, PyObject *name, long long start, long long end)
{
    if (self->events == NULL) {
        Py_DECREF(name);
        return 0;
    }
    if (self->state == NULL || !self->state->active) {
        /* Stopped: the tracer's flush may be over, so go straight to the list, in order. */
        if (flush_done(self) < 0) {
            Py_DECREF(name);
            return -1;
        }
        PyObject *event = event_tuple(name, start, end);
        if (event == NULL) {
            return -1;
        }
        int rc = PyList_Append(self->events, event);
        Py_DECREF(event);
        return rc;
    }
    DoneChunk *chunk = self->last;
    if (chunk == NULL || chunk->n == CHUNK_EVENTS) {
        chunk = PyMem_Malloc(sizeof(DoneChunk));
        if (chunk == NULL) {
            Py_DECREF(name);
            PyErr_NoMemory();
            return -1;
        }
        chunk->next = NULL;
        chunk->n = 0;
        if (self->last != NULL) {
            self->last->next = chunk;
        } else {
            self->first = chunk;
        }
        self->last = chunk;
    }
    DoneCall *slot = &chunk->calls[chunk->n++];
    slot->what = name;
    slot->start = start;
    slot->end = end;
    return 0;
}

/* Close the innermost open call and record it if the cap allows (as Recorder.admit does). */
static inline int
pop_call(ThreadHook *self, int is_c)
{
    if (self->depth == 0 || self->state == NULL) {
        return 0; /* a call that began before this hook was installed */
    }
    /* Take the entry off the stack before anything that may run other threads' code. */
    OpenCall call = self->stack[--self->depth];
    HookState *state = self->state;
    int kept = admit(state);
    if (kept <= 0) {
        Py_DECREF(call.what);
        return kept;
    }
    PyObject *name = call.what;
    if (is_c) {
        name = c_name(state, call.what);
        Py_DECREF(call.what);
        if (name == NULL) {
            return -1;
        }
    }
    long long end = now_ns();
    if (self->records != NULL) {
        int32_t id = name_id(self, name);
        Py_DECREF(name);
        return id < 0 ? -1 : g_records->append_id(self->records, id, call.start, end);
    }
    return hold_call(self, name, call.start, end);
}

/* Handle one profile event; removes this thread's profile function once the tracer stopped.
 * The same order as the pure-Python hook: record first, then check the flag. */
static int
hook_event(ThreadHook *self, PyFrameObject *frame, int what, PyObject *arg)
{
    int rc = 0;
    switch (what) {
    case PyTrace_CALL:
        rc = push_call(self, (PyObject *)PyFrame_GetCode(frame));
        break;
    case PyTrace_C_CALL:
        if (self->state != NULL && self->state->c_calls) {
            Py_INCREF(arg);
            rc = push_call(self, arg);
        }
        break;
    case PyTrace_RETURN:
        rc = pop_call(self, 0);
        break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
        if (self->state != NULL && self->state->c_calls) {
            rc = pop_call(self, 1);
        }
        break;
    default:
        break;
    }
    if (rc < 0 || self->state == NULL || !self->state->active) {
        /* As sys.setprofile's own trampoline does when its function fails. */
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *exc = PyErr_GetRaisedException();
        PyEval_SetProfile(NULL, NULL);
        PyErr_SetRaisedException(exc);
#else
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyEval_SetProfile(NULL, NULL);
        PyErr_Restore(type, value, traceback);
#endif
    }
    return rc;
}

/* The Py_tracefunc installed by install(). */
static int
hook_trace(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    ThreadHook *self = (ThreadHook *)obj;
    /* The thread state's reference may go while we run (stop removes every thread's hook). */
    Py_INCREF(self);
    int rc = hook_event(self, frame, what, arg);
    Py_DECREF(self);
    return rc;
}

static PyObject *g_event_names[5]; /* "call", "return", "c_call", "c_return", "c_exception" */
static const int g_event_codes[5] = {PyTrace_CALL, PyTrace_RETURN, PyTrace_C_CALL,
                                     PyTrace_C_RETURN, PyTrace_C_EXCEPTION};

/* hook(frame, event, arg): the signature of a sys.setprofile function. */
static PyObject *
ThreadHook_call(ThreadHook *self, PyObject *args, PyObject *kwargs)
{
    PyObject *frame, *event, *arg;
    if (!PyArg_ParseTuple(args, "OUO:ThreadHook", &frame, &event, &arg)) {
        return NULL;
    }
    int what = -1;
    for (int i = 0; i < 5 && what < 0; i++) {
        if (event == g_event_names[i] ||
            PyUnicode_Compare(event, g_event_names[i]) == 0) {
            what = g_event_codes[i];
        }
    }
    if (what == PyTrace_CALL && !PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "a 'call' event needs a frame");
        return NULL;
    }
    if (hook_event(self, (PyFrameObject *)frame, what, arg) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
ThreadHook_drain(ThreadHook *self, PyObject *Py_UNUSED(ignored))
{
    /* Detach the stack first: building the result may let the thread run and push again. */
    OpenCall *calls = self->stack;
    Py_ssize_t n = self->depth;
    self->stack = NULL;
    self->depth = self->capacity = 0;
    PyObject *result = PyList_New(0);
    Py_ssize_t i = n;
    while (result != NULL && i > 0) {
        OpenCall *call = &calls[i - 1];
        PyObject *item = Py_BuildValue("(LO)", call->start, call->what);
        if (item == NULL || PyList_Append(result, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(result);
            break;
        }
        Py_DECREF(item);
        i--;
    }
    free_calls(calls, n);
    return result;
}

static PyObject *
ThreadHook_flush(ThreadHook *self, PyObject *Py_UNUSED(ignored))
{
    if (flush_done(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
ThreadHook_get_depth(ThreadHook *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->depth);
}

static PyMethodDef ThreadHook_methods[] = {
    {"drain", (PyCFunction)ThreadHook_drain, METH_NOARGS,
     "Empty the stack of open calls: a list of (start_ns, code or callable), innermost first."},
    {"flush", (PyCFunction)ThreadHook_flush, METH_NOARGS,
     "Append the events recorded since the last flush to the events list, oldest first."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ThreadHook_getset[] = {
    {"depth", (getter)ThreadHook_get_depth, NULL, "How many calls are open.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ThreadHookType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.capture._pyhook.ThreadHook",
    .tp_basicsize = sizeof(ThreadHook),
    .tp_dealloc = (destructor)ThreadHook_dealloc,
    .tp_call = (ternaryfunc)ThreadHook_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "ThreadHook(state, events): one thread's Python-tracer profile function.",
    .tp_traverse = (traverseproc)ThreadHook_traverse,
    .tp_clear = (inquiry)ThreadHook_clear,
    .tp_methods = ThreadHook_methods,
    .tp_getset = ThreadHook_getset,
    .tp_new = ThreadHook_new,
};

/* ---- the hooks of the Python-only mode: frame evaluation, sys.monitoring ---------------- */

#ifdef STEPSCOPE_THREAD_LOOKUP
/* What is installed: one tracer's state, asked `bootstrap()` on each thread's first frame
 * (it returns the thread's ThreadHook, None for a thread left out, or False for "ask again
 * on the next frame"). A new install bumps the serial (from 1), so each thread asks again. */
static HookState *g_frame_state = NULL;
static PyObject *g_frame_bootstrap = NULL;
static uint64_t g_frame_serial = 0;

/* Per thread: the serial its hook was asked for, the hook (borrowed: the tracer holds every
 * thread's hook while it is installed; NULL for a thread left out), whether it is inside
 * bootstrap(), and below which stack address a frame is refused (0: unknown). */
typedef struct {
    uint64_t serial;
    ThreadHook *hook;
    int busy;
    uintptr_t stack_floor;
} ThreadLookup;
/* One thread-local struct: one lookup of the thread's storage per frame, not four. */
static _Thread_local ThreadLookup tl_lookup = {0, NULL, 0, 0};

/* C stack kept free below the deepest traced frame: every Python call is a C call under the
 * frame hook (3.11 otherwise runs Python-to-Python calls in one C frame), so a recursion limit
 * set high could reach the end of the thread's stack; this turns that into a RecursionError. */
#define STACK_RESERVE (256 * 1024)

static void
find_stack_floor(void)
{
    tl_lookup.stack_floor = 0;
#if defined(STEPSCOPE_FRAME_HOOK) && defined(__linux__)
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) {
        return;
    }
    void *addr = NULL;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr != NULL &&
        size >= 64 * 1024 && size < ((size_t)1 << 40)) {
        /* A small stack (threading.stack_size) keeps a quarter of itself free. */
        size_t reserve = size / 4 < STACK_RESERVE ? size / 4 : STACK_RESERVE;
        tl_lookup.stack_floor = (uintptr_t)addr + reserve;
    }
    pthread_attr_destroy(&attr);
#endif
}

/* Ask the tracer for the calling thread's hook (tl_lookup.hook; NULL: not traced). */
static void
frame_bootstrap(void)
{
    tl_lookup.serial = g_frame_serial;
    tl_lookup.hook = NULL;
    if (g_frame_bootstrap == NULL) {
        return;
    }
    find_stack_floor();
    /* Its own frames are not traced; an exception being thrown into a frame waits. */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
#endif
    tl_lookup.busy = 1;
    PyObject *bootstrap = g_frame_bootstrap;
    Py_INCREF(bootstrap);
    PyObject *hook = PyObject_CallNoArgs(bootstrap);
    tl_lookup.busy = 0;
    if (hook == NULL) {
        PyErr_WriteUnraisable(bootstrap);
    } else if (hook == Py_False) {
        tl_lookup.serial = 0; /* not yet: ask again on the thread's next frame */
        Py_DECREF(hook);
    } else {
        /* A hook of this install only: the tracer holds it (borrowed here). */
        if (PyObject_TypeCheck(hook, &ThreadHookType) && tl_lookup.serial == g_frame_serial &&
            ((ThreadHook *)hook)->state == g_frame_state) {
            tl_lookup.hook = (ThreadHook *)hook;
        }
        Py_DECREF(hook);
    }
    Py_DECREF(bootstrap);
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(type, value, traceback);
#endif
}

/* The thread whose lookup was found last, by its thread state, that state's interpreter and
 * its id (unique in the interpreter: a state freed and made again at the same address has
 * another id, so a thread that ended is never taken for a new one). Reading a thread-local variable from a
 * shared library is a call (__tls_get_addr) per frame; comparing with the last thread's
 * state, which the interpreter lock makes the only one running, is two loads. */
#ifndef Py_GIL_DISABLED
static PyThreadState *g_last_tstate = NULL;
static PyInterpreterState *g_last_interp = NULL;
static uint64_t g_last_tstate_id = 0;
static ThreadLookup *g_last_lookup = NULL;
#endif

static inline ThreadLookup *
thread_lookup(PyThreadState *tstate)
{
#ifndef Py_GIL_DISABLED
    if (tstate == g_last_tstate && tstate->id == g_last_tstate_id &&
        tstate->interp == g_last_interp) {
        return g_last_lookup;
    }
    g_last_tstate = tstate;
    g_last_interp = tstate->interp;
    g_last_tstate_id = tstate->id;
    g_last_lookup = &tl_lookup;
    return g_last_lookup;
#else
    (void)tstate;
    return &tl_lookup;
#endif
}

/* The calling thread's hook if it records now, else NULL (`tl`: the calling thread's). */
static inline ThreadHook *
thread_hook(ThreadLookup *tl)
{
    if (tl->busy) {
        return NULL;
    }
    if (tl->serial != g_frame_serial) {
        frame_bootstrap();
    }
    ThreadHook *hook = tl->hook;
    if (hook == NULL || hook->state == NULL || !hook->state->active) {
        return NULL;
    }
    return hook;
}

/* Set (or clear, with None) what thread_hook() asks; a new serial either way. */
static int
set_thread_lookup(PyObject *state, PyObject *bootstrap)
{
    g_frame_serial++;
    if (state == Py_None) {
        Py_CLEAR(g_frame_bootstrap);
        Py_CLEAR(g_frame_state);
        return 0;
    }
    if (!PyObject_TypeCheck(state, &HookStateType) || !PyCallable_Check(bootstrap)) {
        PyErr_SetString(PyExc_TypeError, "expected a HookState and a callable bootstrap");
        return -1;
    }
    Py_INCREF(state);
    Py_XSETREF(g_frame_state, (HookState *)state);
    Py_INCREF(bootstrap);
    Py_XSETREF(g_frame_bootstrap, bootstrap);
    return 0;
}
#endif

#ifdef STEPSCOPE_MONITORING
/* sys.monitoring callbacks: PY_START, PY_RESUME and PY_THROW open a call of args[0] (the code
 * object); PY_RETURN, PY_YIELD and PY_UNWIND close the innermost. The same events 3.12's
 * sys.setprofile turns into "call" and "return". */
static PyObject *
monitoring_start(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || !PyCode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "monitoring_start(code, offset, ...)");
        return NULL;
    }
    ThreadHook *hook = thread_hook(thread_lookup(PyThreadState_Get()));
    if (hook != NULL) {
        Py_INCREF(args[0]);
        if (push_call(hook, args[0]) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
monitoring_end(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ThreadHook *hook = thread_hook(thread_lookup(PyThreadState_Get()));
    if (hook != NULL) {
        Py_INCREF(hook);
        int rc = pop_call(hook, 0);
        Py_DECREF(hook);
        if (rc < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
monitoring_install(PyObject *module, PyObject *args)
{
    PyObject *state, *bootstrap;
    if (!PyArg_ParseTuple(args, "OO:set_monitoring_hooks", &state, &bootstrap) ||
        set_thread_lookup(state, bootstrap) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}
#endif

#ifdef STEPSCOPE_FRAME_HOOK
/* The evaluation function we replaced (called for every frame). */
static _PyFrameEvalFunction g_prev_eval = NULL;

/* Whether evaluating `frame` is a call the profile hook would report: not the evaluation
 * that only makes a generator (3.11 runs the new frame up to RETURN_GENERATOR, before its
 * first traceable instruction; a generator's resumptions are owned by the generator). */
static inline int
frame_is_call(EvalFrame *frame)
{
#if STEPSCOPE_FRAME_HOOK == 311
    return frame->owner != FRAME_OWNED_BY_THREAD ||
           !(frame->f_code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR));
#else
    (void)frame;
    return 1;
#endif
}

/* The evaluation function installed: time each frame's evaluation as one call. */
static PyObject *
frame_eval(PyThreadState *tstate, EvalFrame *frame, int throwflag)
{
    _PyFrameEvalFunction inner = g_prev_eval != NULL ? g_prev_eval : _PyEval_EvalFrameDefault;
    ThreadLookup *tl = thread_lookup(tstate);
    ThreadHook *hook = thread_hook(tl);
    if (hook == NULL || !frame_is_call(frame)) {
        return inner(tstate, frame, throwflag);
    }
    char here; /* where this C frame is: the stack grows down */
    uintptr_t floor = tl->stack_floor;
    if (floor != 0 && (uintptr_t)&here < floor) {
        PyErr_SetString(PyExc_RecursionError,
                        "maximum recursion depth exceeded: the thread's C stack is nearly "
                        "full (stepscope's Python tracer makes every Python call a C call)");
        /* The frame must still be evaluated to be cleaned up: it fails at once, as when an
         * exception is thrown into a generator. */
        return inner(tstate, frame, 1);
    }
    Py_INCREF(hook); /* the tracer may let go of it while the frame runs */
    PyObject *code = EVAL_FRAME_CODE(frame);
    Py_INCREF(code);
    Py_ssize_t depth = -1;
    if (push_call(hook, code) == 0) {
        depth = hook->depth;
    } else {
        PyErr_Clear(); /* out of memory for the stack: this frame goes untimed */
    }
    PyObject *result = inner(tstate, frame, throwflag);
    /* Only the entry pushed above: stop() may have emptied the stack meanwhile. */
    if (depth > 0 && hook->depth == depth) {
        if (result != NULL) {
            if (pop_call(hook, 0) < 0) {
                Py_CLEAR(result);
            }
        } else {
#if PY_VERSION_HEX >= 0x030C0000
            PyObject *exc = PyErr_GetRaisedException();
#else
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
#endif
            if (pop_call(hook, 0) < 0) {
                PyErr_WriteUnraisable((PyObject *)hook);
            }
#if PY_VERSION_HEX >= 0x030C0000
            PyErr_SetRaisedException(exc);
#else
            PyErr_Restore(type, value, traceback);
#endif
        }
    }
    Py_DECREF(hook);
    return result;
}

static PyObject *
frame_hook_install(PyObject *module, PyObject *args)
{
    PyObject *state, *bootstrap;
    if (!PyArg_ParseTuple(args, "O!O:install_frame_hook", &HookStateType, &state, &bootstrap)) {
        return NULL;
    }
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (current != frame_eval) {
        /* Another evaluation function (a JIT's) keeps running under ours. */
        g_prev_eval = current == _PyEval_EvalFrameDefault ? NULL : current;
    }
    if (set_thread_lookup(state, bootstrap) < 0) {
        return NULL;
    }
    _PyInterpreterState_SetEvalFrameFunc(interp, frame_eval);
    Py_RETURN_NONE;
}

static PyObject *
frame_hook_uninstall(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == frame_eval) {
        _PyInterpreterState_SetEvalFrameFunc(
            interp, g_prev_eval != NULL ? g_prev_eval : _PyEval_EvalFrameDefault);
        g_prev_eval = NULL;
    }
    /* Else another function went on top of ours; it still calls ours, which passes every
     * frame straight through from now on. */
    set_thread_lookup(Py_None, NULL);
    Py_RETURN_NONE;
}
#endif

/* ---- module ---------------------------------------------------------------------------- */

static PyObject *
install(PyObject *module, PyObject *hook)
{
    if (!PyObject_TypeCheck(hook, &ThreadHookType)) {
        PyErr_Format(PyExc_TypeError, "install() takes a ThreadHook, got %.100s",
                     Py_TYPE(hook)->tp_name);
        return NULL;
    }
    PyEval_SetProfile(hook_trace, hook);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
module_now_ns(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong(now_ns());
}

static PyMethodDef module_methods[] = {
    {"now_ns", module_now_ns, METH_NOARGS,
     "The hooks' clock (time.time_ns's, read through the CPU's counter where it has one): "
     "never before a time the hooks have recorded."},
    {"install", install, METH_O,
     "Make a ThreadHook the calling thread's profile function (as sys.setprofile, in C)."},
#ifdef STEPSCOPE_FRAME_HOOK
    {"install_frame_hook", frame_hook_install, METH_VARARGS,
     "install_frame_hook(state, bootstrap): time every Python frame's evaluation, on every "
     "thread (Python functions only); each thread's first frame calls bootstrap() for its "
     "ThreadHook (None: leave the thread out)."},
    {"uninstall_frame_hook", frame_hook_uninstall, METH_NOARGS,
     "Stop timing frames; frames still running finish untimed."},
#endif
#ifdef STEPSCOPE_MONITORING
    {"set_monitoring_hooks", monitoring_install, METH_VARARGS,
     "set_monitoring_hooks(state, bootstrap), or (None, None): what monitoring_start and "
     "monitoring_end record into (each thread's first event calls bootstrap() for its "
     "ThreadHook; None leaves the thread out)."},
    {"monitoring_start", (PyCFunction)(void (*)(void))monitoring_start, METH_FASTCALL,
     "sys.monitoring callback for PY_START, PY_RESUME, PY_THROW: a call opens."},
    {"monitoring_end", (PyCFunction)(void (*)(void))monitoring_end, METH_FASTCALL,
     "sys.monitoring callback for PY_RETURN, PY_YIELD, PY_UNWIND: the innermost call ends."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_pyhook", "stepscope's compiled Python-tracer hook.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__pyhook(void)
{
#ifdef STEPSCOPE_TSC
    if (!getenv("STEPSCOPE_NO_TSC")) {
        tsc_best_pair(&g_tsc_base, &g_ns_base);
    } else {
        g_tsc = -1;
        g_ns_anchor = 0;
    }
#endif
    static const char *names[5] = {"call", "return", "c_call", "c_return", "c_exception"};
    for (int i = 0; i < 5; i++) {
        g_event_names[i] = PyUnicode_InternFromString(names[i]);
        if (g_event_names[i] == NULL) {
            return NULL;
        }
    }
    if (PyType_Ready(&HookStateType) < 0 || PyType_Ready(&ThreadHookType) < 0) {
        return NULL;
    }
    g_records = PyCapsule_Import(RECORDS_API_CAPSULE, 0);
    if (g_records == NULL) {
        PyErr_Clear(); /* _fastpath not built: hooks append to lists only */
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&HookStateType);
    if (PyModule_AddObject(module, "HookState", (PyObject *)&HookStateType) < 0) {
        Py_DECREF(&HookStateType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&ThreadHookType);
    if (PyModule_AddObject(module, "ThreadHook", (PyObject *)&ThreadHookType) < 0) {
        Py_DECREF(&ThreadHookType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
