/* stepscope's compiled fast path for capture (with records.c).
 *
 * - Trace: the user annotation type. With no session recording, creating, entering and
 *   leaving one must cost about as little as a Python function call; a pure-Python class
 *   costs several times that. A finished Trace is written straight into its thread's
 *   Records (below) through the session's Sink: no Python call, no Python object per event.
 * - Names, Records, Sink: the recorder's storage (see records.h). Records hold fixed-size
 *   binary events; the Python tracer's hook (_pyhook) writes into them too, through the
 *   capsule `_records_api_v2`.
 * - set_profile_all_threads: install a Python profile function on every thread of the
 *   interpreter, including threads started before the session (sys.setprofile only reaches
 *   the calling thread on Python < 3.12).
 *
 * The pure-Python fallback in trace.py has the same behaviour; this module is optional.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <time.h>

#include "records.h"

/* Keyword metadata up to this many items is held inline: no allocation besides the object. */
#define MAX_INLINE_STATS 4

/* The session's Sink while user annotations are recorded, else NULL. */
static PyObject *g_sink = NULL;
/* Or a callable add(name, start_ns, end_ns, stats) given instead of a Sink, else NULL. */
static PyObject *g_add = NULL;
/* Python function (name, stats, func) -> wrapper, used when a Trace decorates a function. */
static PyObject *g_decorate = NULL;

static inline long long
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec;
}

typedef struct {
    PyObject_HEAD
    PyObject *name;
    PyObject *stats;    /* dict of keyword metadata, or NULL (none, or not built yet) */
    PyObject *kwnames;  /* metadata keys as the call passed them, until stats is built */
    PyObject *kwvalues[MAX_INLINE_STATS]; /* their values, until stats is built */
    long long start; /* 0 when not recording this instance */
} TraceObject;

static PyTypeObject TraceType;

static TraceObject *
trace_alloc(PyTypeObject *type, PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "Trace name must be a str, got %.100s",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    TraceObject *self = (TraceObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(name);
    self->name = name;
    self->stats = NULL;
    self->kwnames = NULL;
    self->start = 0;
    return self;
}

/* Build the stats dict from the call's keywords (deferred: most Traces never need it). */
static PyObject *
trace_stats(TraceObject *self)
{
    if (self->stats == NULL && self->kwnames != NULL) {
        PyObject *stats = PyDict_New();
        if (stats == NULL) {
            return NULL;
        }
        Py_ssize_t n = PyTuple_GET_SIZE(self->kwnames);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyDict_SetItem(stats, PyTuple_GET_ITEM(self->kwnames, i),
                               self->kwvalues[i]) < 0) {
                Py_DECREF(stats);
                return NULL;
            }
        }
        self->stats = stats;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_CLEAR(self->kwvalues[i]);
        }
        Py_CLEAR(self->kwnames);
    }
    return self->stats != NULL ? self->stats : Py_None;
}

/* Trace(name, **metadata) through the vectorcall protocol: no tuple or dict unless needed. */
static PyObject *
Trace_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *name = NULL;
    Py_ssize_t skip = -1;
    if (nargs == 1) {
        name = args[0];
    } else if (nargs == 0) {
        for (Py_ssize_t i = 0; i < nkw; i++) {
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "name") == 0) {
                name = args[i];
                skip = i;
                break;
            }
        }
    }
    if (name == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "Trace() takes one positional argument, the event name");
        return NULL;
    }
    TraceObject *self = trace_alloc((PyTypeObject *)type, name);
    if (self == NULL) {
        return NULL;
    }
    if (nkw > 0 && nkw <= MAX_INLINE_STATS && skip < 0) {
        /* The common case: keep the call's own key tuple and the values inline. */
        for (Py_ssize_t i = 0; i < nkw; i++) {
            Py_INCREF(args[nargs + i]);
            self->kwvalues[i] = args[nargs + i];
        }
        Py_INCREF(kwnames);
        self->kwnames = kwnames;
    } else if (nkw > (skip >= 0 ? 1 : 0)) {
        PyObject *stats = PyDict_New();
        if (stats == NULL) {
            Py_DECREF(self);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < nkw; i++) {
            if (i != skip &&
                PyDict_SetItem(stats, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
                Py_DECREF(stats);
                Py_DECREF(self);
                return NULL;
            }
        }
        self->stats = stats;
    }
    return (PyObject *)self;
}

