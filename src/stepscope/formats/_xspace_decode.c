/* A columnar decoder of XSpace protobuf bytes.
 *
 * Parsing a profile with the protobuf runtime builds one message object per event and then
 * needs a Python loop per event to reach columns; for profiles with millions of events that
 * is slow and several times the file size in memory. This decoder walks the wire format once
 * and fills flat arrays (events, lines, stats), which Python wraps as NumPy arrays without a
 * copy. The small parts (plane names, metadata maps, plane stats, hostnames) are handed back
 * as the raw bytes of those fields, for the protobuf runtime to parse.
 *
 * Field numbers are those of XProf's xplane.proto (see formats/xplane_proto.py).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE  /* mremap */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

/* ---- growable arrays ------------------------------------------------------------------- */

/* A column grows by doubling. Through malloc, each doubling copies the column into a new
 * block (touching every page of it) and leaves the old one as a hole in the heap: the load's
 * resident memory was about twice its columns'. On Linux a column past BUF_MAP_BYTES lives in
 * its own anonymous mapping instead: mremap grows it without copying, pages never written
 * stay unbacked, and the column is trimmed to its pages when handed over. */
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#define BUF_MAP_BYTES ((size_t)1 << 20)
#endif

typedef struct {
    char *data;
    size_t len;  /* in bytes */
    size_t cap;  /* in bytes */
    int mapped;  /* data is an anonymous mapping of cap bytes (Linux) */
} Buf;

static void
buf_free(Buf *b)
{
#if defined(__linux__)
    if (b->mapped) {
        munmap(b->data, b->cap);
    } else
#endif
    {
        PyMem_RawFree(b->data);
    }
    b->data = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
}

/* decode_table walks the file without the GIL (other threads run beside a long decode), so
 * an error raised on the way takes the GIL for the moment of setting it. PyGILState_Ensure
 * is also right where the GIL is held already (decode, scan): it only counts.
 *
 * Where decode_table walks the file's two halves on two threads, a Python exception set by
 * the helper thread would land on that thread's own state and be lost, and which half's
 * error is raised must not depend on timing: each thread's errors then go to its ErrSink
 * (the first one kept), raised by the calling thread once both are joined. */
enum { ERR_NONE = 0, ERR_BAD, ERR_MEMORY, ERR_OS, ERR_OVERFLOW };

typedef struct {
    int kind;
    const char *what;  /* ERR_BAD, ERR_OVERFLOW: a static string */
    int err;           /* ERR_OS: errno */
} ErrSink;

static __thread ErrSink *err_sink;  /* this thread's, while it walks a half; else NULL */

static int
sink_error(int kind, const char *what, int err)
{
    if (err_sink == NULL) return 0;
    if (err_sink->kind == ERR_NONE) {
        err_sink->kind = kind;
        err_sink->what = what;
        err_sink->err = err;
    }
    return 1;
}

static void
no_memory(void)
{
    if (sink_error(ERR_MEMORY, NULL, 0)) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyErr_NoMemory();
    PyGILState_Release(gil);
}

static void
os_error(int err)
{
    if (sink_error(ERR_OS, NULL, err)) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
    PyGILState_Release(gil);
}

