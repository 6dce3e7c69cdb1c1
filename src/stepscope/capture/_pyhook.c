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
 *   finished call becomes one 24-byte record there at once, its code object or name interned.
 *   Given a list instead, finished calls are held in a compact C array while the tracer is
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
#include <time.h>

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
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec;
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

typedef struct {
    PyObject_HEAD
    PyObject *counter;    /* the recorder's itertools.count: one next() per offered event */
    long long max_events; /* events are kept while next(counter) < max_events */
    PyObject *namer;      /* python_tracer._c_name, asked on a cache miss */
    int active;           /* cleared by the tracer on stop; hooks then remove themselves */
    NameEntry *names;     /* NAME_CACHE_SIZE slots */
} HookState;

static PyTypeObject HookStateType;

static PyObject *
HookState_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"counter", "max_events", "namer", NULL};
    PyObject *counter, *namer;
    long long max_events;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLO:HookState", keywords, &counter,
                                     &max_events, &namer)) {
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
    Py_INCREF(namer);
    self->namer = namer;
    self->max_events = max_events;
    self->active = 1;
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
    .tp_doc = "HookState(counter, max_events, namer): what one tracer's thread hooks share.",
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

/* Open a call; steals the reference to `what`. */
static int
push_call(ThreadHook *self, PyObject *what)
{
    if (self->depth == self->capacity) {
        Py_ssize_t capacity = self->capacity ? self->capacity * 2 : INITIAL_STACK;
        OpenCall *stack = PyMem_Realloc(self->stack, (size_t)capacity * sizeof(OpenCall));
        if (stack == NULL) {
            Py_DECREF(what);
            PyErr_NoMemory();
            return -1;
        }
        self->stack = stack;
        self->capacity = capacity;
    }
    self->stack[self->depth].start = now_ns();
    self->stack[self->depth].what = what;
    self->depth++;
    return 0;
}

/* Close the innermost open call and record it if the cap allows (as Recorder.admit does). */
static int
pop_call(ThreadHook *self, int is_c)
{
    if (self->depth == 0 || self->state == NULL) {
        return 0; /* a call that began before this hook was installed */
    }
    /* Take the entry off the stack before anything that may run other threads' code. */
    OpenCall call = self->stack[--self->depth];
    HookState *state = self->state;
    PyObject *index = Py_TYPE(state->counter)->tp_iternext(state->counter);
    if (index == NULL) {
        Py_DECREF(call.what);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "the recorder's event counter is exhausted");
        }
        return -1;
    }
    long long n = PyLong_AsLongLong(index);
    Py_DECREF(index);
    if (n == -1 && PyErr_Occurred()) {
        Py_DECREF(call.what);
        return -1;
    }
    if (n >= state->max_events) {
        Py_DECREF(call.what);
        return 0;
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
        int rc = g_records->append(self->records, name, call.start, end);
        Py_DECREF(name);
        return rc;
    }
    if (self->events == NULL) {
        Py_DECREF(name);
        return 0;
    }
    if (!state->active) {
        /* Stopped: the tracer's flush may be over, so go straight to the list, in order. */
        if (flush_done(self) < 0) {
            Py_DECREF(name);
            return -1;
        }
        PyObject *event = event_tuple(name, call.start, end);
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
    slot->start = call.start;
    slot->end = end;
    return 0;
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
        Py_INCREF(arg);
        rc = push_call(self, arg);
        break;
    case PyTrace_RETURN:
        rc = pop_call(self, 0);
        break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
        rc = pop_call(self, 1);
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

static PyMethodDef module_methods[] = {
    {"install", install, METH_O,
     "Make a ThreadHook the calling thread's profile function (as sys.setprofile, in C)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_pyhook", "stepscope's compiled Python-tracer hook.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__pyhook(void)
{
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