/* The classic path, used by subclasses (which do not inherit tp_vectorcall). */
static PyObject *
Trace_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *name = NULL;
    PyObject *stats = NULL;
    if (PyTuple_GET_SIZE(args) == 1) {
        name = PyTuple_GET_ITEM(args, 0);
    } else if (PyTuple_GET_SIZE(args) == 0 && kwargs != NULL) {
        name = PyDict_GetItemString(kwargs, "name");
    }
    if (name == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "Trace() takes one positional argument, the event name");
        return NULL;
    }
    Py_INCREF(name);
    TraceObject *self = trace_alloc(type, name);
    Py_DECREF(name);
    if (self == NULL) {
        return NULL;
    }
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0) {
        stats = PyDict_Copy(kwargs);
        if (stats == NULL || (PyTuple_GET_SIZE(args) == 0 &&
                              PyDict_DelItemString(stats, "name") < 0)) {
            Py_XDECREF(stats);
            Py_DECREF(self);
            return NULL;
        }
        if (PyDict_GET_SIZE(stats) > 0) {
            self->stats = stats;
        } else {
            Py_DECREF(stats);
        }
    }
    return (PyObject *)self;
}

static int
Trace_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return 0; /* everything happens in tp_new / vectorcall */
}

static void
Trace_dealloc(TraceObject *self)
{
    Py_XDECREF(self->name);
    Py_XDECREF(self->stats);
    if (self->kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->kwnames); i++) {
            Py_XDECREF(self->kwvalues[i]);
        }
        Py_DECREF(self->kwnames);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Trace_enter(TraceObject *self, PyObject *Py_UNUSED(ignored))
{
    if (g_sink != NULL || g_add != NULL) {
        self->start = now_ns();
    }
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
Trace_exit(TraceObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long start = self->start;
    if (start == 0) {
        Py_RETURN_NONE;
    }
    self->start = 0;
    PyObject *sink = g_sink;
    if (sink != NULL) {
        long long end = now_ns();
        /* Held: admitting runs the counter, which may let set_recorder() run elsewhere. */
        Py_INCREF(sink);
        int kept = sink_admit((SinkObject *)sink);
        int rc = kept;
        if (kept > 0) {
            PyObject *records = sink_thread_records((SinkObject *)sink);
            if (records == NULL) {
                rc = -1;
            } else if (self->kwnames != NULL) { /* the keywords as given, no dict built */
                rc = records_append(records, self->name, start, end,
                                    &PyTuple_GET_ITEM(self->kwnames, 0), self->kwvalues,
                                    PyTuple_GET_SIZE(self->kwnames), NULL);
            } else {
                rc = records_append(records, self->name, start, end, NULL, NULL, 0,
                                    self->stats);
            }
        }
        Py_DECREF(sink);
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE; /* never swallow the block's exception */
    }
    PyObject *add = g_add;
    if (add == NULL) {
        Py_RETURN_NONE;
    }
    long long end = now_ns();
    PyObject *stats = trace_stats(self);
    if (stats == NULL) {
        return NULL;
    }
    PyObject *py_start = PyLong_FromLongLong(start);
    PyObject *py_end = PyLong_FromLongLong(end);
    PyObject *result = NULL;
    if (py_start != NULL && py_end != NULL) {
        PyObject *call_args[4] = {self->name, py_start, py_end, stats};
        Py_INCREF(add);
        result = PyObject_Vectorcall(add, call_args, 4, NULL);
        Py_DECREF(add);
    }
    Py_XDECREF(py_start);
    Py_XDECREF(py_end);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    Py_RETURN_NONE; /* never swallow the block's exception */
}

static PyObject *
Trace_set_metadata(TraceObject *self, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "set_metadata() takes keyword arguments only");
        return NULL;
    }
    if (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0) {
        Py_RETURN_NONE;
    }
    if (trace_stats(self) == NULL) {
        return NULL;
    }
    if (self->stats == NULL) {
        self->stats = PyDict_New();
        if (self->stats == NULL) {
            return NULL;
        }
    }
    if (PyDict_Update(self->stats, kwargs) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Trace_call(TraceObject *self, PyObject *args, PyObject *kwargs)
{
    if (g_decorate == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stepscope's Trace decorator is not initialised");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 1 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0)) {
        PyErr_SetString(PyExc_TypeError, "a Trace used as a decorator takes one function");
        return NULL;
    }
    PyObject *stats = trace_stats(self);
    if (stats == NULL) {
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(g_decorate, self->name, stats,
                                        PyTuple_GET_ITEM(args, 0), NULL);
}

static PyObject *
Trace_get_name(TraceObject *self, void *Py_UNUSED(closure))
{
    Py_INCREF(self->name);
    return self->name;
}

static PyMethodDef Trace_methods[] = {
    {"__enter__", (PyCFunction)Trace_enter, METH_NOARGS, "Start the event."},
    {"__exit__", (PyCFunction)(void (*)(void))Trace_exit, METH_FASTCALL, "End the event."},
    {"set_metadata", (PyCFunction)(void (*)(void))Trace_set_metadata,
     METH_VARARGS | METH_KEYWORDS, "Add or update stats of the event while it is open."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Trace_getset[] = {
    {"name", (getter)Trace_get_name, NULL, "The event name.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TraceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.Trace",
    .tp_basicsize = sizeof(TraceObject),
    .tp_dealloc = (destructor)Trace_dealloc,
    .tp_call = (ternaryfunc)Trace_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Record a named event on the calling thread; keyword arguments become stats.",
    .tp_methods = Trace_methods,
    .tp_getset = Trace_getset,
    .tp_init = Trace_init,
    .tp_new = Trace_new,
    .tp_vectorcall = Trace_vectorcall,
};

/* ---- module functions ------------------------------------------------------------------ */

static PyObject *
set_recorder(PyObject *module, PyObject *target)
{
    PyObject *old_sink = g_sink, *old_add = g_add;
    g_sink = g_add = NULL;
    if (target != Py_None) {
        Py_INCREF(target);
        if (sink_check(target)) {
            g_sink = target;
        } else {
            g_add = target;
        }
    }
    Py_XDECREF(old_sink);
    Py_XDECREF(old_add);
    Py_RETURN_NONE;
}

static PyObject *
set_decorator(PyObject *module, PyObject *func)
{
    Py_INCREF(func);
    Py_XSETREF(g_decorate, func);
    Py_RETURN_NONE;
}

static PyObject *g_whatnames[8];

/* Calls the Python profile function as sys.setprofile would: func(frame, event, arg). */
static int
profile_trampoline(PyObject *func, PyFrameObject *frame, int what, PyObject *arg)
{
    PyObject *args[3] = {(PyObject *)frame, g_whatnames[what], arg != NULL ? arg : Py_None};
    PyObject *result = PyObject_Vectorcall(func, args, 3, NULL);
    if (result == NULL) {
        PyEval_SetProfile(NULL, NULL);
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

static PyObject *
set_profile_all_threads(PyObject *module, PyObject *func)
{
    Py_tracefunc tracefunc = func == Py_None ? NULL : profile_trampoline;
    PyObject *arg = func == Py_None ? NULL : func;
#if PY_VERSION_HEX >= 0x030C0000
    PyEval_SetProfileAllThreads(tracefunc, arg);
#else
    PyThreadState *current = PyThreadState_Get();
    PyInterpreterState *interp = PyThreadState_GetInterpreter(current);
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        if (_PyEval_SetProfile(ts, tracefunc, arg) < 0) {
            return NULL;
        }
    }
#endif
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_recorder", set_recorder, METH_O,
     "Route Trace events to a Sink (or a callable add(name, start, end, stats)); None "
     "stops recording."},
    {"set_decorator", set_decorator, METH_O,
     "Register the function that wraps functions decorated with a Trace."},
    {"set_profile_all_threads", set_profile_all_threads, METH_O,
     "Install a profile function (as sys.setprofile) on every thread; None removes it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fastpath", "stepscope's compiled capture fast path.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    static const char *names[8] = {"call", "exception", "line", "return",
                                   "c_call", "c_exception", "c_return", "opcode"};
    for (int i = 0; i < 8; i++) {
        g_whatnames[i] = PyUnicode_InternFromString(names[i]);
        if (g_whatnames[i] == NULL) {
            return NULL;
        }
    }
    if (PyType_Ready(&TraceType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&TraceType);
    if (PyModule_AddObject(module, "Trace", (PyObject *)&TraceType) < 0) {
        Py_DECREF(&TraceType);
        Py_DECREF(module);
        return NULL;
    }
    if (records_add_types(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