static int
buf_reserve(Buf *b, size_t extra)
{
    if (b->len + extra <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        cap *= 2;
    }
#if defined(__linux__)
    if (cap >= BUF_MAP_BYTES) {
        char *data;
        if (b->mapped) {
            data = mremap(b->data, b->cap, cap, MREMAP_MAYMOVE);
        } else {
            data = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (data != MAP_FAILED && b->len) {
                memcpy(data, b->data, b->len);
            }
        }
        if (data == MAP_FAILED) {
            no_memory();
            return -1;
        }
        if (!b->mapped) {
            PyMem_RawFree(b->data);
        }
        b->data = data;
        b->cap = cap;
        b->mapped = 1;
        return 0;
    }
#endif
    char *data = PyMem_RawRealloc(b->data, cap);
    if (data == NULL) {
        no_memory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* Give back the capacity past the column's last page (a mapping) or its last byte. */
static void
buf_trim(Buf *b)
{
#if defined(__linux__)
    if (b->mapped) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t keep = (b->len + page - 1) / page * page;
        if (keep == 0) keep = page;
        if (keep < b->cap && mremap(b->data, b->cap, keep, 0) != MAP_FAILED) {
            b->cap = keep;
        }
        return;
    }
#endif
    if (b->len && b->len < b->cap) {
        char *data = PyMem_RawRealloc(b->data, b->len);
        if (data != NULL) {
            b->data = data;
            b->cap = b->len;
        }
    }
}

static inline int
buf_put(Buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap && buf_reserve(b, n) < 0) {
        return -1;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

#define PUT(b, type, value)            \
    do {                               \
        type v_ = (type)(value);       \
        if (buf_put((b), &v_, sizeof v_) < 0) \
            goto fail;                 \
    } while (0)

/* ---- an object that owns a Buf and exposes it through the buffer protocol -------------- */

typedef struct {
    PyObject_HEAD
    Buf buf;
} ColumnObject;

static void
Column_dealloc(ColumnObject *self)
{
    buf_free(&self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Column_getbuffer(ColumnObject *self, Py_buffer *view, int flags)
{
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->buf.data ? self->buf.data : empty,
                             (Py_ssize_t)self->buf.len, 0, flags);
}

static PyBufferProcs Column_as_buffer = {(getbufferproc)Column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.formats._xspace_decode.Column",
    .tp_basicsize = sizeof(ColumnObject),
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_buffer = &Column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoded column bytes (read with numpy.frombuffer).",
};

/* Hand a Buf over to a new Column object (the Buf is emptied). */
static PyObject *
column_from(Buf *b)
{
    ColumnObject *col = PyObject_New(ColumnObject, &ColumnType);
    if (col == NULL) {
        return NULL;
    }
    buf_trim(b);
    col->buf = *b;
    b->data = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
    return (PyObject *)col;
}

/* ---- wire format ----------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

static void
raise_bad(const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed XSpace data: %s", what);
}

static int
bad(const char *what)
{
    if (sink_error(ERR_BAD, what, 0)) return -1;
    PyGILState_STATE gil = PyGILState_Ensure();
    raise_bad(what);
    PyGILState_Release(gil);
    return -1;
}

/* Raise what a sink holds (the GIL held): 0, or -1 with the exception set. */
static int
sink_raise(const ErrSink *sink)
{
    switch (sink->kind) {
    case ERR_NONE:
        return 0;
    case ERR_BAD:
        raise_bad(sink->what);
        break;
    case ERR_MEMORY:
        PyErr_NoMemory();
        break;
    case ERR_OVERFLOW:
        PyErr_SetString(PyExc_OverflowError, sink->what);
        break;
    default:
        errno = sink->err;
        PyErr_SetFromErrno(PyExc_OSError);
    }
    return -1;
}

static inline int
read_varint(Reader *r, uint64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    while (r->p < r->end) {
        uint8_t byte = *r->p++;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
        shift += 7;
        if (shift >= 70) {
            return bad("varint too long");
        }
    }
    return bad("truncated varint");
}

/* Read a field key; returns 0 at the end of the message, 1 with a key, -1 on error. */
static inline int
read_key(Reader *r, uint32_t *field, uint32_t *wire)
{
    if (r->p >= r->end) {
        return 0;
    }
    uint64_t key;
    if (read_varint(r, &key) < 0) {
        return -1;
    }
    *field = (uint32_t)(key >> 3);
    *wire = (uint32_t)(key & 7);
    return 1;
}

static inline int
read_len(Reader *r, Reader *sub)
{
    uint64_t n;
    if (read_varint(r, &n) < 0) {
        return -1;
    }
    if (n > (uint64_t)(r->end - r->p)) {
        return bad("length past the end of the data");
    }
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
    return 0;
}

static int
skip_field(Reader *r, uint32_t wire)
{
    uint64_t v;
    Reader sub;
    switch (wire) {
    case 0:
        return read_varint(r, &v);
    case 1:
        if (r->end - r->p < 8) {
            return bad("truncated fixed64");
        }
        r->p += 8;
        return 0;
    case 2:
        return read_len(r, &sub);
    case 5:
        if (r->end - r->p < 4) {
            return bad("truncated fixed32");
        }
        r->p += 4;
        return 0;
    default:
        return bad("unsupported wire type");
    }
}

/* Copy one field (its key re-encoded, then its payload) to `out`, for protobuf to parse. */
static int
copy_field(Reader *r, uint32_t field, uint32_t wire, Buf *out)
{
    const uint8_t *start = r->p;
    uint8_t key[10];
    size_t n = 0;
    uint64_t k = ((uint64_t)field << 3) | wire;
    do {
        key[n++] = (uint8_t)((k & 0x7F) | (k > 0x7F ? 0x80 : 0));
        k >>= 7;
    } while (k);
    if (skip_field(r, wire) < 0) {
        return -1;
    }
    if (buf_put(out, key, n) < 0 || buf_put(out, start, (size_t)(r->p - start)) < 0) {
        return -1;
    }
    return 0;
}

/* ---- decoding -------------------------------------------------------------------------- */

enum { KIND_DOUBLE = 1, KIND_UINT64 = 2, KIND_INT64 = 3, KIND_STR = 4, KIND_BYTES = 5,
       KIND_REF = 6 };

typedef struct {
    /* events */
    Buf ev_line;        /* int32: index into the lines columns */
    Buf ev_metadata;    /* int64: XEvent.metadata_id */
    Buf ev_offset_ps;   /* int64 */
    Buf ev_duration_ps; /* int64 */
    Buf ev_nstats;      /* int32: number of stats of the event */
    Buf ev_occurrences; /* int64 pairs (event index, num_occurrences), rare */
    /* lines */
    Buf ln_plane;       /* int32: index into the planes list */
    Buf ln_id, ln_display_id, ln_timestamp_ns, ln_duration_ps; /* int64 */
    /* stats of events */
    Buf st_metadata;    /* int64 */
    Buf st_kind;        /* int8 */
    Buf st_value;       /* int64: value (double as its bits), or offset into blob */
    Buf st_len;         /* int32: length in blob for str/bytes, else 0 */
    Buf blob;           /* bytes of str/bytes stat values */
    PyObject *line_names, *line_display_names; /* lists of str */
    PyObject *planes;   /* list of bytes: each plane's fields except its lines */
    int64_t n_events;
} State;

/* One XStat's fields: its metadata id, kind and value (a text's bytes in ``text``; where a
 * field comes twice, the last wins, as protobuf has it). 0, or -1 with an exception. */
static int
parse_stat(Reader *r, int64_t *metadata_id, int8_t *kind, int64_t *value, Reader *text)
{
    uint32_t field, wire;
    int more;
    *metadata_id = 0;
    *value = 0;
    *kind = 0;
    text->p = text->end = NULL;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (field == 1 && wire == 0) {
            if (read_varint(r, &v) < 0) return -1;
            *metadata_id = (int64_t)v;
        } else if (field == 2 && wire == 1) {
            if (r->end - r->p < 8) return bad("truncated double");
            memcpy(value, r->p, 8);
            r->p += 8;
            *kind = KIND_DOUBLE;
        } else if ((field == 3 || field == 4 || field == 7) && wire == 0) {
            if (read_varint(r, &v) < 0) return -1;
            *value = (int64_t)v;
            *kind = field == 3 ? KIND_UINT64 : field == 4 ? KIND_INT64 : KIND_REF;
        } else if ((field == 5 || field == 6) && wire == 2) {
            if (read_len(r, text) < 0) return -1;
            *kind = field == 5 ? KIND_STR : KIND_BYTES;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    return more < 0 ? -1 : 0;
}

static int
decode_stat(State *s, Reader *r)
{
    int64_t metadata_id, value;
    int8_t kind;
    int32_t len = 0;
    Reader text;
    if (parse_stat(r, &metadata_id, &kind, &value, &text) < 0) return -1;
    if (kind == KIND_STR || kind == KIND_BYTES) {
        value = (int64_t)s->blob.len;
        len = (int32_t)(text.end - text.p);
        if (buf_put(&s->blob, text.p, (size_t)len) < 0) return -1;
    }
    PUT(&s->st_metadata, int64_t, metadata_id);
    PUT(&s->st_kind, int8_t, kind);
    PUT(&s->st_value, int64_t, value);
    PUT(&s->st_len, int32_t, len);
    return 0;
fail:
    return -1;
}

static int
decode_event(State *s, Reader *r, int32_t line_index)
{
    uint32_t field, wire;
    int64_t metadata_id = 0, offset = 0, duration = 0, occurrences = 0;
    int32_t nstats = 0;
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 2 || field == 3 || field == 5)) {
            if (read_varint(r, &v) < 0) return -1;
            if (field == 1) metadata_id = (int64_t)v;
            else if (field == 2) offset = (int64_t)v;
            else if (field == 3) duration = (int64_t)v;
            else occurrences = (int64_t)v;
        } else if (field == 4 && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_stat(s, &sub) < 0) return -1;
            nstats++;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    PUT(&s->ev_line, int32_t, line_index);
    PUT(&s->ev_metadata, int64_t, metadata_id);
    PUT(&s->ev_offset_ps, int64_t, offset);
    PUT(&s->ev_duration_ps, int64_t, duration);
    PUT(&s->ev_nstats, int32_t, nstats);
    if (occurrences) {
        PUT(&s->ev_occurrences, int64_t, s->n_events);
        PUT(&s->ev_occurrences, int64_t, occurrences);
    }
    s->n_events++;
    return 0;
fail:
    return -1;
}

static int
append_str(PyObject *list, Reader *sub)
{
    PyObject *str = PyUnicode_DecodeUTF8((const char *)sub->p, sub->end - sub->p, "replace");
    if (str == NULL) return -1;
    int rc = PyList_Append(list, str);
    Py_DECREF(str);
    return rc;
}

static int
decode_line(State *s, Reader *r, int32_t plane_index)
{
    uint32_t field, wire;
    int64_t id = 0, display_id = 0, timestamp = 0, duration = 0;
    Reader name = {NULL, NULL}, display_name = {NULL, NULL};
    int32_t line_index = (int32_t)(s->ln_plane.len / sizeof(int32_t));
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 10 || field == 3 || field == 9)) {
            if (read_varint(r, &v) < 0) return -1;
            if (field == 1) id = (int64_t)v;
            else if (field == 10) display_id = (int64_t)v;
            else if (field == 3) timestamp = (int64_t)v;
            else duration = (int64_t)v;
        } else if (wire == 2 && field == 2) {
            if (read_len(r, &name) < 0) return -1;
        } else if (wire == 2 && field == 11) {
            if (read_len(r, &display_name) < 0) return -1;
        } else if (wire == 2 && field == 4) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_event(s, &sub, line_index) < 0) return -1;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    PUT(&s->ln_plane, int32_t, plane_index);
    PUT(&s->ln_id, int64_t, id);
    PUT(&s->ln_display_id, int64_t, display_id);
    PUT(&s->ln_timestamp_ns, int64_t, timestamp);
    PUT(&s->ln_duration_ps, int64_t, duration);
    Reader none = {(const uint8_t *)"", (const uint8_t *)""};
    if (append_str(s->line_names, name.p ? &name : &none) < 0) return -1;
    if (append_str(s->line_display_names, display_name.p ? &display_name : &none) < 0)
        return -1;
    return 0;
fail:
    return -1;
}

static int
decode_plane(State *s, Reader *r, int32_t plane_index)
{
    /* Everything but the lines is copied, key and all, for the protobuf runtime to parse. */
    Buf rest = {NULL, 0, 0};
    uint32_t field, wire;
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        if (field == 3 && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_line(s, &sub, plane_index) < 0) goto fail;
        } else if (copy_field(r, field, wire, &rest) < 0) {
            goto fail;
        }
    }
    if (more < 0) goto fail;
    PyObject *bytes = PyBytes_FromStringAndSize(rest.data ? rest.data : "", rest.len);
    buf_free(&rest);
    if (bytes == NULL) return -1;
    int rc = PyList_Append(s->planes, bytes);
    Py_DECREF(bytes);
    return rc;
fail:
    buf_free(&rest);
    return -1;
}

static void
state_free(State *s)
{
    Buf *bufs[] = {&s->ev_line, &s->ev_metadata, &s->ev_offset_ps, &s->ev_duration_ps,
                   &s->ev_nstats, &s->ev_occurrences, &s->ln_plane, &s->ln_id,
                   &s->ln_display_id, &s->ln_timestamp_ns, &s->ln_duration_ps,
                   &s->st_metadata, &s->st_kind, &s->st_value, &s->st_len, &s->blob};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        buf_free(bufs[i]);
    }
    Py_XDECREF(s->line_names);
    Py_XDECREF(s->line_display_names);
    Py_XDECREF(s->planes);
}

static int
add_column(PyObject *dict, const char *name, Buf *b)
{
    PyObject *col = column_from(b);
    if (col == NULL) return -1;
    int rc = PyDict_SetItemString(dict, name, col);
    Py_DECREF(col);
    return rc;
}

static PyObject *
decode(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    State s;
    memset(&s, 0, sizeof s);
    Buf space_rest = {NULL, 0, 0};
    PyObject *result = NULL;
    s.line_names = PyList_New(0);
    s.line_display_names = PyList_New(0);
    s.planes = PyList_New(0);
    if (s.line_names == NULL || s.line_display_names == NULL || s.planes == NULL) goto done;

    Reader r = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    uint32_t field, wire;
    int more;
    int32_t plane_index = 0;
    while ((more = read_key(&r, &field, &wire)) == 1) {
        if (field == 1 && wire == 2) {
            Reader sub;
            if (read_len(&r, &sub) < 0 || decode_plane(&s, &sub, plane_index++) < 0) goto done;
        } else if (copy_field(&r, field, wire, &space_rest) < 0) {
            goto done;
        }
    }
    if (more < 0) goto done;

    PyObject *out = PyDict_New();
    if (out == NULL) goto done;
    PyObject *rest = PyBytes_FromStringAndSize(space_rest.data ? space_rest.data : "",
                                               space_rest.len);
    if (rest == NULL || PyDict_SetItemString(out, "space_rest", rest) < 0 ||
        PyDict_SetItemString(out, "planes", s.planes) < 0 ||
        PyDict_SetItemString(out, "line_name", s.line_names) < 0 ||
        PyDict_SetItemString(out, "line_display_name", s.line_display_names) < 0 ||
        add_column(out, "ev_line", &s.ev_line) < 0 ||
        add_column(out, "ev_metadata", &s.ev_metadata) < 0 ||
        add_column(out, "ev_offset_ps", &s.ev_offset_ps) < 0 ||
        add_column(out, "ev_duration_ps", &s.ev_duration_ps) < 0 ||
        add_column(out, "ev_nstats", &s.ev_nstats) < 0 ||
        add_column(out, "ev_occurrences", &s.ev_occurrences) < 0 ||
        add_column(out, "ln_plane", &s.ln_plane) < 0 ||
        add_column(out, "ln_id", &s.ln_id) < 0 ||
        add_column(out, "ln_display_id", &s.ln_display_id) < 0 ||
        add_column(out, "ln_timestamp_ns", &s.ln_timestamp_ns) < 0 ||
        add_column(out, "ln_duration_ps", &s.ln_duration_ps) < 0 ||
        add_column(out, "st_metadata", &s.st_metadata) < 0 ||
        add_column(out, "st_kind", &s.st_kind) < 0 ||
        add_column(out, "st_value", &s.st_value) < 0 ||
        add_column(out, "st_len", &s.st_len) < 0 ||
        add_column(out, "blob", &s.blob) < 0) {
        Py_XDECREF(rest);
        Py_DECREF(out);
        goto done;
    }
    Py_DECREF(rest);
    result = out;
done:
    buf_free(&space_rest);
    state_free(&s);
    PyBuffer_Release(&view);
    return result;
}

/* ---- the table decoder: final columns, read from a file in pieces ---------------------
 *
 * `decode` above hands back the wire's columns as they are (picoseconds, metadata ids, an
 * int64 event row per stat); turning them into a host's table takes as much memory again,
 * and the file's bytes are held meanwhile. `scan` and `decode_table` instead read the file
 * through a window of a few MB (or a buffer in memory) and write the table's own columns:
 * event names and stat names as the table's codes (the planes' metadata, which `scan` hands
 * to Python first, mapped to codes there), start and duration in ns, typed stats apart, the
 * other stats with an int32 event row, str/bytes values as indices of texts kept one after
 * another. Field by field it does what xspace_to_tables.py's
 * `from_columns` does with `decode`'s columns; tests hold the two to the same tables.
 */

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>

#define WINDOW (4u << 20)

typedef struct {
    const uint8_t *mem;  /* the whole data, when decoding a buffer; else NULL */
    int fd;              /* else the file, read with pread */
    uint8_t *win;
    size_t win_cap, win_len;
    int64_t win_off;     /* file offset of win[0] */
    int64_t size;
    int nogil;           /* the caller released the GIL: reads need not */
    size_t window;       /* bytes read at a time; 0: WINDOW */
} Source;

/* pread [off, off + want) into win until it is full or the file ends: the bytes read (an
 * error stops it, its errno in *err, else 0). */
static size_t
source_read(const Source *s, int64_t off, size_t want, int *err)
{
    size_t got = 0;
    *err = 0;
    while (got < want) {
        ssize_t r = pread(s->fd, s->win + got, want - got, (off_t)(off + (int64_t)got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { *err = errno; break; }
        if (r == 0) break;
        got += (size_t)r;
    }
    return got;
}

/* Bytes [off, off + n) of the source (the caller checked that they lie inside it). */
static const uint8_t *
source_need(Source *s, int64_t off, size_t n)
{
    if (s->mem != NULL) {
        return s->mem + off;
    }
    if (off >= s->win_off && (uint64_t)(off - s->win_off) + n <= s->win_len) {
        return s->win + (off - s->win_off);
    }
    size_t window = s->window ? s->window : WINDOW;
    size_t want = n > window ? n : window;
    if ((int64_t)want > s->size - off) {
        want = (size_t)(s->size - off);
    }
    if (want > s->win_cap) {
        uint8_t *win = PyMem_RawRealloc(s->win, want);
        if (win == NULL) {
            no_memory();
            return NULL;
        }
        s->win = win;
        s->win_cap = want;
    }
    size_t got;
    int err;
    if (s->nogil) {
        got = source_read(s, off, want, &err);
    } else {
        Py_BEGIN_ALLOW_THREADS
        got = source_read(s, off, want, &err);
        Py_END_ALLOW_THREADS
    }
    if (err) {
        os_error(err);
        return NULL;
    }
    s->win_off = off;
    s->win_len = got;
    if (got < n) {
        bad("truncated: the file is shorter than when it was opened");
        return NULL;
    }
    return s->win;
}

/* A varint at *off (before end); *off moves past it. */
static int
src_varint(Source *s, int64_t *off, int64_t end, uint64_t *out)
{
    size_t avail = end - *off < 10 ? (size_t)(end - *off) : 10;
    const uint8_t *p = source_need(s, *off, avail);
    if (p == NULL) return -1;
    Reader r = {p, p + avail};
    if (read_varint(&r, out) < 0) return -1;
    *off += r.p - p;
    return 0;
}

/* A field key at *off: 0 at the end of the message, 1 with a key, -1 on error. */
static int
src_key(Source *s, int64_t *off, int64_t end, uint32_t *field, uint32_t *wire)
{
    if (*off >= end) return 0;
    uint64_t key;
    if (src_varint(s, off, end, &key) < 0) return -1;
    *field = (uint32_t)(key >> 3);
    *wire = (uint32_t)(key & 7);
    return 1;
}

/* A length-delimited field's payload as [*sub, *sub_end); *off moves past it. */
static int
src_len(Source *s, int64_t *off, int64_t end, int64_t *sub, int64_t *sub_end)
{
    uint64_t n;
    if (src_varint(s, off, end, &n) < 0) return -1;
    if (n > (uint64_t)(end - *off)) return bad("length past the end of the data");
    *sub = *off;
    *sub_end = *off + (int64_t)n;
    *off += (int64_t)n;
    return 0;
}

static int
src_skip(Source *s, int64_t *off, int64_t end, uint32_t wire)
{
    uint64_t v;
    int64_t a, b;
    switch (wire) {
    case 0:
        return src_varint(s, off, end, &v);
    case 1:
        if (end - *off < 8) return bad("truncated fixed64");
        *off += 8;
        return 0;
    case 2:
        return src_len(s, off, end, &a, &b);
    case 5:
        if (end - *off < 4) return bad("truncated fixed32");
        *off += 4;
        return 0;
    default:
        return bad("unsupported wire type");
    }
}

/* Copy the field at *off (its key re-encoded, then its payload) to `out`. */
static int
src_copy_field(Source *s, int64_t *off, int64_t end, uint32_t field, uint32_t wire, Buf *out)
{
    int64_t start = *off;
    if (src_skip(s, off, end, wire) < 0) return -1;
    const uint8_t *p = source_need(s, start, (size_t)(*off - start));
    if (p == NULL) return -1;
    Reader r = {p, p + (*off - start)};
    return copy_field(&r, field, wire, out);
}

/* `source` is an int (a file descriptor, read from offset 0 to its size) or a buffer. */
static int
source_open(Source *s, PyObject *arg, Py_buffer *view)
{
    memset(s, 0, sizeof *s);
    view->obj = NULL;
    if (PyLong_Check(arg)) {
        s->fd = (int)PyLong_AsLong(arg);
        if (s->fd == -1 && PyErr_Occurred()) return -1;
        struct stat st;
        if (fstat(s->fd, &st) < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        s->size = (int64_t)st.st_size;
        s->win_off = -1;
        return 0;
    }
    if (PyObject_GetBuffer(arg, view, PyBUF_SIMPLE) < 0) return -1;
    s->mem = (const uint8_t *)view->buf;
    s->size = (int64_t)view->len;
    return 0;
}

static void
source_close(Source *s, Py_buffer *view)
{
    PyMem_RawFree(s->win);
    s->win = NULL;
    if (view->obj != NULL) PyBuffer_Release(view);
}

/* scan(source) -> (space_rest: bytes, planes: list of bytes): every field but the planes'
 * lines, which are skipped unread. */
static PyObject *
scan(PyObject *module, PyObject *arg)
{
    Source s;
    Py_buffer view;
    Buf space_rest = {NULL, 0, 0}, rest = {NULL, 0, 0};
    PyObject *planes = NULL, *result = NULL;
    if (source_open(&s, arg, &view) < 0) return NULL;
    planes = PyList_New(0);
    if (planes == NULL) goto done;
    int64_t off = 0;
    uint32_t field, wire;
    int more;
    while ((more = src_key(&s, &off, s.size, &field, &wire)) == 1) {
        if (field == 1 && wire == 2) {
            int64_t p, pend;
            if (src_len(&s, &off, s.size, &p, &pend) < 0) goto done;
            int more2;
            rest.len = 0;
            while ((more2 = src_key(&s, &p, pend, &field, &wire)) == 1) {
                if (field == 3 && wire == 2) {
                    int64_t a, b;
                    if (src_len(&s, &p, pend, &a, &b) < 0) goto done;
                } else if (src_copy_field(&s, &p, pend, field, wire, &rest) < 0) {
                    goto done;
                }
            }
            if (more2 < 0) goto done;
            PyObject *bytes = PyBytes_FromStringAndSize(rest.data ? rest.data : "", rest.len);
            if (bytes == NULL) goto done;
            int rc = PyList_Append(planes, bytes);
            Py_DECREF(bytes);
            if (rc < 0) goto done;
        } else if (src_copy_field(&s, &off, s.size, field, wire, &space_rest) < 0) {
            goto done;
        }
    }
    if (more < 0) goto done;
    PyObject *head = PyBytes_FromStringAndSize(space_rest.data ? space_rest.data : "",
                                               space_rest.len);
    if (head == NULL) goto done;
    result = PyTuple_Pack(2, head, planes);
    Py_DECREF(head);
done:
    Py_XDECREF(planes);
    buf_free(&space_rest);
    buf_free(&rest);
    source_close(&s, &view);
    return result;
}

/* A plane's metadata ids → the table's codes: a direct table when the ids are small and
 * dense (they usually are), else a binary search over the sorted ids. */
typedef struct {
    int32_t *direct;
    int64_t ndirect;
    const int64_t *keys;
    const int32_t *codes;
    int64_t nkeys;
} Map;

static inline int32_t
map_lookup(const Map *m, int64_t id)
{
    if (m->direct != NULL) {
        return (uint64_t)id < (uint64_t)m->ndirect ? m->direct[id] : -1;
    }
    int64_t lo = 0, hi = m->nkeys;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (m->keys[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->nkeys && m->keys[lo] == id ? m->codes[lo] : -1;
}

/* Map from (keys: int64 buffer sorted ascending, codes: int32 buffer); views are kept in
 * `views` (released by the caller). */
static int
map_init(Map *m, PyObject *keys, PyObject *codes, Py_buffer *kv, Py_buffer *cv)
{
    memset(m, 0, sizeof *m);
    if (PyObject_GetBuffer(keys, kv, PyBUF_SIMPLE) < 0) return -1;
    if (PyObject_GetBuffer(codes, cv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(kv);
        kv->obj = NULL;
        return -1;
    }
    m->nkeys = kv->len / (Py_ssize_t)sizeof(int64_t);
    if (cv->len / (Py_ssize_t)sizeof(int32_t) != m->nkeys) {
        PyErr_SetString(PyExc_TypeError, "a map's keys and codes differ in length");
        return -1;
    }
    m->keys = kv->buf;
    m->codes = cv->buf;
    if (m->nkeys == 0) return 0;
    int64_t low = m->keys[0], high = m->keys[m->nkeys - 1];
    if (low >= 0 && high < 4 * m->nkeys + 4096) {
        m->ndirect = high + 1;
        m->direct = PyMem_RawMalloc((size_t)m->ndirect * sizeof(int32_t));
        if (m->direct == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (int64_t i = 0; i < m->ndirect; i++) m->direct[i] = -1;
        for (int64_t i = 0; i < m->nkeys; i++) m->direct[m->keys[i]] = m->codes[i];
    }
    return 0;
}

#define N_TYPED 4

typedef struct {
    Source src;
    /* events */
    Buf ev_line;      /* int16 or int32 (wide_lines) */
    Buf ev_name;      /* int16 or int32 (wide_names): the table's name code, -1 for an id
                       * without metadata */
    Buf ev_start;     /* int64 ns: offset, then (at the line's end) plus its timestamp */
    Buf ev_dur;       /* ns, negative ones made 0: int32 until one does not fit (wide_dur),
                       * then int64 */
    /* lines */
    Buf ln_plane;     /* int32 */
    Buf ln_id;        /* int64 */
    /* typed stats, per slot: rows (int64), values (int64) */
    Buf ty_rows[N_TYPED], ty_values[N_TYPED];
    /* the other stats */
    Buf st_event;     /* int32 */
    Buf st_name;      /* int16 or int32 (wide_stats) */
    Buf st_kind;      /* int8 */
    Buf st_value;     /* int64; a str/bytes stat's: its text's index */
    Buf st_text_end;  /* int64 per text: where it ends in blob */
    Buf blob;         /* the texts, one after another */
    int64_t n_texts;
    /* Made into Python objects once the walk (without the GIL) is done: */
    Buf ln_text;      /* each line's name then display name, one after another */
    Buf ln_text_end;  /* int64 per text: where it ends in ln_text */
    Buf pl_negative;  /* int64 per plane: its events of negative duration */
    const int8_t *slot;  /* per stat code: typed slot or -1 */
    int64_t nslot;
    int64_t n_events, unknown;
    Map *ev_map, *st_map; /* the current plane's */
    /* Codes written as int32 (1) or int16 (0): the columns the table keeps, written so
     * (no int32 column narrowed after, with both held: a fresh copy of each at 1 GB). */
    int wide_lines, wide_names, wide_stats;
    /* Durations written as int64 (1) or int32 (0): int32 until the first that does not fit,
     * where the column is widened once and goes on in int64 (long events are common: a
     * file is not decoded again for them). */
    int wide_dur;
    int *abandon;         /* the second half's: set when the first half failed */
    int tail_error;       /* the first half failed past its part of a cut line */
} Table;

/* A code as int32 (wide) or int16. */
#define PUT_CODE(b, wide, value)             \
    do {                                     \
        if (wide) {                          \
            PUT((b), int32_t, (value));      \
        } else {                             \
            PUT((b), int16_t, (value));      \
        }                                    \
    } while (0)

/* An int32 column made int64 in place, once: from the back, as each value's 8 bytes lie
 * at or past its 4. */
static int
buf_widen32(Buf *b)
{
    size_t n = b->len / sizeof(int32_t);
    if (buf_reserve(b, b->len) < 0) return -1;
    const int32_t *narrow = (const int32_t *)b->data;
    int64_t *wide = (int64_t *)b->data;
    for (size_t i = n; i-- > 0;) wide[i] = narrow[i];
    b->len = n * sizeof(int64_t);
    return 0;
}

/* The table's durations widened to int64 (where they are not yet). */
static int
table_widen_durations(Table *t)
{
    if (t->wide_dur) return 0;
    if (buf_widen32(&t->ev_dur) < 0) return -1;
    t->wide_dur = 1;
    return 0;
}

/* More lines than int16 codes hold, where the caller asked for them: OverflowError (it
 * decodes again with int32 lines). */
static int
lines_overflow(void)
{
    if (sink_error(ERR_OVERFLOW, "more lines than int16 codes hold", 0)) return -1;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyErr_SetString(PyExc_OverflowError, "more lines than int16 codes hold");
    PyGILState_Release(gil);
    return -1;
}

/* ps → ns rounded half up, as Python's (ps + 500) // 1000 on int64 (wrapping, flooring). */
static inline int64_t
ps_to_ns(int64_t ps)
{
    int64_t x = (int64_t)((uint64_t)ps + 500u);
    int64_t q = x / 1000;
    if (x % 1000 != 0 && x < 0) q -= 1;
    return q;
}

static int
table_stat(Table *t, Reader *r, int32_t row)
{
    int64_t metadata_id, value;
    int8_t kind;
    Reader text;
    if (parse_stat(r, &metadata_id, &kind, &value, &text) < 0) return -1;
    int32_t code = map_lookup(t->st_map, metadata_id);
    if (kind == KIND_REF) {
        value = map_lookup(t->st_map, value);
    } else if (kind == KIND_STR || kind == KIND_BYTES) {
        /* Only the value the stat ends with is kept: texts lie one after another. */
        if (buf_put(&t->blob, text.p, (size_t)(text.end - text.p)) < 0) return -1;
        value = t->n_texts++;
        PUT(&t->st_text_end, int64_t, t->blob.len);
    }
    if ((kind == KIND_INT64 || kind == KIND_UINT64) && code >= 0 && code < t->nslot &&
        t->slot[code] >= 0) {
        int s = t->slot[code];
        PUT(&t->ty_rows[s], int64_t, row);
        PUT(&t->ty_values[s], int64_t, value);
        return 0;
    }
    PUT(&t->st_event, int32_t, row);
    PUT_CODE(&t->st_name, t->wide_stats, code);
    PUT(&t->st_kind, int8_t, kind);
    PUT(&t->st_value, int64_t, value);
    return 0;
fail:
    return -1;
}

static int
table_event(Table *t, Reader *r, int32_t line_index, int64_t *negative)
{
    uint32_t field, wire;
    int64_t metadata_id = 0, offset = 0, duration = 0;
    int more;
    if (t->n_events >= INT32_MAX) return bad("more than 2**31 events");
    int32_t row = (int32_t)t->n_events;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 2 || field == 3)) {
            if (read_varint(r, &v) < 0) return -1;
            if (field == 1) metadata_id = (int64_t)v;
            else if (field == 2) offset = (int64_t)v;
            else duration = (int64_t)v;
        } else if (field == 4 && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0 || table_stat(t, &sub, row) < 0) return -1;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    int32_t name = map_lookup(t->ev_map, metadata_id);
    if (name < 0) t->unknown++;
    int64_t dur = ps_to_ns(duration);
    if (dur < 0) {
        dur = 0;
        (*negative)++;
    }
    if (!t->wide_lines && line_index > INT16_MAX) return lines_overflow();
    PUT_CODE(&t->ev_line, t->wide_lines, line_index);
    PUT_CODE(&t->ev_name, t->wide_names, name);
    PUT(&t->ev_start, int64_t, ps_to_ns(offset));
    if (dur > INT32_MAX && table_widen_durations(t) < 0) return -1;
    if (t->wide_dur) {
        PUT(&t->ev_dur, int64_t, dur);
    } else {
        PUT(&t->ev_dur, int32_t, dur);
    }
    t->n_events++;
    return 0;
fail:
    return -1;
}

/* Line [off, end) of plane `plane_index`: its events whose key lies in [from, to) and all its
 * other fields. A line cut between the two halves is walked by both: the first half its
 * events before the cut, writing the line's row (`row`); the second half the others, which
 * take the index -1 (the first half's last line, once appended). Both read all the line's
 * other fields, as its timestamp and texts are the last ones in it. An error past `to` is
 * marked t->tail_error: the second half, which walks the same bytes before it, meets it or
 * an earlier one. */
static int
table_line(Table *t, int64_t off, int64_t end, int32_t plane_index, int64_t *negative,
           int64_t from, int64_t to, int row)
{
    uint32_t field, wire;
    int64_t id = 0, timestamp = 0;
    int64_t name[2] = {0, 0}, display_name[2] = {0, 0};  /* [start, end) in the file */
    int32_t line_index = row ? (int32_t)(t->ln_plane.len / sizeof(int32_t)) : -1;
    int64_t first = t->n_events;
    int more, tail = 0;
    for (;;) {
        int64_t key = off;
        tail = key >= to && to < end;
        if ((more = src_key(&t->src, &off, end, &field, &wire)) != 1) break;
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 3)) {
            if (src_varint(&t->src, &off, end, &v) < 0) goto fail;
            if (field == 1) id = (int64_t)v;
            else timestamp = (int64_t)v;
        } else if (wire == 2 && (field == 2 || field == 11)) {
            int64_t *text = field == 2 ? name : display_name;
            if (src_len(&t->src, &off, end, &text[0], &text[1]) < 0) goto fail;
        } else if (wire == 2 && field == 4) {
            int64_t a, b;
            if (src_len(&t->src, &off, end, &a, &b) < 0) goto fail;
            if (key < from || key >= to) continue;  /* the other half's event */
            const uint8_t *p = source_need(&t->src, a, (size_t)(b - a));
            if (p == NULL) goto fail;
            Reader sub = {p, p + (b - a)};
            if (table_event(t, &sub, line_index, negative) < 0) goto fail;
        } else if (src_skip(&t->src, &off, end, wire) < 0) {
            goto fail;
        }
    }
    if (more < 0) goto fail;
    tail = to < end;
    /* Times are relative to the line's timestamp, which may come after its events. */
    int64_t *start = (int64_t *)t->ev_start.data;
    for (int64_t i = first; i < t->n_events; i++) {
        start[i] = (int64_t)((uint64_t)start[i] + (uint64_t)timestamp);
    }
    if (!row) return 0;
    PUT(&t->ln_plane, int32_t, plane_index);
    PUT(&t->ln_id, int64_t, id);
    /* The texts the line ends with (a repeated field's last value, as protobuf's). */
    int64_t *texts[2] = {name, display_name};
    for (int i = 0; i < 2; i++) {
        size_t n = (size_t)(texts[i][1] - texts[i][0]);
        const uint8_t *p = n ? source_need(&t->src, texts[i][0], n) : NULL;
        if (n && (p == NULL || buf_put(&t->ln_text, p, n) < 0)) goto fail;
        PUT(&t->ln_text_end, int64_t, (int64_t)t->ln_text.len);
    }
    return 0;
fail:
    if (tail) t->tail_error = 1;
    return -1;
}

/* The lines' names or display names (which = 0 or 1) as a list of str. */
static PyObject *
line_texts(const Table *t, int which)
{
    const int64_t *ends = (const int64_t *)t->ln_text_end.data;
    Py_ssize_t n = (Py_ssize_t)(t->ln_text_end.len / sizeof(int64_t) / 2);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = 2 * i + which > 0 ? ends[2 * i + which - 1] : 0, b = ends[2 * i + which];
        const char *text = t->ln_text.data ? t->ln_text.data + a : "";
        PyObject *str = PyUnicode_DecodeUTF8(text, b - a, "replace");
        if (str == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, str);
    }
    return out;
}

/* The planes' counts of negative durations as a list of int. */
static PyObject *
plane_negatives(const Table *t)
{
    const int64_t *counts = (const int64_t *)t->pl_negative.data;
    Py_ssize_t n = (Py_ssize_t)(t->pl_negative.len / sizeof(int64_t));
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *count = PyLong_FromLongLong(counts[i]);
        if (count == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, count);
    }
    return out;
}

static void
table_free(Table *t)
{
    Buf *bufs[] = {&t->ev_line, &t->ev_name, &t->ev_start, &t->ev_dur, &t->ln_plane,
                   &t->ln_id, &t->st_event, &t->st_name, &t->st_kind, &t->st_value,
                   &t->st_text_end, &t->blob, &t->ln_text, &t->ln_text_end,
                   &t->pl_negative};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        buf_free(bufs[i]);
    }
    for (int i = 0; i < N_TYPED; i++) {
        buf_free(&t->ty_rows[i]);
        buf_free(&t->ty_values[i]);
    }
}

/* ---- the walk, whole or in two halves ----------------------------------------------------
 *
 * The walk over the planes' lines, events and stats fills a Table's columns. It calls
 * nothing of Python's but to raise, so it runs without the GIL. A big file is walked on two
 * threads: its lines (in file order) are cut at one line's start into a first and a second
 * half, each walked into its own Table; the second Table's columns are then appended to the
 * first's, its rows, lines and texts counted on from the first's. Both halves walk the very
 * fields the one walk would, in the same order, and a half's first error is the one the
 * one walk would meet first in that half: the first half's error, else the second's, is the
 * one walk's error. */

/* Where the two halves meet: plane k's field has its key at plane_key and its body in
 * [body, body_end); its line at `line` (a key's offset in the body; its payload
 * [line_body, line_end)) starts the second half, or, where `event` is not 0, is cut in two
 * there: its events whose keys lie before that offset are the first half's. */
typedef struct {
    int32_t k;
    int64_t plane_key, body, body_end, line, line_body, line_end, event;
} Split;

/* The cut line at *p (the split's), its events before the cut (second: from it on). */
static int
walk_cut_line(Table *t, int64_t *p, int64_t pend, const Split *cut, int second,
              int64_t *negative)
{
    uint32_t field = 0, wire = 0;
    int64_t a, b;
    if (src_key(&t->src, p, pend, &field, &wire) < 0) return -1;
    if (field != 3 || wire != 2 || src_len(&t->src, p, pend, &a, &b) < 0 ||
        a != cut->line_body || b != cut->line_end) {
        return bad("the file changed while it was read");
    }
    return second ? table_line(t, a, b, cut->k, negative, cut->event, b, 0)
                  : table_line(t, a, b, cut->k, negative, a, cut->event, 1);
}

/* Plane `k`'s fields in [p, stop) (stop: its body's end, or where the second half starts),
 * its body ending at pend. With `cut` (a split inside this plane's line), the first half
 * ends (second: the second half begins) with its part of the cut line. */
static int
walk_plane(Table *t, Map *maps, Py_ssize_t n_maps, int32_t k, int64_t p, int64_t stop,
           int64_t pend, const Split *cut, int second)
{
    uint32_t field = 0, wire = 0;
    int64_t negative = 0;
    if (k >= n_maps) return bad("the file changed while it was read");
    t->ev_map = &maps[2 * k];
    t->st_map = &maps[2 * k + 1];
    if (cut != NULL && second && walk_cut_line(t, &p, pend, cut, 1, &negative) < 0) return -1;
    while (p < stop) {
        if (t->abandon != NULL && __atomic_load_n(t->abandon, __ATOMIC_RELAXED)) return -1;
        if (src_key(&t->src, &p, pend, &field, &wire) < 0) return -1;
        if (field == 3 && wire == 2) {
            int64_t a, b;
            if (src_len(&t->src, &p, pend, &a, &b) < 0 ||
                table_line(t, a, b, k, &negative, a, b, 1) < 0) return -1;
        } else if (src_skip(&t->src, &p, pend, wire) < 0) {
            return -1;
        }
    }
    if (p != stop) return bad("the file changed while it was read");
    if (cut != NULL && !second && walk_cut_line(t, &p, pend, cut, 0, &negative) < 0) return -1;
    PUT(&t->pl_negative, int64_t, negative);
    return 0;
fail:
    return -1;
}

/* The space's fields from *off to `stop` (a field's key, or the end), planes numbered on
 * from *k. */
static int
walk_space(Table *t, Map *maps, Py_ssize_t n_maps, int64_t *off, int64_t stop, int32_t *k)
{
    int64_t end = t->src.size;
    uint32_t field = 0, wire = 0;
    while (*off < stop) {
        if (src_key(&t->src, off, end, &field, &wire) < 0) return -1;
        if (field == 1 && wire == 2) {
            int64_t p, pend;
            if (src_len(&t->src, off, end, &p, &pend) < 0) return -1;
            if (*k >= n_maps) return bad("the file changed while it was read");
            if (walk_plane(t, maps, n_maps, *k, p, pend, pend, NULL, 0) < 0) return -1;
            (*k)++;
        } else if (src_skip(&t->src, off, end, wire) < 0) {
            return -1;
        }
    }
    if (*off != stop) return bad("the file changed while it was read");
    return 0;
}

/* The whole file (split NULL), or the first or the second half of it. */
static int
table_walk(Table *t, Map *maps, Py_ssize_t n_maps, const Split *split, int second)
{
    int64_t off = 0, end = t->src.size;
    int32_t k = 0;
    if (split == NULL) {
        if (walk_space(t, maps, n_maps, &off, end, &k) < 0) return -1;
    } else if (!second) {
        /* The space up to plane k, then plane k's fields before the second half's line. */
        uint32_t field = 0, wire = 0;
        int64_t p, pend;
        if (walk_space(t, maps, n_maps, &off, split->plane_key, &k) < 0) return -1;
        if (src_key(&t->src, &off, end, &field, &wire) < 0) return -1;
        if (field != 1 || wire != 2 || k != split->k ||
            src_len(&t->src, &off, end, &p, &pend) < 0 || p != split->body ||
            pend != split->body_end) {
            return bad("the file changed while it was read");
        }
        return walk_plane(t, maps, n_maps, k, p, split->line, pend,
                          split->event ? split : NULL, 0);
    } else {
        /* Plane k's fields from that line on, then the space after plane k. */
        k = split->k;
        if (walk_plane(t, maps, n_maps, k, split->line, split->body_end, split->body_end,
                       split->event ? split : NULL, 1) < 0)
            return -1;
        k++;
        off = split->body_end;
        if (walk_space(t, maps, n_maps, &off, end, &k) < 0) return -1;
    }
    if (k != n_maps) return bad("the file changed while it was read");
    return 0;
}

/* Where to cut the file: inside the line that holds `near` (a file offset), else at the
 * start of the line nearest it, found by a walk over the space's and planes' keys only (the
 * lines are skipped unread). 1 with *out, 0 where the file has no line or the walk meets an
 * error (the one walk then meets it). */
static int
find_split(Source *src, int64_t near, Split *out)
{
    ErrSink sink = {ERR_NONE, NULL, 0};
    ErrSink *saved = err_sink;
    err_sink = &sink;  /* an error here is the one walk's to raise */
    int64_t off = 0, end = src->size, best = -1;
    int32_t k = 0;
    uint32_t field = 0, wire = 0;
    while (off < end) {
        int64_t key = off;
        if (src_key(src, &off, end, &field, &wire) < 0) goto none;
        if (field == 1 && wire == 2) {
            int64_t p, pend;
            if (src_len(src, &off, end, &p, &pend) < 0) goto none;
            int64_t body = p;
            while (p < pend) {
                int64_t line = p;
                if (src_key(src, &p, pend, &field, &wire) < 0) goto none;
                if (field == 3 && wire == 2) {
                    int64_t a, b;
                    if (src_len(src, &p, pend, &a, &b) < 0) goto none;
                    int64_t dist = line > near ? line - near : near - line;
                    if (best < 0 || dist < best) {
                        best = dist;
                        *out = (Split){k, key, body, pend, line, a, b, 0};
                    }
                    if (line >= near) goto found;
                    if (near > a && near < b) {
                        /* `near` lies in this line: its events before `near` are the first
                         * half's, the others the second's (no walk over them here). */
                        *out = (Split){k, key, body, pend, line, a, b, near};
                        best = 0;
                        goto found;
                    }
                } else if (src_skip(src, &p, pend, wire) < 0) {
                    goto none;
                }
            }
            k++;
        } else if (src_skip(src, &off, end, wire) < 0) {
            goto none;
        }
    }
found:
    err_sink = saved;
    return best >= 0;
none:
    err_sink = saved;
    return 0;
}

/* Append b's bytes to a's (b is left empty). Where b is a big mapping (Linux), its pages are
 * moved behind a's whole pages rather than copied: a copy would write as many fresh pages,
 * which cost more than the walk that filled them; the bytes then only slide by the part of a
 * page that a's last page holds (memory already touched). */
static int
buf_append(Buf *a, Buf *b)
{
#if defined(__linux__)
    if (b->mapped && b->len >= BUF_MAP_BYTES) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t head = a->mapped ? a->len / page * page : 0;  /* a's pages left in place */
        size_t pad = a->len - head;                            /* a's bytes after them */
        size_t moved = (b->len + page - 1) / page * page;
        size_t cap = head + (pad + b->len + page - 1) / page * page;
        char *saved = NULL, *base;
        if (pad && a->mapped) {
            saved = PyMem_RawMalloc(pad);
            if (saved == NULL) {
                no_memory();
                return -1;
            }
            memcpy(saved, a->data + head, pad);
        }
        base = a->mapped ? mremap(a->data, a->cap, cap, MREMAP_MAYMOVE)
                         : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                -1, 0);
        if (base == MAP_FAILED) {
            PyMem_RawFree(saved);
            no_memory();
            return -1;
        }
        if (a->mapped) {
            a->data = base;
            a->cap = cap;
        }
        if (mremap(b->data, b->cap, moved, MREMAP_MAYMOVE | MREMAP_FIXED, base + head) ==
            MAP_FAILED) {
            if (!a->mapped) munmap(base, cap);
            PyMem_RawFree(saved);
            no_memory();
            return -1;
        }
        if (pad) {
            memmove(base + head + pad, base + head, b->len);
            memcpy(base + head, a->mapped ? saved : a->data, pad);
        }
        PyMem_RawFree(saved);
        if (!a->mapped) {
            PyMem_RawFree(a->data);
            a->data = base;
            a->cap = cap;
            a->mapped = 1;
        }
        a->len += b->len;
        b->data = NULL;
        b->len = b->cap = 0;
        b->mapped = 0;
        return 0;
    }
#endif
    if (b->len && buf_put(a, b->data, b->len) < 0) return -1;
    buf_free(b);
    return 0;
}

/* Add `by` to the int32, int16 or int64 values of b from byte `from` on. */
static void
add_i32(Buf *b, size_t from, int32_t by)
{
    int32_t *v = (int32_t *)(b->data + from);
    size_t n = (b->len - from) / sizeof(int32_t);
    for (size_t i = 0; i < n; i++) v[i] += by;
}

static void
add_i16(Buf *b, size_t from, int16_t by)
{
    int16_t *v = (int16_t *)(b->data + from);
    size_t n = (b->len - from) / sizeof(int16_t);
    for (size_t i = 0; i < n; i++) v[i] = (int16_t)(v[i] + by);
}

static void
add_i64(Buf *b, size_t from, int64_t by)
{
    int64_t *v = (int64_t *)(b->data + from);
    size_t n = (b->len - from) / sizeof(int64_t);
    for (size_t i = 0; i < n; i++) v[i] += by;
}

/* One column's append: b's bytes after a's, then `by` added to the appended int16 (size 2),
 * int32 (size 4) or int64 (size 8) values (size 0: none). */
typedef struct {
    Buf *a, *b;
    int size;
    int64_t by;
} Part;

/* A share of the merge, on one thread: its parts in order, then (where `texts` is not 0) the
 * appended str/bytes stats' values, indices of texts, counted on by `texts`: st_kind and
 * st_value are in the same share. */
typedef struct {
    Part *parts;
    size_t n;
    Table *a;
    size_t st_from;  /* a's first appended stat */
    int64_t texts;
    ErrSink sink;
    int rc;
} Share;

static int
merge_share(Share *sh)
{
    for (size_t i = 0; i < sh->n; i++) {
        Part *c = &sh->parts[i];
        size_t from = c->a->len;
        if (buf_append(c->a, c->b) < 0) return -1;
        if (c->size == 2 && c->by) add_i16(c->a, from, (int16_t)c->by);
        if (c->size == 4 && c->by) add_i32(c->a, from, (int32_t)c->by);
        if (c->size == 8 && c->by) add_i64(c->a, from, c->by);
    }
    if (sh->texts) {
        const int8_t *kind = (const int8_t *)sh->a->st_kind.data;
        int64_t *value = (int64_t *)sh->a->st_value.data;
        size_t n = sh->a->st_value.len / sizeof(int64_t);
        for (size_t i = sh->st_from; i < n; i++) {
            if (kind[i] == KIND_STR || kind[i] == KIND_BYTES) value[i] += sh->texts;
        }
    }
    return 0;
}

static void *
merge_share_thread(void *arg)
{
    Share *sh = arg;
    err_sink = &sh->sink;
    sh->rc = merge_share(sh);
    err_sink = NULL;
    return NULL;
}

/* Append the second half's table b to the first's, a (b is emptied): its rows, lines, texts
 * and text offsets counted on from a's; plane k, which both walked part of, counted once.
 * The columns are appended in two shares, events' and stats', on two threads: the bytes
 * that slide behind the first half's (see buf_append) are as many as the second half's. The
 * caller's thread has an ErrSink. */
static int
table_merge(Table *a, Table *b)
{
    int64_t events = a->n_events;
    int32_t lines = (int32_t)(a->ln_plane.len / sizeof(int32_t));
    if (events + b->n_events > INT32_MAX) return bad("more than 2**31 events");
    /* The one walk's int16 lines overflow at the first event past them: here the second
     * half's last event (its lines count on from -1, the cut line's, in order). */
    if (!a->wide_lines && b->n_events &&
        lines + ((const int16_t *)b->ev_line.data)[b->n_events - 1] > INT16_MAX) {
        return lines_overflow();
    }
    /* Durations as wide as the wider half's (a half widens where one does not fit). */
    if ((a->wide_dur || b->wide_dur) &&
        (table_widen_durations(a) < 0 || table_widen_durations(b) < 0)) {
        return -1;
    }
    /* plane k: the first half's count last, the second's first */
    int64_t *neg_a = (int64_t *)a->pl_negative.data, *neg_b = (int64_t *)b->pl_negative.data;
    neg_a[a->pl_negative.len / sizeof(int64_t) - 1] += neg_b[0];
    if (buf_put(&a->pl_negative, neg_b + 1, b->pl_negative.len - sizeof(int64_t)) < 0)
        return -1;
    Part ev[6 + 2 * N_TYPED] = {
        {&a->ev_line, &b->ev_line, a->wide_lines ? 4 : 2, lines},
        {&a->ev_name, &b->ev_name, 0, 0},
        {&a->ev_start, &b->ev_start, 0, 0}, {&a->ev_dur, &b->ev_dur, 0, 0},
        {&a->ln_plane, &b->ln_plane, 0, 0}, {&a->ln_id, &b->ln_id, 0, 0},
    };
    for (int i = 0; i < N_TYPED; i++) {
        ev[6 + 2 * i] = (Part){&a->ty_rows[i], &b->ty_rows[i], 8, events};
        ev[7 + 2 * i] = (Part){&a->ty_values[i], &b->ty_values[i], 0, 0};
    }
    Part st[] = {
        {&a->st_event, &b->st_event, 4, events}, {&a->st_name, &b->st_name, 0, 0},
        {&a->st_kind, &b->st_kind, 0, 0}, {&a->st_value, &b->st_value, 0, 0},
        {&a->st_text_end, &b->st_text_end, 8, (int64_t)a->blob.len},
        {&a->blob, &b->blob, 0, 0}, {&a->ln_text, &b->ln_text, 0, 0},
        {&a->ln_text_end, &b->ln_text_end, 8, (int64_t)a->ln_text.len},
    };
    Share events_share = {ev, sizeof ev / sizeof ev[0], a, 0, 0, {ERR_NONE, NULL, 0}, 0};
    Share stats_share = {st, sizeof st / sizeof st[0], a, a->st_value.len / sizeof(int64_t),
                         a->n_texts, {ERR_NONE, NULL, 0}, 0};
    ErrSink *caller = err_sink;  /* the shares' own sinks while they run */
    pthread_t thread;
    int threaded = pthread_create(&thread, NULL, merge_share_thread, &events_share) == 0;
    if (!threaded) merge_share_thread(&events_share);
    merge_share_thread(&stats_share);
    err_sink = caller;
    if (threaded) pthread_join(thread, NULL);
    if (events_share.rc < 0 || stats_share.rc < 0) {
        *err_sink = events_share.rc < 0 ? events_share.sink : stats_share.sink;
        return -1;
    }
    a->n_events += b->n_events;
    a->n_texts += b->n_texts;
    a->unknown += b->unknown;
    return 0;
}

/* The second half's walk, on its own thread. */
typedef struct {
    Table *t;
    Map *maps;
    Py_ssize_t n_maps;
    const Split *split;
    ErrSink sink;
    int rc;
} Half;

static void *
walk_second_half(void *arg)
{
    Half *h = arg;
    err_sink = &h->sink;
    h->rc = table_walk(h->t, h->maps, h->n_maps, h->split, 1);
    err_sink = NULL;
    return NULL;
}

/* The walk on two threads where the file has a line to cut at and a thread starts: 1 (rc in
 * *rc, errors in *sink), else 0 (nothing done). Runs without the GIL. */
static int
table_walk_halves(Table *t, Map *maps, Py_ssize_t n_maps, int64_t near, int *rc,
                  ErrSink *sink, int64_t *cut_at)
{
    Split split;
    Source probe = t->src;
    probe.win = NULL;
    probe.win_cap = probe.win_len = 0;
    probe.win_off = -1;
    probe.window = 4096;  /* keys only: a line's key is all that is read of it */
    int found = find_split(&probe, near, &split);
    PyMem_RawFree(probe.win);
    if (!found) return 0;
    Table second;  /* its own source window and columns; the same stat slots */
    memset(&second, 0, sizeof second);
    second.src = t->src;
    second.src.win = NULL;
    second.src.win_cap = second.src.win_len = 0;
    second.src.win_off = -1;
    second.slot = t->slot;
    second.nslot = t->nslot;
    second.wide_lines = t->wide_lines;
    second.wide_names = t->wide_names;
    second.wide_stats = t->wide_stats;
    int abandon = 0;
    second.abandon = &abandon;
    Half h = {&second, maps, n_maps, &split, {ERR_NONE, NULL, 0}, 0};
    pthread_t thread;
    if (pthread_create(&thread, NULL, walk_second_half, &h) != 0) return 0;
    *cut_at = split.event ? split.event : split.line;
    err_sink = sink;
    int first = table_walk(t, maps, n_maps, &split, 0);
    if (first < 0 && !t->tail_error) __atomic_store_n(&abandon, 1, __ATOMIC_RELAXED);
    pthread_join(thread, NULL);
    if (first < 0 && !(t->tail_error && h.rc < 0)) {
        *rc = -1;
    } else if (h.rc < 0) {
        /* The one walk would have counted past 2**31 events, or past int16 lines, at an
         * event the second half decoded before its error (its lines in order: the last
         * decoded has the highest index). */
        int32_t lines = (int32_t)(t->ln_plane.len / sizeof(int32_t));
        if (t->n_events + second.n_events > INT32_MAX) {
            bad("more than 2**31 events");
        } else if (!t->wide_lines && second.n_events &&
                   lines + ((const int16_t *)second.ev_line.data)[second.n_events - 1] >
                       INT16_MAX) {
            lines_overflow();
        } else {
            *sink = h.sink;
        }
        *rc = -1;
    } else {
        *rc = table_merge(t, &second);
    }
    err_sink = NULL;
    PyMem_RawFree(second.src.win);
    table_free(&second);
    return 1;
}

/* A file this big or bigger is walked on two threads (where `threads` allows): below it the
 * thread's start and the columns' append cost more than half the walk saves. */
#define SPLIT_BYTES ((long long)32 << 20)

/* decode_table(source, maps, slots[, (line, name, stat name code widths: 2 or 4 bytes)],
 * threads=2, split_bytes=SPLIT_BYTES, near=-1) -> dict of columns (see xspace_to_tables.py),
 * "cut_at": where the second half began, or -1, and "dur_bytes": 4 where every duration fits
 * int32 (ev_dur int32), else 8 (int64); OverflowError where lines of 2 bytes
 * were asked for and there are more than they hold.
 * maps: per plane (event_keys, event_codes, stat_keys, stat_codes), int64 keys sorted
 * (None for a plane without metadata)
 * ascending and int32 codes; slots: int8 per stat code, the typed slot or -1.
 * threads: 1 walks the file on the calling thread alone; 2 walks a file of split_bytes or
 * more in two halves cut at the line nearest the offset `near` (-1: the middle); the
 * columns are the same either way. */
static PyObject *
decode_table(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"source", "maps", "slots", "widths", "threads", "split_bytes",
                               "near", NULL};
    PyObject *source, *maps_arg, *slots_arg;
    int widths[3] = {4, 4, 4};
    int threads = 2;
    long long split_bytes = SPLIT_BYTES, near = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O|(iii)$iLL", keywords, &source,
                                     &PyList_Type, &maps_arg, &slots_arg, &widths[0],
                                     &widths[1], &widths[2], &threads, &split_bytes, &near)) {
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (widths[i] != 2 && widths[i] != 4) {
            PyErr_SetString(PyExc_ValueError, "code widths are 2 or 4 bytes");
            return NULL;
        }
    }
    Table t;
    memset(&t, 0, sizeof t);
    t.wide_lines = widths[0] == 4;
    t.wide_names = widths[1] == 4;
    t.wide_stats = widths[2] == 4;
    Py_buffer view, slots_view;
    view.obj = NULL;
    slots_view.obj = NULL;
    Py_ssize_t n_maps = PyList_GET_SIZE(maps_arg);
    Map *maps = PyMem_RawCalloc((size_t)(2 * n_maps + 1), sizeof(Map));
    Py_buffer *views = PyMem_RawCalloc((size_t)(4 * n_maps + 1), sizeof(Py_buffer));
    PyObject *result = NULL;
    if (maps == NULL || views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_maps; i++) {
        PyObject *item = PyList_GET_ITEM(maps_arg, i);
        /* None: a plane without metadata (its maps stay empty, as calloc left them): a file
         * of a million empty planes must not cost a million buffer views. */
        if (item == Py_None) continue;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_SetString(PyExc_TypeError, "each map is (event keys, codes, stat keys, codes)");
            goto done;
        }
        if (map_init(&maps[2 * i], PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1),
                     &views[4 * i], &views[4 * i + 1]) < 0 ||
            map_init(&maps[2 * i + 1], PyTuple_GET_ITEM(item, 2), PyTuple_GET_ITEM(item, 3),
                     &views[4 * i + 2], &views[4 * i + 3]) < 0) {
            goto done;
        }
    }
    if (PyObject_GetBuffer(slots_arg, &slots_view, PyBUF_SIMPLE) < 0) goto done;
    t.slot = slots_view.buf;
    t.nslot = slots_view.len;
    if (source_open(&t.src, source, &view) < 0) goto done;
    /* The maps', slots' and source's buffers are held by their views until `done`. */
    int rc;
    ErrSink sink = {ERR_NONE, NULL, 0};
    int64_t cut_at = -1;
    t.src.nogil = 1;
    Py_BEGIN_ALLOW_THREADS
    if (threads < 2 || t.src.size < split_bytes ||
        !table_walk_halves(&t, maps, n_maps, near >= 0 ? near : t.src.size / 2, &rc, &sink,
                           &cut_at)) {
        rc = table_walk(&t, maps, n_maps, NULL, 0);
    }
    Py_END_ALLOW_THREADS
    t.src.nogil = 0;
    if (rc < 0) {
        sink_raise(&sink);
        goto done;
    }
    /* Hand the columns over; from here on nothing is freed twice. */
    PyObject *out = PyDict_New();
    if (out == NULL) goto done;
    PyObject *counts = Py_BuildValue("(LL)", (long long)t.n_events, (long long)t.unknown);
    int failed = counts == NULL || PyDict_SetItemString(out, "counts", counts) < 0;
    Py_XDECREF(counts);
    /* Where the second half began (a line's or an event's key), -1 for one walk. */
    PyObject *cut = PyLong_FromLongLong((long long)cut_at);
    failed = failed || cut == NULL || PyDict_SetItemString(out, "cut_at", cut) < 0;
    Py_XDECREF(cut);
    /* The durations' width in bytes: 4 (int32) where every one fits, else 8. */
    PyObject *dur_bytes = PyLong_FromLong(t.wide_dur ? 8 : 4);
    failed = failed || dur_bytes == NULL || PyDict_SetItemString(out, "dur_bytes", dur_bytes) < 0;
    Py_XDECREF(dur_bytes);
    PyObject *lists[3] = {line_texts(&t, 0), line_texts(&t, 1), plane_negatives(&t)};
    const char *list_names[3] = {"line_name", "line_display_name", "negative"};
    for (int i = 0; i < 3; i++) {
        failed = failed || lists[i] == NULL ||
            PyDict_SetItemString(out, list_names[i], lists[i]) < 0;
        Py_XDECREF(lists[i]);
    }
    failed = failed ||
        add_column(out, "ev_line", &t.ev_line) < 0 ||
        add_column(out, "ev_name", &t.ev_name) < 0 ||
        add_column(out, "ev_start", &t.ev_start) < 0 ||
        add_column(out, "ev_dur", &t.ev_dur) < 0 ||
        add_column(out, "ln_plane", &t.ln_plane) < 0 ||
        add_column(out, "ln_id", &t.ln_id) < 0 ||
        add_column(out, "st_event", &t.st_event) < 0 ||
        add_column(out, "st_name", &t.st_name) < 0 ||
        add_column(out, "st_kind", &t.st_kind) < 0 ||
        add_column(out, "st_value", &t.st_value) < 0 ||
        add_column(out, "st_text_end", &t.st_text_end) < 0 ||
        add_column(out, "blob", &t.blob) < 0;
    for (int i = 0; i < N_TYPED && !failed; i++) {
        char name[32];
        snprintf(name, sizeof name, "ty_rows%d", i);
        failed = add_column(out, name, &t.ty_rows[i]) < 0;
        snprintf(name, sizeof name, "ty_values%d", i);
        failed = failed || add_column(out, name, &t.ty_values[i]) < 0;
    }
    if (failed) {
        Py_DECREF(out);
        goto done;
    }
    result = out;
done:
    if (maps != NULL) {
        for (Py_ssize_t i = 0; i < 2 * n_maps; i++) PyMem_RawFree(maps[i].direct);
    }
    if (views != NULL) {
        for (Py_ssize_t i = 0; i < 4 * n_maps; i++) {
            if (views[i].obj != NULL) PyBuffer_Release(&views[i]);
        }
    }
    PyMem_RawFree(maps);
    PyMem_RawFree(views);
    if (slots_view.obj != NULL) PyBuffer_Release(&slots_view);
    source_close(&t.src, &view);
    table_free(&t);
    return result;
}

static PyMethodDef module_methods[] = {
    {"decode", decode, METH_O,
     "Decode XSpace bytes into flat columns (see formats/xspace_columns.py)."},
    {"scan", scan, METH_O,
     "An XSpace's fields but its planes' lines, as bytes: (rest of the space, planes)."},
    {"decode_table", (PyCFunction)(void (*)(void))decode_table, METH_VARARGS | METH_KEYWORDS,
     "Decode an XSpace (a file descriptor or bytes) into a host table's columns; optional "
     "(line, name, stat name) code widths in bytes, 2 or 4 (default 4)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_xspace_decode", "Columnar XSpace decoder.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__xspace_decode(void)
{
    if (PyType_Ready(&ColumnType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
